//! What every loop runs on: the Release controller's reconcile, the drift loop and the health
//! loop share one [`Context`] (the home cluster, the source cache, appliers and discovery per
//! target), gate their work on the shards this process holds ([`ShardGate`]), report progress
//! ([`Progress`]), find the Releases of a cluster ([`ReleaseIndex`]) and tell the work queue
//! what to do next ([`Requeue`]).
//!
//! Design: DESIGN.md "Daemon" (one engine for CLI and daemon), "Sharding".

use std::any::Any;
use std::sync::Arc;

use crate::engine::tenant_cache::TenantCache;
use std::time::{Duration, Instant};

use crate::engine::api::Release;
use crate::engine::apply::Applier;
use crate::engine::cluster::Target;
use crate::engine::connect::Connection;
use crate::engine::render::ClusterInfo;
use crate::engine::source::Coordinator;
use crate::engine::store::RenderStore;

/// What the work queue does next with a Release.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requeue {
    /// Reconcile again after this delay: someone waits for it (a rollout in progress, a hold
    /// that can time out, a retry, drift being put back).
    After(Duration),
    /// The periodic pass of `syncPolicy.interval`, after this delay: nothing is waiting for
    /// it, so a daemon queues it behind every event (a spec change never waits for a fleet's
    /// interval passes).
    Interval(Duration),
    /// A transient failure without `retryBackoff`: the work queue's own rate limit decides.
    RateLimited,
    /// Only events and the informer resync start the next reconcile.
    Never,
}

/// Whether this process owns a Release's shard (DESIGN.md "Sharding").
pub trait ShardGate: Send + Sync {
    fn owns(&self, release: &Release) -> bool;
    /// Whether this process works on the shard of `cluster_key` (`<namespace>/<name>` of a
    /// Cluster, as [`crate::engine::cluster::cluster_key`] names a Release's target): a
    /// Cluster's own writes (its status, its finalizer) come from the replica whose shard
    /// holds the Releases that target it, not from every replica.
    fn owns_key(&self, cluster_key: &str) -> bool;
}

/// The gate of a process that owns every shard: the CLI, and a daemon without sharding.
pub struct OwnsEveryShard;

impl ShardGate for OwnsEveryShard {
    fn owns(&self, _: &Release) -> bool {
        true
    }

    fn owns_key(&self, _: &str) -> bool {
        true
    }
}

/// What a reconcile reports while it works (the CLI draws progress from it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProgressEvent {
    Rendered { render_ref: String, objects: usize },
    DryRunPassed { objects: usize },
    WaveStarted { wave: i32, objects: usize },
    WaveApplied { wave: i32, objects: usize },
    Pruned { objects: usize },
}

/// Receives [`ProgressEvent`]s.
pub trait Progress: Send + Sync {
    fn event(&self, event: ProgressEvent);
}

/// The Releases that deploy to one cluster (the spec's releaseByCluster index). The daemon
/// answers from its informer cache; without one the gate lists the namespace's Releases.
pub trait ReleaseIndex: Send + Sync {
    fn on_cluster(&self, cluster_key: &str) -> Vec<Arc<Release>>;
}

/// A cached object, typed by its kind (see [`Listers`]).
pub type CachedObject = Arc<dyn Any + Send + Sync>;

/// The process's caches of convoy's own kinds: the daemon's informers. The spec's loops read
/// the Release's inventory, its Cluster, its source and the rule sets "from the cache"
/// (health-loop.txt assessment steps 1, 3 and 4; reconcile-flow.txt stageRender step 2);
/// without one (the CLI), or for what a cache does not hold, they read the API server. At
/// 10,000 Releases those reads were most of a steady daemon's requests.
pub trait Listers: Send + Sync {
    /// The cached object `namespace/name` of `kind` (its Kubernetes kind; an empty namespace
    /// for a cluster-scoped one). `None` when this cache cannot say: the kind is not cached
    /// here, the object is not (yet) in it, or it is absent. The caller then reads the API
    /// server, so a miss costs what no cache costs.
    fn get(&self, kind: &str, namespace: &str, name: &str) -> Option<CachedObject>;

    /// Every object of `kind` (in `namespace`; `None`: a cluster-scoped kind), or `None` when
    /// this cache does not hold that kind or has not listed it yet.
    fn list(&self, kind: &str, namespace: Option<&str>) -> Option<Vec<CachedObject>>;
}

/// The object `namespace/name` of kind `K` from `listers`, when it holds it.
pub fn cached<K>(listers: Option<&dyn Listers>, namespace: &str, name: &str) -> Option<Arc<K>>
where
    K: kube::Resource<DynamicType = ()> + Send + Sync + 'static,
{
    listers?
        .get(&K::kind(&()), namespace, name)?
        .downcast::<K>()
        .ok()
}

/// Every object of kind `K` (in `namespace`) from `listers`, when it holds that kind.
pub fn cached_list<K>(listers: Option<&dyn Listers>, namespace: Option<&str>) -> Option<Vec<Arc<K>>>
where
    K: kube::Resource<DynamicType = ()> + Send + Sync + 'static,
{
    listers?
        .list(&K::kind(&()), namespace)?
        .into_iter()
        .map(|o| o.downcast::<K>().ok())
        .collect()
}

/// What every reconcile shares: the home cluster, the source cache, caches per target.
pub struct Context {
    /// The cluster the Releases live in.
    pub home: Connection,
    pub coordinator: Arc<Coordinator>,
    pub shard: Arc<dyn ShardGate>,
    /// Requests in flight per apply, dry run and prune.
    pub concurrency: usize,
    pub progress: Option<Arc<dyn Progress>>,
    /// Where renders and history are kept; `None` disables pins, rollbacks and history.
    pub store: Option<Arc<dyn RenderStore>>,
    /// The most bytes a Release's history may hold in the store
    /// ([`crate::engine::store::STORE_BUDGET_BYTES`]).
    pub store_budget: u64,
    /// The releaseByCluster index for cluster waves.
    pub releases: Option<Arc<dyn ReleaseIndex>>,
    /// As whom a Release acts and what it may reach (see `engine::tenancy`).
    pub tenancy: Arc<crate::engine::tenancy::Tenancy>,
    /// The deadline of one render (helm, kustomize).
    pub render_timeout: Duration,
    /// Where the installation's Secret digest key is read from (`None`: no key; Secrets get
    /// no digest and are always compared by a dry run).
    pub digest_key: Option<Arc<crate::engine::digest_key::KeyCell>>,
    /// Cached reads of convoy's own kinds (the daemon's informers); `None`: the API server.
    pub listers: Option<Arc<dyn Listers>>,
    /// Targets that answered a probe lately (see [`crate::engine::cluster::Probes`]).
    pub probes: crate::engine::cluster::Probes,
    /// Whether renders may take a recent fetch of the same source and ref
    /// ([`crate::engine::source::Reuse`]): a daemon, whose source controllers poll the
    /// sources and wake the Releases on a new revision. Off for the CLI, which fetches.
    pub reuse_fetches: bool,
    /// How fresh the drift and health loops' reads of live objects must be: the daemon's
    /// periodic passes read the API server's watch cache; the CLI reads the latest.
    pub observer_reads: crate::engine::apply::Freshness,
    /// Watches that answer those reads before the API server does (a daemon's); `None`:
    /// every read is a request.
    pub watched: Option<Arc<dyn crate::engine::apply::WatchedTargets>>,
    /// The render of each Release this process saw stored and in the history.
    pub known_stored: crate::engine::store::known::KnownStored,
    /// The version of each ReleaseInventory this process last read at its latest or wrote
    /// (the controller then takes an unchanged one from `listers`).
    pub seen_inventories: Arc<crate::engine::seen_inventories::SeenInventories>,
    /// Each target's discovery answers, with when they were read.
    cluster_info: TenantCache<(Instant, ClusterInfo)>,
    /// Appliers per server and identity.
    appliers: TenantCache<Arc<Applier>>,
}

/// An applier unused this long is dropped (a Cluster's rotated credentials, a deleted
/// Release's ServiceAccount): its client and discovery cache go with it.
const APPLIER_IDLE: Duration = Duration::from_secs(3600);

/// How long a target's discovery answers (version, API versions, scopes) are reused.
const CLUSTER_INFO_TTL: Duration = Duration::from_secs(600);

impl Context {
    pub fn new(home: Connection, coordinator: Arc<Coordinator>) -> Self {
        Self {
            home,
            coordinator,
            shard: Arc::new(OwnsEveryShard),
            concurrency: crate::engine::apply::DEFAULT_CONCURRENCY,
            progress: None,
            store: None,
            store_budget: crate::engine::store::STORE_BUDGET_BYTES,
            releases: None,
            tenancy: Arc::default(),
            render_timeout: crate::engine::render::DEFAULT_RENDER_TIMEOUT,
            digest_key: None,
            listers: None,
            probes: crate::engine::cluster::Probes::default(),
            reuse_fetches: false,
            known_stored: Default::default(),
            seen_inventories: Default::default(),
            observer_reads: Default::default(),
            watched: None,
            cluster_info: TenantCache::new(CLUSTER_INFO_TTL),
            appliers: TenantCache::new(APPLIER_IDLE),
        }
    }

    pub(crate) fn report(&self, event: ProgressEvent) {
        if let Some(p) = &self.progress {
            p.event(event);
        }
    }

    /// The applier for a target, reused across reconciles (its discovery cache with it), one
    /// per server and identity: a Release's impersonated ServiceAccount, or a Cluster's
    /// credentials at their current version, never another's.
    /// Each tenant namespace holds a bounded number (`engine::tenant_cache`).
    pub fn applier(&self, target: &Target) -> Arc<Applier> {
        self.appliers
            .get_or_insert_with(&target.conn.cache_key(), &target.conn.holder, || {
                let mut applier = Applier::new(target.conn.client.clone(), self.concurrency);
                if let Some(watched) = &self.watched {
                    applier = applier.with_watched(watched.for_connection(&target.conn));
                }
                Arc::new(applier)
            })
    }

    /// The installation's digest key, if this process can read it.
    pub async fn digest_key(&self) -> Option<crate::engine::digest_key::DigestKey> {
        match &self.digest_key {
            Some(cell) => cell.get().await,
            None => None,
        }
    }

    /// The key of the Secret digests this process records in inventories: the
    /// installation's, else one of this process alone (see `digest_key::ephemeral`).
    pub async fn inventory_digest_key(&self) -> crate::engine::digest_key::DigestKey {
        match self.digest_key().await {
            Some(key) => key,
            None => crate::engine::digest_key::ephemeral().clone(),
        }
    }

    /// The connections a reconcile of `release` reads its inputs with: convoy's own kinds as
    /// convoy, Secrets and ConfigMaps as the Release's tenant.
    pub fn reader_for(
        &self,
        release: &Release,
    ) -> Result<crate::engine::objects::ObjectReader, crate::engine::connect::ConnectError> {
        let tenant = self.tenancy.connection_for(&self.home, release)?;
        Ok(crate::engine::objects::ObjectReader::Tenant {
            own: self.home.client.clone(),
            tenant: tenant.client,
            listers: self.listers.clone(),
        })
    }

    /// The cache of convoy's own kinds, if this process keeps one.
    pub fn listers(&self) -> Option<&dyn Listers> {
        self.listers.as_deref()
    }

    /// The target cluster of `release`, as the Release's tenant.
    pub async fn resolve_target(
        &self,
        release: &Release,
    ) -> Result<Target, crate::engine::cluster::ClusterError> {
        let lookups = crate::engine::cluster::Lookups {
            listers: self.listers(),
            probes: Some(&self.probes),
        };
        crate::engine::cluster::resolve_target(&self.home, &self.tenancy, release, lookups).await
    }

    /// The target's version and APIs for Helm, cached; `None` if discovery fails.
    pub async fn cluster_info(&self, target: &Target) -> Option<ClusterInfo> {
        if let Some((at, info)) = self.cluster_info.get(&target.conn.cache_key())
            && at.elapsed() < CLUSTER_INFO_TTL
        {
            return Some(info);
        }
        match ClusterInfo::discover(&target.conn.client).await {
            Ok(info) => {
                self.cluster_info.insert(
                    target.conn.cache_key(),
                    &target.conn.holder,
                    (Instant::now(), info.clone()),
                );
                Some(info)
            }
            Err(e) => {
                tracing::warn!(server = %target.conn.server, "discovery failed, rendering without cluster capabilities: {e}");
                None
            }
        }
    }
}

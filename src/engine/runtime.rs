//! What every loop runs on: the Release controller's reconcile, the drift loop and the health
//! loop share one [`Context`] (the home cluster, the source cache, appliers and discovery per
//! target), gate their work on the shards this process holds ([`ShardGate`]), report progress
//! ([`Progress`]), find the Releases of a cluster ([`ReleaseIndex`]) and tell the work queue
//! what to do next ([`Requeue`]).
//!
//! Design: DESIGN.md "Daemon" (one engine for CLI and daemon), "Sharding".

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::engine::locks::lock;
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
    /// Reconcile again after this delay.
    After(Duration),
    /// A transient failure without `retryBackoff`: the work queue's own rate limit decides.
    RateLimited,
    /// Only events and the informer resync start the next reconcile.
    Never,
}

/// Whether this process owns a Release's shard (DESIGN.md "Sharding").
pub trait ShardGate: Send + Sync {
    fn owns(&self, release: &Release) -> bool;
}

/// The gate of a process that owns every shard: the CLI, and a daemon without sharding.
pub struct OwnsEveryShard;

impl ShardGate for OwnsEveryShard {
    fn owns(&self, _: &Release) -> bool {
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
    /// The releaseByCluster index for cluster waves.
    pub releases: Option<Arc<dyn ReleaseIndex>>,
    /// As whom a Release acts and what it may reach (see `engine::tenancy`).
    pub tenancy: Arc<crate::engine::tenancy::Tenancy>,
    /// The deadline of one render (helm, kustomize).
    pub render_timeout: Duration,
    /// Where the installation's Secret digest key is read from (`None`: no key; Secrets get
    /// no digest and are always compared by a dry run).
    pub digest_key: Option<Arc<crate::engine::digest_key::KeyCell>>,
    cluster_info: Mutex<HashMap<String, (Instant, ClusterInfo)>>,
    /// Appliers per server and identity, with when each was last used.
    appliers: Mutex<HashMap<String, (Instant, Arc<Applier>)>>,
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
            releases: None,
            tenancy: Arc::default(),
            render_timeout: crate::engine::render::DEFAULT_RENDER_TIMEOUT,
            digest_key: None,
            cluster_info: Mutex::new(HashMap::new()),
            appliers: Mutex::new(HashMap::new()),
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
    pub fn applier(&self, target: &Target) -> Arc<Applier> {
        let mut appliers = lock(&self.appliers);
        let key = target.conn.cache_key();
        if !appliers.contains_key(&key) {
            appliers.retain(|_, (used, _)| used.elapsed() < APPLIER_IDLE);
        }
        let entry = appliers.entry(key).or_insert_with(|| {
            (
                Instant::now(),
                Arc::new(Applier::new(target.conn.client.clone(), self.concurrency)),
            )
        });
        entry.0 = Instant::now();
        entry.1.clone()
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
        })
    }

    /// The target cluster of `release`, as the Release's tenant.
    pub async fn resolve_target(
        &self,
        release: &Release,
    ) -> Result<Target, crate::engine::cluster::ClusterError> {
        crate::engine::cluster::resolve_target(&self.home, &self.tenancy, release).await
    }

    /// The target's version and APIs for Helm, cached; `None` if discovery fails.
    pub async fn cluster_info(&self, target: &Target) -> Option<ClusterInfo> {
        if let Some((at, info)) = lock(&self.cluster_info).get(&target.conn.cache_key())
            && at.elapsed() < CLUSTER_INFO_TTL
        {
            return Some(info.clone());
        }
        match ClusterInfo::discover(&target.conn.client).await {
            Ok(info) => {
                lock(&self.cluster_info)
                    .insert(target.conn.cache_key(), (Instant::now(), info.clone()));
                Some(info)
            }
            Err(e) => {
                tracing::warn!(server = %target.conn.server, "discovery failed, rendering without cluster capabilities: {e}");
                None
            }
        }
    }
}

//! `convoy daemon`: the engine wired into controllers — the Release controller, the observer's
//! drift and health loops, the Cluster and source controllers — with sharding by Lease,
//! health and metrics endpoints, and a graceful shutdown.
//!
//! Design: DESIGN.md sections 2–4. The loops call the same engine functions the CLI calls;
//! the spec's two processes (controller-manager and observer) are `--role controller` and
//! `--role observer` of this one binary.

pub mod checks;
pub mod drift_wake;
pub mod enqueue;
pub mod http;
pub mod informer;
pub mod listers;
pub mod live;
pub mod metrics;
pub mod passes;
pub mod queue;
pub mod shard;
pub mod syncing;
pub mod worker;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use kube::runtime::events::{Recorder, Reporter};
use kube::{Api, Client, Config, ResourceExt};

use self::enqueue::{
    VERDICT_GRACE, applied_or_healthy_changed, attempted_render_changed, healthy_verdict_to_record,
    inventory_wakes_controller, inventory_wakes_observer, should_enqueue_on_update,
    verdict_follows,
};
use self::informer::{Handler, key_of};
use self::metrics::{CountRequestsLayer, Metrics};
use self::passes::Shared;
use self::queue::WorkQueue;
use self::shard::{HeldShards, LeaseConfig, cluster_key};
use crate::engine::api::{Release, ReleaseInventory};
use crate::engine::connect::{ClientFactory, Connection};
use crate::engine::health::HealthMemory;
use crate::engine::runtime::{Context, OwnsEveryShard, ShardGate};
use crate::engine::source::{Cache as SourceCache, Coordinator};

/// Which loops a process runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The Release controller and the Cluster and source controllers.
    Controller,
    /// The drift loop and the health loop.
    Observer,
    All,
}

impl Role {
    fn controller(self) -> bool {
        matches!(self, Role::Controller | Role::All)
    }
    fn observer(self) -> bool {
        matches!(self, Role::Observer | Role::All)
    }
}

/// Everything `convoy daemon` is told.
#[derive(Debug, Clone)]
pub struct DaemonConfig {
    pub role: Role,
    /// 0: no sharding (this process owns everything).
    pub shards: u32,
    pub lease_namespace: String,
    /// The render store; the Kubernetes one keeps its Secrets in the Lease namespace.
    pub render_store: crate::engine::store::StoreSpec,
    pub identity: String,
    pub lease_duration: Duration,
    pub listen: SocketAddr,
    pub workers: usize,
    pub concurrency: usize,
    pub cache_dir: PathBuf,
    /// How long the source cache keeps what no one uses.
    pub cache_retention: Duration,
    /// Every key of every loop is queued again this often (the informer resync).
    pub resync: Duration,
    /// Only these namespaces (all when empty).
    pub namespaces: Vec<String>,
    /// As whom Releases act and what they may reach.
    pub tenancy: crate::engine::tenancy::Tenancy,
    /// What sources may be fetched from, and a fetch's deadline.
    pub sources: crate::engine::source::SourcePolicy,
    /// The deadline of one render.
    pub render_timeout: Duration,
    /// The deadline of one API call (`--request-timeout`).
    pub api_timeout: Duration,
    /// How long SIGTERM waits for the passes in flight before it cancels them.
    pub shutdown_grace: Duration,
}

/// Why the daemon could not run.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("cannot build the Kubernetes client")]
    Connect(#[source] crate::engine::connect::ConnectError),
    #[error("cannot listen on {addr}")]
    Listen {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// The releaseByCluster index over the informer cache.
struct ReleasesByCluster(Arc<informer::Cache<Release>>);

impl crate::engine::runtime::ReleaseIndex for ReleasesByCluster {
    fn on_cluster(&self, key: &str) -> Vec<Arc<Release>> {
        // Stubs too: a stub has no conditions, so a later wave waits for it rather than
        // going ahead as if it did not exist.
        self.0
            .all_entries()
            .into_iter()
            .filter(|r| cluster_key(r) == key)
            .collect()
    }
}

/// The Release and inventory caches of a sharded replica: in full only for the shards it
/// holds. Other Releases are kept as stubs (metadata and spec, the status's observed
/// generation: what the enqueue rules, the source wake-ups and a takeover look at), their
/// inventories not at all. A pass that finds a stub of a shard now held reads the Release
/// from the API ([`passes::release`]).
fn trimmed_caches(
    held: &HeldShards,
) -> (
    Arc<informer::Cache<Release>>,
    Arc<informer::Cache<ReleaseInventory>>,
) {
    let gate = held.clone();
    let releases = Arc::new(informer::Cache::trimmed(informer::Trim {
        needed: Box::new(move |r: &Release| gate.owns(r)),
        stub: Box::new(|r: &Release| Some(release_stub(r))),
    }));
    let (gate, of) = (held.clone(), releases.clone());
    let inventories = Arc::new(informer::Cache::trimmed(informer::Trim {
        // An inventory seen before its Release is kept.
        needed: Box::new(move |inv: &ReleaseInventory| {
            of.get_any(&key_of(inv)).is_none_or(|r| gate.owns(&r))
        }),
        stub: Box::new(|_: &ReleaseInventory| None),
    }));
    (releases, inventories)
}

/// A Release as a stub: what the enqueue rules, the source wake-ups, a takeover and the
/// cluster-wave gate read of a Release of another shard — its identity, resource version,
/// generation, deletion, `sync-requested-at`, source, cluster and cluster wave, and of its
/// status the observed generation. Nothing else: a replica keeps a stub for every Release of
/// the fleet it does not work on, so each byte counts thousands of times.
fn release_stub(r: &Release) -> Release {
    use crate::engine::api::annotations::SYNC_REQUESTED_AT;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    let m = &r.metadata;
    let sync_requested = m
        .annotations
        .as_ref()
        .and_then(|a| a.get(SYNC_REQUESTED_AT))
        .map(|v| [(SYNC_REQUESTED_AT.to_string(), v.clone())].into());
    Release {
        metadata: ObjectMeta {
            name: m.name.clone(),
            namespace: m.namespace.clone(),
            uid: m.uid.clone(),
            resource_version: m.resource_version.clone(),
            generation: m.generation,
            deletion_timestamp: m.deletion_timestamp.clone(),
            annotations: sync_requested,
            ..Default::default()
        },
        spec: crate::engine::api::ReleaseSpec {
            source: r.spec.source.clone(),
            content: Default::default(),
            cluster: r.spec.cluster.clone(),
            target_namespace: None,
            service_account_name: None,
            sync_policy: None,
            cluster_wave: r.spec.cluster_wave.clone(),
            health_assessment: None,
            failure_policy: None,
            deletion_policy: None,
            retention_policy: None,
            mutations: Vec::new(),
            lifecycle: None,
            drift_exclusions: Vec::new(),
        },
        status: r
            .status
            .as_ref()
            .map(|s| crate::engine::api::ReleaseStatus {
                observed_generation: s.observed_generation,
                ..Default::default()
            }),
    }
}

/// How often the render store is swept of deleted Releases' renders (`Wiring::store_sweep`).
const STORE_SWEEP_EVERY: Duration = Duration::from_secs(3600);

/// Run until SIGTERM or Ctrl-C; then finish the passes in flight, release the Leases, return.
pub async fn run(kube_config: Config, config: DaemonConfig) -> Result<(), DaemonError> {
    let metrics = Metrics::new();
    let home = connect_home(kube_config, &config, &metrics)?;
    let held = HeldShards::new(config.shards);
    let shared = Arc::new(shared_state(&home, &config, &held, metrics.clone()));
    let (shutdown_tx, shutdown) = tokio::sync::watch::channel(false);
    let (release_leases_tx, release_leases) = tokio::sync::watch::channel(false);
    let mut wiring = Wiring {
        queues: Queues::new(&shared),
        config,
        shared,
        metrics,
        shutdown,
        tasks: Vec::new(),
    };
    wiring.informers(&home.watch_client);
    let workers = wiring.workers();
    let ready = wiring.readiness();
    wiring.resync();
    wiring.cache_retention();
    wiring.store_sweep();
    let lease_task = wiring.leases(&home.client, &held, release_leases);
    wiring.serve(ready).await?;
    wait_for_signal().await;
    wiring
        .shut_down(workers, shutdown_tx, release_leases_tx, lease_task)
        .await;
    Ok(())
}

/// The daemon's own client: every client it builds (its own, and those that impersonate a
/// Release's ServiceAccount) counts its requests, and every API call has its deadline.
fn connect_home(
    kube_config: Config,
    config: &DaemonConfig,
    metrics: &Arc<Metrics>,
) -> Result<Connection, DaemonError> {
    let layer = CountRequestsLayer(metrics.clone());
    let factory: ClientFactory = Arc::new(move |config| {
        Ok(kube::client::ClientBuilder::try_from(config)?
            .with_layer(&layer)
            .build())
    });
    Connection::with_factory(kube_config, factory)
        .and_then(|c| c.with_api_timeout(config.api_timeout))
        .map_err(DaemonError::Connect)
}

/// What every pass shares: the engine's context (with the shard gate, tenancy, deadlines and
/// store of this daemon), the informer caches, the Event recorder and the metrics.
fn shared_state(
    home: &Connection,
    config: &DaemonConfig,
    held: &HeldShards,
    metrics: Arc<Metrics>,
) -> Shared {
    let client = home.client.clone();
    let coordinator = Arc::new(Coordinator::with_policy(
        SourceCache::new(config.cache_dir.clone()),
        config.sources.clone(),
    ));
    let mut ctx = Context::new(home.clone(), coordinator);
    ctx.shard = if config.shards == 0 {
        Arc::new(OwnsEveryShard) as Arc<dyn ShardGate>
    } else {
        Arc::new(held.clone())
    };
    ctx.tenancy = Arc::new(config.tenancy.clone());
    ctx.render_timeout = config.render_timeout;
    ctx.digest_key = Some(Arc::new(crate::engine::digest_key::KeyCell::new(
        client.clone(),
        config.lease_namespace.clone(),
    )));
    ctx.concurrency = config.concurrency;
    ctx.reuse_fetches = true;
    ctx.observer_reads = crate::engine::apply::Freshness::WatchCache;
    ctx.store = config.render_store.open(&client, &config.lease_namespace);
    let (releases, inventories) = if config.shards == 0 {
        (Arc::default(), Arc::default())
    } else {
        trimmed_caches(held)
    };
    let drift_queue = WorkQueue::new();
    let drift_wakes = Arc::new(drift_wake::DriftWakes::new(drift_queue.clone()));
    let syncing = Arc::new(syncing::Syncing::default());
    let mut live = live::LiveTargets::new(keep_live(config.shards > 0, held, &releases));
    if config.role.observer() {
        live = live.with_notice(drift_notice(
            &drift_wakes,
            &syncing,
            (&releases, &inventories),
        ));
    }
    let live = Arc::new(live);
    ctx.watched = Some(live.clone());
    ctx.releases = Some(Arc::new(ReleasesByCluster(releases.clone())));
    let listers = listers::InformerListers {
        inventories,
        ..Default::default()
    };
    ctx.listers = Some(Arc::new(listers.clone()));
    Shared {
        ctx: Arc::new(ctx),
        releases,
        inventories: listers.inventories,
        clusters: listers.clusters,
        gits: listers.gits,
        helms: listers.helms,
        ocis: listers.ocis,
        global_rule_sets: listers.global_rule_sets,
        rule_sets: listers.rule_sets,
        health_memory: HealthMemory::default(),
        recorder: Recorder::new(
            client,
            Reporter {
                controller: "convoy".into(),
                instance: Some(config.identity.clone()),
            },
        ),
        metrics,
        controller_queue: WorkQueue::new(),
        health_queue: WorkQueue::new(),
        drift_queue,
        drift_wakes,
        syncing,
        live,
        fetched: Default::default(),
        checks: Default::default(),
    }
}

/// Whose live objects the watches keep: those of the Releases this replica knows and works
/// on. A label naming a Release that does not exist (anyone can write one) keeps nothing; a
/// Release's objects are applied after its watch event came, so its own are not missed.
fn keep_live(
    sharded: bool,
    held: &HeldShards,
    releases: &Arc<informer::Cache<Release>>,
) -> live::Keep {
    let (gate, releases) = (held.clone(), releases.clone());
    Arc::new(move |namespace, name| {
        releases
            .get_any(&format!("{namespace}/{name}"))
            .is_some_and(|r| !sharded || gate.owns(&r))
    })
}

/// What the live-object watches' notices do (`daemon::drift_wake`): wake the drift loop for
/// an object its Release's inventory records as a member (anyone can label an object with a
/// Release's labels and forge `managedFields`; a drift pass renders the source), after the
/// controller's sync when one runs (a pass in the middle of it sees objects still to come).
/// Only an object on the API server the Release's last attempt resolved counts, and one seen
/// through a Cluster's kubeconfig only for a Release of that Cluster: anyone who may write on
/// another of the daemon's clusters (a tenant's own remote Cluster) could otherwise give an
/// object there a member's labels and name, and a tenant's kubeconfig may name another's
/// server while its proxy and CA answer for it.
fn drift_notice(
    wakes: &Arc<drift_wake::DriftWakes>,
    syncing: &Arc<syncing::Syncing>,
    (releases, inventories): (
        &Arc<informer::Cache<Release>>,
        &Arc<informer::Cache<ReleaseInventory>>,
    ),
) -> live::Notice {
    let (wakes, syncing) = (wakes.clone(), syncing.clone());
    let (releases, inventories) = (releases.clone(), inventories.clone());
    Arc::new(move |changed: &live::Changed| {
        let key = format!("{}/{}", changed.release_namespace, changed.release_name);
        let on_its_cluster = releases.get(&key).is_some_and(|release| {
            let attempt = release
                .status
                .as_ref()
                .and_then(|s| s.last_attempted.as_ref());
            let resolved = attempt.and_then(|a| a.resolved_cluster.as_ref());
            let through_its_cluster = match &changed.cluster {
                None => true,
                Some((namespace, name)) => {
                    *namespace == changed.release_namespace
                        && resolved.and_then(|c| c.name.as_deref()) == Some(name.as_str())
                }
            };
            through_its_cluster
                && resolved.and_then(|c| c.server.as_deref()) == Some(changed.server.as_str())
        });
        let member = on_its_cluster
            && inventories.get(&key).is_some_and(|inventory| {
                crate::engine::inventory::members(&inventory)
                    .iter()
                    .any(|entry| entry.key() == changed.object)
            });
        if member && !syncing.put_off_drift(&key) {
            wakes.changed(&key);
        }
    })
}

/// The work queue of each loop (the controller's, the health loop's and the drift loop's live
/// in [`Shared`]: passes and the live-object watches queue on them).
struct Queues {
    controller: WorkQueue,
    drift: WorkQueue,
    health: WorkQueue,
    cluster: WorkQueue,
    git: WorkQueue,
    helm: WorkQueue,
    oci: WorkQueue,
}

impl Queues {
    fn new(shared: &Shared) -> Self {
        Self {
            controller: shared.controller_queue.clone(),
            drift: shared.drift_queue.clone(),
            health: shared.health_queue.clone(),
            cluster: WorkQueue::new(),
            git: WorkQueue::new(),
            helm: WorkQueue::new(),
            oci: WorkQueue::new(),
        }
    }

    /// The Release loops' queues this role runs: every Release key goes to each of them on a
    /// resync or a shard taken over.
    fn release_loops(&self, role: Role) -> Vec<WorkQueue> {
        let mut queues = Vec::new();
        if role.controller() {
            queues.push(self.controller.clone());
        }
        if role.observer() {
            queues.extend([self.drift.clone(), self.health.clone()]);
        }
        queues
    }

    fn all(&self) -> [&WorkQueue; 7] {
        [
            &self.controller,
            &self.drift,
            &self.health,
            &self.cluster,
            &self.git,
            &self.helm,
            &self.oci,
        ]
    }
}

/// The daemon being put together: what each part needs, and the background tasks started.
struct Wiring {
    config: DaemonConfig,
    shared: Arc<Shared>,
    queues: Queues,
    metrics: Arc<Metrics>,
    shutdown: tokio::sync::watch::Receiver<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Wiring {
    /// One informer per kind (per namespace), each feeding the handlers of the loops that
    /// react to it.
    fn informers(&mut self, watch_client: &Client) {
        let (config, shared) = (&self.config, &self.shared);
        let namespaces = &config.namespaces;
        let releases = release_handlers(config.role, shared, &self.queues, &self.metrics);
        watch(
            watch_client,
            namespaces,
            shared.releases.clone(),
            releases,
            &self.shutdown,
            &mut self.tasks,
        );
        let inventories = inventory_handlers(config.role, &self.queues, shared);
        watch(
            watch_client,
            namespaces,
            shared.inventories.clone(),
            inventories,
            &self.shutdown,
            &mut self.tasks,
        );
        // Clusters and sources: the controller's own loops react to them; every loop reads
        // them (a Release's target and source) from these caches.
        let (q, stop, tasks) = (&self.queues, &self.shutdown, &mut self.tasks);
        let controller = config.role.controller();
        watch(
            watch_client,
            namespaces,
            shared.clusters.clone(),
            generation_handlers(controller, &q.cluster),
            stop,
            tasks,
        );
        watch(
            watch_client,
            namespaces,
            shared.gits.clone(),
            generation_handlers(controller, &q.git),
            stop,
            tasks,
        );
        watch(
            watch_client,
            namespaces,
            shared.helms.clone(),
            generation_handlers(controller, &q.helm),
            stop,
            tasks,
        );
        watch(
            watch_client,
            namespaces,
            shared.ocis.clone(),
            generation_handlers(controller, &q.oci),
            stop,
            tasks,
        );
        if !config.role.observer() {
            return;
        }
        // The health loop's rule sets (collectRules); GlobalHealthRuleSets are cluster-scoped.
        watch(
            watch_client,
            namespaces,
            shared.rule_sets.clone(),
            Vec::new(),
            stop,
            tasks,
        );
        shared.global_rule_sets.add_watch();
        tasks.push(tokio::spawn(informer::run(
            Api::<crate::engine::api::GlobalHealthRuleSet>::all(watch_client.clone()),
            None,
            shared.global_rule_sets.clone(),
            Arc::new(Vec::new()),
            stop.clone(),
        )));
    }

    /// The workers of each loop this role runs.
    fn workers(&self) -> Vec<tokio::task::JoinHandle<()>> {
        let (config, q) = (&self.config, &self.queues);
        let spawn = |name: &'static str, n: usize, queue: &WorkQueue, pass: PassFn| {
            let shared = self.shared.clone();
            worker::spawn(name, n, queue.clone(), self.metrics.clone(), move |k, f| {
                pass(shared.clone(), k, f)
            })
        };
        let mut workers = Vec::new();
        if config.role.controller() {
            workers.extend(spawn(
                "controller",
                config.workers,
                &q.controller,
                |s, k, f| Box::pin(passes::controller(s, k, f)),
            ));
            workers.extend(spawn("cluster", 2, &q.cluster, |s, k, f| {
                Box::pin(passes::cluster(s, k, f))
            }));
            workers.extend(spawn("git", 2, &q.git, |s, k, f| {
                Box::pin(passes::git(s, k, f))
            }));
            workers.extend(spawn("helm", 1, &q.helm, |s, k, f| {
                Box::pin(passes::helm(s, k, f))
            }));
            workers.extend(spawn("oci", 1, &q.oci, |s, k, f| {
                Box::pin(passes::oci(s, k, f))
            }));
        }
        if config.role.observer() {
            workers.extend(spawn("drift", config.workers, &q.drift, |s, k, f| {
                Box::pin(passes::drift(s, k, f))
            }));
            workers.extend(spawn("health", config.workers, &q.health, |s, k, f| {
                Box::pin(passes::health(s, k, f))
            }));
        }
        workers
    }

    /// Readiness: every informer this role needs has listed once and its watches work (a
    /// watch failing again and again, say for a missing RBAC permission, makes it unready).
    fn readiness(&mut self) -> Arc<AtomicBool> {
        let ready = Arc::new(AtomicBool::new(false));
        let (flag, shared, metrics) = (ready.clone(), self.shared.clone(), self.metrics.clone());
        let role = self.config.role;
        let mut stop = self.shutdown.clone();
        self.tasks.push(tokio::spawn(async move {
            let mut announced = false;
            loop {
                let all = caches_ready(&shared, role, &metrics);
                flag.store(all, Ordering::Relaxed);
                if all && !announced {
                    tracing::info!("caches synced");
                    announced = true;
                }
                let every = Duration::from_millis(if announced { 1000 } else { 100 });
                tokio::select! {
                    _ = tokio::time::sleep(every) => {}
                    _ = stop.changed() => return,
                }
            }
        }));
        ready
    }

    /// The informer resync: every key of every Release loop again, now and then.
    fn resync(&mut self) {
        let queues = self.queues.release_loops(self.config.role);
        let shared = self.shared.clone();
        let every = self.config.resync;
        let mut stop = self.shutdown.clone();
        self.tasks.push(tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(every) => {}
                    _ = stop.changed() => return,
                }
                // Only the Releases of shards held: the others' passes would do nothing. A
                // key whose interval pass comes before the next resync needs none.
                let gate = shared.ctx.shard.clone();
                // The inventory versions of Releases gone (deleted without this replica's
                // finalize) go too, so that memory follows the Releases held.
                shared.ctx.seen_inventories.forget_where(|namespace, name| {
                    shared
                        .releases
                        .get_any(&format!("{namespace}/{name}"))
                        .is_none()
                });
                for key in shared.releases.keys_where(|r| gate.owns(r)) {
                    queues
                        .iter()
                        .for_each(|q| q.add_bulk_unless_due_within(&key, every));
                }
            }
        }));
    }

    /// The source cache's collection: what no pass used for the retention goes (a daemon
    /// following busy repositories for months filled its disk with every commit's tree).
    fn cache_retention(&mut self) {
        let (shared, metrics) = (self.shared.clone(), self.metrics.clone());
        let retention = self.config.cache_retention;
        let every = (retention / 4).clamp(Duration::from_secs(1), Duration::from_secs(600));
        let mut stop = self.shutdown.clone();
        self.tasks.push(tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(every) => {}
                    _ = stop.changed() => return,
                }
                let (results, collected) = shared.ctx.coordinator.collect_garbage(retention).await;
                metrics.cache_collected(results, collected);
                if !collected.is_empty() {
                    tracing::info!(
                        artifacts = collected.artifacts,
                        mirrors = collected.mirrors,
                        records = collected.records,
                        locks = collected.locks,
                        "removed from the source cache what nothing used for {}",
                        crate::engine::duration::human(retention)
                    );
                }
            }
        }));
    }

    /// The render store's sweep of Releases deleted without their finalizer (whoever may
    /// write a Release can remove it): by the controller, which writes the store, once what
    /// it stored since its start has settled (`orphans::SETTLED`) and then every
    /// [`STORE_SWEEP_EVERY`]. Replicas sweep alike; a delete of what another deleted first
    /// is no error. A sweep is one LIST of the store's Secrets' metadata.
    fn store_sweep(&mut self) {
        if !self.config.role.controller() {
            return;
        }
        let Some(store) = self.shared.ctx.store.clone() else {
            return;
        };
        let client = self.shared.ctx.home.client.clone();
        let mut stop = self.shutdown.clone();
        self.tasks.push(tokio::spawn(async move {
            let mut wait = crate::engine::store::orphans::SETTLED;
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = stop.changed() => return,
                }
                wait = STORE_SWEEP_EVERY;
                match crate::engine::store::orphans::sweep(&client, store.as_ref()).await {
                    Ok(swept) if swept.is_empty() => {}
                    Ok(swept) => tracing::info!(
                        releases = %swept.join(", "),
                        "removed from the render store what Releases deleted without their finalizer left"
                    ),
                    Err(e) => tracing::warn!(
                        "render store sweep: {}",
                        crate::engine::error::chain(&e)
                    ),
                }
            }
        }));
    }

    /// The Leases, when sharded (returned: they are released last), and a task that shows the
    /// shards held in the metrics and gives a newly held shard's Releases a pass at once.
    fn leases(
        &mut self,
        client: &Client,
        held: &HeldShards,
        release: tokio::sync::watch::Receiver<bool>,
    ) -> Option<tokio::task::JoinHandle<()>> {
        let config = &self.config;
        if config.shards == 0 {
            return None;
        }
        let lease_config = LeaseConfig {
            prefix: match config.role {
                Role::Controller => "convoy-controller",
                Role::Observer => "convoy-observer",
                Role::All => "convoy-all",
            }
            .to_string(),
            namespace: config.lease_namespace.clone(),
            identity: config.identity.clone(),
            duration: config.lease_duration,
        };
        let (held_now, metrics, shared) = (held.clone(), self.metrics.clone(), self.shared.clone());
        let queues = self.queues.release_loops(config.role);
        // The Cluster controller works on the Clusters of the shards held (`passes::cluster`).
        let cluster_queue = config
            .role
            .controller()
            .then(|| self.queues.cluster.clone());
        let shards = config.shards;
        let mut stop = self.shutdown.clone();
        self.tasks.push(tokio::spawn(async move {
            let mut before = held_now.holds();
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(250)) => {}
                    _ = stop.changed() => return,
                }
                let now_held = held_now.holds();
                metrics.shards_held.set(now_held.len() as i64);
                // A newly held shard: its Releases (and only those) get a pass at once. Those
                // whose spec changed since their last reconcile are events (a user waits for
                // them, and so do their next waves' wake-ups); the rest is bulk.
                // Taken: held now and not before, or lost and taken again in between (its
                // epoch changed); events that came meanwhile left stubs and skipped passes.
                let taken: BTreeSet<u32> = now_held
                    .iter()
                    .filter(|(shard, epoch)| before.get(shard) != Some(epoch))
                    .map(|(shard, _)| *shard)
                    .collect();
                let lost: BTreeSet<u32> = before
                    .keys()
                    .filter(|shard| !now_held.contains_key(shard))
                    .copied()
                    .collect();
                before = now_held;
                if taken.is_empty() && lost.is_empty() {
                    continue;
                }
                let all = shared.releases.all_entries();
                if !lost.is_empty() {
                    shared
                        .releases
                        .trim_where(|r| lost.contains(&shard::shard_of(&cluster_key(r), shards)));
                    let releases = shared.releases.clone();
                    shared.inventories.trim_where(|inv| {
                        releases.get_any(&key_of(inv)).is_some_and(|r| {
                            lost.contains(&shard::shard_of(&cluster_key(&r), shards))
                        })
                    });
                    let in_lost = |namespace: &str, name: &str| {
                        releases
                            .get_any(&format!("{namespace}/{name}"))
                            .is_some_and(|r| {
                                lost.contains(&shard::shard_of(&cluster_key(&r), shards))
                            })
                    };
                    // Another replica writes their inventories and their renders now: the
                    // next time this one holds them, it reads both from the API server first.
                    shared.ctx.seen_inventories.forget_where(in_lost);
                    shared.ctx.known_stored.forget_where(in_lost);
                }
                // The per-Release series move with the shard.
                for r in &all {
                    let shard = shard::shard_of(&cluster_key(r), shards);
                    if taken.contains(&shard) {
                        record_release_metrics(&metrics, r);
                    } else if lost.contains(&shard) {
                        forget_release_metrics(&metrics, r);
                    }
                }
                // The watches of live objects keep what this replica works on now (once the
                // takeover's first passes are done).
                shared.live.relist_after(live::RELIST_DELAY);
                if let Some(q) = &cluster_queue {
                    for key in shared.clusters.keys() {
                        if taken.contains(&shard::shard_of(&key, shards)) {
                            q.add_bulk(&key);
                        }
                    }
                }
                let (changed, rest) = taken_over(&all, &taken, shards);
                for key in &changed {
                    queues.iter().for_each(|q| q.add(key));
                }
                for key in &rest {
                    queues.iter().for_each(|q| q.add_bulk(key));
                }
            }
        }));
        // The Leases are kept until the passes in flight are done or cancelled: released
        // earlier, another replica could start on a shard this one still writes to.
        Some(tokio::spawn(shard::run_leases(
            client.clone(),
            lease_config,
            held.clone(),
            release,
        )))
    }

    /// `/healthz`, `/readyz` and `/metrics` on `--listen`.
    async fn serve(&mut self, ready: Arc<AtomicBool>) -> Result<(), DaemonError> {
        let addr = self.config.listen;
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| DaemonError::Listen { addr, source })?;
        tracing::info!(addr = %listener.local_addr().map(|a| a.to_string()).unwrap_or_default(), "serving /healthz, /readyz, /metrics");
        self.tasks.push(tokio::spawn(http::serve(
            listener,
            ready,
            self.metrics.clone(),
            self.shutdown.clone(),
        )));
        Ok(())
    }

    /// SIGTERM: the queues stop, passes in flight get the grace period and are then cancelled
    /// where they stand (a cancelled pass leaves what a crash leaves: the inventory's pending
    /// wave covers it); only then are the Leases released.
    async fn shut_down(
        self,
        mut workers: Vec<tokio::task::JoinHandle<()>>,
        shutdown: tokio::sync::watch::Sender<bool>,
        release_leases: tokio::sync::watch::Sender<bool>,
        lease_task: Option<tokio::task::JoinHandle<()>>,
    ) {
        let grace = self.config.shutdown_grace;
        tracing::info!(
            grace_seconds = grace.as_secs_f64(),
            "shutting down: finishing the passes in flight"
        );
        let _ = shutdown.send(true);
        self.queues.all().iter().for_each(|q| q.shut_down());
        let mut finished = 0;
        let drained = tokio::time::timeout(grace, async {
            for w in workers.iter_mut() {
                let _ = w.await;
                finished += 1;
            }
        })
        .await;
        if drained.is_err() {
            let running = workers.iter().filter(|w| !w.is_finished()).count();
            tracing::warn!(
                running,
                "passes still running after the grace period of {}; cancelled",
                crate::engine::duration::human(grace)
            );
            // A handle already awaited to its end may not be polled again.
            for w in workers.into_iter().skip(finished) {
                w.abort();
                let _ = w.await;
            }
        }
        let _ = release_leases.send(true);
        if let Some(lease_task) = lease_task {
            let _ = lease_task.await;
        }
        for t in self.tasks {
            t.abort();
        }
        tracing::info!("stopped");
    }
}

/// The keys of the Releases on the shards just `taken` (of `shards`): those whose spec changed
/// since their last reconcile, and the rest.
fn taken_over(
    releases: &[Arc<Release>],
    taken: &BTreeSet<u32>,
    shards: u32,
) -> (Vec<String>, Vec<String>) {
    let spec_changed = |r: &Release| {
        r.status.as_ref().and_then(|s| s.observed_generation) != r.metadata.generation
    };
    let (changed, rest): (Vec<&Arc<Release>>, Vec<&Arc<Release>>) = releases
        .iter()
        .filter(|r| taken.contains(&shard::shard_of(&cluster_key(r), shards)))
        .partition(|r| spec_changed(r));
    let keys = |rs: Vec<&Arc<Release>>| rs.into_iter().map(|r| key_of(r.as_ref())).collect();
    (keys(changed), keys(rest))
}

/// A loop's pass, boxed so every loop's workers are spawned the same way.
type PassFn = fn(
    Arc<Shared>,
    String,
    u32,
)
    -> std::pin::Pin<Box<dyn std::future::Future<Output = worker::PassResult> + Send>>;

/// Whether every cache this role needs has listed and watches (watch errors go to the
/// metrics as they are seen).
fn caches_ready(shared: &Shared, role: Role, metrics: &Metrics) -> bool {
    let observer = role.observer();
    let caches: [(&str, bool, (bool, usize)); 8] = [
        ("Release", true, cache_state(&shared.releases)),
        ("ReleaseInventory", true, cache_state(&shared.inventories)),
        ("Cluster", true, cache_state(&shared.clusters)),
        ("GitRepository", true, cache_state(&shared.gits)),
        ("HelmRegistry", true, cache_state(&shared.helms)),
        ("OCIRegistry", true, cache_state(&shared.ocis)),
        ("HealthRuleSet", observer, cache_state(&shared.rule_sets)),
        (
            "GlobalHealthRuleSet",
            observer,
            cache_state(&shared.global_rule_sets),
        ),
    ];
    let mut all = true;
    for (resource, needed, (ok, errors)) in caches {
        if needed {
            all &= ok;
            metrics.watch_errors_seen(resource, errors as u64);
        }
    }
    all
}

/// Whether a cache has listed and its watches work, and its watch errors so far.
fn cache_state<K>(cache: &informer::Cache<K>) -> (bool, usize) {
    (cache.synced() && cache.watching(), cache.watch_errors())
}

/// The Release informer's handlers: per-Release metrics, and each loop's enqueue rules.
fn release_handlers(
    role: Role,
    shared: &Arc<Shared>,
    queues: &Queues,
    metrics: &Arc<Metrics>,
) -> Vec<Handler<Release>> {
    let mut handlers = vec![release_metrics_handler(
        metrics.clone(),
        shared.ctx.shard.clone(),
    )];
    if role.controller() {
        handlers.push(controller_handler(
            queues.controller.clone(),
            shared.clone(),
        ));
    }
    if role.observer() {
        for queue in [queues.drift.clone(), queues.health.clone()] {
            handlers.push(observer_handler(queue));
        }
    }
    handlers
}

/// Per-Release metrics follow the cache, whoever wrote the status, for the Releases of the
/// shards this replica holds: each Release's series come from one replica (a Prometheus
/// scraping all of them sees each once, as with Flux's per-object metrics), and a replica's
/// series grow with its share, not with the fleet.
fn release_metrics_handler(metrics: Arc<Metrics>, gate: Arc<dyn ShardGate>) -> Handler<Release> {
    Box::new(move |old, new| match (new, old) {
        (Some(r), _) if gate.owns(r) => record_release_metrics(&metrics, r),
        // Another replica's: it has no series here (a shard given up loses its series in
        // the lease task), so nothing to do on the events of two thirds of the fleet.
        (Some(_), _) => {}
        (None, Some(gone)) => forget_release_metrics(&metrics, gone),
        (None, None) => {}
    })
}

fn release_labels(r: &Release) -> metrics::ReleaseLabels {
    metrics::ReleaseLabels {
        namespace: r.metadata.namespace.as_deref().unwrap_or_default().into(),
        name: r.metadata.name.as_deref().unwrap_or_default().into(),
    }
}

fn record_release_metrics(metrics: &Metrics, r: &Release) {
    let Some(status) = r.status.as_ref() else {
        return;
    };
    let labels = release_labels(r);
    let conditions: Vec<(&str, crate::engine::api::ConditionStatus)> = status
        .conditions
        .iter()
        .map(|c| (c.type_.as_str(), c.status))
        .collect();
    metrics.release_conditions(&labels, &conditions);
    if let Some(at) = status
        .last_successful
        .as_ref()
        .and_then(|a| a.attempted_at.as_ref())
    {
        metrics
            .release_last_applied
            .get_or_create(&labels)
            .set(at.0.as_second() as f64);
    }
}

fn forget_release_metrics(metrics: &Metrics, r: &Release) {
    metrics.forget_release(&release_labels(r));
}

/// The controller's enqueue rules (`shouldEnqueueOnUpdate`, a deletion, a Healthy verdict
/// lastHealthy has yet to record), and the next cluster wave woken when a Release's Applied
/// or Healthy changes.
fn controller_handler(queue: WorkQueue, shared: Arc<Shared>) -> Handler<Release> {
    Box::new(move |old, new| {
        let Some(new) = new else { return };
        let key = key_of(new);
        let deleting = new.metadata.deletion_timestamp.is_some()
            && old.is_none_or(|o| o.metadata.deletion_timestamp.is_none());
        match old {
            None => queue.add(&key),
            Some(old)
                if should_enqueue_on_update(&old.metadata, &new.metadata, true) || deleting =>
            {
                queue.add(&key)
            }
            Some(_) => {}
        }
        if healthy_verdict_to_record(old.and_then(|o| o.status.as_ref()), new.status.as_ref()) {
            queue.add(&key);
        }
        if old.is_some_and(|o| applied_or_healthy_changed(o.status.as_ref(), new.status.as_ref())) {
            let wave = new.spec.cluster_wave.as_ref().map(|w| w.wave).unwrap_or(0);
            let cluster = cluster_key(new);
            // The wave first: most Releases have none, and the cluster key allocates.
            let later = shared.releases.keys_where(|other| {
                let other_wave = other.spec.cluster_wave.as_ref().map(|w| w.wave);
                other_wave.is_some_and(|w| w > wave) && cluster_key(other) == cluster
            });
            later.iter().for_each(|k| queue.add(k));
        }
    })
}

/// An observer loop's enqueue rules: `shouldEnqueueOnUpdate` without the status, a deletion,
/// and a new attempted or applied render.
fn observer_handler(queue: WorkQueue) -> Handler<Release> {
    Box::new(move |old, new| {
        let Some(new) = new else { return };
        let key = key_of(new);
        let deleting = new.metadata.deletion_timestamp.is_some()
            && old.is_none_or(|o| o.metadata.deletion_timestamp.is_none());
        match old {
            None => queue.add(&key),
            Some(old)
                if should_enqueue_on_update(&old.metadata, &new.metadata, false) || deleting =>
            {
                queue.add(&key)
            }
            Some(old) if attempted_render_changed(old.status.as_ref(), new.status.as_ref()) => {
                queue.add(&key)
            }
            Some(_) => {}
        }
    })
}

/// The ReleaseInventory informer's handlers: a controller-owned change wakes the controller;
/// a controller write (something was applied) wakes both observer loops.
fn inventory_handlers(
    role: Role,
    queues: &Queues,
    shared: &Arc<Shared>,
) -> Vec<Handler<ReleaseInventory>> {
    let mut handlers: Vec<Handler<ReleaseInventory>> = Vec::new();
    if role.controller() {
        let queue = queues.controller.clone();
        let shared = shared.clone();
        handlers.push(Box::new(move |old, new| {
            let empty = ReleaseInventory::default();
            let Some(new) = new else { return };
            if !inventory_wakes_controller(old.unwrap_or(&empty), new) {
                return;
            }
            let key = key_of(new);
            let follows = shared
                .releases
                .get(&key)
                .is_some_and(|release| verdict_follows(&release, new));
            if follows {
                queue.add_unless_passed(&key, VERDICT_GRACE);
            } else {
                queue.add(&key);
            }
        }));
    }
    if role.observer() {
        let (health, drift) = (queues.health.clone(), queues.drift.clone());
        handlers.push(Box::new(move |old, new| {
            let empty = ReleaseInventory::default();
            if let Some(new) = new
                && inventory_wakes_observer(old.unwrap_or(&empty), new)
            {
                health.add(&key_of(new));
                drift.add(&key_of(new));
            }
        }));
    }
    handlers
}

/// Watch `K` in every namespace of `namespaces` (all namespaces when empty) into `cache`.
fn watch<K>(
    client: &Client,
    namespaces: &[String],
    cache: Arc<informer::Cache<K>>,
    handlers: Vec<Handler<K>>,
    shutdown: &tokio::sync::watch::Receiver<bool>,
    tasks: &mut Vec<tokio::task::JoinHandle<()>>,
) where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let handlers = Arc::new(handlers);
    if namespaces.is_empty() {
        cache.add_watch();
        tasks.push(tokio::spawn(informer::run(
            Api::<K>::all(client.clone()),
            None,
            cache,
            handlers,
            shutdown.clone(),
        )));
        return;
    }
    for ns in namespaces {
        cache.add_watch();
        tasks.push(tokio::spawn(informer::run(
            Api::<K>::namespaced(client.clone(), ns),
            Some(ns.clone()),
            cache.clone(),
            handlers.clone(),
            shutdown.clone(),
        )));
    }
}

/// The controller's [`generation_handler`] on `queue`, or none (a role that only reads the
/// cache).
fn generation_handlers<K: kube::Resource + Send + Sync + 'static>(
    controller: bool,
    queue: &WorkQueue,
) -> Vec<Handler<K>> {
    if controller {
        vec![generation_handler(queue.clone())]
    } else {
        Vec::new()
    }
}

/// Queue an object when it is new, on a resync, or when its spec changed.
fn generation_handler<K: kube::Resource + Send + Sync + 'static>(queue: WorkQueue) -> Handler<K> {
    Box::new(move |old, new| {
        let Some(new) = new else { return };
        match old {
            None => queue.add(&key_of(new)),
            Some(old) if should_enqueue_on_update(old.meta(), new.meta(), false) => {
                queue.add(&key_of(new))
            }
            Some(_) => {}
        }
    })
}

async fn wait_for_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}

/// The name a release is shown by in logs.
pub fn release_name(release: &Release) -> String {
    format!(
        "{}/{}",
        release.namespace().unwrap_or_default(),
        release.name_any()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Anyone who can create objects can label them with a Release's name: the watches keep
    /// the objects of Releases that exist (and, sharded, that this replica works on) only.
    #[test]
    fn the_watches_keep_no_objects_of_a_release_that_does_not_exist() {
        let releases: Arc<informer::Cache<Release>> = Arc::default();
        let release: Release = serde_json::from_value(serde_json::json!({
            "apiVersion": "core.convoy.kumodo.io/v1alpha1", "kind": "Release",
            "metadata": {"name": "web", "namespace": "apps"},
            "spec": {"source": {"kind": "GitRepository", "name": "repo"}},
        }))
        .unwrap();
        releases.insert_for_test(release);
        let keep = keep_live(false, &HeldShards::new(1), &releases);
        assert!(keep("apps", "web"));
        assert!(!keep("apps", "made-up"));
        assert!(!keep("other", "web"));
        // Sharded, before this replica holds the Release's shard: not kept either.
        let keep = keep_live(true, &HeldShards::new(1), &releases);
        assert!(!keep("apps", "web"));
    }

    /// A notice wakes the drift loop only for a member of the Release's inventory (anyone can
    /// label an object and forge its `managedFields`) on the cluster the Release deploys to,
    /// and after the controller's sync when one runs (its own prunes and re-creates are not
    /// drift).
    #[tokio::test(start_paused = true)]
    async fn a_notice_wakes_the_drift_loop_for_members_and_after_a_sync() {
        let releases: Arc<informer::Cache<Release>> = Arc::default();
        releases.insert_for_test(
            serde_json::from_value(serde_json::json!({
                "apiVersion": "core.convoy.kumodo.io/v1alpha1", "kind": "Release",
                "metadata": {"name": "web", "namespace": "apps"},
                "spec": {"source": {"kind": "GitRepository", "name": "repo"}, "cluster": "prod"},
                "status": {"lastAttempted": {"resolvedCluster": {
                    "name": "prod", "server": "https://prod:6443"}}},
            }))
            .unwrap(),
        );
        let inventories: Arc<informer::Cache<ReleaseInventory>> = Arc::default();
        inventories.insert_for_test(
            serde_json::from_value(serde_json::json!({
                "apiVersion": "core.convoy.kumodo.io/v1alpha1", "kind": "ReleaseInventory",
                "metadata": {"name": "web", "namespace": "apps"},
                "inventory": [
                    {"group": "", "kind": "ConfigMap", "namespace": "apps", "name": "a",
                     "renderRef": "r1"},
                    {"group": "", "kind": "ConfigMap", "namespace": "apps", "name": "pending"},
                ],
            }))
            .unwrap(),
        );
        let (queue, syncing) = (WorkQueue::new(), Arc::new(syncing::Syncing::default()));
        let wakes = Arc::new(drift_wake::DriftWakes::new(queue.clone()));
        let notice = drift_notice(&wakes, &syncing, (&releases, &inventories));
        let through = |server: &str, cluster: (&str, &str), name: &str| live::Changed {
            server: server.into(),
            cluster: Some((cluster.0.into(), cluster.1.into())),
            release_namespace: "apps".into(),
            release_name: "web".into(),
            object: crate::engine::api::ObjectKey {
                group: String::new(),
                kind: "ConfigMap".into(),
                namespace: "apps".into(),
                name: name.into(),
            },
        };
        let changed = |name: &str| through("https://prod:6443", ("apps", "prod"), name);
        let next = || tokio::time::timeout(Duration::from_secs(60), queue.get());
        for not_a_member in ["forged", "pending"] {
            notice(&changed(not_a_member));
            assert!(next().await.is_err(), "{not_a_member}: nothing queued");
        }
        // A member's name on another cluster the daemon watches (a tenant's own), or seen
        // through another Cluster's kubeconfig that names this one's server.
        for (server, cluster) in [
            ("https://tenant:6443", ("apps", "prod")),
            ("https://prod:6443", ("tenant", "prod")),
            ("https://prod:6443", ("apps", "staging")),
        ] {
            notice(&through(server, cluster, "a"));
            assert!(
                next().await.is_err(),
                "{server} {cluster:?}: nothing queued"
            );
        }
        notice(&changed("a"));
        let woken = tokio::time::Instant::now();
        assert_eq!(next().await.unwrap().as_deref(), Some("apps/web"));
        assert!(woken.elapsed() >= drift_wake::SETTLE);
        queue.done("apps/web");
        syncing.begin("apps/web");
        notice(&changed("a"));
        let soon = tokio::time::timeout(Duration::from_secs(2), queue.get());
        assert!(soon.await.is_err(), "put off while the sync runs");
        assert!(syncing.end("apps/web").drift, "the sync's end queues it");
        // ... at the pace of repeated changes (`SyncingGuard` hands it to the same wakes):
        // the first change's pass, then this one after the gap.
        wakes.changed("apps/web");
        assert_eq!(next().await.unwrap().as_deref(), Some("apps/web"));
        assert!(woken.elapsed() >= drift_wake::FIRST_GAP);
    }

    #[test]
    fn a_taken_shard_passes_its_own_releases_changed_ones_first() {
        let release = |ns: &str, name: &str, generation: i64, observed: i64| {
            let mut r: Release = serde_json::from_value(serde_json::json!({
                "apiVersion": "core.convoy.kumodo.io/v1alpha1", "kind": "Release",
                "metadata": {"name": name, "namespace": ns, "generation": generation},
                "spec": {"source": {"kind": "GitRepository", "name": "repo"}},
            }))
            .unwrap();
            r.status = Some(crate::engine::api::ReleaseStatus {
                observed_generation: Some(observed),
                ..Default::default()
            });
            Arc::new(r)
        };
        // Home-cluster Releases: the shard of namespace `ns` is shard_of("ns/").
        let namespaces: Vec<String> = (0..40).map(|i| format!("ns{i}")).collect();
        let shard = |ns: &str| shard::shard_of(&format!("{ns}/"), 3);
        let mine = namespaces.iter().find(|n| shard(n) == 1).unwrap();
        let other = namespaces.iter().find(|n| shard(n) != 1).unwrap();
        let releases = vec![
            release(mine, "steady", 1, 1),
            release(other, "elsewhere", 2, 1),
            release(mine, "changed", 2, 1),
        ];
        assert_eq!(
            taken_over(&releases, &BTreeSet::from([1]), 3),
            (
                vec![format!("{mine}/changed")],
                vec![format!("{mine}/steady")]
            )
        );
        assert_eq!(taken_over(&releases, &BTreeSet::new(), 3), (vec![], vec![]));
    }
}

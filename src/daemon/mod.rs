//! `convoy daemon`: the engine wired into controllers — the Release controller, the observer's
//! drift and health loops, the Cluster and source controllers — with sharding by Lease,
//! health and metrics endpoints, and a graceful shutdown.
//!
//! Design: DESIGN.md sections 2–4. The loops call the same engine functions the CLI calls;
//! the spec's two processes (controller-manager and observer) are `--role controller` and
//! `--role observer` of this one binary.

pub mod enqueue;
pub mod http;
pub mod informer;
pub mod metrics;
pub mod passes;
pub mod queue;
pub mod shard;
pub mod worker;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use kube::runtime::events::{Recorder, Reporter};
use kube::{Api, Client, Config, ResourceExt};

use self::enqueue::{
    applied_or_healthy_changed, attempted_render_changed, inventory_wakes_controller,
    inventory_wakes_observer, should_enqueue_on_update,
};
use self::informer::{Handler, key_of};
use self::metrics::{CountRequestsLayer, Metrics};
use self::passes::Shared;
use self::queue::WorkQueue;
use self::shard::{HeldShards, LeaseConfig, cluster_key};
use crate::engine::api::{
    Cluster, GitRepository, HelmRegistry, OCIRegistry, Release, ReleaseInventory,
};
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
        self.0
            .all()
            .into_iter()
            .filter(|r| cluster_key(r) == key)
            .collect()
    }
}

/// Run until SIGTERM or Ctrl-C; then finish the passes in flight, release the Leases, return.
pub async fn run(kube_config: Config, config: DaemonConfig) -> Result<(), DaemonError> {
    let metrics = Metrics::new();
    // Every client the daemon builds (its own, and those that impersonate a Release's
    // ServiceAccount) counts its requests.
    let layer = CountRequestsLayer(metrics.clone());
    let factory: ClientFactory = Arc::new(move |config| {
        Ok(kube::client::ClientBuilder::try_from(config)?
            .with_layer(&layer)
            .build())
    });
    let home = Connection::with_factory(kube_config, factory)
        .and_then(|c| c.with_api_timeout(config.api_timeout))
        .map_err(DaemonError::Connect)?;
    let client: Client = home.client.clone();
    let watch_client: Client = home.watch_client.clone();
    let (shutdown_tx, shutdown_rx) = tokio::sync::watch::channel(false);
    let (release_leases_tx, release_leases_rx) = tokio::sync::watch::channel(false);

    let held = HeldShards::new(config.shards);
    let gate: Arc<dyn ShardGate> = if config.shards == 0 {
        Arc::new(OwnsEveryShard)
    } else {
        Arc::new(held.clone())
    };
    let coordinator = Arc::new(Coordinator::with_policy(
        SourceCache::new(config.cache_dir.clone()),
        config.sources.clone(),
    ));
    let mut ctx = Context::new(home.clone(), coordinator);
    ctx.shard = gate;
    ctx.tenancy = Arc::new(config.tenancy.clone());
    ctx.render_timeout = config.render_timeout;
    ctx.digest_key = Some(Arc::new(crate::engine::digest_key::KeyCell::new(
        client.clone(),
        config.lease_namespace.clone(),
    )));
    ctx.concurrency = config.concurrency;
    ctx.store = config.render_store.open(&client, &config.lease_namespace);
    let releases: Arc<informer::Cache<Release>> = Arc::default();
    ctx.releases = Some(Arc::new(ReleasesByCluster(releases.clone())));

    let shared = Arc::new(Shared {
        ctx: Arc::new(ctx),
        releases,
        inventories: Arc::default(),
        clusters: Arc::default(),
        gits: Arc::default(),
        helms: Arc::default(),
        ocis: Arc::default(),
        health_memory: HealthMemory::default(),
        recorder: Recorder::new(
            client.clone(),
            Reporter {
                controller: "convoy".into(),
                instance: Some(config.identity.clone()),
            },
        ),
        metrics: metrics.clone(),
        controller_queue: WorkQueue::new(),
    });
    let drift_queue = WorkQueue::new();
    let health_queue = WorkQueue::new();
    let cluster_queue = WorkQueue::new();
    let git_queue = WorkQueue::new();
    let helm_queue = WorkQueue::new();
    let oci_queue = WorkQueue::new();

    let mut tasks = Vec::new();
    let mut workers = Vec::new();

    // Releases: one informer, a handler per loop.
    let mut release_handlers: Vec<Handler<Release>> = Vec::new();
    // Per-Release metrics follow the cache, whoever wrote the status.
    let metrics_of_releases = metrics.clone();
    release_handlers.push(Box::new(move |old, new| match (new, old) {
        (Some(r), _) => {
            let namespace = r.metadata.namespace.as_deref().unwrap_or_default();
            let name = r.metadata.name.as_deref().unwrap_or_default();
            let status = r.status.clone().unwrap_or_default();
            let conditions: Vec<(String, crate::engine::api::ConditionStatus)> = status
                .conditions
                .iter()
                .map(|c| (c.type_.clone(), c.status))
                .collect();
            metrics_of_releases.release_conditions(namespace, name, &conditions);
            if let Some(at) = status
                .last_successful
                .as_ref()
                .and_then(|a| a.attempted_at.as_ref())
            {
                metrics_of_releases
                    .release_last_applied
                    .get_or_create(&metrics::ReleaseLabels {
                        namespace: namespace.to_string(),
                        name: name.to_string(),
                    })
                    .set(at.0.as_second() as f64);
            }
        }
        (None, Some(gone)) => metrics_of_releases.forget_release(
            gone.metadata.namespace.as_deref().unwrap_or_default(),
            gone.metadata.name.as_deref().unwrap_or_default(),
        ),
        (None, None) => {}
    }));
    if config.role.controller() {
        let queue = shared.controller_queue.clone();
        let shared_for_waves = shared.clone();
        release_handlers.push(Box::new(move |old, new| {
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
            // An Applied or Healthy change moves the next cluster wave on the same cluster.
            if old
                .is_some_and(|o| applied_or_healthy_changed(o.status.as_ref(), new.status.as_ref()))
            {
                let wave = new.spec.cluster_wave.as_ref().map(|w| w.wave).unwrap_or(0);
                let cluster = cluster_key(new);
                for other in shared_for_waves.releases.all() {
                    let other_wave = other.spec.cluster_wave.as_ref().map(|w| w.wave);
                    if cluster_key(&other) == cluster && other_wave.is_some_and(|w| w > wave) {
                        queue.add(&key_of(other.as_ref()));
                    }
                }
            }
        }));
    }
    if config.role.observer() {
        for queue in [drift_queue.clone(), health_queue.clone()] {
            release_handlers.push(Box::new(move |old, new| {
                let Some(new) = new else { return };
                let key = key_of(new);
                let deleting = new.metadata.deletion_timestamp.is_some()
                    && old.is_none_or(|o| o.metadata.deletion_timestamp.is_none());
                match old {
                    None => queue.add(&key),
                    Some(old)
                        if should_enqueue_on_update(&old.metadata, &new.metadata, false)
                            || deleting =>
                    {
                        queue.add(&key)
                    }
                    Some(old)
                        if attempted_render_changed(old.status.as_ref(), new.status.as_ref()) =>
                    {
                        queue.add(&key)
                    }
                    Some(_) => {}
                }
            }));
        }
    }
    watch::<Release>(
        &watch_client,
        &config.namespaces,
        shared.releases.clone(),
        release_handlers,
        &shutdown_rx,
        &mut tasks,
    );

    // ReleaseInventories: the controller's and the observer's handlers.
    let mut inventory_handlers: Vec<Handler<ReleaseInventory>> = Vec::new();
    if config.role.controller() {
        let queue = shared.controller_queue.clone();
        inventory_handlers.push(Box::new(move |old, new| {
            let empty = ReleaseInventory::default();
            let (key, wakes) = match (old, new) {
                (old, Some(new)) => (
                    key_of(new),
                    inventory_wakes_controller(old.unwrap_or(&empty), new),
                ),
                (Some(old), None) => (key_of(old), false),
                (None, None) => return,
            };
            if wakes {
                queue.add(&key);
            }
        }));
    }
    if config.role.observer() {
        // A controller write to the inventory means something was applied: both observer
        // loops look again.
        let (health, drift) = (health_queue.clone(), drift_queue.clone());
        inventory_handlers.push(Box::new(move |old, new| {
            let empty = ReleaseInventory::default();
            if let Some(new) = new
                && inventory_wakes_observer(old.unwrap_or(&empty), new)
            {
                health.add(&key_of(new));
                drift.add(&key_of(new));
            }
        }));
    }
    watch::<ReleaseInventory>(
        &watch_client,
        &config.namespaces,
        shared.inventories.clone(),
        inventory_handlers,
        &shutdown_rx,
        &mut tasks,
    );

    if config.role.controller() {
        watch::<Cluster>(
            &watch_client,
            &config.namespaces,
            shared.clusters.clone(),
            vec![generation_handler(cluster_queue.clone())],
            &shutdown_rx,
            &mut tasks,
        );
        watch::<GitRepository>(
            &watch_client,
            &config.namespaces,
            shared.gits.clone(),
            vec![generation_handler(git_queue.clone())],
            &shutdown_rx,
            &mut tasks,
        );
        watch::<HelmRegistry>(
            &watch_client,
            &config.namespaces,
            shared.helms.clone(),
            vec![generation_handler(helm_queue.clone())],
            &shutdown_rx,
            &mut tasks,
        );
        watch::<OCIRegistry>(
            &watch_client,
            &config.namespaces,
            shared.ocis.clone(),
            vec![generation_handler(oci_queue.clone())],
            &shutdown_rx,
            &mut tasks,
        );
        let s = shared.clone();
        workers.extend(worker::spawn(
            "controller",
            config.workers,
            shared.controller_queue.clone(),
            metrics.clone(),
            move |k, f| passes::controller(s.clone(), k, f),
        ));
        let s = shared.clone();
        workers.extend(worker::spawn(
            "cluster",
            2,
            cluster_queue.clone(),
            metrics.clone(),
            move |k, f| passes::cluster(s.clone(), k, f),
        ));
        let s = shared.clone();
        workers.extend(worker::spawn(
            "git",
            2,
            git_queue.clone(),
            metrics.clone(),
            move |k, f| passes::git(s.clone(), k, f),
        ));
        let s = shared.clone();
        workers.extend(worker::spawn(
            "helm",
            1,
            helm_queue.clone(),
            metrics.clone(),
            move |k, f| passes::helm(s.clone(), k, f),
        ));
        let s = shared.clone();
        workers.extend(worker::spawn(
            "oci",
            1,
            oci_queue.clone(),
            metrics.clone(),
            move |k, f| passes::oci(s.clone(), k, f),
        ));
    }
    if config.role.observer() {
        let s = shared.clone();
        workers.extend(worker::spawn(
            "drift",
            config.workers,
            drift_queue.clone(),
            metrics.clone(),
            move |k, f| passes::drift(s.clone(), k, f),
        ));
        let s = shared.clone();
        workers.extend(worker::spawn(
            "health",
            config.workers,
            health_queue.clone(),
            metrics.clone(),
            move |k, f| passes::health(s.clone(), k, f),
        ));
    }

    // Readiness: every informer this role needs has listed once and its watches work (a
    // watch failing again and again, say for a missing RBAC permission, makes it unready).
    let ready = Arc::new(AtomicBool::new(false));
    {
        let ready = ready.clone();
        let shared = shared.clone();
        let role = config.role;
        let metrics = metrics.clone();
        let mut stop = shutdown_rx.clone();
        tasks.push(tokio::spawn(async move {
            let mut announced = false;
            loop {
                let controller = role.controller();
                let caches: [(&str, bool, bool, usize); 6] = [
                    ("Release", true, shared.releases.synced() && shared.releases.watching(), shared.releases.watch_errors()),
                    ("ReleaseInventory", true, shared.inventories.synced() && shared.inventories.watching(), shared.inventories.watch_errors()),
                    ("Cluster", controller, shared.clusters.synced() && shared.clusters.watching(), shared.clusters.watch_errors()),
                    ("GitRepository", controller, shared.gits.synced() && shared.gits.watching(), shared.gits.watch_errors()),
                    ("HelmRegistry", controller, shared.helms.synced() && shared.helms.watching(), shared.helms.watch_errors()),
                    ("OCIRegistry", controller, shared.ocis.synced() && shared.ocis.watching(), shared.ocis.watch_errors()),
                ];
                let mut all = true;
                for (resource, needed, ok, errors) in caches {
                    if needed {
                        all &= ok;
                        metrics.watch_errors_seen(resource, errors as u64);
                    }
                }
                ready.store(all, Ordering::Relaxed);
                if all && !announced {
                    tracing::info!("caches synced");
                    announced = true;
                }
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(if announced { 1000 } else { 100 })) => {}
                    _ = stop.changed() => return,
                }
            }
        }));
    }

    // The informer resync: every key of every loop again, now and then.
    {
        let queues: Vec<(WorkQueue, bool)> = vec![
            (shared.controller_queue.clone(), config.role.controller()),
            (drift_queue.clone(), config.role.observer()),
            (health_queue.clone(), config.role.observer()),
        ];
        let shared = shared.clone();
        let every = config.resync;
        let mut stop = shutdown_rx.clone();
        tasks.push(tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(every) => {}
                    _ = stop.changed() => return,
                }
                for key in shared.releases.keys() {
                    for (queue, on) in &queues {
                        if *on {
                            queue.add(&key);
                        }
                    }
                }
            }
        }));
    }

    // Leases, when sharded; the shards held show in the metrics.
    let lease_task = if config.shards > 0 {
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
        let held_for_metrics = held.clone();
        let metrics_for_leases = metrics.clone();
        let mut stop = shutdown_rx.clone();
        let queues = vec![
            shared.controller_queue.clone(),
            drift_queue.clone(),
            health_queue.clone(),
        ];
        let shared_for_leases = shared.clone();
        tasks.push(tokio::spawn(async move {
            let mut before = held_for_metrics.held();
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(250)) => {}
                    _ = stop.changed() => return,
                }
                let now_held = held_for_metrics.held();
                metrics_for_leases.shards_held.set(now_held.len() as i64);
                // A newly held shard: its Releases get a pass at once.
                if now_held != before {
                    for key in shared_for_leases.releases.keys() {
                        for q in &queues {
                            q.add(&key);
                        }
                    }
                    before = now_held;
                }
            }
        }));
        // The Leases are kept until the passes in flight are done or cancelled: released
        // earlier, another replica could start on a shard this one still writes to.
        Some(tokio::spawn(shard::run_leases(
            client.clone(),
            lease_config,
            held.clone(),
            release_leases_rx,
        )))
    } else {
        None
    };

    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|source| DaemonError::Listen {
            addr: config.listen,
            source,
        })?;
    tracing::info!(addr = %listener.local_addr().map(|a| a.to_string()).unwrap_or_default(), "serving /healthz, /readyz, /metrics");
    tasks.push(tokio::spawn(http::serve(
        listener,
        ready,
        metrics.clone(),
        shutdown_rx.clone(),
    )));

    wait_for_signal().await;
    tracing::info!(
        grace_seconds = config.shutdown_grace.as_secs_f64(),
        "shutting down: finishing the passes in flight"
    );
    let _ = shutdown_tx.send(true);
    for queue in [
        &shared.controller_queue,
        &drift_queue,
        &health_queue,
        &cluster_queue,
        &git_queue,
        &helm_queue,
        &oci_queue,
    ] {
        queue.shut_down();
    }
    // Passes in flight get the grace period; then they are cancelled where they stand (a
    // cancelled pass leaves what a crash leaves: the inventory's pending wave covers it).
    let mut finished = 0;
    let drained = tokio::time::timeout(config.shutdown_grace, async {
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
            crate::engine::duration::human(config.shutdown_grace)
        );
        // A handle already awaited to its end may not be polled again.
        for w in workers.into_iter().skip(finished) {
            w.abort();
            let _ = w.await;
        }
    }
    let _ = release_leases_tx.send(true);
    if let Some(lease_task) = lease_task {
        let _ = lease_task.await;
    }
    for t in tasks {
        t.abort();
    }
    tracing::info!("stopped");
    Ok(())
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

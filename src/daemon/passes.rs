//! The passes of each loop: the Release controller, the drift and health loops, and the
//! Cluster and source controllers. Each reads its object from the informer cache and calls
//! the same engine function the CLI calls.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::PostParams;
use kube::runtime::events::{Event, EventType, Recorder};
use kube::{Api, Resource, ResourceExt};

use super::informer::{Cache, key_of};
use super::queue::WorkQueue;
use super::worker::{PassError, PassResult};
use crate::engine::api::{
    Artifact, AttemptPhase, Cluster, ClusterStatus, Condition, GitRepository, HelmRegistry,
    OCIRegistry, Release, ReleaseInventory, SourceKind, SourceStatus,
};
use crate::engine::api::{ConditionStatus, ReadyReason, condition_types};
use crate::engine::cluster::connect_cluster;
use crate::engine::drift::{DriftPass, Verdict, drift_pass};
use crate::engine::duration::GoDuration;
use crate::engine::error::chain;
use crate::engine::health::{HealthMemory, health_pass};
use crate::engine::objects::ObjectReader;
use crate::engine::reconcile::sync_handler;
use crate::engine::runtime::{Context, Requeue};
use crate::engine::source::resolve::git_request;
use crate::engine::status::{condition, now, set_condition};

/// What every pass shares.
pub struct Shared {
    pub ctx: Arc<Context>,
    pub releases: Arc<Cache<Release>>,
    pub inventories: Arc<Cache<ReleaseInventory>>,
    pub clusters: Arc<Cache<Cluster>>,
    pub gits: Arc<Cache<GitRepository>>,
    pub helms: Arc<Cache<HelmRegistry>>,
    pub ocis: Arc<Cache<OCIRegistry>>,
    /// The health loop's rule sets (read through the engine's listers).
    pub rule_sets: Arc<Cache<crate::engine::api::HealthRuleSet>>,
    pub global_rule_sets: Arc<Cache<crate::engine::api::GlobalHealthRuleSet>>,
    pub health_memory: HealthMemory,
    pub recorder: Recorder,
    pub metrics: Arc<super::metrics::Metrics>,
    /// The Release controller's queue (source controllers enqueue Releases on a new revision).
    pub controller_queue: WorkQueue,
    /// The health loop's queue (a pass put off while the controller syncs goes back on it).
    pub health_queue: WorkQueue,
    /// The drift loop's queue (the live-object watches wake it, `daemon::drift_wake`).
    pub drift_queue: WorkQueue,
    /// The pace of those wakes, which a wake put off during a sync keeps too.
    pub drift_wakes: Arc<super::drift_wake::DriftWakes>,
    /// The Releases the controller is reconciling now.
    pub syncing: Arc<super::syncing::Syncing>,
    /// The watches that answer the observer loops' reads of live objects.
    pub live: Arc<super::live::LiveTargets>,
    /// The revision this process last fetched of each source.
    pub fetched: FetchedRevisions,
    /// The HelmRegistry and OCIRegistry loops' checks, which run beside their passes.
    pub checks: super::checks::Checks,
}

/// The revision this process last fetched of each source (`Kind/namespace/name`). Every
/// replica fetches each source for the Releases of its shards, but only one writes the
/// source's status: a replica wakes its Releases when its own fetch moves, which it cannot
/// tell from a status another replica may already have written. A source deleted and created
/// again under its name (another uid) counts as moved.
#[derive(Default)]
pub struct FetchedRevisions(std::sync::Mutex<HashMap<String, (String, String)>>);

impl FetchedRevisions {
    /// Record `revision` of `source` (object `uid`); whether it moved: from the last one this
    /// process fetched of that object, or on its first fetch from the one the status names
    /// (`recorded`).
    fn moved(&self, source: &str, uid: &str, revision: &str, recorded: Option<&str>) -> bool {
        let now = (uid.to_string(), revision.to_string());
        let previous = crate::engine::locks::lock(&self.0).insert(source.to_string(), now);
        match previous {
            Some((previous_uid, previous)) if previous_uid == uid => previous != revision,
            _ => recorded != Some(revision),
        }
    }

    /// A source gone from the cache (`key`: its queue key, `namespace/name`).
    fn forget(&self, kind: SourceKind, key: &str) {
        crate::engine::locks::lock(&self.0).remove(&format!("{}/{key}", kind.as_str()));
    }
}

/// Marks a controller pass as running for [`super::syncing::Syncing`], and at its end (any
/// return, a cancelled pass too) queues the health pass and the drift wake it put off.
struct SyncingGuard<'a> {
    shared: &'a Shared,
    key: &'a str,
}

impl<'a> SyncingGuard<'a> {
    fn begin(shared: &'a Shared, key: &'a str) -> Self {
        shared.syncing.begin(key);
        Self { shared, key }
    }
}

impl Drop for SyncingGuard<'_> {
    fn drop(&mut self) {
        let put_off = self.shared.syncing.end(self.key);
        if put_off.health {
            self.shared.health_queue.add(self.key);
        }
        if put_off.drift {
            self.shared.drift_wakes.changed(self.key);
        }
    }
}

/// The Release of `key` in full, or how the pass ends without one. A stub (a Release of a
/// shard this replica did not hold when its last event came) of a shard held now is read from
/// the API and cached in full; a stub of a shard held elsewhere is nothing to work on (Skip).
/// A failed read is an error, so the key is retried: nothing else would queue it again
/// before the resync.
pub async fn release(shared: &Shared, key: &str) -> Result<Arc<Release>, PassResult> {
    if let Some(full) = shared.releases.get(key) {
        return Ok(full);
    }
    let Some(stub) = shared.releases.stub(key) else {
        return Err(PassResult::Skip);
    };
    if !shared.ctx.shard.owns(&stub) {
        return Err(PassResult::Skip);
    }
    let api: Api<Release> = Api::namespaced(
        shared.ctx.home.client.clone(),
        &stub.namespace().unwrap_or_default(),
    );
    let mut live = match api.get_opt(&stub.name_any()).await {
        Ok(Some(live)) => live,
        // Gone: its watch event removes the stub.
        Ok(None) => return Err(PassResult::Skip),
        Err(e) => {
            return Err(PassResult::Error(PassError::api(
                format!("cannot read Release {key} of a shard taken over"),
                &e,
            )));
        }
    };
    live.metadata.managed_fields = None;
    let live = Arc::new(live);
    if shared.releases.replace_stub(key, live.clone()) {
        super::record_release_metrics(&shared.metrics, &live);
        Ok(live)
    } else {
        shared.releases.get(key).ok_or(PassResult::Skip)
    }
}

/// The Release controller.
pub async fn controller(shared: Arc<Shared>, key: String, failures: u32) -> PassResult {
    let _syncing = SyncingGuard::begin(&shared, &key);
    let release = match release(&shared, &key).await {
        Ok(release) => release,
        Err(end) => return end,
    };
    match sync_handler(&shared.ctx, &release, failures).await {
        Err(e) => PassResult::Error(PassError::of(&e)),
        Ok(result) => {
            if let Some(wait) = result.fetching {
                return PassResult::Fetching(wait);
            }
            let Some(outcome) = result.outcome.clone() else {
                return match result.requeue {
                    Requeue::Never => PassResult::Skip,
                    requeue => PassResult::Done {
                        reason: "Finalizing".into(),
                        requeue,
                    },
                };
            };
            if let Some(error) = &result.error {
                tracing::warn!(release = %key, reason = %outcome.reason, "{error}");
            }
            for (stage, seconds) in &outcome.stage_seconds {
                shared
                    .metrics
                    .stage_seconds
                    .get_or_create(&super::metrics::StageLabels {
                        stage: stage.to_string(),
                    })
                    .observe(*seconds);
            }
            if result.wrote_status || outcome.objects_sent > 0 {
                announce(&shared, &key, &release, &result, &outcome).await;
            }
            if outcome.retry {
                PassResult::Retry {
                    reason: outcome.reason.to_string(),
                    requeue: result.requeue,
                }
            } else {
                PassResult::Done {
                    reason: outcome.reason.to_string(),
                    requeue: result.requeue,
                }
            }
        }
    }
}

/// What operators see of a reconcile whose outcome changed: one log line (Release, stage,
/// reason, render), and Events: a Warning for a failure, Normal ones for a render applied, a
/// rollback, drift put back, and objects handed to another Release.
async fn announce(
    shared: &Shared,
    key: &str,
    release: &Release,
    result: &crate::engine::reconcile::HandlerResult,
    outcome: &crate::engine::reconcile::ReconcileOutcome,
) {
    use crate::engine::api::Reason;
    use crate::engine::render::render_ref::short;
    let stage = outcome
        .attempt
        .failure
        .as_ref()
        .map(|f| f.stage.clone())
        .unwrap_or_default();
    let render = outcome
        .attempt
        .render_ref
        .as_deref()
        .map(short)
        .unwrap_or_default();
    let failed = outcome.attempt.phase == Some(AttemptPhase::Failed);
    if !result.wrote_status {
        // Nothing new to say in the log.
    } else if failed {
        tracing::warn!(release = %key, stage = %stage, reason = %outcome.reason, render = %render, "{}", outcome.message);
    } else {
        tracing::info!(release = %key, stage = %stage, reason = %outcome.reason, render = %render, "{}", outcome.message);
    }
    let before = release.status.as_ref();
    let ran_before = before.and_then(|s| s.applied_render()).map(str::to_string);
    let runs_now = result
        .status
        .as_ref()
        .and_then(|s| s.applied_render())
        .map(str::to_string);
    let mut events: Vec<(EventType, &str, String, &str)> = Vec::new();
    if failed && result.wrote_status {
        events.push((
            EventType::Warning,
            outcome.reason.as_str(),
            outcome.message.clone(),
            "Reconcile",
        ));
    } else if failed {
        // A steady failure was reported when it began.
    } else if outcome.reason == Reason::RolledBack && result.wrote_status {
        events.push((
            EventType::Normal,
            "RolledBack",
            outcome.message.clone(),
            "Rollback",
        ));
    } else if outcome.applied_render && runs_now != ran_before && result.wrote_status {
        events.push((
            EventType::Normal,
            "Applied",
            outcome.message.clone(),
            "Apply",
        ));
    } else if outcome.applied_render && outcome.drift_put_back > 0 {
        // The same render again over objects that no longer held what it applied.
        events.push((
            EventType::Normal,
            "DriftCorrected",
            format!(
                "drift put back on {}: {}",
                crate::engine::explain::count(outcome.drift_put_back, "object"),
                outcome.message
            ),
            "Apply",
        ));
    } else if outcome.applied_render && outcome.objects_sent > 0 {
        // The same render sent again as the spec now asks (new `driftExclusions`, a
        // mutation's target), with no drift among what was sent: an apply, not a correction.
        events.push((
            EventType::Normal,
            "Applied",
            outcome.message.clone(),
            "Apply",
        ));
    }
    for notice in &outcome.notices {
        events.push((EventType::Normal, "HandedOver", notice.clone(), "Prune"));
    }
    for (type_, reason, note, action) in events {
        let event = Event {
            type_,
            reason: reason.to_string(),
            note: Some(truncate(&note, 1000)),
            action: action.into(),
            secondary: None,
        };
        if let Err(e) = shared
            .recorder
            .publish(&event, &release.object_ref(&()))
            .await
        {
            tracing::debug!("cannot record an event: {e}");
        }
    }
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// The drift loop.
pub async fn drift(shared: Arc<Shared>, key: String, _failures: u32) -> PassResult {
    let release = match release(&shared, &key).await {
        Ok(release) => release,
        Err(end) => return end,
    };
    match drift_pass(&shared.ctx, &release).await {
        Err(e) => PassResult::Error(PassError::of(&e)),
        Ok(None) => PassResult::Skip,
        Ok(Some(DriftPass {
            fetching: Some(wait),
            ..
        })) => PassResult::Fetching(wait),
        Ok(Some(pass)) => PassResult::Done {
            reason: match pass.verdict {
                Verdict::InSync { .. } => "InSync",
                Verdict::OutOfSync { .. } => "OutOfSync",
                Verdict::Unknown { .. } => "Unknown",
            }
            .into(),
            requeue: pass.requeue,
        },
    }
}

/// The health loop.
pub async fn health(shared: Arc<Shared>, key: String, _failures: u32) -> PassResult {
    if shared.syncing.put_off(&key) {
        return PassResult::PutOff;
    }
    let release = match release(&shared, &key).await {
        Ok(release) => release,
        Err(end) => return end,
    };
    match health_pass(&shared.ctx, &shared.health_memory, &release).await {
        Err(e) => PassResult::Error(PassError::of(&e)),
        Ok(None) => PassResult::Skip,
        Ok(Some(pass)) => PassResult::Done {
            reason: pass
                .condition
                .map(|c| c.reason)
                .unwrap_or_else(|| "Deleting".into()),
            requeue: pass.requeue,
        },
    }
}

fn interval(spec: Option<&GoDuration>, default: Duration) -> Duration {
    spec.map(GoDuration::get)
        .filter(|d| !d.is_zero())
        .unwrap_or(default)
}

/// The Cluster controller: probe reachability, write status with UpdateStatus when it changes.
/// Only the replica holding the Cluster's shard (the one its Releases are in) probes and
/// writes: with every replica doing it, all but one write failed with a conflict (741 warnings
/// in a 3-replica start at 1,000 Clusters, `scale_10k`) after a probe each. A shard taken over
/// queues its Clusters again.
pub async fn cluster(shared: Arc<Shared>, key: String, _failures: u32) -> PassResult {
    let Some(cluster) = shared.clusters.get(&key) else {
        return PassResult::Skip;
    };
    if !shared.ctx.shard.owns_key(&key) {
        return PassResult::Skip;
    }
    if let Some(result) = cluster_finalizer(&shared, &key, &cluster).await {
        return result;
    }
    let every = interval(cluster.spec.interval.as_ref(), Duration::from_secs(300));
    let old = cluster.status.clone().unwrap_or_default();
    let mut status = old.clone();
    status.observed_generation = cluster.metadata.generation;
    let at = now();
    let namespace = cluster.namespace().unwrap_or_default();
    let connected = match shared
        .ctx
        .tenancy
        .connection_in(&shared.ctx.home, &namespace)
    {
        Ok(tenant) => connect_cluster(&tenant, &shared.ctx.tenancy, &cluster)
            .await
            .map_err(|e| chain(&e)),
        Err(e) => Err(chain(&e)),
    };
    match connected {
        Ok(target) => {
            status.version = target.resolved.version.clone();
            status.server = target.resolved.server.clone();
            set_condition(
                &mut status.conditions,
                condition(
                    condition_types::READY,
                    ConditionStatus::True,
                    ReadyReason::Reachable,
                    "the API server answers",
                    cluster.metadata.generation,
                ),
                &at,
            );
        }
        Err(message) => {
            set_condition(
                &mut status.conditions,
                condition(
                    condition_types::READY,
                    ConditionStatus::False,
                    ReadyReason::Unreachable,
                    message,
                    cluster.metadata.generation,
                ),
                &at,
            );
        }
    }
    let changed = strip_probe(&old) != strip_probe(&status);
    if changed {
        status.last_probe_time = Some(at);
        let mut updated = (*cluster).clone();
        updated.status = Some(status.clone());
        let api: Api<Cluster> = Api::namespaced(
            shared.ctx.home.client.clone(),
            &cluster.namespace().unwrap_or_default(),
        );
        if let Err(e) = api
            .replace_status(&cluster.name_any(), &PostParams::default(), &updated)
            .await
        {
            return PassResult::Error(PassError::api(
                format!("cannot write the status of Cluster {key}"),
                &e,
            ));
        }
    }
    PassResult::Done {
        reason: if status_ready(&status.conditions) {
            "Ready"
        } else {
            "NotReady"
        }
        .into(),
        requeue: Requeue::After(every),
    }
}

/// How often a Cluster being deleted looks again for the Releases that still target it.
const CLUSTER_DELETION_RECHECK: Duration = Duration::from_secs(5);

/// The Cluster controller's finalizer (status-ownership.txt "Writes without SSA": added and
/// cleared with an Update of the full object). A Cluster that Releases still target keeps it
/// while it is deleted, so their finalize can prune through it; `None` when the pass goes on
/// to the probe.
async fn cluster_finalizer(shared: &Shared, key: &str, cluster: &Cluster) -> Option<PassResult> {
    use crate::engine::api::CLUSTER_FINALIZER;
    let namespace = cluster.namespace().unwrap_or_default();
    let name = cluster.name_any();
    let api: Api<Cluster> = Api::namespaced(shared.ctx.home.client.clone(), &namespace);
    let holds = cluster.finalizers().iter().any(|f| f == CLUSTER_FINALIZER);
    let mut updated = cluster.clone();
    if cluster.metadata.deletion_timestamp.is_none() {
        if holds {
            return None;
        }
        updated
            .metadata
            .finalizers
            .get_or_insert_with(Vec::new)
            .push(CLUSTER_FINALIZER.to_string());
    } else {
        if !holds {
            return Some(PassResult::Skip);
        }
        // Which Releases target it comes from the Release cache: before it has listed (a
        // replica just started, which may take a shard at once), none would seem to.
        if !shared.releases.synced() {
            return Some(PassResult::Done {
                reason: "WaitingForReleases".into(),
                requeue: Requeue::After(CLUSTER_DELETION_RECHECK),
            });
        }
        let targeting: Vec<String> = shared
            .releases
            .keys()
            .into_iter()
            .filter_map(|k| shared.releases.get_any(&k))
            .filter(|r| {
                r.namespace().as_deref() == Some(namespace.as_str())
                    && r.spec.cluster.as_deref() == Some(name.as_str())
            })
            .map(|r| r.name_any())
            .collect();
        if !targeting.is_empty() {
            tracing::info!(cluster = %key, releases = %targeting.join(", "), "Cluster deletion waits for the Releases that target it");
            return Some(PassResult::Done {
                reason: "WaitingForReleases".into(),
                requeue: Requeue::After(CLUSTER_DELETION_RECHECK),
            });
        }
        if let Some(f) = updated.metadata.finalizers.as_mut() {
            f.retain(|x| x != CLUSTER_FINALIZER);
        }
    }
    let params = PostParams {
        field_manager: Some(
            crate::engine::api::field_managers::CONTROLLER
                .as_str()
                .to_string(),
        ),
        ..Default::default()
    };
    match api.replace(&name, &params, &updated).await {
        // An update of metadata alone brings no event: the probe follows in a moment, once
        // the cache holds the update.
        Ok(_) => Some(PassResult::Done {
            reason: "Finalizer".into(),
            requeue: Requeue::After(Duration::from_secs(1)),
        }),
        Err(kube::Error::Api(s)) if s.code == 404 => Some(PassResult::Skip),
        Err(e) => Some(PassResult::Error(PassError::api(
            format!("cannot update the finalizer of Cluster {key}"),
            &e,
        ))),
    }
}

fn strip_probe(status: &ClusterStatus) -> ClusterStatus {
    let mut s = status.clone();
    s.last_probe_time = None;
    s
}

fn status_ready(conditions: &[Condition]) -> bool {
    conditions
        .iter()
        .any(|c| c.type_ == condition_types::READY && c.status == ConditionStatus::True)
}

/// Releases that read the source `kind` `namespace/name`.
fn releases_of(shared: &Shared, kind: SourceKind, namespace: &str, name: &str) -> Vec<String> {
    shared
        .releases
        .all_entries()
        .iter()
        .filter(|r| {
            r.spec.source.kind == kind
                && r.spec.source.name == name
                && r.namespace().as_deref() == Some(namespace)
        })
        .map(|r| key_of(r.as_ref()))
        .collect()
}

/// Why a source controller's pass could not fetch: the message of its `Ready=False`.
#[derive(Debug, thiserror::Error)]
pub enum SourcePassError {
    #[error(transparent)]
    Tenancy(crate::engine::connect::ConnectError),
    #[error(transparent)]
    Resolve(crate::engine::source::resolve::ResolveError),
    #[error(transparent)]
    Fetch(crate::engine::source::SourceError),
    /// A check that ran beside the passes ([`super::checks`]), as its status words it.
    #[error("{0}")]
    Checked(String),
}

/// Write a source's status when it changed; enqueue its Releases when the revision moved.
async fn finish_source<K>(
    shared: &Shared,
    object: &K,
    old: Option<SourceStatus>,
    result: Result<Option<(String, String)>, SourcePassError>,
    kind: SourceKind,
    every: Duration,
) -> PassResult
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + HasSourceStatus,
{
    let at: Time = now();
    let old = old.unwrap_or_default();
    let mut status = old.clone();
    status.observed_generation = object.meta().generation;
    match &result {
        Ok(artifact) => {
            if let Some((revision, digest)) = artifact {
                let moved = old.artifact.as_ref().map(|a| &a.revision) != Some(revision);
                if moved {
                    status.artifact = Some(Artifact {
                        revision: revision.clone(),
                        digest: digest.clone(),
                        last_update_time: Some(at.clone()),
                    });
                }
            }
            let message = artifact
                .as_ref()
                .map(|(r, _)| format!("fetched revision {r}"))
                .unwrap_or_else(|| "reachable".into());
            set_condition(
                &mut status.conditions,
                condition(
                    condition_types::READY,
                    ConditionStatus::True,
                    ReadyReason::Succeeded,
                    message,
                    object.meta().generation,
                ),
                &at,
            );
        }
        Err(error) => {
            set_condition(
                &mut status.conditions,
                condition(
                    condition_types::READY,
                    ConditionStatus::False,
                    ReadyReason::FetchFailed,
                    chain(error),
                    object.meta().generation,
                ),
                &at,
            );
        }
    }
    let namespace = object.namespace().unwrap_or_default();
    let name = object.name_any();
    let source = source_key(kind, &namespace, &name);
    let fetched = result.as_ref().ok().and_then(Option::as_ref);
    let recorded = old.artifact.as_ref().map(|a| a.revision.as_str());
    if let Some((revision, _)) = fetched
        && shared.fetched.moved(
            &source,
            object.meta().uid.as_deref().unwrap_or_default(),
            revision,
            recorded,
        )
    {
        for key in releases_of(shared, kind, &namespace, &name) {
            shared.controller_queue.add(&key);
        }
    }
    // One writer per status: the replica whose shard holds the source (with every replica
    // writing, all but one write of each change failed with a conflict, `scale_10k`).
    if status != old && shared.ctx.shard.owns_key(&source) {
        let mut updated = object.clone();
        updated.set_source_status(status.clone());
        let api: Api<K> = Api::namespaced(shared.ctx.home.client.clone(), &namespace);
        if let Err(e) = api
            .replace_status(&name, &PostParams::default(), &updated)
            .await
        {
            return PassResult::Error(PassError::api(
                format!(
                    "cannot write the status of {} {namespace}/{name}",
                    kind.as_str()
                ),
                &e,
            ));
        }
    }
    PassResult::Done {
        reason: if result.is_ok() { "Ready" } else { "NotReady" }.into(),
        requeue: Requeue::After(every),
    }
}

/// A source's key in [`FetchedRevisions`] and for the shard that writes its status.
fn source_key(kind: SourceKind, namespace: &str, name: &str) -> String {
    format!("{}/{namespace}/{name}", kind.as_str())
}

/// Access to the shared status type of the source kinds.
pub trait HasSourceStatus {
    fn set_source_status(&mut self, status: SourceStatus);
}

impl HasSourceStatus for GitRepository {
    fn set_source_status(&mut self, status: SourceStatus) {
        self.status = Some(status);
    }
}
impl HasSourceStatus for HelmRegistry {
    fn set_source_status(&mut self, status: SourceStatus) {
        self.status = Some(status);
    }
}
impl HasSourceStatus for OCIRegistry {
    fn set_source_status(&mut self, status: SourceStatus) {
        self.status = Some(status);
    }
}

/// The GitRepository controller: fetch its ref; a new revision wakes its Releases.
pub async fn git(shared: Arc<Shared>, key: String, _failures: u32) -> PassResult {
    let Some(repo) = shared.gits.get(&key) else {
        shared.fetched.forget(SourceKind::GitRepository, &key);
        let scope = format!("{}/{key}", SourceKind::GitRepository.as_str());
        shared.ctx.coordinator.forget(&scope);
        return PassResult::Skip;
    };
    let namespace = repo.namespace().unwrap_or_default();
    let result = match namespace_reader(&shared, &namespace) {
        Err(e) => Err(e),
        Ok(reader) => git_source(&shared, &reader, &namespace, &repo.name_any()).await,
    };
    if let Err(SourcePassError::Fetch(e)) = &result
        && let Some(wait) = e.fetching()
    {
        return PassResult::Fetching(wait.clone());
    }
    let every = interval(
        repo.spec.interval.as_ref(),
        crate::engine::source::resolve::DEFAULT_GIT_INTERVAL,
    );
    finish_source(
        &shared,
        repo.as_ref(),
        repo.status.clone(),
        result,
        SourceKind::GitRepository,
        every,
    )
    .await
}

/// Fetch a GitRepository's own ref: its revision and digest.
async fn git_source(
    shared: &Shared,
    reader: &ObjectReader,
    namespace: &str,
    name: &str,
) -> Result<Option<(String, String)>, SourcePassError> {
    let request = git_request(reader, namespace, name, None)
        .await
        .map_err(SourcePassError::Resolve)?;
    // Kept for this loop's next pass of the source when this one stops waiting.
    let reuse = crate::engine::source::Reuse {
        waiter: Some(source_key(SourceKind::GitRepository, namespace, name)),
        ..Default::default()
    };
    shared
        .ctx
        .coordinator
        .ensure_reusing(
            &request.scope,
            &request.request,
            request.credentials.as_ref(),
            &reuse,
        )
        .await
        .map(|a| Some((a.revision, a.digest)))
        .map_err(SourcePassError::Fetch)
}

/// How a source controller reads what a namespace's source names (its Secret): as that
/// namespace's default ServiceAccount when the daemon impersonates one (engine::tenancy).
fn namespace_reader(shared: &Shared, namespace: &str) -> Result<ObjectReader, SourcePassError> {
    let tenant = shared
        .ctx
        .tenancy
        .connection_in(&shared.ctx.home, namespace)
        .map_err(SourcePassError::Tenancy)?;
    Ok(ObjectReader::Tenant {
        own: shared.ctx.home.client.clone(),
        tenant: tenant.client,
        listers: shared.ctx.listers.clone(),
    })
}

/// The HelmRegistry controller: the repository index; a new index wakes its Releases.
pub async fn helm(shared: Arc<Shared>, key: String, _failures: u32) -> PassResult {
    let source = format!("{}/{key}", SourceKind::HelmRegistry.as_str());
    let Some(registry) = shared.helms.get(&key) else {
        shared.fetched.forget(SourceKind::HelmRegistry, &key);
        shared.checks.forget(&source);
        shared.ctx.coordinator.forget(&source);
        return PassResult::Skip;
    };
    let check = {
        let (shared, registry) = (shared.clone(), registry.clone());
        async move { helm_index(&shared, &registry).await.map_err(|e| chain(&e)) }
    };
    let late = format!(
        "cannot fetch {}: the index did not arrive",
        registry.spec.url
    );
    let of = checked_of(registry.as_ref());
    let result = match checked(&shared, &source, &of, late, check).await {
        Ok(found) => found,
        Err(wait) => return PassResult::Fetching(wait),
    };
    let every = interval(registry.spec.interval.as_ref(), Duration::from_secs(300));
    finish_source(
        &shared,
        registry.as_ref(),
        registry.status.clone(),
        result,
        SourceKind::HelmRegistry,
        every,
    )
    .await
}

/// `check` of the source `key` (the object `of` uid and generation), run beside the pass
/// ([`super::checks`]) under the fetch deadline like every fetch (`late`: what a check past it
/// failed to do; a registry that accepts and never answers held the HTTP client's 300 s):
/// its result, or the end to come back for.
async fn checked(
    shared: &Shared,
    key: &str,
    of: &str,
    late: String,
    check: impl std::future::Future<Output = super::checks::Found> + Send + 'static,
) -> Result<
    Result<Option<(String, String)>, SourcePassError>,
    crate::engine::source::coordinator::FetchWait,
> {
    let coordinator = &shared.ctx.coordinator;
    let deadline = coordinator.fetch_timeout();
    let check = async move {
        tokio::time::timeout(deadline, check)
            .await
            .unwrap_or_else(|_| {
                Err(format!(
                    "{late} within {} (the fetch deadline)",
                    crate::engine::duration::human(deadline)
                ))
            })
    };
    let found = match coordinator.patience() {
        Some(patience) => {
            let limit = coordinator.limit(key);
            shared.checks.run(key, of, patience, limit, check).await?
        }
        None => check.await,
    };
    Ok(found.map_err(SourcePassError::Checked))
}

/// What a check of `object` was of: a check of an older spec is not the answer for a newer one.
fn checked_of(object: &impl Resource) -> String {
    format!(
        "{}/{}",
        object.meta().uid.as_deref().unwrap_or_default(),
        object.meta().generation.unwrap_or_default()
    )
}

/// A HelmRegistry's index digest, read with the credentials its Secret holds (a Secret that
/// cannot be read fails the fetch: it never becomes an anonymous one).
async fn helm_index(
    shared: &Shared,
    registry: &HelmRegistry,
) -> Result<Option<(String, String)>, SourcePassError> {
    let namespace = registry.namespace().unwrap_or_default();
    crate::engine::source::resolve::check_url_length(
        "HelmRegistry",
        &namespace,
        &registry.name_any(),
        &registry.spec.url,
    )
    .map_err(SourcePassError::Resolve)?;
    let reader = namespace_reader(shared, &namespace)?;
    let credentials = crate::engine::source::resolve::credentials(
        &reader,
        &namespace,
        registry.spec.secret_ref.as_ref(),
    )
    .await
    .map_err(SourcePassError::Resolve)?;
    crate::engine::source::helm_repo::index_digest(
        &registry.spec.url,
        credentials.as_ref(),
        shared.ctx.coordinator.allowed_urls(),
    )
    .await
    .map(|d| Some((format!("index@{d}"), d)))
    .map_err(SourcePassError::Fetch)
}

/// The OCIRegistry controller: whether the registry answers.
pub async fn oci(shared: Arc<Shared>, key: String, _failures: u32) -> PassResult {
    let source = format!("{}/{key}", SourceKind::OciRegistry.as_str());
    let Some(registry) = shared.ocis.get(&key) else {
        shared.fetched.forget(SourceKind::OciRegistry, &key);
        shared.checks.forget(&source);
        shared.ctx.coordinator.forget(&source);
        return PassResult::Skip;
    };
    let (url, insecure) = (registry.spec.url.clone(), registry.spec.insecure);
    let too_long = crate::engine::source::resolve::check_url_length(
        "OCIRegistry",
        &registry.namespace().unwrap_or_default(),
        &registry.name_any(),
        &url,
    );
    let late = match &too_long {
        Ok(()) => format!("cannot fetch {url}: the registry did not answer"),
        Err(e) => e.to_string(),
    };
    let allowed = shared.ctx.coordinator.allowed_urls().clone();
    let check = async move {
        too_long.map_err(|e| e.to_string())?;
        crate::engine::source::oci::ping(&url, insecure, &allowed)
            .await
            .map(|()| None)
            .map_err(|e| chain(&e))
    };
    let of = checked_of(registry.as_ref());
    let result = match checked(&shared, &source, &of, late, check).await {
        Ok(found) => found,
        Err(wait) => return PassResult::Fetching(wait),
    };
    let every = interval(registry.spec.interval.as_ref(), Duration::from_secs(300));
    finish_source(
        &shared,
        registry.as_ref(),
        registry.status.clone(),
        result,
        SourceKind::OciRegistry,
        every,
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::FetchedRevisions;

    #[test]
    fn a_fetch_moves_on_a_new_revision_or_a_new_object_of_the_name() {
        let fetched = FetchedRevisions::default();
        let key = "GitRepository/apps/repo";
        // First fetch: against what the status records.
        assert!(!fetched.moved(key, "u1", "r1", Some("r1")));
        assert!(
            !fetched.moved(key, "u1", "r1", None),
            "then against the last fetch"
        );
        assert!(fetched.moved(key, "u1", "r2", Some("r1")));
        assert!(!fetched.moved(key, "u1", "r2", Some("r1")));
        // Deleted and created again: a new object at the same revision has not been seen.
        assert!(fetched.moved(key, "u2", "r2", None));
        fetched.forget(crate::engine::api::SourceKind::GitRepository, "apps/repo");
        assert!(fetched.moved(key, "u2", "r2", None));
    }
}

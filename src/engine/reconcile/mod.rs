//! The Release controller's reconcile, shared by `convoy sync` and `convoy daemon`.
//!
//! Spec: reconcile-flow.txt (syncHandler, finalize, reconcile stages, status assembly,
//! requeue rules). `sync_handler` runs the steps in the spec's order; `reconcile` runs the
//! stages, each of which can stop the pipeline with a [`ReconcileOutcome`].

pub mod assemble;
pub mod finalize;
pub mod gates;
pub mod hook_phase;
pub mod outcome;
pub mod requeue;
pub mod rollback;
pub mod stages;
pub mod sync;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{Api, ResourceExt};

pub use outcome::ReconcileOutcome;

use crate::engine::api::{
    FINALIZER, Release, ReleaseId, ReleaseStatus, RolloutState, RolloutStatus, SyncMode,
    annotations,
};
use crate::engine::inventory::InventoryHandle;
use crate::engine::rollout::{RolloutAction, RolloutInput, RolloutPlan, plan_rollout};
use crate::engine::runtime::{Context, Requeue};
use crate::engine::status::{now, status_changed, write_owned_status};

/// `newReconcileState`: the attempt time, the sync mode, and the pending /sync requests.
#[derive(Debug, Clone, PartialEq)]
pub struct ReconcileState {
    pub now: Time,
    pub mode: SyncMode,
    /// The /sync request (annotation value) not handled yet.
    pub pending_sync: Option<String>,
    /// The forced /sync request not handled yet.
    pub pending_force: Option<String>,
    /// Which loop reconciles (`controller`, or `drift` rendering what should run): a fetch a
    /// pass stops waiting for is kept for that loop's next pass.
    pub caller: &'static str,
}

/// Read the attempt's state from the Release and its cached status.
pub fn new_reconcile_state(release: &Release, status: &ReleaseStatus, now: Time) -> ReconcileState {
    let annotation = |key: &str| {
        release
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(key))
            .filter(|v| !v.is_empty())
            .cloned()
    };
    let pending_sync = annotation(annotations::SYNC_REQUESTED_AT)
        .filter(|v| status.last_handled_sync_at.as_ref() != Some(v));
    let pending_force = annotation(annotations::FORCE_SYNC_REQUESTED_AT)
        .filter(|v| status.last_handled_force_sync_at.as_ref() != Some(v));
    ReconcileState {
        now,
        mode: release.spec.sync_mode(),
        pending_sync,
        pending_force,
        caller: "controller",
    }
}

/// Run the stages of one reconcile.
pub async fn reconcile(
    ctx: &Context,
    release: &Release,
    status: &ReleaseStatus,
    state: &ReconcileState,
) -> ReconcileOutcome {
    let inventory = InventoryHandle::for_controller(ctx, release);
    let started = std::time::Instant::now();
    // The previous inventory is read while the render runs (stageSync needs it next); a
    // daemon takes it from its cache when that holds the version this process last saw.
    let (rendered, ()) = futures::join!(
        stages::stage_render(ctx, release, state),
        inventory.prefetch_cached(ctx.listers())
    );
    let render_seconds = started.elapsed().as_secs_f64();
    let rendered = match rendered {
        Ok(r) => r,
        Err(outcome) => {
            let mut outcome = *outcome;
            outcome.stage_seconds = vec![("render", render_seconds)];
            return outcome;
        }
    };
    let started = std::time::Instant::now();
    // Stage 2: planRollout, unless a pin decides what runs.
    let render_ref = rendered.rendered.render_ref.clone();
    let healthy = render_healthy(release, status, &inventory, &render_ref).await;
    let mut outcome = run_stages(ctx, release, status, state, &rendered, &inventory, healthy).await;
    outcome.render_healthy = healthy;
    outcome.inventory_without_hooks = inventory.known_without_hooks();
    outcome.stage_seconds = vec![
        ("render", render_seconds),
        ("sync", started.elapsed().as_secs_f64()),
    ];
    outcome
}

/// Whether `render_ref` is applied and assessed Healthy: the cached verdict says so and so
/// does every inventory entry (the verdict may be the previous render's, written before this
/// render was applied).
async fn render_healthy(
    release: &Release,
    status: &ReleaseStatus,
    inventory: &InventoryHandle,
    render_ref: &str,
) -> bool {
    // Without health assessment the verdict is NotConfigured, healthy once applied.
    if !crate::engine::health::configured(release) {
        return status.applied_render() == Some(render_ref);
    }
    if !assemble::verdict_healthy(status, render_ref) {
        return false;
    }
    // A rollout in progress finishes or times out on this answer: it reads the health loop's
    // latest states, not a cached copy (an observer in another process may be a moment ahead).
    let deciding = status
        .rollout
        .as_ref()
        .is_some_and(|r| r.state == RolloutState::Progressing);
    let read = if deciding {
        inventory.refresh_prefetched().await
    } else {
        inventory.peek_prefetched().await
    };
    match read {
        Ok(Some(inv)) => sync::inventory_healthy_for(&inv, render_ref),
        Ok(None) => false,
        Err(e) => {
            tracing::warn!(release = %ReleaseId::of(release), "cannot read the inventory for the health verdict: {}", crate::engine::error::chain(&e));
            false
        }
    }
}

/// Stages 2–6 after the render.
async fn run_stages(
    ctx: &Context,
    release: &Release,
    status: &ReleaseStatus,
    state: &ReconcileState,
    rendered: &stages::RenderStage,
    inventory: &InventoryHandle,
    healthy: bool,
) -> ReconcileOutcome {
    let render_ref = rendered.rendered.render_ref.clone();
    let plan = stage_plan_rollout(ctx, release, status, state, &render_ref, healthy).await;
    // Stage 3: applyLastHealthy.
    if plan.action == RolloutAction::ApplyLastHealthy
        && let Some(rollout) = plan.rollout.clone()
    {
        return rollback::apply_last_healthy(
            ctx, release, status, rendered, inventory, rollout, &state.now,
        )
        .await;
    }
    if let Some(hold) = gates::stage_gates(ctx, release, status, state, rendered).await {
        return hold.with_rollout(plan.rollout.map(|r| gate_held(r, status, &render_ref)));
    }
    let rollout = plan.rollout.map(|r| gate_opened(r, &state.now));
    let mut outcome = sync::stage_sync(
        ctx,
        release,
        status,
        state,
        rendered,
        inventory,
        rollout.as_ref(),
    )
    .await;
    if outcome.rollout.is_none() {
        outcome.rollout = rollout;
    }
    // Stage 6: a Syncing failure arms the syncFailed hooks, without waiting for them.
    if is_syncing_failure(&outcome) {
        run_sync_failed_hooks(ctx, release, rendered, inventory).await;
    }
    outcome
}

/// Stage 2, `planRollout`: at most one transition of the rollout state machine, unless a pin
/// decides what runs (then the pinned or current render is applied, with no rollout).
async fn stage_plan_rollout(
    ctx: &Context,
    release: &Release,
    status: &ReleaseStatus,
    state: &ReconcileState,
    render_ref: &str,
    healthy: bool,
) -> RolloutPlan {
    if assemble::pin_status(release).is_some() {
        return RolloutPlan {
            rollout: None,
            action: RolloutAction::ApplySource,
        };
    }
    // Where a rollback would go matters only to a rollout in progress (it asks the store).
    let last_healthy = match status.rollout.as_ref() {
        Some(r) if r.state == RolloutState::Progressing && r.render_ref == render_ref => {
            rollback::rollback_candidate(ctx, release, status).await
        }
        _ => None,
    };
    plan_rollout(&RolloutInput {
        policy: release.spec.failure_policy.as_deref(),
        previous: status.rollout.as_deref(),
        render_ref,
        healthy,
        last_healthy: last_healthy.as_deref(),
        forced: state.pending_force.is_some(),
        now: &state.now,
    })
}

/// `isSyncingFailure`: the attempt failed at the Syncing stage (a dry-run rejection, a failed
/// wave, a failed prune), or a preSync or sync hook failed (deviation: the spec names Syncing
/// failures only; Argo CD runs SyncFail hooks when a PreSync hook fails, and repositories
/// written for it expect so).
fn is_syncing_failure(outcome: &ReconcileOutcome) -> bool {
    let hook_failed_before_apply = outcome.attempt.failure.as_ref().is_some_and(|f| {
        matches!(
            f.hook_phase,
            Some(crate::engine::api::HookPhase::PreSync | crate::engine::api::HookPhase::Sync)
        )
    });
    outcome.is_syncing_failure() || hook_failed_before_apply
}

/// `runSyncFailedHooks`: arm the syncFailed hooks; their result is only logged.
async fn run_sync_failed_hooks(
    ctx: &Context,
    release: &Release,
    rendered: &stages::RenderStage,
    inventory: &InventoryHandle,
) {
    // A render refused for reaching into another namespace runs none of its hooks either.
    if let Err(refused) =
        sync::admission::tenancy_check(ctx, release, &rendered.target, &rendered.rendered.objects)
            .await
    {
        tracing::warn!(release = %ReleaseId::of(release), "syncFailed hooks not run: {refused}");
        return;
    }
    let content = crate::engine::content_hooks::split(&rendered.rendered.objects).hooks;
    let applier = ctx.applier(&rendered.target);
    let hook_run = hook_phase::HookRun {
        release,
        target: &rendered.target,
        applier: &applier,
        inventory,
        render_ref: &rendered.rendered.render_ref,
        content: &content,
    };
    let phase = crate::engine::api::HookPhase::SyncFailed;
    if let Err(e) = hook_phase::run_hook_phase(&hook_run, phase, None).await {
        tracing::warn!(release = %ReleaseId::of(release), "{}", crate::engine::error::chain(&e));
    }
}

/// A gate holds a render that is not applied: its rollout has not started, so the deadline
/// does not run (`startedAt` is cleared until the gate opens).
fn gate_held(
    mut rollout: RolloutStatus,
    status: &ReleaseStatus,
    render_ref: &str,
) -> RolloutStatus {
    let applied = status.applied_render() == Some(render_ref);
    if rollout.state == RolloutState::Progressing && rollout.render_ref == render_ref && !applied {
        rollout.started_at = None;
    }
    rollout
}

/// The gates are open: a Progressing rollout without `startedAt` starts now.
fn gate_opened(mut rollout: RolloutStatus, now: &Time) -> RolloutStatus {
    if rollout.state == RolloutState::Progressing && rollout.started_at.is_none() {
        rollout.started_at = Some(now.clone());
    }
    rollout
}

/// What `sync_handler` did.
#[derive(Debug, Clone, PartialEq)]
pub struct HandlerResult {
    /// `None` when the handler did not reconcile (not our shard, or a deletion).
    pub outcome: Option<ReconcileOutcome>,
    /// The status after this pass (written or unchanged).
    pub status: Option<ReleaseStatus>,
    /// Whether the status was written (it differed from the cached one).
    pub wrote_status: bool,
    pub requeue: Requeue,
    /// An error to log and count as a failure (the reconcile's own, such as ClusterNotReady).
    pub error: Option<String>,
    /// The source is still being fetched: come back for the Release when this ends.
    pub fetching: Option<crate::engine::source::coordinator::FetchWait>,
}

/// Errors `sync_handler` returns to the work queue for a retry.
#[derive(Debug, thiserror::Error)]
pub enum HandlerError {
    #[error("cannot write the status of Release {release}")]
    StatusWrite {
        release: String,
        #[source]
        source: Box<kube::Error>,
    },
    #[error("cannot update the finalizer of Release {release}")]
    Finalizer {
        release: String,
        #[source]
        source: Box<kube::Error>,
    },
    #[error("cannot finalize Release {release}")]
    Finalize {
        release: String,
        #[source]
        source: finalize::FinalizeError,
    },
    #[error("cannot roll up the lifecycle hooks of Release {release}")]
    Rollup {
        release: String,
        #[source]
        source: crate::engine::inventory::InventoryError,
    },
}

impl crate::engine::error::Categorized for HandlerError {
    fn category(&self) -> crate::engine::error::Category {
        match self {
            HandlerError::StatusWrite { source, .. } | HandlerError::Finalizer { source, .. } => {
                source.category()
            }
            HandlerError::Finalize { source, .. } => source.category(),
            HandlerError::Rollup { source, .. } => source.category(),
        }
    }
}

impl HandlerResult {
    /// A pass that did not reconcile (not our shard, a deletion, a lapsed shard).
    fn idle(requeue: Requeue) -> Self {
        Self {
            outcome: None,
            status: None,
            wrote_status: false,
            requeue,
            error: None,
            fetching: None,
        }
    }
}

/// `syncHandler`: one pass over a Release, in the spec's order. `failures` counts the
/// consecutive failed passes before this one (for the backoff).
pub async fn sync_handler(
    ctx: &Context,
    release: &Release,
    failures: u32,
) -> Result<HandlerResult, HandlerError> {
    let name = crate::engine::store::ReleaseId::of(release).to_string();
    // Step 2: the shard gate. Not ours: do nothing, not even finalize.
    if !ctx.shard.owns(release) {
        return Ok(HandlerResult::idle(Requeue::Never));
    }
    // Step 3: deletion.
    if release.metadata.deletion_timestamp.is_some() {
        return Ok(HandlerResult::idle(finalize::finalize(ctx, release).await?));
    }
    // Step 4: the finalizer.
    let release =
        ensure_finalizer(ctx, release)
            .await
            .map_err(|source| HandlerError::Finalizer {
                release: name.clone(),
                source: Box::new(source),
            })?;
    // Step 5: reconcile.
    let cached = release.status.clone().unwrap_or_default();
    let state = new_reconcile_state(&release, &cached, now());
    let started = std::time::Instant::now();
    let outcome = reconcile(ctx, &release, &cached, &state).await;
    tracing::debug!(elapsed_ms = started.elapsed().as_millis() as u64, reason = %outcome.reason, "reconciled");
    // The source is still being fetched: nothing was attempted, so nothing is written (a
    // status saying so at every slow fetch would be a write per pass for nothing new).
    if let Some(wait) = outcome.fetching.clone() {
        return Ok(HandlerResult {
            fetching: Some(wait),
            ..HandlerResult::idle(Requeue::Never)
        });
    }
    // Step 6: status assembly and write.
    let rollup = stages::apply_lifecycle_rollup(ctx, &release, &outcome)
        .await
        .map_err(|source| HandlerError::Rollup {
            release: name.clone(),
            source,
        })?;
    let mut status = assemble::assemble_status(&release, &cached, &outcome, &state, rollup);
    // The shard may have lapsed during the pass (a renewal that could not be made in time):
    // another replica may own the Release now, so this one writes nothing more.
    if !ctx.shard.owns(&release) {
        tracing::warn!(release = %name, "the shard lapsed during the reconcile; its status is not written");
        return Ok(HandlerResult::idle(Requeue::Never));
    }
    let changed = write_status(ctx, &release, &cached, &mut status, &state.now).await?;
    tracing::debug!(
        elapsed_ms = started.elapsed().as_millis() as u64,
        changed,
        "status assembled"
    );
    // Step 7: the next reconcile.
    let failures = if outcome.retry { failures + 1 } else { 0 };
    Ok(HandlerResult {
        requeue: requeue::requeue_for(&release, &outcome, failures),
        error: outcome.error.clone(),
        outcome: Some(outcome),
        status: Some(status),
        wrote_status: changed,
        fetching: None,
    })
}

/// Status assembly step 11: if the status changed, set `reconciledAt` and write it under
/// `convoy-release` (then record a rollout that just ended in the history). Returns whether
/// it wrote.
async fn write_status(
    ctx: &Context,
    release: &Release,
    cached: &ReleaseStatus,
    status: &mut ReleaseStatus,
    now: &Time,
) -> Result<bool, HandlerError> {
    if !status_changed(cached, status) {
        return Ok(false);
    }
    tracing::debug!(
        release = %crate::engine::store::ReleaseId::of(release),
        changed = ?crate::engine::status::changed_status_fields(cached, status),
        "writing the controller's status"
    );
    status.reconciled_at = Some(now.clone());
    let api: Api<Release> = Api::namespaced(
        ctx.home.client.clone(),
        &release.namespace().unwrap_or_default(),
    );
    write_owned_status(&api, &release.name_any(), status)
        .await
        .map_err(|source| HandlerError::StatusWrite {
            release: crate::engine::store::ReleaseId::of(release).to_string(),
            source: Box::new(source),
        })?;
    record_rollout_outcome(
        ctx,
        release,
        cached.rollout.as_deref(),
        status.rollout.as_deref(),
        status.last_attempted.as_deref(),
        now,
    )
    .await;
    Ok(true)
}

/// A rollout that just ended leaves its result on the render's history entry, so `convoy
/// history` can say how each render went (a failure is only logged: the history is a
/// record, not a step of the sync).
///
/// A render whose wave timed out stopped before recordHistory (stageSync step 8), so no entry
/// held it and `convoy history` never showed the render that was rolled back. Its entry is
/// made here when the store holds its render (persistRender stored it at step 2), with the
/// source revision of the attempt when that attempt was this render's.
async fn record_rollout_outcome(
    ctx: &Context,
    release: &Release,
    before: Option<&RolloutStatus>,
    after: Option<&RolloutStatus>,
    attempted: Option<&crate::engine::api::Attempt>,
    now: &Time,
) {
    use crate::engine::store::{HistoryEntry, HistoryOutcome, ReleaseId, with_entry, with_outcome};
    let (Some(store), Some(after)) = (&ctx.store, after) else {
        return;
    };
    let outcome = match after.state {
        RolloutState::Succeeded => HistoryOutcome::Succeeded,
        RolloutState::Failed => HistoryOutcome::Failed,
        RolloutState::RolledBack => HistoryOutcome::RolledBack,
        _ => return,
    };
    if before.is_some_and(|b| b.state == after.state && b.render_ref == after.render_ref) {
        return;
    }
    let id = ReleaseId::of(release);
    let result = async {
        let history = store.history(&id).await?;
        let recorded = history.iter().any(|h| h.render_ref == after.render_ref);
        let updated = if recorded {
            with_outcome(history, &after.render_ref, outcome)
        } else if let Some(bytes) = store.render_bytes(&id, &after.render_ref).await? {
            let source_revision = attempted
                .filter(|a| a.render_ref.as_deref() == Some(after.render_ref.as_str()))
                .and_then(|a| a.resolved_source.as_ref())
                .and_then(|s| s.revision.clone());
            let entry = HistoryEntry {
                render_ref: after.render_ref.clone(),
                recorded_at: after.finished_at.clone().unwrap_or_else(|| now.clone()),
                source_revision,
                outcome: Some(outcome),
                stored_bytes: Some(bytes),
            };
            with_entry(history, entry)
        } else {
            None
        };
        if let Some(updated) = updated {
            store.put_history(&id, &updated).await?;
            ctx.known_stored.recorded(release, &after.render_ref);
        }
        Ok::<(), crate::engine::store::StoreError>(())
    }
    .await;
    if let Err(e) = result {
        tracing::warn!(release = %id, "cannot record the rollout's outcome in the history: {}", crate::engine::error::chain(&e));
    }
}

/// The finalizer's Update (status-ownership.txt "Writes without SSA"), named after the
/// controller so `managedFields` says who holds the finalizer.
pub(crate) fn finalizer_update() -> kube::api::PostParams {
    kube::api::PostParams {
        field_manager: Some(
            crate::engine::api::field_managers::CONTROLLER
                .as_str()
                .to_string(),
        ),
        ..Default::default()
    }
}

/// `ensureFinalizer`: add the prune finalizer with an Update of the full object if missing.
pub async fn ensure_finalizer(ctx: &Context, release: &Release) -> Result<Release, kube::Error> {
    if release.finalizers().iter().any(|f| f == FINALIZER) {
        return Ok(release.clone());
    }
    let api: Api<Release> = Api::namespaced(
        ctx.home.client.clone(),
        &release.namespace().unwrap_or_default(),
    );
    let mut updated = release.clone();
    updated
        .metadata
        .finalizers
        .get_or_insert_with(Vec::new)
        .push(FINALIZER.to_string());
    api.replace(&release.name_any(), &finalizer_update(), &updated)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::api::Attempt;

    fn t(s: &str) -> Time {
        Time(s.parse().unwrap())
    }

    fn progressing(render: &str) -> RolloutStatus {
        RolloutStatus {
            render_ref: render.into(),
            state: RolloutState::Progressing,
            started_at: Some(t("2026-01-01T00:00:00Z")),
            finished_at: None,
            message: None,
        }
    }

    fn applied(render: &str) -> ReleaseStatus {
        ReleaseStatus {
            last_successful: Some(Box::new(Attempt {
                render_ref: Some(render.into()),
                ..Default::default()
            })),
            ..Default::default()
        }
    }

    #[test]
    fn a_gate_holding_an_unapplied_render_stops_the_deadline_until_it_opens() {
        let held = gate_held(progressing("new"), &applied("old"), "new");
        assert_eq!(held.started_at, None);
        let later = t("2026-01-01T05:00:00Z");
        assert_eq!(gate_opened(held, &later).started_at, Some(later.clone()));
        // An applied render (manual mode, nothing new) keeps its clock.
        let kept = gate_held(progressing("new"), &applied("new"), "new");
        assert_eq!(kept.started_at, Some(t("2026-01-01T00:00:00Z")));
        assert_eq!(
            gate_opened(kept, &later).started_at,
            Some(t("2026-01-01T00:00:00Z"))
        );
        // Finished rollouts are left alone.
        let mut done = progressing("new");
        done.state = RolloutState::Succeeded;
        assert!(gate_held(done, &applied("old"), "new").started_at.is_some());
    }
}

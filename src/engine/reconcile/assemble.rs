//! Status assembly: the new status from the cached status and the outcome.
//!
//! Spec: reconcile-flow.txt "Status assembly" steps 1–10 (step 11, the write, is in
//! `sync_handler`). Pure: tests feed it outcomes and read the status it builds.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::ReconcileState;
use super::outcome::ReconcileOutcome;
use crate::engine::api::ConditionStatus;
use crate::engine::api::{
    HealthyReason, LastHealthy, LifecycleReason, LifecycleStatus, PinStatus, Reason, Release,
    ReleaseStatus, RetentionPolicy, RolloutState, SyncMode, annotations, condition_types,
};
use crate::engine::status::{condition, remove_condition, set_condition};

/// Default `retentionPolicy.maxHistory`.
pub const DEFAULT_MAX_HISTORY: i32 = 10;

/// The lifecycle rollup (step 10): `status.lifecycle` and the `LifecycleSucceeded`
/// condition's status, reason and message. `None` when the Release has no hooks.
#[derive(Debug, Clone, PartialEq)]
pub struct LifecycleRollup {
    pub lifecycle: LifecycleStatus,
    pub status: ConditionStatus,
    pub reason: LifecycleReason,
    pub message: String,
}

/// Build the new status (steps 1–10).
pub fn assemble_status(
    release: &Release,
    cached: &ReleaseStatus,
    outcome: &ReconcileOutcome,
    state: &ReconcileState,
    lifecycle: Option<LifecycleRollup>,
) -> ReleaseStatus {
    let mut status = cached.clone();
    let generation = release.metadata.generation;
    let now = &state.now;
    compute_status(&mut status, outcome, generation, now);
    status.pin = pin_status(release);
    record_attempt(&mut status, outcome, state);
    replace_waves(&mut status, outcome);
    status.resolved_retention_policy = Some(resolved_retention_status(release));
    advance_last_healthy(&mut status, release, outcome, now);
    if let Some(request) = &state.pending_force {
        status.last_handled_force_sync_at = Some(request.clone());
    }
    rollout_status(&mut status, release, outcome, generation, now);
    apply_lifecycle(&mut status, lifecycle, generation, now);
    status
}

/// Steps 3 and 4: the attempt goes to `lastAttempted` (and, when it applied a render, to
/// `lastSuccessful`); in manual mode a /sync that applied goes to `lastHandledSyncAt`.
///
/// In automatic mode every /sync an attempt saw goes there too, whatever the attempt came to
/// (a deviation: the spec's step 4 sets it only in manual mode). A request that changes
/// nothing would otherwise write nothing at all (`status_changed` ignores attempt times), and
/// `convoy sync --request --wait` could not tell a handled request from a daemon that is not
/// running. It is written once per request: the next attempt finds it handled.
fn record_attempt(status: &mut ReleaseStatus, outcome: &ReconcileOutcome, state: &ReconcileState) {
    status.last_attempted = Some(Box::new(outcome.attempt.clone()));
    if outcome.applied_render {
        status.last_successful = Some(Box::new(
            outcome
                .successful
                .clone()
                .unwrap_or_else(|| outcome.attempt.clone()),
        ));
    }
    status.waiting = outcome.waiting.clone().map(Box::new);
    let handled = match state.mode {
        SyncMode::Manual => outcome.applied_render,
        SyncMode::Automatic => true,
    };
    if handled && let Some(request) = &state.pending_sync {
        status.last_handled_sync_at = Some(request.clone());
    }
}

/// Step 5, "the outcome replaces status.waves": a stop without wave data (a render failure,
/// a dry-run rejection, a hold before the apply, Pinned) leaves no table of an earlier render
/// beside its message. Waiting for /sync attempts nothing: the table of the render that runs
/// stays.
fn replace_waves(status: &mut ReleaseStatus, outcome: &ReconcileOutcome) {
    match &outcome.waves {
        Some(waves) => status.waves = waves.clone(),
        None if outcome.reason == Reason::WaitingForSync => {}
        None => status.waves.clear(),
    }
}

/// Step 10's result: `status.lifecycle` and `LifecycleSucceeded`, or neither without hooks.
fn apply_lifecycle(
    status: &mut ReleaseStatus,
    lifecycle: Option<LifecycleRollup>,
    generation: Option<i64>,
    now: &Time,
) {
    let Some(rollup) = lifecycle else {
        status.lifecycle = None;
        remove_condition(&mut status.conditions, condition_types::LIFECYCLE_SUCCEEDED);
        return;
    };
    status.lifecycle = Some(rollup.lifecycle);
    set_condition(
        &mut status.conditions,
        condition(
            condition_types::LIFECYCLE_SUCCEEDED,
            rollup.status,
            rollup.reason,
            rollup.message,
            generation,
        ),
        now,
    );
}

/// Step 1: `Applied` from the outcome, and `observedGeneration`.
fn compute_status(
    status: &mut ReleaseStatus,
    outcome: &ReconcileOutcome,
    generation: Option<i64>,
    now: &Time,
) {
    status.observed_generation = generation;
    set_condition(
        &mut status.conditions,
        condition(
            condition_types::APPLIED,
            outcome.applied_status(),
            outcome.reason,
            outcome.message.clone(),
            generation,
        ),
        now,
    );
}

/// Step 2: `status.pin` from the pin annotation; absent when not pinned.
pub fn pin_status(release: &Release) -> Option<PinStatus> {
    release
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(annotations::PIN))
        .map(|p| p.trim())
        .filter(|p| !p.is_empty())
        .map(|p| PinStatus {
            render_ref: p.to_string(),
        })
}

/// Step 6: the retention policy in effect.
pub fn resolved_retention_status(release: &Release) -> RetentionPolicy {
    RetentionPolicy {
        max_history: Some(
            release
                .spec
                .retention_policy
                .as_ref()
                .and_then(|r| r.max_history)
                .unwrap_or(DEFAULT_MAX_HISTORY),
        ),
    }
}

/// Step 7: `lastHealthy` advances when the verdict for the attempted render is healthy.
/// `reconcile` decided that from the inventory (`render_healthy`); it counts only when the
/// attempted render is also the one running (not after a rollback).
fn advance_last_healthy(
    status: &mut ReleaseStatus,
    release: &Release,
    outcome: &ReconcileOutcome,
    now: &Time,
) {
    let Some(render) = outcome.attempt.render_ref.as_deref() else {
        return;
    };
    let running = status.applied_render() == Some(render);
    // Without a health assessment the verdict is NotConfigured: healthy once it runs.
    let healthy = outcome.render_healthy || !crate::engine::health::configured(release);
    if !(healthy && running) {
        return;
    }
    if status
        .last_healthy
        .as_ref()
        .is_some_and(|h| h.render_ref == render)
    {
        return;
    }
    status.last_healthy = Some(Box::new(LastHealthy {
        render_ref: render.to_string(),
        resolved_source: outcome.attempt.resolved_source.clone(),
        healthy_at: Some(now.clone()),
    }));
}

/// Whether the cached Healthy condition says `render` is healthy: Healthy is True (Healthy or
/// NotConfigured) and it was assessed for the cached `lastAttempted`, which is `render`.
pub fn verdict_healthy(cached: &ReleaseStatus, render: &str) -> bool {
    let healthy = cached.condition(condition_types::HEALTHY).is_some_and(|c| {
        c.status == ConditionStatus::True
            && (c.reason == HealthyReason::Healthy || c.reason == HealthyReason::NotConfigured)
    });
    let for_this_render = cached.attempted_render() == Some(render);
    let applied = cached.applied_render() == Some(render);
    healthy && for_this_render && applied
}

/// Step 9: `status.rollout`, and `rolloutCondition`: `RolloutSucceeded` (reason = the rollout
/// state).
fn rollout_status(
    status: &mut ReleaseStatus,
    release: &Release,
    outcome: &ReconcileOutcome,
    generation: Option<i64>,
    now: &Time,
) {
    if release.spec.failure_policy.is_none() {
        status.rollout = None;
        remove_condition(&mut status.conditions, condition_types::ROLLOUT_SUCCEEDED);
        return;
    }
    if let Some(rollout) = &outcome.rollout {
        status.rollout = Some(Box::new(rollout.clone()));
    }
    match &status.rollout {
        Some(rollout) => {
            let condition_status = match rollout.state {
                RolloutState::Succeeded => ConditionStatus::True,
                RolloutState::Progressing => ConditionStatus::Unknown,
                RolloutState::Failed | RolloutState::RolledBack => ConditionStatus::False,
            };
            let message = rollout.message.clone().unwrap_or_else(|| {
                format!(
                    "rollout of render {} is {}",
                    crate::engine::render::render_ref::short(&rollout.render_ref),
                    rollout.state.as_str()
                )
            });
            set_condition(
                &mut status.conditions,
                condition(
                    condition_types::ROLLOUT_SUCCEEDED,
                    condition_status,
                    rollout.state.as_str(),
                    message,
                    generation,
                ),
                now,
            );
        }
        None => remove_condition(&mut status.conditions, condition_types::ROLLOUT_SUCCEEDED),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::api::Attempt;
    use crate::engine::reconcile::new_reconcile_state;
    use crate::engine::status::status_changed;

    fn release(mode: &str) -> Release {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "core.convoy.kumodo.io/v1alpha1", "kind": "Release",
            "metadata": {"name": "web", "namespace": "apps",
                "annotations": {"convoy.kumodo.io/sync-requested-at": "2026-01-01T00:00:01Z"}},
            "spec": {"source": {"kind": "GitRepository", "name": "repo"},
                "syncPolicy": {"mode": mode}},
        }))
        .unwrap()
    }

    fn assemble(
        release: &Release,
        cached: &ReleaseStatus,
        outcome: &ReconcileOutcome,
    ) -> ReleaseStatus {
        let now = Time("2026-01-01T00:00:02Z".parse().unwrap());
        let state = new_reconcile_state(release, cached, now);
        assemble_status(release, cached, outcome, &state, None)
    }

    /// A /sync that changes nothing in automatic mode is recorded, so `convoy sync --request
    /// --wait` sees it handled; the next attempt finds it handled and writes nothing again.
    #[test]
    fn an_automatic_attempt_records_the_request_it_saw_once() {
        let release = release("Automatic");
        let unchanged = ReconcileOutcome {
            applied_render: false,
            ..ReconcileOutcome::applied(Attempt::default(), "render abc is applied", vec![])
        };
        let handled = assemble(&release, &ReleaseStatus::default(), &unchanged);
        assert_eq!(
            handled.last_handled_sync_at.as_deref(),
            Some("2026-01-01T00:00:01Z")
        );
        let next = assemble(&release, &handled, &unchanged);
        assert!(!status_changed(&handled, &next));
    }

    /// Manual mode keeps the spec's step 4: only a /sync that applied is handled (a failed one
    /// stays pending and is tried again).
    #[test]
    fn a_manual_attempt_records_only_a_request_that_applied() {
        let release = release("Manual");
        let failed = ReconcileOutcome {
            reason: Reason::Unappliable,
            applied_render: false,
            ..ReconcileOutcome::applied(Attempt::default(), "rejected", vec![])
        };
        let status = assemble(&release, &ReleaseStatus::default(), &failed);
        assert_eq!(status.last_handled_sync_at, None);
        let applied = ReconcileOutcome::applied(Attempt::default(), "applied", vec![]);
        let status = assemble(&release, &ReleaseStatus::default(), &applied);
        assert_eq!(
            status.last_handled_sync_at.as_deref(),
            Some("2026-01-01T00:00:01Z")
        );
    }
}

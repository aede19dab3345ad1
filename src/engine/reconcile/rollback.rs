//! A wave that timed out under the failure policy, and `applyLastHealthy`: fail the rollout,
//! or roll back to the last healthy render from the render store.
//!
//! Spec: reconcile-flow.txt `applyLastHealthy`; status-and-conditions.txt "Sync wave: timeout",
//! RolloutFailed, RolledBack; DESIGN.md "Progressive rollout".

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::Context;
use super::outcome::ReconcileOutcome;
use super::stages::RenderStage;
use super::sync::{SyncRun, sync_objects};
use crate::engine::api::{
    Attempt, AttemptPhase, FailureStage, Reason, Release, ReleaseStatus, RolloutState,
    RolloutStatus,
};
use crate::engine::inventory::InventoryHandle;
use crate::engine::render::Object;
use crate::engine::render::render_ref::short;
use crate::engine::rollout::rollback_target;
use crate::engine::store::ReleaseId;

/// A wave timeout under the failure policy (status-and-conditions.txt "Sync wave: timeout").
pub(crate) async fn wave_timed_out(
    ctx: &Context,
    run: &SyncRun<'_>,
    render: &RenderStage,
    inventory: &InventoryHandle,
    rollout: Option<&RolloutStatus>,
    mut outcome: ReconcileOutcome,
) -> ReconcileOutcome {
    let (release, status, now) = (run.release, run.status, run.now);
    let Some(policy) = release.spec.failure_policy.as_ref() else {
        return outcome;
    };
    let render_ref = &render.rendered.render_ref;
    match rollout {
        Some(r) if r.state == RolloutState::Progressing => {}
        // The rollout of this render already failed: a later pass that times out again says
        // so again, with the rollout's message, until a new render starts a new rollout.
        Some(r) if r.state == RolloutState::Failed && &r.render_ref == render_ref => {
            outcome.reason = Reason::RolloutFailed;
            if let Some(message) = &r.message {
                outcome.message = message.clone();
            }
            return outcome;
        }
        // A render whose rollout finished otherwise (a later re-sync of it timed out) stays a
        // plain WaveFailed and keeps its rollout as it was.
        _ => return outcome,
    }
    let last_healthy = rollback_candidate(ctx, release, status).await;
    let finished = |state: RolloutState, message: String| RolloutStatus {
        render_ref: render_ref.clone(),
        state,
        started_at: rollout.and_then(|r| r.started_at.clone()),
        finished_at: Some(now.clone()),
        message: Some(message),
    };
    match rollback_target(policy, last_healthy.as_deref(), render_ref) {
        Some(target) => {
            let message = format!(
                "{}; rolled back to render {}",
                outcome.message,
                short(target)
            );
            let rollout = finished(RolloutState::RolledBack, message);
            apply_last_healthy(ctx, release, status, render, inventory, rollout, now).await
        }
        None => {
            outcome.reason = Reason::RolloutFailed;
            outcome.rollout = Some(finished(RolloutState::Failed, outcome.message.clone()));
            outcome
        }
    }
}

/// The last healthy render if a rollback could re-apply it: a render store is configured and
/// holds it. Without one a rollback would only pretend, so the rollout fails instead.
pub(crate) async fn rollback_candidate(
    ctx: &Context,
    release: &Release,
    status: &ReleaseStatus,
) -> Option<String> {
    let last = status.last_healthy.as_ref()?;
    let store = ctx.store.as_ref()?;
    match store
        .has_render(&ReleaseId::of(release), &last.render_ref)
        .await
    {
        Ok(true) => Some(last.render_ref.clone()),
        Ok(false) => {
            tracing::warn!(release = %ReleaseId::of(release), "the last healthy render {} is not in the render store; no rollback", short(&last.render_ref));
            None
        }
        // Unknown (the store is unreachable): try, and let applyLastHealthy report it.
        Err(_) => Some(last.render_ref.clone()),
    }
}

/// `applyLastHealthy`: apply the last healthy render from the store, prune, write the
/// inventory; no gates, dry run or hooks. A failing step is logged and reported in the
/// message; the reason stays `RolledBack` and the attempt is retried.
pub async fn apply_last_healthy(
    ctx: &Context,
    release: &Release,
    status: &ReleaseStatus,
    render: &RenderStage,
    inventory: &InventoryHandle,
    rollout: RolloutStatus,
    now: &Time,
) -> ReconcileOutcome {
    let rolled_back = RolledBack::new(render, rollout);
    let Some(last) = status.last_healthy.as_ref() else {
        return rolled_back.not_applied(
            "no render has been healthy yet, so there is nothing to roll back to".into(),
        );
    };
    let why = rolled_back.rollout.message.clone().unwrap_or_default();
    let objects = match stored_render(ctx, release, &last.render_ref).await {
        Ok(objects) => objects,
        Err(e) => {
            tracing::error!(release = %ReleaseId::of(release), "rollback: {e}");
            let short = short(&last.render_ref);
            return rolled_back.not_applied(format!("{why}; cannot re-apply render {short}: {e}"));
        }
    };
    let successful = successful_attempt(status, render, last);
    let run = SyncRun {
        release,
        objects: &objects,
        render_ref: &last.render_ref,
        attempt: &successful,
        target: &render.target,
        status,
        now,
        dry_run: false,
        persist: false,
        wave_gate: None,
        hooks: false,
    };
    let applied = sync_objects(ctx, &run, inventory).await;
    if applied.reason != Reason::Applied {
        tracing::error!(release = %ReleaseId::of(release), "rollback: {}", applied.message);
        let short = short(&last.render_ref);
        let message = format!(
            "{why}; re-applying render {short} failed: {}",
            applied.message
        );
        return rolled_back
            .not_applied(message)
            .with_waves(applied.waves.unwrap_or_default());
    }
    rolled_back.applied(why, successful, applied.waves)
}

/// The last healthy render's objects from the render store.
async fn stored_render(
    ctx: &Context,
    release: &Release,
    render_ref: &str,
) -> Result<Vec<Object>, String> {
    let Some(store) = &ctx.store else {
        return Err("no render store is configured".to_string());
    };
    match store.get_render(&ReleaseId::of(release), render_ref).await {
        Ok(Some(objects)) => Ok(objects),
        Ok(None) => Err(format!(
            "render {} is not in the render store",
            short(render_ref)
        )),
        Err(e) => Err(crate::engine::error::chain(&e)),
    }
}

/// What `lastSuccessful` becomes: the attempt that applied the last healthy render when the
/// status still has it, else one made from `lastHealthy`.
fn successful_attempt(
    status: &ReleaseStatus,
    render: &RenderStage,
    last: &crate::engine::api::LastHealthy,
) -> Attempt {
    match &status.last_successful {
        Some(s) if s.render_ref.as_deref() == Some(last.render_ref.as_str()) => Attempt::clone(s),
        _ => Attempt {
            attempted_at: render.attempt.attempted_at.clone(),
            resolved_source: last.resolved_source.clone(),
            resolved_cluster: render.attempt.resolved_cluster.clone(),
            resolved_mutations: Vec::new(),
            render_ref: Some(last.render_ref.clone()),
            phase: Some(AttemptPhase::Succeeded),
            failure: None,
        },
    }
}

/// The `RolledBack` outcomes: the attempted render failed (stage Syncing) either way.
struct RolledBack {
    attempt: Attempt,
    rollout: RolloutStatus,
}

impl RolledBack {
    fn new(render: &RenderStage, rollout: RolloutStatus) -> Self {
        let mut attempt = render.attempt.clone();
        attempt.phase = Some(AttemptPhase::Failed);
        attempt.failure = Some(crate::engine::api::Failure {
            stage: FailureStage::Syncing.to_string(),
            hook_name: None,
            hook_phase: None,
        });
        Self { attempt, rollout }
    }

    fn outcome(&self, message: String) -> ReconcileOutcome {
        let mut outcome = ReconcileOutcome::held(Reason::RolledBack, message, Attempt::default());
        outcome.attempt = self.attempt.clone();
        outcome.rollout = Some(self.rollout.clone());
        outcome
    }

    /// The last healthy render could not be applied: retried.
    fn not_applied(&self, message: String) -> ReconcileOutcome {
        ReconcileOutcome {
            retry: true,
            ..self.outcome(message)
        }
    }

    /// The last healthy render is applied again.
    fn applied(
        &self,
        message: String,
        successful: Attempt,
        waves: Option<Vec<crate::engine::api::WaveStatus>>,
    ) -> ReconcileOutcome {
        ReconcileOutcome {
            applied_render: true,
            successful: Some(successful),
            waves,
            ..self.outcome(message)
        }
    }
}

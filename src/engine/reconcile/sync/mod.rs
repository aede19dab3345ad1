//! stageSync: apply a render in waves, prune, keep the inventory, and keep the render store
//! (persist, history, GC).
//!
//! Spec: reconcile-flow.txt stageSync steps 1–9; status-and-conditions.txt
//! (WaitingForWaveHealth, WaveFailed); DESIGN.md "Sync waves", "Render store".
//!
//! [`sync_objects`] reads as the spec's list of steps; each step lives in a module named after
//! what it does:
//!
//! | step | module |
//! | --- | --- |
//! | what is on the cluster, what must be sent | [`compare`] |
//! | tenancy, inventory capacity, objects of other Releases; 1 the dry-run gate | [`admission`] |
//! | 2 `persistRender`, 8 `recordHistory`, 9 `runGC` | [`store_steps`] |
//! | 4 the waves (`waveHealthGate`, sync hooks, an inventory Put per wave) | [`wave_loop`] |
//! | 5 `pruneRefs`, 6 the final inventory | [`prune`] |
//!
//! A wave timeout under the failure policy and `applyLastHealthy` are `reconcile::rollback`'s.

pub(crate) mod admission;
mod compare;
mod prune;
mod store_steps;
mod wave_loop;

use std::collections::BTreeSet;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::Context;
use super::hook_phase::{
    HookPhaseError, HookRun, PhaseOutcome, forget_removed_hooks, has_hooks, run_hook_phase,
};
use super::outcome::ReconcileOutcome;
use super::stages::RenderStage;
use crate::engine::api::{
    Attempt, FailureStage, HookPhase, ObjectKey, Reason, Release, ReleaseStatus, RolloutStatus,
    WavePolicy,
};
use crate::engine::cluster::Target;
use crate::engine::content_hooks;
use crate::engine::explain::count;
use crate::engine::inventory::InventoryHandle;
use crate::engine::ownership;
use crate::engine::render::Object;
use crate::engine::render::render_ref::short;

pub use prune::{inventory_healthy_for, mark_healthy_waves};
pub use wave_loop::unhealthy_in_wave;

/// One run of the sync steps over a set of objects.
pub(crate) struct SyncRun<'a> {
    pub release: &'a Release,
    pub objects: &'a [Object],
    pub render_ref: &'a str,
    /// `lastAttempted` so far (the failures of this run are recorded on it).
    pub attempt: &'a Attempt,
    pub target: &'a Target,
    /// The cached status (for the start of a wave hold).
    pub status: &'a ReleaseStatus,
    pub now: &'a Time,
    /// Step 1, the dry-run gate (off for a forced sync and a rollback).
    pub dry_run: bool,
    /// Step 2, persistRender (off for a rollback: the render came from the store).
    pub persist: bool,
    /// `waves.waitForHealth`: the wave health gate and its timeout.
    pub wave_gate: Option<WavePolicy>,
    /// Step 3, the preSync hooks (off for a rollback).
    pub hooks: bool,
}

impl SyncRun<'_> {
    /// A failure of stage `Syncing` on this run's attempt.
    fn failed(&self, reason: Reason, message: String, retry: bool) -> ReconcileOutcome {
        ReconcileOutcome::failed(
            reason,
            FailureStage::Syncing,
            message,
            self.attempt.clone(),
            retry,
        )
    }

    /// A transient failure (`DeployFailed`, retried with backoff).
    fn deploy_failed(&self, message: String) -> ReconcileOutcome {
        self.failed(Reason::DeployFailed, message, true)
    }
}

/// Stage 5, stageSync: the sync steps over the render, then history and GC (steps 8 and 9,
/// which only log their errors). A wave that timed out waiting for health becomes
/// `WaveFailed`, `RolloutFailed` or a rollback, per the failure policy. `rollout` is what
/// planRollout decided for this reconcile.
pub async fn stage_sync(
    ctx: &Context,
    release: &Release,
    status: &ReleaseStatus,
    state: &super::ReconcileState,
    render: &RenderStage,
    inventory: &InventoryHandle,
    rollout: Option<&RolloutStatus>,
) -> ReconcileOutcome {
    let wave_gate = release
        .spec
        .sync_policy
        .as_ref()
        .and_then(|p| p.waves.clone())
        .filter(|w| w.wait_for_health);
    let run = SyncRun {
        release,
        objects: &render.rendered.objects,
        render_ref: &render.rendered.render_ref,
        attempt: &render.attempt,
        target: &render.target,
        status,
        now: &state.now,
        dry_run: state.pending_force.is_none(),
        persist: true,
        wave_gate,
        hooks: true,
    };
    let outcome = sync_objects(ctx, &run, inventory).await;
    if outcome.reason == Reason::WaveFailed {
        return super::rollback::wave_timed_out(ctx, &run, render, inventory, rollout, outcome)
            .await;
    }
    if !outcome.applied_render {
        return outcome;
    }
    // Step 7: postSync hooks are armed; their result does not change this one.
    if let Err(e) = run_post_sync_hooks(ctx, &run, inventory).await {
        return run
            .deploy_failed(crate::engine::error::chain(&e))
            .with_waves(outcome.waves.unwrap_or_default());
    }
    // Steps 8 and 9 only log their errors.
    let recorded = store_steps::record_history(
        ctx,
        release,
        &render.attempt,
        &render.rendered.objects,
        &state.now,
    )
    .await;
    store_steps::run_gc(ctx, release, status, &render.attempt, recorded).await;
    outcome
}

/// stageSync steps 1 and 4–6 for any set of objects: dry-run gate, waves with inventory
/// updates (and, with `waves.waitForHealth`, the wave health gate), prune, inventory.
///
/// Objects that were applied before exactly as rendered now and still hold every value on
/// the cluster are not sent again (an apply would change nothing); everything else goes
/// through the gate and the waves. A re-sync of an unchanged render therefore costs a few
/// LIST requests instead of two requests per object.
pub(crate) async fn sync_objects(
    ctx: &Context,
    run: &SyncRun<'_>,
    inventory: &InventoryHandle,
) -> ReconcileOutcome {
    let started = std::time::Instant::now();
    let applier = ctx.applier(run.target);
    // What the inventory and the cluster hold, and what must be sent.
    let plan = match compare::compare_with_cluster(ctx, run, &applier, inventory).await {
        Ok(plan) => plan,
        Err(stop) => return stop,
    };
    // Before step 1, and even for a forced sync: tenancy, capacity, other Releases' objects.
    if let Err(stop) = admission::admit(ctx, run, &plan).await {
        return stop;
    }
    let hook_run = HookRun {
        release: run.release,
        target: run.target,
        applier: &applier,
        inventory,
        render_ref: run.render_ref,
        content: &plan.content_hooks,
    };
    // Steps 1 and 2 side by side: the dry-run gate (skipped by a forced sync) and
    // persistRender, with the first wave's intent recorded meanwhile when nothing can hold
    // that wave.
    let early_intent = match gate_and_persist(ctx, run, &applier, &plan, &hook_run).await {
        Ok(early) => early,
        Err(stop) => return stop,
    };
    // Step 3: the preSync hooks hold the waves until they finish.
    if run.hooks
        && let Err(stop) = run_pre_sync_hooks(run, &hook_run).await
    {
        return stop;
    }
    // Step 4: the waves, each followed by a Put of everything applied so far.
    let applied = match wave_loop::apply_waves(ctx, run, &plan, &hook_run, early_intent).await {
        Ok(applied) => applied,
        Err(stop) => return stop,
    };
    // Step 5: prune what left the render (never anything outside this inventory).
    let pruned = prune::prune_refs(ctx, run, &applier, &plan, &applied).await;
    tracing::debug!(
        elapsed_ms = started.elapsed().as_millis() as u64,
        "waves and prune done"
    );
    // Step 6: the inventory is exactly what is on the cluster now.
    prune::write_inventory(run, inventory, &plan, applied, pruned).await
}

/// Step 3, the preSync hooks: `Err` holds or fails the sync.
async fn run_pre_sync_hooks(
    run: &SyncRun<'_>,
    hooks: &HookRun<'_>,
) -> Result<(), ReconcileOutcome> {
    forget_removed_hooks(hooks)
        .await
        .map_err(|e| run.deploy_failed(crate::engine::error::chain(&e)))?;
    let result = run_hook_phase(hooks, HookPhase::PreSync, None).await;
    hooks_hold_or_fail(run, result, HookPhase::PreSync, None).map_or(Ok(()), Err)
}

/// stageSync step 1, the dry-run gate, step 2, persistRender (the render as rendered,
/// without the ownership labels), and, when nothing between them and the first wave can hold
/// it (no preSync hooks), that wave's intent (step 4's first inventory Put), all at once: a
/// sync waits for the slowest of them instead of their sum. `Ok(Some(wave))`: the intent of
/// `wave` is recorded.
///
/// None of them depends on another. A render stored for a sync that stops here is what a
/// sync failing later leaves (runGC collects it at the next history change of this process,
/// see `store_steps::run_gc`). An intent
/// recorded before the verdict leaves what a crash between the intent and the apply leaves
/// (pending objects never sent, which the next sync sends or prunes); a stop still withdraws
/// it, so a Release held at `Unappliable` keeps the inventory it had. Of several failures the
/// one of the earliest step is reported.
async fn gate_and_persist(
    ctx: &Context,
    run: &SyncRun<'_>,
    applier: &crate::engine::apply::Applier,
    plan: &compare::SyncPlan,
    hooks: &HookRun<'_>,
) -> Result<Option<i32>, ReconcileOutcome> {
    let gate = admission::dry_run_gate(ctx, run, applier, plan);
    let persist = async {
        if !run.persist {
            return Ok(());
        }
        store_steps::persist_render(ctx, run.release, run.render_ref, run.objects)
            .await
            .map_err(|e| run.deploy_failed(crate::engine::error::chain(&e)))
    };
    let early = run.dry_run
        && !plan.to_send.is_empty()
        && !(run.hooks && has_hooks(hooks, HookPhase::PreSync, None))
        && early_intent_is_safe(run, plan)
        && ctx.shard.owns(run.release);
    let intent = async {
        if !early {
            return Ok(None);
        }
        wave_loop::record_first_intent(run, plan, hooks)
            .await
            .map_err(|e| run.deploy_failed(crate::engine::error::chain(&e)))
    };
    let (gate, persist, intent) = tokio::join!(gate, persist, intent);
    let (stop, attempted) = match (gate, persist, intent) {
        (Ok(()), Ok(()), Ok(recorded)) => return Ok(recorded),
        (Ok(()), Ok(()), Err(stop)) => (stop, true),
        (Err(stop), _, intent) | (Ok(()), Err(stop), intent) => (stop, !matches!(intent, Ok(None))),
    };
    // A failed intent Put may still have landed (a lost response, a conflict after the
    // write): withdrawn as well. A replica that lost the shard meanwhile writes nothing.
    if attempted
        && ctx.shard.owns(run.release)
        && let Err(e) = wave_loop::withdraw_first_intent(plan, hooks).await
    {
        tracing::warn!(
            error = %crate::engine::error::chain(&e),
            "the first wave's intent stays recorded after the sync stopped before it"
        );
    }
    Err(stop)
}

/// Whether the first wave's intent may be recorded before the dry run's verdict:
/// - every object it would list is new on the cluster or recorded already: an object that
///   exists but is not this Release's yet (kubectl's, adopted by the first wave) is listed
///   only once the gate passed, so a rejected render never claims it, even across a crash;
/// - this render's last attempt did not fail: a Release held at `Unappliable` that comes
///   back at each interval dry-runs again without writing its inventory twice.
fn early_intent_is_safe(run: &SyncRun<'_>, plan: &compare::SyncPlan) -> bool {
    let sending: Vec<ObjectKey> = plan.to_send.iter().map(|o| plan.effective_key(o)).collect();
    let recorded: BTreeSet<&ObjectKey> = plan.recorded.iter().map(|m| &m.key).collect();
    claims_nothing(&sending, &recorded, |k| plan.live.contains_key(k))
        && !failed_before(run.status.last_attempted.as_deref(), run.render_ref)
}

/// Whether each of `sending` is recorded already or absent from the cluster.
fn claims_nothing(
    sending: &[ObjectKey],
    recorded: &BTreeSet<&ObjectKey>,
    live: impl Fn(&ObjectKey) -> bool,
) -> bool {
    sending.iter().all(|k| recorded.contains(k) || !live(k))
}

/// Whether `last` attempted `render_ref` and failed.
fn failed_before(last: Option<&Attempt>, render_ref: &str) -> bool {
    last.is_some_and(|a| a.render_ref.as_deref() == Some(render_ref) && a.failure.is_some())
}

/// The stop a hook phase that holds the sync (preSync; sync, per wave) makes, if any: hooks
/// still running hold it (`WaitingForHook`), a failed `onFailure: Fail` hook fails it.
fn hooks_hold_or_fail(
    run: &SyncRun<'_>,
    result: Result<PhaseOutcome, HookPhaseError>,
    phase: HookPhase,
    wave: Option<i32>,
) -> Option<ReconcileOutcome> {
    let (label, of_wave) = (phase.as_str(), wave.map(|w| format!(" of wave {w}")));
    let of_wave = of_wave.unwrap_or_default();
    match result {
        Ok(PhaseOutcome::Done) => None,
        Ok(PhaseOutcome::Running(names)) => Some(ReconcileOutcome::held(
            Reason::WaitingForHook,
            format!("waiting for {label} hooks{of_wave}: {}", names.join(", ")),
            run.attempt.clone(),
        )),
        Ok(PhaseOutcome::Failed { hook, message }) => Some(ReconcileOutcome::hook_failed(
            &hook,
            phase,
            format!("{label} hook {hook}{of_wave} failed: {message}"),
            run.attempt.clone(),
        )),
        Err(e) => Some(run.deploy_failed(crate::engine::error::chain(&e))),
    }
}

/// Step 7, the postSync hooks of an applied render: armed here, judged by later passes.
async fn run_post_sync_hooks(
    ctx: &Context,
    run: &SyncRun<'_>,
    inventory: &InventoryHandle,
) -> Result<(), HookPhaseError> {
    let content = content_hooks::split(run.objects).hooks;
    let applier = ctx.applier(run.target);
    let hooks = HookRun {
        release: run.release,
        target: run.target,
        applier: &applier,
        inventory,
        render_ref: run.render_ref,
        content: &content,
    };
    run_hook_phase(&hooks, HookPhase::PostSync, None)
        .await
        .map(|_| ())
}

/// The `Applied` outcome of steps 1–6. The message stays the same for an unchanged render
/// (however much had to be re-sent), so a steady Release's status does not change.
fn applied_outcome(
    run: &SyncRun<'_>,
    objects: usize,
    applied: wave_loop::Applied,
    pruned: &prune::Pruned,
) -> ReconcileOutcome {
    let mut message = format!(
        "render {} applied: {}",
        short(run.render_ref),
        count(objects, "object")
    );
    if pruned.deleted > 0 {
        message.push_str(&format!(", {} pruned", pruned.deleted));
    }
    let mut outcome = ReconcileOutcome::applied(run.attempt.clone(), message, applied.waves);
    outcome.objects_sent = applied.objects_sent;
    outcome.drift_put_back = applied.drift_put_back;
    let mut notices = Vec::new();
    // A deletion the sync made beside its applies is said, as the prunes are.
    if !applied.recreated.is_empty() {
        let mut recreated = applied.recreated.clone();
        recreated.sort();
        notices.push(format!(
            "re-created (deleted and created again, as their annotations ask): {}",
            crate::engine::explain::first_of(&recreated, 5)
        ));
    }
    if !pruned.handed_over.is_empty() {
        notices.push(format!(
            "left to other Releases, not pruned: {}",
            ownership::describe_handed_over(&pruned.handed_over)
        ));
    }
    if !pruned.never_applied.is_empty() {
        notices.push(format!(
            "left as found, not pruned (a stopped sync was about to apply them, and this Release never did): {}",
            crate::engine::explain::first_of(&pruned.never_applied, 5)
        ));
    }
    if !pruned.unlabelled.is_empty() {
        notices.push(format!(
            "left as found, not pruned (no longer recorded): they do not carry this Release's labels, and convoy deletes only what does (delete them yourself if they are to go): {}",
            crate::engine::explain::first_of(&pruned.unlabelled, 5)
        ));
    }
    if !pruned.kept.is_empty() {
        notices.push(format!(
            "kept by their annotations, not pruned (no longer recorded): {}",
            ownership::describe_kept(&pruned.kept)
        ));
    }
    for notice in notices {
        outcome.message.push_str(&format!("; {notice}"));
        outcome.notices.push(notice);
    }
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::api::Failure;

    fn key(name: &str) -> ObjectKey {
        ObjectKey {
            group: String::new(),
            kind: "ConfigMap".into(),
            namespace: "apps".into(),
            name: name.into(),
        }
    }

    #[test]
    fn an_early_intent_lists_only_new_objects_and_the_releases_own() {
        let (new, ours, kubectls) = (key("new"), key("ours"), key("kubectls"));
        let recorded: BTreeSet<&ObjectKey> = [&ours].into_iter().collect();
        let live = |k: &ObjectKey| k == &ours || k == &kubectls;
        assert!(claims_nothing(
            &[new.clone(), ours.clone()],
            &recorded,
            live
        ));
        assert!(!claims_nothing(&[new, kubectls.clone()], &recorded, live));
    }

    #[test]
    fn a_render_whose_last_attempt_failed_gets_no_early_intent() {
        let failed = Attempt {
            render_ref: Some("r1".into()),
            failure: Some(Failure {
                stage: "Syncing".into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(failed_before(Some(&failed), "r1"));
        assert!(!failed_before(Some(&failed), "r2"), "a new render");
        let applied = Attempt {
            render_ref: Some("r1".into()),
            ..Default::default()
        };
        assert!(!failed_before(Some(&applied), "r1"));
        assert!(!failed_before(None, "r1"));
    }
}

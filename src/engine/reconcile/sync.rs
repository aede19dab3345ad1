//! stageSync and applyLastHealthy: apply a render in waves, prune, keep the inventory, and
//! keep the render store (persist, history, GC).
//!
//! Spec: reconcile-flow.txt stageSync steps 1–9, applyLastHealthy; status-and-conditions.txt
//! (WaitingForWaveHealth, WaveFailed, RolloutFailed, RolledBack); DESIGN.md "Sync waves",
//! "Render store".

use std::collections::{BTreeSet, HashMap};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::hook_phase::{HookRun, PhaseOutcome, forget_removed_hooks, run_hook_phase};
use super::outcome::{ReconcileOutcome, timed_out, waiting_for};
use super::stages::RenderStage;
use super::{Context, ProgressEvent};
use crate::engine::api::{
    Attempt, AttemptPhase, HealthState, HookPhase, ObjectKey, Release, ReleaseInventory,
    ReleaseStatus, RolloutState, RolloutStatus, WavePolicy, WaveStatus, failure_stages, reasons,
};
use crate::engine::apply::{ApplyError, PruneTarget, waves};
use crate::engine::cluster::Target;
use crate::engine::content_hooks;
use crate::engine::exclusions;
use crate::engine::explain::count;
use crate::engine::inventory::{InventoryHandle, Member, members, pending_members};
use crate::engine::ownership;
use crate::engine::render::Object;
use crate::engine::render::render_ref::{object_digest, short};
use crate::engine::rollout::rollback_target;
use crate::engine::store::{HistoryEntry, ReleaseId, plan_gc, with_entry};

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
    if outcome.reason == reasons::WAVE_FAILED {
        return wave_timed_out(ctx, &run, render, inventory, rollout, outcome).await;
    }
    if !outcome.applied_render {
        return outcome;
    }
    // Step 7: postSync hooks are armed; their result does not change this one.
    let content = content_hooks::split(&render.rendered.objects).hooks;
    let applier = ctx.applier(&render.target);
    let hook_run = HookRun {
        release,
        target: &render.target,
        applier: &applier,
        inventory,
        render_ref: &render.rendered.render_ref,
        content: &content,
    };
    if let Err(message) = run_hook_phase(&hook_run, HookPhase::PostSync, None).await {
        return ReconcileOutcome::failed(
            reasons::DEPLOY_FAILED,
            failure_stages::SYNCING,
            message,
            render.attempt.clone(),
            true,
        )
        .with_waves(outcome.waves.unwrap_or_default());
    }
    // Steps 8 and 9 only log their errors.
    let recorded = record_history(ctx, release, &render.attempt, &state.now).await;
    run_gc(ctx, release, status, &render.attempt, recorded).await;
    outcome
}

/// A wave timeout under the failure policy (status-and-conditions.txt "Sync wave: timeout").
async fn wave_timed_out(
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
            outcome.reason = reasons::ROLLOUT_FAILED;
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
    let last_healthy = last_healthy.as_deref();
    let finished = |state: RolloutState, message: String| RolloutStatus {
        render_ref: render_ref.clone(),
        state,
        started_at: rollout.and_then(|r| r.started_at.clone()),
        finished_at: Some(now.clone()),
        message: Some(message),
    };
    match rollback_target(policy, last_healthy, render_ref) {
        Some(target) => {
            let rollout = finished(
                RolloutState::RolledBack,
                format!(
                    "{}; rolled back to render {}",
                    outcome.message,
                    short(target)
                ),
            );
            apply_last_healthy(ctx, release, status, render, inventory, rollout, now).await
        }
        None => {
            outcome.reason = reasons::ROLLOUT_FAILED;
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
            tracing::warn!(release = %release.metadata.name.as_deref().unwrap_or_default(), "the last healthy render {} is not in the render store; no rollback", short(&last.render_ref));
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
    let mut attempt = render.attempt.clone();
    attempt.phase = Some(AttemptPhase::Failed);
    attempt.failure = Some(crate::engine::api::Failure {
        stage: failure_stages::SYNCING.to_string(),
        hook_name: None,
        hook_phase: None,
    });
    let rolled_back = |message: String, applied: Option<(Attempt, Option<Vec<WaveStatus>>)>| {
        let applied_render = applied.is_some();
        let (successful, waves) = applied.map_or((None, None), |(a, w)| (Some(a), w));
        ReconcileOutcome {
            reason: reasons::ROLLED_BACK,
            message,
            attempt: attempt.clone(),
            applied_render,
            successful,
            waiting: None,
            waves,
            rollout: Some(rollout.clone()),
            retry: !applied_render,
            error: None,
            render_healthy: false,
            notices: Vec::new(),
            stage_seconds: Vec::new(),
            objects_sent: 0,
        }
    };
    let Some(last) = status.last_healthy.as_ref() else {
        return rolled_back(
            "no render has been healthy yet, so there is nothing to roll back to".into(),
            None,
        );
    };
    let why = rollout.message.clone().unwrap_or_default();
    let objects = match &ctx.store {
        None => Err("no render store is configured".to_string()),
        Some(store) => match store
            .get_render(&ReleaseId::of(release), &last.render_ref)
            .await
        {
            Ok(Some(objects)) => Ok(objects),
            Ok(None) => Err(format!(
                "render {} is not in the render store",
                short(&last.render_ref)
            )),
            Err(e) => Err(format!("{:#}", anyhow::Error::new(e))),
        },
    };
    let objects = match objects {
        Ok(o) => o,
        Err(e) => {
            tracing::error!(release = %release.metadata.name.as_deref().unwrap_or_default(), "rollback: {e}");
            return rolled_back(
                format!(
                    "{why}; cannot re-apply render {}: {e}",
                    short(&last.render_ref)
                ),
                None,
            );
        }
    };
    let successful = match &status.last_successful {
        Some(s) if s.render_ref.as_deref() == Some(last.render_ref.as_str()) => s.clone(),
        _ => Attempt {
            attempted_at: render.attempt.attempted_at.clone(),
            resolved_source: last.resolved_source.clone(),
            resolved_cluster: render.attempt.resolved_cluster.clone(),
            resolved_mutations: Vec::new(),
            render_ref: Some(last.render_ref.clone()),
            phase: Some(AttemptPhase::Succeeded),
            failure: None,
        },
    };
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
    if applied.reason != reasons::APPLIED {
        tracing::error!(release = %release.metadata.name.as_deref().unwrap_or_default(), "rollback: {}", applied.message);
        return rolled_back(
            format!(
                "{why}; re-applying render {} failed: {}",
                short(&last.render_ref),
                applied.message
            ),
            None,
        )
        .with_waves(applied.waves.unwrap_or_default());
    }
    rolled_back(why, Some((successful, applied.waves)))
}

/// `waveHealthGate`: wave `wave` waits until every inventory entry of wave `before` is
/// Healthy for this render; past `waves.timeout` (from when the hold began) it fails with
/// `WaveFailed` (stage_sync maps that per the failure policy).
async fn wave_health_gate(
    run: &SyncRun<'_>,
    inventory: &InventoryHandle,
    policy: &WavePolicy,
    before: i32,
    wave: i32,
) -> Option<ReconcileOutcome> {
    // Without a health assessment nothing is ever assessed, and NotConfigured counts as
    // healthy: the gate is open.
    if !crate::engine::health::configured(run.release) {
        return None;
    }
    let unhealthy = match inventory.get().await {
        Ok(Some(inv)) => unhealthy_in_wave(&inv, before, run.render_ref),
        Ok(None) => vec![format!("wave {before} is not in the inventory yet")],
        Err(e) => {
            return Some(ReconcileOutcome::failed(
                reasons::DEPLOY_FAILED,
                failure_stages::SYNCING,
                format!("{:#}", anyhow::Error::new(e)),
                run.attempt.clone(),
                true,
            ));
        }
    };
    if unhealthy.is_empty() {
        return None;
    }
    let target = format!("wave {before}");
    let waiting = waiting_for(
        run.status,
        run.render_ref,
        reasons::WAITING_FOR_WAVE_HEALTH,
        &target,
        run.now,
    );
    let shown = unhealthy
        .iter()
        .take(3)
        .cloned()
        .collect::<Vec<_>>()
        .join("; ");
    let more = if unhealthy.len() > 3 {
        format!("; and {} more", unhealthy.len() - 3)
    } else {
        String::new()
    };
    if let Some(timeout) = timed_out(&waiting, policy.timeout.as_deref(), run.now) {
        return Some(
            ReconcileOutcome::failed(
                reasons::WAVE_FAILED,
                failure_stages::SYNCING,
                format!(
                    "wave {before} of render {} was not healthy within {timeout}: {shown}{more}",
                    short(run.render_ref)
                ),
                run.attempt.clone(),
                false,
            )
            .with_waiting(waiting),
        );
    }
    Some(
        ReconcileOutcome::held(
            reasons::WAITING_FOR_WAVE_HEALTH,
            format!("wave {wave} waits for wave {before} to be healthy: {shown}{more}"),
            run.attempt.clone(),
        )
        .with_waiting(waiting),
    )
}

/// The entries of `wave` that are not Healthy for `render_ref`, described for a message.
pub fn unhealthy_in_wave(inventory: &ReleaseInventory, wave: i32, render_ref: &str) -> Vec<String> {
    inventory
        .spec
        .inventory
        .iter()
        .filter(|e| e.wave == Some(wave) && e.render_ref.is_some())
        .filter(|e| {
            !(e.state == Some(HealthState::Healthy)
                && e.assessed_render_ref.as_deref() == Some(render_ref))
        })
        .map(|e| {
            let name = if e.namespace.is_empty() {
                format!("{} {}", e.kind, e.name)
            } else {
                format!("{} {}/{}", e.kind, e.namespace, e.name)
            };
            match (
                e.state,
                e.assessed_render_ref.as_deref() == Some(render_ref),
            ) {
                (Some(state), true) => match &e.message {
                    Some(m) if !m.is_empty() => format!("{name} is {} ({m})", state.as_str()),
                    _ => format!("{name} is {}", state.as_str()),
                },
                _ => format!("{name} is not assessed yet"),
            }
        })
        .collect()
}

/// stageSync step 2, `persistRender`: store the render unless it is there already.
async fn persist_render(
    ctx: &Context,
    release: &Release,
    render_ref: &str,
    objects: &[Object],
) -> Result<(), String> {
    let Some(store) = &ctx.store else {
        return Ok(());
    };
    let id = ReleaseId::of(release);
    let fail = |e| format!("{:#}", anyhow::Error::new(e));
    if store.has_render(&id, render_ref).await.map_err(fail)? {
        return Ok(());
    }
    store
        .put_render(&id, render_ref, objects)
        .await
        .map_err(fail)
}

/// stageSync step 8, `recordHistory`: append the render if the history does not hold it yet.
/// Returns the history as it now stands and whether this call changed it (`None` on an
/// error, which is only logged).
async fn record_history(
    ctx: &Context,
    release: &Release,
    attempt: &Attempt,
    now: &Time,
) -> Option<(Vec<HistoryEntry>, bool)> {
    let (Some(store), Some(render_ref)) = (&ctx.store, attempt.render_ref.as_ref()) else {
        return None;
    };
    let id = ReleaseId::of(release);
    let result = async {
        let history = store.history(&id).await?;
        let entry = HistoryEntry {
            render_ref: render_ref.clone(),
            recorded_at: now.clone(),
            // A pinned render came from the store, not from the revision just resolved.
            source_revision: attempt
                .resolved_source
                .as_ref()
                .and_then(|s| s.revision.clone())
                .filter(|_| super::assemble::pin_status(release).is_none()),
            outcome: None,
        };
        match with_entry(history.clone(), entry) {
            Some(updated) => {
                store.put_history(&id, &updated).await?;
                Ok((updated, true))
            }
            None => Ok((history, false)),
        }
    }
    .await;
    match result {
        Ok(r) => Some(r),
        Err(e) => {
            let e: crate::engine::store::StoreError = e;
            tracing::warn!(release = %id, "cannot record the render history: {:#}", anyhow::Error::new(e));
            None
        }
    }
}

/// stageSync step 9, `runGC`: keep `maxHistory` entries and every render the new status
/// refers to (lastSuccessful and lastAttempted are this attempt; the pin; lastHealthy).
/// It runs when the history changed or is longer than `maxHistory` (a lowered limit); a
/// re-sync of the same render has nothing new to collect, and skipping it keeps a no-op
/// sync to a few reads. A render stored by a sync that failed later is collected at the
/// next history change.
async fn run_gc(
    ctx: &Context,
    release: &Release,
    status: &ReleaseStatus,
    attempt: &Attempt,
    recorded: Option<(Vec<HistoryEntry>, bool)>,
) {
    let Some(store) = &ctx.store else {
        return;
    };
    let id = ReleaseId::of(release);
    let max = super::assemble::resolved_retention_status(release)
        .max_history
        .unwrap_or(super::assemble::DEFAULT_MAX_HISTORY)
        .max(1) as usize;
    let history = match recorded {
        Some((history, changed)) if changed || history.len() > max => history,
        _ => return,
    };
    let pin = super::assemble::pin_status(release).map(|p| p.render_ref);
    let mut referenced: Vec<&str> = Vec::new();
    referenced.extend(attempt.render_ref.as_deref());
    referenced.extend(pin.as_deref());
    referenced.extend(status.last_healthy.as_ref().map(|h| h.render_ref.as_str()));
    let result = async {
        let stored = store.list_renders(&id).await?;
        let plan = plan_gc(&history, &stored, max, &referenced);
        if plan.history.len() != history.len() {
            store.put_history(&id, &plan.history).await?;
        }
        for render in &plan.delete {
            store.delete_render(&id, render).await?;
        }
        Ok::<_, crate::engine::store::StoreError>(plan.delete.len())
    }
    .await;
    match result {
        Ok(0) => {}
        Ok(n) => tracing::debug!(release = %id, deleted = n, "render store GC"),
        Err(e) => {
            tracing::warn!(release = %id, "render store GC failed: {:#}", anyhow::Error::new(e))
        }
    }
}

/// stageSync steps 1 and 4–6 for any set of objects: dry-run gate, waves with inventory
/// updates (and, with `waves.waitForHealth`, the wave health gate), prune, inventory.
///
/// Objects that were applied before exactly as rendered now and still hold every value on
/// the cluster are not sent again (an apply would change nothing); everything else goes
/// through the gate and the waves. A re-sync of an unchanged render therefore costs a few
/// LIST requests instead of two requests per object.
async fn sync_objects(
    ctx: &Context,
    run: &SyncRun<'_>,
    inventory: &InventoryHandle,
) -> ReconcileOutcome {
    let attempt = run.attempt.clone();
    let render_ref = run.render_ref.to_string();
    let applier = ctx.applier(run.target);
    let started = std::time::Instant::now();
    let syncing_failed = |reason, message: String, retry| {
        ReconcileOutcome::failed(
            reason,
            failure_stages::SYNCING,
            message,
            attempt.clone(),
            retry,
        )
    };

    let previous = match inventory.get_prefetched().await {
        Ok(inv) => inv,
        Err(e) => {
            return syncing_failed(
                reasons::DEPLOY_FAILED,
                format!("{:#}", anyhow::Error::new(e)),
                true,
            );
        }
    };
    // What the inventory records, and the objects a stopped sync was about to apply
    // (ReleaseInventory.pending): applied again if the render holds them, else pruned; until
    // then every Put keeps them pending.
    let recorded: Vec<Member> = previous
        .as_ref()
        .map(|inv| members(inv).into_iter().map(Member::from_entry).collect())
        .unwrap_or_default();
    let carried: Vec<Member> = previous
        .as_ref()
        .map(pending_members)
        .unwrap_or_default()
        .into_iter()
        .filter(|p| !recorded.iter().any(|m| m.key == p.key))
        .collect();
    let mut pending_in_inventory = previous
        .as_ref()
        .is_some_and(|i| !i.spec.pending.is_empty());
    let previous_members: Vec<Member> = recorded.iter().chain(&carried).cloned().collect();
    let applied_digests: HashMap<ObjectKey, String> = previous_members
        .iter()
        .filter_map(|m| m.digest.clone().map(|d| (m.key.clone(), d)))
        .collect();
    let digest_key = Some(ctx.inventory_digest_key().await);
    // Hook objects the render carries run as hooks; the rest is applied
    // (engine::content_hooks).
    let content_hooks::Split {
        objects: to_apply,
        hooks: content,
    } = content_hooks::split(run.objects);
    // What is applied carries the owning Release in its labels (engine::ownership).
    let labelled = ownership::labelled(run.release, &to_apply);
    // The live objects: what is unchanged, who owns what, what kubectl made, which fields
    // others own.
    let live = match applier.live_objects(&labelled).await {
        Ok(live) => live,
        Err(e @ ApplyError::Unreachable(_)) => {
            return syncing_failed(
                reasons::DEPLOY_FAILED,
                format!("{:#}", anyhow::Error::new(e)),
                true,
            );
        }
        // Unreadable: everything counts as changed and the dry run says what it can.
        Err(_) => HashMap::new(),
    };
    // Fields and objects left to others (engine::exclusions).
    let mut labelled_keyed = Vec::with_capacity(labelled.len());
    for object in labelled {
        let key = applier
            .effective_key(&object)
            .await
            .unwrap_or_else(|_| object.key());
        labelled_keyed.push((key, object));
    }
    let for_cluster = exclusions::for_cluster(run.release, labelled_keyed, &live);
    let objects = &for_cluster.objects[..];
    let mut keyed: Vec<(ObjectKey, &Object)> = Vec::with_capacity(objects.len());
    for object in objects {
        let key = applier
            .effective_key(object)
            .await
            .unwrap_or_else(|_| object.key());
        keyed.push((key, object));
    }
    let mut changed = applier
        .changed_given_live(objects, &applied_digests, digest_key.as_ref(), &live)
        .await;
    // `IfNotPresent` objects that exist are never sent again.
    for (c, (key, _)) in changed.iter_mut().zip(&keyed) {
        if for_cluster.keep_as_is.contains(key) {
            *c = false;
        }
    }
    let to_send: Vec<Object> = objects
        .iter()
        .zip(&changed)
        .filter(|(_, c)| **c)
        .map(|(o, _)| o.clone())
        .collect();
    let to_send_keys: BTreeSet<ObjectKey> = to_send.iter().map(Object::key).collect();
    tracing::debug!(
        changed = to_send.len(),
        unchanged = objects.len() - to_send.len(),
        elapsed_ms = started.elapsed().as_millis() as u64,
        "compared with the cluster"
    );

    // Before step 1, and even for a forced sync: the tenancy rules (engine::tenancy). A
    // Release that reaches into another namespace is stopped like a dry-run rejection.
    if let Err(refused) = tenancy_check(ctx, run).await {
        return syncing_failed(
            reasons::UNAPPLIABLE,
            format!("nothing was applied: {refused}"),
            false,
        );
    }
    // Nothing is applied that the inventory cannot record.
    let all_keys: Vec<ObjectKey> = keyed.iter().map(|(k, _)| k.clone()).collect();
    if let Err(refused) = crate::engine::inventory::check_capacity(&all_keys) {
        return syncing_failed(
            reasons::UNAPPLIABLE,
            format!("nothing was applied: {refused}"),
            false,
        );
    }
    // Nor may a render take an object another existing Release owns, unless it adopts it.
    if let Some(refused) = claimed_objects(ctx, run.release, &keyed, &live).await {
        return syncing_failed(reasons::UNAPPLIABLE, refused, false);
    }
    // Step 1: the dry-run gate (skipped by a forced sync).
    if run.dry_run && !to_send.is_empty() {
        match applier.dry_run_gate(&to_send).await {
            Ok(report) if !report.rejections.is_empty() => {
                let total = report.rejections.len();
                let shown: Vec<String> = report
                    .rejections
                    .iter()
                    .take(5)
                    .map(|r| r.to_string())
                    .collect();
                let more = if total > 5 {
                    format!("; and {} more", total - 5)
                } else {
                    String::new()
                };
                return syncing_failed(
                    reasons::UNAPPLIABLE,
                    format!(
                        "the dry run rejected {total} of {}, nothing was applied: {}{more}",
                        count(objects.len(), "object"),
                        shown.join("; ")
                    ),
                    false,
                );
            }
            Ok(_) => {
                tracing::debug!(
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    "dry-run gate passed"
                );
                ctx.report(ProgressEvent::DryRunPassed {
                    objects: to_send.len(),
                });
            }
            Err(e) => {
                return syncing_failed(
                    reasons::DEPLOY_FAILED,
                    format!("{:#}", anyhow::Error::new(e)),
                    true,
                );
            }
        }
    }
    // Step 2: persistRender (the render as rendered, without the ownership labels).
    if run.persist
        && let Err(message) = persist_render(ctx, run.release, &render_ref, run.objects).await
    {
        return syncing_failed(reasons::DEPLOY_FAILED, message, true);
    }
    // Step 3: the preSync hooks hold the waves until they finish.
    let hook_run = HookRun {
        release: run.release,
        target: run.target,
        applier: &applier,
        inventory,
        render_ref: &render_ref,
        content: &content,
    };
    if run.hooks {
        if let Err(message) = forget_removed_hooks(&hook_run).await {
            return syncing_failed(reasons::DEPLOY_FAILED, message, true);
        }
        match run_hook_phase(&hook_run, HookPhase::PreSync, None).await {
            Ok(PhaseOutcome::Done) => {}
            Ok(PhaseOutcome::Running(hooks)) => {
                return ReconcileOutcome::held(
                    reasons::WAITING_FOR_HOOK,
                    format!("waiting for preSync hooks: {}", hooks.join(", ")),
                    attempt,
                );
            }
            Ok(PhaseOutcome::Failed { hook, message }) => {
                return ReconcileOutcome::hook_failed(
                    &hook,
                    HookPhase::PreSync,
                    format!("preSync hook {hook} failed: {message}"),
                    attempt,
                );
            }
            Err(message) => return syncing_failed(reasons::DEPLOY_FAILED, message, true),
        }
    }

    // Step 4: the waves, each followed by a Put of everything applied so far.
    let mut applied: Vec<Member> = Vec::new();
    let mut objects_sent = 0;
    let mut wave_status: Vec<WaveStatus> = Vec::new();
    let mut last_put: Vec<Member> = recorded.clone();
    let effective: HashMap<ObjectKey, ObjectKey> =
        keyed.iter().map(|(k, o)| (o.key(), k.clone())).collect();
    let recorded_keys: BTreeSet<&ObjectKey> = recorded.iter().map(|m| &m.key).collect();
    let mut previous_wave: Option<i32> = None;
    for (wave, wave_objects) in waves::group(objects) {
        // The shard is checked at the moment of use: a replica whose shard lapsed (a hung
        // renewal, a stopped process) applies nothing more.
        if !ctx.shard.owns(run.release) {
            return syncing_failed(
                reasons::DEPLOY_FAILED,
                format!(
                    "stopped before wave {wave}: this replica no longer holds the Release's shard"
                ),
                true,
            )
            .with_waves(wave_status);
        }
        if let (Some(policy), Some(before)) = (&run.wave_gate, previous_wave)
            && let Some(hold) = wave_health_gate(run, inventory, policy, before, wave).await
        {
            return hold.with_waves(wave_status);
        }
        previous_wave = Some(wave);
        let sending: Vec<Object> = wave_objects
            .iter()
            .filter(|o| to_send_keys.contains(&o.key()))
            .cloned()
            .collect();
        ctx.report(ProgressEvent::WaveStarted {
            wave,
            objects: sending.len(),
        });
        let sending_keys: Vec<ObjectKey> = sending
            .iter()
            .map(|o| effective.get(&o.key()).cloned().unwrap_or_else(|| o.key()))
            .collect();
        if !sending.is_empty() {
            // Intent first: if this process stops during the apply, the next sync knows
            // what it may have left on the cluster.
            let mut pending = still_pending(&carried, &applied);
            pending.extend(sending_keys.iter().cloned());
            if let Err(e) = inventory.put_with_pending(&last_put, &pending).await {
                return syncing_failed(
                    reasons::DEPLOY_FAILED,
                    format!("{:#}", anyhow::Error::new(e)),
                    true,
                )
                .with_waves(wave_status);
            }
            pending_in_inventory = true;
        }
        // Adoption from kubectl: an object recorded for the first time takes over the
        // fields kubectl's managers own, so the render is its whole truth from now on.
        for key in sending_keys.iter().filter(|k| !recorded_keys.contains(k)) {
            if let Some(live_object) = live.get(key)
                && let Err(e) =
                    ownership::take_over_kubectl_fields(&applier, key, live_object).await
            {
                return syncing_failed(
                    reasons::DEPLOY_FAILED,
                    format!(
                        "wave {wave}: adopting {key} from kubectl: {:#}",
                        anyhow::Error::new(e)
                    ),
                    true,
                )
                .with_waves(wave_status);
            }
        }
        let (keys, failure) = match applier.apply(&sending).await {
            Ok(keys) => (keys, None),
            Err(ApplyError::Failed {
                applied: keys,
                failures,
            }) => {
                let e = ApplyError::Failed {
                    applied: keys.clone(),
                    failures,
                };
                (keys, Some(format!("wave {wave}: {e}")))
            }
            Err(e) => (
                Vec::new(),
                Some(format!("wave {wave}: {:#}", anyhow::Error::new(e))),
            ),
        };
        objects_sent += keys.len();
        // Unchanged objects of the wave are members too, recorded with this render.
        let applied_now: BTreeSet<&ObjectKey> = keys.iter().collect();
        let mut wave_members: Vec<Member> = Vec::new();
        for object in &wave_objects {
            let sent = to_send_keys.contains(&object.key());
            let key = match applier.effective_key(object).await {
                Ok(k) => k,
                Err(_) => object.key(),
            };
            if sent && !applied_now.contains(&key) {
                continue;
            }
            wave_members.push(Member {
                key,
                render_ref: render_ref.clone(),
                wave,
                digest: object_digest(object, digest_key.as_ref()),
            });
        }
        applied.extend(wave_members);
        let next = union(&recorded, &applied);
        let pending = still_pending(&carried, &applied);
        let put = if same_members(&next, &last_put) && !pending_in_inventory {
            Ok(())
        } else {
            pending_in_inventory = !pending.is_empty();
            inventory
                .put_with_pending(&next, &pending)
                .await
                .map(|_| ())
        };
        last_put = next;
        if let Some(message) = failure {
            return syncing_failed(reasons::DEPLOY_FAILED, message, true).with_waves(wave_status);
        }
        if let Err(e) = put {
            return syncing_failed(
                reasons::DEPLOY_FAILED,
                format!("{:#}", anyhow::Error::new(e)),
                true,
            )
            .with_waves(wave_status);
        }
        wave_status.push(WaveStatus {
            wave,
            objects: wave_objects.len() as u32,
            applied: true,
            healthy: false,
        });
        tracing::debug!(
            wave,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "wave applied"
        );
        ctx.report(ProgressEvent::WaveApplied {
            wave,
            objects: sending.len(),
        });
        // Sync hooks (Argo CD's `Sync`) run with their wave; the next wave waits for them.
        if run.hooks {
            match run_hook_phase(&hook_run, HookPhase::Sync, Some(wave)).await {
                Ok(PhaseOutcome::Done) => {}
                Ok(PhaseOutcome::Running(hooks)) => {
                    return ReconcileOutcome::held(
                        reasons::WAITING_FOR_HOOK,
                        format!(
                            "waiting for sync hooks of wave {wave}: {}",
                            hooks.join(", ")
                        ),
                        attempt,
                    )
                    .with_waves(wave_status);
                }
                Ok(PhaseOutcome::Failed { hook, message }) => {
                    return ReconcileOutcome::hook_failed(
                        &hook,
                        HookPhase::Sync,
                        format!("sync hook {hook} of wave {wave} failed: {message}"),
                        attempt,
                    )
                    .with_waves(wave_status);
                }
                Err(message) => {
                    return syncing_failed(reasons::DEPLOY_FAILED, message, true)
                        .with_waves(wave_status);
                }
            }
        }
    }

    // Step 5: prune what left the render, never anything outside this inventory, and never
    // an object whose labels now name another Release (it is only dropped from ours).
    let applied_keys: BTreeSet<&ObjectKey> = applied.iter().map(|m| &m.key).collect();
    let targets: Vec<PruneTarget> = previous_members
        .iter()
        .filter(|m| !applied_keys.contains(&m.key) && !for_cluster.ignored.contains(&m.key))
        .map(|m| PruneTarget {
            key: m.key.clone(),
            wave: m.wave,
        })
        .collect();
    let mut handed_over = Vec::new();
    // What could not be pruned stays recorded: members as members, carried-over pending
    // objects as pending.
    let (not_pruned, prune_failure): (Vec<ObjectKey>, Option<String>) = if targets.is_empty() {
        (Vec::new(), None)
    } else {
        match ownership::prune_refs(&applier, run.release, &targets).await {
            Ok(outcome) => {
                ctx.report(ProgressEvent::Pruned {
                    objects: outcome.report.deleted.len(),
                });
                handed_over = outcome.handed_over;
                let report = outcome.report;
                let failure = (!report.failures.is_empty()).then(|| {
                    let shown: Vec<String> = report
                        .failures
                        .iter()
                        .take(5)
                        .map(|r| r.to_string())
                        .collect();
                    format!(
                        "cannot prune {}: {}",
                        count(report.failures.len(), "object"),
                        shown.join("; ")
                    )
                });
                (
                    report.failures.into_iter().map(|r| r.key).collect(),
                    failure,
                )
            }
            Err(e) => (
                targets.iter().map(|t| t.key.clone()).collect(),
                Some(format!("prune: {:#}", anyhow::Error::new(e))),
            ),
        }
    };
    let mut final_members = applied.clone();
    final_members.extend(
        recorded
            .iter()
            .filter(|m| not_pruned.contains(&m.key))
            .cloned(),
    );
    let final_pending: Vec<ObjectKey> = carried
        .iter()
        .filter(|m| not_pruned.contains(&m.key))
        .map(|m| m.key.clone())
        .collect();
    tracing::debug!(
        elapsed_ms = started.elapsed().as_millis() as u64,
        "waves and prune done"
    );

    // Step 6: the inventory is exactly what is on the cluster now.
    let written = if same_members(&final_members, &recorded) && !pending_in_inventory {
        previous.clone().unwrap_or_default()
    } else if same_members(&final_members, &last_put) && !pending_in_inventory {
        match inventory.get().await {
            Ok(Some(inv)) => inv,
            Ok(None) => Default::default(),
            Err(e) => {
                return syncing_failed(
                    reasons::DEPLOY_FAILED,
                    format!("{:#}", anyhow::Error::new(e)),
                    true,
                )
                .with_waves(wave_status);
            }
        }
    } else {
        match inventory
            .put_with_pending(&final_members, &final_pending)
            .await
        {
            Ok(inv) => inv,
            Err(e) => {
                return syncing_failed(
                    reasons::DEPLOY_FAILED,
                    format!("{:#}", anyhow::Error::new(e)),
                    true,
                )
                .with_waves(wave_status);
            }
        }
    };
    if crate::engine::health::configured(run.release) {
        mark_healthy_waves(&mut wave_status, &written, &render_ref);
    } else {
        // NotConfigured: an applied wave is a healthy one.
        for wave in wave_status.iter_mut() {
            wave.healthy = wave.applied;
        }
    }
    if let Some(message) = prune_failure {
        return syncing_failed(reasons::PRUNE_FAILED, message, true).with_waves(wave_status);
    }
    // Steps 7–9 (postSync hooks, history, GC) are stage_sync's.
    let pruned = targets.len() - handed_over.len();
    // The message stays the same for an unchanged render (however much had to be re-sent),
    // so a steady Release's status does not change.
    let mut message = format!(
        "render {} applied: {}",
        short(&render_ref),
        count(objects.len(), "object")
    );
    if pruned > 0 {
        message.push_str(&format!(", {pruned} pruned"));
    }
    let mut outcome = ReconcileOutcome::applied(attempt, message, wave_status);
    outcome.objects_sent = objects_sent;
    if !handed_over.is_empty() {
        let notice = format!(
            "left to other Releases, not pruned: {}",
            ownership::describe_handed_over(&handed_over)
        );
        outcome.message.push_str(&format!("; {notice}"));
        outcome.notices.push(notice);
    }
    outcome
}

/// Objects of the render whose live copy another existing Release owns and that the render
/// does not adopt: the refusal's message, or `None` when there are none.
async fn claimed_objects(
    ctx: &Context,
    release: &Release,
    keyed: &[(ObjectKey, &Object)],
    live: &HashMap<ObjectKey, serde_json::Value>,
) -> Option<String> {
    let claimed = ownership::claimed_by_others(release, keyed, live);
    if claimed.is_empty() {
        return None;
    }
    // A label naming a Release that is gone claims nothing.
    let mut exists: HashMap<ownership::Owner, bool> = HashMap::new();
    let mut refused = Vec::new();
    for (key, owner) in claimed {
        let present = match exists.get(&owner) {
            Some(p) => *p,
            None => {
                let api: kube::Api<Release> =
                    kube::Api::namespaced(ctx.home.client.clone(), &owner.namespace);
                // Unknown (unreadable) counts as present: never take an object by mistake.
                let p = !matches!(api.get_opt(&owner.name).await, Ok(None));
                exists.insert(owner.clone(), p);
                p
            }
        };
        if present {
            refused.push(format!("{key} belongs to {owner}"));
        }
    }
    if refused.is_empty() {
        return None;
    }
    let total = refused.len();
    refused.truncate(5);
    let more = if total > 5 {
        format!("; and {} more", total - 5)
    } else {
        String::new()
    };
    Some(format!(
        "nothing was applied: {}{more} (to hand an object over, set the annotation {}: \"true\" on it in this render)",
        refused.join("; "),
        ownership::ADOPT_ANNOTATION
    ))
}

/// The tenancy rules on the Release and its objects, with scopes from the target's discovery.
async fn tenancy_check(
    ctx: &Context,
    run: &SyncRun<'_>,
) -> Result<(), crate::engine::tenancy::TenancyError> {
    ctx.tenancy.check_release(run.release)?;
    if ctx.tenancy.allow_cross_namespace_refs {
        return Ok(());
    }
    let info = ctx.cluster_info(run.target).await;
    ctx.tenancy.check_objects(run.release, run.objects, |o| {
        info.as_ref()
            .and_then(|i| i.scopes.get(&(o.group().to_string(), o.kind().to_string())))
            .copied()
    })
}

/// The carried-over pending objects not applied (again) in this sync so far.
fn still_pending(carried: &[Member], applied: &[Member]) -> Vec<ObjectKey> {
    carried
        .iter()
        .filter(|c| !applied.iter().any(|a| a.key == c.key))
        .map(|c| c.key.clone())
        .collect()
}

/// Whether two member lists record the same thing (order aside).
fn same_members(a: &[Member], b: &[Member]) -> bool {
    let key = |m: &Member| {
        (
            m.key.clone(),
            m.render_ref.clone(),
            m.wave,
            m.digest.clone(),
        )
    };
    let mut a: Vec<_> = a.iter().map(key).collect();
    let mut b: Vec<_> = b.iter().map(key).collect();
    a.sort();
    b.sort();
    a == b
}

/// The previous members not applied again, plus everything applied so far.
fn union(previous: &[Member], applied: &[Member]) -> Vec<Member> {
    let applied_keys: BTreeSet<&ObjectKey> = applied.iter().map(|m| &m.key).collect();
    let mut all: Vec<Member> = previous
        .iter()
        .filter(|m| !applied_keys.contains(&m.key))
        .cloned()
        .collect();
    all.extend(applied.iter().cloned());
    all
}

/// Whether every inventory entry carries `render_ref` and was assessed Healthy for it. The
/// cached Healthy condition can still speak for the previous render (the health loop has not
/// looked since the apply); the entries cannot.
pub fn inventory_healthy_for(inventory: &ReleaseInventory, render_ref: &str) -> bool {
    inventory.spec.inventory.iter().all(|e| {
        e.render_ref.as_deref() == Some(render_ref)
            && e.assessed_render_ref.as_deref() == Some(render_ref)
            && e.state == Some(HealthState::Healthy)
    })
}

/// `status.waves[].healthy`: every entry of the wave is Healthy for this render.
pub fn mark_healthy_waves(
    waves: &mut [WaveStatus],
    inventory: &ReleaseInventory,
    render_ref: &str,
) {
    for wave in waves.iter_mut() {
        let entries: Vec<_> = inventory
            .spec
            .inventory
            .iter()
            .filter(|e| e.wave == Some(wave.wave) && e.render_ref.as_deref() == Some(render_ref))
            .collect();
        wave.healthy = !entries.is_empty()
            && entries.iter().all(|e| {
                e.state == Some(crate::engine::api::HealthState::Healthy)
                    && e.assessed_render_ref.as_deref() == Some(render_ref)
            });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn inventory(entries: serde_json::Value) -> ReleaseInventory {
        serde_json::from_value(json!({
            "apiVersion": "core.convoy.kumodo.io/v1alpha1", "kind": "ReleaseInventory",
            "metadata": {"name": "web", "namespace": "apps"},
            "inventory": entries,
        }))
        .unwrap()
    }

    #[test]
    fn the_inventory_decides_whether_a_render_is_healthy() {
        let entry = |render: &str, assessed: &str, state: &str| {
            json!({"group": "apps", "kind": "Deployment", "namespace": "apps", "name": "web",
                   "renderRef": render, "assessedRenderRef": assessed, "state": state})
        };
        assert!(inventory_healthy_for(
            &inventory(json!([entry("new", "new", "Healthy")])),
            "new"
        ));
        // Healthy for the previous render: the verdict is not this render's yet.
        assert!(!inventory_healthy_for(
            &inventory(json!([entry("new", "old", "Healthy")])),
            "new"
        ));
        assert!(!inventory_healthy_for(
            &inventory(json!([entry("old", "old", "Healthy")])),
            "new"
        ));
        assert!(!inventory_healthy_for(
            &inventory(json!([entry("new", "new", "Progressing")])),
            "new"
        ));
    }
}

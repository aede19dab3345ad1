//! stageSync step 4: the waves in order, each behind the wave health gate (with
//! `waves.waitForHealth`), each recorded in the inventory before (intent: pending) and after
//! (members) it is applied, each followed by its sync hooks.
//!
//! When nothing can hold the next wave (no health gate, no sync hooks), one intent covers
//! both: a wave's intent lists every wave after it up to the first boundary that can hold,
//! and the members of a wave whose next wave's intent is recorded wait for the Put after
//! that wave. A render of two waves that nothing holds is two inventory writes (intent,
//! members) instead of three, with the same guarantee (whatever may be on the cluster is in
//! the inventory before it is sent). Deviation: stageSync step 4 puts the members after each
//! wave; nothing waits on them in between when no boundary can hold (the observer assesses
//! a run's objects once its members are put, a moment after the first of them was sent). A
//! wave that fails inside a run (an apply, an adoption) puts the run's members so far; a sync
//! stopped inside a run by a lapsed shard (which must write nothing more) leaves the run's
//! waves before it as pending, which the next sync sends again or prunes, as after a crash.
//!
//! Spec: reconcile-flow.txt stageSync step 4, `waveHealthGate`; status-and-conditions.txt
//! WaitingForWaveHealth, WaveFailed; DESIGN.md "Sync waves".

use std::collections::BTreeSet;

use super::SyncRun;
use super::compare::SyncPlan;
use crate::engine::api::{
    FailureStage, HealthState, HookPhase, ObjectKey, Reason, ReleaseInventory, WavePolicy,
    WaveStatus,
};
use crate::engine::apply::{ApplyError, waves};
use crate::engine::error::chain;
use crate::engine::explain::first_of;
use crate::engine::inventory::{InventoryError, Member};
use crate::engine::ownership;
use crate::engine::reconcile::ReconcileOutcome;
use crate::engine::reconcile::hook_phase::{HookRun, has_hooks, run_hook_phase};
use crate::engine::reconcile::outcome::{timed_out, waiting_for};
use crate::engine::render::Object;
use crate::engine::render::render_ref::{object_digest, short};
use crate::engine::runtime::{Context, ProgressEvent};

/// What the waves applied.
pub(super) struct Applied {
    /// Members applied (or found unchanged) by this sync, with this render.
    pub members: Vec<Member>,
    /// The members the inventory records after the last Put.
    pub last_put: Vec<Member>,
    /// The inventory as the last Put of this sync left it: step 6 needs no read of its own
    /// when that Put recorded the final members (a GET of 1,000 entries took about 100 ms).
    pub last_written: Option<ReleaseInventory>,
    /// Whether the inventory still lists pending objects.
    pub pending_in_inventory: bool,
    /// The last wave whose intent is recorded (with this sync's intents before it).
    pub intent_through: Option<i32>,
    pub objects_sent: usize,
    /// Of those, the ones sent because the live object no longer held what was applied.
    pub drift_put_back: usize,
    /// Objects deleted and created again, as their annotations ask (applier::recreate).
    pub recreated: Vec<ObjectKey>,
    pub waves: Vec<WaveStatus>,
}

/// Apply every wave. `Err` is a stop (a hold, a failure), carrying the waves so far.
/// `early_intent`: the last wave whose intent [`record_first_intent`] recorded already.
pub(super) async fn apply_waves(
    ctx: &Context,
    run: &SyncRun<'_>,
    plan: &SyncPlan,
    hooks: &HookRun<'_>,
    early_intent: Option<i32>,
) -> Result<Applied, ReconcileOutcome> {
    let mut applied = Applied {
        members: Vec::new(),
        last_put: plan.recorded.clone(),
        last_written: None,
        pending_in_inventory: plan.pending_in_inventory || early_intent.is_some(),
        intent_through: early_intent,
        objects_sent: 0,
        drift_put_back: 0,
        recreated: Vec::new(),
        waves: Vec::new(),
    };
    let groups: Vec<(i32, Vec<Object>)> = waves::group(&plan.for_cluster.objects)
        .into_iter()
        .collect();
    let mut previous_wave: Option<i32> = None;
    for (index, (wave, objects)) in groups.iter().enumerate() {
        let wave = *wave;
        if let Some(stop) = wave_may_start(ctx, run, hooks, previous_wave, wave).await {
            return Err(stop.with_waves(applied.waves));
        }
        previous_wave = Some(wave);
        let intent =
            (!intent_covers(&applied, wave)).then(|| intent_span(run, plan, hooks, &groups, index));
        // A span that covers this wave covers the next too when nothing can hold it; were it
        // not covered, the members would be put now and the next wave record its own intent.
        let covered = groups.get(index + 1).is_some_and(|(next_wave, _)| {
            next_wave_follows(run, hooks, wave)
                && (intent_covers(&applied, *next_wave)
                    || intent.as_ref().is_some_and(|i| i.through >= *next_wave))
        });
        let next = if covered { After::Covered } else { After::Stop };
        if let Err(e) = apply_wave(
            ctx,
            run,
            plan,
            hooks,
            &mut applied,
            (wave, objects),
            intent,
            next,
        )
        .await
        {
            return Err(run.deploy_failed(chain(&e)).with_waves(applied.waves));
        }
        // Sync hooks (Argo CD's `Sync`) run with their wave; the next wave waits for them.
        if run.hooks
            && let Err(stop) = run_sync_hooks(run, hooks, wave).await
        {
            return Err(stop.with_waves(applied.waves));
        }
    }
    Ok(applied)
}

/// Whether wave `wave` may start: this replica still holds the shard, and the wave before it
/// is healthy (the wave health gate).
async fn wave_may_start(
    ctx: &Context,
    run: &SyncRun<'_>,
    hooks: &HookRun<'_>,
    previous_wave: Option<i32>,
    wave: i32,
) -> Option<ReconcileOutcome> {
    // The shard is checked at the moment of use: a replica whose shard lapsed (a hung
    // renewal, a stopped process) applies nothing more.
    if !ctx.shard.owns(run.release) {
        return Some(run.deploy_failed(format!(
            "stopped before wave {wave}: this replica no longer holds the Release's shard"
        )));
    }
    match (&run.wave_gate, previous_wave) {
        (Some(policy), Some(before)) => wave_health_gate(run, hooks, policy, before, wave).await,
        _ => None,
    }
}

/// Whether the wave after `wave` starts in this pass as soon as `wave` is applied: no wave
/// health gate and no sync hooks of `wave` can hold it. (A failure, or a lapsed shard, can
/// still stop it: its intent is then recorded for objects never sent, which the next sync
/// sends or prunes, as after a crash.)
fn next_wave_follows(run: &SyncRun<'_>, hooks: &HookRun<'_>, wave: i32) -> bool {
    let gated = run.wave_gate.is_some() && crate::engine::health::configured(run.release);
    let hooked = run.hooks && has_hooks(hooks, HookPhase::Sync, Some(wave));
    !gated && !hooked
}

/// Why a wave failed; its chain becomes the `DeployFailed` outcome's message.
#[derive(Debug, thiserror::Error)]
pub(super) enum WaveError {
    #[error(transparent)]
    Inventory(#[from] InventoryError),
    #[error("wave {wave}: adopting {key} from kubectl")]
    Adopt {
        wave: i32,
        key: ObjectKey,
        #[source]
        source: ApplyError,
    },
    #[error("wave {wave}")]
    Apply {
        wave: i32,
        #[source]
        source: ApplyError,
    },
}

/// The intent one Put records: the objects sent by a run of waves that nothing can hold
/// apart, and the last of those waves.
struct Intent {
    through: i32,
    sending: Vec<ObjectKey>,
}

/// What follows a wave's apply, for the Put that records its members.
enum After {
    /// The next wave starts at once and its intent is recorded: the members wait for the
    /// Put after it.
    Covered,
    /// The last wave, one whose next wave can be held, or a failed one: its members (with
    /// those of the waves before it still waiting) are put now.
    Stop,
}

/// Whether this sync recorded the intent of `wave` already.
fn intent_covers(applied: &Applied, wave: i32) -> bool {
    applied
        .intent_through
        .is_some_and(|through| through >= wave)
}

/// The intent recorded before `groups[from]` is sent: that wave's objects and those of each
/// wave after it that nothing can hold apart from it (see [`next_wave_follows`]).
fn intent_span(
    run: &SyncRun<'_>,
    plan: &SyncPlan,
    hooks: &HookRun<'_>,
    groups: &[(i32, Vec<Object>)],
    from: usize,
) -> Intent {
    let mut sending = Vec::new();
    let mut through = groups.get(from).map_or(0, |(wave, _)| *wave);
    for (wave, objects) in groups.iter().skip(from) {
        sending.extend(sending_keys(plan, objects));
        through = *wave;
        if !next_wave_follows(run, hooks, *wave) {
            break;
        }
    }
    Intent { through, sending }
}

/// The keys of the objects of a wave that are sent (under the names they are applied with).
fn sending_keys(plan: &SyncPlan, objects: &[Object]) -> Vec<ObjectKey> {
    objects
        .iter()
        .filter(|o| plan.to_send_keys.contains(&o.key()))
        .map(|o| plan.effective_key(o))
        .collect()
}

/// One wave: record the intent (`intent`, unless an earlier Put covered this wave), adopt
/// from kubectl, apply what changed, record the members (per `next`). On `Err` the inventory
/// holds what was applied.
#[allow(clippy::too_many_arguments)]
async fn apply_wave(
    ctx: &Context,
    run: &SyncRun<'_>,
    plan: &SyncPlan,
    hooks: &HookRun<'_>,
    applied: &mut Applied,
    (wave, objects): (i32, &[Object]),
    intent: Option<Intent>,
    next: After,
) -> Result<(), WaveError> {
    let sending: Vec<Object> = objects
        .iter()
        .filter(|o| plan.to_send_keys.contains(&o.key()))
        .cloned()
        .collect();
    ctx.report(ProgressEvent::WaveStarted {
        wave,
        objects: sending.len(),
    });
    let sending_keys = sending_keys(plan, objects);
    if let Some(intent) = intent {
        record_intent(plan, hooks, applied, intent).await?;
    }
    // A failed adoption stops the wave as a failed apply does: what the run applied before
    // it is put as members (its waves were only pending, and were sent again next time).
    let (keys, failure) = match adopt_from_kubectl(plan, hooks, &sending_keys, wave).await {
        Err(e) => (Vec::new(), Some(e)),
        Ok(()) => match hooks.applier.apply(&sending, &mut applied.recreated).await {
            Ok(keys) => (keys, None),
            Err(ApplyError::Failed { applied, failures }) => {
                let source = ApplyError::Failed {
                    applied: applied.clone(),
                    failures,
                };
                (applied, Some(WaveError::Apply { wave, source }))
            }
            Err(source) => (Vec::new(), Some(WaveError::Apply { wave, source })),
        },
    };
    applied.objects_sent += keys.len();
    applied.drift_put_back += keys.iter().filter(|k| plan.drifted.contains(*k)).count();
    // A failed wave ends the sync: its members are put now, and no further intent.
    let next = if failure.is_some() { After::Stop } else { next };
    let put = record_wave(run, plan, hooks, applied, (wave, objects), &keys, next).await;
    if let Some(failure) = failure {
        return Err(failure);
    }
    put?;
    applied.waves.push(WaveStatus {
        wave,
        objects: objects.len() as u32,
        applied: true,
        healthy: false,
    });
    tracing::debug!(wave, "wave applied");
    ctx.report(ProgressEvent::WaveApplied {
        wave,
        objects: sending.len(),
    });
    Ok(())
}

/// Intent first: if this process stops during the apply, the next sync knows what it may
/// have left on the cluster (ReleaseInventory.pending).
async fn record_intent(
    plan: &SyncPlan,
    hooks: &HookRun<'_>,
    applied: &mut Applied,
    intent: Intent,
) -> Result<(), InventoryError> {
    if intent.sending.is_empty() {
        applied.intent_through = Some(intent.through);
        return Ok(());
    }
    let mut pending = super::prune::still_pending(&plan.carried, &applied.members);
    pending.extend(intent.sending);
    applied.last_written = Some(
        hooks
            .inventory
            .put_with_pending(&applied.last_put, &pending)
            .await?,
    );
    applied.pending_in_inventory = true;
    applied.intent_through = Some(intent.through);
    Ok(())
}

/// The first wave's intent (with the waves nothing can hold apart from it), recorded before
/// the dry-run gate's verdict (see `sync::gate_and_persist`): the Put `apply_wave` makes for
/// it, made earlier. `Ok(Some(wave))`: the last wave it covers. `Ok(None)`: those waves send
/// nothing, there is no intent to record.
pub(super) async fn record_first_intent(
    run: &SyncRun<'_>,
    plan: &SyncPlan,
    hooks: &HookRun<'_>,
) -> Result<Option<i32>, InventoryError> {
    let groups: Vec<(i32, Vec<Object>)> = waves::group(&plan.for_cluster.objects)
        .into_iter()
        .collect();
    if groups.is_empty() {
        return Ok(None);
    }
    let intent = intent_span(run, plan, hooks, &groups, 0);
    if intent.sending.is_empty() {
        return Ok(None);
    }
    let mut pending = super::prune::still_pending(&plan.carried, &[]);
    pending.extend(intent.sending);
    hooks
        .inventory
        .put_with_pending(&plan.recorded, &pending)
        .await?;
    Ok(Some(intent.through))
}

/// Undo [`record_first_intent`] when the sync stops before its waves: the inventory as read
/// before the sync (its members, and the pending objects a stopped sync left, if any), or
/// none.
pub(super) async fn withdraw_first_intent(
    plan: &SyncPlan,
    hooks: &HookRun<'_>,
) -> Result<(), InventoryError> {
    // Refused on a stale copy (409): it did not land, there is nothing to undo.
    if hooks.inventory.refused_on_a_stale_copy() {
        return Ok(());
    }
    if plan.previous.is_none() {
        return hooks.inventory.delete().await;
    }
    let pending = super::prune::still_pending(&plan.carried, &[]);
    hooks
        .inventory
        .put_with_pending(&plan.recorded, &pending)
        .await
        .map(|_| ())
}

/// Adoption from kubectl: an object recorded for the first time takes over the fields
/// kubectl's managers own, so the render is its whole truth from now on; not one whose render
/// says Flux's `Merge` (engine::exclusions).
async fn adopt_from_kubectl(
    plan: &SyncPlan,
    hooks: &HookRun<'_>,
    sending: &[ObjectKey],
    wave: i32,
) -> Result<(), WaveError> {
    let recorded: BTreeSet<&ObjectKey> = plan.recorded.iter().map(|m| &m.key).collect();
    let adopted = sending
        .iter()
        .filter(|k| !recorded.contains(k) && !plan.for_cluster.not_adopted.contains(*k));
    for key in adopted {
        if let Some(live) = plan.live.get(key) {
            ownership::take_over_kubectl_fields(hooks.applier, key, live)
                .await
                .map_err(|source| WaveError::Adopt {
                    wave,
                    key: key.clone(),
                    source,
                })?;
        }
    }
    Ok(())
}

/// The wave's members (what was applied now, and its unchanged objects, all with this
/// render), and, unless the next wave's intent covers them (`After::Covered`), a Put of
/// everything applied so far, unless the inventory says so already.
async fn record_wave(
    run: &SyncRun<'_>,
    plan: &SyncPlan,
    hooks: &HookRun<'_>,
    applied: &mut Applied,
    (wave, objects): (i32, &[Object]),
    applied_now: &[ObjectKey],
    next: After,
) -> Result<(), InventoryError> {
    let applied_now: BTreeSet<&ObjectKey> = applied_now.iter().collect();
    for object in objects {
        let mut key = plan.effective_key(object);
        if plan.to_send_keys.contains(&object.key()) && !applied_now.contains(&key) {
            // A kind discovery learned only at this wave (an operator of an earlier one
            // installed it) has its key only now: cluster-scoped, it has no namespace.
            match hooks.applier.effective_key(object).await {
                Ok(now) if applied_now.contains(&now) => key = now,
                _ => continue,
            }
        }
        applied.members.push(Member {
            key,
            render_ref: run.render_ref.to_string(),
            wave,
            digest: object_digest(object, plan.digest_key.as_ref()),
        });
    }
    // The intent lists this wave's objects and the next's: nothing to record until then.
    if let After::Covered = next {
        return Ok(());
    }
    let members = super::prune::union(&plan.recorded, &applied.members);
    let pending = super::prune::still_pending(&plan.carried, &applied.members);
    let unchanged =
        super::prune::same_members(&members, &applied.last_put) && !applied.pending_in_inventory;
    let put = if unchanged {
        Ok(())
    } else {
        applied.pending_in_inventory = !pending.is_empty();
        hooks
            .inventory
            .put_with_pending(&members, &pending)
            .await
            .map(|written| applied.last_written = Some(written))
    };
    applied.last_put = members;
    put
}

/// The sync hooks of `wave`: `Err` holds or fails the sync.
async fn run_sync_hooks(
    run: &SyncRun<'_>,
    hooks: &HookRun<'_>,
    wave: i32,
) -> Result<(), ReconcileOutcome> {
    let result = run_hook_phase(hooks, HookPhase::Sync, Some(wave)).await;
    super::hooks_hold_or_fail(run, result, HookPhase::Sync, Some(wave)).map_or(Ok(()), Err)
}

/// `waveHealthGate`: wave `wave` waits until every inventory entry of wave `before` is
/// Healthy for this render; past `waves.timeout` (from when the hold began) it fails with
/// `WaveFailed` (stage_sync maps that per the failure policy).
async fn wave_health_gate(
    run: &SyncRun<'_>,
    hooks: &HookRun<'_>,
    policy: &WavePolicy,
    before: i32,
    wave: i32,
) -> Option<ReconcileOutcome> {
    // Without a health assessment nothing is ever assessed, and NotConfigured counts as
    // healthy: the gate is open.
    if !crate::engine::health::configured(run.release) {
        return None;
    }
    let unhealthy = match hooks.inventory.get().await {
        Ok(Some(inv)) => unhealthy_in_wave(&inv, before, run.render_ref),
        Ok(None) => vec![format!("wave {before} is not in the inventory yet")],
        Err(e) => return Some(run.deploy_failed(crate::engine::error::chain(&e))),
    };
    if unhealthy.is_empty() {
        return None;
    }
    let target = format!("wave {before}");
    let waiting = waiting_for(
        run.status,
        run.render_ref,
        Reason::WaitingForWaveHealth,
        &target,
        run.now,
    );
    let shown = first_of(&unhealthy, 3);
    if let Some(timeout) = timed_out(&waiting, policy.timeout.as_ref(), run.now) {
        let message = format!(
            "wave {before} of render {} was not healthy within {timeout}: {shown}",
            short(run.render_ref)
        );
        return Some(
            ReconcileOutcome::failed(
                Reason::WaveFailed,
                FailureStage::Syncing,
                message,
                run.attempt.clone(),
                false,
            )
            .with_waiting(waiting),
        );
    }
    let message = format!("wave {wave} waits for wave {before} to be healthy: {shown}");
    Some(
        ReconcileOutcome::held(Reason::WaitingForWaveHealth, message, run.attempt.clone())
            .with_waiting(waiting),
    )
}

/// The entries of `wave` that are not Healthy for `render_ref`, described for a message.
///
/// reconcile-flow: stageSync step 4 ("the previous wave is not healthy"): the wave is the
/// one `render_ref` applied. The inventory also holds the previous render's entries until
/// the prune (the union the waves' Puts write); one that left the render, or moved to a
/// later wave, is never assessed for `render_ref` in this wave, and would hold it until the
/// wave timed out.
pub fn unhealthy_in_wave(inventory: &ReleaseInventory, wave: i32, render_ref: &str) -> Vec<String> {
    inventory
        .spec
        .inventory
        .iter()
        .filter(|e| e.wave == Some(wave) && e.render_ref.as_deref() == Some(render_ref))
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

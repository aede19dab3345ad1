//! stageSync step 4: the waves in order, each behind the wave health gate (with
//! `waves.waitForHealth`), each recorded in the inventory before (intent: pending) and after
//! (members) it is applied, each followed by its sync hooks.
//!
//! When nothing can hold the next wave (no health gate, no sync hooks), the Put after a wave
//! also records the next wave's intent: one write instead of two per wave boundary, with the
//! same guarantee (whatever may be on the cluster is in the inventory before it is sent).
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
    /// The wave whose intent the last Put recorded already (with the wave before's members).
    pub intent_recorded: Option<i32>,
    pub objects_sent: usize,
    pub waves: Vec<WaveStatus>,
}

/// Apply every wave. `Err` is a stop (a hold, a failure), carrying the waves so far.
/// `early_intent`: the wave whose intent [`record_first_intent`] recorded already.
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
        intent_recorded: early_intent,
        objects_sent: 0,
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
        let next = groups
            .get(index + 1)
            .filter(|_| next_wave_follows(run, hooks, wave))
            .map(|(next_wave, next_objects)| NextIntent {
                wave: *next_wave,
                sending: sending_keys(plan, next_objects),
            });
        if let Err(e) = apply_wave(ctx, run, plan, hooks, &mut applied, (wave, objects), next).await
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

/// The next wave's intent, recorded by the Put after this wave.
struct NextIntent {
    wave: i32,
    sending: Vec<ObjectKey>,
}

/// The keys of the objects of a wave that are sent (under the names they are applied with).
fn sending_keys(plan: &SyncPlan, objects: &[Object]) -> Vec<ObjectKey> {
    objects
        .iter()
        .filter(|o| plan.to_send_keys.contains(&o.key()))
        .map(|o| plan.effective_key(o))
        .collect()
}

/// One wave: record the intent (unless the Put after the wave before did), adopt from
/// kubectl, apply what changed, record the members (and `next`'s intent). On `Err` the
/// inventory holds what was applied.
async fn apply_wave(
    ctx: &Context,
    run: &SyncRun<'_>,
    plan: &SyncPlan,
    hooks: &HookRun<'_>,
    applied: &mut Applied,
    (wave, objects): (i32, &[Object]),
    next: Option<NextIntent>,
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
    if applied.intent_recorded != Some(wave) {
        record_intent(plan, hooks, applied, &sending_keys).await?;
    }
    adopt_from_kubectl(plan, hooks, &sending_keys, wave).await?;
    let (keys, failure) = match hooks.applier.apply(&sending).await {
        Ok(keys) => (keys, None),
        Err(ApplyError::Failed { applied, failures }) => {
            let source = ApplyError::Failed {
                applied: applied.clone(),
                failures,
            };
            (applied, Some(WaveError::Apply { wave, source }))
        }
        Err(source) => (Vec::new(), Some(WaveError::Apply { wave, source })),
    };
    applied.objects_sent += keys.len();
    // A failed wave ends the sync: the next wave's intent is not recorded.
    let next = next.filter(|_| failure.is_none());
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
    sending: &[ObjectKey],
) -> Result<(), InventoryError> {
    if sending.is_empty() {
        return Ok(());
    }
    let mut pending = super::prune::still_pending(&plan.carried, &applied.members);
    pending.extend(sending.iter().cloned());
    applied.last_written = Some(
        hooks
            .inventory
            .put_with_pending(&applied.last_put, &pending)
            .await?,
    );
    applied.pending_in_inventory = true;
    Ok(())
}

/// The first wave's intent, recorded before the dry-run gate's verdict (see
/// `sync::gate_and_persist`): the Put `apply_wave` makes for it, made earlier.
/// `Ok(None)`: the first wave sends nothing, there is no intent to record.
pub(super) async fn record_first_intent(
    plan: &SyncPlan,
    hooks: &HookRun<'_>,
) -> Result<Option<i32>, InventoryError> {
    let Some((wave, objects)) = waves::group(&plan.for_cluster.objects).into_iter().next() else {
        return Ok(None);
    };
    let sending = sending_keys(plan, &objects);
    if sending.is_empty() {
        return Ok(None);
    }
    let mut pending = super::prune::still_pending(&plan.carried, &[]);
    pending.extend(sending);
    hooks
        .inventory
        .put_with_pending(&plan.recorded, &pending)
        .await?;
    Ok(Some(wave))
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
/// kubectl's managers own, so the render is its whole truth from now on.
async fn adopt_from_kubectl(
    plan: &SyncPlan,
    hooks: &HookRun<'_>,
    sending: &[ObjectKey],
    wave: i32,
) -> Result<(), WaveError> {
    let recorded: BTreeSet<&ObjectKey> = plan.recorded.iter().map(|m| &m.key).collect();
    for key in sending.iter().filter(|k| !recorded.contains(k)) {
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
/// render), and a Put of everything applied so far, with `next`'s intent, unless the
/// inventory says so already.
async fn record_wave(
    run: &SyncRun<'_>,
    plan: &SyncPlan,
    hooks: &HookRun<'_>,
    applied: &mut Applied,
    (wave, objects): (i32, &[Object]),
    applied_now: &[ObjectKey],
    next: Option<NextIntent>,
) -> Result<(), InventoryError> {
    let applied_now: BTreeSet<&ObjectKey> = applied_now.iter().collect();
    for object in objects {
        let key = plan.effective_key(object);
        if plan.to_send_keys.contains(&object.key()) && !applied_now.contains(&key) {
            continue;
        }
        applied.members.push(Member {
            key,
            render_ref: run.render_ref.to_string(),
            wave,
            digest: object_digest(object, plan.digest_key.as_ref()),
        });
    }
    let members = super::prune::union(&plan.recorded, &applied.members);
    let mut pending = super::prune::still_pending(&plan.carried, &applied.members);
    let next = next.filter(|n| !n.sending.is_empty());
    if let Some(next) = &next {
        pending.extend(next.sending.iter().cloned());
    }
    let unchanged = super::prune::same_members(&members, &applied.last_put)
        && !applied.pending_in_inventory
        && next.is_none();
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
    if put.is_ok() {
        applied.intent_recorded = next.map(|n| n.wave);
    }
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

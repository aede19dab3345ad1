//! stageSync step 4: the waves in order, each behind the wave health gate (with
//! `waves.waitForHealth`), each recorded in the inventory before (intent: pending) and after
//! (members) it is applied, each followed by its sync hooks.
//!
//! Spec: reconcile-flow.txt stageSync step 4, `waveHealthGate`; status-and-conditions.txt
//! WaitingForWaveHealth, WaveFailed; DESIGN.md "Sync waves".

use std::collections::BTreeSet;

use super::SyncRun;
use super::compare::SyncPlan;
use crate::engine::api::{
    HealthState, HookPhase, ObjectKey, ReleaseInventory, WavePolicy, WaveStatus, failure_stages,
    reasons,
};
use crate::engine::apply::{ApplyError, waves};
use crate::engine::explain::first_of;
use crate::engine::inventory::Member;
use crate::engine::ownership;
use crate::engine::reconcile::ReconcileOutcome;
use crate::engine::reconcile::hook_phase::{HookRun, run_hook_phase};
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
    /// Whether the inventory still lists pending objects.
    pub pending_in_inventory: bool,
    pub objects_sent: usize,
    pub waves: Vec<WaveStatus>,
}

/// Apply every wave. `Err` is a stop (a hold, a failure), carrying the waves so far.
pub(super) async fn apply_waves(
    ctx: &Context,
    run: &SyncRun<'_>,
    plan: &SyncPlan,
    hooks: &HookRun<'_>,
) -> Result<Applied, ReconcileOutcome> {
    let mut applied = Applied {
        members: Vec::new(),
        last_put: plan.recorded.clone(),
        pending_in_inventory: plan.pending_in_inventory,
        objects_sent: 0,
        waves: Vec::new(),
    };
    let mut previous_wave: Option<i32> = None;
    for (wave, objects) in waves::group(&plan.for_cluster.objects) {
        if let Some(stop) = wave_may_start(ctx, run, hooks, previous_wave, wave).await {
            return Err(stop.with_waves(applied.waves));
        }
        previous_wave = Some(wave);
        if let Err(message) = apply_wave(ctx, run, plan, hooks, &mut applied, wave, &objects).await
        {
            return Err(run.deploy_failed(message).with_waves(applied.waves));
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

/// One wave: record the intent, adopt from kubectl, apply what changed, record the members.
/// `Err` is the failure's message (the inventory holds what was applied).
async fn apply_wave(
    ctx: &Context,
    run: &SyncRun<'_>,
    plan: &SyncPlan,
    hooks: &HookRun<'_>,
    applied: &mut Applied,
    wave: i32,
    objects: &[Object],
) -> Result<(), String> {
    let sending: Vec<Object> = objects
        .iter()
        .filter(|o| plan.to_send_keys.contains(&o.key()))
        .cloned()
        .collect();
    ctx.report(ProgressEvent::WaveStarted {
        wave,
        objects: sending.len(),
    });
    let sending_keys: Vec<ObjectKey> = sending.iter().map(|o| plan.effective_key(o)).collect();
    record_intent(plan, hooks, applied, &sending_keys).await?;
    adopt_from_kubectl(plan, hooks, &sending_keys, wave).await?;
    let (keys, failure) = match hooks.applier.apply(&sending).await {
        Ok(keys) => (keys, None),
        Err(ApplyError::Failed { applied, failures }) => {
            let message = ApplyError::Failed {
                applied: applied.clone(),
                failures,
            }
            .to_string();
            (applied, Some(format!("wave {wave}: {message}")))
        }
        Err(e) => (
            Vec::new(),
            Some(format!("wave {wave}: {}", crate::engine::error::chain(&e))),
        ),
    };
    applied.objects_sent += keys.len();
    let put = record_wave(run, plan, hooks, applied, wave, objects, &keys).await;
    if let Some(message) = failure {
        return Err(message);
    }
    put.map_err(|e| crate::engine::error::chain(&e))?;
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
) -> Result<(), String> {
    if sending.is_empty() {
        return Ok(());
    }
    let mut pending = super::prune::still_pending(&plan.carried, &applied.members);
    pending.extend(sending.iter().cloned());
    hooks
        .inventory
        .put_with_pending(&applied.last_put, &pending)
        .await
        .map_err(|e| crate::engine::error::chain(&e))?;
    applied.pending_in_inventory = true;
    Ok(())
}

/// Adoption from kubectl: an object recorded for the first time takes over the fields
/// kubectl's managers own, so the render is its whole truth from now on.
async fn adopt_from_kubectl(
    plan: &SyncPlan,
    hooks: &HookRun<'_>,
    sending: &[ObjectKey],
    wave: i32,
) -> Result<(), String> {
    let recorded: BTreeSet<&ObjectKey> = plan.recorded.iter().map(|m| &m.key).collect();
    for key in sending.iter().filter(|k| !recorded.contains(k)) {
        if let Some(live) = plan.live.get(key) {
            ownership::take_over_kubectl_fields(hooks.applier, key, live)
                .await
                .map_err(|e| {
                    format!(
                        "wave {wave}: adopting {key} from kubectl: {}",
                        crate::engine::error::chain(&e)
                    )
                })?;
        }
    }
    Ok(())
}

/// The wave's members (what was applied now, and its unchanged objects, all with this
/// render), and a Put of everything applied so far unless the inventory says so already.
async fn record_wave(
    run: &SyncRun<'_>,
    plan: &SyncPlan,
    hooks: &HookRun<'_>,
    applied: &mut Applied,
    wave: i32,
    objects: &[Object],
    applied_now: &[ObjectKey],
) -> Result<(), crate::engine::inventory::InventoryError> {
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
    let next = super::prune::union(&plan.recorded, &applied.members);
    let pending = super::prune::still_pending(&plan.carried, &applied.members);
    let put =
        if super::prune::same_members(&next, &applied.last_put) && !applied.pending_in_inventory {
            Ok(())
        } else {
            applied.pending_in_inventory = !pending.is_empty();
            hooks
                .inventory
                .put_with_pending(&next, &pending)
                .await
                .map(|_| ())
        };
    applied.last_put = next;
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
        reasons::WAITING_FOR_WAVE_HEALTH,
        &target,
        run.now,
    );
    let shown = first_of(&unhealthy, 3);
    if let Some(timeout) = timed_out(&waiting, policy.timeout.as_deref(), run.now) {
        let message = format!(
            "wave {before} of render {} was not healthy within {timeout}: {shown}",
            short(run.render_ref)
        );
        return Some(
            ReconcileOutcome::failed(
                reasons::WAVE_FAILED,
                failure_stages::SYNCING,
                message,
                run.attempt.clone(),
                false,
            )
            .with_waiting(waiting),
        );
    }
    let message = format!("wave {wave} waits for wave {before} to be healthy: {shown}");
    Some(
        ReconcileOutcome::held(
            reasons::WAITING_FOR_WAVE_HEALTH,
            message,
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

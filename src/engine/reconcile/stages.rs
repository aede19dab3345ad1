//! The reconcile stages: stageRender, planRollout, stageGates, stageSync.
//!
//! Spec: reconcile-flow.txt "reconcile" (stages 1–6). Each stage either hands its result to
//! the next or stops the pipeline with a [`ReconcileOutcome`].

use std::collections::{BTreeSet, HashMap};

use kube::ResourceExt;

use super::assemble::LifecycleRollup;
use super::outcome::ReconcileOutcome;
use super::{Context, ProgressEvent, ReconcileState};
use crate::engine::api::{
    Attempt, HookState, LifecycleHookStatus, LifecyclePhaseStatus, LifecycleStatus, ObjectKey,
    Release, ReleaseInventory, ReleaseStatus, RolloutStatus, SyncMode, WaveStatus, failure_stages,
    reasons,
};
use crate::engine::apply::{ApplyError, PruneTarget, waves};
use crate::engine::cluster::{Target, resolve_target};
use crate::engine::explain::count;
use crate::engine::inventory::{InventoryHandle, Member, members};
use crate::engine::objects::ObjectReader;
use crate::engine::render::Object;
use crate::engine::render::render_ref::{object_digest, short};
use crate::engine::render::{RenderContext, RenderError, Rendered, fetch_source, render_fetched};

/// What stageRender hands on.
pub struct RenderStage {
    pub rendered: Rendered,
    pub target: Target,
    /// `lastAttempted` so far: time, source, cluster, mutations, renderRef.
    pub attempt: Attempt,
}

fn render_failure(e: RenderError, attempt: Attempt) -> Box<ReconcileOutcome> {
    let (reason, stage, retry) = (e.reason(), e.stage(), !e.is_unsupported());
    let message = format!("{:#}", anyhow::Error::new(e));
    Box::new(ReconcileOutcome::failed(
        reason, stage, message, attempt, retry,
    ))
}

/// Stage 1, stageRender: fetch (1), cluster (2), values, render, mutations (3–5),
/// renderRef (6), pin (7).
pub async fn stage_render(
    ctx: &Context,
    release: &Release,
    state: &ReconcileState,
) -> Result<RenderStage, Box<ReconcileOutcome>> {
    let mut attempt = Attempt {
        attempted_at: Some(state.now.clone()),
        ..Default::default()
    };
    let reader = ObjectReader::Cluster(ctx.home.client.clone());
    let mut render_ctx = RenderContext {
        reader: &reader,
        coordinator: &ctx.coordinator,
        source_dir: None,
        cluster: None,
    };
    // Step 1: fetch. Errors are transient; "not supported" is not retried.
    let fetched = fetch_source(&render_ctx, release)
        .await
        .map_err(|e| render_failure(e, attempt.clone()))?;
    attempt.resolved_source = Some(fetched.resolved_source.clone());
    // Step 2: the target cluster.
    let target = match resolve_target(&ctx.home, release).await {
        Ok(t) => t,
        Err(e) => {
            let message = format!("{:#}", anyhow::Error::new(e));
            return Err(Box::new(
                ReconcileOutcome::failed(
                    reasons::CLUSTER_NOT_READY,
                    failure_stages::CLUSTER_RESOLUTION,
                    message.clone(),
                    attempt,
                    true,
                )
                .with_error(message),
            ));
        }
    };
    attempt.resolved_cluster = Some(target.resolved.clone());
    // Steps 3–6.
    let info = ctx.cluster_info(&target).await;
    tracing::debug!("target cluster resolved and discovered");
    render_ctx.cluster = info.as_ref();
    let rendered = render_fetched(&render_ctx, release, &fetched)
        .await
        .map_err(|e| render_failure(e, attempt.clone()))?;
    attempt.resolved_mutations = rendered.resolved_mutations.clone();
    attempt.render_ref = Some(rendered.render_ref.clone());
    // Step 7: a pin to another render needs that render from the render store; none is
    // configured yet, so such a pin cannot be applied (no retry: a config change fixes it).
    if let Some(pin) = crate::engine::reconcile::assemble::pin_status(release)
        && pin.render_ref != rendered.render_ref
    {
        return Err(Box::new(ReconcileOutcome::failed(
            reasons::PINNED,
            failure_stages::RENDERING,
            format!(
                "pinned to render {}, but no render store is configured to load it from",
                short(&pin.render_ref)
            ),
            attempt,
            false,
        )));
    }
    ctx.report(ProgressEvent::Rendered {
        render_ref: rendered.render_ref.clone(),
        objects: rendered.objects.len(),
    });
    Ok(RenderStage {
        rendered,
        target,
        attempt,
    })
}

/// What planRollout decided.
pub struct RolloutPlan {
    /// The rollout after at most one transition; `None` keeps (or, without a failure policy,
    /// clears) the previous one.
    pub rollout: Option<RolloutStatus>,
    pub action: RolloutAction,
}

/// What to apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RolloutAction {
    /// Apply the source render. (Re-applying the last healthy render from the render store
    /// joins with the rollout state machine.)
    ApplySource,
}

/// Stage 2, planRollout. Without `failurePolicy` the rollout is cleared (status assembly
/// step 9). The state machine with its deadlines and rollbacks is the progressive-delivery
/// issue's; until then a failure policy keeps the previous rollout and applies the source.
pub fn plan_rollout(
    _release: &Release,
    _status: &ReleaseStatus,
    _render: &RenderStage,
    _state: &ReconcileState,
) -> RolloutPlan {
    RolloutPlan {
        rollout: None,
        action: RolloutAction::ApplySource,
    }
}

/// Stage 4, stageGates: the manual gate, then the cluster-wave gate. Neither applies anything.
pub async fn stage_gates(
    _ctx: &Context,
    release: &Release,
    status: &ReleaseStatus,
    state: &ReconcileState,
    render: &RenderStage,
) -> Option<ReconcileOutcome> {
    // Gate 1: manual mode without a pending /sync.
    if state.mode == SyncMode::Manual
        && state.pending_sync.is_none()
        && state.pending_force.is_none()
    {
        let new = &render.rendered.render_ref;
        let applied = status
            .last_successful
            .as_ref()
            .and_then(|a| a.render_ref.as_deref());
        return Some(if applied == Some(new.as_str()) {
            ReconcileOutcome::held(
                reasons::APPLIED,
                format!(
                    "manual mode: render {} is applied and unchanged",
                    short(new)
                ),
                render.attempt.clone(),
            )
        } else {
            let message = match applied {
                Some(old) => format!(
                    "manual mode: render {} waits for /sync; {} is applied",
                    short(new),
                    short(old)
                ),
                None => format!(
                    "manual mode: render {} waits for /sync; nothing is applied yet",
                    short(new)
                ),
            };
            ReconcileOutcome::held(reasons::WAITING_FOR_SYNC, message, render.attempt.clone())
        });
    }
    // Gate 2: cluster waves (`spec.clusterWave`) hold a Release behind lower waves on the same
    // Cluster; the gate arrives with progressive delivery (clusterWaveGate).
    let _ = release;
    None
}

/// Stage 5, stageSync: dry-run gate, waves with inventory updates, prune, inventory.
///
/// Objects that were applied before exactly as rendered now and still hold every value on
/// the cluster are not sent again (an apply would change nothing); everything else goes
/// through the gate and the waves. A re-sync of an unchanged render therefore costs a few
/// LIST requests instead of two requests per object.
pub async fn stage_sync(
    ctx: &Context,
    release: &Release,
    state: &ReconcileState,
    render: &RenderStage,
    inventory: &InventoryHandle,
) -> ReconcileOutcome {
    let attempt = render.attempt.clone();
    let render_ref = render.rendered.render_ref.clone();
    let objects = &render.rendered.objects;
    let applier = ctx.applier(&render.target);
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

    let previous = match inventory.get().await {
        Ok(inv) => inv,
        Err(e) => {
            return syncing_failed(
                reasons::DEPLOY_FAILED,
                format!("{:#}", anyhow::Error::new(e)),
                true,
            );
        }
    };
    let previous_members: Vec<Member> = previous
        .as_ref()
        .map(|inv| members(inv).into_iter().map(Member::from_entry).collect())
        .unwrap_or_default();
    let applied_digests: HashMap<ObjectKey, String> = previous_members
        .iter()
        .filter_map(|m| m.digest.clone().map(|d| (m.key.clone(), d)))
        .collect();
    let changed = applier.changed(objects, &applied_digests).await;
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

    // Step 1: the dry-run gate (skipped by a forced sync).
    if state.pending_force.is_none() && !to_send.is_empty() {
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
    // Step 2 (persistRender) and step 3 (preSync hooks) arrive with the render store and
    // lifecycle hooks.

    // Step 4: the waves, each followed by a Put of everything applied so far.
    let mut applied: Vec<Member> = Vec::new();
    let mut wave_status: Vec<WaveStatus> = Vec::new();
    let mut last_put: Vec<Member> = previous_members.clone();
    for (wave, wave_objects) in waves::group(objects) {
        // A wave with waves.waitForHealth waits for the previous wave's health here
        // (waveHealthGate, with progressive delivery).
        let sending: Vec<Object> = wave_objects
            .iter()
            .filter(|o| to_send_keys.contains(&o.key()))
            .cloned()
            .collect();
        ctx.report(ProgressEvent::WaveStarted {
            wave,
            objects: sending.len(),
        });
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
                digest: Some(object_digest(object)),
            });
        }
        applied.extend(wave_members);
        let next = union(&previous_members, &applied);
        let put = if same_members(&next, &last_put) {
            Ok(())
        } else {
            inventory.put(&next).await.map(|_| ())
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
    }

    // Step 5: prune what left the render, never anything outside this inventory.
    let applied_keys: BTreeSet<&ObjectKey> = applied.iter().map(|m| &m.key).collect();
    let targets: Vec<PruneTarget> = previous_members
        .iter()
        .filter(|m| !applied_keys.contains(&m.key))
        .map(|m| PruneTarget {
            key: m.key.clone(),
            wave: m.wave,
        })
        .collect();
    let (final_members, prune_failure) = if targets.is_empty() {
        (applied.clone(), None)
    } else {
        match applier.prune(&targets).await {
            Ok(report) => {
                ctx.report(ProgressEvent::Pruned {
                    objects: report.deleted.len(),
                });
                let failed: BTreeSet<&ObjectKey> = report.failures.iter().map(|r| &r.key).collect();
                let mut keep = applied.clone();
                keep.extend(
                    previous_members
                        .iter()
                        .filter(|m| failed.contains(&m.key))
                        .cloned(),
                );
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
                (keep, failure)
            }
            Err(e) => {
                let mut keep = applied.clone();
                keep.extend(
                    targets
                        .iter()
                        .filter_map(|t| previous_members.iter().find(|m| m.key == t.key))
                        .cloned(),
                );
                (keep, Some(format!("prune: {:#}", anyhow::Error::new(e))))
            }
        }
    };
    tracing::debug!(
        elapsed_ms = started.elapsed().as_millis() as u64,
        "waves and prune done"
    );

    // Step 6: the inventory is exactly what is on the cluster now.
    let written = if same_members(&final_members, &previous_members) {
        previous.clone().unwrap_or_default()
    } else if same_members(&final_members, &last_put) {
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
        match inventory.put(&final_members).await {
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
    mark_healthy_waves(&mut wave_status, &written, &render_ref);
    if let Some(message) = prune_failure {
        return syncing_failed(reasons::PRUNE_FAILED, message, true).with_waves(wave_status);
    }
    // Steps 7–9 (postSync hooks, history, GC) arrive with lifecycle hooks and the store.
    let _ = release;
    let pruned = targets.len();
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
    ReconcileOutcome::applied(attempt, message, wave_status)
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

/// Stage 6: arm the syncFailed hooks after a Syncing failure (with lifecycle hooks).
pub async fn run_sync_failed_hooks(_ctx: &Context, release: &Release, _render: &RenderStage) {
    if release
        .spec
        .lifecycle
        .as_ref()
        .is_some_and(|l| !l.hooks.is_empty())
    {
        tracing::debug!(release = %release.name_any(), "syncFailed hooks are not run yet");
    }
}

/// Status assembly step 10, `applyLifecycleRollup`: from the hook entries of the
/// ReleaseInventory (read from the API server), `status.lifecycle` and `LifecycleSucceeded`.
/// `None` when the Release has no hooks.
pub async fn apply_lifecycle_rollup(
    ctx: &Context,
    release: &Release,
) -> Result<Option<LifecycleRollup>, String> {
    let Some(lifecycle) = release
        .spec
        .lifecycle
        .as_ref()
        .filter(|l| !l.hooks.is_empty())
    else {
        return Ok(None);
    };
    let inventory = InventoryHandle::for_release(ctx.home.client.clone(), release)
        .get()
        .await
        .map_err(|e| format!("{:#}", anyhow::Error::new(e)))?;
    Ok(Some(lifecycle_rollup(lifecycle, inventory.as_ref())))
}

/// The pure part of the rollup.
pub fn lifecycle_rollup(
    lifecycle: &crate::engine::api::Lifecycle,
    inventory: Option<&ReleaseInventory>,
) -> LifecycleRollup {
    let mut phases: Vec<LifecyclePhaseStatus> = Vec::new();
    let mut failed = Vec::new();
    let mut running = Vec::new();
    for hook in &lifecycle.hooks {
        let entry = inventory.and_then(|inv| {
            inv.spec
                .hooks
                .iter()
                .find(|h| h.name == hook.name && h.phase == hook.phase)
        });
        let state = entry.and_then(|e| e.state);
        match state {
            Some(HookState::Failed) => {
                failed.push(format!("{} ({})", hook.name, hook.phase.as_str()))
            }
            Some(HookState::Running) => {
                running.push(format!("{} ({})", hook.name, hook.phase.as_str()))
            }
            _ => {}
        }
        let hook_status = LifecycleHookStatus {
            name: hook.name.clone(),
            state: state.map(|s| s.as_str().to_string()),
            message: entry.and_then(|e| e.message.clone()),
        };
        match phases.iter_mut().find(|p| p.phase == hook.phase) {
            Some(p) => p.hooks.push(hook_status),
            None => phases.push(LifecyclePhaseStatus {
                phase: hook.phase,
                hooks: vec![hook_status],
                finished: false,
            }),
        }
    }
    for phase in &mut phases {
        phase.finished = phase
            .hooks
            .iter()
            .all(|h| matches!(h.state.as_deref(), Some("Succeeded") | Some("Failed")));
    }
    phases.sort_by_key(|p| p.phase);
    let (status, reason, message) = if !failed.is_empty() {
        (
            "False",
            reasons::lifecycle::FAILED,
            format!("failed: {}", failed.join(", ")),
        )
    } else if !running.is_empty() {
        (
            "Unknown",
            reasons::lifecycle::RUNNING,
            format!("running: {}", running.join(", ")),
        )
    } else {
        (
            "True",
            reasons::lifecycle::SUCCEEDED,
            "no hook failed".to_string(),
        )
    };
    LifecycleRollup {
        lifecycle: LifecycleStatus { phases },
        status,
        reason,
        message,
    }
}

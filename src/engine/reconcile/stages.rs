//! The reconcile stages: stageRender, planRollout, stageGates, stageSync.
//!
//! Spec: reconcile-flow.txt "reconcile" (stages 1–6). Each stage either hands its result to
//! the next or stops the pipeline with a [`ReconcileOutcome`].

use super::assemble::LifecycleRollup;
use super::outcome::ReconcileOutcome;
use super::{Context, ProgressEvent, ReconcileState};
use crate::engine::api::{
    Attempt, HookState, LifecycleHookStatus, LifecyclePhaseStatus, LifecycleStatus, Release,
    ReleaseInventory, failure_stages, reasons,
};
use crate::engine::cluster::Target;
use crate::engine::inventory::InventoryHandle;
use crate::engine::render::render_ref::short;
use crate::engine::render::{
    RenderContext, RenderError, Rendered, content_needs_cluster, fetch_source, finish_render,
    render_content,
};
use crate::engine::store::ReleaseId;

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
    // Never a fallback to convoy's own identity: a Release that should act as its
    // ServiceAccount and cannot stops here.
    let reader = ctx.reader_for(release).map_err(|e| {
        Box::new(ReconcileOutcome::failed(
            reasons::CLUSTER_NOT_READY,
            failure_stages::CLUSTER_RESOLUTION,
            format!("{:#}", anyhow::Error::new(e)),
            attempt.clone(),
            true,
        ))
    })?;
    let mut render_ctx = RenderContext {
        reader: &reader,
        coordinator: &ctx.coordinator,
        source_dir: None,
        cluster: None,
        timeout: ctx.render_timeout,
    };
    // Steps 1 and 2 at once: fetching the source (and rendering content that does not ask
    // the cluster) while the target cluster is resolved and discovered. Failures are still
    // reported in the spec's order: fetch, cluster, render.
    let fetch_and_render = async {
        let fetched = fetch_source(&render_ctx, release).await?;
        let content = if content_needs_cluster(release) {
            None
        } else {
            Some(render_content(&render_ctx, release, &fetched).await)
        };
        Ok::<_, RenderError>((fetched, content))
    };
    let target_and_info = async {
        let target = ctx.resolve_target(release).await?;
        let info = ctx.cluster_info(&target).await;
        tracing::debug!("target cluster resolved and discovered");
        Ok::<_, crate::engine::cluster::ClusterError>((target, info))
    };
    // A failed fetch ends the stage at once; the cluster's answer is then not awaited.
    let (fetched, target) = tokio::try_join!(fetch_and_render, async { Ok(target_and_info.await) })
        // Step 1: fetch. Errors are transient; "not supported" is not retried.
        .map_err(|e| render_failure(e, attempt.clone()))?;
    let (fetched, content) = fetched;
    attempt.resolved_source = Some(fetched.resolved_source.clone());
    // Step 2: the target cluster.
    let (target, info) = match target {
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
    render_ctx.cluster = info.as_ref();
    let objects = match content {
        Some(content) => content,
        None => render_content(&render_ctx, release, &fetched).await,
    };
    let rendered = objects
        .and_then(|objects| finish_render(&render_ctx, release, objects))
        .map_err(|e| render_failure(e, attempt.clone()))?;
    attempt.resolved_mutations = rendered.resolved_mutations.clone();
    attempt.render_ref = Some(rendered.render_ref.clone());
    // Step 7: resolvePinnedRender. The pinned render replaces the source render, and the
    // attempt records the render that will run.
    let mut rendered = rendered;
    if let Some(pin) = crate::engine::reconcile::assemble::pin_status(release)
        && pin.render_ref != rendered.render_ref
    {
        let pinned = |reason, message: String| {
            Box::new(ReconcileOutcome::failed(
                reason,
                failure_stages::RENDERING,
                message,
                attempt.clone(),
                false,
            ))
        };
        if !crate::engine::render::render_ref::is_render_ref(&pin.render_ref) {
            return Err(pinned(
                reasons::PINNED,
                format!(
                    "the pin annotation {} holds {:?}, which is not a renderRef (64 lowercase hex characters; see convoy history)",
                    crate::engine::api::annotations::PIN,
                    pin.render_ref
                ),
            ));
        }
        let Some(store) = &ctx.store else {
            return Err(pinned(
                reasons::PINNED,
                format!(
                    "pinned to render {}, but no render store is configured to load it from",
                    short(&pin.render_ref)
                ),
            ));
        };
        match store
            .get_render(&ReleaseId::of(release), &pin.render_ref)
            .await
        {
            Ok(Some(objects)) => {
                rendered.objects = objects;
                rendered.render_ref = pin.render_ref.clone();
                attempt.render_ref = Some(pin.render_ref.clone());
                // What runs came from the revision the pinned render was made from, not from
                // the one just fetched: status and `convoy get` show that one (unknown when
                // the history no longer has it).
                let made_from = store
                    .history(&ReleaseId::of(release))
                    .await
                    .ok()
                    .and_then(|h| {
                        h.into_iter()
                            .rev()
                            .find(|e| e.render_ref == pin.render_ref)
                            .and_then(|e| e.source_revision)
                    });
                if let Some(source) = attempt.resolved_source.as_mut() {
                    source.revision = made_from;
                }
            }
            Ok(None) => {
                return Err(pinned(
                    reasons::PINNED,
                    format!(
                        "pinned to render {}, which is not in the render store (see convoy history)",
                        short(&pin.render_ref)
                    ),
                ));
            }
            Err(e) => {
                return Err(pinned(
                    reasons::DEPLOY_FAILED,
                    format!(
                        "cannot load pinned render {}: {:#}",
                        short(&pin.render_ref),
                        anyhow::Error::new(e)
                    ),
                ));
            }
        }
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

/// Status assembly step 10, `applyLifecycleRollup`: from the hook entries of the
/// ReleaseInventory (read from the API server), `status.lifecycle` and `LifecycleSucceeded`.
/// `None` when the Release has no hooks.
pub async fn apply_lifecycle_rollup(
    ctx: &Context,
    release: &Release,
    render_ref: Option<&str>,
) -> Result<Option<LifecycleRollup>, String> {
    let inventory = InventoryHandle::for_release(ctx.home.client.clone(), release)
        .get()
        .await
        .map_err(|e| format!("{:#}", anyhow::Error::new(e)))?;
    let hooks = rollup_hooks(release, inventory.as_ref(), render_ref);
    if hooks.is_empty() {
        return Ok(None);
    }
    Ok(Some(lifecycle_rollup(&hooks, inventory.as_ref())))
}

/// The hooks the rollup speaks of: the spec's, then the render's content hooks as the
/// inventory records them (`Kind/namespace/name`).
///
/// A content hook of a sync phase recorded for an earlier render has not run for this one
/// yet (its next arming replaces the old instance first): it reads Running. Such hooks of
/// the other phases (syncFailed, the delete phases) are left out until they run again.
fn rollup_hooks(
    release: &Release,
    inventory: Option<&ReleaseInventory>,
    render_ref: Option<&str>,
) -> Vec<RollupHook> {
    use crate::engine::api::HookPhase;
    let mut hooks: Vec<RollupHook> = release
        .spec
        .lifecycle
        .iter()
        .flat_map(|l| {
            l.hooks.iter().map(|h| RollupHook {
                name: h.name.clone(),
                phase: h.phase,
                not_yet_armed: false,
            })
        })
        .collect();
    for entry in inventory
        .map(|i| i.spec.hooks.as_slice())
        .unwrap_or_default()
    {
        if crate::engine::content_hooks::parse_id(&entry.name).is_none()
            || hooks
                .iter()
                .any(|h| h.name == entry.name && h.phase == entry.phase)
        {
            continue;
        }
        let stale = render_ref.is_some() && entry.render_ref.as_deref() != render_ref;
        let sync_phase = matches!(
            entry.phase,
            HookPhase::PreSync | HookPhase::Sync | HookPhase::PostSync
        );
        if stale && !sync_phase {
            continue;
        }
        hooks.push(RollupHook {
            name: entry.name.clone(),
            phase: entry.phase,
            not_yet_armed: stale,
        });
    }
    hooks
}

/// A hook the rollup speaks of.
pub struct RollupHook {
    pub name: String,
    pub phase: crate::engine::api::HookPhase,
    /// A content hook recorded for an earlier render: it has yet to run for this one.
    pub not_yet_armed: bool,
}

/// The pure part of the rollup.
pub fn lifecycle_rollup(
    hooks: &[RollupHook],
    inventory: Option<&ReleaseInventory>,
) -> LifecycleRollup {
    let mut phases: Vec<LifecyclePhaseStatus> = Vec::new();
    let mut failed = Vec::new();
    let mut running = Vec::new();
    for hook in hooks {
        let (hook_name, hook_phase) = (&hook.name, &hook.phase);
        let entry = inventory.and_then(|inv| {
            inv.spec
                .hooks
                .iter()
                .find(|h| h.name == *hook_name && h.phase == *hook_phase)
        });
        // A re-armed hook's old state does not count (hooks::effective_state).
        let state = if hook.not_yet_armed {
            Some(HookState::Running)
        } else {
            entry
                .filter(|e| e.workload_name.is_some())
                .map(crate::engine::hooks::effective_state)
        };
        let stale = entry.is_some_and(|e| e.state != state);
        match state {
            Some(HookState::Failed) => {
                failed.push(format!("{hook_name} ({})", hook_phase.as_str()))
            }
            Some(HookState::Running) => {
                running.push(format!("{hook_name} ({})", hook_phase.as_str()))
            }
            _ => {}
        }
        let hook_status = LifecycleHookStatus {
            name: hook_name.clone(),
            state: state.map(|s| s.as_str().to_string()),
            message: entry.filter(|_| !stale).and_then(|e| e.message.clone()),
        };
        match phases.iter_mut().find(|p| p.phase == *hook_phase) {
            Some(p) => p.hooks.push(hook_status),
            None => phases.push(LifecyclePhaseStatus {
                phase: *hook_phase,
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

//! The reconcile stages: stageRender, planRollout, stageGates, stageSync.
//!
//! Spec: reconcile-flow.txt "reconcile" (stages 1–6). Each stage either hands its result to
//! the next or stops the pipeline with a [`ReconcileOutcome`].

use super::ReconcileState;
use super::assemble::LifecycleRollup;
use super::outcome::ReconcileOutcome;
use crate::engine::api::{
    Attempt, ConditionStatus, FailureStage, HookState, LifecycleHookStatus, LifecyclePhaseStatus,
    LifecycleReason, LifecycleStatus, Reason, Release, ReleaseInventory,
};
use crate::engine::cluster::Target;
use crate::engine::inventory::InventoryHandle;
use crate::engine::render::render_ref::short;
use crate::engine::render::{
    ClusterInfo, Fetched, Object, RenderContext, RenderError, Rendered, content_needs_cluster,
    fetch_source, finish_render, render_content,
};
use crate::engine::runtime::{Context, ProgressEvent};
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
    let message = crate::engine::error::chain(&e);
    let mut outcome = ReconcileOutcome::failed(reason, stage, message, attempt, retry);
    outcome.fetching = e.fetching().cloned();
    Box::new(outcome)
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
    let reader = ctx
        .reader_for(release)
        .map_err(|e| cluster_failure(crate::engine::error::chain(&e), &attempt, false))?;
    let mut render_ctx = RenderContext {
        reader: &reader,
        coordinator: &ctx.coordinator,
        source_dir: None,
        cluster: None,
        timeout: ctx.render_timeout,
        reuse_fetches: ctx.reuse_fetches,
        schema_refs: &ctx.tenancy.values_schema_refs,
        caller: state.caller,
    };
    // Step 1: fetch. Errors are transient; "not supported" is not retried.
    let (fetched, content, target) = fetch_and_resolve(ctx, &render_ctx, release)
        .await
        .map_err(|e| render_failure(e, attempt.clone()))?;
    attempt.resolved_source = Some(fetched.resolved_source.clone());
    // Step 2: the target cluster.
    let (target, info) =
        target.map_err(|e| cluster_failure(crate::engine::error::chain(&e), &attempt, true))?;
    attempt.resolved_cluster = Some(target.resolved.clone());
    // Steps 3–6.
    render_ctx.cluster = info.as_ref();
    let objects = match content {
        Some(content) => content,
        None => render_content(&render_ctx, release, &fetched).await,
    };
    let mut rendered = objects
        .and_then(|objects| finish_render(&render_ctx, release, objects))
        .map_err(|e| render_failure(e, attempt.clone()))?;
    attempt.resolved_mutations = rendered.resolved_mutations.clone();
    attempt.render_ref = Some(rendered.render_ref.clone());
    // Step 7: resolvePinnedRender.
    resolve_pinned_render(ctx, release, &mut rendered, &mut attempt).await?;
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

/// The target cluster or the Release's identity cannot be used: `ClusterNotReady`, retried
/// (`with_error`: also returned to the work queue).
fn cluster_failure(message: String, attempt: &Attempt, with_error: bool) -> Box<ReconcileOutcome> {
    let outcome = ReconcileOutcome::failed(
        Reason::ClusterNotReady,
        FailureStage::ClusterResolution,
        message.clone(),
        attempt.clone(),
        true,
    );
    Box::new(if with_error {
        outcome.with_error(message)
    } else {
        outcome
    })
}

/// The target cluster, its discovery (`None` when it fails), or why it cannot be resolved.
type Resolved = Result<(Target, Option<ClusterInfo>), crate::engine::cluster::ClusterError>;

/// Steps 1 and 2 at once: fetching the source (and rendering content that does not ask the
/// cluster) while the target cluster is resolved and discovered. Failures are still reported
/// in the spec's order: fetch, cluster, render; a failed fetch ends the stage at once and the
/// cluster's answer is then not awaited.
async fn fetch_and_resolve(
    ctx: &Context,
    render_ctx: &RenderContext<'_>,
    release: &Release,
) -> Result<(Fetched, Option<Result<Vec<Object>, RenderError>>, Resolved), RenderError> {
    let fetch_and_render = async {
        let fetched = fetch_source(render_ctx, release).await?;
        let content = if content_needs_cluster(release) {
            None
        } else {
            Some(render_content(render_ctx, release, &fetched).await)
        };
        Ok::<_, RenderError>((fetched, content))
    };
    let target_and_info = async {
        let target = ctx.resolve_target(release).await?;
        let info = ctx.cluster_info(&target).await;
        tracing::debug!("target cluster resolved and discovered");
        Ok((target, info))
    };
    let ((fetched, content), target) =
        tokio::try_join!(fetch_and_render, async { Ok(target_and_info.await) })?;
    Ok((fetched, content, target))
}

/// Step 7, `resolvePinnedRender`: the pinned render (from the store) replaces the source
/// render, and the attempt records the render that will run.
async fn resolve_pinned_render(
    ctx: &Context,
    release: &Release,
    rendered: &mut Rendered,
    attempt: &mut Attempt,
) -> Result<(), Box<ReconcileOutcome>> {
    let Some(pin) = crate::engine::reconcile::assemble::pin_status(release) else {
        return Ok(());
    };
    if pin.render_ref == rendered.render_ref {
        return Ok(());
    }
    let pinned = |reason, message: String| {
        let stage = FailureStage::Rendering;
        Box::new(ReconcileOutcome::failed(
            reason,
            stage,
            message,
            attempt.clone(),
            false,
        ))
    };
    let short_ref = short(&pin.render_ref);
    if !crate::engine::render::render_ref::is_render_ref(&pin.render_ref) {
        return Err(pinned(
            Reason::Pinned,
            format!(
                "the pin annotation {} holds {:?}, which is not a renderRef (64 lowercase hex characters; see `convoy history {} -n {}`)",
                crate::engine::api::annotations::PIN,
                pin.render_ref,
                release.metadata.name.as_deref().unwrap_or_default(),
                release.metadata.namespace.as_deref().unwrap_or_default()
            ),
        ));
    }
    let Some(store) = &ctx.store else {
        let message = format!(
            "pinned to render {short_ref}, but no render store is configured to load it from"
        );
        return Err(pinned(Reason::Pinned, message));
    };
    let id = ReleaseId::of(release);
    let objects = match store.get_render(&id, &pin.render_ref).await {
        Ok(Some(objects)) => objects,
        Ok(None) => {
            let message = format!(
                "pinned to render {short_ref}, which is not in the render store (see `convoy history {} -n {}`)",
                release.metadata.name.as_deref().unwrap_or_default(),
                release.metadata.namespace.as_deref().unwrap_or_default()
            );
            return Err(pinned(Reason::Pinned, message));
        }
        Err(e) => {
            let message = format!(
                "cannot load pinned render {short_ref}: {}",
                crate::engine::error::chain(&e)
            );
            return Err(pinned(Reason::DeployFailed, message));
        }
    };
    // What runs came from the revision the pinned render was made from, not from the one just
    // fetched: status and `convoy get` show that one (unknown when the history no longer has
    // it).
    let made_from = store.history(&id).await.ok().and_then(|h| {
        h.into_iter()
            .rev()
            .find(|e| e.render_ref == pin.render_ref)
            .and_then(|e| e.source_revision)
    });
    rendered.objects = objects;
    rendered.render_ref = pin.render_ref.clone();
    attempt.render_ref = Some(pin.render_ref.clone());
    if let Some(source) = attempt.resolved_source.as_mut() {
        source.revision = made_from;
    }
    Ok(())
}

/// Status assembly step 10, `applyLifecycleRollup`: from the hook entries of the
/// ReleaseInventory (read from the API server), `status.lifecycle` and `LifecycleSucceeded`.
/// `None` when the Release has no hooks: no spec hooks, and the attempt saw an inventory
/// without hook entries (only the controller adds them, so there are none to read: a steady
/// pass saves the read).
pub async fn apply_lifecycle_rollup(
    ctx: &Context,
    release: &Release,
    outcome: &ReconcileOutcome,
) -> Result<Option<LifecycleRollup>, crate::engine::inventory::InventoryError> {
    let spec_hooks = release
        .spec
        .lifecycle
        .as_ref()
        .is_some_and(|l| !l.hooks.is_empty());
    if !spec_hooks && outcome.inventory_without_hooks {
        return Ok(None);
    }
    let render_ref = outcome.attempt.render_ref.as_deref();
    let inventory = InventoryHandle::for_controller(ctx, release).get().await?;
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
        if !crate::engine::content_hooks::is_content_id(&entry.name)
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
    let (mut failed, mut running) = (Vec::new(), Vec::new());
    for hook in hooks {
        let hook_status = rollup_hook_status(hook, inventory);
        let named = || format!("{} ({})", hook.name, hook.phase.as_str());
        match hook_status.state {
            Some(HookState::Failed) => failed.push(named()),
            Some(HookState::Running) => running.push(named()),
            _ => {}
        }
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
            .all(|h| h.state.is_some_and(HookState::is_terminal));
    }
    phases.sort_by_key(|p| p.phase);
    let (status, reason, message) = if !failed.is_empty() {
        let message = format!("failed: {}", failed.join(", "));
        (ConditionStatus::False, LifecycleReason::Failed, message)
    } else if !running.is_empty() {
        let message = format!("running: {}", running.join(", "));
        (ConditionStatus::Unknown, LifecycleReason::Running, message)
    } else {
        let message = "no hook failed".to_string();
        (ConditionStatus::True, LifecycleReason::Succeeded, message)
    };
    LifecycleRollup {
        lifecycle: LifecycleStatus { phases },
        status,
        reason,
        message,
    }
}

/// One hook's line in `status.lifecycle`: its state from its inventory entry (a re-armed
/// hook's old state does not count: hooks::effective_state), and the entry's message while it
/// describes that state.
fn rollup_hook_status(
    hook: &RollupHook,
    inventory: Option<&ReleaseInventory>,
) -> LifecycleHookStatus {
    let entry = inventory.and_then(|inv| {
        inv.spec
            .hooks
            .iter()
            .find(|h| h.name == hook.name && h.phase == hook.phase)
    });
    let state = if hook.not_yet_armed {
        Some(HookState::Running)
    } else {
        entry
            .filter(|e| e.workload_name.is_some())
            .map(crate::engine::hooks::effective_state)
    };
    let stale = entry.is_some_and(|e| e.state != state);
    LifecycleHookStatus {
        name: hook.name.clone(),
        state,
        message: entry.filter(|_| !stale).and_then(|e| e.message.clone()),
    }
}

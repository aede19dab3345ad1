//! `finalize`: what happens when a Release is deleted.
//!
//! Spec: reconcile-flow.txt "finalize". Prune the inventoried objects (unless
//! `deletionPolicy.keepWorkloads`), delete the ReleaseInventory, clear the finalizer. A Cluster
//! that is gone (404) skips the prune; an unreachable one (or one whose kubeconfig Secret is
//! missing or unusable) too, unless `blockOnClusterUnreachable` makes the deletion wait with an
//! error instead. A failed read of the Cluster or its Secret is always retried: a transient
//! error must not orphan the workloads.

use kube::{Api, ResourceExt};

use super::hook_phase::{HookRun, PhaseOutcome, run_hook_phase};
use super::{Context, HandlerError, finalizer_update};
use crate::engine::api::{FINALIZER, HookPhase, Release};
use crate::engine::apply::PruneTarget;
use crate::engine::cluster::ClusterError;
use crate::engine::inventory::{InventoryHandle, members, pending_members};
use crate::engine::ownership;
use crate::engine::runtime::Requeue;

/// How often a deletion waiting for a delete hook is looked at again.
pub const DELETE_HOOK_RECHECK: std::time::Duration = std::time::Duration::from_secs(10);

/// Finalize `release`; returns when to look again (hooks still running) or `Never` when done.
pub async fn finalize(ctx: &Context, release: &Release) -> Result<Requeue, HandlerError> {
    if !release.finalizers().iter().any(|f| f == FINALIZER) {
        return Ok(Requeue::Never);
    }
    let name = format!(
        "{}/{}",
        release.namespace().unwrap_or_default(),
        release.name_any()
    );
    let fail = |message: String| HandlerError::Finalize {
        release: name.clone(),
        message,
    };
    let keep = release
        .spec
        .deletion_policy
        .as_ref()
        .is_some_and(|p| p.keep_workloads);
    let block = release
        .spec
        .deletion_policy
        .as_ref()
        .is_some_and(|p| p.block_on_cluster_unreachable);
    let inventory = InventoryHandle::for_release(ctx.home.client.clone(), release);

    // The delete hooks are armed for the render that runs (one arming per render, as ever).
    let render_ref = release
        .status
        .as_ref()
        .and_then(|s| s.last_successful.as_ref())
        .and_then(|a| a.render_ref.clone())
        .unwrap_or_else(|| "none".to_string());
    // Its content hooks (a chart's pre-delete Job) come from the render store, when there is
    // one that holds it.
    let content = running_render_hooks(ctx, release, &render_ref).await;
    // Step 1: clusterForFinalize, only when something must run there (a prune or a delete
    // hook).
    let delete_hooks = release.spec.lifecycle.as_ref().is_some_and(|l| {
        l.hooks
            .iter()
            .any(|h| matches!(h.phase, HookPhase::PreDelete | HookPhase::PostDelete))
    }) || content
        .iter()
        .any(|h| matches!(h.phase, HookPhase::PreDelete | HookPhase::PostDelete));
    let target = if keep && !delete_hooks {
        None
    } else {
        match ctx.resolve_target(release).await {
            Ok(t) => Some(t),
            // A Cluster that is gone: nothing to prune through.
            Err(e @ ClusterError::NotFound { .. }) => {
                tracing::warn!(release = %name, "deleting without pruning or delete hooks: {}", crate::engine::error::chain(&e));
                None
            }
            // Reading the Cluster or its Secret failed on convoy's own cluster: a transient
            // error, never a reason to orphan the workloads. Retried.
            Err(e @ ClusterError::Read { .. }) => {
                return Err(fail(format!(
                    "cannot resolve the cluster to prune on (retrying): {}",
                    crate::engine::error::chain(&e)
                )));
            }
            // Unreachable, or its kubeconfig Secret or key missing or unusable: the spec's
            // unreachable rule.
            Err(e) if block => {
                return Err(fail(format!(
                    "the cluster is unreachable and deletionPolicy.blockOnClusterUnreachable is set: {}",
                    crate::engine::error::chain(&e)
                )));
            }
            Err(e) => {
                tracing::warn!(release = %name, "deleting without pruning or delete hooks (the cluster is unreachable; deletionPolicy.blockOnClusterUnreachable would wait): {}", crate::engine::error::chain(&e));
                None
            }
        }
    };
    // Step 2: preDelete hooks. Running or failed: look again in 10 s (a failed preDelete
    // hook holds the deletion until it is fixed or set to `onFailure: Continue`).
    let applier = target.as_ref().map(|t| ctx.applier(t));
    if let (Some(target), Some(applier)) = (&target, &applier) {
        let hook_run = HookRun {
            release,
            target,
            applier,
            inventory: &inventory,
            render_ref: &render_ref,
            content: &content,
        };
        match run_hook_phase(&hook_run, HookPhase::PreDelete, None)
            .await
            .map_err(fail)?
        {
            PhaseOutcome::Done => {}
            PhaseOutcome::Running(hooks) => {
                tracing::info!(release = %name, "waiting for preDelete hooks: {}", hooks.join(", "));
                return Ok(Requeue::After(DELETE_HOOK_RECHECK));
            }
            PhaseOutcome::Failed { hook, message } => {
                tracing::warn!(release = %name, hook = %hook, "preDelete hook failed, deletion waits: {message}");
                return Ok(Requeue::After(DELETE_HOOK_RECHECK));
            }
        }
    }
    // Step 3: prune the inventoried objects (unless deletionPolicy.keepWorkloads).
    if let Some(target) = target.as_ref().filter(|_| !keep) {
        let current = inventory
            .get()
            .await
            .map_err(|e| fail(crate::engine::error::chain(&e)))?;
        if let Some(current) = current {
            // pruneRefs: the members, and what a stopped sync was about to apply.
            let mut targets: Vec<PruneTarget> = members(&current)
                .into_iter()
                .map(|e| PruneTarget {
                    key: e.key(),
                    wave: e.wave.unwrap_or(0),
                })
                .collect();
            for pending in pending_members(&current) {
                if !targets.iter().any(|t| t.key == pending.key) {
                    targets.push(PruneTarget {
                        key: pending.key,
                        wave: 0,
                    });
                }
            }
            let outcome = ownership::prune_refs(&ctx.applier(target), release, &targets)
                .await
                .map_err(|e| fail(crate::engine::error::chain(&e)))?;
            if !outcome.handed_over.is_empty() {
                tracing::info!(release = %name, "not deleted with the Release: {}", ownership::describe_handed_over(&outcome.handed_over));
            }
            let report = outcome.report;
            if !report.failures.is_empty() {
                let shown: Vec<String> = report
                    .failures
                    .iter()
                    .take(3)
                    .map(|r| r.to_string())
                    .collect();
                return Err(fail(format!("cannot prune: {}", shown.join("; "))));
            }
        }
    }
    // Step 4: postDelete hooks. Running: look again in 10 s; failed: only logged.
    if let (Some(target), Some(applier)) = (&target, &applier) {
        let hook_run = HookRun {
            release,
            target,
            applier,
            inventory: &inventory,
            render_ref: &render_ref,
            content: &content,
        };
        match run_hook_phase(&hook_run, HookPhase::PostDelete, None)
            .await
            .map_err(fail)?
        {
            PhaseOutcome::Done => {}
            PhaseOutcome::Running(hooks) => {
                tracing::info!(release = %name, "waiting for postDelete hooks: {}", hooks.join(", "));
                return Ok(Requeue::After(DELETE_HOOK_RECHECK));
            }
            PhaseOutcome::Failed { hook, message } => {
                tracing::warn!(release = %name, hook = %hook, "postDelete hook failed: {message}");
            }
        }
        // Content hook objects go with the Release too.
        if let Ok(Some(current)) = inventory.get().await
            && let Err(e) =
                crate::engine::hooks::delete_content_hook_objects(applier, &current.spec.hooks)
                    .await
        {
            tracing::warn!(release = %name, "cannot delete the hook objects: {e}");
        }
        // The hook workloads go with the Release (a failure only leaves them behind).
        if release.spec.lifecycle.is_some() {
            let namespace = crate::engine::hooks::workload_namespace(release);
            if let Err(e) = crate::engine::hooks::delete_hook_workloads(
                &target.conn.client,
                release,
                &namespace,
            )
            .await
            {
                tracing::warn!(release = %name, "cannot delete the hook workloads: {}", crate::engine::error::chain(&e));
            }
        }
    }
    // Step 5: the inventory goes.
    inventory
        .delete()
        .await
        .map_err(|e| fail(crate::engine::error::chain(&e)))?;
    // Step 6: the render store prefix. A failure leaves blobs behind but must not keep the
    // Release from going, so it is logged.
    if let Some(store) = &ctx.store {
        let id = crate::engine::store::ReleaseId::of(release);
        if let Err(e) = store.delete_prefix(&id).await {
            tracing::warn!(release = %name, "cannot delete the stored renders: {}", crate::engine::error::chain(&e));
        }
    }
    // Step 7: clear the finalizer.
    let api: Api<Release> = Api::namespaced(
        ctx.home.client.clone(),
        &release.namespace().unwrap_or_default(),
    );
    let mut updated = release.clone();
    if let Some(finalizers) = updated.metadata.finalizers.as_mut() {
        finalizers.retain(|f| f != FINALIZER);
    }
    match api
        .replace(&release.name_any(), &finalizer_update(), &updated)
        .await
    {
        Ok(_) => Ok(Requeue::Never),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(Requeue::Never),
        Err(source) => Err(HandlerError::Finalizer {
            release: name,
            source: Box::new(source),
        }),
    }
}

/// The content hooks of the render that runs, from the render store (none without one, or
/// when it does not hold that render).
async fn running_render_hooks(
    ctx: &Context,
    release: &Release,
    render_ref: &str,
) -> Vec<crate::engine::content_hooks::ContentHook> {
    let Some(store) = &ctx.store else {
        return Vec::new();
    };
    match store
        .get_render(&crate::engine::store::ReleaseId::of(release), render_ref)
        .await
    {
        Ok(Some(objects)) => crate::engine::content_hooks::split(&objects).hooks,
        _ => Vec::new(),
    }
}

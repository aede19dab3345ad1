//! `finalize`: what happens when a Release is deleted.
//!
//! Spec: reconcile-flow.txt "finalize". Prune the inventoried objects (unless
//! `deletionPolicy.keepWorkloads`), delete the ReleaseInventory, clear the finalizer. A Cluster
//! that is gone (404) skips the prune; an unreachable one (or one whose kubeconfig Secret is
//! missing or unusable) too, unless `blockOnClusterUnreachable` makes the deletion wait with an
//! error instead. A failed read of the Cluster or its Secret is always retried: a transient
//! error must not orphan the workloads.

use kube::{Api, ResourceExt};

use super::hook_phase::{HookPhaseError, HookRun, PhaseOutcome, run_hook_phase};
use super::{Context, HandlerError, finalizer_update};
use crate::engine::api::{FINALIZER, HookPhase, Release};
use crate::engine::apply::{Applier, ApplyError, PruneTarget, Rejection};
use crate::engine::cluster::{ClusterError, Target};
use crate::engine::content_hooks::ContentHook;
use crate::engine::error::{Categorized, Category, chain};
use crate::engine::explain::first_of;
use crate::engine::inventory::{InventoryError, InventoryHandle, members, pending_members};
use crate::engine::ownership;
use crate::engine::runtime::Requeue;

/// Why a deletion cannot go on yet (it is retried).
#[derive(Debug, thiserror::Error)]
pub enum FinalizeError {
    /// Reading the Cluster or its Secret failed on convoy's own cluster.
    #[error("cannot resolve the cluster to prune on (retrying)")]
    Cluster {
        #[source]
        source: ClusterError,
    },
    #[error("the cluster is unreachable and deletionPolicy.blockOnClusterUnreachable is set")]
    Blocked {
        #[source]
        source: ClusterError,
    },
    #[error(transparent)]
    Hooks(HookPhaseError),
    #[error(transparent)]
    Inventory(InventoryError),
    #[error(transparent)]
    Prune(ApplyError),
    #[error("cannot prune: {}", first_of(.0, 3))]
    PruneFailed(Vec<Rejection>),
}

impl Categorized for FinalizeError {
    fn category(&self) -> Category {
        match self {
            FinalizeError::Cluster { source } | FinalizeError::Blocked { source } => {
                source.category()
            }
            FinalizeError::Hooks(e) => e.category(),
            FinalizeError::Inventory(e) => e.category(),
            FinalizeError::Prune(e) => e.category(),
            FinalizeError::PruneFailed(_) => Category::Failed,
        }
    }
}

/// How often a deletion waiting for a delete hook is looked at again.
pub const DELETE_HOOK_RECHECK: std::time::Duration = std::time::Duration::from_secs(10);

/// One deletion in progress: the Release, its inventory and the render that runs.
struct Deletion<'a> {
    ctx: &'a Context,
    release: &'a Release,
    name: String,
    inventory: InventoryHandle,
    /// The render that runs, whose delete hooks are armed (one arming per render, as ever).
    render_ref: String,
    /// Its content hooks (a chart's pre-delete Job), from the render store.
    content: Vec<ContentHook>,
}

impl Deletion<'_> {
    fn fail(&self, source: FinalizeError) -> HandlerError {
        HandlerError::Finalize {
            release: self.name.clone(),
            source,
        }
    }

    fn hook_run<'b>(&'b self, target: &'b Target, applier: &'b Applier) -> HookRun<'b> {
        HookRun {
            release: self.release,
            target,
            applier,
            inventory: &self.inventory,
            render_ref: &self.render_ref,
            content: &self.content,
        }
    }
}

/// Finalize `release`; returns when to look again (hooks still running) or `Never` when done.
pub async fn finalize(ctx: &Context, release: &Release) -> Result<Requeue, HandlerError> {
    if !release.finalizers().iter().any(|f| f == FINALIZER) {
        return Ok(Requeue::Never);
    }
    let policy = release.spec.deletion_policy.as_ref();
    let keep = policy.is_some_and(|p| p.keep_workloads);
    let render_ref = release
        .status
        .as_ref()
        .and_then(|s| s.last_successful.as_ref())
        .and_then(|a| a.render_ref.clone())
        .unwrap_or_else(|| "none".to_string());
    let deletion = Deletion {
        ctx,
        release,
        name: crate::engine::store::ReleaseId::of(release).to_string(),
        inventory: InventoryHandle::for_controller(ctx, release),
        content: running_render_hooks(ctx, release, &render_ref).await,
        render_ref,
    };
    // Step 1: clusterForFinalize, only when something must run there.
    let needed = !keep || has_delete_hooks(release, &deletion.content);
    let target = if needed {
        cluster_for_finalize(
            &deletion,
            policy.is_some_and(|p| p.block_on_cluster_unreachable),
        )
        .await?
    } else {
        None
    };
    if let Some(target) = &target {
        let applier = ctx.applier(target);
        // Step 2: preDelete hooks.
        if let Some(requeue) =
            delete_hooks(&deletion, target, &applier, HookPhase::PreDelete).await?
        {
            return Ok(requeue);
        }
        // Step 3: pruneRefs, unless deletionPolicy.keepWorkloads.
        if !keep {
            prune_inventoried(&deletion, &applier).await?;
        }
        // Step 4: postDelete hooks, then the hook objects and workloads go with the Release.
        if let Some(requeue) =
            delete_hooks(&deletion, target, &applier, HookPhase::PostDelete).await?
        {
            return Ok(requeue);
        }
        delete_hook_leftovers(&deletion, target, &applier).await;
    }
    // Step 5: the inventory goes.
    deletion
        .inventory
        .delete()
        .await
        .map_err(|e| deletion.fail(FinalizeError::Inventory(e)))?;
    // Step 6: the render store prefix.
    delete_stored_renders(&deletion).await;
    // Step 7: clear the finalizer.
    clear_finalizer(&deletion).await
}

/// Whether the Release has preDelete or postDelete hooks (its own or its render's).
fn has_delete_hooks(release: &Release, content: &[ContentHook]) -> bool {
    let delete = |phase: HookPhase| matches!(phase, HookPhase::PreDelete | HookPhase::PostDelete);
    release
        .spec
        .lifecycle
        .as_ref()
        .is_some_and(|l| l.hooks.iter().any(|h| delete(h.phase)))
        || content.iter().any(|h| delete(h.phase))
}

/// `clusterForFinalize`: the target to prune and run delete hooks on; `None` when the
/// deletion goes on without them (a Cluster that is gone; an unreachable one unless
/// `block`). A failed read of the Cluster or its Secret is retried.
async fn cluster_for_finalize(
    deletion: &Deletion<'_>,
    block: bool,
) -> Result<Option<Target>, HandlerError> {
    let name = &deletion.name;
    match deletion.ctx.resolve_target(deletion.release).await {
        Ok(t) => Ok(Some(t)),
        // A Cluster that is gone: nothing to prune through.
        Err(e @ ClusterError::NotFound { .. }) => {
            tracing::warn!(release = %name, "deleting without pruning or delete hooks: {}", chain(&e));
            Ok(None)
        }
        // Reading the Cluster or its Secret failed on convoy's own cluster: a transient
        // error, never a reason to orphan the workloads.
        Err(source @ ClusterError::Read { .. }) => {
            Err(deletion.fail(FinalizeError::Cluster { source }))
        }
        // Unreachable, or its kubeconfig Secret or key missing or unusable: the spec's
        // unreachable rule.
        Err(source) if block => Err(deletion.fail(FinalizeError::Blocked { source })),
        Err(e) => {
            tracing::warn!(release = %name, "deleting without pruning or delete hooks (the cluster is unreachable; deletionPolicy.blockOnClusterUnreachable would wait): {}", chain(&e));
            Ok(None)
        }
    }
}

/// Steps 2 and 4: a delete phase's hooks. Running: look again in 10 s. A failed preDelete
/// hook holds the deletion too (until it is fixed or set to `onFailure: Continue`); a failed
/// postDelete hook is only logged.
async fn delete_hooks(
    deletion: &Deletion<'_>,
    target: &Target,
    applier: &Applier,
    phase: HookPhase,
) -> Result<Option<Requeue>, HandlerError> {
    let name = &deletion.name;
    let hook_run = deletion.hook_run(target, applier);
    match run_hook_phase(&hook_run, phase, None)
        .await
        .map_err(|e| deletion.fail(FinalizeError::Hooks(e)))?
    {
        PhaseOutcome::Done => Ok(None),
        PhaseOutcome::Running(hooks) => {
            tracing::info!(release = %name, "waiting for {} hooks: {}", phase.as_str(), hooks.join(", "));
            Ok(Some(Requeue::After(DELETE_HOOK_RECHECK)))
        }
        PhaseOutcome::Failed { hook, message } if phase == HookPhase::PreDelete => {
            tracing::warn!(release = %name, hook = %hook, "preDelete hook failed, deletion waits: {message}");
            Ok(Some(Requeue::After(DELETE_HOOK_RECHECK)))
        }
        PhaseOutcome::Failed { hook, message } => {
            tracing::warn!(release = %name, hook = %hook, "{} hook failed: {message}", phase.as_str());
            Ok(None)
        }
    }
}

/// Step 3, `pruneRefs`: delete the inventory's members and what a stopped sync was about to
/// apply (its pending wave) if it did, leaving what another Release took over and whatever
/// does not carry this Release's labels.
async fn prune_inventoried(deletion: &Deletion<'_>, applier: &Applier) -> Result<(), HandlerError> {
    let name = &deletion.name;
    let Some(current) = deletion
        .inventory
        .get()
        .await
        .map_err(|e| deletion.fail(FinalizeError::Inventory(e)))?
    else {
        return Ok(());
    };
    let mut targets: Vec<PruneTarget> = members(&current)
        .into_iter()
        .map(|e| PruneTarget {
            key: e.key(),
            wave: e.wave.unwrap_or(0),
            intent_only: false,
            uid: None,
        })
        .collect();
    for pending in pending_members(&current) {
        if !targets.iter().any(|t| t.key == pending.key) {
            targets.push(PruneTarget {
                key: pending.key,
                wave: 0,
                intent_only: true,
                uid: None,
            });
        }
    }
    let outcome = ownership::prune_refs(
        applier,
        deletion.release,
        &targets,
        crate::engine::keep_policy::Deleting::Release,
    )
    .await
    .map_err(|e| deletion.fail(FinalizeError::Prune(e)))?;
    if !outcome.handed_over.is_empty() {
        tracing::info!(release = %name, "not deleted with the Release: {}", ownership::describe_handed_over(&outcome.handed_over));
    }
    if !outcome.never_applied.is_empty() {
        tracing::info!(release = %name, "not deleted with the Release, never applied by it (a stopped sync was about to): {}", crate::engine::explain::first_of(&outcome.never_applied, 5));
    }
    if !outcome.unlabelled.is_empty() {
        tracing::info!(release = %name, "not deleted with the Release, not carrying its labels: {}", crate::engine::explain::first_of(&outcome.unlabelled, 5));
    }
    if !outcome.kept.is_empty() {
        tracing::info!(release = %name, "not deleted with the Release, kept by their annotations: {}", ownership::describe_kept(&outcome.kept));
    }
    let failures = outcome.report.failures;
    if failures.is_empty() {
        return Ok(());
    }
    Err(deletion.fail(FinalizeError::PruneFailed(failures)))
}

/// After postDelete: the render's hook objects and the hook workloads go with the Release
/// (a failure only leaves them behind, and is logged).
async fn delete_hook_leftovers(deletion: &Deletion<'_>, target: &Target, applier: &Applier) {
    let name = &deletion.name;
    if let Ok(Some(current)) = deletion.inventory.get().await
        && let Err(e) = crate::engine::hooks::delete_content_hook_objects(
            applier,
            deletion.release,
            &current.spec.hooks,
        )
        .await
    {
        tracing::warn!(release = %name, "cannot delete the hook objects: {e}");
    }
    let release = deletion.release;
    if release.spec.lifecycle.is_some() {
        let namespace = crate::engine::hooks::workload_namespace(release);
        if let Err(e) =
            crate::engine::hooks::delete_hook_workloads(&target.conn.client, release, &namespace)
                .await
        {
            tracing::warn!(release = %name, "cannot delete the hook workloads: {}", chain(&e));
        }
    }
}

/// Step 6: the render store prefix. A failure leaves blobs behind but must not keep the
/// Release from going, so it is logged.
async fn delete_stored_renders(deletion: &Deletion<'_>) {
    deletion.ctx.known_stored.forget(deletion.release);
    if let Some(store) = &deletion.ctx.store {
        let id = crate::engine::store::ReleaseId::of(deletion.release);
        if let Err(e) = store.delete_prefix(&id).await {
            tracing::warn!(release = %deletion.name, "cannot delete the stored renders: {}", chain(&e));
        }
    }
}

/// Step 7: the finalizer's Update (a Release already gone is done).
async fn clear_finalizer(deletion: &Deletion<'_>) -> Result<Requeue, HandlerError> {
    let release = deletion.release;
    let api: Api<Release> = Api::namespaced(
        deletion.ctx.home.client.clone(),
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
            release: deletion.name.clone(),
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
) -> Vec<ContentHook> {
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

//! `finalize`: what happens when a Release is deleted.
//!
//! Spec: reconcile-flow.txt "finalize". Prune the inventoried objects (unless
//! `deletionPolicy.keepWorkloads`), delete the ReleaseInventory, clear the finalizer. A missing
//! or unreachable cluster skips the prune; with `blockOnClusterUnreachable` an unreachable one
//! makes the deletion wait with an error instead.

use kube::{Api, ResourceExt};

use super::requeue::Requeue;
use super::{Context, HandlerError};
use crate::engine::api::{FINALIZER, Release};
use crate::engine::apply::PruneTarget;
use crate::engine::cluster::{ClusterError, resolve_target};
use crate::engine::inventory::{InventoryHandle, members};

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

    // Step 1: clusterForFinalize, only when something must run there.
    let target = if keep {
        None
    } else {
        match resolve_target(&ctx.home, release).await {
            Ok(t) => Some(t),
            Err(e @ ClusterError::Connect { .. }) if block => {
                return Err(fail(format!(
                    "the cluster is unreachable and deletionPolicy.blockOnClusterUnreachable is set: {:#}",
                    anyhow::Error::new(e)
                )));
            }
            Err(e) => {
                tracing::warn!(release = %name, "deleting without pruning: {:#}", anyhow::Error::new(e));
                None
            }
        }
    };
    // Step 2: preDelete hooks (with lifecycle hooks).
    // Step 3: prune the inventoried objects.
    if let Some(target) = &target {
        let current = inventory
            .get()
            .await
            .map_err(|e| fail(format!("{:#}", anyhow::Error::new(e))))?;
        if let Some(current) = current {
            let targets: Vec<PruneTarget> = members(&current)
                .into_iter()
                .map(|e| PruneTarget {
                    key: e.key(),
                    wave: e.wave.unwrap_or(0),
                })
                .collect();
            let report = ctx
                .applier(target)
                .prune(&targets)
                .await
                .map_err(|e| fail(format!("{:#}", anyhow::Error::new(e))))?;
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
    // Step 4: postDelete hooks (with lifecycle hooks).
    // Step 5: the inventory goes.
    inventory
        .delete()
        .await
        .map_err(|e| fail(format!("{:#}", anyhow::Error::new(e))))?;
    // Step 6: the render store prefix. A failure leaves blobs behind but must not keep the
    // Release from going, so it is logged.
    if let Some(store) = &ctx.store {
        let id = crate::engine::store::ReleaseId::of(release);
        if let Err(e) = store.delete_prefix(&id).await {
            tracing::warn!(release = %name, "cannot delete the stored renders: {:#}", anyhow::Error::new(e));
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
        .replace(&release.name_any(), &Default::default(), &updated)
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

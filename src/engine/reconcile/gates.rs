//! stageGates: holds before anything is applied (the manual gate, cluster waves).
//!
//! Spec: reconcile-flow.txt stageGates; status-and-conditions.txt (WaitingForSync,
//! WaitingForClusterWave, ClusterWaveFailed); DESIGN.md "Sync waves".

use std::sync::Arc;

use kube::{Api, ResourceExt};

use super::outcome::{ReconcileOutcome, timed_out, waiting_for};
use super::stages::RenderStage;
use super::{Context, ReconcileState};
use crate::engine::api::ConditionStatus;
use crate::engine::api::{FailureStage, Reason, Release, ReleaseStatus, SyncMode, condition_types};
use crate::engine::cluster::cluster_key;
use crate::engine::render::render_ref::short;

/// Stage 4, stageGates: the manual gate, then the cluster-wave gate. Neither applies anything.
pub async fn stage_gates(
    ctx: &Context,
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
        let applied = status.applied_render();
        return Some(if applied == Some(new.as_str()) {
            ReconcileOutcome::held(
                Reason::Applied,
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
            ReconcileOutcome::held(Reason::WaitingForSync, message, render.attempt.clone())
        });
    }
    // Gate 2: cluster waves.
    cluster_wave_gate(ctx, release, status, state, render).await
}

/// `clusterWaveGate`: a Release with `spec.clusterWave` waits while a Release of a lower
/// wave on the same cluster is not Applied or not Healthy (`WaitingForClusterWave`); past
/// `clusterWave.timeout` from the start of the hold, `ClusterWaveFailed`. A Release without
/// `clusterWave` counts as wave 0, as an object without a sync-wave annotation does.
async fn cluster_wave_gate(
    ctx: &Context,
    release: &Release,
    status: &ReleaseStatus,
    state: &ReconcileState,
    render: &RenderStage,
) -> Option<ReconcileOutcome> {
    let own = release.spec.cluster_wave.as_ref()?;
    let others = match releases_on_cluster(ctx, release).await {
        Ok(others) => others,
        Err(e) => {
            return Some(ReconcileOutcome::failed(
                Reason::DeployFailed,
                FailureStage::Syncing,
                format!(
                    "cannot list the Releases of cluster wave {} to gate on: {}",
                    own.wave,
                    crate::engine::error::chain(&e)
                ),
                render.attempt.clone(),
                true,
            ));
        }
    };
    let blocking = blocking_releases(release, own.wave, &others);
    let lowest = blocking.first()?.wave;
    let waiting = waiting_for(
        status,
        &render.rendered.render_ref,
        Reason::WaitingForClusterWave,
        &format!("cluster wave {lowest}"),
        &state.now,
    );
    let shown = crate::engine::explain::first_of(&blocking, 3);
    if let Some(timeout) = timed_out(&waiting, own.timeout.as_ref(), &state.now) {
        return Some(
            ReconcileOutcome::failed(
                Reason::ClusterWaveFailed,
                FailureStage::Syncing,
                format!("lower cluster waves were not ready within {timeout}: {shown}"),
                render.attempt.clone(),
                false,
            )
            .with_waiting(waiting),
        );
    }
    Some(
        ReconcileOutcome::held(
            Reason::WaitingForClusterWave,
            format!("cluster wave {} waits for {shown}", own.wave),
            render.attempt.clone(),
        )
        .with_waiting(waiting),
    )
}

/// The Releases in `release`'s namespace, from the `releaseByCluster` index when the daemon
/// has one, else from a list (`convoy sync`).
async fn releases_on_cluster(
    ctx: &Context,
    release: &Release,
) -> Result<Vec<Arc<Release>>, kube::Error> {
    if let Some(index) = &ctx.releases {
        return Ok(index.on_cluster(&cluster_key(release)));
    }
    let api: Api<Release> = Api::namespaced(
        ctx.home.client.clone(),
        release.metadata.namespace.as_deref().unwrap_or_default(),
    );
    let list = api.list(&Default::default()).await?;
    Ok(list.items.into_iter().map(Arc::new).collect())
}

/// A Release of a lower cluster wave that holds this one, and why.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Blocking {
    wave: i32,
    name: String,
    why: String,
}

impl std::fmt::Display for Blocking {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Blocking { wave, name, why } = self;
        write!(f, "Release {name} (cluster wave {wave}) {why}")
    }
}

/// The other Releases on `release`'s cluster, of a wave below `wave`, that are not ready
/// (not being deleted), lowest wave first.
fn blocking_releases(release: &Release, wave: i32, others: &[Arc<Release>]) -> Vec<Blocking> {
    let key = cluster_key(release);
    let mut blocking: Vec<Blocking> = others
        .iter()
        .filter(|o| o.metadata.uid != release.metadata.uid && cluster_key(o) == key)
        .filter(|o| o.metadata.deletion_timestamp.is_none())
        .filter_map(|o| {
            let other_wave = o.spec.cluster_wave.as_ref().map_or(0, |w| w.wave);
            (other_wave < wave)
                .then(|| not_ready(o))
                .flatten()
                .map(|why| Blocking {
                    wave: other_wave,
                    name: o.name_any(),
                    why,
                })
        })
        .collect();
    blocking.sort();
    blocking
}

/// Why a Release of a lower cluster wave is not ready yet; `None` when it is Applied and
/// Healthy for its current generation.
fn not_ready(release: &Release) -> Option<String> {
    let Some(status) = release.status.as_ref() else {
        return Some("has not been reconciled yet".into());
    };
    let describe = |type_: &str| match status.condition(type_) {
        None => Some(format!("has no {type_} condition yet")),
        Some(c) if c.status == ConditionStatus::True => None,
        Some(c) => Some(format!("is not {type_} ({}: {})", c.reason, c.message)),
    };
    describe(condition_types::APPLIED).or_else(|| describe(condition_types::HEALTHY))
}

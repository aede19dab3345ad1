//! stageGates: holds before anything is applied (the manual gate, cluster waves).
//!
//! Spec: reconcile-flow.txt stageGates; status-and-conditions.txt (WaitingForSync,
//! WaitingForClusterWave, ClusterWaveFailed); DESIGN.md "Sync waves".

use std::sync::Arc;

use kube::{Api, ResourceExt};

use super::outcome::{ReconcileOutcome, timed_out, waiting_for};
use super::stages::RenderStage;
use super::{Context, ReconcileState};
use crate::engine::api::{
    Release, ReleaseStatus, SyncMode, condition_types, failure_stages, reasons,
};
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
    let key = cluster_key(release);
    let others: Vec<Arc<Release>> = match &ctx.releases {
        Some(index) => index.on_cluster(&key),
        None => {
            let api: Api<Release> = Api::namespaced(
                ctx.home.client.clone(),
                release.metadata.namespace.as_deref().unwrap_or_default(),
            );
            match api.list(&Default::default()).await {
                Ok(list) => list.items.into_iter().map(Arc::new).collect(),
                Err(e) => {
                    return Some(ReconcileOutcome::failed(
                        reasons::DEPLOY_FAILED,
                        failure_stages::SYNCING,
                        format!(
                            "cannot list the Releases of cluster wave {} to gate on: {}",
                            own.wave,
                            crate::engine::error::chain(&e)
                        ),
                        render.attempt.clone(),
                        true,
                    ));
                }
            }
        }
    };
    let mut blocking: Vec<(i32, String, String)> = others
        .iter()
        .filter(|o| o.metadata.uid != release.metadata.uid && cluster_key(o) == key)
        .filter(|o| o.metadata.deletion_timestamp.is_none())
        .filter_map(|o| {
            let wave = o.spec.cluster_wave.as_ref().map_or(0, |w| w.wave);
            (wave < own.wave)
                .then(|| not_ready(o))
                .flatten()
                .map(|why| (wave, o.name_any(), why))
        })
        .collect();
    if blocking.is_empty() {
        return None;
    }
    blocking.sort();
    let lowest = blocking[0].0;
    let target = format!("cluster wave {lowest}");
    let render_ref = &render.rendered.render_ref;
    let waiting = waiting_for(
        status,
        render_ref,
        reasons::WAITING_FOR_CLUSTER_WAVE,
        &target,
        &state.now,
    );
    let shown: Vec<String> = blocking
        .iter()
        .take(3)
        .map(|(wave, name, why)| format!("Release {name} (cluster wave {wave}) {why}"))
        .collect();
    let more = if blocking.len() > 3 {
        format!("; and {} more", blocking.len() - 3)
    } else {
        String::new()
    };
    let shown = shown.join("; ");
    if let Some(timeout) = timed_out(&waiting, own.timeout.as_deref(), &state.now) {
        return Some(
            ReconcileOutcome::failed(
                reasons::CLUSTER_WAVE_FAILED,
                failure_stages::SYNCING,
                format!("lower cluster waves were not ready within {timeout}: {shown}{more}"),
                render.attempt.clone(),
                false,
            )
            .with_waiting(waiting),
        );
    }
    Some(
        ReconcileOutcome::held(
            reasons::WAITING_FOR_CLUSTER_WAVE,
            format!("cluster wave {} waits for {shown}{more}", own.wave),
            render.attempt.clone(),
        )
        .with_waiting(waiting),
    )
}

/// Why a Release of a lower cluster wave is not ready yet; `None` when it is Applied and
/// Healthy for its current generation.
fn not_ready(release: &Release) -> Option<String> {
    let Some(status) = release.status.as_ref() else {
        return Some("has not been reconciled yet".into());
    };
    let describe = |type_: &str| match status.condition(type_) {
        None => Some(format!("has no {type_} condition yet")),
        Some(c) if c.status == "True" => None,
        Some(c) => Some(format!("is not {type_} ({}: {})", c.reason, c.message)),
    };
    describe(condition_types::APPLIED).or_else(|| describe(condition_types::HEALTHY))
}

//! `runHookPhase`: arm a phase's lifecycle hooks once per render and read back their state.
//!
//! Spec: reconcile-flow.txt stageSync steps 3 and 7, "syncFailed hooks", finalize steps 2 and
//! 4; status-ownership.txt (PutHooks under `convoy-inventory-hooks`); health-loop.txt "Hook
//! polling" (the health loop polls the workloads and writes their state; the controller only
//! reads it).

use std::collections::BTreeSet;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::engine::api::{Hook, HookFailurePolicy, HookPhase, HookState, Release};
use crate::engine::cluster::Target;
use crate::engine::hooks::{
    arm_workload, collect_old_jobs, effective_state, workload_name, workload_namespace,
};
use crate::engine::inventory::{HookMember, InventoryHandle};

/// Where a phase stands after this call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PhaseOutcome {
    /// No hooks, or every hook finished (failures of `onFailure: Continue` hooks included).
    Done,
    /// Hooks still running (or just armed), by name.
    Running(Vec<String>),
    /// A hook with `onFailure: Fail` failed.
    Failed { hook: String, message: String },
}

/// Arm each hook of `phase` that has no workload for this render (and this hook spec) yet,
/// record the armed set with PutHooks, and report the phase from the states the health loop
/// wrote. A re-sync of the same render finds its workloads and arms nothing; a new render or
/// an edited hook gets a new workload (its createdAt is after the old finishedAt, so the
/// health loop polls it). An error arming or recording is returned as a message.
pub async fn run_hook_phase(
    release: &Release,
    target: &Target,
    inventory: &InventoryHandle,
    phase: HookPhase,
    render_ref: &str,
) -> Result<PhaseOutcome, String> {
    let Some(lifecycle) = release.spec.lifecycle.as_ref() else {
        return Ok(PhaseOutcome::Done);
    };
    let hooks: Vec<&Hook> = lifecycle
        .hooks
        .iter()
        .filter(|h| h.phase == phase)
        .collect();
    if hooks.is_empty() {
        return Ok(PhaseOutcome::Done);
    }
    let fail = |e: String| format!("{} hooks: {e}", phase.as_str());
    let current = inventory
        .get()
        .await
        .map_err(|e| fail(format!("{:#}", anyhow::Error::new(e))))?;
    let entries = current
        .as_ref()
        .map(|i| i.spec.hooks.clone())
        .unwrap_or_default();
    let namespace = workload_namespace(release);
    let client = &target.conn.client;

    let mut running: Vec<String> = Vec::new();
    let mut failed: Option<(String, String)> = None;
    let mut armed: Vec<HookMember> = Vec::new();
    for hook in &hooks {
        let name = workload_name(release, hook, render_ref);
        let entry = entries.iter().find(|e| {
            e.name == hook.name
                && e.phase == phase
                && e.workload_name.as_deref() == Some(name.as_str())
        });
        match entry.map(effective_state) {
            Some(HookState::Running) => running.push(hook.name.clone()),
            Some(HookState::Succeeded) => {}
            Some(HookState::Failed) => {
                let message = entry.and_then(|e| e.message.clone()).unwrap_or_default();
                match hook.on_failure {
                    HookFailurePolicy::Fail if failed.is_none() => {
                        failed = Some((hook.name.clone(), message));
                    }
                    HookFailurePolicy::Fail => {}
                    HookFailurePolicy::Continue => tracing::info!(
                        release = %release.metadata.name.as_deref().unwrap_or_default(),
                        hook = %hook.name,
                        "{} hook failed (onFailure: Continue): {message}",
                        phase.as_str()
                    ),
                }
            }
            None => {
                arm_workload(client, release, hook, &name, &namespace)
                    .await
                    .map_err(|e| {
                        fail(format!(
                            "cannot create {name} in {namespace}: {:#}",
                            anyhow::Error::new(e)
                        ))
                    })?;
                if let Err(e) = collect_old_jobs(client, release, hook, &namespace, &name).await {
                    tracing::warn!(hook = %hook.name, "cannot delete old hook Jobs: {:#}", anyhow::Error::new(e));
                }
                running.push(hook.name.clone());
                let previous = entries
                    .iter()
                    .find(|e| e.name == hook.name && e.phase == phase);
                armed.push(HookMember {
                    name: hook.name.clone(),
                    phase,
                    workload_name: name,
                    created_at: armed_at(previous.and_then(|e| e.finished_at.as_ref())),
                    render_ref: render_ref.to_string(),
                });
            }
        }
    }
    if !armed.is_empty() {
        // PutHooks records exactly the given set: every other armed entry goes along, minus
        // hooks that left the spec.
        let in_spec: BTreeSet<(&str, HookPhase)> = lifecycle
            .hooks
            .iter()
            .map(|h| (h.name.as_str(), h.phase))
            .collect();
        let rearmed: BTreeSet<(String, HookPhase)> =
            armed.iter().map(|m| (m.name.clone(), m.phase)).collect();
        let mut members: Vec<HookMember> = entries
            .iter()
            .filter(|e| in_spec.contains(&(e.name.as_str(), e.phase)))
            .filter(|e| !rearmed.contains(&(e.name.clone(), e.phase)))
            .filter_map(|e| {
                Some(HookMember {
                    name: e.name.clone(),
                    phase: e.phase,
                    workload_name: e.workload_name.clone()?,
                    created_at: e.created_at.clone()?,
                    render_ref: e.render_ref.clone()?,
                })
            })
            .collect();
        members.extend(armed);
        inventory
            .put_hooks(&members)
            .await
            .map_err(|e| fail(format!("{:#}", anyhow::Error::new(e))))?;
    }
    Ok(match (failed, running.is_empty()) {
        (Some((hook, message)), _) => PhaseOutcome::Failed { hook, message },
        (None, false) => PhaseOutcome::Running(running),
        (None, true) => PhaseOutcome::Done,
    })
}

/// `createdAt` of a workload armed just now: the time after it was created, and always after
/// the previous workload's `finishedAt` (timestamps have whole seconds), so the old state never
/// reads as the new workload's and the health loop polls the new one.
fn armed_at(previous_finished: Option<&Time>) -> Time {
    let now = crate::engine::status::now();
    match previous_finished {
        Some(f) if f.0 >= now.0 => Time(f.0 + jiff::SignedDuration::from_secs(1)),
        _ => now,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rearmed_workload_is_created_after_the_old_one_finished() {
        let now = crate::engine::status::now();
        let same_second = armed_at(Some(&now));
        assert!(same_second.0 > now.0);
        let past = Time(now.0 - jiff::SignedDuration::from_secs(60));
        let armed = armed_at(Some(&past));
        assert!(armed.0 >= now.0);
        assert!(armed_at(None).0 >= now.0);
    }
}

//! `runHookPhase`: arm a phase's lifecycle hooks once per render and read back their state.
//!
//! Spec: reconcile-flow.txt stageSync steps 3 and 7, "syncFailed hooks", finalize steps 2 and
//! 4; status-ownership.txt (PutHooks under `convoy-inventory-hooks`); health-loop.txt "Hook
//! polling" (the health loop polls the workloads and writes their state; the controller only
//! reads it).

use std::collections::BTreeSet;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::engine::api::{
    Hook, HookEntry, HookFailurePolicy, HookPhase, HookState, Release, ReleaseId,
};
use crate::engine::apply::Applier;
use crate::engine::cluster::Target;
use crate::engine::content_hooks::{ContentHook, DeletePolicy};
use crate::engine::error::{Categorized, Category};
use crate::engine::hooks::HookError;
use crate::engine::hooks::{
    Armed, arm_content_hook, arm_workload, collect_old_jobs, delete_content_hook, effective_state,
    workload_name, workload_namespace,
};
use crate::engine::inventory::{HookMember, InventoryError, InventoryHandle};

/// Why a phase's hooks could not be armed or recorded (`chain` prints it with its causes).
#[derive(Debug, thiserror::Error)]
pub enum HookPhaseError {
    #[error("{} hooks", phase.as_str())]
    Inventory {
        phase: HookPhase,
        #[source]
        source: InventoryError,
    },
    #[error("{} hooks: cannot create {workload} in {namespace}", phase.as_str())]
    Workload {
        phase: HookPhase,
        workload: String,
        namespace: String,
        #[source]
        source: kube::Error,
    },
    #[error("{} hooks", phase.as_str())]
    Content {
        phase: HookPhase,
        #[source]
        source: HookError,
    },
}

impl Categorized for HookPhaseError {
    fn category(&self) -> Category {
        match self {
            HookPhaseError::Inventory { source, .. } => source.category(),
            HookPhaseError::Workload { source, .. } => source.category(),
            HookPhaseError::Content { source, .. } => source.category(),
        }
    }
}

/// What went wrong in one step of a phase, before the phase is named.
enum StepError {
    Inventory(InventoryError),
    Workload {
        workload: String,
        namespace: String,
        source: kube::Error,
    },
    Content(HookError),
}

impl StepError {
    fn in_phase(self, phase: HookPhase) -> HookPhaseError {
        match self {
            StepError::Inventory(source) => HookPhaseError::Inventory { phase, source },
            StepError::Workload {
                workload,
                namespace,
                source,
            } => HookPhaseError::Workload {
                phase,
                workload,
                namespace,
                source,
            },
            StepError::Content(source) => HookPhaseError::Content { phase, source },
        }
    }
}

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

/// What a phase of hooks runs with: the Release, where, and the render's content hooks.
pub struct HookRun<'a> {
    pub release: &'a Release,
    pub target: &'a Target,
    /// The target's applier (content hooks are any kind; its discovery resolves them).
    pub applier: &'a Applier,
    pub inventory: &'a InventoryHandle,
    pub render_ref: &'a str,
    /// The render's content hooks, every phase (engine::content_hooks).
    pub content: &'a [ContentHook],
}

/// One hook of a phase: from `spec.lifecycle.hooks`, or carried by the render.
#[derive(Clone, Copy)]
enum Planned<'a> {
    Spec(&'a Hook),
    Content(&'a ContentHook),
}

impl Planned<'_> {
    fn name(&self) -> &str {
        match self {
            Planned::Spec(h) => &h.name,
            Planned::Content(h) => &h.id,
        }
    }
    fn weight(&self) -> i32 {
        match self {
            Planned::Spec(_) => 0,
            Planned::Content(h) => h.weight,
        }
    }
    /// Hook objects that only need to exist go before the workloads of their weight.
    fn runs(&self) -> bool {
        match self {
            Planned::Spec(_) => true,
            Planned::Content(h) => h.is_workload(),
        }
    }
    fn on_failure(&self) -> HookFailurePolicy {
        match self {
            Planned::Spec(h) => h.on_failure,
            // A failed Helm or Argo CD hook fails the sync, as in those tools.
            Planned::Content(_) => HookFailurePolicy::Fail,
        }
    }
}

/// The hooks of `phase` (of `wave`, for sync hooks): the spec's (sync hooks of the spec run
/// with wave 0) and the render's.
fn planned_hooks<'a>(run: &HookRun<'a>, phase: HookPhase, wave: Option<i32>) -> Vec<Planned<'a>> {
    let spec_hooks = run
        .release
        .spec
        .lifecycle
        .as_ref()
        .map(|l| l.hooks.as_slice())
        .unwrap_or_default();
    spec_hooks
        .iter()
        .filter(|h| h.phase == phase && (phase != HookPhase::Sync || wave.is_none_or(|w| w == 0)))
        // A name Rendering refuses (a Release stored before the CRD's pattern) runs nowhere,
        // the deletion's phases included, which render nothing: its entry would read as a
        // content hook's, naming an object of the author's choosing.
        .filter(|h| {
            let ok = crate::engine::hooks::is_lifecycle_name(&h.name);
            if !ok {
                tracing::warn!(release = %crate::engine::api::ReleaseId::of(run.release), hook = %h.name, "a lifecycle hook's name may hold no '/'; the hook is not run");
            }
            ok
        })
        .map(Planned::Spec)
        .chain(
            run.content
                .iter()
                .filter(|h| h.phase == phase && wave.is_none_or(|w| w == h.wave))
                .map(Planned::Content),
        )
        .collect()
}

/// Whether `phase` has hooks for `wave`: only then can the phase hold the sync.
pub fn has_hooks(run: &HookRun<'_>, phase: HookPhase, wave: Option<i32>) -> bool {
    !planned_hooks(run, phase, wave).is_empty()
}

/// Arm each hook of `phase` (with `wave`, for sync hooks) that has no workload for this
/// render (and this hook spec) yet, lowest weight first: a weight's hooks start only when the
/// weight before finished. Record the armed set with PutHooks, and report the phase from the
/// states the health loop wrote. A re-sync of the same render finds its workloads and arms
/// nothing; a new render or an edited hook gets a new workload (its createdAt is after the old
/// finishedAt, so the health loop polls it). Content hooks' delete policies are carried out
/// here.
pub async fn run_hook_phase(
    run: &HookRun<'_>,
    phase: HookPhase,
    wave: Option<i32>,
) -> Result<PhaseOutcome, HookPhaseError> {
    let mut planned = planned_hooks(run, phase, wave);
    if planned.is_empty() {
        return Ok(PhaseOutcome::Done);
    }
    planned.sort_by_key(|p| (p.weight(), p.runs()));
    let fail = |e: StepError| e.in_phase(phase);
    let current = run
        .inventory
        .get()
        .await
        .map_err(|e| fail(StepError::Inventory(e)))?;
    let entries = current.map(|i| i.spec.hooks).unwrap_or_default();
    let mut tally = Tally::default();
    let weights: BTreeSet<i32> = planned.iter().map(Planned::weight).collect();
    for weight in weights {
        for hook in planned.iter().filter(|p| p.weight() == weight) {
            visit_hook(run, phase, &entries, hook, &mut tally)
                .await
                .map_err(fail)?;
        }
        // A weight waits for the one before it.
        if !tally.running.is_empty() || tally.failed.is_some() {
            break;
        }
    }
    if !tally.armed.is_empty() {
        record_hooks(run, &entries, std::mem::take(&mut tally.armed))
            .await
            .map_err(fail)?;
    }
    Ok(tally.outcome())
}

/// What a phase's walk over its hooks found so far.
#[derive(Default)]
struct Tally {
    running: Vec<String>,
    /// The first failed hook with `onFailure: Fail`, and its message.
    failed: Option<(String, String)>,
    armed: Vec<HookMember>,
}

impl Tally {
    fn outcome(self) -> PhaseOutcome {
        match (self.failed, self.running.is_empty()) {
            (Some((hook, message)), _) => PhaseOutcome::Failed { hook, message },
            (None, false) => PhaseOutcome::Running(self.running),
            (None, true) => PhaseOutcome::Done,
        }
    }
}

/// One hook: its state from its entry for this render (and hook spec). A finished hook's
/// delete policy and `onFailure` are carried out; a hook without an entry is armed.
async fn visit_hook(
    run: &HookRun<'_>,
    phase: HookPhase,
    entries: &[HookEntry],
    hook: &Planned<'_>,
    tally: &mut Tally,
) -> Result<(), StepError> {
    let (workload, entry) = existing_entry(run, phase, entries, hook);
    // A hook object that only needs to exist is done once it is armed.
    let state = match (hook, entry) {
        (Planned::Content(h), Some(_)) if !h.is_workload() => Some(HookState::Succeeded),
        (_, e) => e.map(effective_state),
    };
    match state {
        Some(HookState::Running) => tally.running.push(hook.name().to_string()),
        Some(HookState::Succeeded) => delete_if(run, hook, DeletePolicy::HookSucceeded).await,
        Some(HookState::Failed) => {
            let message = entry.and_then(|e| e.message.clone()).unwrap_or_default();
            delete_if(run, hook, DeletePolicy::HookFailed).await;
            match hook.on_failure() {
                HookFailurePolicy::Fail if tally.failed.is_none() => {
                    tally.failed = Some((hook.name().to_string(), message));
                }
                HookFailurePolicy::Fail => {}
                HookFailurePolicy::Continue => tracing::info!(
                    release = %ReleaseId::of(run.release),
                    hook = %hook.name(),
                    "{} hook failed (onFailure: Continue): {message}",
                    phase.as_str()
                ),
            }
        }
        None => arm(run, phase, entries, hook, workload, tally).await?,
    }
    Ok(())
}

/// The workload a hook runs as for this render, and its entry if it was armed already.
fn existing_entry<'e>(
    run: &HookRun<'_>,
    phase: HookPhase,
    entries: &'e [HookEntry],
    hook: &Planned<'_>,
) -> (String, Option<&'e HookEntry>) {
    match hook {
        Planned::Spec(h) => {
            let name = workload_name(run.release, h, run.render_ref);
            let entry = entries.iter().find(|e| {
                e.name == h.name
                    && e.phase == phase
                    && e.workload_name.as_deref() == Some(name.as_str())
            });
            (name, entry)
        }
        Planned::Content(h) => {
            let entry = entries.iter().find(|e| {
                e.name == h.id
                    && e.phase == phase
                    && e.render_ref.as_deref() == Some(run.render_ref)
            });
            (h.object.name().to_string(), entry)
        }
    }
}

/// A content hook's `hook-delete-policy` for how it finished (a failure is only logged).
async fn delete_if(run: &HookRun<'_>, hook: &Planned<'_>, policy: DeletePolicy) {
    if let Planned::Content(h) = hook
        && h.delete_policies.contains(&policy)
        && let Err(e) = delete_content_hook(run.applier, run.release, h).await
    {
        tracing::warn!(hook = %h.id, "{e}");
    }
}

/// Arm a hook: create its workload (or apply its hook object) and note it for PutHooks.
async fn arm(
    run: &HookRun<'_>,
    phase: HookPhase,
    entries: &[HookEntry],
    hook: &Planned<'_>,
    workload: String,
    tally: &mut Tally,
) -> Result<(), StepError> {
    let (release, client) = (run.release, &run.target.conn.client);
    match hook {
        Planned::Spec(h) => {
            let namespace = workload_namespace(release);
            if let Err(source) = arm_workload(client, release, h, &workload, &namespace).await {
                return Err(StepError::Workload {
                    workload,
                    namespace,
                    source,
                });
            }
            if let Err(e) = collect_old_jobs(client, release, h, &namespace, &workload).await {
                tracing::warn!(hook = %h.name, "cannot delete old hook Jobs: {}", crate::engine::error::chain(&e));
            }
        }
        Planned::Content(h) => {
            match arm_content_hook(run.applier, release, h, run.render_ref)
                .await
                .map_err(StepError::Content)?
            {
                Armed::Created => {}
                // The previous instance is going: not armed yet.
                Armed::Waiting => {
                    tally.running.push(h.id.clone());
                    return Ok(());
                }
            }
        }
    }
    if hook.runs() {
        tally.running.push(hook.name().to_string());
    }
    let previous = entries
        .iter()
        .find(|e| e.name == hook.name() && e.phase == phase);
    tally.armed.push(HookMember {
        name: hook.name().to_string(),
        phase,
        workload_name: workload,
        created_at: armed_at(previous.and_then(|e| e.finished_at.as_ref())),
        render_ref: run.render_ref.to_string(),
    });
    Ok(())
}

/// PutHooks: record exactly the armed set: `armed`, and every other armed entry of a hook
/// the Release still has (spec hooks, and the render's content hooks).
async fn record_hooks(
    run: &HookRun<'_>,
    entries: &[HookEntry],
    armed: Vec<HookMember>,
) -> Result<(), StepError> {
    let rearmed: BTreeSet<(String, HookPhase)> =
        armed.iter().map(|m| (m.name.clone(), m.phase)).collect();
    let mut members: Vec<HookMember> = entries
        .iter()
        .filter(|e| hook_still_present(run.release, run.content, e))
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
    run.inventory
        .put_hooks(&members)
        .await
        .map(|_| ())
        .map_err(StepError::Inventory)
}

/// Whether a hook entry is of a hook the Release has: in `spec.lifecycle`, or a content
/// hook of the render.
fn hook_still_present(release: &Release, content: &[ContentHook], entry: &HookEntry) -> bool {
    let in_spec = release.spec.lifecycle.as_ref().is_some_and(|l| {
        l.hooks
            .iter()
            .any(|h| h.name == entry.name && h.phase == entry.phase)
    });
    in_spec
        || content
            .iter()
            .any(|h| h.id == entry.name && h.phase == entry.phase)
}

/// Drop hook entries of hooks the Release no longer has (removed from the spec, or from the
/// render), so the lifecycle status speaks only of current hooks.
pub async fn forget_removed_hooks(run: &HookRun<'_>) -> Result<(), InventoryError> {
    // Only the controller adds hook entries: an inventory this attempt saw without any has
    // none to drop (a steady pass saves the read).
    if run.inventory.known_without_hooks() {
        return Ok(());
    }
    let current = run.inventory.get().await?;
    let Some(current) = current else {
        return Ok(());
    };
    if current
        .spec
        .hooks
        .iter()
        .all(|e| hook_still_present(run.release, run.content, e))
    {
        return Ok(());
    }
    match record_hooks(run, &current.spec.hooks, Vec::new()).await {
        Err(StepError::Inventory(e)) => Err(e),
        _ => Ok(()),
    }
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

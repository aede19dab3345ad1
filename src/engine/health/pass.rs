//! One pass of the health loop: poll hooks, assess, write, wake the controller on edges,
//! schedule the next pass.
//!
//! Spec: health-loop.txt "One pass", "Writes", "Hook polling", "Wake the controller",
//! "Re-check backoff", "Deletion".

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{Api, ResourceExt};

use super::assess::{Assessment, assess};
use super::state::progress_backoff;
use crate::engine::api::{
    Condition, HealthState, HealthSummary, HealthyReason, HookState, ObjectKey, Release, ReleaseId,
    ReleaseInventory, condition_types, field_managers,
};
use crate::engine::api::{ConditionStatus, SyncMode, health_fields_changed};
use crate::engine::explain::count;
use crate::engine::hooks::{find_hook, needs_poll, poll_hook_workload, workload_namespace};
use crate::engine::inventory::{HookResult, InventoryHandle};
use crate::engine::requests::request_sync;
use crate::engine::runtime::{Context, Requeue};
use crate::engine::ssa;
use crate::engine::status::{condition, condition_unchanged, now};

/// The loop's memory between passes: attempt counts per pending target, per Release. It is
/// lost at a restart, as the spec says.
#[derive(Default)]
pub struct HealthMemory {
    counts: Mutex<HashMap<String, HashMap<String, u32>>>,
}

/// Errors returned to the work queue (writes and /sync requests).
#[derive(Debug, thiserror::Error)]
pub enum HealthError {
    #[error("cannot write the health of Release {release}")]
    Status {
        release: String,
        #[source]
        source: Box<kube::Error>,
    },
    #[error("cannot write the ReleaseInventory health of Release {release}")]
    Inventory {
        release: String,
        #[source]
        source: crate::engine::inventory::InventoryError,
    },
    #[error("cannot request a sync of Release {release}")]
    Request {
        release: String,
        #[source]
        source: Box<kube::Error>,
    },
}

impl crate::engine::error::Categorized for HealthError {
    fn category(&self) -> crate::engine::error::Category {
        match self {
            HealthError::Status { source, .. } | HealthError::Request { source, .. } => {
                crate::engine::error::kube_category(source)
            }
            HealthError::Inventory { source, .. } => source.category(),
        }
    }
}

/// What a pass did.
#[derive(Debug, Clone, PartialEq)]
pub struct HealthPass {
    pub condition: Option<Condition>,
    pub summary: Option<HealthSummary>,
    pub wrote_health: bool,
    pub wrote_inventory: bool,
    /// The edges that fired: "wave complete", "render advanced", "hook batch complete".
    pub edges: Vec<&'static str>,
    pub requested_sync: bool,
    pub requeue: Requeue,
}

/// The health loop's syncHandler (health-loop.txt steps 4–7): poll the hooks, assess and
/// write health, fire the edges, schedule the next pass.
pub async fn health_pass(
    ctx: &Context,
    memory: &HealthMemory,
    release: &Release,
) -> Result<Option<HealthPass>, HealthError> {
    if !ctx.shard.owns(release) {
        return Ok(None);
    }
    let name = ReleaseId::of(release).to_string();
    let at = now();
    let handle = InventoryHandle::for_release(ctx.home.client.clone(), release);
    let api: Api<Release> = Api::namespaced(
        ctx.home.client.clone(),
        &release.namespace().unwrap_or_default(),
    );
    // Nothing is awaited between the shard check above and this pass's one write.
    if before_first_attempt(release) {
        return first_attempt_pending(memory, release, &api, at, &name).await;
    }
    // Step 4 (and the whole pass on deletion): poll the hooks.
    let polled = poll_and_record_hooks(ctx, release, &handle, &at, &name).await;
    // The shard may lapse at any point of a pass (a renewal not made in time, a stopped
    // process continued): another replica may own the Release then, so this one checks again
    // before each write, as the controller does before its status write. Writes without a
    // precondition (the Healthy condition, a /sync) would otherwise land.
    let lapsed = || {
        let lapsed = !ctx.shard.owns(release);
        if lapsed {
            tracing::warn!(release = %name, "the shard lapsed during the health pass; nothing more is written");
        }
        lapsed
    };
    if lapsed() {
        return Ok(None);
    }
    let mut edges = Vec::new();
    if polled.hooks.newly_finished > 0 {
        edges.push("hook batch complete");
    }
    if release.metadata.deletion_timestamp.is_some() {
        let requested_sync = !edges.is_empty() && !lapsed() && wake(&api, release, &name).await?;
        let pending: Vec<String> = polled
            .hooks
            .running
            .iter()
            .map(|h| format!("hook:{h}"))
            .collect();
        return Ok(Some(HealthPass {
            condition: None,
            summary: None,
            wrote_health: false,
            wrote_inventory: polled.wrote,
            edges,
            requested_sync,
            requeue: schedule_health_recheck(memory, release, &pending),
        }));
    }
    // Step 5: health, per entry and as the condition.
    let (new_condition, summary, assessment) =
        assess_health(ctx, release, &at, polled.inventory.as_ref()).await;
    if lapsed() {
        return Ok(None);
    }
    let written_entries = write_entry_health(&handle, assessment.as_ref(), &name).await?;
    let wrote_entries = written_entries.is_some();
    if lapsed() {
        return Ok(None);
    }
    let wrote_health = write_health(&api, release, new_condition.clone(), summary.clone(), at)
        .await
        .map_err(|source| HealthError::Status {
            release: name.clone(),
            source: Box::new(source),
        })?;
    // Step 6: edges.
    if let Some(assessment) = &assessment {
        let attempted = release
            .status
            .as_ref()
            .and_then(|s| s.last_attempted.as_ref())
            .and_then(|a| a.render_ref.as_deref());
        if frontier_wave_completed(assessment, attempted) {
            edges.insert(0, "wave complete");
        }
        if assessment.render_advanced {
            edges.push("render advanced");
        }
    }
    let written =
        written_entries.or_else(|| polled.wrote.then(|| polled.inventory.clone()).flatten());
    let requested_sync = !edges.is_empty()
        && !woken_by_write(release, polled.read.as_ref(), written.as_ref())
        && !lapsed()
        && wake(&api, release, &name).await?;
    // Step 7: the next pass.
    let pending = still_pending(assessment.as_ref(), &polled.hooks, &new_condition);
    Ok(Some(HealthPass {
        condition: Some(new_condition),
        summary,
        wrote_health,
        wrote_inventory: polled.wrote || wrote_entries,
        edges,
        requested_sync,
        requeue: schedule_health_recheck(memory, release, &pending),
    }))
}

/// Step 4's result: the hooks as polled, the freshest inventory this pass has (the hook
/// status write moves it), and whether that write happened.
struct PolledPass {
    hooks: PolledHooks,
    /// The inventory as the pass read it, before its writes.
    read: Option<ReleaseInventory>,
    inventory: Option<ReleaseInventory>,
    wrote: bool,
}

/// Step 4: poll the hook workloads and write their states (a failed write is logged; the
/// next pass polls again). An inventory that cannot be read is no hook to poll, said so.
async fn poll_and_record_hooks(
    ctx: &Context,
    release: &Release,
    handle: &InventoryHandle,
    at: &Time,
    name: &str,
) -> PolledPass {
    let inventory = match handle.get_cached(ctx.listers(), release).await {
        Ok(inventory) => inventory,
        Err(e) => {
            tracing::warn!(release = %name, "cannot read the inventory to poll hooks: {}", crate::engine::error::chain(&e));
            None
        }
    };
    let Some(read) = inventory else {
        return PolledPass {
            hooks: PolledHooks::default(),
            read: None,
            inventory: None,
            wrote: false,
        };
    };
    let hooks = poll_hooks(ctx, release, &read, at).await;
    let mut polled = PolledPass {
        inventory: Some(read.clone()),
        read: Some(read.clone()),
        wrote: false,
        hooks,
    };
    if polled.hooks.changed && ctx.shard.owns(release) {
        match handle.write_hook_status(&read, &polled.hooks.results).await {
            Ok(Some(updated)) => {
                polled.inventory = Some(updated);
                polled.wrote = true;
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(release = %name, "hook status write failed: {}", crate::engine::error::chain(&e))
            }
        }
    }
    polled
}

/// Step 5: the Healthy condition and summary, and the per-entry assessment to write (none
/// when health is not configured or cannot be assessed). `fresh` is the inventory step 4
/// left, which the entry writes go against.
async fn assess_health(
    ctx: &Context,
    release: &Release,
    at: &Time,
    fresh: Option<&ReleaseInventory>,
) -> (Condition, Option<HealthSummary>, Option<Assessment>) {
    let generation = release.metadata.generation;
    if !super::configured(release) {
        return (
            not_configured(generation),
            Some(HealthSummary::default()),
            None,
        );
    }
    match assess(ctx, release, at).await {
        Err(e) => {
            let condition = condition(
                condition_types::HEALTHY,
                ConditionStatus::Unknown,
                HealthyReason::Unknown,
                format!("cannot assess: {}", crate::engine::error::chain(&e)),
                generation,
            );
            let summary = release
                .status
                .as_ref()
                .and_then(|s| s.health_summary.clone());
            (condition, summary, None)
        }
        Ok(mut assessment) => {
            if let (Some(current), Some(read)) = (fresh, &assessment.inventory)
                && current.metadata.uid == read.metadata.uid
            {
                assessment.inventory = Some(current.clone());
            }
            let (c, s) = healthy_condition(release, &assessment);
            (c, Some(s), Some(assessment))
        }
    }
}

fn not_configured(generation: Option<i64>) -> Condition {
    condition(
        condition_types::HEALTHY,
        ConditionStatus::True,
        HealthyReason::NotConfigured,
        "healthAssessment turns the built-in rules off and selects no rule set",
        generation,
    )
}

/// A Release the controller has not attempted yet (and is not being deleted).
fn before_first_attempt(release: &Release) -> bool {
    release.metadata.deletion_timestamp.is_none()
        && release
            .status
            .as_ref()
            .is_none_or(|s| s.last_attempted.is_none())
}

/// Deviation (README "Deviations"): before the controller's first attempt is recorded there is
/// nothing to assess. What that attempt creates (its inventory, its hooks) it writes just
/// before the status that records it, and both writes wake this loop (the inventory's new
/// entries; `lastAttempted` naming a render); a pass in between would judge a render the
/// status does not name yet, which the old path called Pending too. The pass writes the
/// condition an empty assessment gives, without reading the inventory, and does not come
/// back on the render-pending backoff: at 10,000 new Releases those passes asked for 9,000
/// absent inventories a minute (issue 21, scale_10k), beside the controller's first syncs.
async fn first_attempt_pending(
    memory: &HealthMemory,
    release: &Release,
    api: &Api<Release>,
    at: Time,
    name: &str,
) -> Result<Option<HealthPass>, HealthError> {
    let (condition, summary) = if super::configured(release) {
        healthy_condition(release, &Assessment::default())
    } else {
        (
            not_configured(release.metadata.generation),
            HealthSummary::default(),
        )
    };
    let wrote_health = write_health(api, release, condition.clone(), Some(summary.clone()), at)
        .await
        .map_err(|source| HealthError::Status {
            release: name.to_string(),
            source: Box::new(source),
        })?;
    Ok(Some(HealthPass {
        condition: Some(condition),
        summary: Some(summary),
        wrote_health,
        wrote_inventory: false,
        edges: Vec::new(),
        requested_sync: false,
        requeue: schedule_health_recheck(memory, release, &[]),
    }))
}

/// Step 5: each entry's health, under `convoy-health-inventory`. Returns the inventory
/// written, if it wrote.
async fn write_entry_health(
    handle: &InventoryHandle,
    assessment: Option<&Assessment>,
    name: &str,
) -> Result<Option<ReleaseInventory>, HealthError> {
    let Some((assessment, read)) = assessment.and_then(|a| Some((a, a.inventory.as_ref()?))) else {
        return Ok(None);
    };
    match handle
        .write_inventory_health(read, &assessment.results)
        .await
    {
        Ok(written) => Ok(written),
        Err(source) => Err(HealthError::Inventory {
            release: name.to_string(),
            source,
        }),
    }
}

/// Step 7: what the next pass must look at again: objects not Healthy, hooks still running,
/// a render not assessed yet.
fn still_pending(
    assessment: Option<&Assessment>,
    hooks: &PolledHooks,
    condition: &Condition,
) -> Vec<String> {
    let mut pending: Vec<String> = assessment
        .iter()
        .flat_map(|a| a.results.iter())
        .filter(|r| r.state != HealthState::Healthy)
        .map(|r| format!("object:{}", r.key))
        .collect();
    pending.extend(hooks.running.iter().map(|h| format!("hook:{h}")));
    if condition.reason == HealthyReason::Pending {
        pending.push("render-pending".into());
    }
    pending
}

/// Step 6, deviation (README "Deviations"): an edge sends no /sync when this pass's own
/// inventory write already wakes the controller and the Release syncs automatically. Each
/// edge is a change of an entry's state or assessedRenderRef or of a hook's state, which the
/// controller's inventory watch wakes on (health-loop.txt: "without a /sync"); a /sync too
/// would wake it twice and cost the annotation's write and a second reconcile with its
/// status write. In manual mode the /sync is what lets the controller go on (its gate
/// holds without a pending request), so it is always sent there, as it is when the pass
/// wrote nothing the watch sees (a write made by an earlier pass that failed later).
fn woken_by_write(
    release: &Release,
    read: Option<&ReleaseInventory>,
    written: Option<&ReleaseInventory>,
) -> bool {
    release.spec.sync_mode() == SyncMode::Automatic
        && matches!((read, written), (Some(read), Some(written)) if health_fields_changed(read, written))
}

async fn wake(api: &Api<Release>, release: &Release, name: &str) -> Result<bool, HealthError> {
    request_sync(api, &release.name_any(), false)
        .await
        .map_err(|source| HealthError::Request {
            release: name.to_string(),
            source: Box::new(source),
        })?;
    Ok(true)
}

/// The Healthy condition and summary for an assessment: a verdict on the render that runs,
/// Pending while the controller is between renders.
///
/// health-loop.txt "Writes" reads renderCurrent as "every entry carries lastAttempted's
/// renderRef". Read literally, a render that failed before its apply, or a rollout rolled back
/// to the last healthy render, leaves Healthy Pending for as long as that lasts, although
/// every object runs one render and can be judged (README "Deviations"). Here the render is
/// current when every entry carries one renderRef: lastAttempted's, or, when lastAttempted's
/// render reached no object (it failed or was held before its apply, or was rolled back), the
/// render that runs; the message then names both. Entries of two renders (a rollout between
/// its waves) stay Pending, as the spec says.
pub fn healthy_condition(release: &Release, assessment: &Assessment) -> (Condition, HealthSummary) {
    let generation = release.metadata.generation;
    let summary = assessment.summary();
    let status = release.status.clone().unwrap_or_default();
    let attempted = status
        .last_attempted
        .as_ref()
        .and_then(|a| a.render_ref.clone());
    let running = running_render(assessment);
    let render_current = attempted.is_some() && running.is_some();
    if !render_current || (assessment.results.is_empty() && status.last_successful.is_none()) {
        let message = match attempted {
            Some(r) => format!(
                "render {} is not applied and assessed yet",
                crate::engine::render::render_ref::short(&r)
            ),
            None => "no render has been applied yet".to_string(),
        };
        return (
            condition(
                condition_types::HEALTHY,
                ConditionStatus::Unknown,
                HealthyReason::Pending,
                message,
                generation,
            ),
            summary,
        );
    }
    // Whose health this is, when it is not the attempted render's.
    let of_render = match (&running, &attempted) {
        (Some(run), Some(att)) if !run.is_empty() && run != att => format!(
            " (render {} runs; render {} is not applied)",
            crate::engine::render::render_ref::short(run),
            crate::engine::render::render_ref::short(att)
        ),
        _ => String::new(),
    };
    let mut unhealthy: Vec<&crate::engine::inventory::EntryHealth> = assessment
        .results
        .iter()
        .filter(|r| r.state != HealthState::Healthy)
        .collect();
    unhealthy.sort_by(|a, b| {
        (a.state != HealthState::Degraded, &a.key).cmp(&(b.state != HealthState::Degraded, &b.key))
    });
    if unhealthy.is_empty() {
        return (
            condition(
                condition_types::HEALTHY,
                ConditionStatus::True,
                HealthyReason::Healthy,
                format!(
                    "{} healthy{of_render}",
                    count(summary.total as usize, "object")
                ),
                generation,
            ),
            summary,
        );
    }
    let reason = if summary.degraded > 0 {
        HealthyReason::Degraded
    } else {
        HealthyReason::Progressing
    };
    let shown: Vec<String> = unhealthy
        .iter()
        .take(3)
        .map(|r| match &r.message {
            Some(m) => format!("{} is {} ({m})", r.key, r.state.as_str()),
            None => format!("{} is {}", r.key, r.state.as_str()),
        })
        .collect();
    let more = if unhealthy.len() > 3 {
        format!("; and {} more", unhealthy.len() - 3)
    } else {
        String::new()
    };
    (
        condition(
            condition_types::HEALTHY,
            ConditionStatus::False,
            reason,
            format!("{}{more}{of_render}", shown.join("; ")),
            generation,
        ),
        summary,
    )
}

/// The one render every entry carries; `None` for entries of two renders. (No entries: the
/// render of `lastSuccessful`, which applied nothing to judge.)
fn running_render(assessment: &Assessment) -> Option<String> {
    let mut refs = assessment.render_refs.values();
    let Some(first) = refs.next() else {
        return Some(String::new());
    };
    refs.all(|r| r == first).then(|| first.clone())
}

/// `writeHealth`: Healthy and healthSummary under `convoy-health`; skipped when the condition
/// (status, reason, message, observedGeneration) and the summary are unchanged.
pub async fn write_health(
    api: &Api<Release>,
    release: &Release,
    mut new: Condition,
    summary: Option<HealthSummary>,
    at: Time,
) -> Result<bool, kube::Error> {
    let status = release.status.clone().unwrap_or_default();
    let old = status.condition(condition_types::HEALTHY);
    let summary = summary.or(status.health_summary.clone());
    if condition_unchanged(old, &new) && status.health_summary == summary {
        return Ok(false);
    }
    new.last_transition_time = match old {
        Some(o) if o.status == new.status => o.last_transition_time.clone().or(Some(at)),
        _ => Some(at),
    };
    tracing::debug!(
        release = %crate::engine::store::ReleaseId::of(release),
        status = ?new.status,
        reason = %new.reason,
        was = ?old.map(|o| (&o.status, &o.reason)),
        summary_changed = status.health_summary != summary,
        "writing Healthy"
    );
    let mut body = serde_json::json!({"conditions": [new]});
    if let Some(s) = summary {
        body["healthSummary"] = serde_json::json!(s);
    }
    let patch = serde_json::json!({
        "apiVersion": "core.convoy.kumodo.io/v1alpha1",
        "kind": "Release",
        "metadata": {"name": release.name_any()},
        "status": body,
    });
    ssa::apply_status(api, &release.name_any(), field_managers::HEALTH, &patch).await?;
    Ok(true)
}

/// `frontierWaveCompleted`: every entry of the highest wave is Healthy, and one or more of
/// them was not Healthy before this pass.
///
/// The waves are those of `attempted` (lastAttempted's render) when entries carry it: until
/// the prune, the inventory also holds the previous render's entries (the union each wave's
/// Put writes), whose last wave, Healthy all along, would otherwise stay the frontier while
/// the new render's first waves are applied, and a wave hold without a timeout would never
/// hear that its wave became healthy (it waits for the interval).
pub fn frontier_wave_completed(assessment: &Assessment, attempted: Option<&str>) -> bool {
    let of_attempted =
        |key: &ObjectKey| assessment.render_refs.get(key).map(String::as_str) == attempted;
    let attempted_applied =
        attempted.is_some() && assessment.results.iter().any(|r| of_attempted(&r.key));
    let in_render = |key: &ObjectKey| !attempted_applied || of_attempted(key);
    let Some(frontier) = assessment
        .waves
        .iter()
        .filter(|(key, _)| in_render(key))
        .map(|(_, wave)| *wave)
        .max()
    else {
        return false;
    };
    let in_frontier: Vec<_> = assessment
        .results
        .iter()
        .filter(|r| in_render(&r.key) && assessment.waves.get(&r.key) == Some(&frontier))
        .collect();
    !in_frontier.is_empty()
        && in_frontier.iter().all(|r| r.state == HealthState::Healthy)
        && in_frontier
            .iter()
            .any(|r| assessment.prior.get(&r.key).copied().flatten() != Some(HealthState::Healthy))
}

/// `scheduleHealthRecheck`: every pending target's attempt count goes up (others are
/// forgotten); the next pass comes after the shortest `progressBackoff` of them. With nothing
/// pending, after `syncPolicy.interval` or only on events.
pub fn schedule_health_recheck(
    memory: &HealthMemory,
    release: &Release,
    pending: &[String],
) -> Requeue {
    let key = format!(
        "{}/{}",
        release.namespace().unwrap_or_default(),
        release.name_any()
    );
    let interval = release.spec.interval();
    let mut all = crate::engine::locks::lock(&memory.counts);
    if pending.is_empty() {
        all.remove(&key);
        return interval.map(Requeue::Interval).unwrap_or(Requeue::Never);
    }
    let counts = all.entry(key).or_default();
    let wanted: BTreeSet<&String> = pending.iter().collect();
    counts.retain(|target, _| wanted.contains(target));
    let mut shortest: Option<Duration> = None;
    for target in pending {
        let n = counts.entry(target.clone()).or_insert(0);
        *n += 1;
        let delay = progress_backoff(*n, interval, jitter());
        shortest = Some(shortest.map_or(delay, |s| s.min(delay)));
    }
    shortest.map(Requeue::After).unwrap_or(Requeue::Never)
}

/// A cheap jitter in [0, 1) from the clock (no randomness crate for one number).
fn jitter() -> f64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    f64::from(nanos % 1000) / 1000.0
}

/// What polling the hooks found.
#[derive(Debug, Clone, Default)]
pub struct PolledHooks {
    /// Every hook entry that has a state after this pass (what `writeHookStatus` sends).
    pub results: Vec<HookResult>,
    /// Whether a polled state differs from what the inventory holds.
    pub changed: bool,
    /// Hooks that reached a terminal state in this pass.
    pub newly_finished: usize,
    /// `name/phase` of hooks still running.
    pub running: Vec<String>,
}

/// `pollHooks`: poll each hook entry with a workload that has not finished (or was armed
/// again), and collect the state of every entry that has one.
pub async fn poll_hooks(
    ctx: &Context,
    release: &Release,
    inventory: &ReleaseInventory,
    at: &Time,
) -> PolledHooks {
    let mut out = PolledHooks::default();
    let to_poll: Vec<_> = inventory
        .spec
        .hooks
        .iter()
        .filter(|h| needs_poll(h))
        .collect();
    let target = if to_poll.is_empty() {
        None
    } else {
        match ctx.resolve_target(release).await {
            Ok(t) => Some(t),
            Err(e) => {
                tracing::warn!(release = %ReleaseId::of(release), "cannot poll hooks: {}", crate::engine::error::chain(&e));
                None
            }
        }
    };
    let namespace = workload_namespace(release);
    for entry in &inventory.spec.hooks {
        let polled = match (&target, needs_poll(entry)) {
            (Some(t), true) => {
                let hook = find_hook(release, &entry.name, entry.phase);
                match poll_hook_workload(&t.conn.client, release, &namespace, entry, hook, at).await
                {
                    Ok(p) => Some(p),
                    Err(e) => {
                        tracing::warn!(hook = %entry.name, "polling failed: {e}");
                        None
                    }
                }
            }
            _ => None,
        };
        let (state, message, finished_at) = match polled {
            Some(p) => {
                // Never before createdAt (the controller's clock may run ahead of ours): a
                // finishedAt before it would read as the previous arming's forever.
                let finished_at = p.state.is_terminal().then(|| match &entry.created_at {
                    Some(created) if created.0 > at.0 => created.clone(),
                    _ => at.clone(),
                });
                if p.state.is_terminal() {
                    out.newly_finished += 1;
                }
                if p.state == HookState::Running {
                    out.running
                        .push(format!("{}/{}", entry.name, entry.phase.as_str()));
                }
                let changed = entry.state != Some(p.state)
                    || entry.message.as_deref() != Some(p.message.as_str());
                out.changed |= changed || p.state.is_terminal();
                (Some(p.state), Some(p.message), finished_at)
            }
            None => (
                entry.state,
                entry.message.clone(),
                entry.finished_at.clone(),
            ),
        };
        if let Some(state) = state {
            out.results.push(HookResult {
                name: entry.name.clone(),
                phase: entry.phase,
                state,
                message,
                finished_at,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An assessment of ConfigMaps `(name, wave, render, prior, now)`.
    fn assessed(entries: &[(&str, i32, &str, HealthState, HealthState)]) -> Assessment {
        let mut a = Assessment::default();
        for (name, wave, render, prior, now) in entries {
            let key = ObjectKey {
                group: String::new(),
                kind: "ConfigMap".into(),
                namespace: "apps".into(),
                name: (*name).into(),
            };
            a.waves.insert(key.clone(), *wave);
            a.render_refs.insert(key.clone(), (*render).into());
            a.prior.insert(key.clone(), Some(*prior));
            a.results.push(crate::engine::inventory::EntryHealth {
                key,
                rule: None,
                state: *now,
                message: None,
                first_unhealthy: None,
                assessed_render_ref: Some((*render).into()),
            });
        }
        a
    }

    #[test]
    fn the_frontier_is_the_highest_wave_of_the_attempted_render() {
        use HealthState::{Healthy, Progressing};
        // The new render's wave 0 became healthy; the previous render's wave 1 (applied
        // again after it, or pruned) was Healthy all along.
        let mid_rollout = assessed(&[
            ("a", 0, "new", Progressing, Healthy),
            ("b", 1, "old", Healthy, Healthy),
        ]);
        assert!(frontier_wave_completed(&mid_rollout, Some("new")));
        // Without lastAttempted, or with a render no entry carries, all entries count.
        assert!(!frontier_wave_completed(&mid_rollout, None));
        assert!(!frontier_wave_completed(&mid_rollout, Some("other")));
        // The new render's frontier still progressing is not complete.
        let progressing = assessed(&[
            ("a", 0, "new", Progressing, Progressing),
            ("b", 1, "old", Progressing, Healthy),
        ]);
        assert!(!frontier_wave_completed(&progressing, Some("new")));
        // A steady pass fires nothing.
        let steady = assessed(&[("a", 0, "new", Healthy, Healthy)]);
        assert!(!frontier_wave_completed(&steady, Some("new")));
    }

    /// An inventory of one entry with this state and message.
    fn inv(state: Option<HealthState>, message: Option<&str>) -> ReleaseInventory {
        let mut i = ReleaseInventory::new("web", Default::default());
        i.spec.inventory = vec![
            serde_json::from_value(serde_json::json!({
                "group": "", "kind": "ConfigMap", "namespace": "apps", "name": "a",
                "renderRef": "r1", "assessedRenderRef": "r1",
            }))
            .unwrap(),
        ];
        i.spec.inventory[0].state = state;
        i.spec.inventory[0].message = message.map(str::to_string);
        i
    }

    /// The edge's /sync is left out only when the Release syncs automatically and the pass's
    /// own write changed what the controller's inventory watch wakes on.
    #[test]
    fn an_edge_relies_on_the_write_only_when_the_write_wakes_the_controller() {
        let automatic = release(None);
        let mut manual = release(None);
        manual.spec.sync_policy =
            Some(serde_json::from_value(serde_json::json!({"mode": "Manual"})).unwrap());
        let before = inv(Some(HealthState::Progressing), None);
        let healthy = inv(Some(HealthState::Healthy), None);
        assert!(woken_by_write(&automatic, Some(&before), Some(&healthy)));
        assert!(
            !woken_by_write(&manual, Some(&before), Some(&healthy)),
            "manual mode: the /sync lets the controller go on"
        );
        assert!(
            !woken_by_write(&automatic, Some(&before), None),
            "nothing written this pass"
        );
        let reworded = inv(Some(HealthState::Progressing), Some("1 of 2 pods"));
        assert!(
            !woken_by_write(&automatic, Some(&before), Some(&reworded)),
            "a message alone wakes no controller"
        );
        assert!(!woken_by_write(&automatic, None, Some(&healthy)));
    }

    fn release(interval: Option<&str>) -> Release {
        let mut spec = serde_json::json!({"source": {"kind": "GitRepository", "name": "repo"}});
        if let Some(i) = interval {
            spec["syncPolicy"] = serde_json::json!({"interval": i});
        }
        serde_json::from_value(serde_json::json!({
            "apiVersion": "core.convoy.kumodo.io/v1alpha1", "kind": "Release",
            "metadata": {"name": "web", "namespace": "apps"},
            "spec": spec,
        }))
        .unwrap()
    }

    fn secs(r: Requeue) -> f64 {
        match r {
            Requeue::After(d) => d.as_secs_f64(),
            other => panic!("{other:?}"),
        }
    }

    /// Within progressBackoff's jitter (up to 20 % above the step).
    fn near(got: f64, step: f64) -> bool {
        got >= step && got <= step * 1.2 + 1e-9
    }

    #[test]
    fn each_pending_target_counts_its_own_passes_and_the_shortest_delay_wins() {
        let memory = HealthMemory::default();
        let r = release(None);
        let a = vec!["object:a".to_string()];
        assert!(near(secs(schedule_health_recheck(&memory, &r, &a)), 2.0));
        assert!(near(secs(schedule_health_recheck(&memory, &r, &a)), 4.0));
        assert!(near(secs(schedule_health_recheck(&memory, &r, &a)), 8.0));
        // A new target comes in at its first step: the shortest delay is 2 s again.
        let both = vec!["object:a".to_string(), "render-pending".to_string()];
        assert!(near(secs(schedule_health_recheck(&memory, &r, &both)), 2.0));
        // a went on counting (16 s), render-pending is at its second step (4 s).
        assert!(near(secs(schedule_health_recheck(&memory, &r, &both)), 4.0));
        // A target no longer pending is cleared: back, it starts over.
        let pending = vec!["render-pending".to_string()];
        assert!(near(
            secs(schedule_health_recheck(&memory, &r, &pending)),
            8.0
        ));
        assert!(near(secs(schedule_health_recheck(&memory, &r, &a)), 2.0));
    }

    #[test]
    fn the_interval_caps_the_backoff_and_nothing_pending_waits_for_it() {
        let memory = HealthMemory::default();
        let r = release(Some("5s"));
        let a = vec!["hook:migrate".to_string()];
        for _ in 0..3 {
            schedule_health_recheck(&memory, &r, &a);
        }
        assert!(near(secs(schedule_health_recheck(&memory, &r, &a)), 5.0));
        assert_eq!(
            schedule_health_recheck(&memory, &r, &[]),
            Requeue::Interval(Duration::from_secs(5))
        );
        // Without an interval the cap is 32 s, and nothing pending means events only.
        let r = release(None);
        for _ in 0..9 {
            schedule_health_recheck(&memory, &r, &a);
        }
        assert!(near(secs(schedule_health_recheck(&memory, &r, &a)), 32.0));
        assert_eq!(schedule_health_recheck(&memory, &r, &[]), Requeue::Never);
    }
}

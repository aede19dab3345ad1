//! The render store's steps of stageSync: 2 `persistRender` (before anything is applied),
//! 8 `recordHistory` and 9 `runGC` (after the render is applied; their errors are only
//! logged).
//!
//! Spec: reconcile-flow.txt stageSync steps 2, 8, 9; DESIGN.md "Render store".

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::engine::api::{Attempt, Release, ReleaseStatus};
use crate::engine::reconcile::assemble;
use crate::engine::render::Object;
use crate::engine::runtime::Context;
use crate::engine::store::{
    HistoryEntry, ReleaseId, StoreError, entries_within, plan_gc, with_entry,
};

/// stageSync step 2, `persistRender`: store the render unless it is there already.
pub(super) async fn persist_render(
    ctx: &Context,
    release: &Release,
    render_ref: &str,
    objects: &[Object],
) -> Result<(), StoreError> {
    let Some(store) = &ctx.store else {
        return Ok(());
    };
    if ctx.known_stored.knows(release, render_ref) {
        return Ok(());
    }
    let id = ReleaseId::of(release);
    if store.has_render(&id, render_ref).await? {
        return Ok(());
    }
    collect_unrecorded(ctx, store, release, &id, render_ref).await;
    ctx.known_stored.stored(release, render_ref);
    store.put_render(&id, render_ref, objects).await
}

/// Before a new render is stored: delete the renders this process stored for the Release
/// that no history records (their syncs stopped after persistRender) and that the status
/// does not refer to (step 9 keeps lastSuccessful, lastAttempted, the pin and lastHealthy).
/// runGC collects them too, but only after a render is applied, so a Release whose renders
/// are all refused (the dry run rejects them) kept every one: a tenant editing such a
/// Release in a loop filled convoy's namespace, outside its own quota, with renders of up to
/// 45 MiB each (found by an attack). Now such a Release keeps its last two.
///
/// A replica that does not own the Release's shard leaves them (another may be using them),
/// and a render the history records after all (another replica recorded it while this one
/// held the shard no more) is left to runGC.
async fn collect_unrecorded(
    ctx: &Context,
    store: &std::sync::Arc<dyn crate::engine::store::RenderStore>,
    release: &Release,
    id: &ReleaseId,
    render_ref: &str,
) {
    if !ctx.shard.owns(release) {
        return;
    }
    let status = release.status.clone().unwrap_or_default();
    let pin = assemble::pin_status(release).map(|p| p.render_ref);
    let mut keep: Vec<&str> = vec![render_ref];
    keep.extend(status.applied_render());
    keep.extend(status.attempted_render());
    keep.extend(status.last_healthy.as_ref().map(|h| h.render_ref.as_str()));
    keep.extend(pin.as_deref());
    let candidates = ctx.known_stored.take_unrecorded(release, &keep);
    if candidates.is_empty() {
        return;
    }
    let recorded: Vec<String> = match store.history(id).await {
        Ok(history) => history.into_iter().map(|h| h.render_ref).collect(),
        Err(e) => {
            for old in &candidates {
                ctx.known_stored.stored(release, old);
            }
            tracing::warn!(release = %id, "cannot read the render history, renders no history records stay: {}", crate::engine::error::chain(&e));
            return;
        }
    };
    for old in candidates.into_iter().filter(|r| !recorded.contains(r)) {
        if let Err(e) = store.delete_render(id, &old).await {
            ctx.known_stored.stored(release, &old);
            tracing::warn!(release = %id, render = %old, "cannot delete a render no history records: {}", crate::engine::error::chain(&e));
        }
    }
}

/// stageSync step 8, `recordHistory`: append the render if the history does not hold it yet.
/// Returns the history as it now stands and whether this call changed it (`None` on an
/// error, which is only logged, and when the render is known to be stored and recorded:
/// then there is nothing for runGC either).
pub(super) async fn record_history(
    ctx: &Context,
    release: &Release,
    attempt: &Attempt,
    objects: &[Object],
    now: &Time,
) -> Option<(Vec<HistoryEntry>, bool)> {
    let (Some(store), Some(render_ref)) = (&ctx.store, attempt.render_ref.as_ref()) else {
        return None;
    };
    if ctx.known_stored.knows(release, render_ref) {
        return None;
    }
    let id = ReleaseId::of(release);
    let result = async {
        let history = store.history(&id).await?;
        let entry = HistoryEntry {
            render_ref: render_ref.clone(),
            recorded_at: now.clone(),
            // A pinned render came from the store, not from the revision just resolved.
            source_revision: attempt
                .resolved_source
                .as_ref()
                .and_then(|s| s.revision.clone())
                .filter(|_| assemble::pin_status(release).is_none()),
            outcome: None,
            stored_bytes: None,
        };
        match with_entry(history.clone(), entry) {
            Some(mut updated) => {
                // As persistRender stored it (the same encoding gives the same bytes), only
                // for a render the history takes.
                if let Some(added) = updated.last_mut() {
                    added.stored_bytes = Some(crate::engine::store::encode(objects).len() as u64);
                }
                store.put_history(&id, &updated).await?;
                Ok((updated, true))
            }
            None => Ok((history, false)),
        }
    }
    .await;
    match result {
        Ok(r) => {
            // Persisted at step 2 of this sync, and in the history now.
            ctx.known_stored.remember(release, render_ref);
            Some(r)
        }
        Err(e) => {
            let e: StoreError = e;
            tracing::warn!(release = %id, "cannot record the render history: {}", crate::engine::error::chain(&e));
            None
        }
    }
}

/// stageSync step 9, `runGC`: keep `maxHistory` entries and every render the new status
/// refers to (lastSuccessful and lastAttempted are this attempt; the pin; lastHealthy).
/// It runs when the history is longer than `maxHistory` (an entry drops out, or a lowered
/// limit), or when it changed and a render no history records may be stored: one this
/// process stored for a sync that failed after persistRender, or, until this process has
/// listed the Release's renders once, one another process (or this one before a restart)
/// left ([`crate::engine::store::known::KnownStored::may_hold_leftovers`]). Otherwise there
/// is nothing to collect, and the store's listing is not asked for: it is a LIST by label,
/// which the API server answers by testing every Secret of the store's namespace (at 10,000
/// Releases about 60 ms of its CPU at each new Release's first sync; issue 21, scale_10k).
pub(super) async fn run_gc(
    ctx: &Context,
    release: &Release,
    status: &ReleaseStatus,
    attempt: &Attempt,
    recorded: Option<(Vec<HistoryEntry>, bool)>,
) {
    let Some(store) = &ctx.store else {
        return;
    };
    let id = ReleaseId::of(release);
    let max_history = assemble::resolved_retention_status(release)
        .max_history
        .unwrap_or(assemble::DEFAULT_MAX_HISTORY)
        // The CRD refuses more; a Release written before it said so is held to it too.
        .clamp(1, crate::engine::api::MAX_HISTORY) as usize;
    let max = match &recorded {
        Some((history, _)) => entries_within(history, max_history, ctx.store_budget),
        None => max_history,
    };
    let history = match recorded {
        Some((history, changed))
            if history.len() > max
                || (changed
                    && ctx.known_stored.may_hold_leftovers(
                        release,
                        attempt.render_ref.as_deref(),
                        history.len(),
                    )) =>
        {
            history
        }
        _ => return,
    };
    let pin = assemble::pin_status(release).map(|p| p.render_ref);
    let mut referenced: Vec<&str> = Vec::new();
    referenced.extend(attempt.render_ref.as_deref());
    referenced.extend(pin.as_deref());
    referenced.extend(status.last_healthy.as_ref().map(|h| h.render_ref.as_str()));
    let result = async {
        let stored = store.list_renders(&id).await?;
        let plan = plan_gc(&history, &stored, max, &referenced);
        if plan.history.len() != history.len() {
            store.put_history(&id, &plan.history).await?;
        }
        for render in &plan.delete {
            store.delete_render(&id, render).await?;
        }
        Ok::<_, StoreError>(plan.delete.len())
    }
    .await;
    if result.is_ok() {
        ctx.known_stored.collected(release);
    }
    match result {
        Ok(0) => {}
        Ok(n) => tracing::debug!(release = %id, deleted = n, "render store GC"),
        Err(e) => {
            tracing::warn!(release = %id, "render store GC failed: {}", crate::engine::error::chain(&e))
        }
    }
}

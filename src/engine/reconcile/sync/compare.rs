//! Before the steps: what the inventory records, what the cluster holds, and which objects of
//! the render must be sent (the rest are applied already exactly as rendered).
//!
//! Spec: reconcile-flow.txt stageSync (the objects a step works on); DESIGN.md "Sync waves"
//! (unchanged objects are not sent again), "Ownership" (labels), "Exclusions".

use std::collections::{BTreeSet, HashMap};

use super::SyncRun;
use crate::engine::api::{ObjectKey, ReleaseInventory};
use crate::engine::apply::{Applier, ApplyError, Freshness, WhySend};
use crate::engine::content_hooks::{self, ContentHook};
use crate::engine::digest_key::DigestKey;
use crate::engine::exclusions::{self, ForCluster};
use crate::engine::inventory::{InventoryHandle, Member, members, pending_members};
use crate::engine::ownership;
use crate::engine::reconcile::ReconcileOutcome;
use crate::engine::render::Object;
use crate::engine::runtime::Context;

/// What the steps work on.
pub(super) struct SyncPlan {
    /// The inventory before this sync.
    pub previous: Option<ReleaseInventory>,
    /// Its members.
    pub recorded: Vec<Member>,
    /// The objects a stopped sync was about to apply (ReleaseInventory.pending) that are not
    /// members: applied again if the render holds them, else pruned; until then every Put
    /// keeps them pending.
    pub carried: Vec<Member>,
    /// Whether the inventory lists pending objects now.
    pub pending_in_inventory: bool,
    /// The render's content hooks (engine::content_hooks).
    pub content_hooks: Vec<ContentHook>,
    /// The objects to apply, labelled and with exclusions applied, and which to keep as is
    /// or ignore.
    pub for_cluster: ForCluster,
    /// The effective key (the one the cluster knows) of each of `for_cluster.objects`.
    pub keys: Vec<ObjectKey>,
    /// The same by the objects' own keys.
    pub effective: HashMap<ObjectKey, ObjectKey>,
    /// The live objects by effective key.
    pub live: HashMap<ObjectKey, serde_json::Value>,
    /// The objects that must be sent (changed, or not known to be unchanged).
    pub to_send: Vec<Object>,
    pub to_send_keys: BTreeSet<ObjectKey>,
    /// The effective keys of those of `to_send` applied before as rendered now, which the
    /// live objects no longer hold: drift to put back, not a change of the render or spec.
    pub drifted: BTreeSet<ObjectKey>,
    /// The key Secret digests are made with.
    pub digest_key: Option<DigestKey>,
}

impl SyncPlan {
    /// The objects to apply, each with its effective key.
    pub fn keyed(&self) -> Vec<(ObjectKey, &Object)> {
        self.keys
            .iter()
            .cloned()
            .zip(self.for_cluster.objects.iter())
            .collect()
    }

    /// The effective key of an object of the render.
    pub fn effective_key(&self, object: &Object) -> ObjectKey {
        let key = object.key();
        self.effective.get(&key).cloned().unwrap_or(key)
    }

    /// Members and carried-over pending objects: what a prune may remove.
    pub fn previous_members(&self) -> impl Iterator<Item = &Member> {
        self.recorded.iter().chain(&self.carried)
    }
}

/// Read the inventory and the live objects and decide what to send. `Err` stops the sync
/// (the inventory or the cluster cannot be read).
///
/// A daemon first compares with the live objects its watches hold (issue 21: a steady
/// Release's interval pass then reads no object from the API server; what they do not hold
/// is read at its latest); only when that finds something to send, or an `IfNotPresent`
/// object to leave as it is, does it decide again on the latest state. A watch a moment
/// behind then makes it read more, and skips no object the latest state says changed but one
/// changed by others in that moment, which the drift loop sees on its next pass (a watch on a
/// connection that died without an error can be that far behind until it is given up, after
/// `connect::WATCH_TIMEOUT_SECS` + 5 s).
pub(super) async fn compare_with_cluster(
    ctx: &Context,
    run: &SyncRun<'_>,
    applier: &Applier,
    inventory: &InventoryHandle,
) -> Result<SyncPlan, ReconcileOutcome> {
    let started = std::time::Instant::now();
    let previous = inventory
        .get_prefetched()
        .await
        .map_err(|e| run.deploy_failed(crate::engine::error::chain(&e)))?;
    let (recorded, carried) = recorded_and_carried(previous.as_ref());
    let content_hooks::Split {
        objects: to_apply,
        hooks: content_hooks,
    } = content_hooks::split(run.objects);
    // What is applied carries the owning Release in its labels (engine::ownership).
    let labelled = ownership::labelled(run.release, &to_apply);
    let mut plan = SyncPlan {
        pending_in_inventory: previous
            .as_ref()
            .is_some_and(|i| !i.spec.pending.is_empty()),
        previous,
        recorded,
        carried,
        content_hooks,
        for_cluster: ForCluster::default(),
        keys: Vec::new(),
        effective: HashMap::new(),
        live: HashMap::new(),
        to_send: Vec::new(),
        to_send_keys: BTreeSet::new(),
        drifted: BTreeSet::new(),
        digest_key: Some(ctx.inventory_digest_key().await),
    };
    let first = first_read(ctx, run.release);
    compare_live(run, applier, &labelled, &mut plan, first).await?;
    let confirm = !plan.to_send.is_empty() || !plan.for_cluster.keep_as_is.is_empty();
    if first != Freshness::Latest && confirm {
        compare_live(run, applier, &labelled, &mut plan, Freshness::Latest).await?;
    }
    tracing::debug!(
        changed = plan.to_send.len(),
        unchanged = plan.for_cluster.objects.len() - plan.to_send.len(),
        elapsed_ms = started.elapsed().as_millis() as u64,
        "compared with the cluster"
    );
    Ok(plan)
}

/// How old the first read of the live objects may be: what the process's watches hold, when
/// it has watches and the Release needs no `managedFields` to compare (exclusions by manager,
/// which those watches do not keep); else the latest.
fn first_read(ctx: &Context, release: &crate::engine::api::Release) -> Freshness {
    if ctx.watched.is_some() && !exclusions::leaves_fields_to_managers(release) {
        Freshness::Watched
    } else {
        Freshness::Latest
    }
}

/// Read the live objects as fresh as `freshness` says and fill in what the plan derives from
/// them, down to what must be sent.
async fn compare_live(
    run: &SyncRun<'_>,
    applier: &Applier,
    labelled: &[Object],
    plan: &mut SyncPlan,
    freshness: Freshness,
) -> Result<(), ReconcileOutcome> {
    let live = match applier.live_objects_as(labelled, freshness).await {
        Ok(live) => live,
        Err(e @ ApplyError::Unreachable(_)) => {
            return Err(run.deploy_failed(crate::engine::error::chain(&e)));
        }
        // Unreadable: everything counts as changed and the dry run says what it can.
        Err(_) => HashMap::new(),
    };
    // Fields and objects left to others (engine::exclusions).
    let labelled_keyed = effective_keys(applier, labelled.to_vec()).await;
    plan.for_cluster = exclusions::for_cluster(run.release, labelled_keyed, &live);
    let keyed = effective_keys(applier, plan.for_cluster.objects.iter().collect()).await;
    plan.effective = keyed.iter().map(|(k, o)| (o.key(), k.clone())).collect();
    plan.keys = keyed.into_iter().map(|(k, _)| k).collect();
    plan.live = live;
    choose_what_to_send(applier, plan).await;
    Ok(())
}

/// The inventory's members, and its pending objects that are not members.
fn recorded_and_carried(previous: Option<&ReleaseInventory>) -> (Vec<Member>, Vec<Member>) {
    let recorded: Vec<Member> = previous
        .map(|inv| members(inv).into_iter().map(Member::from_entry).collect())
        .unwrap_or_default();
    let carried: Vec<Member> = previous
        .map(pending_members)
        .unwrap_or_default()
        .into_iter()
        .filter(|p| !recorded.iter().any(|m| m.key == p.key))
        .collect();
    (recorded, carried)
}

/// Each object with the key the cluster knows it by (its own when discovery cannot say).
async fn effective_keys<O: std::borrow::Borrow<Object>>(
    applier: &Applier,
    objects: Vec<O>,
) -> Vec<(ObjectKey, O)> {
    let mut keyed = Vec::with_capacity(objects.len());
    for object in objects {
        let key = applier
            .effective_key(object.borrow())
            .await
            .unwrap_or_else(|_| object.borrow().key());
        keyed.push((key, object));
    }
    keyed
}

/// Mark what must be sent: objects whose recorded digest or live values differ from the
/// render. `IfNotPresent` objects that exist are never sent again.
async fn choose_what_to_send(applier: &Applier, plan: &mut SyncPlan) {
    let applied_digests: HashMap<ObjectKey, String> = plan
        .previous_members()
        .filter_map(|m| m.digest.clone().map(|d| (m.key.clone(), d)))
        .collect();
    let objects = &plan.for_cluster.objects;
    let why = applier
        .why_send_given_live(
            objects,
            &applied_digests,
            plan.digest_key.as_ref(),
            &plan.live,
        )
        .await;
    let sent: Vec<(&Object, WhySend, &ObjectKey)> = objects
        .iter()
        .zip(why)
        .zip(&plan.keys)
        .filter(|((_, why), key)| {
            *why != WhySend::Unchanged && !plan.for_cluster.keep_as_is.contains(*key)
        })
        .map(|((o, why), key)| (o, why, key))
        .collect();
    plan.drifted = sent
        .iter()
        .filter(|(_, why, _)| *why == WhySend::NotHeld)
        .map(|(_, _, key)| (*key).clone())
        .collect();
    let to_send: Vec<Object> = sent.iter().map(|(o, _, _)| (*o).clone()).collect();
    plan.to_send_keys = to_send.iter().map(Object::key).collect();
    plan.to_send = to_send;
}

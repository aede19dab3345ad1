//! Writes to a `ReleaseInventory`, one function per writer.
//!
//! Spec: status-ownership.txt "ReleaseInventory". The controller writes membership with two
//! field managers (`put` for `inventory`, `put_hooks` for `hooks`, so neither call clears the
//! other's list); the health loop writes per-entry health (`write_inventory_health`) and hook
//! results (`write_hook_status`). Each write sends the list-map keys plus its own fields only.

use crate::engine::error::Invalid;
use crate::engine::runtime::{Listers, cached};
use std::collections::BTreeSet;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use kube::api::{Patch, PatchParams};
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::{Map, Value, json};

use super::api::{
    FieldManager, HealthState, HookEntry, HookPhase, HookState, InventoryEntry, ObjectKey, Release,
    ReleaseInventory, field_managers, labels,
};
use super::seen_inventories::SeenInventories;
use super::ssa;

/// Why an inventory write failed.
#[derive(Debug, thiserror::Error)]
pub enum InventoryError {
    #[error("cannot write ReleaseInventory {namespace}/{name} as {manager}")]
    Write {
        namespace: String,
        name: String,
        manager: FieldManager,
        #[source]
        source: kube::Error,
    },
    /// The first write of a pass that read the inventory from the daemon's cache found it
    /// changed since (see [`crate::engine::seen_inventories`]).
    #[error(
        "ReleaseInventory {namespace}/{name} changed after this pass read it from the daemon's cache (another process wrote it); nothing was recorded from that read, and the next pass reads it from the API server"
    )]
    Changed {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("cannot read ReleaseInventory {namespace}/{name}")]
    Read {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
}

impl crate::engine::error::Categorized for InventoryError {
    fn category(&self) -> crate::engine::error::Category {
        match self {
            InventoryError::Write { source, .. }
            | InventoryError::Changed { source, .. }
            | InventoryError::Read { source, .. } => crate::engine::error::kube_category(source),
        }
    }
}

/// The ReleaseInventory of one Release: same namespace and name.
#[derive(Clone)]
pub struct InventoryHandle {
    api: Api<ReleaseInventory>,
    namespace: String,
    name: String,
    owner: Option<OwnerReference>,
    /// A read made while the render ran (see `prefetch`), taken once by `get_prefetched`.
    prefetched: std::sync::Arc<std::sync::Mutex<Option<Option<ReleaseInventory>>>>,
    /// Whether the inventory this handle last read or wrote had hook entries (`None`:
    /// nothing read or written yet). Only the controller adds hook entries, so a reconcile
    /// that saw none and added none knows there are none ([`InventoryHandle::known_without_hooks`]).
    hooks_seen: std::sync::Arc<std::sync::Mutex<Option<bool>>>,
    /// The versions this process last saw of each inventory; this handle's reads and writes
    /// keep it up to date ([`InventoryHandle::remembering`]).
    seen: Option<std::sync::Arc<SeenInventories>>,
    /// A copy read from the daemon's cache that no write has landed on yet: the controller's
    /// next write carries its uid and resourceVersion as preconditions.
    unproven: std::sync::Arc<std::sync::Mutex<Option<ReleaseInventory>>>,
    /// Set when a write was refused because the copy was stale (see `apply_again`).
    refused: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

/// What the controller records for an applied object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub key: ObjectKey,
    pub render_ref: String,
    pub wave: i32,
    /// The applied object's digest (`render_ref::object_digest`), when known.
    pub digest: Option<String>,
}

impl Member {
    /// The member an inventory entry records.
    pub fn from_entry(entry: &InventoryEntry) -> Self {
        Self {
            key: entry.key(),
            render_ref: entry.render_ref.clone().unwrap_or_default(),
            wave: entry.wave.unwrap_or(0),
            digest: entry.digest.clone(),
        }
    }
}

/// What the controller records for an armed hook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookMember {
    pub name: String,
    pub phase: HookPhase,
    pub workload_name: String,
    pub created_at: Time,
    pub render_ref: String,
}

/// What the health loop records for an entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryHealth {
    pub key: ObjectKey,
    /// The rules that judged the object (`set/rule`, `built-in/rule`), if any matched.
    pub rule: Option<String>,
    pub state: HealthState,
    pub message: Option<String>,
    pub first_unhealthy: Option<Time>,
    pub assessed_render_ref: Option<String>,
}

/// What the health loop records for a hook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookResult {
    pub name: String,
    pub phase: HookPhase,
    pub state: HookState,
    pub message: Option<String>,
    pub finished_at: Option<Time>,
}

impl InventoryHandle {
    /// The inventory of `release`, owned by it (garbage-collected should the finalizer be
    /// bypassed).
    pub fn for_release(client: Client, release: &Release) -> Self {
        let namespace = release.namespace().unwrap_or_default();
        let owner = release.controller_owner_ref(&()).map(|mut o| {
            // The inventory must not block the Release's deletion; finalize deletes it itself.
            o.controller = Some(false);
            o.block_owner_deletion = Some(false);
            o
        });
        Self {
            api: Api::namespaced(client, &namespace),
            name: release.name_any(),
            namespace,
            owner,
            prefetched: Default::default(),
            hooks_seen: Default::default(),
            seen: None,
            unproven: Default::default(),
            refused: Default::default(),
        }
    }

    /// The inventory of `release` as the controller of `ctx` reads and writes it: the versions
    /// it reads at the latest and writes are remembered (only the controller's: its passes of
    /// one Release run one at a time, so the last one remembered is the last one seen).
    pub fn for_controller(ctx: &crate::engine::runtime::Context, release: &Release) -> Self {
        Self::for_release(ctx.home.client.clone(), release)
            .remembering(ctx.seen_inventories.clone())
    }

    /// The inventory named `name` in `namespace`, without an owner (tests, tools).
    pub fn new(client: Client, namespace: &str, name: &str) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_string(),
            name: name.to_string(),
            owner: None,
            prefetched: Default::default(),
            hooks_seen: Default::default(),
            seen: None,
            unproven: Default::default(),
            refused: Default::default(),
        }
    }

    /// Keep `seen` up to date with what this handle reads at the latest and writes, so the
    /// controller may take the inventory from the daemon's cache
    /// ([`InventoryHandle::prefetch_cached`]).
    pub fn remembering(mut self, seen: std::sync::Arc<SeenInventories>) -> Self {
        self.seen = Some(seen);
        self
    }

    pub fn api(&self) -> &Api<ReleaseInventory> {
        &self.api
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Read the inventory; `None` when there is none yet.
    /// Read the inventory now, for `get_prefetched`: the reconcile reads it while the render
    /// runs instead of after (a large inventory takes the API server a while to serve). A
    /// failed read is not kept; `get_prefetched` then reads again and reports it.
    pub async fn prefetch(&self) {
        if let Ok(read) = self.get().await {
            *self.slot() = Some(read);
        }
    }

    /// `prefetch` for the controller of a daemon: the copy in the daemon's cache when it is the
    /// version this process last read or wrote (issue 21: a steady pass then asks the API
    /// server nothing), else the API server. The pass's first write lands only on that version
    /// (see [`crate::engine::seen_inventories`]).
    pub async fn prefetch_cached(&self, listers: Option<&dyn Listers>) {
        match self.last_seen_in(listers) {
            Some(hit) => {
                *crate::engine::locks::lock(&self.unproven) = Some(hit.clone());
                self.saw(Some(&hit));
                *self.slot() = Some(Some(hit));
            }
            None => self.prefetch().await,
        }
    }

    /// The cached copy, when it is the version this process last saw.
    fn last_seen_in(&self, listers: Option<&dyn Listers>) -> Option<ReleaseInventory> {
        let seen = self.seen.as_ref()?;
        let hit = cached::<ReleaseInventory>(listers, &self.namespace, &self.name)?;
        seen.is_last_seen(
            &self.namespace,
            &self.name,
            hit.metadata.uid.as_deref().unwrap_or_default(),
            hit.metadata.resource_version.as_deref().unwrap_or_default(),
        )
        .then(|| ReleaseInventory::clone(&hit))
    }

    /// The prefetched read if there is one (once), else a fresh read.
    pub async fn get_prefetched(&self) -> Result<Option<ReleaseInventory>, InventoryError> {
        let taken = self.slot().take();
        match taken {
            Some(read) => Ok(read),
            None => self.get().await,
        }
    }

    /// The prefetched read without taking it (a copy), else a fresh read.
    pub async fn peek_prefetched(&self) -> Result<Option<ReleaseInventory>, InventoryError> {
        let peeked = self.slot().clone();
        match peeked {
            Some(read) => Ok(read),
            None => self.get().await,
        }
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Option<Option<ReleaseInventory>>> {
        crate::engine::locks::lock(&self.prefetched)
    }

    /// The inventory as the observer loops read it (health-loop.txt: "It reads the
    /// ReleaseInventory from the cache"): from the process's cache when it holds it and the
    /// copy agrees with `release` as cached, else from the API server. Agrees: every entry
    /// carries the render the Release last attempted and applied, and nothing is pending.
    /// The Release and its inventory come from two watches, either may be the later one; a
    /// copy that lags a render's apply (or a Release that lags it) is read again, so a
    /// verdict never rests on an old inventory beside a new status. In the steady state they
    /// agree and the cache answers. The health loop's writes carry the resourceVersion read,
    /// so a copy behind its own last write costs a conflict and a retry, never a lost write
    /// (a daemon keeps the health pass off while its controller syncs the same Release, which
    /// is where those conflicts came from; `daemon::syncing`).
    /// The controller reads differently: [`InventoryHandle::prefetch_cached`] (its prune works
    /// on the inventory).
    pub async fn get_cached(
        &self,
        listers: Option<&dyn Listers>,
        release: &Release,
    ) -> Result<Option<ReleaseInventory>, InventoryError> {
        match cached::<ReleaseInventory>(listers, &self.namespace, &self.name) {
            Some(hit) if agrees(&hit, release) => Ok(Some(ReleaseInventory::clone(&hit))),
            _ => self.get().await,
        }
    }

    pub async fn get(&self) -> Result<Option<ReleaseInventory>, InventoryError> {
        let read = self
            .api
            .get_opt(&self.name)
            .await
            .map_err(|source| InventoryError::Read {
                namespace: self.namespace.clone(),
                name: self.name.clone(),
                source,
            })?;
        self.saw(read.as_ref());
        self.remember(read.as_ref());
        self.reread(read.as_ref());
        Ok(read)
    }

    /// A read at the latest during a pass that started from a cached copy: when it records
    /// what the copy records (in what the controller decides from), the pass's later writes
    /// are guarded by this read's version instead; otherwise the guard stays on the copy's,
    /// and the pass's next write fails (it would mix decisions made from two versions).
    fn reread(&self, latest: Option<&ReleaseInventory>) {
        let mut unproven = crate::engine::locks::lock(&self.unproven);
        let Some(copy) = unproven.as_ref() else {
            return;
        };
        if let Some(latest) = latest
            && latest.metadata.uid == copy.metadata.uid
            && controllers_part(latest) == controllers_part(copy)
        {
            *unproven = Some(latest.clone());
        }
    }

    /// The prefetched inventory at its latest, for a decision that rests on the health
    /// loop's states (a rollout in progress finishing or timing out): a copy from the cache
    /// may be a moment behind an observer in another process. The pass then goes on from
    /// this read.
    pub async fn refresh_prefetched(&self) -> Result<Option<ReleaseInventory>, InventoryError> {
        let from_cache = crate::engine::locks::lock(&self.unproven).is_some();
        if !from_cache {
            return self.peek_prefetched().await;
        }
        let latest = self.get().await?;
        *crate::engine::locks::lock(&self.unproven) = None;
        *self.slot() = Some(latest.clone());
        Ok(latest)
    }

    fn saw(&self, inventory: Option<&ReleaseInventory>) {
        *crate::engine::locks::lock(&self.hooks_seen) =
            Some(inventory.is_some_and(|i| !i.spec.hooks.is_empty()));
    }

    /// Record the version just read at the latest or written (none: forget it).
    fn remember(&self, inventory: Option<&ReleaseInventory>) {
        let Some(seen) = &self.seen else { return };
        match inventory.and_then(|i| {
            Some((
                i.metadata.uid.as_deref()?,
                i.metadata.resource_version.as_deref()?,
            ))
        }) {
            Some((uid, rv)) => seen.saw(&self.namespace, &self.name, uid, rv),
            None => seen.forget(&self.namespace, &self.name),
        }
    }

    /// Whether the inventory this handle last read or wrote had no hook entries (and it read
    /// or wrote one at all).
    pub fn known_without_hooks(&self) -> bool {
        *crate::engine::locks::lock(&self.hooks_seen) == Some(false)
    }

    /// Delete the inventory (finalize step 5); absent is fine.
    pub async fn delete(&self) -> Result<(), InventoryError> {
        self.remember(None);
        match self.api.delete(&self.name, &Default::default()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            Err(source) => Err(InventoryError::Write {
                namespace: self.namespace.clone(),
                name: self.name.clone(),
                manager: field_managers::INVENTORY,
                source,
            }),
        }
    }

    /// `inventory.Put`: record exactly `members` as the applied set (reconcile-flow.txt
    /// stageSync steps 4 and 6). Entries not in `members` leave the inventory, even those the
    /// health loop wrote state on.
    pub async fn put(&self, members: &[Member]) -> Result<ReleaseInventory, InventoryError> {
        self.put_with_pending(members, &[]).await
    }

    /// `put`, also recording `pending`: the objects about to be applied (they are cleared by
    /// the next `put`). A crash between the two leaves them known for the next prune.
    pub async fn put_with_pending(
        &self,
        members: &[Member],
        pending: &[ObjectKey],
    ) -> Result<ReleaseInventory, InventoryError> {
        let entries: Vec<Value> = members
            .iter()
            .map(|m| {
                let mut e = key_fields(&m.key);
                e.insert("renderRef".into(), json!(m.render_ref));
                e.insert("wave".into(), json!(m.wave));
                if let Some(d) = &m.digest {
                    e.insert("digest".into(), json!(d));
                }
                Value::Object(e)
            })
            .collect();
        let mut patch = self.skeleton();
        patch["inventory"] = Value::Array(entries);
        if !pending.is_empty() {
            patch["pending"] = Value::Array(pending_entries(pending));
        }
        let started = std::time::Instant::now();
        let written = self.apply(field_managers::INVENTORY, &patch).await?;
        // A large inventory's Put is a visible part of a sync (`sync_vs_flux_ssa`'s trace).
        tracing::debug!(
            members = members.len(),
            pending = pending.len(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "inventory written"
        );
        let keep: BTreeSet<ObjectKey> = members.iter().map(|m| m.key.clone()).collect();
        self.remove_entries_not_in(written, &keep).await
    }

    /// `inventory.PutHooks`: record exactly `hooks` as the armed hooks.
    pub async fn put_hooks(
        &self,
        hooks: &[HookMember],
    ) -> Result<ReleaseInventory, InventoryError> {
        let entries: Vec<Value> = hooks
            .iter()
            .map(|h| {
                json!({
                    "name": h.name,
                    "phase": h.phase,
                    "workloadName": h.workload_name,
                    "createdAt": h.created_at,
                    "renderRef": h.render_ref,
                })
            })
            .collect();
        let mut patch = self.skeleton();
        patch["hooks"] = Value::Array(entries);
        let written = self.apply(field_managers::INVENTORY_HOOKS, &patch).await?;
        let keep: BTreeSet<(String, HookPhase)> =
            hooks.iter().map(|h| (h.name.clone(), h.phase)).collect();
        self.remove_hooks_not_in(written, &keep).await
    }

    /// `writeInventoryHealth` (health-loop.txt "Writes"): state, message, firstUnhealthy and
    /// assessedRenderRef of each entry, under `convoy-health-inventory`. `read` is the inventory
    /// the assessment was made from; its uid and resourceVersion are preconditions, so a write never
    /// resurrects a deleted inventory or lands on a membership it did not see. An empty set
    /// writes nothing.
    pub async fn write_inventory_health(
        &self,
        read: &ReleaseInventory,
        results: &[EntryHealth],
    ) -> Result<Option<ReleaseInventory>, InventoryError> {
        if results.is_empty() {
            return Ok(None);
        }
        // Nothing new to say: no write (a steady Release costs no writes).
        let unchanged = results.len() == read.spec.inventory.len()
            && results.iter().all(|r| {
                read.spec.inventory.iter().any(|e| {
                    e.key() == r.key
                        && e.state == Some(r.state)
                        && e.message == r.message
                        && e.first_unhealthy == r.first_unhealthy
                        && e.assessed_render_ref == r.assessed_render_ref
                        && e.rule == r.rule
                })
            });
        if unchanged {
            return Ok(None);
        }
        let entries: Vec<Value> = results
            .iter()
            .map(|r| {
                let mut e = key_fields(&r.key);
                e.insert("state".into(), json!(r.state));
                if let Some(m) = &r.message {
                    e.insert("message".into(), json!(m));
                }
                if let Some(t) = &r.first_unhealthy {
                    e.insert("firstUnhealthy".into(), json!(t));
                }
                if let Some(a) = &r.assessed_render_ref {
                    e.insert("assessedRenderRef".into(), json!(a));
                }
                if let Some(rule) = &r.rule {
                    e.insert("rule".into(), json!(rule));
                }
                Value::Object(e)
            })
            .collect();
        let mut patch = self.skeleton_at(read);
        patch["inventory"] = Value::Array(entries);
        self.apply(field_managers::HEALTH_INVENTORY, &patch)
            .await
            .map(Some)
    }

    /// `writeHookStatus`: state, message and finishedAt of every hook that has a state (not
    /// only the polled ones: an omitted entry would lose its finishedAt), under
    /// `convoy-hook-status`, with the same precondition as [`Self::write_inventory_health`].
    pub async fn write_hook_status(
        &self,
        read: &ReleaseInventory,
        results: &[HookResult],
    ) -> Result<Option<ReleaseInventory>, InventoryError> {
        if results.is_empty() {
            return Ok(None);
        }
        let entries: Vec<Value> = results
            .iter()
            .map(|r| {
                let mut e = Map::new();
                e.insert("name".into(), json!(r.name));
                e.insert("phase".into(), json!(r.phase));
                e.insert("state".into(), json!(r.state));
                if let Some(m) = &r.message {
                    e.insert("message".into(), json!(m));
                }
                if let Some(t) = &r.finished_at {
                    e.insert("finishedAt".into(), json!(t));
                }
                Value::Object(e)
            })
            .collect();
        let mut patch = self.skeleton_at(read);
        patch["hooks"] = Value::Array(entries);
        self.apply(field_managers::HOOK_STATUS, &patch)
            .await
            .map(Some)
    }

    fn skeleton(&self) -> Value {
        let mut metadata = json!({
            "name": self.name,
            "namespace": self.namespace,
            "labels": {
                labels::RELEASE_NAME: self.name,
                labels::RELEASE_NAMESPACE: self.namespace,
            },
        });
        if let Some(owner) = &self.owner {
            metadata["ownerReferences"] = json!([owner]);
        }
        // Read from the daemon's cache: land only on that version, or fail (the uid also keeps
        // a deleted inventory from being re-created from the copy).
        if let Some(copy) = crate::engine::locks::lock(&self.unproven).as_ref() {
            metadata["uid"] = json!(copy.uid().unwrap_or_default());
            metadata["resourceVersion"] = json!(copy.resource_version().unwrap_or_default());
        }
        json!({
            "apiVersion": ReleaseInventory::api_version(&()),
            "kind": ReleaseInventory::kind(&()),
            "metadata": metadata,
        })
    }

    /// The health loop's skeleton: no labels or owners (the controller's), and the uid and
    /// resourceVersion it read as preconditions (an apply with only a resourceVersion would
    /// re-create a deleted inventory; the uid makes it fail instead).
    fn skeleton_at(&self, read: &ReleaseInventory) -> Value {
        json!({
            "apiVersion": ReleaseInventory::api_version(&()),
            "kind": ReleaseInventory::kind(&()),
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "resourceVersion": read.resource_version(),
                "uid": read.uid(),
            },
        })
    }

    async fn apply(
        &self,
        manager: FieldManager,
        patch: &Value,
    ) -> Result<ReleaseInventory, InventoryError> {
        // Whether this write carries the preconditions of a cached read (see `skeleton`).
        let unproven = patch["metadata"]["resourceVersion"].is_string()
            && crate::engine::locks::lock(&self.unproven).is_some();
        let written = match ssa::apply(&self.api, &self.name, manager, patch).await {
            Ok(written) => written,
            Err(source) if unproven => self.apply_again(manager, patch, source).await?,
            Err(source) => {
                return Err(InventoryError::Write {
                    namespace: self.namespace.clone(),
                    name: self.name.clone(),
                    manager,
                    source,
                });
            }
        };
        if unproven {
            *crate::engine::locks::lock(&self.unproven) = None;
        }
        self.saw(Some(&written));
        self.remember(Some(&written));
        Ok(written)
    }

    /// A write on a cached copy was refused (`refused`): the copy was not the latest. When the
    /// latest differs from it only in what other writers own (the health loop's entry and hook
    /// states, written by an observer in another process), what the pass decided from the copy
    /// stands: write again on the latest version. Otherwise, or when the inventory is gone,
    /// the pass ends with [`InventoryError::Changed`] and the next one reads the API server.
    async fn apply_again(
        &self,
        manager: FieldManager,
        patch: &Value,
        refused: kube::Error,
    ) -> Result<ReleaseInventory, InventoryError> {
        // Whatever happens now, the copy is not trusted again: the next read is the latest.
        self.remember(None);
        let write_failed = |source| InventoryError::Write {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            manager,
            source,
        };
        // A 409 proves the write did not land; anything else is reported as it is.
        let changed = |source| {
            self.refused
                .store(true, std::sync::atomic::Ordering::SeqCst);
            InventoryError::Changed {
                namespace: self.namespace.clone(),
                name: self.name.clone(),
                source,
            }
        };
        if !is_conflict(&refused) {
            return Err(write_failed(refused));
        }
        let copy = self.slot_copy();
        let latest = match self.api.get_opt(&self.name).await {
            Ok(Some(latest)) => latest,
            _ => return Err(changed(refused)),
        };
        let same_object = latest.metadata.uid.is_some()
            && latest.metadata.uid == copy.as_ref().and_then(|c| c.metadata.uid.clone());
        if !same_object || copy.is_none_or(|c| controllers_part(&c) != controllers_part(&latest)) {
            return Err(changed(refused));
        }
        let mut patch = patch.clone();
        patch["metadata"]["resourceVersion"] = json!(latest.resource_version());
        ssa::apply(&self.api, &self.name, manager, &patch)
            .await
            .map_err(|e| {
                if is_conflict(&e) {
                    changed(e)
                } else {
                    write_failed(e)
                }
            })
    }

    /// Whether a write of this pass was refused because the copy it was made from was not the
    /// latest (so that write did not land).
    pub fn refused_on_a_stale_copy(&self) -> bool {
        self.refused.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The copy the pass read from the cache (kept beside its preconditions).
    fn slot_copy(&self) -> Option<ReleaseInventory> {
        crate::engine::locks::lock(&self.unproven).clone()
    }

    /// SSA keeps a list-map entry while any manager owns a field of it, so an entry the health
    /// loop wrote state on would outlive its removal from `put`. Membership is the controller's
    /// to decide: remove such entries with a JSON patch guarded by the resourceVersion read.
    async fn remove_entries_not_in(
        &self,
        written: ReleaseInventory,
        keep: &BTreeSet<ObjectKey>,
    ) -> Result<ReleaseInventory, InventoryError> {
        let stale: Vec<usize> = written
            .spec
            .inventory
            .iter()
            .enumerate()
            .filter(|(_, e)| !keep.contains(&e.key()))
            .map(|(i, _)| i)
            .collect();
        if stale.is_empty() {
            return Ok(written);
        }
        self.remove_indices(&written, "inventory", &stale, field_managers::INVENTORY)
            .await
    }

    async fn remove_hooks_not_in(
        &self,
        written: ReleaseInventory,
        keep: &BTreeSet<(String, HookPhase)>,
    ) -> Result<ReleaseInventory, InventoryError> {
        let stale: Vec<usize> = written
            .spec
            .hooks
            .iter()
            .enumerate()
            .filter(|(_, h): &(usize, &HookEntry)| !keep.contains(&(h.name.clone(), h.phase)))
            .map(|(i, _)| i)
            .collect();
        if stale.is_empty() {
            return Ok(written);
        }
        self.remove_indices(&written, "hooks", &stale, field_managers::INVENTORY_HOOKS)
            .await
    }

    async fn remove_indices(
        &self,
        written: &ReleaseInventory,
        list: &str,
        indices: &[usize],
        manager: FieldManager,
    ) -> Result<ReleaseInventory, InventoryError> {
        use json_patch::{PatchOperation, RemoveOperation, TestOperation};
        use jsonptr::PointerBuf;
        let mut ops = vec![PatchOperation::Test(TestOperation {
            path: PointerBuf::from_tokens(["metadata", "resourceVersion"]),
            value: json!(written.resource_version()),
        })];
        // Highest index first, so earlier removals do not shift later ones.
        for i in indices.iter().rev() {
            ops.push(PatchOperation::Remove(RemoveOperation {
                path: PointerBuf::from_tokens([list.to_string(), i.to_string()]),
            }));
        }
        let patch = json_patch::Patch(ops);
        let params = PatchParams {
            field_manager: Some(manager.as_str().to_string()),
            ..Default::default()
        };
        let written = self
            .api
            .patch(&self.name, &params, &Patch::<()>::Json(patch))
            .await
            .map_err(|source| InventoryError::Write {
                namespace: self.namespace.clone(),
                name: self.name.clone(),
                manager,
                source,
            })?;
        self.saw(Some(&written));
        self.remember(Some(&written));
        Ok(written)
    }
}

/// Whether a cached inventory agrees with the Release's cached status (see
/// [`InventoryHandle::get_cached`]).
fn agrees(inventory: &ReleaseInventory, release: &Release) -> bool {
    let Some(status) = release.status.as_ref() else {
        return false;
    };
    let applied = status.applied_render();
    applied.is_some()
        && status.attempted_render() == applied
        && inventory.spec.pending.is_empty()
        && inventory
            .spec
            .inventory
            .iter()
            .all(|e| e.render_ref.as_deref() == applied)
}

fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

/// The list-map keys of an inventory entry, always all four (empty strings included).
fn key_fields(key: &ObjectKey) -> Map<String, Value> {
    let mut e = Map::new();
    e.insert("group".into(), json!(key.group));
    e.insert("kind".into(), json!(key.kind));
    e.insert("namespace".into(), json!(key.namespace));
    e.insert("name".into(), json!(key.name));
    e
}

/// The members the controller recorded: entries that carry its renderRef. An entry with only
/// health fields is a leftover of a race with the health loop and is not a member.
/// The most bytes one ReleaseInventory may take: etcd's default request limit (1.5 MiB), with
/// room for the object's own metadata.
pub const MAX_INVENTORY_BYTES: usize = 1_400_000;

/// About how many bytes an entry of `key` takes in the stored inventory once both of its
/// writers have written their fields: the keys (in the entry and in each writer's
/// `managedFields`), two renderRefs, a digest, a health state, message, rule and time. (Measured
/// on the test control plane: 1,000 entries of 34-byte keys took 629 KB, 630 bytes each.)
pub fn entry_bytes(key: &ObjectKey) -> usize {
    let keys = key.group.len() + key.kind.len() + key.namespace.len() + key.name.len();
    3 * (keys + 50) + 2 * 64 + 48 + 200
}

/// Refuse a set of objects the inventory could not record: nothing may be applied that the
/// inventory cannot hold (else it could never be pruned). About 2,000 objects of ordinary
/// names fit.
pub fn check_capacity(keys: &[ObjectKey]) -> Result<(), Invalid> {
    let bytes: usize = keys.iter().map(entry_bytes).sum();
    if bytes <= MAX_INVENTORY_BYTES {
        return Ok(());
    }
    let per = bytes / keys.len().max(1);
    Err(Invalid(format!(
        "the render has {} objects; recording them would take its ReleaseInventory to about {:.1} MiB, over the {:.1} MiB one object may hold (about {} objects of this size): split the Release (for example by path) so each records fewer",
        keys.len(),
        bytes as f64 / (1024.0 * 1024.0),
        MAX_INVENTORY_BYTES as f64 / (1024.0 * 1024.0),
        MAX_INVENTORY_BYTES / per.max(1)
    )))
}

/// `pending` as the inventory's entries, each key once. `pending` is a list map keyed by the
/// object's key, and the API server refuses an apply that names a key twice; a sync that
/// resumes after an interrupted one sends again what the last one left pending, so the
/// callers' lists (carried over + sending) can hold a key twice.
fn pending_entries(pending: &[ObjectKey]) -> Vec<Value> {
    let unique: BTreeSet<&ObjectKey> = pending.iter().collect();
    unique
        .into_iter()
        .map(|k| Value::Object(key_fields(k)))
        .collect()
}

/// The objects a sync was about to apply when it stopped (see `ReleaseInventory.pending`),
/// as members of no render: the next sync applies them again or prunes them.
pub fn pending_members(inventory: &ReleaseInventory) -> Vec<Member> {
    inventory
        .spec
        .pending
        .iter()
        .map(|p| Member {
            key: p.key(),
            render_ref: String::new(),
            wave: 0,
            digest: None,
        })
        .collect()
}

/// What the controller decides from and writes in an inventory: its members (keys, render,
/// wave, digest), the pending objects and the armed hooks; not the health loop's states.
#[allow(clippy::type_complexity)]
fn controllers_part(
    inventory: &ReleaseInventory,
) -> (
    Vec<Member>,
    Vec<ObjectKey>,
    Vec<(&str, HookPhase, Option<&str>, Option<&Time>, Option<&str>)>,
) {
    let mut members: Vec<Member> = members(inventory)
        .into_iter()
        .map(Member::from_entry)
        .collect();
    members.sort_by(|a, b| a.key.cmp(&b.key));
    let mut pending: Vec<ObjectKey> = inventory.spec.pending.iter().map(|p| p.key()).collect();
    pending.sort();
    let mut hooks: Vec<_> = inventory
        .spec
        .hooks
        .iter()
        .map(|h| {
            (
                h.name.as_str(),
                h.phase,
                h.workload_name.as_deref(),
                h.created_at.as_ref(),
                h.render_ref.as_deref(),
            )
        })
        .collect();
    hooks.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
    (members, pending, hooks)
}

pub fn members(inventory: &ReleaseInventory) -> Vec<&InventoryEntry> {
    inventory
        .spec
        .inventory
        .iter()
        .filter(|e| e.render_ref.is_some())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> ObjectKey {
        ObjectKey {
            kind: "ConfigMap".into(),
            namespace: "ns".into(),
            name: name.into(),
            ..Default::default()
        }
    }

    /// A sync resuming an interrupted one sends again what was left pending: the API server
    /// refuses a `pending` list naming a key twice, which kept such a Release DeployFailed.
    #[test]
    fn pending_names_each_object_once() {
        let entries = pending_entries(&[key("a"), key("b"), key("a")]);
        let names: Vec<&str> = entries
            .iter()
            .map(|e| e["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["a", "b"]);
    }

    /// A cached inventory is used only beside a Release status it agrees with: the health
    /// loop must not judge an old render's entries as the render just applied.
    #[test]
    fn a_cached_inventory_is_used_only_when_it_agrees_with_the_status() {
        let release = |attempted: Option<&str>, applied: Option<&str>| -> Release {
            let attempt = |r: Option<&str>| r.map(|r| json!({"renderRef": r}));
            serde_json::from_value(json!({
                "apiVersion": "core.convoy.kumodo.io/v1alpha1", "kind": "Release",
                "metadata": {"name": "web", "namespace": "apps"},
                "spec": {"source": {"kind": "GitRepository", "name": "repo"}},
                "status": {"lastAttempted": attempt(attempted), "lastSuccessful": attempt(applied)},
            }))
            .unwrap()
        };
        let inventory = |renders: &[&str], pending: bool| -> ReleaseInventory {
            let entries: Vec<Value> = renders
                .iter()
                .enumerate()
                .map(|(i, r)| json!({"group": "", "kind": "ConfigMap", "namespace": "apps", "name": format!("c{i}"), "renderRef": r}))
                .collect();
            let pending: Vec<Value> = if pending {
                vec![json!({"group": "", "kind": "ConfigMap", "namespace": "apps", "name": "next"})]
            } else {
                Vec::new()
            };
            serde_json::from_value(json!({
                "apiVersion": "core.convoy.kumodo.io/v1alpha1", "kind": "ReleaseInventory",
                "metadata": {"name": "web", "namespace": "apps"},
                "inventory": entries,
                "pending": pending,
            }))
            .unwrap()
        };
        let steady = release(Some("r2"), Some("r2"));
        assert!(agrees(&inventory(&["r2", "r2"], false), &steady));
        // The inventory behind the status (the render just applied), or ahead of it.
        assert!(!agrees(&inventory(&["r1", "r2"], false), &steady));
        assert!(!agrees(
            &inventory(&["r2"], false),
            &release(Some("r2"), Some("r1"))
        ));
        // A wave in flight, a render not applied yet, a Release never applied.
        assert!(!agrees(&inventory(&["r2"], true), &steady));
        assert!(!agrees(
            &inventory(&["r1"], false),
            &release(Some("r2"), Some("r1"))
        ));
        assert!(!agrees(&inventory(&[], false), &release(None, None)));
    }
}

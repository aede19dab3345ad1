//! The live objects of the Releases this replica works on, kept by watches, so the drift and
//! health loops' periodic reads cost no request (issue 21, "reads bounded by watches").
//!
//! One label-selected watch (`convoy.kumodo.io/release`) per kind and target client, started
//! the first time a loop reads an object of that kind there, run with that client's identity.
//! An identity that may not watch the kind across the cluster (a tenant's impersonated
//! ServiceAccount) gets a watch per namespace it reads from instead, and one that may not
//! watch there either answers nothing: RBAC decides what the watches see, as it decides what
//! the GETs they replace see. Objects are kept as compact JSON without `managedFields`: a
//! parsed `serde_json::Value` costs about ten times its text, and the budget is 40 KiB per
//! Release held. Only the objects of Releases this replica works on are kept; a shard taken
//! or given up lists again.
//!
//! Anyone who may create objects can put convoy's label on them, so what the watches hold is
//! bounded whatever the cluster holds: at most [`Limits::bytes`] of objects per process and
//! [`Limits::object_bytes`] per object, at most [`Limits::watches`] watches (each holds a
//! connection). Past a bound, reads go to the API server, as without watches; the daemon's
//! memory does not grow with what others label. Of an object convoy applied that is past a
//! bound, a mark (its Release and what convoy applied, about 200 bytes) is kept if the
//! allowance takes it, so a change to it still wakes the drift loop (below).
//!
//! The engine asks through [`WatchedObjects`]; whatever a watch cannot vouch for (not listed
//! yet, failing, or not among the kept objects) is read from the API server as before.
//!
//! The same watches tell the drift loop when someone else changed what convoy applied, so a
//! `kubectl edit` shows as `InSync=False` (and is put back in automatic mode) within seconds,
//! as Argo CD's self-heal does, not at the next interval. Not every change is drift: status,
//! another controller's annotation (a Deployment's revision) or another team's field are not,
//! and a drift pass is a dry run per object. A change counts when fields convoy applied
//! (`convoy-release`'s Apply entry in `managedFields`) left convoy without convoy writing:
//! the server moves a field to whoever changes its value (an update takes it, a forced apply
//! takes it), and stamps convoy's entry with the time of each write of convoy's that changed
//! the object. So convoy's fields changing while convoy's time stays is someone else's
//! doing; and a kept object deleted is drift too. [`Notice`] is told the Release.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::{ApiResource, DynamicObject, TypeMeta};
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, ResourceExt};
use tokio::task::AbortHandle;

use crate::engine::api::labels::{RELEASE_NAME, RELEASE_NAMESPACE};
use crate::engine::api::{ObjectKey, field_managers};
use crate::engine::apply::{WatchedObjects, WatchedTargets};
use crate::engine::connect::Connection;
use crate::engine::locks;
use crate::engine::tenant_cache::Holder;

/// Whether the objects of a Release (namespace, name) are kept.
pub type Keep = Arc<dyn Fn(&str, &str) -> bool + Send + Sync>;

/// Told of an object whose applied fields someone else changed, or that was deleted or
/// relabelled away from its Release (see the module doc).
pub type Notice = Arc<dyn Fn(&Changed) + Send + Sync>;

/// An object convoy applied that someone else changed, the Release its labels named, the
/// API server it is on (a Release's objects are on the one its last attempt resolved), and
/// the Cluster (namespace, name) whose kubeconfig the watch that saw it connects with: `None`
/// for the daemon's own credentials (its identity, or a ServiceAccount it impersonates).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Changed {
    pub server: String,
    pub cluster: Option<(String, String)>,
    pub release_namespace: String,
    pub release_name: String,
    pub object: ObjectKey,
}

/// The first wait before a failed watch lists again; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(300);
/// How long a watch the API server refused (403) stays refused before it is tried again (a
/// RoleBinding made after the Release).
const FORBIDDEN_RETRY: Duration = Duration::from_secs(300);

/// What the watches of one process may hold.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Bytes of kept objects in all (their compact JSON).
    pub bytes: usize,
    /// Bytes of one kept object: a larger one is read from the API server.
    pub object_bytes: usize,
    /// Watches in all, across every target client.
    pub watches: usize,
}

impl Default for Limits {
    /// 64 MiB (an eighth of the installed daemon's memory limit; `scale_10k` keeps about
    /// 3.5 MiB per replica), 256 KiB per object, 256 watches.
    fn default() -> Self {
        Self {
            bytes: 64 << 20,
            object_bytes: 256 << 10,
            watches: 256,
        }
    }
}

/// A count that may not go below zero, shared by every watch of a process: bytes or watches
/// still allowed.
#[derive(Debug)]
struct Allowance(AtomicUsize);

impl Allowance {
    /// Take `n` if that much is left.
    fn take(&self, n: usize) -> bool {
        self.0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |left| {
                left.checked_sub(n)
            })
            .is_ok()
    }

    fn give(&self, n: usize) {
        self.0.fetch_add(n, Ordering::AcqRel);
    }
}

/// How long after a shard changed hands the watches list again: a takeover's changed
/// Releases are worked on first, without several lists of the whole fleet's objects beside
/// them; until then the new shard's objects are read from the API server.
pub const RELIST_DELAY: Duration = Duration::from_secs(60);

/// Every target client's watches (the engine's [`WatchedTargets`]).
pub struct LiveTargets {
    keep: Keep,
    notice: Option<Notice>,
    made: Mutex<Vec<Weak<LiveObjects>>>,
    /// Relists asked for so far (only the last one asked within [`RELIST_DELAY`] runs).
    relists: AtomicU64,
    allowed: Arc<Allowed>,
}

/// What is still allowed of [`Limits`].
#[derive(Debug)]
struct Allowed {
    bytes: Allowance,
    watches: Allowance,
    object_bytes: usize,
}

/// One watch's share of [`Limits::watches`], given back when its task ends (refused, aborted,
/// or never started).
struct Slot(Arc<Allowed>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.watches.give(1);
    }
}

impl Allowed {
    fn new(limits: Limits) -> Self {
        Self {
            bytes: Allowance(AtomicUsize::new(limits.bytes)),
            watches: Allowance(AtomicUsize::new(limits.watches)),
            object_bytes: limits.object_bytes,
        }
    }
}

impl LiveTargets {
    pub fn new(keep: Keep) -> Self {
        Self::with_limits(keep, Limits::default())
    }

    pub fn with_limits(keep: Keep, limits: Limits) -> Self {
        Self {
            keep,
            notice: None,
            made: Mutex::default(),
            relists: AtomicU64::new(0),
            allowed: Arc::new(Allowed::new(limits)),
        }
    }

    /// Tell `notice` of changes to convoy's fields by others (see the module doc).
    pub fn with_notice(mut self, notice: Notice) -> Self {
        self.notice = Some(notice);
        self
    }

    /// [`LiveTargets::relist`] after `delay`, once for all the changes asked meanwhile.
    pub fn relist_after(self: &Arc<Self>, delay: Duration) {
        let asked = self.relists.fetch_add(1, Ordering::Relaxed) + 1;
        let targets = Arc::downgrade(self);
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            if let Some(targets) = targets.upgrade()
                && targets.relists.load(Ordering::Relaxed) == asked
            {
                targets.relist();
            }
        });
    }

    /// List every watch again: the Releases this replica works on changed (a shard taken or
    /// given up), and a watch keeps only the objects of those it worked on when it saw them.
    pub fn relist(&self) {
        let mut made = locks::lock(&self.made);
        made.retain(|w| w.strong_count() > 0);
        for objects in made.iter().filter_map(Weak::upgrade) {
            objects.relist();
        }
    }
}

impl WatchedTargets for LiveTargets {
    fn for_connection(&self, conn: &Connection) -> Arc<dyn WatchedObjects> {
        self.objects_for(&conn.watch_client, &conn.server, &conn.holder)
    }
}

impl LiveTargets {
    /// The watches of `client` to `server`, whose credentials `holder` chose (what
    /// [`WatchedTargets::for_connection`] hands the engine).
    pub fn objects_for(&self, client: &Client, server: &str, holder: &Holder) -> Arc<LiveObjects> {
        let cluster = match holder {
            Holder::Cluster { namespace, name } => Some((namespace.clone(), name.clone())),
            Holder::Convoy | Holder::ServiceAccount { .. } => None,
        };
        let objects = Arc::new(LiveObjects {
            client: client.clone(),
            via: Arc::new((server.to_string(), cluster)),
            keep: self.keep.clone(),
            notice: self.notice.clone(),
            kinds: Mutex::default(),
            allowed: self.allowed.clone(),
        });
        let mut made = locks::lock(&self.made);
        made.retain(|w| w.strong_count() > 0);
        made.push(Arc::downgrade(&objects));
        objects
    }
}

/// The watches of one target client, by kind and scope.
pub struct LiveObjects {
    client: Client,
    /// The API server `client` talks to and the Cluster whose kubeconfig it uses, named in
    /// each [`Changed`].
    via: Arc<Via>,
    keep: Keep,
    notice: Option<Notice>,
    kinds: Mutex<HashMap<Scope, Watch>>,
    allowed: Arc<Allowed>,
}

/// What one watch covers: a kind (`apiVersion/kind`), across the cluster (`None`) or in one
/// namespace.
type Scope = (String, Option<String>);

/// One watch: what it holds, and its task.
struct Watch {
    resource: ApiResource,
    objects: Arc<RwLock<Objects>>,
    task: Option<AbortHandle>,
}

/// How a watch is doing, for tests and diagnostics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatchState {
    /// It listed, and no error came since.
    pub current: bool,
    /// Its errors since it started.
    pub failures: usize,
    /// The API server refused it (403): it stopped.
    pub forbidden: bool,
}

impl LiveObjects {
    /// The state of the watch of `resource` in `namespace` (`None`: across the cluster), if
    /// one was started.
    pub fn state(&self, resource: &ApiResource, namespace: Option<&str>) -> Option<WatchState> {
        let kinds = locks::lock(&self.kinds);
        let watch = kinds.get(&scope(resource, namespace))?;
        let o = locks::read(&watch.objects);
        Some(WatchState {
            current: o.current,
            failures: o.failures,
            forbidden: o.forbidden_since.is_some(),
        })
    }

    /// Start watching into `objects` (its epoch is the task's): `None` when no more watches
    /// may run or there is no runtime to run one on.
    fn start(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        objects: &Arc<RwLock<Objects>>,
    ) -> Option<AbortHandle> {
        // Reads come from async passes; without a runtime there is nothing to watch with.
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        if !self.allowed.watches.take(1) {
            return None;
        }
        let slot = Slot(self.allowed.clone());
        let api: Api<DynamicObject> = match namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, resource),
            None => Api::all_with(self.client.clone(), resource),
        };
        let epoch = locks::read(objects).epoch;
        let task = runtime.spawn(run(
            api,
            resource.clone(),
            (objects.clone(), epoch),
            (self.keep.clone(), self.notice.clone(), self.via.clone()),
            slot,
        ));
        Some(task.abort_handle())
    }

    /// Start `watch` over: a new epoch of its objects (what the old task still writes is
    /// ignored) and a new task.
    fn restart(&self, namespace: Option<&str>, watch: &mut Watch) {
        if let Some(task) = watch.task.take() {
            task.abort();
        }
        {
            let mut objects = locks::write(&watch.objects);
            let epoch = objects.epoch + 1;
            *objects = Objects::new(self.allowed.clone());
            objects.epoch = epoch;
        }
        watch.task = self.start(&watch.resource, namespace, &watch.objects);
    }

    fn relist(&self) {
        let mut kinds = locks::lock(&self.kinds);
        for ((_, namespace), watch) in kinds.iter_mut() {
            self.restart(namespace.as_deref(), watch);
        }
    }

    /// The objects of the watch of `scope`, started now if there is none (`None` then, and
    /// when no more watches may start). A watch refused long enough ago is tried again.
    fn watch(
        &self,
        kinds: &mut HashMap<Scope, Watch>,
        resource: &ApiResource,
        scope: Scope,
    ) -> Option<Arc<RwLock<Objects>>> {
        if let Some(watch) = kinds.get_mut(&scope) {
            let refused = locks::read(&watch.objects).forbidden_since;
            if refused.is_some_and(|at| at.elapsed() >= FORBIDDEN_RETRY) {
                self.restart(scope.1.as_deref(), watch);
            }
            return Some(watch.objects.clone());
        }
        let objects = Arc::new(RwLock::new(Objects::new(self.allowed.clone())));
        if let Some(task) = self.start(resource, scope.1.as_deref(), &objects) {
            let watch = Watch {
                resource: resource.clone(),
                objects,
                task: Some(task),
            };
            kinds.insert(scope, watch);
        }
        None
    }
}

impl Drop for LiveObjects {
    /// Each aborted task gives its slot back as it ends.
    fn drop(&mut self) {
        let kinds = self.kinds.get_mut().unwrap_or_else(|e| e.into_inner());
        for watch in kinds.values_mut() {
            if let Some(task) = watch.task.take() {
                task.abort();
            }
        }
    }
}

impl WatchedObjects for LiveObjects {
    fn get(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<DynamicObject> {
        let objects = {
            let mut kinds = locks::lock(&self.kinds);
            let all = self.watch(&mut kinds, resource, scope(resource, None))?;
            let forbidden = locks::read(&all).forbidden_since.is_some();
            match namespace {
                Some(ns) if forbidden => {
                    self.watch(&mut kinds, resource, scope(resource, Some(ns)))?
                }
                _ => all,
            }
        };
        let text = locks::read(&objects).get(&object_key(namespace, name))?;
        serde_json::from_str(&text).ok()
    }
}

/// What one kind's watch holds, and whether it can be trusted now. Every kept byte is taken
/// from the process's allowance and given back when the object goes (or these with it).
struct Objects {
    kept: HashMap<String, Held>,
    /// The objects of a list in progress (between `Init` and `InitDone`).
    listing: Option<HashMap<String, Held>>,
    /// The list in progress left out an object it was given (past a bound): an object the
    /// new list lacks may still exist, so its absence is not a deletion.
    listing_short: bool,
    allowed: Arc<Allowed>,
    /// A list finished and no error came after it.
    current: bool,
    /// Errors since the watch started.
    failures: usize,
    /// When the API server refused the watch (403), if it did.
    forbidden_since: Option<Instant>,
    /// Which start of the watch these objects belong to: a task writes only into its own.
    epoch: u64,
}

/// One kept object: its compact text (or only a mark), what convoy applied of it, and a hash
/// of the Release its labels name (to tell an object relabelled away from its Release).
#[derive(Debug, Clone)]
struct Held {
    body: Body,
    ours: Option<Applied>,
    release: u64,
}

#[derive(Debug, Clone)]
enum Body {
    /// The object as a read would return it.
    Text(Arc<str>),
    /// The Release it is held for, and nothing of the object: it is past a bound (a large
    /// CRD or dashboard ConfigMap), so it is read from the API server, but convoy applied it,
    /// so a change to what convoy applied still wakes the drift loop. `key_len`: its map key's
    /// length, counted with it.
    Mark {
        release: Arc<ReleaseName>,
        key_len: usize,
    },
}

/// What a mark counts against [`Limits::bytes`] beside its key and its Release's names: about
/// what it and its map entry take.
const MARK_BYTES: usize = 128;

impl Held {
    /// What it counts against [`Limits::bytes`].
    fn cost(&self) -> usize {
        match &self.body {
            Body::Text(text) => text.len(),
            Body::Mark { release, key_len } => {
                MARK_BYTES + key_len + release.0.len() + release.1.len()
            }
        }
    }

    fn text(&self) -> Option<Arc<str>> {
        match &self.body {
            Body::Text(text) => Some(text.clone()),
            Body::Mark { .. } => None,
        }
    }

    /// The Release it is held for.
    fn release_name(&self) -> Option<ReleaseName> {
        match &self.body {
            Body::Text(text) => release_in(text),
            Body::Mark { release, .. } => Some(release.as_ref().clone()),
        }
    }
}

/// Convoy's Apply entry in an object's `managedFields`: a hash of its fields and its time
/// (whole seconds, as the server writes it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Applied {
    fields: u64,
    time: Option<i64>,
}

/// Whether fields convoy applied left it without a write of convoy's in between (see the
/// module doc): its fields changed or went while its time stayed.
fn taken(before: Option<Applied>, after: Option<Applied>) -> bool {
    match (before, after) {
        (Some(_), None) => true,
        (Some(b), Some(a)) => b.fields != a.fields && b.time == a.time,
        (None, _) => false,
    }
}

/// The Release `before` was held for, when the object's next state (`after`: convoy's entry
/// and the Release's hash; `None` when no longer kept: deleted, or labelled for no Release
/// this process works on) took fields convoy applied or moved the object off that Release.
fn taken_from(before: &Held, after: Option<(Option<Applied>, u64)>) -> Option<ReleaseName> {
    let hit = match after {
        Some((ours, release)) if release == before.release => taken(before.ours, ours),
        _ => before.ours.is_some(),
    };
    hit.then(|| before.release_name()).flatten()
}

/// A Release (namespace, name).
type ReleaseName = (String, String);

/// A watch's API server and the Cluster (namespace, name) whose kubeconfig it uses.
type Via = (String, Option<(String, String)>);

/// An object taken from convoy, by the Release its labels named and its `namespace/name`.
type Taken = (ReleaseName, String);

fn hash_of(value: &impl std::hash::Hash) -> u64 {
    use std::hash::Hasher;
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    value.hash(&mut hasher);
    hasher.finish()
}

impl Drop for Objects {
    fn drop(&mut self) {
        let held = bytes(&self.kept) + self.listing.as_ref().map_or(0, bytes);
        self.allowed.bytes.give(held);
    }
}

fn bytes(map: &HashMap<String, Held>) -> usize {
    map.values().map(Held::cost).sum()
}

impl Objects {
    fn new(allowed: Arc<Allowed>) -> Self {
        Self {
            kept: HashMap::new(),
            listing: None,
            listing_short: false,
            allowed,
            current: false,
            failures: 0,
            forbidden_since: None,
            epoch: 0,
        }
    }

    /// Put `kept` in `map` if the allowance takes it, giving back what it replaces, which is
    /// returned. An object past a bound is read from the API server: of one convoy applied
    /// only a mark is kept (if the allowance takes that), of another nothing.
    fn put(allowed: &Allowed, map: &mut HashMap<String, Held>, kept: Kept) -> Option<Held> {
        let Kept { key, held, release } = kept;
        let old = map.remove(&key);
        if let Some(old) = &old {
            allowed.bytes.give(old.cost());
        }
        let cost = held.cost();
        if cost <= allowed.object_bytes && allowed.bytes.take(cost) {
            map.insert(key, held);
        } else if held.ours.is_some() {
            let mark = Held {
                body: Body::Mark {
                    release: Arc::new(release),
                    key_len: key.len(),
                },
                ..held
            };
            if allowed.bytes.take(mark.cost()) {
                map.insert(key, mark);
            }
        }
        old
    }

    fn remove(&mut self, key: &str) -> Option<Held> {
        let old = self.kept.remove(key)?;
        self.allowed.bytes.give(old.cost());
        Some(old)
    }

    /// Give back everything of `map`.
    fn release(&self, map: HashMap<String, Held>) {
        self.allowed.bytes.give(bytes(&map));
    }

    /// The object of `key`, when the watch vouches for what it holds.
    fn get(&self, key: &str) -> Option<Arc<str>> {
        if !self.current {
            return None;
        }
        self.kept.get(key).and_then(Held::text)
    }

    /// One event of the watch; `keep` says what is kept of an object (`None`: nothing).
    /// Returns the object convoy applied that someone else changed, deleted or relabelled,
    /// if any: only while the watch vouches for what it holds (what it held before is what
    /// is compared).
    fn event(
        &mut self,
        event: Event<DynamicObject>,
        keep: impl Fn(DynamicObject) -> Option<Kept>,
    ) -> Vec<Taken> {
        match event {
            Event::Init => {
                if let Some(abandoned) = self.listing.replace(HashMap::new()) {
                    self.release(abandoned);
                }
                self.listing_short = false;
                Vec::new()
            }
            Event::InitApply(object) => {
                if let (Some(listing), Some(kept)) = (&mut self.listing, keep(object)) {
                    let key = kept.key.clone();
                    Self::put(&self.allowed, listing, kept);
                    self.listing_short |= !listing.contains_key(&key);
                }
                Vec::new()
            }
            Event::InitDone => {
                let listed = self.listing.take().unwrap_or_default();
                // What changed while the watch was down (a relist after a failure or a
                // desync), deletions included unless the list could not hold everything;
                // a first list held nothing.
                let gone_is_deleted = !self.listing_short;
                let changed = changed_between(&self.kept, &listed, gone_is_deleted);
                let old = std::mem::replace(&mut self.kept, listed);
                self.release(old);
                self.current = true;
                changed
            }
            Event::Apply(object) => {
                let key = object_key(object.namespace().as_deref(), &object.name_any());
                let (before, after) = match keep(object) {
                    Some(kept) => {
                        let after = (kept.held.ours, kept.held.release);
                        let before = Self::put(&self.allowed, &mut self.kept, kept);
                        (before, Some(after))
                    }
                    None => (self.remove(&key), None),
                };
                self.taken(before, after, key)
            }
            Event::Delete(object) => {
                let key = object_key(object.namespace().as_deref(), &object.name_any());
                let before = self.remove(&key);
                self.taken(before, None, key)
            }
        }
    }

    /// [`taken_from`] as an event's answer, while the watch vouches for what it held.
    fn taken(
        &self,
        before: Option<Held>,
        after: Option<(Option<Applied>, u64)>,
        key: String,
    ) -> Vec<Taken> {
        before
            .filter(|_| self.current)
            .and_then(|before| taken_from(&before, after))
            .map(|release| vec![(release, key)])
            .unwrap_or_default()
    }

    /// The watch failed: nothing it holds is vouched for until it has listed again.
    fn failed(&mut self, forbidden: bool) {
        self.current = false;
        if let Some(abandoned) = self.listing.take() {
            self.release(abandoned);
        }
        self.failures += 1;
        if forbidden {
            self.forbidden_since = Some(Instant::now());
        }
    }
}

/// The objects held in `before` whose applied fields were taken since, or (when
/// `gone_is_deleted`) that `after` holds no more (deleted, or relabelled for no Release this
/// process works on), by the Release they were held for before (relabelled meanwhile: the one
/// left). Without `gone_is_deleted`, `after` left out objects past a bound: an object it lacks
/// may not be gone, and anyone who fills the bound would otherwise wake every Release at a
/// relist.
fn changed_between(
    before: &HashMap<String, Held>,
    after: &HashMap<String, Held>,
    gone_is_deleted: bool,
) -> Vec<Taken> {
    let mut changed: Vec<Taken> = before
        .iter()
        .filter_map(|(key, held)| {
            let now = match after.get(key) {
                Some(a) => Some((a.ours, a.release)),
                None if gone_is_deleted => None,
                None => return None,
            };
            Some((taken_from(held, now)?, key.clone()))
        })
        .collect();
    changed.sort();
    changed
}

/// The Release named by the labels of a kept object's text.
fn release_in(text: &str) -> Option<ReleaseName> {
    let object: DynamicObject = serde_json::from_str(text).ok()?;
    release_of(&object)
}

/// What is kept of an object: its key, what is held, and the Release it is held for (for a
/// mark).
struct Kept {
    key: String,
    held: Held,
    release: ReleaseName,
}

fn scope(resource: &ApiResource, namespace: Option<&str>) -> Scope {
    (
        format!("{}/{}", resource.api_version, resource.kind),
        namespace.map(str::to_string),
    )
}

/// Whether the API server refused a watch for want of permission.
fn is_forbidden(error: &watcher::Error) -> bool {
    match error {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) => s.code == 403,
        watcher::Error::WatchError(s) => s.code == 403,
        _ => false,
    }
}

fn object_key(namespace: Option<&str>, name: &str) -> String {
    format!("{}/{name}", namespace.unwrap_or_default())
}

/// The Release an object's labels name: (namespace, name).
fn release_of(object: &DynamicObject) -> Option<ReleaseName> {
    let labels = object.labels();
    Some((
        labels.get(RELEASE_NAMESPACE)?.clone(),
        labels.get(RELEASE_NAME)?.clone(),
    ))
}

/// Convoy's Apply entry of `object`'s `managedFields` (the main resource's, not a
/// subresource's).
fn applied_by_convoy(object: &DynamicObject) -> Option<Applied> {
    let entry = object.metadata.managed_fields.as_ref()?.iter().find(|e| {
        e.manager.as_deref() == Some(field_managers::CONTROLLER.as_str())
            && e.operation.as_deref() == Some("Apply")
            && e.subresource.as_deref().unwrap_or_default().is_empty()
    })?;
    let fields = serde_json::to_string(&entry.fields_v1.as_ref()?.0).ok()?;
    Some(Applied {
        fields: hash_of(&fields),
        time: entry.time.as_ref().map(|t| t.0.as_second()),
    })
}

/// What is kept of `object`: nothing unless `keep` wants its Release's objects; else the
/// object as a read would return it (apiVersion and kind included: list items have none),
/// without `managedFields` (the loops that read ownership confirm on a fresh read), and what
/// convoy applied of it.
fn kept(mut object: DynamicObject, resource: &ApiResource, keep: &Keep) -> Option<Kept> {
    let release = release_of(&object)?;
    if !keep(&release.0, &release.1) {
        return None;
    }
    let ours = applied_by_convoy(&object);
    object.metadata.managed_fields = None;
    object.types = Some(TypeMeta {
        api_version: resource.api_version.clone(),
        kind: resource.kind.clone(),
    });
    let key = object_key(object.namespace().as_deref(), &object.name_any());
    let text = serde_json::to_string(&object).ok()?;
    Some(Kept {
        key,
        held: Held {
            body: Body::Text(text.into()),
            ours,
            release: hash_of(&release),
        },
        release,
    })
}

/// Watch `api`'s labelled objects into `objects` (while they are of `epoch`) until aborted.
/// A failed watch lists again after a backoff (a resumed watch could not say what it missed);
/// a refused one stops, giving back its slot.
async fn run(
    api: Api<DynamicObject>,
    resource: ApiResource,
    (objects, epoch): (Arc<RwLock<Objects>>, u64),
    (keep, notice, via): (Keep, Option<Notice>, Arc<Via>),
    _slot: Slot,
) {
    let config = watcher::Config::default()
        .labels(RELEASE_NAME)
        .any_semantic()
        .timeout(crate::engine::connect::WATCH_TIMEOUT_SECS);
    let mut backoff = FIRST_BACKOFF;
    loop {
        let mut stream = std::pin::pin!(watcher::watcher(api.clone(), config.clone()));
        while let Some(event) = stream.next().await {
            match event {
                Ok(event) => {
                    if matches!(event, Event::InitDone) {
                        backoff = FIRST_BACKOFF;
                    }
                    let changed = {
                        let mut objects = locks::write(&objects);
                        // Started over meanwhile (an abort takes effect at the next await).
                        if objects.epoch != epoch {
                            return;
                        }
                        objects.event(event, |o| kept(o, &resource, &keep))
                    };
                    if let Some(notice) = &notice {
                        for ((release_namespace, release_name), key) in changed {
                            let (namespace, name) = key.split_once('/').unwrap_or(("", &key));
                            notice(&Changed {
                                server: via.0.clone(),
                                cluster: via.1.clone(),
                                release_namespace,
                                release_name,
                                object: ObjectKey {
                                    group: resource.group.clone(),
                                    kind: resource.kind.clone(),
                                    namespace: namespace.to_string(),
                                    name: name.to_string(),
                                },
                            });
                        }
                    }
                }
                Err(e) => {
                    let forbidden = is_forbidden(&e);
                    let mut objects = locks::write(&objects);
                    if objects.epoch != epoch {
                        return;
                    }
                    objects.failed(forbidden);
                    drop(objects);
                    tracing::debug!(
                        kind = %resource.kind,
                        "watch of live objects failed; reads go to the API server: {e}"
                    );
                    if forbidden {
                        return;
                    }
                    break;
                }
            }
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cm(name: &str, release: &str, value: &str) -> DynamicObject {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": name,
                "namespace": "ns",
                "labels": {RELEASE_NAME: release, RELEASE_NAMESPACE: "ns"},
                "managedFields": [{"manager": "convoy-release", "operation": "Apply"}],
            },
            "data": {"value": value},
        }))
        .unwrap()
    }

    fn keep_ours() -> Keep {
        Arc::new(|_, release| release == "ours")
    }

    fn value(objects: &Objects, name: &str) -> Option<String> {
        let text = objects.get(&format!("ns/{name}"))?;
        let object: DynamicObject = serde_json::from_str(&text).unwrap();
        Some(object.data["data"]["value"].as_str().unwrap().to_string())
    }

    fn resource() -> ApiResource {
        ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&())
    }

    fn unbounded() -> Objects {
        Objects::new(Arc::new(Allowed::new(Limits::default())))
    }

    /// A whole list of `items`, as a watch that (re)starts delivers it.
    fn list(objects: &mut Objects, items: &[DynamicObject]) {
        feed(objects, Event::Init);
        for item in items {
            feed(objects, Event::InitApply(item.clone()));
        }
        feed(objects, Event::InitDone);
    }

    fn feed(objects: &mut Objects, event: Event<DynamicObject>) {
        let (resource, keep) = (resource(), keep_ours());
        objects.event(event, |o| kept(o, &resource, &keep));
    }

    #[test]
    fn nothing_is_vouched_for_before_the_first_list_is_done() {
        let mut objects = unbounded();
        feed(&mut objects, Event::Init);
        feed(&mut objects, Event::InitApply(cm("a", "ours", "1")));
        assert_eq!(value(&objects, "a"), None);
        feed(&mut objects, Event::InitDone);
        assert_eq!(value(&objects, "a").as_deref(), Some("1"));
    }

    #[test]
    fn only_the_objects_of_releases_kept_are_held_without_their_managed_fields() {
        let mut objects = unbounded();
        list(
            &mut objects,
            &[cm("a", "ours", "1"), cm("b", "theirs", "2")],
        );
        assert_eq!(value(&objects, "b"), None);
        let text = objects.get("ns/a").unwrap();
        let object: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(object["metadata"].get("managedFields"), None);
        assert_eq!(object["apiVersion"], "v1");
        assert_eq!(object["kind"], "ConfigMap");
        // Handed over to another Release (no longer kept): gone.
        feed(&mut objects, Event::Apply(cm("a", "theirs", "3")));
        assert_eq!(value(&objects, "a"), None);
    }

    #[test]
    fn changes_and_deletions_are_followed_and_a_new_list_replaces_everything() {
        let mut objects = unbounded();
        list(&mut objects, &[cm("a", "ours", "1"), cm("b", "ours", "1")]);
        feed(&mut objects, Event::Apply(cm("a", "ours", "2")));
        feed(&mut objects, Event::Delete(cm("b", "ours", "1")));
        assert_eq!(value(&objects, "a").as_deref(), Some("2"));
        assert_eq!(value(&objects, "b"), None);
        // Deleted while the watch was down: a new list does not hold it.
        feed(&mut objects, Event::Init);
        feed(&mut objects, Event::InitApply(cm("c", "ours", "1")));
        assert_eq!(
            value(&objects, "a").as_deref(),
            Some("2"),
            "the old list serves until the new one is done"
        );
        feed(&mut objects, Event::InitDone);
        assert_eq!(value(&objects, "a"), None);
        assert_eq!(value(&objects, "c").as_deref(), Some("1"));
    }

    /// Objects anyone can label cannot grow the daemon's memory: past the allowance, and for
    /// an object too large, nothing is kept (the loops read the API server), and what goes
    /// (deleted, replaced, a watch dropped) is given back. (These objects carry no fields of
    /// convoy's, so no mark is kept either.)
    #[test]
    fn what_the_watches_keep_is_bounded_whatever_the_cluster_holds() {
        let one = kept(cm("a", "ours", "1"), &resource(), &keep_ours())
            .unwrap()
            .held
            .cost();
        let allowed = Arc::new(Allowed::new(Limits {
            bytes: one + one / 2,
            object_bytes: one + 10,
            watches: 1,
        }));
        let mut objects = Objects::new(allowed.clone());
        list(&mut objects, &[cm("a", "ours", "1"), cm("b", "ours", "1")]);
        assert_eq!(value(&objects, "a").as_deref(), Some("1"));
        assert_eq!(value(&objects, "b"), None, "past the allowance");
        feed(&mut objects, Event::Delete(cm("a", "ours", "1")));
        feed(&mut objects, Event::Apply(cm("b", "ours", "2")));
        assert_eq!(
            value(&objects, "b").as_deref(),
            Some("2"),
            "room was given back"
        );
        let large = "x".repeat(20);
        feed(&mut objects, Event::Apply(cm("b", "ours", &large)));
        assert_eq!(value(&objects, "b"), None, "too large: not kept");
        assert_eq!(allowed.bytes.0.load(Ordering::Relaxed), one + one / 2);
        feed(&mut objects, Event::Apply(cm("c", "ours", "3")));
        assert_eq!(value(&objects, "c").as_deref(), Some("3"));
        drop(objects);
        assert_eq!(
            allowed.bytes.0.load(Ordering::Relaxed),
            one + one / 2,
            "all given back"
        );
        assert!(allowed.watches.take(1) && !allowed.watches.take(1));
    }

    /// ConfigMap `a` of Release `ours` with these `managedFields` entries:
    /// (manager, operation, fieldsV1, time).
    fn managed(entries: &[(&str, &str, serde_json::Value, &str)]) -> DynamicObject {
        let mut object = cm("a", "ours", "1");
        let entries: Vec<_> = entries
            .iter()
            .map(|(manager, operation, fields, time)| {
                serde_json::json!({"manager": manager, "operation": operation,
                    "apiVersion": "v1", "fieldsType": "FieldsV1", "fieldsV1": fields,
                    "time": time})
            })
            .collect();
        object.metadata.managed_fields = serde_json::from_value(entries.into()).unwrap();
        object
    }

    fn value_field() -> serde_json::Value {
        serde_json::json!({"f:data": {"f:value": {}}})
    }

    const T0: &str = "2026-12-07T10:00:00Z";
    const T1: &str = "2026-12-07T10:00:05Z";

    fn changes(objects: &mut Objects, event: Event<DynamicObject>) -> Vec<Taken> {
        let (resource, keep) = (resource(), keep_ours());
        objects.event(event, |o| kept(o, &resource, &keep))
    }

    fn ours() -> Vec<Taken> {
        vec![(("ns".to_string(), "ours".to_string()), "ns/a".to_string())]
    }

    /// A field convoy applied, taken by someone else's update or forced apply (convoy's
    /// entry loses it, its time stays), names the Release; so does convoy's entry gone.
    #[test]
    fn a_field_convoy_applied_taken_by_someone_else_names_its_release() {
        let mut objects = unbounded();
        let applied = managed(&[("convoy-release", "Apply", value_field(), T0)]);
        list(&mut objects, std::slice::from_ref(&applied));
        let edited = managed(&[
            (
                "convoy-release",
                "Apply",
                serde_json::json!({"f:data": {}}),
                T0,
            ),
            ("kubectl-edit", "Update", value_field(), T1),
        ]);
        assert_eq!(changes(&mut objects, Event::Apply(edited)), ours());
        // convoy puts it back: its entry changes with a new time.
        let put_back = managed(&[("convoy-release", "Apply", value_field(), T1)]);
        assert_eq!(changes(&mut objects, Event::Apply(put_back)), []);
        let all_taken = managed(&[("team-b", "Apply", value_field(), T1)]);
        assert_eq!(changes(&mut objects, Event::Apply(all_taken)), ours());
    }

    /// Convoy's own writes, status, another manager's fields beside convoy's and an object
    /// convoy never applied are not drift; nothing is named before the first list is done.
    #[test]
    fn changes_that_leave_convoys_fields_alone_name_nothing() {
        let mut objects = unbounded();
        let applied = managed(&[("convoy-release", "Apply", value_field(), T0)]);
        feed(&mut objects, Event::Init);
        let taken = managed(&[("kubectl-edit", "Update", value_field(), T1)]);
        assert_eq!(changes(&mut objects, Event::InitApply(applied.clone())), []);
        assert_eq!(changes(&mut objects, Event::Apply(taken.clone())), []);
        list(&mut objects, std::slice::from_ref(&applied));
        let a_new_render = managed(&[(
            "convoy-release",
            "Apply",
            serde_json::json!({"f:data": {"f:value": {}, "f:other": {}}}),
            T1,
        )]);
        assert_eq!(changes(&mut objects, Event::Apply(a_new_render)), []);
        let beside = managed(&[
            (
                "convoy-release",
                "Apply",
                serde_json::json!({"f:data": {"f:value": {}, "f:other": {}}}),
                T1,
            ),
            (
                "kube-controller-manager",
                "Update",
                serde_json::json!({"f:metadata": {}}),
                T1,
            ),
        ]);
        assert_eq!(changes(&mut objects, Event::Apply(beside)), []);
        let mut not_ours = managed(&[("kubectl-create", "Update", value_field(), T0)]);
        not_ours.metadata.name = Some("b".into());
        assert_eq!(changes(&mut objects, Event::Apply(not_ours.clone())), []);
        let edited_again = managed(&[("kubectl-edit", "Update", value_field(), T1)]);
        let mut other = edited_again.clone();
        other.metadata.name = Some("b".into());
        assert_eq!(changes(&mut objects, Event::Apply(other)), []);
        assert_eq!(changes(&mut objects, Event::Delete(not_ours)), []);
    }

    /// An object convoy applied that is too large to keep is read from the API server, but a
    /// mark of it is kept: someone taking a field of convoy's, or deleting it, still names its
    /// Release; the mark counts against the allowance and is given back.
    #[test]
    fn a_large_object_convoy_applied_is_marked_and_its_changes_still_named() {
        let allowed = Arc::new(Allowed::new(Limits {
            bytes: 4 << 10,
            object_bytes: 1 << 10,
            watches: 1,
        }));
        let mut objects = Objects::new(allowed.clone());
        let large = |entries: &[(&str, &str, serde_json::Value, &str)]| {
            let mut object = managed(entries);
            object.data["data"]["value"] = "x".repeat(2 << 10).into();
            object
        };
        let applied = large(&[("convoy-release", "Apply", value_field(), T0)]);
        list(&mut objects, std::slice::from_ref(&applied));
        assert_eq!(value(&objects, "a"), None, "read from the API server");
        let mark = MARK_BYTES + "ns/a".len() + "ns".len() + "ours".len();
        assert_eq!(allowed.bytes.0.load(Ordering::Relaxed), (4 << 10) - mark);
        let edited = large(&[
            (
                "convoy-release",
                "Apply",
                serde_json::json!({"f:data": {}}),
                T0,
            ),
            ("kubectl-edit", "Update", value_field(), T1),
        ]);
        assert_eq!(changes(&mut objects, Event::Apply(edited.clone())), ours());
        assert_eq!(changes(&mut objects, Event::Delete(edited)), ours());
        assert_eq!(allowed.bytes.0.load(Ordering::Relaxed), 4 << 10);
        // Past the whole allowance too: a mark while there is room for one.
        let full = Arc::new(Allowed::new(Limits {
            bytes: mark,
            object_bytes: 1 << 20,
            watches: 1,
        }));
        let mut objects = Objects::new(full.clone());
        list(&mut objects, std::slice::from_ref(&applied));
        assert_eq!(full.bytes.0.load(Ordering::Relaxed), 0);
        assert_eq!(changes(&mut objects, Event::Delete(applied)), ours());
        assert_eq!(full.bytes.0.load(Ordering::Relaxed), mark);
    }

    /// A relist that could not hold an object it was given (the allowance full, even for a
    /// mark: whoever may label objects can fill it) does not call the objects it lacks
    /// deleted; it would wake every Release of the watch.
    #[test]
    fn a_relist_past_the_allowance_names_no_deletion() {
        let applied = managed(&[("convoy-release", "Apply", value_field(), T0)]);
        let one = kept(applied.clone(), &resource(), &keep_ours())
            .unwrap()
            .held
            .cost();
        let allowed = Arc::new(Allowed::new(Limits {
            bytes: one + 10,
            object_bytes: one + 10,
            watches: 1,
        }));
        let mut objects = Objects::new(allowed);
        list(&mut objects, std::slice::from_ref(&applied));
        assert!(value(&objects, "a").is_some());
        objects.failed(false);
        assert_eq!(changes(&mut objects, Event::Init), []);
        assert_eq!(changes(&mut objects, Event::InitApply(applied.clone())), []);
        assert_eq!(changes(&mut objects, Event::InitDone), []);
        // Held again (the old list gave its room back); a list that held all it was given
        // names a deletion.
        feed(&mut objects, Event::Apply(applied.clone()));
        assert!(value(&objects, "a").is_some());
        objects.failed(false);
        assert_eq!(changes(&mut objects, Event::Init), []);
        assert_eq!(changes(&mut objects, Event::InitDone), ours());
    }

    /// An object convoy applied, deleted, names its Release; a change or a deletion made while
    /// the watch was down is named when it has listed again.
    #[test]
    fn a_deletion_and_a_change_seen_on_a_relist_name_the_release() {
        let mut objects = unbounded();
        let applied = managed(&[("convoy-release", "Apply", value_field(), T0)]);
        list(&mut objects, std::slice::from_ref(&applied));
        assert_eq!(
            changes(&mut objects, Event::Delete(applied.clone())),
            ours()
        );
        feed(&mut objects, Event::Apply(applied.clone()));
        objects.failed(false);
        let taken = managed(&[("kubectl-edit", "Update", value_field(), T1)]);
        assert_eq!(changes(&mut objects, Event::Init), []);
        assert_eq!(changes(&mut objects, Event::InitApply(taken)), []);
        assert_eq!(changes(&mut objects, Event::InitDone), ours());
        // Deleted while the watch was down: the relist holds it no more.
        feed(&mut objects, Event::Apply(applied.clone()));
        objects.failed(false);
        let other = cm("b", "ours", "1");
        assert_eq!(changes(&mut objects, Event::Init), []);
        assert_eq!(changes(&mut objects, Event::InitApply(other.clone())), []);
        assert_eq!(changes(&mut objects, Event::InitDone), ours());
        // An object convoy never applied, gone meanwhile, is nothing.
        objects.failed(false);
        assert_eq!(changes(&mut objects, Event::Init), []);
        assert_eq!(changes(&mut objects, Event::InitDone), []);
    }

    /// An object convoy applied, relabelled to another Release or away from any, is drift of
    /// the Release it left (its text is how that Release is known).
    #[test]
    fn an_object_relabelled_away_names_the_release_it_left() {
        let keep_both: Keep = Arc::new(|_, release| release == "ours" || release == "other");
        let resource = resource();
        let mut objects = unbounded();
        let applied = managed(&[("convoy-release", "Apply", value_field(), T0)]);
        let feed_both =
            |objects: &mut Objects, event| objects.event(event, |o| kept(o, &resource, &keep_both));
        feed_both(&mut objects, Event::Init);
        feed_both(&mut objects, Event::InitApply(applied.clone()));
        feed_both(&mut objects, Event::InitDone);
        let mut moved = applied.clone();
        moved
            .labels_mut()
            .insert(RELEASE_NAME.into(), "other".into());
        assert_eq!(feed_both(&mut objects, Event::Apply(moved.clone())), ours());
        assert_eq!(feed_both(&mut objects, Event::Apply(moved.clone())), []);
        moved
            .labels_mut()
            .insert(RELEASE_NAME.into(), "nobody".into());
        assert_eq!(
            feed_both(&mut objects, Event::Apply(moved)),
            vec![(("ns".to_string(), "other".to_string()), "ns/a".to_string())]
        );
        // Moved while the watch was down: the relist names the Release it left.
        feed_both(&mut objects, Event::Apply(applied.clone()));
        objects.failed(false);
        let mut moved = applied.clone();
        moved
            .labels_mut()
            .insert(RELEASE_NAME.into(), "other".into());
        feed_both(&mut objects, Event::Init);
        feed_both(&mut objects, Event::InitApply(moved));
        assert_eq!(feed_both(&mut objects, Event::InitDone), ours());
    }

    #[test]
    fn a_failed_watch_vouches_for_nothing_until_it_has_listed_again() {
        let mut objects = unbounded();
        list(&mut objects, &[cm("a", "ours", "1")]);
        objects.failed(false);
        assert_eq!(value(&objects, "a"), None);
        feed(&mut objects, Event::Apply(cm("a", "ours", "2")));
        assert_eq!(
            value(&objects, "a"),
            None,
            "a resumed watch may have missed events"
        );
        list(&mut objects, &[cm("a", "ours", "3")]);
        assert_eq!(value(&objects, "a").as_deref(), Some("3"));
    }
}

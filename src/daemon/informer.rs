//! Informers: a watch per kind feeding a cache and the loops' event handlers.
//!
//! Spec: the harness of "internal/controller/base" — reads come from the cache; handlers see
//! the old and the new object so they can apply `should_enqueue_on_update`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

use futures::StreamExt;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;

/// What a sharded replica keeps of an object it does not work on (a Release of a shard
/// another replica holds): a stub with what the event handlers and a takeover look at, or
/// nothing. Each replica would otherwise hold every Release of the fleet in full.
pub struct Trim<K> {
    /// Whether this replica needs the object in full now.
    pub needed: Box<dyn Fn(&K) -> bool + Send + Sync>,
    /// The stub kept otherwise; `None`: nothing is kept.
    pub stub: StubFn<K>,
}

/// Makes the stub of an object, or says to keep nothing.
pub type StubFn<K> = Box<dyn Fn(&K) -> Option<K> + Send + Sync>;

/// A cached object, in full or as a stub.
struct Entry<K> {
    object: Arc<K>,
    stub: bool,
}

/// The cache of one kind, by `namespace/name`.
pub struct Cache<K> {
    map: RwLock<HashMap<String, Entry<K>>>,
    trim: Option<Trim<K>>,
    /// Watches that finished their first list.
    listed: AtomicUsize,
    /// Watches feeding this cache.
    watches: AtomicUsize,
    /// Watch errors in a row (a missing RBAC permission, an API server that went away).
    failing: AtomicUsize,
    /// Watch errors since the start.
    errors: AtomicUsize,
}

impl<K> Default for Cache<K> {
    fn default() -> Self {
        Self {
            map: RwLock::new(HashMap::new()),
            trim: None,
            listed: AtomicUsize::new(0),
            watches: AtomicUsize::new(0),
            failing: AtomicUsize::new(0),
            errors: AtomicUsize::new(0),
        }
    }
}

impl<K> Cache<K> {
    /// A cache that keeps only what `trim` says of objects this replica does not need.
    pub fn trimmed(trim: Trim<K>) -> Self {
        Self {
            trim: Some(trim),
            ..Self::default()
        }
    }

    /// The object in full (`None` if only its stub is cached: see [`Cache::stub`]).
    pub fn get(&self, key: &str) -> Option<Arc<K>> {
        self.read()
            .get(key)
            .filter(|e| !e.stub)
            .map(|e| e.object.clone())
    }

    /// The object of `key` in full or its stub.
    pub fn get_any(&self, key: &str) -> Option<Arc<K>> {
        self.read().get(key).map(|e| e.object.clone())
    }

    /// The stub of `key`, if that is all the cache holds of it.
    pub fn stub(&self, key: &str) -> Option<Arc<K>> {
        self.read()
            .get(key)
            .filter(|e| e.stub)
            .map(|e| e.object.clone())
    }

    /// Put `object` (read from the API) in place of the stub of `key`; `false` if the entry
    /// is no stub any more (a watch event brought the object in full meanwhile: newer).
    pub fn replace_stub(&self, key: &str, object: Arc<K>) -> bool {
        let mut map = self.write();
        match map.get_mut(key) {
            Some(e) if e.stub => {
                *e = Entry {
                    object,
                    stub: false,
                };
                true
            }
            _ => false,
        }
    }

    /// The objects cached in full.
    pub fn all(&self) -> Vec<Arc<K>> {
        self.read()
            .values()
            .filter(|e| !e.stub)
            .map(|e| e.object.clone())
            .collect()
    }

    /// Every cached object, stubs included.
    pub fn all_entries(&self) -> Vec<Arc<K>> {
        self.read().values().map(|e| e.object.clone()).collect()
    }

    /// Every key, stubs included.
    pub fn keys(&self) -> Vec<String> {
        self.read().keys().cloned().collect()
    }

    /// The keys of the objects (stubs included) that `keep` accepts, looked at under the read
    /// lock: an event handler scanning every Release on each status change should not clone
    /// the whole cache.
    pub fn keys_where(&self, keep: impl Fn(&K) -> bool) -> Vec<String> {
        self.read()
            .iter()
            .filter(|(_, e)| keep(&e.object))
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Store `object` as the trim says: returns the entry it replaced and the one stored.
    fn store(&self, key: String, object: K) -> (Option<Arc<K>>, Option<Arc<K>>) {
        let entry = match &self.trim {
            Some(trim) if !(trim.needed)(&object) => (trim.stub)(&object).map(|stub| Entry {
                object: Arc::new(stub),
                stub: true,
            }),
            _ => Some(Entry {
                object: Arc::new(object),
                stub: false,
            }),
        };
        let mut map = self.write();
        let new = entry.as_ref().map(|e| e.object.clone());
        let old = match entry {
            Some(e) => map.insert(key, e),
            None => map.remove(&key),
        };
        (old.map(|e| e.object), new)
    }

    /// Turn the entries `lost` accepts into stubs (or drop them), as the trim says: a shard
    /// given up keeps no full objects.
    pub fn trim_where(&self, lost: impl Fn(&K) -> bool) {
        let Some(trim) = &self.trim else { return };
        let mut map = self.write();
        let keys: Vec<String> = map
            .iter()
            .filter(|(_, e)| !e.stub && lost(&e.object))
            .map(|(k, _)| k.clone())
            .collect();
        for key in keys {
            let stub = map.get(&key).and_then(|e| (trim.stub)(&e.object));
            match stub {
                Some(stub) => {
                    map.insert(
                        key,
                        Entry {
                            object: Arc::new(stub),
                            stub: true,
                        },
                    );
                }
                None => {
                    map.remove(&key);
                }
            }
        }
    }

    /// Every watch feeding the cache has listed once.
    pub fn synced(&self) -> bool {
        let watches = self.watches.load(Ordering::Relaxed);
        watches > 0 && self.listed.load(Ordering::Relaxed) >= watches
    }

    /// Whether the watches feeding this cache work: fewer than [`FAILING_WATCH`] errors in a
    /// row. After that the daemon reports not ready.
    pub fn watching(&self) -> bool {
        self.failing.load(Ordering::Relaxed) < FAILING_WATCH
    }

    /// Watch errors since the start (a metric).
    pub fn watch_errors(&self) -> usize {
        self.errors.load(Ordering::Relaxed)
    }

    /// Count one more watch feeding this cache.
    pub fn add_watch(&self) {
        self.watches.fetch_add(1, Ordering::Relaxed);
    }

    /// Tests: store `object` as a watch event would.
    #[cfg(test)]
    pub(crate) fn insert_for_test(&self, object: K)
    where
        K: Resource,
    {
        self.store(key_of(&object), object);
    }

    /// Tests: one watch feeds this cache and has listed.
    #[cfg(test)]
    pub(crate) fn mark_listed_for_test(&self) {
        self.add_watch();
        self.listed.fetch_add(1, Ordering::Relaxed);
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, Entry<K>>> {
        crate::engine::locks::read(&self.map)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, Entry<K>>> {
        crate::engine::locks::write(&self.map)
    }
}

/// Watch errors in a row after which a cache counts as not watching (readiness fails).
pub const FAILING_WATCH: usize = 5;

/// The cache key of an object.
pub fn key_of<K: Resource>(object: &K) -> String {
    format!(
        "{}/{}",
        object.namespace().unwrap_or_default(),
        object.name_any()
    )
}

/// An event handler: `(old, new)`; `new` is `None` for a deletion.
pub type Handler<K> = Box<dyn Fn(Option<&K>, Option<&K>) + Send + Sync>;

/// Watch every object of `api` into `cache`, calling `handlers` on each change, until
/// `shutdown`. A re-list after a broken watch replays every object: the handlers see the same
/// resource version again, which is how resyncs look to them.
pub async fn run<K>(
    api: Api<K>,
    scope: Option<String>,
    cache: Arc<Cache<K>>,
    handlers: Arc<Vec<Handler<K>>>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    // managedFields are dropped before caching: no loop reads them from the cache (ownership
    // is read from live objects), and at a thousand Releases they are most of the bytes.
    let config = watcher::Config::default()
        .any_semantic()
        .timeout(crate::engine::connect::WATCH_TIMEOUT_SECS);
    let stream = watcher::watcher(api, config)
        .modify(|o| o.managed_fields_mut().clear())
        .default_backoff();
    let mut stream = std::pin::pin!(stream);
    let mut seen_in_list: std::collections::HashSet<String> = std::collections::HashSet::new();
    loop {
        let event = tokio::select! {
            e = stream.next() => e,
            _ = shutdown.changed() => return,
        };
        let Some(event) = event else { return };
        if event.is_ok() {
            cache.failing.store(0, Ordering::Relaxed);
        }
        match event {
            Ok(Event::Init) => seen_in_list.clear(),
            Ok(Event::InitApply(object)) | Ok(Event::Apply(object)) => {
                let key = key_of(&object);
                seen_in_list.insert(key.clone());
                // Nothing kept of an object this replica does not need: no handler either.
                let (old, Some(new)) = cache.store(key, object) else {
                    continue;
                };
                for h in handlers.iter() {
                    h(old.as_deref(), Some(&new));
                }
            }
            Ok(Event::InitDone) => {
                // Several watches (one per namespace) share a cache; it is synced once
                // each of them listed.
                // Objects gone while the watch was down: deleted. (Only this watch's namespace:
                // several watches may share one cache.)
                let prefix = scope.as_ref().map(|ns| format!("{ns}/"));
                let stale: Vec<String> = cache
                    .keys()
                    .into_iter()
                    .filter(|k| prefix.as_ref().is_none_or(|p| k.starts_with(p)))
                    .filter(|k| !seen_in_list.contains(k))
                    .collect();
                for key in stale {
                    if let Some(old) = cache.write().remove(&key) {
                        for h in handlers.iter() {
                            h(Some(&old.object), None);
                        }
                    }
                }
                cache.listed.fetch_add(1, Ordering::Relaxed);
            }
            Ok(Event::Delete(object)) => {
                let key = key_of(&object);
                let old = cache.write().remove(&key);
                let old = old.map(|e| e.object.as_ref().clone()).unwrap_or(object);
                for h in handlers.iter() {
                    h(Some(&old), None);
                }
            }
            Err(e) => {
                let failing = cache.failing.fetch_add(1, Ordering::Relaxed) + 1;
                cache.errors.fetch_add(1, Ordering::Relaxed);
                let resource = std::any::type_name::<K>()
                    .rsplit("::")
                    .next()
                    .unwrap_or_default();
                tracing::warn!(
                    resource,
                    namespace = scope.as_deref().unwrap_or("(all)"),
                    failing,
                    "watch failed (retried with backoff): {e}"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn cm(name: &str, team: &str, value: &str) -> ConfigMap {
        let mut cm = ConfigMap::default();
        cm.metadata.namespace = Some("ns".into());
        cm.metadata.name = Some(name.into());
        cm.metadata.labels = Some([("team".to_string(), team.to_string())].into());
        cm.data = Some([("value".to_string(), value.to_string())].into());
        cm
    }

    fn team(o: &ConfigMap) -> String {
        o.labels().get("team").cloned().unwrap_or_default()
    }

    /// "ours" in full, "theirs" as a stub without its data, "nobody's" not at all.
    fn trimmed() -> Cache<ConfigMap> {
        Cache::trimmed(Trim {
            needed: Box::new(|o| team(o) == "ours"),
            stub: Box::new(|o| {
                (team(o) != "nobody").then(|| ConfigMap {
                    metadata: o.metadata.clone(),
                    ..Default::default()
                })
            }),
        })
    }

    #[test]
    fn objects_not_needed_are_kept_as_stubs_or_not_at_all() {
        let cache = trimmed();
        cache.store("ns/a".into(), cm("a", "ours", "1"));
        cache.store("ns/b".into(), cm("b", "theirs", "2"));
        let (_, kept) = cache.store("ns/c".into(), cm("c", "nobody", "3"));
        assert!(kept.is_none());
        assert_eq!(
            cache.get("ns/a").unwrap().data.as_ref().unwrap()["value"],
            "1"
        );
        assert!(
            cache.get("ns/b").is_none(),
            "a stub is not handed out as the object"
        );
        assert!(
            cache.stub("ns/b").unwrap().data.is_none(),
            "the stub has no data"
        );
        assert!(cache.get_any("ns/c").is_none());
        assert_eq!(cache.all().len(), 1);
        assert_eq!(cache.all_entries().len(), 2);

        // A takeover reads the object and replaces the stub; an entry in full stays.
        assert!(cache.replace_stub("ns/b", Arc::new(cm("b", "theirs", "2"))));
        assert!(!cache.replace_stub("ns/a", Arc::new(cm("a", "ours", "old"))));
        assert_eq!(
            cache.get("ns/a").unwrap().data.as_ref().unwrap()["value"],
            "1"
        );
        assert!(cache.get("ns/b").is_some());

        // A shard given up: its objects become stubs again.
        cache.trim_where(|o| o.name_any() == "b");
        assert!(cache.get("ns/b").is_none());
        assert!(cache.stub("ns/b").is_some());
        assert!(cache.get("ns/a").is_some());
    }

    #[test]
    fn an_object_that_stops_being_needed_replaces_its_full_entry() {
        let cache = trimmed();
        cache.store("ns/a".into(), cm("a", "ours", "1"));
        let (old, new) = cache.store("ns/a".into(), cm("a", "nobody", "2"));
        assert!(old.is_some() && new.is_none());
        assert!(cache.get_any("ns/a").is_none());
    }
}

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

/// The cache of one kind, by `namespace/name`.
pub struct Cache<K> {
    map: RwLock<HashMap<String, Arc<K>>>,
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
            listed: AtomicUsize::new(0),
            watches: AtomicUsize::new(0),
            failing: AtomicUsize::new(0),
            errors: AtomicUsize::new(0),
        }
    }
}

impl<K> Cache<K> {
    pub fn get(&self, key: &str) -> Option<Arc<K>> {
        self.read().get(key).cloned()
    }

    pub fn all(&self) -> Vec<Arc<K>> {
        self.read().values().cloned().collect()
    }

    pub fn keys(&self) -> Vec<String> {
        self.read().keys().cloned().collect()
    }

    /// The keys of the objects that `keep` accepts, looked at under the read lock: an event
    /// handler scanning every Release on each status change should not clone the whole cache.
    pub fn keys_where(&self, keep: impl Fn(&K) -> bool) -> Vec<String> {
        self.read()
            .iter()
            .filter(|(_, o)| keep(o))
            .map(|(k, _)| k.clone())
            .collect()
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

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, Arc<K>>> {
        crate::engine::locks::read(&self.map)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, Arc<K>>> {
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
    let stream = watcher::watcher(api, watcher::Config::default().any_semantic())
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
                let new = Arc::new(object);
                let old = cache.write().insert(key, new.clone());
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
                            h(Some(&old), None);
                        }
                    }
                }
                cache.listed.fetch_add(1, Ordering::Relaxed);
            }
            Ok(Event::Delete(object)) => {
                let key = key_of(&object);
                let old = cache.write().remove(&key);
                let old = old.as_deref().cloned().unwrap_or(object);
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

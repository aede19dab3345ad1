//! Caches of what is made per identity (impersonating connections, appliers, a target's
//! discovery answers), bounded per tenant.
//!
//! A tenant chooses the identities: every `serviceAccountName` it writes into a Release, and
//! every version of a Cluster's kubeconfig Secret, is a new connection with two clients and
//! their tasks (about 130 KB). Kept for ever, or for an hour of idleness, a tenant patching
//! names in a loop filled the daemon's memory (an attack: 900 names, +120 MB) and took every
//! other tenant's drift and health down with it. Now a namespace holds
//! [`SERVICE_ACCOUNTS`] ServiceAccounts' identities, more only while each is used within
//! [`RECENT`] and never more than [`SERVICE_ACCOUNTS_IN_USE`], and a Cluster
//! [`CLUSTER_VERSIONS`] versions of its credentials, the least recently used going first, so
//! one tenant's churn evicts only its own; what is evicted is made again on its next use.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::engine::locks::lock;

/// ServiceAccounts of one namespace whose identities are held at once, beyond which those
/// unused for [`RECENT`] go: a namespace's Releases name a few.
pub const SERVICE_ACCOUNTS: usize = 32;

/// ServiceAccounts of one namespace held however recently each was used: a namespace whose
/// loops use more than [`SERVICE_ACCOUNTS`] in turn keeps them (evicting one in use would
/// build its applier and watches again at every pass), up to this many.
pub const SERVICE_ACCOUNTS_IN_USE: usize = 4 * SERVICE_ACCOUNTS;

/// How recently an identity must have been used to stay past its group's room.
pub const RECENT: Duration = Duration::from_secs(300);

/// Versions of one Cluster's credentials held at once: the current one, and the one before
/// while passes that read it finish.
pub const CLUSTER_VERSIONS: usize = 2;

/// Who chose an identity, which decides how many of its kind may be held.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Holder {
    /// convoy's own identity: one, never evicted for room.
    #[default]
    Convoy,
    /// A ServiceAccount of this namespace, named by a Release (or the default deployer).
    ServiceAccount { namespace: String },
    /// A Cluster's kubeconfig (one version of its Secret).
    Cluster { namespace: String, name: String },
}

impl Holder {
    /// The group an identity counts in, how many it holds (more only while used within
    /// [`RECENT`]), and the most it holds.
    fn group(&self) -> Option<(String, usize, usize)> {
        match self {
            Holder::Convoy => None,
            Holder::ServiceAccount { namespace } => Some((
                format!("sa {namespace}"),
                SERVICE_ACCOUNTS,
                SERVICE_ACCOUNTS_IN_USE,
            )),
            // An older version of a Cluster's credentials is not used again.
            Holder::Cluster { namespace, name } => Some((
                format!("cluster {namespace}/{name}"),
                CLUSTER_VERSIONS,
                CLUSTER_VERSIONS,
            )),
        }
    }
}

struct Entry<V> {
    group: Option<String>,
    used: Instant,
    value: V,
}

/// Values by key, each held for a [`Holder`], dropped after `idle` unused.
pub struct TenantCache<V> {
    entries: Mutex<HashMap<String, Entry<V>>>,
    idle: Duration,
}

impl<V: Clone> TenantCache<V> {
    pub fn new(idle: Duration) -> Self {
        Self {
            entries: Mutex::new(HashMap::new()),
            idle,
        }
    }

    /// The value at `key`, marked used, if it is held.
    pub fn get(&self, key: &str) -> Option<V> {
        let mut entries = lock(&self.entries);
        let entry = entries.get_mut(key)?;
        entry.used = Instant::now();
        Some(entry.value.clone())
    }

    /// The value at `key`, or the one `make` makes (held for `holder`); a failure holds
    /// nothing. Two callers making one at once both get the first one held.
    pub fn get_or_try_insert<E>(
        &self,
        key: &str,
        holder: &Holder,
        make: impl FnOnce() -> Result<V, E>,
    ) -> Result<V, E> {
        if let Some(value) = self.get(key) {
            return Ok(value);
        }
        let value = make()?;
        Ok(self.put(key.to_string(), holder, value, false))
    }

    /// The value at `key`, or the one `make` makes (held for `holder`).
    pub fn get_or_insert_with(&self, key: &str, holder: &Holder, make: impl FnOnce() -> V) -> V {
        if let Some(value) = self.get(key) {
            return value;
        }
        let value = make();
        self.put(key.to_string(), holder, value, false)
    }

    /// Hold `value` at `key` for `holder`, in place of what is held there.
    pub fn insert(&self, key: String, holder: &Holder, value: V) {
        self.put(key, holder, value, true);
    }

    /// Hold `value` at `key` for `holder` (with `replace` false, a value held there already
    /// is kept and returned), after making room: entries idle past the window go; past its
    /// group's room, the group's entries unused for [`RECENT`], least recently used first;
    /// past its most, its least recently used whatever their age.
    fn put(&self, key: String, holder: &Holder, value: V, replace: bool) -> V {
        let mut entries = lock(&self.entries);
        entries.retain(|_, e| e.used.elapsed() < self.idle);
        if let Some(held) = entries.get_mut(&key) {
            held.used = Instant::now();
            if !replace {
                return held.value.clone();
            }
            held.value = value.clone();
            return value;
        }
        let group = holder.group();
        if let Some((name, room, most)) = &group {
            let mut own: Vec<(Instant, String)> = entries
                .iter()
                .filter(|(_, e)| e.group.as_ref() == Some(name))
                .map(|(k, e)| (e.used, k.clone()))
                .collect();
            own.sort();
            let mut held = own.len();
            for (used, old) in &own {
                let stale = used.elapsed() >= RECENT;
                if held < *room || (held < *most && !stale) {
                    break;
                }
                entries.remove(old);
                held -= 1;
            }
        }
        entries.insert(
            key,
            Entry {
                group: group.map(|(name, _, _)| name),
                used: Instant::now(),
                value: value.clone(),
            },
        );
        value
    }

    /// How many values are held (for tests and metrics).
    pub fn len(&self) -> usize {
        lock(&self.entries).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sa(namespace: &str) -> Holder {
        Holder::ServiceAccount {
            namespace: namespace.into(),
        }
    }

    #[test]
    fn a_tenants_churn_evicts_only_its_own_least_recently_used() {
        let cache = TenantCache::new(Duration::from_secs(3600));
        cache.insert("b/sa".into(), &sa("team-b"), 0);
        cache.insert("own".into(), &Holder::Convoy, 0);
        let prod = Holder::Cluster {
            namespace: "team-a".into(),
            name: "prod".into(),
        };
        cache.insert("prod@1".into(), &prod, 0);
        for n in 0..SERVICE_ACCOUNTS_IN_USE {
            cache.insert(format!("a/sa-{n}"), &sa("team-a"), n);
        }
        // All used within RECENT: past the room, up to the most, they stay (a namespace
        // whose loops use them in turn would otherwise build each again at every pass).
        assert_eq!(cache.len(), SERVICE_ACCOUNTS_IN_USE + 3);
        // sa-0 used again: sa-1 is now the least recently used of team-a's.
        assert_eq!(cache.get("a/sa-0"), Some(0));
        for n in SERVICE_ACCOUNTS_IN_USE..900 {
            cache.insert(format!("a/sa-{n}"), &sa("team-a"), n);
            if n == SERVICE_ACCOUNTS_IN_USE {
                assert_eq!(cache.get("a/sa-1"), None);
                assert_eq!(cache.get("a/sa-0"), Some(0));
            }
        }
        // A Cluster's Secret rotated in a loop: its two latest versions.
        for version in 2..100 {
            cache.insert(format!("prod@{version}"), &prod, version);
        }
        assert_eq!(
            cache.len(),
            SERVICE_ACCOUNTS_IN_USE + CLUSTER_VERSIONS + 2,
            "team-a's ServiceAccounts and prod's versions, team-b's and convoy's own"
        );
        assert_eq!(cache.get("prod@98"), Some(98));
        assert_eq!(cache.get("b/sa"), Some(0));
        assert_eq!(cache.get("own"), Some(0));
        assert_eq!(cache.get("a/sa-899"), Some(899));
        // Two callers making one at once both get the first one held.
        assert_eq!(
            cache.get_or_insert_with("a/sa-899", &sa("team-a"), || 7),
            899
        );
    }

    #[test]
    fn idle_entries_go_and_a_failed_make_holds_nothing() {
        let cache = TenantCache::new(Duration::ZERO);
        cache.insert("a".into(), &sa("team-a"), 1);
        cache.insert("b".into(), &sa("team-b"), 2);
        assert_eq!(cache.len(), 1, "the idle one went when b came");
        let made: Result<i32, &str> =
            cache.get_or_try_insert("c", &sa("team-a"), || Err("refused"));
        assert_eq!(made, Err("refused"));
        assert_eq!(cache.get("c"), None);
    }
}

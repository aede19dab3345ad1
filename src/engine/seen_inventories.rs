//! Which version of each ReleaseInventory this process's controller last saw: the one it last
//! read at its latest or wrote (only the controller records: its passes of one Release run one
//! at a time, so the version recorded last is the one seen last). The controller may then take
//! the inventory from the daemon's informer cache instead of the API server (issue 21: at
//! 10,000 Releases that read was the last request a steady pass made, about a thousand a
//! minute).
//!
//! Why the cache needs this: the controller's prune works on the inventory, and a `Put` records
//! exactly the members it is given. A cached copy behind the controller's own last write could
//! drop a member the render no longer holds, which would then never be pruned. A copy at exactly
//! the version the controller last saw holds all of its writes; what it can miss is another
//! writer's write that the watch has not delivered yet (the health loop's states, a replica that
//! held the shard, a person's `convoy sync`). Against that, the first write a pass makes from
//! such a copy carries its uid and resourceVersion as preconditions
//! ([`super::inventory::InventoryHandle`]): refused, it is written again on the latest version
//! when that differs only in the health loop's states, and otherwise the pass fails and the
//! next one reads the API server. A pass that writes nothing changes nothing, and the next one
//! sees what the watch brought; a rollout in progress, which finishes or times out on the health
//! loop's states, reads the latest first.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::engine::locks::lock;

/// The uid and resourceVersion of each inventory (by `namespace/name`) last seen.
#[derive(Default)]
pub struct SeenInventories(Mutex<HashMap<String, Seen>>);

#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    uid: String,
    resource_version: String,
}

fn key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

impl SeenInventories {
    /// Remember that the inventory at `namespace/name` was, a moment ago, `uid` at
    /// `resource_version`.
    pub fn saw(&self, namespace: &str, name: &str, uid: &str, resource_version: &str) {
        lock(&self.0).insert(
            key(namespace, name),
            Seen {
                uid: uid.to_string(),
                resource_version: resource_version.to_string(),
            },
        );
    }

    /// Whether a copy of `namespace/name` at `uid` and `resource_version` is the version this
    /// process last saw. resourceVersions are compared only for equality, as the API says.
    pub fn is_last_seen(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
        resource_version: &str,
    ) -> bool {
        !uid.is_empty()
            && !resource_version.is_empty()
            && lock(&self.0).get(&key(namespace, name))
                == Some(&Seen {
                    uid: uid.to_string(),
                    resource_version: resource_version.to_string(),
                })
    }

    /// Forget `namespace/name`: it is deleted, a write on a cached copy failed, or another
    /// replica works on it now. Its next read goes to the API server.
    pub fn forget(&self, namespace: &str, name: &str) {
        lock(&self.0).remove(&key(namespace, name));
    }

    /// Forget every inventory `gone` says (by namespace and name), for a shard given up.
    pub fn forget_where(&self, gone: impl Fn(&str, &str) -> bool) {
        lock(&self.0).retain(|k, _| {
            let (namespace, name) = k.split_once('/').unwrap_or(("", k));
            !gone(namespace, name)
        });
    }

    /// How many inventories are remembered (the daemon's memory per Release held).
    pub fn len(&self) -> usize {
        lock(&self.0).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only the exact version last seen counts, of the same object (a re-created inventory
    /// has another uid); nothing seen, or forgotten, counts as not seen.
    #[test]
    fn only_the_version_last_seen_of_the_same_object_counts() {
        let seen = SeenInventories::default();
        assert!(!seen.is_last_seen("apps", "web", "u1", "7"));
        seen.saw("apps", "web", "u1", "7");
        assert!(seen.is_last_seen("apps", "web", "u1", "7"));
        assert!(!seen.is_last_seen("apps", "web", "u1", "6"), "older");
        assert!(!seen.is_last_seen("apps", "web", "u1", "8"), "newer");
        assert!(!seen.is_last_seen("apps", "web", "u2", "7"), "re-created");
        assert!(!seen.is_last_seen("apps", "api", "u1", "7"));
        assert!(!seen.is_last_seen("other", "web", "u1", "7"));
        // A later write or read replaces the version.
        seen.saw("apps", "web", "u1", "9");
        assert!(!seen.is_last_seen("apps", "web", "u1", "7"));
        assert!(seen.is_last_seen("apps", "web", "u1", "9"));
        // Empty uid or version (an object without metadata) never counts.
        seen.saw("apps", "bare", "", "");
        assert!(!seen.is_last_seen("apps", "bare", "", ""));
        seen.forget("apps", "web");
        assert!(!seen.is_last_seen("apps", "web", "u1", "9"));
    }

    #[test]
    fn a_shard_given_up_is_forgotten_and_only_it() {
        let seen = SeenInventories::default();
        seen.saw("team-a", "web", "u1", "1");
        seen.saw("team-b", "web", "u2", "1");
        seen.forget_where(|namespace, _| namespace == "team-a");
        assert!(!seen.is_last_seen("team-a", "web", "u1", "1"));
        assert!(seen.is_last_seen("team-b", "web", "u2", "1"));
        assert_eq!(seen.len(), 1);
    }
}

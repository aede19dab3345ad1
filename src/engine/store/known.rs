//! What a process knows the render store holds: for each Release, the render this process
//! saw persisted and in the history. A daemon re-syncs an unchanged render at every interval;
//! persistRender and recordHistory would ask the store each time (with the Kubernetes store,
//! GETs of the render's Secrets and of the history: at 10,000 Releases, two thousand
//! requests a minute whose answer never changes).
//!
//! It also knows what runGC may find to collect besides what drops out of the history: the
//! renders this process stored that no history records yet (a sync that failed after
//! persistRender), and whether it has listed a Release's renders since it started (before
//! that, another process or this one before a restart may have left some).
//!
//! Spec: reconcile-flow.txt stageSync steps 2 and 8. The answer is taken from memory only
//! while it cannot have changed: the same Release (uid), the same generation (a spec change,
//! such as a lowered `maxHistory`, asks again), and the render is the one the Release last
//! attempted and last applied (`lastAttempted` and `lastSuccessful`). The store drops a
//! render or a history entry only in runGC, which keeps every render the status refers to;
//! for another process (a replica that held the shard meanwhile, a person's `convoy sync`)
//! to drop this one, the Release must first apply another render, and then this process
//! asks again until it applies this one once more.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

use crate::engine::api::Release;
use crate::engine::locks::lock;

/// One entry per Release: the render known stored and in the history; and what may be left
/// over for runGC.
#[derive(Default)]
pub struct KnownStored {
    known: Mutex<HashMap<String, Known>>,
    leftovers: Mutex<HashMap<String, Leftovers>>,
}

#[derive(Debug, Default)]
struct Leftovers {
    /// runGC listed this Release's renders since the process started.
    listed: bool,
    /// Renders this process stored that no history records yet.
    unrecorded: BTreeSet<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Known {
    uid: String,
    generation: i64,
    render_ref: String,
}

fn key(release: &Release) -> String {
    format!(
        "{}/{}",
        release.metadata.namespace.as_deref().unwrap_or_default(),
        release.metadata.name.as_deref().unwrap_or_default()
    )
}

fn known(release: &Release, render_ref: &str) -> Known {
    Known {
        uid: release.metadata.uid.clone().unwrap_or_default(),
        generation: release.metadata.generation.unwrap_or_default(),
        render_ref: render_ref.to_string(),
    }
}

impl KnownStored {
    /// Whether `render_ref` of `release` is known to be stored and in its history, and is the
    /// render the Release last attempted and last applied.
    pub fn knows(&self, release: &Release, render_ref: &str) -> bool {
        release.status.as_ref().is_some_and(|s| {
            s.attempted_render() == Some(render_ref) && s.applied_render() == Some(render_ref)
        }) && lock(&self.known).get(&key(release)) == Some(&known(release, render_ref))
    }

    /// Remember that `render_ref` of `release` is stored and in its history.
    pub fn remember(&self, release: &Release, render_ref: &str) {
        let key = key(release);
        if let Some(l) = lock(&self.leftovers).get_mut(&key) {
            l.unrecorded.remove(render_ref);
        }
        lock(&self.known).insert(key, known(release, render_ref));
    }

    /// Remember that this process stores `render_ref` of `release` (said before the write:
    /// one that fails part-way leaves chunks too), which no history records until
    /// [`KnownStored::remember`] says so.
    pub fn stored(&self, release: &Release, render_ref: &str) {
        lock(&self.leftovers)
            .entry(key(release))
            .or_default()
            .unrecorded
            .insert(render_ref.to_string());
    }

    /// `render_ref` of `release` is in its history now (made there by another step than
    /// recordHistory): no longer one to collect as unrecorded.
    pub fn recorded(&self, release: &Release, render_ref: &str) {
        if let Some(l) = lock(&self.leftovers).get_mut(&key(release)) {
            l.unrecorded.remove(render_ref);
        }
    }

    /// Take the renders this process stored for `release` that no history records, other
    /// than `keep`: the caller deletes them (a failed delete is [`KnownStored::stored`]
    /// again).
    pub fn take_unrecorded(&self, release: &Release, keep: &[&str]) -> Vec<String> {
        let mut leftovers = lock(&self.leftovers);
        let Some(l) = leftovers.get_mut(&key(release)) else {
            return Vec::new();
        };
        let taken: Vec<String> = l
            .unrecorded
            .iter()
            .filter(|r| !keep.contains(&r.as_str()))
            .cloned()
            .collect();
        for r in &taken {
            l.unrecorded.remove(r);
        }
        taken
    }

    /// Whether runGC, at a change of the history of `release` that now holds `history_len`
    /// entries and records `render_ref` last, may find a render no history records: one this
    /// process stored, or any when this process has not listed the Release's renders since it
    /// started and the history held entries before (a Release's first render has none to
    /// leave but what this process stored for it).
    pub fn may_hold_leftovers(
        &self,
        release: &Release,
        render_ref: Option<&str>,
        history_len: usize,
    ) -> bool {
        let leftovers = lock(&self.leftovers);
        let l = leftovers.get(&key(release));
        let unrecorded =
            l.is_some_and(|l| l.unrecorded.iter().any(|r| Some(r.as_str()) != render_ref));
        let listed = l.is_some_and(|l| l.listed);
        unrecorded || (history_len > 1 && !listed)
    }

    /// runGC listed the store for `release` and collected what no history records.
    pub fn collected(&self, release: &Release) {
        let mut leftovers = lock(&self.leftovers);
        let l = leftovers.entry(key(release)).or_default();
        l.listed = true;
        l.unrecorded.clear();
    }

    /// Forget `release` (it is deleted, or its store changed under it).
    pub fn forget(&self, release: &Release) {
        let key = key(release);
        lock(&self.known).remove(&key);
        lock(&self.leftovers).remove(&key);
    }

    /// Forget every Release `gone(namespace, name)` names: the daemon's replica lost their
    /// shard. Another replica syncs them now and may store renders this one never hears of
    /// (one whose sync fails after persistRender is left over), so "listed since the start"
    /// no longer holds when the shard comes back; and a replica that never gets it back
    /// keeps no entry for it.
    pub fn forget_where(&self, gone: impl Fn(&str, &str) -> bool) {
        let is_gone = |k: &String| {
            let (namespace, name) = k.split_once('/').unwrap_or(("", k));
            gone(namespace, name)
        };
        lock(&self.known).retain(|k, _| !is_gone(k));
        lock(&self.leftovers).retain(|k, _| !is_gone(k));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn release(generation: i64, uid: &str, last_attempted: Option<&str>) -> Release {
        applied(generation, uid, last_attempted, last_attempted)
    }

    fn applied(
        generation: i64,
        uid: &str,
        last_attempted: Option<&str>,
        last_successful: Option<&str>,
    ) -> Release {
        let attempt = |r: Option<&str>| r.map(|r| serde_json::json!({"renderRef": r}));
        serde_json::from_value(serde_json::json!({
            "apiVersion": "core.convoy.kumodo.io/v1alpha1", "kind": "Release",
            "metadata": {"name": "web", "namespace": "apps", "generation": generation, "uid": uid},
            "spec": {"source": {"kind": "GitRepository", "name": "repo"}},
            "status": {
                "lastAttempted": attempt(last_attempted),
                "lastSuccessful": attempt(last_successful),
            },
        }))
        .unwrap()
    }

    #[test]
    fn a_render_is_known_only_while_it_is_the_last_attempted_one_of_the_same_spec() {
        let known = KnownStored::default();
        let r = release(3, "u1", Some("aaa"));
        assert!(!known.knows(&r, "aaa"), "nothing remembered yet");
        known.remember(&r, "aaa");
        assert!(known.knows(&r, "aaa"));
        // Another render, another generation, a re-created Release, or a last attempt of
        // another render (another process may have moved it on): asked again.
        assert!(!known.knows(&r, "bbb"));
        assert!(!known.knows(&release(4, "u1", Some("aaa")), "aaa"));
        assert!(!known.knows(&release(3, "u2", Some("aaa")), "aaa"));
        assert!(!known.knows(&release(3, "u1", Some("bbb")), "aaa"));
        assert!(!known.knows(&release(3, "u1", None), "aaa"));
        // Attempted again but not applied since another render was (held by a gate after a
        // revert: another process may have collected it meanwhile): asked again.
        assert!(!known.knows(&applied(3, "u1", Some("aaa"), Some("bbb")), "aaa"));
        // One entry per Release: a new render replaces the old.
        known.remember(&r, "bbb");
        assert!(!known.knows(&r, "aaa"));
        known.forget(&r);
        assert!(!known.knows(&release(3, "u1", Some("bbb")), "bbb"));
    }

    /// What runGC may find besides what leaves the history: a render this process stored and
    /// no history records (the render being recorded does not count), or, until this process
    /// has listed the Release's renders once, anything another left when the history held
    /// entries before this change.
    #[test]
    fn leftovers_are_looked_for_until_listed_and_after_a_render_stored_unrecorded() {
        let known = KnownStored::default();
        let r = release(3, "u1", Some("bbb"));
        // A first render: nothing can be left over but what this process stored.
        assert!(!known.may_hold_leftovers(&r, Some("bbb"), 1));
        known.stored(&r, "bbb");
        assert!(!known.may_hold_leftovers(&r, Some("bbb"), 1));
        known.stored(&r, "aaa");
        assert!(
            known.may_hold_leftovers(&r, Some("bbb"), 1),
            "aaa is left over"
        );
        known.remember(&r, "aaa");
        assert!(
            !known.may_hold_leftovers(&r, Some("bbb"), 1),
            "aaa was recorded after all"
        );
        // A later render, never listed since the start: another process may have left some.
        assert!(known.may_hold_leftovers(&r, Some("ccc"), 2));
        known.collected(&r);
        assert!(!known.may_hold_leftovers(&r, Some("ccc"), 2));
        known.stored(&r, "ddd");
        assert!(known.may_hold_leftovers(&r, Some("ccc"), 3));
        known.collected(&r);
        assert!(!known.may_hold_leftovers(&r, Some("ccc"), 3));
        known.forget(&r);
        assert!(
            known.may_hold_leftovers(&r, Some("ccc"), 2),
            "listed again after a forget"
        );
    }

    /// A lost shard's Releases are forgotten, and only they: when the shard comes back, the
    /// render is asked for again and runGC lists the store once more.
    #[test]
    fn a_lost_shards_releases_are_forgotten_and_only_they() {
        let known = KnownStored::default();
        let mut other = release(3, "u2", Some("bbb"));
        other.metadata.namespace = Some("team-b".into());
        let r = release(3, "u1", Some("bbb"));
        for release in [&r, &other] {
            known.stored(release, "bbb");
            known.remember(release, "bbb");
            known.collected(release);
            assert!(known.knows(release, "bbb"));
            assert!(!known.may_hold_leftovers(release, Some("ccc"), 2));
        }
        let lost_namespace = r.metadata.namespace.clone().unwrap();
        known.forget_where(|namespace, name| namespace == lost_namespace && name == "web");
        assert!(!known.knows(&r, "bbb"), "asked for again");
        assert!(
            known.may_hold_leftovers(&r, Some("ccc"), 2),
            "another replica may have left a render while it held the shard"
        );
        assert!(known.knows(&other, "bbb"), "a shard still held is kept");
        assert!(!known.may_hold_leftovers(&other, Some("ccc"), 2));
    }
}

//! What a process knows the render store holds: for each Release, the render this process
//! saw persisted and in the history. A daemon re-syncs an unchanged render at every interval;
//! persistRender and recordHistory would ask the store each time (with the Kubernetes store,
//! a LIST of the store's Secrets by label and a GET of the history: at 10,000 Releases, two
//! thousand requests a minute whose answer never changes).
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

/// One entry per Release: the render known stored and in the history; and the renders this
/// process stored that no history records yet (a sync that failed after persistRender).
#[derive(Default)]
pub struct KnownStored {
    known: Mutex<HashMap<String, Known>>,
    unrecorded: Mutex<HashMap<String, BTreeSet<String>>>,
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
        if let Some(refs) = lock(&self.unrecorded).get_mut(&key) {
            refs.remove(render_ref);
        }
        lock(&self.known).insert(key, known(release, render_ref));
    }

    /// Remember that this process stored `render_ref` of `release`, which its history does not
    /// record until [`KnownStored::remember`] says so.
    pub fn stored(&self, release: &Release, render_ref: &str) {
        lock(&self.unrecorded)
            .entry(key(release))
            .or_default()
            .insert(render_ref.to_string());
    }

    /// Whether this process stored a render of `release`, other than `render_ref`, that no
    /// history records: runGC then has something to collect even with a short history.
    pub fn unrecorded_besides(&self, release: &Release, render_ref: Option<&str>) -> bool {
        lock(&self.unrecorded)
            .get(&key(release))
            .is_some_and(|refs| refs.iter().any(|r| Some(r.as_str()) != render_ref))
    }

    /// runGC listed the store for `release`: whatever it stored unrecorded is collected.
    pub fn collected(&self, release: &Release) {
        lock(&self.unrecorded).remove(&key(release));
    }

    /// Forget `release` (it is deleted, or its store changed under it).
    pub fn forget(&self, release: &Release) {
        let key = key(release);
        lock(&self.known).remove(&key);
        lock(&self.unrecorded).remove(&key);
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

    /// A render this process stored stays unrecorded until a history records it, and is
    /// forgotten once runGC has listed the store; the render being recorded now does not count.
    #[test]
    fn a_render_stored_and_never_recorded_is_collected_at_the_next_listing() {
        let known = KnownStored::default();
        let r = release(3, "u1", Some("bbb"));
        assert!(!known.unrecorded_besides(&r, Some("bbb")));
        known.stored(&r, "aaa");
        known.stored(&r, "bbb");
        assert!(
            known.unrecorded_besides(&r, Some("bbb")),
            "aaa is left over"
        );
        assert!(known.unrecorded_besides(&r, None));
        known.remember(&r, "aaa");
        assert!(
            !known.unrecorded_besides(&r, Some("bbb")),
            "aaa is recorded after all"
        );
        known.stored(&r, "ccc");
        assert!(known.unrecorded_besides(&r, Some("bbb")));
        known.collected(&r);
        assert!(!known.unrecorded_besides(&r, None));
        known.stored(&r, "ddd");
        known.forget(&r);
        assert!(!known.unrecorded_besides(&r, None));
    }
}

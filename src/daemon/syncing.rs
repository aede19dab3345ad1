//! The Releases the controller is reconciling in this process, and the health passes put off
//! until it is done.
//!
//! A health pass that runs beside the controller's sync of the same Release reads an
//! inventory the sync is still writing (its intent, then each wave's Put): its assessment is
//! of a half-applied render and its write, which carries the resourceVersion read, is refused
//! with 409 Conflict once the next Put lands (daemon_vs_flux: about one Release in two while
//! converging). The pass is put off instead and runs once the sync ends, on what it wrote.
//! Only this process's controller counts: with the controller and the observer in two
//! processes, the health write's precondition still catches the race.
//!
//! A drift wake from the live-object watches (`daemon::drift_wake`) beside the sync is put
//! off the same way: the sync's own deletions (prunes, re-creates, a hook's finalizer) are
//! not drift, and a drift pass in the middle of a sync sees objects still to come.

use std::collections::HashSet;
use std::sync::Mutex;

use crate::engine::locks::lock;

#[derive(Default)]
pub struct Syncing {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    running: HashSet<String>,
    put_off: HashSet<String>,
    drift_put_off: HashSet<String>,
}

/// What was put off while the controller ran a key: the caller queues those passes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PutOff {
    pub health: bool,
    pub drift: bool,
}

impl Syncing {
    /// The controller starts a pass of `key`.
    pub fn begin(&self, key: &str) {
        lock(&self.state).running.insert(key.to_string());
    }

    /// The controller's pass of `key` ended; which passes were put off meanwhile (the caller
    /// queues them).
    pub fn end(&self, key: &str) -> PutOff {
        let mut s = lock(&self.state);
        s.running.remove(key);
        PutOff {
            health: s.put_off.remove(key),
            drift: s.drift_put_off.remove(key),
        }
    }

    /// Whether a drift wake of `key` is put off: the controller runs `key` now, and `end`
    /// will say so.
    pub fn put_off_drift(&self, key: &str) -> bool {
        self.hold(key, |s| &mut s.drift_put_off)
    }

    /// Record `key` in the set `put_off` names if the controller runs it now.
    fn hold(&self, key: &str, put_off: impl FnOnce(&mut State) -> &mut HashSet<String>) -> bool {
        let mut s = lock(&self.state);
        if !s.running.contains(key) {
            return false;
        }
        put_off(&mut s).insert(key.to_string());
        true
    }

    /// Whether the health pass of `key` is put off: the controller runs `key` now, and `end`
    /// will say so.
    pub fn put_off(&self, key: &str) -> bool {
        self.hold(key, |s| &mut s.put_off)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_health_pass_beside_a_sync_waits_for_its_end_once() {
        let s = Syncing::default();
        assert!(!s.put_off("ns/a"), "no sync: the pass runs");
        s.begin("ns/a");
        assert!(
            !s.put_off("ns/b"),
            "another Release's sync does not hold it"
        );
        assert!(s.put_off("ns/a"));
        assert!(s.put_off("ns/a"), "put off twice, queued once");
        assert_eq!(s.end("ns/b"), PutOff::default());
        assert!(s.end("ns/a").health, "the sync's end queues the pass");
        assert!(!s.put_off("ns/a"));
        s.begin("ns/a");
        assert_eq!(s.end("ns/a"), PutOff::default(), "nothing put off");
        assert!(
            !s.put_off_drift("ns/a"),
            "no sync: the drift wake goes ahead"
        );
        s.begin("ns/a");
        assert!(s.put_off_drift("ns/a"));
        assert_eq!(
            s.end("ns/a"),
            PutOff {
                health: false,
                drift: true
            }
        );
    }
}

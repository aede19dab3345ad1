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
}

impl Syncing {
    /// The controller starts a pass of `key`.
    pub fn begin(&self, key: &str) {
        lock(&self.state).running.insert(key.to_string());
    }

    /// The controller's pass of `key` ended; whether a health pass was put off meanwhile (the
    /// caller queues it).
    pub fn end(&self, key: &str) -> bool {
        let mut s = lock(&self.state);
        s.running.remove(key);
        s.put_off.remove(key)
    }

    /// Whether the health pass of `key` is put off: the controller runs `key` now, and `end`
    /// will say so.
    pub fn put_off(&self, key: &str) -> bool {
        let mut s = lock(&self.state);
        if !s.running.contains(key) {
            return false;
        }
        s.put_off.insert(key.to_string());
        true
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
        assert!(!s.end("ns/b"));
        assert!(s.end("ns/a"), "the sync's end queues the pass");
        assert!(!s.put_off("ns/a"));
        s.begin("ns/a");
        assert!(!s.end("ns/a"), "nothing put off, nothing to queue");
    }
}

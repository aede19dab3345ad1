//! When the drift loop runs for a change the live-object watches saw (`daemon::live`): soon
//! after the first, so a `kubectl edit` shows as `InSync=False` and, in automatic mode, is put
//! back within seconds, as Argo CD's self-heal does; then, while changes keep coming, further
//! and further apart, so a controller that fights convoy for a field (an HPA beside a
//! rendered `replicas`) costs a drift pass and a sync every ten minutes at most, as the
//! resync did before, not one every few seconds. Argo CD backs its self-heal off the same way
//! (`selfHealBackoff`).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use super::queue::WorkQueue;
use crate::engine::locks;

/// How long a woken pass waits for the rest of a change: one `kubectl apply` of several
/// objects, one edit seen by several watches, is one pass.
pub const SETTLE: Duration = Duration::from_secs(1);
/// The least time between two woken passes of one Release once changes repeat.
pub const FIRST_GAP: Duration = Duration::from_secs(10);
/// The most: the daemon's default resync, which rechecked every Release before.
pub const MAX_GAP: Duration = Duration::from_secs(600);

/// The woken passes of one Release: when the last is due, and the gap before the next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wakes {
    due: Instant,
    gap: Duration,
}

/// When a change seen `now` runs the drift pass, and what is remembered of it. A change
/// before the pending pass is part of it (an edit of several objects); a Release quiet for
/// twice its gap since its last woken pass starts over.
pub fn next(before: Option<Wakes>, now: Instant) -> Wakes {
    match before {
        Some(w) if now < w.due => w,
        Some(w) if now < w.due + w.gap * 2 => Wakes {
            due: (now + SETTLE).max(w.due + w.gap),
            gap: (w.gap * 2).min(MAX_GAP),
        },
        _ => Wakes {
            due: now + SETTLE,
            gap: FIRST_GAP,
        },
    }
}

/// Queues the drift loop's passes for the changes the watches saw.
pub struct DriftWakes {
    queue: WorkQueue,
    wakes: Mutex<HashMap<String, Wakes>>,
}

/// Past this many Releases remembered, those quiet long enough to start over are forgotten.
const REMEMBERED: usize = 1024;

impl DriftWakes {
    pub fn new(queue: WorkQueue) -> Self {
        Self {
            queue,
            wakes: Mutex::default(),
        }
    }

    /// Someone else changed what convoy applied for the Release of `key` (`namespace/name`).
    pub fn changed(&self, key: &str) {
        let now = Instant::now();
        let due = {
            let mut wakes = locks::lock(&self.wakes);
            if wakes.len() >= REMEMBERED {
                wakes.retain(|_, w| now < w.due + w.gap * 2);
            }
            let wake = next(wakes.get(key).copied(), now);
            wakes.insert(key.to_string(), wake);
            wake.due
        };
        // The queue keeps the earliest pending add of a key; an event before it runs sooner.
        self.queue
            .add_after(key, due.saturating_duration_since(now));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One change runs a pass after [`SETTLE`]; changes that keep coming (a fight) are run
    /// further and further apart up to [`MAX_GAP`]; a quiet Release starts over.
    #[test]
    fn repeated_changes_back_off_and_a_quiet_release_starts_over() {
        let t0 = Instant::now();
        let first = next(None, t0);
        assert_eq!(first.due, t0 + SETTLE);
        let s = |secs| Duration::from_secs(secs);
        // Within the settle time: the same pass.
        let again = next(Some(first), t0 + Duration::from_millis(300));
        assert_eq!(again, first);
        // An HPA scaling back every 15 s after each put back.
        let mut wake = first;
        let mut dues = Vec::new();
        let mut now = t0;
        for _ in 0..8 {
            now = wake.due.max(now) + s(15);
            wake = next(Some(wake), now);
            dues.push(wake.due.duration_since(t0).as_secs());
        }
        assert_eq!(dues, [17, 37, 77, 157, 317, 637, 1237, 1837]);
        assert_eq!(wake.gap, MAX_GAP);
        // Quiet for twice the gap: at once again.
        let later = wake.due + MAX_GAP * 2;
        assert_eq!(
            next(Some(wake), later),
            Wakes {
                due: later + SETTLE,
                gap: FIRST_GAP
            }
        );
    }
}

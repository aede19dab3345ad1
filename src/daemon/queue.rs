//! A work queue with client-go's semantics: a key is queued at most once, a key being
//! processed is not handed to a second worker (if it is added meanwhile, it comes back after
//! `done`), delayed adds, and rate-limited retries per key.
//!
//! A key has at most one pending delayed add, the earliest, as client-go's delaying queue and
//! kube-runtime's scheduler keep it: another `add_after` of the same key keeps the earlier
//! time, so events and resyncs never stack up timers (passes per interval stay constant
//! however long the daemon runs).
//!
//! Why not kube-runtime's `Controller`: the spec's wake-up rules are cross-object and
//! asymmetric (`shouldEnqueueOnUpdate` per loop, an inventory change waking the controller
//! and the observer on different fields, a status change waking *other* Releases of a higher
//! cluster wave, source revisions waking their Releases), and the controller's requeue delay
//! comes out of the reconcile's own status assembly. kube-runtime expresses part of that
//! (`reconcile_on`, predicates); this queue, fed by the informers of `daemon::informer`,
//! expresses all of it with one mechanism that the unit tests below pin down.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

/// The first retry delay of a failing key; doubles up to [`MAX_RETRY_DELAY`].
pub const BASE_RETRY_DELAY: Duration = Duration::from_millis(5);
/// The longest retry delay (client-go's default item rate limiter caps at 1000 s).
pub const MAX_RETRY_DELAY: Duration = Duration::from_secs(1000);

#[derive(Default)]
struct State {
    queue: VecDeque<String>,
    dirty: HashSet<String>,
    processing: HashSet<String>,
    failures: HashMap<String, u32>,
    /// The one pending delayed add of a key: when it is due.
    delayed: HashMap<String, tokio::time::Instant>,
    shutting_down: bool,
}

/// The queue of one loop.
#[derive(Clone, Default)]
pub struct WorkQueue {
    state: Arc<Mutex<State>>,
    notify: Arc<Notify>,
}

impl WorkQueue {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        crate::engine::locks::lock(&self.state)
    }

    /// Queue `key` now (no-op if it is already queued).
    pub fn add(&self, key: &str) {
        let mut s = self.lock();
        if s.shutting_down || s.dirty.contains(key) {
            return;
        }
        s.dirty.insert(key.to_string());
        if !s.processing.contains(key) {
            s.queue.push_back(key.to_string());
            drop(s);
            self.notify.notify_one();
        }
    }

    /// Queue `key` after `delay`, unless an earlier delayed add of it is pending already.
    pub fn add_after(&self, key: &str, delay: Duration) {
        if delay.is_zero() {
            self.add(key);
            return;
        }
        let due = tokio::time::Instant::now() + delay;
        {
            let mut s = self.lock();
            if s.shutting_down {
                return;
            }
            match s.delayed.get(key) {
                Some(pending) if *pending <= due => return,
                _ => {
                    s.delayed.insert(key.to_string(), due);
                }
            }
        }
        let queue = self.clone();
        let key = key.to_string();
        tokio::spawn(async move {
            tokio::time::sleep_until(due).await;
            // Only the timer of the pending time adds; one replaced by an earlier time ends.
            let mine = {
                let mut s = queue.lock();
                if s.delayed.get(&key) == Some(&due) {
                    s.delayed.remove(&key);
                    true
                } else {
                    false
                }
            };
            if mine {
                queue.add(&key);
            }
        });
    }

    /// Keys with a pending delayed add.
    pub fn delayed(&self) -> usize {
        self.lock().delayed.len()
    }

    /// Queue `key` after its per-key exponential retry delay, and count the failure.
    pub fn add_rate_limited(&self, key: &str) -> Duration {
        let delay = {
            let mut s = self.lock();
            let n = s.failures.entry(key.to_string()).or_insert(0);
            *n += 1;
            retry_delay(*n)
        };
        self.add_after(key, delay);
        delay
    }

    /// Count a failure of `key` without scheduling it (the caller schedules its own backoff).
    pub fn count_failure(&self, key: &str) {
        *self.lock().failures.entry(key.to_string()).or_insert(0) += 1;
    }

    /// Consecutive failures of `key`.
    pub fn failures(&self, key: &str) -> u32 {
        self.lock().failures.get(key).copied().unwrap_or(0)
    }

    /// Forget the failures of `key` (it succeeded).
    pub fn forget(&self, key: &str) {
        self.lock().failures.remove(key);
    }

    /// The next key to process; `None` once shut down and drained.
    pub async fn get(&self) -> Option<String> {
        loop {
            let notified = self.notify.notified();
            {
                let mut s = self.lock();
                if let Some(key) = s.queue.pop_front() {
                    s.dirty.remove(&key);
                    s.processing.insert(key.clone());
                    return Some(key);
                }
                if s.shutting_down {
                    return None;
                }
            }
            notified.await;
        }
    }

    /// The worker finished `key`; if it was added meanwhile, it is queued again.
    pub fn done(&self, key: &str) {
        let mut s = self.lock();
        s.processing.remove(key);
        if s.dirty.contains(key) && !s.shutting_down {
            s.queue.push_back(key.to_string());
            drop(s);
            self.notify.notify_one();
        }
    }

    /// Keys waiting (not counting those being processed).
    pub fn depth(&self) -> usize {
        self.lock().queue.len()
    }

    /// Stop handing out keys; workers finish what they hold.
    pub fn shut_down(&self) {
        let mut s = self.lock();
        s.shutting_down = true;
        s.queue.clear();
        s.dirty.clear();
        s.delayed.clear();
        drop(s);
        self.notify.notify_waiters();
    }
}

/// The retry delay after `failures` consecutive failures: 5 ms × 2^(n−1), capped.
pub fn retry_delay(failures: u32) -> Duration {
    let exp = failures.saturating_sub(1).min(30);
    BASE_RETRY_DELAY
        .saturating_mul(1u32 << exp)
        .min(MAX_RETRY_DELAY)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_key_is_queued_once_and_not_handed_out_twice() {
        let q = WorkQueue::new();
        q.add("a");
        q.add("a");
        q.add("b");
        assert_eq!(q.depth(), 2);
        let first = q.get().await.unwrap();
        assert_eq!(first, "a");
        // Added while processing: held back until done.
        q.add("a");
        assert_eq!(q.get().await.unwrap(), "b");
        assert_eq!(q.depth(), 0);
        q.done("a");
        assert_eq!(q.get().await.unwrap(), "a");
    }

    #[tokio::test]
    async fn shut_down_releases_waiting_workers() {
        let q = WorkQueue::new();
        let waiter = {
            let q = q.clone();
            tokio::spawn(async move { q.get().await })
        };
        tokio::task::yield_now().await;
        q.shut_down();
        assert_eq!(waiter.await.unwrap(), None);
    }

    /// Every event and resync of a long-running daemon re-adds its keys with a delay; those
    /// adds must not stack up into more passes.
    #[tokio::test(start_paused = true)]
    async fn repeated_delayed_adds_of_a_key_deliver_it_once_at_the_earliest_time() {
        let q = WorkQueue::new();
        for i in 0..100u64 {
            q.add_after("r", Duration::from_secs(30 + i % 7));
        }
        q.add_after("r", Duration::from_secs(20));
        assert_eq!(q.delayed(), 1);
        tokio::time::advance(Duration::from_secs(19)).await;
        tokio::task::yield_now().await;
        assert_eq!(q.depth(), 0, "not before the earliest time");
        tokio::time::advance(Duration::from_secs(2)).await;
        // Let the timers that woke run.
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert_eq!(q.depth(), 1);
        assert_eq!(q.get().await.as_deref(), Some("r"));
        q.done("r");
        tokio::time::advance(Duration::from_secs(120)).await;
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert_eq!(q.depth(), 0, "one delivery for all those adds");
        assert_eq!(q.delayed(), 0);
    }

    #[test]
    fn retries_back_off_exponentially_to_the_cap() {
        assert_eq!(retry_delay(1), Duration::from_millis(5));
        assert_eq!(retry_delay(2), Duration::from_millis(10));
        assert_eq!(retry_delay(11), Duration::from_millis(5120));
        assert_eq!(retry_delay(40), MAX_RETRY_DELAY);
    }
}

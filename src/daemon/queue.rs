//! A work queue with client-go's semantics: a key is queued at most once, a key being
//! processed is not handed to a second worker (if it is added meanwhile, it comes back after
//! `done`), delayed adds, and rate-limited retries per key.
//!
//! Two levels: a key added by an event (a spec change, a wake-up from another loop, a retry)
//! comes before keys added in bulk (the resync, the Releases of a shard just taken over),
//! except that every [`BULK_TURN`]th key handed out is a bulk one, so a daemon that always has
//! events still gets through its bulk. client-go's queue is one FIFO; with one, a rollout
//! taken over with its shard waits behind the whole shard at every wave, since each wave's
//! wake-up goes to the back.
//!
//! A key has at most one pending delayed add, the earliest, as client-go's delaying queue and
//! kube-runtime's scheduler keep it: another `add_after` of the same key keeps the earlier
//! time, so events and resyncs never stack up timers (passes per interval stay constant
//! however long the daemon runs).
//!
//! A pass that runs long holds no namespace's keys back: while no pass is slow (running past
//! [`SLOW_PASS`]), the loop's workers take keys in order, as above; a slow pass leaves its
//! place to another worker, but the namespaces with a slow pass share the loop's usual number
//! of workers among them, so the others' keys go ahead of theirs. A tenant whose sources or
//! clusters never answer held every worker until the deadline, and every other namespace's
//! Releases waited behind it (`daemon::worker` marks a pass slow). And an event of a
//! namespace with no pass running goes ahead of the events of namespaces with one: a tenant's
//! many passes just under slow, coming back every second, queued ahead of everyone else.
//!
//! Why not kube-runtime's `Controller`: the spec's wake-up rules are cross-object and
//! asymmetric (`shouldEnqueueOnUpdate` per loop, an inventory change waking the controller
//! and the observer on different fields, a status change waking *other* Releases of a higher
//! cluster wave, source revisions waking their Releases), and the controller's requeue delay
//! comes out of the reconcile's own status assembly. kube-runtime expresses part of that
//! (`reconcile_on`, predicates); this queue, fed by the informers of `daemon::informer`,
//! expresses all of it with one mechanism that the unit tests below pin down.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

/// A pass running longer than this is slow: its worker's place goes to another (see the
/// module doc). Passes take well under a second when the API server answers.
pub const SLOW_PASS: Duration = Duration::from_secs(5);

/// One key in this many handed out comes from the bulk while there are events.
pub const BULK_TURN: u32 = 4;

/// The first retry delay of a failing key; doubles up to [`MAX_RETRY_DELAY`].
pub const BASE_RETRY_DELAY: Duration = Duration::from_millis(5);
/// The longest retry delay (client-go's default item rate limiter caps at 1000 s).
pub const MAX_RETRY_DELAY: Duration = Duration::from_secs(1000);

/// Where a key waits: see the module doc.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Bulk,
    Event,
}

#[derive(Default)]
struct State {
    queue: VecDeque<String>,
    /// Keys added in bulk; an entry is stale (skipped) once its key went to `queue`.
    bulk: VecDeque<String>,
    /// Queued or to be queued again after processing, and at which level.
    dirty: HashMap<String, Level>,
    /// Keys handed out since the last bulk one.
    since_bulk: u32,
    processing: HashSet<String>,
    failures: HashMap<String, u32>,
    /// The one pending delayed add of a key: when it is due, and at which level it comes.
    delayed: HashMap<String, (tokio::time::Instant, Level)>,
    /// The same, by time: what the queue's one timer task waits for.
    timeline: BTreeSet<(tokio::time::Instant, String)>,
    /// Keys whose pending delayed add is an [`WorkQueue::add_unless_passed`]: a pass of the
    /// key that starts first withdraws it and puts back the later add it displaced, if any.
    standing_in: HashMap<String, Option<(tokio::time::Instant, Level)>>,
    /// Whether the timer task runs (it is started by the first delayed add).
    timer_running: bool,
    shutting_down: bool,
    /// Keys being processed whose pass is slow ([`SLOW_PASS`]).
    slow: HashSet<String>,
    /// How many passes run at once while none is slow (`None`: as many as ask).
    workers: Option<usize>,
    /// How many keys of each namespace wait in `queue`.
    events_by_namespace: HashMap<String, usize>,
}

/// The queue of one loop.
#[derive(Clone, Default)]
pub struct WorkQueue {
    state: Arc<Mutex<State>>,
    notify: Arc<Notify>,
    /// Wakes the timer task when a delayed add comes due earlier than all before it.
    timer: Arc<Notify>,
}

impl WorkQueue {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        crate::engine::locks::lock(&self.state)
    }

    /// Queue `key` now, as an event (no-op if it is already queued as one).
    pub fn add(&self, key: &str) {
        self.add_at(key, Level::Event);
    }

    /// Queue `key` behind every event (no-op if it is already queued).
    pub fn add_bulk(&self, key: &str) {
        self.add_at(key, Level::Bulk);
    }

    fn add_at(&self, key: &str, level: Level) {
        let mut s = self.lock();
        if s.shutting_down || s.dirty.get(key).is_some_and(|l| *l >= level) {
            return;
        }
        s.dirty.insert(key.to_string(), level);
        if !s.processing.contains(key) {
            match level {
                Level::Event => s.push_event(key),
                Level::Bulk => s.bulk.push_back(key.to_string()),
            }
            drop(s);
            self.notify.notify_one();
        }
    }

    /// Queue `key` after `delay`, unless an earlier delayed add of it is pending already.
    pub fn add_after(&self, key: &str, delay: Duration) {
        self.add_after_at(key, delay, Level::Event);
    }

    /// Queue `key` in bulk after `delay` (a periodic pass nobody waits for: the interval),
    /// unless an earlier delayed add of it is pending already.
    pub fn add_after_bulk(&self, key: &str, delay: Duration) {
        self.add_after_at(key, delay, Level::Bulk);
    }

    /// Queue `key` after `grace` unless a pass of it starts first: a wake-up that another
    /// event is expected to follow within `grace` (the health loop writes an inventory's
    /// states and then the verdict the controller waits for; one pass after both records
    /// them in one status write, where a pass at each wrote twice). If nothing else queues the
    /// key, it comes as an event after `grace`, as `add_after` would.
    pub fn add_unless_passed(&self, key: &str, grace: Duration) {
        self.schedule(key, grace, Level::Event, true);
    }

    fn add_after_at(&self, key: &str, delay: Duration, level: Level) {
        self.schedule(key, delay, level, false);
    }

    fn schedule(&self, key: &str, delay: Duration, level: Level, standing_in: bool) {
        if delay.is_zero() {
            self.add_at(key, level);
            return;
        }
        let due = tokio::time::Instant::now() + delay;
        let (start, earliest) = {
            let mut s = self.lock();
            if s.shutting_down {
                return;
            }
            // One pending add per key: the earlier time, at the higher of the two levels
            // (a progress recheck is not demoted to bulk by an interval pass due sooner).
            // A stand-in keeps the add it came before, to put back if it is withdrawn.
            let pending = s.delayed.get(key).copied();
            let pending_stands_in = s.standing_in.contains_key(key);
            if let Some((at, pending_level)) = pending
                && at <= due
            {
                if let Some(displaced) = s.standing_in.get_mut(key) {
                    if !standing_in {
                        *displaced = Some(match *displaced {
                            Some((d, l)) => (d.min(due), l.max(level)),
                            None => (due, level),
                        });
                    }
                } else if let Some(entry) = s.delayed.get_mut(key) {
                    entry.1 = pending_level.max(level);
                }
                return;
            }
            let level = match pending {
                Some((at, pending_level)) => {
                    s.timeline.remove(&(at, key.to_string()));
                    match (standing_in, pending_stands_in) {
                        // A stand-in before another: the add the first displaced stays.
                        (true, true) => level,
                        (true, false) => {
                            s.standing_in
                                .insert(key.to_string(), Some((at, pending_level)));
                            level
                        }
                        (false, _) => {
                            s.standing_in.remove(key);
                            pending_level.max(level)
                        }
                    }
                }
                None => {
                    if standing_in {
                        s.standing_in.insert(key.to_string(), None);
                    }
                    level
                }
            };
            s.delayed.insert(key.to_string(), (due, level));
            s.timeline.insert((due, key.to_string()));
            let earliest = s.timeline.first().is_some_and(|(at, _)| *at == due);
            let start = !s.timer_running;
            s.timer_running = true;
            (start, earliest)
        };
        if start {
            let queue = self.clone();
            tokio::spawn(async move { queue.run_timer().await });
        } else if earliest {
            self.timer.notify_one();
        }
    }

    /// The queue's one timer: adds each delayed key when it comes due. One task for all the
    /// delayed adds, not one each: a daemon holds a delayed add per Release and loop (the
    /// interval), and a sleeping task per key cost far more memory than an entry in a map.
    async fn run_timer(&self) {
        loop {
            let (due, next) = {
                let mut s = self.lock();
                if s.shutting_down {
                    s.timer_running = false;
                    return;
                }
                let now = tokio::time::Instant::now();
                let mut due = Vec::new();
                while s.timeline.first().is_some_and(|(at, _)| *at <= now) {
                    let Some((_, key)) = s.timeline.pop_first() else {
                        break;
                    };
                    let level = s.delayed.remove(&key).map_or(Level::Event, |(_, l)| l);
                    s.standing_in.remove(&key);
                    due.push((key, level));
                }
                (due, s.timeline.first().map(|(at, _)| *at))
            };
            for (key, level) in due {
                self.add_at(&key, level);
            }
            // notify_one keeps a permit for a wake-up sent before this wait begins.
            match next {
                Some(at) => {
                    tokio::select! {
                        _ = tokio::time::sleep_until(at) => {}
                        _ = self.timer.notified() => {}
                    }
                }
                None => self.timer.notified().await,
            }
        }
    }

    /// Queue `key` in bulk unless a delayed add of it comes due within `within`: the
    /// informer resync for a key whose interval pass is already on its way (a Release whose
    /// interval is the resync period would otherwise pass twice as often).
    pub fn add_bulk_unless_due_within(&self, key: &str, within: Duration) {
        let due_soon = {
            let s = self.lock();
            s.delayed
                .get(key)
                .is_some_and(|(at, _)| *at <= tokio::time::Instant::now() + within)
        };
        if !due_soon {
            self.add_bulk(key);
        }
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

    /// How many passes run at once while none is slow; the worker pool runs twice as many
    /// tasks, the others waiting for a slow pass (see the module doc).
    pub fn set_workers(&self, workers: usize) {
        self.lock().workers = Some(workers.max(1));
    }

    /// The pass of `key` is slow: its place goes to another worker (see the module doc).
    pub fn mark_slow(&self, key: &str) {
        let mut s = self.lock();
        if s.processing.contains(key) {
            s.slow.insert(key.to_string());
        }
        drop(s);
        self.notify.notify_waiters();
    }

    /// The next key to process; `None` once shut down and drained.
    pub async fn get(&self) -> Option<String> {
        loop {
            let notified = self.notify.notified();
            {
                let mut s = self.lock();
                if let Some(key) = s.next() {
                    s.dirty.remove(&key);
                    s.processing.insert(key.clone());
                    s.withdraw_stand_in(&key);
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
        // A slow pass that ends may let a namespace's keys through: every waiting worker looks
        // (woken after the key is queued again, under the same lock: an add between the two
        // would queue it twice).
        let everyone = s.slow.remove(key) || !s.slow.is_empty();
        let requeued = match s.dirty.get(key).copied() {
            Some(_) if s.shutting_down => false,
            Some(Level::Event) => {
                s.push_event(key);
                true
            }
            Some(Level::Bulk) => {
                s.bulk.push_back(key.to_string());
                true
            }
            None => false,
        };
        drop(s);
        if everyone {
            self.notify.notify_waiters();
        } else if requeued {
            self.notify.notify_one();
        }
    }

    /// Keys waiting (not counting those being processed).
    pub fn depth(&self) -> usize {
        let s = self.lock();
        let held_back = s
            .processing
            .iter()
            .filter(|k| s.dirty.contains_key(*k))
            .count();
        s.dirty.len() - held_back
    }

    /// Stop handing out keys; workers finish what they hold.
    pub fn shut_down(&self) {
        let mut s = self.lock();
        s.shutting_down = true;
        s.queue.clear();
        s.events_by_namespace.clear();
        s.bulk.clear();
        s.dirty.clear();
        s.delayed.clear();
        s.timeline.clear();
        s.standing_in.clear();
        drop(s);
        self.notify.notify_waiters();
        self.timer.notify_one();
    }
}

/// The namespace of a key (`namespace/name`; a key without one is its own).
fn namespace_of(key: &str) -> &str {
    key.split_once('/').map_or(key, |(namespace, _)| namespace)
}

impl State {
    /// A pass of `key` starts: a stand-in add of it is no longer needed (the pass sees what
    /// the event that scheduled it saw); the add it displaced comes back.
    fn withdraw_stand_in(&mut self, key: &str) {
        let Some(displaced) = self.standing_in.remove(key) else {
            return;
        };
        if let Some((at, _)) = self.delayed.remove(key) {
            self.timeline.remove(&(at, key.to_string()));
        }
        if let Some((at, level)) = displaced {
            self.delayed.insert(key.to_string(), (at, level));
            self.timeline.insert((at, key.to_string()));
        }
    }

    fn push_event(&mut self, key: &str) {
        self.queue.push_back(key.to_string());
        *self
            .events_by_namespace
            .entry(namespace_of(key).to_string())
            .or_default() += 1;
    }

    /// The next key a worker may take now (see the module doc): none while the usual number
    /// of passes run and none is slow; a key of a namespace with a slow pass only while those
    /// namespaces hold fewer passes than the usual number.
    fn next(&mut self) -> Option<String> {
        let Some(workers) = self.workers else {
            return self.pop(|_| true);
        };
        let running = self.processing.len();
        if running - self.slow.len() >= workers || running >= 2 * workers {
            return None;
        }
        if self.slow.is_empty() {
            return self.pop(|_| true);
        }
        let held: HashSet<String> = self
            .slow
            .iter()
            .map(|k| namespace_of(k).to_string())
            .collect();
        let theirs = self
            .processing
            .iter()
            .filter(|k| held.contains(namespace_of(k)))
            .count();
        self.pop(|key| theirs < workers || !held.contains(namespace_of(key)))
    }

    /// The next key to hand out that `may` lets through: events first, then the bulk,
    /// skipping stale bulk entries (keys queued as an event since, or handed out already).
    fn pop(&mut self, may: impl Fn(&str) -> bool) -> Option<String> {
        if self.since_bulk + 1 >= BULK_TURN
            && let Some(key) = self.pop_bulk(&may)
        {
            return Some(key);
        }
        // A namespace with no pass running goes first: another's keys queued ahead of it
        // (a tenant's many Releases whose passes each take a few seconds) do not hold it up.
        let busy: HashSet<&str> = self.processing.iter().map(|k| namespace_of(k)).collect();
        let idle_waits = !busy.is_empty()
            && self
                .events_by_namespace
                .keys()
                .any(|namespace| !busy.contains(namespace.as_str()));
        let first = if idle_waits {
            self.queue
                .iter()
                .position(|k| !busy.contains(namespace_of(k)) && may(k))
        } else {
            None
        };
        if let Some(i) = first.or_else(|| self.queue.iter().position(|k| may(k)))
            && let Some(key) = self.queue.remove(i)
        {
            self.since_bulk += 1;
            let namespace = namespace_of(&key).to_string();
            if let Some(n) = self.events_by_namespace.get_mut(&namespace) {
                *n -= 1;
                if *n == 0 {
                    self.events_by_namespace.remove(&namespace);
                }
            }
            return Some(key);
        }
        self.pop_bulk(&may)
    }

    fn pop_bulk(&mut self, may: &impl Fn(&str) -> bool) -> Option<String> {
        let mut i = 0;
        while let Some(key) = self.bulk.get(i) {
            let stale = self.dirty.get(key) != Some(&Level::Bulk) || self.processing.contains(key);
            if stale {
                self.bulk.remove(i);
            } else if may(key) {
                self.since_bulk = 0;
                return self.bulk.remove(i);
            } else {
                i += 1;
            }
        }
        None
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

    /// A Release taken over with its shard: its first pass, and the wake-up of its next wave
    /// (an event after its pass), both come before the shard's other Releases (bulk).
    #[tokio::test]
    async fn events_come_before_the_bulk_and_each_key_once() {
        let q = WorkQueue::new();
        for i in 0..1000 {
            q.add_bulk(&format!("shard/{i}"));
        }
        q.add("shard/changed");
        // Queued as bulk, then woken by an event: moves ahead, handed out once.
        q.add("shard/500");
        q.add_bulk("shard/changed");
        assert_eq!(q.depth(), 1001);
        assert_eq!(q.get().await.as_deref(), Some("shard/changed"));
        assert_eq!(q.get().await.as_deref(), Some("shard/500"));
        // The next wave's wake-up while the first pass still runs, and after it.
        q.add("shard/changed");
        q.done("shard/changed");
        q.done("shard/500");
        assert_eq!(q.get().await.as_deref(), Some("shard/changed"));
        q.done("shard/changed");
        let mut rest = Vec::new();
        while q.depth() > 0 {
            let key = q.get().await.unwrap();
            q.done(&key);
            rest.push(key);
        }
        assert_eq!(rest.len(), 999, "every other bulk key once, 500 not again");
        assert_eq!(rest[..2], ["shard/0".to_string(), "shard/1".to_string()]);
        assert!(!rest.contains(&"shard/500".to_string()));
    }

    /// Whether `get` hands out a key now.
    async fn ready(q: &WorkQueue) -> Option<String> {
        tokio::time::timeout(Duration::from_millis(50), q.get())
            .await
            .ok()
            .flatten()
    }

    /// A namespace's slow passes (a tenant's cluster that never answers) leave their workers'
    /// places to the other namespaces' keys, not to more of theirs.
    #[tokio::test]
    async fn a_namespaces_slow_passes_hold_no_other_namespace_back() {
        let q = WorkQueue::new();
        q.set_workers(2);
        for key in ["tarpit/1", "tarpit/2", "tarpit/3"] {
            q.add(key);
        }
        assert_eq!(ready(&q).await.as_deref(), Some("tarpit/1"));
        assert_eq!(ready(&q).await.as_deref(), Some("tarpit/2"));
        q.add("team/web");
        assert_eq!(
            ready(&q).await,
            None,
            "two passes at once while none is slow"
        );
        q.mark_slow("tarpit/1");
        q.mark_slow("tarpit/2");
        // Their places go to another namespace's key, ahead of tarpit/3.
        assert_eq!(ready(&q).await.as_deref(), Some("team/web"));
        assert_eq!(
            ready(&q).await,
            None,
            "the tarpit holds its two places, no more"
        );
        q.done("team/web");
        q.done("tarpit/1");
        assert_eq!(ready(&q).await.as_deref(), Some("tarpit/3"));
        // Nothing slow any more: in order again, two at once.
        q.done("tarpit/2");
        q.add("team/a");
        q.add("team/b");
        q.add("team/c");
        assert_eq!(ready(&q).await.as_deref(), Some("team/a"));
        assert_eq!(ready(&q).await, None);
        q.done("tarpit/3");
        assert_eq!(ready(&q).await.as_deref(), Some("team/b"));
    }

    /// A tenant's many Releases whose passes each take a few seconds (never slow) do not hold
    /// another namespace's key behind them: a namespace with no pass running goes first.
    #[tokio::test]
    async fn a_namespace_with_no_pass_running_goes_ahead_of_a_busy_ones_keys() {
        let q = WorkQueue::new();
        q.set_workers(2);
        for i in 0..6 {
            q.add(&format!("tarpit/{i}"));
        }
        q.add("team/web");
        assert_eq!(ready(&q).await.as_deref(), Some("tarpit/0"));
        assert_eq!(ready(&q).await.as_deref(), Some("team/web"));
        q.done("team/web");
        assert_eq!(ready(&q).await.as_deref(), Some("tarpit/1"));
        q.done("tarpit/0");
        q.done("tarpit/1");
        // With nothing running, in order again.
        assert_eq!(ready(&q).await.as_deref(), Some("tarpit/2"));
    }

    /// A worker waiting for a place is woken when a slow pass frees one.
    #[tokio::test]
    async fn a_pass_marked_slow_wakes_a_waiting_worker() {
        let q = WorkQueue::new();
        q.set_workers(1);
        q.add("tarpit/1");
        q.add("team/web");
        assert_eq!(q.get().await.as_deref(), Some("tarpit/1"));
        let waiting = tokio::spawn({
            let q = q.clone();
            async move { q.get().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        q.mark_slow("tarpit/1");
        let got = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("woken")
            .unwrap();
        assert_eq!(got.as_deref(), Some("team/web"));
    }

    /// A daemon that always has events (a thousand Releases' interval passes) still gets
    /// through its resync: one key in BULK_TURN is a bulk one.
    #[tokio::test]
    async fn the_bulk_gets_its_turn_while_events_keep_coming() {
        let q = WorkQueue::new();
        q.add_bulk("resync/a");
        q.add_bulk("resync/b");
        let mut handed = Vec::new();
        for i in 0..8 {
            q.add(&format!("event/{i}"));
            q.add(&format!("event/{i}-more"));
            let key = q.get().await.unwrap();
            q.done(&key);
            handed.push(key);
        }
        let turns: Vec<usize> = handed
            .iter()
            .enumerate()
            .filter(|(_, k)| k.starts_with("resync/"))
            .map(|(i, _)| i)
            .collect();
        assert_eq!(turns, [3, 7], "{handed:?}");
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

    /// The interval's passes wait behind every event: a spec change (or a wave's wake-up)
    /// queued after thousands of interval passes came due is handed out before them.
    #[tokio::test(start_paused = true)]
    async fn interval_passes_come_due_in_bulk_behind_events() {
        let q = WorkQueue::new();
        for i in 0..100 {
            q.add_after_bulk(&format!("steady/{i}"), Duration::from_secs(600));
        }
        // A progress recheck is an event; it replaces a later interval pass of its key.
        q.add_after_bulk("rolling", Duration::from_secs(600));
        q.add_after("rolling", Duration::from_secs(10));
        tokio::time::advance(Duration::from_secs(601)).await;
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        q.add("changed");
        assert_eq!(q.depth(), 102);
        assert_eq!(q.get().await.as_deref(), Some("rolling"));
        assert_eq!(q.get().await.as_deref(), Some("changed"));
        assert!(q.get().await.unwrap().starts_with("steady/"));
    }

    /// A recheck someone waits for stays an event when an interval pass of its key comes due
    /// sooner (and the other way round): the earlier time at the higher level.
    #[tokio::test(start_paused = true)]
    async fn a_pending_event_is_not_demoted_by_an_earlier_interval_pass() {
        let q = WorkQueue::new();
        q.add_after_bulk("a", Duration::from_secs(5));
        q.add_after("a", Duration::from_secs(10));
        q.add_after("b", Duration::from_secs(10));
        q.add_after_bulk("b", Duration::from_secs(5));
        q.add_bulk("resync");
        tokio::time::advance(Duration::from_secs(6)).await;
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert_eq!(q.delayed(), 0, "each key came once, at 5 s");
        let order = [q.get().await.unwrap(), q.get().await.unwrap()];
        assert!(
            order.contains(&"a".to_string()) && order.contains(&"b".to_string()),
            "both as events, before the bulk: {order:?}"
        );
        assert_eq!(q.get().await.as_deref(), Some("resync"));
    }

    /// The resync skips a key whose interval pass comes within the resync period, and queues
    /// one whose next pass is further away (or not scheduled at all).
    #[tokio::test(start_paused = true)]
    async fn the_resync_leaves_out_keys_whose_pass_is_due_within_it() {
        let q = WorkQueue::new();
        let resync = Duration::from_secs(600);
        q.add_after_bulk("interval-5m", Duration::from_secs(300));
        q.add_after_bulk("interval-1h", Duration::from_secs(3600));
        for key in ["interval-5m", "interval-1h", "events-only"] {
            q.add_bulk_unless_due_within(key, resync);
        }
        let mut handed = vec![q.get().await.unwrap(), q.get().await.unwrap()];
        handed.sort();
        assert_eq!(handed, ["events-only", "interval-1h"]);
        assert_eq!(q.depth(), 0);
    }

    async fn settle() {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    /// A stand-in add is withdrawn by a pass that starts first, and the interval pass it
    /// came before is put back; without such a pass it comes as an event after its grace.
    #[tokio::test(start_paused = true)]
    async fn a_stand_in_add_is_withdrawn_by_a_pass_that_starts_first() {
        let q = WorkQueue::new();
        q.add_after_bulk("a", Duration::from_secs(600));
        q.add_unless_passed("a", Duration::from_millis(500));
        q.add_unless_passed("b", Duration::from_millis(500));
        // The verdict's event queues `a` at once; its pass withdraws the stand-in.
        q.add("a");
        assert_eq!(q.get().await.as_deref(), Some("a"));
        q.done("a");
        tokio::time::advance(Duration::from_secs(1)).await;
        settle().await;
        assert_eq!(
            q.get().await.as_deref(),
            Some("b"),
            "b had no pass: it came"
        );
        q.done("b");
        assert_eq!(q.depth(), 0, "a came once");
        assert_eq!(q.delayed(), 1, "a's interval pass is back");
        tokio::time::advance(Duration::from_secs(600)).await;
        settle().await;
        assert_eq!(q.get().await.as_deref(), Some("a"));
    }

    /// An add that comes after a pending stand-in is kept behind it: withdrawn, the stand-in
    /// leaves the earliest of those; an earlier plain add replaces it outright.
    #[tokio::test(start_paused = true)]
    async fn adds_after_a_stand_in_survive_its_withdrawal() {
        let q = WorkQueue::new();
        q.add_unless_passed("a", Duration::from_millis(500));
        q.add_after("a", Duration::from_secs(30));
        q.add_after_bulk("a", Duration::from_secs(20));
        q.add_unless_passed("b", Duration::from_millis(500));
        q.add_after("b", Duration::from_millis(100));
        q.add("a");
        assert_eq!(q.get().await.as_deref(), Some("a"));
        q.done("a");
        tokio::time::advance(Duration::from_millis(200)).await;
        settle().await;
        assert_eq!(
            q.get().await.as_deref(),
            Some("b"),
            "b's plain add came at 100 ms"
        );
        q.done("b");
        tokio::time::advance(Duration::from_secs(1)).await;
        settle().await;
        assert_eq!(q.depth(), 0, "no stand-in came after its pass");
        tokio::time::advance(Duration::from_secs(19)).await;
        settle().await;
        assert_eq!(q.depth(), 1, "a's earliest later add, at 20 s");
        assert_eq!(q.get().await.as_deref(), Some("a"));
        q.done("a");
        tokio::time::advance(Duration::from_secs(20)).await;
        settle().await;
        assert_eq!((q.depth(), q.delayed()), (0, 0), "one delivery for both");
    }

    /// A stand-in scheduled while its key's pass runs still comes: that pass may have read
    /// the objects before the event.
    #[tokio::test(start_paused = true)]
    async fn a_stand_in_added_during_a_pass_comes_after_it() {
        let q = WorkQueue::new();
        q.add("a");
        assert_eq!(q.get().await.as_deref(), Some("a"));
        q.add_unless_passed("a", Duration::from_millis(500));
        q.done("a");
        assert_eq!(q.depth(), 0);
        tokio::time::advance(Duration::from_secs(1)).await;
        settle().await;
        assert_eq!(q.get().await.as_deref(), Some("a"));
    }

    #[test]
    fn retries_back_off_exponentially_to_the_cap() {
        assert_eq!(retry_delay(1), Duration::from_millis(5));
        assert_eq!(retry_delay(2), Duration::from_millis(10));
        assert_eq!(retry_delay(11), Duration::from_millis(5120));
        assert_eq!(retry_delay(40), MAX_RETRY_DELAY);
    }
}

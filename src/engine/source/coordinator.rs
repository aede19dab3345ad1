//! `coordinator::ensure`: resolve a source request to an immutable artifact in the cache,
//! fetching at most once for concurrent identical requests.
//!
//! Spec: reconcile-flow.txt stageRender step 1. Many Releases often share one source (a
//! monorepo, one chart repository); when they reconcile together, the first caller fetches
//! and the others take its result: the CLI's wait for it, the daemon's are told to come back
//! when it ends (see [`Coordinator::ensure_reusing`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::{OwnedMutexGuard, Semaphore, watch};

use super::cache::Cache;
use super::retention::{Collected, InUse};
use super::{
    Artifact, Credentials, Detached, SourceError, SourcePolicy, SourceRequest, git, helm_repo, oci,
};

/// One request's fetches: the last results, and the fetch running now.
#[derive(Default)]
struct Slot {
    /// Held by the fetch running now, from before it starts until its result is recorded.
    fetching: Arc<tokio::sync::Mutex<()>>,
    state: Mutex<SlotState>,
}

struct Running {
    /// When it got its place and started (`None` while it waits for one).
    since: Option<Instant>,
    /// Ends with the fetch, after its result is recorded.
    done: watch::Receiver<bool>,
    /// The callers (by [`Reuse::waiter`]) told to come back for it, and since when.
    owed: HashMap<String, Instant>,
}

#[derive(Default)]
struct SlotState {
    /// The last fetch that succeeded: when it ended (monotonic), when it started (by the wall
    /// clock, which a /sync request's time is compared with) and what it found.
    ok: Option<(Instant, SystemTime, Artifact)>,
    /// The last fetch, failed or not.
    last: Option<Finished>,
    /// The fetch running now (set and cleared only by the holder of `fetching`).
    running: Option<Running>,
    /// When a caller last asked (or a fetch last used a mirror's slot).
    used: Option<Instant>,
}

struct Finished {
    at: Instant,
    started_at: SystemTime,
    result: Result<Artifact, SourceError>,
    /// The callers told to come back for it (or for an earlier fetch) that have not come back
    /// yet, and since when.
    owed: HashMap<String, Instant>,
}

/// How long a caller told to come back is owed a result (one that does not come back, its
/// Release deleted or changed, is forgotten then).
const OWED_FOR: Duration = Duration::from_secs(15 * 60);

/// The end of a fetch a caller stopped waiting for (in [`SourceError::Fetching`]).
#[derive(Clone)]
pub struct FetchWait(Option<watch::Receiver<bool>>);

impl FetchWait {
    /// A wait for whatever sends `true` on `done` (a sender dropped counts as the end).
    pub fn of(done: watch::Receiver<bool>) -> Self {
        Self(Some(done))
    }

    /// Ends when the fetch has ended (its result recorded for the caller told to come back).
    pub async fn finished(self) {
        if let Some(mut done) = self.0 {
            // A sender dropped (its task gone) counts as the end too.
            let _ = done.wait_for(|done| *done).await;
        }
    }
}

impl std::fmt::Debug for FetchWait {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FetchWait")
    }
}

/// Waits compare equal: an outcome that waits is the same outcome whichever fetch it waits on.
impl PartialEq for FetchWait {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for FetchWait {}

/// When a render may take an earlier fetch of the same request instead of fetching again.
/// A daemon renders each Release at every interval, twice (the controller and the drift
/// loop): at 10,000 Releases on one monorepo that was 33 `git fetch`es a second against a
/// repository whose GitRepository is fetched once a minute anyway. As Flux's consumers take
/// the source-controller's artifact and Argo CD's repo server caches a resolved revision
/// (`--revision-cache-expiration`, 3m), a render here takes a fetch of the same source and
/// ref no older than its GitRepository's interval (nor the Release's own).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reuse {
    /// Only a fetch at most this old (zero: always fetch).
    pub max_age: Duration,
    /// Only a fetch that resolved to this revision, when set: the one the Release last
    /// attempted. A fetch that found another revision is fetched again, so a process that
    /// did not see the new revision itself (an observer beside a controller) does not render
    /// an older one than the controller applied.
    pub revision: Option<String>,
    /// Only a fetch that started after this moment, when set: the newest /sync request of
    /// the Release (whoever asks may have just pushed).
    pub requested_at: Option<SystemTime>,
    /// Who asks, across passes (`Release/namespace/name`, a source's key): a caller told to
    /// come back for a fetch takes that fetch's result when it does, whatever the rules above
    /// say of it (it started after the caller asked).
    pub waiter: Option<String>,
}

impl Reuse {
    fn accepts(&self, finished: Instant, started_at: SystemTime, artifact: &Artifact) -> bool {
        finished.elapsed() < self.max_age
            && self
                .revision
                .as_ref()
                .is_none_or(|r| *r == artifact.revision)
            && self.after_request(started_at)
    }

    fn after_request(&self, started_at: SystemTime) -> bool {
        self.requested_at.is_none_or(|at| started_at > at)
    }
}

impl SlotState {
    /// What a caller that asked at `asked` takes without fetching: the end of a fetch it
    /// waited for, or was told to come back for, or an earlier fetch `reuse` accepts.
    fn answer(&mut self, asked: Instant, reuse: &Reuse) -> Option<Result<Artifact, SourceError>> {
        if let Some(last) = self.last.as_mut() {
            let owed = reuse.waiter.as_ref().is_some_and(|waiter| {
                reuse.after_request(last.started_at)
                    && last
                        .owed
                        .remove(waiter)
                        .is_some_and(|since| since.elapsed() < OWED_FOR)
            });
            if last.at >= asked || owed {
                return Some(match &last.result {
                    Ok(artifact) => Ok(artifact.clone()),
                    Err(e) => Err(e.replay()),
                });
            }
        }
        let (finished, started_at, artifact) = self.ok.as_ref()?;
        reuse
            .accepts(*finished, *started_at, artifact)
            .then(|| Ok(artifact.clone()))
    }

    fn record(
        &mut self,
        result: &Result<Artifact, SourceError>,
        started_at: SystemTime,
        owed: HashMap<String, Instant>,
    ) {
        let at = Instant::now();
        if let Ok(artifact) = result {
            self.ok = Some((at, started_at, artifact.clone()));
        }
        // Those owed the last fetch that have not come back yet are owed this one: it
        // started after they asked too.
        let mut owed = owed;
        if let Some(last) = self.last.take() {
            for (waiter, since) in last.owed {
                if since.elapsed() < OWED_FOR {
                    owed.entry(waiter).or_insert(since);
                }
            }
        }
        self.last = Some(Finished {
            at,
            started_at,
            result: match result {
                Ok(artifact) => Ok(artifact.clone()),
                Err(e) => Err(e.replay()),
            },
            owed,
        });
    }
}

impl SlotState {
    /// A caller stops waiting for the fetch running now: it is owed the fetch's result, and
    /// hears when the fetch ends. `None` when no fetch runs.
    fn owe(&mut self, waiter: Option<&str>) -> Option<FetchWait> {
        let running = self.running.as_mut()?;
        if let Some(waiter) = waiter {
            running
                .owed
                .entry(waiter.to_string())
                .or_insert_with(Instant::now);
        }
        Some(FetchWait::of(running.done.clone()))
    }
}

/// How many detached fetches run at once, of all and of one namespace's sources.
struct Limits {
    total: Arc<Semaphore>,
    /// The places of fetches past `slow_after` (as many as `total`).
    slow: Arc<Semaphore>,
    slow_after: Duration,
    per_namespace: usize,
    namespaces: Mutex<HashMap<String, Arc<Semaphore>>>,
}

/// The limits a fetch (or a check beside the passes) of one source runs within: its
/// namespace's and everyone's.
#[derive(Clone)]
pub struct FetchLimit {
    namespace: Arc<Semaphore>,
    total: Arc<Semaphore>,
    slow: Arc<Semaphore>,
    slow_after: Duration,
}

/// Places under a [`FetchLimit`], held while the fetch runs: its namespace's, and one among
/// everyone's (or, once slow, among the slow fetches').
pub struct FetchPermits {
    _namespace: tokio::sync::OwnedSemaphorePermit,
    place: tokio::sync::OwnedSemaphorePermit,
}

impl FetchLimit {
    /// Places now, if both are free.
    pub fn try_now(&self) -> Option<FetchPermits> {
        let namespace = self.namespace.clone().try_acquire_owned().ok()?;
        let place = self.total.clone().try_acquire_owned().ok()?;
        Some(FetchPermits {
            _namespace: namespace,
            place,
        })
    }

    /// Places when they come free (the namespace's first: a namespace waiting for its own
    /// holds none of everyone's). `None` once closed.
    pub async fn wait(&self) -> Option<FetchPermits> {
        let namespace = self.namespace.clone().acquire_owned().await.ok()?;
        let place = self.total.clone().acquire_owned().await.ok()?;
        Some(FetchPermits {
            _namespace: namespace,
            place,
        })
    }

    /// Run `work` holding `permits`. Past `slow_after` it is slow: it moves to a slow
    /// fetch's place as soon as one is free, and its place among everyone's goes to the next
    /// fetch. Sources that never answer (four tenants' namespaces were enough) so hold the
    /// slow places, and other namespaces' fetches still start, as a slow pass gives its
    /// worker up (`daemon::queue`); at most twice `total` run at once.
    pub async fn hold<T>(&self, mut permits: FetchPermits, work: impl Future<Output = T>) -> T {
        let mut work = std::pin::pin!(work);
        let mut wait = self.slow_after;
        loop {
            tokio::select! {
                out = &mut work => return out,
                _ = tokio::time::sleep(wait) => {
                    if let Ok(slow) = self.slow.clone().try_acquire_owned() {
                        permits.place = slow;
                        return work.await;
                    }
                    wait = Duration::from_secs(1);
                }
            }
        }
    }
}

/// One fetch, with everything it needs to run on its own task.
struct Job {
    cache: Cache,
    policy: SourcePolicy,
    scope: String,
    request: SourceRequest,
    credentials: Option<Credentials>,
    /// Requests for different revisions of one Git repository share its mirror.
    mirror: Option<Arc<Slot>>,
    /// The limit of a detached fetch, and its places if it had them when it was started.
    limit: Option<(FetchLimit, Option<FetchPermits>)>,
    /// Its request's slot, told when the fetch got its places.
    slot: Arc<Slot>,
}

/// Fetches sources into one cache, de-duplicating concurrent fetches.
pub struct Coordinator {
    cache: Cache,
    policy: SourcePolicy,
    slots: Mutex<HashMap<String, Arc<Slot>>>,
    fetches: AtomicU64,
    limits: Option<Limits>,
}

impl Coordinator {
    /// A coordinator with the CLI's policy ([`SourcePolicy::default`]: local `file://`
    /// repositories allowed).
    pub fn new(cache: Cache) -> Self {
        Self::with_policy(cache, SourcePolicy::default())
    }

    /// How long a fetch may take (`--fetch-timeout`), for reads that go round the
    /// coordinator (a HelmRegistry's index check, an OCIRegistry's).
    pub fn fetch_timeout(&self) -> std::time::Duration {
        self.policy.fetch_timeout
    }

    /// The URL prefixes sources may name, for reads that go round the coordinator.
    pub fn allowed_urls(&self) -> &super::allowed_urls::AllowedUrls {
        &self.policy.allowed_urls
    }

    pub fn with_policy(cache: Cache, policy: SourcePolicy) -> Self {
        let limits = policy.detached.map(|d| Limits {
            total: Arc::new(Semaphore::new(d.total.max(1))),
            slow: Arc::new(Semaphore::new(d.total.max(1))),
            slow_after: d.slow_after,
            per_namespace: d.per_namespace.max(1),
            namespaces: Mutex::new(HashMap::new()),
        });
        Self {
            cache,
            policy,
            slots: Mutex::new(HashMap::new()),
            fetches: AtomicU64::new(0),
            limits,
        }
    }

    /// How long a caller waits for a fetch (`None`: for as long as it takes), for checks that
    /// go round the coordinator and run beside the passes as its fetches do.
    pub fn patience(&self) -> Option<Duration> {
        self.policy.detached.map(|d| d.patience)
    }

    /// The limit fetches for `scope` (`Kind/namespace/name`) run within (`None`: unlimited,
    /// the CLI), for checks that go round the coordinator.
    pub fn limit(&self, scope: &str) -> Option<FetchLimit> {
        let limits = self.limits.as_ref()?;
        let namespace = scope.split('/').nth(1).unwrap_or_default().to_string();
        let namespace = crate::engine::locks::lock(&limits.namespaces)
            .entry(namespace)
            .or_insert_with(|| Arc::new(Semaphore::new(limits.per_namespace)))
            .clone();
        Some(FetchLimit {
            namespace,
            total: limits.total.clone(),
            slow: limits.slow.clone(),
            slow_after: limits.slow_after,
        })
    }

    pub fn cache(&self) -> &Cache {
        &self.cache
    }

    /// How many fetches actually ran (for tests and metrics).
    pub fn fetch_count(&self) -> u64 {
        self.fetches.load(Ordering::Relaxed)
    }

    /// Resolve `request` to an artifact for `scope` (the source object asking, see
    /// [`super::cache::scope_of`]). A caller that waited while an identical request of the
    /// same scope was fetched takes that result instead of fetching again.
    pub async fn ensure(
        &self,
        scope: &str,
        request: &SourceRequest,
        credentials: Option<&Credentials>,
    ) -> Result<Artifact, SourceError> {
        self.ensure_reusing(scope, request, credentials, &Reuse::default())
            .await
    }

    /// [`Coordinator::ensure`], also taking an earlier fetch that `reuse` accepts.
    ///
    /// With [`SourcePolicy::detached`] (the daemon), a caller does not wait for a fetch that
    /// runs already, nor for one that waits for its limit, and waits for the one it starts at
    /// most the patience; it is then told to come back ([`SourceError::Fetching`]), the fetch
    /// goes on on its own task, and its result is kept for the caller (by
    /// [`Reuse::waiter`]). A pass of the daemon's loops so never holds a worker for a fetch: a
    /// tenant's sources that never answer held every worker for the fetch deadline (2 min),
    /// and every other tenant's syncs waited behind them.
    ///
    /// The artifact handed out is marked used in the cache (a render reads it now: the
    /// collection leaves it for the retention, `super::retention`); one found gone (another
    /// process's collection) is fetched again.
    pub async fn ensure_reusing(
        &self,
        scope: &str,
        request: &SourceRequest,
        credentials: Option<&Credentials>,
        reuse: &Reuse,
    ) -> Result<Artifact, SourceError> {
        let key = format!("{scope}\0{}", request.key());
        // Its Git mirror is in use as long as the request is (its fetches may be far apart).
        if let SourceRequest::Git { url, .. } = request {
            let mirror = self.slot(&format!("mirror:{scope}\0{url}"));
            crate::engine::locks::lock(&mirror.state).used = Some(Instant::now());
        }
        let found = self
            .ensure_once(scope, &key, request, credentials, reuse)
            .await?;
        if self.cache.use_artifact(&found.path) {
            return Ok(found);
        }
        // Not taken again from memory by this caller (a fresh ask answers only from `ok`,
        // and only while it still names the tree gone); the others owed a result keep it.
        {
            let slot = self.slot(&key);
            let mut state = crate::engine::locks::lock(&slot.state);
            if state
                .ok
                .as_ref()
                .is_some_and(|(_, _, a)| a.digest == found.digest)
            {
                state.ok = None;
            }
        }
        let again = self
            .ensure_once(scope, &key, request, credentials, reuse)
            .await?;
        if self.cache.use_artifact(&again.path) {
            return Ok(again);
        }
        Err(SourceError::not_ready(
            request.url(),
            format!(
                "its fetched content ({}) left the source cache as it was used; fetched again at the next pass",
                again.digest
            ),
        ))
    }

    async fn ensure_once(
        &self,
        scope: &str,
        key: &str,
        request: &SourceRequest,
        credentials: Option<&Credentials>,
        reuse: &Reuse,
    ) -> Result<Artifact, SourceError> {
        let asked = Instant::now();
        let patience = self.policy.detached.map(|d: Detached| d.patience);
        let slot = self.slot(key);
        let waiter = reuse.waiter.as_deref();
        let come_back = |wait: FetchWait| SourceError::Fetching {
            url: request.url().to_string(),
            wait,
        };
        let running = {
            let mut state = crate::engine::locks::lock(&slot.state);
            state.used = Some(asked);
            if let Some(answer) = state.answer(asked, reuse) {
                return answer;
            }
            state.running.as_ref().map(|r| (r.since, r.done.clone()))
        };
        // A fetch runs: the daemon's caller waits for it only while it is younger than the
        // patience (a fetch that answers takes a moment; one that hangs holds no one after).
        if let (Some(patience), Some((since, mut done))) = (patience, running) {
            let left = since.map_or(Duration::ZERO, |since| {
                patience.saturating_sub(since.elapsed())
            });
            let _ = tokio::time::timeout(left, done.wait_for(|done| *done)).await;
            let mut state = crate::engine::locks::lock(&slot.state);
            if let Some(answer) = state.answer(asked, reuse) {
                return answer;
            }
            if let Some(wait) = state.owe(waiter) {
                return Err(come_back(wait));
            }
        }
        let fetching = match patience {
            None => slot.fetching.clone().lock_owned().await,
            // Held only for a moment unless a fetch runs (then this caller comes back).
            Some(patience) => {
                match tokio::time::timeout(patience, slot.fetching.clone().lock_owned()).await {
                    Ok(fetching) => fetching,
                    Err(_) => {
                        let mut state = crate::engine::locks::lock(&slot.state);
                        if let Some(answer) = state.answer(asked, reuse) {
                            return answer;
                        }
                        return Err(come_back(state.owe(waiter).unwrap_or(FetchWait(None))));
                    }
                }
            }
        };
        let limit = self.limit(scope).map(|limit| {
            let now = limit.try_now();
            (limit, now)
        });
        let queued = limit.as_ref().is_some_and(|(_, now)| now.is_none());
        let (done, ended) = watch::channel(false);
        {
            let mut state = crate::engine::locks::lock(&slot.state);
            if let Some(answer) = state.answer(asked, reuse) {
                return answer;
            }
            state.running = Some(Running {
                since: (!queued).then(Instant::now),
                done: ended,
                owed: HashMap::new(),
            });
        }
        self.fetches.fetch_add(1, Ordering::Relaxed);
        let job = Job {
            cache: self.cache.clone(),
            policy: self.policy.clone(),
            scope: scope.to_string(),
            request: request.clone(),
            credentials: credentials.cloned(),
            mirror: match request {
                SourceRequest::Git { url, .. } => {
                    Some(self.slot(&format!("mirror:{scope}\0{url}")))
                }
                _ => None,
            },
            limit,
            slot: slot.clone(),
        };
        let fetch = finish(job, fetching, slot.clone(), done);
        let Some(patience) = patience else {
            return fetch.await;
        };
        let mut task = tokio::spawn(fetch);
        let left = if queued {
            Duration::ZERO
        } else {
            patience.saturating_sub(asked.elapsed())
        };
        let ended = match tokio::time::timeout(left, &mut task).await {
            Ok(ended) => ended,
            Err(_) => {
                let owed = {
                    let mut state = crate::engine::locks::lock(&slot.state);
                    // Recorded as the patience ran out (another fetch may have started since).
                    if let Some(answer) = state.answer(asked, reuse) {
                        return answer;
                    }
                    state.owe(waiter)
                };
                match owed {
                    Some(wait) => return Err(come_back(wait)),
                    // It has just recorded its result: take it.
                    None => task.await,
                }
            }
        };
        ended.unwrap_or_else(|e| {
            Err(SourceError::not_ready(
                request.url(),
                format!("the fetch stopped: {e}"),
            ))
        })
    }

    fn slot(&self, key: &str) -> Arc<Slot> {
        let mut slots = crate::engine::locks::lock(&self.slots);
        slots.entry(key.to_string()).or_default().clone()
    }

    /// How many requests (and Git mirrors) this coordinator keeps results for.
    pub fn slot_count(&self) -> usize {
        crate::engine::locks::lock(&self.slots).len()
    }

    /// Forget the results of `scope`'s requests (its source object is gone), except those of
    /// a fetch running or a caller in the middle of asking.
    pub fn forget(&self, scope: &str) {
        let (own, mirror) = (format!("{scope}\0"), format!("mirror:{scope}\0"));
        self.drop_slots(|key, _| key.starts_with(&own) || key.starts_with(&mirror));
    }

    /// Forget the results of requests no one asked for in `unused_for` (and owe no caller
    /// a result), and the fetch limits of namespaces with no fetch: a long-running daemon
    /// kept a slot, with its last error and URL, for every source and ref it ever fetched.
    pub fn sweep(&self, unused_for: Duration) -> usize {
        let dropped = self.drop_slots(|_, state| {
            let owes = state
                .last
                .as_ref()
                .is_some_and(|last| last.owed.values().any(|since| since.elapsed() < OWED_FOR));
            !owes && state.used.is_none_or(|used| used.elapsed() > unused_for)
        });
        if let Some(limits) = &self.limits {
            crate::engine::locks::lock(&limits.namespaces).retain(|_, places| {
                Arc::strong_count(places) > 1 || places.available_permits() < limits.per_namespace
            });
        }
        dropped
    }

    /// Drop the slots `drop` picks among those no one holds (no caller asking, no fetch
    /// running): the next caller starts afresh.
    fn drop_slots(&self, drop: impl Fn(&str, &SlotState) -> bool) -> usize {
        let mut slots = crate::engine::locks::lock(&self.slots);
        let before = slots.len();
        slots.retain(|key, slot| {
            if Arc::strong_count(slot) > 1 {
                return true;
            }
            let state = crate::engine::locks::lock(&slot.state);
            state.running.is_some() || !drop(key, &state)
        });
        before - slots.len()
    }

    /// What the cache must keep for this coordinator's callers: the artifacts its requests'
    /// last fetches found and the mirrors it fetches into.
    pub fn in_use(&self) -> InUse {
        let mut in_use = InUse::default();
        for (key, slot) in crate::engine::locks::lock(&self.slots).iter() {
            if let Some((scope, url)) = key.strip_prefix("mirror:").and_then(|k| k.split_once('\0'))
            {
                in_use.mirrors.insert(self.cache.git_mirror(scope, url));
                continue;
            }
            let state = crate::engine::locks::lock(&slot.state);
            let last = state.last.as_ref().and_then(|l| l.result.as_ref().ok());
            let ok = state.ok.as_ref().map(|(_, _, artifact)| artifact);
            in_use
                .digests
                .extend(ok.into_iter().chain(last).map(|a| a.digest.clone()));
        }
        in_use
    }

    /// Forget the results no one asked for in `retention`, then remove from the cache what
    /// no one has used for as long (on the blocking pool).
    pub async fn collect_garbage(&self, retention: Duration) -> (usize, Collected) {
        let slots = self.sweep(retention);
        let in_use = self.in_use();
        let cache = self.cache.clone();
        let collected = tokio::task::spawn_blocking(move || cache.collect(&in_use, retention))
            .await
            .unwrap_or_default();
        (slots, collected)
    }
}

/// Clears a slot's running fetch if the fetch ends without recording (a panic).
struct ClearRunning<'a>(&'a Slot, bool);

impl Drop for ClearRunning<'_> {
    fn drop(&mut self) {
        if self.1 {
            crate::engine::locks::lock(&self.0.state).running.take();
        }
    }
}

/// Run `job` holding its request's slot, record the result there (with the callers owed it),
/// then say it ended, in that order: whoever the end wakes finds the result, and no other
/// fetch of the request starts before the running one is cleared.
async fn finish(
    job: Job,
    fetching: OwnedMutexGuard<()>,
    slot: Arc<Slot>,
    done: watch::Sender<bool>,
) -> Result<Artifact, SourceError> {
    let started_at = SystemTime::now();
    let mut clear = ClearRunning(&slot, true);
    let result = job.run().await;
    {
        let mut state = crate::engine::locks::lock(&slot.state);
        let owed = state.running.take().map(|r| r.owed).unwrap_or_default();
        state.record(&result, started_at, owed);
    }
    clear.1 = false;
    drop(fetching);
    let _ = done.send(true);
    result
}

impl Job {
    async fn run(mut self) -> Result<Artifact, SourceError> {
        // Within the limits, waited for before the deadline starts (a detached fetch waits
        // on no worker).
        let held = match self.limit.take() {
            Some((limit, Some(now))) => Some((limit, now)),
            Some((limit, None)) => {
                let permits = limit.wait().await.ok_or_else(|| {
                    SourceError::not_ready(self.request.url(), "the daemon is stopping")
                })?;
                if let Some(running) = crate::engine::locks::lock(&self.slot.state)
                    .running
                    .as_mut()
                {
                    running.since = Some(Instant::now());
                }
                Some((limit, permits))
            }
            None => None,
        };
        // Other processes on this machine (CI jobs, a daemon, a person's CLI) may fetch into
        // the same cache: the same lock file, the same order.
        let lock_key = match &self.request {
            SourceRequest::Git { url, .. } => format!("mirror:{}\0{url}", self.scope),
            request => format!("{}\0{}", self.scope, request.key()),
        };
        let request = &self.request;
        // Every fetch has a deadline (waiting for another process's fetch included); a git
        // child still running is killed when its future is dropped (`kill_on_drop`).
        let fetch = async {
            // Another ref of the same repository fetching into the mirror: waited for within
            // this fetch's deadline and its place (past `slow_after`, a slow one's).
            let _mirror_guard = match &self.mirror {
                Some(m) => {
                    crate::engine::locks::lock(&m.state).used = Some(Instant::now());
                    Some(m.fetching.clone().lock_owned().await)
                }
                None => None,
            };
            let _process_lock = self.cache.lock(&lock_key).await.map_err(|e| {
                SourceError::not_ready(request.url(), format!("cannot lock the source cache: {e}"))
            })?;
            let (cache, scope, credentials) =
                (&self.cache, self.scope.as_str(), self.credentials.as_ref());
            match request {
                SourceRequest::Git { url, reference } => {
                    git::fetch(cache, scope, url, reference, credentials, &self.policy).await
                }
                SourceRequest::Helm {
                    url,
                    chart,
                    version,
                } => {
                    helm_repo::fetch(
                        cache,
                        scope,
                        url,
                        chart,
                        version.as_deref(),
                        credentials,
                        &self.policy.allowed_urls,
                    )
                    .await
                }
                SourceRequest::Oci {
                    url,
                    tag,
                    digest,
                    insecure,
                } => {
                    oci::fetch(
                        cache,
                        scope,
                        oci::Pull {
                            url,
                            tag: tag.as_deref(),
                            digest: digest.as_deref(),
                            insecure: *insecure,
                        },
                        credentials,
                        &self.policy.allowed_urls,
                    )
                    .await
                }
            }
        };
        let timeout = self.policy.fetch_timeout;
        let timed = tokio::time::timeout(timeout, fetch);
        let ended = match held {
            Some((limit, permits)) => limit.hold(permits, timed).await,
            None => timed.await,
        };
        match ended {
            Ok(result) => result,
            Err(_) => Err(SourceError::not_ready(
                request.url(),
                format!(
                    "the fetch did not finish within {} (the fetch deadline)",
                    crate::engine::duration::human(timeout)
                ),
            )),
        }
    }
}

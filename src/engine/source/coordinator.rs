//! `coordinator::ensure`: resolve a source request to an immutable artifact in the cache,
//! fetching at most once for concurrent identical requests.
//!
//! Spec: reconcile-flow.txt stageRender step 1. Many Releases often share one source (a
//! monorepo, one chart repository); when they reconcile together, the first caller fetches
//! and the others wait for it and take its result.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::{OwnedMutexGuard, Semaphore, watch};

use super::cache::Cache;
use super::{
    Artifact, Credentials, Detached, SourceError, SourcePolicy, SourceRequest, git, helm_repo, oci,
};

/// One request's fetches: the last results, and the fetch running now.
#[derive(Default)]
struct Slot {
    /// Held by the fetch running now (and by a caller reading the results).
    state: Arc<tokio::sync::Mutex<SlotState>>,
    /// The end of the fetch running now, for callers that stop waiting for it.
    running: Mutex<Option<watch::Receiver<bool>>>,
    /// A caller stopped waiting for the fetch running now: its result is handed to whoever
    /// asks next (see [`HANDOFF`]).
    detached: AtomicBool,
}

#[derive(Default)]
struct SlotState {
    /// The last fetch that succeeded: when it finished (monotonic, and by the wall clock,
    /// which a /sync request's time is compared with) and what it found.
    ok: Option<(Instant, SystemTime, Artifact)>,
    /// The last fetch, failed or not.
    last: Option<Finished>,
}

struct Finished {
    at: Instant,
    at_wall: SystemTime,
    result: Result<Artifact, SourceError>,
    /// A caller stopped waiting for it and was told to come back when it ended.
    handed_off: bool,
}

/// How long the result of a fetch someone stopped waiting for is handed to whoever asks
/// (the passes it woke, which may wait in a busy queue): long enough that a slow source is
/// not fetched again before they come back, short enough to stay the newest revision.
const HANDOFF: Duration = Duration::from_secs(60);

/// The end of a fetch a caller stopped waiting for (in [`SourceError::Fetching`]).
#[derive(Clone)]
pub struct FetchWait(Option<watch::Receiver<bool>>);

impl FetchWait {
    /// A wait for whatever sends `true` on `done` (a sender dropped counts as the end).
    pub fn of(done: watch::Receiver<bool>) -> Self {
        Self(Some(done))
    }

    /// Ends when the fetch has ended and its result is ready for the next caller.
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
    /// Only a fetch that finished after this moment, when set: the newest /sync request of
    /// the Release (whoever asks may have just pushed).
    pub requested_at: Option<SystemTime>,
}

impl Reuse {
    fn accepts(&self, finished: Instant, finished_at: SystemTime, artifact: &Artifact) -> bool {
        finished.elapsed() < self.max_age
            && self
                .revision
                .as_ref()
                .is_none_or(|r| *r == artifact.revision)
            && self.after_request(finished_at)
    }

    fn after_request(&self, finished_at: SystemTime) -> bool {
        self.requested_at.is_none_or(|at| finished_at > at)
    }
}

impl SlotState {
    /// What a caller that asked at `asked` takes without fetching: the end of a fetch it
    /// waited for (or was told to come back for), or an earlier fetch `reuse` accepts.
    fn answer(&self, asked: Instant, reuse: &Reuse) -> Option<Result<Artifact, SourceError>> {
        if let Some(last) = &self.last
            && (last.at >= asked
                || (last.handed_off
                    && last.at.elapsed() < HANDOFF
                    && reuse.after_request(last.at_wall)))
        {
            return Some(match &last.result {
                Ok(artifact) => Ok(artifact.clone()),
                Err(e) => Err(e.replay()),
            });
        }
        let (finished, finished_at, artifact) = self.ok.as_ref()?;
        reuse
            .accepts(*finished, *finished_at, artifact)
            .then(|| Ok(artifact.clone()))
    }

    fn record(&mut self, result: &Result<Artifact, SourceError>, handed_off: bool) {
        let (at, at_wall) = (Instant::now(), SystemTime::now());
        if let Ok(artifact) = result {
            self.ok = Some((at, at_wall, artifact.clone()));
        }
        self.last = Some(Finished {
            at,
            at_wall,
            result: match result {
                Ok(artifact) => Ok(artifact.clone()),
                Err(e) => Err(e.replay()),
            },
            handed_off,
        });
    }
}

/// How many detached fetches run at once, of all and of one namespace's sources.
struct Limits {
    total: Arc<Semaphore>,
    per_namespace: usize,
    namespaces: Mutex<HashMap<String, Arc<Semaphore>>>,
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
    /// The limits to wait for before the fetch starts (detached fetches only).
    permits: Option<(Arc<Semaphore>, Arc<Semaphore>)>,
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
    /// coordinator (a HelmRegistry's index check).
    pub fn fetch_timeout(&self) -> std::time::Duration {
        self.policy.fetch_timeout
    }

    pub fn with_policy(cache: Cache, policy: SourcePolicy) -> Self {
        let limits = policy.detached.map(|d| Limits {
            total: Arc::new(Semaphore::new(d.total.max(1))),
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
    /// With [`SourcePolicy::detached`] (the daemon), a caller waits for a fetch at most the
    /// patience and is then told to come back ([`SourceError::Fetching`]); the fetch goes on
    /// on its own task, within the limits, and its result waits for whoever comes back. A
    /// pass of the daemon's loops so never holds a worker for a fetch: a tenant's source
    /// that never answers, once held every worker for the fetch deadline (2 min) and stopped
    /// every other tenant's syncs behind it.
    pub async fn ensure_reusing(
        &self,
        scope: &str,
        request: &SourceRequest,
        credentials: Option<&Credentials>,
        reuse: &Reuse,
    ) -> Result<Artifact, SourceError> {
        let asked = Instant::now();
        let patience = self.policy.detached.map(|d: Detached| d.patience);
        let slot = self.slot(&format!("{scope}\0{}", request.key()));
        let state = match patience {
            None => slot.state.clone().lock_owned().await,
            Some(patience) => {
                match tokio::time::timeout(patience, slot.state.clone().lock_owned()).await {
                    Ok(state) => state,
                    Err(_) => return Err(Self::come_back(&slot, request, asked)),
                }
            }
        };
        if let Some(answer) = state.answer(asked, reuse) {
            return answer;
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
            permits: self
                .limits
                .as_ref()
                .map(|l| (l.of_namespace(scope), l.total.clone())),
        };
        let (done, ended) = watch::channel(false);
        *crate::engine::locks::lock(&slot.running) = Some(ended);
        let fetch = finish(job, state, slot.clone(), done);
        let Some(patience) = patience else {
            return fetch.await;
        };
        let mut task = tokio::spawn(fetch);
        let left = patience.saturating_sub(asked.elapsed());
        match tokio::time::timeout(left, &mut task).await {
            Ok(Ok(result)) => result,
            Ok(Err(e)) => Err(SourceError::not_ready(
                request.url(),
                format!("the fetch stopped: {e}"),
            )),
            Err(_) => Err(Self::come_back(&slot, request, asked)),
        }
    }

    /// A caller stops waiting for the fetch running in `slot`: the fetch's result is kept
    /// for it, and it hears when the fetch ends.
    fn come_back(slot: &Slot, request: &SourceRequest, asked: Instant) -> SourceError {
        slot.detached.store(true, Ordering::SeqCst);
        let running = crate::engine::locks::lock(&slot.running).clone();
        // The fetch may have ended as the caller gave up, before it saw `detached`.
        if running.as_ref().is_none_or(|r| *r.borrow())
            && let Ok(mut state) = slot.state.try_lock()
            && let Some(last) = state.last.as_mut()
            && last.at >= asked
        {
            last.handed_off = true;
        }
        SourceError::Fetching {
            url: request.url().to_string(),
            wait: FetchWait(running),
        }
    }

    fn slot(&self, key: &str) -> Arc<Slot> {
        let mut slots = crate::engine::locks::lock(&self.slots);
        slots.entry(key.to_string()).or_default().clone()
    }
}

impl Limits {
    /// The limit of the namespace of `scope` (`Kind/namespace/name`).
    fn of_namespace(&self, scope: &str) -> Arc<Semaphore> {
        let namespace = scope.split('/').nth(1).unwrap_or_default().to_string();
        crate::engine::locks::lock(&self.namespaces)
            .entry(namespace)
            .or_insert_with(|| Arc::new(Semaphore::new(self.per_namespace)))
            .clone()
    }
}

/// Run `job` holding its request's slot, record the result there, then say it ended (in
/// that order: whoever the end wakes finds the result).
async fn finish(
    job: Job,
    mut state: OwnedMutexGuard<SlotState>,
    slot: Arc<Slot>,
    done: watch::Sender<bool>,
) -> Result<Artifact, SourceError> {
    let result = job.run().await;
    state.record(&result, slot.detached.swap(false, Ordering::SeqCst));
    drop(state);
    *crate::engine::locks::lock(&slot.running) = None;
    let _ = done.send(true);
    result
}

impl Job {
    async fn run(self) -> Result<Artifact, SourceError> {
        // A namespace's sources take at most their share of the fetches at once, whatever
        // else waits (a slow source holds its permits until the deadline).
        let _permits = match &self.permits {
            Some((namespace, total)) => {
                let closed =
                    |_| SourceError::not_ready(self.request.url(), "the daemon is stopping");
                let namespace = namespace.clone().acquire_owned().await.map_err(closed)?;
                let total = total.clone().acquire_owned().await.map_err(closed)?;
                Some((namespace, total))
            }
            None => None,
        };
        let _mirror_guard = match &self.mirror {
            Some(m) => Some(m.state.clone().lock_owned().await),
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
                    helm_repo::fetch(cache, scope, url, chart, version.as_deref(), credentials)
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
                        url,
                        tag.as_deref(),
                        digest.as_deref(),
                        *insecure,
                        credentials,
                    )
                    .await
                }
            }
        };
        let timeout = self.policy.fetch_timeout;
        match tokio::time::timeout(timeout, fetch).await {
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

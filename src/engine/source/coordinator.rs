//! `coordinator::ensure`: resolve a source request to an immutable artifact in the cache,
//! fetching at most once for concurrent identical requests.
//!
//! Spec: reconcile-flow.txt stageRender step 1. Many Releases often share one source (a
//! monorepo, one chart repository); when they reconcile together, the first caller fetches
//! and the others wait for it and take its result.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use super::cache::Cache;
use super::{Artifact, Credentials, SourceError, SourcePolicy, SourceRequest, git, helm_repo, oci};

/// The last fetch of a request: when it finished (monotonic, and by the wall clock, which a
/// /sync request's time is compared with) and what it found.
type Slot = Arc<tokio::sync::Mutex<Option<(Instant, SystemTime, Artifact)>>>;

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
            && self.requested_at.is_none_or(|at| finished_at > at)
    }
}

/// Fetches sources into one cache, de-duplicating concurrent fetches.
pub struct Coordinator {
    cache: Cache,
    policy: SourcePolicy,
    slots: Mutex<HashMap<String, Slot>>,
    fetches: AtomicU64,
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
        Self {
            cache,
            policy,
            slots: Mutex::new(HashMap::new()),
            fetches: AtomicU64::new(0),
        }
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
    pub async fn ensure_reusing(
        &self,
        scope: &str,
        request: &SourceRequest,
        credentials: Option<&Credentials>,
        reuse: &Reuse,
    ) -> Result<Artifact, SourceError> {
        let asked = Instant::now();
        let slot = self.slot(&format!("{scope}\0{}", request.key()));
        let mut result_slot = slot.lock().await;
        if let Some((finished, finished_at, artifact)) = result_slot.as_ref()
            && (*finished >= asked || reuse.accepts(*finished, *finished_at, artifact))
        {
            return Ok(artifact.clone());
        }
        // Requests for different revisions of one Git repository share its mirror.
        let mirror = match request {
            SourceRequest::Git { url, .. } => Some(self.slot(&format!("mirror:{scope}\0{url}"))),
            _ => None,
        };
        let _mirror_guard = match &mirror {
            Some(m) => Some(m.lock().await),
            None => None,
        };
        self.fetches.fetch_add(1, Ordering::Relaxed);
        // Other processes on this machine (CI jobs, a daemon, a person's CLI) may fetch into
        // the same cache: the same lock file, the same order.
        let lock_key = match request {
            SourceRequest::Git { url, .. } => format!("mirror:{scope}\0{url}"),
            _ => format!("{scope}\0{}", request.key()),
        };
        // Every fetch has a deadline (waiting for another process's fetch included); a git
        // child still running is killed when its future is dropped (`kill_on_drop`).
        let fetch = async {
            let _process_lock = self.cache.lock(&lock_key).await.map_err(|e| {
                SourceError::not_ready(request.url(), format!("cannot lock the source cache: {e}"))
            })?;
            match request {
                SourceRequest::Git { url, reference } => {
                    git::fetch(
                        &self.cache,
                        scope,
                        url,
                        reference,
                        credentials,
                        &self.policy,
                    )
                    .await
                }
                SourceRequest::Helm {
                    url,
                    chart,
                    version,
                } => {
                    helm_repo::fetch(
                        &self.cache,
                        scope,
                        url,
                        chart,
                        version.as_deref(),
                        credentials,
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
                        &self.cache,
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
        let result = match tokio::time::timeout(timeout, fetch).await {
            Ok(result) => result,
            Err(_) => Err(SourceError::not_ready(
                request.url(),
                format!(
                    "the fetch did not finish within {} (the fetch deadline)",
                    crate::engine::duration::human(timeout)
                ),
            )),
        };

        if let Ok(artifact) = &result {
            *result_slot = Some((Instant::now(), SystemTime::now(), artifact.clone()));
        }
        result
    }

    fn slot(&self, key: &str) -> Slot {
        let mut slots = crate::engine::locks::lock(&self.slots);
        slots.entry(key.to_string()).or_default().clone()
    }
}

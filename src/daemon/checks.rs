//! The source loops' own network checks (a HelmRegistry's index, whether an OCIRegistry
//! answers) run beside their passes, as the coordinator runs fetches
//! (`engine::source::coordinator`), within the same limits: each of those loops has one
//! worker, and a registry that accepts and never answers held it for the fetch deadline, for
//! every other tenant's registries queued behind it.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::watch;

use crate::engine::locks::lock;
use crate::engine::source::coordinator::{FetchLimit, FetchWait};

/// What a check found: a registry's revision and digest (none for a reachability check), or
/// why it failed (already worded for the source's status).
pub type Found = Result<Option<(String, String)>, String>;

/// The checks running or ended, by source key (`Kind/namespace/name`).
#[derive(Default)]
pub struct Checks {
    checks: Arc<Mutex<HashMap<String, Check>>>,
    runs: AtomicU64,
}

struct Check {
    /// What was checked (the object's uid and generation): a result of an older spec is not
    /// the answer for a newer one.
    of: String,
    run: u64,
    state: State,
}

enum State {
    Running(watch::Receiver<bool>),
    Ended(Found),
}

impl Checks {
    /// The result of the check of `key` (of the object as `of` says): the one that ended
    /// since the last pass took one, else `check` started now, within `limit`, and waited
    /// for `patience` if it could start at once. Past that it goes on, and the pass is told
    /// to come back when it ends. One pass of a key runs at a time (its loop's queue), so the
    /// result a check leaves is taken by the next pass of its key.
    pub async fn run<F>(
        &self,
        key: &str,
        of: &str,
        patience: Duration,
        limit: Option<FetchLimit>,
        check: F,
    ) -> Result<Found, FetchWait>
    where
        F: Future<Output = Found> + Send + 'static,
    {
        let (run, mut ended, started) = {
            let mut checks = lock(&self.checks);
            match checks.remove(key) {
                Some(Check {
                    of: was,
                    state: State::Ended(found),
                    ..
                }) if was == of => return Ok(found),
                Some(Check {
                    of: was,
                    run,
                    state: State::Running(running),
                }) if was == of => {
                    let wait = FetchWait::of(running.clone());
                    let state = State::Running(running);
                    checks.insert(
                        key.to_string(),
                        Check {
                            of: was,
                            run,
                            state,
                        },
                    );
                    return Err(wait);
                }
                // None, or one of an older spec (still running, its end is dropped).
                _ => {}
            }
            let run = self.runs.fetch_add(1, Ordering::Relaxed);
            let (done, ended) = watch::channel(false);
            let state = State::Running(ended.clone());
            let of = of.to_string();
            checks.insert(key.to_string(), Check { of, run, state });
            let now = limit.as_ref().map(FetchLimit::try_now);
            let started = now.as_ref().is_none_or(Option::is_some);
            let (checks, key) = (self.checks.clone(), key.to_string());
            tokio::spawn(async move {
                let permits = match (now, &limit) {
                    (Some(Some(permits)), _) => Some(permits),
                    (Some(None), Some(limit)) => limit.wait().await,
                    _ => None,
                };
                // A check that panics ends too (its entry would otherwise say it runs).
                let check = async {
                    tokio::spawn(check)
                        .await
                        .unwrap_or_else(|e| Err(format!("the check stopped: {e}")))
                };
                let found = match (limit, permits) {
                    (Some(limit), Some(permits)) => limit.hold(permits, check).await,
                    _ => check.await,
                };
                let mut checks = lock(&checks);
                if let Some(entry) = checks.get_mut(&key)
                    && entry.run == run
                {
                    entry.state = State::Ended(found);
                }
                drop(checks);
                let _ = done.send(true);
            });
            (run, ended, started)
        };
        let finished = started
            && tokio::time::timeout(patience, ended.wait_for(|done| *done))
                .await
                .is_ok();
        if !finished {
            return Err(FetchWait::of(ended));
        }
        let mut checks = lock(&self.checks);
        match checks.remove(key) {
            Some(Check {
                run: was,
                state: State::Ended(found),
                ..
            }) if was == run => Ok(found),
            // Replaced meanwhile (the spec changed): put back; the next pass takes its own.
            Some(other) => {
                checks.insert(key.to_string(), other);
                Err(FetchWait::of(ended))
            }
            None => Err(FetchWait::of(ended)),
        }
    }

    /// The source is gone: a result it left is dropped, and a check still running leaves
    /// none when it ends (its entry is gone, so it records nothing).
    pub fn forget(&self, key: &str) {
        lock(&self.checks).remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "HelmRegistry/a/slow";

    #[tokio::test]
    async fn a_check_past_its_patience_is_left_for_the_pass_it_wakes() {
        let checks = Checks::default();
        let (release, hold) = tokio::sync::oneshot::channel::<()>();
        let wait = checks
            .run(KEY, "g1", Duration::from_millis(10), None, async move {
                let _ = hold.await;
                Ok(Some(("index@1".into(), "1".into())))
            })
            .await
            .expect_err("still running");
        // A pass that comes back early is told to wait for the same check.
        let again = checks
            .run(KEY, "g1", Duration::from_millis(10), None, async {
                panic!("a second check of a key still running")
            })
            .await;
        assert!(again.is_err());
        release.send(()).unwrap();
        wait.finished().await;
        let found = checks
            .run(KEY, "g1", Duration::from_millis(10), None, async {
                panic!("the result was left for this pass")
            })
            .await
            .unwrap();
        assert_eq!(found, Ok(Some(("index@1".into(), "1".into()))));
        // Taken: the next pass checks again.
        let fresh = checks
            .run(KEY, "g1", Duration::from_secs(10), None, async {
                Err("refused".to_string())
            })
            .await
            .unwrap();
        assert_eq!(fresh, Err("refused".to_string()));
    }

    /// A source deleted while its check runs leaves nothing behind when the check ends.
    #[tokio::test]
    async fn a_check_of_a_source_gone_leaves_nothing_when_it_ends() {
        let checks = Checks::default();
        let (release, hold) = tokio::sync::oneshot::channel::<()>();
        let wait = checks
            .run(KEY, "g1", Duration::from_millis(10), None, async move {
                let _ = hold.await;
                Err("a long error naming a long URL".to_string())
            })
            .await
            .expect_err("still running");
        checks.forget(KEY);
        release.send(()).unwrap();
        wait.finished().await;
        assert!(lock(&checks.checks).is_empty());
    }

    #[tokio::test]
    async fn a_result_of_an_older_spec_is_not_the_answer_for_a_newer_one() {
        let checks = Checks::default();
        let (release, hold) = tokio::sync::oneshot::channel::<()>();
        let old = checks
            .run(KEY, "g1", Duration::from_millis(10), None, async move {
                let _ = hold.await;
                Ok(Some(("index@old".into(), "old".into())))
            })
            .await
            .expect_err("still running");
        // The URL changed: a check of the new spec starts, whatever the old one does.
        let new = checks
            .run(KEY, "g2", Duration::from_secs(10), None, async {
                Ok(Some(("index@new".into(), "new".into())))
            })
            .await
            .unwrap();
        assert_eq!(new, Ok(Some(("index@new".into(), "new".into()))));
        release.send(()).unwrap();
        old.finished().await;
        let next = checks
            .run(KEY, "g2", Duration::from_secs(10), None, async {
                Err("checked again".to_string())
            })
            .await
            .unwrap();
        assert_eq!(
            next,
            Err("checked again".to_string()),
            "the old result was dropped"
        );
    }

    #[tokio::test]
    async fn a_check_that_panics_ends_with_a_failure() {
        let checks = Checks::default();
        let found = checks
            .run(KEY, "g1", Duration::from_secs(10), None, async {
                panic!("a bug in a check")
            })
            .await
            .unwrap();
        assert!(found.unwrap_err().starts_with("the check stopped"));
    }
}

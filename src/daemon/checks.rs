//! The source loops' own network checks (a HelmRegistry's index, whether an OCIRegistry
//! answers) run beside their passes, as the coordinator runs fetches
//! (`engine::source::coordinator`): each of those loops has one worker, and a registry that
//! accepts and never answers held it for the fetch deadline, for every other tenant's
//! registries queued behind it.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::watch;

use crate::engine::locks::lock;
use crate::engine::source::coordinator::FetchWait;

/// What a check found: a registry's revision and digest (none for a reachability check), or
/// why it failed (already worded for the source's status).
pub type Found = Result<Option<(String, String)>, String>;

/// The checks running or ended, by source key (`Kind/namespace/name`).
#[derive(Default)]
pub struct Checks(std::sync::Arc<Mutex<HashMap<String, Check>>>);

enum Check {
    Running(watch::Receiver<bool>),
    Ended(Found),
}

impl Checks {
    /// The result of the check of `key`: the one that ended since the last pass took one,
    /// else `check` run now, waited for `patience`. Past that it goes on, and the pass is
    /// told to come back when it ends ([`FetchWait`]). One pass of a key runs at a time (its
    /// loop's queue), so the result a check leaves is taken by the next pass of its key.
    pub async fn run<F>(&self, key: &str, patience: Duration, check: F) -> Result<Found, FetchWait>
    where
        F: Future<Output = Found> + Send + 'static,
    {
        let mut ended = {
            let mut checks = lock(&self.0);
            match checks.remove(key) {
                Some(Check::Ended(found)) => return Ok(found),
                Some(Check::Running(running)) => {
                    checks.insert(key.to_string(), Check::Running(running.clone()));
                    return Err(FetchWait::of(running));
                }
                None => {
                    let (done, ended) = watch::channel(false);
                    checks.insert(key.to_string(), Check::Running(ended.clone()));
                    let (checks, key) = (self.0.clone(), key.to_string());
                    tokio::spawn(async move {
                        let found = check.await;
                        lock(&checks).insert(key, Check::Ended(found));
                        let _ = done.send(true);
                    });
                    ended
                }
            }
        };
        let finished = tokio::time::timeout(patience, ended.wait_for(|done| *done))
            .await
            .is_ok();
        if !finished {
            return Err(FetchWait::of(ended));
        }
        match lock(&self.0).remove(key) {
            Some(Check::Ended(found)) => Ok(found),
            // Taken meanwhile: the next pass checks again.
            _ => Err(FetchWait::of(ended)),
        }
    }

    /// The source is gone: a result it left is dropped (a check still running leaves one).
    pub fn forget(&self, key: &str) {
        let mut checks = lock(&self.0);
        if matches!(checks.get(key), Some(Check::Ended(_))) {
            checks.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_check_past_its_patience_is_left_for_the_pass_it_wakes() {
        let checks = Checks::default();
        let (release, hold) = tokio::sync::oneshot::channel::<()>();
        let wait = checks
            .run(
                "HelmRegistry/a/slow",
                Duration::from_millis(10),
                async move {
                    let _ = hold.await;
                    Ok(Some(("index@1".into(), "1".into())))
                },
            )
            .await
            .expect_err("still running");
        // A pass that comes back early is told to wait for the same check.
        let again = checks
            .run("HelmRegistry/a/slow", Duration::from_millis(10), async {
                panic!("a second check of a key still running")
            })
            .await;
        assert!(again.is_err());
        release.send(()).unwrap();
        wait.finished().await;
        let found = checks
            .run("HelmRegistry/a/slow", Duration::from_millis(10), async {
                panic!("the result was left for this pass")
            })
            .await
            .unwrap();
        assert_eq!(found, Ok(Some(("index@1".into(), "1".into()))));
        // Taken: the next pass checks again.
        let fresh = checks
            .run("HelmRegistry/a/slow", Duration::from_secs(10), async {
                Err("refused".to_string())
            })
            .await
            .unwrap();
        assert_eq!(fresh, Err("refused".to_string()));
    }
}

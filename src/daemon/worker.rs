//! Workers: take keys from a loop's queue, run the loop's pass, and requeue as the pass says.

use std::future::Future;

use futures::FutureExt;
use std::sync::Arc;
use std::time::Instant;

use super::metrics::Metrics;
use super::queue::WorkQueue;
use crate::engine::error::{Categorized, Category, chain};
use crate::engine::runtime::Requeue;

/// A failed pass: what to log (the error and its causes, on one line) and its category, which
/// the metrics count failures by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PassError {
    pub category: Category,
    pub message: String,
}

impl PassError {
    pub fn of(error: &(impl Categorized + std::error::Error + 'static)) -> Self {
        Self {
            category: error.category(),
            message: chain(error),
        }
    }

    /// A failure worded here, around an API error that says what kind it is.
    pub fn api(context: String, error: &kube::Error) -> Self {
        Self {
            category: error.category(),
            message: format!("{context}: {}", chain(error)),
        }
    }
}

/// How a pass ended, for the queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PassResult {
    /// Done; the next pass as `Requeue` says; failures are forgotten.
    Done { reason: String, requeue: Requeue },
    /// A transient failure: counted for the backoff, then `Requeue` (or the queue's limit).
    Retry { reason: String, requeue: Requeue },
    /// An error: retried with the queue's rate limit.
    Error(PassError),
    /// Nothing to do for this key (gone, or not ours).
    Skip,
    /// Not now: another loop's pass holds the key and queues it again when it ends. Its
    /// failures stay counted (a failing pass put off keeps its backoff).
    PutOff,
    /// Not now: the source is still being fetched (in the background, not on this worker);
    /// the key is queued again when the fetch ends. Failures stay counted, as for `PutOff`.
    Fetching(crate::engine::source::coordinator::FetchWait),
}

/// Spawn workers running `pass` for keys of `queue` until the queue shuts down: `workers`
/// passes at once, and as many more tasks again for the places of slow passes (see
/// `daemon::queue`).
pub fn spawn<F, Fut>(
    name: &'static str,
    workers: usize,
    queue: WorkQueue,
    metrics: Arc<Metrics>,
    pass: F,
) -> Vec<tokio::task::JoinHandle<()>>
where
    F: Fn(String, u32) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = PassResult> + Send + 'static,
{
    queue.set_workers(workers.max(1));
    (0..2 * workers.max(1))
        .map(|_| {
            let queue = queue.clone();
            let metrics = metrics.clone();
            let pass = pass.clone();
            tokio::spawn(async move {
                while let Some(key) = queue.get().await {
                    let started = Instant::now();
                    // A pass that panics is a failed pass: the worker goes on, and the key
                    // is done (a worker lost with its key held it and its place for good).
                    let running = std::panic::AssertUnwindSafe(pass(key.clone(), queue.failures(&key)))
                        .catch_unwind()
                        .map(|ended| {
                            ended.unwrap_or_else(|panic| {
                                let what = panic
                                    .downcast_ref::<&str>()
                                    .map(|s| s.to_string())
                                    .or_else(|| panic.downcast_ref::<String>().cloned())
                                    .unwrap_or_default();
                                PassResult::Error(PassError {
                                    category: Category::Failed,
                                    message: format!("the pass panicked: {what}"),
                                })
                            })
                        });
                    tokio::pin!(running);
                    let result = tokio::select! {
                        result = &mut running => result,
                        () = tokio::time::sleep(super::queue::SLOW_PASS) => {
                            queue.mark_slow(&key);
                            running.await
                        }
                    };
                    let seconds = started.elapsed().as_secs_f64();
                    match result {
                        PassResult::Done { reason, requeue } => {
                            metrics.pass(name, &reason, seconds);
                            queue.forget(&key);
                            schedule(&queue, &key, requeue);
                        }
                        PassResult::Retry { reason, requeue } => {
                            metrics.pass(name, &reason, seconds);
                            match requeue {
                                Requeue::After(delay) | Requeue::Interval(delay) => {
                                    queue.count_failure(&key);
                                    queue.add_after(&key, delay);
                                }
                                _ => {
                                    queue.add_rate_limited(&key);
                                }
                            }
                        }
                        PassResult::Error(error) => {
                            metrics.pass(name, "Error", seconds);
                            metrics.pass_error(name, error.category);
                            let delay = queue.add_rate_limited(&key);
                            tracing::warn!(loop_name = name, key = %key, category = error.category.as_str(), retry_in_ms = delay.as_millis() as u64, "{}", error.message);
                        }
                        PassResult::Skip => queue.forget(&key),
                        PassResult::PutOff => {}
                        PassResult::Fetching(wait) => {
                            metrics.pass(name, "Fetching", seconds);
                            let (queue, key) = (queue.clone(), key.clone());
                            tokio::spawn(async move {
                                wait.finished().await;
                                queue.add(&key);
                            });
                        }
                    }
                    metrics
                        .queue_depth
                        .get_or_create(&super::metrics::LoopLabels { r#loop: name.to_string() })
                        .set(queue.depth() as i64);
                    queue.done(&key);
                }
            })
        })
        .collect()
}

fn schedule(queue: &WorkQueue, key: &str, requeue: Requeue) {
    match requeue {
        Requeue::After(delay) => queue.add_after(key, delay),
        Requeue::Interval(delay) => queue.add_after_bulk(key, delay),
        Requeue::RateLimited => {
            queue.add_rate_limited(key);
        }
        Requeue::Never => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pass that panics is a failed pass: its key is retried, the worker takes the next key
    /// (a worker lost with its key held both for good).
    #[tokio::test]
    async fn a_pass_that_panics_fails_and_the_worker_goes_on() {
        let queue = WorkQueue::new();
        let (seen_tx, mut seen) = tokio::sync::mpsc::unbounded_channel::<String>();
        let handles = spawn("test", 1, queue.clone(), Metrics::new(), move |key, _| {
            let seen_tx = seen_tx.clone();
            async move {
                let _ = seen_tx.send(key.clone());
                if key == "ns/panics" {
                    panic!("a bug in a pass");
                }
                PassResult::Done {
                    reason: "Done".into(),
                    requeue: Requeue::Never,
                }
            }
        });
        queue.add("ns/panics");
        queue.add("ns/next");
        let mut order = Vec::new();
        for _ in 0..3 {
            let key = tokio::time::timeout(std::time::Duration::from_secs(10), seen.recv())
                .await
                .expect("the worker goes on")
                .unwrap();
            order.push(key);
        }
        assert_eq!(order[..2], ["ns/panics".to_string(), "ns/next".to_string()]);
        assert_eq!(order[2], "ns/panics", "retried after its failure");
        assert!(queue.failures("ns/panics") >= 1);
        queue.shut_down();
        for handle in handles {
            handle.abort();
        }
    }
}

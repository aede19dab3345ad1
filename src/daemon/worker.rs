//! Workers: take keys from a loop's queue, run the loop's pass, and requeue as the pass says.

use std::future::Future;
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
                    let running = pass(key.clone(), queue.failures(&key));
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

//! Requeue rules: when the next reconcile of a Release happens.
//!
//! Spec: reconcile-flow.txt "Requeue rules"; DESIGN.md "Backoff". Pure functions, so the
//! daemon's work queue and the tests agree on every delay.

use std::time::Duration;

use crate::engine::api::{AttemptPhase, Release, RetryBackoff, RolloutState};

use super::outcome::ReconcileOutcome;
use crate::engine::runtime::Requeue;

/// The longest backoff when `retryBackoff.max` is not set.
pub const DEFAULT_BACKOFF_MAX: Duration = Duration::from_secs(1000);
/// A Progressing rollout is looked at again at least this often.
pub const PROGRESSING_RECHECK: Duration = Duration::from_secs(10);

/// `backoffDelay = initial × factor^(n−1)`, capped by `max` (default 1000 s); `n` is the
/// consecutive failure count (from 1).
pub fn backoff_delay(backoff: &RetryBackoff, failures: u32) -> Duration {
    let initial = backoff.initial.get();
    let factor = backoff.factor.unwrap_or(2).max(1) as f64;
    let max = backoff
        .max
        .as_ref()
        .map(|d| d.get())
        .unwrap_or(DEFAULT_BACKOFF_MAX);
    let n = failures.max(1) - 1;
    let secs = initial.as_secs_f64() * factor.powi(n.min(64) as i32);
    if !secs.is_finite() || secs >= max.as_secs_f64() {
        max
    } else {
        Duration::from_secs_f64(secs)
    }
}

/// The requeue for `outcome`, after `failures` consecutive failures (counting this one):
/// `backoffDelay` after a failure, else `requeueAfter` (the interval; at most 10 s while a
/// rollout is Progressing).
pub fn requeue_for(release: &Release, outcome: &ReconcileOutcome, failures: u32) -> Requeue {
    let policy = release.spec.sync_policy.as_ref();
    if outcome.retry {
        return match policy.and_then(|p| p.retry_backoff.as_ref()) {
            Some(backoff) => Requeue::After(backoff_delay(backoff, failures)),
            None => Requeue::RateLimited,
        };
    }
    let interval = release.spec.interval().unwrap_or(Duration::ZERO);
    // A Progressing rollout, and a hold that can time out, must be looked at even when no
    // event arrives (the deadline and the timeout pass without one). A hold that already
    // failed (WaveFailed keeps its `waiting` to stay failed) has nothing left to time out.
    let failed = outcome.attempt.phase == Some(AttemptPhase::Failed);
    // A rollout a gate holds has no startedAt: nothing of it can expire, and the /sync
    // request or the lower wave's status change wakes it.
    let progressing = outcome
        .rollout
        .as_ref()
        .is_some_and(|r| r.state == RolloutState::Progressing && r.started_at.is_some())
        || outcome
            .waiting
            .as_ref()
            .is_some_and(|w| !failed && hold_can_time_out(release, w));
    if progressing {
        Requeue::After(if interval.is_zero() {
            PROGRESSING_RECHECK
        } else {
            interval.min(PROGRESSING_RECHECK)
        })
    } else if interval.is_zero() {
        Requeue::Never
    } else {
        Requeue::Interval(interval)
    }
}

/// Whether a hold has a timeout to watch for: a wave or cluster-wave wait without one ends
/// only by an event (the health loop's "wave complete", the lower wave's status change), so
/// it waits for those or the interval, as every hold does (reconcile-flow.txt "Requeue rules").
fn hold_can_time_out(release: &Release, waiting: &crate::engine::api::Waiting) -> bool {
    use crate::engine::api::Reason;
    match waiting.reason.parse::<Reason>() {
        Ok(Reason::WaitingForWaveHealth) => release
            .spec
            .sync_policy
            .as_ref()
            .and_then(|p| p.waves.as_ref())
            .is_some_and(|w| w.timeout.is_some()),
        Ok(Reason::WaitingForClusterWave) => release
            .spec
            .cluster_wave
            .as_ref()
            .is_some_and(|c| c.timeout.is_some()),
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::api::{Attempt, FailureStage, Reason, RolloutStatus};
    use serde_json::json;

    fn backoff(initial: &str, factor: Option<u32>, max: Option<&str>) -> RetryBackoff {
        RetryBackoff {
            initial: initial.parse().unwrap(),
            factor,
            max: max.map(|m| m.parse().unwrap()),
        }
    }

    #[test]
    fn backoff_doubles_from_initial_and_caps_at_max() {
        let b = backoff("5s", None, None);
        let delays: Vec<u64> = (1..=5).map(|n| backoff_delay(&b, n).as_secs()).collect();
        assert_eq!(delays, [5, 10, 20, 40, 80]);
        assert_eq!(backoff_delay(&b, 40), DEFAULT_BACKOFF_MAX);
        let capped = backoff("10s", Some(3), Some("60s"));
        let delays: Vec<u64> = (1..=4)
            .map(|n| backoff_delay(&capped, n).as_secs())
            .collect();
        assert_eq!(delays, [10, 30, 60, 60]);
    }

    fn release(policy: serde_json::Value) -> Release {
        serde_json::from_value(json!({
            "apiVersion": "core.convoy.kumodo.io/v1alpha1", "kind": "Release",
            "metadata": {"name": "web", "namespace": "apps"},
            "spec": {"source": {"kind": "GitRepository", "name": "repo"}, "syncPolicy": policy},
        }))
        .unwrap()
    }

    fn outcome(retry: bool, progressing: bool) -> ReconcileOutcome {
        let mut o = if retry {
            ReconcileOutcome::failed(
                Reason::DeployFailed,
                FailureStage::Syncing,
                "x",
                Attempt::default(),
                true,
            )
        } else {
            ReconcileOutcome::applied(Attempt::default(), "", vec![])
        };
        if progressing {
            o.rollout = Some(RolloutStatus {
                render_ref: "r".into(),
                state: RolloutState::Progressing,
                started_at: Some(crate::engine::status::now()),
                finished_at: None,
                message: None,
            });
        }
        o
    }

    #[test]
    fn transient_failures_back_off_or_fall_to_the_queue() {
        let with = release(json!({"retryBackoff": {"initial": "2s"}}));
        assert_eq!(
            requeue_for(&with, &outcome(true, false), 3),
            Requeue::After(Duration::from_secs(8))
        );
        let without = release(json!({}));
        assert_eq!(
            requeue_for(&without, &outcome(true, false), 3),
            Requeue::RateLimited
        );
    }

    #[test]
    fn success_waits_the_interval_and_progressing_at_most_ten_seconds() {
        let r = release(json!({"interval": "5m"}));
        assert_eq!(
            requeue_for(&r, &outcome(false, false), 0),
            Requeue::Interval(Duration::from_secs(300))
        );
        assert_eq!(
            requeue_for(&r, &outcome(false, true), 0),
            Requeue::After(PROGRESSING_RECHECK)
        );
        let short = release(json!({"interval": "3s"}));
        assert_eq!(
            requeue_for(&short, &outcome(false, true), 0),
            Requeue::After(Duration::from_secs(3))
        );
    }

    #[test]
    fn a_hold_that_can_time_out_is_looked_at_again() {
        let r = release(json!({"waves": {"waitForHealth": true, "timeout": "5m"}}));
        let held = ReconcileOutcome::held(Reason::WaitingForWaveHealth, "", Attempt::default())
            .with_waiting(crate::engine::api::Waiting {
                reason: Reason::WaitingForWaveHealth.into(),
                target: "wave 0".into(),
                since: crate::engine::status::now(),
            });
        assert_eq!(
            requeue_for(&r, &held, 0),
            Requeue::After(PROGRESSING_RECHECK)
        );
        // Once the hold failed (WaveFailed keeps its waiting), nothing is left to time out.
        let failed = ReconcileOutcome::failed(
            Reason::WaveFailed,
            FailureStage::Syncing,
            "",
            Attempt::default(),
            false,
        )
        .with_waiting(held.waiting.clone().unwrap());
        assert_eq!(requeue_for(&r, &failed, 0), Requeue::Never);
        // Without a timeout the hold waits for the health loop's edge or the interval.
        let no_timeout = release(json!({"waves": {"waitForHealth": true}}));
        assert_eq!(requeue_for(&no_timeout, &held, 0), Requeue::Never);
        let with_interval = release(json!({"waves": {"waitForHealth": true}, "interval": "1m"}));
        assert_eq!(
            requeue_for(&with_interval, &held, 0),
            Requeue::Interval(Duration::from_secs(60))
        );
    }

    #[test]
    fn a_rollout_held_at_a_gate_is_not_polled() {
        let r = release(json!({}));
        let mut held = outcome(false, true);
        held.rollout.as_mut().unwrap().started_at = None;
        assert_eq!(requeue_for(&r, &held, 0), Requeue::Never);
    }

    #[test]
    fn no_interval_means_no_requeue() {
        let r = release(json!({}));
        assert_eq!(requeue_for(&r, &outcome(false, false), 0), Requeue::Never);
        assert_eq!(
            requeue_for(&r, &outcome(false, true), 0),
            Requeue::After(PROGRESSING_RECHECK)
        );
    }
}

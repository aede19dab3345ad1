//! Per-object health state from a rule verdict and its anchor, and the re-check backoff.
//!
//! Spec: health-loop.txt "Per-entry evaluation" (health.DeriveState), "Anchors", "Re-check
//! backoff"; DESIGN.md "progressBackoff". Pure functions with explicit time and randomness.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::rules::Evaluation;
use crate::engine::api::HealthState;

/// A state and the anchor to store with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Derived {
    pub state: HealthState,
    pub first_unhealthy: Option<Time>,
    pub message: Option<String>,
}

/// `DeriveState`: an evaluation error gives Unknown and keeps the anchor; a pass gives
/// Healthy and clears it; a failure sets the anchor to now if unset, and is Degraded once
/// `now − anchor ≥ deadline`, else Progressing (always Progressing without a deadline).
pub fn derive_state(
    evaluation: &Evaluation,
    anchor: Option<&Time>,
    now: &Time,
    deadline: Option<Duration>,
) -> Derived {
    match evaluation {
        Evaluation::Error { message } => Derived {
            state: HealthState::Unknown,
            first_unhealthy: anchor.cloned(),
            message: Some(message.clone()),
        },
        Evaluation::NoRule => Derived {
            state: HealthState::Healthy,
            first_unhealthy: None,
            message: None,
        },
        Evaluation::Pass { message } => Derived {
            state: HealthState::Healthy,
            first_unhealthy: None,
            message: message.clone(),
        },
        Evaluation::Fail { message } => {
            let anchor = anchor.cloned().unwrap_or_else(|| now.clone());
            let elapsed =
                Duration::from_secs((now.0.as_second() - anchor.0.as_second()).max(0) as u64);
            let state = match deadline {
                Some(d) if elapsed >= d => HealthState::Degraded,
                _ => HealthState::Progressing,
            };
            Derived {
                state,
                first_unhealthy: Some(anchor),
                message: Some(message.clone()),
            }
        }
    }
}

/// The longest re-check delay without `syncPolicy.interval`.
pub const MAX_PROGRESS_BACKOFF: Duration = Duration::from_secs(32);

/// `progressBackoff`: attempt 1 → 2 s, 2 → 4 s, 3 → 8 s, 4 → 16 s, 5+ → 32 s; capped by
/// `cap` (the interval, or 32 s); plus `jitter` (0.0–1.0) × 20 %.
pub fn progress_backoff(attempt: u32, cap: Option<Duration>, jitter: f64) -> Duration {
    let base = Duration::from_secs(2u64 << attempt.clamp(1, 5).saturating_sub(1));
    let capped = base.min(cap.unwrap_or(MAX_PROGRESS_BACKOFF));
    capped.mul_f64(1.0 + 0.2 * jitter.clamp(0.0, 1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> Time {
        Time(s.parse().unwrap())
    }

    fn fail() -> Evaluation {
        Evaluation::Fail {
            message: "no".into(),
        }
    }

    #[test]
    fn a_failure_anchors_and_turns_degraded_after_the_deadline() {
        let now = t("2026-01-01T00:00:00Z");
        let d = derive_state(&fail(), None, &now, Some(Duration::from_secs(60)));
        assert_eq!(d.state, HealthState::Progressing);
        assert_eq!(d.first_unhealthy, Some(now.clone()));
        let later = t("2026-01-01T00:01:00Z");
        let d = derive_state(&fail(), Some(&now), &later, Some(Duration::from_secs(60)));
        assert_eq!(
            d.state,
            HealthState::Degraded,
            "equal to the deadline is Degraded"
        );
        assert_eq!(d.first_unhealthy, Some(now.clone()), "the anchor stays");
        let d = derive_state(&fail(), Some(&now), &t("2030-01-01T00:00:00Z"), None);
        assert_eq!(
            d.state,
            HealthState::Progressing,
            "no deadline, never Degraded"
        );
    }

    #[test]
    fn a_pass_clears_the_anchor_and_an_error_keeps_it() {
        let now = t("2026-01-01T00:00:00Z");
        let anchor = t("2025-12-31T00:00:00Z");
        let d = derive_state(
            &Evaluation::Pass { message: None },
            Some(&anchor),
            &now,
            None,
        );
        assert_eq!((d.state, d.first_unhealthy), (HealthState::Healthy, None));
        let d = derive_state(
            &Evaluation::Error {
                message: "x".into(),
            },
            Some(&anchor),
            &now,
            None,
        );
        assert_eq!(
            (d.state, d.first_unhealthy),
            (HealthState::Unknown, Some(anchor))
        );
    }

    #[test]
    fn backoff_doubles_to_32_seconds_capped_by_the_interval_with_jitter() {
        let secs: Vec<u64> = (1..=6)
            .map(|a| progress_backoff(a, None, 0.0).as_secs())
            .collect();
        assert_eq!(secs, [2, 4, 8, 16, 32, 32]);
        assert_eq!(
            progress_backoff(5, Some(Duration::from_secs(10)), 0.0),
            Duration::from_secs(10)
        );
        assert_eq!(progress_backoff(1, None, 1.0), Duration::from_millis(2400));
        assert_eq!(progress_backoff(0, None, 0.0), Duration::from_secs(2));
    }
}

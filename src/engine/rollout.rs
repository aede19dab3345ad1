//! The rollout state machine: `plan_rollout` makes at most one transition per reconcile.
//!
//! Design: DESIGN.md "Rollout state machine"; spec: reconcile-flow.txt planRollout,
//! status-and-conditions.txt (RolloutSucceeded). A new renderRef starts Progressing (apply
//! the source); Progressing becomes Succeeded once the render is assessed Healthy, or, past
//! `failurePolicy.deadline` from `startedAt`, RolledBack (apply the last healthy render) when
//! `rollback: OnWaveFailure` and a different last healthy render exists, else Failed.
//! RolledBack and Failed hold until the renderRef changes or a forced sync.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::engine::api::{FailurePolicy, RollbackMode, RolloutState, RolloutStatus};
use crate::engine::duration::GoDuration;
use crate::engine::render::render_ref::short;

/// What to apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RolloutAction {
    /// `actionApplySource`: apply the source render.
    ApplySource,
    /// `actionApplyLastHealthy`: re-apply the last healthy render from the render store.
    ApplyLastHealthy,
}

/// The decision of one reconcile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RolloutPlan {
    /// The rollout after the transition; `None` without a failure policy (it is cleared).
    pub rollout: Option<RolloutStatus>,
    pub action: RolloutAction,
}

/// What the state machine looks at.
#[derive(Debug, Clone)]
pub struct RolloutInput<'a> {
    pub policy: Option<&'a FailurePolicy>,
    pub previous: Option<&'a RolloutStatus>,
    pub render_ref: &'a str,
    /// The render is applied and assessed Healthy.
    pub healthy: bool,
    pub last_healthy: Option<&'a str>,
    /// A forced /sync is pending.
    pub forced: bool,
    pub now: &'a Time,
}

/// Whether rolling back is allowed and has somewhere to go.
pub fn rollback_target<'a>(
    policy: &FailurePolicy,
    last_healthy: Option<&'a str>,
    render_ref: &str,
) -> Option<&'a str> {
    (policy.rollback == RollbackMode::OnWaveFailure)
        .then_some(last_healthy)
        .flatten()
        .filter(|h| *h != render_ref)
}

/// `planRollout`.
pub fn plan_rollout(input: &RolloutInput<'_>) -> RolloutPlan {
    let Some(policy) = input.policy else {
        return RolloutPlan {
            rollout: None,
            action: RolloutAction::ApplySource,
        };
    };
    let start = || RolloutPlan {
        rollout: Some(RolloutStatus {
            render_ref: input.render_ref.to_string(),
            state: RolloutState::Progressing,
            started_at: Some(input.now.clone()),
            finished_at: None,
            message: Some(format!("rolling out render {}", short(input.render_ref))),
        }),
        action: RolloutAction::ApplySource,
    };
    let Some(previous) = input.previous.filter(|p| p.render_ref == input.render_ref) else {
        return start();
    };
    let keep = |action| RolloutPlan {
        rollout: Some(previous.clone()),
        action,
    };
    let finish = |state: RolloutState, message: String, action| RolloutPlan {
        rollout: Some(RolloutStatus {
            render_ref: previous.render_ref.clone(),
            state,
            started_at: previous.started_at.clone(),
            finished_at: Some(input.now.clone()),
            message: Some(message),
        }),
        action,
    };
    match previous.state {
        RolloutState::RolledBack | RolloutState::Failed if input.forced => start(),
        RolloutState::RolledBack => keep(RolloutAction::ApplyLastHealthy),
        RolloutState::Failed | RolloutState::Succeeded => keep(RolloutAction::ApplySource),
        RolloutState::Progressing if input.healthy => finish(
            RolloutState::Succeeded,
            format!("render {} is healthy", short(input.render_ref)),
            RolloutAction::ApplySource,
        ),
        RolloutState::Progressing => {
            let deadline = policy.deadline.as_ref().map(|d| d.get());
            let elapsed = previous.started_at.as_ref().map(|s| {
                Duration::from_secs((input.now.0.as_second() - s.0.as_second()).max(0) as u64)
            });
            let expired = matches!((deadline, elapsed), (Some(d), Some(e)) if e >= d);
            if !expired {
                return keep(RolloutAction::ApplySource);
            }
            let why = format!(
                "render {} was not healthy within the deadline of {}",
                short(input.render_ref),
                policy
                    .deadline
                    .as_ref()
                    .map(GoDuration::as_str)
                    .unwrap_or_default()
            );
            match rollback_target(policy, input.last_healthy, input.render_ref) {
                Some(target) => finish(
                    RolloutState::RolledBack,
                    format!("{why}; rolled back to render {}", short(target)),
                    RolloutAction::ApplyLastHealthy,
                ),
                None => finish(RolloutState::Failed, why, RolloutAction::ApplySource),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> Time {
        Time(s.parse().unwrap())
    }

    fn policy(deadline: &str, rollback: RollbackMode) -> FailurePolicy {
        FailurePolicy {
            deadline: Some(deadline.parse().unwrap()),
            rollback,
        }
    }

    fn input<'a>(
        policy: Option<&'a FailurePolicy>,
        previous: Option<&'a RolloutStatus>,
        now: &'a Time,
    ) -> RolloutInput<'a> {
        RolloutInput {
            policy,
            previous,
            render_ref: "new",
            healthy: false,
            last_healthy: Some("old"),
            forced: false,
            now,
        }
    }

    fn progressing(started: &str) -> RolloutStatus {
        RolloutStatus {
            render_ref: "new".into(),
            state: RolloutState::Progressing,
            started_at: Some(t(started)),
            finished_at: None,
            message: None,
        }
    }

    #[test]
    fn without_a_failure_policy_there_is_no_rollout() {
        let now = t("2026-01-01T00:00:00Z");
        assert_eq!(plan_rollout(&input(None, None, &now)).rollout, None);
    }

    #[test]
    fn a_new_render_starts_progressing() {
        let now = t("2026-01-01T00:00:00Z");
        let p = policy("5m", RollbackMode::Never);
        let plan = plan_rollout(&input(Some(&p), None, &now));
        let rollout = plan.rollout.unwrap();
        assert_eq!(
            (rollout.state, rollout.started_at),
            (RolloutState::Progressing, Some(now.clone()))
        );
        let mut old = progressing("2025-01-01T00:00:00Z");
        old.render_ref = "older".into();
        old.state = RolloutState::Failed;
        assert_eq!(
            plan_rollout(&input(Some(&p), Some(&old), &now))
                .rollout
                .unwrap()
                .state,
            RolloutState::Progressing
        );
    }

    #[test]
    fn progressing_succeeds_when_healthy() {
        let now = t("2026-01-01T00:01:00Z");
        let p = policy("5m", RollbackMode::OnWaveFailure);
        let prev = progressing("2026-01-01T00:00:00Z");
        let mut i = input(Some(&p), Some(&prev), &now);
        i.healthy = true;
        let plan = plan_rollout(&i);
        assert_eq!(plan.rollout.unwrap().state, RolloutState::Succeeded);
        assert_eq!(plan.action, RolloutAction::ApplySource);
    }

    #[test]
    fn past_the_deadline_it_rolls_back_or_fails() {
        let now = t("2026-01-01T00:10:00Z");
        let prev = progressing("2026-01-01T00:00:00Z");
        let with = policy("5m", RollbackMode::OnWaveFailure);
        let plan = plan_rollout(&input(Some(&with), Some(&prev), &now));
        assert_eq!(plan.rollout.unwrap().state, RolloutState::RolledBack);
        assert_eq!(plan.action, RolloutAction::ApplyLastHealthy);
        let without = policy("5m", RollbackMode::Never);
        let plan = plan_rollout(&input(Some(&without), Some(&prev), &now));
        assert_eq!(plan.rollout.unwrap().state, RolloutState::Failed);
        // No different last healthy render: nothing to roll back to.
        let mut i = input(Some(&with), Some(&prev), &now);
        i.last_healthy = Some("new");
        assert_eq!(
            plan_rollout(&i).rollout.unwrap().state,
            RolloutState::Failed
        );
        // Within the deadline it keeps progressing.
        let early = t("2026-01-01T00:04:59Z");
        assert_eq!(
            plan_rollout(&input(Some(&with), Some(&prev), &early))
                .rollout
                .unwrap()
                .state,
            RolloutState::Progressing
        );
    }

    #[test]
    fn rolled_back_holds_until_a_new_render_or_a_forced_sync() {
        let now = t("2026-01-01T01:00:00Z");
        let p = policy("5m", RollbackMode::OnWaveFailure);
        let mut prev = progressing("2026-01-01T00:00:00Z");
        prev.state = RolloutState::RolledBack;
        let plan = plan_rollout(&input(Some(&p), Some(&prev), &now));
        assert_eq!(
            (plan.rollout.unwrap().state, plan.action),
            (RolloutState::RolledBack, RolloutAction::ApplyLastHealthy)
        );
        let mut forced = input(Some(&p), Some(&prev), &now);
        forced.forced = true;
        assert_eq!(
            plan_rollout(&forced).rollout.unwrap().state,
            RolloutState::Progressing
        );
    }
}

//! Turn a Release's status into an explanation: who wrote each condition, what is stale, and
//! one verdict that combines the signals.
//!
//! Spec: status-and-conditions.txt ("Combine the signals", "Conditions", "Timestamps");
//! DESIGN.md section 4 (`convoy status`). Pure, so `convoy status` output is testable.

use jiff::Timestamp;

use crate::engine::api::ConditionStatus;
use crate::engine::api::{
    Attempt, Condition, HealthyReason, Reason, Release, ReleaseStatus, RolloutState,
    condition_types, field_managers,
};
use crate::engine::render::render_ref::short;

/// One condition as `convoy status` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConditionLine {
    pub type_: String,
    /// The loop that writes it and its field manager.
    pub writer: String,
    pub status: ConditionStatus,
    pub reason: String,
    pub message: String,
    /// Seconds since the last transition.
    pub age_seconds: Option<i64>,
    /// The condition speaks for an older spec (`observedGeneration < metadata.generation`).
    pub stale: bool,
}

/// The whole explanation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Explanation {
    pub conditions: Vec<ConditionLine>,
    pub verdict: String,
    /// Applied, in sync and healthy, with nothing newer waiting.
    pub good: bool,
}

/// The writer of each condition type.
pub fn writer_of(type_: &str) -> String {
    let (who, manager) = match type_ {
        condition_types::IN_SYNC => ("drift loop", field_managers::OBSERVE),
        condition_types::HEALTHY => ("health loop", field_managers::HEALTH),
        _ => ("controller", field_managers::CONTROLLER),
    };
    format!("{who} ({manager})")
}

/// Order conditions are listed in.
const ORDER: [&str; 5] = [
    condition_types::APPLIED,
    condition_types::IN_SYNC,
    condition_types::HEALTHY,
    condition_types::ROLLOUT_SUCCEEDED,
    condition_types::LIFECYCLE_SUCCEEDED,
];

/// Explain `release` as of `now`.
pub fn explain(release: &Release, now: Timestamp) -> Explanation {
    let status = release.status.clone().unwrap_or_default();
    let generation = release.metadata.generation;
    let mut conditions: Vec<ConditionLine> = status
        .conditions
        .iter()
        .map(|c| ConditionLine {
            type_: c.type_.clone(),
            writer: writer_of(&c.type_),
            status: c.status,
            reason: c.reason.clone(),
            message: c.message.clone(),
            age_seconds: c
                .last_transition_time
                .as_ref()
                .map(|t| now.as_second() - t.0.as_second()),
            stale: matches!((c.observed_generation, generation), (Some(o), Some(g)) if o < g),
        })
        .collect();
    conditions.sort_by_key(|c| {
        ORDER
            .iter()
            .position(|t| *t == c.type_)
            .unwrap_or(ORDER.len())
    });
    let (verdict, good) = verdict(&status);
    Explanation {
        conditions,
        verdict,
        good,
    }
}

fn render_of(attempt: Option<&Attempt>) -> Option<&str> {
    attempt.and_then(|a| a.render_ref.as_deref())
}

/// "Combine the signals": one line that says whether the newest render runs and works.
pub fn verdict(status: &ReleaseStatus) -> (String, bool) {
    let Some(applied) = status.condition(condition_types::APPLIED) else {
        return ("not reconciled yet".to_string(), false);
    };
    let attempted = render_of(status.last_attempted.as_deref());
    let successful = render_of(status.last_successful.as_deref());
    let running = match successful {
        Some(r) => format!("{} is applied", short(r)),
        None => "nothing is applied".to_string(),
    };
    let Some(attempted) = attempted else {
        return (
            format!("{}: {}; {running}", applied.reason, applied.message),
            false,
        );
    };
    let new = short(attempted);
    if applied.reason == Reason::WaitingForSync {
        return (
            format!("render {new} waits for /sync (manual mode); {running}"),
            false,
        );
    }
    if applied.reason == Reason::RolledBack {
        return (
            format!("render {new} was rolled back; {running} (the last healthy render)"),
            false,
        );
    }
    if applied.status != ConditionStatus::True {
        let stage = status
            .last_attempted
            .as_ref()
            .and_then(|a| a.failure.as_ref())
            .map(|f| format!(" at {}", f.stage))
            .unwrap_or_default();
        return (
            format!(
                "render {new} is not applied: {}{stage}; {running}",
                applied.reason
            ),
            false,
        );
    }
    if successful != Some(attempted) {
        return (format!("render {new} is not applied yet; {running}"), false);
    }
    let in_sync = status.condition(condition_types::IN_SYNC);
    let healthy = status.condition(condition_types::HEALTHY);
    let rollout = status
        .rollout
        .as_ref()
        .filter(|r| r.render_ref == attempted && r.state != RolloutState::Succeeded);
    let mut problems = Vec::new();
    match in_sync {
        None => problems.push("drift not checked yet".to_string()),
        Some(c) if c.status == ConditionStatus::False => {
            problems.push(format!("drifted ({})", first_sentence(c)))
        }
        Some(c) if c.status != ConditionStatus::True => {
            problems.push(format!("drift unknown ({})", c.reason))
        }
        _ => {}
    }
    match healthy {
        None => problems.push("health not assessed yet".to_string()),
        Some(c) if c.reason == HealthyReason::Pending => {
            problems.push("health pending".to_string())
        }
        Some(c) if c.status == ConditionStatus::False => {
            problems.push(format!("not healthy ({})", first_sentence(c)))
        }
        Some(c) if c.status != ConditionStatus::True => {
            problems.push(format!("health unknown ({})", c.reason))
        }
        _ => {}
    }
    if let Some(r) = rollout {
        problems.push(format!("rollout {}", r.state.as_str()));
    }
    if problems.is_empty() {
        (
            format!("render {new} is applied, in sync and healthy"),
            true,
        )
    } else {
        (
            format!("render {new} is applied; {}", problems.join(", ")),
            false,
        )
    }
}

/// The first `n` of `items`, joined by "; ", and how many more there are: a message names a
/// few objects, never a thousand.
pub fn first_of(items: &[impl std::fmt::Display], n: usize) -> String {
    let mut text = items
        .iter()
        .take(n)
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join("; ");
    if items.len() > n {
        text.push_str(&format!("; and {} more", items.len() - n));
    }
    text
}

/// `1 object`, `3 objects`.
pub fn count(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

fn first_sentence(c: &Condition) -> String {
    if c.message.is_empty() {
        c.reason.clone()
    } else {
        c.message
            .split("; ")
            .next()
            .unwrap_or(&c.message)
            .to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::status::condition;

    fn attempt(render: &str) -> Option<Attempt> {
        Some(Attempt {
            render_ref: Some(render.to_string()),
            ..Default::default()
        })
    }

    #[test]
    fn everything_green_says_so() {
        let status = ReleaseStatus {
            conditions: vec![
                condition("Applied", ConditionStatus::True, "Applied", "", Some(1)),
                condition("InSync", ConditionStatus::True, "InSync", "", Some(1)),
                condition("Healthy", ConditionStatus::True, "Healthy", "", Some(1)),
            ],
            last_attempted: attempt("3f2a91c0aaaaaaaa").map(Box::new),
            last_successful: attempt("3f2a91c0aaaaaaaa").map(Box::new),
            ..Default::default()
        };
        assert_eq!(
            verdict(&status),
            (
                "render 3f2a91c0aaaa is applied, in sync and healthy".into(),
                true
            )
        );
    }

    #[test]
    fn manual_mode_waiting_names_both_renders() {
        let status = ReleaseStatus {
            conditions: vec![condition(
                "Applied",
                ConditionStatus::False,
                "WaitingForSync",
                "",
                Some(2),
            )],
            last_attempted: attempt("3f2a91c0aaaaaaaa").map(Box::new),
            last_successful: attempt("9c01d2e0bbbbbbbb").map(Box::new),
            ..Default::default()
        };
        assert_eq!(
            verdict(&status).0,
            "render 3f2a91c0aaaa waits for /sync (manual mode); 9c01d2e0bbbb is applied"
        );
    }

    #[test]
    fn a_failure_names_reason_and_stage() {
        let mut status = ReleaseStatus {
            conditions: vec![condition(
                "Applied",
                ConditionStatus::False,
                "Unappliable",
                "x",
                Some(1),
            )],
            last_attempted: attempt("3f2a91c0aaaaaaaa").map(Box::new),
            ..Default::default()
        };
        status.last_attempted.as_mut().unwrap().failure = Some(crate::engine::api::Failure {
            stage: "Syncing".into(),
            ..Default::default()
        });
        assert_eq!(
            verdict(&status).0,
            "render 3f2a91c0aaaa is not applied: Unappliable at Syncing; nothing is applied"
        );
    }

    #[test]
    fn stale_conditions_are_flagged_and_writers_named() {
        let release: Release = serde_json::from_value(serde_json::json!({
            "apiVersion": "core.convoy.kumodo.io/v1alpha1", "kind": "Release",
            "metadata": {"name": "web", "namespace": "apps", "generation": 3},
            "spec": {"source": {"kind": "GitRepository", "name": "repo"}},
            "status": {"conditions": [
                {"type": "Healthy", "status": "True", "reason": "Healthy", "message": "", "observedGeneration": 2,
                 "lastTransitionTime": "2026-01-01T00:00:00Z"},
                {"type": "Applied", "status": "True", "reason": "Applied", "message": "", "observedGeneration": 3,
                 "lastTransitionTime": "2026-01-01T00:00:30Z"},
            ]},
        }))
        .unwrap();
        let now: Timestamp = "2026-01-01T00:01:00Z".parse().unwrap();
        let e = explain(&release, now);
        assert_eq!(e.conditions[0].type_, "Applied");
        assert_eq!(e.conditions[0].writer, "controller (convoy-release)");
        assert_eq!(e.conditions[0].age_seconds, Some(30));
        assert!(!e.conditions[0].stale);
        assert_eq!(e.conditions[1].writer, "health loop (convoy-health)");
        assert!(e.conditions[1].stale);
    }
}

//! Health: CEL rules over the inventoried objects, the per-object state machine, and the
//! observer's health loop that writes `Healthy`, `healthSummary` and hook states.
//!
//! Spec: health-loop.txt; status-and-conditions.txt (Healthy: NotConfigured, Pending,
//! Unknown); DESIGN.md section 3 (progressBackoff, pollHookWorkload, wake-ups).

pub mod assess;
pub mod defaults;
pub mod pass;
pub mod rules;
pub mod state;

pub use assess::{Assessment, assess};

use crate::engine::api::Release;

/// Whether the Release's objects are assessed at all: always, unless its healthAssessment
/// turns the built-in rules off and selects no rule set (then Healthy is NotConfigured).
///
/// Deviation from health-loop.txt ("Without spec.healthAssessment, it writes Healthy=True
/// with reason NotConfigured"; "A missing selector matches nothing"): health is on by default,
/// judged by the built-in rules where no selected rule matches, because a Deployment stuck
/// at ProgressDeadlineExceeded must not count as a healthy rollout just because nobody
/// selected rules.
pub fn configured(release: &Release) -> bool {
    match &release.spec.health_assessment {
        None => true,
        Some(a) => {
            a.builtin_rules != Some(false)
                || a.global_rule_set_selector.is_some()
                || a.local_rule_set_selector.is_some()
        }
    }
}

/// Whether objects no selected rule matches are judged by the built-in rules.
pub fn builtin_rules(release: &Release) -> bool {
    release
        .spec
        .health_assessment
        .as_ref()
        .is_none_or(|a| a.builtin_rules != Some(false))
}
pub use pass::{HealthMemory, HealthPass, health_pass};
pub use rules::{Evaluation, Evaluator, RuleError};

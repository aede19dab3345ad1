//! `ReconcileOutcome`: how one reconcile ended, in the terms the status needs.
//!
//! Spec: status-and-conditions.txt "Where a reconcile can stop". Every stop has an `Applied`
//! reason, maybe a `failure.stage`, and whether it is retried with backoff.

use crate::engine::api::{
    Attempt, AttemptPhase, Failure, HookPhase, RolloutStatus, WaveStatus, reasons,
};

/// The end of one reconcile.
#[derive(Debug, Clone, PartialEq)]
pub struct ReconcileOutcome {
    /// The `Applied` reason.
    pub reason: &'static str,
    pub message: String,
    /// What this attempt found (goes to `lastAttempted`), with `phase` and `failure` set.
    pub attempt: Attempt,
    /// The attempt applied a render (it also goes to `lastSuccessful`).
    pub applied_render: bool,
    /// Replaces `status.waves` when set.
    pub waves: Option<Vec<WaveStatus>>,
    /// Replaces `status.rollout` when set; `None` keeps the previous one.
    pub rollout: Option<RolloutStatus>,
    /// Retried with backoff (transient failures).
    pub retry: bool,
    /// An error to return to the work queue besides the status (ClusterNotReady).
    pub error: Option<String>,
}

impl ReconcileOutcome {
    /// All steps done: the render is applied.
    pub fn applied(
        mut attempt: Attempt,
        message: impl Into<String>,
        waves: Vec<WaveStatus>,
    ) -> Self {
        attempt.phase = Some(AttemptPhase::Succeeded);
        attempt.failure = None;
        Self {
            reason: reasons::APPLIED,
            message: message.into(),
            attempt,
            applied_render: true,
            waves: Some(waves),
            rollout: None,
            retry: false,
            error: None,
        }
    }

    /// A hold: nothing failed, the reconcile waits (phase empty, no failure, no retry).
    pub fn held(reason: &'static str, message: impl Into<String>, mut attempt: Attempt) -> Self {
        attempt.phase = None;
        attempt.failure = None;
        Self {
            reason,
            message: message.into(),
            attempt,
            applied_render: false,
            waves: None,
            rollout: None,
            retry: false,
            error: None,
        }
    }

    /// A failure at `stage`.
    pub fn failed(
        reason: &'static str,
        stage: &str,
        message: impl Into<String>,
        mut attempt: Attempt,
        retry: bool,
    ) -> Self {
        attempt.phase = Some(AttemptPhase::Failed);
        attempt.failure = Some(Failure {
            stage: stage.to_string(),
            hook_name: None,
            hook_phase: None,
        });
        Self {
            reason,
            message: message.into(),
            attempt,
            applied_render: false,
            waves: None,
            rollout: None,
            retry,
            error: None,
        }
    }

    /// A failed lifecycle hook with `onFailure: Fail`.
    pub fn hook_failed(
        hook: &str,
        phase: HookPhase,
        message: impl Into<String>,
        mut attempt: Attempt,
    ) -> Self {
        attempt.phase = Some(AttemptPhase::Failed);
        attempt.failure = Some(Failure {
            stage: crate::engine::api::failure_stages::HOOK_FAILED.to_string(),
            hook_name: Some(hook.to_string()),
            hook_phase: Some(phase),
        });
        Self {
            reason: reasons::HOOK_FAILED,
            message: message.into(),
            attempt,
            applied_render: false,
            waves: None,
            rollout: None,
            retry: false,
            error: None,
        }
    }

    /// Also return an error to the work queue.
    pub fn with_error(mut self, error: impl Into<String>) -> Self {
        self.error = Some(error.into());
        self
    }

    pub fn with_waves(mut self, waves: Vec<WaveStatus>) -> Self {
        self.waves = Some(waves);
        self
    }

    /// The `Applied` condition's status for this outcome: True when a render runs as intended
    /// (applied, rolled back to the last healthy one, or manual mode with nothing new).
    pub fn applied_status(&self) -> &'static str {
        match self.reason {
            reasons::APPLIED | reasons::ROLLED_BACK => "True",
            _ => "False",
        }
    }

    /// `isSyncingFailure`: a failure at the Syncing stage (dry-run rejection, failed wave,
    /// failed prune), which arms the syncFailed hooks.
    pub fn is_syncing_failure(&self) -> bool {
        self.attempt
            .failure
            .as_ref()
            .is_some_and(|f| f.stage == crate::engine::api::failure_stages::SYNCING)
    }
}

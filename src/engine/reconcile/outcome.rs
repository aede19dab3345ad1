//! `ReconcileOutcome`: how one reconcile ended, in the terms the status needs.
//!
//! Spec: status-and-conditions.txt "Where a reconcile can stop". Every stop has an `Applied`
//! reason, maybe a `failure.stage`, and whether it is retried with backoff.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::engine::api::ConditionStatus;
use crate::engine::api::{
    Attempt, AttemptPhase, Failure, FailureStage, HookPhase, Reason, ReleaseStatus, RolloutStatus,
    Waiting, WaveStatus,
};
use crate::engine::duration::GoDuration;

/// The end of one reconcile.
#[derive(Debug, Clone, PartialEq)]
pub struct ReconcileOutcome {
    /// The `Applied` reason.
    pub reason: Reason,
    pub message: String,
    /// What this attempt found (goes to `lastAttempted`), with `phase` and `failure` set.
    pub attempt: Attempt,
    /// The attempt applied a render (it also goes to `lastSuccessful`).
    pub applied_render: bool,
    /// What goes to `lastSuccessful` instead of `attempt` (a rollback runs the last healthy
    /// render, not the attempted one).
    pub successful: Option<Attempt>,
    /// The hold in progress, if this is one that times out (waves, cluster waves).
    pub waiting: Option<Waiting>,
    /// Replaces `status.waves` (`None`: no wave data, an empty table).
    pub waves: Option<Vec<WaveStatus>>,
    /// Replaces `status.rollout` when set; `None` keeps the previous one.
    pub rollout: Option<RolloutStatus>,
    /// Retried with backoff (transient failures).
    pub retry: bool,
    /// An error to return to the work queue besides the status (ClusterNotReady).
    pub error: Option<String>,
    /// The attempted render is applied and the inventory shows it assessed Healthy (set by
    /// `reconcile`; status assembly advances `lastHealthy` on it).
    pub render_healthy: bool,
    /// Things a person should hear about although nothing failed (the daemon records each as
    /// a Normal Event): objects left to another Release.
    pub notices: Vec<String>,
    /// How long each stage took (`render`, `sync`), for the daemon's histograms.
    pub stage_seconds: Vec<(&'static str, f64)>,
    /// Objects this attempt sent to the cluster (unchanged ones are not sent).
    pub objects_sent: usize,
    /// Of those, the ones applied before exactly as rendered now that the live object no
    /// longer held: drift put back (the others were rendered or specified anew).
    pub drift_put_back: usize,
    /// The inventory as this attempt last read or wrote it had no hook entries (set by
    /// `reconcile`): the lifecycle rollup then has nothing to read.
    pub inventory_without_hooks: bool,
    /// The source is still being fetched in the background: nothing was attempted, and the
    /// daemon comes back for the Release when the fetch ends (status is not written).
    pub fetching: Option<crate::engine::source::coordinator::FetchWait>,
    /// The kinds (`Kind in group/version`) of the objects the dry-run gate rejected because the target
    /// does not serve them: input that names what is not there (the CLI's exit 4, "unknown
    /// kind"), not a rejection of what was sent.
    pub unserved_kinds: Vec<String>,
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
            reason: Reason::Applied,
            message: message.into(),
            attempt,
            applied_render: true,
            successful: None,
            waiting: None,
            waves: Some(waves),
            rollout: None,
            retry: false,
            error: None,
            render_healthy: false,
            notices: Vec::new(),
            stage_seconds: Vec::new(),
            unserved_kinds: Vec::new(),
            objects_sent: 0,
            drift_put_back: 0,
            inventory_without_hooks: false,
            fetching: None,
        }
    }

    /// A hold: nothing failed, the reconcile waits (phase empty, no failure, no retry).
    pub fn held(reason: Reason, message: impl Into<String>, mut attempt: Attempt) -> Self {
        attempt.phase = None;
        attempt.failure = None;
        Self {
            reason,
            message: message.into(),
            attempt,
            applied_render: false,
            successful: None,
            waiting: None,
            waves: None,
            rollout: None,
            retry: false,
            error: None,
            render_healthy: false,
            notices: Vec::new(),
            stage_seconds: Vec::new(),
            unserved_kinds: Vec::new(),
            objects_sent: 0,
            drift_put_back: 0,
            inventory_without_hooks: false,
            fetching: None,
        }
    }

    /// A failure at `stage`.
    pub fn failed(
        reason: Reason,
        stage: FailureStage,
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
            successful: None,
            waiting: None,
            waves: None,
            rollout: None,
            retry,
            error: None,
            render_healthy: false,
            notices: Vec::new(),
            stage_seconds: Vec::new(),
            unserved_kinds: Vec::new(),
            objects_sent: 0,
            drift_put_back: 0,
            inventory_without_hooks: false,
            fetching: None,
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
            stage: FailureStage::HookFailed.to_string(),
            hook_name: Some(hook.to_string()),
            hook_phase: Some(phase),
        });
        Self {
            reason: Reason::HookFailed,
            message: message.into(),
            attempt,
            applied_render: false,
            successful: None,
            waiting: None,
            waves: None,
            rollout: None,
            retry: false,
            error: None,
            render_healthy: false,
            notices: Vec::new(),
            stage_seconds: Vec::new(),
            unserved_kinds: Vec::new(),
            objects_sent: 0,
            drift_put_back: 0,
            inventory_without_hooks: false,
            fetching: None,
        }
    }

    /// Also return an error to the work queue.
    pub fn with_error(mut self, error: impl Into<String>) -> Self {
        self.error = Some(error.into());
        self
    }

    pub fn with_waiting(mut self, waiting: Waiting) -> Self {
        self.waiting = Some(waiting);
        self
    }

    /// Keep the rollout planRollout decided unless this outcome set its own.
    pub fn with_rollout(mut self, rollout: Option<RolloutStatus>) -> Self {
        if self.rollout.is_none() {
            self.rollout = rollout;
        }
        self
    }

    pub fn with_unserved_kinds(mut self, kinds: Vec<String>) -> Self {
        self.unserved_kinds = kinds;
        self
    }

    pub fn with_waves(mut self, waves: Vec<WaveStatus>) -> Self {
        self.waves = Some(waves);
        self
    }

    /// The `Applied` condition's status for this outcome: True when a render runs as intended
    /// (applied, rolled back to the last healthy one, or manual mode with nothing new).
    pub fn applied_status(&self) -> ConditionStatus {
        match self.reason {
            Reason::Applied | Reason::RolledBack => ConditionStatus::True,
            _ => ConditionStatus::False,
        }
    }

    /// `isSyncingFailure`: a failure at the Syncing stage (dry-run rejection, failed wave,
    /// failed prune), which arms the syncFailed hooks.
    pub fn is_syncing_failure(&self) -> bool {
        self.attempt
            .failure
            .as_ref()
            .is_some_and(|f| f.stage == FailureStage::Syncing)
    }
}

/// The hold `reason` on `target` for `render_ref`, since when the cached status first
/// recorded it (the same hold on the same render), else since `now`.
pub fn waiting_for(
    status: &ReleaseStatus,
    render_ref: &str,
    reason: Reason,
    target: &str,
    now: &Time,
) -> Waiting {
    let same_render = status.attempted_render() == Some(render_ref);
    let since = status
        .waiting
        .as_ref()
        .filter(|w| same_render && w.reason == reason && w.target == target)
        .map(|w| w.since.clone())
        .unwrap_or_else(|| now.clone());
    Waiting {
        reason: reason.to_string(),
        target: target.to_string(),
        since,
    }
}

/// The timeout (as written) when a hold with that timeout has run out at `now`; `None` while
/// it has time left or has no (valid) timeout.
pub fn timed_out<'a>(
    waiting: &Waiting,
    timeout: Option<&'a GoDuration>,
    now: &Time,
) -> Option<&'a GoDuration> {
    let timeout = timeout?;
    let limit = timeout.get();
    let elapsed = now.0.as_second() - waiting.since.0.as_second();
    (elapsed >= 0 && elapsed as u64 >= limit.as_secs()).then_some(timeout)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::api::Attempt;

    fn t(s: &str) -> Time {
        Time(s.parse().unwrap())
    }

    #[test]
    fn a_hold_keeps_its_start_for_the_same_render_and_target() {
        let mut status = ReleaseStatus {
            last_attempted: Some(Box::new(Attempt {
                render_ref: Some("r1".into()),
                ..Default::default()
            })),
            waiting: Some(Box::new(Waiting {
                reason: Reason::WaitingForWaveHealth.into(),
                target: "wave 0".into(),
                since: t("2026-01-01T00:00:00Z"),
            })),
            ..Default::default()
        };
        let now = t("2026-01-01T00:05:00Z");
        let w = waiting_for(&status, "r1", Reason::WaitingForWaveHealth, "wave 0", &now);
        assert_eq!(w.since, t("2026-01-01T00:00:00Z"));
        let d = |text: &str| -> GoDuration { text.parse().unwrap() };
        assert_eq!(timed_out(&w, Some(&d("5m")), &now), Some(&d("5m")));
        assert_eq!(timed_out(&w, Some(&d("6m")), &now), None);
        assert_eq!(timed_out(&w, None, &now), None);
        // Another target or another render starts the clock again.
        let w = waiting_for(&status, "r1", Reason::WaitingForWaveHealth, "wave 1", &now);
        assert_eq!(w.since, now);
        status.last_attempted.as_mut().unwrap().render_ref = Some("r0".into());
        let w = waiting_for(&status, "r1", Reason::WaitingForWaveHealth, "wave 0", &now);
        assert_eq!(w.since, now);
    }
}

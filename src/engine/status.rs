//! Release status writes: condition helpers and the controller's owned patch.
//!
//! Spec: status-ownership.txt "How the controller builds its patch" and "When a writer skips
//! the write". The controller never serializes the whole status: `owned_status_apply_config`
//! builds its patch field by field, so it never sends another writer's field (InSync, Healthy,
//! healthSummary) and never sends a zero value for one.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{Api, Resource};
use serde_json::{Map, Value, json};

use crate::engine::api::{
    Condition, ConditionStatus, Release, ReleaseStatus, condition_types, field_managers,
};
use crate::engine::ssa;

/// A condition with the given fields and no transition time yet.
pub fn condition(
    type_: &str,
    status: ConditionStatus,
    reason: impl AsRef<str>,
    message: impl Into<String>,
    generation: Option<i64>,
) -> Condition {
    Condition {
        type_: type_.to_string(),
        status,
        reason: reason.as_ref().to_string(),
        message: message.into(),
        last_transition_time: None,
        observed_generation: generation,
    }
}

/// Put `new` into `conditions`, replacing the condition of its type. `lastTransitionTime`
/// stays while the status stays; it becomes `now` when the status changes or is new.
pub fn set_condition(conditions: &mut Vec<Condition>, mut new: Condition, now: &Time) {
    match conditions.iter_mut().find(|c| c.type_ == new.type_) {
        Some(existing) => {
            new.last_transition_time = if existing.status == new.status {
                existing
                    .last_transition_time
                    .clone()
                    .or_else(|| Some(now.clone()))
            } else {
                Some(now.clone())
            };
            *existing = new;
        }
        None => {
            new.last_transition_time = Some(now.clone());
            conditions.push(new);
        }
    }
}

/// Remove the condition of `type_`, if present.
pub fn remove_condition(conditions: &mut Vec<Condition>, type_: &str) {
    conditions.retain(|c| c.type_ != type_);
}

/// Whether a condition writer may skip its write: status, reason, message and observed
/// generation are all unchanged.
pub fn condition_unchanged(old: Option<&Condition>, new: &Condition) -> bool {
    old.is_some_and(|o| {
        o.status == new.status
            && o.reason == new.reason
            && o.message == new.message
            && o.observed_generation == new.observed_generation
    })
}

/// The controller's part of `status` as JSON: its three conditions and its fields, `pin`,
/// `lifecycle` and `LifecycleSucceeded` only when set, `resolvedRetentionPolicy` always.
pub fn owned_status_fields(status: &ReleaseStatus) -> Map<String, Value> {
    let mut s = Map::new();
    let conditions: Vec<&Condition> = status
        .conditions
        .iter()
        .filter(|c| condition_types::CONTROLLER_OWNED.contains(&c.type_.as_str()))
        .collect();
    if !conditions.is_empty() {
        s.insert("conditions".into(), json!(conditions));
    }
    let mut put = |key: &str, value: Value| {
        if !value.is_null() {
            s.insert(key.into(), value);
        }
    };
    put("observedGeneration", json!(status.observed_generation));
    put("lastAttempted", json!(status.last_attempted));
    put("lastSuccessful", json!(status.last_successful));
    put("lastHealthy", json!(status.last_healthy));
    put("rollout", json!(status.rollout));
    put("pin", json!(status.pin));
    put("waiting", json!(status.waiting));
    if !status.waves.is_empty() {
        put("waves", json!(status.waves));
    }
    put("lifecycle", json!(status.lifecycle));
    put(
        "resolvedRetentionPolicy",
        json!(status.resolved_retention_policy.clone().unwrap_or_default()),
    );
    put("reconciledAt", json!(status.reconciled_at));
    put("lastHandledSyncAt", json!(status.last_handled_sync_at));
    put(
        "lastHandledForceSyncAt",
        json!(status.last_handled_force_sync_at),
    );
    s
}

/// `ownedStatusApplyConfig`: the controller's SSA patch for Release `name`.
pub fn owned_status_apply_config(name: &str, status: &ReleaseStatus) -> Value {
    json!({
        "apiVersion": Release::api_version(&()),
        "kind": Release::kind(&()),
        "metadata": {"name": name},
        "status": Value::Object(owned_status_fields(status)),
    })
}

/// `statusChanged`: whether the controller's part differs. `reconciledAt` only changes when
/// the controller writes, and the attempt times change at every reconcile, so neither counts:
/// a reconcile that changes nothing else writes nothing (a quiet steady state), and the next
/// write that happens carries the fresh attempt time.
pub fn status_changed(old: &ReleaseStatus, new: &ReleaseStatus) -> bool {
    compared_fields(old) != compared_fields(new)
}

/// The controller's fields as `statusChanged` compares them.
fn compared_fields(status: &ReleaseStatus) -> Map<String, Value> {
    let mut fields = owned_status_fields(status);
    fields.remove("reconciledAt");
    for attempt in ["lastAttempted", "lastSuccessful"] {
        if let Some(Value::Object(a)) = fields.get_mut(attempt) {
            a.remove("attemptedAt");
        }
    }
    fields
}

/// The controller's fields that differ (condition types by name), for the debug log of a
/// status write: which of a Release's writes carried news and which only repeated one.
pub fn changed_status_fields(old: &ReleaseStatus, new: &ReleaseStatus) -> Vec<String> {
    let (a, b) = (compared_fields(old), compared_fields(new));
    let mut changed: Vec<String> = a
        .keys()
        .chain(b.keys())
        .filter(|k| *k != "conditions" && a.get(*k) != b.get(*k))
        .cloned()
        .collect();
    changed.sort();
    changed.dedup();
    for t in condition_types::CONTROLLER_OWNED {
        let differs = match (old.condition(t), new.condition(t)) {
            (None, None) => false,
            (o, Some(n)) => !condition_unchanged(o, n),
            (Some(_), None) => true,
        };
        if differs {
            changed.push(format!("conditions.{t}"));
        }
    }
    changed
}

/// Write the controller's status with SSA under `convoy-release`.
pub async fn write_owned_status(
    api: &Api<Release>,
    name: &str,
    status: &ReleaseStatus,
) -> Result<Release, kube::Error> {
    ssa::apply_status(
        api,
        name,
        field_managers::CONTROLLER,
        &owned_status_apply_config(name, status),
    )
    .await
}

/// The current time as a Kubernetes `Time` (second precision, as the API stores it).
pub fn now() -> Time {
    let ts = jiff::Timestamp::now();
    Time(jiff::Timestamp::from_second(ts.as_second()).unwrap_or(ts))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::api::{Attempt, HealthSummary, PinStatus};

    fn t(s: &str) -> Time {
        Time(s.parse().unwrap())
    }

    #[test]
    fn the_transition_time_stays_while_the_status_stays() {
        let mut conditions = Vec::new();
        set_condition(
            &mut conditions,
            condition(
                "Applied",
                ConditionStatus::False,
                "WaitingForSync",
                "",
                Some(1),
            ),
            &t("2026-01-01T00:00:00Z"),
        );
        set_condition(
            &mut conditions,
            condition(
                "Applied",
                ConditionStatus::False,
                "Unappliable",
                "x",
                Some(2),
            ),
            &t("2026-01-01T00:05:00Z"),
        );
        assert_eq!(
            conditions[0].last_transition_time,
            Some(t("2026-01-01T00:00:00Z"))
        );
        assert_eq!(conditions[0].reason, "Unappliable");
        set_condition(
            &mut conditions,
            condition("Applied", ConditionStatus::True, "Applied", "", Some(2)),
            &t("2026-01-01T00:09:00Z"),
        );
        assert_eq!(
            conditions[0].last_transition_time,
            Some(t("2026-01-01T00:09:00Z"))
        );
        assert_eq!(conditions.len(), 1);
    }

    #[test]
    fn the_patch_carries_only_the_controllers_fields() {
        let status = ReleaseStatus {
            conditions: vec![
                condition("Applied", ConditionStatus::True, "Applied", "", Some(1)),
                condition("InSync", ConditionStatus::True, "InSync", "", Some(1)),
                condition("Healthy", ConditionStatus::True, "Healthy", "", Some(1)),
            ],
            health_summary: Some(HealthSummary::default()),
            last_attempted: Some(Box::new(Attempt {
                render_ref: Some("abc".into()),
                ..Default::default()
            })),
            ..Default::default()
        };
        let patch = owned_status_apply_config("web", &status);
        let types: Vec<&str> = patch["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["type"].as_str().unwrap())
            .collect();
        assert_eq!(types, ["Applied"]);
        let keys: Vec<&String> = patch["status"].as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            ["conditions", "lastAttempted", "resolvedRetentionPolicy"]
        );
        assert!(patch["status"].get("healthSummary").is_none());
        assert!(patch["status"].get("pin").is_none(), "pin only when set");
    }

    #[test]
    fn pin_is_sent_only_while_pinned() {
        let mut status = ReleaseStatus {
            pin: Some(PinStatus {
                render_ref: "abc".into(),
            }),
            ..Default::default()
        };
        assert_eq!(
            owned_status_apply_config("web", &status)["status"]["pin"]["renderRef"],
            "abc"
        );
        status.pin = None;
        assert!(
            owned_status_apply_config("web", &status)["status"]
                .get("pin")
                .is_none()
        );
    }

    /// A status whose lastAttempted is render `abc`, attempted at midnight.
    fn attempted_abc() -> ReleaseStatus {
        ReleaseStatus {
            last_attempted: Some(Box::new(Attempt {
                attempted_at: Some(t("2026-01-01T00:00:00Z")),
                render_ref: Some("abc".into()),
                ..Default::default()
            })),
            ..Default::default()
        }
    }

    #[test]
    fn a_new_attempt_time_alone_is_not_a_change() {
        let old = attempted_abc();
        let mut new = old.clone();
        new.last_attempted.as_mut().unwrap().attempted_at = Some(t("2026-01-01T00:05:00Z"));
        assert!(!status_changed(&old, &new));
        new.last_attempted.as_mut().unwrap().render_ref = Some("def".into());
        assert!(status_changed(&old, &new));
    }

    /// The debug log of a status write names what changed as `statusChanged` sees it.
    #[test]
    fn the_changed_fields_are_those_status_changed_compares() {
        let old = attempted_abc();
        let mut new = old.clone();
        new.last_attempted.as_mut().unwrap().attempted_at = Some(t("2026-01-01T00:05:00Z"));
        new.reconciled_at = Some(t("2026-01-01T00:05:00Z"));
        new.conditions.push(condition(
            "Healthy",
            ConditionStatus::True,
            "Healthy",
            "",
            Some(1),
        ));
        assert!(changed_status_fields(&old, &new).is_empty());
        new.observed_generation = Some(2);
        new.conditions.push(condition(
            "Applied",
            ConditionStatus::True,
            "Applied",
            "",
            Some(2),
        ));
        assert_eq!(
            changed_status_fields(&old, &new),
            ["observedGeneration", "conditions.Applied"]
        );
    }

    #[test]
    fn reconciled_at_alone_is_not_a_change_but_other_writers_fields_are_ignored_too() {
        let old = ReleaseStatus {
            conditions: vec![condition(
                "Applied",
                ConditionStatus::True,
                "Applied",
                "",
                Some(1),
            )],
            ..Default::default()
        };
        let mut new = old.clone();
        new.reconciled_at = Some(t("2026-01-01T00:00:00Z"));
        new.conditions.push(condition(
            "InSync",
            ConditionStatus::False,
            "OutOfSync",
            "drift",
            Some(1),
        ));
        assert!(!status_changed(&old, &new));
        new.conditions[0].message = "changed".into();
        assert!(status_changed(&old, &new));
    }
}

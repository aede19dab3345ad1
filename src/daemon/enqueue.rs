//! When an informer event puts a key on a loop's queue.
//!
//! Spec: status-ownership.txt "Status writes do not start a reconcile" (shouldEnqueueOnUpdate,
//! the controller's two event handlers); health-loop.txt "Queue and wakeups" and DESIGN.md
//! (the lost table). Pure predicates over old and new objects.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::engine::api::{
    HealthyReason, Release, ReleaseInventory, ReleaseStatus, RolloutState, annotations,
    condition_types,
};

/// `shouldEnqueueOnUpdate`: (1) the resource version did not change (a resync); (2) the
/// generation changed (the spec did); (3) for the Release controller only, the
/// `sync-requested-at` annotation changed. Nothing else — in particular a status write,
/// which changes the resource version and nothing the three cases look at.
pub fn should_enqueue_on_update(
    old: &ObjectMeta,
    new: &ObjectMeta,
    release_controller: bool,
) -> bool {
    if old.resource_version == new.resource_version {
        return true;
    }
    if old.generation != new.generation {
        return true;
    }
    if release_controller {
        let request = |m: &ObjectMeta| {
            m.annotations
                .as_ref()
                .and_then(|a| a.get(annotations::SYNC_REQUESTED_AT))
                .cloned()
        };
        return request(old) != request(new);
    }
    false
}

/// The health loop's Healthy verdict changed and says the render that runs is healthy while
/// `status.lastHealthy` does not name it yet, or while a rollout of that render is still
/// Progressing: the controller looks again, so lastHealthy and the rollout follow the verdict
/// instead of the next interval. Deviation: the spec has status writes wake no loop. Its
/// three health edges fire in the pass that writes the entries' health, and the verdict is
/// written after them (or one pass later), so the controller woken by the edge's inventory
/// write read the previous verdict and nothing woke it again.
pub fn healthy_verdict_to_record(old: Option<&ReleaseStatus>, new: Option<&ReleaseStatus>) -> bool {
    let Some(new) = new else { return false };
    let healthy = |s: &ReleaseStatus| s.condition(condition_types::HEALTHY).cloned();
    let verdict = healthy(new);
    let changed = old.map(healthy) != Some(verdict.clone());
    let says_healthy =
        verdict.is_some_and(|c| c.status.is_true() && c.reason == HealthyReason::Healthy);
    let Some(applied) = new.applied_render() else {
        return false;
    };
    changed && says_healthy && verdict_to_record(new, applied)
}

/// Whether a Healthy verdict for `render` would change what the controller records:
/// lastHealthy does not name it yet, or a rollout of it is still Progressing.
fn verdict_to_record(status: &ReleaseStatus, render: &str) -> bool {
    let recorded = status.last_healthy.as_ref().map(|l| l.render_ref.as_str());
    let rollout_waits = status
        .rollout
        .as_ref()
        .is_some_and(|r| r.state == RolloutState::Progressing && r.render_ref == render);
    recorded != Some(render) || rollout_waits
}

/// How long the controller's wake-up by the health loop's inventory write waits for the
/// verdict that follows it. The same health pass writes it one request later, so it comes
/// within milliseconds unless the API server is slow; the wait is paid in full only when the
/// verdict does not come, and then by a pass that records nothing but the waves' health.
pub const VERDICT_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// The health loop's inventory write says every entry of the render that runs is Healthy,
/// while the cached Release's verdict does not yet: the same health pass writes that verdict
/// next, and [`healthy_verdict_to_record`] will wake the controller for it. A pass woken by
/// the inventory alone would record the waves' health and, one pass later, lastHealthy —
/// two status writes where one pass after the verdict makes one. The daemon then queues the
/// inventory's wake-up with [`VERDICT_GRACE`] unless a pass comes first (deviation: the spec
/// wakes the controller on every change of an entry's state). Anything else the entries say
/// (a wave complete while a later wave waits, a state that got worse) wakes it at once.
pub fn verdict_follows(release: &Release, inventory: &ReleaseInventory) -> bool {
    let Some(status) = release.status.as_ref() else {
        return false;
    };
    let Some(running) = status.applied_render() else {
        return false;
    };
    if status.attempted_render() != Some(running)
        || release.metadata.deletion_timestamp.is_some()
        || !crate::engine::health::configured(release)
        || inventory.spec.inventory.is_empty()
        || !crate::engine::reconcile::sync::inventory_healthy_for(inventory, running)
        || crate::engine::reconcile::assemble::verdict_healthy(status, running)
    {
        return false;
    }
    verdict_to_record(status, running)
}

/// The Applied or Healthy condition changed status: Releases of a higher cluster wave on the
/// same cluster may now proceed.
pub fn applied_or_healthy_changed(
    old: Option<&ReleaseStatus>,
    new: Option<&ReleaseStatus>,
) -> bool {
    let status_of =
        |s: Option<&ReleaseStatus>, t: &str| s.and_then(|s| s.condition(t)).map(|c| c.status);
    [condition_types::APPLIED, condition_types::HEALTHY]
        .iter()
        .any(|t| status_of(old, t) != status_of(new, t))
}

/// The observer loops' extra wake-up: the controller recorded a new attempted or applied
/// render. The inventory write that wakes them comes before the status write, so a health
/// pass woken by it can still see the previous `lastAttempted` (and say Pending), and the drift
/// loop waits for the first attempt; this catches up without a backoff or a resync.
pub fn attempted_render_changed(old: Option<&ReleaseStatus>, new: Option<&ReleaseStatus>) -> bool {
    old.and_then(ReleaseStatus::attempted_render) != new.and_then(ReleaseStatus::attempted_render)
        || old.and_then(ReleaseStatus::applied_render)
            != new.and_then(ReleaseStatus::applied_render)
}

/// The controller's ReleaseInventory handler: the health loop's fields changed (the engine
/// also asks it, to know whether a health write woke the controller).
pub use crate::engine::api::health_fields_changed as inventory_wakes_controller;

/// The observer's ReleaseInventory handler: a controller-owned field changed — the set of
/// entries, an entry's renderRef, or a hook entry's createdAt or workloadName. The health
/// loop's own writes therefore do not wake it.
pub fn inventory_wakes_observer(old: &ReleaseInventory, new: &ReleaseInventory) -> bool {
    let entries = |inv: &ReleaseInventory| -> BTreeMap<_, _> {
        inv.spec
            .inventory
            .iter()
            .map(|e| (e.key(), e.render_ref.clone()))
            .collect()
    };
    let hooks = |inv: &ReleaseInventory| -> BTreeMap<_, _> {
        inv.spec
            .hooks
            .iter()
            .map(|h| {
                (
                    (h.name.clone(), h.phase),
                    (h.created_at.clone(), h.workload_name.clone()),
                )
            })
            .collect()
    };
    entries(old) != entries(new) || hooks(old) != hooks(new)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_new_attempted_or_applied_render_wakes_the_health_loop() {
        use crate::engine::api::Attempt;
        let with = |attempted: &str, applied: Option<&str>| ReleaseStatus {
            last_attempted: Some(Box::new(Attempt {
                render_ref: Some(attempted.into()),
                ..Default::default()
            })),
            last_successful: applied
                .map(|r| Attempt {
                    render_ref: Some(r.into()),
                    ..Default::default()
                })
                .map(Box::new),
            ..Default::default()
        };
        let before = with("a", Some("a"));
        assert!(!attempted_render_changed(
            Some(&before),
            Some(&before.clone())
        ));
        assert!(attempted_render_changed(
            Some(&before),
            Some(&with("b", Some("a")))
        ));
        assert!(attempted_render_changed(
            Some(&with("b", Some("a"))),
            Some(&with("b", Some("b")))
        ));
        assert!(attempted_render_changed(None, Some(&before)));
        // Other status writes (a condition, reconciledAt) do not.
        let mut touched = before.clone();
        touched.reconciled_at = Some(crate::engine::status::now());
        assert!(!attempted_render_changed(Some(&before), Some(&touched)));
    }

    use super::*;
    use crate::engine::api::{ConditionStatus, HealthState, InventoryEntry, LastHealthy};
    use crate::engine::status::condition;

    #[test]
    fn a_healthy_verdict_lasthealthy_does_not_name_yet_wakes_the_controller_once() {
        use crate::engine::api::Attempt;
        let status = |healthy: Option<(ConditionStatus, &str, &str)>,
                      last_healthy: Option<&str>| {
            ReleaseStatus {
                last_successful: Some(Box::new(Attempt {
                    render_ref: Some("r2".into()),
                    ..Default::default()
                })),
                conditions: healthy
                    .map(|(s, reason, message)| condition("Healthy", s, reason, message, Some(1)))
                    .into_iter()
                    .collect(),
                last_healthy: last_healthy
                    .map(|r| LastHealthy {
                        render_ref: r.into(),
                        resolved_source: None,
                        healthy_at: None,
                    })
                    .map(Box::new),
                ..Default::default()
            }
        };
        let progressing = status(
            Some((ConditionStatus::False, "Progressing", "1 of 2")),
            Some("r1"),
        );
        let healthy = status(
            Some((ConditionStatus::True, "Healthy", "2 objects")),
            Some("r1"),
        );
        assert!(healthy_verdict_to_record(
            Some(&progressing),
            Some(&healthy)
        ));
        // Healthy already, only its message changed: still not recorded, so still a wake-up.
        let reworded = status(
            Some((ConditionStatus::True, "Healthy", "2 objects healthy")),
            Some("r1"),
        );
        assert!(healthy_verdict_to_record(Some(&healthy), Some(&reworded)));
        // The controller's own write that records it wakes nothing; nor does an unchanged verdict.
        let recorded = status(
            Some((ConditionStatus::True, "Healthy", "2 objects")),
            Some("r2"),
        );
        assert!(!healthy_verdict_to_record(Some(&healthy), Some(&recorded)));
        assert!(!healthy_verdict_to_record(
            Some(&healthy),
            Some(&healthy.clone())
        ));
        // A verdict that is not Healthy, or NotConfigured (recorded at the apply), wakes nothing.
        let not_configured = status(
            Some((ConditionStatus::True, "NotConfigured", "")),
            Some("r1"),
        );
        assert!(!healthy_verdict_to_record(
            Some(&progressing),
            Some(&not_configured)
        ));
        let degraded = status(Some((ConditionStatus::False, "Degraded", "x")), Some("r1"));
        assert!(!healthy_verdict_to_record(
            Some(&progressing),
            Some(&degraded)
        ));
        // A rollout of a render lastHealthy names already (a revert to it) waits for the
        // verdict too; once it succeeded, the verdict wakes nothing.
        let rollout = |state: RolloutState, verdict: (ConditionStatus, &str, &str)| {
            let mut s = status(Some(verdict), Some("r2"));
            s.rollout = Some(Box::new(crate::engine::api::RolloutStatus {
                render_ref: "r2".into(),
                state,
                started_at: None,
                finished_at: None,
                message: None,
            }));
            s
        };
        let waiting = (ConditionStatus::False, "Progressing", "1 of 2");
        let healthy_now = (ConditionStatus::True, "Healthy", "2 objects");
        assert!(healthy_verdict_to_record(
            Some(&rollout(RolloutState::Progressing, waiting)),
            Some(&rollout(RolloutState::Progressing, healthy_now))
        ));
        assert!(!healthy_verdict_to_record(
            Some(&rollout(RolloutState::Succeeded, waiting)),
            Some(&rollout(RolloutState::Succeeded, healthy_now))
        ));
    }

    fn meta(rv: &str, generation: i64, request: Option<&str>) -> ObjectMeta {
        ObjectMeta {
            resource_version: Some(rv.into()),
            generation: Some(generation),
            annotations: request
                .map(|r| [(annotations::SYNC_REQUESTED_AT.to_string(), r.to_string())].into()),
            ..Default::default()
        }
    }

    #[test]
    fn a_resync_with_the_same_resource_version_enqueues() {
        assert!(should_enqueue_on_update(
            &meta("5", 1, None),
            &meta("5", 1, None),
            false
        ));
    }

    #[test]
    fn a_generation_change_enqueues() {
        assert!(should_enqueue_on_update(
            &meta("5", 1, None),
            &meta("6", 2, None),
            false
        ));
        assert!(should_enqueue_on_update(
            &meta("5", 1, None),
            &meta("6", 2, None),
            true
        ));
    }

    #[test]
    fn a_sync_request_enqueues_only_the_release_controller() {
        let old = meta("5", 1, Some("t1"));
        let new = meta("6", 1, Some("t2"));
        assert!(should_enqueue_on_update(&old, &new, true));
        assert!(
            !should_enqueue_on_update(&old, &new, false),
            "the observer loops ignore /sync"
        );
    }

    #[test]
    fn a_status_write_does_not_enqueue() {
        // A status write: new resource version, same generation, same annotations.
        let old = meta("5", 3, Some("t1"));
        let new = meta("6", 3, Some("t1"));
        assert!(!should_enqueue_on_update(&old, &new, true));
        assert!(!should_enqueue_on_update(&old, &new, false));
    }

    fn inv(entries: Vec<InventoryEntry>) -> ReleaseInventory {
        let mut i = ReleaseInventory::default();
        i.spec.inventory = entries;
        i
    }

    fn entry(render: &str, state: Option<HealthState>, assessed: Option<&str>) -> InventoryEntry {
        InventoryEntry {
            kind: "ConfigMap".into(),
            name: "a".into(),
            render_ref: Some(render.into()),
            wave: Some(0),
            state,
            assessed_render_ref: assessed.map(str::to_string),
            ..Default::default()
        }
    }

    /// The inventory's wake-up waits for the verdict only when the entries say the running
    /// render is healthy and the cached Release has yet to hear it from the verdict.
    #[test]
    fn the_inventory_wake_up_waits_for_the_verdict_only_when_one_follows() {
        use crate::engine::api::{Attempt, Release};
        let release = |attempted: &str, verdict: Option<&str>, last_healthy: Option<&str>| {
            let mut r: Release = serde_json::from_value(serde_json::json!({
                "apiVersion": "core.convoy.kumodo.io/v1alpha1", "kind": "Release",
                "metadata": {"name": "web", "namespace": "apps"},
                "spec": {"source": {"kind": "GitRepository", "name": "repo"}},
            }))
            .unwrap();
            let attempt = |render: &str| {
                Some(Box::new(Attempt {
                    render_ref: Some(render.into()),
                    ..Default::default()
                }))
            };
            r.status = Some(ReleaseStatus {
                last_attempted: attempt(attempted),
                last_successful: attempt("r2"),
                conditions: verdict
                    .map(|reason| {
                        let s = if reason == "Healthy" {
                            ConditionStatus::True
                        } else {
                            ConditionStatus::Unknown
                        };
                        condition("Healthy", s, reason, "", Some(1))
                    })
                    .into_iter()
                    .collect(),
                last_healthy: last_healthy.map(|r| {
                    Box::new(LastHealthy {
                        render_ref: r.into(),
                        resolved_source: None,
                        healthy_at: None,
                    })
                }),
                ..Default::default()
            });
            r
        };
        let healthy = inv(vec![entry("r2", Some(HealthState::Healthy), Some("r2"))]);
        let pending = release("r2", Some("Pending"), Some("r1"));
        assert!(verdict_follows(&pending, &healthy));
        assert!(verdict_follows(&release("r2", None, None), &healthy));
        // The entries are not all Healthy for the running render: no verdict to wait for.
        for entries in [
            vec![entry("r2", Some(HealthState::Progressing), Some("r2"))],
            vec![entry("r2", Some(HealthState::Healthy), Some("r1"))],
            vec![
                entry("r2", Some(HealthState::Healthy), Some("r2")),
                InventoryEntry {
                    name: "b".into(),
                    ..entry("r1", Some(HealthState::Healthy), Some("r1"))
                },
            ],
            vec![],
        ] {
            assert!(!verdict_follows(&pending, &inv(entries)));
        }
        // The verdict is there already, lastHealthy names the render, or another render is
        // being attempted (its waves wait on these states): at once.
        assert!(!verdict_follows(
            &release("r2", Some("Healthy"), Some("r1")),
            &healthy
        ));
        assert!(!verdict_follows(
            &release("r2", Some("Pending"), Some("r2")),
            &healthy
        ));
        assert!(!verdict_follows(
            &release("r3", Some("Pending"), Some("r1")),
            &healthy
        ));
        // No health assessment: the verdict is NotConfigured, nothing to wait for.
        let mut unassessed = pending.clone();
        unassessed.spec.health_assessment = Some(Box::new(
            serde_json::from_value(serde_json::json!({"builtinRules": false})).unwrap(),
        ));
        assert!(!verdict_follows(&unassessed, &healthy));
        // Being deleted: the health pass writes no verdict.
        let mut deleting = pending.clone();
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                "2026-01-01T00:00:00Z".parse().unwrap(),
            ));
        assert!(!verdict_follows(&deleting, &healthy));
    }

    #[test]
    fn the_controller_wakes_on_health_not_on_its_own_fields() {
        let base = inv(vec![entry("r1", None, None)]);
        assert!(
            !inventory_wakes_controller(&base, &inv(vec![entry("r2", None, None)])),
            "renderRef is its own"
        );
        assert!(inventory_wakes_controller(
            &base,
            &inv(vec![entry("r1", Some(HealthState::Healthy), None)])
        ));
        assert!(inventory_wakes_controller(
            &base,
            &inv(vec![entry("r1", None, Some("r1"))])
        ));
        assert!(inventory_wakes_controller(&base, &inv(vec![])));
    }

    #[test]
    fn the_observer_wakes_on_controller_fields_not_on_its_own() {
        let base = inv(vec![entry("r1", None, None)]);
        assert!(inventory_wakes_observer(
            &base,
            &inv(vec![entry("r2", None, None)])
        ));
        assert!(!inventory_wakes_observer(
            &base,
            &inv(vec![entry("r1", Some(HealthState::Healthy), Some("r1"))])
        ));
    }

    #[test]
    fn applied_or_healthy_status_changes_are_noticed() {
        let old = ReleaseStatus {
            conditions: vec![condition(
                "Applied",
                crate::engine::api::ConditionStatus::False,
                "WaitingForSync",
                "",
                Some(1),
            )],
            ..Default::default()
        };
        let mut new = old.clone();
        new.conditions[0].message = "other".into();
        assert!(
            !applied_or_healthy_changed(Some(&old), Some(&new)),
            "a message is not a status"
        );
        new.conditions[0].status = crate::engine::api::ConditionStatus::True;
        assert!(applied_or_healthy_changed(Some(&old), Some(&new)));
    }
}

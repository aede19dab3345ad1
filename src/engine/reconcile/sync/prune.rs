//! stageSync steps 5 and 6: prune what left the render (`pruneRefs`: never anything outside
//! this inventory, never an object whose labels now name another Release), then write the
//! inventory as exactly what is on the cluster. The set logic is pure and unit-tested.
//!
//! Spec: reconcile-flow.txt stageSync steps 5–6, `pruneRefs`; DESIGN.md "Inventory",
//! "Ownership" (handing an object over).

use std::collections::BTreeSet;

use super::compare::SyncPlan;
use super::wave_loop::Applied;
use super::{SyncRun, applied_outcome};
use crate::engine::api::{ObjectKey, Reason, ReleaseInventory, WaveStatus};
use crate::engine::apply::{Applier, PruneTarget};
use crate::engine::explain::count;
use crate::engine::inventory::{InventoryHandle, Member};
use crate::engine::keep_policy::Deleting;
use crate::engine::ownership::{self, Owner};
use crate::engine::reconcile::ReconcileOutcome;
use crate::engine::runtime::{Context, ProgressEvent};

/// What step 5 did.
pub(super) struct Pruned {
    /// How many objects the prune deleted (or found gone).
    pub deleted: usize,
    /// Objects that could not be pruned: they stay recorded.
    pub not_pruned: Vec<ObjectKey>,
    /// Why some could not be pruned.
    pub failure: Option<String>,
    /// Targets whose labels name another Release: dropped from this inventory, not deleted.
    pub handed_over: Vec<(ObjectKey, Owner)>,
    /// Carried-over pending objects found without this Release's labels: never applied by
    /// it, so dropped from this inventory, not deleted.
    pub never_applied: Vec<ObjectKey>,
    /// Recorded objects found without this Release's labels: dropped from this inventory,
    /// not deleted.
    pub unlabelled: Vec<ObjectKey>,
    /// Objects whose annotations keep them from a prune (`keep_policy`): dropped from this
    /// inventory, not deleted.
    pub kept: Vec<(ObjectKey, String)>,
}

/// Step 5, `pruneRefs`: delete the previous members and pending objects the waves did not
/// apply again, except ignored ones.
pub(super) async fn prune_refs(
    ctx: &Context,
    run: &SyncRun<'_>,
    applier: &Applier,
    plan: &SyncPlan,
    applied: &Applied,
) -> Pruned {
    let targets =
        not_applied_elsewhere(applier, prune_targets(plan, &applied.members), applied).await;
    let mut pruned = Pruned {
        deleted: 0,
        not_pruned: Vec::new(),
        failure: None,
        handed_over: Vec::new(),
        never_applied: Vec::new(),
        unlabelled: Vec::new(),
        kept: Vec::new(),
    };
    if targets.is_empty() {
        return pruned;
    }
    match ownership::prune_refs(applier, run.release, &targets, Deleting::Prune).await {
        Ok(outcome) => {
            ctx.report(ProgressEvent::Pruned {
                objects: outcome.report.deleted.len(),
            });
            pruned.handed_over = outcome.handed_over;
            pruned.never_applied = outcome.never_applied;
            pruned.unlabelled = outcome.unlabelled;
            pruned.kept = outcome.kept;
            pruned.deleted = outcome.report.deleted.len();
            let failures = outcome.report.failures;
            if !failures.is_empty() {
                let shown: Vec<String> = failures.iter().take(5).map(|r| r.to_string()).collect();
                pruned.failure = Some(format!(
                    "cannot prune {}: {}",
                    count(failures.len(), "object"),
                    shown.join("; ")
                ));
            }
            pruned.not_pruned = failures.into_iter().map(|r| r.key).collect();
        }
        Err(e) => {
            pruned.not_pruned = targets.into_iter().map(|t| t.key).collect();
            pruned.failure = Some(format!("prune: {}", crate::engine::error::chain(&e)));
        }
    }
    pruned
}

/// Step 6: write the inventory (unless it says so already), mark the waves' health, and end
/// with `Applied` or `PruneFailed`.
pub(super) async fn write_inventory(
    run: &SyncRun<'_>,
    inventory: &InventoryHandle,
    plan: &SyncPlan,
    mut applied: Applied,
    pruned: Pruned,
) -> ReconcileOutcome {
    let members = final_members(&applied.members, &plan.recorded, &pruned.not_pruned);
    let pending = final_pending(&plan.carried, &pruned.not_pruned);
    let written = match final_put(&members, plan, &applied) {
        FinalPut::Unchanged => Ok(plan.previous.clone().unwrap_or_default()),
        FinalPut::ReadBack => match applied.last_written.take() {
            Some(written) => Ok(written),
            None => inventory.get().await.map(Option::unwrap_or_default),
        },
        FinalPut::Put => inventory.put_with_pending(&members, &pending).await,
    };
    let mut waves = applied.waves.clone();
    let written = match written {
        Ok(written) => written,
        Err(e) => {
            return run
                .deploy_failed(crate::engine::error::chain(&e))
                .with_waves(waves);
        }
    };
    mark_waves(run, &mut waves, &written);
    if let Some(message) = pruned.failure {
        return run
            .failed(Reason::PruneFailed, message, true)
            .with_waves(waves);
    }
    let objects = plan.for_cluster.objects.len();
    let applied = Applied { waves, ..applied };
    applied_outcome(run, objects, applied, &pruned)
}

/// `status.waves[].healthy`: from the inventory when health is assessed; NotConfigured: an
/// applied wave is a healthy one.
fn mark_waves(run: &SyncRun<'_>, waves: &mut [WaveStatus], written: &ReleaseInventory) {
    if crate::engine::health::configured(run.release) {
        mark_healthy_waves(waves, written, run.render_ref);
    } else {
        for wave in waves.iter_mut() {
            wave.healthy = wave.applied;
        }
    }
}

/// The prune targets: previous members and carried-over pending objects that this sync did
/// not apply, except `Ignore` objects. A carried-over one is only an intent: see
/// [`PruneTarget::intent_only`].
fn prune_targets(plan: &SyncPlan, applied: &[Member]) -> Vec<PruneTarget> {
    let applied: BTreeSet<&ObjectKey> = applied.iter().map(|m| &m.key).collect();
    let recorded = plan.recorded.iter().map(|m| (m, false));
    let carried = plan.carried.iter().map(|m| (m, true));
    recorded
        .chain(carried)
        .filter(|(m, _)| !applied.contains(&m.key) && !plan.for_cluster.ignored.contains(&m.key))
        .map(|(m, intent_only)| PruneTarget {
            key: m.key.clone(),
            wave: m.wave,
            intent_only,
            uid: None,
        })
        .collect()
}

/// `targets` without those this sync applied under their cluster-scoped key: a kind the
/// cluster served only from its wave on (an operator of an earlier one installed it) was
/// recorded pending under the namespaced key of the comparison, and a sync resuming from that
/// intent found the object it had just applied "not applied" and deleted it (found by a
/// review). Only a target whose cluster-scoped key was applied asks discovery.
async fn not_applied_elsewhere(
    applier: &Applier,
    targets: Vec<PruneTarget>,
    applied: &Applied,
) -> Vec<PruneTarget> {
    let applied: BTreeSet<&ObjectKey> = applied.members.iter().map(|m| &m.key).collect();
    let mut kept = Vec::with_capacity(targets.len());
    for target in targets {
        let mut unscoped = target.key.clone();
        unscoped.namespace.clear();
        let cluster_scoped = !target.key.namespace.is_empty()
            && applied.contains(&unscoped)
            && matches!(
                applier
                    .resources()
                    .resolve_group_kind(&target.key.group, &target.key.kind)
                    .await,
                Ok(Some(resource)) if !resource.namespaced
            );
        if !cluster_scoped {
            kept.push(target);
        }
    }
    kept
}

/// How step 6 writes the inventory.
#[derive(Debug, PartialEq, Eq)]
enum FinalPut {
    /// It holds these members already (as read before the sync, nothing pending).
    Unchanged,
    /// The last wave's Put wrote these members (and no pending objects): its response is
    /// the inventory (`Applied::last_written`; a read only if there were none, which a Put
    /// of these members always leaves).
    ReadBack,
    Put,
}

fn final_put(members: &[Member], plan: &SyncPlan, applied: &Applied) -> FinalPut {
    decide_final_put(
        members,
        &plan.recorded,
        &applied.last_put,
        applied.pending_in_inventory,
    )
}

fn decide_final_put(
    members: &[Member],
    recorded: &[Member],
    last_put: &[Member],
    pending_in_inventory: bool,
) -> FinalPut {
    if pending_in_inventory {
        FinalPut::Put
    } else if same_members(members, recorded) {
        FinalPut::Unchanged
    } else if same_members(members, last_put) {
        FinalPut::ReadBack
    } else {
        FinalPut::Put
    }
}

/// What the inventory records after the prune: what was applied, and the members that
/// could not be pruned.
fn final_members(applied: &[Member], recorded: &[Member], not_pruned: &[ObjectKey]) -> Vec<Member> {
    let mut members = applied.to_vec();
    members.extend(
        recorded
            .iter()
            .filter(|m| not_pruned.contains(&m.key))
            .cloned(),
    );
    members
}

/// The carried-over pending objects that could not be pruned stay pending.
fn final_pending(carried: &[Member], not_pruned: &[ObjectKey]) -> Vec<ObjectKey> {
    carried
        .iter()
        .filter(|m| not_pruned.contains(&m.key))
        .map(|m| m.key.clone())
        .collect()
}

/// The carried-over pending objects not applied (again) in this sync so far.
pub(super) fn still_pending(carried: &[Member], applied: &[Member]) -> Vec<ObjectKey> {
    carried
        .iter()
        .filter(|c| !applied.iter().any(|a| a.key == c.key))
        .map(|c| c.key.clone())
        .collect()
}

/// Whether two member lists record the same thing (order aside).
pub(super) fn same_members(a: &[Member], b: &[Member]) -> bool {
    let key = |m: &Member| {
        (
            m.key.clone(),
            m.render_ref.clone(),
            m.wave,
            m.digest.clone(),
        )
    };
    let mut a: Vec<_> = a.iter().map(key).collect();
    let mut b: Vec<_> = b.iter().map(key).collect();
    a.sort();
    b.sort();
    a == b
}

/// The previous members not applied again, plus everything applied so far.
pub(super) fn union(previous: &[Member], applied: &[Member]) -> Vec<Member> {
    let applied_keys: BTreeSet<&ObjectKey> = applied.iter().map(|m| &m.key).collect();
    let mut all: Vec<Member> = previous
        .iter()
        .filter(|m| !applied_keys.contains(&m.key))
        .cloned()
        .collect();
    all.extend(applied.iter().cloned());
    all
}

/// Whether every inventory entry carries `render_ref` and was assessed Healthy for it. The
/// cached Healthy condition can still speak for the previous render (the health loop has not
/// looked since the apply); the entries cannot.
pub fn inventory_healthy_for(inventory: &ReleaseInventory, render_ref: &str) -> bool {
    inventory.spec.inventory.iter().all(|e| {
        e.render_ref.as_deref() == Some(render_ref)
            && e.assessed_render_ref.as_deref() == Some(render_ref)
            && e.state == Some(crate::engine::api::HealthState::Healthy)
    })
}

/// `status.waves[].healthy`: every entry of the wave is Healthy for this render.
pub fn mark_healthy_waves(
    waves: &mut [WaveStatus],
    inventory: &ReleaseInventory,
    render_ref: &str,
) {
    for wave in waves.iter_mut() {
        let entries: Vec<_> = inventory
            .spec
            .inventory
            .iter()
            .filter(|e| e.wave == Some(wave.wave) && e.render_ref.as_deref() == Some(render_ref))
            .collect();
        wave.healthy = !entries.is_empty()
            && entries.iter().all(|e| {
                e.state == Some(crate::engine::api::HealthState::Healthy)
                    && e.assessed_render_ref.as_deref() == Some(render_ref)
            });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn inventory(entries: serde_json::Value) -> ReleaseInventory {
        serde_json::from_value(json!({
            "apiVersion": "core.convoy.kumodo.io/v1alpha1", "kind": "ReleaseInventory",
            "metadata": {"name": "web", "namespace": "apps"},
            "inventory": entries,
        }))
        .unwrap()
    }

    fn member(name: &str, render: &str, wave: i32) -> Member {
        Member {
            key: ObjectKey {
                group: String::new(),
                kind: "ConfigMap".into(),
                namespace: "apps".into(),
                name: name.into(),
            },
            render_ref: render.into(),
            wave,
            digest: Some(format!("{name}-{render}")),
        }
    }

    #[test]
    fn the_inventory_decides_whether_a_render_is_healthy() {
        let entry = |render: &str, assessed: &str, state: &str| {
            json!({"group": "apps", "kind": "Deployment", "namespace": "apps", "name": "web",
                   "renderRef": render, "assessedRenderRef": assessed, "state": state})
        };
        assert!(inventory_healthy_for(
            &inventory(json!([entry("new", "new", "Healthy")])),
            "new"
        ));
        // Healthy for the previous render: the verdict is not this render's yet.
        assert!(!inventory_healthy_for(
            &inventory(json!([entry("new", "old", "Healthy")])),
            "new"
        ));
        assert!(!inventory_healthy_for(
            &inventory(json!([entry("old", "old", "Healthy")])),
            "new"
        ));
        assert!(!inventory_healthy_for(
            &inventory(json!([entry("new", "new", "Progressing")])),
            "new"
        ));
    }

    #[test]
    fn a_wave_is_healthy_only_when_every_entry_of_this_render_is() {
        let entry = |name: &str, wave: i32, state: &str| {
            json!({"group": "", "kind": "ConfigMap", "namespace": "apps", "name": name, "wave": wave,
                   "renderRef": "r", "assessedRenderRef": "r", "state": state})
        };
        let inv = inventory(json!([
            entry("a", 0, "Healthy"),
            entry("b", 1, "Healthy"),
            entry("c", 1, "Progressing")
        ]));
        let wave = |n| WaveStatus {
            wave: n,
            objects: 1,
            applied: true,
            healthy: false,
        };
        let mut waves = vec![wave(0), wave(1), wave(2)];
        mark_healthy_waves(&mut waves, &inv, "r");
        // Wave 2 has no entries of this render: not known to be healthy.
        assert_eq!(
            waves.iter().map(|w| w.healthy).collect::<Vec<_>>(),
            [true, false, false]
        );
        assert_eq!(
            crate::engine::reconcile::sync::unhealthy_in_wave(&inv, 1, "r"),
            ["ConfigMap apps/c is Progressing"]
        );
        // The previous render's entry (about to be pruned, or applied in a later wave) is not
        // this render's wave 1: it is never assessed for "r" and does not hold the gate.
        let leaving = inventory(json!([
            entry("b", 1, "Healthy"),
            {"group": "", "kind": "ConfigMap", "namespace": "apps", "name": "gone", "wave": 1,
             "renderRef": "old", "assessedRenderRef": "old", "state": "Healthy"}
        ]));
        assert!(crate::engine::reconcile::sync::unhealthy_in_wave(&leaving, 1, "r").is_empty());
    }

    #[test]
    fn members_applied_again_replace_the_recorded_ones_and_the_rest_stay() {
        let recorded = [member("a", "old", 0), member("b", "old", 0)];
        let applied = [member("b", "new", 1), member("c", "new", 1)];
        let all = union(&recorded, &applied);
        assert!(same_members(
            &all,
            &[
                member("c", "new", 1),
                member("a", "old", 0),
                member("b", "new", 1)
            ]
        ));
        // Any recorded field matters: the render, the wave, the digest.
        assert!(!same_members(
            &all,
            &union(&recorded, &[member("b", "new", 1)])
        ));
        let carried = [member("p", "old", 0), member("b", "old", 0)];
        assert_eq!(still_pending(&carried, &applied), [member("p", "", 0).key]);
    }

    #[test]
    fn what_could_not_be_pruned_stays_recorded_and_pending_stays_pending() {
        let recorded = [member("a", "old", 0), member("gone", "old", 0)];
        let carried = [member("half", "old", 0), member("p", "old", 0)];
        let applied = [member("a", "new", 0)];
        let not_pruned = [member("gone", "", 0).key, member("half", "", 0).key];
        assert!(same_members(
            &final_members(&applied, &recorded, &not_pruned),
            &[member("a", "new", 0), member("gone", "old", 0)]
        ));
        assert_eq!(
            final_pending(&carried, &not_pruned),
            [member("half", "", 0).key]
        );
    }

    #[test]
    fn the_final_put_is_skipped_only_when_the_inventory_says_so_already() {
        let recorded = [member("a", "r", 0)];
        let put = [member("a", "r", 0), member("b", "r", 1)];
        assert_eq!(
            decide_final_put(&recorded, &recorded, &put, false),
            FinalPut::Unchanged
        );
        assert_eq!(
            decide_final_put(&put, &recorded, &put, false),
            FinalPut::ReadBack
        );
        assert_eq!(
            decide_final_put(&[member("b", "r", 1)], &recorded, &put, false),
            FinalPut::Put
        );
        // Pending objects in the inventory are cleared by a Put whatever the members are.
        assert_eq!(
            decide_final_put(&recorded, &recorded, &put, true),
            FinalPut::Put
        );
    }
}

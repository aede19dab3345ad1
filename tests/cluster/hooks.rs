//! Lifecycle hooks against the real control plane: kwok runs the hook pods (and fails the
//! ones labelled `convoy.kumodo.io/test-fail`), the health loop polls them, the controller
//! reads what it wrote.

use std::time::Duration;

use convoy::engine::api::{
    FailureStage, HookPhase, HookState, Reason, ReleaseInventory, condition_types,
};
use convoy::engine::health::{HealthMemory, health_pass};
use convoy::engine::reconcile::HandlerResult;
use convoy::engine::runtime::Requeue;
use k8s_openapi::api::batch::v1::Job;
use kube::Api;
use kube::api::ListParams;
use serde_json::{Value, json};

use crate::support::eventually;
use crate::support::fixture::{Fixture, config_map};

fn job() -> Value {
    json!({"template": {"spec": {"containers": [{"name": "x", "image": "busybox"}]}}})
}

fn failing_job() -> Value {
    json!({"template": {
        "metadata": {"labels": {"convoy.kumodo.io/test-fail": "true"}},
        "spec": {"containers": [{"name": "x", "image": "busybox"}]},
    }})
}

fn hook(name: &str, phase: &str, job: Value) -> Value {
    json!({"name": name, "phase": phase, "job": job, "timeout": "2m"})
}

async fn jobs_of(f: &Fixture, hook: &str) -> Vec<Job> {
    let api: Api<Job> = Api::namespaced(f.env.client.clone(), &f.env.namespace);
    api.list(&ListParams::default().labels(&format!("convoy.kumodo.io/hook={hook}")))
        .await
        .unwrap()
        .items
}

async fn inventory(f: &Fixture) -> Option<ReleaseInventory> {
    let api: Api<ReleaseInventory> = Api::namespaced(f.env.client.clone(), &f.env.namespace);
    api.get_opt("web").await.unwrap()
}

fn reason(result: &HandlerResult) -> Reason {
    result.outcome.as_ref().unwrap().reason
}

/// Health passes and syncs until the sync's Applied reason is `want`.
async fn until_reason(f: &Fixture, want: Reason) -> HandlerResult {
    let memory = HealthMemory::default();
    eventually(
        &format!("the sync to end {want}"),
        Duration::from_secs(60),
        || async {
            let _ = health_pass(&f.ctx, &memory, &f.release().await).await;
            let result = f.sync().await;
            (reason(&result) == want).then_some(result)
        },
    )
    .await
}

#[tokio::test]
async fn presync_hooks_run_before_wave_zero_and_keep_each_others_fields() {
    let f = Fixture::new(
        "hooks-presync",
        &[("a.yaml", &config_map("a", 0, "1"))],
        json!({"lifecycle": {"hooks": [
            hook("migrate", "preSync", job()),
            hook("seed", "preSync", job()),
        ]}}),
    )
    .await;
    let first = f.sync().await;
    assert_eq!(reason(&first), Reason::WaitingForHook);
    assert!(first.outcome.as_ref().unwrap().message.contains("migrate"));
    assert_eq!(
        f.config_map("a").await,
        None,
        "nothing applied while preSync runs"
    );
    assert_eq!(jobs_of(&f, "migrate").await.len(), 1);

    until_reason(&f, Reason::Applied).await;
    let completed = jobs_of(&f, "migrate").await[0]
        .status
        .as_ref()
        .unwrap()
        .completion_time
        .clone()
        .unwrap();
    let created = f.config_map("a").await.unwrap()["metadata"]["creationTimestamp"]
        .as_str()
        .unwrap()
        .parse::<jiff::Timestamp>()
        .unwrap();
    assert!(
        created >= completed.0,
        "wave 0 at {created}, the hook completed at {}",
        completed.0
    );
    let release = f.release().await;
    let lifecycle = release
        .status
        .as_ref()
        .unwrap()
        .condition(condition_types::LIFECYCLE_SUCCEEDED)
        .unwrap()
        .clone();
    assert_eq!(
        (lifecycle.status.as_str(), lifecycle.reason.as_str()),
        ("True", "Succeeded")
    );
    let phases = release.status.unwrap().lifecycle.unwrap().phases;
    assert_eq!(phases.len(), 1);
    assert!(phases[0].finished);

    let first_job = jobs_of(&f, "migrate").await[0]
        .metadata
        .name
        .clone()
        .unwrap();
    // The same render again: no second Job.
    assert_eq!(reason(&f.sync().await), Reason::Applied);
    assert_eq!(jobs_of(&f, "migrate").await.len(), 1);
    assert_eq!(jobs_of(&f, "seed").await.len(), 1);

    // Both entries keep the controller's fields and the health loop's, each under its manager.
    let inv = inventory(&f).await.unwrap();
    for entry in &inv.spec.hooks {
        assert!(
            entry.workload_name.is_some() && entry.created_at.is_some(),
            "{entry:?}"
        );
        assert_eq!(entry.state, Some(HookState::Succeeded), "{entry:?}");
        assert!(entry.finished_at.is_some());
    }
    let object = serde_json::to_value(&inv).unwrap();
    for mf in object["metadata"]["managedFields"].as_array().unwrap() {
        let hooks = mf["fieldsV1"]["f:hooks"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        for fields in hooks.values() {
            if fields.get("f:state").is_some() {
                assert_eq!(mf["manager"], "convoy-hook-status");
            }
            if fields.get("f:workloadName").is_some() {
                assert_eq!(mf["manager"], "convoy-inventory-hooks");
            }
        }
    }

    // A new render arms the hooks again (a new Job, createdAt after the old finishedAt).
    let finished_before = inv.spec.hooks[0].finished_at.clone().unwrap();
    f.commit(&[("a.yaml", &config_map("a", 0, "2"))]);
    assert_eq!(reason(&f.sync().await), Reason::WaitingForHook);
    assert_eq!(
        jobs_of(&f, "migrate").await.len(),
        2,
        "the old Job stays for inspection"
    );
    let inv = inventory(&f).await.unwrap();
    assert!(
        inv.spec
            .hooks
            .iter()
            .all(|h| h.created_at.clone().unwrap().0 >= finished_before.0)
    );

    // A third render: the first render's finished Job is collected, the second's is kept.
    until_reason(&f, Reason::Applied).await;
    f.commit(&[("a.yaml", &config_map("a", 0, "3"))]);
    assert_eq!(reason(&f.sync().await), Reason::WaitingForHook);
    let live: Vec<String> = jobs_of(&f, "migrate")
        .await
        .into_iter()
        .filter(|j| j.metadata.deletion_timestamp.is_none())
        .map(|j| j.metadata.name.unwrap())
        .collect();
    assert_eq!(
        live.len(),
        2,
        "the current Job and the last finished one: {live:?}"
    );
    assert!(
        !live.contains(&first_job),
        "{first_job} was collected: {live:?}"
    );
}

#[tokio::test]
async fn a_failing_presync_hook_stops_the_sync_unless_it_may_continue() {
    let f = Fixture::new(
        "hooks-fail",
        &[("a.yaml", &config_map("a", 0, "1"))],
        json!({"lifecycle": {"hooks": [hook("migrate", "preSync", failing_job())]}}),
    )
    .await;
    let failed = until_reason(&f, Reason::HookFailed).await;
    let outcome = failed.outcome.unwrap();
    assert!(!outcome.retry);
    assert!(
        outcome.message.contains("failed on purpose"),
        "the pod's termination message: {}",
        outcome.message
    );
    let release = f.release().await;
    let status = release.status.clone().unwrap();
    let failure = status.last_attempted.clone().unwrap().failure.unwrap();
    assert_eq!(failure.stage, FailureStage::HookFailed);
    assert_eq!(failure.hook_name.as_deref(), Some("migrate"));
    assert_eq!(failure.hook_phase, Some(HookPhase::PreSync));
    assert_eq!(
        status
            .condition(condition_types::LIFECYCLE_SUCCEEDED)
            .map(|c| c.status.as_str()),
        Some("False")
    );
    assert_eq!(f.config_map("a").await, None, "nothing applied");

    // With onFailure: Continue (an edited hook, so it runs again) the sync proceeds.
    let mut continuing = hook("migrate", "preSync", failing_job());
    continuing["onFailure"] = json!("Continue");
    f.patch_spec(json!({"lifecycle": {"hooks": [continuing]}}))
        .await;
    until_reason(&f, Reason::Applied).await;
    assert!(f.config_map("a").await.is_some());
    assert_eq!(jobs_of(&f, "migrate").await.len(), 2);
}

#[tokio::test]
async fn a_hook_past_its_timeout_fails_with_the_health_loops_state() {
    let stuck = json!({"template": {"spec": {
        "nodeSelector": {"convoy-test": "nowhere"},
        "containers": [{"name": "x", "image": "busybox"}],
    }}});
    let mut h = hook("warmup", "preSync", stuck);
    h["timeout"] = json!("1s");
    let f = Fixture::new(
        "hooks-timeout",
        &[("a.yaml", &config_map("a", 0, "1"))],
        json!({"lifecycle": {"hooks": [h]}}),
    )
    .await;
    let failed = until_reason(&f, Reason::HookFailed).await;
    assert!(failed.outcome.unwrap().message.contains("timeout"));
    let inv = inventory(&f).await.unwrap();
    assert_eq!(inv.spec.hooks[0].state, Some(HookState::Failed));
    let object = serde_json::to_value(&inv).unwrap();
    let state_owner = object["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|mf| {
            mf["fieldsV1"]["f:hooks"]
                .as_object()
                .is_some_and(|h| h.values().any(|f| f.get("f:state").is_some()))
        })
        .unwrap()["manager"]
        .clone();
    assert_eq!(state_owner, "convoy-hook-status");
}

#[tokio::test]
async fn a_dry_run_rejection_arms_the_sync_failed_hook() {
    let bad = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: Not_Valid\ndata: {a: b}\n";
    let f = Fixture::new(
        "hooks-syncfailed",
        &[("bad.yaml", bad)],
        json!({"lifecycle": {"hooks": [hook("notify", "syncFailed", job())]}}),
    )
    .await;
    assert_eq!(reason(&f.sync().await), Reason::Unappliable);
    assert_eq!(jobs_of(&f, "notify").await.len(), 1);
    let inv = inventory(&f).await.unwrap();
    assert_eq!(inv.spec.hooks[0].phase, HookPhase::SyncFailed);
    // Not waited for, and not armed twice for the same render.
    assert_eq!(reason(&f.sync().await), Reason::Unappliable);
    assert_eq!(jobs_of(&f, "notify").await.len(), 1);
}

#[tokio::test]
async fn deletion_runs_predelete_prunes_runs_postdelete_then_lets_go() {
    let f = Fixture::new(
        "hooks-delete",
        &[("a.yaml", &config_map("a", 0, "1"))],
        json!({"lifecycle": {"hooks": [
            hook("drain", "preDelete", job()),
            hook("cleanup", "postDelete", job()),
        ]}}),
    )
    .await;
    assert_eq!(reason(&f.sync().await), Reason::Applied);
    f.releases()
        .delete("web", &Default::default())
        .await
        .unwrap();

    // preDelete runs first; nothing is pruned meanwhile.
    let waiting = f.sync().await;
    assert_eq!(waiting.requeue, Requeue::After(Duration::from_secs(10)));
    assert_eq!(jobs_of(&f, "drain").await.len(), 1);
    assert!(jobs_of(&f, "cleanup").await.is_empty());
    assert!(f.config_map("a").await.is_some());

    let memory = HealthMemory::default();
    eventually(
        "the preDelete hook to finish and the prune",
        Duration::from_secs(60),
        || async {
            let _ = health_pass(&f.ctx, &memory, &f.release().await).await;
            f.sync().await;
            f.config_map("a").await.is_none().then_some(())
        },
    )
    .await;
    assert_eq!(
        jobs_of(&f, "cleanup").await.len(),
        1,
        "postDelete armed after the prune"
    );
    assert!(
        inventory(&f).await.is_some(),
        "the inventory waits for postDelete"
    );

    eventually(
        "the postDelete hook to finish",
        Duration::from_secs(60),
        || async {
            let release = f.releases().get_opt("web").await.unwrap()?;
            let pass = health_pass(&f.ctx, &memory, &release).await.unwrap()?;
            let inv = inventory(&f).await?;
            inv.spec
                .hooks
                .iter()
                .all(|h| h.finished_at.is_some())
                .then_some(pass)
        },
    )
    .await;
    // Every hook finished: the health loop writes nothing more to the inventory.
    let quiet = health_pass(&f.ctx, &memory, &f.release().await)
        .await
        .unwrap()
        .unwrap();
    assert!(!quiet.wrote_inventory && !quiet.wrote_health, "{quiet:?}");
    let done = f.sync().await;
    assert_eq!(done.requeue, Requeue::Never);
    assert!(
        f.releases().get_opt("web").await.unwrap().is_none(),
        "the finalizer is gone"
    );
    assert!(inventory(&f).await.is_none());
    assert!(
        jobs_of(&f, "drain").await.is_empty() && jobs_of(&f, "cleanup").await.is_empty(),
        "the hook Jobs go with the Release"
    );
}

#[tokio::test]
async fn postsync_hooks_are_armed_after_the_apply_without_holding_it() {
    let f = Fixture::new(
        "hooks-postsync",
        &[("a.yaml", &config_map("a", 0, "1"))],
        json!({"lifecycle": {"hooks": [hook("notify", "postSync", job())]}}),
    )
    .await;
    let result = f.sync().await;
    assert_eq!(
        reason(&result),
        Reason::Applied,
        "postSync does not hold the sync"
    );
    assert!(f.config_map("a").await.is_some());
    assert_eq!(jobs_of(&f, "notify").await.len(), 1);
    let inv = inventory(&f).await.unwrap();
    let entry = inv
        .spec
        .hooks
        .iter()
        .find(|h| h.name == "notify")
        .expect("the armed hook is recorded");
    assert_eq!(entry.phase, HookPhase::PostSync);
    // A re-sync of the same render arms nothing new; a new render arms it again.
    assert_eq!(reason(&f.sync().await), Reason::Applied);
    assert_eq!(jobs_of(&f, "notify").await.len(), 1);
    f.commit(&[("a.yaml", &config_map("a", 0, "2"))]);
    assert_eq!(reason(&f.sync().await), Reason::Applied);
    assert_eq!(jobs_of(&f, "notify").await.len(), 2);
}

#[tokio::test]
async fn a_pod_hook_is_armed_polled_and_removed_with_the_release() {
    use k8s_openapi::api::core::v1::Pod;
    let pod = json!({"containers": [{"name": "x", "image": "busybox"}]});
    let f = Fixture::new(
        "hooks-pod",
        &[("a.yaml", &config_map("a", 0, "1"))],
        json!({"lifecycle": {"hooks": [
            {"name": "probe", "phase": "preSync", "pod": pod, "timeout": "1s"},
        ]}}),
    )
    .await;
    // kwok runs bare Pods but never ends them: past its timeout the hook fails.
    let failed = until_reason(&f, Reason::HookFailed).await;
    assert!(failed.outcome.unwrap().message.contains("timeout"));
    let pods: Api<Pod> = Api::namespaced(f.env.client.clone(), &f.env.namespace);
    let hook_pods = || async {
        pods.list(&ListParams::default().labels("convoy.kumodo.io/hook=probe"))
            .await
            .unwrap()
            .items
    };
    let armed = hook_pods().await;
    assert_eq!(armed.len(), 1, "one bare Pod, no Job");
    assert_eq!(
        armed[0].spec.as_ref().unwrap().restart_policy.as_deref(),
        Some("Never")
    );
    assert!(jobs_of(&f, "probe").await.is_empty());
    let inv = inventory(&f).await.unwrap();
    assert_eq!(inv.spec.hooks[0].state, Some(HookState::Failed));

    f.releases()
        .delete("web", &Default::default())
        .await
        .unwrap();
    f.sync().await;
    assert!(f.releases().get_opt("web").await.unwrap().is_none());
    assert!(
        hook_pods()
            .await
            .iter()
            .all(|p| p.metadata.deletion_timestamp.is_some()),
        "the hook Pod goes with the Release"
    );
}

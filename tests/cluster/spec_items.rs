//! Spec items an audit found no test for (issue 19): stop-table rows and their retry flags,
//! delete hooks that fail, syncFailed on a wave or prune failure, writers' timestamps, the
//! drift dry run's manager, and errors that must go back to the work queue. tests/README.md
//! maps each spec item to its test.

use std::sync::Arc;
use std::time::Duration;

use convoy::engine::api::{
    FailureStage, HookPhase, HookState, Reason, Release, ReleaseInventory, condition_types,
};
use convoy::engine::drift::{Verdict, drift_pass};
use convoy::engine::health::{HealthMemory, health_pass};
use convoy::engine::reconcile::{HandlerResult, sync_handler};
use convoy::engine::runtime::Requeue;
use k8s_openapi::api::batch::v1::Job;
use kube::Api;
use kube::api::ListParams;
use serde_json::{Value, json};

use crate::support::eventually;
use crate::support::fixture::{Fixture, config_map, deployment};

fn job() -> Value {
    json!({"template": {"spec": {"containers": [{"name": "x", "image": "busybox"}]}}})
}

/// kwok fails the pods of this Job (support's kwok stages).
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

fn stop(result: &HandlerResult) -> (Reason, Option<String>, bool) {
    let outcome = result.outcome.as_ref().unwrap();
    (
        outcome.reason,
        outcome.attempt.failure.as_ref().map(|f| f.stage.clone()),
        outcome.retry,
    )
}

fn condition_of(release: &Release, type_: &str) -> Option<convoy::engine::api::Condition> {
    release.status.as_ref()?.condition(type_).cloned()
}

/// A ValidatingAdmissionPolicy (and its binding) that refuses `operations` on `resources` of
/// `group` in `namespace` unless `allow` (a CEL expression) holds. Named after the namespace.
async fn refuse(
    f: &Fixture,
    name: &str,
    group: &str,
    resources: &[&str],
    operations: &[&str],
    allow: &str,
) {
    let ns = &f.env.namespace;
    let policy = format!("{name}-{ns}");
    f.kubectl_apply(&json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": policy},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [{"apiGroups": [group], "apiVersions": ["*"],
                    "operations": operations, "resources": resources}],
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
            },
            "validations": [{"expression": allow, "message": format!("refused by the test ({name})")}],
        },
    }))
    .await;
    f.kubectl_apply(&json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": policy},
        "spec": {"policyName": policy, "validationActions": ["Deny"]},
    }))
    .await;
}

/// Wait until a test policy refuses `kubectl args` (policies take a moment to load).
async fn in_force(f: &Fixture, args: &[&str]) {
    let mut all = args.to_vec();
    all.extend(["-n", &f.env.namespace]);
    eventually("the policy in force", Duration::from_secs(30), || async {
        let out = f.env.kubectl(&all);
        String::from_utf8_lossy(&out.stderr)
            .contains("refused by the test")
            .then_some(())
    })
    .await;
}

// --- status-and-conditions.txt "Where a reconcile can stop" ------------------------------------

/// "Load the pinned render: read or parse error | Rendering | DeployFailed | no".
#[tokio::test]
async fn a_pinned_render_that_cannot_be_read_is_deploy_failed_without_retry() {
    let f = Fixture::new(
        "stop-pin-read",
        &[("a.yaml", &config_map("a", 0, "1"))],
        json!({}),
    )
    .await
    .with_dir_store();
    let first = f.sync().await;
    let pinned = first.outcome.unwrap().attempt.render_ref.unwrap();
    f.commit(&[("a.yaml", &config_map("a", 0, "2"))]);
    f.sync().await;
    // The stored file of the pinned render is damaged.
    let file = f
        .store_dir
        .path()
        .join(&f.env.namespace)
        .join("web")
        .join("renders")
        .join(format!("{pinned}.json.gz"));
    std::fs::write(&file, b"not a gzip stream").unwrap();
    f.annotate(json!({"convoy.kumodo.io/pin": pinned})).await;
    let result = f.sync().await;
    assert_eq!(
        stop(&result),
        (
            Reason::DeployFailed,
            Some(FailureStage::Rendering.to_string()),
            false
        )
    );
    let message = &result.outcome.unwrap().message;
    assert!(
        message.starts_with("cannot load pinned render"),
        "{message}"
    );
}

/// "Write to the render store | Syncing | DeployFailed | yes".
#[tokio::test]
async fn a_render_store_write_failure_is_deploy_failed_and_retried() {
    let mut f = Fixture::new(
        "stop-store-write",
        &[("a.yaml", &config_map("a", 0, "1"))],
        json!({}),
    )
    .await;
    // A store whose root is a file: every write fails.
    let root = f.store_dir.path().join("not-a-directory");
    std::fs::write(&root, b"").unwrap();
    f.ctx.store = Some(Arc::new(convoy::engine::store::dir::DirStore::new(&root)));
    let result = f.sync().await;
    assert_eq!(
        stop(&result),
        (
            Reason::DeployFailed,
            Some(FailureStage::Syncing.to_string()),
            true
        )
    );
    assert_eq!(
        f.config_map("a").await,
        None,
        "nothing applied before the store write"
    );
}

/// The retry flags of "Read Helm values" (ValuesNotReady, yes), "Render: not supported"
/// (Unsupported, no) and "Fetch the source: not supported" (Unsupported, no).
#[tokio::test]
async fn values_not_ready_is_retried_and_unsupported_is_not() {
    let chart = "apiVersion: v2\nname: demo\nversion: 0.1.0\n";
    let f = Fixture::new(
        "stop-retry-flags",
        &[
            ("Chart.yaml", chart),
            ("templates/cm.yaml", &config_map("a", 0, "1")),
        ],
        json!({"content": {"type": "helm", "helm": {"valuesFrom": [{"kind": "ConfigMap", "name": "absent"}]}}}),
    )
    .await;
    assert_eq!(
        stop(&f.sync().await),
        (
            Reason::ValuesNotReady,
            Some(FailureStage::Rendering.to_string()),
            true
        )
    );
    f.patch_spec(json!({"content": {"type": "jsonnet", "helm": null}}))
        .await;
    assert_eq!(
        stop(&f.sync().await),
        (
            Reason::Unsupported,
            Some(FailureStage::Rendering.to_string()),
            false
        )
    );
    f.kubectl_apply(&json!({
        "apiVersion": "source.convoy.kumodo.io/v1alpha1", "kind": "GitRepository",
        "metadata": {"name": "semver", "namespace": f.env.namespace},
        "spec": {"url": f.repo.file_url(), "ref": {"semver": ">=1.0.0"}},
    }))
    .await;
    f.patch_spec(json!({"content": null, "source": {"kind": "GitRepository", "name": "semver", "path": "app"}}))
        .await;
    assert_eq!(
        stop(&f.sync().await),
        (
            Reason::Unsupported,
            Some(FailureStage::SourceResolution.to_string()),
            false
        )
    );
}

/// A ServiceAccount `deployer` that may do everything a sync needs with ConfigMaps and Jobs
/// except delete ConfigMaps; the Release acts as it from now on.
async fn without_delete(f: &Fixture) {
    let ns = f.env.namespace.clone();
    for args in [
        vec!["create", "serviceaccount", "deployer", "-n", &ns],
        vec![
            "create",
            "role",
            "deployer",
            "--verb=get,list,watch,create,update,patch",
            "--resource=configmaps",
            "-n",
            &ns,
        ],
        vec![
            "create",
            "role",
            "deployer-jobs",
            "--verb=get,list,watch,create,update,patch,delete",
            "--resource=jobs,pods",
            "-n",
            &ns,
        ],
        vec![
            "create",
            "rolebinding",
            "deployer",
            "--role=deployer",
            &format!("--serviceaccount={ns}:deployer"),
            "-n",
            &ns,
        ],
        vec![
            "create",
            "rolebinding",
            "deployer-jobs",
            "--role=deployer-jobs",
            &format!("--serviceaccount={ns}:deployer"),
            "-n",
            &ns,
        ],
    ] {
        let out = f.env.kubectl(&args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    f.patch_spec(json!({"serviceAccountName": "deployer"}))
        .await;
}

/// "Prune | Syncing | PruneFailed | yes", and syncFailed hooks are armed on it.
#[tokio::test]
async fn a_prune_that_fails_is_prune_failed_retried_and_arms_sync_failed() {
    let f = Fixture::new(
        "stop-prune",
        &[
            ("a.yaml", &config_map("a", 0, "1")),
            ("b.yaml", &config_map("b", 0, "1")),
        ],
        json!({"lifecycle": {"hooks": [hook("notify", "syncFailed", job())]}}),
    )
    .await;
    assert_eq!(stop(&f.sync().await).0, Reason::Applied);
    without_delete(&f).await;
    f.commit(&[("a.yaml", &config_map("a", 0, "1"))]);
    let result = f.sync().await;
    assert_eq!(
        stop(&result),
        (
            Reason::PruneFailed,
            Some(FailureStage::Syncing.to_string()),
            true
        )
    );
    assert!(f.config_map("b").await.is_some());
    assert_eq!(jobs_of(&f, "notify").await.len(), 1, "syncFailed armed");
}

/// "Start postSync hooks: error | Syncing | DeployFailed | yes".
#[tokio::test]
async fn a_post_sync_hook_that_cannot_start_is_deploy_failed_and_retried() {
    // The API server refuses a Job whose pods restart Always.
    let bad = json!({"template": {"spec": {"restartPolicy": "Always",
        "containers": [{"name": "x", "image": "busybox"}]}}});
    let f = Fixture::new(
        "stop-postsync",
        &[("a.yaml", &config_map("a", 0, "1"))],
        json!({"lifecycle": {"hooks": [hook("smoke", "postSync", bad)]}}),
    )
    .await;
    let result = f.sync().await;
    assert_eq!(
        stop(&result),
        (
            Reason::DeployFailed,
            Some(FailureStage::Syncing.to_string()),
            true
        )
    );
    assert!(f.config_map("a").await.is_some(), "the render was applied");
}

/// "Sync wave: timeout" with syncFailed hooks: they are armed on the wave failure.
#[tokio::test]
async fn a_wave_failure_arms_the_sync_failed_hooks() {
    let stuck = deployment("web", 0, 1).replace(
        "    spec:\n      containers:",
        "    spec:\n      nodeSelector: {convoy-test: nowhere}\n      containers:",
    );
    let mut spec = Fixture::default_health("1m");
    json_patch::merge(
        &mut spec,
        &json!({"syncPolicy": {"waves": {"waitForHealth": true, "timeout": "2s"}},
                "lifecycle": {"hooks": [hook("notify", "syncFailed", job())]}}),
    );
    let f = Fixture::new(
        "stop-wave-syncfailed",
        &[
            ("d.yaml", &stuck),
            ("cm.yaml", &config_map("after", 1, "x")),
        ],
        spec,
    )
    .await;
    f.install_default_rules().await;
    let failed = eventually("the wave to fail", Duration::from_secs(30), || async {
        let result = f.sync().await;
        (stop(&result).0 == Reason::WaveFailed).then_some(result)
    })
    .await;
    assert!(!stop(&failed).2, "a wave timeout is not retried");
    assert_eq!(jobs_of(&f, "notify").await.len(), 1);
}

// --- reconcile-flow.txt "finalize" ----------------------------------------------------------

/// finalize step 2: "A hook that runs or fails requeues the key after 10 seconds" — a failed
/// preDelete hook holds the deletion: nothing is pruned, the finalizer stays.
#[tokio::test]
async fn a_failing_pre_delete_hook_holds_the_deletion() {
    let f = Fixture::new(
        "delete-predelete-fails",
        &[("a.yaml", &config_map("a", 0, "1"))],
        json!({"lifecycle": {"hooks": [hook("drain", "preDelete", failing_job())]}}),
    )
    .await;
    assert_eq!(stop(&f.sync().await).0, Reason::Applied);
    f.releases()
        .delete("web", &Default::default())
        .await
        .unwrap();
    let inventories: Api<ReleaseInventory> =
        Api::namespaced(f.env.client.clone(), &f.env.namespace);
    let memory = HealthMemory::default();
    eventually(
        "the preDelete hook to fail",
        Duration::from_secs(60),
        || async {
            let release = f.release().await;
            let _ = health_pass(&f.ctx, &memory, &release).await;
            let result = sync_handler(&f.ctx, &f.release().await, 0).await.unwrap();
            assert_eq!(result.requeue, Requeue::After(Duration::from_secs(10)));
            let inv = inventories.get("web").await.ok()?;
            let state = inv
                .spec
                .hooks
                .iter()
                .find(|h| h.phase == HookPhase::PreDelete)?
                .state;
            (state == Some(HookState::Failed)).then_some(())
        },
    )
    .await;
    // Failed: the deletion still waits, and nothing was pruned.
    let result = sync_handler(&f.ctx, &f.release().await, 0).await.unwrap();
    assert_eq!(result.requeue, Requeue::After(Duration::from_secs(10)));
    let release = f.release().await;
    assert!(
        release
            .metadata
            .finalizers
            .unwrap_or_default()
            .iter()
            .any(|x| x == convoy::engine::api::FINALIZER)
    );
    assert!(f.config_map("a").await.is_some());
}

/// finalize step 4: "A failed hook is only logged" — the deletion goes on after a failed
/// postDelete hook.
#[tokio::test]
async fn a_failing_post_delete_hook_is_logged_and_the_deletion_goes_on() {
    let f = Fixture::new(
        "delete-postdelete-fails",
        &[("a.yaml", &config_map("a", 0, "1"))],
        json!({"lifecycle": {"hooks": [hook("cleanup", "postDelete", failing_job())]}}),
    )
    .await;
    assert_eq!(stop(&f.sync().await).0, Reason::Applied);
    f.releases()
        .delete("web", &Default::default())
        .await
        .unwrap();
    let memory = HealthMemory::default();
    eventually("the Release gone", Duration::from_secs(60), || async {
        let Some(release) = f.releases().get_opt("web").await.unwrap() else {
            return Some(());
        };
        let _ = health_pass(&f.ctx, &memory, &release).await;
        if let Some(release) = f.releases().get_opt("web").await.unwrap() {
            let _ = sync_handler(&f.ctx, &release, 0).await.unwrap();
        }
        None
    })
    .await;
    assert_eq!(f.config_map("a").await, None, "pruned");
}

// --- reconcile-flow.txt step 6 and the lifecycle rollup --------------------------------------

/// Removing every hook from the spec clears `status.lifecycle` and `LifecycleSucceeded`.
#[tokio::test]
async fn removing_the_hooks_clears_the_lifecycle_status_and_its_condition() {
    let f = Fixture::new(
        "lifecycle-cleared",
        &[("a.yaml", &config_map("a", 0, "1"))],
        json!({"lifecycle": {"hooks": [hook("smoke", "postSync", job())]}}),
    )
    .await;
    f.sync().await;
    let release = f.release().await;
    assert!(release.status.as_ref().unwrap().lifecycle.is_some());
    assert!(condition_of(&release, condition_types::LIFECYCLE_SUCCEEDED).is_some());
    f.patch_spec(json!({"lifecycle": null})).await;
    f.sync().await;
    let release = f.release().await;
    assert_eq!(release.status.as_ref().unwrap().lifecycle, None);
    assert_eq!(
        condition_of(&release, condition_types::LIFECYCLE_SUCCEEDED),
        None
    );
}

/// reconcile-flow.txt: "An error from the status write, from ensureFinalizer or from
/// applyLifecycleRollup is returned directly. The work queue retries it."
#[tokio::test]
async fn status_write_and_finalizer_errors_go_back_to_the_work_queue() {
    let f = Fixture::new(
        "errors-to-queue",
        &[("a.yaml", &config_map("a", 0, "1"))],
        json!({}),
    )
    .await;
    // ensureFinalizer's Update is refused.
    refuse(
        &f,
        "no-release-update",
        "core.convoy.kumodo.io",
        &["releases"],
        &["UPDATE"],
        "false",
    )
    .await;
    in_force(
        &f,
        &["annotate", "release", "web", "probe=1", "--overwrite"],
    )
    .await;
    let err = sync_handler(&f.ctx, &f.release().await, 0)
        .await
        .unwrap_err();
    assert!(
        format!("{err:#}").contains("cannot update the finalizer of Release"),
        "{err:#}"
    );
    let out = f.env.kubectl(&[
        "delete",
        "validatingadmissionpolicybinding",
        &format!("no-release-update-{}", f.env.namespace),
    ]);
    assert!(out.status.success());
    // The status write is refused.
    refuse(
        &f,
        "no-status",
        "core.convoy.kumodo.io",
        &["releases/status"],
        &["UPDATE"],
        "false",
    )
    .await;
    in_force(
        &f,
        &[
            "patch",
            "release",
            "web",
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"reconciledAt":"2026-01-01T00:00:00Z"}}"#,
        ],
    )
    .await;
    let err = sync_handler(&f.ctx, &f.release().await, 0)
        .await
        .unwrap_err();
    assert!(
        format!("{err:#}").contains("cannot write the status of Release"),
        "{err:#}"
    );
}

/// The rollup reads the ReleaseInventory; when it cannot, the error goes to the work queue.
#[tokio::test]
async fn a_rollup_that_cannot_read_the_inventory_goes_back_to_the_work_queue() {
    let f = Fixture::new(
        "rollup-error",
        &[("a.yaml", &config_map("a", 0, "1"))],
        json!({"syncPolicy": {"mode": "Manual"}, "lifecycle": {"hooks": [hook("smoke", "postSync", job())]}}),
    )
    .await;
    // A controller identity that may read and write Releases but not read inventories.
    let ns = f.env.namespace.clone();
    for args in [
        vec!["create", "serviceaccount", "blind", "-n", &ns],
        vec![
            "create",
            "role",
            "blind",
            "--verb=get,list,watch,update,patch",
            "--resource=releases.core.convoy.kumodo.io,releases.core.convoy.kumodo.io/status,gitrepositories.source.convoy.kumodo.io",
            "-n",
            &ns,
        ],
        vec![
            "create",
            "rolebinding",
            "blind",
            "--role=blind",
            &format!("--serviceaccount={ns}:blind"),
            "-n",
            &ns,
        ],
    ] {
        let out = f.env.kubectl(&args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let kubeconfig = f.env.service_account_kubeconfig(&ns, "blind");
    let conn = convoy::engine::connect::Connection::from_source(
        &convoy::engine::connect::KubeconfigSource {
            path: Some(kubeconfig.path().to_path_buf()),
            context: None,
        },
    )
    .await
    .unwrap();
    let cache = tempfile::tempdir().unwrap();
    let ctx = convoy::engine::runtime::Context::new(
        conn,
        Arc::new(convoy::engine::source::Coordinator::new(
            convoy::engine::source::Cache::new(cache.path()),
        )),
    );
    // Manual mode without /sync stops before anything reads the inventory; the rollup does.
    let err = sync_handler(&ctx, &f.release().await, 0).await.unwrap_err();
    assert!(
        format!("{err:#}").contains("cannot roll up the lifecycle hooks of Release"),
        "{err:#}"
    );
}

// --- status-ownership.txt ---------------------------------------------------------------------

/// "writeInSync and writeHealth keep lastTransitionTime while the condition status stays the
/// same"; and "No Ready condition": after every loop has written, there is none.
#[tokio::test]
async fn in_sync_and_healthy_keep_their_transition_time_and_no_ready_condition_appears() {
    let f = Fixture::new(
        "transition-times",
        &[("a.yaml", &config_map("a", 0, "1"))],
        json!({}),
    )
    .await;
    f.sync().await;
    let memory = HealthMemory::default();
    health_pass(&f.ctx, &memory, &f.release().await)
        .await
        .unwrap();
    drift_pass(&f.ctx, &f.release().await).await.unwrap();
    let before = f.release().await;
    let healthy = condition_of(&before, condition_types::HEALTHY).unwrap();
    let in_sync = condition_of(&before, condition_types::IN_SYNC).unwrap();
    assert_eq!(
        (healthy.status.as_str(), in_sync.status.as_str()),
        ("True", "True")
    );

    // A second object: both messages change ("2 objects"), neither status does.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    f.commit(&[
        ("a.yaml", &config_map("a", 0, "1")),
        ("b.yaml", &config_map("b", 0, "1")),
    ]);
    f.sync().await;
    health_pass(&f.ctx, &memory, &f.release().await)
        .await
        .unwrap();
    drift_pass(&f.ctx, &f.release().await).await.unwrap();
    let after = f.release().await;
    let healthy_after = condition_of(&after, condition_types::HEALTHY).unwrap();
    let in_sync_after = condition_of(&after, condition_types::IN_SYNC).unwrap();
    assert_ne!(healthy_after.message, healthy.message);
    assert_ne!(in_sync_after.message, in_sync.message);
    assert_eq!(
        healthy_after.last_transition_time,
        healthy.last_transition_time
    );
    assert_eq!(
        in_sync_after.last_transition_time,
        in_sync.last_transition_time
    );
    let types: Vec<String> = after
        .status
        .unwrap()
        .conditions
        .iter()
        .map(|c| c.type_.clone())
        .collect();
    assert!(!types.iter().any(|t| t == "Ready"), "{types:?}");
    assert_eq!(types.len(), 3, "Applied, InSync, Healthy: {types:?}");
}

/// "The drift loop uses the same field manager as the apply": an admission policy that lets
/// only convoy-release dry-run ConfigMaps here lets the drift loop's dry run through.
#[tokio::test]
async fn the_drift_dry_run_runs_under_the_controllers_manager() {
    let f = Fixture::new(
        "drift-manager",
        &[("a.yaml", &config_map("a", 0, "1"))],
        json!({}),
    )
    .await;
    f.sync().await;
    f.kubectl_apply(&json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "a", "namespace": f.env.namespace}, "data": {"value": "tampered"}}))
        .await;
    refuse(
        &f,
        "dry-runs-as-release",
        "",
        &["configmaps"],
        &["CREATE", "UPDATE"],
        "!has(request.options) || !has(request.options.fieldManager) || request.options.fieldManager == 'convoy-release'",
    )
    .await;
    // The policy is in force: a dry run under another manager is refused.
    let probe = serde_json::to_string(&json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "a", "namespace": f.env.namespace}, "data": {"value": "x"}}))
    .unwrap();
    eventually("the policy in force", Duration::from_secs(30), || async {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), &probe).unwrap();
        let out = f.env.kubectl(&[
            "apply",
            "--server-side",
            "--force-conflicts",
            "--dry-run=server",
            "--field-manager=someone-else",
            "-f",
            file.path().to_str().unwrap(),
        ]);
        String::from_utf8_lossy(&out.stderr)
            .contains("refused by the test")
            .then_some(())
    })
    .await;
    let pass = drift_pass(&f.ctx, &f.release().await)
        .await
        .unwrap()
        .unwrap();
    match &pass.verdict {
        Verdict::OutOfSync { message } => {
            assert!(message.contains("(drift by test-user)"), "{message}")
        }
        other => panic!("the dry run should pass the policy and find the drift: {other:?}"),
    }
}

// --- health-loop.txt "Wake the controller", "Writes", "Re-check backoff" ----------------------

/// "Render advanced. The assessment reached a render that the controller applied after the
/// previous pass": the pass after a new apply wakes the controller; a steady pass does not.
/// In automatic mode the wake is the pass's own write of assessedRenderRef, which the
/// controller's inventory watch wakes on (README "Deviations": no /sync on top of it).
#[tokio::test]
async fn the_pass_after_a_new_render_is_applied_wakes_the_controller() {
    let f = Fixture::new(
        "edge-render-advanced",
        &[("a.yaml", &config_map("a", 0, "1"))],
        json!({}),
    )
    .await;
    f.sync().await;
    let memory = HealthMemory::default();
    health_pass(&f.ctx, &memory, &f.release().await)
        .await
        .unwrap();
    let steady = health_pass(&f.ctx, &memory, &f.release().await)
        .await
        .unwrap()
        .unwrap();
    assert!(steady.edges.is_empty(), "{:?}", steady.edges);
    assert!(!steady.requested_sync);
    f.commit(&[("a.yaml", &config_map("a", 0, "2"))]);
    f.sync().await;
    let inventories: Api<ReleaseInventory> =
        Api::namespaced(f.env.client.clone(), &f.env.namespace);
    let before = inventories.get("web").await.unwrap();
    let advanced = health_pass(&f.ctx, &memory, &f.release().await)
        .await
        .unwrap()
        .unwrap();
    assert!(
        advanced.edges.contains(&"render advanced"),
        "{:?}",
        advanced.edges
    );
    let after = inventories.get("web").await.unwrap();
    assert_ne!(
        before.spec.inventory[0].assessed_render_ref,
        after.spec.inventory[0].assessed_render_ref
    );
    assert!(
        convoy::engine::api::health_fields_changed(&before, &after),
        "the write the controller's inventory watch wakes on"
    );
    assert!(!advanced.requested_sync, "no second wake by /sync");
    let annotations = f.release().await.metadata.annotations.unwrap_or_default();
    assert!(
        !annotations.contains_key("convoy.kumodo.io/sync-requested-at"),
        "{annotations:?}"
    );
}

/// The same edge in manual mode sends /sync: without a pending request the controller's
/// manual gate would hold the render the edge is about.
#[tokio::test]
async fn in_manual_mode_the_edge_sends_a_sync() {
    let f = Fixture::new(
        "edge-render-advanced-manual",
        &[("a.yaml", &config_map("a", 0, "1"))],
        json!({"syncPolicy": {"mode": "Manual"}}),
    )
    .await;
    f.annotate(json!({"convoy.kumodo.io/sync-requested-at": "2026-01-01T00:00:00Z"}))
        .await;
    f.sync().await;
    let memory = HealthMemory::default();
    let first = health_pass(&f.ctx, &memory, &f.release().await)
        .await
        .unwrap()
        .unwrap();
    assert!(
        first.edges.contains(&"render advanced"),
        "{:?}",
        first.edges
    );
    assert!(first.requested_sync);
    let requested =
        f.release().await.metadata.annotations.unwrap()["convoy.kumodo.io/sync-requested-at"]
            .clone();
    assert_ne!(requested, "2026-01-01T00:00:00Z");
}

/// Healthy is Pending while the entries carry two renders (a rollout between its waves), and
/// the pass comes back after progressBackoff's first step (2 s, up to 20 % jitter), then the
/// second (4 s) for the same pending targets.
#[tokio::test]
async fn healthy_is_pending_between_waves_and_rechecks_on_the_backoff() {
    let stuck = deployment("api", 0, 1).replace(
        "    spec:\n      containers:",
        "    spec:\n      nodeSelector: {convoy-test: nowhere}\n      containers:",
    );
    let mut spec = Fixture::default_health("10m");
    json_patch::merge(
        &mut spec,
        &json!({"syncPolicy": {"waves": {"waitForHealth": true}}}),
    );
    let f = Fixture::new(
        "pending-between-waves",
        &[
            ("a.yaml", &config_map("first", 0, "1")),
            ("b.yaml", &config_map("second", 1, "1")),
        ],
        spec,
    )
    .await;
    f.install_default_rules().await;
    let memory = HealthMemory::default();
    eventually(
        "the first render applied",
        Duration::from_secs(60),
        || async {
            let _ = health_pass(&f.ctx, &memory, &f.release().await).await;
            (stop(&f.sync().await).0 == Reason::Applied).then_some(())
        },
    )
    .await;
    // The next render changes both waves; wave 0 never becomes healthy.
    f.commit(&[
        ("a.yaml", &config_map("first", 0, "2")),
        ("d.yaml", &stuck),
        ("b.yaml", &config_map("second", 1, "2")),
    ]);
    assert_eq!(stop(&f.sync().await).0, Reason::WaitingForWaveHealth);
    let memory = HealthMemory::default();
    let first = health_pass(&f.ctx, &memory, &f.release().await)
        .await
        .unwrap()
        .unwrap();
    let condition = first.condition.unwrap();
    assert_eq!(
        (condition.status.as_str(), condition.reason.as_str()),
        ("Unknown", "Pending")
    );
    assert!(
        condition
            .message
            .ends_with("is not applied and assessed yet"),
        "{}",
        condition.message
    );
    let within = |requeue: &Requeue, low: f64| match requeue {
        Requeue::After(d) => d.as_secs_f64() >= low && d.as_secs_f64() <= low * 1.2 + 0.01,
        _ => false,
    };
    assert!(within(&first.requeue, 2.0), "{:?}", first.requeue);
    let second = health_pass(&f.ctx, &memory, &f.release().await)
        .await
        .unwrap()
        .unwrap();
    assert!(within(&second.requeue, 4.0), "{:?}", second.requeue);
}

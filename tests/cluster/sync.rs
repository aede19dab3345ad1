//! The Release controller's reconcile against the real API server.

use std::time::Duration;

use convoy::engine::api::{Reason, ReleaseInventory, field_managers};
use convoy::engine::ssa;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::json;

use crate::support::fixture::{Fixture, config_map, deployment};
use crate::support::{eventually, owners_of};

#[tokio::test]
async fn the_first_sync_applies_the_render_as_convoy_release() {
    let f = Fixture::new(
        "sync-first",
        &[
            ("cm.yaml", &config_map("settings", 0, "one")),
            ("deploy.yaml", &deployment("api", 1, 1)),
        ],
        json!({}),
    )
    .await;
    let result = f.sync().await;
    let outcome = result.outcome.unwrap();
    assert_eq!(outcome.reason, Reason::Applied, "{}", outcome.message);
    assert!(result.wrote_status);

    let cm = f
        .config_map("settings")
        .await
        .expect("the ConfigMap is applied");
    assert_eq!(cm["data"]["value"], "one");
    let data_owner = owners_of(&cm, &["f:data", "f:value"]);
    assert_eq!(data_owner, ["convoy-release"]);
    let entry = cm["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["manager"] == "convoy-release")
        .unwrap();
    assert_eq!(entry["operation"], "Apply");

    let release = f.release().await;
    let status = release.status.unwrap();
    let applied = status.condition("Applied").unwrap();
    assert_eq!(
        (applied.status.as_str(), applied.reason.as_str()),
        ("True", "Applied")
    );
    assert_eq!(applied.observed_generation, release.metadata.generation);
    let attempted = status.last_attempted.unwrap();
    assert_eq!(
        attempted.phase,
        Some(convoy::engine::api::AttemptPhase::Succeeded)
    );
    assert_eq!(
        status.last_successful.unwrap().render_ref,
        attempted.render_ref
    );
    assert!(
        attempted
            .resolved_source
            .unwrap()
            .revision
            .unwrap()
            .starts_with("main@sha1:")
    );
    assert_eq!(status.waves.len(), 2);
    assert!(
        release
            .metadata
            .finalizers
            .unwrap()
            .contains(&convoy::engine::api::FINALIZER.to_string())
    );

    let inventories: Api<ReleaseInventory> =
        Api::namespaced(f.env.client.clone(), &f.env.namespace);
    let inventory = inventories.get("web").await.unwrap();
    let mut entries: Vec<(String, String, Option<i32>)> = inventory
        .spec
        .inventory
        .iter()
        .map(|e| (e.kind.clone(), e.name.clone(), e.wave))
        .collect();
    entries.sort();
    assert_eq!(
        entries,
        [
            ("ConfigMap".into(), "settings".into(), Some(0)),
            ("Deployment".into(), "api".into(), Some(1))
        ]
    );
}

#[tokio::test]
async fn an_object_dropped_from_the_render_is_pruned_but_a_lookalike_is_not() {
    let f = Fixture::new(
        "sync-prune",
        &[
            ("a.yaml", &config_map("keep", 0, "1")),
            ("b.yaml", &config_map("drop", 1, "1")),
        ],
        json!({}),
    )
    .await;
    assert_eq!(f.sync().await.outcome.unwrap().reason, Reason::Applied);
    // Someone else's ConfigMap with the same labels, never in the render.
    let cms: Api<ConfigMap> = Api::namespaced(f.env.client.clone(), &f.env.namespace);
    let lookalike: ConfigMap = serde_json::from_value(
        json!({"metadata": {"name": "lookalike", "labels": {"app": "demo"}}}),
    )
    .unwrap();
    cms.create(&PostParams::default(), &lookalike)
        .await
        .unwrap();

    f.commit(&[("a.yaml", &config_map("keep", 0, "2"))]);
    let outcome = f.sync().await.outcome.unwrap();
    assert_eq!(outcome.reason, Reason::Applied, "{}", outcome.message);
    assert!(outcome.message.contains("1 pruned"), "{}", outcome.message);
    assert!(
        f.config_map("drop").await.is_none(),
        "the dropped object is pruned"
    );
    assert!(
        f.config_map("lookalike").await.is_some(),
        "nothing outside the inventory is pruned"
    );
    assert_eq!(f.config_map("keep").await.unwrap()["data"]["value"], "2");
    let inventories: Api<ReleaseInventory> =
        Api::namespaced(f.env.client.clone(), &f.env.namespace);
    let names: Vec<String> = inventories
        .get("web")
        .await
        .unwrap()
        .spec
        .inventory
        .iter()
        .map(|e| e.name.clone())
        .collect();
    assert_eq!(names, ["keep"]);
}

#[tokio::test]
async fn a_server_rejected_object_stops_the_sync_before_anything_is_applied() {
    let bad =
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: Not_A_Valid_Name\ndata: {a: b}\n";
    let f = Fixture::new(
        "sync-unappliable",
        &[
            ("good.yaml", &config_map("good", 0, "1")),
            ("bad.yaml", bad),
        ],
        json!({}),
    )
    .await;
    let result = f.sync().await;
    let outcome = result.outcome.unwrap();
    assert_eq!(outcome.reason, Reason::Unappliable);
    assert!(
        outcome.message.contains("ConfigMap/"),
        "the object is named: {}",
        outcome.message
    );
    assert!(
        outcome.message.contains("Not_A_Valid_Name"),
        "{}",
        outcome.message
    );
    assert!(!outcome.retry, "a rejection is not retried with backoff");
    assert_eq!(result.error, None, "no error is returned");
    assert!(f.config_map("good").await.is_none(), "nothing is applied");
    // The first wave's intent, recorded while the dry run ran, is withdrawn: a Release that
    // never applied anything has no inventory.
    let inventories: Api<ReleaseInventory> =
        Api::namespaced(f.env.client.clone(), &f.env.namespace);
    assert!(inventories.get_opt("web").await.unwrap().is_none());
    let status = f.release().await.status.unwrap();
    let failure = status.last_attempted.clone().unwrap().failure.unwrap();
    assert_eq!(failure.stage, "Syncing");
    assert_eq!(
        status.condition("Applied").unwrap().status.as_str(),
        "False"
    );
}

#[tokio::test]
async fn a_forced_sync_skips_the_dry_run_gate() {
    let bad =
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: Not_A_Valid_Name\ndata: {a: b}\n";
    let f = Fixture::new(
        "sync-force",
        &[
            ("good.yaml", &config_map("good", 0, "1")),
            ("bad.yaml", bad),
        ],
        json!({}),
    )
    .await;
    f.annotate(json!({
        "convoy.kumodo.io/sync-requested-at": "2026-01-01T00:00:00Z",
        "convoy.kumodo.io/force-sync-requested-at": "2026-01-01T00:00:00Z",
    }))
    .await;
    let outcome = f.sync().await.outcome.unwrap();
    assert_eq!(
        outcome.reason,
        Reason::DeployFailed,
        "the apply ran and failed on the bad object: {}",
        outcome.message
    );
    assert!(
        f.config_map("good").await.is_some(),
        "without the gate, the good object was applied"
    );
    let status = f.release().await.status.unwrap();
    assert_eq!(
        status.last_handled_force_sync_at.as_deref(),
        Some("2026-01-01T00:00:00Z")
    );
}

#[tokio::test]
async fn manual_mode_waits_for_a_sync_request() {
    let f = Fixture::new(
        "sync-manual",
        &[("a.yaml", &config_map("a", 0, "1"))],
        json!({"syncPolicy": {"mode": "Manual"}}),
    )
    .await;
    let outcome = f.sync().await.outcome.unwrap();
    assert_eq!(outcome.reason, Reason::WaitingForSync);
    assert!(f.config_map("a").await.is_none());
    let status = f.release().await.status.unwrap();
    assert_eq!(
        status.last_attempted.as_ref().unwrap().phase,
        None,
        "a hold has no phase"
    );
    assert_eq!(status.last_handled_sync_at, None);

    f.annotate(json!({"convoy.kumodo.io/sync-requested-at": "2026-01-01T00:00:01Z"}))
        .await;
    let outcome = f.sync().await.outcome.unwrap();
    assert_eq!(outcome.reason, Reason::Applied, "{}", outcome.message);
    assert!(f.config_map("a").await.is_some());
    let status = f.release().await.status.unwrap();
    assert_eq!(
        status.last_handled_sync_at.as_deref(),
        Some("2026-01-01T00:00:01Z")
    );

    // The request is handled: the next pass holds with Applied (render unchanged).
    let outcome = f.sync().await.outcome.unwrap();
    assert_eq!(outcome.reason, Reason::Applied);
    assert_eq!(outcome.applied_status().as_str(), "True");
    assert!(!outcome.applied_render);
}

#[tokio::test]
async fn a_failed_manual_sync_does_not_mark_the_request_handled() {
    let bad = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: Bad_Name\n";
    let f = Fixture::new(
        "sync-manual-fail",
        &[("a.yaml", bad)],
        json!({"syncPolicy": {"mode": "Manual"}}),
    )
    .await;
    f.annotate(json!({"convoy.kumodo.io/sync-requested-at": "2026-01-01T00:00:01Z"}))
        .await;
    assert_eq!(f.sync().await.outcome.unwrap().reason, Reason::Unappliable);
    assert_eq!(f.release().await.status.unwrap().last_handled_sync_at, None);
}

#[tokio::test]
async fn waves_are_applied_in_order() {
    let f = Fixture::new(
        "sync-waves",
        &[
            ("z.yaml", &config_map("first", -1, "1")),
            ("y.yaml", &deployment("second", 0, 1)),
            ("x.yaml", &config_map("third", 5, "1")),
        ],
        json!({}),
    )
    .await;
    // Watch creations in the namespace while the sync runs; start syncing once both watches
    // have listed.
    let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let cms: Api<ConfigMap> = Api::namespaced(f.env.client.clone(), &f.env.namespace);
    let deployments: Api<Deployment> = Api::namespaced(f.env.client.clone(), &f.env.namespace);
    let (w1, ready1) = record_creations(cms, order.clone());
    let (w2, ready2) = record_creations(deployments, order.clone());
    ready1.await.unwrap();
    ready2.await.unwrap();
    assert_eq!(f.sync().await.outcome.unwrap().reason, Reason::Applied);
    crate::support::eventually("three creations", Duration::from_secs(10), || {
        let order = order.clone();
        async move { (order.lock().unwrap().len() >= 3).then_some(()) }
    })
    .await;
    w1.abort();
    w2.abort();
    let seen: Vec<String> = order.lock().unwrap().iter().take(3).cloned().collect();
    assert_eq!(seen, ["first", "second", "third"]);
}

#[tokio::test]
async fn conditions_of_other_writers_survive_controller_writes() {
    let f = Fixture::new(
        "sync-owners",
        &[("a.yaml", &config_map("a", 0, "1"))],
        json!({}),
    )
    .await;
    f.sync().await;
    let api = f.releases();
    let patch = |t: &str, reason: &str| {
        json!({"apiVersion": "core.convoy.kumodo.io/v1alpha1", "kind": "Release", "metadata": {"name": "web"},
               "status": {"conditions": [{"type": t, "status": "True", "reason": reason, "message": "",
                                          "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1}]}})
    };
    ssa::apply_status(
        &api,
        "web",
        field_managers::OBSERVE,
        &patch("InSync", "InSync"),
    )
    .await
    .unwrap();
    ssa::apply_status(
        &api,
        "web",
        field_managers::HEALTH,
        &patch("Healthy", "Healthy"),
    )
    .await
    .unwrap();
    f.commit(&[("a.yaml", &config_map("a", 0, "2"))]);
    let result = f.sync().await;
    assert!(result.wrote_status);
    let release = f.release().await;
    let status = release.status.clone().unwrap();
    assert_eq!(status.condition("InSync").unwrap().reason, "InSync");
    assert_eq!(status.condition("Healthy").unwrap().reason, "Healthy");
    let object = serde_json::to_value(&release).unwrap();
    let owner = |t: &str| {
        owners_of(
            &object,
            &[
                "f:status",
                "f:conditions",
                &format!("k:{{\"type\":\"{t}\"}}"),
                "f:status",
            ],
        )
    };
    assert_eq!(owner("Applied"), ["convoy-release"]);
    assert_eq!(owner("InSync"), ["convoy-observe"]);
    assert_eq!(owner("Healthy"), ["convoy-health"]);
}

#[tokio::test]
async fn an_unchanged_status_is_not_written() {
    let f = Fixture::new(
        "sync-quiet",
        &[("a.yaml", &config_map("a", 0, "1"))],
        json!({}),
    )
    .await;
    assert!(f.sync().await.wrote_status);
    let before = f.release().await;
    let second = f.sync().await;
    assert_eq!(second.outcome.unwrap().reason, Reason::Applied);
    assert!(!second.wrote_status);
    let after = f.release().await;
    assert_eq!(
        after.metadata.resource_version,
        before.metadata.resource_version
    );
    assert_eq!(
        after.status.unwrap().reconciled_at,
        before.status.unwrap().reconciled_at,
        "reconciledAt changes only on a write"
    );
}

#[tokio::test]
async fn a_pin_shows_in_status_and_an_unpin_clears_it() {
    let f = Fixture::new(
        "sync-pin",
        &[("a.yaml", &config_map("a", 0, "1"))],
        json!({}),
    )
    .await;
    f.sync().await;
    f.annotate(json!({"convoy.kumodo.io/pin": "0123456789ab"}))
        .await;
    let outcome = f.sync().await.outcome.unwrap();
    assert_eq!(outcome.reason, Reason::Pinned);
    assert_eq!(
        f.release().await.status.unwrap().pin.unwrap().render_ref,
        "0123456789ab"
    );
    f.annotate(json!({"convoy.kumodo.io/pin": null})).await;
    assert_eq!(f.sync().await.outcome.unwrap().reason, Reason::Applied);
    assert_eq!(
        f.release().await.status.unwrap().pin,
        None,
        "the unpin cleared status.pin"
    );
}

#[tokio::test]
async fn unknown_kinds_and_namespaceless_objects_fail_the_dry_run_and_keep_the_inventory() {
    let f = Fixture::new(
        "sync-bad-input",
        &[("a.yaml", &config_map("a", 0, "1"))],
        json!({}),
    )
    .await;
    assert_eq!(f.sync().await.outcome.unwrap().reason, Reason::Applied);
    let widget = "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\n";
    let nokind = "apiVersion: v1\nkind: Gizmo\nmetadata: {name: g}\n";
    f.commit(&[
        ("a.yaml", &config_map("a", 0, "2")),
        ("w.yaml", widget),
        ("g.yaml", nokind),
    ]);
    let outcome = f.sync().await.outcome.unwrap();
    assert_eq!(outcome.reason, Reason::Unappliable);
    assert!(
        outcome.message.contains("Widget.example.com/"),
        "{}",
        outcome.message
    );
    assert!(outcome.message.contains("Gizmo/"), "{}", outcome.message);
    assert_eq!(
        f.config_map("a").await.unwrap()["data"]["value"],
        "1",
        "nothing applied"
    );
    let inventories: Api<ReleaseInventory> =
        Api::namespaced(f.env.client.clone(), &f.env.namespace);
    let inventory = inventories.get("web").await.unwrap();
    let names: Vec<&str> = inventory
        .spec
        .inventory
        .iter()
        .map(|e| e.name.as_str())
        .collect();
    assert_eq!(names, ["a"], "the previous inventory is intact");
    assert!(
        inventory.spec.pending.is_empty(),
        "the intent recorded during the dry run is withdrawn: {:?}",
        inventory.spec.pending
    );
    // The same render again (an interval pass of a Release held at Unappliable): the dry run
    // rejects it again and the inventory is not written at all.
    assert_eq!(f.sync().await.outcome.unwrap().reason, Reason::Unappliable);
    let again = inventories.get("web").await.unwrap();
    assert_eq!(
        again.metadata.resource_version, inventory.metadata.resource_version,
        "a render rejected before is dry-run again without an inventory write"
    );

    // Without targetNamespace a namespaced object without a namespace cannot be applied.
    f.commit(&[("a.yaml", &config_map("a", 0, "3"))]);
    f.patch_spec(json!({"targetNamespace": null})).await;
    let outcome = f.sync().await.outcome.unwrap();
    assert_eq!(outcome.reason, Reason::Unappliable);
    assert!(
        outcome
            .message
            .contains("ConfigMap/a: is namespaced but names no namespace"),
        "{}",
        outcome.message
    );
}

#[tokio::test]
async fn deleting_a_release_prunes_and_removes_the_finalizer() {
    let f = Fixture::new(
        "sync-delete",
        &[("a.yaml", &config_map("a", 0, "1"))],
        json!({}),
    )
    .await;
    f.sync().await;
    assert!(f.config_map("a").await.is_some());
    f.releases()
        .delete("web", &Default::default())
        .await
        .unwrap();
    let release = f.release().await;
    assert!(
        release.metadata.deletion_timestamp.is_some(),
        "the finalizer holds the Release"
    );
    let result = convoy::engine::reconcile::sync_handler(&f.ctx, &release, 0)
        .await
        .unwrap();
    assert_eq!(result.outcome, None);
    assert!(f.config_map("a").await.is_none(), "pruned");
    assert!(
        f.releases().get_opt("web").await.unwrap().is_none(),
        "the finalizer is gone, so is the Release"
    );
    let inventories: Api<ReleaseInventory> =
        Api::namespaced(f.env.client.clone(), &f.env.namespace);
    assert!(inventories.get_opt("web").await.unwrap().is_none());
}

#[tokio::test]
async fn keep_workloads_leaves_the_objects_when_the_release_goes() {
    let f = Fixture::new(
        "sync-keep",
        &[("a.yaml", &config_map("a", 0, "1"))],
        json!({"deletionPolicy": {"keepWorkloads": true}}),
    )
    .await;
    f.sync().await;
    f.releases()
        .delete("web", &Default::default())
        .await
        .unwrap();
    let release = f.release().await;
    convoy::engine::reconcile::sync_handler(&f.ctx, &release, 0)
        .await
        .unwrap();
    assert!(f.releases().get_opt("web").await.unwrap().is_none());
    assert!(f.config_map("a").await.is_some(), "kept");
}

/// Record the names of objects created after the initial list; the receiver fires once the
/// watch has listed.
fn record_creations<K>(
    api: Api<K>,
    order: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
) -> (
    tokio::task::JoinHandle<()>,
    tokio::sync::oneshot::Receiver<()>,
)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let (tx, rx) = tokio::sync::oneshot::channel();
    let handle = tokio::spawn(async move {
        let mut tx = Some(tx);
        let mut stream = std::pin::pin!(kube::runtime::watcher(api, Default::default()));
        while let Some(event) = stream.next().await {
            match event {
                Ok(kube::runtime::watcher::Event::InitDone) => {
                    if let Some(tx) = tx.take() {
                        let _ = tx.send(());
                    }
                }
                Ok(kube::runtime::watcher::Event::Apply(object)) => {
                    let name = object.meta().name.clone().unwrap_or_default();
                    let mut order = order.lock().unwrap();
                    if !order.contains(&name) {
                        order.push(name);
                    }
                }
                _ => {}
            }
        }
    });
    (handle, rx)
}

#[tokio::test]
async fn a_resync_sends_only_what_changed_on_either_side() {
    let f = Fixture::new(
        "sync-unchanged",
        &[
            ("a.yaml", &config_map("a", 0, "1")),
            ("b.yaml", &config_map("b", 0, "1")),
        ],
        json!({}),
    )
    .await;
    f.sync().await;
    let before = f.config_map("b").await.unwrap();
    // Another manager changes a value the render sets.
    f.kubectl_apply(&json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "a", "namespace": f.env.namespace}, "data": {"value": "tampered"}}))
        .await;
    let outcome = f.sync().await.outcome.unwrap();
    assert_eq!(outcome.reason, Reason::Applied);
    assert_eq!(
        f.config_map("a").await.unwrap()["data"]["value"],
        "1",
        "the drift is put back"
    );
    let after = f.config_map("b").await.unwrap();
    assert_eq!(
        after["metadata"]["resourceVersion"], before["metadata"]["resourceVersion"],
        "the unchanged object was not touched"
    );
    // A deleted object is re-created.
    let cms: Api<ConfigMap> = Api::namespaced(f.env.client.clone(), &f.env.namespace);
    cms.delete("b", &Default::default()).await.unwrap();
    f.sync().await;
    assert!(f.config_map("b").await.is_some());
}

/// A Release whose Cluster points at a closed port, synced once (finalizer on, ClusterNotReady).
async fn on_an_unreachable_cluster(test: &str, deletion_policy: serde_json::Value) -> Fixture {
    let f = Fixture::new(
        test,
        &[("a.yaml", &config_map("a", 0, "1"))],
        json!({"cluster": "gone", "deletionPolicy": deletion_policy}),
    )
    .await;
    f.add_unreachable_cluster("gone").await;
    let first = f.sync().await;
    assert_eq!(first.outcome.unwrap().reason, Reason::ClusterNotReady);
    f.releases()
        .delete("web", &Default::default())
        .await
        .unwrap();
    f
}

#[tokio::test]
async fn deleting_a_release_on_an_unreachable_cluster_lets_go_without_a_prune() {
    let f = on_an_unreachable_cluster("delete-unreachable", json!({})).await;
    let done = f.sync().await;
    assert_eq!(done.outcome, None);
    assert!(
        f.releases().get_opt("web").await.unwrap().is_none(),
        "the finalizer is gone although nothing could be pruned"
    );
}

#[tokio::test]
async fn block_on_cluster_unreachable_keeps_the_release_until_the_cluster_answers() {
    let f = on_an_unreachable_cluster("delete-blocked", json!({"blockOnClusterUnreachable": true}))
        .await;
    let release = f.release().await;
    let err = convoy::engine::reconcile::sync_handler(&f.ctx, &release, 0)
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("cannot finalize Release")
            && convoy::engine::error::chain(&err).contains("blockOnClusterUnreachable"),
        "{}",
        convoy::engine::error::chain(&err)
    );
    let still = f.release().await;
    assert!(still.metadata.deletion_timestamp.is_some());
    assert!(
        still
            .metadata
            .finalizers
            .unwrap_or_default()
            .iter()
            .any(|x| x == convoy::engine::api::FINALIZER)
    );
}

/// A Release applied through a Cluster `here` (this control plane, behind a kubeconfig
/// Secret `here-kc`), with `deletion_policy`; then deleted.
async fn applied_through_a_cluster(test: &str, deletion_policy: serde_json::Value) -> Fixture {
    let f = Fixture::new(
        test,
        &[("a.yaml", &config_map("a", 0, "1"))],
        json!({"cluster": "here", "deletionPolicy": deletion_policy}),
    )
    .await;
    let kubeconfig = std::fs::read_to_string(&f.env.kubeconfig).unwrap();
    f.kubectl_apply(&json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "here-kc", "namespace": f.env.namespace},
        "stringData": {"kubeconfig": kubeconfig}}))
        .await;
    f.kubectl_apply(
        &json!({"apiVersion": "core.convoy.kumodo.io/v1alpha1", "kind": "Cluster",
        "metadata": {"name": "here", "namespace": f.env.namespace},
        "spec": {"kubeconfigSecretRef": {"name": "here-kc"}}}),
    )
    .await;
    assert_eq!(f.sync().await.outcome.unwrap().reason, Reason::Applied);
    assert!(f.config_map("a").await.is_some());
    f
}

fn holds_the_finalizer(release: &convoy::engine::api::Release) -> bool {
    release
        .metadata
        .finalizers
        .clone()
        .unwrap_or_default()
        .iter()
        .any(|x| x == convoy::engine::api::FINALIZER)
}

/// A failed read of the kubeconfig Secret is no reason to orphan the workloads: the deletion
/// returns the error and is retried, with or without blockOnClusterUnreachable.
#[tokio::test]
async fn a_failed_read_of_the_clusters_secret_is_retried_and_orphans_nothing() {
    let f = applied_through_a_cluster("delete-read-error", json!({})).await;
    // The Release now acts as a ServiceAccount that may not read the Secret (403).
    let out = f
        .env
        .kubectl(&["create", "serviceaccount", "nobody", "-n", &f.env.namespace]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    f.patch_spec(json!({"serviceAccountName": "nobody"})).await;
    f.releases()
        .delete("web", &Default::default())
        .await
        .unwrap();
    let release = f.release().await;
    let err = convoy::engine::reconcile::sync_handler(&f.ctx, &release, 0)
        .await
        .unwrap_err();
    let err = convoy::engine::error::chain(&err);
    assert!(
        err.contains("cannot resolve the cluster to prune on (retrying)"),
        "{err}"
    );
    assert!(
        holds_the_finalizer(&f.release().await),
        "the deletion waits"
    );
    assert!(
        f.config_map("a").await.is_some(),
        "nothing orphaned, nothing pruned yet"
    );
}

/// With blockOnClusterUnreachable, a kubeconfig Secret that is gone holds the deletion like
/// an unreachable cluster does.
#[tokio::test]
async fn a_missing_kubeconfig_secret_holds_a_deletion_that_blocks_on_an_unreachable_cluster() {
    let f = applied_through_a_cluster(
        "delete-secret-gone",
        json!({"blockOnClusterUnreachable": true}),
    )
    .await;
    let out = f
        .env
        .kubectl(&["delete", "secret", "here-kc", "-n", &f.env.namespace]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    f.releases()
        .delete("web", &Default::default())
        .await
        .unwrap();
    let release = f.release().await;
    let err = convoy::engine::reconcile::sync_handler(&f.ctx, &release, 0)
        .await
        .unwrap_err();
    let err = convoy::engine::error::chain(&err);
    assert!(
        err.contains("blockOnClusterUnreachable") && err.contains("here-kc"),
        "{err}"
    );
    assert!(holds_the_finalizer(&f.release().await));
    assert!(f.config_map("a").await.is_some());
}

#[tokio::test]
async fn a_source_that_cannot_be_fetched_is_source_not_ready_and_retried() {
    let f = Fixture::new(
        "sync-source-missing",
        &[("a.yaml", &config_map("a", 0, "1"))],
        json!({}),
    )
    .await;
    f.add_unfetchable_git_repository("missing").await;
    f.kubectl_apply(
        &json!({"apiVersion": "core.convoy.kumodo.io/v1alpha1", "kind": "Release",
        "metadata": {"name": "broken", "namespace": f.env.namespace},
        "spec": {"source": {"kind": "GitRepository", "name": "missing"},
                 "syncPolicy": {"retryBackoff": {"initial": "3s"}}}}),
    )
    .await;
    let result = f.sync_named("broken").await;
    let outcome = result.outcome.unwrap();
    assert_eq!(outcome.reason, Reason::SourceNotReady);
    assert!(outcome.retry, "a fetch error is transient");
    assert_eq!(
        result.requeue,
        convoy::engine::runtime::Requeue::After(Duration::from_secs(3))
    );
    let release = f.releases().get("broken").await.unwrap();
    let status = release.status.unwrap();
    let applied = status.condition("Applied").unwrap();
    assert_eq!(
        (applied.status.as_str(), applied.reason.as_str()),
        ("False", Reason::SourceNotReady.as_str())
    );
    assert!(
        applied.message.contains("/nonexistent/convoy-test.git"),
        "{}",
        applied.message
    );
    let attempt = status.last_attempted.unwrap();
    assert_eq!(
        attempt.phase,
        Some(convoy::engine::api::AttemptPhase::Failed)
    );
    assert_eq!(attempt.failure.unwrap().stage, "SourceResolution");
    assert!(status.last_successful.is_none());
}

/// The source is fetched while the cluster is resolved, yet failures keep the spec's order:
/// stageRender step 1 (fetch), step 2 (cluster), then the render itself.
#[tokio::test]
async fn failures_are_reported_in_the_spec_order_although_fetch_and_cluster_run_together() {
    let f = Fixture::new(
        "sync-failure-order",
        &[(
            "bad.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata: [unclosed\n",
        )],
        json!({"cluster": "gone"}),
    )
    .await;
    f.add_unreachable_cluster("gone").await;
    // A manifest that does not parse, on an unreachable cluster: the cluster step comes first.
    let result = f.sync().await;
    let outcome = result.outcome.unwrap();
    assert_eq!(
        outcome.reason,
        Reason::ClusterNotReady,
        "{}",
        outcome.message
    );
    // A source that cannot be fetched, on the same unreachable cluster: the fetch comes first.
    f.add_unfetchable_git_repository("missing").await;
    f.kubectl_apply(
        &json!({"apiVersion": "core.convoy.kumodo.io/v1alpha1", "kind": "Release",
        "metadata": {"name": "both", "namespace": f.env.namespace},
        "spec": {"source": {"kind": "GitRepository", "name": "missing"}, "cluster": "gone"}}),
    )
    .await;
    let result = f.sync_named("both").await;
    let outcome = result.outcome.unwrap();
    assert_eq!(
        outcome.reason,
        Reason::SourceNotReady,
        "{}",
        outcome.message
    );
    let status = f.releases().get("both").await.unwrap().status.unwrap();
    assert_eq!(
        status.last_attempted.unwrap().failure.unwrap().stage,
        "SourceResolution"
    );
}

/// A kind the cluster did not serve is looked up again after a while: a CRD someone installs
/// later makes the Release appliable without a restart (the same Context, its discovery
/// cache included).
#[tokio::test]
async fn a_crd_installed_later_is_found_without_a_restart() {
    let gadget = "apiVersion: discovery.convoy.test/v1\nkind: Gadget\nmetadata:\n  name: one\nspec:\n  size: 1\n";
    let f = Fixture::new("sync-late-crd", &[("gadget.yaml", gadget)], json!({})).await;
    remove_crd(&f, "gadgets.discovery.convoy.test");
    let outcome = f.sync().await.outcome.unwrap();
    assert_eq!(outcome.reason, Reason::Unappliable, "{}", outcome.message);
    assert!(outcome.message.contains("Gadget"), "{}", outcome.message);
    install_crd(&f, "discovery.convoy.test", "Gadget", "gadgets");
    eventually(
        "the Release to apply the Gadget",
        Duration::from_secs(60),
        || async {
            let outcome = f.sync().await.outcome?;
            (outcome.reason == Reason::Applied).then_some(())
        },
    )
    .await;
}

/// Install a CRD of `kind` in `group` (v1, namespaced, any fields), as an operator would, and
/// wait until it is Established.
fn install_crd(f: &Fixture, group: &str, kind: &str, plural: &str) {
    install_crd_scoped(f, group, kind, plural, "Namespaced");
}

/// [`install_crd`] of the given scope (`Namespaced` or `Cluster`).
fn install_crd_scoped(f: &Fixture, group: &str, kind: &str, plural: &str, scope: &str) {
    let crd = format!(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: {plural}.{group}\nspec:\n  group: {group}\n  scope: {scope}\n  names: {{kind: {kind}, plural: {plural}, singular: {singular}, listKind: {kind}List}}\n  versions:\n  - name: v1\n    served: true\n    storage: true\n    schema:\n      openAPIV3Schema: {{type: object, x-kubernetes-preserve-unknown-fields: true}}\n",
        singular = kind.to_lowercase()
    );
    f.env.kubectl_apply_text(&crd, &[]);
    let out = f.env.kubectl(&[
        "wait",
        "--for=condition=Established",
        &format!("crd/{plural}.{group}"),
        "--timeout=60s",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The API of the custom kind `kind` (`plural`) in `group`/v1.
fn custom_api(
    f: &Fixture,
    group: &str,
    kind: &str,
    plural: &str,
    namespaced: bool,
) -> Api<kube::api::DynamicObject> {
    let resource = kube::api::ApiResource {
        group: group.into(),
        version: "v1".into(),
        api_version: format!("{group}/v1"),
        kind: kind.into(),
        plural: plural.into(),
    };
    if namespaced {
        Api::namespaced_with(f.env.client.clone(), &f.env.namespace, &resource)
    } else {
        Api::all_with(f.env.client.clone(), &resource)
    }
}

/// Delete the CRD `name`: a control plane reused across runs may hold it from an earlier one.
fn remove_crd(f: &Fixture, name: &str) {
    let _ = f
        .env
        .kubectl(&["delete", "crd", name, "--ignore-not-found", "--wait"]);
}

/// Argo CD's `SkipDryRunOnMissingResource=true`: an object whose CRD something else installs
/// during the sync (an operator of an earlier wave) is left out of the dry run while its kind
/// is missing, and applied in its wave once the kind is served; until then its wave fails,
/// naming it, after the waves before it are applied and recorded. The option skips a missing
/// kind only: an object of a served kind is dry-run, and refused, like any other.
#[tokio::test]
async fn an_object_that_skips_the_dry_run_while_its_kind_is_missing_is_applied_once_it_is_served() {
    let group = "skip.convoy.test";
    let sprocket = json!({"apiVersion": format!("{group}/v1"), "kind": "Sprocket",
        "metadata": {"name": "one", "annotations": {
            "argocd.argoproj.io/sync-wave": "1",
            "argocd.argoproj.io/sync-options": "Prune=false, SkipDryRunOnMissingResource=true"}},
        "spec": {"teeth": 12}})
    .to_string();
    // A served kind with the option, and a body the server refuses.
    let refused = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "refused", "annotations": {
            "argocd.argoproj.io/sync-options": "SkipDryRunOnMissingResource=true"}},
        "data": {"count": 3}})
    .to_string();
    let operator = config_map("operator", 0, "1");
    let f = Fixture::new(
        "sync-skip-dry-run",
        &[
            ("operator.yaml", &operator),
            ("sprocket.yaml", &sprocket),
            ("refused.yaml", &refused),
        ],
        json!({}),
    )
    .await;
    remove_crd(&f, &format!("sprockets.{group}"));

    let outcome = f.sync().await.outcome.unwrap();
    assert_eq!(outcome.reason, Reason::Unappliable, "{}", outcome.message);
    assert!(
        outcome.message.contains("rejected 1 of 3")
            && outcome.message.contains("ConfigMap")
            && !outcome.message.contains("Sprocket"),
        "only the served kind's refusal stops the sync: {}",
        outcome.message
    );
    assert!(f.config_map("operator").await.is_none(), "nothing applied");

    // Without the refused object, the dry run passes; wave 0 is applied, wave 1 waits for
    // its kind.
    f.commit(&[("operator.yaml", &operator), ("sprocket.yaml", &sprocket)]);
    let outcome = f.sync().await.outcome.unwrap();
    assert_eq!(outcome.reason, Reason::DeployFailed, "{}", outcome.message);
    assert!(
        outcome.message.contains(&format!(
            "the cluster does not serve kind Sprocket in {group}/v1 yet: argocd.argoproj.io/sync-options: SkipDryRunOnMissingResource=true left it out of the dry run, and a sync applies it once its kind is served"
        )),
        "{}",
        outcome.message
    );
    let cm = f.config_map("operator").await.expect("wave 0 is applied");
    assert_eq!(owners_of(&cm, &["f:data", "f:value"]), ["convoy-release"]);
    let inventories: Api<ReleaseInventory> =
        Api::namespaced(f.env.client.clone(), &f.env.namespace);
    let recorded = |inventory: ReleaseInventory| -> Vec<String> {
        let mut names: Vec<String> = inventory
            .spec
            .inventory
            .iter()
            .map(|e| format!("{}/{}", e.kind, e.name))
            .collect();
        names.sort();
        names
    };
    assert_eq!(
        recorded(inventories.get("web").await.unwrap()),
        ["ConfigMap/operator"]
    );

    // The operator installs the CRD; the next sync, seconds after discovery last said the
    // kind was missing, asks again and applies the Sprocket.
    install_crd(&f, group, "Sprocket", "sprockets");
    let outcome = f.sync().await.outcome.unwrap();
    assert_eq!(outcome.reason, Reason::Applied, "{}", outcome.message);
    let sprockets = custom_api(&f, group, "Sprocket", "sprockets", true);
    let applied = serde_json::to_value(sprockets.get("one").await.unwrap()).unwrap();
    assert_eq!(applied["spec"]["teeth"], 12);
    assert_eq!(
        owners_of(&applied, &["f:spec", "f:teeth"]),
        ["convoy-release"]
    );
    assert_eq!(
        recorded(inventories.get("web").await.unwrap()),
        ["ConfigMap/operator", "Sprocket/one"]
    );
}

/// An awaited object whose kind comes during the sync is not applied over another Release's
/// object of its name: the comparison could not read it (its kind was unknown), so the
/// ownership check ran at its wave instead.
#[tokio::test]
async fn an_awaited_object_does_not_take_another_releases_object() {
    let group = "claimed.convoy.test";
    let cog = |owner: Option<(&str, &str)>| {
        let mut value = json!({"apiVersion": format!("{group}/v1"), "kind": "Cog",
            "metadata": {"name": "one", "annotations": {
                "argocd.argoproj.io/sync-wave": "1",
                "argocd.argoproj.io/sync-options": "SkipDryRunOnMissingResource=true"}},
            "spec": {"teeth": 12}});
        if let Some((name, namespace)) = owner {
            value["metadata"]["namespace"] = json!(namespace);
            value["metadata"]["labels"] = json!({"convoy.kumodo.io/release": name,
                "convoy.kumodo.io/release-namespace": namespace});
            value["spec"]["teeth"] = json!(7);
        }
        value.to_string()
    };
    let operator = config_map("operator", 0, "1");
    let f = Fixture::new(
        "sync-awaited-claimed",
        &[("operator.yaml", &operator), ("cog.yaml", &cog(None))],
        json!({}),
    )
    .await;
    remove_crd(&f, &format!("cogs.{group}"));
    let outcome = f.sync().await.outcome.unwrap();
    assert_eq!(outcome.reason, Reason::DeployFailed, "{}", outcome.message);

    // The kind comes, and another Release's object of that name with it.
    install_crd(&f, group, "Cog", "cogs");
    f.add_release("other", "elsewhere", json!({})).await;
    let ns = f.env.namespace.clone();
    f.env.kubectl_apply_text(&cog(Some(("other", &ns))), &[]);
    let outcome = f.sync().await.outcome.unwrap();
    // Refused at its wave (or, should the discovery miss have expired, before the dry run).
    assert!(
        matches!(outcome.reason, Reason::DeployFailed | Reason::Unappliable),
        "{:?}: {}",
        outcome.reason,
        outcome.message
    );
    assert!(
        outcome
            .message
            .contains(&format!("belongs to Release {ns}/other")),
        "{}",
        outcome.message
    );
    let live = custom_api(&f, group, "Cog", "cogs", true)
        .get("one")
        .await
        .unwrap();
    let live = serde_json::to_value(live).unwrap();
    assert_eq!(
        live["metadata"]["labels"]["convoy.kumodo.io/release"],
        "other"
    );
    assert_eq!(live["spec"]["teeth"], 7);
    remove_crd(&f, &format!("cogs.{group}"));
}

/// A cluster-scoped kind an operator installs during the sync (Argo CD's
/// `SkipDryRunOnMissingResource`): its object is recorded under its cluster-scoped key, known
/// only once the kind is served, so a later render without it prunes it. (The render gave it
/// the target namespace, the kind unknown; recorded under that key, it was applied but never
/// recorded, so never pruned.)
#[tokio::test]
async fn a_cluster_scoped_object_of_a_kind_installed_during_the_sync_is_recorded_and_pruned() {
    let group = "scoped.convoy.test";
    let f = Fixture::new(
        "sync-scoped-crd",
        &[("cm.yaml", &config_map("operator", 0, "1"))],
        json!({}),
    )
    .await;
    remove_crd(&f, &format!("clusterwidgets.{group}"));
    // Named per run: the kind is cluster-wide and runs share a control plane.
    let name = format!("w-{}", f.env.namespace);
    let widget = json!({"apiVersion": format!("{group}/v1"), "kind": "ClusterWidget",
        "metadata": {"name": name, "annotations": {
            "argocd.argoproj.io/sync-options": "SkipDryRunOnMissingResource=true"}},
        "spec": {"size": 1}})
    .to_string();
    f.commit(&[
        ("cm.yaml", &config_map("operator", 0, "1")),
        ("widget.yaml", &widget),
    ]);
    let outcome = f.sync().await.outcome.unwrap();
    assert_eq!(outcome.reason, Reason::DeployFailed, "{}", outcome.message);
    install_crd_scoped(&f, group, "ClusterWidget", "clusterwidgets", "Cluster");
    let outcome = f.sync().await.outcome.unwrap();
    assert_eq!(outcome.reason, Reason::Applied, "{}", outcome.message);
    let inventories: Api<ReleaseInventory> =
        Api::namespaced(f.env.client.clone(), &f.env.namespace);
    let recorded: Vec<(String, String, String)> = inventories
        .get("web")
        .await
        .unwrap()
        .spec
        .inventory
        .iter()
        .map(|e| (e.kind.clone(), e.namespace.clone(), e.name.clone()))
        .collect();
    assert!(
        recorded.contains(&("ClusterWidget".into(), String::new(), name.clone())),
        "{recorded:?}"
    );
    let widgets = custom_api(&f, group, "ClusterWidget", "clusterwidgets", false);

    // A sync that stopped after that wave's apply left it pending under the comparison's
    // namespaced key: the next sync applies it again and must not prune what it just applied.
    let handle = convoy::engine::inventory::InventoryHandle::new(
        f.env.client.clone(),
        &f.env.namespace,
        "web",
    );
    let inventory = inventories.get("web").await.unwrap();
    let members: Vec<convoy::engine::inventory::Member> = inventory
        .spec
        .inventory
        .iter()
        .map(convoy::engine::inventory::Member::from_entry)
        .filter(|m| m.key.kind != "ClusterWidget")
        .collect();
    let leftover = convoy::engine::api::ObjectKey {
        group: group.into(),
        kind: "ClusterWidget".into(),
        namespace: f.env.namespace.clone(),
        name: name.clone(),
    };
    handle
        .put_with_pending(&members, &[leftover])
        .await
        .unwrap();
    let outcome = f.sync().await.outcome.unwrap();
    assert_eq!(outcome.reason, Reason::Applied, "{}", outcome.message);
    assert!(!outcome.message.contains("pruned"), "{}", outcome.message);
    assert!(widgets.get_opt(&name).await.unwrap().is_some());
    let inventory = inventories.get("web").await.unwrap();
    assert!(
        inventory.spec.pending.is_empty(),
        "{:?}",
        inventory.spec.pending
    );

    f.commit(&[("cm.yaml", &config_map("operator", 0, "1"))]);
    let outcome = f.sync().await.outcome.unwrap();
    assert_eq!(outcome.reason, Reason::Applied, "{}", outcome.message);
    assert!(outcome.message.contains("1 pruned"), "{}", outcome.message);
    eventually(
        "the ClusterWidget to go",
        Duration::from_secs(30),
        || async {
            widgets
                .get_opt(&name)
                .await
                .unwrap()
                .is_none()
                .then_some(())
        },
    )
    .await;
}

/// An inventory key (group and kind, no version) is resolved by discovery once for the health
/// loop's reads, not at each lookup: each health pass asked for the whole group of every entry
/// outside the core group. A CRD applied for the group forgets it; deletes and ownership
/// reads ask afresh (a stale version's 404 would read as "gone").
#[tokio::test]
async fn a_kind_of_an_inventory_key_is_discovered_once() {
    let env = crate::support::TestEnv::new("sync-preferred-once").await;
    let (client, requests) = crate::support::recording_client(&env.kubeconfig).await;
    let applier = convoy::engine::apply::Applier::new(client, 4);
    let resources = applier.resources();
    let asked = || {
        requests
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.starts_with("GET /apis/apps"))
            .count()
    };
    for _ in 0..3 {
        let resource = resources
            .resolve_group_kind_cached("apps", "Deployment")
            .await
            .unwrap();
        assert_eq!(resource.unwrap().api.version, "v1");
    }
    let first = asked();
    assert!(first >= 1, "asked once");
    for _ in 0..3 {
        resources
            .resolve_group_kind_cached("apps", "StatefulSet")
            .await
            .unwrap();
        resources
            .resolve_group_kind_cached("apps", "Deployment")
            .await
            .unwrap();
    }
    assert_eq!(
        asked(),
        first * 2,
        "StatefulSet asked once, Deployment not again"
    );
    resources.forget("apps/v1");
    resources
        .resolve_group_kind_cached("apps", "Deployment")
        .await
        .unwrap();
    assert_eq!(asked(), first * 3, "forgotten with its group");
    resources
        .resolve_group_kind("apps", "Deployment")
        .await
        .unwrap();
    assert_eq!(asked(), first * 4, "a delete's lookup asks afresh");
}

/// A render naming many made-up kinds that skip the dry run costs a bounded number of
/// discovery requests at its wave: at most 16 group-versions are asked about again (the rest
/// keep the miss discovery gave moments ago), where each was asked again, one at a time, on
/// the discovery cache every Release of the cluster shares.
#[tokio::test]
async fn awaited_kinds_are_asked_about_again_a_bounded_number_of_times_a_wave() {
    let env = crate::support::TestEnv::new("sync-awaited-many").await;
    let (client, requests) = crate::support::recording_client(&env.kubeconfig).await;
    let applier = convoy::engine::apply::Applier::new(client, 4);
    let objects: Vec<convoy::engine::render::Object> = (0..40)
        .map(|i| {
            convoy::engine::render::Object(json!({
                "apiVersion": format!("g{i}.awaited.convoy.test/v1"), "kind": "Thing",
                "metadata": {"name": "t", "namespace": env.namespace, "annotations": {
                    "argocd.argoproj.io/sync-options": "SkipDryRunOnMissingResource=true"}}}))
        })
        .collect();
    let gate = applier.dry_run_gate(&objects).await.unwrap();
    assert!(gate.rejections.is_empty(), "{:?}", gate.rejections);
    let discovery = |log: &[String]| {
        log.iter()
            .filter(|r| r.starts_with("GET /apis/") && r.contains(".awaited.convoy.test/v1"))
            .count()
    };
    let asked = discovery(&requests.lock().unwrap());
    assert_eq!(asked, 40, "the gate asks once each");
    requests.lock().unwrap().clear();
    let Err(convoy::engine::apply::ApplyError::Failed { failures, .. }) =
        applier.apply(&objects, &mut Vec::new()).await
    else {
        panic!("no kind is served");
    };
    assert_eq!(failures.len(), 40);
    assert_eq!(discovery(&requests.lock().unwrap()), 16);
}

/// An immutable ConfigMap `name` holding `value`, with `annotations`.
fn immutable_config_map(name: &str, value: &str, annotations: serde_json::Value) -> String {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "immutable": true,
        "metadata": {"name": name, "annotations": annotations}, "data": {"value": value}})
    .to_string()
}

/// A change the server will not make in place (an immutable ConfigMap's data here; a Job's
/// template, a Deployment's selector alike) stops the sync at the dry-run gate, unless the
/// render asks for a re-create as Flux or Argo CD read it: then the live object is deleted
/// and applied again (a new uid, convoy's fields). An object that is not this Release's
/// (kubectl made it) is never deleted: the gate refuses it, naming why, and it stays.
#[tokio::test]
async fn an_object_that_cannot_change_in_place_is_re_created_where_the_render_asks() {
    let flux = json!({"kustomize.toolkit.fluxcd.io/force": "enabled"});
    let argo = json!({"argocd.argoproj.io/sync-options": "Replace=true,Force=true"});
    let f = Fixture::new(
        "sync-recreate",
        &[
            (
                "flux.yaml",
                &immutable_config_map("flux", "one", flux.clone()),
            ),
            (
                "argo.yaml",
                &immutable_config_map("argo", "one", argo.clone()),
            ),
        ],
        json!({}),
    )
    .await;
    assert_eq!(f.sync().await.outcome.unwrap().reason, Reason::Applied);
    let uid = |cm: &serde_json::Value| cm["metadata"]["uid"].as_str().unwrap().to_string();
    let first = uid(&f.config_map("flux").await.unwrap());

    f.commit(&[
        (
            "flux.yaml",
            &immutable_config_map("flux", "two", flux.clone()),
        ),
        (
            "argo.yaml",
            &immutable_config_map("argo", "two", argo.clone()),
        ),
    ]);
    let outcome = f.sync().await.outcome.unwrap();
    assert_eq!(outcome.reason, Reason::Applied, "{}", outcome.message);
    // The deletions are said, as prunes are.
    let ns = &f.env.namespace;
    assert!(
        outcome.message.contains(&format!(
            "re-created (deleted and created again, as their annotations ask): ConfigMap/{ns}/argo; ConfigMap/{ns}/flux"
        )),
        "{}",
        outcome.message
    );
    for name in ["flux", "argo"] {
        let cm = f.config_map(name).await.unwrap();
        assert_eq!(cm["data"]["value"], "two", "{name}");
        assert_eq!(owners_of(&cm, &["f:data", "f:value"]), ["convoy-release"]);
    }
    assert_ne!(
        uid(&f.config_map("flux").await.unwrap()),
        first,
        "re-created"
    );

    // Without the annotation, the gate refuses the change and nothing is applied.
    f.commit(&[
        (
            "flux.yaml",
            &immutable_config_map("flux", "three", json!({})),
        ),
        (
            "argo.yaml",
            &immutable_config_map("argo", "three", argo.clone()),
        ),
    ]);
    let outcome = f.sync().await.outcome.unwrap();
    assert_eq!(outcome.reason, Reason::Unappliable, "{}", outcome.message);
    assert!(
        outcome.message.contains("rejected 1 of 2") && outcome.message.contains("immutable"),
        "{}",
        outcome.message
    );
    // It says how to ask for a re-create.
    assert!(
        outcome.message.contains("(the server will not change this in place: annotate the object kustomize.toolkit.fluxcd.io/force: enabled, or argocd.argoproj.io/sync-options: Force=true, to have convoy re-create it)"),
        "{}",
        outcome.message
    );
    assert_eq!(f.config_map("argo").await.unwrap()["data"]["value"], "two");

    // kubectl's object of the same name is not this Release's to delete.
    f.env.kubectl_apply_text(
        &immutable_config_map("theirs", "kubectl", json!({})),
        &["-n", &f.env.namespace],
    );
    let theirs = uid(&f.config_map("theirs").await.unwrap());
    f.commit(&[
        (
            "flux.yaml",
            &immutable_config_map("flux", "two", flux.clone()),
        ),
        (
            "theirs.yaml",
            &immutable_config_map("theirs", "convoy", flux),
        ),
    ]);
    let outcome = f.sync().await.outcome.unwrap();
    assert_eq!(outcome.reason, Reason::Unappliable, "{}", outcome.message);
    assert!(
        outcome.message.contains(&format!("ConfigMap/{}/theirs", f.env.namespace))
            && outcome.message.contains(
                "not re-created, though kustomize.toolkit.fluxcd.io/force: enabled asks: the live object does not carry this Release's labels, and convoy deletes only its own"
            ),
        "{}",
        outcome.message
    );
    let cm = f.config_map("theirs").await.unwrap();
    assert_eq!(
        (uid(&cm), cm["data"]["value"].as_str()),
        (theirs, Some("kubectl"))
    );

    // An object with finalizers: deleting it would run them (an operator's clean-up).
    let finalizers = |list: serde_json::Value| {
        let patch = json!({"metadata": {"finalizers": list}}).to_string();
        f.env.kubectl_ok(&[
            "patch",
            "configmap",
            "argo",
            "-n",
            &f.env.namespace,
            "--type=merge",
            "-p",
            &patch,
        ]);
    };
    finalizers(json!(["example.com/hold"]));
    f.commit(&[(
        "argo.yaml",
        &immutable_config_map("argo", "six", argo.clone()),
    )]);
    let outcome = f.sync().await.outcome.unwrap();
    assert_eq!(outcome.reason, Reason::Unappliable, "{}", outcome.message);
    assert!(
        outcome.message.contains(
            "data: field is immutable when `immutable` is set; not re-created, though argocd.argoproj.io/sync-options: Force=true asks: it has finalizers (example.com/hold), which a deletion would run"
        ),
        "{}",
        outcome.message
    );
    finalizers(json!(null));
    assert_eq!(f.config_map("argo").await.unwrap()["data"]["value"], "two");

    // A refusal for what `metadata` holds (a uid copied from `kubectl get -o yaml`) is no
    // immutable field: the apply would refuse the uid after a delete too, losing the object.
    let mut stale = serde_json::from_str::<serde_json::Value>(&immutable_config_map(
        "flux",
        "five",
        json!({"kustomize.toolkit.fluxcd.io/force": "enabled"}),
    ))
    .unwrap();
    stale["metadata"]["uid"] = json!("00000000-0000-0000-0000-000000000000");
    f.commit(&[("flux.yaml", &stale.to_string())]);
    let outcome = f.sync().await.outcome.unwrap();
    assert_eq!(outcome.reason, Reason::Unappliable, "{}", outcome.message);
    assert!(
        outcome.message.contains("metadata.uid"),
        "{}",
        outcome.message
    );
    assert_eq!(f.config_map("flux").await.unwrap()["data"]["value"], "two");
}

/// A render the server stores in other words than it was written in (quantities in their
/// canonical form, a Secret's `stringData` as `data`, zeros left out) is applied once: the
/// next sync of the same render sends nothing and writes no inventory. Each was sent at every
/// sync (and every daemon pass, as "drift put back") before.
#[tokio::test]
async fn a_render_the_server_stores_in_other_words_is_not_sent_again() {
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "api"},
        "spec": {"replicas": 1, "minReadySeconds": 0,
            "selector": {"matchLabels": {"app": "api"}},
            "template": {"metadata": {"labels": {"app": "api"}},
                "spec": {"hostNetwork": false, "priorityClassName": "",
                    "automountServiceAccountToken": false,
                    "containers": [{"name": "api", "image": "api:1",
                        "resources": {"requests": {"cpu": 0.1, "memory": "1.5Gi"},
                            "limits": {"cpu": 2, "memory": "2048Mi"}}}]}}}});
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds"},
        "stringData": {"password": "s3cret"}});
    let f = Fixture::new(
        "sync-same-words",
        &[
            ("deploy.yaml", &deployment.to_string()),
            ("secret.yaml", &secret.to_string()),
        ],
        json!({}),
    )
    .await;
    let first = f.sync().await.outcome.unwrap();
    assert_eq!(first.reason, Reason::Applied, "{}", first.message);
    assert_eq!(first.objects_sent, 2);
    assert_eq!(first.drift_put_back, 0, "new objects are not drift");
    let inventories: Api<ReleaseInventory> =
        Api::namespaced(f.env.client.clone(), &f.env.namespace);
    let before = inventories
        .get("web")
        .await
        .unwrap()
        .metadata
        .resource_version;
    let again = f.sync().await.outcome.unwrap();
    assert_eq!(again.reason, Reason::Applied, "{}", again.message);
    assert_eq!(again.objects_sent, 0, "{}", again.message);
    let after = inventories
        .get("web")
        .await
        .unwrap()
        .metadata
        .resource_version;
    assert_eq!(after, before, "no inventory write");

    // Another team's env var and a sidecar beside the rendered ones are theirs: nothing to
    // send (each pass sent the Deployment and announced drift put back before).
    let theirs = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "api"},
        "spec": {"template": {"spec": {"containers": [
            {"name": "api", "env": [{"name": "TEAM_B_FLAG", "value": "on"}]},
            {"name": "sidecar", "image": "proxy:1"}]}}}});
    f.env.kubectl_apply_text(
        &theirs.to_string(),
        &[
            "-n",
            &f.env.namespace,
            "--server-side",
            "--field-manager=team-b",
        ],
    );
    let outcome = f.sync().await.outcome.unwrap();
    assert_eq!(outcome.objects_sent, 0, "{}", outcome.message);

    // A pointer's `false` is stored: one taken out (here by a JSON patch) is drift, put back
    // (a review found it read as a zero the server leaves out).
    f.env.kubectl_ok(&[
        "patch",
        "deployment",
        "api",
        "-n",
        &f.env.namespace,
        "--type=json",
        "-p",
        r#"[{"op": "remove", "path": "/spec/template/spec/automountServiceAccountToken"}]"#,
    ]);
    let outcome = f.sync().await.outcome.unwrap();
    assert_eq!(outcome.objects_sent, 1, "{}", outcome.message);
    assert_eq!(outcome.drift_put_back, 1, "the daemon says DriftCorrected");
    let deployments: Api<Deployment> = Api::namespaced(f.env.client.clone(), &f.env.namespace);
    let pod = deployments
        .get("api")
        .await
        .unwrap()
        .spec
        .unwrap()
        .template
        .spec
        .unwrap();
    assert_eq!(pod.automount_service_account_token, Some(false));

    // A changed value is still sent.
    let mut changed = deployment.clone();
    changed["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] =
        json!("200m");
    f.commit(&[("deploy.yaml", &changed.to_string())]);
    let outcome = f.sync().await.outcome.unwrap();
    assert_eq!(outcome.objects_sent, 1, "{}", outcome.message);
    assert_eq!(outcome.drift_put_back, 0, "a render change, not drift");
    let live: Api<Deployment> = Api::namespaced(f.env.client.clone(), &f.env.namespace);
    let live = live.get("api").await.unwrap();
    let requests = live.spec.unwrap().template.spec.unwrap().containers[0]
        .resources
        .clone()
        .unwrap()
        .requests
        .unwrap();
    assert_eq!(requests["cpu"].0, "200m");
}

/// A StatefulSet, asked to re-create for a new `volumeClaimTemplates` (immutable), keeps its
/// Pods: deleted leaving them (`--cascade=orphan`), the new one takes them up by the selector
/// it keeps, as an operator does by hand. A Pod of the old one is the same Pod under the new
/// one (the same uid, the new owner); deleted with its dependents, it would be made again.
#[tokio::test]
async fn a_stateful_set_re_created_keeps_its_pods() {
    let sts = |storage: &str| {
        json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db",
            "annotations": {"kustomize.toolkit.fluxcd.io/force": "enabled"}},
            // Both Pods at once: their claims stay unbound here (no storage class), so
            // an OrderedReady second Pod would wait for the first forever.
            "spec": {"replicas": 2, "serviceName": "db", "podManagementPolicy": "Parallel",
                "selector": {"matchLabels": {"app": "db"}},
                "template": {"metadata": {"labels": {"app": "db"}},
                    "spec": {"containers": [{"name": "db", "image": "postgres:17"}]}},
                "volumeClaimTemplates": [{"metadata": {"name": "data"},
                    "spec": {"accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": storage}}}}]}})
        .to_string()
    };
    let f = Fixture::new("sync-recreate-sts", &[("sts.yaml", &sts("1Gi"))], json!({})).await;
    let outcome = f.sync().await.outcome.unwrap();
    assert_eq!(outcome.reason, Reason::Applied, "{}", outcome.message);
    let stateful_sets: Api<StatefulSet> = Api::namespaced(f.env.client.clone(), &f.env.namespace);
    let pods: Api<Pod> = Api::namespaced(f.env.client.clone(), &f.env.namespace);
    // Each Pod's uid, and the uid of the StatefulSet that controls it.
    let owned_pods = || async {
        let list = pods
            .list(&ListParams::default().labels("app=db"))
            .await
            .unwrap();
        let mut owned: Vec<(String, String, String)> = list
            .items
            .iter()
            .map(|pod| {
                let owner = pod
                    .metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .find(|r| r.controller == Some(true))
                    .map(|r| r.uid.clone())
                    .unwrap_or_default();
                let name = pod.metadata.name.clone().unwrap();
                (name, pod.metadata.uid.clone().unwrap(), owner)
            })
            .collect();
        owned.sort();
        owned
    };
    // The StatefulSet's two Pods once `owner` controls both.
    let pods_of = |owner: &str, what: &'static str| {
        let owner = owner.to_string();
        let owned_pods = &owned_pods;
        async move {
            eventually(what, Duration::from_secs(60), || async {
                let owned = owned_pods().await;
                (owned.len() == 2 && owned.iter().all(|(_, _, o)| *o == owner)).then_some(owned)
            })
            .await
        }
    };
    let uid_of = |sts: StatefulSet| sts.metadata.uid.unwrap();
    let first = uid_of(stateful_sets.get("db").await.unwrap());
    let before = pods_of(&first, "the StatefulSet's two Pods").await;

    f.commit(&[("sts.yaml", &sts("2Gi"))]);
    let diff = f.env.convoy(&["diff", "web"]);
    let text = String::from_utf8_lossy(&diff.stdout);
    assert_eq!(diff.status.code(), Some(1), "{text}");
    assert!(
        text.contains(
            "to re-create, its Pods kept for the new one, as kustomize.toolkit.fluxcd.io/force: enabled asks: spec: updates to statefulset spec for fields other than"
        ),
        "{text}"
    );
    let outcome = f.sync().await.outcome.unwrap();
    assert_eq!(outcome.reason, Reason::Applied, "{}", outcome.message);
    let live = stateful_sets.get("db").await.unwrap();
    let claims = &live
        .spec
        .as_ref()
        .unwrap()
        .volume_claim_templates
        .as_ref()
        .unwrap()[0];
    let requests = claims.spec.as_ref().unwrap().resources.as_ref().unwrap();
    assert_eq!(requests.requests.as_ref().unwrap()["storage"].0, "2Gi");
    let second = uid_of(live);
    assert_ne!(second, first, "re-created");
    let after = pods_of(&second, "the Pods taken up by the new StatefulSet").await;
    let pod_uids = |owned: &[(String, String, String)]| {
        owned
            .iter()
            .map(|(name, uid, _)| (name.clone(), uid.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(pod_uids(&after), pod_uids(&before), "the same Pods");

    // A new serviceName: kept Pods would keep the old Service's DNS names, so they go with
    // the old StatefulSet and the new one makes its own (found by a review).
    f.commit(&[(
        "sts.yaml",
        &sts("2Gi").replace("\"serviceName\":\"db\"", "\"serviceName\":\"db2\""),
    )]);
    let outcome = f.sync().await.outcome.unwrap();
    assert_eq!(outcome.reason, Reason::Applied, "{}", outcome.message);
    let third = uid_of(stateful_sets.get("db").await.unwrap());
    assert_ne!(third, second, "re-created");
    let renewed = pods_of(&third, "new Pods of the new StatefulSet").await;
    for ((name, old), (_, new)) in pod_uids(&after).iter().zip(pod_uids(&renewed).iter()) {
        assert_ne!(old, new, "{name} made again");
    }
}

/// A CRD is never deleted to re-create it, whatever the render asks: that deletes every
/// object of its kind (its scope cannot change in place). Only built-in kinds whose deletion
/// takes nothing else with it are re-created.
#[tokio::test]
async fn a_crd_is_never_re_created() {
    let group = "holder.convoy.test";
    let crd = |scope: &str| {
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("holders.{group}"),
                "annotations": {"kustomize.toolkit.fluxcd.io/force": "enabled"}},
            "spec": {"group": group, "scope": scope,
                "names": {"kind": "Holder", "plural": "holders"},
                "versions": [{"name": "v1", "served": true, "storage": true, "schema":
                    {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}})
        .to_string()
    };
    let f = Fixture::new(
        "sync-recreate-crd",
        &[("crd.yaml", &crd("Namespaced"))],
        json!({}),
    )
    .await;
    remove_crd(&f, &format!("holders.{group}"));
    assert_eq!(f.sync().await.outcome.unwrap().reason, Reason::Applied);
    f.commit(&[("crd.yaml", &crd("Cluster"))]);
    let outcome = f.sync().await.outcome.unwrap();
    assert_eq!(outcome.reason, Reason::Unappliable, "{}", outcome.message);
    assert!(
        outcome.message.contains(
            "not re-created, though kustomize.toolkit.fluxcd.io/force: enabled asks: convoy re-creates only built-in kinds whose deletion takes nothing else with it, not a CustomResourceDefinition; delete it by hand and sync"
        ),
        "{}",
        outcome.message
    );
    remove_crd(&f, &format!("holders.{group}"));
}

/// A ConfigMap `name` carrying `annotations` (a chart's or a repository's keep policy).
fn annotated_config_map(name: &str, annotations: serde_json::Value) -> String {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "annotations": annotations}, "data": {"value": "1"}})
    .to_string()
}

/// Objects that say they outlive their Release, as Helm, Argo CD and Flux read it: a prune
/// leaves them (and drops them from the inventory), and so does the Release's deletion, each
/// by the annotations that speak for it.
#[tokio::test]
async fn objects_annotated_to_be_kept_survive_a_prune_and_the_releases_deletion() {
    let helm = annotated_config_map("helm-keep", json!({"helm.sh/resource-policy": "keep"}));
    let flux = annotated_config_map(
        "flux-keep",
        json!({"kustomize.toolkit.fluxcd.io/prune": "disabled"}),
    );
    let no_prune = annotated_config_map(
        "argo-no-prune",
        json!({"argocd.argoproj.io/sync-options": "Prune=false"}),
    );
    let no_delete = annotated_config_map(
        "argo-no-delete",
        json!({"argocd.argoproj.io/sync-options": "ServerSideApply=true,Delete=false"}),
    );
    let plain = config_map("plain", 0, "1");
    let f = Fixture::new(
        "sync-keep-policy",
        &[
            ("helm.yaml", &helm),
            ("flux.yaml", &flux),
            ("no-prune.yaml", &no_prune),
            ("no-delete.yaml", &no_delete),
            ("plain.yaml", &plain),
            ("stays.yaml", &config_map("stays", 0, "1")),
        ],
        json!({}),
    )
    .await;
    assert_eq!(f.sync().await.outcome.unwrap().reason, Reason::Applied);

    // All but `stays` leave the render.
    f.commit(&[
        ("no-delete.yaml", &no_delete),
        ("stays.yaml", &config_map("stays", 0, "1")),
    ]);
    let outcome = f.sync().await.outcome.unwrap();
    assert_eq!(outcome.reason, Reason::Applied, "{}", outcome.message);
    assert!(outcome.message.contains("1 pruned"), "{}", outcome.message);
    assert!(
        outcome.message.contains(&format!(
            "kept by their annotations, not pruned (no longer recorded): ConfigMap/{ns}/argo-no-prune (argocd.argoproj.io/sync-options: Prune=false); ConfigMap/{ns}/flux-keep (kustomize.toolkit.fluxcd.io/prune: disabled); ConfigMap/{ns}/helm-keep (helm.sh/resource-policy: keep)",
            ns = f.env.namespace
        )),
        "{}",
        outcome.message
    );
    assert!(f.config_map("plain").await.is_none(), "pruned");
    for kept in ["helm-keep", "flux-keep", "argo-no-prune"] {
        assert!(f.config_map(kept).await.is_some(), "{kept} is kept");
    }
    let inventories: Api<ReleaseInventory> =
        Api::namespaced(f.env.client.clone(), &f.env.namespace);
    let mut names: Vec<String> = inventories
        .get("web")
        .await
        .unwrap()
        .spec
        .inventory
        .iter()
        .map(|e| e.name.clone())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["argo-no-delete", "stays"],
        "the kept are no longer recorded"
    );

    // `Delete=false` keeps an object from the Release's deletion; the rest go with it.
    f.releases()
        .delete("web", &Default::default())
        .await
        .unwrap();
    let release = f.release().await;
    convoy::engine::reconcile::sync_handler(&f.ctx, &release, 0)
        .await
        .unwrap();
    assert!(f.releases().get_opt("web").await.unwrap().is_none());
    assert!(
        f.config_map("stays").await.is_none(),
        "deleted with the Release"
    );
    assert!(
        f.config_map("argo-no-delete").await.is_some(),
        "Delete=false keeps it"
    );
}

/// DEL, C1 controls and the line separators reach the server unchanged: an apply body is read
/// as YAML, which refuses the first two and breaks lines at the others, so they once failed
/// every apply of such a value and every write of a status quoting one.
#[tokio::test]
async fn values_and_messages_with_controls_yaml_refuses_are_applied_unchanged() {
    let f = Fixture::new(
        "sync-controls",
        &[(
            "a.yaml",
            r#"{apiVersion: v1, kind: ConfigMap, metadata: {name: a}, data: {value: "a\x9bb\Nc\Ld\x7fe"}}"#,
        )],
        json!({}),
    )
    .await;
    let outcome = f.sync().await.outcome.unwrap();
    assert_eq!(outcome.reason, Reason::Applied, "{}", outcome.message);
    assert_eq!(
        f.config_map("a").await.unwrap()["data"]["value"],
        "a\u{9b}b\u{85}c\u{2028}d\u{7f}e"
    );

    // A chart that fails quoting such a character: the status still says so.
    f.commit(&[
        ("Chart.yaml", "apiVersion: v2\nname: web\nversion: 0.1.0\n"),
        ("templates/cm.yaml", r#"{{ fail "csi \u009b nel \u0085" }}"#),
    ]);
    f.patch_spec(json!({"content": {"type": "helm", "helm": {"releaseName": "web"}}}))
        .await;
    let outcome = f.sync().await.outcome.unwrap();
    assert_eq!(outcome.reason, Reason::DeployFailed, "{}", outcome.message);
    let status = f.release().await.status.unwrap();
    let applied = status.condition("Applied").unwrap();
    assert!(
        applied.message.contains("csi \u{9b} nel"),
        "the status holds the message: {}",
        applied.message
    );
}

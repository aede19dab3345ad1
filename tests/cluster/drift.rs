//! The drift check and the observer's drift loop against the real API server.

use convoy::engine::api::Reason;
use convoy::engine::drift::{Action, Verdict, drift_pass};
use serde_json::json;

use crate::support::fixture::{Fixture, config_map, deployment};
use crate::support::owners_of;

fn service(name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\nspec:\n  selector: {{app: {name}}}\n  ports:\n  - port: 80\n    targetPort: 8080\n"
    )
}

#[tokio::test]
async fn drift_by_another_manager_is_named_and_a_sync_puts_it_back() {
    let f = Fixture::new(
        "drift-manager",
        &[("a.yaml", &config_map("a", 0, "1"))],
        json!({"syncPolicy": {"mode": "Manual"}}),
    )
    .await;
    f.annotate(json!({"convoy.kumodo.io/sync-requested-at": "2026-01-01T00:00:00Z"}))
        .await;
    assert_eq!(f.sync().await.outcome.unwrap().reason, Reason::Applied);
    f.kubectl_apply(&json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "a", "namespace": f.env.namespace}, "data": {"value": "tampered"}}))
        .await;

    let pass = drift_pass(&f.ctx, &f.release().await)
        .await
        .unwrap()
        .unwrap();
    let report = pass.report.unwrap();
    let object = report.objects.iter().find(|o| o.key.name == "a").unwrap();
    assert_eq!(object.action, Action::Change);
    assert_eq!(object.drift_managers(), ["test-user"]);
    let Verdict::OutOfSync { message } = &pass.verdict else {
        panic!("{:?}", pass.verdict)
    };
    assert!(
        message.contains("ConfigMap/") && message.contains("(drift by test-user)"),
        "{message}"
    );
    assert!(!pass.requested_sync, "manual mode does not request a sync");
    let release = f.release().await;
    let in_sync = release
        .status
        .as_ref()
        .unwrap()
        .condition("InSync")
        .unwrap();
    assert_eq!(
        (in_sync.status.as_str(), in_sync.reason.as_str()),
        ("False", "OutOfSync")
    );
    assert_eq!(
        release.metadata.annotations.unwrap()["convoy.kumodo.io/sync-requested-at"],
        "2026-01-01T00:00:00Z",
        "the drift loop left the request alone"
    );

    f.annotate(json!({"convoy.kumodo.io/sync-requested-at": "2026-01-01T00:00:01Z"}))
        .await;
    f.sync().await;
    assert_eq!(f.config_map("a").await.unwrap()["data"]["value"], "1");
    let pass = drift_pass(&f.ctx, &f.release().await)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(pass.verdict, Verdict::InSync { objects: 1 });
}

#[tokio::test]
async fn defaulted_fields_give_no_diff_right_after_a_sync() {
    let f = Fixture::new(
        "drift-defaults",
        &[
            ("s.yaml", &service("web")),
            ("d.yaml", &deployment("web", 0, 1)),
        ],
        json!({}),
    )
    .await;
    f.sync().await;
    let pass = drift_pass(&f.ctx, &f.release().await)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        pass.verdict,
        Verdict::InSync { objects: 2 },
        "{:#?}",
        pass.report
    );
    let status = f.release().await.status.unwrap();
    let in_sync = status.condition("InSync").unwrap();
    assert_eq!(
        (in_sync.status.as_str(), in_sync.message.as_str()),
        ("True", "2 objects match the render")
    );
}

#[tokio::test]
async fn in_sync_is_written_only_by_convoy_observe_and_not_rewritten_when_unchanged() {
    let f = Fixture::new(
        "drift-owner",
        &[("a.yaml", &config_map("a", 0, "1"))],
        json!({}),
    )
    .await;
    f.sync().await;
    let first = drift_pass(&f.ctx, &f.release().await)
        .await
        .unwrap()
        .unwrap();
    assert!(first.wrote);
    let before = f.release().await;
    let object = serde_json::to_value(&before).unwrap();
    let path = [
        "f:status",
        "f:conditions",
        "k:{\"type\":\"InSync\"}",
        "f:status",
    ];
    assert_eq!(owners_of(&object, &path), ["convoy-observe"]);
    let second = drift_pass(&f.ctx, &before).await.unwrap().unwrap();
    assert!(!second.wrote);
    let after = f.release().await;
    assert_eq!(
        after.metadata.resource_version,
        before.metadata.resource_version
    );
}

#[tokio::test]
async fn automatic_mode_requests_a_sync_on_drift() {
    let f = Fixture::new(
        "drift-auto",
        &[("a.yaml", &config_map("a", 0, "1"))],
        json!({}),
    )
    .await;
    // Before the controller's first attempt the drift loop leaves the Release alone.
    let first = drift_pass(&f.ctx, &f.release().await).await.unwrap();
    assert!(first.is_none(), "{first:?}");
    assert!(
        f.release()
            .await
            .status
            .is_none_or(|s| s.condition("InSync").is_none()),
        "no InSync before the first drift check"
    );
    f.sync().await;
    assert!(
        !f.release()
            .await
            .metadata
            .annotations
            .unwrap_or_default()
            .contains_key("convoy.kumodo.io/sync-requested-at")
    );
    f.kubectl_apply(&json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "a", "namespace": f.env.namespace}, "data": {"value": "tampered"}}))
        .await;
    let pass = drift_pass(&f.ctx, &f.release().await)
        .await
        .unwrap()
        .unwrap();
    assert!(pass.requested_sync);
    let annotations = f.release().await.metadata.annotations.unwrap();
    assert!(annotations.contains_key("convoy.kumodo.io/sync-requested-at"));
    // The request is written under the requests' manager; convoy-observe owns only InSync.
    let object = serde_json::to_value(f.release().await).unwrap();
    assert_eq!(
        owners_of(
            &object,
            &[
                "f:metadata",
                "f:annotations",
                "f:convoy.kumodo.io/sync-requested-at"
            ]
        ),
        ["convoy-requests"]
    );
    assert_eq!(
        owners_of(&object, &["f:metadata"]),
        ["convoy-release", "convoy-requests"],
        "the finalizer's Update and the request; nothing under convoy-observe or unknown"
    );
    // The controller answers the request and the drift is gone.
    f.sync().await;
    let pass = drift_pass(&f.ctx, &f.release().await)
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(pass.verdict, Verdict::InSync { .. }));
    assert!(!pass.requested_sync);
}

#[tokio::test]
async fn removed_objects_are_to_prune_and_rejections_do_not_stop_the_rest() {
    let f = Fixture::new(
        "drift-prune",
        &[
            ("a.yaml", &config_map("a", 0, "1")),
            ("b.yaml", &config_map("b", 0, "1")),
        ],
        json!({"syncPolicy": {"mode": "Manual"}}),
    )
    .await;
    f.annotate(json!({"convoy.kumodo.io/sync-requested-at": "2026-01-01T00:00:00Z"}))
        .await;
    f.sync().await;
    let bad = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: Bad_Name\n";
    f.commit(&[("a.yaml", &config_map("a", 0, "2")), ("bad.yaml", bad)]);
    let pass = drift_pass(&f.ctx, &f.release().await)
        .await
        .unwrap()
        .unwrap();
    let report = pass.report.unwrap();
    let actions: Vec<(String, Action)> = report
        .objects
        .iter()
        .map(|o| (o.key.name.clone(), o.action))
        .collect();
    assert_eq!(
        actions,
        [("a".into(), Action::Change), ("b".into(), Action::Prune)]
    );
    assert_eq!(report.rejections.len(), 1);
    assert!(
        report.rejections[0].message.contains("Bad_Name"),
        "{}",
        report.rejections[0].message
    );
    let Verdict::OutOfSync { message } = &pass.verdict else {
        panic!()
    };
    assert!(
        message.contains("1 to prune") && message.contains("1 rejected by the dry run"),
        "{message}"
    );
}

#[tokio::test]
async fn an_unreachable_cluster_makes_in_sync_unknown() {
    let f = Fixture::new(
        "drift-unreachable",
        &[("a.yaml", &config_map("a", 0, "1"))],
        json!({"cluster": "gone"}),
    )
    .await;
    f.add_unreachable_cluster("gone").await;
    // The controller's attempt (ClusterNotReady) comes first in automatic mode.
    f.sync().await;
    let pass = drift_pass(&f.ctx, &f.release().await)
        .await
        .unwrap()
        .unwrap();
    let Verdict::Unknown { message } = &pass.verdict else {
        panic!("{:?}", pass.verdict)
    };
    assert!(
        message.contains("ClusterNotReady") && message.contains("127.0.0.1:9"),
        "{message}"
    );
    let in_sync = f
        .release()
        .await
        .status
        .unwrap()
        .condition("InSync")
        .cloned()
        .unwrap();
    assert_eq!(
        (in_sync.status.as_str(), in_sync.reason.as_str()),
        ("Unknown", "Unknown")
    );
}

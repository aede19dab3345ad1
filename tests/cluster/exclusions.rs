//! Fields and objects convoy leaves to others, on the real control plane: an HPA's replicas,
//! a Secret created once, and the errors of a bad exclusion.

use convoy::engine::api::Reason;
use convoy::engine::drift::{Verdict, drift_pass};
use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use crate::support::fixture::{Fixture, deployment};
use crate::support::owners_of;

/// What an HPA does: scale through the scale subresource under its own manager.
async fn hpa_scales(f: &Fixture, replicas: i32) {
    let deployments: Api<Deployment> = Api::namespaced(f.env.client.clone(), &f.env.namespace);
    deployments
        .patch_scale(
            "api",
            &PatchParams {
                field_manager: Some("hpa-controller".into()),
                ..Default::default()
            },
            &Patch::Merge(json!({"spec": {"replicas": replicas}})),
        )
        .await
        .unwrap();
}

async fn replicas(f: &Fixture) -> i64 {
    let deployments: Api<Deployment> = Api::namespaced(f.env.client.clone(), &f.env.namespace);
    let d = deployments.get("api").await.unwrap();
    serde_json::to_value(d).unwrap()["spec"]["replicas"]
        .as_i64()
        .unwrap()
}

#[tokio::test]
async fn replicas_an_hpa_owns_are_drift_unless_excluded() {
    let f = Fixture::new(
        "excl-hpa",
        &[("api.yaml", &deployment("api", 0, 2))],
        json!({}),
    )
    .await;
    assert_eq!(f.sync().await.outcome.unwrap().reason, Reason::Applied);
    hpa_scales(&f, 5).await;

    // Without an exclusion: drift by the HPA's manager, and a sync fights it.
    let pass = drift_pass(&f.ctx, &f.release().await)
        .await
        .unwrap()
        .unwrap();
    match &pass.verdict {
        Verdict::OutOfSync { message } => {
            assert!(message.contains("hpa-controller"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    let diff = f.env.convoy(&["diff", "web"]);
    assert_eq!(diff.status.code(), Some(1));

    // With one: not sent, not drift, and the sync leaves the HPA's value alone.
    f.patch_spec(json!({"driftExclusions": [
        {"target": {"group": "apps", "kind": "Deployment", "name": "api"}, "jsonPointers": ["/spec/replicas"]},
    ]}))
    .await;
    let diff = f.env.convoy(&["diff", "web"]);
    assert_eq!(
        diff.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&diff.stdout)
    );
    let pass = drift_pass(&f.ctx, &f.release().await)
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(pass.verdict, Verdict::InSync { .. }),
        "{:?}",
        pass.verdict
    );
    assert_eq!(f.sync().await.outcome.unwrap().reason, Reason::Applied);
    assert_eq!(replicas(&f).await, 5);
    hpa_scales(&f, 7).await;
    assert_eq!(f.sync().await.outcome.unwrap().reason, Reason::Applied);
    assert_eq!(replicas(&f).await, 7);
}

#[tokio::test]
async fn fields_a_named_manager_owns_are_left_to_it() {
    let f = Fixture::new(
        "excl-manager",
        &[("api.yaml", &deployment("api", 0, 2))],
        json!({"driftExclusions": [{"target": {"kind": "Deployment"}, "managers": ["hpa-controller"]}]}),
    )
    .await;
    f.sync().await;
    hpa_scales(&f, 4).await;
    let diff = f.env.convoy(&["diff", "web"]);
    assert_eq!(
        diff.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&diff.stdout)
    );
    f.sync().await;
    assert_eq!(replicas(&f).await, 4);
}

#[tokio::test]
async fn an_if_not_present_secret_is_created_once_and_then_left_as_it_is() {
    let secret = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: generated\n  annotations:\n    convoy.kumodo.io/ssa: IfNotPresent\nstringData:\n  token: initial\n";
    let f = Fixture::new("excl-once", &[("s.yaml", secret)], json!({})).await;
    assert_eq!(f.sync().await.outcome.unwrap().reason, Reason::Applied);
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(f.env.client.clone(), &f.env.namespace);
    let value = |s: k8s_openapi::api::core::v1::Secret| {
        String::from_utf8(s.data.unwrap()["token"].0.clone()).unwrap()
    };
    assert_eq!(value(secrets.get("generated").await.unwrap()), "initial");
    // Someone rotates it; convoy keeps the rotated value, and reports no drift.
    f.kubectl_apply(&json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "generated", "namespace": f.env.namespace},
        "stringData": {"token": "rotated"}}))
        .await;
    assert_eq!(f.sync().await.outcome.unwrap().reason, Reason::Applied);
    assert_eq!(value(secrets.get("generated").await.unwrap()), "rotated");
    let diff = f.env.convoy(&["diff", "web"]);
    assert_eq!(
        diff.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&diff.stdout)
    );
}

/// A repository written for Flux says with `kustomize.toolkit.fluxcd.io/ssa` which objects are
/// created once (`IfNotPresent`: a rotated value stays), left alone (`Ignore`: never
/// applied) or keep kubectl's fields (`Merge`: a field kubectl set stays kubectl's, where an
/// adoption would take it over and drop it once the render does not name it).
#[tokio::test]
async fn fluxs_ssa_annotation_is_honoured_as_flux_honours_it() {
    let once = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "once",
        "annotations": {"kustomize.toolkit.fluxcd.io/ssa": "IfNotPresent"}},
        "stringData": {"token": "initial"}})
    .to_string();
    let ignored = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ignored",
        "labels": {"kustomize.toolkit.fluxcd.io/ssa": "ignore"}}, "data": {"a": "1"}})
    .to_string();
    let merged = |extra: bool| {
        let mut data = json!({"a": "1"});
        if extra {
            data["kubectl"] = json!("yes");
        }
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "merged",
            "annotations": {"kustomize.toolkit.fluxcd.io/ssa": "Merge"}}, "data": data})
    };
    let f = Fixture::new(
        "excl-flux",
        &[
            ("once.yaml", &once),
            ("ignored.yaml", &ignored),
            ("merged.yaml", &merged(false).to_string()),
        ],
        json!({}),
    )
    .await;
    // kubectl made `merged` first, with a field the render does not name.
    let mut by_kubectl = merged(true);
    by_kubectl["metadata"]["namespace"] = json!(f.env.namespace);
    f.env.kubectl_apply_text(&by_kubectl.to_string(), &[]);
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(f.env.client.clone(), &f.env.namespace);
    let token = |s: k8s_openapi::api::core::v1::Secret| {
        String::from_utf8(s.data.unwrap()["token"].0.clone()).unwrap()
    };

    let outcome = f.sync().await.outcome.unwrap();
    assert_eq!(outcome.reason, Reason::Applied, "{}", outcome.message);
    assert_eq!(token(secrets.get("once").await.unwrap()), "initial");
    assert!(f.config_map("ignored").await.is_none(), "never applied");
    let cm = f.config_map("merged").await.unwrap();
    assert_eq!(cm["data"]["kubectl"], "yes", "{cm}");
    assert_eq!(
        owners_of(&cm, &["f:data", "f:kubectl"]),
        ["kubectl-client-side-apply"]
    );
    assert_eq!(owners_of(&cm, &["f:data", "f:a"]).len(), 2, "{cm}");

    // Someone rotates the Secret; a new commit syncs and leaves it rotated.
    f.kubectl_apply(&json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "once", "namespace": f.env.namespace},
        "stringData": {"token": "rotated"}}))
        .await;
    f.commit(&[
        ("once.yaml", &once),
        ("ignored.yaml", &ignored),
        ("merged.yaml", &merged(false).to_string()),
        (
            "new.yaml",
            &crate::support::fixture::config_map("new", 0, "1"),
        ),
    ]);
    let outcome = f.sync().await.outcome.unwrap();
    assert_eq!(outcome.reason, Reason::Applied, "{}", outcome.message);
    assert_eq!(token(secrets.get("once").await.unwrap()), "rotated");
    assert_eq!(
        f.config_map("merged").await.unwrap()["data"]["kubectl"],
        "yes"
    );

    // Flux's way to pause one object in the cluster: neither sent nor pruned while paused.
    f.env.kubectl_ok(&[
        "annotate",
        "configmap",
        "new",
        "-n",
        &f.env.namespace,
        "kustomize.toolkit.fluxcd.io/reconcile=disabled",
    ]);
    f.commit(&[
        ("once.yaml", &once),
        ("merged.yaml", &merged(false).to_string()),
        (
            "new.yaml",
            &crate::support::fixture::config_map("new", 0, "2"),
        ),
    ]);
    let outcome = f.sync().await.outcome.unwrap();
    assert_eq!(outcome.reason, Reason::Applied, "{}", outcome.message);
    assert_eq!(f.config_map("new").await.unwrap()["data"]["value"], "1");
    f.commit(&[
        ("once.yaml", &once),
        ("merged.yaml", &merged(false).to_string()),
    ]);
    let outcome = f.sync().await.outcome.unwrap();
    assert_eq!(outcome.reason, Reason::Applied, "{}", outcome.message);
    assert!(
        outcome.message.contains(&format!(
            "kept by their annotations, not pruned (no longer recorded): ConfigMap/{}/new (kustomize.toolkit.fluxcd.io/reconcile: disabled)",
            f.env.namespace
        )),
        "{}",
        outcome.message
    );
    assert!(f.config_map("new").await.is_some());
}

#[tokio::test]
async fn a_bad_annotation_or_exclusion_fails_the_render_and_applies_nothing() {
    let bad_annotation = deployment("api", 0, 1).replace(
        "  annotations:\n",
        "  annotations:\n    convoy.kumodo.io/ssa: Sometimes\n",
    );
    let f = Fixture::new("excl-bad", &[("api.yaml", &bad_annotation)], json!({})).await;
    let ns = f.env.namespace.clone();
    let outcome = f.sync().await.outcome.unwrap();
    assert_eq!(outcome.reason, Reason::DeployFailed);
    assert_eq!(outcome.attempt.failure.as_ref().unwrap().stage, "Rendering");
    assert!(
        outcome.message.ends_with(&format!(
            "Deployment.apps/{ns}/api: annotation convoy.kumodo.io/ssa is \"Sometimes\"; accepted values are IfNotPresent and Ignore"
        )),
        "{}",
        outcome.message
    );
    f.commit(&[("api.yaml", &deployment("api", 0, 1))]);
    for (exclusion, expected) in [
        (
            json!({"jsonPointers": ["/spec/replicas"]}),
            "spec.driftExclusions[0] has no target",
        ),
        (
            json!({"target": {"kind": "Deployment"}, "jsonPointers": ["spec/replicas"]}),
            "spec.driftExclusions[0]: JSON pointer \"spec/replicas\" does not start with '/'",
        ),
    ] {
        f.patch_spec(json!({"driftExclusions": [exclusion]})).await;
        let outcome = f.sync().await.outcome.unwrap();
        assert_eq!(outcome.reason, Reason::DeployFailed);
        assert!(outcome.message.contains(expected), "{}", outcome.message);
    }
    let deployments: Api<Deployment> = Api::namespaced(f.env.client.clone(), &ns);
    assert!(
        deployments.get_opt("api").await.unwrap().is_none(),
        "nothing applied"
    );
}

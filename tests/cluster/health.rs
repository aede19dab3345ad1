//! The health loop against the real control plane, with kwok moving pods along.

use std::time::Duration;

use convoy::engine::api::{
    Condition, HealthState, HealthyReason, HookPhase, HookState, ReleaseInventory,
};
use convoy::engine::health::{HealthMemory, health_pass};
use convoy::engine::inventory::{HookMember, InventoryHandle};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

use crate::support::fixture::{Fixture, config_map, deployment};
use crate::support::{client_for, eventually, owners_of, still_control_plane};

/// One health pass over the Release with a fresh memory: the Healthy condition it writes.
async fn healthy_condition(f: &Fixture) -> Condition {
    health_pass(&f.ctx, &HealthMemory::default(), &f.release().await)
        .await
        .unwrap()
        .unwrap()
        .condition
        .unwrap()
}

async fn inventory(f: &Fixture) -> ReleaseInventory {
    let api: Api<ReleaseInventory> = Api::namespaced(f.env.client.clone(), &f.env.namespace);
    api.get("web").await.unwrap()
}

fn entry_state(inv: &ReleaseInventory, name: &str) -> Option<HealthState> {
    inv.spec
        .inventory
        .iter()
        .find(|e| e.name == name)
        .and_then(|e| e.state)
}

#[tokio::test]
async fn a_deployment_goes_progressing_then_healthy_as_kwok_readies_its_pods() {
    // Paused, the Deployment gets no pods: Progressing, deterministically.
    let paused = deployment("api", 0, 2).replace(
        "spec:\n  replicas: 2",
        "spec:\n  paused: true\n  replicas: 2",
    );
    let f = Fixture::new(
        "health-deploy",
        &[("d.yaml", &paused)],
        Fixture::default_health("5m"),
    )
    .await;
    f.install_default_rules().await;
    f.sync().await;
    let memory = HealthMemory::default();
    let pass = health_pass(&f.ctx, &memory, &f.release().await)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        entry_state(&inventory(&f).await, "api"),
        Some(HealthState::Progressing)
    );
    assert_eq!(pass.condition.unwrap().reason, HealthyReason::Progressing);

    // Resumed by the next render, kwok readies the pods.
    f.commit(&[("d.yaml", &deployment("api", 0, 2))]);
    f.sync().await;
    let last = eventually(
        "the Deployment to become Healthy",
        Duration::from_secs(60),
        || async {
            let pass = health_pass(&f.ctx, &memory, &f.release().await)
                .await
                .unwrap()
                .unwrap();
            (entry_state(&inventory(&f).await, "api") == Some(HealthState::Healthy)).then_some(pass)
        },
    )
    .await;
    let condition = last.condition.unwrap();
    assert_eq!(
        (condition.status.as_str(), condition.reason.as_str()),
        ("True", "Healthy")
    );
    let release = f.release().await;
    assert_eq!(
        release
            .status
            .as_ref()
            .unwrap()
            .health_summary
            .as_ref()
            .unwrap()
            .healthy,
        1
    );

    // Each writer owns only its own fields.
    let object = serde_json::to_value(&release).unwrap();
    let healthy = [
        "f:status",
        "f:conditions",
        "k:{\"type\":\"Healthy\"}",
        "f:status",
    ];
    assert_eq!(owners_of(&object, &healthy), ["convoy-health"]);
    assert_eq!(
        owners_of(&object, &["f:status", "f:healthSummary"]),
        ["convoy-health"]
    );
    let inv = serde_json::to_value(inventory(&f).await).unwrap();
    let mut state_owners = Vec::new();
    for mf in inv["metadata"]["managedFields"].as_array().unwrap() {
        let fields = mf["fieldsV1"]["f:inventory"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        if fields.values().any(|e| e.get("f:state").is_some()) {
            state_owners.push(mf["manager"].as_str().unwrap().to_string());
        }
    }
    assert_eq!(state_owners, ["convoy-health-inventory"]);
}

#[tokio::test]
async fn an_unschedulable_deployment_degrades_after_the_deadline_and_keeps_its_anchor() {
    let stuck = deployment("stuck", 0, 1).replace(
        "    spec:\n      containers:",
        "    spec:\n      nodeSelector: {convoy-test: nowhere}\n      containers:",
    );
    let f = Fixture::new(
        "health-degraded",
        &[("d.yaml", &stuck)],
        Fixture::default_health("2s"),
    )
    .await;
    f.install_default_rules().await;
    f.sync().await;
    let memory = HealthMemory::default();
    let first = health_pass(&f.ctx, &memory, &f.release().await)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        entry_state(&inventory(&f).await, "stuck"),
        Some(HealthState::Progressing)
    );
    assert_eq!(first.condition.unwrap().reason, HealthyReason::Progressing);
    let anchor: Time = inventory(&f).await.spec.inventory[0]
        .first_unhealthy
        .clone()
        .unwrap();

    // A restarted loop (fresh memory) finds the anchor in the inventory.
    let restarted = HealthMemory::default();
    let degraded = eventually(
        "Degraded after the 2s deadline",
        Duration::from_secs(20),
        || async {
            let pass = health_pass(&f.ctx, &restarted, &f.release().await)
                .await
                .unwrap()
                .unwrap();
            (entry_state(&inventory(&f).await, "stuck") == Some(HealthState::Degraded))
                .then_some(pass)
        },
    )
    .await;
    let condition = degraded.condition.unwrap();
    assert_eq!(
        (condition.status.as_str(), condition.reason.as_str()),
        ("False", "Degraded")
    );
    assert!(
        condition.message.contains("Deployment.apps/"),
        "{}",
        condition.message
    );
    assert_eq!(
        inventory(&f).await.spec.inventory[0].first_unhealthy,
        Some(anchor),
        "the anchor survived"
    );
}

#[tokio::test]
async fn a_cel_compile_error_makes_healthy_unknown_naming_the_rule() {
    let f = Fixture::new(
        "health-bad-rule",
        &[("a.yaml", &config_map("a", 0, "1"))],
        json!({"healthAssessment": {"localRuleSetSelector": {"matchLabels": {"rules": "mine"}}}}),
    )
    .await;
    f.kubectl_apply(&json!({"apiVersion": "health.convoy.kumodo.io/v1alpha1", "kind": "HealthRuleSet",
        "metadata": {"name": "broken", "namespace": f.env.namespace, "labels": {"rules": "mine"}},
        "spec": {"rules": [{"name": "half", "match": {"kind": "ConfigMap"}, "healthy": "object.data.value =="}]}}))
    .await;
    f.sync().await;
    let condition = healthy_condition(&f).await;
    assert_eq!(
        (condition.status.as_str(), condition.reason.as_str()),
        ("Unknown", "Unknown")
    );
    assert!(
        condition.message.contains(&format!(
            "health rule HealthRuleSet/{}/broken/half",
            f.env.namespace
        )),
        "{}",
        condition.message
    );

    // A rule that does not return a bool is rejected the same way.
    f.kubectl_apply(
        &json!({"apiVersion": "health.convoy.kumodo.io/v1alpha1", "kind": "HealthRuleSet",
        "metadata": {"name": "broken", "namespace": f.env.namespace, "labels": {"rules": "mine"}},
        "spec": {"rules": [{"name": "half", "match": {"kind": "ConfigMap"}, "healthy": "'yes'"}]}}),
    )
    .await;
    assert!(
        healthy_condition(&f)
            .await
            .message
            .contains("healthy must return a bool")
    );

    // A rule that reads a missing field is Unknown for that entry only.
    f.kubectl_apply(&json!({"apiVersion": "health.convoy.kumodo.io/v1alpha1", "kind": "HealthRuleSet",
        "metadata": {"name": "broken", "namespace": f.env.namespace, "labels": {"rules": "mine"}},
        "spec": {"rules": [{"name": "half", "match": {"kind": "ConfigMap"}, "healthy": "object.data.missing == 'x'"}]}}))
    .await;
    health_pass(&f.ctx, &HealthMemory::default(), &f.release().await)
        .await
        .unwrap()
        .unwrap();
    let inv = inventory(&f).await;
    assert_eq!(entry_state(&inv, "a"), Some(HealthState::Unknown));
    assert!(
        inv.spec.inventory[0]
            .message
            .as_deref()
            .unwrap()
            .contains("missing")
    );
}

#[tokio::test]
async fn a_scaled_deployment_is_not_healthy_before_its_generation_is_observed() {
    // The target cluster has no controllers: the test plays the Deployment controller.
    let still = still_control_plane();
    let kubeconfig = std::fs::read_to_string(&still.kubeconfig).unwrap();
    let ns_doc = "apiVersion: v1\nkind: Namespace\nmetadata: {name: gen-test}\n";
    let d =
        deployment("web", 0, 1).replace("  name: web\n", "  name: web\n  namespace: gen-test\n");
    let mut spec = Fixture::default_health("5m");
    spec["cluster"] = json!("still");
    let f = Fixture::new(
        "health-generation",
        &[("ns.yaml", ns_doc), ("d.yaml", &d)],
        spec,
    )
    .await;
    f.install_default_rules().await;
    f.kubectl_apply(&json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "still-kc", "namespace": f.env.namespace},
        "stringData": {"kubeconfig": kubeconfig}}))
    .await;
    f.kubectl_apply(&json!({"apiVersion": "core.convoy.kumodo.io/v1alpha1", "kind": "Cluster",
        "metadata": {"name": "still", "namespace": f.env.namespace}, "spec": {"kubeconfigSecretRef": {"name": "still-kc"}}}))
    .await;
    f.sync().await;
    let remote = client_for(&still.kubeconfig).await;
    let deployments: Api<Deployment> = Api::namespaced(remote, "gen-test");
    let observed = |generation: i64, replicas: i32| {
        json!({"status": {"observedGeneration": generation, "replicas": replicas, "updatedReplicas": replicas,
                          "availableReplicas": replicas, "readyReplicas": replicas}})
    };
    deployments
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(observed(1, 1)),
        )
        .await
        .unwrap();
    let memory = HealthMemory::default();
    health_pass(&f.ctx, &memory, &f.release().await)
        .await
        .unwrap();
    assert_eq!(
        entry_state(&inventory(&f).await, "web"),
        Some(HealthState::Healthy)
    );

    // Scale to 3: generation 2. Even a status that claims 3 ready replicas does not count
    // while it speaks for generation 1.
    deployments
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 3}})),
        )
        .await
        .unwrap();
    deployments
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(observed(1, 3)),
        )
        .await
        .unwrap();
    health_pass(&f.ctx, &memory, &f.release().await)
        .await
        .unwrap();
    let inv = inventory(&f).await;
    assert_eq!(entry_state(&inv, "web"), Some(HealthState::Progressing));
    assert!(inv.spec.inventory.iter().any(|e| {
        e.message
            .as_deref()
            .unwrap_or_default()
            .contains("observe generation 2")
    }));
    deployments
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(observed(2, 3)),
        )
        .await
        .unwrap();
    health_pass(&f.ctx, &memory, &f.release().await)
        .await
        .unwrap();
    assert_eq!(
        entry_state(&inventory(&f).await, "web"),
        Some(HealthState::Healthy)
    );
}

#[tokio::test]
async fn hook_jobs_are_polled_to_succeeded_or_timed_out_without_clearing_each_other() {
    let stuck_job = json!({"template": {"spec": {"restartPolicy": "Never", "nodeSelector": {"convoy-test": "nowhere"},
        "containers": [{"name": "x", "image": "busybox"}]}}});
    let ok_job = json!({"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "x", "image": "busybox"}]}}});
    let f = Fixture::new(
        "health-hooks",
        &[("a.yaml", &config_map("a", 0, "1"))],
        json!({"lifecycle": {"hooks": [
            {"name": "migrate", "phase": "preSync", "job": ok_job, "timeout": "5m"},
            {"name": "warmup", "phase": "preSync", "job": stuck_job, "timeout": "1s"},
        ]}}),
    )
    .await;
    f.sync().await;
    // Arm the two hooks by hand (the controller's PutHooks) with Jobs in the target namespace,
    // labelled as the controller labels them (a Job without is no hook of the Release's).
    let jobs: Api<Job> = Api::namespaced(f.env.client.clone(), &f.env.namespace);
    for (name, spec) in [("migrate", ok_job), ("warmup", stuck_job)] {
        use convoy::engine::hooks::labels;
        let labels = json!({labels::RELEASE: "web", labels::RELEASE_NAMESPACE: f.env.namespace,
            labels::HOOK: name, labels::PHASE: "preSync"});
        let job: Job = serde_json::from_value(
            json!({"metadata": {"name": format!("web-{name}"), "labels": labels}, "spec": spec}),
        )
        .unwrap();
        jobs.create(&PostParams::default(), &job).await.unwrap();
    }
    let created = Time(jiff::Timestamp::from_second(jiff::Timestamp::now().as_second()).unwrap());
    let handle = InventoryHandle::new(f.env.client.clone(), &f.env.namespace, "web");
    let hook = |name: &str| HookMember {
        name: name.into(),
        phase: HookPhase::PreSync,
        workload_name: format!("web-{name}"),
        created_at: created.clone(),
        render_ref: "r".into(),
    };
    handle
        .put_hooks(&[hook("migrate"), hook("warmup")])
        .await
        .unwrap();

    let memory = HealthMemory::default();
    let pass = eventually("both hooks to finish", Duration::from_secs(60), || async {
        let pass = health_pass(&f.ctx, &memory, &f.release().await)
            .await
            .unwrap()
            .unwrap();
        let inv = inventory(&f).await;
        let done = inv.spec.hooks.iter().all(|h| h.finished_at.is_some());
        done.then_some(pass)
    })
    .await;
    let inv = inventory(&f).await;
    let state = |n: &str| inv.spec.hooks.iter().find(|h| h.name == n).unwrap().clone();
    assert_eq!(state("migrate").state, Some(HookState::Succeeded));
    assert_eq!(state("warmup").state, Some(HookState::Failed));
    assert!(state("warmup").message.unwrap().starts_with("timeout:"));
    // The pass that finished the last hook woke the controller: in automatic mode by its hook
    // status write, which the controller's inventory watch wakes on, not by a /sync too.
    assert!(
        pass.edges.contains(&"hook batch complete"),
        "{:?}",
        pass.edges
    );
    assert!(pass.wrote_inventory);
    assert!(!pass.requested_sync, "the write wakes the controller");
    let annotations = f.release().await.metadata.annotations.unwrap_or_default();
    assert!(
        !annotations.contains_key("convoy.kumodo.io/sync-requested-at"),
        "{annotations:?}"
    );
    // Both hooks keep their controller fields and their health-loop fields.
    for n in ["migrate", "warmup"] {
        assert_eq!(
            state(n).workload_name.as_deref(),
            Some(format!("web-{n}").as_str())
        );
        assert!(state(n).finished_at.is_some());
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
}

/// The second render of a Release with waves, synced by hand: while its wave 0 is held, the
/// inventory still holds the first render's wave 1 (Healthy all along). The new wave 0 turning
/// healthy is "wave complete", whose /sync is what lets the controller apply wave 1.
#[tokio::test]
async fn a_new_renders_first_wave_turning_healthy_is_wave_complete() {
    let f = Fixture::new(
        "health-frontier",
        &[
            ("a.yaml", &config_map("a", 0, "1")),
            ("b.yaml", &config_map("b", 1, "1")),
        ],
        json!({"syncPolicy": {"mode": "Manual", "waves": {"waitForHealth": true}},
               "healthAssessment": {"localRuleSetSelector": {"matchLabels": {"rules": "mine"}}}}),
    )
    .await;
    f.kubectl_apply(
        &json!({"apiVersion": "health.convoy.kumodo.io/v1alpha1", "kind": "HealthRuleSet",
        "metadata": {"name": "held", "namespace": f.env.namespace, "labels": {"rules": "mine"}},
        "spec": {"rules": [{"name": "unless-held", "match": {"kind": "ConfigMap"},
                            "healthy": "!('hold' in object.metadata.labels)"}]}}),
    )
    .await;
    let requests = std::sync::atomic::AtomicU32::new(0);
    let request = || async {
        let n = requests.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        f.annotate(
            json!({"convoy.kumodo.io/sync-requested-at": format!("2026-01-01T00:{:02}:00Z", n)}),
        )
        .await;
    };
    let memory = HealthMemory::default();
    let pass = || async {
        health_pass(&f.ctx, &memory, &f.release().await)
            .await
            .unwrap()
            .unwrap()
    };
    // The first render: wave 0, its wave complete, wave 1, both assessed.
    request().await;
    f.sync().await;
    assert!(pass().await.requested_sync);
    assert_eq!(
        f.sync().await.outcome.unwrap().reason,
        convoy::engine::api::Reason::Applied
    );
    pass().await;
    assert_eq!(
        entry_state(&inventory(&f).await, "b"),
        Some(HealthState::Healthy)
    );

    f.commit(&[
        ("a.yaml", &config_map("a", 0, "2")),
        ("b.yaml", &config_map("b", 1, "2")),
    ]);
    let configmaps: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(f.env.client.clone(), &f.env.namespace);
    let hold = |value: serde_json::Value| {
        let configmaps = configmaps.clone();
        async move {
            configmaps
                .patch(
                    "a",
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"labels": {"hold": value}}})),
                )
                .await
                .unwrap();
        }
    };
    hold(json!("yes")).await;
    request().await;
    let held = f.sync().await.outcome.unwrap();
    assert_eq!(
        held.reason,
        convoy::engine::api::Reason::WaitingForWaveHealth
    );
    let progressing = pass().await;
    assert_eq!(
        entry_state(&inventory(&f).await, "a"),
        Some(HealthState::Progressing)
    );
    assert_eq!(progressing.edges, ["render advanced"]);

    hold(serde_json::Value::Null).await;
    let healthy = pass().await;
    assert_eq!(healthy.edges, ["wave complete"]);
    assert!(healthy.requested_sync);
    let applied = f.sync().await.outcome.unwrap();
    assert_eq!(applied.reason, convoy::engine::api::Reason::Applied);
    assert_eq!(f.config_map("b").await.unwrap()["data"]["value"], "2");
}

#[tokio::test]
async fn wave_completion_requests_a_sync_once_and_a_steady_pass_does_not() {
    let f = Fixture::new(
        "health-edges",
        &[("a.yaml", &config_map("a", 0, "1")), ("b.yaml", &config_map("b", 1, "1"))],
        json!({"syncPolicy": {"mode": "Manual"}, "healthAssessment": {"localRuleSetSelector": {"matchLabels": {"none": "x"}}}}),
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
    assert!(first.edges.contains(&"wave complete"), "{:?}", first.edges);
    // Manual mode: the /sync is what lets the controller go on to the next wave.
    assert!(first.requested_sync);
    let requested =
        f.release().await.metadata.annotations.unwrap()["convoy.kumodo.io/sync-requested-at"]
            .clone();
    assert_ne!(requested, "2026-01-01T00:00:00Z");
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
        ["convoy-requests"],
        "the health loop's request is not convoy-health's field"
    );
    let steady = health_pass(&f.ctx, &memory, &f.release().await)
        .await
        .unwrap()
        .unwrap();
    assert!(steady.edges.is_empty(), "{:?}", steady.edges);
    assert!(!steady.requested_sync);
    assert!(!steady.wrote_health, "nothing changed, nothing written");
    let again =
        f.release().await.metadata.annotations.unwrap()["convoy.kumodo.io/sync-requested-at"]
            .clone();
    assert_eq!(again, requested);
}

#[tokio::test]
async fn with_the_built_in_rules_off_and_no_selector_healthy_is_not_configured() {
    let f = Fixture::new(
        "health-none",
        &[("a.yaml", &config_map("a", 0, "1"))],
        json!({"healthAssessment": {"builtinRules": false}}),
    )
    .await;
    f.sync().await;
    let condition = healthy_condition(&f).await;
    assert_eq!(
        (condition.status.as_str(), condition.reason.as_str()),
        ("True", "NotConfigured")
    );
}

#[tokio::test]
async fn an_invalid_selector_makes_healthy_unknown_for_that_release_only() {
    let f = Fixture::new(
        "health-bad-selector",
        &[("a.yaml", &config_map("a", 0, "1"))],
        json!({"healthAssessment": {"localRuleSetSelector": {"matchExpressions": [
            {"key": "rules", "operator": "In", "values": []}]}}}),
    )
    .await;
    f.sync().await;
    let condition = healthy_condition(&f).await;
    assert_eq!(
        (condition.status.as_str(), condition.reason.as_str()),
        ("Unknown", "Unknown")
    );
    assert!(
        condition
            .message
            .contains("invalid localRuleSetSelector on Release")
            && condition.message.contains("operator \"In\""),
        "{}",
        condition.message
    );

    // A rule set whose rule has a bad match.labelSelector names the rule; a Release that
    // does not select that set is assessed as usual.
    f.kubectl_apply(
        &json!({"apiVersion": "health.convoy.kumodo.io/v1alpha1", "kind": "HealthRuleSet",
        "metadata": {"name": "odd", "namespace": f.env.namespace, "labels": {"rules": "odd"}},
        "spec": {"rules": [{"name": "picky", "healthy": "true",
            "match": {"kind": "ConfigMap", "labelSelector": {"matchExpressions": [
                {"key": "x", "operator": "Exists", "values": ["y"]}]}}}]}}),
    )
    .await;
    // Each Release renders objects of its own (an object has one owning Release).
    f.repo.commit(
        &[
            ("odd/a.yaml", &config_map("odd-a", 0, "1")),
            ("plain/a.yaml", &config_map("plain-a", 0, "1")),
        ],
        "two more apps",
    );
    f.add_release(
        "uses-odd",
        "odd",
        json!({"healthAssessment": {"localRuleSetSelector": {"matchLabels": {"rules": "odd"}}}}),
    )
    .await;
    f.add_release(
        "plain",
        "plain",
        json!({"healthAssessment": {"localRuleSetSelector": {"matchLabels": {"rules": "none"}}}}),
    )
    .await;
    for name in ["uses-odd", "plain"] {
        f.sync_named(name).await;
    }
    let condition_of = |name: &'static str| {
        let f = &f;
        async move {
            let release = f.releases().get(name).await.unwrap();
            health_pass(&f.ctx, &HealthMemory::default(), &release)
                .await
                .unwrap()
                .unwrap()
                .condition
                .unwrap()
        }
    };
    let odd = condition_of("uses-odd").await;
    assert_eq!(odd.status.as_str(), "Unknown");
    assert!(
        odd.message.contains(&format!(
            "health rule HealthRuleSet/{}/odd/picky",
            f.env.namespace
        )) && odd.message.contains("match.labelSelector"),
        "{}",
        odd.message
    );
    let plain = condition_of("plain").await;
    assert_eq!(
        (plain.status.as_str(), plain.reason.as_str()),
        ("True", HealthyReason::Healthy.as_str()),
        "{}",
        plain.message
    );
}

/// An object that cannot be read is Unknown on its own; the others are still judged (one
/// read error does not make the whole assessment Unknown).
#[tokio::test]
async fn an_object_that_cannot_be_read_is_unknown_alone() {
    let secret =
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: creds\nstringData:\n  token: t\n";
    let f = Fixture::new(
        "health-read-error",
        &[
            ("a.yaml", &config_map("settings", 0, "1")),
            ("s.yaml", secret),
        ],
        json!({}),
    )
    .await;
    f.sync().await;
    // From now on the Release acts as a ServiceAccount that may read ConfigMaps only.
    let ns = f.env.namespace.clone();
    for args in [
        vec!["create", "serviceaccount", "reader", "-n", &ns],
        vec![
            "create",
            "role",
            "reader",
            "--verb=get",
            "--resource=configmaps",
            "-n",
            &ns,
        ],
        vec![
            "create",
            "rolebinding",
            "reader",
            "--role=reader",
            &format!("--serviceaccount={ns}:reader"),
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
    f.patch_spec(json!({"serviceAccountName": "reader"})).await;
    let condition = healthy_condition(&f).await;
    let inv = inventory(&f).await;
    assert_eq!(entry_state(&inv, "settings"), Some(HealthState::Healthy));
    assert_eq!(entry_state(&inv, "creds"), Some(HealthState::Unknown));
    let message = inv
        .spec
        .inventory
        .iter()
        .find(|e| e.name == "creds")
        .and_then(|e| e.message.clone())
        .unwrap_or_default();
    assert!(
        message.starts_with(&format!(
            "cannot read Secret/{ns}/creds: secrets \"creds\" is forbidden"
        )),
        "{message}"
    );
    assert_eq!(condition.status.as_str(), "False", "{condition:?}");
    assert!(
        condition
            .message
            .contains(&format!("Secret/{ns}/creds is Unknown")),
        "{}",
        condition.message
    );
}

/// An inventory entry naming another namespace's object (the inventory is a record whoever
/// may write it can change) is not judged unless the object carries the Release's labels: a
/// tenant's rule whose message prints a field would otherwise show that object's data to
/// whoever reads the Release's health.
#[tokio::test]
async fn an_entry_naming_another_namespaces_object_is_not_assessed() {
    let f = Fixture::new(
        "health-forged",
        &[("a.yaml", &config_map("a", 0, "1"))],
        json!({"healthAssessment": {"localRuleSetSelector": {"matchLabels": {"rules": "mine"}}}}),
    )
    .await;
    f.kubectl_apply(
        &json!({"apiVersion": "health.convoy.kumodo.io/v1alpha1", "kind": "HealthRuleSet",
        "metadata": {"name": "tell", "namespace": f.env.namespace, "labels": {"rules": "mine"}},
        "spec": {"rules": [{"name": "all", "match": {"kind": "ConfigMap"}, "healthy": "false",
            "message": "'value: ' + object.data.value"}]}}),
    )
    .await;
    f.sync().await;
    let other = crate::support::unique_namespace(&f.env.client, "health-forged-victim").await;
    f.env.kubectl_apply_text(
        &config_map("victim", 0, "hunter2").replace(
            "  labels: {app: demo}\n",
            &format!("  namespace: {other}\n"),
        ),
        &["--server-side"],
    );
    f.record_in_inventory(&[crate::support::fixture::core_key(
        "ConfigMap",
        &other,
        "victim",
    )])
    .await;
    health_pass(&f.ctx, &HealthMemory::default(), &f.release().await)
        .await
        .unwrap()
        .unwrap();
    let inv = inventory(&f).await;
    let message = |name: &str| {
        inv.spec
            .inventory
            .iter()
            .find(|e| e.name == name)
            .and_then(|e| e.message.clone())
            .unwrap_or_default()
    };
    // Its own object is judged by the rule; the other namespace's is not read into anything.
    assert_eq!(message("a"), "rule all: value: 1");
    assert_eq!(entry_state(&inv, "victim"), Some(HealthState::Unknown));
    assert_eq!(
        message("victim"),
        format!(
            "ConfigMap/{other}/victim is not assessed: it is outside the Release's namespace and does not carry the Release's labels"
        )
    );
}

//! Release status shared by several field managers through SSA.

use convoy::engine::api::{Release, field_managers};
use convoy::engine::ssa;
use kube::Api;
use kube::api::PostParams;
use serde_json::{Value, json};

use crate::support::{TestEnv, owners_of};

pub fn release(namespace: &str, name: &str) -> Release {
    serde_json::from_value(json!({
        "apiVersion": "core.convoy.kumodo.io/v1alpha1",
        "kind": "Release",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"source": {"kind": "GitRepository", "name": "repo"}},
    }))
    .unwrap()
}

fn status_patch(name: &str, status: Value) -> Value {
    json!({
        "apiVersion": "core.convoy.kumodo.io/v1alpha1",
        "kind": "Release",
        "metadata": {"name": name},
        "status": status,
    })
}

fn condition(type_: &str, status: &str, reason: &str) -> Value {
    json!({
        "type": type_, "status": status, "reason": reason, "message": "",
        "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1,
    })
}

#[tokio::test]
async fn controller_and_observer_conditions_survive_each_others_writes() {
    let env = TestEnv::new("status-owners").await;
    let api: Api<Release> = Api::namespaced(env.client.clone(), &env.namespace);
    api.create(&PostParams::default(), &release(&env.namespace, "web"))
        .await
        .unwrap();

    let controller = status_patch(
        "web",
        json!({"conditions": [condition("Applied", "True", "Applied")], "pin": {"renderRef": "abc123"}}),
    );
    ssa::apply_status(&api, "web", field_managers::CONTROLLER, &controller)
        .await
        .unwrap();
    let observer = status_patch(
        "web",
        json!({"conditions": [condition("InSync", "True", "InSync")]}),
    );
    ssa::apply_status(&api, "web", field_managers::OBSERVE, &observer)
        .await
        .unwrap();
    // The controller writes again: the observer's condition must survive.
    ssa::apply_status(&api, "web", field_managers::CONTROLLER, &controller)
        .await
        .unwrap();

    let live = api.get("web").await.unwrap();
    let status = live.status.clone().unwrap();
    assert_eq!(status.condition("Applied").unwrap().status.as_str(), "True");
    assert_eq!(status.condition("InSync").unwrap().status.as_str(), "True");

    let object = serde_json::to_value(&live).unwrap();
    let applied = [
        "f:status",
        "f:conditions",
        "k:{\"type\":\"Applied\"}",
        "f:status",
    ];
    let in_sync = [
        "f:status",
        "f:conditions",
        "k:{\"type\":\"InSync\"}",
        "f:status",
    ];
    assert_eq!(owners_of(&object, &applied), ["convoy-release"]);
    assert_eq!(owners_of(&object, &in_sync), ["convoy-observe"]);
    assert_eq!(
        owners_of(&object, &["f:status", "f:pin"]),
        ["convoy-release"]
    );
}

#[tokio::test]
async fn a_manager_that_omits_a_field_it_sent_before_clears_it() {
    let env = TestEnv::new("status-unpin").await;
    let api: Api<Release> = Api::namespaced(env.client.clone(), &env.namespace);
    api.create(&PostParams::default(), &release(&env.namespace, "web"))
        .await
        .unwrap();

    let pinned = status_patch(
        "web",
        json!({"conditions": [condition("Applied", "True", "Applied")], "pin": {"renderRef": "abc123"}}),
    );
    ssa::apply_status(&api, "web", field_managers::CONTROLLER, &pinned)
        .await
        .unwrap();
    let observer = status_patch(
        "web",
        json!({"conditions": [condition("InSync", "False", "OutOfSync")]}),
    );
    ssa::apply_status(&api, "web", field_managers::OBSERVE, &observer)
        .await
        .unwrap();
    assert_eq!(
        api.get("web")
            .await
            .unwrap()
            .status
            .unwrap()
            .pin
            .unwrap()
            .render_ref,
        "abc123"
    );

    // An unpin: the controller's next patch has no `pin`.
    let unpinned = status_patch(
        "web",
        json!({"conditions": [condition("Applied", "True", "Applied")]}),
    );
    ssa::apply_status(&api, "web", field_managers::CONTROLLER, &unpinned)
        .await
        .unwrap();
    let status = api.get("web").await.unwrap().status.unwrap();
    assert_eq!(status.pin, None, "status.pin is cleared");
    assert_eq!(
        status.condition("InSync").unwrap().reason,
        "OutOfSync",
        "other writers keep their fields"
    );
}

#[tokio::test]
async fn a_status_write_keeps_the_generation_and_a_spec_change_bumps_it() {
    let env = TestEnv::new("status-generation").await;
    let api: Api<Release> = Api::namespaced(env.client.clone(), &env.namespace);
    let created = api
        .create(&PostParams::default(), &release(&env.namespace, "web"))
        .await
        .unwrap();
    let generation = created.metadata.generation.unwrap();

    let patch = status_patch(
        "web",
        json!({"conditions": [condition("Applied", "False", "WaitingForSync")]}),
    );
    let after_status = ssa::apply_status(&api, "web", field_managers::CONTROLLER, &patch)
        .await
        .unwrap();
    assert_eq!(after_status.metadata.generation, Some(generation));
    assert_ne!(
        after_status.metadata.resource_version,
        created.metadata.resource_version
    );

    let spec = json!({
        "apiVersion": "core.convoy.kumodo.io/v1alpha1", "kind": "Release",
        "metadata": {"name": "web"},
        "spec": {"source": {"kind": "GitRepository", "name": "repo"}, "targetNamespace": "apps"},
    });
    let after_spec = ssa::apply(&api, "web", field_managers::CLI, &spec)
        .await
        .unwrap();
    assert_eq!(after_spec.metadata.generation, Some(generation + 1));
}

//! The CRDs as the API server serves them.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use std::time::Duration;

use kube::Api;

use crate::support::TestEnv;

/// The message of the API server's 422 for creating `object` (a panic if it is created, or
/// refused otherwise).
async fn refused<K>(api: &Api<K>, object: &K) -> String
where
    K: Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let err = api.create(&Default::default(), object).await.unwrap_err();
    let kube::Error::Api(status) = err else {
        panic!("{err}")
    };
    assert_eq!(status.code, 422, "{}", status.message);
    status.message
}

#[tokio::test]
async fn every_crd_is_established_with_its_list_map_markers() {
    let env = TestEnv::new("crds").await;
    let api: Api<CustomResourceDefinition> = Api::all(env.client.clone());
    for crd in convoy::engine::api::crds() {
        let name = crd.metadata.name.clone().unwrap();
        let live = api.get(&name).await.unwrap();
        let established = live
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .any(|c| c.type_ == "Established" && c.status.as_str() == "True");
        assert!(established, "{name} is not Established");
    }

    let release =
        serde_json::to_value(api.get("releases.core.convoy.kumodo.io").await.unwrap()).unwrap();
    let version = &release["spec"]["versions"][0];
    assert!(
        version["subresources"]["status"].is_object(),
        "Release has a status subresource"
    );
    let conditions =
        &version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["conditions"];
    assert_eq!(conditions["x-kubernetes-list-type"], "map");
    assert_eq!(
        conditions["x-kubernetes-list-map-keys"],
        serde_json::json!(["type"])
    );

    let inventory = serde_json::to_value(
        api.get("releaseinventories.core.convoy.kumodo.io")
            .await
            .unwrap(),
    )
    .unwrap();
    let version = &inventory["spec"]["versions"][0];
    assert!(
        version["subresources"]["status"].is_null(),
        "ReleaseInventory has no status subresource"
    );
    let props = &version["schema"]["openAPIV3Schema"]["properties"];
    assert_eq!(props["inventory"]["x-kubernetes-list-type"], "map");
    assert_eq!(
        props["inventory"]["x-kubernetes-list-map-keys"],
        serde_json::json!(["group", "kind", "namespace", "name"])
    );
    assert_eq!(props["hooks"]["x-kubernetes-list-type"], "map");
    assert_eq!(
        props["hooks"]["x-kubernetes-list-map-keys"],
        serde_json::json!(["name", "phase"])
    );
    // One writer sends all of it (issue 21: cheaper than a list-map of 1,000 entries).
    assert_eq!(props["pending"]["x-kubernetes-list-type"], "atomic");
    assert!(props["pending"]["x-kubernetes-list-map-keys"].is_null());
}

/// An inventory an older convoy wrote while `pending` was a list-map keeps working after
/// `convoy install` makes it atomic: the next Put replaces the pending objects and the Put
/// after it clears them, and the writer then owns `pending` as one field. Run on a copy of
/// the CRD under a group of this test's own, so no other test sees the schema change.
#[tokio::test]
async fn pending_written_as_a_list_map_is_replaced_and_cleared_after_the_upgrade() {
    use convoy::engine::api::{ReleaseInventory, field_managers};
    use kube::CustomResourceExt;
    use kube::api::{ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
    use serde_json::json;

    use crate::support::eventually;

    let env = TestEnv::new("pending-upgrade").await;
    let group = format!("{}.upgrade.convoy.test", env.namespace);
    let crds: Api<CustomResourceDefinition> = Api::all(env.client.clone());
    let mut current = serde_json::to_value(ReleaseInventory::crd()).unwrap();
    current["metadata"]["name"] = json!(format!("releaseinventories.{group}"));
    current["spec"]["group"] = json!(group);
    let mut old = current.clone();
    let pending =
        &mut old["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["pending"];
    pending["x-kubernetes-list-type"] = json!("map");
    pending["x-kubernetes-list-map-keys"] = json!(["group", "kind", "namespace", "name"]);
    let created = crds
        .create(
            &PostParams::default(),
            &serde_json::from_value(old).unwrap(),
        )
        .await
        .unwrap();
    let name = created.metadata.name.clone().unwrap();

    let resource = ApiResource {
        group: group.clone(),
        version: "v1alpha1".into(),
        api_version: format!("{group}/v1alpha1"),
        kind: "ReleaseInventory".into(),
        plural: "releaseinventories".into(),
    };
    let inventories: Api<DynamicObject> =
        Api::namespaced_with(env.client.clone(), &env.namespace, &resource);
    let put = PatchParams::apply(field_managers::INVENTORY.as_str());
    let entry =
        |name: &str| json!({"group": "", "kind": "ConfigMap", "namespace": "ns", "name": name});
    let doc = |name: &str, pending: Option<Vec<serde_json::Value>>| {
        let mut doc = json!({
            "apiVersion": format!("{group}/v1alpha1"),
            "kind": "ReleaseInventory",
            "metadata": {"name": name},
            "inventory": [entry("kept")],
        });
        if let Some(p) = pending {
            doc["pending"] = json!(p);
        }
        doc
    };
    let put_inventory = |name: &'static str, pending: Option<Vec<serde_json::Value>>| {
        let patch = Patch::Apply(doc(name, pending));
        let (inventories, put) = (&inventories, &put);
        async move { inventories.patch(name, put, &patch).await }
    };
    // What `pending` looks like in the writer's managedFields.
    let owned_pending = |o: &DynamicObject| {
        o.metadata
            .managed_fields
            .iter()
            .flatten()
            .find(|m| m.manager.as_deref() == Some(field_managers::INVENTORY.as_str()))
            .and_then(|m| m.fields_v1.as_ref())
            .map(|f| f.0["f:pending"].clone())
            .unwrap_or_default()
    };
    let written = eventually(
        "the list-map schema to serve",
        Duration::from_secs(30),
        || async {
            put_inventory("old", Some(vec![entry("a"), entry("b")]))
                .await
                .ok()
        },
    )
    .await;
    let granular = owned_pending(&written);
    assert!(
        granular.as_object().is_some_and(|f| f.len() > 1),
        "before the upgrade, each pending entry is tracked: {granular}"
    );

    let mut replaced = crds.get(&name).await.unwrap();
    let mut spec = serde_json::to_value(&replaced.spec).unwrap();
    spec["versions"] = current["spec"]["versions"].clone();
    replaced.spec = serde_json::from_value(spec).unwrap();
    crds.replace(&name, &PostParams::default(), &replaced)
        .await
        .unwrap();
    // The API server takes up a changed schema a moment later: wait until a new object's
    // `pending` is owned as a whole.
    eventually(
        "the atomic schema to serve",
        Duration::from_secs(30),
        || async {
            let probe = put_inventory("probe", Some(vec![entry("a")])).await.ok()?;
            (owned_pending(&probe) == json!({})).then_some(())
        },
    )
    .await;

    let again = put_inventory("old", Some(vec![entry("c")])).await.unwrap();
    assert_eq!(again.data["pending"], json!([entry("c")]));
    assert_eq!(
        owned_pending(&again),
        json!({}),
        "pending is owned as a whole"
    );
    let cleared = put_inventory("old", None).await.unwrap();
    assert!(cleared.data.get("pending").is_none(), "{:?}", cleared.data);
    assert_eq!(cleared.data["inventory"], json!([entry("kept")]));
    assert!(owned_pending(&cleared).is_null());

    crds.delete(&name, &DeleteParams::default()).await.unwrap();
}

#[tokio::test]
async fn kubectl_get_releases_shows_the_printer_columns() {
    let env = TestEnv::new("printer-columns").await;
    let release = format!(
        "apiVersion: core.convoy.kumodo.io/v1alpha1\nkind: Release\nmetadata:\n  name: web\n  namespace: {}\n\
spec:\n  source:\n    kind: GitRepository\n    name: repo\n",
        env.namespace
    );
    env.kubectl_apply_text(&release, &["--server-side"]);

    let out = env.kubectl(&["get", "releases", "-n", &env.namespace]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let header: Vec<&str> = stdout.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "STATE", "APPLIED", "INSYNC", "HEALTHY", "AGE"]
    );
    assert!(stdout.lines().nth(1).unwrap().starts_with("web "));
}

#[tokio::test]
async fn the_api_server_refuses_a_duration_that_is_not_one() {
    use convoy::engine::api::Release;
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
    let env = TestEnv::new("durations").await;
    // Sent as plain JSON, the way kubectl or another client would: convoy's own types cannot
    // even hold such a value.
    let gvk = GroupVersionKind::gvk("core.convoy.kumodo.io", "v1alpha1", "Release");
    let api: Api<DynamicObject> = Api::namespaced_with(
        env.client.clone(),
        &env.namespace,
        &ApiResource::from_gvk(&gvk),
    );
    let release = |interval: &str| {
        serde_json::json!({
            "apiVersion": "core.convoy.kumodo.io/v1alpha1", "kind": "Release",
            "metadata": {"name": "web"},
            "spec": {"source": {"kind": "GitRepository", "name": "repo"},
                     "syncPolicy": {"interval": interval},
                     "failurePolicy": {"deadline": "1m30s"}},
        })
    };
    let object =
        |interval: &str| -> DynamicObject { serde_json::from_value(release(interval)).unwrap() };
    let message = refused(&api, &object("5 minutes")).await;
    assert!(message.contains("spec.syncPolicy.interval"), "{message}");
    let parse = serde_json::from_value::<Release>(release("5 minutes")).unwrap_err();
    assert!(
        parse.to_string().contains("invalid duration \"5 minutes\""),
        "{parse}"
    );
    let created = api
        .create(&Default::default(), &object("1.5h"))
        .await
        .unwrap();
    let typed: Release = serde_json::from_value(serde_json::to_value(created).unwrap()).unwrap();
    let interval = typed.spec.sync_policy.unwrap().interval.unwrap();
    assert_eq!(
        (interval.as_str(), interval.get().as_secs()),
        ("1.5h", 5400)
    );
}

#[tokio::test]
async fn a_hook_must_set_exactly_one_of_job_and_pod() {
    use convoy::engine::api::Release;
    let env = TestEnv::new("hook-shape").await;
    let api: Api<Release> = Api::namespaced(env.client.clone(), &env.namespace);
    let release = |name: &str, hook: serde_json::Value| {
        serde_json::from_value::<Release>(serde_json::json!({
            "apiVersion": "core.convoy.kumodo.io/v1alpha1", "kind": "Release",
            "metadata": {"name": name},
            "spec": {"source": {"kind": "GitRepository", "name": "repo"},
                     "lifecycle": {"hooks": [hook]}},
        }))
        .unwrap()
    };
    let spec = serde_json::json!({"containers": [{"name": "x", "image": "busybox"}]});
    for (name, hook) in [
        (
            "neither",
            serde_json::json!({"name": "h", "phase": "preSync"}),
        ),
        (
            "both",
            serde_json::json!({"name": "h", "phase": "preSync", "pod": spec,
                               "job": {"template": {"spec": spec}}}),
        ),
    ] {
        let message = refused(&api, &release(name, hook)).await;
        assert!(
            message.contains("a hook sets exactly one of job and pod"),
            "{name}: {message}"
        );
    }
    api.create(
        &Default::default(),
        &release(
            "pod",
            serde_json::json!({"name": "h", "phase": "preSync", "pod": spec}),
        ),
    )
    .await
    .unwrap();
    // A name shaped like a content hook's entry (Kind/namespace/name) is refused.
    let slash = release(
        "slash",
        serde_json::json!({"name": "Secret/kube-system/token", "phase": "preDelete", "pod": spec}),
    );
    let message = refused(&api, &slash).await;
    assert!(
        message.contains("spec.lifecycle.hooks[0].name"),
        "{message}"
    );
    // Two hooks of one name in one phase would share one inventory entry: refused too; in
    // two phases they are two entries.
    let twice = |name: &str, second_phase: &str| {
        let mut r = release(
            name,
            serde_json::json!({"name": "h", "phase": "preSync", "pod": spec}),
        );
        let lifecycle = r.spec.lifecycle.as_mut().unwrap();
        let mut second = lifecycle.hooks[0].clone();
        second.phase = serde_json::from_value(serde_json::json!(second_phase)).unwrap();
        lifecycle.hooks.push(second);
        r
    };
    let message = refused(&api, &twice("twice", "preSync")).await;
    assert!(message.contains("Duplicate value"), "{message}");
    api.create(&Default::default(), &twice("two-phases", "postSync"))
        .await
        .unwrap();
}

#[tokio::test]
async fn aggregated_discovery_finds_what_per_group_discovery_finds() {
    use convoy::engine::render::ClusterInfo;
    let env = TestEnv::new("discovery").await;
    let fast = ClusterInfo::discover(&env.client).await.unwrap();
    let slow = ClusterInfo::discover_per_group_version(&env.client)
        .await
        .unwrap();
    assert_eq!(fast.kube_version, slow.kube_version);
    assert_eq!(fast.api_versions, slow.api_versions);
    assert_eq!(fast.scopes, slow.scopes);
    assert!(
        fast.api_versions.iter().any(|v| v == "apps/v1/Deployment"),
        "{:?}",
        fast.api_versions
    );
    assert_eq!(
        fast.scopes.get(&("".to_string(), "Namespace".to_string())),
        Some(&false)
    );
}

/// A source's URL is kept, with every error that quotes it, in the daemon's memory for each
/// fetch: the API server refuses one longer than 2,048 bytes, of each source kind.
#[tokio::test]
async fn the_api_server_refuses_a_source_url_longer_than_2048_bytes() {
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
    let env = TestEnv::new("url-length").await;
    for (kind, scheme) in [
        ("GitRepository", "https://"),
        ("HelmRegistry", "https://"),
        ("OCIRegistry", "oci://"),
    ] {
        let gvk = GroupVersionKind::gvk("source.convoy.kumodo.io", "v1alpha1", kind);
        let api: Api<DynamicObject> = Api::namespaced_with(
            env.client.clone(),
            &env.namespace,
            &ApiResource::from_gvk(&gvk),
        );
        let object = |name: &str, length: usize| -> DynamicObject {
            let host = "h".repeat(length - scheme.len() - "/r".len());
            serde_json::from_value(serde_json::json!({
                "apiVersion": "source.convoy.kumodo.io/v1alpha1", "kind": kind,
                "metadata": {"name": name},
                "spec": {"url": format!("{scheme}{host}/r")},
            }))
            .unwrap()
        };
        let message = refused(&api, &object("long", 2049)).await;
        assert!(
            message.contains("spec.url: Too long: may not be more than 2048 bytes"),
            "{kind}: {message}"
        );
        api.create(&Default::default(), &object("longest", 2048))
            .await
            .unwrap();
    }
}

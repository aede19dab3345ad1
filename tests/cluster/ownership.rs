//! Objects convoy shares with others, on the real control plane: two Releases rendering one
//! object, objects kubectl made before convoy, and objects a stopped sync left unrecorded.

use convoy::engine::api::{Reason, ReleaseInventory};
use convoy::engine::inventory::members;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use serde_json::{Value, json};

use crate::support::fixture::{Fixture, config_map, core_key, deployment};
use crate::support::owners_of;

fn adopted(manifest: &str) -> String {
    manifest.replace(
        "  annotations:\n",
        "  annotations:\n    convoy.kumodo.io/adopt: \"true\"\n",
    )
}

fn owner_label(cm: &Value) -> (String, String) {
    let labels = &cm["metadata"]["labels"];
    (
        labels["convoy.kumodo.io/release-namespace"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        labels["convoy.kumodo.io/release"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    )
}

async fn inventory_keys(f: &Fixture, name: &str) -> Vec<String> {
    let api: Api<ReleaseInventory> = Api::namespaced(f.env.client.clone(), &f.env.namespace);
    let inventory = api.get(name).await.unwrap();
    members(&inventory).iter().map(|e| e.name.clone()).collect()
}

#[tokio::test]
async fn a_second_release_is_refused_another_releases_object_until_it_adopts_it() {
    let f = Fixture::new(
        "owner-two",
        &[
            ("shared.yaml", &config_map("shared", 0, "from-a")),
            ("a.yaml", &config_map("a", 0, "1")),
        ],
        json!({}),
    )
    .await;
    let ns = f.env.namespace.clone();
    f.repo.commit(
        &[
            ("b/shared.yaml", &config_map("shared", 0, "from-b")),
            ("b/b.yaml", &config_map("b", 0, "1")),
        ],
        "b",
    );
    f.add_release("b", "b", json!({})).await;
    assert_eq!(f.sync().await.outcome.unwrap().reason, Reason::Applied);
    let shared = f.config_map("shared").await.unwrap();
    assert_eq!(owner_label(&shared), (ns.clone(), "web".to_string()));

    // B renders A's object: stopped before anything of B is applied.
    let refused = f.sync_named("b").await.outcome.unwrap();
    assert_eq!(refused.reason, Reason::Unappliable);
    assert_eq!(
        refused.message,
        format!(
            "nothing was applied: ConfigMap/{ns}/shared belongs to Release {ns}/web (to hand an object over, set the annotation convoy.kumodo.io/adopt: \"true\" on it in this render)"
        )
    );
    assert!(f.config_map("b").await.is_none());
    assert_eq!(
        f.config_map("shared").await.unwrap()["data"]["value"],
        "from-a"
    );

    // B adopts it explicitly: it is B's now.
    f.repo.commit(
        &[(
            "b/shared.yaml",
            &adopted(&config_map("shared", 0, "from-b")),
        )],
        "b adopts shared",
    );
    let outcome = f.sync_named("b").await.outcome.unwrap();
    assert_eq!(outcome.reason, Reason::Applied, "{}", outcome.message);
    let shared = f.config_map("shared").await.unwrap();
    assert_eq!(owner_label(&shared), (ns.clone(), "b".to_string()));
    assert_eq!(shared["data"]["value"], "from-b");

    // A stops rendering it: A's prune leaves B's object alone and drops it from A's inventory.
    f.commit(&[("a.yaml", &config_map("a", 0, "1"))]);
    let outcome = f.sync().await.outcome.unwrap();
    assert_eq!(outcome.reason, Reason::Applied, "{}", outcome.message);
    assert!(
        outcome.message.ends_with(&format!(
            "; left to other Releases, not pruned: ConfigMap/{ns}/shared now belongs to Release {ns}/b"
        )),
        "{}",
        outcome.message
    );
    assert!(f.config_map("shared").await.is_some(), "B's object stays");
    assert_eq!(inventory_keys(&f, "web").await, ["a"]);
}

#[tokio::test]
async fn deleting_a_release_leaves_objects_another_release_took_over() {
    let f = Fixture::new(
        "owner-delete",
        &[
            ("shared.yaml", &config_map("shared", 0, "from-a")),
            ("a.yaml", &config_map("a", 0, "1")),
        ],
        json!({}),
    )
    .await;
    f.repo.commit(
        &[(
            "b/shared.yaml",
            &adopted(&config_map("shared", 0, "from-b")),
        )],
        "b",
    );
    f.add_release("b", "b", json!({})).await;
    f.sync().await;
    assert_eq!(
        f.sync_named("b").await.outcome.unwrap().reason,
        Reason::Applied
    );
    // A still lists `shared` in its inventory; its deletion deletes only what is still A's.
    assert_eq!(inventory_keys(&f, "web").await, ["a", "shared"]);
    // And kubectl's object, which a sync of A stopped before sending (its intent lists it).
    let ns = f.env.namespace.clone();
    f.env.kubectl_apply_text(
        &config_map("kubectls", 0, "mine")
            .replace("  labels: {app: demo}\n", &format!("  namespace: {ns}\n")),
        &["--server-side"],
    );
    let handle = convoy::engine::inventory::InventoryHandle::for_release(
        f.env.client.clone(),
        &f.release().await,
    );
    let inventory = handle.get().await.unwrap().unwrap();
    let recorded: Vec<_> = members(&inventory)
        .iter()
        .map(|e| convoy::engine::inventory::Member::from_entry(e))
        .collect();
    let kubectls = convoy::engine::api::ObjectKey {
        group: String::new(),
        kind: "ConfigMap".into(),
        namespace: ns,
        name: "kubectls".into(),
    };
    handle
        .put_with_pending(&recorded, &[kubectls])
        .await
        .unwrap();
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
        f.config_map("a").await.is_none(),
        "A's own object is pruned"
    );
    let shared = f.config_map("shared").await.expect("B's object stays");
    assert_eq!(
        shared["metadata"]["labels"]["convoy.kumodo.io/release"],
        "b"
    );
    let kubectls = f
        .config_map("kubectls")
        .await
        .expect("kubectl's object stays");
    assert_eq!(kubectls["data"]["value"], "mine");
}

/// A Deployment made with `kubectl apply` (client-side), then adopted: kubectl's fields move
/// to convoy, so an env var and an annotation removed from the render leave the object; a
/// field another controller owns stays.
#[tokio::test]
async fn adopting_an_object_kubectl_made_takes_over_kubectls_fields_only() {
    let with_extras = deployment("api", 0, 1)
        .replace(
            "  annotations:\n",
            "  annotations:\n    team.example.com/note: from-kubectl\n",
        )
        .replace(
            "        image: nginx:1.27\n",
            "        image: nginx:1.27\n        env:\n        - {name: LEGACY, value: \"1\"}\n",
        );
    let f = Fixture::new("owner-kubectl", &[("api.yaml", &with_extras)], json!({})).await;
    let ns = f.env.namespace.clone();
    // kubectl made it first (client-side apply), and a controller owns a field of its own.
    f.env.kubectl_apply_text(
        &with_extras.replace(
            "  name: api\n",
            &format!("  name: api\n  namespace: {ns}\n"),
        ),
        &[],
    );
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(f.env.client.clone(), &ns);
    deployments
        .patch(
            "api",
            &kube::api::PatchParams {
                field_manager: Some("hpa-controller".into()),
                ..Default::default()
            },
            &kube::api::Patch::Merge(json!({"spec": {"minReadySeconds": 5}})),
        )
        .await
        .unwrap();
    let live = serde_json::to_value(deployments.get("api").await.unwrap()).unwrap();
    assert!(
        live["metadata"]["annotations"]
            .get("kubectl.kubernetes.io/last-applied-configuration")
            .is_some()
    );

    // The diff says it will adopt, naming kubectl's managers.
    let diff = f.env.convoy(&["diff", "web"]);
    let text = String::from_utf8_lossy(&diff.stdout);
    assert!(
        text.contains(&format!(
            "~ Deployment.apps/{ns}/api (render change; adopt from kubectl-client-side-apply)"
        )),
        "{text}"
    );

    // Adopted with the render as it is, then the env var and annotation leave the render.
    assert_eq!(f.sync().await.outcome.unwrap().reason, Reason::Applied);
    f.commit(&[("api.yaml", &deployment("api", 0, 1))]);
    let outcome = f.sync().await.outcome.unwrap();
    assert_eq!(outcome.reason, Reason::Applied, "{}", outcome.message);
    let live = serde_json::to_value(deployments.get("api").await.unwrap()).unwrap();
    let annotations = &live["metadata"]["annotations"];
    assert!(annotations.get("team.example.com/note").is_none(), "{live}");
    assert!(
        annotations
            .get("kubectl.kubernetes.io/last-applied-configuration")
            .is_none(),
        "{live}"
    );
    let container = &live["spec"]["template"]["spec"]["containers"][0];
    assert!(container.get("env").is_none(), "{container}");
    let managers: Vec<&str> = live["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["manager"].as_str())
        .collect();
    assert!(
        !managers.iter().any(|m| m.starts_with("kubectl")),
        "{managers:?}"
    );
    assert_eq!(live["spec"]["minReadySeconds"], 5);
    assert_eq!(
        owners_of(&live, &["f:spec", "f:minReadySeconds"]),
        ["hpa-controller"]
    );
}

/// Objects a stopped sync applied before it recorded them are found from the inventory's
/// pending list: the next sync of a render without them prunes them. A pending object the
/// sync never sent (kubectl's, which it was about to adopt: no convoy labels) is left as it
/// is and dropped from the inventory.
#[tokio::test]
async fn objects_a_stopped_sync_left_unrecorded_are_pruned_after_a_revert() {
    let f = Fixture::new(
        "owner-pending",
        &[("a.yaml", &config_map("a", 0, "1"))],
        json!({}),
    )
    .await;
    f.sync().await;
    let ns = f.env.namespace.clone();
    // What a process killed during a wave leaves: the objects applied (labelled, as convoy
    // sends them), the inventory Put before the wave (with them pending), no Put after.
    let release = f.release().await;
    let handle =
        convoy::engine::inventory::InventoryHandle::for_release(f.env.client.clone(), &release);
    let inventory = handle.get().await.unwrap().unwrap();
    let recorded: Vec<_> = members(&inventory)
        .iter()
        .map(|e| convoy::engine::inventory::Member::from_entry(e))
        .collect();
    let key = |name: &str| convoy::engine::api::ObjectKey {
        group: String::new(),
        kind: "ConfigMap".into(),
        namespace: ns.clone(),
        name: name.into(),
    };
    let mut pending = Vec::new();
    for i in 0..5 {
        let name = format!("orphan-{i}");
        f.env.kubectl_apply_text(
            &config_map(&name, 0, "x").replace(
                "  labels: {app: demo}\n",
                &format!(
                    "  namespace: {ns}\n  labels: {{app: demo, convoy.kumodo.io/release: web, convoy.kumodo.io/release-namespace: {ns}}}\n"
                ),
            ),
            &["--server-side", "--field-manager=convoy-release"],
        );
        pending.push(key(&name));
    }
    // Listed in the intent, never sent: kubectl's object as it was before the sync.
    f.env.kubectl_apply_text(
        &config_map("kubectls", 0, "mine")
            .replace("  labels: {app: demo}\n", &format!("  namespace: {ns}\n")),
        &["--server-side"],
    );
    pending.push(key("kubectls"));
    // Listed in the intent, never created: nothing to delete, and not counted as pruned.
    pending.push(key("never-created"));
    handle.put_with_pending(&recorded, &pending).await.unwrap();
    // The render (reverted) does not hold them: convoy's are pruned, kubectl's is left as
    // found, and pending is cleared.
    let outcome = f.sync().await.outcome.unwrap();
    assert_eq!(outcome.reason, Reason::Applied, "{}", outcome.message);
    assert!(
        outcome.message.contains(&format!(
            "1 object, 5 pruned; left as found, not pruned (a stopped sync was about to apply them, and this Release never did): ConfigMap/{ns}/kubectls"
        )),
        "{}",
        outcome.message
    );
    let cms: Api<ConfigMap> = Api::namespaced(f.env.client.clone(), &ns);
    for key in &pending[..5] {
        assert!(
            cms.get_opt(&key.name).await.unwrap().is_none(),
            "{} left",
            key.name
        );
    }
    let kubectls = cms.get("kubectls").await.unwrap();
    assert_eq!(kubectls.data.unwrap()["value"], "mine");
    assert!(kubectls.metadata.labels.is_none());
    let inventory = handle.get().await.unwrap().unwrap();
    assert!(inventory.spec.pending.is_empty());
    assert_eq!(inventory_keys(&f, "web").await, ["a"]);
}

/// A prune deletes the object it read, not one created under its name since: the delete
/// carries the uid the read found, and a replaced object is left, reported, for the next sync.
#[tokio::test]
async fn a_prune_does_not_delete_an_object_created_under_the_name_since_it_read_it() {
    use convoy::engine::apply::{Applier, PruneTarget};
    let env = crate::support::TestEnv::new("prune-uid").await;
    let ns = env.namespace.clone();
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), &ns);
    let make = || {
        env.kubectl_apply_text(
            &config_map("x", 0, "v")
                .replace("  labels: {app: demo}\n", &format!("  namespace: {ns}\n")),
            &["--server-side"],
        )
    };
    make();
    let read = cms.get("x").await.unwrap().metadata.uid;
    // Replaced between the prune's read and its delete.
    cms.delete("x", &Default::default()).await.unwrap();
    crate::support::eventually("x gone", std::time::Duration::from_secs(10), || async {
        cms.get_opt("x").await.unwrap().is_none().then_some(())
    })
    .await;
    make();
    let now = cms.get("x").await.unwrap().metadata.uid;
    assert_ne!(read, now);
    let target = |uid| PruneTarget {
        key: convoy::engine::api::ObjectKey {
            group: String::new(),
            kind: "ConfigMap".into(),
            namespace: ns.clone(),
            name: "x".into(),
        },
        wave: 0,
        intent_only: false,
        uid,
    };
    let applier = Applier::new(env.client.clone(), 4);
    let report = applier.prune(&[target(read)]).await.unwrap();
    assert!(report.deleted.is_empty());
    assert_eq!(
        report.failures[0].message,
        "another object took its name since the prune read it; not deleted, the next sync looks again"
    );
    assert_eq!(cms.get("x").await.unwrap().metadata.uid, now);
    // The object it read is deleted.
    let report = applier.prune(&[target(now)]).await.unwrap();
    assert_eq!(report.deleted.len(), 1);
    crate::support::eventually("x deleted", std::time::Duration::from_secs(10), || async {
        cms.get_opt("x").await.unwrap().is_none().then_some(())
    })
    .await;
}

/// An inventory is a record that whoever may write it can change. Entries naming objects
/// convoy never labelled for the Release (a ConfigMap of another namespace, that namespace
/// itself, kubectl's ConfigMap beside the Release) make neither the next sync nor the
/// Release's deletion delete anything, though convoy's own identity here could: the sync says
/// what it left and its inventory forgets them; `convoy diff` says why they stay.
#[tokio::test]
async fn inventory_entries_naming_objects_convoy_did_not_label_delete_nothing() {
    let f = Fixture::new(
        "owner-forged",
        &[("a.yaml", &config_map("a", 0, "1"))],
        json!({}),
    )
    .await;
    f.sync().await;
    let ns = f.env.namespace.clone();
    let other = crate::support::unique_namespace(&f.env.client, "owner-forged-victim").await;
    for (namespace, name) in [(&other, "victim"), (&ns, "kubectls")] {
        f.env.kubectl_apply_text(
            &config_map(name, 0, "theirs").replace(
                "  labels: {app: demo}\n",
                &format!("  namespace: {namespace}\n"),
            ),
            &["--server-side"],
        );
    }
    let forged = [
        core_key("ConfigMap", &other, "victim"),
        core_key("Namespace", "", &other),
        core_key("ConfigMap", &ns, "kubectls"),
    ];
    let forge = || f.record_in_inventory(&forged);
    let all_there = || async {
        let cms = |namespace: &str| -> Api<ConfigMap> {
            Api::namespaced(f.env.client.clone(), namespace)
        };
        let victim = cms(&other)
            .get("victim")
            .await
            .expect("the other namespace's ConfigMap stays");
        assert_eq!(victim.data.unwrap()["value"], "theirs");
        assert!(
            cms(&ns).get_opt("kubectls").await.unwrap().is_some(),
            "kubectl's ConfigMap stays"
        );
        let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(f.env.client.clone());
        let namespace = namespaces.get(&other).await.unwrap();
        assert!(
            namespace.metadata.deletion_timestamp.is_none(),
            "the other namespace is being deleted"
        );
    };
    forge().await;

    // convoy diff shows them unchanged, and why: nothing to prune.
    let out = f.env.convoy(&["diff", "web"]);
    let diff = String::from_utf8_lossy(&out.stdout);
    let why = "(not pruned: does not carry this Release's labels)";
    for line in [
        format!("= ConfigMap/{other}/victim {why}"),
        format!("= Namespace/{other} {why}"),
        format!("= ConfigMap/{ns}/kubectls {why}"),
    ] {
        assert!(diff.contains(&line), "{line} not in:\n{diff}");
    }
    assert_eq!(
        out.status.code(),
        Some(0),
        "{diff}{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let outcome = f.sync().await.outcome.unwrap();
    assert_eq!(outcome.reason, Reason::Applied, "{}", outcome.message);
    assert_eq!(
        outcome.message,
        format!(
            "render {} applied: 1 object; left as found, not pruned (no longer recorded): they do not carry this Release's labels, and convoy deletes only what does (delete them yourself if they are to go): ConfigMap/{other}/victim; Namespace/{other}; ConfigMap/{ns}/kubectls",
            &recorded_render(&f).await[..12]
        )
    );
    all_there().await;
    assert_eq!(inventory_keys(&f, "web").await, ["a"]);

    // The Release's deletion: the same.
    forge().await;
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
        f.config_map("a").await.is_none(),
        "its own object is pruned"
    );
    all_there().await;
}

async fn recorded_render(f: &Fixture) -> String {
    let api: Api<ReleaseInventory> = Api::namespaced(f.env.client.clone(), &f.env.namespace);
    members(&api.get(&f.name).await.unwrap())[0]
        .render_ref
        .clone()
        .unwrap()
}

/// A recorded object whose labels the Release's ServiceAccount may not read (here it may
/// delete Secrets but not read them) is not deleted: whose it is cannot be told. It stays
/// recorded and the sync ends PruneFailed, saying why.
#[tokio::test]
async fn an_inventory_entry_whose_labels_cannot_be_read_is_not_deleted() {
    let f = Fixture::new(
        "owner-unreadable",
        &[("a.yaml", &config_map("a", 0, "1"))],
        json!({"serviceAccountName": "deployer"}),
    )
    .await;
    let ns = f.env.namespace.clone();
    f.kubectl_apply(&json!({"apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": "deployer", "namespace": ns}}))
        .await;
    f.kubectl_apply(
        &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "deployer", "namespace": ns},
        "rules": [
            {"apiGroups": [""], "resources": ["configmaps"],
             "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
            {"apiGroups": [""], "resources": ["secrets"], "verbs": ["delete"]}]}),
    )
    .await;
    f.kubectl_apply(
        &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "deployer", "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "deployer"},
        "subjects": [{"kind": "ServiceAccount", "name": "deployer", "namespace": ns}]}),
    )
    .await;
    let outcome = f.sync().await.outcome.unwrap();
    assert_eq!(outcome.reason, Reason::Applied, "{}", outcome.message);
    f.kubectl_apply(&json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "db", "namespace": ns}, "stringData": {"password": "hunter2"}}))
        .await;
    f.record_in_inventory(&[core_key("Secret", &ns, "db")])
        .await;

    let outcome = f.sync().await.outcome.unwrap();
    assert_eq!(outcome.reason, Reason::PruneFailed, "{}", outcome.message);
    assert!(
        outcome.message.starts_with(&format!(
            "cannot prune 1 object: Secret/{ns}/db: not deleted: cannot read it to check that it carries this Release's labels ("
        )) && outcome.message.contains("forbidden"),
        "{}",
        outcome.message
    );
    assert!(!outcome.message.contains("hunter2"));
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(f.env.client.clone(), &ns);
    assert!(
        secrets.get_opt("db").await.unwrap().is_some(),
        "the Secret was deleted"
    );
    assert_eq!(inventory_keys(&f, "web").await, ["a", "db"]);
}

/// An inventory entry whose name holds `..` segments would be read and deleted at another
/// object's URL (kube puts names into the path as they are). It is neither read nor deleted:
/// the sync ends PruneFailed saying why, the object its path leads to stays, and the health
/// assessment says why it cannot read it.
#[tokio::test]
async fn an_inventory_entry_whose_name_is_a_path_is_neither_read_nor_deleted() {
    let f = Fixture::new(
        "owner-path",
        &[("a.yaml", &config_map("a", 0, "1"))],
        json!({}),
    )
    .await;
    f.sync().await;
    let ns = f.env.namespace.clone();
    let other = crate::support::unique_namespace(&f.env.client, "owner-path-victim").await;
    f.env.kubectl_apply_text(
        &config_map("victim", 0, "theirs").replace(
            "  labels: {app: demo}\n",
            &format!("  namespace: {other}\n"),
        ),
        &["--server-side"],
    );
    let name = format!("../../{other}/configmaps/victim");
    f.record_in_inventory(&[core_key("ConfigMap", &ns, &name)])
        .await;
    let outcome = f.sync().await.outcome.unwrap();
    assert_eq!(outcome.reason, Reason::PruneFailed, "{}", outcome.message);
    assert_eq!(
        outcome.message,
        format!(
            "cannot prune 1 object: ConfigMap/{ns}/{name}: not deleted: cannot read it to check that it carries this Release's labels (its name may not contain /, %, ? or #)"
        )
    );
    let victims: Api<ConfigMap> = Api::namespaced(f.env.client.clone(), &other);
    assert!(victims.get_opt("victim").await.unwrap().is_some());
    // Nor does the health assessment read it.
    let out = f.env.convoy(&["health", "web", "--live"]);
    let health = String::from_utf8_lossy(&out.stdout);
    assert!(
        health.contains("its name may not contain /, %, ? or #"),
        "{health}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The inventory's hook entries are a record whoever may write the inventory can change too.
/// Entries naming objects no hook of the Release made (another namespace's Pod, a Namespace,
/// kubectl's ConfigMap beside the Release): the health loop reports nothing of the Pod (not
/// its termination message) and leaves its finalizer; the Release's deletion deletes none of
/// them, though convoy's own identity here could.
#[tokio::test]
async fn hook_entries_naming_objects_no_hook_made_read_and_delete_nothing() {
    use convoy::engine::api::HookPhase;
    use convoy::engine::hooks::HOOK_FINALIZER;
    use convoy::engine::inventory::{HookMember, InventoryHandle};
    use k8s_openapi::api::core::v1::{Namespace, Pod};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    let env = crate::support::TestEnv::without_controllers("owner-forged-hooks").await;
    let f = Fixture::in_env(env, &[("a.yaml", &config_map("a", 0, "1"))], json!({})).await;
    f.sync().await;
    let ns = f.env.namespace.clone();
    let other = crate::support::unique_namespace(&f.env.client, "owner-hooks-victim").await;
    f.env.kubectl_apply_text(
        &config_map("victim", 0, "theirs").replace(
            "  labels: {app: demo}\n",
            &format!("  namespace: {other}\n"),
        ),
        &["--server-side"],
    );
    f.env.kubectl_apply_text(
        &config_map("kubectls", 0, "mine")
            .replace("  labels: {app: demo}\n", &format!("  namespace: {ns}\n")),
        &["--server-side"],
    );
    // Another namespace's Pod that failed with a secret in its termination message, held by
    // the hook finalizer.
    let pods: Api<Pod> = Api::namespaced(f.env.client.clone(), &other);
    // No controllers here: the ServiceAccount a Pod needs is made by hand.
    f.kubectl_apply(&json!({"apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": "default", "namespace": other}}))
        .await;
    pods.create(
        &Default::default(),
        &serde_json::from_value(
            json!({"metadata": {"name": "runner", "finalizers": [HOOK_FINALIZER]},
            "spec": {"containers": [{"name": "main", "image": "busybox"}]}}),
        )
        .unwrap(),
    )
    .await
    .unwrap();
    pods.patch_status(
        "runner",
        &Default::default(),
        &kube::api::Patch::Merge(json!({"status": {"phase": "Failed", "containerStatuses": [{
            "name": "main", "image": "busybox", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"terminated": {"exitCode": 1, "message": "the password is hunter2"}}}]}})),
    )
    .await
    .unwrap();
    let release = f.release().await;
    let handle = InventoryHandle::for_release(f.env.client.clone(), &release);
    let now = Time(jiff::Timestamp::now());
    let member = |name: String, phase| HookMember {
        name,
        phase,
        workload_name: "runner".into(),
        created_at: now.clone(),
        render_ref: "0".repeat(64),
    };
    handle
        .put_hooks(&[
            member(format!("Pod/{other}/runner"), HookPhase::PostSync),
            member(format!("ConfigMap/{other}/victim"), HookPhase::PostDelete),
            member(format!("Namespace//{other}"), HookPhase::PostDelete),
            member(format!("ConfigMap/{ns}/kubectls"), HookPhase::PostDelete),
        ])
        .await
        .unwrap();

    // The health loop's poll.
    let inventory = handle.get().await.unwrap().unwrap();
    let polled = convoy::engine::health::pass::poll_hooks(&f.ctx, &release, &inventory, &now).await;
    let runner = polled
        .results
        .iter()
        .find(|r| r.name == format!("Pod/{other}/runner"))
        .expect("the Pod entry polled");
    assert_eq!(
        runner.message.as_deref(),
        Some("Pod runner is not a hook this Release made")
    );
    let finalizers = pods.get("runner").await.unwrap().metadata.finalizers;
    assert_eq!(finalizers, Some(vec![HOOK_FINALIZER.to_string()]));

    // The Release's deletion.
    f.releases()
        .delete("web", &Default::default())
        .await
        .unwrap();
    let release = f.release().await;
    convoy::engine::reconcile::sync_handler(&f.ctx, &release, 0)
        .await
        .unwrap();
    assert!(f.releases().get_opt("web").await.unwrap().is_none());
    let cms =
        |namespace: &str| -> Api<ConfigMap> { Api::namespaced(f.env.client.clone(), namespace) };
    assert!(
        cms(&other).get_opt("victim").await.unwrap().is_some(),
        "victim deleted"
    );
    assert!(
        cms(&ns).get_opt("kubectls").await.unwrap().is_some(),
        "kubectl's deleted"
    );
    let namespaces: Api<Namespace> = Api::all(f.env.client.clone());
    assert!(
        namespaces
            .get(&other)
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_none()
    );
    let runner = pods.get("runner").await.unwrap();
    assert!(runner.metadata.deletion_timestamp.is_none());
    assert_eq!(
        runner.metadata.finalizers,
        Some(vec![HOOK_FINALIZER.to_string()])
    );
    pods.patch(
        "runner",
        &Default::default(),
        &kube::api::Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
}

/// Adoption takes over kubectl's fields of the object as it is now: one read before the
/// waves (a controller has written to it since, as to a Deployment's status) is read again,
/// and the other writer's field stays theirs. A stale read failed the whole sync (a bare 422
/// from a JSON patch `test`); an object deleted meanwhile has nothing to take over, and one
/// labelled for another Release meanwhile is not taken over.
#[tokio::test]
async fn adoption_from_a_stale_read_takes_over_the_object_as_it_is_now() {
    let env = crate::support::TestEnv::new("owner-stale-adopt").await;
    let ns = env.namespace.clone();
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), &ns);
    // kubectl makes `name` (client-side); it is read; then another writer labels it.
    let read_then_labelled = |name: &'static str, labels: Value| {
        let (env, cms) = (&env, &cms);
        async move {
            env.kubectl_apply_text(
                &format!(
                    "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: {}}}\ndata: {{value: \"1\"}}\n",
                    env.namespace
                ),
                &[],
            );
            let read = serde_json::to_value(cms.get(name).await.unwrap()).unwrap();
            let params = kube::api::PatchParams {
                field_manager: Some("team-controller".into()),
                ..Default::default()
            };
            let patch = kube::api::Patch::Merge(json!({"metadata": {"labels": labels}}));
            cms.patch(name, &params, &patch).await.unwrap();
            read
        }
    };
    let stale = read_then_labelled("b", json!({"team": "a"})).await;
    let applier = convoy::engine::apply::Applier::new(env.client.clone(), 4);
    let key = core_key("ConfigMap", &ns, "b");
    let managers = convoy::engine::ownership::take_over_kubectl_fields(&applier, &key, &stale)
        .await
        .unwrap();
    assert_eq!(managers, ["kubectl-client-side-apply"]);
    let live = serde_json::to_value(cms.get("b").await.unwrap()).unwrap();
    assert_eq!(owners_of(&live, &["f:data", "f:value"]), ["convoy-release"]);
    assert_eq!(
        owners_of(&live, &["f:metadata", "f:labels", "f:team"]),
        ["team-controller"]
    );

    // Labelled for another Release since the read: not taken over (the dry-run gate judged
    // the owner the read named); the next sync judges the new one.
    let read = read_then_labelled(
        "c",
        json!({"convoy.kumodo.io/release": "other", "convoy.kumodo.io/release-namespace": ns}),
    )
    .await;
    let err = convoy::engine::ownership::take_over_kubectl_fields(
        &applier,
        &core_key("ConfigMap", &ns, "c"),
        &read,
    )
    .await
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("its owner changed while it was adopted from kubectl"),
        "{err}"
    );
    let live = serde_json::to_value(cms.get("c").await.unwrap()).unwrap();
    assert_eq!(
        owners_of(&live, &["f:data", "f:value"]),
        ["kubectl-client-side-apply"]
    );

    // Deleted since the read: nothing to take over, no error.
    cms.delete("b", &Default::default()).await.unwrap();
    let managers = convoy::engine::ownership::take_over_kubectl_fields(&applier, &key, &stale)
        .await
        .unwrap();
    assert!(managers.is_empty());
}

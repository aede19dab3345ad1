//! The ReleaseInventory's four writers share entries through list-map keys.

use convoy::engine::api::{HealthState, HookPhase, HookState, ObjectKey, Reason, ReleaseInventory};
use convoy::engine::inventory::{EntryHealth, HookMember, HookResult, InventoryHandle, Member};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Api;
use kube::api::ListParams;
use serde_json::{Value, json};

use crate::support::TestEnv;
use crate::support::fixture::{Fixture, config_map};

fn key(kind: &str, name: &str, ns: &str) -> ObjectKey {
    ObjectKey {
        group: if kind == "Deployment" {
            "apps".into()
        } else {
            String::new()
        },
        kind: kind.into(),
        namespace: ns.into(),
        name: name.into(),
    }
}

fn member(key: &ObjectKey, render_ref: &str, wave: i32) -> Member {
    Member {
        key: key.clone(),
        render_ref: render_ref.into(),
        wave,
        digest: None,
    }
}

fn time(s: &str) -> Time {
    Time(s.parse().unwrap())
}

/// The managers that own `field` of the list entry whose key matches `entry_key`.
fn entry_owners(object: &Value, list: &str, entry_key: &Value, field: &str) -> Vec<String> {
    let mut owners = Vec::new();
    for mf in object["metadata"]["managedFields"].as_array().unwrap() {
        let Some(items) = mf["fieldsV1"][format!("f:{list}")].as_object() else {
            continue;
        };
        for (k, fields) in items {
            let Some(raw) = k.strip_prefix("k:") else {
                continue;
            };
            let parsed: Value = serde_json::from_str(raw).unwrap();
            if &parsed == entry_key && fields.get(format!("f:{field}")).is_some() {
                owners.push(mf["manager"].as_str().unwrap().to_string());
            }
        }
    }
    owners.sort();
    owners
}

#[tokio::test]
async fn controller_and_health_loop_own_their_own_fields_of_an_entry() {
    let env = TestEnv::new("inventory-owners").await;
    let inv = InventoryHandle::new(env.client.clone(), &env.namespace, "web");
    let deploy = key("Deployment", "api", &env.namespace);
    let config = key("ConfigMap", "settings", &env.namespace);
    let written = inv
        .put(&[member(&deploy, "r1", 0), member(&config, "r1", 1)])
        .await
        .unwrap();

    let health = vec![
        EntryHealth {
            rule: None,
            key: deploy.clone(),
            state: HealthState::Progressing,
            message: Some("updatedReplicas 1 of 3".into()),
            first_unhealthy: Some(time("2026-01-01T00:00:00Z")),
            assessed_render_ref: Some("r1".into()),
        },
        EntryHealth {
            rule: None,
            key: config.clone(),
            state: HealthState::Healthy,
            message: None,
            first_unhealthy: None,
            assessed_render_ref: Some("r1".into()),
        },
    ];
    inv.write_inventory_health(&written, &health).await.unwrap();

    let live = inv.get().await.unwrap().unwrap();
    let entry = live
        .spec
        .inventory
        .iter()
        .find(|e| e.key() == deploy)
        .unwrap();
    assert_eq!(entry.render_ref.as_deref(), Some("r1"));
    assert_eq!(entry.wave, Some(0));
    assert_eq!(entry.state, Some(HealthState::Progressing));
    assert_eq!(entry.message.as_deref(), Some("updatedReplicas 1 of 3"));

    let object = serde_json::to_value(&live).unwrap();
    let k =
        json!({"group": "apps", "kind": "Deployment", "namespace": env.namespace, "name": "api"});
    assert_eq!(
        entry_owners(&object, "inventory", &k, "renderRef"),
        ["convoy-inventory"]
    );
    assert_eq!(
        entry_owners(&object, "inventory", &k, "wave"),
        ["convoy-inventory"]
    );
    assert_eq!(
        entry_owners(&object, "inventory", &k, "state"),
        ["convoy-health-inventory"]
    );
    assert_eq!(
        entry_owners(&object, "inventory", &k, "firstUnhealthy"),
        ["convoy-health-inventory"]
    );
    assert_eq!(
        entry_owners(&object, "inventory", &k, "assessedRenderRef"),
        ["convoy-health-inventory"]
    );

    // A new render from the controller keeps the health loop's fields.
    inv.put(&[member(&deploy, "r2", 0), member(&config, "r2", 1)])
        .await
        .unwrap();
    let live = inv.get().await.unwrap().unwrap();
    let entry = live
        .spec
        .inventory
        .iter()
        .find(|e| e.key() == deploy)
        .unwrap();
    assert_eq!(entry.render_ref.as_deref(), Some("r2"));
    assert_eq!(entry.state, Some(HealthState::Progressing));
    assert_eq!(entry.assessed_render_ref.as_deref(), Some("r1"));
}

#[tokio::test]
async fn put_and_put_hooks_do_not_clear_each_others_list() {
    let env = TestEnv::new("inventory-hooks").await;
    let inv = InventoryHandle::new(env.client.clone(), &env.namespace, "web");
    let deploy = key("Deployment", "api", &env.namespace);
    inv.put(&[member(&deploy, "r1", 0)]).await.unwrap();
    let hook = HookMember {
        name: "migrate".into(),
        phase: HookPhase::PreSync,
        workload_name: "web-migrate-r1".into(),
        created_at: time("2026-01-01T00:00:00Z"),
        render_ref: "r1".into(),
    };
    inv.put_hooks(std::slice::from_ref(&hook)).await.unwrap();
    inv.put(&[member(&deploy, "r2", 0)]).await.unwrap();

    let live = inv.get().await.unwrap().unwrap();
    assert_eq!(live.spec.inventory.len(), 1);
    assert_eq!(live.spec.hooks.len(), 1, "Put kept the hooks");

    inv.put_hooks(std::slice::from_ref(&hook)).await.unwrap();
    let live = inv.get().await.unwrap().unwrap();
    assert_eq!(
        live.spec.inventory[0].render_ref.as_deref(),
        Some("r2"),
        "PutHooks kept the inventory"
    );

    // The health loop's hook status shares the entry with PutHooks.
    let results = [HookResult {
        name: "migrate".into(),
        phase: HookPhase::PreSync,
        state: HookState::Succeeded,
        message: None,
        finished_at: Some(time("2026-01-01T00:01:00Z")),
    }];
    inv.write_hook_status(&live, &results).await.unwrap();
    inv.put_hooks(&[hook]).await.unwrap();
    let live = inv.get().await.unwrap().unwrap();
    assert_eq!(live.spec.hooks[0].state, Some(HookState::Succeeded));
    assert_eq!(
        live.spec.hooks[0].workload_name.as_deref(),
        Some("web-migrate-r1")
    );
}

#[tokio::test]
async fn a_put_without_an_entry_removes_it_even_with_health_fields_on_it() {
    let env = TestEnv::new("inventory-remove").await;
    let inv = InventoryHandle::new(env.client.clone(), &env.namespace, "web");
    let deploy = key("Deployment", "api", &env.namespace);
    let config = key("ConfigMap", "settings", &env.namespace);
    let written = inv
        .put(&[member(&deploy, "r1", 0), member(&config, "r1", 0)])
        .await
        .unwrap();
    let health = [EntryHealth {
        rule: None,
        key: config.clone(),
        state: HealthState::Healthy,
        message: None,
        first_unhealthy: None,
        assessed_render_ref: Some("r1".into()),
    }];
    let mut both = health.to_vec();
    both.push(EntryHealth {
        key: deploy.clone(),
        ..health[0].clone()
    });
    inv.write_inventory_health(&written, &both).await.unwrap();

    inv.put(&[member(&deploy, "r2", 0)]).await.unwrap();
    let live = inv.get().await.unwrap().unwrap();
    let keys: Vec<ObjectKey> = live.spec.inventory.iter().map(|e| e.key()).collect();
    assert_eq!(keys, std::slice::from_ref(&deploy));

    // A removal takes the whole entry, the health loop's fields of it included (README
    // "Deviations": membership is the controller's); the health loop keeps its fields of the
    // entries that stay, and nobody gains a field by the removal.
    let raw: Value = serde_json::to_value(
        kube::Api::<convoy::engine::api::ReleaseInventory>::namespaced(
            env.client.clone(),
            &env.namespace,
        )
        .get("web")
        .await
        .unwrap(),
    )
    .unwrap();
    let entry = |k: &ObjectKey| json!({"group": k.group, "kind": k.kind, "name": k.name, "namespace": k.namespace});
    assert_eq!(
        entry_owners(&raw, "inventory", &entry(&deploy), "state"),
        ["convoy-health-inventory"]
    );
    assert_eq!(
        entry_owners(&raw, "inventory", &entry(&deploy), "renderRef"),
        ["convoy-inventory"]
    );
    for field in ["state", "renderRef", "kind"] {
        assert_eq!(
            entry_owners(&raw, "inventory", &entry(&config), field),
            Vec::<String>::new(),
            "nobody owns {field} of the removed entry"
        );
    }
    let managers: Vec<(String, String)> = raw["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["manager"].as_str().unwrap().to_string(),
                m["operation"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert!(
        managers
            .iter()
            .all(|(m, op)| op == "Apply" || m == "convoy-inventory"),
        "only the controller's removal is an Update: {managers:?}"
    );
}

#[tokio::test]
async fn a_health_write_on_a_stale_read_is_refused() {
    let env = TestEnv::new("inventory-stale").await;
    let inv = InventoryHandle::new(env.client.clone(), &env.namespace, "web");
    let deploy = key("Deployment", "api", &env.namespace);
    let stale = inv.put(&[member(&deploy, "r1", 0)]).await.unwrap();
    inv.put(&[member(&deploy, "r2", 0)]).await.unwrap();
    let health = [EntryHealth {
        rule: None,
        key: deploy,
        state: HealthState::Healthy,
        message: None,
        first_unhealthy: None,
        assessed_render_ref: Some("r1".into()),
    }];
    let err = inv
        .write_inventory_health(&stale, &health)
        .await
        .unwrap_err();
    assert!(
        format!("{err:#}").contains("convoy-health-inventory"),
        "{err:#}"
    );

    // Nor does it bring back a deleted inventory.
    let read = inv.get().await.unwrap().unwrap();
    inv.delete().await.unwrap();
    assert!(inv.write_inventory_health(&read, &health).await.is_err());
    assert!(inv.get().await.unwrap().is_none());
}

/// A render of 20,000 objects would not fit in one ReleaseInventory: the sync refuses it
/// before applying anything, naming the limit, instead of applying what it cannot record.
#[tokio::test]
async fn a_render_too_large_for_its_inventory_is_refused_before_anything_is_applied() {
    let files: Vec<(String, String)> = (0..20_000)
        .map(|i| {
            (
                format!("cm-{i:05}.yaml"),
                crate::support::fixture::config_map(&format!("cm-{i:05}"), 0, "x"),
            )
        })
        .collect();
    let refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    let f = Fixture::new("inventory-too-large", &refs, json!({})).await;
    let outcome = f.sync().await.outcome.unwrap();
    assert_eq!(outcome.reason, Reason::Unappliable);
    assert!(
        outcome.message.starts_with("nothing was applied: the render has 20000 objects; recording them would take its ReleaseInventory to about"),
        "{}",
        outcome.message
    );
    assert!(
        outcome.message.contains("split the Release"),
        "{}",
        outcome.message
    );
    let cms: Api<ConfigMap> = Api::namespaced(f.env.client.clone(), &f.env.namespace);
    let applied = cms
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|c| {
            c.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with("cm-"))
        })
        .count();
    assert_eq!(applied, 0);
}

/// Without a wave health gate or sync hooks nothing can hold the next wave, so one intent
/// lists every wave's objects and one Put records the members after the last: a 3-wave
/// first sync writes the inventory twice, not 6 times, and every object is still in the
/// inventory (as pending) before it is sent.
#[tokio::test]
async fn waves_nothing_holds_apart_share_one_intent_and_one_members_write() {
    use futures::StreamExt;
    use kube::runtime::watcher::{self, Event};
    use kube::{ResourceExt, runtime::watcher::watcher};
    let f = Fixture::new(
        "inventory-writes",
        &[
            ("a.yaml", &config_map("a", 0, "1")),
            ("b.yaml", &config_map("b", 1, "1")),
            ("c.yaml", &config_map("c", 2, "1")),
        ],
        json!({}),
    )
    .await;
    let api: Api<ReleaseInventory> = Api::namespaced(f.env.client.clone(), &f.env.namespace);
    // Every version of the inventory, as (resourceVersion, members, pending).
    type Seen = Vec<(String, Vec<String>, Vec<String>)>;
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Seen::new()));
    let (ready_tx, ready) = tokio::sync::oneshot::channel();
    let record = seen.clone();
    let watching = api.clone();
    let watch = tokio::spawn(async move {
        let config = watcher::Config::default().fields("metadata.name=web");
        let mut events = watcher(watching, config).boxed();
        let mut ready_tx = Some(ready_tx);
        while let Some(Ok(event)) = events.next().await {
            let inventory = match event {
                Event::InitDone => {
                    if let Some(tx) = ready_tx.take() {
                        let _ = tx.send(());
                    }
                    continue;
                }
                Event::Apply(i) | Event::InitApply(i) => i,
                _ => continue,
            };
            let sorted = |mut names: Vec<String>| {
                names.sort();
                names
            };
            let members = sorted(
                inventory
                    .spec
                    .inventory
                    .iter()
                    .map(|e| e.name.clone())
                    .collect(),
            );
            let pending = sorted(
                inventory
                    .spec
                    .pending
                    .iter()
                    .map(|e| e.name.clone())
                    .collect(),
            );
            let version = inventory.resource_version().unwrap_or_default();
            record.lock().unwrap().push((version, members, pending));
        }
    });
    ready.await.unwrap();
    let result = f.sync().await;
    assert_eq!(result.outcome.as_ref().unwrap().reason, Reason::Applied);
    // The watch has seen every write once it has seen the version the server holds now.
    let last = api.get("web").await.unwrap().resource_version().unwrap();
    crate::support::eventually(
        "the watch to see the last write",
        std::time::Duration::from_secs(10),
        || async {
            let seen = seen.lock().unwrap();
            seen.last()
                .is_some_and(|(v, _, _)| *v == last)
                .then_some(())
        },
    )
    .await;
    watch.abort();
    let v = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
    let writes: Vec<(Vec<String>, Vec<String>)> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|(_, m, p)| (m.clone(), p.clone()))
        .collect();
    assert_eq!(
        writes,
        vec![(v(&[]), v(&["a", "b", "c"])), (v(&["a", "b", "c"]), v(&[]))]
    );
}

/// A daemon's informer cache as the engine sees it: one copy of one inventory.
struct OneCopy(std::sync::Arc<ReleaseInventory>);

impl convoy::engine::runtime::Listers for OneCopy {
    fn get(
        &self,
        kind: &str,
        _namespace: &str,
        _name: &str,
    ) -> Option<convoy::engine::runtime::CachedObject> {
        (kind == "ReleaseInventory").then(|| self.0.clone() as _)
    }

    fn list(
        &self,
        _kind: &str,
        _namespace: Option<&str>,
    ) -> Option<Vec<convoy::engine::runtime::CachedObject>> {
        None
    }
}

/// The error of a write refused because the copy it was made from was stale.
fn assert_changed(err: &convoy::engine::inventory::InventoryError) {
    assert!(
        matches!(
            err,
            convoy::engine::inventory::InventoryError::Changed { .. }
        ),
        "{err:?}"
    );
}

fn names(inventory: &ReleaseInventory) -> Vec<String> {
    let mut names: Vec<String> = inventory
        .spec
        .inventory
        .iter()
        .filter(|e| e.render_ref.is_some())
        .map(|e| e.name.clone())
        .collect();
    names.sort();
    names
}

/// issue 21: the controller takes its inventory from the daemon's cache only at the version
/// the process last read or wrote, and its first write lands only on that version. A copy a
/// write of another process made stale costs no member: the write fails, nothing is
/// recorded from the copy, and the next read goes to the API server. A copy behind only the
/// health loop's states (an observer in another process) still gets its write.
#[tokio::test]
async fn the_controller_takes_a_cached_inventory_only_at_the_version_it_last_saw() {
    use convoy::engine::seen_inventories::SeenInventories;
    use std::sync::Arc;
    let env = TestEnv::new("inventory-seen").await;
    let seen = Arc::new(SeenInventories::default());
    let handle = || {
        InventoryHandle::new(env.client.clone(), &env.namespace, "web").remembering(seen.clone())
    };
    let a = key("ConfigMap", "a", &env.namespace);
    let b = key("ConfigMap", "b", &env.namespace);
    let x = key("ConfigMap", "x", &env.namespace);

    // A copy at a version this process never saw is not taken: the API server answers.
    let mut unseen = ReleaseInventory::new("web", Default::default());
    unseen.metadata.namespace = Some(env.namespace.clone());
    unseen.metadata.uid = Some("not-this-one".into());
    unseen.metadata.resource_version = Some("1".into());
    let written = handle().put(&[member(&a, "r1", 0)]).await.unwrap();
    let h = handle();
    h.prefetch_cached(Some(&OneCopy(Arc::new(unseen)))).await;
    assert_eq!(names(&h.get_prefetched().await.unwrap().unwrap()), ["a"]);

    // The version it wrote is taken from the cache. To prove it came from there, this copy
    // says so in a member no write made (only the cache holds it).
    let mut marked = written.clone();
    marked.spec.inventory[0].name = "from-the-cache".into();
    let h = handle();
    h.prefetch_cached(Some(&OneCopy(Arc::new(marked)))).await;
    assert_eq!(
        names(&h.get_prefetched().await.unwrap().unwrap()),
        ["from-the-cache"]
    );

    // Another process (a person's `convoy sync`) records x; the cache has not seen it yet. A
    // Put from the old copy would drop x from the record (never pruned): it is refused.
    let other = InventoryHandle::new(env.client.clone(), &env.namespace, "web");
    other
        .put(&[member(&a, "r1", 0), member(&x, "r9", 0)])
        .await
        .unwrap();
    let h = handle();
    h.prefetch_cached(Some(&OneCopy(Arc::new(written.clone()))))
        .await;
    assert_eq!(names(&h.get_prefetched().await.unwrap().unwrap()), ["a"]);
    let err = h
        .put(&[member(&a, "r2", 0), member(&b, "r2", 0)])
        .await
        .unwrap_err();
    assert_changed(&err);
    assert!(
        err.to_string()
            .contains("the next pass reads it from the API server"),
        "{err}"
    );
    let live = other.get().await.unwrap().unwrap();
    assert_eq!(names(&live), ["a", "x"], "x is still recorded");
    // Forgotten: the same stale copy is not taken again; the API server answers.
    let h = handle();
    h.prefetch_cached(Some(&OneCopy(Arc::new(written.clone()))))
        .await;
    let read = h.get_prefetched().await.unwrap().unwrap();
    assert_eq!(names(&read), ["a", "x"]);

    // An observer in another process writes a health state; the cache lags it. The copy
    // differs only in what the health loop owns, so the Put lands on the latest version and
    // keeps that state.
    let observer = InventoryHandle::new(env.client.clone(), &env.namespace, "web");
    let health = [EntryHealth {
        rule: None,
        key: x.clone(),
        state: HealthState::Healthy,
        message: None,
        first_unhealthy: None,
        assessed_render_ref: Some("r9".into()),
    }];
    observer
        .write_inventory_health(&read, &health)
        .await
        .unwrap()
        .unwrap();
    let h = handle();
    h.prefetch_cached(Some(&OneCopy(Arc::new(read.clone()))))
        .await;
    assert_eq!(
        h.get_prefetched()
            .await
            .unwrap()
            .unwrap()
            .metadata
            .resource_version,
        read.metadata.resource_version,
        "the copy was taken"
    );
    let put = h
        .put(&[member(&a, "r3", 0), member(&x, "r3", 0)])
        .await
        .unwrap();
    let entry = put.spec.inventory.iter().find(|e| e.key() == x).unwrap();
    assert_eq!(entry.render_ref.as_deref(), Some("r3"));
    assert_eq!(
        entry.state,
        Some(HealthState::Healthy),
        "the observer's state kept"
    );

    // A pass that reads the latest again (a rollout deciding on the health loop's states)
    // goes on from that read: a membership changed meanwhile fails its next write; one
    // unchanged guards it with the new version.
    let h = handle();
    h.prefetch_cached(Some(&OneCopy(Arc::new(put.clone()))))
        .await;
    other
        .put(&[
            member(&a, "r3", 0),
            member(&x, "r3", 0),
            member(&b, "r9", 0),
        ])
        .await
        .unwrap();
    assert_eq!(names(&h.get().await.unwrap().unwrap()), ["a", "b", "x"]);
    let err = h.put(&[member(&a, "r4", 0)]).await.unwrap_err();
    assert_changed(&err);
    assert!(
        h.refused_on_a_stale_copy(),
        "the refused write did not land"
    );
    let put = h.get().await.unwrap().unwrap();
    assert_eq!(names(&put), ["a", "b", "x"], "b is still recorded");
    let h = handle();
    h.prefetch_cached(Some(&OneCopy(Arc::new(put.clone()))))
        .await;
    let health = [EntryHealth {
        rule: None,
        key: b.clone(),
        state: HealthState::Degraded,
        message: Some("crash loop".into()),
        first_unhealthy: None,
        assessed_render_ref: Some("r9".into()),
    }];
    observer
        .write_inventory_health(&put, &health)
        .await
        .unwrap()
        .unwrap();
    let fresh = h.refresh_prefetched().await.unwrap().unwrap();
    let state = |i: &ReleaseInventory| {
        i.spec
            .inventory
            .iter()
            .find(|e| e.key() == b)
            .unwrap()
            .state
    };
    assert_eq!(
        state(&fresh),
        Some(HealthState::Degraded),
        "the latest states"
    );
    assert_eq!(
        state(&h.get_prefetched().await.unwrap().unwrap()),
        Some(HealthState::Degraded),
        "the pass goes on from the fresh read"
    );
    let put = h
        .put(&[
            member(&a, "r4", 0),
            member(&b, "r4", 0),
            member(&x, "r4", 0),
        ])
        .await
        .unwrap();
    assert!(!h.refused_on_a_stale_copy());

    // Deleted meanwhile (the cache still holds it): the copy is not re-created.
    let h = handle();
    h.prefetch_cached(Some(&OneCopy(Arc::new(put.clone()))))
        .await;
    Api::<ReleaseInventory>::namespaced(env.client.clone(), &env.namespace)
        .delete("web", &Default::default())
        .await
        .unwrap();
    let err = h.put(&[member(&a, "r4", 0)]).await.unwrap_err();
    assert_changed(&err);
    assert!(other.get().await.unwrap().is_none(), "not re-created");
}

/// A wave that fails inside a run of waves nothing holds apart, here its adoption from
/// kubectl (an admission policy refuses the update that moves kubectl's fields), puts the
/// waves applied before it as members: they were left only as pending, and the next sync sent
/// them again with no digest to skip them.
#[tokio::test]
async fn a_failed_adoption_inside_a_run_of_waves_records_the_waves_before_it() {
    let f = Fixture::new(
        "inventory-adopt-fails",
        &[
            ("a.yaml", &config_map("a", 0, "1")),
            ("b.yaml", &config_map("b", 1, "2")),
        ],
        json!({}),
    )
    .await;
    let ns = f.env.namespace.clone();
    // kubectl made `b` (client-side), and a policy refuses any update of it that leaves its
    // data as it is: the adoption (managedFields only); the dry run and the apply change it.
    f.env.kubectl_apply_text(
        &format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: b, namespace: {ns}}}\ndata: {{value: \"1\"}}\n"
        ),
        &[],
    );
    let policy = format!("refuse-adoption-{ns}");
    f.env.kubectl_apply_text(
        &format!(
            "apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {{name: {policy}}}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - {{apiGroups: [\"\"], apiVersions: [v1], operations: [UPDATE], resources: [configmaps]}}
  matchConditions:
  - {{name: b, expression: \"object.metadata.name == 'b' && object.metadata.namespace == '{ns}'\"}}
  validations:
  - {{expression: \"object.data != oldObject.data\", message: no adoption today}}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {{name: {policy}}}
spec:
  policyName: {policy}
  validationActions: [Deny]
"
        ),
        &[],
    );
    // The policy is in force once a plain update of `b` is refused.
    let cms: Api<ConfigMap> = Api::namespaced(f.env.client.clone(), &ns);
    crate::support::eventually(
        "the admission policy in force",
        std::time::Duration::from_secs(20),
        || async {
            let patch = kube::api::Patch::Merge(json!({"metadata": {"annotations": {"x": "1"}}}));
            cms.patch("b", &Default::default(), &patch)
                .await
                .is_err()
                .then_some(())
        },
    )
    .await;
    let result = f.sync().await;
    f.env
        .kubectl_ok(&["delete", "validatingadmissionpolicybinding", &policy]);
    f.env
        .kubectl_ok(&["delete", "validatingadmissionpolicy", &policy]);
    let outcome = result.outcome.unwrap();
    assert_eq!(outcome.reason, Reason::DeployFailed, "{}", outcome.message);
    assert!(
        outcome.message.contains("wave 1: adopting ConfigMap/")
            && outcome.message.contains("no adoption today"),
        "{}",
        outcome.message
    );
    let api: Api<ReleaseInventory> = Api::namespaced(f.env.client.clone(), &ns);
    let inventory = api.get("web").await.unwrap();
    let entries: Vec<(&str, Option<i32>)> = inventory
        .spec
        .inventory
        .iter()
        .map(|e| (e.name.as_str(), e.wave))
        .collect();
    assert_eq!(entries, [("a", Some(0))]);
    assert!(
        inventory.spec.pending.is_empty(),
        "{:?}",
        inventory.spec.pending
    );
    assert_eq!(
        cms.get("b").await.unwrap().data.unwrap()["value"],
        "1",
        "b is not applied"
    );
}

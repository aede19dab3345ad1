//! A Release whose target is another cluster: a second API server behind a `Cluster`.

use convoy::engine::api::{Reason, ReleaseInventory};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use serde_json::json;

use crate::support::fixture::{Fixture, config_map};
use crate::support::{client_for, remote_control_plane, unreachable_kubeconfig};

#[tokio::test]
async fn a_remote_cluster_unreachable_then_reachable() {
    let namespace_doc = "apiVersion: v1\nkind: Namespace\nmetadata: {name: remote-apps}\n";
    let cm = config_map("settings", 0, "remote").replace(
        "  name: settings\n",
        "  name: settings\n  namespace: remote-apps\n",
    );
    let f = Fixture::new(
        "remote",
        &[("ns.yaml", namespace_doc), ("cm.yaml", &cm)],
        json!({"cluster": "far"}),
    )
    .await;
    let scratch = tempfile::tempdir().unwrap();
    let gone = std::fs::read_to_string(unreachable_kubeconfig(scratch.path())).unwrap();
    let secret = |kubeconfig: &str| {
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "far-kubeconfig", "namespace": f.env.namespace},
               "stringData": {"kubeconfig": kubeconfig}})
    };
    f.kubectl_apply(&secret(&gone)).await;
    f.kubectl_apply(&json!({
        "apiVersion": "core.convoy.kumodo.io/v1alpha1", "kind": "Cluster",
        "metadata": {"name": "far", "namespace": f.env.namespace},
        "spec": {"kubeconfigSecretRef": {"name": "far-kubeconfig"}},
    }))
    .await;

    let result = f.sync().await;
    let outcome = result.outcome.unwrap();
    assert_eq!(outcome.reason, Reason::ClusterNotReady);
    assert!(outcome.retry, "ClusterNotReady is retried");
    assert!(
        result
            .error
            .as_deref()
            .unwrap_or_default()
            .contains("127.0.0.1:9"),
        "{:?}",
        result.error
    );
    let status = f.release().await.status.unwrap();
    assert_eq!(
        status.last_attempted.unwrap().failure.unwrap().stage,
        "ClusterResolution"
    );

    // The Cluster becomes reachable: the render lands on the remote API server, the
    // inventory stays next to the Release.
    let remote = remote_control_plane();
    let kubeconfig = std::fs::read_to_string(&remote.kubeconfig).unwrap();
    f.kubectl_apply(&secret(&kubeconfig)).await;
    let outcome = f.sync().await.outcome.unwrap();
    assert_eq!(outcome.reason, Reason::Applied, "{}", outcome.message);

    let remote_client = client_for(&remote.kubeconfig).await;
    let remote_cms: Api<ConfigMap> = Api::namespaced(remote_client, "remote-apps");
    let applied = remote_cms.get("settings").await.unwrap();
    assert_eq!(applied.data.unwrap()["value"], "remote");
    let home_cms: Api<ConfigMap> = Api::namespaced(f.env.client.clone(), "remote-apps");
    assert!(home_cms.get_opt("settings").await.is_err_or_none());
    let inventories: Api<ReleaseInventory> =
        Api::namespaced(f.env.client.clone(), &f.env.namespace);
    let kinds: Vec<String> = inventories
        .get("web")
        .await
        .unwrap()
        .spec
        .inventory
        .iter()
        .map(|e| e.kind.clone())
        .collect();
    assert_eq!(kinds.len(), 2, "{kinds:?}");
    let status = f.release().await.status.unwrap();
    let cluster = status.last_successful.unwrap().resolved_cluster.unwrap();
    assert_eq!(cluster.name.as_deref(), Some("far"));
    assert_eq!(cluster.version.as_deref(), Some("v1.36.3"));
}

trait ErrOrNone {
    fn is_err_or_none(&self) -> bool;
}

impl<T, E> ErrOrNone for Result<Option<T>, E> {
    fn is_err_or_none(&self) -> bool {
        !matches!(self, Ok(Some(_)))
    }
}

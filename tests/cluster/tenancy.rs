//! Tenancy on the real control plane: a Release acts as its ServiceAccount (Kubernetes RBAC
//! decides what it may change), reaches no other namespace, and a Cluster's kubeconfig from a
//! tenant's Secret cannot run commands or read convoy's files.

use std::sync::Arc;

use convoy::engine::api::Reason;
use convoy::engine::connect::KubeconfigPolicy;
use convoy::engine::source::allowed_urls::AllowedUrls;
use convoy::engine::tenancy::Tenancy;
use serde_json::json;

use crate::support::fixture::{Fixture, config_map};
use crate::support::{remote_control_plane, unique_namespace};

const CLUSTER_ROLE_BINDING: &str = "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {name: tenant-escalates}\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}\nsubjects:\n- {kind: ServiceAccount, name: deployer, namespace: default}\n";

/// A ServiceAccount `name` in the fixture's namespace, bound to ClusterRole `role` there.
async fn service_account(f: &Fixture, name: &str, role: Option<&str>) {
    f.kubectl_apply(&json!({"apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": name, "namespace": f.env.namespace}}))
        .await;
    if let Some(role) = role {
        f.kubectl_apply(&json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": name, "namespace": f.env.namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": f.env.namespace}]}))
            .await;
    }
}

#[tokio::test]
async fn a_release_deploys_as_its_service_account_and_rbac_decides() {
    let f = Fixture::new(
        "tenancy-sa",
        &[("a.yaml", &config_map("a", 0, "1"))],
        json!({"serviceAccountName": "deployer"}),
    )
    .await;
    // The ServiceAccount may do nothing yet: the dry run is refused as that identity, and
    // convoy's own (admin) identity is never used instead.
    service_account(&f, "deployer", None).await;
    let outcome = f.sync().await.outcome.unwrap();
    assert_eq!(outcome.reason, Reason::Unappliable, "{}", outcome.message);
    assert!(
        outcome.message.contains(&format!(
            "system:serviceaccount:{}:deployer",
            f.env.namespace
        )) && outcome.message.contains("forbidden"),
        "{}",
        outcome.message
    );
    assert!(f.config_map("a").await.is_none(), "nothing applied");

    // Admin of its namespace: the render lands.
    service_account(&f, "deployer", Some("admin")).await;
    let outcome = f.sync().await.outcome.unwrap();
    assert_eq!(outcome.reason, Reason::Applied, "{}", outcome.message);
    assert!(f.config_map("a").await.is_some());

    // A commit that tries to bind cluster-admin: refused by the dry run, nothing of the
    // render applied (not even its harmless ConfigMap).
    f.commit(&[
        ("a.yaml", &config_map("a", 0, "1")),
        ("b.yaml", &config_map("b", 0, "2")),
        ("crb.yaml", CLUSTER_ROLE_BINDING),
    ]);
    let outcome = f.sync().await.outcome.unwrap();
    assert_eq!(outcome.reason, Reason::Unappliable, "{}", outcome.message);
    assert!(
        outcome
            .message
            .contains("ClusterRoleBinding.rbac.authorization.k8s.io/tenant-escalates: clusterrolebindings.rbac.authorization.k8s.io \"tenant-escalates\" is forbidden"),
        "{}",
        outcome.message
    );
    assert!(f.config_map("b").await.is_none());
    let crb = f
        .env
        .kubectl(&["get", "clusterrolebinding", "tenant-escalates"]);
    assert!(!crb.status.success(), "the ClusterRoleBinding exists");
}

#[tokio::test]
async fn a_locked_down_daemon_deploys_releases_that_name_no_service_account_as_the_tenants() {
    let mut f = Fixture::new(
        "tenancy-default",
        &[("a.yaml", &config_map("a", 0, "1"))],
        json!({}),
    )
    .await;
    f.ctx.tenancy = Arc::new(Tenancy::new(
        Some("convoy-deployer".into()),
        false,
        KubeconfigPolicy::default(),
    ));
    // Before `convoy install --tenant`, the namespace's default deployer does not exist.
    let outcome = f.sync().await.outcome.unwrap();
    assert_eq!(outcome.reason, Reason::Unappliable, "{}", outcome.message);
    let out = f
        .env
        .convoy(&["install", "--tenant", f.env.namespace.as_str()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let outcome = f.sync().await.outcome.unwrap();
    assert_eq!(outcome.reason, Reason::Applied, "{}", outcome.message);
    assert!(f.config_map("a").await.is_some());
}

/// An empty `serviceAccountName` once made a Release act as convoy itself on a locked-down
/// daemon: now it is an unset one (the default deployer), and a name that cannot be a
/// ServiceAccount's is refused before anything is sent.
#[tokio::test]
async fn an_empty_or_malformed_service_account_name_never_acts_as_convoy() {
    let mut f = Fixture::new(
        "tenancy-empty-sa",
        &[("a.yaml", &config_map("a", 0, "1"))],
        json!({"serviceAccountName": ""}),
    )
    .await;
    f.ctx.tenancy = Arc::new(Tenancy::new(
        Some("convoy-deployer".into()),
        false,
        KubeconfigPolicy::default(),
    ));
    // The default deployer does not exist yet: refused as that identity, not applied as
    // convoy's (the test's admin) identity.
    let outcome = f.sync().await.outcome.unwrap();
    assert_eq!(outcome.reason, Reason::Unappliable, "{}", outcome.message);
    assert!(
        outcome.message.contains(&format!(
            "system:serviceaccount:{}:convoy-deployer",
            f.env.namespace
        )),
        "{}",
        outcome.message
    );
    assert!(f.config_map("a").await.is_none(), "nothing applied");

    // A name that cannot be a ServiceAccount's: the API server refuses it (the CRD's
    // pattern); the engine refuses it too under CRDs installed before the pattern
    // (`tenancy` unit tests).
    let patch = json!({"spec": {"serviceAccountName": "team-b:convoy-deployer"}});
    refused(
        f.releases()
            .patch(
                &f.name,
                &Default::default(),
                &kube::api::Patch::Merge(&patch),
            )
            .await,
        "spec.serviceAccountName",
    );
    assert!(f.config_map("a").await.is_none(), "nothing applied");
}

#[tokio::test]
async fn a_release_reaches_no_other_namespace_unless_allowed() {
    let mut f = Fixture::new(
        "tenancy-xns",
        &[("a.yaml", &config_map("a", 0, "1"))],
        json!({}),
    )
    .await;
    let other = unique_namespace(&f.env.client, "tenancy-other").await;
    // An object of the render in another namespace.
    let elsewhere = config_map("planted", 0, "x").replace(
        "  name: planted\n",
        &format!("  name: planted\n  namespace: {other}\n"),
    );
    f.commit(&[
        ("a.yaml", &config_map("a", 0, "1")),
        ("planted.yaml", &elsewhere),
    ]);
    let outcome = f.sync().await.outcome.unwrap();
    assert_eq!(outcome.reason, Reason::Unappliable);
    assert_eq!(
        outcome.message,
        format!(
            "nothing was applied: the render's ConfigMap/{other}/planted is outside the Release's namespace {:?}: cross-namespace references are refused (--allow-cross-namespace-refs allows them)",
            f.env.namespace
        )
    );
    assert!(f.config_map("a").await.is_none(), "nothing applied");
    // A SyncFail hook in the other namespace: refused like any object, and the refused render
    // runs none of its hooks (a failed sync arms its SyncFail hooks).
    f.commit(&[
        ("a.yaml", &config_map("a", 0, "1")),
        (
            "failed-hook.yaml",
            &format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: on-failure\n  namespace: {other}\n  annotations:\n    argocd.argoproj.io/hook: SyncFail\n"
            ),
        ),
    ]);
    let outcome = f.sync().await.outcome.unwrap();
    assert_eq!(outcome.reason, Reason::Unappliable);
    assert!(
        outcome.message.contains(&format!(
            "the render's ConfigMap/{other}/on-failure is outside"
        )),
        "{}",
        outcome.message
    );
    let others: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(f.env.client.clone(), &other);
    assert!(
        others.get_opt("on-failure").await.unwrap().is_none(),
        "the refused render's SyncFail hook was created in {other}"
    );
    // targetNamespace pointing elsewhere: the same rule.
    f.commit(&[("a.yaml", &config_map("a", 0, "1"))]);
    f.patch_spec(json!({"targetNamespace": other})).await;
    let outcome = f.sync().await.outcome.unwrap();
    assert_eq!(outcome.reason, Reason::Unappliable);
    assert!(
        outcome.message.starts_with(&format!(
            "nothing was applied: spec.targetNamespace {other:?}"
        )),
        "{}",
        outcome.message
    );
    // Through a Cluster that is the cluster the Release lives in (`inCluster: true`): the
    // same rule (only another cluster's own credentials decide there).
    f.kubectl_apply(
        &json!({"apiVersion": "core.convoy.kumodo.io/v1alpha1", "kind": "Cluster",
        "metadata": {"name": "home", "namespace": f.env.namespace},
        "spec": {"inCluster": true}}),
    )
    .await;
    f.patch_spec(json!({"cluster": "home"})).await;
    let outcome = f.sync().await.outcome.unwrap();
    assert_eq!(outcome.reason, Reason::Unappliable);
    assert!(
        outcome.message.starts_with(&format!(
            "nothing was applied: spec.targetNamespace {other:?}"
        )),
        "{}",
        outcome.message
    );
    f.patch_spec(json!({"targetNamespace": null})).await;
    f.commit(&[
        ("a.yaml", &config_map("a", 0, "1")),
        ("planted.yaml", &elsewhere),
    ]);
    let outcome = f.sync().await.outcome.unwrap();
    assert_eq!(outcome.reason, Reason::Unappliable, "{}", outcome.message);
    assert!(
        outcome.message.contains(&format!(
            "the render's ConfigMap/{other}/planted is outside"
        )),
        "{}",
        outcome.message
    );
    assert!(f.config_map("a").await.is_none(), "nothing applied");
    // The operator allows it.
    f.patch_spec(json!({"targetNamespace": other})).await;
    f.ctx.tenancy = Arc::new(Tenancy::new(None, true, KubeconfigPolicy::default()));
    let outcome = f.sync().await.outcome.unwrap();
    assert_eq!(outcome.reason, Reason::Applied, "{}", outcome.message);
}

/// A Release of ConfigMap `a` whose target is Cluster `far` (see [`point_far_at`]).
async fn far_cluster_fixture(name: &str) -> Fixture {
    Fixture::new(
        name,
        &[("a.yaml", &config_map("a", 0, "1"))],
        json!({"cluster": "far"}),
    )
    .await
}

/// Cluster `far` of the fixture's namespace, with `kubeconfig` in its Secret.
async fn point_far_at(f: &Fixture, kubeconfig: &str) {
    f.kubectl_apply(&json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "far-kc", "namespace": f.env.namespace},
        "stringData": {"kubeconfig": kubeconfig}}))
        .await;
    f.kubectl_apply(
        &json!({"apiVersion": "core.convoy.kumodo.io/v1alpha1", "kind": "Cluster",
        "metadata": {"name": "far", "namespace": f.env.namespace},
        "spec": {"kubeconfigSecretRef": {"name": "far-kc"}}}),
    )
    .await;
}

/// The value of `key` in a kubeconfig's text (its first occurrence).
fn kubeconfig_field(kubeconfig: &str, key: &str) -> String {
    kubeconfig
        .lines()
        .find_map(|l| l.trim().strip_prefix(&format!("{key}: ")))
        .unwrap()
        .to_string()
}

/// The kubeconfig Secret of a tenant's Cluster: an exec plugin would run a command in the
/// daemon, a token file or key path would read the daemon's files. Each is refused naming the
/// field; the remote API server (a second control plane) is never asked.
#[tokio::test]
async fn a_cluster_kubeconfig_can_neither_run_commands_nor_read_convoys_files() {
    let mut f = far_cluster_fixture("tenancy-kubeconfig").await;
    let remote = std::fs::read_to_string(&remote_control_plane().kubeconfig).unwrap();
    let server = kubeconfig_field(&remote, "server");
    let ca = kubeconfig_field(&remote, "certificate-authority-data");
    let scratch = tempfile::tempdir().unwrap();
    let ran = scratch.path().join("ran");
    let daemon_secret = scratch.path().join("daemon-token");
    std::fs::write(&daemon_secret, "the-daemons-own-token").unwrap();
    let kubeconfig = |cluster_extra: &str, user: &str| {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: far\n  cluster:\n    server: {server}\n{cluster_extra}\
users:\n- name: tenant\n  user:\n{user}contexts:\n- name: far\n  context: {{cluster: far, user: tenant}}\ncurrent-context: far\n"
        )
    };
    let with_ca = format!("    certificate-authority-data: {ca}\n");
    let exec = format!(
        "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: /bin/sh\n      args: [\"-c\", \"touch {} && echo '{{\\\"apiVersion\\\":\\\"client.authentication.k8s.io/v1\\\",\\\"kind\\\":\\\"ExecCredential\\\",\\\"status\\\":{{\\\"token\\\":\\\"x\\\"}}}}'\"]\n      interactiveMode: Never\n",
        ran.display()
    );
    let cases = [
        (
            kubeconfig(&with_ca, &exec),
            "the kubeconfig sets users[tenant].user.exec: exec credential plugins are refused (--insecure-kubeconfig-exec allows them)",
        ),
        (
            kubeconfig(
                &with_ca,
                &format!("    tokenFile: {}\n", daemon_secret.display()),
            ),
            "the kubeconfig sets users[tenant].user.tokenFile: file paths are refused, a kubeconfig in a Secret must carry its credentials inline (token, client-certificate-data, client-key-data)",
        ),
        (
            kubeconfig(
                &with_ca,
                "    client-key: /var/run/secrets/key.pem\n    client-certificate: /var/run/secrets/cert.pem\n",
            ),
            "the kubeconfig sets users[tenant].user.client-certificate: file paths are refused",
        ),
        (
            kubeconfig(
                "    certificate-authority: /etc/ssl/private/ca.pem\n",
                "    token: t\n",
            ),
            "the kubeconfig sets clusters[far].cluster.certificate-authority: file paths are refused, use certificate-authority-data",
        ),
        (
            kubeconfig("    insecure-skip-tls-verify: true\n", "    token: t\n"),
            "the kubeconfig sets clusters[far].cluster.insecure-skip-tls-verify: TLS without verification is refused (--insecure-kubeconfig-tls allows it)",
        ),
    ];
    for (text, expected) in &cases {
        point_far_at(&f, text).await;
        let result = f.sync().await;
        let outcome = result.outcome.unwrap();
        assert_eq!(outcome.reason, Reason::ClusterNotReady, "{expected}");
        assert!(
            outcome.message.contains(expected),
            "{expected}\n  got: {}",
            outcome.message
        );
        assert!(!ran.exists(), "the exec plugin ran");
    }
    // The operator's flag lets the plugin run (and only then).
    f.ctx.tenancy = Arc::new(Tenancy::new(
        None,
        false,
        KubeconfigPolicy {
            allow_exec: true,
            ..Default::default()
        },
    ));
    point_far_at(&f, &cases[0].0).await;
    let _ = f.sync().await;
    assert!(
        ran.exists(),
        "with --insecure-kubeconfig-exec the plugin runs"
    );
}

/// `--allow-cluster-server`: whoever writes a Cluster's Secret chooses where convoy sends
/// requests (with bodies the source writes), from wherever convoy runs. Under a list, a
/// server outside it (here a listener that counts connections), a proxy-url or a
/// tls-server-name is refused
/// naming the field and the flag, and nothing connects to it; the remote control plane
/// under the list is synced as before.
#[tokio::test]
async fn a_cluster_server_outside_the_allowed_prefixes_is_refused_without_a_request() {
    let mut f = far_cluster_fixture("tenancy-servers").await;
    let remote = std::fs::read_to_string(&remote_control_plane().kubeconfig).unwrap();
    let server = kubeconfig_field(&remote, "server");
    let (port, connections) = crate::support::servers::counting_server("127.0.0.1:0", |_stream| {});
    // The remote control plane's kubeconfig, its server line replaced.
    let kubeconfig =
        |server_lines: &str| remote.replace(&format!("server: {server}"), server_lines);
    f.ctx.tenancy = Arc::new(Tenancy::new(
        None,
        false,
        KubeconfigPolicy {
            allowed_servers: AllowedUrls::cluster_servers(&[format!("{server}/")]).unwrap(),
            ..Default::default()
        },
    ));
    let elsewhere = format!("https://127.0.0.1:{port}");
    let cases = [
        (
            kubeconfig(&format!("server: {elsewhere}")),
            format!(
                "the kubeconfig server \"{elsewhere}/\" is not under a URL prefix convoy allows Cluster API servers at (--allow-cluster-server)"
            ),
        ),
        (
            kubeconfig(&format!(
                "server: {server}\n    proxy-url: http://127.0.0.1:{port}"
            )),
            "the kubeconfig sets clusters[testenv].cluster.proxy-url: a proxy is refused while convoy restricts Cluster API servers (--allow-cluster-server)".to_string(),
        ),
        // Another backend behind the allowed address, chosen by SNI (found by an attack).
        (
            kubeconfig(&format!(
                "server: {server}\n    tls-server-name: internal.example"
            )),
            "the kubeconfig sets clusters[testenv].cluster.tls-server-name: another TLS server name is refused while convoy restricts Cluster API servers (--allow-cluster-server)".to_string(),
        ),
        (remote.clone(), String::new()),
    ];
    // The Secret's name and the Cluster's go into the paths of convoy's reads: names that are
    // paths are refused by the API server (the CRDs' name patterns), naming the field. The
    // engine refuses them too, for CRDs installed before the patterns (`render::object`'s
    // `address_trouble`, unit-tested).
    let clusters: kube::Api<convoy::engine::api::Cluster> =
        kube::Api::namespaced(f.env.client.clone(), &f.env.namespace);
    let cluster = serde_json::from_value(
        json!({"apiVersion": "core.convoy.kumodo.io/v1alpha1", "kind": "Cluster",
        "metadata": {"name": "far", "namespace": f.env.namespace},
        "spec": {"kubeconfigSecretRef": {"name": "../../kube-system/secrets/admin"}}}),
    )
    .unwrap();
    refused(
        clusters.create(&Default::default(), &cluster).await,
        "spec.kubeconfigSecretRef.name",
    );
    let releases = f.releases();
    for (field, spec) in [
        (
            "spec.cluster",
            json!({"cluster": "../../other/clusters/theirs"}),
        ),
        (
            "spec.targetNamespace",
            json!({"targetNamespace": "kube-system/secrets"}),
        ),
        ("spec.source.name", json!({"source": {"name": "x/../y"}})),
    ] {
        let patch = json!({"spec": spec});
        let merge = kube::api::Patch::Merge(&patch);
        refused(
            releases.patch(&f.name, &Default::default(), &merge).await,
            field,
        );
    }
    f.patch_spec(json!({"cluster": "far"})).await;
    // The allowed server gets the namespace the render lands in.
    let remote_client = crate::support::client_for(&remote_control_plane().kubeconfig).await;
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> =
        kube::Api::all(remote_client.clone());
    namespaces
        .create(
            &Default::default(),
            &serde_json::from_value(json!({"metadata": {"name": f.env.namespace}})).unwrap(),
        )
        .await
        .unwrap();
    for (text, expected) in &cases {
        point_far_at(&f, text).await;
        let outcome = f.sync().await.outcome.unwrap();
        if expected.is_empty() {
            assert_eq!(outcome.reason, Reason::Applied, "{}", outcome.message);
            let remote_cms: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
                kube::Api::namespaced(remote_client.clone(), &f.env.namespace);
            assert!(remote_cms.get_opt("a").await.unwrap().is_some());
        } else {
            assert_eq!(outcome.reason, Reason::ClusterNotReady, "{expected}");
            assert!(
                outcome.message.contains(expected.as_str()),
                "{expected}\n  got: {}",
                outcome.message
            );
        }
        assert_eq!(
            connections.load(std::sync::atomic::Ordering::SeqCst),
            0,
            "convoy connected to a server outside the list"
        );
    }
}

/// The kubeconfig Secret is read as the Release's ServiceAccount: one that may not read
/// Secrets cannot use a Cluster's credentials (convoy's own identity does not read it for
/// them).
#[tokio::test]
async fn a_clusters_kubeconfig_secret_is_read_as_the_releases_service_account() {
    let f = Fixture::new(
        "tenancy-kc-read",
        &[("a.yaml", &config_map("a", 0, "1"))],
        json!({"cluster": "far", "serviceAccountName": "viewer"}),
    )
    .await;
    service_account(&f, "viewer", Some("view")).await;
    let remote = std::fs::read_to_string(&remote_control_plane().kubeconfig).unwrap();
    point_far_at(&f, &remote).await;
    let outcome = f.sync().await.outcome.unwrap();
    assert_eq!(
        outcome.reason,
        Reason::ClusterNotReady,
        "{}",
        outcome.message
    );
    assert!(
        outcome.message.contains("forbidden") || outcome.message.contains("Forbidden"),
        "{}",
        outcome.message
    );
}

/// A tenant learns nothing of the Releases of namespaces it may not read: an object of its own
/// labelled for another namespace's Release is refused alike whether that Release exists or
/// not. Read as convoy, the answer said which exist (the sync was refused for one that did,
/// and took the object for one that did not).
#[tokio::test]
async fn a_tenant_learns_nothing_of_other_namespaces_releases_through_ownership_labels() {
    let f = Fixture::new(
        "tenancy-oracle",
        &[
            ("a.yaml", &config_map("a", 0, "1")),
            ("b.yaml", &config_map("b", 0, "1")),
        ],
        json!({"serviceAccountName": "deployer"}),
    )
    .await;
    service_account(&f, "deployer", Some("admin")).await;
    let other = unique_namespace(&f.env.client, "tenancy-hidden").await;
    f.kubectl_apply(&json!({
        "apiVersion": "core.convoy.kumodo.io/v1alpha1", "kind": "Release",
        "metadata": {"name": "exists", "namespace": other},
        "spec": {"source": {"kind": "GitRepository", "name": "repo"}, "targetNamespace": other},
    }))
    .await;
    // The tenant labels two of its objects: one for a Release that exists, one for none.
    for (name, owner) in [("a", "exists"), ("b", "absent")] {
        f.kubectl_apply(&json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": f.env.namespace, "labels": {
                "convoy.kumodo.io/release-namespace": other,
                "convoy.kumodo.io/release": owner}},
        }))
        .await;
    }
    let outcome = f.sync().await.outcome.unwrap();
    assert_eq!(outcome.reason, Reason::Unappliable, "{}", outcome.message);
    let ns = &f.env.namespace;
    assert_eq!(
        outcome.message,
        format!(
            "nothing was applied: ConfigMap/{ns}/a is labelled as Release {other}/exists's, which this Release may not read; ConfigMap/{ns}/b is labelled as Release {other}/absent's, which this Release may not read (to hand an object over, set the annotation convoy.kumodo.io/adopt: \"true\" on it in this render)"
        )
    );
}

/// The API server refused a write for `field`'s pattern (422, naming the field).
fn refused<T: std::fmt::Debug>(result: Result<T, kube::Error>, field: &str) {
    match result {
        Err(kube::Error::Api(e)) => assert!(
            e.code == 422 && e.message.contains(field) && e.message.contains("should match"),
            "{e:?}"
        ),
        other => panic!("{field}: not refused: {other:?}"),
    }
}

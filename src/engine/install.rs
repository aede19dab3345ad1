//! Installing convoy's API into a cluster: the CRDs, applied with SSA and awaited until the
//! server serves them.
//!
//! Design: DESIGN.md section 1 ("printed/installed by `convoy install`"). The RBAC, default
//! health rules and the daemon's Deployments join this module with the daemon.

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::runtime::wait::{await_condition, conditions};
use kube::{Api, ResourceExt};

use super::api::{self, field_managers};
use super::connect::{ConnectError, Connection, is_unreachable};
use super::ssa;

/// Why an install failed.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error(transparent)]
    Connect(#[from] ConnectError),
    #[error("cannot apply {name}: {message}")]
    UnknownKind { name: String, message: String },
    #[error("cannot apply {name}")]
    Apply {
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("CustomResourceDefinition {name} did not become Established within {}s", timeout.as_secs())]
    NotEstablished { name: String, timeout: Duration },
    #[error("cannot watch CustomResourceDefinition {name}")]
    Watch {
        name: String,
        #[source]
        source: kube::runtime::wait::Error,
    },
    #[error("cannot serialize CustomResourceDefinition {name}")]
    Serialize {
        name: String,
        #[source]
        source: serde_json::Error,
    },
}

/// What one CRD install did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstalledCrd {
    pub name: String,
}

/// Apply every CRD with SSA under `convoy-install`, then wait until each is Established.
pub async fn install_crds(
    conn: &Connection,
    timeout: Duration,
) -> Result<Vec<InstalledCrd>, InstallError> {
    let api: Api<CustomResourceDefinition> = Api::all(conn.client.clone());
    let mut installed = Vec::new();
    for crd in api::crds() {
        let name = crd.name_any();
        let patch = serde_json::to_value(&crd).map_err(|source| InstallError::Serialize {
            name: name.clone(),
            source,
        })?;
        ssa::apply(&api, &name, field_managers::INSTALL, &patch)
            .await
            .map_err(|source| {
                if is_unreachable(&source) {
                    InstallError::Connect(conn.unreachable(source))
                } else {
                    InstallError::Apply {
                        name: name.clone(),
                        source,
                    }
                }
            })?;
        installed.push(InstalledCrd { name });
    }
    for crd in &installed {
        let established = await_condition(api.clone(), &crd.name, conditions::is_crd_established());
        match tokio::time::timeout(timeout, established).await {
            Ok(Ok(_)) => {}
            Ok(Err(source)) => {
                return Err(InstallError::Watch {
                    name: crd.name.clone(),
                    source,
                });
            }
            Err(_) => {
                return Err(InstallError::NotEstablished {
                    name: crd.name.clone(),
                    timeout,
                });
            }
        }
    }
    Ok(installed)
}

/// Apply the shipped health rules (a GlobalHealthRuleSet) with SSA under `convoy-install`.
pub async fn install_default_rules(conn: &Connection) -> Result<String, InstallError> {
    use crate::engine::api::GlobalHealthRuleSet;
    let set = crate::engine::health::defaults::default_rule_set();
    let name = set.name_any();
    let api: Api<GlobalHealthRuleSet> = Api::all(conn.client.clone());
    let patch = serde_json::to_value(&set).map_err(|source| InstallError::Serialize {
        name: name.clone(),
        source,
    })?;
    ssa::apply(&api, &name, field_managers::INSTALL, &patch)
        .await
        .map_err(|source| {
            if is_unreachable(&source) {
                InstallError::Connect(conn.unreachable(source))
            } else {
                InstallError::Apply {
                    name: name.clone(),
                    source,
                }
            }
        })?;
    Ok(name)
}

/// Where and what `convoy install` puts besides the CRDs.
#[derive(Debug, Clone)]
pub struct InstallOptions {
    pub namespace: String,
    pub image: String,
}

/// Every object of a full install except the CRDs, in apply order: the namespace, service
/// accounts and least-privilege RBAC for the controller and the observer, the default health
/// rules, and the two Deployments running `convoy daemon`.
pub fn install_manifests(options: &InstallOptions) -> Vec<serde_json::Value> {
    use serde_json::json;
    let ns = &options.namespace;
    let labels = json!({"app.kubernetes.io/name": "convoy", "app.kubernetes.io/part-of": "convoy"});
    let read = json!(["get", "list", "watch"]);
    let core = "core.convoy.kumodo.io";
    let source = "source.convoy.kumodo.io";
    let health = "health.convoy.kumodo.io";
    let rule = |groups: &[&str], resources: &[&str], verbs: serde_json::Value| json!({"apiGroups": groups, "resources": resources, "verbs": verbs});
    let controller_rules = json!([
        rule(
            &[core],
            &["releases"],
            json!(["get", "list", "watch", "update", "patch"])
        ),
        rule(&[core], &["releases/status"], json!(["get", "patch"])),
        rule(
            &[core],
            &["releaseinventories"],
            json!(["get", "list", "watch", "create", "patch", "delete"])
        ),
        rule(&[core], &["clusters"], read.clone()),
        rule(&[core], &["clusters/status"], json!(["get", "update"])),
        rule(
            &[source],
            &["gitrepositories", "helmregistries", "ociregistries"],
            read.clone()
        ),
        rule(
            &[source],
            &[
                "gitrepositories/status",
                "helmregistries/status",
                "ociregistries/status"
            ],
            json!(["get", "update"])
        ),
        rule(&[""], &["secrets", "configmaps"], read.clone()),
        rule(
            &["", "events.k8s.io"],
            &["events"],
            json!(["create", "patch"])
        ),
    ]);
    let observer_rules = json!([
        rule(
            &[core],
            &["releases"],
            json!(["get", "list", "watch", "patch"])
        ),
        rule(&[core], &["releases/status"], json!(["get", "patch"])),
        rule(
            &[core],
            &["releaseinventories"],
            json!(["get", "list", "watch", "patch"])
        ),
        rule(&[core], &["clusters"], read.clone()),
        rule(
            &[source],
            &["gitrepositories", "helmregistries", "ociregistries"],
            read.clone()
        ),
        rule(
            &[health],
            &["healthrulesets", "globalhealthrulesets"],
            read.clone()
        ),
        rule(&[""], &["secrets", "configmaps"], read.clone()),
    ]);
    // Applying arbitrary rendered objects (and pruning them) needs write access to every
    // kind; the observer's dry runs need `patch` (the server runs them with dryRun=All).
    // Narrow these two roles per tenant where Releases only deploy known kinds.
    let applier_rules = json!([rule(
        &["*"],
        &["*"],
        json!([
            "get", "list", "watch", "create", "update", "patch", "delete"
        ])
    )]);
    let dry_run_rules = json!([rule(
        &["*"],
        &["*"],
        json!(["get", "list", "watch", "patch"])
    )]);
    let leases = json!([rule(
        &["coordination.k8s.io"],
        &["leases"],
        json!([
            "get", "list", "watch", "create", "update", "patch", "delete"
        ])
    ),]);
    let mut objects = vec![
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": labels}}),
    ];
    for (who, rules, extra) in [
        ("controller", controller_rules, applier_rules),
        ("observer", observer_rules, dry_run_rules),
    ] {
        let name = format!("convoy-{who}");
        objects.push(json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": ns, "labels": labels}}));
        for (suffix, rules) in [("", rules), ("-workloads", extra)] {
            let role = format!("{name}{suffix}");
            objects.push(
                json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": role, "labels": labels}, "rules": rules}),
            );
            objects.push(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": role, "labels": labels},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}]}));
        }
        objects.push(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": format!("{name}-leases"), "namespace": ns, "labels": labels}, "rules": leases}));
        objects.push(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": format!("{name}-leases"), "namespace": ns, "labels": labels},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": format!("{name}-leases")},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}]}));
    }
    objects.push(
        serde_json::to_value(crate::engine::health::defaults::default_rule_set())
            .unwrap_or_default(),
    );
    for who in ["controller", "observer"] {
        let name = format!("convoy-{who}");
        let pod_labels =
            json!({"app.kubernetes.io/name": "convoy", "app.kubernetes.io/component": who});
        objects.push(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": ns, "labels": labels},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": pod_labels},
                "template": {
                    "metadata": {"labels": pod_labels},
                    "spec": {
                        "serviceAccountName": name,
                        "securityContext": {"runAsNonRoot": true, "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"}},
                        "containers": [{
                            "name": "convoy",
                            "image": options.image,
                            "args": ["daemon", "--role", who, "--log-format", "json", "-v", "--cache-dir", "/var/cache/convoy"],
                            "env": [
                                {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                                {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                            ],
                            "ports": [{"name": "http", "containerPort": 8080}],
                            "livenessProbe": {"httpGet": {"path": "/healthz", "port": "http"}},
                            "readinessProbe": {"httpGet": {"path": "/readyz", "port": "http"}},
                            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}},
                            "securityContext": {"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
                                                "capabilities": {"drop": ["ALL"]}},
                            "volumeMounts": [{"name": "cache", "mountPath": "/var/cache/convoy"}, {"name": "tmp", "mountPath": "/tmp"}],
                        }],
                        "volumes": [{"name": "cache", "emptyDir": {}}, {"name": "tmp", "emptyDir": {}}],
                    },
                },
            },
        }));
    }
    objects
}

/// Apply `objects` with SSA under `convoy-install` (cluster-scoped or namespaced, any kind).
pub async fn apply_objects(
    conn: &Connection,
    objects: &[serde_json::Value],
) -> Result<Vec<String>, InstallError> {
    let applier = crate::engine::apply::Applier::new(conn.client.clone(), 4);
    let mut done = Vec::new();
    for object in objects {
        let object = crate::engine::render::Object(object.clone());
        let name = object.key().to_string();
        let resource = applier
            .resources()
            .resolve(object.api_version(), object.kind())
            .await
            .map_err(|e| InstallError::UnknownKind {
                name: name.clone(),
                message: e.to_string(),
            })?;
        let api: Api<kube::api::DynamicObject> =
            match object.namespace().filter(|_| resource.namespaced) {
                Some(ns) => Api::namespaced_with(conn.client.clone(), ns, &resource.api),
                None => Api::all_with(conn.client.clone(), &resource.api),
            };
        ssa::apply(&api, object.name(), field_managers::INSTALL, &object.0)
            .await
            .map_err(|source| {
                if is_unreachable(&source) {
                    InstallError::Connect(conn.unreachable(source))
                } else {
                    InstallError::Apply {
                        name: name.clone(),
                        source,
                    }
                }
            })?;
        done.push(name);
    }
    Ok(done)
}

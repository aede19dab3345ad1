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
    #[error("cannot read {name}")]
    Read {
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error(
        "convoy is installed in namespace {existing}: its ClusterRoles, ClusterRoleBindings and admission policies are cluster-wide and serve one install. `convoy install -n {existing}` upgrades it; --move moves them to {namespace}, and the install in {existing} then runs without its permissions and admission policies"
    )]
    OtherInstall { existing: String, namespace: String },
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
    /// Give both daemon identities write (controller) and dry-run (observer) access to every
    /// kind in every namespace, and let Releases without a ServiceAccount act as convoy. Off
    /// by default: Releases then act as [`TENANT_SERVICE_ACCOUNT`] of their namespace.
    pub cluster_admin: bool,
    /// The URL prefixes the daemons fetch sources from (`--allow-source-url`; none: any).
    pub allowed_source_urls: Vec<String>,
    /// The API server prefixes a Cluster's kubeconfig may name (`--allow-cluster-server`;
    /// none: any).
    pub allowed_cluster_servers: Vec<String>,
}

/// The ServiceAccount a locked-down daemon impersonates for Releases that name none, created
/// in a namespace by `convoy install --tenant NS`.
pub const TENANT_SERVICE_ACCOUNT: &str = "convoy-deployer";

const PART_OF: &str = "app.kubernetes.io/part-of";

/// Every object of a full install except the CRDs, in apply order: the namespace, service
/// accounts and least-privilege RBAC for the controller and the observer, the admission
/// policies that hold convoy's identities to their writes, the default health rules, and the
/// two Deployments running `convoy daemon`.
///
/// What each identity may do (DESIGN.md section 7, "convoy's own identities"): read Releases
/// and sources, write their status subresources, the inventory, Leases, Events and (the
/// controller) the render store in its own namespace, and impersonate ServiceAccounts. No
/// `*`, no Secrets outside its namespace, no `serviceaccounts/token`, no `escalate` or
/// `bind`. Everything a Release deploys is done as the Release's ServiceAccount.
pub fn install_manifests(options: &InstallOptions) -> Vec<serde_json::Value> {
    use serde_json::json;
    let ns = &options.namespace;
    let labels = json!({"app.kubernetes.io/name": "convoy", PART_OF: "convoy"});
    let read = json!(["get", "list", "watch"]);
    let core = "core.convoy.kumodo.io";
    let source = "source.convoy.kumodo.io";
    let health = "health.convoy.kumodo.io";
    let rule = |groups: &[&str], resources: &[&str], verbs: serde_json::Value| json!({"apiGroups": groups, "resources": resources, "verbs": verbs});
    let sources = ["gitrepositories", "helmregistries", "ociregistries"];
    let source_status = [
        "gitrepositories/status",
        "helmregistries/status",
        "ociregistries/status",
    ];
    let impersonate = rule(&[""], &["serviceaccounts"], json!(["impersonate"]));
    let events = rule(
        &["", "events.k8s.io"],
        &["events"],
        json!(["create", "patch"]),
    );
    let controller_rules = json!([
        // update: the finalizer (an Update of the whole object, as the spec says).
        rule(
            &[core],
            &["releases"],
            json!(["get", "list", "watch", "update"])
        ),
        rule(&[core], &["releases/status"], json!(["get", "patch"])),
        rule(
            &[core],
            &["releaseinventories"],
            json!(["get", "list", "watch", "create", "patch", "delete"])
        ),
        rule(
            &[core],
            &["clusters"],
            json!(["get", "list", "watch", "update"])
        ),
        rule(&[core], &["clusters/status"], json!(["get", "update"])),
        rule(&[source], &sources, read.clone()),
        rule(&[source], &source_status, json!(["get", "update"])),
        impersonate.clone(),
        events.clone(),
    ]);
    let observer_rules = json!([
        // patch: the /sync annotation only (the admission policy below holds it to that).
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
        rule(&[source], &sources, read.clone()),
        rule(
            &[health],
            &["healthrulesets", "globalhealthrulesets"],
            read.clone()
        ),
        impersonate,
        events,
    ]);
    let leases = rule(
        &["coordination.k8s.io"],
        &["leases"],
        json!([
            "get", "list", "watch", "create", "update", "patch", "delete"
        ]),
    );
    // The render store: Secrets in convoy's own namespace (the observer only reads them).
    let controller_local = json!([
        leases.clone(),
        rule(
            &[""],
            &["secrets"],
            json!([
                "get", "list", "watch", "create", "update", "patch", "delete"
            ])
        ),
    ]);
    let observer_local = json!([leases, rule(&[""], &["secrets"], read.clone())]);
    // --cluster-admin only: applying and dry-running arbitrary kinds as convoy itself.
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
    let mut objects = vec![
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": labels}}),
    ];
    let binding = |kind: &str, name: &str, role_kind: &str, sa: &str, namespace: Option<&str>| {
        let mut metadata = json!({"name": name, "labels": labels});
        if let Some(n) = namespace {
            metadata["namespace"] = json!(n);
        }
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": metadata,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": ns}]})
    };
    for (who, rules, local, extra) in [
        (
            "controller",
            controller_rules,
            controller_local,
            applier_rules,
        ),
        ("observer", observer_rules, observer_local, dry_run_rules),
    ] {
        let name = format!("convoy-{who}");
        objects.push(json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": ns, "labels": labels}}));
        let mut cluster_roles = vec![(name.clone(), rules)];
        if options.cluster_admin {
            cluster_roles.push((format!("{name}-workloads"), extra));
        }
        for (role, rules) in cluster_roles {
            objects.push(
                json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": role, "labels": labels}, "rules": rules}),
            );
            objects.push(binding(
                "ClusterRoleBinding",
                &role,
                "ClusterRole",
                &name,
                None,
            ));
        }
        let local_name = format!("{name}-local");
        objects.push(
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": local_name, "namespace": ns, "labels": labels}, "rules": local}),
        );
        objects.push(binding("RoleBinding", &local_name, "Role", &name, Some(ns)));
    }
    objects.extend(admission_policies(ns));
    objects.push(
        serde_json::to_value(crate::engine::health::defaults::default_rule_set())
            .unwrap_or_default(),
    );
    for who in ["controller", "observer"] {
        let name = format!("convoy-{who}");
        let pod_labels =
            json!({"app.kubernetes.io/name": "convoy", "app.kubernetes.io/component": who});
        let mut args = vec![
            json!("daemon"),
            json!("--role"),
            json!(who),
            json!("--log-format"),
            json!("json"),
            json!("-v"),
            json!("--cache-dir"),
            json!("/var/cache/convoy"),
        ];
        if !options.cluster_admin {
            args.push(json!(format!(
                "--default-service-account={TENANT_SERVICE_ACCOUNT}"
            )));
        }
        // Both fetch: the observer renders what it compares.
        for prefix in &options.allowed_source_urls {
            args.push(json!(format!("--allow-source-url={prefix}")));
        }
        // Both connect to Clusters: the observer's dry runs and health reads reach them.
        for prefix in &options.allowed_cluster_servers {
            args.push(json!(format!("--allow-cluster-server={prefix}")));
        }
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
                            "args": args,
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

/// ValidatingAdmissionPolicies (GA since Kubernetes 1.30) that hold convoy's own identities
/// to what the ownership table gives them, whatever RBAC says: the observer may change
/// nothing on a Release but the /sync annotation, and neither identity may touch convoy's
/// own Deployments, ServiceAccounts, RBAC or these policies.
fn admission_policies(ns: &str) -> Vec<serde_json::Value> {
    use serde_json::json;
    let labels = json!({"app.kubernetes.io/name": "convoy", PART_OF: "convoy"});
    let observer = format!("system:serviceaccount:{ns}:convoy-observer");
    let controller = format!("system:serviceaccount:{ns}:convoy-controller");
    let sync = crate::engine::api::annotations::SYNC_REQUESTED_AT;
    let observer_policy = json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": "convoy-observer-release-writes", "labels": labels},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": ["core.convoy.kumodo.io"], "apiVersions": ["*"],
                "operations": ["UPDATE"], "resources": ["releases"],
            }]},
            "matchConditions": [{"name": "is-the-observer", "expression": format!("request.userInfo.username == '{observer}'")}],
            "variables": [
                {"name": "oldAnnotations", "expression": "has(oldObject.metadata.annotations) ? oldObject.metadata.annotations : {}"},
                {"name": "newAnnotations", "expression": "has(object.metadata.annotations) ? object.metadata.annotations : {}"},
                {"name": "oldLabels", "expression": "has(oldObject.metadata.labels) ? oldObject.metadata.labels : {}"},
                {"name": "newLabels", "expression": "has(object.metadata.labels) ? object.metadata.labels : {}"},
                {"name": "oldFinalizers", "expression": "has(oldObject.metadata.finalizers) ? oldObject.metadata.finalizers : []"},
                {"name": "newFinalizers", "expression": "has(object.metadata.finalizers) ? object.metadata.finalizers : []"},
            ],
            "validations": [{
                "expression": format!(
                    "object.spec == oldObject.spec && variables.newLabels == variables.oldLabels && variables.newFinalizers == variables.oldFinalizers && variables.oldAnnotations.all(k, k == '{sync}' || (k in variables.newAnnotations && variables.newAnnotations[k] == variables.oldAnnotations[k])) && variables.newAnnotations.all(k, k == '{sync}' || k in variables.oldAnnotations)"
                ),
                "message": format!("convoy's observer may change only the {sync} annotation of a Release"),
            }],
        },
    });
    let own_policy = json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": "convoy-own-objects", "labels": labels},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [
                {"apiGroups": ["apps"], "apiVersions": ["*"], "operations": ["CREATE", "UPDATE", "DELETE"], "resources": ["deployments", "deployments/scale"]},
                {"apiGroups": [""], "apiVersions": ["*"], "operations": ["CREATE", "UPDATE", "DELETE"], "resources": ["serviceaccounts", "serviceaccounts/token"]},
                {"apiGroups": ["rbac.authorization.k8s.io"], "apiVersions": ["*"], "operations": ["CREATE", "UPDATE", "DELETE"],
                 "resources": ["roles", "rolebindings", "clusterroles", "clusterrolebindings"]},
                {"apiGroups": ["admissionregistration.k8s.io"], "apiVersions": ["*"], "operations": ["CREATE", "UPDATE", "DELETE"],
                 "resources": ["validatingadmissionpolicies", "validatingadmissionpolicybindings"]},
            ]},
            "matchConditions": [{"name": "is-convoy", "expression": format!("request.userInfo.username in ['{controller}', '{observer}']")}],
            "variables": [
                {"name": "target", "expression": "request.operation == 'DELETE' ? oldObject : object"},
            ],
            "validations": [{
                "expression": format!(
                    "request.namespace != '{ns}' && !(has(variables.target.metadata.labels) && '{PART_OF}' in variables.target.metadata.labels && variables.target.metadata.labels['{PART_OF}'] == 'convoy')"
                ),
                "message": "convoy's own identities may not change convoy's Deployments, ServiceAccounts, RBAC or admission policies",
            }],
        },
    });
    let bind = |policy: &str| {
        json!({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": policy, "labels": labels},
            "spec": {"policyName": policy, "validationActions": ["Deny"]},
        })
    };
    vec![
        observer_policy,
        bind("convoy-observer-release-writes"),
        own_policy,
        bind("convoy-own-objects"),
    ]
}

/// What `convoy install --tenant NS` creates: the namespace (if missing) and the
/// ServiceAccount a locked-down daemon impersonates for its Releases, with the built-in
/// `admin` role in that namespace only.
pub fn tenant_manifests(namespace: &str) -> Vec<serde_json::Value> {
    use serde_json::json;
    let labels =
        json!({"app.kubernetes.io/name": "convoy", "app.kubernetes.io/component": "tenant"});
    vec![
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}),
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": TENANT_SERVICE_ACCOUNT, "namespace": namespace, "labels": labels}}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": TENANT_SERVICE_ACCOUNT, "namespace": namespace, "labels": labels},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"},
            "subjects": [{"kind": "ServiceAccount", "name": TENANT_SERVICE_ACCOUNT, "namespace": namespace}]}),
    ]
}

/// Refuse to install into `namespace` when the cluster-wide objects serve an install in
/// another namespace that still exists: applying them would point the ClusterRoleBindings and
/// the admission policies at this one, leaving the other install without its permissions and,
/// worse, without the policies that hold its identities. Which namespace they serve is read
/// from the controller's ClusterRoleBinding (its subject). `move_install` skips the check.
pub async fn refuse_other_install(
    conn: &Connection,
    namespace: &str,
    move_install: bool,
) -> Result<(), InstallError> {
    use k8s_openapi::api::core::v1::Namespace;
    use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
    const BINDING: &str = "convoy-controller";
    if move_install {
        return Ok(());
    }
    let read_error = |name: String| {
        move |source: kube::Error| {
            if is_unreachable(&source) {
                InstallError::Connect(conn.unreachable(source))
            } else {
                InstallError::Read { name, source }
            }
        }
    };
    let binding = Api::<ClusterRoleBinding>::all(conn.client.clone())
        .get_opt(BINDING)
        .await
        .map_err(read_error(format!("ClusterRoleBinding/{BINDING}")))?;
    let existing = binding
        .and_then(|b| b.subjects)
        .and_then(|subjects| subjects.into_iter().find_map(|s| s.namespace));
    let Some(existing) = existing.filter(|e| e != namespace) else {
        return Ok(());
    };
    // A namespace deleted without its cluster-wide objects left no install to break.
    let still_there = Api::<Namespace>::all(conn.client.clone())
        .get_opt(&existing)
        .await
        .map_err(read_error(format!("Namespace/{existing}")))?
        .is_some();
    if !still_there {
        return Ok(());
    }
    Err(InstallError::OtherInstall {
        existing,
        namespace: namespace.to_string(),
    })
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

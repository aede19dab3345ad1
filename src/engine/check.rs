//! `convoy check`'s findings: whether a cluster is ready for convoy, as `flux check` answers
//! it for Flux. Each check names what it looked at, what it found and, when it fails, the fix.
//!
//! The expected RBAC comes from [`crate::engine::install::install_manifests`], the same
//! manifests `convoy install` applies, so the check and the install cannot disagree.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{ListParams, PostParams};

use crate::engine::api::Release;
use crate::engine::connect::Connection;
use crate::engine::install::{InstallOptions, install_manifests};

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Pass,
    /// Not broken, but worth knowing (no Release reconciled lately).
    Warn,
    Fail,
}

/// One finding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub check: &'static str,
    pub verdict: Verdict,
    pub detail: String,
}

impl Finding {
    fn new(check: &'static str, verdict: Verdict, detail: impl Into<String>) -> Self {
        Self {
            check,
            verdict,
            detail: detail.into(),
        }
    }
}

/// The daemon's Deployments `convoy install` creates.
pub const DEPLOYMENTS: [&str; 2] = ["convoy-controller", "convoy-observer"];

/// Run every check against the cluster of `conn`, with convoy installed in `namespace`.
/// `now` dates the "recently" of the reconcile check.
pub async fn check(conn: &Connection, namespace: &str, now: jiff::Timestamp) -> Vec<Finding> {
    let mut findings = Vec::new();
    match conn.server_version().await {
        Ok(v) => findings.push(Finding::new(
            "cluster",
            Verdict::Pass,
            format!("{} answers (Kubernetes {})", conn.server, v.git_version),
        )),
        Err(e) => {
            findings.push(Finding::new(
                "cluster",
                Verdict::Fail,
                format!(
                    "{}; check --kubeconfig and --context",
                    crate::engine::error::chain(&e)
                ),
            ));
            return findings;
        }
    }
    findings.push(crds(conn).await);
    findings.extend(rbac(conn, namespace).await);
    findings.push(deployments(conn, namespace).await);
    findings.push(leases(conn, namespace, now).await);
    findings.push(reconciling(conn, now).await);
    findings.extend(store(conn, namespace).await);
    findings
}

/// convoy's CRDs: present, Established, and serving the version this CLI speaks.
async fn crds(conn: &Connection) -> Finding {
    let api: Api<CustomResourceDefinition> = Api::all(conn.client.clone());
    let mut missing = Vec::new();
    let mut stale = Vec::new();
    let wanted = crate::engine::api::crds();
    for crd in &wanted {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let version = crd
            .spec
            .versions
            .iter()
            .find(|v| v.storage)
            .map(|v| v.name.clone())
            .unwrap_or_default();
        match api.get_opt(&name).await {
            Ok(Some(live)) => {
                let established = live
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| {
                        c.iter()
                            .any(|c| c.type_ == "Established" && c.status == "True")
                    });
                let serves = live
                    .spec
                    .versions
                    .iter()
                    .any(|v| v.name == version && v.served);
                // A CRD whose schema differs from this CLI's is an older (or newer) install.
                let same = live.spec.versions == crd.spec.versions;
                if !established || !serves {
                    stale.push(format!("{name} (not serving {version})"));
                } else if !same {
                    stale.push(format!("{name} (another schema than this CLI's)"));
                }
            }
            Ok(None) => missing.push(name),
            Err(e) => {
                return Finding::new(
                    "CRDs",
                    Verdict::Fail,
                    format!(
                        "cannot read the CRDs: {}",
                        crate::engine::apply::applier::api_message(&e)
                    ),
                );
            }
        }
    }
    if !missing.is_empty() {
        return Finding::new(
            "CRDs",
            Verdict::Fail,
            format!("missing: {}; run `convoy install`", missing.join(", ")),
        );
    }
    if !stale.is_empty() {
        return Finding::new(
            "CRDs",
            Verdict::Fail,
            format!(
                "{}; run `convoy install` (or `convoy install --crds-only`) with this CLI",
                stale.join(", ")
            ),
        );
    }
    Finding::new(
        "CRDs",
        Verdict::Pass,
        format!(
            "{} installed and Established, as this CLI defines them",
            wanted.len()
        ),
    )
}

/// What the daemon's ServiceAccounts may do, against what `convoy install` grants them.
async fn rbac(conn: &Connection, namespace: &str) -> Vec<Finding> {
    let manifests = install_manifests(&InstallOptions {
        namespace: namespace.to_string(),
        image: String::new(),
        cluster_admin: false,
        allowed_source_urls: Vec::new(),
        allowed_cluster_servers: Vec::new(),
    });
    let mut findings = Vec::new();
    for account in DEPLOYMENTS {
        let grants = grants_of(&manifests, namespace, account);
        let mut denied = Vec::new();
        for grant in &grants {
            match allowed(conn, namespace, account, grant).await {
                Ok(true) => {}
                Ok(false) => denied.push(grant.to_string()),
                Err(e) => {
                    findings.push(Finding::new(
                        "RBAC",
                        Verdict::Fail,
                        format!(
                            "cannot ask the API server what {account} may do: {}",
                            crate::engine::apply::applier::api_message(&e)
                        ),
                    ));
                    return findings;
                }
            }
        }
        findings.push(if denied.is_empty() {
            Finding::new(
                "RBAC",
                Verdict::Pass,
                format!(
                    "{namespace}/{account} has the {} permissions it needs",
                    grants.len()
                ),
            )
        } else {
            let shown: Vec<&str> = denied.iter().take(3).map(String::as_str).collect();
            Finding::new(
                "RBAC",
                Verdict::Fail,
                format!(
                    "{namespace}/{account} may not {}{}; run `convoy install -n {namespace}`",
                    shown.join(", "),
                    if denied.len() > 3 {
                        format!(" and {} more", denied.len() - 3)
                    } else {
                        String::new()
                    }
                ),
            )
        });
    }
    findings
}

/// One permission: a verb on a resource, in a namespace or cluster-wide.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Grant {
    group: String,
    resource: String,
    verb: String,
    namespace: Option<String>,
}

impl std::fmt::Display for Grant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let resource = if self.group.is_empty() {
            self.resource.clone()
        } else {
            format!("{}.{}", self.resource, self.group)
        };
        match &self.namespace {
            Some(ns) => write!(f, "{} {resource} in {ns}", self.verb),
            None => write!(f, "{} {resource}", self.verb),
        }
    }
}

/// Every (group, resource, verb) the manifests bind to ServiceAccount `account`.
fn grants_of(manifests: &[serde_json::Value], namespace: &str, account: &str) -> Vec<Grant> {
    let mut grants = Vec::new();
    for binding in manifests.iter().filter(|m| {
        matches!(
            m["kind"].as_str(),
            Some("ClusterRoleBinding" | "RoleBinding")
        ) && m["subjects"].as_array().is_some_and(|s| {
            s.iter().any(|s| {
                s["kind"] == "ServiceAccount" && s["name"] == account && s["namespace"] == namespace
            })
        })
    }) {
        let scope = (binding["kind"] == "RoleBinding").then(|| {
            binding["metadata"]["namespace"]
                .as_str()
                .unwrap_or(namespace)
                .to_string()
        });
        let role_name = &binding["roleRef"]["name"];
        let Some(role) = manifests.iter().find(|m| {
            matches!(m["kind"].as_str(), Some("ClusterRole" | "Role"))
                && &m["metadata"]["name"] == role_name
        }) else {
            continue;
        };
        for rule in role["rules"].as_array().into_iter().flatten() {
            let list = |k: &str| -> Vec<String> {
                rule[k]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            };
            for group in list("apiGroups") {
                for resource in list("resources") {
                    for verb in list("verbs") {
                        let grant = Grant {
                            group: group.clone(),
                            resource: resource.clone(),
                            verb,
                            namespace: scope.clone(),
                        };
                        if !grants.contains(&grant) {
                            grants.push(grant);
                        }
                    }
                }
            }
        }
    }
    grants
}

/// A SubjectAccessReview for `account` and `grant`.
async fn allowed(
    conn: &Connection,
    namespace: &str,
    account: &str,
    grant: &Grant,
) -> Result<bool, kube::Error> {
    let (resource, subresource) = match grant.resource.split_once('/') {
        Some((r, s)) => (r.to_string(), Some(s.to_string())),
        None => (grant.resource.clone(), None),
    };
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(format!("system:serviceaccount:{namespace}:{account}")),
            groups: Some(vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{namespace}"),
                "system:authenticated".into(),
            ]),
            resource_attributes: Some(ResourceAttributes {
                group: Some(grant.group.clone()),
                resource: Some(resource),
                subresource,
                verb: Some(grant.verb.clone()),
                namespace: grant.namespace.clone(),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let api: Api<SubjectAccessReview> = Api::all(conn.client.clone());
    let answer = api.create(&PostParams::default(), &review).await?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}

/// The daemon's Deployments: present and Available.
async fn deployments(conn: &Connection, namespace: &str) -> Finding {
    let api: Api<Deployment> = Api::namespaced(conn.client.clone(), namespace);
    let mut problems = Vec::new();
    for name in DEPLOYMENTS {
        match api.get_opt(name).await {
            Ok(Some(d)) => {
                let available = d
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| {
                        c.iter()
                            .any(|c| c.type_ == "Available" && c.status == "True")
                    });
                if !available {
                    problems.push(format!("{name} is not Available"));
                }
            }
            Ok(None) => problems.push(format!("{name} is not installed")),
            Err(e) => problems.push(format!(
                "cannot read {name}: {}",
                crate::engine::apply::applier::api_message(&e)
            )),
        }
    }
    if problems.is_empty() {
        Finding::new(
            "daemon",
            Verdict::Pass,
            format!("{} Available in {namespace}", DEPLOYMENTS.join(" and ")),
        )
    } else {
        Finding::new(
            "daemon",
            Verdict::Fail,
            format!(
                "{} in {namespace}; `convoy install --wait -n {namespace}` installs and waits for them",
                problems.join(", ")
            ),
        )
    }
}

/// Shard Leases, when the daemon shards: each held and renewed within its duration.
async fn leases(conn: &Connection, namespace: &str, now: jiff::Timestamp) -> Finding {
    let api: Api<Lease> = Api::namespaced(conn.client.clone(), namespace);
    let list = match api.list(&ListParams::default()).await {
        Ok(l) => l.items,
        Err(e) => {
            return Finding::new(
                "shards",
                Verdict::Warn,
                format!(
                    "cannot list Leases: {}",
                    crate::engine::apply::applier::api_message(&e)
                ),
            );
        }
    };
    let shards: Vec<&Lease> = list
        .iter()
        .filter(|l| {
            l.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.contains("-shard-"))
        })
        .collect();
    if shards.is_empty() {
        return Finding::new(
            "shards",
            Verdict::Pass,
            "not sharded: one daemon replica does every Release",
        );
    }
    let lapsed: Vec<String> = shards
        .iter()
        .filter(|l| {
            let Some(spec) = l.spec.as_ref() else {
                return true;
            };
            let held = spec
                .holder_identity
                .as_deref()
                .is_some_and(|h| !h.is_empty());
            let duration = spec.lease_duration_seconds.unwrap_or(15).max(1) as i64;
            let fresh = spec
                .renew_time
                .as_ref()
                .is_some_and(|t| now.as_second() - t.0.as_second() <= duration);
            !(held && fresh)
        })
        .filter_map(|l| l.metadata.name.clone())
        .collect();
    if lapsed.is_empty() {
        Finding::new(
            "shards",
            Verdict::Pass,
            format!("{} shard Leases held and renewed", shards.len()),
        )
    } else {
        Finding::new(
            "shards",
            Verdict::Fail,
            format!(
                "not held or not renewed: {}; is every daemon replica running?",
                lapsed.join(", ")
            ),
        )
    }
}

/// How recently any reconcile wrote a Release's status (a daemon at work writes one at least
/// per change).
async fn reconciling(conn: &Connection, now: jiff::Timestamp) -> Finding {
    let api: Api<Release> = Api::all(conn.client.clone());
    let releases = match api.list(&ListParams::default()).await {
        Ok(l) => l.items,
        Err(kube::Error::Api(s)) if s.code == 404 => {
            return Finding::new(
                "reconciles",
                Verdict::Fail,
                "no Release API to list (the CRDs are missing)",
            );
        }
        Err(e) => {
            return Finding::new(
                "reconciles",
                Verdict::Fail,
                format!(
                    "cannot list Releases: {}",
                    crate::engine::apply::applier::api_message(&e)
                ),
            );
        }
    };
    if releases.is_empty() {
        return Finding::new("reconciles", Verdict::Pass, "no Releases yet");
    }
    let latest = releases
        .iter()
        .filter_map(|r| r.status.as_ref()?.reconciled_at.as_ref().map(|t| t.0))
        .max();
    match latest {
        None => Finding::new(
            "reconciles",
            Verdict::Warn,
            format!(
                "{} Releases, none reconciled yet: is the daemon running? (`convoy sync NAME` reconciles one from here)",
                releases.len()
            ),
        ),
        Some(t) => {
            let ago = Duration::from_secs((now.as_second() - t.as_second()).max(0) as u64);
            Finding::new(
                "reconciles",
                Verdict::Pass,
                format!(
                    "{} Releases; the last status write by a reconcile was {} ago",
                    releases.len(),
                    crate::engine::duration::human(ago)
                ),
            )
        }
    }
}

/// The render store's namespace and the digest key.
async fn store(conn: &Connection, namespace: &str) -> Vec<Finding> {
    let namespaces: Api<Namespace> = Api::all(conn.client.clone());
    let exists = match namespaces.get_opt(namespace).await {
        Ok(n) => n.is_some(),
        Err(e) => {
            return vec![Finding::new(
                "render store",
                Verdict::Fail,
                format!(
                    "cannot read namespace {namespace}: {}",
                    crate::engine::apply::applier::api_message(&e)
                ),
            )];
        }
    };
    if !exists {
        return vec![Finding::new(
            "render store",
            Verdict::Fail,
            format!(
                "namespace {namespace} does not exist: no pins, rollbacks or history; run `convoy install`"
            ),
        )];
    }
    let secrets: Api<Secret> = Api::namespaced(conn.client.clone(), namespace);
    let key = match secrets
        .get_metadata_opt(crate::engine::digest_key::KEY_SECRET)
        .await
    {
        Ok(Some(_)) => Finding::new(
            "digest key",
            Verdict::Pass,
            "Secret digests are keyed (diffs and inventories reveal no values)",
        ),
        Ok(None) => Finding::new(
            "digest key",
            Verdict::Fail,
            format!(
                "Secret {namespace}/{} is missing; `convoy install` creates it",
                crate::engine::digest_key::KEY_SECRET
            ),
        ),
        Err(e) => Finding::new(
            "digest key",
            Verdict::Warn,
            format!(
                "cannot read it: {}",
                crate::engine::apply::applier::api_message(&e)
            ),
        ),
    };
    vec![
        Finding::new(
            "render store",
            Verdict::Pass,
            format!("Secrets in namespace {namespace}"),
        ),
        key,
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grants_come_from_the_install_manifests() {
        let manifests = install_manifests(&InstallOptions {
            namespace: "convoy-system".into(),
            image: String::new(),
            cluster_admin: false,
            allowed_source_urls: Vec::new(),
            allowed_cluster_servers: Vec::new(),
        });
        let grants = grants_of(&manifests, "convoy-system", "convoy-observer");
        let shown: Vec<String> = grants.iter().map(|g| g.to_string()).collect();
        assert!(
            shown.contains(&"patch releases/status.core.convoy.kumodo.io".to_string()),
            "{shown:?}"
        );
        assert!(
            !shown.iter().any(|g| g.starts_with("update releases.")),
            "the observer may not update Releases: {shown:?}"
        );
    }
}

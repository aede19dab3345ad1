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

//! convoy's API: the CRD types, the CRDs generated from them, and the names that are part of
//! the contract (condition types, reasons, annotations, field managers).
//!
//! Design: DESIGN.md sections 1 and 2.

// kube's printcolumn(...) attributes repeat `type_ = "string"`, which this lint mistakes for
// a duplicated attribute.
#![allow(clippy::duplicated_attributes)]

mod cluster;
mod constants;
mod health;
mod inventory;
mod release;
mod schema;
mod source;

pub use cluster::*;
pub use constants::*;
pub use health::*;
pub use inventory::*;
pub use release::*;
pub use source::*;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

/// Every CRD convoy defines, in install order.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![
        Release::crd(),
        ReleaseInventory::crd(),
        Cluster::crd(),
        GitRepository::crd(),
        HelmRegistry::crd(),
        OCIRegistry::crd(),
        HealthRuleSet::crd(),
        GlobalHealthRuleSet::crd(),
    ]
}

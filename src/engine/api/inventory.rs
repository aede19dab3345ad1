//! The `ReleaseInventory` kind: what a Release applied and how healthy each piece is.
//!
//! Spec: status-ownership.txt "ReleaseInventory". Four writers share each object through
//! list-map keys: the controller's `Put` and `PutHooks`, and the health loop's entry and hook
//! status writes. There is no status subresource; `inventory` and `hooks` are top level.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::release::HookPhase;

/// The record of what a Release applied (same name and namespace as the Release).
#[derive(CustomResource, Serialize, Deserialize, Debug, Clone, Default, PartialEq, JsonSchema)]
#[kube(
    group = "core.convoy.kumodo.io",
    version = "v1alpha1",
    kind = "ReleaseInventory",
    namespaced,
    no_spec,
    derive = "PartialEq",
    derive = "Default",
    category = "convoy",
    doc = "What a Release applied to its cluster, with the health of each object and hook.",
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ReleaseInventoryFields {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend(
        "x-kubernetes-list-type" = "map",
        "x-kubernetes-list-map-keys" = ["group", "kind", "namespace", "name"]
    ))]
    pub inventory: Vec<InventoryEntry>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name", "phase"]))]
    pub hooks: Vec<HookEntry>,
}

/// An applied object. The keys are always sent (empty group for the core group, empty
/// namespace for cluster-scoped objects), because every writer of an entry must send them.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InventoryEntry {
    pub group: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
    // --- convoy-inventory (the controller's Put)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub render_ref: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wave: Option<i32>,
    /// Digest of the object as the controller last applied it (deviation: not in the spec's
    /// entry; it lets a re-sync skip objects that are unchanged on both sides).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    // --- convoy-health-inventory (the health loop)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<HealthState>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_unhealthy: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assessed_render_ref: Option<String>,
}

impl InventoryEntry {
    /// The list-map key of this entry.
    pub fn key(&self) -> ObjectKey {
        ObjectKey {
            group: self.group.clone(),
            kind: self.kind.clone(),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        }
    }
}

/// Identity of an object on a cluster, as the inventory keys it.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    pub group: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
}

impl std::fmt::Display for ObjectKey {
    /// `kind/name` or `kind/namespace/name`, with the group when it is not core
    /// (`Deployment.apps/web/api`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.group.is_empty() {
            write!(f, "{}", self.kind)?;
        } else {
            write!(f, "{}.{}", self.kind, self.group)?;
        }
        if !self.namespace.is_empty() {
            write!(f, "/{}", self.namespace)?;
        }
        write!(f, "/{}", self.name)
    }
}

/// The health of one object (health-loop.txt "Per-entry evaluation").
#[derive(
    Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, JsonSchema,
)]
pub enum HealthState {
    Healthy,
    Progressing,
    Degraded,
    Unknown,
}

impl HealthState {
    pub fn as_str(self) -> &'static str {
        match self {
            HealthState::Healthy => "Healthy",
            HealthState::Progressing => "Progressing",
            HealthState::Degraded => "Degraded",
            HealthState::Unknown => "Unknown",
        }
    }
}

/// A lifecycle hook run, keyed by name and phase.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HookEntry {
    pub name: String,
    pub phase: HookPhase,
    // --- convoy-inventory-hooks (the controller's PutHooks)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub render_ref: Option<String>,
    // --- convoy-hook-status (the health loop)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<HookState>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<Time>,
}

/// The state of a hook workload (DESIGN.md "pollHookWorkload").
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, JsonSchema)]
pub enum HookState {
    Running,
    Succeeded,
    Failed,
}

impl HookState {
    pub fn as_str(self) -> &'static str {
        match self {
            HookState::Running => "Running",
            HookState::Succeeded => "Succeeded",
            HookState::Failed => "Failed",
        }
    }

    /// Whether the hook has ended.
    pub fn is_terminal(self) -> bool {
        matches!(self, HookState::Succeeded | HookState::Failed)
    }
}

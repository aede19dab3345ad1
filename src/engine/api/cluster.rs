//! The `Cluster` kind: a target cluster a Release deploys to.
//!
//! Design: DESIGN.md section 1. The kubeconfig lives in a Secret, or `inCluster: true` names the
//! cluster convoy runs in. The Cluster controller writes status with UpdateStatus (one writer).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::engine::duration::GoDuration;

use super::release::Condition;

/// A target cluster.
#[derive(CustomResource, Serialize, Deserialize, Debug, Clone, Default, PartialEq, JsonSchema)]
#[kube(
    group = "core.convoy.kumodo.io",
    version = "v1alpha1",
    kind = "Cluster",
    namespaced,
    status = "ClusterStatus",
    derive = "PartialEq",
    category = "convoy",
    doc = "A Kubernetes cluster that Releases deploy to.",
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(name = "Version", type_ = "string", json_path = ".status.version"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSpec {
    /// The Secret (in the Cluster's namespace) that holds a kubeconfig.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubeconfig_secret_ref: Option<SecretKeyRef>,
    /// Use the cluster convoy itself runs in (its service account, or the CLI's kubeconfig).
    #[serde(default)]
    pub in_cluster: bool,
    /// How often the Cluster controller checks reachability (a Go duration, default `5m`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<GoDuration>,
}

/// A key of a Secret in the same namespace.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    #[schemars(length(max = 253), pattern(super::schema::OBJECT_NAME))]
    pub name: String,
    /// Default `kubeconfig`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// What the Cluster controller last saw.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// The server's `gitVersion`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_probe_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

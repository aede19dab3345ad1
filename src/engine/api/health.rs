//! Health rule kinds: `HealthRuleSet` (namespaced) and `GlobalHealthRuleSet` (cluster).
//!
//! Spec: health-loop.txt "Assessment" (collectRules). A rule matches objects by group, kind and
//! labels and judges them with a CEL expression over `object`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Health rules for the Releases of one namespace.
#[derive(CustomResource, Serialize, Deserialize, Debug, Clone, Default, PartialEq, JsonSchema)]
#[kube(
    group = "health.convoy.kumodo.io",
    version = "v1alpha1",
    kind = "HealthRuleSet",
    namespaced,
    derive = "PartialEq",
    category = "convoy",
    doc = "CEL health rules for the Releases of a namespace, picked by localRuleSetSelector."
)]
#[serde(rename_all = "camelCase")]
pub struct HealthRuleSetSpec {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub rules: Vec<HealthRule>,
}

/// Health rules for every namespace.
#[derive(CustomResource, Serialize, Deserialize, Debug, Clone, Default, PartialEq, JsonSchema)]
#[kube(
    group = "health.convoy.kumodo.io",
    version = "v1alpha1",
    kind = "GlobalHealthRuleSet",
    derive = "PartialEq",
    category = "convoy",
    doc = "CEL health rules for every namespace, picked by globalRuleSetSelector."
)]
#[serde(rename_all = "camelCase")]
pub struct GlobalHealthRuleSetSpec {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub rules: Vec<HealthRule>,
}

/// One rule.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HealthRule {
    pub name: String,
    #[serde(rename = "match")]
    pub matches: RuleMatch,
    /// CEL expression over `object` that returns a bool: true when healthy.
    pub healthy: String,
    /// CEL expression over `object` that returns a string explaining the state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Which objects a rule judges.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RuleMatch {
    /// API group; empty for the core group, `*` for any.
    #[serde(default)]
    pub group: String,
    /// Kind, or `*` for any.
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
}

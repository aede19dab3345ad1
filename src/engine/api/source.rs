//! Source kinds: `GitRepository`, `HelmRegistry`, `OCIRegistry`.
//!
//! Design: DESIGN.md sections 1 and 3. A source names where content lives and how to log in;
//! a Release names what to take from it. The source controllers write status with
//! UpdateStatus (one writer per kind): the artifact revision and digest they last fetched.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::engine::duration::GoDuration;

use super::release::{Condition, GitRef};

/// The longest URL a source may name (as browsers and most servers allow): an unbounded
/// one is kept, with every error that quotes it, in the daemon's memory for each fetch.
pub const MAX_URL_LENGTH: usize = 2048;

/// A Git repository.
#[derive(CustomResource, Serialize, Deserialize, Debug, Clone, Default, PartialEq, JsonSchema)]
#[kube(
    group = "source.convoy.kumodo.io",
    version = "v1alpha1",
    kind = "GitRepository",
    namespaced,
    status = "SourceStatus",
    derive = "PartialEq",
    shortname = "gitrepo",
    category = "convoy",
    doc = "A Git repository that Releases render from.",
    printcolumn(name = "URL", type_ = "string", json_path = ".spec.url"),
    printcolumn(
        name = "Revision",
        type_ = "string",
        json_path = ".status.artifact.revision"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct GitRepositorySpec {
    /// `file://`, `git://`, `http(s)://` or `ssh://` URL.
    #[schemars(length(max = MAX_URL_LENGTH))]
    pub url: String,
    /// Default revision; a Release's `source.ref` overrides it. Default: the remote HEAD.
    #[serde(default, rename = "ref", skip_serializing_if = "Option::is_none")]
    pub git_ref: Option<GitRef>,
    /// Secret with `username`/`password` (HTTPS) or `identity`/`known_hosts` (SSH).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<LocalObjectRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<GoDuration>,
}

/// An HTTP Helm chart repository (`index.yaml` and chart archives).
#[derive(CustomResource, Serialize, Deserialize, Debug, Clone, Default, PartialEq, JsonSchema)]
#[kube(
    group = "source.convoy.kumodo.io",
    version = "v1alpha1",
    kind = "HelmRegistry",
    namespaced,
    status = "SourceStatus",
    derive = "PartialEq",
    category = "convoy",
    doc = "A Helm chart repository that Releases render from.",
    printcolumn(name = "URL", type_ = "string", json_path = ".spec.url"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct HelmRegistrySpec {
    #[schemars(length(max = MAX_URL_LENGTH))]
    pub url: String,
    /// Secret with `username` and `password` for basic auth.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<LocalObjectRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<GoDuration>,
}

/// An OCI registry repository holding Helm charts or plain manifest bundles.
#[derive(CustomResource, Serialize, Deserialize, Debug, Clone, Default, PartialEq, JsonSchema)]
#[kube(
    group = "source.convoy.kumodo.io",
    version = "v1alpha1",
    kind = "OCIRegistry",
    namespaced,
    status = "SourceStatus",
    derive = "PartialEq",
    category = "convoy",
    doc = "An OCI registry repository that Releases render from.",
    printcolumn(name = "URL", type_ = "string", json_path = ".spec.url"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct OCIRegistrySpec {
    /// `oci://host[:port]/repository`.
    #[schemars(length(max = MAX_URL_LENGTH))]
    pub url: String,
    /// Secret with `username` and `password`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<LocalObjectRef>,
    /// Talk plain HTTP (a registry on loopback).
    #[serde(default)]
    pub insecure: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<GoDuration>,
}

/// A reference to an object in the same namespace.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, Eq, JsonSchema)]
pub struct LocalObjectRef {
    pub name: String,
}

/// What a source controller last fetched.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SourceStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact: Option<Artifact>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// An immutable fetched artifact.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Artifact {
    pub revision: String,
    pub digest: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_update_time: Option<Time>,
}

//! The `Release` kind: what to deploy where, and what convoy did about it.
//!
//! Spec: the status fields of status-and-conditions.txt and status-ownership.txt; the spec
//! outline of DESIGN.md section 1. Every optional field is omitted when empty, so no writer
//! ever sends a zero value for a field another writer owns.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::engine::duration::GoDuration;

use super::inventory::HookState;
use super::schema;

/// A Release: take a source, render it, and keep the result applied, in sync and healthy on a
/// Cluster.
#[derive(CustomResource, Serialize, Deserialize, Debug, Clone, PartialEq, JsonSchema)]
#[kube(
    group = "core.convoy.kumodo.io",
    version = "v1alpha1",
    kind = "Release",
    namespaced,
    status = "ReleaseStatus",
    derive = "PartialEq",
    shortname = "rel",
    category = "convoy",
    doc = "A Release renders a source and keeps the result applied, in sync and healthy on a Cluster.",
    printcolumn(name = "State", type_ = "string", json_path = ".status.rollout.state"),
    printcolumn(
        name = "Applied",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Applied\")].status"
    ),
    printcolumn(
        name = "InSync",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"InSync\")].status"
    ),
    printcolumn(
        name = "Healthy",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Healthy\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ReleaseSpec {
    /// Where the content comes from.
    pub source: SourceRef,
    /// How to render it.
    #[serde(default)]
    pub content: Content,
    /// Name of a `Cluster` in the Release's namespace; omitted: the cluster the Release lives in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253), pattern(schema::OBJECT_NAME))]
    pub cluster: Option<String>,
    /// Namespace for namespaced objects of the render that name none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63), pattern(schema::NAMESPACE_NAME))]
    pub target_namespace: Option<String>,
    /// A ServiceAccount of the Release's namespace that convoy impersonates for everything it
    /// does for this Release on the cluster the Release lives in: the dry run, apply and prune,
    /// hooks, the observer's reads and dry runs, and the reads of the Secrets and ConfigMaps
    /// the Release names. Kubernetes RBAC then decides what the Release may change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253), pattern(schema::OBJECT_NAME_OR_EMPTY))]
    pub service_account_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync_policy: Option<Box<SyncPolicy>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_wave: Option<ClusterWave>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_assessment: Option<Box<HealthAssessment>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_policy: Option<Box<FailurePolicy>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_policy: Option<DeletionPolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention_policy: Option<RetentionPolicy>,
    /// Post-render mutations, applied in order (deviation from the spec: in the Release spec,
    /// so a change bumps `metadata.generation`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mutations: Vec<Mutation>,
    /// Lifecycle hooks (deviation: in the spec, as with mutations).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifecycle: Option<Lifecycle>,
    /// Fields of rendered objects that another writer owns (an HPA's `spec.replicas`, a
    /// webhook's `caBundle`): never sent by the apply, never reported as drift.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub drift_exclusions: Vec<DriftExclusion>,
}

/// Fields convoy leaves to others on the objects `target` matches.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DriftExclusion {
    /// Which rendered objects (required; every set field must match).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<MutationTarget>,
    /// RFC 6901 JSON pointers of the fields (`/spec/replicas`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub json_pointers: Vec<String>,
    /// Field managers whose fields on the live object are left to them (`hpa-controller`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub managers: Vec<String>,
}

impl ReleaseSpec {
    /// `syncPolicy.interval`, when set and not zero (zero, like absent, means no periodic pass).
    pub fn interval(&self) -> Option<std::time::Duration> {
        self.sync_policy
            .as_ref()
            .and_then(|p| p.interval.as_ref())
            .map(|d| d.get())
            .filter(|d| !d.is_zero())
    }

    /// `syncPolicy.mode`, Automatic when unset.
    pub fn sync_mode(&self) -> SyncMode {
        self.sync_policy
            .as_ref()
            .map(|p| p.mode)
            .unwrap_or_default()
    }
}

/// The kind of source object a Release reads.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash, JsonSchema)]
pub enum SourceKind {
    GitRepository,
    HelmRegistry,
    #[serde(rename = "OCIRegistry")]
    OciRegistry,
}

impl SourceKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SourceKind::GitRepository => "GitRepository",
            SourceKind::HelmRegistry => "HelmRegistry",
            SourceKind::OciRegistry => "OCIRegistry",
        }
    }
}

/// A reference to a source object and what to take from it.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SourceRef {
    pub kind: SourceKind,
    /// Name of the source object in the Release's namespace.
    #[schemars(length(max = 253), pattern(schema::OBJECT_NAME))]
    pub name: String,
    /// Git: the revision to check out; overrides the GitRepository's own ref.
    #[serde(default, rename = "ref", skip_serializing_if = "Option::is_none")]
    pub git_ref: Option<GitRef>,
    /// Git and OCI: the directory inside the artifact to render.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Helm: the chart name in the repository.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chart: Option<String>,
    /// Helm: an exact chart version or a semver range.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// OCI: the tag of the artifact.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    /// OCI: the digest of the artifact (wins over `tag`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
}

/// A Git revision. Exactly one field is expected; `semver` is `Unsupported`.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GitRef {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub semver: Option<String>,
}

/// How a source is rendered.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum ContentType {
    #[default]
    Manifests,
    Kustomize,
    Helm,
    /// Defined by the API, `Unsupported` by convoy.
    Jsonnet,
}

/// What to render and with which inputs.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Content {
    #[serde(default, rename = "type")]
    pub content_type: ContentType,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub helm: Option<HelmContent>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kustomize: Option<KustomizeContent>,
}

/// kustomize rendering inputs.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KustomizeContent {
    /// Let kustomize fetch remote bases and components (`https://…`, `git::…`,
    /// `github.com/…`) from the network. Off by default: a render reads only the source.
    #[serde(default)]
    pub allow_remote_bases: bool,
}

/// Helm rendering inputs.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HelmContent {
    /// Release name passed to `helm template`; defaults to the Release's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release_name: Option<String>,
    /// Inline values: the last and strongest layer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::preserve_unknown_object")]
    pub values: Option<serde_json::Value>,
    /// Value layers, applied in order over the chart defaults; later wins.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values_from: Vec<ValuesFrom>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dependency_mode: Option<DependencyMode>,
}

/// Whether chart dependencies are fetched. `resolve` is `Unsupported`: vendor them in `charts/`.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum DependencyMode {
    #[default]
    None,
    Resolve,
}

/// The kind of object a value layer comes from.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, JsonSchema)]
pub enum ValuesFromKind {
    ConfigMap,
    Secret,
    GitRepository,
}

/// One Helm value layer.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ValuesFrom {
    pub kind: ValuesFromKind,
    #[schemars(length(max = 253), pattern(schema::OBJECT_NAME))]
    pub name: String,
    /// ConfigMap or Secret key holding YAML values (default `values.yaml`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// GitRepository: path of a YAML values file in the checkout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

/// When convoy applies a new render.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, Default, PartialEq, Eq, JsonSchema)]
pub enum SyncMode {
    /// Apply every new render.
    #[default]
    Automatic,
    /// Apply only on a /sync request.
    Manual,
}

#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SyncPolicy {
    #[serde(default)]
    pub mode: SyncMode,
    /// How often to reconcile when nothing happens (a Go duration such as `5m`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<GoDuration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_backoff: Option<RetryBackoff>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waves: Option<WavePolicy>,
}

/// Backoff of retried failures: `initial × factor^(n−1)`, capped by `max`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RetryBackoff {
    pub initial: GoDuration,
    /// Default 2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub factor: Option<u32>,
    /// Default `1000s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<GoDuration>,
}

/// How sync waves wait for each other.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WavePolicy {
    #[serde(default)]
    pub wait_for_health: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<GoDuration>,
}

/// The Release's place among the Releases on the same Cluster.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterWave {
    pub wave: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<GoDuration>,
}

/// Which health rules apply and how long an object may fail before it is Degraded.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HealthAssessment {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub global_rule_set_selector: Option<LabelSelector>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_rule_set_selector: Option<LabelSelector>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<GoDuration>,
    /// Judge objects that no selected rule matches with convoy's built-in rules (the ones
    /// `convoy install` ships). Default true; `false` with no selector turns health
    /// assessment off (Healthy is then True with reason NotConfigured).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub builtin_rules: Option<bool>,
}

/// What to do when a rollout fails.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, Default, PartialEq, Eq, JsonSchema)]
pub enum RollbackMode {
    #[default]
    Never,
    OnWaveFailure,
}

#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FailurePolicy {
    /// How long a rollout may stay Progressing, from `status.rollout.startedAt`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<GoDuration>,
    #[serde(default)]
    pub rollback: RollbackMode,
}

#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeletionPolicy {
    /// Leave the applied objects on the cluster when the Release is deleted.
    #[serde(default)]
    pub keep_workloads: bool,
    /// Wait (with an error) instead of skipping the prune when the cluster is unreachable.
    #[serde(default)]
    pub block_on_cluster_unreachable: bool,
}

#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RetentionPolicy {
    /// Renders kept in the history (default 10, at most 100: the render store is in
    /// convoy's own namespace, outside the tenant's quota).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_HISTORY))]
    pub max_history: Option<i32>,
}

/// The most renders a Release's history may keep (`retentionPolicy.maxHistory`).
pub const MAX_HISTORY: i32 = 100;

/// A post-render mutation. Exactly one operation field is set; `target` narrows the objects it
/// touches (all objects when omitted).
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Mutation {
    /// Names the mutation in status and error messages.
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<MutationTarget>,
    /// Set `metadata.namespace` of namespaced objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub set_namespace: Option<String>,
    /// Add or replace labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::string_map")]
    pub labels: Option<BTreeMap<String, String>>,
    /// Add or replace annotations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::string_map")]
    pub annotations: Option<BTreeMap<String, String>>,
    /// RFC 6902 JSON patch operations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json_patch: Option<Vec<JsonPatchOp>>,
    /// RFC 7386 JSON merge patch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::preserve_unknown_object")]
    pub merge_patch: Option<serde_json::Value>,
    /// Image overrides of containers, init containers and ephemeral containers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub images: Option<Vec<ImageOverride>>,
}

/// Which rendered objects a mutation applies to; every set field must match.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MutationTarget {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// A label selector in kubectl's syntax (`app=web,tier!=cache`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<String>,
}

/// One RFC 6902 operation.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JsonPatchOp {
    /// add, remove, replace, move, copy or test.
    pub op: String,
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::preserve_unknown_any")]
    pub value: Option<serde_json::Value>,
}

/// Replace an image by name (the part before the tag or digest), as kustomize's `images` does.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageOverride {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_tag: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
}

/// Lifecycle hooks of a Release.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Lifecycle {
    /// The hooks; no two of one phase share a name (a list-map keyed by name and phase).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name", "phase"]))]
    pub hooks: Vec<Hook>,
}

/// When a hook runs.
// `sync` runs with the objects of its sync wave (Argo CD's `Sync` hooks): armed after the wave
// is applied, and the next wave waits for it. (A plain comment: a doc comment on one variant
// turns the CRD's enum into a oneOf and drops `null` from the optional uses.)
#[derive(
    Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub enum HookPhase {
    PreSync,
    Sync,
    PostSync,
    SyncFailed,
    PreDelete,
    PostDelete,
}

impl HookPhase {
    pub fn as_str(self) -> &'static str {
        match self {
            HookPhase::PreSync => "preSync",
            HookPhase::Sync => "sync",
            HookPhase::PostSync => "postSync",
            HookPhase::SyncFailed => "syncFailed",
            HookPhase::PreDelete => "preDelete",
            HookPhase::PostDelete => "postDelete",
        }
    }
}

/// What a failed hook does to its phase.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, Default, PartialEq, Eq, JsonSchema)]
pub enum HookFailurePolicy {
    #[default]
    Fail,
    Continue,
}

/// A lifecycle hook: a Job (or a Pod) run in the target cluster at a phase. Exactly one of
/// `job` and `pod` (the API server checks it, so a hook never runs an empty Job).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "has(self.job) != has(self.pod)",
    "message": "a hook sets exactly one of job and pod"
}]))]
pub struct Hook {
    /// The hook's name, one per phase, without a `/` (hook entries named Kind/namespace/name
    /// are content hooks').
    #[schemars(length(min = 1), pattern(r"^[^/]+$"))]
    pub name: String,
    pub phase: HookPhase,
    /// A Job spec (`batch/v1` JobSpec).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::preserve_unknown_object")]
    pub job: Option<serde_json::Value>,
    /// A Pod spec (`v1` PodSpec), for hooks that need no Job controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::preserve_unknown_object")]
    pub pod: Option<serde_json::Value>,
    #[serde(default)]
    pub on_failure: HookFailurePolicy,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<GoDuration>,
}

// ------------------------------------------------------------------------------------------
// Status
// ------------------------------------------------------------------------------------------

/// A Release's status. Three writers share it (status-ownership.txt); each sends only its own
/// fields, which is why every field here is skipped when empty.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReleaseStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_attempted: Option<Box<Attempt>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_successful: Option<Box<Attempt>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_healthy: Option<Box<LastHealthy>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<Box<RolloutStatus>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pin: Option<PinStatus>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["wave"]))]
    pub waves: Vec<WaveStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifecycle: Option<LifecycleStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_retention_policy: Option<RetentionPolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_summary: Option<HealthSummary>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reconciled_at: Option<Time>,
    /// The /sync request (annotation value) last applied in manual mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handled_sync_at: Option<String>,
    /// The forced /sync request (annotation value) last handled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handled_force_sync_at: Option<String>,
    /// What the Release waits for and since when (deviation: not in the spec's status; the
    /// wave and cluster-wave timeouts count from it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<Box<Waiting>>,
}

/// A hold in progress.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Waiting {
    /// The Applied reason of the hold.
    pub reason: String,
    /// What is awaited: `wave 2`, `cluster wave 0`.
    pub target: String,
    pub since: Time,
}

impl ReleaseStatus {
    /// The condition of the given type, if present.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }

    /// The renderRef of `lastSuccessful`: the render that runs.
    pub fn applied_render(&self) -> Option<&str> {
        self.last_successful.as_ref()?.render_ref.as_deref()
    }

    /// The renderRef of `lastAttempted`.
    pub fn attempted_render(&self) -> Option<&str> {
        self.last_attempted.as_ref()?.render_ref.as_deref()
    }
}

/// A Release by namespace and name: how logs, messages and the render store name it
/// (`namespace/name`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ReleaseId {
    pub namespace: String,
    pub name: String,
}

impl ReleaseId {
    pub fn of(release: &Release) -> Self {
        Self {
            namespace: release.metadata.namespace.clone().unwrap_or_default(),
            name: release.metadata.name.clone().unwrap_or_default(),
        }
    }

    pub fn render_key(&self, render_ref: &str) -> String {
        format!("{}/{}/renders/{render_ref}", self.namespace, self.name)
    }

    pub fn history_key(&self) -> String {
        format!("{}/{}/history", self.namespace, self.name)
    }
}

impl std::fmt::Display for ReleaseId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// A condition's status, as `metav1.Condition` spells it.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum ConditionStatus {
    True,
    False,
    #[default]
    Unknown,
}

impl ConditionStatus {
    pub const ALL: [ConditionStatus; 3] = [
        ConditionStatus::True,
        ConditionStatus::False,
        ConditionStatus::Unknown,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            ConditionStatus::True => "True",
            ConditionStatus::False => "False",
            ConditionStatus::Unknown => "Unknown",
        }
    }

    pub fn is_true(self) -> bool {
        self == ConditionStatus::True
    }
}

impl std::fmt::Display for ConditionStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A condition, shaped like `metav1.Condition`.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: ConditionStatus,
    #[serde(default)]
    pub reason: String,
    #[serde(default)]
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// One reconcile attempt: what it resolved and how it ended.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Attempt {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempted_at: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_source: Option<ResolvedSource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_cluster: Option<ResolvedCluster>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resolved_mutations: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub render_ref: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<AttemptPhase>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<Failure>,
}

/// How an attempt ended. Empty (absent) while the reconcile waits.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, JsonSchema)]
pub enum AttemptPhase {
    /// Defined by the API; convoy does not set it.
    Rendering,
    /// Defined by the API; convoy does not set it.
    Syncing,
    Succeeded,
    Failed,
}

/// The source as a reconcile resolved it.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedSource {
    pub kind: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Commit, chart version or OCI tag that was fetched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// Content digest of the fetched artifact.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
}

/// The target cluster as a reconcile resolved it.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedCluster {
    /// The Cluster's name; empty for the cluster the Release lives in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

/// Which step failed.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Failure {
    /// One of the `failure_stages` constants.
    pub stage: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hook_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hook_phase: Option<HookPhase>,
}

/// The newest render that was assessed healthy: the rollback target.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LastHealthy {
    pub render_ref: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_source: Option<ResolvedSource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub healthy_at: Option<Time>,
}

/// States of the rollout state machine (DESIGN.md section 3).
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, JsonSchema)]
pub enum RolloutState {
    Progressing,
    Succeeded,
    Failed,
    RolledBack,
}

impl RolloutState {
    pub fn as_str(self) -> &'static str {
        match self {
            RolloutState::Progressing => "Progressing",
            RolloutState::Succeeded => "Succeeded",
            RolloutState::Failed => "Failed",
            RolloutState::RolledBack => "RolledBack",
        }
    }
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutStatus {
    pub render_ref: String,
    pub state: RolloutState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The pin in effect. Sent only while pinned, so an unpin clears it.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PinStatus {
    pub render_ref: String,
}

/// One sync wave of the last attempt.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WaveStatus {
    pub wave: i32,
    /// Number of objects in the wave.
    #[serde(default)]
    pub objects: u32,
    /// Whether the wave was applied in the last attempt.
    #[serde(default)]
    pub applied: bool,
    /// Whether every object of the wave is Healthy for the current render (from the inventory).
    #[serde(default)]
    pub healthy: bool,
}

/// Hook progress per phase.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LifecycleStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub phases: Vec<LifecyclePhaseStatus>,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LifecyclePhaseStatus {
    pub phase: HookPhase,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hooks: Vec<LifecycleHookStatus>,
    /// Every hook of the phase reached a terminal state.
    #[serde(default)]
    pub finished: bool,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LifecycleHookStatus {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<HookState>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Entry counts per health state. Written by the health loop with `Healthy`.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HealthSummary {
    #[serde(default)]
    pub total: u32,
    #[serde(default)]
    pub healthy: u32,
    #[serde(default)]
    pub progressing: u32,
    #[serde(default)]
    pub degraded: u32,
    #[serde(default)]
    pub unknown: u32,
}

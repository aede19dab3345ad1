//! Names that are part of convoy's contract: condition types, reasons, failure stages,
//! annotations, labels, the finalizer and the field managers.
//!
//! Spec: status-and-conditions.txt (tables "Where a reconcile can stop", "Conditions",
//! "Applied"), status-ownership.txt and DESIGN.md sections 1 and 2. Other modules name these
//! constants instead of spelling the strings, so a typo cannot split a field between owners.

/// API groups of convoy's kinds.
pub mod groups {
    /// `Release`, `ReleaseInventory`, `Cluster`.
    pub const CORE: &str = "core.convoy.kumodo.io";
    /// `GitRepository`, `HelmRegistry`, `OCIRegistry`.
    pub const SOURCE: &str = "source.convoy.kumodo.io";
    /// `HealthRuleSet`, `GlobalHealthRuleSet`.
    pub const HEALTH: &str = "health.convoy.kumodo.io";
    /// The one version every kind is served at.
    pub const VERSION: &str = "v1alpha1";
}

/// Condition types of a Release. Each has exactly one writer (status-and-conditions.txt).
pub mod condition_types {
    /// Written by the controller: what it did with the latest render.
    pub const APPLIED: &str = "Applied";
    /// Written by the controller when `spec.failurePolicy` is set.
    pub const ROLLOUT_SUCCEEDED: &str = "RolloutSucceeded";
    /// Written by the controller when the Release has lifecycle hooks.
    pub const LIFECYCLE_SUCCEEDED: &str = "LifecycleSucceeded";
    /// Written by the drift loop.
    pub const IN_SYNC: &str = "InSync";
    /// Written by the health loop.
    pub const HEALTHY: &str = "Healthy";

    /// The conditions the controller owns and sends in its status patch.
    pub const CONTROLLER_OWNED: [&str; 3] = [APPLIED, ROLLOUT_SUCCEEDED, LIFECYCLE_SUCCEEDED];

    /// Every condition type of a Release.
    pub const ALL: [&str; 5] = [
        APPLIED,
        ROLLOUT_SUCCEEDED,
        LIFECYCLE_SUCCEEDED,
        IN_SYNC,
        HEALTHY,
    ];

    /// The one condition of a Cluster and of a source (written by their controllers).
    pub const READY: &str = "Ready";
}

/// An enum of names that are part of the contract: each variant's string (`as_str`, `Display`,
/// `AsRef<str>`), the parse back (`FromStr`), every variant (`ALL`), and comparison with the
/// `String` a condition carries, so control flow matches variants, never spelled strings.
macro_rules! contract_names {
    ($(#[$meta:meta])* pub enum $name:ident { $($(#[$vmeta:meta])* $variant:ident = $text:literal,)* }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name { $($(#[$vmeta])* $variant,)* }

        impl $name {
            /// Every variant, in the order of the spec's table.
            pub const ALL: &'static [$name] = &[$($name::$variant,)*];

            pub const fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text,)* }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                self.as_str()
            }
        }

        impl std::str::FromStr for $name {
            type Err = UnknownName;
            fn from_str(text: &str) -> Result<Self, UnknownName> {
                Self::ALL
                    .iter()
                    .copied()
                    .find(|v| v.as_str() == text)
                    .ok_or_else(|| UnknownName { kind: stringify!($name), text: text.to_string() })
            }
        }

        impl From<$name> for String {
            fn from(value: $name) -> String {
                value.as_str().to_string()
            }
        }

        impl PartialEq<$name> for String {
            fn eq(&self, other: &$name) -> bool {
                self == other.as_str()
            }
        }

        impl PartialEq<$name> for &str {
            fn eq(&self, other: &$name) -> bool {
                *self == other.as_str()
            }
        }

        impl PartialEq<$name> for str {
            fn eq(&self, other: &$name) -> bool {
                self == other.as_str()
            }
        }
    };
}

/// A string that names no variant of a contract enum.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{text:?} is not a {kind}")]
pub struct UnknownName {
    pub kind: &'static str,
    pub text: String,
}

contract_names! {
    /// Reasons of the `Applied` condition (status-and-conditions.txt, table "Applied").
    pub enum Reason {
        Applied = "Applied",
        SourceNotReady = "SourceNotReady",
        ValuesNotReady = "ValuesNotReady",
        ClusterNotReady = "ClusterNotReady",
        Unsupported = "Unsupported",
        Unappliable = "Unappliable",
        DeployFailed = "DeployFailed",
        PruneFailed = "PruneFailed",
        Pinned = "Pinned",
        WaitingForSync = "WaitingForSync",
        WaitingForWaveHealth = "WaitingForWaveHealth",
        WaveFailed = "WaveFailed",
        RolloutFailed = "RolloutFailed",
        RolledBack = "RolledBack",
        WaitingForClusterWave = "WaitingForClusterWave",
        ClusterWaveFailed = "ClusterWaveFailed",
        WaitingForHook = "WaitingForHook",
        HookFailed = "HookFailed",
    }
}

contract_names! {
    /// Reasons of the `Healthy` condition (health-loop.txt, status-and-conditions.txt).
    pub enum HealthyReason {
        /// True: every entry of the current render passes its rules.
        Healthy = "Healthy",
        /// False: an entry fails its rules and is within its deadline.
        Progressing = "Progressing",
        /// False: an entry has failed its rules for longer than the deadline.
        Degraded = "Degraded",
        /// True: the Release has no `spec.healthAssessment`.
        NotConfigured = "NotConfigured",
        /// Unknown: the current render is not applied and assessed yet.
        Pending = "Pending",
        /// Unknown: the assessment failed (rule compile error, unreachable cluster).
        Unknown = "Unknown",
    }
}

contract_names! {
    /// Reasons of the `InSync` condition.
    pub enum InSyncReason {
        /// True: every desired object matches the cluster.
        InSync = "InSync",
        /// False: an object would change, be created or be pruned.
        OutOfSync = "OutOfSync",
        /// Unknown: the drift could not be determined (render failed, cluster unreachable).
        Unknown = "Unknown",
    }
}

contract_names! {
    /// Reasons of the `LifecycleSucceeded` condition.
    pub enum LifecycleReason {
        Succeeded = "Succeeded",
        Running = "Running",
        Failed = "Failed",
    }
}

contract_names! {
    /// Reasons of the `Ready` condition of a Cluster (is its API server reachable?) and of a
    /// source (did its last fetch succeed?).
    pub enum ReadyReason {
        Reachable = "Reachable",
        Unreachable = "Unreachable",
        Succeeded = "Succeeded",
        FetchFailed = "FetchFailed",
    }
}

contract_names! {
    /// Values of `status.lastAttempted.failure.stage`.
    pub enum FailureStage {
        SourceResolution = "SourceResolution",
        ClusterResolution = "ClusterResolution",
        Rendering = "Rendering",
        Syncing = "Syncing",
        HookFailed = "HookFailed",
        /// Defined by the API; convoy never sets it (a mutation failure is `Rendering`).
        MutationResolution = "MutationResolution",
    }
}

/// Annotations: operational requests on a Release, and per-object hints in a render.
pub mod annotations {
    /// RFC 3339 time of the latest /sync request. Changing it wakes the controller.
    pub const SYNC_REQUESTED_AT: &str = "convoy.kumodo.io/sync-requested-at";
    /// RFC 3339 time of the latest forced /sync request: skip the dry-run gate.
    pub const FORCE_SYNC_REQUESTED_AT: &str = "convoy.kumodo.io/force-sync-requested-at";
    /// renderRef to pin the Release to; absent means no pin.
    pub const PIN: &str = "convoy.kumodo.io/pin";
    /// Integer sync wave of a rendered object (default 0).
    pub const SYNC_WAVE: &str = "convoy.kumodo.io/sync-wave";
}

/// Labels convoy puts on objects it creates.
pub mod labels {
    /// The Release (`<name>`) an object, hook workload or stored render belongs to.
    pub const RELEASE_NAME: &str = "convoy.kumodo.io/release";
    /// The namespace of that Release.
    pub const RELEASE_NAMESPACE: &str = "convoy.kumodo.io/release-namespace";
    /// Marks default health rule sets shipped by `convoy install`.
    pub const DEFAULT_RULES: &str = "health.convoy.kumodo.io/defaults";
}

/// The Release finalizer: prune the workloads before the Release goes.
pub const FINALIZER: &str = "release.core.convoy.kumodo.io/prune-workloads";

/// The Cluster finalizer: a Cluster stays while Releases target it, so their deletion can
/// still prune through it (a namespace deleted with both in it).
pub const CLUSTER_FINALIZER: &str = "cluster.core.convoy.kumodo.io/releases-first";

/// Field managers (DESIGN.md section 2). Every SSA write names one of these through
/// [`FieldManager`], so no call site can write under a manager that does not own the field.
pub mod field_managers {
    use super::FieldManager;

    /// The controller: Release status, and the rendered objects on the target cluster (and the
    /// drift loop's dry runs, so a dry run shows exactly what an apply would change).
    pub const CONTROLLER: FieldManager = FieldManager("convoy-release");
    /// `inventory::put`: ReleaseInventory `inventory` entries (keys, renderRef, wave).
    pub const INVENTORY: FieldManager = FieldManager("convoy-inventory");
    /// `inventory::put_hooks`: ReleaseInventory `hooks` entries (keys, workloadName, createdAt,
    /// renderRef).
    pub const INVENTORY_HOOKS: FieldManager = FieldManager("convoy-inventory-hooks");
    /// The drift loop: the `InSync` condition.
    pub const OBSERVE: FieldManager = FieldManager("convoy-observe");
    /// The health loop: the `Healthy` condition and `healthSummary`.
    pub const HEALTH: FieldManager = FieldManager("convoy-health");
    /// The health loop: inventory entries' state, message, firstUnhealthy, assessedRenderRef.
    pub const HEALTH_INVENTORY: FieldManager = FieldManager("convoy-health-inventory");
    /// The health loop: hook entries' state, message, finishedAt.
    pub const HOOK_STATUS: FieldManager = FieldManager("convoy-hook-status");
    /// `convoy install`: CRDs, RBAC, default rules and the daemon's Deployments.
    pub const INSTALL: FieldManager = FieldManager("convoy-install");
    /// Operational requests from the CLI when written with SSA (none today; kept so a CLI
    /// write has a name of its own).
    pub const CLI: FieldManager = FieldManager("convoy-cli");
    /// The request annotations (`sync-requested-at`, `force-sync-requested-at`, `pin`), by
    /// whoever asks: the CLI, the drift loop, the health loop. The spec's apiserver writes them
    /// in its /sync handler, outside the ownership table; one manager of their own keeps
    /// them out of the loops' managers, which own only their conditions.
    pub const REQUESTS: FieldManager = FieldManager("convoy-requests");
}

/// A Server-Side Apply field manager. Only the constants in [`field_managers`] exist, so a
/// write cannot invent a manager of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FieldManager(&'static str);

impl FieldManager {
    /// The manager's name as it appears in `managedFields`.
    pub const fn as_str(self) -> &'static str {
        self.0
    }
}

impl std::fmt::Display for FieldManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

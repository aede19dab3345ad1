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
}

/// Reasons of the `Applied` condition (status-and-conditions.txt, table "Applied").
pub mod reasons {
    pub const APPLIED: &str = "Applied";
    pub const SOURCE_NOT_READY: &str = "SourceNotReady";
    pub const VALUES_NOT_READY: &str = "ValuesNotReady";
    pub const CLUSTER_NOT_READY: &str = "ClusterNotReady";
    pub const UNSUPPORTED: &str = "Unsupported";
    pub const UNAPPLIABLE: &str = "Unappliable";
    pub const DEPLOY_FAILED: &str = "DeployFailed";
    pub const PRUNE_FAILED: &str = "PruneFailed";
    pub const PINNED: &str = "Pinned";
    pub const WAITING_FOR_SYNC: &str = "WaitingForSync";
    pub const WAITING_FOR_WAVE_HEALTH: &str = "WaitingForWaveHealth";
    pub const WAVE_FAILED: &str = "WaveFailed";
    pub const ROLLOUT_FAILED: &str = "RolloutFailed";
    pub const ROLLED_BACK: &str = "RolledBack";
    pub const WAITING_FOR_CLUSTER_WAVE: &str = "WaitingForClusterWave";
    pub const CLUSTER_WAVE_FAILED: &str = "ClusterWaveFailed";
    pub const WAITING_FOR_HOOK: &str = "WaitingForHook";
    pub const HOOK_FAILED: &str = "HookFailed";

    /// Every reason of the Applied table, in the table's order.
    pub const ALL_APPLIED: [&str; 18] = [
        APPLIED,
        SOURCE_NOT_READY,
        VALUES_NOT_READY,
        CLUSTER_NOT_READY,
        UNSUPPORTED,
        UNAPPLIABLE,
        DEPLOY_FAILED,
        PRUNE_FAILED,
        PINNED,
        WAITING_FOR_SYNC,
        WAITING_FOR_WAVE_HEALTH,
        WAVE_FAILED,
        ROLLOUT_FAILED,
        ROLLED_BACK,
        WAITING_FOR_CLUSTER_WAVE,
        CLUSTER_WAVE_FAILED,
        WAITING_FOR_HOOK,
        HOOK_FAILED,
    ];

    /// Reasons of the `Healthy` condition (health-loop.txt, status-and-conditions.txt).
    pub mod healthy {
        /// True: every entry of the current render passes its rules.
        pub const HEALTHY: &str = "Healthy";
        /// False: an entry fails its rules and is within its deadline.
        pub const PROGRESSING: &str = "Progressing";
        /// False: an entry has failed its rules for longer than the deadline.
        pub const DEGRADED: &str = "Degraded";
        /// True: the Release has no `spec.healthAssessment`.
        pub const NOT_CONFIGURED: &str = "NotConfigured";
        /// Unknown: the current render is not applied and assessed yet.
        pub const PENDING: &str = "Pending";
        /// Unknown: the assessment failed (rule compile error, unreachable cluster).
        pub const UNKNOWN: &str = "Unknown";
    }

    /// Reasons of the `InSync` condition.
    pub mod in_sync {
        /// True: every desired object matches the cluster.
        pub const IN_SYNC: &str = "InSync";
        /// False: an object would change, be created or be pruned.
        pub const OUT_OF_SYNC: &str = "OutOfSync";
        /// Unknown: the drift could not be determined (render failed, cluster unreachable).
        pub const UNKNOWN: &str = "Unknown";
    }

    /// Reasons of the `LifecycleSucceeded` condition.
    pub mod lifecycle {
        pub const SUCCEEDED: &str = "Succeeded";
        pub const RUNNING: &str = "Running";
        pub const FAILED: &str = "Failed";
    }
}

/// Values of `status.lastAttempted.failure.stage`.
pub mod failure_stages {
    pub const SOURCE_RESOLUTION: &str = "SourceResolution";
    pub const CLUSTER_RESOLUTION: &str = "ClusterResolution";
    pub const RENDERING: &str = "Rendering";
    pub const SYNCING: &str = "Syncing";
    pub const HOOK_FAILED: &str = "HookFailed";
    /// Defined by the API; convoy never sets it (a mutation failure is `Rendering`).
    pub const MUTATION_RESOLUTION: &str = "MutationResolution";
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

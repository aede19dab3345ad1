//! Applying renders to a target cluster: the dry-run gate, SSA apply in waves, prune.
//!
//! Spec: reconcile-flow.txt stageSync; status-ownership.txt "Target clusters" (the apply and
//! the drift dry runs share the controller's field manager).

pub mod applier;
pub mod resources;
pub mod watched;
pub mod waves;

pub use applier::{
    Applier, ApplyError, DEFAULT_CONCURRENCY, DryRunReport, Freshness, KindToCome, PruneReport,
    PruneTarget, Rejection, WhySend, defined_kinds,
};
pub use watched::{WatchedObjects, WatchedTargets};

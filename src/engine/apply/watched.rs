//! Live objects a process keeps by watching them, for the reads that may be as old as the API
//! server's watch cache (the daemon's drift and health loops, [`super::Freshness::WatchCache`]).
//!
//! Issue 21 ("reads bounded by watches"): a daemon otherwise GETs every object of every
//! Release at every interval of each observer loop. The engine only asks; a daemon answers
//! from its watches (`daemon::live`), and a read it cannot answer goes to the API server as
//! before.

use std::sync::Arc;

use kube::api::{ApiResource, DynamicObject};

use crate::engine::connect::Connection;

/// Watched live objects of one target and identity.
pub trait WatchedObjects: Send + Sync {
    /// The object as the watch last saw it, when a watch of its kind has listed and is
    /// working; `None` when it cannot say (not watched yet, broken, or the object is not
    /// among the watched ones): then the caller reads the API server. A `None` never means
    /// "absent".
    fn get(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<DynamicObject>;
}

/// Makes the [`WatchedObjects`] of one target connection: the watches run with its client for
/// watches (no per-call deadline: the server ends a watch itself), so they see what its
/// identity (convoy's, or a Release's impersonated ServiceAccount) may see, never more. What
/// they see belongs to the connection's server (as `status.lastAttempted.resolvedCluster`
/// names it), and, through a Cluster's kubeconfig (which names any server it likes, and may
/// bring a proxy and a CA that answer for another), only to that Cluster (its `holder`).
pub trait WatchedTargets: Send + Sync {
    fn for_connection(&self, conn: &Connection) -> Arc<dyn WatchedObjects>;
}

//! Source fetchers against real local servers: Git (file://, git daemon, smart HTTP with
//! basic auth), a Helm chart repository over HTTP, and an OCI registry.

#![allow(clippy::unwrap_used)]

#[path = "../support/mod.rs"]
mod support;

mod attacks;
mod detached;
mod git;
mod helm;
mod oci;
mod retention;

use convoy::engine::source::{Cache, Coordinator};

/// The source object the fetchers of these tests fetch for.
pub const SCOPE: &str = "GitRepository/tests/source";

/// A coordinator over a fresh cache.
pub fn coordinator() -> (tempfile::TempDir, Coordinator) {
    let dir = tempfile::tempdir().unwrap();
    let coordinator = Coordinator::new(Cache::new(dir.path()));
    (dir, coordinator)
}

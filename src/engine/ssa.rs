//! Server-Side Apply with a named field manager: the only way convoy writes objects it shares.
//!
//! Policy (DESIGN.md section 2): every apply is `force: true`, because each field has exactly
//! one writer and that writer's latest word must win over a stale owner; and every apply sends
//! only the fields its manager owns (plus list-map keys). Callers build that partial object;
//! this module makes sure the manager and the force flag are never forgotten.

use kube::Api;
use kube::api::{Patch, PatchParams};
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::api::FieldManager;

/// Patch parameters for an apply by `manager`: forced, strict field validation.
pub fn params(manager: FieldManager) -> PatchParams {
    PatchParams::apply(manager.as_str()).force()
}

/// Apply `patch` to the object `name` as `manager`.
pub async fn apply<K>(
    api: &Api<K>,
    name: &str,
    manager: FieldManager,
    patch: &Value,
) -> Result<K, kube::Error>
where
    K: Clone + DeserializeOwned + std::fmt::Debug,
{
    api.patch(name, &params(manager), &Patch::Apply(patch))
        .await
}

/// Apply `patch` to the status subresource of `name` as `manager`.
pub async fn apply_status<K>(
    api: &Api<K>,
    name: &str,
    manager: FieldManager,
    patch: &Value,
) -> Result<K, kube::Error>
where
    K: Clone + DeserializeOwned + std::fmt::Debug,
{
    api.patch_status(name, &params(manager), &Patch::Apply(patch))
        .await
}

/// A server-side dry run of an apply by `manager`: what the object would become.
pub async fn dry_run<K>(
    api: &Api<K>,
    name: &str,
    manager: FieldManager,
    patch: &Value,
) -> Result<K, kube::Error>
where
    K: Clone + DeserializeOwned + std::fmt::Debug,
{
    api.patch(name, &params(manager).dry_run(), &Patch::Apply(patch))
        .await
}

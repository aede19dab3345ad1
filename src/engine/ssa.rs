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
use serde_json::value::RawValue;

use super::api::FieldManager;
use super::json_escape;

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
    api.patch(name, &params(manager), &Patch::Apply(body(patch)?))
        .await
}

/// The apply body: `patch` as JSON, with what YAML refuses or reads as line breaks escaped
/// ([`json_escape::yaml_safe`]). The server reads an apply as YAML: a rendered value holding
/// DEL or a C1 control could not be applied, and a status quoting one could never be written
/// ("control characters are not allowed", retried for ever).
fn body(patch: &Value) -> Result<Box<RawValue>, kube::Error> {
    let text = serde_json::to_string(patch).map_err(kube::Error::SerdeError)?;
    RawValue::from_string(json_escape::yaml_safe(&text).into_owned())
        .map_err(kube::Error::SerdeError)
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
    api.patch_status(name, &params(manager), &Patch::Apply(body(patch)?))
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
    api.patch(
        name,
        &params(manager).dry_run(),
        &Patch::Apply(body(patch)?),
    )
    .await
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_apply_body_is_json_of_the_same_value_without_what_yaml_refuses() {
        let value = serde_json::json!({"message": "a\u{9b}b\u{85}c\u{2028}d\u{7f}e"});
        let body = super::body(&value).unwrap();
        assert!(body.get().is_ascii(), "{}", body.get());
        let back: serde_json::Value = serde_json::from_str(body.get()).unwrap();
        assert_eq!(back, value);
    }
}

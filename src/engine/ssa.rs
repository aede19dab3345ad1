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

/// The apply body: `patch` as JSON with DEL, C1 controls and the line and paragraph
/// separators written as escapes.
///
/// An apply body is read as YAML (`application/apply-patch+yaml`), and YAML refuses DEL and
/// C1 controls and reads NEL, U+2028 and U+2029 as line breaks; serde_json writes them as
/// they are. A condition message quoting a chart's `fail` with one of them could then never
/// be written ("control characters are not allowed", retried for ever), and a rendered value
/// holding one could not be applied. Escaped, they are the same characters to the server.
fn body(patch: &Value) -> Result<Box<RawValue>, kube::Error> {
    let text = serde_json::to_string(patch).map_err(kube::Error::SerdeError)?;
    let yaml_safe = |c: char| !matches!(c, '\u{7f}'..='\u{9f}' | '\u{2028}' | '\u{2029}');
    let text = if text.chars().all(yaml_safe) {
        text
    } else {
        let mut out = String::with_capacity(text.len() + 16);
        for c in text.chars() {
            if yaml_safe(c) {
                out.push(c);
            } else {
                out.push_str(&format!("\\u{:04x}", c as u32));
            }
        }
        out
    };
    RawValue::from_string(text).map_err(kube::Error::SerdeError)
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
    fn an_apply_body_escapes_what_yaml_refuses_or_breaks_and_holds_the_same_value() {
        let value = serde_json::json!({"message": "a\u{9b}b\u{85}c\u{2028}d\u{7f}e ü\u{1b}",
            "k\u{9f}": [1, "x"]});
        let body = super::body(&value).unwrap();
        let text = body.get();
        assert!(
            !text.chars().any(|c| c.is_control() || c == '\u{2028}'),
            "{text:?}"
        );
        assert!(text.contains(r"\u009b") && text.contains(r"\u2028") && text.contains('ü'));
        let back: Value = serde_json::from_str(text).unwrap();
        assert_eq!(back, value);
    }

    use serde_json::Value;
}

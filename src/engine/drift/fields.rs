//! Field-level comparison of a live object with what an apply would make of it, and who
//! caused each difference.
//!
//! DESIGN.md section 6: every changed field path is (a) a render change, (b) drift made by
//! another field manager (named from `managedFields`), or (c) a value only the API server
//! set, which is not a change at all. Secrets never leave this module with a value: their
//! data is replaced by short digests.

use base64::Engine;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::engine::api::field_managers;

/// One step of a field path.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Seg {
    Key(String),
    Index(usize),
}

/// A field path such as `spec.template.spec.containers[0].image`.
pub type Path = Vec<Seg>;

/// Display a path the way kubectl's JSONPath users read it.
pub fn path_string(path: &[Seg]) -> String {
    let mut out = String::new();
    for seg in path {
        match seg {
            Seg::Key(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
            Seg::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

/// Why a field differs.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "cause", rename_all = "camelCase")]
pub enum Cause {
    /// The render sets something the cluster does not have (yet).
    Render,
    /// Another field manager changed a field the render sets.
    Drift { managers: Vec<String> },
}

impl std::fmt::Display for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Cause::Render => f.write_str("render change"),
            Cause::Drift { managers } => write!(f, "drift by {}", managers.join(", ")),
        }
    }
}

/// One changed field.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FieldChange {
    #[serde(serialize_with = "serialize_path")]
    pub path: Path,
    #[serde(flatten)]
    pub cause: Cause,
    /// The live value (redacted for Secrets); absent when the field is new.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub live: Option<Value>,
    /// The value after an apply (redacted for Secrets); absent when the field goes away.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub desired: Option<Value>,
}

fn serialize_path<S: serde::Serializer>(path: &Path, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&path_string(path))
}

/// Remove server noise: managedFields, resourceVersion, generation, uid, creationTimestamp,
/// selfLink, and `status` unless the render itself sets status.
pub fn normalize(object: &Value, keep_status: bool) -> Value {
    let mut v = object.clone();
    if let Some(map) = v.as_object_mut() {
        if !keep_status {
            map.remove("status");
        }
        if let Some(Value::Object(meta)) = map.get_mut("metadata") {
            for k in [
                "managedFields",
                "resourceVersion",
                "generation",
                "uid",
                "creationTimestamp",
                "selfLink",
            ] {
                meta.remove(k);
            }
        }
    }
    v
}

/// The managedFields entries of an object.
pub fn managed_fields(object: &Value) -> Vec<Value> {
    object["metadata"]["managedFields"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// The changed fields between `live` and `desired` (both normalized), classified with the
/// managed fields of each side. Fields that no manager owns on either side were set by the
/// API server (defaults, allocations) and are left out.
pub fn field_changes(
    live: &Value,
    desired: &Value,
    live_managed: &[Value],
    desired_managed: &[Value],
) -> Vec<FieldChange> {
    let mut raw = Vec::new();
    diff_trees(Some(live), Some(desired), &mut Vec::new(), &mut raw);
    let mut changes = Vec::new();
    let secret = desired["kind"] == "Secret" && desired["apiVersion"] == "v1";
    for (path, before, after) in raw {
        let owned = |managed: &[Value], object: &Value| {
            let mut found = owners(managed, object, &path);
            // A Secret's `stringData` becomes `data` on the server; whoever applied
            // `stringData.K` owns what `data.K` holds.
            if secret
                && let [Seg::Key(d), Seg::Key(k)] = path.as_slice()
                && d == "data"
            {
                let alias = [Seg::Key("stringData".into()), Seg::Key(k.clone())];
                found.extend(owners(managed, &Value::Null, &alias));
                found.sort();
                found.dedup();
            }
            found
        };
        let live_owners = before
            .as_ref()
            .map(|_| owned(live_managed, live))
            .unwrap_or_default();
        let desired_owners = after
            .as_ref()
            .map(|_| owned(desired_managed, desired))
            .unwrap_or_default();
        if live_owners.is_empty() && desired_owners.is_empty() {
            continue;
        }
        let others: Vec<String> = live_owners
            .iter()
            .filter(|m| m.as_str() != field_managers::CONTROLLER.as_str())
            .cloned()
            .collect();
        let cause = if others.is_empty() {
            Cause::Render
        } else {
            Cause::Drift { managers: others }
        };
        changes.push(FieldChange {
            path,
            cause,
            live: before,
            desired: after,
        });
    }
    changes
}

/// Leaf-level differences. Lists of different length differ as a whole.
fn diff_trees(
    a: Option<&Value>,
    b: Option<&Value>,
    path: &mut Path,
    out: &mut Vec<(Path, Option<Value>, Option<Value>)>,
) {
    match (a, b) {
        (Some(Value::Object(x)), Some(Value::Object(y))) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                path.push(Seg::Key(k.clone()));
                diff_trees(x.get(k), y.get(k), path, out);
                path.pop();
            }
        }
        (Some(Value::Array(x)), Some(Value::Array(y))) if x.len() == y.len() => {
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                path.push(Seg::Index(i));
                diff_trees(Some(p), Some(q), path, out);
                path.pop();
            }
        }
        (Some(Value::Number(x)), Some(Value::Number(y))) if x.as_f64() == y.as_f64() => {}
        (x, y) if x == y => {}
        (x, y) => out.push((path.clone(), x.cloned(), y.cloned())),
    }
}

/// The managers that own `path` of `object` according to `managed` (its managedFields).
/// Owning a prefix as a leaf (an atomic map or list) owns the path too.
pub fn owners(managed: &[Value], object: &Value, path: &[Seg]) -> Vec<String> {
    let mut out = Vec::new();
    for entry in managed {
        // Status writers never touch what a render sets; a scale subresource write does.
        if entry["subresource"].as_str() == Some("status") {
            continue;
        }
        if owns(&entry["fieldsV1"], object, path)
            && let Some(m) = entry["manager"].as_str()
        {
            out.push(m.to_string());
        }
    }
    out.sort();
    out.dedup();
    out
}

fn owns(fields: &Value, object: &Value, path: &[Seg]) -> bool {
    let mut node = fields;
    let mut value = object;
    for seg in path {
        let Some(map) = node.as_object() else {
            return false;
        };
        if map.is_empty() {
            return true;
        }
        match seg {
            Seg::Key(k) => {
                let Some(next) = map.get(&format!("f:{k}")) else {
                    return false;
                };
                node = next;
                value = &value[k.as_str()];
            }
            Seg::Index(i) => {
                let item = &value[*i];
                let found = map.iter().find(|(key, _)| list_key_matches(key, item, *i));
                let Some((_, next)) = found else { return false };
                node = next;
                value = item;
            }
        }
    }
    true
}

/// Whether a fieldsV1 list key (`k:{...}`, `v:...`, `i:N`) names `item` at `index`.
fn list_key_matches(key: &str, item: &Value, index: usize) -> bool {
    if let Some(raw) = key.strip_prefix("k:") {
        let Ok(Value::Object(keys)) = serde_json::from_str::<Value>(raw) else {
            return false;
        };
        return keys.iter().all(|(k, v)| match (&item[k.as_str()], v) {
            (Value::Number(a), Value::Number(b)) => a.as_f64() == b.as_f64(),
            (a, b) => a == b,
        });
    }
    if let Some(raw) = key.strip_prefix("v:") {
        return serde_json::from_str::<Value>(raw).is_ok_and(|v| &v == item);
    }
    if let Some(raw) = key.strip_prefix("i:") {
        return raw.parse::<usize>() == Ok(index);
    }
    false
}

/// Replace a Secret's values by short digests, so a diff can say which keys changed and
/// never what they hold. `stringData` and the last-applied annotation are dropped.
pub fn redact_secret(secret: &Value) -> Value {
    let mut v = secret.clone();
    if let Some(map) = v.as_object_mut() {
        if let Some(Value::Object(data)) = map.get_mut("data") {
            for (_, value) in data.iter_mut() {
                let bytes = value
                    .as_str()
                    .and_then(|s| base64::engine::general_purpose::STANDARD.decode(s).ok())
                    .unwrap_or_default();
                *value = Value::String(value_digest(&bytes));
            }
        }
        if let Some(Value::Object(data)) = map.remove("stringData") {
            let entry = map
                .entry("data")
                .or_insert_with(|| Value::Object(Map::new()));
            if let Some(target) = entry.as_object_mut() {
                for (k, value) in data {
                    let bytes = value.as_str().unwrap_or_default().as_bytes().to_vec();
                    target.insert(k, Value::String(value_digest(&bytes)));
                }
            }
        }
        if let Some(Value::Object(annotations)) = map
            .get_mut("metadata")
            .and_then(|m| m.get_mut("annotations"))
        {
            annotations.remove("kubectl.kubernetes.io/last-applied-configuration");
        }
    }
    v
}

/// The digest shown instead of a secret value: `sha256:` and 8 hex characters.
pub fn value_digest(bytes: &[u8]) -> String {
    format!("sha256:{}", &hex::encode(Sha256::digest(bytes))[..8])
}

/// Replace values of `changes` by their redacted forms (for Secrets).
pub fn redact_changes(changes: &mut [FieldChange], live: &Value, desired: &Value) {
    for change in changes.iter_mut() {
        change.live = change
            .live
            .as_ref()
            .map(|_| value_at(live, &change.path).cloned().unwrap_or(Value::Null));
        change.desired = change.desired.as_ref().map(|_| {
            value_at(desired, &change.path)
                .cloned()
                .unwrap_or(Value::Null)
        });
    }
}

/// The value at `path`, if any.
pub fn value_at<'a>(value: &'a Value, path: &[Seg]) -> Option<&'a Value> {
    let mut v = value;
    for seg in path {
        v = match seg {
            Seg::Key(k) => v.get(k.as_str())?,
            Seg::Index(i) => v.get(*i)?,
        };
    }
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entry(manager: &str, fields: Value) -> Value {
        json!({"manager": manager, "operation": "Apply", "fieldsV1": fields})
    }

    #[test]
    fn a_value_set_by_another_manager_is_drift_named_after_it() {
        let live = json!({"data": {"a": "tampered", "b": "1"}});
        let desired = json!({"data": {"a": "1", "b": "1"}});
        let live_mf = [
            entry("convoy-release", json!({"f:data": {"f:b": {}}})),
            entry("kubectl-edit", json!({"f:data": {"f:a": {}}})),
        ];
        let desired_mf = [entry(
            "convoy-release",
            json!({"f:data": {"f:a": {}, "f:b": {}}}),
        )];
        let changes = field_changes(&live, &desired, &live_mf, &desired_mf);
        assert_eq!(changes.len(), 1);
        assert_eq!(path_string(&changes[0].path), "data.a");
        assert_eq!(changes[0].cause.to_string(), "drift by kubectl-edit");
    }

    #[test]
    fn a_new_value_from_the_render_is_a_render_change() {
        let live = json!({"spec": {"replicas": 1}});
        let desired = json!({"spec": {"replicas": 3}});
        let mf = [entry(
            "convoy-release",
            json!({"f:spec": {"f:replicas": {}}}),
        )];
        let changes = field_changes(&live, &desired, &mf, &mf);
        assert_eq!(changes[0].cause, Cause::Render);
    }

    #[test]
    fn values_no_manager_owns_are_server_defaults_not_changes() {
        let live = json!({"spec": {"clusterIP": "10.0.0.7", "ports": [{"port": 80}]}});
        let desired = json!({"spec": {"clusterIP": "10.0.0.8", "ports": [{"port": 80}]}});
        let mf = [entry(
            "convoy-release",
            json!({"f:spec": {"f:ports": {"k:{\"port\":80,\"protocol\":\"TCP\"}": {".": {}, "f:port": {}}}}}),
        )];
        assert!(field_changes(&live, &desired, &mf, &mf).is_empty());
    }

    #[test]
    fn list_items_are_found_by_their_keys() {
        let live = json!({"spec": {"containers": [{"name": "web", "image": "nginx:1"}]}});
        let desired = json!({"spec": {"containers": [{"name": "web", "image": "nginx:2"}]}});
        let live_mf = [entry(
            "kubectl-set",
            json!({"f:spec": {"f:containers": {"k:{\"name\":\"web\"}": {"f:image": {}}}}}),
        )];
        let desired_mf = [entry(
            "convoy-release",
            json!({"f:spec": {"f:containers": {"k:{\"name\":\"web\"}": {"f:image": {}}}}}),
        )];
        let changes = field_changes(&live, &desired, &live_mf, &desired_mf);
        assert_eq!(path_string(&changes[0].path), "spec.containers[0].image");
        assert_eq!(
            changes[0].cause,
            Cause::Drift {
                managers: vec!["kubectl-set".into()]
            }
        );
    }

    #[test]
    fn secrets_show_digests_never_values() {
        let secret = json!({"kind": "Secret", "data": {"password": "aHVudGVyMg=="}, "stringData": {"token": "abc"},
            "metadata": {"annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{\"data\":{}}"}}});
        let redacted = redact_secret(&secret);
        let text = redacted.to_string();
        assert!(
            !text.contains("aHVudGVyMg==") && !text.contains("hunter2") && !text.contains("abc\""),
            "{text}"
        );
        assert_eq!(redacted["data"]["password"], value_digest(b"hunter2"));
        assert_eq!(redacted["data"]["token"], value_digest(b"abc"));
        assert!(
            redacted["metadata"]["annotations"]
                .as_object()
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn noise_is_removed() {
        let live = json!({"metadata": {"name": "a", "uid": "u", "resourceVersion": "1", "managedFields": []}, "status": {"x": 1}});
        assert_eq!(normalize(&live, false), json!({"metadata": {"name": "a"}}));
        assert_eq!(normalize(&live, true)["status"]["x"], 1);
    }
}

//! Field-level comparison of a live object with what an apply would make of it, and who
//! caused each difference.
//!
//! DESIGN.md section 6: every changed field path is (a) a render change, (b) drift made by
//! another field manager (named from `managedFields`), or (c) a value only the API server
//! set, which is not a change at all. Secrets never leave this module with a value: their
//! data is replaced by keyed digests or by words saying whether each value changed.

use base64::Engine;
use serde_json::{Map, Value};

use crate::engine::api::field_managers;
use crate::engine::digest_key::DigestKey;

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
        // A field the controller still owns holds the value it applied: co-owners applied
        // the same value (a `kubectl apply --server-side` of the same file), and a manager
        // that changed it would have taken it over. So the change is the render's. Owned at
        // the path itself: a Secret's `data.K` edited by kubectl is still "owned" through
        // convoy's `stringData.K` (found by a review).
        let ours = before.is_some()
            && owners(live_managed, live, &path)
                .iter()
                .any(|m| m.as_str() == field_managers::CONTROLLER.as_str());
        let cause = if others.is_empty() || ours {
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

/// What happened to one key of a Secret between the live object and the render.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum KeyChange {
    Added,
    Removed,
    Changed,
    Unchanged,
}

impl KeyChange {
    pub fn as_str(self) -> &'static str {
        match self {
            KeyChange::Added => "added",
            KeyChange::Removed => "removed",
            KeyChange::Changed => "changed",
            KeyChange::Unchanged => "unchanged",
        }
    }
}

/// One key of a Secret in a diff: its name and what happened to its value, never the value.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SecretKeyChange {
    pub key: String,
    pub change: KeyChange,
}

/// A Secret's values by key: `data` decoded, `stringData` over it (as the API server does).
fn secret_values(secret: &Value) -> std::collections::BTreeMap<String, Vec<u8>> {
    let mut out = std::collections::BTreeMap::new();
    for (k, v) in secret["data"].as_object().into_iter().flatten() {
        let bytes = v
            .as_str()
            .and_then(|s| base64::engine::general_purpose::STANDARD.decode(s).ok())
            .unwrap_or_default();
        out.insert(k.clone(), bytes);
    }
    for (k, v) in secret["stringData"].as_object().into_iter().flatten() {
        out.insert(
            k.clone(),
            v.as_str().unwrap_or_default().as_bytes().to_vec(),
        );
    }
    out
}

/// Replace the values of a Secret's live copy and render by what may be shown of them, and
/// say what happened to each key. With the installation's key each value becomes a short
/// keyed digest (`hmac:` and 12 hex digits: equal values look equal, so runs can be compared,
/// and nothing offline can test a guess against it); without it, a word: `(unchanged)`,
/// `(old value)`/`(new value)`, `(removed)`. `stringData` and the last-applied annotation are
/// dropped.
pub fn redact_secret_pair(
    live: Option<&Value>,
    desired: Option<&Value>,
    key: Option<&DigestKey>,
) -> (Option<Value>, Option<Value>, Vec<SecretKeyChange>) {
    let live_values = live.map(secret_values).unwrap_or_default();
    let desired_values = desired.map(secret_values).unwrap_or_default();
    let shown = |bytes: &[u8], word: &str| match key {
        Some(k) => k.digest(bytes, 12),
        None => word.to_string(),
    };
    let mut changes = Vec::new();
    let mut live_shown = Map::new();
    let mut desired_shown = Map::new();
    let names: std::collections::BTreeSet<&String> =
        live_values.keys().chain(desired_values.keys()).collect();
    for name in names {
        let (l, d) = (live_values.get(name), desired_values.get(name));
        let change = match (l, d) {
            (Some(a), Some(b)) if a == b => KeyChange::Unchanged,
            (Some(_), Some(_)) => KeyChange::Changed,
            (None, Some(_)) => KeyChange::Added,
            (Some(_), None) => KeyChange::Removed,
            (None, None) => continue,
        };
        if let Some(bytes) = l {
            let word = match change {
                KeyChange::Unchanged => "(unchanged)",
                KeyChange::Changed => "(old value)",
                _ if desired.is_none() => "(value)",
                _ => "(removed)",
            };
            live_shown.insert(name.clone(), Value::String(shown(bytes, word)));
        }
        if let Some(bytes) = d {
            let word = match change {
                KeyChange::Unchanged => "(unchanged)",
                _ => "(new value)",
            };
            desired_shown.insert(name.clone(), Value::String(shown(bytes, word)));
        }
        if live.is_some() && desired.is_some() {
            changes.push(SecretKeyChange {
                key: name.clone(),
                change,
            });
        } else if desired.is_some() {
            changes.push(SecretKeyChange {
                key: name.clone(),
                change: KeyChange::Added,
            });
        }
    }
    let redact = |secret: &Value, data: Map<String, Value>| {
        let mut v = secret.clone();
        if let Some(map) = v.as_object_mut() {
            map.remove("stringData");
            if data.is_empty() {
                map.remove("data");
            } else {
                map.insert("data".into(), Value::Object(data));
            }
            if let Some(Value::Object(annotations)) = map
                .get_mut("metadata")
                .and_then(|m| m.get_mut("annotations"))
            {
                annotations.remove("kubectl.kubernetes.io/last-applied-configuration");
            }
        }
        v
    };
    (
        live.map(|l| redact(l, live_shown)),
        desired.map(|d| redact(d, desired_shown)),
        changes,
    )
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

    /// kubectl applied the same file once (a migration step): it co-owns the field with the
    /// value convoy applied, and a new value in the render is the render's change, not drift
    /// by kubectl (found on Argo CD's manifests).
    #[test]
    fn a_field_convoy_still_owns_with_another_changes_by_the_render() {
        let live = json!({"data": {"url": "a"}});
        let desired = json!({"data": {"url": "b"}});
        let both = [
            entry("convoy-release", json!({"f:data": {"f:url": {}}})),
            entry("kubectl", json!({"f:data": {"f:url": {}}})),
        ];
        let ours = [entry("convoy-release", json!({"f:data": {"f:url": {}}}))];
        let changes = field_changes(&live, &desired, &both, &ours);
        assert_eq!(changes[0].cause, Cause::Render);
        let theirs = [entry("kubectl", json!({"f:data": {"f:url": {}}}))];
        let changes = field_changes(&live, &desired, &theirs, &ours);
        assert_eq!(changes[0].cause.to_string(), "drift by kubectl");
    }

    /// convoy applied `stringData.password`; kubectl edited `data.password`: drift by kubectl,
    /// though convoy "owns" the value through the alias.
    #[test]
    fn a_secret_value_edited_by_kubectl_is_its_drift() {
        let live = json!({"kind": "Secret", "apiVersion": "v1", "data": {"password": "b2xk"}});
        let desired = json!({"kind": "Secret", "apiVersion": "v1", "data": {"password": "bmV3"}});
        let live_mf = [
            entry(
                "convoy-release",
                json!({"f:stringData": {"f:password": {}}}),
            ),
            entry("kubectl-edit", json!({"f:data": {"f:password": {}}})),
        ];
        let desired_mf = [entry(
            "convoy-release",
            json!({"f:stringData": {"f:password": {}}}),
        )];
        let changes = field_changes(&live, &desired, &live_mf, &desired_mf);
        assert_eq!(changes[0].cause.to_string(), "drift by kubectl-edit");
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
    fn secrets_show_keyed_digests_or_words_never_values() {
        let live = json!({"kind": "Secret", "data": {"password": "aHVudGVyMg==", "user": "YXBw", "old": "eA=="},
            "metadata": {"annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{\"data\":{}}"}}});
        let desired = json!({"kind": "Secret", "stringData": {"password": "hunter3", "user": "app", "new": "y"}, "metadata": {}});
        let key = DigestKey::from_bytes([7; 32]);
        let (l, d, changes) = redact_secret_pair(Some(&live), Some(&desired), Some(&key));
        let (l, d) = (l.unwrap(), d.unwrap());
        let text = format!("{l}{d}");
        for value in ["aHVudGVyMg==", "hunter2", "hunter3", "YXBw", "\"app\""] {
            assert!(!text.contains(value), "{value} in {text}");
        }
        assert_eq!(l["data"]["password"], key.digest(b"hunter2", 12));
        assert_eq!(d["data"]["password"], key.digest(b"hunter3", 12));
        assert_eq!(l["data"]["user"], d["data"]["user"]);
        assert!(d.get("stringData").is_none());
        assert!(l["metadata"]["annotations"].as_object().unwrap().is_empty());
        let shown: Vec<(&str, &str)> = changes
            .iter()
            .map(|c| (c.key.as_str(), c.change.as_str()))
            .collect();
        assert_eq!(
            shown,
            [
                ("new", "added"),
                ("old", "removed"),
                ("password", "changed"),
                ("user", "unchanged")
            ]
        );
        // Without the key: words, and the same report.
        let (l, d, unkeyed) = redact_secret_pair(Some(&live), Some(&desired), None);
        let (l, d) = (l.unwrap(), d.unwrap());
        assert_eq!(l["data"]["password"], "(old value)");
        assert_eq!(d["data"]["password"], "(new value)");
        assert_eq!(l["data"]["user"], "(unchanged)");
        assert_eq!(l["data"]["old"], "(removed)");
        assert_eq!(d["data"]["new"], "(new value)");
        assert_eq!(unkeyed, changes);
    }

    #[test]
    fn noise_is_removed() {
        let live = json!({"metadata": {"name": "a", "uid": "u", "resourceVersion": "1", "managedFields": []}, "status": {"x": 1}});
        assert_eq!(normalize(&live, false), json!({"metadata": {"name": "a"}}));
        assert_eq!(normalize(&live, true)["status"]["x"], 1);
    }
}

//! Whether a live object already holds what the render sets: the comparison that lets a sync
//! skip an object applied before exactly as rendered now (stageSync's apply of only what
//! changed). Read against what the API server stores, not the text sent: it keeps a Secret's
//! `stringData` as `data` and writes quantities in their canonical form (`cpu: 0.1` as `100m`,
//! `2048Mi` as `2Gi`), so a literal reading found such objects changed at every sync, and
//! each sync (each daemon pass) sent them and wrote the inventory again (found on Argo CD's
//! and real charts' manifests).

use std::borrow::Cow;

use base64::Engine as _;
use kube_quantity::ParsedQuantity;
use serde_json::Value;

/// Keys whose value is a map of quantities in the built-in kinds: a container's and a claim's
/// `requests`/`limits`, a quota's `hard`, a Pod's `overhead`, a volume's `capacity`, a
/// LimitRange item's `default`, `defaultRequest`, `max`, `min` and `maxLimitRequestRatio`.
const QUANTITY_MAPS: [&str; 11] = [
    "requests",
    "limits",
    "hard",
    "overhead",
    "capacity",
    "allocatable",
    "default",
    "defaultRequest",
    "max",
    "min",
    "maxLimitRequestRatio",
];

/// Keys whose value is one quantity: an `emptyDir`'s `sizeLimit`, a metric target's
/// `averageValue` and `value`, a resource field reference's `divisor`.
const QUANTITY_FIELDS: [&str; 4] = ["sizeLimit", "averageValue", "value", "divisor"];

/// Fields of the built-in kinds the server leaves out at their zero (plain Go fields with
/// `omitempty`): a chart's `minReadySeconds: 0`, `hostNetwork: false`, `priorityClassName: ""`,
/// an env var's `value: ""`. Only these: a pointer field (`automountServiceAccountToken`,
/// `allowPrivilegeEscalation`) keeps its `false`, so one that is missing was taken out, and a
/// custom resource keeps whatever it was given (found by a review: a removed
/// `allowPrivilegeEscalation: false` read as held was never put back).
const ZERO_LEFT_OUT: [&str; 22] = [
    "minReadySeconds",
    "hostNetwork",
    "hostPID",
    "hostIPC",
    "priorityClassName",
    "serviceAccountName",
    "serviceAccount",
    "subdomain",
    "hostname",
    "nodeName",
    "value",
    "stdin",
    "stdinOnce",
    "tty",
    "readOnly",
    "subPath",
    "subPathExpr",
    "workingDir",
    "nodePort",
    "paused",
    "publishNotReadyAddresses",
    "loadBalancerIP",
];

/// Lists of the built-in kinds that server-side apply merges by `name` (a map list keyed by
/// it): a Pod spec's containers, init and ephemeral containers, volumes, image pull Secrets,
/// a container's env, a webhook configuration's webhooks. Only these: an atomic list of named
/// items (a RoleBinding's `subjects`) is replaced whole by whoever changes it, so an item
/// added there is drift to take back (found by a review).
const NAMED_LISTS: [&str; 7] = [
    "containers",
    "initContainers",
    "ephemeralContainers",
    "volumes",
    "imagePullSecrets",
    "env",
    "webhooks",
];

/// What a value under a key is read as.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Reading {
    Plain,
    /// A list merged by `name` ([`NAMED_LISTS`]).
    Named,
    /// A map whose values are quantities.
    Quantities,
    Quantity,
}

/// How the server stores the kind of an object.
#[derive(Clone, Copy)]
struct Stored {
    /// A built-in kind, whose quantities and zeros the server rewrites; a custom resource
    /// is stored as it was sent.
    builtin: bool,
}

/// Whether `live` holds every value `desired` sets (maps: every key; lists: same length,
/// item by item; numbers by value). Defaults and other managers' fields in `live` do not
/// matter; an empty or null desired value matches an absent one. For a built-in kind (of
/// `group`), values are read as the server stores them: quantities by the amount they name,
/// a zero of a field it leaves out ([`ZERO_LEFT_OUT`]) as held; a core Secret's `stringData`
/// as its `data`, and `data` by the bytes it encodes.
pub fn holds(live: &Value, desired: &Value, group: &str, kind: &str) -> bool {
    let stored = Stored {
        builtin: is_builtin(group),
    };
    let desired = if group.is_empty() && kind == "Secret" {
        as_stored_secret(desired)
    } else {
        Cow::Borrowed(desired)
    };
    holds_as(live, &desired, Reading::Plain, stored)
}

/// A group of the built-in kinds: the core group, one without a dot (`apps`, `batch`), or a
/// `*.k8s.io` one (which a CRD may use only with the API reviewers' approval).
fn is_builtin(group: &str) -> bool {
    !group.contains('.') || group.ends_with(".k8s.io")
}

fn holds_as(live: &Value, desired: &Value, reading: Reading, stored: Stored) -> bool {
    match (desired, live) {
        (Value::Object(d), Value::Object(l)) => d.iter().all(|(k, dv)| match l.get(k) {
            Some(lv) => holds_as(lv, dv, reading_under(reading, k, stored), stored),
            None => {
                is_empty(dv)
                    || (stored.builtin && ZERO_LEFT_OUT.contains(&k.as_str()) && is_zero(dv))
            }
        }),
        (Value::Array(d), Value::Array(l)) if reading == Reading::Named && all_named(d) => {
            // A built-in list of named items (containers, env, volumes, ports by name) merges
            // by name: items another manager added (a team's env var, a sidecar an admission
            // webhook injects) are theirs, and an apply would leave them. Each rendered item
            // must be there by its name (found by a run of the daemon on Argo CD: a team's
            // env var made every pass send the Deployment and announce drift put back).
            // A name twice in the live list (the later one wins in a container's env) is
            // not what was applied.
            d.iter().all(|dv| {
                let mut same = l.iter().filter(|lv| lv.get("name") == dv.get("name"));
                match (same.next(), same.next()) {
                    (Some(lv), None) => holds_as(lv, dv, Reading::Plain, stored),
                    _ => false,
                }
            })
        }
        (Value::Array(d), Value::Array(l)) => {
            // A list item is read as the list is (LimitRange's `limits` holds maps).
            d.len() == l.len()
                && d.iter()
                    .zip(l)
                    .all(|(dv, lv)| holds_as(lv, dv, Reading::Plain, stored))
        }
        (Value::Number(a), Value::Number(b)) => a == b || a.as_f64() == b.as_f64(),
        (d, Value::Null) => is_empty(d),
        // A built-in kind stores a number as a string only where the field is a quantity.
        (Value::Number(_), Value::String(l)) if stored.builtin => same_amount(desired, l),
        (d, Value::String(l)) if reading == Reading::Quantity && d != live => same_amount(d, l),
        (d, l) => d == l,
    }
}

fn reading_under(reading: Reading, key: &str, stored: Stored) -> Reading {
    if !stored.builtin {
        return Reading::Plain;
    }
    match reading {
        Reading::Quantities => Reading::Quantity,
        _ if QUANTITY_MAPS.contains(&key) => Reading::Quantities,
        _ if QUANTITY_FIELDS.contains(&key) => Reading::Quantity,
        _ if NAMED_LISTS.contains(&key) => Reading::Named,
        _ => Reading::Plain,
    }
}

/// Whether the rendered quantity `desired` (a string, or a number YAML made of `cpu: 2`)
/// names the amount the server stored as `live`. A value that is not a quantity is not the
/// same (sent again, as before).
fn same_amount(desired: &Value, live: &str) -> bool {
    let text = match desired {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        _ => return false,
    };
    match (
        ParsedQuantity::try_from(text.as_str()),
        ParsedQuantity::try_from(live),
    ) {
        (Ok(d), Ok(l)) => d == l,
        _ => false,
    }
}

/// Base64 as the API server decodes a Secret's `data`: padding bits it ignores.
const LENIENT: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    base64::engine::GeneralPurposeConfig::new()
        .with_decode_allow_trailing_bits(true)
        .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
);

/// A Secret as the server stores it: `data` re-encoded as the server encodes what it decoded
/// (a value wrapped by `base64` at 76 columns, or with stray padding bits, is stored
/// canonical), then each `stringData` entry in `data`, base64-encoded, over a `data` entry of
/// the same key (the API's rule).
fn as_stored_secret(desired: &Value) -> Cow<'_, Value> {
    let string_data = desired.get("stringData").and_then(Value::as_object);
    let data = desired.get("data").and_then(Value::as_object);
    if string_data.is_none() && data.is_none() {
        return Cow::Borrowed(desired);
    }
    let mut stored_data = serde_json::Map::new();
    for (key, value) in data.into_iter().flatten() {
        let canonical = value.as_str().and_then(|text| {
            let compact: String = text.chars().filter(|c| !c.is_ascii_whitespace()).collect();
            let bytes = LENIENT.decode(compact).ok()?;
            Some(Value::String(
                base64::engine::general_purpose::STANDARD.encode(bytes),
            ))
        });
        stored_data.insert(key.clone(), canonical.unwrap_or_else(|| value.clone()));
    }
    for (key, value) in string_data.into_iter().flatten() {
        let Some(text) = value.as_str() else {
            // Not a string: the server refuses it; compared as rendered (not held).
            return Cow::Borrowed(desired);
        };
        stored_data.insert(
            key.clone(),
            Value::String(base64::engine::general_purpose::STANDARD.encode(text)),
        );
    }
    let mut stored = desired.clone();
    if let Some(map) = stored.as_object_mut() {
        map.remove("stringData");
        map.insert("data".into(), Value::Object(stored_data));
    }
    Cow::Owned(stored)
}

/// Whether every item of a list is a map with a string `name`, each name once.
fn all_named(items: &[Value]) -> bool {
    let mut names = std::collections::HashSet::new();
    !items.is_empty()
        && items.iter().all(|i| {
            i.get("name")
                .and_then(Value::as_str)
                .is_some_and(|n| names.insert(n))
        })
}

/// The zero of a scalar, which the server does not store for a field that omits it.
fn is_zero(v: &Value) -> bool {
    match v {
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        _ => false,
    }
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::holds;
    use base64::Engine as _;
    use serde_json::{Value, json};

    fn plain(live: &Value, desired: &Value) -> bool {
        holds(live, desired, "apps", "Deployment")
    }

    fn secret(live: &Value, desired: &Value) -> bool {
        holds(live, desired, "", "Secret")
    }

    #[test]
    fn live_objects_hold_what_was_applied_despite_defaults() {
        let desired = json!({"spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "a", "image": "x:1"}]}}}, "metadata": {"labels": {"app": "a"}}});
        let live = json!({"spec": {"replicas": 2, "strategy": {"type": "RollingUpdate"},
            "template": {"spec": {"containers": [{"name": "a", "image": "x:1", "imagePullPolicy": "IfNotPresent"}]}}},
            "metadata": {"labels": {"app": "a", "other": "b"}, "uid": "u"}, "status": {}});
        assert!(plain(&live, &desired));
    }

    #[test]
    fn a_changed_value_a_removed_field_or_an_extra_item_is_not_held() {
        let desired = json!({"data": {"a": "1"}, "spec": {"ports": [{"port": 80}]}});
        assert!(!plain(
            &json!({"data": {"a": "2"}, "spec": {"ports": [{"port": 80}]}}),
            &desired
        ));
        assert!(!plain(
            &json!({"data": {}, "spec": {"ports": [{"port": 80}]}}),
            &desired
        ));
        assert!(!plain(
            &json!({"data": {"a": "1"}, "spec": {"ports": [{"port": 80}, {"port": 81}]}}),
            &desired
        ));
        assert!(plain(
            &json!({"data": {"a": "1"}, "spec": {"ports": [{"port": 80.0}]}}),
            &desired
        ));
    }

    #[test]
    fn empty_desired_values_match_absent_ones() {
        assert!(plain(
            &json!({"metadata": {}}),
            &json!({"metadata": {"annotations": {}}, "data": null})
        ));
    }

    /// What the helper's run of Argo CD's manifests and real charts found sent at every sync.
    #[test]
    fn quantities_are_held_in_the_servers_canonical_form() {
        let container = |resources: Value| json!({"spec": {"template": {"spec": {"containers": [{"name": "a", "resources": resources}]}}}});
        for (rendered, stored) in [
            (json!(2), "2"),
            (json!(0.1), "100m"),
            (json!("1000m"), "1"),
            (json!("0.5"), "500m"),
            (json!("2048Mi"), "2Gi"),
            (json!("1.5Gi"), "1536Mi"),
            (json!(1e9), "1G"),
            (json!("1e3"), "1k"),
        ] {
            let desired = container(json!({"limits": {"cpu": rendered.clone()}}));
            let live = container(json!({"limits": {"cpu": stored}}));
            assert!(plain(&live, &desired), "{rendered} as {stored}");
        }
        for (rendered, stored) in [(json!("2"), "3"), (json!("1Gi"), "1G"), (json!("x"), "x1")] {
            let desired = container(json!({"requests": {"memory": rendered.clone()}}));
            let live = container(json!({"requests": {"memory": stored}}));
            assert!(!plain(&live, &desired), "{rendered} is not {stored}");
        }
        // A claim's size, a quota, a LimitRange item, an emptyDir, a metric target.
        assert!(plain(
            &json!({"spec": {"resources": {"requests": {"storage": "1Gi"}}}}),
            &json!({"spec": {"resources": {"requests": {"storage": "1024Mi"}}}})
        ));
        assert!(plain(
            &json!({"spec": {"hard": {"requests.cpu": "1500m"}}}),
            &json!({"spec": {"hard": {"requests.cpu": 1.5}}})
        ));
        assert!(plain(
            &json!({"spec": {"limits": [{"type": "Container", "default": {"memory": "512Mi"}}]}}),
            &json!({"spec": {"limits": [{"type": "Container", "default": {"memory": "0.5Gi"}}]}})
        ));
        assert!(plain(
            &json!({"volumes": [{"emptyDir": {"sizeLimit": "1Gi"}}]}),
            &json!({"volumes": [{"emptyDir": {"sizeLimit": "1024Mi"}}]})
        ));
        // Elsewhere a string is read as it is: a ConfigMap's data is what was sent.
        assert!(!plain(
            &json!({"data": {"cpu": "1"}}),
            &json!({"data": {"cpu": "1000m"}})
        ));
        assert!(!plain(
            &json!({"spec": {"replicas": "two"}}),
            &json!({"spec": {"replicas": 2}})
        ));
    }

    /// What ingress-nginx's chart renders (`minReadySeconds: 0`), sent at every sync.
    #[test]
    fn a_zero_the_server_leaves_out_is_held() {
        let desired = json!({"spec": {"minReadySeconds": 0, "template": {"spec": {
            "hostNetwork": false, "priorityClassName": "", "containers": [{"name": "a"}]}}}});
        let live = json!({"spec": {"template": {"spec": {"containers": [{"name": "a"}]}}}});
        assert!(plain(&live, &desired));
        assert!(!plain(
            &json!({"spec": {"minReadySeconds": 5}}),
            &json!({"spec": {"minReadySeconds": 0}})
        ));
        assert!(!plain(&live, &json!({"spec": {"minReadySeconds": 1}})));
        // A map keeps an empty value: one it lacks was taken out.
        for map in ["labels", "annotations", "data", "nodeSelector"] {
            assert!(!plain(&json!({map: {}}), &json!({map: {"k": ""}})), "{map}");
            assert!(plain(&json!({map: {"k": ""}}), &json!({map: {"k": ""}})));
        }
    }

    /// Found by a review: what the server keeps as written is read as written.
    #[test]
    fn a_pointers_false_and_a_custom_resources_values_are_read_as_written() {
        // A pointer field keeps `false`: missing, it was taken out (drift to put back).
        let desired = json!({"spec": {"template": {"spec": {"automountServiceAccountToken": false,
            "containers": [{"name": "a", "securityContext": {"allowPrivilegeEscalation": false}}]}}}});
        let live = json!({"spec": {"template": {"spec": {"containers": [{"name": "a", "securityContext": {}}]}}}});
        assert!(!plain(&live, &desired));
        // A custom resource keeps everything as sent: no zeros left out, no quantities.
        let cr = |live: &Value, desired: &Value| {
            holds(live, desired, "helm.toolkit.fluxcd.io", "HelmRelease")
        };
        assert!(!cr(
            &json!({"spec": {"values": {}}}),
            &json!({"spec": {"values": {"hostNetwork": false}}})
        ));
        assert!(!cr(
            &json!({"spec": {"default": {"version": "1.1"}}}),
            &json!({"spec": {"default": {"version": "1.10"}}})
        ));
        assert!(!cr(
            &json!({"spec": {"size": "2"}}),
            &json!({"spec": {"size": 2}})
        ));
        // A networking.k8s.io kind is built in.
        assert!(holds(
            &json!({"spec": {}}),
            &json!({"spec": {"hostNetwork": false}}),
            "networking.k8s.io",
            "Ingress"
        ));
    }

    /// What the daemon on Argo CD's manifests found sent at every pass: a team's env var.
    #[test]
    fn items_another_manager_added_to_a_named_list_do_not_matter() {
        let container = |env: Value| json!({"spec": {"containers": [{"name": "a", "env": env}]}});
        let desired = container(json!([{"name": "X", "value": "1"}]));
        let live =
            container(json!([{"name": "TEAM_B", "value": "on"}, {"name": "X", "value": "1"}]));
        assert!(plain(&live, &desired));
        // A rendered item changed or gone is not held.
        assert!(!plain(
            &container(json!([{"name": "X", "value": "2"}])),
            &desired
        ));
        assert!(!plain(
            &container(json!([{"name": "TEAM_B", "value": "on"}])),
            &desired
        ));
        // A sidecar injected beside the rendered container.
        assert!(plain(
            &json!({"spec": {"containers": [{"name": "a"}, {"name": "istio-proxy"}]}}),
            &json!({"spec": {"containers": [{"name": "a"}]}})
        ));
        // An atomic list of named items: an added subject is drift (found by a review).
        assert!(!holds(
            &json!({"subjects": [{"kind": "User", "name": "a"}, {"kind": "User", "name": "mallory"}]}),
            &json!({"subjects": [{"kind": "User", "name": "a"}]}),
            "rbac.authorization.k8s.io",
            "RoleBinding"
        ));
        // A name twice in the live env: the later value is the one a container sees.
        assert!(!plain(
            &container(json!([{"name": "X", "value": "1"}, {"name": "X", "value": "2"}])),
            &desired
        ));
        // Lists without names, and a custom resource's (atomic unless its schema says so),
        // still compare whole.
        assert!(!plain(
            &json!({"args": ["a", "b"]}),
            &json!({"args": ["a"]})
        ));
        assert!(!holds(
            &json!({"spec": {"items": [{"name": "a"}, {"name": "b"}]}}),
            &json!({"spec": {"items": [{"name": "a"}]}}),
            "example.com",
            "Widget"
        ));
    }

    #[test]
    fn a_number_a_built_in_kind_stores_as_a_string_is_a_quantity() {
        assert!(plain(
            &json!({"spec": {"metrics": [{"resource": {"target": {"type": "Value", "value": "100"}}}]}}),
            &json!({"spec": {"metrics": [{"resource": {"target": {"type": "Value", "value": 100}}}]}})
        ));
        assert!(plain(
            &json!({"env": [{"valueFrom": {"resourceFieldRef": {"divisor": "1"}}}]}),
            &json!({"env": [{"valueFrom": {"resourceFieldRef": {"divisor": 1}}}]})
        ));
        assert!(!plain(
            &json!({"a": {"value": "101"}}),
            &json!({"a": {"value": 100}})
        ));
    }

    #[test]
    fn a_secrets_data_is_held_by_the_bytes_it_encodes() {
        // Wrapped by `base64` at 76 columns, and with padding bits the server drops.
        let long = "x".repeat(80);
        let canonical = base64::engine::general_purpose::STANDARD.encode(&long);
        let wrapped = format!("{}\n{}\n", &canonical[..76], &canonical[76..]);
        assert!(secret(
            &json!({"data": {"k": canonical, "a": "YQ=="}}),
            &json!({"data": {"k": wrapped, "a": "YR=="}})
        ));
        assert!(!secret(
            &json!({"data": {"a": "Yg=="}}),
            &json!({"data": {"a": "YR=="}})
        ));
    }

    #[test]
    fn a_secrets_string_data_is_held_as_its_data() {
        let desired = json!({"stringData": {"password": "s3cret", "both": "from stringData"},
            "data": {"both": "ZnJvbSBkYXRh", "other": "eA=="}});
        let live = json!({"data": {"password": "czNjcmV0", "both": "ZnJvbSBzdHJpbmdEYXRh", "other": "eA=="}});
        assert!(secret(&live, &desired));
        assert!(!plain(&live, &desired), "only a Secret");
        let changed = json!({"data": {"password": "b3RoZXI=", "both": "ZnJvbSBzdHJpbmdEYXRh", "other": "eA=="}});
        assert!(!secret(&changed, &desired));
        assert!(!secret(
            &json!({"data": {}}),
            &json!({"stringData": {"a": "b"}})
        ));
    }
}

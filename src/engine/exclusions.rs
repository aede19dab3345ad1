//! Fields and objects convoy leaves to others: per object `convoy.kumodo.io/ssa:
//! IfNotPresent | Ignore` (or Flux's `kustomize.toolkit.fluxcd.io/ssa`, read as Flux reads
//! it), per Release `spec.driftExclusions`.
//!
//! Design: DESIGN.md section 7 ("fields others own"). An excluded field is not sent by the
//! apply, so the writer that owns it (an HPA, a certificate job) keeps it, and because the
//! dry run of the drift check sends the same object, it is not drift either. An `Ignore`
//! object is never applied and never recorded (so never pruned); an `IfNotPresent` object
//! is created when missing and never sent again while it exists.

use crate::engine::error::Invalid;
use std::collections::{BTreeSet, HashMap};

use serde_json::Value;

use crate::engine::api::{DriftExclusion, ObjectKey, Release};
use crate::engine::apply::Freshness;
use crate::engine::render::Object;
use crate::engine::render::mutations::matches_target;
use crate::engine::selectors;

/// The per-object annotation.
pub const SSA_ANNOTATION: &str = "convoy.kumodo.io/ssa";
/// Flux's annotation (or label) of the same meaning, read where convoy's is absent: a
/// repository written for Flux says with it which objects are created once (a Secret another
/// tool rotates) or left alone, and convoy overwrote them at every sync.
pub const FLUX_SSA: &str = "kustomize.toolkit.fluxcd.io/ssa";
/// Flux's older way to say `Ignore`: `kustomize.toolkit.fluxcd.io/reconcile: disabled`.
const FLUX_RECONCILE: &str = "kustomize.toolkit.fluxcd.io/reconcile";

/// What the per-object annotation says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SsaPolicy {
    /// Applied as usual.
    Apply,
    /// Created if missing, never updated.
    IfNotPresent,
    /// Never applied, never pruned.
    Ignore,
    /// Applied as usual, but the fields kubectl's managers own stay theirs: not adopted from
    /// kubectl (Flux's `Merge`, which keeps Flux from removing them).
    Merge,
}

/// The object's policy, or why its annotation is not one.
pub fn ssa_policy(object: &Object) -> Result<SsaPolicy, Invalid> {
    match object.0["metadata"]["annotations"][SSA_ANNOTATION].as_str() {
        None => Ok(flux_policy(object)),
        Some("IfNotPresent") => Ok(SsaPolicy::IfNotPresent),
        Some("Ignore") => Ok(SsaPolicy::Ignore),
        Some(other) => Err(Invalid(format!(
            "{object}: annotation {SSA_ANNOTATION} is {other:?}; accepted values are IfNotPresent and Ignore"
        ))),
    }
}

/// What Flux's annotations say, as Flux reads them: an annotation or a label, its value in
/// any case; a value Flux does not know applies the object as usual, as in Flux.
fn flux_policy(object: &Object) -> SsaPolicy {
    if flux_paused(&object.0).is_some() {
        SsaPolicy::Ignore
    } else if flux_says(&object.0, FLUX_SSA, "IfNotPresent").is_some() {
        SsaPolicy::IfNotPresent
    } else if flux_says(&object.0, FLUX_SSA, "Merge").is_some() {
        SsaPolicy::Merge
    } else {
        SsaPolicy::Apply
    }
}

/// `name: value` as `object` says it, the way Flux reads it (an annotation or a label, the
/// value in any case), or `None`.
fn flux_says(object: &Value, name: &str, value: &str) -> Option<String> {
    ["annotations", "labels"].iter().find_map(|place| {
        let said = object["metadata"][place][name].as_str()?;
        said.eq_ignore_ascii_case(value)
            .then(|| format!("{name}: {said}"))
    })
}

/// Whether `object` (rendered or live) tells Flux to leave it alone (`ssa: Ignore`, or the
/// older `reconcile: disabled`), as it reads: Flux then neither applies nor prunes it,
/// whichever of the two says so; `kubectl annotate … kustomize.toolkit.fluxcd.io/reconcile=
/// disabled` is how Flux's users pause one object in the cluster.
pub fn flux_paused(object: &Value) -> Option<String> {
    flux_says(object, FLUX_SSA, "Ignore").or_else(|| flux_says(object, FLUX_RECONCILE, "disabled"))
}

/// Check the annotations of a render and the Release's exclusions (stageRender: a bad one
/// fails the render, naming the object or the exclusion, before anything is applied).
pub fn validate(release: &Release, objects: &[Object]) -> Result<(), Invalid> {
    for object in objects {
        ssa_policy(object)?;
    }
    for (i, exclusion) in release.spec.drift_exclusions.iter().enumerate() {
        let name = format!("spec.driftExclusions[{i}]");
        let Some(target) = &exclusion.target else {
            return Err(Invalid(format!(
                "{name} has no target: name the objects it applies to (group, kind, name, namespace or labelSelector)"
            )));
        };
        if let Some(selector) = &target.label_selector {
            selectors::parse(selector).map_err(|e| format!("{name}.target: {e}"))?;
        }
        if exclusion.json_pointers.is_empty() && exclusion.managers.is_empty() {
            return Err(Invalid(format!(
                "{name} names neither jsonPointers nor managers"
            )));
        }
        for pointer in &exclusion.json_pointers {
            parse_pointer(pointer)
                .map_err(|why| format!("{name}: JSON pointer {pointer:?} {why}"))?;
        }
    }
    Ok(())
}

/// The tokens of an RFC 6901 pointer (`~1` is `/`, `~0` is `~`).
fn parse_pointer(pointer: &str) -> Result<Vec<String>, &'static str> {
    if pointer.is_empty() {
        return Err("is empty (it would exclude the whole object)");
    }
    let Some(rest) = pointer.strip_prefix('/') else {
        return Err("does not start with '/'");
    };
    rest.split('/')
        .map(|t| {
            let mut out = String::with_capacity(t.len());
            let mut chars = t.chars();
            while let Some(c) = chars.next() {
                if c == '~' {
                    match chars.next() {
                        Some('0') => out.push('~'),
                        Some('1') => out.push('/'),
                        _ => return Err("has a '~' not followed by 0 or 1"),
                    }
                } else {
                    out.push(c);
                }
            }
            Ok(out)
        })
        .collect()
}

/// A render made ready for the cluster: what to send and compare, and which objects exist
/// already and must not be sent (`IfNotPresent`).
#[derive(Debug, Clone, Default)]
pub struct ForCluster {
    pub objects: Vec<Object>,
    /// Effective keys of `IfNotPresent` objects that exist: members, never sent.
    pub keep_as_is: BTreeSet<ObjectKey>,
    /// Effective keys of `Ignore` objects: neither applied nor recorded nor pruned.
    pub ignored: BTreeSet<ObjectKey>,
    /// Effective keys of `Merge` objects: kubectl's fields on them stay kubectl's.
    pub not_adopted: BTreeSet<ObjectKey>,
}

/// Apply the exclusions to `objects` (with their effective keys, for `live`): drop `Ignore`
/// objects, remove excluded fields (by pointer, and those `managers` own on the live
/// object), and mark existing `IfNotPresent` objects.
pub fn for_cluster(
    release: &Release,
    objects: Vec<(ObjectKey, Object)>,
    live: &HashMap<ObjectKey, Value>,
) -> ForCluster {
    let mut out = ForCluster::default();
    for (key, mut object) in objects {
        let live_object = live.get(&key);
        let policy = ssa_policy(&object).unwrap_or(SsaPolicy::Apply);
        // An existing object Flux is told to leave alone (by the render's annotation or the
        // live object's) stays a member, never sent, as Flux keeps it in its inventory; by
        // convoy's own `Ignore`, it leaves the inventory (DESIGN.md).
        let own = object.0["metadata"]["annotations"][SSA_ANNOTATION].is_string();
        let paused = !(own && policy == SsaPolicy::Ignore)
            && live_object.is_some_and(|l| {
                flux_paused(l).is_some() || (!own && flux_paused(&object.0).is_some())
            });
        if paused {
            out.keep_as_is.insert(key.clone());
        }
        // Flux reads `Merge` on the live object too.
        if live_object.is_some_and(|l| flux_says(l, FLUX_SSA, "Merge").is_some()) {
            out.not_adopted.insert(key.clone());
        }
        match policy {
            _ if paused => {}
            SsaPolicy::Ignore => {
                out.ignored.insert(key);
                continue;
            }
            SsaPolicy::IfNotPresent if live.contains_key(&key) => {
                out.keep_as_is.insert(key.clone());
            }
            SsaPolicy::Merge => {
                out.not_adopted.insert(key.clone());
            }
            _ => {}
        }
        let owner = ownership_labels(&object.0);
        for exclusion in &release.spec.drift_exclusions {
            if applies_to(exclusion, &object) {
                exclude(&mut object.0, exclusion, live.get(&key));
            }
        }
        restore_labels(&mut object.0, owner);
        out.objects.push(object);
    }
    out
}

/// convoy's ownership labels of `object` (engine::ownership), before exclusions run.
fn ownership_labels(object: &Value) -> Vec<(String, Value)> {
    use crate::engine::api::labels::{RELEASE_NAME, RELEASE_NAMESPACE};
    [RELEASE_NAME, RELEASE_NAMESPACE]
        .into_iter()
        .filter_map(|k| Some((k.to_string(), object["metadata"]["labels"].get(k)?.clone())))
        .collect()
}

/// Put the ownership labels back where an exclusion took them (`/metadata/labels`, or a
/// manager owning the labels map): a prune, a handover and the daemon's watches know
/// convoy's objects by them, so an object sent without them would be one convoy cannot
/// tell from another writer's.
fn restore_labels(object: &mut Value, labels: Vec<(String, Value)>) {
    if labels.is_empty() {
        return;
    }
    let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    let map = metadata
        .entry("labels")
        .or_insert_with(|| Value::Object(Default::default()));
    if !map.is_object() {
        *map = Value::Object(Default::default());
    }
    if let Some(map) = map.as_object_mut() {
        for (k, v) in labels {
            map.entry(k).or_insert(v);
        }
    }
}

/// How old the drift loop's reads of `release`'s live objects may be, given what the loop
/// asks (`wanted`): a Release that leaves fields to managers by name needs each object's
/// `managedFields`, which a daemon's own watches do not keep, so it reads the API server's
/// watch cache instead (without them, every pass would see those fields as drift and read
/// everything again at its latest).
pub fn drift_reads(release: &Release, wanted: Freshness) -> Freshness {
    if leaves_fields_to_managers(release) && wanted == Freshness::WatchCache {
        Freshness::ServerWatchCache
    } else {
        wanted
    }
}

/// Whether `release` leaves fields to managers by name: comparing it with the cluster needs
/// the live objects' `managedFields`.
pub fn leaves_fields_to_managers(release: &Release) -> bool {
    release
        .spec
        .drift_exclusions
        .iter()
        .any(|e| !e.managers.is_empty())
}

fn applies_to(exclusion: &DriftExclusion, object: &Object) -> bool {
    let Some(target) = &exclusion.target else {
        return false;
    };
    let selector = target
        .label_selector
        .as_deref()
        .and_then(|s| selectors::parse(s).ok());
    if target.label_selector.is_some() && selector.is_none() {
        return false;
    }
    matches_target(object, Some(target), selector.as_ref())
}

fn exclude(object: &mut Value, exclusion: &DriftExclusion, live: Option<&Value>) {
    for pointer in &exclusion.json_pointers {
        if let Ok(tokens) = parse_pointer(pointer) {
            remove_path(object, &tokens);
        }
    }
    let Some(live) = live else { return };
    for entry in live["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let manager = entry["manager"].as_str().unwrap_or_default();
        if exclusion.managers.iter().any(|m| m == manager) {
            remove_owned(object, &entry["fieldsV1"]);
        }
    }
}

/// Remove the value at `tokens` (object keys, or array indexes) if it is there.
fn remove_path(value: &mut Value, tokens: &[String]) {
    let Some((last, parents)) = tokens.split_last() else {
        return;
    };
    let mut node = value;
    for token in parents {
        node = match node {
            Value::Object(map) => match map.get_mut(token) {
                Some(next) => next,
                None => return,
            },
            Value::Array(items) => match token.parse::<usize>().ok().and_then(|i| items.get_mut(i))
            {
                Some(next) => next,
                None => return,
            },
            _ => return,
        };
    }
    match node {
        Value::Object(map) => {
            map.remove(last);
        }
        Value::Array(items) => {
            if let Ok(i) = last.parse::<usize>()
                && i < items.len()
            {
                items.remove(i);
            }
        }
        _ => {}
    }
}

/// Remove from `value` every field a `fieldsV1` tree owns: `f:` keys, and `k:` list items
/// matched by their key fields. A node that owns itself (`.`) or has no children is removed
/// whole.
fn remove_owned(value: &mut Value, fields: &Value) {
    let Some(fields) = fields.as_object() else {
        return;
    };
    for (key, sub) in fields {
        let leaf = sub
            .as_object()
            .is_none_or(|m| m.is_empty() || m.contains_key("."));
        if let Some(name) = key.strip_prefix("f:") {
            let Some(map) = value.as_object_mut() else {
                continue;
            };
            if leaf {
                map.remove(name);
            } else if let Some(child) = map.get_mut(name) {
                remove_owned(child, sub);
            }
        } else if let Some(raw) = key.strip_prefix("k:") {
            let (Ok(Value::Object(wanted)), Some(items)) =
                (serde_json::from_str::<Value>(raw), value.as_array_mut())
            else {
                continue;
            };
            let matches = |item: &Value| {
                wanted
                    .iter()
                    .all(|(k, v)| item.get(k).is_some_and(|x| x == v))
            };
            if leaf {
                items.retain(|item| !matches(item));
            } else if let Some(item) = items.iter_mut().find(|i| matches(i)) {
                remove_owned(item, sub);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn release(exclusions: Value) -> Release {
        serde_json::from_value(json!({
            "apiVersion": "core.convoy.kumodo.io/v1alpha1", "kind": "Release",
            "metadata": {"name": "web", "namespace": "apps"},
            "spec": {"source": {"kind": "GitRepository", "name": "repo"}, "driftExclusions": exclusions},
        }))
        .unwrap()
    }

    fn key(kind: &str, name: &str) -> ObjectKey {
        ObjectKey {
            group: if kind == "Deployment" {
                "apps".into()
            } else {
                String::new()
            },
            kind: kind.into(),
            namespace: "apps".into(),
            name: name.into(),
        }
    }

    /// The daemon's watches keep no managedFields: a Release leaving fields to a manager by
    /// name reads the API server's watch cache; the CLI's latest reads stay the latest.
    #[test]
    fn a_release_that_leaves_fields_to_managers_reads_their_managed_fields() {
        let by_pointer = release(json!([
            {"target": {"kind": "Deployment"}, "jsonPointers": ["/spec/replicas"]},
        ]));
        let by_manager = release(json!([
            {"target": {"kind": "Deployment"}, "managers": ["kube-controller-manager"]},
        ]));
        assert_eq!(
            drift_reads(&by_pointer, Freshness::WatchCache),
            Freshness::WatchCache
        );
        assert_eq!(
            drift_reads(&by_manager, Freshness::WatchCache),
            Freshness::ServerWatchCache
        );
        assert_eq!(
            drift_reads(&by_manager, Freshness::Latest),
            Freshness::Latest
        );
    }

    #[test]
    fn pointers_and_managers_remove_fields_others_own() {
        let release = release(json!([
            {"target": {"kind": "Deployment"}, "jsonPointers": ["/spec/replicas"]},
            {"target": {"kind": "ValidatingWebhookConfiguration"}, "managers": ["cert-job"]},
        ]));
        let deploy = Object(json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "api", "namespace": "apps"}, "spec": {"replicas": 3, "paused": false}}));
        let webhook = Object(
            json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": "hook"}, "webhooks": [{"name": "a", "clientConfig": {"caBundle": "old", "url": "https://x"}}]}),
        );
        let wh_key = ObjectKey {
            group: "admissionregistration.k8s.io".into(),
            kind: "ValidatingWebhookConfiguration".into(),
            namespace: String::new(),
            name: "hook".into(),
        };
        let live = HashMap::from([(
            wh_key.clone(),
            json!({"metadata": {"managedFields": [{"manager": "cert-job", "fieldsV1":
                {"f:webhooks": {"k:{\"name\":\"a\"}": {"f:clientConfig": {"f:caBundle": {}}}}}}]}}),
        )]);
        let out = for_cluster(
            &release,
            vec![(key("Deployment", "api"), deploy), (wh_key, webhook)],
            &live,
        );
        assert_eq!(out.objects[0].0["spec"], json!({"paused": false}));
        assert_eq!(
            out.objects[1].0["webhooks"][0]["clientConfig"],
            json!({"url": "https://x"})
        );
    }

    #[test]
    fn no_exclusion_takes_convoys_ownership_labels() {
        let release = release(json!([
            {"target": {"kind": "ConfigMap", "name": "a"}, "jsonPointers": ["/metadata/labels"]},
            {"target": {"kind": "ConfigMap", "name": "b"}, "managers": ["labeller"]},
        ]));
        let object = |name: &str| {
            Object(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": "apps", "labels": {
                    "team": "x", "convoy.kumodo.io/release": "web",
                    "convoy.kumodo.io/release-namespace": "apps"}}}))
        };
        let live = HashMap::from([(
            key("ConfigMap", "b"),
            json!({"metadata": {"managedFields": [{"manager": "labeller", "fieldsV1":
                {"f:metadata": {"f:labels": {".": {}, "f:team": {}}}}}]}}),
        )]);
        let out = for_cluster(
            &release,
            vec![
                (key("ConfigMap", "a"), object("a")),
                (key("ConfigMap", "b"), object("b")),
            ],
            &live,
        );
        let owner = json!({"convoy.kumodo.io/release": "web", "convoy.kumodo.io/release-namespace": "apps"});
        // Everything else the exclusions name is left to others.
        assert_eq!(out.objects[0].0["metadata"]["labels"], owner);
        assert_eq!(out.objects[1].0["metadata"]["labels"], owner);
    }

    /// Flux's annotation or label, as Flux reads it, where convoy's is absent; convoy's own
    /// wins, and is checked strictly.
    #[test]
    fn fluxs_ssa_annotation_is_read_where_convoys_is_absent() {
        let object = |metadata: Value| {
            let mut value = json!({"apiVersion": "v1", "kind": "Secret", "metadata": metadata});
            value["metadata"]["name"] = json!("s");
            Object(value)
        };
        let policy = |metadata: Value| ssa_policy(&object(metadata)).unwrap();
        let annotated = |name: &str, value: &str| json!({"annotations": {name: value}});
        assert_eq!(
            policy(annotated(FLUX_SSA, "IfNotPresent")),
            SsaPolicy::IfNotPresent
        );
        assert_eq!(
            policy(annotated(FLUX_SSA, "ifnotpresent")),
            SsaPolicy::IfNotPresent
        );
        assert_eq!(
            policy(json!({"labels": {FLUX_SSA: "Ignore"}})),
            SsaPolicy::Ignore
        );
        assert_eq!(
            policy(annotated(
                "kustomize.toolkit.fluxcd.io/reconcile",
                "disabled"
            )),
            SsaPolicy::Ignore
        );
        assert_eq!(policy(annotated(FLUX_SSA, "Merge")), SsaPolicy::Merge);
        // Flux applies an object whose value it does not know; so does convoy.
        assert_eq!(policy(annotated(FLUX_SSA, "Sometimes")), SsaPolicy::Apply);
        assert_eq!(
            policy(json!({"annotations": {SSA_ANNOTATION: "IfNotPresent", FLUX_SSA: "Ignore"}})),
            SsaPolicy::IfNotPresent
        );
        let merged = for_cluster(
            &release(json!([])),
            vec![(key("Secret", "s"), object(annotated(FLUX_SSA, "Merge")))],
            &HashMap::new(),
        );
        assert_eq!(merged.objects.len(), 1);
        assert!(merged.not_adopted.contains(&key("Secret", "s")));
        // Flux's Merge and Ignore on the live object count too.
        let live = HashMap::from([
            (
                key("Secret", "m"),
                json!({"metadata": {"labels": {FLUX_SSA: "merge"}}}),
            ),
            (
                key("Secret", "p"),
                json!({"metadata": {"annotations": {FLUX_SSA: "Ignore"}}}),
            ),
        ]);
        let out = for_cluster(
            &release(json!([])),
            vec![
                (key("Secret", "m"), object(json!({}))),
                (key("Secret", "p"), object(json!({}))),
            ],
            &live,
        );
        assert!(out.not_adopted.contains(&key("Secret", "m")));
        assert!(out.keep_as_is.contains(&key("Secret", "p")));
        assert!(!out.keep_as_is.contains(&key("Secret", "m")));
    }

    #[test]
    fn ignore_drops_the_object_and_if_not_present_keeps_an_existing_one_as_is() {
        let release = release(json!([]));
        let object = |name: &str, policy: &str| {
            Object(json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": name, "annotations": {SSA_ANNOTATION: policy}}}))
        };
        let live = HashMap::from([(key("Secret", "once"), json!({}))]);
        let out = for_cluster(
            &release,
            vec![
                (key("Secret", "skip"), object("skip", "Ignore")),
                (key("Secret", "once"), object("once", "IfNotPresent")),
                (key("Secret", "new"), object("new", "IfNotPresent")),
            ],
            &live,
        );
        let names: Vec<&str> = out.objects.iter().map(|o| o.name()).collect();
        assert_eq!(names, ["once", "new"]);
        assert_eq!(out.keep_as_is, BTreeSet::from([key("Secret", "once")]));
    }

    #[test]
    fn bad_annotations_and_exclusions_are_named() {
        let object = Object(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "apps", "annotations": {SSA_ANNOTATION: "Sometimes"}}}));
        assert_eq!(
            validate(&release(json!([])), &[object]).unwrap_err().0,
            "ConfigMap/apps/a: annotation convoy.kumodo.io/ssa is \"Sometimes\"; accepted values are IfNotPresent and Ignore"
        );
        assert_eq!(
            validate(&release(json!([{"jsonPointers": ["/spec/replicas"]}])), &[])
                .unwrap_err()
                .0,
            "spec.driftExclusions[0] has no target: name the objects it applies to (group, kind, name, namespace or labelSelector)"
        );
        assert_eq!(
            validate(
                &release(
                    json!([{"target": {"kind": "Deployment"}, "jsonPointers": ["spec/replicas"]}])
                ),
                &[]
            )
            .unwrap_err()
            .0,
            "spec.driftExclusions[0]: JSON pointer \"spec/replicas\" does not start with '/'"
        );
        assert!(
            validate(
                &release(json!([{"target": {"kind": "Deployment"}, "jsonPointers": ["/a~2b"]}])),
                &[]
            )
            .unwrap_err()
            .0
            .contains("has a '~' not followed by 0 or 1")
        );
    }
}

//! Objects convoy shares with others: which Release owns an object, handing one over, taking
//! over what kubectl made, and pruning only what is still the Release's own.
//!
//! Design: DESIGN.md section 7 ("ownership of applied objects", "adoption from kubectl"). Two
//! Releases apply under the same field manager, so Server-Side Apply cannot tell them apart:
//! every object convoy applies carries the owning Release in two labels
//! ([`labels::RELEASE_NAME`], [`labels::RELEASE_NAMESPACE`]). A render that holds an object
//! another existing Release owns is stopped before anything is applied, unless the render
//! marks the object [`ADOPT_ANNOTATION`]; prune and deletion ([`prune_refs`]) leave objects
//! whose labels name another Release alone. Objects kubectl made before convoy are taken
//! over on the apply that first records them: kubectl's field managers are merged into
//! `convoy-release` ([`take_over_kubectl_fields`]), so what later leaves the render leaves
//! the object; other controllers keep their fields.

use std::collections::{BTreeMap, HashMap};

use futures::{StreamExt, stream};
use kube::Api;
use kube::api::{DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

use crate::engine::api::{ObjectKey, Release, ReleaseId, field_managers, labels};
use crate::engine::apply::{Applier, ApplyError, PruneReport, PruneTarget, Rejection};
use crate::engine::keep_policy::{self, Deleting};
use crate::engine::render::Object;

/// On an object of a render: hand this object over to this Release from the one that owns it.
pub const ADOPT_ANNOTATION: &str = "convoy.kumodo.io/adopt";

/// A Release, as the ownership labels name it (printed "Release namespace/name").
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Owner(pub ReleaseId);

impl Owner {
    pub fn of(release: &Release) -> Self {
        Self(ReleaseId::of(release))
    }

    /// The owner a live object's labels name, if any.
    pub fn of_live(live: &Value) -> Option<Self> {
        let labels = live["metadata"]["labels"].as_object()?;
        Some(Self(ReleaseId {
            name: labels.get(labels::RELEASE_NAME)?.as_str()?.to_string(),
            namespace: labels
                .get(labels::RELEASE_NAMESPACE)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
        }))
    }
}

impl std::fmt::Display for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Release {}", self.0)
    }
}

/// `objects` with the ownership labels of `release` (what convoy applies; the render and its
/// renderRef stay as rendered).
pub fn labelled(release: &Release, objects: &[Object]) -> Vec<Object> {
    let owner = Owner::of(release);
    objects
        .iter()
        .map(|o| {
            let mut o = o.clone();
            if let Some(meta) = o.0["metadata"].as_object_mut() {
                let labels = meta
                    .entry("labels")
                    .or_insert_with(|| Value::Object(Default::default()));
                if !labels.is_object() {
                    *labels = Value::Object(Default::default());
                }
                if let Some(labels) = labels.as_object_mut() {
                    labels.insert(labels::RELEASE_NAME.into(), json!(owner.0.name));
                    labels.insert(labels::RELEASE_NAMESPACE.into(), json!(owner.0.namespace));
                }
            }
            o
        })
        .collect()
}

/// Whether the render hands `object` over to its Release.
pub fn adopts(object: &Object) -> bool {
    object.0["metadata"]["annotations"][ADOPT_ANNOTATION].as_str() == Some("true")
}

/// The objects of `objects` (with their effective keys) whose live copy another Release
/// owns and that the render does not adopt: candidates for a refusal (the caller checks that
/// the other Release still exists).
pub fn claimed_by_others(
    release: &Release,
    objects: &[(ObjectKey, &Object)],
    live: &HashMap<ObjectKey, Value>,
) -> Vec<(ObjectKey, Owner)> {
    let me = Owner::of(release);
    objects
        .iter()
        .filter(|(_, o)| !adopts(o))
        .filter_map(|(key, _)| {
            let owner = Owner::of_live(live.get(key)?)?;
            (owner != me).then(|| (key.clone(), owner))
        })
        .collect()
}

/// Whether a field manager is kubectl's (client-side apply, its first-apply bookkeeping, and
/// its imperative commands), whose fields convoy takes over when it adopts an object.
pub fn is_kubectl_manager(manager: &str) -> bool {
    manager == "kubectl"
        || manager == "kubectl-client-side-apply"
        || manager == "before-first-apply"
        || manager.starts_with("kubectl-")
}

/// kubectl's managers on a live object, sorted.
pub fn kubectl_managers(live: &Value) -> Vec<String> {
    let mut out: Vec<String> = live["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["manager"].as_str())
        .filter(|m| is_kubectl_manager(m))
        .map(str::to_string)
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The `managedFields` of `live` with every kubectl entry merged into `convoy-release`'s
/// Apply entry (made if missing), or `None` when kubectl owns nothing there.
pub fn merged_managed_fields(live: &Value, now: &str) -> Option<Vec<Value>> {
    let entries = live["metadata"]["managedFields"].as_array()?;
    if !entries
        .iter()
        .any(|e| e["manager"].as_str().is_some_and(is_kubectl_manager))
    {
        return None;
    }
    let api_version = live["apiVersion"].as_str().unwrap_or_default();
    let mut taken = json!({});
    let mut kept = Vec::new();
    for entry in entries {
        if entry["manager"].as_str().is_some_and(is_kubectl_manager) {
            merge_fields(&mut taken, &entry["fieldsV1"]);
        } else {
            kept.push(entry.clone());
        }
    }
    let controller = field_managers::CONTROLLER.as_str();
    match kept.iter_mut().find(|e| {
        e["manager"] == controller && e["operation"] == "Apply" && e["apiVersion"] == api_version
    }) {
        Some(entry) => merge_fields(&mut entry["fieldsV1"], &taken),
        None => kept.push(json!({
            "manager": controller,
            "operation": "Apply",
            "apiVersion": api_version,
            "time": now,
            "fieldsType": "FieldsV1",
            "fieldsV1": taken,
        })),
    }
    Some(kept)
}

/// Union of two `fieldsV1` trees.
fn merge_fields(into: &mut Value, from: &Value) {
    let Some(from) = from.as_object() else { return };
    if !into.is_object() {
        *into = json!({});
    }
    if let Some(into) = into.as_object_mut() {
        for (k, v) in from {
            merge_fields(into.entry(k.clone()).or_insert_with(|| json!({})), v);
        }
    }
}

/// Adoption from kubectl: move the fields kubectl's managers own on `live` to
/// `convoy-release`, with the live resourceVersion as a precondition, so a change made since
/// `live` was read is never overwritten. The apply that follows then removes what the render
/// no longer sets, `kubectl.kubernetes.io/last-applied-configuration` included. Returns the
/// managers taken over from (empty: nothing to do).
///
/// `live` was read before the dry-run gate and the waves before this one: an object a
/// controller writes to (a Deployment's status, an HPA's replicas) has often moved on since.
/// A stale precondition (409) reads the object again and takes over from that, up to
/// [`TAKE_OVER_ATTEMPTS`] times; it failed the whole sync (`DeployFailed`) before. An object
/// deleted meanwhile has nothing to take over: the apply creates it. One whose ownership
/// labels changed meanwhile is left alone: the dry-run gate judged the owner `live` named.
pub async fn take_over_kubectl_fields(
    applier: &Applier,
    key: &ObjectKey,
    live: &Value,
) -> Result<Vec<String>, ApplyError> {
    let now = crate::engine::status::now();
    let now = serde_json::to_value(&now)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    let failed = |source: kube::Error| ApplyError::Read {
        key: key.to_string(),
        source: Box::new(source),
    };
    let judged = Owner::of_live(live);
    let mut fresh: Option<Value> = None;
    let mut resolved: Option<Api<DynamicObject>> = None;
    let mut attempt = 1;
    loop {
        let live = fresh.as_ref().unwrap_or(live);
        let Some(managed) = merged_managed_fields(live, &now) else {
            return Ok(Vec::new());
        };
        let managers = kubectl_managers(live);
        // A resourceVersion in the patched object is the update's precondition: a stale one
        // is refused with 409 (a JSON patch `test` of it failed with a bare 422).
        let patch: json_patch::Patch = serde_json::from_value(json!([
            {"op": "replace", "path": "/metadata/resourceVersion",
             "value": live["metadata"]["resourceVersion"].clone()},
            {"op": "replace", "path": "/metadata/managedFields", "value": managed},
        ]))
        .map_err(|e| failed(kube::Error::SerdeError(e)))?;
        // Resolved once, when there is something to take over.
        let api = match resolved.take() {
            Some(api) => api,
            None => match api_for(applier, key).await {
                Ok(Some(found)) => found,
                _ => return Ok(Vec::new()),
            },
        };
        match api
            .patch(
                &key.name,
                &PatchParams::default(),
                &Patch::<()>::Json(patch),
            )
            .await
        {
            Ok(_) => return Ok(managers),
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(Vec::new()),
            Err(kube::Error::Api(s)) if s.code == 409 && attempt < TAKE_OVER_ATTEMPTS => {
                match api.get_opt(&key.name).await {
                    Ok(Some(object)) => {
                        let object = serde_json::to_value(object)
                            .map_err(|e| failed(kube::Error::SerdeError(e)))?;
                        // The admission gate judged the owner `live` named; another one now
                        // is the next sync's to judge.
                        if Owner::of_live(&object) != judged {
                            return Err(ApplyError::Failed {
                                applied: Vec::new(),
                                failures: vec![Rejection {
                                    key: key.clone(),
                                    message: "its owner changed while it was adopted from kubectl; the next sync looks again".into(),
                                }],
                            });
                        }
                        fresh = Some(object);
                        resolved = Some(api);
                    }
                    Ok(None) => return Ok(Vec::new()),
                    Err(source) => return Err(failed(source)),
                }
                attempt += 1;
            }
            Err(source) => return Err(failed(source)),
        }
    }
}

/// How many times an adoption reads a moving object again before the sync gives up (and
/// retries later).
const TAKE_OVER_ATTEMPTS: usize = 3;

/// The API of `key`'s kind: `None` if the cluster does not serve it (nothing of it to read or
/// take over), `Err` if discovery could not tell.
async fn api_for(applier: &Applier, key: &ObjectKey) -> Result<Option<Api<DynamicObject>>, String> {
    // An inventory entry is written by convoy, but whoever may patch the ReleaseInventory can
    // add one: its name goes into the request's path as it is (render::object).
    if let Some((what, why)) =
        crate::engine::render::object::address_trouble(&key.namespace, &key.name)
    {
        return Err(format!("its {what} {why}"));
    }
    let resource = applier
        .resources()
        .resolve_group_kind(&key.group, &key.kind)
        .await
        .map_err(|e| e.to_string())?;
    Ok(resource.map(|resource| {
        if resource.namespaced {
            Api::namespaced_with(applier.client().clone(), &key.namespace, &resource.api)
        } else {
            Api::all_with(applier.client().clone(), &resource.api)
        }
    }))
}

/// What `prune_refs` did.
#[derive(Debug, Default)]
pub struct PruneOutcome {
    pub report: PruneReport,
    /// Targets left alone because their labels name another Release (dropped from this
    /// Release's inventory).
    pub handed_over: Vec<(ObjectKey, Owner)>,
    /// Targets only a stopped sync's intent listed, found without this Release's labels: this
    /// Release never applied them (kubectl's, say, which the sync was about to adopt), so they
    /// are left as found and dropped from its inventory.
    pub never_applied: Vec<ObjectKey>,
    /// Recorded members found without this Release's labels: convoy deletes only what
    /// carries them, so they are left as found and dropped from its inventory.
    pub unlabelled: Vec<ObjectKey>,
    /// This Release's objects whose annotations keep them (the annotation as it reads): left
    /// in place and dropped from its inventory, as Helm leaves them.
    pub kept: Vec<(ObjectKey, String)>,
}

/// "ConfigMap/ns/data (helm.sh/resource-policy: keep)" for a message, the first few and a
/// count.
pub fn describe_kept(kept: &[(ObjectKey, String)]) -> String {
    let items: Vec<String> = kept
        .iter()
        .map(|(key, reason)| format!("{key} ({reason})"))
        .collect();
    crate::engine::explain::first_of(&items, 5)
}

/// What a prune target's live object says of its owner.
#[derive(Debug, Clone, PartialEq, Eq)]
enum LiveOwner {
    NotFound,
    /// A kind the cluster does not serve: nothing of it is left to delete.
    Unserved,
    /// Not read, for this reason: whose it is cannot be told.
    Unreadable(String),
    /// Found without ownership labels.
    Unlabelled,
    Labelled(Owner),
}

/// What `prune_refs` does with one target.
#[derive(Debug, Clone, PartialEq, Eq)]
enum PruneDecision {
    /// Delete the object read (its uid the precondition).
    Delete,
    /// A recorded member found gone: counted as pruned, and no delete is sent (one sent by
    /// name could delete an object created under the name since, unchecked).
    Gone,
    HandOver(Owner),
    LeaveAsFound,
    /// A recorded member found without this Release's labels: left in place and dropped
    /// from the inventory.
    LeaveUnlabelled,
    /// Not deleted and kept recorded: whose it is could not be read (why).
    CannotTell(String),
    /// Only an intent's, and nothing there: drop the entry without a delete (which could
    /// remove one someone created since).
    Forget,
}

/// An object labelled for another Release is handed over. Only an object carrying this
/// Release's labels is deleted, as Flux prunes only what carries its Kustomization's labels:
/// the inventory is a record anyone allowed to write it can change, and an entry naming an
/// object convoy never labelled (another namespace's, a Namespace, kubectl's) must not make
/// convoy delete it. Convoy labels everything it applies, so its own objects carry the
/// labels unless someone removed them; those are left as found, and the message says so. An
/// unlabelled object only a stopped sync's intent listed was never sent by this Release.
fn decide(target: &PruneTarget, live: LiveOwner, me: &Owner) -> PruneDecision {
    match live {
        LiveOwner::Labelled(owner) if owner != *me => PruneDecision::HandOver(owner),
        LiveOwner::Labelled(_) => PruneDecision::Delete,
        LiveOwner::Unreadable(why) => PruneDecision::CannotTell(why),
        LiveOwner::Unlabelled if target.intent_only => PruneDecision::LeaveAsFound,
        LiveOwner::Unlabelled => PruneDecision::LeaveUnlabelled,
        LiveOwner::NotFound | LiveOwner::Unserved if target.intent_only => PruneDecision::Forget,
        LiveOwner::NotFound | LiveOwner::Unserved => PruneDecision::Gone,
    }
}

/// `pruneRefs` (reconcile-flow.txt stageSync step 5 and finalize step 3): delete `targets`
/// that carry this Release's labels ([`decide`]: those naming another Release now belong to
/// it and are only reported; unlabelled ones are left as found), except those whose live
/// annotations keep them from `deleting` ([`keep_policy`]).
pub async fn prune_refs(
    applier: &Applier,
    release: &Release,
    targets: &[PruneTarget],
    deleting: Deleting,
) -> Result<PruneOutcome, ApplyError> {
    let (mine, mut outcome) = plan_prune(applier, release, targets, deleting).await?;
    if !mine.is_empty() {
        let report = applier.prune(&mine).await?;
        outcome.report.deleted.extend(report.deleted);
        outcome.report.failures.extend(report.failures);
    }
    Ok(outcome)
}

/// What [`prune_refs`] would do with `targets`, read from their live objects: the targets it
/// would delete (with the uid it found), and those it would leave (the outcome, no report
/// yet). `convoy diff` shows the same.
pub async fn plan_prune(
    applier: &Applier,
    release: &Release,
    targets: &[PruneTarget],
    deleting: Deleting,
) -> Result<(Vec<PruneTarget>, PruneOutcome), ApplyError> {
    let me = Owner::of(release);
    // What each target's live object says of its owner, its uid and why it is kept.
    type Read = (LiveOwner, Option<String>, Option<String>);
    let owners: Vec<Result<Read, ApplyError>> = stream::iter(targets.iter().cloned())
        .map(|t| async move {
            let api = match api_for(applier, &t.key).await {
                Ok(Some(api)) => api,
                Ok(None) => return Ok((LiveOwner::Unserved, None, None)),
                Err(why) => return Ok((LiveOwner::Unreadable(why), None, None)),
            };
            match api.get_opt(&t.key.name).await {
                Ok(None) => Ok((LiveOwner::NotFound, None, None)),
                Ok(Some(found)) => {
                    let uid = found.metadata.uid.clone();
                    let live = serde_json::to_value(found).unwrap_or_default();
                    let owner =
                        Owner::of_live(&live).map_or(LiveOwner::Unlabelled, LiveOwner::Labelled);
                    Ok((owner, uid, keep_policy::keep_reason(&live, deleting)))
                }
                Err(e) if crate::engine::connect::is_unreachable(&e) => {
                    Err(ApplyError::Unreachable(Box::new(e)))
                }
                Err(e) => Ok((LiveOwner::Unreadable(e.to_string()), None, None)),
            }
        })
        .buffered(applier.concurrency())
        .collect()
        .await;
    let mut mine = Vec::new();
    let mut outcome = PruneOutcome::default();
    for (target, read) in targets.iter().zip(owners) {
        let (owner, uid, keep) = read?;
        match decide(target, owner, &me) {
            PruneDecision::Delete => match keep {
                Some(reason) => outcome.kept.push((target.key.clone(), reason)),
                None => mine.push(PruneTarget {
                    uid,
                    ..target.clone()
                }),
            },
            PruneDecision::HandOver(owner) => outcome.handed_over.push((target.key.clone(), owner)),
            PruneDecision::Gone => outcome.report.deleted.push(target.key.clone()),
            PruneDecision::LeaveAsFound => outcome.never_applied.push(target.key.clone()),
            PruneDecision::LeaveUnlabelled => outcome.unlabelled.push(target.key.clone()),
            PruneDecision::CannotTell(why) => outcome.report.failures.push(Rejection {
                key: target.key.clone(),
                message: format!(
                    "not deleted: cannot read it to check that it carries this Release's labels ({why})"
                ),
            }),
            PruneDecision::Forget => {}
        }
    }
    Ok((mine, outcome))
}

/// "ConfigMap/ns/a (Release ns/b)" for a message, the first few and a count.
pub fn describe_handed_over(handed_over: &[(ObjectKey, Owner)]) -> String {
    let mut by_owner: BTreeMap<&Owner, Vec<String>> = BTreeMap::new();
    for (key, owner) in handed_over {
        by_owner.entry(owner).or_default().push(key.to_string());
    }
    by_owner
        .into_iter()
        .map(|(owner, keys)| format!("{} now belongs to {owner}", keys.join(", ")))
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn release(ns: &str, name: &str) -> Release {
        serde_json::from_value(json!({
            "apiVersion": "core.convoy.kumodo.io/v1alpha1", "kind": "Release",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"source": {"kind": "GitRepository", "name": "repo"}},
        }))
        .unwrap()
    }

    #[test]
    fn a_prune_deletes_only_objects_labelled_as_its_own() {
        let me = Owner::of(&release("team-a", "web"));
        let other = Owner::of(&release("team-b", "web"));
        let target = |intent_only| PruneTarget {
            key: ObjectKey {
                group: String::new(),
                kind: "ConfigMap".into(),
                namespace: "team-a".into(),
                name: "a".into(),
            },
            wave: 0,
            intent_only,
            uid: None,
        };
        for intent_only in [false, true] {
            let t = target(intent_only);
            assert_eq!(
                decide(&t, LiveOwner::Labelled(me.clone()), &me),
                PruneDecision::Delete
            );
            assert_eq!(
                decide(&t, LiveOwner::Labelled(other.clone()), &me),
                PruneDecision::HandOver(other.clone())
            );
            // Unreadable: whose it is cannot be told, so it is not deleted.
            assert_eq!(
                decide(&t, LiveOwner::Unreadable("forbidden".into()), &me),
                PruneDecision::CannotTell("forbidden".into())
            );
        }
        // Gone, or of a kind no longer served: no delete is sent (an object created under the
        // name since would be deleted unchecked); a recorded member counts as pruned.
        for live in [LiveOwner::NotFound, LiveOwner::Unserved] {
            assert_eq!(
                decide(&target(false), live.clone(), &me),
                PruneDecision::Gone
            );
            assert_eq!(decide(&target(true), live, &me), PruneDecision::Forget);
        }
        // Unlabelled: never deleted, even recorded as applied (an inventory entry is no proof
        // that convoy applied it); listed only by a stopped sync's intent, it was never sent
        // by this Release.
        assert_eq!(
            decide(&target(false), LiveOwner::Unlabelled, &me),
            PruneDecision::LeaveUnlabelled
        );
        assert_eq!(
            decide(&target(true), LiveOwner::Unlabelled, &me),
            PruneDecision::LeaveAsFound
        );
    }

    #[test]
    fn objects_are_labelled_with_their_release() {
        let objects = vec![Object(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "labels": {"app": "x"}}}))];
        let out = labelled(&release("team-a", "web"), &objects);
        assert_eq!(
            out[0].0["metadata"]["labels"],
            json!({"app": "x", "convoy.kumodo.io/release": "web", "convoy.kumodo.io/release-namespace": "team-a"})
        );
    }

    #[test]
    fn another_releases_object_is_claimed_unless_adopted() {
        let key = ObjectKey {
            group: String::new(),
            kind: "ConfigMap".into(),
            namespace: "apps".into(),
            name: "shared".into(),
        };
        let live = HashMap::from([(
            key.clone(),
            json!({"metadata": {"labels": {"convoy.kumodo.io/release": "a", "convoy.kumodo.io/release-namespace": "apps"}}}),
        )]);
        let plain = Object(json!({"kind": "ConfigMap", "metadata": {"name": "shared"}}));
        let adopting = Object(json!({"kind": "ConfigMap", "metadata": {"name": "shared",
            "annotations": {"convoy.kumodo.io/adopt": "true"}}}));
        let b = release("apps", "b");
        assert_eq!(
            claimed_by_others(&b, &[(key.clone(), &plain)], &live),
            [(
                key.clone(),
                Owner(ReleaseId {
                    namespace: "apps".into(),
                    name: "a".into()
                })
            )]
        );
        assert!(claimed_by_others(&b, &[(key.clone(), &adopting)], &live).is_empty());
        assert!(claimed_by_others(&release("apps", "a"), &[(key, &plain)], &live).is_empty());
    }

    #[test]
    fn kubectl_fields_move_to_convoy_and_other_managers_keep_theirs() {
        let live = json!({"apiVersion": "apps/v1", "metadata": {"managedFields": [
            {"manager": "kubectl-client-side-apply", "operation": "Update", "apiVersion": "apps/v1",
             "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:annotations": {"f:note": {}}}, "f:spec": {"f:replicas": {}}}},
            {"manager": "kubectl-edit", "operation": "Update", "apiVersion": "apps/v1",
             "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:template": {"f:spec": {"f:containers": {}}}}}},
            {"manager": "hpa-controller", "operation": "Update", "apiVersion": "apps/v1",
             "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:minReadySeconds": {}}}},
        ]}});
        let merged = merged_managed_fields(&live, "2026-12-01T00:00:00Z").unwrap();
        let managers: Vec<&str> = merged
            .iter()
            .map(|e| e["manager"].as_str().unwrap())
            .collect();
        assert_eq!(managers, ["hpa-controller", "convoy-release"]);
        assert_eq!(
            merged[1]["fieldsV1"],
            json!({"f:metadata": {"f:annotations": {"f:note": {}}},
                   "f:spec": {"f:replicas": {}, "f:template": {"f:spec": {"f:containers": {}}}}})
        );
        assert_eq!(merged[1]["operation"], "Apply");
        assert_eq!(
            kubectl_managers(&live),
            ["kubectl-client-side-apply", "kubectl-edit"]
        );
        let untouched = json!({"metadata": {"managedFields": [{"manager": "hpa-controller"}]}});
        assert_eq!(merged_managed_fields(&untouched, "t"), None);
    }
}

//! Drift: what an apply would change on the cluster, and the observer's drift loop that
//! writes `InSync`.
//!
//! Spec: reconcile-flow.txt "Drift loop"; status-ownership.txt "Target clusters" (the drift
//! check dry-runs under the apply's field manager, so it shows exactly what a real apply
//! would change); status-and-conditions.txt (InSync). DESIGN.md section 6: every change is
//! classified, and Secrets are diffed by key and digest only.

pub mod fields;
pub mod text;

use std::collections::{BTreeSet, HashMap};

use futures::{StreamExt, stream};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{Api, ResourceExt};
use serde_json::Value;

use self::fields::{
    FieldChange, SecretKeyChange, field_changes, managed_fields, normalize, redact_changes,
    redact_secret_pair,
};
use crate::engine::api::{
    Condition, InSyncReason, ObjectKey, Release, ReleaseInventory, SyncMode, condition_types,
    field_managers,
};
use crate::engine::api::{ConditionStatus, ReleaseId};
use crate::engine::apply::{Applier, ApplyError, Rejection};
use crate::engine::cluster::Target;
use crate::engine::digest_key::DigestKey;
use crate::engine::explain::count;
use crate::engine::inventory::{InventoryHandle, members};
use crate::engine::ownership::Owner;
use crate::engine::reconcile::{ReconcileOutcome, new_reconcile_state, stages};
use crate::engine::render::Object;
use crate::engine::requests::request_sync;
use crate::engine::runtime::{Context, Requeue};
use crate::engine::ssa;
use crate::engine::status::{condition, condition_unchanged, now};

/// What an apply would do to one object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Action {
    Create,
    Change,
    Prune,
    Unchanged,
}

/// The difference for one object. Values are normalized (no server noise) and, for Secrets,
/// redacted.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectDiff {
    #[serde(serialize_with = "serialize_key")]
    pub key: ObjectKey,
    pub action: Action,
    pub changes: Vec<FieldChange>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub live: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub desired: Option<Value>,
    pub secret: bool,
    /// A Secret's keys and what happened to each value (never the value).
    #[serde(rename = "secretKeys", skip_serializing_if = "Vec::is_empty")]
    pub secret_keys: Vec<SecretKeyChange>,
    /// Another Release's object (its ownership labels name it): a sync is refused until the
    /// render adopts it (engine::ownership).
    #[serde(rename = "ownedBy", skip_serializing_if = "Option::is_none")]
    pub owned_by: Option<String>,
    /// The apply would adopt this object from these kubectl field managers.
    #[serde(rename = "adoptFrom", skip_serializing_if = "Vec::is_empty")]
    pub adopt_from: Vec<String>,
    /// Left the render but the sync leaves it in place (and drops it from the inventory):
    /// why, as its live object says (an annotation that keeps it, another Release's labels).
    #[serde(rename = "notPruned", skip_serializing_if = "Option::is_none")]
    pub not_pruned: Option<String>,
    /// Shown as rendered, without a dry run: its kind is not served yet, and the sync
    /// applies it once it is (engine::apply's `KindToCome`); why.
    #[serde(rename = "notDryRun", skip_serializing_if = "Option::is_none")]
    pub not_dry_run: Option<String>,
    /// The apply deletes the live object and creates it again (the server will not change it
    /// in place, and the render asks for that): why. Shown against the object as created.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recreate: Option<String>,
    /// What the deletion takes with it: a CustomResourceDefinition to prune deletes every
    /// object of its kind in the cluster (`plural.group`), which "to prune" alone did not say.
    #[serde(rename = "alsoDeletes", skip_serializing_if = "Option::is_none")]
    pub also_deletes: Option<String>,
}

fn serialize_key<S: serde::Serializer>(key: &ObjectKey, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&key.to_string())
}

impl ObjectDiff {
    /// Managers that drifted fields of this object.
    pub fn drift_managers(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .changes
            .iter()
            .filter_map(|c| match &c.cause {
                fields::Cause::Drift { managers } => Some(managers.clone()),
                fields::Cause::Render => None,
            })
            .flatten()
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// "render change", "drift by X", or both; with who owns or made the object.
    pub fn describe(&self) -> String {
        let mut notes = Vec::new();
        if let Some(owner) = &self.owned_by {
            notes.push(format!("owned by {owner}"));
        }
        if !self.adopt_from.is_empty() {
            notes.push(format!("adopt from {}", self.adopt_from.join(", ")));
        }
        if let Some(why) = &self.not_pruned {
            notes.push(format!("not pruned: {why}"));
        }
        if let Some(why) = &self.not_dry_run {
            notes.push(why.clone());
        }
        if let Some(why) = &self.recreate {
            notes.push(why.clone());
        }
        if let Some(what) = &self.also_deletes {
            notes.push(format!(
                "deletes every {what} in the cluster with it, whoever made them"
            ));
        }
        let action = self.describe_action();
        if notes.is_empty() {
            action
        } else if self.action == Action::Unchanged {
            notes.join("; ")
        } else {
            format!("{action}; {}", notes.join("; "))
        }
    }

    /// Whether the text view shows this object although nothing of it changes.
    pub fn noteworthy(&self) -> bool {
        self.owned_by.is_some() || !self.adopt_from.is_empty() || self.not_pruned.is_some()
    }

    fn describe_action(&self) -> String {
        match self.action {
            Action::Create => "to create".into(),
            Action::Prune => "to prune".into(),
            Action::Unchanged => "unchanged".into(),
            Action::Change => {
                let drift = self.drift_managers();
                let render = self
                    .changes
                    .iter()
                    .any(|c| c.cause == fields::Cause::Render);
                match (render, drift.is_empty()) {
                    (true, true) => "render change".into(),
                    (false, false) => format!("drift by {}", drift.join(", ")),
                    (true, false) => format!("render change; drift by {}", drift.join(", ")),
                    (false, true) => "changed".into(),
                }
            }
        }
    }
}

/// The differences between a render and a cluster.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DiffReport {
    pub objects: Vec<ObjectDiff>,
    /// Objects the server refused in the dry run, with its message.
    #[serde(serialize_with = "serialize_rejections")]
    pub rejections: Vec<Rejection>,
}

fn serialize_rejections<S: serde::Serializer>(r: &[Rejection], s: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeSeq;
    let mut seq = s.serialize_seq(Some(r.len()))?;
    for x in r {
        seq.serialize_element(
            &serde_json::json!({"object": x.key.to_string(), "message": x.message}),
        )?;
    }
    seq.end()
}

/// Counts for the summary table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Summary {
    pub create: usize,
    pub change: usize,
    pub prune: usize,
    pub unchanged: usize,
    pub drifted: usize,
    pub rejected: usize,
}

impl DiffReport {
    pub fn summary(&self) -> Summary {
        let mut s = Summary {
            rejected: self.rejections.len(),
            ..Default::default()
        };
        for o in &self.objects {
            match o.action {
                Action::Create => s.create += 1,
                Action::Change => s.change += 1,
                Action::Prune => s.prune += 1,
                Action::Unchanged => s.unchanged += 1,
            }
            if !o.drift_managers().is_empty() {
                s.drifted += 1;
            }
        }
        s
    }

    /// Nothing would change, nothing was refused, and nothing belongs to another Release.
    pub fn in_sync(&self) -> bool {
        self.rejections.is_empty()
            && self
                .objects
                .iter()
                .all(|o| o.action == Action::Unchanged && o.owned_by.is_none())
    }
}

/// One object's dry run: its key, and the result (with why the apply re-creates it, if it
/// does) or the server's refusal.
type DryRun = (ObjectKey, Result<(Value, Option<String>), Rejection>);

/// One object's key and dry run.
async fn dry_run(applier: &Applier, object: Object) -> Result<DryRun, ApplyError> {
    let key = applier
        .effective_key(&object)
        .await
        .unwrap_or_else(|_| object.key());
    match applier.dry_run_one(&object).await? {
        Ok((dry, recreate)) => Ok((
            key,
            Ok((serde_json::to_value(dry).unwrap_or(Value::Null), recreate)),
        )),
        Err(rejection) => Ok((key, Err(rejection))),
    }
}

/// A LIST item has no apiVersion/kind: take them from `typed` (the render or the dry run).
fn live_with_type(mut live: Value, typed: &Value) -> Value {
    for k in ["apiVersion", "kind"] {
        if let (Some(map), Some(v)) = (live.as_object_mut(), typed.get(k)) {
            map.entry(k).or_insert_with(|| v.clone());
        }
    }
    live
}

/// `diffObjects`: read each live object and dry-run the desired one under the controller's
/// field manager (forced, as the apply is), concurrently; inventory members no longer
/// desired are "to prune". A rejected dry run is reported for its object; the others go on.
pub async fn diff_objects(
    applier: &Applier,
    release: &Release,
    desired: &[Object],
    inventory: Option<&ReleaseInventory>,
    concurrency: usize,
    digest_key: Option<&DigestKey>,
    freshness: crate::engine::apply::Freshness,
) -> Result<DiffReport, ApplyError> {
    // Compared as the apply would send it: without the render's hook objects (they run, they
    // are not applied), with the ownership labels, without what is left to others
    // (engine::content_hooks, engine::ownership, engine::exclusions).
    let applied = crate::engine::content_hooks::split(desired).objects;
    let labelled = crate::engine::ownership::labelled(release, &applied);
    let live = applier.live_objects_as(&labelled, freshness).await?;
    let keyed = effective_keys(applier, &labelled).await;
    let for_cluster = crate::engine::exclusions::for_cluster(
        release,
        keyed.into_iter().zip(labelled).collect(),
        &live,
    );
    let desired = &for_cluster.objects[..];
    let keys = effective_keys(applier, desired).await;
    let changed = sync_would_send(
        applier,
        desired,
        &keys,
        &for_cluster,
        inventory,
        digest_key,
        &live,
    )
    .await;
    let results: Vec<Result<Option<DryRun>, ApplyError>> =
        stream::iter(desired.iter().cloned().zip(changed))
            .map(|(object, changed)| async move {
                if changed {
                    dry_run(applier, object).await.map(Some)
                } else {
                    Ok(None)
                }
            })
            .buffered(concurrency.max(1))
            .collect()
            .await;
    let mut report = DiffReport::default();
    let defined = crate::engine::apply::defined_kinds(desired);
    // The desired object of each ObjectDiff pushed below, in order.
    let mut sources: Vec<&Object> = Vec::new();
    for ((object, key), result) in desired.iter().zip(&keys).zip(results) {
        let diff = match result? {
            None => unchanged_diff(key.clone(), object, live.get(key), digest_key),
            // As the dry-run gate leaves it out, and the sync creates it.
            Some((key, Err(rejection))) => match applier.kind_to_come(object, &defined).await {
                Some(why) => ObjectDiff {
                    not_dry_run: Some(why.note()),
                    ..dry_run_diff(key, object, &object.0, None, digest_key)
                },
                None => {
                    report.rejections.push(rejection);
                    continue;
                }
            },
            Some((key, Ok((dry, recreate)))) => {
                let live_object = live.get(&key);
                let mut diff = dry_run_diff(key, object, &dry, live_object, digest_key);
                // A re-create is a change, even where no field differs but one the server
                // sets.
                if recreate.is_some() {
                    diff.action = Action::Change;
                }
                ObjectDiff { recreate, ..diff }
            }
        };
        report.objects.push(diff);
        sources.push(object);
    }
    name_owners(
        &mut report.objects,
        &sources,
        &live,
        inventory,
        &for_cluster.not_adopted,
    );
    let desired_keys: BTreeSet<ObjectKey> = keys.into_iter().collect();
    let mut pruned = prunes(inventory, &desired_keys, &for_cluster.ignored);
    leave_what_the_sync_leaves(applier, release, &mut pruned).await?;
    report.objects.extend(pruned);
    report.objects.sort_by(|a, b| a.key.cmp(&b.key));
    report.rejections.sort_by(|a, b| a.key.cmp(&b.key));
    Ok(report)
}

/// The key each object is applied under (a kind discovery cannot resolve keeps its own).
async fn effective_keys(applier: &Applier, objects: &[Object]) -> Vec<ObjectKey> {
    let mut keys = Vec::with_capacity(objects.len());
    for object in objects {
        let key = applier.effective_key(object).await;
        keys.push(key.unwrap_or_else(|_| object.key()));
    }
    keys
}

/// Which objects a sync would send. Objects applied before exactly as rendered now whose
/// live copy still holds every value they set are unchanged without a dry run (the sync
/// skips them by the same rule), and existing `IfNotPresent` objects are never sent, so the
/// diff shows exactly what a sync would send.
async fn sync_would_send(
    applier: &Applier,
    desired: &[Object],
    keys: &[ObjectKey],
    for_cluster: &crate::engine::exclusions::ForCluster,
    inventory: Option<&ReleaseInventory>,
    digest_key: Option<&DigestKey>,
    live: &HashMap<ObjectKey, Value>,
) -> Vec<bool> {
    let digests: HashMap<ObjectKey, String> = inventory
        .map(|inv| {
            members(inv)
                .into_iter()
                .filter_map(|e| Some((e.key(), e.digest.clone()?)))
                .collect()
        })
        .unwrap_or_default();
    let changed = applier
        .changed_given_live(desired, &digests, digest_key, live)
        .await;
    changed
        .into_iter()
        .zip(keys)
        .map(|(changed, key)| changed && !for_cluster.keep_as_is.contains(key))
        .collect()
}

/// A diff of one object and nothing else: every field empty.
fn object_diff(key: ObjectKey, action: Action, secret: bool) -> ObjectDiff {
    ObjectDiff {
        key,
        action,
        changes: Vec::new(),
        live: None,
        desired: None,
        secret,
        secret_keys: Vec::new(),
        owned_by: None,
        adopt_from: Vec::new(),
        not_pruned: None,
        not_dry_run: None,
        recreate: None,
        also_deletes: None,
    }
}

/// An object the sync would not send: shown as it is live (a Secret redacted).
fn unchanged_diff(
    key: ObjectKey,
    object: &Object,
    live: Option<&Value>,
    digest_key: Option<&DigestKey>,
) -> ObjectDiff {
    let keep_status = object.0.get("status").is_some();
    let secret = object.is_secret();
    let norm = live.map(|l| live_with_type(normalize(l, keep_status), &object.0));
    let (shown, secret_keys) = if secret {
        let (l, _, keys) = redact_secret_pair(norm.as_ref(), norm.as_ref(), digest_key);
        (l, keys)
    } else {
        (norm, Vec::new())
    };
    ObjectDiff {
        live: shown.clone(),
        desired: shown,
        secret_keys,
        ..object_diff(key, Action::Unchanged, secret)
    }
}

/// An object the sync would send, from its dry run: created, changed (each field change
/// named by who made it) or unchanged after all.
fn dry_run_diff(
    key: ObjectKey,
    object: &Object,
    dry: &Value,
    live: Option<&Value>,
    digest_key: Option<&DigestKey>,
) -> ObjectDiff {
    let keep_status = object.0.get("status").is_some();
    let secret = object.is_secret();
    let desired_norm = normalize(dry, keep_status);
    let Some(live_obj) = live else {
        let (desired_shown, secret_keys) = if secret {
            let (_, d, keys) = redact_secret_pair(None, Some(&desired_norm), digest_key);
            (d, keys)
        } else {
            (Some(desired_norm), Vec::new())
        };
        return ObjectDiff {
            desired: desired_shown,
            secret_keys,
            ..object_diff(key, Action::Create, secret)
        };
    };
    let live_norm = live_with_type(normalize(live_obj, keep_status), &desired_norm);
    let mut changes = field_changes(
        &live_norm,
        &desired_norm,
        &managed_fields(live_obj),
        &managed_fields(dry),
    );
    let (live_shown, desired_shown, secret_keys) = if secret {
        let (l, d, keys) = redact_secret_pair(Some(&live_norm), Some(&desired_norm), digest_key);
        let (l, d) = (l.unwrap_or_default(), d.unwrap_or_default());
        redact_changes(&mut changes, &l, &d);
        (l, d, keys)
    } else {
        (live_norm, desired_norm, Vec::new())
    };
    let action = if changes.is_empty() {
        Action::Unchanged
    } else {
        Action::Change
    };
    ObjectDiff {
        changes,
        live: Some(live_shown),
        desired: Some(desired_shown),
        secret_keys,
        ..object_diff(key, action, secret)
    }
}

/// Who owns or made what is about to be applied: another Release (unless the render adopts
/// the object), or kubectl's managers of an object not recorded yet (unless the render keeps
/// their fields theirs, `not_adopted`).
fn name_owners(
    diffs: &mut [ObjectDiff],
    sources: &[&Object],
    live: &HashMap<ObjectKey, Value>,
    inventory: Option<&ReleaseInventory>,
    not_adopted: &BTreeSet<ObjectKey>,
) {
    let recorded: BTreeSet<ObjectKey> = inventory
        .map(|inv| members(inv).into_iter().map(|e| e.key()).collect())
        .unwrap_or_default();
    for (diff, object) in diffs.iter_mut().zip(sources) {
        let Some(live_object) = live.get(&diff.key) else {
            continue;
        };
        if let (Some(ours), Some(theirs)) = (Owner::of_live(&object.0), Owner::of_live(live_object))
            && ours != theirs
            && !crate::engine::ownership::adopts(object)
        {
            diff.owned_by = Some(theirs.to_string());
        }
        if !recorded.contains(&diff.key) && !not_adopted.contains(&diff.key) {
            diff.adopt_from = crate::engine::ownership::kubectl_managers(live_object);
        }
    }
}

/// Of the objects to prune, those the sync would leave in place (their annotations keep them,
/// their labels name another Release now or are not this Release's, or whose they are cannot
/// be read; `ownership::plan_prune`, read from their live objects): unchanged, saying why.
/// Before, `convoy diff` showed a chart's kept volume claim "to prune" and the sync then kept
/// it.
async fn leave_what_the_sync_leaves(
    applier: &Applier,
    release: &Release,
    pruned: &mut [ObjectDiff],
) -> Result<(), ApplyError> {
    if pruned.is_empty() {
        return Ok(());
    }
    let targets: Vec<crate::engine::apply::PruneTarget> = pruned
        .iter()
        .map(|d| crate::engine::apply::PruneTarget {
            key: d.key.clone(),
            wave: 0,
            intent_only: false,
            uid: None,
        })
        .collect();
    let deleting = crate::engine::keep_policy::Deleting::Prune;
    let (_, left) =
        crate::engine::ownership::plan_prune(applier, release, &targets, deleting).await?;
    let mut why: HashMap<ObjectKey, String> = HashMap::new();
    for (key, reason) in left.kept {
        why.insert(key, format!("kept by {reason}"));
    }
    for (key, owner) in left.handed_over {
        why.insert(key, format!("belongs to {owner} now"));
    }
    for key in left.unlabelled {
        why.insert(key, "does not carry this Release's labels".into());
    }
    for failure in left.report.failures {
        why.insert(failure.key, failure.message);
    }
    for diff in pruned.iter_mut() {
        if let Some(why) = why.remove(&diff.key) {
            diff.action = Action::Unchanged;
            diff.not_pruned = Some(why);
            diff.also_deletes = None;
        }
    }
    Ok(())
}

/// The inventory's members the render no longer holds (and does not ignore): to prune.
fn prunes(
    inventory: Option<&ReleaseInventory>,
    desired: &BTreeSet<ObjectKey>,
    ignored: &BTreeSet<ObjectKey>,
) -> Vec<ObjectDiff> {
    inventory
        .map(members)
        .unwrap_or_default()
        .into_iter()
        .map(|entry| entry.key())
        .filter(|key| !desired.contains(key) && !ignored.contains(key))
        .map(|key| {
            let secret = key.kind == "Secret" && key.group.is_empty();
            // A CRD's name is its kind's `plural.group`.
            let crd = key.kind == "CustomResourceDefinition" && key.group == "apiextensions.k8s.io";
            let also_deletes = crd.then(|| key.name.clone());
            ObjectDiff {
                also_deletes,
                ..object_diff(key, Action::Prune, secret)
            }
        })
        .collect()
}

/// What the drift check decided about InSync.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    InSync {
        objects: usize,
    },
    OutOfSync {
        message: String,
    },
    /// The drift could not be determined.
    Unknown {
        message: String,
    },
}

/// The InSync condition for a verdict.
pub fn in_sync_condition(verdict: &Verdict, generation: Option<i64>) -> Condition {
    match verdict {
        Verdict::InSync { objects } => condition(
            condition_types::IN_SYNC,
            ConditionStatus::True,
            InSyncReason::InSync,
            format!("{} match the render", count(*objects, "object")),
            generation,
        ),
        Verdict::OutOfSync { message } => condition(
            condition_types::IN_SYNC,
            ConditionStatus::False,
            InSyncReason::OutOfSync,
            message.clone(),
            generation,
        ),
        Verdict::Unknown { message } => condition(
            condition_types::IN_SYNC,
            ConditionStatus::Unknown,
            InSyncReason::Unknown,
            message.clone(),
            generation,
        ),
    }
}

/// The verdict for a report: which objects differ (the first few, and how many).
pub fn verdict(report: &DiffReport) -> Verdict {
    if report.in_sync() {
        return Verdict::InSync {
            objects: report.objects.len(),
        };
    }
    let s = report.summary();
    let changed: Vec<String> = report
        .objects
        .iter()
        .filter(|o| o.action == Action::Change)
        .map(|o| format!("{} ({})", o.key, o.describe()))
        .collect();
    let mut parts = Vec::new();
    if !changed.is_empty() {
        let shown = changed
            .iter()
            .take(3)
            .cloned()
            .collect::<Vec<_>>()
            .join(", ");
        let more = if changed.len() > 3 {
            format!(" and {} more", changed.len() - 3)
        } else {
            String::new()
        };
        parts.push(format!(
            "{} differ: {shown}{more}",
            count(changed.len(), "object")
        ));
    }
    if s.create > 0 {
        parts.push(format!("{} to create", s.create));
    }
    if s.prune > 0 {
        parts.push(format!("{} to prune", s.prune));
    }
    if s.rejected > 0 {
        parts.push(format!("{} rejected by the dry run", s.rejected));
    }
    Verdict::OutOfSync {
        message: parts.join("; "),
    }
}

/// `writeInSync`: write InSync under `convoy-observe`, unless status, reason, message and
/// observedGeneration are unchanged; lastTransitionTime stays while the status stays.
/// Returns whether it wrote.
pub async fn write_in_sync(
    api: &Api<Release>,
    release: &Release,
    mut new: Condition,
    at: Time,
) -> Result<bool, kube::Error> {
    let old = release
        .status
        .as_ref()
        .and_then(|s| s.condition(condition_types::IN_SYNC));
    if condition_unchanged(old, &new) {
        return Ok(false);
    }
    new.last_transition_time = match old {
        Some(o) if o.status == new.status => o.last_transition_time.clone().or(Some(at)),
        _ => Some(at),
    };
    tracing::debug!(
        release = %crate::engine::store::ReleaseId::of(release),
        status = ?new.status,
        reason = %new.reason,
        was = ?old.map(|o| (&o.status, &o.reason)),
        "writing InSync"
    );
    let patch = serde_json::json!({
        "apiVersion": "core.convoy.kumodo.io/v1alpha1",
        "kind": "Release",
        "metadata": {"name": release.name_any()},
        "status": {"conditions": [new]},
    });
    ssa::apply_status(api, &release.name_any(), field_managers::OBSERVE, &patch).await?;
    Ok(true)
}

/// The desired objects and where they go.
pub struct Desired {
    pub objects: Vec<Object>,
    pub render_ref: String,
    pub target: Target,
}

/// `renderDesired`: the render an apply would use now. A pin and a RolledBack rollout read
/// the render store, which arrives with progressive delivery; until then the source is
/// rendered with its mutations (a pin then makes the render unavailable, as for the
/// controller).
pub async fn render_desired(
    ctx: &Context,
    release: &Release,
) -> Result<Desired, Box<ReconcileOutcome>> {
    let status = release.status.clone().unwrap_or_default();
    let state = crate::engine::reconcile::ReconcileState {
        caller: "drift",
        ..new_reconcile_state(release, &status, now())
    };
    let stage = stages::stage_render(ctx, release, &state).await?;
    // After a rollback the last healthy render is what should run (a pin came first, in
    // stage_render).
    if crate::engine::reconcile::assemble::pin_status(release).is_none()
        && let Some(rollout) = status.rollout.as_ref()
        && rollout.state == crate::engine::api::RolloutState::RolledBack
        && rollout.render_ref == stage.rendered.render_ref
        && let (Some(store), Some(last)) = (&ctx.store, status.last_healthy.as_ref())
    {
        let id = crate::engine::store::ReleaseId::of(release);
        match store.get_render(&id, &last.render_ref).await {
            Ok(Some(objects)) => {
                return Ok(Desired {
                    objects,
                    render_ref: last.render_ref.clone(),
                    target: stage.target,
                });
            }
            Ok(None) => {
                tracing::warn!(release = %id, "the last healthy render is not in the store; comparing with the source render")
            }
            Err(e) => {
                tracing::warn!(release = %id, "cannot load the last healthy render: {}", crate::engine::error::chain(&e))
            }
        }
    }
    Ok(Desired {
        objects: stage.rendered.objects,
        render_ref: stage.rendered.render_ref,
        target: stage.target,
    })
}

/// What one pass of the drift loop did.
#[derive(Debug, Clone, PartialEq)]
pub struct DriftPass {
    pub verdict: Verdict,
    pub report: Option<DiffReport>,
    pub wrote: bool,
    pub requested_sync: bool,
    pub requeue: Requeue,
    /// The source is still being fetched: nothing was checked, and the daemon comes back for
    /// the Release when this ends.
    pub fetching: Option<crate::engine::source::coordinator::FetchWait>,
}

/// Errors the drift loop returns to the work queue (only writes fail a pass).
#[derive(Debug, thiserror::Error)]
pub enum DriftError {
    #[error("cannot write InSync of Release {release}")]
    Write {
        release: String,
        #[source]
        source: Box<kube::Error>,
    },
    #[error("cannot request a sync of Release {release}")]
    Request {
        release: String,
        #[source]
        source: Box<kube::Error>,
    },
}

impl crate::engine::error::Categorized for DriftError {
    fn category(&self) -> crate::engine::error::Category {
        match self {
            DriftError::Write { source, .. } | DriftError::Request { source, .. } => {
                crate::engine::error::kube_category(source)
            }
        }
    }
}

/// The drift loop's syncHandler: render, diff, write InSync, request a sync on drift in
/// automatic mode, requeue after the interval. Returns `None` for a Release being deleted, on
/// another shard, or in automatic mode not yet attempted by the controller.
pub async fn drift_pass(ctx: &Context, release: &Release) -> Result<Option<DriftPass>, DriftError> {
    if release.metadata.deletion_timestamp.is_some() || !ctx.shard.owns(release) {
        return Ok(None);
    }
    let automatic = release.spec.sync_mode() == SyncMode::Automatic;
    // Deviation: in automatic mode the first drift check waits for the controller's first
    // attempt (its status write wakes this loop). Until then everything is "to create" and
    // the controller is about to apply it; checking costs a GET and a dry run per object.
    if automatic
        && release
            .status
            .as_ref()
            .is_none_or(|s| s.last_attempted.is_none())
    {
        return Ok(None);
    }
    let name = ReleaseId::of(release).to_string();
    // Steps 1 and 2: renderDesired, diffObjects.
    let (verdict, report) = match determine_drift(ctx, release).await {
        Ok(found) => found,
        // Not a verdict: InSync stays as it is until the fetch has ended.
        Err(wait) => {
            return Ok(Some(DriftPass {
                verdict: Verdict::Unknown {
                    message: "the source is still being fetched".into(),
                },
                report: None,
                wrote: false,
                requested_sync: false,
                requeue: Requeue::Never,
                fetching: Some(wait),
            }));
        }
    };
    // The shard may have lapsed during the render and diff: another replica may own the
    // Release now, so this one writes nothing (checked again before the /sync below).
    if !ctx.shard.owns(release) {
        tracing::warn!(release = %name, "the shard lapsed during the drift pass; InSync is not written");
        return Ok(None);
    }
    // Step 3: writeInSync.
    let api: Api<Release> = Api::namespaced(
        ctx.home.client.clone(),
        &release.namespace().unwrap_or_default(),
    );
    let condition = in_sync_condition(&verdict, release.metadata.generation);
    let wrote = write_in_sync(&api, release, condition, now())
        .await
        .map_err(|source| DriftError::Write {
            release: name.clone(),
            source: Box::new(source),
        })?;
    // Step 4: requestSync. Before the first apply there is no drift to fix: the controller
    // owns the first sync (and retries it with its own backoff), so the pass neither asks
    // for one nor comes back early; the inventory the apply writes wakes it. (Deviation: the
    // spec asks on every OutOfSync verdict; at a thousand new Releases that doubled the
    // controller's work.)
    let applied_before = release
        .status
        .as_ref()
        .is_some_and(|s| s.last_successful.is_some());
    let out_of_sync = matches!(verdict, Verdict::OutOfSync { .. });
    let requested_sync = automatic && applied_before && out_of_sync;
    if requested_sync && !ctx.shard.owns(release) {
        tracing::warn!(release = %name, "the shard lapsed during the drift pass; no sync is requested");
        return Ok(None);
    }
    if requested_sync {
        request_sync(&api, &release.name_any(), false)
            .await
            .map_err(|source| DriftError::Request {
                release: name,
                source: Box::new(source),
            })?;
    }
    // Step 5: scheduleRecheck. Drift that was reported (and, in automatic mode, sent to the
    // controller) is checked again soon, so InSync turns True once the controller put things
    // back.
    let requeue = match (out_of_sync && applied_before, schedule_recheck(release)) {
        (true, Requeue::After(d) | Requeue::Interval(d)) => Requeue::After(d.min(DRIFT_RECHECK)),
        (true, _) => Requeue::After(DRIFT_RECHECK),
        (false, requeue) => requeue,
    };
    Ok(Some(DriftPass {
        verdict,
        report,
        wrote,
        requested_sync,
        requeue,
        fetching: None,
    }))
}

/// Steps 1 and 2: render what should run and compare it with the cluster (the inventory,
/// read while the render runs, says what would be pruned). Whatever stops it makes the
/// verdict Unknown, with the reason; a fetch still running in the background gives none.
async fn determine_drift(
    ctx: &Context,
    release: &Release,
) -> Result<(Verdict, Option<DiffReport>), crate::engine::source::coordinator::FetchWait> {
    let unknown = |message: String| Ok((Verdict::Unknown { message }, None));
    let handle = InventoryHandle::for_release(ctx.home.client.clone(), release);
    let (desired, inventory) = futures::join!(
        render_desired(ctx, release),
        handle.get_cached(ctx.listers(), release)
    );
    let desired = match desired {
        Ok(desired) => desired,
        Err(outcome) => {
            if let Some(wait) = outcome.fetching.clone() {
                return Err(wait);
            }
            return unknown(format!(
                "cannot render: {}: {}",
                outcome.reason, outcome.message
            ));
        }
    };
    let cannot_read = |e: crate::engine::inventory::InventoryError| {
        unknown(format!(
            "cannot read the inventory: {}",
            crate::engine::error::chain(&e)
        ))
    };
    let inventory = match inventory {
        Ok(inventory) => inventory,
        Err(e) => return cannot_read(e),
    };
    let applier = ctx.applier(&desired.target);
    let digest_key = Some(ctx.inventory_digest_key().await);
    let diff = |inventory: Option<ReleaseInventory>, freshness| {
        let (applier, desired, digest_key) = (&applier, &desired, &digest_key);
        async move {
            diff_objects(
                applier,
                release,
                &desired.objects,
                inventory.as_ref(),
                ctx.concurrency,
                digest_key.as_ref(),
                freshness,
            )
            .await
        }
    };
    let first_read = crate::engine::exclusions::drift_reads(release, ctx.observer_reads);
    let mut compared = diff(inventory, first_read).await;
    // Drift seen in the caches is confirmed on the latest state (the live objects and the
    // inventory) before it is reported (and, in automatic mode, sent to the controller): a
    // cache a moment behind an apply or a prune would report it as drift.
    let drifted = compared
        .as_ref()
        .is_ok_and(|r| matches!(verdict(r), Verdict::OutOfSync { .. }));
    if drifted && ctx.observer_reads != crate::engine::apply::Freshness::Latest {
        let inventory = match handle.get().await {
            Ok(inventory) => inventory,
            Err(e) => return cannot_read(e),
        };
        compared = diff(inventory, crate::engine::apply::Freshness::Latest).await;
    }
    match compared {
        Ok(report) => Ok((verdict(&report), Some(report))),
        Err(e) => unknown(format!(
            "cannot compare with the cluster: {}",
            crate::engine::error::chain(&e)
        )),
    }
}

/// How soon drift is checked again while the Release is out of sync.
pub const DRIFT_RECHECK: std::time::Duration = std::time::Duration::from_secs(10);

/// `scheduleRecheck`: the next pass after `syncPolicy.interval`, if set.
pub fn schedule_recheck(release: &Release) -> Requeue {
    release
        .spec
        .interval()
        .map(Requeue::Interval)
        .unwrap_or(Requeue::Never)
}

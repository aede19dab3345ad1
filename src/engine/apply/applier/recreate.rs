//! Re-creating an object the server will not change in place (an immutable field: a Job's
//! template, a Deployment's selector, a StatefulSet's volumeClaimTemplates), where the render
//! asks for it as Flux and Argo CD read it: `kustomize.toolkit.fluxcd.io/force: enabled`, or
//! `argocd.argoproj.io/sync-options` holding `Force=true`. Without that, such a change stops
//! the sync at the dry-run gate, as before; with it, the gate lets it through, `convoy diff`
//! shows it to re-create, and the apply deletes the live object and applies the render again.
//!
//! What keeps a delete from losing an object (kubectl's and Flux's `--force` take any refused
//! patch for an immutable one, and delete first): only a refusal as invalid (422) counts, the
//! object must be valid as a new one (a dry-run create of it, whose "already exists" comes only
//! after validation and admission), and the live object must carry this Release's labels
//! (never another's or kubectl's); the delete is preconditioned on the uid read.

use std::time::Duration;

use kube::Api;
use kube::api::{DeleteParams, DynamicObject, PostParams, Preconditions, PropagationPolicy};
use serde_json::Value;

use super::{Applier, ApplyError, Prepared, Rejection, api_message, is_not_found};
use crate::engine::api::{ObjectKey, field_managers, labels};
use crate::engine::connect::is_unreachable;
use crate::engine::sync_options;

const FLUX_FORCE: &str = "kustomize.toolkit.fluxcd.io/force";

/// The kinds convoy deletes to re-create, as (group, kind): built-in ones whose deletion takes
/// nothing with it but what the new object makes again (a Job's or a Deployment's Pods). Not
/// a custom resource (an operator's finalizer may take a database or a cluster with it), a
/// CRD or a Namespace (everything they hold), a volume or its claim (the data), a CronJob (its
/// running Jobs); a StatefulSet only while its claims outlive it (left to the new one,
/// [`orphans_dependents`], or kept by its retention policy, [`claims_outlive_it`]).
/// Flux and Argo CD re-create any kind they are told to.
const RECREATED: [(&str, &str); 12] = [
    ("", "ConfigMap"),
    ("", "Secret"),
    ("", "Service"),
    ("", "Pod"),
    ("batch", "Job"),
    ("apps", "Deployment"),
    ("apps", "DaemonSet"),
    ("apps", "ReplicaSet"),
    ("apps", "StatefulSet"),
    ("policy", "PodDisruptionBudget"),
    ("rbac.authorization.k8s.io", "RoleBinding"),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
];

/// Whether a StatefulSet's claims stay when it is deleted (the default): the new one takes
/// them up again by name. With `whenDeleted: Delete` they would go, and their data.
fn claims_outlive_it(live: &DynamicObject) -> bool {
    live.data["spec"]["persistentVolumeClaimRetentionPolicy"]["whenDeleted"]
        .as_str()
        .is_none_or(|policy| policy == "Retain")
}

/// Whether deleting `live` to re-create it as `prepared` leaves its dependents to the new
/// object, as `kubectl delete --cascade=orphan` before a re-apply does: a StatefulSet whose
/// selector and `serviceName` the render keeps. Its Pods keep running (a database re-created for a new
/// `volumeClaimTemplates` stays up) and so do its claims, whatever its retention policy says;
/// the new StatefulSet takes them up by its selector and rolls them as its `updateStrategy`
/// says. Any other object, and a StatefulSet whose selector changes (Pods the new one would
/// not take up, holding the names it creates) or whose `serviceName` does, goes with its
/// dependents, as Flux's engine
/// deletes every object it re-creates (background propagation).
pub(super) fn orphans_dependents(prepared: &Prepared, live: &DynamicObject) -> bool {
    let same = |field: &str| {
        let live = &live.data["spec"][field];
        !live.is_null() && *live == prepared.body["spec"][field]
    };
    // A new `serviceName` would leave the kept Pods under the old Service's DNS names: the
    // new StatefulSet finds them current and never replaces them (found by a review).
    prepared.resource.api.group == "apps"
        && prepared.resource.api.kind == "StatefulSet"
        && same("selector")
        && same("serviceName")
}

/// How long a re-create waits for the deleted object to be gone (its finalizers to run).
const GONE_WITHIN: Duration = Duration::from_secs(60);

/// The annotation, as it reads, by which `body` asks to be re-created when it cannot be
/// changed in place; `None` when it does not ask.
fn recreate_policy(body: &Value) -> Option<String> {
    // Flux reads its annotation, or a label of that name, in any case.
    for place in ["annotations", "labels"] {
        if let Some(value) = body["metadata"][place][FLUX_FORCE].as_str()
            && value.eq_ignore_ascii_case("enabled")
        {
            return Some(format!("{FLUX_FORCE}: {value}"));
        }
    }
    sync_options::options(body)
        .any(|option| option == ("Force", "true"))
        .then(|| format!("{}: Force=true", sync_options::ARGO_SYNC_OPTIONS))
}

/// A refusal of the object as invalid for what its body holds, as an immutable field gets one:
/// 422, each cause naming a field outside `metadata`, and not an admission policy's (a webhook
/// or a ValidatingAdmissionPolicy that refuses an update, "replicas may not decrease", would
/// let the create through: the re-create would go round the policy). A cause in `metadata` (a
/// stale `uid` copied from `kubectl get -o yaml`) would be refused by the apply after a delete
/// too: the dry-run create, which ignores it, said yes, and the object was lost (found by a
/// review).
fn is_invalid(e: &kube::Error) -> bool {
    let kube::Error::Api(status) = e else {
        return false;
    };
    let causes = causes(status);
    let by_admission = status.message.starts_with("admission webhook")
        || status.message.contains("ValidatingAdmissionPolicy");
    status.code == 422
        && !by_admission
        && !causes.is_empty()
        && causes
            .iter()
            .all(|c| !c.field.is_empty() && !c.field.starts_with("metadata"))
}

/// The fields a refusal names, with what it says of each.
fn causes(status: &kube::core::Status) -> &[kube::core::response::StatusCause] {
    status
        .details
        .as_ref()
        .map(|d| d.causes.as_slice())
        .unwrap_or_default()
}

/// The refusal in short: each cause's field and the end of its message (the server quotes a
/// Job's whole template, Go field names and all, before "field is immutable").
pub(super) fn in_short(e: &kube::Error) -> String {
    let kube::Error::Api(status) = e else {
        return api_message(e);
    };
    let causes = causes(status);
    if causes.is_empty() {
        return api_message(e);
    }
    causes
        .iter()
        .map(|c| {
            // The first line only: a Pod's refusal goes on with a diff of its spec (env
            // values and all).
            let first = c.message.lines().next().unwrap_or_default();
            let end = first.rsplit(": ").next().unwrap_or_default();
            format!("{}: {end}", c.field)
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The message of a refusal that no re-create was asked for: the server's, and, for a change
/// it will not make in place to a kind convoy re-creates, how to ask for one (a user of Flux or
/// Argo CD knows the annotation; one of convoy did not learn it from the refusal).
pub(super) fn refusal_message(prepared: &Prepared, refused: &kube::Error) -> String {
    let message = api_message(refused);
    let api = &prepared.resource.api;
    let immutable = |status: &kube::core::Status| {
        causes(status)
            .iter()
            .any(|c| c.message.contains("immutable") || c.message.contains("updates to"))
    };
    match refused {
        kube::Error::Api(status)
            if is_invalid(refused)
                && immutable(status)
                && RECREATED.contains(&(api.group.as_str(), api.kind.as_str())) =>
        {
            format!(
                "{message} (the server will not change this in place: annotate the object {FLUX_FORCE}: enabled, or {}: Force=true, to have convoy re-create it)",
                sync_options::ARGO_SYNC_OPTIONS
            )
        }
        _ => message,
    }
}

fn is_code(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

impl Applier {
    /// Whether a refusal `refused` of `prepared` would be a re-create instead, and why: the
    /// render asks for one and the refusal is one an immutable field gets.
    pub(super) fn recreates(prepared: &Prepared, refused: &kube::Error) -> Option<String> {
        is_invalid(refused)
            .then(|| recreate_policy(&prepared.body))
            .flatten()
    }

    /// A dry-run create of `prepared` under a generated name: the object as the server would
    /// create it (defaults, admission), named as rendered; or why it is not valid as new.
    async fn dry_run_as_new(&self, prepared: &Prepared) -> Result<DynamicObject, kube::Error> {
        let mut body = prepared.body.clone();
        if let Some(meta) = body["metadata"].as_object_mut() {
            meta.remove("name");
            meta.insert(
                "generateName".into(),
                Value::String(format!("{}-", prepared.name)),
            );
        }
        let object: DynamicObject =
            serde_json::from_value(body).map_err(kube::Error::SerdeError)?;
        let created = self
            .api_for(prepared)
            .create(&dry_run_create(), &object)
            .await?;
        // Named as rendered wherever the server wrote the generated name (a Job's
        // `job-name` labels too); it is unique, so nothing else reads the same.
        let Some(generated) = created.metadata.name.clone().filter(|n| !n.is_empty()) else {
            return Ok(created);
        };
        let text = serde_json::to_string(&created).map_err(kube::Error::SerdeError)?;
        let mut created: DynamicObject = serde_json::from_str(&text.replace(
            &format!("\"{generated}\""),
            &format!("\"{}\"", prepared.name),
        ))
        .map_err(kube::Error::SerdeError)?;
        created.metadata.generate_name = None;
        Ok(created)
    }

    /// Whether `prepared`, refused in place (`refused`) with a re-create asked for (`why`),
    /// can be re-created: the object as it would be created, and the live object to delete
    /// (`None`: gone meanwhile); or the refusal, saying why not.
    pub(super) async fn recreate_check(
        &self,
        prepared: &Prepared,
        refused: &kube::Error,
        why: &str,
    ) -> Result<Result<(DynamicObject, Option<DynamicObject>), Rejection>, ApplyError> {
        let refusal = |detail: String| Ok(Err(not_recreated(prepared, refused, why, &detail)));
        let (group, kind) = (&prepared.resource.api.group, &prepared.resource.api.kind);
        if !RECREATED.contains(&(group.as_str(), kind.as_str())) {
            return refusal(format!(
                "convoy re-creates only built-in kinds whose deletion takes nothing else with it, not a {kind}; delete it by hand and sync"
            ));
        }
        // What the server keeps of an object, copied into the render, that a create after the
        // delete could refuse where the dry runs do not.
        if let Some(field) = ["uid", "resourceVersion", "creationTimestamp"]
            .iter()
            .find(|f| !prepared.body["metadata"][**f].is_null())
        {
            return refusal(format!(
                "the render sets metadata.{field}; leave it to the server"
            ));
        }
        let new = match self.dry_run_as_new(prepared).await {
            Ok(new) => new,
            Err(e) if is_unreachable(&e) => return Err(ApplyError::Unreachable(Box::new(e))),
            Err(e) => {
                return refusal(format!(
                    "it would not be valid as a new object either: {}",
                    api_message(&e)
                ));
            }
        };
        let live = match self.api_for(prepared).get_opt(&prepared.name).await {
            Ok(live) => live,
            Err(e) if is_unreachable(&e) => return Err(ApplyError::Unreachable(Box::new(e))),
            Err(e) => return refusal(format!("cannot read it: {}", api_message(&e))),
        };
        if let Some(live) = &live {
            // Deleted already, and waiting on finalizers: waiting again at every sync would
            // hold the wave a minute each time.
            if live.metadata.deletion_timestamp.is_some() {
                let finalizers = live.metadata.finalizers.clone().unwrap_or_default();
                return refusal(format!(
                    "it is being deleted, waiting on its finalizers ({}); a sync creates it once it is gone",
                    finalizers.join(", ")
                ));
            }
            // An operator's finalizer runs what the deletion means to it.
            if let Some(finalizers) = live.metadata.finalizers.as_ref().filter(|f| !f.is_empty()) {
                return refusal(format!(
                    "it has finalizers ({}), which a deletion would run",
                    finalizers.join(", ")
                ));
            }
            if kind == "StatefulSet" && !claims_outlive_it(live) {
                return refusal(
                    "its persistentVolumeClaimRetentionPolicy deletes its claims with it, and their data".into(),
                );
            }
            let ours = |name: &str| {
                prepared.body["metadata"]["labels"][name].as_str()
                    == live
                        .metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(name))
                        .map(String::as_str)
            };
            if !(ours(labels::RELEASE_NAME) && ours(labels::RELEASE_NAMESPACE)) {
                return refusal(
                    "the live object does not carry this Release's labels, and convoy deletes only its own".into(),
                );
            }
        }
        Ok(Ok((new, live)))
    }

    /// The apply of `prepared` was refused (`refused`) and the render asks for a re-create
    /// (`why`): delete the live object, wait until it is gone, apply again. Applied: its key,
    /// and whether a live object was deleted for it.
    pub(super) async fn recreate(
        &self,
        prepared: &Prepared,
        refused: kube::Error,
        why: &str,
    ) -> Result<Result<(ObjectKey, bool), Rejection>, ApplyError> {
        let live = match self.recreate_check(prepared, &refused, why).await? {
            Ok((_, live)) => live,
            Err(rejection) => return Ok(Err(rejection)),
        };
        let api = self.api_for(prepared);
        let refusal = |detail: String| Ok(Err(not_recreated(prepared, &refused, why, &detail)));
        let unreachable = |e: kube::Error| Err(ApplyError::Unreachable(Box::new(e)));
        let deleted = live.is_some();
        if let Some(live) = live {
            // Valid under its own name too (validation and admission pass before the server
            // finds the name taken): nothing is deleted that cannot be created again.
            let object: DynamicObject = match serde_json::from_value(prepared.body.clone()) {
                Ok(object) => object,
                Err(e) => return refusal(e.to_string()),
            };
            match api.create(&dry_run_create(), &object).await {
                Err(e) if is_code(&e, 409) => {}
                Err(e) if is_unreachable(&e) => return unreachable(e),
                Err(e) => {
                    return refusal(format!(
                        "it would not be valid as a new object either: {}",
                        api_message(&e)
                    ));
                }
                Ok(_) => {}
            }
            // The object whose labels were checked, unchanged since: not one another Release
            // adopted meanwhile.
            let uid = live.metadata.uid.clone().unwrap_or_default();
            let orphans = orphans_dependents(prepared, &live);
            let params = DeleteParams {
                propagation_policy: Some(if orphans {
                    PropagationPolicy::Orphan
                } else {
                    PropagationPolicy::Background
                }),
                preconditions: Some(Preconditions {
                    uid: Some(uid.clone()),
                    resource_version: live.metadata.resource_version.clone(),
                }),
                ..Default::default()
            };
            match api.delete(&prepared.name, &params).await {
                Ok(_) => {}
                Err(e) if is_not_found(&e) => {}
                Err(e) if is_unreachable(&e) => return unreachable(e),
                Err(e) if is_code(&e, 409) => {
                    return refusal(
                        "it changed since it was read, so it was not deleted; the next sync looks again".into(),
                    );
                }
                Err(e) => return refusal(format!("cannot delete it: {}", api_message(&e))),
            }
            if let Err(detail) = gone(&api, &prepared.name, &uid).await {
                return refusal(detail);
            }
            tracing::info!(object = %prepared.key, %why, orphans, "deleted to re-create: {}", in_short(&refused));
        }
        match self.send(prepared, false).await {
            Ok(_) => Ok(Ok((prepared.key.clone(), deleted))),
            Err(e) if is_unreachable(&e) => unreachable(e),
            Err(e) if deleted => Ok(Err(Rejection {
                key: prepared.key.clone(),
                message: format!(
                    "deleted to re-create, as {why} asks, and the apply was then refused: {}",
                    api_message(&e)
                ),
            })),
            Err(e) => Ok(Err(Rejection {
                key: prepared.key.clone(),
                message: api_message(&e),
            })),
        }
    }
}

/// The refusal of `prepared`'s apply (`refused`), not re-created though `why` asks, because
/// of `detail`.
fn not_recreated(prepared: &Prepared, refused: &kube::Error, why: &str, detail: &str) -> Rejection {
    Rejection {
        key: prepared.key.clone(),
        message: format!(
            "{}; not re-created, though {why} asks: {detail}",
            in_short(refused)
        ),
    }
}

/// A dry-run create under the controller's field manager.
fn dry_run_create() -> PostParams {
    PostParams {
        dry_run: true,
        field_manager: Some(field_managers::CONTROLLER.to_string()),
    }
}

/// Wait (bounded) until the object `name` of `uid` is gone; why not, naming its finalizers.
async fn gone(api: &Api<DynamicObject>, name: &str, uid: &str) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + GONE_WITHIN;
    let mut pause = Duration::from_millis(50);
    loop {
        let still = match api.get_opt(name).await {
            Ok(Some(o)) if o.metadata.uid.as_deref() == Some(uid) => o,
            Ok(_) => return Ok(()),
            Err(e) => {
                return Err(format!(
                    "cannot tell whether it is gone: {}",
                    api_message(&e)
                ));
            }
        };
        if tokio::time::Instant::now() >= deadline {
            let finalizers = still.metadata.finalizers.unwrap_or_default().join(", ");
            return Err(format!(
                "deleted, but still there after {}s (finalizers: {finalizers}); the next sync creates it once it is gone",
                GONE_WITHIN.as_secs()
            ));
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn flux_and_argo_cd_ask_for_a_re_create_each_in_its_own_words() {
        let with = |annotations: Value| json!({"metadata": {"annotations": annotations}});
        assert_eq!(
            recreate_policy(&with(json!({FLUX_FORCE: "enabled"}))).as_deref(),
            Some("kustomize.toolkit.fluxcd.io/force: enabled")
        );
        assert_eq!(
            recreate_policy(&with(
                json!({"argocd.argoproj.io/sync-options": "Replace=true, Force=true"})
            ))
            .as_deref(),
            Some("argocd.argoproj.io/sync-options: Force=true")
        );
        assert_eq!(
            recreate_policy(&json!({"metadata": {"labels": {FLUX_FORCE: "Enabled"}}})).as_deref(),
            Some("kustomize.toolkit.fluxcd.io/force: Enabled")
        );
        for no in [
            json!({FLUX_FORCE: "disabled"}),
            json!({FLUX_FORCE: " enabled"}),
            json!({"argocd.argoproj.io/sync-options": "Force=false"}),
            json!({"argocd.argoproj.io/sync-options": "Replace=true"}),
            json!({"example.com/force": "enabled"}),
        ] {
            assert_eq!(recreate_policy(&with(no.clone())), None, "{no}");
        }
        assert_eq!(recreate_policy(&json!({"metadata": {}})), None);
    }
}

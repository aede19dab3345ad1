//! Lifecycle hooks: where their workloads run and how their state is read.
//!
//! Spec: health-loop.txt "Hook polling"; DESIGN.md "pollHookWorkload". A hook's workload is a
//! Job (or a Pod) in the target cluster, in the Release's target namespace.

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{DeleteParams, ListParams, Preconditions, PropagationPolicy};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::engine::api::{
    Hook, HookEntry, HookPhase, HookState, Release, ReleaseId, field_managers,
};

/// Labels on every hook workload: which Release, hook and phase it belongs to. Prune never
/// touches them (hooks are not inventory members); hook GC finds them by these.
pub mod labels {
    pub const RELEASE: &str = "convoy.kumodo.io/release";
    pub const RELEASE_NAMESPACE: &str = "convoy.kumodo.io/release-namespace";
    pub const HOOK: &str = "convoy.kumodo.io/hook";
    pub const PHASE: &str = "convoy.kumodo.io/hook-phase";
}

/// Why a content hook could not be armed or deleted.
#[derive(Debug, thiserror::Error)]
pub enum HookError {
    #[error("the cluster does not serve {kind}")]
    NotServed { kind: String },
    #[error("cannot find the kind of {kind}")]
    Kind {
        kind: String,
        #[source]
        source: crate::engine::apply::resources::ResolveKindError,
    },
    /// An object of the hook's name that no hook of this Release created: convoy does not
    /// delete it to make room (it may be another Release's, or anyone's).
    #[error(
        "{kind} {name} exists and is not a hook of this Release: convoy does not replace it (delete or rename it, or rename the hook)"
    )]
    Taken { kind: String, name: String },
    /// The API server's own words, as `kubectl` prints them.
    #[error(
        "cannot {action} {name}: {}",
        crate::engine::apply::applier::api_message(error)
    )]
    Api {
        action: &'static str,
        name: String,
        error: kube::Error,
    },
}

impl crate::engine::error::Categorized for HookError {
    fn category(&self) -> crate::engine::error::Category {
        match self {
            HookError::NotServed { .. } | HookError::Taken { .. } => {
                crate::engine::error::Category::Invalid
            }
            HookError::Kind { source, .. } => match source {
                crate::engine::apply::resources::ResolveKindError::Discovery { source, .. } => {
                    crate::engine::error::kube_category(source)
                }
                _ => crate::engine::error::Category::Invalid,
            },
            HookError::Api { error, .. } => crate::engine::error::kube_category(error),
        }
    }
}

fn api_error(action: &'static str, name: &str) -> impl FnOnce(kube::Error) -> HookError {
    let name = name.to_string();
    move |error| HookError::Api {
        action,
        name,
        error,
    }
}

/// A hook's timeout when it names none.
pub const DEFAULT_HOOK_TIMEOUT: Duration = Duration::from_secs(600);

/// The namespace hook workloads run in: `spec.targetNamespace`, else the Release's own. A
/// target that is no namespace name never ran a hook (the render refuses it), so nothing of
/// the Release is there: the Release's own is read instead of a path the value would make.
pub fn workload_namespace(release: &Release) -> String {
    release
        .spec
        .target_namespace
        .clone()
        .filter(|t| crate::engine::render::object::namespace_trouble(t).is_none())
        .unwrap_or_else(|| release.metadata.namespace.clone().unwrap_or_default())
}

/// The hook of `release` with this name and phase.
pub fn find_hook<'a>(release: &'a Release, name: &str, phase: HookPhase) -> Option<&'a Hook> {
    release
        .spec
        .lifecycle
        .as_ref()?
        .hooks
        .iter()
        .find(|h| h.name == name && h.phase == phase)
}

/// A hook's timeout.
pub fn hook_timeout(hook: Option<&Hook>) -> Duration {
    hook.and_then(|h| h.timeout.as_ref())
        .map(|d| d.get())
        .unwrap_or(DEFAULT_HOOK_TIMEOUT)
}

/// Whether `name` can name a lifecycle hook: not empty, no `/` ([`check_names`]).
pub fn is_lifecycle_name(name: &str) -> bool {
    !name.is_empty() && !name.contains('/')
}

/// Check the lifecycle hooks' names (stageRender, with the render's other checks): each is
/// non-empty, holds no `/` and is used once per phase. The inventory keys hook entries by
/// name and phase, and an entry named `Kind/namespace/name` is a content hook's, whose object
/// is polled and deleted with the Release: a lifecycle hook named like one would point convoy
/// at an object of the author's choosing, and two hooks of one name and phase would share one
/// entry.
pub fn check_names(release: &Release) -> Result<(), crate::engine::error::Invalid> {
    let hooks = release.spec.lifecycle.as_ref().map(|l| l.hooks.as_slice());
    let mut seen = std::collections::BTreeSet::new();
    for hook in hooks.unwrap_or_default() {
        let problem = if hook.name.is_empty() {
            "is empty"
        } else if hook.name.contains('/') {
            "holds a '/' (names like Kind/namespace/name are content hooks')"
        } else if !seen.insert((hook.name.as_str(), hook.phase)) {
            "is used by two hooks of one phase"
        } else {
            continue;
        };
        return Err(crate::engine::error::Invalid(format!(
            "spec.lifecycle.hooks: the hook name {:?} {problem}; give each hook of a phase its own name without '/'",
            hook.name
        )));
    }
    Ok(())
}

/// Whether a hook entry needs polling: it has a workload and either never finished, or was
/// armed again after it finished.
pub fn needs_poll(entry: &HookEntry) -> bool {
    entry.workload_name.is_some()
        && match (&entry.finished_at, &entry.created_at) {
            (None, _) => true,
            (Some(finished), Some(created)) => created.0 > finished.0,
            (Some(_), None) => false,
        }
}

/// The workload name of `hook` for `render_ref`: the Release, the hook and a short hash of the
/// render and the hook's own spec, so a new render or an edited hook arms a new workload and
/// a re-sync of the same render finds the one it armed. At most 63 characters.
pub fn workload_name(release: &Release, hook: &Hook, render_ref: &str) -> String {
    let mut hasher = Sha256::new();
    hasher.update(render_ref.as_bytes());
    hasher.update(serde_json::to_vec(hook).unwrap_or_default());
    let digest = hex::encode(&hasher.finalize()[..4]);
    let base = format!(
        "{}-{}",
        release.metadata.name.as_deref().unwrap_or_default(),
        hook.name
    );
    let mut base: String = base
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    base.truncate(63 - digest.len() - 1);
    format!("{}-{digest}", base.trim_end_matches('-'))
}

/// The hook's workload object (a Job, or a Pod for a `pod` hook): the hook's spec with
/// `restartPolicy: Never` and, for a Job, `backoffLimit: 0` unless the hook says otherwise
/// (a hook reports one outcome; retries belong in the hook's own spec).
pub fn workload_object(release: &Release, hook: &Hook, name: &str, namespace: &str) -> Value {
    let labels = json!({
        labels::RELEASE: release.metadata.name.as_deref().unwrap_or_default(),
        labels::RELEASE_NAMESPACE: release.metadata.namespace.as_deref().unwrap_or_default(),
        labels::HOOK: hook.name,
        labels::PHASE: hook.phase.as_str(),
    });
    let metadata = json!({"name": name, "namespace": namespace, "labels": labels});
    if let (Some(pod), None) = (&hook.pod, &hook.job) {
        let mut spec = pod.clone();
        if spec.get("restartPolicy").is_none() {
            spec["restartPolicy"] = json!("Never");
        }
        return json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec});
    }
    let mut spec = hook.job.clone().unwrap_or_else(|| json!({}));
    if spec.get("backoffLimit").is_none() {
        spec["backoffLimit"] = json!(0);
    }
    let template = &mut spec["template"];
    if template
        .get("spec")
        .and_then(|s| s.get("restartPolicy"))
        .is_none()
    {
        template["spec"]["restartPolicy"] = json!("Never");
    }
    // The pods carry the hook labels too, next to the template's own.
    if let Some(map) = labels.as_object() {
        for (k, v) in map {
            template["metadata"]["labels"][k] = v.clone();
        }
    }
    json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": spec})
}

/// Create (or find) the hook's workload with SSA under the controller's manager.
pub async fn arm_workload(
    client: &Client,
    release: &Release,
    hook: &Hook,
    name: &str,
    namespace: &str,
) -> Result<(), kube::Error> {
    let object = workload_object(release, hook, name, namespace);
    if object["kind"] == "Pod" {
        let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
        if api.get_opt(name).await?.is_none() {
            crate::engine::ssa::apply(&api, name, field_managers::CONTROLLER, &object).await?;
        }
    } else {
        let api: Api<Job> = Api::namespaced(client.clone(), namespace);
        if api.get_opt(name).await?.is_none() {
            crate::engine::ssa::apply(&api, name, field_managers::CONTROLLER, &object).await?;
        }
    }
    Ok(())
}

/// Hook GC: delete the finished Jobs of `hook` except `current` and the newest other one
/// (kept for inspection). Running Jobs are left alone.
pub async fn collect_old_jobs(
    client: &Client,
    release: &Release,
    hook: &Hook,
    namespace: &str,
    current: &str,
) -> Result<usize, kube::Error> {
    let api: Api<Job> = Api::namespaced(client.clone(), namespace);
    let selector = format!(
        "{}={},{}={},{}={}",
        labels::RELEASE,
        release.metadata.name.as_deref().unwrap_or_default(),
        labels::HOOK,
        hook.name,
        labels::PHASE,
        hook.phase.as_str()
    );
    let mut jobs: Vec<Job> = api
        .list(&ListParams::default().labels(&selector))
        .await?
        .items
        .into_iter()
        .filter(|j| {
            j.labels()
                .get(labels::RELEASE_NAMESPACE)
                .map(String::as_str)
                == release.metadata.namespace.as_deref()
        })
        .filter(|j| j.name_any() != current)
        .collect();
    jobs.sort_by_key(|j| j.metadata.creation_timestamp.as_ref().map(|t| t.0));
    jobs.pop();
    let finished = |j: &Job| {
        j.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
            })
    };
    let params = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        ..Default::default()
    };
    let mut deleted = 0;
    for job in jobs.iter().filter(|j| finished(j)) {
        match api.delete(&job.name_any(), &params).await {
            Ok(_) => deleted += 1,
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(deleted)
}

/// Deletion: remove every hook workload of `release` (Jobs, and bare Pods of Pod hooks) once
/// the delete hooks are done; prune never takes them, so nothing else would.
pub async fn delete_hook_workloads(
    client: &Client,
    release: &Release,
    namespace: &str,
) -> Result<usize, kube::Error> {
    // Only hook workloads: they carry the hook label besides the Release's.
    let selector = format!(
        "{}={},{}={},{}",
        labels::RELEASE,
        release.metadata.name.as_deref().unwrap_or_default(),
        labels::RELEASE_NAMESPACE,
        release.metadata.namespace.as_deref().unwrap_or_default(),
        labels::HOOK,
    );
    let list = ListParams::default().labels(&selector);
    let params = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        ..Default::default()
    };
    let ignore_gone = |r: Result<(), kube::Error>| match r {
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        other => other,
    };
    let jobs: Api<Job> = Api::namespaced(client.clone(), namespace);
    let mut deleted = 0;
    for job in jobs.list(&list).await?.items {
        ignore_gone(jobs.delete(&job.name_any(), &params).await.map(|_| ()))?;
        deleted += 1;
    }
    // A Job's pods carry the labels too; the Job's deletion takes those.
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    for pod in pods.list(&list).await?.items {
        if pod.owner_references().is_empty() {
            ignore_gone(pods.delete(&pod.name_any(), &params).await.map(|_| ()))?;
            deleted += 1;
        }
    }
    Ok(deleted)
}

/// The state of an armed entry as the controller reads it: the health loop's state only
/// counts once it is about this arming (finishedAt not before createdAt); until then the
/// hook is Running.
pub fn effective_state(entry: &HookEntry) -> HookState {
    match (entry.state, &entry.finished_at, &entry.created_at) {
        (Some(state), Some(finished), Some(created)) if finished.0 >= created.0 => state,
        (Some(state), Some(_), None) => state,
        _ => HookState::Running,
    }
}

/// How a hook entry reads in a table: its effective state, how long it ran (or runs), and
/// its message when the message is about this arming.
pub fn describe(entry: &HookEntry, now: jiff::Timestamp) -> (HookState, Option<Duration>, String) {
    let state = effective_state(entry);
    let current = entry.state == Some(state);
    let seconds =
        |from: &Time, to: i64| Duration::from_secs((to - from.0.as_second()).max(0) as u64);
    let duration = match (&entry.created_at, &entry.finished_at) {
        (Some(c), Some(f)) if current && state != HookState::Running => {
            Some(seconds(c, f.0.as_second()))
        }
        (Some(c), _) => Some(seconds(c, now.as_second())),
        _ => None,
    };
    let message = if current {
        entry.message.clone().unwrap_or_default()
    } else {
        String::new()
    };
    (state, duration, message)
}

/// Finalizer on the Jobs and Pods of content hooks (engine::content_hooks): a TTL or anyone
/// else deleting a finished hook Job cannot take its outcome with it before convoy read it.
/// The poller removes it once it has read a final state; convoy's own deletions remove it
/// first.
pub const HOOK_FINALIZER: &str = "convoy.kumodo.io/hook-state";
/// Label on a content hook object: the render it was armed for (first 12 hex digits).
pub const HOOK_RENDER_LABEL: &str = "convoy.kumodo.io/hook-render";

/// The dynamic API of a content hook's kind in `namespace`, if the cluster serves it.
async fn content_api(
    applier: &crate::engine::apply::Applier,
    kind: &str,
    api_version_or_group: (&str, &str),
    namespace: &str,
) -> Result<Option<Api<kube::api::DynamicObject>>, HookError> {
    let (group, _) = api_version_or_group;
    let resource = applier
        .resources()
        .resolve_group_kind(group, kind)
        .await
        .map_err(|source| HookError::Kind {
            kind: kind.to_string(),
            source,
        })?;
    Ok(resource.map(|r| {
        if r.namespaced {
            Api::namespaced_with(applier.client().clone(), namespace, &r.api)
        } else {
            Api::all_with(applier.client().clone(), &r.api)
        }
    }))
}

/// What arming a content hook did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Armed {
    /// Created now (or found, created for this render).
    Created,
    /// The previous instance is still going away; try again on the next pass.
    Waiting,
}

/// Whether `object` carries the labels a hook of `release` gets when it is armed, and the
/// controller's apply set its render label: labels another writer copied (a StatefulSet's
/// pods carry its template's) do not make an object a hook.
fn is_hook_of(object: &impl kube::ResourceExt, release: &Release) -> bool {
    let render_label = format!("f:{HOOK_RENDER_LABEL}");
    let armed_by_convoy = object.managed_fields().iter().any(|entry| {
        entry.manager.as_deref() == Some(field_managers::CONTROLLER.as_str())
            && entry.operation.as_deref() == Some("Apply")
            && entry.fields_v1.as_ref().is_some_and(|fields| {
                fields.0["f:metadata"]["f:labels"]
                    .get(&render_label)
                    .is_some()
            })
    });
    armed_by_convoy
        && object.labels().contains_key(HOOK_RENDER_LABEL)
        && labelled_for(object, release)
}

/// Whether `object`'s Release labels name `release`.
fn labelled_for(object: &impl kube::ResourceExt, release: &Release) -> bool {
    let labels = object.labels();
    labels.get(labels::RELEASE).map(String::as_str) == release.metadata.name.as_deref()
        && labels.get(labels::RELEASE_NAMESPACE).map(String::as_str)
            == release.metadata.namespace.as_deref()
}

/// Arm a content hook for `render_ref`: the rendered object as it is (its name kept: charts
/// refer to it), with the Release's labels, the render label and (Jobs, Pods) the hook
/// finalizer. An instance of an earlier render is deleted first (it is never patched: a Job's
/// template cannot change), as Helm's and Argo CD's `before-hook-creation` do; an object of
/// the name that no hook of this Release made is left alone, and the hook is refused.
pub async fn arm_content_hook(
    applier: &crate::engine::apply::Applier,
    release: &Release,
    hook: &crate::engine::content_hooks::ContentHook,
    render_ref: &str,
) -> Result<Armed, HookError> {
    let object = &hook.object;
    let namespace = object.namespace().unwrap_or_default().to_string();
    let Some(api) = content_api(applier, object.kind(), (object.group(), ""), &namespace).await?
    else {
        return Err(HookError::NotServed {
            kind: object.kind().to_string(),
        });
    };
    let short = render_ref.get(..12).unwrap_or(render_ref);
    let name = object.name();
    if let Some(existing) = api.get_opt(name).await.map_err(api_error("read", name))? {
        // Counted as armed, or replaced, only when a hook of this Release made it: an object
        // that anyone labelled with this render would otherwise stand in for the hook's run.
        if !is_hook_of(&existing, release) {
            return Err(HookError::Taken {
                kind: object.kind().to_string(),
                name: name.to_string(),
            });
        }
        if existing.labels().get(HOOK_RENDER_LABEL).map(String::as_str) == Some(short)
            && existing.metadata.deletion_timestamp.is_none()
        {
            return Ok(Armed::Created);
        }
        delete_hook_object(&api, &existing).await?;
        return Ok(Armed::Waiting);
    }
    let mut body = object.0.clone();
    let labels = &mut body["metadata"]["labels"];
    if !labels.is_object() {
        *labels = json!({});
    }
    for (k, v) in [
        (
            labels::RELEASE,
            release.metadata.name.clone().unwrap_or_default(),
        ),
        (
            labels::RELEASE_NAMESPACE,
            release.metadata.namespace.clone().unwrap_or_default(),
        ),
        (labels::PHASE, hook.phase.as_str().to_string()),
        (HOOK_RENDER_LABEL, short.to_string()),
    ] {
        labels[k] = json!(v);
    }
    if hook.is_workload() {
        body["metadata"]["finalizers"] = json!([HOOK_FINALIZER]);
    }
    match crate::engine::ssa::apply(&api, name, field_managers::CONTROLLER, &body).await {
        Ok(_) => Ok(Armed::Created),
        // The previous instance has not gone yet.
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(Armed::Waiting),
        Err(e) => Err(api_error("create", &hook.id)(e)),
    }
}

/// Delete a content hook object (its hook finalizer first) if a hook of `release` armed it
/// ([`is_hook_of`]); gone already is fine. Whatever else carries the name is left alone: the
/// name comes from the inventory's hook entries, which whoever may write the inventory can
/// change, and a render's hook may name any object. The delete is for the object read (its
/// uid the precondition). `true`: deleted.
async fn delete_content_object(
    api: &Api<kube::api::DynamicObject>,
    name: &str,
    release: &Release,
) -> Result<bool, HookError> {
    let Some(object) = api.get_opt(name).await.map_err(api_error("read", name))? else {
        return Ok(false);
    };
    if !is_hook_of(&object, release) {
        tracing::warn!(release = %ReleaseId::of(release), object = %name, "not deleted: no hook of this Release armed it");
        return Ok(false);
    }
    delete_hook_object(api, &object).await
}

/// Delete `object` as read (a hook of the Release's, checked by the caller): its hook
/// finalizer first, then the object of that uid. `true`: deleted.
async fn delete_hook_object(
    api: &Api<kube::api::DynamicObject>,
    object: &kube::api::DynamicObject,
) -> Result<bool, HookError> {
    let name = object.name_any();
    drop_finalizer(api, object).await?;
    let params = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        preconditions: object.metadata.uid.clone().map(|uid| Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        ..Default::default()
    };
    match api.delete(&name, &params).await {
        Ok(_) => Ok(true),
        // Gone, or another object took the name since: nothing of the hook's is left.
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(false),
        Err(e) => Err(api_error("delete", &name)(e)),
    }
}

/// Remove the hook finalizer from `name` if a hook of `release` armed it and it has it.
async fn release_finalizer(
    api: &Api<kube::api::DynamicObject>,
    name: &str,
    release: &Release,
) -> Result<(), HookError> {
    match api.get_opt(name).await.map_err(api_error("read", name))? {
        Some(object) if is_hook_of(&object, release) => drop_finalizer(api, &object).await,
        _ => Ok(()),
    }
}

/// Remove the hook finalizer from `object` as read, if it has it.
async fn drop_finalizer(
    api: &Api<kube::api::DynamicObject>,
    object: &kube::api::DynamicObject,
) -> Result<(), HookError> {
    let name = object.name_any();
    let finalizers = object.metadata.finalizers.clone().unwrap_or_default();
    if !finalizers.iter().any(|f| f == HOOK_FINALIZER) {
        return Ok(());
    }
    let remaining: Vec<&String> = finalizers.iter().filter(|f| *f != HOOK_FINALIZER).collect();
    let patch = json!({"metadata": {"finalizers": remaining,
        "resourceVersion": object.metadata.resource_version}});
    match api
        .patch(
            &name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(api_error("release the hook finalizer of", &name)(e)),
    }
}

/// Delete the object of a content hook entry (`Kind/namespace/name`), as its delete policy
/// or the Release's deletion says.
pub async fn delete_content_hook(
    applier: &crate::engine::apply::Applier,
    release: &Release,
    hook: &crate::engine::content_hooks::ContentHook,
) -> Result<(), HookError> {
    let object = &hook.object;
    let namespace = object.namespace().unwrap_or_default().to_string();
    match content_api(applier, object.kind(), (object.group(), ""), &namespace).await? {
        Some(api) => delete_content_object(&api, object.name(), release)
            .await
            .map(|_| ()),
        None => Ok(()),
    }
}

/// Delete every content hook object the inventory records for `release` (its deletion) that
/// a hook of `release` armed.
pub async fn delete_content_hook_objects(
    applier: &crate::engine::apply::Applier,
    release: &Release,
    entries: &[HookEntry],
) -> Result<usize, HookError> {
    let mut deleted = 0;
    for entry in entries {
        let Some((kind, namespace, name)) = crate::engine::content_hooks::parse_id(&entry.name)
        else {
            continue;
        };
        let group = content_group(kind);
        if let Some(api) = content_api(applier, kind, (group, ""), namespace).await?
            && delete_content_object(&api, name, release).await?
        {
            deleted += 1;
        }
    }
    Ok(deleted)
}

/// The group of a content hook's kind as its entry names it (Jobs are batch; other kinds are
/// looked up by kind alone, which discovery resolves for the common hook kinds).
fn content_group(kind: &str) -> &'static str {
    match kind {
        "Job" => "batch",
        "Role" | "RoleBinding" | "ClusterRole" | "ClusterRoleBinding" => {
            "rbac.authorization.k8s.io"
        }
        _ => "",
    }
}

/// `pollHookWorkload` for a content hook entry (`Kind/namespace/name`): Jobs and Pods as for
/// lifecycle hooks; any other kind is Succeeded once it exists. A finished Job or Pod gets its
/// hook finalizer released once its state is read, so a TTL can take it.
async fn poll_content_hook(
    client: &Client,
    release: &Release,
    entry: &HookEntry,
    now: &Time,
) -> Result<Polled, kube::Error> {
    let Some((kind, namespace, name)) = crate::engine::content_hooks::parse_id(&entry.name) else {
        return Ok(Polled {
            state: HookState::Failed,
            message: format!("{} is not a hook object", entry.name),
        });
    };
    let whose = Whose::ContentHook(release);
    let finished = match kind {
        "Job" => poll_job(client, namespace, name, whose).await?,
        "Pod" => poll_pod(client, namespace, name, whose).await?,
        _ => {
            return Ok(Polled {
                state: HookState::Succeeded,
                message: format!("{kind} {name} created"),
            });
        }
    };
    if let Some(done) = finished {
        // The outcome is read: a deletion (a TTL, now or later) may proceed.
        let resource = if kind == "Job" {
            kube::api::ApiResource::erase::<Job>(&())
        } else {
            kube::api::ApiResource::erase::<Pod>(&())
        };
        let api =
            Api::<kube::api::DynamicObject>::namespaced_with(client.clone(), namespace, &resource);
        if let Err(e) = release_finalizer(&api, name, release).await {
            tracing::warn!(hook = %entry.name, "{e}");
        }
        return Ok(done);
    }
    Ok(running_or_timed_out(entry, name, None, now))
}

/// The state of a hook workload and a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Polled {
    pub state: HookState,
    pub message: String,
}

/// `pollHookWorkload`: a Job with `Complete` → Succeeded, `Failed` → Failed; a Pod in phase
/// Succeeded/Failed likewise; a missing workload → Failed ("not found"); otherwise Running,
/// or Failed once `now − createdAt ≥ timeout`.
pub async fn poll_hook_workload(
    client: &Client,
    release: &Release,
    namespace: &str,
    entry: &HookEntry,
    hook: Option<&Hook>,
    now: &Time,
) -> Result<Polled, kube::Error> {
    if crate::engine::content_hooks::is_content_id(&entry.name) {
        return poll_content_hook(client, release, entry, now).await;
    }
    let name = entry.workload_name.clone().unwrap_or_default();
    // Read from the inventory: a name a request path cannot carry is not asked for.
    if let Some(why) = crate::engine::render::object::path_segment_trouble(&name) {
        return Ok(Polled {
            state: HookState::Failed,
            message: format!("its workload name {name:?} {why}"),
        });
    }
    let is_pod = hook.is_some_and(|h| h.pod.is_some() && h.job.is_none());
    let whose = Whose::Workload(release);
    let finished = if is_pod {
        poll_pod(client, namespace, &name, whose).await?
    } else {
        poll_job(client, namespace, &name, whose).await?
    };
    if let Some(done) = finished {
        return Ok(done);
    }
    Ok(running_or_timed_out(entry, &name, hook, now))
}

/// Running, or Failed once `now − createdAt ≥ timeout`.
fn running_or_timed_out(entry: &HookEntry, name: &str, hook: Option<&Hook>, now: &Time) -> Polled {
    let timeout = hook_timeout(hook);
    let elapsed = entry
        .created_at
        .as_ref()
        .map(|c| Duration::from_secs((now.0.as_second() - c.0.as_second()).max(0) as u64))
        .unwrap_or_default();
    if elapsed >= timeout {
        Polled {
            state: HookState::Failed,
            message: format!(
                "timeout: {} still running after {}",
                name,
                crate::engine::duration::human(timeout)
            ),
        }
    } else {
        Polled {
            state: HookState::Running,
            message: format!(
                "{name} running for {}",
                crate::engine::duration::human(elapsed)
            ),
        }
    }
}

/// Which hooks' workloads a poll reads: the hook entries that name them are the inventory's,
/// which whoever may write it can change, so a workload is read (its state and termination
/// messages reported, its finalizer released) only if this Release's hook made it.
#[derive(Clone, Copy)]
enum Whose<'a> {
    /// A content hook's object, armed by the controller ([`is_hook_of`]).
    ContentHook(&'a Release),
    /// A lifecycle hook's Job or Pod ([`workload_object`]'s labels).
    Workload(&'a Release),
}

impl Whose<'_> {
    fn made(&self, object: &impl ResourceExt) -> bool {
        match self {
            Whose::ContentHook(release) => is_hook_of(object, release),
            Whose::Workload(release) => {
                object.labels().contains_key(labels::HOOK) && labelled_for(object, release)
            }
        }
    }
}

/// What a poll reports of a workload no hook of this Release made: nothing of it.
fn not_a_hook(kind: &str, name: &str) -> Polled {
    Polled {
        state: HookState::Failed,
        message: format!("{kind} {name} is not a hook this Release made"),
    }
}

/// A Pod's terminal state, or `None` while it runs.
async fn poll_pod(
    client: &Client,
    namespace: &str,
    name: &str,
    whose: Whose<'_>,
) -> Result<Option<Polled>, kube::Error> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    Ok(match api.get_opt(name).await? {
        None => Some(Polled {
            state: HookState::Failed,
            message: format!("Pod {name} not found"),
        }),
        Some(pod) if !whose.made(&pod) => Some(not_a_hook("Pod", name)),
        Some(pod) => match pod.status.as_ref().and_then(|s| s.phase.as_deref()) {
            Some("Succeeded") => Some(Polled {
                state: HookState::Succeeded,
                message: format!("Pod {name} succeeded"),
            }),
            Some("Failed") => Some(Polled {
                state: HookState::Failed,
                message: format!("Pod {name} failed{}", termination_message_of_pod(&pod)),
            }),
            _ => None,
        },
    })
}

/// A Job's terminal state, or `None` while it runs.
async fn poll_job(
    client: &Client,
    namespace: &str,
    name: &str,
    whose: Whose<'_>,
) -> Result<Option<Polled>, kube::Error> {
    let api: Api<Job> = Api::namespaced(client.clone(), namespace);
    let Some(job) = api.get_opt(name).await? else {
        return Ok(Some(Polled {
            state: HookState::Failed,
            message: format!("Job {name} not found"),
        }));
    };
    if !whose.made(&job) {
        return Ok(Some(not_a_hook("Job", name)));
    }
    let conditions = job
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    let has = |t: &str| {
        conditions
            .iter()
            .any(|c| c.type_ == t && c.status == "True")
    };
    if has("Complete") {
        return Ok(Some(Polled {
            state: HookState::Succeeded,
            message: format!("Job {name} completed"),
        }));
    }
    if !has("Failed") {
        return Ok(None);
    }
    let reason = conditions
        .iter()
        .find(|c| c.type_ == "Failed")
        .and_then(|c| c.message.clone().or(c.reason.clone()))
        .unwrap_or_default();
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let terminated = pods
        .list(&ListParams::default().labels(&format!("job-name={name}")))
        .await
        .map(|l| {
            l.items
                .iter()
                .map(termination_message_of_pod)
                .find(|m| !m.is_empty())
                .unwrap_or_default()
        })
        .unwrap_or_default();
    Ok(Some(Polled {
        state: HookState::Failed,
        message: format!("Job {name} failed: {reason}{terminated}"),
    }))
}

fn termination_message_of_pod(pod: &Pod) -> String {
    let statuses = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.clone())
        .unwrap_or_default();
    let messages: Vec<String> = statuses
        .iter()
        .filter_map(|s| s.state.as_ref()?.terminated.as_ref()?.message.clone())
        .map(|m| {
            m.lines()
                .rev()
                .take(3)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect::<Vec<_>>()
                .join(" / ")
        })
        .collect();
    if messages.is_empty() {
        String::new()
    } else {
        format!(": {}", messages.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn release() -> Release {
        serde_json::from_value(json!({
            "apiVersion": "core.convoy.kumodo.io/v1alpha1", "kind": "Release",
            "metadata": {"name": "web", "namespace": "apps"},
            "spec": {"source": {"kind": "GitRepository", "name": "repo"}},
        }))
        .unwrap()
    }

    fn hook(job: Value) -> Hook {
        serde_json::from_value(json!({"name": "migrate", "phase": "preSync", "job": job})).unwrap()
    }

    #[test]
    fn hook_names_are_non_empty_hold_no_slash_and_are_unique_per_phase() {
        let with_hooks = |hooks: Value| {
            let mut r = release();
            r.spec.lifecycle = Some(serde_json::from_value(json!({"hooks": hooks})).unwrap());
            check_names(&r).map_err(|e| e.0)
        };
        let job = json!({"template": {}});
        assert_eq!(check_names(&release()), Ok(()));
        assert_eq!(
            with_hooks(json!([
                {"name": "migrate", "phase": "preSync", "job": job},
                {"name": "migrate", "phase": "postSync", "job": job},
            ])),
            Ok(())
        );
        assert_eq!(
            with_hooks(json!([{"name": "Secret/kube-system/token", "phase": "preDelete", "job": job}])),
            Err("spec.lifecycle.hooks: the hook name \"Secret/kube-system/token\" holds a '/' (names like Kind/namespace/name are content hooks'); give each hook of a phase its own name without '/'".into())
        );
        assert_eq!(
            with_hooks(json!([
                {"name": "migrate", "phase": "preSync", "job": job},
                {"name": "migrate", "phase": "preSync", "job": job},
            ])),
            Err("spec.lifecycle.hooks: the hook name \"migrate\" is used by two hooks of one phase; give each hook of a phase its own name without '/'".into())
        );
        assert!(
            with_hooks(json!([{"name": "", "phase": "preSync", "job": job}]))
                .unwrap_err()
                .contains("\"\" is empty")
        );
    }

    #[test]
    fn a_workload_name_changes_with_the_render_and_the_hook_but_not_otherwise() {
        let r = release();
        let h = hook(json!({"template": {"spec": {"containers": []}}}));
        let a = workload_name(&r, &h, "r1");
        assert!(
            a.starts_with("web-migrate-") && a.len() == "web-migrate-".len() + 8,
            "{a}"
        );
        assert_eq!(a, workload_name(&r, &h, "r1"));
        assert_ne!(a, workload_name(&r, &h, "r2"));
        let edited = hook(json!({"template": {"spec": {"containers": [{"name": "x"}]}}}));
        assert_ne!(a, workload_name(&r, &edited, "r1"));
        let mut long = h.clone();
        long.name = "x".repeat(100);
        assert!(workload_name(&r, &long, "r1").len() <= 63);
    }

    #[test]
    fn a_job_fails_fast_never_restarts_and_carries_the_hook_labels() {
        let r = release();
        let h = hook(
            json!({"template": {"metadata": {"labels": {"own": "x"}}, "spec": {"containers": []}}}),
        );
        let job = workload_object(&r, &h, "web-migrate-1", "apps");
        assert_eq!(job["kind"], "Job");
        assert_eq!(job["spec"]["backoffLimit"], 0);
        assert_eq!(job["spec"]["template"]["spec"]["restartPolicy"], "Never");
        assert_eq!(job["spec"]["template"]["metadata"]["labels"]["own"], "x");
        assert_eq!(
            job["spec"]["template"]["metadata"]["labels"][labels::HOOK],
            "migrate"
        );
        assert_eq!(job["metadata"]["labels"][labels::PHASE], "preSync");
        let mut own = h.clone();
        own.job =
            Some(json!({"backoffLimit": 2, "template": {"spec": {"restartPolicy": "OnFailure"}}}));
        let job = workload_object(&r, &own, "n", "apps");
        assert_eq!(job["spec"]["backoffLimit"], 2);
        assert_eq!(
            job["spec"]["template"]["spec"]["restartPolicy"],
            "OnFailure"
        );
    }

    #[test]
    fn a_state_counts_only_for_the_arming_it_was_polled_for() {
        let t = |s: &str| Time(s.parse().unwrap());
        let mut e = HookEntry {
            name: "m".into(),
            phase: HookPhase::PreSync,
            workload_name: Some("w".into()),
            created_at: Some(t("2026-01-01T00:01:00Z")),
            render_ref: Some("r".into()),
            state: Some(HookState::Succeeded),
            message: None,
            finished_at: Some(t("2026-01-01T00:00:00Z")),
        };
        assert_eq!(
            effective_state(&e),
            HookState::Running,
            "re-armed after it finished"
        );
        e.finished_at = Some(t("2026-01-01T00:02:00Z"));
        assert_eq!(effective_state(&e), HookState::Succeeded);
        e.state = None;
        assert_eq!(effective_state(&e), HookState::Running);
    }
}

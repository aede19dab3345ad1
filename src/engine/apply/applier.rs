//! SSA apply, the dry-run gate and prune against one target cluster, all under the
//! controller's field manager (`convoy-release`, forced).
//!
//! Spec: reconcile-flow.txt stageSync steps 1, 4 and 5. Requests run concurrently (bounded)
//! on a client without client-side throttling.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use futures::{StreamExt, stream};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, DynamicObject, Preconditions, PropagationPolicy};
use kube::{Api, Client};
use serde_json::Value;

use super::resources::{ResolveKindError, Resource, ResourceCache};
use super::watched::WatchedObjects;
use crate::engine::api::{ObjectKey, field_managers};
use crate::engine::connect::is_unreachable;
use crate::engine::digest_key::DigestKey;
use crate::engine::render::Object;
use crate::engine::ssa;

mod held;
mod kinds_to_come;
mod live_read;
mod recreate;

pub use held::holds;
pub use kinds_to_come::{KindToCome, defined_kinds};

/// Default number of requests in flight.
pub const DEFAULT_CONCURRENCY: usize = 16;

/// One object the server (or discovery) refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub key: ObjectKey,
    pub message: String,
}

impl std::fmt::Display for Rejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.key, self.message)
    }
}

/// Why an apply step failed.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The cluster could not be reached at all.
    #[error("cannot reach the target cluster")]
    Unreachable(#[source] Box<kube::Error>),
    /// A live object could not be read (other than absent); its state is unknown.
    #[error("cannot read {key}")]
    Read {
        key: String,
        #[source]
        source: Box<kube::Error>,
    },
    /// Some objects failed; `applied` holds those that went through.
    #[error("{} of {} objects failed: {}", failures.len(), failures.len() + applied.len(), summary(failures))]
    Failed {
        applied: Vec<ObjectKey>,
        failures: Vec<Rejection>,
    },
}

impl crate::engine::error::Categorized for ApplyError {
    fn category(&self) -> crate::engine::error::Category {
        use crate::engine::error::Category;
        match self {
            ApplyError::Unreachable(_) => Category::Unreachable,
            ApplyError::Read { source, .. } => crate::engine::error::kube_category(source),
            ApplyError::Failed { .. } => Category::Failed,
        }
    }
}

fn summary(failures: &[Rejection]) -> String {
    let shown: Vec<String> = failures.iter().take(3).map(|r| r.to_string()).collect();
    let more = failures.len().saturating_sub(3);
    if more > 0 {
        format!("{}; and {more} more", shown.join("; "))
    } else {
        shown.join("; ")
    }
}

/// What the dry-run gate found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DryRunReport {
    pub rejections: Vec<Rejection>,
}

/// An inventory entry to delete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PruneTarget {
    pub key: ObjectKey,
    pub wave: i32,
    /// Listed only by a stopped sync's intent (ReleaseInventory.pending), never recorded as
    /// applied: convoy may not have sent it, so an object found without this Release's labels
    /// is someone else's and is left alone (`ownership::prune_refs`).
    pub intent_only: bool,
    /// The uid the prune's read found (`ownership::prune_refs`): the delete then removes
    /// only that object, not one created under the name since.
    pub uid: Option<String>,
}

/// What prune did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PruneReport {
    pub deleted: Vec<ObjectKey>,
    pub failures: Vec<Rejection>,
}

/// How fresh a read of live objects must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Freshness {
    /// The latest state (a quorum read from etcd): what the controller decides on, and what
    /// `convoy diff` and `convoy health --live` show.
    #[default]
    Latest,
    /// Whatever the API server's watch cache holds (`resourceVersion=0`), milliseconds
    /// behind at most: the observer loops' periodic reads, which a daemon makes for every
    /// object at every interval. Served from memory, they cost etcd nothing. A process with
    /// watches of its own ([`super::WatchedObjects`]) answers from them first.
    WatchCache,
    /// The API server's watch cache, never the process's own watches: for a read that needs
    /// the objects' `managedFields`, which those watches do not keep.
    ServerWatchCache,
    /// The process's own watches where they hold the object, else the latest state: the
    /// controller's first look, which it confirms on the latest state before it sends
    /// anything.
    Watched,
}

impl Freshness {
    /// A LIST as fresh as asked.
    fn list_params(self) -> kube::api::ListParams {
        match self {
            Freshness::Latest | Freshness::Watched => kube::api::ListParams::default(),
            Freshness::WatchCache | Freshness::ServerWatchCache => {
                kube::api::ListParams::default().match_any()
            }
        }
    }

    /// GET `name` as fresh as asked; `None` when it does not exist.
    pub async fn get<K>(self, api: &Api<K>, name: &str) -> Result<Option<K>, kube::Error>
    where
        K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        match self {
            Freshness::Latest | Freshness::Watched => api.get_opt(name).await,
            Freshness::WatchCache | Freshness::ServerWatchCache => {
                match api.get_with(name, &kube::api::GetParams::any()).await {
                    Ok(object) => Ok(Some(object)),
                    Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
                    Err(e) => Err(e),
                }
            }
        }
    }
}

/// Applies objects to one cluster.
pub struct Applier {
    client: Client,
    resources: ResourceCache,
    concurrency: usize,
    /// Where reads as old as the watch cache are answered first (a daemon's watches).
    watched: Option<Arc<dyn WatchedObjects>>,
}

/// One object's apply: its key and whether it was re-created, or why it was refused.
type ApplyOne = Result<Result<(ObjectKey, bool), Rejection>, ApplyError>;

/// An object ready to send: where it goes and the body.
struct Prepared {
    key: ObjectKey,
    resource: Resource,
    namespace: Option<String>,
    name: String,
    body: Value,
}

/// Whether an object is sent, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WhySend {
    /// Applied before exactly as rendered now, and the live object still holds it.
    Unchanged,
    /// Rendered differently from what was applied (or never recorded, or unpreparable).
    Rendered,
    /// Applied before as rendered now, but the live object no longer holds it (or is gone):
    /// drift to put back.
    NotHeld,
}

/// Whether each object is sent at all.
fn sends(why: Vec<WhySend>) -> Vec<bool> {
    why.into_iter().map(|w| w != WhySend::Unchanged).collect()
}

impl Applier {
    pub fn new(client: Client, concurrency: usize) -> Self {
        Self {
            resources: ResourceCache::new(client.clone()),
            client,
            concurrency: concurrency.max(1),
            watched: None,
        }
    }

    /// Answer reads as old as the watch cache from `watched` where it can.
    pub fn with_watched(mut self, watched: Arc<dyn WatchedObjects>) -> Self {
        self.watched = Some(watched);
        self
    }

    /// The object from this process's own watches, when `freshness` allows a read that old
    /// and they know it; `None`: read the API server.
    pub fn watched(
        &self,
        resource: &Resource,
        namespace: Option<&str>,
        name: &str,
        freshness: Freshness,
    ) -> Option<DynamicObject> {
        if !matches!(freshness, Freshness::WatchCache | Freshness::Watched) {
            return None;
        }
        self.watched.as_ref()?.get(&resource.api, namespace, name)
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Requests in flight per step.
    pub fn concurrency(&self) -> usize {
        self.concurrency
    }

    pub fn resources(&self) -> &ResourceCache {
        &self.resources
    }

    /// The key an object is recorded under on this cluster: cluster-scoped objects have no
    /// namespace whatever the render says.
    pub async fn effective_key(&self, object: &Object) -> Result<ObjectKey, ResolveKindError> {
        let resource = self
            .resources
            .resolve(object.api_version(), object.kind())
            .await?;
        let mut key = object.key();
        if !resource.namespaced {
            key.namespace.clear();
        }
        Ok(key)
    }

    /// stageSync step 1, the dry-run gate: a server-side apply dry run of every object.
    /// Objects whose namespace or CRD the render itself creates cannot be dry-run before it
    /// exists, so their "not found" is not a rejection; nor is a missing kind for an object
    /// that says it awaits its kind ([`KindToCome`]).
    pub async fn dry_run_gate(&self, objects: &[Object]) -> Result<DryRunReport, ApplyError> {
        let created_namespaces: BTreeSet<String> = objects
            .iter()
            .filter(|o| o.kind() == "Namespace" && o.group().is_empty())
            .map(|o| o.name().to_string())
            .collect();
        let created_kinds = defined_kinds(objects);
        let results: Vec<Result<Option<Rejection>, ApplyError>> =
            stream::iter(objects.iter().cloned())
                .map(|object| self.gate_one(object, &created_namespaces, &created_kinds))
                .buffer_unordered(self.concurrency)
                .collect()
                .await;
        let mut report = DryRunReport::default();
        for result in results {
            if let Some(rejection) = result? {
                report.rejections.push(rejection);
            }
        }
        report.rejections.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(report)
    }

    /// Apply one wave. Namespaces and CRDs go first (and CRDs must be Established) so that
    /// what lives in them can follow in the same wave. `recreated` gains the objects deleted
    /// and created again (applier::recreate), applied or not.
    pub async fn apply(
        &self,
        objects: &[Object],
        recreated: &mut Vec<ObjectKey>,
    ) -> Result<Vec<ObjectKey>, ApplyError> {
        let (foundation, rest): (Vec<&Object>, Vec<&Object>) = objects
            .iter()
            .partition(|o| matches!(o.kind(), "Namespace" | "CustomResourceDefinition"));
        let mut applied = Vec::new();
        let mut failures = Vec::new();
        self.apply_set(
            &foundation,
            &BTreeSet::new(),
            &mut applied,
            recreated,
            &mut failures,
        )
        .await?;
        let crds: Vec<&Object> = foundation
            .iter()
            .copied()
            .filter(|o| o.kind() == "CustomResourceDefinition")
            .collect();
        if !crds.is_empty() {
            self.await_crds(&crds).await;
        }
        let awaited = self.ask_again_for_awaited_kinds(&rest).await;
        self.apply_set(&rest, &awaited, &mut applied, recreated, &mut failures)
            .await?;
        if failures.is_empty() {
            Ok(applied)
        } else {
            failures.sort_by(|a, b| a.key.cmp(&b.key));
            Err(ApplyError::Failed { applied, failures })
        }
    }

    /// Apply `objects`; those of the group-versions in `awaited` (kinds asked about again at
    /// this wave) are checked for another Release's claim first.
    async fn apply_set(
        &self,
        objects: &[&Object],
        awaited: &BTreeSet<String>,
        applied: &mut Vec<ObjectKey>,
        recreated: &mut Vec<ObjectKey>,
        failures: &mut Vec<Rejection>,
    ) -> Result<(), ApplyError> {
        let owned: Vec<Object> = objects.iter().map(|o| (*o).clone()).collect();
        let results: Vec<ApplyOne> = stream::iter(owned)
            .map(|object| {
                let awaited = awaited.contains(object.api_version());
                self.apply_one(object, awaited)
            })
            .buffer_unordered(self.concurrency)
            .collect()
            .await;
        for result in results {
            match result? {
                Ok((key, deleted)) => {
                    if deleted {
                        recreated.push(key.clone());
                    }
                    applied.push(key)
                }
                Err(rejection) => failures.push(rejection),
            }
        }
        Ok(())
    }

    /// Wait (bounded) until the CRDs are Established, then forget what discovery said about
    /// their groups so the new kinds resolve.
    async fn await_crds(&self, crds: &[&Object]) {
        let api: Api<CustomResourceDefinition> = Api::all(self.client.clone());
        for crd in crds {
            let established = kube::runtime::wait::await_condition(
                api.clone(),
                crd.name(),
                kube::runtime::wait::conditions::is_crd_established(),
            );
            let _ = tokio::time::timeout(std::time::Duration::from_secs(30), established).await;
            let group = crd.0["spec"]["group"].as_str().unwrap_or_default();
            for version in crd.0["spec"]["versions"].as_array().into_iter().flatten() {
                if let Some(v) = version["name"].as_str() {
                    self.resources.forget(&format!("{group}/{v}"));
                }
            }
        }
    }

    /// Which objects need applying. An object can be skipped when it was applied before as
    /// it is now (`applied_digests` holds what the inventory recorded) and the live object
    /// still holds every value it sets: then an apply would change nothing. If the live
    /// objects cannot be listed, every object counts as changed.
    pub async fn changed(
        &self,
        objects: &[Object],
        applied_digests: &std::collections::HashMap<ObjectKey, String>,
        digest_key: Option<&DigestKey>,
    ) -> Vec<bool> {
        let prepared = self
            .skip_candidates(objects, applied_digests, digest_key)
            .await;
        let live = match self.list_live(prepared.iter().flatten()).await {
            Ok(live) => live,
            Err(_) => return vec![true; objects.len()],
        };
        sends(Self::why_send(&prepared, &live))
    }

    /// `changed` against live objects already read (by `live_objects`).
    pub async fn changed_given_live(
        &self,
        objects: &[Object],
        applied_digests: &std::collections::HashMap<ObjectKey, String>,
        digest_key: Option<&DigestKey>,
        live: &std::collections::HashMap<ObjectKey, Value>,
    ) -> Vec<bool> {
        let why = self
            .why_send_given_live(objects, applied_digests, digest_key, live)
            .await;
        sends(why)
    }

    /// Per object, whether and why it is sent (`changed_given_live` with the reason).
    pub async fn why_send_given_live(
        &self,
        objects: &[Object],
        applied_digests: &std::collections::HashMap<ObjectKey, String>,
        digest_key: Option<&DigestKey>,
        live: &std::collections::HashMap<ObjectKey, Value>,
    ) -> Vec<WhySend> {
        let prepared = self
            .skip_candidates(objects, applied_digests, digest_key)
            .await;
        Self::why_send(&prepared, live)
    }

    /// Per object, the prepared form when it was applied before exactly as rendered now (its
    /// digest is the inventory's), else `None` (it must be sent).
    async fn skip_candidates(
        &self,
        objects: &[Object],
        applied_digests: &std::collections::HashMap<ObjectKey, String>,
        digest_key: Option<&DigestKey>,
    ) -> Vec<Option<Prepared>> {
        let mut prepared = Vec::with_capacity(objects.len());
        for object in objects {
            // An object with no recorded digest (a first sync's, a new one) is sent anyway:
            // its digest is not worth making (about 26 µs each).
            let candidate = match self.prepare(object).await {
                Ok(p) => applied_digests.get(&p.key).and_then(|applied| {
                    let digest =
                        crate::engine::render::render_ref::object_digest(object, digest_key);
                    (digest.as_ref() == Some(applied)).then_some(p)
                }),
                Err(_) => None,
            };
            prepared.push(candidate);
        }
        prepared
    }

    fn why_send(
        prepared: &[Option<Prepared>],
        live: &std::collections::HashMap<ObjectKey, Value>,
    ) -> Vec<WhySend> {
        prepared
            .iter()
            .map(|candidate| {
                let Some(p) = candidate else {
                    return WhySend::Rendered;
                };
                let api = &p.resource.api;
                match live.get(&p.key) {
                    Some(object)
                        if holds(object, &without_type(&p.body), &api.group, &api.kind) =>
                    {
                        WhySend::Unchanged
                    }
                    _ => WhySend::NotHeld,
                }
            })
            .collect()
    }

    /// The live objects the cluster holds for `objects`, by (effective) key: one LIST per kind
    /// and namespace, falling back to GETs for a kind that cannot be listed.
    pub async fn live_objects(
        &self,
        objects: &[Object],
    ) -> Result<std::collections::HashMap<ObjectKey, Value>, ApplyError> {
        self.live_objects_as(objects, Freshness::Latest).await
    }

    /// [`Applier::live_objects`], as fresh as `freshness` asks.
    pub async fn live_objects_as(
        &self,
        objects: &[Object],
        freshness: Freshness,
    ) -> Result<std::collections::HashMap<ObjectKey, Value>, ApplyError> {
        let mut prepared = Vec::with_capacity(objects.len());
        for object in objects {
            if let Ok(p) = self.prepare(object).await {
                prepared.push(p);
            }
        }
        self.list_live_as(prepared.iter(), freshness).await
    }

    /// Server-side dry run of one object as the controller would apply it: what it would
    /// become (the drift check uses this) and, when the apply would re-create it, why; or the
    /// server's refusal.
    pub async fn dry_run_one(
        &self,
        object: &Object,
    ) -> Result<Result<(DynamicObject, Option<String>), Rejection>, ApplyError> {
        let prepared = match self.prepare(object).await {
            Ok(p) => p,
            Err(rejection) => return Ok(Err(rejection)),
        };
        let refused = match self.send(&prepared, true).await {
            Ok(dry) => return Ok(Ok((dry, None))),
            Err(e) if is_unreachable(&e) => return Err(ApplyError::Unreachable(Box::new(e))),
            Err(e) => e,
        };
        let rejection = |e: &kube::Error| Rejection {
            key: prepared.key.clone(),
            message: recreate::refusal_message(&prepared, e),
        };
        let Some(why) = Self::recreates(&prepared, &refused) else {
            return Ok(Err(rejection(&refused)));
        };
        Ok(self
            .recreate_check(&prepared, &refused, &why)
            .await?
            .map(|(new, live)| {
                let kept = live
                    .filter(|live| recreate::orphans_dependents(&prepared, live))
                    .map_or("", |_| ", its Pods kept for the new one");
                let note = format!(
                    "to re-create{kept}, as {why} asks: {}",
                    recreate::in_short(&refused)
                );
                (new, Some(note))
            }))
    }

    /// stageSync step 5: delete `targets`, later waves first. Objects already gone count as
    /// deleted; kinds the cluster no longer serves have nothing left to delete.
    pub async fn prune(&self, targets: &[PruneTarget]) -> Result<PruneReport, ApplyError> {
        let mut by_wave: BTreeMap<i32, Vec<&PruneTarget>> = BTreeMap::new();
        for t in targets {
            by_wave.entry(t.wave).or_default().push(t);
        }
        let mut report = PruneReport::default();
        for (_, mut wave) in by_wave.into_iter().rev() {
            // Within a wave, dependents before what they live in (reverse apply order).
            wave.sort_by_key(|t| {
                std::cmp::Reverse(matches!(
                    t.key.kind.as_str(),
                    "Namespace" | "CustomResourceDefinition"
                ))
            });
            let targets: Vec<(ObjectKey, Option<String>)> = wave
                .into_iter()
                .map(|t| (t.key.clone(), t.uid.clone()))
                .collect();
            let results: Vec<Result<Result<ObjectKey, Rejection>, ApplyError>> =
                stream::iter(targets)
                    .map(|(key, uid)| self.delete(key, uid))
                    .buffer_unordered(self.concurrency)
                    .collect()
                    .await;
            for result in results {
                match result? {
                    Ok(key) => report.deleted.push(key),
                    Err(rejection) => report.failures.push(rejection),
                }
            }
        }
        Ok(report)
    }

    /// The dry-run gate for one object.
    async fn gate_one(
        &self,
        object: Object,
        created_namespaces: &BTreeSet<String>,
        created_kinds: &BTreeSet<(String, String)>,
    ) -> Result<Option<Rejection>, ApplyError> {
        let defined_here =
            created_kinds.contains(&(object.group().to_string(), object.kind().to_string()));
        let prepared = match self.prepare(&object).await {
            Ok(p) => p,
            Err(_) if defined_here => return Ok(None),
            Err(rejection) => {
                let awaited = crate::engine::sync_options::skips_dry_run_when_missing(&object.0)
                    && self.kind_unserved(&object).await;
                return Ok((!awaited).then_some(rejection));
            }
        };
        match self.send(&prepared, true).await {
            Ok(_) => Ok(None),
            Err(e) if is_unreachable(&e) => Err(ApplyError::Unreachable(Box::new(e))),
            // To be re-created: passes when it can be.
            Err(e) => match Self::recreates(&prepared, &e) {
                Some(why) => Ok(self.recreate_check(&prepared, &e, &why).await?.err()),
                None => {
                    let namespace_created_here = prepared
                        .namespace
                        .as_ref()
                        .is_some_and(|ns| created_namespaces.contains(ns))
                        && is_not_found(&e);
                    if namespace_created_here || defined_here {
                        Ok(None)
                    } else {
                        Ok(Some(Rejection {
                            key: prepared.key.clone(),
                            message: recreate::refusal_message(&prepared, &e),
                        }))
                    }
                }
            },
        }
    }

    /// Apply `object`: its key and whether it was re-created, or why not.
    async fn apply_one(&self, object: Object, awaited: bool) -> ApplyOne {
        let prepared = match self.prepare(&object).await {
            Ok(p) => p,
            Err(mut rejection) => {
                if let Some(why) = self.still_awaited(&object).await {
                    rejection.message.push_str(&why);
                }
                return Ok(Err(rejection));
            }
        };
        if awaited && let Some(refused) = self.claimed_at_its_wave(&object, &prepared).await {
            return Ok(Err(Rejection {
                key: prepared.key,
                message: refused,
            }));
        }
        match self.send(&prepared, false).await {
            Ok(_) => Ok(Ok((prepared.key, false))),
            Err(e) if is_unreachable(&e) => Err(ApplyError::Unreachable(Box::new(e))),
            Err(e) => match Self::recreates(&prepared, &e) {
                Some(why) => self.recreate(&prepared, e, &why).await,
                None => Ok(Err(Rejection {
                    message: recreate::refusal_message(&prepared, &e),
                    key: prepared.key,
                })),
            },
        }
    }

    async fn delete(
        &self,
        key: ObjectKey,
        uid: Option<String>,
    ) -> Result<Result<ObjectKey, Rejection>, ApplyError> {
        let key = &key;
        let resource = match self
            .resources
            .resolve_group_kind(&key.group, &key.kind)
            .await
        {
            Ok(Some(r)) => r,
            Ok(None) => return Ok(Ok(key.clone())),
            Err(e) => {
                return Ok(Err(Rejection {
                    key: key.clone(),
                    message: e.to_string(),
                }));
            }
        };
        let api: Api<DynamicObject> = if resource.namespaced {
            Api::namespaced_with(self.client.clone(), &key.namespace, &resource.api)
        } else {
            Api::all_with(self.client.clone(), &resource.api)
        };
        let guarded = uid.is_some();
        let params = DeleteParams {
            propagation_policy: Some(PropagationPolicy::Background),
            preconditions: uid.map(|uid| Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..Default::default()
        };
        match api.delete(&key.name, &params).await {
            Ok(_) => Ok(Ok(key.clone())),
            Err(e) if is_not_found(&e) => Ok(Ok(key.clone())),
            Err(e) if is_unreachable(&e) => Err(ApplyError::Unreachable(Box::new(e))),
            Err(kube::Error::Api(s)) if guarded && s.code == 409 => Ok(Err(Rejection {
                key: key.clone(),
                message: "another object took its name since the prune read it; not deleted, the next sync looks again".into(),
            })),
            Err(e) => Ok(Err(Rejection {
                key: key.clone(),
                message: api_message(&e),
            })),
        }
    }

    /// Resolve an object's resource and namespace, or say why it cannot be sent.
    async fn prepare(&self, object: &Object) -> Result<Prepared, Rejection> {
        let key = object.key();
        let resource = self
            .resources
            .resolve(object.api_version(), object.kind())
            .await
            .map_err(|e| Rejection {
                key: key.clone(),
                message: e.to_string(),
            })?;
        let mut body = object.0.clone();
        let mut key = key;
        let namespace = if resource.namespaced {
            match object.namespace() {
                Some(ns) => Some(ns.to_string()),
                None => {
                    return Err(Rejection {
                        key,
                        message: "is namespaced but names no namespace, and the Release has no targetNamespace".into(),
                    });
                }
            }
        } else {
            if let Some(meta) = body.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.remove("namespace");
            }
            key.namespace.clear();
            None
        };
        Ok(Prepared {
            name: object.name().to_string(),
            key,
            resource,
            namespace,
            body,
        })
    }

    /// The API of `prepared`'s kind, where it lives.
    fn api_for(&self, prepared: &Prepared) -> Api<DynamicObject> {
        match &prepared.namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &prepared.resource.api),
            None => Api::all_with(self.client.clone(), &prepared.resource.api),
        }
    }

    async fn send(&self, prepared: &Prepared, dry_run: bool) -> Result<DynamicObject, kube::Error> {
        let api = self.api_for(prepared);
        if dry_run {
            ssa::dry_run(
                &api,
                &prepared.name,
                field_managers::CONTROLLER,
                &prepared.body,
            )
            .await
        } else {
            ssa::apply(
                &api,
                &prepared.name,
                field_managers::CONTROLLER,
                &prepared.body,
            )
            .await
        }
    }
}

/// `desired` without apiVersion and kind (list items carry neither; the LIST was for them).
fn without_type(desired: &Value) -> Value {
    let mut d = desired.clone();
    if let Some(map) = d.as_object_mut() {
        map.remove("apiVersion");
        map.remove("kind");
    }
    d
}

fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// The server's message for an API error, without kube's wrapping.
pub fn api_message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(status) => {
            if status.message.is_empty() {
                format!("{} ({})", status.reason, status.code)
            } else {
                status.message.clone()
            }
        }
        other => crate::engine::error::chain(other),
    }
}

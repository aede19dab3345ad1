//! `assess`: the health of every inventoried object, from the live objects and the rules.
//!
//! Spec: health-loop.txt "Assessment" steps 1–8 and "Per-entry evaluation". The assessment
//! works on the inventory, not on the render: an object is assessed as soon as the controller
//! records it after the apply of its wave.

use crate::engine::apply::Freshness;
use std::collections::HashMap;
use std::time::Duration;

use futures::{StreamExt, stream};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Api;
use kube::api::DynamicObject;
use serde_json::Value;

use super::rules::{CollectError, Evaluation, Evaluator, RuleError, collect_rules};
use super::state::derive_state;
use crate::engine::api::{HealthState, HealthSummary, ObjectKey, Release, ReleaseInventory};
use crate::engine::apply::Applier;
use crate::engine::cluster::{ClusterError, Target};
use crate::engine::inventory::{EntryHealth, InventoryHandle, members};
use crate::engine::runtime::Context;

/// Why the assessment of a Release failed (Healthy=Unknown).
#[derive(Debug, thiserror::Error)]
pub enum AssessError {
    #[error(transparent)]
    Collect(#[from] CollectError),
    #[error(transparent)]
    Rule(#[from] RuleError),
    #[error("cannot read the ReleaseInventory")]
    Inventory(#[source] crate::engine::inventory::InventoryError),
    #[error("target cluster")]
    Cluster(#[source] ClusterError),
    #[error("cannot resolve the kind of {key}: {message}")]
    Discovery { key: String, message: String },
    /// An inventory entry's name no request path can carry as it is (render::object).
    #[error("cannot read {key}: {why}")]
    Unaddressable { key: String, why: String },
    #[error("cannot read {key}")]
    Read {
        key: String,
        #[source]
        source: Box<kube::Error>,
    },
}

/// The result of one assessment.
#[derive(Debug, Clone, Default)]
pub struct Assessment {
    /// What to write per entry.
    pub results: Vec<EntryHealth>,
    /// An entry carried a render its assessment had not seen (`renderAdvanced`).
    pub render_advanced: bool,
    /// Each entry's state before this pass.
    pub prior: HashMap<ObjectKey, Option<HealthState>>,
    /// The inventory the assessment read (the writes' precondition).
    pub inventory: Option<ReleaseInventory>,
    /// Wave of each entry.
    pub waves: HashMap<ObjectKey, i32>,
    /// renderRef of each entry.
    pub render_refs: HashMap<ObjectKey, String>,
    pub target: Option<Target>,
}

impl Assessment {
    /// Entry counts per state.
    pub fn summary(&self) -> HealthSummary {
        let mut s = HealthSummary {
            total: self.results.len() as u32,
            ..Default::default()
        };
        for r in &self.results {
            match r.state {
                HealthState::Healthy => s.healthy += 1,
                HealthState::Progressing => s.progressing += 1,
                HealthState::Degraded => s.degraded += 1,
                HealthState::Unknown => s.unknown += 1,
            }
        }
        s
    }
}

/// `priorAndAnchors`: each entry's state and firstUnhealthy before this pass writes.
pub fn prior_and_anchors(
    inventory: &ReleaseInventory,
) -> HashMap<ObjectKey, (Option<HealthState>, Option<Time>)> {
    inventory
        .spec
        .inventory
        .iter()
        .map(|e| (e.key(), (e.state, e.first_unhealthy.clone())))
        .collect()
}

/// `assess`, steps 1–7; the caller writes (step 8).
pub async fn assess(
    ctx: &Context,
    release: &Release,
    now: &Time,
) -> Result<Assessment, AssessError> {
    // Steps 1–2: rules.
    let rules = collect_rules(&ctx.home.client, ctx.listers(), release).await?;
    let evaluator = std::sync::Arc::new(
        Evaluator::new(rules)?.with_builtin(crate::engine::health::builtin_rules(release)),
    );
    // Step 3: the inventory.
    let inventory = InventoryHandle::for_release(ctx.home.client.clone(), release)
        .get_cached(ctx.listers(), release)
        .await
        .map_err(AssessError::Inventory)?;
    let Some(inventory) = inventory.filter(|i| !members(i).is_empty()) else {
        return Ok(Assessment::default());
    };
    // Step 4: the target cluster.
    let target = ctx
        .resolve_target(release)
        .await
        .map_err(AssessError::Cluster)?;
    // Step 5: prior states and anchors, read before anything is written.
    let anchors = prior_and_anchors(&inventory);
    let deadline = deadline_of(release);
    let applier = ctx.applier(&target);
    let entries = members(&inventory);
    // Step 6: each entry.
    let keys: Vec<(ObjectKey, Freshness)> = entries
        .iter()
        .map(|e| (e.key(), read_freshness(e, ctx.observer_reads)))
        .collect();
    let evaluated: Vec<Result<(ObjectKey, Judged), AssessError>> = stream::iter(keys)
        .map(|(key, freshness)| evaluate_key(&applier, &evaluator, release, key, freshness))
        .buffered(ctx.concurrency.max(1))
        .collect()
        .await;
    let mut assessment = Assessment {
        inventory: Some(inventory.clone()),
        target: Some(target),
        ..Default::default()
    };
    for (entry, result) in entries.iter().zip(evaluated) {
        let (key, (evaluation, judges)) = match result {
            Ok(judged) => judged,
            // One object that cannot be read (or whose kind cannot be resolved) is Unknown on
            // its own, keeping its anchor; the others are still judged.
            Err(AssessError::Read { key, source }) => (
                entry.key(),
                (
                    Evaluation::Error {
                        message: format!(
                            "cannot read {key}: {}",
                            crate::engine::apply::applier::api_message(&source)
                        ),
                    },
                    Vec::new(),
                ),
            ),
            Err(e @ (AssessError::Discovery { .. } | AssessError::Unaddressable { .. })) => (
                entry.key(),
                (
                    Evaluation::Error {
                        message: e.to_string(),
                    },
                    Vec::new(),
                ),
            ),
            Err(e) => return Err(e),
        };
        let (prior_state, anchor) = anchors.get(&key).cloned().unwrap_or_default();
        let derived = derive_state(&evaluation, anchor.as_ref(), now, deadline);
        // Step 7: renderAdvanced.
        if entry.render_ref.is_some() && entry.render_ref != entry.assessed_render_ref {
            assessment.render_advanced = true;
        }
        assessment.prior.insert(key.clone(), prior_state);
        assessment
            .waves
            .insert(key.clone(), entry.wave.unwrap_or(0));
        assessment
            .render_refs
            .insert(key.clone(), entry.render_ref.clone().unwrap_or_default());
        assessment.results.push(EntryHealth {
            rule: (!judges.is_empty()).then(|| judges.join(", ")),
            key,
            state: derived.state,
            message: derived.message,
            first_unhealthy: derived.first_unhealthy,
            assessed_render_ref: entry.render_ref.clone(),
        });
    }
    Ok(assessment)
}

/// A verdict and the rules that gave it.
type Judged = (Evaluation, Vec<String>);

/// How fresh the read of an entry's object must be: the watch cache (when the process reads
/// from it at all) only to confirm an object already assessed Healthy for the render it
/// carries. A verdict that moves (a new render, an object not Healthy yet) reads the latest
/// state: a watch cache a moment behind could show a Deployment before its new generation,
/// and Healthy for a render it does not run yet would end a rollout early.
fn read_freshness(entry: &crate::engine::api::InventoryEntry, allowed: Freshness) -> Freshness {
    let confirmed = entry.state == Some(crate::engine::api::HealthState::Healthy)
        && entry.assessed_render_ref.is_some()
        && entry.assessed_render_ref == entry.render_ref;
    if confirmed {
        allowed
    } else {
        Freshness::Latest
    }
}

async fn evaluate_key(
    applier: &Applier,
    evaluator: &std::sync::Arc<Evaluator>,
    release: &Release,
    key: ObjectKey,
    freshness: Freshness,
) -> Result<(ObjectKey, Judged), AssessError> {
    let evaluation = assess_item(applier, evaluator, release, &key, freshness).await?;
    Ok((key, evaluation))
}

/// `assessItem`: read the object and judge it. A missing object fails ("not found"); a rule
/// that cannot be evaluated on it is Unknown for this entry only; a rule that is broken fails
/// the whole assessment.
/// Also returns the rules that judged it (`set/rule`, `built-in/rule`).
///
/// An object of another namespace than the Release's is judged only if it carries the
/// Release's labels ([`foreign`]): the entries are the inventory's, which whoever may write it
/// can change, and a verdict's message (a tenant's own rule may print any field) would show
/// another namespace's object, a Secret's data even, to whoever reads the Release's health.
pub async fn assess_item(
    applier: &Applier,
    evaluator: &std::sync::Arc<Evaluator>,
    release: &Release,
    key: &ObjectKey,
    freshness: Freshness,
) -> Result<Judged, AssessError> {
    let live = read_object(applier, key, freshness).await?;
    match live {
        None => Ok((
            Evaluation::Fail {
                message: format!("{key} not found"),
            },
            Vec::new(),
        )),
        Some(object) if foreign(release, key, &object) => Ok((
            Evaluation::Error {
                message: format!(
                    "{key} is not assessed: it is outside the Release's namespace and does not carry the Release's labels"
                ),
            },
            Vec::new(),
        )),
        Some(object) => Ok(evaluator.evaluate_off_runtime(object).await?),
    }
}

/// Whether `live` (at `key`) is in another namespace than `release`'s without carrying its
/// labels. Objects of its own namespace and cluster-scoped ones are judged labelled or not:
/// an `IfNotPresent` object someone else created (a Namespace, say) carries no labels.
fn foreign(release: &Release, key: &ObjectKey, live: &Value) -> bool {
    !key.namespace.is_empty()
        && Some(key.namespace.as_str()) != release.metadata.namespace.as_deref()
        && crate::engine::ownership::Owner::of_live(live)
            != Some(crate::engine::ownership::Owner::of(release))
}

/// The live object for an inventory key, or `None`.
pub async fn read_object(
    applier: &Applier,
    key: &ObjectKey,
    freshness: Freshness,
) -> Result<Option<Value>, AssessError> {
    let read_err = |source: kube::Error| AssessError::Read {
        key: key.to_string(),
        source: Box::new(source),
    };
    // Read from the inventory: a name a request path cannot carry is not asked for.
    if let Some((what, why)) =
        crate::engine::render::object::address_trouble(&key.namespace, &key.name)
    {
        return Err(AssessError::Unaddressable {
            key: key.to_string(),
            why: format!("its {what} {why}"),
        });
    }
    let resources = applier.resources();
    let resolve = |fresh: bool| async move {
        if fresh {
            resources.forget_preferred(&key.group, &key.kind);
        }
        resources
            .resolve_group_kind_cached(&key.group, &key.kind)
            .await
            .map_err(|e| AssessError::Discovery {
                key: key.to_string(),
                message: e.to_string(),
            })
    };
    let Some(resource) = resolve(false).await? else {
        return Ok(None);
    };
    match read_as(applier, key, &resource, freshness, &read_err).await? {
        Some(object) => Ok(Some(object)),
        // Not found through what discovery said up to 5 minutes ago: asked again, and read
        // again if the group now prefers another version or scope (a CRD changed).
        None => match resolve(true).await? {
            Some(fresh)
                if fresh.api.api_version != resource.api.api_version
                    || fresh.namespaced != resource.namespaced =>
            {
                read_as(applier, key, &fresh, freshness, &read_err).await
            }
            _ => Ok(None),
        },
    }
}

/// The live object of `key` as `resource`, or `None`.
async fn read_as(
    applier: &Applier,
    key: &ObjectKey,
    resource: &crate::engine::apply::resources::Resource,
    freshness: Freshness,
    read_err: &impl Fn(kube::Error) -> AssessError,
) -> Result<Option<Value>, AssessError> {
    let api: Api<DynamicObject> = if resource.namespaced {
        Api::namespaced_with(applier.client().clone(), &key.namespace, &resource.api)
    } else {
        Api::all_with(applier.client().clone(), &resource.api)
    };
    let namespace = resource.namespaced.then_some(key.namespace.as_str());
    let object = match applier.watched(resource, namespace, &key.name, freshness) {
        Some(object) => Some(object),
        None => freshness.get(&api, &key.name).await.map_err(read_err)?,
    };
    Ok(object.and_then(|o| {
        let mut v = serde_json::to_value(o).ok()?;
        // GET answers carry apiVersion/kind; keep them for rule matching either way.
        if v.get("apiVersion").is_none() {
            v["apiVersion"] = Value::String(resource.api.api_version.clone());
            v["kind"] = Value::String(resource.api.kind.clone());
        }
        Some(v)
    }))
}

/// How long before a failing object is Degraded, if the Release says.
pub fn deadline_of(release: &Release) -> Option<Duration> {
    release
        .spec
        .health_assessment
        .as_ref()
        .and_then(|a| a.deadline.as_ref())
        .map(|d| d.get())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::api::{HealthState, InventoryEntry};

    fn entry(state: Option<HealthState>, render: &str, assessed: Option<&str>) -> InventoryEntry {
        InventoryEntry {
            kind: "Deployment".into(),
            name: "web".into(),
            render_ref: Some(render.into()),
            state,
            assessed_render_ref: assessed.map(str::to_string),
            ..Default::default()
        }
    }

    /// Only a verdict that stands is confirmed from the watch cache; a new render or an
    /// object not Healthy yet is read at its latest.
    #[test]
    fn only_a_healthy_verdict_for_the_render_it_carries_reads_the_watch_cache() {
        let cache = Freshness::WatchCache;
        let healthy = Some(HealthState::Healthy);
        assert_eq!(
            read_freshness(&entry(healthy, "r2", Some("r2")), cache),
            cache
        );
        assert_eq!(
            read_freshness(&entry(healthy, "r2", Some("r1")), cache),
            Freshness::Latest,
            "a render applied since the last verdict"
        );
        assert_eq!(
            read_freshness(
                &entry(Some(HealthState::Progressing), "r2", Some("r2")),
                cache
            ),
            Freshness::Latest
        );
        assert_eq!(
            read_freshness(&entry(None, "r2", None), cache),
            Freshness::Latest
        );
        assert_eq!(
            read_freshness(&entry(healthy, "r2", Some("r2")), Freshness::Latest),
            Freshness::Latest,
            "the CLI reads the latest"
        );
    }
}

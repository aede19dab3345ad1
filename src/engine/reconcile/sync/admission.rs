//! What stops a sync before anything is applied: the tenancy rules, the inventory's capacity,
//! objects another Release owns (checked even for a forced sync), then step 1, the dry-run
//! gate (skipped by a forced sync).
//!
//! Spec: reconcile-flow.txt stageSync step 1; DESIGN.md "Tenancy", "Ownership", "Inventory".

use std::collections::HashMap;

use super::SyncRun;
use super::compare::SyncPlan;
use crate::engine::api::{ObjectKey, Reason, Release};
use crate::engine::apply::Applier;
use crate::engine::explain::{count, first_of};
use crate::engine::ownership;
use crate::engine::reconcile::ReconcileOutcome;
use crate::engine::render::Object;
use crate::engine::runtime::{Context, ProgressEvent};

/// Tenancy, capacity and other Releases' objects: `Err` is an `Unappliable` stop.
pub(super) async fn admit(
    ctx: &Context,
    run: &SyncRun<'_>,
    plan: &SyncPlan,
) -> Result<(), ReconcileOutcome> {
    let unappliable = |message: String| run.failed(Reason::Unappliable, message, false);
    // A Release that reaches into another namespace is stopped like a dry-run rejection
    // (engine::tenancy).
    tenancy_check(ctx, run.release, run.target, run.objects)
        .await
        .map_err(|refused| unappliable(format!("nothing was applied: {refused}")))?;
    // Nothing is applied that the inventory cannot record.
    crate::engine::inventory::check_capacity(&plan.keys)
        .map_err(|refused| unappliable(format!("nothing was applied: {refused}")))?;
    // Nor may a render take an object another existing Release owns, unless it adopts it.
    match claimed_objects(ctx, run.release, &plan.keyed(), &plan.live).await {
        Some(refused) => Err(unappliable(refused)),
        None => Ok(()),
    }
}

/// Step 1, the dry-run gate: every object to send is dry-run applied first; one rejection
/// and nothing is applied. Off for a forced sync and a rollback.
pub(super) async fn dry_run_gate(
    ctx: &Context,
    run: &SyncRun<'_>,
    applier: &Applier,
    plan: &SyncPlan,
) -> Result<(), ReconcileOutcome> {
    if !run.dry_run || plan.to_send.is_empty() {
        return Ok(());
    }
    let report = applier
        .dry_run_gate(&plan.to_send)
        .await
        .map_err(|e| run.deploy_failed(crate::engine::error::chain(&e)))?;
    if report.rejections.is_empty() {
        tracing::debug!("dry-run gate passed");
        ctx.report(ProgressEvent::DryRunPassed {
            objects: plan.to_send.len(),
        });
        return Ok(());
    }
    // Which of the rejected kinds the target does not serve (discovery's answers, cached
    // when the objects were prepared).
    let rejected: std::collections::BTreeSet<(&str, &str)> = report
        .rejections
        .iter()
        .map(|r| (r.key.group.as_str(), r.key.kind.as_str()))
        .collect();
    let asked: std::collections::BTreeSet<(&str, &str)> = plan
        .to_send
        .iter()
        .filter(|o| rejected.contains(&(o.group(), o.kind())))
        .map(|o| (o.api_version(), o.kind()))
        .collect();
    let mut unserved = Vec::new();
    for (api_version, kind) in asked {
        if let Err(crate::engine::apply::resources::ResolveKindError::Unknown { .. }) =
            applier.resources().resolve(api_version, kind).await
        {
            unserved.push(format!("{kind} in {api_version}"));
        }
    }
    Err(run
        .failed(
            Reason::Unappliable,
            format!(
                "the dry run rejected {} of {}, nothing was applied: {}",
                report.rejections.len(),
                count(plan.for_cluster.objects.len(), "object"),
                first_of(&report.rejections, 5)
            ),
            false,
        )
        .with_unserved_kinds(unserved))
}

/// The tenancy rules on the Release and its objects (hooks included), with scopes from the
/// target's discovery.
pub(crate) async fn tenancy_check(
    ctx: &Context,
    release: &Release,
    target: &crate::engine::cluster::Target,
    objects: &[Object],
) -> Result<(), crate::engine::tenancy::TenancyError> {
    ctx.tenancy.check_release(release, target.elsewhere)?;
    if ctx.tenancy.allow_cross_namespace_refs {
        return Ok(());
    }
    let info = ctx.cluster_info(target).await;
    ctx.tenancy
        .check_objects(release, target.elsewhere, objects, |o| {
            info.as_ref()
                .and_then(|i| i.scopes.get(&(o.group().to_string(), o.kind().to_string())))
                .copied()
        })
}

/// Objects of the render whose live copy another existing Release owns and that the render
/// does not adopt: the refusal's message, or `None` when there are none.
async fn claimed_objects(
    ctx: &Context,
    release: &Release,
    keyed: &[(ObjectKey, &Object)],
    live: &HashMap<ObjectKey, serde_json::Value>,
) -> Option<String> {
    let claimed = ownership::claimed_by_others(release, keyed, live);
    if claimed.is_empty() {
        return None;
    }
    // A label naming a Release that is gone claims nothing.
    let mut exists: HashMap<ownership::Owner, Known> = HashMap::new();
    let mut refused = Vec::new();
    for (key, owner) in claimed {
        let known = match exists.get(&owner) {
            Some(known) => *known,
            None => {
                let known = release_exists(ctx, release, &owner).await;
                exists.insert(owner.clone(), known);
                known
            }
        };
        match known {
            Known::Present => refused.push(format!("{key} belongs to {owner}")),
            Known::Unreadable => refused.push(format!(
                "{key} is labelled as {owner}'s, which this Release may not read"
            )),
            Known::Absent => {}
        }
    }
    if refused.is_empty() {
        return None;
    }
    Some(format!(
        "nothing was applied: {} (to hand an object over, set the annotation {}: \"true\" on it in this render)",
        first_of(&refused, 5),
        ownership::ADOPT_ANNOTATION
    ))
}

/// Whether the Release an ownership label names exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Known {
    Present,
    Absent,
    /// Not to be read by this Release: counts as present (never take an object by mistake).
    Unreadable,
}

/// Whether the Release an ownership label names exists, read as the Release's tenant when the
/// label names another namespace and the daemon keeps tenants to theirs: read as convoy, the
/// answer told a tenant which Releases exist in namespaces it may not read (it labels an
/// object of its own for one and watches whether its sync is refused). Unknown (unreadable)
/// counts as present: never take an object by mistake.
async fn release_exists(ctx: &Context, release: &Release, owner: &ownership::Owner) -> Known {
    // Label values (an object's, anyone's) allow `..`: not a path to read.
    if crate::engine::render::object::address_trouble(&owner.0.namespace, &owner.0.name).is_some() {
        return Known::Unreadable;
    }
    let elsewhere = release.metadata.namespace.as_deref() != Some(owner.0.namespace.as_str());
    let client = if elsewhere && !ctx.tenancy.allow_cross_namespace_refs {
        match ctx.tenancy.connection_for(&ctx.home, release) {
            Ok(tenant) => tenant.client,
            Err(_) => return Known::Unreadable,
        }
    } else {
        ctx.home.client.clone()
    };
    let api: kube::Api<Release> = kube::Api::namespaced(client, &owner.0.namespace);
    match api.get_opt(&owner.0.name).await {
        Ok(None) => Known::Absent,
        Ok(Some(_)) => Known::Present,
        Err(kube::Error::Api(e)) if e.code == 403 => Known::Unreadable,
        Err(_) => Known::Present,
    }
}

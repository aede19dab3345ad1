//! Objects whose kind the cluster does not serve yet, but will during the sync: a
//! CustomResourceDefinition of the render defines it (the apply installs CRDs first), or the
//! object says `argocd.argoproj.io/sync-options: SkipDryRunOnMissingResource=true` (something
//! else installs it: an operator an earlier wave applies). No dry run before the first wave
//! can accept them, so the dry-run gate and `convoy diff` leave them out instead of refusing
//! the render; their wave's apply asks discovery again.

use std::collections::BTreeSet;

use super::{Applier, Prepared};
use crate::engine::apply::resources::ResolveKindError;
use crate::engine::render::Object;
use crate::engine::sync_options::{self, ARGO_SYNC_OPTIONS, SKIP_DRY_RUN_ON_MISSING_RESOURCE};

/// Group-versions asked about again at most before a wave's apply.
const ASK_AGAIN_UP_TO: usize = 16;

/// Why an object of a kind the cluster does not serve is not refused for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KindToCome {
    /// A CustomResourceDefinition of the render defines the kind.
    Defined,
    /// The object skips the dry run while its kind is missing (Argo CD's option).
    Awaited,
}

impl KindToCome {
    /// Why the object was not dry-run, as `convoy diff` says it.
    pub fn note(self) -> String {
        match self {
            KindToCome::Defined => {
                "not dry-run: its kind is not served yet, a CustomResourceDefinition of the render defines it".into()
            }
            KindToCome::Awaited => format!(
                "not dry-run: its kind is not served yet, and it says {ARGO_SYNC_OPTIONS}: {SKIP_DRY_RUN_ON_MISSING_RESOURCE}"
            ),
        }
    }
}

/// The kinds, as (group, kind), the CustomResourceDefinitions among `objects` define.
pub fn defined_kinds(objects: &[Object]) -> BTreeSet<(String, String)> {
    objects
        .iter()
        .filter(|o| o.kind() == "CustomResourceDefinition")
        .map(|o| {
            let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
            (
                text(&o.0["spec"]["group"]),
                text(&o.0["spec"]["names"]["kind"]),
            )
        })
        .collect()
}

impl Applier {
    /// Whether discovery (as cached) says the cluster does not serve `object`'s kind.
    pub(super) async fn kind_unserved(&self, object: &Object) -> bool {
        matches!(
            self.resources
                .resolve(object.api_version(), object.kind())
                .await,
            Err(ResolveKindError::Unknown { .. })
        )
    }

    /// Whether `object`, of a kind the cluster does not serve, is to wait for its kind rather
    /// than be refused, and why (`defined`: the render's [`defined_kinds`]).
    pub async fn kind_to_come(
        &self,
        object: &Object,
        defined: &BTreeSet<(String, String)>,
    ) -> Option<KindToCome> {
        let why = if defined.contains(&(object.group().to_string(), object.kind().to_string())) {
            KindToCome::Defined
        } else if sync_options::skips_dry_run_when_missing(&object.0) {
            KindToCome::Awaited
        } else {
            return None;
        };
        self.kind_unserved(object).await.then_some(why)
    }

    /// Before a wave's apply: forget what discovery said of the kinds its awaited objects are
    /// missing, so the apply asks again (the dry run's answer is seconds old, and the kind
    /// may have come since: the operator of an earlier wave installed its CRD). At most
    /// [`ASK_AGAIN_UP_TO`] group-versions a wave: a render naming a thousand made-up ones
    /// would otherwise send as many discovery requests at each sync, one at a time, on the
    /// cache every Release of the cluster shares (beyond them, discovery's answer is asked
    /// again once it is [`MISS_RETRY`](crate::engine::apply::resources::MISS_RETRY) old).
    pub(super) async fn ask_again_for_awaited_kinds(
        &self,
        objects: &[&Object],
    ) -> BTreeSet<String> {
        let mut forgotten = BTreeSet::new();
        for object in objects {
            if forgotten.len() >= ASK_AGAIN_UP_TO {
                break;
            }
            if sync_options::skips_dry_run_when_missing(&object.0)
                && !forgotten.contains(object.api_version())
                && self.kind_unserved(object).await
            {
                self.resources.forget(object.api_version());
                forgotten.insert(object.api_version());
            }
        }
        forgotten.into_iter().map(str::to_string).collect()
    }

    /// An awaited object whose kind came by its wave, when the live object of its name is
    /// another Release's and the render does not adopt it: why it is refused. The comparison
    /// could not read it (its kind was unknown), so the ownership check every other object
    /// gets before the dry run did not see it; without this, the forced apply took it over.
    pub(super) async fn claimed_at_its_wave(
        &self,
        object: &Object,
        prepared: &Prepared,
    ) -> Option<String> {
        use crate::engine::ownership::{Owner, adopts};
        let ours = Owner::of_live(&prepared.body)?;
        let live = self
            .api_for(prepared)
            .get_opt(&prepared.name)
            .await
            .ok()??;
        let theirs = Owner::of_live(&serde_json::to_value(live).ok()?)?;
        (ours != theirs && !adopts(object)).then(|| {
            format!(
                "belongs to {theirs}: its kind was served only from this wave on, after the check of whose objects the render takes; convoy.kumodo.io/adopt: \"true\" hands it over"
            )
        })
    }

    /// What an awaited object's refusal adds when its kind is still missing at its wave.
    pub(super) async fn still_awaited(&self, object: &Object) -> Option<String> {
        (sync_options::skips_dry_run_when_missing(&object.0) && self.kind_unserved(object).await)
            .then(|| {
                format!(
                    " yet: {ARGO_SYNC_OPTIONS}: {SKIP_DRY_RUN_ON_MISSING_RESOURCE} left it out of the dry run, and a sync applies it once its kind is served"
                )
            })
    }
}

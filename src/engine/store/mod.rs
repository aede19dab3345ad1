//! The render store: past renders and a history per Release, so convoy can pin to, and roll
//! back to, a render without rendering again.
//!
//! Design: DESIGN.md "Render store" (a trait, two backends; keys
//! `<namespace>/<release>/renders/<renderRef>` and `<namespace>/<release>/history`); spec:
//! reconcile-flow.txt stageSync steps 2, 8, 9 and finalize step 6.

pub mod dir;
pub mod known;
pub mod kube;
pub mod orphans;

use std::collections::BTreeSet;
use std::io::{Read, Write};

use futures::future::BoxFuture;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::{Deserialize, Serialize};

use crate::engine::render::Object;

/// Why the store failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("render store: cannot {action} {key}")]
    Io {
        action: &'static str,
        key: String,
        #[source]
        source: std::io::Error,
    },
    #[error("render store: cannot {action} {key}")]
    Api {
        action: &'static str,
        key: String,
        #[source]
        source: Box<::kube::Error>,
    },
    #[error(
        "render store: namespace {namespace} does not exist; `convoy install` creates it, or choose another store with --render-store"
    )]
    NoNamespace { namespace: String },
    #[error("render store: {render_ref:?} is not a renderRef (64 lowercase hex characters)")]
    InvalidRef { render_ref: String },
    #[error("render store: {key} is damaged: {message}")]
    Corrupt { key: String, message: String },
    #[error(
        "render store: {key} is {bytes} bytes gzip'd, more than the {most} a render may take; split the Release"
    )]
    TooLarge {
        key: String,
        bytes: usize,
        most: usize,
    },
}

impl crate::engine::error::Categorized for StoreError {
    fn category(&self) -> crate::engine::error::Category {
        use crate::engine::error::Category;
        match self {
            StoreError::Api { source, .. } => crate::engine::error::kube_category(source),
            StoreError::NoNamespace { .. }
            | StoreError::InvalidRef { .. }
            | StoreError::TooLarge { .. } => Category::Invalid,
            StoreError::Io { .. } | StoreError::Corrupt { .. } => Category::Failed,
        }
    }
}

/// One render in a Release's history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HistoryEntry {
    pub render_ref: String,
    pub recorded_at: Time,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_revision: Option<String>,
    /// How the render's rollout ended, once it has (absent: applied, no rollout result yet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<HistoryOutcome>,
    /// What the render takes in the store (gzip'd bytes), for the store's budget per
    /// Release; absent in entries written before convoy recorded it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stored_bytes: Option<u64>,
}

/// The end of a recorded render's rollout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum HistoryOutcome {
    Succeeded,
    Failed,
    RolledBack,
}

impl HistoryOutcome {
    /// The words `convoy history` shows.
    pub fn as_str(self) -> &'static str {
        match self {
            HistoryOutcome::Succeeded => "succeeded",
            HistoryOutcome::Failed => "failed",
            HistoryOutcome::RolledBack => "rolled back",
        }
    }
}

/// The history with `outcome` set on the newest entry of `render_ref`; `None` when nothing
/// changes (no such entry, or it says so already).
pub fn with_outcome(
    mut history: Vec<HistoryEntry>,
    render_ref: &str,
    outcome: HistoryOutcome,
) -> Option<Vec<HistoryEntry>> {
    let entry = history
        .iter_mut()
        .rev()
        .find(|e| e.render_ref == render_ref)?;
    if entry.outcome == Some(outcome) {
        return None;
    }
    entry.outcome = Some(outcome);
    Some(history)
}

pub use crate::engine::api::ReleaseId;

/// Where renders are kept. Implementations: [`kube::KubernetesStore`] (gzip'd renders in
/// Secrets, the daemon's default) and [`dir::DirStore`] (a local directory).
pub trait RenderStore: Send + Sync {
    /// Store a render (overwriting an equal one is harmless).
    fn put_render<'a>(
        &'a self,
        id: &'a ReleaseId,
        render_ref: &'a str,
        objects: &'a [Object],
    ) -> BoxFuture<'a, Result<(), StoreError>>;
    /// A stored render, or `None`.
    fn get_render<'a>(
        &'a self,
        id: &'a ReleaseId,
        render_ref: &'a str,
    ) -> BoxFuture<'a, Result<Option<Vec<Object>>, StoreError>>;
    /// How many bytes a render takes in the store (gzip'd), or `None` when it is not stored
    /// (or is damaged: persistRender writes it again).
    fn render_bytes<'a>(
        &'a self,
        id: &'a ReleaseId,
        render_ref: &'a str,
    ) -> BoxFuture<'a, Result<Option<u64>, StoreError>>;
    /// Whether a render is stored.
    fn has_render<'a>(
        &'a self,
        id: &'a ReleaseId,
        render_ref: &'a str,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move { Ok(self.render_bytes(id, render_ref).await?.is_some()) })
    }
    /// Every stored render of a Release.
    fn list_renders<'a>(
        &'a self,
        id: &'a ReleaseId,
    ) -> BoxFuture<'a, Result<Vec<String>, StoreError>>;
    fn delete_render<'a>(
        &'a self,
        id: &'a ReleaseId,
        render_ref: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>>;
    /// The history, oldest first.
    fn history<'a>(
        &'a self,
        id: &'a ReleaseId,
    ) -> BoxFuture<'a, Result<Vec<HistoryEntry>, StoreError>>;
    fn put_history<'a>(
        &'a self,
        id: &'a ReleaseId,
        entries: &'a [HistoryEntry],
    ) -> BoxFuture<'a, Result<(), StoreError>>;
    /// Remove everything of a Release (finalize step 6).
    fn delete_prefix<'a>(&'a self, id: &'a ReleaseId) -> BoxFuture<'a, Result<(), StoreError>>;
    /// Every Release the store holds something of, with when its newest piece was written.
    fn stored_releases(&self) -> BoxFuture<'_, Result<Vec<StoredRelease>, StoreError>>;
}

/// A Release the store holds renders or a history of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredRelease {
    pub id: ReleaseId,
    /// When the newest of its pieces was written, if the store can tell.
    pub newest: Option<std::time::SystemTime>,
}

/// Which store to use, as the `--render-store` flag says it: `kubernetes` (Secrets in the
/// default store namespace), `kubernetes:NAMESPACE`, `dir:PATH`, or `none`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreSpec {
    Kubernetes { namespace: Option<String> },
    Dir(std::path::PathBuf),
    None,
}

impl std::str::FromStr for StoreSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.split_once(':') {
            None if s == "kubernetes" => Ok(Self::Kubernetes { namespace: None }),
            None if s == "none" => Ok(Self::None),
            Some(("kubernetes", ns)) if !ns.is_empty() => Ok(Self::Kubernetes {
                namespace: Some(ns.to_string()),
            }),
            Some(("dir", path)) if !path.is_empty() => Ok(Self::Dir(path.into())),
            _ => Err(format!(
                "`{s}` is not a render store: use kubernetes, kubernetes:NAMESPACE, dir:PATH or none"
            )),
        }
    }
}

impl StoreSpec {
    /// Open the store; `default_namespace` is where `kubernetes` keeps its Secrets.
    pub fn open(
        &self,
        client: &::kube::Client,
        default_namespace: &str,
    ) -> Option<std::sync::Arc<dyn RenderStore>> {
        match self {
            Self::Kubernetes { namespace } => {
                Some(std::sync::Arc::new(kube::KubernetesStore::new(
                    client.clone(),
                    namespace.as_deref().unwrap_or(default_namespace),
                )))
            }
            Self::Dir(path) => Some(std::sync::Arc::new(dir::DirStore::new(path.clone()))),
            Self::None => None,
        }
    }
}

/// The namespace of the Kubernetes store when none is named: where `convoy install` puts the
/// daemon.
pub const DEFAULT_STORE_NAMESPACE: &str = "convoy-system";

/// A render as stored: gzip'd JSON array of the objects.
pub fn encode(objects: &[Object]) -> Vec<u8> {
    let values: Vec<&serde_json::Value> = objects.iter().map(|o| &o.0).collect();
    let json = serde_json::to_vec(&values).unwrap_or_default();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    // Writing into a Vec cannot fail.
    let _ = gz.write_all(&json);
    gz.finish().unwrap_or_default()
}

/// The most a stored render may unpack to: four times what a plain-YAML source may hold.
/// Whoever can write the store's Secrets could otherwise plant a small gzip that unpacks to
/// gigabytes in the daemon's memory.
pub const MAX_DECODED_BYTES: u64 = 256 * 1024 * 1024;

/// Decode the render stored under `render_ref`. Its objects must hash to that ref: a pin or a
/// rollback applies what the store returns, and whoever can write the store's Secrets (or
/// files) could otherwise put other objects under a ref someone reviewed.
pub fn decode(key: &str, bytes: &[u8], render_ref: &str) -> Result<Vec<Object>, StoreError> {
    let objects = decode_at_most(key, bytes, MAX_DECODED_BYTES)?;
    let actual = crate::engine::render::render_ref::render_ref(&objects);
    if actual != render_ref {
        return Err(StoreError::Corrupt {
            key: key.to_string(),
            message: format!(
                "its objects are render {}, not the render it is stored as",
                crate::engine::render::render_ref::short(&actual)
            ),
        });
    }
    crate::engine::render::release::addressable(&objects).map_err(|e| StoreError::Corrupt {
        key: key.to_string(),
        message: format!("it holds an object convoy cannot address: {}", e.0),
    })?;
    Ok(objects)
}

fn decode_at_most(key: &str, bytes: &[u8], most: u64) -> Result<Vec<Object>, StoreError> {
    let corrupt = |message: String| StoreError::Corrupt {
        key: key.to_string(),
        message,
    };
    let mut json = Vec::new();
    flate2::read::GzDecoder::new(bytes)
        .take(most + 1)
        .read_to_end(&mut json)
        .map_err(|e| corrupt(format!("not gzip: {e}")))?;
    if json.len() as u64 > most {
        return Err(corrupt(format!("it unpacks to more than {most} bytes")));
    }
    let values: Vec<serde_json::Value> =
        serde_json::from_slice(&json).map_err(|e| corrupt(format!("not JSON: {e}")))?;
    Ok(values.into_iter().map(Object).collect())
}

/// `recordHistory` (reconcile-flow stageSync step 8): append `entry` if its render is not in
/// the history yet. A render applied again (a revert, an unpin) keeps its first entry.
pub fn with_entry(
    mut history: Vec<HistoryEntry>,
    entry: HistoryEntry,
) -> Option<Vec<HistoryEntry>> {
    if history.iter().any(|h| h.render_ref == entry.render_ref) {
        return None;
    }
    history.push(entry);
    Some(history)
}

/// The most a Release's history may hold in the store (gzip'd renders), beside the renders
/// its status refers to: `maxHistory` bounds the count, this the bytes. A render may take up
/// to 44 MiB, so 100 entries of them were 4.4 GiB of Secrets in convoy's namespace — beyond
/// etcd's default quota (2 GiB), from one tenant's Release (found by an attack).
pub const STORE_BUDGET_BYTES: u64 = 64 << 20;

/// How many of the newest entries of `history` runGC keeps: at most `max_history`, and no
/// more than fit in `budget` bytes (the newest is kept whatever its size; an entry that does
/// not say its size counts as nothing).
pub fn entries_within(history: &[HistoryEntry], max_history: usize, budget: u64) -> usize {
    let mut total: u64 = 0;
    let mut kept = 0;
    for entry in history.iter().rev().take(max_history.max(1)) {
        total = total.saturating_add(entry.stored_bytes.unwrap_or(0));
        if kept > 0 && total > budget {
            break;
        }
        kept += 1;
    }
    kept
}

/// What `runGC` keeps and deletes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GcPlan {
    pub history: Vec<HistoryEntry>,
    pub delete: Vec<String>,
}

/// `runGC`: keep the newest `max_history` history entries; delete every stored render that
/// no kept entry and none of `referenced` (lastSuccessful, lastAttempted, the pin,
/// lastHealthy) names.
pub fn plan_gc(
    history: &[HistoryEntry],
    stored: &[String],
    max_history: usize,
    referenced: &[&str],
) -> GcPlan {
    let keep_from = history.len().saturating_sub(max_history.max(1));
    let kept: Vec<HistoryEntry> = history[keep_from..].to_vec();
    let mut keep: BTreeSet<&str> = kept.iter().map(|h| h.render_ref.as_str()).collect();
    keep.extend(referenced.iter().copied());
    let delete = stored
        .iter()
        .filter(|r| !keep.contains(r.as_str()))
        .cloned()
        .collect();
    GcPlan {
        history: kept,
        delete,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A render that unpacks beyond the bound is damaged, read no further than the bound.
    #[test]
    fn a_render_that_unpacks_beyond_the_bound_is_damaged() {
        let objects: Vec<Object> = (0..50)
            .map(|i| {
                Object(
                    serde_json::json!({"kind": "ConfigMap", "metadata": {"name": format!("c{i}")}}),
                )
            })
            .collect();
        let bytes = encode(&objects);
        assert_eq!(decode_at_most("k", &bytes, 1 << 20).unwrap(), objects);
        let e = decode_at_most("k", &bytes, 100).unwrap_err();
        assert_eq!(
            e.to_string(),
            "render store: k is damaged: it unpacks to more than 100 bytes"
        );
    }

    fn entry(r: &str) -> HistoryEntry {
        HistoryEntry {
            outcome: None,
            render_ref: r.into(),
            recorded_at: Time("2026-01-01T00:00:00Z".parse().unwrap()),
            source_revision: None,
            stored_bytes: None,
        }
    }

    fn sized(bytes: &[Option<u64>]) -> Vec<HistoryEntry> {
        bytes
            .iter()
            .enumerate()
            .map(|(i, b)| HistoryEntry {
                stored_bytes: *b,
                ..entry(&format!("r{i}"))
            })
            .collect()
    }

    /// The history keeps its newest entries while they fit in the budget and maxHistory;
    /// the newest stays even when it alone is larger; unsized entries cost nothing.
    #[test]
    fn the_history_keeps_the_newest_entries_that_fit_the_budget() {
        let history = sized(&[Some(40), Some(30), Some(20), Some(10)]);
        assert_eq!(entries_within(&history, 10, 100), 4);
        assert_eq!(entries_within(&history, 10, 59), 2);
        assert_eq!(entries_within(&history, 10, 60), 3);
        assert_eq!(entries_within(&history, 2, 1000), 2);
        assert_eq!(entries_within(&sized(&[Some(10), Some(500)]), 10, 100), 1);
        assert_eq!(entries_within(&sized(&[None, None, Some(100)]), 10, 100), 3);
        assert_eq!(entries_within(&[], 10, 100), 0);
    }

    #[test]
    fn store_specs_parse() {
        assert_eq!(
            "kubernetes".parse::<StoreSpec>(),
            Ok(StoreSpec::Kubernetes { namespace: None })
        );
        assert_eq!(
            "kubernetes:stores".parse::<StoreSpec>(),
            Ok(StoreSpec::Kubernetes {
                namespace: Some("stores".into())
            })
        );
        assert_eq!(
            "dir:/tmp/x".parse::<StoreSpec>(),
            Ok(StoreSpec::Dir("/tmp/x".into()))
        );
        assert_eq!("none".parse::<StoreSpec>(), Ok(StoreSpec::None));
        assert!("s3://bucket".parse::<StoreSpec>().is_err());
        assert!("dir:".parse::<StoreSpec>().is_err());
    }

    #[test]
    fn renders_round_trip_through_gzip() {
        let objects = vec![Object(
            serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}),
        )];
        let r = crate::engine::render::render_ref::render_ref(&objects);
        assert_eq!(decode("k", &encode(&objects), &r).unwrap(), objects);
        assert!(
            decode("k", b"not gzip", &r)
                .unwrap_err()
                .to_string()
                .contains("damaged")
        );
    }

    /// Floats that need all 17 digits come back exactly, so such a render is not damaged.
    #[test]
    fn a_render_with_long_floats_reads_back_as_itself() {
        let objects = vec![Object(serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"},
            "spec": {"values": [123456789.12345679_f64, 0.1, 1e-300, 2.2250738585072014e-308,
                5e-324, 9007199254740993.0, 1.7976931348623157e308]},
        }))];
        let r = crate::engine::render::render_ref::render_ref(&objects);
        assert_eq!(decode("k", &encode(&objects), &r).unwrap(), objects);
    }

    /// Objects stored under another render's ref are refused, whatever they are.
    #[test]
    fn a_render_stored_under_another_ref_is_damaged() {
        let reviewed = vec![Object(
            serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}),
        )];
        let planted = vec![Object(
            serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b"}}),
        )];
        let r = crate::engine::render::render_ref::render_ref(&reviewed);
        let planted_ref = crate::engine::render::render_ref::render_ref(&planted);
        assert_eq!(
            decode("apps/web/renders/r", &encode(&planted), &r)
                .unwrap_err()
                .to_string(),
            format!(
                "render store: apps/web/renders/r is damaged: its objects are render {}, not the render it is stored as",
                &planted_ref[..12]
            )
        );
    }

    #[test]
    fn history_appends_only_a_new_render() {
        let h = with_entry(vec![], entry("a")).unwrap();
        assert!(with_entry(h.clone(), entry("a")).is_none());
        let h = with_entry(h, entry("b")).unwrap();
        assert_eq!(h.len(), 2);
        assert!(with_entry(h, entry("a")).is_none(), "a is there already");
    }

    #[test]
    fn gc_keeps_max_history_and_every_referenced_render() {
        let history: Vec<HistoryEntry> = ["a", "b", "c", "d"].iter().map(|r| entry(r)).collect();
        let stored: Vec<String> = ["a", "b", "c", "d", "x"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let plan = plan_gc(&history, &stored, 2, &["a"]);
        let kept: Vec<&str> = plan.history.iter().map(|h| h.render_ref.as_str()).collect();
        assert_eq!(kept, ["c", "d"]);
        assert_eq!(
            plan.delete,
            ["b", "x"],
            "a is still referenced (say, lastHealthy)"
        );
    }

    /// A render stored before names were checked (or planted by whoever can write the store)
    /// is not applied by a pin or a rollback if a name would change a request's path.
    #[test]
    fn a_stored_render_with_a_name_no_path_carries_is_refused() {
        let objects = vec![Object(serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "x#", "namespace": "apps"}
        }))];
        let render_ref = crate::engine::render::render_ref::render_ref(&objects);
        let err = decode("k", &encode(&objects), &render_ref).unwrap_err();
        assert_eq!(
            err.to_string(),
            "render store: k is damaged: it holds an object convoy cannot address: ConfigMap v1: metadata.name \"x#\" may not contain /, %, ? or #"
        );
    }
}

//! Operational requests on a Release: /sync, forced /sync and the pin, written as annotations
//! so they never bump `metadata.generation` (DESIGN.md section 1).
//!
//! Every request also sets `sync-requested-at`, because that annotation is what wakes the
//! controller. The values are RFC 3339 times with nanoseconds, so two requests in one second
//! are still two requests.

use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use crate::engine::api::{Release, annotations, field_managers};

/// The annotation values a request wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncRequest {
    pub sync_requested_at: String,
    pub force_requested_at: Option<String>,
}

/// Write a /sync (or, with `force`, a forced /sync) request on Release `name`, under
/// [`field_managers::REQUESTS`] whoever asks.
pub async fn request_sync(
    api: &Api<Release>,
    name: &str,
    force: bool,
) -> Result<SyncRequest, kube::Error> {
    let at = jiff::Timestamp::now().to_string();
    let mut annotations_patch = serde_json::Map::new();
    annotations_patch.insert(annotations::SYNC_REQUESTED_AT.into(), json!(at));
    if force {
        annotations_patch.insert(annotations::FORCE_SYNC_REQUESTED_AT.into(), json!(at));
    }
    let patch = json!({"metadata": {"annotations": annotations_patch}});
    let params = PatchParams {
        field_manager: Some(field_managers::REQUESTS.as_str().to_string()),
        ..Default::default()
    };
    api.patch(name, &params, &Patch::Merge(&patch)).await?;
    Ok(SyncRequest {
        sync_requested_at: at.clone(),
        force_requested_at: force.then_some(at),
    })
}

/// Set (`Some`) or clear (`None`) the pin, with a /sync request.
pub async fn set_pin(
    api: &Api<Release>,
    name: &str,
    render_ref: Option<&str>,
) -> Result<String, kube::Error> {
    let at = jiff::Timestamp::now().to_string();
    let patch = json!({"metadata": {"annotations": {
        annotations::PIN: render_ref,
        annotations::SYNC_REQUESTED_AT: at,
    }}});
    let params = PatchParams {
        field_manager: Some(field_managers::REQUESTS.as_str().to_string()),
        ..Default::default()
    };
    api.patch(name, &params, &Patch::Merge(&patch)).await?;
    Ok(at)
}

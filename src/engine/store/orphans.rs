//! Renders and histories whose Release is gone.
//!
//! The Release's finalizer deletes them (reconcile-flow "finalize" step 6), but whoever may
//! write the Release can remove the finalizer and delete it: its renders (up to 44 MiB each)
//! and its history then stayed in the store's namespace for ever, outside any tenant's quota,
//! and a tenant doing it in a loop filled that namespace (found by an attack). The daemon
//! sweeps them as Flux's source-controller collects the artifacts of deleted sources.

use std::time::{Duration, SystemTime};

use kube::{Api, Client};

use super::{RenderStore, StoreError};
use crate::engine::api::Release;

/// A piece written this recently is left alone: a Release deleted and made again under the
/// same name (its first render stored before a sweep's read of it) keeps what it stores.
pub const SETTLED: Duration = Duration::from_secs(600);

/// Why a sweep stopped.
#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("cannot list the Releases")]
    List {
        #[source]
        source: Box<kube::Error>,
    },
}

/// Delete what the store holds of Releases that no longer exist, when nothing of it was
/// written within [`SETTLED`]. Returns the Releases swept, as `namespace/name`.
pub async fn sweep(client: &Client, store: &dyn RenderStore) -> Result<Vec<String>, SweepError> {
    sweep_settled(client, store, SETTLED).await
}

/// [`sweep`] with another settling time (tests).
///
/// The Releases that exist are listed first, across namespaces: a list that fails (the kind
/// not served, as during an upgrade that drops its version; no permission) sweeps nothing,
/// where a GET's 404 alone would have read every Release as gone. A Release the list does
/// not name is read again before its pieces go (it may have been made since); a read that
/// fails leaves it and the sweep goes on.
pub async fn sweep_settled(
    client: &Client,
    store: &dyn RenderStore,
    settled: Duration,
) -> Result<Vec<String>, SweepError> {
    let now = SystemTime::now();
    let candidates: Vec<_> = store
        .stored_releases()
        .await?
        .into_iter()
        .filter(|stored| {
            stored
                .newest
                .is_some_and(|t| now.duration_since(t).unwrap_or_default() >= settled)
        })
        .collect();
    if candidates.is_empty() {
        return Ok(Vec::new());
    }
    let existing = existing_releases(client).await?;
    let mut swept = Vec::new();
    for stored in candidates {
        let id = &stored.id;
        if existing.contains(&(id.namespace.clone(), id.name.clone())) {
            continue;
        }
        let releases: Api<Release> = Api::namespaced(client.clone(), &id.namespace);
        match releases.get_metadata_opt(&id.name).await {
            Ok(None) => {}
            Ok(Some(_)) => continue,
            Err(e) => {
                tracing::warn!(release = %id, "render store sweep: cannot read the Release, its renders stay: {e}");
                continue;
            }
        }
        match store.delete_prefix(id).await {
            Ok(()) => swept.push(format!("{}/{}", id.namespace, id.name)),
            Err(e) => {
                tracing::warn!(release = %id, "render store sweep: {}", crate::engine::error::chain(&e))
            }
        }
    }
    Ok(swept)
}

/// Every Release's `(namespace, name)`, listed in pages.
async fn existing_releases(
    client: &Client,
) -> Result<std::collections::HashSet<(String, String)>, SweepError> {
    let releases: Api<Release> = Api::all(client.clone());
    let mut existing = std::collections::HashSet::new();
    let mut params = kube::api::ListParams::default().limit(500);
    loop {
        let page = releases
            .list_metadata(&params)
            .await
            .map_err(|source| SweepError::List {
                source: Box::new(source),
            })?;
        for release in &page.items {
            existing.insert((
                release.metadata.namespace.clone().unwrap_or_default(),
                release.metadata.name.clone().unwrap_or_default(),
            ));
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(existing),
        }
    }
}

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
    #[error("cannot read Release {namespace}/{name}")]
    Read {
        namespace: String,
        name: String,
        #[source]
        source: Box<kube::Error>,
    },
}

/// Delete what the store holds of Releases that no longer exist, read fresh from the API
/// server (not a cache that may lag), when nothing of it was written within [`SETTLED`].
/// Returns the Releases swept, as `namespace/name`.
pub async fn sweep(client: &Client, store: &dyn RenderStore) -> Result<Vec<String>, SweepError> {
    sweep_settled(client, store, SETTLED).await
}

/// [`sweep`] with another settling time (tests).
pub async fn sweep_settled(
    client: &Client,
    store: &dyn RenderStore,
    settled: Duration,
) -> Result<Vec<String>, SweepError> {
    let now = SystemTime::now();
    let mut swept = Vec::new();
    for stored in store.stored_releases().await? {
        let recent = stored
            .newest
            .is_none_or(|t| now.duration_since(t).unwrap_or_default() < settled);
        if recent {
            continue;
        }
        let id = &stored.id;
        let releases: Api<Release> = Api::namespaced(client.clone(), &id.namespace);
        let exists = releases
            .get_metadata_opt(&id.name)
            .await
            .map_err(|source| SweepError::Read {
                namespace: id.namespace.clone(),
                name: id.name.clone(),
                source: Box::new(source),
            })?
            .is_some();
        if !exists {
            store.delete_prefix(id).await?;
            swept.push(format!("{}/{}", id.namespace, id.name));
        }
    }
    Ok(swept)
}

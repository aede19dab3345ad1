//! The render store in Kubernetes Secrets (the daemon's default): each render gzip'd and
//! split into chunks well under the 1 MiB object limit, labelled by its Release.

use futures::future::BoxFuture;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{DeleteParams, ListParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use sha2::{Digest, Sha256};

use super::{HistoryEntry, ReleaseId, RenderStore, StoreError, decode, encode};
use crate::engine::api::field_managers;
use crate::engine::render::Object;
use crate::engine::ssa;

/// Bytes of render per Secret: the Secret, its metadata and base64 stay under 1 MiB.
pub const CHUNK_BYTES: usize = 700 * 1024;

const OWNER: &str = "convoy.kumodo.io/store-owner";
const KIND: &str = "convoy.kumodo.io/store";
const REF_LABEL: &str = "convoy.kumodo.io/render-ref";
const REF_ANNOTATION: &str = "convoy.kumodo.io/render-ref";
const CHUNK_ANNOTATION: &str = "convoy.kumodo.io/chunk";
const RELEASE_ANNOTATION: &str = "convoy.kumodo.io/release";
/// The gzip'd bytes of the whole render (on every chunk).
const BYTES_ANNOTATION: &str = "convoy.kumodo.io/bytes";

/// A store in the Secrets of one namespace.
#[derive(Clone)]
pub struct KubernetesStore {
    api: Api<Secret>,
    namespace: String,
}

impl KubernetesStore {
    pub fn new(client: Client, namespace: &str) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_string(),
        }
    }

    pub fn namespace(&self) -> &str {
        &self.namespace
    }
}

/// The most chunks a render may claim (44 MiB of gzip'd render): a chunk's annotation is read
/// from the store's namespace, and a count beyond this is corrupt, not a loop to run.
const MAX_CHUNKS: usize = 64;

/// The name of chunk `i` of a render: known without asking the API server, so a render is
/// found by GETs of its names instead of a LIST by label. The API server's cache serves a
/// label-selected LIST by testing every Secret of the namespace, and the store's namespace
/// holds every Release's renders: at 10,000 Releases persistRender's LIST cost it about
/// 60 ms of CPU each and grew with every Release stored (issue 21, scale_10k).
fn chunk_name(id: &ReleaseId, render_ref: &str, i: usize) -> String {
    let short = render_ref.get(..16).unwrap_or(render_ref);
    format!("convoy-render-{}-{short}-{i}", owner(id))
}

/// A short, label-safe id of a Release (names may be longer than a label value).
fn owner(id: &ReleaseId) -> String {
    hex::encode(&Sha256::digest(format!("{}/{}", id.namespace, id.name).as_bytes())[..8])
}

fn ref_label(render_ref: &str) -> &str {
    render_ref.get(..32).unwrap_or(render_ref)
}

fn api_err(action: &'static str, key: String) -> impl FnOnce(kube::Error) -> StoreError {
    move |source| StoreError::Api {
        action,
        key,
        source: Box::new(source),
    }
}

/// A write that failed because the store's namespace does not exist says how to fix it.
fn write_err<'a>(namespace: &'a str, key: String) -> impl FnOnce(kube::Error) -> StoreError + 'a {
    move |source| match &source {
        kube::Error::Api(s) if s.code == 404 => StoreError::NoNamespace {
            namespace: namespace.to_string(),
        },
        _ => api_err("write", key)(source),
    }
}

impl KubernetesStore {
    /// The chunks of a render, read by name: empty when its first chunk is missing or belongs
    /// to another render (the names hold 16 characters of the renderRef, the annotation all of
    /// it); an error when a later chunk is missing or the count is beyond [`MAX_CHUNKS`].
    async fn chunks(&self, id: &ReleaseId, render_ref: &str) -> Result<Vec<Secret>, StoreError> {
        let key = id.render_key(render_ref);
        let read = |i| {
            let name = chunk_name(id, render_ref, i);
            let key = key.clone();
            async move { self.api.get_opt(&name).await.map_err(api_err("read", key)) }
        };
        self.by_name(id, render_ref, read).await
    }

    /// The metadata of a render's chunks, read by name as [`Self::chunks`] reads them:
    /// existence checks and deletes need no data, and a chunk is up to 700 KiB.
    async fn render_chunk_metadata(
        &self,
        id: &ReleaseId,
        render_ref: &str,
    ) -> Result<Vec<kube::core::PartialObjectMeta<Secret>>, StoreError> {
        let key = id.render_key(render_ref);
        let read = |i| {
            let name = chunk_name(id, render_ref, i);
            let key = key.clone();
            async move {
                self.api
                    .get_metadata_opt(&name)
                    .await
                    .map_err(api_err("read", key))
            }
        };
        self.by_name(id, render_ref, read).await
    }

    /// Chunk 0 says how many there are; the rest are read one by one.
    async fn by_name<T, F, Fut>(
        &self,
        id: &ReleaseId,
        render_ref: &str,
        read: F,
    ) -> Result<Vec<T>, StoreError>
    where
        T: ResourceExt,
        F: Fn(usize) -> Fut,
        Fut: std::future::Future<Output = Result<Option<T>, StoreError>>,
    {
        let corrupt = |message: String| StoreError::Corrupt {
            key: id.render_key(render_ref),
            message,
        };
        let Some(first) = read(0).await?.filter(|c| is_chunk_of(c, render_ref)) else {
            return Ok(Vec::new());
        };
        let n = match chunk_of(&first) {
            Some((0, n)) if (1..=MAX_CHUNKS).contains(&n) => n,
            _ => {
                return Err(corrupt(format!(
                    "Secret {} does not say it is chunk 0 of at most {MAX_CHUNKS}",
                    first.name_any()
                )));
            }
        };
        let mut chunks = vec![first];
        for i in 1..n {
            match read(i).await? {
                Some(chunk)
                    if is_chunk_of(&chunk, render_ref) && chunk_of(&chunk) == Some((i, n)) =>
                {
                    chunks.push(chunk)
                }
                _ => {
                    return Err(corrupt(format!(
                        "chunk {i} of {n} is missing or not this render's"
                    )));
                }
            }
        }
        Ok(chunks)
    }

    /// Secrets' metadata by label: for listings, the deletes of a whole Release, and what is
    /// left of a render whose first chunk is gone, which cannot know the names (a LIST by
    /// label costs the API server a test of every Secret in the namespace; the per-render
    /// paths read by name).
    async fn chunk_metadata(
        &self,
        selector: &str,
        key: String,
    ) -> Result<Vec<kube::core::PartialObjectMeta<Secret>>, StoreError> {
        Ok(self
            .api
            .list_metadata(&ListParams::default().labels(selector))
            .await
            .map_err(api_err("list", key))?
            .items)
    }

    fn render_selector(id: &ReleaseId, render_ref: &str) -> String {
        format!(
            "{OWNER}={},{KIND}=render,{REF_LABEL}={}",
            owner(id),
            ref_label(render_ref)
        )
    }
}

/// The label holds the renderRef's first 32 characters; the annotation holds all of it.
fn is_chunk_of(secret: &impl ResourceExt, render_ref: &str) -> bool {
    secret.annotations().get(REF_ANNOTATION).map(String::as_str) == Some(render_ref)
}

/// `i/n` of a chunk.
fn chunk_of(secret: &impl ResourceExt) -> Option<(usize, usize)> {
    let (i, n) = secret
        .annotations()
        .get(CHUNK_ANNOTATION)?
        .split_once('/')?;
    Some((i.parse().ok()?, n.parse().ok()?))
}

impl RenderStore for KubernetesStore {
    fn put_render<'a>(
        &'a self,
        id: &'a ReleaseId,
        render_ref: &'a str,
        objects: &'a [Object],
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let bytes = encode(objects);
            let parts: Vec<&[u8]> = bytes.chunks(CHUNK_BYTES).collect();
            let n = parts.len().max(1);
            if n > MAX_CHUNKS {
                return Err(StoreError::TooLarge {
                    key: id.render_key(render_ref),
                    bytes: bytes.len(),
                    most: MAX_CHUNKS * CHUNK_BYTES,
                });
            }
            for (i, part) in parts.iter().enumerate() {
                let name = chunk_name(id, render_ref, i);
                let secret = json!({
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "type": "convoy.kumodo.io/render",
                    "metadata": {
                        "name": name,
                        "namespace": self.namespace,
                        "labels": {OWNER: owner(id), KIND: "render", REF_LABEL: ref_label(render_ref)},
                        "annotations": {
                            REF_ANNOTATION: render_ref,
                            CHUNK_ANNOTATION: format!("{i}/{n}"),
                            BYTES_ANNOTATION: bytes.len().to_string(),
                            RELEASE_ANNOTATION: format!("{}/{}", id.namespace, id.name),
                        },
                    },
                    "data": {"render.gz": ByteString(part.to_vec())},
                });
                ssa::apply(&self.api, &name, field_managers::CONTROLLER, &secret)
                    .await
                    .map_err(write_err(&self.namespace, id.render_key(render_ref)))?;
            }
            Ok(())
        })
    }

    fn get_render<'a>(
        &'a self,
        id: &'a ReleaseId,
        render_ref: &'a str,
    ) -> BoxFuture<'a, Result<Option<Vec<Object>>, StoreError>> {
        Box::pin(async move {
            let key = id.render_key(render_ref);
            let chunks = self.chunks(id, render_ref).await?;
            if chunks.is_empty() {
                return Ok(None);
            }
            // In order, each chunk checked for its index and count (`by_name`).
            let bytes: Vec<u8> = chunks
                .iter()
                .filter_map(|c| c.data.as_ref()?.get("render.gz"))
                .flat_map(|b| b.0.iter().copied())
                .collect();
            decode(&key, &bytes, render_ref).map(Some)
        })
    }

    fn render_bytes<'a>(
        &'a self,
        id: &'a ReleaseId,
        render_ref: &'a str,
    ) -> BoxFuture<'a, Result<Option<u64>, StoreError>> {
        Box::pin(async move {
            // A render missing a chunk, or whose count is corrupt, is not stored:
            // persistRender writes it again over what is there.
            match self.render_chunk_metadata(id, render_ref).await {
                Ok(chunks) => Ok(chunks.first().map(|first| {
                    // Written before the size was: each chunk counts as full.
                    first
                        .annotations()
                        .get(BYTES_ANNOTATION)
                        .and_then(|b| b.parse().ok())
                        .unwrap_or((chunks.len() * CHUNK_BYTES) as u64)
                })),
                Err(StoreError::Corrupt { .. }) => Ok(None),
                Err(e) => Err(e),
            }
        })
    }

    fn list_renders<'a>(
        &'a self,
        id: &'a ReleaseId,
    ) -> BoxFuture<'a, Result<Vec<String>, StoreError>> {
        Box::pin(async move {
            let selector = format!("{OWNER}={},{KIND}=render", owner(id));
            let list = self.chunk_metadata(&selector, id.render_key("")).await?;
            let mut refs: Vec<String> = list
                .iter()
                .filter_map(|s| s.annotations().get(REF_ANNOTATION).cloned())
                .collect();
            refs.sort();
            refs.dedup();
            Ok(refs)
        })
    }

    fn delete_render<'a>(
        &'a self,
        id: &'a ReleaseId,
        render_ref: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            // By name when its first chunk says how many there are; else by label, whatever
            // is left of it.
            let names: Vec<String> = match self.render_chunk_metadata(id, render_ref).await {
                Ok(chunks) if !chunks.is_empty() => chunks.iter().map(|c| c.name_any()).collect(),
                Ok(_) | Err(StoreError::Corrupt { .. }) => {
                    let mut chunks = self
                        .chunk_metadata(
                            &Self::render_selector(id, render_ref),
                            id.render_key(render_ref),
                        )
                        .await?;
                    chunks.retain(|s| is_chunk_of(s, render_ref));
                    chunks.iter().map(|c| c.name_any()).collect()
                }
                Err(e) => return Err(e),
            };
            for name in names {
                match self.api.delete(&name, &DeleteParams::default()).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.code == 404 => {}
                    Err(e) => return Err(api_err("delete", id.render_key(render_ref))(e)),
                }
            }
            Ok(())
        })
    }

    fn history<'a>(
        &'a self,
        id: &'a ReleaseId,
    ) -> BoxFuture<'a, Result<Vec<HistoryEntry>, StoreError>> {
        Box::pin(async move {
            let key = id.history_key();
            let name = format!("convoy-history-{}", owner(id));
            let secret = self
                .api
                .get_opt(&name)
                .await
                .map_err(api_err("read", key.clone()))?;
            let Some(bytes) = secret
                .and_then(|s| s.data)
                .and_then(|d| d.get("history.json").map(|b| b.0.clone()))
            else {
                // No history yet, unless the store itself is missing: then say so, with
                // the fix, instead of an empty history.
                let namespaces: Api<k8s_openapi::api::core::v1::Namespace> =
                    Api::all(self.api.clone().into_client());
                if let Ok(None) = namespaces.get_opt(&self.namespace).await {
                    return Err(StoreError::NoNamespace {
                        namespace: self.namespace.clone(),
                    });
                }
                return Ok(Vec::new());
            };
            serde_json::from_slice(&bytes).map_err(|e| StoreError::Corrupt {
                key,
                message: e.to_string(),
            })
        })
    }

    fn put_history<'a>(
        &'a self,
        id: &'a ReleaseId,
        entries: &'a [HistoryEntry],
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let name = format!("convoy-history-{}", owner(id));
            let secret = json!({
                "apiVersion": "v1",
                "kind": "Secret",
                "type": "convoy.kumodo.io/history",
                "metadata": {
                    "name": name,
                    "namespace": self.namespace,
                    "labels": {OWNER: owner(id), KIND: "history"},
                    "annotations": {RELEASE_ANNOTATION: format!("{}/{}", id.namespace, id.name)},
                },
                "data": {"history.json": ByteString(serde_json::to_vec(entries).unwrap_or_default())},
            });
            ssa::apply(&self.api, &name, field_managers::CONTROLLER, &secret)
                .await
                .map_err(write_err(&self.namespace, id.history_key()))?;
            Ok(())
        })
    }

    fn stored_releases(&self) -> BoxFuture<'_, Result<Vec<super::StoredRelease>, StoreError>> {
        Box::pin(async move {
            // In pages, each folded in as it comes and dropped: at 10,000 Releases the store
            // holds 20,000 Secrets or more, and their metadata held at once (managedFields
            // and all) grew each replica by about 90 MiB for good (scale_10k run n).
            let mut found: std::collections::BTreeMap<
                (String, String),
                Option<std::time::SystemTime>,
            > = Default::default();
            let mut params = ListParams::default().labels(KIND).limit(500);
            loop {
                let page = self
                    .api
                    .list_metadata(&params)
                    .await
                    .map_err(api_err("list", "every Release".into()))?;
                for piece in &page.items {
                    let Some((namespace, name)) = piece
                        .annotations()
                        .get(RELEASE_ANNOTATION)
                        .and_then(|r| r.split_once('/'))
                    else {
                        continue;
                    };
                    let written = piece
                        .metadata
                        .creation_timestamp
                        .as_ref()
                        .map(|t| std::time::SystemTime::from(t.0));
                    let newest = found.entry((namespace.into(), name.into())).or_default();
                    *newest = (*newest).max(written);
                }
                match page.metadata.continue_.filter(|c| !c.is_empty()) {
                    Some(token) => params = params.continue_token(&token),
                    None => break,
                }
            }
            Ok(found
                .into_iter()
                .map(|((namespace, name), newest)| super::StoredRelease {
                    id: ReleaseId { namespace, name },
                    newest,
                })
                .collect())
        })
    }

    fn delete_prefix<'a>(&'a self, id: &'a ReleaseId) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            // One delete per Secret: the daemon's RBAC grants `delete`, not `deletecollection`.
            let key = format!("{}/{}", id.namespace, id.name);
            let selector = format!("{OWNER}={}", owner(id));
            for secret in self.chunk_metadata(&selector, key.clone()).await? {
                match self
                    .api
                    .delete(&secret.name_any(), &DeleteParams::default())
                    .await
                {
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.code == 404 => {}
                    Err(e) => return Err(api_err("delete", key.clone())(e)),
                }
            }
            Ok(())
        })
    }
}

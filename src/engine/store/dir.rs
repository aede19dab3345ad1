//! The render store in a local directory (the CLI's choice):
//! `<root>/<namespace>/<release>/renders/<renderRef>.json.gz` and `…/history.json`.

use std::path::{Path, PathBuf};

use futures::future::BoxFuture;

use super::{HistoryEntry, ReleaseId, RenderStore, StoreError, decode, encode};
use crate::engine::render::Object;
use crate::engine::render::render_ref::is_render_ref;

/// A directory-backed store.
#[derive(Debug, Clone)]
pub struct DirStore {
    root: PathBuf,
}

impl DirStore {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    fn release_dir(&self, id: &ReleaseId) -> PathBuf {
        self.root.join(&id.namespace).join(&id.name)
    }

    /// The file of a render. A name that is not a renderRef never becomes a path (it could
    /// climb out of the store); it maps to a file that cannot exist.
    fn render_path(&self, id: &ReleaseId, render_ref: &str) -> PathBuf {
        let file = if is_render_ref(render_ref) {
            format!("{render_ref}.json.gz")
        } else {
            "invalid-render-ref".to_string()
        };
        self.release_dir(id).join("renders").join(file)
    }
}

fn io(action: &'static str, key: String) -> impl FnOnce(std::io::Error) -> StoreError {
    move |source| StoreError::Io {
        action,
        key,
        source,
    }
}

/// Write through a temporary file and a rename, so a reader never sees half a file.
/// Renders hold Secrets as rendered, so the files are the owner's alone (0600 in 0700
/// directories).
fn write_atomic(path: &Path, bytes: &[u8], key: &str) -> Result<(), StoreError> {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let parent = path.parent().unwrap_or(Path::new("."));
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(parent)
        .map_err(io("create", key.to_string()))?;
    let tmp = path.with_extension("tmp");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(io("write", key.to_string()))?;
    file.write_all(bytes)
        .map_err(io("write", key.to_string()))?;
    drop(file);
    std::fs::rename(&tmp, path).map_err(io("write", key.to_string()))
}

impl RenderStore for DirStore {
    fn put_render<'a>(
        &'a self,
        id: &'a ReleaseId,
        render_ref: &'a str,
        objects: &'a [Object],
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            if !is_render_ref(render_ref) {
                return Err(StoreError::InvalidRef {
                    render_ref: render_ref.to_string(),
                });
            }
            write_atomic(
                &self.render_path(id, render_ref),
                &encode(objects),
                &id.render_key(render_ref),
            )
        })
    }

    fn get_render<'a>(
        &'a self,
        id: &'a ReleaseId,
        render_ref: &'a str,
    ) -> BoxFuture<'a, Result<Option<Vec<Object>>, StoreError>> {
        Box::pin(async move {
            let key = id.render_key(render_ref);
            match std::fs::read(self.render_path(id, render_ref)) {
                Ok(bytes) => decode(&key, &bytes, render_ref).map(Some),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(io("read", key)(e)),
            }
        })
    }

    fn render_bytes<'a>(
        &'a self,
        id: &'a ReleaseId,
        render_ref: &'a str,
    ) -> BoxFuture<'a, Result<Option<u64>, StoreError>> {
        Box::pin(async move {
            Ok(std::fs::metadata(self.render_path(id, render_ref))
                .ok()
                .filter(|m| m.is_file())
                .map(|m| m.len()))
        })
    }

    fn list_renders<'a>(
        &'a self,
        id: &'a ReleaseId,
    ) -> BoxFuture<'a, Result<Vec<String>, StoreError>> {
        Box::pin(async move {
            let dir = self.release_dir(id).join("renders");
            let entries = match std::fs::read_dir(&dir) {
                Ok(e) => e,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
                Err(e) => return Err(io("list", id.render_key(""))(e)),
            };
            let mut refs: Vec<String> = entries
                .flatten()
                .filter_map(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .strip_suffix(".json.gz")
                        .map(str::to_string)
                })
                .collect();
            refs.sort();
            Ok(refs)
        })
    }

    fn delete_render<'a>(
        &'a self,
        id: &'a ReleaseId,
        render_ref: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            match std::fs::remove_file(self.render_path(id, render_ref)) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(io("delete", id.render_key(render_ref))(e)),
            }
        })
    }

    fn history<'a>(
        &'a self,
        id: &'a ReleaseId,
    ) -> BoxFuture<'a, Result<Vec<HistoryEntry>, StoreError>> {
        Box::pin(async move {
            let key = id.history_key();
            match std::fs::read(self.release_dir(id).join("history.json")) {
                Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| StoreError::Corrupt {
                    key,
                    message: e.to_string(),
                }),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
                Err(e) => Err(io("read", key)(e)),
            }
        })
    }

    fn put_history<'a>(
        &'a self,
        id: &'a ReleaseId,
        entries: &'a [HistoryEntry],
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let bytes = serde_json::to_vec_pretty(entries).unwrap_or_default();
            write_atomic(
                &self.release_dir(id).join("history.json"),
                &bytes,
                &id.history_key(),
            )
        })
    }

    fn stored_releases(&self) -> BoxFuture<'_, Result<Vec<super::StoredRelease>, StoreError>> {
        Box::pin(async move {
            let read = |path: &Path| -> Result<Vec<std::fs::DirEntry>, StoreError> {
                match std::fs::read_dir(path) {
                    Ok(entries) => Ok(entries.flatten().collect()),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
                    Err(e) => Err(io("list", path.display().to_string())(e)),
                }
            };
            let mut found = Vec::new();
            for namespace in read(&self.root)? {
                for release in read(&namespace.path())? {
                    let newest = std::iter::once(release.path())
                        .chain(
                            read(&release.path().join("renders"))?
                                .iter()
                                .map(|e| e.path()),
                        )
                        .chain([release.path().join("history.json")])
                        .filter_map(|p| std::fs::metadata(p).ok()?.modified().ok())
                        .max();
                    found.push(super::StoredRelease {
                        id: ReleaseId {
                            namespace: namespace.file_name().to_string_lossy().into_owned(),
                            name: release.file_name().to_string_lossy().into_owned(),
                        },
                        newest,
                    });
                }
            }
            found.sort_by(|a, b| (&a.id.namespace, &a.id.name).cmp(&(&b.id.namespace, &b.id.name)));
            Ok(found)
        })
    }

    fn delete_prefix<'a>(&'a self, id: &'a ReleaseId) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            match std::fs::remove_dir_all(self.release_dir(id)) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(io("delete", format!("{}/{}", id.namespace, id.name))(e)),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn renders_and_history_round_trip_and_the_prefix_goes() {
        let dir = tempfile::tempdir().unwrap();
        let store = DirStore::new(dir.path());
        let id = ReleaseId {
            namespace: "apps".into(),
            name: "web".into(),
        };
        let objects = vec![Object(
            serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"}}),
        )];
        let abc = crate::engine::render::render_ref::render_ref(&objects);
        store.put_render(&id, &abc, &objects).await.unwrap();
        assert!(store.has_render(&id, &abc).await.unwrap());
        assert_eq!(
            store.get_render(&id, &abc).await.unwrap(),
            Some(objects.clone())
        );
        assert_eq!(store.get_render(&id, &"f".repeat(64)).await.unwrap(), None);
        assert_eq!(store.list_renders(&id).await.unwrap(), vec![abc.clone()]);
        // Renders hold Secrets: owner-only files and directories.
        use std::os::unix::fs::PermissionsExt;
        let mode =
            |p: std::path::PathBuf| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(store.render_path(&id, &abc)), 0o600);
        assert_eq!(mode(store.release_dir(&id).join("renders")), 0o700);
        // A name that is not a renderRef never becomes a path.
        let escape = "../../../../outside";
        assert!(matches!(
            store.put_render(&id, escape, &objects).await,
            Err(StoreError::InvalidRef { .. })
        ));
        assert_eq!(store.get_render(&id, escape).await.unwrap(), None);
        assert!(
            !dir.path()
                .parent()
                .unwrap()
                .join("outside.json.gz")
                .exists()
        );
        let h = vec![HistoryEntry {
            outcome: None,
            render_ref: abc.clone(),
            recorded_at: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                "2026-01-01T00:00:00Z".parse().unwrap(),
            ),
            source_revision: Some("main@sha1:1".into()),
            stored_bytes: Some(120),
        }];
        store.put_history(&id, &h).await.unwrap();
        assert_eq!(store.history(&id).await.unwrap(), h);
        let stored = store.stored_releases().await.unwrap();
        assert_eq!(stored.len(), 1);
        assert_eq!(stored[0].id, id);
        assert!(stored[0].newest.is_some());
        store.delete_prefix(&id).await.unwrap();
        assert!(store.list_renders(&id).await.unwrap().is_empty());
        assert_eq!(store.stored_releases().await.unwrap(), []);
    }
}

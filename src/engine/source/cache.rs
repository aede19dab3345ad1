//! The content-addressed source cache on disk.
//!
//! Layout under the root (default `$CONVOY_CACHE_DIR` or `~/.cache/convoy`):
//! - `artifacts/<sha256>/` — an unpacked artifact, named by the digest of its content;
//! - `revisions/<sha256 of scope and an immutable revision key>` — the digest a revision
//!   unpacked to, so a commit, chart version or OCI digest seen before needs no network;
//! - `git/<sha256 of scope and URL>/` — bare mirrors that Git fetches into;
//! - `tmp/` — staging directories, renamed into `artifacts/` once complete, so a reader never
//!   sees half an artifact.
//!
//! Artifacts and mirrors no one has used for a while are removed by a long-running process
//! (`super::retention`); every use marks them (their directory's modification time).
//!
//! Every way back into cached content is keyed by a *scope*: the source object that fetched
//! it (`Kind/namespace/name`, see [`scope_of`]). Another namespace naming the same URL has
//! its own mirror and its own revision records, so it fetches with its own credentials (and
//! fails without them) instead of reading what a private repository left in the cache; a
//! commit prefix resolves only in the mirror of the scope asking. Artifacts themselves are
//! shared by content digest, which only a fetch of that content yields.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use sha2::{Digest, Sha256};

use super::archive::GIVEN_UP;

/// Why the cache could not be used.
#[derive(Debug, thiserror::Error)]
#[error("source cache: cannot {action} {}", path.display())]
pub struct CacheError {
    pub action: &'static str,
    pub path: PathBuf,
    #[source]
    pub source: std::io::Error,
}

/// The cache root.
#[derive(Debug, Clone)]
pub struct Cache {
    root: PathBuf,
    /// Held (shared) by whoever marks an artifact or mirror used and (exclusive) by the
    /// collection while it decides an entry is unused and moves it away: in this process, an
    /// entry is either marked before the collection looks, or found gone.
    pub(super) uses: Arc<RwLock<()>>,
}

impl Cache {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self {
            root: root.into(),
            uses: Arc::default(),
        }
    }

    /// `$CONVOY_CACHE_DIR`, else `$XDG_CACHE_HOME/convoy`, else `~/.cache/convoy`.
    pub fn default_root() -> PathBuf {
        if let Some(dir) = std::env::var_os("CONVOY_CACHE_DIR") {
            return PathBuf::from(dir);
        }
        if let Some(dir) = std::env::var_os("XDG_CACHE_HOME") {
            return PathBuf::from(dir).join("convoy");
        }
        let home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_else(std::env::temp_dir);
        home.join(".cache").join("convoy")
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where the artifact with `digest` (`sha256:<hex>`) lives.
    pub fn artifact_dir(&self, digest: &str) -> PathBuf {
        self.root
            .join("artifacts")
            .join(digest.trim_start_matches("sha256:"))
    }

    /// The bare Git mirror for `url`, as `scope` fetches it.
    pub fn git_mirror(&self, scope: &str, url: &str) -> PathBuf {
        self.root.join("git").join(&scoped_hex(scope, url)[..32])
    }

    /// [`Cache::git_mirror`], marked used (a fetch into it is about to run).
    pub fn use_git_mirror(&self, scope: &str, url: &str) -> PathBuf {
        let mirror = self.git_mirror(scope, url);
        let _using = crate::engine::locks::read(&self.uses);
        mark_used(&mirror);
        mirror
    }

    /// The digest an immutable revision unpacked to for `scope`, if it is still in the cache
    /// (the record and the artifact marked used).
    pub fn lookup(&self, scope: &str, revision_key: &str) -> Option<String> {
        let path = self.revision_path(scope, revision_key);
        let _using = crate::engine::locks::read(&self.uses);
        let digest = std::fs::read_to_string(&path).ok()?;
        let digest = digest.trim().to_string();
        mark_used(&path);
        let artifact = self.artifact_dir(&digest);
        (mark_used(&artifact) && artifact.is_dir()).then_some(digest)
    }

    /// Mark the artifact at `path` used: a process hands it to a render that reads it now.
    /// Whether it is still there.
    pub fn use_artifact(&self, path: &Path) -> bool {
        let _using = crate::engine::locks::read(&self.uses);
        mark_used(path)
    }

    /// Hold the cache's lock for `key` (a source as one scope fetches it) across processes:
    /// an exclusive lock on `locks/<hash>`, released when the returned file is dropped. Waits
    /// without blocking a runtime thread; the caller's deadline bounds the wait.
    pub async fn lock(&self, key: &str) -> Result<std::fs::File, CacheError> {
        let dir = self.root.join("locks");
        std::fs::create_dir_all(&dir).map_err(|source| CacheError {
            action: "create",
            path: dir.clone(),
            source,
        })?;
        let path = dir.join(&sha256_hex(key.as_bytes())[..32]);
        let open = || {
            std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&path)
                .map_err(|source| CacheError {
                    action: "open",
                    path: path.clone(),
                    source,
                })
        };
        let mut file = open()?;
        loop {
            match file.try_lock() {
                // The collection removes a lock file it holds (`super::retention`): one locked
                // after it was removed is not the one at the path any more, so open it again.
                Ok(()) if !same_file(&file, &path) => file = open()?,
                Ok(()) => {
                    let _ = file.set_modified(std::time::SystemTime::now());
                    return Ok(file);
                }
                Err(std::fs::TryLockError::WouldBlock) => {
                    tokio::time::sleep(std::time::Duration::from_millis(25)).await
                }
                Err(std::fs::TryLockError::Error(source)) => {
                    return Err(CacheError {
                        action: "lock",
                        path,
                        source,
                    });
                }
            }
        }
    }

    /// A fresh staging directory under `tmp/`.
    ///
    /// What a process that was killed mid-unpack left there (a GiB of layers, a partial
    /// tree) is removed once it is an hour old: no fetch runs that long.
    pub fn staging(&self) -> Result<tempfile::TempDir, CacheError> {
        let tmp = self.root.join("tmp");
        std::fs::create_dir_all(&tmp).map_err(|source| CacheError {
            action: "create",
            path: tmp.clone(),
            source,
        })?;
        remove_stale(&tmp);
        tempfile::Builder::new()
            .prefix("stage-")
            .tempdir_in(&tmp)
            .map_err(|source| CacheError {
                action: "create a staging directory in",
                path: tmp,
                source,
            })
    }

    /// Move a complete staging directory into `artifacts/<digest of its content>` and record
    /// `revision_key` (when immutable) → digest for `scope`. Returns the digest.
    pub fn install(
        &self,
        staging: tempfile::TempDir,
        scope: &str,
        revision_key: Option<&str>,
    ) -> Result<String, CacheError> {
        let digest = tree_digest(staging.path()).map_err(|source| CacheError {
            action: "hash",
            path: staging.path().to_path_buf(),
            source,
        })?;
        let staged = staging.keep();
        let placed = {
            // Installed and its revision recorded as one use: the collection does not take
            // the artifact between the two, nor take a record whose artifact is installed.
            let _using = crate::engine::locks::read(&self.uses);
            self.place(&staged, &digest, scope, revision_key)
        };
        // A tree already there (the same content installed before): removed outside the
        // lock, which the collection and every lookup wait for.
        if !matches!(placed, Ok(true)) {
            let _ = std::fs::remove_dir_all(&staged);
        }
        placed.map(|_| digest)
    }

    /// Move `staged` to `digest`'s artifact (unless it is there already: `false`) and record
    /// the revision.
    fn place(
        &self,
        staged: &Path,
        digest: &str,
        scope: &str,
        revision_key: Option<&str>,
    ) -> Result<bool, CacheError> {
        let target = self.artifact_dir(digest);
        let mut moved = false;
        if !mark_used(&target) {
            let parent = self.root.join("artifacts");
            std::fs::create_dir_all(&parent).map_err(|source| CacheError {
                action: "create",
                path: parent,
                source,
            })?;
            match std::fs::rename(staged, &target) {
                Ok(()) => moved = true,
                // Another process installed the same content first: keep theirs.
                Err(_) if target.is_dir() => {}
                Err(source) => {
                    return Err(CacheError {
                        action: "install",
                        path: target,
                        source,
                    });
                }
            }
            // Used now, however long the fetch took.
            mark_used(&target);
        }
        if let Some(key) = revision_key {
            let path = self.revision_path(scope, key);
            if let Some(parent) = path.parent() {
                let _ = std::fs::create_dir_all(parent);
            }
            // Written anew (a collection may have just found it unused).
            std::fs::write(&path, digest).map_err(|source| CacheError {
                action: "write",
                path,
                source,
            })?;
        }
        Ok(moved)
    }

    /// Unpack into a fresh staging directory with `unpack` and install the result, on the
    /// blocking pool: unpacking and hashing a tree is file work that must not hold an async
    /// thread (the probes and other reconciles run there).
    ///
    /// Dropping this future (a fetch's timeout) does not reach the blocking pool: `unpack` is
    /// given a flag that is set then, which [`UntilGivenUp`] turns into an error at the next
    /// read, and nothing is installed.
    pub async fn unpack_and_install<E, F>(
        &self,
        scope: &str,
        revision_key: Option<&str>,
        unpack: F,
    ) -> Result<Result<String, CacheError>, E>
    where
        F: FnOnce(&Path, &AtomicBool) -> Result<(), E> + Send + 'static,
        E: Send + 'static,
    {
        let cache = self.clone();
        let scope = scope.to_string();
        let key = revision_key.map(str::to_string);
        let given_up = GiveUpOnDrop::default();
        let flag = given_up.0.clone();
        let joined = tokio::task::spawn_blocking(move || {
            let staging = match cache.staging() {
                Ok(s) => s,
                Err(e) => return Ok(Err(e)),
            };
            unpack(staging.path(), &flag)?;
            if flag.load(Ordering::Relaxed) {
                return Ok(Err(CacheError {
                    action: "install",
                    path: staging.path().to_path_buf(),
                    source: std::io::Error::other(GIVEN_UP),
                }));
            }
            Ok(cache.install(staging, &scope, key.as_deref()))
        })
        .await;
        drop(given_up);
        match joined {
            Ok(result) => result,
            Err(e) => Ok(Err(CacheError {
                action: "unpack into",
                path: self.root.join("tmp"),
                source: std::io::Error::other(e.to_string()),
            })),
        }
    }

    pub(super) fn revision_path(&self, scope: &str, key: &str) -> PathBuf {
        self.root.join("revisions").join(scoped_hex(scope, key))
    }
}

/// Whether `file` is the file at `path` now.
pub(super) fn same_file(file: &std::fs::File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (file.metadata(), std::fs::metadata(path)) {
        (Ok(a), Ok(b)) => (a.dev(), a.ino()) == (b.dev(), b.ino()),
        _ => false,
    }
}

/// Mark the entry at `path` used now; whether it exists. (An entry that cannot be marked,
/// in a cache this process may not write, is still there to read.)
fn mark_used(path: &Path) -> bool {
    match std::fs::File::open(path) {
        Ok(entry) => {
            let _ = entry.set_modified(std::time::SystemTime::now());
            entry.metadata().is_ok()
        }
        Err(_) => false,
    }
}

/// How old a staging directory is before it is taken for a dead process's.
const STALE_STAGING: std::time::Duration = std::time::Duration::from_secs(3600);

/// Remove what in `tmp` is older than [`STALE_STAGING`]; what cannot be removed now is
/// tried again at the next staging.
fn remove_stale(tmp: &Path) {
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return;
    };
    for entry in entries.flatten() {
        let old = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > STALE_STAGING);
        if old {
            let path = entry.path();
            let _ = std::fs::remove_dir_all(&path).or_else(|_| std::fs::remove_file(&path));
        }
    }
}

/// Set when the future that started an unpack is dropped.
#[derive(Default)]
struct GiveUpOnDrop(Arc<AtomicBool>);

impl Drop for GiveUpOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// What an unpack reads, until its fetch is given up: then an error.
pub struct UntilGivenUp<'a, R> {
    inner: R,
    given_up: &'a AtomicBool,
}

impl<'a, R> UntilGivenUp<'a, R> {
    pub fn new(inner: R, given_up: &'a AtomicBool) -> Self {
        Self { inner, given_up }
    }
}

impl<R: std::io::Read> std::io::Read for UntilGivenUp<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.given_up.load(Ordering::Relaxed) {
            return Err(std::io::Error::other(GIVEN_UP));
        }
        self.inner.read(buf)
    }
}

/// The scope of a source object: `Kind/namespace/name`.
pub fn scope_of(kind: &str, namespace: &str, name: &str) -> String {
    format!("{kind}/{namespace}/{name}")
}

fn scoped_hex(scope: &str, key: &str) -> String {
    let mut bytes = Vec::with_capacity(scope.len() + key.len() + 1);
    bytes.extend_from_slice(scope.as_bytes());
    bytes.push(0);
    bytes.extend_from_slice(key.as_bytes());
    sha256_hex(&bytes)
}

/// `sha256:<hex>` over a directory tree: every entry's relative path, type, executable bit
/// and content (or link target), in path order. Equal trees give equal digests.
///
/// Names and link targets are hashed as the bytes the file system holds: read as text, two
/// trees whose names differ only in bytes that are not UTF-8 would share an artifact (and a
/// name that is not UTF-8 could not be found again). For UTF-8 names the bytes are the text,
/// so digests recorded before stay the same.
pub fn tree_digest(root: &Path) -> std::io::Result<String> {
    use std::os::unix::ffi::OsStrExt;
    let mut entries = Vec::new();
    collect(root, &mut entries)?;
    // Byte order, as `String`'s order was.
    entries.sort_by(|a, b| a.as_os_str().as_bytes().cmp(b.as_os_str().as_bytes()));
    let mut hasher = Sha256::new();
    for relative in entries {
        let path = root.join(&relative);
        let meta = std::fs::symlink_metadata(&path)?;
        hasher.update(relative.as_os_str().as_bytes());
        hasher.update([0]);
        if meta.file_type().is_symlink() {
            hasher.update(b"L");
            hasher.update(std::fs::read_link(&path)?.as_os_str().as_bytes());
        } else if meta.is_dir() {
            hasher.update(b"D");
        } else {
            use std::os::unix::fs::PermissionsExt;
            hasher.update(if meta.permissions().mode() & 0o111 != 0 {
                b"X"
            } else {
                b"F"
            });
            hasher.update(meta.len().to_be_bytes());
            let mut file = std::fs::File::open(&path)?;
            let mut buf = [0u8; 64 * 1024];
            loop {
                let n = file.read(&mut buf)?;
                if n == 0 {
                    break;
                }
                hasher.update(&buf[..n]);
            }
        }
        hasher.update([0]);
    }
    Ok(format!("sha256:{}", hex::encode(hasher.finalize())))
}

/// Every entry under `root`, by relative path. The walk keeps its own list of directories:
/// a recursion as deep as a source's tree could overflow the thread's stack.
fn collect(root: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    let mut to_visit = vec![root.to_path_buf()];
    while let Some(dir) = to_visit.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            let path = entry.path();
            let relative = path.strip_prefix(root).unwrap_or(&path).to_path_buf();
            let file_type = entry.file_type()?;
            out.push(relative);
            if file_type.is_dir() {
                to_visit.push(path);
            }
        }
    }
    Ok(())
}

/// Lowercase hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a killed process left in the cache's temporary space is removed once it is an
    /// hour old; what a running fetch uses now is not.
    #[test]
    fn stale_staging_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::new(dir.path());
        let old = cache.staging().unwrap().keep();
        std::fs::write(old.join("layer-0"), "x").unwrap();
        let two_hours_ago = std::time::SystemTime::now() - 2 * STALE_STAGING;
        std::fs::File::open(&old)
            .unwrap()
            .set_modified(two_hours_ago)
            .unwrap();
        let recent = cache.staging().unwrap().keep();
        let _fresh = cache.staging().unwrap();
        assert!(!old.exists(), "the stale staging directory is still there");
        assert!(recent.exists());
    }

    /// A lock file the collection removed while a fetch waited on it: the waiter takes the
    /// file at the path now, so the next one waits for it (not both running at once).
    #[tokio::test]
    async fn a_lock_file_removed_while_waited_on_is_opened_again() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::new(dir.path());
        let held = cache.lock("Kind/ns/x\0k").await.unwrap();
        let waiting = {
            let cache = cache.clone();
            tokio::spawn(async move { cache.lock("Kind/ns/x\0k").await.unwrap() })
        };
        // It opens the file and finds it locked (the current-thread runtime runs it now).
        tokio::task::yield_now().await;
        let locks = dir.path().join("locks");
        let path = std::fs::read_dir(&locks)
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        std::fs::remove_file(&path).unwrap();
        drop(held);
        let second = waiting.await.unwrap();
        assert!(same_file(&second, &path), "it holds the file at the path");
        let third = tokio::time::timeout(
            std::time::Duration::from_millis(300),
            cache.lock("Kind/ns/x\0k"),
        )
        .await;
        assert!(third.is_err(), "a third took the lock the second holds");
    }

    /// An unpack whose fetch is given up (its future dropped at the timeout) stops at its
    /// next read and installs nothing: it ran on in the blocking pool, holding the
    /// artifact's bytes, while the retry started another.
    #[tokio::test]
    async fn a_given_up_unpack_stops_at_its_next_read_and_installs_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::new(dir.path());
        let (ended, end) = std::sync::mpsc::channel();
        let unpack = cache.unpack_and_install("Kind/ns/x", Some("k"), move |staging, given_up| {
            std::fs::write(staging.join("f"), "x").unwrap();
            let mut endless = UntilGivenUp::new(std::io::repeat(0), given_up);
            let copied = std::io::copy(&mut endless, &mut std::io::sink());
            ended.send(copied.map_err(|e| e.to_string())).unwrap();
            Ok::<(), ()>(())
        });
        let timeout = tokio::time::timeout(std::time::Duration::from_millis(200), unpack).await;
        assert!(timeout.is_err(), "the endless unpack ended on its own");
        let copied = tokio::task::spawn_blocking(move || {
            end.recv_timeout(std::time::Duration::from_secs(30))
        })
        .await
        .unwrap()
        .expect("the unpack went on after its fetch was given up");
        assert_eq!(copied.unwrap_err(), GIVEN_UP);
        assert_eq!(cache.lookup("Kind/ns/x", "k"), None);
    }

    #[test]
    fn equal_trees_give_equal_digests_and_any_change_differs() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        for d in [a.path(), b.path()] {
            std::fs::create_dir(d.join("sub")).unwrap();
            std::fs::write(d.join("sub/x.yaml"), "x: 1\n").unwrap();
            std::fs::write(d.join("y.yaml"), "y: 2\n").unwrap();
        }
        assert_eq!(
            tree_digest(a.path()).unwrap(),
            tree_digest(b.path()).unwrap()
        );
        std::fs::write(b.path().join("y.yaml"), "y: 3\n").unwrap();
        assert_ne!(
            tree_digest(a.path()).unwrap(),
            tree_digest(b.path()).unwrap()
        );
    }

    /// A tree of UTF-8 names keeps the digest it had when names were hashed as text: an
    /// artifact already in a cache, or a render's recorded digest, stays the same.
    #[test]
    fn a_utf8_tree_keeps_its_digest() {
        let a = tempfile::tempdir().unwrap();
        std::fs::create_dir(a.path().join("sub")).unwrap();
        std::fs::write(a.path().join("sub/x.yaml"), "x: 1\n").unwrap();
        std::fs::write(a.path().join("é.yaml"), "y: 2\n").unwrap();
        std::os::unix::fs::symlink("sub/x.yaml", a.path().join("link")).unwrap();
        assert_eq!(
            tree_digest(a.path()).unwrap(),
            "sha256:b1c41f5c251a13e1d4980fd2dcb78b4e32be8582c13097ef19e17abbad4d8189"
        );
    }

    /// Names and link targets that are not UTF-8 are digested as their bytes: trees that
    /// differ only there get different digests, so they are different artifacts.
    #[test]
    fn names_that_are_not_utf8_are_digested_as_bytes() {
        use std::ffi::OsStr;
        use std::os::unix::ffi::OsStrExt;
        let digest_of = |name: &[u8], target: &[u8]| {
            let d = tempfile::tempdir().unwrap();
            std::fs::write(d.path().join(OsStr::from_bytes(name)), "x: 1\n").unwrap();
            std::os::unix::fs::symlink(OsStr::from_bytes(target), d.path().join("link")).unwrap();
            tree_digest(d.path()).unwrap()
        };
        let base = digest_of(b"a\xff.yaml", b"t\xff");
        assert_eq!(base, digest_of(b"a\xff.yaml", b"t\xff"));
        assert_ne!(base, digest_of(b"a\xfe.yaml", b"t\xff"));
        assert_ne!(base, digest_of(b"a\xff.yaml", b"t\xfe"));
    }

    #[test]
    fn installed_artifacts_are_found_by_revision() {
        let root = tempfile::tempdir().unwrap();
        let cache = Cache::new(root.path());
        let staging = cache.staging().unwrap();
        std::fs::write(staging.path().join("a.yaml"), "a: 1\n").unwrap();
        let digest = cache
            .install(staging, "GitRepository/a/x", Some("git:file:///x@abc"))
            .unwrap();
        assert!(digest.starts_with("sha256:"));
        assert_eq!(
            cache.lookup("GitRepository/a/x", "git:file:///x@abc"),
            Some(digest.clone())
        );
        assert!(cache.artifact_dir(&digest).join("a.yaml").is_file());
        assert_eq!(cache.lookup("GitRepository/a/x", "git:file:///x@def"), None);
        // Another scope naming the same revision finds nothing: it must fetch it itself.
        assert_eq!(cache.lookup("GitRepository/b/x", "git:file:///x@abc"), None);
        assert_ne!(
            cache.git_mirror("GitRepository/a/x", "file:///x"),
            cache.git_mirror("GitRepository/b/x", "file:///x")
        );
    }
}

//! Removing what the source cache holds and no one uses any more.
//!
//! A daemon runs for months: every new commit of a repository it follows unpacks to a new
//! artifact (the whole tree again), and every source ever fetched keeps its Git mirror, also
//! after its object is deleted. Flux's source-controller keeps the last artifacts of a source
//! and collects the others; here, what the daemon's coordinator holds for its callers stays,
//! and an artifact or mirror that nothing has used for the retention (a fetch, a lookup, an
//! install mark it used) is removed, with the revision records that named it.

use std::collections::HashSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::cache::Cache;

/// What a collection keeps whatever its age: what a process holds for its callers.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct InUse {
    /// Artifacts, by digest (`sha256:<hex>`).
    pub digests: HashSet<String>,
    /// Git mirrors, by path.
    pub mirrors: HashSet<PathBuf>,
}

/// What one collection removed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Collected {
    pub artifacts: usize,
    pub mirrors: usize,
    pub records: usize,
    pub locks: usize,
}

impl Collected {
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

impl Cache {
    /// Remove the artifacts and Git mirrors not in `in_use` that nothing has used for
    /// `unused_for`, then the revision records whose artifact is gone or that no lookup used
    /// for as long, and the lock files no fetch took for as long. File work: run it on the
    /// blocking pool. What cannot be removed now is tried again at the next collection.
    pub fn collect(&self, in_use: &InUse, unused_for: Duration) -> Collected {
        let kept: HashSet<OsString> = in_use
            .digests
            .iter()
            .map(|d| OsString::from(d.trim_start_matches("sha256:")))
            .collect();
        let mut collected = Collected::default();
        for (path, name) in entries(&self.root().join("artifacts")) {
            if !kept.contains(&name) && self.take_away(&path, unused_for) {
                collected.artifacts += 1;
            }
        }
        for (path, _) in entries(&self.root().join("git")) {
            if !in_use.mirrors.contains(&path) && self.take_away(&path, unused_for) {
                collected.mirrors += 1;
            }
        }
        // A record for every commit that unpacked to a tree still used (empty commits,
        // reverts) and of every scope gone stayed too.
        for (path, _) in entries(&self.root().join("revisions")) {
            let _deciding = crate::engine::locks::write(&self.uses);
            let gone = std::fs::read_to_string(&path)
                .is_ok_and(|digest| !self.artifact_dir(digest.trim()).is_dir());
            if (gone || unused(&path, unused_for)) && std::fs::remove_file(&path).is_ok() {
                collected.records += 1;
            }
        }
        // One per request a fetch ever took (a chart version, a tag a Release named): removed
        // while held, so a process waiting on it finds it gone and opens the new one
        // (`Cache::lock`).
        for (path, _) in entries(&self.root().join("locks")) {
            if !unused(&path, unused_for) {
                continue;
            }
            let Ok(file) = std::fs::OpenOptions::new().write(true).open(&path) else {
                continue;
            };
            if file.try_lock().is_ok()
                && super::cache::same_file(&file, &path)
                && unused(&path, unused_for)
                && std::fs::remove_file(&path).is_ok()
            {
                collected.locks += 1;
            }
        }
        collected
    }

    /// Move the entry at `path` out of the cache if it has not been used for `unused_for`
    /// (decided and moved while no one in this process can mark it), then remove it.
    fn take_away(&self, path: &Path, unused_for: Duration) -> bool {
        let tmp = self.root().join("tmp");
        if std::fs::create_dir_all(&tmp).is_err() {
            return false;
        }
        let Some(name) = path.file_name() else {
            return false;
        };
        static TAKEN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let mut away = OsString::from(format!(
            "collected-{}-{}-",
            std::process::id(),
            TAKEN.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        away.push(name);
        let away = tmp.join(away);
        {
            let _deciding = crate::engine::locks::write(&self.uses);
            if !unused(path, unused_for) || std::fs::rename(path, &away).is_err() {
                return false;
            }
        }
        // Left behind if this fails: the staging clean-up removes it within the hour (it
        // keeps the old modification time).
        std::fs::remove_dir_all(&away)
            .or_else(|_| std::fs::remove_file(&away))
            .is_ok()
    }
}

/// Whether the entry at `path` was last used (modified) more than `unused_for` ago.
fn unused(path: &Path, unused_for: Duration) -> bool {
    std::fs::symlink_metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .is_some_and(|age| age > unused_for)
}

/// The entries of `dir` (none if it cannot be read).
fn entries(dir: &Path) -> Vec<(PathBuf, OsString)> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| (e.path(), e.file_name()))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::SystemTime;

    fn install(cache: &Cache, scope: &str, key: &str, content: &str) -> String {
        let staging = cache.staging().unwrap();
        std::fs::write(staging.path().join("a.yaml"), content).unwrap();
        cache.install(staging, scope, Some(key)).unwrap()
    }

    fn age(path: &Path, by: Duration) {
        std::fs::File::open(path)
            .unwrap()
            .set_modified(SystemTime::now() - by)
            .unwrap();
    }

    const HOUR: Duration = Duration::from_secs(3600);

    /// Of four artifacts, the one held, the one used recently and the one looked up just now
    /// stay; the one no one used for two hours goes with its revision record, and its
    /// revision is fetched again (the lookup finds nothing).
    #[test]
    fn artifacts_unused_for_the_retention_go_with_their_records() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::new(dir.path());
        let held = install(&cache, "Kind/ns/a", "held", "held");
        let recent = install(&cache, "Kind/ns/a", "recent", "recent");
        let looked_up = install(&cache, "Kind/ns/a", "looked-up", "looked up");
        let unused = install(&cache, "Kind/ns/a", "unused", "unused");
        for digest in [&held, &looked_up, &unused] {
            age(&cache.artifact_dir(digest), 2 * HOUR);
        }
        age(&cache.artifact_dir(&recent), HOUR / 2);
        assert_eq!(
            cache.lookup("Kind/ns/a", "looked-up").as_ref(),
            Some(&looked_up)
        );
        let in_use = InUse {
            digests: HashSet::from([held.clone()]),
            ..Default::default()
        };

        let collected = cache.collect(&in_use, HOUR);

        assert_eq!(
            collected,
            Collected {
                artifacts: 1,
                mirrors: 0,
                records: 1,
                locks: 0,
            }
        );
        assert!(!cache.artifact_dir(&unused).exists());
        assert_eq!(cache.lookup("Kind/ns/a", "unused"), None);
        for (key, digest) in [
            ("held", &held),
            ("recent", &recent),
            ("looked-up", &looked_up),
        ] {
            assert_eq!(
                cache.lookup("Kind/ns/a", key).as_ref(),
                Some(digest),
                "{key}"
            );
        }
        // Nothing is left behind in the temporary space either.
        assert_eq!(entries(&dir.path().join("tmp")).len(), 0);
    }

    /// A Git mirror no one fetched into for the retention goes; one in use, or fetched into
    /// recently, stays.
    #[test]
    fn mirrors_unused_for_the_retention_go() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::new(dir.path());
        let mirror = |name: &str| {
            let path = cache.use_git_mirror("GitRepository/ns/x", &format!("https://h/{name}"));
            std::fs::create_dir_all(path.join("objects")).unwrap();
            path
        };
        let (held, recent, unused) = (mirror("held"), mirror("recent"), mirror("unused"));
        age(&held, 2 * HOUR);
        age(&unused, 2 * HOUR);
        let in_use = InUse {
            mirrors: HashSet::from([held.clone()]),
            ..Default::default()
        };

        let collected = cache.collect(&in_use, HOUR);

        assert_eq!(collected.mirrors, 1);
        assert!(!unused.exists());
        assert!(held.join("objects").is_dir());
        assert!(recent.join("objects").is_dir());
        // Fetching into a mirror marks it used.
        age(&recent, 2 * HOUR);
        cache.use_git_mirror("GitRepository/ns/x", "https://h/recent");
        assert_eq!(cache.collect(&InUse::default(), HOUR).mirrors, 1);
        assert!(recent.is_dir(), "the mirror used just now was removed");
    }

    /// Installing content that is already there (another revision of the same tree) marks
    /// it used.
    #[test]
    fn installing_content_again_marks_it_used() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::new(dir.path());
        let digest = install(&cache, "Kind/ns/a", "v1", "same");
        age(&cache.artifact_dir(&digest), 2 * HOUR);
        assert_eq!(install(&cache, "Kind/ns/a", "v2", "same"), digest);

        assert!(cache.collect(&InUse::default(), HOUR).is_empty());
        assert!(cache.artifact_dir(&digest).is_dir());
    }
}

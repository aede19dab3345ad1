//! Unpacking tar archives (chart `.tgz` files, OCI layers, `git archive` output) so that
//! nothing lands outside the destination.
//!
//! An archive is data from a remote party. An entry with `..`, an absolute path, a symlink or
//! hard link whose target leaves the destination, or a device file is rejected with an error
//! that names the entry; nothing is silently skipped.

use std::io::Read;
use std::path::{Component, Path, PathBuf};

/// Why an archive was refused or could not be unpacked.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    #[error("archive entry {entry:?} {problem}; refusing to unpack outside the cache")]
    Unsafe {
        entry: String,
        problem: &'static str,
    },
    #[error("archive entry {entry:?} is a {kind}, which convoy does not unpack")]
    UnsupportedEntry { entry: String, kind: &'static str },
    #[error("cannot read the archive")]
    Read(#[source] std::io::Error),
    #[error("cannot write {}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the archive unpacks to more than {limit} bytes")]
    TooLarge { limit: u64 },
}

/// Largest total size an archive may unpack to: generous for charts and manifests, small
/// enough that a decompression bomb does not fill the disk.
const MAX_UNPACKED_BYTES: u64 = 2 << 30;

/// Unpack a gzip-compressed tar stream into `dest` (which must exist).
pub fn unpack_tar_gz(reader: impl Read, dest: &Path) -> Result<(), ArchiveError> {
    unpack_tar(flate2::read::GzDecoder::new(reader), dest)
}

/// Unpack a tar stream into `dest` (which must exist).
pub fn unpack_tar(reader: impl Read, dest: &Path) -> Result<(), ArchiveError> {
    let mut archive = tar::Archive::new(reader);
    archive.set_preserve_permissions(false);
    archive.set_unpack_xattrs(false);
    let mut total: u64 = 0;
    for entry in archive.entries().map_err(ArchiveError::Read)? {
        let mut entry = entry.map_err(ArchiveError::Read)?;
        let raw_path = entry.path().map_err(ArchiveError::Read)?.into_owned();
        let shown = raw_path.display().to_string();
        let relative = safe_relative(&raw_path).map_err(|problem| ArchiveError::Unsafe {
            entry: shown.clone(),
            problem,
        })?;
        let kind = entry.header().entry_type();
        if kind.is_pax_global_extensions()
            || kind.is_pax_local_extensions()
            || kind.is_gnu_longname()
        {
            continue;
        }
        if relative.as_os_str().is_empty() {
            continue;
        }
        let target = dest.join(&relative);
        match kind {
            k if k.is_dir() => {
                std::fs::create_dir_all(&target).map_err(|source| ArchiveError::Write {
                    path: target.clone(),
                    source,
                })?;
            }
            k if k.is_file() || k == tar::EntryType::Continuous => {
                total = total.saturating_add(entry.header().size().unwrap_or(0));
                if total > MAX_UNPACKED_BYTES {
                    return Err(ArchiveError::TooLarge {
                        limit: MAX_UNPACKED_BYTES,
                    });
                }
                create_parent(&target)?;
                let mut file =
                    std::fs::File::create(&target).map_err(|source| ArchiveError::Write {
                        path: target.clone(),
                        source,
                    })?;
                std::io::copy(&mut entry, &mut file).map_err(|source| ArchiveError::Write {
                    path: target.clone(),
                    source,
                })?;
                let executable = entry
                    .header()
                    .mode()
                    .map(|m| m & 0o111 != 0)
                    .unwrap_or(false);
                if executable {
                    set_executable(&target)?;
                }
            }
            k if k.is_symlink() || k.is_hard_link() => {
                let link = entry
                    .link_name()
                    .map_err(ArchiveError::Read)?
                    .ok_or(ArchiveError::Unsafe {
                        entry: shown.clone(),
                        problem: "is a link without a target",
                    })?
                    .into_owned();
                let resolved = if k.is_symlink() {
                    let base = relative.parent().unwrap_or(Path::new(""));
                    resolve_within(base, &link)
                } else {
                    safe_relative(&link).ok()
                };
                let Some(resolved) = resolved else {
                    return Err(ArchiveError::Unsafe {
                        entry: shown,
                        problem: "is a link that points outside the archive",
                    });
                };
                create_parent(&target)?;
                if k.is_symlink() {
                    std::os::unix::fs::symlink(&link, &target)
                } else {
                    std::fs::hard_link(dest.join(resolved), &target)
                }
                .map_err(|source| ArchiveError::Write {
                    path: target.clone(),
                    source,
                })?;
            }
            k => {
                let kind = if k.is_character_special() || k.is_block_special() {
                    "device"
                } else if k.is_fifo() {
                    "FIFO"
                } else {
                    "special file"
                };
                return Err(ArchiveError::UnsupportedEntry { entry: shown, kind });
            }
        }
    }
    Ok(())
}

/// A path made only of normal components (and `.`), or the reason it is not one.
pub fn safe_relative(path: &Path) -> Result<PathBuf, &'static str> {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::Normal(c) => out.push(c),
            Component::CurDir => {}
            Component::ParentDir => return Err("contains `..`"),
            Component::RootDir | Component::Prefix(_) => return Err("is an absolute path"),
        }
    }
    Ok(out)
}

/// Resolve `link` relative to `base` (both inside the root), lexically; `None` when it leaves
/// the root or is absolute.
pub fn resolve_within(base: &Path, link: &Path) -> Option<PathBuf> {
    let mut parts: Vec<std::ffi::OsString> = base
        .components()
        .filter_map(|c| match c {
            Component::Normal(c) => Some(c.to_os_string()),
            _ => None,
        })
        .collect();
    for component in link.components() {
        match component {
            Component::Normal(c) => parts.push(c.to_os_string()),
            Component::CurDir => {}
            Component::ParentDir => {
                parts.pop()?;
            }
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(parts.iter().collect())
}

/// Check a checked-out tree (a Git work tree) for symlinks that leave it.
pub fn check_tree(root: &Path) -> Result<(), ArchiveError> {
    fn walk(root: &Path, dir: &Path) -> Result<(), ArchiveError> {
        let read = std::fs::read_dir(dir).map_err(ArchiveError::Read)?;
        for entry in read {
            let entry = entry.map_err(ArchiveError::Read)?;
            let path = entry.path();
            let file_type = entry.file_type().map_err(ArchiveError::Read)?;
            let relative = path.strip_prefix(root).unwrap_or(&path).to_path_buf();
            if file_type.is_symlink() {
                let link = std::fs::read_link(&path).map_err(ArchiveError::Read)?;
                let base = relative.parent().unwrap_or(Path::new(""));
                if resolve_within(base, &link).is_none() {
                    return Err(ArchiveError::Unsafe {
                        entry: relative.display().to_string(),
                        problem: "is a link that points outside the archive",
                    });
                }
            } else if file_type.is_dir() {
                walk(root, &path)?;
            }
        }
        Ok(())
    }
    walk(root, root)
}

fn create_parent(target: &Path) -> Result<(), ArchiveError> {
    if let Some(parent) = target.parent() {
        std::fs::create_dir_all(parent).map_err(|source| ArchiveError::Write {
            path: parent.to_path_buf(),
            source,
        })?;
    }
    Ok(())
}

fn set_executable(path: &Path) -> Result<(), ArchiveError> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).map_err(|source| {
        ArchiveError::Write {
            path: path.to_path_buf(),
            source,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Build a tar with raw header paths (the tar crate's builder refuses `..`, as it should).
    fn tar_with(entries: &[(&str, tar::EntryType, Option<&str>, &[u8])]) -> Vec<u8> {
        let mut builder = tar::Builder::new(Vec::new());
        for (path, kind, link, data) in entries {
            let mut header = tar::Header::new_gnu();
            {
                let name = &mut header.as_gnu_mut().unwrap().name;
                name[..path.len()].copy_from_slice(path.as_bytes());
            }
            header.set_entry_type(*kind);
            header.set_size(data.len() as u64);
            header.set_mode(0o644);
            if let Some(link) = link {
                header.set_link_name(link).unwrap();
            }
            header.set_cksum();
            builder.append(&header, *data).unwrap();
        }
        builder.into_inner().unwrap()
    }

    fn unpack(bytes: &[u8]) -> (tempfile::TempDir, Result<(), ArchiveError>) {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("dest");
        std::fs::create_dir(&dest).unwrap();
        let result = unpack_tar(bytes, &dest);
        (dir, result)
    }

    #[test]
    fn a_plain_archive_unpacks() {
        let tar = tar_with(&[
            (
                "chart/Chart.yaml",
                tar::EntryType::Regular,
                None,
                b"name: c\n",
            ),
            (
                "chart/templates/link.yaml",
                tar::EntryType::Symlink,
                Some("../Chart.yaml"),
                b"",
            ),
        ]);
        let (dir, result) = unpack(&tar);
        result.unwrap();
        let text =
            std::fs::read_to_string(dir.path().join("dest/chart/templates/link.yaml")).unwrap();
        assert_eq!(text, "name: c\n");
    }

    #[test]
    fn an_entry_with_dot_dot_is_rejected() {
        let (dir, result) = unpack(&tar_with(&[(
            "../evil.txt",
            tar::EntryType::Regular,
            None,
            b"x",
        )]));
        let err = result.unwrap_err().to_string();
        assert_eq!(
            err,
            "archive entry \"../evil.txt\" contains `..`; refusing to unpack outside the cache"
        );
        assert!(!dir.path().join("evil.txt").exists());
    }

    #[test]
    fn an_absolute_entry_is_rejected() {
        let (_dir, result) = unpack(&tar_with(&[(
            "/tmp/evil.txt",
            tar::EntryType::Regular,
            None,
            b"x",
        )]));
        assert!(
            result
                .unwrap_err()
                .to_string()
                .contains("is an absolute path")
        );
    }

    #[test]
    fn a_symlink_that_escapes_is_rejected() {
        for link in ["../../etc/passwd", "/etc/passwd", "a/../../.."] {
            let (_dir, result) = unpack(&tar_with(&[(
                "chart/x",
                tar::EntryType::Symlink,
                Some(link),
                b"",
            )]));
            let err = result.unwrap_err().to_string();
            assert!(
                err.contains("is a link that points outside the archive"),
                "{link}: {err}"
            );
        }
    }

    #[test]
    fn a_hard_link_that_escapes_is_rejected() {
        let (_dir, result) = unpack(&tar_with(&[(
            "x",
            tar::EntryType::Link,
            Some("../outside"),
            b"",
        )]));
        assert!(result.unwrap_err().to_string().contains("points outside"));
    }

    #[test]
    fn a_device_is_rejected() {
        let (_dir, result) = unpack(&tar_with(&[("dev", tar::EntryType::Char, None, b"")]));
        assert!(result.unwrap_err().to_string().contains("device"));
    }

    #[test]
    fn a_checked_out_tree_with_an_escaping_symlink_is_rejected() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("app")).unwrap();
        std::os::unix::fs::symlink("../../secrets", dir.path().join("app/creds")).unwrap();
        let err = check_tree(dir.path()).unwrap_err().to_string();
        assert!(
            err.contains("\"app/creds\" is a link that points outside"),
            "{err}"
        );
        std::fs::remove_file(dir.path().join("app/creds")).unwrap();
        std::os::unix::fs::symlink("../app", dir.path().join("app/self")).unwrap();
        check_tree(dir.path()).unwrap();
    }
}

//! Unpacking tar archives (chart `.tgz` files, OCI layers, `git archive` output) so that
//! nothing lands outside the destination.
//!
//! An archive is data from a remote party. An entry with `..`, an absolute path, a symlink or
//! hard link whose target leaves the destination, or a device file is rejected with an error
//! that names the entry; nothing is silently skipped.

use std::io::Read;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

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

impl ArchiveError {
    /// The same error for another caller of the fetch that met it (I/O causes as text).
    pub(crate) fn replay(&self) -> ArchiveError {
        let io = |e: &std::io::Error| std::io::Error::new(e.kind(), e.to_string());
        match self {
            ArchiveError::Unsafe { entry, problem } => ArchiveError::Unsafe {
                entry: entry.clone(),
                problem,
            },
            ArchiveError::UnsupportedEntry { entry, kind } => ArchiveError::UnsupportedEntry {
                entry: entry.clone(),
                kind,
            },
            ArchiveError::Read(e) => ArchiveError::Read(io(e)),
            ArchiveError::Write { path, source } => ArchiveError::Write {
                path: path.clone(),
                source: io(source),
            },
            ArchiveError::TooLarge { limit } => ArchiveError::TooLarge { limit: *limit },
        }
    }
}

/// Largest total size an archive may unpack to: generous for charts and manifests, small
/// enough that a decompression bomb does not fill the disk.
const MAX_UNPACKED_BYTES: u64 = 2 << 30;

/// The least an entry counts toward the size limit: a block of the disk (and an inode).
const ENTRY_BYTES: u64 = 4096;

/// The most the headers between two entries may hold: GNU long names and PAX records, which
/// the tar crate reads whole into memory (a 64 MiB name from a 65 KB archive took 420 MB).
const MOST_BETWEEN_ENTRIES: u64 = 1 << 20;

/// Bytes read since the last entry was handed over, while the next one is being found.
#[derive(Default)]
struct Between {
    counting: std::cell::Cell<bool>,
    read: std::cell::Cell<u64>,
}

impl Between {
    fn start(&self) {
        self.read.set(0);
        self.counting.set(true);
    }

    fn stop(&self) {
        self.counting.set(false);
    }
}

/// The archive's bytes, no more than [`MOST_BETWEEN_ENTRIES`] of them between two entries
/// (an entry's own content is read while not counting).
struct BoundedBetween<R> {
    inner: R,
    between: std::rc::Rc<Between>,
}

impl<R: Read> Read for BoundedBetween<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        if self.between.counting.get() {
            let read = self.between.read.get() + n as u64;
            self.between.read.set(read);
            if read > MOST_BETWEEN_ENTRIES {
                return Err(std::io::Error::other(format!(
                    "more than {MOST_BETWEEN_ENTRIES} bytes of headers between two entries (a long name or extended header?)"
                )));
            }
        }
        Ok(n)
    }
}

pub(crate) const GIVEN_UP: &str =
    "the fetch was given up (its timeout passed) while the archive was unpacked";

/// Unpack a gzip-compressed tar stream into `dest` (which must exist).
pub fn unpack_tar_gz(reader: impl Read, dest: &Path) -> Result<(), ArchiveError> {
    let mut unpack = Unpack::new(dest);
    unpack.tar_gz(reader)?;
    unpack.finish()
}

/// Unpack a tar stream into `dest` (which must exist). See [`Unpack`].
pub fn unpack_tar(reader: impl Read, dest: &Path) -> Result<(), ArchiveError> {
    let mut unpack = Unpack::new(dest);
    unpack.tar(reader)?;
    unpack.finish()
}

/// Lookups of paths on disk that following links may still make, counted in path components
/// (the kernel walks each of a path's components). A link's target may be 4 KiB of names and
/// `..`, and a link may pass through 40 others, so one small entry could make the kernel walk
/// millions of components; an archive may have that work in proportion to its size.
pub(crate) struct Work {
    left: u64,
    /// All the lookups allowed so far, spent or not.
    granted: u64,
}

/// Why following a link was given up.
pub const TOO_MUCH_WORK: &str =
    "takes more lookups to follow than the archive's size allows (links through links?)";

impl Work {
    /// Lookups any archive may make, however small.
    const BASE: u64 = 1 << 20;
    /// Lookups each byte of an archive's entries adds.
    const PER_BYTE: u64 = 64;

    fn new(left: u64) -> Self {
        Self {
            left,
            granted: left,
        }
    }

    /// The lookups one path named by a source (`relative`) may cost to follow.
    fn for_path(relative: &Path) -> Self {
        let bytes = relative.as_os_str().len() as u64;
        Self::new(4096 + Self::PER_BYTE * bytes)
    }

    /// Lookups no archive may exceed, however large: a few seconds of the kernel's time.
    /// (A tree of 10,000 files and 2,000 links through links takes about 600,000.) Filler
    /// entries that compress to nothing would otherwise buy any amount.
    const MOST: u64 = 64 << 20;

    fn allow(&mut self, bytes: u64) {
        let more = Self::PER_BYTE
            .saturating_mul(bytes)
            .min(Self::MOST.saturating_sub(self.granted));
        self.granted += more;
        self.left += more;
    }

    fn charge(&mut self, lookups: u64) -> Result<(), &'static str> {
        self.left = self.left.checked_sub(lookups).ok_or(TOO_MUCH_WORK)?;
        Ok(())
    }
}

/// One artifact unpacked into one destination, its layers one after the other: they share
/// the size limit, the directories known, and the work links may cost.
///
/// Links are judged against what is on disk, not only lexically: no entry is written
/// through a link (every directory on its way must be a real directory, and an existing
/// link at its place is refused), a hard link's source may not pass through a link, and
/// once the stream is unpacked every symbolic link in `dest` must resolve, following the
/// links on disk one by one, to a place inside `dest`. A chain of links that are each
/// lexically inside but together point out is refused.
pub struct Unpack<'a> {
    dest: &'a Path,
    /// Set when the fetch is given up: checked at each entry and each link followed.
    given_up: &'a AtomicBool,
    /// Bytes written so far, by every layer, and how many may be.
    written: u64,
    most: u64,
    made: Dirs,
    work: Work,
}

impl<'a> Unpack<'a> {
    pub fn new(dest: &'a Path) -> Self {
        static NEVER: AtomicBool = AtomicBool::new(false);
        Self::until(dest, &NEVER)
    }

    /// An unpack that stops once `given_up` is set.
    pub fn until(dest: &'a Path, given_up: &'a AtomicBool) -> Self {
        Self {
            dest,
            given_up,
            written: 0,
            most: MAX_UNPACKED_BYTES,
            made: Dirs::new(),
            work: Work::new(Work::BASE),
        }
    }

    /// Unpack a gzip-compressed tar stream.
    pub fn tar_gz(&mut self, reader: impl Read) -> Result<(), ArchiveError> {
        self.tar(flate2::read::GzDecoder::new(reader))
    }

    /// Every symbolic link of the destination resolved once more, now that all is written.
    pub fn finish(mut self) -> Result<(), ArchiveError> {
        check_tree(self.dest, &mut self.work, self.given_up)
    }

    /// Unpack a tar stream.
    pub fn tar(&mut self, reader: impl Read) -> Result<(), ArchiveError> {
        let dest = self.dest;
        let made = &mut self.made;
        let work = &mut self.work;
        let between = std::rc::Rc::new(Between::default());
        let mut archive = tar::Archive::new(BoundedBetween {
            inner: reader,
            between: between.clone(),
        });
        archive.set_preserve_permissions(false);
        archive.set_unpack_xattrs(false);
        let mut entries = archive.entries().map_err(ArchiveError::Read)?;
        loop {
            between.start();
            let Some(entry) = entries.next() else { break };
            between.stop();
            if self.given_up.load(Ordering::Relaxed) {
                return Err(ArchiveError::Read(std::io::Error::other(GIVEN_UP)));
            }
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
            let link_bytes = entry.link_name_bytes().map_or(0, |l| l.len());
            work.allow(512 + raw_path.as_os_str().len() as u64 + link_bytes as u64);
            // A directory or a link takes a block of the disk and an inode, however little
            // its header says.
            if !(kind.is_file() || kind == tar::EntryType::Continuous) {
                self.written += ENTRY_BYTES + link_bytes as u64;
                if self.written > self.most {
                    return Err(ArchiveError::TooLarge { limit: self.most });
                }
            }
            let unsafe_entry = |problem| ArchiveError::Unsafe {
                entry: shown.clone(),
                problem,
            };
            match kind {
                k if k.is_dir() => {
                    create_dirs(dest, &relative, &shown, made, work)?;
                }
                k if k.is_file() || k == tar::EntryType::Continuous => {
                    // What the entry says (a PAX record's size included), then what it writes.
                    let left = self.most - self.written;
                    let too_large = ArchiveError::TooLarge { limit: self.most };
                    if entry.size() > left {
                        return Err(too_large);
                    }
                    prepare_leaf(dest, &relative, &shown, made, work)?;
                    let mut file = create_file(&target)?;
                    let copied = std::io::copy(&mut (&mut entry).take(left + 1), &mut file)
                        .map_err(|source| ArchiveError::Write {
                            path: target.clone(),
                            source,
                        })?;
                    if copied > left {
                        return Err(too_large);
                    }
                    // Even an empty file takes a block and an inode.
                    self.written += copied.max(ENTRY_BYTES);
                    if self.written > self.most {
                        return Err(too_large);
                    }
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
                    let outside = || ArchiveError::Unsafe {
                        entry: shown.clone(),
                        problem: "is a link that points outside the archive",
                    };
                    prepare_leaf(dest, &relative, &shown, made, work)?;
                    if k.is_symlink() {
                        let base = relative.parent().unwrap_or(Path::new(""));
                        resolve_within(base, &link).ok_or_else(outside)?;
                        std::os::unix::fs::symlink(&link, &target).map_err(|source| {
                            ArchiveError::Write {
                                path: target.clone(),
                                source,
                            }
                        })?;
                        // Judged against the disk as it stands now; the whole tree is judged
                        // again at the end, when later entries may have changed what it meets.
                        resolve_in(dest, made, work, &relative).map_err(unsafe_entry)?;
                    } else {
                        let source = safe_relative(&link).map_err(|_| outside())?;
                        if !no_link_on_the_way(dest, made, work, &source).map_err(unsafe_entry)? {
                            return Err(unsafe_entry("is a hard link through a symbolic link"));
                        }
                        // A hard link shares its source's bytes, but everything that reads the
                        // tree (its digest, the render) reads them again: they count again.
                        let bytes =
                            std::fs::symlink_metadata(dest.join(&source)).map_or(0, |m| m.len());
                        self.written = self.written.saturating_add(bytes);
                        if self.written > self.most {
                            return Err(ArchiveError::TooLarge { limit: self.most });
                        }
                        std::fs::hard_link(dest.join(source), &target).map_err(|source| {
                            ArchiveError::Write {
                                path: target.clone(),
                                source,
                            }
                        })?;
                    }
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

/// `path` (as a Release or source names it) inside the artifact at `root`: no `..` or
/// absolute path, and, with the links on disk followed, still inside. Returns the place on
/// disk, or why it is refused.
pub fn path_inside(root: &Path, path: &str) -> Result<PathBuf, &'static str> {
    let relative = safe_relative(Path::new(path))?;
    let resolved = resolve_on_disk(root, &relative).map_err(outside_or)?;
    Ok(root.join(resolved))
}

/// What to tell of a path a source names that [`resolve_on_disk`] refused: it leads outside,
/// or it costs too much to follow.
pub fn outside_or(why: &'static str) -> &'static str {
    if why == TOO_MUCH_WORK {
        "takes more lookups to follow than any path should (links through links?)"
    } else {
        "leads outside the source"
    }
}

/// How many links one path may pass through before it is taken for a loop (Linux's limit).
const MAX_LINK_HOPS: usize = 40;

/// Follow `relative` (a path inside `root`) on disk, link by link, the way the kernel would:
/// each symbolic link met is replaced by its target, and `..` steps back. Components that do
/// not exist are taken lexically. `Ok(path inside root)`, or why it leaves `root`.
/// Following it may cost [`Work::for_path`]: [`TOO_MUCH_WORK`] beyond.
pub fn resolve_on_disk(root: &Path, relative: &Path) -> Result<PathBuf, &'static str> {
    resolve_in(
        root,
        &mut Dirs::new(),
        &mut Work::for_path(relative),
        relative,
    )
}

/// What a component of a path being resolved is on disk.
#[derive(Clone, Copy)]
enum Place {
    /// A directory `dirs` knows, which is not a link.
    Known(usize),
    /// A directory `dirs` does not know: what is in it must be looked at.
    Dir,
    /// Nothing, or not a directory: nothing below it exists.
    Absent,
}

/// [`resolve_on_disk`], where the directories `dirs` knows are known not to be links: only
/// what they do not know is looked at on disk. Looking at each component by its whole path
/// cost a deep link the square of its depth in the kernel's path walks: 800 links 1,900
/// directories deep took 228 s to unpack.
///
/// Directories found on the way become known: during an unpack a directory stays one.
fn resolve_in(
    root: &Path,
    dirs: &mut Dirs,
    work: &mut Work,
    relative: &Path,
) -> Result<PathBuf, &'static str> {
    let mut pending: std::collections::VecDeque<std::ffi::OsString> =
        std::collections::VecDeque::new();
    push_front(&mut pending, relative)?;
    let mut resolved = PathBuf::new();
    // What each component of `resolved` is; the root is a known directory.
    let mut places: Vec<Place> = Vec::new();
    let mut hops = 0;
    while let Some(part) = pending.pop_front() {
        work.charge(1)?;
        if part == ".." {
            if !resolved.pop() {
                return Err("is a link that points outside the archive");
            }
            places.pop();
            continue;
        }
        let here = places.last().copied().unwrap_or(Place::Known(Dirs::ROOT));
        let known = match here {
            Place::Known(node) => dirs.child(node, &part),
            _ => None,
        };
        let place = match (here, known) {
            (_, Some(child)) => Place::Known(child),
            (Place::Absent, _) => Place::Absent,
            _ => {
                let candidate = root.join(&resolved).join(&part);
                match look_at(&candidate, work)? {
                    Some(meta) if meta.file_type().is_symlink() => {
                        hops += 1;
                        if hops > MAX_LINK_HOPS {
                            return Err("is a link loop");
                        }
                        let target = std::fs::read_link(&candidate)
                            .map_err(|_| "is a link that cannot be read")?;
                        push_front(&mut pending, &target)?;
                        continue;
                    }
                    Some(meta) if meta.is_dir() => match here {
                        Place::Known(node) => Place::Known(dirs.insert(node, &part)),
                        _ => Place::Dir,
                    },
                    _ => Place::Absent,
                }
            }
        };
        resolved.push(&part);
        places.push(place);
    }
    Ok(resolved)
}

/// What is at `path`, not following a link there. The kernel walks the whole path each
/// time, so the tests count the components walked.
/// Nothing there, or nothing that can be looked at, is `None`. Each look is charged to
/// `work`.
fn look_at(path: &Path, work: &mut Work) -> Result<Option<std::fs::Metadata>, &'static str> {
    let components = path.components().count();
    #[cfg(test)]
    tests::WALKED.with(|w| w.set(w.get() + components));
    work.charge(components as u64)?;
    Ok(std::fs::symlink_metadata(path).ok())
}

/// Put the components of `path` before what is pending; an absolute path leaves the root.
fn push_front(
    pending: &mut std::collections::VecDeque<std::ffi::OsString>,
    path: &Path,
) -> Result<(), &'static str> {
    let mut parts = Vec::new();
    for component in path.components() {
        match component {
            Component::Normal(c) => parts.push(c.to_os_string()),
            Component::ParentDir => parts.push("..".into()),
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) => {
                return Err("is a link that points outside the archive");
            }
        }
    }
    for part in parts.into_iter().rev() {
        pending.push_front(part);
    }
    Ok(())
}

/// Whether nothing on the way to `relative`, itself included, is a symbolic link on disk.
/// The directories `dirs` knows are not links; below something absent nothing is.
fn no_link_on_the_way(
    root: &Path,
    dirs: &Dirs,
    work: &mut Work,
    relative: &Path,
) -> Result<bool, &'static str> {
    let mut node = Some(Dirs::ROOT);
    let mut path = root.to_path_buf();
    for name in relative.iter() {
        path.push(name);
        if let Some(child) = node.and_then(|n| dirs.child(n, name)) {
            node = Some(child);
            continue;
        }
        node = None;
        match look_at(&path, work)? {
            Some(meta) if meta.file_type().is_symlink() => return Ok(false),
            Some(meta) if meta.is_dir() => {}
            _ => return Ok(true),
        }
    }
    Ok(true)
}

/// Make the place of a file or link entry: its directories (never through a link), and no
/// link already at its place (writing there would write where the link points).
fn prepare_leaf(
    root: &Path,
    relative: &Path,
    shown: &str,
    made: &mut Dirs,
    work: &mut Work,
) -> Result<(), ArchiveError> {
    if let Some(parent) = relative.parent() {
        create_dirs(root, parent, shown, made, work)?;
    }
    let target = root.join(relative);
    let found = look_at(&target, work).map_err(|problem| ArchiveError::Unsafe {
        entry: shown.to_string(),
        problem,
    })?;
    match found {
        Some(meta) if meta.file_type().is_symlink() => Err(ArchiveError::Unsafe {
            entry: shown.to_string(),
            problem: "would be written through a link of an earlier entry",
        }),
        Some(meta) if meta.is_dir() => Err(ArchiveError::Unsafe {
            entry: shown.to_string(),
            problem: "would replace a directory",
        }),
        Some(_) => std::fs::remove_file(&target).map_err(|source| ArchiveError::Write {
            path: target.clone(),
            source,
        }),
        None => Ok(()),
    }
}

/// Directories of a tree that are known to be directories, not links, by name under their
/// parent (node [`Dirs::ROOT`] is the tree's root): those an unpack made or found, which stay
/// directories (no entry may replace a directory or write through one), or those a walk of
/// the tree found. Knowing them means not looking at them again by their whole path, which
/// the kernel walks anew each time: an entry 1,800 directories deep had all of them looked
/// at, so a deep tree took minutes. A name is held once, not in every path below it.
struct Dirs {
    children: std::collections::HashMap<(usize, std::ffi::OsString), usize>,
}

impl Dirs {
    const ROOT: usize = 0;

    fn new() -> Self {
        Self {
            children: std::collections::HashMap::new(),
        }
    }

    fn child(&self, node: usize, name: &std::ffi::OsStr) -> Option<usize> {
        self.children.get(&(node, name.to_os_string())).copied()
    }

    fn insert(&mut self, node: usize, name: &std::ffi::OsStr) -> usize {
        let next = self.children.len() + 1;
        *self
            .children
            .entry((node, name.to_os_string()))
            .or_insert(next)
    }
}

/// Create `relative`'s directories under `root` one by one, refusing any that is a link;
/// those `made` knows are not looked at again.
fn create_dirs(
    root: &Path,
    relative: &Path,
    shown: &str,
    made: &mut Dirs,
    work: &mut Work,
) -> Result<(), ArchiveError> {
    let mut node = Dirs::ROOT;
    let mut path = root.to_path_buf();
    for name in relative.iter() {
        path.push(name);
        if let Some(child) = made.child(node, name) {
            node = child;
            continue;
        }
        let found = look_at(&path, work).map_err(|problem| ArchiveError::Unsafe {
            entry: shown.to_string(),
            problem,
        })?;
        match found {
            Some(meta) if meta.is_dir() => {}
            Some(meta) if meta.file_type().is_symlink() => {
                return Err(ArchiveError::Unsafe {
                    entry: shown.to_string(),
                    problem: "would be written through a link of an earlier entry",
                });
            }
            Some(_) => {
                return Err(ArchiveError::Unsafe {
                    entry: shown.to_string(),
                    problem: "needs a directory where an earlier entry put a file",
                });
            }
            None => std::fs::create_dir(&path).map_err(|source| ArchiveError::Write {
                path: path.clone(),
                source,
            })?,
        }
        node = made.insert(node, name);
    }
    Ok(())
}

/// A new file that is not opened through a link: `O_CREAT|O_EXCL` fails on any existing
/// path, a link included, rather than following it.
fn create_file(path: &Path) -> Result<std::fs::File, ArchiveError> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(path)
        .map_err(|source| ArchiveError::Write {
            path: path.to_path_buf(),
            source,
        })
}

/// Check a tree (an unpacked artifact, a Git work tree) for symbolic links that leave it,
/// following each link on disk through any others it meets. The directories are walked
/// first, so that following a link looks at no directory again.
fn check_tree(root: &Path, work: &mut Work, given_up: &AtomicBool) -> Result<(), ArchiveError> {
    let mut dirs = Dirs::new();
    let mut links = Vec::new();
    // Its own list of directories to visit: a recursion as deep as the tree (a source's
    // author chooses) could overflow the thread's stack and abort the process.
    let mut to_visit = vec![(root.to_path_buf(), Dirs::ROOT)];
    while let Some((dir, node)) = to_visit.pop() {
        let read = std::fs::read_dir(&dir).map_err(ArchiveError::Read)?;
        for entry in read {
            let entry = entry.map_err(ArchiveError::Read)?;
            let file_type = entry.file_type().map_err(ArchiveError::Read)?;
            if file_type.is_symlink() {
                let path = entry.path();
                links.push(path.strip_prefix(root).unwrap_or(&path).to_path_buf());
            } else if file_type.is_dir() {
                let child = dirs.insert(node, &entry.file_name());
                to_visit.push((entry.path(), child));
            }
        }
    }
    for link in links {
        if given_up.load(Ordering::Relaxed) {
            return Err(ArchiveError::Read(std::io::Error::other(GIVEN_UP)));
        }
        resolve_in(root, &mut dirs, work, &link).map_err(|problem| ArchiveError::Unsafe {
            entry: link.display().to_string(),
            problem,
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

    thread_local! {
        /// Path components the kernel walked to look at paths ([`look_at`]).
        pub(super) static WALKED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }

    /// An archive of directories `depth` deep with `links` symbolic links at the bottom
    /// (up to the top and down again, or to such a neighbour) and a hard link, is
    /// unpacked and checked with work linear in its paths' length: each link's directories
    /// were looked at again by their whole paths (the square of the depth, per link).
    #[test]
    fn deep_links_are_unpacked_with_linear_work() {
        let (depth, links) = (600, 200);
        let deep: String = "d/".repeat(depth);
        let mut entries: Vec<(String, tar::EntryType, Option<String>)> = Vec::new();
        for i in 1..=depth {
            entries.push(("d/".repeat(i), tar::EntryType::Directory, None));
        }
        entries.push((format!("{deep}f"), tar::EntryType::Regular, None));
        let round_trip = format!("{}{}f", "../".repeat(depth), deep);
        for i in 0..links {
            let target = if i % 2 == 0 {
                round_trip.clone()
            } else {
                format!("l{}", i - 1)
            };
            entries.push((format!("{deep}l{i}"), tar::EntryType::Symlink, Some(target)));
        }
        entries.push((
            format!("{deep}h"),
            tar::EntryType::Link,
            Some(format!("{deep}f")),
        ));
        let mut builder = tar::Builder::new(Vec::new());
        for (path, kind, link) in &entries {
            let mut header = tar::Header::new_gnu();
            header.set_entry_type(*kind);
            header.set_size(u64::from(kind.is_file()));
            header.set_mode(0o755);
            let data: &[u8] = if kind.is_file() { b"x" } else { b"" };
            match link {
                Some(link) => builder.append_link(&mut header, path, link).unwrap(),
                None => builder.append_data(&mut header, path, data).unwrap(),
            }
        }
        let bytes = builder.into_inner().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("dest");
        std::fs::create_dir(&dest).unwrap();
        let paths: usize = entries
            .iter()
            .map(|(path, _, link)| {
                let components = |p: &str| Path::new(p).components().count();
                dest.components().count() + components(path) + link.as_deref().map_or(0, components)
            })
            .sum();
        WALKED.with(|w| w.set(0));
        unpack_tar(bytes.as_slice(), &dest).unwrap();
        let walked = WALKED.with(|w| w.get());
        assert!(
            walked <= 4 * paths,
            "{walked} components walked for archive paths of {paths}"
        );
        let last = dest.join(format!("{deep}l{}", links - 1));
        assert_eq!(std::fs::read_to_string(last).unwrap(), "x");
    }

    /// A tar of `entries` (path, kind, link target), files holding one byte.
    fn build(entries: &[(String, tar::EntryType, Option<String>)]) -> Vec<u8> {
        let mut builder = tar::Builder::new(Vec::new());
        for (path, kind, link) in entries {
            let mut header = tar::Header::new_gnu();
            header.set_entry_type(*kind);
            header.set_size(u64::from(kind.is_file()));
            header.set_mode(0o644);
            let data: &[u8] = if kind.is_file() { b"x" } else { b"" };
            match link {
                Some(link) => builder.append_link(&mut header, path, link).unwrap(),
                None => builder.append_data(&mut header, path, data).unwrap(),
            }
        }
        builder.into_inner().unwrap()
    }

    /// A tar of one file whose header says 0 bytes and whose PAX `size` record says `size`
    /// (the tar crate reads what the record says), streamed.
    fn pax_sized_file(name: &str, size: u64) -> impl Read {
        let body = format!(" size={size}\n");
        let mut len = body.len() + 1;
        let record = loop {
            let candidate = format!("{len}{body}");
            if candidate.len() == len {
                break candidate;
            }
            len = candidate.len();
        };
        let mut head = Vec::new();
        let mut pax = tar::Header::new_ustar();
        pax.set_path("PaxHeaders/f").unwrap();
        pax.set_entry_type(tar::EntryType::XHeader);
        pax.set_size(record.len() as u64);
        pax.set_mode(0o644);
        pax.set_cksum();
        head.extend_from_slice(pax.as_bytes());
        head.extend_from_slice(record.as_bytes());
        head.resize(head.len().div_ceil(512) * 512, 0);
        let mut file = tar::Header::new_ustar();
        file.set_path(name).unwrap();
        file.set_entry_type(tar::EntryType::Regular);
        file.set_size(0);
        file.set_mode(0o644);
        file.set_cksum();
        head.extend_from_slice(file.as_bytes());
        let pad = (512 - size % 512) % 512;
        std::io::Cursor::new(head).chain(std::io::repeat(0).take(size + pad + 1024))
    }

    /// The size limit counts what an entry writes, a PAX record's size included (the header
    /// field of 0 was counted, so a chart could unpack to far more than the limit), and holds
    /// for a whole artifact, all its layers together.
    #[test]
    fn the_size_limit_counts_what_is_written_by_every_layer() {
        let dir = tempfile::tempdir().unwrap();
        let mut unpack = Unpack::new(dir.path());
        unpack.most = 512 << 10;
        let err = unpack.tar(pax_sized_file("big", 1 << 20)).unwrap_err();
        assert!(
            matches!(err, ArchiveError::TooLarge { limit } if limit == 512 << 10),
            "{err}"
        );
        let written = std::fs::metadata(dir.path().join("big")).map_or(0, |m| m.len());
        assert!(written <= 512 << 10, "{written}");
        let dir = tempfile::tempdir().unwrap();
        let mut unpack = Unpack::new(dir.path());
        unpack.most = 512 << 10;
        unpack.tar(pax_sized_file("a", 300 << 10)).unwrap();
        let err = unpack.tar(pax_sized_file("b", 300 << 10)).unwrap_err();
        assert!(matches!(err, ArchiveError::TooLarge { .. }), "{err}");
    }

    /// A link through a link of 4 KiB of `x/..` names, 39 times over, is millions of lookups
    /// from one small entry (200 of them, 1.4 KB gzip'd, took 17 s; under a deep directory,
    /// 2 took 9 s): the lookups an archive may cost grow with its size, and past them the
    /// unpack stops, naming the entry.
    #[test]
    fn links_through_links_stop_at_the_work_the_archive_pays_for() {
        for under in [String::new(), "d/".repeat(1000)] {
            let mut entries = vec![(
                format!("{under}b"),
                tar::EntryType::Symlink,
                Some("x/../".repeat(819)),
            )];
            for i in 0..200 {
                entries.push((
                    format!("a{i}"),
                    tar::EntryType::Symlink,
                    Some(format!("{under}{}", "b/".repeat(39))),
                ));
            }
            let tar = build(&entries);
            let walked = refused_for_work(&tar);
            assert!(
                walked <= Work::BASE + Work::PER_BYTE * tar.len() as u64,
                "{walked} for {} bytes",
                tar.len()
            );
        }
    }

    /// Links into a deep tree this unpack did not make (an earlier layer's, unpacked apart)
    /// look at its directories once: each link looked at all of them again, by their whole
    /// paths, so a later layer of 800 links into a 1,900-deep tree took minutes.
    #[test]
    fn links_into_a_deep_tree_made_before_look_at_it_once() {
        let deep = "d/".repeat(1000);
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join(&deep)).unwrap();
        std::fs::write(dir.path().join(format!("{deep}f")), "x").unwrap();
        let links = build(
            &(0..100)
                .map(|i| {
                    (
                        format!("l{i}"),
                        tar::EntryType::Symlink,
                        Some(format!("{deep}f")),
                    )
                })
                .collect::<Vec<_>>(),
        );
        WALKED.with(|w| w.set(0));
        unpack_tar(links.as_slice(), dir.path()).unwrap();
        let walked = WALKED.with(|w| w.get());
        // The tree's 1,000 directories once (each by its path), then each link's own look.
        let once: usize = (1..=1001)
            .map(|d| d + dir.path().components().count())
            .sum();
        assert!(walked < 2 * once + 100 * 10_000, "{walked} (once: {once})");
    }

    /// Filler that compresses to nothing (100,000 `f/` entries gzip to 225 KB) bought billions
    /// of lookups, which links resolved only at the end then spent: 130 s of the final check
    /// for one chart. An archive's lookups are capped whatever its size.
    #[test]
    fn lookups_are_capped_however_large_the_archive() {
        let deep = "d/".repeat(1000);
        let mut entries: Vec<_> = (0..20_000)
            .map(|_| ("f/".to_string(), tar::EntryType::Directory, None))
            .collect();
        entries.push((format!("{deep}keep"), tar::EntryType::Regular, None));
        for i in 0..60 {
            let target = format!("{deep}{}", "b/".repeat(39));
            entries.push((format!("a{i}"), tar::EntryType::Symlink, Some(target)));
        }
        entries.push((
            format!("{deep}b"),
            tar::EntryType::Symlink,
            Some("x/../".repeat(819)),
        ));
        let walked = refused_for_work(&build(&entries));
        assert!(walked <= Work::MOST + 4096, "{walked}");
    }

    /// The path components walked before `tar` was refused for its lookups.
    fn refused_for_work(tar: &[u8]) -> u64 {
        let dir = tempfile::tempdir().unwrap();
        WALKED.with(|w| w.set(0));
        let err = unpack_tar(tar, dir.path()).unwrap_err();
        assert!(err.to_string().contains(TOO_MUCH_WORK), "{err}");
        WALKED.with(|w| w.get()) as u64
    }

    /// What an entry takes besides its content counts toward the size limit: a hard link
    /// is read again wherever it is (the tree's digest read a 32 MiB file 64 times over from
    /// a 33 KB archive), and any entry takes a block and an inode (200,000 rewrites of one
    /// empty file took 28 s).
    #[test]
    fn links_and_directories_count_toward_the_size_limit() {
        let file = |name: &str| {
            let mut header = tar::Header::new_gnu();
            header.set_entry_type(tar::EntryType::Regular);
            header.set_size(1 << 20);
            header.set_mode(0o644);
            (header, name.to_string())
        };
        let mut builder = tar::Builder::new(Vec::new());
        let (mut header, name) = file("big");
        builder
            .append_data(&mut header, name, std::io::repeat(0).take(1 << 20))
            .unwrap();
        for i in 0..8 {
            let mut header = tar::Header::new_gnu();
            header.set_entry_type(tar::EntryType::Link);
            header.set_size(0);
            builder
                .append_link(&mut header, format!("h{i}"), "big")
                .unwrap();
        }
        let hard_links = builder.into_inner().unwrap();
        let directories = build(
            &(0..2_000)
                .map(|i| (format!("d{i}/"), tar::EntryType::Directory, None))
                .collect::<Vec<_>>(),
        );
        // The same small file written over and over: each time an inode's worth.
        let rewrites = build(
            &(0..2_000)
                .map(|_| ("f".to_string(), tar::EntryType::Regular, None))
                .collect::<Vec<_>>(),
        );
        for archive in [hard_links, directories, rewrites] {
            let dir = tempfile::tempdir().unwrap();
            let mut unpack = Unpack::new(dir.path());
            unpack.most = 4 << 20;
            let err = unpack.tar(archive.as_slice()).unwrap_err();
            assert!(matches!(err, ArchiveError::TooLarge { .. }), "{err}");
        }
    }

    /// A GNU long name is read whole by the tar crate before the entry is handed over: a
    /// 64 MiB name from a 65 KB archive took 420 MB. More than 1 MiB of headers between two
    /// entries is refused as it is read.
    #[test]
    fn headers_between_entries_are_bounded() {
        let name = "n/".repeat(1 << 20);
        let mut builder = tar::Builder::new(Vec::new());
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Regular);
        header.set_size(1);
        header.set_mode(0o644);
        builder.append_data(&mut header, &name, &b"x"[..]).unwrap();
        let archive = builder.into_inner().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let err = unpack_tar(archive.as_slice(), dir.path()).unwrap_err();
        assert!(
            crate::engine::error::chain(&err).contains("bytes of headers between two entries"),
            "{}",
            crate::engine::error::chain(&err)
        );
    }

    /// An unpack whose fetch was given up stops at its next entry, however much of the
    /// archive is already read.
    #[test]
    fn a_given_up_unpack_stops_at_its_next_entry() {
        let archive = build(&[("a".to_string(), tar::EntryType::Regular, None)]);
        let dir = tempfile::tempdir().unwrap();
        let given_up = AtomicBool::new(true);
        let mut unpack = Unpack::until(dir.path(), &given_up);
        let err = unpack.tar(archive.as_slice()).unwrap_err();
        assert!(crate::engine::error::chain(&err).contains(GIVEN_UP));
        assert!(!dir.path().join("a").exists());
    }

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

    /// Two links, each lexically inside: `sub/up` is the root, `sub/up2` is `up/..`, which
    /// on disk is the root's parent.
    fn chain() -> Vec<(
        &'static str,
        tar::EntryType,
        Option<&'static str>,
        &'static [u8],
    )> {
        vec![
            ("sub/keep.txt", tar::EntryType::Regular, None, b"k"),
            ("sub/up", tar::EntryType::Symlink, Some(".."), b""),
            ("sub/up2", tar::EntryType::Symlink, Some("up/.."), b""),
        ]
    }

    #[test]
    fn a_chain_of_links_that_leaves_the_destination_is_rejected_before_anything_is_written_through_it()
     {
        let mut entries = chain();
        entries.push(("sub/up2/evil.txt", tar::EntryType::Regular, None, b"x"));
        let (dir, result) = unpack(&tar_with(&entries));
        let err = result.unwrap_err().to_string();
        assert_eq!(
            err,
            "archive entry \"sub/up2\" is a link that points outside the archive; refusing to unpack outside the cache"
        );
        assert!(!dir.path().join("evil.txt").exists());
    }

    #[test]
    fn a_file_is_never_written_through_a_link_of_an_earlier_entry() {
        // Even where the link itself stays inside, writing through it is refused: the
        // check would otherwise depend on the order of the entries.
        let (_dir, result) = unpack(&tar_with(&[
            ("a.txt", tar::EntryType::Regular, None, b"a"),
            ("dir", tar::EntryType::Symlink, Some("."), b""),
            ("dir/a.txt", tar::EntryType::Regular, None, b"b"),
        ]));
        let err = result.unwrap_err().to_string();
        assert!(
            err.contains("\"dir/a.txt\" would be written through a link"),
            "{err}"
        );
        let (dir, result) = unpack(&tar_with(&[
            ("a.txt", tar::EntryType::Regular, None, b"a"),
            ("b.txt", tar::EntryType::Symlink, Some("a.txt"), b""),
            ("b.txt", tar::EntryType::Regular, None, b"b"),
        ]));
        assert!(result.unwrap_err().to_string().contains("through a link"));
        assert_eq!(
            std::fs::read_to_string(dir.path().join("dest/a.txt")).unwrap(),
            "a"
        );
    }

    #[test]
    fn a_hard_link_through_a_symbolic_link_is_rejected() {
        let (_dir, result) = unpack(&tar_with(&[
            ("sub/up", tar::EntryType::Symlink, Some(".."), b""),
            ("x", tar::EntryType::Link, Some("sub/up/y"), b""),
        ]));
        assert!(
            result
                .unwrap_err()
                .to_string()
                .contains("is a hard link through a symbolic link")
        );
    }

    #[test]
    fn a_link_loop_is_rejected() {
        let (_dir, result) = unpack(&tar_with(&[
            ("a", tar::EntryType::Symlink, Some("b"), b""),
            ("b", tar::EntryType::Symlink, Some("a"), b""),
        ]));
        assert!(result.unwrap_err().to_string().contains("is a link loop"));
    }

    #[test]
    fn links_are_followed_on_disk_one_by_one() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::os::unix::fs::symlink("a/b", root.join("deep")).unwrap();
        std::os::unix::fs::symlink("../..", root.join("a/b/top")).unwrap();
        assert_eq!(resolve_on_disk(root, Path::new("deep")), Ok("a/b".into()));
        assert_eq!(resolve_on_disk(root, Path::new("deep/top")), Ok("".into()));
        // deep/top/.. is the root's parent, though each link is lexically inside.
        assert!(resolve_on_disk(root, Path::new("deep/top/..")).is_err());
        // A missing component is taken as written.
        assert_eq!(
            resolve_on_disk(root, Path::new("deep/missing/../x")),
            Ok("a/b/x".into())
        );
    }

    #[test]
    fn a_checked_out_tree_with_an_escaping_symlink_is_rejected() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("app")).unwrap();
        std::os::unix::fs::symlink("../../secrets", dir.path().join("app/creds")).unwrap();
        let err = check_tree(
            dir.path(),
            &mut Work::new(Work::BASE),
            &AtomicBool::new(false),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("\"app/creds\" is a link that points outside"),
            "{err}"
        );
        std::fs::remove_file(dir.path().join("app/creds")).unwrap();
        std::os::unix::fs::symlink("../app", dir.path().join("app/self")).unwrap();
        check_tree(
            dir.path(),
            &mut Work::new(Work::BASE),
            &AtomicBool::new(false),
        )
        .unwrap();
    }
}

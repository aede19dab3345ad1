//! kustomize content through the `kustomize` binary (`kustomize build`).
//!
//! kustomize follows a kustomization's references wherever they point: a resource path like
//! `../../../../etc` is a base to it, and a URL (`https://…`, `git::…`, `github.com/…`) is
//! fetched from the network. A source's author must not reach outside the source, so before
//! kustomize runs, [`check_kustomization`] reads every kustomization the build would load and
//! checks every path it names (resources, bases, components, patches, generator files,
//! replacements, CRDs, configurations, OpenAPI schema) against the artifact on disk, links
//! followed: each must stay inside the artifact. Remote references are refused unless the
//! Release sets `content.kustomize.allowRemoteBases`. kustomize then runs with the root-only
//! load restrictor, no plugins, and an environment of convoy's making.

use crate::engine::error::Invalid;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use serde_json::Value;
use tokio::process::Command;

use super::bounded_yaml;
use super::error::RenderError;
use super::helm::tool_message;
use super::manifests::parse_documents;
use super::object::Object;
use crate::engine::source::archive::{outside_or, resolve_on_disk};
use crate::engine::tools::Tool;

/// The names kustomize looks for in a directory, in its order.
const KUSTOMIZATION_FILES: [&str; 3] = ["kustomization.yaml", "kustomization.yml", "Kustomization"];

/// Run `kustomize build dir` and parse what it prints. `root` is the artifact `dir` lies in:
/// nothing the build loads may be outside it.
pub async fn build(
    root: &Path,
    dir: &Path,
    allow_remote: bool,
) -> Result<Vec<Object>, RenderError> {
    let (root_owned, dir_owned) = (root.to_path_buf(), dir.to_path_buf());
    let kustomize = Tool::Kustomize.locate()?;
    let home = tempfile::tempdir()
        .map_err(|e| RenderError::Tool(format!("cannot create a temporary directory: {e}")))?;
    // Made and written on the blocking thread, and returned from it: a render past its
    // deadline drops the result there, and the tree with it, rather than the thread writing
    // on into a directory already removed (found by an attack).
    let (_tree, staging, start) = tokio::task::spawn_blocking(move || {
        let staged = check_kustomization(&root_owned, &dir_owned, allow_remote)?;
        let failed = |e: std::io::Error| {
            RenderError::Tool(format!("cannot stage the kustomization's files: {e}"))
        };
        let tree = tempfile::tempdir().map_err(failed)?;
        // Named as the source is, so kustomize's messages name what they named before.
        let staging = tree.path().join(
            root_owned
                .file_name()
                .unwrap_or(std::ffi::OsStr::new("source")),
        );
        let start = staged.write(&root_owned, &staging).map_err(failed)?;
        Ok::<_, RenderError>((tree, staging, start))
    })
    .await
    .map_err(|e| RenderError::Tool(format!("checking the kustomization failed: {e}")))??;
    let root = staging.as_path();
    if allow_remote {
        super::no_network::network_env(|v| std::env::var(v).ok(), true).map_err(|e| {
            RenderError::Tool(format!("kustomize cannot be given convoy's proxy: {e}"))
        })?;
    }
    let mut child = Command::from(command(&kustomize, &start, home.path(), allow_remote))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| RenderError::Tool(format!("cannot run {}: {e}", kustomize.display())))?;
    let read_failed = |e: std::io::Error| {
        RenderError::Tool(format!(
            "cannot read the output of {}: {e}",
            kustomize.display()
        ))
    };
    let mut stdout = Vec::new();
    let read = super::tool_output::read(child.stdout.take(), child.stderr.take(), |chunk| {
        stdout.extend_from_slice(chunk)
    })
    .await
    .map_err(read_failed)?;
    if read.too_large {
        return Err(RenderError::Kustomize(super::tool_output::too_large(
            "kustomize",
        )));
    }
    let status = child.wait().await.map_err(read_failed)?;
    if !status.success() {
        return Err(RenderError::Kustomize(tool_message(&read.errors, &[root])));
    }
    tokio::task::spawn_blocking(move || {
        let text = String::from_utf8_lossy(&stdout);
        parse_documents(&text, "kustomize build output")
    })
    .await
    .map_err(|e| RenderError::Tool(format!("parsing the kustomize output failed: {e}")))?
    .map_err(RenderError::Manifests)
}

/// `kustomize build dir` in an environment of convoy's making: no configuration of the
/// machine's, the root-only load restrictor, and — unless remote bases are allowed — no way
/// out to the network. The checker refuses every URL it sees, but it reads YAML with another
/// parser than kustomize's, and an attack found eight ways to make them disagree; so kustomize
/// also runs behind [`super::no_network`]'s proxy. `home` is an empty directory.
pub fn command(
    kustomize: &Path,
    dir: &Path,
    home: &Path,
    allow_remote: bool,
) -> std::process::Command {
    let mut cmd = std::process::Command::new(kustomize);
    cmd.arg("build")
        .arg("--load-restrictor=LoadRestrictionsRootOnly")
        .arg("--")
        .arg(dir)
        .env_clear()
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home)
        .env("KUBECONFIG", home.join("no-kubeconfig"))
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TERMINAL_PROMPT", "0")
        .envs(remote_git_env(allow_remote));
    // Remote bases and files are fetched as convoy fetches sources: through the proxy of its
    // environment (cleared above with the rest).
    super::no_network::give_network(&mut cmd, allow_remote, true);
    if let Some(path) = std::env::var_os("PATH") {
        cmd.env("PATH", path);
    }
    cmd
}

/// The transports the git kustomize runs for a remote base may use: none unless remote bases
/// are allowed, and never `file`. kustomize reads more than the checker sees as remote (a
/// directory named like `host:org/repo` is a repository to it first), and a local clone
/// would read other scopes' repositories from convoy's own cache, or any on the machine.
fn remote_git_env(allow_remote: bool) -> Vec<(String, String)> {
    let mut config = vec![("protocol.allow".to_string(), "never".to_string())];
    if allow_remote {
        for protocol in crate::engine::source::git::ALLOWED_PROTOCOLS {
            config.push((format!("protocol.{protocol}.allow"), "always".into()));
        }
    }
    config.push(("protocol.file.allow".into(), "never".into()));
    crate::engine::source::git::config_env(config)
}

/// Read the kustomization in `dir` and every one it loads, and check that every path they
/// name stays inside `root` (on disk, links followed) and that nothing is fetched from the
/// network unless `allow_remote`.
///
/// Returns what kustomize may read, as convoy read it ([`Staged`]): kustomize then runs on
/// that alone.
pub fn check_kustomization(
    root: &Path,
    dir: &Path,
    allow_remote: bool,
) -> Result<Staged, RenderError> {
    let start = dir
        .strip_prefix(root)
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let mut checker = Checker {
        root,
        allow_remote,
        seen: BTreeSet::new(),
        depth: 0,
        staged: Staged {
            start: start.clone(),
            ..Default::default()
        },
        configs: Default::default(),
        kustomizations: Default::default(),
    };
    checker.directory(&start, None)?;
    Ok(checker.staged)
}

/// The tree kustomize builds: every file it may read, at the path it opens (relative to the
/// source, as text: no links), and nothing else. The kustomizations and configs are written
/// as the JSON convoy read them, so kustomize's YAML reader parses what convoy checked, not
/// the text: two attack rounds found fifteen ways the two readers disagreed (merge keys,
/// tags, line separators, document splits…), each of which had kustomize fetch a URL or
/// build a base outside the source.
#[derive(Debug, Default)]
pub struct Staged {
    /// The top kustomization's directory.
    start: PathBuf,
    /// Files kustomize reads as they are (manifests, patches, generator files): where it
    /// opens each → where its bytes are in the source (links followed).
    copies: std::collections::BTreeMap<PathBuf, PathBuf>,
    /// Bases reached through links: where kustomize opens each → where it is staged.
    links: std::collections::BTreeMap<PathBuf, PathBuf>,
    /// Files kustomize parses (kustomizations, config files): where → the text to write.
    documents: std::collections::BTreeMap<PathBuf, std::sync::Arc<str>>,
    /// What the tree holds so far.
    bytes: u64,
}

impl Staged {
    /// Count `bytes` more in a file at `at`; refused past the bounds, or where one path
    /// would be both a file's bytes and a document (a ConfigMap's file that is also a
    /// kustomization would hold the JSON convoy wrote, not its text).
    fn add(&mut self, at: &Path, bytes: u64, document: bool) -> Result<(), String> {
        let other = if document {
            self.copies.contains_key(at)
        } else {
            self.documents.contains_key(at)
        };
        if other {
            return Err(format!(
                "{} is read both as a kustomization or config and as a file's content; use two files",
                at.display()
            ));
        }
        self.charge(bytes)?;
        if self.copies.len() + self.documents.len() >= MOST_STAGED_FILES {
            return Err(self.too_much());
        }
        Ok(())
    }

    /// Count `bytes` more against the tree's bound.
    fn charge(&mut self, bytes: u64) -> Result<(), String> {
        self.bytes = self.bytes.saturating_add(bytes);
        if self.bytes > MOST_STAGED_BYTES {
            return Err(self.too_much());
        }
        Ok(())
    }

    fn too_much(&self) -> String {
        format!(
            "the kustomization reaches more than {} MiB or {MOST_STAGED_FILES} files (through links or repeated paths?)",
            MOST_STAGED_BYTES >> 20
        )
    }
}

impl Staged {
    /// Write the tree under `into` (an empty directory); returns the directory to build.
    pub fn write(&self, root: &Path, into: &Path) -> std::io::Result<PathBuf> {
        let place = |relative: &Path| -> std::io::Result<PathBuf> {
            let path = into.join(relative);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)?;
            }
            Ok(path)
        };
        // Links first, the shallowest first, so the files staged through them land where
        // they lead; one whose place already leads to its target (or is taken) is left.
        let mut links: Vec<(&PathBuf, &PathBuf)> = self.links.iter().collect();
        links.sort_by_key(|(at, _)| at.components().count());
        for (at, to) in links {
            let target = into.join(to);
            std::fs::create_dir_all(&target)?;
            let path = place(at)?;
            if std::fs::symlink_metadata(&path).is_ok() {
                continue;
            }
            let parent = path.parent().map(std::fs::canonicalize).transpose()?;
            let here = parent.zip(path.file_name()).map(|(p, n)| p.join(n));
            if here == Some(std::fs::canonicalize(&target)?) {
                continue;
            }
            std::os::unix::fs::symlink(&target, &path)?;
        }
        // Two keys may lead to one place through the staged links (`app/v/x` and `victim/x`
        // with `app/v` a link to `victim`). Each place is written once, as a new file: an
        // attack had the second write go through a hard link to the source and truncate
        // another Release's file, or put convoy's JSON where a ConfigMap read the text.
        let mut claimed: std::collections::HashMap<PathBuf, Option<PathBuf>> =
            std::collections::HashMap::new();
        let mut claim = |path: &Path, copy_of: Option<&PathBuf>| -> std::io::Result<bool> {
            let parent = path.parent().map(std::fs::canonicalize).transpose()?;
            let real = parent
                .zip(path.file_name())
                .map(|(p, n)| p.join(n))
                .unwrap_or_else(|| path.to_path_buf());
            match claimed.get(&real) {
                None => {
                    claimed.insert(real, copy_of.cloned());
                    Ok(true)
                }
                Some(Some(earlier)) if copy_of == Some(earlier) => Ok(false),
                Some(_) => Err(std::io::Error::other(format!(
                    "two paths lead to one file of the kustomization's tree ({}); name each file by one path",
                    path.strip_prefix(into).unwrap_or(path).display()
                ))),
            }
        };
        let create = |path: &Path| {
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path)
        };
        for (at, from) in &self.copies {
            let path = place(at)?;
            if claim(&path, Some(from))? {
                // A copy, never a hard link: the staged tree is written to, the source never.
                let mut source = std::fs::File::open(root.join(from))?;
                std::io::copy(&mut source, &mut create(&path)?)?;
            }
        }
        for (at, text) in &self.documents {
            let path = place(at)?;
            if claim(&path, None)? {
                std::io::Write::write_all(&mut create(&path)?, text.as_bytes())?;
            }
        }
        let start = into.join(&self.start);
        std::fs::create_dir_all(&start)?;
        Ok(start)
    }
}

/// How kustomizations and configs are read, as kustomize reads their scalars: `y`, `on`
/// stay text (serde-saphyr's YAML 1.1 booleans turned a label `y` into `true`), `010` is 8.
fn yaml_options() -> serde_saphyr::Options {
    let mut options = serde_saphyr::Options::default();
    options.strict_booleans = true;
    options.legacy_octal_numbers = true;
    options
}

/// The most a staged tree may hold, and how many files: a source of 2 GiB could otherwise be
/// staged many times over through links or repeated paths (found by an attack: a 1 MiB config
/// behind 100 links held 6 GiB of the daemon's memory, and copies filled the disk).
const MOST_STAGED_BYTES: u64 = 128 << 20;
const MOST_STAGED_FILES: usize = 20_000;

/// `value` as one line of JSON that YAML readers read alike (JSON is YAML; the line
/// separators go-yaml breaks lines at are escaped).
fn canonical(value: &Value) -> String {
    let json = serde_json::to_string(value).unwrap_or_default();
    if !json.contains(['\u{85}', '\u{2028}', '\u{2029}']) {
        return json;
    }
    json.replace('\u{85}', "\\u0085")
        .replace('\u{2028}', "\\u2028")
        .replace('\u{2029}', "\\u2029")
}

struct Checker<'a> {
    root: &'a Path,
    allow_remote: bool,
    seen: BTreeSet<PathBuf>,
    /// How many kustomizations the one being read is a base of.
    depth: usize,
    staged: Staged,
    /// Kustomization files read so far (by where their bytes are).
    kustomizations: std::collections::HashMap<PathBuf, std::sync::Arc<Value>>,
    /// Config files read so far (by where their bytes are), read once however many paths
    /// lead to them.
    configs: std::collections::HashMap<PathBuf, (std::sync::Arc<Vec<Value>>, std::sync::Arc<str>)>,
}

/// How deep bases may nest. Overlays of overlays are a few levels deep; the check follows a
/// chain by recursion, and a chain of thousands of sibling directories (`../k2`, `../k3`…)
/// overflowed the thread's stack and aborted the process.
const MOST_NESTING: usize = 100;

/// Where a reference was found, for messages: the kustomization file and the field.
struct Site<'a> {
    file: &'a Path,
    field: &'a str,
}

impl Checker<'_> {
    /// A kustomization directory (`dir` relative to the root, as text: where kustomize,
    /// building the staged tree, finds it).
    fn directory(&mut self, dir: &Path, from: Option<&Site>) -> Result<(), RenderError> {
        if !self.seen.insert(dir.to_path_buf()) {
            return Ok(());
        }
        // kustomize takes the one that loads; with a link leading out of the directory (it
        // refuses that one) beside another, the checker read the link's target and kustomize
        // the other (found by an attack).
        let present: Vec<PathBuf> = KUSTOMIZATION_FILES
            .iter()
            .map(|name| dir.join(name))
            .filter(|f| std::fs::symlink_metadata(self.root.join(f)).is_ok())
            .collect();
        if present.len() > 1 {
            return Err(RenderError::Invalid(Invalid(format!(
                "{} holds {}: kustomize reads one; keep one",
                if dir.as_os_str().is_empty() {
                    Path::new(".")
                } else {
                    dir
                }
                .display(),
                present
                    .iter()
                    .filter_map(|f| f.file_name())
                    .map(|n| n.to_string_lossy().into_owned())
                    .collect::<Vec<_>>()
                    .join(" and ")
            ))));
        }
        let Some(file) = present.into_iter().find(|f| self.root.join(f).is_file()) else {
            return match from {
                // The top directory: kustomize says what is missing.
                None => Ok(()),
                Some(site) => Err(self.refuse(
                    site,
                    &dir.display().to_string(),
                    "is a directory without a kustomization",
                )),
            };
        };
        let resolved = resolve_on_disk(self.root, &file).map_err(|why| {
            RenderError::Invalid(Invalid(format!("{} {}", file.display(), outside_or(why))))
        })?;
        // Read once however many directories' kustomization links to it (found by an
        // attack: a 10 MB file of comments behind 1,000 links cost 26 s of CPU per render).
        let kustomization = match self.kustomizations.get(&resolved) {
            Some(read) => read.clone(),
            None => {
                let text = std::fs::read_to_string(self.root.join(&resolved)).map_err(|e| {
                    RenderError::Invalid(Invalid(format!("cannot read {}: {e}", file.display())))
                })?;
                let read = bounded_yaml::from_str(&text, yaml_options()).map_err(|e| {
                    RenderError::Invalid(Invalid(format!(
                        "{} is not valid YAML: {e}",
                        file.display()
                    )))
                })?;
                let read = std::sync::Arc::new(read);
                self.kustomizations.insert(resolved.clone(), read.clone());
                read
            }
        };
        check_spelling(&file, &kustomization)?;
        let inline = self.kustomization(dir, &file, &kustomization)?;
        // An empty file (comments alone) is an empty kustomization to kustomize.
        let mut written = match &*kustomization {
            Value::Null => Value::Object(Default::default()),
            read => read.clone(),
        };
        for (field, i, config) in inline {
            written[field][i] = Value::String(config);
        }
        let text: std::sync::Arc<str> = canonical(&written).into();
        self.staged
            .add(&file, text.len() as u64, true)
            .map_err(|why| RenderError::Invalid(Invalid(why)))?;
        self.staged.documents.insert(file, text);
        Ok(())
    }

    /// Check a kustomization; returns its inline configs as they are to be written (field,
    /// index, canonical text).
    fn kustomization(
        &mut self,
        dir: &Path,
        file: &Path,
        k: &Value,
    ) -> Result<Vec<(&'static str, usize, String)>, RenderError> {
        let mut inline_configs = Vec::new();
        let site = |field: &'static str| (file.to_path_buf(), field);
        for field in ["helmCharts", "helmGlobals", "helmChartInflationGenerator"] {
            if !k[field].is_null() {
                let (file, field) = site(field);
                return Err(RenderError::Unsupported(format!(
                    "{}: {field} is not supported: render the chart with content.type helm",
                    file.display()
                )));
            }
        }
        // References that may be kustomizations (directories) or files.
        for field in ["resources", "bases", "components"] {
            for entry in strings_only(&k[field], file, field)? {
                let (f, fd) = site(field);
                self.reference(
                    dir,
                    &Site {
                        file: &f,
                        field: fd,
                    },
                    entry,
                    true,
                )?;
            }
        }
        // Plain files.
        for field in ["crds", "configurations"] {
            for entry in strings_only(&k[field], file, field)? {
                let (f, fd) = site(field);
                self.reference(
                    dir,
                    &Site {
                        file: &f,
                        field: fd,
                    },
                    entry,
                    false,
                )?;
            }
        }
        // Files, or inline YAML (which may itself name files, as generator configs do).
        for field in [
            "patchesStrategicMerge",
            "generators",
            "transformers",
            "validators",
        ] {
            for (i, entry) in strings_only(&k[field], file, field)?
                .into_iter()
                .enumerate()
            {
                let (f, fd) = site(field);
                let s = Site {
                    file: &f,
                    field: fd,
                };
                if is_inline(entry) {
                    // Unread, its paths would go unchecked while kustomize's own reader
                    // might still make sense of it: refused.
                    let inline = bounded_yaml::from_str(entry, yaml_options()).map_err(|e| {
                        let line = e.location().map(|l| l.line()).unwrap_or(0);
                        self.refuse(
                            &s,
                            "(inline)",
                            &format!("is YAML convoy cannot read (line {line} of the entry), so its paths cannot be checked"),
                        )
                    })?;
                    check_spelling(&f, &inline)?;
                    if !inline.is_object() {
                        // kustomize would not read it as a config, but as a file's name.
                        return Err(self.refuse(
                            &s,
                            "(inline)",
                            "is not a mapping: an inline config is one object",
                        ));
                    }
                    self.inline_config(dir, &s, &inline)?;
                    // Counted as it is made: inline entries (aliases of one, each an alias
                    // bomb within bounds) were all held before the tree's bound was
                    // checked (found by an attack: a 270 KB file took 4.5 GB).
                    let written = canonical(&inline);
                    self.staged
                        .charge(written.len() as u64)
                        .map_err(|why| self.refuse(&s, "(inline)", &why))?;
                    inline_configs.push((field, i, written));
                } else {
                    if !is_plain_path(entry) {
                        // kustomize first tries an entry as inline YAML: `&a {kind: …}` or
                        // `!!map …` is a config to it and a file's name to a path check.
                        return Err(self.refuse(
                            &s,
                            entry,
                            "is neither a plain path (letters, digits and . _ / - + = @ ~) nor inline YAML on lines of its own",
                        ));
                    }
                    let copied = self.reference(dir, &s, entry, false)?;
                    if field != "patchesStrategicMerge" {
                        // A config file is written as the JSON convoy read, not copied.
                        if let Some(copy) = copied {
                            self.staged.copies.remove(&copy);
                        }
                        self.config_file(dir, &s, entry)?;
                    }
                }
            }
        }
        for field in ["patches", "patchesJson6902", "replacements"] {
            for item in k[field].as_array().into_iter().flatten() {
                if let Some(path) = item["path"].as_str() {
                    let (f, fd) = site(field);
                    self.reference(
                        dir,
                        &Site {
                            file: &f,
                            field: fd,
                        },
                        path,
                        false,
                    )?;
                }
            }
        }
        if let Some(path) = k["openapi"]["path"].as_str() {
            let (f, fd) = site("openapi");
            self.reference(
                dir,
                &Site {
                    file: &f,
                    field: fd,
                },
                path,
                false,
            )?;
        }
        for field in ["configMapGenerator", "secretGenerator"] {
            for item in k[field].as_array().into_iter().flatten() {
                let (f, fd) = site(field);
                self.generator(
                    dir,
                    &Site {
                        file: &f,
                        field: fd,
                    },
                    item,
                )?;
            }
        }
        Ok(inline_configs)
    }

    /// The files an inline generator or transformer config reads: a builtin generator's
    /// `files` and `envs`, a PatchTransformer's `path`, a ReplacementTransformer's
    /// `replacements[].path`; a `List` of configs, each of its items.
    fn inline_config(
        &mut self,
        dir: &Path,
        site: &Site,
        config: &Value,
    ) -> Result<(), RenderError> {
        let mut items = Vec::new();
        unwrap_lists(config, 0, &mut items).map_err(|why| self.refuse(site, "(config)", why))?;
        for item in items {
            let kind = item["kind"].as_str().unwrap_or_default();
            if !CONFIG_KINDS.contains(&kind) {
                return Err(self.refuse(
                    site,
                    kind,
                    &format!(
                        "is not a config kind convoy checks (kustomize's builtin {}); other kinds may read files or the network",
                        CONFIG_KINDS.join(", ")
                    ),
                ));
            }
            self.generator(dir, site, item)?;
            let paths = item["path"]
                .as_str()
                .into_iter()
                .chain(strings_only(&item["paths"], site.file, "paths")?)
                .chain(
                    item["replacements"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|r| r["path"].as_str()),
                );
            for path in paths {
                self.reference(dir, site, path, false)?;
            }
        }
        Ok(())
    }

    /// A generator, transformer or validator config in a file of the source (`entry`,
    /// already checked to stay inside it): each of its documents is read as an inline one
    /// is. kustomize loads the files such a config names — a URL with a GET — so unread, a
    /// `ConfigMapGenerator` config's `files: [k=http://…]` put any address's answer in a
    /// ConfigMap (found by an attack). A directory is a kustomization, checked as one.
    fn config_file(&mut self, dir: &Path, site: &Site, entry: &str) -> Result<(), RenderError> {
        if is_remote(entry) {
            return Ok(());
        }
        let Some((lexical, resolved)) = lexically_clean(&dir.join(entry)).and_then(|lexical| {
            let resolved = resolve_on_disk(self.root, &lexical).ok()?;
            Some((lexical, resolved))
        }) else {
            return Ok(());
        };
        let on_disk = self.root.join(&resolved);
        if on_disk.is_dir() {
            // kustomize builds it and takes what it renders as configs: its resources'
            // paths would go unread (found by an attack).
            return Err(self.refuse(
                site,
                entry,
                "is a directory: kustomize would take what it builds as configs, which convoy does not check; name config files",
            ));
        }
        if !on_disk.is_file() {
            return Ok(());
        }
        let (configs, written) = match self.configs.get(&resolved) {
            Some((configs, written)) => (configs.clone(), written.clone()),
            None => {
                let text = std::fs::read_to_string(&on_disk).map_err(|e| {
                    RenderError::Invalid(Invalid(format!(
                        "cannot read {}: {e}",
                        resolved.display()
                    )))
                })?;
                let configs = bounded_yaml::from_multiple(&text, yaml_options()).map_err(|e| {
                    let line = e.location().map(|l| l.line()).unwrap_or(0);
                    self.refuse(
                        site,
                        entry,
                        &format!("is YAML convoy cannot read (line {line}), so the paths it names cannot be checked"),
                    )
                })?;
                for config in &configs {
                    check_spelling(&resolved, config)?;
                }
                let written: std::sync::Arc<str> = configs
                    .iter()
                    .map(canonical)
                    .collect::<Vec<_>>()
                    .join("\n---\n")
                    .into();
                let read = (std::sync::Arc::new(configs), written);
                self.configs.insert(resolved.clone(), read.clone());
                read
            }
        };
        let in_file = Site {
            file: &resolved,
            field: site.field,
        };
        // Its paths are the kustomization's (`dir`), so checked for each that names it.
        for config in configs.iter() {
            self.inline_config(dir, &in_file, config)?;
        }
        self.staged
            .add(&lexical, written.len() as u64, true)
            .map_err(|why| self.refuse(site, entry, &why))?;
        self.staged.documents.insert(lexical, written);
        Ok(())
    }

    /// The files a generator (or a builtin generator's inline config) reads.
    fn generator(&mut self, dir: &Path, site: &Site, item: &Value) -> Result<(), RenderError> {
        for file in strings_only(&item["files"], site.file, "files")? {
            // `key=path` or `path`.
            let path = file.split_once('=').map_or(file, |(_, p)| p);
            self.reference(dir, site, path, false)?;
        }
        for env in strings_only(&item["envs"], site.file, "envs")?
            .into_iter()
            .chain(item["env"].as_str())
        {
            self.reference(dir, site, env, false)?;
        }
        Ok(())
    }

    /// One path a kustomization names, relative to its directory `dir`.
    fn reference(
        &mut self,
        dir: &Path,
        site: &Site,
        entry: &str,
        may_be_kustomization: bool,
    ) -> Result<Option<PathBuf>, RenderError> {
        let lower = entry.trim_start().to_ascii_lowercase();
        if lower.starts_with("file:") || lower.contains("file://") {
            return Err(self.refuse(
                site,
                entry,
                "is a file: URL, which reads this machine's files; paths must stay inside the source",
            ));
        }
        if is_remote(entry) {
            return if self.allow_remote {
                Ok(None)
            } else {
                Err(self.refuse(
                    site,
                    entry,
                    "is a remote reference, which convoy does not fetch (set content.kustomize.allowRemoteBases: true to let kustomize fetch it)",
                ))
            };
        }
        if Path::new(entry).is_absolute() {
            return Err(self.refuse(
                site,
                entry,
                "is an absolute path; paths must stay inside the source",
            ));
        }
        // kustomize joins and cleans the text first (Go's filepath.Join: `link/..` is gone
        // before any link is followed), then follows links; following `link/../x` on disk
        // instead checked another place than kustomize loaded (found by an attack).
        let lexical = lexically_clean(&dir.join(entry))
            .ok_or_else(|| self.refuse(site, entry, "leads outside the source"))?;
        let resolved = resolve_on_disk(self.root, &lexical)
            .map_err(|why| self.refuse(site, entry, outside_or(why)))?;
        let on_disk = self.root.join(&resolved);
        if !on_disk.exists() {
            // kustomize would try a path it cannot find as a remote reference.
            return if self.allow_remote {
                Ok(None)
            } else {
                Err(self.refuse(site, entry, "does not exist in the source"))
            };
        }
        if on_disk.is_dir() {
            if !may_be_kustomization {
                return Err(self.refuse(
                    site,
                    entry,
                    "is a directory where kustomize reads a file",
                ));
            }
            if self.depth >= MOST_NESTING {
                return Err(self.refuse(
                    site,
                    entry,
                    &format!("nests kustomizations more than {MOST_NESTING} deep"),
                ));
            }
            if lexical != resolved {
                // kustomize reads a base reached through a link where the link leads, and
                // resolves the base's own paths from there: so does the check, and the staged
                // tree has the link, to the base staged at its place.
                if self.staged.links.len() >= MOST_STAGED_FILES {
                    return Err(self.refuse(site, entry, &self.staged.too_much()));
                }
                self.staged.links.insert(lexical, resolved.clone());
            }
            self.depth += 1;
            let result = self.directory(&resolved, Some(site));
            self.depth -= 1;
            return result.map(|()| None);
        }
        let bytes = on_disk.metadata().map(|m| m.len()).unwrap_or(0);
        self.staged
            .add(&lexical, bytes, false)
            .map_err(|why| self.refuse(site, entry, &why))?;
        let new = self
            .staged
            .copies
            .insert(lexical.clone(), resolved)
            .is_none();
        Ok(new.then_some(lexical))
    }

    fn refuse(&self, site: &Site, entry: &str, why: &str) -> RenderError {
        RenderError::Invalid(Invalid(format!(
            "{}: {} entry {entry:?} {why}",
            site.file.display(),
            site.field
        )))
    }
}

/// `path` with `.` and `dir/..` removed as text (Go's `filepath.Clean`), or `None` when a
/// `..` climbs above its start.
fn lexically_clean(path: &Path) -> Option<PathBuf> {
    let cleaned = super::go_tar::clean(path.to_str()?);
    let outside = cleaned == ".." || cleaned.starts_with("../") || cleaned.starts_with('/');
    (!outside).then(|| match cleaned.as_str() {
        "." => PathBuf::new(),
        _ => PathBuf::from(cleaned),
    })
}

fn is_inline(entry: &str) -> bool {
    entry.contains('\n') || entry.trim_start().starts_with('{')
}

/// The builtin generator, transformer and validator configs convoy lets kustomize run: those
/// that read no file, and those whose files it checks (`files`, `envs`, `env`, `path`,
/// `paths`, `replacements[].path`). Others read what the checker does not see
/// (`ValueAddTransformer.targetFilePath` fetched a URL; found by an attack) or run helm.
const CONFIG_KINDS: [&str; 17] = [
    "ConfigMapGenerator",
    "SecretGenerator",
    "PatchTransformer",
    "PatchJson6902Transformer",
    "PatchStrategicMergeTransformer",
    "ReplacementTransformer",
    "AnnotationsTransformer",
    "LabelTransformer",
    "NamespaceTransformer",
    "PrefixTransformer",
    "SuffixTransformer",
    "PrefixSuffixTransformer",
    "ImageTagTransformer",
    "ReplicaCountTransformer",
    "HashTransformer",
    "IAMPolicyGenerator",
    "SortOrderTransformer",
];

/// How deep lists of configs may nest.
const MOST_LIST_DEPTH: usize = 16;

/// The configs `config` holds: kustomize reads any kind ending in `List` with `items` as a
/// list, its items lists again (only `kind: List` one level deep was unwrapped, so a
/// `ConfigMapList` or a List in a List went unread; found by an attack).
fn unwrap_lists<'v>(
    config: &'v Value,
    depth: usize,
    into: &mut Vec<&'v Value>,
) -> Result<(), &'static str> {
    let is_list = config["kind"].as_str().is_some_and(|k| k.ends_with("List"));
    match config["items"].as_array() {
        Some(items) if is_list => {
            if depth >= MOST_LIST_DEPTH {
                return Err("nests lists of configs too deep");
            }
            for item in items {
                unwrap_lists(item, depth + 1, into)?;
            }
            Ok(())
        }
        _ => {
            into.push(config);
            Ok(())
        }
    }
}

/// A path entry kustomize cannot take for inline YAML.
fn is_plain_path(entry: &str) -> bool {
    !entry.is_empty()
        && entry
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._/-+=@~".contains(c))
}

/// The entries of a list of paths, every one a string: a value of another type was skipped,
/// and another YAML reader may read it as a string.
fn strings_only<'v>(
    value: &'v Value,
    file: &Path,
    field: &str,
) -> Result<Vec<&'v str>, RenderError> {
    let Some(items) = value.as_array() else {
        return Ok(Vec::new());
    };
    items
        .iter()
        .map(|item| {
            item.as_str().ok_or_else(|| {
                RenderError::Invalid(Invalid(format!(
                    "{}: {field} entry {item} is not a string (quote it)",
                    file.display()
                )))
            })
        })
        .collect()
}

/// The fields the checker reads by name, at whatever depth.
const READ_FIELDS: [&str; 25] = [
    "resources",
    "bases",
    "components",
    "crds",
    "configurations",
    "patchesStrategicMerge",
    "generators",
    "transformers",
    "validators",
    "patches",
    "patchesJson6902",
    "replacements",
    "openapi",
    "path",
    "paths",
    "configMapGenerator",
    "secretGenerator",
    "files",
    "envs",
    "env",
    "helmCharts",
    "helmGlobals",
    "helmChartInflationGenerator",
    "items",
    "kind",
];

/// A name as Go's `encoding/json` compares it when no field has it exactly: kustomize decodes
/// a kustomization with it, and it takes a key equal to a field's name under Unicode simple
/// case folding as that field (`Resources`, `reſources` with a long s, a Kelvin sign for k).
fn go_fold(name: &str) -> String {
    name.chars()
        .flat_map(char::to_lowercase)
        .map(|c| if c == 'ſ' { 's' } else { c })
        .collect()
}

/// Refuse a key that kustomize would read as one of [`READ_FIELDS`] but the checker, which
/// reads them by their exact names, would not: with `Resources:` or `Files:` the paths and
/// URLs under it went unchecked, and kustomize fetched them (found by an attack).
fn check_spelling(file: &Path, document: &Value) -> Result<(), RenderError> {
    let mut to_visit = vec![document];
    while let Some(value) = to_visit.pop() {
        match value {
            Value::Object(map) => {
                for (key, inner) in map {
                    if key == "<<" {
                        return Err(RenderError::Invalid(Invalid(format!(
                            "{}: holds a \"<<\" key, which go-yaml takes for a merge key; write the keys out",
                            file.display()
                        ))));
                    }
                    if !READ_FIELDS.contains(&key.as_str()) {
                        let folded = go_fold(key);
                        if let Some(field) = READ_FIELDS.iter().find(|f| go_fold(f) == folded) {
                            return Err(RenderError::Invalid(Invalid(format!(
                                "{}: key {key:?} is read by kustomize as {field:?} (it matches field names whatever their case); write {field}",
                                file.display()
                            ))));
                        }
                    }
                    to_visit.push(inner);
                }
            }
            Value::Array(items) => to_visit.extend(items),
            _ => {}
        }
    }
    Ok(())
}

/// What kustomize would fetch from the network (or another place by URL).
fn is_remote(entry: &str) -> bool {
    entry.contains("://") || entry.starts_with("git::") || entry.starts_with("git@")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (path, text) in files {
            let p = dir.path().join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        dir
    }

    fn check(dir: &tempfile::TempDir, start: &str, remote: bool) -> Result<(), String> {
        check_kustomization(dir.path(), &dir.path().join(start), remote)
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    /// kustomize reads field names whatever their case (Go's encoding/json folds them), so a
    /// field written in other letters is refused rather than left unchecked (found by an
    /// attack: `Files: [k=http://169.254.169.254/…]` put that answer in a ConfigMap).
    #[test]
    fn a_field_kustomize_reads_in_other_letters_is_refused() {
        for (text, key, field) in [
            (
                "Resources: [http://127.0.0.1:1/x]\n",
                "Resources",
                "resources",
            ),
            (
                "re\u{17f}ources: [http://127.0.0.1:1/x]\n",
                "re\u{17f}ources",
                "resources",
            ),
            (
                "configMapGenerator:\n- name: x\n  Files: [k=http://127.0.0.1:1/s]\n",
                "Files",
                "files",
            ),
            ("patches:\n- PATH: http://127.0.0.1:1/p\n", "PATH", "path"),
            (
                "openAPI: {path: http://127.0.0.1:1/o}\n",
                "openAPI",
                "openapi",
            ),
        ] {
            let dir = tree(&[("k/kustomization.yaml", text)]);
            let err = check(&dir, "k", false).unwrap_err();
            assert_eq!(
                err,
                format!(
                    "k/kustomization.yaml: key {key:?} is read by kustomize as {field:?} (it matches field names whatever their case); write {field}"
                )
            );
        }
    }

    /// A generator or transformer config in a file is read like an inline one: its files
    /// stay inside the source (found by an attack: kustomize fetched a URL such a file named).
    #[test]
    fn generator_and_transformer_config_files_are_read() {
        for (config, why) in [
            (
                "apiVersion: builtin\nkind: ConfigMapGenerator\nmetadata: {name: x}\nfiles: [k=http://127.0.0.1:1/s]\n",
                "is a remote reference",
            ),
            (
                "apiVersion: builtin\nkind: PatchStrategicMergeTransformer\nmetadata: {name: x}\npaths: [../../etc/passwd]\n",
                "outside",
            ),
            (
                "kind: ConfigMapGenerator\n---\napiVersion: builtin\nkind: ConfigMapGenerator\nmetadata: {name: y}\nEnvs: [/etc/passwd]\n",
                "is read by kustomize as \"envs\"",
            ),
        ] {
            let dir = tree(&[
                (
                    "k/kustomization.yaml",
                    "generators: [gen.yaml]\ntransformers: [gen.yaml]\n",
                ),
                ("k/gen.yaml", config),
            ]);
            let err = check(&dir, "k", false).unwrap_err();
            assert!(err.contains(why), "{config}: {err}");
        }
        let dir = tree(&[
            ("k/kustomization.yaml", "generators: [gen.yaml]\n"),
            (
                "k/gen.yaml",
                "apiVersion: builtin\nkind: ConfigMapGenerator\nmetadata: {name: x}\nfiles: [k=f.txt]\n",
            ),
            ("k/f.txt", "x"),
        ]);
        check(&dir, "k", false).unwrap();
    }

    /// What kustomize would read otherwise than the check, even from the staged JSON, is
    /// refused (each found by an attack that had kustomize GET a URL or build a base outside
    /// the source). Text its YAML reader reads otherwise (merge keys, tags, line separators,
    /// `---` lines) no longer matters: kustomize reads the JSON convoy wrote.
    #[test]
    fn what_kustomize_would_read_otherwise_is_refused() {
        let gen_cm = "apiVersion: builtin\nkind: ConfigMapGenerator\nmetadata: {name: x}\n";
        for (files, why) in [
            (
                vec![
                    ("k/kustomization.yaml", "generators: [sub]\n".to_string()),
                    ("k/sub/kustomization.yaml", "resources: [g.yaml]\n".to_string()),
                ],
                "generators entry \"sub\" is a directory",
            ),
            (
                vec![("k/kustomization.yaml", "generators: ['&a {kind: ConfigMapGenerator}']\n".to_string())],
                "is neither a plain path",
            ),
            (
                vec![("k/kustomization.yaml", "generators: [\"g\\n\"]\n".to_string())],
                "is not a mapping",
            ),
            (
                vec![
                    ("k/kustomization.yaml", "generators: [g.yaml]\n".to_string()),
                    (
                        "k/g.yaml",
                        "kind: ConfigMapList\nitems:\n- kind: List\n  items:\n  - kind: ConfigMapGenerator\n    files: [k=http://h/s]\n".to_string(),
                    ),
                ],
                "k/g.yaml: generators entry \"http://h/s\" is a remote reference",
            ),
            (
                vec![
                    ("k/kustomization.yaml", "transformers: [t.yaml]\n".to_string()),
                    ("k/t.yaml", "apiVersion: builtin\nkind: ValueAddTransformer\nmetadata: {name: v}\ntargetFilePath: http://h/t\n".to_string()),
                ],
                "transformers entry \"ValueAddTransformer\" is not a config kind convoy checks",
            ),
            (
                vec![
                    ("k/kustomization.yaml", "resources: []\n".to_string()),
                    ("k/kustomization.yml", "resources: [http://h/r]\n".to_string()),
                ],
                "k holds kustomization.yaml and kustomization.yml: kustomize reads one; keep one",
            ),
            (
                vec![("k/kustomization.yaml", "resources: [a.yaml, 0777]\n".to_string())],
                "resources entry 511 is not a string",
            ),
            // A quoted merge key (go-yaml merges `! "\x3c\x3c"`).
            (
                vec![("k/kustomization.yaml", "resources: [a.yaml]\n\"\\x3c\\x3c\": {resources: [../x]}\n".to_string())],
                "holds a \"<<\" key",
            ),        ] {
            let files: Vec<(&str, &str)> = files.iter().map(|(p, t)| (*p, t.as_str())).collect();
            let dir = tree(&files);
            let err = check(&dir, "k", false).unwrap_err();
            assert!(err.contains(why), "{files:?}: {err}");
        }
        // A config file of a kind convoy checks, with its files inside the source, passes.
        let dir = tree(&[
            ("k/kustomization.yaml", "generators: [g.yaml]\n"),
            (
                "k/g.yaml",
                &format!("kind: List\nitems:\n- {}\n", gen_cm.replace('\n', "\n  ")),
            ),
        ]);
        check(&dir, "k", false).unwrap();
    }

    /// kustomize cleans `link/..` as text before it follows a link; so does the check now
    /// (found by an attack: the check followed the link and read a decoy inside, kustomize
    /// loaded a base outside).
    #[test]
    fn a_dot_dot_after_a_link_is_read_as_kustomize_reads_it() {
        let dir = tree(&[
            ("src/a/b/c/.keep", ""),
            ("src/a/outside/kustomization.yaml", "resources: []\n"),
            (
                "src/kustomization.yaml",
                "resources: [link/../../outside]\n",
            ),
        ]);
        std::os::unix::fs::symlink("a/b/c", dir.path().join("src/link")).unwrap();
        let err = check_kustomization(&dir.path().join("src"), &dir.path().join("src"), false)
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "kustomization.yaml: resources entry \"link/../../outside\" leads outside the source"
        );
    }

    /// A base reached through a link is staged where the link leads (kustomize resolves its
    /// paths from there); a file read both as a config and as a ConfigMap's content is
    /// refused, one path holding one text (found by an attack).
    #[test]
    fn what_the_staged_tree_cannot_hold_is_refused() {
        let dir = tree(&[
            ("shared/base/kustomization.yaml", "resources: [../common]\n"),
            ("shared/common/kustomization.yaml", "resources: []\n"),
            ("k/kustomization.yaml", "resources: [base]\n"),
        ]);
        std::os::unix::fs::symlink("../shared/base", dir.path().join("k/base")).unwrap();
        let staged = check_kustomization(dir.path(), &dir.path().join("k"), false).unwrap();
        assert_eq!(
            staged.links.get(Path::new("k/base")),
            Some(&PathBuf::from("shared/base")),
            "the base is staged where the link leads, its ../common from there"
        );
        assert!(
            staged
                .documents
                .contains_key(Path::new("shared/common/kustomization.yaml"))
        );
        let dir = tree(&[
            (
                "k/kustomization.yaml",
                "generators: [g.yaml]\nconfigMapGenerator:\n- name: c\n  files: [g.yaml]\n",
            ),
            (
                "k/g.yaml",
                "kind: ConfigMapGenerator\nmetadata: {name: x}\n",
            ),
        ]);
        let err = check(&dir, "k", false).unwrap_err();
        assert!(
            err.contains(
                "k/g.yaml is read both as a kustomization or config and as a file's content"
            ),
            "{err}"
        );
    }

    /// However many links or paths lead to files, the staged tree holds at most its bounds
    /// (found by an attack: a config behind 100 links was staged 100 times).
    #[test]
    fn the_staged_tree_is_bounded() {
        let mut staged = Staged::default();
        for i in 0..MOST_STAGED_FILES {
            staged.add(Path::new(&format!("f{i}")), 1, false).unwrap();
            staged
                .copies
                .insert(PathBuf::from(format!("f{i}")), PathBuf::new());
        }
        assert!(
            staged
                .add(Path::new("one-more"), 1, false)
                .unwrap_err()
                .contains("files")
        );
        let mut staged = Staged::default();
        staged
            .add(Path::new("a"), MOST_STAGED_BYTES, false)
            .unwrap();
        assert!(
            staged
                .add(Path::new("b"), 1, false)
                .unwrap_err()
                .contains("MiB")
        );
    }

    /// Paths that lead to one staged file through a staged link are written once; a file and
    /// a document there are refused; the source is never written (found by an attack: the
    /// second write went through a hard link and truncated another Release's file).
    #[test]
    fn paths_that_alias_through_a_staged_link_never_write_the_source() {
        let dir = tree(&[
            ("victim/kustomization.yaml", "resources: [netpol.yaml]\n"),
            (
                "victim/netpol.yaml",
                "kind: NetworkPolicy\nmetadata: {name: deny}\n",
            ),
            (
                "app/kustomization.yaml",
                "resources: [v]\nconfigMapGenerator:\n- name: x\n  files: [v/netpol.yaml, v/kustomization.yaml]\n",
            ),
        ]);
        std::os::unix::fs::symlink("../victim", dir.path().join("app/v")).unwrap();
        let staged = check_kustomization(dir.path(), &dir.path().join("app"), false).unwrap();
        let into = tempfile::tempdir().unwrap();
        let err = staged
            .write(dir.path(), &into.path().join("s"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("two paths lead to one file of the kustomization's tree"),
            "{err}"
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("victim/netpol.yaml")).unwrap(),
            "kind: NetworkPolicy\nmetadata: {name: deny}\n"
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("victim/kustomization.yaml")).unwrap(),
            "resources: [netpol.yaml]\n"
        );
    }

    /// Inline configs count against the tree's bound as they are read: aliases of one large
    /// inline entry are refused past 128 MiB, not all held first (found by an attack).
    #[test]
    fn inline_configs_count_against_the_bound_as_they_are_read() {
        // One inline entry that expands to about 4 MiB (aliases of a 64 KiB label), listed
        // 100 times by alias: 400 MiB were held before the bound was checked.
        let labels: Vec<String> = (1..60).map(|i| format!("a{i}: *v")).collect();
        let inline = format!(
            "apiVersion: builtin\n  kind: LabelTransformer\n  metadata: {{name: l}}\n  labels: {{a0: &v {}, {}}}\n",
            "x".repeat(64 << 10),
            labels.join(", ")
        );
        // (A comment as long as the aliases' text keeps the outer read within its bound.)
        let mut text = format!(
            "# {}\ntransformers:\n- &s |\n  {inline}",
            "c".repeat(8 << 20)
        );
        for _ in 0..100 {
            text.push_str("- *s\n");
        }
        let dir = tree(&[("k/kustomization.yaml", &text)]);
        let err = check(&dir, "k", false).unwrap_err();
        assert!(
            err.contains(
                "transformers entry \"(inline)\" the kustomization reaches more than 128 MiB"
            ),
            "{}",
            &err[..err.len().min(300)]
        );
    }

    #[test]
    fn bases_and_files_inside_the_source_pass() {
        let dir = tree(&[
            ("base/kustomization.yaml", "resources: [cm.yaml]\n"),
            ("base/cm.yaml", "kind: ConfigMap\n"),
            (
                "overlay/kustomization.yaml",
                "resources: [../base]\npatches:\n- path: p.yaml\nconfigMapGenerator:\n- name: x\n  files: [k=f.txt]\n  envs: [e.env]\n",
            ),
            ("overlay/p.yaml", "{}\n"),
            ("overlay/f.txt", "x"),
            ("overlay/e.env", "A=1"),
        ]);
        check(&dir, "overlay", false).unwrap();
    }

    /// A chain of bases far deeper than any overlay needs is refused at a bound, naming where,
    /// instead of being followed as deep as it goes.
    #[test]
    fn bases_nested_past_the_bound_are_refused() {
        let files: Vec<(String, String)> = (0..3000)
            .map(|i| {
                (
                    format!("k{i}/kustomization.yaml"),
                    format!("resources: [../k{}]\n", i + 1),
                )
            })
            .chain([("k3000/kustomization.yaml".into(), "resources: []\n".into())])
            .collect();
        let files: Vec<(&str, &str)> = files
            .iter()
            .map(|(p, t)| (p.as_str(), t.as_str()))
            .collect();
        let dir = tree(&files);
        assert_eq!(
            check(&dir, "k0", false).unwrap_err(),
            "k100/kustomization.yaml: resources entry \"../k101\" nests kustomizations more than 100 deep"
        );
        check(&dir, "k2901", false).unwrap();
    }

    /// An inline generator convoy cannot read is refused: its paths could not be checked.
    #[test]
    fn an_inline_generator_that_cannot_be_read_is_refused() {
        let dir = tree(&[(
            "app/kustomization.yaml",
            "generators:\n- |\n  kind: ConfigMapGenerator\n  files: [k=../../../etc/passwd\n",
        )]);
        assert_eq!(
            check(&dir, "app", false).unwrap_err(),
            "app/kustomization.yaml: generators entry \"(inline)\" is YAML convoy cannot read (line 2 of the entry), so its paths cannot be checked"
        );
    }

    /// Paths an inline transformer or generator config names are checked like any other: a
    /// PatchTransformer's patch, a ReplacementTransformer's replacements, a List's items.
    #[test]
    fn paths_in_inline_transformer_configs_are_checked() {
        for (field, config) in [
            (
                "transformers",
                "kind: PatchTransformer\n  metadata: {name: p}\n  path: ../../../etc/passwd",
            ),
            (
                "transformers",
                "kind: ReplacementTransformer\n  metadata: {name: r}\n  replacements:\n  - path: ../../../etc/passwd",
            ),
            (
                "generators",
                "kind: List\n  items:\n  - kind: ConfigMapGenerator\n    metadata: {name: c}\n    files: [k=../../../etc/passwd]",
            ),
            (
                "transformers",
                "kind: List\n  items:\n  - kind: PatchTransformer\n    metadata: {name: p}\n    path: ../../../etc/passwd",
            ),
        ] {
            let dir = tree(&[(
                "app/kustomization.yaml",
                &format!("{field}:\n- |\n  apiVersion: builtin\n  {config}\n"),
            )]);
            assert_eq!(
                check(&dir, "app", false).unwrap_err(),
                format!(
                    "app/kustomization.yaml: {field} entry \"../../../etc/passwd\" leads outside the source"
                ),
                "{config}"
            );
        }
        let dir = tree(&[
            (
                "app/kustomization.yaml",
                "transformers:\n- |\n  apiVersion: builtin\n  kind: PatchTransformer\n  metadata: {name: p}\n  path: p.yaml\n",
            ),
            ("app/p.yaml", "{}\n"),
        ]);
        check(&dir, "app", false).unwrap();
    }

    #[test]
    fn a_path_out_of_the_source_is_refused_naming_the_file_and_field() {
        let dir = tree(&[(
            "app/kustomization.yaml",
            "resources: [../../../../outside]\n",
        )]);
        assert_eq!(
            check(&dir, "app", false).unwrap_err(),
            "app/kustomization.yaml: resources entry \"../../../../outside\" leads outside the source"
        );
        let dir = tree(&[(
            "app/kustomization.yaml",
            "configMapGenerator:\n- name: x\n  files: [key=../../../etc/passwd]\n",
        )]);
        assert!(
            check(&dir, "app", false)
                .unwrap_err()
                .contains("leads outside the source")
        );
    }

    /// A path through a link of 4 KiB of `x/..` names, 39 times over, costs tens of
    /// thousands of lookups: each entry of a kustomization could cost that. It is refused.
    #[test]
    fn a_path_that_costs_too_many_lookups_is_refused() {
        let entry = format!("{}cm.yaml", "b/".repeat(39));
        let dir = tree(&[
            ("app/kustomization.yaml", &format!("resources: [{entry}]\n")),
            ("app/cm.yaml", "kind: ConfigMap\n"),
        ]);
        std::os::unix::fs::symlink("x/../".repeat(819), dir.path().join("app/b")).unwrap();
        assert_eq!(
            check(&dir, "app", false).unwrap_err(),
            format!(
                "app/kustomization.yaml: resources entry {entry:?} takes more lookups to follow than any path should (links through links?)"
            )
        );
    }

    #[test]
    fn a_link_out_of_the_source_is_refused() {
        let outside = tempfile::tempdir().unwrap();
        let dir = tree(&[("app/kustomization.yaml", "resources: [link/x.yaml]\n")]);
        std::os::unix::fs::symlink(outside.path(), dir.path().join("app/link")).unwrap();
        assert!(
            check(&dir, "app", false)
                .unwrap_err()
                .contains("leads outside the source")
        );
    }

    #[test]
    fn remote_bases_are_refused_unless_allowed() {
        for remote in [
            "https://github.com/org/repo//base?ref=v1",
            "git::https://example.com/repo.git",
            "github.com/org/repo/base",
        ] {
            let dir = tree(&[(
                "app/kustomization.yaml",
                &format!("resources: [\"{remote}\"]\n"),
            )]);
            let err = check(&dir, "app", false).unwrap_err();
            assert!(
                err.contains("remote reference") || err.contains("does not exist in the source"),
                "{remote}: {err}"
            );
            check(&dir, "app", true).unwrap();
        }
    }

    /// A file: URL reads this machine (convoy's cache holds other scopes' repositories):
    /// refused even where remote bases are allowed.
    #[test]
    fn a_file_url_is_refused_even_where_remote_bases_are_allowed() {
        for url in [
            "file:///tmp/x",
            "FILE:/tmp/x",
            "git::file:///tmp/cache/git/ab//app",
        ] {
            let dir = tree(&[(
                "app/kustomization.yaml",
                &format!("resources: [\"{url}\"]\n"),
            )]);
            for allow_remote in [false, true] {
                assert_eq!(
                    check(&dir, "app", allow_remote).unwrap_err(),
                    format!(
                        "app/kustomization.yaml: resources entry {url:?} is a file: URL, which reads this machine's files; paths must stay inside the source"
                    )
                );
            }
        }
    }

    #[test]
    fn helm_charts_in_a_kustomization_are_unsupported() {
        let dir = tree(&[("kustomization.yaml", "helmCharts:\n- name: x\n")]);
        assert!(
            check(&dir, "", false)
                .unwrap_err()
                .contains("helmCharts is not supported")
        );
    }
}

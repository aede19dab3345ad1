//! Git sources through the `git` program: fetch into a bare mirror, export a commit with
//! `git archive` into the cache.
//!
//! Works over `file://`, `git://`, `http(s)://` and `ssh://`. Credentials never appear on a
//! command line: HTTP auth goes through `GIT_CONFIG_*` environment variables, SSH keys through
//! a temporary file named in `GIT_SSH_COMMAND`. Git is never allowed to prompt.
//!
//! Everything a Release or source names is data to git, never an option: the URL comes after
//! `--`, refs are checked against git's ref-name rules and commits are hex before they reach
//! a refspec or a revision. git runs with an empty environment of convoy's making: no system
//! or global configuration, an empty HOME, hooks pointed at an empty directory, and only the
//! transports convoy supports allowed (`protocol.allow=never` otherwise).

use crate::engine::error::Invalid;
use std::path::Path;
use std::process::Stdio;

use base64::Engine;
use tokio::process::Command;

use super::archive;
use super::cache::{Cache, UntilGivenUp};
use super::{Artifact, Credentials, GitReference, SourceError, SourcePolicy};
use crate::engine::env_proxy;
use crate::engine::tools::Tool;

/// Fetch `reference` of `url` and unpack it into the cache, in the part of the cache that
/// belongs to `scope` (the source object asking; see [`Cache`]).
pub async fn fetch(
    cache: &Cache,
    scope: &str,
    url: &str,
    reference: &GitReference,
    credentials: Option<&Credentials>,
    policy: &SourcePolicy,
) -> Result<Artifact, SourceError> {
    check_url(url, cache, policy)?;
    check_reference(reference).map_err(|e| SourceError::Unsupported(e.0))?;
    let git = Tool::Git.locate()?;
    // A full commit id that was unpacked before (for this scope) needs no network at all.
    if let GitReference::Commit(sha) = reference
        && is_full_sha(sha)
        && let Some(digest) = cache.lookup(scope, &revision_key(url, sha))
    {
        return Ok(Artifact {
            revision: format!("sha1:{sha}"),
            path: cache.artifact_dir(&digest),
            digest,
            url: url.to_string(),
        });
    }

    let mirror = cache.use_git_mirror(scope, url);
    let auth = GitAuth::new(
        url,
        credentials,
        cache,
        !policy.allowed_urls.is_restricted(),
    )?;
    let runner = Runner {
        git: &git,
        mirror: &mirror,
        url,
        auth: &auth,
        no_redirects: policy.allowed_urls.is_restricted(),
    };
    if !mirror.join("HEAD").is_file() {
        std::fs::create_dir_all(&mirror).map_err(|e| {
            SourceError::not_ready(url, format!("cannot create {}: {e}", mirror.display()))
        })?;
        runner.run(&["init", "--bare", "--quiet", "."]).await?;
    }

    let (sha, label) = match reference {
        GitReference::Head => {
            runner.fetch(&["HEAD"]).await?;
            (runner.rev_parse("FETCH_HEAD^{commit}").await?, None)
        }
        GitReference::Branch(branch) => {
            runner
                .fetch(&[&format!("+refs/heads/{branch}:refs/heads/{branch}")])
                .await?;
            (
                runner
                    .rev_parse(&format!("refs/heads/{branch}^{{commit}}"))
                    .await?,
                Some(branch.as_str()),
            )
        }
        GitReference::Tag(tag) => {
            runner
                .fetch(&[&format!("+refs/tags/{tag}:refs/tags/{tag}")])
                .await?;
            (
                runner
                    .rev_parse(&format!("refs/tags/{tag}^{{commit}}"))
                    .await?,
                Some(tag.as_str()),
            )
        }
        GitReference::Commit(sha) => {
            let wanted = format!("{sha}^{{commit}}");
            if runner.rev_parse(&wanted).await.is_err() {
                // Servers may refuse to serve an arbitrary commit; all branches and tags
                // are the portable way to get it.
                let direct = if is_full_sha(sha) {
                    runner.fetch(&[sha]).await.is_ok()
                } else {
                    false
                };
                if !direct {
                    runner
                        .fetch(&["+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*"])
                        .await?;
                }
            }
            let resolved = runner
                .rev_parse(&wanted)
                .await
                .map_err(|_| SourceError::not_ready(url, format!("commit {sha} not found")))?;
            (resolved, None)
        }
    };
    let revision = match label {
        Some(label) => format!("{label}@sha1:{sha}"),
        None => format!("sha1:{sha}"),
    };

    let key = revision_key(url, &sha);
    if let Some(digest) = cache.lookup(scope, &key) {
        return Ok(Artifact {
            revision,
            path: cache.artifact_dir(&digest),
            digest,
            url: url.to_string(),
        });
    }
    let archive = runner.archive(&sha);
    // Given up (the fetch timeout), the unpack stops at its next read and git is killed.
    let digest = cache
        .unpack_and_install(scope, Some(&key), move |dir, given_up| {
            archive.unpack_into(dir, given_up)
        })
        .await??;
    Ok(Artifact {
        revision,
        path: cache.artifact_dir(&digest),
        digest,
        url: url.to_string(),
    })
}

/// The lines of git's (and ssh's) error output that say what went wrong, at most three: the
/// `fatal:`/`error:` lines and the verdicts ("Host key verification failed.", "Permission
/// denied"), not ssh's `@@@` warning banner or its advice.
fn error_lines(stderr: &str) -> Vec<&str> {
    let lines: Vec<&str> = stderr
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('@'))
        .collect();
    let telling: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| {
            let lower = l.to_lowercase();
            ["fatal:", "error:", "failed", "denied", "host key"]
                .iter()
                .any(|word| lower.contains(word))
        })
        .collect();
    let chosen = if telling.is_empty() { lines } else { telling };
    chosen.into_iter().take(3).collect()
}

/// Whether convoy may fetch `url`: a scheme it supports (`file://` only where the policy
/// allows it, and never into convoy's own cache; any other under a prefix the policy allows),
/// and nothing git could read as an option or a transport helper.
pub fn check_url(url: &str, cache: &Cache, policy: &SourcePolicy) -> Result<(), SourceError> {
    let refuse = |why: String| Err(SourceError::Unsupported(format!("Git URL {url:?} {why}")));
    if url.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return refuse("contains a space or a control character".into());
    }
    let scheme = ["file://", "git://", "http://", "https://", "ssh://"]
        .into_iter()
        .find(|s| url.starts_with(s));
    let host = match scheme {
        Some(s) => url[s.len()..].split('/').next().unwrap_or_default(),
        // scp-like `user@host:path`
        None if url.contains('@') && url.contains(':') && !url.contains("://") => url
            .split_once('@')
            .map(|(_, rest)| rest.split(':').next().unwrap_or_default())
            .unwrap_or_default(),
        None => {
            return refuse(
                "has an unsupported scheme (use file://, git://, http(s)://, ssh:// or user@host:path)"
                    .into(),
            );
        }
    };
    let host = host.rsplit('@').next().unwrap_or_default();
    if host.starts_with('-') {
        return refuse("names a host that starts with '-'".into());
    }
    if scheme != Some("file://") {
        // (file:// URLs have a flag of their own, checked below.)
        policy
            .allowed_urls
            .check("Git URL", url)
            .map_err(SourceError::Unsupported)?;
    } else {
        if !policy.allow_file_urls {
            return refuse(
                "is a local path, which convoy daemon does not fetch unless started with --allow-file-urls"
                    .into(),
            );
        }
        let path = std::path::Path::new(&url["file://".len()..]);
        let real = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
        let cache_root = cache
            .root()
            .canonicalize()
            .unwrap_or_else(|_| cache.root().to_path_buf());
        if real.starts_with(&cache_root) {
            return refuse("points into convoy's source cache".into());
        }
    }
    Ok(())
}

/// Refuse a ref git would read as something else: an option, a refspec, a revision
/// expression. Branch and tag names follow `git check-ref-format`; a commit is 4–64 hex
/// digits.
pub fn check_reference(reference: &GitReference) -> Result<(), Invalid> {
    match reference {
        GitReference::Head => Ok(()),
        GitReference::Branch(name) => {
            check_ref_name(name).map_err(|why| Invalid(format!("ref.branch {name:?} {why}")))
        }
        GitReference::Tag(name) => {
            check_ref_name(name).map_err(|why| Invalid(format!("ref.tag {name:?} {why}")))
        }
        GitReference::Commit(sha) => {
            if (4..=64).contains(&sha.len()) && sha.chars().all(|c| c.is_ascii_hexdigit()) {
                Ok(())
            } else {
                Err(Invalid(format!(
                    "ref.commit {sha:?} is not a commit id (4 to 64 hexadecimal digits)"
                )))
            }
        }
    }
}

/// `git check-ref-format`'s rules for one branch or tag name, plus no leading `-`.
fn check_ref_name(name: &str) -> Result<(), &'static str> {
    if name.is_empty() {
        return Err("is empty");
    }
    if name.starts_with('-') {
        return Err("starts with '-'");
    }
    if name == "@" || name.contains("@{") {
        return Err("is or contains '@{', which git reads as a revision expression");
    }
    if name.contains("..") {
        return Err("contains '..'");
    }
    if name.starts_with('/') || name.ends_with('/') || name.contains("//") {
        return Err("has an empty path component");
    }
    if name.ends_with('.') {
        return Err("ends with '.'");
    }
    if name
        .chars()
        .any(|c| c.is_ascii_control() || c == ' ' || "~^:?*[\\".contains(c))
    {
        return Err("contains a space, a control character or one of ~ ^ : ? * [ \\");
    }
    for component in name.split('/') {
        if component.starts_with('.') || component.ends_with(".lock") {
            return Err("has a component that starts with '.' or ends with '.lock'");
        }
    }
    Ok(())
}

fn revision_key(url: &str, sha: &str) -> String {
    format!("git:{url}@{sha}")
}

fn is_full_sha(s: &str) -> bool {
    (s.len() == 40 || s.len() == 64) && s.chars().all(|c| c.is_ascii_hexdigit())
}

/// The whole environment git runs with: credentials without a command line or a prompt, and
/// nothing of the machine's or user's git configuration.
struct GitAuth {
    env: Vec<(String, String)>,
    /// An empty HOME and hooks directory, and the SSH key and known_hosts files, alive while
    /// git runs.
    _files: tempfile::TempDir,
}

/// `scheme://authority` of an http(s) URL, which decides its proxy.
fn http_origin(url: &str) -> Option<&str> {
    let scheme = ["http://", "https://"]
        .into_iter()
        .find(|s| url.starts_with(s))?;
    let authority = url[scheme.len()..]
        .split(['/', '?', '#'])
        .next()
        .unwrap_or_default();
    Some(&url[..scheme.len() + authority.len()])
}

/// The transports convoy fetches over; every other one (`ext::`, `fd::`, remote helpers) is
/// refused by git itself.
pub(crate) const ALLOWED_PROTOCOLS: [&str; 4] = ["git", "http", "https", "ssh"];

impl GitAuth {
    fn new(
        url: &str,
        credentials: Option<&Credentials>,
        cache: &Cache,
        follow_redirects: bool,
    ) -> Result<Self, SourceError> {
        let file_transport = url.starts_with("file://");
        let dir = cache.staging()?;
        let home = dir.path().join("home");
        let hooks = dir.path().join("hooks");
        for d in [&home, &hooks] {
            std::fs::create_dir(d).map_err(|e| {
                SourceError::not_ready("git", format!("cannot create {}: {e}", d.display()))
            })?;
        }
        let mut env = vec![
            ("GIT_TERMINAL_PROMPT".to_string(), "0".to_string()),
            ("GCM_INTERACTIVE".to_string(), "never".to_string()),
            ("GIT_ASKPASS".to_string(), "true".to_string()),
            ("SSH_ASKPASS".to_string(), "true".to_string()),
            ("GIT_CONFIG_NOSYSTEM".to_string(), "1".to_string()),
            ("GIT_CONFIG_GLOBAL".to_string(), "/dev/null".to_string()),
            ("HOME".to_string(), home.display().to_string()),
            ("XDG_CONFIG_HOME".to_string(), home.display().to_string()),
            ("GIT_PROTOCOL_FROM_USER".to_string(), "0".to_string()),
        ];
        if let Some(path) = std::env::var_os("PATH") {
            env.push(("PATH".into(), path.to_string_lossy().into_owned()));
        }
        let mut config: Vec<(String, String)> = vec![
            ("credential.helper".into(), String::new()),
            ("core.hooksPath".into(), hooks.display().to_string()),
            ("core.fsmonitor".into(), "false".into()),
            ("protocol.allow".into(), "never".into()),
        ];
        for protocol in ALLOWED_PROTOCOLS {
            config.push((format!("protocol.{protocol}.allow"), "always".into()));
        }
        if file_transport {
            config.push(("protocol.file.allow".into(), "always".into()));
        }
        // The operator's proxy for this URL, chosen by Go's rules as kubectl, helm and Flux
        // choose it, given as http.proxy (empty: direct), and no proxy variable: git's curl
        // reads them by rules of its own (lower case first, an empty one meaning none,
        // `http_proxy` in lower case only, loopback not exempt, `*.domain` and `host:port`
        // entries of NO_PROXY naming nothing).
        if let Some(origin) = http_origin(url) {
            // A URL git takes may hold a path no URI parser takes: only its origin matters
            // here, and one that does not parse is refused, never fetched past the proxy.
            let uri = origin.parse::<http::Uri>().map_err(|_| {
                SourceError::Unsupported(format!("Git URL {url:?} names a host convoy cannot read"))
            })?;
            let proxy = match env_proxy::for_source(&uri, |v| std::env::var(v).ok()) {
                Some((variable, value)) => env_proxy::for_git(&value).ok_or_else(|| {
                    SourceError::Unsupported(format!(
                        "{variable} does not parse as a proxy URL (scheme://[user:password@]host:port)"
                    ))
                })?,
                None => String::new(),
            };
            config.push(("http.proxy".into(), proxy));
        }
        if !follow_redirects {
            // Under an allow-list a redirect could lead anywhere (git follows the first
            // request's by default); the URL named is the one fetched.
            config.push(("http.followRedirects".into(), "false".into()));
        }
        if let Some(c) = credentials {
            if let Some(token) = &c.bearer_token {
                config.push((
                    "http.extraHeader".into(),
                    format!("Authorization: Bearer {token}"),
                ));
            } else if c.username.is_some() || c.password.is_some() {
                let pair = format!(
                    "{}:{}",
                    c.username.as_deref().unwrap_or("git"),
                    c.password.as_deref().unwrap_or_default()
                );
                let encoded = base64::engine::general_purpose::STANDARD.encode(pair);
                config.push((
                    "http.extraHeader".into(),
                    format!("Authorization: Basic {encoded}"),
                ));
            }
            if let Some(identity) = &c.identity {
                let key = dir.path().join("identity");
                write_private(&key, identity)?;
                let mut ssh = format!(
                    "ssh -F /dev/null -i '{}' -o IdentitiesOnly=yes -o BatchMode=yes",
                    key.display()
                );
                match &c.known_hosts {
                    Some(hosts) => {
                        let file = dir.path().join("known_hosts");
                        write_private(&file, hosts)?;
                        ssh.push_str(&format!(
                            " -o UserKnownHostsFile='{}' -o StrictHostKeyChecking=yes",
                            file.display()
                        ));
                    }
                    None => ssh.push_str(" -o StrictHostKeyChecking=accept-new"),
                }
                env.push(("GIT_SSH_COMMAND".into(), ssh));
            }
        }
        env.extend(config_env(config));
        Ok(Self { env, _files: dir })
    }
}

/// git configuration as environment variables (`GIT_CONFIG_COUNT`, `GIT_CONFIG_KEY_n`,
/// `GIT_CONFIG_VALUE_n`): every git a process starts reads them, and none shows on a command
/// line.
pub(crate) fn config_env(config: Vec<(String, String)>) -> Vec<(String, String)> {
    let mut env = vec![("GIT_CONFIG_COUNT".to_string(), config.len().to_string())];
    for (i, (k, v)) in config.into_iter().enumerate() {
        env.push((format!("GIT_CONFIG_KEY_{i}"), k));
        env.push((format!("GIT_CONFIG_VALUE_{i}"), v));
    }
    env
}

fn write_private(path: &Path, bytes: &[u8]) -> Result<(), SourceError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut data = bytes.to_vec();
    if !data.ends_with(b"\n") {
        data.push(b'\n');
    }
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut f| f.write_all(&data))
        .map_err(|e| SourceError::not_ready("ssh", format!("cannot write the SSH key file: {e}")))
}

struct Runner<'a> {
    git: &'a Path,
    mirror: &'a Path,
    url: &'a str,
    auth: &'a GitAuth,
    /// git follows no redirect (the daemon restricts source URLs).
    no_redirects: bool,
}

impl Runner<'_> {
    async fn fetch(&self, refspecs: &[&str]) -> Result<(), SourceError> {
        let mut args = vec![
            "fetch",
            "--quiet",
            "--force",
            "--no-tags",
            "--no-write-fetch-head",
            "--no-recurse-submodules",
        ];
        if refspecs == ["HEAD"] {
            // FETCH_HEAD is how git names what `HEAD` of a remote resolved to.
            args.retain(|a| *a != "--no-write-fetch-head");
        }
        // The URL after `--`: whatever it says, git takes it as a repository, never an option.
        args.push("--");
        args.push(self.url);
        args.extend_from_slice(refspecs);
        self.run(&args).await.map(|_| ()).map_err(|e| match e {
            // A server that moved the repository (GitLab without `.git`, a renamed one).
            SourceError::NotReady { url, message }
                if self.no_redirects && message.contains("returned error: 30") =>
            {
                SourceError::NotReady {
                    url,
                    message: format!(
                        "{message} (a redirect: convoy daemon follows none while it restricts source URLs with --allow-source-url; name the URL it leads to)"
                    ),
                }
            }
            e => e,
        })
    }

    async fn rev_parse(&self, rev: &str) -> Result<String, SourceError> {
        let out = self
            .output(&["rev-parse", "--verify", "--quiet", rev])
            .await?;
        Ok(String::from_utf8_lossy(&out).trim().to_string())
    }

    async fn run(&self, args: &[&str]) -> Result<Vec<u8>, SourceError> {
        self.output(args).await
    }

    async fn output(&self, args: &[&str]) -> Result<Vec<u8>, SourceError> {
        let out = Command::from(self.command(args))
            .kill_on_drop(true)
            .output()
            .await
            .map_err(|e| SourceError::not_ready(self.url, format!("cannot run git: {e}")))?;
        if out.status.success() {
            return Ok(out.stdout);
        }
        Err(failure(self.url, args, out.status, &out.stderr))
    }

    /// git with `args` on the mirror, in convoy's environment (see the module's comment).
    fn command(&self, args: &[&str]) -> std::process::Command {
        let mut cmd = std::process::Command::new(self.git);
        cmd.arg("-C")
            .arg(self.mirror)
            .args(args)
            .env_clear()
            .envs(self.auth.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null());
        cmd
    }

    /// `git archive` of commit `sha`, to unpack as it streams out.
    fn archive(&self, sha: &str) -> Archive {
        Archive {
            command: self.command(&["archive", "--format=tar", sha]),
            url: self.url.to_string(),
        }
    }
}

/// What a failed git run says, as a source error.
fn failure(
    url: &str,
    args: &[&str],
    status: std::process::ExitStatus,
    stderr: &[u8],
) -> SourceError {
    let stderr = String::from_utf8_lossy(stderr);
    let message = error_lines(&stderr);
    let message = if message.is_empty() {
        format!("git {} failed ({status})", args.first().unwrap_or(&""))
    } else {
        message.join("; ")
    };
    SourceError::not_ready(url, message)
}

/// A `git archive` to run on the blocking pool, its tar unpacked while git writes it. A few
/// kilobytes of objects can name one large blob thousands of times: held whole, such an
/// archive would take the daemon's memory before the unpack's size limit saw a byte of it.
struct Archive {
    command: std::process::Command,
    url: String,
}

impl Archive {
    fn unpack_into(
        mut self,
        dir: &Path,
        given_up: &std::sync::atomic::AtomicBool,
    ) -> Result<(), SourceError> {
        use std::io::Read;
        let mut child = self
            .command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| SourceError::not_ready(&self.url, format!("cannot run git: {e}")))?;
        // Read beside the unpack, so that git never waits on a full error pipe.
        let stderr = child.stderr.take().map(|pipe| {
            std::thread::spawn(move || {
                let mut text = Vec::new();
                let _ = pipe.take(64 * 1024).read_to_end(&mut text);
                text
            })
        });
        // The pipe stays open until git is stopped: closed early, git would fail on its next
        // write and its "write error" would hide why the unpack stopped.
        let mut stdout = child.stdout.take();
        let unpacked = match &mut stdout {
            Some(stdout) => {
                let mut unpack = archive::Unpack::until(dir, given_up);
                unpack
                    .tar(UntilGivenUp::new(stdout, given_up))
                    .and_then(|()| unpack.finish())
            }
            None => Ok(()),
        };
        if unpacked.is_err() {
            // Over the limit, or unsafe: git need not write the rest.
            let _ = child.kill();
        }
        drop(stdout);
        let status = child.wait();
        let stderr = stderr.and_then(|t| t.join().ok()).unwrap_or_default();
        // git that exited on its own with an error explains a truncated archive best.
        if let Ok(status) = &status
            && !status.success()
            && status.code().is_some()
        {
            return Err(failure(&self.url, &["archive"], *status, &stderr));
        }
        unpacked.map_err(|source| SourceError::Archive {
            url: self.url.clone(),
            source,
        })?;
        match status {
            Ok(status) if status.success() => Ok(()),
            Ok(status) => Err(failure(&self.url, &["archive"], status, &stderr)),
            Err(e) => Err(SourceError::not_ready(
                &self.url,
                format!("cannot run git: {e}"),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_origin_of_an_http_url_is_its_scheme_and_authority() {
        assert_eq!(
            http_origin("http://git.example.com:8080/a<b/repo.git"),
            Some("http://git.example.com:8080")
        );
        assert_eq!(http_origin("https://h?x"), Some("https://h"));
        assert_eq!(http_origin("ssh://git@h/r.git"), None);
        assert_eq!(http_origin("file:///tmp/r"), None);
    }

    /// An unpack whose fetch was given up stops at git's next write, and git is killed: the
    /// blocking thread is not held until git ends on its own.
    #[test]
    fn an_archive_given_up_stops_and_kills_git() {
        let mut command = std::process::Command::new("sh");
        // Endless output, as git archive of a tree larger than the unpack limit.
        command.args(["-c", "exec yes"]);
        let archive = Archive {
            command,
            url: "https://example.com/repo.git".into(),
        };
        let dir = tempfile::tempdir().unwrap();
        let given_up = std::sync::atomic::AtomicBool::new(true);
        let err =
            crate::engine::error::chain(&archive.unpack_into(dir.path(), &given_up).unwrap_err());
        assert!(
            err.contains("the fetch was given up (its timeout passed)"),
            "{err}"
        );
    }

    #[test]
    fn an_ssh_host_key_error_is_told_without_the_banner() {
        let stderr = "@@@@@@@@@@@@\n@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @\n@@@@@@@@@@@@\n\
IT IS POSSIBLE THAT SOMEONE IS DOING SOMETHING NASTY!\n\
Host key for [127.0.0.1]:2222 has changed and you have requested strict checking.\n\
Host key verification failed.\nfatal: Could not read from remote repository.\n\n\
Please make sure you have the correct access rights\n";
        assert_eq!(
            error_lines(stderr),
            [
                "Host key for [127.0.0.1]:2222 has changed and you have requested strict checking.",
                "Host key verification failed.",
                "fatal: Could not read from remote repository."
            ]
        );
        assert_eq!(
            error_lines("warning: x\nsomething odd\n"),
            ["warning: x", "something odd"]
        );
    }
}

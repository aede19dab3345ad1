//! Helm content through `helm template`, the renderer Helm users already trust.
//!
//! Spec: reconcile-flow.txt stageRender step 4 ("Render"); DESIGN.md section 3. The release
//! name and namespace are passed; the merged user values go in one values file (removed
//! afterwards: it may hold Secret values); the target cluster's version and API versions are
//! passed when known so `Capabilities` checks in charts see the real cluster.
//!
//! A Release names the release name, the namespace and the chart, and a tenant may write the
//! Release: each is checked for what it is (a Helm release name, a DNS label, a chart name)
//! and the positional arguments come after `--`, so none can become a helm flag. helm runs
//! with an environment of convoy's making: no kubeconfig (a chart's `lookup` sees no
//! cluster), no plugins, no repositories, a HOME of its own.

use crate::engine::error::Invalid;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use serde_json::Value;
use tokio::process::Command;

use super::error::RenderError;
use super::helm_schema::SchemaRefs;
use super::manifests::StreamingParse;
use super::object::Object;
use super::secret_values::SecretValues;
use crate::engine::tools::Tool;

/// What a render knows about the target cluster.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterInfo {
    /// `gitVersion`, such as `v1.36.3`.
    pub kube_version: Option<String>,
    /// `group/version` and `group/version/Kind` strings, as Helm's `--api-versions` takes.
    pub api_versions: Vec<String>,
    /// Scope of every kind the cluster serves: `(group, kind)` → namespaced.
    pub scopes: std::collections::BTreeMap<(String, String), bool>,
}

impl ClusterInfo {
    /// Ask a cluster for its version and API resources: two aggregated-discovery requests
    /// (Kubernetes 1.30+), else one request per group-version.
    pub async fn discover(client: &kube::Client) -> Result<Self, kube::Error> {
        let (version, apis, core) = futures::join!(
            client.apiserver_version(),
            client.list_api_groups_aggregated(),
            client.list_core_api_versions_aggregated()
        );
        let version = version?;
        // A server without aggregated discovery answers the same request with the plain
        // lists, which parse as an empty aggregated list: no core group means fall back.
        let (api_versions, scopes) = match (apis, core) {
            (Ok(apis), Ok(core)) if !core.items.is_empty() => {
                from_aggregated(core.items.iter().chain(apis.items.iter()))
            }
            _ => per_group_version(client).await?,
        };
        Ok(Self::assemble(version, api_versions, scopes))
    }

    /// The same through the older endpoints only (one request per group-version), for API
    /// servers without aggregated discovery.
    pub async fn discover_per_group_version(client: &kube::Client) -> Result<Self, kube::Error> {
        let version = client.apiserver_version().await?;
        let (api_versions, scopes) = per_group_version(client).await?;
        Ok(Self::assemble(version, api_versions, scopes))
    }

    fn assemble(
        version: k8s_openapi::apimachinery::pkg::version::Info,
        mut api_versions: Vec<String>,
        scopes: Scopes,
    ) -> Self {
        api_versions.sort();
        api_versions.dedup();
        Self {
            kube_version: Some(version.git_version),
            api_versions,
            scopes,
        }
    }
}

type Scopes = std::collections::BTreeMap<(String, String), bool>;

/// Helm's `--api-versions` strings and the scope of every kind, from aggregated discovery.
fn from_aggregated<'a>(
    groups: impl Iterator<Item = &'a kube::client::APIGroupDiscovery>,
) -> (Vec<String>, Scopes) {
    let mut api_versions = Vec::new();
    let mut scopes = Scopes::new();
    for group in groups {
        let name = group
            .metadata
            .as_ref()
            .and_then(|m| m.name.clone())
            .unwrap_or_default();
        for version in &group.versions {
            let Some(v) = version.version.as_deref() else {
                continue;
            };
            let gv = if name.is_empty() {
                v.to_string()
            } else {
                format!("{name}/{v}")
            };
            api_versions.push(gv.clone());
            for resource in &version.resources {
                let Some(kind) = resource.response_kind.as_ref().and_then(|k| k.kind.clone())
                else {
                    continue;
                };
                api_versions.push(format!("{gv}/{kind}"));
                scopes.insert(
                    (name.clone(), kind),
                    resource.scope.as_deref() == Some("Namespaced"),
                );
            }
        }
    }
    (api_versions, scopes)
}

/// The same from the older discovery endpoints: one request per group-version, all at once.
async fn per_group_version(client: &kube::Client) -> Result<(Vec<String>, Scopes), kube::Error> {
    let mut api_versions = Vec::new();
    let mut scopes = Scopes::new();
    let groups = client.list_api_groups().await?;
    let core = client.list_core_api_versions().await?;
    let mut group_versions: Vec<String> = core.versions.clone();
    for group in groups.groups {
        for v in group.versions {
            group_versions.push(v.group_version);
        }
    }
    let lists = futures::future::join_all(group_versions.iter().map(|gv| async move {
        let resources = if gv == "v1" {
            client.list_core_api_resources("v1").await
        } else {
            client.list_api_group_resources(gv).await
        };
        (
            gv.clone(),
            resources.map(|l| l.resources).unwrap_or_default(),
        )
    }))
    .await;
    for (gv, resources) in lists {
        api_versions.push(gv.clone());
        let group = gv
            .split_once('/')
            .map(|(g, _)| g.to_string())
            .unwrap_or_default();
        for r in resources {
            if !r.name.contains('/') {
                api_versions.push(format!("{gv}/{}", r.kind));
                scopes.insert((group.clone(), r.kind.clone()), r.namespaced);
            }
        }
    }
    Ok((api_versions, scopes))
}

/// Find the chart directory in an artifact: `path` itself when it holds a Chart.yaml, else
/// its single subdirectory that does (chart archives unpack to `<name>/`).
pub fn chart_dir(root: &Path, chart: Option<&str>) -> Result<PathBuf, RenderError> {
    if root.join("Chart.yaml").is_file() {
        return Ok(root.to_path_buf());
    }
    if let Some(name) = chart
        && check_chart_name(name).is_ok()
        && root.join(name).join("Chart.yaml").is_file()
    {
        return Ok(root.join(name));
    }
    let mut charts = Vec::new();
    if let Ok(entries) = std::fs::read_dir(root) {
        for entry in entries.flatten() {
            if entry.path().join("Chart.yaml").is_file() {
                charts.push(entry.path());
            }
        }
    }
    match charts.len() {
        1 => Ok(charts.remove(0)),
        _ => Err(RenderError::Invalid(Invalid(format!(
            "no Helm chart (Chart.yaml) at {}",
            root.display()
        )))),
    }
}

/// A Helm release name: what `helm install` accepts (a lowercase DNS-1123 subdomain of at
/// most 53 characters).
pub fn check_release_name(name: &str) -> Result<(), Invalid> {
    let valid = !name.is_empty() && name.len() <= 53 && name.split('.').all(is_dns_label_text);
    if valid {
        Ok(())
    } else {
        Err(Invalid(format!(
            "{name:?} is not a valid Helm release name (lowercase letters, digits, '-' and '.', starting and ending with a letter or digit, at most 53 characters)"
        )))
    }
}

/// A namespace: a DNS-1123 label of at most 63 characters.
pub fn check_namespace(name: &str) -> Result<(), Invalid> {
    if name.len() <= 63 && is_dns_label_text(name) {
        Ok(())
    } else {
        Err(Invalid(format!(
            "{name:?} is not a valid namespace (lowercase letters, digits and '-', starting and ending with a letter or digit, at most 63 characters)"
        )))
    }
}

/// A chart name as it appears in a repository index and as a directory of an archive: no
/// path separators, not `.` or `..`, no leading `-`.
pub fn check_chart_name(name: &str) -> Result<(), Invalid> {
    let valid = !name.is_empty()
        && name != "."
        && name != ".."
        && !name.starts_with('-')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if valid {
        Ok(())
    } else {
        Err(Invalid(format!(
            "{name:?} is not a valid chart name (letters, digits, '-', '_' and '.', not starting with '-')"
        )))
    }
}

/// Lower-case letters, digits and '-', starting and ending with a letter or digit (RFC 1123's
/// label without its length).
pub(crate) fn is_dns_label_text(s: &str) -> bool {
    let bytes = s.as_bytes();
    !bytes.is_empty()
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes[0].is_ascii_alphanumeric()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
}

/// One `helm template` run: what [`command`] needs.
pub struct Template<'a> {
    pub helm: &'a Path,
    pub chart: &'a Path,
    pub release_name: &'a str,
    pub namespace: &'a str,
    pub values_file: &'a Path,
    pub cluster: Option<&'a ClusterInfo>,
    /// Whether helm may reach the network (values schemas the operator allows); otherwise it
    /// runs behind [`super::no_network`]'s proxy.
    pub network: bool,
    /// An empty directory of helm's own (home, caches, configuration).
    pub scratch: &'a Path,
}

/// `helm template` as convoy runs it.
pub fn command(t: &Template) -> std::process::Command {
    let mut cmd = std::process::Command::new(t.helm);
    cmd.arg("template")
        .arg(format!("--namespace={}", t.namespace))
        .arg("--values")
        .arg(t.values_file)
        .arg("--include-crds")
        .arg("--skip-tests");
    if let Some(info) = t.cluster {
        if let Some(version) = &info.kube_version {
            cmd.arg(format!("--kube-version={version}"));
        }
        if !info.api_versions.is_empty() {
            cmd.arg(format!("--api-versions={}", info.api_versions.join(",")));
        }
    }
    // Positional arguments after `--`: nothing a Release says can be read as a flag.
    cmd.arg("--").arg(t.release_name).arg(t.chart);
    // Nothing of the machine's or user's helm and Kubernetes configuration: no kubeconfig
    // (so a chart's `lookup` and any cluster flag have nothing to reach), no repositories or
    // plugins, a HOME of helm's own.
    cmd.env_clear();
    if let Some(path) = std::env::var_os("PATH") {
        cmd.env("PATH", path);
    }
    // Where the operator allows schemas from the network, helm reaches them as convoy would:
    // through its proxy, trusting its certificate authorities. Otherwise nowhere to go: the
    // schema check refuses every reference out, and this holds should helm read one the
    // check does not see.
    super::no_network::give_network(&mut cmd, t.network, false);
    for (var, sub) in [
        ("HOME", "home"),
        ("TMPDIR", "tmp"),
        ("HELM_CONFIG_HOME", "config"),
        ("HELM_CACHE_HOME", "cache"),
        ("HELM_DATA_HOME", "data"),
        ("HELM_PLUGINS", "plugins"),
        ("KUBECONFIG", "no-kubeconfig"),
    ] {
        cmd.env(var, t.scratch.join(sub));
    }
    let _ = std::fs::create_dir(t.scratch.join("tmp"));
    cmd
}

/// Run `helm template` and parse what it prints. `secret`: the values from Secret layers,
/// replaced in helm's error.
pub async fn template(
    chart: &Path,
    release_name: &str,
    namespace: &str,
    values: &Value,
    secret: &SecretValues,
    cluster: Option<&ClusterInfo>,
    schema_refs: &SchemaRefs,
) -> Result<Vec<Object>, RenderError> {
    check_release_name(release_name).map_err(|why| {
        RenderError::Invalid(Invalid(format!("spec.content.helm.releaseName {why}")))
    })?;
    check_namespace(namespace)
        .map_err(|why| RenderError::Invalid(Invalid(format!("the target namespace {why}"))))?;
    let helm = Tool::Helm.locate()?;
    let chart_owned = chart.to_path_buf();
    let allowed = schema_refs.clone();
    tokio::task::spawn_blocking(move || super::helm_schema::check(&chart_owned, &allowed))
        .await
        .map_err(|e| {
            RenderError::Tool(format!("checking the chart's values schemas failed: {e}"))
        })??;
    let scratch = tempfile::tempdir()
        .map_err(|e| RenderError::Tool(format!("cannot create a temporary directory: {e}")))?;
    let values_file = scratch.path().join("values.json");
    write_private(
        &values_file,
        &serde_json::to_vec(values).unwrap_or_default(),
    )
    .map_err(|e| RenderError::Tool(format!("cannot write the values file: {e}")))?;
    let mut cmd = Command::from(command(&Template {
        helm: &helm,
        chart,
        release_name,
        namespace,
        values_file: &values_file,
        cluster,
        network: !schema_refs.is_empty(),
        scratch: scratch.path(),
    }));
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| RenderError::Tool(format!("cannot run {}: {e}", helm.display())))?;
    tracing::debug!("helm template started");
    let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
    if let Some(stdout) = &stdout {
        widen_pipe(stdout);
    }
    let read_failed = |e: std::io::Error| {
        RenderError::Tool(format!("cannot read the output of {}: {e}", helm.display()))
    };
    // Parse the output as it arrives, while reading the errors, then wait for the exit.
    let mut parse = StreamingParse::new("helm template output");
    let read = super::tool_output::read(stdout, stderr, |chunk| parse.feed(chunk))
        .await
        .map_err(read_failed)?;
    if read.too_large {
        // Dropped, the parse would leave its workers parsing the queued batches unjoined:
        // they are finished and joined on the blocking pool, as below.
        let _ = tokio::task::spawn_blocking(move || parse.finish()).await;
        return Err(RenderError::Helm(super::tool_output::too_large("helm")));
    }
    let errors = read.errors;
    let status = child.wait().await.map_err(read_failed)?;
    if !status.success() {
        // helm quotes values in its errors (a schema's, a chart's `fail`): redacted in what
        // helm printed, before lines are trimmed and joined, and again after.
        let errors = secret.redact(&String::from_utf8_lossy(&errors));
        return Err(RenderError::Helm(
            secret.redact(&tool_message(errors.as_bytes(), &[&values_file, chart])),
        ));
    }
    tracing::debug!("helm template finished");
    // Joining the parse workers blocks: off the async threads.
    tokio::task::spawn_blocking(move || parse.finish())
        .await
        .map_err(|e| RenderError::Tool(format!("parsing the helm output failed: {e}")))?
        .map_err(RenderError::Manifests)
}

/// helm prints its whole output in one write once it has rendered, then exits. In a pipe of
/// the default 64 KiB it waits for the reader to take each 64 KiB, competing for the cores
/// with the parse of what it already wrote; a pipe as large as the system allows (1 MiB by
/// default) takes a large chart's output at once and lets helm exit while it is parsed. Each
/// such pipe counts against the user's pipe quota (`pipe-user-pages-soft`, 64 MiB by default)
/// while helm runs; past it widening fails and new pipes are smaller, which costs only speed.
#[cfg(target_os = "linux")]
fn widen_pipe(pipe: &impl std::os::fd::AsFd) {
    let max = std::fs::read_to_string("/proc/sys/fs/pipe-max-size")
        .ok()
        .and_then(|s| s.trim().parse::<usize>().ok())
        .unwrap_or(1 << 20);
    if let Err(e) = rustix::pipe::fcntl_setpipe_size(pipe, max.min(16 << 20)) {
        tracing::debug!("cannot enlarge the pipe from helm: {e}");
    }
}

#[cfg(not(target_os = "linux"))]
fn widen_pipe<T>(_pipe: &T) {}

fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?
        .write_all(bytes)
}

/// A tool's error output as one message: its `Error:` lines, with temporary and cache paths
/// shortened so messages are stable and short.
pub fn tool_message(stderr: &[u8], paths: &[&Path]) -> String {
    let mut text = String::from_utf8_lossy(stderr).into_owned();
    for path in paths {
        text = text.replace(
            &path.display().to_string(),
            &path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
        );
    }
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    // An error and the lines that follow it until the next one: helm's values schema error is
    // a heading ("values don't meet the specifications ...:") whose reasons follow it on their
    // own lines, and the heading alone named nothing a user could fix.
    let mut chosen: Vec<&str> = Vec::new();
    let mut in_error = false;
    for line in &lines {
        if line.starts_with("Error") {
            in_error = true;
        }
        if in_error {
            chosen.push(line);
        }
    }
    if chosen.is_empty() {
        chosen = lines;
    }
    let shown = chosen.len().min(MOST_MESSAGE_LINES);
    let mut message = String::new();
    for line in &chosen[..shown] {
        // A line that ends in a colon heads what follows it.
        match message.ends_with(':') {
            true => message.push(' '),
            false if !message.is_empty() => message.push_str("; "),
            false => {}
        }
        message.push_str(
            line.trim_start_matches("Error: ")
                .trim_start_matches("error: "),
        );
    }
    if chosen.len() > shown {
        message.push_str(&format!("; … {} more lines", chosen.len() - shown));
    }
    message
}

/// The lines of a tool's errors a message keeps: a schema's ten first reasons, a
/// multi-document failure's first documents.
const MOST_MESSAGE_LINES: usize = 12;

#[cfg(test)]
mod tests {
    use super::*;

    /// helm's values schema error names each value that fails after a heading line.
    #[test]
    fn an_errors_reasons_on_the_lines_after_it_are_kept() {
        let stderr = b"walk.go:74: found symbolic link in path\n\
Error: values don't meet the specifications of the schema(s) in the following chart(s):\n\
web:\n- at '/port': got string, want integer\n- at '/name': got number, want string\n";
        assert_eq!(
            tool_message(stderr, &[]),
            "values don't meet the specifications of the schema(s) in the following chart(s): web: - at '/port': got string, want integer; - at '/name': got number, want string"
        );
    }

    #[test]
    fn a_long_error_keeps_its_first_lines_and_counts_the_rest() {
        let mut stderr = String::from("Error: many:\n");
        for i in 0..20 {
            stderr.push_str(&format!("- at '/v{i}': got string, want integer\n"));
        }
        let message = tool_message(stderr.as_bytes(), &[]);
        assert!(
            message.starts_with("many: - at '/v0': got string, want integer; - at '/v1'"),
            "{message}"
        );
        assert!(
            message.ends_with("- at '/v10': got string, want integer; … 9 more lines"),
            "{message}"
        );
    }

    #[test]
    fn output_without_an_error_line_is_shown_from_its_start() {
        assert_eq!(
            tool_message(b"accumulating resources: no such file\nsecond\n", &[]),
            "accumulating resources: no such file; second"
        );
    }
}

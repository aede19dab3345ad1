//! `convoy render`: the examples, output formats, and each error a user can hit.

use std::path::Path;
use std::process::Command;

use crate::support::{TestEnv, convoy_bin, path_with_testenv, repo_root, servers::GitRepo};

/// Run convoy in the repository root with the testenv tools on PATH; (code, stdout, stderr).
fn convoy_in_repo(args: &[&str], path: Option<&str>) -> (i32, String, String) {
    convoy_in_repo_with(args, path, &[])
}

/// [`convoy_in_repo`] with more environment variables.
fn convoy_in_repo_with(
    args: &[&str],
    path: Option<&str>,
    env: &[(&str, &Path)],
) -> (i32, String, String) {
    let cache = tempfile::tempdir().unwrap();
    let out = Command::new(convoy_bin())
        .envs(env.iter().copied())
        .current_dir(repo_root())
        .args(args)
        .env(
            "PATH",
            path.map(str::to_string).unwrap_or_else(path_with_testenv),
        )
        .env("CONVOY_CACHE_DIR", cache.path())
        .env_remove("CONVOY_HELM")
        .env_remove("CONVOY_KUSTOMIZE")
        .env_remove("KUBECONFIG")
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn render_example(name: &str) -> (String, String) {
    let release = format!("examples/{name}/release.yaml");
    let source = format!("examples/{name}");
    let (code, stdout, stderr) =
        convoy_in_repo(&["render", "-f", &release, "--source-dir", &source], None);
    assert_eq!(code, 0, "{stderr}");
    (stdout, stderr)
}

#[test]
fn the_waves_example_renders_in_apply_order() {
    let (stdout, stderr) = render_example("waves");
    insta::assert_snapshot!("render_waves", stdout);
    insta::assert_snapshot!(stderr, @"renderRef: e906ab87d860c3b621dfb348971e2a56e077ad7ea80575fff41c2e3fbfca8dd0");
}

#[test]
fn the_kustomize_example_renders_through_kustomize() {
    let (stdout, _) = render_example("kustomize");
    insta::assert_snapshot!("render_kustomize", stdout);
}

#[test]
fn the_helm_example_merges_its_value_layers() {
    let (stdout, _) = render_example("helm");
    insta::assert_snapshot!("render_helm", stdout);
    assert!(stdout.contains("replicas: 3"), "inline values win");
    assert!(
        stdout.contains("hello from the ConfigMap layer"),
        "the ConfigMap layer beats chart defaults"
    );
    assert!(
        stdout.contains("memory: 128Mi") && stdout.contains("cpu: 100m"),
        "maps merge"
    );
}

#[test]
fn ref_only_prints_the_same_ref_alone() {
    let (code, stdout, stderr) = convoy_in_repo(
        &[
            "render",
            "-f",
            "examples/waves/release.yaml",
            "--source-dir",
            "examples/waves",
            "--ref-only",
        ],
        None,
    );
    assert_eq!(code, 0);
    assert_eq!(stderr, "");
    assert_eq!(
        stdout,
        "e906ab87d860c3b621dfb348971e2a56e077ad7ea80575fff41c2e3fbfca8dd0\n"
    );
}

#[test]
fn json_output_is_a_list_in_apply_order() {
    let (code, stdout, _) = convoy_in_repo(
        &[
            "render",
            "-f",
            "examples/waves/release.yaml",
            "--source-dir",
            "examples/waves",
            "-o",
            "json",
        ],
        None,
    );
    assert_eq!(code, 0);
    let list: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let kinds: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["ConfigMap", "Service", "Deployment"]);
}

/// Write a Release (and a GitRepository at `url`) into `dir`; return the file.
fn release_file(dir: &Path, url: &str, spec_extra: &str) -> String {
    let path = dir.join("release.yaml");
    std::fs::write(
        &path,
        format!(
            "apiVersion: source.convoy.kumodo.io/v1alpha1\nkind: GitRepository\nmetadata: {{name: repo}}\nspec: {{url: \"{url}\"}}\n---\n\
apiVersion: core.convoy.kumodo.io/v1alpha1\nkind: Release\nmetadata: {{name: web, namespace: apps}}\nspec:\n  source:\n    kind: GitRepository\n    name: repo\n{spec_extra}"
        ),
    )
    .unwrap();
    path.display().to_string()
}

/// A source directory holding `files` (path, text) and a Release of `content` (the spec's
/// lines after `source`) reading `path` of it; returns the directory and the Release's file.
fn source_tree(files: &[(&str, String)], path: &str, content: &str) -> (tempfile::TempDir, String) {
    let source = tempfile::tempdir().unwrap();
    for (name, text) in files {
        let full = source.path().join(name);
        std::fs::create_dir_all(full.parent().unwrap()).unwrap();
        std::fs::write(full, text).unwrap();
    }
    let file = release_file(
        source.path(),
        "file:///nowhere",
        &format!("    path: {path}\n  content: {content}\n"),
    );
    (source, file)
}

/// `convoy render -f file --source-dir dir`: its exit code, stdout and stderr.
fn render_in(dir: &Path, file: &str) -> (i32, String, String) {
    convoy_in_repo(
        &["render", "-f", file, "--source-dir", dir.to_str().unwrap()],
        None,
    )
}

#[test]
fn a_missing_helm_binary_says_what_to_install() {
    let (code, stdout, stderr) = convoy_in_repo(
        &[
            "render",
            "-f",
            "examples/helm/release.yaml",
            "--source-dir",
            "examples/helm",
        ],
        Some("/usr/bin:/bin"),
    );
    assert_eq!(code, 4);
    assert_eq!(stdout, "");
    insta::assert_snapshot!(stderr, @"error: render Release default/greeter (step Rendering, reason DeployFailed): `helm` was not found (looked at $CONVOY_HELM and on PATH): install helm v3.14+ or v4 (https://helm.sh/docs/intro/install/, or `scripts/testenv build`) or set $CONVOY_HELM");
}

#[test]
fn jsonnet_content_is_unsupported() {
    let dir = tempfile::tempdir().unwrap();
    let file = release_file(
        dir.path(),
        "file:///nowhere",
        "  content: {type: jsonnet}\n",
    );
    let (code, _, stderr) = render_in(dir.path(), &file);
    assert_eq!(code, 4);
    insta::assert_snapshot!(stderr, @"error: render Release apps/web (step Rendering, reason Unsupported): content type jsonnet is not supported: render it to manifests, or use kustomize or helm");
}

#[test]
fn a_semver_git_ref_is_unsupported() {
    let dir = tempfile::tempdir().unwrap();
    let file = release_file(
        dir.path(),
        "file:///nowhere",
        "    ref: {semver: \">=1.0.0\"}\n",
    );
    let (code, _, stderr) = convoy_in_repo(&["render", "-f", &file], None);
    assert_eq!(code, 4);
    insta::assert_snapshot!(stderr, @r#"error: render Release apps/web (step SourceResolution, reason Unsupported): resolve the source: GitRepository apps/repo: ref.semver ">=1.0.0" is not supported: name a branch, tag or commit"#);
}

#[test]
fn helm_dependency_resolution_is_unsupported() {
    let dir = tempfile::tempdir().unwrap();
    let file = release_file(
        dir.path(),
        "file:///nowhere",
        "  content: {type: helm, helm: {dependencyMode: resolve}}\n",
    );
    let (code, _, stderr) = convoy_in_repo(
        &["render", "-f", &file, "--source-dir", "examples/helm"],
        None,
    );
    assert_eq!(code, 4);
    assert!(
        stderr.contains(
            "(step Rendering, reason Unsupported): helm.dependencyMode: resolve is not supported"
        ),
        "{stderr}"
    );
}

#[test]
fn a_yaml_error_names_the_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("app")).unwrap();
    std::fs::write(
        dir.path().join("app/ok.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ok}\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("app/broken.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: broken\ndata:\n  key: [unclosed\n",
    )
    .unwrap();
    let file = release_file(dir.path(), "file:///nowhere", "    path: app\n");
    let (code, _, stderr) = render_in(dir.path(), &file);
    assert_eq!(code, 4);
    let first = stderr.lines().next().unwrap();
    assert!(
        first.starts_with("error: render Release apps/web (step Rendering, reason DeployFailed): read manifests: broken.yaml: line 6"),
        "{stderr}"
    );
}

#[test]
fn a_missing_values_layer_is_values_not_ready() {
    let dir = tempfile::tempdir().unwrap();
    let file = release_file(
        dir.path(),
        "file:///nowhere",
        "    path: chart\n  content:\n    type: helm\n    helm: {valuesFrom: [{kind: ConfigMap, name: absent}]}\n",
    );
    let (code, _, stderr) = convoy_in_repo(
        &["render", "-f", &file, "--source-dir", "examples/helm"],
        None,
    );
    assert_eq!(code, 4);
    insta::assert_snapshot!(stderr, @"error: render Release apps/web (step Rendering, reason ValuesNotReady): read Helm values: values layer 1 (ConfigMap apps/absent key values.yaml): not found");
}

#[test]
fn an_unreachable_source_exits_3() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}/no-such-repo.git", dir.path().display());
    let file = release_file(dir.path(), &url, "");
    let (code, _, stderr) = convoy_in_repo(&["render", "-f", &file], None);
    assert_eq!(code, 3, "{stderr}");
    assert!(
        stderr.starts_with(&format!(
            "error: render Release apps/web (step SourceResolution, reason SourceNotReady): fetch GitRepository apps/repo: cannot fetch {url}"
        )),
        "{stderr}"
    );
}

#[test]
fn files_without_a_release_are_invalid_input() {
    let (code, _, stderr) =
        convoy_in_repo(&["render", "-f", "examples/waves/app/config.yaml"], None);
    assert_eq!(code, 4);
    assert_eq!(
        stderr,
        "error: the files given with -f hold no Release (they hold kinds ConfigMap)\n"
    );
}

/// A misspelled kind is named, with the kind meant: it said only "hold no Release".
#[test]
fn a_misspelled_kind_is_named_with_the_kind_meant() {
    let dir = tempfile::tempdir().unwrap();
    let file = release_file(dir.path(), "file:///nowhere", "");
    let text = std::fs::read_to_string(&file)
        .unwrap()
        .replace("kind: Release", "kind: Relase");
    std::fs::write(&file, text).unwrap();
    let (code, stdout, stderr) = render_in(dir.path(), &file);
    assert_eq!((code, stdout.as_str()), (4, ""));
    insta::assert_snapshot!(stderr, @r#"error: the files given with -f hold no Release (they hold kinds GitRepository, Relase); did you mean kind "Release" for "Relase"?"#);
}

/// A field the Release's schema does not know is refused, naming it and the file, as the
/// API server's strict field validation does (`kubectl apply`): `spec.sourc` was dropped
/// without a word.
#[test]
fn an_unknown_field_of_a_release_file_is_refused_naming_it_and_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = release_file(dir.path(), "file:///nowhere", "    path: app\n");
    let text = std::fs::read_to_string(&file)
        .unwrap()
        .replace("    path: app", "    path: app\n  targetNamespce: apps");
    std::fs::write(&file, text).unwrap();
    let (code, stdout, stderr) = render_in(dir.path(), &file);
    assert_eq!((code, stdout.as_str()), (4, ""));
    assert_eq!(
        stderr,
        format!(
            "error: {file}: Release \"web\": unknown field \"spec.targetNamespce\" (did you mean \"targetNamespace\"?)\n"
        )
    );
}

#[tokio::test]
async fn a_release_on_the_cluster_reads_its_value_layers_from_the_cluster() {
    let env = TestEnv::new("render-cluster").await;
    let repo = GitRepo::new();
    let chart = std::fs::read_dir(repo_root().join("examples/helm/chart/templates")).unwrap();
    let mut files: Vec<(String, String)> = vec![
        (
            "chart/Chart.yaml".into(),
            std::fs::read_to_string(repo_root().join("examples/helm/chart/Chart.yaml")).unwrap(),
        ),
        (
            "chart/values.yaml".into(),
            std::fs::read_to_string(repo_root().join("examples/helm/chart/values.yaml")).unwrap(),
        ),
    ];
    for entry in chart {
        let entry = entry.unwrap();
        files.push((
            format!("chart/templates/{}", entry.file_name().to_string_lossy()),
            std::fs::read_to_string(entry.path()).unwrap(),
        ));
    }
    let refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    repo.commit(&refs, "chart");

    let manifest = [
        "apiVersion: source.convoy.kumodo.io/v1alpha1",
        "kind: GitRepository",
        "metadata: {name: charts}",
        &format!(
            "spec: {{url: \"{}\", ref: {{branch: main}}}}",
            repo.file_url()
        ),
        "---",
        "apiVersion: v1",
        "kind: ConfigMap",
        "metadata: {name: layer-one}",
        "data:",
        "  values.yaml: |",
        "    greeting: from the cluster ConfigMap",
        "    replicas: 2",
        "---",
        "apiVersion: v1",
        "kind: Secret",
        "metadata: {name: layer-two}",
        "stringData:",
        "  values.yaml: |",
        "    replicas: 4",
        "    apiKey: cluster-secret-value",
        "---",
        "apiVersion: core.convoy.kumodo.io/v1alpha1",
        "kind: Release",
        "metadata: {name: greeter}",
        "spec:",
        "  source: {kind: GitRepository, name: charts, path: chart}",
        "  content:",
        "    type: helm",
        "    helm:",
        "      valuesFrom:",
        "      - {kind: ConfigMap, name: layer-one}",
        "      - {kind: Secret, name: layer-two}",
    ]
    .join("\n");
    env.kubectl_apply_text(&manifest, &["-n", &env.namespace]);

    let out = env.convoy(&["render", "greeter"]);
    let stdout = String::from_utf8_lossy(&out.stdout).replace(&env.namespace, "NAMESPACE");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("KUBE_VERSION: v1.36.3"),
        "the target cluster's version reaches helm:\n{stdout}"
    );
    insta::assert_snapshot!("render_from_cluster", stdout);
}

/// A release name that starts with `--` would be a helm flag (`--set-file` renders any file
/// the daemon can read into the Release's objects): it is refused naming the rule, and helm
/// never runs with it.
#[test]
fn a_helm_release_name_that_is_a_flag_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("daemon-key");
    std::fs::write(&secret, "PRIVATE KEY").unwrap();
    for name in [
        format!("--set-file=stolen={}", secret.display()),
        "--dry-run=server".to_string(),
        "Web".to_string(),
    ] {
        let file = release_file(
            dir.path(),
            "file:///nowhere",
            &format!("  content: {{type: helm, helm: {{releaseName: \"{name}\"}}}}\n"),
        );
        let (code, stdout, stderr) = convoy_in_repo(
            &["render", "-f", &file, "--source-dir", "examples/helm"],
            None,
        );
        assert_eq!(code, 4, "{stderr}");
        assert!(!stdout.contains("PRIVATE KEY"));
        assert_eq!(
            stderr.trim_end(),
            format!(
                "error: render Release apps/web (step Rendering, reason DeployFailed): spec.content.helm.releaseName {name:?} is not a valid Helm release name (lowercase letters, digits, '-' and '.', starting and ending with a letter or digit, at most 53 characters)"
            )
        );
    }
}

/// `convoy render` of a Release whose kustomize content is `app` of the directory `source`.
fn render_kustomization_in(source: &std::path::Path) -> (i32, String, String) {
    let file = release_file(
        source,
        "file:///nowhere",
        "    path: app\n  content: {type: kustomize}\n",
    );
    convoy_in_repo(
        &[
            "render",
            "-f",
            &file,
            "--source-dir",
            source.to_str().unwrap(),
        ],
        None,
    )
}

/// kustomize never reads outside the source: a base that climbs out of it, or a generator
/// file outside it, is refused naming the kustomization file and the entry; a remote base is
/// refused unless the Release opts in.
#[test]
fn kustomize_reads_nothing_outside_the_source_and_fetches_nothing() {
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(
        outside.path().join("kustomization.yaml"),
        "resources: [stolen.yaml]\n",
    )
    .unwrap();
    std::fs::write(
        outside.path().join("stolen.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: stolen}\n",
    )
    .unwrap();
    let source = tempfile::tempdir().unwrap();
    let app = source.path().join("app");
    std::fs::create_dir(&app).unwrap();
    let climb = format!(
        "{}{}",
        "../".repeat(source.path().components().count() + 1),
        outside.path().display().to_string().trim_start_matches('/')
    );
    let cases = [
        (
            format!("resources: [\"{climb}\"]\n"),
            format!("app/kustomization.yaml: resources entry {climb:?} leads outside the source"),
        ),
        (
            "configMapGenerator:\n- name: x\n  files: [key=../../../../../../etc/hostname]\n"
                .to_string(),
            "app/kustomization.yaml: configMapGenerator entry \"../../../../../../etc/hostname\" leads outside the source".to_string(),
        ),
        (
            format!("resources: [\"file://{}\"]\n", outside.path().display()),
            format!(
                "app/kustomization.yaml: resources entry \"file://{}\" is a file: URL, which reads this machine's files; paths must stay inside the source",
                outside.path().display()
            ),
        ),
    ];
    for (kustomization, expected) in cases {
        std::fs::write(app.join("kustomization.yaml"), &kustomization).unwrap();
        let (code, stdout, stderr) = render_kustomization_in(source.path());
        assert_eq!(code, 4, "{kustomization}: {stderr}");
        assert!(!stdout.contains("stolen"));
        assert_eq!(
            stderr.trim_end(),
            format!(
                "error: render Release apps/web (step Rendering, reason DeployFailed): {expected}"
            ),
            "{kustomization}"
        );
    }
}

/// kustomize reads field names whatever their case, and loads what a generator config in a
/// file names (a URL with a GET): neither gets past the check to the network (found by an
/// attack: any address's answer ended up in a ConfigMap the daemon applied).
#[test]
fn kustomize_fetches_nothing_through_a_field_in_capitals_or_a_generator_config_file() {
    let (port, connections) =
        crate::support::servers::stalling_server(std::time::Duration::from_millis(100));
    let url = format!("http://127.0.0.1:{port}/s");
    let cases = [
        (
            format!("configMapGenerator:\n- name: x\n  Files: [k={url}]\n"),
            None,
            "app/kustomization.yaml: key \"Files\" is read by kustomize as \"files\" (it matches field names whatever their case); write files".to_string(),
        ),
        (
            "generators: [gen.yaml]\n".to_string(),
            Some(format!(
                "apiVersion: builtin\nkind: ConfigMapGenerator\nmetadata: {{name: x}}\nfiles: [k={url}]\n"
            )),
            format!(
                "app/gen.yaml: generators entry {url:?} is a remote reference, which convoy does not fetch (set content.kustomize.allowRemoteBases: true to let kustomize fetch it)"
            ),
        ),
    ];
    for (kustomization, config, expected) in cases {
        let source = tempfile::tempdir().unwrap();
        let app = source.path().join("app");
        std::fs::create_dir(&app).unwrap();
        std::fs::write(app.join("kustomization.yaml"), &kustomization).unwrap();
        if let Some(config) = config {
            std::fs::write(app.join("gen.yaml"), config).unwrap();
        }
        let (code, _, stderr) = render_kustomization_in(source.path());
        assert_eq!(code, 4, "{kustomization}: {stderr}");
        assert_eq!(
            stderr.trim_end(),
            format!(
                "error: render Release apps/web (step Rendering, reason DeployFailed): {expected}"
            ),
            "{kustomization}"
        );
    }
    assert_eq!(
        connections.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "kustomize sent nothing"
    );
}

/// A server on this machine's address toward the network (not loopback, which Go never
/// proxies) that closes each connection: its address, port and how many it accepted.
fn server_on_this_machine() -> (
    std::net::IpAddr,
    u16,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
) {
    let (port, accepted) = crate::support::servers::counting_server("0.0.0.0:0", drop);
    // Connecting a UDP socket sends nothing; it picks the address.
    let probe = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
    probe.connect("192.0.2.1:9").unwrap();
    let ip = probe.local_addr().unwrap().ip();
    assert!(
        !ip.is_loopback(),
        "the test needs a non-loopback address, not {ip}"
    );
    (ip, port, accepted)
}

/// `tool(false)` (fenced) fails and reaches nothing; `tool(true)` (the network allowed)
/// connects, so the fence is what held the first.
fn assert_fenced(
    accepted: &std::sync::atomic::AtomicUsize,
    tool: impl Fn(bool) -> std::process::Command,
) {
    use std::sync::atomic::Ordering;
    let run = |network| {
        tool(network)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap()
    };
    assert!(!run(false).success());
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        0,
        "nothing reached the server"
    );
    run(true);
    crate::support::eventually_sync(
        "the tool allowed the network to connect",
        std::time::Duration::from_secs(10),
        || (accepted.load(Ordering::SeqCst) > 0).then_some(()),
    );
}

/// helm runs behind the same dead proxy unless the operator lets values schemas be fetched:
/// a schema reference the check failed to see reaches no server. helm is run here on a chart
/// the check refuses, to test the fence alone; allowed the network, the same run connects.
#[test]
fn helm_reaches_no_server_unless_values_schemas_may_be_fetched() {
    let (ip, port, accepted) = server_on_this_machine();
    let chart = tempfile::tempdir().unwrap();
    std::fs::create_dir(chart.path().join("templates")).unwrap();
    std::fs::write(
        chart.path().join("Chart.yaml"),
        "apiVersion: v2\nname: c\nversion: 0.1.0\n",
    )
    .unwrap();
    std::fs::write(
        chart.path().join("templates/cm.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n",
    )
    .unwrap();
    std::fs::write(
        chart.path().join("values.schema.json"),
        format!("{{\"$ref\": \"http://{ip}:{port}/s.json\"}}"),
    )
    .unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let values = scratch.path().join("values.json");
    std::fs::write(&values, "{}").unwrap();
    let helm = crate::support::testenv_bin().join("helm");
    let run = |network| {
        convoy::engine::render::helm::command(&convoy::engine::render::helm::Template {
            helm: &helm,
            chart: chart.path(),
            release_name: "c",
            namespace: "default",
            values_file: &values,
            cluster: None,
            network,
            scratch: scratch.path(),
        })
    };
    assert_fenced(&accepted, run);
}

/// kustomize runs behind a proxy that does not exist unless remote bases are allowed, so a
/// URL the checker failed to see (an attack found eight ways) reaches no server beyond
/// loopback. kustomize is run here on a kustomization the checker refuses, to test the fence
/// alone; with remote bases allowed the same run connects, so the fence is what held it.
#[test]
fn kustomize_reaches_no_server_unless_remote_bases_are_allowed() {
    let (ip, port, accepted) = server_on_this_machine();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("kustomization.yaml"),
        format!("resources: [\"http://{ip}:{port}/r.yaml\"]\n"),
    )
    .unwrap();
    let home = tempfile::tempdir().unwrap();
    let kustomize = crate::support::testenv_bin().join("kustomize");
    let run = |allow_remote| {
        convoy::engine::render::kustomize::command(
            &kustomize,
            dir.path(),
            home.path(),
            allow_remote,
        )
    };
    assert_fenced(&accepted, run);
}

/// kustomize builds the staged tree (the files convoy checked, kustomizations and configs as
/// the JSON it read) into what it builds from the source itself: bases, components, patches
/// by path and inline, generator files and envs, a generator config in a file and inline,
/// replacements, `y` and `010` where kustomize reads text, a linked file, a `sub/..` path, and
/// a base reached through a link that names its own base from where the link leads.
#[test]
fn kustomize_builds_the_staged_tree_as_it_builds_the_source() {
    let source = tempfile::tempdir().unwrap();
    let files = [
        (
            "base/kustomization.yaml",
            "resources: [deploy.yaml]\ncommonLabels: {tier: web, enabled: \"yes\"}\n",
        ),
        (
            "base/deploy.yaml",
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  replicas: 1\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    spec: {containers: [{name: web, image: nginx:1.27}]}\n",
        ),
        (
            "comp/kustomization.yaml",
            "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\npatches:\n- patch: |-\n    apiVersion: apps/v1\n    kind: Deployment\n    metadata: {name: web}\n    spec: {replicas: 3}\n",
        ),
        (
            "app/extra.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: extra}\ndata: {a: \"1\"}\n",
        ),
        (
            "app/kustomization.yaml",
            "# an overlay\nnamespace: shop\nresources:\n- ../base\n- linked-base\n- sub/../extra.yaml\n- linked.yaml\ncomponents: [../comp]\npatches:\n- path: p.yaml\n  target: {kind: Deployment}\nconfigMapGenerator:\n- name: settings\n  files: [conf=settings.conf]\n  envs: [vars.env]\n  literals: [\"mode=prod!\", 'quote=\"x\"']\ntransformers: [labels.yaml]\ngenerators:\n- gen.yaml\n- |-\n  apiVersion: builtin\n  kind: SecretGenerator\n  metadata: {name: inline-secret}\n  literals: [token=t0ps3cret]\nreplacements:\n- source: {kind: ConfigMap, name: extra, fieldPath: data.a}\n  targets:\n  - select: {kind: Deployment}\n    fieldPaths: [metadata.annotations.extra]\n    options: {create: true}\nimages:\n- name: nginx\n  newTag: \"1.28\"\n",
        ),
        ("app/sub/.keep", ""),
        (
            "app/p.yaml",
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec: {template: {spec: {containers: [{name: web, env: [{name: A, value: b}]}]}}}\n",
        ),
        ("app/settings.conf", "key = value\n"),
        ("app/vars.env", "X=1\nY=two words\n"),
        (
            "app/gen.yaml",
            "apiVersion: builtin\nkind: ConfigMapGenerator\nmetadata: {name: from-file}\nliterals: [k=v]\n---\napiVersion: builtin\nkind: ConfigMapGenerator\nmetadata: {name: second}\nfiles: [settings.conf]\n",
        ),
    ];
    for (path, text) in files {
        let p = source.path().join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    std::fs::write(
        source.path().join("app/labels.yaml"),
        "apiVersion: builtin\nkind: LabelTransformer\nmetadata: {name: l}\nlabels: {short: y, zero: 010}\nfieldSpecs: [{path: metadata/labels, create: true}]\n",
    )
    .unwrap();
    std::fs::write(
        source.path().join("app/target.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: linked}\n",
    )
    .unwrap();
    std::os::unix::fs::symlink("target.yaml", source.path().join("app/linked.yaml")).unwrap();
    // A base reached through a link names its own base from where the link leads.
    for (path, text) in [
        (
            "shared/base2/kustomization.yaml",
            "resources: [../common2]\n",
        ),
        (
            "shared/common2/kustomization.yaml",
            "resources: [cm.yaml]\n",
        ),
        (
            "shared/common2/cm.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: common2}\n",
        ),
    ] {
        let p = source.path().join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    std::os::unix::fs::symlink("../shared/base2", source.path().join("app/linked-base")).unwrap();
    let app = source.path().join("app");
    let kustomize = crate::support::testenv_bin().join("kustomize");
    let home = tempfile::tempdir().unwrap();
    let direct = convoy::engine::render::kustomize::command(&kustomize, &app, home.path(), false)
        .output()
        .unwrap();
    assert!(
        direct.status.success(),
        "{}",
        String::from_utf8_lossy(&direct.stderr)
    );
    let direct = convoy::engine::render::manifests::parse_documents(
        &String::from_utf8_lossy(&direct.stdout),
        "kustomize",
    )
    .unwrap();
    let staged = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(convoy::engine::render::kustomize::build(
            source.path(),
            &app,
            false,
        ))
        .unwrap();
    assert_eq!(staged.len(), 8, "{staged:#?}");
    assert_eq!(staged, direct);
}

/// Text kustomize's YAML reader would read otherwise than convoy's reaches kustomize only as
/// the JSON convoy read, so it is built, not refused: a shell heredoc (`<<`) in an inline
/// patch, a `!` in a comment, a Unicode line separator in a comment. Before the staged tree
/// such text was refused (each was a way past the check).
#[test]
fn text_yaml_readers_read_differently_builds_as_convoy_read_it() {
    let source = tempfile::tempdir().unwrap();
    std::fs::create_dir(source.path().join("app")).unwrap();
    std::fs::write(
        source.path().join("app/kustomization.yaml"),
        "# !important: keep\u{2028}resources: [../../outside]\nresources: [cm.yaml]\npatches:\n- patch: |-\n    apiVersion: v1\n    kind: ConfigMap\n    metadata: {name: script}\n    data:\n      run.sh: |\n        cat <<EOF\n        hi\n        EOF\n",
    )
    .unwrap();
    std::fs::write(
        source.path().join("app/cm.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: script}\ndata: {run.sh: x}\n",
    )
    .unwrap();
    let objects = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(convoy::engine::render::kustomize::build(
            source.path(),
            &source.path().join("app"),
            false,
        ))
        .unwrap();
    assert_eq!(objects.len(), 1, "{objects:#?}");
    assert_eq!(objects[0].0["data"]["run.sh"], "cat <<EOF\nhi\nEOF");
}

/// generateName is for hooks: an ordinary object without a name is refused, naming the file
/// and the rule.
#[test]
fn a_plain_object_with_generate_name_is_refused_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("app")).unwrap();
    std::fs::write(
        dir.path().join("app/settings.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  generateName: settings-\ndata: {a: b}\n",
    )
    .unwrap();
    let file = release_file(dir.path(), "file:///nowhere", "    path: app\n");
    let (code, _, stderr) = render_in(dir.path(), &file);
    assert_eq!(code, 4);
    assert_eq!(
        stderr.trim_end(),
        "error: render Release apps/web (step Rendering, reason DeployFailed): read manifests: settings.yaml: document 1: ConfigMap has no metadata.name (only hooks may use generateName: annotate it helm.sh/hook or argocd.argoproj.io/hook, or give it a name)"
    );
}

/// A name is put into the request's path as it is: one with `..` segments would send the
/// dry run and the apply to another object's URL (another Cluster's, behind a proxy that
/// resolves them), and a `#` would end the path before `?dryRun=All` (found by an attack).
/// Both are refused at Rendering, as is a namespace that is no namespace's name; nothing is
/// sent.
#[test]
fn an_object_name_or_namespace_that_would_change_the_requests_path_is_refused() {
    for (metadata, target, expected) in [
        (
            "name: ../../../../c-2/api/v1/namespaces/kube-system/configmaps/x",
            "",
            r#"ConfigMap v1: metadata.name "../../../../c-2/api/v1/namespaces/kube-system/configmaps/x" may not contain /, %, ? or #"#,
        ),
        (
            "name: \"x#\"",
            "",
            r#"ConfigMap v1: metadata.name "x#" may not contain /, %, ? or #"#,
        ),
        (
            "name: ..",
            "",
            r#"ConfigMap v1: metadata.name ".." may not be . or .."#,
        ),
        // kube cannot build the request: the whole diff failed on it, not this object.
        (
            "name: \"a<b\"",
            "",
            r#"ConfigMap v1: metadata.name "a<b" has a character a request's path cannot carry (such as <, > or `)"#,
        ),
        (
            "name: x\n  namespace: a/../b",
            "",
            r#"ConfigMap v1: metadata.namespace "a/../b" is not a namespace name (lower-case letters, digits and '-', at most 63)"#,
        ),
        // Hook workloads run in the target namespace though no object takes it.
        (
            "name: x\n  namespace: apps",
            "  targetNamespace: x/../../c-2\n",
            r#"spec.targetNamespace "x/../../c-2" is not a namespace name (lower-case letters, digits and '-', at most 63)"#,
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("app")).unwrap();
        std::fs::write(
            dir.path().join("app/settings.yaml"),
            format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  {metadata}\ndata: {{a: b}}\n"),
        )
        .unwrap();
        let file = release_file(
            dir.path(),
            "file:///nowhere",
            &format!("    path: app\n{target}"),
        );
        let (code, stdout, stderr) = render_in(dir.path(), &file);
        assert_eq!((code, stdout.as_str()), (4, ""), "{metadata}: {stderr}");
        assert_eq!(
            stderr.trim_end(),
            format!(
                "error: render Release apps/web (step Rendering, reason DeployFailed): {expected}"
            ),
            "{metadata}"
        );
    }
    // The apiVersion goes into the discovery request's path: `/v1/namespaces/...` read a
    // Secret of another namespace as convoy (found by an attack).
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("app")).unwrap();
    std::fs::write(
        dir.path().join("app/settings.yaml"),
        "apiVersion: /v1/namespaces/kube-system/secrets/x\nkind: ConfigMap\nmetadata: {name: x}\n",
    )
    .unwrap();
    let file = release_file(dir.path(), "file:///nowhere", "    path: app\n");
    let (code, _, stderr) = render_in(dir.path(), &file);
    assert_eq!(code, 4, "{stderr}");
    assert_eq!(
        stderr.trim_end(),
        "error: render Release apps/web (step Rendering, reason DeployFailed): ConfigMap: apiVersion \"/v1/namespaces/kube-system/secrets/x\" is not group/version with a version of lower-case letters, digits and '-'"
    );
}

/// `convoy render -f file` from an empty cache with one proxy variable (`name`, `value`) and
/// `NO_PROXY` set, and no other proxy variable of the test's environment.
fn render_through(
    file: &Path,
    extra: &[&str],
    (name, value): (&str, &str),
    no_proxy: &str,
) -> (i32, String, String) {
    let cache = tempfile::tempdir().unwrap();
    let mut command = Command::new(convoy_bin());
    command
        .args(["render", "-f"])
        .arg(file)
        .args(extra)
        .env("PATH", path_with_testenv())
        .env("CONVOY_CACHE_DIR", cache.path())
        .env_remove("KUBECONFIG")
        .env("NO_COLOR", "1");
    for variable in [
        "http_proxy",
        "HTTP_PROXY",
        "https_proxy",
        "HTTPS_PROXY",
        "all_proxy",
        "ALL_PROXY",
        "no_proxy",
    ] {
        command.env_remove(variable);
    }
    let out = command
        .env(name, value)
        .env("NO_PROXY", no_proxy)
        .output()
        .unwrap();
    crate::sync_status::out(&out)
}

/// Git fetches through the proxy of convoy's environment, as the chart and OCI fetches and
/// kubectl do (git ran with none before: a GitRepository behind a corporate proxy could not
/// be fetched), chosen by Go's rules as kubectl and Flux choose it, not by git's curl's:
/// `http_proxy` or `HTTP_PROXY` carries the fetch (here to a proxy that refuses it: exit 3;
/// curl read only the lower-case name), unless `NO_PROXY` names the host (`*.domain:port`,
/// which curl does not read), and loopback is fetched direct (curl sent it to the proxy).
#[test]
fn git_fetches_through_the_environments_proxy_unless_no_proxy_names_the_host() {
    let repo = GitRepo::new();
    repo.commit(
        &[(
            "app/a.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n",
        )],
        "first",
    );
    let server = crate::support::servers::http_server(repo.base(), None, true);
    let (port, connections) = crate::support::servers::refusing_proxy("127.0.0.2:0");
    let through = || connections.load(std::sync::atomic::Ordering::SeqCst);
    let dir = tempfile::tempdir().unwrap();
    let render = |host: &str, proxy_variable: &str, no_proxy: &str| {
        let file = release_file(
            dir.path(),
            &format!("http://{host}:{}/repo.git", server.port),
            "    path: app\n",
        );
        render_through(
            Path::new(&file),
            &[],
            (proxy_variable, &format!("http://127.0.0.2:{port}")),
            no_proxy,
        )
    };
    // A name only the proxy could reach.
    let far = "git.example.invalid";
    for variable in ["http_proxy", "HTTP_PROXY"] {
        let before = through();
        let (code, _, stderr) = render(far, variable, "");
        assert_eq!(code, 3, "{variable}: {stderr}");
        assert!(stderr.contains("403"), "{variable}: {stderr}");
        assert!(through() > before, "git did not use {variable}");
    }
    let before = through();
    let (code, _, stderr) = render(
        far,
        "HTTP_PROXY",
        &format!("*.example.invalid:{}", server.port),
    );
    assert_eq!(code, 3, "{stderr}");
    assert!(!stderr.contains("403"), "{stderr}");
    let (code, stdout, stderr) = render("127.0.0.1", "HTTP_PROXY", "");
    assert_eq!(
        (code, stdout.as_str()),
        (
            0,
            "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n"
        ),
        "{stderr}"
    );
    assert_eq!(through(), before, "through the proxy");
}

/// Chart repositories and OCI registries are fetched through the proxy of convoy's
/// environment chosen by the same Go rules as git's and the API servers' (reqwest read the
/// environment by its own: a `NO_PROXY` entry with a port never matched, loopback went to the
/// proxy).
#[test]
fn chart_repositories_and_oci_registries_are_fetched_through_the_proxy_go_would_choose() {
    let (port, connections) = crate::support::servers::refusing_proxy("127.0.0.2:0");
    let through = || connections.load(std::sync::atomic::Ordering::SeqCst);
    let (plain_port, plain_connections) = crate::support::servers::refusing_proxy("127.0.0.1:0");
    let plain = || plain_connections.load(std::sync::atomic::Ordering::SeqCst);
    let dir = tempfile::tempdir().unwrap();
    let sources = [
        (
            "HelmRegistry",
            "url: \"http://HOST:9/\"",
            "chart: web\n    version: 1.0.0\n  content:\n    type: helm",
        ),
        (
            "OCIRegistry",
            "url: \"oci://HOST:9/bundles/app\", insecure: true",
            "tag: v1",
        ),
    ];
    for (kind, spec, release) in sources {
        let render_via = |proxy: &str, host: &str, no_proxy: &str| {
            let file = dir.path().join("release.yaml");
            std::fs::write(
                &file,
                format!(
                    "apiVersion: source.convoy.kumodo.io/v1alpha1\nkind: {kind}\nmetadata: {{name: src}}\nspec: {{{}}}\n---\n\
apiVersion: core.convoy.kumodo.io/v1alpha1\nkind: Release\nmetadata: {{name: web, namespace: apps}}\nspec:\n  source:\n    kind: {kind}\n    name: src\n    {release}\n",
                    spec.replace("HOST", host)
                ),
            )
            .unwrap();
            render_through(&file, &[], ("HTTP_PROXY", proxy), no_proxy)
        };
        let render = |host: &str, no_proxy: &str| {
            render_via(&format!("http://127.0.0.2:{port}"), host, no_proxy)
        };
        let before = through();
        let (code, _, stderr) = render("charts.example.invalid", "");
        assert_eq!(code, 3, "{kind}: {stderr}");
        // The OCI fetch asks twice (the token check, then the manifest).
        assert!(through() > before, "{kind} not through the proxy: {stderr}");
        let expected = through();
        for (host, no_proxy) in [
            ("charts.example.invalid", "*.example.invalid:9"),
            ("127.0.0.1", ""),
        ] {
            let (code, _, stderr) = render(host, no_proxy);
            assert_eq!(code, 3, "{kind} at {host}: {stderr}");
            assert_eq!(
                through(),
                expected,
                "{kind} at {host} through the proxy: {stderr}"
            );
        }
        // A proxy without a scheme is http, as Go reads it (`localhost:PORT` parses as a URL
        // of scheme `localhost`: the value is handed to reqwest as it is set).
        let before = plain();
        let (code, _, stderr) = render_via(
            &format!("localhost:{plain_port}"),
            "charts.example.invalid",
            "",
        );
        assert_eq!(code, 3, "{kind}: {stderr}");
        assert!(
            plain() > before,
            "{kind} not through localhost:{plain_port}: {stderr}"
        );
    }
}

/// A lifecycle hook named like a content hook's entry (Kind/namespace/name) is refused at
/// Rendering: its entry would point convoy at that object, polled and deleted with the Release.
#[test]
fn a_lifecycle_hook_named_like_an_object_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("app")).unwrap();
    std::fs::write(
        dir.path().join("app/settings.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata: {a: b}\n",
    )
    .unwrap();
    let file = release_file(
        dir.path(),
        "file:///nowhere",
        "    path: app\n  lifecycle:\n    hooks:\n    - name: Secret/kube-system/token\n      phase: preDelete\n      pod: {containers: [{name: x, image: busybox}]}\n",
    );
    let (code, stdout, stderr) = render_in(dir.path(), &file);
    assert_eq!(code, 4);
    assert_eq!(stdout, "");
    assert_eq!(
        stderr.trim_end(),
        "error: render Release apps/web (step Rendering, reason DeployFailed): spec.lifecycle.hooks: the hook name \"Secret/kube-system/token\" holds a '/' (names like Kind/namespace/name are content hooks'); give each hook of a phase its own name without '/'"
    );
}

/// A few kilobytes of Git objects can name one large blob many times: `git archive` of such a
/// tree is larger than memory. convoy unpacks it as git writes it, so the unpack's size limit
/// stops it while the process stays within 1 GiB of address space (it held the whole archive
/// in memory before, and aborted here).
#[test]
fn a_git_tree_that_archives_larger_than_memory_is_refused_without_holding_it() {
    use std::io::Write;
    let repo = GitRepo::new();
    let work = repo.work();
    let git = |args: &[&str], stdin: &[u8]| {
        let mut child = Command::new("git")
            .current_dir(&work)
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(stdin).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "git {args:?}");
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    };
    // One 64 MiB blob of zeros (64 KiB packed), forty times in one tree: 2.5 GiB archived.
    let blob = git(&["hash-object", "-w", "--stdin"], &vec![0u8; 64 << 20]);
    let entries: String = (0..40)
        .map(|i| format!("100644 blob {blob}\tzeros-{i}\n"))
        .collect();
    let tree = git(&["mktree"], entries.as_bytes());
    let commit = git(&["commit-tree", &tree, "-m", "bomb"], b"");
    git(
        &[
            "push",
            "--quiet",
            "origin",
            &format!("{commit}:refs/heads/main"),
        ],
        b"",
    );

    let dir = tempfile::tempdir().unwrap();
    let file = release_file(dir.path(), &repo.file_url(), "");
    let cache = tempfile::tempdir().unwrap();
    let out = Command::new("sh")
        .args(["-c", "ulimit -v 1048576 && exec \"$@\"", "sh"])
        .arg(convoy_bin())
        .args(["render", "-f", &file])
        .env("CONVOY_CACHE_DIR", cache.path())
        .env("PATH", path_with_testenv())
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim_end(),
        format!(
            "error: render Release apps/web (step SourceResolution, reason SourceNotReady): fetch GitRepository apps/repo: cannot unpack {}: the archive unpacks to more than 2147483648 bytes",
            repo.file_url()
        )
    );
}

/// kustomize takes a directory named like `user@host:org/repo` for a repository first and
/// runs git to fetch it. With remote bases not allowed, git may use no transport: ssh (here
/// a stand-in that records its call) never runs.
#[test]
fn kustomize_starts_no_transport_for_a_directory_named_like_a_repository() {
    let source = tempfile::tempdir().unwrap();
    let app = source.path().join("app");
    std::fs::create_dir_all(app.join("x@127.0.0.1:org/repo")).unwrap();
    std::fs::write(
        app.join("kustomization.yaml"),
        "resources: [\"x@127.0.0.1:org/repo\"]\n",
    )
    .unwrap();
    std::fs::write(
        app.join("x@127.0.0.1:org/repo/kustomization.yaml"),
        "resources: []\n",
    )
    .unwrap();
    let bin = tempfile::tempdir().unwrap();
    let called = bin.path().join("ssh-was-called");
    let ssh = bin.path().join("ssh");
    std::fs::write(
        &ssh,
        format!("#!/bin/sh\necho \"$@\" >> '{}'\nexit 1\n", called.display()),
    )
    .unwrap();
    std::fs::set_permissions(&ssh, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let file = release_file(
        source.path(),
        "file:///nowhere",
        "    path: app\n  content: {type: kustomize}\n",
    );
    let path = format!("{}:{}", bin.path().display(), path_with_testenv());
    let (code, _, stderr) = convoy_in_repo(
        &[
            "render",
            "-f",
            &file,
            "--source-dir",
            source.path().to_str().unwrap(),
        ],
        Some(&path),
    );
    assert!(!called.exists(), "ssh ran: {stderr}");
    assert_eq!(code, 4, "{stderr}");
    assert!(stderr.contains("transport 'ssh' not allowed"), "{stderr}");
}

/// A chart's values schema that refers to a URL would have `helm template` fetch it from
/// where convoy runs (a metadata endpoint, an internal service). It is refused before helm
/// runs, naming the schema, and nothing connects to the server it names.
#[test]
fn a_values_schema_that_refers_to_a_url_is_refused_and_fetches_nothing() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let url = format!(
        "http://{}/latest/meta-data/",
        listener.local_addr().unwrap()
    );
    let (source, file) = source_tree(
        &[
            (
                "chart/Chart.yaml",
                "apiVersion: v2\nname: web\nversion: 1.0.0\n".into(),
            ),
            (
                "chart/templates/cm.yaml",
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web}\n".into(),
            ),
            (
                "chart/values.schema.json",
                format!("{{\"properties\": {{\"a\": {{\"$ref\": \"{url}\"}}}}}}"),
            ),
        ],
        "chart",
        "{type: helm}",
    );
    let (code, stdout, stderr) = render_in(source.path(), &file);
    assert_eq!(code, 4, "{stdout}{stderr}");
    assert_eq!(
        stderr.trim_end(),
        format!(
            "error: render Release apps/web (step Rendering, reason DeployFailed): values schema values.schema.json: $ref \"{url}\" refers outside the schema; convoy lets a chart's values schema read neither files nor the network (refer within the file, \"#/...\", or have the operator allow an https prefix with --allow-values-schema-ref)"
        )
    );
    assert!(
        listener.accept().is_err(),
        "something connected to the schema's URL"
    );
}

/// A chart generated by helm-schema refers to Kubernetes' schemas by https URL. Under a prefix
/// the operator allows, helm fetches the schema (through the certificate authorities convoy
/// trusts) and validates the values against it: a value of the wrong type is named.
#[test]
fn a_values_schema_may_refer_to_an_allowed_https_prefix() {
    let served = tempfile::tempdir().unwrap();
    std::fs::create_dir(served.path().join("k8s")).unwrap();
    std::fs::write(
        served.path().join("k8s/_definitions.json"),
        r#"{"definitions": {"port": {"type": "integer", "minimum": 1}}}"#,
    )
    .unwrap();
    let (server, ca) = crate::support::servers::https_server(served.path(), served.path());
    let prefix = format!("https://127.0.0.1:{}/k8s/", server.port);
    let tree = |port: &str| {
        source_tree(
            &[
                (
                    "chart/Chart.yaml",
                    "apiVersion: v2\nname: web\nversion: 1.0.0\n".into(),
                ),
                (
                    "chart/templates/cm.yaml",
                    "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web}\ndata: {port: \"{{ .Values.port }}\"}\n".into(),
                ),
                ("chart/values.yaml", format!("port: {port}\n")),
                (
                    "chart/values.schema.json",
                    format!(
                        r#"{{"properties": {{"port": {{"$ref": "{prefix}_definitions.json#/definitions/port"}}}}}}"#
                    ),
                ),
            ],
            "chart",
            "{type: helm}",
        )
    };
    let render = |dir: &Path, file: &str| {
        convoy_in_repo_with(
            &[
                "render",
                "-f",
                file,
                "--source-dir",
                dir.to_str().unwrap(),
                "--allow-values-schema-ref",
                &prefix,
            ],
            None,
            &[("SSL_CERT_FILE", &ca)],
        )
    };
    let (good, file) = tree("8080");
    let (code, stdout, stderr) = render(good.path(), &file);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("port: \"8080\""), "{stdout}");
    let (bad, file) = tree("\"eighty\"");
    let (code, stdout, stderr) = render(bad.path(), &file);
    assert_eq!(code, 4, "{stdout}{stderr}");
    assert_eq!(
        stderr.trim_end(),
        "error: render Release apps/web (step Rendering, reason DeployFailed): helm template failed: values don't meet the specifications of the schema(s) in the following chart(s): web: - at '/port': got string, want integer"
    );
}

/// helm quotes values in its errors (a values schema's, a chart's `fail`); those of a Secret
/// layer never reach the message, which goes to the Release's status and Events.
#[test]
fn a_secret_layers_values_are_kept_out_of_helms_errors() {
    for (extra, said) in [
        (
            (
                "chart/values.schema.json",
                r#"{"properties": {"db": {"properties": {"password": {"type": "string", "pattern": "^[a-z]+$"}}}}}"#,
            ),
            "at '/db/password': '<redacted>' does not match pattern '^[a-z]+$'",
        ),
        (
            (
                "chart/templates/check.yaml",
                r#"{{ fail (printf "the password %s is weak" .Values.db.password) }}"#,
            ),
            "the password <redacted> is weak",
        ),
        // A multi-line value, its lines joined by the message (found by a review).
        (
            (
                "chart/templates/check.yaml",
                r#"{{ fail (printf "bad key: %s" .Values.db.key) }}"#,
            ),
            "bad key: <redacted>",
        ),
    ] {
        let (source, file) = source_tree(
            &[
                ("chart/Chart.yaml", "apiVersion: v2\nname: web\nversion: 1.0.0\n".into()),
                (
                    "chart/templates/cm.yaml",
                    "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web}\ndata: {user: \"{{ .Values.db.user }}\"}\n".into(),
                ),
                (extra.0, extra.1.into()),
            ],
            "chart",
            "{type: helm, helm: {valuesFrom: [{kind: Secret, name: db}], values: {db: {user: admin}}}}",
        );
        let mut text = std::fs::read_to_string(&file).unwrap();
        text.push_str(
            "---\napiVersion: v1\nkind: Secret\nmetadata: {name: db, namespace: apps}\nstringData:\n  values.yaml: |\n    db:\n      password: Sup3r-S3cret-Value\n      key: \"-----BEGIN KEY-----\\nMIIS3cretLINEone\\nTopS3cretLineTwo\\n-----END KEY-----\\n\"\n",
        );
        std::fs::write(&file, text).unwrap();
        let (code, stdout, stderr) = render_in(source.path(), &file);
        assert_eq!(code, 4, "{stdout}{stderr}");
        assert!(stderr.contains(said), "{stderr}");
        assert!(!stderr.contains("S3cret"), "{stderr}");
    }
}

/// A chart whose template loops prints far more than any render holds: convoy reads no more
/// than its limit, closes the pipe (helm ends) and names the reason.
#[test]
fn a_chart_that_prints_without_bound_is_cut_off() {
    // 700 lines of 100 KB: 70 MB (a longer loop takes helm minutes to print).
    let (source, file) = source_tree(
        &[
            (
                "chart/Chart.yaml",
                "apiVersion: v2\nname: loop\nversion: 1.0.0\n".into(),
            ),
            (
                "chart/templates/loop.yaml",
                "{{- range until 700 }}\n# {{ $.Values.pad }}\n{{- end }}\n".into(),
            ),
            (
                "chart/values.yaml",
                format!("pad: {}\n", "x".repeat(100_000)),
            ),
        ],
        "chart",
        "{type: helm}",
    );
    let (code, stdout, stderr) = render_in(source.path(), &file);
    assert_eq!(code, 4, "{stdout}{stderr}");
    assert_eq!(
        stderr.trim_end(),
        "error: render Release apps/web (step Rendering, reason DeployFailed): helm template failed: its output is larger than 67108864 bytes; convoy reads no more of it (helm printed more than any render holds: a loop in a template, a base included many times?)"
    );
}

/// A Go template string that clears the screen, draws a fake result, sets the clipboard
/// (OSC 52), and uses a C1 CSI and a right-to-left override.
const HOSTILE_FAIL: &str =
    r#"{{ fail "\x1b[2J\x1b[HApplied\x1b]52;c;Y3VybA==\x07 \u009b31m \u202etxt.exe" }}"#;

#[test]
fn a_chart_cannot_write_control_sequences_to_the_terminal() {
    let (dir, file) = source_tree(
        &[
            (
                "chart/Chart.yaml",
                "apiVersion: v2\nname: web\nversion: 0.1.0\n".into(),
            ),
            ("chart/templates/cm.yaml", HOSTILE_FAIL.into()),
        ],
        "chart",
        "{type: helm, helm: {releaseName: web}}",
    );
    let (code, _, stderr) = render_in(dir.path(), &file);
    assert_eq!(code, 4, "{stderr}");
    insta::assert_snapshot!(stderr, @r"error: render Release apps/web (step Rendering, reason DeployFailed): helm template failed: execution error at (web/templates/cm.yaml:1:3): \x1b[2J\x1b[HApplied\x1b]52;c;Y3VybA==\x07 \u{9b}31m \u{202e}txt.exe; Use --debug flag to render out invalid YAML");
}

#[test]
fn rendered_values_with_control_characters_print_escaped_and_unchanged() {
    let data = "a\u{1b}[2J\u{7}b\u{9b}31m\u{7f}c";
    let manifest = r#"{apiVersion: v1, kind: ConfigMap, metadata: {name: hostile}, data: {text: "a\e[2J\ab\x9b31m\x7fc"}}"#;
    let (dir, file) = source_tree(
        &[("app/cm.yaml", manifest.into())],
        "app",
        "{type: manifests}",
    );
    for format in ["yaml", "json"] {
        let (code, stdout, stderr) = convoy_in_repo(
            &[
                "render",
                "-f",
                &file,
                "--source-dir",
                dir.path().to_str().unwrap(),
                "-o",
                format,
            ],
            None,
        );
        assert_eq!(code, 0, "{stderr}");
        assert!(
            !stdout.chars().any(|c| c.is_control() && c != '\n'),
            "-o {format}: {stdout:?}"
        );
        let back: serde_json::Value = serde_saphyr::from_str(&stdout).unwrap();
        let object = if format == "json" {
            &back["items"][0]
        } else {
            &back
        };
        assert_eq!(object["data"]["text"], data, "-o {format}");
    }
}

/// With `allowRemoteBases`, kustomize fetches remote files and bases through the proxy of
/// convoy's environment (it ran with none), git included, which reads `http_proxy` in lower
/// case only (given `HTTP_PROXY` alone it went direct); direct where Go would go direct
/// (`NO_PROXY`, loopback), git too, whose curl reads `NO_PROXY` by other rules.
#[test]
fn kustomize_fetches_remote_bases_through_the_environments_proxy() {
    let (port, connections) = crate::support::servers::refusing_proxy("127.0.0.2:0");
    let through = || connections.load(std::sync::atomic::Ordering::SeqCst);
    let source = tempfile::tempdir().unwrap();
    std::fs::create_dir(source.path().join("app")).unwrap();
    let file = release_file(
        source.path(),
        "file:///nowhere",
        "    path: app\n  content: {type: kustomize, kustomize: {allowRemoteBases: true}}\n",
    );
    let dir = ["--source-dir", source.path().to_str().unwrap()];
    let proxy = format!("http://127.0.0.2:{port}");
    for resource in [
        "http://files.example.invalid:9/app.yaml",
        "http://git.example.invalid:9/repo.git//base?ref=main",
    ] {
        std::fs::write(
            source.path().join("app/kustomization.yaml"),
            format!("resources:\n- {resource}\n"),
        )
        .unwrap();
        for variable in ["HTTP_PROXY", "http_proxy"] {
            let before = through();
            let (code, _, stderr) = render_through(Path::new(&file), &dir, (variable, &proxy), "");
            assert_eq!(code, 4, "{resource} {variable}: {stderr}");
            assert!(stderr.contains("403"), "{resource} {variable}: {stderr}");
            assert!(through() > before, "{resource} not through {variable}");
        }
        let before = through();
        let (code, _, stderr) = render_through(
            Path::new(&file),
            &dir,
            ("HTTP_PROXY", &proxy),
            ".example.invalid",
        );
        assert_eq!(code, 4, "{resource}: {stderr}");
        assert!(!stderr.contains("403"), "{resource}: {stderr}");
        assert_eq!(through(), before, "{resource} through the proxy");
        // A proxy with credentials and a path (Go passes over the path, curl refuses it and
        // quotes the whole value): given as scheme, user and host, and never shown.
        let before = through();
        let with_path = format!("http://user:s3cret@127.0.0.2:{port}/path");
        let (code, _, stderr) =
            render_through(Path::new(&file), &dir, ("HTTP_PROXY", &with_path), "");
        assert_eq!(code, 4, "{resource}: {stderr}");
        assert!(stderr.contains("403"), "{resource}: {stderr}");
        assert!(!stderr.contains("s3cret"), "{resource}: {stderr}");
        assert!(through() > before, "{resource} not through the proxy");
    }
    // The git kustomize runs goes direct where Go would: loopback (curl proxied it), and hosts
    // NO_PROXY names as `*.domain` or `host:port` (entries curl took for no host's).
    let write = |resource: &str| {
        std::fs::write(
            source.path().join("app/kustomization.yaml"),
            format!("resources:\n- {resource}\n"),
        )
        .unwrap()
    };
    for (resource, no_proxy) in [
        ("http://127.0.0.1:9/repo.git//base?ref=main", ""),
        (
            "http://git.example.invalid:9/repo.git//base?ref=main",
            "*.example.invalid",
        ),
        (
            "http://git.example.invalid:9/repo.git//base?ref=main",
            "git.example.invalid:9",
        ),
    ] {
        write(resource);
        let before = through();
        let (code, _, stderr) =
            render_through(Path::new(&file), &dir, ("HTTP_PROXY", &proxy), no_proxy);
        assert_eq!(code, 4, "{resource} {no_proxy}: {stderr}");
        assert_eq!(
            through(),
            before,
            "{resource} {no_proxy}: through the proxy"
        );
    }
    // https through HTTPS_PROXY (a CONNECT the proxy refuses).
    write("https://git.example.invalid:9/repo.git//base?ref=main");
    let before = through();
    let (code, _, stderr) = render_through(Path::new(&file), &dir, ("HTTPS_PROXY", &proxy), "");
    assert_eq!(code, 4, "{stderr}");
    assert!(stderr.contains("403"), "{stderr}");
    assert!(through() > before, "not through HTTPS_PROXY");
    // A proxy no tool could read is refused before kustomize runs, by its name alone.
    let (code, _, stderr) = render_through(
        Path::new(&file),
        &dir,
        ("http_proxy", "http://user:s3cret%0A@127.0.0.2:1"),
        "",
    );
    assert_eq!(code, 4, "{stderr}");
    assert_eq!(
        stderr.trim_end(),
        "error: render Release apps/web (step Rendering, reason DeployFailed): kustomize cannot be given convoy's proxy: http_proxy does not parse as a proxy URL (scheme://[user:password@]host:port)"
    );
}

/// helm fetches an allowed values schema through the proxy of convoy's environment, with the
/// proxy's credentials never shown, and direct where `NO_PROXY` names the host.
#[test]
fn helm_fetches_allowed_values_schemas_through_the_environments_proxy() {
    let (port, connections) = crate::support::servers::refusing_proxy("127.0.0.2:0");
    let through = || connections.load(std::sync::atomic::Ordering::SeqCst);
    let prefix = "https://schemas.example.invalid:9/k8s/";
    let (source, file) = source_tree(
        &[
            (
                "chart/Chart.yaml",
                "apiVersion: v2\nname: web\nversion: 1.0.0\n".into(),
            ),
            (
                "chart/templates/cm.yaml",
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web}\n".into(),
            ),
            ("chart/values.yaml", "port: 80\n".into()),
            (
                "chart/values.schema.json",
                format!(r#"{{"properties": {{"port": {{"$ref": "{prefix}port.json"}}}}}}"#),
            ),
        ],
        "chart",
        "{type: helm}",
    );
    let args = [
        "--source-dir",
        source.path().to_str().unwrap(),
        "--allow-values-schema-ref",
        prefix,
    ];
    let proxy = format!("http://user:s3cret@127.0.0.2:{port}");
    let (code, _, stderr) = render_through(Path::new(&file), &args, ("HTTPS_PROXY", &proxy), "");
    assert_eq!(code, 4, "{stderr}");
    assert!(stderr.contains("port.json\": Forbidden"), "{stderr}");
    assert!(through() > 0, "not through the proxy: {stderr}");
    assert!(!stderr.contains("s3cret"), "{stderr}");
    let before = through();
    let (code, _, stderr) = render_through(
        Path::new(&file),
        &args,
        ("HTTPS_PROXY", &proxy),
        "schemas.example.invalid",
    );
    assert_eq!(code, 4, "{stderr}");
    assert_eq!(through(), before, "through the proxy: {stderr}");
}

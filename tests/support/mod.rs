//! Test support: a real Kubernetes control plane per test binary (or one named by
//! `CONVOY_TEST_KUBECONFIG`), a namespace per test, and helpers to run the `convoy` binary.
//!
//! The control plane comes from `scripts/testenv up --watch-pid <this process>`, whose
//! watchdog stops it when the test binary ends, however it ends (a panic, a SIGKILL). A
//! missing binary is a loud failure that says how to build it, never a skipped test.
#![allow(dead_code)]

pub mod fixture;
pub mod servers;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::PostParams;
use kube::{Api, Client};

/// The repository root.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The convoy binary under test.
pub fn convoy_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_convoy"))
}

/// The directory holding the test control plane's binaries (kubectl, helm, kustomize…).
pub fn testenv_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let out = Command::new(repo_root().join("scripts/testenv"))
            .arg("check")
            .output()
            .expect("cannot run scripts/testenv");
        assert!(
            out.status.success(),
            "the test control plane is not built: {}\nrun `scripts/testenv build` (cached under ~/.cache/convoy-testenv)",
            String::from_utf8_lossy(&out.stderr)
        );
        PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
    })
    .clone()
}

/// A running control plane.
pub struct ControlPlane {
    pub kubeconfig: PathBuf,
    pub dir: Option<PathBuf>,
    /// A test's own control plane goes down when the test drops it.
    stop_on_drop: bool,
    /// Components [`ControlPlane::restart`] started again (reaped when dropped).
    restarted: std::sync::Mutex<Vec<std::process::Child>>,
}

impl ControlPlane {
    /// A control plane of one test's own, with convoy's CRDs: for tests that stop, hang or
    /// restart its parts. It goes down when dropped (and with the test binary, whatever
    /// happens).
    pub fn own(name: &str, flags: &[&str]) -> Self {
        let plane = Self::own_bare(name, flags);
        install_crds(&plane.kubeconfig);
        plane
    }

    /// [`ControlPlane::own`] without convoy's CRDs or namespace: a cluster convoy was never
    /// installed in.
    pub fn own_bare(name: &str, flags: &[&str]) -> Self {
        let mut plane = start_control_plane(name, flags);
        plane.stop_on_drop = true;
        plane
    }

    /// The pid of a component (`etcd`, `kube-apiserver`, …): the latest one started.
    pub fn pid(&self, component: &str) -> u32 {
        let dir = self
            .dir
            .as_ref()
            .expect("a control plane this binary started");
        let pids = std::fs::read_to_string(dir.join("pids")).expect("read the pids file");
        pids.lines()
            .filter_map(|l| l.split_once(' '))
            .filter(|(_, name)| *name == component)
            .filter_map(|(pid, _)| pid.parse().ok())
            .next_back()
            .unwrap_or_else(|| panic!("no {component} in {}", dir.display()))
    }

    /// Send `signal` (`STOP`, `CONT`, …) to a component.
    pub fn signal(&self, component: &str, signal: &str) {
        let pid = self.pid(component);
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid.to_string())
            .status()
            .expect("cannot run kill");
        assert!(status.success(), "kill -{signal} {component} ({pid})");
    }

    /// Kill a component (SIGKILL) and start it again with the same command line, waiting
    /// `down` in between.
    pub fn restart(&self, component: &str, down: Duration) {
        let dir = self
            .dir
            .as_ref()
            .expect("a control plane this binary started");
        let pid = self.pid(component);
        let argv: Vec<String> = std::fs::read(format!("/proc/{pid}/cmdline"))
            .expect("read the command line")
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let _ = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
        eventually_sync(
            &format!("{component} to exit"),
            Duration::from_secs(10),
            || {
                let state =
                    std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
                // Gone, or a zombie of the shell that started it.
                (state.is_empty() || state.split_whitespace().nth(2) == Some("Z")).then_some(())
            },
        );
        std::thread::sleep(down);
        let log = std::fs::OpenOptions::new()
            .append(true)
            .open(dir.join("logs").join(format!("{component}.log")))
            .expect("open the component's log");
        // setsid, as testenv starts it: its own process group, which `testenv down` stops.
        let child = Command::new("setsid")
            .args(&argv)
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("restart the component");
        let mut pids = std::fs::OpenOptions::new()
            .append(true)
            .open(dir.join("pids"))
            .expect("open the pids file");
        use std::io::Write;
        writeln!(pids, "{} {component}", child.id()).expect("record the pid");
        self.restarted.lock().unwrap().push(child);
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        if let (true, Some(dir)) = (self.stop_on_drop, &self.dir) {
            let _ = Command::new(repo_root().join("scripts/testenv"))
                .arg("down")
                .arg("--dir")
                .arg(dir)
                .output();
        }
        for mut child in self.restarted.lock().unwrap().drain(..) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The control plane of this test binary: started on first use, with convoy's CRDs installed.
pub fn control_plane() -> &'static ControlPlane {
    static PLANE: OnceLock<ControlPlane> = OnceLock::new();
    PLANE.get_or_init(|| {
        if let Some(path) = std::env::var_os("CONVOY_TEST_KUBECONFIG") {
            let plane = ControlPlane {
                kubeconfig: PathBuf::from(path),
                dir: None,
                stop_on_drop: false,
                restarted: Default::default(),
            };
            install_crds(&plane.kubeconfig);
            return plane;
        }
        let plane = start_control_plane("main", &[]);
        install_crds(&plane.kubeconfig);
        plane
    })
}

/// A second API server that stands in for a remote target Cluster (no kwok: objects only).
pub fn remote_control_plane() -> &'static ControlPlane {
    static PLANE: OnceLock<ControlPlane> = OnceLock::new();
    PLANE.get_or_init(|| start_control_plane("remote", &["--no-kwok"]))
}

/// An API server with no controllers at all: objects keep whatever status a test gives them.
pub fn still_control_plane() -> &'static ControlPlane {
    static PLANE: OnceLock<ControlPlane> = OnceLock::new();
    PLANE.get_or_init(|| start_control_plane("still", &["--no-controllers"]))
}

fn start_control_plane(name: &str, flags: &[&str]) -> ControlPlane {
    testenv_bin();
    let dir = std::env::temp_dir().join(format!("convoy-test-{}-{}", std::process::id(), name));
    let _ = std::fs::remove_dir_all(&dir);
    let mut cmd = Command::new(repo_root().join("scripts/testenv"));
    cmd.arg("up")
        .arg("--dir")
        .arg(&dir)
        .arg("--watch-pid")
        .arg(std::process::id().to_string())
        .arg("--name")
        .arg(name);
    cmd.args(flags);
    let out = cmd.output().expect("cannot run scripts/testenv up");
    assert!(
        out.status.success(),
        "scripts/testenv up failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    ControlPlane {
        kubeconfig: dir.join("admin.kubeconfig"),
        dir: Some(dir),
        stop_on_drop: false,
        restarted: Default::default(),
    }
}

fn install_crds(kubeconfig: &Path) {
    let out = Command::new(convoy_bin())
        .args(["install", "--crds-only", "--kubeconfig"])
        .arg(kubeconfig)
        .output()
        .expect("cannot run convoy");
    assert!(
        out.status.success(),
        "convoy install --crds-only failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The render store's default namespace (`convoy install` creates it with the daemon).
    let out = Command::new(testenv_bin().join("kubectl"))
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["create", "namespace", STORE_NAMESPACE])
        .output()
        .expect("cannot run kubectl");
    assert!(
        out.status.success() || String::from_utf8_lossy(&out.stderr).contains("AlreadyExists"),
        "cannot create namespace {STORE_NAMESPACE}:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Where the Kubernetes render store keeps its Secrets by default.
pub const STORE_NAMESPACE: &str = "convoy-system";

/// A client for a kubeconfig file.
pub async fn client_for(kubeconfig: &Path) -> Client {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).expect("read kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("kubeconfig");
    Client::try_from(config).expect("client")
}

/// What a test gets: a client, the kubeconfig path and a namespace of its own.
pub struct TestEnv {
    pub client: Client,
    pub kubeconfig: PathBuf,
    pub namespace: String,
}

impl TestEnv {
    /// A fresh namespace on this binary's control plane. `name` becomes part of it, so a
    /// failing test's objects are easy to find.
    pub async fn new(name: &str) -> Self {
        Self::on(control_plane(), name).await
    }

    /// A fresh namespace on the control plane without controllers, with convoy's CRDs: for
    /// benchmarks that compare clients, where controllers reacting to the first client's
    /// objects would still be writing while the second one runs.
    pub async fn without_controllers(name: &str) -> Self {
        static CRDS: OnceLock<()> = OnceLock::new();
        let plane = still_control_plane();
        CRDS.get_or_init(|| install_crds(&plane.kubeconfig));
        Self::on(plane, name).await
    }

    /// A fresh namespace on `plane`.
    pub async fn on(plane: &ControlPlane, name: &str) -> Self {
        let client = client_for(&plane.kubeconfig).await;
        let namespace = unique_namespace(&client, name).await;
        Self {
            client,
            kubeconfig: plane.kubeconfig.clone(),
            namespace,
        }
    }

    /// Run `kubectl` against this control plane.
    pub fn kubectl(&self, args: &[&str]) -> Output {
        Command::new(testenv_bin().join("kubectl"))
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .output()
            .expect("cannot run kubectl")
    }

    /// Run `kubectl` against this control plane; it must succeed.
    pub fn kubectl_ok(&self, args: &[&str]) {
        let out = self.kubectl(args);
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// `kubectl apply ARGS -f FILE` of `text` (YAML or JSON) through a temporary file; the apply
    /// must succeed.
    pub fn kubectl_apply_text(&self, text: &str, args: &[&str]) {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), text).unwrap();
        let mut all = vec!["apply"];
        all.extend_from_slice(args);
        all.extend(["-f", file.path().to_str().unwrap()]);
        let out = self.kubectl(&all);
        assert!(
            out.status.success(),
            "kubectl {all:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// A kubeconfig for ServiceAccount `name` of `namespace` on this control plane (a token
    /// valid for an hour): to run a client with exactly that account's rights.
    pub fn service_account_kubeconfig(
        &self,
        namespace: &str,
        name: &str,
    ) -> tempfile::NamedTempFile {
        let token = self.kubectl(&["create", "token", name, "-n", namespace, "--duration", "1h"]);
        assert!(
            token.status.success(),
            "{}",
            String::from_utf8_lossy(&token.stderr)
        );
        let token = String::from_utf8_lossy(&token.stdout).trim().to_string();
        let admin = std::fs::read_to_string(&self.kubeconfig).unwrap();
        let field = |key: &str| {
            admin
                .lines()
                .find_map(|l| l.trim().strip_prefix(key))
                .unwrap()
                .to_string()
        };
        let (server, ca) = (field("server: "), field("certificate-authority-data: "));
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(
            file.path(),
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\n\
users:\n- name: {name}\n  user:\n    token: {token}\ncontexts:\n- name: c\n  context: {{cluster: c, user: {name}}}\ncurrent-context: c\n"
            ),
        )
        .unwrap();
        file
    }

    /// Run the convoy binary against this control plane, in this test's namespace.
    pub fn convoy(&self, args: &[&str]) -> Output {
        Command::new(convoy_bin())
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("-n")
            .arg(&self.namespace)
            .args(args)
            .env("PATH", path_with_testenv())
            .env("NO_COLOR", "1")
            .output()
            .expect("cannot run convoy")
    }
}

/// Create a namespace named after the test with a unique suffix.
pub async fn unique_namespace(client: &Client, name: &str) -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut base: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    base.truncate(40);
    let namespace = format!(
        "{}-{}-{}",
        base.trim_matches('-'),
        std::process::id() % 100_000,
        n
    );
    let api: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(serde_json::json!({
        "metadata": {"name": namespace, "labels": {"convoy.kumodo.io/test": "true"}}
    }))
    .expect("namespace");
    api.create(&PostParams::default(), &ns)
        .await
        .expect("create namespace");
    namespace
}

/// PATH with the testenv binaries (helm, kustomize, kubectl) first.
pub fn path_with_testenv() -> String {
    let old = std::env::var("PATH").unwrap_or_default();
    format!("{}:{old}", testenv_bin().display())
}

/// Poll `check` until it returns `Some`, or fail after `timeout` naming `what`.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Poll `check` (a blocking one) until it returns `Some`, or fail after `timeout`.
pub fn eventually_sync<T>(
    what: &str,
    timeout: Duration,
    mut check: impl FnMut() -> Option<T>,
) -> T {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The field managers that own `path` (a `managedFields` fieldsV1 path such as
/// `["f:status", "f:conditions", "k:{\"type\":\"Applied\"}"]`) of an object.
pub fn owners_of(object: &serde_json::Value, path: &[&str]) -> Vec<String> {
    let mut owners = Vec::new();
    for entry in object["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let mut node = &entry["fieldsV1"];
        let mut found = true;
        for segment in path {
            match node.get(*segment) {
                Some(next) => node = next,
                None => {
                    found = false;
                    break;
                }
            }
        }
        if found {
            owners.push(entry["manager"].as_str().unwrap_or_default().to_string());
        }
    }
    owners.sort();
    owners.dedup();
    owners
}

/// A kubeconfig that points at a port where nothing listens.
pub fn unreachable_kubeconfig(dir: &Path) -> PathBuf {
    let path = dir.join("unreachable.kubeconfig");
    std::fs::write(
        &path,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: gone\n  cluster:\n    server: https://127.0.0.1:9\n\
users:\n- name: u\n  user:\n    token: t\ncontexts:\n- name: gone\n  context: {cluster: gone, user: u}\n\
current-context: gone\n",
    )
    .expect("write kubeconfig");
    path
}

/// A client for `kubeconfig` that writes down each request it sends (`METHOD path?query`): to
/// check which requests a read makes against the real API server.
pub async fn recording_client(kubeconfig: &Path) -> (Client, Arc<std::sync::Mutex<Vec<String>>>) {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).expect("read kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("kubeconfig");
    let log = Arc::new(std::sync::Mutex::new(Vec::new()));
    let client = kube::client::ClientBuilder::try_from(config)
        .expect("client")
        .with_layer(&Recorder(log.clone()))
        .build();
    (client, log)
}

/// The layer behind [`recording_client`].
#[derive(Clone)]
struct Recorder(Arc<std::sync::Mutex<Vec<String>>>);

impl<S> tower::Layer<S> for Recorder {
    type Service = Recording<S>;
    fn layer(&self, inner: S) -> Recording<S> {
        Recording {
            inner,
            log: self.0.clone(),
        }
    }
}

#[derive(Clone)]
struct Recording<S> {
    inner: S,
    log: Arc<std::sync::Mutex<Vec<String>>>,
}

impl<S, B> tower::Service<http::Request<B>> for Recording<S>
where
    S: tower::Service<http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        self.log
            .lock()
            .unwrap()
            .push(format!("{} {}", request.method(), request.uri()));
        self.inner.call(request)
    }
}

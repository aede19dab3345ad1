//! Benchmark: `convoy daemon` against Flux (source-controller + kustomize-controller v1.9.6,
//! `scripts/peers`) on the same work: 1,000 apps × 5 objects (three ConfigMaps and a Service
//! in wave 0, a one-replica Deployment whose pod kwok readies in wave 1) from one Git
//! repository that one smart-HTTP Git server serves to both. Flux gets a GitRepository and
//! 1,000 Kustomizations (`wait: true`, `prune: true`); convoy a GitRepository and 1,000
//! Releases with health assessment (the default rules). Each tool runs on a fresh control
//! plane of its own (kwok), one after the other, Flux first.
//!
//! Printed side by side: the time until all are Ready (Flux) / Applied and Healthy (convoy),
//! the controllers' CPU seconds and peak RSS, the API requests by verb that the API server
//! counted (`apiserver_request_total`) for the apps' objects and each tool's own kinds, a
//! minute of steady state, and then a commit that changes 10 apps: the time until each of
//! those is applied and healthy again (p50, max), with both tools' intervals set equal and
//! both sources told to look now. Goals (issue 21): convoy converges ≥ 2× faster than Flux
//! with ≤ half its memory and fewer API writes, and applies a commit at least as fast.
//!
//! Fairness, as chosen here (the output says it too):
//! * Flux's client-side throttling: its controllers turn it off themselves on an API server
//!   with API Priority and Fairness (the default in real clusters); the test API server runs
//!   without APF, where they would throttle themselves to 50 QPS / burst 300. They get
//!   `--kube-api-qps=-1 --kube-api-burst=-1` (what they set with APF on) unless
//!   `CONVOY_BENCH_FLUX_QPS` / `CONVOY_BENCH_FLUX_BURST` say otherwise. convoy has no client
//!   throttle.
//! * Intervals: both GitRepositories poll every `CONVOY_BENCH_SOURCE_INTERVAL` (1m), every
//!   Kustomization and Release has `CONVOY_BENCH_APP_INTERVAL` (10m) as its interval, and the
//!   health deadline / Kustomization timeout is 10m for both.
//! * The commit: after the push each tool's GitRepository is told to reconcile now: Flux's by
//!   the `reconcile.fluxcd.io/requestedAt` annotation (what `flux reconcile source git` does),
//!   convoy's (which has no such annotation: its source controller reconciles on a spec change)
//!   by writing its `spec.interval` in another spelling of the same duration. Both then wake
//!   every app of the repository (all 1,000), as each does for a new revision.
//!   `CONVOY_BENCH_NUDGE=0` leaves both to their poll.
//! * Done means, for Flux, Ready (set after the health check of `wait: true`) with the
//!   revision in `lastAppliedRevision`; for convoy, Applied and Healthy (reason Healthy) with
//!   the revision in `lastSuccessful` and nothing newer attempted. Each app counts once it was
//!   seen done (Flux sets Ready=Unknown while it reconciles a Kustomization again, and at 1,000
//!   apps on two cores its queue never drains, so all may never be Ready at one moment; convoy's
//!   apps count the same way). After the commit convoy also needs an inventory whose every
//!   entry was assessed Healthy for the new render (Healthy can still be the previous
//!   render's verdict for a moment). When convoy's `lastHealthy` caught up is
//!   printed apart: it can lag Healthy by up to an interval (a controller pass that ran before
//!   the Healthy condition was written is not repeated).
//! * Defaults otherwise: kustomize-controller `--concurrent=4 --concurrent-ssa=4`,
//!   source-controller `--concurrent=2`; convoy daemon `--workers 4 --concurrency 16`.
//!
//! `cargo bench --bench daemon_vs_flux` (about 1.5 hours at 1,000 apps on two cores);
//! `CONVOY_BENCH_APPS` sets the count, `CONVOY_BENCH_COMMIT_APPS` the apps the commit changes,
//! `CONVOY_BENCH_STEADY` the steady-state window (1m), `CONVOY_BENCH_DEADLINE` how long
//! converging may take (2h). Under `cargo test` (no `--bench` flag) it does nothing.

#![allow(clippy::unwrap_used)]

#[path = "../tests/support/mod.rs"]
mod support;

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{
    Proc, RequestCounts, RequestKey, Tracker, condition_true, metric_by, metric_sum, metrics,
    quantile, resource,
};
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;
use serde_json::{Value, json};
use support::servers::{GitRepo, free_port, git_output, run_git};
use support::{ControlPlane, client_for, convoy_bin, path_with_testenv, testenv_bin};

/// Where the GitRepository and the apps (Kustomizations, Releases) live.
const HOME: &str = "bench";
/// Where the apps' objects go (`targetNamespace`): beside the apps, because convoy refuses a
/// target namespace other than the Release's own unless started with
/// `--allow-cross-namespace-refs` (its default for tenants), and both tools get the same.
const TARGET: &str = HOME;
/// How long the steady-state window waits for the work queues to drain.
const DRAIN_WAIT: Duration = Duration::from_secs(180);

struct Settings {
    apps: usize,
    commit_apps: usize,
    source_interval: Duration,
    app_interval: Duration,
    steady: Duration,
    deadline: Duration,
    flux_qps: String,
    flux_burst: String,
    nudge: bool,
}

impl Settings {
    fn from_env() -> Self {
        let apps = common::env_number("CONVOY_BENCH_APPS", 1000usize);
        Self {
            apps,
            commit_apps: common::env_number("CONVOY_BENCH_COMMIT_APPS", 10usize).min(apps),
            source_interval: common::env_duration("CONVOY_BENCH_SOURCE_INTERVAL", "1m"),
            app_interval: common::env_duration("CONVOY_BENCH_APP_INTERVAL", "10m"),
            steady: common::env_duration("CONVOY_BENCH_STEADY", "1m"),
            deadline: common::env_duration("CONVOY_BENCH_DEADLINE", "2h"),
            flux_qps: std::env::var("CONVOY_BENCH_FLUX_QPS").unwrap_or_else(|_| "-1".into()),
            flux_burst: std::env::var("CONVOY_BENCH_FLUX_BURST").unwrap_or_else(|_| "-1".into()),
            nudge: std::env::var("CONVOY_BENCH_NUDGE").as_deref() != Ok("0"),
        }
    }

    /// The apps the commit changes, spread over the range.
    fn changed(&self) -> Vec<usize> {
        (0..self.commit_apps)
            .map(|k| k * self.apps / self.commit_apps)
            .collect()
    }
}

/// A duration as a Go duration in seconds (`60s`).
fn go_secs(d: Duration) -> String {
    format!("{}s", d.as_secs())
}

/// The files of app `i`; `version` 2 is the commit (a ConfigMap value and the Deployment's
/// pod template change, so the commit is a rollout that health waits for).
fn objects(i: usize, version: u32) -> Vec<(String, String)> {
    let suffix = if version > 1 { "-v2" } else { "" };
    let mut files: Vec<(String, String)> = ["a", "b", "c"]
        .iter()
        .map(|c| {
            let value = if *c == "a" {
                format!("{i}-{c}{suffix}")
            } else {
                format!("{i}-{c}")
            };
            (
                format!("rel-{i:04}/cm-{c}.yaml"),
                format!(
                    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: r{i}-{c}\ndata:\n  value: \"{value}\"\n"
                ),
            )
        })
        .collect();
    files.push((
        format!("rel-{i:04}/svc.yaml"),
        format!(
            "apiVersion: v1\nkind: Service\nmetadata:\n  name: r{i}\nspec:\n  selector: {{app: r{i}}}\n  ports:\n  - port: 80\n"
        ),
    ));
    files.push((
        format!("rel-{i:04}/deploy.yaml"),
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: r{i}\n  annotations:\n    convoy.kumodo.io/sync-wave: \"1\"\nspec:\n  replicas: 1\n  selector:\n    matchLabels: {{app: r{i}}}\n  template:\n    metadata:\n      labels: {{app: r{i}}}\n      annotations: {{bench/version: \"{version}\"}}\n    spec:\n      containers:\n      - name: app\n        image: nginx:1.27\n"
        ),
    ));
    files
}

/// The Git repository both tools read, and the server that serves it over smart HTTP.
struct Repo {
    git: GitRepo,
    initial: String,
    url: String,
    server: Proc,
}

impl Repo {
    fn new(s: &Settings, peers: &Path, logs: &Path) -> Self {
        let git = GitRepo::new();
        let files: Vec<(String, String)> = (0..s.apps).flat_map(|i| objects(i, 1)).collect();
        let refs: Vec<(&str, &str)> = files
            .iter()
            .map(|(p, c)| (p.as_str(), c.as_str()))
            .collect();
        let initial = git.commit(&refs, "bench: initial");
        let addr_file = logs.join("gitserver.addr");
        let mut cmd = Command::new(peers.join("gitserver"));
        cmd.arg("--root")
            .arg(git.base())
            .args(["--listen", "127.0.0.1:0", "--addr-file"])
            .arg(&addr_file)
            .arg("--quiet");
        let server = Proc::spawn("gitserver", cmd, &logs.join("gitserver.log"));
        let addr = support::eventually_sync("the Git server", Duration::from_secs(20), || {
            std::fs::read_to_string(&addr_file)
                .ok()
                .filter(|a| !a.trim().is_empty())
        });
        let url = format!("http://{}/repo.git", addr.trim());
        Self {
            git,
            initial,
            url,
            server,
        }
    }

    /// Back to the initial commit (force-pushed), so the next tool starts from the same tree.
    fn reset(&self) {
        let work = self.git.work();
        run_git(&work, &["reset", "--quiet", "--hard", &self.initial]);
        run_git(&work, &["push", "--quiet", "--force", "origin", "main"]);
    }

    /// The commit: version 2 of `apps`. Returns its id.
    fn commit(&self, apps: &[usize]) -> String {
        let files: Vec<(String, String)> = apps.iter().flat_map(|i| objects(*i, 2)).collect();
        let refs: Vec<(&str, &str)> = files
            .iter()
            .map(|(p, c)| (p.as_str(), c.as_str()))
            .collect();
        self.git.commit(&refs, "bench: change");
        git_output(&self.git.work(), &["rev-parse", "HEAD"])
    }

    fn cpu(&self) -> f64 {
        common::cpu_seconds(self.server.pid()) + common::children_cpu_seconds(self.server.pid())
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Tool {
    Flux,
    Convoy,
}

impl Tool {
    fn name(self) -> &'static str {
        match self {
            Tool::Flux => "Flux",
            Tool::Convoy => "convoy",
        }
    }

    fn app_resource(self) -> ApiResource {
        match self {
            Tool::Flux => resource(
                "kustomize.toolkit.fluxcd.io",
                "v1",
                "Kustomization",
                "kustomizations",
            ),
            Tool::Convoy => resource("core.convoy.kumodo.io", "v1alpha1", "Release", "releases"),
        }
    }

    fn source_resource(self) -> ApiResource {
        match self {
            Tool::Flux => resource(
                "source.toolkit.fluxcd.io",
                "v1",
                "GitRepository",
                "gitrepositories",
            ),
            Tool::Convoy => resource(
                "source.convoy.kumodo.io",
                "v1alpha1",
                "GitRepository",
                "gitrepositories",
            ),
        }
    }

    /// Requests to the tool's own kinds: its CRDs, and for convoy the render store's Secrets
    /// (nothing else here writes Secrets).
    fn own(self, k: &RequestKey) -> bool {
        match self {
            Tool::Flux => k.group.ends_with(".toolkit.fluxcd.io"),
            Tool::Convoy => k.group.ends_with("convoy.kumodo.io") || k.resource == "secrets",
        }
    }

    fn source_object(self, s: &Settings, url: &str) -> Value {
        let r = self.source_resource();
        json!({
            "apiVersion": r.api_version, "kind": r.kind,
            "metadata": {"name": "repo", "namespace": HOME},
            "spec": {"url": url, "ref": {"branch": "main"}, "interval": go_secs(s.source_interval)},
        })
    }

    fn app_object(self, s: &Settings, i: usize) -> Value {
        let r = self.app_resource();
        let interval = go_secs(s.app_interval);
        let spec = match self {
            Tool::Flux => json!({
                "interval": interval,
                "sourceRef": {"kind": "GitRepository", "name": "repo"},
                "path": format!("./rel-{i:04}"),
                "prune": true,
                "wait": true,
                "timeout": "10m",
                "targetNamespace": TARGET,
            }),
            Tool::Convoy => json!({
                "source": {"kind": "GitRepository", "name": "repo", "path": format!("rel-{i:04}")},
                "targetNamespace": TARGET,
                "syncPolicy": {"interval": interval},
                "healthAssessment": {
                    "globalRuleSetSelector": {"matchLabels": {"health.convoy.kumodo.io/defaults": "true"}},
                    "deadline": "10m",
                },
            }),
        };
        json!({
            "apiVersion": r.api_version, "kind": r.kind,
            "metadata": {"name": format!("rel-{i:04}"), "namespace": HOME},
            "spec": spec,
        })
    }

    /// An app applied and healthy at commit `sha`: Flux's Ready (set after its health check)
    /// with that revision applied; convoy's Applied and Healthy (the verdict on the render that
    /// runs) with that revision applied and nothing newer attempted. After a commit convoy's
    /// Healthy may still be the previous render's for a moment, so the commit also waits for
    /// [`Tool::assessed`] on the inventory.
    fn app_done(self, sha: &str) -> common::Predicate {
        let sha = sha.to_string();
        match self {
            Tool::Flux => Arc::new(move |o: &Value| {
                condition_true(o, "Ready")
                    && o["status"]["lastAppliedRevision"]
                        .as_str()
                        .is_some_and(|r| r.contains(&sha))
            }),
            Tool::Convoy => Arc::new(move |o: &Value| {
                let status = &o["status"];
                condition_true(o, "Applied")
                    && common::condition(o, "Healthy")
                        .is_some_and(|c| c["status"] == "True" && c["reason"] == "Healthy")
                    && status["lastSuccessful"]["resolvedSource"]["revision"]
                        .as_str()
                        .is_some_and(|r| r.contains(&sha))
                    && status["lastAttempted"]["renderRef"] == status["lastSuccessful"]["renderRef"]
            }),
        }
    }

    /// A convoy ReleaseInventory whose every entry carries one render, not one of `old`, and
    /// was assessed Healthy for it: what the controller itself requires before it calls a
    /// render healthy (`inventory_healthy_for`).
    fn assessed(old: BTreeSet<String>) -> common::Predicate {
        Arc::new(move |o: &Value| {
            let Some(entries) = inventory_entries(o) else {
                return false;
            };
            let Some(render) = entries.first().and_then(|e| e["renderRef"].as_str()) else {
                return false;
            };
            !old.contains(render)
                && entries.iter().all(|e| {
                    e["renderRef"] == render
                        && e["assessedRenderRef"] == render
                        && e["state"] == "Healthy"
                })
        })
    }

    /// The renders the inventories hold now.
    fn renders(inventories: &[Value]) -> BTreeSet<String> {
        inventories
            .iter()
            .flat_map(|o| {
                o["spec"]["inventory"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            })
            .filter_map(|e| e["renderRef"].as_str().map(str::to_string))
            .collect()
    }

    /// The GitRepository's artifact is at `sha`.
    fn source_at(sha: &str) -> common::Predicate {
        let sha = sha.to_string();
        Arc::new(move |o: &Value| {
            o["status"]["artifact"]["revision"]
                .as_str()
                .is_some_and(|r| r.contains(&sha))
        })
    }
}

/// A ReleaseInventory's entries (`inventory`, beside `metadata`: the kind has no spec).
fn inventory_entries(o: &Value) -> Option<&Vec<Value>> {
    o["inventory"].as_array()
}

/// The processes of one tool's run.
struct Controllers {
    procs: Vec<(String, Proc, u16)>,
}

impl Controllers {
    /// Sum of a counter over the processes' /metrics pages.
    fn metric(&self, name: &str, filter: &[(&str, &str)]) -> f64 {
        self.procs
            .iter()
            .map(|(_, _, port)| metric_sum(&metrics(*port), name, filter))
            .sum()
    }

    fn cpu(&self) -> Vec<f64> {
        self.procs
            .iter()
            .map(|(_, p, _)| common::cpu_seconds(p.pid()) + common::children_cpu_seconds(p.pid()))
            .collect()
    }

    fn peak_rss(&self) -> Vec<f64> {
        self.procs
            .iter()
            .map(|(_, p, _)| common::memory(p.pid(), "VmHWM:"))
            .collect()
    }

    fn assert_running(&mut self) {
        for (_, p, _) in &mut self.procs {
            p.assert_running();
        }
    }

    /// Items waiting in the work queues (controller-runtime's `workqueue_depth`, convoy's
    /// `convoy_queue_depth`).
    fn queued(&self, tool: Tool) -> f64 {
        match tool {
            Tool::Flux => self.metric("workqueue_depth", &[]),
            Tool::Convoy => self.metric("convoy_queue_depth", &[]),
        }
    }
}

fn start_flux(s: &Settings, peers: &Path, kubeconfig: &Path, dir: &Path) -> Controllers {
    let mut procs = Vec::new();
    let storage = free_port();
    for name in ["source-controller", "kustomize-controller"] {
        let tmp = dir.join(format!("{name}-tmp"));
        std::fs::create_dir_all(&tmp).unwrap();
        let (metrics_port, health_port) = (free_port(), free_port());
        let mut cmd = Command::new(peers.join(name));
        cmd.env("KUBECONFIG", kubeconfig)
            .env("TMPDIR", &tmp)
            .arg(format!("--metrics-addr=127.0.0.1:{metrics_port}"))
            .arg(format!("--health-addr=127.0.0.1:{health_port}"))
            .args([
                "--events-addr=",
                "--enable-leader-election=false",
                "--watch-all-namespaces=true",
                "--log-level=info",
                "--log-encoding=json",
            ])
            .arg(format!("--kube-api-qps={}", s.flux_qps))
            .arg(format!("--kube-api-burst={}", s.flux_burst));
        if name == "source-controller" {
            let store = dir.join("sc-storage");
            std::fs::create_dir_all(&store).unwrap();
            cmd.arg(format!("--storage-path={}", store.display()))
                .arg(format!("--storage-addr=127.0.0.1:{storage}"))
                .arg(format!("--storage-adv-addr=127.0.0.1:{storage}"))
                .arg("--concurrent=2");
        } else {
            cmd.args(["--concurrent=4", "--concurrent-ssa=4"]);
        }
        let p = Proc::spawn(name, cmd, &dir.join(format!("{name}.log")));
        common::wait_http_ok(
            name,
            &format!("http://127.0.0.1:{health_port}/readyz"),
            Duration::from_secs(120),
        );
        procs.push((name.to_string(), p, metrics_port));
    }
    Controllers { procs }
}

fn start_convoy(kubeconfig: &Path, dir: &Path) -> Controllers {
    let port = free_port();
    let mut cmd = Command::new(convoy_bin());
    cmd.arg("--kubeconfig")
        .arg(kubeconfig)
        .args([
            "daemon",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--cache-dir",
        ])
        .arg(dir.join("cache"))
        .env("PATH", path_with_testenv());
    let p = Proc::spawn("convoy daemon", cmd, &dir.join("convoy-daemon.log"));
    common::wait_http_ok(
        "the convoy daemon",
        &format!("http://127.0.0.1:{port}/readyz"),
        Duration::from_secs(60),
    );
    Controllers {
        procs: vec![("convoy daemon".to_string(), p, port)],
    }
}

/// Enough kwok Nodes for every app's pod and a rollout's surge (each takes 1,000 pods).
async fn add_nodes(client: &Client, apps: usize) {
    let api: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    let wanted = (apps + 200).div_ceil(1000);
    for n in 1..wanted {
        let node = serde_json::from_value(json!({
            "metadata": {
                "name": format!("kwok-node-{n}"),
                "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
                "labels": {"kubernetes.io/hostname": format!("kwok-node-{n}"), "kubernetes.io/os": "linux",
                           "kubernetes.io/arch": "amd64", "type": "kwok"},
            },
            "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "pods": "1000"},
                       "capacity": {"cpu": "64", "memory": "256Gi", "pods": "1000"}},
        }))
        .unwrap();
        api.create(&PostParams::default(), &node).await.unwrap();
    }
}

async fn create_namespace(client: &Client) {
    let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let object = serde_json::from_value(json!({"metadata": {"name": HOME}})).unwrap();
    api.create(&PostParams::default(), &object).await.unwrap();
}

fn kubectl(kubeconfig: &Path, args: &[&str]) {
    let out = Command::new(testenv_bin().join("kubectl"))
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Everything one tool's run measured.
struct Run {
    tool: Tool,
    load_before: String,
    load_after: String,
    created: Duration,
    converged: Duration,
    /// Per process: name, CPU seconds until converged, CPU seconds over the whole run, peak RSS.
    processes: Vec<(String, f64, f64, f64)>,
    apiserver_cpu: f64,
    etcd_cpu: f64,
    git_cpu: f64,
    converge: RequestCounts,
    settle: Duration,
    /// The queue depth when the steady window began, if the queues never drained.
    undrained: Option<f64>,
    steady: RequestCounts,
    commit: RequestCounts,
    source_seen: Option<Duration>,
    applied: Vec<Duration>,
    on_cluster: Vec<Duration>,
    /// The tool's own count of its requests over the run, by method or verb.
    client_view: BTreeMap<String, f64>,
    /// Time spent in reconciles: (what, seconds, passes).
    passes: Vec<(String, f64, f64)>,
    /// convoy: when every Release's `lastHealthy` was the running render (from the start),
    /// and (caught up, all) before the commit.
    last_healthy: Option<(Option<Duration>, (usize, usize))>,
}

async fn run(tool: Tool, s: &Settings, repo: &Repo, peers: &Path, logs: &Path) -> Run {
    let dir = logs.join(tool.name().to_lowercase());
    std::fs::create_dir_all(&dir).unwrap();
    let plane = match tool {
        Tool::Flux => ControlPlane::own_bare(&format!("vs-{}", tool.name().to_lowercase()), &[]),
        Tool::Convoy => ControlPlane::own(&format!("vs-{}", tool.name().to_lowercase()), &[]),
    };
    let kubeconfig = plane.kubeconfig.clone();
    let client = client_for(&kubeconfig).await;
    add_nodes(&client, s.apps).await;
    create_namespace(&client).await;
    repo.reset();
    let mut controllers = match tool {
        Tool::Flux => {
            // The real directory: kubectl reads a symlink to one as a file.
            let crds = std::fs::canonicalize(peers.join("crds")).unwrap();
            kubectl(
                &kubeconfig,
                &["apply", "--server-side", "-f", crds.to_str().unwrap()],
            );
            kubectl(
                &kubeconfig,
                &[
                    "wait",
                    "--for",
                    "condition=Established",
                    "crd",
                    "--all",
                    "--timeout=60s",
                ],
            );
            start_flux(s, peers, &kubeconfig, &dir)
        }
        Tool::Convoy => {
            let conn = convoy::engine::connect::Connection::from_source(
                &convoy::engine::connect::KubeconfigSource {
                    path: Some(kubeconfig.clone()),
                    context: None,
                },
            )
            .await
            .unwrap();
            convoy::engine::install::install_default_rules(&conn)
                .await
                .unwrap();
            start_convoy(&kubeconfig, &dir)
        }
    };
    let apps = Tracker::start(client.clone(), &tool.app_resource(), Some(HOME));
    let source = Tracker::start(client.clone(), &tool.source_resource(), Some(HOME));
    apps.expect_once(tool.app_done(&repo.initial));
    // convoy: the inventories (for the commit), and when `lastHealthy` (the record of the last
    // render assessed healthy, which rollbacks go back to) caught up with the running render.
    let release_r = Tool::Convoy.app_resource();
    let inventory_r = resource(
        "core.convoy.kumodo.io",
        "v1alpha1",
        "ReleaseInventory",
        "releaseinventories",
    );
    let convoy_trackers = (tool == Tool::Convoy).then(|| {
        let inventories = Tracker::start(client.clone(), &inventory_r, Some(HOME));
        let last_healthy = Tracker::start(client.clone(), &release_r, Some(HOME));
        last_healthy.expect(Arc::new(|o: &Value| {
            let s = &o["status"];
            s["lastHealthy"]["renderRef"].is_string()
                && s["lastHealthy"]["renderRef"] == s["lastSuccessful"]["renderRef"]
        }));
        (inventories, last_healthy)
    });
    // Let the controllers settle after their start before the baseline is taken.
    tokio::time::sleep(Duration::from_secs(5)).await;

    let load_before = common::loadavg();
    let apiserver = plane.pid("kube-apiserver");
    let etcd = plane.pid("etcd");
    let cp_cpu = || (common::cpu_seconds(apiserver), common::cpu_seconds(etcd));
    let (api0, etcd0) = cp_cpu();
    let git0 = repo.cpu();
    let cpu0 = controllers.cpu();
    let counts0 = RequestCounts::scrape(&client).await;
    eprintln!(
        "daemon_vs_flux: {}: {} apps (load {load_before})",
        tool.name(),
        s.apps
    );

    let started = Instant::now();
    let create = |r: ApiResource, object: Value| {
        let client = client.clone();
        async move {
            let api: Api<DynamicObject> = Api::namespaced_with(client, HOME, &r);
            let object: DynamicObject = serde_json::from_value(object).unwrap();
            api.create(&PostParams::default(), &object).await.unwrap();
        }
    };
    create(tool.source_resource(), tool.source_object(s, &repo.url)).await;
    for i in 0..s.apps {
        create(tool.app_resource(), tool.app_object(s, i)).await;
    }
    let created = started.elapsed();
    let mut last_report = Instant::now();
    let converged_at = loop {
        if let Some(at) = apps.all_met(s.apps) {
            break at;
        }
        if last_report.elapsed() > Duration::from_secs(30) {
            let (done, seen) = apps.count();
            eprintln!(
                "  {}: {done}/{seen} done after {:.0?} (load {})",
                tool.name(),
                started.elapsed(),
                common::loadavg()
            );
            last_report = Instant::now();
            controllers.assert_running();
        }
        if started.elapsed() > s.deadline {
            let stuck = apps.unmet(3);
            let sample: Vec<String> = stuck
                .iter()
                .filter_map(|k| apps.get(k))
                .map(|o| o["status"].to_string())
                .collect();
            panic!(
                "{}: not all apps done within {:?} ({:?}); e.g. {stuck:?}: {sample:#?}; logs in {}",
                tool.name(),
                s.deadline,
                apps.count(),
                dir.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let converged = converged_at.duration_since(started);
    let cpu_converged = controllers.cpu();
    let (api1, etcd1) = cp_cpu();
    let git1 = repo.cpu();
    let counts1 = RequestCounts::scrape(&client).await;

    // Steady state: the work queues drain (or, if they never do within DRAIN_WAIT, as with
    // Flux at 1,000 apps on two cores, that is noted), 30 s pass, then one window is counted.
    let settle_start = Instant::now();
    let undrained = loop {
        let queued = controllers.queued(tool);
        if queued == 0.0 {
            break None;
        }
        if settle_start.elapsed() > DRAIN_WAIT {
            break Some(queued);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    tokio::time::sleep(Duration::from_secs(30)).await;
    let settle = settle_start.elapsed();
    let counts2 = RequestCounts::scrape(&client).await;
    tokio::time::sleep(s.steady).await;
    let counts3 = RequestCounts::scrape(&client).await;

    // How far convoy's lastHealthy had caught up before the commit.
    let last_healthy = convoy_trackers.as_ref().map(|(_, t)| {
        (
            t.all_met(s.apps).map(|at| at.duration_since(started)),
            t.count(),
        )
    });

    // The commit.
    let changed = s.changed();
    let config_maps = Tracker::start(
        client.clone(),
        &resource("", "v1", "ConfigMap", "configmaps"),
        Some(TARGET),
    );
    config_maps.expect(Arc::new(|o: &Value| {
        o["data"]["value"]
            .as_str()
            .is_some_and(|v| v.ends_with("-v2"))
    }));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let sha = repo.commit(&changed);
    let pushed = Instant::now();
    apps.expect_once(tool.app_done(&sha));
    source.expect(Tool::source_at(&sha));
    if let Some((inventories, _)) = &convoy_trackers {
        inventories.expect(Tool::assessed(Tool::renders(&inventories.all())));
    }
    if s.nudge {
        nudge(tool, &client, s).await;
    }
    let keys: Vec<String> = changed
        .iter()
        .map(|i| format!("{HOME}/rel-{i:04}"))
        .collect();
    let cm_keys: Vec<String> = changed.iter().map(|i| format!("{TARGET}/r{i}-a")).collect();
    let commit_deadline = s.app_interval * 2 + Duration::from_secs(1800);
    let applied_at = loop {
        let inventories = match &convoy_trackers {
            Some((inventories, _)) => inventories.met_at(&keys),
            None => Some(Vec::new()),
        };
        if let (Some(at), Some(inv)) = (apps.met_at(&keys), inventories) {
            // Both hold from the later of the two on.
            break at
                .iter()
                .enumerate()
                .map(|(n, t)| inv.get(n).map_or(*t, |i| (*t).max(*i)))
                .collect::<Vec<Instant>>();
        }
        assert!(
            pushed.elapsed() < commit_deadline,
            "{}: the commit was not applied to all {} apps within {commit_deadline:?}; logs in {}",
            tool.name(),
            keys.len(),
            dir.display()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let since_push = |at: Vec<Instant>| -> Vec<Duration> {
        at.into_iter().map(|t| t.duration_since(pushed)).collect()
    };
    let applied = since_push(applied_at);
    let on_cluster = since_push(config_maps.met_at(&cm_keys).unwrap_or_default());
    let source_seen = source
        .met_at(&[format!("{HOME}/repo")])
        .map(|t| t[0].duration_since(pushed));
    let counts4 = RequestCounts::scrape(&client).await;
    let load_after = common::loadavg();

    let cpu_end = controllers.cpu();
    let peaks = controllers.peak_rss();
    let processes = controllers
        .procs
        .iter()
        .enumerate()
        .map(|(n, (name, _, _))| {
            (
                name.clone(),
                cpu_converged[n] - cpu0[n],
                cpu_end[n] - cpu0[n],
                peaks[n],
            )
        })
        .collect();
    let (client_view, passes) = match tool {
        Tool::Flux => {
            let mut view = BTreeMap::new();
            let mut passes = Vec::new();
            for (name, _, port) in &controllers.procs {
                let text = metrics(*port);
                for (method, n) in metric_by(&text, "rest_client_requests_total", "method") {
                    *view.entry(method).or_insert(0.0) += n;
                }
                passes.push((
                    name.clone(),
                    metric_sum(&text, "controller_runtime_reconcile_time_seconds_sum", &[]),
                    metric_sum(
                        &text,
                        "controller_runtime_reconcile_time_seconds_count",
                        &[],
                    ),
                ));
            }
            (view, passes)
        }
        Tool::Convoy => {
            let text = metrics(controllers.procs[0].2);
            let view = metric_by(&text, "convoy_api_requests_total", "verb");
            let mut passes = Vec::new();
            for l in ["controller", "drift", "health", "git"] {
                passes.push((
                    format!("{l} loop"),
                    metric_sum(
                        &text,
                        "convoy_reconcile_duration_seconds_sum",
                        &[("loop", l)],
                    ),
                    metric_sum(
                        &text,
                        "convoy_reconcile_duration_seconds_count",
                        &[("loop", l)],
                    ),
                ));
            }
            for stage in ["render", "sync"] {
                passes.push((
                    format!("  stage {stage}"),
                    metric_sum(
                        &text,
                        "convoy_reconcile_stage_duration_seconds_sum",
                        &[("stage", stage)],
                    ),
                    metric_sum(
                        &text,
                        "convoy_reconcile_stage_duration_seconds_count",
                        &[("stage", stage)],
                    ),
                ));
            }
            (view, passes)
        }
    };
    drop(controllers);
    drop(plane);
    Run {
        tool,
        load_before,
        load_after,
        created,
        converged,
        processes,
        apiserver_cpu: api1 - api0,
        etcd_cpu: etcd1 - etcd0,
        git_cpu: git1 - git0,
        converge: counts1.since(&counts0),
        settle,
        undrained,
        steady: counts3.since(&counts2),
        commit: counts4.since(&counts3),
        source_seen,
        applied,
        on_cluster,
        client_view,
        passes,
        last_healthy,
    }
}

/// Tell the tool's GitRepository to look at the repository now.
async fn nudge(tool: Tool, client: &Client, s: &Settings) {
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), HOME, &tool.source_resource());
    let patch = match tool {
        // What `flux reconcile source git repo` does.
        Tool::Flux => json!({"metadata": {"annotations": {
            "reconcile.fluxcd.io/requestedAt": jiff::Timestamp::now().to_string()}}}),
        // The same duration spelt otherwise: a new generation, which the source controller
        // reconciles at once.
        Tool::Convoy => {
            json!({"spec": {"interval": format!("{}ms", s.source_interval.as_millis())}})
        }
    };
    api.patch("repo", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

/// Requests to the apps' objects: the ConfigMaps, Services and Deployments themselves (not
/// their status).
fn apps_objects(k: &RequestKey) -> bool {
    k.subresource.is_empty()
        && matches!(
            (k.group.as_str(), k.resource.as_str()),
            ("", "configmaps") | ("", "services") | ("apps", "deployments")
        )
}

fn fmt_n(v: f64) -> String {
    let n = v.round() as i64;
    let s = n.abs().to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 { format!("-{out}") } else { out }
}

fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

fn row(label: &str, flux: String, convoy: String) {
    println!("  {label:<58} {flux:>16} {convoy:>16}");
}

fn verb_rows(
    title: &str,
    f: &RequestCounts,
    c: &RequestCounts,
    keep_f: &dyn Fn(&RequestKey) -> bool,
    keep_c: &dyn Fn(&RequestKey) -> bool,
) {
    let fv = f.by_verb(keep_f);
    let cv = c.by_verb(keep_c);
    let verbs: BTreeSet<&String> = fv.keys().chain(cv.keys()).collect();
    println!("  {title}");
    for v in verbs {
        row(
            &format!("  {v}"),
            fmt_n(fv.get(v).copied().unwrap_or(0.0)),
            fmt_n(cv.get(v).copied().unwrap_or(0.0)),
        );
    }
}

fn report(s: &Settings, flux: &Run, convoy: &Run) {
    let harness_creates = (s.apps + 1) as f64;
    println!(
        "daemon_vs_flux: {} apps × 5 objects (3 ConfigMaps + a Service in wave 0, a Deployment of 1 replica in wave 1), one Git repository over smart HTTP, kwok",
        fmt_n(s.apps as f64)
    );
    println!(
        "  Flux v1.9.6: GitRepository + {} Kustomizations (wait, prune, timeout 10m); kustomize-controller --concurrent=4 --concurrent-ssa=4, source-controller --concurrent=2",
        s.apps
    );
    println!(
        "  convoy: GitRepository + {} Releases (health assessment, default rules, deadline 10m); convoy daemon --workers 4 --concurrency 16",
        s.apps
    );
    println!(
        "  Flux client throttling: --kube-api-qps={} --kube-api-burst={}{}; convoy has none",
        s.flux_qps,
        s.flux_burst,
        if s.flux_qps == "-1" {
            " (off, as Flux sets itself when the API server has Priority and Fairness; this test API server runs without APF, where Flux would use 50/300)"
        } else {
            ""
        }
    );
    println!(
        "  intervals, both tools: GitRepository {}, Kustomization/Release {}; a fresh control plane per tool, Flux first",
        go_secs(s.source_interval),
        go_secs(s.app_interval)
    );
    println!("  {:<58} {:>16} {:>16}", "", "Flux", "convoy");
    row(
        "load average before",
        flux.load_before.clone(),
        convoy.load_before.clone(),
    );
    row(
        "load average after",
        flux.load_after.clone(),
        convoy.load_after.clone(),
    );
    row("created in", secs(flux.created), secs(convoy.created));
    row(
        "each Ready / Applied+Healthy once, the last after",
        secs(flux.converged),
        secs(convoy.converged),
    );
    if let Some((at, (met, all))) = convoy.last_healthy {
        row(
            "convoy: every lastHealthy at the running render after",
            "".into(),
            match at {
                Some(at) => secs(at),
                None => format!("{met} of {all} by the commit"),
            },
        );
    }
    let speedup = flux.converged.as_secs_f64() / convoy.converged.as_secs_f64();
    println!(
        "  → convoy converges {speedup:.2}× faster (goal ≥ 2 {})",
        if speedup >= 2.0 { "✓" } else { "✗" }
    );
    let cpu_sum = |r: &Run, whole: bool| -> f64 {
        r.processes
            .iter()
            .map(|p| if whole { p.2 } else { p.1 })
            .sum()
    };
    let rss_sum = |r: &Run| -> f64 { r.processes.iter().map(|p| p.3).sum() };
    row(
        "controllers' CPU until converged",
        format!("{:.1} s", cpu_sum(flux, false)),
        format!("{:.1} s", cpu_sum(convoy, false)),
    );
    for p in &flux.processes {
        row(&format!("  {}", p.0), format!("{:.1} s", p.1), "".into());
    }
    row(
        "controllers' CPU, whole run",
        format!("{:.1} s", cpu_sum(flux, true)),
        format!("{:.1} s", cpu_sum(convoy, true)),
    );
    row(
        "controllers' peak RSS (sum of processes)",
        format!("{:.1} MiB", rss_sum(flux)),
        format!("{:.1} MiB", rss_sum(convoy)),
    );
    for p in &flux.processes {
        row(&format!("  {}", p.0), format!("{:.1} MiB", p.3), "".into());
    }
    let mem = rss_sum(convoy) / rss_sum(flux);
    println!(
        "  → convoy's peak RSS is {mem:.2} of Flux's (goal ≤ 0.5 {})",
        if mem <= 0.5 { "✓" } else { "✗" }
    );
    row(
        "kube-apiserver / etcd CPU until converged",
        format!("{:.0} / {:.0} s", flux.apiserver_cpu, flux.etcd_cpu),
        format!("{:.0} / {:.0} s", convoy.apiserver_cpu, convoy.etcd_cpu),
    );
    row(
        "Git server CPU until converged",
        format!("{:.1} s", flux.git_cpu),
        format!("{:.1} s", convoy.git_cpu),
    );
    println!("  time in reconciles until the end (seconds / passes)");
    for r in [flux, convoy] {
        for (what, secs, n) in &r.passes {
            println!(
                "    {:<8} {what:<34} {:>9.1} s / {:>7}",
                r.tool.name(),
                secs,
                fmt_n(*n)
            );
        }
    }

    println!("  API requests until converged (kube-apiserver's apiserver_request_total)");
    verb_rows(
        "apps' objects (ConfigMaps, Services, Deployments; no status)",
        &flux.converge,
        &convoy.converge,
        &apps_objects,
        &apps_objects,
    );
    let own_f = |k: &RequestKey| Tool::Flux.own(k);
    let own_c = |k: &RequestKey| Tool::Convoy.own(k);
    verb_rows(
        &format!(
            "own kinds (Flux: *.toolkit.fluxcd.io; convoy: *.convoy.kumodo.io, Secrets), the harness's {} POSTs in",
            fmt_n(harness_creates)
        ),
        &flux.converge,
        &convoy.converge,
        &own_f,
        &own_c,
    );
    println!("  writes to own kinds by resource (the harness's POSTs left out)");
    for r in [flux, convoy] {
        let mut by: BTreeMap<String, f64> = BTreeMap::new();
        for (k, v) in &r.converge.0 {
            if k.is_write() && r.tool.own(k) {
                let what = if k.subresource.is_empty() {
                    format!("{} {}", k.verb, k.resource)
                } else {
                    format!("{} {}/{}", k.verb, k.resource, k.subresource)
                };
                *by.entry(what).or_insert(0.0) += v;
            }
        }
        let harness = format!("POST {}", r.tool.app_resource().plural);
        if let Some(n) = by.get_mut(&harness) {
            *n -= s.apps as f64;
        }
        if let Some(n) = by.get_mut("POST gitrepositories") {
            *n -= 1.0;
        }
        let line: Vec<String> = by
            .iter()
            .filter(|(_, v)| **v > 0.0)
            .map(|(k, v)| format!("{k} {}", fmt_n(*v)))
            .collect();
        println!("    {:<8} {}", r.tool.name(), line.join(", "));
    }
    let writes = |r: &Run, counts: &RequestCounts| {
        counts.sum(|k| k.is_write() && (apps_objects(k) || r.tool.own(k)))
    };
    let (wf, wc) = (
        writes(flux, &flux.converge) - harness_creates,
        writes(convoy, &convoy.converge) - harness_creates,
    );
    row(
        "writes to apps' objects + own kinds (no Events, no harness)",
        fmt_n(wf),
        fmt_n(wc),
    );
    let refused = |r: &Run| {
        let by_code = r
            .converge
            .0
            .iter()
            .filter(|(k, _)| k.is_write() && k.refused() && (apps_objects(k) || r.tool.own(k)))
            .fold(BTreeMap::<&str, f64>::new(), |mut by, (k, v)| {
                *by.entry(k.code.as_str()).or_default() += v;
                by
            });
        let total: f64 = by_code.values().sum();
        let codes: Vec<String> = by_code
            .iter()
            .map(|(code, v)| format!("{code}: {}", fmt_n(*v)))
            .collect();
        if codes.is_empty() {
            fmt_n(total)
        } else {
            format!("{} ({})", fmt_n(total), codes.join(", "))
        }
    };
    row(
        "  of them refused by the server",
        refused(flux),
        refused(convoy),
    );
    println!(
        "  → convoy writes {} ({:+.1} %) (goal: fewer {})",
        fmt_n(wc - wf),
        (wc / wf - 1.0) * 100.0,
        if wc < wf { "✓" } else { "✗" }
    );
    let other = |r: &Run, counts: &RequestCounts, write: bool| {
        counts
            .sum(|k| !apps_objects(k) && !r.tool.own(k) && !k.is_event() && (k.is_write() == write))
    };
    row(
        "Events written",
        fmt_n(flux.converge.sum(|k| k.is_event() && k.is_write())),
        fmt_n(convoy.converge.sum(|k| k.is_event() && k.is_write())),
    );
    row(
        "other writes (pods, ReplicaSets… by the control plane)",
        fmt_n(other(flux, &flux.converge, true)),
        fmt_n(other(convoy, &convoy.converge, true)),
    );
    row(
        "other requests (incl. discovery, /version)",
        fmt_n(other(flux, &flux.converge, false)),
        fmt_n(other(convoy, &convoy.converge, false)),
    );

    let per_min = |c: &RequestCounts, r: &Run, write: bool| {
        c.sum(|k| {
            (apps_objects(k) || r.tool.own(k)) && if write { k.is_write() } else { k.is_read() }
        }) / s.steady.as_secs_f64()
            * 60.0
    };
    let settled = |r: &Run| match r.undrained {
        None => secs(r.settle),
        Some(q) => format!("{}, still {q} queued", secs(r.settle)),
    };
    println!(
        "  steady state (after the queues drained, at most {}, + 30 s: Flux {}, convoy {}), per minute",
        secs(DRAIN_WAIT),
        settled(flux),
        settled(convoy)
    );
    row(
        "  writes to apps' objects + own kinds",
        fmt_n(per_min(&flux.steady, flux, true)),
        fmt_n(per_min(&convoy.steady, convoy, true)),
    );
    row(
        "  reads (GET, LIST) of them",
        fmt_n(per_min(&flux.steady, flux, false)),
        fmt_n(per_min(&convoy.steady, convoy, false)),
    );

    println!(
        "  a commit that changes {} apps (a ConfigMap and the Deployment's pod template), from the push{}",
        s.commit_apps,
        if s.nudge {
            ", both sources told to reconcile at once"
        } else {
            ", no nudge (both poll)"
        }
    );
    let opt = |d: Option<Duration>| d.map(secs).unwrap_or_else(|| "—".into());
    row(
        "  GitRepository at the new revision after",
        opt(flux.source_seen),
        opt(convoy.source_seen),
    );
    let q = |v: &[Duration], p: f64| {
        let v: Vec<f64> = v.iter().map(Duration::as_secs_f64).collect();
        format!("{:.1} s", quantile(&v, p))
    };
    row(
        "  changed ConfigMap on the cluster p50 / max",
        format!(
            "{} / {}",
            q(&flux.on_cluster, 0.5),
            q(&flux.on_cluster, 1.0)
        ),
        format!(
            "{} / {}",
            q(&convoy.on_cluster, 0.5),
            q(&convoy.on_cluster, 1.0)
        ),
    );
    row(
        "  app applied and healthy again p50 / max",
        format!("{} / {}", q(&flux.applied, 0.5), q(&flux.applied, 1.0)),
        format!("{} / {}", q(&convoy.applied, 0.5), q(&convoy.applied, 1.0)),
    );
    let p = |v: &[Duration], p: f64| {
        quantile(&v.iter().map(Duration::as_secs_f64).collect::<Vec<_>>(), p)
    };
    let ok = p(&convoy.applied, 0.5) <= p(&flux.applied, 0.5)
        && p(&convoy.applied, 1.0) <= p(&flux.applied, 1.0);
    println!(
        "  → convoy p50 {:.2}× and max {:.2}× Flux's (goal ≤ 1, at least as fast {})",
        p(&convoy.applied, 0.5) / p(&flux.applied, 0.5),
        p(&convoy.applied, 1.0) / p(&flux.applied, 1.0),
        if ok { "✓" } else { "✗" }
    );
    row(
        "  writes to apps' objects + own kinds until all applied",
        fmt_n(
            flux.commit
                .sum(|k| k.is_write() && (apps_objects(k) || Tool::Flux.own(k))),
        ),
        fmt_n(
            convoy
                .commit
                .sum(|k| k.is_write() && (apps_objects(k) || Tool::Convoy.own(k))),
        ),
    );
    println!(
        "  each tool's own count of its API requests, whole run (Flux: rest_client_requests_total by method, both controllers; convoy: convoy_api_requests_total by verb)"
    );
    for r in [flux, convoy] {
        let line: Vec<String> = r
            .client_view
            .iter()
            .map(|(k, v)| format!("{k} {}", fmt_n(*v)))
            .collect();
        println!("    {:<8} {}", r.tool.name(), line.join(", "));
    }
}

#[tokio::main]
async fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let s = Settings::from_env();
    let peers = common::peers_bin();
    testenv_bin();
    // Kept after the run (a few MB): the controllers' logs, for a look at where time went.
    let logs: PathBuf = std::env::temp_dir().join(format!("daemon-vs-flux-{}", std::process::id()));
    std::fs::create_dir_all(&logs).unwrap();
    eprintln!("daemon_vs_flux: logs in {}", logs.display());
    let repo = Repo::new(&s, &peers, &logs);
    let flux = run(Tool::Flux, &s, &repo, &peers, &logs).await;
    let convoy = run(Tool::Convoy, &s, &repo, &peers, &logs).await;
    report(&s, &flux, &convoy);
}

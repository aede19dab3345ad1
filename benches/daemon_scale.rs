//! Benchmark: `convoy daemon` bringing 1,000 Releases × 5 objects (three ConfigMaps, a
//! Service, a one-replica Deployment whose pod kwok readies) from one local Git repository to
//! Applied and Healthy. Prints the time from creation until all are Applied and Healthy,
//! Releases per second, the daemon's CPU seconds and peak RSS, then the API writes the daemon
//! makes in one minute of steady state. Goals (issue 7): ≥ 4 Releases/s, ≤ 150 MiB RSS, zero
//! writes per minute at steady state.
//!
//! `cargo bench --bench daemon_scale` starts its own control plane (scripts/testenv) or uses
//! `CONVOY_TEST_KUBECONFIG`; `CONVOY_BENCH_RELEASES` changes the count. With
//! `CONVOY_BENCH_BASELINE=/path/to/convoy` it runs that earlier build first and then this one,
//! each on a fresh control plane, and prints both side by side. Under `cargo test` (no
//! `--bench` flag) it does nothing.

#![allow(clippy::unwrap_used)]

#[path = "../tests/support/mod.rs"]
mod support;

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{memory, metric_sum, metrics, usage};
use convoy::engine::api::{Release, condition_types};
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::json;
use support::servers::GitRepo;
use support::{TestEnv, convoy_bin, path_with_testenv};

fn objects(i: usize) -> Vec<(String, String)> {
    let mut files: Vec<(String, String)> = ["a", "b", "c"]
        .iter()
        .map(|c| {
            (
                format!("rel-{i:04}/cm-{c}.yaml"),
                format!(
                    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: r{i}-{c}\ndata:\n  value: \"{i}-{c}\"\n"
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
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: r{i}\nspec:\n  replicas: 1\n  selector:\n    matchLabels: {{app: r{i}}}\n  template:\n    metadata:\n      labels: {{app: r{i}}}\n    spec:\n      containers:\n      - name: app\n        image: nginx:1.27\n"
        ),
    ));
    files
}

/// The sum of a metric's series.
fn total(port: u16, name: &str) -> f64 {
    metric_sum(&metrics(port), name, &[])
}

/// The daemon's API writes so far (creates, updates, patches, deletes; not dry runs).
fn writes(port: u16) -> f64 {
    let text = metrics(port);
    ["create", "update", "patch", "delete"]
        .iter()
        .map(|v| metric_sum(&text, "convoy_api_requests_total", &[("verb", v)]))
        .sum()
}

struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn ready(r: &Release) -> bool {
    let status = r.status.clone().unwrap_or_default();
    let is_true = |t: &str| status.condition(t).is_some_and(|c| c.status.is_true());
    is_true(condition_types::APPLIED) && is_true(condition_types::HEALTHY)
}

/// What one run measured.
struct Figures {
    created: Duration,
    all_ready: Duration,
    cpu: f64,
    peak_rss: f64,
    steady_rss: f64,
    drained: Duration,
    steady_writes: f64,
    per_release: Vec<String>,
    /// Passes of each loop per Release, until the queues drained.
    passes: Vec<String>,
}

/// `binary`'s daemon brings `count` Releases to Applied and Healthy on `env`'s control plane.
async fn run(binary: &Path, env: &TestEnv, count: usize) -> Figures {
    let conn = convoy::engine::connect::Connection::from_source(
        &convoy::engine::connect::KubeconfigSource {
            path: Some(env.kubeconfig.clone()),
            context: None,
        },
    )
    .await
    .unwrap();
    convoy::engine::install::install_default_rules(&conn)
        .await
        .unwrap();

    let repo = GitRepo::new();
    let files: Vec<(String, String)> = (0..count).flat_map(objects).collect();
    let refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, c)| (p.as_str(), c.as_str()))
        .collect();
    repo.commit(&refs, "bench");
    let kubectl_apply =
        |object: serde_json::Value| env.kubectl_apply_text(&object.to_string(), &["--server-side"]);
    kubectl_apply(json!({
        "apiVersion": "source.convoy.kumodo.io/v1alpha1", "kind": "GitRepository",
        "metadata": {"name": "repo", "namespace": env.namespace},
        "spec": {"url": repo.file_url(), "ref": {"branch": "main"}},
    }));

    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let cache = tempfile::tempdir().unwrap();
    let log = tempfile::NamedTempFile::new().unwrap();
    let child = Command::new(binary)
        .arg("--kubeconfig")
        .arg(&env.kubeconfig)
        .args([
            "daemon",
            "--allow-file-urls",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--watch-namespace",
            &env.namespace,
            "--cache-dir",
        ])
        .arg(cache.path())
        .env("PATH", path_with_testenv())
        .stdout(Stdio::null())
        .stderr(log.reopen().unwrap())
        .spawn()
        .unwrap();
    let pid = child.id();
    let _daemon = Daemon(child);
    support::eventually(
        "the daemon to be ready",
        Duration::from_secs(30),
        || async {
            let ok = Command::new("curl")
                .args(["-sf", &format!("http://127.0.0.1:{port}/readyz")])
                .status()
                .is_ok_and(|s| s.success());
            ok.then_some(())
        },
    )
    .await;

    let api: Api<Release> = Api::namespaced(env.client.clone(), &env.namespace);
    let started = Instant::now();
    for i in 0..count {
        let release: Release = serde_json::from_value(json!({
            "apiVersion": "core.convoy.kumodo.io/v1alpha1", "kind": "Release",
            "metadata": {"name": format!("rel-{i:04}")},
            "spec": {
                "source": {"kind": "GitRepository", "name": "repo", "path": format!("rel-{i:04}")},
                "targetNamespace": env.namespace,
                "healthAssessment": {
                    "globalRuleSetSelector": {"matchLabels": {"health.convoy.kumodo.io/defaults": "true"}},
                    "deadline": "10m",
                },
            },
        }))
        .unwrap();
        api.create(&PostParams::default(), &release).await.unwrap();
    }
    let created = started.elapsed();
    let mut last_report = Instant::now();
    let all_ready = loop {
        let list = api.list(&ListParams::default()).await.unwrap();
        let done = list.items.iter().filter(|r| ready(r)).count();
        if done == count {
            break started.elapsed();
        }
        if last_report.elapsed() > Duration::from_secs(30) {
            eprintln!(
                "  {done}/{count} Applied and Healthy after {:.0?}",
                started.elapsed()
            );
            last_report = Instant::now();
        }
        assert!(
            started.elapsed() < Duration::from_secs(1800),
            "not all Releases were Applied and Healthy within 30 minutes ({done}/{count}); daemon log: {}",
            log.path().display()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let (cpu, rss) = usage(pid);

    // Steady state: the work queues drain (the wake-ups the last health passes sent), the
    // last edges settle, then writes are counted over one minute.
    let drain = Instant::now();
    support::eventually(
        "the daemon's work queues to drain",
        Duration::from_secs(900),
        || async { (total(port, "convoy_queue_depth") == 0.0).then_some(()) },
    )
    .await;
    let drained = drain.elapsed();
    tokio::time::sleep(Duration::from_secs(30)).await;
    let before = writes(port);
    tokio::time::sleep(Duration::from_secs(60)).await;
    let steady_writes = writes(port) - before;
    let (_, rss_after) = usage(pid);
    let passes: Vec<String> = common::metric_by(&metrics(port), "convoy_reconciles_total", "loop")
        .into_iter()
        .map(|(l, n)| format!("{l} {:.1}", n / count as f64))
        .collect();
    let per_release: Vec<String> =
        common::metric_by(&metrics(port), "convoy_api_requests_total", "verb")
            .into_iter()
            .map(|(verb, n)| format!("{verb} {:.1}", n / count as f64))
            .collect();
    Figures {
        created,
        all_ready,
        cpu,
        peak_rss: rss.max(rss_after),
        steady_rss: memory(pid, "VmRSS:"),
        drained,
        steady_writes,
        per_release,
        passes,
    }
}

fn print(count: usize, f: &Figures) {
    let rate = count as f64 / f.all_ready.as_secs_f64();
    println!("  created in                {:>8.1?}", f.created);
    println!(
        "  all Applied and Healthy   {:>8.1?}  → {rate:.2} Releases/s (goal ≥ 4; Flux ~3.9/s on 16 cores)",
        f.all_ready
    );
    println!("  daemon CPU                {:>8.1} s", f.cpu);
    println!(
        "  daemon peak RSS           {:>8.1} MiB (goal ≤ 150)",
        f.peak_rss
    );
    println!("  daemon RSS at steady      {:>8.1} MiB", f.steady_rss);
    println!("  queues drained after      {:>8.1?}  more", f.drained);
    println!(
        "  writes in 1 min steady    {:>8.0}     (goal 0)",
        f.steady_writes
    );
    println!("  API requests per Release  {}", f.per_release.join(", "));
    println!("  passes per Release        {}", f.passes.join(", "));
}

#[tokio::main]
async fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let count: usize = std::env::var("CONVOY_BENCH_RELEASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    // `CONVOY_BENCH_BASELINE=/path/to/convoy`: the same run with an earlier build first, each
    // on a fresh control plane of its own, printed side by side.
    let Some(baseline) = std::env::var_os("CONVOY_BENCH_BASELINE").map(PathBuf::from) else {
        let env = TestEnv::new("bench-scale").await;
        let figures = run(&convoy_bin(), &env, count).await;
        println!("daemon_scale: {count} Releases × 5 objects, one Git repository, kwok");
        print(count, &figures);
        return;
    };
    assert!(
        baseline.is_file(),
        "CONVOY_BENCH_BASELINE={} is not a convoy binary",
        baseline.display()
    );
    let mut runs = Vec::new();
    for (label, binary) in [("baseline", baseline.clone()), ("this build", convoy_bin())] {
        let plane = support::ControlPlane::own("bench-scale", &[]);
        let env = TestEnv::on(&plane, "bench-scale").await;
        eprintln!("daemon_scale: {label} ({})", binary.display());
        runs.push((label, run(&binary, &env, count).await));
    }
    println!(
        "daemon_scale: {count} Releases × 5 objects, one Git repository, kwok; baseline {}",
        baseline.display()
    );
    for (label, figures) in &runs {
        println!("{label}:");
        print(count, figures);
    }
    let (base, this) = (&runs[0].1, &runs[1].1);
    println!(
        "this build / baseline: converge {:.2}×, daemon CPU {:.2}×, peak RSS {:.2}× (below 1 is better)",
        this.all_ready.as_secs_f64() / base.all_ready.as_secs_f64(),
        this.cpu / base.cpu.max(0.01),
        this.peak_rss / base.peak_rss.max(0.01),
    );
}

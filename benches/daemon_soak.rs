//! Soak: `convoy daemon` with 200 Releases (`interval: 30s`) for 60 minutes, with an event
//! storm every 5 minutes (every Release annotated, the Git source moved on). Prints, per
//! 10 minutes, the passes per Release per interval of each loop (constant when requeues do not
//! pile up), the daemon's RSS and the tasks alive in its runtime (flat when nothing leaks);
//! then the RSS before, during and after one big Release (1,500 ConfigMaps) is applied (the
//! render is dropped after its pass).
//!
//! `cargo bench --bench daemon_soak` starts its own control plane (scripts/testenv) or uses
//! `CONVOY_TEST_KUBECONFIG`; `CONVOY_SOAK_RELEASES` and `CONVOY_SOAK_MINUTES` change the size
//! and the length. Under `cargo test` (no `--bench` flag) it does nothing.

#![allow(clippy::unwrap_used)]

#[path = "../tests/support/mod.rs"]
mod support;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use convoy::engine::api::{Release, condition_types};
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::json;
use support::servers::GitRepo;
use support::{TestEnv, convoy_bin, path_with_testenv};

const INTERVAL: Duration = Duration::from_secs(30);
const STORM_EVERY: Duration = Duration::from_secs(300);
const WINDOW: Duration = Duration::from_secs(600);
const LOOPS: [&str; 3] = ["controller", "drift", "health"];

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn config_maps(prefix: &str, count: usize, value: &str) -> String {
    (0..count)
        .map(|j| {
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {prefix}-{j}\ndata:\n  value: \"{value}\"\n"
            )
        })
        .collect::<Vec<_>>()
        .join("---\n")
}

/// Current RSS of a process in MiB.
fn rss(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(0.0)
        / 1024.0
}

fn metrics(port: u16) -> String {
    let out = Command::new("curl")
        .args(["-sf", &format!("http://127.0.0.1:{port}/metrics")])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The sum of a metric's series whose line contains `filter`.
fn total(text: &str, name: &str, filter: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .filter(|l| l.contains(filter))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

struct Sample {
    passes: Vec<f64>,
    rss: f64,
    tasks: f64,
}

fn sample(port: u16, pid: u32) -> Sample {
    let text = metrics(port);
    Sample {
        passes: LOOPS
            .iter()
            .map(|l| total(&text, "convoy_reconciles_total", &format!("loop=\"{l}\"")))
            .collect(),
        rss: rss(pid),
        tasks: total(&text, "convoy_runtime_alive_tasks", ""),
    }
}

struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn applied(r: &Release) -> bool {
    r.status
        .as_ref()
        .and_then(|s| s.condition(condition_types::APPLIED))
        .is_some_and(|c| c.status.is_true())
}

#[tokio::main]
async fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let count = env_number("CONVOY_SOAK_RELEASES", 200) as usize;
    let length = Duration::from_secs(env_number("CONVOY_SOAK_MINUTES", 60) * 60);
    let env = TestEnv::new("soak").await;
    let repo = GitRepo::new();
    let files: Vec<(String, String)> = (0..count)
        .map(|i| {
            (
                format!("rel-{i:04}/cm.yaml"),
                config_maps(&format!("r{i}"), 2, "1"),
            )
        })
        .collect();
    let refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, c)| (p.as_str(), c.as_str()))
        .collect();
    repo.commit(&refs, "soak");
    let kubectl_apply =
        |object: serde_json::Value| env.kubectl_apply_text(&object.to_string(), &["--server-side"]);
    kubectl_apply(json!({
        "apiVersion": "source.convoy.kumodo.io/v1alpha1", "kind": "GitRepository",
        "metadata": {"name": "repo", "namespace": env.namespace},
        "spec": {"url": repo.file_url(), "ref": {"branch": "main"}, "interval": "1m"},
    }));

    let port = support::servers::free_port();
    let cache = tempfile::tempdir().unwrap();
    let log = tempfile::NamedTempFile::new().unwrap();
    let child = Command::new(convoy_bin())
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
    for i in 0..count {
        let release: Release = serde_json::from_value(json!({
            "apiVersion": "core.convoy.kumodo.io/v1alpha1", "kind": "Release",
            "metadata": {"name": format!("rel-{i:04}")},
            "spec": {
                "source": {"kind": "GitRepository", "name": "repo", "path": format!("rel-{i:04}")},
                "targetNamespace": env.namespace,
                "syncPolicy": {"interval": format!("{}s", INTERVAL.as_secs())},
            },
        }))
        .unwrap();
        api.create(&PostParams::default(), &release).await.unwrap();
    }
    support::eventually("all Releases Applied", Duration::from_secs(900), || async {
        let list = api.list(&ListParams::default()).await.ok()?;
        (list.items.iter().filter(|r| applied(r)).count() == count).then_some(())
    })
    .await;

    println!(
        "daemon_soak: {count} Releases, interval {}s, {} min, an event storm every {} min",
        INTERVAL.as_secs(),
        length.as_secs() / 60,
        STORM_EVERY.as_secs() / 60
    );
    println!(
        "  {:>6}  {:>28}  {:>9}  {:>6}",
        "minute", "passes/Release/interval c d h", "RSS MiB", "tasks"
    );
    let started = Instant::now();
    let first = sample(port, pid);
    println!(
        "  {:>6}  {:>28}  {:>9.1}  {:>6.0}",
        0, "-", first.rss, first.tasks
    );
    let mut window_start = first;
    let mut next_window = WINDOW;
    let mut next_storm = STORM_EVERY;
    let mut storms = 0;
    let mut rss_peak: f64 = 0.0;
    while started.elapsed() < length {
        tokio::time::sleep(Duration::from_secs(5)).await;
        rss_peak = rss_peak.max(rss(pid));
        if started.elapsed() >= next_storm {
            storms += 1;
            // Every Release annotated (an update without a spec change) and the source moved on.
            let out = env.kubectl(&[
                "annotate",
                "releases.core.convoy.kumodo.io",
                "--all",
                "-n",
                &env.namespace,
                "--overwrite",
                &format!("soak/storm={storms}"),
            ]);
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            repo.commit(&[("storm.txt", &storms.to_string())], "storm");
            next_storm += STORM_EVERY;
        }
        if started.elapsed() >= next_window {
            let now = sample(port, pid);
            let intervals = WINDOW.as_secs_f64() / INTERVAL.as_secs_f64();
            let rates: Vec<String> = now
                .passes
                .iter()
                .zip(&window_start.passes)
                .map(|(n, b)| format!("{:.2}", (n - b) / count as f64 / intervals))
                .collect();
            println!(
                "  {:>6}  {:>28}  {:>9.1}  {:>6.0}",
                next_window.as_secs() / 60,
                rates.join(" "),
                now.rss,
                now.tasks
            );
            window_start = now;
            next_window += WINDOW;
        }
    }
    println!(
        "  peak RSS over the soak: {rss_peak:.1} MiB; daemon log: {}",
        log.path().display()
    );

    // One big Release: its render is held for its pass and dropped after.
    let big = 1500;
    repo.commit(
        &[(
            "big/cm.yaml",
            &config_maps("big", big, "x".repeat(200).as_str()),
        )],
        "big",
    );
    let before = rss(pid);
    let release: Release = serde_json::from_value(json!({
        "apiVersion": "core.convoy.kumodo.io/v1alpha1", "kind": "Release",
        "metadata": {"name": "big"},
        "spec": {
            "source": {"kind": "GitRepository", "name": "repo", "path": "big"},
            "targetNamespace": env.namespace,
            "syncPolicy": {"interval": format!("{}s", INTERVAL.as_secs())},
        },
    }))
    .unwrap();
    api.create(&PostParams::default(), &release).await.unwrap();
    let mut during: f64 = before;
    let big_started = Instant::now();
    loop {
        during = during.max(rss(pid));
        if api.get("big").await.is_ok_and(|r| applied(&r)) {
            break;
        }
        assert!(
            big_started.elapsed() < Duration::from_secs(600),
            "the big Release was not Applied within 10 minutes"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let applied_after = big_started.elapsed();
    // RSS once per interval after it is Applied, while the drift and health loops go over
    // its objects: whether memory stays taken or comes back.
    let mut after = Vec::new();
    for _ in 0..4 {
        tokio::time::sleep(INTERVAL).await;
        after.push(format!("{:.1}", rss(pid)));
    }
    println!(
        "  big Release ({big} ConfigMaps): RSS before {before:.1} MiB, peak during {during:.1} MiB, then every {}s {} MiB (Applied in {:.1}s){}",
        INTERVAL.as_secs(),
        after.join(", "),
        applied_after.as_secs_f64(),
        std::env::var("MALLOC_ARENA_MAX")
            .map(|v| format!("; MALLOC_ARENA_MAX={v}"))
            .unwrap_or_default()
    );
}

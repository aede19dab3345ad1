//! Benchmark: `convoy sync` of 1,000 objects (400 ConfigMaps, 300 Services, 300 Deployments,
//! the objects of `sync_vs_kubectl`) against Flux's apply engine on the same objects:
//! `github.com/fluxcd/pkg/ssa`'s `ResourceManager.ApplyAllStaged` (the version in
//! `scripts/peers.versions`, printed from the binary) with its server-side dry run of every
//! object, as kustomize-controller calls it (`fluxssa`, built by `scripts/peers`), and the raw ceiling `sync_vs_kubectl` measures (the same dry runs and
//! applies with requests built beforehand, 64 in flight). All on one API server without
//! controllers, each client into a fresh namespace, `CONVOY_BENCH_ROUNDS` (3) rounds, each
//! round starting with the next client (the server fills as they go); the medians are
//! compared, with the CPU seconds the API server and etcd spent on each client's run.
//! Goals (issue 21): convoy ≥ 0.9 × the ceiling and ≥ 3× Flux's engine.
//!
//! Every figure is the wall time of one client applying the 1,000 objects into an empty
//! namespace: for convoy and fluxssa the whole process (start, reading the objects, discovery,
//! the dry runs, the applies, and for convoy fetching the Git source into an empty cache,
//! rendering, the inventory and the render store); fluxssa's own timer (normalize + staged
//! apply only) is printed beside it.
//!
//! Flux's engine is run as kustomize-controller runs it — `--concurrent-ssa=4` and, as on an
//! API server with API Priority and Fairness (the controllers turn their client throttle off
//! there), no client-side rate limit — and also with convoy's requests in flight (32), and once
//! with the throttle Flux would use on this API server, which runs without APF (QPS 50,
//! burst 300).
//!
//! `cargo bench --bench sync_vs_flux_ssa` (a few minutes); `CONVOY_BENCH_OBJECTS` changes the
//! count, `CONVOY_BENCH_CONCURRENCY` convoy's requests in flight (32, as `sync_vs_kubectl`; the
//! ceiling has 64), `CONVOY_BENCH_TRACE=1` prints where convoy's sync spends its time (its debug log,
//! one more run). Under `cargo test` (no `--bench` flag) it does nothing.

#![allow(clippy::unwrap_used)]

#[path = "../tests/support/mod.rs"]
mod support;

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{ceiling, children_cpu_seconds, cpu_seconds, quantile, sync_manifests, timed};
use support::servers::GitRepo;
use support::{TestEnv, convoy_bin};

/// convoy's requests in flight, as in `sync_vs_kubectl` (`CONVOY_BENCH_CONCURRENCY`).
fn convoy_concurrency() -> usize {
    common::env_number("CONVOY_BENCH_CONCURRENCY", 32usize)
}

/// The version of `github.com/fluxcd/pkg/ssa` fluxssa was built with (`fluxssa --version`).
fn fluxssa_version(bin: &Path) -> String {
    let out = std::process::Command::new(bin)
        .arg("--version")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", bin.display()));
    let version = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        out.status.success() && version.starts_with('v'),
        "{} --version: {}{} (rebuild it: scripts/peers build)",
        bin.display(),
        version,
        String::from_utf8_lossy(&out.stderr)
    );
    version
}

/// One run of fluxssa: wall time, and what it timed itself.
fn fluxssa(bin: &Path, env: &TestEnv, file: &Path, extra: &[&str]) -> (Duration, f64) {
    let start = Instant::now();
    let out = Command::new(bin)
        .arg("--kubeconfig")
        .arg(&env.kubeconfig)
        .arg("--file")
        .arg(file)
        .args(["--namespace", &env.namespace])
        .args(extra)
        .output()
        .unwrap();
    let wall = start.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "fluxssa {extra:?}: {}{}",
        stdout,
        String::from_utf8_lossy(&out.stderr)
    );
    // "fluxssa: applied 1000 objects in 1.234 s"
    let own = stdout
        .split_whitespace()
        .rev()
        .nth(1)
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(f64::NAN);
    (wall, own)
}

/// The namespace's objects of each kind, to check a client applied them all.
fn count_objects(env: &TestEnv) -> usize {
    let out = env.kubectl(&[
        "get",
        "configmaps,services,deployments",
        "-n",
        &env.namespace,
        "-o",
        "name",
    ]);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.ends_with("/kube-root-ca.crt"))
        .count()
}

struct Convoy {
    repo: GitRepo,
    work: PathBuf,
}

impl Convoy {
    /// A GitRepository and Release `bench` in `env`, reading `app/` of the repository.
    fn release(&self, env: &TestEnv) {
        let text = format!(
            "apiVersion: source.convoy.kumodo.io/v1alpha1\nkind: GitRepository\nmetadata: {{name: repo}}\nspec: {{url: \"{}\"}}\n---\n\
apiVersion: core.convoy.kumodo.io/v1alpha1\nkind: Release\nmetadata: {{name: bench}}\nspec:\n  source: {{kind: GitRepository, name: repo, path: app}}\n  targetNamespace: {}\n",
            self.repo.file_url(),
            env.namespace
        );
        let file = self.work.join(format!("release-{}.yaml", env.namespace));
        std::fs::write(&file, text).unwrap();
        let out = env.kubectl(&["apply", "-n", &env.namespace, "-f", file.to_str().unwrap()]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// `convoy sync` of the Release in `env`, with a source cache of its own (empty).
    fn sync(&self, env: &TestEnv) -> Command {
        let cache = self.work.join(format!("cache-{}", env.namespace));
        let mut c = Command::new(convoy_bin());
        c.arg("--kubeconfig")
            .arg(&env.kubeconfig)
            .args([
                "-n",
                &env.namespace,
                "sync",
                "bench",
                "--concurrency",
                &convoy_concurrency().to_string(),
            ])
            .env("CONVOY_CACHE_DIR", &cache);
        c
    }
}

/// CPU seconds the API server and etcd used, and the bench process's own and its waited-for
/// children's: on two cores the server is CPU-bound, so a client's own CPU is taken from it.
#[derive(Default, Clone, Copy)]
struct Cpu {
    server: f64,
    client: f64,
}

fn cpu_now() -> Cpu {
    let plane = support::still_control_plane();
    let me = std::process::id();
    Cpu {
        server: cpu_seconds(plane.pid("kube-apiserver")) + cpu_seconds(plane.pid("etcd")),
        client: cpu_seconds(me) + children_cpu_seconds(me),
    }
}

fn cpu_since(before: Cpu) -> Cpu {
    let now = cpu_now();
    Cpu {
        server: now.server - before.server,
        client: now.client - before.client,
    }
}

#[derive(Default)]
struct Round {
    convoy_cpu: Cpu,
    ceiling_cpu: Cpu,
    flux: Duration,
    flux_own: f64,
    flux_wide: Duration,
    flux_wide_own: f64,
    convoy: Duration,
    ceiling_dry: Duration,
    ceiling_apply: Duration,
}

#[tokio::main]
async fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let objects = common::env_number("CONVOY_BENCH_OBJECTS", common::SYNC_OBJECTS);
    let rounds = common::env_number("CONVOY_BENCH_ROUNDS", 3usize).max(1);
    let peers = common::peers_bin();
    let concurrency = convoy_concurrency();
    let fluxssa_bin = peers.join("fluxssa");
    let ssa_version = fluxssa_version(&fluxssa_bin);

    let work = tempfile::tempdir().unwrap();
    let dir = work.path().join("app");
    sync_manifests(&dir, objects);
    // fluxssa reads one multi-document file, as kustomize build hands the controller.
    let mut entries: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    let all: Vec<String> = entries
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect();
    let file = work.path().join("objects.yaml");
    std::fs::write(&file, all.join("---\n")).unwrap();

    let repo = GitRepo::new();
    let files: Vec<(String, String)> = entries
        .iter()
        .map(|p| {
            (
                format!("app/{}", p.file_name().unwrap().to_string_lossy()),
                std::fs::read_to_string(p).unwrap(),
            )
        })
        .collect();
    let refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    repo.commit(&refs, "bench");
    let convoy = Convoy {
        repo,
        work: work.path().to_path_buf(),
    };

    let unthrottled = ["--kube-api-qps=-1", "--kube-api-burst=-1"];
    let mut results = Vec::new();
    let mut throttled = None;
    for round in 0..rounds {
        let mut r = Round::default();

        // Each round starts with another client: one API server fills as the rounds go,
        // so none of them always runs on the fullest server.
        for client in 0..4 {
            match (client + round) % 4 {
                0 => {
                    let env = TestEnv::without_controllers("bench-fluxssa").await;
                    let mut args = unthrottled.to_vec();
                    args.push("--concurrent-ssa=4");
                    (r.flux, r.flux_own) = fluxssa(&fluxssa_bin, &env, &file, &args);
                    assert_eq!(count_objects(&env), objects, "fluxssa applied them all");
                }
                1 => {
                    let env = TestEnv::without_controllers("bench-convoy").await;
                    convoy.release(&env);
                    let before = cpu_now();
                    r.convoy = timed(convoy.sync(&env));
                    r.convoy_cpu = cpu_since(before);
                    assert_eq!(count_objects(&env), objects, "convoy applied them all");
                }
                2 => {
                    let env = TestEnv::without_controllers("bench-ceiling").await;
                    let before = cpu_now();
                    (r.ceiling_dry, r.ceiling_apply) =
                        ceiling(&env.client, &env.namespace, &dir).await;
                    r.ceiling_cpu = cpu_since(before);
                }
                _ => {
                    let env = TestEnv::without_controllers("bench-fluxssa-wide").await;
                    let wide = format!("--concurrent-ssa={concurrency}");
                    let mut args = unthrottled.to_vec();
                    args.push(&wide);
                    (r.flux_wide, r.flux_wide_own) = fluxssa(&fluxssa_bin, &env, &file, &args);
                }
            }
        }

        if round == 0 {
            // What Flux does on this API server (no APF): its default throttle, 50 QPS / 300.
            let env = TestEnv::without_controllers("bench-fluxssa-throttled").await;
            throttled = Some(fluxssa(&fluxssa_bin, &env, &file, &["--concurrent-ssa=4"]));
        }
        eprintln!(
            "  round {}: Flux {:.0} ms, convoy {:.0} ms (CPU: itself {:.2} s, server {:.2} s), ceiling {:.0} ms (CPU: client {:.2} s, server {:.2} s), Flux ×{concurrency} {:.0} ms",
            round + 1,
            r.flux.as_secs_f64() * 1e3,
            r.convoy.as_secs_f64() * 1e3,
            r.convoy_cpu.client,
            r.convoy_cpu.server,
            (r.ceiling_dry + r.ceiling_apply).as_secs_f64() * 1e3,
            r.ceiling_cpu.client,
            r.ceiling_cpu.server,
            r.flux_wide.as_secs_f64() * 1e3,
        );
        results.push(r);
    }

    let median =
        |f: &dyn Fn(&Round) -> f64| quantile(&results.iter().map(f).collect::<Vec<_>>(), 0.5);
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let flux = median(&|r| ms(r.flux));
    let flux_own = median(&|r| r.flux_own * 1e3);
    let flux_wide = median(&|r| ms(r.flux_wide));
    let flux_wide_own = median(&|r| r.flux_wide_own * 1e3);
    let convoy_ms = median(&|r| ms(r.convoy));
    let dry = median(&|r| ms(r.ceiling_dry));
    let apply = median(&|r| ms(r.ceiling_apply));
    let ceiling_ms = median(&|r| ms(r.ceiling_dry + r.ceiling_apply));
    let (throttled_wall, throttled_own) = throttled.unwrap();

    let (cm, svc) = (objects * 4 / 10, objects * 3 / 10);
    println!(
        "sync_vs_flux_ssa: {objects} objects ({cm} ConfigMaps, {svc} Services, {} Deployments), one API server without controllers, median of {rounds} rounds",
        objects - cm - svc
    );
    println!(
        "  Flux's engine               : {flux:>9.0} ms (fluxssa: pkg/ssa {ssa_version} ApplyAllStaged, dry run + apply, --concurrent-ssa=4, no client throttle as with APF; its own timer: {flux_own:.0} ms)"
    );
    println!(
        "  Flux's engine, {concurrency} in flight : {flux_wide:>9.0} ms (its own timer: {flux_wide_own:.0} ms)"
    );
    println!(
        "  Flux's engine, throttled    : {:>9.0} ms (QPS 50 / burst 300, what Flux uses on this APF-off server; round 1 only; own timer {:.0} ms)",
        ms(throttled_wall),
        throttled_own * 1e3
    );
    println!(
        "  convoy sync (first)         : {convoy_ms:>9.0} ms (--concurrency {concurrency}, empty source cache)"
    );
    println!(
        "  CPU, convoy sync            : {:>9.2} s itself, {:.2} s the API server and etcd",
        median(&|r| r.convoy_cpu.client),
        median(&|r| r.convoy_cpu.server)
    );
    println!(
        "  CPU, the ceiling            : {:>9.2} s its client, {:.2} s the API server and etcd",
        median(&|r| r.ceiling_cpu.client),
        median(&|r| r.ceiling_cpu.server)
    );
    println!("  ceiling: raw dry runs       : {dry:>9.0} ms ({objects} requests, 64 in flight)");
    println!("  ceiling: raw applies        : {apply:>9.0} ms ({objects} requests, 64 in flight)");
    let vs_ceiling = ceiling_ms / convoy_ms;
    let vs_flux = flux / convoy_ms;
    println!(
        "  ceiling/convoy              : {vs_ceiling:>9.2}x (goal >= 0.9 {})",
        if vs_ceiling >= 0.9 { "✓" } else { "✗" }
    );
    println!(
        "  Flux/convoy                 : {vs_flux:>9.2}x (goal >= 3 {})",
        if vs_flux >= 3.0 { "✓" } else { "✗" }
    );
    println!(
        "  Flux ({concurrency} in flight)/convoy  : {:>9.2}x",
        flux_wide / convoy_ms
    );
    println!(
        "  Flux/ceiling                : {:>9.2}x",
        flux / ceiling_ms
    );

    if std::env::var("CONVOY_BENCH_TRACE").is_ok() {
        let env = TestEnv::without_controllers("bench-convoy-trace").await;
        convoy.release(&env);
        let mut c = convoy.sync(&env);
        c.env("CONVOY_LOG", "convoy=debug,kube_client=debug");
        let started_at = jiff::Timestamp::now();
        let start = Instant::now();
        let out = c.output().unwrap();
        let wall = start.elapsed();
        eprintln!("  convoy sync started {started_at}");
        eprintln!(
            "where convoy sync's time goes (its debug log; the API requests sent since the line before):"
        );
        trace(&String::from_utf8_lossy(&out.stderr));
        eprintln!("traced convoy sync: {:.0} ms", ms(wall));
    }
}

/// convoy's own debug lines, each with the API requests (by method) sent since the line before.
fn trace(log: &str) {
    let mut since: std::collections::BTreeMap<String, usize> = Default::default();
    for line in log.lines() {
        if line.contains("kube_client") {
            if line.ends_with("requesting")
                && let Some(method) = line
                    .split("http.method=")
                    .nth(1)
                    .and_then(|r| r.split_whitespace().next())
            {
                let dry = line.contains("dryRun=All");
                let key = if dry {
                    format!("{method} (dry run)")
                } else {
                    method.to_string()
                };
                *since.entry(key).or_insert(0) += 1;
            }
            continue;
        }
        let requests: Vec<String> = since.iter().map(|(m, n)| format!("{m} {n}")).collect();
        eprintln!("  [{}] {line}", requests.join(", "));
        since.clear();
    }
    if !since.is_empty() {
        let requests: Vec<String> = since.iter().map(|(m, n)| format!("{m} {n}")).collect();
        eprintln!("  [{}] (end)", requests.join(", "));
    }
}

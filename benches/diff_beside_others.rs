//! Benchmark: `convoy diff` of a Release of 20 Secrets in a namespace of its own, and the same
//! Release in a namespace that also holds 600 Helm-style release Secrets of ~150 KB each (what
//! a namespace shared with Helm-managed apps holds), and in one that holds 600 such Secrets
//! applied client-side (`kubectl apply`: each body again in the last-applied annotation, so
//! their metadata is as large as they are), on one API server. Prints the median wall time
//! and peak RSS of each and their ratios. Goal: the neighbours cost at most 1.5× the time and
//! memory of the diff alone (at c3c4576~, which listed them all: 3.94× and 8.89× beside Helm's).
//!
//! Then the read the daemon's drift loop makes from the API server's watch cache (a Release
//! that leaves fields to other managers), in process, of 20 Secrets that carry a Release's
//! labels in each namespace: asking for the objects with those labels (as convoy does) and,
//! side by side, for the same objects without labels to select by (the whole kind, as before
//! it did): the median time and the LIST bytes the API server sent per read
//! (`apiserver_response_sizes_sum`).
//!
//! `cargo bench --bench diff_beside_others`; `CONVOY_BENCH_NEIGHBOURS` (600) and
//! `CONVOY_BENCH_ROUNDS` (7) change the run. Under `cargo test` (no `--bench` flag) it does
//! nothing.

#![allow(clippy::unwrap_used)]

#[path = "../tests/support/mod.rs"]
mod support;

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use support::{TestEnv, convoy_bin, path_with_testenv};

const WANTED: usize = 20;

/// The Release (a GitRepository the render never fetches: `--source-dir`) and its 20 Secrets.
fn release(dir: &Path, namespace: &str) -> std::path::PathBuf {
    std::fs::create_dir_all(dir.join("app")).unwrap();
    let secrets: Vec<String> = (0..WANTED)
        .map(|i| {
            format!("apiVersion: v1\nkind: Secret\nmetadata:\n  name: web-{i:02}\nstringData:\n  k: v{i}\n")
        })
        .collect();
    std::fs::write(dir.join("app/secrets.yaml"), secrets.join("---\n")).unwrap();
    let file = dir.join("release.yaml");
    std::fs::write(
        &file,
        format!(
            "apiVersion: source.convoy.kumodo.io/v1alpha1\nkind: GitRepository\nmetadata: {{name: src, namespace: {namespace}}}\nspec: {{url: https://example.com/x.git, ref: {{branch: main}}}}\n---\n\
apiVersion: core.convoy.kumodo.io/v1alpha1\nkind: Release\nmetadata: {{name: mine, namespace: {namespace}}}\nspec:\n  source: {{kind: GitRepository, name: src, path: app}}\n  content: {{type: manifests}}\n  targetNamespace: {namespace}\n"
        ),
    )
    .unwrap();
    file
}

/// One `convoy diff`: its wall time and its peak RSS in MiB (VmHWM, sampled every 2 ms until
/// it exits; the peak is reached while a LIST is read, well before the end).
fn diff(env: &TestEnv, file: &Path, dir: &Path) -> (Duration, f64) {
    let start = Instant::now();
    let mut child = Command::new(convoy_bin())
        .arg("--kubeconfig")
        .arg(&env.kubeconfig)
        .args(["diff", "-f"])
        .arg(file)
        .arg("--source-dir")
        .arg(dir)
        .env("PATH", path_with_testenv())
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut peak: f64 = 0.0;
    let status = loop {
        peak = peak.max(common::memory(child.id(), "VmHWM:"));
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    let elapsed = start.elapsed();
    assert!(
        matches!(status.code(), Some(0) | Some(1)),
        "convoy diff failed: {}",
        std::io::read_to_string(child.stderr.take().unwrap()).unwrap_or_default()
    );
    (elapsed, peak)
}

/// `count` Secrets of ~150 KB in `env`'s namespace: Helm's release Secrets (created), or,
/// `applied`, Secrets as `kubectl apply` leaves them (the body again in the last-applied
/// annotation).
async fn neighbours_of(env: &TestEnv, count: usize, applied: bool) {
    let secrets: Api<Secret> = Api::namespaced(env.client.clone(), &env.namespace);
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for i in 0..count {
        let blob: Vec<u8> = (0..110_000)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed as u8
            })
            .collect();
        let mut secret = serde_json::json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": format!("sh.helm.release.v1.app{i:03}.v1"), "namespace": env.namespace},
            "type": "helm.sh/release.v1",
            "data": {"release": base64::engine::general_purpose::STANDARD.encode(&blob)},
        });
        if applied {
            secret["metadata"]["name"] = format!("app-{i:03}").into();
            let body = secret.to_string();
            secret["metadata"]["annotations"] =
                serde_json::json!({"kubectl.kubernetes.io/last-applied-configuration": body});
        }
        let secret: Secret = serde_json::from_value(secret).unwrap();
        secrets.create(&Default::default(), &secret).await.unwrap();
    }
}

/// The drift loop's read from the API server's watch cache in each namespace: 20 Secrets
/// that carry the labels of a Release (`drift`), read with those labels and without them.
async fn watch_cache_reads(envs: &[&TestEnv], names: &[String], rounds: usize) {
    use convoy::engine::api::labels::{RELEASE_NAME, RELEASE_NAMESPACE};
    use convoy::engine::apply::{Applier, Freshness};
    use convoy::engine::render::Object;
    println!("drift loop's read from the watch cache of {WANTED} Secrets, median of {rounds}:");
    for (env, name) in envs.iter().zip(names) {
        let secret = |i: usize, labelled: bool| {
            let mut s = serde_json::json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": format!("drift-{i:02}"), "namespace": env.namespace},
                "stringData": {"k": "v"}});
            if labelled {
                s["metadata"]["labels"] = serde_json::json!({RELEASE_NAME: "drift",
                    RELEASE_NAMESPACE: env.namespace});
            }
            s
        };
        let secrets: Api<Secret> = Api::namespaced(env.client.clone(), &env.namespace);
        for i in 0..WANTED {
            let object: Secret = serde_json::from_value(secret(i, true)).unwrap();
            secrets.create(&Default::default(), &object).await.unwrap();
        }
        let applier = Applier::new(env.client.clone(), 4);
        let mut line = format!("  {name:<44}:");
        for labelled in [true, false] {
            let objects: Vec<Object> = (0..WANTED).map(|i| Object(secret(i, labelled))).collect();
            let mut times = Vec::new();
            let before = list_bytes(env).await;
            for _ in 0..rounds {
                let start = Instant::now();
                let live = applier
                    .live_objects_as(&objects, Freshness::ServerWatchCache)
                    .await
                    .unwrap();
                times.push(start.elapsed().as_secs_f64() * 1000.0);
                assert_eq!(live.len(), WANTED);
            }
            let bytes = (list_bytes(env).await - before) / rounds as f64;
            line.push_str(&format!(
                " {} {:6.1} ms, {:8.1} KB listed;",
                if labelled { "by labels" } else { "whole kind" },
                median(times),
                bytes / 1000.0
            ));
        }
        println!("{}", line.trim_end_matches(';'));
    }
}

/// The bytes of the LIST responses for Secrets the API server has sent so far.
async fn list_bytes(env: &TestEnv) -> f64 {
    let request = http::Request::get("/metrics").body(Vec::new()).unwrap();
    let text = env.client.request_text(request).await.unwrap();
    common::metric_sum(
        &text,
        "apiserver_response_sizes_sum",
        &[("verb", "LIST"), ("resource", "secrets")],
    )
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

#[tokio::main]
async fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let neighbours = common::env_number("CONVOY_BENCH_NEIGHBOURS", 600usize);
    let rounds = common::env_number("CONVOY_BENCH_ROUNDS", 7usize).max(1);
    let alone = TestEnv::new("diff-alone").await;
    let beside = TestEnv::new("diff-beside").await;
    let applied = TestEnv::new("diff-beside-applied").await;
    let work = tempfile::tempdir().unwrap();
    let alone_dir = work.path().join("alone");
    let beside_dir = work.path().join("beside");
    let applied_dir = work.path().join("applied");
    let alone_file = release(&alone_dir, &alone.namespace);
    let beside_file = release(&beside_dir, &beside.namespace);
    let applied_file = release(&applied_dir, &applied.namespace);
    // Helm's release Secrets: created, not applied (no last-applied annotation). Their names
    // (`sh.helm.…`) sort before the Release's (`web-…`), so a LIST reaches those last; so do
    // kubectl's (`app-…`).
    neighbours_of(&beside, neighbours, false).await;
    neighbours_of(&applied, neighbours, true).await;

    let scenarios = [
        (&alone, &alone_file, &alone_dir),
        (&beside, &beside_file, &beside_dir),
        (&applied, &applied_file, &applied_dir),
    ];
    let mut times = vec![Vec::new(); scenarios.len()];
    let mut peaks = vec![Vec::new(); scenarios.len()];
    for round in 0..rounds {
        // Rotate which runs first, so none always runs on a warmer server.
        for k in 0..scenarios.len() {
            let i = (round + k) % scenarios.len();
            let (env, file, dir) = scenarios[i];
            let (t, rss) = diff(env, file, dir);
            times[i].push(t.as_secs_f64() * 1000.0);
            peaks[i].push(rss);
        }
    }
    let t: Vec<f64> = times.into_iter().map(median).collect();
    let m: Vec<f64> = peaks.into_iter().map(median).collect();
    let verdict = |ratio: f64| if ratio <= 1.5 { "✓" } else { "✗" };
    println!(
        "diff_beside_others: convoy diff of a Release of {WANTED} Secrets, median of {rounds} rounds"
    );
    let names = [
        "alone".to_string(),
        format!("beside {neighbours} Secrets of ~150 KB"),
        format!("beside {neighbours} of them applied client-side"),
    ];
    for (i, name) in names.iter().enumerate() {
        println!("  {name:<44}: {:8.0} ms, peak RSS {:6.1} MiB", t[i], m[i]);
    }
    for (i, name) in names.iter().enumerate().skip(1) {
        let (rt, rm) = (t[i] / t[0], m[i] / m[0]);
        println!(
            "  {:<44}: time {rt:.2}x, memory {rm:.2}x (goal <= 1.5: {} {})",
            format!("{name} / alone"),
            verdict(rt),
            verdict(rm)
        );
    }
    watch_cache_reads(&scenarios.map(|(env, _, _)| env), &names, rounds).await;
}

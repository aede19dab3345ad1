//! Benchmark: `convoy diff` of a Release of 20 Secrets in a namespace of its own, and the same
//! Release in a namespace that also holds 600 Helm-style release Secrets of ~150 KB each (what
//! a namespace shared with Helm-managed apps holds), on one API server. Prints the median wall
//! time and peak RSS of each and their ratios. Goal: the neighbours cost at most 1.5× the time
//! and memory of the diff alone (at c3c4576~, which listed them all: 3.94× and 8.89×).
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
    let work = tempfile::tempdir().unwrap();
    let alone_dir = work.path().join("alone");
    let beside_dir = work.path().join("beside");
    let alone_file = release(&alone_dir, &alone.namespace);
    let beside_file = release(&beside_dir, &beside.namespace);

    // Helm's release Secrets: created, not applied (no last-applied annotation). Their names
    // (`sh.helm.…`) sort before the Release's (`web-…`), so a LIST reaches those last.
    let secrets: Api<Secret> = Api::namespaced(beside.client.clone(), &beside.namespace);
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for i in 0..neighbours {
        let blob: Vec<u8> = (0..110_000)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed as u8
            })
            .collect();
        let secret: Secret = serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("sh.helm.release.v1.app{i:03}.v1")},
            "type": "helm.sh/release.v1",
            "data": {"release": base64::engine::general_purpose::STANDARD.encode(&blob)},
        }))
        .unwrap();
        secrets.create(&Default::default(), &secret).await.unwrap();
    }

    let mut times = (Vec::new(), Vec::new());
    let mut peaks = (Vec::new(), Vec::new());
    for round in 0..rounds {
        // Alternate which runs first, so neither always runs on a warmer server.
        let order = if round % 2 == 0 {
            [true, false]
        } else {
            [false, true]
        };
        for is_alone in order {
            let (env, file, dir) = if is_alone {
                (&alone, &alone_file, &alone_dir)
            } else {
                (&beside, &beside_file, &beside_dir)
            };
            let (t, rss) = diff(env, file, dir);
            let (ts, ps) = if is_alone {
                (&mut times.0, &mut peaks.0)
            } else {
                (&mut times.1, &mut peaks.1)
            };
            ts.push(t.as_secs_f64() * 1000.0);
            ps.push(rss);
        }
    }
    let (t_alone, t_beside) = (median(times.0), median(times.1));
    let (m_alone, m_beside) = (median(peaks.0), median(peaks.1));
    let verdict = |ratio: f64| if ratio <= 1.5 { "✓" } else { "✗" };
    println!(
        "diff_beside_others: convoy diff of a Release of {WANTED} Secrets, median of {rounds} rounds"
    );
    println!("  alone                        : {t_alone:8.0} ms, peak RSS {m_alone:6.1} MiB");
    println!(
        "  beside {neighbours} Secrets of ~150 KB: {t_beside:8.0} ms, peak RSS {m_beside:6.1} MiB"
    );
    let (rt, rm) = (t_beside / t_alone, m_beside / m_alone);
    println!(
        "  beside / alone, time         : {rt:8.2}x (goal <= 1.5 {})",
        verdict(rt)
    );
    println!(
        "  beside / alone, memory       : {rm:8.2}x (goal <= 1.5 {})",
        verdict(rm)
    );
}

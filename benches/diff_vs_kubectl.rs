//! Benchmark: `convoy diff` of 1,000 objects with 10 % changed against
//! `kubectl diff --server-side` of the same files on the same API server, and against a raw
//! concurrent dry-run probe (the physical limit). Goals: ≥ 5× faster than kubectl; ≤ 1.5× the
//! probe; both tools report the same changed objects.
//!
//! `cargo bench --bench diff_vs_kubectl` (starts its own control plane, or uses
//! `CONVOY_TEST_KUBECONFIG`). Under `cargo test` (no `--bench` flag) it does nothing.

#![allow(clippy::unwrap_used)]

#[path = "../tests/support/mod.rs"]
mod support;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use convoy::engine::apply::Applier;
use convoy::engine::render::Object;
use support::servers::GitRepo;
use support::{TestEnv, testenv_bin};

const OBJECTS: usize = 1000;

fn manifests(dir: &Path, namespace: &str, changed: bool) -> Vec<Object> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    let mut objects = Vec::new();
    for i in 0..OBJECTS {
        // Every tenth object is a ConfigMap whose value changes.
        let value = if changed && i % 10 == 0 {
            "changed"
        } else {
            "original"
        };
        let text = match i % 10 {
            0..=3 => format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg-{i}\ndata:\n  value: {value}\n"
            ),
            4..=6 => format!(
                "apiVersion: v1\nkind: Service\nmetadata:\n  name: svc-{i}\nspec:\n  selector: {{app: app-{i}}}\n  ports:\n  - port: 80\n"
            ),
            _ => format!(
                "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: app-{i}\nspec:\n  replicas: 0\n  selector:\n    matchLabels: {{app: app-{i}}}\n  template:\n    metadata:\n      labels: {{app: app-{i}}}\n    spec:\n      containers:\n      - name: app\n        image: nginx:1.27\n"
            ),
        };
        std::fs::write(dir.join(format!("obj-{i:04}.yaml")), &text).unwrap();
        let mut parsed = convoy::engine::render::manifests::parse_documents(&text, "x").unwrap();
        parsed[0].set_namespace(namespace);
        objects.extend(parsed);
    }
    objects
}

fn run(mut cmd: Command) -> (Duration, String) {
    let start = Instant::now();
    let out = cmd.output().unwrap();
    let elapsed = start.elapsed();
    assert!(
        matches!(out.status.code(), Some(0) | Some(1)),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (elapsed, String::from_utf8_lossy(&out.stdout).into_owned())
}

#[tokio::main]
async fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let kube_env = TestEnv::new("diffbench-kubectl").await;
    let convoy_env = TestEnv::new("diffbench-convoy").await;
    let work = tempfile::tempdir().unwrap();
    let kubectl_dir = work.path().join("kubectl");
    manifests(&kubectl_dir, &kube_env.namespace, false);
    let out = kube_env.kubectl(&[
        "apply",
        "--server-side",
        "-n",
        &kube_env.namespace,
        "-f",
        kubectl_dir.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // convoy's Release, synced from the original files, then the change committed.
    let repo = GitRepo::new();
    let commit = |changed: bool| {
        let dir = repo.work().join("app");
        manifests(&dir, &convoy_env.namespace, changed);
        repo.commit(&[], if changed { "change" } else { "original" });
    };
    commit(false);
    let release = format!(
        "apiVersion: source.convoy.kumodo.io/v1alpha1\nkind: GitRepository\nmetadata: {{name: repo}}\nspec: {{url: \"{}\"}}\n---\n\
apiVersion: core.convoy.kumodo.io/v1alpha1\nkind: Release\nmetadata: {{name: bench}}\nspec:\n  source: {{kind: GitRepository, name: repo, path: app}}\n  targetNamespace: {}\n",
        repo.file_url(),
        convoy_env.namespace
    );
    let release_file = work.path().join("release.yaml");
    std::fs::write(&release_file, release).unwrap();
    assert!(
        convoy_env
            .kubectl(&[
                "apply",
                "-n",
                &convoy_env.namespace,
                "-f",
                release_file.to_str().unwrap()
            ])
            .status
            .success()
    );
    let cache = work.path().join("cache");
    let convoy = |args: &[&str]| {
        let mut c = Command::new(support::convoy_bin());
        c.arg("--kubeconfig")
            .arg(&convoy_env.kubeconfig)
            .args(["-n", &convoy_env.namespace])
            .args(args)
            .env("CONVOY_CACHE_DIR", &cache);
        c
    };
    let out = convoy(&["sync", "bench", "--concurrency", "32"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    commit(true);
    let changed_objects = manifests(&kubectl_dir, &kube_env.namespace, true);

    // Warm both (source cache, discovery) once, then measure.
    run(convoy(&["diff", "bench", "-o", "json"]));
    let (convoy_time, convoy_json) = run(convoy(&["diff", "bench", "-o", "json"]));
    let mut kubectl = Command::new(testenv_bin().join("kubectl"));
    kubectl
        .arg("--kubeconfig")
        .arg(&kube_env.kubeconfig)
        .args(["diff", "--server-side", "-n", &kube_env.namespace, "-f"])
        .arg(&kubectl_dir);
    let (kubectl_time, kubectl_out) = run(kubectl);

    // The physical limit: the same dry runs, concurrently, nothing else.
    let client = support::client_for(&kube_env.kubeconfig).await;
    let applier = Applier::new(client, 16);
    let start = Instant::now();
    let probes = futures::future::join_all(changed_objects.chunks(OBJECTS / 16).map(|chunk| {
        let applier = &applier;
        async move {
            for o in chunk {
                applier.dry_run_one(o).await.unwrap().unwrap();
            }
        }
    }));
    probes.await;
    let probe_time = start.elapsed();

    let report: serde_json::Value = serde_json::from_str(&convoy_json).unwrap();
    let convoy_changed: BTreeSet<String> = report["objects"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["action"] == "change")
        .map(|o| {
            o["key"]
                .as_str()
                .unwrap()
                .rsplit('/')
                .next()
                .unwrap()
                .to_string()
        })
        .collect();
    let kubectl_changed: BTreeSet<String> = kubectl_out
        .lines()
        .filter_map(|l| l.strip_prefix("diff -u -N "))
        .filter_map(|l| l.split_whitespace().next())
        .filter_map(|p| p.rsplit('.').next().map(str::to_string))
        .collect();

    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "diff_vs_kubectl: {OBJECTS} objects, {} changed",
        OBJECTS / 10
    );
    println!(
        "  kubectl diff --server-side : {:>8.0} ms ({} objects reported)",
        ms(kubectl_time),
        kubectl_changed.len()
    );
    println!(
        "  convoy diff                : {:>8.0} ms ({} objects reported)",
        ms(convoy_time),
        convoy_changed.len()
    );
    println!("  raw concurrent dry runs    : {:>8.0} ms", ms(probe_time));
    println!(
        "  kubectl/convoy             : {:>8.2}x (goal >= 5)",
        kubectl_time.as_secs_f64() / convoy_time.as_secs_f64()
    );
    println!(
        "  convoy/probe               : {:>8.2}x (goal <= 1.5)",
        convoy_time.as_secs_f64() / probe_time.as_secs_f64()
    );
    println!(
        "  same changed objects       : {}",
        convoy_changed == kubectl_changed
    );
}

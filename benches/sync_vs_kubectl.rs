//! Benchmark: `convoy sync` of 1,000 objects (ConfigMaps, Services, Deployments) against
//! `kubectl apply --server-side` of the same files on the same API server, then a no-op
//! re-sync. Goals: convoy ≥ 5× faster than kubectl; the no-op re-sync ≥ 10× faster than the
//! first sync.
//!
//! `cargo bench --bench sync_vs_kubectl` starts its own control plane (scripts/testenv) or uses
//! `CONVOY_TEST_KUBECONFIG`. Under `cargo test` (no `--bench` flag) it does nothing.

#![allow(clippy::unwrap_used)]

#[path = "../tests/support/mod.rs"]
mod support;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use support::servers::GitRepo;
use support::{TestEnv, testenv_bin};

const OBJECTS: usize = 1000;

fn manifests(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    for i in 0..OBJECTS {
        let text = match i % 10 {
            0..=3 => format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg-{i}\n  labels: {{app: bench}}\ndata:\n  index: \"{i}\"\n  payload: \"{}\"\n",
                "x".repeat(100)
            ),
            4..=6 => format!(
                "apiVersion: v1\nkind: Service\nmetadata:\n  name: svc-{i}\nspec:\n  selector: {{app: app-{i}}}\n  ports:\n  - port: 80\n    targetPort: 8080\n"
            ),
            _ => format!(
                "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: app-{i}\nspec:\n  replicas: 0\n  selector:\n    matchLabels: {{app: app-{i}}}\n  template:\n    metadata:\n      labels: {{app: app-{i}}}\n    spec:\n      containers:\n      - name: app\n        image: nginx:1.27\n"
            ),
        };
        std::fs::write(dir.join(format!("obj-{i:04}.yaml")), text).unwrap();
    }
}

fn timed(mut cmd: Command) -> Duration {
    let start = Instant::now();
    let out = cmd.output().unwrap();
    let elapsed = start.elapsed();
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    elapsed
}

#[tokio::main]
async fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let kubectl_env = TestEnv::new("bench-kubectl").await;
    let convoy_env = TestEnv::new("bench-convoy").await;
    let work = tempfile::tempdir().unwrap();
    let dir = work.path().join("app");
    manifests(&dir);

    // kubectl, as users run it.
    let mut kubectl = Command::new(testenv_bin().join("kubectl"));
    kubectl
        .arg("--kubeconfig")
        .arg(&kubectl_env.kubeconfig)
        .args(["apply", "--server-side", "-n", &kubectl_env.namespace, "-f"])
        .arg(&dir);
    let kubectl_first = timed(kubectl);

    // convoy: the same files from a Git repository.
    let repo = GitRepo::new();
    let files: Vec<(String, String)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                format!("app/{}", e.file_name().to_string_lossy()),
                std::fs::read_to_string(e.path()).unwrap(),
            )
        })
        .collect();
    let refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    repo.commit(&refs, "bench");
    let release = format!(
        "apiVersion: source.convoy.kumodo.io/v1alpha1\nkind: GitRepository\nmetadata: {{name: repo}}\nspec: {{url: \"{}\"}}\n---\n\
apiVersion: core.convoy.kumodo.io/v1alpha1\nkind: Release\nmetadata: {{name: bench}}\nspec:\n  source: {{kind: GitRepository, name: repo, path: app}}\n  targetNamespace: {}\n",
        repo.file_url(),
        convoy_env.namespace
    );
    let release_file = work.path().join("release.yaml");
    std::fs::write(&release_file, release).unwrap();
    let out = convoy_env.kubectl(&[
        "apply",
        "-n",
        &convoy_env.namespace,
        "-f",
        release_file.to_str().unwrap(),
    ]);
    assert!(out.status.success());
    let cache = work.path().join("cache");
    let sync = || {
        let mut c = Command::new(support::convoy_bin());
        c.arg("--kubeconfig")
            .arg(&convoy_env.kubeconfig)
            .args([
                "-n",
                &convoy_env.namespace,
                "sync",
                "bench",
                "--concurrency",
                "32",
            ])
            .env("CONVOY_CACHE_DIR", &cache);
        c
    };
    let convoy_first = if std::env::var("CONVOY_BENCH_TRACE").as_deref() == Ok("first") {
        let mut c = sync();
        c.env("CONVOY_LOG", "convoy=debug");
        let start = Instant::now();
        let out = c.output().unwrap();
        eprintln!("{}", String::from_utf8_lossy(&out.stderr));
        start.elapsed()
    } else {
        timed(sync())
    };
    let convoy_noop = timed(sync());
    if std::env::var("CONVOY_BENCH_TRACE").as_deref() == Ok("noop") {
        let mut c = sync();
        c.env("CONVOY_LOG", "convoy=trace,kube_client=debug");
        let out = c.output().unwrap();
        eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    }
    let mut kubectl_again = Command::new(testenv_bin().join("kubectl"));
    kubectl_again
        .arg("--kubeconfig")
        .arg(&kubectl_env.kubeconfig)
        .args(["apply", "--server-side", "-n", &kubectl_env.namespace, "-f"])
        .arg(&dir);
    let kubectl_noop = timed(kubectl_again);

    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!("sync_vs_kubectl: {OBJECTS} objects (400 ConfigMaps, 300 Services, 300 Deployments)");
    println!(
        "  kubectl apply --server-side : {:>9.0} ms",
        ms(kubectl_first)
    );
    println!(
        "  convoy sync (first)         : {:>9.0} ms",
        ms(convoy_first)
    );
    println!(
        "  convoy sync (no-op)         : {:>9.0} ms",
        ms(convoy_noop)
    );
    println!(
        "  kubectl apply (no-op)       : {:>9.0} ms",
        ms(kubectl_noop)
    );
    println!(
        "  kubectl/convoy first sync   : {:>9.2}x (goal >= 5)",
        kubectl_first.as_secs_f64() / convoy_first.as_secs_f64()
    );
    println!(
        "  first/no-op convoy sync     : {:>9.2}x (goal >= 10)",
        convoy_first.as_secs_f64() / convoy_noop.as_secs_f64()
    );
}

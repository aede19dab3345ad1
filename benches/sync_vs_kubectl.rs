//! Benchmark: `convoy sync` of 1,000 objects (ConfigMaps, Services, Deployments) against
//! `kubectl apply --server-side` of the same files on the same API server, then a no-op
//! re-sync. Goals: convoy ≥ 5× faster than kubectl; the no-op re-sync ≥ 10× faster than the
//! first sync.
//!
//! It also measures the ceiling any client has on this API server: the same 1,000 server-side
//! dry runs and applies with pre-built requests, 64 in flight, into a third namespace.
//!
//! `cargo bench --bench sync_vs_kubectl` starts its own API server without controllers
//! (scripts/testenv --no-controllers): with them, the ReplicaSets and EndpointSlices made for
//! the first client's objects are still being written while the second client runs. Under `cargo test` (no `--bench` flag) it does nothing.

#![allow(clippy::unwrap_used)]

#[path = "../tests/support/mod.rs"]
mod support;

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{SYNC_OBJECTS as OBJECTS, ceiling, sync_manifests as manifests, timed};
use support::servers::GitRepo;
use support::{TestEnv, testenv_bin};

#[tokio::main]
async fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let kubectl_env = TestEnv::without_controllers("bench-kubectl").await;
    let convoy_env = TestEnv::without_controllers("bench-convoy").await;
    let work = tempfile::tempdir().unwrap();
    let dir = work.path().join("app");
    manifests(&dir, OBJECTS);

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
        c.env("CONVOY_LOG", "convoy=debug,kube_client=debug");
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

    let ceiling_env = TestEnv::without_controllers("bench-ceiling").await;
    let (probe_dry, probe_apply) = ceiling(&ceiling_env.client, &ceiling_env.namespace, &dir).await;

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
    println!(
        "  ceiling: raw dry runs       : {:>9.0} ms (1,000 requests, 64 in flight)",
        ms(probe_dry)
    );
    println!(
        "  ceiling: raw applies        : {:>9.0} ms (1,000 requests, 64 in flight)",
        ms(probe_apply)
    );
    println!(
        "  kubectl/ceiling             : {:>9.2}x (the most any client with a dry-run gate can reach here)",
        kubectl_first.as_secs_f64() / (probe_dry + probe_apply).as_secs_f64()
    );
}

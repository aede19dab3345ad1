//! Benchmark: `convoy render` of a large Helm chart (600 objects) against `helm template` of the
//! same chart and values, side by side in one run. Goal: convoy ≤ 1.2 × helm.
//!
//! `cargo bench --bench render_vs_helm` (needs helm on PATH or $CONVOY_HELM, e.g. after
//! `scripts/testenv build`: `PATH=$(scripts/testenv bin):$PATH cargo bench`). Under
//! `cargo test` (no `--bench` flag) it does nothing.

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const RUNS: usize = 15;

fn write_chart(dir: &Path, count: usize) {
    let chart = dir.join("chart");
    std::fs::create_dir_all(chart.join("templates")).unwrap();
    std::fs::write(
        chart.join("Chart.yaml"),
        "apiVersion: v2\nname: big\nversion: 1.0.0\n",
    )
    .unwrap();
    std::fs::write(
        chart.join("values.yaml"),
        format!(
            "count: {count}\npayload: {}\nimage: registry.local/app:1.0\n",
            "x".repeat(200)
        ),
    )
    .unwrap();
    let template = r#"{{- range $i := until (int .Values.count) }}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: cfg-{{ $i }}
  labels: {app: app-{{ $i }}, release: {{ $.Release.Name }}}
data:
  index: "{{ $i }}"
  payload: {{ $.Values.payload | quote }}
---
apiVersion: v1
kind: Service
metadata:
  name: svc-{{ $i }}
spec:
  selector: {app: app-{{ $i }}}
  ports: [{port: 80, targetPort: 8080}]
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: app-{{ $i }}
spec:
  replicas: 2
  selector: {matchLabels: {app: app-{{ $i }}}}
  template:
    metadata: {labels: {app: app-{{ $i }}}}
    spec:
      containers:
      - name: app
        image: {{ $.Values.image }}
        envFrom: [{configMapRef: {name: cfg-{{ $i }}}}]
{{- end }}
"#;
    std::fs::write(chart.join("templates/all.yaml"), template).unwrap();
    std::fs::write(
        dir.join("release.yaml"),
        "apiVersion: source.convoy.kumodo.io/v1alpha1\nkind: GitRepository\nmetadata: {name: src}\nspec: {url: \"file:///unused\"}\n---\n\
apiVersion: core.convoy.kumodo.io/v1alpha1\nkind: Release\nmetadata: {name: big, namespace: bench}\nspec:\n  source:\n    kind: GitRepository\n    name: src\n    path: chart\n  content:\n    type: helm\n    helm:\n      values: {image: registry.local/app:2.0}\n",
    )
    .unwrap();
    std::fs::write(dir.join("values.yaml"), "image: registry.local/app:2.0\n").unwrap();
}

fn time(mut cmd: Command) -> Duration {
    let start = Instant::now();
    let out = cmd.output().unwrap();
    let elapsed = start.elapsed();
    assert!(
        out.status.success(),
        "{:?}: {}",
        cmd,
        String::from_utf8_lossy(&out.stderr)
    );
    elapsed
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let helm = std::env::var_os("CONVOY_HELM")
        .map(std::path::PathBuf::from)
        .or_else(|| convoy::engine::tools::which("helm"))
        .expect(
            "helm is needed: PATH=$(scripts/testenv bin):$PATH cargo bench --bench render_vs_helm",
        );
    let dir = tempfile::tempdir().unwrap();
    write_chart(dir.path(), 200);
    let convoy = env!("CARGO_BIN_EXE_convoy");
    let cache = dir.path().join("cache");

    let helm_cmd = || {
        let mut c = Command::new(&helm);
        c.arg("template")
            .arg("big")
            .arg(dir.path().join("chart"))
            .args([
                "--namespace",
                "bench",
                "--include-crds",
                "--skip-tests",
                "--values",
            ])
            .arg(dir.path().join("values.yaml"));
        c
    };
    let convoy_cmd = || {
        let mut c = Command::new(convoy);
        c.arg("render")
            .arg("-f")
            .arg(dir.path().join("release.yaml"))
            .arg("--source-dir")
            .arg(dir.path())
            .env("CONVOY_CACHE_DIR", &cache)
            .env("CONVOY_HELM", &helm);
        c
    };
    // Warm up both (page cache, first-run costs), then alternate so drift hits both alike.
    time(helm_cmd());
    time(convoy_cmd());
    let (mut h, mut c) = (Vec::new(), Vec::new());
    for _ in 0..RUNS {
        h.push(time(helm_cmd()));
        c.push(time(convoy_cmd()));
    }
    let (h, c) = (median(h), median(c));
    let out = convoy_cmd().output().unwrap();
    let objects = String::from_utf8_lossy(&out.stdout)
        .matches("\n---\n")
        .count()
        + 1;
    println!("render_vs_helm: {objects} objects, median of {RUNS} runs");
    println!("  helm template : {:>8.1} ms", h.as_secs_f64() * 1e3);
    println!("  convoy render : {:>8.1} ms", c.as_secs_f64() * 1e3);
    println!(
        "  ratio convoy/helm: {:.2} (goal <= 1.20)",
        c.as_secs_f64() / h.as_secs_f64()
    );
}

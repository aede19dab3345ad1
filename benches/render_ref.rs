//! Benchmark: renderRef over 10,000 objects (goal: under one second).
//!
//! `cargo bench --bench render_ref`. Under `cargo test` (no `--bench` flag) it only checks that
//! it runs on a few objects.

#![allow(clippy::unwrap_used)]

use std::time::Instant;

use convoy::engine::render::Object;
use convoy::engine::render::render_ref::render_ref;
use serde_json::json;

fn objects(n: usize) -> Vec<Object> {
    (0..n)
        .map(|i| {
            Object(json!({
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": format!("app-{i}"), "namespace": format!("ns-{}", i % 37),
                             "labels": {"app": format!("app-{i}"), "team": "core"},
                             "annotations": {"convoy.kumodo.io/sync-wave": format!("{}", i % 3)}},
                "spec": {"replicas": 2, "selector": {"matchLabels": {"app": format!("app-{i}")}},
                         "template": {"metadata": {"labels": {"app": format!("app-{i}")}},
                                      "spec": {"containers": [{"name": "app", "image": format!("registry.local/app:{i}"),
                                               "env": [{"name": "INDEX", "value": i.to_string()}],
                                               "resources": {"limits": {"cpu": "100m", "memory": "128Mi"}}}]}}}
            }))
        })
        .collect()
}

fn main() {
    let benching = std::env::args().any(|a| a == "--bench");
    let n = if benching { 10_000 } else { 10 };
    let objects = objects(n);
    let mut times = Vec::new();
    for _ in 0..if benching { 7 } else { 1 } {
        let start = Instant::now();
        let r = render_ref(&objects);
        times.push(start.elapsed());
        assert_eq!(r.len(), 64);
    }
    times.sort();
    let median = times[times.len() / 2];
    println!(
        "render_ref: {n} objects in {:.1} ms (median of {}); goal < 1000 ms; ratio to goal {:.3}",
        median.as_secs_f64() * 1e3,
        times.len(),
        median.as_secs_f64()
    );
}

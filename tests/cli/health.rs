//! `convoy health` against the real control plane.

use std::time::Duration;

use convoy::engine::api::HealthState;
use convoy::engine::health::{HealthMemory, health_pass};

use crate::support::eventually;
use crate::support::fixture::{Fixture, config_map, deployment};

fn settings(namespace: &str) -> insta::Settings {
    let mut s = insta::Settings::clone_current();
    s.add_filter(&regex::escape(namespace), "NAMESPACE");
    s.add_filter(r"\b[0-9a-f]{12}\b", "RENDERREF");
    s.add_filter(r"\b\d+(s|m\d*s?|h\d*m?)\b", "AGE");
    s
}

fn out(o: std::process::Output) -> (i32, String) {
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
    )
}

#[tokio::test]
async fn health_of_a_healthy_release() {
    let f = Fixture::new(
        "cli-health",
        &[
            ("a.yaml", &config_map("settings", 0, "1")),
            ("d.yaml", &deployment("api", 1, 1)),
        ],
        Fixture::default_health("5m"),
    )
    .await;
    f.install_default_rules().await;
    f.sync().await;
    let memory = HealthMemory::default();
    eventually("Healthy", Duration::from_secs(60), || async {
        let pass = health_pass(&f.ctx, &memory, &f.release().await)
            .await
            .unwrap()
            .unwrap();
        (pass.condition.unwrap().reason == "Healthy").then_some(())
    })
    .await;
    let (code, text) = out(f.env.convoy(&["health", "web"]));
    assert_eq!(code, 0, "{text}");
    let (_, live) = out(f.env.convoy(&["health", "web", "--live"]));
    let (_, json_text) = out(f.env.convoy(&["health", "web", "-o", "json"]));
    let json: serde_json::Value = serde_json::from_str(&json_text).unwrap();
    assert_eq!(json["summary"]["healthy"], 2);
    assert_eq!(json["objects"][0]["state"], "Healthy");
    settings(&f.env.namespace).bind(|| {
        insta::assert_snapshot!("health_healthy", text);
        insta::assert_snapshot!("health_live", live);
    });
}

#[tokio::test]
async fn health_of_a_degraded_release_exits_1() {
    let stuck = deployment("stuck", 0, 1).replace(
        "    spec:\n      containers:",
        "    spec:\n      nodeSelector: {convoy-test: nowhere}\n      containers:",
    );
    let f = Fixture::new(
        "cli-health-degraded",
        &[("d.yaml", &stuck)],
        Fixture::default_health("1s"),
    )
    .await;
    f.install_default_rules().await;
    f.sync().await;
    let memory = HealthMemory::default();
    eventually("Degraded", Duration::from_secs(30), || async {
        health_pass(&f.ctx, &memory, &f.release().await)
            .await
            .unwrap();
        let inv: kube::Api<convoy::engine::api::ReleaseInventory> =
            kube::Api::namespaced(f.env.client.clone(), &f.env.namespace);
        let state = inv.get("web").await.unwrap().spec.inventory[0].state;
        (state == Some(HealthState::Degraded)).then_some(())
    })
    .await;
    let (code, text) = out(f.env.convoy(&["health", "web"]));
    assert_eq!(code, 1);
    settings(&f.env.namespace).bind(|| insta::assert_snapshot!("health_degraded", text));
}

/// `convoy health --live` sums up what it assessed now, not the health loop's stored summary:
/// with an object added since the last health pass it printed `2 total: 2 healthy` under
/// three Healthy rows.
#[tokio::test]
async fn health_live_counts_what_it_assessed_not_the_stored_summary() {
    let f = Fixture::new(
        "cli-health-live-count",
        &[
            ("a.yaml", &config_map("one", 0, "1")),
            ("b.yaml", &config_map("two", 0, "1")),
        ],
        Fixture::default_health("5m"),
    )
    .await;
    f.install_default_rules().await;
    f.sync().await;
    let memory = HealthMemory::default();
    eventually("Healthy", Duration::from_secs(60), || async {
        let pass = health_pass(&f.ctx, &memory, &f.release().await)
            .await
            .unwrap()
            .unwrap();
        (pass.condition.unwrap().reason == "Healthy").then_some(())
    })
    .await;
    // A third object, applied; no health pass since.
    f.commit(&[
        ("a.yaml", &config_map("one", 0, "1")),
        ("b.yaml", &config_map("two", 0, "1")),
        ("c.yaml", &config_map("three", 0, "1")),
    ]);
    f.sync().await;
    let (code, live) = out(f.env.convoy(&["health", "web", "--live"]));
    assert_eq!(code, 0, "{live}");
    let (_, json_text) = out(f.env.convoy(&["health", "web", "--live", "-o", "json"]));
    let json: serde_json::Value = serde_json::from_str(&json_text).unwrap();
    assert_eq!(json["summary"]["total"], 3, "{json_text}");
    assert_eq!(json["summary"]["healthy"], 3, "{json_text}");
    settings(&f.env.namespace).bind(|| insta::assert_snapshot!("health_live_counts", live));
}

//! The loops, end to end: a Release becomes Applied, InSync and Healthy with no CLI call.

use std::time::Duration;

use convoy::engine::api::Release;
use serde_json::json;

use crate::Daemon;
use crate::support::eventually;
use crate::support::fixture::{Fixture, config_map, deployment};

fn condition(release: &Release, t: &str) -> Option<String> {
    release
        .status
        .as_ref()?
        .condition(t)
        .map(|c| c.status.clone())
}

/// Wait until Applied, InSync and Healthy are all True.
pub async fn all_true(f: &Fixture) -> Release {
    eventually(
        "Applied, InSync and Healthy",
        Duration::from_secs(90),
        || async {
            let r = f.release().await;
            let ok = ["Applied", "InSync", "Healthy"]
                .iter()
                .all(|t| condition(&r, t).as_deref() == Some("True"));
            ok.then_some(r)
        },
    )
    .await
}

fn spec() -> serde_json::Value {
    let mut s = Fixture::default_health("5m");
    s["syncPolicy"] = json!({"interval": "3s"});
    s
}

#[tokio::test]
async fn a_new_release_becomes_applied_in_sync_and_healthy_and_follows_commits_and_drift() {
    let f = Fixture::new(
        "daemon-all",
        &[
            ("a.yaml", &config_map("a", 0, "1")),
            ("d.yaml", &deployment("api", 1, 1)),
        ],
        spec(),
    )
    .await;
    f.install_default_rules().await;
    let daemon = Daemon::start(&f.env.kubeconfig, &["--watch-namespace", &f.env.namespace]).await;
    let first = all_true(&f).await;
    let first_ref = first.status.unwrap().last_successful.unwrap().render_ref;

    // A commit is applied within the interval.
    f.commit(&[
        ("a.yaml", &config_map("a", 0, "2")),
        ("d.yaml", &deployment("api", 1, 1)),
    ]);
    eventually(
        "the new commit applied",
        Duration::from_secs(30),
        || async {
            let cm = f.config_map("a").await?;
            (cm["data"]["value"] == "2").then_some(())
        },
    )
    .await;
    // The objects are applied before the status names the new render: wait for both.
    eventually(
        "the new render recorded, Applied, InSync and Healthy",
        Duration::from_secs(90),
        || async {
            let r = all_true(&f).await;
            let applied = r.status?.last_successful?.render_ref;
            (applied != first_ref).then_some(())
        },
    )
    .await;

    // Drift by another field manager is put back.
    f.kubectl_apply(&json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "a", "namespace": f.env.namespace}, "data": {"value": "tampered"}}))
        .await;
    eventually("the drift corrected", Duration::from_secs(30), || async {
        let cm = f.config_map("a").await?;
        (cm["data"]["value"] == "2").then_some(())
    })
    .await;
    assert!(daemon.metric("convoy_reconciles_total", &["loop=\"controller\""]) > 0.0);
}

#[tokio::test]
async fn a_steady_release_costs_no_writes_for_a_minute() {
    let f = Fixture::new(
        "daemon-quiet",
        &[
            ("a.yaml", &config_map("a", 0, "1")),
            ("d.yaml", &deployment("api", 0, 1)),
        ],
        spec(),
    )
    .await;
    f.install_default_rules().await;
    let daemon = Daemon::start(&f.env.kubeconfig, &["--watch-namespace", &f.env.namespace]).await;
    all_true(&f).await;
    // Let the last edge-triggered passes settle, then count.
    let daemon = &daemon;
    let settled = eventually("writes to settle", Duration::from_secs(30), || {
        let before = daemon.writes();
        async move {
            tokio::time::sleep(Duration::from_secs(5)).await;
            (daemon.writes() == before).then_some(before)
        }
    })
    .await;
    let passes_before = daemon.metric("convoy_reconciles_total", &[]);
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(
        daemon.writes(),
        settled,
        "no writes at steady state:\n{}",
        daemon.get("/metrics").unwrap().1
    );
    assert!(
        daemon.metric("convoy_reconciles_total", &[]) > passes_before + 10.0,
        "the loops kept looking (interval 3s) without writing"
    );
}

#[tokio::test]
async fn controller_and_observer_as_two_processes_behave_like_one() {
    let f = Fixture::new(
        "daemon-roles",
        &[
            ("a.yaml", &config_map("a", 0, "1")),
            ("d.yaml", &deployment("api", 0, 1)),
        ],
        spec(),
    )
    .await;
    f.install_default_rules().await;
    let controller = Daemon::start(
        &f.env.kubeconfig,
        &[
            "--role",
            "controller",
            "--watch-namespace",
            &f.env.namespace,
        ],
    )
    .await;
    let observer = Daemon::start(
        &f.env.kubeconfig,
        &["--role", "observer", "--watch-namespace", &f.env.namespace],
    )
    .await;
    all_true(&f).await;
    assert!(controller.metric("convoy_reconciles_total", &["loop=\"controller\""]) > 0.0);
    assert_eq!(
        controller.metric("convoy_reconciles_total", &["loop=\"health\""]),
        0.0
    );
    assert!(observer.metric("convoy_reconciles_total", &["loop=\"health\""]) > 0.0);
    assert!(observer.metric("convoy_reconciles_total", &["loop=\"drift\""]) > 0.0);
    assert_eq!(
        observer.metric("convoy_reconciles_total", &["loop=\"controller\""]),
        0.0
    );
}

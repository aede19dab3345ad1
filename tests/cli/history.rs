//! `convoy pin`, `unpin`, `history`, and `convoy status` of a rollout held by a wave, against
//! the real control plane (the CLI's default Kubernetes render store in convoy-system).

use serde_json::json;

use crate::support::fixture::{Fixture, config_map, deployment};
use crate::sync_status::{out, settings};

fn render_ref(f: &Fixture) -> String {
    let (_, raw, _) = out(&f.env.convoy(&["status", "web", "-o", "json"]));
    let raw: serde_json::Value = serde_json::from_str(&raw).unwrap();
    raw["lastSuccessful"]["renderRef"]
        .as_str()
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn history_pin_and_unpin_through_the_cli() {
    let f = Fixture::new(
        "cli-history",
        &[("a.yaml", &config_map("settings", 0, "1"))],
        json!({}),
    )
    .await;
    assert_eq!(out(&f.env.convoy(&["sync", "web"])).0, 0);
    let first = render_ref(&f);
    let first_revision = revision(&f);
    f.commit(&[("a.yaml", &config_map("settings", 0, "2"))]);
    assert_eq!(out(&f.env.convoy(&["sync", "web"])).0, 0);
    let (code, two_renders, stderr) = out(&f.env.convoy(&["history", "web"]));
    assert_eq!(code, 0, "{stderr}");

    // History entry 1 is the first render: `pin web 1` means it, not a renderRef prefix.
    let (code, pinned, stderr) = out(&f.env.convoy(&["pin", "web", "1"]));
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(out(&f.env.convoy(&["sync", "web"])).0, 0);
    let settings_cm = f.config_map("settings").await.unwrap();
    assert_eq!(settings_cm["data"]["value"], "1", "the pinned render runs");
    assert_eq!(render_ref(&f), first);
    // What runs came from the first commit, not the branch's head.
    assert_eq!(revision(&f), first_revision);
    let (code, _, no_entry) = out(&f.env.convoy(&["pin", "web", "5"]));
    assert_eq!(code, 4);
    let (code, _, short_prefix) = out(&f.env.convoy(&["pin", "web", "3f9a"]));
    assert_eq!(code, 2, "a 4-character prefix is a usage error");
    let (code, by_prefix, stderr) = out(&f.env.convoy(&["pin", "web", &first[..7]]));
    assert_eq!(code, 0, "{stderr}");
    // convoy diff compares with what the controller would apply: the pinned render.
    let (code, diff, stderr) = out(&f.env.convoy(&["diff", "web"]));
    assert_eq!(
        code, 0,
        "pinned and applied: nothing would change\n{diff}{stderr}"
    );
    let (_, after_pin, _) = out(&f.env.convoy(&["history", "web"]));
    // -o json carries what the table shows: entry numbers, outcomes and markers.
    let (code, json_text, _) = out(&f.env.convoy(&["history", "web", "-o", "json"]));
    assert_eq!(code, 0);
    let entries: Vec<serde_json::Value> = serde_json::from_str(&json_text).unwrap();
    let shown: Vec<(u64, &str, Vec<&str>)> = entries
        .iter()
        .map(|e| {
            (
                e["entry"].as_u64().unwrap(),
                e["outcome"].as_str().unwrap(),
                e["markers"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|m| m.as_str().unwrap())
                    .collect(),
            )
        })
        .collect();
    assert_eq!(
        shown,
        [
            (1, "applied", vec!["current", "pinned"]),
            (2, "applied", vec![])
        ],
        "{after_pin}{json_text}"
    );
    assert_eq!(entries[0]["renderRef"], first.as_str());
    let (_, status, _) = out(&f.env.convoy(&["status", "web"]));

    let (code, unpinned, _) = out(&f.env.convoy(&["unpin", "web"]));
    assert_eq!(code, 0);
    let release = f.release().await;
    assert!(
        !release
            .metadata
            .annotations
            .unwrap_or_default()
            .contains_key("convoy.kumodo.io/pin"),
        "unpin removes the annotation"
    );

    // Unpinning what is not pinned says so (as `kubectl label … key-` says "not labeled").
    let (code, not_pinned, _) = out(&f.env.convoy(&["unpin", "web"]));
    assert_eq!(code, 0);

    let (code, _, unknown) = out(&f.env.convoy(&["pin", "web", "0000dead"]));
    assert_eq!(code, 4, "an unknown render is invalid input");
    settings(&f.env.namespace).bind(|| {
        insta::assert_snapshot!("history_two_renders", two_renders);
        insta::assert_snapshot!("pin_stdout", pinned);
        insta::assert_snapshot!("history_after_pin", after_pin);
        insta::assert_snapshot!("status_pinned", status);
        insta::assert_snapshot!("unpin_stdout", unpinned);
        insta::assert_snapshot!("unpin_not_pinned_stdout", not_pinned);
        insta::assert_snapshot!("pin_unknown_stderr", unknown);
        insta::assert_snapshot!("pin_no_entry_stderr", no_entry);
        insta::assert_snapshot!("pin_short_prefix_stderr", short_prefix);
        insta::assert_snapshot!("pin_by_prefix_stdout", by_prefix);
    });
}

fn revision(f: &Fixture) -> String {
    let (_, raw, _) = out(&f.env.convoy(&["status", "web", "-o", "json"]));
    let raw: serde_json::Value = serde_json::from_str(&raw).unwrap();
    raw["lastSuccessful"]["resolvedSource"]["revision"]
        .as_str()
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn status_shows_the_rollout_and_the_wave_that_holds_it() {
    let stuck = deployment("api", 0, 1).replace(
        "    spec:\n      containers:",
        "    spec:\n      nodeSelector: {convoy-test: nowhere}\n      containers:",
    );
    let mut spec = Fixture::default_health("10m");
    json_patch::merge(
        &mut spec,
        &json!({
            "syncPolicy": {"waves": {"waitForHealth": true, "timeout": "15m"}},
            "failurePolicy": {"deadline": "30m", "rollback": "OnWaveFailure"},
        }),
    );
    let f = Fixture::new(
        "cli-rollout",
        &[
            ("d.yaml", &stuck),
            ("cm.yaml", &config_map("after", 1, "x")),
        ],
        spec,
    )
    .await;
    // Without a daemon, sync waits for the wave's health itself until --timeout, then says
    // what it still waited for and leaves the state as it stands.
    let (code, stdout, stderr) = out(&f.env.convoy(&["sync", "web", "--timeout", "3s"]));
    assert_eq!(code, 1, "a hold exits 1");
    // How many polls see the Deployment before its controller counted the updated replica
    // varies; each new state is one line. The snapshot keeps the first and the last word.
    let stderr: String = stderr
        .lines()
        .filter(|l| !(l.starts_with("wave 1 waits") && l.contains("is Progressing (")))
        .map(|l| format!("{l}\n"))
        .collect();
    let (code, status, _) = out(&f.env.convoy(&["status", "web"]));
    assert_eq!(code, 1);
    settings(&f.env.namespace).bind(|| {
        insta::assert_snapshot!("sync_held_by_wave_stdout", stdout);
        insta::assert_snapshot!("sync_held_by_wave_stderr", stderr);
        insta::assert_snapshot!("status_rollout_held_by_wave", status);
    });
}

#[tokio::test]
async fn status_and_health_list_the_hooks_with_state_duration_and_message() {
    use convoy::engine::health::{HealthMemory, health_pass};
    let job = json!({"template": {"spec": {"containers": [{"name": "x", "image": "busybox"}]}}});
    let f = Fixture::new(
        "cli-hooks",
        &[("a.yaml", &config_map("settings", 0, "1"))],
        json!({"lifecycle": {"hooks": [{"name": "migrate", "phase": "preSync", "job": job}]}}),
    )
    .await;
    let memory = HealthMemory::default();
    crate::support::eventually(
        "the preSync hook to finish and the sync to apply",
        std::time::Duration::from_secs(60),
        || async {
            let _ = health_pass(&f.ctx, &memory, &f.release().await).await;
            let result = f.sync().await;
            (result.outcome?.reason == convoy::engine::api::Reason::Applied).then_some(())
        },
    )
    .await;
    let (_, status, _) = out(&f.env.convoy(&["status", "web"]));
    let (_, health, _) = out(&f.env.convoy(&["health", "web"]));
    let mut s = settings(&f.env.namespace);
    s.add_filter(r"web-migrate-[0-9a-f]{8}", "web-migrate-HASH");
    s.bind(|| {
        insta::assert_snapshot!("status_with_hooks", status);
        insta::assert_snapshot!("health_with_hooks", health);
    });
}

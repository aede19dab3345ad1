//! `convoy sync`, `convoy status` and `convoy get` against the real control plane.

use serde_json::json;

use crate::support::fixture::{Fixture, config_map};

/// Masks what changes between runs: the namespace, render refs, commits and ages.
pub fn settings(namespace: &str) -> insta::Settings {
    let mut s = insta::Settings::clone_current();
    s.add_filter(&regex_escape(namespace), "NAMESPACE");
    s.add_filter(r"sha1:[0-9a-f]{40}", "sha1:COMMIT");
    s.add_filter(r"\b[0-9a-f]{12}\b", "RENDERREF");
    s.add_filter(r"\b\d+(s|m\d*s?|h\d*m?)( ago)?\b", "AGE$2");
    s
}

fn regex_escape(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_string()
            } else {
                format!("\\{c}")
            }
        })
        .collect()
}

pub fn out(o: &std::process::Output) -> (i32, String, String) {
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

const BAD: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: Not_Valid\ndata: {a: b}\n";

#[tokio::test]
async fn sync_then_status_of_an_applied_release() {
    let f = Fixture::new(
        "cli-applied",
        &[("a.yaml", &config_map("settings", 0, "1"))],
        json!({}),
    )
    .await;
    let (code, stdout, stderr) = out(&f.env.convoy(&["sync", "web"]));
    assert_eq!(code, 0, "{stderr}");
    let (status_code, status, _) = out(&f.env.convoy(&["status", "web"]));
    assert_eq!(status_code, 1, "not yet checked for drift or health");
    let (_, get, _) = out(&f.env.convoy(&["get"]));
    settings(&f.env.namespace).bind(|| {
        insta::assert_snapshot!("sync_applied_stdout", stdout);
        insta::assert_snapshot!("sync_applied_progress", stderr);
        insta::assert_snapshot!("status_applied", status);
        insta::assert_snapshot!("get_applied", get);
    });
}

#[tokio::test]
async fn status_of_a_release_waiting_for_sync() {
    let f = Fixture::new(
        "cli-waiting",
        &[("a.yaml", &config_map("settings", 0, "1"))],
        json!({"syncPolicy": {"mode": "Manual"}}),
    )
    .await;
    f.sync().await;
    let (code, status, _) = out(&f.env.convoy(&["status", "web"]));
    assert_eq!(code, 1);
    settings(&f.env.namespace).bind(|| insta::assert_snapshot!("status_waiting_for_sync", status));
}

#[tokio::test]
async fn status_of_an_unappliable_release() {
    let f = Fixture::new(
        "cli-unappliable",
        &[
            ("a.yaml", &config_map("settings", 0, "1")),
            ("bad.yaml", BAD),
        ],
        json!({}),
    )
    .await;
    let (code, stdout, _) = out(&f.env.convoy(&["sync", "web"]));
    assert_eq!(code, 1, "held or failed exits 1");
    let (_, status, _) = out(&f.env.convoy(&["status", "web"]));
    settings(&f.env.namespace).bind(|| {
        insta::assert_snapshot!("sync_unappliable_stdout", stdout);
        insta::assert_snapshot!("status_unappliable", status);
    });
}

#[tokio::test]
async fn status_of_a_forced_sync_that_failed_to_deploy() {
    let f = Fixture::new(
        "cli-deployfailed",
        &[
            ("a.yaml", &config_map("settings", 0, "1")),
            ("bad.yaml", BAD),
        ],
        json!({}),
    )
    .await;
    let (code, _, _) = out(&f.env.convoy(&["sync", "web", "--force", "--yes"]));
    assert_eq!(code, 1);
    let (_, status, _) = out(&f.env.convoy(&["status", "web"]));
    settings(&f.env.namespace).bind(|| insta::assert_snapshot!("status_deploy_failed", status));
    let (_, raw, _) = out(&f.env.convoy(&["status", "web", "-o", "json"]));
    let raw: serde_json::Value = serde_json::from_str(&raw).unwrap();
    assert_eq!(raw["lastAttempted"]["failure"]["stage"], "Syncing");
    assert!(raw["lastHandledForceSyncAt"].is_string());
}

#[tokio::test]
async fn force_without_a_terminal_needs_yes() {
    let f = Fixture::new(
        "cli-force-yes",
        &[("a.yaml", &config_map("settings", 0, "1"))],
        json!({}),
    )
    .await;
    let (code, _, stderr) = out(&f.env.convoy(&["sync", "web", "--force"]));
    assert_eq!(code, 2);
    assert_eq!(
        stderr,
        "error: --force skips the server-side dry run; pass --yes to confirm when not on a terminal\n"
    );
}

#[tokio::test]
async fn a_sync_request_without_a_daemon_times_out_waiting() {
    let f = Fixture::new(
        "cli-request",
        &[("a.yaml", &config_map("settings", 0, "1"))],
        json!({}),
    )
    .await;
    let (code, stdout, stderr) =
        out(&f
            .env
            .convoy(&["sync", "web", "--request", "--wait", "--timeout", "2s"]));
    assert_eq!(code, 1, "{stderr}");
    assert!(stdout.starts_with(&format!(
        "sync of Release {}/web requested at ",
        f.env.namespace
    )));
    assert_eq!(
        stderr,
        format!(
            "waiting for a reconcile to take the request\n\
             error: no reconcile took the request within 2s (no reconcile has ever written its status): \
             is `convoy daemon` running and does it own this Release's shard? \
             (`convoy sync web -n {}` without --request reconciles here)\n",
            f.env.namespace
        )
    );
    let release = f.release().await;
    assert!(
        release
            .metadata
            .annotations
            .unwrap()
            .contains_key("convoy.kumodo.io/sync-requested-at")
    );
}

/// A chart whose render fails with a message that would clear the screen, draw a fake
/// result and set the clipboard (OSC 52).
#[tokio::test]
async fn status_shows_a_hostile_message_without_its_control_sequences() {
    let hostile = "\u{1b}[2J\u{1b}[HApplied\u{1b}]52;c;Y3VybA==\u{7}";
    let f = Fixture::new(
        "cli-hostile",
        &[
            ("Chart.yaml", "apiVersion: v2\nname: web\nversion: 0.1.0\n"),
            (
                "templates/cm.yaml",
                r#"{{ fail "\x1b[2J\x1b[HApplied\x1b]52;c;Y3VybA==\x07" }}"#,
            ),
        ],
        json!({"content": {"type": "helm", "helm": {"releaseName": "web"}}}),
    )
    .await;
    let (code, stdout, stderr) = out(&f.env.convoy(&["sync", "web"]));
    assert_eq!(
        code, 4,
        "a chart that fails to render is invalid input: {stderr}"
    );
    let (_, status, _) = out(&f.env.convoy(&["status", "web"]));
    let (_, get, _) = out(&f.env.convoy(&["get", "-o", "wide"]));
    for (what, text) in [
        ("sync", &stdout),
        ("sync's progress", &stderr),
        ("status", &status),
        ("get", &get),
    ] {
        assert!(
            !text.contains('\u{1b}') && !text.contains('\u{7}'),
            "{what}: {text:?}"
        );
    }
    settings(&f.env.namespace).bind(|| insta::assert_snapshot!("status_hostile_message", status));
    // What the status holds is the message as it was.
    let (_, raw, _) = out(&f.env.convoy(&["status", "web", "-o", "json"]));
    let raw: serde_json::Value = serde_json::from_str(&raw).unwrap();
    let message = raw["conditions"][0]["message"].as_str().unwrap_or_default();
    assert!(message.contains(hostile), "{raw}");
}

//! What `convoy sync` (and the commands beside it) answer and exit with, per DESIGN.md
//! section 4: 0 ok, 1 the answer is no, 2 usage, 3 unreachable, 4 invalid input. Each test
//! pins a defect a fresh-eyes run found.

use serde_json::json;

use crate::basics::convoy;
use crate::support::fixture::{Fixture, config_map};
use crate::support::unreachable_kubeconfig;
use crate::sync_status::{out, settings};

/// The first sync of a Release whose waves wait for health: the CLI polls wave 0's health
/// itself, so the verdict it ends on must come from a pass made after the last wave was
/// applied, not from the Healthy condition the pass after wave 0 wrote (2 of 3 objects).
#[tokio::test]
async fn a_sync_that_waited_for_a_wave_judges_health_after_its_last_wave() {
    let mut spec = Fixture::default_health("5m");
    json_patch::merge(
        &mut spec,
        &json!({"syncPolicy": {"waves": {"waitForHealth": true}}}),
    );
    let f = Fixture::new(
        "cli-sync-waves-health",
        &[
            ("a.yaml", &config_map("a", 0, "1")),
            ("b.yaml", &config_map("b", 0, "1")),
            ("c.yaml", &config_map("c", 1, "1")),
        ],
        spec,
    )
    .await;
    f.install_default_rules().await;
    let (code, stdout, stderr) = out(&f.env.convoy(&["sync", "web", "--timeout", "60s"]));
    assert_eq!(code, 0, "{stdout}{stderr}");
    // What the sync judged is what `convoy health` reads: every wave assessed.
    let (code, health, _) = out(&f.env.convoy(&["health", "web"]));
    assert_eq!(code, 0, "{health}");
    settings(&f.env.namespace).bind(|| {
        insta::assert_snapshot!(stdout, @r"
        Release NAMESPACE/web: Applied: render RENDERREF applied: 3 objects
        Healthy=True Healthy: 3 objects healthy
        ");
    });
}

/// The same in Manual mode: the health pass that finds the last wave healthy fires "wave
/// complete", whose /sync (Manual mode always sends it) the sync takes before it ends. Left
/// pending, the next reconcile (a daemon's) would apply whatever the source holds then,
/// unasked.
#[tokio::test]
async fn a_manual_sync_that_waited_leaves_no_request_pending() {
    let mut spec = Fixture::default_health("5m");
    json_patch::merge(
        &mut spec,
        &json!({"syncPolicy": {"mode": "Manual", "waves": {"waitForHealth": true}}}),
    );
    let f = Fixture::new(
        "cli-sync-manual-pending",
        &[
            ("a.yaml", &config_map("a", 0, "1")),
            ("c.yaml", &config_map("c", 1, "1")),
        ],
        spec,
    )
    .await;
    f.install_default_rules().await;
    let (code, stdout, stderr) = out(&f.env.convoy(&["sync", "web", "--timeout", "60s"]));
    assert_eq!(code, 0, "{stdout}{stderr}");
    let release = f.release().await;
    let requested =
        release.metadata.annotations.as_ref().unwrap()["convoy.kumodo.io/sync-requested-at"]
            .clone();
    let handled = release.status.unwrap().last_handled_sync_at;
    assert_eq!(handled.as_deref(), Some(requested.as_str()));
}

/// YAML that does not parse is invalid input whichever command reads it.
#[tokio::test]
async fn bad_yaml_in_the_source_is_invalid_input_for_sync_diff_and_render() {
    let f = Fixture::new(
        "cli-exit-bad-yaml",
        &[(
            "bad.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata: [unclosed\n",
        )],
        json!({}),
    )
    .await;
    for command in [&["sync", "web"][..], &["diff", "web"], &["render", "web"]] {
        let (code, stdout, stderr) = out(&f.env.convoy(command));
        assert_eq!(code, 4, "convoy {command:?}: {stdout}{stderr}");
    }
}

/// `convoy sync` of a Release being deleted runs its deletion (as a daemon's pass would) and
/// says so: it used to say "nothing to sync" and exit 1 after deleting everything.
#[tokio::test]
async fn a_sync_of_a_release_being_deleted_says_it_ran_the_deletion() {
    let f = Fixture::new(
        "cli-sync-deleting",
        &[("a.yaml", &config_map("a", 0, "1"))],
        json!({}),
    )
    .await;
    let (code, stdout, stderr) = out(&f.env.convoy(&["sync", "web"]));
    assert_eq!(code, 0, "{stdout}{stderr}");
    f.env.kubectl_ok(&[
        "delete",
        "release",
        "web",
        "-n",
        &f.env.namespace,
        "--wait=false",
    ]);
    let (code, stdout, stderr) = out(&f.env.convoy(&["sync", "web"]));
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert_eq!(
        stdout.trim_end(),
        format!(
            "Release {}/web was being deleted: its deletion ran here (what it applied is pruned but what asks to be kept, its inventory and renders removed) and it is gone",
            f.env.namespace
        )
    );
    assert!(f.config_map("a").await.is_none(), "pruned");
    assert!(f.releases().get_opt("web").await.unwrap().is_none());
}

#[tokio::test]
async fn a_kind_the_cluster_does_not_serve_is_invalid_input_for_sync_and_diff() {
    let widget =
        "apiVersion: example.convoy.test/v1\nkind: Widget\nmetadata:\n  name: w\nspec: {}\n";
    let f = Fixture::new(
        "cli-exit-unknown-kind",
        &[
            ("a.yaml", &config_map("a", 0, "1")),
            ("widget.yaml", widget),
        ],
        json!({}),
    )
    .await;
    for command in [&["sync", "web"][..], &["diff", "web"]] {
        let (code, stdout, stderr) = out(&f.env.convoy(command));
        assert_eq!(code, 4, "convoy {command:?}: {stdout}{stderr}");
        assert!(
            format!("{stdout}{stderr}")
                .contains("does not serve kind Widget in example.convoy.test/v1"),
            "convoy {command:?} names the kind: {stdout}{stderr}"
        );
    }
}

/// A Release whose GitRepository does not exist: the input names an object that is not
/// there, as a mistyped Release name does (exit 4 in every command), not an unreachable
/// source (3).
#[tokio::test]
async fn a_missing_source_object_is_invalid_input_for_sync_diff_and_render() {
    let f = Fixture::new(
        "cli-exit-missing-source",
        &[("a.yaml", &config_map("a", 0, "1"))],
        json!({"source": {"name": "absent"}}),
    )
    .await;
    for command in [&["sync", "web"][..], &["diff", "web"], &["render", "web"]] {
        let (code, stdout, stderr) = out(&f.env.convoy(command));
        assert_eq!(code, 4, "convoy {command:?}: {stdout}{stderr}");
        assert!(
            format!("{stdout}{stderr}").contains("not found"),
            "convoy {command:?}: {stdout}{stderr}"
        );
    }
}

#[test]
fn check_of_a_cluster_that_cannot_be_reached_exits_3() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = unreachable_kubeconfig(dir.path());
    let (code, stdout, stderr) = convoy(&["--kubeconfig", kubeconfig.to_str().unwrap(), "check"]);
    assert_eq!(code, 3, "{stdout}{stderr}");
    assert!(stdout.starts_with("✗ cluster: "), "{stdout}");
}

/// `--wait` only means something with `--request`, `--yes` only with `--force`: clap refuses
/// them alone (exit 2) before anything is asked of a cluster.
#[test]
fn sync_refuses_wait_without_request_and_yes_without_force() {
    let (code, _, stderr) = convoy(&["sync", "web", "--wait"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.starts_with(
            "error: the following required arguments were not provided:\n  --request\n"
        ),
        "{stderr}"
    );
    let (code, _, stderr) = convoy(&["sync", "web", "--yes"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr
            .starts_with("error: the following required arguments were not provided:\n  --force\n"),
        "{stderr}"
    );
}

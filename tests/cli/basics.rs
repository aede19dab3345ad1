//! Help, install and completions: the commands of the foundation.

use crate::support::{convoy_bin, unreachable_kubeconfig};

/// Run convoy with `args`; return (exit code, stdout, stderr).
pub fn convoy(args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(convoy_bin())
        .args(args)
        .env("NO_COLOR", "1")
        .env_remove("KUBECONFIG")
        .output()
        .expect("run convoy");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn help_lists_the_commands_that_work() {
    let (code, stdout, _) = convoy(&["--help"]);
    assert_eq!(code, 0);
    insta::assert_snapshot!(stdout);
}

#[test]
fn every_command_help_has_an_example() {
    let (_, stdout, _) = convoy(&["--help"]);
    let commands: Vec<&str> = stdout
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.is_empty())
        .filter_map(|l| l.strip_prefix("  "))
        .filter(|l| !l.starts_with(' '))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .collect();
    assert!(commands.contains(&"install"), "{commands:?}");
    for command in commands {
        let (code, help, _) = convoy(&[command, "--help"]);
        assert_eq!(code, 0);
        assert!(
            help.contains("Example"),
            "`convoy {command} --help` has no example:\n{help}"
        );
    }
}

#[test]
fn install_dry_run_prints_every_crd() {
    let (code, stdout, stderr) = convoy(&["install", "--crds-only", "--dry-run"]);
    assert_eq!(code, 0, "{stderr}");
    let names: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("  name: "))
        .collect();
    insta::assert_snapshot!(names.join("\n"), @r"
    releases.core.convoy.kumodo.io
    releaseinventories.core.convoy.kumodo.io
    clusters.core.convoy.kumodo.io
    gitrepositories.source.convoy.kumodo.io
    helmregistries.source.convoy.kumodo.io
    ociregistries.source.convoy.kumodo.io
    healthrulesets.health.convoy.kumodo.io
    globalhealthrulesets.health.convoy.kumodo.io
    ");
    insta::assert_snapshot!("install_crds_dry_run", stdout);
}

#[test]
fn install_against_an_unreachable_server_exits_3_naming_the_address() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = unreachable_kubeconfig(dir.path());
    let (code, stdout, stderr) = convoy(&[
        "install",
        "--crds-only",
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
    ]);
    assert_eq!(code, 3, "{stderr}");
    assert_eq!(stdout, "");
    let first = stderr
        .lines()
        .find(|l| l.starts_with("error:"))
        .unwrap_or_default();
    assert!(
        first.starts_with("error: cannot reach the API server at https://127.0.0.1:9"),
        "{stderr}"
    );
}

#[test]
fn an_unknown_shell_is_a_usage_error() {
    let (code, stdout, stderr) = convoy(&["completions", "tcsh"]);
    assert_eq!(code, 2);
    assert_eq!(stdout, "");
    insta::assert_snapshot!(stderr, @r"
    error: invalid value 'tcsh' for '<SHELL>'
      [possible values: bash, zsh, fish, powershell, elvish]

      tip: a similar value exists: 'zsh'

    For more information, try '--help'.
    ");
}

/// A render reads its source from the cache and a fetch writes into it: a retention shorter
/// than either could remove what they use. Refused before anything connects.
#[test]
fn a_cache_retention_shorter_than_a_render_is_a_usage_error() {
    let (code, stdout, stderr) = convoy(&["daemon", "--cache-retention", "30s"]);
    assert_eq!(code, 2);
    assert_eq!(stdout, "");
    insta::assert_snapshot!(stderr, @"error: --cache-retention 30s is shorter than --render-timeout 2m: a render reads its source from the cache for up to that long; give --cache-retention at least 2m");
    let (code, _, stderr) = convoy(&[
        "daemon",
        "--cache-retention",
        "5m",
        "--render-timeout",
        "1m",
        "--fetch-timeout",
        "10m",
    ]);
    assert_eq!(code, 2);
    insta::assert_snapshot!(stderr, @"error: --cache-retention 5m is shorter than --fetch-timeout 10m: a fetch writes into the cache for up to that long; give --cache-retention at least 10m");
}

/// A source URL prefix that would allow more than it says (no trailing slash: `team-a`
/// would allow `team-ab`) is refused with the rule before the daemon starts.
#[test]
fn a_source_url_prefix_that_allows_more_than_it_says_is_a_usage_error() {
    let (code, stdout, stderr) =
        convoy(&["daemon", "--allow-source-url", "https://github.com/team-a"]);
    assert_eq!(code, 2);
    assert_eq!(stdout, "");
    insta::assert_snapshot!(stderr, @r#"
    error: invalid value 'https://github.com/team-a' for '--allow-source-url <PREFIX>': source URL prefix "https://github.com/team-a" must end in / (it names a directory, or a whole server as scheme://host/)

    For more information, try '--help'.
    "#);
}

#[test]
fn a_full_install_dry_run_holds_rbac_rules_and_the_daemon() {
    let (code, stdout, stderr) = convoy(&["install", "--dry-run"]);
    assert_eq!(code, 0, "{stderr}");
    let kinds: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("kind: "))
        .collect();
    for kind in [
        "CustomResourceDefinition",
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "GlobalHealthRuleSet",
        "Deployment",
    ] {
        assert!(kinds.contains(&kind), "{kind} missing from {kinds:?}");
    }
    assert_eq!(
        kinds.iter().filter(|k| **k == "Deployment").count(),
        2,
        "controller and observer"
    );
    assert!(
        stdout.contains("- --role"),
        "the Deployments run convoy daemon --role"
    );
}

/// `convoy install --allow-source-url` and `--allow-cluster-server` restrict both daemons
/// (the observer fetches what it renders too, and reaches Clusters for dry runs and health).
#[test]
fn an_install_restricted_to_url_prefixes_passes_them_to_both_daemons() {
    let (code, stdout, stderr) = convoy(&[
        "install",
        "--dry-run",
        "--allow-source-url",
        "https://github.com/team-a/",
        "--allow-source-url",
        "oci://ghcr.io/team-a/",
        "--allow-cluster-server",
        "https://prod.example.com:6443/",
    ]);
    assert_eq!(code, 0, "{stderr}");
    for arg in [
        "--allow-source-url=https://github.com/team-a/",
        "--allow-source-url=oci://ghcr.io/team-a/",
        "--allow-cluster-server=https://prod.example.com:6443/",
    ] {
        assert_eq!(
            stdout.matches(&format!("- {arg}\n")).count(),
            2,
            "{arg} in the controller's and the observer's args:\n{stdout}"
        );
    }
}

/// A Cluster server prefix is an https or http directory; anything else is refused before
/// anything connects, by the CLI as by the daemon.
#[test]
fn a_cluster_server_prefix_that_is_no_api_server_is_a_usage_error() {
    let (code, stdout, stderr) = convoy(&[
        "sync",
        "web",
        "--allow-cluster-server",
        "ssh://prod.example.com/",
    ]);
    assert_eq!(code, 2);
    assert_eq!(stdout, "");
    insta::assert_snapshot!(stderr, @r#"
    error: invalid value 'ssh://prod.example.com/' for '--allow-cluster-server <PREFIX>': Cluster server prefix "ssh://prod.example.com/" has scheme "ssh", not one of https, http

    For more information, try '--help'.
    "#);
}

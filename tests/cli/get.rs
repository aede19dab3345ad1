//! `convoy get` with kubectl's habits, and the errors of a first hour with convoy.

use std::io::BufRead;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::json;

use crate::support::fixture::{Fixture, config_map};
use crate::support::{convoy_bin, path_with_testenv, remote_control_plane};
use crate::sync_status::{out, settings};

/// Two Releases, `web` (label team=a) and `api` (team=b), both synced.
async fn two_releases(test: &str) -> Fixture {
    let f = Fixture::new(
        test,
        &[("a.yaml", &config_map("settings", 0, "1"))],
        json!({}),
    )
    .await;
    f.repo
        .commit(&[("api/a.yaml", &config_map("other", 0, "1"))], "api");
    f.add_release("api", "api", json!({})).await;
    for (name, team) in [("web", "a"), ("api", "b")] {
        let o = f.env.kubectl(&[
            "label",
            "release",
            name,
            &format!("team={team}"),
            "-n",
            &f.env.namespace,
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert_eq!(out(&f.env.convoy(&["sync", name])).0, 0);
    }
    f
}

#[tokio::test]
async fn get_shows_one_release_by_name_label_or_sorted_and_in_each_format() {
    let f = two_releases("cli-get").await;
    let (code, one, _) = out(&f.env.convoy(&["get", "web"]));
    assert_eq!(code, 0);
    let (_, by_label, _) = out(&f.env.convoy(&["get", "-l", "team=b"]));
    let (_, wide, _) = out(&f.env.convoy(&["get", "web", "-o", "wide"]));
    let (_, names, _) = out(&f.env.convoy(&["get", "-o", "name"]));
    let (_, sorted, _) =
        out(&f
            .env
            .convoy(&["get", "--sort-by", "{.metadata.labels.team}", "-o", "name"]));
    let (_, sorted_desc_name, _) =
        out(&f
            .env
            .convoy(&["get", "--sort-by", ".metadata.name", "-o", "name"]));
    // -o yaml of one Release is the object, without managedFields; of several, a List.
    let (_, yaml, _) = out(&f.env.convoy(&["get", "web", "-o", "yaml"]));
    assert!(
        yaml.starts_with("apiVersion: core.convoy.kumodo.io/v1alpha1\nkind: Release\n"),
        "{yaml}"
    );
    assert!(!yaml.contains("managedFields"));
    let (_, with_fields, _) =
        out(&f
            .env
            .convoy(&["get", "web", "-o", "yaml", "--show-managed-fields"]));
    assert!(with_fields.contains("managedFields"));
    let (_, list, _) = out(&f.env.convoy(&["get", "-o", "json"]));
    let list: serde_json::Value = serde_json::from_str(&list).unwrap();
    assert_eq!(list["kind"], "List");
    assert_eq!(list["items"].as_array().unwrap().len(), 2);
    settings(&f.env.namespace).bind(|| {
        insta::assert_snapshot!("get_one", one);
        insta::assert_snapshot!("get_by_label", by_label);
        insta::assert_snapshot!("get_wide", wide);
        insta::assert_snapshot!("get_names", names);
        insta::assert_snapshot!("get_sorted_by_team", sorted);
        insta::assert_snapshot!("get_sorted_by_name", sorted_desc_name);
    });
}

#[tokio::test]
async fn a_mistyped_name_or_an_empty_namespace_says_where_it_looked() {
    let f = two_releases("cli-typo").await;
    let (code, _, typo) = out(&f.env.convoy(&["status", "wbe"]));
    assert_eq!(code, 4);
    // The commands that act on one Release say it as `status` does.
    for command in [
        &["sync", "wbe"][..],
        &["sync", "wbe", "--request"],
        &["diff", "wbe"],
        &["render", "wbe"],
    ] {
        assert_eq!(
            out(&f.env.convoy(command)),
            (4, String::new(), typo.clone()),
            "convoy {command:?}"
        );
    }
    let (code, _, get_typo) = out(&f.env.convoy(&["get", "ap"]));
    assert_eq!(code, 4);
    let (code, _, far) = out(&f.env.convoy(&["history", "database"]));
    assert_eq!(code, 4);
    let (code, stdout, empty) = out(&f.env.convoy(&["get", "-l", "team=none"]));
    assert_eq!((code, stdout.as_str()), (0, ""));
    settings(&f.env.namespace).bind(|| {
        insta::assert_snapshot!("typo_status", typo);
        insta::assert_snapshot!("typo_get", get_typo);
        insta::assert_snapshot!("typo_far", far);
        insta::assert_snapshot!("get_nothing_found", empty);
    });
}

/// A malformed `-l` is a usage error (exit 2) that names the selector, said before anything
/// is sent: it was the API server's 400 as a Rust debug dump (`ApiError: … (Status { status:
/// Some(Failure) …`), exit 4.
#[tokio::test]
async fn a_malformed_label_selector_is_a_usage_error_naming_it() {
    let f = two_releases("cli-bad-selector").await;
    let (code, stdout, stderr) = out(&f.env.convoy(&["get", "-l", "a in (", "-A"]));
    assert_eq!((code, stdout.as_str()), (2, ""), "{stderr}");
    let (code, _, watched) = out(&f.env.convoy(&["get", "-l", "team=a,b c", "-w"]));
    assert_eq!(code, 2, "{watched}");
    insta::assert_snapshot!(stderr, @r#"error: invalid label selector "a in (" at "a in (": a set is written (a,b)"#);
    insta::assert_snapshot!(watched, @r#"error: invalid label selector "team=a,b c" at "b c": label key "b c" is not valid: at most 63 characters: letters, digits, '-', '_' or '.', beginning and ending with a letter or digit"#);
}

/// A Release looked for in the wrong namespace: the error says where one of that name is
/// (a forgotten `-n`), found by a cluster-wide list.
#[tokio::test]
async fn a_release_of_another_namespace_is_named_with_the_flag_to_add() {
    let f = Fixture::new(
        "cli-elsewhere",
        &[("a.yaml", &config_map("settings", 0, "1"))],
        json!({}),
    )
    .await;
    // A name no other test gives a Release, so the cluster-wide list finds this one only.
    f.add_release("only-here", "app", json!({})).await;
    let run = |args: &[&str]| {
        let o = Command::new(convoy_bin())
            .arg("--kubeconfig")
            .arg(&f.env.kubeconfig)
            .args(["-n", "default"])
            .args(args)
            .env("PATH", path_with_testenv())
            .output()
            .unwrap();
        out(&o)
    };
    let (code, _, status) = run(&["status", "only-here"]);
    assert_eq!(code, 4);
    for command in [
        &["get", "only-here"][..],
        &["history", "only-here"],
        &["diff", "only-here"],
    ] {
        assert_eq!(
            run(command),
            (4, String::new(), status.clone()),
            "convoy {command:?}"
        );
    }
    settings(&f.env.namespace).bind(|| {
        insta::assert_snapshot!(status, @r#"error: Release "only-here" not found in namespace default (a Release "only-here" exists in namespace NAMESPACE: add -n NAMESPACE)"#);
    });
}

#[tokio::test]
async fn get_watch_prints_a_change_as_it_happens() {
    let f = two_releases("cli-get-watch").await;
    let mut child = Command::new(convoy_bin())
        .arg("--kubeconfig")
        .arg(&f.env.kubeconfig)
        .args(["-n", &f.env.namespace, "get", "web", "-w"])
        .env("PATH", path_with_testenv())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (lines_tx, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            if lines_tx.send(line.unwrap_or_default()).is_err() {
                return;
            }
        }
    });
    let next = || lines.recv_timeout(Duration::from_secs(30)).unwrap();
    assert!(next().starts_with("NAME"), "the header first");
    assert!(next().starts_with("web "), "then the row");
    // A drift check writes InSync: the watch prints the row again, with it.
    let pass = convoy::engine::drift::drift_pass(&f.ctx, &f.release().await)
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(
        pass.verdict,
        convoy::engine::drift::Verdict::InSync { .. }
    ));
    let changed = next();
    let _ = child.kill();
    let _ = child.wait();
    let columns: Vec<&str> = changed.split("   ").collect();
    assert_eq!(columns[0], "web");
    assert_eq!(columns[3], "True", "INSYNC: {changed}");
}

/// `convoy … | head` closes the pipe early: convoy ends quietly with exit 0. (`install
/// --dry-run` prints more than a pipe holds, so the write after `head` left fails.)
#[test]
fn a_closed_pipe_ends_quietly() {
    let o = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "'{}' install --dry-run 2>stderr.txt | head -c 10 >/dev/null; echo \"${{PIPESTATUS[0]}}\"; cat stderr.txt",
            convoy_bin().display()
        ))
        .current_dir(tempfile::tempdir().unwrap().keep())
        .output()
        .unwrap();
    let (_, stdout, _) = out(&o);
    assert_eq!(stdout, "0\n", "convoy's exit status, then its stderr");
}

/// An API server without convoy's CRDs: every command says to run `convoy install`.
#[tokio::test]
async fn without_the_crds_every_command_says_to_install_them() {
    let plane = remote_control_plane();
    let run = |args: &[&str]| {
        let o = Command::new(convoy_bin())
            .arg("--kubeconfig")
            .arg(&plane.kubeconfig)
            .args(["-n", "default"])
            .args(args)
            .env("PATH", path_with_testenv())
            .output()
            .unwrap();
        out(&o)
    };
    let (code, _, get) = run(&["get"]);
    assert_eq!(code, 4);
    let (code, _, status) = run(&["status", "web"]);
    assert_eq!(code, 4);
    for command in [
        &["sync", "web"][..],
        &["sync", "web", "--request"],
        &["diff", "web"],
        &["render", "web"],
        &["health", "web"],
        &["history", "web"],
    ] {
        assert_eq!(
            run(command),
            (4, String::new(), status.clone()),
            "convoy {command:?}"
        );
    }
    let server = std::fs::read_to_string(&plane.kubeconfig)
        .unwrap()
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: ").map(str::to_string))
        .unwrap();
    let mut s = insta::Settings::clone_current();
    s.add_filter(&regex::escape(&server), "SERVER");
    s.bind(|| {
        insta::assert_snapshot!("no_crds_get", get);
        insta::assert_snapshot!("no_crds_status", status);
    });
}

#[test]
fn a_missing_kubeconfig_is_one_line_with_the_fix() {
    let o = Command::new(convoy_bin())
        .args(["--kubeconfig", "/nonexistent/kubeconfig", "get"])
        .output()
        .unwrap();
    let (code, _, stderr) = out(&o);
    assert_eq!(
        code, 4,
        "invalid input, not an unreachable cluster: {stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    insta::assert_snapshot!("missing_kubeconfig", stderr);
}

/// The default kubeconfig (`~/.kube/config`, or the files a `KUBECONFIG` list names) that is
/// there but cannot be used is named with its fault, as kubectl does: convoy used to fall back
/// to the in-cluster environment, so a CLI in a pod acted on the pod's own cluster instead. A
/// listed file that is not there is passed over, as kubectl does; only no kubeconfig, or an
/// empty one, means the in-cluster environment.
#[test]
fn a_default_kubeconfig_that_cannot_be_used_is_an_error_not_the_pods_cluster() {
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir(home.path().join(".kube")).unwrap();
    let broken = home.path().join(".kube/config");
    std::fs::write(
        &broken,
        "apiVersion: v1\nkind: Config\ncurrent-context: gone\nclusters: []\ncontexts: []\nusers: []\n",
    )
    .unwrap();
    let empty = home.path().join("empty.kubeconfig");
    std::fs::write(&empty, "apiVersion: v1\nkind: Config\n").unwrap();
    let get = |kubeconfig: Option<String>| {
        let mut c = Command::new(convoy_bin());
        c.arg("get").env("HOME", home.path());
        match kubeconfig {
            Some(list) => c.env("KUBECONFIG", list),
            None => c.env_remove("KUBECONFIG"),
        };
        // What a pod's environment says (the token file is not there: kube's in-cluster
        // config fails on it, naming the in-cluster environment).
        c.env("KUBERNETES_SERVICE_HOST", "10.96.0.1")
            .env("KUBERNETES_SERVICE_PORT", "443");
        out(&c.output().unwrap())
    };
    let missing = home.path().join("missing.kubeconfig");
    for kubeconfig in [
        None,
        Some(format!("{}:{}", missing.display(), broken.display())),
    ] {
        let (code, _, stderr) = get(kubeconfig.clone());
        assert_eq!(code, 4, "{kubeconfig:?}: {stderr}");
        assert!(
            stderr.starts_with("error: cannot load the kubeconfig: ") && stderr.contains("gone"),
            "{kubeconfig:?}: {stderr}"
        );
    }
    let (code, _, stderr) = get(Some(format!("{}:{}", missing.display(), empty.display())));
    assert_eq!(code, 4, "{stderr}");
    assert!(stderr.starts_with("error: no kubeconfig found"), "{stderr}");
}

#[tokio::test]
async fn history_without_the_store_namespace_says_so() {
    let f = Fixture::new(
        "cli-no-store",
        &[("a.yaml", &config_map("settings", 0, "1"))],
        json!({}),
    )
    .await;
    let (code, _, stderr) = out(&f.env.convoy(&[
        "history",
        "web",
        "--render-store",
        "kubernetes:no-such-namespace",
    ]));
    assert_eq!(code, 3, "{stderr}");
    settings(&f.env.namespace).bind(|| {
        insta::assert_snapshot!("history_no_store_namespace", stderr);
    });
}

/// The shell asks convoy for candidates (`COMPLETE=fish convoy -- …`): Release names and
/// namespaces come from the cluster, `pin NAME` offers the history's entries.
#[tokio::test]
async fn release_names_namespaces_and_history_entries_complete_from_the_cluster() {
    let f = two_releases("cli-complete").await;
    let kubeconfig = f.env.kubeconfig.to_string_lossy().into_owned();
    let complete = |words: &[&str]| {
        let o = Command::new(convoy_bin())
            .args(["--", "convoy", "--kubeconfig", &kubeconfig])
            .args(words)
            .env("COMPLETE", "fish")
            .env("PATH", path_with_testenv())
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    assert_eq!(complete(&["status", "-n", &f.env.namespace, "w"]), "web\n");
    let names: Vec<String> = complete(&["get", "-n", &f.env.namespace, ""])
        .lines()
        .filter(|l| !l.starts_with('-'))
        .map(str::to_string)
        .collect();
    assert_eq!(names, ["api", "web"], "and the flags after them");
    let prefix = &f.env.namespace[..f.env.namespace.len() - 2];
    assert!(
        complete(&["get", "-n", prefix])
            .lines()
            .any(|l| l == f.env.namespace),
        "namespaces complete"
    );
    let entries = complete(&["pin", "-n", &f.env.namespace, "web", ""]);
    assert!(entries.starts_with("1\trender "), "{entries}");
    // The registration script the shell sources calls back into convoy.
    let script = Command::new(convoy_bin())
        .args(["completions", "bash"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&script.stdout).contains("COMPLETE=\"bash\""));
}

/// A proxy from the environment is used as kubectl uses it: `HTTPS_PROXY` carries the
/// requests (here to a listener that answers nothing: exit 3, naming the server), unless
/// `NO_PROXY` names the server (not when it names only the proxy), and never for loopback, as
/// kubectl; the errors name the proxy, not its credentials. Before, any `HTTPS_PROXY` stopped every command ("requires the
/// disabled feature kube/http-proxy").
#[tokio::test]
async fn the_environments_proxy_is_used_unless_no_proxy_names_the_server() {
    let f = two_releases("cli-proxy").await;
    // A proxy that refuses every tunnel, at another address than the server's.
    let (port, connections) = crate::support::servers::refusing_proxy("127.0.0.2:0");
    let through = || connections.load(std::sync::atomic::Ordering::SeqCst);
    // The same cluster named by a host that is not loopback (Go, so kubectl, never proxies
    // loopback), which only the proxy would be asked to reach.
    let scratch = tempfile::tempdir().unwrap();
    let far = scratch.path().join("far.kubeconfig");
    let text = std::fs::read_to_string(&f.env.kubeconfig).unwrap();
    let server = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: "))
        .unwrap()
        .to_string();
    std::fs::write(
        &far,
        text.replace(&server, "https://api.example.invalid:6443"),
    )
    .unwrap();
    let get = |kubeconfig: &std::path::Path, https_proxy: &str, no_proxy: &str| {
        let mut c = Command::new(convoy_bin());
        c.arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["-n", &f.env.namespace, "--request-timeout", "5s"])
            .args(["get", "web", "-o", "name"])
            .env("HTTPS_PROXY", https_proxy)
            .env("NO_PROXY", no_proxy)
            .env_remove("https_proxy")
            .env_remove("no_proxy")
            .env("NO_COLOR", "1");
        out(&c.output().unwrap())
    };
    let proxy = format!("http://convoy:proxy-secret@127.0.0.2:{port}");
    // Loopback: direct, as kubectl goes.
    let (code, stdout, stderr) = get(&f.env.kubeconfig, &proxy, "");
    assert_eq!(
        (code, stdout.as_str()),
        (0, "release.core.convoy.kumodo.io/web\n"),
        "{stderr}"
    );
    assert_eq!(through(), 0);
    // NO_PROXY names only the proxy's address (kube then went direct): through the proxy.
    let (code, _, proxied) = get(&far, &proxy, "127.0.0.2");
    assert_eq!(code, 3, "{proxied}");
    assert_eq!(through(), 1, "not through the proxy");
    // NO_PROXY names the server (by a wildcard domain and port, as Go reads them): direct,
    // and the name does not resolve.
    let (code, _, stderr) = get(&far, &proxy, "*.example.invalid:6443");
    assert_eq!(code, 3, "{stderr}");
    assert_eq!(through(), 1, "through the proxy: {stderr}");
    // What kubectl reads and kube refused ("failed to parse NO_PROXY", exit 4): a trailing
    // comma, `*` among other entries. Loopback direct; the far server direct too.
    let (code, stdout, stderr) = get(&f.env.kubeconfig, &proxy, "localhost,");
    assert_eq!(
        (code, stdout.as_str()),
        (0, "release.core.convoy.kumodo.io/web\n"),
        "{stderr}"
    );
    for no_proxy in ["*.example.invalid:6443,", "127.0.0.2, ,*"] {
        let (code, _, stderr) = get(&far, &proxy, no_proxy);
        assert_eq!(code, 3, "NO_PROXY={no_proxy}: {stderr}");
        assert!(!stderr.contains("through the proxy"), "{stderr}");
    }
    assert_eq!(through(), 1, "through the proxy");
    // A kubeconfig's own proxy-url is used whatever NO_PROXY says, as kubectl uses it (kube
    // dropped it when NO_PROXY named the proxy's address, and went direct).
    let own = scratch.path().join("own.kubeconfig");
    let far_text = std::fs::read_to_string(&far).unwrap();
    std::fs::write(
        &own,
        far_text.replace(
            "server: https://api.example.invalid:6443",
            &format!(
                "server: https://api.example.invalid:6443\n    proxy-url: http://127.0.0.2:{port}"
            ),
        ),
    )
    .unwrap();
    for (https_proxy, no_proxy) in [
        ("", "127.0.0.2"),
        ("", "*"),
        (proxy.as_str(), "127.0.0.0/8"),
    ] {
        let before = through();
        let (code, _, stderr) = get(&own, https_proxy, no_proxy);
        assert_eq!(code, 3, "{stderr}");
        assert_eq!(
            through(),
            before + 1,
            "not through proxy-url, NO_PROXY={no_proxy}: {stderr}"
        );
    }
    // A proxy convoy cannot use is named by its variable, not its value (exit 4: invalid
    // input, which a retry does not fix).
    let (code, _, unusable) = get(&far, "https://convoy:proxy-secret@127.0.0.2:1", "");
    assert_eq!(code, 4, "{unusable}");
    insta::assert_snapshot!(
        format!("{proxied}{unusable}").replace(&port.to_string(), "PORT"),
        @r"
    error: cannot reach the API server at https://api.example.invalid:6443 through the proxy http://127.0.0.2:PORT: ServiceError: client error (Connect): tunnel error: unsuccessful
    error: HTTPS_PROXY names a proxy scheme convoy cannot reach API servers through (http and socks5 only); kubectl's forms are http://[user:password@]host:port and socks5://host:port
    "
    );
}

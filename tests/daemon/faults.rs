//! Faults a daemon that runs for months lives through, each on a control plane of the test's
//! own (so stopping its parts disturbs no other test): an API server that hangs for 30 s, an
//! etcd that restarts in the middle of a sync, connections that go quiet without a word, and
//! SIGTERM with a pass that would never end.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use convoy::engine::api::{GitRepository, HelmRegistry, Release, ReleaseInventory};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams};
use serde_json::json;

use crate::Daemon;
use crate::support::fixture::Fixture;
use crate::support::{ControlPlane, TestEnv, eventually};

/// Every Release's interval: the daemon must be back within one after a fault ends.
const INTERVAL: Duration = Duration::from_secs(30);

/// The fault tests run one at a time. Each measures the daemon against a deadline and its CPU
/// seconds while it injects a fault into its own control plane; run side by side (they sort
/// first, so the test harness starts them together), one test's 500-object apply and hung
/// API server took the two cores the other's recovery was being timed on.
static ONE_FAULT_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// `objects` ConfigMaps of Release `release`, spread over three waves, all holding `value`.
fn objects(release: &str, objects: usize, value: &str) -> String {
    (0..objects)
        .map(|j| {
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {release}-{j}\n  labels: {{app: demo}}\n  annotations:\n    convoy.kumodo.io/sync-wave: \"{}\"\ndata:\n  value: \"{value}\"\n",
                j % 3
            )
        })
        .collect::<Vec<_>>()
        .join("---\n")
}

/// `releases` Releases (`web` on `app/`, `r1`… on `r1/`…) of `per_release` ConfigMaps each,
/// with `value`, on `plane`; the GitRepository is looked at every 2 s.
async fn releases_on(
    plane: &ControlPlane,
    test: &str,
    releases: usize,
    per_release: usize,
) -> Fixture {
    let env = TestEnv::on(plane, test).await;
    let spec = json!({"syncPolicy": {"interval": format!("{}s", INTERVAL.as_secs())}});
    let f = Fixture::in_env(
        env,
        &[("cm.yaml", &objects("web", per_release, "1"))],
        spec.clone(),
    )
    .await;
    let files: Vec<(String, String)> = (1..releases)
        .map(|i| {
            (
                format!("r{i}/cm.yaml"),
                objects(&format!("r{i}"), per_release, "1"),
            )
        })
        .collect();
    let refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, c)| (p.as_str(), c.as_str()))
        .collect();
    f.repo.commit(&refs, "more releases");
    for i in 1..releases {
        f.add_release(&format!("r{i}"), &format!("r{i}"), spec.clone())
            .await;
    }
    f.kubectl_apply(&json!({
        "apiVersion": "source.convoy.kumodo.io/v1alpha1", "kind": "GitRepository",
        "metadata": {"name": "repo", "namespace": f.env.namespace},
        "spec": {"url": f.repo.file_url(), "ref": {"branch": "main"}, "interval": "2s"},
    }))
    .await;
    f
}

/// Commit `value` into every Release's ConfigMaps.
fn commit_value(f: &Fixture, releases: usize, per_release: usize, value: &str) {
    let mut files = vec![(
        "app/cm.yaml".to_string(),
        objects("web", per_release, value),
    )];
    files.extend((1..releases).map(|i| {
        (
            format!("r{i}/cm.yaml"),
            objects(&format!("r{i}"), per_release, value),
        )
    }));
    let refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, c)| (p.as_str(), c.as_str()))
        .collect();
    f.repo.commit(&refs, &format!("value {value}"));
}

/// `Some` once all `expected` ConfigMaps hold `value` and every Release is Applied.
async fn all_applied(f: &Fixture, expected: usize, value: &str) -> Option<()> {
    let cms: Api<ConfigMap> = Api::namespaced(f.env.client.clone(), &f.env.namespace);
    let list = cms
        .list(&ListParams::default().labels("app=demo"))
        .await
        .ok()?;
    let holding = list
        .items
        .iter()
        .filter(|c| {
            c.data
                .as_ref()
                .and_then(|d| d.get("value"))
                .map(String::as_str)
                == Some(value)
        })
        .count();
    if holding != expected {
        return None;
    }
    let releases = f.releases().list(&ListParams::default()).await.ok()?;
    releases.items.iter().all(applied).then_some(())
}

/// Whether the Release's `Applied` condition is True.
fn applied(r: &Release) -> bool {
    r.status
        .as_ref()
        .and_then(|s| s.condition("Applied"))
        .is_some_and(|c| c.status.is_true())
}

/// Wait until the API server says it is ready (`/readyz`, which includes its etcd check).
async fn api_server_ready(client: &kube::Client) {
    eventually(
        "the API server ready again",
        Duration::from_secs(60),
        || async {
            let request = http::Request::get("/readyz").body(Vec::new()).ok()?;
            client.request_text(request).await.ok().map(|_| ())
        },
    )
    .await;
}

/// The ConfigMaps that do not hold `value` yet, for a failure's message.
async fn not_holding(f: &Fixture, value: &str) -> String {
    let cms: Api<ConfigMap> = Api::namespaced(f.env.client.clone(), &f.env.namespace);
    let Ok(list) = cms.list(&ListParams::default().labels("app=demo")).await else {
        return "(the ConfigMaps could not be listed)".into();
    };
    list.items
        .iter()
        .filter(|c| {
            c.data
                .as_ref()
                .and_then(|d| d.get("value"))
                .map(String::as_str)
                != Some(value)
        })
        .filter_map(|c| c.metadata.name.clone())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The Releases not Applied, with their conditions, for a failure's message.
async fn not_applied(f: &Fixture) -> String {
    let Ok(list) = f.releases().list(&ListParams::default()).await else {
        return "(the Releases could not be listed)".into();
    };
    list.items
        .iter()
        .filter(|r| !applied(r))
        .map(|r| {
            format!(
                "{}: {}",
                r.metadata.name.as_deref().unwrap_or_default(),
                serde_json::to_string(&r.status).unwrap_or_default()
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Poll `check` until it returns `Some`, or fail after `timeout` saying `what` did not
/// happen, with the ConfigMaps not holding `value` (if given), the Releases not Applied and
/// the daemon's log.
async fn within<F, Fut>(
    f: &Fixture,
    daemon: &Daemon,
    what: &str,
    timeout: Duration,
    value: Option<&str>,
    mut check: F,
) where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<()>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    while check().await.is_none() {
        if tokio::time::Instant::now() >= deadline {
            let holding = match value {
                Some(v) => format!("not holding {v:?}: {}\n", not_holding(f, v).await),
                None => String::new(),
            };
            panic!(
                "{what} not within {timeout:?}:\n{holding}not Applied:\n{}\ndaemon log:\n{}",
                not_applied(f).await,
                daemon.logs()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// CPU seconds the process has used (user and system).
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command (which may hold spaces) start at the last ')'.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    let hz = std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .trim()
                .parse::<f64>()
                .ok()
        })
        .unwrap_or(100.0);
    ticks / hz
}

#[tokio::test]
async fn an_api_server_that_hangs_for_30s_neither_stops_nor_spins_the_daemon_and_all_come_back_within_an_interval()
 {
    let _alone = ONE_FAULT_AT_A_TIME.lock().await;
    const RELEASES: usize = 50;
    let plane = ControlPlane::own("hung", &["--no-controllers"]);
    let f = releases_on(&plane, "hung", RELEASES, 2).await;
    let mut daemon =
        Daemon::start(&f.env.kubeconfig, &["--watch-namespace", &f.env.namespace]).await;
    eventually("all 50 Releases Applied", Duration::from_secs(120), || {
        all_applied(&f, RELEASES * 2, "1")
    })
    .await;

    // The API server stops answering (SIGSTOP: connections open, nothing said) while a new
    // commit waits for every Release.
    let pid = daemon.child.id();
    let cpu_before = cpu_seconds(pid);
    plane.signal("kube-apiserver", "STOP");
    commit_value(&f, RELEASES, 2, "2");
    let hung = Instant::now();
    // A CLI call meanwhile ends at its deadline and says which server did not answer.
    let started = Instant::now();
    let out = f.env.convoy(&["get", "--request-timeout", "2s"]);
    let cli_took = started.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(3), "unreachable: {stderr}");
    assert!(
        cli_took < Duration::from_secs(20),
        "the CLI gave up after {cli_took:?}"
    );
    assert!(stderr.contains("127.0.0.1"), "names the server: {stderr}");
    while hung.elapsed() < Duration::from_secs(30) {
        assert!(
            daemon.child.try_wait().unwrap().is_none(),
            "the daemon exited while the API server hung:\n{}",
            daemon.logs()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let cpu = cpu_seconds(pid) - cpu_before;
    plane.signal("kube-apiserver", "CONT");
    let back = Instant::now();
    within(
        &f,
        &daemon,
        "all Releases Applied with the new commit after the API server answered again",
        INTERVAL,
        Some("2"),
        || all_applied(&f, RELEASES * 2, "2"),
    )
    .await;
    let recovered = back.elapsed();
    println!(
        "hung API server (30 s, {RELEASES} Releases): daemon CPU {cpu:.2} s during the hang; all Applied {:.1} s after it answered again; a CLI call gave up after {:.1} s",
        recovered.as_secs_f64(),
        cli_took.as_secs_f64()
    );
    assert!(
        cpu < 6.0,
        "the daemon spun while the API server hung: {cpu:.2} CPU seconds in 30 s"
    );
    assert!(daemon.child.try_wait().unwrap().is_none());
}

/// The `https://` server `kubeconfig` names, as an address.
fn server_of(kubeconfig: &std::path::Path) -> std::net::SocketAddr {
    let text = std::fs::read_to_string(kubeconfig).unwrap();
    server_line(&text)
        .strip_prefix("https://")
        .expect("an https server")
        .trim_end_matches('/')
        .parse()
        .expect("server as ip:port")
}

fn server_line(kubeconfig: &str) -> String {
    kubeconfig
        .lines()
        .find_map(|l| l.trim().strip_prefix("server:"))
        .map(|s| s.trim().trim_matches('"').to_string())
        .expect("the kubeconfig names a server")
}

/// A copy of `kubeconfig` (in `dir`) whose server is `127.0.0.1:port`.
fn kubeconfig_through(
    kubeconfig: &std::path::Path,
    port: u16,
    dir: &std::path::Path,
) -> std::path::PathBuf {
    let text = std::fs::read_to_string(kubeconfig).unwrap();
    let path = dir.join("through-proxy.kubeconfig");
    std::fs::write(
        &path,
        text.replace(&server_line(&text), &format!("https://127.0.0.1:{port}")),
    )
    .unwrap();
    path
}

/// A connection that dies without a word (a NAT or load balancer forgot it; no reset reaches
/// either end) leaves a watch waiting on it. The daemon's watches give up on such a stream
/// after `WATCH_TIMEOUT_SECS` + 5 s (65 s) and start again on a new connection. A Release
/// edited after every connection went quiet, which the daemon learns of only through its
/// watch of Releases (an interval pass reads the Release from that watch's cache), is
/// therefore applied within about a minute, not after kube's default of 295 s.
#[tokio::test]
async fn connections_that_go_quiet_without_a_word_are_left_within_a_minute_and_an_edit_still_lands()
{
    const DEADLINE: Duration = Duration::from_secs(150);
    let plane = ControlPlane::own("quiet", &["--no-controllers"]);
    let f = releases_on(&plane, "quiet", 2, 1).await;
    // What `r1` is switched to later, committed now: the source is not what changes.
    let commit = f.repo.commit(
        &[("r1-next/cm.yaml", &objects("r1", 1, "2"))],
        "where r1 goes next",
    );
    let dir = tempfile::tempdir().unwrap();
    let target = server_of(&f.env.kubeconfig);
    let proxy = crate::support::servers::QuietingProxy::start(target).await;
    let kubeconfig = kubeconfig_through(&f.env.kubeconfig, proxy.port, dir.path());
    let daemon = Daemon::start(&kubeconfig, &["--watch-namespace", &f.env.namespace]).await;
    eventually("both Releases Applied", Duration::from_secs(60), || {
        all_applied(&f, 2, "1")
    })
    .await;
    let repos: Api<GitRepository> = Api::namespaced(f.env.client.clone(), &f.env.namespace);
    eventually(
        "the GitRepository at the last commit",
        Duration::from_secs(60),
        || async {
            let revision = repos.get("repo").await.ok()?.status?.artifact?.revision;
            revision.ends_with(&commit).then_some(())
        },
    )
    .await;

    proxy.quiet_open_connections();
    let quiet = Instant::now();
    f.releases()
        .patch(
            "r1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"source": {"path": "r1-next"}}})),
        )
        .await
        .unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(f.env.client.clone(), &f.env.namespace);
    within(
        &f,
        &daemon,
        "the edit applied after every connection went quiet",
        DEADLINE,
        None,
        || async {
            let cm = cms.get("r1-0").await.ok()?;
            (cm.data?.get("value")? == "2").then_some(())
        },
    )
    .await;
    println!(
        "connections gone quiet: the edited Release applied {:.1} s later",
        quiet.elapsed().as_secs_f64()
    );
}

#[tokio::test]
async fn an_etcd_restart_in_the_middle_of_a_sync_is_survived_and_all_come_back_within_an_interval()
{
    let _alone = ONE_FAULT_AT_A_TIME.lock().await;
    const RELEASES: usize = 10;
    const PER_RELEASE: usize = 50;
    let plane = ControlPlane::own("etcd", &["--no-controllers"]);
    let f = releases_on(&plane, "etcd", RELEASES, PER_RELEASE).await;
    let mut daemon =
        Daemon::start(&f.env.kubeconfig, &["--watch-namespace", &f.env.namespace]).await;
    // Mid-sync: the first objects are there, not all of them.
    let cms: Api<ConfigMap> = Api::namespaced(f.env.client.clone(), &f.env.namespace);
    let seen = eventually("the first objects", Duration::from_secs(60), || async {
        let n = cms
            .list(&ListParams::default().labels("app=demo"))
            .await
            .ok()?
            .items
            .len();
        (n > 0).then_some(n)
    })
    .await;
    let pid = daemon.child.id();
    let cpu_before = cpu_seconds(pid);
    plane.restart("etcd", Duration::from_secs(10));
    let started = Instant::now();
    let cpu = cpu_seconds(pid) - cpu_before;
    // The clock starts when the API server is ready again (its /readyz checks etcd): how
    // long its own etcd client takes to reconnect is not the daemon's to make up.
    api_server_ready(&f.env.client).await;
    let ready_after = started.elapsed();
    let back = Instant::now();
    within(
        &f,
        &daemon,
        "all Releases Applied after etcd's restart",
        INTERVAL,
        None,
        || all_applied(&f, RELEASES * PER_RELEASE, "1"),
    )
    .await;
    let recovered = back.elapsed();
    println!(
        "etcd restart ({} of {} objects applied at the kill, 10 s down): daemon CPU {cpu:.2} s while etcd was down; API server ready {:.1} s after etcd started; all Applied {:.1} s after that",
        seen,
        RELEASES * PER_RELEASE,
        ready_after.as_secs_f64(),
        recovered.as_secs_f64()
    );
    assert!(
        daemon.child.try_wait().unwrap().is_none(),
        "the daemon exited:\n{}",
        daemon.logs()
    );
    assert!(
        cpu < 3.0,
        "the daemon spun while etcd was down: {cpu:.2} CPU seconds"
    );
    // Nothing the render holds was pruned, and every object is in its inventory.
    let inventories: Api<ReleaseInventory> =
        Api::namespaced(f.env.client.clone(), &f.env.namespace);
    for r in f
        .releases()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
    {
        let name = r.metadata.name.clone().unwrap();
        let inventory = inventories.get(&name).await.unwrap();
        assert_eq!(
            inventory.spec.inventory.len(),
            PER_RELEASE,
            "inventory of {name}"
        );
        assert!(
            inventory.spec.pending.is_empty(),
            "nothing pending in {name}"
        );
    }
}

/// A Cluster `hangs` in `namespace` whose API server (on `port`) accepts and never answers.
async fn silent_cluster(f: &Fixture, namespace: &str, port: u16) {
    let kubeconfig = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: hangs\n  cluster:\n    server: https://127.0.0.1:{port}\n\
users:\n- name: u\n  user:\n    token: t\ncontexts:\n- name: hangs\n  context: {{cluster: hangs, user: u}}\n\
current-context: hangs\n"
    );
    f.kubectl_apply(&json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "hangs-kc", "namespace": namespace},
        "stringData": {"kubeconfig": kubeconfig}}))
        .await;
    f.kubectl_apply(
        &json!({"apiVersion": "core.convoy.kumodo.io/v1alpha1", "kind": "Cluster",
        "metadata": {"name": "hangs", "namespace": namespace},
        "spec": {"kubeconfigSecretRef": {"name": "hangs-kc"}}}),
    )
    .await;
}

#[tokio::test]
async fn sigterm_gives_passes_in_flight_a_grace_period_then_cancels_them_and_releases_the_leases() {
    let _alone = ONE_FAULT_AT_A_TIME.lock().await;
    // A Cluster whose API server accepts and never answers: a pass that would run for the
    // whole request deadline (10 minutes here). (A fetch no longer holds a pass: it goes on
    // beside the passes.)
    let (port, accepted) = crate::support::servers::silent_server();
    let env = TestEnv::new("grace").await;
    let f = Fixture::in_env(env, &[("cm.yaml", &objects("web", 1, "1"))], json!({})).await;
    silent_cluster(&f, &f.env.namespace, port).await;
    f.add_release("far", "app", json!({"cluster": "hangs"}))
        .await;
    let mut daemon = Daemon::start(
        &f.env.kubeconfig,
        &[
            "--watch-namespace",
            &f.env.namespace,
            "--request-timeout",
            "10m",
            "--shutdown-grace",
            "2s",
            "--shards",
            "1",
            "--lease-namespace",
            &f.env.namespace,
            "--identity",
            "graceful",
        ],
    )
    .await;
    let leases: Api<Lease> = Api::namespaced(f.env.client.clone(), &f.env.namespace);
    eventually("the shard Lease held", Duration::from_secs(30), || async {
        let lease = leases.get_opt("convoy-all-shard-0").await.ok()??;
        (lease.spec?.holder_identity.as_deref() == Some("graceful")).then_some(())
    })
    .await;
    eventually(
        "the daemon to connect to the silent cluster",
        Duration::from_secs(30),
        || async { (accepted.load(Ordering::SeqCst) > 0).then_some(()) },
    )
    .await;

    let started = Instant::now();
    let status = daemon.terminate();
    let took = started.elapsed();
    let logs = daemon.logs();
    assert!(status.success(), "exit 0 after SIGTERM: {status}\n{logs}");
    assert!(
        took < Duration::from_secs(20),
        "the daemon waited {took:?} for a pass the grace period (2s) should have cut:\n{logs}"
    );
    assert!(
        logs.contains("passes still running after the grace period of 2s; cancelled"),
        "says what it cancelled:\n{logs}"
    );
    let lease = leases.get("convoy-all-shard-0").await.unwrap();
    assert_eq!(
        lease.spec.and_then(|s| s.holder_identity),
        None,
        "the Lease is released on the way out"
    );
}

/// A HelmRegistry whose server accepts and never answers is given up at the fetch deadline,
/// as every fetch is (its index check ran for the HTTP client's 300 s), and holds up no other
/// registry meanwhile: the HelmRegistry loop has one worker, which its check held, so one
/// tenant's registry stopped every other's index checks. The check now runs beside the pass.
#[tokio::test]
async fn a_helm_registry_that_never_answers_holds_up_no_other_and_is_given_up_at_the_deadline() {
    let (port, _) = crate::support::servers::silent_server();
    let charts = tempfile::tempdir().unwrap();
    let chart = crate::support::servers::write_chart(charts.path(), "demo", "1.0.0");
    let repo = charts.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    crate::support::servers::helm_package(&chart, &repo);
    let server = crate::support::servers::http_server(&repo, None, false);
    let f = Fixture::new(
        "helm-silent",
        &[("cm.yaml", &objects("web", 1, "1"))],
        json!({}),
    )
    .await;
    // Listed (and so checked) in name order: the silent one first.
    for (name, url) in [
        ("a-silent", format!("http://127.0.0.1:{port}/charts")),
        ("b-served", format!("http://127.0.0.1:{}", server.port)),
    ] {
        f.kubectl_apply(&json!({
            "apiVersion": "source.convoy.kumodo.io/v1alpha1", "kind": "HelmRegistry",
            "metadata": {"name": name, "namespace": f.env.namespace},
            "spec": {"url": url},
        }))
        .await;
    }
    let _daemon = Daemon::start(
        &f.env.kubeconfig,
        &[
            "--watch-namespace",
            &f.env.namespace,
            "--fetch-timeout",
            "20s",
        ],
    )
    .await;
    let helms: Api<HelmRegistry> = Api::namespaced(f.env.client.clone(), &f.env.namespace);
    let ready = |name: &'static str| {
        let helms = &helms;
        move || async move {
            let status = helms.get(name).await.ok()?.status?;
            let c = status
                .conditions
                .iter()
                .find(|c| c.type_ == "Ready")?
                .clone();
            Some((c.status, c.reason, c.message))
        }
    };
    let (status, reason, _) = eventually(
        "the served HelmRegistry checked",
        Duration::from_secs(60),
        ready("b-served"),
    )
    .await;
    assert_eq!((status.as_str(), reason.as_str()), ("True", "Succeeded"));
    let silent = helms.get("a-silent").await.unwrap();
    assert!(
        silent.status.is_none_or(|s| s.conditions.is_empty()),
        "checked before the silent one's deadline (20 s)"
    );
    let (status, reason, message) = eventually(
        "the silent HelmRegistry to be given up",
        Duration::from_secs(60),
        ready("a-silent"),
    )
    .await;
    assert_eq!((status.as_str(), reason.as_str()), ("False", "FetchFailed"));
    assert!(
        message.contains("the index did not arrive within 20s"),
        "{message}"
    );
}

/// A daemon watching the fixture's namespace and a new `tarpit` namespace (`args` added),
/// once it has synced the fixture's Release.
async fn beside_a_tarpit(f: &Fixture, args: &[&str]) -> (Daemon, String) {
    let tarpit = crate::support::unique_namespace(&f.env.client, "tarpit").await;
    let watched = format!("{},{tarpit}", f.env.namespace);
    let mut all = vec!["--watch-namespace", watched.as_str()];
    all.extend_from_slice(args);
    let daemon = Daemon::start(&f.env.kubeconfig, &all).await;
    eventually("the first sync", Duration::from_secs(60), || {
        web_holds(f, "1")
    })
    .await;
    (daemon, tarpit)
}

/// Whether the fixture's `web-0` ConfigMap holds `value`.
async fn web_holds(f: &Fixture, value: &str) -> Option<()> {
    let cm = f.config_map("web-0").await?;
    (cm["data"]["value"] == value).then_some(())
}

/// A commit to the fixture's repository, asked to sync now, is applied while the tarpit
/// holds what it holds; none of the tarpit's Releases has been attempted meanwhile (nothing
/// of theirs has ended: the commit did not wait for them).
async fn a_commit_goes_past(f: &Fixture, tarpit: &str) {
    a_commit_is_applied(f).await;
    let releases: Api<Release> = Api::namespaced(f.env.client.clone(), tarpit);
    for release in releases.list(&ListParams::default()).await.unwrap() {
        let attempted = release.status.and_then(|s| s.last_attempted);
        assert!(attempted.is_none(), "{attempted:?}");
    }
}

/// A commit to the fixture's repository, asked to sync now, is applied within a minute.
async fn a_commit_is_applied(f: &Fixture) {
    f.commit(&[("cm.yaml", &objects("web", 1, "2"))]);
    f.annotate(json!({"convoy.kumodo.io/sync-requested-at": jiff::Timestamp::now().to_string()}))
        .await;
    eventually(
        "the fixture's commit applied (another namespace's Releases held on)",
        Duration::from_secs(60),
        || web_holds(f, "2"),
    )
    .await;
}

/// `count` Releases in `tarpit` (`spec_extra` merged in) on the fixture's repository, deployed
/// to a Cluster whose API server on `port` never answers in time.
async fn releases_on_a_silent_cluster(
    f: &Fixture,
    tarpit: &str,
    port: u16,
    count: usize,
    spec_extra: serde_json::Value,
) {
    silent_cluster(f, tarpit, port).await;
    f.kubectl_apply(&json!({
        "apiVersion": "source.convoy.kumodo.io/v1alpha1", "kind": "GitRepository",
        "metadata": {"name": "repo", "namespace": tarpit},
        "spec": {"url": f.repo.file_url(), "ref": {"branch": "main"}},
    }))
    .await;
    for i in 0..count {
        let mut spec = json!({"source": {"kind": "GitRepository", "name": "repo", "path": "app"},
            "cluster": "hangs", "targetNamespace": "default"});
        json_patch::merge(&mut spec, &spec_extra);
        f.kubectl_apply(&json!({
            "apiVersion": "core.convoy.kumodo.io/v1alpha1", "kind": "Release",
            "metadata": {"name": format!("far-{i}"), "namespace": tarpit},
            "spec": spec,
        }))
        .await;
    }
}

/// A tenant's sources that never answer do not hold up another tenant's sync: each pass
/// fetched its source on the controller's worker until the fetch deadline, so six
/// GitRepositories pointing at a server that accepts and never answers held the 4 workers,
/// and a commit another namespace asked to sync waited for the deadline (an attack measured
/// 10 s becoming 218 s). Fetches now run beside the passes, two at most of one namespace's.
#[tokio::test]
async fn a_tenants_sources_that_never_answer_do_not_hold_up_another_tenants_sync() {
    let (port, accepted) = crate::support::servers::silent_server();
    let f = Fixture::new(
        "fetch-tarpit",
        &[("cm.yaml", &objects("web", 1, "1"))],
        json!({}),
    )
    .await;
    let (_daemon, tarpit) = beside_a_tarpit(&f, &["--fetch-timeout", "10m"]).await;
    for i in 0..6 {
        f.kubectl_apply(&json!({
            "apiVersion": "source.convoy.kumodo.io/v1alpha1", "kind": "GitRepository",
            "metadata": {"name": format!("slow-{i}"), "namespace": tarpit},
            "spec": {"url": format!("http://127.0.0.1:{port}/repo-{i}.git"), "ref": {"branch": "main"}},
        }))
        .await;
        f.kubectl_apply(&json!({
            "apiVersion": "core.convoy.kumodo.io/v1alpha1", "kind": "Release",
            "metadata": {"name": format!("slow-{i}"), "namespace": tarpit},
            "spec": {"source": {"kind": "GitRepository", "name": format!("slow-{i}")}, "targetNamespace": tarpit},
        }))
        .await;
    }
    eventually(
        "the tarpit to hold fetches",
        Duration::from_secs(60),
        || async { (accepted.load(Ordering::SeqCst) >= 2).then_some(()) },
    )
    .await;
    a_commit_goes_past(&f, &tarpit).await;
    assert!(
        accepted.load(Ordering::SeqCst) <= 2,
        "a namespace's sources take two fetches at most at once"
    );
}

/// `convoy daemon --allow-source-url`: a tenant's Release naming a Git URL outside the
/// operator's prefixes stops with reason Unsupported, naming the flag, and the
/// daemon sends that server nothing; the fixture's own Release (file://, its own flag) goes on.
#[tokio::test]
async fn a_source_url_outside_the_allowed_prefixes_is_refused_without_a_request() {
    let (port, accepted) = crate::support::servers::silent_server();
    let f = Fixture::new(
        "source-allow-list",
        &[("cm.yaml", &objects("web", 1, "1"))],
        json!({}),
    )
    .await;
    let allowed = format!("http://127.0.0.1:{port}/team-a/");
    let (_daemon, tarpit) = beside_a_tarpit(&f, &["--allow-source-url", &allowed]).await;
    let url = format!("http://127.0.0.1:{port}/team-b/repo.git");
    f.kubectl_apply(&json!({
        "apiVersion": "source.convoy.kumodo.io/v1alpha1", "kind": "GitRepository",
        "metadata": {"name": "elsewhere", "namespace": tarpit},
        "spec": {"url": url, "ref": {"branch": "main"}},
    }))
    .await;
    f.kubectl_apply(&json!({
        "apiVersion": "core.convoy.kumodo.io/v1alpha1", "kind": "Release",
        "metadata": {"name": "elsewhere", "namespace": tarpit},
        "spec": {"source": {"kind": "GitRepository", "name": "elsewhere"}, "targetNamespace": tarpit},
    }))
    .await;
    let releases: Api<Release> = Api::namespaced(f.env.client.clone(), &tarpit);
    let (status, reason, message) = eventually(
        "the Release outside the prefixes refused",
        Duration::from_secs(60),
        || async {
            let c = releases
                .get("elsewhere")
                .await
                .ok()?
                .status?
                .condition("Applied")?
                .clone();
            Some((c.status, c.reason, c.message))
        },
    )
    .await;
    assert_eq!((status.as_str(), reason.as_str()), ("False", "Unsupported"));
    assert!(
        message.contains(&format!(
            "Git URL \"{url}\" is not under a URL prefix convoy daemon allows sources from (--allow-source-url)"
        )),
        "{message}"
    );
    a_commit_is_applied(&f).await;
    assert_eq!(accepted.load(Ordering::SeqCst), 0, "nothing was sent there");
}

/// A tenant's Releases whose Cluster never answers hold up no other namespace: each pass
/// waited for the cluster until the request deadline on a controller worker, so six such
/// Releases held the 4 workers and another namespace's commit waited behind them. A pass
/// that runs long now leaves its place to another namespace's keys.
#[tokio::test]
async fn a_tenants_releases_whose_cluster_never_answers_do_not_hold_up_another_namespace() {
    let (port, accepted) = crate::support::servers::silent_server();
    let f = Fixture::new(
        "cluster-tarpit",
        &[("cm.yaml", &objects("web", 1, "1"))],
        json!({}),
    )
    .await;
    let (_daemon, tarpit) = beside_a_tarpit(&f, &["--request-timeout", "10m"]).await;
    releases_on_a_silent_cluster(&f, &tarpit, port, 6, json!({})).await;
    eventually(
        "the tarpit to hold the workers",
        Duration::from_secs(60),
        || async { (accepted.load(Ordering::SeqCst) >= 4).then_some(()) },
    )
    .await;
    a_commit_goes_past(&f, &tarpit).await;
}

/// A tenant's many Releases whose passes each fail after a few seconds (under the 5 s that
/// makes a pass slow) and come back every second (`retryBackoff`) do not hold another
/// namespace's key behind them: a namespace with no pass running goes first. Before, 30 such
/// Releases queued ahead made another namespace's commit wait about 30 × 4 s / 4 workers (an
/// attack measured 65 s with 60).
#[tokio::test]
async fn a_tenants_many_passes_just_under_slow_do_not_queue_ahead_of_another_namespace() {
    let (port, accepted) = crate::support::servers::stalling_server(Duration::from_secs(4));
    let f = Fixture::new(
        "busy-tarpit",
        &[("cm.yaml", &objects("web", 1, "1"))],
        json!({}),
    )
    .await;
    let (_daemon, tarpit) = beside_a_tarpit(&f, &[]).await;
    let retry_every_second =
        json!({"syncPolicy": {"retryBackoff": {"initial": "1s", "factor": 1, "max": "1s"}}});
    releases_on_a_silent_cluster(&f, &tarpit, port, 30, retry_every_second).await;
    eventually(
        "the tarpit's passes to keep the workers busy",
        Duration::from_secs(60),
        || async { (accepted.load(Ordering::SeqCst) >= 34).then_some(()) },
    )
    .await;
    f.commit(&[("cm.yaml", &objects("web", 1, "2"))]);
    f.annotate(json!({"convoy.kumodo.io/sync-requested-at": jiff::Timestamp::now().to_string()}))
        .await;
    eventually(
        "the other namespace's commit applied ahead of the tarpit's queued passes",
        Duration::from_secs(15),
        || web_holds(&f, "2"),
    )
    .await;
}

//! Operations: graceful shutdown mid-sync, Events, and an install whose RBAC is enough.

use std::time::Duration;

use convoy::engine::api::ReleaseInventory;
use k8s_openapi::api::core::v1::{ConfigMap, Event};
use kube::Api;
use kube::api::ListParams;
use serde_json::json;

use crate::Daemon;
use crate::loops::all_true;
use crate::support::eventually;
use crate::support::fixture::{Fixture, config_map};

#[tokio::test]
async fn sigterm_during_a_sync_leaves_a_consistent_inventory_and_the_next_start_finishes() {
    let files: Vec<(String, String)> = (0..300)
        .map(|i| {
            (
                format!("cm-{i:03}.yaml"),
                config_map(&format!("cm-{i:03}"), i / 100, "1"),
            )
        })
        .collect();
    let refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    let f = Fixture::new("daemon-sigterm", &refs, json!({})).await;
    let mut daemon = Daemon::start(
        &f.env.kubeconfig,
        &["--concurrency", "2", "--watch-namespace", &f.env.namespace],
    )
    .await;
    let inventories: Api<ReleaseInventory> =
        Api::namespaced(f.env.client.clone(), &f.env.namespace);
    eventually(
        "the sync to be under way",
        Duration::from_secs(60),
        || async {
            let inv = inventories.get_opt("web").await.ok().flatten()?;
            (!inv.spec.inventory.is_empty()).then_some(())
        },
    )
    .await;
    let status = daemon.terminate();
    assert!(
        status.success(),
        "SIGTERM exits 0: {status:?}\n{}",
        daemon.logs()
    );
    assert!(daemon.logs().contains("shutting down"), "{}", daemon.logs());

    // Every recorded object exists: the inventory never claims what was not applied.
    let inv = inventories.get("web").await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(f.env.client.clone(), &f.env.namespace);
    let live: Vec<String> = cms
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect();
    for entry in &inv.spec.inventory {
        assert!(
            live.contains(&entry.name),
            "{} is in the inventory but not on the cluster",
            entry.name
        );
    }

    let _next = Daemon::start(&f.env.kubeconfig, &["--watch-namespace", &f.env.namespace]).await;
    eventually(
        "the next start to finish the sync",
        Duration::from_secs(120),
        || async {
            let inv = inventories.get_opt("web").await.ok().flatten()?;
            let r = f.release().await;
            let applied = r
                .status?
                .condition("Applied")
                .map(|c| c.status.is_true())
                .unwrap_or(false);
            (applied && inv.spec.inventory.len() == 300).then_some(())
        },
    )
    .await;
}

#[tokio::test]
async fn a_failed_reconcile_is_recorded_as_an_event() {
    let bad = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: Not_Valid\n";
    let f = Fixture::new("daemon-events", &[("bad.yaml", bad)], json!({})).await;
    let _daemon = Daemon::start(&f.env.kubeconfig, &["--watch-namespace", &f.env.namespace]).await;
    let events: Api<Event> = Api::namespaced(f.env.client.clone(), &f.env.namespace);
    let event = eventually(
        "an Event on the Release",
        Duration::from_secs(30),
        || async {
            let list = events.list(&ListParams::default()).await.ok()?;
            list.items
                .into_iter()
                .find(|e| e.involved_object.kind.as_deref() == Some("Release"))
        },
    )
    .await;
    assert_eq!(event.reason.as_deref(), Some("Unappliable"));
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert!(event.message.unwrap_or_default().contains("Not_Valid"));
}

#[tokio::test]
async fn the_installed_rbac_is_enough_for_the_daemon() {
    let f = Fixture::new("daemon-rbac", &[("a.yaml", &config_map("a", 0, "1"))], {
        let mut s = Fixture::default_health("5m");
        s["syncPolicy"] = json!({"interval": "3s"});
        s
    })
    .await;
    // The install's output applies cleanly in a server-side dry run (its namespace exists
    // already: a dry run creates nothing for the objects after it)…
    let install_ns = format!("{}-convoy", f.env.namespace);
    assert!(
        f.env
            .kubectl(&["create", "namespace", &install_ns])
            .status
            .success()
    );
    let out = f.env.convoy(&["install", "--dry-run", "-n", &install_ns]);
    assert!(out.status.success());
    f.env.kubectl_apply_text(
        &String::from_utf8_lossy(&out.stdout),
        &[
            "--server-side",
            // A control plane reused across runs holds an earlier install's bindings.
            "--force-conflicts",
            "--dry-run=server",
        ],
    );
    // …and for real, with the test namespace set up as a tenant; the daemon then runs on
    // the service accounts' tokens alone and deploys as the tenant's ServiceAccount, as the
    // installed Deployments do (`--default-service-account convoy-deployer`).
    for args in [
        // --move: a control plane reused across runs holds an earlier run's install.
        vec!["install", "-n", install_ns.as_str(), "--move"],
        vec!["install", "--tenant", f.env.namespace.as_str()],
    ] {
        let out = f.env.convoy(&args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let kubeconfig_for = |sa: &str| f.env.service_account_kubeconfig(&install_ns, sa);
    let controller_kc = kubeconfig_for("convoy-controller");
    let observer_kc = kubeconfig_for("convoy-observer");
    let _controller = Daemon::start(
        controller_kc.path(),
        &[
            "--role",
            "controller",
            "--shards",
            "1",
            "--lease-namespace",
            &install_ns,
            "--watch-namespace",
            &f.env.namespace,
            "--default-service-account",
            "convoy-deployer",
        ],
    )
    .await;
    let _observer = Daemon::start(
        observer_kc.path(),
        &[
            "--role",
            "observer",
            "--shards",
            "1",
            "--lease-namespace",
            &install_ns,
            "--watch-namespace",
            &f.env.namespace,
            "--default-service-account",
            "convoy-deployer",
        ],
    )
    .await;
    all_true(&f).await;
}

/// A tenant's HealthRuleSet with a rule that would take the daemon hours on its own large
/// object: that object is Unknown naming the rule, the probes answer, and another Release
/// reconciles as usual.
#[tokio::test]
async fn an_expensive_health_rule_makes_its_objects_unknown_and_starves_nobody() {
    let mut big = String::from("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: big\ndata:\n");
    for i in 0..3000 {
        big.push_str(&format!("  k{i}: v\n"));
    }
    let f = Fixture::new(
        "daemon-cel",
        &[("big.yaml", &big)],
        json!({
            "healthAssessment": {"localRuleSetSelector": {"matchLabels": {"team": "a"}}},
            "syncPolicy": {"interval": "3s"},
        }),
    )
    .await;
    f.kubectl_apply(&json!({
        "apiVersion": "health.convoy.kumodo.io/v1alpha1", "kind": "HealthRuleSet",
        "metadata": {"name": "rules", "namespace": f.env.namespace, "labels": {"team": "a"}},
        "spec": {"rules": [{"name": "starve", "match": {"kind": "ConfigMap"},
            "healthy": "object.data.all(a, object.data.all(b, object.data.all(c, a != b || b != c)))"}]},
    }))
    .await;
    f.repo
        .commit(&[("other/a.yaml", &config_map("other-a", 0, "1"))], "other");
    f.add_release("other", "other", Fixture::default_health("5m"))
        .await;
    f.install_default_rules().await;
    let daemon = Daemon::start(&f.env.kubeconfig, &["--watch-namespace", &f.env.namespace]).await;

    let inventories: Api<ReleaseInventory> =
        Api::namespaced(f.env.client.clone(), &f.env.namespace);
    let message = eventually(
        "the big ConfigMap assessed Unknown",
        Duration::from_secs(60),
        || async {
            let inventory = inventories.get_opt("web").await.ok()??;
            let entry = inventory.spec.inventory.first()?;
            (entry.state == Some(convoy::engine::api::HealthState::Unknown))
                .then(|| entry.message.clone().unwrap_or_default())
        },
    )
    .await;
    assert!(
        message.contains(&format!(
            "rule starve of HealthRuleSet/{}/rules is over its cost budget on this object",
            f.env.namespace
        )),
        "{message}"
    );
    // The other Release is Applied and Healthy, and the probes answer, meanwhile.
    eventually(
        "Release other Applied and Healthy",
        Duration::from_secs(60),
        || async {
            let r = f.releases().get("other").await.ok()?;
            let status = r.status?;
            let ok = ["Applied", "Healthy"]
                .iter()
                .all(|t| status.condition(t).is_some_and(|c| c.status.is_true()));
            ok.then_some(())
        },
    )
    .await;
    assert_eq!(daemon.get("/healthz").map(|(code, _)| code), Some(200));
}

/// A daemon killed (SIGKILL, no goodbye) in the middle of a 500-object wave, then the commit
/// reverted: the objects it applied but had not recorded are pruned by the next daemon
/// (ReleaseInventory.pending), and nothing the reverted render holds is touched.
#[tokio::test]
async fn sigkill_in_the_middle_of_a_wave_then_a_revert_leaves_nothing_behind() {
    let f = Fixture::new(
        "daemon-sigkill",
        &[("base.yaml", &config_map("base", 0, "1"))],
        json!({"syncPolicy": {"interval": "2s"}}),
    )
    .await;
    let inventories: Api<ReleaseInventory> =
        Api::namespaced(f.env.client.clone(), &f.env.namespace);
    let cms: Api<ConfigMap> = Api::namespaced(f.env.client.clone(), &f.env.namespace);
    let bulk = || async {
        cms.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|c| {
                c.metadata
                    .name
                    .as_deref()
                    .is_some_and(|n| n.starts_with("bulk-"))
            })
            .count()
    };
    let mut daemon = Daemon::start(
        &f.env.kubeconfig,
        &["--concurrency", "2", "--watch-namespace", &f.env.namespace],
    )
    .await;
    eventually(
        "the base render applied",
        Duration::from_secs(60),
        || async { f.config_map("base").await.map(|_| ()) },
    )
    .await;
    let mut files: Vec<(String, String)> = (0..500)
        .map(|i| {
            (
                format!("bulk-{i:03}.yaml"),
                config_map(&format!("bulk-{i:03}"), 0, "1"),
            )
        })
        .collect();
    files.push(("base.yaml".into(), config_map("base", 0, "1")));
    let refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    f.commit(&refs);
    eventually(
        "the wave to be under way",
        Duration::from_secs(120),
        || async { (bulk().await >= 20).then_some(()) },
    )
    .await;
    daemon.kill();
    let left = bulk().await;
    let recorded = inventories
        .get("web")
        .await
        .unwrap()
        .spec
        .inventory
        .iter()
        .filter(|e| e.name.starts_with("bulk-"))
        .count();
    assert!(left > 0, "the kill came after the wave started");

    // The commit is reverted; the next daemon prunes everything of the interrupted wave.
    f.commit(&[("base.yaml", &config_map("base", 0, "1"))]);
    let _next = Daemon::start(&f.env.kubeconfig, &["--watch-namespace", &f.env.namespace]).await;
    eventually(
        "the interrupted wave pruned",
        Duration::from_secs(120),
        || async {
            let inv = inventories.get_opt("web").await.ok().flatten()?;
            (bulk().await == 0 && inv.spec.pending.is_empty() && inv.spec.inventory.len() == 1)
                .then_some(())
        },
    )
    .await;
    assert!(f.config_map("base").await.is_some());
    eprintln!("killed with {left} bulk objects applied, {recorded} of them recorded");
}

/// A watch that keeps failing (here a missing RBAC permission) is loud: a warning naming the
/// resource, a metric, and /readyz failing.
#[tokio::test]
async fn a_failing_watch_is_logged_counted_and_keeps_the_daemon_unready() {
    let env = crate::support::TestEnv::new("daemon-watch-rbac").await;
    let ns = env.namespace.clone();
    env.kubectl_apply_text(
        &json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "half", "namespace": ns}})
            .to_string(),
        &[],
    );
    // Everything the controller watches except GitRepositories.
    let role = format!("{ns}-half");
    env.kubectl_apply_text(
        &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": role},
            "rules": [
                {"apiGroups": ["core.convoy.kumodo.io"], "resources": ["releases", "releaseinventories", "clusters"], "verbs": ["get", "list", "watch"]},
                {"apiGroups": ["source.convoy.kumodo.io"], "resources": ["helmregistries", "ociregistries"], "verbs": ["get", "list", "watch"]},
                {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["*"]},
            ]})
        .to_string(),
        &[],
    );
    env.kubectl_apply_text(
        &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": role},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": "half", "namespace": ns}]})
        .to_string(),
        &[],
    );
    let kubeconfig = env.service_account_kubeconfig(&ns, "half");
    let daemon = Daemon::spawn(
        kubeconfig.path(),
        &["--role", "controller", "--render-store", "none"],
    );
    eventually(
        "the watch failures to be counted",
        Duration::from_secs(60),
        || async {
            (daemon.metric("convoy_watch_errors_total", &["resource=\"GitRepository\""]) >= 1.0)
                .then_some(())
        },
    )
    .await;
    let logs = daemon.logs();
    assert!(
        logs.contains("watch failed (retried with backoff)") && logs.contains("GitRepository"),
        "{logs}"
    );
    assert_eq!(daemon.get("/readyz").map(|(code, _)| code), Some(503));
}

/// A Cluster that Releases target waits for them when deleted (its finalizer), so their
/// deletion still prunes through it; then it goes.
#[tokio::test]
async fn a_deleted_cluster_waits_for_the_releases_that_target_it() {
    let f = Fixture::new(
        "cluster-finalizer",
        &[("a.yaml", &config_map("a", 0, "1"))],
        json!({"cluster": "here"}),
    )
    .await;
    let kubeconfig = std::fs::read_to_string(&f.env.kubeconfig).unwrap();
    f.kubectl_apply(&json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "here-kc", "namespace": f.env.namespace},
        "stringData": {"kubeconfig": kubeconfig}}))
        .await;
    f.kubectl_apply(
        &json!({"apiVersion": "core.convoy.kumodo.io/v1alpha1", "kind": "Cluster",
        "metadata": {"name": "here", "namespace": f.env.namespace},
        "spec": {"kubeconfigSecretRef": {"name": "here-kc"}}}),
    )
    .await;
    let _daemon = Daemon::start(&f.env.kubeconfig, &["--watch-namespace", &f.env.namespace]).await;
    let clusters: Api<convoy::engine::api::Cluster> =
        Api::namespaced(f.env.client.clone(), &f.env.namespace);
    eventually(
        "applied through the Cluster",
        Duration::from_secs(30),
        || async { f.config_map("a").await.map(|_| ()) },
    )
    .await;
    eventually(
        "the Cluster's finalizer",
        Duration::from_secs(30),
        || async {
            let c = clusters.get("here").await.ok()?;
            c.metadata
                .finalizers?
                .iter()
                .any(|x| x == convoy::engine::api::CLUSTER_FINALIZER)
                .then_some(())
        },
    )
    .await;

    clusters.delete("here", &Default::default()).await.unwrap();
    // Two of the Cluster controller's rechecks: it is still there, being deleted.
    tokio::time::sleep(Duration::from_secs(12)).await;
    let held = clusters.get("here").await.unwrap();
    assert!(held.metadata.deletion_timestamp.is_some());

    f.releases()
        .delete("web", &Default::default())
        .await
        .unwrap();
    eventually(
        "the Release pruned and gone",
        Duration::from_secs(30),
        || async {
            let gone = f.releases().get_opt("web").await.ok()?.is_none();
            (gone && f.config_map("a").await.is_none()).then_some(())
        },
    )
    .await;
    eventually("the Cluster gone", Duration::from_secs(30), || async {
        clusters.get_opt("here").await.ok()?.is_none().then_some(())
    })
    .await;
}

/// What an operator sees of a Release at the daemon's default log level: one line per
/// outcome change (Release, stage, reason, render), Normal Events for an applied render and
/// for drift put back, and per-Release metrics as Flux exports them.
#[tokio::test]
async fn operators_see_outcomes_in_logs_events_and_metrics() {
    let f = Fixture::new(
        "daemon-visible",
        &[("a.yaml", &config_map("a", 0, "1"))],
        json!({"syncPolicy": {"interval": "2s"}}),
    )
    .await;
    let daemon = Daemon::start(&f.env.kubeconfig, &["--watch-namespace", &f.env.namespace]).await;
    let events: Api<Event> = Api::namespaced(f.env.client.clone(), &f.env.namespace);
    let with_reason = |reason: &'static str| {
        let events = events.clone();
        async move {
            let list = events.list(&ListParams::default()).await.ok()?;
            list.items.into_iter().find(|e| {
                e.involved_object.kind.as_deref() == Some("Release")
                    && e.reason.as_deref() == Some(reason)
            })
        }
    };
    let applied = eventually("a Normal Applied Event", Duration::from_secs(30), || {
        with_reason("Applied")
    })
    .await;
    assert_eq!(applied.type_.as_deref(), Some("Normal"));
    // Someone edits the object: the drift loop asks, the controller puts it back.
    f.kubectl_apply(&json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "a", "namespace": f.env.namespace}, "data": {"value": "tampered"}}))
        .await;
    let corrected = eventually("a DriftCorrected Event", Duration::from_secs(60), || {
        with_reason("DriftCorrected")
    })
    .await;
    assert_eq!(corrected.type_.as_deref(), Some("Normal"));
    let note = corrected.message.unwrap_or_default();
    assert!(note.starts_with("drift put back on 1 object: "), "{note}");
    assert_eq!(f.config_map("a").await.unwrap()["data"]["value"], "1");

    let ns = &f.env.namespace;
    let labels = format!("namespace=\"{ns}\",name=\"web\"");
    eventually("per-Release metrics", Duration::from_secs(30), || async {
        let applied_true = daemon.metric(
            "convoy_release_condition",
            &[&labels, "type=\"Applied\"", "status=\"True\""],
        );
        let applied_false = daemon.metric(
            "convoy_release_condition",
            &[&labels, "type=\"Applied\"", "status=\"False\""],
        );
        (applied_true == 1.0 && applied_false == 0.0).then_some(())
    })
    .await;
    assert!(
        daemon.metric("convoy_release_last_applied_timestamp_seconds", &[&labels]) > 1.7e9,
        "a Unix time"
    );
    assert!(
        daemon.metric(
            "convoy_reconcile_stage_duration_seconds_count",
            &["stage=\"render\""]
        ) >= 1.0
    );
    let logs = daemon.logs();
    let line = logs
        .lines()
        .find(|l| l.contains(&format!("release={ns}/web")) && l.contains("reason=Applied"))
        .unwrap_or_else(|| panic!("an outcome line at the default level:\n{logs}"));
    assert!(line.contains(" INFO "), "{line}");
    assert!(line.contains("render="), "{line}");
}

/// The artifacts and mirrors in the daemon's source cache (by count).
fn cached(daemon: &Daemon) -> (usize, usize) {
    let count = |kind: &str| std::fs::read_dir(daemon.cache.join(kind)).map_or(0, |d| d.count());
    (count("artifacts"), count("git"))
}

/// A daemon following a repository for months kept every commit's tree and every deleted
/// source's mirror. Once nothing has used them for the retention, they go; the tree of the
/// commit its Release renders stays, and the Release stays in sync.
#[tokio::test]
async fn the_source_cache_keeps_only_what_the_releases_use() {
    let f = Fixture::new(
        "daemon-cache-retention",
        &[("a.yaml", &config_map("a", 0, "1"))],
        {
            let mut spec = Fixture::default_health("5m");
            spec["syncPolicy"] = json!({"interval": "2s"});
            spec
        },
    )
    .await;
    f.install_default_rules().await;
    let other = crate::support::servers::GitRepo::new();
    other.commit(&[("b.yaml", &config_map("b", 0, "1"))], "one");
    f.kubectl_apply(&json!({
        "apiVersion": "source.convoy.kumodo.io/v1alpha1", "kind": "GitRepository",
        "metadata": {"name": "deleted", "namespace": f.env.namespace},
        "spec": {"url": other.file_url(), "interval": "2s"},
    }))
    .await;
    let daemon = Daemon::start(
        &f.env.kubeconfig,
        &[
            "--watch-namespace",
            &f.env.namespace,
            "--cache-retention",
            "5s",
            "--render-timeout",
            "5s",
            "--fetch-timeout",
            "5s",
        ],
    )
    .await;
    all_true(&f).await;
    eventually("both sources fetched", Duration::from_secs(30), || async {
        (cached(&daemon) == (2, 2)).then_some(())
    })
    .await;

    f.commit(&[("a.yaml", &config_map("a", 0, "2"))]);
    let sources: Api<convoy::engine::api::GitRepository> =
        Api::namespaced(f.env.client.clone(), &f.env.namespace);
    sources
        .delete("deleted", &Default::default())
        .await
        .unwrap();
    crate::loops::config_map_holds(&f, "a", "2").await;
    let artifacts = daemon.cache.join("artifacts");
    eventually(
        "only the rendered commit's tree and its repository's mirror left",
        Duration::from_secs(60),
        || async {
            let only = std::fs::read_dir(&artifacts).ok()?.flatten().next()?.path();
            let content = std::fs::read_to_string(only.join("app/a.yaml")).ok()?;
            (cached(&daemon) == (1, 1) && content.contains("value: \"2\"")).then_some(())
        },
    )
    .await;
    // Counted once the collection that removed them ends.
    eventually(
        "the old tree, the deleted source's tree and its mirror counted",
        Duration::from_secs(30),
        || async {
            let removed = |kind: &str| {
                daemon.metric(
                    "convoy_source_cache_removed_total",
                    &[&format!("kind=\"{kind}\"")],
                )
            };
            (removed("artifact") >= 2.0 && removed("mirror") >= 1.0).then_some(())
        },
    )
    .await;
    // The Release renders on, from its commit's tree kept or fetched again.
    f.commit(&[("a.yaml", &config_map("a", 0, "3"))]);
    crate::loops::config_map_holds(&f, "a", "3").await;
    all_true(&f).await;
    assert!(
        daemon
            .logs()
            .contains("removed from the source cache what nothing used for 5s"),
        "{}",
        daemon.logs()
    );
}

//! Two replicas split the shards through Leases; a killed replica's shard moves.

use std::time::Duration;

use convoy::daemon::shard::{cluster_key, shard_of};
use convoy::engine::api::Cluster;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use serde_json::json;

use crate::Daemon;
use crate::support::eventually;
use crate::support::fixture::{Fixture, config_map};

fn holder(lease: &Lease) -> Option<String> {
    lease
        .spec
        .as_ref()?
        .holder_identity
        .clone()
        .filter(|h| !h.is_empty())
}

fn apply_time(cm: &serde_json::Value) -> String {
    cm["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["manager"] == "convoy-release")
        .map(|m| m["time"].as_str().unwrap_or_default().to_string())
        .unwrap_or_default()
}

/// Replicas `replica-a` and `replica-b` of a daemon with two shards, their Leases in
/// `lease_ns`, watching `watched`; returned once each holds one shard, with the holders of
/// shards 0 and 1.
async fn two_replicas(
    f: &Fixture,
    lease_duration: &str,
    lease_ns: &str,
    watched: &str,
) -> (Daemon, Daemon, Api<Lease>, [String; 2]) {
    let args = |id: &'static str| {
        [
            "--shards",
            "2",
            "--lease-duration",
            lease_duration,
            "--identity",
            id,
            "--lease-namespace",
            lease_ns,
            "--watch-namespace",
            watched,
        ]
    };
    let a = Daemon::start(&f.env.kubeconfig, &args("replica-a")).await;
    let b = Daemon::start(&f.env.kubeconfig, &args("replica-b")).await;
    let leases: Api<Lease> = Api::namespaced(f.env.client.clone(), lease_ns);
    let holders = eventually(
        "both shards held by different replicas",
        Duration::from_secs(30),
        || async {
            let h0 = holder(&leases.get_opt("convoy-all-shard-0").await.ok()??)?;
            let h1 = holder(&leases.get_opt("convoy-all-shard-1").await.ok()??)?;
            (h0 != h1).then_some([h0, h1])
        },
    )
    .await;
    (a, b, leases, holders)
}

#[tokio::test]
async fn two_replicas_split_the_shards_and_a_killed_one_hands_its_shard_over() {
    // One Release per shard (a Release without spec.cluster is in shard hash("<ns>/") % 2).
    let mut by_shard: Vec<Option<Fixture>> = vec![None, None];
    for attempt in 0..40 {
        let f = Fixture::new(
            &format!("shard{attempt}"),
            &[("a.yaml", &config_map("a", 0, "1"))],
            json!({"syncPolicy": {"interval": "2s"}}),
        )
        .await;
        let shard = shard_of(&cluster_key(&f.release().await), 2) as usize;
        if by_shard[shard].is_none() {
            by_shard[shard] = Some(f);
        }
        if by_shard.iter().all(Option::is_some) {
            break;
        }
    }
    let [Some(zero), Some(one)] = [by_shard[0].take(), by_shard[1].take()] else {
        panic!("no namespace hashed to one of the shards")
    };
    let lease_ns = zero.env.namespace.clone();
    let watched = format!("{},{}", zero.env.namespace, one.env.namespace);
    let (mut a, b, leases, holders) = two_replicas(&zero, "4s", &lease_ns, &watched).await;
    for f in [&zero, &one] {
        eventually("Applied", Duration::from_secs(30), || async {
            let status = f.release().await.status?;
            (status.condition("Applied")?.status.is_true()).then_some(())
        })
        .await;
    }
    assert_eq!(a.metric("convoy_shards_held", &[]), 1.0);
    assert_eq!(b.metric("convoy_shards_held", &[]), 1.0);
    // A Cluster is probed and its status written by the replica holding its shard, only
    // (with both, one write of each could fail with a conflict after a probe each). Both
    // Clusters are named into replica A's shard.
    let a_holds: u32 = if holders[0] == "replica-a" { 0 } else { 1 };
    let in_a_shard = |f: &Fixture| {
        (0..)
            .map(|i| format!("c{i}"))
            .find(|n| shard_of(&format!("{}/{n}", f.env.namespace), 2) == a_holds)
            .unwrap()
    };
    for f in [&zero, &one] {
        f.kubectl_apply(
            &json!({"apiVersion": "core.convoy.kumodo.io/v1alpha1", "kind": "Cluster",
            "metadata": {"name": in_a_shard(f), "namespace": f.env.namespace},
            "spec": {"inCluster": true}}),
        )
        .await;
    }
    for f in [&zero, &one] {
        let clusters: Api<Cluster> = Api::namespaced(f.env.client.clone(), &f.env.namespace);
        eventually("the Cluster probed", Duration::from_secs(30), || async {
            let status = clusters.get(&in_a_shard(f)).await.ok()?.status?;
            let ready = status.conditions.iter().find(|c| c.type_ == "Ready")?;
            ready.status.is_true().then_some(())
        })
        .await;
    }
    let cluster_passes = |d: &Daemon| d.metric("convoy_reconciles_total", &["loop=\"cluster\""]);
    let probed = |d: &Daemon| {
        d.metric(
            "convoy_reconciles_total",
            &["loop=\"cluster\"", "reason=\"Ready\""],
        )
    };
    assert_eq!(probed(&a), 2.0, "A probed both Clusters");
    assert_eq!(cluster_passes(&b), 0.0, "B leaves A's Clusters alone");
    // Each Release's series come from the replica that holds its shard, and only from it.
    let applied_series = |d: &Daemon, f: &Fixture| {
        let ns = format!("namespace=\"{}\"", f.env.namespace);
        d.metric(
            "convoy_release_condition",
            &[&ns, "type=\"Applied\"", "status=\"True\""],
        )
    };
    let (a_own, b_own) = if holders[0] == "replica-a" {
        (&zero, &one)
    } else {
        (&one, &zero)
    };
    eventually("each replica's series", Duration::from_secs(10), || async {
        (applied_series(&a, a_own) == 1.0 && applied_series(&b, b_own) == 1.0).then_some(())
    })
    .await;
    assert_eq!(
        applied_series(&a, b_own),
        0.0,
        "B's Release is not A's to report"
    );
    assert_eq!(
        applied_series(&b, a_own),
        0.0,
        "A's Release is not B's to report"
    );

    // Kill replica A: its shard goes to B once the lease expires.
    let (a_shard, a_fixture) = if holders[0] == "replica-a" {
        (0, &zero)
    } else {
        (1, &one)
    };
    let before = apply_time(&a_fixture.config_map("a").await.unwrap());
    a.kill();
    let lease_name = format!("convoy-all-shard-{a_shard}");
    eventually("B to take A's shard", Duration::from_secs(30), || async {
        let h = holder(&leases.get_opt(&lease_name).await.ok()??)?;
        (h == "replica-b").then_some(())
    })
    .await;
    eventually("B to hold both shards", Duration::from_secs(10), || async {
        (b.metric("convoy_shards_held", &[]) == 2.0).then_some(())
    })
    .await;
    eventually(
        "B to probe the Clusters of the shard it took",
        Duration::from_secs(10),
        || async { (probed(&b) == 2.0).then_some(()) },
    )
    .await;
    eventually(
        "B to report A's Release",
        Duration::from_secs(10),
        || async { (applied_series(&b, a_own) == 1.0).then_some(()) },
    )
    .await;
    // B looks at A's Release (interval 2s) and finds nothing to apply: no second apply.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        apply_time(&a_fixture.config_map("a").await.unwrap()),
        before,
        "no second apply during the handover"
    );
    // And B carries on with A's Release.
    a_fixture.commit(&[("a.yaml", &config_map("a", 0, "2"))]);
    eventually(
        "B to apply A's Release",
        Duration::from_secs(30),
        || async {
            let cm = a_fixture.config_map("a").await?;
            (cm["data"]["value"] == "2").then_some(())
        },
    )
    .await;
}

/// A replica whose renewals hang (SIGSTOP) keeps its shard only until the Lease expires; the
/// other takes it then, not before, and the stopped one, continued, applies nothing for it.
#[tokio::test]
async fn a_stopped_replica_loses_its_shard_at_expiry_and_applies_nothing_when_it_continues() {
    let mut by_shard: Vec<Option<Fixture>> = vec![None, None];
    for attempt in 0..40 {
        let f = Fixture::new(
            &format!("stop{attempt}"),
            &[("a.yaml", &config_map("a", 0, "1"))],
            json!({"syncPolicy": {"interval": "2s"}}),
        )
        .await;
        let shard = shard_of(&cluster_key(&f.release().await), 2) as usize;
        if by_shard[shard].is_none() {
            by_shard[shard] = Some(f);
        }
        if by_shard.iter().all(Option::is_some) {
            break;
        }
    }
    let [Some(zero), Some(one)] = [by_shard[0].take(), by_shard[1].take()] else {
        panic!("no namespace hashed to one of the shards")
    };
    let lease_ns = zero.env.namespace.clone();
    let watched = format!("{},{}", zero.env.namespace, one.env.namespace);
    let (a, b, leases, holders) = two_replicas(&zero, "6s", &lease_ns, &watched).await;
    for f in [&zero, &one] {
        eventually("Applied", Duration::from_secs(30), || async {
            let status = f.release().await.status?;
            (status.condition("Applied")?.status.is_true()).then_some(())
        })
        .await;
    }
    let (a_shard, a_fixture) = if holders[0] == "replica-a" {
        (0, &zero)
    } else {
        (1, &one)
    };
    let lease_name = format!("convoy-all-shard-{a_shard}");

    // A hangs: no renewal, no pass, its process alive.
    let signal = |sig: &str| {
        let status = std::process::Command::new("kill")
            .args([sig, &a.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    };
    // (Its metrics cannot be read while it is stopped.) A steady pass writes nothing, so the
    // count holds until A writes for a shard. A is stopped once it has been quiet for longer
    // than an interval: a write sent just before SIGSTOP would be counted after SIGCONT.
    let a_patches = eventually("A to be quiet", Duration::from_secs(60), || async {
        let before = a.metric("convoy_api_requests_total", &["verb=\"patch\""]);
        tokio::time::sleep(Duration::from_secs(3)).await;
        let after = a.metric("convoy_api_requests_total", &["verb=\"patch\""]);
        (after == before).then_some(after)
    })
    .await;
    signal("-STOP");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let last_renewal = leases
        .get(&lease_name)
        .await
        .unwrap()
        .spec
        .unwrap()
        .renew_time
        .unwrap()
        .0;
    let taken = eventually("B to take A's shard", Duration::from_secs(30), || async {
        let lease = leases.get_opt(&lease_name).await.ok()??;
        let spec = lease.spec?;
        (spec.holder_identity.as_deref() == Some("replica-b")).then_some(spec.acquire_time?.0)
    })
    .await;
    let waited = taken.duration_since(last_renewal);
    assert!(
        waited >= jiff::SignedDuration::from_secs(6),
        "B took the shard {waited:?} after A's last renewal, before the Lease (6s) expired"
    );
    a_fixture.commit(&[("a.yaml", &config_map("a", 0, "2"))]);
    eventually(
        "B to apply A's Release",
        Duration::from_secs(30),
        || async {
            let cm = a_fixture.config_map("a").await?;
            (cm["data"]["value"] == "2").then_some(())
        },
    )
    .await;

    // A continues: it finds its ownership expired and writes nothing for the shard, while
    // B applies the next change.
    signal("-CONT");
    eventually("A to hold no shard", Duration::from_secs(30), || async {
        (a.metric("convoy_shards_held", &[]) == 0.0).then_some(())
    })
    .await;
    a_fixture.commit(&[("a.yaml", &config_map("a", 0, "3"))]);
    eventually(
        "B to apply the next change",
        Duration::from_secs(30),
        || async {
            let cm = a_fixture.config_map("a").await?;
            (cm["data"]["value"] == "3").then_some(())
        },
    )
    .await;
    // Both Releases' intervals (2s) pass a few times over.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        a.metric("convoy_api_requests_total", &["verb=\"patch\""]),
        a_patches,
        "the continued replica applied or wrote status for a shard it no longer holds:\n{}",
        a.logs()
    );
    assert_eq!(b.metric("convoy_shards_held", &[]), 2.0);
}

/// Every replica fetches a source for the Releases of its shards, and one writes its status:
/// the replica whose shard holds the source. A commit reaches the Releases of both replicas at
/// the source's interval (their own is 10m), though only one of them sees the status move.
#[tokio::test]
async fn a_commit_reaches_the_releases_of_both_replicas_and_one_writes_the_source_status() {
    let f = Fixture::new(
        "shard-source",
        &[("a.yaml", &config_map("a", 0, "1"))],
        json!({"syncPolicy": {"interval": "10m"}}),
    )
    .await;
    let ns = f.env.namespace.clone();
    // A Release's shard is its target cluster's: one Cluster (this cluster) in each shard.
    let in_shard = |shard: u32| {
        (0..)
            .map(|i| format!("c{i}"))
            .find(|n| shard_of(&format!("{ns}/{n}"), 2) == shard)
            .unwrap()
    };
    let clusters = [in_shard(0), in_shard(1)];
    for name in &clusters {
        f.kubectl_apply(
            &json!({"apiVersion": "core.convoy.kumodo.io/v1alpha1", "kind": "Cluster",
            "metadata": {"name": name, "namespace": ns}, "spec": {"inCluster": true}}),
        )
        .await;
    }
    f.patch_spec(json!({"cluster": clusters[0]})).await;
    f.repo
        .commit(&[("other/b.yaml", &config_map("b", 0, "1"))], "other");
    f.add_release(
        "other",
        "other",
        json!({"cluster": clusters[1], "syncPolicy": {"interval": "10m"}}),
    )
    .await;
    f.kubectl_apply(
        &json!({"apiVersion": "source.convoy.kumodo.io/v1alpha1", "kind": "GitRepository",
        "metadata": {"name": "repo", "namespace": ns},
        "spec": {"url": f.repo.file_url(), "ref": {"branch": "main"}, "interval": "2s"}}),
    )
    .await;
    let (a, b, _, holders) = two_replicas(&f, "4s", &ns, &ns).await;
    let value = |name: &'static str, want: &'static str| {
        let f = &f;
        async move {
            let cm = f.config_map(name).await?;
            (cm["data"]["value"] == want).then_some(())
        }
    };
    eventually("both Releases applied", Duration::from_secs(60), || async {
        value("a", "1").await?;
        value("b", "1").await
    })
    .await;

    f.repo.commit(
        &[
            ("app/a.yaml", &config_map("a", 0, "2")),
            ("other/b.yaml", &config_map("b", 0, "2")),
        ],
        "both",
    );
    eventually(
        "the commit applied by both replicas",
        Duration::from_secs(30),
        || async {
            value("a", "2").await?;
            value("b", "2").await
        },
    )
    .await;

    let writer = &holders[shard_of(&format!("GitRepository/{ns}/repo"), 2) as usize];
    let (owner, other) = if writer == "replica-a" {
        (&a, &b)
    } else {
        (&b, &a)
    };
    let status_writes = |d: &Daemon| {
        d.metric(
            "convoy_api_requests_total",
            &["verb=\"update\"", "resource=\"gitrepositories/status\""],
        )
    };
    assert!(
        status_writes(owner) >= 1.0,
        "{writer} holds the source's shard and writes its status"
    );
    assert_eq!(
        status_writes(other),
        0.0,
        "the other replica fetches the source but leaves its status alone"
    );
    let errors = |d: &Daemon| d.metric("convoy_pass_errors_total", &["loop=\"git\""]);
    assert_eq!((errors(&a), errors(&b)), (0.0, 0.0));
}

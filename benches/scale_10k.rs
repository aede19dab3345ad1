//! Benchmark: 10,000 Releases of 1–3 objects each (a ConfigMap; plus a Service; plus a
//! Deployment of 0 replicas) in 10 namespaces, served by three `convoy daemon --shards 3`
//! replicas on one control plane (kwok). Prints the time until all are Applied and Healthy,
//! each replica's RSS per Release it holds (goal ≤ 40 KiB), the shard balance (goal: each
//! replica within ±15 % of a third of the Releases), the API requests per minute at steady
//! state (goal ≈ 0 writes; reads bounded by the watches), and the takeover after one replica
//! is killed with SIGKILL (goal: ≤ the lease duration plus one reconcile).
//!
//! Sharding is by target Cluster: a Release's shard is a hash of `<namespace>/<spec.cluster>`
//! (`<namespace>/` without one). Ten namespaces of home-cluster Releases would be ten keys over
//! three shards, and their balance luck (the output shows what these ten would give). So each
//! namespace gets `CONVOY_BENCH_CLUSTERS` (100) `Cluster` objects with `inCluster: true` — the
//! same API server under another name, one client for all, as a fleet of clusters would look to
//! the shard hash — and its Releases are spread evenly over them: 1,000 keys, whose balance is
//! that of a hash over 1,000 keys (about ±4.5 % standard deviation per shard).
//!
//! The takeover: right after the SIGKILL, the spec of `CONVOY_BENCH_TAKEOVER_SAMPLE` (20)
//! Releases of the killed replica's shard is changed (a label mutation); the time until their
//! ConfigMaps carry the label is the time until the survivors took the shard and worked on
//! it. Also printed: when the Leases changed hands and when the survivors' queues drained.
//!
//! `cargo bench --bench scale_10k` (an hour or more on two cores); `CONVOY_BENCH_RELEASES`,
//! `CONVOY_BENCH_NAMESPACES`, `CONVOY_BENCH_CLUSTERS` (per namespace), `CONVOY_BENCH_LEASE`
//! (the lease duration, 15s), `CONVOY_BENCH_APP_INTERVAL` (every Release's interval, 10m) and
//! `CONVOY_BENCH_STEADY` (1m) and `CONVOY_BENCH_WORKERS` (each replica's `--workers`, 4, the
//! default) change the run; `CONVOY_BENCH_WRAP_REPLICA_A` runs replica-a under
//! a profiler (`heaptrack -o FILE`). Under `cargo test` (no `--bench` flag) it does
//! nothing.

#![allow(clippy::unwrap_used)]

#[path = "../tests/support/mod.rs"]
mod support;

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{
    Proc, RequestCounts, RequestKey, Tracker, condition_true, metric_by, metric_sum, metrics,
    resource,
};
use convoy::daemon::shard::shard_of;
use futures::StreamExt;
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use support::servers::{GitRepo, free_port};
use support::{ControlPlane, STORE_NAMESPACE, client_for, convoy_bin, path_with_testenv};

const SHARDS: u32 = 3;
/// How long the steady-state window (and the takeover) waits for the work queues to drain.
const DRAIN_WAIT: Duration = Duration::from_secs(300);
const REPLICAS: [&str; 3] = ["replica-a", "replica-b", "replica-c"];

struct Settings {
    releases: usize,
    namespaces: usize,
    clusters: usize,
    lease: Duration,
    interval: Duration,
    steady: Duration,
    sample: usize,
    deadline: Duration,
    /// Each replica's `--workers` (per loop).
    workers: usize,
}

/// One Release: where it lives, its name, its Cluster, its object count.
struct Rel {
    namespace: String,
    name: String,
    cluster: String,
    objects: usize,
}

impl Rel {
    fn shard(&self) -> u32 {
        shard_of(&format!("{}/{}", self.namespace, self.cluster), SHARDS)
    }
}

fn plan(s: &Settings) -> Vec<Rel> {
    (0..s.releases)
        .map(|i| {
            let ns = i % s.namespaces;
            let within = i / s.namespaces;
            Rel {
                namespace: format!("scale-{ns}"),
                name: format!("rel-{i:05}"),
                cluster: format!("c-{:03}", within % s.clusters),
                objects: i % 3 + 1,
            }
        })
        .collect()
}

fn files(r: &Rel) -> Vec<(String, String)> {
    let dir = format!("{}/{}", r.namespace, r.name);
    let n = &r.name;
    let mut f = vec![(
        format!("{dir}/cm.yaml"),
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {n}-cm\ndata:\n  value: \"{n}\"\n"
        ),
    )];
    if r.objects >= 2 {
        f.push((
            format!("{dir}/svc.yaml"),
            format!(
                "apiVersion: v1\nkind: Service\nmetadata:\n  name: {n}\nspec:\n  selector: {{app: {n}}}\n  ports:\n  - port: 80\n"
            ),
        ));
    }
    if r.objects >= 3 {
        f.push((
            format!("{dir}/deploy.yaml"),
            format!(
                "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {n}\nspec:\n  replicas: 0\n  selector:\n    matchLabels: {{app: {n}}}\n  template:\n    metadata:\n      labels: {{app: {n}}}\n    spec:\n      containers:\n      - name: app\n        image: nginx:1.27\n"
            ),
        ));
    }
    f
}

struct Replica {
    name: &'static str,
    proc: Proc,
    port: u16,
}

impl Replica {
    fn start(name: &'static str, s: &Settings, kubeconfig: &Path, dir: &Path) -> Self {
        let port = free_port();
        // Diagnostics: `CONVOY_BENCH_WRAP_REPLICA_A="heaptrack -o /tmp/a"` runs replica-a under
        // a profiler (its memory figures are then the wrapper's).
        let wrap = std::env::var("CONVOY_BENCH_WRAP_REPLICA_A")
            .ok()
            .filter(|_| name == REPLICAS[0]);
        let wrap: Vec<String> = wrap
            .as_deref()
            .unwrap_or_default()
            .split_whitespace()
            .map(str::to_string)
            .collect();
        let mut cmd = match wrap.split_first() {
            Some((program, args)) => {
                let mut c = Command::new(program);
                c.args(args).arg(convoy_bin());
                c
            }
            None => Command::new(convoy_bin()),
        };
        cmd.arg("--kubeconfig")
            .arg(kubeconfig)
            .args([
                "daemon",
                "--shards",
                &SHARDS.to_string(),
                "--identity",
                name,
                "--lease-duration",
                &format!("{}s", s.lease.as_secs()),
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--allow-file-urls",
                "--workers",
                &s.workers.to_string(),
                "--cache-dir",
            ])
            .arg(dir.join(format!("cache-{name}")))
            .env("PATH", path_with_testenv());
        let proc = Proc::spawn(name, cmd, &dir.join(format!("{name}.log")));
        Self { name, proc, port }
    }

    fn metric(&self, name: &str, filter: &[(&str, &str)]) -> f64 {
        metric_sum(&metrics(self.port), name, filter)
    }
}

/// Who holds each shard's Lease (`convoy-all-shard-N`).
async fn holders(client: &Client) -> BTreeMap<u32, String> {
    let api: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(client.clone(), STORE_NAMESPACE);
    let mut out = BTreeMap::new();
    for shard in 0..SHARDS {
        if let Ok(Some(l)) = api.get_opt(&format!("convoy-all-shard-{shard}")).await
            && let Some(h) = l
                .spec
                .and_then(|s| s.holder_identity)
                .filter(|h| !h.is_empty())
        {
            out.insert(shard, h);
        }
    }
    out
}

fn kib_per(mib: f64, n: usize) -> f64 {
    if n == 0 {
        f64::NAN
    } else {
        mib * 1024.0 / n as f64
    }
}

#[tokio::main]
async fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let s = Settings {
        releases: common::env_number("CONVOY_BENCH_RELEASES", 10_000usize),
        namespaces: common::env_number("CONVOY_BENCH_NAMESPACES", 10usize).max(1),
        clusters: common::env_number("CONVOY_BENCH_CLUSTERS", 100usize).max(1),
        lease: common::env_duration("CONVOY_BENCH_LEASE", "15s"),
        interval: common::env_duration("CONVOY_BENCH_APP_INTERVAL", "10m"),
        steady: common::env_duration("CONVOY_BENCH_STEADY", "1m"),
        sample: common::env_number("CONVOY_BENCH_TAKEOVER_SAMPLE", 20usize),
        deadline: common::env_duration("CONVOY_BENCH_DEADLINE", "3h"),
        workers: common::env_number("CONVOY_BENCH_WORKERS", 4usize).max(1),
    };
    let logs = std::env::temp_dir().join(format!("scale-10k-{}", std::process::id()));
    std::fs::create_dir_all(&logs).unwrap();
    eprintln!("scale_10k: logs in {}", logs.display());
    let rels = plan(&s);

    let plane = ControlPlane::own("scale-10k", &[]);
    let client = client_for(&plane.kubeconfig).await;
    let conn = convoy::engine::connect::Connection::from_source(
        &convoy::engine::connect::KubeconfigSource {
            path: Some(plane.kubeconfig.clone()),
            context: None,
        },
    )
    .await
    .unwrap();
    convoy::engine::install::install_default_rules(&conn)
        .await
        .unwrap();

    // The repository: every Release's directory.
    let repo = GitRepo::new();
    let all: Vec<(String, String)> = rels.iter().flat_map(files).collect();
    let refs: Vec<(&str, &str)> = all.iter().map(|(p, c)| (p.as_str(), c.as_str())).collect();
    repo.commit(&refs, "scale");

    // Namespaces, a GitRepository in each, and the Clusters.
    let ns_api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let dynamic = |ns: &str, r: &kube::discovery::ApiResource| -> Api<DynamicObject> {
        Api::namespaced_with(client.clone(), ns, r)
    };
    let git_r = resource(
        "source.convoy.kumodo.io",
        "v1alpha1",
        "GitRepository",
        "gitrepositories",
    );
    let cluster_r = resource("core.convoy.kumodo.io", "v1alpha1", "Cluster", "clusters");
    let release_r = resource("core.convoy.kumodo.io", "v1alpha1", "Release", "releases");
    let create = |api: Api<DynamicObject>, v: Value| async move {
        let o: DynamicObject = serde_json::from_value(v).unwrap();
        api.create(&PostParams::default(), &o).await.unwrap();
    };
    for n in 0..s.namespaces {
        let ns = format!("scale-{n}");
        let o = serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap();
        ns_api.create(&PostParams::default(), &o).await.unwrap();
        create(
            dynamic(&ns, &git_r),
            json!({"apiVersion": git_r.api_version, "kind": "GitRepository",
                   "metadata": {"name": "repo"},
                   "spec": {"url": repo.file_url(), "ref": {"branch": "main"}}}),
        )
        .await;
        futures::stream::iter(0..s.clusters)
            .map(|c| {
                create(
                    dynamic(&ns, &cluster_r),
                    json!({"apiVersion": cluster_r.api_version, "kind": "Cluster",
                           "metadata": {"name": format!("c-{c:03}")},
                           "spec": {"inCluster": true}}),
                )
            })
            .buffer_unordered(8)
            .for_each(|_| async {})
            .await;
    }

    // What the shard hash gives, before anything runs.
    let mut expected = [0usize; SHARDS as usize];
    for r in &rels {
        expected[r.shard() as usize] += 1;
    }
    let mut home_keys = [0usize; SHARDS as usize];
    for n in 0..s.namespaces {
        home_keys[shard_of(&format!("scale-{n}/"), SHARDS) as usize] += 1;
    }

    // Three replicas; each takes one shard before the Releases come.
    let mut replicas: Vec<Replica> = REPLICAS
        .iter()
        .map(|name| Replica::start(name, &s, &plane.kubeconfig, &logs))
        .collect();
    for r in &replicas {
        common::wait_http_ok(
            r.name,
            &format!("http://127.0.0.1:{}/readyz", r.port),
            Duration::from_secs(120),
        );
    }
    support::eventually(
        "each replica to hold one shard",
        s.lease * 4 + Duration::from_secs(60),
        || async {
            let h = holders(&client).await;
            let distinct: std::collections::BTreeSet<&String> = h.values().collect();
            (h.len() == SHARDS as usize && distinct.len() == REPLICAS.len()).then_some(h)
        },
    )
    .await;
    let held_by = |h: &BTreeMap<u32, String>, replica: &str| -> usize {
        rels.iter()
            .filter(|r| h.get(&r.shard()).map(String::as_str) == Some(replica))
            .count()
    };

    let releases = Tracker::start(client.clone(), &release_r, None);
    releases.expect(Arc::new(|o: &Value| {
        condition_true(o, "Applied") && condition_true(o, "Healthy")
    }));
    // What a replica takes before any Release exists (its caches of the Clusters included).
    tokio::time::sleep(Duration::from_secs(5)).await;
    let rss0: Vec<f64> = replicas
        .iter()
        .map(|r| common::memory(r.proc.pid(), "VmRSS:"))
        .collect();
    let counts0 = RequestCounts::scrape(&client).await;
    let cpu0: Vec<f64> = replicas
        .iter()
        .map(|r| common::cpu_seconds(r.proc.pid()))
        .collect();
    let load_before = common::loadavg();
    let interval = format!("{}s", s.interval.as_secs());
    let started = Instant::now();
    futures::stream::iter(rels.iter())
        .map(|r| {
            create(
                dynamic(&r.namespace, &release_r),
                json!({"apiVersion": release_r.api_version, "kind": "Release",
                       "metadata": {"name": r.name},
                       "spec": {
                           "source": {"kind": "GitRepository", "name": "repo", "path": format!("{}/{}", r.namespace, r.name)},
                           "cluster": r.cluster,
                           "targetNamespace": r.namespace,
                           "syncPolicy": {"interval": interval},
                           "healthAssessment": {
                               "globalRuleSetSelector": {"matchLabels": {"health.convoy.kumodo.io/defaults": "true"}},
                               "deadline": "10m",
                           },
                       }}),
            )
        })
        .buffer_unordered(8)
        .for_each(|_| async {})
        .await;
    let created = started.elapsed();
    let mut last_report = Instant::now();
    let converged = loop {
        if let Some(at) = releases.all_met(rels.len()) {
            break at.duration_since(started);
        }
        if last_report.elapsed() > Duration::from_secs(30) {
            let (done, seen) = releases.count();
            eprintln!(
                "  {done}/{seen} Applied and Healthy after {:.0?} (load {})",
                started.elapsed(),
                common::loadavg()
            );
            for r in &mut replicas {
                r.proc.assert_running();
            }
            last_report = Instant::now();
        }
        assert!(
            started.elapsed() < s.deadline,
            "not all Releases were Applied and Healthy within {:?} ({:?}); e.g. {:?}; logs in {}",
            s.deadline,
            releases.count(),
            releases.unmet(3),
            logs.display()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let counts1 = RequestCounts::scrape(&client).await;
    let load_converged = common::loadavg();
    let converge_cpu: Vec<f64> = replicas
        .iter()
        .zip(&cpu0)
        .map(|(r, c)| common::cpu_seconds(r.proc.pid()) - c)
        .collect();
    let passes: Vec<f64> = replicas
        .iter()
        .map(|r| r.metric("convoy_reconciles_total", &[("loop", "controller")]))
        .collect();
    let peak: Vec<f64> = replicas
        .iter()
        .map(|r| common::memory(r.proc.pid(), "VmHWM:"))
        .collect();

    // Steady state: the queues drain (or, if they do not within DRAIN_WAIT, as at 10,000
    // Releases on two cores, what is still queued is printed), 30 s pass, one window is counted.
    let settle = Instant::now();
    let all: Vec<usize> = (0..replicas.len()).collect();
    let undrained = drain(&replicas, &all, settle, DRAIN_WAIT).await;
    tokio::time::sleep(Duration::from_secs(30)).await;
    let settled = settle.elapsed();
    let holders_steady = holders(&client).await;
    let counts2 = RequestCounts::scrape(&client).await;
    let own0: Vec<BTreeMap<String, f64>> = replicas
        .iter()
        .map(|r| metric_by(&metrics(r.port), "convoy_api_requests_total", "verb"))
        .collect();
    tokio::time::sleep(s.steady).await;
    let counts3 = RequestCounts::scrape(&client).await;
    let own1: Vec<BTreeMap<String, f64>> = replicas
        .iter()
        .map(|r| metric_by(&metrics(r.port), "convoy_api_requests_total", "verb"))
        .collect();
    let rss: Vec<f64> = replicas
        .iter()
        .map(|r| common::memory(r.proc.pid(), "VmRSS:"))
        .collect();
    let pass_mean = {
        let (sum, n) = replicas.iter().fold((0.0, 0.0), |(s, n), r| {
            (
                s + r.metric(
                    "convoy_reconcile_duration_seconds_sum",
                    &[("loop", "controller")],
                ),
                n + r.metric(
                    "convoy_reconcile_duration_seconds_count",
                    &[("loop", "controller")],
                ),
            )
        });
        sum / n
    };

    // The takeover: SIGKILL one replica, change a sample of its Releases at once.
    let victim = 2usize;
    let victim_name = replicas[victim].name;
    let victim_shards: Vec<u32> = holders_steady
        .iter()
        .filter(|(_, h)| h.as_str() == victim_name)
        .map(|(s, _)| *s)
        .collect();
    let in_victim: Vec<&Rel> = rels
        .iter()
        .filter(|r| victim_shards.contains(&r.shard()))
        .collect();
    let step = (in_victim.len() / s.sample.max(1)).max(1);
    let sample: Vec<&Rel> = in_victim
        .iter()
        .step_by(step)
        .take(s.sample)
        .copied()
        .collect();
    let labelled = Tracker::start(
        client.clone(),
        &resource("", "v1", "ConfigMap", "configmaps"),
        None,
    );
    labelled.expect(Arc::new(|o: &Value| {
        o["metadata"]["labels"]["bench-takeover"] == "1"
    }));
    tokio::time::sleep(Duration::from_secs(3)).await;
    let survivors = [0usize, 1usize];
    let loops = ["controller", "drift", "health"];
    let passes_of = |replicas: &[Replica]| -> Vec<f64> {
        loops
            .iter()
            .map(|l| {
                survivors
                    .iter()
                    .map(|i| replicas[*i].metric("convoy_reconciles_total", &[("loop", l)]))
                    .sum()
            })
            .collect()
    };
    let passes_before = passes_of(&replicas);
    replicas[victim].proc.kill9();
    let killed = Instant::now();
    let mutation =
        json!({"spec": {"mutations": [{"name": "takeover", "labels": {"bench-takeover": "1"}}]}});
    for r in &sample {
        dynamic(&r.namespace, &release_r)
            .patch(&r.name, &PatchParams::default(), &Patch::Merge(&mutation))
            .await
            .unwrap();
    }
    let mut leases_moved = None;
    let mut all_held = None;
    let cm_keys: Vec<String> = sample
        .iter()
        .map(|r| format!("{}/{}-cm", r.namespace, r.name))
        .collect();
    let applied = loop {
        if leases_moved.is_none() {
            let h = holders(&client).await;
            if victim_shards
                .iter()
                .all(|s| h.get(s).is_some_and(|x| x != victim_name))
            {
                leases_moved = Some(killed.elapsed());
            }
        }
        if all_held.is_none() {
            let held: f64 = survivors
                .iter()
                .map(|i| replicas[*i].metric("convoy_shards_held", &[]))
                .sum();
            if held == f64::from(SHARDS) {
                all_held = Some(killed.elapsed());
            }
        }
        if let Some(at) = labelled.met_at(&cm_keys) {
            break at.into_iter().map(|t| t.duration_since(killed)).max();
        }
        assert!(
            killed.elapsed() < Duration::from_secs(1800),
            "the survivors did not apply the sample of the killed replica's shard within 30 minutes; logs in {}",
            logs.display()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let takeover_undrained = drain(
        &replicas,
        &survivors,
        killed,
        DRAIN_WAIT + Duration::from_secs(60),
    )
    .await;
    let drained = killed.elapsed();
    let passes_after = passes_of(&replicas);
    let holders_after = holders(&client).await;

    // The report.
    let total = rels.len();
    let objects: usize = rels.iter().map(|r| r.objects).sum();
    println!(
        "scale_10k: {total} Releases ({objects} objects: ConfigMaps, Services, Deployments of 0 replicas) in {} namespaces, {} inCluster Clusters each ({} shard keys), 3 replicas of convoy daemon --shards 3, kwok",
        s.namespaces,
        s.clusters,
        s.namespaces * s.clusters
    );
    println!(
        "  load average before / converged: {load_before} / {load_converged}; Release interval {}s, lease {}s, --workers {}",
        s.interval.as_secs(),
        s.lease.as_secs(),
        s.workers
    );
    println!(
        "  created in                          {:>9.1} s",
        created.as_secs_f64()
    );
    println!(
        "  all Applied and Healthy after       {:>9.1} s  → {:.1} Releases/s",
        converged.as_secs_f64(),
        total as f64 / converged.as_secs_f64()
    );
    println!(
        "  shard keys' Releases by shard (the hash): {:?} of {total}; as home-cluster Releases ({} keys) the shards would get {:?} namespaces",
        expected, s.namespaces, home_keys
    );
    println!(
        "  replica    shards  Releases  share (goal ±15 % of 1/3)   passes  CPU    peak RSS  RSS steady  per Release held (goal ≤ 40 KiB)"
    );
    let mut balance_ok = true;
    let mut memory_ok = true;
    for (i, r) in replicas.iter().enumerate() {
        let shards: Vec<u32> = holders_steady
            .iter()
            .filter(|(_, h)| h.as_str() == r.name)
            .map(|(s, _)| *s)
            .collect();
        let held = held_by(&holders_steady, r.name);
        let share = held as f64 / total as f64;
        let off = (share * 3.0 - 1.0) * 100.0;
        balance_ok &= off.abs() <= 15.0;
        let per = kib_per(rss[i], held);
        memory_ok &= per <= 40.0;
        println!(
            "  {:<10} {:<7} {:>8}  {:>5.1} % ({:+.1} %)            {:>7.0} {:>5.0} s {:>7.1} MiB {:>6.1} MiB {:>7.1} MiB  {:>6.1} KiB (above RSS before: {:.1} KiB; per Release watched: {:.1} KiB; peak {:.1} KiB)",
            r.name,
            format!("{shards:?}"),
            held,
            share * 100.0,
            off,
            passes[i],
            converge_cpu[i],
            rss0[i],
            peak[i],
            rss[i],
            per,
            kib_per(rss[i] - rss0[i], held),
            kib_per(rss[i] - rss0[i], total),
            kib_per(peak[i], held)
        );
    }
    println!(
        "  (every replica watches all {total} Releases and ReleaseInventories; it caches those of the shards it holds in full, the other Releases as stubs and their inventories not at all)"
    );
    println!(
        "  → balance {}; memory per Release held {}",
        if balance_ok { "✓" } else { "✗" },
        if memory_ok { "✓" } else { "✗" }
    );

    // Steady state per minute.
    let window = s.steady.as_secs_f64() / 60.0;
    let steady = counts3.since(&counts2);
    let per_min = |keep: &dyn Fn(&RequestKey) -> bool| steady.sum(keep) / window;
    let convoy_kinds = |k: &RequestKey| k.group.ends_with("convoy.kumodo.io");
    let apps = |k: &RequestKey| {
        k.subresource.is_empty()
            && matches!(
                (k.group.as_str(), k.resource.as_str()),
                ("", "configmaps") | ("", "services") | ("apps", "deployments")
            )
    };
    let leases = |k: &RequestKey| k.resource == "leases";
    match undrained {
        None => println!(
            "  steady state (queues drained after {:.0} s + 30 s), per minute, as the API server counted:",
            settled.as_secs_f64() - 30.0
        ),
        Some(depth) => println!(
            "  steady state (queues NOT drained after {:.0} s: {depth:.0} keys still queued; + 30 s), per minute, as the API server counted:",
            settled.as_secs_f64() - 30.0
        ),
    }
    println!(
        "    writes: convoy's kinds {:.0}, the apps' objects {:.0}, Secrets {:.0}, Leases {:.0} (shard renewals + kwok's node lease), Events {:.0}",
        per_min(&|k| k.is_write() && convoy_kinds(k)),
        per_min(&|k| k.is_write() && apps(k)),
        per_min(&|k| k.is_write() && k.resource == "secrets"),
        per_min(&|k| k.is_write() && leases(k)),
        per_min(&|k| k.is_write() && k.is_event()),
    );
    let mut reads: BTreeMap<String, f64> = BTreeMap::new();
    for (k, v) in &steady.0 {
        if k.is_read() {
            let what = if k.resource.is_empty() {
                "non-resource (/version, discovery)".to_string()
            } else {
                format!("{} {}", k.verb, k.resource)
            };
            *reads.entry(what).or_insert(0.0) += v / window;
        }
    }
    let reads_line: Vec<String> = reads
        .iter()
        .filter(|(_, v)| **v >= 0.5)
        .map(|(k, v)| format!("{k} {v:.0}"))
        .collect();
    println!("    reads: {}", reads_line.join(", "));
    println!(
        "    watches started: {:.0}",
        per_min(&|k| k.verb == "WATCH")
    );
    println!("    each replica's own count (convoy_api_requests_total), per minute:");
    for (i, r) in replicas.iter().enumerate() {
        let line: Vec<String> = own1[i]
            .iter()
            .map(|(verb, n)| (verb, n - own0[i].get(verb).copied().unwrap_or(0.0)))
            .filter(|(_, n)| *n > 0.0)
            .map(|(verb, n)| format!("{verb} {:.0}", n / window))
            .collect();
        println!("      {:<10} {}", r.name, line.join(", "));
    }
    let converge = counts1.since(&counts0);
    println!(
        "  API requests until converged: writes {:.0} (convoy's kinds {:.0}, apps' objects {:.0}, Secrets {:.0}), reads {:.0}, dry runs {:.0}",
        converge.sum(RequestKey::is_write),
        converge.sum(|k| k.is_write() && convoy_kinds(k)),
        converge.sum(|k| k.is_write() && apps(k)),
        converge.sum(|k| k.is_write() && k.resource == "secrets"),
        converge.sum(RequestKey::is_read),
        converge.sum(|k| k.dry_run),
    );

    // Takeover.
    let bound = s.lease.as_secs_f64() + pass_mean;
    let opt = |d: Option<Duration>| {
        d.map(|d| format!("{:.1} s", d.as_secs_f64()))
            .unwrap_or_else(|| "—".into())
    };
    println!(
        "  takeover after SIGKILL of {victim_name} (shards {victim_shards:?}, {} Releases):",
        in_victim.len()
    );
    println!(
        "    its Leases held by survivors after  {}",
        opt(leases_moved)
    );
    println!(
        "    survivors hold all {SHARDS} shards after   {}",
        opt(all_held)
    );
    println!(
        "    the {} sampled Releases applied after {} (goal ≤ lease {}s + one controller pass, mean {:.2} s = {:.1} s {})",
        sample.len(),
        opt(applied),
        s.lease.as_secs(),
        pass_mean,
        bound,
        if applied.is_some_and(|a| a.as_secs_f64() <= bound) {
            "✓"
        } else {
            "✗"
        }
    );
    println!(
        "    survivors' queues {} after      {:.1} s; Leases now {holders_after:?}",
        match takeover_undrained {
            None => "drained".to_string(),
            Some(depth) => format!("NOT drained ({depth:.0} keys queued)"),
        },
        drained.as_secs_f64()
    );
    let delta: Vec<String> = loops
        .iter()
        .enumerate()
        .map(|(n, l)| format!("{l} {:.0}", passes_after[n] - passes_before[n]))
        .collect();
    println!(
        "    survivors' passes from the kill until drained: {} (the killed shard holds {} Releases)",
        delta.join(", "),
        in_victim.len()
    );
}

/// Wait until the queues of `replicas[which]` are empty, or `wait` after `since`: `None` when
/// they drained, else the keys still queued (the report prints them rather than waiting on).
async fn drain(
    replicas: &[Replica],
    which: &[usize],
    since: Instant,
    wait: Duration,
) -> Option<f64> {
    loop {
        let depth: f64 = which
            .iter()
            .map(|i| replicas[*i].metric("convoy_queue_depth", &[]))
            .sum();
        if depth == 0.0 {
            return None;
        }
        if since.elapsed() > wait {
            return Some(depth);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

//! What the benchmarks share beyond `tests/support`: a process's CPU and memory from /proc,
//! the counters of a `/metrics` page (the daemon's, a Flux controller's, the API server's
//! `apiserver_request_total`), processes started for a run and stopped with it, waiting for
//! readiness (an HTTP probe, a watch that notes when each object first met a condition), the
//! Flux peers (`scripts/peers`), and the 1,000 objects and raw ceiling probe of the sync
//! benchmarks.
//!
//! Each benchmark takes what it needs (`mod common;`), so the rest is dead code to it.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::{Api, DynamicObject};
use kube::discovery::ApiResource;
use serde_json::Value;

// ---------------------------------------------------------------------------------------------
// /proc
// ---------------------------------------------------------------------------------------------

/// The fields of /proc/PID/stat after the command name (state is field 3, man proc).
fn stat_fields(pid: u32) -> Vec<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().map(str::to_string).collect())
        .unwrap_or_default()
}

/// Clock ticks of field `n` (1-based, as man proc numbers them) in seconds.
fn ticks(fields: &[String], n: usize) -> f64 {
    let hz = 100.0; // USER_HZ on Linux
    fields
        .get(n - 3)
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(0.0)
        / hz
}

/// CPU seconds (user + system) a process used itself.
pub fn cpu_seconds(pid: u32) -> f64 {
    let f = stat_fields(pid);
    ticks(&f, 14) + ticks(&f, 15)
}

/// CPU seconds of a process's children that it waited for (cutime + cstime): the `git`
/// processes convoy runs, the `git http-backend` processes of the Git server.
pub fn children_cpu_seconds(pid: u32) -> f64 {
    let f = stat_fields(pid);
    ticks(&f, 16) + ticks(&f, 17)
}

/// CPU seconds (user + system) and peak RSS in MiB of a process.
pub fn usage(pid: u32) -> (f64, f64) {
    (cpu_seconds(pid), memory(pid, "VmHWM:"))
}

/// A memory figure of /proc/PID/status in MiB (VmHWM: peak RSS, VmRSS: current).
pub fn memory(pid: u32, field: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib = status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(0.0);
    kib / 1024.0
}

/// The machine's load average over 1, 5 and 15 minutes, as /proc/loadavg says it.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

// ---------------------------------------------------------------------------------------------
// /metrics pages
// ---------------------------------------------------------------------------------------------

/// The `/metrics` page on a loopback port (empty when nothing answers).
pub fn metrics(port: u16) -> String {
    let out = Command::new("curl")
        .args(["-sf", &format!("http://127.0.0.1:{port}/metrics")])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// One sample line of a metrics page: name, labels, value.
pub fn samples(text: &str) -> impl Iterator<Item = (&str, BTreeMap<&str, &str>, f64)> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let value: f64 = value.parse().ok()?;
            let (name, labels) = match series.split_once('{') {
                Some((name, rest)) => (name, parse_labels(rest.strip_suffix('}')?)),
                None => (series, BTreeMap::new()),
            };
            Some((name, labels, value))
        })
}

/// `a="x",b="y"` (values without escaped quotes, as these pages have them).
fn parse_labels(text: &str) -> BTreeMap<&str, &str> {
    let mut labels = BTreeMap::new();
    let mut rest = text;
    while let Some((key, after)) = rest.split_once("=\"") {
        let Some((value, tail)) = after.split_once('"') else {
            break;
        };
        labels.insert(key.trim_start_matches(','), value);
        rest = tail;
    }
    labels
}

/// The sum of a metric's series whose labels include every pair of `filter`.
pub fn metric_sum(text: &str, name: &str, filter: &[(&str, &str)]) -> f64 {
    samples(text)
        .filter(|(n, labels, _)| *n == name && filter.iter().all(|(k, v)| labels.get(k) == Some(v)))
        .map(|(_, _, v)| v)
        .sum::<f64>()
        + 0.0 // an empty sum is -0.0
}

/// A metric's sums by the value of one label.
pub fn metric_by(text: &str, name: &str, label: &str) -> BTreeMap<String, f64> {
    let mut by = BTreeMap::new();
    for (n, labels, v) in samples(text) {
        if n == name {
            *by.entry(labels.get(label).copied().unwrap_or("").to_string())
                .or_insert(0.0) += v;
        }
    }
    by
}

/// The verbs that write (a dry run is counted apart, see [`RequestKey::dry_run`]).
pub const WRITE_VERBS: [&str; 6] = [
    "POST",
    "PUT",
    "PATCH",
    "APPLY",
    "DELETE",
    "DELETECOLLECTION",
];

/// One series of the API server's `apiserver_request_total`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct RequestKey {
    /// GET, LIST, WATCH, POST, PUT, PATCH, APPLY (server-side apply), DELETE, …
    pub verb: String,
    pub group: String,
    /// Empty for non-resource requests (`/version`, discovery).
    pub resource: String,
    pub subresource: String,
    pub dry_run: bool,
    /// The response code (`200`, `409`, …).
    pub code: String,
}

impl RequestKey {
    pub fn is_write(&self) -> bool {
        !self.dry_run && WRITE_VERBS.contains(&self.verb.as_str())
    }
    pub fn is_read(&self) -> bool {
        self.verb == "GET" || self.verb == "LIST"
    }
    pub fn is_event(&self) -> bool {
        self.resource == "events"
    }
    /// The server refused it (409 Conflict and every other code but 2xx).
    pub fn refused(&self) -> bool {
        !self.code.starts_with('2')
    }
}

/// The API server's request counters (`apiserver_request_total`), by verb, group, resource,
/// subresource, dry run and response code (sums count every code). Counted by the server, so
/// every client is in it: compare runs on control planes of their own.
#[derive(Debug, Clone, Default)]
pub struct RequestCounts(pub BTreeMap<RequestKey, f64>);

impl RequestCounts {
    /// Read the API server's `/metrics` (as the client's user, an admin here).
    pub async fn scrape(client: &kube::Client) -> Self {
        let request = http::Request::get("/metrics").body(Vec::new()).unwrap();
        let text = client
            .request_text(request)
            .await
            .expect("read the API server's /metrics");
        Self::parse(&text)
    }

    pub fn parse(text: &str) -> Self {
        let mut counts = BTreeMap::new();
        for (name, labels, value) in samples(text) {
            if name != "apiserver_request_total" {
                continue;
            }
            let get = |k: &str| labels.get(k).copied().unwrap_or("").to_string();
            let key = RequestKey {
                verb: get("verb"),
                group: get("group"),
                resource: get("resource"),
                subresource: get("subresource"),
                dry_run: !get("dry_run").is_empty(),
                code: get("code"),
            };
            *counts.entry(key).or_insert(0.0) += value;
        }
        Self(counts)
    }

    /// What was counted after `before`.
    pub fn since(&self, before: &Self) -> Self {
        Self(
            self.0
                .iter()
                .map(|(k, v)| (k.clone(), v - before.0.get(k).copied().unwrap_or(0.0)))
                .filter(|(_, v)| *v > 0.0)
                .collect(),
        )
    }

    pub fn sum(&self, mut keep: impl FnMut(&RequestKey) -> bool) -> f64 {
        self.0
            .iter()
            .filter(|(k, _)| keep(k))
            .map(|(_, v)| v)
            .sum::<f64>()
            + 0.0
    }

    /// Sums by verb (dry runs as `VERB (dry run)`) of the series `keep` selects.
    pub fn by_verb(&self, mut keep: impl FnMut(&RequestKey) -> bool) -> BTreeMap<String, f64> {
        let mut by = BTreeMap::new();
        for (k, v) in &self.0 {
            if keep(k) {
                let verb = if k.dry_run {
                    format!("{} (dry run)", k.verb)
                } else {
                    k.verb.clone()
                };
                *by.entry(verb).or_insert(0.0) += v;
            }
        }
        by
    }
}

// ---------------------------------------------------------------------------------------------
// Processes
// ---------------------------------------------------------------------------------------------

/// A process a benchmark started: its output goes to a log file, it runs in its own process
/// group, and it is stopped (SIGTERM, SIGKILL after 10 s) when this is dropped.
pub struct Proc {
    pub name: String,
    pub log: PathBuf,
    child: Option<Child>,
    pid: u32,
}

impl Proc {
    pub fn spawn(name: &str, mut cmd: Command, log: &Path) -> Self {
        use std::os::unix::process::CommandExt;
        let file = std::fs::File::create(log).unwrap();
        cmd.stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .process_group(0);
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name} ({cmd:?}): {e}"));
        // A watchdog of its own process group stops it when the benchmark ends without
        // dropping this (a signal, a SIGKILL), as scripts/testenv's does for the control plane.
        let _ = Command::new("bash")
            .args([
                "-c",
                "while kill -0 \"$1\" 2>/dev/null && kill -0 -- -\"$2\" 2>/dev/null; do sleep 1; done; \
                 kill -TERM -- -\"$2\" 2>/dev/null; sleep 10; kill -KILL -- -\"$2\" 2>/dev/null",
                "watchdog",
                &std::process::id().to_string(),
                &child.id().to_string(),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn();
        Self {
            name: name.to_string(),
            log: log.to_path_buf(),
            pid: child.id(),
            child: Some(child),
        }
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Whether it still runs (not exited, not a zombie).
    pub fn running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| c.try_wait().ok().flatten().is_none())
    }

    /// Panic, naming its log, if it exited.
    pub fn assert_running(&mut self) {
        assert!(
            self.running(),
            "{} exited; its log: {}\n{}",
            self.name,
            self.log.display(),
            tail(&self.log, 20)
        );
    }

    /// Signal its whole process group (its own, see `spawn`): a wrapper such as a profiler
    /// and the program it runs go together.
    fn signal(&self, signal: &str) {
        let _ = Command::new("kill")
            .args([&format!("-{signal}"), "--", &format!("-{}", self.pid)])
            .stderr(Stdio::null())
            .status();
    }

    /// SIGKILL, and reap it.
    pub fn kill9(&mut self) {
        self.signal("KILL");
        if let Some(mut c) = self.child.take() {
            let _ = c.wait();
        }
    }

    /// SIGTERM; SIGKILL if it has not exited after 10 s.
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        self.signal("TERM");
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if child.try_wait().ok().flatten().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The last `n` lines of a file.
pub fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Poll `url` until it answers 2xx, or panic after `timeout` naming `what`.
pub fn wait_http_ok(what: &str, url: &str, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    loop {
        let ok = Command::new("curl")
            .args(["-sf", "-o", "/dev/null", url])
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what} did not answer {url} within {timeout:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A duration from the environment (`90s`, `10m`; Go syntax), or `default`.
pub fn env_duration(name: &str, default: &str) -> Duration {
    let text = std::env::var(name).unwrap_or_else(|_| default.to_string());
    convoy::engine::duration::parse_duration(&text).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// A number from the environment, or `default`.
pub fn env_number<T: std::str::FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a number")),
        Err(_) => default,
    }
}

/// The `p`-quantile (0..=1) of `values`, interpolated between neighbours.
pub fn quantile(values: &[f64], p: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let mut v = values.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let rank = p * (v.len() - 1) as f64;
    let (lo, hi) = (rank.floor() as usize, rank.ceil() as usize);
    v[lo] + (v[hi] - v[lo]) * (rank - lo as f64)
}

// ---------------------------------------------------------------------------------------------
// Readiness through a watch
// ---------------------------------------------------------------------------------------------

/// A condition on an object's JSON (metadata and status; managedFields dropped).
pub type Predicate = Arc<dyn Fn(&Value) -> bool + Send + Sync>;

struct TrackerState {
    objects: BTreeMap<String, Value>,
    predicate: Predicate,
    /// When each object was first seen to meet the predicate (and has met it since, unless
    /// `once`).
    since: BTreeMap<String, Instant>,
    /// An object that met the predicate once counts as done even if it stops meeting it:
    /// Flux sets Ready=Unknown while it reconciles a Kustomization again, and at 1,000 apps on
    /// two cores its queue never drains, so "all Ready at one moment" may never happen.
    once: bool,
    events: u64,
}

impl TrackerState {
    fn update(&mut self, key: String, object: Value, at: Instant) {
        if (self.predicate)(&object) {
            self.since.entry(key.clone()).or_insert(at);
        } else if !self.once {
            self.since.remove(&key);
        }
        self.objects.insert(key, object);
        self.events += 1;
    }
}

/// One watch (a LIST, then a WATCH; so one or two requests, not a poll) on a kind, noting when
/// each object first met a predicate. Stops when dropped.
pub struct Tracker {
    state: Arc<Mutex<TrackerState>>,
    task: tokio::task::JoinHandle<()>,
}

/// `namespace/name` of an object's JSON.
pub fn key_of(object: &Value) -> String {
    format!(
        "{}/{}",
        object["metadata"]["namespace"].as_str().unwrap_or_default(),
        object["metadata"]["name"].as_str().unwrap_or_default()
    )
}

impl Tracker {
    pub fn start(client: kube::Client, resource: &ApiResource, namespace: Option<&str>) -> Self {
        let api: Api<DynamicObject> = match namespace {
            Some(ns) => Api::namespaced_with(client, ns, resource),
            None => Api::all_with(client, resource),
        };
        let state = Arc::new(Mutex::new(TrackerState {
            objects: BTreeMap::new(),
            predicate: Arc::new(|_| false),
            since: BTreeMap::new(),
            once: false,
            events: 0,
        }));
        let shared = state.clone();
        let task = tokio::spawn(async move {
            use kube::runtime::watcher::{self, Event};
            let mut stream = watcher::watcher(api, watcher::Config::default()).boxed();
            while let Some(event) = stream.next().await {
                let at = Instant::now();
                let to_json = |o: DynamicObject| {
                    let mut v = serde_json::to_value(o).unwrap_or_default();
                    if let Some(m) = v["metadata"].as_object_mut() {
                        m.remove("managedFields");
                    }
                    v
                };
                let mut s = shared.lock().unwrap();
                match event {
                    Ok(Event::Apply(o)) | Ok(Event::InitApply(o)) => {
                        let v = to_json(o);
                        s.update(key_of(&v), v, at);
                    }
                    Ok(Event::Delete(o)) => {
                        let key = key_of(&to_json(o));
                        s.objects.remove(&key);
                        s.since.remove(&key);
                    }
                    Ok(Event::Init) | Ok(Event::InitDone) => {}
                    // The watcher retries by itself; a benchmark's deadline catches a stuck one.
                    Err(_) => {}
                }
            }
        });
        Self { state, task }
    }

    /// Look for `predicate` from now on: every object is judged again now, and its time is
    /// when it first meets it from here (now, for those that already do).
    pub fn expect(&self, predicate: Predicate) {
        self.expect_with(predicate, false);
    }

    /// As [`Tracker::expect`], but an object that met the predicate once stays met.
    pub fn expect_once(&self, predicate: Predicate) {
        self.expect_with(predicate, true);
    }

    fn expect_with(&self, predicate: Predicate, once: bool) {
        let mut s = self.state.lock().unwrap();
        s.predicate = predicate;
        s.once = once;
        s.since.clear();
        let now = Instant::now();
        let objects: Vec<(String, Value)> = std::mem::take(&mut s.objects).into_iter().collect();
        for (k, v) in objects {
            s.update(k, v, now);
        }
    }

    /// (objects meeting the predicate, objects seen)
    pub fn count(&self) -> (usize, usize) {
        let s = self.state.lock().unwrap();
        (s.since.len(), s.objects.len())
    }

    /// When each of `keys` met the predicate; `None` while one has not.
    pub fn met_at(&self, keys: &[String]) -> Option<Vec<Instant>> {
        let s = self.state.lock().unwrap();
        keys.iter().map(|k| s.since.get(k).copied()).collect()
    }

    /// When the last of all objects met the predicate, once all of `expected` objects do.
    pub fn all_met(&self, expected: usize) -> Option<Instant> {
        let s = self.state.lock().unwrap();
        (s.objects.len() >= expected && s.since.len() == s.objects.len())
            .then(|| s.since.values().max().copied())
            .flatten()
    }

    /// Copies of every object's JSON.
    pub fn all(&self) -> Vec<Value> {
        self.state
            .lock()
            .unwrap()
            .objects
            .values()
            .cloned()
            .collect()
    }

    /// A copy of one object's JSON.
    pub fn get(&self, key: &str) -> Option<Value> {
        self.state.lock().unwrap().objects.get(key).cloned()
    }

    /// Keys of the objects that do not meet the predicate (at most `n`).
    pub fn unmet(&self, n: usize) -> Vec<String> {
        let s = self.state.lock().unwrap();
        s.objects
            .keys()
            .filter(|k| !s.since.contains_key(*k))
            .take(n)
            .cloned()
            .collect()
    }
}

impl Drop for Tracker {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The condition of `type_` in an object's `status.conditions`.
pub fn condition<'a>(object: &'a Value, type_: &str) -> Option<&'a Value> {
    object["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

/// Whether the condition of `type_` has status `True`.
pub fn condition_true(object: &Value, type_: &str) -> bool {
    condition(object, type_).is_some_and(|c| c["status"] == "True")
}

/// An `ApiResource` for a kind (`plural` as the API server names it).
pub fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: if group.is_empty() {
            version.into()
        } else {
            format!("{group}/{version}")
        },
        kind: kind.into(),
        plural: plural.into(),
    }
}

// ---------------------------------------------------------------------------------------------
// Flux, the peer (scripts/peers)
// ---------------------------------------------------------------------------------------------

/// The directory with source-controller, kustomize-controller, gitserver, fluxssa and
/// `crds/`. Built by `scripts/peers build` when missing (cached; the first build takes about
/// 17 minutes on two cores); a peer that cannot be built fails the benchmark with the reason.
pub fn peers_bin() -> PathBuf {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/peers");
    let check = || Command::new(&script).arg("check").output().ok();
    if let Some(out) = check()
        && out.status.success()
    {
        return PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    }
    eprintln!("the Flux peers are not built yet: running scripts/peers build (cached afterwards)");
    let out = Command::new(&script)
        .arg("build")
        .stdout(Stdio::inherit())
        .stderr(Stdio::piped())
        .output()
        .expect("cannot run scripts/peers");
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprint!("{stderr}");
    assert!(
        out.status.success(),
        "cannot build the Flux peers, so there is nothing to compare with: {}",
        stderr
            .lines()
            .filter(|l| l.contains("error"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    let out = check().expect("cannot run scripts/peers check");
    assert!(
        out.status.success(),
        "scripts/peers build succeeded but check fails: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

// ---------------------------------------------------------------------------------------------
// The sync benchmarks' objects and the ceiling probe
// ---------------------------------------------------------------------------------------------

/// Objects of the sync benchmarks.
pub const SYNC_OBJECTS: usize = 1000;

/// `count` files of one object each: 40 % ConfigMaps, 30 % Services, 30 % Deployments (0
/// replicas); 400, 300 and 300 of the 1,000 the sync benchmarks apply.
pub fn sync_manifests(dir: &Path, count: usize) {
    std::fs::create_dir_all(dir).unwrap();
    for i in 0..count {
        let text = match i % 10 {
            0..=3 => format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg-{i}\n  labels: {{app: bench}}\ndata:\n  index: \"{i}\"\n  payload: \"{}\"\n",
                "x".repeat(100)
            ),
            4..=6 => format!(
                "apiVersion: v1\nkind: Service\nmetadata:\n  name: svc-{i}\nspec:\n  selector: {{app: app-{i}}}\n  ports:\n  - port: 80\n    targetPort: 8080\n"
            ),
            _ => format!(
                "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: app-{i}\nspec:\n  replicas: 0\n  selector:\n    matchLabels: {{app: app-{i}}}\n  template:\n    metadata:\n      labels: {{app: app-{i}}}\n    spec:\n      containers:\n      - name: app\n        image: nginx:1.27\n"
            ),
        };
        std::fs::write(dir.join(format!("obj-{i:04}.yaml")), text).unwrap();
    }
}

/// Run a command to its end; it must succeed. Returns the wall time.
pub fn timed(mut cmd: Command) -> Duration {
    let start = Instant::now();
    let out = cmd.output().unwrap();
    let elapsed = start.elapsed();
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    elapsed
}

/// The fastest a client can dry-run and then apply the objects under `dir` on this API
/// server: requests built beforehand, 64 in flight, nothing else (no render, no inventory, no
/// status), into `namespace`.
pub async fn ceiling(client: &kube::Client, namespace: &str, dir: &Path) -> (Duration, Duration) {
    use kube::api::{Patch, PatchParams};

    let mut requests = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        let object: serde_json::Value = serde_saphyr::from_str(&text).unwrap();
        let (group, version, kind, plural) = match object["kind"].as_str().unwrap() {
            "ConfigMap" => ("", "v1", "ConfigMap", "configmaps"),
            "Service" => ("", "v1", "Service", "services"),
            _ => ("apps", "v1", "Deployment", "deployments"),
        };
        let resource = ApiResource {
            group: group.into(),
            version: version.into(),
            api_version: object["apiVersion"].as_str().unwrap().into(),
            kind: kind.into(),
            plural: plural.into(),
        };
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
        let name = object["metadata"]["name"].as_str().unwrap().to_string();
        requests.push((api, name, object));
    }
    let run = |dry_run: bool| {
        let requests = &requests;
        async move {
            let mut params = PatchParams::apply("bench-ceiling").force();
            params.dry_run = dry_run;
            let start = Instant::now();
            futures::stream::iter(requests.iter())
                .map(|(api, name, object)| {
                    let params = params.clone();
                    async move {
                        api.patch(name, &params, &Patch::Apply(object))
                            .await
                            .unwrap()
                    }
                })
                .buffer_unordered(64)
                .for_each(|_| async {})
                .await;
            start.elapsed()
        }
    };
    let dry = run(true).await;
    let apply = run(false).await;
    (dry, apply)
}

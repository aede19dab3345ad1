//! Prometheus metrics of the daemon: reconciles by loop and outcome, durations, queue depths
//! and API requests by verb, rendered in the text exposition format.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

/// A label set, sorted.
type Labels = Vec<(&'static str, String)>;

/// Counters and gauges, keyed by name and labels.
#[derive(Default)]
pub struct Metrics {
    values: Mutex<BTreeMap<(&'static str, Labels), f64>>,
    help: Mutex<BTreeMap<&'static str, (&'static str, &'static str)>>,
}

impl Metrics {
    pub fn new() -> Arc<Self> {
        let m = Arc::new(Self::default());
        m.describe(
            "convoy_reconciles_total",
            "counter",
            "Passes of each loop, by outcome reason.",
        );
        m.describe(
            "convoy_reconcile_duration_seconds_sum",
            "counter",
            "Total time spent in passes, by loop.",
        );
        m.describe(
            "convoy_reconcile_duration_seconds_count",
            "counter",
            "Passes timed, by loop.",
        );
        m.describe(
            "convoy_queue_depth",
            "gauge",
            "Keys waiting in each loop's queue.",
        );
        m.describe(
            "convoy_api_requests_total",
            "counter",
            "Requests to the Kubernetes API, by verb.",
        );
        m.describe("convoy_shards_held", "gauge", "Shards this replica holds.");
        m.describe(
            "convoy_runtime_alive_tasks",
            "gauge",
            "Tasks alive in the daemon's async runtime.",
        );
        m.describe(
            "convoy_watch_errors_total",
            "counter",
            "Watch errors per resource since the start.",
        );
        m
    }

    fn describe(&self, name: &'static str, kind: &'static str, help: &'static str) {
        lock(&self.help).insert(name, (kind, help));
    }

    pub fn add(&self, name: &'static str, labels: &[(&'static str, &str)], delta: f64) {
        let mut labels: Labels = labels.iter().map(|(k, v)| (*k, v.to_string())).collect();
        labels.sort();
        *lock(&self.values).entry((name, labels)).or_insert(0.0) += delta;
    }

    pub fn set(&self, name: &'static str, labels: &[(&'static str, &str)], value: f64) {
        let mut labels: Labels = labels.iter().map(|(k, v)| (*k, v.to_string())).collect();
        labels.sort();
        lock(&self.values).insert((name, labels), value);
    }

    /// The value of a series (tests and the quiet-state check read it).
    pub fn get(&self, name: &'static str, labels: &[(&'static str, &str)]) -> f64 {
        let mut labels: Labels = labels.iter().map(|(k, v)| (*k, v.to_string())).collect();
        labels.sort();
        lock(&self.values)
            .get(&(name, labels))
            .copied()
            .unwrap_or(0.0)
    }

    /// The text exposition format.
    pub fn render(&self) -> String {
        let values = lock(&self.values);
        let help = lock(&self.help);
        let mut out = String::new();
        let mut last = "";
        for ((name, labels), value) in values.iter() {
            if *name != last {
                if let Some((kind, text)) = help.get(name) {
                    out.push_str(&format!("# HELP {name} {text}\n# TYPE {name} {kind}\n"));
                }
                last = name;
            }
            let labels: Vec<String> = labels
                .iter()
                .map(|(k, v)| format!("{k}=\"{}\"", v.replace('\\', "\\\\").replace('"', "\\\"")))
                .collect();
            if labels.is_empty() {
                out.push_str(&format!("{name} {value}\n"));
            } else {
                out.push_str(&format!("{name}{{{}}} {value}\n", labels.join(",")));
            }
        }
        out
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// The verb of an API request: get, list (and watch), create, update, patch, delete; dry runs
/// are their own verbs so "writes" mean what they say.
pub fn verb_of<B>(request: &http::Request<B>) -> &'static str {
    let query = request.uri().query().unwrap_or_default();
    let dry = query.contains("dryRun=All");
    match request.method().as_str() {
        "GET" if query.contains("watch=true") || query.contains("watch=1") => "watch",
        "GET" => "get",
        "POST" if dry => "create-dryrun",
        "POST" => "create",
        "PUT" if dry => "update-dryrun",
        "PUT" => "update",
        "PATCH" if dry => "patch-dryrun",
        "PATCH" => "patch",
        "DELETE" if dry => "delete-dryrun",
        "DELETE" => "delete",
        _ => "other",
    }
}

/// Verbs that change the cluster.
pub const WRITE_VERBS: [&str; 4] = ["create", "update", "patch", "delete"];

/// A tower layer counting requests by verb.
#[derive(Clone)]
pub struct CountRequestsLayer(pub Arc<Metrics>);

impl<S> tower::Layer<S> for CountRequestsLayer {
    type Service = CountRequests<S>;
    fn layer(&self, inner: S) -> Self::Service {
        CountRequests {
            inner,
            metrics: self.0.clone(),
        }
    }
}

/// The service of [`CountRequestsLayer`].
#[derive(Clone)]
pub struct CountRequests<S> {
    inner: S,
    metrics: Arc<Metrics>,
}

impl<S, B> tower::Service<http::Request<B>> for CountRequests<S>
where
    S: tower::Service<http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        self.metrics.add(
            "convoy_api_requests_total",
            &[("verb", verb_of(&request))],
            1.0,
        );
        self.inner.call(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_format_groups_series_under_their_help() {
        let m = Metrics::new();
        m.add(
            "convoy_reconciles_total",
            &[("loop", "controller"), ("reason", "Applied")],
            1.0,
        );
        m.add(
            "convoy_reconciles_total",
            &[("loop", "controller"), ("reason", "Applied")],
            1.0,
        );
        m.set("convoy_queue_depth", &[("loop", "health")], 3.0);
        let text = m.render();
        assert!(text.contains("# TYPE convoy_reconciles_total counter\nconvoy_reconciles_total{loop=\"controller\",reason=\"Applied\"} 2\n"), "{text}");
        assert!(text.contains("convoy_queue_depth{loop=\"health\"} 3\n"));
    }

    #[test]
    fn verbs_tell_writes_from_dry_runs_and_watches() {
        let req = |m: &str, uri: &str| {
            http::Request::builder()
                .method(m)
                .uri(uri)
                .body(())
                .unwrap()
        };
        assert_eq!(verb_of(&req("GET", "/api/v1/pods?watch=true")), "watch");
        assert_eq!(
            verb_of(&req("PATCH", "/apis/apps/v1/x?dryRun=All&fieldManager=a")),
            "patch-dryrun"
        );
        assert_eq!(
            verb_of(&req("PATCH", "/apis/apps/v1/x?fieldManager=a")),
            "patch"
        );
        assert_eq!(verb_of(&req("DELETE", "/api/v1/x")), "delete");
    }
}

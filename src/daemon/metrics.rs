//! Prometheus metrics of the daemon, on `prometheus-client`: passes by loop and outcome,
//! their durations (histograms, by loop and by stage), queue depths, API requests by verb,
//! shards, watch errors, runtime tasks, and per Release, as Flux exports its objects: each
//! condition's status and the time of the last apply.

use crate::engine::api::{ConditionStatus, condition_types};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::task::{Context, Poll};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub r#loop: String,
    pub category: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LoopLabels {
    pub r#loop: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    pub r#loop: String,
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StageLabels {
    pub stage: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VerbLabels {
    pub verb: &'static str,
    /// The resource asked for (`configmaps`, `releases/status`), or what a request without
    /// one asks (`version`, `discovery`).
    pub resource: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CacheLabels {
    /// `artifact`, `mirror`, `record`, `lock` (on disk) or `result` (held in memory).
    pub kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResourceLabels {
    pub resource: String,
}

/// A Release's series: its namespace and name shared by all of them (one allocation each,
/// not one per series: a replica holds a dozen series for each of thousands of Releases).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReleaseLabels {
    pub namespace: Arc<str>,
    pub name: Arc<str>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConditionLabels {
    pub namespace: Arc<str>,
    pub name: Arc<str>,
    pub r#type: &'static str,
    pub status: &'static str,
}

fn durations() -> Histogram {
    // 10 ms to ~5.5 min.
    Histogram::new(exponential_buckets(0.01, 2.0, 16))
}

/// Every metric the daemon exports, registered once.
pub struct Metrics {
    registry: Registry,
    pub reconciles: Family<OutcomeLabels, Counter>,
    pub pass_errors: Family<ErrorLabels, Counter>,
    pub reconcile_seconds: Family<LoopLabels, Histogram, fn() -> Histogram>,
    pub stage_seconds: Family<StageLabels, Histogram, fn() -> Histogram>,
    pub queue_depth: Family<LoopLabels, Gauge>,
    pub api_requests: Family<VerbLabels, Counter>,
    pub shards_held: Gauge,
    pub watch_errors: Family<ResourceLabels, Counter>,
    pub alive_tasks: Gauge,
    pub release_condition: Family<ConditionLabels, Gauge>,
    pub release_last_applied: Family<ReleaseLabels, Gauge<f64, AtomicU64>>,
    pub source_cache_removed: Family<CacheLabels, Counter>,
}

impl Metrics {
    pub fn new() -> Arc<Self> {
        let mut registry = Registry::default();
        let reconciles = Family::<OutcomeLabels, Counter>::default();
        registry.register(
            "convoy_reconciles",
            "Passes of each loop, by outcome reason",
            reconciles.clone(),
        );
        let pass_errors = Family::<ErrorLabels, Counter>::default();
        registry.register(
            "convoy_pass_errors",
            "Passes that failed with an error, by loop and category (unreachable, invalid, refused, failed)",
            pass_errors.clone(),
        );
        let reconcile_seconds =
            Family::<LoopLabels, Histogram, fn() -> Histogram>::new_with_constructor(durations);
        registry.register(
            "convoy_reconcile_duration_seconds",
            "Time spent in one pass, by loop",
            reconcile_seconds.clone(),
        );
        let stage_seconds =
            Family::<StageLabels, Histogram, fn() -> Histogram>::new_with_constructor(durations);
        registry.register(
            "convoy_reconcile_stage_duration_seconds",
            "Time spent in each stage of a Release reconcile (render, sync, status)",
            stage_seconds.clone(),
        );
        let queue_depth = Family::<LoopLabels, Gauge>::default();
        registry.register(
            "convoy_queue_depth",
            "Keys waiting in each loop's queue",
            queue_depth.clone(),
        );
        let api_requests = Family::<VerbLabels, Counter>::default();
        registry.register(
            "convoy_api_requests",
            "Requests to the Kubernetes API, by verb and resource",
            api_requests.clone(),
        );
        let shards_held = Gauge::default();
        registry.register(
            "convoy_shards_held",
            "Shards this replica holds",
            shards_held.clone(),
        );
        let watch_errors = Family::<ResourceLabels, Counter>::default();
        registry.register(
            "convoy_watch_errors",
            "Watch errors per resource since the start",
            watch_errors.clone(),
        );
        let alive_tasks = Gauge::default();
        registry.register(
            "convoy_runtime_alive_tasks",
            "Tasks alive in the daemon's async runtime",
            alive_tasks.clone(),
        );
        let release_condition = Family::<ConditionLabels, Gauge>::default();
        registry.register(
            "convoy_release_condition",
            "1 for each Release condition's current status (0 for the others), as Flux's gotk_reconcile_condition",
            release_condition.clone(),
        );
        let release_last_applied = Family::<ReleaseLabels, Gauge<f64, AtomicU64>>::default();
        registry.register(
            "convoy_release_last_applied_timestamp_seconds",
            "When the controller last applied a render of the Release (Unix seconds)",
            release_last_applied.clone(),
        );
        let source_cache_removed = Family::<CacheLabels, Counter>::default();
        registry.register(
            "convoy_source_cache_removed",
            "What the source cache removed as unused for the retention, by kind (artifact, mirror, record, lock, result)",
            source_cache_removed.clone(),
        );
        Arc::new(Self {
            registry,
            reconciles,
            pass_errors,
            reconcile_seconds,
            stage_seconds,
            queue_depth,
            api_requests,
            shards_held,
            watch_errors,
            alive_tasks,
            release_condition,
            release_last_applied,
            source_cache_removed,
        })
    }

    /// Count what one collection of the source cache removed.
    pub fn cache_collected(
        &self,
        results: usize,
        collected: crate::engine::source::retention::Collected,
    ) {
        for (kind, n) in [
            ("result", results),
            ("artifact", collected.artifacts),
            ("mirror", collected.mirrors),
            ("record", collected.records),
            ("lock", collected.locks),
        ] {
            self.source_cache_removed
                .get_or_create(&CacheLabels { kind })
                .inc_by(n as u64);
        }
    }

    /// The text exposition format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// Count a pass of `loop_` that ended with `reason`, and how long it took.
    /// A pass that failed with an error of `category`.
    pub fn pass_error(&self, loop_: &str, category: crate::engine::error::Category) {
        self.pass_errors
            .get_or_create(&ErrorLabels {
                r#loop: loop_.to_string(),
                category: category.as_str().to_string(),
            })
            .inc();
    }

    pub fn pass(&self, loop_: &str, reason: &str, seconds: f64) {
        self.reconciles
            .get_or_create(&OutcomeLabels {
                r#loop: loop_.to_string(),
                reason: reason.to_string(),
            })
            .inc();
        self.reconcile_seconds
            .get_or_create(&LoopLabels {
                r#loop: loop_.to_string(),
            })
            .observe(seconds);
    }

    /// Bring a resource's watch error count up to `total` (the caches count them).
    pub fn watch_errors_seen(&self, resource: &str, total: u64) {
        let counter = self.watch_errors.get_or_create(&ResourceLabels {
            resource: resource.to_string(),
        });
        let seen = counter.get();
        if total > seen {
            counter.inc_by(total - seen);
        }
    }

    /// A Release's conditions as they stand: its current status per type is 1, the others 0.
    /// Only convoy's condition types have series (another writer's would grow them unbounded).
    pub fn release_conditions(
        &self,
        release: &ReleaseLabels,
        conditions: &[(&str, ConditionStatus)],
    ) {
        for (type_, current) in conditions {
            let Some(type_) = condition_types::ALL.iter().find(|t| *t == type_) else {
                continue;
            };
            for status in ConditionStatus::ALL {
                self.release_condition
                    .get_or_create(&ConditionLabels {
                        namespace: release.namespace.clone(),
                        name: release.name.clone(),
                        r#type: type_,
                        status: status.as_str(),
                    })
                    .set(i64::from(status == *current));
            }
        }
    }

    /// A Release that is gone takes its series with it.
    pub fn forget_release(&self, release: &ReleaseLabels) {
        self.release_last_applied.remove(release);
        for type_ in condition_types::ALL {
            for status in ConditionStatus::ALL {
                self.release_condition.remove(&ConditionLabels {
                    namespace: release.namespace.clone(),
                    name: release.name.clone(),
                    r#type: type_,
                    status: status.as_str(),
                });
            }
        }
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

/// The resource of an API path, with its subresource (`releases/status`); `version` and
/// `discovery` for the paths without one. The group is left out: a daemon's kinds rarely share
/// a plural name, and the label stays short.
pub fn resource_of(path: &str) -> String {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let rest = match parts.as_slice() {
        ["version", ..] => return "version".into(),
        ["api", _version, rest @ ..] => rest,
        ["apis", _group, _version, rest @ ..] => rest,
        _ => return "discovery".into(),
    };
    let rest = match rest {
        ["namespaces", _ns, resource, more @ ..] => {
            let mut r = vec![*resource];
            r.extend(more);
            r
        }
        other => other.to_vec(),
    };
    match rest.as_slice() {
        [] => "discovery".into(),
        [resource] | [resource, _] => (*resource).to_string(),
        [resource, _, sub, ..] => format!("{resource}/{sub}"),
    }
}

/// A tower layer that counts the requests of a kube client by verb and resource.
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
        // `CONVOY_LOG=convoy::api=trace` lists every request (where a benchmark's writes go).
        tracing::trace!(target: "convoy::api", method = %request.method(), uri = %request.uri(), "request");
        self.metrics
            .api_requests
            .get_or_create(&VerbLabels {
                verb: verb_of(&request),
                resource: resource_of(request.uri().path()),
            })
            .inc();
        self.inner.call(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passes_are_counted_and_timed_in_the_text_format() {
        let m = Metrics::new();
        m.pass("controller", "Applied", 0.02);
        m.pass("controller", "Applied", 0.5);
        m.queue_depth
            .get_or_create(&LoopLabels {
                r#loop: "health".into(),
            })
            .set(3);
        let web = ReleaseLabels {
            namespace: "apps".into(),
            name: "web".into(),
        };
        m.release_conditions(&web, &[("Healthy", ConditionStatus::False)]);
        let text = m.render();
        assert!(
            text.contains("# TYPE convoy_reconciles counter\nconvoy_reconciles_total{loop=\"controller\",reason=\"Applied\"} 2\n"),
            "{text}"
        );
        assert!(text.contains("convoy_reconcile_duration_seconds_count{loop=\"controller\"} 2\n"));
        assert!(
            text.contains(
                "convoy_reconcile_duration_seconds_bucket{le=\"0.02\",loop=\"controller\"} 1\n"
            ),
            "{text}"
        );
        assert!(text.contains("convoy_queue_depth{loop=\"health\"} 3\n"));
        assert!(text.contains(
            "convoy_release_condition{namespace=\"apps\",name=\"web\",type=\"Healthy\",status=\"False\"} 1\n"
        ));
        assert!(text.contains(
            "convoy_release_condition{namespace=\"apps\",name=\"web\",type=\"Healthy\",status=\"True\"} 0\n"
        ));
        m.forget_release(&web);
        assert!(!m.render().contains("name=\"web\""));
    }

    #[test]
    fn failed_passes_are_counted_by_category() {
        use crate::engine::error::Category;
        let m = Metrics::new();
        m.pass_error("controller", Category::Unreachable);
        m.pass_error("controller", Category::Unreachable);
        m.pass_error("health", Category::Refused);
        let text = m.render();
        assert!(
            text.contains(
                "convoy_pass_errors_total{loop=\"controller\",category=\"unreachable\"} 2\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("convoy_pass_errors_total{loop=\"health\",category=\"refused\"} 1\n")
        );
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

    #[test]
    fn requests_are_named_by_their_resource() {
        let cases = [
            ("/api/v1/namespaces/a/configmaps/web", "configmaps"),
            ("/api/v1/namespaces/a/configmaps", "configmaps"),
            ("/api/v1/namespaces/a", "namespaces"),
            ("/api/v1/namespaces", "namespaces"),
            ("/api/v1/pods", "pods"),
            (
                "/apis/core.convoy.kumodo.io/v1alpha1/namespaces/a/releases/web/status",
                "releases/status",
            ),
            (
                "/apis/health.convoy.kumodo.io/v1alpha1/globalhealthrulesets",
                "globalhealthrulesets",
            ),
            ("/apis/apps/v1", "discovery"),
            ("/apis", "discovery"),
            ("/version", "version"),
        ];
        for (path, resource) in cases {
            assert_eq!(resource_of(path), resource, "{path}");
        }
    }
}

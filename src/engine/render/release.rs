//! Rendering a Release: fetch its source, render its content, mutate, compute the renderRef.
//!
//! Spec: reconcile-flow.txt stageRender steps 1 and 3–6. The steps are two functions so the
//! reconcile can put the Cluster step (step 2) between them and record what it found before
//! a later step stopped it: [`fetch_source`] (step 1) and [`render_fetched`] (steps 3–6).

use crate::engine::error::Invalid;
use std::path::{Path, PathBuf};

use super::error::RenderError;
use super::helm::{self, ClusterInfo};
use super::helm_schema::SchemaRefs;
use super::mutations::{apply_mutations, is_known_cluster_scoped};
use super::object::Object;
use super::order::sort_for_apply;
use super::render_ref::render_ref;
use super::values::resolve_value_layers;
use super::{kustomize, manifests};
use crate::engine::api::{ContentType, DependencyMode, Release, ResolvedSource, SourceKind};
use crate::engine::objects::ObjectReader;
use crate::engine::source::archive::path_inside;
use crate::engine::source::cache::tree_digest;
use crate::engine::source::resolve::release_request;
use crate::engine::source::{Artifact, Coordinator, Reuse};

/// What a render reads from.
pub struct RenderContext<'a> {
    pub reader: &'a ObjectReader,
    pub coordinator: &'a Coordinator,
    /// A local directory that replaces the source's root (`--source-dir`); `spec.source.path`
    /// still applies inside it.
    pub source_dir: Option<&'a Path>,
    /// The target cluster, when known: Helm capabilities and object scopes.
    pub cluster: Option<&'a ClusterInfo>,
    /// The deadline of rendering the content (helm, kustomize): the tool is killed past it.
    pub timeout: std::time::Duration,
    /// Whether the source may come from a recent fetch of the same source and ref (see
    /// [`crate::engine::source::Reuse`]): a daemon's passes. A fetch older than the Release's
    /// newest /sync request is not reused.
    pub reuse_fetches: bool,
    /// The https prefixes a chart's values schema may refer to (the operator's
    /// `--allow-values-schema-ref`).
    pub schema_refs: &'a SchemaRefs,
    /// Who renders (`controller`, `drift`, `cli`): a fetch a daemon's pass stopped waiting for
    /// is kept for that loop's next pass of the Release ([`waiter_of`]).
    pub caller: &'static str,
}

/// Whether kustomize may fetch remote bases: when the Release asks, and the daemon does not
/// restrict source URLs. kustomize fetches a remote base, and the remote bases that one names,
/// itself: convoy sees only the first, so under an allow-list it lets kustomize fetch none
/// (as Flux's `--no-remote-bases`), rather than check a part of what is fetched.
fn remote_bases_allowed(
    asked: bool,
    allowed: &crate::engine::source::allowed_urls::AllowedUrls,
) -> Result<bool, RenderError> {
    if asked && allowed.is_restricted() {
        return Err(RenderError::Unsupported(
            "content.kustomize.allowRemoteBases: convoy daemon restricts source URLs (--allow-source-url), and kustomize fetches remote bases, and theirs, where convoy cannot check them; vendor the bases into the source".into(),
        ));
    }
    Ok(asked)
}

/// The default deadline of a render.
pub const DEFAULT_RENDER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);

/// A fetched source.
#[derive(Debug, Clone)]
pub struct Fetched {
    pub artifact: Artifact,
    pub resolved_source: ResolvedSource,
}

/// A finished render.
#[derive(Debug, Clone)]
pub struct Rendered {
    /// Mutated objects in apply order.
    pub objects: Vec<Object>,
    pub render_ref: String,
    pub resolved_mutations: Vec<String>,
}

/// stageRender step 1: resolve and fetch the source.
pub async fn fetch_source(
    ctx: &RenderContext<'_>,
    release: &Release,
) -> Result<Fetched, RenderError> {
    let namespace = release.metadata.namespace.clone().unwrap_or_default();
    let source = &release.spec.source;
    if let Some(dir) = ctx.source_dir {
        let digest = tree_digest(dir).map_err(|e| {
            RenderError::Invalid(Invalid(format!(
                "cannot read --source-dir {}: {e}",
                dir.display()
            )))
        })?;
        return Ok(Fetched {
            artifact: Artifact {
                revision: "local".into(),
                digest: digest.clone(),
                path: dir.to_path_buf(),
                url: format!("file://{}", dir.display()),
            },
            resolved_source: ResolvedSource {
                kind: source.kind.as_str().to_string(),
                name: source.name.clone(),
                url: Some(format!("file://{}", dir.display())),
                revision: Some("local".into()),
                digest: Some(digest),
            },
        });
    }
    let resolved = release_request(ctx.reader, release)
        .await
        .map_err(RenderError::SourceObject)?;
    // A fetch no older than the source's interval, nor than the Release's own: a Release
    // whose interval is shorter than its GitRepository's still sees a commit within about
    // its interval, as it did when every pass fetched.
    let release_interval = release.spec.interval();
    let reuse = Reuse {
        max_age: if ctx.reuse_fetches {
            release_interval.map_or(resolved.reuse_for, |i| i.min(resolved.reuse_for))
        } else {
            std::time::Duration::ZERO
        },
        revision: last_attempted_revision(release),
        requested_at: newest_request(release),
        waiter: Some(waiter_of(ctx.caller, release)),
    };
    let artifact = ctx
        .coordinator
        .ensure_reusing(
            &resolved.scope,
            &resolved.request,
            resolved.credentials.as_ref(),
            &reuse,
        )
        .await
        .map_err(|source| RenderError::Fetch {
            kind: resolved.kind.as_str(),
            namespace: namespace.clone(),
            name: resolved.name.clone(),
            source: Box::new(source),
        })?;
    Ok(Fetched {
        resolved_source: ResolvedSource {
            kind: resolved.kind.as_str().to_string(),
            name: resolved.name.clone(),
            url: Some(artifact.url.clone()),
            revision: Some(artifact.revision.clone()),
            digest: Some(artifact.digest.clone()),
        },
        artifact,
    })
}

/// Who a Release's fetches are kept for when a pass of `caller` (a loop) stops waiting for
/// one ([`Reuse::waiter`]).
pub(crate) fn waiter_of(caller: &str, release: &Release) -> String {
    format!(
        "{caller}:Release/{}/{}",
        release.metadata.namespace.as_deref().unwrap_or_default(),
        release.metadata.name.as_deref().unwrap_or_default()
    )
}

/// When the Release's newest /sync request (forced or not) was made, by its annotation's
/// timestamp. A value that is not a timestamp counts as made now: it is fetched anew.
fn newest_request(release: &Release) -> Option<std::time::SystemTime> {
    use crate::engine::api::annotations::{FORCE_SYNC_REQUESTED_AT, SYNC_REQUESTED_AT};
    let annotations = release.metadata.annotations.as_ref()?;
    [SYNC_REQUESTED_AT, FORCE_SYNC_REQUESTED_AT]
        .iter()
        .filter_map(|key| annotations.get(*key).filter(|v| !v.is_empty()))
        .map(|v| request_time(v))
        .max()
}

/// When a /sync request was made, at the latest. convoy writes nanoseconds; a time in whole
/// seconds (`kubectl annotate ... $(date -u +%FT%TZ)`, another tool) was made somewhere in
/// that second, so it counts as its end: a fetch that started earlier in the second, perhaps
/// before the push the request is for, is not taken for one after it. Unreadable: now.
fn request_time(value: &str) -> std::time::SystemTime {
    // Read from the text: a fraction written as zeros (convoy's own request made on a whole
    // second, printed `…:00Z` by jiff, is the exception: one more fetch) is still a fraction.
    let whole_seconds = !value.contains('.');
    match value.parse::<jiff::Timestamp>() {
        Ok(at) if whole_seconds => {
            std::time::SystemTime::from(at) + std::time::Duration::from_nanos(999_999_999)
        }
        Ok(at) => std::time::SystemTime::from(at),
        Err(_) => std::time::SystemTime::now(),
    }
}

/// The source revision of the Release's last attempt.
fn last_attempted_revision(release: &Release) -> Option<String> {
    release
        .status
        .as_ref()?
        .last_attempted
        .as_ref()?
        .resolved_source
        .as_ref()?
        .revision
        .clone()
}

/// stageRender steps 3–6: values, render, mutations, renderRef. This is the spec's
/// `renderReleaseObjects` (renderDesired calls it for a render from the source).
pub async fn render_fetched(
    ctx: &RenderContext<'_>,
    release: &Release,
    fetched: &Fetched,
) -> Result<Rendered, RenderError> {
    let objects = render_content(ctx, release, fetched).await?;
    finish_render(ctx, release, objects)
}

/// Whether rendering the content itself asks the target cluster (Helm's capabilities); the
/// other content types only need it afterwards, in [`finish_render`], so a reconcile can
/// render them while it discovers the cluster.
pub fn content_needs_cluster(release: &Release) -> bool {
    release.spec.content.content_type == ContentType::Helm
}

/// stageRender steps 3–4: values and the content's objects, before mutations, within the
/// render deadline (helm or kustomize is killed past it: `kill_on_drop`).
pub async fn render_content(
    ctx: &RenderContext<'_>,
    release: &Release,
    fetched: &Fetched,
) -> Result<Vec<Object>, RenderError> {
    match tokio::time::timeout(ctx.timeout, render_content_now(ctx, release, fetched)).await {
        Ok(result) => result,
        Err(_) => Err(RenderError::Tool(format!(
            "rendering did not finish within {} (the render deadline)",
            crate::engine::duration::human(ctx.timeout)
        ))),
    }
}

async fn render_content_now(
    ctx: &RenderContext<'_>,
    release: &Release,
    fetched: &Fetched,
) -> Result<Vec<Object>, RenderError> {
    let release_namespace = release.metadata.namespace.clone().unwrap_or_default();
    let release_name = release.metadata.name.clone().unwrap_or_default();
    let content = &release.spec.content;
    let root = content_root(&fetched.artifact.path, release.spec.source.path.as_deref())?;
    let started = std::time::Instant::now();

    let objects = match content.content_type {
        ContentType::Jsonnet => {
            return Err(RenderError::Unsupported(
                "content type jsonnet is not supported: render it to manifests, or use kustomize or helm".into(),
            ));
        }
        // Off the async threads: reading and parsing is CPU work, and a reconcile discovers
        // the target cluster meanwhile.
        ContentType::Manifests => {
            let dir = root.clone();
            tokio::task::spawn_blocking(move || manifests::load_dir(&dir))
                .await
                .map_err(|e| RenderError::Tool(format!("reading manifests failed: {e}")))?
                .map_err(RenderError::Manifests)?
        }
        ContentType::Kustomize => {
            let allow_remote = remote_bases_allowed(
                content
                    .kustomize
                    .as_ref()
                    .is_some_and(|k| k.allow_remote_bases),
                ctx.coordinator.allowed_urls(),
            )?;
            kustomize::build(&fetched.artifact.path, &root, allow_remote).await?
        }
        ContentType::Helm => {
            let helm_spec = content.helm.clone().unwrap_or_default();
            if helm_spec.dependency_mode == Some(DependencyMode::Resolve) {
                return Err(RenderError::Unsupported(
                    "helm.dependencyMode: resolve is not supported: vendor the dependencies in the chart's charts/ directory (helm dependency build) and use dependencyMode: none".into(),
                ));
            }
            let waiter = waiter_of(ctx.caller, release);
            let values = resolve_value_layers(release, ctx.reader, ctx.coordinator, Some(&waiter))
                .await
                .map_err(RenderError::Values)?;
            let chart_name = match release.spec.source.kind {
                SourceKind::HelmRegistry => release.spec.source.chart.as_deref(),
                _ => None,
            };
            let chart = helm::chart_dir(&root, chart_name)?;
            let name = helm_spec.release_name.as_deref().unwrap_or(&release_name);
            let namespace = release
                .spec
                .target_namespace
                .as_deref()
                .unwrap_or(&release_namespace);
            helm::template(
                &chart,
                name,
                namespace,
                &values.values,
                &values.secret,
                ctx.cluster,
                ctx.schema_refs,
            )
            .await?
        }
    };
    tracing::debug!(
        objects = objects.len(),
        elapsed_ms = started.elapsed().as_millis() as u64,
        "rendered content"
    );
    Ok(objects)
}

/// stageRender steps 5–6: mutations, the target namespace, apply order and the renderRef.
pub fn finish_render(
    ctx: &RenderContext<'_>,
    release: &Release,
    mut objects: Vec<Object>,
) -> Result<Rendered, RenderError> {
    let started = std::time::Instant::now();
    let resolved_mutations = apply_mutations(&mut objects, &release.spec.mutations)?;
    // Hook workloads run in it whether or not an object takes it (engine::hooks).
    if let Some(target) = release
        .spec
        .target_namespace
        .as_deref()
        .filter(|t| !t.is_empty())
        && let Some(why) = crate::engine::render::object::namespace_trouble(target)
    {
        return Err(RenderError::Invalid(Invalid(format!(
            "spec.targetNamespace {target:?} {why}"
        ))));
    }
    if let Some(target) = &release.spec.target_namespace {
        default_namespace(&mut objects, target, ctx.cluster);
    }
    crate::engine::content_hooks::name_generated(&mut objects);
    validate(&objects)?;
    crate::engine::content_hooks::validate(&objects).map_err(RenderError::Invalid)?;
    crate::engine::exclusions::validate(release, &objects).map_err(RenderError::Invalid)?;
    crate::engine::hooks::check_names(release).map_err(RenderError::Invalid)?;
    sort_for_apply(&mut objects);
    let render_ref = render_ref(&objects);
    tracing::debug!(
        elapsed_ms = started.elapsed().as_millis() as u64,
        "mutated, ordered and hashed"
    );
    Ok(Rendered {
        objects,
        render_ref,
        resolved_mutations,
    })
}

/// Fetch and render in one go (`convoy render`).
pub async fn render_release(
    ctx: &RenderContext<'_>,
    release: &Release,
) -> Result<(Fetched, Rendered), RenderError> {
    let fetched = fetch_source(ctx, release).await?;
    let rendered = render_fetched(ctx, release, &fetched).await?;
    Ok((fetched, rendered))
}

/// The directory to render: the artifact root joined with `spec.source.path`, which may not
/// leave the artifact.
fn content_root(artifact: &Path, path: Option<&str>) -> Result<PathBuf, RenderError> {
    let Some(path) = path.filter(|p| !p.is_empty()) else {
        return Ok(artifact.to_path_buf());
    };
    let root = path_inside(artifact, path)
        .map_err(|why| RenderError::Invalid(Invalid(format!("spec.source.path {path:?} {why}"))))?;
    if !root.exists() {
        return Err(RenderError::Invalid(Invalid(format!(
            "spec.source.path {path:?} does not exist in the source"
        ))));
    }
    Ok(root)
}

/// `spec.targetNamespace`: the namespace of namespaced objects that name none. Scope comes
/// from the cluster when known, else from the CRDs in the render and the well-known
/// cluster-scoped kinds; other kinds are taken as namespaced.
fn default_namespace(objects: &mut [Object], target: &str, cluster: Option<&ClusterInfo>) {
    let rendered_crds: Vec<(String, String, bool)> = objects
        .iter()
        .filter(|o| o.kind() == "CustomResourceDefinition")
        .map(|o| {
            let spec = &o.0["spec"];
            (
                spec["group"].as_str().unwrap_or_default().to_string(),
                spec["names"]["kind"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                spec["scope"].as_str() != Some("Cluster"),
            )
        })
        .collect();
    for object in objects.iter_mut() {
        if object.namespace().is_some() {
            continue;
        }
        let key = (object.group().to_string(), object.kind().to_string());
        let namespaced = rendered_crds
            .iter()
            .find(|(g, k, _)| *g == key.0 && *k == key.1)
            .map(|(_, _, n)| *n)
            .or_else(|| cluster.and_then(|c| c.scopes.get(&key).copied()))
            .unwrap_or(!is_known_cluster_scoped(object.kind()));
        if namespaced {
            object.set_namespace(target);
        }
    }
}

/// Whether every object's name and namespace can go into a request's path as they are
/// (render::object); a render the store returns is held to it too, whenever it was stored.
pub fn addressable(objects: &[Object]) -> Result<(), Invalid> {
    use crate::engine::render::object::{address_trouble, api_version_trouble};
    for object in objects {
        let invalid = |what: &str, value: &str, why: &str| {
            Invalid(format!(
                "{} {}: {what} {value:?} {why}",
                object.kind(),
                object.api_version()
            ))
        };
        if let Some(why) = api_version_trouble(object.api_version()) {
            return Err(Invalid(format!(
                "{}: apiVersion {:?} {why}",
                object.kind(),
                object.api_version()
            )));
        }
        let namespace = object.namespace().unwrap_or_default();
        match address_trouble(namespace, object.name()) {
            Some(("name", why)) => return Err(invalid("metadata.name", object.name(), why)),
            Some((_, why)) => return Err(invalid("metadata.namespace", namespace, why)),
            None => {}
        }
    }
    Ok(())
}

/// Reject renders that cannot be applied as one set: a bad wave annotation, an object twice,
/// a name or namespace no request could carry as it is.
fn validate(objects: &[Object]) -> Result<(), RenderError> {
    addressable(objects).map_err(RenderError::Invalid)?;
    let mut seen = std::collections::BTreeSet::new();
    for object in objects {
        object.wave().map_err(RenderError::Invalid)?;
        if !seen.insert(object.key()) {
            return Err(RenderError::Invalid(Invalid(format!(
                "{object} is rendered more than once"
            ))));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{remote_bases_allowed, request_time};
    use crate::engine::source::allowed_urls::AllowedUrls;

    /// Under an allow-list, a Release asking for remote bases is refused (kustomize would
    /// fetch them, and theirs, unchecked); without one, it gets what it asks.
    #[test]
    fn remote_bases_are_refused_where_source_urls_are_restricted() {
        let restricted = AllowedUrls::new(&["https://github.com/team-a/".into()]).unwrap();
        let err = remote_bases_allowed(true, &restricted).unwrap_err();
        assert!(err.to_string().contains("--allow-source-url"), "{err}");
        assert!(!remote_bases_allowed(false, &restricted).unwrap());
        assert!(remote_bases_allowed(true, &AllowedUrls::default()).unwrap());
    }
    use std::time::{Duration, SystemTime};

    fn at(value: &str) -> Duration {
        request_time(value)
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
    }

    /// A request in whole seconds counts as made at the end of its second; convoy's own, in
    /// nanoseconds, as written.
    #[test]
    fn a_request_in_whole_seconds_counts_from_the_end_of_its_second() {
        assert_eq!(
            at("2026-12-06T05:00:00Z"),
            Duration::new(1_796_533_200, 999_999_999)
        );
        assert_eq!(
            at("2026-12-06T05:00:00.25Z"),
            Duration::new(1_796_533_200, 250_000_000)
        );
        assert_eq!(
            at("2026-12-06T05:00:00.000Z"),
            Duration::new(1_796_533_200, 0)
        );
        let unreadable = request_time("yesterday");
        assert!(unreadable.elapsed().unwrap() < Duration::from_secs(5));
    }
}

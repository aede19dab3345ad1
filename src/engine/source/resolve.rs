//! From a Release's `spec.source` (and its source object and Secret) to a [`SourceRequest`].
//!
//! Spec: status-and-conditions.txt, rows "Fetch the source: error / not supported". A Git
//! `semver` ref, a missing required field or an unknown URL scheme is `Unsupported`; a missing
//! source object or Secret is a transient `SourceNotReady` (it may be created in a moment).

use crate::engine::error::Invalid;
use k8s_openapi::api::core::v1::Secret;

use super::cache::scope_of;
use super::{Credentials, GitReference, SourceRequest};
use crate::engine::api::{
    GitRef, GitRepository, HelmRegistry, LocalObjectRef, OCIRegistry, Release, SourceKind,
};
use crate::engine::objects::{ObjectReader, ReadError};

/// Why a source could not be resolved.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error("{kind} {namespace}/{name} not found")]
    NotFound {
        kind: &'static str,
        namespace: String,
        name: String,
    },
    #[error("{0}")]
    Unsupported(String),
    #[error(transparent)]
    Read(#[from] ReadError),
}

impl ResolveError {
    pub fn is_unsupported(&self) -> bool {
        matches!(self, ResolveError::Unsupported(_))
    }
}

/// A request ready for the coordinator.
#[derive(Debug, Clone)]
pub struct ResolvedRequest {
    /// The part of the source cache this request may use (see [`super::cache::scope_of`]).
    pub scope: String,
    pub request: SourceRequest,
    pub credentials: Option<Credentials>,
    pub kind: SourceKind,
    pub name: String,
    /// How old a fetch of this request a render may reuse (the source object's interval; zero
    /// for kinds whose fetch is not polled by their controller): see [`super::Reuse`].
    pub reuse_for: std::time::Duration,
}

/// Resolve the source of `release`.
pub async fn release_request(
    reader: &ObjectReader,
    release: &Release,
) -> Result<ResolvedRequest, ResolveError> {
    let namespace = release.metadata.namespace.clone().unwrap_or_default();
    let source = &release.spec.source;
    match source.kind {
        SourceKind::GitRepository => {
            git_request(reader, &namespace, &source.name, source.git_ref.as_ref()).await
        }
        SourceKind::HelmRegistry => {
            let registry: HelmRegistry = reader
                .get(&namespace, &source.name)
                .await?
                .ok_or_else(|| not_found("HelmRegistry", &namespace, &source.name))?;
            check_url_length("HelmRegistry", &namespace, &source.name, &registry.spec.url)?;
            let chart = source.chart.clone().ok_or_else(|| {
                ResolveError::Unsupported(format!(
                    "Release {namespace}/{}: spec.source.chart is required for a HelmRegistry source",
                    release.metadata.name.as_deref().unwrap_or_default()
                ))
            })?;
            crate::engine::render::helm::check_chart_name(&chart).map_err(|why| {
                ResolveError::Unsupported(format!(
                    "Release {namespace}/{}: spec.source.chart {why}",
                    release.metadata.name.as_deref().unwrap_or_default()
                ))
            })?;
            let credentials =
                credentials(reader, &namespace, registry.spec.secret_ref.as_ref()).await?;
            Ok(ResolvedRequest {
                scope: scope_of("HelmRegistry", &namespace, &source.name),
                request: SourceRequest::Helm {
                    url: registry.spec.url.clone(),
                    chart,
                    version: source.version.clone(),
                },
                credentials,
                kind: SourceKind::HelmRegistry,
                name: source.name.clone(),
                reuse_for: std::time::Duration::ZERO,
            })
        }
        SourceKind::OciRegistry => {
            let registry: OCIRegistry = reader
                .get(&namespace, &source.name)
                .await?
                .ok_or_else(|| not_found("OCIRegistry", &namespace, &source.name))?;
            check_url_length("OCIRegistry", &namespace, &source.name, &registry.spec.url)?;
            if !registry.spec.url.starts_with("oci://") {
                return Err(ResolveError::Unsupported(format!(
                    "OCIRegistry {namespace}/{}: url {:?} must start with oci://",
                    source.name, registry.spec.url
                )));
            }
            let credentials =
                credentials(reader, &namespace, registry.spec.secret_ref.as_ref()).await?;
            Ok(ResolvedRequest {
                scope: scope_of("OCIRegistry", &namespace, &source.name),
                request: SourceRequest::Oci {
                    url: registry.spec.url.clone(),
                    tag: source.tag.clone(),
                    digest: source.digest.clone(),
                    insecure: registry.spec.insecure,
                },
                credentials,
                kind: SourceKind::OciRegistry,
                name: source.name.clone(),
                reuse_for: std::time::Duration::ZERO,
            })
        }
    }
}

/// Resolve a GitRepository, with an optional ref overriding its own.
pub async fn git_request(
    reader: &ObjectReader,
    namespace: &str,
    name: &str,
    override_ref: Option<&GitRef>,
) -> Result<ResolvedRequest, ResolveError> {
    let repo: GitRepository = reader
        .get(namespace, name)
        .await?
        .ok_or_else(|| not_found("GitRepository", namespace, name))?;
    let reference = git_reference(override_ref.or(repo.spec.git_ref.as_ref())).map_err(|why| {
        ResolveError::Unsupported(format!("GitRepository {namespace}/{name}: {why}"))
    })?;
    check_url_length("GitRepository", namespace, name, &repo.spec.url)?;
    let url = repo.spec.url.clone();
    let scheme_ok = ["file://", "git://", "http://", "https://", "ssh://"]
        .iter()
        .any(|s| url.starts_with(s))
        || (url.contains('@') && url.contains(':') && !url.contains("://"));
    if !scheme_ok {
        return Err(ResolveError::Unsupported(format!(
            "GitRepository {namespace}/{name}: url {url:?} has an unsupported scheme (use file://, git://, http(s):// or ssh://)"
        )));
    }
    let credentials = credentials(reader, namespace, repo.spec.secret_ref.as_ref()).await?;
    Ok(ResolvedRequest {
        scope: scope_of("GitRepository", namespace, name),
        request: SourceRequest::Git { url, reference },
        credentials,
        kind: SourceKind::GitRepository,
        name: name.to_string(),
        reuse_for: repo
            .spec
            .interval
            .as_ref()
            .map(|d| d.get())
            .unwrap_or(DEFAULT_GIT_INTERVAL),
    })
}

/// A GitRepository's `spec.interval` when it sets none: how often its controller fetches.
pub const DEFAULT_GIT_INTERVAL: std::time::Duration = std::time::Duration::from_secs(60);

/// A Git ref as a reference to fetch. `semver` is not supported.
pub fn git_reference(git_ref: Option<&GitRef>) -> Result<GitReference, Invalid> {
    let Some(r) = git_ref else {
        return Ok(GitReference::Head);
    };
    if let Some(range) = &r.semver {
        return Err(Invalid(format!(
            "ref.semver {range:?} is not supported: name a branch, tag or commit"
        )));
    }
    let set = [r.branch.is_some(), r.tag.is_some(), r.commit.is_some()]
        .iter()
        .filter(|s| **s)
        .count();
    if set > 1 {
        return Err(Invalid(
            "ref names more than one of branch, tag and commit".to_string(),
        ));
    }
    Ok(match (&r.branch, &r.tag, &r.commit) {
        (Some(b), _, _) => GitReference::Branch(b.clone()),
        (_, Some(t), _) => GitReference::Tag(t.clone()),
        (_, _, Some(c)) => GitReference::Commit(c.clone()),
        _ => GitReference::Head,
    })
}

/// The credentials a source's `secretRef` names; a Secret that is missing or cannot be read
/// is an error, never an anonymous fetch.
pub async fn credentials(
    reader: &ObjectReader,
    namespace: &str,
    secret_ref: Option<&LocalObjectRef>,
) -> Result<Option<Credentials>, ResolveError> {
    let Some(secret_ref) = secret_ref else {
        return Ok(None);
    };
    let secret: Secret = reader
        .get(namespace, &secret_ref.name)
        .await?
        .ok_or_else(|| not_found("Secret", namespace, &secret_ref.name))?;
    Ok(Some(Credentials::from_secret_data(&secret_data(&secret))))
}

/// A Secret's values, from `data` and `stringData` (local files may use either).
pub fn secret_data(secret: &Secret) -> std::collections::BTreeMap<String, Vec<u8>> {
    let mut out: std::collections::BTreeMap<String, Vec<u8>> = secret
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.0.clone()))
        .collect();
    for (k, v) in secret.string_data.iter().flatten() {
        out.insert(k.clone(), v.clone().into_bytes());
    }
    out
}

/// A URL longer than the CRDs allow (an object stored before they said so, or read from a
/// file by the CLI) is refused before it is quoted anywhere.
pub fn check_url_length(
    kind: &str,
    namespace: &str,
    name: &str,
    url: &str,
) -> Result<(), ResolveError> {
    let max = crate::engine::api::MAX_URL_LENGTH;
    if url.len() <= max {
        return Ok(());
    }
    Err(ResolveError::Unsupported(format!(
        "{kind} {namespace}/{name}: url is {} bytes long, longer than the {max} a source may name",
        url.len()
    )))
}

fn not_found(kind: &'static str, namespace: &str, name: &str) -> ResolveError {
    ResolveError::NotFound {
        kind,
        namespace: namespace.to_string(),
        name: name.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A URL stored before the CRDs limited it is refused without being quoted.
    #[test]
    fn a_url_longer_than_the_crds_allow_is_refused_by_its_length() {
        let longest = format!("https://{}", "h".repeat(2040));
        assert!(check_url_length("GitRepository", "a", "r", &longest).is_ok());
        let err = check_url_length("GitRepository", "a", "r", &format!("{longest}/")).unwrap_err();
        assert!(err.is_unsupported());
        assert_eq!(
            err.to_string(),
            "GitRepository a/r: url is 2049 bytes long, longer than the 2048 a source may name"
        );
    }

    #[test]
    fn a_semver_ref_is_unsupported() {
        let r = GitRef {
            semver: Some(">=1.0".into()),
            ..Default::default()
        };
        assert_eq!(
            git_reference(Some(&r)).unwrap_err().0,
            "ref.semver \">=1.0\" is not supported: name a branch, tag or commit"
        );
    }

    #[test]
    fn refs_map_to_references() {
        assert_eq!(git_reference(None), Ok(GitReference::Head));
        let branch = GitRef {
            branch: Some("main".into()),
            ..Default::default()
        };
        assert_eq!(
            git_reference(Some(&branch)),
            Ok(GitReference::Branch("main".into()))
        );
        let two = GitRef {
            branch: Some("main".into()),
            tag: Some("v1".into()),
            ..Default::default()
        };
        assert!(git_reference(Some(&two)).is_err());
    }
}

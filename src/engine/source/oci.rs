//! OCI registries: Helm charts pushed with `helm push` and plain manifest bundles (Flux-style
//! `tar+gzip` layers), by tag or digest.

use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};

use super::archive;
use super::cache::Cache;
use super::{Artifact, Credentials, SourceError};

/// Layer media types whose content is a gzip'd tar convoy unpacks.
const TAR_GZIP_LAYERS: &[&str] = &[
    "application/vnd.cncf.helm.chart.content.v1.tar+gzip",
    "application/vnd.cncf.flux.content.v1.tar+gzip",
    "application/vnd.oci.image.layer.v1.tar+gzip",
    "application/vnd.docker.image.rootfs.diff.tar.gzip",
];
/// Layer media types whose content is a plain tar.
const TAR_LAYERS: &[&str] = &["application/vnd.oci.image.layer.v1.tar"];
/// Layers convoy accepts and ignores (Helm provenance).
const IGNORED_LAYERS: &[&str] = &["application/vnd.cncf.helm.chart.provenance.v1.prov"];

/// Pull the artifact `tag` or `digest` of the repository at `url` (`oci://host/repo`), for
/// `scope` (the source object asking; see [`Cache`]).
pub async fn fetch(
    cache: &Cache,
    scope: &str,
    url: &str,
    tag: Option<&str>,
    digest: Option<&str>,
    insecure: bool,
    credentials: Option<&Credentials>,
) -> Result<Artifact, SourceError> {
    let reference = reference(url, tag, digest)?;
    if let Some(d) = digest
        && let Some(found) = cache.lookup(scope, &revision_key(url, d))
    {
        return Ok(Artifact {
            revision: d.to_string(),
            path: cache.artifact_dir(&found),
            digest: found,
            url: url.to_string(),
        });
    }
    crate::engine::http::ensure_crypto_provider();
    let client = Client::new(ClientConfig {
        protocol: if insecure {
            ClientProtocol::Http
        } else {
            ClientProtocol::Https
        },
        ..Default::default()
    });
    let auth = match credentials {
        Some(Credentials {
            bearer_token: Some(token),
            ..
        }) => RegistryAuth::Bearer(token.clone()),
        Some(Credentials {
            username: Some(user),
            password,
            ..
        }) => RegistryAuth::Basic(user.clone(), password.clone().unwrap_or_default()),
        _ => RegistryAuth::Anonymous,
    };
    let mut accepted: Vec<&str> = TAR_GZIP_LAYERS.to_vec();
    accepted.extend_from_slice(TAR_LAYERS);
    accepted.extend_from_slice(IGNORED_LAYERS);
    let image = client
        .pull(&reference, &auth, accepted)
        .await
        .map_err(|e| SourceError::not_ready(url, crate::engine::error::chain(&e)))?;
    let manifest_digest = image
        .digest
        .clone()
        .or_else(|| digest.map(str::to_string))
        .unwrap_or_default();
    let key = revision_key(url, &manifest_digest);
    let revision = match tag {
        Some(t) if digest.is_none() => format!("{t}@{manifest_digest}"),
        _ => manifest_digest.clone(),
    };
    if let Some(found) = cache.lookup(scope, &key) {
        return Ok(Artifact {
            revision,
            path: cache.artifact_dir(&found),
            digest: found,
            url: url.to_string(),
        });
    }
    let layers: Vec<(String, Vec<u8>)> = image
        .layers
        .iter()
        .map(|l| (l.media_type.clone(), l.data.to_vec()))
        .collect();
    let digest = cache
        .unpack_and_install(
            scope,
            (!manifest_digest.is_empty()).then_some(key.as_str()),
            move |dir| {
                for (media_type, data) in &layers {
                    if TAR_GZIP_LAYERS.contains(&media_type.as_str()) {
                        archive::unpack_tar_gz(data.as_slice(), dir)?;
                    } else if TAR_LAYERS.contains(&media_type.as_str()) {
                        archive::unpack_tar(data.as_slice(), dir)?;
                    }
                }
                Ok(())
            },
        )
        .await
        .map_err(|source| SourceError::Archive {
            url: url.to_string(),
            source,
        })??;
    Ok(Artifact {
        revision,
        path: cache.artifact_dir(&digest),
        digest,
        url: url.to_string(),
    })
}

fn revision_key(url: &str, digest: &str) -> String {
    format!("oci:{url}@{digest}")
}

/// `oci://host/repo` plus a tag or digest as an OCI reference.
pub fn reference(
    url: &str,
    tag: Option<&str>,
    digest: Option<&str>,
) -> Result<Reference, SourceError> {
    let Some(rest) = url.strip_prefix("oci://") else {
        return Err(SourceError::Unsupported(format!(
            "OCIRegistry URL {url:?} must start with oci://"
        )));
    };
    let rest = rest.trim_end_matches('/');
    let Some((registry, repository)) = rest.split_once('/') else {
        return Err(SourceError::Unsupported(format!(
            "OCIRegistry URL {url:?} must name a repository (oci://host/repository)"
        )));
    };
    Ok(match (digest, tag) {
        (Some(d), _) => {
            Reference::with_digest(registry.to_string(), repository.to_string(), d.to_string())
        }
        (None, Some(t)) => {
            Reference::with_tag(registry.to_string(), repository.to_string(), t.to_string())
        }
        (None, None) => Reference::with_tag(
            registry.to_string(),
            repository.to_string(),
            "latest".to_string(),
        ),
    })
}

/// Whether the registry of `url` answers its API root (`/v2/`; 200 or 401 both mean it is
/// there).
pub async fn ping(url: &str, insecure: bool) -> Result<(), SourceError> {
    let reference = reference(url, Some("latest"), None)?;
    let scheme = if insecure { "http" } else { "https" };
    let client = crate::engine::http::client()
        .map_err(|e| SourceError::not_ready(url, crate::engine::error::chain(&e)))?;
    let response = client
        .get(format!("{scheme}://{}/v2/", reference.registry()))
        .send()
        .await
        .map_err(|e| SourceError::not_ready(url, crate::engine::error::chain(&e)))?;
    match response.status().as_u16() {
        200 | 401 => Ok(()),
        code => Err(SourceError::not_ready(
            url,
            format!("the registry answered HTTP {code}"),
        )),
    }
}

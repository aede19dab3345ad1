//! OCI registries: Helm charts pushed with `helm push` and plain manifest bundles (Flux-style
//! `tar+gzip` layers), by tag or digest.

use oci_client::Reference;
use oci_client::secrets::RegistryAuth;

use super::allowed_urls::AllowedUrls;
use super::archive;
use super::cache::{Cache, UntilGivenUp};
use super::registry_token;
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

/// What to pull: the artifact `tag` or `digest` of the repository at `url`
/// (`oci://host/repo`), over plain HTTP if `insecure`.
#[derive(Debug, Clone, Copy)]
pub struct Pull<'a> {
    pub url: &'a str,
    pub tag: Option<&'a str>,
    pub digest: Option<&'a str>,
    pub insecure: bool,
}

/// Pull `pull` for `scope` (the source object asking; see [`Cache`]), if `allowed` lets
/// convoy fetch its URL.
pub async fn fetch(
    cache: &Cache,
    scope: &str,
    pull: Pull<'_>,
    credentials: Option<&Credentials>,
    allowed: &AllowedUrls,
) -> Result<Artifact, SourceError> {
    let Pull {
        url,
        tag,
        digest,
        insecure,
    } = pull;
    allowed
        .check("OCI repository URL", url)
        .map_err(SourceError::Unsupported)?;
    let reference = reference(url, tag, digest)?;
    // A digest in another algorithm could not be checked against what is sent.
    if let Some(asked) = digest
        && !is_sha256_digest(asked)
    {
        return Err(SourceError::not_ready(
            url,
            format!(
                "digest {asked:?} is not a sha256 digest (sha256: and 64 hex digits), the only kind convoy checks"
            ),
        ));
    }
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
    let not_ready = |e: oci_client::errors::OciDistributionError| {
        SourceError::not_ready(url, crate::engine::error::chain(&e))
    };
    let http = crate::engine::http::client()
        .map_err(|e| SourceError::not_ready(url, crate::engine::error::chain(&e)))?;
    let base = format!(
        "{}://{}",
        if insecure { "http" } else { "https" },
        reference.resolve_registry()
    );
    let authorization =
        registry_token::authorize(&http, &base, reference.repository(), &auth, insecure, url)
            .await?;
    let registry = Registry {
        http: &http,
        base: &base,
        repository: reference.repository(),
        authorization: &authorization,
        url,
    };
    // The manifest first: a revision unpacked before needs none of its layers.
    let (manifest, manifest_digest) = registry.manifest(&reference).await?;
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
    let wanted = check_layers(&manifest).map_err(|e| match e {
        LayerError::Registry(e) => not_ready(e),
        LayerError::Refused(message) => SourceError::not_ready(url, message),
    })?;
    // The layers wait on disk, in the cache's own temporary space, until they are unpacked.
    let downloads = cache
        .staging()
        .map_err(|e| SourceError::not_ready(url, crate::engine::error::chain(&e)))?;
    let mut layers: Vec<(String, std::path::PathBuf)> = Vec::new();
    for (i, layer) in wanted.into_iter().enumerate() {
        let path = downloads.path().join(format!("layer-{i}"));
        registry.layer(layer, &path).await?;
        layers.push((layer.media_type.clone(), path));
    }
    let digest = cache
        .unpack_and_install(
            scope,
            (!manifest_digest.is_empty()).then_some(key.as_str()),
            move |dir, given_up| {
                // One unpack for all layers: they share its size limit and its work.
                let mut unpack = archive::Unpack::until(dir, given_up);
                for (media_type, path) in &layers {
                    let file = std::fs::File::open(path).map_err(archive::ArchiveError::Read)?;
                    let data = UntilGivenUp::new(std::io::BufReader::new(file), given_up);
                    if TAR_GZIP_LAYERS.contains(&media_type.as_str()) {
                        unpack.tar_gz(data)?;
                    } else if TAR_LAYERS.contains(&media_type.as_str()) {
                        unpack.tar(data)?;
                    }
                }
                drop(downloads);
                unpack.finish()
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

/// The most a manifest may hold: distribution's and containerd's own limit.
const MOST_MANIFEST_BYTES: usize = 4 << 20;

/// One repository of a registry, and how its requests are authorized: manifests and layers
/// are pulled by convoy, through one HTTP client and one authorization.
struct Registry<'a> {
    http: &'a reqwest::Client,
    /// `scheme://host`.
    base: &'a str,
    repository: &'a str,
    authorization: &'a registry_token::Authorization,
    /// The source's URL, for errors.
    url: &'a str,
}

impl Registry<'_> {
    /// The image manifest `reference` names (through an image index, the entry for this
    /// platform) and its digest. oci-client reads a manifest whole, however large the
    /// registry — which the tenant names — makes it (600 MiB took 636 MB of the daemon's
    /// memory), so the manifest is read here, no further than [`MOST_MANIFEST_BYTES`].
    async fn manifest(
        &self,
        reference: &Reference,
    ) -> Result<(oci_client::manifest::OciImageManifest, String), SourceError> {
        use oci_client::manifest::{OciImageIndex, OciImageManifest};
        let failed = |why: String| SourceError::not_ready(self.url, why);
        let mut reference = reference.clone();
        // An index names the manifest of each platform: one more look, no more.
        for _ in 0..2 {
            let wanted = reference.digest().or(reference.tag()).unwrap_or("latest");
            let address = format!("{}/v2/{}/manifests/{wanted}", self.base, self.repository);
            let request = self.http.get(&address).header(
                reqwest::header::ACCEPT,
                [
                    oci_client::manifest::OCI_IMAGE_MEDIA_TYPE,
                    oci_client::manifest::IMAGE_MANIFEST_MEDIA_TYPE,
                    oci_client::manifest::OCI_IMAGE_INDEX_MEDIA_TYPE,
                    oci_client::manifest::IMAGE_MANIFEST_LIST_MEDIA_TYPE,
                ]
                .join(", "),
            );
            let response = self
                .send(request, &format!("the manifest {wanted}"))
                .await?;
            let header = response
                .headers()
                .get("Docker-Content-Digest")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            let body =
                super::helm_repo::read_at_most(response, self.url, MOST_MANIFEST_BYTES).await?;
            let digest = format!(
                "sha256:{}",
                hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&body))
            );
            // A digest asked for, or one the registry states, must be what was sent.
            for stated in [reference.digest(), header.as_deref()]
                .into_iter()
                .flatten()
            {
                if stated.starts_with("sha256:") && stated != digest {
                    return Err(failed(format!(
                        "the manifest sent has digest {digest}, not {stated}"
                    )));
                }
            }
            let kind: serde_json::Value = serde_json::from_slice(&body).map_err(|e| {
                failed(super::untrusted::json_error("the manifest is not JSON", &e))
            })?;
            let media_type = kind["mediaType"].as_str().unwrap_or_default();
            let is_index = media_type == oci_client::manifest::OCI_IMAGE_INDEX_MEDIA_TYPE
                || media_type == oci_client::manifest::IMAGE_MANIFEST_LIST_MEDIA_TYPE
                || (media_type.is_empty() && kind.get("manifests").is_some());
            if !is_index {
                let manifest: OciImageManifest = serde_json::from_value(kind).map_err(|e| {
                    failed(super::untrusted::json_error(
                        "the manifest cannot be read",
                        &e,
                    ))
                })?;
                return Ok((manifest, digest));
            }
            let index: OciImageIndex = serde_json::from_value(kind).map_err(|e| {
                failed(super::untrusted::json_error(
                    "the image index cannot be read",
                    &e,
                ))
            })?;
            let Some(entry) = oci_client::client::current_platform_resolver(&index.manifests)
            else {
                return Err(failed(
                    "the image index names no manifest for this platform".to_string(),
                ));
            };
            // The entry goes into the next address and is checked against what is sent.
            if !is_sha256_digest(&entry) {
                return Err(failed(format!(
                    "the image index names manifest {entry:?}, which is not a sha256 digest (sha256: and 64 hex digits)"
                )));
            }
            reference = Reference::with_digest(
                reference.registry().to_string(),
                reference.repository().to_string(),
                entry,
            );
        }
        Err(failed(
            "an image index names another image index; convoy follows one".to_string(),
        ))
    }

    /// `request`, authorized, for `what`; a response that is not a success is refused.
    async fn send(
        &self,
        request: reqwest::RequestBuilder,
        what: &str,
    ) -> Result<reqwest::Response, SourceError> {
        let failed = |why: String| SourceError::not_ready(self.url, why);
        let response = self
            .authorization
            .apply(request)
            .send()
            .await
            .map_err(|e| failed(crate::engine::error::chain(&e)))?;
        let status = response.status();
        if !status.is_success() {
            return Err(failed(format!(
                "the registry answered HTTP {} for {what}",
                status.as_u16()
            )));
        }
        Ok(response)
    }

    /// A layer's bytes, written to `path` as they arrive (an artifact's layers may be a GiB:
    /// held in memory, a few Releases' pulls would fill the daemon's), no more than its
    /// manifest declares (which [`check_layers`] bounded): a registry that sends more is
    /// refused there. They must have the layer's digest. A redirect to storage elsewhere does
    /// not carry the authorization.
    async fn layer(
        &self,
        layer: &oci_client::manifest::OciDescriptor,
        path: &std::path::Path,
    ) -> Result<(), SourceError> {
        use tokio::io::AsyncWriteExt;
        let failed = |why: String| SourceError::not_ready(self.url, why);
        let address = format!(
            "{}/v2/{}/blobs/{}",
            self.base, self.repository, layer.digest
        );
        let mut response = self
            .send(self.http.get(&address), &format!("layer {}", layer.digest))
            .await?;
        let most = u64::try_from(layer.size).unwrap_or(0);
        let too_large = || {
            failed(format!(
                "the registry sent more than the {most} bytes the manifest declares for the layer"
            ))
        };
        if response.content_length().is_some_and(|n| n > most) {
            return Err(too_large());
        }
        let write_failed = |e: std::io::Error| {
            failed(format!("cannot write the layer to {}: {e}", path.display()))
        };
        let mut file = tokio::fs::File::create(path).await.map_err(write_failed)?;
        let mut digest = LayerDigest::of(&layer.digest);
        let mut received: u64 = 0;
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| failed(crate::engine::error::chain(&e)))?
        {
            received += chunk.len() as u64;
            if received > most {
                return Err(too_large());
            }
            digest.update(&chunk);
            file.write_all(&chunk).await.map_err(write_failed)?;
        }
        file.flush().await.map_err(write_failed)?;
        let sent = digest.finish();
        if sent != layer.digest {
            return Err(failed(format!(
                "layer {} was sent with digest {sent}",
                layer.digest
            )));
        }
        Ok(())
    }
}

/// A layer's digest, computed as its bytes arrive, in the algorithm its manifest names.
enum LayerDigest {
    Sha256(sha2::Sha256),
    Sha512(sha2::Sha512),
}

impl LayerDigest {
    fn of(named: &str) -> Self {
        use sha2::Digest;
        if named.starts_with("sha512:") {
            Self::Sha512(sha2::Sha512::new())
        } else {
            Self::Sha256(sha2::Sha256::new())
        }
    }

    fn update(&mut self, bytes: &[u8]) {
        use sha2::Digest;
        match self {
            Self::Sha256(h) => h.update(bytes),
            Self::Sha512(h) => h.update(bytes),
        }
    }

    fn finish(self) -> String {
        use sha2::Digest;
        match self {
            Self::Sha256(h) => format!("sha256:{}", hex::encode(h.finalize())),
            Self::Sha512(h) => format!("sha512:{}", hex::encode(h.finalize())),
        }
    }
}

/// `sha256:` and 64 lowercase hex digits, the only digest convoy can check; anything else
/// would also be put into an address as it is (`sha256:/../..`).
fn is_sha256_digest(digest: &str) -> bool {
    digest
        .strip_prefix("sha256:")
        .is_some_and(|hex| is_hex(hex, 64))
}

/// A digest oci-client checks a blob by: sha256 or sha512, in lowercase hex.
fn is_layer_digest(digest: &str) -> bool {
    is_sha256_digest(digest)
        || digest
            .strip_prefix("sha512:")
            .is_some_and(|hex| is_hex(hex, 128))
}

/// `host`, `host:port`, `[v6]` or `[v6]:port`: no user, path, query or fragment.
fn is_registry_host(registry: &str) -> bool {
    let (host, port) = match registry.rsplit_once(':') {
        Some((host, port)) if !host.ends_with(':') && !port.contains(']') => (host, Some(port)),
        _ => (registry, None),
    };
    let host_ok = match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        Some(v6) => {
            !v6.is_empty()
                && v6
                    .bytes()
                    .all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.')
        }
        None => {
            !host.is_empty()
                && host
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
        }
    };
    host_ok
        && port
            .is_none_or(|p| !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()))
}

/// The distribution spec's repository name: `/`-separated components of lowercase letters
/// and digits, joined by `.`, `_`, `__` or dashes.
fn is_repository_name(repository: &str) -> bool {
    repository.len() <= 255
        && repository.split('/').all(|component| {
            let bytes = component.as_bytes();
            let alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
            bytes.first().is_some_and(alnum)
                && bytes.last().is_some_and(alnum)
                && bytes
                    .iter()
                    .all(|b| alnum(b) || matches!(b, b'.' | b'_' | b'-'))
                && !component.contains("..")
                && !component.contains("___")
        })
}

/// `[A-Za-z0-9_][A-Za-z0-9._-]{0,127}`.
fn is_tag(tag: &str) -> bool {
    let bytes = tag.as_bytes();
    bytes.len() <= 128
        && bytes
            .first()
            .is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_')
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

fn is_hex(text: &str, len: usize) -> bool {
    text.len() == len && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// What one artifact's layers may hold, packed: the unpacked limit of each archive
/// (the unpack limit applies again to what they unpack to).
const MOST_LAYER_BYTES: i64 = 1 << 30;

enum LayerError {
    Registry(oci_client::errors::OciDistributionError),
    /// Refused by convoy, with the reason.
    Refused(String),
}

/// The layers to pull: every layer must be of a type convoy knows (as oci-client's own pull
/// requires), provenance is skipped, and together they may declare at most
/// [`MOST_LAYER_BYTES`].
fn check_layers(
    manifest: &oci_client::manifest::OciImageManifest,
) -> Result<Vec<&oci_client::manifest::OciDescriptor>, LayerError> {
    use oci_client::errors::OciDistributionError;
    if manifest.layers.is_empty() {
        return Err(LayerError::Registry(
            OciDistributionError::PullNoLayersError,
        ));
    }
    let known = |t: &str| {
        TAR_GZIP_LAYERS.contains(&t) || TAR_LAYERS.contains(&t) || IGNORED_LAYERS.contains(&t)
    };
    if let Some(layer) = manifest.layers.iter().find(|l| !known(&l.media_type)) {
        return Err(LayerError::Registry(
            OciDistributionError::IncompatibleLayerMediaTypeError(layer.media_type.clone()),
        ));
    }
    let wanted: Vec<_> = manifest
        .layers
        .iter()
        .filter(|l| !IGNORED_LAYERS.contains(&l.media_type.as_str()))
        .collect();
    // A layer's digest goes into its address and must be one oci-client checks the bytes by.
    if let Some(layer) = wanted.iter().find(|l| !is_layer_digest(&l.digest)) {
        return Err(LayerError::Refused(format!(
            "the manifest names layer {:?}, which is not a sha256 or sha512 digest",
            layer.digest
        )));
    }
    let declared = wanted
        .iter()
        .try_fold(0i64, |sum, l| sum.checked_add(l.size.max(0)));
    match declared {
        Some(bytes) if bytes <= MOST_LAYER_BYTES => Ok(wanted),
        _ => Err(LayerError::Refused(format!(
            "the artifact's layers declare more than {MOST_LAYER_BYTES} bytes"
        ))),
    }
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
    // Each goes into the addresses of requests that carry the Release's credentials.
    let refused = |what: &str| {
        Err(SourceError::Unsupported(format!(
            "OCIRegistry URL {url:?}: {what}"
        )))
    };
    if !is_registry_host(registry) {
        return refused("the registry must be a host name or address, with a port at most");
    }
    if !is_repository_name(repository) {
        return refused(
            "the repository must be lowercase names of letters and digits, joined by . _ or - and separated by /",
        );
    }
    // A chart version's build metadata (`1.2.3+build.5`) is pushed as `_`, which `helm push`
    // and `helm pull` both do: `+` is not allowed in a tag.
    let tag = tag.map(|t| t.replace('+', "_"));
    if let Some(t) = tag.as_deref().filter(|t| !is_tag(t)) {
        return Err(SourceError::Unsupported(format!(
            "tag {t:?} is not an OCI tag (up to 128 letters, digits, _ . or -, not starting with . or -)"
        )));
    }
    Ok(match (digest, tag) {
        (Some(d), _) => {
            Reference::with_digest(registry.to_string(), repository.to_string(), d.to_string())
        }
        (None, Some(t)) => Reference::with_tag(registry.to_string(), repository.to_string(), t),
        (None, None) => Reference::with_tag(
            registry.to_string(),
            repository.to_string(),
            "latest".to_string(),
        ),
    })
}

/// Whether the registry of `url` answers its API root (`/v2/`; 200 or 401 both mean it is
/// there).
pub async fn ping(url: &str, insecure: bool, allowed: &AllowedUrls) -> Result<(), SourceError> {
    allowed
        .check("OCI repository URL", url)
        .map_err(SourceError::Unsupported)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// What goes into a request's address is what the OCI grammar allows, nothing that
    /// changes the address's path, query or host.
    #[test]
    fn names_that_would_change_an_address_are_refused() {
        for good in [
            "ghcr.io",
            "registry.example:5000",
            "127.0.0.1:5000",
            "[::1]:5000",
            "localhost",
        ] {
            assert!(is_registry_host(good), "{good}");
        }
        for bad in [
            "user:pw@ghcr.io",
            "ghcr.io?x",
            "ghcr.io#f",
            "host:",
            "host:99999x",
            "",
            "[]",
        ] {
            assert!(!is_registry_host(bad), "{bad}");
        }
        for good in ["bundles/app", "a/b-c/d.e", "a__b", "library/nginx"] {
            assert!(is_repository_name(good), "{good}");
        }
        for bad in [
            "../x", "a/../b", "A/b", "a//b", "a?x=1", "a#f", "a/", "-a", "a%2e%2e",
        ] {
            assert!(!is_repository_name(bad), "{bad}");
        }
        for good in ["v1", "1.2.3", "latest", "_x", "v1.0.0-rc.1"] {
            assert!(is_tag(good), "{good}");
        }
        // A chart version with build metadata is pulled as helm pushed it.
        let pulled =
            reference("oci://ghcr.io/org/charts/web", Some("1.2.3+build.5"), None).unwrap();
        assert_eq!(pulled.tag(), Some("1.2.3_build.5"));
        for bad in [
            "../../x",
            ".hidden",
            "-x",
            "a/b",
            "a?q=1",
            "",
            &"x".repeat(129),
        ] {
            assert!(!is_tag(bad), "{bad}");
        }
    }
}

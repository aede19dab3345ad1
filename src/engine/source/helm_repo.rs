//! Helm chart repositories over HTTP: `index.yaml`, then the chart archive.
//!
//! Version selection follows Helm: an exact version, or a range in Helm's (Masterminds)
//! syntax — `^1.2`, `~1.2.3`, `>=1.0 <2.0`, `1.2.x`, `1.0 - 1.4`, `a || b` — taking the
//! highest version that satisfies it; pre-releases only when the range names one.

use std::collections::BTreeMap;

use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::allowed_urls::AllowedUrls;
use super::archive;
use super::cache::{Cache, UntilGivenUp};
use super::{Artifact, Credentials, SourceError};

#[derive(Debug, Deserialize)]
struct Index {
    #[serde(default)]
    entries: BTreeMap<String, Vec<ChartVersion>>,
}

#[derive(Debug, Clone, Deserialize)]
struct ChartVersion {
    version: String,
    #[serde(default)]
    urls: Vec<String>,
    #[serde(default)]
    digest: Option<String>,
}

/// A repository index holds no aliases (Helm and every index generator write none), and one
/// that does could make a few kilobytes stand for gigabytes of chart entries: it is refused.
fn parse_index(text: &str) -> Result<Index, serde_saphyr::Error> {
    let mut budget = serde_saphyr::Budget::default();
    budget.max_aliases = 0;
    serde_saphyr::from_str_with_options(text, serde_saphyr::options! { budget: Some(budget) })
}

/// Fetch `chart` at `version` (exact, range, or newest stable) from the repository at `url`,
/// for `scope` (the source object asking; see [`Cache`]). Credentials go only to the
/// repository's own origin: a chart URL in the index that names another host is fetched
/// without them, as Helm does unless told `--pass-credentials`.
///
/// Under an allow-list (`allowed`), the index's URL and the chart's download URL (the
/// repository's content names it) must both be allowed before either is fetched.
pub async fn fetch(
    cache: &Cache,
    scope: &str,
    url: &str,
    chart: &str,
    version: Option<&str>,
    credentials: Option<&Credentials>,
    allowed: &AllowedUrls,
) -> Result<Artifact, SourceError> {
    let base = url.trim_end_matches('/');
    let client = crate::engine::http::client_within(allowed)
        .map_err(|e| SourceError::not_ready(url, crate::engine::error::chain(&e)))?;
    let index_url = index_url(url, allowed)?;
    let body = get(&client, &index_url, credentials).await?;
    let text = String::from_utf8_lossy(&body);
    let index = parse_index(&text).map_err(|e| {
        SourceError::not_ready(
            url,
            super::untrusted::yaml_error("index.yaml is not a Helm repository index", &e),
        )
    })?;
    let versions = index.entries.get(chart).ok_or_else(|| {
        SourceError::not_ready(
            url,
            format!("chart {chart:?} is not in the repository index"),
        )
    })?;
    let chosen = select_version(versions.iter().map(|v| v.version.as_str()), version)
        .map_err(|e| SourceError::not_ready(url, format!("chart {chart}: {e}")))?;
    let entry = versions
        .iter()
        .find(|v| v.version == chosen)
        .ok_or_else(|| {
            SourceError::not_ready(
                url,
                format!("chart {chart} {chosen} vanished from the index"),
            )
        })?;

    let key = format!(
        "helm:{base}#{chart}@{}#{}",
        entry.version,
        entry.digest.as_deref().unwrap_or("")
    );
    if let Some(digest) = cache.lookup(scope, &key) {
        return Ok(Artifact {
            revision: entry.version.clone(),
            path: cache.artifact_dir(&digest),
            digest,
            url: url.to_string(),
        });
    }
    let chart_url = entry.urls.first().ok_or_else(|| {
        SourceError::not_ready(url, format!("chart {chart} {chosen} has no download URL"))
    })?;
    let chart_url = if chart_url.contains("://") {
        chart_url.clone()
    } else {
        format!("{base}/{}", chart_url.trim_start_matches("./"))
    };
    allowed
        .check(
            &format!("the download URL of chart {chart} {chosen}"),
            &chart_url,
        )
        .map_err(SourceError::Unsupported)?;
    let chart_credentials = credentials.filter(|_| same_origin(&chart_url, base));
    let archive_bytes = get(&client, &chart_url, chart_credentials).await?;
    if let Some(expected) = &entry.digest {
        let actual = hex::encode(Sha256::digest(&archive_bytes));
        if !expected.eq_ignore_ascii_case(actual.trim_start_matches("sha256:")) {
            return Err(SourceError::not_ready(
                url,
                format!(
                    "chart {chart} {chosen}: digest mismatch (index says {expected}, got {actual})"
                ),
            ));
        }
    }
    let digest = cache
        .unpack_and_install(scope, Some(&key), move |dir, given_up| {
            let mut unpack = archive::Unpack::until(dir, given_up);
            unpack.tar_gz(UntilGivenUp::new(archive_bytes.as_slice(), given_up))?;
            unpack.finish()
        })
        .await
        .map_err(|source| SourceError::Archive {
            url: chart_url.clone(),
            source,
        })??;
    Ok(Artifact {
        revision: entry.version.clone(),
        path: cache.artifact_dir(&digest),
        digest,
        url: url.to_string(),
    })
}

/// The index of the repository at `url`, if `allowed` lets convoy fetch it (checked as the
/// address requested: `url` may end in a `?` that makes `/index.yaml` a query).
fn index_url(url: &str, allowed: &AllowedUrls) -> Result<String, SourceError> {
    let index = format!("{}/index.yaml", url.trim_end_matches('/'));
    allowed
        .check("the Helm repository index", &index)
        .map_err(SourceError::Unsupported)?;
    Ok(index)
}

/// Whether two URLs share scheme, host and port.
fn same_origin(a: &str, b: &str) -> bool {
    let origin = |u: &str| {
        reqwest::Url::parse(u).ok().map(|u| {
            (
                u.scheme().to_string(),
                u.host_str().map(str::to_string),
                u.port_or_known_default(),
            )
        })
    };
    let (a, b) = (origin(a), origin(b));
    a.is_some() && a == b
}

async fn get(
    client: &reqwest::Client,
    url: &str,
    credentials: Option<&Credentials>,
) -> Result<Vec<u8>, SourceError> {
    let mut request = client.get(url);
    if let Some(c) = credentials {
        if let Some(token) = &c.bearer_token {
            request = request.bearer_auth(token);
        } else if let Some(user) = &c.username {
            request = request.basic_auth(user, c.password.as_ref());
        }
    }
    let response = request
        .send()
        .await
        .map_err(|e| SourceError::not_ready(url, crate::engine::error::chain(&e)))?;
    let status = response.status();
    if !status.is_success() {
        return Err(SourceError::not_ready(url, format!("HTTP {status}")));
    }
    read_at_most(response, url, MOST_RESPONSE_BYTES).await
}

/// The most an index or a chart archive may be. The largest public indexes are tens of
/// megabytes, and helm refuses a chart that unpacks to more than 100 MiB.
const MOST_RESPONSE_BYTES: usize = 256 << 20;

/// The body of `response`, refused as soon as it passes `most` bytes: a repository (the
/// tenant names it) that sends without end would otherwise fill the daemon's memory.
pub(super) async fn read_at_most(
    mut response: reqwest::Response,
    url: &str,
    most: usize,
) -> Result<Vec<u8>, SourceError> {
    let too_large =
        || SourceError::not_ready(url, format!("the response is larger than {most} bytes"));
    if response.content_length().is_some_and(|n| n > most as u64) {
        return Err(too_large());
    }
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| SourceError::not_ready(url, crate::engine::error::chain(&e)))?
    {
        if body.len() + chunk.len() > most {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// Why no chart version could be chosen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VersionError {
    #[error("invalid version constraint {0:?}")]
    InvalidConstraint(String),
    #[error("no version satisfies {0:?}")]
    NoneSatisfies(String),
    #[error("no stable version")]
    NoStable,
}

/// Pick the highest version of `available` that satisfies `constraint` (Helm's rules).
pub fn select_version<'a>(
    available: impl Iterator<Item = &'a str>,
    constraint: Option<&str>,
) -> Result<String, VersionError> {
    let constraint = constraint.map(str::trim).filter(|c| !c.is_empty());
    let matcher = match constraint {
        Some(c) => Some(Constraint::parse(c)?),
        None => None,
    };
    let mut best: Option<(semver::Version, &str)> = None;
    for raw in available {
        let Some(version) = parse_version(raw) else {
            continue;
        };
        let ok = match &matcher {
            Some(m) => m.matches(&version),
            None => version.pre.is_empty(),
        };
        if ok && best.as_ref().is_none_or(|(b, _)| version > *b) {
            best = Some((version, raw));
        }
    }
    best.map(|(_, raw)| raw.to_string())
        .ok_or_else(|| match constraint {
            Some(c) => VersionError::NoneSatisfies(c.to_string()),
            None => VersionError::NoStable,
        })
}

fn parse_version(raw: &str) -> Option<semver::Version> {
    let v = raw.trim().trim_start_matches('v');
    semver::Version::parse(v).ok().or_else(|| {
        // Helm accepts `1.2` as `1.2.0`.
        let parts: Vec<&str> = v.split('.').collect();
        match parts.len() {
            1 => semver::Version::parse(&format!("{v}.0.0")).ok(),
            2 => semver::Version::parse(&format!("{v}.0")).ok(),
            _ => None,
        }
    })
}

/// A Helm version constraint: alternatives (`||`) of conjunctions.
struct Constraint {
    alternatives: Vec<Conjunction>,
}

struct Conjunction {
    requirement: Option<semver::VersionReq>,
    excluded: Vec<semver::Version>,
}

impl Constraint {
    fn parse(text: &str) -> Result<Self, VersionError> {
        let mut alternatives = Vec::new();
        for alternative in text.split("||") {
            alternatives.push(Conjunction::parse(alternative.trim(), text)?);
        }
        Ok(Self { alternatives })
    }

    fn matches(&self, version: &semver::Version) -> bool {
        self.alternatives.iter().any(|c| c.matches(version))
    }
}

impl Conjunction {
    fn parse(text: &str, whole: &str) -> Result<Self, VersionError> {
        let invalid = || VersionError::InvalidConstraint(whole.to_string());
        // Hyphen ranges: `1.2 - 1.4.5` means `>=1.2, <=1.4.5`.
        let text = match text.split_once(" - ") {
            Some((low, high)) => format!(">={}, <={}", low.trim(), high.trim()),
            None => text.to_string(),
        };
        // Join operators separated from their version by spaces (`>= 1.2`).
        let mut tokens: Vec<String> = Vec::new();
        for token in text.split([',', ' ']).filter(|t| !t.is_empty()) {
            match tokens.last_mut() {
                Some(last) if last.chars().all(|c| "<>=!~^".contains(c)) => last.push_str(token),
                _ => tokens.push(token.to_string()),
            }
        }
        let mut comparators = Vec::new();
        let mut excluded = Vec::new();
        for token in tokens {
            let token = token.replace('X', "x");
            if let Some(v) = token.strip_prefix("!=") {
                excluded.push(parse_version(v).ok_or_else(invalid)?);
                continue;
            }
            let has_op = token.starts_with(['<', '>', '=', '~', '^']);
            let wildcard = token.contains(['x', '*']);
            let token = token
                .replacen("=v", "=", 1)
                .replacen("^v", "^", 1)
                .replacen("~v", "~", 1);
            let token = token.strip_prefix('v').map(str::to_string).unwrap_or(token);
            if has_op || wildcard {
                comparators.push(token);
            } else {
                // A bare version is an exact match in Helm (unlike Cargo's caret default).
                comparators.push(format!("={token}"));
            }
        }
        let requirement = if comparators.is_empty() {
            None
        } else {
            Some(semver::VersionReq::parse(&comparators.join(", ")).map_err(|_| invalid())?)
        };
        Ok(Self {
            requirement,
            excluded,
        })
    }

    fn matches(&self, version: &semver::Version) -> bool {
        self.requirement.as_ref().is_none_or(|r| r.matches(version))
            && !self.excluded.contains(version)
    }
}

/// The digest (`sha256:<hex>`) of a repository's `index.yaml`: it changes when a chart
/// version is added, which is when Releases of the repository should look again.
pub async fn index_digest(
    url: &str,
    credentials: Option<&Credentials>,
    allowed: &AllowedUrls,
) -> Result<String, SourceError> {
    let client = crate::engine::http::client_within(allowed)
        .map_err(|e| SourceError::not_ready(url, crate::engine::error::chain(&e)))?;
    let body = get(&client, &index_url(url, allowed)?, credentials).await?;
    Ok(format!("sha256:{}", hex::encode(Sha256::digest(&body))))
}

#[cfg(test)]
mod tests {

    /// An index is read as Helm writes it, and one with an alias is refused before any of
    /// it is built.
    #[test]
    fn an_index_with_aliases_is_refused() {
        let plain =
            "apiVersion: v1\nentries:\n  web:\n  - version: 1.2.3\n    urls: [web-1.2.3.tgz]\n";
        let index = parse_index(plain).unwrap();
        assert_eq!(index.entries["web"][0].version, "1.2.3");
        let aliased = format!(
            "apiVersion: v1\nentries:\n  web:\n  - &v {{version: 1.2.3, urls: [\"{}\"]}}\n  - *v\n  - *v\n",
            "u".repeat(100)
        );
        let err = parse_index(&aliased).unwrap_err().to_string();
        assert!(err.contains("alias"), "{err}");
    }

    use super::*;

    const AVAILABLE: &[&str] = &[
        "1.0.0",
        "1.2.0",
        "1.2.5",
        "1.10.0",
        "2.0.0-rc.1",
        "2.0.0",
        "2.1.0",
        "v3.0.0-beta.1",
    ];

    fn pick(constraint: Option<&str>) -> Result<String, VersionError> {
        select_version(AVAILABLE.iter().copied(), constraint)
    }

    #[test]
    fn no_constraint_takes_the_newest_stable_version() {
        assert_eq!(pick(None).unwrap(), "2.1.0");
    }

    #[test]
    fn an_exact_version_is_exact() {
        assert_eq!(pick(Some("1.2.0")).unwrap(), "1.2.0");
        assert_eq!(pick(Some("2.0.0-rc.1")).unwrap(), "2.0.0-rc.1");
        assert_eq!(
            pick(Some("1.3.0")),
            Err(VersionError::NoneSatisfies("1.3.0".into()))
        );
    }

    #[test]
    fn ranges_follow_helm_ordering() {
        assert_eq!(
            pick(Some("^1.2")).unwrap(),
            "1.10.0",
            "1.10 sorts above 1.2"
        );
        assert_eq!(pick(Some("~1.2.0")).unwrap(), "1.2.5");
        assert_eq!(pick(Some(">=1.0.0 <2.0.0")).unwrap(), "1.10.0");
        assert_eq!(pick(Some(">= 1.0, < 2.0")).unwrap(), "1.10.0");
        assert_eq!(pick(Some("1.2.x")).unwrap(), "1.2.5");
        assert_eq!(pick(Some("1.0 - 1.2.3")).unwrap(), "1.2.0");
        assert_eq!(pick(Some("~1.2.0 || ^2.0")).unwrap(), "2.1.0");
        assert_eq!(pick(Some(">=1.2, !=1.10.0, <2")).unwrap(), "1.2.5");
    }

    #[test]
    fn pre_releases_only_when_the_range_names_one() {
        assert_eq!(pick(Some(">=2.0.0-rc.0 <2.0.0")).unwrap(), "2.0.0-rc.1");
        assert_eq!(pick(Some(">=3.0.0-beta.0")).unwrap(), "v3.0.0-beta.1");
        assert_eq!(
            pick(Some("^3")),
            Err(VersionError::NoneSatisfies("^3".into()))
        );
    }

    #[test]
    fn a_bad_constraint_is_named() {
        let err = pick(Some(">=banana")).unwrap_err();
        assert_eq!(err.to_string(), "invalid version constraint \">=banana\"");
    }
}

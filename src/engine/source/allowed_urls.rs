//! Where a daemon's sources may come from: the URL prefixes the operator allows
//! (`convoy daemon --allow-source-url`, Argo CD's `sourceRepos` as a daemon flag). The same
//! matching decides which API servers a `Cluster`'s kubeconfig may name
//! (`--allow-cluster-server`, Argo CD's project `destinations`).
//!
//! A tenant names a source's URL, and whoever can push to a chart repository writes the chart
//! URLs of its index: without a list, either can have the daemon — inside the cluster, with
//! its network reach — send requests to any service (a metadata endpoint, another team's
//! internal API). With a list, every URL convoy takes from a Release, a source object or a
//! source's content must be under an allowed prefix before a request is made, and so must a
//! chart repository's redirects (static hosting redirects where its owner says); git follows
//! none. An OCI registry under a prefix is trusted with its token endpoint and the storage its
//! blobs redirect to: registries send them, tenants do not write them.
//!
//! A prefix is matched by scheme, host, port and path, after the URL is parsed as the fetchers
//! read it. What a fetcher could read otherwise is refused rather than interpreted: dot
//! segments (curl removes them, so `/team-a/../team-b` would pass as text and fetch team-b;
//! `..;` is `..` to servlet containers), percent-encoded dots, slashes and backslashes, a `%`
//! in the host, and in ssh and git URLs anything git parses its own way (see
//! `git_transport_trouble`; found by an attack).

use crate::engine::error::Invalid;

/// The allowed prefixes; none allows every URL (the CLI, a daemon without the flag).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowedUrls {
    prefixes: Vec<Place>,
    purpose: &'static Purpose,
}

impl Default for AllowedUrls {
    fn default() -> Self {
        Self {
            prefixes: Vec::new(),
            purpose: &SOURCES,
        }
    }
}

/// What a list restricts: it decides the schemes, the flag and the words of a refusal.
#[derive(Debug, PartialEq, Eq)]
struct Purpose {
    schemes: &'static [&'static str],
    flag: &'static str,
    /// Who restricts (only the daemon has `--allow-source-url`; the CLI checks Clusters too).
    who: &'static str,
    /// What the list holds (for an invalid prefix).
    prefix_noun: &'static str,
    /// What the list restricts (after "restricts").
    restricts: &'static str,
    /// What the list allows (after "a URL prefix ... allows").
    allows: &'static str,
    /// The way out of a refusal.
    remedy: &'static str,
}

const SOURCES: Purpose = Purpose {
    schemes: &SCHEMES,
    flag: "--allow-source-url",
    who: "convoy daemon",
    prefix_noun: "source URL prefix",
    restricts: "source URLs",
    allows: "sources from",
    remedy: "ask its operator to allow it, or use a source under an allowed prefix",
};

const CLUSTER_SERVERS: Purpose = Purpose {
    schemes: &["https", "http"],
    flag: "--allow-cluster-server",
    who: "convoy",
    prefix_noun: "Cluster server prefix",
    restricts: "Cluster API servers",
    allows: "Cluster API servers at",
    remedy: "ask its operator to allow it, or name a server under an allowed prefix",
};

/// A URL reduced to what decides where a request goes.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Place {
    scheme: String,
    host: String,
    port: Option<u16>,
    path: String,
}

/// The schemes a source URL may have (`file://` has its own flag, `--allow-file-urls`).
const SCHEMES: [&str; 5] = ["https", "http", "ssh", "git", "oci"];

impl AllowedUrls {
    /// Allow URLs under `prefixes`, each `scheme://host[:port]/path/` (ending in `/`: a
    /// directory, so `.../team-a/` does not allow `.../team-ab/`).
    pub fn new(prefixes: &[String]) -> Result<Self, Invalid> {
        Self::for_purpose(prefixes, &SOURCES)
    }

    /// Allow a `Cluster`'s kubeconfig to name API servers under `prefixes` (https or http,
    /// the same form as [`AllowedUrls::new`]'s).
    pub fn cluster_servers(prefixes: &[String]) -> Result<Self, Invalid> {
        Self::for_purpose(prefixes, &CLUSTER_SERVERS)
    }

    fn for_purpose(prefixes: &[String], purpose: &'static Purpose) -> Result<Self, Invalid> {
        let prefixes = prefixes
            .iter()
            .map(|p| {
                parse_prefix(p, purpose.schemes)
                    .map_err(|why| Invalid(format!("{} {p:?} {why}", purpose.prefix_noun)))
            })
            .collect::<Result<_, _>>()?;
        Ok(Self { prefixes, purpose })
    }

    /// Whether only some URLs are allowed.
    pub fn is_restricted(&self) -> bool {
        !self.prefixes.is_empty()
    }

    /// `Ok` if `url` (`what`, e.g. "Git URL", "chart URL") may be fetched; otherwise why not,
    /// naming the flag. The allowed prefixes are the operator's and are not listed to tenants.
    pub fn check(&self, what: &str, url: &str) -> Result<(), String> {
        if !self.is_restricted() {
            return Ok(());
        }
        self.place_of(what, url).map(|_| ())
    }

    /// The place `url` names, if a prefix allows it.
    fn place_of(&self, what: &str, url: &str) -> Result<Place, String> {
        let purpose = self.purpose;
        let refused = |why: &str| format!("{what} {url:?} {why}");
        let place = parse(url, purpose.schemes).map_err(|why| {
            refused(&format!(
                "{why}, which {} does not read when it restricts {} ({})",
                purpose.who, purpose.restricts, purpose.flag
            ))
        })?;
        if self.prefixes.iter().any(|p| p.contains(&place)) {
            Ok(place)
        } else {
            Err(refused(&format!(
                "is not under a URL prefix {} allows {} ({}); {}",
                purpose.who, purpose.allows, purpose.flag, purpose.remedy
            )))
        }
    }

    /// `Ok` if the API server at `server` (a kubeconfig's, as kube's client will connect to
    /// it) may be reached. Its requests go below it, so `https://host/k8s/c-1` is checked as
    /// the directory `.../c-1/`; and the `http` crate, which the client connects with, must
    /// read the same scheme, host and port as the URL parser that matched it.
    pub fn check_server(&self, what: &str, server: &http::Uri) -> Result<(), String> {
        if !self.is_restricted() {
            return Ok(());
        }
        let text = server.to_string();
        let base = if text.ends_with('/') {
            text
        } else {
            format!("{text}/")
        };
        let place = self.place_of(what, &base)?;
        let scheme = server.scheme_str().unwrap_or_default().to_ascii_lowercase();
        let host = server.host().unwrap_or_default().to_ascii_lowercase();
        let port = server.port_u16().or(default_port(&scheme));
        if (scheme.as_str(), host.as_str(), port)
            != (place.scheme.as_str(), place.host.as_str(), place.port)
        {
            return Err(format!(
                "{what} {base:?} is read as two different places by the URL parsers, which {} does not connect to when it restricts {} ({})",
                self.purpose.who, self.purpose.restricts, self.purpose.flag
            ));
        }
        Ok(())
    }
}

impl Place {
    fn contains(&self, other: &Place) -> bool {
        self.scheme == other.scheme
            && self.host == other.host
            && self.port == other.port
            && other.path.starts_with(&self.path)
    }
}

fn parse_prefix(prefix: &str, schemes: &[&str]) -> Result<Place, String> {
    let place = parse(prefix, schemes)?;
    if !prefix.ends_with('/') || !place.path.ends_with('/') {
        return Err(
            "must end in / (it names a directory, or a whole server as scheme://host/)".into(),
        );
    }
    // (A scp-like prefix, `git@host:org/`, names its login as every such URL does; the
    // login is not matched.)
    if let Some((_, rest)) = prefix.split_once("://") {
        let authority = rest.split('/').next().unwrap_or_default();
        if authority.contains('@') {
            return Err("must not name a user (a prefix names a place, not a login)".into());
        }
    }
    if prefix.contains(['?', '#']) {
        return Err("must not have a query or a fragment".into());
    }
    Ok(place)
}

/// The port a scheme's URL without one connects to.
fn default_port(scheme: &str) -> Option<u16> {
    match scheme {
        "https" | "oci" => Some(443),
        "http" => Some(80),
        "ssh" => Some(22),
        "git" => Some(9418),
        _ => None,
    }
}

/// What git reads differently from a URL parser in an ssh or git URL: git decodes `%` escapes
/// in the whole URL, takes a `@[host]` anywhere in it (the path included) as the host, and
/// ends the host only at `/` (so `?`, `#` and `;` are part of it to ssh). None of them is in
/// a repository path a Git host gives out.
fn git_transport_trouble(rest: &str) -> Option<&'static str> {
    if rest.contains(['%', '?', '#', ';', '[', ']']) {
        return Some("has a %, ?, #, ;, [ or ] (git and ssh read them otherwise than a URL does)");
    }
    let path = rest.split_once('/').map_or("", |(_, p)| p);
    if path.contains('@') {
        return Some("has an @ in its path (git reads what follows as the host)");
    }
    None
}

/// Scheme, host (lower case), port (the scheme's default when none is named) and path of
/// `url`; `user@host:path` (scp-like Git) reads as `ssh://user@host/path`.
fn parse(url: &str, schemes: &[&str]) -> Result<Place, String> {
    if url.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err("contains a space or a control character".into());
    }
    if url.contains('\\') {
        return Err("contains a backslash".into());
    }
    let owned;
    let url = if url.contains("://") {
        url
    } else {
        let (login, path) = url
            .split_once(':')
            .filter(|(login, _)| login.contains('@'))
            .ok_or("has no scheme")?;
        owned = format!("ssh://{login}/{}", path.trim_start_matches('/'));
        &owned
    };
    let (scheme, rest) = url.split_once("://").ok_or("has no scheme")?;
    let scheme = scheme.to_ascii_lowercase();
    if !schemes.contains(&scheme.as_str()) {
        return Err(format!(
            "has scheme {scheme:?}, not one of {}",
            schemes.join(", ")
        ));
    }
    if matches!(scheme.as_str(), "ssh" | "git")
        && let Some(why) = git_transport_trouble(rest)
    {
        return Err(why.into());
    }
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    // `https:///host/path` has no host to a URL parser's eye here, but the url crate (and
    // curl) skip the slashes and read `host` as one: the path checked would not be the one
    // requested.
    if authority.is_empty() {
        return Err("names no host after its scheme".into());
    }
    if authority.contains('%') {
        return Err("has a percent-encoded host".into());
    }
    let path = tail.split(['?', '#']).next().unwrap_or_default();
    let lower = path.to_ascii_lowercase();
    if ["%2e", "%2f", "%5c"].iter().any(|e| lower.contains(e)) {
        return Err("has a percent-encoded dot, slash or backslash in its path".into());
    }
    // `..;` is `..` to servlet containers (Artifactory, Nexus, Bitbucket Server).
    let dots = |segment: &str| {
        let name = segment.split(';').next().unwrap_or_default();
        name == "." || name == ".."
    };
    if path.split('/').any(dots) {
        return Err("has a . or .. segment in its path".into());
    }
    let parsed = reqwest::Url::parse(url).map_err(|e| format!("does not parse as a URL ({e})"))?;
    let host = parsed
        .host_str()
        .filter(|h| !h.is_empty())
        .ok_or("names no host")?
        .to_ascii_lowercase();
    let port = parsed.port().or(default_port(&scheme));
    Ok(Place {
        scheme,
        host,
        port,
        path: if path.is_empty() {
            "/".into()
        } else {
            path.into()
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allowed(prefixes: &[&str]) -> AllowedUrls {
        AllowedUrls::new(&prefixes.iter().map(|p| p.to_string()).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn no_prefix_allows_everything() {
        let any = AllowedUrls::default();
        assert!(!any.is_restricted());
        assert_eq!(any.check("Git URL", "http://169.254.169.254/"), Ok(()));
    }

    #[test]
    fn urls_under_a_prefix_are_allowed() {
        let list = allowed(&[
            "https://github.com/team-a/",
            "oci://ghcr.io/team-a/",
            "ssh://github.com/team-a/",
            "http://charts.internal:8080/",
        ]);
        for url in [
            "https://github.com/team-a/app.git",
            "https://GitHub.com:443/team-a/app",
            "https://user:token@github.com/team-a/app.git",
            "oci://ghcr.io/team-a/charts/app",
            "ssh://git@github.com/team-a/app.git",
            "git@github.com:team-a/app.git",
            "http://charts.internal:8080/index.yaml",
            "http://charts.internal:8080/?x/index.yaml",
            "ssh://git@github.com:22/team-a/app.git",
            "oci://ghcr.io:443/team-a/app",
        ] {
            assert_eq!(list.check("URL", url), Ok(()), "{url}");
        }
    }

    #[test]
    fn urls_elsewhere_or_read_two_ways_are_refused() {
        let list = allowed(&[
            "https://github.com/team-a/",
            "http://charts.internal:8080/",
            "ssh://github.com/team-a/",
            "git://github.com/team-a/",
            "ssh://github.com/",
        ]);
        for (url, why) in [
            ("https://github.com/team-ab/app.git", "is not under"),
            ("https://github.com/team-a", "is not under"),
            ("http://github.com/team-a/app", "is not under"),
            ("https://github.com:8443/team-a/app", "is not under"),
            ("https://github.com.evil.example/team-a/x", "is not under"),
            ("https://github.com@169.254.169.254/team-a/", "is not under"),
            ("http://charts.internal/index.yaml", "is not under"),
            (
                "https://github.com/team-a/../team-b/app",
                "has a . or .. segment",
            ),
            (
                "https://github.com/team-a/%2e%2e/team-b/app",
                "percent-encoded dot",
            ),
            (
                "https://github.com/team-a/..%2Fteam-b",
                "percent-encoded dot",
            ),
            ("https://github.com\\@evil.example/team-a/", "backslash"),
            (
                "https://github.com%40evil.example/team-a/",
                "percent-encoded host",
            ),
            ("file:///team-a/x", "has scheme \"file\""),
            ("ext::sh -c id", "space"),
            ("github.com/team-a/app", "has no scheme"),
            ("https:///github.com/team-a/x", "names no host"),
            (
                "https://github.com/team-a/..;/team-b/x",
                "has a . or .. segment",
            ),
            // git takes `@[host]:port` anywhere in an ssh URL as the host, decodes `%` first,
            // and ends the host only at `/` (found by an attack).
            (
                "ssh://github.com/team-a/@[127.0.0.1]:2222/x",
                "has a %, ?, #, ;, [ or ]",
            ),
            (
                "ssh://github.com/team-a/%40%5B127.0.0.1%5D:2222/x",
                "has a %, ?, #, ;, [ or ]",
            ),
            (
                "git@github.com:team-a/@[169.254.169.254]:x",
                "has a %, ?, #, ;, [ or ]",
            ),
            (
                "ssh://github.com/team-a/x@127.0.0.1/y",
                "has an @ in its path",
            ),
            (
                "ssh://github.com#@127.0.0.1:2224/team-a/x",
                "has a %, ?, #, ;, [ or ]",
            ),
            (
                "ssh://git@github.com/team-a/x?/../../team-b/y",
                "has a %, ?, #, ;, [ or ]",
            ),
            (
                "git://github.com/team-a/x;@127.0.0.1/",
                "has a %, ?, #, ;, [ or ]",
            ),
        ] {
            let err = list.check("Git URL", url).unwrap_err();
            assert!(err.contains(why), "{url}: {err}");
            assert!(err.contains("--allow-source-url"), "{url}: {err}");
        }
    }

    #[test]
    fn prefixes_that_would_allow_more_than_they_say_are_refused() {
        for (prefix, why) in [
            ("https://github.com/team-a", "must end in /"),
            ("https://github.com", "must end in /"),
            ("https://git@github.com/team-a/", "must not name a user"),
            ("https://github.com/team-a/?x/", "must not have a query"),
            ("https://github.com/team-a/../", ". or .."),
            ("ftp://mirror.example/", "not one of"),
        ] {
            let err = AllowedUrls::new(&[prefix.to_string()]).unwrap_err().0;
            assert!(err.contains(why), "{prefix}: {err}");
        }
        assert!(AllowedUrls::new(&["https://github.com/".to_string()]).is_ok());
    }

    /// The scp-like form the flag's help shows is a prefix too, matching both forms of URL
    /// (the login is not matched).
    #[test]
    fn a_scp_like_prefix_allows_what_its_ssh_form_does() {
        let list = allowed(&["git@github.com:team-a/"]);
        for url in [
            "git@github.com:team-a/app.git",
            "ssh://git@github.com/team-a/app.git",
        ] {
            assert_eq!(list.check("Git URL", url), Ok(()), "{url}");
        }
        assert!(
            list.check("Git URL", "git@github.com:team-b/app.git")
                .is_err()
        );
    }

    fn servers(prefixes: &[&str]) -> AllowedUrls {
        AllowedUrls::cluster_servers(&prefixes.iter().map(|p| p.to_string()).collect::<Vec<_>>())
            .unwrap()
    }

    fn uri(text: &str) -> http::Uri {
        text.parse().unwrap()
    }

    /// A Cluster's server is checked as the directory its requests go below, as the client
    /// reads it.
    #[test]
    fn cluster_servers_under_a_prefix_are_allowed() {
        let list = servers(&[
            "https://prod.example.com:6443/",
            "https://rancher.example.com/k8s/clusters/c-1/",
            "https://[fd00::1]:6443/",
        ]);
        for server in [
            "https://[FD00::1]:6443",
            "https://prod.example.com:6443",
            "https://PROD.example.com:6443/",
            "https://rancher.example.com/k8s/clusters/c-1",
            "https://rancher.example.com:443/k8s/clusters/c-1/",
        ] {
            assert_eq!(
                list.check_server("server", &uri(server)),
                Ok(()),
                "{server}"
            );
        }
        assert_eq!(
            AllowedUrls::default().check_server("server", &uri("http://169.254.169.254")),
            Ok(())
        );
    }

    #[test]
    fn cluster_servers_elsewhere_are_refused() {
        let list = servers(&[
            "https://prod.example.com:6443/",
            "https://rancher.example.com/k8s/clusters/c-1/",
        ]);
        for (server, why) in [
            ("https://prod.example.com", "is not under"),
            ("http://prod.example.com:6443", "is not under"),
            ("https://169.254.169.254", "is not under"),
            ("https://prod.example.com.evil.example:6443", "is not under"),
            (
                "https://rancher.example.com/k8s/clusters/c-10",
                "is not under",
            ),
            ("https://rancher.example.com/k8s/clusters", "is not under"),
            (
                "https://rancher.example.com/k8s/clusters/c-1/../c-2",
                "has a . or .. segment",
            ),
            (
                "https://rancher.example.com/k8s/clusters/c-1/%2e%2e/c-2",
                "percent-encoded dot",
            ),
        ] {
            let err = list.check_server("server", &uri(server)).unwrap_err();
            assert!(err.contains(why), "{server}: {err}");
            assert!(err.contains("(--allow-cluster-server)"), "{server}: {err}");
        }
        let err = list
            .check_server("server", &uri("https://10.0.0.1"))
            .unwrap_err();
        assert_eq!(
            err,
            "server \"https://10.0.0.1/\" is not under a URL prefix convoy allows Cluster API servers at (--allow-cluster-server); ask its operator to allow it, or name a server under an allowed prefix"
        );
    }

    #[test]
    fn cluster_server_prefixes_are_https_or_http_urls() {
        for (prefix, why) in [
            (
                "ssh://prod.example.com/",
                "has scheme \"ssh\", not one of https, http",
            ),
            ("https://prod.example.com", "must end in /"),
        ] {
            let err = AllowedUrls::cluster_servers(&[prefix.to_string()])
                .unwrap_err()
                .0;
            assert!(err.starts_with("Cluster server prefix"), "{prefix}: {err}");
            assert!(err.contains(why), "{prefix}: {err}");
        }
        // A source list keeps its schemes.
        assert!(AllowedUrls::new(&["oci://ghcr.io/team-a/".to_string()]).is_ok());
    }
}

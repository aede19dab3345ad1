//! The proxy of convoy's environment for API servers, read as kubectl (Go) reads it:
//! `HTTPS_PROXY` (`HTTP_PROXY` for an http server, upper case first), not for a server
//! `NO_PROXY` names; a kubeconfig's own `proxy-url` wins.
//!
//! kube reads the environment itself, but otherwise: `HTTPS_PROXY` for every server, and
//! `NO_PROXY` tested against the proxy's own address, so `HTTPS_PROXY=http://10.1.2.3:3128`
//! with `NO_PROXY=10.0.0.0/8` (a common corporate setting) sent every cluster direct, and a
//! kubeconfig's `proxy-url` at such an address too. So every cluster's `proxy-url` is taken
//! out of kube's sight, every cluster gets a stand-in while the environment names a proxy
//! ([`defer`]), and convoy puts back the kubeconfig's own proxy or the environment's choice
//! ([`choose`]), with hyper-util's matcher for `NO_PROXY`. (kube still parses `NO_PROXY`
//! while a proxy is set, and refuses values Go accepts, such as a trailing comma or `*` among
//! other entries: the binary tidies the variables first, [`tidy_no_proxy`]. hyper-util's
//! `.example.com` matches the domain too, Go's its subdomains only: [`for_server`] keeps
//! Go's.)

use kube::Config;
use kube::config::Kubeconfig;

/// Stands in for every cluster's proxy so kube does not read the environment (`.invalid` never
/// resolves, so it cannot be reached if it were ever used).
const STAND_IN_HOST: &str = "convoy-environment-proxy.invalid";

/// The environment names a proxy convoy cannot use. Names the variable, never its value
/// (it may hold a password).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{variable} {why}; kubectl's forms are http://[user:password@]host:port and socks5://host:port"
)]
pub struct EnvProxyError {
    variable: &'static str,
    why: &'static str,
}

/// The `proxy-url` of the kubeconfig's chosen cluster, which [`defer`] took out of kube's
/// sight for [`choose`] to put back.
#[derive(Debug, Clone, Default)]
pub struct Deferred {
    own: Option<String>,
}

/// Take every cluster's `proxy-url` out of `kubeconfig` (kept for the cluster `context`, or
/// the current context, names) and, when the environment names a proxy, give every cluster
/// the stand-in. kube tests `NO_PROXY` against any proxy it is given and drops one it names:
/// kubectl uses a kubeconfig's `proxy-url` whatever `NO_PROXY` says (`proxy-url:
/// http://10.1.2.3:3128` with `NO_PROXY=10.0.0.0/8` went direct), and applies `NO_PROXY`
/// only to the environment's proxy, per server, which [`choose`] does. kube parses `NO_PROXY`
/// whenever a proxy is in play, stand-in or not; without one it is left unread.
pub fn defer(kubeconfig: &mut Kubeconfig, context: Option<&str>) -> Deferred {
    let context = context.or(kubeconfig.current_context.as_deref());
    let chosen = kubeconfig
        .contexts
        .iter()
        .find(|c| Some(c.name.as_str()) == context)
        .and_then(|c| c.context.as_ref())
        .map(|c| c.cluster.clone());
    let own = kubeconfig
        .clusters
        .iter()
        .find(|c| Some(&c.name) == chosen.as_ref())
        .and_then(|c| c.cluster.as_ref()?.proxy_url.clone())
        .filter(|p| !p.is_empty());
    let named_in_env = ["HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"]
        .iter()
        .any(|v| std::env::var(v).is_ok_and(|value| !value.is_empty()));
    for named in &mut kubeconfig.clusters {
        if let Some(cluster) = named.cluster.as_mut() {
            cluster.proxy_url = named_in_env.then(|| format!("http://{STAND_IN_HOST}"));
        }
    }
    Deferred { own }
}

/// A proxy as Go reads it: one without a scheme is http.
pub fn with_scheme(value: &str) -> String {
    if value.contains("://") {
        value.to_string()
    } else {
        format!("http://{value}")
    }
}

/// The proxy `value` names, as git is given it: `scheme://[userinfo@]host:port` (no scheme
/// meaning http and no port the scheme's, as in Go: curl's default port is 1080 whatever the
/// scheme), or `None` when there is no host, the port is no port number, or a line break is
/// escaped anywhere in it. git quotes a proxy it cannot read, credentials and all, and refuses
/// a path Go passes over.
pub fn for_git(value: &str) -> Option<String> {
    let uri = with_scheme(value).parse::<http::Uri>().ok()?;
    let scheme = uri.scheme_str()?;
    let authority = uri.authority()?;
    let lower = authority.as_str().to_ascii_lowercase();
    if authority.host().is_empty() || lower.contains("%0a") || lower.contains("%0d") {
        return None;
    }
    // After the host (an IPv6 host is bracketed): nothing, or `:` and a port number.
    let host_port = lower.rsplit_once('@').map_or(lower.as_str(), |(_, h)| h);
    let after_host = match host_port.strip_prefix('[') {
        Some(rest) => rest.split_once(']')?.1,
        None => host_port.find(':').map_or("", |i| &host_port[i..]),
    };
    match after_host.strip_prefix(':') {
        Some(port) => {
            port.parse::<u16>().ok().filter(|p| *p != 0)?;
            Some(format!("{scheme}://{authority}"))
        }
        None if after_host.is_empty() => {
            let port = match scheme {
                "https" => 443,
                "socks5" | "socks5h" | "socks4" | "socks4a" => 1080,
                _ => 80,
            };
            Some(format!("{scheme}://{authority}:{port}"))
        }
        None => None,
    }
}

/// `NO_PROXY` as curl (the git a render tool runs) reads it to mean what Go reads in it: Go
/// never proxies loopback, curl does unless told; curl takes `*.example.com` and
/// `host:port` entries for names of no host (`.example.com` and `host` are what it reads; a
/// host named with a port is then not proxied on its other ports either, as before render
/// tools were given a proxy at all).
pub fn no_proxy_for_curl(go_no_proxy: &str) -> String {
    let mut entries: Vec<String> = go_no_proxy
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(|entry| {
            let host = match entry.strip_prefix('[') {
                Some(rest) => rest.split_once(']').map_or(rest, |(h, _)| h),
                // One colon: `host:port`; more: an IPv6 address without a port.
                None if entry.matches(':').count() == 1 => {
                    entry.split_once(':').map_or(entry, |(h, _)| h)
                }
                None => entry,
            };
            host.strip_prefix('*')
                .filter(|h| h.starts_with('.'))
                .unwrap_or(host)
                .to_string()
        })
        .collect();
    entries.extend(["localhost", "127.0.0.0/8", "::1"].map(String::from));
    entries.join(",")
}

/// The `NO_PROXY`/`no_proxy` values to start convoy again with, as [`tidy_no_proxy`] makes
/// them from `env`; empty when kube can read both as they are. Go reads a `NO_PROXY` of only
/// blanks as set, naming no host: emptied, it would let `no_proxy` be read in its place, so
/// `no_proxy` is emptied with it.
pub fn tidied_environment(env: impl Fn(&str) -> Option<String>) -> Vec<(&'static str, String)> {
    let mut tidied: Vec<(&'static str, String)> = ["NO_PROXY", "no_proxy"]
        .into_iter()
        .filter_map(|variable| Some((variable, tidy_no_proxy(&env(variable)?)?)))
        .collect();
    if tidied.contains(&("NO_PROXY", String::new())) {
        tidied.retain(|(variable, _)| *variable != "no_proxy");
        tidied.push(("no_proxy", String::new()));
    }
    tidied
}

/// `NO_PROXY` as kube can parse it, meaning what Go reads in it, when kube would refuse it:
/// empty entries (a trailing comma, `a,,b`) dropped and a list holding `*` made `*` (Go lets
/// `*` anywhere mean every host). kube parses the variable whenever a proxy is in play and
/// fails the whole command on an entry it cannot read, where kubectl goes on.
pub fn tidy_no_proxy(value: &str) -> Option<String> {
    let entries: Vec<&str> = value
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .collect();
    let refused = (!value.is_empty() && entries.len() < value.split(',').count())
        || (entries.contains(&"*") && entries.len() > 1);
    refused.then(|| {
        if entries.contains(&"*") {
            "*".to_string()
        } else {
            entries.join(",")
        }
    })
}

/// Put the kubeconfig's own proxy back in `config`, or else the environment's proxy for its
/// server (or none) in place of the stand-in.
pub fn choose(config: &mut Config, deferred: Deferred) -> Result<(), EnvProxyError> {
    if let Some(own) = deferred.own {
        let invalid = |why| EnvProxyError {
            variable: "the kubeconfig's proxy-url",
            why,
        };
        let uri = own
            .parse::<http::Uri>()
            .map_err(|_| invalid("does not parse as a URL"))?;
        // kube's own error for another scheme would quote the URL, credentials and all.
        if !matches!(uri.scheme_str(), Some("http" | "https" | "socks5")) {
            return Err(invalid(
                "names a proxy scheme convoy cannot reach API servers through (http, https and socks5 only)",
            ));
        }
        config.proxy_url = Some(uri);
    } else if config
        .proxy_url
        .as_ref()
        .is_some_and(|p| p.host() == Some(STAND_IN_HOST))
    {
        config.proxy_url = for_server(&config.cluster_url, |v| std::env::var(v).ok())?;
    }
    // An exec plugin given the cluster's information (`provideClusterInfo`) is told the proxy
    // used, not the stand-in kube saw.
    let proxy_url = config.proxy_url.as_ref().map(ToString::to_string);
    if let Some(cluster) = config
        .auth_info
        .exec
        .as_mut()
        .and_then(|exec| exec.cluster.as_mut())
    {
        cluster.proxy_url = proxy_url;
    }
    Ok(())
}

/// The proxy `env` (the process's environment) gives for `server`, as Go's
/// `ProxyFromEnvironment` picks it.
pub fn for_server(
    server: &http::Uri,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Option<http::Uri>, EnvProxyError> {
    let variables: [&'static str; 2] = if server.scheme_str() == Some("http") {
        ["HTTP_PROXY", "http_proxy"]
    } else {
        ["HTTPS_PROXY", "https_proxy"]
    };
    let Some((variable, value)) = variables.into_iter().find_map(|v| {
        env(v)
            .filter(|value| !value.is_empty())
            .map(|value| (v, value))
    }) else {
        return Ok(None);
    };
    let value = with_scheme(&value);
    let invalid = |why| EnvProxyError { variable, why };
    let uri = value
        .parse::<http::Uri>()
        .map_err(|_| invalid("does not parse as a URL"))?;
    if !matches!(uri.scheme_str(), Some("http" | "socks5")) {
        return Err(invalid(
            "names a proxy scheme convoy cannot reach API servers through (http and socks5 only)",
        ));
    }
    Ok((!exempt(server, &env)).then_some(uri))
}

/// The proxy `env` gives a source fetched from `url` (http or https) by a tool of its own
/// (git, whose curl has rules of its own), as Go picks it for the same URL: the variable and
/// its value as set, or `None` for a direct fetch. curl's `ALL_PROXY` comes after Go's names.
pub fn for_source(
    url: &http::Uri,
    env: impl Fn(&str) -> Option<String>,
) -> Option<(&'static str, String)> {
    let variables: [&str; 4] = if url.scheme_str() == Some("http") {
        ["HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"]
    } else {
        ["HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"]
    };
    let chosen = variables.into_iter().find_map(|v| {
        env(v)
            .filter(|value| !value.is_empty())
            .map(|value| (v, value))
    })?;
    (!exempt(url, &env)).then_some(chosen)
}

/// Go sends no request for `server` through a proxy: loopback, or `NO_PROXY` names it.
fn exempt(server: &http::Uri, env: &impl Fn(&str) -> Option<String>) -> bool {
    // Go never sends loopback through a proxy.
    let host = server.host().unwrap_or_default().trim_matches(['[', ']']);
    let loopback = host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    if loopback {
        return true;
    }
    // NO_PROXY as Go reads it (the first of NO_PROXY, no_proxy that is not empty), matched by
    // hyper-util (hosts, domains and their subdomains, IPs, CIDRs, `*`); a `host:port` entry
    // counts for that port only, and `*.example.com` is `.example.com`, which names the
    // subdomains only (Go's rule; hyper-util's would also match `example.com` itself).
    let port = server
        .port_u16()
        .unwrap_or(if server.scheme_str() == Some("http") {
            80
        } else {
            443
        });
    let no_proxy = ["NO_PROXY", "no_proxy"]
        .into_iter()
        .find_map(|v| env(v).filter(|value| !value.is_empty()))
        .unwrap_or_default();
    // `*` among the entries means every host, addresses too (hyper-util's `*` names only
    // host names).
    if no_proxy.split(',').any(|e| e.trim() == "*") {
        return true;
    }
    let no_proxy: Vec<String> = no_proxy
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .filter_map(|entry| {
            let entry = entry
                .strip_prefix("*.")
                .map_or(entry.to_string(), |d| format!(".{d}"));
            match entry.rsplit_once(':') {
                // An IPv6 address holds colons of its own; a port follows a host or `]`.
                // Go reads `*:6443` and `10.0.0.0/8:6443` as names no host has.
                Some((host, p))
                    if p.parse::<u16>().is_ok() && (!host.contains(':') || host.ends_with(']')) =>
                {
                    (p.parse::<u16>().ok() == Some(port) && host != "*" && !host.contains('/'))
                        .then(|| host.trim_matches(['[', ']']).to_string())
                }
                _ => Some(entry),
            }
        })
        .filter(|entry| {
            entry
                .strip_prefix('.')
                .is_none_or(|domain| !domain.eq_ignore_ascii_case(host))
        })
        .collect();
    // The matcher intercepts only where a proxy is set: any stands for the one chosen.
    let any = "http://proxy.invalid";
    let matcher = hyper_util::client::proxy::matcher::Matcher::builder()
        .http(any)
        .https(any)
        .no(no_proxy.join(","))
        .build();
    matcher.intercept(server).is_none()
}

#[cfg(test)]
mod tests {
    use super::{for_git, for_server, for_source, no_proxy_for_curl, tidy_no_proxy};

    #[test]
    fn a_proxy_is_given_to_git_as_scheme_user_and_host_only() {
        for (value, given) in [
            ("10.1.2.3:3128", Some("http://10.1.2.3:3128")),
            (
                "http://user:secret@proxy.example.com:3128/path?q",
                Some("http://user:secret@proxy.example.com:3128"),
            ),
            ("socks5h://s:1080", Some("socks5h://s:1080")),
            ("http://user:a%0Ab@proxy:3128", None),
            ("http://", None),
            ("http:// spaced", None),
            // Go's default port for the scheme, where curl would use 1080.
            ("http://proxy", Some("http://proxy:80")),
            ("https://u:p@proxy/", Some("https://u:p@proxy:443")),
            ("socks5://s", Some("socks5://s:1080")),
            ("http://[fd00::1]", Some("http://[fd00::1]:80")),
            ("http://[fd00::1]:3128", Some("http://[fd00::1]:3128")),
            // A line break anywhere, or a port that is none.
            ("http://user:secret@[fe80::1%0a]:3128", None),
            ("http://user:secret@proxy:31%0d28", None),
            ("http://proxy:abc", None),
            ("http://proxy:99999", None),
            ("http://proxy:", None),
            ("http://proxy:0", None),
        ] {
            assert_eq!(for_git(value).as_deref(), given, "{value}");
        }
    }

    /// Go's `NO_PROXY` as curl must read it to mean the same: loopback always, `*.d` as `.d`,
    /// a host's port dropped (IPv6 in brackets or not).
    #[test]
    fn no_proxy_is_translated_for_curl() {
        assert_eq!(
            no_proxy_for_curl("*.corp.example:443, .svc,10.0.0.0/8,[fd00::2]:80,fd00::3,*,"),
            ".corp.example,.svc,10.0.0.0/8,fd00::2,fd00::3,*,localhost,127.0.0.0/8,::1"
        );
        assert_eq!(no_proxy_for_curl(""), "localhost,127.0.0.0/8,::1");
    }

    /// The chosen cluster's proxy-url is kept for `choose`, and no cluster's is left for kube
    /// to test against NO_PROXY.
    #[test]
    fn defer_keeps_the_chosen_clusters_proxy_and_hides_every_one_from_kube() {
        let yaml = "apiVersion: v1\nkind: Config\ncurrent-context: a\n\
            clusters:\n\
            - {name: ca, cluster: {server: 'https://a.example.com', proxy-url: 'http://pa:3128'}}\n\
            - {name: cb, cluster: {server: 'https://b.example.com', proxy-url: 'socks5://pb:1080'}}\n\
            - {name: cc, cluster: {server: 'https://c.example.com'}}\n\
            contexts:\n\
            - {name: a, context: {cluster: ca, user: u}}\n\
            - {name: b, context: {cluster: cb, user: u}}\n\
            - {name: c, context: {cluster: cc, user: u}}\n";
        for (context, own) in [
            (None, Some("http://pa:3128")),
            (Some("b"), Some("socks5://pb:1080")),
            (Some("c"), None),
            (Some("missing"), None),
        ] {
            let mut kubeconfig = kube::config::Kubeconfig::from_yaml(yaml).unwrap();
            let deferred = super::defer(&mut kubeconfig, context);
            assert_eq!(deferred.own.as_deref(), own, "{context:?}");
            for named in &kubeconfig.clusters {
                let left = named.cluster.as_ref().unwrap().proxy_url.as_deref();
                assert!(
                    left.is_none_or(|p| p.contains(super::STAND_IN_HOST)),
                    "{}: {left:?}",
                    named.name
                );
            }
        }
    }

    /// A source's proxy by Go's rules, where git's curl has its own: loopback direct,
    /// `*.domain` and `host:port` entries read; `ALL_PROXY` last.
    #[test]
    fn a_sources_proxy_is_picked_by_gos_rules() {
        let pick = |url: &str, vars: &[(&str, &str)]| {
            let env = |name: &str| {
                vars.iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, v)| v.to_string())
            };
            for_source(&url.parse().unwrap(), env).map(|(_, value)| value)
        };
        let http = ("HTTP_PROXY", "http://p:3128");
        let git = "http://git.corp.example.com/repo.git";
        assert_eq!(pick(git, &[http]).as_deref(), Some("http://p:3128"));
        assert_eq!(pick("http://127.0.0.1:8080/r.git", &[http]), None);
        assert_eq!(pick(git, &[http, ("NO_PROXY", "*.corp.example.com")]), None);
        assert_eq!(
            pick(git, &[http, ("NO_PROXY", "git.corp.example.com:80")]),
            None
        );
        assert!(pick(git, &[http, ("NO_PROXY", "git.corp.example.com:443")]).is_some());
        // An https source reads HTTPS_PROXY, then curl's ALL_PROXY.
        let https = "https://git.corp.example.com/repo.git";
        assert_eq!(pick(https, &[http]), None);
        assert_eq!(
            pick(https, &[http, ("all_proxy", "socks5h://s:1080")]).as_deref(),
            Some("socks5h://s:1080")
        );
    }

    /// An exec plugin given the cluster's information is told the kubeconfig's proxy, not the
    /// stand-in or nothing that kube saw.
    #[tokio::test]
    async fn an_exec_plugin_is_told_the_proxy_used() {
        let yaml = "apiVersion: v1\nkind: Config\ncurrent-context: a\n\
            clusters:\n\
            - {name: ca, cluster: {server: 'https://a.example.com', proxy-url: 'http://pa:3128'}}\n\
            contexts:\n\
            - {name: a, context: {cluster: ca, user: u}}\n\
            users:\n\
            - {name: u, user: {exec: {apiVersion: client.authentication.k8s.io/v1, command: helper, provideClusterInfo: true}}}\n";
        let mut kubeconfig = kube::config::Kubeconfig::from_yaml(yaml).unwrap();
        let deferred = super::defer(&mut kubeconfig, None);
        let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .unwrap();
        super::choose(&mut config, deferred).unwrap();
        let used = config.proxy_url.as_ref().map(ToString::to_string);
        assert_eq!(used.as_deref(), Some("http://pa:3128/"));
        let told = config.auth_info.exec.and_then(|e| e.cluster?.proxy_url);
        assert_eq!(told, used);
    }

    #[test]
    fn a_blank_no_proxy_stays_set_and_hides_no_proxy_in_lower_case() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                vars.iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert_eq!(
            super::tidied_environment(env(&[("NO_PROXY", " "), ("no_proxy", "a.example.com")])),
            vec![("NO_PROXY", String::new()), ("no_proxy", String::new())]
        );
        assert_eq!(
            super::tidied_environment(env(&[("NO_PROXY", "a,"), ("no_proxy", "b")])),
            vec![("NO_PROXY", "a".to_string())]
        );
        assert!(super::tidied_environment(env(&[("NO_PROXY", "a,b")])).is_empty());
    }

    #[test]
    fn no_proxy_is_tidied_only_where_kube_would_refuse_what_go_reads() {
        for (value, tidy) in [
            ("localhost,10.0.0.0/8", None),
            ("localhost, 10.0.0.0/8", None),
            ("localhost,10.0.0.0/8,", Some("localhost,10.0.0.0/8")),
            (
                ",a.example.com,, .b.example.com ,",
                Some("a.example.com,.b.example.com"),
            ),
            ("a.example.com,*", Some("*")),
            ("*", None),
            (" , ", Some("")),
            (" ", Some("")),
            ("", None),
        ] {
            assert_eq!(tidy_no_proxy(value).as_deref(), tidy, "{value:?}");
        }
    }

    /// The proxy a server gets from `vars`, as text.
    fn proxy(server: &str, vars: &[(&str, &str)]) -> Option<String> {
        let server: http::Uri = server.parse().unwrap();
        let env = |name: &str| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string())
        };
        for_server(&server, env).unwrap().map(|u| u.to_string())
    }

    /// Go's rules, as kubectl applies them (the cases a helper's attack found kube and a first
    /// version of this module reading otherwise).
    #[test]
    fn the_environments_proxy_is_picked_as_kubectl_picks_it() {
        let api = "https://api.example.com:6443";
        let p = Some("http://10.1.2.3:3128/".to_string());
        let set = [("HTTPS_PROXY", "http://10.1.2.3:3128")];
        assert_eq!(proxy(api, &set), p);
        // NO_PROXY naming the proxy's network does not drop it for other servers.
        assert_eq!(proxy(api, &[set[0], ("NO_PROXY", "10.0.0.0/8")]), p);
        // Loopback never goes through a proxy.
        for local in [
            "https://127.0.0.1:6443",
            "https://localhost:6443",
            "https://[::1]:6443",
        ] {
            assert_eq!(proxy(local, &set), None, "{local}");
        }
        // An empty variable is passed over for the next one.
        assert_eq!(
            proxy(
                api,
                &[("HTTPS_PROXY", ""), ("https_proxy", "10.1.2.3:3128")]
            ),
            p
        );
        assert_eq!(
            proxy(
                api,
                &[set[0], ("NO_PROXY", ""), ("no_proxy", "api.example.com")]
            ),
            None
        );
        // NO_PROXY forms: host, host:port (that port only), *.domain, CIDR, *, empty entries.
        for (no_proxy, proxied) in [
            ("api.example.com", false),
            ("api.example.com:6443", false),
            ("api.example.com:443", true),
            ("*.example.com", false),
            (".example.com", false),
            ("example.com", false),
            ("other.example.com,,", true),
            ("*", false),
            ("*:6443", true),
        ] {
            let got = proxy(api, &[set[0], ("NO_PROXY", no_proxy)]);
            assert_eq!(got.is_some(), proxied, "NO_PROXY={no_proxy}");
        }
        // A CIDR with a port names nothing, as in Go; `*` names addresses too.
        assert!(
            proxy(
                "https://10.1.2.4:6443",
                &[set[0], ("NO_PROXY", "10.0.0.0/8:6443")]
            )
            .is_some()
        );
        assert_eq!(
            proxy(
                "https://10.1.2.4:6443",
                &[set[0], ("NO_PROXY", "a.example.com,*")]
            ),
            None
        );
        // `.domain` and `*.domain` name the subdomains, not the domain; `domain` names both.
        for (no_proxy, proxied) in [
            (".example.com", true),
            ("*.EXAMPLE.com", true),
            ("example.com", false),
            (".example.com:443", true),
        ] {
            let got = proxy("https://example.com", &[set[0], ("NO_PROXY", no_proxy)]);
            assert_eq!(got.is_some(), proxied, "NO_PROXY={no_proxy}");
        }
        // An http server takes HTTP_PROXY only; no scheme means http.
        assert_eq!(proxy("http://api.example.com", &set), None);
        assert_eq!(
            proxy("http://api.example.com", &[("HTTP_PROXY", "10.9.9.9:80")]),
            Some("http://10.9.9.9:80/".to_string())
        );
    }

    #[test]
    fn a_proxy_convoy_cannot_use_is_named_by_its_variable_only() {
        let server: http::Uri = "https://api.example.com".parse().unwrap();
        let err = for_server(&server, |v| {
            (v == "HTTPS_PROXY").then(|| "https://alice:secret@proxy:3128".to_string())
        })
        .unwrap_err()
        .to_string();
        assert!(err.starts_with("HTTPS_PROXY names a proxy scheme"), "{err}");
        assert!(!err.contains("secret"), "{err}");
    }
}

//! The proxy of convoy's environment for API servers, read as kubectl (Go) reads it:
//! `HTTPS_PROXY` (`HTTP_PROXY` for an http server, upper case first), not for a server
//! `NO_PROXY` names; a kubeconfig's own `proxy-url` wins.
//!
//! kube reads the environment itself, but otherwise: `HTTPS_PROXY` for every server, and
//! `NO_PROXY` tested against the proxy's own address, so `HTTPS_PROXY=http://10.1.2.3:3128`
//! with `NO_PROXY=10.0.0.0/8` (a common corporate setting) sent every cluster direct. So every
//! kubeconfig cluster without a `proxy-url` gets a stand-in before kube reads it ([`defer`])
//! and convoy puts the environment's choice in its place ([`choose`]), with hyper-util's
//! matcher for `NO_PROXY`. (kube still parses `NO_PROXY` while a proxy is set, and refuses
//! values Go accepts, such as a trailing comma: the error names the variable.)

use kube::Config;
use kube::config::Kubeconfig;

/// Stands in for "no proxy-url" so kube does not read the environment (`.invalid` never
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

/// Give every cluster of `kubeconfig` that names no `proxy-url` the stand-in, when the
/// environment names a proxy (kube parses `NO_PROXY` whenever a proxy is in play, stand-in
/// or not, and refuses what Go accepts: without a proxy it is left unread, as before).
pub fn defer(kubeconfig: &mut Kubeconfig) {
    let named_in_env = ["HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"]
        .iter()
        .any(|v| std::env::var(v).is_ok_and(|value| !value.is_empty()));
    if !named_in_env {
        return;
    }
    for named in &mut kubeconfig.clusters {
        if let Some(cluster) = named.cluster.as_mut()
            && cluster.proxy_url.as_deref().is_none_or(str::is_empty)
        {
            cluster.proxy_url = Some(format!("http://{STAND_IN_HOST}"));
        }
    }
}

/// Replace the stand-in in `config` with the environment's proxy for its server (or none).
pub fn choose(config: &mut Config) -> Result<(), EnvProxyError> {
    let stand_in = config
        .proxy_url
        .as_ref()
        .is_some_and(|p| p.host() == Some(STAND_IN_HOST));
    if stand_in {
        config.proxy_url = for_server(&config.cluster_url)?;
    }
    Ok(())
}

/// The environment's proxy for `server`, as Go's `ProxyFromEnvironment` picks it.
pub fn for_server(server: &http::Uri) -> Result<Option<http::Uri>, EnvProxyError> {
    let variables: [&'static str; 2] = if server.scheme_str() == Some("http") {
        ["HTTP_PROXY", "http_proxy"]
    } else {
        ["HTTPS_PROXY", "https_proxy"]
    };
    let Some((variable, value)) = variables.into_iter().find_map(|v| {
        std::env::var(v)
            .ok()
            .filter(|value| !value.is_empty())
            .map(|value| (v, value))
    }) else {
        return Ok(None);
    };
    // NO_PROXY, as curl and Go read it (hosts, domains, IPs, CIDRs, `*`).
    if hyper_util::client::proxy::matcher::Matcher::from_env()
        .intercept(server)
        .is_none()
    {
        return Ok(None);
    }
    // Go takes a proxy without a scheme as http.
    let value = if value.contains("://") {
        value
    } else {
        format!("http://{value}")
    };
    let invalid = |why| EnvProxyError { variable, why };
    let uri = value
        .parse::<http::Uri>()
        .map_err(|_| invalid("does not parse as a URL"))?;
    match uri.scheme_str() {
        Some("http" | "socks5") => Ok(Some(uri)),
        _ => Err(invalid(
            "names a proxy scheme convoy cannot reach API servers through (http and socks5 only)",
        )),
    }
}

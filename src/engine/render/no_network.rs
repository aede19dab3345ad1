//! A fence around the render tools (kustomize, helm): where a render must not reach the
//! network, the tool runs behind an HTTP proxy that does not exist. Go's HTTP client (both
//! tools are Go) sends every request but those to loopback addresses through the proxy named
//! in the environment, and each such request fails. convoy checks what a chart or a
//! kustomization names before the tool runs; this holds when a check and the tool read the
//! same text differently (an attack found eight such ways for kustomize). Where a render may
//! reach the network, the tool gets convoy's proxy instead ([`network_env`]).

/// The variables Go's `http.ProxyFromEnvironment` reads.
pub const PROXY_VARS: [&str; 4] = ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"];

/// A proxy no connection can be made to (port 0).
pub const NOWHERE: &str = "http://127.0.0.1:0";

use crate::engine::env_proxy;

/// What a render tool allowed on the network gets of convoy's environment: the proxy Go picks
/// (upper case first, an empty value unset), under both names, because the git a tool runs
/// (kustomize, for a remote base) reads them as curl does: `http_proxy` in lower case only,
/// `no_proxy` before `NO_PROXY`. So git goes where the tool's own requests go, as convoy's own
/// git fetches do. Each proxy is given as convoy gives git one (`scheme://[userinfo@]host`,
/// [`env_proxy::for_git`]): curl quotes a proxy it cannot read, credentials and all, into an
/// error that would reach the Release's status. curl's `ALL_PROXY` and the certificate
/// authorities convoy trusts pass as they are. `env` reads a variable; `Err` names the
/// variable that is no proxy URL, never its value.
pub fn network_env(
    env: impl Fn(&str) -> Option<String>,
) -> Result<Vec<(&'static str, String)>, String> {
    let mut vars = Vec::new();
    for (upper, lower, proxy) in [
        ("HTTP_PROXY", "http_proxy", true),
        ("HTTPS_PROXY", "https_proxy", true),
        ("ALL_PROXY", "all_proxy", true),
        ("NO_PROXY", "no_proxy", false),
    ] {
        let chosen = [upper, lower]
            .into_iter()
            .find_map(|name| Some((name, env(name).filter(|value| !value.is_empty())?)));
        let Some((name, value)) = chosen else {
            continue;
        };
        let value = if proxy {
            env_proxy::for_git(&value).ok_or_else(|| {
                format!("{name} does not parse as a proxy URL (scheme://[user:password@]host:port)")
            })?
        } else {
            value
        };
        vars.push((upper, value.clone()));
        vars.push((lower, value));
    }
    for name in ["SSL_CERT_FILE", "SSL_CERT_DIR"] {
        if let Some(value) = env(name) {
            vars.push((name, value));
        }
    }
    Ok(vars)
}

/// Give a render tool the network (`open`: through convoy's proxy, [`network_env`]) or fence
/// it off ([`NOWHERE`]). A proxy that cannot be given fences the tool too: its caller refuses
/// the render with [`network_env`]'s error before the tool runs.
pub fn give_network(cmd: &mut std::process::Command, open: bool) {
    match open.then(|| network_env(|v| std::env::var(v).ok())) {
        Some(Ok(vars)) => {
            cmd.envs(vars);
        }
        _ => {
            for name in PROXY_VARS {
                cmd.env(name, NOWHERE);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::network_env;

    fn env_of(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    }

    /// Go's choice under both names: upper case wins, an empty value counts as unset, and a
    /// proxy is given as scheme, user and host.
    #[test]
    fn the_tool_and_its_git_get_the_proxy_go_picks() {
        let got = network_env(env_of(&[
            ("HTTP_PROXY", "http://upper:1/path"),
            ("http_proxy", "http://lower:1"),
            ("HTTPS_PROXY", ""),
            ("https_proxy", "lower:2"),
            ("no_proxy", ".example.com"),
            ("SSL_CERT_FILE", "/etc/ca.pem"),
            ("HOME", "/root"),
        ]));
        let pairs = |list: &[(&'static str, &str)]| -> Vec<(&'static str, String)> {
            list.iter().map(|(k, v)| (*k, v.to_string())).collect()
        };
        assert_eq!(
            got,
            Ok(pairs(&[
                ("HTTP_PROXY", "http://upper:1"),
                ("http_proxy", "http://upper:1"),
                ("HTTPS_PROXY", "http://lower:2"),
                ("https_proxy", "http://lower:2"),
                ("NO_PROXY", ".example.com"),
                ("no_proxy", ".example.com"),
                ("SSL_CERT_FILE", "/etc/ca.pem"),
            ]))
        );
        assert_eq!(network_env(env_of(&[("HTTP_PROXY", "")])), Ok(Vec::new()));
    }

    /// A proxy curl cannot read is refused by its name: curl would quote it, password and all.
    #[test]
    fn a_proxy_that_is_no_url_is_refused_by_name_only() {
        let err = network_env(env_of(&[("https_proxy", "http://u:secret%0A@p:1")])).unwrap_err();
        assert_eq!(
            err,
            "https_proxy does not parse as a proxy URL (scheme://[user:password@]host:port)"
        );
    }
}

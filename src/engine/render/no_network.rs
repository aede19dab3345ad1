//! A fence around the render tools (kustomize, helm): where a render must not reach the
//! network, the tool runs behind an HTTP proxy that does not exist. Go's HTTP client (both
//! tools are Go) sends every request but those to loopback addresses through the proxy named
//! in the environment, and each such request fails. convoy checks what a chart or a
//! kustomization names before the tool runs; this holds when a check and the tool read the
//! same text differently (an attack found eight such ways for kustomize). Where a render may
//! reach the network, the tool gets convoy's proxy instead ([`network_env`]).

use crate::engine::env_proxy;

/// The variables Go's `http.ProxyFromEnvironment` reads.
pub const PROXY_VARS: [&str; 4] = ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"];

/// A proxy no connection can be made to (port 0).
pub const NOWHERE: &str = "http://127.0.0.1:0";

/// What a render tool allowed on the network gets of convoy's environment: the proxy Go picks
/// (upper case first, an empty value unset), under both names. The tools are Go; a git one of
/// them runs (`runs_git`: kustomize, for a remote base) reads them as curl does: `http_proxy`
/// in lower case only, `no_proxy` before `NO_PROXY` and with rules of its own, loopback not
/// exempt. For it, so that git goes where the tool's own requests go (as convoy's own git
/// fetches do), each proxy is given as convoy gives git one ([`env_proxy::for_git`]: curl
/// quotes a proxy it cannot read, credentials and all, into an error that would reach the
/// Release's status), curl's `ALL_PROXY` too, and `no_proxy` is Go's `NO_PROXY` as curl reads
/// it ([`env_proxy::no_proxy_for_curl`]: without it, git sent a remote base at 127.0.0.1
/// through the operator's proxy, to the proxy's own loopback). The certificate authorities
/// convoy trusts pass as they are. `env` reads a variable; `Err` names the variable that is
/// no proxy URL, never its value.
pub fn network_env(
    env: impl Fn(&str) -> Option<String>,
    runs_git: bool,
) -> Result<Vec<(&'static str, String)>, String> {
    let chosen = |upper: &'static str, lower: &'static str| {
        [upper, lower]
            .into_iter()
            .find_map(|name| Some((name, env(name).filter(|value| !value.is_empty())?)))
    };
    let mut vars = Vec::new();
    let mut proxies = vec![("HTTP_PROXY", "http_proxy"), ("HTTPS_PROXY", "https_proxy")];
    if runs_git {
        proxies.push(("ALL_PROXY", "all_proxy"));
    }
    for (upper, lower) in proxies {
        let Some((name, value)) = chosen(upper, lower) else {
            continue;
        };
        let value = if runs_git {
            env_proxy::for_git(&value).ok_or_else(|| {
                format!("{name} does not parse as a proxy URL (scheme://[user:password@]host:port)")
            })?
        } else {
            value
        };
        vars.push((upper, value.clone()));
        vars.push((lower, value));
    }
    if !vars.is_empty() {
        let no_proxy = chosen("NO_PROXY", "no_proxy").map(|(_, value)| value);
        if runs_git {
            // Go reads `NO_PROXY` first and curl `no_proxy`: each gets its own. Go never
            // proxies localhost, so naming it is Go's "none" and keeps Go off curl's value.
            let curl = env_proxy::no_proxy_for_curl(no_proxy.as_deref().unwrap_or_default());
            vars.push(("NO_PROXY", no_proxy.unwrap_or_else(|| "localhost".into())));
            vars.push(("no_proxy", curl));
        } else if let Some(value) = no_proxy {
            vars.push(("NO_PROXY", value.clone()));
            vars.push(("no_proxy", value));
        }
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
pub fn give_network(cmd: &mut std::process::Command, open: bool, runs_git: bool) {
    match open.then(|| network_env(|v| std::env::var(v).ok(), runs_git)) {
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

    fn pairs(list: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
        list.iter().map(|(k, v)| (*k, v.to_string())).collect()
    }

    /// Go's choice under both names: upper case wins, an empty value counts as unset; for a
    /// tool that runs git, a proxy as scheme, user and host, and `no_proxy` as curl reads it.
    #[test]
    fn the_tool_and_its_git_get_the_proxy_go_picks() {
        let env = env_of(&[
            ("HTTP_PROXY", "http://upper:1/path"),
            ("http_proxy", "http://lower:1"),
            ("HTTPS_PROXY", ""),
            ("https_proxy", "lower:2"),
            ("ALL_PROXY", "socks5://s"),
            ("no_proxy", "*.example.com"),
            ("SSL_CERT_FILE", "/etc/ca.pem"),
            ("HOME", "/root"),
        ]);
        assert_eq!(
            network_env(&env, true),
            Ok(pairs(&[
                ("HTTP_PROXY", "http://upper:1"),
                ("http_proxy", "http://upper:1"),
                ("HTTPS_PROXY", "http://lower:2"),
                ("https_proxy", "http://lower:2"),
                ("ALL_PROXY", "socks5://s:1080"),
                ("all_proxy", "socks5://s:1080"),
                ("NO_PROXY", "*.example.com"),
                ("no_proxy", ".example.com,localhost,127.0.0.0/8,::1"),
                ("SSL_CERT_FILE", "/etc/ca.pem"),
            ]))
        );
        // helm runs no git: Go's values as they are, no ALL_PROXY (Go does not read it).
        assert_eq!(
            network_env(&env, false),
            Ok(pairs(&[
                ("HTTP_PROXY", "http://upper:1/path"),
                ("http_proxy", "http://upper:1/path"),
                ("HTTPS_PROXY", "lower:2"),
                ("https_proxy", "lower:2"),
                ("NO_PROXY", "*.example.com"),
                ("no_proxy", "*.example.com"),
                ("SSL_CERT_FILE", "/etc/ca.pem"),
            ]))
        );
        // No NO_PROXY: Go's "none" (it never proxies localhost) keeps Go off curl's value.
        assert_eq!(
            network_env(env_of(&[("HTTPS_PROXY", "http://p:3128")]), true),
            Ok(pairs(&[
                ("HTTPS_PROXY", "http://p:3128"),
                ("https_proxy", "http://p:3128"),
                ("NO_PROXY", "localhost"),
                ("no_proxy", "localhost,127.0.0.0/8,::1"),
            ]))
        );
        assert_eq!(
            network_env(env_of(&[("HTTP_PROXY", "")]), true),
            Ok(Vec::new())
        );
    }

    /// A proxy curl cannot read is refused by its name: curl would quote it, password and all.
    /// helm (no git) is given it as Go reads it.
    #[test]
    fn a_proxy_that_is_no_url_is_refused_by_name_only() {
        let env = env_of(&[("https_proxy", "http://u:secret%0A@p:1")]);
        assert_eq!(
            network_env(&env, true),
            Err(
                "https_proxy does not parse as a proxy URL (scheme://[user:password@]host:port)"
                    .into()
            )
        );
        assert!(network_env(&env, false).is_ok());
    }
}

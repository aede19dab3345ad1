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

/// What a render tool allowed on the network gets of convoy's environment: the proxy Go picks
/// (upper case first, an empty value unset), under both names, because the git a tool runs
/// (kustomize, for a remote base) reads them as curl does: `http_proxy` in lower case only,
/// `no_proxy` before `NO_PROXY`. So git goes where the tool's own requests go, as convoy's own
/// git fetches do; curl's `ALL_PROXY` and the certificate authorities convoy trusts pass as
/// they are. `env` reads a variable.
pub fn network_env(env: impl Fn(&str) -> Option<String>) -> Vec<(&'static str, String)> {
    let mut vars = Vec::new();
    for (upper, lower) in [
        ("HTTP_PROXY", "http_proxy"),
        ("HTTPS_PROXY", "https_proxy"),
        ("NO_PROXY", "no_proxy"),
    ] {
        let chosen = [upper, lower]
            .into_iter()
            .find_map(|name| env(name).filter(|value| !value.is_empty()));
        if let Some(value) = chosen {
            vars.push((upper, value.clone()));
            vars.push((lower, value));
        }
    }
    for name in ["ALL_PROXY", "all_proxy", "SSL_CERT_FILE", "SSL_CERT_DIR"] {
        if let Some(value) = env(name) {
            vars.push((name, value));
        }
    }
    vars
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

    /// Go's choice under both names: upper case wins, an empty value counts as unset.
    #[test]
    fn the_tool_and_its_git_get_the_proxy_go_picks() {
        let got = network_env(env_of(&[
            ("HTTP_PROXY", "http://upper:1"),
            ("http_proxy", "http://lower:1"),
            ("HTTPS_PROXY", ""),
            ("https_proxy", "http://lower:2"),
            ("no_proxy", ".example.com"),
            ("SSL_CERT_FILE", "/etc/ca.pem"),
            ("HOME", "/root"),
        ]));
        assert_eq!(
            got,
            [
                ("HTTP_PROXY", "http://upper:1".to_string()),
                ("http_proxy", "http://upper:1".to_string()),
                ("HTTPS_PROXY", "http://lower:2".to_string()),
                ("https_proxy", "http://lower:2".to_string()),
                ("NO_PROXY", ".example.com".to_string()),
                ("no_proxy", ".example.com".to_string()),
                ("SSL_CERT_FILE", "/etc/ca.pem".to_string()),
            ]
        );
        assert!(network_env(env_of(&[("HTTP_PROXY", "")])).is_empty());
    }
}

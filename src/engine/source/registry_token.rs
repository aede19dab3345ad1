//! How an OCI registry's pulls are authorized: the Docker token flow, asked for here rather
//! than by oci-client. oci-client reads the token endpoint's answer whole and puts an error
//! answer's body into its message — and that endpoint is an address the registry, which the
//! tenant names, chooses: any service the daemon can reach, its answer in the source's status.

use oci_client::secrets::RegistryAuth;

use super::SourceError;

/// What the registry's requests carry (no `Debug`: it holds the credentials).
#[derive(Clone)]
pub enum Authorization {
    Anonymous,
    Basic(String, String),
    Bearer(String),
}

impl Authorization {
    pub fn apply(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match self {
            Authorization::Anonymous => request,
            Authorization::Basic(user, password) => request.basic_auth(user, Some(password)),
            Authorization::Bearer(token) => request.bearer_auth(token),
        }
    }
}

/// A token answer is a few KiB (a JWT); anything near this is not one.
const MOST_TOKEN_BYTES: usize = 1 << 20;

/// Where a registry's Bearer challenge sends the client for a token.
#[derive(Debug, PartialEq, Eq)]
struct Challenge {
    realm: String,
    service: Option<String>,
}

/// The Bearer challenge of a `WWW-Authenticate` header, if it has one with a realm.
fn bearer_challenge(header: &str) -> Option<Challenge> {
    http_auth::ChallengeParser::new(header)
        .filter_map(Result::ok)
        .filter(|c| c.scheme.eq_ignore_ascii_case("Bearer"))
        .find_map(|c| {
            let param = |name: &str| {
                c.params
                    .iter()
                    .find(|(k, _)| k.eq_ignore_ascii_case(name))
                    .map(|(_, v)| v.to_unescaped())
            };
            Some(Challenge {
                realm: param("realm")?,
                service: param("service"),
            })
        })
}

/// The token endpoint a challenge names, and how errors show it (no query: the realm's own
/// query is the registry's to fill). Basic credentials go there, so it must be https — or,
/// for a source marked insecure, plain HTTP on the registry's own host and port (`insecure_host`, `host:port`) —
/// and carry no user or password of its own.
fn token_endpoint(
    realm: &str,
    insecure_host: Option<&str>,
) -> Result<(reqwest::Url, String), String> {
    let url = reqwest::Url::parse(realm).map_err(|e| {
        format!("the registry names token endpoint {realm:?}, which is not an address: {e}")
    })?;
    let shown = format!(
        "{}://{}{}{}",
        url.scheme(),
        url.host_str().unwrap_or_default(),
        url.port().map(|p| format!(":{p}")).unwrap_or_default(),
        url.path()
    );
    if !url.username().is_empty() || url.password().is_some() {
        return Err(format!(
            "the registry names token endpoint {shown} with a user or password of its own"
        ));
    }
    match url.scheme() {
        "https" => Ok((url, shown)),
        "http" if insecure_host.is_some() && host_and_port(&url).as_deref() == insecure_host => {
            Ok((url, shown))
        }
        _ => Err(format!(
            "the registry names token endpoint {shown}, which is not https (plain HTTP is \
             allowed only on the registry's own host and port, for a source marked insecure)"
        )),
    }
}

/// `host:port` of an address (the scheme's port when it names none).
fn host_and_port(url: &reqwest::Url) -> Option<String> {
    Some(format!(
        "{}:{}",
        url.host_str()?,
        url.port_or_known_default()?
    ))
}

/// The authorization for pulling `repository` from the registry at `base`
/// (`scheme://host`), given the Release's credentials. A Bearer challenge is answered at its
/// realm — over https unless the source is insecure, since Basic credentials go there — and
/// the answer is read no further than [`MOST_TOKEN_BYTES`]; an error answer's body is never
/// reported, only its status.
pub async fn authorize(
    http: &reqwest::Client,
    base: &str,
    repository: &str,
    credentials: &RegistryAuth,
    insecure: bool,
    url: &str,
) -> Result<Authorization, SourceError> {
    let failed = |why: String| SourceError::not_ready(url, why);
    let basic = match credentials {
        RegistryAuth::Bearer(token) => return Ok(Authorization::Bearer(token.clone())),
        RegistryAuth::Basic(user, password) => Some((user.clone(), password.clone())),
        RegistryAuth::Anonymous => None,
    };
    let probe = http
        .get(format!("{base}/v2/"))
        .send()
        .await
        .map_err(|e| failed(crate::engine::error::chain(&e)))?;
    let challenge = probe
        .headers()
        .get_all(reqwest::header::WWW_AUTHENTICATE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(bearer_challenge);
    let Some(challenge) = challenge else {
        // No token flow: the credentials given are sent as they are.
        return Ok(match basic {
            Some((user, password)) => Authorization::Basic(user, password),
            None => Authorization::Anonymous,
        });
    };
    let registry_host = reqwest::Url::parse(base)
        .ok()
        .and_then(|u| host_and_port(&u));
    let insecure_host = registry_host.as_deref().filter(|_| insecure);
    let (realm, shown) = token_endpoint(&challenge.realm, insecure_host).map_err(failed)?;
    let scope = format!("repository:{repository}:pull");
    let mut query = vec![("scope", scope.as_str())];
    if let Some(service) = &challenge.service {
        query.push(("service", service));
    }
    let mut request = http.get(realm).query(&query);
    if let Some((user, password)) = &basic {
        request = request.basic_auth(user, Some(password));
    }
    let answer = request.send().await.map_err(|e| {
        let e = e.without_url();
        failed(format!(
            "token endpoint {shown}: {}",
            crate::engine::error::chain(&e)
        ))
    })?;
    let status = answer.status();
    if !status.is_success() {
        return Err(failed(format!(
            "the token endpoint {shown} answered HTTP {}",
            status.as_u16()
        )));
    }
    let body = super::helm_repo::read_at_most(answer, url, MOST_TOKEN_BYTES).await?;
    #[derive(serde::Deserialize)]
    struct Answer {
        token: Option<String>,
        access_token: Option<String>,
    }
    match serde_json::from_slice::<Answer>(&body) {
        Ok(Answer {
            token: Some(token), ..
        })
        | Ok(Answer {
            access_token: Some(token),
            ..
        }) if !token.is_empty() => Ok(Authorization::Bearer(token)),
        _ => Err(failed(format!(
            "the token endpoint {shown} answered with no token (JSON with \"token\" or \
             \"access_token\" was expected)"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bearer_challenge_is_found_among_others() {
        assert_eq!(
            bearer_challenge(
                r#"Basic realm="x", Bearer realm="https://auth.example/token",service="registry.example",scope="repository:a:pull""#
            ),
            Some(Challenge {
                realm: "https://auth.example/token".into(),
                service: Some("registry.example".into()),
            })
        );
        assert_eq!(bearer_challenge(r#"Basic realm="registry""#), None);
        assert_eq!(bearer_challenge(r#"Bearer service="no realm""#), None);
        assert_eq!(bearer_challenge("not a challenge ,,="), None);
    }

    #[test]
    fn credentials_go_to_a_token_endpoint_over_https_unless_insecure() {
        let shown = |realm, insecure| token_endpoint(realm, insecure).map(|(_, shown)| shown);
        assert_eq!(
            shown("https://auth.example:8443/token?account=x", None),
            Ok("https://auth.example:8443/token".to_string())
        );
        assert_eq!(
            shown("http://registry.example/token", Some("registry.example:80")),
            Ok("http://registry.example/token".to_string())
        );
        for (realm, insecure, why) in [
            ("http://auth.example/token", None, "which is not https"),
            (
                "http://metadata.internal/token",
                Some("registry.example"),
                "which is not https",
            ),
            (
                "file:///etc/passwd",
                Some("registry.example"),
                "which is not https",
            ),
            ("/token", None, "which is not an address"),
            (
                "https://user:pass@auth.example/token",
                None,
                "with a user or password of its own",
            ),
        ] {
            let refused = shown(realm, insecure).unwrap_err();
            assert!(refused.contains(why), "{realm}: {refused}");
        }
    }
}

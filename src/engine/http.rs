//! The HTTP client for Helm repositories (and the TLS setup OCI shares): rustls with the ring
//! provider, as kube uses, so one crypto stack serves the whole binary.

use std::sync::{Arc, Mutex, OnceLock};

use crate::engine::source::allowed_urls::AllowedUrls;

/// Make ring the process's rustls provider (idempotent). Clients that build their own TLS
/// configuration (reqwest, oci-client) pick it up from there.
pub fn ensure_crypto_provider() {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        // An error means a provider is already installed, which is what we want.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// The TLS backend could not be set up, so no HTTP client exists (shared by every caller,
/// hence the `Arc`).
#[derive(Debug, Clone, thiserror::Error)]
#[error("cannot build an HTTP client")]
pub struct ClientError(#[source] Arc<reqwest::Error>);

fn builder() -> reqwest::ClientBuilder {
    ensure_crypto_provider();
    reqwest::Client::builder()
        .connect_timeout(std::time::Duration::from_secs(15))
        .timeout(std::time::Duration::from_secs(300))
        .user_agent(concat!("convoy/", env!("CARGO_PKG_VERSION")))
        // The operator's proxy, chosen for each request (redirects too) by Go's rules, as
        // kubectl, helm and Flux choose it and as git is given it. reqwest's own reading of
        // the environment differs: loopback proxied, `NO_PROXY` entries with a port never
        // matching, `.domain` matching the domain itself.
        .proxy(reqwest::Proxy::custom(|url| {
            let uri = url.as_str().parse::<http::Uri>().ok()?;
            crate::engine::env_proxy::for_source(&uri, |v| std::env::var(v).ok())
                .map(|(_, value)| value)
        }))
}

/// A shared HTTP client with sane timeouts.
pub fn client() -> Result<reqwest::Client, ClientError> {
    static CLIENT: OnceLock<Result<reqwest::Client, ClientError>> = OnceLock::new();
    CLIENT
        .get_or_init(|| builder().build().map_err(|e| ClientError(Arc::new(e))))
        .clone()
}

/// The most redirects one request follows (reqwest's own default).
const MOST_REDIRECTS: usize = 10;

/// A client that follows a redirect only to a URL `allowed` allows (the shared one when it
/// allows any). A chart repository on static hosting redirects where its owner says (a
/// Pages site to a custom domain that resolves anywhere), so a redirect is checked as the
/// URL it leads to would be. One list is held (a process has one, its daemon's).
pub fn client_within(allowed: &AllowedUrls) -> Result<reqwest::Client, ClientError> {
    if !allowed.is_restricted() {
        return client();
    }
    static WITHIN: Mutex<Option<(AllowedUrls, reqwest::Client)>> = Mutex::new(None);
    let mut held = crate::engine::locks::lock(&WITHIN);
    if let Some((list, client)) = held.as_ref()
        && list == allowed
    {
        return Ok(client.clone());
    }
    let list = allowed.clone();
    let client = builder()
        .redirect(reqwest::redirect::Policy::custom(move |attempt| {
            if attempt.previous().len() >= MOST_REDIRECTS {
                return attempt.error(format!("more than {MOST_REDIRECTS} redirects"));
            }
            match list.check("the redirect to", attempt.url().as_str()) {
                Ok(()) => attempt.follow(),
                Err(why) => attempt.error(why),
            }
        }))
        .build()
        .map_err(|e| ClientError(Arc::new(e)))?;
    *held = Some((allowed.clone(), client.clone()));
    Ok(client)
}

//! The HTTP client for Helm repositories (and the TLS setup OCI shares): rustls with the ring
//! provider, as kube uses, so one crypto stack serves the whole binary.

use std::sync::{Arc, OnceLock};

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

/// A shared HTTP client with sane timeouts.
pub fn client() -> Result<reqwest::Client, ClientError> {
    static CLIENT: OnceLock<Result<reqwest::Client, ClientError>> = OnceLock::new();
    CLIENT
        .get_or_init(|| {
            ensure_crypto_provider();
            reqwest::Client::builder()
                .connect_timeout(std::time::Duration::from_secs(15))
                .timeout(std::time::Duration::from_secs(300))
                .user_agent(concat!("convoy/", env!("CARGO_PKG_VERSION")))
                .build()
                .map_err(|e| ClientError(Arc::new(e)))
        })
        .clone()
}

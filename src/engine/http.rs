//! The HTTP client for Helm repositories (and the TLS setup OCI shares): rustls with the ring
//! provider, as kube uses, so one crypto stack serves the whole binary.

use std::sync::OnceLock;

/// Make ring the process's rustls provider (idempotent). Clients that build their own TLS
/// configuration (reqwest, oci-client) pick it up from there.
pub fn ensure_crypto_provider() {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        // An error means a provider is already installed, which is what we want.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// A shared HTTP client with sane timeouts.
pub fn client() -> Result<reqwest::Client, String> {
    static CLIENT: OnceLock<Result<reqwest::Client, String>> = OnceLock::new();
    CLIENT
        .get_or_init(|| {
            ensure_crypto_provider();
            reqwest::Client::builder()
                .connect_timeout(std::time::Duration::from_secs(15))
                .timeout(std::time::Duration::from_secs(300))
                .user_agent(concat!("convoy/", env!("CARGO_PKG_VERSION")))
                .build()
                .map_err(|e| {
                    format!(
                        "cannot build an HTTP client: {}",
                        crate::engine::error::chain(&e)
                    )
                })
        })
        .clone()
}

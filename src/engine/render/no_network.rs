//! A fence around the render tools (kustomize, helm): where a render must not reach the
//! network, the tool runs behind an HTTP proxy that does not exist. Go's HTTP client (both
//! tools are Go) sends every request but those to loopback addresses through the proxy named
//! in the environment, and each such request fails. convoy checks what a chart or a
//! kustomization names before the tool runs; this holds when a check and the tool read the
//! same text differently (an attack found eight such ways for kustomize).

/// The variables Go's `http.ProxyFromEnvironment` reads.
pub const PROXY_VARS: [&str; 4] = ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"];

/// A proxy no connection can be made to (port 0).
pub const NOWHERE: &str = "http://127.0.0.1:0";

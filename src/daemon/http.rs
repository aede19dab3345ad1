//! The daemon's own HTTP endpoints: `/healthz`, `/readyz` (ready once every cache synced) and
//! Prometheus `/metrics`. A few lines of HTTP/1.1 are all these probes need.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::metrics::Metrics;

/// Serve the endpoints on `listener` until `shutdown` fires.
pub async fn serve(
    listener: TcpListener,
    ready: Arc<AtomicBool>,
    metrics: Arc<Metrics>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = shutdown.changed() => return,
        };
        let Ok((mut stream, _)) = accepted else {
            continue;
        };
        let ready = ready.clone();
        let metrics = metrics.clone();
        tokio::spawn(async move {
            // Read the whole request head: closing a socket with unread bytes resets it.
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
                match tokio::time::timeout(std::time::Duration::from_secs(5), stream.read(&mut buf))
                    .await
                {
                    Ok(Ok(n)) if n > 0 => head.extend_from_slice(&buf[..n]),
                    _ => break,
                }
            }
            let request = String::from_utf8_lossy(&head);
            let path = request.split_whitespace().nth(1).unwrap_or("/");
            let (status, body, content_type) = match path {
                "/healthz" | "/livez" => ("200 OK", "ok\n".to_string(), "text/plain"),
                "/readyz" if ready.load(Ordering::Relaxed) => {
                    ("200 OK", "ok\n".to_string(), "text/plain")
                }
                "/readyz" => (
                    "503 Service Unavailable",
                    "caches not synced\n".to_string(),
                    "text/plain",
                ),
                "/metrics" => {
                    // Tasks alive now: a count that grows with uptime is a leak.
                    let tasks = tokio::runtime::Handle::current()
                        .metrics()
                        .num_alive_tasks();
                    metrics.set("convoy_runtime_alive_tasks", &[], tasks as f64);
                    ("200 OK", metrics.render(), "text/plain; version=0.0.4")
                }
                _ => ("404 Not Found", "not found\n".to_string(), "text/plain"),
            };
            let response = format!(
                "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(response.as_bytes()).await;
            let _ = stream.shutdown().await;
        });
    }
}

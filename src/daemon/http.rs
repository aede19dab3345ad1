//! The daemon's own HTTP endpoints on hyper: `/healthz` and `/livez`, `/readyz` (ready once
//! every cache synced) and Prometheus `/metrics`.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use super::metrics::Metrics;

/// At most this many connections are served at once; more wait in the listen backlog.
const MAX_CONNECTIONS: usize = 64;

/// Serve the endpoints on `listener` until `shutdown` fires.
pub async fn serve(
    listener: TcpListener,
    ready: Arc<AtomicBool>,
    metrics: Arc<Metrics>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return;
        };
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = shutdown.changed() => return,
        };
        let Ok((stream, _)) = accepted else {
            continue;
        };
        let ready = ready.clone();
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let response = respond(&request, &ready, &metrics);
                async move { Ok::<_, Infallible>(response) }
            });
            let connection = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service);
            // A client that says nothing is not waited for forever.
            let _ = tokio::time::timeout(std::time::Duration::from_secs(30), connection).await;
            drop(permit);
        });
    }
}

fn respond<B>(
    request: &Request<B>,
    ready: &AtomicBool,
    metrics: &Metrics,
) -> Response<Full<Bytes>> {
    let text = |status: StatusCode, body: String, content_type: &'static str| {
        let body = if request.method() == Method::HEAD {
            Bytes::new()
        } else {
            Bytes::from(body)
        };
        let mut response = Response::new(Full::new(body));
        *response.status_mut() = status;
        if let Ok(v) = hyper::header::HeaderValue::from_str(content_type) {
            response
                .headers_mut()
                .insert(hyper::header::CONTENT_TYPE, v);
        }
        response
    };
    if !matches!(*request.method(), Method::GET | Method::HEAD) {
        return text(
            StatusCode::METHOD_NOT_ALLOWED,
            "GET or HEAD\n".into(),
            "text/plain",
        );
    }
    match request.uri().path() {
        "/healthz" | "/livez" => text(StatusCode::OK, "ok\n".into(), "text/plain"),
        "/readyz" if ready.load(Ordering::Relaxed) => {
            text(StatusCode::OK, "ok\n".into(), "text/plain")
        }
        "/readyz" => text(
            StatusCode::SERVICE_UNAVAILABLE,
            "caches not synced\n".into(),
            "text/plain",
        ),
        "/metrics" => {
            // Tasks alive now: a count that grows with uptime is a leak.
            let tasks = tokio::runtime::Handle::current()
                .metrics()
                .num_alive_tasks();
            metrics.alive_tasks.set(tasks as i64);
            text(
                StatusCode::OK,
                metrics.render(),
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )
        }
        _ => text(StatusCode::NOT_FOUND, "not found\n".into(), "text/plain"),
    }
}

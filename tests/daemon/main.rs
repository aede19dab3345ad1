//! `convoy daemon` as a real process against the real control plane with kwok.

#![allow(clippy::unwrap_used)]

#[path = "../support/mod.rs"]
mod support;

mod faults;
mod loops;
mod operations;
mod sharding;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use support::{convoy_bin, path_with_testenv};

/// A running `convoy daemon`; SIGKILLed when dropped.
pub struct Daemon {
    pub child: Child,
    pub port: u16,
    pub log: tempfile::NamedTempFile,
    /// Its source cache (`--cache-dir`).
    pub cache: std::path::PathBuf,
}

impl Daemon {
    /// Start `convoy daemon` with `args` against `kubeconfig`, and wait until it is ready.
    pub async fn start(kubeconfig: &Path, args: &[&str]) -> Self {
        let daemon = Self::spawn(kubeconfig, args);
        support::eventually("the daemon to be ready", Duration::from_secs(30), || {
            let ready = daemon.get("/readyz").is_some_and(|(code, _)| code == 200);
            async move { ready.then_some(()) }
        })
        .await;
        daemon
    }

    /// Start `convoy daemon` without waiting for it to be ready. It listens on a port the
    /// kernel picks (`--listen 127.0.0.1:0`) and names it in its log, so no other process can
    /// take the port between choosing and binding it.
    pub fn spawn(kubeconfig: &Path, args: &[&str]) -> Self {
        let log = tempfile::NamedTempFile::new().unwrap();
        let cache = tempfile::Builder::new()
            .prefix("convoy-daemon-cache-")
            .tempdir()
            .unwrap()
            .keep();
        let child = Command::new(convoy_bin())
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args([
                "daemon",
                // (No -v: what operators see at the default level is what tests read.)
                // The tests' Git repositories are local (file://).
                "--allow-file-urls",
                "--listen",
                "127.0.0.1:0",
                "--cache-dir",
            ])
            .arg(&cache)
            .args(args)
            .env("PATH", path_with_testenv())
            .stdout(Stdio::null())
            .stderr(log.reopen().unwrap())
            .spawn()
            .unwrap();
        let log_path = log.path().to_path_buf();
        let port = support::eventually_sync(
            "the daemon to name the port it listens on",
            Duration::from_secs(30),
            || listening_port(&std::fs::read_to_string(&log_path).unwrap_or_default()),
        );
        let daemon = Self {
            child,
            port,
            log,
            cache,
        };
        support::eventually_sync("the daemon to listen", Duration::from_secs(30), || {
            daemon.get("/healthz").map(|_| ())
        });
        daemon
    }

    /// GET `path` from the daemon's endpoints: (status code, body).
    pub fn get(&self, path: &str) -> Option<(u16, String)> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        let request =
            format!("GET {path} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).ok()?;
        let mut text = String::new();
        stream.read_to_string(&mut text).ok()?;
        let code = text.split_whitespace().nth(1)?.parse().ok()?;
        let body = text
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default();
        Some((code, body))
    }

    /// The sum of a metric's series whose labels contain all of `labels`.
    pub fn metric(&self, name: &str, labels: &[&str]) -> f64 {
        let (_, body) = self.get("/metrics").unwrap_or_default();
        body.lines()
            .filter(|l| l.starts_with(name) && labels.iter().all(|x| l.contains(x)))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    /// API requests that change the cluster.
    pub fn writes(&self) -> f64 {
        ["create", "update", "patch", "delete"]
            .iter()
            .map(|v| self.metric("convoy_api_requests_total", &[&format!("verb=\"{v}\"")]))
            .sum()
    }

    /// Send SIGTERM and wait for the exit status.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        self.child.wait().unwrap()
    }

    /// SIGKILL, no goodbye.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(self.log.path()).unwrap_or_default()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The port in the daemon's "serving /healthz, /readyz, /metrics" log line.
fn listening_port(log: &str) -> Option<u16> {
    let line = log.lines().find(|l| l.contains("serving /healthz"))?;
    let addr = line.split("addr=").nth(1)?.split_whitespace().next()?;
    addr.rsplit(':').next()?.trim_end_matches('"').parse().ok()
}

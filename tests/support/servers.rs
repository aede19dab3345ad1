//! Real local servers for source tests: Git repositories (file://, git daemon, smart HTTP with
//! basic auth), a Helm chart repository over HTTP, and an OCI registry. Each server runs as a
//! child process on a free loopback port and is killed when its handle drops.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{repo_root, testenv_bin};

/// A server process; killed on drop.
pub struct Server {
    pub port: u16,
    child: Child,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A loopback port that was free a moment ago (bound, then released). Another process may take
/// it before the caller binds it: servers that can report a port the kernel chose do that
/// instead, and the others start through `on_free_port`, which tries again when they lose it.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Start a server that cannot bind port 0 and name its port (git daemon, sshd, registry):
/// `start(port)` spawns it on a port that was free; if the process exits before it listens
/// (another process took the port meanwhile), a new port is tried.
fn on_free_port(what: &str, mut start: impl FnMut(u16) -> Child) -> Server {
    for _ in 0..5 {
        let port = free_port();
        let mut child = start(port);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Server { port, child };
            }
            if let Ok(Some(status)) = child.try_wait() {
                eprintln!("{what} exited ({status}) before listening on port {port}; another port");
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{what} did not listen on port {port} within 20s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    panic!("{what} could not listen on any of five free ports");
}

/// A server on 127.0.0.1 that accepts every connection and never answers (a tarpit): its
/// port, and how many connections it has accepted.
pub fn silent_server() -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    stalling_server(Duration::MAX)
}

/// A server on 127.0.0.1 that accepts every connection, says nothing and closes it after
/// `hold`: each request to it fails after about that long. Its port, and how many
/// connections it has accepted.
pub fn stalling_server(hold: Duration) -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    counting_server("127.0.0.1:0", move |stream| {
        std::thread::spawn(move || {
            // (Held for ever: the sleep is cut to what the platform takes, again and again.)
            let until = std::time::Instant::now().checked_add(hold);
            while until.is_none_or(|u| std::time::Instant::now() < u) {
                std::thread::sleep(Duration::from_secs(60).min(hold));
            }
            drop(stream);
        });
    })
}

/// A server bound to `address` that hands each connection it accepts to `serve`: its port,
/// and how many connections it has accepted.
pub fn counting_server(
    address: &str,
    serve: impl Fn(std::net::TcpStream) + Send + 'static,
) -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let listener = std::net::TcpListener::bind(address).unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = accepted.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            serve(stream);
        }
    });
    (port, accepted)
}

/// An HTTP proxy at `address` that reads each request's head and refuses it (403): its port,
/// and how many connections it has accepted.
pub fn refusing_proxy(address: &str) -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    counting_server(address, |mut stream| {
        use std::io::{Read, Write};
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap_or(0) == 1 {
            head.push(byte[0]);
        }
        let _ = stream.write_all(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n");
    })
}

/// The Python HTTP server of `http_server.py`: static files, or Git smart HTTP with `git`.
pub fn http_server(root: &Path, auth: Option<&str>, git: bool) -> Server {
    let mut cmd = python_server(root);
    if let Some(auth) = auth {
        cmd.arg("--auth").arg(auth);
    }
    if git {
        cmd.arg("--git");
    }
    start_python_server(cmd)
}

/// As [`http_server`] without auth, except that a request for a path under `under` is
/// redirected to `to` followed by the rest of the path.
pub fn redirecting_server(root: &Path, git: bool, under: &str, to: &str) -> Server {
    let mut cmd = python_server(root);
    cmd.arg("--redirect").arg(format!("{under}={to}"));
    if git {
        cmd.arg("--git");
    }
    start_python_server(cmd)
}

/// The static files under `root` over HTTPS on 127.0.0.1, with a certificate for that address
/// made for the server; returns it and the certificate's file (a client's trusted root).
pub fn https_server(root: &Path, dir: &Path) -> (Server, PathBuf) {
    let (cert, key) = (dir.join("server.crt"), dir.join("server.key"));
    let status = Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        ])
        .args([
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stderr(Stdio::null())
        .status()
        .expect("openssl is required for the HTTPS test server");
    assert!(status.success(), "openssl could not make a certificate");
    let mut cmd = python_server(root);
    cmd.arg("--cert").arg(&cert).arg("--key").arg(&key);
    (start_python_server(cmd), cert)
}

fn python_server(root: &Path) -> Command {
    let mut cmd = Command::new("python3");
    cmd.arg(repo_root().join("tests/support/http_server.py"))
        .arg("--root")
        .arg(root)
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    cmd
}

fn start_python_server(mut cmd: Command) -> Server {
    let mut child = cmd
        .spawn()
        .expect("python3 is required for the HTTP test server");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port: u16 = line
        .trim()
        .parse()
        .expect("the HTTP test server prints its port");
    Server { port, child }
}

/// `git daemon` exporting every repository under `base`. Started as `git-daemon` itself:
/// `git daemon` runs it as a child of its own, which outlived the test when `git` was killed.
pub fn git_daemon(base: &Path) -> Server {
    let exec_path = Command::new("git")
        .arg("--exec-path")
        .output()
        .expect("git is required for the git:// test");
    let daemon = Path::new(String::from_utf8_lossy(&exec_path.stdout).trim()).join("git-daemon");
    on_free_port("git daemon", |port| {
        Command::new(&daemon)
            .args(["--reuseaddr", "--export-all", "--listen=127.0.0.1"])
            .arg(format!("--port={port}"))
            .arg(format!("--base-path={}", base.display()))
            .arg(base)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("git daemon")
    })
}

/// OpenSSH's `sshd` on loopback, for Git over `ssh://`: it lets the current user in with the
/// key pair it makes under `dir`. Returns the server, the client's private key and a
/// known_hosts line for the server's host key.
pub fn sshd(dir: &Path) -> (Server, Vec<u8>, String) {
    let sshd = Path::new("/usr/sbin/sshd");
    assert!(
        sshd.is_file(),
        "sshd is required for the ssh:// Git test: apt-get install openssh-server (.ci/run does)"
    );
    // sshd wants its privilege separation directory; .ci/run creates it.
    assert!(
        Path::new("/run/sshd").is_dir(),
        "sshd needs /run/sshd: sudo mkdir -p /run/sshd (.ci/run does)"
    );
    for key in ["host_key", "client_key"] {
        let out = Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-f"])
            .arg(dir.join(key))
            .output()
            .expect("ssh-keygen is required for the ssh:// Git test (openssh-client)");
        assert!(out.status.success(), "ssh-keygen: {out:?}");
    }
    std::fs::copy(dir.join("client_key.pub"), dir.join("authorized_keys")).unwrap();
    let config = dir.join("sshd_config");
    let server = on_free_port("sshd", |port| {
        std::fs::write(
            &config,
            format!(
                "Port {port}\nListenAddress 127.0.0.1\nHostKey {dir}/host_key\n\
AuthorizedKeysFile {dir}/authorized_keys\nPidFile {dir}/sshd.pid\nStrictModes no\nUsePAM no\n\
PasswordAuthentication no\nKbdInteractiveAuthentication no\nPubkeyAuthentication yes\n\
PermitRootLogin prohibit-password\n",
                dir = dir.display()
            ),
        )
        .unwrap();
        Command::new(sshd)
            .arg("-D")
            .arg("-e")
            .arg("-f")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("sshd")
    });
    let port = server.port;
    let host_key = std::fs::read_to_string(dir.join("host_key.pub")).unwrap();
    let known_hosts = format!("[127.0.0.1]:{port} {}", host_key.trim());
    let identity = std::fs::read(dir.join("client_key")).unwrap();
    (server, identity, known_hosts)
}

/// The current user's name, for `ssh://USER@host` URLs.
pub fn user_name() -> String {
    let out = Command::new("id").arg("-un").output().expect("id");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// distribution's `registry` on loopback, storing under `dir`.
pub fn registry(dir: &Path) -> Server {
    let config = dir.join("registry.yml");
    on_free_port("registry", |port| {
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\n\
http:\n  addr: 127.0.0.1:{port}\n",
                dir.join("data").display()
            ),
        )
        .unwrap();
        Command::new(testenv_bin().join("registry"))
            .arg("serve")
            .arg(&config)
            .env("OTEL_TRACES_EXPORTER", "none")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("registry (scripts/testenv build)")
    })
}

/// A Git repository with a work tree and a bare remote beside it.
pub struct GitRepo {
    pub dir: tempfile::TempDir,
}

impl GitRepo {
    /// An empty repository whose default branch is `main`.
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        run_git(
            dir.path(),
            &["init", "--bare", "--quiet", "-b", "main", "repo.git"],
        );
        run_git(dir.path(), &["init", "--quiet", "-b", "main", "work"]);
        let work = dir.path().join("work");
        run_git(&work, &["config", "user.email", "test@convoy.invalid"]);
        run_git(&work, &["config", "user.name", "convoy tests"]);
        run_git(&work, &["remote", "add", "origin", "../repo.git"]);
        Self { dir }
    }

    pub fn work(&self) -> PathBuf {
        self.dir.path().join("work")
    }

    /// The directory holding `repo.git` (a git daemon or HTTP base path).
    pub fn base(&self) -> &Path {
        self.dir.path()
    }

    pub fn file_url(&self) -> String {
        format!("file://{}", self.dir.path().join("repo.git").display())
    }

    /// Write `files`, commit them on the current branch and push. Returns the commit id.
    pub fn commit(&self, files: &[(&str, &str)], message: &str) -> String {
        for (path, content) in files {
            let full = self.work().join(path);
            std::fs::create_dir_all(full.parent().unwrap()).unwrap();
            std::fs::write(full, content).unwrap();
        }
        run_git(&self.work(), &["add", "-A"]);
        run_git(&self.work(), &["commit", "--quiet", "-m", message]);
        let branch = git_output(&self.work(), &["rev-parse", "--abbrev-ref", "HEAD"]);
        run_git(&self.work(), &["push", "--quiet", "origin", &branch]);
        git_output(&self.work(), &["rev-parse", "HEAD"])
    }

    /// Commit a symlink (pointing wherever `target` says) and push.
    pub fn commit_symlink(&self, path: &str, target: &str) -> String {
        let full = self.work().join(path);
        std::fs::create_dir_all(full.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(target, &full).unwrap();
        self.commit(&[], "symlink")
    }

    pub fn tag(&self, name: &str) {
        run_git(&self.work(), &["tag", name]);
        run_git(&self.work(), &["push", "--quiet", "origin", name]);
    }

    pub fn checkout_new_branch(&self, name: &str) {
        run_git(&self.work(), &["checkout", "--quiet", "-b", name]);
    }
}

pub fn run_git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

pub fn git_output(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Package the chart at `chart` into `repo` and (re)index the repository with `helm`.
pub fn helm_package(chart: &Path, repo: &Path) {
    let helm = testenv_bin().join("helm");
    let out = Command::new(&helm)
        .arg("package")
        .arg(chart)
        .arg("--destination")
        .arg(repo)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "helm package: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(&helm)
        .arg("repo")
        .arg("index")
        .arg(repo)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "helm repo index: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Write a minimal chart named `name` at `version` under `dir`; returns its directory.
pub fn write_chart(dir: &Path, name: &str, version: &str) -> PathBuf {
    let chart = dir.join(format!("{name}-{version}"));
    std::fs::create_dir_all(chart.join("templates")).unwrap();
    std::fs::write(
        chart.join("Chart.yaml"),
        format!("apiVersion: v2\nname: {name}\nversion: {version}\n"),
    )
    .unwrap();
    std::fs::write(chart.join("values.yaml"), "greeting: hello\n").unwrap();
    std::fs::write(
        chart.join("templates/cm.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}\ndata:\n  greeting: {{ .Values.greeting | quote }}\n  version: {{ .Chart.Version | quote }}\n",
    )
    .unwrap();
    chart
}

/// A TCP proxy whose open connections can go quiet: they stay open and pass nothing on, as a
/// connection that a NAT or a load balancer dropped without telling either end. New
/// connections pass as before. Runs on the test's tokio runtime.
pub struct QuietingProxy {
    pub port: u16,
    generation: std::sync::Arc<std::sync::atomic::AtomicU64>,
    accept: tokio::task::JoinHandle<()>,
}

impl QuietingProxy {
    /// Proxy a free port of 127.0.0.1 to `target`.
    pub async fn start(target: std::net::SocketAddr) -> Self {
        use std::sync::atomic::Ordering::SeqCst;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the proxy");
        let port = listener.local_addr().expect("the proxy's address").port();
        let generation = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let current = generation.clone();
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let born = current.load(SeqCst);
                let current = current.clone();
                tokio::spawn(async move {
                    let Ok(server) = tokio::net::TcpStream::connect(target).await else {
                        return;
                    };
                    let (client_read, client_write) = client.into_split();
                    let (server_read, server_write) = server.into_split();
                    tokio::join!(
                        pass(client_read, server_write, born, current.clone()),
                        pass(server_read, client_write, born, current),
                    );
                });
            }
        });
        Self {
            port,
            generation,
            accept,
        }
    }

    /// Every connection open now goes quiet for good.
    pub fn quiet_open_connections(&self) {
        self.generation
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Drop for QuietingProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// Copy `from` to `to` until either ends, or hold both open passing nothing once the proxy's
/// generation is no longer `born`.
async fn pass(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    born: u64,
    generation: std::sync::Arc<std::sync::atomic::AtomicU64>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let read = from.read(&mut buf).await;
        // A quiet connection passes nothing on, not even an end: both halves stay open.
        if generation.load(std::sync::atomic::Ordering::SeqCst) != born {
            let _open = (from, to);
            return std::future::pending::<()>().await;
        }
        let n = match read {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

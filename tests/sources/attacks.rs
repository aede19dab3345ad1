//! Sources as an attacker writes them: one who can push to a repository or a chart
//! repository, or create a source object in another team's namespace. Each test builds the
//! malicious input and checks what it cannot reach.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;

use convoy::engine::source::cache::scope_of;
use convoy::engine::source::{
    Cache, Coordinator, Credentials, GitReference, SourceError, SourcePolicy, SourceRequest,
};

use crate::support::servers::{GitRepo, http_server};

fn git(url: &str, reference: GitReference) -> SourceRequest {
    SourceRequest::Git {
        url: url.to_string(),
        reference,
    }
}

fn main_branch() -> GitReference {
    GitReference::Branch("main".into())
}

fn message(err: SourceError) -> String {
    format!("{:#}", anyhow::Error::new(err))
}

/// What fetching `chart` from the chart repository on `port` is refused with.
async fn helm_refused(coordinator: &Coordinator, port: u16, chart: &str) -> String {
    let request = SourceRequest::Helm {
        url: format!("http://127.0.0.1:{port}"),
        chart: chart.into(),
        version: None,
    };
    message(
        coordinator
            .ensure(crate::SCOPE, &request, None)
            .await
            .unwrap_err(),
    )
}

/// Team b's private repository over HTTP with basic auth, fetched by team b into a cache
/// shared with team a (one daemon). Team a, without credentials, gets nothing out of the cache
/// by naming the same URL, the commit, a commit prefix, or the cache's own mirror.
#[tokio::test]
async fn another_namespace_cannot_read_a_private_repository_out_of_the_shared_cache() {
    let repo = GitRepo::new();
    let sha = repo.commit(&[("secret.yaml", "v: team-b\n")], "private");
    let server = http_server(repo.base(), Some("bob:b-secret"), true);
    let url = format!("http://127.0.0.1:{}/repo.git", server.port);
    let cache_dir = tempfile::tempdir().unwrap();
    let cache = Cache::new(cache_dir.path());
    let coordinator = Coordinator::new(cache.clone());
    let team_b = scope_of("GitRepository", "team-b", "private");
    let team_a = scope_of("GitRepository", "team-a", "borrowed");
    let bob = Credentials {
        username: Some("bob".into()),
        password: Some("b-secret".into()),
        ..Default::default()
    };
    let fetched = coordinator
        .ensure(&team_b, &git(&url, main_branch()), Some(&bob))
        .await
        .unwrap();
    assert_eq!(fetched.revision, format!("main@sha1:{sha}"));

    for (what, reference) in [
        ("the branch", main_branch()),
        ("the full commit id", GitReference::Commit(sha.clone())),
        (
            "a 7-character prefix",
            GitReference::Commit(sha[..7].to_string()),
        ),
    ] {
        let err = coordinator
            .ensure(&team_a, &git(&url, reference), None)
            .await
            .expect_err(what);
        assert!(
            matches!(err, SourceError::NotReady { .. }),
            "{what}: {}",
            message(err)
        );
    }
    // A file:// URL into the cache's own mirror of team b's repository.
    let mirror = cache.git_mirror(&team_b, &url);
    assert!(mirror.join("HEAD").is_file(), "team b's mirror exists");
    let err = coordinator
        .ensure(
            &team_a,
            &git(&format!("file://{}", mirror.display()), main_branch()),
            None,
        )
        .await
        .unwrap_err();
    assert_eq!(
        message(err),
        format!(
            "Git URL \"file://{}\" points into convoy's source cache",
            mirror.display()
        )
    );
}

/// The daemon's policy refuses local paths outright.
#[tokio::test]
async fn a_daemon_refuses_file_urls_unless_allowed() {
    let repo = GitRepo::new();
    repo.commit(&[("a.yaml", "v: 1\n")], "first");
    let cache = tempfile::tempdir().unwrap();
    let strict = Coordinator::with_policy(
        Cache::new(cache.path()),
        SourcePolicy {
            allow_file_urls: false,
            ..Default::default()
        },
    );
    let err = strict
        .ensure(
            "GitRepository/a/r",
            &git(&repo.file_url(), main_branch()),
            None,
        )
        .await
        .unwrap_err();
    assert!(err.is_unsupported());
    assert_eq!(
        message(err),
        format!(
            "Git URL {:?} is a local path, which convoy daemon does not fetch unless started with --allow-file-urls",
            repo.file_url()
        )
    );
}

/// A daemon allowing sources only under some URL prefixes (`--allow-source-url`) sends
/// nothing elsewhere: not to a URL a tenant names, not by climbing out of a prefix, not to the
/// chart URL the index of an allowed chart repository (which a tenant may push to) names.
/// The server outside never sees a connection; a source under a prefix is fetched.
#[tokio::test]
async fn a_daemon_restricted_to_url_prefixes_sends_nothing_elsewhere() {
    let (outside, connections) = crate::support::servers::silent_server();
    let repo = GitRepo::new();
    let sha = repo.commit(&[("a.yaml", "v: 1\n")], "first");
    let elsewhere = format!("http://127.0.0.1:{outside}/");
    // Each server redirects what is asked under /moved/ to the server outside.
    let git_server =
        crate::support::servers::redirecting_server(repo.base(), true, "/moved/", &elsewhere);
    let charts = tempfile::tempdir().unwrap();
    std::fs::create_dir(charts.path().join("team-a")).unwrap();
    std::fs::write(
        charts.path().join("team-a/index.yaml"),
        format!(
            "apiVersion: v1\nentries:\n  greeter:\n  - name: greeter\n    version: 1.0.0\n    urls: [http://127.0.0.1:{outside}/greeter-1.0.0.tgz]\n"
        ),
    )
    .unwrap();
    let chart_server = crate::support::servers::redirecting_server(
        charts.path(),
        false,
        "/team-a/moved/",
        &elsewhere,
    );
    let allowed = convoy::engine::source::allowed_urls::AllowedUrls::new(&[
        format!("http://127.0.0.1:{}/", git_server.port),
        format!("http://127.0.0.1:{}/team-a/", chart_server.port),
    ])
    .unwrap();
    let cache = tempfile::tempdir().unwrap();
    let daemon = Coordinator::with_policy(
        Cache::new(cache.path()),
        SourcePolicy {
            allow_file_urls: false,
            allowed_urls: allowed,
            // A request that went out would hang on the silent server: fail soon instead.
            fetch_timeout: std::time::Duration::from_secs(10),
            ..Default::default()
        },
    );

    let on_git_server = |path: &str| {
        git(
            &format!("http://127.0.0.1:{}/{path}", git_server.port),
            main_branch(),
        )
    };
    let fetched = daemon
        .ensure(crate::SCOPE, &on_git_server("repo.git"), None)
        .await
        .unwrap();
    assert_eq!(fetched.revision, format!("main@sha1:{sha}"));

    let not_under = "is not under a URL prefix convoy daemon allows sources from (--allow-source-url); ask its operator to allow it, or use a source under an allowed prefix";
    let helm = |url: String| SourceRequest::Helm {
        url,
        chart: "greeter".into(),
        version: None,
    };
    let cases = [
        (
            git(
                &format!("http://127.0.0.1:{outside}/repo.git"),
                main_branch(),
            ),
            format!("Git URL \"http://127.0.0.1:{outside}/repo.git\" {not_under}"),
        ),
        (
            git(&format!("git@127.0.0.1:{outside}/repo.git"), main_branch()),
            format!("Git URL \"git@127.0.0.1:{outside}/repo.git\" {not_under}"),
        ),
        (
            git(
                &format!("http://127.0.0.1:{}/team-a/../repo.git", chart_server.port),
                main_branch(),
            ),
            format!(
                "Git URL \"http://127.0.0.1:{}/team-a/../repo.git\" has a . or .. segment in its path, which convoy daemon does not read when it restricts source URLs (--allow-source-url)",
                chart_server.port
            ),
        ),
        (
            helm(format!("http://127.0.0.1:{outside}")),
            format!(
                "the Helm repository index \"http://127.0.0.1:{outside}/index.yaml\" {not_under}"
            ),
        ),
        (
            helm(format!("http://127.0.0.1:{}/team-a", chart_server.port)),
            format!(
                "the download URL of chart greeter 1.0.0 \"http://127.0.0.1:{outside}/greeter-1.0.0.tgz\" {not_under}"
            ),
        ),
        (
            SourceRequest::Oci {
                url: format!("oci://127.0.0.1:{outside}/charts/greeter"),
                tag: Some("1.0.0".into()),
                digest: None,
                insecure: true,
            },
            format!("OCI repository URL \"oci://127.0.0.1:{outside}/charts/greeter\" {not_under}"),
        ),
    ];
    for (request, expected) in cases {
        let err = daemon
            .ensure(crate::SCOPE, &request, None)
            .await
            .unwrap_err();
        assert!(err.is_unsupported(), "{request:?}: {}", message(err));
        assert_eq!(message(err), expected, "{request:?}");
    }
    // A server under a prefix that redirects elsewhere (static hosting redirects where its
    // owner says): git follows no redirect, the chart repository's is refused.
    let err = daemon
        .ensure(crate::SCOPE, &on_git_server("moved/repo.git"), None)
        .await
        .unwrap_err();
    let text = message(err);
    assert!(
        text.ends_with("The requested URL returned error: 302 (a redirect: convoy daemon follows none while it restricts source URLs with --allow-source-url; name the URL it leads to)"),
        "{text}"
    );
    let err = daemon
        .ensure(
            crate::SCOPE,
            &helm(format!(
                "http://127.0.0.1:{}/team-a/moved",
                chart_server.port
            )),
            None,
        )
        .await
        .unwrap_err();
    let text = message(err);
    assert!(
        text.contains(&format!(
            "the redirect to \"http://127.0.0.1:{outside}/index.yaml\" {not_under}"
        )),
        "{text}"
    );
    assert_eq!(
        connections.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "the server outside every prefix was never connected to"
    );
}

/// Refs and URLs that git would read as options or transports never reach git.
#[tokio::test]
async fn a_ref_or_url_that_git_would_read_as_an_option_is_refused_before_git_runs() {
    let repo = GitRepo::new();
    repo.commit(&[("a.yaml", "v: 1\n")], "first");
    let marker = tempfile::tempdir().unwrap();
    let pwned = marker.path().join("pwned");
    let (_dir, coordinator) = crate::coordinator();
    let cases = [
        (
            git(
                &repo.file_url(),
                GitReference::Branch(format!("--upload-pack=touch {}", pwned.display())),
            ),
            "ref.branch \"--upload-pack=touch",
        ),
        (
            git(
                &repo.file_url(),
                GitReference::Tag("v1:refs/heads/x".into()),
            ),
            "contains a space, a control character or one of",
        ),
        (
            git(&repo.file_url(), GitReference::Commit("HEAD~1".into())),
            "is not a commit id",
        ),
        (
            git(&format!("--upload-pack={}", pwned.display()), main_branch()),
            "has an unsupported scheme",
        ),
        (
            git(
                &format!("ext::sh -c touch% {}", pwned.display()),
                main_branch(),
            ),
            "contains a space",
        ),
        (
            git("ssh://-oProxyCommand=touch/repo.git", main_branch()),
            "names a host that starts with '-'",
        ),
    ];
    for (request, expected) in cases {
        let err = coordinator
            .ensure(crate::SCOPE, &request, None)
            .await
            .unwrap_err();
        assert!(err.is_unsupported(), "{request:?}");
        let text = message(err);
        assert!(text.contains(expected), "{request:?}: {text}");
    }
    assert!(!pwned.exists(), "nothing ran");
}

/// A hook planted in the cache's mirror (as an archive that escaped its directory once did)
/// never runs: git runs with hooks pointed at an empty directory.
#[tokio::test]
async fn git_never_runs_a_hook_planted_in_its_mirror() {
    let repo = GitRepo::new();
    repo.commit(&[("a.yaml", "v: 1\n")], "first");
    let cache_dir = tempfile::tempdir().unwrap();
    let cache = Cache::new(cache_dir.path());
    let coordinator = Coordinator::new(cache.clone());
    let request = git(&repo.file_url(), main_branch());
    coordinator
        .ensure(crate::SCOPE, &request, None)
        .await
        .unwrap();
    let marker = tempfile::tempdir().unwrap();
    let ran = marker.path().join("ran");
    let hooks = cache
        .git_mirror(crate::SCOPE, &repo.file_url())
        .join("hooks");
    std::fs::create_dir_all(&hooks).unwrap();
    for hook in [
        "reference-transaction",
        "post-checkout",
        "post-merge",
        "pre-auto-gc",
    ] {
        let path = hooks.join(hook);
        let mut file = std::fs::File::create(&path).unwrap();
        writeln!(file, "#!/bin/sh\ntouch {}", ran.display()).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let sha = repo.commit(&[("a.yaml", "v: 2\n")], "second");
    let artifact = coordinator
        .ensure(crate::SCOPE, &request, None)
        .await
        .unwrap();
    assert_eq!(artifact.revision, format!("main@sha1:{sha}"));
    assert!(!ran.exists(), "a hook in the mirror ran");
}

/// A gzip'd tar holding `entries` (path, type, link target, data), paths written raw.
fn tar_gz(entries: &[(&str, tar::EntryType, Option<&str>, &[u8])]) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    for (path, kind, link, data) in entries {
        let mut header = tar::Header::new_gnu();
        header.as_gnu_mut().unwrap().name[..path.len()].copy_from_slice(path.as_bytes());
        header.set_entry_type(*kind);
        header.set_size(data.len() as u64);
        header.set_mode(0o644);
        if let Some(link) = link {
            header.set_link_name(link).unwrap();
        }
        header.set_cksum();
        builder.append(&header, *data).unwrap();
    }
    let tar = builder.into_inner().unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&tar).unwrap();
    gz.finish().unwrap()
}

/// A chart repository serving one chart archive as `evil` 1.0.0.
fn chart_repository(archive: &[u8]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("evil-1.0.0.tgz"), archive).unwrap();
    std::fs::write(
        dir.path().join("index.yaml"),
        "apiVersion: v1\nentries:\n  evil:\n  - name: evil\n    version: 1.0.0\n    urls: [evil-1.0.0.tgz]\n",
    )
    .unwrap();
    dir
}

/// A chart archive whose links are each lexically inside the archive but together climb two
/// levels above the cache root, then a file written through them: refused at the link,
/// nothing written outside the cache.
#[tokio::test]
async fn a_chart_archive_whose_links_chain_out_of_the_cache_writes_nothing_outside() {
    let archive = tar_gz(&[
        (
            "evil/Chart.yaml",
            tar::EntryType::Regular,
            None,
            b"apiVersion: v2\nname: evil\nversion: 1.0.0\n",
        ),
        ("evil/c/d/up", tar::EntryType::Symlink, Some("../.."), b""),
        (
            "evil/c/d/up2",
            tar::EntryType::Symlink,
            Some("up/../.."),
            b"",
        ),
        (
            "evil/c/d/up3",
            tar::EntryType::Symlink,
            Some("up2/../.."),
            b"",
        ),
        (
            "evil/c/d/up3/planted.txt",
            tar::EntryType::Regular,
            None,
            b"x",
        ),
    ]);
    let repo = chart_repository(&archive);
    let server = http_server(repo.path(), None, false);
    // The cache two levels below a directory of the test's own, so "outside" is observable.
    let outer = tempfile::tempdir().unwrap();
    let root = outer.path().join("a/cache");
    std::fs::create_dir_all(&root).unwrap();
    let coordinator = Coordinator::new(Cache::new(&root));
    let text = helm_refused(&coordinator, server.port, "evil").await;
    assert!(
        text.ends_with("archive entry \"evil/c/d/up2\" is a link that points outside the archive; refusing to unpack outside the cache"),
        "{text}"
    );
    let planted: Vec<_> = walk(outer.path())
        .into_iter()
        .filter(|p| p.ends_with("planted.txt"))
        .collect();
    assert!(planted.is_empty(), "written: {planted:?}");
    assert!(!root.join("artifacts").exists(), "nothing was installed");
}

/// A chart archive that reads a file outside the cache through a chain of links (into a
/// template) is refused before anything renders it.
#[tokio::test]
async fn a_chart_archive_whose_links_chain_to_a_file_outside_is_refused() {
    let archive = tar_gz(&[
        (
            "evil/Chart.yaml",
            tar::EntryType::Regular,
            None,
            b"apiVersion: v2\nname: evil\nversion: 1.0.0\n",
        ),
        // Each lexically inside: `up` is the chart, `top` the archive root, and `leak.yaml`
        // five levels up from `top`, which on disk is far above the cache.
        (
            "evil/templates/x/y/up",
            tar::EntryType::Symlink,
            Some("../../.."),
            b"",
        ),
        (
            "evil/templates/x/y/top",
            tar::EntryType::Symlink,
            Some("up/.."),
            b"",
        ),
        (
            "evil/templates/x/y/leak.yaml",
            tar::EntryType::Symlink,
            Some("top/../../../../../etc/hostname"),
            b"",
        ),
    ]);
    let repo = chart_repository(&archive);
    let server = http_server(repo.path(), None, false);
    let (_dir, coordinator) = crate::coordinator();
    let err = coordinator
        .ensure(
            crate::SCOPE,
            &SourceRequest::Helm {
                url: format!("http://127.0.0.1:{}", server.port),
                chart: "evil".into(),
                version: None,
            },
            None,
        )
        .await
        .unwrap_err();
    let text = message(err);
    assert!(
        text.ends_with("archive entry \"evil/templates/x/y/leak.yaml\" is a link that points outside the archive; refusing to unpack outside the cache"),
        "{text}"
    );
}

/// Credentials of a chart repository go to that repository only: an index that points the
/// chart's download at another host gets no Authorization header there (Helm's default).
#[tokio::test]
async fn chart_repository_credentials_are_not_sent_to_another_host() {
    let charts = tempfile::tempdir().unwrap();
    let chart_dir = crate::support::servers::write_chart(charts.path(), "greeter", "1.0.0");
    let elsewhere = tempfile::tempdir().unwrap();
    crate::support::servers::helm_package(&chart_dir, elsewhere.path());
    // The other host accepts the same credentials: a download there succeeds only if they
    // were sent.
    let other = http_server(elsewhere.path(), Some("alice:s3cret"), false);
    let repo = tempfile::tempdir().unwrap();
    std::fs::write(
        repo.path().join("index.yaml"),
        format!(
            "apiVersion: v1\nentries:\n  greeter:\n  - name: greeter\n    version: 1.0.0\n    urls: [http://localhost:{}/greeter-1.0.0.tgz]\n",
            other.port
        ),
    )
    .unwrap();
    let server = http_server(repo.path(), Some("alice:s3cret"), false);
    let alice = Credentials {
        username: Some("alice".into()),
        password: Some("s3cret".into()),
        ..Default::default()
    };
    let (_dir, coordinator) = crate::coordinator();
    let err = coordinator
        .ensure(
            crate::SCOPE,
            &SourceRequest::Helm {
                url: format!("http://127.0.0.1:{}", server.port),
                chart: "greeter".into(),
                version: None,
            },
            Some(&alice),
        )
        .await
        .unwrap_err();
    let text = message(err);
    assert!(text.contains("401"), "{text}");
}

/// A chart repository URL naming another service (one the tenant's own pods may not reach,
/// but the daemon can), with a trailing `?` so the appended `/index.yaml` is only a query:
/// the fetch fails, and its message names the line and column where the answer stopped
/// reading as an index, never the answer's text.
#[tokio::test]
async fn a_chart_repository_url_naming_another_service_never_shows_its_answer() {
    let internal = tempfile::tempdir().unwrap();
    std::fs::write(
        internal.path().join("creds"),
        "aws_secret_access_key=wJalrXUtnFEMI\ndb_password=team-b-prod-s3cr3t\n",
    )
    .unwrap();
    std::fs::write(
        internal.path().join("shaped"),
        "entries: {greeter: team-b-prod-s3cr3t}\n",
    )
    .unwrap();
    let server = http_server(internal.path(), None, false);
    let (_dir, coordinator) = crate::coordinator();
    for (path, line, column) in [("creds", 1, 1), ("shaped", 1, 20)] {
        let err = coordinator
            .ensure(
                crate::SCOPE,
                &SourceRequest::Helm {
                    url: format!("http://127.0.0.1:{}/{path}?", server.port),
                    chart: "greeter".into(),
                    version: None,
                },
                None,
            )
            .await
            .unwrap_err();
        let text = message(err);
        assert!(
            text.ends_with(&format!(
                "index.yaml is not a Helm repository index: it does not read as one at line {line}, column {column} (the server's text is not shown)"
            )),
            "{text}"
        );
        assert!(
            !text.contains("s3cr3t") && !text.contains("wJalr"),
            "{text}"
        );
    }
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        out.push(path.clone());
        if is_dir {
            out.extend(walk(&path));
        }
    }
    out
}

/// A chart repository that sends its index without end (no Content-Length, byte after byte)
/// is cut off past convoy's limit, before the daemon's memory fills. (The stand-in here stops
/// at twice the limit; the read before this change held all of it.)
#[tokio::test]
async fn a_chart_repository_that_sends_without_end_is_cut_off() {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        stream
            .set_write_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        let mut request = [0u8; 4096];
        let _ = stream.read(&mut request);
        stream
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/yaml\r\nConnection: close\r\n\r\n")
            .unwrap();
        let block = vec![b'#'; 1 << 20];
        let mut sent = 0usize;
        while sent < 512 << 20 && stream.write_all(&block).is_ok() {
            sent += block.len();
        }
        sent
    });
    let (_dir, coordinator) = crate::coordinator();
    let text = helm_refused(&coordinator, port, "greeter").await;
    assert!(
        text.contains("the response is larger than 268435456 bytes"),
        "{text}"
    );
    // Joined off the runtime: the client's connection task closes the socket on it.
    let sent = tokio::task::spawn_blocking(move || server.join().unwrap())
        .await
        .unwrap();
    assert!(sent < 512 << 20, "the whole stream was read: {sent} bytes");
}

/// A repository whose tree is 1,800 directories deep is fetched, checked, digested and read
/// for manifests: each walk keeps its own list of directories, where a recursion as deep as
/// the tree overflowed the thread's stack and aborted the process (the daemon with it).
#[tokio::test]
async fn a_tree_deeper_than_a_stack_holds_is_fetched_and_read() {
    let repo = GitRepo::new();
    let deep = format!("{}cm.yaml", "d/".repeat(1800));
    repo.commit(
        &[(
            deep.as_str(),
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: deep}\n",
        )],
        "deep",
    );
    let (_dir, coordinator) = crate::coordinator();
    let artifact = coordinator
        .ensure(crate::SCOPE, &git(&repo.file_url(), main_branch()), None)
        .await
        .unwrap();
    assert!(artifact.path.join(&deep).is_file());
    let objects = tokio::task::spawn_blocking(move || {
        convoy::engine::render::manifests::load_dir(&artifact.path)
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(objects.len(), 1);
    assert_eq!(objects[0].name(), "deep");
}

use std::sync::Arc;

use convoy::engine::source::{Credentials, GitReference, SourceError, SourceRequest};

use crate::coordinator;
use crate::support::servers::{GitRepo, git_daemon, http_server, sshd, user_name};

fn git(url: &str, reference: GitReference) -> SourceRequest {
    SourceRequest::Git {
        url: url.to_string(),
        reference,
    }
}

fn read(artifact: &convoy::engine::source::Artifact, path: &str) -> String {
    std::fs::read_to_string(artifact.path.join(path)).unwrap()
}

#[tokio::test]
async fn a_branch_a_tag_and_a_commit_over_file_url() {
    let repo = GitRepo::new();
    let first = repo.commit(&[("app/cm.yaml", "v: 1\n")], "first");
    repo.tag("v1.0.0");
    let second = repo.commit(&[("app/cm.yaml", "v: 2\n")], "second");
    let (_dir, coordinator) = coordinator();
    let url = repo.file_url();

    let main = coordinator
        .ensure(
            crate::SCOPE,
            &git(&url, GitReference::Branch("main".into())),
            None,
        )
        .await
        .unwrap();
    assert_eq!(read(&main, "app/cm.yaml"), "v: 2\n");
    assert_eq!(main.revision, format!("main@sha1:{second}"));
    assert!(main.digest.starts_with("sha256:"));

    let tag = coordinator
        .ensure(
            crate::SCOPE,
            &git(&url, GitReference::Tag("v1.0.0".into())),
            None,
        )
        .await
        .unwrap();
    assert_eq!(read(&tag, "app/cm.yaml"), "v: 1\n");
    assert_eq!(tag.revision, format!("v1.0.0@sha1:{first}"));

    let commit = coordinator
        .ensure(
            crate::SCOPE,
            &git(&url, GitReference::Commit(first.clone())),
            None,
        )
        .await
        .unwrap();
    assert_eq!(
        commit.digest, tag.digest,
        "content-addressed: same tree, same artifact"
    );
    assert_eq!(commit.path, tag.path);

    let head = coordinator
        .ensure(crate::SCOPE, &git(&url, GitReference::Head), None)
        .await
        .unwrap();
    assert_eq!(head.revision, format!("sha1:{second}"));
}

#[tokio::test]
async fn a_new_commit_on_the_branch_is_fetched() {
    let repo = GitRepo::new();
    repo.commit(&[("a.yaml", "v: 1\n")], "first");
    let (_dir, coordinator) = coordinator();
    let request = git(&repo.file_url(), GitReference::Branch("main".into()));
    let before = coordinator
        .ensure(crate::SCOPE, &request, None)
        .await
        .unwrap();
    let sha = repo.commit(&[("a.yaml", "v: 2\n")], "second");
    let after = coordinator
        .ensure(crate::SCOPE, &request, None)
        .await
        .unwrap();
    assert_ne!(before.digest, after.digest);
    assert_eq!(after.revision, format!("main@sha1:{sha}"));
}

/// A daemon's render takes a fetch of the same source and ref younger than `max_age` when it
/// found the revision the Release last attempted (no process, no request to the server); an
/// older one, or one that found another revision, is fetched again.
#[tokio::test]
async fn a_recent_fetch_of_the_last_attempted_revision_is_reused_and_nothing_else() {
    use convoy::engine::source::Reuse;
    use std::time::Duration;
    let repo = GitRepo::new();
    repo.commit(&[("a.yaml", "v: 1\n")], "first");
    let (_dir, coordinator) = coordinator();
    let request = git(&repo.file_url(), GitReference::Branch("main".into()));
    let first = coordinator
        .ensure(crate::SCOPE, &request, None)
        .await
        .unwrap();
    let second_sha = repo.commit(&[("a.yaml", "v: 2\n")], "second");
    let within = |revision: Option<&str>| Reuse {
        max_age: Duration::from_secs(60),
        revision: revision.map(str::to_string),
        requested_at: None,
        waiter: None,
    };
    // The revision the Release ran, fetched a moment ago: reused, the new commit not seen yet.
    let reused = coordinator
        .ensure_reusing(crate::SCOPE, &request, None, &within(Some(&first.revision)))
        .await
        .unwrap();
    assert_eq!(reused.revision, first.revision);
    assert_eq!(coordinator.fetch_count(), 1, "no second fetch");
    // The Release last ran another revision (the controller applied a newer one): fetched.
    let fetched = coordinator
        .ensure_reusing(
            crate::SCOPE,
            &request,
            None,
            &within(Some("main@sha1:other")),
        )
        .await
        .unwrap();
    assert_eq!(fetched.revision, format!("main@sha1:{second_sha}"));
    assert_eq!(coordinator.fetch_count(), 2);
    // Too old (max_age zero: the CLI, or a /sync request): fetched.
    let third_sha = repo.commit(&[("a.yaml", "v: 3\n")], "third");
    let fresh = coordinator
        .ensure_reusing(crate::SCOPE, &request, None, &Reuse::default())
        .await
        .unwrap();
    assert_eq!(fresh.revision, format!("main@sha1:{third_sha}"));
    assert_eq!(coordinator.fetch_count(), 3);
    // A /sync request made after the fetch started: fetched anew; one made before: reused.
    let fourth_sha = repo.commit(&[("a.yaml", "v: 4\n")], "fourth");
    let after_request = coordinator
        .ensure_reusing(
            crate::SCOPE,
            &request,
            None,
            &Reuse {
                requested_at: Some(std::time::SystemTime::now()),
                ..within(Some(&fresh.revision))
            },
        )
        .await
        .unwrap();
    assert_eq!(after_request.revision, format!("main@sha1:{fourth_sha}"));
    assert_eq!(coordinator.fetch_count(), 4);
    let before_request = coordinator
        .ensure_reusing(
            crate::SCOPE,
            &request,
            None,
            &Reuse {
                requested_at: Some(std::time::SystemTime::now() - Duration::from_secs(30)),
                ..within(Some(&after_request.revision))
            },
        )
        .await
        .unwrap();
    assert_eq!(before_request.revision, after_request.revision);
    assert_eq!(coordinator.fetch_count(), 4);
    // Another scope (another GitRepository, maybe another tenant's) never shares a fetch.
    coordinator
        .ensure_reusing("GitRepository/other/repo", &request, None, &within(None))
        .await
        .unwrap();
    assert_eq!(coordinator.fetch_count(), 5);
}

#[tokio::test]
async fn over_a_local_git_daemon() {
    let repo = GitRepo::new();
    let sha = repo.commit(&[("a.yaml", "v: 1\n")], "first");
    let daemon = git_daemon(repo.base());
    let (_dir, coordinator) = coordinator();
    let url = format!("git://127.0.0.1:{}/repo.git", daemon.port);
    let artifact = coordinator
        .ensure(
            crate::SCOPE,
            &git(&url, GitReference::Branch("main".into())),
            None,
        )
        .await
        .unwrap();
    assert_eq!(artifact.revision, format!("main@sha1:{sha}"));
    assert_eq!(read(&artifact, "a.yaml"), "v: 1\n");
}

#[tokio::test]
async fn over_smart_http_with_basic_auth_from_credentials() {
    let repo = GitRepo::new();
    repo.commit(&[("a.yaml", "v: 1\n")], "first");
    let server = http_server(repo.base(), Some("alice:s3cret"), true);
    let url = format!("http://127.0.0.1:{}/repo.git", server.port);
    let request = git(&url, GitReference::Branch("main".into()));

    let (_dir, coordinator) = coordinator();
    let err = coordinator
        .ensure(crate::SCOPE, &request, None)
        .await
        .unwrap_err();
    assert!(matches!(err, SourceError::NotReady { .. }), "{err}");

    let good = Credentials {
        username: Some("alice".into()),
        password: Some("s3cret".into()),
        ..Default::default()
    };
    let artifact = coordinator
        .ensure(crate::SCOPE, &request, Some(&good))
        .await
        .unwrap();
    assert_eq!(read(&artifact, "a.yaml"), "v: 1\n");

    let (_dir2, fresh) = crate::coordinator();
    let wrong = Credentials {
        username: Some("alice".into()),
        password: Some("wrong".into()),
        ..Default::default()
    };
    let err = fresh
        .ensure(crate::SCOPE, &request, Some(&wrong))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        !err.contains("wrong"),
        "the password is not in the message: {err}"
    );
}

#[tokio::test]
async fn a_symlink_that_leaves_the_checkout_is_refused() {
    let repo = GitRepo::new();
    repo.commit(&[("a.yaml", "v: 1\n")], "first");
    repo.commit_symlink("app/creds", "../../../../etc/passwd");
    let (_dir, coordinator) = coordinator();
    let err = coordinator
        .ensure(
            crate::SCOPE,
            &git(&repo.file_url(), GitReference::Branch("main".into())),
            None,
        )
        .await
        .unwrap_err();
    let message = format!("{:#}", anyhow::Error::new(err));
    assert!(
        message.contains("\"app/creds\" is a link that points outside"),
        "{message}"
    );
}

#[tokio::test]
async fn a_missing_branch_is_a_transient_error_naming_the_url() {
    let repo = GitRepo::new();
    repo.commit(&[("a.yaml", "v: 1\n")], "first");
    let (_dir, coordinator) = coordinator();
    let err = coordinator
        .ensure(
            crate::SCOPE,
            &git(&repo.file_url(), GitReference::Branch("nope".into())),
            None,
        )
        .await
        .unwrap_err();
    assert!(matches!(err, SourceError::NotReady { .. }));
    assert!(
        err.to_string()
            .starts_with(&format!("cannot fetch {}", repo.file_url())),
        "{err}"
    );
}

#[tokio::test]
async fn concurrent_fetches_of_one_revision_are_deduplicated() {
    let repo = GitRepo::new();
    repo.commit(&[("a.yaml", "v: 1\n")], "first");
    let (_dir, coordinator) = coordinator();
    let coordinator = Arc::new(coordinator);
    let request = git(&repo.file_url(), GitReference::Branch("main".into()));
    let tasks: Vec<_> = (0..6)
        .map(|_| {
            let c = coordinator.clone();
            let r = request.clone();
            tokio::spawn(async move { c.ensure(crate::SCOPE, &r, None).await.unwrap() })
        })
        .collect();
    let mut digests = Vec::new();
    for t in tasks {
        digests.push(t.await.unwrap().digest);
    }
    digests.dedup();
    assert_eq!(digests.len(), 1);
    assert_eq!(
        coordinator.fetch_count(),
        1,
        "six concurrent requests, one fetch"
    );
}

#[tokio::test]
async fn over_ssh_with_a_key_and_known_hosts_from_credentials() {
    let repo = GitRepo::new();
    repo.commit(&[("a.yaml", "v: ssh\n")], "first");
    let keys = tempfile::tempdir().unwrap();
    let (server, identity, known_hosts) = sshd(keys.path());
    let url = format!(
        "ssh://{}@127.0.0.1:{}{}",
        user_name(),
        server.port,
        repo.base().join("repo.git").display()
    );
    let request = git(&url, GitReference::Branch("main".into()));
    // The keys of the GitRepository's secretRef Secret, as the controller reads them.
    let secret_data = std::collections::BTreeMap::from([
        ("identity".to_string(), identity.clone()),
        ("known_hosts".to_string(), known_hosts.into_bytes()),
    ]);
    let good = Credentials::from_secret_data(&secret_data);
    let (_dir, coordinator) = coordinator();
    let artifact = coordinator
        .ensure(crate::SCOPE, &request, Some(&good))
        .await
        .unwrap();
    assert_eq!(read(&artifact, "a.yaml"), "v: ssh\n");
    assert!(
        artifact.revision.starts_with("main@sha1:"),
        "{}",
        artifact.revision
    );

    // known_hosts pins the server: another host key is refused, not accepted.
    let other = tempfile::tempdir().unwrap();
    let out = std::process::Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(other.path().join("k"))
        .output()
        .unwrap();
    assert!(out.status.success());
    let impostor = format!(
        "[127.0.0.1]:{} {}",
        server.port,
        std::fs::read_to_string(other.path().join("k.pub"))
            .unwrap()
            .trim()
    );
    let pinned_elsewhere = Credentials {
        identity: Some(identity),
        known_hosts: Some(impostor.into_bytes()),
        ..Default::default()
    };
    let (_dir2, fresh) = crate::coordinator();
    let err = fresh
        .ensure(crate::SCOPE, &request, Some(&pinned_elsewhere))
        .await
        .unwrap_err();
    assert!(matches!(err, SourceError::NotReady { .. }), "{err}");
    assert!(
        err.to_string().to_lowercase().contains("host key"),
        "the error names the host key check: {err}"
    );
}

/// A server that accepts and never answers: the fetch ends at its deadline, naming it, and
/// the coordinator is free for the next request.
#[tokio::test]
async fn a_fetch_that_hangs_ends_at_the_fetch_deadline() {
    let (port, _) = crate::support::servers::silent_server();
    let dir = tempfile::tempdir().unwrap();
    let coordinator = convoy::engine::source::Coordinator::with_policy(
        convoy::engine::source::Cache::new(dir.path()),
        convoy::engine::source::SourcePolicy {
            fetch_timeout: std::time::Duration::from_secs(2),
            ..Default::default()
        },
    );
    let url = format!("http://127.0.0.1:{port}/repo.git");
    let started = std::time::Instant::now();
    let err = coordinator
        .ensure(
            crate::SCOPE,
            &git(&url, GitReference::Branch("main".into())),
            None,
        )
        .await
        .unwrap_err();
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
    assert_eq!(
        err.to_string(),
        format!("cannot fetch {url}: the fetch did not finish within 2s (the fetch deadline)")
    );
}

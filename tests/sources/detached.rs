//! The daemon's fetches (`SourcePolicy::detached`): a caller waits for a fetch only a while,
//! is woken when it ends and then takes its result; one namespace's sources take at most
//! their share of the fetches running at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use convoy::engine::source::{
    Cache, Coordinator, Detached, GitReference, Reuse, SourceError, SourcePolicy, SourceRequest,
};

use crate::support::servers::GitRepo;

fn main_of(url: &str) -> SourceRequest {
    SourceRequest::Git {
        url: url.to_string(),
        reference: GitReference::Branch("main".into()),
    }
}

/// A Git server that accepts connections and never answers; how many it accepted.
fn silent_server() -> (String, Arc<AtomicUsize>) {
    let (port, accepted) = crate::support::servers::silent_server();
    (format!("http://127.0.0.1:{port}"), accepted)
}

fn daemon_coordinator(
    dir: &tempfile::TempDir,
    fetch_timeout: Duration,
    detached: Detached,
) -> Coordinator {
    Coordinator::with_policy(
        Cache::new(dir.path()),
        SourcePolicy {
            fetch_timeout,
            detached: Some(detached),
            ..Default::default()
        },
    )
}

/// The fetch a caller was told to come back for.
fn come_back_for(err: &SourceError) -> convoy::engine::source::coordinator::FetchWait {
    err.fetching()
        .cloned()
        .unwrap_or_else(|| panic!("expected a fetch still running: {err}"))
}

/// Reuse rules that take no earlier fetch, for the caller `waiter`.
fn strict(waiter: &str) -> Reuse {
    Reuse {
        max_age: Duration::ZERO,
        revision: Some("main@sha1:0000000000000000000000000000000000000000".into()),
        requested_at: None,
        waiter: Some(waiter.into()),
    }
}

#[tokio::test]
async fn a_caller_stops_waiting_for_a_hung_fetch_and_takes_its_failure_when_woken() {
    let (server, _) = silent_server();
    let dir = tempfile::tempdir().unwrap();
    let coordinator = daemon_coordinator(
        &dir,
        Duration::from_secs(3),
        Detached {
            patience: Duration::from_millis(200),
            total: 8,
            per_namespace: 2,
            slow_after: Duration::from_secs(600),
        },
    );
    let url = format!("{server}/repo.git");
    let request = main_of(&url);
    let web = strict("Release/apps/web");
    let err = coordinator
        .ensure_reusing(crate::SCOPE, &request, None, &web)
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), format!("{url} is still being fetched"));
    // Another caller does not wait for a fetch that runs already, not even its patience.
    let api = strict("Release/apps/api");
    let err_api = tokio::time::timeout(
        Duration::from_millis(150),
        coordinator.ensure_reusing(crate::SCOPE, &request, None, &api),
    )
    .await
    .expect("told at once")
    .unwrap_err();
    tokio::time::timeout(Duration::from_secs(60), come_back_for(&err).finished())
        .await
        .expect("woken when the fetch ends");
    come_back_for(&err_api);
    let deadline =
        format!("cannot fetch {url}: the fetch did not finish within 3s (the fetch deadline)");
    for waiter in [&web, &api] {
        let err = coordinator
            .ensure_reusing(crate::SCOPE, &request, None, waiter)
            .await
            .unwrap_err();
        assert_eq!(err.to_string(), deadline);
    }
    assert_eq!(
        coordinator.fetch_count(),
        1,
        "the failure was kept for both"
    );
    // Taken: the next pass of either fetches again.
    let err = coordinator
        .ensure_reusing(crate::SCOPE, &request, None, &web)
        .await
        .unwrap_err();
    come_back_for(&err);
    assert_eq!(coordinator.fetch_count(), 2);
}

#[tokio::test]
async fn a_fetch_a_caller_was_told_to_come_back_for_is_kept_for_it_alone() {
    let repo = GitRepo::new();
    let head = repo.commit(&[("a.yaml", "v: 1\n")], "first");
    let dir = tempfile::tempdir().unwrap();
    // No patience at all: every fetch goes on after its caller has been told to come back.
    let coordinator = daemon_coordinator(
        &dir,
        Duration::from_secs(60),
        Detached {
            patience: Duration::ZERO,
            total: 8,
            per_namespace: 2,
            slow_after: Duration::from_secs(600),
        },
    );
    let request = main_of(&repo.file_url());
    // The Release last attempted another revision and takes no earlier fetch: the one it
    // was told to come back for started after it asked.
    let web = strict("Release/apps/web");
    let err = coordinator
        .ensure_reusing(crate::SCOPE, &request, None, &web)
        .await
        .unwrap_err();
    tokio::time::timeout(Duration::from_secs(60), come_back_for(&err).finished())
        .await
        .expect("woken when the fetch ends");
    // Another Release with the same rules was not told to: it fetches anew.
    let err = coordinator
        .ensure_reusing(crate::SCOPE, &request, None, &strict("Release/apps/api"))
        .await
        .unwrap_err();
    come_back_for(&err).finished().await;
    assert_eq!(coordinator.fetch_count(), 2);
    let artifact = coordinator
        .ensure_reusing(crate::SCOPE, &request, None, &web)
        .await
        .unwrap();
    assert_eq!(artifact.revision, format!("main@sha1:{head}"));
    // A /sync asked after the fetch started is a fetch of its own.
    let after_push = Reuse {
        requested_at: Some(SystemTime::now()),
        ..strict("Release/apps/api")
    };
    let err = coordinator
        .ensure_reusing(crate::SCOPE, &request, None, &after_push)
        .await
        .unwrap_err();
    come_back_for(&err);
    assert_eq!(coordinator.fetch_count(), 3);
}

#[tokio::test]
async fn one_namespaces_sources_take_at_most_their_share_of_the_fetches() {
    let (server, accepted) = silent_server();
    let repo = GitRepo::new();
    let head = repo.commit(&[("a.yaml", "v: 1\n")], "first");
    let dir = tempfile::tempdir().unwrap();
    let coordinator = daemon_coordinator(
        &dir,
        Duration::from_secs(600),
        Detached {
            patience: Duration::from_secs(60),
            total: 3,
            per_namespace: 2,
            slow_after: Duration::from_secs(600),
        },
    );
    // Three sources of namespace `tarpit` that never answer: two fetches run, one waits for
    // its namespace's place (its caller is told to come back at once, not after its patience).
    for i in 0..3 {
        let scope = format!("GitRepository/tarpit/slow-{i}");
        let request = main_of(&format!("{server}/repo-{i}.git"));
        let coordinator = &coordinator;
        let ask = async move {
            coordinator
                .ensure_reusing(
                    &scope,
                    &request,
                    None,
                    &strict(&format!("Release/tarpit/{i}")),
                )
                .await
        };
        if i < 2 {
            // Started at once: waits its patience (60 s) on a server that never answers.
            assert!(
                tokio::time::timeout(Duration::from_millis(300), ask)
                    .await
                    .is_err()
            );
        } else {
            let err = tokio::time::timeout(Duration::from_secs(5), ask)
                .await
                .expect("a fetch waiting for its place does not hold its caller")
                .unwrap_err();
            come_back_for(&err);
        }
    }
    crate::support::eventually("two fetches to be held", Duration::from_secs(30), || {
        let n = accepted.load(Ordering::SeqCst);
        async move { (n >= 2).then_some(()) }
    })
    .await;
    // Another namespace's source is fetched with the third place.
    let artifact = tokio::time::timeout(
        Duration::from_secs(60),
        coordinator.ensure("GitRepository/team/app", &main_of(&repo.file_url()), None),
    )
    .await
    .expect("another namespace's fetch does not wait for the tarpit's")
    .unwrap();
    assert_eq!(artifact.revision, format!("main@sha1:{head}"));
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        2,
        "the third waits for its namespace"
    );
}

/// Tenants whose sources never answer, in as many namespaces as there are places, held every
/// place until the fetch deadline, and every other namespace's fetch waited for one. A fetch
/// past `slow_after` moves to a slow fetch's place: the next fetch starts.
#[tokio::test]
async fn slow_fetches_leave_their_places_to_other_namespaces() {
    let (server, accepted) = silent_server();
    let repo = GitRepo::new();
    let head = repo.commit(&[("a.yaml", "v: 1\n")], "first");
    let dir = tempfile::tempdir().unwrap();
    let coordinator = daemon_coordinator(
        &dir,
        Duration::from_secs(600),
        Detached {
            patience: Duration::from_millis(100),
            total: 2,
            per_namespace: 1,
            slow_after: Duration::from_millis(500),
        },
    );
    // Two namespaces' sources that never answer take both places.
    for tenant in ["tarpit-a", "tarpit-b"] {
        let err = coordinator
            .ensure_reusing(
                &format!("GitRepository/{tenant}/slow"),
                &main_of(&format!("{server}/{tenant}.git")),
                None,
                &strict(&format!("Release/{tenant}/app")),
            )
            .await
            .unwrap_err();
        come_back_for(&err);
    }
    crate::support::eventually("both fetches to be held", Duration::from_secs(30), || {
        let n = accepted.load(Ordering::SeqCst);
        async move { (n == 2).then_some(()) }
    })
    .await;
    // Another namespace's source is fetched once they are slow, long before their deadline.
    let (team, request, reuse) = (
        "GitRepository/team/app",
        main_of(&repo.file_url()),
        strict("Release/team/app"),
    );
    let asked = coordinator.ensure_reusing(team, &request, None, &reuse);
    let artifact = match tokio::time::timeout(Duration::from_secs(30), asked)
        .await
        .expect("another namespace's fetch does not wait for the tarpits' deadline")
    {
        Ok(artifact) => artifact,
        Err(err) => {
            tokio::time::timeout(Duration::from_secs(30), come_back_for(&err).finished())
                .await
                .expect("its fetch ends long before the tarpits' deadline");
            coordinator
                .ensure_reusing(team, &request, None, &reuse)
                .await
                .unwrap()
        }
    };
    assert_eq!(artifact.revision, format!("main@sha1:{head}"));
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
}

//! What a long-running coordinator keeps: the results and cached content its callers use;
//! what no one used for the retention (older commits' trees, deleted sources' mirrors) goes,
//! and is fetched again if asked for.

use std::path::Path;
use std::time::{Duration, SystemTime};

use convoy::engine::source::{
    Cache, Coordinator, Detached, GitReference, SourcePolicy, SourceRequest,
};

use crate::support::servers::GitRepo;

const HOUR: Duration = Duration::from_secs(3600);

fn git(url: &str, reference: GitReference) -> SourceRequest {
    SourceRequest::Git {
        url: url.to_string(),
        reference,
    }
}

/// Make everything under `dir/<kind>/` look unused for two hours.
fn age_all(dir: &Path, kind: &str) {
    for entry in std::fs::read_dir(dir.join(kind)).unwrap().flatten() {
        std::fs::File::open(entry.path())
            .unwrap()
            .set_modified(SystemTime::now() - 2 * HOUR)
            .unwrap();
    }
}

fn count(dir: &Path, kind: &str) -> usize {
    std::fs::read_dir(dir.join(kind)).map_or(0, |d| d.count())
}

/// A repository followed through two commits, and another source deleted: the collection
/// keeps the tree of the commit the coordinator holds and its mirror, and removes the older
/// commit's tree and the deleted source's mirror and tree. Both are fetched again when asked
/// for, to the same content.
#[tokio::test]
async fn content_no_one_uses_goes_and_comes_back_when_asked_for() {
    let (dir, coordinator) = crate::coordinator();
    let followed = GitRepo::new();
    let first = followed.commit(&[("a.yaml", "v: 1\n")], "one");
    let main = git(&followed.file_url(), GitReference::Branch("main".into()));
    let old = coordinator.ensure(crate::SCOPE, &main, None).await.unwrap();
    followed.commit(&[("a.yaml", "v: 2\n")], "two");
    let now = coordinator.ensure(crate::SCOPE, &main, None).await.unwrap();
    let deleted = GitRepo::new();
    deleted.commit(&[("b.yaml", "b: 1\n")], "one");
    let gone_scope = "GitRepository/tests/deleted";
    let other = git(&deleted.file_url(), GitReference::Head);
    let gone = coordinator.ensure(gone_scope, &other, None).await.unwrap();
    assert_eq!(
        coordinator.slot_count(),
        4,
        "two requests and their mirrors"
    );

    coordinator.forget(gone_scope);
    assert_eq!(coordinator.slot_count(), 2);
    for kind in ["artifacts", "git"] {
        age_all(dir.path(), kind);
    }
    let (slots, collected) = coordinator.collect_garbage(HOUR).await;

    assert_eq!(
        slots, 0,
        "the followed repository's results were used just now"
    );
    assert_eq!(
        (collected.artifacts, collected.mirrors, collected.records),
        (2, 1, 2)
    );
    assert!(now.path.join("a.yaml").is_file());
    assert!(!old.path.exists());
    assert!(!gone.path.exists());
    assert_eq!(
        (count(dir.path(), "artifacts"), count(dir.path(), "git")),
        (1, 1)
    );

    let pinned = git(&followed.file_url(), GitReference::Commit(first.clone()));
    let again = coordinator
        .ensure(crate::SCOPE, &pinned, None)
        .await
        .unwrap();
    assert_eq!((again.digest, again.path), (old.digest, old.path.clone()));
    assert_eq!(
        std::fs::read_to_string(old.path.join("a.yaml")).unwrap(),
        "v: 1\n"
    );
    let back = coordinator.ensure(gone_scope, &other, None).await.unwrap();
    assert_eq!(back.digest, gone.digest);
    assert!(gone.path.join("b.yaml").is_file());
}

/// Results no one asked for in the retention are forgotten; those of a fetch still running
/// are not (its callers are owed them).
#[tokio::test]
async fn results_no_one_asks_for_are_forgotten_but_not_a_running_fetchs() {
    let (port, _) = crate::support::servers::silent_server();
    let dir = tempfile::tempdir().unwrap();
    let coordinator = Coordinator::with_policy(
        Cache::new(dir.path()),
        SourcePolicy {
            fetch_timeout: Duration::from_secs(60),
            detached: Some(Detached {
                patience: Duration::from_millis(100),
                total: 8,
                per_namespace: 2,
                slow_after: Duration::from_secs(600),
            }),
            ..Default::default()
        },
    );
    let hung = git(
        &format!("http://127.0.0.1:{port}/repo.git"),
        GitReference::Head,
    );
    let err = coordinator
        .ensure(crate::SCOPE, &hung, None)
        .await
        .unwrap_err();
    assert!(err.fetching().is_some(), "{err}");
    let repo = GitRepo::new();
    repo.commit(&[("a.yaml", "a: 1\n")], "one");
    let local = git(&repo.file_url(), GitReference::Head);
    let scope = "GitRepository/tests/local";
    let cli = Coordinator::new(Cache::new(dir.path()));
    cli.ensure(scope, &local, None).await.unwrap();
    assert_eq!(cli.slot_count(), 2);

    assert_eq!(cli.sweep(Duration::ZERO), 2);
    assert_eq!(cli.slot_count(), 0);
    assert_eq!(
        coordinator.sweep(Duration::ZERO),
        0,
        "the running fetch's slots went"
    );
    assert_eq!(coordinator.slot_count(), 2);
}

/// The tree a render takes from a result held in memory is marked used: it stays for the
/// retention although a newer commit's tree has replaced it in the results held (a render
/// that began before lost its tree under it).
#[tokio::test]
async fn a_tree_handed_out_from_memory_stays_for_the_retention() {
    let (dir, coordinator) = crate::coordinator();
    let repo = GitRepo::new();
    repo.commit(&[("a.yaml", "v: 1\n")], "one");
    let main = git(&repo.file_url(), GitReference::Branch("main".into()));
    coordinator.ensure(crate::SCOPE, &main, None).await.unwrap();
    age_all(dir.path(), "artifacts");
    let recent = convoy::engine::source::Reuse {
        max_age: HOUR,
        ..Default::default()
    };
    let rendering = coordinator
        .ensure_reusing(crate::SCOPE, &main, None, &recent)
        .await
        .unwrap();
    assert_eq!(coordinator.fetch_count(), 1, "taken from memory");
    repo.commit(&[("a.yaml", "v: 2\n")], "two");
    let newer = coordinator.ensure(crate::SCOPE, &main, None).await.unwrap();
    assert_ne!(newer.digest, rendering.digest);

    let (_, collected) = coordinator.collect_garbage(HOUR).await;

    assert_eq!(collected.artifacts, 0);
    assert!(rendering.path.join("a.yaml").is_file());
}

/// A repository whose Releases render it from results held in memory keeps its Git mirror
/// although no fetch ran for the retention.
#[tokio::test]
async fn a_mirror_stays_while_its_repositorys_results_are_used() {
    let (dir, coordinator) = crate::coordinator();
    let repo = GitRepo::new();
    repo.commit(&[("a.yaml", "v: 1\n")], "one");
    let main = git(&repo.file_url(), GitReference::Branch("main".into()));
    coordinator.ensure(crate::SCOPE, &main, None).await.unwrap();
    let retention = Duration::from_millis(500);
    // The retention has to pass for the results held to be unused (they count by a
    // monotonic clock, which a test cannot set back).
    tokio::time::sleep(2 * retention).await;
    let recent = convoy::engine::source::Reuse {
        max_age: HOUR,
        ..Default::default()
    };
    coordinator
        .ensure_reusing(crate::SCOPE, &main, None, &recent)
        .await
        .unwrap();
    assert_eq!(coordinator.fetch_count(), 1, "taken from memory");

    let (slots, collected) = coordinator.collect_garbage(retention).await;

    assert_eq!((slots, collected.mirrors), (0, 0));
    assert_eq!(count(dir.path(), "git"), 1);
}

/// Revision records and lock files no one used for the retention go, whether or not the
/// tree they name stays (a record for every commit of an unchanged tree, every scope gone,
/// and a lock file for every request ever made grew for ever); a fetch makes them again.
#[tokio::test]
async fn records_and_locks_no_one_used_go_even_while_their_tree_stays() {
    let (dir, coordinator) = crate::coordinator();
    let repo = GitRepo::new();
    repo.commit(&[("a.yaml", "v: 1\n")], "one");
    let head = git(&repo.file_url(), GitReference::Head);
    coordinator.ensure(crate::SCOPE, &head, None).await.unwrap();
    for i in 0..5 {
        let scope = format!("GitRepository/tests/gone-{i}");
        coordinator.ensure(&scope, &head, None).await.unwrap();
        coordinator.forget(&scope);
    }
    assert_eq!(count(dir.path(), "artifacts"), 1, "one tree for all");
    assert_eq!(
        (count(dir.path(), "revisions"), count(dir.path(), "locks")),
        (6, 6)
    );
    for kind in ["revisions", "locks", "artifacts", "git"] {
        age_all(dir.path(), kind);
    }

    let (_, collected) = coordinator.collect_garbage(HOUR).await;

    assert_eq!((collected.records, collected.locks), (6, 6));
    assert_eq!(collected.artifacts, 0, "the tree held stays");
    assert_eq!(collected.mirrors, 5);
    let again = coordinator
        .ensure(
            crate::SCOPE,
            &git(&repo.file_url(), GitReference::Branch("main".into())),
            None,
        )
        .await
        .unwrap();
    assert!(again.path.join("a.yaml").is_file());
    assert_eq!(
        (count(dir.path(), "revisions"), count(dir.path(), "locks")),
        (1, 1)
    );
}

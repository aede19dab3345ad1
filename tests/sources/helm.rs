use convoy::engine::source::{Credentials, SourceError, SourceRequest};

use crate::coordinator;
use crate::support::servers::{helm_package, http_server, write_chart};

fn helm(url: &str, version: Option<&str>) -> SourceRequest {
    SourceRequest::Helm {
        url: url.to_string(),
        chart: "greeter".to_string(),
        version: version.map(str::to_string),
    }
}

/// A chart repository with greeter 1.0.0, 1.2.0 and 2.0.0-rc.1.
fn chart_repo() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let charts = tempfile::tempdir().unwrap();
    for version in ["1.0.0", "1.2.0", "2.0.0-rc.1"] {
        let chart = write_chart(charts.path(), "greeter", version);
        helm_package(&chart, dir.path());
    }
    dir
}

fn chart_version(artifact: &convoy::engine::source::Artifact) -> String {
    std::fs::read_to_string(artifact.path.join("greeter/Chart.yaml")).unwrap()
}

#[tokio::test]
async fn a_chart_by_exact_version_and_by_range() {
    let repo = chart_repo();
    let server = http_server(repo.path(), None, false);
    let url = format!("http://127.0.0.1:{}", server.port);
    let (_dir, coordinator) = coordinator();

    let exact = coordinator
        .ensure(crate::SCOPE, &helm(&url, Some("1.0.0")), None)
        .await
        .unwrap();
    assert_eq!(exact.revision, "1.0.0");
    assert!(chart_version(&exact).contains("version: 1.0.0"));

    let range = coordinator
        .ensure(crate::SCOPE, &helm(&url, Some("^1.0")), None)
        .await
        .unwrap();
    assert_eq!(range.revision, "1.2.0");

    let newest = coordinator
        .ensure(crate::SCOPE, &helm(&url, None), None)
        .await
        .unwrap();
    assert_eq!(
        newest.revision, "1.2.0",
        "pre-releases are not picked without asking"
    );

    let pre = coordinator
        .ensure(crate::SCOPE, &helm(&url, Some(">=2.0.0-rc.0")), None)
        .await
        .unwrap();
    assert_eq!(pre.revision, "2.0.0-rc.1");

    let err = coordinator
        .ensure(crate::SCOPE, &helm(&url, Some("~3.0")), None)
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("no version satisfies \"~3.0\""),
        "{err}"
    );
}

#[tokio::test]
async fn basic_auth_from_credentials() {
    let repo = chart_repo();
    let server = http_server(repo.path(), Some("bob:hunter2"), false);
    let url = format!("http://127.0.0.1:{}", server.port);
    let (_dir, coordinator) = coordinator();

    let err = coordinator
        .ensure(crate::SCOPE, &helm(&url, Some("1.0.0")), None)
        .await
        .unwrap_err();
    assert!(matches!(err, SourceError::NotReady { .. }));
    assert!(err.to_string().contains("401"), "{err}");

    let credentials = Credentials {
        username: Some("bob".into()),
        password: Some("hunter2".into()),
        ..Default::default()
    };
    let artifact = coordinator
        .ensure(crate::SCOPE, &helm(&url, Some("1.0.0")), Some(&credentials))
        .await
        .unwrap();
    assert_eq!(artifact.revision, "1.0.0");
}

#[tokio::test]
async fn a_chart_archive_with_dot_dot_is_refused() {
    let repo = tempfile::tempdir().unwrap();
    // A chart archive whose second entry climbs out of the cache.
    let mut builder = tar::Builder::new(flate2::write::GzEncoder::new(
        Vec::new(),
        flate2::Compression::fast(),
    ));
    for (path, data) in [
        (
            "greeter/Chart.yaml",
            &b"apiVersion: v2\nname: greeter\nversion: 6.6.6\n"[..],
        ),
        ("../../escaped", b"x"),
    ] {
        let mut header = tar::Header::new_gnu();
        header.as_gnu_mut().unwrap().name[..path.len()].copy_from_slice(path.as_bytes());
        header.set_size(data.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        builder.append(&header, data).unwrap();
    }
    let bytes = builder.into_inner().unwrap().finish().unwrap();
    std::fs::write(repo.path().join("greeter-6.6.6.tgz"), bytes).unwrap();
    std::fs::write(
        repo.path().join("index.yaml"),
        "apiVersion: v1\nentries:\n  greeter:\n  - name: greeter\n    version: 6.6.6\n    urls: [greeter-6.6.6.tgz]\n",
    )
    .unwrap();
    let server = http_server(repo.path(), None, false);
    let (dir, coordinator) = coordinator();
    let err = coordinator
        .ensure(
            crate::SCOPE,
            &helm(&format!("http://127.0.0.1:{}", server.port), Some("6.6.6")),
            None,
        )
        .await
        .unwrap_err();
    let message = format!("{:#}", anyhow::Error::new(err));
    assert!(
        message.contains("archive entry \"../../escaped\" contains `..`"),
        "{message}"
    );
    assert!(!dir.path().parent().unwrap().join("escaped").exists());
}

use std::process::Command;

use convoy::engine::source::SourceRequest;
use oci_client::client::{ClientConfig, ClientProtocol, Config, ImageLayer};
use oci_client::secrets::RegistryAuth;

use crate::coordinator;
use crate::support::servers::{registry, write_chart};
use crate::support::testenv_bin;

fn oci(url: &str, tag: Option<&str>, digest: Option<&str>) -> SourceRequest {
    SourceRequest::Oci {
        url: url.to_string(),
        tag: tag.map(str::to_string),
        digest: digest.map(str::to_string),
        insecure: true,
    }
}

fn tar_gz(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let mut builder = tar::Builder::new(flate2::write::GzEncoder::new(
        Vec::new(),
        flate2::Compression::fast(),
    ));
    for (path, data) in entries {
        let mut header = tar::Header::new_gnu();
        header.as_gnu_mut().unwrap().name[..path.len()].copy_from_slice(path.as_bytes());
        header.set_size(data.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        builder.append(&header, *data).unwrap();
    }
    builder.into_inner().unwrap().finish().unwrap()
}

/// Push a manifest bundle (one Flux-style tar+gzip layer) and return its manifest digest.
async fn push_bundle(port: u16, repository: &str, tag: &str, layer: Vec<u8>) -> String {
    convoy::engine::http::ensure_crypto_provider();
    let client = oci_client::Client::new(ClientConfig {
        protocol: ClientProtocol::Http,
        ..Default::default()
    });
    let reference: oci_client::Reference = format!("127.0.0.1:{port}/{repository}:{tag}")
        .parse()
        .unwrap();
    let layers = vec![ImageLayer::new(
        layer,
        "application/vnd.cncf.flux.content.v1.tar+gzip".into(),
        None,
    )];
    let config = Config::new(
        b"{}".to_vec(),
        "application/vnd.cncf.flux.config.v1+json".into(),
        None,
    );
    let response = client
        .push(&reference, &layers, config, &RegistryAuth::Anonymous, None)
        .await
        .unwrap();
    let url = response.manifest_url;
    url.rsplit('/').next().unwrap().to_string()
}

#[tokio::test]
async fn a_manifest_bundle_by_tag_and_by_digest() {
    let storage = tempfile::tempdir().unwrap();
    let server = registry(storage.path());
    let bundle = tar_gz(&[(
        "app/cm.yaml",
        b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n",
    )]);
    let digest = push_bundle(server.port, "bundles/app", "v1", bundle).await;
    assert!(digest.starts_with("sha256:"), "{digest}");
    let url = format!("oci://127.0.0.1:{}/bundles/app", server.port);
    let (_dir, coordinator) = coordinator();

    let by_tag = coordinator
        .ensure(crate::SCOPE, &oci(&url, Some("v1"), None), None)
        .await
        .unwrap();
    assert_eq!(by_tag.revision, format!("v1@{digest}"));
    assert!(by_tag.path.join("app/cm.yaml").is_file());

    let by_digest = coordinator
        .ensure(crate::SCOPE, &oci(&url, None, Some(&digest)), None)
        .await
        .unwrap();
    assert_eq!(by_digest.revision, digest);
    assert_eq!(by_digest.digest, by_tag.digest);
}

#[tokio::test]
async fn a_helm_chart_pushed_with_helm_push() {
    let storage = tempfile::tempdir().unwrap();
    let server = registry(storage.path());
    let work = tempfile::tempdir().unwrap();
    let chart = write_chart(work.path(), "greeter", "0.4.2");
    let helm = testenv_bin().join("helm");
    let out = Command::new(&helm)
        .args(["package"])
        .arg(&chart)
        .arg("--destination")
        .arg(work.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(&helm)
        .arg("push")
        .arg(work.path().join("greeter-0.4.2.tgz"))
        .arg(format!("oci://127.0.0.1:{}/charts", server.port))
        .arg("--plain-http")
        .env("HELM_REGISTRY_CONFIG", work.path().join("registry.json"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let (_dir, coordinator) = coordinator();
    let url = format!("oci://127.0.0.1:{}/charts/greeter", server.port);
    let artifact = coordinator
        .ensure(crate::SCOPE, &oci(&url, Some("0.4.2"), None), None)
        .await
        .unwrap();
    let chart_yaml = std::fs::read_to_string(artifact.path.join("greeter/Chart.yaml")).unwrap();
    assert!(chart_yaml.contains("version: 0.4.2"));
}

#[tokio::test]
async fn a_layer_with_an_absolute_path_is_refused() {
    let storage = tempfile::tempdir().unwrap();
    let server = registry(storage.path());
    let bundle = tar_gz(&[("/tmp/convoy-escape.yaml", b"x: 1\n")]);
    push_bundle(server.port, "bundles/evil", "v1", bundle).await;
    let (_dir, coordinator) = coordinator();
    let url = format!("oci://127.0.0.1:{}/bundles/evil", server.port);
    let err = coordinator
        .ensure(crate::SCOPE, &oci(&url, Some("v1"), None), None)
        .await
        .unwrap_err();
    let message = format!("{:#}", anyhow::Error::new(err));
    assert!(message.contains("is an absolute path"), "{message}");
}

/// A registry that sends more of a layer than the manifest declares is cut off at the
/// declared size, before it fills memory: a small manifest cannot make the daemon hold
/// gigabytes. (The registry here stores the manifest as pushed, with a size that lies.)
#[tokio::test]
async fn a_layer_larger_than_its_manifest_declares_is_refused() {
    let storage = tempfile::tempdir().unwrap();
    let server = registry(storage.path());
    let bundle = tar_gz(&[("app/cm.yaml", b"apiVersion: v1\nkind: ConfigMap\n")]);
    push_bundle(server.port, "bundles/lying", "v1", bundle).await;
    let client = oci_client::Client::new(ClientConfig {
        protocol: ClientProtocol::Http,
        ..Default::default()
    });
    let reference = |tag: &str| -> oci_client::Reference {
        format!("127.0.0.1:{}/bundles/lying:{tag}", server.port)
            .parse()
            .unwrap()
    };
    let (mut manifest, _) = client
        .pull_image_manifest(&reference("v1"), &RegistryAuth::Anonymous)
        .await
        .unwrap();
    manifest.layers[0].size = 8;
    client
        .push_manifest(
            &reference("v2"),
            &oci_client::manifest::OciManifest::Image(manifest),
        )
        .await
        .unwrap();
    let (_dir, coordinator) = coordinator();
    let url = format!("oci://127.0.0.1:{}/bundles/lying", server.port);
    let err = coordinator
        .ensure(crate::SCOPE, &oci(&url, Some("v2"), None), None)
        .await
        .unwrap_err();
    let message = format!("{:#}", anyhow::Error::new(err));
    assert!(
        message.contains(
            "the registry sent more than the 8 bytes the manifest declares for the layer"
        ),
        "{message}"
    );
}

/// An artifact behind an image index (as `docker buildx` and some registries push them) is
/// read through the index's entry for this platform, and its revision is the index's tag.
#[tokio::test]
async fn a_bundle_behind_an_image_index_is_pulled_through_it() {
    let storage = tempfile::tempdir().unwrap();
    let server = registry(storage.path());
    let bundle = tar_gz(&[(
        "app/cm.yaml",
        b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n",
    )]);
    let digest = push_bundle(server.port, "bundles/indexed", "single", bundle).await;
    let other = tar_gz(&[("app/other.yaml", b"apiVersion: v1\nkind: ConfigMap\n")]);
    let decoy = push_bundle(server.port, "bundles/indexed", "decoy", other).await;
    let client = oci_client::Client::new(ClientConfig {
        protocol: ClientProtocol::Http,
        ..Default::default()
    });
    let reference: oci_client::Reference =
        format!("127.0.0.1:{}/bundles/indexed:multi", server.port)
            .parse()
            .unwrap();
    let (manifest, _) = client
        .pull_image_manifest(
            &format!("127.0.0.1:{}/bundles/indexed:single", server.port)
                .parse()
                .unwrap(),
            &RegistryAuth::Anonymous,
        )
        .await
        .unwrap();
    let size = serde_json::to_vec(&manifest).unwrap().len();
    let architecture = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    let index: oci_client::manifest::OciImageIndex = serde_json::from_value(serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [
            {"mediaType": "application/vnd.oci.image.manifest.v1+json",
             "digest": decoy, "size": size,
             "platform": {"architecture": "s390x", "os": "linux"}},
            {"mediaType": "application/vnd.oci.image.manifest.v1+json",
             "digest": digest, "size": size,
             "platform": {"architecture": architecture, "os": std::env::consts::OS}},
        ],
    }))
    .unwrap();
    client
        .push_manifest_list(&reference, &RegistryAuth::Anonymous, index)
        .await
        .unwrap();
    let (_dir, coordinator) = coordinator();
    let url = format!("oci://127.0.0.1:{}/bundles/indexed", server.port);
    let artifact = coordinator
        .ensure(crate::SCOPE, &oci(&url, Some("multi"), None), None)
        .await
        .unwrap();
    assert_eq!(artifact.revision, format!("multi@{digest}"));
    assert!(artifact.path.join("app/cm.yaml").is_file());
    assert!(!artifact.path.join("app/other.yaml").exists());
}

/// A stand-in registry on a port of its own: it answers `/v2/` (no authentication), then the
/// first other request with `manifest`, and ends with what that returned.
fn stand_in_registry(
    manifest: impl FnOnce(&mut std::net::TcpStream) -> usize + Send + 'static,
) -> (u16, std::thread::JoinHandle<usize>) {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = std::thread::spawn(move || {
        loop {
            let (mut stream, _) = listener.accept().unwrap();
            stream
                .set_write_timeout(Some(std::time::Duration::from_secs(10)))
                .unwrap();
            let mut request = [0u8; 4096];
            let n = stream.read(&mut request).unwrap_or(0);
            if request[..n].starts_with(b"GET /v2/ ") {
                let _ = stream.write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                );
                continue;
            }
            return manifest(&mut stream);
        }
    });
    (port, server)
}

/// What fetching `reference` (a tag or a digest) from the registry on `port` is refused with.
async fn oci_refused(port: u16, tag: Option<&str>, digest: Option<&str>) -> String {
    let (_dir, coordinator) = coordinator();
    let url = format!("oci://127.0.0.1:{port}/bundles/app");
    let err = coordinator
        .ensure(crate::SCOPE, &oci(&url, tag, digest), None)
        .await
        .unwrap_err();
    format!("{:#}", anyhow::Error::new(err))
}

/// A registry that sends a manifest without end (no Content-Length) is cut off at 4 MiB,
/// before the daemon's memory fills: the manifest was read whole by oci-client before.
/// (The stand-in stops at 512 MiB.)
#[tokio::test]
async fn a_registry_that_sends_a_manifest_without_end_is_cut_off() {
    use std::io::Write;
    let (port, server) = stand_in_registry(|stream| {
        stream
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/vnd.oci.image.manifest.v1+json\r\nConnection: close\r\n\r\n{\"schemaVersion\": 2, \"x\": \"")
            .unwrap();
        let block = vec![b'x'; 1 << 20];
        let mut sent = 0usize;
        while sent < 512 << 20 && stream.write_all(&block).is_ok() {
            sent += block.len();
        }
        sent
    });
    let message = oci_refused(port, Some("v1"), None).await;
    assert!(
        message.contains("the response is larger than 4194304 bytes"),
        "{message}"
    );
    let sent = tokio::task::spawn_blocking(move || server.join().unwrap())
        .await
        .unwrap();
    assert!(sent < 512 << 20, "the whole stream was read: {sent} bytes");
}

/// A manifest asked for by digest must be the one with that digest: a registry that sends
/// another is refused, and a digest convoy cannot check is refused before any request.
#[tokio::test]
async fn a_manifest_that_is_not_the_digest_asked_for_is_refused() {
    use std::io::Write;
    let body = br#"{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json", "config": {"mediaType": "a", "digest": "sha256:00", "size": 2}, "layers": []}"#;
    let (port, server) = stand_in_registry(|stream| {
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/vnd.oci.image.manifest.v1+json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        stream.write_all(head.as_bytes()).unwrap();
        stream.write_all(body).unwrap();
        body.len()
    });
    let asked = format!("sha256:{}", "a".repeat(64));
    let message = oci_refused(port, None, Some(&asked)).await;
    let sent = format!(
        "sha256:{}",
        hex::encode(<sha2::Sha256 as sha2::Digest>::digest(body))
    );
    assert!(
        message.contains(&format!("the manifest sent has digest {sent}, not {asked}")),
        "{message}"
    );
    tokio::task::spawn_blocking(move || server.join().unwrap())
        .await
        .unwrap();
    for digest in [
        format!("sha512:{}", "a".repeat(128)),
        "sha256:/../../x".to_string(),
    ] {
        let message = oci_refused(port, None, Some(&digest)).await;
        assert!(
            message.contains(&format!(
                "digest {digest:?} is not a sha256 digest (sha256: and 64 hex digits), the only kind convoy checks"
            )),
            "{message}"
        );
    }
}

/// A digest the registry names — an image index's entry, a manifest's layer — goes into the
/// next address: one that is not a digest convoy or oci-client can check the bytes by
/// (`sha256:/../..`) is refused before that request is made.
#[tokio::test]
async fn digests_named_by_the_registry_must_be_checkable() {
    use std::io::Write;
    let architecture = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    let entry = "sha256:/../../../v2/other/manifests/latest";
    let index = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": entry, "size": 10,
            "platform": {"architecture": architecture, "os": std::env::consts::OS}}],
    });
    let layer = format!("sha512:{}", "0".repeat(64));
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": format!("sha256:{}", "0".repeat(64)), "size": 2},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
            "digest": layer, "size": 10}],
    });
    for (body, refusal) in [
        (
            index,
            format!("the image index names manifest {entry:?}, which is not a sha256 digest"),
        ),
        (
            manifest,
            format!("the manifest names layer {layer:?}, which is not a sha256 or sha512 digest"),
        ),
    ] {
        let body = serde_json::to_vec(&body).unwrap();
        let media_type = body_media_type(&body);
        let (port, server) = stand_in_registry(move |stream| {
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: {media_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            stream.write_all(head.as_bytes()).unwrap();
            stream.write_all(&body).unwrap();
            body.len()
        });
        let message = oci_refused(port, Some("v1"), None).await;
        assert!(message.contains(&refusal), "{message}");
        tokio::task::spawn_blocking(move || server.join().unwrap())
            .await
            .unwrap();
    }
}

fn body_media_type(body: &[u8]) -> String {
    let value: serde_json::Value = serde_json::from_slice(body).unwrap();
    value["mediaType"].as_str().unwrap().to_string()
}

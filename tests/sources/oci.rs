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

/// A request as a stand-in server saw it: its first line and its Authorization header.
#[derive(Debug, Clone)]
struct Seen {
    line: String,
    authorization: Option<String>,
}

/// A server that answers each request with `answer` (which writes the whole response, and
/// returns whether it was the last), one connection per request; it returns what it saw.
fn stand_in(
    mut answer: impl FnMut(&Seen, &mut std::net::TcpStream) -> bool + Send + 'static,
) -> (u16, std::thread::JoinHandle<Vec<Seen>>) {
    use std::io::BufRead;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = std::thread::spawn(move || {
        let mut seen = Vec::new();
        loop {
            let (mut stream, _) = listener.accept().unwrap();
            stream
                .set_write_timeout(Some(std::time::Duration::from_secs(10)))
                .unwrap();
            let mut reader = std::io::BufReader::new(stream.try_clone().unwrap());
            let mut request = Seen {
                line: String::new(),
                authorization: None,
            };
            reader.read_line(&mut request.line).unwrap();
            request.line = request.line.trim_end().to_string();
            loop {
                let mut header = String::new();
                reader.read_line(&mut header).unwrap();
                let header = header.trim_end();
                if header.is_empty() {
                    break;
                }
                if let Some((name, value)) = header.split_once(':')
                    && name.eq_ignore_ascii_case("authorization")
                {
                    request.authorization = Some(value.trim().to_string());
                }
            }
            let last = answer(&request, &mut stream);
            seen.push(request);
            if last {
                return seen;
            }
        }
    });
    (port, server)
}

fn respond(stream: &mut std::net::TcpStream, status: &str, headers: &str, body: &[u8]) {
    use std::io::Write;
    let head = format!(
        "HTTP/1.1 {status}\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(head.as_bytes());
    let _ = stream.write_all(body);
}

fn challenge(port: u16) -> String {
    format!(
        "WWW-Authenticate: Bearer realm=\"http://127.0.0.1:{port}/token\",service=\"stand-in\"\r\n"
    )
}

/// A registry that asks for a token (the Docker token flow, as Docker Hub, GHCR and Harbor
/// do): the Release's username and password go to the token endpoint the registry names,
/// and the token it gives authorizes the manifest's and the layers' pulls.
#[tokio::test]
async fn a_registry_token_authorizes_the_manifest_and_the_layers() {
    let layer = tar_gz(&[("app.yaml", b"kind: ConfigMap\n")]);
    let layer_digest = sha256_of(&layer);
    let manifest = one_layer_manifest(
        "application/vnd.cncf.flux.content.v1.tar+gzip",
        &layer_digest,
        layer.len(),
    );
    let port = std::sync::Arc::new(std::sync::OnceLock::new());
    let (bound, server) = stand_in({
        let (port, layer_digest) = (port.clone(), layer_digest.clone());
        move |seen, stream| {
            let line = seen.line.as_str();
            if line.starts_with("GET /v2/ ") {
                respond(
                    stream,
                    "401 Unauthorized",
                    &challenge(*port.get().unwrap()),
                    b"",
                );
            } else if line.starts_with("GET /token?") {
                respond(
                    stream,
                    "200 OK",
                    "",
                    br#"{"token": "t0k3n", "expires_in": 300}"#,
                );
            } else if line.starts_with("GET /v2/bundles/app/manifests/v1 ") {
                let media = "Content-Type: application/vnd.oci.image.manifest.v1+json\r\n";
                respond(stream, "200 OK", media, &manifest);
            } else if line.starts_with(&format!("GET /v2/bundles/app/blobs/{layer_digest} ")) {
                respond(stream, "200 OK", "", &layer);
                return true;
            } else {
                respond(stream, "404 Not Found", "", b"");
            }
            false
        }
    });
    port.set(bound).unwrap();
    let (_dir, coordinator) = coordinator();
    let credentials = convoy::engine::source::Credentials {
        username: Some("robot".into()),
        password: Some("s3cret".into()),
        ..Default::default()
    };
    let url = format!("oci://127.0.0.1:{bound}/bundles/app");
    let artifact = coordinator
        .ensure(
            crate::SCOPE,
            &oci(&url, Some("v1"), None),
            Some(&credentials),
        )
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(artifact.path.join("app.yaml")).unwrap(),
        "kind: ConfigMap\n"
    );
    let seen = tokio::task::spawn_blocking(move || server.join().unwrap())
        .await
        .unwrap();
    let lines: Vec<(&str, Option<&str>)> = seen
        .iter()
        .map(|s| (s.line.as_str(), s.authorization.as_deref()))
        .collect();
    let basic = format!(
        "Basic {}",
        base64::Engine::encode(&base64::engine::general_purpose::STANDARD, "robot:s3cret")
    );
    assert_eq!(
        lines,
        [
            ("GET /v2/ HTTP/1.1", None),
            (
                "GET /token?scope=repository%3Abundles%2Fapp%3Apull&service=stand-in HTTP/1.1",
                Some(basic.as_str())
            ),
            (
                "GET /v2/bundles/app/manifests/v1 HTTP/1.1",
                Some("Bearer t0k3n")
            ),
            (
                format!("GET /v2/bundles/app/blobs/{layer_digest} HTTP/1.1").as_str(),
                Some("Bearer t0k3n")
            ),
        ]
    );
}

/// The token endpoint is an address the registry chooses — any service the daemon can
/// reach. Its error answer's body is never shown (only its status), and an answer without
/// end is cut off at 1 MiB: oci-client read it whole and put an error's body in the message.
#[tokio::test]
async fn a_token_endpoint_is_read_no_further_than_a_token() {
    use std::io::Write;
    for endless in [false, true] {
        let port = std::sync::Arc::new(std::sync::OnceLock::new());
        let sent = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (bound, server) = stand_in({
            let (port, sent) = (port.clone(), sent.clone());
            move |seen, stream| {
                if seen.line.starts_with("GET /v2/ ") {
                    respond(
                        stream,
                        "401 Unauthorized",
                        &challenge(*port.get().unwrap()),
                        b"",
                    );
                    return false;
                }
                if !endless {
                    respond(
                        stream,
                        "500 Internal Server Error",
                        "",
                        b"db password: hunter2",
                    );
                    return true;
                }
                let _ =
                    stream.write_all(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n{\"token\": \"");
                let chunk = [b'a'; 64 * 1024];
                while sent.load(std::sync::atomic::Ordering::Relaxed) < 512 << 20 {
                    if stream.write_all(&chunk).is_err() {
                        break;
                    }
                    sent.fetch_add(chunk.len(), std::sync::atomic::Ordering::Relaxed);
                }
                true
            }
        });
        port.set(bound).unwrap();
        let message = oci_refused(bound, Some("v1"), None).await;
        tokio::task::spawn_blocking(move || server.join().unwrap())
            .await
            .unwrap();
        if endless {
            assert!(
                message.contains("the response is larger than 1048576 bytes"),
                "{message}"
            );
            let sent = sent.load(std::sync::atomic::Ordering::Relaxed);
            assert!(sent < 512 << 20, "the whole stream was read: {sent} bytes");
        } else {
            assert!(
                message.contains(&format!(
                    "the token endpoint http://127.0.0.1:{bound}/token answered HTTP 500"
                )),
                "{message}"
            );
            assert!(!message.contains("hunter2"), "{message}");
        }
    }
}

/// A layer is checked against its digest as it is pulled: bytes that are not the layer the
/// manifest names are refused, never unpacked.
#[tokio::test]
async fn a_layer_whose_bytes_are_not_its_digest_is_refused() {
    let named = sha256_of(b"named");
    let manifest = one_layer_manifest("application/vnd.oci.image.layer.v1.tar+gzip", &named, 5);
    let (port, server) = stand_in(move |seen, stream| {
        if seen.line.starts_with("GET /v2/bundles/app/manifests/") {
            let media = "Content-Type: application/vnd.oci.image.manifest.v1+json\r\n";
            respond(stream, "200 OK", media, &manifest);
        } else if seen.line.starts_with("GET /v2/bundles/app/blobs/") {
            respond(stream, "200 OK", "", b"other");
            return true;
        } else {
            respond(stream, "200 OK", "", b"");
        }
        false
    });
    let message = oci_refused(port, Some("v1"), None).await;
    tokio::task::spawn_blocking(move || server.join().unwrap())
        .await
        .unwrap();
    let sent = sha256_of(b"other");
    assert!(
        message.contains(&format!("layer {named} was sent with digest {sent}")),
        "{message}"
    );
}

fn sha256_of(bytes: &[u8]) -> String {
    format!(
        "sha256:{}",
        hex::encode(<sha2::Sha256 as sha2::Digest>::digest(bytes))
    )
}

/// An image manifest of one layer.
fn one_layer_manifest(media_type: &str, digest: &str, size: usize) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": format!("sha256:{}", "0".repeat(64)), "size": 2},
        "layers": [{"mediaType": media_type, "digest": digest, "size": size}],
    }))
    .unwrap()
}

/// A layer is written to the cache's temporary space as it arrives, not held in memory: a
/// GiB layer held by each of a few Releases' pulls would fill the daemon's memory. Half-way
/// through the layer, its first half is on disk.
#[tokio::test]
async fn a_layer_goes_to_disk_as_it_arrives() {
    use std::io::Write;
    let layer = tar_gz(&[("app.yaml", &vec![b'#'; 4 << 20][..])]);
    let half = layer.len() / 2;
    let manifest = one_layer_manifest(
        "application/vnd.oci.image.layer.v1.tar+gzip",
        &sha256_of(&layer),
        layer.len(),
    );
    let (go_on, wait) = std::sync::mpsc::channel::<()>();
    let (port, server) = stand_in(move |seen, stream| {
        if seen.line.starts_with("GET /v2/bundles/app/manifests/") {
            let media = "Content-Type: application/vnd.oci.image.manifest.v1+json\r\n";
            respond(stream, "200 OK", media, &manifest);
        } else if seen.line.starts_with("GET /v2/bundles/app/blobs/") {
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                layer.len()
            );
            stream.write_all(head.as_bytes()).unwrap();
            stream.write_all(&layer[..half]).unwrap();
            stream.flush().unwrap();
            wait.recv().unwrap();
            stream.write_all(&layer[half..]).unwrap();
            return true;
        } else {
            respond(stream, "200 OK", "", b"");
        }
        false
    });
    let (dir, coordinator) = coordinator();
    let url = format!("oci://127.0.0.1:{port}/bundles/app");
    let pull = tokio::spawn(async move {
        coordinator
            .ensure(crate::SCOPE, &oci(&url, Some("v1"), None), None)
            .await
            .map(|a| a.path)
    });
    let tmp = dir.path().join("tmp");
    let on_disk = || {
        walkdir(&tmp)
            .into_iter()
            .filter(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("layer-"))
            })
            .filter_map(|p| std::fs::metadata(p).ok())
            .map(|m| m.len() as usize)
            .max()
            .unwrap_or(0)
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while on_disk() < half {
        assert!(
            std::time::Instant::now() < deadline,
            "half the layer never reached the disk"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    go_on.send(()).unwrap();
    let path = pull.await.unwrap().unwrap();
    assert_eq!(
        std::fs::metadata(path.join("app.yaml")).unwrap().len(),
        4 << 20
    );
    tokio::task::spawn_blocking(move || server.join().unwrap())
        .await
        .unwrap();
}

/// Every file under `root`.
fn walkdir(root: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files
}

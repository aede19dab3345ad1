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

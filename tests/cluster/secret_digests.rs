//! Secret values as a reader of CI logs (where `convoy diff` output lands) or of
//! ReleaseInventory objects would attack them: every digest convoy prints or stores is keyed
//! with the installation's key, so a 4-digit value cannot be found by hashing all 10,000
//! candidates, and "changed"/"unchanged" stay exact.

use std::sync::Arc;

use convoy::engine::api::{Reason, Release, ReleaseInventory};
use convoy::engine::digest_key::{KeyCell, ensure};
use convoy::engine::inventory::{InventoryHandle, Member, members};
use kube::Api;
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::support::STORE_NAMESPACE;
use crate::support::fixture::Fixture;

fn secret(pin: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\nstringData:\n  pin: \"{pin}\"\n  user: app\n"
    )
}

/// A Fixture whose Context reads the installation's digest key (created if missing).
async fn keyed_fixture(test: &str, pin: &str) -> Fixture {
    let mut f = Fixture::new(test, &[("s.yaml", &secret(pin))], json!({})).await;
    ensure(&f.env.client, STORE_NAMESPACE).await.unwrap();
    f.ctx.digest_key = Some(Arc::new(KeyCell::new(
        f.env.client.clone(),
        STORE_NAMESPACE,
    )));
    f
}

/// Every run of 6 or more hex digits in `text` (what could be a digest or a digest prefix).
fn hex_runs(text: &str) -> Vec<String> {
    let mut runs = Vec::new();
    let mut current = String::new();
    for c in text.chars().chain(std::iter::once(' ')) {
        if c.is_ascii_hexdigit() {
            current.push(c.to_ascii_lowercase());
        } else {
            if current.len() >= 6 {
                runs.push(current.clone());
            }
            current.clear();
        }
    }
    runs
}

/// No run of hex digits in `texts` is a prefix of (or equal to) the unkeyed SHA-256 of any
/// 4-digit string, nor of the unkeyed SHA-256 of its base64.
fn assert_no_guessable_digest(texts: &[&str]) {
    use base64::Engine;
    let runs: Vec<String> = texts.iter().flat_map(|t| hex_runs(t)).collect();
    for n in 0..10_000 {
        let pin = format!("{n:04}");
        for candidate in [
            pin.clone(),
            base64::engine::general_purpose::STANDARD.encode(&pin),
        ] {
            let digest = hex::encode(Sha256::digest(candidate.as_bytes()));
            for run in &runs {
                assert!(
                    !digest.starts_with(run.as_str()),
                    "{run} is a prefix of sha256({candidate:?})"
                );
            }
        }
    }
}

fn inventory_text(inventory: &ReleaseInventory) -> String {
    serde_json::to_string(inventory).unwrap()
}

#[tokio::test]
async fn no_digest_in_the_diff_or_the_inventory_gives_away_a_4_digit_secret() {
    let f = keyed_fixture("secret-pin", "4821").await;
    let outcome = f.sync().await.outcome.unwrap();
    assert_eq!(outcome.reason, Reason::Applied, "{}", outcome.message);
    // Someone changes the value on the cluster.
    f.kubectl_apply(&json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "db", "namespace": f.env.namespace},
        "stringData": {"pin": "9913"}}))
        .await;
    let text = f.env.convoy(&["diff", "web"]);
    let json_out = f.env.convoy(&["diff", "web", "-o", "json"]);
    let (text, json_out) = (
        String::from_utf8_lossy(&text.stdout).into_owned(),
        String::from_utf8_lossy(&json_out.stdout).into_owned(),
    );
    let inventories: Api<ReleaseInventory> =
        Api::namespaced(f.env.client.clone(), &f.env.namespace);
    let inventory = inventories.get("web").await.unwrap();
    let entry = members(&inventory)
        .into_iter()
        .find(|e| e.kind == "Secret")
        .unwrap();
    assert!(
        entry
            .digest
            .as_deref()
            .unwrap_or_default()
            .starts_with("hmac:"),
        "{entry:?}"
    );
    for plain in ["4821", "9913"] {
        assert!(!text.contains(plain) && !json_out.contains(plain));
    }
    assert_no_guessable_digest(&[&text, &json_out, &inventory_text(&inventory)]);

    // Changed and unchanged are exact: the drifted key is changed, the other unchanged, with
    // equal keyed digests on both sides of the unchanged one.
    assert!(
        text.contains("  keys: pin changed, user unchanged\n"),
        "{text}"
    );
    let report: serde_json::Value = serde_json::from_str(&json_out).unwrap();
    let object = &report["objects"][0];
    assert_eq!(
        object["secretKeys"],
        json!([{"key": "pin", "change": "changed"}, {"key": "user", "change": "unchanged"}])
    );
    let (live, desired) = (&object["live"]["data"], &object["desired"]["data"]);
    assert_eq!(live["user"], desired["user"]);
    assert_ne!(live["pin"], desired["pin"]);
    assert!(live["pin"].as_str().unwrap().starts_with("hmac:"));
    // The same value digests the same in another run (the key is the installation's).
    let again = f.env.convoy(&["diff", "web", "-o", "json"]);
    let again: serde_json::Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(again["objects"][0]["live"], object["live"]);
}

#[tokio::test]
async fn without_the_key_the_cli_still_reports_exactly_which_keys_changed() {
    let f = keyed_fixture("secret-nokey", "1234").await;
    f.sync().await;
    f.kubectl_apply(&json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "db", "namespace": f.env.namespace},
        "stringData": {"pin": "4321"}}))
        .await;
    // A user who may work in the namespace but not read convoy's namespace.
    let ns = f.env.namespace.clone();
    f.kubectl_apply(&json!({"apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": "dev", "namespace": ns}}))
        .await;
    f.kubectl_apply(&json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "dev-convoy", "namespace": ns},
        "rules": [
            {"apiGroups": ["core.convoy.kumodo.io"], "resources": ["releases", "releaseinventories"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["source.convoy.kumodo.io"], "resources": ["gitrepositories"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list", "watch", "patch"]},
        ]}))
        .await;
    f.kubectl_apply(
        &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "dev-convoy", "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "dev-convoy"},
        "subjects": [{"kind": "ServiceAccount", "name": "dev", "namespace": ns}]}),
    )
    .await;
    let dev = f.env.service_account_kubeconfig(&ns, "dev");
    let out = std::process::Command::new(crate::support::convoy_bin())
        .arg("--kubeconfig")
        .arg(dev.path())
        .args(["-n", &ns, "diff", "web", "--render-store", "none"])
        .env("PATH", crate::support::path_with_testenv())
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("  keys: pin changed, user unchanged\n"),
        "{text}"
    );
    assert!(text.contains("-  pin: (old value)\n"), "{text}");
    assert!(text.contains("+  pin: (new value)\n"), "{text}");
    assert!(text.contains("   user: (unchanged)\n"), "{text}");
    assert!(!text.contains("hmac:"), "no digest without the key: {text}");
}

#[tokio::test]
async fn an_old_style_inventory_digest_counts_as_changed_once_and_is_rewritten_keyed() {
    let f = keyed_fixture("secret-oldstyle", "2468").await;
    f.sync().await;
    let release: Release = f.release().await;
    let handle = InventoryHandle::for_release(f.env.client.clone(), &release);
    let inventory = handle.get().await.unwrap().unwrap();
    // What convoy recorded before keyed digests: an unkeyed SHA-256 of the object.
    let old: Vec<Member> = members(&inventory)
        .iter()
        .map(|e| {
            let mut m = Member::from_entry(e);
            m.digest = Some(hex::encode(&Sha256::digest(b"the rendered object")[..16]));
            m
        })
        .collect();
    handle.put(&old).await.unwrap();
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(f.env.client.clone(), &f.env.namespace);
    let managed_before = secrets.get("db").await.unwrap().metadata.managed_fields;
    f.sync().await;
    let rewritten = handle.get().await.unwrap().unwrap();
    let digest = members(&rewritten)[0].digest.clone().unwrap_or_default();
    assert!(digest.starts_with("hmac:"), "{digest}");
    // Re-sent once (an apply of an unchanged object changes nothing on the server), then
    // skipped: the inventory keeps the keyed digest.
    f.sync().await;
    let after = handle.get().await.unwrap().unwrap();
    assert_eq!(members(&after)[0].digest.as_deref(), Some(digest.as_str()));
    assert_eq!(
        secrets.get("db").await.unwrap().metadata.managed_fields,
        managed_before
    );
}

//! `convoy diff` against the real control plane: labels, colors, Secrets, exit codes.

use base64::Engine;
use serde_json::json;

use crate::support::fixture::{Fixture, config_map};
use crate::support::{convoy_bin, path_with_testenv, unreachable_kubeconfig};

fn settings(namespace: &str) -> insta::Settings {
    let mut s = insta::Settings::clone_current();
    s.add_filter(&regex::escape(namespace), "NAMESPACE");
    s.add_filter(r"hmac:[0-9a-f]{12}", "hmac:DIGEST");
    s
}

fn out(o: std::process::Output) -> (i32, String, String) {
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// The summary of a `diff -o json` that found changes (exit 1).
fn changes_found(o: std::process::Output) -> String {
    let (code, stdout, stderr) = out(o);
    assert_eq!(code, 1, "{stderr}");
    let diff: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    serde_json::to_string(&diff["summary"]).unwrap()
}

fn config_maps(f: &Fixture) -> kube::Api<k8s_openapi::api::core::v1::ConfigMap> {
    kube::Api::namespaced(f.env.client.clone(), &f.env.namespace)
}

fn secret(password: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\nstringData:\n  password: {password}\n  user: app\n"
    )
}

#[tokio::test]
async fn no_change_exits_0_with_only_the_summary() {
    let f = Fixture::new(
        "diff-clean",
        &[("a.yaml", &config_map("a", 0, "1"))],
        json!({}),
    )
    .await;
    f.sync().await;
    let (code, stdout, stderr) = out(f.env.convoy(&["diff", "web"]));
    assert_eq!(code, 0, "{stderr}");
    insta::assert_snapshot!(stdout, @r"
    TO CREATE   TO CHANGE   TO PRUNE   UNCHANGED   DRIFTED   REJECTED
    0           0           0          1           0         0
    ");
}

#[tokio::test]
async fn drift_and_render_changes_are_labelled_with_and_without_color() {
    let f = Fixture::new(
        "diff-labels",
        &[
            ("a.yaml", &config_map("a", 0, "1")),
            ("b.yaml", &config_map("b", 0, "1")),
        ],
        json!({"syncPolicy": {"mode": "Manual"}}),
    )
    .await;
    f.annotate(json!({"convoy.kumodo.io/sync-requested-at": "2026-01-01T00:00:00Z"}))
        .await;
    f.sync().await;
    f.kubectl_apply(&json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "a", "namespace": f.env.namespace}, "data": {"value": "tampered"}}))
        .await;
    f.commit(&[
        ("a.yaml", &config_map("a", 0, "1")),
        ("b.yaml", &config_map("b", 0, "2")),
        ("c.yaml", &config_map("c", 1, "new")),
    ]);
    let (code, plain, _) = out(f.env.convoy(&["diff", "web"]));
    assert_eq!(code, 1, "something would change");
    let colored = std::process::Command::new(convoy_bin())
        .args([
            "--kubeconfig",
            f.env.kubeconfig.to_str().unwrap(),
            "-n",
            &f.env.namespace,
            "diff",
            "web",
        ])
        .env("PATH", path_with_testenv())
        .env("CLICOLOR_FORCE", "1")
        .env_remove("NO_COLOR")
        .output()
        .unwrap();
    let colored = String::from_utf8_lossy(&colored.stdout).into_owned();
    assert!(
        colored.contains("\u{1b}[31m") && colored.contains("\u{1b}[32m"),
        "red and green on a forced terminal"
    );
    settings(&f.env.namespace).bind(|| {
        insta::assert_snapshot!("diff_labels_plain", plain);
        insta::assert_snapshot!("diff_labels_color", colored);
    });
}

#[tokio::test]
async fn secrets_are_diffed_by_key_never_by_value() {
    let f = Fixture::new(
        "diff-secret",
        &[("s.yaml", &secret("s3cret-one"))],
        json!({}),
    )
    .await;
    f.sync().await;
    f.commit(&[("s.yaml", &secret("s3cret-two"))]);
    let (code, text, _) = out(f.env.convoy(&["diff", "web"]));
    let (_, json_out, _) = out(f.env.convoy(&["diff", "web", "-o", "json"]));
    assert_eq!(code, 1);
    for value in ["s3cret-one", "s3cret-two"] {
        let b64 = base64::engine::general_purpose::STANDARD.encode(value);
        for output in [&text, &json_out] {
            assert!(
                !output.contains(value),
                "plaintext {value} leaked:\n{output}"
            );
            assert!(
                !output.contains(&b64),
                "base64 of {value} leaked:\n{output}"
            );
        }
    }
    // This control plane holds no digest key (no `convoy install`): the CLI shows only
    // whether each value changed.
    assert!(
        text.contains("  keys: password changed, user unchanged\n"),
        "{text}"
    );
    assert!(
        text.contains("data.password: (old value) -> (new value)"),
        "{text}"
    );
    assert!(
        !text.contains("data.user:"),
        "an unchanged key is not listed as a change"
    );
    settings(&f.env.namespace).bind(|| insta::assert_snapshot!("diff_secret", text));
}

#[tokio::test]
async fn an_unreachable_cluster_exits_3_and_a_render_error_exits_4() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = unreachable_kubeconfig(dir.path());
    let release = dir.path().join("r.yaml");
    std::fs::write(
        &release,
        "apiVersion: core.convoy.kumodo.io/v1alpha1\nkind: Release\nmetadata: {name: web}\nspec:\n  source: {kind: GitRepository, name: x}\n  content: {type: jsonnet}\n",
    )
    .unwrap();
    let run = |kc: &str| {
        out(std::process::Command::new(convoy_bin())
            .args([
                "--kubeconfig",
                kc,
                "diff",
                "-f",
                release.to_str().unwrap(),
                "--source-dir",
                dir.path().to_str().unwrap(),
            ])
            .env("NO_COLOR", "1")
            .output()
            .unwrap())
    };
    let (code, _, stderr) = run(kubeconfig.to_str().unwrap());
    assert_eq!(code, 3, "{stderr}");
    assert!(stderr.contains("127.0.0.1:9"), "{stderr}");

    let f = Fixture::new(
        "diff-render-error",
        &[("a.yaml", &config_map("a", 0, "1"))],
        json!({}),
    )
    .await;
    let (code, _, stderr) = run(f.env.kubeconfig.to_str().unwrap());
    assert_eq!(code, 4, "{stderr}");
    assert!(
        stderr
            .starts_with("error: render Release default/web (step Rendering, reason Unsupported)"),
        "{stderr}"
    );
}

/// CI jobs, a daemon and a person on one machine share the source cache: eight `convoy diff`
/// and `convoy render` runs of one Release, started together after a new commit, all succeed
/// (the fetches into the shared cache serialise instead of colliding).
#[tokio::test]
async fn parallel_runs_after_a_new_commit_share_the_cache_and_all_succeed() {
    let f = Fixture::new(
        "diff-parallel",
        &[("a.yaml", &config_map("a", 0, "1"))],
        json!({}),
    )
    .await;
    f.sync().await;
    let cache = tempfile::tempdir().unwrap();
    let cache_dir = cache.path().to_str().unwrap().to_string();
    // Warm the cache at the first commit, then move the branch on.
    let (code, _, stderr) = out(f.env.convoy(&["render", "web", "--cache-dir", &cache_dir]));
    assert_eq!(code, 0, "{stderr}");
    f.commit(&[("a.yaml", &config_map("a", 0, "2"))]);
    let runs: Vec<std::process::Child> = (0..8)
        .map(|i| {
            let command = if i % 2 == 0 { "diff" } else { "render" };
            std::process::Command::new(convoy_bin())
                .arg("--kubeconfig")
                .arg(&f.env.kubeconfig)
                .args([
                    "-n",
                    &f.env.namespace,
                    command,
                    "web",
                    "--cache-dir",
                    &cache_dir,
                ])
                .env("PATH", path_with_testenv())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for (i, child) in runs.into_iter().enumerate() {
        let (code, stdout, stderr) = out(child.wait_with_output().unwrap());
        if i % 2 == 0 {
            assert_eq!(code, 1, "diff {i}: one change to apply\n{stdout}{stderr}");
        } else {
            assert_eq!(code, 0, "render {i}: {stderr}");
            assert!(
                stdout.contains("value: \"2\""),
                "render {i} saw the new commit"
            );
        }
    }
}

/// Whether every escape in `text` is a color (SGR: ESC [ digits and ; then m), convoy's own.
fn only_colors(text: &str) -> bool {
    let mut rest = text;
    while let Some(at) = rest.find('\u{1b}') {
        let after = &rest[at + 1..];
        let Some(body) = after.strip_prefix('[') else {
            return false;
        };
        let end = body
            .find(|c: char| !(c.is_ascii_digit() || c == ';'))
            .unwrap_or(body.len());
        if !body[end..].starts_with('m') {
            return false;
        }
        rest = &body[end + 1..];
    }
    !text
        .chars()
        .any(|c| c.is_control() && !matches!(c, '\n' | '\u{1b}'))
}

#[tokio::test]
async fn a_hostile_value_on_the_cluster_is_diffed_without_its_control_sequences() {
    let f = Fixture::new(
        "diff-hostile",
        &[("a.yaml", &config_map("a", 0, "1"))],
        json!({}),
    )
    .await;
    f.sync().await;
    // Someone with write access to the namespace puts terminal sequences in a live value
    // (as JSON: a YAML body may not hold the C1 control).
    let config_maps = config_maps(&f);
    config_maps
        .patch(
            "a",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"data": {
                "value": "\u{1b}[2J\u{1b}]52;c;Y3VybA==\u{7}\u{9b}31m"}})),
        )
        .await
        .unwrap();
    let colored = std::process::Command::new(convoy_bin())
        .args([
            "--kubeconfig",
            f.env.kubeconfig.to_str().unwrap(),
            "-n",
            &f.env.namespace,
            "diff",
            "web",
        ])
        .env("PATH", path_with_testenv())
        .env("CLICOLOR_FORCE", "1")
        .env_remove("NO_COLOR")
        .output()
        .unwrap();
    let colored = String::from_utf8_lossy(&colored.stdout).into_owned();
    assert!(only_colors(&colored), "{colored:?}");
    let (code, plain, _) = out(f.env.convoy(&["diff", "web"]));
    assert_eq!(code, 1, "drift");
    settings(&f.env.namespace).bind(|| insta::assert_snapshot!("diff_hostile_value", plain));
}

/// Objects that left the render but that the sync leaves in place (an annotation keeps one,
/// another Release's labels name another) are shown as left, saying why, not "to prune":
/// `convoy diff` showed a chart's kept volume claim "to prune" and the sync then kept it.
#[tokio::test]
async fn objects_the_sync_leaves_in_place_are_not_shown_to_prune() {
    let kept = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: kept\n  annotations:\n    helm.sh/resource-policy: keep\ndata:\n  value: \"1\"\n";
    let f = Fixture::new(
        "diff-kept",
        &[
            ("a.yaml", &config_map("a", 0, "1")),
            ("kept.yaml", kept),
            ("moved.yaml", &config_map("moved", 0, "1")),
            ("gone.yaml", &config_map("gone", 0, "1")),
        ],
        json!({}),
    )
    .await;
    f.sync().await;
    // Another Release's labels on `moved` (it was handed over, as an adopting render does).
    let config_maps = config_maps(&f);
    config_maps
        .patch(
            "moved",
            &kube::api::PatchParams::apply("other-release").force(),
            &kube::api::Patch::Apply(json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "moved", "labels": {
                    "convoy.kumodo.io/release-namespace": f.env.namespace,
                    "convoy.kumodo.io/release": "other"}},
            })),
        )
        .await
        .unwrap();
    f.commit(&[("a.yaml", &config_map("a", 0, "1"))]);
    let (code, plain, stderr) = out(f.env.convoy(&["diff", "web"]));
    assert_eq!(code, 1, "{stderr}");
    settings(&f.env.namespace).bind(|| insta::assert_snapshot!("diff_left_in_place", plain));
    // And the sync does what the diff said.
    f.sync().await;
    for (name, present) in [("kept", true), ("moved", true), ("gone", false)] {
        assert_eq!(
            config_maps.get_opt(name).await.unwrap().is_some(),
            present,
            "{name}"
        );
    }
}

/// `convoy diff -f release.yaml --source-dir DIR` of a Release the cluster holds compares
/// with what that Release applied, as `convoy diff NAME` does: an object removed from the
/// checkout is shown to prune (a sync deletes it), and the objects the Release applied are
/// not shown as adopted. It showed `TO PRUNE 0` and `= … (adopt …)`.
#[tokio::test]
async fn diff_of_a_file_reads_the_inventory_of_the_release_on_the_cluster() {
    let f = Fixture::new(
        "diff-file-inventory",
        &[
            ("a.yaml", &config_map("a", 0, "1")),
            ("gone.yaml", &config_map("gone", 0, "1")),
        ],
        json!({}),
    )
    .await;
    f.sync().await;
    // Someone patches `a` by hand: drift, not an adoption.
    let patched = f.env.kubectl(&[
        "patch",
        "configmap",
        "a",
        "-n",
        &f.env.namespace,
        "--type=merge",
        "-p",
        r#"{"data":{"value":"patched"}}"#,
    ]);
    assert!(patched.status.success(), "{patched:?}");
    // The local checkout: `gone` removed.
    let checkout = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(checkout.path().join("app")).unwrap();
    std::fs::write(checkout.path().join("app/a.yaml"), config_map("a", 0, "1")).unwrap();
    let release = checkout.path().join("release.yaml");
    std::fs::write(
        &release,
        format!(
            "apiVersion: core.convoy.kumodo.io/v1alpha1\nkind: Release\nmetadata: {{name: web, namespace: {ns}}}\nspec:\n  source: {{kind: GitRepository, name: repo, path: app}}\n  targetNamespace: {ns}\n",
            ns = f.env.namespace
        ),
    )
    .unwrap();
    let (code, by_file, stderr) = out(f.env.convoy(&[
        "diff",
        "-f",
        release.to_str().unwrap(),
        "--source-dir",
        checkout.path().to_str().unwrap(),
    ]));
    assert_eq!(code, 1, "{by_file}{stderr}");
    // `diff NAME` of the same change (the checkout committed) says the same.
    f.commit(&[("a.yaml", &config_map("a", 0, "1"))]);
    let (_, by_name, _) = out(f.env.convoy(&["diff", "web"]));
    assert_eq!(by_file, by_name);
    settings(&f.env.namespace).bind(|| insta::assert_snapshot!("diff_file_inventory", by_file));
}

/// A Release wanting more than 16 objects of a kind reads them with one LIST only where they
/// are most of that kind in the namespace; beside many others (Helm's release Secrets, other
/// teams' objects) it reads each with a GET, so it never holds the whole namespace. Either
/// way the diff sees what exists, what drifted and what is gone.
#[tokio::test]
async fn a_release_of_many_objects_reads_them_alike_alone_or_beside_many_others() {
    let (f, names) = (twenty_config_maps("diff-many").await, config_map_names());
    // Alone (and the namespace's kube-root-ca.crt): one LIST.
    let (code, stdout, stderr) = out(f.env.convoy(&["diff", "web"]));
    assert_eq!(code, 0, "{stderr}");
    insta::assert_snapshot!(stdout, @r"
    TO CREATE   TO CHANGE   TO PRUNE   UNCHANGED   DRIFTED   REJECTED
    0           0           0          20          0         0
    ");
    // Beside 100 others, 30 listed before them (by name), with three drifted and two deleted:
    // the LIST stops at 40 objects (30 others', cm-00 to cm-09), and the rest are read by name.
    let api = config_maps(&f);
    for i in 0..100 {
        let other: k8s_openapi::api::core::v1::ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": format!("{}-other-{i:03}", if i < 30 { "a" } else { "z" })},
            "data": {"value": "x"}}))
        .unwrap();
        api.create(&Default::default(), &other).await.unwrap();
    }
    for n in &names[..3] {
        f.kubectl_apply(&json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": n, "namespace": f.env.namespace}, "data": {"value": "tampered"}}))
            .await;
    }
    for n in &names[18..] {
        api.delete(n, &Default::default()).await.unwrap();
    }
    insta::assert_snapshot!(
        changes_found(f.env.convoy(&["diff", "web", "-o", "json"])),
        @r#"{"change":3,"create":2,"drifted":3,"prune":0,"rejected":0,"unchanged":15}"#
    );
}

/// `cm-00` to `cm-19`.
fn config_map_names() -> Vec<String> {
    (0..20).map(|i| format!("cm-{i:02}")).collect()
}

/// A manual Release of 20 ConfigMaps (`cm-00` to `cm-19`), synced.
async fn twenty_config_maps(test: &str) -> Fixture {
    let files = config_map_names()
        .iter()
        .map(|n| (format!("{n}.yaml"), config_map(n, 0, "1")))
        .collect();
    synced_manual_release(crate::support::TestEnv::new(test).await, files).await
}

/// A manual Release of `files` (path, content), synced.
async fn synced_manual_release(
    env: crate::support::TestEnv,
    files: Vec<(String, String)>,
) -> Fixture {
    let refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, c)| (p.as_str(), c.as_str()))
        .collect();
    let f = Fixture::in_env(env, &refs, json!({"syncPolicy": {"mode": "Manual"}})).await;
    f.annotate(json!({"convoy.kumodo.io/sync-requested-at": "2026-01-01T00:00:00Z"}))
        .await;
    f.sync().await;
    f
}

/// Create `count` ConfigMaps named `{prefix}-NNN` in the fixture's namespace, 16 at a time.
async fn create_others(f: &Fixture, prefix: &str, count: usize) {
    use futures::StreamExt;
    let api = config_maps(f);
    futures::stream::iter(0..count)
        .map(|i| {
            let api = api.clone();
            async move {
                let other: k8s_openapi::api::core::v1::ConfigMap = serde_json::from_value(
                    json!({"metadata": {"name": format!("{prefix}-{i:03}")}, "data": {"value": "x"}}),
                )
                .unwrap();
                api.create(&Default::default(), &other).await.unwrap();
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<()>>()
        .await;
}

/// Beside more objects of the kind than a page of their metadata holds (600 listed before the
/// Release's 20: the first LIST reads 40 of them, the metadata pages go on from there, 100
/// then 500, and only the second reaches the Release's), the Release's objects are still
/// found: none is taken for one to create.
#[tokio::test]
async fn objects_beyond_the_first_page_of_the_kinds_metadata_are_found() {
    let f = twenty_config_maps("diff-pages").await;
    create_others(&f, "a-other", 600).await;
    f.kubectl_apply(&json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "cm-05", "namespace": f.env.namespace}, "data": {"value": "tampered"}}))
        .await;
    config_maps(&f)
        .delete("cm-19", &Default::default())
        .await
        .unwrap();
    insta::assert_snapshot!(
        changes_found(f.env.convoy(&["diff", "web", "-o", "json"])),
        @r#"{"change":1,"create":1,"drifted":1,"prune":0,"rejected":0,"unchanged":18}"#
    );
}

/// An identity that may read and patch ConfigMaps by name but neither list nor create them
/// (RBAC `get` and `patch` only) diffs a Release of many of them as one who may list: each is
/// read by name, the drifted one is seen, and the deleted one is a rejection that names the
/// right it lacks.
#[tokio::test]
async fn a_reader_who_may_not_list_a_kind_reads_its_objects_by_name() {
    let f = twenty_config_maps("diff-no-list").await;
    let ns = f.env.namespace.clone();
    f.env
        .kubectl_ok(&["create", "serviceaccount", "getter", "-n", &ns]);
    f.env.kubectl_ok(&[
        "create",
        "role",
        "getter-objects",
        "--verb=get,patch",
        "--resource=configmaps",
        "-n",
        &ns,
    ]);
    f.env.kubectl_ok(&[
        "create",
        "role",
        "getter-convoy",
        "--verb=get,list,watch",
        "--resource=releases.core.convoy.kumodo.io,releaseinventories.core.convoy.kumodo.io,gitrepositories.source.convoy.kumodo.io",
        "-n",
        &ns,
    ]);
    for role in ["getter-objects", "getter-convoy"] {
        f.env.kubectl_ok(&[
            "create",
            "rolebinding",
            role,
            &format!("--role={role}"),
            &format!("--serviceaccount={ns}:getter"),
            "-n",
            &ns,
        ]);
    }
    f.kubectl_apply(&json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "cm-05", "namespace": ns}, "data": {"value": "tampered"}}))
        .await;
    config_maps(&f)
        .delete("cm-19", &Default::default())
        .await
        .unwrap();
    let kubeconfig = f.env.service_account_kubeconfig(&ns, "getter");
    let listed = f.env.kubectl(&[
        "--kubeconfig",
        kubeconfig.path().to_str().unwrap(),
        "get",
        "configmaps",
        "-n",
        &ns,
    ]);
    assert!(
        !listed.status.success(),
        "the reader must not list ConfigMaps"
    );
    let (code, stdout, stderr) = out(std::process::Command::new(convoy_bin())
        .args([
            "--kubeconfig",
            kubeconfig.path().to_str().unwrap(),
            "-n",
            &ns,
        ])
        .args(["diff", "web", "-o", "json"])
        .env("PATH", path_with_testenv())
        .env("NO_COLOR", "1")
        .output()
        .unwrap());
    assert_eq!(code, 1, "{stderr}");
    let diff: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let shown = json!({"summary": diff["summary"], "rejections": diff["rejections"]});
    settings(&ns).bind(|| {
        insta::assert_snapshot!(serde_json::to_string_pretty(&shown).unwrap(), @r#"
        {
          "rejections": [
            {
              "message": "configmaps \"cm-19\" is forbidden: User \"system:serviceaccount:NAMESPACE:getter\" cannot create resource \"configmaps\" in API group \"\" in the namespace \"NAMESPACE\"",
              "object": "ConfigMap/NAMESPACE/cm-19"
            }
          ],
          "summary": {
            "change": 1,
            "create": 0,
            "drifted": 1,
            "prune": 0,
            "rejected": 1,
            "unchanged": 18
          }
        }
        "#);
    });
}

/// A Release of 20 ClusterRoles, listed after the cluster's own (the API server's bootstrap
/// roles, more than the first LIST reads): the cluster-scoped kind is read like a namespaced
/// one, drifted, deleted and unchanged objects all seen.
#[tokio::test]
async fn a_release_of_many_cluster_scoped_objects_beside_many_others_is_read_whole() {
    let env = crate::support::TestEnv::new("diff-cluster-scoped").await;
    let prefix = format!("zz-{}", env.namespace);
    let role = |i: usize, verb: &str| {
        format!(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: {prefix}-{i:02}\nrules:\n- apiGroups: [\"\"]\n  resources: [configmaps]\n  verbs: [{verb}]\n"
        )
    };
    let files = (0..20)
        .map(|i| (format!("role-{i:02}.yaml"), role(i, "get")))
        .collect();
    let f = synced_manual_release(env, files).await;
    let roles: kube::Api<k8s_openapi::api::rbac::v1::ClusterRole> =
        kube::Api::all(f.env.client.clone());
    let before = roles
        .list(&kube::api::ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|r| r.metadata.name.as_deref() < Some(prefix.as_str()))
        .count();
    assert!(
        before > 40,
        "only {before} ClusterRoles sort before the Release's"
    );
    f.env.kubectl_apply_text(
        &role(5, "list"),
        &[
            "--server-side",
            "--force-conflicts",
            "--field-manager=test-user",
        ],
    );
    roles
        .delete(&format!("{prefix}-19"), &Default::default())
        .await
        .unwrap();
    let (code, stdout, stderr) = out(f.env.convoy(&["diff", "web", "-o", "json"]));
    for i in 0..19 {
        roles
            .delete(&format!("{prefix}-{i:02}"), &Default::default())
            .await
            .unwrap();
    }
    assert_eq!(code, 1, "{stderr}");
    let diff: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    insta::assert_snapshot!(
        serde_json::to_string(&diff["summary"]).unwrap(),
        @r#"{"change":1,"create":1,"drifted":1,"prune":0,"rejected":0,"unchanged":18}"#
    );
}

/// Objects whose kind the cluster does not serve yet, as the sync treats them: one a CRD of
/// the render defines and one that says Argo CD's `SkipDryRunOnMissingResource=true` are
/// shown to create, as rendered, saying why they were not dry-run; an object of a missing
/// kind that says neither is refused, and the exit is 4 (an unknown kind).
#[tokio::test]
async fn objects_whose_kind_is_not_served_yet_are_shown_to_create_without_a_dry_run() {
    let awaited = json!({"apiVersion": "awaited.convoy.test/v1", "kind": "Gizmo",
        "metadata": {"name": "g", "annotations": {
            "argocd.argoproj.io/sync-wave": "1",
            "argocd.argoproj.io/sync-options": "SkipDryRunOnMissingResource=true"}},
        "spec": {"size": 1}})
    .to_string();
    let crd = "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: doohickeys.defined.convoy.test\nspec:\n  group: defined.convoy.test\n  scope: Namespaced\n  names: {kind: Doohickey, plural: doohickeys}\n  versions:\n  - name: v1\n    served: true\n    storage: true\n    schema:\n      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}\n";
    let defined = "apiVersion: defined.convoy.test/v1\nkind: Doohickey\nmetadata:\n  name: d\nspec:\n  size: 2\n";
    let f = Fixture::new(
        "diff-kinds-to-come",
        &[
            ("gizmo.yaml", &awaited),
            ("crd.yaml", crd),
            ("doohickey.yaml", defined),
        ],
        json!({}),
    )
    .await;
    let (code, text, stderr) = out(f.env.convoy(&["diff", "web"]));
    assert_eq!(code, 1, "{stderr}");
    let (_, json_out, _) = out(f.env.convoy(&["diff", "web", "-o", "json"]));
    let diff: serde_json::Value = serde_json::from_str(&json_out).unwrap();
    let notes: Vec<(&str, &str)> = diff["objects"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|o| Some((o["key"].as_str()?, o["notDryRun"].as_str()?)))
        .collect();
    assert_eq!(notes.len(), 2, "{json_out}");
    settings(&f.env.namespace).bind(|| insta::assert_snapshot!("diff_kinds_to_come", text));

    // Without the option, a missing kind is the render's mistake.
    let unannotated = awaited.replace("SkipDryRunOnMissingResource=true", "Prune=false");
    f.commit(&[("gizmo.yaml", &unannotated)]);
    let (code, text, stderr) = out(f.env.convoy(&["diff", "web"]));
    assert_eq!(code, 4, "{stderr}");
    assert!(
        text.contains("the cluster does not serve kind Gizmo in awaited.convoy.test/v1"),
        "{text}"
    );
}

/// A CRD the render no longer holds is to prune, and its deletion takes every object of its
/// kind with it: the diff says so (a render that dropped Argo CD's CRDs showed them only "to
/// prune"); a kept one says neither.
#[tokio::test]
async fn a_crd_to_prune_says_it_deletes_every_object_of_its_kind() {
    let crd = |plural: &str, kind: &str, keep: bool| {
        let annotations = if keep {
            json!({"helm.sh/resource-policy": "keep"})
        } else {
            json!({})
        };
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("{plural}.prune.convoy.test"), "annotations": annotations},
            "spec": {"group": "prune.convoy.test", "scope": "Namespaced",
                "names": {"kind": kind, "plural": plural},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object",
                        "x-kubernetes-preserve-unknown-fields": true}}}]}})
        .to_string()
    };
    let f = Fixture::new(
        "diff-prune-crd",
        &[
            ("apps.yaml", &crd("apps", "App", false)),
            ("kept.yaml", &crd("keeps", "Keep", true)),
            ("cm.yaml", &config_map("a", 0, "1")),
        ],
        json!({}),
    )
    .await;
    let outcome = f.sync().await.outcome.unwrap();
    assert!(outcome.message.contains("applied"), "{}", outcome.message);
    f.commit(&[("cm.yaml", &config_map("a", 0, "1"))]);
    let (code, text, stderr) = out(f.env.convoy(&["diff", "web"]));
    assert_eq!(code, 1, "{stderr}");
    assert!(
        text.contains("CustomResourceDefinition.apiextensions.k8s.io/apps.prune.convoy.test (to prune; deletes every apps.prune.convoy.test in the cluster with it, whoever made them)"),
        "{text}"
    );
    let kept = text
        .lines()
        .find(|l| l.contains("keeps.prune.convoy.test"))
        .unwrap_or_default();
    assert!(
        kept.contains("not pruned: kept by helm.sh/resource-policy: keep")
            && !kept.contains("deletes every"),
        "{text}"
    );
    let (_, json_out, _) = out(f.env.convoy(&["diff", "web", "-o", "json"]));
    assert!(
        json_out.contains("\"alsoDeletes\": \"apps.prune.convoy.test\""),
        "{json_out}"
    );
}

/// A change the server will not make in place, where the render asks for a re-create: shown
/// against the object as it would be created, saying so and why; without the ask, refused.
#[tokio::test]
async fn an_object_to_re_create_is_shown_against_the_object_as_created() {
    let immutable = |value: &str, annotations: serde_json::Value| {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "immutable": true,
            "metadata": {"name": "settings", "annotations": annotations},
            "data": {"value": value}})
        .to_string()
    };
    let force = json!({"kustomize.toolkit.fluxcd.io/force": "enabled"});
    // A Job's template cannot change in place; the server names its labels after the Job.
    let job = |image: &str| {
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "migrate",
            "annotations": {"argocd.argoproj.io/sync-options": "Force=true"}},
            "spec": {"template": {"spec": {"restartPolicy": "Never",
                "containers": [{"name": "m", "image": image}]}}}})
        .to_string()
    };
    let f = Fixture::new(
        "diff-recreate",
        &[
            ("cm.yaml", &immutable("one", force.clone())),
            ("job.yaml", &job("migrate:1")),
        ],
        json!({}),
    )
    .await;
    f.sync().await;
    f.commit(&[
        ("cm.yaml", &immutable("two", force)),
        ("job.yaml", &job("migrate:2")),
    ]);
    let (code, text, stderr) = out(f.env.convoy(&["diff", "web"]));
    assert_eq!(code, 1, "{stderr}");
    let mut settings = settings(&f.env.namespace);
    // The Job's controller-uid: the live one's, and the one the create dry run made up.
    settings.add_filter(
        r#""?[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"?"#,
        "UID",
    );
    settings.bind(|| insta::assert_snapshot!("diff_recreate", text));

    f.commit(&[
        ("cm.yaml", &immutable("two", json!({}))),
        ("job.yaml", &job("migrate:2")),
    ]);
    let (code, text, stderr) = out(f.env.convoy(&["diff", "web"]));
    assert_eq!(code, 1, "{stderr}");
    assert!(text.contains("(rejected by the dry run)"), "{text}");
    assert!(text.contains("field is immutable"), "{text}");
}

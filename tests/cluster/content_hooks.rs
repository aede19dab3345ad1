//! Hooks that charts and repositories carry, on the real control plane: a chart written for
//! Helm and a repository written for Argo CD, synced by `convoy sync` alone (no daemon):
//! order, once per render, delete policies, TTLs, failures and SyncFail.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use convoy::engine::api::{Reason, ReleaseInventory, condition_types};
use convoy::engine::drift::{Verdict, drift_pass};
use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, ServiceAccount};
use kube::Api;
use kube::runtime::watcher::{self, Event};
use serde_json::json;

use crate::support::eventually;
use crate::support::fixture::Fixture;

/// Records the order in which objects of a namespace appear (`Kind/name`), from watches.
struct Appearances {
    seen: Arc<Mutex<Vec<String>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Appearances {
    async fn start(f: &Fixture) -> Self {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        macro_rules! watch_kind {
            ($t:ty, $kind:expr) => {{
                let api: Api<$t> = Api::namespaced(f.env.client.clone(), &f.env.namespace);
                let seen = seen.clone();
                tasks.push(tokio::spawn(async move {
                    let stream = watcher::watcher(api, Default::default());
                    let mut stream = std::pin::pin!(stream);
                    while let Some(event) = stream.next().await {
                        if let Ok(Event::Apply(o)) = event {
                            let name = format!(
                                "{}/{}",
                                $kind,
                                o.metadata.name.clone().unwrap_or_default()
                            );
                            let mut seen = seen.lock().unwrap();
                            if !seen.contains(&name) {
                                seen.push(name);
                            }
                        }
                    }
                }));
            }};
        }
        watch_kind!(Job, "Job");
        watch_kind!(ServiceAccount, "ServiceAccount");
        watch_kind!(ConfigMap, "ConfigMap");
        watch_kind!(Pod, "Pod");
        // Let the watches start before anything is created.
        tokio::time::sleep(Duration::from_millis(500)).await;
        Self { seen, tasks }
    }

    fn order(&self) -> Vec<String> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|n| {
                !n.starts_with("ConfigMap/kube-root-ca") && !n.starts_with("ServiceAccount/default")
            })
            .filter(|n| !n.starts_with("Pod/"))
            .cloned()
            .collect()
    }

    fn pods(&self) -> Vec<String> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|n| n.starts_with("Pod/"))
            .cloned()
            .collect()
    }
}

impl Drop for Appearances {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

fn job(name: &str, annotations: serde_json::Value, extra_spec: &str) -> String {
    let annotations: Vec<String> = annotations
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| format!("    {k}: {v}\n"))
        .collect();
    format!(
        "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: {name}\n  annotations:\n{}spec:\n  backoffLimit: 0\n{extra_spec}  template:\n    spec:\n      restartPolicy: Never\n      containers:\n      - name: x\n        image: busybox\n",
        annotations.join("")
    )
}

/// A chart in the style of public charts: a pre-install ServiceAccount and migration Job, two
/// post-install Jobs, a test Pod and an ordinary ConfigMap. `{{ .Values.version }}` is in the
/// migration Job's template.
fn chart() -> Vec<(&'static str, String)> {
    vec![
        (
            "Chart.yaml",
            "apiVersion: v2\nname: shop\nversion: 1.0.0\n".to_string(),
        ),
        ("values.yaml", "version: one\n".to_string()),
        (
            "templates/config.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-config\ndata:\n  version: {{ .Values.version | quote }}\n".to_string(),
        ),
        (
            "templates/hook-sa.yaml",
            "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: {{ .Release.Name }}-hooks\n  annotations:\n    helm.sh/hook: pre-install,pre-upgrade\n    helm.sh/hook-weight: \"-10\"\n    helm.sh/hook-delete-policy: before-hook-creation\n".to_string(),
        ),
        (
            "templates/migrate.yaml",
            job(
                "{{ .Release.Name }}-migrate",
                json!({"helm.sh/hook": "pre-install,pre-upgrade", "helm.sh/hook-weight": "-5"}),
                "  ttlSecondsAfterFinished: 0\n",
            )
            .replace("      - name: x\n", "      - name: x\n        args: [\"{{ .Values.version }}\"]\n"),
        ),
        (
            "templates/notify.yaml",
            job("{{ .Release.Name }}-notify", json!({"helm.sh/hook": "post-install,post-upgrade"}), ""),
        ),
        (
            "templates/report.yaml",
            job(
                "{{ .Release.Name }}-report",
                json!({"helm.sh/hook": "post-install,post-upgrade", "helm.sh/hook-weight": "5"}),
                "",
            ),
        ),
        (
            "templates/test.yaml",
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {{ .Release.Name }}-smoke\n  annotations:\n    helm.sh/hook: test\nspec:\n  containers:\n  - name: x\n    image: busybox\n".to_string(),
        ),
    ]
}

/// `convoy sync web` without a daemon, off the test's thread (the watches keep running).
async fn convoy_sync(f: &Fixture) -> (i32, String) {
    let kubeconfig = f.env.kubeconfig.clone();
    let namespace = f.env.namespace.clone();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(crate::support::convoy_bin())
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args([
                "-n",
                &namespace,
                "sync",
                "web",
                "--timeout",
                "2m",
                "--render-store",
                "none",
            ])
            .env("PATH", crate::support::path_with_testenv())
            .env("NO_COLOR", "1")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    // Let the watches catch up with the last events.
    tokio::time::sleep(Duration::from_millis(500)).await;
    (
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

async fn job_uid(f: &Fixture, name: &str) -> Option<String> {
    let api: Api<Job> = Api::namespaced(f.env.client.clone(), &f.env.namespace);
    api.get_opt(name)
        .await
        .unwrap()
        .and_then(|j| j.metadata.uid)
}

#[tokio::test]
async fn a_charts_helm_hooks_run_in_phase_and_weight_order_once_per_render() {
    let files = chart();
    let refs: Vec<(&str, &str)> = files.iter().map(|(p, c)| (*p, c.as_str())).collect();
    let f = Fixture::new(
        "chook-helm",
        &refs,
        json!({"content": {"type": "helm", "helm": {"releaseName": "shop"}}}),
    )
    .await;
    let watch = Appearances::start(&f).await;
    // `convoy sync` without a daemon finishes what it starts: its hooks included.
    let (code, output) = convoy_sync(&f).await;
    assert_eq!(code, 0, "{output}");
    assert_eq!(
        watch.order(),
        [
            "ServiceAccount/shop-hooks",
            "Job/shop-migrate",
            "ConfigMap/shop-config",
            "Job/shop-notify",
            "Job/shop-report",
        ]
    );
    assert!(
        !watch.pods().iter().any(|p| p == "Pod/shop-smoke"),
        "the test Pod never runs"
    );
    let release = f.release().await;
    let status = release.status.clone().unwrap();
    let condition = |t: &str| {
        status
            .condition(t)
            .map(|c| (c.status.to_string(), c.reason.clone()))
    };
    assert_eq!(
        condition(condition_types::APPLIED),
        Some(("True".into(), Reason::Applied.into()))
    );
    assert_eq!(
        condition(condition_types::LIFECYCLE_SUCCEEDED),
        Some(("True".into(), "Succeeded".into()))
    );
    // Hooks are not inventory members.
    let inventories: Api<ReleaseInventory> =
        Api::namespaced(f.env.client.clone(), &f.env.namespace);
    let inventory = inventories.get("web").await.unwrap();
    let members: Vec<&str> = inventory
        .spec
        .inventory
        .iter()
        .map(|e| e.name.as_str())
        .collect();
    assert_eq!(members, ["shop-config"]);
    let ns = &f.env.namespace;
    let hooks: Vec<&str> = inventory
        .spec
        .hooks
        .iter()
        .map(|h| h.name.as_str())
        .collect();
    for expected in [
        format!("ServiceAccount/{ns}/shop-hooks"),
        format!("Job/{ns}/shop-migrate"),
        format!("Job/{ns}/shop-notify"),
        format!("Job/{ns}/shop-report"),
    ] {
        assert!(
            hooks.contains(&expected.as_str()),
            "{expected} not in {hooks:?}"
        );
    }
    let pass = drift_pass(&f.ctx, &release).await.unwrap().unwrap();
    assert!(
        matches!(pass.verdict, Verdict::InSync { .. }),
        "{:?}",
        pass.verdict
    );

    // The TTL takes the migration Job (once its outcome is read); a second sync of the same
    // render creates no Job, and the diff has nothing to say about hooks.
    eventually(
        "the TTL to delete the migration Job",
        Duration::from_secs(60),
        || async { job_uid(&f, "shop-migrate").await.is_none().then_some(()) },
    )
    .await;
    let before = watch.order().len();
    let (code, output) = convoy_sync(&f).await;
    assert_eq!(code, 0, "{output}");
    assert_eq!(watch.order().len(), before, "{:?}", watch.order());
    let diff = f.env.convoy(&["diff", "web", "--render-store", "none"]);
    assert_eq!(
        diff.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&diff.stdout)
    );

    // A values change reaches a hook Job's template: the old Job goes, a new one runs.
    let notify_before = job_uid(&f, "shop-notify").await.unwrap();
    f.patch_spec(json!({"content": {"type": "helm", "helm": {"releaseName": "shop", "values": {"version": "two"}}}}))
        .await;
    let (code, output) = convoy_sync(&f).await;
    assert_eq!(code, 0, "{output}");
    let notify_after = job_uid(&f, "shop-notify").await.unwrap();
    assert_ne!(notify_before, notify_after, "re-armed for the new render");
    let api: Api<Job> = Api::namespaced(f.env.client.clone(), &f.env.namespace);
    let migrate = eventually("the new migration Job", Duration::from_secs(30), || async {
        let jobs = api.list(&Default::default()).await.ok()?;
        // Its TTL may already have taken it; its hook entry then says it ran.
        let entries = inventories.get("web").await.ok()?.spec.hooks;
        let entry = entries
            .iter()
            .find(|h| h.name == format!("Job/{}/shop-migrate", f.env.namespace))?
            .clone();
        let _ = jobs;
        (entry.state.map(|s| s.as_str().to_string()) == Some("Succeeded".into())
            && entry.render_ref == release_render(&f).await)
            .then_some(entry)
    })
    .await;
    assert!(migrate.finished_at.is_some());
}

async fn release_render(f: &Fixture) -> Option<String> {
    f.release().await.status?.last_successful?.render_ref
}

/// A repository written for Argo CD: PreSync (generateName), PostSync and SyncFail Jobs, and
/// objects in sync waves -1, 0 and 1.
fn argo_repo(failing_presync: bool) -> Vec<(&'static str, String)> {
    let cm = |name: &str, wave: i32| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  annotations:\n    argocd.argoproj.io/sync-wave: \"{wave}\"\ndata:\n  a: b\n"
        )
    };
    let mut presync = job("x", json!({"argocd.argoproj.io/hook": "PreSync", "argocd.argoproj.io/hook-delete-policy": "HookSucceeded"}), "")
        .replace("  name: x\n", "  generateName: migrate-\n");
    if failing_presync {
        presync = presync.replace(
            "  template:\n    spec:\n",
            "  template:\n    metadata:\n      labels: {convoy.kumodo.io/test-fail: \"true\"}\n    spec:\n",
        );
    }
    vec![
        ("presync.yaml", presync),
        (
            "postsync.yaml",
            job("notify", json!({"argocd.argoproj.io/hook": "PostSync"}), ""),
        ),
        (
            "syncfail.yaml",
            job(
                "cleanup",
                json!({"argocd.argoproj.io/hook": "SyncFail"}),
                "",
            ),
        ),
        ("first.yaml", cm("first", -1)),
        ("second.yaml", cm("second", 0)),
        ("third.yaml", cm("third", 1)),
    ]
}

#[tokio::test]
async fn an_argo_cd_repositorys_hooks_and_waves_keep_their_order_and_a_failed_presync_runs_syncfail()
 {
    let files = argo_repo(false);
    let refs: Vec<(&str, &str)> = files.iter().map(|(p, c)| (*p, c.as_str())).collect();
    let f = Fixture::new("chook-argo", &refs, json!({})).await;
    let watch = Appearances::start(&f).await;
    let (code, output) = convoy_sync(&f).await;
    assert_eq!(code, 0, "{output}");
    let order = watch.order();
    assert_eq!(order.len(), 5, "{order:?}");
    assert!(order[0].starts_with("Job/migrate-"), "{order:?}");
    assert_eq!(
        &order[1..],
        [
            "ConfigMap/first",
            "ConfigMap/second",
            "ConfigMap/third",
            "Job/notify"
        ]
    );
    // HookSucceeded: the PreSync Job is deleted once it succeeded.
    let presync = order[0].trim_start_matches("Job/").to_string();
    eventually(
        "the PreSync Job deleted by its policy",
        Duration::from_secs(30),
        || async { job_uid(&f, &presync).await.is_none().then_some(()) },
    )
    .await;
    assert!(
        job_uid(&f, "cleanup").await.is_none(),
        "SyncFail did not run"
    );

    // A failing PreSync stops the sync, names the hook, and runs SyncFail.
    let failing = argo_repo(true);
    let refs: Vec<(&str, &str)> = failing.iter().map(|(p, c)| (*p, c.as_str())).collect();
    f.commit(&refs);
    let (code, output) = convoy_sync(&f).await;
    assert_eq!(code, 1, "{output}");
    assert!(output.contains("HookFailed"), "{output}");
    let release = f.release().await;
    let failure = release
        .status
        .unwrap()
        .last_attempted
        .unwrap()
        .failure
        .unwrap();
    assert_eq!(failure.stage, "HookFailed");
    assert!(
        failure
            .hook_name
            .as_deref()
            .unwrap_or_default()
            .starts_with(&format!("Job/{}/migrate-", f.env.namespace)),
        "{failure:?}"
    );
    eventually(
        "the SyncFail hook to run",
        Duration::from_secs(30),
        || async { job_uid(&f, "cleanup").await.map(|_| ()) },
    )
    .await;
}

#[tokio::test]
async fn a_bad_hook_annotation_fails_the_render_and_applies_nothing() {
    for (annotations, expected) in [
        (
            json!({"helm.sh/hook": "pre-instal"}),
            "annotation helm.sh/hook has \"pre-instal\"; accepted values are pre-install",
        ),
        (
            json!({"helm.sh/hook": "pre-install", "helm.sh/hook-weight": "soon"}),
            "annotation helm.sh/hook-weight must be an integer, not \"soon\"",
        ),
    ] {
        let f = Fixture::new(
            "chook-bad",
            &[
                ("migrate.yaml", &job("migrate", annotations, "")),
                ("cm.yaml", &crate::support::fixture::config_map("a", 0, "1")),
            ],
            json!({}),
        )
        .await;
        let outcome = f.sync().await.outcome.unwrap();
        assert_eq!(outcome.reason, Reason::DeployFailed);
        assert_eq!(outcome.attempt.failure.as_ref().unwrap().stage, "Rendering");
        assert!(
            outcome.message.contains(&format!(
                "Job.batch/{}/migrate: {expected}",
                f.env.namespace
            )),
            "{}",
            outcome.message
        );
        assert!(f.config_map("a").await.is_none(), "nothing applied");
        assert!(job_uid(&f, "migrate").await.is_none());
    }
}

/// A hook is armed by deleting the instance an earlier render left, but an object of its
/// name that no hook of this Release made (someone's, another Release's) is left as it is:
/// the hook is refused, naming the object.
#[tokio::test]
async fn a_hook_does_not_delete_an_object_of_its_name_that_it_did_not_make() {
    let hook = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  annotations:\n    argocd.argoproj.io/hook: PreSync\ndata: {from: hook}\n";
    let f = Fixture::new(
        "chook-taken",
        &[
            ("hook.yaml", hook),
            ("cm.yaml", &crate::support::fixture::config_map("a", 0, "1")),
        ],
        json!({}),
    )
    .await;
    f.kubectl_apply(&json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "settings", "namespace": f.env.namespace},
        "data": {"from": "someone else"}}))
        .await;
    let api: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(f.env.client.clone(), &f.env.namespace);
    let before = api.get("settings").await.unwrap();
    let outcome = f.sync().await.outcome.unwrap();
    assert!(
        outcome.message.contains(
            "ConfigMap settings exists and is not a hook of this Release: convoy does not replace it (delete or rename it, or rename the hook)"
        ),
        "{}",
        outcome.message
    );
    let after = api.get("settings").await.unwrap();
    assert_eq!(after.metadata.uid, before.metadata.uid, "it was replaced");
    assert_eq!(after.data, before.data);
    assert!(f.config_map("a").await.is_none(), "the sync went on");
}

/// An object labelled as this render's hook instance, but by someone else (another Release's
/// labels), does not stand in for the hook: arming refuses it rather than counting the hook
/// as armed by it, and leaves it as it is.
#[tokio::test]
async fn an_object_labelled_with_this_render_by_someone_else_is_not_the_hook() {
    use convoy::engine::hooks::{HOOK_RENDER_LABEL, HookError, arm_content_hook, labels};
    let env = crate::support::TestEnv::new("chook-label").await;
    let ns = env.namespace.clone();
    let release: convoy::engine::api::Release = serde_json::from_value(json!({
        "apiVersion": "core.convoy.kumodo.io/v1alpha1", "kind": "Release",
        "metadata": {"name": "web", "namespace": ns},
        "spec": {"source": {"kind": "GitRepository", "name": "repo"}},
    }))
    .unwrap();
    let render_ref = "0123456789abcdef0123456789abcdef";
    let settings = |data: &str, release: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "settings", "namespace": ns, "labels": {
                HOOK_RENDER_LABEL: &render_ref[..12],
                labels::RELEASE: release, labels::RELEASE_NAMESPACE: ns}},
            "data": {"from": data}})
    };
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), &ns);
    cms.create(
        &Default::default(),
        &serde_json::from_value(settings("someone else", "other")).unwrap(),
    )
    .await
    .unwrap();
    let before = cms.get("settings").await.unwrap();
    let hook = convoy::engine::content_hooks::ContentHook {
        id: format!("ConfigMap/{ns}/settings"),
        phase: convoy::engine::api::HookPhase::PreSync,
        weight: 0,
        wave: 0,
        delete_policies: Default::default(),
        object: convoy::engine::render::Object(settings("hook", "web")),
    };
    let applier = convoy::engine::apply::Applier::new(env.client.clone(), 4);
    let err = arm_content_hook(&applier, &release, &hook, render_ref)
        .await
        .unwrap_err();
    assert!(matches!(err, HookError::Taken { .. }), "{err}");
    let after = cms.get("settings").await.unwrap();
    assert_eq!(after.metadata.uid, before.metadata.uid);
    assert_eq!(after.data, before.data);
    let gone = || async {
        cms.delete("settings", &Default::default()).await.unwrap();
        eventually("settings gone", Duration::from_secs(10), || async {
            cms.get_opt("settings")
                .await
                .unwrap()
                .is_none()
                .then_some(())
        })
        .await;
    };
    // This Release's labels set by another writer (a controller copying a template's, as a
    // StatefulSet's pods carry them) do not make the hook either.
    gone().await;
    cms.create(
        &Default::default(),
        &serde_json::from_value(settings("copied", "web")).unwrap(),
    )
    .await
    .unwrap();
    let err = arm_content_hook(&applier, &release, &hook, render_ref)
        .await
        .unwrap_err();
    assert!(matches!(err, HookError::Taken { .. }), "{err}");
    assert_eq!(
        cms.get("settings").await.unwrap().data.unwrap()["from"],
        "copied"
    );
    // The instance this Release's hook made for the render is counted as armed.
    gone().await;
    let armed = arm_content_hook(&applier, &release, &hook, render_ref)
        .await
        .unwrap();
    assert_eq!(armed, convoy::engine::hooks::Armed::Created);
    let made = cms.get("settings").await.unwrap();
    let armed = arm_content_hook(&applier, &release, &hook, render_ref)
        .await
        .unwrap();
    assert_eq!(
        cms.get("settings").await.unwrap().metadata.uid,
        made.metadata.uid
    );
    assert_eq!(armed, convoy::engine::hooks::Armed::Created);
}

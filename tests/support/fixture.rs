//! A Release backed by a local Git repository, in a test namespace, synced by the engine.
#![allow(dead_code)]

use std::sync::Arc;

use convoy::engine::api::{ObjectKey, Release};
use convoy::engine::connect::{Connection, KubeconfigSource};
use convoy::engine::inventory::{InventoryHandle, Member, members};
use convoy::engine::reconcile::{HandlerResult, sync_handler};
use convoy::engine::runtime::Context;
use convoy::engine::source::{Cache, Coordinator};
use kube::Api;
use serde_json::{Value, json};

use super::TestEnv;
use super::servers::GitRepo;

/// The key of a core-group object (`namespace` empty for a cluster-scoped one).
pub fn core_key(kind: &str, namespace: &str, name: &str) -> ObjectKey {
    ObjectKey {
        group: String::new(),
        kind: kind.into(),
        namespace: namespace.into(),
        name: name.into(),
    }
}

pub struct Fixture {
    pub env: TestEnv,
    pub repo: GitRepo,
    pub ctx: Context,
    pub name: String,
    _cache: tempfile::TempDir,
    /// Where [`Fixture::with_dir_store`] keeps renders.
    pub store_dir: tempfile::TempDir,
}

/// A ConfigMap manifest in `wave`.
pub fn config_map(name: &str, wave: i32, data: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  labels: {{app: demo}}\n  annotations:\n    convoy.kumodo.io/sync-wave: \"{wave}\"\ndata:\n  value: \"{data}\"\n"
    )
}

/// A Deployment manifest of `replicas` in `wave`.
pub fn deployment(name: &str, wave: i32, replicas: i32) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\n  annotations:\n    convoy.kumodo.io/sync-wave: \"{wave}\"\nspec:\n  replicas: {replicas}\n  selector:\n    matchLabels: {{app: {name}}}\n  template:\n    metadata:\n      labels: {{app: {name}}}\n    spec:\n      containers:\n      - name: app\n        image: nginx:1.27\n"
    )
}

impl Fixture {
    /// A namespace, a Git repository holding `files` under `app/`, a GitRepository and a
    /// Release `web` (targetNamespace: the test namespace) with `spec_extra` merged in.
    pub async fn new(test: &str, files: &[(&str, &str)], spec_extra: Value) -> Self {
        Self::in_env(TestEnv::new(test).await, files, spec_extra).await
    }

    /// [`Fixture::new`] in a namespace `env` already made (on another control plane).
    pub async fn in_env(env: TestEnv, files: &[(&str, &str)], spec_extra: Value) -> Self {
        let repo = GitRepo::new();
        let files: Vec<(String, &str)> = files
            .iter()
            .map(|(p, c)| (format!("app/{p}"), *c))
            .collect();
        let refs: Vec<(&str, &str)> = files.iter().map(|(p, c)| (p.as_str(), *c)).collect();
        repo.commit(&refs, "initial");
        let conn = Connection::from_source(&KubeconfigSource {
            path: Some(env.kubeconfig.clone()),
            context: None,
        })
        .await
        .unwrap();
        let cache = tempfile::tempdir().unwrap();
        let ctx = Context::new(conn, Arc::new(Coordinator::new(Cache::new(cache.path()))));
        let fixture = Self {
            env,
            repo,
            ctx,
            name: "web".into(),
            _cache: cache,
            store_dir: tempfile::tempdir().unwrap(),
        };
        fixture
            .kubectl_apply(&json!({
                "apiVersion": "source.convoy.kumodo.io/v1alpha1", "kind": "GitRepository",
                "metadata": {"name": "repo", "namespace": fixture.env.namespace},
                "spec": {"url": fixture.repo.file_url(), "ref": {"branch": "main"}},
            }))
            .await;
        let mut spec = json!({
            "source": {"kind": "GitRepository", "name": "repo", "path": "app"},
            "targetNamespace": fixture.env.namespace,
        });
        json_patch::merge(&mut spec, &spec_extra);
        fixture
            .kubectl_apply(&json!({
                "apiVersion": "core.convoy.kumodo.io/v1alpha1", "kind": "Release",
                "metadata": {"name": "web", "namespace": fixture.env.namespace},
                "spec": spec,
            }))
            .await;
        fixture
    }

    /// Keep renders in a local directory store (pins, rollbacks, history).
    pub fn with_dir_store(mut self) -> Self {
        self.ctx.store = Some(Arc::new(convoy::engine::store::dir::DirStore::new(
            self.store_dir.path(),
        )));
        self
    }

    /// Create or update an object with SSA as a test user (`test-user`).
    pub async fn kubectl_apply(&self, object: &Value) {
        self.env.kubectl_apply_text(
            &object.to_string(),
            &[
                "--server-side",
                "--force-conflicts",
                "--field-manager=test-user",
            ],
        );
    }

    pub fn releases(&self) -> Api<Release> {
        Api::namespaced(self.env.client.clone(), &self.env.namespace)
    }

    pub async fn release(&self) -> Release {
        self.releases().get(&self.name).await.unwrap()
    }

    /// One pass of the controller's sync handler over the live Release.
    pub async fn sync(&self) -> HandlerResult {
        self.sync_named(&self.name).await
    }

    /// One pass of the sync handler over another Release of this namespace.
    pub async fn sync_named(&self, name: &str) -> HandlerResult {
        let release = self.releases().get(name).await.unwrap();
        sync_handler(&self.ctx, &release, 0).await.unwrap()
    }

    /// Another Release on the same repository: `path` in it, `spec_extra` merged in.
    pub async fn add_release(&self, name: &str, path: &str, spec_extra: Value) {
        let mut spec = json!({
            "source": {"kind": "GitRepository", "name": "repo", "path": path},
            "targetNamespace": self.env.namespace,
        });
        json_patch::merge(&mut spec, &spec_extra);
        self.kubectl_apply(&json!({
            "apiVersion": "core.convoy.kumodo.io/v1alpha1", "kind": "Release",
            "metadata": {"name": name, "namespace": self.env.namespace},
            "spec": spec,
        }))
        .await;
    }

    /// A GitRepository `name` whose URL (`file:///nonexistent/convoy-test.git`) cannot be fetched.
    pub async fn add_unfetchable_git_repository(&self, name: &str) {
        self.kubectl_apply(
            &json!({"apiVersion": "source.convoy.kumodo.io/v1alpha1", "kind": "GitRepository",
            "metadata": {"name": name, "namespace": self.env.namespace},
            "spec": {"url": "file:///nonexistent/convoy-test.git", "ref": {"branch": "main"}}}),
        )
        .await;
    }

    /// A Cluster `name` whose kubeconfig (Secret `{name}-kc`) points at a closed port.
    pub async fn add_unreachable_cluster(&self, name: &str) {
        let scratch = tempfile::tempdir().unwrap();
        let kubeconfig =
            std::fs::read_to_string(super::unreachable_kubeconfig(scratch.path())).unwrap();
        self.kubectl_apply(&json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": format!("{name}-kc"), "namespace": self.env.namespace},
            "stringData": {"kubeconfig": kubeconfig}}))
            .await;
        self.kubectl_apply(
            &json!({"apiVersion": "core.convoy.kumodo.io/v1alpha1", "kind": "Cluster",
            "metadata": {"name": name, "namespace": self.env.namespace},
            "spec": {"kubeconfigSecretRef": {"name": format!("{name}-kc")}}}),
        )
        .await;
    }

    /// Commit new `files` under `app/` (replacing the directory's content).
    pub fn commit(&self, files: &[(&str, &str)]) -> String {
        let app = self.repo.work().join("app");
        let _ = std::fs::remove_dir_all(&app);
        let files: Vec<(String, &str)> = files
            .iter()
            .map(|(p, c)| (format!("app/{p}"), *c))
            .collect();
        let refs: Vec<(&str, &str)> = files.iter().map(|(p, c)| (p.as_str(), *c)).collect();
        self.repo.commit(&refs, "change")
    }

    /// Merge `patch` into the Release spec.
    pub async fn patch_spec(&self, patch: Value) {
        let api = self.releases();
        let params = kube::api::PatchParams::default();
        api.patch(
            &self.name,
            &params,
            &kube::api::Patch::Merge(json!({"spec": patch})),
        )
        .await
        .unwrap();
    }

    /// Set annotations on the Release (merge patch; `null` removes).
    pub async fn annotate(&self, annotations: Value) {
        let api = self.releases();
        api.patch(
            &self.name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"annotations": annotations}})),
        )
        .await
        .unwrap();
    }

    /// Install convoy's default health rules (idempotent).
    pub async fn install_default_rules(&self) {
        convoy::engine::install::install_default_rules(&self.ctx.home)
            .await
            .unwrap();
    }

    /// The health assessment that selects the default rules, with `deadline`.
    pub fn default_health(deadline: &str) -> Value {
        json!({"healthAssessment": {
            "globalRuleSetSelector": {"matchLabels": {"health.convoy.kumodo.io/defaults": "true"}},
            "deadline": deadline,
        }})
    }

    /// What whoever may write the Release's inventory can do: record `keys` as members too
    /// (wave 0, at the render of the first recorded member).
    pub async fn record_in_inventory(&self, keys: &[ObjectKey]) {
        let handle = InventoryHandle::for_release(self.env.client.clone(), &self.release().await);
        let inventory = handle.get().await.unwrap().unwrap();
        let mut recorded: Vec<Member> = members(&inventory)
            .iter()
            .map(|e| Member::from_entry(e))
            .collect();
        let render_ref = recorded[0].render_ref.clone();
        recorded.extend(keys.iter().map(|key| Member {
            key: key.clone(),
            render_ref: render_ref.clone(),
            wave: 0,
            digest: None,
        }));
        handle.put(&recorded).await.unwrap();
    }

    pub async fn config_map(&self, name: &str) -> Option<Value> {
        let api: Api<k8s_openapi::api::core::v1::ConfigMap> =
            Api::namespaced(self.env.client.clone(), &self.env.namespace);
        api.get_opt(name)
            .await
            .unwrap()
            .map(|c| serde_json::to_value(c).unwrap())
    }
}

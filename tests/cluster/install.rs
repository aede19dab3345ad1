//! `convoy install` on the real control plane: what convoy's own identities may do (the table
//! in README.md, checked against `kubectl auth can-i --list`), and the admission policies
//! that hold them to their writes whatever RBAC says.
//!
//! The install is cluster-wide (ClusterRoles, admission policies), so one test does it all.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::json;

use crate::support::{STORE_NAMESPACE, TestEnv, eventually, repo_root};

/// Resources every authenticated user may use (self-reviews), left out of the table.
const EVERYONE: [&str; 3] = [
    "selfsubjectreviews.authentication.k8s.io",
    "selfsubjectaccessreviews.authorization.k8s.io",
    "selfsubjectrulesreviews.authorization.k8s.io",
];

/// `kubectl auth can-i --list` of a ServiceAccount of convoy in `namespace`: resource → verbs.
fn can_i(env: &TestEnv, who: &str, namespace: &str) -> BTreeMap<String, String> {
    let out = env.kubectl(&[
        "auth",
        "can-i",
        "--list",
        &format!("--as=system:serviceaccount:{STORE_NAMESPACE}:{who}"),
        "-n",
        namespace,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut rows = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines().skip(1) {
        // Resource rows start with the resource; non-resource URL rows start with spaces.
        if line.starts_with(' ') {
            continue;
        }
        let resource = line
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_string();
        if EVERYONE.contains(&resource.as_str()) {
            continue;
        }
        let verbs = line
            .rsplit_once('[')
            .map(|(_, v)| v.trim_end_matches(']').to_string())
            .unwrap_or_default();
        rows.insert(resource, verbs);
    }
    rows
}

/// The RBAC table as README.md holds it, between its markers.
fn readme_table() -> String {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let start = readme
        .find("<!-- rbac-table -->")
        .expect("README.md has <!-- rbac-table -->");
    let end = readme
        .find("<!-- /rbac-table -->")
        .expect("README.md has <!-- /rbac-table -->");
    readme[start + "<!-- rbac-table -->".len()..end]
        .trim()
        .to_string()
}

/// Wait until `attempt` (a dry run) is refused with `message`: admission loads a policy created
/// a moment ago only after its informer sees it, so a write right after the install may pass.
async fn in_force(what: &str, message: &str, attempt: impl Fn() -> std::process::Output) {
    eventually(what, Duration::from_secs(30), || async {
        let out = attempt();
        (!out.status.success() && String::from_utf8_lossy(&out.stderr).contains(message))
            .then_some(())
    })
    .await;
}

#[tokio::test]
async fn convoys_identities_can_do_what_readme_says_and_admission_holds_them_to_it() {
    let env = TestEnv::new("install-rbac").await;
    let workloads = [
        "clusterrolebinding/convoy-controller-workloads",
        "clusterrolebinding/convoy-observer-workloads",
        "clusterrole/convoy-controller-workloads",
        "clusterrole/convoy-observer-workloads",
    ];
    let forget_cluster_admin = || {
        let mut args = vec!["delete", "--ignore-not-found"];
        args.extend(workloads);
        assert!(env.kubectl(&args).status.success());
    };
    // The namespace the controller's ClusterRoleBinding serves.
    let binding_namespace = || {
        let subject = env.kubectl(&[
            "get",
            "clusterrolebinding",
            "convoy-controller",
            "-o",
            "jsonpath={.subjects[0].namespace}",
        ]);
        String::from_utf8_lossy(&subject.stdout).into_owned()
    };
    forget_cluster_admin();
    // --move: a control plane reused across runs may hold the daemon tests' install.
    let install = env.convoy(&["install", "-n", STORE_NAMESPACE, "--move"]);
    assert!(
        install.status.success(),
        "{}",
        String::from_utf8_lossy(&install.stderr)
    );
    // A second install into another namespace would take the cluster-wide objects from this
    // one: it is refused, and nothing is applied (the binding still names this install).
    let elsewhere = env.convoy(&["install", "-n", "convoy-elsewhere"]);
    assert_eq!(elsewhere.status.code(), Some(4));
    assert_eq!(
        String::from_utf8_lossy(&elsewhere.stderr).trim_end(),
        format!(
            "error: convoy is installed in namespace {STORE_NAMESPACE}: its ClusterRoles, ClusterRoleBindings and admission policies are cluster-wide and serve one install. `convoy install -n {STORE_NAMESPACE}` upgrades it; --move moves them to convoy-elsewhere, and the install in {STORE_NAMESPACE} then runs without its permissions and admission policies"
        )
    );
    assert_eq!(binding_namespace(), STORE_NAMESPACE);
    assert!(
        !env.kubectl(&["get", "namespace", "convoy-elsewhere"])
            .status
            .success()
    );
    // An install whose namespace was deleted without its cluster-wide objects left nothing to
    // break: it does not block an install here, which takes the binding back.
    let patched = env.kubectl(&[
        "patch",
        "clusterrolebinding",
        "convoy-controller",
        "--type=json",
        "-p",
        r#"[{"op":"replace","path":"/subjects/0/namespace","value":"convoy-deleted-long-ago"}]"#,
    ]);
    assert!(
        patched.status.success(),
        "{}",
        String::from_utf8_lossy(&patched.stderr)
    );
    let reinstall = env.convoy(&["install", "-n", STORE_NAMESPACE]);
    assert!(
        reinstall.status.success(),
        "{}",
        String::from_utf8_lossy(&reinstall.stderr)
    );
    assert_eq!(binding_namespace(), STORE_NAMESPACE);

    // The table: what each identity may do in every namespace, and beyond that in its own.
    let mut table = vec![
        "| identity | where | resource | verbs |".to_string(),
        "| --- | --- | --- | --- |".to_string(),
    ];
    for who in ["convoy-controller", "convoy-observer"] {
        let everywhere = can_i(&env, who, &env.namespace);
        let own = can_i(&env, who, STORE_NAMESPACE);
        for (resource, verbs) in &everywhere {
            table.push(format!(
                "| {who} | every namespace | {resource} | {verbs} |"
            ));
        }
        for (resource, verbs) in &own {
            if everywhere.get(resource) != Some(verbs) {
                table.push(format!(
                    "| {who} | {STORE_NAMESPACE} only | {resource} | {verbs} |"
                ));
            }
        }
        // What neither may do, anywhere.
        for denied in [
            "create clusterrolebindings",
            "bind clusterroles",
            "escalate clusterroles",
            "create serviceaccounts/token",
            "get secrets",
            "create deployments",
        ] {
            let mut args = vec!["auth", "can-i"];
            args.extend(denied.split(' '));
            let as_who = format!("--as=system:serviceaccount:{STORE_NAMESPACE}:{who}");
            args.extend([as_who.as_str(), "-n", env.namespace.as_str()]);
            let out = env.kubectl(&args);
            assert_eq!(
                String::from_utf8_lossy(&out.stdout).trim(),
                "no",
                "{who} may {denied}"
            );
        }
    }
    assert_eq!(
        table.join("\n"),
        readme_table(),
        "README.md's RBAC table differs from `kubectl auth can-i --list`"
    );

    // The observer may patch Releases (RBAC), but only their /sync annotation (admission).
    env.kubectl_apply_text(
        &json!({"apiVersion": "core.convoy.kumodo.io/v1alpha1", "kind": "Release",
            "metadata": {"name": "web", "namespace": env.namespace},
            "spec": {"source": {"kind": "GitRepository", "name": "repo"}}})
        .to_string(),
        &[],
    );
    let as_observer = format!("--as=system:serviceaccount:{STORE_NAMESPACE}:convoy-observer");
    let patch_as_observer = |body: &str, dry_run: &str| {
        env.kubectl(&[
            &as_observer,
            "-n",
            &env.namespace,
            "patch",
            "release",
            "web",
            dry_run,
            "--type=merge",
            "-p",
            body,
        ])
    };
    let patch = |body: &str| patch_as_observer(body, "--dry-run=none");
    // A new policy takes a moment to load into admission: wait (with a dry run) until it holds.
    const OBSERVER_FENCE: &str = "convoy's observer may change only the convoy.kumodo.io/sync-requested-at annotation of a Release";
    in_force("the observer's policy", OBSERVER_FENCE, || {
        patch_as_observer(
            r#"{"spec":{"targetNamespace":"kube-system"}}"#,
            "--dry-run=server",
        )
    })
    .await;
    let allowed = patch(
        r#"{"metadata":{"annotations":{"convoy.kumodo.io/sync-requested-at":"2026-12-01T00:00:00Z"}}}"#,
    );
    assert!(
        allowed.status.success(),
        "{}",
        String::from_utf8_lossy(&allowed.stderr)
    );
    for body in [
        r#"{"spec":{"targetNamespace":"kube-system"}}"#,
        r#"{"spec":{"source":{"path":"../other"}}}"#,
        r#"{"metadata":{"annotations":{"convoy.kumodo.io/pin":"x"}}}"#,
        r#"{"metadata":{"labels":{"team":"b"}}}"#,
    ] {
        let denied = patch(body);
        assert!(!denied.status.success(), "{body}");
        assert!(
            String::from_utf8_lossy(&denied.stderr).contains(OBSERVER_FENCE),
            "{body}: {}",
            String::from_utf8_lossy(&denied.stderr)
        );
    }

    // With --cluster-admin the controller may write anything, except convoy itself.
    let install = env.convoy(&["install", "-n", STORE_NAMESPACE, "--cluster-admin"]);
    assert!(install.status.success());
    let as_controller = format!("--as=system:serviceaccount:{STORE_NAMESPACE}:convoy-controller");
    const SELF_FENCE: &str = "convoy's own identities may not change convoy's Deployments, ServiceAccounts, RBAC or admission policies";
    in_force("convoy's self-protection policy", SELF_FENCE, || {
        env.kubectl(&[
            &as_controller,
            "--dry-run=server",
            "delete",
            "clusterrole/convoy-observer",
        ])
    })
    .await;
    let scale = env.kubectl(&[
        &as_controller,
        "-n",
        STORE_NAMESPACE,
        "scale",
        "deployment/convoy-controller",
        "--replicas=0",
    ]);
    let delete_role = env.kubectl(&[&as_controller, "delete", "clusterrole/convoy-observer"]);
    let elsewhere = env.kubectl(&[
        &as_controller,
        "-n",
        &env.namespace,
        "create",
        "configmap",
        "written-by-the-controller",
    ]);
    forget_cluster_admin();
    for denied in [scale, delete_role] {
        assert!(!denied.status.success());
        assert!(
            String::from_utf8_lossy(&denied.stderr).contains(SELF_FENCE),
            "{}",
            String::from_utf8_lossy(&denied.stderr)
        );
    }
    assert!(
        elsewhere.status.success(),
        "{}",
        String::from_utf8_lossy(&elsewhere.stderr)
    );
}

/// From a cluster convoy was never installed in: `convoy check` names what is missing and
/// the fix, `convoy install --wait` waits for the daemon and says what to do next, and then
/// every check passes.
#[tokio::test]
async fn check_before_and_after_install_wait() {
    let plane = crate::support::ControlPlane::own_bare("check", &[]);
    let convoy = |args: &[&str]| {
        let out = std::process::Command::new(crate::support::convoy_bin())
            .arg("--kubeconfig")
            .arg(&plane.kubeconfig)
            .args(args)
            .env("PATH", crate::support::path_with_testenv())
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, before, _) = convoy(&["check"]);
    assert_eq!(code, 1);
    let (code, installed, stderr) = convoy(&["install", "--wait", "--timeout", "3m"]);
    assert_eq!(code, 0, "{stderr}");
    let (code, after, _) = convoy(&["check"]);
    assert_eq!(code, 0, "{after}");
    let server = std::fs::read_to_string(&plane.kubeconfig)
        .unwrap()
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: ").map(str::to_string))
        .unwrap();
    let mut s = insta::Settings::clone_current();
    s.add_filter(&regex::escape(&server), "SERVER");
    s.add_filter(r"Kubernetes v[0-9.]+", "Kubernetes VERSION");
    s.add_filter(r"has the \d+ permissions", "has the N permissions");
    s.bind(|| {
        insta::assert_snapshot!("check_before_install", before);
        insta::assert_snapshot!("install_wait", installed);
        insta::assert_snapshot!("check_after_install", after);
    });
}

//! Apply order: by sync wave, then by kind so that what others depend on comes first
//! (Namespaces and CRDs before the objects that live in them), then by identity.
//!
//! The kind order follows Helm's install order, which users already know.

use super::object::Object;

/// Kinds in the order they are applied within a wave; other kinds come after, by name.
const KIND_ORDER: &[&str] = &[
    "Namespace",
    "NetworkPolicy",
    "ResourceQuota",
    "LimitRange",
    "PodSecurityPolicy",
    "PodDisruptionBudget",
    "ServiceAccount",
    "Secret",
    "SecretList",
    "ConfigMap",
    "StorageClass",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "CustomResourceDefinition",
    "ClusterRole",
    "ClusterRoleList",
    "ClusterRoleBinding",
    "ClusterRoleBindingList",
    "Role",
    "RoleList",
    "RoleBinding",
    "RoleBindingList",
    "Service",
    "DaemonSet",
    "Pod",
    "ReplicationController",
    "ReplicaSet",
    "Deployment",
    "HorizontalPodAutoscaler",
    "StatefulSet",
    "Job",
    "CronJob",
    "IngressClass",
    "Ingress",
    "APIService",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
];

fn kind_rank(kind: &str) -> usize {
    KIND_ORDER
        .iter()
        .position(|k| *k == kind)
        .unwrap_or(KIND_ORDER.len())
}

/// Sort objects into apply order. Objects whose wave annotation is invalid sort as wave 0;
/// the render rejects them before this matters.
pub fn sort_for_apply(objects: &mut [Object]) {
    objects.sort_by_cached_key(|o| {
        (
            o.wave().unwrap_or(0),
            kind_rank(o.kind()),
            o.kind().to_string(),
            o.key(),
        )
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(kind: &str, name: &str, wave: Option<&str>) -> Object {
        let mut v = json!({"apiVersion": "v1", "kind": kind, "metadata": {"name": name}});
        if let Some(w) = wave {
            v["metadata"]["annotations"] = json!({"convoy.kumodo.io/sync-wave": w});
        }
        Object(v)
    }

    #[test]
    fn waves_first_then_namespaces_and_crds_before_their_users() {
        let mut objects = vec![
            obj("Deployment", "web", Some("1")),
            obj("Widget", "w", None),
            obj("Service", "web", None),
            obj("CustomResourceDefinition", "widgets.example.com", None),
            obj("Namespace", "apps", None),
            obj("Job", "migrate", Some("-1")),
        ];
        sort_for_apply(&mut objects);
        let order: Vec<String> = objects
            .iter()
            .map(|o| format!("{}/{}", o.kind(), o.name()))
            .collect();
        assert_eq!(
            order,
            [
                "Job/migrate",
                "Namespace/apps",
                "CustomResourceDefinition/widgets.example.com",
                "Service/web",
                "Widget/w",
                "Deployment/web"
            ]
        );
    }
}

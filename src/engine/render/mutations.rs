//! Post-render mutations (`apply_mutations`), applied in order after rendering.
//!
//! Spec: reconcile-flow.txt stageRender step 5. Each mutation does exactly one thing to the
//! objects its `target` selects (all objects without a target):
//!
//! - `setNamespace` — set `metadata.namespace` of namespaced objects (well-known cluster-scoped
//!   kinds such as Namespace, ClusterRole or CRDs are left alone);
//! - `labels` / `annotations` — add or replace entries in `metadata` only (selectors and pod
//!   templates are not touched: changing a selector is a breaking change, not a label);
//! - `jsonPatch` — RFC 6902 operations;
//! - `mergePatch` — an RFC 7386 merge patch;
//! - `images` — override `image` of every container, init container and ephemeral container
//!   whose image name (without tag or digest) matches, as kustomize's `images` does.
//!
//! A failing mutation is stage `Rendering`, reason `DeployFailed`, and names the mutation.

use crate::engine::error::Invalid;
use serde_json::Value;

use super::error::RenderError;
use super::object::Object;
use crate::engine::api::{ImageOverride, Mutation, MutationTarget};
use crate::engine::selectors::{self, Selector};

/// Kinds that are never namespaced; `setNamespace` leaves them alone.
const CLUSTER_SCOPED: &[&str] = &[
    "Namespace",
    "Node",
    "PersistentVolume",
    "StorageClass",
    "CustomResourceDefinition",
    "ClusterRole",
    "ClusterRoleBinding",
    "PriorityClass",
    "IngressClass",
    "RuntimeClass",
    "CSIDriver",
    "CSINode",
    "VolumeAttachment",
    "APIService",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "FlowSchema",
    "PriorityLevelConfiguration",
    "CertificateSigningRequest",
    "GlobalHealthRuleSet",
];

/// Whether objects of `kind` are cluster-scoped as far as convoy knows without a cluster.
pub fn is_known_cluster_scoped(kind: &str) -> bool {
    CLUSTER_SCOPED.contains(&kind)
}

/// Apply `mutations` in order. Returns the names of the mutations, for
/// `status.lastAttempted.resolvedMutations`.
pub fn apply_mutations(
    objects: &mut [Object],
    mutations: &[Mutation],
) -> Result<Vec<String>, RenderError> {
    let mut applied = Vec::new();
    for mutation in mutations {
        let fail = |message: String| RenderError::Mutation {
            name: mutation.name.clone(),
            message,
        };
        let operations = [
            mutation.set_namespace.is_some(),
            mutation.labels.is_some(),
            mutation.annotations.is_some(),
            mutation.json_patch.is_some(),
            mutation.merge_patch.is_some(),
            mutation.images.is_some(),
        ]
        .iter()
        .filter(|set| **set)
        .count();
        if operations != 1 {
            return Err(fail(format!(
                "must set exactly one of setNamespace, labels, annotations, jsonPatch, mergePatch, images (found {operations})"
            )));
        }
        let selector = match mutation
            .target
            .as_ref()
            .and_then(|t| t.label_selector.as_deref())
        {
            Some(s) => Some(selectors::parse(s).map_err(|e| fail(e.to_string()))?),
            None => None,
        };
        for object in objects.iter_mut() {
            if !matches_target(object, mutation.target.as_ref(), selector.as_ref()) {
                continue;
            }
            mutate(object, mutation).map_err(|message| fail(format!("{object}: {message}")))?;
            if object.kind().is_empty()
                || object.name().is_empty()
                || object.api_version().is_empty()
            {
                return Err(fail(format!(
                    "{object}: the result has no apiVersion, kind or metadata.name"
                )));
            }
        }
        applied.push(mutation.name.clone());
    }
    Ok(applied)
}

fn mutate(object: &mut Object, mutation: &Mutation) -> Result<(), Invalid> {
    if let Some(namespace) = &mutation.set_namespace {
        if !is_known_cluster_scoped(object.kind()) {
            object.set_namespace(namespace);
        }
    } else if let Some(labels) = &mutation.labels {
        set_metadata_map(object, "labels", labels);
    } else if let Some(annotations) = &mutation.annotations {
        set_metadata_map(object, "annotations", annotations);
    } else if let Some(ops) = &mutation.json_patch {
        let patch: json_patch::Patch = serde_json::to_value(ops)
            .and_then(serde_json::from_value)
            .map_err(|e| format!("invalid JSON patch: {e}"))?;
        json_patch::patch(&mut object.0, &patch).map_err(|e| e.to_string())?;
    } else if let Some(patch) = &mutation.merge_patch {
        if !patch.is_object() {
            return Err(Invalid("mergePatch must be a mapping".to_string()));
        }
        json_patch::merge(&mut object.0, patch);
    } else if let Some(images) = &mutation.images {
        override_images(&mut object.0, images);
    }
    Ok(())
}

fn set_metadata_map(
    object: &mut Object,
    field: &str,
    entries: &std::collections::BTreeMap<String, String>,
) {
    if let Some(meta) = object.metadata_mut() {
        let map = meta
            .entry(field)
            .or_insert_with(|| Value::Object(Default::default()));
        if !map.is_object() {
            *map = Value::Object(Default::default());
        }
        if let Some(map) = map.as_object_mut() {
            for (k, v) in entries {
                map.insert(k.clone(), Value::String(v.clone()));
            }
        }
    }
}

pub(crate) fn matches_target(
    object: &Object,
    target: Option<&MutationTarget>,
    selector: Option<&Selector>,
) -> bool {
    let Some(t) = target else {
        return true;
    };
    t.group.as_deref().is_none_or(|g| g == object.group())
        && t.kind.as_deref().is_none_or(|k| k == object.kind())
        && t.name.as_deref().is_none_or(|n| n == object.name())
        && t.namespace
            .as_deref()
            .is_none_or(|ns| ns == object.namespace().unwrap_or_default())
        && selector.is_none_or(|s| selectors::matches(s, object.labels()))
}

/// Walk the object and override every container image that matches.
fn override_images(value: &mut Value, overrides: &[ImageOverride]) {
    match value {
        Value::Object(map) => {
            for (key, child) in map.iter_mut() {
                if matches!(
                    key.as_str(),
                    "containers" | "initContainers" | "ephemeralContainers"
                ) && let Value::Array(containers) = child
                {
                    for container in containers.iter_mut() {
                        if let Some(Value::String(image)) = container.get_mut("image")
                            && let Some(new) = overridden_image(image, overrides)
                        {
                            *image = new;
                        }
                    }
                }
                override_images(child, overrides);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|i| override_images(i, overrides)),
        _ => {}
    }
}

/// The image reference split into name, tag and digest. The tag separator is the last `:`
/// after the last `/`, so a registry port is part of the name.
pub fn split_image(image: &str) -> (&str, Option<&str>, Option<&str>) {
    let (rest, digest) = match image.split_once('@') {
        Some((r, d)) => (r, Some(d)),
        None => (image, None),
    };
    let slash = rest.rfind('/').map(|i| i + 1).unwrap_or(0);
    match rest[slash..].rfind(':') {
        Some(i) => (&rest[..slash + i], Some(&rest[slash + i + 1..]), digest),
        None => (rest, None, digest),
    }
}

fn overridden_image(image: &str, overrides: &[ImageOverride]) -> Option<String> {
    let (name, tag, digest) = split_image(image);
    let o = overrides.iter().find(|o| o.name == name)?;
    let name = o.new_name.as_deref().unwrap_or(name);
    Some(match (&o.digest, &o.new_tag) {
        (Some(d), _) => format!("{name}@{d}"),
        (None, Some(t)) => format!("{name}:{t}"),
        (None, None) => match (tag, digest) {
            (_, Some(d)) => format!("{name}@{d}"),
            (Some(t), None) => format!("{name}:{t}"),
            (None, None) => name.to_string(),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::api::JsonPatchOp;
    use serde_json::json;

    fn objects() -> Vec<Object> {
        vec![
            Object(json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "web", "labels": {"app": "web", "tier": "front"}},
                "spec": {"template": {"spec": {
                    "initContainers": [{"name": "init", "image": "registry:5000/tools/init:1.0"}],
                    "containers": [{"name": "web", "image": "nginx:1.25"}, {"name": "side", "image": "envoy@sha256:abc"}]}}}})),
            Object(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "labels": {"app": "web"}}, "data": {"a": "1"}}),
            ),
            Object(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "apps"}})),
        ]
    }

    fn mutation(name: &str) -> Mutation {
        Mutation {
            name: name.into(),
            ..Default::default()
        }
    }

    #[test]
    fn set_namespace_skips_cluster_scoped_kinds() {
        let mut objs = objects();
        let m = Mutation {
            set_namespace: Some("prod".into()),
            ..mutation("ns")
        };
        assert_eq!(apply_mutations(&mut objs, &[m]).unwrap(), ["ns"]);
        assert_eq!(objs[0].namespace(), Some("prod"));
        assert_eq!(objs[1].namespace(), Some("prod"));
        assert_eq!(objs[2].namespace(), None);
    }

    #[test]
    fn labels_and_annotations_are_added_to_metadata_of_targeted_objects() {
        let mut objs = objects();
        let labels = Mutation {
            labels: Some([("team".to_string(), "core".to_string())].into()),
            target: Some(MutationTarget {
                kind: Some("Deployment".into()),
                ..Default::default()
            }),
            ..mutation("team")
        };
        let annotations = Mutation {
            annotations: Some([("owner".to_string(), "ops".to_string())].into()),
            target: Some(MutationTarget {
                label_selector: Some("app=web,tier notin (back)".into()),
                ..Default::default()
            }),
            ..mutation("owner")
        };
        apply_mutations(&mut objs, &[labels, annotations]).unwrap();
        assert_eq!(objs[0].0["metadata"]["labels"]["team"], "core");
        assert!(objs[1].0["metadata"]["labels"].get("team").is_none());
        assert_eq!(objs[0].0["metadata"]["annotations"]["owner"], "ops");
        assert_eq!(objs[1].0["metadata"]["annotations"]["owner"], "ops");
        assert!(objs[2].0["metadata"].get("annotations").is_none());
    }

    #[test]
    fn json_patch_and_merge_patch_apply_in_order() {
        let mut objs = objects();
        let patch = Mutation {
            json_patch: Some(vec![JsonPatchOp {
                op: "replace".into(),
                path: "/data/a".into(),
                from: None,
                value: Some(json!("2")),
            }]),
            target: Some(MutationTarget {
                kind: Some("ConfigMap".into()),
                name: Some("cfg".into()),
                ..Default::default()
            }),
            ..mutation("bump")
        };
        let merge = Mutation {
            merge_patch: Some(json!({"data": {"a": null, "b": "3"}})),
            target: Some(MutationTarget {
                group: Some(String::new()),
                kind: Some("ConfigMap".into()),
                ..Default::default()
            }),
            ..mutation("swap")
        };
        apply_mutations(&mut objs, &[patch, merge]).unwrap();
        assert_eq!(objs[1].0["data"], json!({"b": "3"}));
    }

    #[test]
    fn a_failing_patch_names_the_mutation_and_object() {
        let mut objs = objects();
        let bad = Mutation {
            json_patch: Some(vec![JsonPatchOp {
                op: "remove".into(),
                path: "/data/missing".into(),
                from: None,
                value: None,
            }]),
            target: Some(MutationTarget {
                kind: Some("ConfigMap".into()),
                ..Default::default()
            }),
            ..mutation("drop-missing")
        };
        let err = apply_mutations(&mut objs, &[bad]).unwrap_err();
        assert_eq!(err.stage(), crate::engine::api::FailureStage::Rendering);
        assert_eq!(err.reason(), crate::engine::api::Reason::DeployFailed);
        assert!(
            err.to_string()
                .starts_with("mutation \"drop-missing\" failed: ConfigMap/cfg: "),
            "{err}"
        );
    }

    #[test]
    fn a_mutation_with_two_operations_is_rejected() {
        let mut objs = objects();
        let two = Mutation {
            set_namespace: Some("x".into()),
            labels: Some(Default::default()),
            ..mutation("both")
        };
        let err = apply_mutations(&mut objs, &[two]).unwrap_err().to_string();
        assert!(err.contains("must set exactly one"), "{err}");
    }

    #[test]
    fn images_are_overridden_in_every_container_list() {
        let mut objs = objects();
        let images = Mutation {
            images: Some(vec![
                ImageOverride {
                    name: "nginx".into(),
                    new_tag: Some("1.27".into()),
                    ..Default::default()
                },
                ImageOverride {
                    name: "registry:5000/tools/init".into(),
                    new_name: Some("mirror.local/init".into()),
                    ..Default::default()
                },
                ImageOverride {
                    name: "envoy".into(),
                    digest: Some("sha256:def".into()),
                    ..Default::default()
                },
            ]),
            ..mutation("pin-images")
        };
        apply_mutations(&mut objs, &[images]).unwrap();
        let spec = &objs[0].0["spec"]["template"]["spec"];
        assert_eq!(spec["containers"][0]["image"], "nginx:1.27");
        assert_eq!(spec["containers"][1]["image"], "envoy@sha256:def");
        assert_eq!(spec["initContainers"][0]["image"], "mirror.local/init:1.0");
    }

    #[test]
    fn image_references_split_like_docker() {
        assert_eq!(split_image("nginx"), ("nginx", None, None));
        assert_eq!(
            split_image("host:5000/a/b:1.0"),
            ("host:5000/a/b", Some("1.0"), None)
        );
        assert_eq!(split_image("a@sha256:x"), ("a", None, Some("sha256:x")));
        assert_eq!(
            split_image("a:1@sha256:x"),
            ("a", Some("1"), Some("sha256:x"))
        );
    }
}

//! Helm value layers: `resolve_value_layers` reads each `valuesFrom` layer and merges them
//! in order, then the inline values on top.
//!
//! Spec: reconcile-flow.txt stageRender step 3. Order: chart defaults < `valuesFrom` layers
//! in order (ConfigMap key, Secret key, GitRepository path) < inline values. convoy merges the
//! user layers into one document and hands it to `helm template`, which coalesces it with the
//! chart's defaults; a `null` therefore removes a default, as with `helm -f`.

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use serde_json::Value;

use crate::engine::api::{Release, ValuesFrom, ValuesFromKind};
use crate::engine::objects::ObjectReader;
use crate::engine::render::manifests::yaml_options;
use crate::engine::render::secret_values::SecretValues;
use crate::engine::source::Coordinator;
use crate::engine::source::resolve::{git_request, secret_data};

/// Why a value layer could not be read (`ValuesNotReady`, retried).
#[derive(Debug, thiserror::Error)]
#[error("values layer {index} ({layer}): {message}")]
pub struct ValuesError {
    pub index: usize,
    pub layer: String,
    pub message: String,
    /// The API server could not be reached (the CLI exits 3 rather than 4).
    pub unreachable: bool,
    /// The layer's GitRepository is still being fetched (the daemon comes back when it ends).
    pub fetching: Option<crate::engine::source::coordinator::FetchWait>,
}

/// Merge `overlay` into `base` the way Helm merges values files: maps merge key by key,
/// anything else (lists, scalars, null) replaces.
pub fn merge_values(base: &mut Value, overlay: Value) {
    match (base, overlay) {
        (Value::Object(base_map), Value::Object(overlay_map)) => {
            for (key, value) in overlay_map {
                match base_map.get_mut(&key) {
                    Some(existing) if existing.is_object() && value.is_object() => {
                        merge_values(existing, value)
                    }
                    _ => {
                        base_map.insert(key, value);
                    }
                }
            }
        }
        (base, overlay) => *base = overlay,
    }
}

/// The user values of a Helm Release, and what of them came from Secrets.
#[derive(Default)]
pub struct UserValues {
    pub values: Value,
    /// The Secret layers' values, to keep out of helm's messages.
    pub secret: SecretValues,
}

/// The user values of a Helm Release: every `valuesFrom` layer in order, then inline values.
///
/// `waiter`: who a layer's repository fetch is kept for when the pass stops waiting for it.
pub async fn resolve_value_layers(
    release: &Release,
    reader: &ObjectReader,
    coordinator: &Coordinator,
    waiter: Option<&str>,
) -> Result<UserValues, ValuesError> {
    let mut merged = UserValues {
        values: Value::Object(Default::default()),
        secret: SecretValues::default(),
    };
    let Some(helm) = &release.spec.content.helm else {
        return Ok(merged);
    };
    for (i, layer) in helm.values_from.iter().enumerate() {
        let values = read_layer(layer, i + 1, release, reader, coordinator, waiter).await?;
        if layer.kind == ValuesFromKind::Secret {
            merged.secret.add(&values);
        }
        merge_values(&mut merged.values, values);
    }
    if let Some(inline) = &helm.values {
        merge_values(&mut merged.values, inline.clone());
    }
    Ok(merged)
}

async fn read_layer(
    layer: &ValuesFrom,
    index: usize,
    release: &Release,
    reader: &ObjectReader,
    coordinator: &Coordinator,
    waiter: Option<&str>,
) -> Result<Value, ValuesError> {
    let namespace = release.metadata.namespace.as_deref().unwrap_or_default();
    let key = layer
        .key
        .clone()
        .unwrap_or_else(|| "values.yaml".to_string());
    let describe = match layer.kind {
        ValuesFromKind::ConfigMap => format!("ConfigMap {namespace}/{} key {key}", layer.name),
        ValuesFromKind::Secret => format!("Secret {namespace}/{} key {key}", layer.name),
        ValuesFromKind::GitRepository => format!(
            "GitRepository {namespace}/{} path {}",
            layer.name,
            layer.path.as_deref().unwrap_or("values.yaml")
        ),
    };
    let fail = |message: String, unreachable: bool| ValuesError {
        index,
        layer: describe.clone(),
        message,
        unreachable,
        fetching: None,
    };
    let read_err = |e: crate::engine::objects::ReadError| {
        let unreachable = e.is_unreachable();
        fail(crate::engine::error::chain(&e), unreachable)
    };
    let text = match layer.kind {
        ValuesFromKind::ConfigMap => {
            let cm: ConfigMap = reader
                .get(namespace, &layer.name)
                .await
                .map_err(read_err)?
                .ok_or_else(|| fail("not found".into(), false))?;
            cm.data
                .as_ref()
                .and_then(|d| d.get(&key))
                .cloned()
                .ok_or_else(|| fail(format!("has no key {key:?}"), false))?
        }
        ValuesFromKind::Secret => {
            let secret: Secret = reader
                .get(namespace, &layer.name)
                .await
                .map_err(read_err)?
                .ok_or_else(|| fail("not found".into(), false))?;
            let data = secret_data(&secret);
            let bytes = data
                .get(&key)
                .ok_or_else(|| fail(format!("has no key {key:?}"), false))?;
            String::from_utf8(bytes.clone()).map_err(|_| fail("is not UTF-8 text".into(), false))?
        }
        ValuesFromKind::GitRepository => {
            let path = layer
                .path
                .clone()
                .unwrap_or_else(|| "values.yaml".to_string());
            let resolved = git_request(reader, namespace, &layer.name, None)
                .await
                .map_err(|e| fail(e.to_string(), false))?;
            // Kept for the Release's pass when it stops waiting (a layer's repository may
            // be slow as its source may).
            let reuse = crate::engine::source::Reuse {
                waiter: waiter.map(str::to_string),
                ..Default::default()
            };
            let artifact = coordinator
                .ensure_reusing(
                    &resolved.scope,
                    &resolved.request,
                    resolved.credentials.as_ref(),
                    &reuse,
                )
                .await
                .map_err(|e| ValuesError {
                    fetching: e.fetching().cloned(),
                    ..fail(crate::engine::error::chain(&e), false)
                })?;
            let file = crate::engine::source::archive::path_inside(&artifact.path, &path)
                .map_err(|why| fail(format!("path {path:?} {why}"), false))?;
            std::fs::read_to_string(file).map_err(|e| {
                fail(
                    format!("cannot read {path} at {}: {e}", artifact.revision),
                    false,
                )
            })?
        }
    };
    // Never echo the content: a Secret layer holds secrets.
    let values: Value = super::bounded_yaml::from_str(&text, yaml_options()).map_err(|e| {
        let line = e.location().map(|l| l.line()).unwrap_or(0);
        if super::bounded_yaml::expands(&e) {
            return fail(
                format!(
                    "expands through its aliases or merge keys to more than {} times its size (line {line})",
                    super::bounded_yaml::EXPANSION
                ),
                false,
            );
        }
        fail(format!("is not valid YAML (line {line})"), false)
    })?;
    match values {
        Value::Object(_) => Ok(values),
        Value::Null => Ok(Value::Object(Default::default())),
        _ => Err(fail("must be a YAML mapping".into(), false)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn later_layers_win_and_maps_merge_key_by_key() {
        let mut values =
            json!({"image": {"repository": "web", "tag": "1.0"}, "replicas": 1, "ports": [80]});
        merge_values(
            &mut values,
            json!({"image": {"tag": "1.1"}, "ports": [8080, 8443]}),
        );
        merge_values(&mut values, json!({"replicas": 3}));
        assert_eq!(
            values,
            json!({"image": {"repository": "web", "tag": "1.1"}, "replicas": 3, "ports": [8080, 8443]})
        );
    }

    #[test]
    fn null_is_kept_so_helm_removes_the_chart_default() {
        let mut values = json!({"resources": {"limits": {"cpu": "1"}}});
        merge_values(&mut values, json!({"resources": {"limits": null}}));
        assert_eq!(values, json!({"resources": {"limits": null}}));
    }

    #[test]
    fn a_scalar_replaces_a_map_and_a_map_replaces_a_scalar() {
        let mut values = json!({"a": {"b": 1}, "c": 2});
        merge_values(&mut values, json!({"a": "flat", "c": {"d": 3}}));
        assert_eq!(values, json!({"a": "flat", "c": {"d": 3}}));
    }

    #[tokio::test]
    async fn layers_apply_in_order_configmap_then_secret_then_inline() {
        use crate::engine::objects::LocalObjects;
        let release: Release = serde_json::from_value(json!({
            "apiVersion": "core.convoy.kumodo.io/v1alpha1", "kind": "Release",
            "metadata": {"name": "web", "namespace": "apps"},
            "spec": {
                "source": {"kind": "HelmRegistry", "name": "charts", "chart": "web"},
                "content": {"type": "helm", "helm": {
                    "valuesFrom": [
                        {"kind": "ConfigMap", "name": "base"},
                        {"kind": "Secret", "name": "creds", "key": "override.yaml"},
                    ],
                    "values": {"replicas": 5},
                }},
            },
        }))
        .unwrap();
        let local = LocalObjects::new(vec![
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "base"},
                   "data": {"values.yaml": "replicas: 1\nimage: {tag: '1.0'}\nregion: eu\n"}}),
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds"},
                   "stringData": {"override.yaml": "replicas: 2\nimage: {tag: '2.0'}\n"}}),
        ]);
        let reader = ObjectReader::Local(local);
        let dir = tempfile::tempdir().unwrap();
        let coordinator = Coordinator::new(crate::engine::source::Cache::new(dir.path()));
        let values = resolve_value_layers(&release, &reader, &coordinator, None)
            .await
            .unwrap();
        assert_eq!(
            values.values,
            json!({"replicas": 5, "image": {"tag": "2.0"}, "region": "eu"})
        );
    }

    /// A layer whose aliases of aliases stand for far more than its text is refused, naming
    /// the layer and the line, and echoing none of it.
    #[tokio::test]
    async fn a_layer_that_expands_through_its_aliases_is_refused() {
        use crate::engine::objects::LocalObjects;
        let release: Release = serde_json::from_value(json!({
            "apiVersion": "core.convoy.kumodo.io/v1alpha1", "kind": "Release",
            "metadata": {"name": "web", "namespace": "apps"},
            "spec": {
                "source": {"kind": "HelmRegistry", "name": "charts", "chart": "web"},
                "content": {"type": "helm", "helm": {"valuesFrom": [{"kind": "ConfigMap", "name": "base"}]}},
            },
        }))
        .unwrap();
        let mut text = format!("a: &a \"{}\"\n", "s3cret".repeat(1000));
        for (name, of) in [("b", "a"), ("c", "b"), ("d", "c"), ("e", "d")] {
            text.push_str(&format!(
                "{name}: &{name} [{}]\n",
                vec![format!("*{of}"); 10].join(", ")
            ));
        }
        let local = LocalObjects::new(vec![
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "base"},
                   "data": {"values.yaml": text}}),
        ]);
        let reader = ObjectReader::Local(local);
        let dir = tempfile::tempdir().unwrap();
        let coordinator = Coordinator::new(crate::engine::source::Cache::new(dir.path()));
        let Err(err) = resolve_value_layers(&release, &reader, &coordinator, None).await else {
            panic!("the layer was built");
        };
        assert_eq!(
            err.to_string(),
            "values layer 1 (ConfigMap apps/base key values.yaml): expands through its aliases or merge keys to more than 64 times its size (line 3)"
        );
    }

    #[tokio::test]
    async fn a_missing_layer_names_itself() {
        let release: Release = serde_json::from_value(json!({
            "apiVersion": "core.convoy.kumodo.io/v1alpha1", "kind": "Release",
            "metadata": {"name": "web", "namespace": "apps"},
            "spec": {
                "source": {"kind": "HelmRegistry", "name": "charts", "chart": "web"},
                "content": {"type": "helm", "helm": {"valuesFrom": [{"kind": "Secret", "name": "gone"}]}},
            },
        }))
        .unwrap();
        let reader = ObjectReader::Local(Default::default());
        let dir = tempfile::tempdir().unwrap();
        let coordinator = Coordinator::new(crate::engine::source::Cache::new(dir.path()));
        let Err(err) = resolve_value_layers(&release, &reader, &coordinator, None).await else {
            panic!("a missing layer was read");
        };
        assert_eq!(
            err.to_string(),
            "values layer 1 (Secret apps/gone key values.yaml): not found"
        );
    }
}

//! Where a command's Release comes from: the cluster (`convoy render NAME -n NS`) or local
//! files (`-f release.yaml -f sources.yaml`), with the objects it reads alongside.

use std::path::PathBuf;

use super::GlobalArgs;
use super::exit::{CliError, ExitStatus};
use crate::engine::api::Release;
use crate::engine::connect::Connection;
use crate::engine::objects::{LocalFileError, LocalObjects, ObjectReader};
use crate::engine::render::manifests::parse_documents;
use kube::{CustomResourceExt, Resource};

/// A Release and what to read its inputs from.
pub struct ReleaseInput {
    pub release: Release,
    pub reader: ObjectReader,
    /// The cluster the Release lives in, when it came from one.
    pub home: Option<Connection>,
}

/// Load the Release `name` from `files` when any are given, else from the cluster.
pub async fn load(
    global: &GlobalArgs,
    name: Option<&str>,
    files: &[PathBuf],
) -> Result<ReleaseInput, CliError> {
    if !files.is_empty() {
        return load_local(global, name, files);
    }
    let Some(name) = name else {
        return Err(CliError::usage("name a Release, or pass its file with -f"));
    };
    let home = global.connect().await?;
    let namespace = global
        .namespace
        .clone()
        .unwrap_or_else(|| home.default_namespace.clone());
    // A missing Release names its namespace and a close name; no CRDs say to install them.
    let release = super::lookup::release(&home, &namespace, name).await?;
    Ok(ReleaseInput {
        release,
        reader: ObjectReader::Cluster(home.client.clone()),
        home: Some(home),
    })
}

fn load_local(
    global: &GlobalArgs,
    name: Option<&str>,
    files: &[PathBuf],
) -> Result<ReleaseInput, CliError> {
    let invalid = |e: LocalFileError| CliError::new(ExitStatus::Invalid, e);
    // Each object with the file it came from, to name the file of an unknown field.
    let mut read: Vec<(String, serde_json::Value)> = Vec::new();
    for path in files {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| {
            invalid(LocalFileError::Read {
                path: file.clone(),
                source,
            })
        })?;
        let objects = parse_documents(&text, &file).map_err(|e| invalid(e.into()))?;
        read.extend(objects.into_iter().map(|o| (file.clone(), o.0)));
    }
    let (api_version, kind) = (Release::api_version(&()), Release::kind(&()));
    let candidates: Vec<&(String, serde_json::Value)> = read
        .iter()
        .filter(|(_, r)| r["apiVersion"] == *api_version && r["kind"] == *kind)
        .filter(|(_, r)| name.is_none_or(|n| r["metadata"]["name"] == n))
        .collect();
    let (file, value) = match candidates.as_slice() {
        [one] => (one.0.clone(), one.1.clone()),
        [] => {
            let what = name
                .map(|n| format!("Release {n:?}"))
                .unwrap_or_else(|| "Release".into());
            let found: Vec<&serde_json::Value> = read.iter().map(|(_, o)| o).collect();
            return Err(CliError::new(
                ExitStatus::Invalid,
                anyhow::anyhow!(
                    "the files given with -f hold no {what}{}",
                    kinds_hint(&found)
                ),
            ));
        }
        many => {
            let names: Vec<&str> = many
                .iter()
                .filter_map(|(_, r)| r["metadata"]["name"].as_str())
                .collect();
            return Err(CliError::usage(format!(
                "the files hold several Releases ({}); name one",
                names.join(", ")
            )));
        }
    };
    // The API server refuses a field its schema does not know (kubectl's strict field
    // validation): a misspelled `spec.sourc` read from a file would otherwise be dropped
    // without a word, and the Release rendered without what it meant.
    if let Some(unknown) = unknown_fields(&value, &release_schema()).into_iter().next() {
        return Err(CliError::new(
            ExitStatus::Invalid,
            anyhow::anyhow!(
                "{file}: Release {:?}: unknown field {:?}{}",
                value["metadata"]["name"].as_str().unwrap_or_default(),
                unknown.path,
                unknown
                    .meant
                    .map(|m| format!(" (did you mean {m:?}?)"))
                    .unwrap_or_default()
            ),
        ));
    }
    let mut release: Release = serde_json::from_value(value).map_err(|e| {
        CliError::new(
            ExitStatus::Invalid,
            anyhow::Error::new(e).context(format!("the Release in {file} is not valid")),
        )
    })?;
    if release
        .metadata
        .namespace
        .as_deref()
        .unwrap_or_default()
        .is_empty()
    {
        release.metadata.namespace = Some(
            global
                .namespace
                .clone()
                .unwrap_or_else(|| "default".to_string()),
        );
    }
    let objects = read.into_iter().map(|(_, o)| o).collect();
    Ok(ReleaseInput {
        release,
        reader: ObjectReader::Local(LocalObjects::new(objects)),
        home: None,
    })
}

/// What the files hold instead of a Release: their kinds, a kind that looks like a typo of
/// `Release`, or a Release of another API version.
fn kinds_hint(objects: &[&serde_json::Value]) -> String {
    let (api_version, kind) = (Release::api_version(&()), Release::kind(&()));
    let mut kinds: Vec<String> = objects
        .iter()
        .filter_map(|o| o["kind"].as_str())
        .map(str::to_string)
        .collect();
    kinds.sort();
    kinds.dedup();
    if kinds.is_empty() {
        return " (they hold no objects)".into();
    }
    let other_version = objects
        .iter()
        .filter(|o| o["kind"] == *kind)
        .find_map(|o| o["apiVersion"].as_str());
    let fix = if let Some(version) = other_version {
        format!("; a Release is apiVersion {api_version}, not {version}")
    } else if let Some(close) = super::lookup::closest(&kind, &kinds) {
        format!("; did you mean kind {kind:?} for {close:?}?")
    } else {
        String::new()
    };
    format!(" (they hold kinds {}){fix}", kinds.join(", "))
}

/// The Release's schema as the API server checks it: the CRD's openAPIV3Schema.
fn release_schema() -> serde_json::Value {
    Release::crd()
        .spec
        .versions
        .first()
        .and_then(|v| v.schema.as_ref())
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .and_then(|s| serde_json::to_value(s).ok())
        .unwrap_or_default()
}

/// A field of an object that its schema does not declare.
#[derive(Debug, Clone, PartialEq, Eq)]
struct UnknownField {
    /// `spec.sourc`, `spec.mutations[0].tagret`.
    path: String,
    /// The declared field of the same object whose name is closest, when one is close.
    meant: Option<String>,
}

/// The fields of `object` its (structural) `schema` does not declare, as the API server's
/// strict field validation finds them: an object with `properties` knows only those (and
/// `additionalProperties`), one with `x-kubernetes-preserve-unknown-fields` keeps anything.
/// `apiVersion`, `kind` and `metadata` of the top are the API server's own.
fn unknown_fields(object: &serde_json::Value, schema: &serde_json::Value) -> Vec<UnknownField> {
    let mut found = Vec::new();
    if let Some(fields) = object.as_object() {
        for (key, value) in fields {
            if matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
                continue;
            }
            field(value, schema, key, key, &mut found);
        }
    }
    found
}

/// [`unknown_fields`] of `key` (at `path`) of an object whose schema is `parent`.
fn field(
    value: &serde_json::Value,
    parent: &serde_json::Value,
    key: &str,
    path: &str,
    found: &mut Vec<UnknownField>,
) {
    if parent["x-kubernetes-preserve-unknown-fields"] == true {
        return;
    }
    let declared = parent["properties"].as_object();
    let schema = match declared.and_then(|p| p.get(key)) {
        Some(schema) => schema,
        None => match &parent["additionalProperties"] {
            serde_json::Value::Object(_) => &parent["additionalProperties"],
            serde_json::Value::Bool(true) => return,
            // An object schema without properties (nor additionalProperties) is not checked:
            // only what a schema declares is known to be complete.
            _ => {
                if let Some(declared) = declared {
                    let names: Vec<String> = declared.keys().cloned().collect();
                    found.push(UnknownField {
                        path: path.to_string(),
                        meant: super::lookup::closest(key, &names).map(str::to_string),
                    });
                }
                return;
            }
        },
    };
    walk(value, schema, path, found);
}

/// Check `value` against `schema`: an object's fields, an array's items.
fn walk(
    value: &serde_json::Value,
    schema: &serde_json::Value,
    path: &str,
    found: &mut Vec<UnknownField>,
) {
    match value {
        serde_json::Value::Object(fields) => {
            for (key, value) in fields {
                field(value, schema, key, &format!("{path}.{key}"), found);
            }
        }
        serde_json::Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                walk(item, &schema["items"], &format!("{path}[{i}]"), found);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_misspelled_field_of_a_release_is_found_with_the_name_meant() {
        let release = json!({
            "apiVersion": "core.convoy.kumodo.io/v1alpha1", "kind": "Release",
            "metadata": {"name": "web", "labels": {"any": "thing"}},
            "spec": {
                "sourc": {"kind": "GitRepository", "name": "repo"},
                "mutations": [{"labels": {"a": "b"}, "tagret": {"kind": "ConfigMap"}}],
            },
        });
        assert_eq!(
            unknown_fields(&release, &release_schema()),
            [
                UnknownField {
                    path: "spec.mutations[0].tagret".into(),
                    meant: Some("target".into())
                },
                UnknownField {
                    path: "spec.sourc".into(),
                    meant: Some("source".into())
                },
            ]
        );
    }

    #[test]
    fn a_valid_release_with_free_form_values_has_no_unknown_field() {
        let release = json!({
            "apiVersion": "core.convoy.kumodo.io/v1alpha1", "kind": "Release",
            "metadata": {"name": "web"},
            "spec": {
                "source": {"kind": "GitRepository", "name": "repo", "path": "app"},
                "content": {"type": "helm", "helm": {"values": {"any": {"nested": [1, {"x": 2}]}}}},
                "mutations": [{"labels": {"team": "a"}}],
            },
        });
        assert_eq!(unknown_fields(&release, &release_schema()), []);
    }

    #[test]
    fn a_misspelled_kind_is_named_with_the_kind_meant() {
        let objects = [
            json!({"apiVersion": "core.convoy.kumodo.io/v1alpha1", "kind": "Relase"}),
            json!({"apiVersion": "v1", "kind": "ConfigMap"}),
        ];
        let objects: Vec<&serde_json::Value> = objects.iter().collect();
        assert_eq!(
            kinds_hint(&objects),
            " (they hold kinds ConfigMap, Relase); did you mean kind \"Release\" for \"Relase\"?"
        );
    }
}

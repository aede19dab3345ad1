//! Plain manifests: a directory of YAML and JSON files, read recursively.
//!
//! Files are read in path order; each YAML file may hold several documents; `kind: List`
//! objects are flattened. Files with other extensions (README.md, scripts, charts' templates
//! are not here) are ignored. A parse error names the file and the line.
//!
//! YAML is read the way `kubectl` reads it (YAML 1.1 scalars: `0644` is octal, `yes` is a bool),
//! so a manifest means the same thing to convoy as to the tools users compare it with.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::object::Object;
use super::plain_yaml;

/// Why a manifest could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// `message` starts with the location (`line 6 column 9: …`).
    #[error("{file}: {message}")]
    Parse {
        file: String,
        line: u64,
        message: String,
    },
    #[error("{file}: document {document}: {message}")]
    NotAnObject {
        file: String,
        document: usize,
        message: String,
    },
    #[error("cannot read {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} does not exist or is not a directory", path.display())]
    NoDirectory { path: PathBuf },
}

/// The YAML options that match kubectl's reading of manifests.
pub fn yaml_options() -> serde_saphyr::Options {
    serde_saphyr::options! {
        legacy_octal_numbers: true,
    }
}

/// Parse YAML (or JSON, which is YAML) text holding zero or more Kubernetes objects.
/// `file` names the text in errors.
///
/// Large texts (a chart's `helm template` output) are split at their `---` document markers
/// and the pieces parsed on several threads: parsing is most of convoy's own cost in a render.
pub fn parse_documents(text: &str, file: &str) -> Result<Vec<Object>, ManifestError> {
    let chunks = split_documents(text);
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(8);
    let parsed: Vec<Result<Vec<(usize, Value)>, ManifestError>> =
        if text.len() < 64 * 1024 || threads < 2 {
            vec![parse_chunks(&chunks, file)]
        } else {
            let per_thread = chunks.len().div_ceil(threads);
            std::thread::scope(|scope| {
                let handles: Vec<_> = chunks
                    .chunks(per_thread.max(1))
                    .map(|part| scope.spawn(move || parse_chunks(part, file)))
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().unwrap_or_else(|_| Ok(Vec::new())))
                    .collect()
            })
        };
    let mut objects = Vec::new();
    for part in parsed {
        for (document, value) in part? {
            push_object(value, file, document, &mut objects)?;
        }
    }
    Ok(objects)
}

/// One YAML document of a text: its number (from 1), first line (from 1) and text.
struct Chunk<'a> {
    document: usize,
    first_line: u64,
    text: &'a str,
}

/// Split at lines that are document markers (`---` at column 0). Per the YAML spec such a
/// line ends any scalar, so the pieces parse exactly as the whole would.
fn split_documents(text: &str) -> Vec<Chunk<'_>> {
    let mut chunks = Vec::new();
    let mut start = 0;
    let mut start_line = 1u64;
    let mut offset = 0;
    for (line_no, line) in (1u64..).zip(text.split_inclusive('\n')) {
        let bare = line.trim_end_matches(['\n', '\r']);
        let marker = bare == "---" || bare.starts_with("--- ") || bare.starts_with("---\t");
        if marker && offset > start {
            chunks.push((start, offset, start_line));
            start = offset;
            start_line = line_no;
        }
        offset += line.len();
    }
    chunks.push((start, text.len(), start_line));
    chunks
        .into_iter()
        .enumerate()
        .map(|(i, (s, e, l))| Chunk {
            document: i + 1,
            first_line: l,
            text: &text[s..e],
        })
        .collect()
}

fn parse_chunks(chunks: &[Chunk<'_>], file: &str) -> Result<Vec<(usize, Value)>, ManifestError> {
    let mut out = Vec::new();
    for chunk in chunks {
        if let Some(docs) = plain_yaml::parse(chunk.text) {
            out.extend(docs.into_iter().map(|d| (chunk.document, d)));
            continue;
        }
        let docs: Vec<Value> = serde_saphyr::from_multiple_with_options(chunk.text, yaml_options())
            .map_err(|e| {
                let location = e.location();
                // `Location` counts from 1; a missing one means the chunk's first line.
                let line = location.as_ref().map(|l| l.line()).unwrap_or(1) + chunk.first_line - 1;
                let column = location.as_ref().map(|l| l.column()).unwrap_or(0);
                let text = first_line(&e.to_string());
                let text = text.strip_prefix("error: ").unwrap_or(&text);
                // Drop the parser's own (chunk-relative) location; ours is absolute.
                let text = match text.strip_prefix("line ") {
                    Some(rest) => rest.split_once(": ").map(|(_, m)| m).unwrap_or(rest),
                    None => text,
                };
                ManifestError::Parse {
                    file: file.to_string(),
                    line,
                    message: if column > 0 {
                        format!("line {line} column {column}: {text}")
                    } else {
                        format!("line {line}: {text}")
                    },
                }
            })?;
        out.extend(docs.into_iter().map(|d| (chunk.document, d)));
    }
    Ok(out)
}

fn push_object(
    doc: Value,
    file: &str,
    document: usize,
    out: &mut Vec<Object>,
) -> Result<(), ManifestError> {
    let not_object = |message: String| ManifestError::NotAnObject {
        file: file.to_string(),
        document,
        message,
    };
    match doc {
        Value::Null => Ok(()),
        Value::Object(ref map) => {
            let api_version = map
                .get("apiVersion")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let kind = map.get("kind").and_then(Value::as_str).unwrap_or_default();
            if api_version.is_empty() || kind.is_empty() {
                return Err(not_object(
                    "not a Kubernetes object: apiVersion and kind are required".into(),
                ));
            }
            if kind.ends_with("List") && map.get("items").is_some_and(Value::is_array) {
                if let Some(Value::Array(items)) = map.get("items") {
                    for item in items.clone() {
                        push_object(item, file, document, out)?;
                    }
                }
                return Ok(());
            }
            let name = doc["metadata"]["name"].as_str().unwrap_or_default();
            let generate_name = doc["metadata"]["generateName"].as_str().unwrap_or_default();
            if name.is_empty() {
                let hint = if generate_name.is_empty() {
                    ""
                } else {
                    " (generateName cannot be applied declaratively)"
                };
                return Err(not_object(format!("{kind} has no metadata.name{hint}")));
            }
            out.push(Object(doc));
            Ok(())
        }
        other => Err(not_object(format!(
            "not a Kubernetes object: expected a mapping, found {}",
            json_type(&other)
        ))),
    }
}

/// Read every manifest under `dir`, recursively, in path order.
pub fn load_dir(dir: &Path) -> Result<Vec<Object>, ManifestError> {
    if !dir.is_dir() {
        return Err(ManifestError::NoDirectory {
            path: dir.to_path_buf(),
        });
    }
    let mut files = Vec::new();
    collect_files(dir, &mut files)?;
    files.sort();
    let mut texts = Vec::with_capacity(files.len());
    for file in &files {
        let text = std::fs::read_to_string(file).map_err(|source| ManifestError::Read {
            path: file.clone(),
            source,
        })?;
        let shown = file.strip_prefix(dir).unwrap_or(file).display().to_string();
        texts.push((shown, text));
    }
    // Many small files parse in parallel, like one large text does.
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(8);
    let parse_all = |part: &[(String, String)]| -> Result<Vec<Object>, ManifestError> {
        let mut objects = Vec::new();
        for (shown, text) in part {
            objects.extend(parse_documents(text, shown)?);
        }
        Ok(objects)
    };
    if texts.len() < 64 || threads < 2 {
        return parse_all(&texts);
    }
    let per_thread = texts.len().div_ceil(threads);
    let parts: Vec<Result<Vec<Object>, ManifestError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = texts
            .chunks(per_thread)
            .map(|part| scope.spawn(move || parse_all(part)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Ok(Vec::new())))
            .collect()
    });
    let mut objects = Vec::new();
    for part in parts {
        objects.extend(part?);
    }
    Ok(objects)
}

fn collect_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), ManifestError> {
    let entries = std::fs::read_dir(dir).map_err(|source| ManifestError::Read {
        path: dir.to_path_buf(),
        source,
    })?;
    for entry in entries {
        let entry = entry.map_err(|source| ManifestError::Read {
            path: dir.to_path_buf(),
            source,
        })?;
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('.') {
            continue;
        }
        let file_type = entry.file_type().map_err(|source| ManifestError::Read {
            path: path.clone(),
            source,
        })?;
        if file_type.is_dir() {
            collect_files(&path, out)?;
        } else if is_manifest_file(&name) {
            out.push(path);
        }
    }
    Ok(())
}

/// YAML and JSON files, except kustomize's own configuration.
fn is_manifest_file(name: &str) -> bool {
    let manifest = name.ends_with(".yaml") || name.ends_with(".yml") || name.ends_with(".json");
    let kustomization = matches!(
        name,
        "kustomization.yaml" | "kustomization.yml" | "Kustomization"
    );
    manifest && !kustomization
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or_default().trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multi_document_files_with_empty_documents_and_lists() {
        let text = "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n---\n\
apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Secret\n  metadata: {name: s}\n";
        let objects = parse_documents(text, "x.yaml").unwrap();
        let names: Vec<&str> = objects.iter().map(|o| o.name()).collect();
        assert_eq!(names, ["a", "s"]);
    }

    #[test]
    fn yaml_scalars_mean_what_they_mean_to_kubectl() {
        let text = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  volumes:\n  - name: v\n    \
secret: {secretName: s, defaultMode: 0644}\n";
        let objects = parse_documents(text, "pod.yaml").unwrap();
        assert_eq!(
            objects[0].0["spec"]["volumes"][0]["secret"]["defaultMode"],
            420
        );
    }

    #[test]
    fn a_parse_error_names_the_file_and_line() {
        let text = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  k: [unclosed\n";
        let err = parse_documents(text, "app/config.yaml")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("app/config.yaml: line "), "{err}");
        let ManifestError::Parse { line, .. } = parse_documents(text, "f").unwrap_err() else {
            panic!("not a parse error")
        };
        assert!(line >= 6, "line {line}");
    }

    #[test]
    fn a_large_text_parses_in_pieces_with_absolute_line_numbers() {
        let mut text = String::new();
        for i in 0..2000 {
            text.push_str(&format!("---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: cm-{i}}}\ndata: {{k: \"{i}\"}}\n"));
        }
        let objects = parse_documents(&text, "big.yaml").unwrap();
        assert_eq!(objects.len(), 2000);
        assert_eq!(objects[1999].name(), "cm-1999");
        // Break document 1500 (its data line is line 1499 * 5 + 5).
        let broken = text.replacen("data: {k: \"1499\"}", "data: {k: [}", 1);
        let err = parse_documents(&broken, "big.yaml")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("big.yaml: line 7500 column"), "{err}");
    }

    #[test]
    fn a_document_without_kind_is_named() {
        let err = parse_documents(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\nfoo: bar\n",
            "f.yaml",
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            err,
            "f.yaml: document 2: not a Kubernetes object: apiVersion and kind are required"
        );
    }

    #[test]
    fn a_directory_is_read_recursively_in_path_order_ignoring_other_files() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("b/nested")).unwrap();
        std::fs::write(
            root.join("b/nested/z.yml"),
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: z}\n",
        )
        .unwrap();
        std::fs::write(
            root.join("a.json"),
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"j"}}"#,
        )
        .unwrap();
        std::fs::write(root.join("README.md"), "# not yaml: [").unwrap();
        std::fs::write(root.join("kustomization.yaml"), "resources: []\n").unwrap();
        std::fs::write(root.join(".hidden.yaml"), "broken: [").unwrap();
        let objects = load_dir(root).unwrap();
        let names: Vec<&str> = objects.iter().map(|o| o.name()).collect();
        assert_eq!(names, ["j", "z"]);
    }
}

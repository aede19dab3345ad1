//! The YAML view of a diff: each object as YAML lines that know their field path, and the
//! unified-diff hunks between two such views, each labelled with what caused it.

use serde_json::Value;
use similar::{DiffTag, TextDiff};

use super::fields::{FieldChange, Path, Seg};
use crate::engine::key_order::Level;

/// One line of YAML and the field it shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    pub text: String,
    pub path: Path,
}

/// `value` as block YAML lines with their paths.
pub fn yaml_lines(value: &Value) -> Vec<Line> {
    let mut out = Vec::new();
    emit_map_entries(value, 0, &mut Vec::new(), &mut out, true);
    out
}

/// A mapping's keys in reading order (engine::key_order), by where the path puts it.
fn ordered_keys<'a>(map: &'a serde_json::Map<String, Value>, path: &Path) -> Vec<&'a String> {
    let level = match path.as_slice() {
        [] => Level::Top,
        [Seg::Key(k)] => Level::Top.below(k),
        _ => Level::Other,
    };
    level.entries(map).map(|(k, _, _)| k).collect()
}

fn emit_map_entries(
    value: &Value,
    indent: usize,
    path: &mut Path,
    out: &mut Vec<Line>,
    first_inline: bool,
) {
    let Some(map) = value.as_object() else { return };
    let _ = first_inline;
    for key in ordered_keys(map, path) {
        path.push(Seg::Key(key.clone()));
        emit_entry(&yaml_key(key), &map[key], indent, path, out);
        path.pop();
    }
}

fn emit_entry(prefix: &str, value: &Value, indent: usize, path: &mut Path, out: &mut Vec<Line>) {
    let pad = " ".repeat(indent);
    match value {
        Value::Object(m) if !m.is_empty() => {
            out.push(Line {
                text: format!("{pad}{prefix}:"),
                path: path.clone(),
            });
            emit_map_entries(value, indent + 2, path, out, false);
        }
        Value::Array(items) if !items.is_empty() => {
            out.push(Line {
                text: format!("{pad}{prefix}:"),
                path: path.clone(),
            });
            emit_items(items, indent, path, out);
        }
        Value::String(s) if s.contains('\n') => {
            out.push(Line {
                text: format!("{pad}{prefix}: |-"),
                path: path.clone(),
            });
            for l in s.trim_end_matches('\n').lines() {
                out.push(Line {
                    text: format!("{pad}  {l}"),
                    path: path.clone(),
                });
            }
        }
        scalar => out.push(Line {
            text: format!("{pad}{prefix}: {}", yaml_scalar(scalar)),
            path: path.clone(),
        }),
    }
}

fn emit_items(items: &[Value], indent: usize, path: &mut Path, out: &mut Vec<Line>) {
    let pad = " ".repeat(indent);
    for (i, item) in items.iter().enumerate() {
        path.push(Seg::Index(i));
        match item {
            Value::Object(m) if !m.is_empty() => {
                // The first entry shares the "- " line; the rest align under it.
                let start = out.len();
                emit_map_entries(item, indent + 2, path, out, true);
                if let Some(first) = out.get_mut(start) {
                    let body = first.text[indent + 2..].to_string();
                    first.text = format!("{pad}- {body}");
                }
            }
            Value::Array(inner) if !inner.is_empty() => {
                out.push(Line {
                    text: format!("{pad}-"),
                    path: path.clone(),
                });
                emit_items(inner, indent + 2, path, out);
            }
            scalar => out.push(Line {
                text: format!("{pad}- {}", yaml_scalar(scalar)),
                path: path.clone(),
            }),
        }
        path.pop();
    }
}

fn yaml_key(key: &str) -> String {
    if plain_safe(key) {
        key.to_string()
    } else {
        json_quote(key)
    }
}

fn yaml_scalar(value: &Value) -> String {
    match value {
        Value::Object(_) => "{}".to_string(),
        Value::Array(_) => "[]".to_string(),
        Value::String(s) if plain_safe(s) => s.clone(),
        Value::String(s) => json_quote(s),
        other => other.to_string(),
    }
}

fn json_quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| format!("{s:?}"))
}

/// Whether a string can be written unquoted without changing its type or meaning: nothing in
/// it reads as YAML structure, and a plain scalar of that text is read back as this string
/// (render::plain_yaml's rule, the one convoy reads YAML with).
fn plain_safe(s: &str) -> bool {
    if s.is_empty() || s.trim() != s || s == "~" {
        return false;
    }
    if !crate::engine::render::plain_yaml::plain_is_string(s) {
        return false;
    }
    let first = s.chars().next().unwrap_or(' ');
    if "-?:,[]{}#&*!|>'\"%@`".contains(first) {
        return false;
    }
    !s.contains(": ") && !s.contains(" #") && !s.ends_with(':')
}

/// Which side of a diff a line is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tag {
    Context,
    Removed,
    Added,
}

/// A unified-diff hunk with the causes of its changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hunk {
    /// `@@ -a,b +c,d @@`
    pub header: String,
    /// "render change", "drift by MANAGER", … (sorted, render first).
    pub labels: Vec<String>,
    pub lines: Vec<(Tag, String)>,
}

/// The hunks between `live` and `desired` (absent sides diff against nothing).
pub fn hunks(
    live: Option<&Value>,
    desired: Option<&Value>,
    changes: &[FieldChange],
    context: usize,
) -> Vec<Hunk> {
    let old = live.map(yaml_lines).unwrap_or_default();
    let new = desired.map(yaml_lines).unwrap_or_default();
    let old_text: Vec<&str> = old.iter().map(|l| l.text.as_str()).collect();
    let new_text: Vec<&str> = new.iter().map(|l| l.text.as_str()).collect();
    let diff = TextDiff::from_slices(&old_text, &new_text);
    let mut result = Vec::new();
    for group in diff.grouped_ops(context) {
        let (Some(first), Some(last)) = (group.first(), group.last()) else {
            continue;
        };
        let old_start = first.old_range().start;
        let new_start = first.new_range().start;
        let old_len = last.old_range().end - old_start;
        let new_len = last.new_range().end - new_start;
        let header = format!(
            "@@ -{},{} +{},{} @@",
            if old_len == 0 {
                old_start
            } else {
                old_start + 1
            },
            old_len,
            if new_len == 0 {
                new_start
            } else {
                new_start + 1
            },
            new_len
        );
        let mut lines = Vec::new();
        let mut changed_paths: Vec<&Path> = Vec::new();
        for op in &group {
            let (tag, old_range, new_range) = op.as_tag_tuple();
            match tag {
                DiffTag::Equal => {
                    for i in old_range {
                        lines.push((Tag::Context, old[i].text.clone()));
                    }
                }
                DiffTag::Delete | DiffTag::Replace | DiffTag::Insert => {
                    for i in old_range {
                        lines.push((Tag::Removed, old[i].text.clone()));
                        changed_paths.push(&old[i].path);
                    }
                    for j in new_range {
                        lines.push((Tag::Added, new[j].text.clone()));
                        changed_paths.push(&new[j].path);
                    }
                }
            }
        }
        let mut labels: Vec<String> = Vec::new();
        for path in changed_paths {
            for change in changes {
                if related(&change.path, path) {
                    let label = change.cause.to_string();
                    if !labels.contains(&label) {
                        labels.push(label);
                    }
                }
            }
        }
        labels.sort_by_key(|l| (!l.starts_with("render"), l.clone()));
        if labels.is_empty() {
            labels.push(if live.is_none() {
                "to create".to_string()
            } else if desired.is_none() {
                "to prune".to_string()
            } else {
                "render change".to_string()
            });
        }
        result.push(Hunk {
            header,
            labels,
            lines,
        });
    }
    result
}

fn related(a: &[Seg], b: &[Seg]) -> bool {
    let n = a.len().min(b.len());
    a[..n] == b[..n]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::drift::fields::Cause;
    use serde_json::json;

    #[test]
    fn yaml_lines_read_like_kubectl_output() {
        let v = json!({"kind": "Deployment", "apiVersion": "apps/v1", "metadata": {"namespace": "a", "name": "web"},
            "spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "web", "image": "nginx:1", "args": ["-v", "yes"]}]}}},
            "data": {"script": "line1\nline2\n", "empty": "", "num": "8080"}});
        let text: Vec<String> = yaml_lines(&v).into_iter().map(|l| l.text).collect();
        assert_eq!(
            text.join("\n"),
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: a\ndata:\n  empty: \"\"\n  num: \"8080\"\n  script: |-\n    line1\n    line2\nspec:\n  replicas: 2\n  template:\n    spec:\n      containers:\n      - args:\n        - \"-v\"\n        - \"yes\"\n        image: nginx:1\n        name: web"
        );
    }

    #[test]
    fn hunks_are_labelled_with_their_causes() {
        let live = json!({"metadata": {"name": "a"}, "data": {"a": "tampered", "b": "1"}, "spec": {"x": 1}});
        let desired =
            json!({"metadata": {"name": "a"}, "data": {"a": "1", "b": "1"}, "spec": {"x": 2}});
        let changes = vec![
            FieldChange {
                path: vec![Seg::Key("data".into()), Seg::Key("a".into())],
                cause: Cause::Drift {
                    managers: vec!["kubectl-edit".into()],
                },
                live: None,
                desired: None,
            },
            FieldChange {
                path: vec![Seg::Key("spec".into()), Seg::Key("x".into())],
                cause: Cause::Render,
                live: None,
                desired: None,
            },
        ];
        let hunks = hunks(Some(&live), Some(&desired), &changes, 0);
        assert_eq!(hunks.len(), 2);
        assert_eq!(hunks[0].labels, ["drift by kubectl-edit"]);
        assert_eq!(
            hunks[0].lines,
            [
                (Tag::Removed, "  a: tampered".into()),
                (Tag::Added, "  a: \"1\"".into())
            ]
        );
        assert_eq!(hunks[1].labels, ["render change"]);
    }
}

//! A quick YAML writer for the common shape of Kubernetes objects, giving the same text
//! serde-saphyr gives. `convoy render` of a large chart spent more time in serde-saphyr's
//! writer (its quoting checks run on every scalar, and on the structure around it) than in
//! anything but the parse. Here the structure is written directly; strings of a few safe
//! characters that YAML reads back as strings are written plain, other one-line strings as
//! serde-saphyr writes that one scalar. Anything else — floats, strings with line breaks, keys
//! that need quotes — makes [`write_document`] give up, and the caller writes that object with
//! serde-saphyr. Unit tests compare both writers.

use serde_json::Value;

use crate::cli::output::Level;

/// Append `object` (a mapping) as one YAML document body, or return `false` when it holds
/// something this writer leaves to serde-saphyr (`out` then holds a partial text the caller
/// cuts off).
pub fn write_document(out: &mut String, object: &Value) -> bool {
    match object {
        Value::Object(map) if !map.is_empty() => write_map(out, map, 0, Level::Top, false),
        _ => false,
    }
}

/// Mapping entries at `indent` spaces, one per line, in `level`'s key order; with
/// `inline_first` the first entry follows a `- ` already written.
fn write_map(
    out: &mut String,
    map: &serde_json::Map<String, Value>,
    indent: usize,
    level: Level,
    inline_first: bool,
) -> bool {
    for (i, (key, value, inner_level)) in level.entries(map).enumerate() {
        // serde-saphyr quotes keys with a colon.
        if key.len() > FOLD_AFTER || !is_plain_text(key) || key.contains(':') {
            return false;
        }
        if i > 0 || !inline_first {
            pad(out, indent);
        }
        out.push_str(key);
        out.push(':');
        let ok = match value {
            Value::Object(inner) if !inner.is_empty() => {
                out.push('\n');
                write_map(out, inner, indent + 2, inner_level, false)
            }
            Value::Array(items) if !items.is_empty() => {
                out.push('\n');
                write_seq(out, items, indent, false)
            }
            scalar => {
                out.push(' ');
                write_line(out, scalar, indent + 2)
            }
        };
        if !ok {
            return false;
        }
    }
    true
}

/// Sequence items at `indent` spaces (a sequence under a key is not indented further); with
/// `inline_first` the first item follows a `- ` already written.
fn write_seq(out: &mut String, items: &[Value], indent: usize, inline_first: bool) -> bool {
    for (i, item) in items.iter().enumerate() {
        if i > 0 || !inline_first {
            pad(out, indent);
        }
        out.push_str("- ");
        let ok = match item {
            Value::Object(inner) if !inner.is_empty() => {
                write_map(out, inner, indent + 2, Level::Other, true)
            }
            Value::Array(inner) if !inner.is_empty() => write_seq(out, inner, indent + 2, true),
            scalar => write_line(out, scalar, indent + 2),
        };
        if !ok {
            return false;
        }
    }
    true
}

/// A scalar (or empty collection) and the end of its line; a long string continues on the
/// next line at `indent`.
fn write_line(out: &mut String, value: &Value, indent: usize) -> bool {
    let ok = write_scalar(out, value, indent);
    out.push('\n');
    ok
}

fn write_scalar(out: &mut String, value: &Value, indent: usize) -> bool {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) if n.is_i64() || n.is_u64() => out.push_str(&n.to_string()),
        Value::Object(map) if map.is_empty() => out.push_str("{}"),
        Value::Array(items) if items.is_empty() => out.push_str("[]"),
        Value::String(s) if s.len() <= FOLD_AFTER && is_plain_text(s) => out.push_str(s),
        // serde-saphyr folds longer strings; with no space to fold at, that is one line.
        Value::String(s) if is_plain_text(s) => {
            out.push_str(">-\n");
            pad(out, indent);
            out.push_str(s);
        }
        // One line either way: serde-saphyr's own choice of quotes for this one scalar.
        Value::String(s) if !s.contains(['\n', '\r']) => match serde_saphyr::to_string(s) {
            Ok(text) => match text.strip_suffix('\n') {
                Some(line) if !line.contains('\n') => out.push_str(line),
                _ => return false,
            },
            Err(_) => return false,
        },
        _ => return false,
    }
    true
}

/// serde-saphyr writes strings longer than this as folded block scalars (`>-`).
const FOLD_AFTER: usize = 80;

fn pad(out: &mut String, indent: usize) {
    out.extend(std::iter::repeat_n(' ', indent));
}

/// A string written plain: letters, digits and `._/-`, with `:` inside (image references),
/// starting with a letter or digit, that YAML reads back as this string.
fn is_plain_text(s: &str) -> bool {
    let bytes = s.as_bytes();
    let Some((&first, _)) = bytes.split_first() else {
        return false;
    };
    first.is_ascii_alphanumeric()
        && bytes.last() != Some(&b':')
        && bytes
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'/' | b'-' | b':'))
        && crate::engine::render::plain_yaml::plain_is_string(s)
        // A YAML 1.1 timestamp (`2001-12-14T21:59:43Z`), which serde-saphyr quotes.
        && !(first.is_ascii_digit() && s.contains(['T', 't', 'Z', 'z']))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// What serde-saphyr writes for the object, the way `convoy render` calls it.
    fn long_way(object: &Value) -> String {
        crate::cli::output::yaml_value(object).unwrap()
    }

    /// The quick writer's text, or `None` where it leaves the object to serde-saphyr.
    fn quick(object: &Value) -> Option<String> {
        let mut out = String::new();
        write_document(&mut out, object).then_some(out)
    }

    fn same_or_declined(object: &Value) -> bool {
        match quick(object) {
            Some(text) => {
                assert_eq!(text, long_way(object), "{object}");
                true
            }
            None => false,
        }
    }

    #[test]
    fn a_typical_chart_object_is_written_quickly_and_as_serde_saphyr_writes_it() {
        let deployment = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "app-1", "namespace": "bench", "labels": {"app": "app-1", "app.kubernetes.io/name": "web"}},
            "spec": {"replicas": 2, "paused": false, "minReadySeconds": null,
                "selector": {"matchLabels": {"app": "app-1"}},
                "template": {"metadata": {"labels": {"app": "app-1"}}, "spec": {
                    "containers": [{"name": "app", "image": "registry.local/app:2.0",
                        "args": ["--port", "8080", "-v"],
                        "envFrom": [{"configMapRef": {"name": "cfg-1"}}],
                        "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                        "resources": {"limits": {"cpu": "100m", "memory": "128Mi"}, "requests": {}}}],
                    "volumes": [], "matrix": [[1, 2], [], [[]], [{}], [{"a": [3]}]]}}}
        });
        assert!(same_or_declined(&deployment), "declined");
        let config_map = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cfg-0"}, "data": {"index": "0", "payload": "x".repeat(200),
            "enabled": "yes", "greeting": "hello world", "quote": "say \"hi\"", "unicode": "é", "empty": "", "mode": "0644", "ratio": "1.5", "id": "1e3"}});
        assert!(same_or_declined(&config_map), "declined");
    }

    #[test]
    fn every_word_is_written_as_serde_saphyr_writes_it_or_left_to_it() {
        let words = [
            "a",
            "x",
            "y",
            "n",
            "Y",
            "N",
            "no",
            "No",
            "NO",
            "yes",
            "on",
            "off",
            "On",
            "true",
            "True",
            "false",
            "null",
            "Null",
            "nan",
            "NaN",
            "inf",
            "Inf",
            "infinity",
            "0",
            "1",
            "01",
            "0644",
            "0o17",
            "0x1F",
            "0b101",
            "1_000",
            "1e3",
            "1E3",
            "1.5",
            "1.",
            "1.5.2",
            "2001-12-14",
            "2001-12-14t21-59",
            "12:30",
            "1:2:3",
            "190:20:30",
            "8080/TCP",
            "100m",
            "128Mi",
            "-1",
            "-x",
            "--port",
            "-",
            "x-",
            "x.",
            "a/b",
            "/a",
            "a:b",
            "a:",
            "_a",
            "registry.local/app:2.0",
            "app@sha256:abc",
            "a b",
            "a#b",
            "a,b",
            "it's",
            "é",
            "",
            " ",
            "x ",
            "a\nb",
            "a\\b",
            "a\"b",
            "~",
            "<<",
            "=",
            "v1",
            "v1.2.3",
            "1.2.3",
            "1-2",
            "0.0.0.0",
            "ff",
            "0xff",
            "e",
            "E",
            "1e",
            "-.inf",
            ".inf",
            ".5",
            "+1",
            "+x",
            "- x",
            "? x",
            ": x",
            "a: b",
            "#x",
            "a #b",
            "...",
            "---",
            "--- x",
            "tab\tend",
            "x\u{7}",
            "\u{feff}x",
            "'q'",
            "\"q\"",
            "%x",
            "@x",
            "`x",
            "|x",
            ">x",
            "!x",
            "&x",
            "*x",
            "[x",
            "]x",
            "{x",
            "}x",
            ",x",
            "x,",
            "x?",
            "sh -c 'echo hi'",
            "C:\\dir",
            "\u{85}x",
            "2001-12-14T21:59:43Z",
            "2001-12-14t21:59:43Z",
            "2024-01-01T00:00:00.123Z",
            "2001-1-1T1:2:3Z",
            "2001-12-14T21:59:43",
            "1Z",
            "1z",
            "1t",
            "v2001-12-14T21:59:43Z",
        ];
        let long: Vec<String> = [79, 80, 81, 200]
            .iter()
            .flat_map(|&n| {
                ["x", "a b", "0", "https://example.com/a:b", "é", "a-"]
                    .map(|w| w.repeat(n).chars().take(n).collect::<String>())
            })
            .collect();
        let words = words.iter().copied().chain(long.iter().map(String::as_str));
        let mut quick_count = 0;
        for word in words {
            for object in [
                json!({"apiVersion": "v1", "kind": "X", "metadata": {"name": "n"}, "data": {"k": word}}),
                json!({"apiVersion": "v1", "kind": "X", "metadata": {"name": "n"}, "data": {word: 1}}),
                json!({"apiVersion": "v1", "kind": "X", "metadata": {"name": "n"}, "data": [word, [word]]}),
            ] {
                if same_or_declined(&object) {
                    quick_count += 1;
                }
            }
        }
        assert!(quick_count > 100, "only {quick_count} written quickly");
    }

    #[test]
    fn floats_big_numbers_and_text_that_needs_judgement_go_the_long_way() {
        for value in [
            json!(1.5),
            json!(-0.0),
            json!("line\nbreak"),
            json!("cr\rx"),
        ] {
            let object =
                json!({"apiVersion": "v1", "kind": "X", "metadata": {"name": "n"}, "v": value});
            assert_eq!(quick(&object), None, "{value}");
        }
        assert_eq!(quick(&json!({"apiVersion": "v1", "a b": 1})), None);
        assert_eq!(quick(&json!({})), None);
        assert_eq!(
            quick(&json!({"big": u64::MAX, "low": i64::MIN})).as_deref(),
            Some("big: 18446744073709551615\nlow: -9223372036854775808\n")
        );
        assert_eq!(
            long_way(&json!({"big": u64::MAX, "low": i64::MIN})),
            "big: 18446744073709551615\nlow: -9223372036854775808\n"
        );
    }

    #[test]
    fn convoys_own_manifests_and_the_examples_read_back_the_same() {
        let mut objects: Vec<Value> = crate::engine::api::crds()
            .into_iter()
            .map(|crd| serde_json::to_value(crd).unwrap())
            .collect();
        for entry in walk(std::path::Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/examples"
        ))) {
            let text = std::fs::read_to_string(&entry).unwrap();
            if let Ok(docs) = serde_saphyr::from_multiple::<Value>(&text) {
                objects.extend(docs.into_iter().filter(|d| d.is_object()));
            }
        }
        assert!(objects.len() > 10);
        let quick_count = objects.iter().filter(|o| same_or_declined(o)).count();
        assert!(quick_count > 0, "none written quickly");
    }

    fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
        let mut files = Vec::new();
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                files.extend(walk(&path));
            } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
                files.push(path);
            }
        }
        files
    }
}

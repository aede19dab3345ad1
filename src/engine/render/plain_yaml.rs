//! A quick path from YAML text to JSON values for the plain YAML that rendered manifests are
//! made of: mappings, sequences, strings, `true`/`false`, `null` and decimal integers.
//!
//! serde-saphyr spends about half of a render's parse time in its generic deserializer
//! machinery; building the values straight from its own parser's events (granit-parser) takes
//! half the time for `helm template` output. The quick path reads only what has exactly one
//! meaning and gives up (`None`) on everything else — tags, anchors and aliases, merge keys,
//! duplicate keys, YAML 1.1 spellings (`yes`, `0644`), floats, parse errors — so serde-saphyr
//! reads those texts, with its error messages. Either way a text means the same values; the
//! unit tests compare both readers on every scalar form.

use std::borrow::Cow;

use granit_parser::{Event, Parser, ScalarStyle};
use serde_json::{Map, Value};

/// The non-empty documents of `text` when every node is in the plain subset and every
/// document is a mapping, else `None`. Documents that are empty or `null` are skipped, as
/// serde-saphyr's `from_multiple` skips them.
pub fn parse(text: &str) -> Option<Vec<Value>> {
    // serde-saphyr refuses texts beyond its budget (depth, nodes, documents, scalar bytes) and
    // runs of more than 32 comments where it looks ahead. Texts anywhere near those limits go
    // the long way, so a text is accepted or refused the same either way.
    if text.len() > limits::BYTES || text.bytes().filter(|&b| b == b'#').count() > limits::HASHES {
        return None;
    }
    let mut options = granit_parser::Options::default();
    options.set_emit_comments(false);
    let parser = Parser::new_from_str_with_options(text, options);
    let mut documents = Vec::new();
    let mut stack: Vec<Frame> = Vec::new();
    let mut root: Option<Value> = None;
    let (mut nodes, mut document_count) = (0usize, 0usize);
    for item in parser {
        let (event, _span) = item.ok()?;
        if matches!(
            event,
            Event::Scalar(..) | Event::SequenceStart(..) | Event::MappingStart(..)
        ) {
            nodes += 1;
            if nodes > limits::NODES || stack.len() >= limits::DEPTH {
                return None;
            }
        }
        let value = match event {
            Event::StreamStart => continue,
            Event::DocumentStart(..) => {
                document_count += 1;
                if document_count > limits::DOCUMENTS {
                    return None;
                }
                continue;
            }
            Event::StreamEnd => break,
            Event::DocumentEnd => {
                match root.take() {
                    None | Some(Value::Null) => {}
                    Some(object @ Value::Object(_)) => documents.push(object),
                    // Let serde-saphyr read it so the caller reports it the usual way.
                    Some(_) => return None,
                }
                continue;
            }
            Event::Scalar(text, style, anchor, tag) => {
                if anchor != 0 || tag.is_some() {
                    return None;
                }
                if let Some(Frame::Map(_, key @ None)) = stack.last_mut() {
                    *key = Some(key_text(text, style)?);
                    continue;
                }
                scalar(text, style)?
            }
            Event::SequenceStart(_, anchor, ref tag) | Event::MappingStart(_, anchor, ref tag) => {
                if anchor != 0 || tag.is_some() {
                    return None;
                }
                // A collection as a mapping key has no JSON form.
                if let Some(Frame::Map(_, None)) = stack.last() {
                    return None;
                }
                stack.push(match event {
                    Event::SequenceStart(..) => Frame::Seq(Vec::new()),
                    _ => Frame::Map(Map::new(), None),
                });
                continue;
            }
            Event::SequenceEnd => match stack.pop()? {
                Frame::Seq(items) => Value::Array(items),
                Frame::Map(..) => return None,
            },
            Event::MappingEnd => match stack.pop()? {
                Frame::Map(map, None) => Value::Object(map),
                _ => return None,
            },
            // Aliases and anything newer than this code knows.
            _ => return None,
        };
        match stack.last_mut() {
            None => root = Some(value),
            Some(Frame::Seq(items)) => items.push(value),
            Some(Frame::Map(map, key)) => {
                // Duplicate keys are an error serde-saphyr reports.
                if map.insert(key.take()?, value).is_some() {
                    return None;
                }
            }
        }
    }
    Some(documents)
}

/// Half of serde-saphyr's default budget (depth 64, 250,000 nodes, 1,024 documents, 64 MiB
/// of scalars), and fewer `#` in the whole text than it buffers comments (32).
mod limits {
    pub const DEPTH: usize = 32;
    pub const NODES: usize = 125_000;
    pub const DOCUMENTS: usize = 512;
    pub const BYTES: usize = 32 * 1024 * 1024;
    pub const HASHES: usize = 16;
}

/// A collection being built; a mapping holds the key waiting for its value.
enum Frame {
    Seq(Vec<Value>),
    Map(Map<String, Value>, Option<String>),
}

/// A plain scalar that can only be a string. One that starts like a number (`--port`, `100m`,
/// `8080/TCP`) is a string when it holds a character no number, `.inf` or `.nan` spelling has;
/// any other is a string unless it is one of the words YAML 1.1 or 1.2 read as null, a bool or
/// a float.
pub fn plain_is_string(text: &str) -> bool {
    const WORDS: [&str; 12] = [
        "null", "true", "false", "yes", "no", "y", "n", "on", "off", "nan", "inf", "infinity",
    ];
    // Digits, radix prefixes and hex digits, signs, points, underscores, exponents,
    // sexagesimal colons and the letters of inf, infinity and nan.
    let numeric = |b: u8| {
        b.is_ascii_hexdigit()
            || matches!(
                b,
                b'x' | b'X'
                    | b'o'
                    | b'O'
                    | b'.'
                    | b'_'
                    | b'+'
                    | b'-'
                    | b':'
                    | b'i'
                    | b'I'
                    | b'n'
                    | b'N'
                    | b't'
                    | b'T'
                    | b'y'
                    | b'Y'
            )
    };
    match text.as_bytes().first() {
        None | Some(b'~') => false,
        Some(b'0'..=b'9' | b'+' | b'-' | b'.') => !text.bytes().all(numeric),
        Some(_) => !WORDS.iter().any(|word| text.eq_ignore_ascii_case(word)),
    }
}

fn key_text(text: Cow<'_, str>, style: ScalarStyle) -> Option<String> {
    // Plain keys that could be read as something else, and merge keys, go the long way.
    if style == ScalarStyle::Plain && (!plain_is_string(&text) || text == "<<") {
        return None;
    }
    Some(text.into_owned())
}

fn scalar(text: Cow<'_, str>, style: ScalarStyle) -> Option<Value> {
    if style != ScalarStyle::Plain || plain_is_string(&text) {
        return Some(Value::String(text.into_owned()));
    }
    match &*text {
        "" | "~" | "null" | "Null" | "NULL" => return Some(Value::Null),
        "true" => return Some(Value::Bool(true)),
        "false" => return Some(Value::Bool(false)),
        _ => {}
    }
    decimal_number(&text)
}

/// `0`, or digits without a leading zero (`0644` is octal to kubectl), optionally negative
/// and with a fraction (`0.5`); integers of at most 18 digits, so they fit an i64 either way.
/// Exponents, `+`, `.5` and the like go the long way.
fn decimal_number(text: &str) -> Option<Value> {
    let (negative, unsigned) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (whole, fraction) = match unsigned.split_once('.') {
        Some((whole, fraction)) => (whole, Some(fraction)),
        None => (unsigned, None),
    };
    let digits = |part: &str| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit());
    if !digits(whole) || (whole.len() > 1 && whole.starts_with('0')) {
        return None;
    }
    if let Some(fraction) = fraction {
        if !digits(fraction) || unsigned.len() > 40 {
            return None;
        }
        // What serde-saphyr does with such a text: Rust's correctly rounded parse.
        return serde_json::Number::from_f64(text.parse().ok()?).map(Value::Number);
    }
    if whole.len() > 18 || (negative && whole == "0") {
        return None;
    }
    let magnitude: i64 = whole.parse().ok()?;
    Some(if negative {
        Value::from(-magnitude)
    } else {
        Value::from(magnitude)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn saphyr(text: &str) -> Vec<Value> {
        serde_saphyr::from_multiple_with_options(text, super::super::manifests::yaml_options())
            .unwrap()
    }

    /// The quick path reads `text` and agrees with serde-saphyr.
    #[track_caller]
    fn quick(text: &str) -> Vec<Value> {
        let quick = parse(text).unwrap_or_else(|| panic!("quick path gave up on {text:?}"));
        assert_eq!(quick, saphyr(text), "{text:?}");
        quick
    }

    /// The quick path leaves `text` to serde-saphyr.
    #[track_caller]
    fn long_way(text: &str) {
        assert_eq!(parse(text), None, "{text:?}");
    }

    #[test]
    fn plain_manifests_are_read_the_same_as_serde_saphyr_reads_them() {
        let docs = quick(
            "# Source: chart/templates/a.yaml\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  labels: {app: a, tier: \"1\"}\ndata:\n  count: \"3\"\n  script: |\n    echo hi\n    exit 0\n  folded: >\n    one\n    two\n  single: 'it''s'\n---\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: b}\nspec:\n  replicas: 2\n  paused: false\n  minReadySeconds: 0\n  revisionHistoryLimit: -1\n  template:\n    spec:\n      containers:\n      - name: app\n        image: registry.local/app:1.0\n        args: [--port, \"8080\", -v]\n        env:\n        - {name: EMPTY, value: }\n        - name: TILDE\n          value: ~\n        - name: MULTI\n          value: a plain\n            scalar on two lines\n        - name: URL\n          value: http://example.com/a?b=c\n...\n",
        );
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[1]["spec"]["replicas"], Value::from(2));
        assert_eq!(docs[1]["spec"]["revisionHistoryLimit"], Value::from(-1));
        assert_eq!(docs[0]["data"]["script"], "echo hi\nexit 0\n");
    }

    #[test]
    fn empty_and_null_documents_are_skipped_like_serde_saphyr_skips_them() {
        assert!(quick("").is_empty());
        assert!(quick("---\n---\n# only a comment\n").is_empty());
        assert!(quick("---\nnull\n---\n~\n").is_empty());
        assert_eq!(quick("--- {a: 1}\n--- \n...\n").len(), 1);
    }

    #[test]
    fn every_scalar_the_quick_path_reads_means_what_serde_saphyr_says() {
        for scalar in [
            "0",
            "7",
            "-7",
            "123456789012345678",
            "-123456789012345678",
            "0.0",
            "1.5",
            "-1.5",
            "3.14159265358979323846",
            "0.1",
            "true",
            "false",
            "null",
            "Null",
            "NULL",
            "~",
            "",
            "abc",
            "a b",
            "=",
            "/usr/bin",
            "$HOME",
            "x1.5",
            "--port",
            "-v",
            "100m",
            "128Mi",
            "1Gi",
            "8080/TCP",
            "10s",
            ".hidden",
            "1 2",
            "nullable",
            "yesterday",
            "information",
            "'0644'",
            "\"yes\"",
            "\"\"",
            "'null'",
            "\"1.5\"",
            "\"\\u00e9t\\u00e9\"",
        ] {
            quick(&format!("k: {scalar}\n"));
            quick(&format!("k: [{scalar}]\n"));
        }
        for key in [
            "a",
            "app.kubernetes.io/name",
            "'1'",
            "\"true\"",
            "'null'",
            "\"\"",
        ] {
            quick(&format!("{key}: v\n"));
        }
    }

    #[test]
    fn anything_with_another_possible_meaning_goes_the_long_way() {
        for scalar in [
            "yes",
            "No",
            "on",
            "OFF",
            "y",
            "N",
            "True",
            "FALSE",
            "0644",
            "0x1F",
            "0o17",
            "+1",
            "-0",
            "01.5",
            "1.",
            "-.5",
            ".5",
            "1e3",
            "1_000",
            ".inf",
            "-.inf",
            ".nan",
            "nan",
            "Inf",
            "infinity",
            "1234567890123456789",
            "2026-11-29",
            "1.2.3",
            "-o",
            "+inf",
            "-.NaN",
            "1:30",
        ] {
            long_way(&format!("k: {scalar}\n"));
        }
        for text in [
            "k: !!str 1\n",
            "k: !custom x\n",
            "a: &x 1\nb: *x\n",
            "base: &b {x: 1}\nk: {<<: *b}\n",
            "a: 1\na: 2\n",
            "1: one\n",
            "true: yes\n",
            "null: x\n",
            "? [a]\n: b\n",
            "just a string\n",
            "[a, b]\n",
            "k: [unclosed\n",
            "k: v\n bad: indentation\n",
        ] {
            long_way(text);
        }
    }

    #[test]
    fn the_examples_and_convoys_own_manifests_read_the_same_either_way() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut quick_reads = 0;
        let mut pending = vec![root.join("examples")];
        while let Some(dir) = pending.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    pending.push(path);
                    continue;
                }
                let text = std::fs::read_to_string(&path).unwrap();
                // Helm templates are not YAML until rendered.
                if !path.to_string_lossy().ends_with("yaml") || text.contains("{{") {
                    continue;
                }
                if let Some(values) = parse(&text) {
                    assert_eq!(values, saphyr(&text), "{}", path.display());
                    quick_reads += 1;
                }
            }
        }
        // What serde-saphyr writes (convoy's CRDs: long descriptions, patterns, nested schemas).
        let crds: Vec<String> = crate::engine::api::crds()
            .iter()
            .map(|crd| serde_saphyr::to_string(crd).unwrap())
            .collect();
        assert_eq!(quick(&crds.join("---\n")).len(), crds.len());
        assert!(
            quick_reads >= 8,
            "the quick path read only {quick_reads} example files"
        );
    }

    #[test]
    fn texts_near_serde_saphyrs_limits_go_the_long_way() {
        // 33 comments between a key and its block: serde-saphyr refuses to buffer them.
        let comments: String = (0..33).map(|i| format!("# c{i}\n")).collect();
        let text = format!("items:\n{comments}- a\n");
        assert!(serde_saphyr::from_multiple::<Value>(&text).is_err());
        long_way(&text);
        // Nesting deeper than its budget.
        let deep = format!("{}1{}\n", "[".repeat(65), "]".repeat(65));
        assert!(serde_saphyr::from_multiple::<Value>(&deep).is_err());
        long_way(&deep);
        // Well inside the limits, the quick path still reads.
        quick(&format!(
            "a: {}1{}\n# one\n# two\n",
            "[".repeat(20),
            "]".repeat(20)
        ));
    }

    #[test]
    fn a_text_serde_saphyr_rejects_is_never_accepted() {
        for text in [
            "a: 1\na: 2\n",
            "k: [unclosed\n",
            "k: \"unterminated\n",
            "k: v\n- x\n",
        ] {
            assert!(
                serde_saphyr::from_multiple::<Value>(text).is_err(),
                "{text:?} should be invalid"
            );
            long_way(text);
        }
    }

    /// Random texts made of the pieces manifests and the YAML around them are made of
    /// (indentation, keys, flow and block collections, every scalar spelling, comments,
    /// document markers): whenever the quick path reads one, serde-saphyr reads the same
    /// values; whenever serde-saphyr refuses one, so does the quick path.
    mod differential {
        use proptest::prelude::*;

        const SCALARS: &[&str] = &[
            "a",
            "web",
            "\"1\"",
            "'it''s'",
            "1",
            "-1",
            "0",
            "007",
            "0644",
            "0x1F",
            "1e3",
            "1.5",
            ".inf",
            "true",
            "false",
            "yes",
            "No",
            "on",
            "null",
            "~",
            "",
            "a b",
            "a: b",
            "a #b",
            "#c",
            "-",
            "- x",
            "[]",
            "{}",
            "[a, 1]",
            "{k: v}",
            "\"\\n\"",
            "|\n  x\n",
            ">-\n  y\n",
            "*a",
            "&a x",
            "!!str 1",
            "<<",
            "?",
            "@x",
            "`x",
            "%x",
            "http://a/b?c=d",
            "2026-12-01",
            "12:30",
            "+1",
            "1_000",
            "\"\"",
            "''",
        ];
        const KEYS: &[&str] = &[
            "name",
            "kind",
            "apiVersion",
            "a",
            "1",
            "\"x\"",
            "'y'",
            "true",
            "null",
            "k k",
            "<<",
            "? q",
            "a:b",
            "-z",
        ];

        fn line() -> impl Strategy<Value = String> {
            (
                0usize..3,
                prop::sample::select(KEYS),
                prop::sample::select(SCALARS),
                0usize..5,
            )
                .prop_map(|(depth, key, scalar, form)| {
                    let pad = "  ".repeat(depth);
                    match form {
                        0 => format!("{pad}{key}:\n"),
                        1 => format!("{pad}- {scalar}\n"),
                        2 => format!("{pad}# {scalar}\n"),
                        3 => "---\n".to_string(),
                        _ => format!("{pad}{key}: {scalar}\n"),
                    }
                })
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(4000))]
            #[test]
            fn the_quick_path_never_disagrees_with_serde_saphyr(
                lines in prop::collection::vec(line(), 1..12)
            ) {
                let text = format!("apiVersion: v1\nkind: ConfigMap\n{}", lines.concat());
                let saphyr: Result<Vec<serde_json::Value>, _> = serde_saphyr::from_multiple_with_options(
                    &text,
                    super::super::super::manifests::yaml_options(),
                );
                match (super::super::parse(&text), saphyr) {
                    (Some(quick), Ok(saphyr)) => prop_assert_eq!(quick, saphyr, "{:?}", text),
                    (Some(quick), Err(e)) => {
                        prop_assert!(false, "quick path read {:?} as {:?}; serde-saphyr: {}", text, quick, e)
                    }
                    (None, _) => {}
                }
            }
        }
    }
}

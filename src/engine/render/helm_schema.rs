//! A chart's values schemas may refer only within themselves.
//!
//! `helm template` validates the values against each chart's `values.schema.json`, and its
//! schema compiler loads what a `$ref` names outside the file: `file://` paths (a relative
//! reference resolves against `file:///values.schema.json`, so `passwd` is `/passwd`) and
//! `http(s)://` URLs, fetched from where convoy runs. A chart author could so make the daemon
//! read its files (`/dev/zero` never ends) or call its network (a cloud's metadata
//! endpoint). Before helm runs, every schema of the chart and of its subcharts (directories
//! and `.tgz` archives under `charts/`, at any depth) is read, and a reference that leaves
//! its file, or a `$schema` other than a JSON Schema draft (the compiler loads an unknown
//! one), is refused, naming the schema.

use std::io::Read;
use std::path::Path;

use serde_json::Value;

use super::error::RenderError;
use crate::engine::error::Invalid;

const SCHEMA: &str = "values.schema.json";
/// The keywords whose string value the compiler resolves and loads.
const REFERENCES: [&str; 3] = ["$ref", "$dynamicRef", "$recursiveRef"];
/// A schema larger than this is refused unread (chart schemas are kilobytes).
const MOST_SCHEMA_BYTES: u64 = 8 << 20;
/// What one packed chart may unpack to: helm's own limit (`MaxDecompressedChartSize`), past
/// which it refuses the chart anyway.
const MOST_ARCHIVE_BYTES: u64 = 100 << 20;
/// Subcharts within subcharts, as deep as a chart may nest them here.
const MOST_DEPTH: usize = 16;

/// Check every values schema of the chart at `chart` (a directory or a `.tgz`).
pub fn check(chart: &Path) -> Result<(), RenderError> {
    if chart.is_dir() {
        check_dir(chart)
    } else {
        let mut file = std::fs::File::open(chart).map_err(|e| read_error(chart, &e))?;
        check_archive(&mut file, &chart.display().to_string(), 1)
    }
}

fn read_error(path: &Path, e: &std::io::Error) -> RenderError {
    RenderError::Tool(format!("cannot read {}: {e}", path.display()))
}

/// Every directory once (`seen`, by device and inode): helm follows links, and a link to a
/// directory above it would otherwise be walked for ever. The walk keeps its own list of
/// directories to visit: a recursion as deep as a tenant's tree aborted the process on a
/// chain of a thousand directories, and resolving each one's full path (`canonicalize`)
/// made a deep chain quadratic (2,000 levels took 108 s).
fn check_dir(root: &Path) -> Result<(), RenderError> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(root).map_err(|e| read_error(root, &e))?;
    let mut seen = std::collections::HashSet::from([(meta.dev(), meta.ino())]);
    let mut to_visit = vec![root.to_path_buf()];
    while let Some(dir) = to_visit.pop() {
        let entries = std::fs::read_dir(&dir).map_err(|e| read_error(&dir, &e))?;
        for entry in entries {
            let entry = entry.map_err(|e| read_error(&dir, &e))?;
            let path = entry.path();
            // Links are judged where they lead (the source's own checks keep them inside
            // it); a dangling one holds nothing.
            let Ok(meta) = std::fs::metadata(&path) else {
                continue;
            };
            let shown = path
                .strip_prefix(root)
                .unwrap_or(&path)
                .display()
                .to_string();
            if meta.is_dir() {
                if seen.insert((meta.dev(), meta.ino())) {
                    to_visit.push(path);
                }
            } else if entry.file_name() == SCHEMA {
                let file = std::fs::File::open(&path).map_err(|e| read_error(&path, &e))?;
                check_schema(file, meta.len(), &shown)?;
            } else if is_subchart_archive(&path) {
                let mut file = std::fs::File::open(&path).map_err(|e| read_error(&path, &e))?;
                check_archive(&mut file, &shown, 1)?;
            }
        }
    }
    Ok(())
}

/// A packed subchart: `charts/<name>.tgz` (what helm loads).
fn is_subchart_archive(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "tgz")
        && path
            .parent()
            .and_then(Path::file_name)
            .is_some_and(|p| p == "charts")
}

fn check_archive(reader: &mut dyn Read, shown: &str, depth: usize) -> Result<(), RenderError> {
    if depth > MOST_DEPTH {
        return Err(invalid(format!(
            "{shown}: subcharts nest more than {MOST_DEPTH} deep"
        )));
    }
    let read = std::rc::Rc::new(std::cell::Cell::new(0u64));
    let counted = Counted {
        // Every gzip member, as Go's reader (and so helm) reads them; the first member alone
        // could end where a schema starts.
        inner: flate2::read::MultiGzDecoder::new(reader),
        read: read.clone(),
    };
    let over = || read.get() > MOST_ARCHIVE_BYTES;
    let unreadable = |e: std::io::Error| {
        if over() {
            return invalid(format!(
                "{shown}: the chart archive unpacks to more than {MOST_ARCHIVE_BYTES} bytes (helm's limit too)"
            ));
        }
        RenderError::Tool(format!("cannot read the chart archive {shown}: {e}"))
    };
    let mut archive = tar::Archive::new(counted);
    for entry in archive.entries().map_err(unreadable)? {
        let mut entry = entry.map_err(unreadable)?;
        // helm reads every entry but directories and extended headers as a file, whatever its
        // type flag says.
        let kind = entry.header().entry_type();
        if kind.is_dir() || kind.is_pax_global_extensions() || kind.is_pax_local_extensions() {
            continue;
        }
        // helm splits a name that holds a backslash at it: `db\values.schema.json` is db's.
        let raw = entry
            .path()
            .map_err(unreadable)?
            .to_string_lossy()
            .replace('\\', "/");
        let path = std::path::PathBuf::from(raw);
        let inner = format!("{shown}:{}", path.display());
        if path.file_name().is_some_and(|n| n == SCHEMA) {
            let size = entry.header().size().map_err(unreadable)?;
            check_schema(entry, size, &inner)?;
        } else if is_subchart_archive(&path) {
            check_archive(&mut entry, &inner, depth + 1)?;
        }
    }
    Ok(())
}

/// Counts what it reads, and fails past [`MOST_ARCHIVE_BYTES`].
struct Counted<R> {
    inner: R,
    read: std::rc::Rc<std::cell::Cell<u64>>,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read.set(self.read.get() + n as u64);
        if self.read.get() > MOST_ARCHIVE_BYTES {
            return Err(std::io::Error::other("the chart archive is too large"));
        }
        Ok(n)
    }
}

fn check_schema(reader: impl Read, size: u64, shown: &str) -> Result<(), RenderError> {
    if size > MOST_SCHEMA_BYTES {
        return Err(invalid(format!(
            "{shown} is larger than {MOST_SCHEMA_BYTES} bytes"
        )));
    }
    let mut text = Vec::new();
    reader
        .take(MOST_SCHEMA_BYTES)
        .read_to_end(&mut text)
        .map_err(|e| RenderError::Tool(format!("cannot read {shown}: {e}")))?;
    // helm drops a UTF-8 byte order mark before it reads a chart's files; so does this.
    let text = text.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(&text);
    let schema: Value = serde_json::from_slice(text)
        .map_err(|e| invalid(format!("{shown} is not valid JSON: {e}")))?;
    check_value(&schema).map_err(|why| invalid(format!("{shown}: {why}")))
}

/// The first reference in `value` that leaves its file.
fn check_value(value: &Value) -> Result<(), String> {
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                if let Value::String(target) = v {
                    if REFERENCES.contains(&key.as_str()) && !target.starts_with('#') {
                        return Err(format!(
                            "{key} {target:?} refers outside the schema; convoy lets a chart's values schema read neither files nor the network (refer within the file, \"#/...\")"
                        ));
                    }
                    if key == "$schema" && !is_draft(target) {
                        return Err(format!(
                            "$schema {target:?} is not a JSON Schema draft (https://json-schema.org/draft-07/schema and the like), which helm would fetch"
                        ));
                    }
                }
                check_value(v)?;
            }
            Ok(())
        }
        Value::Array(items) => items.iter().try_for_each(check_value),
        _ => Ok(()),
    }
}

/// The JSON Schema drafts helm's compiler knows without loading them.
fn is_draft(url: &str) -> bool {
    const DRAFTS: [&str; 6] = [
        "json-schema.org/schema",
        "json-schema.org/draft-04/schema",
        "json-schema.org/draft-06/schema",
        "json-schema.org/draft-07/schema",
        "json-schema.org/draft/2019-09/schema",
        "json-schema.org/draft/2020-12/schema",
    ];
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
        .unwrap_or_default();
    let rest = rest.strip_suffix('#').unwrap_or(rest);
    DRAFTS.contains(&rest)
}

fn invalid(message: String) -> RenderError {
    RenderError::Invalid(Invalid(format!("values schema {message}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart(schema: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("Chart.yaml"), "name: web\nversion: 1.0.0\n").unwrap();
        std::fs::write(dir.path().join(SCHEMA), schema).unwrap();
        dir
    }

    fn targz(files: &[(&str, &[u8])]) -> Vec<u8> {
        let mut builder = tar::Builder::new(flate2::write::GzEncoder::new(
            Vec::new(),
            flate2::Compression::fast(),
        ));
        for (path, bytes) in files {
            let mut header = tar::Header::new_gnu();
            header.set_size(bytes.len() as u64);
            header.set_mode(0o644);
            header.set_cksum();
            builder.append_data(&mut header, path, *bytes).unwrap();
        }
        builder.into_inner().unwrap().finish().unwrap()
    }

    #[test]
    fn references_within_the_schema_and_draft_meta_schemas_pass() {
        let dir = chart(
            r##"{"$schema": "https://json-schema.org/draft/2020-12/schema",
                "$defs": {"port": {"type": "integer"}},
                "properties": {"port": {"$ref": "#/$defs/port"}, "$ref": {"type": "string"}}}"##,
        );
        check(dir.path()).unwrap();
    }

    /// A schema saved with a byte order mark is read as helm reads it: a chart's harmless
    /// schema passes, and a reference out of it is still refused.
    #[test]
    fn a_schema_with_a_byte_order_mark_is_read_as_helm_reads_it() {
        let dir = chart("\u{feff}{\"properties\": {\"port\": {\"type\": \"integer\"}}}");
        check(dir.path()).unwrap();
        let dir = chart("\u{feff}{\"$ref\": \"file:///etc/passwd\"}");
        let err = check(dir.path()).unwrap_err().to_string();
        assert!(
            err.starts_with(r#"values schema values.schema.json: $ref "file:///etc/passwd" refers outside the schema"#),
            "{err}"
        );
    }

    /// A chain of directories deeper than a thread's stack would hold as a recursion is
    /// walked, and the schema at its bottom checked.
    #[test]
    fn a_very_deep_chain_of_directories_is_walked_to_its_end() {
        let dir = chart("{}");
        let mut deep = dir.path().to_path_buf();
        for _ in 0..1500 {
            deep.push("d");
        }
        std::fs::create_dir_all(&deep).unwrap();
        std::fs::write(deep.join(SCHEMA), r#"{"$ref": "file:///etc/passwd"}"#).unwrap();
        let err = check(dir.path()).unwrap_err().to_string();
        assert!(
            err.starts_with(&format!(
                "values schema {}/{SCHEMA}: $ref \"file:///etc/passwd\" refers outside",
                ["d"; 1500].join("/")
            )),
            "{err:.200}"
        );
    }

    #[test]
    fn a_reference_to_a_file_or_url_is_refused_naming_the_schema() {
        for (schema, expected) in [
            (
                r#"{"$ref": "http://169.254.169.254/latest/meta-data/"}"#,
                r#"values schema values.schema.json: $ref "http://169.254.169.254/latest/meta-data/" refers outside the schema"#,
            ),
            (
                r#"{"properties": {"a": {"items": [{"$ref": "passwd"}]}}}"#,
                r#"values schema values.schema.json: $ref "passwd" refers outside the schema"#,
            ),
            (
                r#"{"$dynamicRef": "file:///dev/zero"}"#,
                r#"values schema values.schema.json: $dynamicRef "file:///dev/zero" refers outside the schema"#,
            ),
            (
                r#"{"$schema": "http://127.0.0.1:8080/meta"}"#,
                r#"values schema values.schema.json: $schema "http://127.0.0.1:8080/meta" is not a JSON Schema draft"#,
            ),
        ] {
            let dir = chart(schema);
            let err = check(dir.path()).unwrap_err().to_string();
            assert!(err.starts_with(expected), "{schema}: {err}");
        }
    }

    /// What helm reads as a schema is checked however the archive hides it: an entry whose
    /// type flag is not a regular file's, a name split at a backslash, a second gzip member.
    #[test]
    fn a_schema_hidden_from_a_plain_tar_reader_is_still_checked() {
        let evil: &[u8] = br#"{"$ref": "http://127.0.0.1:1/x.json"}"#;
        let entry = |path: &str, kind: tar::EntryType| {
            let mut builder = tar::Builder::new(Vec::new());
            let mut header = tar::Header::new_gnu();
            header.set_entry_type(kind);
            header.set_size(evil.len() as u64);
            header.set_mode(0o644);
            header.set_path(path).unwrap();
            header.set_cksum();
            builder.append(&header, evil).unwrap();
            builder.into_inner().unwrap()
        };
        let gz = |bytes: &[u8]| {
            use std::io::Write;
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(bytes).unwrap();
            e.finish().unwrap()
        };
        let contiguous = gz(&entry("db/values.schema.json", tar::EntryType::Continuous));
        let backslash = gz(&entry("db\\values.schema.json", tar::EntryType::Regular));
        // A first member holding only Chart.yaml (no end blocks), the schema in a second.
        let mut first = tar::Builder::new(Vec::new());
        let mut header = tar::Header::new_gnu();
        header.set_size(9);
        header.set_mode(0o644);
        header.set_path("db/Chart.yaml").unwrap();
        header.set_cksum();
        first.append(&header, &b"name: db\n"[..]).unwrap();
        let mut members = gz(first.get_ref());
        members.extend(gz(&entry("db/values.schema.json", tar::EntryType::Regular)));
        for packed in [contiguous, backslash, members] {
            let dir = chart("{}");
            std::fs::create_dir(dir.path().join("charts")).unwrap();
            std::fs::write(dir.path().join("charts/db-1.0.0.tgz"), packed).unwrap();
            let err = check(dir.path()).unwrap_err().to_string();
            assert!(err.contains("refers outside the schema"), "{err}");
        }
    }

    #[test]
    fn only_the_drafts_helm_knows_pass_as_schema() {
        for ok in [
            "http://json-schema.org/draft-07/schema#",
            "https://json-schema.org/draft/2020-12/schema",
            "http://json-schema.org/schema#",
        ] {
            assert!(is_draft(ok), "{ok}");
        }
        for refused in [
            "http://json-schema.org/x/../../redirect?to=http://169.254.169.254/",
            "https://json-schema.org.evil.example/draft-07/schema",
            "file:///json-schema.org/draft-07/schema",
        ] {
            assert!(!is_draft(refused), "{refused}");
        }
    }

    /// A packed subchart is unpacked no further than helm would.
    #[test]
    fn a_packed_subchart_past_helms_size_limit_is_refused() {
        let big = vec![0u8; (MOST_ARCHIVE_BYTES + 1024) as usize];
        let packed = targz(&[("web/Chart.yaml", b"name: web\n"), ("web/zeros", &big)]);
        let dir = chart("{}");
        std::fs::create_dir(dir.path().join("charts")).unwrap();
        std::fs::write(dir.path().join("charts/web-1.0.0.tgz"), packed).unwrap();
        assert_eq!(
            check(dir.path()).unwrap_err().to_string(),
            "values schema charts/web-1.0.0.tgz: the chart archive unpacks to more than 104857600 bytes (helm's limit too)"
        );
    }

    /// A link to a directory above it is walked once.
    #[test]
    fn a_link_to_a_directory_above_is_walked_once() {
        let dir = chart("{}");
        std::fs::create_dir(dir.path().join("templates")).unwrap();
        std::os::unix::fs::symlink("..", dir.path().join("templates/up")).unwrap();
        check(dir.path()).unwrap();
    }

    /// Packed subcharts are read too, within packed subcharts.
    #[test]
    fn a_packed_subchart_within_a_packed_subchart_is_checked() {
        let inner = targz(&[(
            "db/values.schema.json",
            br#"{"$ref": "https://attacker.example/x.json"}"#,
        )]);
        let outer = targz(&[
            ("web/Chart.yaml", b"name: web\n"),
            ("web/charts/db-1.0.0.tgz", &inner),
        ]);
        let dir = chart("{}");
        std::fs::create_dir(dir.path().join("charts")).unwrap();
        std::fs::write(dir.path().join("charts/web-1.0.0.tgz"), outer).unwrap();
        let err = check(dir.path()).unwrap_err().to_string();
        assert_eq!(
            err,
            "values schema charts/web-1.0.0.tgz:web/charts/db-1.0.0.tgz:db/values.schema.json: $ref \"https://attacker.example/x.json\" refers outside the schema; convoy lets a chart's values schema read neither files nor the network (refer within the file, \"#/...\")"
        );
    }
}

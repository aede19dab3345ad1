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
    /// A parser thread panicked: the render is incomplete and must not be used.
    #[error("{file}: the YAML parser stopped unexpectedly")]
    ParserStopped { file: String },
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
    let mut parse = StreamingParse::new(file);
    parse.feed(text.as_bytes());
    parse.finish()
}

/// Parses a text that arrives in pieces — a tool's standard output — while the rest is still
/// coming: documents that a later document marker shows complete are parsed by worker threads
/// at once. `helm template` writes its output in one go and then takes milliseconds to exit;
/// the parse runs in that time instead of after it.
pub struct StreamingParse {
    file: String,
    /// Bytes not handed to the workers yet; they start at a document boundary.
    pending: Pending,
    /// Where the search for a document marker goes on: see [`MarkerSearch`].
    search: MarkerSearch,
    /// Number of the first document, and first line, of `pending`.
    next_document: usize,
    next_line: u64,
    batches: usize,
    /// The workers' shared queue; they start with the first batch.
    queue: Option<std::sync::mpsc::Sender<Batch>>,
    workers: Vec<std::thread::JoinHandle<Vec<(usize, Parsed)>>>,
}

/// Whole documents of the text: the `index`th batch, its first document's number and line.
struct Batch {
    index: usize,
    text: String,
    document: usize,
    line: u64,
}

/// The documents of a group of chunks, in order, up to the first YAML error (kept with them,
/// so an earlier document's own error is still reported first).
struct Parsed {
    documents: Vec<(usize, Value)>,
    error: Option<ManifestError>,
}

/// Objects from parsed groups in text order; the first error in text order, whether a YAML
/// error or a document that is not an object, however the text was grouped.
fn assemble(
    parts: impl IntoIterator<Item = Parsed>,
    file: &str,
) -> Result<Vec<Object>, ManifestError> {
    let mut objects = Vec::new();
    for part in parts {
        for (document, value) in part.documents {
            push_object(value, file, document, &mut objects)?;
        }
        if let Some(error) = part.error {
            return Err(error);
        }
    }
    Ok(objects)
}

impl StreamingParse {
    /// Batches are about this big: many small batches share the cores evenly.
    const BATCH: usize = 16 * 1024;

    pub fn new(file: &str) -> Self {
        Self {
            file: file.to_string(),
            pending: Pending::default(),
            search: MarkerSearch::default(),
            next_document: 1,
            next_line: 1,
            batches: 0,
            queue: None,
            workers: Vec::new(),
        }
    }

    /// Take the next piece of the text.
    pub fn feed(&mut self, bytes: &[u8]) {
        self.pending.bytes.extend_from_slice(bytes);
        while let Some(cut) = self.search.next_marker(self.pending.unsent(), Self::BATCH) {
            self.search = MarkerSearch::default();
            let batch = self.pending.take(cut);
            // A marker line and newlines are ASCII, so the batch ends on a character boundary.
            let text = String::from_utf8(batch)
                .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
            let (document, line) = (self.next_document, self.next_line);
            self.next_document += split_documents(&text, document, line).len();
            self.next_line += text.bytes().filter(|&b| b == b'\n').count() as u64;
            let batch = Batch {
                index: self.batches,
                text,
                document,
                line,
            };
            self.batches += 1;
            let queue = self.queue.get_or_insert_with(|| {
                let (queue, batches) = std::sync::mpsc::channel::<Batch>();
                let batches = std::sync::Arc::new(std::sync::Mutex::new(batches));
                for _ in 0..crate::engine::parallel::threads() {
                    let (batches, file) = (batches.clone(), self.file.clone());
                    self.workers.push(std::thread::spawn(move || {
                        let mut done = Vec::new();
                        loop {
                            let next = crate::engine::locks::lock(&batches).recv();
                            let Ok(batch) = next else { break };
                            let chunks = split_documents(&batch.text, batch.document, batch.line);
                            done.push((batch.index, parse_chunks(&chunks, &file)));
                        }
                        done
                    }));
                }
                queue
            });
            // The workers only stop once the queue is dropped, so sending cannot fail.
            let _ = queue.send(batch);
        }
        self.pending.compact();
    }

    /// The objects of the whole text, in order; the first error in text order if any.
    pub fn finish(mut self) -> Result<Vec<Object>, ManifestError> {
        self.queue = None;
        let text = String::from_utf8_lossy(self.pending.unsent());
        let last = parse_chunks(
            &split_documents(&text, self.next_document, self.next_line),
            &self.file,
        );
        let mut parts: Vec<(usize, Parsed)> = Vec::with_capacity(self.batches + 1);
        for worker in self.workers {
            match worker.join() {
                Ok(done) => parts.extend(done),
                // A panicked worker lost its batches: the render must fail, not shrink.
                Err(_) => {
                    return Err(ManifestError::ParserStopped {
                        file: self.file.clone(),
                    });
                }
            }
        }
        parts.sort_by_key(|(index, _)| *index);
        parts.push((self.batches, last));
        assemble(parts.into_iter().map(|(_, part)| part), &self.file)
    }
}

/// The text not handed to the workers yet, behind the batches already taken. Taking a batch
/// moves only the batch: splitting the rest off at each batch copied a 64 MiB output fed at
/// once 4,000 times (74 s). The space of taken batches is given back once it is at least half
/// the buffer, so each byte is moved at most once more.
#[derive(Default)]
struct Pending {
    bytes: Vec<u8>,
    /// Where the unsent text starts.
    start: usize,
    /// Bytes moved to give space back (how the linear cost is checked).
    moved: usize,
}

impl Pending {
    fn unsent(&self) -> &[u8] {
        &self.bytes[self.start..]
    }

    /// The first `len` unsent bytes, which are then sent.
    fn take(&mut self, len: usize) -> Vec<u8> {
        let batch = self.bytes[self.start..self.start + len].to_vec();
        self.start += len;
        batch
    }

    fn compact(&mut self) {
        if self.start > 0 && self.start >= self.bytes.len() / 2 {
            self.moved += self.bytes.len() - self.start;
            self.bytes.drain(..self.start);
            self.start = 0;
        }
    }
}

/// How far a growing text has been searched for a complete document marker line. Every byte
/// is searched once however the text arrives: a tool's output of one 64 MiB line in pieces
/// was read again from the line's start at each piece (29 s on a daemon worker).
#[derive(Debug, Default, PartialEq)]
struct MarkerSearch {
    /// Where the line that has no newline yet starts.
    line: usize,
    /// Bytes before this hold no newline that was not looked at.
    searched: usize,
}

impl MarkerSearch {
    /// Where the first complete document marker line starting at `min` or later begins, if
    /// one has arrived (the text before it is then whole documents).
    fn next_marker(&mut self, bytes: &[u8], min: usize) -> Option<usize> {
        while let Some(i) = bytes[self.searched..].iter().position(|&b| b == b'\n') {
            let end = self.searched + i;
            if self.line >= min && is_marker_line(&bytes[self.line..=end]) {
                return Some(self.line);
            }
            self.line = end + 1;
            self.searched = end + 1;
        }
        self.searched = bytes.len();
        None
    }
}

/// A line that is a document marker (`---` at column 0, alone or before a space or tab).
/// Only its first bytes are read: the rest of a long line does not matter.
fn is_marker_line(line: &[u8]) -> bool {
    match line.strip_prefix(b"---") {
        Some(rest) => matches!(
            rest,
            [] | [b'\n' | b' ' | b'\t', ..] | [b'\r'] | [b'\r', b'\n', ..]
        ),
        None => false,
    }
}

/// One YAML document of a text: its number (from 1), first line (from 1) and text.
struct Chunk<'a> {
    document: usize,
    first_line: u64,
    text: &'a str,
}

/// Split at lines that are document markers (`---` at column 0). Per the YAML spec such a
/// line ends any scalar, so the pieces parse exactly as the whole would. `first_document` and
/// `first_line` number the text's first document and line (a later piece of a longer text).
fn split_documents(text: &str, first_document: usize, first_line: u64) -> Vec<Chunk<'_>> {
    let mut chunks = Vec::new();
    let mut start = 0;
    let mut start_line = first_line;
    let mut offset = 0;
    for (line_no, line) in (first_line..).zip(text.split_inclusive('\n')) {
        if is_marker_line(line.as_bytes()) && offset > start {
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
            document: first_document + i,
            first_line: l,
            text: &text[s..e],
        })
        .collect()
}

fn parse_chunks(chunks: &[Chunk<'_>], file: &str) -> Parsed {
    let mut documents = Vec::new();
    for chunk in chunks {
        if let Some(docs) = plain_yaml::parse(chunk.text) {
            documents.extend(docs.into_iter().map(|d| (chunk.document, d)));
            continue;
        }
        match super::bounded_yaml::from_multiple(chunk.text, yaml_options()) {
            Ok(docs) => documents.extend(docs.into_iter().map(|d| (chunk.document, d))),
            Err(e) => {
                let location = e.location();
                // `Location` counts from 1; a missing one means the chunk's first line.
                let line = location.as_ref().map(|l| l.line()).unwrap_or(1) + chunk.first_line - 1;
                let column = location.as_ref().map(|l| l.column()).unwrap_or(0);
                let text = if super::bounded_yaml::expands(&e) {
                    super::bounded_yaml::expansion_message()
                } else {
                    first_line(&e.to_string())
                };
                let text = text.strip_prefix("error: ").unwrap_or(&text);
                // Drop the parser's own (chunk-relative) location; ours is absolute.
                let text = match text.strip_prefix("line ") {
                    Some(rest) => rest.split_once(": ").map(|(_, m)| m).unwrap_or(rest),
                    None => text,
                };
                let error = ManifestError::Parse {
                    file: file.to_string(),
                    line,
                    message: if column > 0 {
                        format!("line {line} column {column}: {text}")
                    } else {
                        format!("line {line}: {text}")
                    },
                };
                return Parsed {
                    documents,
                    error: Some(error),
                };
            }
        }
    }
    Parsed {
        documents,
        error: None,
    }
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
            // A hook may use generateName (convoy names it from its content, see
            // engine::content_hooks); anything applied declaratively needs a name.
            let hook = crate::engine::content_hooks::has_hook_annotation(&doc);
            if name.is_empty() && (!hook || generate_name.is_empty()) {
                let hint = if generate_name.is_empty() {
                    ""
                } else {
                    " (only hooks may use generateName: annotate it helm.sh/hook or argocd.argoproj.io/hook, or give it a name)"
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
    let parse_all = |part: &[(String, String)]| -> Result<Vec<Object>, ManifestError> {
        let mut objects = Vec::new();
        for (shown, text) in part {
            objects.extend(parse_documents(text, shown)?);
        }
        Ok(objects)
    };
    let mut objects = Vec::new();
    for part in crate::engine::parallel::map_runs(&texts, 64, parse_all) {
        objects.extend(part.unwrap_or_else(|| {
            Err(ManifestError::ParserStopped {
                file: dir.display().to_string(),
            })
        })?);
    }
    Ok(objects)
}

/// The manifest files under `dir`. The walk keeps its own list of directories: a recursion
/// as deep as a source's tree could overflow the thread's stack and abort the process.
fn collect_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), ManifestError> {
    let mut to_visit = vec![dir.to_path_buf()];
    while let Some(dir) = to_visit.pop() {
        let entries = std::fs::read_dir(&dir).map_err(|source| ManifestError::Read {
            path: dir.clone(),
            source,
        })?;
        for entry in entries {
            let entry = entry.map_err(|source| ManifestError::Read {
                path: dir.clone(),
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
                to_visit.push(path);
            } else if is_manifest_file(&name) {
                out.push(path);
            }
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

    /// Each document is parsed on its own, but none builds more than its share: thirty
    /// documents whose aliases of aliases stand for 60 MB each (1.8 GB together) are refused
    /// at the first, naming the line.
    #[test]
    fn documents_whose_aliases_multiply_are_refused_one_by_one() {
        let document = |i: usize| {
            let mut d = format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: c{i}}}\nx:\n  a: &a \"{}\"\n",
                "x".repeat(6000)
            );
            for (name, of) in [("b", "a"), ("c", "b"), ("d", "c"), ("e", "d")] {
                let aliases = vec![format!("*{of}"); 10].join(", ");
                d.push_str(&format!("  {name}: &{name} [{aliases}]\n"));
            }
            d
        };
        let text: Vec<String> = (0..30).map(document).collect();
        let Err(err) = parse_documents(&text.join("---\n"), "app/one.yaml") else {
            panic!("the documents were built");
        };
        let err = err.to_string();
        assert!(err.starts_with("app/one.yaml: line 7 column "), "{err}");
        assert!(
            err.ends_with(": the YAML expands to more than 64 times its size (aliases of aliases, or merge keys?); convoy reads no more of it"),
            "{err}"
        );
    }

    /// Merge keys are expanded inside the parser, where the visitor cannot count them: forty
    /// ConfigMaps whose merges of merges override each other took serde-saphyr's default
    /// budget of 250,000 nodes each (a second of CPU per 600 bytes). Each is now held to its
    /// own text's budget, and the refusal says why, in words.
    #[test]
    fn documents_whose_merge_keys_multiply_are_refused() {
        let document = |i: usize| {
            let keys: Vec<String> = (0..10).map(|k| format!("k{k}: v")).collect();
            let mut d = format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: c{i}}}\nx:\n  a0: &a0 {{{}}}\n",
                keys.join(", ")
            );
            for level in 1..=4 {
                let copies = vec![format!("*a{}", level - 1); 10].join(", ");
                d.push_str(&format!("  a{level}: &a{level} {{<<: [{copies}]}}\n"));
            }
            d
        };
        let text: Vec<String> = (0..40).map(document).collect();
        let err = parse_documents(&text.join("---\n"), "app/merges.yaml")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("app/merges.yaml: line 7 column "), "{err}");
        assert!(
            err.ends_with(": the YAML expands to more than 64 times its size (aliases of aliases, or merge keys?); convoy reads no more of it"),
            "{err}"
        );
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

    /// A line without a newline is searched once, not again at each piece that lengthens it;
    /// a marker line is known once its newline arrives, however long it is.
    #[test]
    fn a_text_fed_at_once_is_moved_at_most_once() {
        let document = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n";
        let text = document.repeat(50_000);
        let mut parse = StreamingParse::new("big.yaml");
        parse.feed(text.as_bytes());
        assert!(
            parse.pending.moved <= text.len(),
            "{} bytes moved for a text of {}",
            parse.pending.moved,
            text.len()
        );
        assert!(parse.pending.bytes.len() < 2 * StreamingParse::BATCH);
        assert_eq!(parse.finish().unwrap().len(), 50_000);
    }

    #[test]
    fn a_marker_search_reads_each_byte_once() {
        let mut text = b"a: 1\n".to_vec();
        let mut search = MarkerSearch::default();
        assert_eq!(search.next_marker(&text, 1), None);
        assert_eq!(
            search,
            MarkerSearch {
                line: 5,
                searched: 5
            }
        );
        text.extend_from_slice(b"--- x");
        for _ in 0..3 {
            assert_eq!(search.next_marker(&text, 1), None);
            assert_eq!(
                search,
                MarkerSearch {
                    line: 5,
                    searched: text.len()
                }
            );
            text.extend_from_slice(&[b'y'; 1000]);
        }
        text.push(b'\n');
        assert_eq!(search.next_marker(&text, 1), Some(5));
        // Not a marker: `---` must stand alone or before a space or tab.
        for line in [&b"---x\n"[..], b"--\n", b" ---\n", b"---\rx\n", b"----\n"] {
            assert!(!is_marker_line(line), "{line:?}");
        }
        for line in [
            &b"---\n"[..],
            b"---",
            b"---\r\n",
            b"---\r",
            b"--- a\n",
            b"---\t\n",
        ] {
            assert!(is_marker_line(line), "{line:?}");
        }
    }

    mod streamed_texts {
        use super::*;
        use proptest::prelude::*;

        /// Documents behind every form of marker, with text that nearly is or hides one;
        /// the last is broken, so that some texts end in an error.
        const DOCUMENTS: &[&str] = &[
            "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata: {k: '---'}\n",
            "--- \n# ---\n",
            "---\t# c\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: b\ndata:\n  k: |\n    ---\n    ---x\n",
            "---\r\napiVersion: v1\r\nkind: ConfigMap\r\nmetadata: {name: c}\r\n",
            "---\n",
            "--- {apiVersion: v1, kind: ConfigMap, metadata: {name: d}}\n",
            "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: e}\n---x: 1\n",
        ];
        const BROKEN: &str = "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: [}\n";

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(48))]
            /// However the text is cut into pieces, and wherever the 16 KiB batches end, a
            /// streamed text reads as the whole does: the same objects or the same error.
            #[test]
            fn a_streamed_text_reads_as_the_whole(
                documents in prop::collection::vec(prop::sample::select(DOCUMENTS), 1..800),
                long in 0usize..40_000,
                broken in prop::option::weighted(0.2, 0usize..800),
                size in 1usize..9000,
            ) {
                let mut documents = documents;
                let long = format!(
                    "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: long}}\ndata: {{k: {}}}\n",
                    "y".repeat(long)
                );
                documents.insert(documents.len() / 2, &long);
                if let Some(at) = broken {
                    documents.insert(at.min(documents.len()), BROKEN);
                }
                let text = documents.concat();
                let whole = parse_documents(&text, "big.yaml").map_err(|e| e.to_string());
                let pieces = streamed(&text, size).map_err(|e| e.to_string());
                prop_assert_eq!(pieces, whole);
            }
        }
    }

    /// Feed `text` to a StreamingParse in pieces of `size` bytes (cutting characters apart).
    fn streamed(text: &str, size: usize) -> Result<Vec<Object>, ManifestError> {
        let mut parse = StreamingParse::new("big.yaml");
        for piece in text.as_bytes().chunks(size) {
            parse.feed(piece);
        }
        parse.finish()
    }

    #[test]
    fn a_streamed_text_parses_as_the_whole_text_does_however_it_arrives() {
        let mut text = String::from("# leading comment\n");
        for i in 0..600 {
            text.push_str(&format!("---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: cm-{i}}}\ndata: {{k: \"{i} €\", mode: 0644}}\n"));
        }
        text.push_str("--- \n---\t\n");
        let whole = parse_documents(&text, "big.yaml").unwrap();
        assert_eq!(whole.len(), 600);
        for size in [1, 7, 4096, 17 * 1024, 64 * 1024, text.len()] {
            let objects = streamed(&text, size).unwrap();
            assert_eq!(objects, whole, "pieces of {size} bytes");
        }
        // Errors keep their absolute line and document numbers.
        let broken = text.replacen("data: {k: \"499 €\"", "data: {k: [", 1);
        let whole_error = parse_documents(&broken, "big.yaml")
            .unwrap_err()
            .to_string();
        assert!(
            whole_error.starts_with("big.yaml: line 2501 column"),
            "{whole_error}"
        );
        let not_object = text.replacen(
            "kind: ConfigMap\nmetadata: {name: cm-550}",
            "metadata: {name: cm-550}",
            1,
        );
        let not_object_error = parse_documents(&not_object, "big.yaml")
            .unwrap_err()
            .to_string();
        assert!(
            not_object_error.starts_with("big.yaml: document 552:"),
            "{not_object_error}"
        );
        // Both: the earlier one wins, however the text is grouped for the workers.
        let both = not_object.replacen("data: {k: \"580 €\"", "data: {k: [", 1);
        assert_eq!(
            parse_documents(&both, "big.yaml").unwrap_err().to_string(),
            not_object_error
        );
        for size in [1, 4096, 64 * 1024] {
            assert_eq!(
                streamed(&both, size).unwrap_err().to_string(),
                not_object_error
            );
            assert_eq!(
                streamed(&broken, size).unwrap_err().to_string(),
                whole_error
            );
            assert_eq!(
                streamed(&not_object, size).unwrap_err().to_string(),
                not_object_error
            );
        }
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

//! Where command output goes: stdout for results, stderr for logs and progress (DESIGN.md
//! section 4). Commands write through a [`Printer`] so tests can capture what they print.

use crate::engine::key_order::Level;
use std::io::{IsTerminal, Write};

/// `-o/--output`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum OutputFormat {
    #[default]
    Table,
    Yaml,
    Json,
    /// Only for `convoy diff`.
    Diff,
    /// `convoy get`: more columns (the source revision, the Applied message).
    Wide,
    /// `convoy get`: `release.core.convoy.kumodo.io/NAME` per line.
    Name,
}

/// Writes results to stdout (or a buffer in tests) and knows whether color is wanted.
pub struct Printer {
    out: Box<dyn Write + Send>,
    pub color: bool,
    pub format: OutputFormat,
    /// stderr is a terminal: progress bars and prompts are allowed.
    pub interactive: bool,
}

impl Printer {
    /// The real stdout. Color only on a terminal (or with `CLICOLOR_FORCE=1`), and never with
    /// `--no-color` or `NO_COLOR`.
    pub fn stdout(format: OutputFormat, no_color: bool) -> Self {
        let tty = std::io::stdout().is_terminal();
        let forced = std::env::var("CLICOLOR_FORCE").is_ok_and(|v| !v.is_empty() && v != "0");
        let color = (tty || forced) && !no_color && std::env::var_os("NO_COLOR").is_none();
        Self {
            out: Box::new(std::io::stdout()),
            color,
            format,
            interactive: std::io::stderr().is_terminal(),
        }
    }

    /// Print a chunk of text as is.
    pub fn print(&mut self, text: &str) -> std::io::Result<()> {
        self.out.write_all(text.as_bytes())?;
        self.out.flush()
    }

    /// Print one line.
    pub fn line(&mut self, text: &str) -> std::io::Result<()> {
        self.out.write_all(text.as_bytes())?;
        self.out.write_all(b"\n")?;
        self.out.flush()
    }
}

/// Kubernetes objects as multi-document YAML, keys in the order people read them
/// (engine::key_order). A large render is written on
/// every core: serializing is most of `convoy render`'s time after the parse.
pub fn yaml_documents<'a>(
    objects: impl IntoIterator<Item = &'a serde_json::Value>,
) -> Result<String, String> {
    let objects: Vec<&serde_json::Value> = objects.into_iter().collect();
    let mut out = String::new();
    for part in crate::engine::parallel::map_runs(&objects, 64, yaml_part) {
        out.push_str(&part.unwrap_or_else(|| Err("a YAML writer panicked".into()))?);
    }
    Ok(out)
}

fn yaml_part(objects: &[&serde_json::Value]) -> Result<String, String> {
    let mut out = String::new();
    for object in objects {
        out.push_str("---\n");
        let text =
            serde_saphyr::to_string(&Ordered(object, Level::Top)).map_err(|e| e.to_string())?;
        out.push_str(&text);
        if !text.ends_with('\n') {
            out.push('\n');
        }
    }
    Ok(out)
}

/// One value as YAML with the same key order.
pub fn yaml_value(value: &serde_json::Value) -> Result<String, String> {
    serde_saphyr::to_string(&Ordered(value, Level::Top)).map_err(|e| e.to_string())
}

struct Ordered<'a>(&'a serde_json::Value, Level);

impl serde::Serialize for Ordered<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap, SerializeSeq};
        use serde_json::Value;
        match self.0 {
            Value::Object(map) => {
                let mut m = serializer.serialize_map(Some(map.len()))?;
                for (k, v, level) in self.1.entries(map) {
                    m.serialize_entry(k, &Ordered(v, level))?;
                }
                m.end()
            }
            Value::Array(items) => {
                let mut s = serializer.serialize_seq(Some(items.len()))?;
                for item in items {
                    s.serialize_element(&Ordered(item, Level::Other))?;
                }
                s.end()
            }
            other => other.serialize(serializer),
        }
    }
}

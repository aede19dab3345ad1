//! Where command output goes: stdout for results, stderr for logs and progress (DESIGN.md
//! section 4). Commands write through a [`Printer`] so tests can capture what they print.
//!
//! What convoy prints holds text others wrote: a chart's `fail` message, a condition message
//! quoting a tool or the API server, a rendered object's names and values. Written to a
//! terminal as is, a control sequence in it could clear the screen and draw a status that is
//! not the real one, or set the clipboard (OSC 52), so the terminal of whoever runs
//! `convoy status` on a tenant's Release would be the tenant's to draw on (kubectl's
//! CVE-2021-25743). Everything printed passes [`visible`] first.

use crate::engine::json_escape;
use crate::engine::key_order::Level;
use std::borrow::Cow;
use std::io::{IsTerminal, Write};

/// `text` with every character that a terminal could take as a control written out as an
/// escape (`\x1b`, `\u{9b}`): C0 controls but tab and newline, DEL, C1 controls, and the
/// bidirectional overrides and isolates that reorder what is shown ("Trojan Source"). Text
/// without them is returned as it is, so YAML and JSON (whose writers escape them already)
/// pass through unchanged.
pub fn visible(text: &str) -> Cow<'_, str> {
    written_out(text, |_| false)
}

/// [`visible`], but for the characters `kept` says.
pub fn written_out(text: &str, kept: impl Fn(char) -> bool) -> Cow<'_, str> {
    let hidden = |c: char| {
        matches!(c, '\u{0}'..='\u{8}' | '\u{b}'..='\u{1f}' | '\u{7f}'..='\u{9f}'
            | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
            && !kept(c)
    };
    if !text.chars().any(hidden) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            c if !hidden(c) => out.push(c),
            c if (c as u32) < 0x80 => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
        }
    }
    Cow::Owned(out)
}

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

    /// Print a chunk of text, its control characters made [`visible`].
    pub fn print(&mut self, text: &str) -> std::io::Result<()> {
        self.print_styled(&visible(text))
    }

    /// Print one line, its control characters made [`visible`].
    pub fn line(&mut self, text: &str) -> std::io::Result<()> {
        self.out.write_all(visible(text).as_bytes())?;
        self.out.write_all(b"\n")?;
        self.out.flush()
    }

    /// Print what a YAML or JSON writer wrote. serde-saphyr escapes every control
    /// character; serde_json leaves DEL, C1 controls and the line separators, which are
    /// written as JSON escapes ([`json_escape::yaml_safe`]), the same characters to a reader.
    pub fn print_data(&mut self, text: &str) -> std::io::Result<()> {
        self.print_styled(&json_escape::yaml_safe(text))
    }

    /// Print text that holds convoy's own styles: the caller made every part it did not
    /// write [`visible`] before styling it.
    pub fn print_styled(&mut self, text: &str) -> std::io::Result<()> {
        self.out.write_all(text.as_bytes())?;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// What a chart's `fail` or a tenant's object can hold.
    const HOSTILE: &str =
        "a\u{1b}[2J\u{1b}]52;c;Y3VybA==\u{7}b\rc\u{9b}31m\u{202e}d\u{7f}\u{0}e\tf\ng ü";

    fn printed(format: OutputFormat, print: impl FnOnce(&mut Printer)) -> String {
        let buffer = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        struct Shared(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
        impl Write for Shared {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let mut printer = Printer {
            out: Box::new(Shared(buffer.clone())),
            color: false,
            format,
            interactive: false,
        };
        print(&mut printer);
        String::from_utf8(buffer.lock().unwrap().clone()).unwrap()
    }

    #[test]
    fn text_is_printed_with_every_terminal_control_written_out() {
        let text = printed(OutputFormat::Table, |p| p.line(HOSTILE).unwrap());
        assert_eq!(
            text,
            "a\\x1b[2J\\x1b]52;c;Y3VybA==\\x07b\\x0dc\\u{9b}31m\\u{202e}d\\x7f\\x00e\tf\ng ü\n"
        );
        assert!(matches!(visible("plain text\twith ü\n"), Cow::Borrowed(_)));
    }

    #[test]
    fn json_output_escapes_controls_and_still_holds_the_same_value() {
        let value = serde_json::json!({"message": HOSTILE, HOSTILE: [HOSTILE]});
        let json = serde_json::to_string_pretty(&value).unwrap();
        let text = printed(OutputFormat::Json, |p| p.print_data(&json).unwrap());
        let controls = |c: char| c.is_control() && c != '\n';
        assert!(!text.chars().any(controls), "{text:?}");
        assert!(
            text.contains(r"\u009b") && text.contains(r"\u007f"),
            "{text}"
        );
        let back: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(back, value);
    }

    #[test]
    fn yaml_output_holds_no_control_and_the_same_value() {
        let value = serde_json::json!({"data": {"message": HOSTILE, HOSTILE: "x"}});
        let yaml = yaml_value(&value).unwrap();
        let text = printed(OutputFormat::Yaml, |p| p.print_data(&yaml).unwrap());
        let controls = |c: char| c.is_control() && c != '\n';
        assert!(!text.chars().any(controls), "{text:?}");
        let back: serde_json::Value = serde_saphyr::from_str(&text).unwrap();
        assert_eq!(back, value);
    }
}

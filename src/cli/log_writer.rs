//! Where logs go: stderr, with the control characters other parties' text may carry written
//! out.
//!
//! Log lines quote servers, tools and tenants (a Release's failure message, a Cluster's
//! kubeconfig error). tracing-subscriber escapes ESC, BEL, BS, FF, DEL and C1 controls in an
//! event's message, but not the other C0 controls (a carriage return that redraws the line,
//! shift-out that switches the terminal's character set), nor fields written with `%`, and its
//! JSON lines keep DEL and C1 controls as they are (serde_json does). This writer is the last
//! step before stderr: whatever the formatter wrote, it escapes them, so the daemon's logs and
//! the CLI's warnings never drive the terminal that shows them.

use std::io::Write;

use crate::cli::output::written_out;
use crate::engine::json_escape;

use tracing_subscriber::fmt::MakeWriter;

/// Makes [`EscapingWriter`]s onto stderr.
#[derive(Debug, Clone, Copy)]
pub struct EscapingStderr {
    /// The formatter writes JSON: escapes are JSON's (`\u009b`), which stand for the same
    /// characters inside its strings (the only place they can be).
    pub json: bool,
    /// The formatter colors its output: ESC is its own (it escapes ESC in messages itself).
    pub colors: bool,
}

impl<'a> MakeWriter<'a> for EscapingStderr {
    type Writer = EscapingWriter;

    fn make_writer(&'a self) -> Self::Writer {
        EscapingWriter {
            inner: std::io::stderr(),
            how: *self,
        }
    }
}

/// stderr, escaping as [`EscapingStderr`] says.
pub struct EscapingWriter {
    inner: std::io::Stderr,
    how: EscapingStderr,
}

impl Write for EscapingWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.inner.write_all(escaped(buf, self.how).as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// `buf` (a formatted event, UTF-8) as JSON with [`json_escape::yaml_safe`]'s escapes, or as
/// text [`written_out`] (ESC kept when the formatter colors: it escapes ESC in messages).
fn escaped(buf: &[u8], how: EscapingStderr) -> String {
    let text = String::from_utf8_lossy(buf);
    if how.json {
        json_escape::yaml_safe(&text).into_owned()
    } else {
        written_out(&text, |c| how.colors && c == '\u{1b}').into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: &str = "WARN convoy: x\rFAKE\u{e}\u{5}\u{1b}[2J csi \u{9b} del \u{7f} ü é\tend\n";

    #[test]
    fn text_logs_write_out_every_control_but_newline_and_tab() {
        let plain = escaped(
            LINE.as_bytes(),
            EscapingStderr {
                json: false,
                colors: false,
            },
        );
        assert_eq!(
            plain,
            "WARN convoy: x\\x0dFAKE\\x0e\\x05\\x1b[2J csi \\u{9b} del \\x7f ü é\tend\n"
        );
        // Coloring: the formatter's ESC stays (it escaped the message's own).
        let colored = escaped(
            "\u{1b}[33mWARN\u{1b}[0m x\r".as_bytes(),
            EscapingStderr {
                json: false,
                colors: true,
            },
        );
        assert_eq!(colored, "\u{1b}[33mWARN\u{1b}[0m x\\x0d");
    }

    #[test]
    fn json_logs_escape_as_json_and_keep_their_values() {
        let line =
            serde_json::json!({"fields": {"message": "csi \u{9b} del \u{7f} ü"}}).to_string();
        let out = escaped(
            line.as_bytes(),
            EscapingStderr {
                json: true,
                colors: false,
            },
        );
        assert!(!out.chars().any(char::is_control), "{out:?}");
        let back: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(back["fields"]["message"], "csi \u{9b} del \u{7f} ü");
    }
}

//! What helm and kustomize print, read while they run and bounded.
//!
//! A chart's template can loop (`range until`) and overlays can include a base many times
//! over: a few kilobytes of source may print gigabytes. convoy reads at most
//! [`MOST_OUTPUT_BYTES`] of a tool's output (a thousand objects are a few megabytes); past
//! that it closes the pipe, and the tool, a Go program, ends on its next write. Of the error
//! output it keeps the first and the last [`KEPT_ERROR_BYTES`] and drains what is between, so
//! the tool never waits on a full pipe: helm prints its warnings first and the `Error:` that
//! explains the failure last.

use tokio::io::{AsyncRead, AsyncReadExt};

/// The most a tool's standard output may hold.
pub const MOST_OUTPUT_BYTES: usize = 64 << 20;
/// What is kept of each end of a tool's error output.
const KEPT_ERROR_BYTES: usize = 32 << 10;

/// How reading a tool's output ended.
pub struct Read {
    /// The output passed [`MOST_OUTPUT_BYTES`]; what `on_chunk` got is incomplete.
    pub too_large: bool,
    /// The error output: its start and its end, if it was longer than both.
    pub errors: Vec<u8>,
}

/// Hand `stdout` to `on_chunk` as it arrives, up to [`MOST_OUTPUT_BYTES`], while reading
/// `stderr`.
pub async fn read(
    stdout: Option<impl AsyncRead + Unpin>,
    stderr: Option<impl AsyncRead + Unpin>,
    mut on_chunk: impl FnMut(&[u8]),
) -> std::io::Result<Read> {
    let output = async {
        let Some(mut stdout) = stdout else {
            return Ok::<_, std::io::Error>(false);
        };
        let mut buf = vec![0u8; 256 * 1024];
        let mut total = 0usize;
        loop {
            let n = stdout.read(&mut buf).await?;
            if n == 0 {
                return Ok(false);
            }
            total += n;
            if total > MOST_OUTPUT_BYTES {
                // `stdout` is dropped here: the pipe closes.
                return Ok(true);
            }
            on_chunk(&buf[..n]);
        }
    };
    let errors = async {
        let mut kept = Ends::default();
        if let Some(mut stderr) = stderr {
            let mut buf = vec![0u8; 16 * 1024];
            loop {
                let n = stderr.read(&mut buf).await?;
                if n == 0 {
                    break;
                }
                kept.push(&buf[..n]);
            }
        }
        Ok::<_, std::io::Error>(kept.into_bytes())
    };
    let (too_large, errors) = tokio::join!(output, errors);
    Ok(Read {
        too_large: too_large?,
        errors: errors?,
    })
}

/// The first and the last [`KEPT_ERROR_BYTES`] of a text that arrives in pieces.
#[derive(Default)]
struct Ends {
    head: Vec<u8>,
    /// What came after `head`, cut back to its last [`KEPT_ERROR_BYTES`] now and then.
    tail: Vec<u8>,
    /// Bytes cut from the front of `tail`.
    left_out: usize,
}

impl Ends {
    fn push(&mut self, mut bytes: &[u8]) {
        let room = KEPT_ERROR_BYTES.saturating_sub(self.head.len());
        let (head, rest) = bytes.split_at(room.min(bytes.len()));
        self.head.extend_from_slice(head);
        bytes = rest;
        self.tail.extend_from_slice(bytes);
        if self.tail.len() > 2 * KEPT_ERROR_BYTES {
            let cut = self.tail.len() - KEPT_ERROR_BYTES;
            self.tail.drain(..cut);
            self.left_out += cut;
        }
    }

    fn into_bytes(mut self) -> Vec<u8> {
        if self.tail.len() > KEPT_ERROR_BYTES {
            let cut = self.tail.len() - KEPT_ERROR_BYTES;
            self.tail.drain(..cut);
            self.left_out += cut;
        }
        if self.left_out > 0 {
            // Whole lines on either side of the gap, unless the last line is all there is:
            // its end is what names the error.
            let line = self
                .tail
                .iter()
                .position(|&b| b == b'\n')
                .map_or(0, |i| i + 1);
            let line = if line == self.tail.len() { 0 } else { line };
            self.left_out += line;
            self.tail.drain(..line);
            self.head.extend_from_slice(
                format!("\n[{} bytes of error output left out]\n", self.left_out).as_bytes(),
            );
        }
        self.head.extend_from_slice(&self.tail);
        self.head
    }
}

/// The refusal of an output past the limit.
pub fn too_large(tool: &str) -> String {
    format!(
        "its output is larger than {MOST_OUTPUT_BYTES} bytes; convoy reads no more of it ({tool} printed more than any render holds: a loop in a template, a base included many times?)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A program that prints without end is cut off past the limit and ends (its pipe
    /// closed); what it said on its error output is kept, up to a bound.
    #[tokio::test]
    async fn output_past_the_limit_is_cut_off_and_the_program_ends() {
        let mut child = tokio::process::Command::new("sh")
            .args(["-c", "echo starting >&2; yes"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut got = 0usize;
        let read = read(child.stdout.take(), child.stderr.take(), |c| got += c.len())
            .await
            .unwrap();
        assert!(read.too_large);
        assert!(got <= MOST_OUTPUT_BYTES, "{got}");
        assert_eq!(read.errors, b"starting\n");
        let status = child.wait().await.unwrap();
        assert!(!status.success(), "yes ends on the closed pipe");
    }

    /// helm prints its warnings first and the error that made it fail last: after far more
    /// warnings than are kept, the last line is still there, and the first.
    #[tokio::test]
    async fn the_end_of_a_long_error_output_is_kept() {
        let mut child = tokio::process::Command::new("sh")
            .args([
                "-c",
                "echo 'walk.go: warning: first' >&2; \
                 yes 'walk.go: warning: skipped a symbolic link' | head -n 20000 >&2; \
                 echo 'Error: template: web/templates/a.yaml:3: the real reason' >&2; exit 1",
            ])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let read = read(child.stdout.take(), child.stderr.take(), |_| {})
            .await
            .unwrap();
        assert!(!child.wait().await.unwrap().success());
        assert!(
            read.errors.len() <= 2 * KEPT_ERROR_BYTES + 64,
            "{}",
            read.errors.len()
        );
        let text = String::from_utf8(read.errors).unwrap();
        assert!(text.starts_with("walk.go: warning: first\n"), "{text:.80}");
        assert!(
            text.ends_with("\nError: template: web/templates/a.yaml:3: the real reason\n"),
            "{}",
            &text[text.len() - 200..]
        );
        // The gap is named, between whole lines.
        let gap = text.find("\n[").unwrap();
        let after = &text[gap + 1..];
        let (note, rest) = after.split_once('\n').unwrap();
        assert!(note.ends_with(" bytes of error output left out]"), "{note}");
        assert!(rest.starts_with("walk.go: warning: skipped a symbolic link\n"));
        assert_eq!(
            crate::engine::render::helm::tool_message(text.as_bytes(), &[]),
            "template: web/templates/a.yaml:3: the real reason"
        );
    }

    /// A last line longer than what is kept keeps its end, which names the error: trimming
    /// to whole lines dropped it all.
    #[test]
    fn the_end_of_a_last_line_longer_than_kept_is_kept() {
        let mut ends = Ends::default();
        ends.push(b"first\n");
        let long = format!(
            "Error: {} the real reason\n",
            "x".repeat(3 * KEPT_ERROR_BYTES)
        );
        ends.push(long.as_bytes());
        let text = String::from_utf8(ends.into_bytes()).unwrap();
        assert!(text.starts_with("first\n"), "{text:.80}");
        assert!(
            text.ends_with("x the real reason\n"),
            "{}",
            &text[text.len() - 80..]
        );
        assert!(text.len() <= 2 * KEPT_ERROR_BYTES + 64, "{}", text.len());
    }
}

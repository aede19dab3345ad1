//! What helm and kustomize print, read while they run and bounded.
//!
//! A chart's template can loop (`range until`) and overlays can include a base many times
//! over: a few kilobytes of source may print gigabytes. convoy reads at most
//! [`MOST_OUTPUT_BYTES`] of a tool's output (a thousand objects are a few megabytes); past
//! that it closes the pipe, and the tool, a Go program, ends on its next write. Of the error
//! output it keeps the first [`KEPT_ERROR_BYTES`] and drains the rest, so the tool never
//! waits on a full pipe.

use tokio::io::{AsyncRead, AsyncReadExt};

/// The most a tool's standard output may hold.
pub const MOST_OUTPUT_BYTES: usize = 64 << 20;
/// What is kept of a tool's error output.
const KEPT_ERROR_BYTES: usize = 64 << 10;

/// How reading a tool's output ended.
pub struct Read {
    /// The output passed [`MOST_OUTPUT_BYTES`]; what `on_chunk` got is incomplete.
    pub too_large: bool,
    /// The start of the error output.
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
        let mut kept = Vec::new();
        if let Some(mut stderr) = stderr {
            let mut buf = vec![0u8; 16 * 1024];
            loop {
                let n = stderr.read(&mut buf).await?;
                if n == 0 {
                    break;
                }
                let room = KEPT_ERROR_BYTES.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
            }
        }
        Ok::<_, std::io::Error>(kept)
    };
    let (too_large, errors) = tokio::join!(output, errors);
    Ok(Read {
        too_large: too_large?,
        errors: errors?,
    })
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
}

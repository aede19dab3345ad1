//! Where command output goes: stdout for results, stderr for logs and progress (DESIGN.md
//! section 4). Commands write through a [`Printer`] so tests can capture what they print.

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
    /// The real stdout. Color only on a terminal, and never with `--no-color` or `NO_COLOR`.
    pub fn stdout(format: OutputFormat, no_color: bool) -> Self {
        let tty = std::io::stdout().is_terminal();
        let color = tty && !no_color && std::env::var_os("NO_COLOR").is_none();
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

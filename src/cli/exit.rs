//! Exit codes (DESIGN.md section 4) and the error type commands return.
//!
//! 0 ok; 1 "the answer is no" (drift found, not healthy, not synced); 2 usage error; 3 the
//! cluster or a source could not be reached; 4 the input is invalid.

use std::process::ExitCode;

/// What a command's outcome means to a script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    Success = 0,
    /// The command worked and the answer is no.
    No = 1,
    Usage = 2,
    Unreachable = 3,
    Invalid = 4,
}

impl From<ExitStatus> for ExitCode {
    fn from(status: ExitStatus) -> Self {
        ExitCode::from(status as u8)
    }
}

/// An error at the CLI edge: the cause chain to print, and the exit status it maps to.
#[derive(Debug)]
pub struct CliError {
    pub status: ExitStatus,
    pub error: anyhow::Error,
}

impl CliError {
    pub fn new(status: ExitStatus, error: impl Into<anyhow::Error>) -> Self {
        Self {
            status,
            error: error.into(),
        }
    }

    pub fn usage(message: impl std::fmt::Display) -> Self {
        Self::new(ExitStatus::Usage, anyhow::anyhow!("{message}"))
    }
}

/// The result of a command: an exit status to report, or an error.
pub type CommandResult = Result<ExitStatus, CliError>;

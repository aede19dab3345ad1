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

impl ExitStatus {
    /// The exit status of an engine error, by its category: an API server that could not be
    /// reached is 3 wherever it happened (a status write as much as a fetch).
    pub fn of(error: &impl crate::engine::error::Categorized) -> ExitStatus {
        use crate::engine::error::Category;
        match error.category() {
            Category::Unreachable => ExitStatus::Unreachable,
            Category::Invalid => ExitStatus::Invalid,
            Category::Refused | Category::Failed => ExitStatus::No,
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::reconcile::HandlerError;

    fn status_write(code: u16) -> HandlerError {
        HandlerError::StatusWrite {
            release: "apps/web".into(),
            source: Box::new(kube::Error::Api(Box::new(kube::core::Status {
                code,
                ..Default::default()
            }))),
        }
    }

    #[test]
    fn an_api_server_that_cannot_take_the_status_write_is_exit_3_and_a_refusal_exit_1() {
        assert_eq!(ExitStatus::of(&status_write(503)), ExitStatus::Unreachable);
        assert_eq!(ExitStatus::of(&status_write(403)), ExitStatus::No);
        assert_eq!(ExitStatus::of(&status_write(422)), ExitStatus::Invalid);
    }
}

//! `convoy completions SHELL`: print shell completions generated from the clap definitions.

use clap::Args;

use crate::cli::exit::{CommandResult, ExitStatus};
use crate::cli::generate::{Shell, completions};
use crate::cli::io_error;
use crate::cli::output::Printer;

/// Print shell completions.
#[derive(Debug, Args)]
#[command(
    after_help = "Example:\n  convoy completions bash > /etc/bash_completion.d/convoy\n  \
convoy completions zsh > \"${fpath[1]}/_convoy\""
)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: Shell,
}

pub fn run(args: CompletionsArgs, printer: &mut Printer) -> CommandResult {
    printer
        .print_styled(&completions(args.shell))
        .map_err(io_error)?;
    Ok(ExitStatus::Success)
}

//! The `convoy` command line: parse, call the engine, print.
//!
//! Design: DESIGN.md section 4. One file per command under [`commands`]; errors carry their
//! cause chain to the edge and map to the exit codes of [`exit::ExitStatus`].

pub mod classify;
pub mod commands;
pub mod complete;
pub mod exit;
pub mod follow;
pub mod generate;
pub mod log_writer;
pub mod lookup;
pub mod output;
pub mod progress;
pub mod release_input;
pub mod store_args;
pub mod table;
pub mod tenancy_args;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use crate::engine::connect::{Connection, KubeconfigSource};
use exit::{CliError, CommandResult, ExitStatus};
use output::{OutputFormat, Printer};

/// Continuous delivery for Kubernetes: see exactly what will happen before it happens.
#[derive(Debug, Parser)]
#[command(
    name = "convoy",
    version,
    about,
    long_about = "convoy renders a Release (Git, Helm or OCI source; manifests, kustomize or Helm), \
gates it with a Server-Side Apply dry run, applies it in sync waves, prunes what left the render, \
and reports whether it is applied, in sync and healthy.",
    after_help = "Exit codes: 0 ok, 1 the answer is no, 2 usage error, 3 cluster or source unreachable, 4 invalid input."
)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

/// Flags every command accepts.
#[derive(Debug, Clone, Args)]
pub struct GlobalArgs {
    /// Path to the kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then in-cluster).
    #[arg(long, global = true, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use.
    #[arg(long, global = true, value_name = "NAME")]
    pub context: Option<String>,
    /// Namespace of the Release (default: the context's namespace).
    #[arg(short = 'n', long, global = true, value_name = "NAMESPACE", add = clap_complete::engine::ArgValueCandidates::new(complete::namespaces))]
    pub namespace: Option<String>,
    /// Output format.
    #[arg(short = 'o', long, global = true, value_enum, default_value_t = OutputFormat::Table)]
    pub output: OutputFormat,
    /// Never color the output (color is only used on a terminal anyway).
    #[arg(long, global = true)]
    pub no_color: bool,
    /// More logs on stderr (-v info, -vv debug, -vvv trace).
    #[arg(short = 'v', long = "verbose", global = true, action = clap::ArgAction::Count, conflicts_with = "quiet")]
    pub verbose: u8,
    /// Only errors on stderr.
    #[arg(short = 'q', long, global = true)]
    pub quiet: bool,
    /// Log format on stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// How long one API request may wait for the server's answer (watches excepted).
    #[arg(long, global = true, default_value = "30s", value_parser = crate::engine::duration::parse_duration)]
    pub request_timeout: std::time::Duration,
}

/// `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

impl GlobalArgs {
    /// Connect to the cluster the flags name. Makes no request yet. A kubeconfig that is
    /// missing or unusable, or a proxy variable convoy cannot use, is invalid input (exit 4:
    /// it does not fix itself, so a script should not retry it as it retries exit 3).
    pub async fn connect(&self) -> Result<Connection, CliError> {
        let source = KubeconfigSource {
            path: self.kubeconfig.clone(),
            context: self.context.clone(),
        };
        Connection::from_source(&source)
            .await
            .and_then(|c| c.with_api_timeout(self.request_timeout))
            .map_err(|e| CliError::new(ExitStatus::of(&e), e))
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    Render(commands::render::RenderArgs),
    Diff(commands::diff::DiffArgs),
    Sync(commands::sync::SyncArgs),
    Status(commands::status::StatusArgs),
    Health(commands::health::HealthArgs),
    Get(commands::get::GetArgs),
    Pin(commands::pin::PinArgs),
    Unpin(commands::pin::UnpinArgs),
    History(commands::history::HistoryArgs),
    Install(commands::install::InstallArgs),
    Check(commands::check::CheckArgs),
    Daemon(commands::daemon::DaemonArgs),
    Completions(commands::completions::CompletionsArgs),
}

/// The binary's entry point.
pub fn main() -> ExitCode {
    // `COMPLETE=<shell> convoy -- …`: the shell asks for candidates (see `complete`).
    clap_complete::CompleteEnv::with_factory(|| {
        use clap::CommandFactory;
        Cli::command()
    })
    .complete();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // clap prints help and version to stdout (exit 0) and usage errors to stderr (exit 2).
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(e.exit_code() as u8);
        }
    };
    init_logging(&cli.global, matches!(cli.command, Command::Daemon(_)));
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitStatus::Invalid.into();
        }
    };
    let mut printer = Printer::stdout(cli.global.output, cli.global.no_color);
    let status = match runtime.block_on(run(cli, &mut printer)) {
        Ok(status) => status,
        // The reader went away (`convoy render | head`): what it wanted was written.
        Err(err) if broken_pipe(&err.error) => ExitStatus::Success,
        Err(err) => {
            // The chain quotes tools, servers and sources: a tenant's chart may `fail` with
            // control sequences meant for the terminal of whoever renders it.
            eprintln!(
                "error: {}",
                output::visible(&crate::engine::error::chain(err.error.as_ref()))
            );
            err.status
        }
    };
    // The command is done and its output flushed: leave the async runtime's idle threads to
    // the operating system instead of waking and joining each (it shows on short commands).
    runtime.shutdown_background();
    status.into()
}

/// Whether an error is a write to a closed pipe.
fn broken_pipe(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// Run one parsed command.
pub async fn run(cli: Cli, printer: &mut Printer) -> CommandResult {
    match cli.command {
        Command::Render(args) => commands::render::run(&cli.global, args, printer).await,
        Command::Diff(args) => commands::diff::run(&cli.global, args, printer).await,
        Command::Sync(args) => commands::sync::run(&cli.global, args, printer).await,
        Command::Status(args) => commands::status::run(&cli.global, args, printer).await,
        Command::Health(args) => commands::health::run(&cli.global, args, printer).await,
        Command::Get(args) => commands::get::run(&cli.global, args, printer).await,
        Command::Pin(args) => commands::pin::run_pin(&cli.global, args, printer).await,
        Command::Unpin(args) => commands::pin::run_unpin(&cli.global, args, printer).await,
        Command::History(args) => commands::history::run(&cli.global, args, printer).await,
        Command::Install(args) => commands::install::run(&cli.global, args, printer).await,
        Command::Check(args) => commands::check::run(&cli.global, args, printer).await,
        Command::Completions(args) => commands::completions::run(args, printer),
        Command::Daemon(args) => commands::daemon::run_daemon(&cli.global, args).await,
    }
}

fn init_logging(global: &GlobalArgs, daemon: bool) {
    let level = if global.quiet {
        "error"
    } else {
        match global.verbose {
            // A daemon's operators see each Release's outcome changes by default.
            0 if daemon => "info",
            0 => "warn",
            1 => "info",
            2 => "debug",
            _ => "trace",
        }
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("CONVOY_LOG").unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new(format!("convoy={level},warn,kube_client=off"))
    });
    let json = matches!(global.log_format, LogFormat::Json);
    let colors = !json && !global.no_color && std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(log_writer::EscapingStderr { json, colors });
    let _ = match global.log_format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text => builder.with_ansi(colors).try_init(),
    };
}

/// Print an io error from writing output as a CLI error (a closed pipe is not a crash).
pub fn io_error(e: std::io::Error) -> CliError {
    CliError::new(
        ExitStatus::Invalid,
        anyhow::Error::new(e).context("cannot write output"),
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_command_definitions_are_consistent() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }
}

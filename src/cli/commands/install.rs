//! `convoy install`: put convoy's API into a cluster, or print it.

use std::time::Duration;

use clap::Args;

use crate::cli::exit::{CliError, CommandResult, ExitStatus};
use crate::cli::output::{OutputFormat, Printer};
use crate::cli::{GlobalArgs, io_error};
use crate::engine::api;
use crate::engine::install::{InstallError, install_crds};

/// Install convoy's CustomResourceDefinitions (and, with the daemon, its RBAC and Deployments).
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  convoy install --crds-only --dry-run > crds.yaml\n  \
convoy install --crds-only --kubeconfig ~/.kube/config"
)]
pub struct InstallArgs {
    /// Install only the CRDs. (The full install with RBAC and the daemon comes with `convoy daemon`.)
    #[arg(long)]
    pub crds_only: bool,
    /// Print what would be installed instead of applying it.
    #[arg(long)]
    pub dry_run: bool,
    /// How long to wait for the CRDs to become Established.
    #[arg(long, default_value = "60s", value_parser = crate::engine::duration::parse_duration)]
    pub timeout: Duration,
}

pub async fn run(global: &GlobalArgs, args: InstallArgs, printer: &mut Printer) -> CommandResult {
    if !args.crds_only {
        return Err(CliError::usage(
            "only `convoy install --crds-only` is available so far; the daemon install arrives with `convoy daemon`",
        ));
    }
    if args.dry_run {
        print_crds(printer)?;
        return Ok(ExitStatus::Success);
    }
    let conn = global.connect().await?;
    let installed = install_crds(&conn, args.timeout).await.map_err(|e| {
        let status = match &e {
            InstallError::Connect(_) => ExitStatus::Unreachable,
            _ => ExitStatus::Invalid,
        };
        CliError::new(status, e)
    })?;
    for crd in installed {
        printer
            .line(&format!(
                "customresourcedefinition/{} established",
                crd.name
            ))
            .map_err(io_error)?;
    }
    Ok(ExitStatus::Success)
}

fn print_crds(printer: &mut Printer) -> Result<(), CliError> {
    let crds = api::crds();
    let text = match printer.format {
        OutputFormat::Json => {
            let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": crds});
            let mut s = serde_json::to_string_pretty(&list)
                .map_err(|e| CliError::new(ExitStatus::Invalid, e))?;
            s.push('\n');
            s
        }
        _ => {
            let mut s = String::new();
            for crd in &crds {
                s.push_str("---\n");
                s.push_str(
                    &serde_saphyr::to_string(crd)
                        .map_err(|e| CliError::new(ExitStatus::Invalid, e))?,
                );
            }
            s
        }
    };
    printer.print(&text).map_err(io_error)
}

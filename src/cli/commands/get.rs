//! `convoy get`: list Releases with their signals, like `kubectl get releases`.

use clap::Args;
use kube::Api;
use kube::api::ListParams;

use crate::cli::exit::{CliError, CommandResult, ExitStatus};
use crate::cli::output::{OutputFormat, Printer, yaml_documents};
use crate::cli::table::plain;
use crate::cli::{GlobalArgs, io_error};
use crate::engine::api::{Release, condition_types};
use crate::engine::connect::is_unreachable;
use crate::engine::duration::human;
use crate::engine::render::render_ref::short;

/// List Releases with State, Applied, InSync, Healthy and Age.
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  convoy get -n apps\n  convoy get -A -o json")]
pub struct GetArgs {
    /// List Releases in every namespace.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
}

pub async fn run(global: &GlobalArgs, args: GetArgs, printer: &mut Printer) -> CommandResult {
    let conn = global.connect().await?;
    let api: Api<Release> = if args.all_namespaces {
        Api::all(conn.client.clone())
    } else {
        let namespace = global
            .namespace
            .clone()
            .unwrap_or_else(|| conn.default_namespace.clone());
        Api::namespaced(conn.client.clone(), &namespace)
    };
    let list = api.list(&ListParams::default()).await.map_err(|e| {
        if is_unreachable(&e) {
            CliError::new(ExitStatus::Unreachable, conn.unreachable(e))
        } else {
            CliError::new(
                ExitStatus::Invalid,
                anyhow::Error::new(e).context("cannot list Releases"),
            )
        }
    })?;
    let mut releases = list.items;
    releases.sort_by(|a, b| {
        (&a.metadata.namespace, &a.metadata.name).cmp(&(&b.metadata.namespace, &b.metadata.name))
    });
    match printer.format {
        OutputFormat::Json => {
            let value = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": releases});
            let text = serde_json::to_string_pretty(&value)
                .map_err(|e| CliError::new(ExitStatus::Invalid, e))?;
            printer.line(&text).map_err(io_error)?;
        }
        OutputFormat::Yaml => {
            let values: Vec<serde_json::Value> = releases
                .iter()
                .filter_map(|r| serde_json::to_value(r).ok())
                .collect();
            let text = yaml_documents(values.iter())
                .map_err(|e| CliError::new(ExitStatus::Invalid, anyhow::anyhow!(e)))?;
            printer.print(&text).map_err(io_error)?;
        }
        _ => {
            if releases.is_empty() {
                eprintln!("No Releases found.");
                return Ok(ExitStatus::Success);
            }
            printer
                .print(&releases_table(
                    &releases,
                    args.all_namespaces,
                    jiff::Timestamp::now(),
                ))
                .map_err(io_error)?;
        }
    }
    Ok(ExitStatus::Success)
}

/// The table (pure, for tests).
pub fn releases_table(releases: &[Release], with_namespace: bool, now: jiff::Timestamp) -> String {
    let rows: Vec<Vec<String>> = releases
        .iter()
        .map(|r| {
            let status = r.status.clone().unwrap_or_default();
            let cond = |t: &str| {
                status
                    .condition(t)
                    .map(|c| c.status.clone())
                    .unwrap_or_default()
            };
            let age = r
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|t| {
                    human(std::time::Duration::from_secs(
                        (now.as_second() - t.0.as_second()).max(0) as u64,
                    ))
                })
                .unwrap_or_default();
            let mut row = Vec::new();
            if with_namespace {
                row.push(r.metadata.namespace.clone().unwrap_or_default());
            }
            row.extend([
                r.metadata.name.clone().unwrap_or_default(),
                status
                    .rollout
                    .as_ref()
                    .map(|x| x.state.as_str().to_string())
                    .unwrap_or_default(),
                cond(condition_types::APPLIED),
                cond(condition_types::IN_SYNC),
                cond(condition_types::HEALTHY),
                status
                    .applied_render()
                    .map(|x| short(x).to_string())
                    .unwrap_or_default(),
                age,
            ]);
            row
        })
        .collect();
    let mut header = Vec::new();
    if with_namespace {
        header.push("namespace");
    }
    header.extend([
        "name", "state", "applied", "insync", "healthy", "render", "age",
    ]);
    plain(&header, &rows)
}

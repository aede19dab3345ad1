//! `convoy check`: is this cluster ready for convoy, and is convoy at work in it?

use clap::Args;

use crate::cli::exit::{CommandResult, ExitStatus};
use crate::cli::output::{OutputFormat, Printer};
use crate::cli::{GlobalArgs, io_error};
use crate::engine::check::{Verdict, check};

/// Check the cluster: reachable, convoy's CRDs and their versions, the daemon's RBAC, the
/// daemon running and reconciling, and the render store. Exit 0 when nothing failed.
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
convoy check                       # convoy installed in convoy-system\n  \
convoy check -n platform-convoy    # installed elsewhere")]
pub struct CheckArgs {}

pub async fn run(global: &GlobalArgs, _args: CheckArgs, printer: &mut Printer) -> CommandResult {
    let conn = global.connect().await?;
    // `-n` names convoy's namespace here, as for `convoy install`.
    let namespace = global
        .namespace
        .clone()
        .unwrap_or_else(|| "convoy-system".to_string());
    let findings = check(&conn, &namespace, jiff::Timestamp::now()).await;
    let failed = findings.iter().any(|f| f.verdict == Verdict::Fail);
    match printer.format {
        OutputFormat::Json | OutputFormat::Yaml => {
            let value: Vec<serde_json::Value> = findings
                .iter()
                .map(|f| {
                    serde_json::json!({
                        "check": f.check,
                        "verdict": match f.verdict {
                            Verdict::Pass => "pass",
                            Verdict::Warn => "warn",
                            Verdict::Fail => "fail",
                        },
                        "detail": f.detail,
                    })
                })
                .collect();
            let text = if printer.format == OutputFormat::Json {
                serde_json::to_string_pretty(&value).unwrap_or_default() + "\n"
            } else {
                crate::cli::output::yaml_value(&serde_json::Value::Array(value)).unwrap_or_default()
            };
            printer.print_data(&text).map_err(io_error)?;
        }
        _ => {
            for f in &findings {
                let mark = match f.verdict {
                    Verdict::Pass => "✔",
                    Verdict::Warn => "!",
                    Verdict::Fail => "✗",
                };
                printer
                    .line(&format!("{mark} {}: {}", f.check, f.detail))
                    .map_err(io_error)?;
            }
            printer
                .line(if failed {
                    "✗ convoy is not ready here: fix the failures above"
                } else {
                    "✔ all checks passed"
                })
                .map_err(io_error)?;
        }
    }
    // The first check asks the API server its version; when that fails no other check ran,
    // and the answer is not "not ready" but "the cluster could not be reached" (exit 3).
    let unreachable = findings
        .iter()
        .any(|f| f.check == "cluster" && f.verdict == Verdict::Fail);
    Ok(if unreachable {
        ExitStatus::Unreachable
    } else if failed {
        ExitStatus::No
    } else {
        ExitStatus::Success
    })
}

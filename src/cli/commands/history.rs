//! `convoy history`: the renders a Release ran, from the render store.

use clap::Args;

use crate::cli::exit::{CliError, CommandResult, ExitStatus};
use crate::cli::output::{OutputFormat, Printer};
use crate::cli::store_args::StoreArgs;
use crate::cli::table::plain;
use crate::cli::{GlobalArgs, io_error};
use crate::engine::api::Release;
use crate::engine::duration::human;
use crate::engine::render::render_ref::short;
use crate::engine::store::{HistoryEntry, HistoryOutcome, ReleaseId};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// List a Release's render history, oldest first and numbered (`convoy pin NAME N` runs entry
/// N), with each render's outcome and what runs, what is pinned and the last healthy render
/// marked.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  convoy history web -n apps\n  convoy history web -n apps -o json"
)]
pub struct HistoryArgs {
    /// The Release's name.
    #[arg(add = clap_complete::engine::ArgValueCandidates::new(crate::cli::complete::release_names))]
    pub name: String,
    /// After listing, list again whenever the Release changes (a new render, a rollout's
    /// end; Ctrl-C ends).
    #[arg(short = 'w', long)]
    pub watch: bool,
    #[command(flatten)]
    pub store: StoreArgs,
}

pub async fn run(global: &GlobalArgs, args: HistoryArgs, printer: &mut Printer) -> CommandResult {
    let release = super::status::fetch_release(global, &args.name).await?;
    let conn = global.connect().await?;
    let id = ReleaseId::of(&release);
    let Some(store) = args.store.open(&conn.client) else {
        return Err(CliError::usage(
            "the history is in the render store; --render-store none has none",
        ));
    };
    let history = store.history(&id).await.map_err(|e| {
        CliError::new(
            ExitStatus::Unreachable,
            anyhow::Error::new(e).context(format!("cannot read the history of Release {id}")),
        )
    })?;
    match printer.format {
        OutputFormat::Json | OutputFormat::Yaml => {
            // What the table shows, entry numbers, outcomes and markers included.
            let value = serde_json::to_value(history_rows(&release, &history))
                .map_err(|e| CliError::new(ExitStatus::Invalid, e))?;
            let text = if printer.format == OutputFormat::Json {
                serde_json::to_string_pretty(&value)
                    .map_err(|e| CliError::new(ExitStatus::Invalid, e))?
            } else {
                crate::cli::output::yaml_value(&value)
                    .map_err(|e| CliError::new(ExitStatus::Invalid, anyhow::anyhow!(e)))?
            };
            printer.print_data(&text).map_err(io_error)?;
            if !text.ends_with('\n') {
                printer.print("\n").map_err(io_error)?;
            }
        }
        _ => {
            if history.is_empty() && !args.watch {
                eprintln!("No renders recorded for Release {id} yet.");
                return Ok(ExitStatus::Success);
            }
            let text = history_table(&release, &history, jiff::Timestamp::now());
            printer.print(&text).map_err(io_error)?;
            if args.watch {
                let store = store.clone();
                return crate::cli::follow::follow(
                    &conn,
                    &id.namespace,
                    &id.name,
                    printer,
                    text,
                    |r| {
                        let store = store.clone();
                        let id = id.clone();
                        async move {
                            let history = store.history(&id).await.map_err(|e| {
                                CliError::new(ExitStatus::Unreachable, anyhow::Error::new(e))
                            })?;
                            Ok(history_table(&r, &history, jiff::Timestamp::now()))
                        }
                    },
                )
                .await;
            }
        }
    }
    Ok(ExitStatus::Success)
}

/// One history entry as `convoy history` shows it (and `-o json|yaml` prints it).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HistoryRow {
    /// The number `convoy pin NAME N` takes (1 is the oldest entry).
    pub entry: usize,
    pub render_ref: String,
    pub recorded_at: Time,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source_revision: Option<String>,
    pub outcome: RowOutcome,
    pub markers: Vec<Marker>,
}

/// How a render's rollout went, or where it stands: the stored outcome once it ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum RowOutcome {
    Succeeded,
    Failed,
    RolledBack,
    /// The newest entry of the render the rollout is progressing with.
    RollingOut,
    /// Applied, with no rollout result (yet).
    Applied,
}

impl RowOutcome {
    fn as_str(self) -> &'static str {
        match self {
            RowOutcome::Succeeded => HistoryOutcome::Succeeded.as_str(),
            RowOutcome::Failed => HistoryOutcome::Failed.as_str(),
            RowOutcome::RolledBack => HistoryOutcome::RolledBack.as_str(),
            RowOutcome::RollingOut => "rolling out",
            RowOutcome::Applied => "applied",
        }
    }
}

/// What an entry's render is to the Release now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Marker {
    /// The render that runs (lastSuccessful).
    Current,
    Pinned,
    LastHealthy,
}

impl Marker {
    fn as_str(self) -> &'static str {
        match self {
            Marker::Current => "current",
            Marker::Pinned => "pinned",
            Marker::LastHealthy => "last healthy",
        }
    }
}

/// The entries with their numbers, outcomes and markers (pure).
pub fn history_rows(release: &Release, history: &[HistoryEntry]) -> Vec<HistoryRow> {
    let status = release.status.clone().unwrap_or_default();
    let running = status
        .last_successful
        .as_ref()
        .and_then(|a| a.render_ref.clone());
    let pinned = crate::engine::reconcile::assemble::pin_status(release).map(|p| p.render_ref);
    let healthy = status.last_healthy.as_ref().map(|h| h.render_ref.clone());
    let rollout = status.rollout.clone();
    history
        .iter()
        .enumerate()
        .map(|(i, entry)| {
            let mut markers = Vec::new();
            // A render recorded twice (pinned back to, say) carries its markers once, on its
            // newest entry.
            let newest = !history[i + 1..]
                .iter()
                .any(|later| later.render_ref == entry.render_ref);
            let is = |r: &Option<String>| newest && r.as_deref() == Some(entry.render_ref.as_str());
            if is(&running) {
                markers.push(Marker::Current);
            }
            if is(&pinned) {
                markers.push(Marker::Pinned);
            }
            if is(&healthy) {
                markers.push(Marker::LastHealthy);
            }
            let outcome = match entry.outcome {
                Some(HistoryOutcome::Succeeded) => RowOutcome::Succeeded,
                Some(HistoryOutcome::Failed) => RowOutcome::Failed,
                Some(HistoryOutcome::RolledBack) => RowOutcome::RolledBack,
                None if newest
                    && rollout.as_ref().is_some_and(|r| {
                        r.render_ref == entry.render_ref
                            && r.state == crate::engine::api::RolloutState::Progressing
                    }) =>
                {
                    RowOutcome::RollingOut
                }
                None => RowOutcome::Applied,
            };
            HistoryRow {
                entry: i + 1,
                render_ref: entry.render_ref.clone(),
                recorded_at: entry.recorded_at.clone(),
                source_revision: entry.source_revision.clone(),
                outcome,
                markers,
            }
        })
        .collect()
}

/// The table (pure, for snapshot tests): one row per entry with its markers.
pub fn history_table(release: &Release, history: &[HistoryEntry], now: jiff::Timestamp) -> String {
    let rows: Vec<Vec<String>> = history_rows(release, history)
        .into_iter()
        .map(|row| {
            let age = human(std::time::Duration::from_secs(
                (now.as_second() - row.recorded_at.0.as_second()).max(0) as u64,
            ));
            let markers: Vec<&str> = row.markers.iter().map(|m| m.as_str()).collect();
            vec![
                row.entry.to_string(),
                short(&row.render_ref).to_string(),
                format!("{age} ago"),
                row.source_revision.unwrap_or_else(|| "-".into()),
                row.outcome.as_str().to_string(),
                markers.join(", "),
            ]
        })
        .collect();
    plain(
        &[
            "#",
            "render",
            "recorded",
            "source revision",
            "outcome",
            "markers",
        ],
        &rows,
    )
}

//! `convoy health`: per-object health and hook states, as the health loop recorded them in the
//! ReleaseInventory, or (`--live`) assessed now without writing anything.

use std::sync::Arc;

use clap::Args;
use futures::StreamExt;
use kube::Api;
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;

use crate::cli::commands::status::fetch_release;
use crate::cli::exit::{CliError, CommandResult, ExitStatus};
use crate::cli::output::{OutputFormat, Printer};
use crate::cli::table::plain;
use crate::cli::{GlobalArgs, io_error};
use crate::engine::api::{ConditionStatus, Reason};
use crate::engine::api::{
    HealthState, HealthSummary, HookState, Release, ReleaseInventory, condition_types,
};
use crate::engine::duration::human;
use crate::engine::health::assess;
use crate::engine::inventory::{EntryHealth, members};
use crate::engine::render::render_ref::short;
use crate::engine::runtime::Context;
use crate::engine::source::{Cache, Coordinator};

/// Show the health of each object and hook of a Release.
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
convoy health web -n apps\n  \
convoy health web -n apps --watch      # redraw until everything is Healthy\n  \
convoy health web -n apps --live       # assess now, write nothing")]
pub struct HealthArgs {
    /// The Release's name.
    #[arg(add = clap_complete::engine::ArgValueCandidates::new(crate::cli::complete::release_names))]
    pub name: String,
    /// Redraw on every change until the render last attempted is applied and every object
    /// is Healthy for it (exit 0), or it failed or was rolled back (exit 1), or Ctrl-C.
    #[arg(long, conflicts_with = "live")]
    pub watch: bool,
    /// Assess now with the same rules as the health loop, writing nothing.
    #[arg(long)]
    pub live: bool,
    #[command(flatten)]
    pub tenancy: crate::cli::tenancy_args::TenancyArgs,
}

pub async fn run(global: &GlobalArgs, args: HealthArgs, printer: &mut Printer) -> CommandResult {
    let release = fetch_release(global, &args.name).await?;
    let conn = global.connect().await?;
    let namespace = release.metadata.namespace.clone().unwrap_or_default();
    let inventories: Api<ReleaseInventory> = Api::namespaced(conn.client.clone(), &namespace);

    if args.live {
        let mut ctx = Context::new(
            conn.clone(),
            Arc::new(Coordinator::new(Cache::new(Cache::default_root()))),
        );
        ctx.tenancy = Arc::new(args.tenancy.tenancy()?);
        let assessment = assess(&ctx, &release, &crate::engine::status::now())
            .await
            .map_err(|e| CliError::new(ExitStatus::No, anyhow::Error::new(e).context("assess")))?;
        let inventory = assessment.inventory.clone().unwrap_or_default();
        let view = View::new(&release, &inventory, Some(&assessment.results));
        return view.print(printer);
    }

    let inventory = inventories
        .get_opt(&args.name)
        .await
        .map_err(|e| CliError::new(ExitStatus::Unreachable, conn.unreachable(e)))?
        .unwrap_or_default();
    let view = View::new(&release, &inventory, None);
    if !args.watch || settled(&release, &inventory, &view).is_some() {
        return view.print(printer);
    }
    view.print(printer)?;
    let releases: Api<Release> = Api::namespaced(conn.client.clone(), &namespace);
    // Watch errors back off (a lost API server is retried, not spun on).
    let watched: Api<ReleaseInventory> = Api::namespaced(conn.watch_client.clone(), &namespace);
    let stream = watcher::watch_object(watched, &args.name).default_backoff();
    let mut stream = std::pin::pin!(stream);
    loop {
        tokio::select! {
            event = stream.next() => {
                let inventory = match event {
                    Some(Ok(Some(inventory))) => inventory,
                    Some(Ok(None)) => continue,
                    Some(Err(e)) => {
                        tracing::warn!(
                            "watching ReleaseInventory {}: {}",
                            args.name,
                            crate::engine::error::chain(&e)
                        );
                        continue;
                    }
                    None => {
                        return Err(CliError::new(
                            ExitStatus::Unreachable,
                            anyhow::anyhow!("the watch of ReleaseInventory {} ended", args.name),
                        ))
                    }
                };
                let release = releases.get(&args.name).await.unwrap_or(release.clone());
                let view = View::new(&release, &inventory, None);
                if printer.interactive {
                    eprint!("\x1b[2J\x1b[H");
                } else {
                    printer.line("").map_err(io_error)?;
                }
                let status = view.print(printer)?;
                if let Some(end) = settled(&release, &inventory, &view) {
                    return Ok(if end { status } else { ExitStatus::No });
                }
            }
            _ = tokio::signal::ctrl_c() => return Ok(ExitStatus::No),
        }
    }
}

/// Whether `--watch` is done: `Some(true)` when the render the Release last attempted is
/// applied and every object is Healthy for it, `Some(false)` when that attempt failed;
/// `None` while a rollout is on its way (a render that is not applied yet, a hold, objects
/// assessed for an older render), so a watch started just before a rollout follows it.
fn settled(release: &Release, inventory: &ReleaseInventory, view: &View) -> Option<bool> {
    use crate::engine::api::AttemptPhase;
    let status = release.status.clone().unwrap_or_default();
    let attempt = status.last_attempted.as_ref()?;
    let rolled_back = status
        .condition(condition_types::APPLIED)
        .is_some_and(|c| c.reason == Reason::RolledBack);
    if attempt.phase == Some(AttemptPhase::Failed) || rolled_back {
        return Some(false);
    }
    let render = attempt.render_ref.as_deref()?;
    let applied = status
        .condition(condition_types::APPLIED)
        .is_some_and(|c| c.status == ConditionStatus::True);
    let current = members(inventory)
        .iter()
        .all(|e| e.assessed_render_ref.as_deref() == Some(render));
    (applied && current && view.all_healthy()).then_some(true)
}

/// The rules that judged an object, grouped by set: `convoy-defaults: a, b`, `built-in: a`.
fn judged_by(rules: &str) -> String {
    let mut by_set: Vec<(String, Vec<String>)> = Vec::new();
    for id in rules.split(", ") {
        let (set, rule) = id.rsplit_once('/').unwrap_or(("", id));
        // `GlobalHealthRuleSet/name` and `HealthRuleSet/ns/name` read as `name`, `ns/name`.
        let set = set
            .strip_prefix("GlobalHealthRuleSet/")
            .or_else(|| set.strip_prefix("HealthRuleSet/"))
            .unwrap_or(set)
            .to_string();
        match by_set.iter_mut().find(|(s, _)| *s == set) {
            Some((_, names)) => names.push(rule.to_string()),
            None => by_set.push((set, vec![rule.to_string()])),
        }
    }
    by_set
        .into_iter()
        .map(|(set, names)| format!("{set}: {}", names.join(", ")))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Count one object's state into `summary` (no state yet counts as unknown).
fn count(summary: &mut HealthSummary, state: Option<HealthState>) {
    summary.total += 1;
    match state {
        Some(HealthState::Healthy) => summary.healthy += 1,
        Some(HealthState::Progressing) => summary.progressing += 1,
        Some(HealthState::Degraded) => summary.degraded += 1,
        Some(HealthState::Unknown) | None => summary.unknown += 1,
    }
}

/// What `convoy health` shows.
struct View {
    json: serde_json::Value,
    text: String,
    healthy: bool,
}

impl View {
    fn new(release: &Release, inventory: &ReleaseInventory, live: Option<&[EntryHealth]>) -> Self {
        let now = jiff::Timestamp::now();
        let since = |t: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>| {
            t.map(|t| {
                human(std::time::Duration::from_secs(
                    (now.as_second() - t.0.as_second()).max(0) as u64,
                ))
            })
        };
        let mut rows = Vec::new();
        let mut objects = Vec::new();
        let mut healthy = true;
        let mut shown = HealthSummary::default();
        for entry in members(inventory) {
            let key = entry.key();
            let (state, message, first, assessed, rule) =
                match live.and_then(|l| l.iter().find(|r| r.key == key)) {
                    Some(r) => (
                        Some(r.state),
                        r.message.clone(),
                        r.first_unhealthy.clone(),
                        r.assessed_render_ref.clone(),
                        r.rule.clone(),
                    ),
                    None => (
                        entry.state,
                        entry.message.clone(),
                        entry.first_unhealthy.clone(),
                        entry.assessed_render_ref.clone(),
                        entry.rule.clone(),
                    ),
                };
            healthy &= state == Some(HealthState::Healthy);
            count(&mut shown, state);
            let kind_name = if key.group.is_empty() {
                format!("{}/{}", key.kind, key.name)
            } else {
                format!("{}.{}/{}", key.kind, key.group, key.name)
            };
            rows.push(vec![
                kind_name.clone(),
                entry.wave.unwrap_or(0).to_string(),
                state
                    .map(|s| s.as_str().to_string())
                    .unwrap_or_else(|| "-".into()),
                since(first.as_ref()).unwrap_or_else(|| "-".into()),
                assessed.as_deref().map(short).unwrap_or("-").to_string(),
                rule.as_deref().map(judged_by).unwrap_or_else(|| "-".into()),
                message.clone().unwrap_or_default(),
            ]);
            objects.push(json!({"object": key.to_string(), "namespace": key.namespace, "wave": entry.wave,
                "state": state, "message": message, "firstUnhealthy": first, "assessedRenderRef": assessed,
                "rule": rule}));
        }
        let mut text = String::new();
        if rows.is_empty() {
            text.push_str("No objects recorded yet: the Release has not been applied.\n");
            healthy = false;
        } else {
            text.push_str(&plain(
                &[
                    "object",
                    "wave",
                    "state",
                    "unhealthy for",
                    "assessed render",
                    "judged by",
                    "message",
                ],
                &rows,
            ));
        }
        let mut hook_rows = Vec::new();
        let mut hooks = Vec::new();
        for h in &inventory.spec.hooks {
            let (state, duration, message) = crate::engine::hooks::describe(h, now);
            healthy &= state == HookState::Succeeded;
            hook_rows.push(vec![
                h.name.clone(),
                h.phase.as_str().to_string(),
                state.as_str().to_string(),
                duration.map(human).unwrap_or_else(|| "-".into()),
                message,
            ]);
            hooks.push(
                json!({"name": h.name, "phase": h.phase, "state": h.state, "message": h.message,
                "createdAt": h.created_at, "finishedAt": h.finished_at}),
            );
        }
        if !hook_rows.is_empty() {
            text.push('\n');
            text.push_str(&plain(
                &["hook", "phase", "state", "duration", "message"],
                &hook_rows,
            ));
        }
        let status = release.status.clone().unwrap_or_default();
        let condition = status.condition(condition_types::HEALTHY).cloned();
        text.push('\n');
        match (&condition, live) {
            (_, Some(_)) => text.push_str("Assessed live (nothing written).\n"),
            (Some(c), None) => text.push_str(&format!(
                "Healthy={} ({}): {}\n",
                c.status, c.reason, c.message
            )),
            (None, None) => text.push_str("Healthy: not assessed yet.\n"),
        }
        // `--live` shows what it assessed now: the stored summary is the health loop's last
        // pass, which may count other objects and states than the rows above.
        let summary = match live {
            Some(_) => Some(shown),
            None => status.health_summary.clone(),
        };
        if let Some(s) = &summary {
            text.push_str(&format!(
                "{} total: {} healthy, {} progressing, {} degraded, {} unknown\n",
                s.total, s.healthy, s.progressing, s.degraded, s.unknown
            ));
        }
        let json =
            json!({"objects": objects, "hooks": hooks, "healthy": condition, "summary": summary});
        Self {
            json,
            text,
            healthy,
        }
    }

    fn all_healthy(&self) -> bool {
        self.healthy
    }

    fn print(&self, printer: &mut Printer) -> CommandResult {
        match printer.format {
            OutputFormat::Json => {
                let text = serde_json::to_string_pretty(&self.json)
                    .map_err(|e| CliError::new(ExitStatus::Invalid, e))?;
                printer.print_data(&(text + "\n")).map_err(io_error)?;
            }
            _ => printer.print(&self.text).map_err(io_error)?,
        }
        Ok(if self.healthy {
            ExitStatus::Success
        } else {
            ExitStatus::No
        })
    }
}

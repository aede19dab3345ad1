//! `convoy sync`: request a /sync and run one reconcile in-process with the daemon's field
//! managers, or (`--request`) only write the request and optionally wait for the daemon.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use kube::Api;
use kube::runtime::watcher;

use crate::cli::exit::{CliError, CommandResult, ExitStatus};
use crate::cli::lookup;
use crate::cli::output::Printer;
use crate::cli::progress::SyncProgress;
use crate::cli::{GlobalArgs, io_error};
use crate::engine::api::ConditionStatus;
use crate::engine::api::{HealthyReason, LifecycleReason, Reason, Release};
use crate::engine::reconcile::{ReconcileOutcome, sync_handler};
use crate::engine::requests::{SyncRequest, request_sync};
use crate::engine::runtime::Context;
use crate::engine::source::{Cache, Coordinator};

/// Sync a Release now: render, dry-run, apply in waves, prune, record, write the status.
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
convoy sync web -n apps                      # one reconcile, here and now\n  \
convoy sync web -n apps --force --yes        # skip the dry-run gate\n  \
convoy sync web -n apps --request --wait     # ask the daemon and wait for its answer")]
pub struct SyncArgs {
    /// The Release's name.
    #[arg(add = clap_complete::engine::ArgValueCandidates::new(crate::cli::complete::release_names))]
    pub name: String,
    /// A forced sync: skip the server-side dry-run gate.
    #[arg(long)]
    pub force: bool,
    /// Do not ask for confirmation of --force.
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// Only write the /sync request for the daemon; do not reconcile here.
    #[arg(long)]
    pub request: bool,
    /// With --request: wait until the daemon handled the request.
    #[arg(long)]
    pub wait: bool,
    /// How long --wait waits, and how long a sync waits for its hooks and (with a
    /// healthAssessment) health.
    #[arg(long, default_value = "5m", value_parser = crate::engine::duration::parse_duration)]
    pub timeout: Duration,
    /// Requests in flight per apply step.
    #[arg(long, default_value_t = crate::engine::apply::DEFAULT_CONCURRENCY)]
    pub concurrency: usize,
    /// Where fetched sources are cached (default: $CONVOY_CACHE_DIR or ~/.cache/convoy).
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    #[command(flatten)]
    pub store: crate::cli::store_args::StoreArgs,
    #[command(flatten)]
    pub tenancy: crate::cli::tenancy_args::TenancyArgs,
}

pub async fn run(global: &GlobalArgs, args: SyncArgs, printer: &mut Printer) -> CommandResult {
    if args.force && !args.yes {
        confirm_force(&args.name, printer.interactive)?;
    }
    let conn = global.connect().await?;
    let namespace = global
        .namespace
        .clone()
        .unwrap_or_else(|| conn.default_namespace.clone());
    let api: Api<Release> = Api::namespaced(conn.client.clone(), &namespace);
    let request = match request_sync(&api, &args.name, args.force).await {
        Ok(request) => request,
        // A missing Release (or no CRDs at all) is said as `get` and `status` say it.
        Err(kube::Error::Api(s)) if s.code == 404 => {
            return Err(lookup::not_found(&conn, &api, &namespace, &args.name).await);
        }
        Err(e) => {
            let what = format!("cannot request a sync of Release {namespace}/{}", args.name);
            return Err(lookup::api_error(&conn, e, what).await);
        }
    };

    if args.request {
        printer
            .line(&format!(
                "sync of Release {namespace}/{} requested at {}",
                args.name, request.sync_requested_at
            ))
            .map_err(io_error)?;
        if !args.wait {
            return Ok(ExitStatus::Success);
        }
        let watched: Api<Release> = Api::namespaced(conn.watch_client.clone(), &namespace);
        let progress = SyncProgress::new(printer.interactive);
        let release =
            wait_for_handling(&watched, &args.name, &request, args.timeout, &progress).await;
        progress.finish();
        return report_status(&release?, printer);
    }

    let release = lookup::release(&conn, &namespace, &args.name).await?;
    let cache = Cache::new(args.cache_dir.clone().unwrap_or_else(Cache::default_root));
    let mut ctx = Context::new(conn.clone(), Arc::new(Coordinator::new(cache)));
    ctx.concurrency = args.concurrency;
    ctx.store = args.store.open(&conn.client);
    ctx.tenancy = Arc::new(args.tenancy.tenancy());
    ctx.digest_key = Some(Arc::new(crate::engine::digest_key::KeyCell::new(
        conn.client.clone(),
        crate::engine::store::DEFAULT_STORE_NAMESPACE,
    )));
    let progress = Arc::new(SyncProgress::new(printer.interactive));
    ctx.progress = Some(progress.clone());
    let result = sync_handler(&ctx, &release, 0).await;
    let result = result.map_err(|e| CliError::new(ExitStatus::of(&e), e));
    let result = match result {
        Ok(r) => finish_what_it_started(&ctx, &api, &args, r, &progress).await,
        Err(e) => Err(e),
    };
    progress.finish();
    let (result, gave_up) = result?;
    match result.outcome {
        Some(outcome) => {
            let status = report_outcome(&namespace, &args.name, &outcome, printer)?;
            match gave_up {
                // The state at the deadline is on stdout; why the command stopped goes to stderr.
                Some(waiting) => Err(CliError::new(
                    ExitStatus::No,
                    anyhow::anyhow!(
                        "stopped waiting after {} (--timeout): {waiting}; a daemon, or the next \
                         convoy sync, carries on from here",
                        crate::engine::duration::human(args.timeout)
                    ),
                )),
                None => Ok(status),
            }
        }
        None => {
            printer
                .line("the Release is being deleted; nothing to sync")
                .map_err(io_error)?;
            Ok(ExitStatus::No)
        }
    }
}

/// How often a sync that waits for its hooks and health looks again.
const FINISH_POLL: Duration = Duration::from_secs(1);

/// Without a daemon nobody else polls hooks or assesses health: a sync held by its hooks or a
/// wave's health, or whose hooks still run, polls them itself with the health loop's own pass
/// (same functions, same field managers, so a daemon running meanwhile sees the same values)
/// and reconciles again, until the render is applied with every hook finished (and Healthy,
/// where the Release has a healthAssessment), something fails, or `--timeout` passes. At the
/// deadline it returns the last result with what it still waited for.
async fn finish_what_it_started(
    ctx: &Context,
    api: &Api<Release>,
    args: &SyncArgs,
    first: crate::engine::reconcile::HandlerResult,
    progress: &SyncProgress,
) -> Result<(crate::engine::reconcile::HandlerResult, Option<String>), CliError> {
    use crate::engine::api::condition_types;
    let deadline = tokio::time::Instant::now() + args.timeout;
    let memory = crate::engine::health::HealthMemory::default();
    let mut result = first;
    let mut waited = false;
    let mut last_note = String::new();
    loop {
        let Some(outcome) = &result.outcome else {
            return Ok((result, None));
        };
        let held = matches!(
            outcome.reason,
            Reason::WaitingForHook | Reason::WaitingForWaveHealth
        );
        let release = api.get(&args.name).await.map_err(|e| {
            CliError::new(
                ExitStatus::Unreachable,
                anyhow::Error::new(e).context("read the Release"),
            )
        })?;
        let status = release.status.clone().unwrap_or_default();
        let hooks_running = status
            .condition(condition_types::LIFECYCLE_SUCCEEDED)
            .is_some_and(|c| c.reason == LifecycleReason::Running);
        let note = if held {
            outcome.message.clone()
        } else if outcome.applied_render && hooks_running {
            "waiting for hooks to finish".to_string()
        } else if outcome.applied_render && waited && release.spec.health_assessment.is_some() {
            match status.condition(condition_types::HEALTHY) {
                Some(c) if c.status == ConditionStatus::True => return Ok((result, None)),
                Some(c) if c.reason == HealthyReason::Degraded => return Ok((result, None)),
                _ => "waiting for the render to be healthy".to_string(),
            }
        } else {
            return Ok((result, None));
        };
        waited = true;
        if note != last_note {
            progress.note(&note);
            last_note = note;
        }
        if tokio::time::Instant::now() >= deadline {
            return Ok((result, Some(last_note)));
        }
        // The health loop's pass: hook states and object health, written as it writes them.
        if let Err(e) = crate::engine::health::health_pass(ctx, &memory, &release).await {
            tracing::warn!("{:#}", anyhow::Error::new(e));
        }
        tokio::select! {
            _ = tokio::time::sleep(FINISH_POLL) => {}
            _ = tokio::signal::ctrl_c() => {
                return Err(CliError::new(ExitStatus::No, anyhow::anyhow!("interrupted")));
            }
        }
        let release = api.get(&args.name).await.map_err(|e| {
            CliError::new(
                ExitStatus::Unreachable,
                anyhow::Error::new(e).context("read the Release"),
            )
        })?;
        progress.following_up();
        result = sync_handler(ctx, &release, 0)
            .await
            .map_err(|e| CliError::new(ExitStatus::of(&e), e))?;
    }
}

/// `--force` needs a yes: a prompt on a terminal, `--yes` without one.
fn confirm_force(name: &str, interactive: bool) -> Result<(), CliError> {
    if !interactive {
        return Err(CliError::usage(
            "--force skips the server-side dry run; pass --yes to confirm when not on a terminal",
        ));
    }
    let confirmed = dialoguer::Confirm::new()
        .with_prompt(format!(
            "Force a sync of {name}, skipping the server-side dry run?"
        ))
        .default(false)
        .interact()
        .map_err(|e| CliError::new(ExitStatus::Usage, e))?;
    if confirmed {
        Ok(())
    } else {
        Err(CliError::usage("not confirmed"))
    }
}

/// The exit status of an outcome (DESIGN.md section 4).
pub fn exit_for(reason: Option<Reason>, applied_status: ConditionStatus) -> ExitStatus {
    match reason {
        Some(Reason::SourceNotReady | Reason::ClusterNotReady) => ExitStatus::Unreachable,
        Some(Reason::Unsupported) => ExitStatus::Invalid,
        _ if applied_status == ConditionStatus::True => ExitStatus::Success,
        _ => ExitStatus::No,
    }
}

fn report_outcome(
    namespace: &str,
    name: &str,
    outcome: &ReconcileOutcome,
    printer: &mut Printer,
) -> CommandResult {
    let stage = outcome
        .attempt
        .failure
        .as_ref()
        .map(|f| format!(" (stage {})", f.stage))
        .unwrap_or_default();
    printer
        .line(&format!(
            "Release {namespace}/{name}: {}{stage}: {}",
            outcome.reason, outcome.message
        ))
        .map_err(io_error)?;
    Ok(exit_for(Some(outcome.reason), outcome.applied_status()))
}

fn report_status(release: &Release, printer: &mut Printer) -> CommandResult {
    let status = release.status.clone().unwrap_or_default();
    let Some(applied) = status.condition(crate::engine::api::condition_types::APPLIED) else {
        printer
            .line("the Release has not been reconciled")
            .map_err(io_error)?;
        return Ok(ExitStatus::No);
    };
    printer
        .line(&format!(
            "Applied={} {}: {}",
            applied.status, applied.reason, applied.message
        ))
        .map_err(io_error)?;
    let healthy = status.condition(crate::engine::api::condition_types::HEALTHY);
    if let Some(h) = healthy.filter(|_| applied.status == ConditionStatus::True) {
        printer
            .line(&format!("Healthy={} {}: {}", h.status, h.reason, h.message))
            .map_err(io_error)?;
        if h.reason == HealthyReason::Degraded {
            return Ok(ExitStatus::No);
        }
    }
    Ok(exit_for(applied.reason.parse().ok(), applied.status))
}

/// Watch the Release until a reconcile handled `request` and its render reached a result:
/// Applied (and, where health is assessed, Healthy or Degraded), a failure, or a hold nothing
/// will end by itself. Holds that end by themselves (a wave's health, a hook) are waited
/// through, each stage shown as it comes. At the deadline, says what it still waited for and
/// whether any daemon handled the request.
async fn wait_for_handling(
    api: &Api<Release>,
    name: &str,
    request: &SyncRequest,
    timeout: Duration,
    progress: &SyncProgress,
) -> Result<Release, CliError> {
    use futures::StreamExt;
    let requested: jiff::Timestamp = request.sync_requested_at.parse().map_err(|e| {
        CliError::new(
            ExitStatus::Invalid,
            anyhow::anyhow!("bad request time: {e}"),
        )
    })?;
    let handled = |r: &Release| handled_request(r, request, requested);
    let mut last: Option<Release> = None;
    let mut last_note = String::new();
    let stream = watcher::watch_object(api.clone(), name);
    let wait = async {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(Some(release)) => {
                    let state = if handled(&release) {
                        request_result(&release)
                    } else {
                        RequestState::Waiting("waiting for a reconcile to take the request".into())
                    };
                    last = Some(release.clone());
                    match state {
                        RequestState::Done => return Ok(release),
                        RequestState::Waiting(note) => {
                            if note != last_note {
                                progress.note(&note);
                                last_note = note;
                            }
                        }
                    }
                }
                Ok(None) => {
                    return Err(CliError::new(
                        ExitStatus::No,
                        anyhow::anyhow!("the Release was deleted"),
                    ));
                }
                Err(e) => tracing::debug!("watch: {e}"),
            }
        }
        Err(CliError::new(
            ExitStatus::No,
            anyhow::anyhow!("the watch ended"),
        ))
    };
    let outcome = tokio::select! {
        r = wait => Some(r),
        _ = tokio::time::sleep(timeout) => None,
        _ = tokio::signal::ctrl_c() => return Err(CliError::new(ExitStatus::No, anyhow::anyhow!("interrupted"))),
    };
    if let Some(result) = outcome {
        return result;
    }
    let release = match last {
        Some(r) => r,
        None => api.get(name).await.map_err(|e| {
            CliError::new(
                ExitStatus::Unreachable,
                anyhow::Error::new(e).context("read the Release"),
            )
        })?,
    };
    let waited = crate::engine::duration::human(timeout);
    let message = if handled(&release) {
        format!(
            "a reconcile took the request, but after {waited} the Release is still {}: {last_note}; the daemon carries on (`convoy status {name}` follows it)",
            match request_result(&release) {
                RequestState::Waiting(_) => "on its way",
                RequestState::Done => "done",
            }
        )
    } else {
        let lately = release
            .status
            .as_ref()
            .and_then(|s| s.reconciled_at.as_ref())
            .map(|t| {
                let ago = (jiff::Timestamp::now().as_second() - t.0.as_second()).max(0) as u64;
                format!(
                    "the last status write by a reconcile was {} ago",
                    crate::engine::duration::human(Duration::from_secs(ago))
                )
            })
            .unwrap_or_else(|| "no reconcile has ever written its status".into());
        format!(
            "no reconcile took the request within {waited} ({lately}): is `convoy daemon` running and does it own this Release's shard? (`convoy sync {name}` without --request reconciles here)"
        )
    };
    Err(CliError::new(ExitStatus::No, anyhow::anyhow!(message)))
}

/// Whether a reconcile took `request`: the handled markers in manual and forced syncs, or
/// any attempt that started after the request.
fn handled_request(r: &Release, request: &SyncRequest, requested: jiff::Timestamp) -> bool {
    let Some(s) = r.status.as_ref() else {
        return false;
    };
    if let Some(force) = &request.force_requested_at {
        return s.last_handled_force_sync_at.as_ref() == Some(force);
    }
    if s.last_handled_sync_at.as_ref() == Some(&request.sync_requested_at) {
        return true;
    }
    // Attempt times have whole seconds: an attempt in the request's second may have run
    // before the request was seen. One that still waits for /sync did not see it.
    let waiting_for_sync = s
        .condition(crate::engine::api::condition_types::APPLIED)
        .is_some_and(|c| c.reason == Reason::WaitingForSync);
    !waiting_for_sync
        && s.last_attempted
            .as_ref()
            .and_then(|a| a.attempted_at.as_ref())
            .is_some_and(|t| t.0.as_second() >= requested.as_second())
}

/// Where a taken request stands.
#[derive(Debug, PartialEq)]
enum RequestState {
    /// A result: applied (and judged, where health is assessed), failed, or held by
    /// something only a person ends.
    Done,
    /// On its way; the words say at which stage.
    Waiting(String),
}

/// The stage of a taken request from the Release's status (pure, for tests).
fn request_result(release: &Release) -> RequestState {
    use crate::engine::api::condition_types;
    let status = release.status.clone().unwrap_or_default();
    let Some(applied) = status.condition(condition_types::APPLIED) else {
        return RequestState::Waiting("waiting for the first reconcile".into());
    };
    // The hold's own words name the stage ("wave 1 waits for wave 0 to be healthy: …", the
    // hooks it waits for, the lower cluster wave).
    if let Ok(
        Reason::WaitingForWaveHealth | Reason::WaitingForHook | Reason::WaitingForClusterWave,
    ) = applied.reason.parse::<Reason>()
    {
        return RequestState::Waiting(applied.message.clone());
    }
    if applied.status != ConditionStatus::True {
        return RequestState::Done;
    }
    let hooks_running = status
        .condition(condition_types::LIFECYCLE_SUCCEEDED)
        .is_some_and(|c| c.reason == LifecycleReason::Running);
    if hooks_running {
        return RequestState::Waiting("applied; waiting for its hooks to finish".into());
    }
    match status.condition(condition_types::HEALTHY) {
        Some(h) if h.status == ConditionStatus::True || h.reason == HealthyReason::Degraded => {
            RequestState::Done
        }
        Some(h) if h.reason == HealthyReason::NotConfigured => RequestState::Done,
        Some(h) => RequestState::Waiting(format!("applied; health: {}", h.message)),
        None => RequestState::Waiting("applied; waiting for the first health assessment".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn release(status: serde_json::Value) -> Release {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "core.convoy.kumodo.io/v1alpha1", "kind": "Release",
            "metadata": {"name": "web", "namespace": "apps"},
            "spec": {"source": {"kind": "GitRepository", "name": "repo"}},
            "status": status,
        }))
        .unwrap()
    }

    fn cond(t: &str, s: &str, reason: &str, message: &str) -> serde_json::Value {
        serde_json::json!({"type": t, "status": s, "reason": reason, "message": message,
            "lastTransitionTime": "2026-01-01T00:00:00Z"})
    }

    #[test]
    fn a_request_is_done_when_applied_and_judged_or_failed() {
        let held = release(serde_json::json!({
            "conditions": [cond("Applied", "False", "WaitingForWaveHealth", "wave 1 waits for wave 0")],
            "waves": [{"wave": 0, "objects": 1, "applied": true}, {"wave": 1, "objects": 1, "applied": false}],
        }));
        assert_eq!(
            request_result(&held),
            RequestState::Waiting("wave 1 waits for wave 0".into())
        );
        let progressing = release(serde_json::json!({"conditions": [
            cond("Applied", "True", "Applied", "2 objects"),
            cond("Healthy", "False", "Progressing", "Deployment apps/web is Progressing"),
        ]}));
        assert_eq!(
            request_result(&progressing),
            RequestState::Waiting("applied; health: Deployment apps/web is Progressing".into())
        );
        let healthy = release(serde_json::json!({"conditions": [
            cond("Applied", "True", "Applied", "2 objects"),
            cond("Healthy", "True", "Healthy", "2 objects healthy"),
        ]}));
        assert_eq!(request_result(&healthy), RequestState::Done);
        let degraded = release(serde_json::json!({"conditions": [
            cond("Applied", "True", "Applied", "2 objects"),
            cond("Healthy", "False", "Degraded", "web is Degraded"),
        ]}));
        assert_eq!(request_result(&degraded), RequestState::Done);
        let failed = release(serde_json::json!({"conditions": [
            cond("Applied", "False", "Unappliable", "rejected"),
        ]}));
        assert_eq!(request_result(&failed), RequestState::Done);
    }
}

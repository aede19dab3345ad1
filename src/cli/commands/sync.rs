//! `convoy sync`: request a /sync and run one reconcile in-process with the daemon's field
//! managers, or (`--request`) only write the request and optionally wait for the daemon.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use kube::Api;
use kube::runtime::watcher;

use crate::cli::classify;
use crate::cli::exit::{CliError, CommandResult, ExitStatus};
use crate::cli::lookup;
use crate::cli::output::Printer;
use crate::cli::progress::SyncProgress;
use crate::cli::{GlobalArgs, io_error};
use crate::engine::api::ConditionStatus;
use crate::engine::api::{FailureStage, HealthyReason, LifecycleReason, Reason, Release};
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
    #[arg(long, short = 'y', requires = "force")]
    pub yes: bool,
    /// Only write the /sync request for the daemon; do not reconcile here.
    #[arg(long)]
    pub request: bool,
    /// With --request: wait until the daemon handled the request.
    #[arg(long, requires = "request")]
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
        let release = release?;
        let status = report_status(&release, printer)?;
        let reason = release
            .status
            .as_ref()
            .and_then(|s| s.condition(crate::engine::api::condition_types::APPLIED))
            .and_then(|c| c.reason.parse().ok());
        return Ok(classify::missing_source(&conn.client, &release, reason, status).await);
    }

    let release = lookup::release(&conn, &namespace, &args.name).await?;
    let cache = Cache::new(args.cache_dir.clone().unwrap_or_else(Cache::default_root));
    let mut ctx = Context::new(conn.clone(), Arc::new(Coordinator::new(cache)));
    ctx.concurrency = args.concurrency;
    ctx.store = args.store.open(&conn.client);
    ctx.tenancy = Arc::new(args.tenancy.tenancy()?);
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
    let Finished {
        result,
        gave_up,
        health,
    } = result?;
    match result.outcome {
        Some(outcome) => {
            let mut status = report_outcome(&namespace, &args.name, &outcome, printer)?;
            status = classify::missing_source(&conn.client, &release, Some(outcome.reason), status)
                .await;
            // A kind the target does not serve is input naming what is not there.
            if status == ExitStatus::No && !outcome.unserved_kinds.is_empty() {
                status = ExitStatus::Invalid;
            }
            // The verdict of the health pass made after the last apply (where the sync
            // waited for health): a render that is not Healthy is not a yes.
            if let Some(h) = &health {
                printer
                    .line(&format!("Healthy={} {}: {}", h.status, h.reason, h.message))
                    .map_err(io_error)?;
                if status == ExitStatus::Success && h.status != ConditionStatus::True {
                    status = ExitStatus::No;
                }
            }
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
        // No reconcile and no deletion (found by a review: this arm said "being deleted").
        None if release.metadata.deletion_timestamp.is_none() => {
            let why = match result.fetching {
                Some(_) => "its source is still being fetched",
                None => "the pass made none",
            };
            printer
                .line(&format!(
                    "Release {namespace}/{} was not reconciled: {why}; run convoy sync again",
                    args.name
                ))
                .map_err(io_error)?;
            Ok(ExitStatus::No)
        }
        // A Release being deleted: the pass ran its deletion (finalize: pre-delete hooks,
        // the prune of what it applied, its inventory and renders, its finalizer), which
        // "nothing to sync" hid (found by a run of Argo CD's manifests).
        None => match api.get_opt(&args.name).await {
            Ok(None) => {
                printer
                    .line(&format!(
                        "Release {namespace}/{} was being deleted: its deletion ran here (what it applied is pruned but what asks to be kept, its inventory and renders removed) and it is gone",
                        args.name
                    ))
                    .map_err(io_error)?;
                Ok(ExitStatus::Success)
            }
            Ok(Some(_)) => {
                printer
                    .line(&format!(
                        "Release {namespace}/{} is being deleted: its deletion ran here and is not finished (its pre-delete hooks, or another finalizer); `convoy status {}` says what it waits for",
                        args.name, args.name
                    ))
                    .map_err(io_error)?;
                Ok(ExitStatus::No)
            }
            Err(e) => Err(CliError::new(
                if crate::engine::connect::is_unreachable(&e) {
                    ExitStatus::Unreachable
                } else {
                    ExitStatus::No
                },
                anyhow::Error::new(e).context(format!(
                    "Release {namespace}/{} was being deleted and its deletion ran here; cannot tell whether it is gone",
                    args.name
                )),
            )),
        },
    }
}

/// How often a sync that waits for its hooks and health looks again.
const FINISH_POLL: Duration = Duration::from_secs(1);

/// How a sync that finished what it started ended.
struct Finished {
    /// The last reconcile's result.
    result: crate::engine::reconcile::HandlerResult,
    /// What it still waited for when `--timeout` passed.
    gave_up: Option<String>,
    /// The Healthy condition of the health pass made after the last apply, when the sync
    /// waited for health: the verdict the exit code follows.
    health: Option<crate::engine::api::Condition>,
}

/// Without a daemon nobody else polls hooks or assesses health: a sync held by its hooks or a
/// wave's health, or whose hooks still run, polls them itself with the health loop's own pass
/// (same functions, same field managers, so a daemon running meanwhile sees the same values)
/// and reconciles again, until the render is applied with every hook finished (and Healthy,
/// where the Release has a healthAssessment), something fails, or `--timeout` passes. At the
/// deadline it returns the last result with what it still waited for.
///
/// Health is judged from the condition a pass made after the last apply returns, never from
/// the stored one: that may be the pass after an earlier wave's apply (health-loop.txt step 5
/// assesses the inventory as it is at the pass), which counted only that wave's objects.
async fn finish_what_it_started(
    ctx: &Context,
    api: &Api<Release>,
    args: &SyncArgs,
    first: crate::engine::reconcile::HandlerResult,
    progress: &SyncProgress,
) -> Result<Finished, CliError> {
    use crate::engine::api::condition_types;
    let deadline = tokio::time::Instant::now() + args.timeout;
    let memory = crate::engine::health::HealthMemory::default();
    let mut result = first;
    let mut waited = false;
    let mut last_note = String::new();
    let done = |result, health| {
        Ok(Finished {
            result,
            gave_up: None,
            health,
        })
    };
    loop {
        let Some(outcome) = &result.outcome else {
            return done(result, None);
        };
        let held = matches!(
            outcome.reason,
            Reason::WaitingForHook | Reason::WaitingForWaveHealth
        );
        let release = read_release(api, &args.name).await?;
        let status = release.status.clone().unwrap_or_default();
        let hooks_running = outcome.applied_render
            && status
                .condition(condition_types::LIFECYCLE_SUCCEEDED)
                .is_some_and(|c| c.reason == LifecycleReason::Running);
        // A sync that ran health passes itself (it waited) also waits for the verdict.
        let judge_health = outcome.applied_render
            && !hooks_running
            && waited
            && release.spec.health_assessment.is_some();
        if !held && !hooks_running && !judge_health {
            return done(result, None);
        }
        // The health loop's pass over the Release as this reconcile left it: hook states and
        // object health, written as the health loop writes them.
        let pass = match crate::engine::health::health_pass(ctx, &memory, &release).await {
            Ok(pass) => pass,
            Err(e) => {
                tracing::warn!("{:#}", anyhow::Error::new(e));
                None
            }
        };
        let requested_sync = pass.as_ref().is_some_and(|p| p.requested_sync);
        let note = if held {
            outcome.message.clone()
        } else if hooks_running {
            "waiting for hooks to finish".to_string()
        } else {
            match pass.and_then(|p| p.condition) {
                Some(c)
                    if c.status == ConditionStatus::True || c.reason == HealthyReason::Degraded =>
                {
                    if !requested_sync {
                        return done(result, Some(c));
                    }
                    // The pass's edge wrote a /sync (in Manual mode it always does). Left
                    // pending, it would let the next reconcile apply whatever the source
                    // holds then, unasked; this one takes it, as the daemon would.
                    let attempted = render_of(&result);
                    let again = sync_handler(ctx, &read_release(api, &args.name).await?, 0)
                        .await
                        .map_err(|e| CliError::new(ExitStatus::of(&e), e))?;
                    if render_of(&again) == attempted {
                        return done(again, Some(c));
                    }
                    // The source moved meanwhile: judge the render that now runs.
                    result = again;
                    continue;
                }
                _ => "waiting for the render to be healthy".to_string(),
            }
        };
        waited = true;
        if note != last_note {
            progress.note(&note);
            last_note = note;
        }
        if tokio::time::Instant::now() >= deadline {
            return Ok(Finished {
                result,
                gave_up: Some(last_note),
                health: None,
            });
        }
        tokio::select! {
            _ = tokio::time::sleep(FINISH_POLL) => {}
            _ = tokio::signal::ctrl_c() => {
                return Err(CliError::new(ExitStatus::No, anyhow::anyhow!("interrupted")));
            }
        }
        let release = read_release(api, &args.name).await?;
        progress.following_up();
        result = sync_handler(ctx, &release, 0)
            .await
            .map_err(|e| CliError::new(ExitStatus::of(&e), e))?;
    }
}

/// The render a reconcile attempted.
fn render_of(result: &crate::engine::reconcile::HandlerResult) -> Option<String> {
    result.outcome.as_ref()?.attempt.render_ref.clone()
}

/// The Release as the API server has it now.
async fn read_release(api: &Api<Release>, name: &str) -> Result<Release, CliError> {
    api.get(name).await.map_err(|e| {
        CliError::new(
            ExitStatus::Unreachable,
            anyhow::Error::new(e).context("read the Release"),
        )
    })
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

/// The exit status of a reconcile's end (DESIGN.md section 4), from its `Applied` reason and
/// status and `failure.stage` (status-and-conditions.txt "Where a reconcile can stop").
pub fn exit_for(
    reason: Option<Reason>,
    stage: Option<&str>,
    applied_status: ConditionStatus,
) -> ExitStatus {
    match reason {
        Some(Reason::SourceNotReady | Reason::ClusterNotReady) => ExitStatus::Unreachable,
        Some(Reason::Unsupported) => ExitStatus::Invalid,
        // The source did not render (bad YAML, a chart's `fail`): the input is invalid, as
        // `convoy render` and `convoy diff` say of the same source. ValuesNotReady stays a
        // "no": the spec retries it, and its read may have failed on the way.
        Some(Reason::DeployFailed) if stage == Some(FailureStage::Rendering.as_str()) => {
            ExitStatus::Invalid
        }
        // Applied=True, but with the last healthy render instead of the one asked for.
        Some(Reason::RolledBack) => ExitStatus::No,
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
    let stage = outcome.attempt.failure.as_ref().map(|f| f.stage.as_str());
    Ok(exit_for(
        Some(outcome.reason),
        stage,
        outcome.applied_status(),
    ))
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
    let stage = status
        .last_attempted
        .as_ref()
        .and_then(|a| a.failure.as_ref())
        .map(|f| f.stage.as_str());
    Ok(exit_for(applied.reason.parse().ok(), stage, applied.status))
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
    let namespace = release.metadata.namespace.clone().unwrap_or_default();
    let status_command = crate::cli::lookup::suggest(&format!("status {name}"), &namespace);
    let sync_command = crate::cli::lookup::suggest(&format!("sync {name}"), &namespace);
    let message = if handled(&release) {
        format!(
            "a reconcile took the request, but after {waited} the Release is still {}: {last_note}; the daemon carries on ({status_command} follows it)",
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
            "no reconcile took the request within {waited} ({lately}): is `convoy daemon` running and does it own this Release's shard? ({sync_command} without --request reconciles here)"
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
    fn a_rolled_back_render_answers_no_and_a_render_failure_is_invalid_input() {
        use ConditionStatus::{False, True};
        // Applied=True, but with the last healthy render: not what was asked for.
        assert_eq!(
            exit_for(Some(Reason::RolledBack), None, True),
            ExitStatus::No
        );
        assert_eq!(
            exit_for(Some(Reason::Applied), None, True),
            ExitStatus::Success
        );
        // Bad YAML, a chart's `fail`: stage Rendering, as `convoy render` says it.
        let rendering = Some(FailureStage::Rendering.as_str());
        assert_eq!(
            exit_for(Some(Reason::DeployFailed), rendering, False),
            ExitStatus::Invalid
        );
        // A server that refused the apply of a render that is fine as input: "no".
        let syncing = Some(FailureStage::Syncing.as_str());
        assert_eq!(
            exit_for(Some(Reason::DeployFailed), syncing, False),
            ExitStatus::No
        );
        assert_eq!(
            exit_for(
                Some(Reason::SourceNotReady),
                Some("SourceResolution"),
                False
            ),
            ExitStatus::Unreachable
        );
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

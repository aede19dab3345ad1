//! `convoy diff`: what a sync would change on the cluster, from server-side dry runs under
//! the controller's field manager, each change labelled render change or drift.

use std::path::PathBuf;
use std::sync::Arc;

use anstyle::{AnsiColor, Style};
use clap::Args;

use crate::cli::classify;
use crate::cli::commands::render::render_input;
use crate::cli::exit::{CliError, CommandResult, ExitStatus};
use crate::cli::output::{OutputFormat, Printer, visible};
use crate::cli::release_input::load;
use crate::cli::table::plain;
use crate::cli::{GlobalArgs, io_error};
use crate::engine::api::Release;
use crate::engine::apply::Applier;
use crate::engine::cluster::resolve_target;
use crate::engine::digest_key::KeyCell;
use crate::engine::drift::text::{Tag, hunks};
use crate::engine::drift::{Action, DiffReport, diff_objects, render_desired};
use crate::engine::inventory::InventoryHandle;
use crate::engine::render::ClusterInfo;
use crate::engine::runtime::Context;
use crate::engine::source::{Cache, Coordinator};
use crate::engine::store::DEFAULT_STORE_NAMESPACE;

/// Show what a sync would change: a diff per object, drift named by field manager.
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
convoy diff web -n apps                                   # the Release on the cluster\n  \
convoy diff -f release.yaml --source-dir ./checkout       # a local change, before you push\n  \
convoy diff web -n apps -o json | jq .summary\n\n\
Exit status: 0 when nothing would change, 1 when something would, 3 when the cluster or source\n\
cannot be reached, 4 when the Release cannot be rendered.")]
pub struct DiffArgs {
    /// The Release's name (optional with -f when the files hold one Release).
    #[arg(add = clap_complete::engine::ArgValueCandidates::new(crate::cli::complete::release_names))]
    pub name: Option<String>,
    /// Read the Release, its sources and value layers from these files.
    #[arg(short = 'f', long = "filename", value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// Use this local directory as the source's root.
    #[arg(long, value_name = "DIR")]
    pub source_dir: Option<PathBuf>,
    /// Dry runs in flight.
    #[arg(long, default_value_t = 16)]
    pub concurrency: usize,
    /// Lines of context around each change (like diff -U).
    #[arg(
        short = 'U',
        long = "unified",
        value_name = "LINES",
        default_value_t = 3
    )]
    pub unified: usize,
    /// Where fetched sources are cached (default: $CONVOY_CACHE_DIR or ~/.cache/convoy).
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    #[command(flatten)]
    pub store: crate::cli::store_args::StoreArgs,
    #[command(flatten)]
    pub tenancy: crate::cli::tenancy_args::TenancyArgs,
}

pub async fn run(global: &GlobalArgs, args: DiffArgs, printer: &mut Printer) -> CommandResult {
    let input = load(global, args.name.as_deref(), &args.files).await?;
    let cache = Cache::new(args.cache_dir.clone().unwrap_or_else(Cache::default_root));
    // A Release on the cluster is compared with what the controller would apply now (the
    // drift loop's renderDesired: a pin, the last healthy render after a rollback, else the
    // source; it resolves the target too); local files and a local source directory with the
    // source render.
    let (render_ref, objects, target, home) = match (&input.home, &args.source_dir) {
        (Some(home), None) => {
            let mut ctx = Context::new(home.clone(), Arc::new(Coordinator::new(cache)));
            ctx.store = args.store.open(&home.client);
            ctx.tenancy = Arc::new(args.tenancy.tenancy()?);
            ctx.digest_key = Some(Arc::new(KeyCell::new(
                home.client.clone(),
                DEFAULT_STORE_NAMESPACE,
            )));
            let desired = match render_desired(&ctx, &input.release).await {
                Ok(desired) => desired,
                Err(outcome) => {
                    let mut e = desired_failure(&input.release, &outcome);
                    let reason = Some(outcome.reason);
                    e.status =
                        classify::missing_source(&home.client, &input.release, reason, e.status)
                            .await;
                    return Err(e);
                }
            };
            (
                desired.render_ref,
                desired.objects,
                desired.target,
                home.clone(),
            )
        }
        _ => {
            let home = match &input.home {
                Some(h) => h.clone(),
                None => global.connect().await?,
            };
            let target = resolve_target(
                &home,
                &args.tenancy.tenancy()?,
                &input.release,
                Default::default(),
            )
            .await
            .map_err(|e| {
                CliError::new(
                    ExitStatus::Unreachable,
                    anyhow::Error::new(e).context("resolve the target cluster"),
                )
            })?;
            let cluster = ClusterInfo::discover(&target.conn.client).await.ok();
            let rendered = render_input(
                &input,
                cache,
                args.source_dir.as_deref(),
                cluster.as_ref(),
                &args.tenancy.schema_refs(),
            )
            .await?;
            (rendered.render_ref, rendered.objects, target, home)
        }
    };
    // What the Release of this namespace and name last applied, as a sync would read it:
    // without it, objects that left the local files would not show as to prune, and objects
    // the Release owns would show as adopted. A Release only in the files has none.
    let recorded = input.home.is_some() || on_cluster(&home, &input.release).await;
    let inventory = if recorded {
        InventoryHandle::for_release(home.client.clone(), &input.release)
            .get()
            .await
            .ok()
            .flatten()
    } else {
        None
    };
    let applier = Applier::new(target.conn.client.clone(), args.concurrency);
    // The installation's digest key, when this user may read it: Secret values are then
    // shown as keyed digests; otherwise only whether each changed.
    let digest_key = match &input.home {
        Some(h) => {
            KeyCell::new(h.client.clone(), DEFAULT_STORE_NAMESPACE)
                .get()
                .await
        }
        None => None,
    };
    let report = diff_objects(
        &applier,
        &input.release,
        &objects,
        inventory.as_ref(),
        args.concurrency,
        digest_key.as_ref(),
        crate::engine::apply::Freshness::Latest,
    )
    .await
    .map_err(|e| {
        CliError::new(
            ExitStatus::Unreachable,
            anyhow::Error::new(e).context(format!("diff against {}", target.conn.server)),
        )
    })?;

    match printer.format {
        OutputFormat::Json => {
            let value = serde_json::json!({
                "renderRef": render_ref,
                "summary": report.summary(),
                "objects": report.objects,
                "rejections": serde_json::to_value(&report).map(|v| v["rejections"].clone()).unwrap_or_default(),
            });
            let text = serde_json::to_string_pretty(&value)
                .map_err(|e| CliError::new(ExitStatus::Invalid, e))?;
            printer.print_data(&(text + "\n")).map_err(io_error)?;
        }
        _ => {
            let text = render_report(&report, printer.color, args.unified);
            printer.print_styled(&text).map_err(io_error)?;
        }
    }
    if report.in_sync() {
        return Ok(ExitStatus::Success);
    }
    // A rejection of a kind the target does not serve is invalid input (DESIGN.md section
    // 4, "unknown kind"), not drift.
    let rejected: Vec<_> = report.rejections.iter().map(|r| &r.key).collect();
    let rejected: Vec<_> = objects
        .iter()
        .filter(|o| rejected.contains(&&o.key()))
        .cloned()
        .collect();
    if !rejected.is_empty()
        && !classify::unserved_kinds(&target.conn.client, &rejected)
            .await
            .is_empty()
    {
        return Ok(ExitStatus::Invalid);
    }
    Ok(ExitStatus::No)
}

/// Whether the cluster holds a Release of `release`'s namespace and name (one read from -f
/// files). A read this user may not make counts as none: the diff then stays a diff of the
/// files alone, as it is for a Release that is not on the cluster yet.
async fn on_cluster(home: &crate::engine::connect::Connection, release: &Release) -> bool {
    let (Some(namespace), Some(name)) = (&release.metadata.namespace, &release.metadata.name)
    else {
        return false;
    };
    let api: kube::Api<Release> = kube::Api::namespaced(home.client.clone(), namespace);
    matches!(api.get_metadata_opt(name).await, Ok(Some(_)))
}

/// A render that stopped (as the controller's would): unreachable sources and clusters exit 3,
/// everything else 4, naming the stage and the reason.
fn desired_failure(
    release: &crate::engine::api::Release,
    outcome: &crate::engine::reconcile::ReconcileOutcome,
) -> CliError {
    use crate::engine::api::Reason;
    let status = match outcome.reason {
        Reason::SourceNotReady | Reason::ClusterNotReady => ExitStatus::Unreachable,
        _ => ExitStatus::Invalid,
    };
    let stage = outcome
        .attempt
        .failure
        .as_ref()
        .map(|f| f.stage.clone())
        .unwrap_or_default();
    CliError::new(
        status,
        anyhow::anyhow!(
            "cannot render Release {}/{} ({stage}, {}): {}",
            release.metadata.namespace.as_deref().unwrap_or_default(),
            release.metadata.name.as_deref().unwrap_or_default(),
            outcome.reason,
            outcome.message
        ),
    )
}

/// `text` made [`visible`] (it holds what the render and the cluster say), then styled.
fn paint(color: bool, style: Style, text: &str) -> String {
    let text = visible(text);
    if color {
        format!("{}{text}{}", style.render(), style.render_reset())
    } else {
        text.to_string()
    }
}

/// The diff as text: one section per object that would change, then the summary.
pub fn render_report(report: &DiffReport, color: bool, context: usize) -> String {
    let red = AnsiColor::Red.on_default();
    let green = AnsiColor::Green.on_default();
    let cyan = AnsiColor::Cyan.on_default();
    let yellow = AnsiColor::Yellow.on_default();
    let bold = Style::new().bold();
    let mut out = String::new();
    for object in &report.objects {
        let (mark, style) = match object.action {
            Action::Unchanged if object.noteworthy() => ("=", Style::new()),
            Action::Unchanged => continue,
            Action::Create => ("+", green),
            Action::Prune => ("-", red),
            Action::Change => ("~", yellow),
        };
        out.push_str(&paint(
            color,
            style.bold(),
            &format!("{mark} {} ({})", object.key, object.describe()),
        ));
        out.push('\n');
        if object.secret && !object.secret_keys.is_empty() {
            let keys: Vec<String> = object
                .secret_keys
                .iter()
                .map(|k| format!("{} {}", k.key, k.change.as_str()))
                .collect();
            out.push_str(&visible(&format!("  keys: {}\n", keys.join(", "))));
        }
        if object.secret && object.action == Action::Change {
            for change in &object.changes {
                let show = |v: &Option<serde_json::Value>| {
                    v.as_ref()
                        .map(|v| {
                            v.as_str()
                                .map(str::to_string)
                                .unwrap_or_else(|| v.to_string())
                        })
                        .unwrap_or_else(|| "(none)".into())
                };
                out.push_str(&visible(&format!(
                    "  {}: {} -> {} ({})\n",
                    crate::engine::drift::fields::path_string(&change.path),
                    show(&change.live),
                    show(&change.desired),
                    change.cause
                )));
            }
        }
        for hunk in hunks(
            object.live.as_ref(),
            object.desired.as_ref(),
            &object.changes,
            context,
        ) {
            out.push_str(&paint(
                color,
                cyan,
                &format!("  {} {}", hunk.header, hunk.labels.join("; ")),
            ));
            out.push('\n');
            for (tag, line) in hunk.lines {
                let text = match tag {
                    Tag::Context => visible(&format!("   {line}")).into_owned(),
                    Tag::Removed => paint(color, red, &format!("  -{line}")),
                    Tag::Added => paint(color, green, &format!("  +{line}")),
                };
                out.push_str(&text);
                out.push('\n');
            }
        }
    }
    for rejection in &report.rejections {
        out.push_str(&paint(
            color,
            red.bold(),
            &format!("! {} (rejected by the dry run)", rejection.key),
        ));
        out.push('\n');
        out.push_str(&visible(&format!("  {}\n", rejection.message)));
    }
    if !out.is_empty() {
        out.push('\n');
    }
    let s = report.summary();
    let row = vec![
        s.create.to_string(),
        s.change.to_string(),
        s.prune.to_string(),
        s.unchanged.to_string(),
        s.drifted.to_string(),
        s.rejected.to_string(),
    ];
    let table = plain(
        &[
            "to create",
            "to change",
            "to prune",
            "unchanged",
            "drifted",
            "rejected",
        ],
        &[row],
    );
    out.push_str(&paint(
        color,
        bold,
        table.lines().next().unwrap_or_default(),
    ));
    out.push('\n');
    for line in table.lines().skip(1) {
        out.push_str(line);
        out.push('\n');
    }
    out
}

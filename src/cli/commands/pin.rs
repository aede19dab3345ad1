//! `convoy pin` and `convoy unpin`: run a stored render instead of the source's, and stop.

use clap::Args;
use kube::Api;

use crate::cli::exit::{CliError, CommandResult, ExitStatus};
use crate::cli::lookup::suggest;
use crate::cli::output::Printer;
use crate::cli::store_args::StoreArgs;
use crate::cli::{GlobalArgs, io_error};
use crate::engine::api::Release;
use crate::engine::connect::is_unreachable;
use crate::engine::reconcile::assemble::pin_status;
use crate::engine::render::render_ref::short;
use crate::engine::requests::set_pin;
use crate::engine::store::ReleaseId;

/// Pin a Release to a stored render (a full renderRef or a unique prefix of one).
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
convoy history web -n apps          # the stored renders\n  \
convoy pin web 3 -n apps            # run history entry 3 until unpinned\n  \
convoy pin web 3f9a1c2b -n apps     # run render 3f9a1c2b… until unpinned\n  \
convoy unpin web -n apps")]
pub struct PinArgs {
    /// The Release's name.
    #[arg(add = clap_complete::engine::ArgValueCandidates::new(crate::cli::complete::release_names))]
    pub name: String,
    /// The render to run: a history entry number (`convoy history` numbers them), its
    /// renderRef, or a prefix of at least 7 characters that names one stored render.
    #[arg(value_name = "N|RENDER", add = clap_complete::engine::ArgValueCandidates::new(crate::cli::complete::history_entries))]
    pub render_ref: String,
    #[command(flatten)]
    pub store: StoreArgs,
}

/// Clear a Release's pin: it runs its source's render again.
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  convoy unpin web -n apps")]
pub struct UnpinArgs {
    /// The Release's name.
    #[arg(add = clap_complete::engine::ArgValueCandidates::new(crate::cli::complete::release_names))]
    pub name: String,
}

pub async fn run_pin(global: &GlobalArgs, args: PinArgs, printer: &mut Printer) -> CommandResult {
    let release = super::status::fetch_release(global, &args.name).await?;
    let conn = global.connect().await?;
    let id = ReleaseId::of(&release);
    let Some(store) = args.store.open(&conn.client) else {
        return Err(CliError::usage(
            "pinning needs a render store; --render-store none has none",
        ));
    };
    let stored = store.list_renders(&id).await.map_err(|e| {
        CliError::new(
            ExitStatus::Unreachable,
            anyhow::Error::new(e)
                .context(format!("cannot list the stored renders of Release {id}")),
        )
    })?;
    let wanted = args.render_ref.trim();
    // A number names a history entry (`convoy history` numbers them); a renderRef prefix
    // needs seven characters, so "5" is never read as one.
    if wanted.len() < MIN_PREFIX {
        let Ok(n) = wanted.parse::<usize>() else {
            return Err(CliError::usage(format!(
                "{wanted:?} is neither a history entry number nor a renderRef prefix (at least {MIN_PREFIX} characters); {} lists both",
                history_command(&id)
            )));
        };
        let history = store.history(&id).await.map_err(|e| {
            CliError::new(
                ExitStatus::Unreachable,
                anyhow::Error::new(e).context(format!("cannot read the history of Release {id}")),
            )
        })?;
        let Some(entry) = n.checked_sub(1).and_then(|i| history.get(i)) else {
            return Err(CliError::new(
                ExitStatus::Invalid,
                anyhow::anyhow!(
                    "Release {id} has no history entry {n} (it has {}); {} lists them",
                    history.len(),
                    history_command(&id)
                ),
            ));
        };
        return pin_to(&conn, &id, &args.name, &entry.render_ref, Some(n), printer).await;
    }
    let matches: Vec<&String> = stored.iter().filter(|r| r.starts_with(wanted)).collect();
    let render_ref = match matches.as_slice() {
        [one] => (*one).clone(),
        [] => {
            return Err(CliError::new(
                ExitStatus::Invalid,
                anyhow::anyhow!(
                    "render {} is not in the render store of Release {id}; {} lists the stored renders",
                    args.render_ref,
                    history_command(&id)
                ),
            ));
        }
        many => {
            return Err(CliError::new(
                ExitStatus::Invalid,
                anyhow::anyhow!(
                    "render prefix {} names {} stored renders of Release {id}; give more of it",
                    args.render_ref,
                    many.len()
                ),
            ));
        }
    };
    pin_to(&conn, &id, &args.name, &render_ref, None, printer).await
}

/// `convoy history NAME -n NS`, as the hints suggest it.
fn history_command(id: &ReleaseId) -> String {
    suggest(&format!("history {}", id.name), &id.namespace)
}

/// The shortest renderRef prefix `convoy pin` takes (a shorter argument is an entry number).
const MIN_PREFIX: usize = 7;

async fn pin_to(
    conn: &crate::engine::connect::Connection,
    id: &ReleaseId,
    name: &str,
    render_ref: &str,
    entry: Option<usize>,
    printer: &mut Printer,
) -> CommandResult {
    let api: Api<Release> = Api::namespaced(conn.client.clone(), &id.namespace);
    set_pin(&api, name, Some(render_ref))
        .await
        .map_err(|e| request_error(conn, e, id))?;
    let which = match entry {
        Some(n) => format!("render {} (history entry {n})", short(render_ref)),
        None => format!("render {}", short(render_ref)),
    };
    printer
        .line(&format!(
            "Release {id} pinned to {which}; the controller applies it on its next reconcile (or run {})",
            suggest(&format!("sync {name}"), &id.namespace)
        ))
        .map_err(io_error)?;
    Ok(ExitStatus::Success)
}

pub async fn run_unpin(
    global: &GlobalArgs,
    args: UnpinArgs,
    printer: &mut Printer,
) -> CommandResult {
    let release = super::status::fetch_release(global, &args.name).await?;
    let conn = global.connect().await?;
    let id = ReleaseId::of(&release);
    // As `kubectl label … key-` of an absent key says "not labeled": nothing to clear is
    // said as such, and no write (nor sync request) is made for it.
    if pin_status(&release).is_none() {
        printer
            .line(&format!("Release {id} was not pinned; nothing changed"))
            .map_err(io_error)?;
        return Ok(ExitStatus::Success);
    }
    let api: Api<Release> = Api::namespaced(conn.client.clone(), &id.namespace);
    set_pin(&api, &args.name, None)
        .await
        .map_err(|e| request_error(&conn, e, &id))?;
    printer
        .line(&format!(
            "Release {id} unpinned; it runs its source's render again from the next reconcile"
        ))
        .map_err(io_error)?;
    Ok(ExitStatus::Success)
}

fn request_error(
    conn: &crate::engine::connect::Connection,
    e: kube::Error,
    id: &ReleaseId,
) -> CliError {
    if is_unreachable(&e) {
        CliError::new(ExitStatus::Unreachable, conn.unreachable(e))
    } else {
        CliError::new(
            ExitStatus::Invalid,
            anyhow::Error::new(e).context(format!("cannot update the pin of Release {id}")),
        )
    }
}

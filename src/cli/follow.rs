//! `--watch` on commands that explain one Release (`status`, `history`): show it again each
//! time the Release changes, until Ctrl-C, as `kubectl get -w` follows objects.

use futures::StreamExt;
use kube::Api;
use kube::runtime::{WatchStreamExt, watcher};

use crate::cli::exit::{CliError, CommandResult, ExitStatus};
use crate::cli::io_error;
use crate::cli::output::Printer;
use crate::engine::api::Release;
use crate::engine::connect::Connection;

/// Watch Release `namespace/name` and print `show`'s text for it whenever that text changes
/// (`shown` is what is on the screen already). On a terminal the screen is redrawn; otherwise
/// each new text follows a blank line, so a log of the changes stays readable.
pub async fn follow<F, Fut>(
    conn: &Connection,
    namespace: &str,
    name: &str,
    printer: &mut Printer,
    mut shown: String,
    mut show: F,
) -> CommandResult
where
    F: FnMut(Release) -> Fut,
    Fut: std::future::Future<Output = Result<String, CliError>>,
{
    let api: Api<Release> = Api::namespaced(conn.watch_client.clone(), namespace);
    let stream = watcher::watch_object(api, name).default_backoff();
    let mut stream = std::pin::pin!(stream);
    loop {
        let event = tokio::select! {
            event = stream.next() => event,
            _ = tokio::signal::ctrl_c() => return Ok(ExitStatus::Success),
        };
        let release = match event {
            Some(Ok(Some(release))) => release,
            Some(Ok(None)) => {
                return Err(CliError::new(
                    ExitStatus::No,
                    anyhow::anyhow!("Release {namespace}/{name} was deleted"),
                ));
            }
            Some(Err(e)) => {
                tracing::warn!(
                    "watching Release {namespace}/{name}: {}",
                    crate::engine::error::chain(&e)
                );
                continue;
            }
            None => return Ok(ExitStatus::Success),
        };
        let text = show(release).await?;
        if text == shown {
            continue;
        }
        if printer.interactive {
            eprint!("\x1b[2J\x1b[H");
        } else {
            printer.line("").map_err(io_error)?;
        }
        printer.print(&text).map_err(io_error)?;
        shown = text;
    }
}

//! Progress of a sync on stderr: a spinner with the current step on a terminal, plain lines
//! otherwise (so logs and CI output stay readable).

use indicatif::{ProgressBar, ProgressStyle};

use crate::engine::explain::count;
use crate::engine::reconcile::{Progress, ProgressEvent};
use crate::engine::render::render_ref::short;

/// Shows reconcile progress.
pub struct SyncProgress {
    bar: Option<ProgressBar>,
}

impl SyncProgress {
    /// A spinner when `interactive`, plain lines otherwise.
    pub fn new(interactive: bool) -> Self {
        let bar = interactive.then(|| {
            let bar = ProgressBar::new_spinner();
            bar.set_style(
                ProgressStyle::with_template("{spinner} {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            bar.enable_steady_tick(std::time::Duration::from_millis(100));
            bar.set_message("rendering");
            bar
        });
        Self { bar }
    }

    /// A line of its own (a hold, a hook): a new spinner message on a terminal.
    pub fn note(&self, line: &str) {
        match &self.bar {
            Some(bar) => {
                bar.println(format!("  {line}"));
                bar.set_message(line.to_string());
            }
            None => eprintln!("{line}"),
        }
    }

    /// Stop the spinner (before the result is printed).
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

impl Progress for SyncProgress {
    fn event(&self, event: ProgressEvent) {
        let line = match event {
            ProgressEvent::Rendered {
                render_ref,
                objects,
            } => {
                format!(
                    "rendered {} ({})",
                    short(&render_ref),
                    count(objects, "object")
                )
            }
            ProgressEvent::DryRunPassed { objects } => {
                format!("dry run passed ({})", count(objects, "object"))
            }
            ProgressEvent::WaveStarted { wave, objects } => {
                format!("wave {wave}: applying {}", count(objects, "object"))
            }
            ProgressEvent::WaveApplied { wave, objects } => {
                format!("wave {wave}: applied {}", count(objects, "object"))
            }
            ProgressEvent::Pruned { objects } => format!("pruned {}", count(objects, "object")),
        };
        match &self.bar {
            Some(bar) => {
                bar.println(format!("  {line}"));
                bar.set_message(line);
            }
            None => eprintln!("{line}"),
        }
    }
}

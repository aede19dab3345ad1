//! Progress of a sync on stderr: a spinner with the current step on a terminal, plain lines
//! otherwise (so logs and CI output stay readable).

use indicatif::{ProgressBar, ProgressStyle};

use crate::engine::explain::count;
use crate::engine::render::render_ref::short;
use crate::engine::runtime::{Progress, ProgressEvent};

/// Shows reconcile progress.
pub struct SyncProgress {
    bar: Option<ProgressBar>,
    /// Lines shown so far, and whether the reconciles now are follow-ups of a sync that waits
    /// for its hooks or health: those repeat the render and the empty waves every poll, which
    /// says nothing new, so only lines not shown before and waves that apply something show.
    shown: std::sync::Mutex<(std::collections::HashSet<String>, bool)>,
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
        Self {
            bar,
            shown: Default::default(),
        }
    }

    /// From now on, reconciles follow up the first one: show only what is new.
    pub fn following_up(&self) {
        if let Ok(mut shown) = self.shown.lock() {
            shown.1 = true;
        }
    }

    /// A line of its own (a hold, a hook): a new spinner message on a terminal.
    pub fn note(&self, line: &str) {
        // A hook's name and message come from the render and its workload.
        let line = &*crate::cli::output::visible(line);
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
        let nothing_applied = matches!(
            event,
            ProgressEvent::WaveStarted { objects: 0, .. }
                | ProgressEvent::WaveApplied { objects: 0, .. }
                | ProgressEvent::Pruned { objects: 0 }
                | ProgressEvent::DryRunPassed { .. }
        );
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
            // Objects applied before as rendered now are not sent again.
            ProgressEvent::WaveStarted { wave, objects: 0 } => {
                format!("wave {wave}: nothing changed")
            }
            ProgressEvent::WaveStarted { wave, objects } => {
                format!("wave {wave}: applying {}", count(objects, "object"))
            }
            ProgressEvent::WaveApplied { wave, objects } => {
                format!("wave {wave}: applied {}", count(objects, "object"))
            }
            ProgressEvent::Pruned { objects } => format!("pruned {}", count(objects, "object")),
        };
        if let Ok(mut shown) = self.shown.lock() {
            let following_up = shown.1;
            let new = shown.0.insert(line.clone());
            if following_up && (nothing_applied || !new) {
                return;
            }
        }
        match &self.bar {
            Some(bar) => {
                bar.println(format!("  {line}"));
                bar.set_message(line);
            }
            None => eprintln!("{line}"),
        }
    }
}

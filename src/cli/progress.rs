//! The sync progress bar: `indicatif` bars on stderr, drawn only when
//! stderr is a terminal, so piped and `--format json` output stays clean
//! (stdout never carries progress).

use std::io::IsTerminal as _;
use std::sync::{Arc, Mutex};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::sync::{NoProgress, Progress};

/// The progress hooks for this process: bars on a terminal, nothing
/// otherwise.
pub fn for_stderr() -> Arc<dyn Progress> {
    if std::io::stderr().is_terminal() {
        Arc::new(TerminalProgress::default())
    } else {
        Arc::new(NoProgress)
    }
}

/// One bar at a time: the push's, then the download's (which replaces it).
#[derive(Default)]
pub struct TerminalProgress {
    bar: Mutex<Option<ProgressBar>>,
}

fn style(template: &str) -> ProgressStyle {
    // The templates are constants; a bad one would show as a plain bar.
    ProgressStyle::with_template(template)
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ")
}

impl TerminalProgress {
    fn show(&self, bar: ProgressBar) {
        let mut slot = self.bar.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(old) = slot.replace(bar) {
            old.finish_and_clear();
        }
    }

    fn inc(&self, n: u64) {
        if let Some(bar) = &*self.bar.lock().unwrap_or_else(|e| e.into_inner()) {
            bar.inc(n);
        }
    }

    fn clear(&self) {
        if let Some(bar) = self.bar.lock().unwrap_or_else(|e| e.into_inner()).take() {
            bar.finish_and_clear();
        }
    }
}

impl Progress for TerminalProgress {
    fn push_started(&self, total: u64) {
        if total == 0 {
            return;
        }
        let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr())
            .with_style(style(
                "pushing [{bar:30}] {pos}/{len} records ({per_sec}, {eta} left)",
            ));
        self.show(bar);
    }

    fn pushed(&self, done: u64) {
        self.inc(done);
    }

    fn pull_started(&self, total: Option<u64>) {
        let bar = match total {
            Some(len) => ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr())
                .with_style(style(
                    "pulling [{bar:30}] {bytes}/{total_bytes} ({bytes_per_sec})",
                )),
            None => ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr())
                .with_style(style("pulling {spinner} {bytes} ({bytes_per_sec})")),
        };
        self.show(bar);
    }

    fn pulled(&self, bytes: u64) {
        self.inc(bytes);
    }

    fn pull_finished(&self) {
        self.clear();
    }
}

impl Drop for TerminalProgress {
    /// A failed sync leaves no half-drawn bar above its error message.
    fn drop(&mut self) {
        self.clear();
    }
}

//! Live progress of a run: a progress bar on a terminal, one line per event
//! otherwise (CI logs), always on stderr so `--json` keeps stdout clean.

use std::io::Write;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::run::StepReport;
use crate::journal::run::StepState;
use crate::template::Redactor;

/// Cheap to clone; every clone reports to the same display.
#[derive(Clone)]
pub struct Progress {
    inner: Arc<Inner>,
}

struct Inner {
    bar: Option<ProgressBar>,
    started: Instant,
    redactor: Redactor,
    /// Serializes plain lines so two steps never interleave mid-line.
    lines: Mutex<()>,
    quiet: bool,
}

impl Progress {
    /// `terminal`: draw a bar (stderr is a terminal); `quiet`: print nothing but notes.
    pub fn new(terminal: bool, quiet: bool, redactor: Redactor) -> Self {
        let bar = (terminal && !quiet).then(|| {
            let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr());
            bar.set_style(
                ProgressStyle::with_template("{elapsed:>4} [{bar:30}] {pos}/{len} {wide_msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_bar())
                    .progress_chars("=> "),
            );
            bar
        });
        Progress {
            inner: Arc::new(Inner {
                bar,
                started: Instant::now(),
                redactor,
                lines: Mutex::new(()),
                quiet,
            }),
        }
    }

    pub fn redactor(&self) -> &Redactor {
        &self.inner.redactor
    }

    fn line(&self, text: &str) {
        let text = self.inner.redactor.redact(text);
        if let Some(bar) = &self.inner.bar {
            bar.println(text);
            return;
        }
        let elapsed = self.inner.started.elapsed().as_secs_f64();
        // One write per line: stderr is unbuffered, and a formatted write
        // would otherwise be a syscall per fragment.
        let line = format!("[{elapsed:>7.2}s] {text}\n");
        let _guard = self
            .inner
            .lines
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }

    pub fn run_started(&self, run_id: &str, plan: &str, steps: usize, resumed: bool) {
        if let Some(bar) = &self.inner.bar {
            bar.set_length(steps as u64);
        }
        if self.inner.quiet {
            return;
        }
        let verb = if resumed { "resuming" } else { "starting" };
        self.line(&format!(
            "{verb} run {run_id} of plan `{plan}` ({steps} steps)"
        ));
    }

    /// `attempt` is the journal's attempt number, `base` the last one an
    /// earlier leg of the run made (0 in a fresh run): a resumed step says
    /// "resumed", and only a retry in this run counts as another attempt.
    pub fn step_started(&self, id: &str, attempt: u32, base: u32) {
        if let Some(bar) = &self.inner.bar {
            bar.set_message(format!("running {id}"));
            return;
        }
        if !self.inner.quiet {
            let this_run = attempt.saturating_sub(base);
            let note = match (base > 0, this_run > 1) {
                (true, true) => format!(" (resumed, attempt {this_run})"),
                (true, false) => " (resumed)".to_owned(),
                (false, true) => format!(" (attempt {this_run})"),
                (false, false) => String::new(),
            };
            self.line(&format!("{id}: started{note}"));
        }
    }

    pub fn step_finished(&self, step: &StepReport) {
        if let Some(bar) = &self.inner.bar {
            bar.inc(1);
        }
        let seconds = Duration(step.duration_ms);
        let text = match step.state {
            StepState::Failed => format!(
                "{}: FAILED after {seconds}: {}",
                step.id,
                step.message.as_deref().unwrap_or("failed")
            ),
            StepState::Interrupted => format!("{}: interrupted after {seconds}", step.id),
            StepState::Skipped => format!(
                "{}: skipped ({})",
                step.id,
                step.message.as_deref().unwrap_or("")
            ),
            StepState::Reused => format!("{}: reused", step.id),
            other => format!("{}: {} in {seconds}", step.id, other.word()),
        };
        let important = matches!(step.state, StepState::Failed | StepState::Interrupted);
        if important || (!self.inner.quiet && self.inner.bar.is_none()) {
            self.line(&text);
        }
    }

    /// How far a long step has come (`simulate`'s games), on the terminal's
    /// progress display only: a log gets the step's end, not a line per 100 games.
    pub fn step_progress(&self, text: &str) {
        if let Some(bar) = &self.inner.bar {
            bar.set_message(self.inner.redactor.redact(text));
        }
    }

    /// Something the user must see (stopping, retrying), whatever the mode.
    pub fn note(&self, text: &str) {
        self.line(text);
    }

    pub fn finish(&self) {
        if let Some(bar) = &self.inner.bar {
            bar.finish_and_clear();
        }
    }
}

/// Milliseconds shown as seconds with sensible precision.
pub struct Duration(pub u64);

impl std::fmt::Display for Duration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        #[expect(clippy::cast_precision_loss, reason = "display only")]
        let secs = self.0 as f64 / 1000.0;
        if secs < 10.0 {
            write!(f, "{secs:.2}s")
        } else {
            write!(f, "{secs:.1}s")
        }
    }
}

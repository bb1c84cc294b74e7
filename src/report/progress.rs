//! Live progress of a run: on a terminal, a progress bar with a line per
//! running step; otherwise (CI logs) one line per event. Always on stderr, so
//! `--json` keeps stdout clean.
//!
//! What a step prints reaches the user in one of three ways
//! ([`StepOutput`]): the last lines of a failed step, once, in its `FAILED`
//! line (the default); every line as it comes (`--output stream`), each
//! prefixed with its step id; or nothing but where the log is.
//!
//! Streaming follows each running step's part of the run's one log
//! (`steps.log`: the launcher reports each piece of a step's output as it
//! writes it, `journal::step_log::LiveLog`), from a thread that polls the
//! logs of running steps and prints complete lines. When a
//! step ends its log is read to the end and a last partial line printed, so
//! every line comes before the step's own end line. Every line goes through
//! the redactor like everything else printed here.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Instant;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};

use super::paint;
use super::run::{StepReport, headline};
use crate::journal::run::StepState;
use crate::journal::step_log::{LiveLog, read_range};
use crate::template::Redactor;

/// What a run shows of the output of its steps (`plan run --output`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StepOutput {
    /// A failed step's last lines, once, in its `FAILED` line.
    #[default]
    Failures,
    /// Every line as the step prints it, prefixed with the step id.
    Stream,
    /// Nothing of the output; a failure names its log.
    None,
}

/// How a [`Progress`] shows a run.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProgressOptions {
    /// Draw a progress display (stderr is a terminal).
    pub terminal: bool,
    /// Print nothing but failures and notes.
    pub quiet: bool,
    pub output: StepOutput,
    /// Colour the step states and ids.
    pub color: bool,
}

/// Step lines shown at once under the bar; more would scroll a small
/// terminal, so the rest are counted on one more line.
const SHOWN_STEPS: usize = 12;

/// The widest a running step's line may be: the narrowest common terminal.
const LINE_WIDTH: usize = 79;

/// Streamed step ids are padded to the longest id up to this long.
const WIDEST_PADDED_ID: usize = 24;

/// How much of a log is read at once.
const READ_CHUNK: usize = 256 * 1024;

/// How often the logs of running steps are read for `--output stream`.
const FOLLOW_EVERY: std::time::Duration = std::time::Duration::from_millis(50);

/// A line longer than this without a newline is printed as it is, so a
/// step printing a progress bar of its own cannot grow memory without bound.
const LONGEST_LINE: usize = 64 * 1024;

/// Cheap to clone; every clone reports to the same display.
#[derive(Clone)]
pub struct Progress {
    inner: Arc<Inner>,
}

struct Inner {
    display: Option<Display>,
    started: Instant,
    redactor: Redactor,
    /// Serializes plain lines so two steps never interleave mid-line.
    lines: Mutex<()>,
    options: ProgressOptions,
    /// The logs followed for `--output stream`, by step id.
    follow: Mutex<BTreeMap<String, Follow>>,
    /// The width streamed step ids are padded to, so the `|` of every line
    /// lines up (as `docker compose up` does).
    id_width: AtomicUsize,
    closed: AtomicBool,
}

/// The terminal's display: the run's bar, then a line per running step.
///
/// One bar whose last field draws the running steps, each with its own
/// time, from the list below at every redraw: nothing to add or remove per
/// step, so nothing is left behind when steps end in quick succession.
struct Display {
    bar: ProgressBar,
    /// Running steps in the order they started; the first [`SHOWN_STEPS`]
    /// have a line.
    running: Arc<Mutex<Vec<Running>>>,
}

#[derive(Clone)]
struct Running {
    id: String,
    since: Instant,
    message: String,
}

/// A log being followed: how far it was read, and a line not yet complete.
struct Follow {
    log: Arc<LiveLog>,
    offset: u64,
    partial: Vec<u8>,
}

impl Progress {
    /// `terminal`: draw a progress display (stderr is a terminal); `quiet`:
    /// print nothing but failures and notes.
    pub fn new(terminal: bool, quiet: bool, redactor: Redactor) -> Self {
        Self::with_options(
            ProgressOptions {
                terminal,
                quiet,
                ..ProgressOptions::default()
            },
            redactor,
        )
    }

    pub fn with_options(options: ProgressOptions, redactor: Redactor) -> Self {
        let display = (options.terminal && !options.quiet).then(|| Display::new(options.color));
        let progress = Progress {
            inner: Arc::new(Inner {
                display,
                started: Instant::now(),
                redactor,
                lines: Mutex::new(()),
                options,
                follow: Mutex::new(BTreeMap::new()),
                id_width: AtomicUsize::new(0),
                closed: AtomicBool::new(false),
            }),
        };
        if options.output == StepOutput::Stream {
            let inner = Arc::downgrade(&progress.inner);
            std::thread::spawn(move || follow_logs(&inner));
        }
        progress
    }

    /// Hides the terminal's display while a question is asked (`true`),
    /// and shows it again after (`false`), so the bar's redraws do not
    /// write over the question or the answer being typed.
    pub fn pause_display(&self, paused: bool) {
        if let Some(display) = &self.inner.display {
            display.bar.set_draw_target(if paused {
                ProgressDrawTarget::hidden()
            } else {
                ProgressDrawTarget::stderr()
            });
        }
    }

    pub fn redactor(&self) -> &Redactor {
        &self.inner.redactor
    }

    fn line(&self, text: &str) {
        self.inner.line(text);
    }

    pub fn run_started(&self, run_id: &str, plan: &str, steps: usize, resumed: bool) {
        if let Some(display) = &self.inner.display {
            display.bar.set_length(steps as u64);
        }
        if self.inner.options.quiet {
            return;
        }
        let verb = if resumed { "resuming" } else { "starting" };
        self.line(&format!(
            "{verb} run {run_id} of plan `{plan}` ({})",
            super::plural(steps, "step")
        ));
    }

    /// The ids of the steps that may run, so streamed lines line up; a
    /// very long id (a matrix cell's) is not padded to.
    pub fn align_ids<'a>(&self, ids: impl IntoIterator<Item = &'a str>) {
        let width = ids
            .into_iter()
            .map(|id| id.chars().count())
            .filter(|&w| w <= WIDEST_PADDED_ID)
            .max()
            .unwrap_or(0);
        self.inner.id_width.store(width, Ordering::SeqCst);
    }

    /// An attempt of step `id` began; `log` is the file it prints to, which
    /// `--output stream` follows. `attempt` is the journal's attempt number,
    /// `base` the last one an earlier leg of the run made (0 in a fresh
    /// run): a resumed step says "resumed", and only a retry in this run
    /// counts as another attempt.
    pub fn step_started(&self, id: &str, attempt: u32, base: u32, log: Option<Arc<LiveLog>>) {
        if self.inner.options.output == StepOutput::Stream
            && let Some(log) = log
        {
            self.inner
                .follow
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .entry(id.to_owned())
                .or_insert(Follow {
                    log,
                    offset: 0,
                    partial: Vec::new(),
                });
        }
        let this_run = attempt.saturating_sub(base);
        let note = match (base > 0, this_run > 1) {
            (true, true) => format!("(resumed, attempt {this_run})"),
            (true, false) => "(resumed)".to_owned(),
            (false, true) => format!("(attempt {this_run})"),
            (false, false) => String::new(),
        };
        if let Some(display) = &self.inner.display {
            display.started(id, note);
            return;
        }
        if !self.inner.options.quiet {
            let note = if note.is_empty() {
                note
            } else {
                format!(" {note}")
            };
            self.line(&format!("{id}: started{note}"));
        }
    }

    /// Attempt `attempt` of step `id` is about to begin. A retry's log
    /// starts empty, so what the attempt before it printed is read to the
    /// end now, and the new one is followed from the top.
    pub fn attempt_begins(&self, id: &str, attempt: u32) {
        if attempt <= 1 {
            return;
        }
        self.inner.drain(id, true);
        if let Some(log) = self
            .inner
            .follow
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_mut(id)
        {
            log.log.clear();
            log.offset = 0;
            log.partial.clear();
        }
    }

    /// Whether step output is streamed (`--output stream`): then a step's
    /// log is followed as it grows.
    pub fn streams(&self) -> bool {
        self.inner.options.output == StepOutput::Stream
    }

    pub fn step_finished(&self, step: &StepReport) {
        self.inner.drain(&step.id, true);
        self.inner
            .follow
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&step.id);
        if let Some(display) = &self.inner.display {
            display.finished(&step.id);
        }
        let text = self.finished_text(step);
        // A step that stopped the run or left it open says why at once,
        // whatever the display: it is what the person must act on.
        let important = matches!(
            step.state,
            StepState::Failed | StepState::Interrupted | StepState::Refused | StepState::Uncertain
        );
        if important || (!self.inner.options.quiet && self.inner.display.is_none()) {
            self.line(&text);
        }
    }

    /// The line that says how a step ended.
    fn finished_text(&self, step: &StepReport) -> String {
        let color = self.inner.options.color;
        let seconds = Duration(step.duration_ms);
        let id = &step.id;
        match step.state {
            StepState::Failed => {
                let message = step.message.as_deref().unwrap_or("failed");
                let message = match self.inner.options.output {
                    StepOutput::Failures => message.to_owned(),
                    // The lines were streamed already, or were not wanted.
                    StepOutput::Stream | StepOutput::None => headline(message, step.log.as_deref()),
                };
                format!(
                    "{id}: {} after {seconds}: {message}",
                    paint(color, "1;31", "FAILED")
                )
            }
            StepState::Interrupted => {
                format!(
                    "{id}: {} after {seconds}",
                    paint(color, "33", "interrupted")
                )
            }
            StepState::Skipped => format!(
                "{id}: {} ({})",
                paint(color, "33", "skipped"),
                step.message.as_deref().unwrap_or("")
            ),
            StepState::Refused | StepState::Uncertain => format!(
                "{id}: {} after {seconds}: {}",
                paint(
                    color,
                    "1;31",
                    if step.state == StepState::Refused {
                        "REFUSED"
                    } else {
                        "UNCERTAIN"
                    }
                ),
                step.message.as_deref().unwrap_or("")
            ),
            StepState::Reused => format!("{id}: {}", paint(color, "36", "reused")),
            StepState::Succeeded => {
                format!("{id}: {} in {seconds}", paint(color, "32", "succeeded"))
            }
            other => format!("{id}: {} in {seconds}", paint(color, "1;33", other.word())),
        }
    }

    /// How far a long step has come (`simulate`'s games), on the terminal's
    /// progress display only: a log gets the step's end, not a line per 100 games.
    pub fn step_progress(&self, id: &str, text: &str) {
        if let Some(display) = &self.inner.display {
            display.message(id, self.inner.redactor.redact(text));
        }
    }

    /// A step's warning (`StepIo::warn`): it did not fail the step, but
    /// the user must see it, whatever the mode.
    pub fn step_warning(&self, id: &str, text: &str) {
        let color = self.inner.options.color;
        self.note(&format!(
            "{id}: {} {text}",
            paint(color, "1;33", "warning:")
        ));
    }

    /// Something the user must see (stopping, retrying), whatever the mode.
    /// The lines steps printed before it come first ("attempt 1 failed"
    /// after that attempt's lines).
    pub fn note(&self, text: &str) {
        self.inner.drain_all(false);
        self.line(text);
    }

    /// The run is over: the last streamed lines are printed and the display
    /// is cleared.
    pub fn finish(&self) {
        self.inner.closed.store(true, Ordering::SeqCst);
        self.inner.drain_all(true);
        if let Some(display) = &self.inner.display {
            display.clear();
        }
    }
}

impl Inner {
    fn line(&self, text: &str) {
        let text = self.redactor.redact(text);
        if let Some(display) = &self.display {
            display.println(&text);
            return;
        }
        let elapsed = self.started.elapsed().as_secs_f64();
        // One write per line: stderr is unbuffered, and a formatted write
        // would otherwise be a syscall per fragment.
        let line = format!("[{elapsed:>7.2}s] {text}\n");
        let _guard = self.lines.lock().unwrap_or_else(PoisonError::into_inner);
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }

    /// [`Self::drain`] for every followed log.
    fn drain_all(&self, last: bool) {
        let ids: Vec<String> = self
            .follow
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .keys()
            .cloned()
            .collect();
        for id in ids {
            self.drain(&id, last);
        }
    }

    /// Prints the complete lines step `id` added to its log since the last
    /// look, and with `last` the line it has not ended too.
    fn drain(&self, id: &str, last: bool) {
        let mut follow = self.follow.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(log) = follow.get_mut(id) else {
            return;
        };
        let width = self.id_width.load(Ordering::SeqCst);
        let padded = format!("{id:<width$}");
        let prefix = format!("{} |", paint(self.options.color, id_color(id), &padded));
        let segments = log.log.segments();
        if !segments.is_empty()
            && let Ok(file) = File::open(&log.log.file)
        {
            // In chunks, so a step that writes a lot at once never has
            // all of it in memory; a poll takes a few, a step's end all.
            for _ in 0..if last { usize::MAX } else { 4 } {
                let Ok(chunk) = read_range(&file, &segments, log.offset, READ_CHUNK as u64) else {
                    break;
                };
                if chunk.is_empty() {
                    break;
                }
                log.offset += chunk.len() as u64;
                log.partial.extend_from_slice(&chunk);
                self.print_lines(&prefix, &mut log.partial);
            }
        }
        self.print_lines(&prefix, &mut log.partial);
        if last && !log.partial.is_empty() {
            self.print_line(&prefix, &std::mem::take(&mut log.partial));
        }
    }

    /// Prints the complete lines of `pending` and keeps the rest (a line
    /// longer than [`LONGEST_LINE`] is printed as it is).
    fn print_lines(&self, prefix: &str, pending: &mut Vec<u8>) {
        let mut start = 0;
        while let Some(end) = pending[start..].iter().position(|&b| b == b'\n') {
            self.print_line(prefix, &pending[start..start + end]);
            start += end + 1;
        }
        pending.drain(..start);
        if pending.len() > LONGEST_LINE {
            self.print_line(prefix, &std::mem::take(pending));
        }
    }

    fn print_line(&self, prefix: &str, bytes: &[u8]) {
        let line = line_text(bytes);
        if line.is_empty() {
            self.line(prefix);
        } else {
            self.line(&format!("{prefix} {line}"));
        }
    }
}

fn line_text(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    text.strip_suffix('\r').unwrap_or(&text).to_owned()
}

/// The follower thread: reads the logs of running steps until the run ends.
fn follow_logs(inner: &Weak<Inner>) {
    loop {
        std::thread::sleep(FOLLOW_EVERY);
        let Some(inner) = inner.upgrade() else {
            return;
        };
        if inner.closed.load(Ordering::SeqCst) {
            return;
        }
        inner.drain_all(false);
    }
}

/// A step id's colour in streamed lines: the same id, the same colour, so
/// the eye can follow one step through interleaved output.
fn id_color(id: &str) -> &'static str {
    const COLORS: [&str; 6] = ["36", "33", "32", "35", "34", "96"];
    let hash = id.bytes().fold(2_166_136_261_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(16_777_619)
    });
    COLORS[hash as usize % COLORS.len()]
}

impl Display {
    fn new(color: bool) -> Display {
        let running: Arc<Mutex<Vec<Running>>> = Arc::default();
        let steps = Arc::clone(&running);
        let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr());
        bar.set_style(
            ProgressStyle::with_template("{run_elapsed:>6} [{bar:30}] {pos}/{len}{running}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .with_key("run_elapsed", write_elapsed)
                .with_key(
                    "running",
                    move |_: &ProgressState, out: &mut dyn std::fmt::Write| {
                        write_running(
                            &steps.lock().unwrap_or_else(PoisonError::into_inner),
                            color,
                            out,
                        );
                    },
                )
                .progress_chars("=> "),
        );
        bar.enable_steady_tick(std::time::Duration::from_millis(100));
        Display { bar, running }
    }

    fn started(&self, id: &str, message: String) {
        let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(step) = running.iter_mut().find(|r| r.id == id) {
            // A retry: the same line, counting from the new attempt.
            step.since = Instant::now();
            step.message = message;
            return;
        }
        running.push(Running {
            id: id.to_owned(),
            since: Instant::now(),
            message,
        });
    }

    fn finished(&self, id: &str) {
        self.running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|r| r.id != id);
        self.bar.inc(1);
    }

    fn message(&self, id: &str, text: String) {
        let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(step) = running.iter_mut().find(|r| r.id == id) {
            step.message = text;
        }
    }

    fn println(&self, text: &str) {
        self.bar.println(text);
    }

    fn clear(&self) {
        self.running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        self.bar.finish_and_clear();
    }
}

/// The running steps' lines under the bar: `  ⠋   4.2s build  12/100 games`.
fn write_running(running: &[Running], color: bool, out: &mut dyn std::fmt::Write) {
    const SPINNER: [char; 8] = ['⠁', '⠂', '⠄', '⡀', '⢀', '⠠', '⠐', '⠈'];
    for step in running.iter().take(SHOWN_STEPS) {
        let ms = u64::try_from(step.since.elapsed().as_millis()).unwrap_or(u64::MAX);
        let frame = SPINNER[usize::try_from(ms / 100).unwrap_or(0) % SPINNER.len()];
        let mut line = format!("  {frame} {:>6} {}", Elapsed(ms).to_string(), step.id);
        if !step.message.is_empty() {
            line.push_str("  ");
            line.push_str(&step.message);
        }
        // A line wider than the terminal would wrap, and the display would
        // miscount its lines on the next redraw.
        let line: String = line.chars().take(LINE_WIDTH).collect();
        let id_at = line.find(&step.id).unwrap_or(line.len());
        let (head, tail) = line.split_at(id_at);
        let tail = tail.strip_prefix(step.id.as_str()).map_or_else(
            || tail.to_owned(),
            |rest| format!("{}{rest}", paint(color, "1", &step.id)),
        );
        let _ = write!(out, "\n{head}{tail}");
    }
    if running.len() > SHOWN_STEPS {
        let _ = write!(
            out,
            "\n  … and {} more running",
            running.len() - SHOWN_STEPS
        );
    }
}

fn write_elapsed(state: &ProgressState, out: &mut dyn std::fmt::Write) {
    let ms = u64::try_from(state.elapsed().as_millis()).unwrap_or(u64::MAX);
    let _ = write!(out, "{}", Elapsed(ms));
}

/// A running time on the progress display: `4.2s`, `1m05s`, `1h02m`.
pub struct Elapsed(pub u64);

impl std::fmt::Display for Elapsed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ms = self.0;
        let secs = ms / 1000;
        if secs < 60 {
            write!(f, "{}.{}s", secs, (ms % 1000) / 100)
        } else if secs < 3600 {
            write!(f, "{}m{:02}s", secs / 60, secs % 60)
        } else {
            write!(f, "{}h{:02}m", secs / 3600, (secs % 3600) / 60)
        }
    }
}

/// How long a finished step or run took: `0.35s` under a second, then as
/// [`Elapsed`] (`4.2s`, `1m05s`, `1h02m`).
pub struct Duration(pub u64);

impl std::fmt::Display for Duration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0 < 1000 {
            write!(f, "0.{:02}s", self.0 / 10)
        } else {
            Elapsed(self.0).fmt(f)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_or_uncertain_step_says_why_in_its_line() {
        let progress = Progress::new(false, false, Redactor::default());
        let step = |state, message: &str| StepReport {
            id: "register".into(),
            kind: "register".into(),
            state,
            duration_ms: 1200,
            key: None,
            exit_code: None,
            message: Some(message.into()),
            attempts: 1,
            log: None,
        };
        assert_eq!(
            progress.finished_text(&step(StepState::Uncertain, "no answer within 10s")),
            "register: UNCERTAIN after 1.2s: no answer within 10s"
        );
        assert_eq!(
            progress.finished_text(&step(
                StepState::Refused,
                "over budget. Nothing was charged"
            )),
            "register: REFUSED after 1.2s: over budget. Nothing was charged"
        );
    }

    #[test]
    fn durations_read_like_a_clock() {
        let cases = [
            (0, "0.00s"),
            (349, "0.34s"),
            (4_230, "4.2s"),
            (59_999, "59.9s"),
            (65_000, "1m05s"),
            (3_599_000, "59m59s"),
            (3_720_000, "1h02m"),
        ];
        for (ms, text) in cases {
            assert_eq!(Duration(ms).to_string(), text, "{ms} ms");
        }
        assert_eq!(Elapsed(300).to_string(), "0.3s");
    }

    #[test]
    fn every_running_step_has_a_line_up_to_a_screenful() {
        let since = Instant::now()
            .checked_sub(std::time::Duration::from_secs(65))
            .unwrap_or_else(Instant::now);
        let running: Vec<Running> = (0..SHOWN_STEPS + 2)
            .map(|i| Running {
                id: format!("step-{i}"),
                since,
                message: if i == 0 {
                    "40/100 games".into()
                } else {
                    String::new()
                },
            })
            .collect();
        let mut out = String::new();
        write_running(&running, false, &mut out);
        let lines: Vec<&str> = out.lines().skip(1).collect();
        assert_eq!(lines.len(), SHOWN_STEPS + 1, "{out}");
        assert!(lines[0].ends_with(" 1m05s step-0  40/100 games"), "{out}");
        assert!(lines[1].ends_with(" 1m05s step-1"), "{out}");
        assert_eq!(lines[SHOWN_STEPS], "  … and 2 more running");
    }
}

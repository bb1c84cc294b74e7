//! `plan status` and `plan runs`: a run as its journal tells it, as text and
//! as a JSON document of fields (state, exit code, durations), never prose a
//! script would have to parse. `cli/plan_runs.rs` reads the journals and
//! fills these in.

use std::fmt::Write as _;

use serde::Serialize;

use super::progress::Duration;
use crate::journal::run::StepState;

/// Where a run stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RunState {
    /// A gameplan process holds its lock right now.
    Running,
    Succeeded,
    Failed,
    Incomplete,
    Declined,
    Unauthorized,
    Unreachable,
    /// Stopped by a signal or `plan stop`, or halted by `--fail-fast`.
    Interrupted,
    /// Ended without a word (killed, crashed).
    Unfinished,
}

impl RunState {
    pub fn word(self) -> &'static str {
        match self {
            RunState::Running => "running",
            RunState::Succeeded => "succeeded",
            RunState::Failed => "failed",
            RunState::Incomplete => "incomplete",
            RunState::Declined => "declined",
            RunState::Unauthorized => "unauthorized",
            RunState::Unreachable => "unreachable",
            RunState::Interrupted => "interrupted",
            RunState::Unfinished => "unfinished",
        }
    }

    /// A run in this state has not ended: it may be resumed (unless its plan changed).
    pub fn is_open(self) -> bool {
        matches!(self, RunState::Interrupted | RunState::Unfinished)
    }
}

/// One run, as `plan runs --json` lists it and `plan status --json` starts.
#[derive(Debug, Clone, Serialize)]
pub struct RunRow {
    pub run_id: String,
    pub plan: String,
    pub plan_path: String,
    /// RFC 3339, UTC.
    pub started_at: String,
    pub state: RunState,
    /// The run's exit code, once it ended.
    pub exit_code: Option<u8>,
    /// Time spent running, over the start and every resume (`null` while it
    /// runs, or for journals of an older gameplan).
    pub duration_ms: Option<u64>,
    pub steps_done: usize,
    pub steps_total: usize,
    /// Whether `gameplan plan resume RUN_ID` would continue it.
    pub resumable: bool,
    /// Why an unfinished run cannot be resumed (e.g. "the plan changed").
    pub not_resumable: Option<String>,
    /// The live holder of a running run.
    pub pid: Option<u32>,
    pub host: Option<String>,
}

impl RunRow {
    /// The state in a few words: `failed (exit 1)`, `running (pid 7 on box)`,
    /// `interrupted (resumable)`, `unfinished (not resumable: the plan changed)`.
    pub fn status_text(&self) -> String {
        let word = self.state.word();
        match (self.state, self.exit_code) {
            (RunState::Running, _) => format!(
                "running (pid {} on {})",
                self.pid.unwrap_or_default(),
                self.host.as_deref().unwrap_or("?")
            ),
            (state, _) if state.is_open() => match &self.not_resumable {
                Some(why) => format!("{word} (not resumable: {why})"),
                None => format!("{word} (resumable)"),
            },
            (_, Some(code)) => format!("{word} (exit {code})"),
            (_, None) => word.to_owned(),
        }
    }
}

/// One step of `plan status`.
#[derive(Debug, Clone, Serialize)]
pub struct StatusStep {
    pub id: String,
    pub kind: String,
    pub state: StepState,
    /// Attempts recorded in the journal (a resumed step's count goes on).
    pub attempt: u32,
    pub exit_code: Option<i32>,
    pub duration_ms: u64,
    /// How to print its output (`gameplan plan log STEP RUN_ID`), or the
    /// file of a run from before the one log per run; absent when it
    /// printed nothing.
    pub log: Option<String>,
    pub message: Option<String>,
}

/// The document `plan status --json` prints.
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    #[serde(flatten)]
    pub run: RunRow,
    /// A torn last journal record was dropped (the run was killed mid-write).
    pub torn_tail: bool,
    /// How to continue it, when it can be resumed.
    pub resume_command: Option<String>,
    pub steps: Vec<StatusStep>,
}

/// A duration for people: `0.42s`, `12.5s`, `3m05s`, `2h10m`.
pub fn duration_text(ms: u64) -> String {
    let secs = ms / 1000;
    match secs {
        0..60 => Duration(ms).to_string(),
        60..3600 => format!("{}m{:02}s", secs / 60, secs % 60),
        _ => format!("{}h{:02}m", secs / 3600, secs % 3600 / 60),
    }
}

/// `plan status`: the run, each step, then each failed step's message
/// whole, so the last lines of its log follow "last lines of …:".
pub fn status_text(status: &Status) -> String {
    let run = &status.run;
    let took = run
        .duration_ms
        .map(|ms| format!(", ran {}", duration_text(ms)))
        .unwrap_or_default();
    let mut out = format!(
        "run {} of `{}` ({}), started {}{took}: {}; {} of {} done\n",
        run.run_id,
        run.plan,
        run.plan_path,
        run.started_at,
        run.status_text(),
        run.steps_done,
        super::plural(run.steps_total, "step")
    );
    for step in &status.steps {
        let _ = writeln!(out, "  {:<11} {}", step.state.word(), step.id);
    }
    if let Some(command) = &status.resume_command {
        let _ = writeln!(out, "continue it with `{command}`");
    }
    // Each failure whole, after the list, so the status ends with what a
    // person reads next: how the step failed and the last lines of its log.
    for step in &status.steps {
        // A step a full disk stopped says why, like a failure: it is what
        // stands between the run and its resume.
        let stopped_by_disk = step.state == StepState::Interrupted
            && step
                .message
                .as_deref()
                .is_some_and(|m| m.starts_with(crate::journal::step_log::DISK_FULL));
        if step.state != StepState::Failed && !stopped_by_disk {
            continue;
        }
        let Some(message) = &step.message else {
            continue;
        };
        let mut lines = message.lines();
        let _ = writeln!(out, "{}: {}", step.id, lines.next().unwrap_or_default());
        // The log's lines come indented already, as `plan run` shows them.
        for line in lines {
            let _ = writeln!(out, "{line}");
        }
    }
    out
}

/// `plan runs`: one line per run under a header, oldest first.
pub fn list_text(rows: &[Result<RunRow, (String, String)>]) -> String {
    let id_width = rows
        .iter()
        .map(|r| match r {
            Ok(row) => row.run_id.len(),
            Err((id, _)) => id.len(),
        })
        .max()
        .unwrap_or(0)
        .max(3);
    let plan_width = rows
        .iter()
        .filter_map(|r| r.as_ref().ok())
        .map(|row| row.plan.len())
        .max()
        .unwrap_or(0)
        .max(4);
    let mut out = format!(
        "{:<id_width$}  {:<plan_width$}  {:<20}  {:>8}  {:>7}  STATUS\n",
        "RUN", "PLAN", "STARTED", "DURATION", "STEPS"
    );
    for row in rows {
        match row {
            Ok(row) => {
                let duration = row
                    .duration_ms
                    .map_or_else(|| "-".to_owned(), duration_text);
                let steps = format!("{}/{}", row.steps_done, row.steps_total);
                let _ = writeln!(
                    out,
                    "{:<id_width$}  {:<plan_width$}  {:<20}  {duration:>8}  {steps:>7}  {}",
                    row.run_id,
                    row.plan,
                    row.started_at,
                    row.status_text()
                );
            }
            Err((id, error)) => {
                let _ = writeln!(out, "{id:<id_width$}  {error}");
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_at_every_scale() {
        assert_eq!(duration_text(420), "0.42s");
        assert_eq!(duration_text(12_500), "12.5s");
        assert_eq!(duration_text(185_000), "3m05s");
        assert_eq!(duration_text(7_800_000), "2h10m");
    }
}

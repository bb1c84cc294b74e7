//! The run report: what one run did, step by step. The engine fills it in;
//! `report/` renders it (text, JSON, `JUnit`, markdown); `schemas/run.schema.json`
//! is generated from it.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::journal::run::{RunOutcome, StepState};

/// How the message of a step an incomplete step stopped begins
/// (``not run: `b` was incomplete``); the summary lists such steps.
pub const NOT_RUN: &str = "not run: ";

/// One step's line in the run report.
#[derive(Debug, Clone, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct StepReport {
    pub id: String,
    pub kind: String,
    pub state: StepState,
    pub duration_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Attempts made in this run (0 when reused, skipped or done before a resume).
    pub attempts: u32,
    /// Where the step's log is, when it ran and printed something: for a
    /// `command` step the command that prints it from the run's one
    /// `steps.log` (`gameplan plan log STEP RUN_ID`), for other kinds a file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log: Option<String>,
}

/// The document `plan run --json` prints (schema: `schemas/run.schema.json`).
#[derive(Debug, Clone, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct RunReport {
    pub run_id: String,
    pub plan: String,
    pub outcome: RunOutcome,
    pub exit_code: u8,
    pub resumed: bool,
    pub duration_ms: u64,
    /// Count of steps per state.
    pub counts: BTreeMap<String, usize>,
    /// Why the run failed or stopped: the first of `root_causes` in plan
    /// order ("step `ID` failed: ..."), or what stopped the run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub root_cause: Option<String>,
    /// Every failed step no other failure explains (none of the steps it
    /// needs, directly or not, failed), in plan order: with independent
    /// branches, each failed branch is one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub root_causes: Vec<String>,
    pub steps: Vec<StepReport>,
    /// How to continue an interrupted run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resume_command: Option<String>,
    /// Why the run stopped early: its journal could not be written (a full
    /// disk, a deleted state directory). The run is unfinished, and resumes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub journal_error: Option<String>,
    /// Why the run stopped early: the disk holding the state directory is
    /// full, so a step's log could not be written (the step, the cause and
    /// the step's last words). The run is unfinished, and resumes (running
    /// that step again) once space is freed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disk_full: Option<String>,
    /// What the play and simulate steps found, when the plan has any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub playtest: Option<super::playtest::Playtest>,
    /// How `--fail-on` (or the plan's `fail_on`) judged the findings, when
    /// either was set; any match fails the run (exit 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fail_on: Option<FailOnReport>,
    /// How many distinct findings nothing judged: no gate step ran and no
    /// `fail_on` was set. Absent when there were none (or they were judged).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unjudged_findings: Option<usize>,
    /// The plan's own template for `report.html` (`[report] template`), as
    /// a path gameplan can open, so `gameplan report` renders the page
    /// again with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<String>,
    /// Why `report.html` is not in the plan's own template: it could not
    /// be read or rendered, and the shipped one was used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page_warning: Option<String>,
    /// What step kinds add to the end of the summary (`Kind::summary`),
    /// in plan order: printed after the steps, not part of `--json` (each
    /// kind's own files hold its document).
    #[serde(skip)]
    #[schemars(skip)]
    pub sections: Vec<SummarySection>,
    /// The test cases step kinds hand to `--junit` (`Kind::junit_cases`),
    /// per step in plan order; not part of `--json` either.
    #[serde(skip)]
    #[schemars(skip)]
    pub junit: Vec<KindCases>,
}

/// The `JUnit` test cases one step's kind handed over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KindCases {
    /// The step they come from (the engine sets it).
    pub step: String,
    /// Its kind's name (`aggregate`).
    pub kind: String,
    pub cases: Vec<JunitCase>,
}

/// One test case a step kind reports (a gate's lens × unit, an
/// aggregate's finding), turned into `JUnit` by `report::run_summary`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JunitCase {
    pub name: String,
    /// Dotted, under the plan and the kind (`crash` becomes
    /// `maze.aggregate.crash`).
    pub classname: String,
    pub outcome: CaseOutcome,
    pub time_ms: Option<u64>,
    /// What the case is about, in full (`system-out`).
    pub text: Option<String>,
    /// The finding the case is about: when the run's `fail_on` judged the
    /// findings it decides the case (failed when it matched this one,
    /// passed when not), whatever `outcome` says.
    pub finding: Option<String>,
}

/// How a kind's test case came out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CaseOutcome {
    Passed,
    /// The thing judged failed (a finding stands).
    Failed {
        message: String,
        text: String,
    },
    /// It could not be judged (a unit left missing).
    Error {
        message: String,
        text: String,
    },
    /// Nothing judged it.
    Skipped {
        message: String,
    },
}

/// A section a step kind adds to the run's summary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SummarySection {
    /// The step it comes from (the engine sets it).
    pub step: String,
    /// Its lines as printed, each ending in a newline.
    pub text: String,
}

/// What `fail_on` judged.
#[derive(Debug, Clone, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct FailOnReport {
    /// The categories and severities it fails on, as given.
    pub selectors: Vec<String>,
    /// `flag` (`--fail-on`) or `plan` (the plan's `fail_on`).
    pub from: String,
    /// How many distinct findings it judged.
    pub judged: usize,
    /// The findings that matched, most severe first: the run failed on them.
    pub matched: Vec<MatchedFinding>,
}

/// A finding that matched `fail_on` (its whole line is in `playtest.findings`).
#[derive(Debug, Clone, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct MatchedFinding {
    pub id: String,
    pub category: String,
    pub severity: String,
    pub title: String,
}

/// Where a step kind's failure message goes on to the last lines of its log.
const LOG_LINES_MARKER: &str = "; last lines of ";

/// Why a step failed, in one line: the message's first line without the
/// log lines a step kind appended (for a retry's note; the last attempt
/// shows them).
pub fn reason(message: &str) -> &str {
    let first = message.lines().next().unwrap_or_default();
    first.split(LOG_LINES_MARKER).next().unwrap_or(first)
}

/// The first line of a failure message, saying where the whole log is in
/// place of the lines a step kind appended (`...; last lines of LOG:` and
/// the lines): what a summary shows, where the lines were shown already.
pub fn headline(message: &str, log: Option<&str>) -> String {
    let (first, rest) = message.split_once('\n').unwrap_or((message, ""));
    match first.find(LOG_LINES_MARKER) {
        Some(at) if first.ends_with(':') => {
            let path = log.unwrap_or(&first[at + LOG_LINES_MARKER.len()..first.len() - 1]);
            format!("{} (log: {path})", &first[..at])
        }
        _ if rest.trim().is_empty() => first.to_owned(),
        _ => match log {
            Some(path) => format!("{first} (log: {path})"),
            None => first.to_owned(),
        },
    }
}

/// The state directory a run is in (`<state>/runs/<id>`).
pub fn state_dir(run: &crate::journal::run::RunDir) -> std::path::PathBuf {
    run.dir
        .parent()
        .and_then(std::path::Path::parent)
        .unwrap_or(&run.dir)
        .to_path_buf()
}

/// How a message names a step's log: the command that prints it, with
/// `--state-dir` when the run's is not the repo's `.gameplan`.
pub fn log_label_in(
    step: &str,
    run: &crate::journal::run::RunDir,
    root: &std::path::Path,
) -> String {
    let run_id = run
        .dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let label = log_label(step, &run_id);
    let state = state_dir(run);
    if state == root.join(".gameplan") {
        return label;
    }
    format!(
        "{} --state-dir {}`",
        label.trim_end_matches('`'),
        state.display()
    )
}

/// How a message names a step's log in the default state directory.
pub fn log_label(step: &str, run_id: &str) -> String {
    let plain = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.,=:/@%+".contains(c))
    };
    let step = if plain(step) {
        step.to_owned()
    } else {
        format!("'{}'", step.replace('\'', "'\\''"))
    };
    format!("`gameplan plan log {step} {run_id}`")
}

#[cfg(test)]
mod tests {
    use super::headline;

    #[test]
    fn a_headline_is_the_first_line_and_the_log() {
        assert_eq!(
            headline(
                "exited with code 3; last lines of /r/stdout.log:\n    a\n    b",
                Some("/r/stdout.log")
            ),
            "exited with code 3 (log: /r/stdout.log)"
        );
        assert_eq!(
            headline(
                "timed out after 1s and was stopped; last lines of /r/x.log:\n    a",
                None
            ),
            "timed out after 1s and was stopped (log: /r/x.log)"
        );
        assert_eq!(
            headline("exited with code 1 (no output; log: /l)", Some("/l")),
            "exited with code 1 (no output; log: /l)"
        );
        assert_eq!(headline("bad\nmore", Some("/l")), "bad (log: /l)");
    }
}

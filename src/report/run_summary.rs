//! The end of a run: the summary table, the `--json` document, the `JUnit` file.

use std::fmt::Write as _;
use std::path::Path;

use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};

use super::progress::Duration;
use super::run::RunReport;
use crate::journal::run::{RunOutcome, StepState};

/// The closing table: counts, failures with their causes, and what to do next.
pub fn text(report: &RunReport) -> String {
    let mut out = String::new();
    let counts: Vec<String> = report
        .counts
        .iter()
        .map(|(state, n)| format!("{n} {state}"))
        .collect();
    let _ = writeln!(
        out,
        "run {} of `{}`: {} in {} ({})",
        report.run_id,
        report.plan,
        match report.outcome {
            RunOutcome::Succeeded => "succeeded",
            RunOutcome::Failed => "FAILED",
            RunOutcome::Interrupted => "interrupted",
            RunOutcome::Incomplete => "INCOMPLETE",
            RunOutcome::Declined => "declined (nothing was charged)",
            RunOutcome::Unauthorized => "UNAUTHORIZED",
            RunOutcome::Unreachable => "stopped: the model endpoint never answered",
        },
        Duration(report.duration_ms),
        counts.join(", ")
    );
    for step in &report.steps {
        if !matches!(
            step.state,
            StepState::Succeeded
                | StepState::Reused
                | StepState::Skipped
                | StepState::Pending
                | StepState::Running
                | StepState::Interrupted
        ) {
            let _ = writeln!(
                out,
                "  {}: {}: {}",
                step.state.word(),
                step.id,
                step.message.as_deref().unwrap_or("")
            );
        }
    }
    if let Some(cause) = &report.root_cause
        && report
            .steps
            .iter()
            .filter(|s| s.state == StepState::Failed)
            .count()
            > 1
    {
        let _ = writeln!(out, "  root cause: {cause}");
    }
    if let Some(why) = &report.journal_error {
        let _ = writeln!(
            out,
            "  stopped: the run's journal could not be written: {why}"
        );
        if report.resume_command.is_some() {
            out.push_str(
                "  what finished is journaled; once the cause is mended (space freed), the resume below runs the rest\n",
            );
        }
    }
    if let Some(resume) = &report.resume_command {
        let _ = writeln!(out, "  resume with: {resume}");
    }
    out
}

/// Writes each step as a `JUnit` test case (failed steps carry their message and log tail).
pub fn write_junit(report: &RunReport, path: &Path) -> std::io::Result<()> {
    let mut suite = TestSuite::new(report.plan.clone());
    for step in &report.steps {
        let status = match step.state {
            StepState::Succeeded | StepState::Reused => TestCaseStatus::success(),
            StepState::Skipped | StepState::Pending => {
                let mut s = TestCaseStatus::skipped();
                if let Some(m) = &step.message {
                    s.set_message(m.clone());
                }
                s
            }
            StepState::Failed
            | StepState::Interrupted
            | StepState::Running
            | StepState::Incomplete
            | StepState::Declined
            | StepState::Unauthorized
            | StepState::Unreachable => {
                let mut s = TestCaseStatus::non_success(NonSuccessKind::Failure);
                s.set_message(
                    step.message
                        .clone()
                        .unwrap_or_else(|| step.state.word().to_owned()),
                );
                if let Some(m) = &step.message {
                    s.set_description(m.clone());
                }
                s
            }
        };
        let mut case = TestCase::new(step.id.clone(), status);
        case.set_classname(format!("{}.{}", report.plan, step.kind));
        case.set_time(std::time::Duration::from_millis(step.duration_ms));
        suite.add_test_case(case);
    }
    let mut junit = Report::new(format!("gameplan run {}", report.run_id));
    junit.add_test_suite(suite);
    let xml = junit.to_string().map_err(std::io::Error::other)?;
    crate::journal::atomic_write(path, xml.as_bytes()).map_err(std::io::Error::other)
}

/// A markdown summary for CI pages (GitHub's `GITHUB_STEP_SUMMARY`).
pub fn markdown(report: &RunReport) -> String {
    let mut out = format!(
        "### gameplan run `{}` of `{}`: {:?}\n\n| step | kind | state | time |\n|---|---|---|---|\n",
        report.run_id, report.plan, report.outcome
    );
    for step in &report.steps {
        let _ = writeln!(
            out,
            "| `{}` | {} | {} | {} |",
            step.id,
            step.kind,
            step.state.word(),
            Duration(step.duration_ms)
        );
    }
    out.push('\n');
    out
}

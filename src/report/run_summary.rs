//! The end of a run: the summary table, the `--json` document, the `JUnit` file.

use std::fmt::Write as _;
use std::path::Path;

use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};

use super::paint;
use super::progress::Duration;
use super::run::{CaseOutcome, FailOnReport, JunitCase, KindCases, RunReport, headline};
use crate::journal::run::{RunOutcome, StepState};

/// The closing table: counts, failures (each once, by its headline: the
/// lines were shown as it failed), the root causes, and what to do next.
pub fn text(report: &RunReport, color: bool) -> String {
    let mut out = String::new();
    if report.steps.is_empty() && report.outcome == RunOutcome::Succeeded {
        let _ = writeln!(
            out,
            "run {} of `{}`: nothing to run (no steps)",
            report.run_id, report.plan
        );
        return out;
    }
    let counts: Vec<String> = report
        .counts
        .iter()
        .map(|(state, n)| format!("{n} {state}"))
        .collect();
    let (word, sgr) = match report.outcome {
        RunOutcome::Succeeded => ("succeeded", "32"),
        RunOutcome::Failed => ("FAILED", "1;31"),
        RunOutcome::Interrupted => ("interrupted", "33"),
        RunOutcome::Incomplete => ("INCOMPLETE", "1;33"),
        RunOutcome::Declined => ("declined (nothing was charged)", "33"),
        RunOutcome::Unauthorized => ("UNAUTHORIZED", "1;31"),
        RunOutcome::Unreachable => ("stopped: the model endpoint never answered", "1;31"),
        RunOutcome::Refused => ("REFUSED (nothing was charged)", "1;31"),
        RunOutcome::Uncertain => ("UNFINISHED: an answer never came", "1;31"),
    };
    let _ = writeln!(
        out,
        "run {} of `{}`: {} in {} ({})",
        report.run_id,
        report.plan,
        paint(color, sgr, word),
        Duration(report.duration_ms),
        counts.join(", ")
    );
    let mut failed = 0;
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
            if step.state == StepState::Failed {
                failed += 1;
            }
            let _ = writeln!(
                out,
                "  {}: {}: {}",
                paint(color, "31", step.state.word()),
                step.id,
                headline(step.message.as_deref().unwrap_or(""), step.log.as_deref())
            );
        }
    }
    not_run_text(&mut out, report, color);
    if let Some(fail_on) = report.fail_on.as_ref().filter(|f| !f.matched.is_empty()) {
        let found: Vec<String> = fail_on
            .matched
            .iter()
            .map(|f| format!("{} ({} {})", f.id, f.severity, f.category))
            .collect();
        let _ = writeln!(
            out,
            "  {}: {} {}: {}",
            paint(color, "31", "failed"),
            matched(fail_on),
            fail_on_named(fail_on),
            found.join(", ")
        );
    }
    root_causes_text(&mut out, report, failed);
    stopped_text(&mut out, report);
    if let Some(resume) = &report.resume_command {
        let _ = writeln!(out, "  resume with: {resume}");
    }
    out
}

/// Steps an incomplete one stopped, each with why: a gate that could not
/// judge everything must not read as if the gates after it passed.
fn not_run(report: &RunReport) -> impl Iterator<Item = (&str, &str)> {
    report.steps.iter().filter_map(|step| {
        let why = step
            .message
            .as_deref()
            .and_then(|m| m.strip_prefix(super::run::NOT_RUN))?;
        (step.state == StepState::Skipped).then_some((step.id.as_str(), why))
    })
}

fn not_run_text(out: &mut String, report: &RunReport, color: bool) {
    for (id, why) in not_run(report) {
        let _ = writeln!(out, "  {}: {id}: {why}", paint(color, "33", "not run"));
    }
}

/// How many findings `fail_on` matched, with its verb ("2 findings
/// match"), as the text, the markdown and the `JUnit` case all say it.
fn matched(fail_on: &FailOnReport) -> String {
    let n = fail_on.matched.len();
    let verb = if n == 1 { "matches" } else { "match" };
    format!("{} {verb}", super::plural(n, "finding"))
}

/// `--fail-on crash,high`, or the plan's key when it judged.
fn fail_on_named(fail_on: &FailOnReport) -> String {
    if fail_on.from == "flag" {
        format!("--fail-on {}", fail_on.selectors.join(","))
    } else {
        format!("fail_on [{}]", fail_on.selectors.join(", "))
    }
}

/// The run's last line, on how its findings were judged: that nothing
/// judged them (no gate ran, no `fail_on`), or that `fail_on` found none
/// to fail on. Empty when there were no findings or a gate judged them.
pub fn findings_verdict_text(report: &RunReport) -> String {
    if let Some(n) = report.unjudged_findings {
        return format!(
            "{} not judged: no gate ran (add [[gates]] and a gate step, or --fail-on)\n",
            if n == 1 {
                "1 finding was".to_owned()
            } else {
                format!("{n} findings were")
            }
        );
    }
    match &report.fail_on {
        Some(f) if f.matched.is_empty() && f.judged > 0 => format!(
            "{} judged by {}: none match\n",
            super::plural(f.judged, "finding"),
            fail_on_named(f)
        ),
        _ => String::new(),
    }
}

/// What of gameplan's own stopped the run early: a journal that could not
/// be written, or a disk too full for a step's log.
fn stopped_text(out: &mut String, report: &RunReport) {
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
    if let Some(why) = &report.disk_full {
        let mut lines = why.lines();
        let _ = writeln!(out, "  stopped: {}", lines.next().unwrap_or_default());
        for line in lines {
            let _ = writeln!(out, "  {line}");
        }
    }
}

/// With one failure its line says it all; with more, which of them to fix
/// first (or what of gameplan's own stopped the run).
fn root_causes_text(out: &mut String, report: &RunReport, failed: usize) {
    // With one failure the line above says it all; with more, which of
    // them to fix first.
    if failed > 1 && !report.root_causes.is_empty() {
        let ids: Vec<String> = report
            .root_causes
            .iter()
            .map(|id| format!("`{id}`"))
            .collect();
        let _ = if ids.len() == 1 {
            writeln!(
                out,
                "  root cause: {} (the other failures follow from it)",
                ids[0]
            )
        } else if ids.len() == failed {
            writeln!(
                out,
                "  root causes: {} (independent failures)",
                ids.join(", ")
            )
        } else {
            writeln!(
                out,
                "  root causes: {} (the other failures follow from them)",
                ids.join(", ")
            )
        };
    } else if let Some(cause) = &report.root_cause
        && report.root_causes.is_empty()
        && failed > 0
    {
        // Something of gameplan's own stopped the run.
        let _ = writeln!(out, "  root cause: {cause}");
    }
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
            | StepState::Unreachable
            | StepState::Refused
            | StepState::Uncertain => {
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
    if let Some(fail_on) = &report.fail_on {
        suite.add_test_case(fail_on_case(report, fail_on));
    }
    let mut junit = Report::new(format!("gameplan run {}", report.run_id));
    junit.add_test_suite(suite);
    // A kind's cases are a suite per step, not cases beside the step's:
    // the steps' suite keeps one case per step (its counts are the run's
    // steps), and GitHub's test reporters and nextest-style viewers show a
    // suite as a group with its own counts, so an aggregate's findings or
    // a gate's lens × unit read under their step instead of drowning it.
    for cases in &report.junit {
        junit.add_test_suite(kind_suite(report, cases));
    }
    let xml = junit.to_string().map_err(std::io::Error::other)?;
    crate::journal::atomic_write(path, xml.as_bytes()).map_err(std::io::Error::other)
}

/// One step's kind's cases as a suite named `PLAN: STEP`, classnames under
/// `PLAN.KIND`; a case about a finding is decided by the run's `fail_on`
/// when it judged.
fn kind_suite(report: &RunReport, cases: &KindCases) -> TestSuite {
    let mut suite = TestSuite::new(format!("{}: {}", report.plan, cases.step));
    for case in &cases.cases {
        suite.add_test_case(kind_case(report, &cases.kind, case));
    }
    suite
}

fn kind_case(report: &RunReport, kind: &str, case: &JunitCase) -> TestCase {
    let judged = match (&report.fail_on, &case.finding) {
        (Some(fail_on), Some(id)) => Some(match fail_on.matched.iter().find(|f| &f.id == id) {
            Some(f) => CaseOutcome::Failed {
                message: format!(
                    "{} {} matches {}: {}",
                    f.severity,
                    f.category,
                    fail_on_named(fail_on),
                    f.title
                ),
                text: case.text.clone().unwrap_or_default(),
            },
            None => CaseOutcome::Passed,
        }),
        _ => None,
    };
    let status = match judged.as_ref().unwrap_or(&case.outcome) {
        CaseOutcome::Passed => TestCaseStatus::success(),
        CaseOutcome::Skipped { message } => {
            let mut s = TestCaseStatus::skipped();
            s.set_message(message.clone());
            s
        }
        CaseOutcome::Failed { message, text } => {
            non_success(NonSuccessKind::Failure, message, text)
        }
        CaseOutcome::Error { message, text } => non_success(NonSuccessKind::Error, message, text),
    };
    let mut out = TestCase::new(case.name.clone(), status);
    out.set_classname(format!("{}.{kind}.{}", report.plan, case.classname));
    if let Some(ms) = case.time_ms {
        out.set_time(std::time::Duration::from_millis(ms));
    }
    if let Some(text) = &case.text {
        out.set_system_out(text.clone());
    }
    out
}

fn non_success(kind: NonSuccessKind, message: &str, text: &str) -> TestCaseStatus {
    let mut s = TestCaseStatus::non_success(kind);
    s.set_message(message.to_owned());
    if !text.is_empty() {
        s.set_description(text.to_owned());
    }
    s
}

/// The `fail_on` check as one test case: failed when a finding matched.
fn fail_on_case(report: &RunReport, fail_on: &FailOnReport) -> TestCase {
    let status = if fail_on.matched.is_empty() {
        TestCaseStatus::success()
    } else {
        let mut s = TestCaseStatus::non_success(NonSuccessKind::Failure);
        s.set_message(format!("{} {}", matched(fail_on), fail_on_named(fail_on)));
        let lines: Vec<String> = fail_on
            .matched
            .iter()
            .map(|f| format!("{} {} {}: {}", f.severity, f.category, f.id, f.title))
            .collect();
        s.set_description(lines.join("\n"));
        s
    };
    let mut case = TestCase::new("fail-on", status);
    case.set_classname(format!("{}.fail_on", report.plan));
    case
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
    if let Some(page) = report.playtest.as_ref().and_then(super::html::shown_path) {
        let _ = writeln!(
            out,
            "The run's page: `{page}` (keep the run's directory as an artifact to open it).\n"
        );
    }
    for (id, why) in not_run(report) {
        let _ = writeln!(out, "**Not run:** `{id}`: {why}\n");
    }
    // What step kinds add (a gate's verdicts, a settlement), as printed at
    // the end of the run: a CI page shows the gates' verdicts, not only
    // that a step failed.
    for section in &report.sections {
        let _ = write!(
            out,
            "#### `{}`\n\n```text\n{}```\n\n",
            section.step,
            section.text.replace("```", "'''")
        );
    }
    baseline_markdown(&mut out, report);
    if let Some(fail_on) = report.fail_on.as_ref().filter(|f| !f.matched.is_empty()) {
        let ids: Vec<String> = fail_on
            .matched
            .iter()
            .map(|f| format!("`{}`", f.id))
            .collect();
        let _ = writeln!(
            out,
            "**Failed:** {} `{}`: {}\n",
            matched(fail_on),
            fail_on_named(fail_on),
            ids.join(", ")
        );
    }
    out
}

/// With a baseline (`--baseline`): the findings the change brought first,
/// then those the baseline knew, then the baseline's findings this run did
/// not meet again, so a pull request's page says what it broke and fixed.
fn baseline_markdown(out: &mut String, report: &RunReport) {
    let Some(playtest) = &report.playtest else {
        return;
    };
    let (Some(source), Some(fixed)) = (&playtest.baseline, &playtest.fixed) else {
        return;
    };
    let (new, known) = super::baseline::counts(&playtest.findings);
    let _ = writeln!(
        out,
        "#### Findings against the baseline `{source}`: {new} new, {known} known, {} fixed\n",
        fixed.len()
    );
    for label in [super::baseline::Label::New, super::baseline::Label::Known] {
        for f in playtest
            .findings
            .iter()
            .filter(|f| f.baseline == Some(label))
        {
            let _ = writeln!(
                out,
                "- **{}** {} {}{} `{}`: {}",
                label.name(),
                f.severity,
                f.category,
                f.repeats
                    .map(|r| format!(" ({})", r.text()))
                    .unwrap_or_default(),
                f.id,
                f.title.replace('\n', " ")
            );
        }
    }
    for f in fixed {
        let _ = writeln!(
            out,
            "- **fixed** {} {} `{}`: {}",
            f.severity,
            f.category,
            f.id,
            f.title.replace('\n', " ")
        );
    }
    out.push('\n');
}

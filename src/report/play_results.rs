//! What `gameplan replay`, `gameplan shrink` and `gameplan __simulate` print.

use std::fmt::Write;
use std::path::Path;
use std::time::Duration;

use crate::play::replay::ReplayOutcome;
use crate::play::simulate::SimulateSummary;
use crate::play::trace::QuitReason;

/// The outcome of a replay, one or two lines.
pub fn replay(trace: &Path, outcome: &ReplayOutcome) -> String {
    match outcome {
        ReplayOutcome::Confirmed { steps, end } => format!(
            "{}: confirmed: {steps} steps, every observation hash matches, same end `{}`\n",
            trace.display(),
            end.map_or("none", QuitReason::name)
        ),
        ReplayOutcome::Diverged {
            step,
            action,
            expected,
            got,
        } => {
            let at = match action {
                Some(action) => format!("step {step} (`{action}`)"),
                None if *step == 0 => "step 0 (hello/reset)".to_owned(),
                None => format!("the end, after step {}", step.saturating_sub(1)),
            };
            format!(
                "{}: diverged at {at}\n  expected: {expected}\n  got:      {got}\n",
                trace.display()
            )
        }
    }
}

/// The start line of a shrink: what it reduces, and its time limit.
pub fn shrink_start(trace: &Path, actions: usize, end: &str, limit: Duration) -> String {
    format!(
        "shrinking {} ({actions} actions, ends `{end}`) with a time limit of {} s\n",
        trace.display(),
        limit.as_secs()
    )
}

pub fn shrink_done(
    out: &Path,
    original: usize,
    shrunk: usize,
    runs: u64,
    timed_out: bool,
) -> String {
    let mut text = format!(
        "wrote {}: {shrunk} actions (from {original}) after {runs} game runs",
        out.display()
    );
    if timed_out {
        text.push_str("; the time limit cut the search short, so a shorter one may exist");
    }
    text.push('\n');
    text
}

/// The summary of a simulation, with throughput.
pub fn simulate(
    summary: &SimulateSummary,
    elapsed: Duration,
    runner_cpu: Option<Duration>,
) -> String {
    let mut text = String::new();
    let secs = elapsed.as_secs_f64().max(1e-9);
    #[expect(
        clippy::cast_precision_loss,
        reason = "rates for people; counts are far below 2^52"
    )]
    let (games_per_s, actions_per_s) = (summary.games as f64 / secs, summary.steps as f64 / secs);
    let _ = writeln!(
        text,
        "games {}  completed {}  crashed {}  hung {}  truncated {}  other {}  steps {}",
        summary.games,
        summary.completed,
        summary.crashed,
        summary.hung,
        summary.truncated,
        summary.other,
        summary.steps
    );
    let mut by_category = std::collections::BTreeMap::<&str, usize>::new();
    for f in &summary.findings {
        *by_category.entry(f.category.name()).or_default() += 1;
    }
    let findings: Vec<String> = by_category
        .iter()
        .map(|(c, n)| format!("{c} {n}"))
        .collect();
    let _ = writeln!(
        text,
        "findings: {}",
        if findings.is_empty() {
            "none".to_owned()
        } else {
            findings.join(", ")
        }
    );
    let _ = writeln!(
        text,
        "{:.3} s, {games_per_s:.1} games/s, {actions_per_s:.0} actions/s, {} game processes",
        secs, summary.processes
    );
    if let Some(cpu) = runner_cpu {
        #[expect(
            clippy::cast_precision_loss,
            reason = "a rate for people; counts are far below 2^52"
        )]
        let per_action = cpu.as_secs_f64() * 1e6 / (summary.steps.max(1) as f64);
        let _ = writeln!(
            text,
            "runner cpu {:.3} s ({per_action:.1} us per action, game processes excluded)",
            cpu.as_secs_f64()
        );
    }
    for f in &summary.findings {
        let _ = writeln!(
            text,
            "finding {} {} {} ({} games, first game {}): {}",
            f.severity.name(),
            f.category.name(),
            f.id,
            f.games,
            f.game,
            f.title
        );
    }
    for t in summary.traces.iter().filter(|t| t.end.is_failure()) {
        let _ = writeln!(
            text,
            "trace of a failed game: {} (game {}, {})",
            t.path.display(),
            t.game,
            t.end.name()
        );
    }
    for leaked in &summary.leaked {
        let _ = writeln!(text, "leaked (killed): {} {}", leaked.pid, leaked.command);
    }
    if summary.interrupted {
        text.push_str("interrupted: not every game was played\n");
    }
    text
}

/// One line per cell: where its report is and what it found.
pub fn cell(report: &crate::play::CellReport, out: &Path) -> String {
    let mut text = format!(
        "{} {} seed {}: {} after {} actions, {} finding(s); report in {}\n",
        report.persona,
        report.controller,
        report.seed,
        report.quit_reason.name(),
        report.actions_taken,
        report.findings.len(),
        out.join("report.md").display()
    );
    for f in &report.findings {
        let _ = writeln!(text, "  {} [{}] {}", f.id, f.category.name(), f.title);
    }
    text
}

/// A progress line of a simulation (on a terminal).
pub fn simulate_progress(done: u64, total: u64) -> String {
    format!("simulate: {done}/{total} games\n")
}

//! What `gameplan replay`, `gameplan shrink`, `gameplan play` and
//! `gameplan __simulate` print.

use std::fmt::Write;
use std::path::Path;
use std::time::Duration;

use crate::play::replay::{Detail, Difference, ReplayOutcome, TimeoutFrom};
use crate::play::simulate::SimulateSummary;
use crate::play::trace::QuitReason;

/// The outcome of a replay: one line, or the divergence with what differed.
pub fn replay(trace: &Path, outcome: &ReplayOutcome, timeout: (Duration, TimeoutFrom)) -> String {
    match outcome {
        ReplayOutcome::Confirmed {
            steps,
            end,
            not_played,
            broken,
        } => {
            let mut text = format!(
                "{}: confirmed: {}, every observation hash matches, same end `{}` ({})\n",
                trace.display(),
                super::plural(usize::try_from(*steps).unwrap_or(usize::MAX), "step"),
                end.map_or("none", QuitReason::name),
                action_timeout(timeout)
            );
            // A game that died at the start again: why, as the cell said it.
            if let Some(why) = not_played {
                let why = super::play_cell::not_played(why);
                let _ = writeln!(
                    text,
                    "  {}",
                    why.strip_prefix("the cell did not play: ").unwrap_or(&why)
                );
            }
            // The rules it broke again (the trace's header holds them):
            // what a shrunk repro is for.
            for finding in broken {
                let _ = writeln!(
                    text,
                    "  again: {} (step {})",
                    finding.title, finding.evidence.step
                );
                if let Some(detail) = &finding.evidence.detail {
                    for line in detail.lines() {
                        let _ = writeln!(text, "    {line}");
                    }
                }
            }
            text
        }
        ReplayOutcome::Diverged {
            step,
            action,
            at_reset,
            expected,
            got,
            detail,
        } => {
            let at = match action {
                Some(action) => format!("step {step} (`{action}`)"),
                None if *at_reset => format!("the reset after step {step}"),
                None if *step == 0 => "step 0 (hello/reset)".to_owned(),
                None => format!("the end, after step {}", step.saturating_sub(1)),
            };
            let mut text = format!(
                "{}: diverged at {at}\n  expected: {expected}\n  got:      {got}\n",
                trace.display()
            );
            match detail {
                Detail::Nothing => {}
                Detail::HashesOnly(why) => {
                    let _ = writeln!(text, "  ({why}: what differed is not known)");
                }
                Detail::Differences(differences) => {
                    text.push_str("  differs:\n");
                    for difference in differences {
                        render_difference(&mut text, difference);
                    }
                }
            }
            let _ = writeln!(text, "  ({})", action_timeout(timeout));
            text
        }
    }
}

/// "action timeout 2 s, from the trace".
fn action_timeout((timeout, from): (Duration, TimeoutFrom)) -> String {
    let from = match from {
        TimeoutFrom::Flag => "from --action-timeout",
        TimeoutFrom::Trace => "from the trace",
        TimeoutFrom::Default => "the default: the trace does not say",
    };
    format!("action timeout {} s, {from}", seconds(timeout))
}

/// Whole seconds without a fraction: `2`, `0.5`.
fn seconds(d: Duration) -> String {
    let secs = d.as_secs_f64();
    if d.subsec_nanos() == 0 {
        format!("{}", d.as_secs())
    } else {
        format!("{secs:.3}")
            .trim_end_matches('0')
            .trim_end_matches('.')
            .to_owned()
    }
}

fn render_difference(text: &mut String, difference: &Difference) {
    let cut = |s: &str| crate::text::cut(s, 160);
    match difference {
        Difference::Text { expected, got } => {
            let _ = writeln!(text, "    text:");
            for line in expected {
                let _ = writeln!(text, "      - {}", cut(line));
            }
            for line in got {
                let _ = writeln!(text, "      + {}", cut(line));
            }
        }
        Difference::Actions { added, removed } => {
            let mut parts = Vec::new();
            if !added.is_empty() {
                parts.push(format!("added {}", quoted(added)));
            }
            if !removed.is_empty() {
                parts.push(format!("removed {}", quoted(removed)));
            }
            if parts.is_empty() {
                parts.push("the same, in another order".to_owned());
            }
            let _ = writeln!(text, "    actions: {}", parts.join("; "));
        }
        Difference::Field {
            name,
            expected,
            got,
        } => {
            let value = |v: &Option<String>| v.as_deref().map_or("(missing)".to_owned(), cut);
            let _ = writeln!(text, "    {name}: {} → {}", value(expected), value(got));
        }
    }
}

fn quoted(actions: &[String]) -> String {
    actions
        .iter()
        .map(|a| format!("`{a}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The start line of a shrink: what it reduces, its time limit and action timeout.
pub fn shrink_start(
    trace: &Path,
    actions: usize,
    end: &str,
    limit: Duration,
    timeout: (Duration, TimeoutFrom),
) -> String {
    format!(
        "shrinking {} ({}, ends `{end}`) with a time limit of {} s ({})\n",
        trace.display(),
        super::plural(actions, "action"),
        limit.as_secs(),
        action_timeout(timeout)
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
        "wrote {}: {} (from {original}) after {} game runs",
        out.display(),
        super::plural(shrunk, "action"),
        runs
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
    if !summary.strategies.is_empty() {
        let _ = writeln!(text, "goal: {}", strategy_goals(&summary.strategies));
    }
    for note in &summary.notes {
        let _ = writeln!(text, "note: {note}");
    }
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

/// Each strategy's goal rate, median steps to the goal, median max score
/// and coverage (median distinct observations), on one line: `random
/// 3/10 games (30%), median 14 steps to it, median max score 1, median 6
/// observations; explorer 7/10 games (70%), …`.
pub fn strategy_goals(strategies: &[crate::play::simulate::StrategyGoals]) -> String {
    strategies
        .iter()
        .map(|s| {
            let mut part = format!(
                "{} {}/{} games ({:.0}%)",
                s.strategy,
                s.goals,
                s.games,
                s.goal_rate * 100.0
            );
            if let Some(median) = s.median_steps_to_goal {
                let _ = write!(part, ", median {median} steps to it");
            }
            if let Some(score) = s.median_max_score {
                let _ = write!(part, ", median max score {}", number(score));
            }
            if let Some(seen) = s.median_distinct_observations {
                let _ = write!(part, ", median {seen} observations");
            }
            part
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// A number as people read it: whole numbers without a point, others to
/// two decimals (`3`, `2.5`, `0.33`).
pub fn number(value: f64) -> String {
    if value.fract() == 0.0 && value.abs() < 1e15 {
        format!("{value:.0}")
    } else {
        let text = format!("{value:.2}");
        text.trim_end_matches('0').trim_end_matches('.').to_owned()
    }
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

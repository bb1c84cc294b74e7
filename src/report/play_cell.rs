//! `report.md` of a play cell: Summary, Findings, How it felt, Evidence.
//!
//! Rendered from the cell's `report.json` alone, so a report read back from
//! disk renders the same as a fresh one.

use std::fmt::Write;
use std::path::Path;

use crate::play::cell::CellResult;
use crate::play::cell_report::{CellReport, CellState, NotPlayed};
use crate::play::opening::PlayError;
use crate::play::trace::QuitReason;

/// Writes the cell's `report.md` into `out_dir` beside the files the cell
/// wrote, and lists it among them.
pub fn write_markdown(out_dir: &Path, result: &mut CellResult) -> Result<(), PlayError> {
    let path = out_dir.join("report.md");
    std::fs::write(&path, markdown(&result.report)).map_err(|source| PlayError::Write {
        path: path.display().to_string(),
        source,
    })?;
    result.files.push(path);
    Ok(())
}

/// A cell's `report.md`, from its report alone.
pub fn markdown(report: &CellReport) -> String {
    let mut md = String::with_capacity(4096);
    let _ = writeln!(
        md,
        "# Playtest: {} with {} (seed {})\n",
        report.persona, report.controller, report.seed
    );
    md.push_str("## Summary\n\n");
    let game = if report.game.name.is_empty() {
        report.game.command.join(" ")
    } else {
        format!("{} {}", report.game.name, report.game.version)
            .trim()
            .to_owned()
    };
    let _ = writeln!(md, "- Game: {game}");
    let _ = writeln!(md, "- Player: {}", report.player);
    let _ = writeln!(
        md,
        "- State: {}",
        match report.state {
            CellState::Succeeded => "played",
            CellState::Interrupted => "interrupted",
            CellState::NotPlayed => "did not play",
        }
    );
    if let Some(why) = &report.not_played {
        let _ = writeln!(md, "- Why: {}", why.cause);
        if let Some(hint) = &why.hint {
            let _ = writeln!(md, "- Likely mistake: {hint}");
        }
    }
    for warning in &report.warnings {
        let _ = writeln!(md, "- Warning: {warning}");
    }
    let _ = writeln!(md, "- Actions taken: {}", report.actions_taken);
    let _ = writeln!(md, "- Quit reason: {}", report.quit_reason.name());
    if let Some(step) = report.progress.goal_step {
        let _ = writeln!(md, "- Goal: reached after action {step}");
    } else if report.state != crate::play::CellState::NotPlayed {
        let _ = writeln!(md, "- Goal: not reached");
    }
    player_lines(&mut md, report);
    let _ = writeln!(md, "- Findings: {}", report.findings.len());
    if !report.leaked.is_empty() {
        let _ = writeln!(
            md,
            "- Leaked processes (escaped the game's process group, killed): {}",
            report
                .leaked
                .iter()
                .map(|l| format!("{} `{}`", l.pid, l.command))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    md.push_str("\n## Findings\n\n");
    if report.findings.is_empty() {
        md.push_str("None.\n");
    }
    for f in &report.findings {
        let times = if f.occurrences > 1 {
            format!(" (×{})", f.occurrences)
        } else {
            String::new()
        };
        let flaky = if f.unconfirmed { ", unconfirmed" } else { "" };
        let _ = writeln!(
            md,
            "- **{}** [{}, {}{flaky}] {}{times}",
            f.id,
            f.category.name(),
            f.severity.name(),
            f.title
        );
    }
    md.push_str("\n## How it felt\n\n");
    md.push_str(&(felt_in_voice(report) + &felt(report)));
    md.push_str("\n## Evidence\n\n");
    if let Some(tail) = report
        .not_played
        .as_ref()
        .and_then(|n| n.stderr_tail.as_ref())
    {
        let _ = writeln!(md, "stderr (tail):\n\n```text\n{}\n```", tail.trim_end());
    } else if report.findings.is_empty() {
        md.push_str("Nothing to show.\n");
    }
    for f in &report.findings {
        evidence(&mut md, f);
    }
    md
}

/// One finding's evidence section.
fn evidence(md: &mut String, f: &crate::play::Finding) {
    let e = &f.evidence;
    let _ = writeln!(md, "### {} {}\n", f.id, f.title);
    let _ = writeln!(md, "- Step: {}", e.step);
    if !e.observation.is_empty() {
        let _ = writeln!(md, "- Observation: `{}`", e.observation);
    }
    if !e.last_actions.is_empty() {
        let _ = writeln!(md, "- Last actions: {}", quoted_list(&e.last_actions));
    }
    if let Some(detail) = &e.detail {
        let _ = writeln!(md, "- Detail: {}", detail.replace('\n', " "));
    }
    if let Some(shot) = &e.screenshot {
        // Relative to report.md, which sits in the cell's directory.
        let _ = writeln!(md, "- Screenshot: ![step {}]({shot})", e.step);
    }
    if let Some(tail) = &e.stderr_tail {
        let _ = writeln!(md, "\nstderr (tail):\n\n```text\n{}\n```", tail.trim_end());
    }
    md.push('\n');
}

/// Why a cell did not play, as its step's failure message: the cause and
/// hint on the first line (what the run's summary shows), then the last
/// lines of the game's stderr.
pub fn not_played(why: &NotPlayed) -> String {
    let mut text = format!("the cell did not play: {why}");
    if let Some(tail) = &why.stderr_tail {
        let lines: Vec<&str> = tail.lines().filter(|l| !l.trim().is_empty()).collect();
        // One line is in the cause already (a crash's title quotes it).
        if lines.len() > 1 {
            text.push_str("\n  the game's stderr ended:");
            for line in &lines[lines.len().saturating_sub(5)..] {
                let _ = write!(text, "\n    {line}");
            }
        }
    }
    text
}

/// Why the player quit and what its model spent (an `llm` player's cell).
fn player_lines(md: &mut String, report: &CellReport) {
    if let Some(detail) = &report.quit_detail {
        let _ = writeln!(md, "- Why it quit: {}", detail.replace('\n', " "));
    }
    if let Some(model) = &report.model {
        let _ = writeln!(md, "- Model: {}", model_usage(model));
    }
}

/// The persona's own paragraph, quoted, when its player wrote one.
fn felt_in_voice(report: &CellReport) -> String {
    let mut text = String::new();
    if let Some(voice) = &report.felt {
        for line in voice.lines() {
            let _ = writeln!(text, "> {line}");
        }
        text.push('\n');
    }
    text
}

/// An `llm` player's calls, tokens and cost, in one line.
fn model_usage(model: &crate::llm::Usage) -> String {
    let cost = model.cost_usd.map_or_else(
        || "cost unknown (no price)".to_owned(),
        |c| format!("{c:.4} USD"),
    );
    let budget = model
        .max_usd
        .map(|m| format!(" of max_model_usd {m}"))
        .unwrap_or_default();
    // How the answers were read: a reader judging the player wants to
    // know how often the model needed help.
    let answers = match model.structured {
        Some(true) => "; answers as structured output",
        Some(false) => "; answers read as text (no structured output)",
        None => "",
    };
    let help = if model.reasks + model.fallbacks > 0 {
        format!(
            "; {} re-asked after a bad answer, {} moves by the fallback",
            model.reasks, model.fallbacks
        )
    } else {
        String::new()
    };
    format!(
        "`{}`, {} calls ({} retried), {} input + {} output tokens, {cost}{budget}{answers}{help}",
        model.model, model.calls, model.retries, model.input_tokens, model.output_tokens
    )
}

fn quoted_list(items: &[String]) -> String {
    items
        .iter()
        .map(|a| format!("`{a}`"))
        .collect::<Vec<_>>()
        .join(" → ")
}

/// A few plain sentences on the play, from the metrics.
pub(crate) fn felt(report: &CellReport) -> String {
    let n = report.actions_taken;
    let m = &report.metrics;
    if report.state == CellState::NotPlayed {
        return "Nothing was played: the game never gave its first observation.\n".to_owned();
    }
    let mut text = match report.quit_reason {
        QuitReason::Done => format!("Reached the end of the game after {n} actions."),
        QuitReason::Patience => format!("Gave up bored after {n} actions: patience ran out."),
        QuitReason::Budget => format!("The budget stopped the play after {n} actions."),
        QuitReason::Crash => format!("The game crashed after {n} actions."),
        QuitReason::Hang => format!("The game stopped answering after {n} actions."),
        QuitReason::Interrupted => format!(
            "Interrupted after {n} actions; a resume plays this cell again from seed {}.",
            report.seed
        ),
        QuitReason::ScriptEnd => format!("The script ran out after {n} actions."),
        QuitReason::NoActions => format!("After {n} actions the game offered nothing to do."),
        QuitReason::BadAnswer => format!(
            "The model stopped naming a listed action after {n} actions, also when asked again."
        ),
        QuitReason::ModelUnreachable => {
            format!("The model endpoint stopped answering after {n} actions.")
        }
        QuitReason::ModelRefused => {
            format!("The model endpoint refused the request after {n} actions.")
        }
    };
    let _ = write!(text, " Saw {} different screens", m.distinct_observations);
    if n > 0 {
        #[expect(
            clippy::cast_precision_loss,
            reason = "a ratio for people; action counts are far below 2^52"
        )]
        let novelty = m.distinct_observations as f64 / (n as f64 + 1.0) * 100.0;
        let _ = write!(text, " ({novelty:.0}% of the moments were new)");
    }
    text.push('.');
    if m.goals > 0 {
        let _ = write!(text, " Reached {} goal(s).", m.goals);
    }
    if m.refused_actions > 0 {
        let _ = write!(text, " {} action(s) were refused.", m.refused_actions);
    }
    match m.resets {
        0 => {}
        1 => text.push_str(" Got stuck, and started over once to play on."),
        n => {
            let _ = write!(text, " Got stuck, and started over {n} times to play on.");
        }
    }
    if m.longest_unchanged > 1 {
        let _ = write!(
            text,
            " The longest stretch where nothing changed: {} actions.",
            m.longest_unchanged
        );
    }
    let _ = writeln!(text, " Final score {}.", m.final_score);
    text
}

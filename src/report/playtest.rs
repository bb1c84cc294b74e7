//! What a run's playing steps found, for the end of `plan run`: each cell's
//! report, the findings of all cells merged by fingerprint, and each
//! simulation's counts.
//!
//! Read from the files the steps left in the run's directory (a reused
//! cell's files are restored there too), so a resumed run counts the cells
//! an earlier process played.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::run::StepReport;
use crate::journal::run::StepState;
use crate::play::{CellReport, SimulateSummary};

/// The `playtest` part of `plan run --json`.
#[derive(Debug, Clone, Default, Serialize, schemars::JsonSchema)]
pub struct Playtest {
    pub cells: Vec<CellLine>,
    /// Every distinct finding (by fingerprint), most severe first.
    pub findings: Vec<FindingLine>,
    pub simulations: Vec<SimulationLine>,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct CellLine {
    pub step: String,
    pub persona: String,
    pub controller: String,
    pub seed: i64,
    /// `succeeded`, `reused`, `interrupted`, or `failed` (the game never
    /// got through `hello` and `reset`: nothing was played).
    pub state: String,
    pub quit_reason: String,
    pub actions_taken: u64,
    pub findings: usize,
    /// The cell's `report.md`.
    pub report: String,
    /// What looks wrong with the game but did not stop the cell (an
    /// observation that is not deterministic under its seed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct FindingLine {
    pub id: String,
    pub category: String,
    pub severity: String,
    pub title: String,
    /// `persona/controller` of every cell that met it.
    pub found_by: Vec<String>,
    /// The `report.md` of the first cell that met it (its evidence).
    pub report: String,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct SimulationLine {
    pub step: String,
    pub games: u64,
    pub completed: u64,
    pub crashed: u64,
    pub hung: u64,
    pub truncated: u64,
    /// Its `summary.json`; the failed games' traces are under `traces/` beside it.
    pub summary: String,
}

/// Collects what the steps of `steps` left in their directories
/// (`step_dir(id)`). `None` when no step played.
pub fn collect(steps: &[StepReport], step_dir: impl Fn(&str) -> PathBuf) -> Option<Playtest> {
    let mut playtest = Playtest::default();
    let mut findings: BTreeMap<String, FindingLine> = BTreeMap::new();
    let mut order: Vec<(u8, String)> = Vec::new();
    for step in steps {
        if !matches!(
            step.state,
            StepState::Succeeded | StepState::Reused | StepState::Interrupted | StepState::Failed
        ) {
            continue;
        }
        let dir = step_dir(&step.id);
        match step.kind.as_str() {
            "play" => {
                let Some(report) = read::<CellReport>(&dir.join("report.json")) else {
                    continue;
                };
                let report_md = shown(&dir.join("report.md"));
                for finding in &report.findings {
                    let by = format!("{}/{}", report.persona, report.controller);
                    let line = findings.entry(finding.id.clone()).or_insert_with(|| {
                        order.push((severity_rank(finding.severity), finding.id.clone()));
                        FindingLine {
                            id: finding.id.clone(),
                            category: finding.category.name().to_owned(),
                            severity: name_of(&finding.severity),
                            title: finding.title.clone(),
                            found_by: Vec::new(),
                            report: report_md.clone(),
                        }
                    });
                    if !line.found_by.contains(&by) {
                        line.found_by.push(by);
                    }
                }
                playtest.cells.push(CellLine {
                    step: step.id.clone(),
                    persona: report.persona.clone(),
                    controller: report.controller.clone(),
                    seed: report.seed,
                    state: step.state.word().to_owned(),
                    quit_reason: report.quit_reason.name().to_owned(),
                    actions_taken: report.actions_taken,
                    findings: report.findings.len(),
                    report: report_md,
                    warnings: report.warnings.clone(),
                });
            }
            "simulate" => {
                let path = dir.join(crate::steps::simulate::SUMMARY);
                let Some(summary) = read::<SimulateSummary>(&path) else {
                    continue;
                };
                playtest.simulations.push(SimulationLine {
                    step: step.id.clone(),
                    games: summary.games,
                    completed: summary.completed,
                    crashed: summary.crashed,
                    hung: summary.hung,
                    truncated: summary.truncated,
                    summary: shown(&path),
                });
            }
            _ => {}
        }
    }
    if playtest.cells.is_empty() && playtest.simulations.is_empty() {
        return None;
    }
    // Most severe first; among equals, in the order they were first met.
    order.sort_by_key(|(rank, _)| *rank);
    playtest.findings = order
        .into_iter()
        .filter_map(|(_, id)| findings.remove(&id))
        .collect();
    Some(playtest)
}

fn read<T: serde::de::DeserializeOwned>(path: &Path) -> Option<T> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

fn name_of(value: &impl Serialize) -> String {
    serde_json::to_value(value)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

fn severity_rank(severity: crate::play::findings::Severity) -> u8 {
    use crate::play::findings::Severity;
    match severity {
        Severity::Critical => 0,
        Severity::High => 1,
        Severity::Medium => 2,
        Severity::Low => 3,
    }
}

/// A path as the person who ran gameplan would type it: relative to the
/// working directory when it is below it.
fn shown(path: &Path) -> String {
    std::env::current_dir()
        .ok()
        .and_then(|cwd| path.strip_prefix(cwd).ok().map(Path::to_path_buf))
        .unwrap_or_else(|| path.to_path_buf())
        .display()
        .to_string()
}

/// The lines `plan run` prints after its summary.
pub fn text(playtest: &Playtest) -> String {
    let mut out = String::new();
    if !playtest.cells.is_empty() {
        let reused = playtest
            .cells
            .iter()
            .filter(|c| c.state == "reused")
            .count();
        let unplayed = playtest
            .cells
            .iter()
            .filter(|c| c.state == "failed")
            .count();
        let _ = writeln!(
            out,
            "playtest: {} ({} played, {reused} reused{}), {}",
            super::plural(playtest.cells.len(), "cell"),
            playtest.cells.len() - reused - unplayed,
            if unplayed > 0 {
                format!(", {unplayed} did not play")
            } else {
                String::new()
            },
            super::plural(playtest.findings.len(), "distinct finding")
        );
        for f in &playtest.findings {
            let _ = writeln!(
                out,
                "  {:<8} {:<8} {}  {} ({})",
                f.severity,
                f.category,
                f.id,
                one_line(&f.title, 90),
                f.found_by.join(", ")
            );
        }
        cell_warnings(&mut out, &playtest.cells);
        let dirs: Vec<&str> = playtest
            .cells
            .iter()
            .filter_map(|c| Path::new(&c.report).parent()?.parent()?.to_str())
            .collect();
        if let Some(first) = playtest.cells.first() {
            if dirs.windows(2).all(|w| w[0] == w[1]) && !dirs.is_empty() {
                let _ = writeln!(
                    out,
                    "  reports: {}/*/report.md (e.g. {})",
                    dirs[0], first.report
                );
            } else {
                let _ = writeln!(out, "  reports: e.g. {}", first.report);
            }
        }
    }
    for s in &playtest.simulations {
        let _ = writeln!(
            out,
            "simulate {}: {}, {} completed, {} crashed, {} hung, {} truncated ({})",
            s.step,
            super::plural(usize::try_from(s.games).unwrap_or(usize::MAX), "game"),
            s.completed,
            s.crashed,
            s.hung,
            s.truncated,
            s.summary
        );
    }
    out
}

/// The cells' warnings: the first few, each with its cell; a count of the rest.
fn cell_warnings(out: &mut String, cells: &[CellLine]) {
    const SHOWN: usize = 3;
    let warned: Vec<(&str, &str)> = cells
        .iter()
        .flat_map(|c| c.warnings.iter().map(|w| (c.step.as_str(), w.as_str())))
        .collect();
    for (step, warning) in warned.iter().take(SHOWN) {
        let _ = writeln!(out, "  warning: {step}: {warning}");
    }
    if warned.len() > SHOWN {
        let _ = writeln!(
            out,
            "  warning: {} more (each cell's report.md has its own)",
            warned.len() - SHOWN
        );
    }
}

/// `text` cut to `max` characters, on one line.
fn one_line(text: &str, max: usize) -> String {
    let flat: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if flat.chars().count() <= max {
        flat
    } else {
        let cut: String = flat.chars().take(max.saturating_sub(1)).collect();
        format!("{cut}…")
    }
}

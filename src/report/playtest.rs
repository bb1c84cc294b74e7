//! What a run's playing steps found, for the end of `plan run`: each cell's
//! report, the findings of all cells merged by fingerprint, and each
//! simulation's counts and distinct findings; and the failure line of a
//! simulation that met a crash or a hang.
//!
//! Each step's kind says what its step adds ([`PlaytestPart`], through
//! `Kind::playtest`): a cell, a simulation, or a merge of the cells; this
//! module names no kind. The parts are read from the files the steps left
//! in the run's directory (a reused cell's files are restored there too),
//! so a resumed run counts the cells an earlier process played. When a
//! merge (an `aggregate` step) read every cell, the playtest is its
//! `aggregate.json`; otherwise the cells are merged here by the same merge
//! (`report::aggregate`), so both list the same findings.
//!
//! Every finding points at its evidence: the cell (or simulated game) that
//! met it first, the real path of that trace in the run's directory, and
//! the `gameplan replay` (and for a crash or hang `gameplan shrink`)
//! command to copy.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::aggregate::{AGGREGATE_MD, Aggregate, CellInput, merge_findings, shrinkable};
use super::run::StepReport;
use crate::journal::run::StepState;
use crate::play::findings::{Category, Severity};
use crate::play::simulate::SimulatedFinding;
use crate::play::{CellReport, SimulateSummary};

/// At most this many findings are named in a simulation's failure line.
const FAILURE_LINE_FINDINGS: usize = 5;

/// The `playtest` part of `plan run --json`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Playtest {
    pub cells: Vec<CellLine>,
    /// Every distinct finding of the play cells (by fingerprint), most severe first.
    pub findings: Vec<FindingLine>,
    pub simulations: Vec<SimulationLine>,
    /// The `aggregate.md` of the aggregate step this playtest is, when one ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub aggregate: Option<String>,
    /// The baseline the findings were labelled against (`--baseline`, as
    /// given), when there was one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline: Option<String>,
    /// With a baseline: its findings this run did not meet again.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fixed: Option<Vec<super::baseline::BaselineFinding>>,
}

#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
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
    /// The cell's `trace.jsonl`.
    pub trace: String,
    /// The cell's `report.md`.
    pub report: String,
    /// What looks wrong with the game but did not stop the cell (an
    /// observation that is not deterministic under its seed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// One distinct finding, with where it was met first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FindingLine {
    pub id: String,
    /// A [`Category`]'s name (`crash`, …).
    pub category: String,
    /// A [`Severity`]'s name (`critical`, …).
    pub severity: String,
    pub title: String,
    /// What the fingerprint is made of besides the category (normalized).
    pub location: String,
    /// `persona/controller` of every cell that met it (a simulation's: the
    /// strategy of the first game that met it).
    pub found_by: Vec<String>,
    /// The step id of every play cell that met it (none for a simulation's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cells: Vec<String>,
    /// The cell or simulated game that met it first.
    pub first: FoundAt,
    /// A crash or hang that did not happen again when replayed in a fresh
    /// game (`unit.unconfirmed` for a lens over findings: always written,
    /// so a rule can name it on every finding).
    #[serde(default)]
    pub unconfirmed: bool,
    /// How many cells (of a simulation: games) met it.
    pub met: u64,
    /// The `report.md` of the first cell that met it (of a simulation: its `summary.json`).
    pub report: String,
    /// The trace of the first cell or game that met it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<String>,
    /// The command that plays that trace again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay: Option<String>,
    /// For a crash or a hang: the command that cuts that trace down.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shrink: Option<String>,
    /// Against the run's baseline (`plan run --baseline`): `new` or
    /// `known`; absent without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<super::baseline::Label>,
    /// Over the repeats of the cells that met it (a play step's `repeat =
    /// N`): `stable` when every play met it, else `flaky` with the counts;
    /// absent without repeats.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeats: Option<super::repeats::Repeats>,
}

/// Where a finding was met first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FoundAt {
    /// The step (a play cell's id, or the simulate step's).
    pub step: String,
    /// The persona (of a simulation: the strategy).
    pub persona: String,
    pub controller: String,
    pub seed: i64,
    /// Of a simulation: the game's number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub game: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SimulationLine {
    pub step: String,
    pub games: u64,
    pub completed: u64,
    pub crashed: u64,
    pub hung: u64,
    pub truncated: u64,
    /// Per strategy: the goal rate and the median steps to the goal.
    #[serde(default)]
    pub goals: Vec<crate::play::simulate::StrategyGoals>,
    /// Its `summary.json`; the traces are under `traces/` beside it.
    pub summary: String,
    /// Every distinct finding, most severe first, each with a trace.
    pub findings: Vec<FindingLine>,
}

/// A distinct finding of the whole run, for whatever judges the run by
/// its findings (`--fail-on`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunFinding<'a> {
    pub id: &'a str,
    pub category: Category,
    pub severity: Severity,
    pub title: &'a str,
    /// The first step that met it.
    pub step: &'a str,
    /// A crash or hang that did not reproduce on replay.
    pub unconfirmed: bool,
    /// Not known to the run's baseline (every finding is new without one).
    pub new: bool,
    /// Labelled `flaky` over its cells' repeats.
    pub flaky: bool,
}

impl RunFinding<'_> {
    /// What `fail_on` reads of it.
    pub fn judged(&self) -> crate::plan::model::Judged {
        crate::plan::model::Judged {
            category: self.category,
            severity: self.severity,
            unconfirmed: self.unconfirmed,
            new: self.new,
            flaky: self.flaky,
        }
    }
}

impl Playtest {
    /// Labels every finding `new` or `known` against `baseline` (the new
    /// first) and lists the baseline's findings not met again: what an
    /// aggregate step wrote, for a plan without one too, so `--fail-on
    /// new:…` judges by the same labels either way.
    pub fn compare(&mut self, baseline: &super::baseline::Baseline) {
        baseline.label_lines(&mut self.findings);
        for s in &mut self.simulations {
            baseline.label_lines(&mut s.findings);
        }
        let seen = self
            .findings
            .iter()
            .chain(self.simulations.iter().flat_map(|s| &s.findings))
            .map(|f| f.id.as_str());
        self.fixed = Some(baseline.fixed(seen));
        self.baseline = Some(baseline.source.clone());
    }

    /// Every distinct finding of the run's play cells and simulations, by
    /// fingerprint (a bug met by both is one), most severe first.
    pub fn distinct_findings(&self) -> Vec<RunFinding<'_>> {
        let mut out: Vec<RunFinding<'_>> = Vec::new();
        let all = self
            .findings
            .iter()
            .chain(self.simulations.iter().flat_map(|s| &s.findings));
        for f in all {
            if out.iter().any(|known| known.id == f.id) {
                continue;
            }
            let Some(category) = Category::ALL.into_iter().find(|c| c.name() == f.category) else {
                continue;
            };
            out.push(RunFinding {
                id: &f.id,
                category,
                severity: f.rank(),
                title: &f.title,
                step: &f.first.step,
                unconfirmed: f.unconfirmed,
                new: f.baseline != Some(super::baseline::Label::Known),
                flaky: f
                    .repeats
                    .is_some_and(|r| r.label == super::repeats::Stability::Flaky),
            });
        }
        out.sort_by_key(|f| f.severity);
        out
    }
}

/// What one step adds to the playtest, handed over by its kind
/// ([`crate::steps::Kind::playtest`]): the report names no kind, so a new
/// kind adds its part without this module knowing it.
#[derive(Debug, Clone)]
pub enum PlaytestPart {
    /// A play cell, whose `report.json`, `report.md` and `trace.jsonl`
    /// (when it wrote them) are in `dir`.
    Cell { dir: PathBuf },
    /// A simulation, whose counts and findings are its `summary` file
    /// (traces relative to the file's directory).
    Simulation { summary: PathBuf },
    /// A merge of the cells' reports: its `aggregate.json` (in
    /// `<run>/steps/<step>/`), which becomes the playtest when it read
    /// every cell of the run.
    Merged { aggregate_json: PathBuf },
}

/// Merges the parts the kinds of `steps` handed over (`parts`, by step id,
/// in plan order). `None` when no step played.
///
/// When a merged part (an `aggregate` step that succeeded or was reused)
/// read every play cell of the run, the playtest is its `aggregate.json`,
/// paths made the run's; otherwise the cells' reports are merged here, by
/// the same merge ([`super::aggregate::merge_findings`]).
pub fn collect(steps: &[StepReport], parts: &[(String, PlaytestPart)]) -> Option<Playtest> {
    let state = |id: &str| steps.iter().find(|s| s.id == id).map(|s| s.state);
    let ended = |id: &str| {
        matches!(
            state(id),
            Some(
                StepState::Succeeded
                    | StepState::Reused
                    | StepState::Interrupted
                    | StepState::Failed
            )
        )
    };
    let aggregate = parts
        .iter()
        .filter(|(id, _)| matches!(state(id), Some(StepState::Succeeded | StepState::Reused)))
        .find_map(|(_, part)| match part {
            PlaytestPart::Merged { aggregate_json } => {
                read::<Aggregate>(aggregate_json).map(|a| (aggregate_json.clone(), a))
            }
            _ => None,
        });
    if let Some((path, agg)) = aggregate {
        let covers_every_cell = parts
            .iter()
            .filter(|(id, part)| ended(id) && matches!(part, PlaytestPart::Cell { .. }))
            .all(|(id, _)| agg.cells.iter().any(|c| &c.step == id));
        // The run's directory: `<run>/steps/<aggregate>/aggregate.json`.
        if let (true, Some(run_dir)) = (covers_every_cell, path.ancestors().nth(3)) {
            return Some(from_aggregate(&agg, &path, run_dir, steps, parts));
        }
    }
    let mut playtest = Playtest::default();
    let mut inputs: Vec<CellInput> = Vec::new();
    for (id, part) in parts.iter().filter(|(id, _)| ended(id)) {
        match part {
            PlaytestPart::Cell { dir } => {
                let Some(report) = read::<CellReport>(&dir.join("report.json")) else {
                    continue;
                };
                let report_md = shown(&dir.join("report.md"));
                let trace_path = dir.join("trace.jsonl");
                playtest.cells.push(CellLine {
                    step: id.clone(),
                    persona: report.persona.clone(),
                    controller: report.controller.clone(),
                    seed: report.seed,
                    state: state(id)
                        .map(StepState::word)
                        .unwrap_or_default()
                        .to_owned(),
                    quit_reason: report.quit_reason.name().to_owned(),
                    actions_taken: report.actions_taken,
                    trace: shown(&trace_path),
                    findings: report.findings.len(),
                    report: report_md.clone(),
                    warnings: report.warnings.clone(),
                });
                inputs.push(CellInput {
                    step: id.clone(),
                    persona: report.persona.clone(),
                    controller: report.controller.clone(),
                    seed: report.seed,
                    report: Some(report),
                    report_sha256: None,
                    report_md,
                    trace: trace_path.is_file().then(|| shown(&trace_path)),
                });
            }
            PlaytestPart::Simulation { summary } => {
                if let Some(line) = simulation_at(id, summary) {
                    playtest.simulations.push(line);
                }
            }
            PlaytestPart::Merged { .. } => {}
        }
    }
    if playtest.cells.is_empty() && playtest.simulations.is_empty() {
        return None;
    }
    playtest.findings = merge_findings(&inputs);
    Some(playtest)
}

/// A simulate step's line, read from its summary file at `path`, paths as
/// the person who ran gameplan types them.
fn simulation_at(step: &str, path: &Path) -> Option<SimulationLine> {
    let summary = read::<SimulateSummary>(path)?;
    let dir = path.parent().unwrap_or(Path::new("."));
    Some(simulation_line(step, &summary, &shown(path), |t| {
        shown(&dir.join(t))
    }))
}

/// The playtest an aggregate step merged (`path`, its `aggregate.json`, in
/// `run_dir`): its cells with their states in this run, its findings and
/// simulations with the run's paths, and the simulations it did not read.
fn from_aggregate(
    agg: &Aggregate,
    path: &Path,
    run_dir: &Path,
    steps: &[StepReport],
    parts: &[(String, PlaytestPart)],
) -> Playtest {
    let at = |rel: &str| shown(&run_dir.join(rel));
    let cells = agg
        .cells
        .iter()
        .map(|c| CellLine {
            step: c.step.clone(),
            persona: c.persona.clone(),
            controller: c.controller.clone(),
            seed: c.seed,
            state: steps
                .iter()
                .find(|s| s.id == c.step)
                .map_or_else(|| c.state.name().to_owned(), |s| s.state.word().to_owned()),
            quit_reason: c.quit_reason.clone().unwrap_or_default(),
            actions_taken: c.actions_taken,
            findings: c.findings,
            trace: at(c.trace.as_deref().unwrap_or(&c.report)),
            report: at(&c.report),
            warnings: c.warnings.clone(),
        })
        .collect();
    let mut findings = agg.findings.clone();
    for line in &mut findings {
        relocate(line, &at);
    }
    let mut simulations = agg.simulations.clone();
    for s in &mut simulations {
        s.summary = at(&s.summary);
        for line in &mut s.findings {
            relocate(line, &at);
        }
    }
    for (id, part) in parts {
        let PlaytestPart::Simulation { summary } = part else {
            continue;
        };
        let state = steps.iter().find(|s| &s.id == id).map(|s| s.state);
        if !agg.simulations.iter().any(|read| &read.step == id)
            && matches!(
                state,
                Some(StepState::Succeeded | StepState::Reused | StepState::Failed)
            )
        {
            simulations.extend(simulation_at(id, summary));
        }
    }
    Playtest {
        cells,
        findings,
        simulations,
        aggregate: Some(shown(&path.with_file_name(AGGREGATE_MD))),
        baseline: None,
        fixed: agg.fixed.clone(),
    }
}

/// `line` with its paths (relative to the run's directory) made `at`'s,
/// and its commands made again from them.
fn relocate(line: &mut FindingLine, at: &impl Fn(&str) -> String) {
    line.report = at(&line.report);
    line.trace = line.trace.as_deref().map(at);
    line.replay = line.trace.as_deref().map(replay_command);
    line.shrink = line
        .shrink
        .as_ref()
        .and(line.trace.as_deref())
        .map(shrink_command);
}

/// A simulation's line: its counts and each distinct finding with the
/// trace of the first game that met it. `summary_path` is how the line
/// names its `summary.json`; `trace_of` turns a trace path of the summary
/// (relative to the step's directory) into the path the line names.
pub fn simulation_line(
    step: &str,
    summary: &SimulateSummary,
    summary_path: &str,
    trace_of: impl Fn(&Path) -> String,
) -> SimulationLine {
    SimulationLine {
        step: step.to_owned(),
        games: summary.games,
        completed: summary.completed,
        crashed: summary.crashed,
        hung: summary.hung,
        truncated: summary.truncated,
        goals: summary.strategies.clone(),
        summary: summary_path.to_owned(),
        findings: summary
            .findings
            .iter()
            .map(|f| simulated_line(step, f, &trace_of, summary_path))
            .collect(),
    }
}

/// A simulation's finding as a line of the playtest.
fn simulated_line(
    step: &str,
    f: &SimulatedFinding,
    trace_of: &impl Fn(&Path) -> String,
    summary: &str,
) -> FindingLine {
    let trace = f.trace.as_deref().map(trace_of);
    FindingLine {
        id: f.id.clone(),
        category: f.category.name().to_owned(),
        severity: f.severity.name().to_owned(),
        title: f.title.clone(),
        location: f.location.clone(),
        found_by: vec![f.strategy.clone()],
        cells: Vec::new(),
        first: FoundAt {
            step: step.to_owned(),
            persona: f.strategy.clone(),
            controller: crate::play::ControllerKind::Standard.name().to_owned(),
            seed: f.seed,
            game: Some(f.game),
        },
        met: f.games,
        report: summary.to_owned(),
        replay: trace.as_deref().map(replay_command),
        shrink: trace
            .as_deref()
            .filter(|_| shrinkable(f.category))
            .map(shrink_command),
        trace,
        unconfirmed: false,
        baseline: None,
        repeats: None,
    }
}

impl FindingLine {
    /// Its severity, for ordering (a name no [`Severity`] has sorts as `low`).
    pub(crate) fn rank(&self) -> Severity {
        super::aggregate::severity_of(&self.severity)
    }
}

/// `gameplan replay TRACE`, the path quoted for a shell.
pub fn replay_command(trace: &str) -> String {
    format!("gameplan replay {}", shell_word(trace))
}

/// `gameplan shrink TRACE --out shrunk.jsonl`, the path quoted for a shell.
pub fn shrink_command(trace: &str) -> String {
    format!("gameplan shrink {} --out shrunk.jsonl", shell_word(trace))
}

/// `text` as one word of a POSIX shell: as is when it holds nothing a
/// shell reads specially (a cell's `play[kid,jev,1]` is a glob), else in
/// single quotes.
pub fn shell_word(text: &str) -> String {
    let plain = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:@%+=,".contains(c));
    if plain {
        text.to_owned()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

fn read<T: serde::de::DeserializeOwned>(path: &Path) -> Option<T> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
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

/// How long a finding's title may be on its summary line.
const TITLE_WIDTH: usize = 90;

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
        baseline_line(&mut out, playtest);
        finding_lines(&mut out, &playtest.findings, "cell");
        fixed_lines(&mut out, playtest);
        cell_warnings(&mut out, &playtest.cells);
        let dirs: Vec<&str> = playtest
            .cells
            .iter()
            .filter_map(|c| Path::new(&c.report).parent()?.parent()?.to_str())
            .collect();
        // The example is a report with a finding in it, when there is one.
        let example = playtest
            .findings
            .first()
            .map_or_else(|| playtest.cells[0].report.as_str(), |f| f.report.as_str());
        if dirs.windows(2).all(|w| w[0] == w[1]) && !dirs.is_empty() {
            let _ = writeln!(out, "  reports: {}/*/report.md (e.g. {example})", dirs[0]);
        } else {
            let _ = writeln!(out, "  reports: e.g. {example}");
        }
        if let Some(aggregate) = &playtest.aggregate {
            let _ = writeln!(out, "  merged: {aggregate} (and aggregate.json beside it)");
        }
        if let Some(page) = super::html::shown_path(playtest) {
            let _ = writeln!(out, "  page: {page}");
        }
    }
    for s in &playtest.simulations {
        let _ = writeln!(
            out,
            "simulate {}: {}, {} completed, {} crashed, {} hung, {} truncated, {} ({})",
            s.step,
            super::plural(usize::try_from(s.games).unwrap_or(usize::MAX), "game"),
            s.completed,
            s.crashed,
            s.hung,
            s.truncated,
            super::plural(s.findings.len(), "distinct finding"),
            s.summary
        );
        if !s.goals.is_empty() {
            let _ = writeln!(
                out,
                "  goal: {}",
                super::play_results::strategy_goals(&s.goals)
            );
        }
        finding_lines(&mut out, &s.findings, "game");
    }
    out
}

/// With a baseline: how the findings stand against it, in a line.
fn baseline_line(out: &mut String, playtest: &Playtest) {
    let (Some(source), Some(fixed)) = (&playtest.baseline, &playtest.fixed) else {
        return;
    };
    let (new, known) = super::baseline::counts(&playtest.findings);
    let _ = writeln!(
        out,
        "  against the baseline {source}: {new} new, {known} known, {} fixed",
        fixed.len()
    );
}

/// With a baseline: each of its findings this run did not meet again.
fn fixed_lines(out: &mut String, playtest: &Playtest) {
    for f in playtest.fixed.iter().flatten() {
        let _ = writeln!(
            out,
            "  fixed    {:<8} {:<8} {}  {}",
            f.severity,
            f.category,
            f.id,
            one_line(&f.title, TITLE_WIDTH)
        );
    }
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

/// Each finding: severity, category, id and title, then where it was met
/// first (`unit`: `cell` or `game`) and the commands that replay and
/// shrink its trace.
fn finding_lines(out: &mut String, findings: &[FindingLine], unit: &str) {
    let titles: Vec<String> = findings
        .iter()
        .map(|f| one_line(&f.title, TITLE_WIDTH))
        .collect();
    for (i, f) in findings.iter().enumerate() {
        let alike: Vec<&FindingLine> = findings
            .iter()
            .zip(&titles)
            .filter(|(other, title)| other.id != f.id && **title == titles[i])
            .map(|(other, _)| other)
            .collect();
        let differs = if alike.is_empty() {
            String::new()
        } else {
            format!("  [differs: {}]", differing_part(f, &alike))
        };
        let flaky = if f.unconfirmed {
            "  [unconfirmed: did not happen again on replay]"
        } else {
            ""
        };
        let repeats = f
            .repeats
            .map(|r| format!("  [{}]", r.text()))
            .unwrap_or_default();
        // Against a baseline, each line says whether the change brought it.
        let label = f
            .baseline
            .map(|l| format!("{:<8} ", l.name()))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "  {label}{:<8} {:<8} {}  {}{differs}{flaky}{repeats}",
            f.severity, f.category, f.id, titles[i],
        );
        let more = match f.met.saturating_sub(1) {
            0 => String::new(),
            1 => format!(", and 1 more {unit}"),
            n => format!(", and {n} more {unit}s"),
        };
        let at = match f.first.game {
            Some(game) => format!("game {game} ({}, seed {})", f.first.persona, f.first.seed),
            None => format!(
                "{}/{} seed {}",
                f.first.persona, f.first.controller, f.first.seed
            ),
        };
        match &f.replay {
            Some(replay) => {
                let _ = writeln!(out, "      first in {at}{more}: {replay}");
            }
            None => {
                let _ = writeln!(out, "      first in {at}{more}: {}", f.report);
            }
        }
        if let Some(shrink) = &f.shrink {
            let _ = writeln!(out, "      {shrink}");
        }
    }
}

/// What tells `f` apart from the findings whose title looks the same: its
/// title and location from where they stop agreeing, cut short.
fn differing_part(f: &FindingLine, alike: &[&FindingLine]) -> String {
    let whole = |x: &FindingLine| format!("{} {}", x.title, x.location.replace('\n', " "));
    let mine: Vec<char> = whole(f).chars().collect();
    let common = alike
        .iter()
        .map(|other| {
            whole(other)
                .chars()
                .zip(&mine)
                .take_while(|(a, b)| a == *b)
                .count()
        })
        .min()
        .unwrap_or(0);
    // Back up to the start of the word where they part.
    let start = mine[..common]
        .iter()
        .rposition(|c| c.is_whitespace())
        .map_or(0, |p| p + 1);
    let part: String = mine[start..].iter().collect();
    let part = one_line(part.trim(), 60);
    if part.is_empty() {
        format!("fingerprint {}", f.id)
    } else if start > 0 {
        format!("…{part}")
    } else {
        part
    }
}

/// The message of a simulate step that met a crash or a hang: counts, then
/// each distinct finding (at most [`FAILURE_LINE_FINDINGS`]) with the trace
/// of the first game that met it, and the commands to replay the most
/// severe one and to shrink. `shown_trace` turns a trace path of the
/// summary into the path to print.
pub fn simulate_failure(
    summary: &SimulateSummary,
    shown_trace: impl Fn(&Path) -> String,
) -> String {
    let failed = summary.crashed + summary.hung;
    let mut text = format!(
        "{failed} of {} games failed ({} crashed, {} hung)",
        summary.games, summary.crashed, summary.hung,
    );
    let dir = summary
        .findings
        .iter()
        .find_map(|f| f.trace.as_deref()?.parent())
        .map(&shown_trace);
    let _ = write!(
        text,
        "; {}",
        super::plural(summary.findings.len(), "distinct finding")
    );
    if let Some(dir) = &dir {
        let _ = write!(text, ", traces in {dir}/");
    }
    let named: Vec<String> = summary
        .findings
        .iter()
        .take(FAILURE_LINE_FINDINGS)
        .map(|f| {
            let trace = f.trace.as_deref().and_then(Path::file_name).map_or_else(
                || "no trace".to_owned(),
                |n| n.to_string_lossy().into_owned(),
            );
            format!(
                "{}: {} ({}) {trace}",
                f.category.name(),
                one_line(&f.title, 60),
                super::plural(usize::try_from(f.games).unwrap_or(usize::MAX), "game")
            )
        })
        .collect();
    if !named.is_empty() {
        let _ = write!(text, ": {}", named.join("; "));
    }
    let rest = summary.findings.len().saturating_sub(FAILURE_LINE_FINDINGS);
    if rest > 0 {
        let _ = write!(text, "; and {rest} more in summary.json");
    }
    if let Some(first) = summary.findings.iter().find_map(|f| f.trace.as_deref()) {
        let _ = write!(
            text,
            "; replay one with `{}`, cut a crash or hang down with `gameplan shrink TRACE --out \
             shrunk.jsonl`",
            replay_command(&shown_trace(first))
        );
    }
    text
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

#[cfg(test)]
mod tests {
    use super::*;

    fn stuck_at(id: &str, place: &str) -> FindingLine {
        FindingLine {
            id: id.into(),
            category: "stuck".into(),
            severity: "low".into(),
            title: format!(
                "Nothing changed for 8 actions at \"{}\"",
                crate::text::cut(place, 80)
            ),
            location: crate::play::findings::normalize(place),
            found_by: vec!["kid/standard".into()],
            cells: vec!["play".into()],
            first: FoundAt {
                step: "play".into(),
                persona: "kid".into(),
                controller: "standard".into(),
                seed: 1,
                game: None,
            },
            met: 1,
            report: "r/report.md".into(),
            trace: Some("r/trace.jsonl".into()),
            replay: Some(replay_command("r/trace.jsonl")),
            shrink: None,
            unconfirmed: false,
            baseline: None,
            repeats: None,
        }
    }

    /// Issue 15 item 4: two places whose titles are cut alike show where
    /// they differ; a finding with a title of its own shows nothing more.
    #[test]
    fn findings_that_look_alike_show_the_part_that_differs() {
        let long =
            "A sealed vault, one of the two twin vaults the mad king had built long ago, in the";
        let findings = [
            stuck_at("aaaa", &format!("{long} west wing.")),
            stuck_at("bbbb", &format!("{long} east wing.")),
            stuck_at("cccc", "A cellar."),
        ];
        assert_eq!(findings[0].title, findings[1].title);
        let mut out = String::new();
        finding_lines(&mut out, &findings, "cell");
        let lines: Vec<&str> = out.lines().filter(|l| l.starts_with("  low")).collect();
        assert!(lines[0].ends_with("[differs: …west wing.]"), "{out}");
        assert!(lines[1].ends_with("[differs: …east wing.]"), "{out}");
        assert!(!lines[2].contains("differs"), "{out}");
    }

    /// What `--fail-on` judges: a bug met by a cell and by a simulation is
    /// one finding; the most severe comes first.
    #[test]
    fn the_run_s_distinct_findings_merge_play_and_simulate_by_fingerprint() {
        let mut crash = stuck_at("cccc", "x");
        crash.category = "crash".into();
        crash.severity = "critical".into();
        let playtest = Playtest {
            cells: Vec::new(),
            findings: vec![stuck_at("aaaa", "vault")],
            simulations: vec![SimulationLine {
                step: "sim".into(),
                games: 10,
                completed: 0,
                crashed: 1,
                hung: 0,
                truncated: 9,
                goals: Vec::new(),
                summary: "summary.json".into(),
                findings: vec![stuck_at("aaaa", "vault"), crash],
            }],
            aggregate: None,
            baseline: None,
            fixed: None,
        };
        let found: Vec<(&str, Severity)> = playtest
            .distinct_findings()
            .iter()
            .map(|f| (f.id, f.severity))
            .collect();
        assert_eq!(
            found,
            [("cccc", Severity::Critical), ("aaaa", Severity::Low)]
        );
    }

    #[test]
    fn a_cell_path_is_quoted_for_a_shell_and_a_plain_one_is_not() {
        assert_eq!(
            shell_word(".gameplan/runs/r/steps/sim/traces/game-3.trace.jsonl"),
            ".gameplan/runs/r/steps/sim/traces/game-3.trace.jsonl"
        );
        assert_eq!(
            shell_word("steps/play[kid,jev,1]/trace.jsonl"),
            "'steps/play[kid,jev,1]/trace.jsonl'"
        );
        assert_eq!(shell_word("it's"), r"'it'\''s'");
    }
}

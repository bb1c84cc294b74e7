//! The merge of play cell reports, and `aggregate.json` / `aggregate.md`,
//! the files an `aggregate` step writes (docs/getting-started.md › What a
//! cell and the aggregate write).
//!
//! **One place merges cell reports**: [`merge_findings`] is what the
//! `aggregate` step runs and what the end of `plan run` runs for a plan
//! without one (`report::playtest`), so both list the same findings in the
//! same order: deduplicated by fingerprint across personas and controllers,
//! most severe first, among equals in the order first met; each with every
//! cell that met it and the first cell's trace, with its replay (and for a
//! crash or hang, shrink) command.
//!
//! Beside the findings, the aggregate holds each cell's state (a cell that
//! did not play is listed, never counted complete), a "How it felt" section
//! per persona gathered from its cells, a controller comparison (runs,
//! complete, findings seen by several controllers or by one only, with its
//! limits said plainly, and which controller got further), the simulations
//! it read, and how far the players got (`report::progress_table`: the
//! progress table, and a `coverage` finding per `sometimes` rule no cell
//! met, added after the merge).
//!
//! Paths in `aggregate.json` are relative to the run's directory
//! (`steps/play[kid,jev,1]/trace.jsonl`): the document says the same for a
//! resumed run as for an uninterrupted one, and a reused aggregate restored
//! into a new run points at that run's restored cells.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::baseline::Label;
use super::playtest::{FindingLine, FoundAt, SimulationLine, replay_command, shrink_command};
use crate::play::CellReport;
use crate::play::cell_report::CellState;
use crate::play::findings::{Category, Severity};

/// The format version of `aggregate.json`.
pub const AGGREGATE_FORMAT: u32 = 1;

/// The file names an `aggregate` step writes in its directory.
pub const AGGREGATE_JSON: &str = "aggregate.json";
pub const AGGREGATE_MD: &str = "aggregate.md";

/// What the controller comparison can and cannot say, in its own words.
pub const COMPARISON_LIMITS: &str = "Each cell played in a separate game process: a finding \
     seen with one controller only is evidence about that controller, not proof. The other \
     controller may meet it on another seed, and a game that is not deterministic plays \
     differently in each process.";

/// `aggregate.json`: every play cell's report merged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(title = "gameplan aggregate")]
pub struct Aggregate {
    /// The format version (1).
    pub aggregate: u32,
    /// Every play cell it read, in the plan's order; paths relative to the
    /// run's directory.
    pub cells: Vec<AggregateCell>,
    /// Every distinct finding of the cells (by fingerprint), most severe
    /// first; paths relative to the run's directory.
    pub findings: Vec<FindingLine>,
    /// Per persona, how its cells felt.
    pub personas: Vec<PersonaSection>,
    pub controllers: ControllerComparison,
    /// The simulations it read, each with its distinct findings.
    pub simulations: Vec<SimulationLine>,
    /// Present when the run had a baseline (`plan run --baseline`): the
    /// baseline's findings this merge did not meet again. Each finding
    /// then says `baseline`: `new` or `known`, and the new come first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fixed: Option<Vec<super::baseline::BaselineFinding>>,
    /// How far the players got, per persona × controller and per
    /// controller (`report::progress_table`); present when a cell played
    /// to an end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<super::progress_table::ProgressTable>,
}

/// How a cell ended, as the aggregate counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AggregateCellState {
    /// It played to an end: complete.
    Played,
    /// Stopped by a signal; a resume plays it again.
    Interrupted,
    /// The game never gave its first observation: nothing was played.
    NotPlayed,
    /// It left no `report.json` (it was skipped, or never ran).
    NoReport,
}

impl AggregateCellState {
    pub fn name(self) -> &'static str {
        match self {
            AggregateCellState::Played => "played",
            AggregateCellState::Interrupted => "interrupted",
            AggregateCellState::NotPlayed => "not played",
            AggregateCellState::NoReport => "no report",
        }
    }
}

/// One play cell as the aggregate read it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AggregateCell {
    /// The cell's step id (`play[kid,jev,1]`).
    pub step: String,
    pub persona: String,
    pub controller: String,
    pub seed: i64,
    pub state: AggregateCellState,
    /// Why it did not play (state `not_played`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_played: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quit_reason: Option<String>,
    pub actions_taken: u64,
    /// How many findings the cell met.
    pub findings: usize,
    /// The sha256 of the `report.json` it read (none without one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report_sha256: Option<String>,
    /// Its `report.md`.
    pub report: String,
    /// Its `trace.jsonl`, when it wrote one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// One persona's cells, in their words ("How it felt" of each cell's report).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PersonaSection {
    pub persona: String,
    /// Its card, as the plan gives it (a card file: its path).
    pub card: String,
    pub felt: Vec<Felt>,
}

/// How one cell felt to its persona.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Felt {
    pub step: String,
    pub controller: String,
    pub seed: i64,
    /// What the play was like, from its metrics.
    pub text: String,
    /// The persona's own paragraph (an `llm` player writes one), as its
    /// cell's `report.md` quotes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub voice: Option<String>,
}

/// Per controller: how many cells it played and what they found, and which
/// findings more than one controller met.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ControllerComparison {
    /// What this comparison can and cannot say.
    pub limits: String,
    pub controllers: Vec<ControllerRow>,
    /// Findings met by cells of two controllers or more.
    pub seen_by_several: Vec<String>,
    /// Findings met by the cells of one controller only.
    pub seen_by_one: Vec<SeenByOne>,
    /// Which controller got further (completion, then median max score),
    /// with counts; absent with fewer than two controllers that played.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub further: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ControllerRow {
    pub controller: String,
    /// Cells of this controller.
    pub runs: usize,
    /// Cells that played to an end.
    pub complete: usize,
    /// Cells that did not (not played, interrupted, no report).
    pub incomplete: usize,
    /// Distinct findings its cells met.
    pub findings: Vec<String>,
    /// Of those, the ones no other controller met.
    pub only_here: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SeenByOne {
    pub id: String,
    pub controller: String,
}

/// One play cell as the merge reads it: its report (none when it left
/// none) and its files' paths as the caller shows them.
#[derive(Debug, Clone)]
pub struct CellInput {
    pub step: String,
    pub report: Option<CellReport>,
    pub report_sha256: Option<String>,
    /// Its `report.md`.
    pub report_md: String,
    /// Its `trace.jsonl`, when there is one.
    pub trace: Option<String>,
    /// Persona, controller and seed from the plan, for a cell with no report.
    pub persona: String,
    pub controller: String,
    pub seed: i64,
}

/// The findings of `cells` by fingerprint, most severe first (among equals,
/// in the order first met), each with every cell that met it and the first
/// one's trace and commands.
pub fn merge_findings(cells: &[CellInput]) -> Vec<FindingLine> {
    let mut lines: Vec<FindingLine> = Vec::new();
    for cell in cells {
        let Some(report) = &cell.report else {
            continue;
        };
        let by = format!("{}/{}", report.persona, report.controller);
        for finding in &report.findings {
            let known = lines.iter().position(|l| l.id == finding.id);
            let at = known.unwrap_or_else(|| {
                lines.push(FindingLine {
                    id: finding.id.clone(),
                    category: finding.category.name().to_owned(),
                    severity: finding.severity.name().to_owned(),
                    title: finding.title.clone(),
                    location: finding.location.clone(),
                    found_by: Vec::new(),
                    cells: Vec::new(),
                    first: FoundAt {
                        step: cell.step.clone(),
                        persona: report.persona.clone(),
                        controller: report.controller.clone(),
                        seed: report.seed,
                        game: None,
                    },
                    met: 0,
                    report: cell.report_md.clone(),
                    replay: cell.trace.as_deref().map(replay_command),
                    shrink: cell
                        .trace
                        .as_deref()
                        .filter(|_| shrinkable(finding.category))
                        .map(shrink_command),
                    trace: cell.trace.clone(),
                    unconfirmed: finding.unconfirmed,
                    baseline: None,
                    repeats: None,
                });
                lines.len() - 1
            });
            let line = &mut lines[at];
            // One cell where it reproduced makes it a confirmed bug.
            if line.unconfirmed && !finding.unconfirmed {
                line.unconfirmed = false;
                finding.severity.name().clone_into(&mut line.severity);
            }
            line.met += 1;
            if !line.found_by.contains(&by) {
                line.found_by.push(by.clone());
            }
            if !line.cells.contains(&cell.step) {
                line.cells.push(cell.step.clone());
            }
        }
    }
    super::repeats::label(&mut lines, cells);
    // A stable sort: among equals, the order first met stays.
    lines.sort_by_key(FindingLine::rank);
    lines
}

/// Crashes, hangs and broken invariants are what `gameplan shrink` cuts
/// down.
pub(crate) fn shrinkable(category: Category) -> bool {
    matches!(
        category,
        Category::Crash | Category::Hang | Category::Invariant
    )
}

/// A persona of the plan: its slug and its card as the aggregate shows it.
pub struct PersonaCard {
    pub slug: String,
    pub card: String,
}

/// Merges `cells` and `simulations` into the aggregate.
pub fn build(
    cells: &[CellInput],
    personas: &[PersonaCard],
    simulations: Vec<SimulationLine>,
) -> Aggregate {
    let findings = merge_findings(cells);
    let rows: Vec<AggregateCell> = cells.iter().map(cell_row).collect();
    Aggregate {
        aggregate: AGGREGATE_FORMAT,
        personas: persona_sections(cells, personas),
        controllers: compare_controllers(&rows, &findings),
        cells: rows,
        findings,
        simulations,
        fixed: None,
        progress: None,
    }
}

fn cell_row(cell: &CellInput) -> AggregateCell {
    let Some(report) = &cell.report else {
        return AggregateCell {
            step: cell.step.clone(),
            persona: cell.persona.clone(),
            controller: cell.controller.clone(),
            seed: cell.seed,
            state: AggregateCellState::NoReport,
            not_played: None,
            quit_reason: None,
            actions_taken: 0,
            findings: 0,
            report_sha256: None,
            report: cell.report_md.clone(),
            trace: None,
            warnings: Vec::new(),
        };
    };
    AggregateCell {
        step: cell.step.clone(),
        persona: report.persona.clone(),
        controller: report.controller.clone(),
        seed: report.seed,
        state: match report.state {
            CellState::Succeeded => AggregateCellState::Played,
            CellState::Interrupted => AggregateCellState::Interrupted,
            CellState::NotPlayed => AggregateCellState::NotPlayed,
        },
        not_played: report.not_played.as_ref().map(ToString::to_string),
        quit_reason: Some(report.quit_reason.name().to_owned()),
        actions_taken: report.actions_taken,
        findings: report.findings.len(),
        report_sha256: cell.report_sha256.clone(),
        report: cell.report_md.clone(),
        trace: cell.trace.clone(),
        warnings: report.warnings.clone(),
    }
}

/// Each persona of the plan that has a cell (then any persona the reports
/// name that the plan does not), with each of its cells' "How it felt".
fn persona_sections(cells: &[CellInput], personas: &[PersonaCard]) -> Vec<PersonaSection> {
    let mut slugs: Vec<&str> = personas.iter().map(|p| p.slug.as_str()).collect();
    for cell in cells {
        if !slugs.contains(&cell.persona.as_str()) {
            slugs.push(&cell.persona);
        }
    }
    slugs
        .into_iter()
        .filter_map(|slug| {
            let felt: Vec<Felt> = cells
                .iter()
                .filter(|c| c.persona == slug)
                .map(|c| Felt {
                    step: c.step.clone(),
                    controller: c.controller.clone(),
                    seed: c.seed,
                    text: c.report.as_ref().map_or_else(
                        || "No report: the cell did not run.".to_owned(),
                        |r| super::play_cell::felt(r).trim_end().to_owned(),
                    ),
                    voice: c
                        .report
                        .as_ref()
                        .and_then(|r| r.felt.as_deref())
                        .map(str::trim)
                        .filter(|v| !v.is_empty())
                        .map(str::to_owned),
                })
                .collect();
            (!felt.is_empty()).then(|| PersonaSection {
                persona: slug.to_owned(),
                card: personas
                    .iter()
                    .find(|p| p.slug == slug)
                    .map(|p| p.card.clone())
                    .unwrap_or_default(),
                felt,
            })
        })
        .collect()
}

fn compare_controllers(cells: &[AggregateCell], findings: &[FindingLine]) -> ControllerComparison {
    let mut names: Vec<&str> = Vec::new();
    for cell in cells {
        if !names.contains(&cell.controller.as_str()) {
            names.push(&cell.controller);
        }
    }
    // The controllers whose cells met each finding.
    let met_by = |f: &FindingLine| -> BTreeSet<&str> {
        cells
            .iter()
            .filter(|c| f.cells.contains(&c.step))
            .map(|c| c.controller.as_str())
            .collect()
    };
    let mut seen_by_several = Vec::new();
    let mut seen_by_one = Vec::new();
    for f in findings {
        let by = met_by(f);
        if by.len() > 1 {
            seen_by_several.push(f.id.clone());
        } else if let Some(only) = by.first() {
            seen_by_one.push(SeenByOne {
                id: f.id.clone(),
                controller: (*only).to_owned(),
            });
        }
    }
    let controllers = names
        .into_iter()
        .map(|name| {
            let mine: Vec<&AggregateCell> = cells.iter().filter(|c| c.controller == name).collect();
            let complete = mine
                .iter()
                .filter(|c| c.state == AggregateCellState::Played)
                .count();
            ControllerRow {
                controller: name.to_owned(),
                runs: mine.len(),
                complete,
                incomplete: mine.len() - complete,
                findings: findings
                    .iter()
                    .filter(|f| met_by(f).contains(name))
                    .map(|f| f.id.clone())
                    .collect(),
                only_here: seen_by_one
                    .iter()
                    .filter(|s| s.controller == name)
                    .map(|s| s.id.clone())
                    .collect(),
            }
        })
        .collect();
    ControllerComparison {
        limits: COMPARISON_LIMITS.to_owned(),
        controllers,
        seen_by_several,
        seen_by_one,
        further: None,
    }
}

/// `aggregate.md`: Summary, Findings, How it felt (per persona), Controller
/// comparison, Cells, Simulations.
pub fn markdown(agg: &Aggregate) -> String {
    let mut md = String::with_capacity(4096);
    md.push_str("# Playtest: the merged report\n\n");
    md.push_str(
        "Paths are relative to the run's directory (`.gameplan/runs/<run-id>/`), two levels \
         above this file.\n\n",
    );
    md.push_str("## Summary\n\n");
    let complete = agg
        .cells
        .iter()
        .filter(|c| c.state == AggregateCellState::Played)
        .count();
    let _ = writeln!(md, "- Cells: {} ({complete} complete)", agg.cells.len());
    let _ = writeln!(md, "- Distinct findings: {}", agg.findings.len());
    if let Some(fixed) = &agg.fixed {
        let (new, known) = super::baseline::counts(&agg.findings);
        let _ = writeln!(
            md,
            "- Against the baseline: {new} new, {known} known, {} fixed",
            fixed.len()
        );
    }
    for s in &agg.simulations {
        let _ = writeln!(
            md,
            "- Simulation `{}`: {} games, {} distinct findings",
            s.step,
            s.games,
            s.findings.len()
        );
    }
    findings_section(&mut md, agg);
    super::progress_table::section(&mut md, agg);
    felt_section(&mut md, agg);
    comparison_section(&mut md, agg);
    cells_section(&mut md, agg);
    md
}

fn findings_section(md: &mut String, agg: &Aggregate) {
    md.push_str("\n## Findings\n\n");
    let Some(fixed) = &agg.fixed else {
        if agg.findings.is_empty() {
            md.push_str("None.\n");
        }
        finding_items(md, agg.findings.iter());
        return;
    };
    // Against a baseline: what the change brought first, then what was
    // there before, then what it fixed.
    for label in [Label::New, Label::Known] {
        let mine: Vec<&FindingLine> = agg
            .findings
            .iter()
            .filter(|f| f.baseline == Some(label))
            .collect();
        let _ = writeln!(md, "### {} ({})\n", label_heading(label), mine.len());
        if mine.is_empty() {
            md.push_str("None.\n");
        }
        finding_items(md, mine.into_iter());
        md.push('\n');
    }
    let _ = writeln!(md, "### Fixed ({})\n", fixed.len());
    if fixed.is_empty() {
        md.push_str("None: every finding of the baseline was met again.\n");
    }
    for f in fixed {
        let _ = writeln!(
            md,
            "- **{}** {} `{}`: {}",
            f.severity,
            f.category,
            f.id,
            f.title.replace('\n', " ")
        );
    }
}

/// A part's heading: what its label means.
fn label_heading(label: Label) -> &'static str {
    match label {
        Label::New => "New: not in the baseline",
        Label::Known => "Known: in the baseline too",
    }
}

fn finding_items<'a>(md: &mut String, findings: impl Iterator<Item = &'a FindingLine>) {
    for f in findings {
        let _ = writeln!(
            md,
            "- **{}** {} {}{} `{}`: {}",
            f.severity,
            f.category,
            plural_cells(f.cells.len()),
            f.repeats
                .map(|r| format!(", {}", r.text()))
                .unwrap_or_default(),
            f.id,
            f.title.replace('\n', " ")
        );
        let _ = writeln!(md, "  - met by: {}", f.cells.join(", "));
        if let Some(replay) = &f.replay {
            let _ = writeln!(md, "  - replay: `{replay}`");
        }
        if let Some(shrink) = &f.shrink {
            let _ = writeln!(md, "  - shrink: `{shrink}`");
        }
    }
}

fn felt_section(md: &mut String, agg: &Aggregate) {
    md.push_str("\n## How it felt\n\n");
    for p in &agg.personas {
        let _ = writeln!(md, "### {}\n", p.persona);
        if !p.card.is_empty() {
            let _ = writeln!(md, "> {}\n", p.card.replace('\n', " "));
        }
        for felt in &p.felt {
            let _ = writeln!(
                md,
                "- With {} (seed {}): {}",
                felt.controller, felt.seed, felt.text
            );
            // The persona's words, quoted under its cell's line (a list
            // item's block quote: indented, so it stays in the item).
            if let Some(voice) = &felt.voice {
                md.push('\n');
                for line in voice.lines() {
                    let _ = writeln!(md, "  > {line}");
                }
                md.push('\n');
            }
        }
        md.push('\n');
    }
}

fn comparison_section(md: &mut String, agg: &Aggregate) {
    md.push_str("## Controller comparison\n\n");
    let _ = writeln!(md, "{}\n", agg.controllers.limits);
    md.push_str("| controller | runs | complete | findings | only this controller |\n");
    md.push_str("|---|---|---|---|---|\n");
    for row in &agg.controllers.controllers {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} |",
            row.controller,
            row.runs,
            row.complete,
            row.findings.len(),
            row.only_here.len()
        );
    }
    if let Some(further) = &agg.controllers.further {
        let _ = writeln!(md, "\n{further}");
    }
    let _ = writeln!(
        md,
        "\nSeen by several controllers: {}\n",
        id_list(&agg.controllers.seen_by_several)
    );
    let by_one: Vec<String> = agg
        .controllers
        .seen_by_one
        .iter()
        .map(|s| format!("`{}` ({})", s.id, s.controller))
        .collect();
    let _ = writeln!(
        md,
        "Seen by one controller only: {}",
        if by_one.is_empty() {
            "none".to_owned()
        } else {
            by_one.join(", ")
        }
    );
}

fn cells_section(md: &mut String, agg: &Aggregate) {
    md.push_str("\n## Cells\n\n");
    for c in &agg.cells {
        let _ = write!(
            md,
            "- `{}`: {}, {} actions, {} findings",
            c.step,
            c.state.name(),
            c.actions_taken,
            c.findings
        );
        if let Some(why) = &c.not_played {
            let _ = write!(md, " ({why})");
        }
        let _ = writeln!(md, "; {}", c.report);
    }
    if !agg.simulations.is_empty() {
        md.push_str("\n## Simulations\n\n");
        for s in &agg.simulations {
            let _ = writeln!(
                md,
                "- `{}`: {} games, {} completed, {} crashed, {} hung, {} truncated ({})",
                s.step, s.games, s.completed, s.crashed, s.hung, s.truncated, s.summary
            );
            if !s.goals.is_empty() {
                let goals = super::play_results::strategy_goals(&s.goals);
                let _ = writeln!(md, "  - per strategy: {goals}");
            }
            for f in &s.findings {
                let _ = writeln!(
                    md,
                    "  - **{}** {} `{}`: {}",
                    f.severity,
                    f.category,
                    f.id,
                    f.title.replace('\n', " ")
                );
            }
        }
    }
}

fn plural_cells(n: usize) -> String {
    format!("({})", super::plural(n, "cell"))
}

fn id_list(ids: &[String]) -> String {
    if ids.is_empty() {
        "none".to_owned()
    } else {
        ids.iter()
            .map(|id| format!("`{id}`"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The severity a finding line names (a name no [`Severity`] has is `low`).
pub(crate) fn severity_of(name: &str) -> Severity {
    Severity::ALL
        .into_iter()
        .find(|s| s.name() == name)
        .unwrap_or(Severity::Low)
}

/// The `JUnit` cases of a merge: one per distinct finding, classname its
/// category. A case is `skipped` ("not judged") unless the run's `fail_on`
/// judged the findings, which fails the cases of those it matched and
/// passes the rest (`run_summary`): a finding alone never turns a CI check
/// red, as it never fails the run. Paths are the run directory's, as in
/// `aggregate.json`, so a reused aggregate reports what it first did.
///
/// Against a baseline the new findings come first (as in `aggregate.json`),
/// each case says `new` or `known`, and each fixed finding is a passed
/// case of the same name its finding had, so a test report shows the bug's
/// case turn green.
pub fn junit_cases(agg: &Aggregate) -> Vec<super::run::JunitCase> {
    let mut cases: Vec<super::run::JunitCase> = agg.findings.iter().map(finding_case).collect();
    for f in agg.fixed.iter().flatten() {
        cases.push(super::run::JunitCase {
            name: format!("{} {}", f.id, f.title),
            classname: f.category.clone(),
            outcome: super::run::CaseOutcome::Passed,
            time_ms: None,
            text: Some(format!(
                "fixed: {} {} {}: {}\nthe baseline had it; this run did not meet it again\n",
                f.severity, f.category, f.id, f.title
            )),
            finding: None,
        });
    }
    cases
}

fn finding_case(f: &FindingLine) -> super::run::JunitCase {
    let mut label = f
        .baseline
        .map(|l| format!("{} ", l.name()))
        .unwrap_or_default();
    if let Some(r) = f.repeats {
        label = format!("{label}{} ", r.text());
    }
    let mut text = format!(
        "{label}{} {} {}: {}\nwhere: {}\nmet by {} ({}), first in {} seed {} ({})\nreport: {}\n",
        f.severity,
        f.category,
        f.id,
        f.title,
        f.location,
        super::plural(usize::try_from(f.met).unwrap_or(usize::MAX), "cell"),
        f.found_by.join(", "),
        f.first.step,
        f.first.seed,
        if f.first.controller.is_empty() {
            f.first.persona.clone()
        } else {
            format!("{}/{}", f.first.persona, f.first.controller)
        },
        f.report,
    );
    for command in [&f.replay, &f.shrink].into_iter().flatten() {
        let _ = writeln!(text, "{command}");
    }
    text.push_str(
        "(paths are relative to the run's directory, .gameplan/runs/<run-id>/, whose \
         report.html shows every finding with its evidence)\n",
    );
    super::run::JunitCase {
        name: format!("{} {}", f.id, f.title),
        classname: f.category.clone(),
        outcome: super::run::CaseOutcome::Skipped {
            message: format!(
                "{label}{} {}: not judged (set --fail-on or fail_on to fail on it)",
                f.severity, f.category
            ),
        },
        time_ms: None,
        text: Some(text),
        finding: Some(f.id.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_report(step: &str, controller: &str) -> CellInput {
        CellInput {
            step: step.into(),
            report: None,
            report_sha256: None,
            report_md: format!("steps/{step}/report.md"),
            trace: None,
            persona: "kid".into(),
            controller: controller.into(),
            seed: 1,
        }
    }

    /// A cell that left no report (it was skipped) is listed, by its
    /// persona, and counts as a run that did not complete.
    #[test]
    fn a_cell_without_a_report_is_listed_and_not_complete() {
        let cells = [no_report("play[kid,jev,1]", "jev")];
        let personas = [PersonaCard {
            slug: "kid".into(),
            card: "Clicks.".into(),
        }];
        let agg = build(&cells, &personas, Vec::new());
        assert_eq!(agg.cells[0].state, AggregateCellState::NoReport);
        let row = &agg.controllers.controllers[0];
        assert_eq!((row.runs, row.complete, row.incomplete), (1, 0, 1));
        assert_eq!(
            agg.personas[0].felt[0].text,
            "No report: the cell did not run."
        );
        assert!(markdown(&agg).contains("`play[kid,jev,1]`: no report"));
    }
}

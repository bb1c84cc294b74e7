//! How far the players got, in the aggregate (docs/invariants.md ›
//! Progress in the aggregate): the `progress` table of `aggregate.json`
//! and `aggregate.md` (per persona × controller, and per controller: cells
//! played, completion, median steps to the goal, median max score,
//! coverage), the controller comparison's sentence on which controller got
//! further, and one `coverage` finding per `sometimes` invariant no cell
//! met.
//!
//! Every number is read from the cells' `report.json` (`progress`), over
//! the cells that played to an end: an interrupted cell is played again
//! by a resume, and a cell that did not play has no progress. The table is
//! there whenever a cell played, goal or not: every played cell has a max
//! score and distinct observations, which say how far the players went
//! when the plan has no goal; only completion and steps to the goal need
//! one (`game.goal`, or a cell whose game sent a `goal` event), and
//! without one they are left out rather than shown as 0%, which would
//! read as "nobody made it".
//!
//! `report::aggregate` calls this after its merge (the findings merged by
//! fingerprint): the coverage findings are added after the merged ones
//! (they are low, the last severity, so the order by severity holds), then
//! a baseline labels them like any other.

use std::fmt::Write as _;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::aggregate::{Aggregate, CellInput};
use super::play_results::number;
use super::playtest::{FindingLine, FoundAt};
use crate::play::CellReport;
use crate::play::cell_report::CellState;
use crate::play::findings::{Category, fingerprint};
use crate::play::goal::{median, median_f64};

/// What the plan says that the cells' reports do not: whether it has a
/// goal, and its `sometimes` rules.
#[derive(Debug, Clone, Default)]
pub struct PlanProgress {
    /// `game.goal` is set.
    pub goal: bool,
    /// Each `sometimes` invariant: its name and its expression, in the
    /// plan's order.
    pub sometimes: Vec<(String, String)>,
}

/// `aggregate.json`'s `progress`: how far the players got.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ProgressTable {
    /// Whether the playtest had a goal: `game.goal` is set, or a cell's
    /// game sent a `goal` event. Without one there is no completion rate
    /// and no steps to the goal.
    pub goal: bool,
    /// Per persona × controller, in the order their cells come.
    pub rows: Vec<ProgressRow>,
    /// Per controller, every persona's cells together: what the
    /// controller comparison's `further` is read from.
    pub controllers: Vec<ControllerProgress>,
}

/// One persona × controller of the progress table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ProgressRow {
    pub persona: String,
    pub controller: String,
    #[serde(flatten)]
    pub numbers: ProgressNumbers,
}

/// One controller, all personas together.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ControllerProgress {
    pub controller: String,
    #[serde(flatten)]
    pub numbers: ProgressNumbers,
}

/// How far a group of cells got, from each played cell's `progress`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ProgressNumbers {
    /// Cells of the group.
    pub cells: usize,
    /// Of those, the cells that played to an end: what the rest counts.
    pub played: usize,
    /// Played cells that reached the goal (`progress.goal_reached`).
    pub goals_reached: usize,
    /// `goals_reached / played`; absent without a goal or a played cell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_rate: Option<f64>,
    /// The median of `progress.goal_step` of the cells that reached the goal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub median_steps_to_goal: Option<f64>,
    /// The median of the played cells' `progress.max_score`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub median_max_score: Option<f64>,
    /// Coverage: the median of the played cells'
    /// `progress.distinct_observations`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub median_distinct_observations: Option<f64>,
}

/// Adds to `agg` (merged from `cells`) its progress table, the controller
/// comparison's `further`, and a `coverage` finding per `sometimes` rule
/// of `plan` that cells played and none met.
pub fn apply(agg: &mut Aggregate, cells: &[CellInput], plan: &PlanProgress) {
    agg.findings.extend(unmet_sometimes(cells, &plan.sometimes));
    agg.progress = table(cells, plan.goal);
    agg.controllers.further = agg.progress.as_ref().and_then(further);
}

/// The cells that played to an end, with their reports.
fn played(cells: &[CellInput]) -> impl Iterator<Item = (&CellInput, &CellReport)> {
    cells.iter().filter_map(|c| {
        let report = c.report.as_ref()?;
        (report.state == CellState::Succeeded).then_some((c, report))
    })
}

/// The progress table: none when no cell played to an end.
fn table(cells: &[CellInput], plan_goal: bool) -> Option<ProgressTable> {
    played(cells).next()?;
    let goal = plan_goal || played(cells).any(|(_, r)| r.progress.goal_reached);
    let mut pairs: Vec<(&str, &str)> = Vec::new();
    let mut controllers: Vec<&str> = Vec::new();
    for cell in cells {
        if !pairs.contains(&(cell.persona.as_str(), cell.controller.as_str())) {
            pairs.push((&cell.persona, &cell.controller));
        }
        if !controllers.contains(&cell.controller.as_str()) {
            controllers.push(&cell.controller);
        }
    }
    let rows = pairs
        .into_iter()
        .map(|(persona, controller)| ProgressRow {
            persona: persona.to_owned(),
            controller: controller.to_owned(),
            numbers: numbers(cells, goal, |c| {
                c.persona == persona && c.controller == controller
            }),
        })
        .collect();
    let controllers = controllers
        .into_iter()
        .map(|controller| ControllerProgress {
            controller: controller.to_owned(),
            numbers: numbers(cells, goal, |c| c.controller == controller),
        })
        .collect();
    Some(ProgressTable {
        goal,
        rows,
        controllers,
    })
}

/// The numbers of the cells `mine` picks.
fn numbers(cells: &[CellInput], goal: bool, mine: impl Fn(&CellInput) -> bool) -> ProgressNumbers {
    let group: Vec<&CellInput> = cells.iter().filter(|c| mine(c)).collect();
    let reports: Vec<&CellReport> = cells
        .iter()
        .filter(|c| mine(c))
        .filter_map(|c| c.report.as_ref())
        .filter(|r| r.state == CellState::Succeeded)
        .collect();
    let goals_reached = reports.iter().filter(|r| r.progress.goal_reached).count();
    let mut steps: Vec<u64> = reports
        .iter()
        .filter(|r| r.progress.goal_reached)
        .filter_map(|r| r.progress.goal_step)
        .collect();
    let mut scores: Vec<f64> = reports.iter().map(|r| r.progress.max_score).collect();
    let mut seen: Vec<u64> = reports
        .iter()
        .map(|r| r.progress.distinct_observations)
        .collect();
    #[expect(clippy::cast_precision_loss, reason = "cell counts, far below 2^52")]
    let completion_rate =
        (goal && !reports.is_empty()).then(|| goals_reached as f64 / reports.len() as f64);
    ProgressNumbers {
        cells: group.len(),
        played: reports.len(),
        goals_reached,
        completion_rate,
        median_steps_to_goal: median(&mut steps),
        median_max_score: median_f64(&mut scores),
        median_distinct_observations: median(&mut seen),
    }
}

/// Which controller got further, with counts: by completion first (with a
/// goal), then by median max score. None with fewer than two controllers
/// that played a cell to an end.
fn further(table: &ProgressTable) -> Option<String> {
    let mut ranked: Vec<&ControllerProgress> = table
        .controllers
        .iter()
        .filter(|c| c.numbers.played > 0)
        .collect();
    if ranked.len() < 2 {
        return None;
    }
    let rate = |c: &ControllerProgress| c.numbers.completion_rate.unwrap_or(0.0);
    let score = |c: &ControllerProgress| c.numbers.median_max_score.unwrap_or(0.0);
    // A stable sort: among equals, the plan's order stays.
    ranked.sort_by(|a, b| {
        rate(b)
            .total_cmp(&rate(a))
            .then(score(b).total_cmp(&score(a)))
    });
    let (first, second) = (ranked[0], ranked[1]);
    let ahead = rate(first) > rate(second) || score(first) > score(second);
    let verdict = if rate(first) > rate(second) {
        format!("`{}` got further", first.controller)
    } else if ahead {
        if table.goal {
            format!(
                "`{}` got further on score (the same completion)",
                first.controller
            )
        } else {
            format!("`{}` got further on score (no goal)", first.controller)
        }
    } else {
        "No controller got further".to_owned()
    };
    let counts: Vec<String> = ranked
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let n = &c.numbers;
            let score = n.median_max_score.map_or_else(|| "-".to_owned(), number);
            // The verdict names the first when it got further.
            let who = if i == 0 && ahead {
                "it".to_owned()
            } else {
                format!("`{}`", c.controller)
            };
            match (table.goal, i) {
                (true, 0) => format!(
                    "{who} reached the goal in {} of {} cells (median max score {score})",
                    n.goals_reached, n.played
                ),
                (true, _) => format!(
                    "{who} in {} of {} (median max score {score})",
                    n.goals_reached, n.played
                ),
                (false, 0) => format!(
                    "{who} had a median max score of {score} over {} cells",
                    n.played
                ),
                (false, _) => format!("{who} {score} over {}", n.played),
            }
        })
        .collect();
    Some(format!(
        "{verdict}: {}. Evidence from these cells and seeds, not proof: another seed may rank \
         them otherwise.",
        counts.join(", ")
    ))
}

/// One `coverage` finding per rule of `sometimes` that cells played and
/// none held: titled "no player ever reached NAME", its location the rule
/// (`sometimes NAME: EXPR`, what its fingerprint is made of), met by every
/// cell that played it. It has no trace: nothing replays a thing not done.
fn unmet_sometimes(cells: &[CellInput], sometimes: &[(String, String)]) -> Vec<FindingLine> {
    sometimes
        .iter()
        .filter_map(|(name, expr)| {
            let judged: Vec<(&CellInput, &CellReport)> = cells
                .iter()
                .filter_map(|c| Some((c, c.report.as_ref()?)))
                .filter(|(_, r)| r.progress.sometimes.contains_key(name))
                .collect();
            let (first_cell, first) = *judged.first()?;
            if judged.iter().any(|(_, r)| r.progress.sometimes[name]) {
                return None;
            }
            let location = format!("sometimes {name}: `{expr}`");
            let mut found_by: Vec<String> = Vec::new();
            for (_, r) in &judged {
                let by = format!("{}/{}", r.persona, r.controller);
                if !found_by.contains(&by) {
                    found_by.push(by);
                }
            }
            Some(FindingLine {
                id: fingerprint(Category::Coverage, &location),
                category: Category::Coverage.name().to_owned(),
                severity: Category::Coverage.severity().name().to_owned(),
                title: format!("no player ever reached {name}"),
                location,
                found_by,
                cells: judged.iter().map(|(c, _)| c.step.clone()).collect(),
                first: FoundAt {
                    step: first_cell.step.clone(),
                    persona: first.persona.clone(),
                    controller: first.controller.clone(),
                    seed: first.seed,
                    game: None,
                },
                unconfirmed: false,
                met: judged.len() as u64,
                report: first_cell.report_md.clone(),
                trace: None,
                replay: None,
                shrink: None,
                baseline: None,
                // Met by no play: nothing a repeat could make flaky.
                repeats: None,
            })
        })
        .collect()
}

/// `aggregate.md`'s Progress section (nothing when no cell played to an
/// end).
pub fn section(md: &mut String, agg: &Aggregate) {
    let Some(table) = &agg.progress else {
        return;
    };
    md.push_str("\n## Progress\n\n");
    md.push_str(
        "How far the players got, per persona and controller, from each cell's `report.json` \
         (`progress`), over the cells that played to an end: ",
    );
    if table.goal {
        md.push_str(
            "completion is how many of those reached the goal; the median steps to the goal \
             are of the cells that reached it; ",
        );
    } else {
        md.push_str(
            "the plan has no `game.goal` and no cell's game sent a `goal` event, so there is \
             no completion to show, only score and coverage; ",
        );
    }
    md.push_str("coverage is the median of their distinct observations.\n\n");
    let head = if table.goal {
        "| persona | controller | cells | played | completion | median steps to goal | median max \
         score | coverage |\n|---|---|---|---|---|---|---|---|\n"
    } else {
        "| persona | controller | cells | played | median max score | coverage |\n\
         |---|---|---|---|---|---|\n"
    };
    md.push_str(head);
    // With several personas, a row per controller of them all too.
    let several = table.rows.len() > table.controllers.len();
    let rows = table
        .rows
        .iter()
        .map(|r| (r.persona.as_str(), r.controller.as_str(), &r.numbers))
        .chain(
            table
                .controllers
                .iter()
                .filter(|_| several)
                .map(|c| ("(all)", c.controller.as_str(), &c.numbers)),
        );
    for (persona, controller, n) in rows {
        let median = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), number);
        let _ = write!(
            md,
            "| {persona} | {controller} | {} | {} |",
            n.cells, n.played
        );
        if table.goal {
            let completion = n.completion_rate.map_or_else(
                || "-".to_owned(),
                |rate| format!("{} of {} ({:.0}%)", n.goals_reached, n.played, rate * 100.0),
            );
            let _ = write!(md, " {completion} | {} |", median(n.median_steps_to_goal));
        }
        let _ = writeln!(
            md,
            " {} | {} |",
            median(n.median_max_score),
            median(n.median_distinct_observations)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::play::goal::Progress;

    /// A cell of `persona` × `controller` that ended as `state` with
    /// `score` as its max and the goal reached at `goal` (if it was).
    fn cell(
        persona: &str,
        controller: &str,
        state: CellState,
        score: f64,
        goal: Option<u64>,
    ) -> CellInput {
        let step = format!("play[{persona},{controller},1]");
        CellInput {
            report: Some(CellReport {
                quit_reason: crate::play::QuitReason::Patience,
                progress: Progress {
                    goal_reached: goal.is_some(),
                    goal_step: goal,
                    max_score: score,
                    distinct_observations: 5,
                    sometimes: [("a coin".to_owned(), score > 0.0)].into(),
                    ..Progress::default()
                },
                ..CellReport::maze(persona, controller, state)
            }),
            report_sha256: None,
            report_md: format!("steps/{step}/report.md"),
            trace: None,
            step,
            persona: persona.into(),
            controller: controller.into(),
            seed: 1,
        }
    }

    fn merged(cells: &[CellInput], plan: &PlanProgress) -> Aggregate {
        let mut agg = super::super::aggregate::build(cells, &[], Vec::new());
        apply(&mut agg, cells, plan);
        agg
    }

    /// Only cells that played to an end are counted; the others are in
    /// `cells` so the reader sees what the rates leave out.
    #[test]
    fn an_interrupted_cell_is_listed_but_not_counted() {
        let cells = [
            cell("kid", "rune", CellState::Succeeded, 3.0, Some(7)),
            cell("kid", "rune", CellState::Interrupted, 9.0, Some(2)),
            cell("kid", "standard", CellState::Succeeded, 1.0, None),
        ];
        let plan = PlanProgress {
            goal: true,
            sometimes: Vec::new(),
        };
        let table = merged(&cells, &plan).progress.expect("a table");
        let rune = &table.rows[0].numbers;
        assert_eq!((rune.cells, rune.played, rune.goals_reached), (2, 1, 1));
        assert_eq!(rune.completion_rate, Some(1.0));
        assert_eq!(rune.median_steps_to_goal, Some(7.0));
        assert_eq!(rune.median_max_score, Some(3.0));
        let standard = &table.rows[1].numbers;
        assert_eq!(standard.completion_rate, Some(0.0));
        assert_eq!(standard.median_steps_to_goal, None);
    }

    /// Without a goal the table has score and coverage, and no completion
    /// (0% would read as "nobody made it"); the comparison goes by score.
    #[test]
    fn without_a_goal_the_table_shows_score_and_coverage_only() {
        let cells = [
            cell("kid", "rune", CellState::Succeeded, 3.0, None),
            cell("kid", "standard", CellState::Succeeded, 1.0, None),
        ];
        let agg = merged(&cells, &PlanProgress::default());
        let table = agg.progress.as_ref().expect("a table");
        assert!(!table.goal);
        assert_eq!(table.rows[0].numbers.completion_rate, None);
        let md = super::super::aggregate::markdown(&agg);
        assert!(
            md.contains("| persona | controller | cells | played | median max score | coverage |"),
            "{md}"
        );
        assert!(md.contains("| kid | rune | 1 | 1 | 3 | 5 |"), "{md}");
        assert_eq!(
            agg.controllers.further.as_deref(),
            Some(
                "`rune` got further on score (no goal): it had a median max score of 3 over 1 \
                 cells, `standard` 1 over 1. Evidence from these cells and seeds, not proof: \
                 another seed may rank them otherwise."
            )
        );
    }

    /// A goal event reached by a cell is a goal even when the plan has no
    /// `game.goal`; a `sometimes` one cell met gives no finding, one no
    /// cell met gives one, and one no cell played gives none.
    #[test]
    fn a_sometimes_rule_is_a_finding_only_when_cells_played_it_and_none_met_it() {
        let cells = [
            cell("kid", "rune", CellState::Succeeded, 0.0, Some(4)),
            cell("kid", "standard", CellState::Succeeded, 0.0, None),
        ];
        let plan = PlanProgress {
            goal: false,
            sometimes: vec![
                ("a coin".into(), "obs.state.purse >= 1".into()),
                ("a key".into(), "obs.state.key".into()),
            ],
        };
        let agg = merged(&cells, &plan);
        assert!(agg.progress.as_ref().is_some_and(|t| t.goal));
        assert_eq!(agg.findings.len(), 1, "{:#?}", agg.findings);
        let f = &agg.findings[0];
        assert_eq!(f.title, "no player ever reached a coin");
        assert_eq!(f.location, "sometimes a coin: `obs.state.purse >= 1`");
        assert_eq!(
            (f.category.as_str(), f.severity.as_str()),
            ("coverage", "low")
        );
        assert_eq!(f.cells.len(), 2);
        assert_eq!(f.replay, None);
        let met = [cell("kid", "rune", CellState::Succeeded, 2.0, None)];
        assert!(merged(&met, &plan).findings.is_empty());
        assert!(merged(&[], &plan).progress.is_none());
    }
}

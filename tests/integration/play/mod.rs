//! Play on game processes (the stdio bridge): cells, the maze, replay and
//! shrink, findings and their confirmation, the explorer, a program's
//! check, environment and limits, play as a step of a plan, stuck places
//! and goals, and how far the players got in the aggregate.

mod bridge;
mod budget_env_pools;
mod cells;
mod confirm;
mod explorer;
mod findings;
mod in_a_plan;
mod invariants;
mod maze_bridge;
mod maze_player;
mod program_check;
mod program_env;
mod program_limits;
mod progress;
pub(crate) mod repeats;
mod resident_limits;
mod search_after_traps;
mod stuck_and_goals;

/// Every cell of a `plan run --json` document, as (its directory, its
/// report.json).
pub(super) fn cell_reports(
    t: &crate::support::Test,
    doc: &serde_json::Value,
) -> Vec<(String, serde_json::Value)> {
    doc["playtest"]["cells"]
        .as_array()
        .expect("cells")
        .iter()
        .map(|cell| {
            let md = cell["report"].as_str().expect("report path");
            let dir = md.trim_end_matches("report.md").to_owned();
            let report =
                serde_json::from_str(&t.read(&format!("{dir}report.json"))).expect("report.json");
            (dir, report)
        })
        .collect()
}

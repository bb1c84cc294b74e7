//! How far the players got, in the aggregate: two personas × two
//! controllers on a goal-directed stdio game (`way_out.py`: the yard is
//! the goal) give a progress table whose completion rates and medians are
//! those of the four cells' `report.json`, a controller comparison that
//! says which controller got further with the same counts, one `coverage`
//! finding for a `sometimes` rule no player could meet and none for one a
//! player met, and in each cell's report a coverage list that never goes
//! down.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use super::cell_reports;
use crate::support::Test;

const NOWHERE: &str = "the moon";
const NOWHERE_EXPR: &str = "obs.state.room == 'moon'";
const CORRIDOR: &str = "the corridor";

/// Two personas, two controllers, one seed each; a goal, a `sometimes`
/// rule the game can meet (the corridor, on the way to the yard) and one
/// it cannot (there is no moon).
fn plan() -> String {
    let game = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/games/way_out.py");
    format!(
        r#"version = 1
name = "progress"
controllers = ["standard", "rune"]

[game]
id = "g"
command = ["python3", "{}"]
action_timeout = 5
goal = "obs.state.free"

[[invariants]]
name = "{CORRIDOR}"
sometimes = "obs.state.room == 'corridor'"

[[invariants]]
name = "{NOWHERE}"
sometimes = "{NOWHERE_EXPR}"

[[personas]]
slug = "wanderer"
card = "Anything at random."
player = {{ kind = "random" }}
patience = 40

[[personas]]
slug = "mapper"
card = "Tries what it has not tried."
player = {{ kind = "explorer" }}
patience = 40

[[steps]]
id = "play"
kind = "play"
matrix = {{ persona = "*", controller = "*", seed = [1] }}

[[steps]]
id = "aggregate"
kind = "aggregate"
needs = ["play"]
"#,
        game.display()
    )
}

/// The run: its cells' reports and its `aggregate.json`.
struct Played {
    t: Test,
    cells: Vec<(String, Value)>,
    aggregate: Value,
    markdown: String,
}

fn play() -> Played {
    let t = Test::new().file("plan.toml", plan());
    let out = t.run(&["plan", "run", "plan.toml", "--json"]);
    out.code(0);
    let doc = out.json();
    let cells = cell_reports(&t, &doc);
    assert_eq!(cells.len(), 4, "{doc:#}");
    let md_path = doc["playtest"]["aggregate"]
        .as_str()
        .expect("an aggregate")
        .to_owned();
    let aggregate =
        serde_json::from_str(&t.read(&md_path.replace(".md", ".json"))).expect("aggregate.json");
    let markdown = t.read(&md_path);
    Played {
        t,
        cells,
        aggregate,
        markdown,
    }
}

fn median(mut values: Vec<f64>) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    Some(if values.len().is_multiple_of(2) {
        f64::midpoint(values[mid - 1], values[mid])
    } else {
        values[mid]
    })
}

/// What the progress table should say of `reports`, computed here from
/// their `progress`: (played, goals reached, completion, median steps to
/// the goal, median max score, median distinct observations).
fn expected(reports: &[&Value]) -> Value {
    let played: Vec<&Value> = reports
        .iter()
        .copied()
        .filter(|r| r["state"] == "succeeded")
        .collect();
    let progress = |r: &Value, key: &str| r["progress"][key].as_f64();
    let reached: Vec<&Value> = played
        .iter()
        .copied()
        .filter(|r| r["progress"]["goal_reached"] == true)
        .collect();
    let mut numbers = serde_json::json!({
        "cells": reports.len(),
        "played": played.len(),
        "goals_reached": reached.len(),
    });
    let mut put = |key: &str, value: Option<f64>| {
        if let Some(value) = value {
            numbers[key] = serde_json::json!(value);
        }
    };
    #[expect(clippy::cast_precision_loss, reason = "a handful of cells")]
    put(
        "completion_rate",
        (!played.is_empty()).then(|| reached.len() as f64 / played.len() as f64),
    );
    put(
        "median_steps_to_goal",
        median(
            reached
                .iter()
                .filter_map(|r| progress(r, "goal_step"))
                .collect(),
        ),
    );
    put(
        "median_max_score",
        median(
            played
                .iter()
                .filter_map(|r| progress(r, "max_score"))
                .collect(),
        ),
    );
    put(
        "median_distinct_observations",
        median(
            played
                .iter()
                .filter_map(|r| progress(r, "distinct_observations"))
                .collect(),
        ),
    );
    numbers
}

/// `row` without its persona and controller: the numbers alone.
fn numbers_of(row: &Value) -> Value {
    let mut numbers = row.clone();
    if let Some(map) = numbers.as_object_mut() {
        map.remove("persona");
        map.remove("controller");
    }
    numbers
}

#[test]
fn the_aggregate_shows_how_far_each_persona_and_controller_got_as_their_cells_report_it() {
    let Played {
        cells,
        aggregate,
        markdown,
        ..
    } = play();
    let table = &aggregate["progress"];
    assert_eq!(table["goal"], true, "{table:#}");
    let mut by_pair: BTreeMap<(String, String), Vec<&Value>> = BTreeMap::new();
    for (_, report) in &cells {
        let key = (
            report["persona"].as_str().unwrap_or_default().to_owned(),
            report["controller"].as_str().unwrap_or_default().to_owned(),
        );
        by_pair.entry(key).or_default().push(report);
    }
    let rows = table["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 4, "{table:#}");
    for row in rows {
        let key = (
            row["persona"].as_str().unwrap_or_default().to_owned(),
            row["controller"].as_str().unwrap_or_default().to_owned(),
        );
        let reports = &by_pair[&key];
        assert_eq!(numbers_of(row), expected(reports), "{key:?}: {row:#}");
        // aggregate.md has the same row.
        let completion = format!(
            "| {} | {} | 1 | 1 | {} of 1 ",
            key.0, key.1, row["goals_reached"]
        );
        assert!(markdown.contains(&completion), "{completion}\n{markdown}");
    }

    // Per controller, both personas together; the comparison names each
    // controller's counts, the one that got further first.
    let further = aggregate["controllers"]["further"]
        .as_str()
        .expect("further");
    for row in table["controllers"].as_array().expect("controllers") {
        let controller = row["controller"].as_str().unwrap_or_default();
        let reports: Vec<&Value> = cells
            .iter()
            .map(|(_, r)| r)
            .filter(|r| r["controller"] == controller)
            .collect();
        assert_eq!(numbers_of(row), expected(&reports), "{row:#}");
        let counts = format!("in {} of {}", row["goals_reached"], row["played"]);
        assert!(further.contains(&format!("`{controller}`")), "{further}");
        assert!(further.contains(&counts), "{counts}: {further}");
    }
    let rate = |c: &Value| c["completion_rate"].as_f64().unwrap_or(0.0);
    let score = |c: &Value| c["median_max_score"].as_f64().unwrap_or(0.0);
    let [a, b] = table["controllers"].as_array().expect("two").as_slice() else {
        panic!("two controllers: {table:#}");
    };
    let (ahead, behind) = if (rate(b), score(b)) > (rate(a), score(a)) {
        (b, a)
    } else {
        (a, b)
    };
    if (rate(ahead), score(ahead)) == (rate(behind), score(behind)) {
        assert!(
            further.starts_with("No controller got further"),
            "{further}"
        );
    } else {
        assert!(
            further.starts_with(&format!(
                "`{}` got further",
                ahead["controller"].as_str().unwrap_or_default()
            )),
            "{further}"
        );
    }
    assert!(further.contains("not proof"), "{further}");
    assert!(markdown.contains("## Progress"), "{markdown}");
    assert!(markdown.contains(further), "{markdown}");
}

#[test]
fn a_sometimes_rule_no_player_reached_is_one_coverage_finding_and_a_reached_one_is_none() {
    let Played {
        cells, aggregate, ..
    } = play();
    // The corridor is on the way out of the cell: some player got there.
    let met = |name: &str| {
        cells
            .iter()
            .filter(|(_, r)| r["progress"]["sometimes"][name] == true)
            .count()
    };
    assert!(met(CORRIDOR) > 0, "nobody left the cell: {cells:#?}");
    assert_eq!(met(NOWHERE), 0);
    let findings = aggregate["findings"].as_array().expect("findings");
    let coverage: Vec<&Value> = findings
        .iter()
        .filter(|f| f["category"] == "coverage")
        .collect();
    assert_eq!(coverage.len(), 1, "{findings:#?}");
    let finding = coverage[0];
    assert_eq!(
        finding["title"],
        format!("no player ever reached {NOWHERE}")
    );
    assert_eq!(finding["severity"], "low");
    let location = finding["location"].as_str().unwrap_or_default();
    assert!(location.contains(NOWHERE_EXPR), "{finding:#}");
    // Every cell played it and missed it; there is nothing to replay.
    assert_eq!(finding["met"], 4, "{finding:#}");
    assert!(finding.get("trace").is_none(), "{finding:#}");
    assert!(finding.get("replay").is_none(), "{finding:#}");
    assert!(
        findings
            .iter()
            .all(|f| !f["title"].as_str().unwrap_or_default().contains(CORRIDOR)),
        "{findings:#?}"
    );
}

#[test]
fn each_cell_reports_its_coverage_every_ten_actions_never_going_down() {
    let Played { t, cells, .. } = play();
    let mut longest = 0;
    for (dir, report) in &cells {
        let coverage: Vec<u64> = report["progress"]["coverage"]
            .as_array()
            .unwrap_or_else(|| panic!("no coverage in {dir}: {report:#}"))
            .iter()
            .map(|n| n.as_u64().expect("a count"))
            .collect();
        let actions = report["actions_taken"].as_u64().expect("actions");
        assert_eq!(coverage.len() as u64, actions / 10, "{dir}: {report:#}");
        assert!(coverage.windows(2).all(|w| w[0] <= w[1]), "{coverage:?}");
        let distinct = report["progress"]["distinct_observations"]
            .as_u64()
            .expect("distinct");
        assert!(
            coverage.iter().all(|&n| n >= 1 && n <= distinct),
            "{coverage:?}"
        );
        longest = longest.max(coverage.len());
        // The trace holds it all: the cell replays.
        t.run(&["replay", &format!("{dir}trace.jsonl")]).code(0);
    }
    assert!(longest >= 2, "no cell played 20 actions: {cells:#?}");
}

//! Stuck means no way out, and goals: a place one turn leaves is no
//! `stuck` finding (gameplan tries the offered actions the player did not
//! before it says so, marked as its own in the transcript, and the trace
//! still replays), a real softlock is one; `game.goal` ends a cell as
//! `done` does and `report.json`'s `progress` says how far a cell came;
//! simulate prints each strategy's goal rate; random players on a
//! published grid world (tests/fixtures/grid-games) raise no `stuck`, and
//! the explorer reaches its goal at least as often as random. Games:
//! `tests/fixtures/games/`: `way_out.py`, `frozenlake_walls.py`, `junk_line.py`.

use std::path::Path;

use super::cell_reports;
use crate::support::Test;

fn fixture(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
        .display()
        .to_string()
}

/// A plan over `game` (a fixture path), with `game_keys` added to `[game]`
/// and `rest` (personas, steps) after it.
fn plan(game: &str, game_keys: &str, rest: &str) -> String {
    format!(
        "version = 1\nname = \"stuck\"\n\n[game]\nid = \"g\"\ncommand = [\"python3\", \"{}\"]\naction_timeout = 5\n{game_keys}\n\n{rest}",
        fixture(game)
    )
}

const SEARCHERS: &str = r#"[[personas]]
slug = "wanderer"
card = "Anything at random."
player = { kind = "random" }
patience = 60

[[personas]]
slug = "mapper"
card = "Tries what it has not tried."
player = { kind = "explorer" }
patience = 60

[[steps]]
id = "play"
kind = "play"
matrix = { persona = "*", seed = [1, 2, 3, 4] }
"#;

fn rows(text: &str) -> Vec<serde_json::Value> {
    text.lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

#[test]
fn a_room_one_turn_leaves_is_no_softlock_and_a_real_one_is_one_finding() {
    let t = Test::new().file("plan.toml", plan("games/way_out.py", "", SEARCHERS));
    let out = t.run(&["plan", "run", "plan.toml", "--json"]);
    out.code(0);
    let doc = out.json();
    let stuck: Vec<&serde_json::Value> = doc["playtest"]["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter(|f| f["category"] == "stuck")
        .collect();
    assert_eq!(stuck.len(), 1, "{:#}", doc["playtest"]["findings"]);
    let title = stuck[0]["title"].as_str().unwrap_or_default();
    assert!(title.contains("The pit"), "the pit, not the cell: {title}");

    // Gameplan tried the cell's untried actions itself, in the listed
    // order, and the last of them, the hatch, led out: no finding there.
    let mut led_out = None;
    for (dir, _) in cell_reports(&t, &doc) {
        let transcript = rows(&t.read(&format!("{dir}transcript.jsonl")));
        let by_gameplan: Vec<&serde_json::Value> = transcript
            .iter()
            .filter(|r| r["by"] == "gameplan")
            .collect();
        for row in &by_gameplan {
            assert_eq!(row["proposals"], serde_json::json!([]), "{row}");
        }
        if let Some(hatch) = by_gameplan.iter().find(|r| r["action"] == "open hatch") {
            assert!(
                hatch["observation"]["text"]
                    .as_str()
                    .is_some_and(|text| text.starts_with("A corridor")),
                "{hatch}"
            );
            led_out.get_or_insert(dir);
        }
    }
    let dir = led_out.expect("some cell bumped around the cell until gameplan opened the hatch");
    // Gameplan's actions are in the trace like the player's: it replays.
    t.run(&["replay", &format!("{dir}trace.jsonl")]).code(0);
}

#[test]
fn patience_that_runs_out_before_every_action_was_tried_is_a_note_not_a_finding() {
    let rest = r#"[[personas]]
slug = "bumper"
card = "Bumps the wall."
player = { kind = "scripted", actions = ["bump wall", "bump wall", "bump wall", "bump wall", "bump wall", "bump wall", "bump wall", "bump wall", "bump wall"] }
patience = 8

[[steps]]
id = "play"
kind = "play"
"#;
    let t = Test::new().file("plan.toml", plan("games/way_out.py", "", rest));
    let out = t.run(&["plan", "run", "plan.toml", "--json"]);
    out.code(0);
    let (_, report) = cell_reports(&t, &out.json()).remove(0);
    assert_eq!(report["quit_reason"], "patience", "{report:#}");
    assert_eq!(report["findings"], serde_json::json!([]), "{report:#}");
    let notes = report["notes"].to_string();
    assert!(
        notes.contains(r#"patience ran out at \"A bare cell. The walls are cold.\" with 20 of 21 actions untried"#),
        "{notes}"
    );
}

#[test]
fn game_goal_ends_a_cell_as_done_and_progress_says_how_far_each_came() {
    let rest = SEARCHERS.replace("patience = 60", "patience = 80");
    let t = Test::new().file(
        "plan.toml",
        plan("games/way_out.py", "goal = \"obs.state.free\"", &rest),
    );
    let out = t.run(&["plan", "run", "plan.toml", "--json"]);
    out.code(0);
    let mut reached = 0;
    for (dir, report) in cell_reports(&t, &out.json()) {
        let progress = &report["progress"];
        assert!(
            progress["distinct_observations"].as_u64() >= Some(2),
            "{report:#}"
        );
        if progress["goal_reached"] == true {
            reached += 1;
            assert_eq!(report["quit_reason"], "done", "{report:#}");
            assert_eq!(progress["goal_step"], report["actions_taken"], "{report:#}");
            assert_eq!(progress["max_score"], 1.0, "{report:#}");
            // The trace records the goal: a replay ends the same way.
            t.run(&["replay", &format!("{dir}trace.jsonl")]).code(0);
        } else {
            assert!(progress.get("goal_step").is_none(), "{report:#}");
            assert_ne!(report["quit_reason"], "done", "{report:#}");
        }
    }
    assert!(reached >= 2, "{reached} cells reached the yard");
}

#[test]
fn a_goal_that_cannot_be_evaluated_is_said_once_as_a_note() {
    let rest = r#"[[personas]]
slug = "mapper"
card = "Tries what it has not tried."
player = { kind = "explorer" }
patience = 30

[[steps]]
id = "play"
kind = "play"
"#;
    let t = Test::new().file(
        "plan.toml",
        plan("games/way_out.py", "goal = \"obs.state.nosuch > 1\"", rest),
    );
    let out = t.run(&["plan", "run", "plan.toml", "--json"]);
    out.code(0);
    let (_, report) = cell_reports(&t, &out.json()).remove(0);
    let notes: Vec<&str> = report["notes"]
        .as_array()
        .expect("notes")
        .iter()
        .filter_map(|n| n.as_str())
        .filter(|n| n.contains("`game.goal`"))
        .collect();
    assert_eq!(notes.len(), 1, "{report:#}");
    assert!(
        notes[0].contains("could not be evaluated at step 1"),
        "{}",
        notes[0]
    );
    assert_eq!(report["progress"]["goal_reached"], false);
}

#[test]
fn simulate_prints_the_goal_rate_median_steps_score_and_coverage_of_each_strategy() {
    let rest = r#"[[steps]]
id = "sim"
kind = "simulate"
games = 40
strategies = ["random", "explorer"]
max_steps = 80
"#;
    let t = Test::new().file(
        "plan.toml",
        plan("games/way_out.py", "goal = \"obs.state.free\"", rest),
    );
    let out = t.run(&["plan", "run", "plan.toml"]);
    out.code(0)
        .stdout_has("  goal: random ")
        .stdout_has("; explorer ")
        .stdout_has(" observations");
    let id = t.run_ids().pop().expect("a run");
    let summary: serde_json::Value =
        serde_json::from_str(&t.read(&format!(".gameplan/runs/{id}/steps/sim/summary.json")))
            .expect("summary.json");
    let strategies = summary["strategies"].as_array().expect("strategies");
    assert_eq!(strategies.len(), 2, "{summary:#}");
    for s in strategies {
        assert_eq!(s["games"], 20, "{s}");
        let goals = s["goals"].as_u64().expect("goals");
        assert!(goals > 0, "{s}");
        assert!(s["median_steps_to_goal"].as_f64() > Some(1.0), "{s}");
        // How far the games got besides: score and coverage, as a cell's.
        let score = s["median_max_score"].as_f64().expect("median max score");
        assert!((0.0..=1.0).contains(&score), "{s}");
        assert!(
            s["median_distinct_observations"].as_f64() >= Some(1.0),
            "{s}"
        );
    }
    assert_eq!(
        summary["completed"],
        strategies
            .iter()
            .map(|s| s["goals"].as_u64().unwrap_or(0))
            .sum::<u64>()
    );
}

/// The acceptance test on a published grid world (frozenlake-demo from
/// the Python package index, vendored unchanged): every move offered, so random players bump
/// into the edges all the time; with `stuck_after = 2` the old rule said
/// `stuck` at every second bump. No place of the lake is a softlock.
#[test]
fn random_players_on_a_published_grid_world_raise_no_stuck_finding() {
    let rest = r#"[[personas]]
slug = "wanderer"
card = "Anything at random."
player = { kind = "random" }
patience = 60

[[steps]]
id = "play"
kind = "play"
matrix = { persona = "*", seed = [1, 2, 3, 4, 5, 6] }

[[steps]]
id = "sim"
kind = "simulate"
games = 200
strategies = ["random"]
max_steps = 100
"#;
    let t = Test::new().file(
        "plan.toml",
        plan("games/frozenlake_walls.py", "stuck_after = 2", rest),
    );
    let out = t.run(&["plan", "run", "plan.toml", "--json"]);
    out.code(0);
    let doc = out.json();
    assert_eq!(
        doc["playtest"]["findings"],
        serde_json::json!([]),
        "{doc:#}"
    );
    assert_eq!(
        doc["playtest"]["simulations"][0]["findings"],
        serde_json::json!([]),
        "{doc:#}"
    );
    // They did bump: gameplan tried the way out for them.
    let bumped = cell_reports(&t, &doc).iter().any(|(dir, _)| {
        t.read(&format!("{dir}transcript.jsonl"))
            .contains("\"by\":\"gameplan\"")
    });
    assert!(bumped, "no random cell ever bumped twice");
}

/// The explorer reaches the lake's goal at least as often as random, on
/// three ranges of 300 games each (seeded: the counts are stable).
#[test]
fn the_explorer_reaches_the_grid_worlds_goal_at_least_as_often_as_random() {
    let t = Test::new();
    let game = fixture("games/frozenlake_walls.py");
    for seed in ["1", "1001", "5001"] {
        let out = t.run(&[
            "__simulate",
            "--games",
            "600",
            "--seed",
            seed,
            "--max-steps",
            "100",
            "--strategies",
            "random,explorer",
            "--",
            "python3",
            &game,
        ]);
        out.code(0);
        let line = out
            .stdout
            .lines()
            .find(|l| l.starts_with("goal: "))
            .unwrap_or_else(|| panic!("no goal line: {out}"))
            .to_owned();
        let goals = |strategy: &str| -> u64 {
            let at = line.find(&format!("{strategy} ")).expect("strategy") + strategy.len() + 1;
            line[at..]
                .split('/')
                .next()
                .and_then(|n| n.parse().ok())
                .expect("goals")
        };
        assert!(goals("explorer") >= goals("random"), "seed {seed}: {line}");
        assert!(goals("explorer") > 0, "seed {seed}: {line}");
    }
}

/// One stray debug line, whichever request it breaks (a reset, `left` or
/// `right`), is one finding.
#[test]
fn one_junk_line_on_stdout_is_one_finding_whichever_request_it_breaks() {
    let rest = r#"[[steps]]
id = "sim"
kind = "simulate"
games = 30
strategies = ["random"]
max_steps = 20
"#;
    let t = Test::new().file("plan.toml", plan("games/junk_line.py", "", rest));
    let out = t.run(&["plan", "run", "plan.toml", "--json"]);
    out.code(1);
    let doc = out.json();
    let findings = doc["playtest"]["simulations"][0]["findings"]
        .as_array()
        .expect("findings");
    assert_eq!(findings.len(), 1, "{findings:#?}");
    assert!(findings[0]["met"].as_u64() > Some(10), "{findings:#?}");
}

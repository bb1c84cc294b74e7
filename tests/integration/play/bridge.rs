//! A cell whose game never got through `hello`
//! and its first `reset` did not play, so it fails (exit 1, never reused)
//! with a hint at the usual bridge mistake; a game whose observation is
//! not deterministic under its seed is warned about by field, and still
//! played.
//!
//! The game is `tests/fixtures/games/bridge_mistakes.py`: `MISTAKE` breaks
//! every cell at `hello` (or at start), `MISTAKE@2` only the cell of seed 2
//! at `reset`, so the plan's cell of seed 1 plays the same game well.

use std::time::Duration;

use crate::support::{Test, by_step};

const GAME: &str = include_str!("../../fixtures/games/bridge_mistakes.py");
const MAZE_PLAN: &str = include_str!("../../../plans/maze.toml");
const COINS_PLAN: &str = include_str!("../../../examples/coins.toml");
const COINS: &str = include_str!("../../../examples/games/coins.py");

/// A plan of two cells (seeds 1 and 2) of the game making `mistake`.
fn repo(mistake: &str) -> Test {
    // A hang is waited out; anything else must not be mistaken for one
    // when Python starts slowly on a busy machine.
    let timeout = if mistake.starts_with("noflush") {
        4
    } else {
        20
    };
    let plan = format!(
        r#"version = 1
name = "bridge"

[game]
id = "mistakes"
command = ["python3", "game.py", "{mistake}"]
inputs = ["game.py"]
action_timeout = {timeout}

[[personas]]
slug = "kid"
card = "Clicks everything."
patience = 10

[[steps]]
id = "play"
kind = "play"
matrix = {{ seed = [1, 2] }}
"#
    );
    Test::new().file("plan.toml", plan).file("game.py", GAME)
}

/// Runs the plan twice. Both runs exit 1; each cell in `failing` fails
/// both times (a failed cell is never stored, so never reused) with
/// `needle` in the summary's line for it and in its report; every other
/// cell succeeds, then is reused. Returns the first run's stdout.
#[track_caller]
fn fails_and_is_not_reused(mistake: &str, failing: &[&str], needle: &str) -> String {
    let t = repo(mistake);
    let mut first_stdout = String::new();
    for (round, reused) in [(1, "succeeded"), (2, "reused")] {
        let out = t.run(&["plan", "run", "plan.toml"]);
        out.code(1);
        for seed in ["1", "2"] {
            let id = format!("play[{seed}]");
            let line = out
                .stdout
                .lines()
                .find(|l| l.starts_with(&format!("  failed: {id}: ")));
            if failing.contains(&seed) {
                let line = line.unwrap_or_else(|| panic!("round {round}: no line for {id}\n{out}"));
                assert!(
                    line.contains(&format!("{id}: the cell did not play: "))
                        && line.contains(needle),
                    "round {round}: {line}\n{out}"
                );
            } else {
                assert!(line.is_none(), "round {round}: {id} failed\n{out}");
            }
        }
        let json = t.run(&["plan", "status", "--json"]);
        let states = by_step(&json.json(), "state");
        for seed in ["1", "2"] {
            let want = if failing.contains(&seed) {
                "failed"
            } else {
                reused
            };
            assert_eq!(
                states[&format!("play[{seed}]")],
                want,
                "round {round}: {json}"
            );
        }
        let run = t.run_ids().last().cloned().expect("a run");
        for seed in failing {
            let dir = format!(".gameplan/runs/{run}/steps/play[{seed}]");
            let report: serde_json::Value =
                serde_json::from_str(&t.read(&format!("{dir}/report.json"))).expect("report.json");
            assert_eq!(report["state"], "not_played", "{report:#}");
            assert_eq!(
                report["findings"],
                serde_json::json!([]),
                "not a finding: {report:#}"
            );
            let md = t.read(&format!("{dir}/report.md"));
            assert!(
                md.contains("- State: did not play") && md.contains(needle),
                "{md}"
            );
        }
        if round == 1 {
            first_stdout.clone_from(&out.stdout);
        }
    }
    first_stdout
}

const NOT_STDOUT: &str = "logs belong on stderr";
const FLUSH: &str = "did the game flush stdout? (Python: `print(..., flush=True)` or `python3 -u`)";

#[test]
fn a_debug_print_on_stdout_fails_the_cell_quoting_the_line() {
    fails_and_is_not_reused(
        "print",
        &["1", "2"],
        "the game printed this on stdout: `debug: got hello`; logs belong on stderr",
    );
    let stdout = fails_and_is_not_reused("print@2", &["2"], NOT_STDOUT);
    assert!(stdout.contains("`debug: got reset`"), "{stdout}");
    assert!(
        stdout.contains("playtest: 2 cells (1 played, 0 reused, 1 did not play)"),
        "{stdout}"
    );
}

#[test]
fn a_missing_flush_fails_the_cell_asking_for_the_flush() {
    let stdout = fails_and_is_not_reused("noflush", &["1", "2"], FLUSH);
    assert!(stdout.contains("hung on `hello`"), "{stdout}");
    let stdout = fails_and_is_not_reused("noflush@2", &["2"], FLUSH);
    assert!(stdout.contains("hung on `reset`"), "{stdout}");
}

#[test]
fn the_wrong_protocol_number_fails_the_cell() {
    fails_and_is_not_reused(
        "protocol",
        &["1", "2"],
        "the game speaks protocol 2, gameplan speaks 1",
    );
}

#[test]
fn a_wrong_id_in_the_answer_fails_the_cell() {
    fails_and_is_not_reused(
        "wrong_id",
        &["1", "2"],
        "the answer names id 2 instead of 1",
    );
    fails_and_is_not_reused("wrong_id@2", &["2"], "the answer names id 3 instead of 2");
}

#[test]
fn a_game_that_exits_at_once_fails_the_cell_with_its_stderr() {
    fails_and_is_not_reused(
        "exit",
        &["1", "2"],
        "exited with code 1 on `hello`: ModuleNotFoundError: No module named 'pygame'",
    );
    fails_and_is_not_reused(
        "exit@2",
        &["2"],
        "exited with code 1 on `reset`: RuntimeError: cannot load level for seed 2",
    );
    // As it fails, the run shows the traceback's last lines.
    let t = repo("exit@2");
    t.run(&["plan", "run", "plan.toml"])
        .code(1)
        .stderr_has("the game's stderr ended:")
        .stderr_has("Traceback (most recent call last):");
}

/// A simulation of a game that cannot open stops at its first game with
/// the hint, instead of waiting out 200 hangs and counting them.
#[test]
fn a_simulation_whose_game_cannot_open_fails_at_once_with_the_hint() {
    let plan = r#"version = 1
name = "sim"

[game]
id = "mistakes"
command = ["python3", "game.py", "noflush"]
action_timeout = 1

[[steps]]
id = "sim"
kind = "simulate"
games = 200
workers = 2
"#;
    let t = Test::new().file("plan.toml", plan).file("game.py", GAME);
    let out = t.run(&["plan", "run", "plan.toml"]);
    out.code(1)
        .stdout_has("failed: sim: the simulation could not run: the game hung on `hello`")
        .stdout_has(FLUSH);
    // 200 hangs of 1 s on 2 workers would be 100 s.
    assert!(out.elapsed < Duration::from_secs(15), "{out}");
}

/// `time.time()` in the observation: the cell plays, and the run, the
/// summary (also of the reusing run) and the cell's report name the field.
#[test]
fn a_game_whose_observation_holds_the_clock_is_warned_about_by_field() {
    let t = repo("clock");
    let out = t.run(&["plan", "run", "plan.toml"]);
    out.code(0);
    let warning = "`state.t` changes between two resets with seed 1 (";
    let needs = "stuck detection and replay need a deterministic observation";
    let stderr_line = out
        .stderr
        .lines()
        .find(|l| l.contains("play[1]: warning: "))
        .unwrap_or_else(|| panic!("no warning of play[1] as it ran\n{out}"));
    assert!(
        stderr_line.contains(warning) && stderr_line.contains(needs),
        "{stderr_line}"
    );
    assert!(
        out.stdout
            .contains("  warning: play[2]: `state.t` changes between two resets with seed 2 ("),
        "{out}"
    );
    let run = t.run_ids()[0].clone();
    let report: serde_json::Value =
        serde_json::from_str(&t.read(&format!(".gameplan/runs/{run}/steps/play[1]/report.json")))
            .expect("report.json");
    assert_eq!(report["state"], "succeeded");
    assert_eq!(report["quit_reason"], "done", "it still plays: {report:#}");
    assert_eq!(
        report["findings"],
        serde_json::json!([]),
        "a warning is not a finding"
    );
    let warnings = report["warnings"].as_array().expect("warnings");
    assert!(
        warnings.len() == 1 && warnings[0].as_str().is_some_and(|w| w.starts_with(warning)),
        "{report:#}"
    );
    let md = t.read(&format!(".gameplan/runs/{run}/steps/play[1]/report.md"));
    assert!(md.contains(&format!("- Warning: {warning}")), "{md}");

    let again = t.run(&["plan", "run", "plan.toml", "--json"]);
    again.code(0);
    let doc = again.json();
    assert!(
        by_step(&doc, "state").values().all(|s| s == "reused"),
        "{again}"
    );
    let cell = &doc["playtest"]["cells"][0];
    assert!(
        cell["warnings"][0]
            .as_str()
            .is_some_and(|w| w.starts_with(warning)),
        "a reused cell keeps its warning: {again}"
    );
}

/// No false warning: the built-in maze and the Python example are
/// deterministic under their seeds.
#[test]
fn deterministic_games_are_not_warned_about() {
    let t = Test::new()
        .file("plans/maze.toml", MAZE_PLAN)
        .file("examples/coins.toml", COINS_PLAN)
        .file("examples/games/coins.py", COINS);
    for plan in ["plans/maze.toml", "examples/coins.toml"] {
        let out = t.run(&["plan", "run", plan, "--json"]);
        out.code(0);
        assert!(!out.stderr.contains("warning"), "{out}");
        let doc = out.json();
        let cells = doc["playtest"]["cells"].as_array().expect("cells");
        assert!(!cells.is_empty(), "{out}");
        for cell in cells {
            assert!(cell.get("warnings").is_none(), "{cell}");
            let report: serde_json::Value = serde_json::from_str(
                &t.read(
                    cell["report"]
                        .as_str()
                        .expect("report")
                        .replace("report.md", "report.json")
                        .as_str(),
                ),
            )
            .expect("report.json");
            assert_eq!(report["warnings"], serde_json::json!([]), "{report:#}");
        }
    }
}

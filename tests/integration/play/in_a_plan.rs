//! `play` and `simulate` as steps of a plan, through `gameplan plan run`:
//! the free maze playtest, reuse of cells, a Python game played by an
//! example plan, an interrupted cell played again on resume, and a failing
//! simulation whose traces replay.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::support::{Test, by_step, wait_until};

const MAZE_PLAN: &str = include_str!("../../../plans/maze.toml");
const COINS_PLAN: &str = include_str!("../../../examples/coins.toml");
const COINS: &str = include_str!("../../../examples/games/coins.py");

fn coins_repo() -> Test {
    Test::new()
        .file("examples/coins.toml", COINS_PLAN)
        .file("examples/games/coins.py", COINS)
}

fn categories(run: &serde_json::Value) -> BTreeSet<String> {
    run["playtest"]["findings"]
        .as_array()
        .expect("playtest.findings")
        .iter()
        .map(|f| f["category"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// README's first command: two personas and two controllers play the maze;
/// the run names every planted bug, each cell's report is where the run
/// says; a second run reuses every cell and restores its report.
#[test]
fn the_maze_playtest_finds_the_planted_bugs_and_a_second_run_reuses_every_cell() {
    let t = Test::new().file("plans/maze.toml", MAZE_PLAN);
    let first = t.run(&["plan", "run", "plans/maze.toml", "--json"]);
    first.code(0);
    let doc = first.json();
    let states = by_step(&doc, "state");
    // Eight cells and the aggregate.
    assert_eq!(states.len(), 9, "{first}");
    assert!(states.values().all(|s| s == "succeeded"), "{first}");
    for category in ["crash", "error", "stuck", "refused"] {
        assert!(
            categories(&doc).contains(category),
            "no {category}: {first}"
        );
    }
    let cells = doc["playtest"]["cells"].as_array().expect("cells");
    assert_eq!(cells.len(), 8);
    for cell in cells {
        let report = cell["report"].as_str().expect("report path");
        let md = t.read(report);
        assert!(
            md.contains("## Findings") && md.contains("## Evidence"),
            "{md}"
        );
    }
    let first_report = t.read(cells[0]["report"].as_str().unwrap_or_default());

    let second = t.run(&["plan", "run", "plans/maze.toml", "--json"]);
    second.code(0);
    let doc2 = second.json();
    assert!(
        by_step(&doc2, "state").values().all(|s| s == "reused"),
        "{second}"
    );
    assert_eq!(categories(&doc2), categories(&doc));
    let restored = doc2["playtest"]["cells"][0]["report"]
        .as_str()
        .expect("report path");
    assert_ne!(restored, cells[0]["report"].as_str().unwrap_or_default());
    assert_eq!(t.read(restored), first_report);

    // The text summary says where the reports are and what was found.
    t.run(&["plan", "run", "plans/maze.toml"])
        .code(0)
        .stdout_has("playtest: 8 cells (0 played, 8 reused), 4 distinct findings")
        .stdout_has("critical crash")
        .stdout_has("report.md");
}

/// The Python example game, played by the example plan: the mechanics
/// check, then four cells. A changed game plays everything again; a changed
/// persona plays only that persona's cells.
#[test]
fn the_python_example_plays_and_only_what_changed_plays_again() {
    let t = coins_repo();
    let run = t.run(&["plan", "run", "examples/coins.toml", "--json"]);
    run.code(0);
    let doc = run.json();
    let sim = &doc["playtest"]["simulations"][0];
    assert_eq!(sim["games"], 200, "{run}");
    assert_eq!(sim["crashed"], 0);
    assert_eq!(doc["playtest"]["cells"].as_array().map(Vec::len), Some(4));
    for cell in doc["playtest"]["cells"].as_array().into_iter().flatten() {
        let end = if cell["persona"] == "collector" {
            "done"
        } else {
            "patience"
        };
        assert_eq!(cell["quit_reason"], end, "{cell}");
    }

    // A persona's settings key only its own cells.
    t.write(
        "examples/coins.toml",
        COINS_PLAN.replace("patience = 20", "patience = 25"),
    );
    t.run(&["plan", "explain", "examples/coins.toml"])
        .code(0)
        .stdout_has("play[collector,standard]  play      reused");
    let states = by_step(
        &t.run(&["plan", "run", "examples/coins.toml", "--json"])
            .code(0)
            .json(),
        "state",
    );
    assert_eq!(states["mechanics"], "reused");
    assert_eq!(states["play[collector,standard]"], "reused");
    assert_eq!(states["play[collector,rune]"], "reused");
    assert_eq!(states["play[wanderer,standard]"], "succeeded");
    assert_eq!(states["play[wanderer,rune]"], "succeeded");

    // A changed build plays everything again, and explain says so first.
    t.write("examples/games/coins.py", format!("{COINS}\n# v2\n"));
    t.run(&["plan", "explain", "examples/coins.toml"])
        .code(0)
        .stdout_has("examples/games/coins.py");
    let states = by_step(
        &t.run(&["plan", "run", "examples/coins.toml", "--json"])
            .code(0)
            .json(),
        "state",
    );
    assert!(states.values().all(|s| s == "succeeded"), "{states:?}");
}

/// An `llm` player does not play the same twice: explain says its cells are
/// never reused. Its endpoint here refuses every connection: the cell ends
/// `model_unreachable` and the run exits 5 (issue 18), naming what to check.
#[test]
fn an_llm_persona_is_never_reused_and_an_endpoint_that_never_answers_is_exit_5() {
    let plan = format!(
        "{MAZE_PLAN}\n[[personas]]\nslug = \"chatty\"\ncard = \"Talks a lot.\"\nplayer = {{ kind = \"llm\", model = \"gpt-4o-mini\", base_url = \"http://127.0.0.1:1/v1\" }}\n"
    );
    let t = Test::new().file("plans/maze.toml", plan);
    t.run(&["plan", "explain", "plans/maze.toml"])
        .code(0)
        .stdout_has("never reused: persona `chatty` plays with an `llm` player");
    let out = t.run(&["plan", "run", "plans/maze.toml", "--json"]);
    out.code(5);
    let doc = out.json();
    let states = by_step(&doc, "state");
    assert_eq!(states["play[chatty,standard,1]"], "unreachable", "{out}");
    let stopped = doc["steps"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|s| s["id"] == "play[chatty,standard,1]")
        .expect("chatty's cell");
    assert!(
        stopped["message"]
            .as_str()
            .is_some_and(|m| m.contains("never answered") && m.contains("base_url")),
        "{stopped}"
    );
}

/// Ctrl-C during a cell: the turn in flight finishes, the cell is
/// `interrupted` (exit 10), and `plan resume` plays it again from its seed
/// to the end.
#[test]
fn an_interrupted_cell_is_played_again_from_its_seed_on_resume() {
    let slow = COINS.replace(
        "        req = json.loads(line)",
        "        import time; time.sleep(0.05)\n        req = json.loads(line)",
    );
    let plan = r#"version = 1
name = "slow"

[game]
id = "slow"
command = ["python3", "slow.py"]

[[personas]]
slug = "walker"
card = "Never takes a coin."
player = { kind = "scripted", actions = ["right", "left", "right", "left", "right", "left", "right", "left", "right", "left", "right", "left", "right", "left", "right", "left", "right", "left", "right", "left", "right", "left", "right", "left", "right", "left", "right", "left", "right", "left", "right", "left", "right", "left", "right", "left"] }
patience = 1000

[[steps]]
id = "play"
kind = "play"
"#;
    let t = Test::new().file("plan.toml", plan).file("slow.py", slow);
    let spawned = t.spawn(&["plan", "run", "plan.toml", "--json"]);
    // Wait until the cell's game process is running, then stop the run.
    wait_until("the cell to start", Duration::from_secs(30), || {
        t.run_ids().first().is_some_and(|id| {
            std::fs::read_to_string(t.path(&format!(".gameplan/runs/{id}/journal.jsonl")))
                .is_ok_and(|j| j.contains("\"step_started\""))
        })
    });
    std::thread::sleep(Duration::from_millis(500));
    spawned.signal(nix::sys::signal::Signal::SIGINT);
    let out = spawned.wait();
    out.code(10);
    assert_eq!(
        by_step(&out.json(), "state")["play"],
        "interrupted",
        "{out}"
    );
    let id = t.run_ids()[0].clone();
    let report = t.read(&format!(".gameplan/runs/{id}/steps/play/report.json"));
    assert!(report.contains("\"state\": \"interrupted\""), "{report}");

    let resumed = t.run(&["plan", "resume", "--json"]);
    resumed.code(0);
    assert_eq!(by_step(&resumed.json(), "state")["play"], "succeeded");
    let report: serde_json::Value =
        serde_json::from_str(&t.read(&format!(".gameplan/runs/{id}/steps/play/report.json")))
            .expect("report.json");
    assert_eq!(report["state"], "succeeded");
    assert_eq!(report["actions_taken"], 36, "played again from the start");
}

/// A simulation that meets crashes fails its step, names the traces, and
/// each trace replays the crash.
#[test]
fn a_simulation_that_crashes_fails_the_step_and_its_traces_replay() {
    let plan = r#"version = 1
name = "sim"

[game]
id = "maze"
command = ["builtin:maze"]

[[steps]]
id = "sim"
kind = "simulate"
games = 60
strategies = ["explorer", "random"]
max_steps = 50
"#;
    let t = Test::new().file("plan.toml", plan);
    let out = t.run(&["plan", "run", "plan.toml", "--json"]);
    out.code(1);
    let doc = out.json();
    let sim = &doc["playtest"]["simulations"][0];
    assert_eq!(sim["games"], 60, "{out}");
    let crashed = sim["crashed"].as_u64().unwrap_or_default();
    assert!(crashed > 0, "{out}");
    let message = doc["steps"][0]["message"].as_str().unwrap_or_default();
    assert!(message.contains("gameplan replay"), "{message}");
    let id = t.run_ids()[0].clone();
    let dir = format!(".gameplan/runs/{id}/steps/sim");
    let summary: serde_json::Value =
        serde_json::from_str(&t.read(&format!("{dir}/summary.json"))).expect("summary.json");
    let traces: Vec<String> = summary["traces"]
        .as_array()
        .expect("traces")
        .iter()
        .filter(|t| t["end"] == "crash")
        .map(|t| format!("{dir}/{}", t["path"].as_str().unwrap_or_default()))
        .collect();
    assert_eq!(traces.len() as u64, crashed, "{summary:#}");
    // Traces of failed games share a batch file per worker.
    let files = std::fs::read_dir(t.path(&format!("{dir}/traces")))
        .expect("traces")
        .count();
    assert!(files <= 3, "{files} files for {crashed} traces");
    for trace in [&traces[0], &traces[traces.len() - 1]] {
        t.run(&["replay", trace]).code(0).stdout_has("confirmed");
    }
}

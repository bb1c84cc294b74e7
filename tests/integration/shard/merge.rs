//! Shards merged into the run the whole plan would have made.

use crate::support::Test;

const MAZE_PLAN: &str = include_str!("../../../plans/maze.toml");

/// The maze, judged: its planted crash fails `blockers`.
pub const GATES: &str = r#"
[[lenses]]
name = "every-cell-played"
kind = "rule"
over = "runs"
when = "unit.state != 'succeeded'"

[[lenses]]
name = "crashes"
kind = "rule"
over = "findings"
when = "unit.category in ['crash', 'hang']"

[[gates]]
name = "played"
lenses = ["every-cell-played"]

[[gates]]
name = "blockers"
lenses = ["crashes"]

[[steps]]
id = "played"
kind = "gate"
needs = ["aggregate"]

[[steps]]
id = "blockers"
kind = "gate"
needs = ["played"]
"#;

/// A repo holding the judged maze plan.
pub fn maze() -> Test {
    Test::new().file("plan.toml", format!("{MAZE_PLAN}{GATES}"))
}

/// Runs the three shards of the maze, each in a state directory of its
/// own (as on three machines), into `b1`..`b3`.
pub fn three_shards(t: &Test) {
    for k in 1..=3 {
        let shard = format!("{k}/3");
        let state = format!("machine{k}");
        let bundle = format!("b{k}");
        t.run(&[
            "plan",
            "run",
            "plan.toml",
            "--shard",
            &shard,
            "--state-dir",
            &state,
            "--bundle",
            &bundle,
        ])
        .code(0)
        .stderr_has(&format!("bundle of shard {shard}:"));
    }
}

/// The cells a bundle holds, by id.
pub fn cells_of(t: &Test, bundle: &str) -> Vec<String> {
    let manifest: serde_json::Value =
        serde_json::from_str(&t.read(&format!("{bundle}/manifest.json"))).expect("manifest");
    manifest["cells"]
        .as_array()
        .expect("cells")
        .iter()
        .map(|c| c["id"].as_str().expect("id").to_owned())
        .collect()
}

fn aggregate_json(t: &Test, state: &str) -> serde_json::Value {
    let runs = t.path(&format!("{state}/runs"));
    let run = std::fs::read_dir(&runs)
        .expect("runs")
        .flatten()
        .next()
        .expect("one run")
        .path();
    let text =
        std::fs::read_to_string(run.join("steps/aggregate/aggregate.json")).expect("aggregate");
    let mut doc: serde_json::Value = serde_json::from_str(&text).expect("json");
    // A cell's report names the run it was written in (its paths, its
    // replay command), so its digest is the run's own; all else is the
    // same.
    for cell in doc["cells"].as_array_mut().expect("cells") {
        cell.as_object_mut().expect("cell").remove("report_sha256");
    }
    doc
}

#[test]
fn three_shards_merged_give_the_whole_runs_aggregate_and_verdicts_and_play_nothing_again() {
    let t = maze();
    let whole = t.run(&["plan", "run", "plan.toml", "--state-dir", "whole"]);
    whole.code(1).stdout_has("gate blockers: FIX FIRST");
    three_shards(&t);

    // The slices split the eight cells, each cell in exactly one.
    let mut all: Vec<String> = (1..=3)
        .flat_map(|k| cells_of(&t, &format!("b{k}")))
        .collect();
    assert_eq!(all.len(), 8, "{all:?}");
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 8, "a cell in two bundles: {all:?}");

    let merged = t.run(&[
        "plan",
        "merge",
        "plan.toml",
        "b1",
        "b2",
        "b3",
        "--state-dir",
        "merged",
    ]);
    merged
        .code(1)
        .stderr_has("merging 8 cells from 3 bundles")
        .stdout_has("8 cells (0 played, 8 reused)")
        .stdout_has("gate played: SEND-READY")
        .stdout_has("every-cell-played: SEND-READY (8 units, 8 clear")
        .stdout_has("gate blockers: FIX FIRST")
        .stdout_has("finding: 8df40e09ffdc5950: The game exited with code 101 on `use idol`");
    for line in [
        "gate played:",
        "gate blockers:",
        "every-cell-played:",
        "crashes:",
    ] {
        let of = |out: &str| {
            out.lines()
                .find(|l| l.contains(line))
                .map(str::to_owned)
                .unwrap_or_default()
        };
        assert_eq!(of(&whole.stdout), of(&merged.stdout), "{line}");
    }
    let (whole, merged) = (aggregate_json(&t, "whole"), aggregate_json(&t, "merged"));
    for part in [
        "cells",
        "findings",
        "personas",
        "controllers",
        "simulations",
    ] {
        assert!(
            whole[part] == merged[part],
            "the merged aggregate's {part} differ from the whole run's:\n{}\n---\n{}",
            whole[part],
            merged[part]
        );
    }
}

#[test]
fn a_shard_run_again_plays_nothing_and_its_resume_writes_its_bundle() {
    let t = maze();
    let first = t.run(&[
        "plan",
        "run",
        "plan.toml",
        "--shard",
        "2/3",
        "--bundle",
        "b2",
    ]);
    first.code(0);
    let cells = cells_of(&t, "b2");
    assert!(!cells.is_empty());
    std::fs::remove_dir_all(t.path("b2")).expect("remove");
    let again = t.run(&[
        "plan",
        "run",
        "plan.toml",
        "--shard",
        "2/3",
        "--bundle",
        "b2",
        "--new",
    ]);
    again
        .code(0)
        .stdout_has(&format!("{} reused", cells.len()))
        .stdout_has("0 played");
    assert_eq!(
        cells_of(&t, "b2"),
        cells,
        "the bundle is written again, the same"
    );
}

#[test]
fn a_cell_whose_build_changed_after_its_shard_fails_at_merge_and_is_not_played() {
    let game = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/games/coins.py"),
    )
    .expect("coins.py");
    let plan = r#"version = 1
name = "coins"
controllers = ["standard", "rune"]

[game]
id = "coins"
driver = "stdio"
command = ["python3", "game/coins.py"]
inputs = ["game/coins.py"]

[budget]
max_actions = 10

[[personas]]
slug = "collector"
card = "Wants every coin."
player = { kind = "explorer" }

[[steps]]
id = "play"
kind = "play"
matrix = { persona = "*", controller = "*" }

[[steps]]
id = "aggregate"
kind = "aggregate"
needs = ["play"]
"#;
    let t = Test::new()
        .file("plan.toml", plan)
        .file("game/coins.py", &game);
    for k in ["1/2", "2/2"] {
        let bundle = format!("b{}", &k[..1]);
        t.run(&[
            "plan",
            "run",
            "plan.toml",
            "--shard",
            k,
            "--bundle",
            &bundle,
        ])
        .code(0);
    }
    // The build changes between the shards and the merge: the bundles'
    // cells were not played on this build.
    t.write(
        "game/coins.py",
        format!("{game}\n# changed after the shards ran\n"),
    );
    let merged = t.run(&["plan", "merge", "plan.toml", "b1", "b2", "--state-dir", "m"]);
    merged
        .code(1)
        .stdout_has("not among the merged cells under the key it has here")
        .stdout_has("It was not played again");
    let runs = std::fs::read_dir(t.path("m/runs")).expect("runs").count();
    assert_eq!(runs, 1);
    assert!(
        !merged.stdout.contains("played,") || merged.stdout.contains("0 played"),
        "a cell was played at merge:\n{merged}"
    );
}

#[test]
fn named_cells_make_a_bundle_of_exactly_those_cells_and_a_step_that_is_no_cell_is_refused() {
    let t = maze();
    let wanted = ["play[speedrunner,jev,1]", "play[curious-kid,standard,2]"];
    t.run(&[
        "plan",
        "run",
        "plan.toml",
        wanted[0],
        wanted[1],
        "--bundle",
        "batch",
    ])
    .code(0)
    .stderr_has("bundle of the named cells: 2 cells");
    let mut held = cells_of(&t, "batch");
    held.sort();
    let mut expected: Vec<String> = wanted.iter().map(|s| (*s).to_owned()).collect();
    expected.sort();
    assert_eq!(held, expected);
    t.run(&["plan", "run", "plan.toml", "aggregate", "--bundle", "nope"])
        .code(3)
        .stderr_has("none of the steps named is a cell");
}

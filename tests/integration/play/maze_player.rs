//! Play against the built-in maze (`builtin:maze`, i.e. `gameplan game
//! maze` across a real process boundary): the planted bugs are found with
//! evidence, traces are deterministic, and shrink finds the planted minimum.

use std::collections::BTreeSet;

use crate::support::Test;

const MAZE: &str = "builtin:maze";

#[track_caller]
fn play(t: &Test, out: &str, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["__play", "--out", out];
    args.extend_from_slice(extra);
    args.extend(["--", MAZE]);
    let output = t.run(&args);
    output.code(0);
    serde_json::from_str(&t.read(&format!("{out}/report.json")))
        .unwrap_or_else(|e| panic!("no report.json ({e})\n{output}"))
}

#[test]
fn play_maze_explorer_on_five_seeds_finds_the_four_planted_bugs_with_evidence() {
    let t = Test::new();
    let reports: Vec<serde_json::Value> = (1..=5)
        .map(|seed| play(&t, &format!("cells/{seed}"), &["--seed", &seed.to_string()]))
        .collect();
    let findings: Vec<&serde_json::Value> = reports
        .iter()
        .flat_map(|r| r["findings"].as_array().expect("findings"))
        .collect();
    let found: BTreeSet<&str> = findings
        .iter()
        .map(|f| f["category"].as_str().expect("category"))
        .collect();
    for category in ["crash", "refused", "stuck", "error"] {
        let f = findings
            .iter()
            .find(|f| f["category"] == category)
            .unwrap_or_else(|| panic!("no {category} among {found:?}"));
        let e = &f["evidence"];
        assert!(e["step"].as_u64().expect("step") >= 1, "{f:#}");
        assert_eq!(e["observation"].as_str().expect("hash").len(), 64, "{f:#}");
        assert!(
            !e["last_actions"].as_array().expect("actions").is_empty(),
            "{f:#}"
        );
    }
    let crash = findings
        .iter()
        .find(|f| f["category"] == "crash")
        .expect("crash");
    assert_eq!(
        crash["evidence"]["last_actions"]
            .as_array()
            .and_then(|a| a.last()),
        Some(&"use idol".into()),
        "{crash:#}"
    );
    assert!(
        crash["evidence"]["stderr_tail"]
            .as_str()
            .is_some_and(|s| !s.is_empty()),
        "{crash:#}"
    );
    let refused = findings
        .iter()
        .find(|f| f["category"] == "refused")
        .expect("refused");
    assert!(
        refused["title"].as_str().expect("title").contains("`down`"),
        "{refused:#}"
    );
    // Every cell talked to the maze itself.
    assert!(reports.iter().all(|r| r["game"]["name"] == "maze"));
}

#[test]
fn play_maze_the_same_seed_twice_gives_a_byte_identical_trace() {
    let t = Test::new();
    for controller in ["standard", "jev", "rune"] {
        play(&t, "a", &["--seed", "4", "--controller", controller]);
        play(&t, "b", &["--seed", "4", "--controller", controller]);
        let a = t.read("a/trace.jsonl");
        assert!(a.lines().count() > 2, "{a}");
        assert_eq!(a, t.read("b/trace.jsonl"), "{controller}");
    }
}

#[test]
fn play_maze_shrink_finds_the_planted_three_action_crash_and_replay_confirms_it() {
    let t = Test::new();
    // Seed 7: the shrine is south of the hall. Take the idol, wander the
    // hall (the sign, the jammed trapdoor), then use it.
    let mut script = vec!["south", "take idol", "north"];
    for _ in 0..8 {
        script.extend(["read sign", "down"]);
    }
    script.push("use idol");
    let mut args = vec!["--seed", "7", "--player", "scripted", "--patience", "100"];
    for action in &script {
        args.extend(["--action", action]);
    }
    let report = play(&t, "long", &args);
    assert_eq!(report["quit_reason"], "crash", "{report:#}");
    assert_eq!(report["actions_taken"], script.len());
    t.run(&["replay", "long/trace.jsonl"]).code(0);
    t.run(&[
        "shrink",
        "long/trace.jsonl",
        "--out",
        "short.jsonl",
        "--time-limit",
        "60",
    ])
    .code(0)
    .stderr_has("time limit of 60 s");
    let short = t.read("short.jsonl");
    let actions: Vec<String> = short
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v["action"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(actions, ["south", "take idol", "use idol"], "{short}");
    t.run(&["replay", "short.jsonl"])
        .code(0)
        .stdout_has("same end `crash`");
}

#[test]
fn play_maze_simulate_finds_crashes_and_every_failed_trace_replays() {
    let t = Test::new();
    let out = t.run(&[
        "__simulate",
        "--games",
        "40",
        "--workers",
        "2",
        "--max-steps",
        "40",
        "--strategies",
        "explorer,random",
        "--out",
        "failed",
        "--",
        MAZE,
    ]);
    out.code(1).stdout_has("games 40 ");
    let traces = crate::support::failed_traces(&out.stdout);
    assert!(!traces.is_empty(), "{out}");
    for address in &traces {
        t.run(&["replay", address])
            .code(0)
            .stdout_has("same end `crash`");
    }
}

/// Issue 19: the traces of a simulation's failed games share one batch
/// file per worker. A run stopped while writing (its index never written,
/// its last record torn) still replays every whole record by its address,
/// names the torn one as cut short, and a batch file given without an
/// address says which games it holds.
#[test]
fn batch_traces_replay_by_address_and_survive_a_torn_write() {
    let t = Test::new();
    let out = t.run(&[
        "__simulate",
        "--games",
        "30",
        "--workers",
        "1",
        "--max-steps",
        "40",
        "--out",
        "failed",
        "--",
        MAZE,
    ]);
    out.code(1);
    let traces = crate::support::failed_traces(&out.stdout);
    assert!(traces.len() >= 3, "{out}");
    assert!(
        traces
            .iter()
            .all(|a| a.starts_with("failed/batch-0.jsonl#game-")),
        "{traces:?}"
    );
    let index = t.read("failed/index.jsonl");
    assert_eq!(index.lines().count(), traces.len(), "{index}");

    // As if the run was killed writing its last trace.
    let batch = t.read("failed/batch-0.jsonl");
    let last = batch.rfind("{\"simulated_game\":").expect("a last record");
    let torn = last + (batch.len() - last) / 2;
    t.write("failed/batch-0.jsonl", &batch[..torn]);
    std::fs::remove_file(t.path("failed/index.jsonl")).expect("rm index");

    t.run(&["replay", traces[0]])
        .code(0)
        .stdout_has("same end `crash`");
    t.run(&["replay", traces[traces.len() - 1]])
        .code(3)
        .stderr_has("cut short");
    t.run(&["replay", "failed/batch-0.jsonl"])
        .code(3)
        .stderr_has("name one as failed/batch-0.jsonl#game-N");
    t.run(&["replay", "failed/batch-0.jsonl#game-999999"])
        .code(3)
        .stderr_has("no trace of game 999999");
}

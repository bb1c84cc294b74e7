//! One trap does not end the search (after
//! `stuck` a cell resets the game and plays on, the explorer remembering
//! what it tried; replay and shrink follow the trace's resets), and replay
//! and shrink use the trace's own settings (the header's `action_timeout`)
//! and show what differed when a game no longer plays the same.

use std::time::{Duration, Instant};

use crate::support::Test;

/// A pit north of the hall that nothing gets out of (a softlock), and a
/// crash in the workshop, reached only through the corridor to the east.
const TRAP: &str = r#"#!/usr/bin/env python3
import json
import sys
import time

ROOMS = {
    "hall": ("A hall. A pit gapes to the north; a corridor runs east.", ["north", "east", "look"]),
    "pit": ("The bottom of a pit. The walls are too smooth to climb.", ["shout", "wait"]),
    "corridor": ("A long corridor.", ["back", "forward"]),
    "workshop": ("A workshop with a big red button.", ["back", "press button"]),
}
MOVES = {("hall", "north"): "pit", ("hall", "east"): "corridor",
         ("corridor", "back"): "hall", ("corridor", "forward"): "workshop",
         ("workshop", "back"): "corridor"}


def observation(room):
    text, actions = ROOMS[room]
    return {"text": text, "actions": actions, "state": {"room": room}, "score": 0}


room = "hall"
for line in sys.stdin:
    req = json.loads(line)
    resp = {"id": req["id"], "ok": True}
    if req["op"] == "hello":
        resp.update(name="trap", version="1", protocol=1)
    elif req["op"] == "reset":
        room = "hall"
        resp["observation"] = observation(room)
    elif req["op"] == "act":
        if room == "workshop" and req["action"] == "press button":
            raise RuntimeError("the button is wired to nothing")
        room = MOVES.get((room, req["action"]), room)
        resp.update(observation=observation(room), reward=0, done=False, events=[])
    elif req["op"] == "close":
        print(json.dumps(resp), flush=True)
        break
    print(json.dumps(resp), flush=True)
"#;

const CRASH: &str = "raise RuntimeError(\"the button is wired to nothing\")";

fn plan(game: &str, personas: &str, seeds: &str) -> String {
    format!(
        r#"version = 1
name = "trap"
controllers = ["standard", "jev"]

[game]
id = "trap"
command = ["python3", "trap.py"]
inputs = ["trap.py"]
{game}

{personas}

[[steps]]
id = "play"
kind = "play"
matrix = {{ persona = "*", controller = "*", seed = {seeds} }}
"#
    )
}

const SEEKERS: &str = r#"[[personas]]
slug = "seeker"
card = "Tries what it has not tried."
player = { kind = "explorer" }
patience = 60

[[personas]]
slug = "masher"
card = "Presses anything."
player = { kind = "random" }
patience = 60
"#;

fn lines(text: &str) -> Vec<serde_json::Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn categories(report: &serde_json::Value) -> Vec<String> {
    report["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .map(|f| f["category"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// The cells of a run: (cell id, report.json, the cell's directory).
fn cells(t: &Test, doc: &serde_json::Value) -> Vec<(String, serde_json::Value, String)> {
    doc["playtest"]["cells"]
        .as_array()
        .expect("playtest.cells")
        .iter()
        .map(|cell| {
            let md = cell["report"].as_str().expect("report path");
            let dir = md.trim_end_matches("report.md").to_owned();
            let report =
                serde_json::from_str(&t.read(&format!("{dir}report.json"))).expect("report.json");
            (format!("{}/{}", cell["persona"], cell["seed"]), report, dir)
        })
        .collect()
}

/// Every explorer cell falls into the pit first, declares it `stuck`,
/// resets the game and goes east this time, to the crash: one trap room
/// does not hide the rest of the game. (Before, a stuck cell pressed
/// `shout` and `wait` until its patience ran out, and never found the
/// crash.) The trace records the reset and replays.
#[test]
fn play_cells_find_the_trap_room_and_the_crash_behind_another_room() {
    let t = Test::new()
        .file("plan.toml", plan("", SEEKERS, "[1, 2, 3]"))
        .file("trap.py", TRAP);
    let out = t.run(&["plan", "run", "plan.toml", "--json"]);
    out.code(0);
    let doc = out.json();
    let cells = cells(&t, &doc);
    assert_eq!(cells.len(), 12, "{out}");
    let mut replayed = false;
    for (id, report, dir) in &cells {
        let found = categories(report);
        let trace = t.read(&format!("{dir}trace.jsonl"));
        // The opening's second reset is the first reset line; every other
        // one is a reset after `stuck`, which the report counts.
        let resets = lines(&trace)
            .iter()
            .filter(|l| l.get("reset").is_some())
            .count()
            - 1;
        assert_eq!(report["metrics"]["resets"], resets, "{id}: {report:#}");
        if report["persona"] == "seeker" {
            assert!(
                found.contains(&"stuck".to_owned()) && found.contains(&"crash".to_owned()),
                "{id}: the explorer finds the pit and the crash: {report:#}"
            );
            assert_eq!(report["quit_reason"], "crash", "{id}: {report:#}");
            assert!(resets >= 1, "{id}: no reset line in\n{trace}");
        }
        if found.contains(&"stuck".to_owned()) {
            assert!(resets >= 1, "{id}: stuck, then no reset:\n{trace}");
            // Each reset line names the cell's seed and the hash it gave.
            let reset = lines(&trace)
                .into_iter()
                .filter(|l| l.get("reset").is_some())
                .nth(1)
                .expect("a reset line after stuck");
            assert_eq!(reset["reset"], report["seed"], "{reset}");
            assert_eq!(reset["obs"].as_str().map(str::len), Some(64), "{reset}");
            // The findings of both episodes are in the one report, once each.
            assert_eq!(
                found.iter().filter(|c| *c == "stuck").count(),
                1,
                "{id}: {found:?}"
            );
            if !replayed {
                t.run(&["replay", &format!("{dir}trace.jsonl")])
                    .code(0)
                    .stdout_has("confirmed");
                replayed = true;
            }
        }
    }
    // The random player resets too: some random cell went on after `stuck`.
    assert!(
        cells.iter().any(|(_, r, _)| r["persona"] == "masher"
            && categories(r).contains(&"stuck".to_owned())
            && categories(r).contains(&"crash".to_owned())),
        "{out}"
    );
    assert!(replayed);
}

/// A script is a script: a scripted player that walks into the pit plays
/// its script as written after `stuck` (no reset), and the cell ends when
/// the script does.
#[test]
fn a_scripted_player_plays_its_script_through_a_trap_without_a_reset() {
    let t = Test::new().file("trap.py", TRAP);
    let mut args = vec![
        "__play", "--out", "cell", "--player", "scripted", "--action", "north",
    ];
    for _ in 0..6 {
        args.extend(["--action", "shout", "--action", "wait"]);
    }
    args.extend(["--", "python3", "trap.py"]);
    t.run(&args).code(0);
    let report: serde_json::Value =
        serde_json::from_str(&t.read("cell/report.json")).expect("report.json");
    assert_eq!(report["quit_reason"], "script_end", "{report:#}");
    assert_eq!(report["actions_taken"], 13);
    assert_eq!(categories(&report), ["stuck"]);
    // Only the opening's second reset, before step 1: none after the trap.
    let trace = lines(&t.read("cell/trace.jsonl"));
    let resets: Vec<usize> = (0..trace.len())
        .filter(|&i| trace[i].get("reset").is_some())
        .collect();
    assert_eq!(resets, [1], "{trace:#?}");
}

/// A crash trace with a reset before the crash shrinks to the path past
/// the trap (the reset and the pit are cut), and the result replays.
#[test]
fn a_crash_trace_with_a_reset_before_it_shrinks() {
    let t = Test::new().file("trap.py", TRAP);
    t.run(&[
        "__play",
        "--out",
        "cell",
        "--seed",
        "1",
        "--patience",
        "60",
        "--",
        "python3",
        "trap.py",
    ])
    .code(0);
    let trace = t.read("cell/trace.jsonl");
    assert!(trace.contains("{\"reset\":1,"), "{trace}");
    assert!(trace.ends_with("{\"end\":\"crash\"}\n"), "{trace}");
    t.run(&["shrink", "cell/trace.jsonl", "--out", "short.jsonl"])
        .code(0);
    let short = t.read("short.jsonl");
    let actions: Vec<String> = lines(&short)
        .iter()
        .filter_map(|l| l["action"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(actions, ["east", "forward", "press button"], "{short}");
    t.run(&["replay", "short.jsonl"])
        .code(0)
        .stdout_has("same end `crash`");
}

/// Replay resets the game where the trace did and checks the observation
/// the reset gave: a game whose second reset differs diverges there.
#[test]
fn replay_checks_the_observation_of_every_reset() {
    let t = Test::new().file("trap.py", TRAP);
    t.run(&[
        "__play",
        "--out",
        "cell",
        "--seed",
        "1",
        "--patience",
        "60",
        "--",
        "python3",
        "trap.py",
    ])
    .code(0);
    let trace = lines(&t.read("cell/trace.jsonl"));
    // The first reset line is the opening's second reset (before step 1);
    // the one after it is the reset that followed `stuck`.
    assert!(trace[1].get("reset").is_some(), "{trace:?}");
    let after = trace[2..]
        .iter()
        .take_while(|l| l.get("reset").is_none())
        .filter(|l| l.get("step").is_some())
        .count();
    // The game now counts its games in the state of every reset but the
    // opening's two.
    t.write(
        "trap.py",
        TRAP.replace("room = \"hall\"\nfor line", "room = \"hall\"\ngames = 0\nfor line")
            .replace(
                "resp[\"observation\"] = observation(room)",
                "games += 1\n        resp[\"observation\"] = observation(room)\n        if games > 2:\n            resp[\"observation\"][\"state\"][\"games\"] = games",
            ),
    );
    let out = t.run(&["replay", "cell/trace.jsonl"]);
    out.code(1)
        .stdout_has(&format!("diverged at the reset after step {after}\n"))
        .stdout_has("    state.games: (missing) → 3\n");
}

/// A hang trace from a plan with `action_timeout = 2` replays in the
/// trace's 2 s, not replay's old default of 10 s, and says which timeout it
/// used; shrink uses it too.
#[test]
fn a_hang_trace_replays_within_the_plans_action_timeout() {
    let personas = r#"[[personas]]
slug = "presser"
card = "Goes straight for the button."
player = { kind = "scripted", actions = ["east", "forward", "press button"] }
"#;
    let plan = plan("action_timeout = 2", personas, "[1]").replace(
        "controllers = [\"standard\", \"jev\"]",
        "controllers = [\"standard\"]",
    );
    let t = Test::new()
        .file("plan.toml", plan)
        .file("trap.py", TRAP.replace(CRASH, "time.sleep(3600)"));
    let out = t.run(&["plan", "run", "plan.toml", "--json"]);
    out.code(0);
    let doc = out.json();
    let cells = cells(&t, &doc);
    let (_, report, dir) = &cells[0];
    assert_eq!(report["quit_reason"], "hang", "{report:#}");
    let path = format!("{dir}trace.jsonl");
    let header = lines(&t.read(&path)).remove(0);
    assert_eq!(header["game"]["action_timeout"], 2.0, "{header}");
    assert_eq!(header["game"]["stuck_after"], 8, "{header}");

    let started = Instant::now();
    let replayed = t.run(&["replay", &path]);
    let took = started.elapsed();
    replayed
        .code(0)
        .stdout_has("same end `hang`")
        .stdout_has("action timeout 2 s, from the trace");
    assert!(
        took < Duration::from_secs(7),
        "a 2 s timeout replayed in {took:?} (the old default was 10 s)\n{replayed}"
    );

    let started = Instant::now();
    let shrunk = t.run(&["shrink", &path, "--out", "short.jsonl"]);
    let took = started.elapsed();
    shrunk
        .code(0)
        .stderr_has("action timeout 2 s, from the trace");
    // Its few hanging runs at 2 s each; the old 10 s default made each
    // cost 10 s (40 s and more), so this bound still tells them apart on a
    // loaded machine.
    assert!(took < Duration::from_secs(25), "{took:?}\n{shrunk}");

    // The flag still wins over the trace.
    t.run(&["replay", &path, "--action-timeout", "0.5"])
        .code(0)
        .stdout_has("action timeout 0.5 s, from --action-timeout");
}

/// A divergence shows what differed: with the cell's transcript beside the
/// trace, the text lines and the state key that changed; without it, it
/// says only hashes are known.
#[test]
fn a_divergence_names_the_field_that_differs() {
    let t = Test::new().file("trap.py", TRAP);
    t.run(&[
        "__play",
        "--out",
        "cell",
        "--seed",
        "2",
        "--patience",
        "60",
        "--",
        "python3",
        "trap.py",
    ])
    .code(0);
    // A trace from before headers carried the timeouts replays with the
    // old default, and says so.
    let old =
        t.read("cell/trace.jsonl")
            .replacen(",\"action_timeout\":10.0,\"stuck_after\":8", "", 1);
    assert!(!old.contains("action_timeout"), "{old}");
    t.write("old/trace.jsonl", old);
    t.run(&["replay", "old/trace.jsonl"])
        .code(0)
        .stdout_has("action timeout 10 s, the default: the trace does not say");
    let first_workshop = lines(&t.read("cell/transcript.jsonl"))
        .iter()
        .find(|l| l["observation"]["state"]["room"] == "workshop" && l.get("action").is_some())
        .and_then(|l| l["step"].as_u64())
        .expect("the cell reaches the workshop");
    t.write(
        "trap.py",
        TRAP.replace("a big red button", "a big blue button").replace(
            "\"state\": {\"room\": room}",
            "\"state\": {\"room\": room, **({\"button\": \"blue\"} if room == \"workshop\" else {})}",
        ),
    );
    let out = t.run(&["replay", "cell/trace.jsonl"]);
    out.code(1)
        .stdout_has(&format!("diverged at step {first_workshop} (`forward`)"))
        .stdout_has("  differs:\n")
        .stdout_has("      - A workshop with a big red button.\n")
        .stdout_has("      + A workshop with a big blue button.\n")
        .stdout_has("    state.button: (missing) → \"blue\"\n");
    assert!(!out.stdout.contains("actions:"), "{out}");

    // Away from its transcript, a trace holds hashes only.
    t.write("away/trace.jsonl", t.read("cell/trace.jsonl"));
    t.run(&["replay", "away/trace.jsonl"])
        .code(1)
        .stdout_has("the trace holds hashes only");
}

/// A game that dies when reset for a second game (its first is the
/// opening's two resets): the cell's trace records the reset that failed,
/// replay confirms it, and shrink cuts everything but the resets.
#[test]
fn a_reset_that_crashes_is_recorded_replayed_and_shrunk() {
    let dies = TRAP
        .replace("room = \"hall\"\nfor line", "room = \"hall\"\ngames = 0\nfor line")
        .replace(
            "        room = \"hall\"\n        resp[\"observation\"]",
            "        games += 1\n        if games > 2:\n            sys.exit(\"no second game\")\n        room = \"hall\"\n        resp[\"observation\"]",
        );
    let t = Test::new().file("trap.py", dies);
    t.run(&[
        "__play",
        "--out",
        "cell",
        "--seed",
        "1",
        "--patience",
        "60",
        "--",
        "python3",
        "trap.py",
    ])
    .code(0);
    let report: serde_json::Value =
        serde_json::from_str(&t.read("cell/report.json")).expect("report.json");
    assert_eq!(report["quit_reason"], "crash", "{report:#}");
    let crash = report["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .find(|f| f["category"] == "crash")
        .expect("a crash finding");
    assert!(
        crash["title"]
            .as_str()
            .is_some_and(|t| t.contains("`reset`") && t.contains("no second game")),
        "{crash:#}"
    );
    let trace = t.read("cell/trace.jsonl");
    assert!(
        trace.ends_with("{\"reset\":1,\"obs\":null}\n{\"end\":\"crash\"}\n"),
        "{trace}"
    );
    t.run(&["replay", "cell/trace.jsonl"])
        .code(0)
        .stdout_has("same end `crash`");
    t.run(&["shrink", "cell/trace.jsonl", "--out", "short.jsonl"])
        .code(0);
    let short = lines(&t.read("short.jsonl"));
    // The opening's second reset stays: without it the failing reset would
    // be the game's second, which it answers.
    assert_eq!(short.len(), 4, "header, two resets, the end: {short:#?}");
    assert!(short[1]["obs"].is_string(), "{short:#?}");
    assert_eq!(short[2], serde_json::json!({"reset": 1, "obs": null}));
    t.run(&["replay", "short.jsonl"])
        .code(0)
        .stdout_has("confirmed: 0 steps");
}

//! `[game] limits` measure use: a game past `limits.memory` (resident
//! memory of its process tree) is stopped and told so, at the start (the
//! cell did not play) and mid-play (a crash finding); `cpu_seconds` stops
//! a spinning game by its name; a game that dies at the start for no
//! reason it gives is told the limits in force, and so is its replay; the
//! trace header records the effective limits, defaults included.

use crate::support::Test;

const GLUTTON: &str = include_str!("../../fixtures/games/glutton.py");

/// A plan for `command` (a TOML array) with `[game]` ending in `extra`,
/// one scripted persona playing `actions`.
fn plan(command: &str, extra: &str, actions: &str) -> String {
    format!(
        r#"version = 1
name = "limits"

[game]
id = "g"
command = {command}
{extra}

[[personas]]
slug = "p"
card = "Plays."
player = {{ kind = "scripted", actions = {actions} }}

[[steps]]
id = "play"
kind = "play"
matrix = {{ persona = "*" }}
"#
    )
}

fn report(t: &Test) -> serde_json::Value {
    let run = t.run_ids().pop().expect("a run");
    serde_json::from_str(&t.read(&format!(".gameplan/runs/{run}/steps/play[p]/report.json")))
        .expect("report")
}

fn cell_file(t: &Test, file: &str) -> std::path::PathBuf {
    let run = t.run_ids().pop().expect("a run");
    t.path(&format!(".gameplan/runs/{run}/steps/play[p]/{file}"))
}

#[test]
fn a_game_past_its_resident_memory_at_the_start_did_not_play_and_is_told_the_key() {
    let t = Test::new().file("glutton.py", GLUTTON).file(
        "plan.toml",
        plan(
            r#"["python3", "glutton.py", "start"]"#,
            r#"limits = { memory = "256 MiB" }"#,
            r#"["wait"]"#,
        ),
    );
    let out = t.run(&["plan", "run", "plan.toml"]);
    out.code(1);
    let report = report(&t);
    let why = &report["not_played"];
    assert_eq!(
        why["cause"],
        "the game used more than `game.limits.memory` (256 MiB resident) and was stopped during `hello`",
        "{why:#}"
    );
    assert_eq!(
        why["hint"],
        "raise it (`limits = { memory = \"1 GiB\" }`) or lift it (\"none\")"
    );
    assert!(
        out.stderr
            .contains("`game.limits.memory` (256 MiB resident)")
            || out
                .stdout
                .contains("`game.limits.memory` (256 MiB resident)"),
        "the run says it: {}\n{}",
        out.stdout,
        out.stderr
    );
}

#[test]
fn a_game_past_its_resident_memory_mid_play_is_a_crash_finding_naming_the_limit() {
    let t = Test::new().file("glutton.py", GLUTTON).file(
        "plan.toml",
        plan(
            r#"["python3", "glutton.py"]"#,
            r#"limits = { memory = "256 MiB" }"#,
            r#"["wait", "eat", "wait"]"#,
        ),
    );
    t.run(&["plan", "run", "plan.toml"]).code(0);
    let report = report(&t);
    assert_eq!(report["quit_reason"], "crash", "{report:#}");
    let finding = &report["findings"][0];
    assert_eq!(finding["category"], "crash");
    let title = finding["title"].as_str().expect("title");
    assert!(
        title.starts_with(
            "The game used more than `game.limits.memory` (256 MiB resident; raise it (`limits = { memory = \"1 GiB\" }`) or lift it (\"none\")) and was stopped on `eat`"
        ),
        "{title}"
    );
    assert_eq!(finding["evidence"]["step"], 2, "{finding:#}");
}

#[test]
fn with_memory_lifted_the_same_game_eats_and_plays_on() {
    let t = Test::new().file("glutton.py", GLUTTON).file(
        "plan.toml",
        plan(
            r#"["python3", "glutton.py"]"#,
            r#"limits = { memory = "none" }"#,
            r#"["eat", "wait"]"#,
        ),
    );
    t.run(&["plan", "run", "plan.toml"]).code(0);
    let report = report(&t);
    assert_eq!(report["quit_reason"], "script_end", "{report:#}");
    assert_eq!(report["findings"], serde_json::json!([]), "{report:#}");
}

#[test]
fn a_game_past_its_cpu_seconds_is_stopped_by_that_name() {
    let spinner = "import json, sys\nfor line in sys.stdin:\n    r = json.loads(line)\n    if r['op'] == 'act':\n        while True:\n            pass\n    obs = {'text': 'a wheel', 'actions': ['spin'], 'state': {}, 'score': 0}\n    a = {'id': r['id'], 'ok': True, 'name': 's', 'version': '1', 'protocol': 1, 'observation': obs}\n    print(json.dumps(a), flush=True)\n";
    let t = Test::new().file("spinner.py", spinner).file(
        "plan.toml",
        plan(
            r#"["python3", "spinner.py"]"#,
            "action_timeout = 30\nlimits = { cpu_seconds = 1 }",
            r#"["spin"]"#,
        ),
    );
    let began = std::time::Instant::now();
    t.run(&["plan", "run", "plan.toml"]).code(0);
    let report = report(&t);
    let title = report["findings"][0]["title"].as_str().unwrap_or_default();
    assert!(
        title.starts_with(
            "The game used more than `game.limits.cpu_seconds` (1 s of CPU; raise it (`limits = { cpu_seconds = 4 }`)"
        ),
        "{report:#}"
    );
    // Stopped by the kernel at the limit, not by the 30 s deadline (the
    // finding's confirmation spins once more).
    assert!(
        began.elapsed() < std::time::Duration::from_secs(25),
        "{:?}",
        began.elapsed()
    );
}

#[test]
fn a_game_that_dies_silently_at_the_start_is_told_the_limits_in_force_and_so_is_its_replay() {
    let t = Test::new()
        .file("quits.py", "import sys\nsys.exit(2)\n")
        .file(
            "plan.toml",
            plan(r#"["python3", "quits.py"]"#, "", r#"["wait"]"#),
        );
    t.run(&["plan", "run", "plan.toml"]).code(1);
    let report = report(&t);
    let why = &report["not_played"];
    assert_eq!(
        why["cause"], "the game exited with code 2 on `hello`",
        "{why:#}"
    );
    let limits = "it ran under game.limits: memory 4 GiB resident, cpu 600 s, open files 1024; if it needs more, raise the one it needs (it wrote nothing on stderr)";
    assert_eq!(why["hint"], limits, "{why:#}");
    // The header holds the effective limits, defaults included.
    let trace = cell_file(&t, "trace.jsonl");
    let header: serde_json::Value = serde_json::from_str(
        t.read(
            trace
                .strip_prefix(t.path(""))
                .expect("in the repo")
                .to_str()
                .expect("utf-8"),
        )
        .lines()
        .next()
        .expect("a header"),
    )
    .expect("json");
    assert_eq!(
        header["game"]["limits"],
        serde_json::json!({"memory": 4_u64 << 30, "address_space": null, "cpu_seconds": 600, "processes": null, "open_files": 1024}),
        "{header:#}"
    );
    // Replay dies the same way and says why as the cell did.
    t.run(&["replay", trace.to_str().expect("utf-8")])
        .code(0)
        .stdout_has("same end `crash`")
        .stdout_has(limits);
}

#[test]
fn a_game_dying_at_the_start_has_its_stderr_quoted_beside_the_limits() {
    let t = Test::new()
        .file(
            "boom.py",
            "import sys\nprint('loading assets', file=sys.stderr)\nraise ConnectionRefusedError('[Errno 111] Connection refused')\n",
        )
        .file(
            "plan.toml",
            plan(
                r#"["python3", "boom.py"]"#,
                r#"limits = { memory = "2 GiB", address_space = "8 GiB", cpu_seconds = 60, processes = 4096, open_files = 256 }"#,
                r#"["wait"]"#,
            ),
        );
    t.run(&["plan", "run", "plan.toml"]).code(1);
    let why = &report(&t)["not_played"];
    assert_eq!(
        why["hint"],
        "it ran under game.limits: memory 2 GiB resident, address space 8 GiB, cpu 60 s, processes 4096, open files 256; if it needs more, raise the one it needs (its stderr ended: `ConnectionRefusedError: [Errno 111] Connection refused`)",
        "{why:#}"
    );
}

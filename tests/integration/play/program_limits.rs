//! `[game] limits`: a JVM game started with a large fixed heap, as JVM
//! engines' launch scripts start them (`java -Xmx4g`), under the default
//! 4 GiB address-space limit fails before it plays, and the failure names
//! the limit and the plan key and quotes the JVM's own error (the line it
//! writes on stdout); with
//! `limits.memory = "none"` it plays, and its traces replay with its
//! `game.env`. Bad limits are plan errors. Needs `javac` and `java`
//! (`.ci/run` installs Debian's default-jdk-headless).

use crate::support::Test;

/// A repo with the Lamp game compiled into `build/`, and a plan whose
/// `[game]` ends with `extra`.
fn lamp(extra: &str) -> Test {
    let source = std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/games/jvm/Lamp.java"),
    )
    .expect("Lamp.java");
    let plan = format!(
        r#"version = 1
name = "lamp"

[game]
id = "lamp"
command = ["java", "-Xmx4g", "-cp", "build", "Lamp"]
action_timeout = 20
env = {{ LAMP_ROOM = "attic" }}
{extra}

[[personas]]
slug = "switcher"
card = "Switches the lamp."
player = {{ kind = "scripted", actions = ["switch", "look", "switch"] }}

[[steps]]
id = "play"
kind = "play"
matrix = {{ persona = "*" }}
"#
    );
    let t = Test::new()
        .file("Lamp.java", source)
        .file("plan.toml", plan);
    let built = std::process::Command::new("javac")
        .args(["-d", "build", "Lamp.java"])
        .current_dir(t.path(""))
        .output()
        .expect("javac (install default-jdk-headless)");
    assert!(built.status.success(), "javac: {built:?}");
    t
}

#[test]
fn a_jvm_game_under_the_default_memory_limit_fails_naming_the_limit_and_quoting_the_jvm() {
    let t = lamp("");
    let out = t.run(&["plan", "run", "plan.toml"]);
    out.code(1);
    let run = t.run_ids().pop().expect("a run");
    let report: serde_json::Value = serde_json::from_str(&t.read(&format!(
        ".gameplan/runs/{run}/steps/play[switcher]/report.json"
    )))
    .expect("report");
    let not_played = &report["not_played"];
    let hint = not_played["hint"].as_str().expect("a hint");
    assert!(
        hint.contains("`game.limits.memory` (4.0 GiB") && hint.contains("memory = \"none\""),
        "{not_played:#}"
    );
    // The JVM's own words, which it writes on stdout.
    assert!(
        hint.contains("(the game said: `Error occurred during initialization of VM`)"),
        "{not_played:#}"
    );
}

#[test]
fn with_the_memory_limit_lifted_the_jvm_game_plays_and_its_trace_replays_with_its_env() {
    let t = lamp("limits = { memory = \"none\", open_files = 4096 }");
    t.run(&["plan", "run", "plan.toml"]).code(0);
    let run = t.run_ids().pop().expect("a run");
    let dir = format!(".gameplan/runs/{run}/steps/play[switcher]");
    let transcript = t.read(&format!("{dir}/transcript.jsonl"));
    assert!(
        transcript.contains("You are in the attic. The lamp is on."),
        "{transcript}"
    );
    let trace = t.path(&format!("{dir}/trace.jsonl"));
    t.run(&["replay", trace.to_str().expect("utf-8")])
        .code(0)
        .stdout_has("every observation hash matches");
}

#[test]
fn limits_are_checked_where_they_are_written() {
    for (limits, says) in [
        ("limits = { memory = \"8 GB\" }", "expected a limit"),
        (
            "limits = { memory = \"1 MiB\" }",
            "`limits.memory` is below 16 MiB",
        ),
        ("limits = { open_files = 0 }", "expected a limit"),
        ("limits = { threads = 4 }", "unknown key"),
    ] {
        let t = Test::new()
            .file("plan.toml", format!("version = 1\nname = \"l\"\n\n[game]\nid = \"g\"\ncommand = [\"builtin:maze\"]\n{limits}\n"));
        let check = t.check(&["plan.toml"]);
        assert!(check.text.stderr.contains(says), "{limits}: {}", check.text);
        check.json.code(3);
    }
}

#[test]
fn a_game_that_opens_more_files_than_its_limit_is_told_the_key_that_raises_it() {
    // A game that opens 40 files before it answers `hello`, under 20.
    let game = "import sys\nfiles = [open(__file__) for _ in range(40)]\nprint('{\"id\":1,\"ok\":true,\"name\":\"f\",\"version\":\"1\",\"protocol\":1}', flush=True)\n";
    let plan = |limit: &str| {
        format!(
            "version = 1\nname = \"files\"\n\n[game]\nid = \"f\"\ncommand = [\"python3\", \"game.py\"]\nlimits = {{ open_files = {limit} }}\n\n[[personas]]\nslug = \"p\"\ncard = \"Plays.\"\nplayer = {{ kind = \"random\" }}\n\n[[steps]]\nid = \"play\"\nkind = \"play\"\nmatrix = {{ persona = \"*\" }}\n"
        )
    };
    let t = Test::new()
        .file("game.py", game)
        .file("plan.toml", plan("20"));
    t.run(&["plan", "run", "plan.toml"]).code(1);
    let run = t.run_ids().pop().expect("a run");
    let report: serde_json::Value =
        serde_json::from_str(&t.read(&format!(".gameplan/runs/{run}/steps/play[p]/report.json")))
            .expect("report");
    let hint = report["not_played"]["hint"].as_str().unwrap_or_default();
    assert!(
        hint.contains("`game.limits.open_files` (20)") && hint.contains("Too many open files"),
        "{report:#}"
    );
}

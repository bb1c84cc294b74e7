//! `[game] limits` on JVM games: started with a large fixed heap, as JVM
//! engines' launch scripts start them (`java -Xmx4g`), or through a
//! Python launcher that hides the JVM's stderr (its own, or py4j's
//! `launch_gateway`), a JVM game plays under the default limits (memory
//! is what it uses, not what it reserves), and its traces replay with its
//! `game.env`; under an address-space limit it fails before it plays, and
//! the failure names that key and quotes the JVM's own error (the line it
//! writes on stdout). Bad limits are plan errors. Needs `javac` and `java`
//! (`.ci/run` installs Debian's default-jdk-headless); the py4j test needs
//! `PyPI`'s `py4j` (`pip install py4j`; `.ci/run` installs it) and fails without it.

use crate::support::Test;

/// A repo with the Lamp game compiled into `build/` (and its Python
/// launchers), and a plan whose `[game]` starts `command` (a TOML array)
/// and ends with `extra`.
fn lamp(command: &str, extra: &str) -> Test {
    let fixture = |name: &str| {
        std::fs::read(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/games/jvm")
                .join(name),
        )
        .expect("a fixture")
    };
    let source = std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/games/jvm/Lamp.java"),
    )
    .expect("Lamp.java");
    let plan = format!(
        r#"version = 1
name = "lamp"

[game]
id = "lamp"
command = {command}
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
        .file("lamp_wrapper.py", fixture("lamp_wrapper.py"))
        .file("lamp_py4j.py", fixture("lamp_py4j.py"))
        .file("plan.toml", plan);
    let built = std::process::Command::new("javac")
        .args(["-d", "build", "Lamp.java"])
        .current_dir(t.path(""))
        .output()
        .expect("javac (install default-jdk-headless)");
    assert!(built.status.success(), "javac: {built:?}");
    t
}

/// The JVM with a 4 GiB heap, as its launch script starts it.
const JAVA: &str = r#"["java", "-Xmx4g", "-cp", "build", "Lamp"]"#;

#[test]
fn a_jvm_game_under_an_address_space_limit_fails_naming_that_key_and_quoting_the_jvm() {
    let t = lamp(JAVA, r#"limits = { address_space = "2 GiB" }"#);
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
        hint.contains("`game.limits.address_space` (2 GiB of address space")
            && hint.contains("`limits = { address_space = \"8 GiB\" }`")
            && hint.contains("address_space = \"none\""),
        "{not_played:#}"
    );
    // The JVM's own words, which it writes on stdout.
    assert!(
        hint.contains("(the game said: `Error occurred during initialization of VM`)"),
        "{not_played:#}"
    );
}

/// Plays `t`'s plan and checks the lamp was lit in the attic (its
/// `game.env`) and that the cell's trace replays.
fn plays_and_replays(t: &Test) {
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
fn a_jvm_game_with_a_large_heap_plays_under_the_default_limits_and_its_trace_replays_with_its_env()
{
    plays_and_replays(&lamp(JAVA, ""));
}

#[test]
fn a_jvm_game_behind_a_launcher_that_hides_its_stderr_plays_under_the_default_limits() {
    plays_and_replays(&lamp(r#"["python3", "lamp_wrapper.py", "-Xmx4g"]"#, ""));
}

#[test]
fn a_jvm_game_started_by_py4j_launch_gateway_plays_under_the_default_limits() {
    // Fails, not skips, without py4j: `.ci/run` installs it.
    let has_py4j = std::process::Command::new("python3")
        .args(["-c", "import py4j"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        has_py4j,
        "PyPI's py4j is not installed here: `python3 -m pip install py4j==0.10.9.9` (as .ci/run does)"
    );
    plays_and_replays(&lamp(r#"["python3", "lamp_py4j.py", "-Xmx4g"]"#, ""));
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

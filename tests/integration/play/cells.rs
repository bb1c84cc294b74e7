//! Play: cells against real game processes (Python fixtures and examples),
//! replay, shrink, simulate, and hostile games that must be contained.
//!
//! Cells are played through `gameplan play` (what a `play` step does,
//! without a plan; `__play` is its old name), so these tests need no plan.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use crate::support::{Test, wait_until};

const BUGGY: &str = include_str!("../../fixtures/games/buggy.py");
const HOSTILE: &str = include_str!("../../fixtures/games/hostile.py");
const COINS: &str = include_str!("../../../examples/games/coins.py");

/// A hostile game must be dealt with within its action timeout plus this:
/// the group kill's grace, process start-up of the debug binary and Python
/// on a busy two-core machine.
const GRACE: Duration = Duration::from_secs(6);

fn game_repo() -> Test {
    Test::new()
        .file("buggy.py", BUGGY)
        .file("hostile.py", HOSTILE)
        .file("examples/games/coins.py", COINS)
}

/// Plays one cell; returns its report.json.
#[track_caller]
fn play(t: &Test, out: &str, extra: &[&str], command: &[&str]) -> serde_json::Value {
    let mut args = vec!["__play", "--out", out];
    args.extend_from_slice(extra);
    args.push("--");
    args.extend_from_slice(command);
    let output = t.run(&args);
    output.code(0);
    serde_json::from_str(&t.read(&format!("{out}/report.json")))
        .unwrap_or_else(|e| panic!("no report.json ({e})\n{output}"))
}

fn categories(report: &serde_json::Value) -> BTreeSet<String> {
    report["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .map(|f| f["category"].as_str().expect("category").to_owned())
        .collect()
}

fn finding<'r>(reports: &'r [serde_json::Value], category: &str) -> &'r serde_json::Value {
    reports
        .iter()
        .flat_map(|r| r["findings"].as_array().expect("findings"))
        .find(|f| f["category"] == category)
        .unwrap_or_else(|| panic!("no `{category}` finding in {reports:#?}"))
}

#[test]
fn play_explorer_on_five_seeds_finds_the_crash_the_refusal_the_stuck_place_and_the_error() {
    let t = game_repo();
    let reports: Vec<serde_json::Value> = (1..=5)
        .map(|seed| {
            play(
                &t,
                &format!("cells/{seed}"),
                &["--seed", &seed.to_string()],
                &["python3", "buggy.py"],
            )
        })
        .collect();
    let found: BTreeSet<String> = reports.iter().flat_map(categories).collect();
    for category in ["crash", "refused", "stuck", "error"] {
        assert!(found.contains(category), "no {category} among {found:?}");
        let f = finding(&reports, category);
        let evidence = &f["evidence"];
        assert!(evidence["step"].as_u64().expect("step") >= 1, "{f:#}");
        assert_eq!(
            evidence["observation"].as_str().expect("hash").len(),
            64,
            "{f:#}"
        );
        assert!(
            !evidence["last_actions"]
                .as_array()
                .expect("actions")
                .is_empty(),
            "{f:#}"
        );
        assert_eq!(f["id"].as_str().expect("id").len(), 16, "{f:#}");
        assert_eq!(f["persona"], "tester");
    }
    let crash = finding(&reports, "crash");
    assert!(
        crash["evidence"]["stderr_tail"]
            .as_str()
            .is_some_and(|s| s.contains("lever mechanism failed")),
        "a crash quotes the game's stderr: {crash:#}"
    );
    assert_eq!(
        crash["evidence"]["last_actions"]
            .as_array()
            .and_then(|a| a.last()),
        Some(&"pull lever".into())
    );
    let refused = finding(&reports, "refused");
    assert!(
        refused["title"]
            .as_str()
            .expect("title")
            .contains("open chest"),
        "{refused:#}"
    );
    // The same bug has the same id in every cell that met it.
    let crash_ids: BTreeSet<&str> = reports
        .iter()
        .flat_map(|r| r["findings"].as_array().expect("findings"))
        .filter(|f| f["category"] == "crash")
        .map(|f| f["id"].as_str().expect("id"))
        .collect();
    assert_eq!(crash_ids.len(), 1, "{crash_ids:?}");
    // The other files of a cell.
    let md = t.read("cells/1/report.md");
    for section in ["## Summary", "## Findings", "## How it felt", "## Evidence"] {
        assert!(md.contains(section), "report.md lacks {section}:\n{md}");
    }
    let transcript = t.read("cells/1/transcript.jsonl");
    assert!(transcript.contains("\"observation\""), "{transcript}");
}

#[test]
fn play_the_same_seed_twice_gives_a_byte_identical_trace_for_every_controller() {
    let t = game_repo();
    for controller in ["standard", "jev", "rune"] {
        for player in ["explorer", "random"] {
            let args = [
                "--seed",
                "3",
                "--controller",
                controller,
                "--player",
                player,
            ];
            let a = play(&t, "a", &args, &["python3", "buggy.py"]);
            let first = t.read("a/trace.jsonl");
            let b = play(&t, "b", &args, &["python3", "buggy.py"]);
            assert_eq!(first, t.read("b/trace.jsonl"), "{controller} {player}");
            assert_eq!(a["findings"], b["findings"]);
            assert!(first.starts_with(&format!(
                "{{\"trace\":1,\"game\":{{\"driver\":\"stdio\",\"command\":[\"python3\",\"buggy.py\"],\"limits\":{{\"memory\":4294967296,\"address_space\":null,\"cpu_seconds\":600,\"processes\":null,\"open_files\":1024}},\"cwd\":\".\",\"action_timeout\":10.0,\"stuck_after\":8}},\"seed\":3,\"persona\":\"tester\",\"controller\":\"{controller}\"}}\n"
            )), "{first}");
            assert!(
                first.trim_end().ends_with(&format!(
                    "{{\"end\":\"{}\"}}",
                    a["quit_reason"].as_str().expect("reason")
                )),
                "{first}"
            );
        }
    }
}

#[test]
fn replay_confirms_a_trace_and_names_the_divergence_after_the_game_changes() {
    let t = game_repo();
    let report = play(&t, "cell", &["--seed", "6"], &["python3", "buggy.py"]);
    assert!(
        report["actions_taken"].as_u64().expect("n") > 3,
        "{report:#}"
    );
    t.run(&["replay", "cell/trace.jsonl"])
        .code(0)
        .stdout_has("confirmed");
    // The library's text changes: every observation there has another hash.
    t.write(
        "buggy.py",
        BUGGY.replace("Dusty shelves.", "Dusty shelves, freshly painted."),
    );
    let out = t.run(&["replay", "cell/trace.jsonl"]);
    out.code(1)
        .stdout_has("diverged at step ")
        .stdout_has("expected: observation ");
    // The first step that showed the library is where the game now differs.
    let transcript = t.read("cell/transcript.jsonl");
    let divergent = transcript
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| {
            v["observation"]["text"]
                .as_str()
                .is_some_and(|s| s.starts_with("Dusty shelves"))
        })
        .and_then(|v| v["step"].as_u64())
        .expect("seed 6 visits the library");
    let trace = t.read("cell/trace.jsonl");
    assert!(
        out.stdout
            .contains(&format!("diverged at step {divergent} ")),
        "expected divergence at step {divergent}\n{out}\n{trace}"
    );
}

#[test]
fn shrink_turns_a_long_crash_trace_into_the_planted_minimum_and_the_result_replays() {
    let t = game_repo();
    // A long wander before the crash: a scripted player (seed 2: north is the cellar).
    let mut script = Vec::new();
    for _ in 0..6 {
        script.extend([
            "east",
            "back",
            "west",
            "open chest",
            "back",
            "north",
            "take key",
            "back",
        ]);
    }
    script.extend(["north", "pull lever"]);
    let mut args = vec!["--seed", "2", "--player", "scripted", "--patience", "200"];
    for action in &script {
        args.extend(["--action", action]);
    }
    let report = play(&t, "long", &args, &["python3", "buggy.py"]);
    assert_eq!(report["quit_reason"], "crash", "{report:#}");
    assert!(report["actions_taken"].as_u64().expect("n") > 40);
    let out = t.run(&[
        "shrink",
        "long/trace.jsonl",
        "--out",
        "short.jsonl",
        "--time-limit",
        "50",
    ]);
    out.code(0).stderr_has("time limit of 50 s");
    let short = t.read("short.jsonl");
    let actions: Vec<String> = short
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v["action"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(actions, ["north", "pull lever"], "{short}");
    assert!(short.ends_with("{\"end\":\"crash\"}\n"), "{short}");
    t.run(&["replay", "short.jsonl"])
        .code(0)
        .stdout_has("same end `crash`");
}

#[test]
fn shrink_refuses_a_trace_that_does_not_end_in_a_failure() {
    let t = game_repo();
    play(
        &t,
        "ok",
        &["--seed", "1"],
        &["python3", "examples/games/coins.py"],
    );
    t.run(&["shrink", "ok/trace.jsonl", "--out", "x.jsonl"])
        .code(3)
        .stderr_has("nothing to shrink");
}

/// The live processes whose environment holds `needle`.
fn live_with_env(needle: &str) -> Vec<i32> {
    crate::support::processes()
        .into_iter()
        .filter(|p| !p.zombie)
        .filter(|p| {
            std::fs::read(format!("/proc/{}/environ", p.pid))
                .is_ok_and(|env| env.windows(needle.len()).any(|w| w == needle.as_bytes()))
        })
        .map(|p| p.pid)
        .collect()
}

/// Asserts the probe TMPDIR reached the game: hostile.py writes
/// `game-<pid>` into its TMPDIR first thing. Without it, "no process with
/// this TMPDIR is alive" would hold of a game that never had it.
#[track_caller]
fn probe_reached_the_game(tmp: &str) {
    let wrote = std::fs::read_dir(tmp)
        .expect("the probe dir")
        .flatten()
        .any(|e| e.file_name().to_string_lossy().starts_with("game-"));
    assert!(wrote, "the game never saw TMPDIR={tmp}");
}

/// Plays a hostile game that breaks the bridge before its first
/// observation; asserts the cell ends in time, did not play (exit 1, no
/// finding, quit reason `end`), and that no process of it survives (found
/// by a TMPDIR only this test uses, which the game inherits). Returns the
/// report's `not_played`.
#[track_caller]
fn contained(mode: &str, end: &str) -> serde_json::Value {
    let probe = tempfile::tempdir().expect("tempdir");
    let tmp = probe.path().to_str().expect("utf8").to_owned();
    let t = game_repo().env("TMPDIR", &tmp);
    let timeout = Duration::from_secs(1);
    let needle = format!("TMPDIR={tmp}\0");
    let mut spawned = t.spawn(&[
        "__play",
        "--action-timeout",
        "1",
        "--out",
        "cell",
        "--",
        "python3",
        "hostile.py",
        mode,
    ]);
    // gameplan itself carries the probe too: only another process counts.
    let gameplan = spawned.pid();
    let mut matched = false;
    while spawned.is_running() {
        matched = matched || live_with_env(&needle).iter().any(|&pid| pid != gameplan);
        std::thread::sleep(Duration::from_millis(5));
    }
    let out = spawned.wait();
    out.code(1).stderr_has("the cell did not play: ");
    probe_reached_the_game(&tmp);
    // These games wait a whole action timeout before they are killed.
    if ["silent", "grandchild"].contains(&mode) {
        assert!(matched, "{mode}: the probe matched no live process\n{out}");
    }
    assert!(
        out.elapsed < timeout + GRACE,
        "{mode}: took {:?}\n{out}",
        out.elapsed
    );
    let report: serde_json::Value =
        serde_json::from_str(&t.read("cell/report.json")).expect("report.json");
    assert_eq!(report["state"], "not_played", "{report:#}");
    assert_eq!(report["findings"], serde_json::json!([]), "{report:#}");
    assert_eq!(report["quit_reason"], end, "{report:#}");
    assert!(t.read("cell/report.md").contains("- State: did not play"));
    wait_until(
        &format!("no process of `{mode}` alive"),
        Duration::from_secs(3),
        || live_with_env(&needle).is_empty(),
    );
    report["not_played"].clone()
}

#[test]
fn play_a_game_that_never_answers_did_not_play_and_hints_at_the_flush() {
    let why = contained("silent", "hang");
    assert!(
        why["cause"]
            .as_str()
            .expect("cause")
            .contains("hung on `hello`"),
        "{why:#}"
    );
    assert!(
        why["hint"]
            .as_str()
            .expect("hint")
            .starts_with("did the game flush stdout?"),
        "{why:#}"
    );
}

#[test]
fn play_a_game_that_floods_output_without_a_newline_did_not_play() {
    let why = contained("flood", "crash");
    assert!(
        why["cause"]
            .as_str()
            .expect("cause")
            .contains("longer than 1024 KiB"),
        "{why:#}"
    );
    let hint = why["hint"].as_str().expect("hint");
    assert!(
        hint.starts_with("the game printed this on stdout: `xxxx") && hint.len() < 200,
        "the line is quoted and cut: {hint}"
    );
}

#[test]
fn play_a_game_that_prints_invalid_json_did_not_play_quoting_it() {
    let why = contained("garbage", "crash");
    assert_eq!(
        why["hint"], "the game printed this on stdout: `this is not json {`; logs belong on stderr",
        "{why:#}"
    );
}

#[test]
fn play_a_game_that_answers_with_another_id_did_not_play() {
    let why = contained("wrong_id", "crash");
    let cause = why["cause"].as_str().expect("cause");
    assert!(cause.contains("names id 43 instead of 2"), "{cause}");
}

#[test]
fn play_a_game_that_exits_at_once_did_not_play_and_keeps_its_stderr() {
    let why = contained("exit", "crash");
    assert!(
        why["cause"]
            .as_str()
            .expect("cause")
            .contains("exited with code 3"),
        "{why:#}"
    );
    assert!(
        why["stderr_tail"]
            .as_str()
            .expect("stderr")
            .contains("config file not found"),
        "{why:#}"
    );
}

#[test]
fn play_a_game_whose_grandchild_sleeps_leaves_nothing_behind() {
    contained("grandchild", "hang");
}

#[test]
fn play_a_process_that_escapes_with_setsid_is_named_as_leaked_and_killed() {
    let probe = tempfile::tempdir().expect("tempdir");
    let tmp = probe.path().to_str().expect("utf8").to_owned();
    let t = game_repo().env("TMPDIR", &tmp);
    let report = play(
        &t,
        "cell",
        &["--patience", "3"],
        &["python3", "hostile.py", "setsid"],
    );
    let leaked = report["leaked"].as_array().expect("leaked");
    assert!(
        leaked.iter().any(|l| l["command"] == "sleep 1000"),
        "{report:#}"
    );
    assert!(t.read("cell/report.md").contains("Leaked processes"));
    probe_reached_the_game(&tmp);
    let needle = format!("TMPDIR={tmp}\0");
    wait_until(
        "the escaped process is gone",
        Duration::from_secs(3),
        || live_with_env(&needle).is_empty(),
    );
}

#[test]
fn play_a_missing_game_program_is_an_environment_error() {
    let t = game_repo();
    t.run(&["__play", "--out", "cell", "--", "./no-such-game"])
        .code(3)
        .stderr_has("cannot find the game program `./no-such-game`");
}

#[test]
fn play_an_interrupted_cell_finishes_its_turn_and_ends_interrupted() {
    let t = game_repo().file(
        "slow.py",
        // A game with no end: a cell no longer stays in the fog (it resets
        // after `stuck`), so the lever's crash and the crown's win are cut.
        BUGGY
            .replace(
                "        req = json.loads(raw)",
                "        import time; time.sleep(0.05)\n        \
                 open('acts.log', 'a').write(raw)\n        req = json.loads(raw)",
            )
            .replace(
                "raise RuntimeError(\"lever mechanism failed: gear index 3 out of range\")",
                "pass",
            )
            .replace("done = True", "done = False"),
    );
    let spawned = t.spawn(&[
        "__play",
        "--out",
        "cell",
        "--patience",
        "100000",
        "--seed",
        "3",
        "--",
        "python3",
        "slow.py",
    ]);
    // Interrupted mid-play: once the game has answered a few actions.
    wait_until(
        "the cell to play a few actions",
        Duration::from_secs(30),
        || t.read("acts.log").matches("\"act\"").count() >= 3,
    );
    spawned.signal(nix::sys::signal::Signal::SIGINT);
    let out = spawned.wait();
    out.code(10);
    let report: serde_json::Value =
        serde_json::from_str(&t.read("cell/report.json")).expect("report.json");
    assert_eq!(report["state"], "interrupted", "{report:#}");
    assert_eq!(report["quit_reason"], "interrupted");
    assert!(
        t.read("cell/trace.jsonl")
            .ends_with("{\"end\":\"interrupted\"}\n")
    );
}

#[test]
fn play_the_python_example_game_to_its_end_without_findings() {
    let t = game_repo();
    for controller in ["standard", "jev", "rune"] {
        let report = play(
            &t,
            controller,
            &["--controller", controller, "--patience", "60"],
            &["python3", "examples/games/coins.py"],
        );
        assert_eq!(report["quit_reason"], "done", "{report:#}");
        assert_eq!(report["findings"], serde_json::json!([]), "{report:#}");
        assert_eq!(report["metrics"]["goals"], 3);
        assert_eq!(report["game"]["name"], "coins");
    }
}

#[test]
fn play_simulate_counts_games_and_writes_replayable_traces_of_the_failed_ones() {
    let t = game_repo();
    let out = t.run(&[
        "__simulate",
        "--games",
        "24",
        "--workers",
        "2",
        "--max-steps",
        "15",
        "--strategies",
        "random,explorer",
        "--out",
        "failed",
        "--",
        "python3",
        "buggy.py",
    ]);
    out.code(1).stdout_has("games 24 ");
    // One batch file per worker and the index, not one file per game.
    let mut files: Vec<_> = std::fs::read_dir(t.path("failed"))
        .expect("failed traces")
        .flatten()
        .map(|e| e.file_name().into_string().expect("utf8"))
        .collect();
    files.sort();
    assert!(
        files
            .iter()
            .all(|f| f == "index.jsonl" || f == "batch-0.jsonl" || f == "batch-1.jsonl"),
        "{files:?}"
    );
    assert!(files.len() <= 3, "{files:?}");
    let traces = crate::support::failed_traces(&out.stdout);
    assert!(!traces.is_empty(), "{out}");
    assert!(
        out.stdout.contains(&format!("crashed {} ", traces.len())),
        "{out}"
    );
    assert_eq!(
        t.read("failed/index.jsonl").lines().count(),
        traces.len(),
        "{out}"
    );
    let first = traces[0];
    assert!(
        first.contains("failed/batch-") && first.contains(".jsonl#game-"),
        "{first}"
    );
    t.run(&["replay", first])
        .code(0)
        .stdout_has("same end `crash`");
    t.run(&["shrink", first, "--out", "short.jsonl"]).code(0);
    t.run(&["replay", "short.jsonl"])
        .code(0)
        .stdout_has("same end `crash`");
}

#[test]
fn schema_bridge_and_report_print_the_checked_in_schemas() {
    let t = Test::new();
    for name in ["bridge", "report"] {
        let out = t.run(&["schema", name]);
        out.code(0);
        let file =
            Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("schemas/{name}.schema.json"));
        assert_eq!(
            out.stdout,
            std::fs::read_to_string(file).expect("schema file")
        );
    }
}

#[test]
fn play_a_game_runs_in_the_repo_root_with_a_cleared_environment_and_rlimits() {
    let t = game_repo().env("SECRET_TOKEN", "do-not-leak");
    let sub = t.path("sub");
    std::fs::create_dir_all(&sub).expect("mkdir");
    // Started from a subdirectory: the game still runs at the repo root.
    let mut command = std::process::Command::new(crate::support::BIN);
    let output = command
        .args([
            "__play",
            "--out",
            "../cell",
            "--patience",
            "1",
            "--",
            "python3",
            "hostile.py",
            "introspect",
        ])
        .current_dir(&sub)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("LANG", "C.UTF-8")
        .env("SECRET_TOKEN", "do-not-leak")
        .output()
        .expect("run gameplan");
    assert!(output.status.success(), "{output:?}");
    let transcript = t.read("cell/transcript.jsonl");
    let first: serde_json::Value = transcript
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["step"] == 0)
        .expect("the first observation");
    let seen: serde_json::Value =
        serde_json::from_str(first["observation"]["text"].as_str().expect("text")).expect("json");
    // (A launcher such as a pyenv shim may add its own; none of gameplan's leak.)
    let env: Vec<&str> = seen["env"]
        .as_array()
        .expect("env")
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    for kept in ["GAMEPLAN_GAME_CELL", "LANG", "PATH"] {
        assert!(env.contains(&kept), "{kept} missing: {env:?}");
    }
    assert!(
        !env.contains(&"SECRET_TOKEN"),
        "the environment is not cleared: {env:?}"
    );
    let root = t.path("").canonicalize().expect("canonical");
    assert_eq!(Path::new(seen["cwd"].as_str().expect("cwd")), root);
    assert_eq!(seen["limits"]["nofile"], 1024);
    assert_eq!(seen["limits"]["cpu"], 600);
    // Memory is what the game uses (watched by gameplan), not an rlimit:
    // the address space is unlimited unless the plan asks.
    assert_eq!(seen["limits"]["as"], -1);
}

#[test]
fn play_the_game_command_may_be_a_repo_path_or_an_absolute_path() {
    use std::os::unix::fs::PermissionsExt;
    let t = game_repo();
    let script = t.path("examples/games/coins.py");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let report = play(&t, "relative", &[], &["examples/games/coins.py"]);
    assert_eq!(report["quit_reason"], "done", "{report:#}");
    let python = std::env::split_paths(&std::env::var_os("PATH").expect("PATH"))
        .map(|dir| dir.join("python3"))
        .find(|p| p.is_file())
        .expect("python3 on PATH");
    let report = play(
        &t,
        "absolute",
        &[],
        &[python.to_str().expect("utf8"), "examples/games/coins.py"],
    );
    assert_eq!(report["quit_reason"], "done", "{report:#}");
    assert_eq!(
        t.read("relative/trace.jsonl")
            .lines()
            .skip(1)
            .collect::<Vec<_>>(),
        t.read("absolute/trace.jsonl")
            .lines()
            .skip(1)
            .collect::<Vec<_>>(),
        "the same game, however it is named"
    );
}

#[test]
fn play_simulate_names_and_kills_what_its_games_leaked() {
    let probe = tempfile::tempdir().expect("tempdir");
    let tmp = probe.path().to_str().expect("utf8").to_owned();
    let t = game_repo().env("TMPDIR", &tmp);
    let out = t.run(&[
        "__simulate",
        "--games",
        "3",
        "--workers",
        "1",
        "--max-steps",
        "2",
        "--",
        "python3",
        "hostile.py",
        "setsid",
    ]);
    out.code(0)
        .stdout_has("games 3 ")
        .stdout_has("leaked (killed): ");
    assert!(out.stdout.contains("sleep 1000"), "{out}");
    probe_reached_the_game(&tmp);
    let needle = format!("TMPDIR={tmp}\0");
    wait_until(
        "no process of the simulation alive",
        Duration::from_secs(3),
        || live_with_env(&needle).is_empty(),
    );
}

#[test]
fn play_a_line_of_exactly_1_mib_is_read_and_one_byte_more_is_refused() {
    let t = game_repo();
    let limit = 1024 * 1024;
    let report = play(
        &t,
        "exact",
        &["--patience", "1"],
        &["python3", "hostile.py", &format!("line={limit}")],
    );
    assert_eq!(report["findings"], serde_json::json!([]), "{report:#}");
    assert_eq!(report["quit_reason"], "patience");
    // The over-long line is the first observation: the cell did not play.
    t.run(&[
        "__play",
        "--out",
        "over",
        "--",
        "python3",
        "hostile.py",
        &format!("line={}", limit + 1),
    ])
    .code(1)
    .stderr_has("longer than 1024 KiB");
    let report: serde_json::Value =
        serde_json::from_str(&t.read("over/report.json")).expect("report.json");
    assert_eq!(report["state"], "not_played", "{report:#}");
}

#[test]
fn shrink_reduces_a_hang_to_the_one_action_that_hangs() {
    let t = game_repo();
    let mut args = vec![
        "--player",
        "scripted",
        "--action-timeout",
        "1",
        "--patience",
        "50",
    ];
    for _ in 0..6 {
        args.extend(["--action", "wait", "--action", "go"]);
    }
    args.extend(["--action", "freeze"]);
    let report = play(&t, "long", &args, &["python3", "hostile.py", "freeze"]);
    assert_eq!(report["quit_reason"], "hang", "{report:#}");
    assert_eq!(report["actions_taken"], 13);
    t.run(&[
        "shrink",
        "long/trace.jsonl",
        "--out",
        "short.jsonl",
        "--time-limit",
        "40",
        "--action-timeout",
        "1",
    ])
    .code(0);
    let short = t.read("short.jsonl");
    assert_eq!(short.lines().count(), 3, "header, freeze, end:\n{short}");
    assert!(
        short.contains("\"action\":\"freeze\",\"obs\":null"),
        "{short}"
    );
    assert!(short.ends_with("{\"end\":\"hang\"}\n"), "{short}");
    t.run(&["replay", "short.jsonl", "--action-timeout", "1"])
        .code(0)
        .stdout_has("same end `hang`");
}

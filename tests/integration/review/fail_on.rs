//! Findings can turn CI red without gates. `--fail-on`
//! and the plan's `fail_on` fail a run whose findings match (exit 1), also
//! when its cells are reused; a run whose findings nothing judged says so in
//! one line; `plan check` warns of gates no step runs, `game.inputs` that
//! match no file and `always` on a step with no `needs`.

use crate::support::Test;

/// Two personas, two controllers, two seeds on the built-in maze: a
/// critical crash, a medium error, a low stuck and a low refused; no hang.
const MAZE_PLAN: &str = include_str!("../../../plans/maze.toml");
const COINS: &str = include_str!("../../../examples/games/coins.py");

const NOT_JUDGED: &str =
    "4 findings were not judged: no gate ran (add [[gates]] and a gate step, or --fail-on)";

fn maze() -> Test {
    Test::new().file("plans/maze.toml", MAZE_PLAN)
}

/// The maze plan with `key` added at the top level.
fn maze_with(key: &str) -> String {
    MAZE_PLAN.replace(
        "controllers = [\"standard\", \"jev\"]\n",
        &format!("controllers = [\"standard\", \"jev\"]\n{key}\n"),
    )
}

#[test]
fn fail_on_crash_fails_a_run_that_found_a_crash_and_fail_on_hang_passes_it() {
    let t = maze();
    let failed = t.run(&["plan", "run", "plans/maze.toml", "--fail-on", "crash"]);
    failed
        .code(1)
        .stdout_has("of `maze`: FAILED in")
        .stdout_has(
            "  failed: 1 finding matches --fail-on crash: 8df40e09ffdc5950 (critical crash)\n",
        );
    assert!(!failed.stdout.contains("not judged"), "{failed}");

    // A severity is itself or worse: `high` takes the critical crash,
    // `medium` the medium error too.
    t.run(&["plan", "run", "plans/maze.toml", "--fail-on", "high"])
        .code(1)
        .stdout_has("1 finding matches --fail-on high: 8df40e09ffdc5950 (critical crash)");
    t.run(&["plan", "run", "plans/maze.toml", "--fail-on", "hang,medium"])
        .code(1)
        .stdout_has(
            "2 findings match --fail-on hang,medium: 8df40e09ffdc5950 (critical crash), e6e0eeffb033a89c (medium error)",
        );

    // No hang was found: judged, and passed.
    let passed = t.run(&["plan", "run", "plans/maze.toml", "--fail-on", "hang"]);
    passed
        .code(0)
        .stdout_has("succeeded in")
        .stdout_has("4 findings judged by --fail-on hang: none match\n");
    assert!(!passed.stdout.contains("not judged"), "{passed}");

    // --json says the same in fields.
    let doc = t
        .run(&[
            "plan",
            "run",
            "plans/maze.toml",
            "--fail-on",
            "crash",
            "--json",
        ])
        .code(1)
        .json();
    assert_eq!(doc["exit_code"], 1);
    assert_eq!(doc["outcome"], "failed");
    assert_eq!(doc["fail_on"]["selectors"], serde_json::json!(["crash"]));
    assert_eq!(doc["fail_on"]["from"], "flag");
    assert_eq!(doc["fail_on"]["judged"], 4);
    let matched = doc["fail_on"]["matched"].as_array().expect("matched");
    assert_eq!(matched.len(), 1, "{doc:#}");
    assert_eq!(matched[0]["id"], "8df40e09ffdc5950");
    assert_eq!(matched[0]["category"], "crash");
    assert_eq!(matched[0]["severity"], "critical");
    assert!(doc.get("unjudged_findings").is_none(), "{doc:#}");
    let doc = t
        .run(&[
            "plan",
            "run",
            "plans/maze.toml",
            "--fail-on",
            "hang",
            "--json",
        ])
        .code(0)
        .json();
    assert_eq!(doc["fail_on"]["matched"], serde_json::json!([]));

    // What the journal recorded agrees: `plan runs` lists the failed run.
    t.run(&["plan", "runs"])
        .code(0)
        .stdout_has("failed (exit 1)");
}

#[test]
fn fail_on_in_the_plan_fails_the_run_and_the_flag_overrides_it() {
    let t = Test::new().file("plans/maze.toml", maze_with("fail_on = [\"critical\"]"));
    t.run(&["plan", "run", "plans/maze.toml"])
        .code(1)
        .stdout_has(
            "failed: 1 finding matches fail_on [critical]: 8df40e09ffdc5950 (critical crash)",
        );
    let doc = t.run(&["plan", "run", "plans/maze.toml", "--json"]).json();
    assert_eq!(doc["exit_code"], 1);
    assert_eq!(doc["fail_on"]["from"], "plan");
    // The flag overrides the key.
    t.run(&["plan", "run", "plans/maze.toml", "--fail-on", "hang"])
        .code(0)
        .stdout_has("4 findings judged by --fail-on hang: none match");

    // YAML says it the same way.
    let yaml = "version: 1\nname: maze\ncontrollers: [standard, jev]\nfail_on: [crash, high]\n\
game:\n  id: maze\n  command: [\"builtin:maze\"]\n\
personas:\n  - slug: curious-kid\n    card: Clicks everything.\n    player: { kind: explorer }\n\
steps:\n  - id: play\n    kind: play\n    matrix: { persona: \"*\", controller: \"*\", seed: [1, 2] }\n";
    let t = Test::new().file("maze.yaml", yaml);
    t.run(&["plan", "run", "maze.yaml"])
        .code(1)
        .stdout_has("matches fail_on [crash, high]: 8df40e09ffdc5950 (critical crash)");
}

#[test]
fn a_reused_run_still_fails_on_the_findings_of_its_restored_reports() {
    let t = maze();
    t.run(&["plan", "run", "plans/maze.toml", "--fail-on", "crash"])
        .code(1);
    let again = t.run(&["plan", "run", "plans/maze.toml", "--fail-on", "crash"]);
    again
        .code(1)
        .stdout_has("(9 reused)")
        .stdout_has("failed: 1 finding matches --fail-on crash: 8df40e09ffdc5950");
}

#[test]
fn an_unknown_fail_on_name_is_a_plan_error_with_a_did_you_mean() {
    let t = Test::new().file(
        "plans/maze.toml",
        maze_with("fail_on = [\"crash\", \"hihg\"]"),
    );
    let check = t.run(&["plan", "check", "plans/maze.toml"]);
    check
        .code(3)
        .stderr_has(
            "plans/maze.toml:14:21: unknown finding category or severity `hihg` in `fail_on`",
        )
        .stderr_has("did you mean `high`?");
    let run = t.run(&["plan", "run", "plans/maze.toml"]);
    run.code(3).stderr_has("did you mean `high`?");
    assert!(t.run_ids().is_empty(), "nothing ran\n{run}");

    // The flag is checked by the same rule, before anything runs.
    let t = maze();
    let flag = t.run(&["plan", "run", "plans/maze.toml", "--fail-on", "crsh"]);
    flag.code(3).stderr_has("did you mean `crash`?");
    assert!(t.run_ids().is_empty(), "nothing ran\n{flag}");
}

#[test]
fn findings_nothing_judged_are_said_in_one_line_and_only_then() {
    // No gate and no fail_on: said, once.
    let t = maze();
    let run = t.run(&["plan", "run", "plans/maze.toml"]);
    run.code(0);
    assert_eq!(run.stdout.matches(NOT_JUDGED).count(), 1, "{run}");
    assert!(run.stdout.ends_with(&format!("{NOT_JUDGED}\n")), "{run}");
    let doc = t.run(&["plan", "run", "plans/maze.toml", "--json"]).json();
    assert_eq!(doc["unjudged_findings"], 4);

    // fail_on judged them.
    let t = Test::new().file("plans/maze.toml", maze_with("fail_on = [\"hang\"]"));
    let run = t.run(&["plan", "run", "plans/maze.toml"]);
    run.code(0);
    assert!(!run.stdout.contains("not judged"), "{run}");

    // No findings: nothing to say.
    let calm = r#"version = 1
name = "calm"

[game]
id = "coins"
command = ["python3", "coins.py"]

[[personas]]
slug = "walker"
card = "Walks back and forth."
player = { kind = "scripted", actions = ["right", "left", "right", "left"] }
patience = 4

[[steps]]
id = "play"
kind = "play"
"#;
    let t = Test::new().file("calm.toml", calm).file("coins.py", COINS);
    let run = t.run(&["plan", "run", "calm.toml"]);
    run.code(0).stdout_has("0 distinct findings");
    assert!(!run.stdout.contains("not judged"), "{run}");
    let doc = t.run(&["plan", "run", "calm.toml", "--json"]).json();
    assert!(doc.get("unjudged_findings").is_none(), "{doc:#}");
}

#[test]
fn junit_and_the_step_summary_say_the_fail_on_check_failed() {
    let t = maze().env("GITHUB_STEP_SUMMARY", "summary.md");
    t.run(&[
        "plan",
        "run",
        "plans/maze.toml",
        "--fail-on",
        "crash",
        "--junit",
        "junit.xml",
    ])
    .code(1);
    let xml = t.read("junit.xml");
    let case = xml
        .split("<testcase")
        .find(|c| c.contains("name=\"fail-on\""))
        .unwrap_or_else(|| panic!("no fail-on test case\n{xml}"));
    assert!(
        case.contains("<failure") && case.contains("1 finding matches --fail-on crash"),
        "{case}"
    );
    assert!(
        t.read("summary.md")
            .contains("**Failed:** 1 finding matches `--fail-on crash`: `8df40e09ffdc5950`"),
        "{}",
        t.read("summary.md")
    );
    t.run(&[
        "plan",
        "run",
        "plans/maze.toml",
        "--fail-on",
        "hang",
        "--junit",
        "junit.xml",
    ])
    .code(0);
    let xml = t.read("junit.xml");
    let case = xml
        .split("<testcase")
        .find(|c| c.contains("name=\"fail-on\""))
        .unwrap_or_else(|| panic!("no fail-on test case\n{xml}"));
    assert!(!case.contains("<failure"), "{case}");
}

/// A plan with each of the three mistakes `plan check` warns of.
const WARNED: &str = r#"version = 1
name = "warned"

[game]
id = "maze"
command = ["builtin:maze"]
inputs = ["build/**"]

[[personas]]
slug = "kid"
card = "Clicks everything."

[[lenses]]
name = "crashes"
kind = "rule"
over = "findings"
when = "unit.category in ['crash']"

[[gates]]
name = "blockers"
lenses = ["crashes"]

[[steps]]
id = "play"
kind = "play"
always = true
"#;

#[test]
fn plan_check_warns_of_a_gate_no_step_runs_an_input_matching_nothing_and_idle_always() {
    let t = Test::new().file("warned.toml", WARNED);
    let check = t.run(&["plan", "check", "warned.toml"]);
    check
        .code(0)
        .stderr_has("⚠ warned.toml:7:11: game input `build/**` matches no file")
        .stderr_has("7 │ inputs = [\"build/**\"]")
        .stderr_has("Fix the pattern, or build first")
        .stderr_has(
            "⚠ warned.toml:20:8: gate `blockers` is never run: no step of this plan judges it",
        )
        .stderr_has("20 │ name = \"blockers\"")
        .stderr_has("add a `[[steps]]` with `id = \"blockers\"`")
        .stderr_has("⚠ warned.toml:26:1: `always` on step `play`, which needs no step")
        .stderr_has("26 │ always = true")
        .stderr_has("add the `needs` it should follow, or remove `always`")
        .stderr_has("warned.toml: ok (plan `warned`, 1 steps, 3 warnings)");
    assert!(
        !check.stderr.contains("× "),
        "warnings, not errors\n{check}"
    );

    let doc = t
        .run(&["plan", "check", "--json", "warned.toml"])
        .code(0)
        .json();
    assert_eq!(doc["valid"], true);
    let warnings = doc["files"][0]["warnings"].as_array().expect("warnings");
    let found: Vec<(&str, u64, u64)> = warnings
        .iter()
        .map(|w| {
            (
                w["code"].as_str().unwrap_or_default(),
                w["line"].as_u64().unwrap_or_default(),
                w["column"].as_u64().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        found,
        [
            ("plan::input_matches_nothing", 7, 11),
            ("plan::gate_not_run", 20, 8),
            ("plan::always_without_needs", 26, 1),
        ]
    );

    // Mended: the input exists, a gate step runs the gate, `always` follows a need.
    let mended = WARNED.replace(
        "always = true\n",
        "\n[[steps]]\nid = \"blockers\"\nkind = \"gate\"\nneeds = [\"play\"]\nalways = true\n",
    );
    let t = Test::new()
        .file("warned.toml", mended)
        .file("build/game", "built");
    let check = t.run(&["plan", "check", "warned.toml"]);
    check
        .code(0)
        .stderr_has("warned.toml: ok (plan `warned`, 2 steps)\n");
    assert!(!check.stderr.contains('⚠'), "{check}");
    let doc = t.run(&["plan", "check", "--json", "warned.toml"]).json();
    assert!(doc["files"][0].get("warnings").is_none(), "{doc:#}");
}

#[test]
fn the_checked_in_plans_have_no_warning() {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut plans: Vec<String> = ["plans", "examples"]
        .iter()
        .flat_map(|dir| {
            std::fs::read_dir(repo.join(dir))
                .into_iter()
                .flatten()
                .flatten()
        })
        .map(|e| e.path())
        .filter(|p| {
            p.extension()
                .is_some_and(|x| x == "toml" || x == "yaml" || x == "yml")
        })
        .map(|p| p.display().to_string())
        .collect();
    plans.sort();
    assert!(plans.len() >= 6, "{plans:?}");
    let mut args = vec!["plan", "check", "--json"];
    args.extend(plans.iter().map(String::as_str));
    let t = Test::new();
    let doc = t.run(&args).code(0).json();
    for file in doc["files"].as_array().expect("files") {
        assert!(file.get("warnings").is_none(), "{file:#}");
    }
}

/// A cell of the maze that finds its crash, then a step that waits for a
/// file `go`: a run to interrupt once the crash is found.
const WAITING: &str = r#"version = 1
name = "waiting"

[game]
id = "maze"
command = ["builtin:maze"]

[[personas]]
slug = "curious-kid"
card = "Clicks everything."
player = { kind = "explorer" }

[[steps]]
id = "play"
kind = "play"
seed = 1

[[steps]]
id = "wait"
kind = "command"
needs = ["play"]
run = "while [ ! -e go ]; do sleep 0.05; done"
"#;

/// Starts `plan run waiting.toml EXTRA...`, stops it (exit 10) once the
/// play cell is done and `wait` is waiting, and lets `wait` finish next time.
fn interrupted(extra: &[&str]) -> (Test, crate::support::Output) {
    let t = Test::new().file("waiting.toml", WAITING);
    let mut args = vec!["plan", "run", "waiting.toml"];
    args.extend_from_slice(extra);
    let spawned = t.spawn(&args);
    crate::support::wait_until(
        "the wait step to start",
        std::time::Duration::from_secs(30),
        || {
            t.run_ids().first().is_some_and(|id| {
                t.read(&format!(".gameplan/runs/{id}/journal.jsonl"))
                    .contains("\"step\":\"wait\"")
            })
        },
    );
    spawned.signal(nix::sys::signal::Signal::SIGINT);
    let stopped = spawned.wait();
    stopped.code(10);
    t.write("go", "");
    (t, stopped)
}

#[test]
fn a_resume_judges_by_the_run_s_fail_on_unless_given_its_own() {
    // The run was started with --fail-on crash: its resume fails on the
    // crash the first leg found.
    let (t, _) = interrupted(&["--fail-on", "crash"]);
    t.run(&["plan", "resume"])
        .code(1)
        .stdout_has("failed: 1 finding matches --fail-on crash: 8df40e09ffdc5950 (critical crash)");

    // --fail-on given to the resume judges it instead.
    let (t, _) = interrupted(&["--fail-on", "crash"]);
    t.run(&["plan", "resume", "--fail-on", "hang"])
        .code(0)
        .stdout_has("judged by --fail-on hang: none match");
}

#[test]
fn an_interrupted_run_does_not_call_its_findings_unjudged_yet() {
    let (t, stopped) = interrupted(&[]);
    stopped.stdout_has("resume with:");
    assert!(!stopped.stdout.contains("not judged"), "{stopped}");
    t.run(&["plan", "resume"])
        .code(0)
        .stdout_has("1 finding was not judged: no gate ran");
}

/// A game whose listed `jam` is always refused: a simulation meets a
/// `refused` finding, and nothing crashes or hangs, so the step succeeds.
const JAMMED: &str = r#"import json, sys
n = 0
def obs():
    return {"text": "step %d" % n, "actions": ["go", "jam"], "state": {"n": n}, "score": n}
for line in sys.stdin:
    req = json.loads(line)
    rid, op = req["id"], req["op"]
    if op == "hello":
        r = {"id": rid, "ok": True, "name": "jammed", "version": "1", "protocol": 1}
    elif op == "reset":
        n = 0
        r = {"id": rid, "ok": True, "observation": obs()}
    elif op == "act" and req["action"] == "jam":
        r = {"id": rid, "ok": False, "error": "the lever is jammed"}
    elif op == "act":
        n += 1
        r = {"id": rid, "ok": True, "observation": obs(), "reward": 0, "done": n >= 5, "events": []}
    else:
        r = {"id": rid, "ok": True}
    print(json.dumps(r), flush=True)
"#;

/// `--fail-on` judges a simulation's findings like a cell's: a `refused`
/// met only by the `simulate` step fails the run under `--fail-on
/// refused`, and counts as unjudged without it.
#[test]
fn fail_on_judges_the_findings_of_a_simulation_too() {
    let plan = "version = 1\nname = \"sim\"\n\n[game]\nid = \"jammed\"\n\
                command = [\"python3\", \"jammed.py\"]\n\n[[steps]]\nid = \"mechanics\"\n\
                kind = \"simulate\"\ngames = 10\nstrategies = [\"random\"]\nmax_steps = 20\n";
    let t = Test::new()
        .file("plan.toml", plan)
        .file("jammed.py", JAMMED);
    t.run(&["plan", "run", "plan.toml"])
        .code(0)
        .stdout_has("1 finding was not judged: no gate ran");
    t.run(&["plan", "run", "plan.toml", "--fail-on", "refused"])
        .code(1)
        .stdout_has("1 finding matches --fail-on refused: ")
        .stdout_has("(low refused)");
}

//! Repeats: a play step's `repeat = N` plays each cell N times with seeds
//! derived from the cell's; a finding every play met is `stable`, one some
//! met is `flaky k/N`, which `--fail-on flaky`, `stable:` and a gate's
//! `only_stable` select. The game is `lever.py`, whose planted crash can
//! be made to happen only on some seeds, as a race or an uninitialised
//! value makes a real crash come and go.

use crate::support::Test;

const LEVER: &str = include_str!("../../fixtures/games/lever.py");

/// The lever plan, its cell played three times (the HTML report's test
/// plays it too).
pub(crate) const PLAN: &str = r#"version = 1
name = "lever"
controllers = ["standard"]

[game]
id = "lever"
driver = "stdio"
command = ["python3", "game.py"]
inputs = ["game.py"]

[[personas]]
slug = "kid"
card = "Presses on."
player = { kind = "explorer" }

[[steps]]
id = "play"
kind = "play"
matrix = { persona = "*", controller = "*" }
seed = 1
repeat = 3

[[steps]]
id = "aggregate"
kind = "aggregate"
needs = ["play"]
always = true
"#;

/// lever.py crashing on the seeds `every` divides.
pub(crate) fn game(every: u32) -> String {
    let line = LEVER
        .lines()
        .find(|l| l.starts_with("EVERY = "))
        .expect("lever.py says which seeds crash on an `EVERY = ` line");
    LEVER.replace(line, &format!("EVERY = {every}"))
}

fn repo(every: u32) -> Test {
    Test::new()
        .file("plan.toml", PLAN)
        .file("game.py", game(every))
}

/// The run's one finding (a `--json` run's).
fn the_finding(doc: &serde_json::Value) -> &serde_json::Value {
    let findings = doc["playtest"]["findings"].as_array().expect("findings");
    assert_eq!(findings.len(), 1, "{findings:#?}");
    &findings[0]
}

#[test]
fn each_cell_is_played_n_times_on_seeds_derived_from_its_own_and_reused_the_next_time() {
    let t = repo(1);
    t.run(&["plan", "run", "plan.toml"])
        .code(0)
        .stdout_has("3 cells (3 played, 0 reused)");
    let doc = t
        .run(&["plan", "run", "plan.toml", "--json"])
        .code(0)
        .json();
    let mut reports = super::cell_reports(&t, &doc);
    reports.sort_by_key(|(_, r)| r["repeat"]["index"].as_u64());
    let plays: Vec<(u64, u64, &str)> = reports
        .iter()
        .map(|(_, r)| {
            (
                r["repeat"]["index"].as_u64().expect("index"),
                r["repeat"]["of"].as_u64().expect("of"),
                r["repeat"]["cell"].as_str().expect("cell"),
            )
        })
        .collect();
    assert_eq!(
        plays,
        [
            (1, 3, "play[kid,standard]"),
            (2, 3, "play[kid,standard]"),
            (3, 3, "play[kid,standard]")
        ]
    );
    let seeds: Vec<i64> = reports
        .iter()
        .map(|(_, r)| r["seed"].as_i64().expect("seed"))
        .collect();
    // Play 1 is the cell's own seed; the others are other games.
    assert_eq!(seeds[0], 1);
    assert!(seeds[1] != seeds[0] && seeds[2] != seeds[1] && seeds[2] != seeds[0]);
    let steps: Vec<&str> = doc["playtest"]["cells"]
        .as_array()
        .expect("cells")
        .iter()
        .map(|c| c["step"].as_str().expect("step"))
        .collect();
    assert_eq!(
        steps,
        [
            "play[kid,standard,1]",
            "play[kid,standard,2]",
            "play[kid,standard,3]"
        ]
    );
    // The same seeds again: nothing is played twice.
    t.run(&["plan", "run", "plan.toml"])
        .code(0)
        .stdout_has("3 cells (0 played, 3 reused)")
        .stdout_has("[stable]");
}

#[test]
fn a_crash_on_one_seed_in_three_is_flaky_1_of_3_and_fail_on_tells_it_from_a_stable_one() {
    let t = repo(2);
    let run = t.run(&["plan", "run", "plan.toml", "--json"]);
    let doc = run.code(0).json();
    // Which plays crashed is what their seeds say: lever.py crashes on
    // even seeds, and of the three derived seeds one is even.
    let reports = super::cell_reports(&t, &doc);
    let even: Vec<bool> = reports
        .iter()
        .map(|(_, r)| r["seed"].as_i64().expect("seed") % 2 == 0)
        .collect();
    let crashed: Vec<bool> = reports
        .iter()
        .map(|(_, r)| r["quit_reason"] == "crash")
        .collect();
    assert_eq!(crashed, even, "{reports:#?}");
    assert_eq!(even.iter().filter(|e| **e).count(), 1);
    let crash = the_finding(&doc);
    assert_eq!(crash["category"], "crash");
    assert_eq!(
        crash["repeats"],
        serde_json::json!({"label": "flaky", "met": 1, "of": 3})
    );
    assert_eq!(crash["unconfirmed"], false, "it replays on its own seed");
    t.run(&["plan", "run", "plan.toml"])
        .code(0)
        .stdout_has("[flaky 1/3]");
    let run = t.run_ids().last().expect("a run").clone();
    let md = t.read(&format!(
        ".gameplan/runs/{run}/steps/aggregate/aggregate.md"
    ));
    assert!(md.contains("flaky 1/3"), "{md}");

    t.run(&["plan", "run", "plan.toml", "--fail-on", "flaky"])
        .code(1);
    t.run(&["plan", "run", "plan.toml", "--fail-on", "stable:crash"])
        .code(0);
    t.run(&["plan", "run", "plan.toml", "--fail-on", "crash"])
        .code(1);

    // A crash on every seed: stable, and `flaky` passes it.
    t.write("game.py", game(1));
    let doc = t
        .run(&["plan", "run", "plan.toml", "--json"])
        .code(0)
        .json();
    assert_eq!(
        the_finding(&doc)["repeats"],
        serde_json::json!({"label": "stable", "met": 3, "of": 3})
    );
    t.run(&["plan", "run", "plan.toml"])
        .code(0)
        .stdout_has("[stable]");
    t.run(&["plan", "run", "plan.toml", "--fail-on", "flaky"])
        .code(0);
    t.run(&["plan", "run", "plan.toml", "--fail-on", "stable:crash"])
        .code(1);
}

/// A gate over findings with `only_stable = true`: a flaky crash does not
/// stop it, a stable one does.
const STABLE_CRASH_GATE: &str = r#"
[[lenses]]
name = "no-crash"
kind = "rule"
over = "findings"
when = "unit.category == 'crash'"

[[gates]]
name = "no-stable-crash"
lenses = ["no-crash"]
only_stable = true

[[steps]]
id = "no-stable-crash"
kind = "gate"
needs = ["aggregate"]
"#;

#[test]
fn a_gate_with_only_stable_leaves_out_what_some_repeats_missed() {
    let t = repo(2).file("plan.toml", format!("{PLAN}{STABLE_CRASH_GATE}"));
    t.run(&["plan", "run", "plan.toml"])
        .code(0)
        .stdout_has("[flaky 1/3]");
    t.write("game.py", game(1));
    t.run(&["plan", "run", "plan.toml"])
        .code(1)
        .stdout_has("no-stable-crash")
        .stdout_has("door hinge cracked");
    // A rule lens reads the label too.
    let flaky_rule = STABLE_CRASH_GATE
        .replace("only_stable = true\n", "")
        .replace(
            "unit.category == 'crash'",
            "unit.repeats and unit.repeats.label == 'flaky'",
        );
    t.write("plan.toml", format!("{PLAN}{flaky_rule}"));
    t.run(&["plan", "run", "plan.toml"]).code(0);
    t.write("game.py", game(2));
    t.run(&["plan", "run", "plan.toml"]).code(1);
}

#[test]
fn a_repeat_out_of_range_or_beside_a_repeat_axis_is_refused_where_it_is_written() {
    let t = Test::new();
    for (written, code, says) in [
        (
            "repeat = 0",
            "plan::invalid_value",
            "`repeat` must be from 1 to 100, not 0",
        ),
        (
            "repeat = 101",
            "plan::invalid_value",
            "`repeat` must be from 1 to 100, not 101",
        ),
    ] {
        let plan = PLAN.replace("repeat = 3", written);
        t.write("plan.toml", &plan);
        let check = t.check(&["plan.toml"]);
        let problem = check.only(code);
        assert!(problem.message.contains(says), "{problem:?}");
        crate::support::at(problem, &plan, written.trim_start_matches("repeat = "));
    }
    let plan = PLAN.replace(
        "matrix = { persona = \"*\", controller = \"*\" }",
        "matrix = { persona = \"*\", controller = \"*\", repeat = [\"1\", \"2\"] }",
    );
    t.write("plan.toml", &plan);
    let check = t.check(&["plan.toml"]);
    let problem = check.only("plan::conflicting_keys");
    assert!(
        problem
            .message
            .contains("step `play` has both `repeat` and a matrix axis `repeat`"),
        "{problem:?}"
    );
    crate::support::at(problem, &plan, "repeat = [");
    // `only_stable` on a gate with no lens over findings narrows nothing.
    let wrong = PLAN.to_owned()
        + r#"
[[lenses]]
name = "played"
kind = "rule"
over = "runs"
when = "unit.state != 'succeeded'"

[[gates]]
name = "played"
lenses = ["played"]
only_stable = true
"#;
    t.write("plan.toml", &wrong);
    let check = t.check(&["plan.toml"]);
    let problem = check.only("plan::only_stable_without_findings");
    assert!(
        problem
            .message
            .contains("gate `played` has `only_stable = true` but no lens over `findings`"),
        "{problem:?}"
    );
}

//! Running a part of a plan (`gameplan plan run PLAN STEP...`),
//! and matrix values in a step's commands.

use std::time::Duration;

use crate::support::{Test, by_step, wait_until};

const PLAN: &str = r#"version = 1
name = "part"

[[steps]]
id = "build"
kind = "command"
run = "echo build >> ran.log"

[[steps]]
id = "lint"
kind = "command"
run = "echo lint >> ran.log"

[[steps]]
id = "test"
kind = "command"
run = "echo test-$GAMEPLAN_MATRIX_LEVEL >> ran.log"
needs = ["build"]
matrix = { level = ["1", "2"] }
"#;

fn ran(t: &Test) -> Vec<String> {
    let mut lines: Vec<String> = t.read("ran.log").lines().map(str::to_owned).collect();
    lines.sort();
    lines
}

#[test]
fn a_named_step_runs_with_what_it_needs_and_nothing_else() {
    let t = Test::new().file("plan.toml", PLAN);
    let out = t.run(&["plan", "run", "plan.toml", "test", "--json"]);
    out.code(0);
    assert_eq!(by_step(&out.json(), "state").len(), 3, "{out}");
    assert_eq!(ran(&t), ["build", "test-1", "test-2"]);

    std::fs::remove_file(t.path("ran.log")).expect("rm");
    t.run(&["plan", "run", "plan.toml", "test[2]", "lint", "--no-reuse"])
        .code(0);
    assert_eq!(ran(&t), ["build", "lint", "test-2"]);

    t.run(&["plan", "explain", "plan.toml", "lint"])
        .code(0)
        .stdout_has("plan `part`: 1 step");
}

#[test]
fn an_unknown_step_name_is_refused_with_a_suggestion() {
    let t = Test::new().file("plan.toml", PLAN);
    t.run(&["plan", "run", "plan.toml", "tset"])
        .code(3)
        .stderr_has("no step or cell `tset` in the plan; did you mean `test`?")
        .stderr_has("Nothing was run or charged");
    t.run(&["plan", "explain", "plan.toml", "tset"])
        .code(3)
        .stderr_has("did you mean `test`?");
    assert!(!t.path("ran.log").exists());
}

/// A resume runs the part the run was started for, not the whole plan.
#[test]
fn a_resumed_partial_run_runs_the_same_part() {
    let plan = PLAN.replace(
        "run = \"echo build >> ran.log\"",
        "run = \"echo build >> ran.log; touch started; while [ ! -f go ]; do sleep 0.05; done\"",
    );
    let t = Test::new().file("plan.toml", plan);
    let spawned = t.spawn(&["plan", "run", "plan.toml", "test[1]"]);
    wait_until("build to start", Duration::from_secs(30), || {
        t.path("started").exists()
    });
    spawned.signal(nix::sys::signal::Signal::SIGINT);
    spawned.wait().code(10);
    t.write("go", "");
    let out = t.run(&["plan", "resume", "--json"]);
    out.code(0);
    assert_eq!(
        by_step(&out.json(), "state").keys().collect::<Vec<_>>(),
        ["build", "test[1]"],
        "{out}"
    );
    assert!(!t.read("ran.log").contains("lint"));
}

/// Issue 10: a step's `run`, `env` and `outputs` read `{{ matrix.NAME }}`,
/// rendered per cell (filters included), and each cell is its own result.
#[test]
fn matrix_values_render_per_cell_in_run_env_and_outputs() {
    let plan = r#"version = 1
name = "levels"

[[steps]]
id = "level"
kind = "command"
run = "echo {{ matrix.level | upper }} $NAME $GAMEPLAN_MATRIX_LEVEL > out-{{ matrix.level }}.txt"
env = { NAME = "lvl-{{ matrix.level }}" }
inputs = ["plan.toml"]
outputs = ["out-{{ matrix.level }}.txt"]
matrix = { level = ["a", "b"] }
"#;
    let t = Test::new().file("plan.toml", plan);
    let out = t.run(&["plan", "run", "plan.toml", "--json"]);
    out.code(0);
    assert_eq!(t.read("out-a.txt"), "A lvl-a a\n");
    assert_eq!(t.read("out-b.txt"), "B lvl-b b\n");
    std::fs::remove_file(t.path("out-a.txt")).expect("rm");
    let again = t.run(&["plan", "run", "plan.toml", "--json"]);
    assert!(
        by_step(&again.json(), "state")
            .values()
            .all(|s| s == "reused"),
        "{again}"
    );
    assert_eq!(t.read("out-a.txt"), "A lvl-a a\n", "restored per cell");
}

#[test]
fn a_matrix_name_that_is_not_an_axis_is_a_plan_error_where_it_is_written() {
    let plan = r#"version = 1
name = "levels"

[[steps]]
id = "level"
kind = "command"
run = "echo {{ matrix.levl }}"
matrix = { level = ["a", "b"] }

[[steps]]
id = "plain"
kind = "command"
run = "echo {{ matrix.level }}"
"#;
    let t = Test::new().file("plan.toml", plan);
    t.run(&["plan", "check", "plan.toml"])
        .code(3)
        .stderr_has("plan.toml:7:7")
        .stderr_has("`matrix.levl` is not an axis of this step's matrix")
        .stderr_has("did you mean `level`?")
        .stderr_has("plan.toml:13:7")
        .stderr_has("`matrix` is defined only in a step's");
}

/// Issue 10: explain says why in the plan's words: "`run` changed", and
/// which `env` variable changed, never its value.
#[test]
fn explain_names_what_changed_in_the_plans_words() {
    let plan = r#"version = 1
name = "words"

[[steps]]
id = "a"
kind = "command"
run = "echo one > a.txt"
env = { LEVEL = "easy" }
inputs = ["plan.toml"]
outputs = ["a.txt"]
"#;
    let t = Test::new().file("plan.toml", plan);
    t.run(&["plan", "run", "plan.toml"]).code(0);
    t.write(
        "plan.toml",
        plan.replace("echo one", "echo two")
            .replace("\"easy\"", "\"nightmare\""),
    );
    let out = t.run(&["plan", "explain", "plan.toml"]);
    out.code(0)
        .stdout_has("`env.LEVEL` changed")
        .stdout_has("`run` changed");
    assert!(!format!("{out}").contains("nightmare"), "{out}");
    assert!(!format!("{out}").contains("program"), "{out}");
}

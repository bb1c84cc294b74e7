//! Issue 10: running a part of a plan, `gameplan plan run PLAN STEP...`.

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
fn issue10_a_named_step_runs_with_what_it_needs_and_nothing_else() {
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
fn issue10_an_unknown_step_name_is_refused_with_a_suggestion() {
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
fn issue10_a_resumed_partial_run_runs_the_same_part() {
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

//! Regression tests for issue 10 ("the runner as people use it every day"):
//! `plan check` and `plan explain` without secrets, an unwritable `--junit`
//! file, and the nits of `plan check`'s messages.

use crate::support::Test;

const PUBLISH: &str = r#"version = 1
name = "deploy"

[[steps]]
id = "build"
kind = "command"
run = "touch built"

[[steps]]
id = "publish"
kind = "command"
needs = ["build"]
run = "touch published"
env = { TOKEN = "{{ secret('PUBLISH_TOKEN') }}" }
"#;

/// `plan check` (a fork pull request's CI, which has no secrets) and `plan
/// explain` needed every secret's value; now they check that `secret()` is
/// well-formed, and only a run that reaches a step reading it refuses,
/// before anything runs, naming the secret and the step.
#[test]
fn issue10_plan_check_and_explain_need_no_secret_and_a_run_refuses_before_anything_runs() {
    let t = Test::new().file("plan.toml", PUBLISH);
    let check = t.check(&["plan.toml"]);
    check.json.code(0);
    check.text.stderr_has("plan.toml: ok");
    t.run(&["plan", "explain", "plan.toml"])
        .code(0)
        .stdout_has("publish");

    t.run(&["plan", "run", "plan.toml", "--yes"])
        .code(3)
        .stderr_has("plan.toml:14:17: secret `PUBLISH_TOKEN` is not set in the environment")
        .stderr_has("step `publish`")
        .stderr_has("nothing was run or charged");
    assert!(!t.path("built").exists(), "nothing ran");
    assert!(t.run_ids().is_empty(), "no run was started");

    // A part of the plan that does not read it runs without it.
    t.run(&["plan", "run", "plan.toml", "build", "--yes"])
        .code(0);
    assert!(t.path("built").exists());

    let t = t.env("PUBLISH_TOKEN", "s3cr3t-value");
    let run = t.run(&["plan", "run", "plan.toml", "--yes", "--new"]);
    run.code(0);
    assert!(t.path("published").exists());
    assert!(
        !run.stdout.contains("s3cr3t") && !run.stderr.contains("s3cr3t"),
        "{run}"
    );
}

/// A secret read outside any step (the backend's token) is needed by every
/// run; and a malformed `secret()` call is still a `plan check` error.
#[test]
fn issue10_a_secret_outside_the_steps_is_needed_by_every_run_and_a_bad_call_is_a_check_error() {
    let plan = r#"version = 1
name = "paid"

[backend]
kind = "http"
url = "http://127.0.0.1:9"
token = "{{ secret('GAMEPLAN_TOKEN') }}"

[[steps]]
id = "build"
kind = "command"
run = "touch built"
"#;
    let t = Test::new().file("plan.toml", plan);
    t.check(&["plan.toml"]).json.code(0);
    t.run(&["plan", "run", "plan.toml", "--yes"])
        .code(3)
        .stderr_has("plan.toml:7:9: secret `GAMEPLAN_TOKEN` is not set in the environment")
        .stderr_has("every run needs it");
    assert!(!t.path("built").exists());

    let bad = plan.replace("secret('GAMEPLAN_TOKEN')", "secret()");
    let t = Test::new().file("plan.toml", bad);
    let check = t.check(&["plan.toml"]);
    check.json.code(3);
    check.text.stderr_has("plan::template");
}

/// `--junit FILE` that could not be written was a warning after the run,
/// which CI never reads (the job then fails on a missing report, or passes
/// without one); now the run refuses before anything runs (exit 3).
#[test]
fn issue10_a_junit_file_that_cannot_be_written_fails_before_anything_runs() {
    let plan = "version = 1\nname = \"m\"\n\n[[steps]]\nid = \"a\"\nkind = \"command\"\nrun = \"touch ran\"\n";
    let t = Test::new()
        .file("plan.toml", plan)
        .file("reports/.keep", "");
    for junit in ["plan.toml/junit.xml", "reports"] {
        t.run(&["plan", "run", "plan.toml", "--yes", "--junit", junit])
            .code(3)
            .stderr_has(&format!("cannot write the JUnit file {junit}"))
            .stderr_has("Nothing was run or charged");
        assert!(!t.path("ran").exists(), "nothing ran");
        assert!(t.run_ids().is_empty(), "no run was started");
    }
    t.run(&[
        "plan",
        "run",
        "plan.toml",
        "--yes",
        "--junit",
        "reports/junit.xml",
    ])
    .code(0);
    assert!(t.read("reports/junit.xml").contains("<testcase"));
}

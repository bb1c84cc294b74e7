//! What `plan check` and `plan explain` need (no secrets), and:
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
fn plan_check_and_explain_need_no_secret_and_a_run_refuses_before_anything_runs() {
    let t = Test::new().file("plan.toml", PUBLISH);
    let check = t.check(&["plan.toml"]);
    check.json.code(0);
    check.text.stderr_has("plan.toml: ok").stderr_has(
        "note: secret `PUBLISH_TOKEN` is not set, so its value is unknown here; a run of step `publish` needs it",
    );
    assert_eq!(
        check.json.json()["files"][0]["unset_secrets"],
        serde_json::json!([{"name": "PUBLISH_TOKEN", "step": "publish"}])
    );
    t.run(&["plan", "explain", "plan.toml"])
        .code(0)
        .stdout_has("publish")
        .stderr_has("secret `PUBLISH_TOKEN` is not set, so its value is unknown here");
    let explained = t.run(&["plan", "explain", "plan.toml", "--json"]);
    assert_eq!(
        explained.json()["unset_secrets"][0]["name"],
        "PUBLISH_TOKEN",
        "{explained}"
    );

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

/// A resume of a run whose step reads a secret, with the secret unset,
/// says that it is unset, not that "the plan changed".
#[test]
fn a_resume_without_the_secret_names_it() {
    let plan = PUBLISH.replace(
        "run = \"touch published\"",
        "run = \"touch started && sleep 30\"",
    );
    let t = Test::new()
        .file("plan.toml", plan)
        .env("PUBLISH_TOKEN", "s3cr3t-value");
    let gameplan = t.spawn(&["plan", "run", "plan.toml", "--yes"]);
    crate::support::wait_until(
        "the step to start",
        std::time::Duration::from_secs(30),
        || t.path("started").exists(),
    );
    gameplan.signal(nix::sys::signal::Signal::SIGTERM);
    gameplan.wait().code(10);

    let t = t.without_env("PUBLISH_TOKEN");
    let resume = t.run(&["plan", "resume", "--yes"]);
    resume
        .code(3)
        .stderr_has("plan::unset_secret")
        .stderr_has("secret `PUBLISH_TOKEN` is not set");
    assert!(!resume.stderr.contains("changed since"), "{resume}");
}

/// A secret read outside any step is needed by every run, except the
/// backend's token, needed by a run that reaches the backend (a paid
/// plan's shard does not); a malformed `secret()` call is still a
/// `plan check` error.
#[test]
fn a_secret_outside_the_steps_is_needed_by_every_run_that_reads_it_and_a_bad_call_is_a_check_error()
{
    let plan = r#"version = 1
name = "paid"

[backend]
kind = "http"
url = "http://127.0.0.1:9"
token = "{{ secret('GAMEPLAN_TOKEN') }}"

[game]
id = "g"
driver = "stdio"
command = ["sh", "-c", "{{ secret('GAME_KEY') }}"]

[[steps]]
id = "build"
kind = "command"
run = "touch built"

[[steps]]
id = "bill"
kind = "estimate"
"#;
    let t = Test::new().file("plan.toml", plan).env("GAME_KEY", "true");
    t.check(&["plan.toml"]).json.code(0);
    // A run that reaches the backend needs its token.
    t.run(&["plan", "run", "plan.toml", "--yes"])
        .code(3)
        .stderr_has("plan.toml:7:9: secret `GAMEPLAN_TOKEN` is not set in the environment")
        .stderr_has("every run needs it");
    assert!(!t.path("built").exists());
    // One that does not (only `build`) runs without it ...
    t.run(&["plan", "run", "plan.toml", "build"]).code(0);
    assert!(t.path("built").exists());
    // ... but a secret of the game, outside any step, every run needs.
    let t = t.without_env("GAME_KEY");
    t.run(&["plan", "run", "plan.toml", "build", "--new"])
        .code(3)
        .stderr_has("secret `GAME_KEY` is not set in the environment")
        .stderr_has("every run needs it");

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
fn a_junit_file_that_cannot_be_written_fails_before_anything_runs() {
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

/// `plan check DIR` said `p: p: not a plan file`: now once, that it is a
/// directory. An empty file showed three problems with empty caret boxes:
/// now one, "the file is empty", without an excerpt.
#[test]
fn check_says_once_that_a_directory_or_an_empty_file_is_not_a_plan() {
    let t = Test::new()
        .file("plans/a.toml", "")
        .file("plans.toml/x", "");
    for dir in ["plans", "plans.toml"] {
        let check = t.check(&[dir]);
        check.codes(&["plan::not_a_file"]);
        check
            .text
            .stderr_has(&format!("× {dir}: this is a directory, not a plan file"));
        assert!(
            !check.text.stderr.contains(&format!("{dir}: {dir}")),
            "{}",
            check.text
        );
    }
    let check = t.check(&["plans/a.toml"]);
    check.codes(&["plan::empty"]);
    check.text.stderr_has("× plans/a.toml: the file is empty");
    assert!(
        !check.text.stderr.contains('╭'),
        "no excerpt: {}",
        check.text
    );
}

/// The NUL-byte problem echoed the raw NUL into the terminal; now it shows
/// it as ␀.
#[test]
fn the_nul_byte_problem_shows_it_escaped() {
    let t = Test::new().file("plan.toml", "version = 1\nname = \"a\0b\"\n");
    let check = t.check(&["plan.toml"]);
    check.codes(&["plan::nul_byte"]);
    check.text.stderr_has("name = \"a␀b\"");
    assert!(!check.text.stderr.contains('\0') && !check.json.stdout.contains('\0'));
}

/// The name rule's help was wrapped inside `[a-z0-9]`; `needs = "a"` and
/// `run = [..]` got a bare "wrong type" without the fix; a `cwd` that does
/// not exist was found only when the step ran.
#[test]
fn check_nits_name_rule_needs_run_and_a_missing_cwd() {
    let plan = r#"version = 1
name = "w"

[[steps]]
id = "Bad_Name-with-a-rather-long-long-long-name"
kind = "command"
argv = ["true"]

[[steps]]
id = "a"
kind = "command"
needs = "m"
argv = ["true"]

[[steps]]
id = "r"
kind = "command"
run = ["echo", "hi"]

[[steps]]
id = "c"
kind = "command"
run = "true"
cwd = "nowhere"

[[steps]]
id = "m"
kind = "command"
run = "mkdir -p built"
outputs = ["built/**"]

[[steps]]
id = "d"
kind = "command"
needs = ["m"]
run = "true"
cwd = "built"
"#;
    let t = Test::new().file("plan.toml", plan);
    let check = t.check(&["plan.toml"]);
    check.codes(&[
        "plan::invalid_name",
        "plan::wrong_type",
        "plan::wrong_type",
        "plan::missing_cwd",
    ]);
    check
        .text
        .stderr_has("help: names match [a-z0-9][a-z0-9_-]*: lowercase letters");
    check
        .with_message("expected an array, found a string")
        .at(12, 9)
        .help_has("write `needs = [\"m\"]`");
    check
        .with_message("expected a string, found an array")
        .at(18, 7)
        .help_has("`argv = [..]`");
    // A cwd a step it needs declares among its outputs is no problem.
    check
        .with_message("the cwd `nowhere` of step `c` does not exist")
        .at(24, 7)
        .label("no such directory");
}

//! Rendered diagnostics, as a person sees them: caret excerpts, labels, help
//! and the summary line, pinned with insta. Output is plain (`NO_COLOR=1`,
//! and `--no-color` where noted); the repo root is shown as `[ROOT]`.

use crate::support::Test;

#[track_caller]
fn rendered(t: &Test, args: &[&str]) -> String {
    let out = t.run(args);
    out.code(3);
    assert!(out.stdout.is_empty(), "{out}");
    out.redacted_stderr()
}

#[test]
fn unknown_key_with_a_suggestion() {
    let plan = r#"version = 1
name = "nightly"

[[steps]]
id = "build"
kind = "command"
run = "make game"
timeuot = "10m"
"#;
    let t = Test::new().file("plans/nightly.toml", plan);
    insta::assert_snapshot!(rendered(
        &t,
        &["--no-color", "plan", "check", "plans/nightly.toml"]
    ));
}

#[test]
fn dependency_cycle() {
    let plan = r#"version = 1
name = "loop"

[[steps]]
id = "build"
kind = "command"
run = "make"
needs = ["test"]

[[steps]]
id = "test"
kind = "command"
run = "make test"
needs = ["package"]

[[steps]]
id = "package"
kind = "command"
run = "make dist"
needs = ["build"]
"#;
    let t = Test::new().file("plan.toml", plan);
    insta::assert_snapshot!(rendered(&t, &["plan", "check", "plan.toml"]));
}

#[test]
fn several_problems_in_a_yaml_plan() {
    let plan = r"version: 1
name: Review
personas:
  - slug: kid
    card: Clicks everything.
  - slug: kid
    card: Reads nothing.
lenses:
  - name: crashes
    kind: rule
    over: findings
    when: unit.category in ['crash',
gates:
  - name: blockers
    lenses: [crashes, dead-ends]
steps:
  - id: judge
    kind: gate
    gate: blockers
    needs: [aggregate]
";
    let t = Test::new().file("review.yaml", plan);
    insta::assert_snapshot!(rendered(&t, &["plan", "check", "review.yaml"]));
}

#[test]
fn unset_environment_and_secret() {
    let plan = r#"version = 1
name = "deploy"

[backend]
kind = "http"
url = "{{ env.API_URL }}"
token = "{{ secret('GAMEPLAN_TOKEN') }}"

[[steps]]
id = "build"
kind = "command"
run = "make"
"#;
    let t = Test::new().file("plan.toml", plan);
    insta::assert_snapshot!(rendered(&t, &["plan", "explain", "plan.toml"]));
}

#[test]
fn money_step_retried_and_an_unknown_pool() {
    let plan = r#"version = 1
name = "paid"

[[steps]]
id = "estimate"
kind = "estimate"
retries = 2

[[steps]]
id = "build"
kind = "command"
run = "make"
pool = "gpu"
"#;
    let t = Test::new().file("plan.toml", plan);
    insta::assert_snapshot!(rendered(&t, &["plan", "graph", "plan.toml"]));
}

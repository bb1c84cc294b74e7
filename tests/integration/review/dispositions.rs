//! Dispositions: a malformed `dispositions.toml` beside a plan is a
//! plan error (exit 3) pointing at its line and column, every problem at
//! once, for `plan check` and for a run alike; a plan with no such file, or
//! a good one, checks as before.

use crate::support::{Test, at};

/// A review-only plan with two lenses.
const PLAN: &str = r#"version = 1
name = "review"

[[lenses]]
name = "no-todo"
kind = "rule"
over = "files"
files = ["src/**"]
when = "'TODO' in unit.text"

[[lenses]]
name = "clippy-clean"
kind = "command"
over = "files"
files = ["src/**/*.rs"]
argv = ["python3", "lens.py"]

[[gates]]
name = "hygiene"
lenses = ["no-todo", "clippy-clean"]

[[steps]]
id = "hygiene"
kind = "gate"
gate = "hygiene"
"#;

const GOOD: &str = r#"# Accepted findings; each ends on its `expires` day.
[[dispositions]]
id = "legacy"
lens = "clippy-clean"
unit = "src/legacy/**"
reason = "the legacy module is replaced in Q1"
owner = "ana"
expires = 2027-01-31

[[dispositions]]
id = "todo-in-docs"
lens = "no-todo"
title = "TODO*"
reason = "docs keep their TODO list on purpose"
owner = "bo"
expires = "2020-01-01"
"#;

#[test]
fn a_plan_without_dispositions_checks_as_before() {
    let t = Test::new().file("plans/review.toml", PLAN);
    let check = t.check(&["plans/review.toml"]);
    check.json.code(0);
    check
        .text
        .stderr_has("plans/review.toml: ok (plan `review`, 1 steps)");
}

#[test]
fn a_good_dispositions_file_checks_even_with_an_expired_entry() {
    // Expiry is judged when a gate runs (the finding is then lapsed), not a
    // reason to refuse the plan.
    let t = Test::new()
        .file("plans/review.toml", PLAN)
        .file("plans/dispositions.toml", GOOD);
    t.check(&["plans/review.toml"]).json.code(0);
}

#[test]
fn every_problem_of_a_malformed_file_is_reported_with_its_place() {
    let bad = r#"[[dispositions]]
id = "legacy"
lens = "clipy-clean"
unit = "src/legacy/**"
reason = "replaced in Q1"
owner = "ana"
expires = "2027-02-30"

[[dispositions]]
id = "legacy"
lens = "no-todo"
title = "TODO*"
reason = "r"
owner = "bo"
expires = 2027-01-31

[[dispositions]]
id = "nothing"
lens = "no-todo"
reason = "r"
expires = 2027-01-31
ownr = "cy"
"#;
    let t = Test::new()
        .file("plans/review.toml", PLAN)
        .file("plans/dispositions.toml", bad);
    let check = t.check(&["plans/review.toml"]);
    check.codes(&[
        "dispositions::unknown_lens",
        "dispositions::bad_date",
        "dispositions::duplicate_id",
        "plan::missing_key",
        "dispositions::no_matcher",
        "plan::unknown_key",
    ]);
    for p in check.problems() {
        assert_eq!(p.file, "plans/dispositions.toml", "{p:?}");
    }
    let lens = check.with_message("the plan has no lens `clipy-clean`");
    at(lens, bad, "\"clipy-clean\"").help("did you mean `clippy-clean`?");
    check.rendered(lens);
    let date = check.with_message("`2027-02-30` is not a day of the calendar");
    at(date, bad, "\"2027-02-30\"");
    check.rendered(date);
    check
        .with_message("two dispositions have the id `legacy`")
        .at(10, 6)
        .help_has("the first is on line 2");
    check
        .with_message("disposition `nothing` is missing the required key `owner`")
        .at(18, 1);
    check
        .with_message(
            "disposition `nothing` matches nothing: it has none of `fingerprint`, `title` or `unit`",
        )
        .at(18, 1);
    at(
        check.with_message("unknown key `ownr` in disposition `nothing`"),
        bad,
        "ownr",
    )
    .help("did you mean `owner`?");
    check.summary("plans/dispositions.toml", 6);
}

#[test]
fn a_toml_syntax_error_points_into_the_dispositions_file() {
    let t = Test::new().file("plans/review.toml", PLAN).file(
        "plans/dispositions.toml",
        "[[dispositions]]\nid = \"a\nlens = \"no-todo\"\n",
    );
    let check = t.check(&["plans/review.toml"]);
    let problem = check.only("plan::syntax");
    assert_eq!(problem.file, "plans/dispositions.toml");
    assert_eq!(problem.line, Some(2), "{problem:?}");
}

#[test]
fn a_malformed_dispositions_file_stops_a_run_before_anything_runs() {
    let t = Test::new()
        .file(
            "plans/review.toml",
            PLAN.replace(
                "kind = \"gate\"\ngate = \"hygiene\"",
                "kind = \"command\"\nrun = \"touch ran\"",
            ),
        )
        .file(
            "plans/dispositions.toml",
            "[[dispositions]]\nid = \"a\"\nlens = \"no-todo\"\ntitle = \"*\"\nreason = \"r\"\nowner = \"o\"\nexpires = \"soon\"\n",
        );
    let out = t.run(&["plan", "run", "plans/review.toml", "--yes"]);
    out.code(3)
        .stderr_has("plans/dispositions.toml:7:11: `soon` is not a date in the form YYYY-MM-DD")
        .stderr_has("nothing was run or charged");
    assert!(!t.path("ran").exists(), "a step ran despite the plan error");
}

#[test]
fn an_oversized_dispositions_file_is_refused_unread() {
    let huge = format!("# {}\n", "x".repeat(1024 * 1024));
    let t = Test::new()
        .file("plans/review.toml", PLAN)
        .file("plans/dispositions.toml", huge);
    let check = t.check(&["plans/review.toml"]);
    check
        .only("dispositions::too_large")
        .message("the dispositions file is larger than 1024 KiB");
}

#[test]
fn a_plan_with_no_lenses_cannot_carry_dispositions() {
    let t = Test::new()
        .file(
            "plan.toml",
            "version = 1\nname = \"p\"\n[[steps]]\nid = \"a\"\nkind = \"command\"\nrun = \"true\"\n",
        )
        .file("dispositions.toml", GOOD);
    let check = t.check(&["plan.toml"]);
    check.codes(&["dispositions::unknown_lens", "dispositions::unknown_lens"]);
    check.problems()[0].help_has("declares no `[[lenses]]`");
}

/// The checked-in schema (`gameplan schema dispositions`) accepts what the
/// loader accepts and refuses a disposition with no matcher or an unknown
/// key, as python-jsonschema (Draft 2020-12) sees it; TOML dates are given
/// as their text, as TOML-aware editors do.
#[test]
fn the_dispositions_schema_agrees_with_the_loader() {
    let t = Test::new()
        .file("good.toml", GOOD)
        .file(
            "bad.toml",
            "[[dispositions]]\nid = \"a\"\nlens = \"l\"\nreason = \"r\"\nowner = \"o\"\nexpires = 2027-01-01\ncolour = 1\n",
        );
    let schema = t.run(&["schema", "dispositions"]);
    schema.code(0);
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let checked_in =
        std::fs::read_to_string(repo.join("schemas/dispositions.schema.json")).unwrap();
    assert_eq!(schema.stdout, checked_in);
    t.write("schema.json", &schema.stdout);
    let script = r#"
import json, sys, tomllib, jsonschema
schema = json.load(open("schema.json"))
v = jsonschema.Draft202012Validator(schema)
for path in sys.argv[1:]:
    doc = json.loads(json.dumps(tomllib.load(open(path, "rb")), default=str))
    print(path, sorted(e.validator for e in v.iter_errors(doc)))
"#;
    let out = std::process::Command::new("python3")
        .args(["-c", script, "good.toml", "bad.toml"])
        .current_dir(t.path(""))
        .output()
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("good.toml []"), "{stdout}");
    assert!(
        stdout.contains("bad.toml ['additionalProperties', 'anyOf']"),
        "{stdout}"
    );
}

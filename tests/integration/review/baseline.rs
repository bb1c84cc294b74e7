//! Baselines: `plan run --baseline FILE|RUN_ID` labels each finding `new`
//! or `known` against an earlier run's `aggregate.json` and names the
//! baseline's findings not met again as `fixed`; `--fail-on new:crash`
//! fails only on what the change brought. Each build of the game is
//! `lever.py` with another planted crash, as a change to a game would be.

use crate::support::Test;

const LEVER: &str = include_str!("../../fixtures/games/lever.py");

const PLAN: &str = r#"version = 1
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
matrix = { persona = "*", controller = "*", seed = [1] }

[[steps]]
id = "aggregate"
kind = "aggregate"
needs = ["play"]
always = true
"#;

const BUG_A: &str = "lever gear slipped";
const BUG_B: &str = "door hinge cracked";

/// The game as a build with `bug` planted (none: a build without a bug).
fn build(bug: Option<&str>) -> String {
    let planted = bug.map_or_else(|| "None".to_owned(), |b| format!("{b:?}"));
    let line = LEVER
        .lines()
        .find(|l| l.starts_with("BUG = "))
        .expect("lever.py plants its bug on a `BUG = ` line");
    LEVER.replace(line, &format!("BUG = {planted}"))
}

fn repo(bug: Option<&str>) -> Test {
    Test::new()
        .file("plan.toml", PLAN)
        .file("game.py", build(bug))
}

/// The crash findings of a `--json` run: (id, title, baseline label).
fn findings(doc: &serde_json::Value) -> Vec<(String, String, String)> {
    doc["playtest"]["findings"]
        .as_array()
        .expect("playtest.findings")
        .iter()
        .map(|f| {
            (
                f["id"].as_str().unwrap_or_default().to_owned(),
                f["title"].as_str().unwrap_or_default().to_owned(),
                f["baseline"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// Main's run: its aggregate.json kept as `main-aggregate.json` (the CI
/// recipe's artifact); the id of bug A's crash.
fn main_run(t: &Test) -> (String, String) {
    let doc = t
        .run(&["plan", "run", "plan.toml", "--json"])
        .code(0)
        .json();
    let found = findings(&doc);
    assert_eq!(found.len(), 1, "{doc:#}");
    assert!(found[0].1.contains(BUG_A), "{doc:#}");
    assert_eq!(found[0].2, "", "no baseline, no label: {doc:#}");
    let run_id = doc["run_id"].as_str().expect("run_id").to_owned();
    let aggregate = t.read(&format!(
        ".gameplan/runs/{run_id}/steps/aggregate/aggregate.json"
    ));
    t.write("main-aggregate.json", aggregate);
    (found[0].0.clone(), run_id)
}

/// The pull request run's files: `aggregate.json` carries the labels and
/// `fixed`, `aggregate.md` lists the new first and names the fixed, and
/// in `JUnit` B's case fails on new:crash while A's passes as fixed.
fn pr_files(t: &Test, run_id: &str, a: &str, b: &str) {
    // aggregate.json carries the labels and `fixed`; aggregate.md lists
    // the new first and names the fixed.
    let dir = format!(".gameplan/runs/{run_id}/steps/aggregate");
    let agg: serde_json::Value =
        serde_json::from_str(&t.read(&format!("{dir}/aggregate.json"))).expect("aggregate.json");
    assert_eq!(agg["findings"][0]["baseline"], "new");
    assert_eq!(agg["fixed"][0]["id"], a);
    let md = t.read(&format!("{dir}/aggregate.md"));
    assert!(
        md.contains("- Against the baseline: 1 new, 0 known, 1 fixed"),
        "{md}"
    );
    let new_at = md.find("### New").expect("a New part");
    let fixed_at = md.find("### Fixed (1)").expect("a Fixed part");
    assert!(new_at < fixed_at, "{md}");
    assert!(md[new_at..fixed_at].contains(b), "{md}");
    assert!(md[fixed_at..].contains(a), "{md}");

    // JUnit: B's case fails on new:crash, A's case passes as fixed.
    let junit = t.read("junit.xml");
    let case_of = |id: &str| {
        let at = junit
            .find(&format!("<testcase name=\"{id} "))
            .unwrap_or_else(|| panic!("no case for {id}: {junit}"));
        let end = junit[at..]
            .find("</testcase>")
            .map_or(junit.len(), |e| at + e);
        junit[at..end].to_owned()
    };
    assert!(case_of(b).contains("<failure"), "{junit}");
    let fixed_case = case_of(a);
    assert!(!fixed_case.contains("<failure"), "{junit}");
    assert!(fixed_case.contains("fixed:"), "{junit}");
}

/// The issue's "done when": a change that fixes bug A and adds bug B
/// reports one `new` and one `fixed`, and `--fail-on new:crash` fails only
/// on the new; a build that still has only A passes with A `known`.
#[test]
fn a_change_that_fixes_one_bug_and_adds_another_is_one_new_and_one_fixed() {
    let t = repo(Some(BUG_A));
    let (a, _) = main_run(&t);

    // The pull request: A fixed, B added.
    t.write("game.py", build(Some(BUG_B)));
    let pr = t.run(&[
        "plan",
        "run",
        "plan.toml",
        "--baseline",
        "main-aggregate.json",
        "--fail-on",
        "new:crash",
        "--junit",
        "junit.xml",
        "--json",
    ]);
    let doc = pr.code(1).json();
    let found = findings(&doc);
    assert_eq!(found.len(), 1, "{doc:#}");
    let (b, title, label) = &found[0];
    assert!(title.contains(BUG_B), "{doc:#}");
    assert_eq!(label, "new");
    let fixed = doc["playtest"]["fixed"].as_array().expect("fixed");
    assert_eq!(fixed.len(), 1, "{doc:#}");
    assert_eq!(fixed[0]["id"], a.as_str());
    assert!(
        fixed[0]["title"]
            .as_str()
            .unwrap_or_default()
            .contains(BUG_A)
    );
    let matched = doc["fail_on"]["matched"].as_array().expect("matched");
    assert_eq!(matched.len(), 1, "{doc:#}");
    assert_eq!(matched[0]["id"], b.as_str());
    assert_eq!(
        doc["fail_on"]["selectors"],
        serde_json::json!(["new:crash"])
    );

    pr_files(&t, doc["run_id"].as_str().expect("run_id"), &a, b);

    // The text summary says it too.
    t.run(&[
        "plan",
        "run",
        "plan.toml",
        "--baseline",
        "main-aggregate.json",
        "--fail-on",
        "new:crash",
    ])
    .code(1)
    .stdout_has(&format!(
        "failed: 1 finding matches --fail-on new:crash: {b} (critical crash)"
    ))
    .stdout_has("against the baseline main-aggregate.json: 1 new, 0 known, 1 fixed")
    .stdout_has(&format!("  new      critical crash    {b}"))
    .stdout_has(&format!("  fixed    critical crash    {a}"));

    // A build that still has only A: known, and new:crash passes.
    t.write("game.py", build(Some(BUG_A)));
    let same = t.run(&[
        "plan",
        "run",
        "plan.toml",
        "--baseline",
        "main-aggregate.json",
        "--fail-on",
        "new:crash",
        "--json",
    ]);
    let doc = same.code(0).json();
    let found = findings(&doc);
    assert_eq!(found.len(), 1, "{doc:#}");
    assert_eq!(
        (found[0].0.as_str(), found[0].2.as_str()),
        (a.as_str(), "known")
    );
    assert_eq!(doc["playtest"]["fixed"], serde_json::json!([]));
    assert_eq!(doc["fail_on"]["matched"], serde_json::json!([]));
    // `crash` without `new:` still fails on the known bug.
    t.run(&[
        "plan",
        "run",
        "plan.toml",
        "--baseline",
        "main-aggregate.json",
        "--fail-on",
        "crash",
    ])
    .code(1);
}

/// `--baseline RUN_ID` compares with that run's aggregate; without a
/// baseline, `new:` takes every finding (a pull request run that lost its
/// baseline fails instead of passing); the plan's `fail_on` takes `new:`.
#[test]
fn a_run_id_names_the_baseline_and_without_one_every_finding_is_new() {
    let t = repo(Some(BUG_A));
    let (a, main_id) = main_run(&t);
    t.write("game.py", build(Some(BUG_B)));
    let doc = t
        .run(&[
            "plan",
            "run",
            "plan.toml",
            "--baseline",
            &main_id,
            "--fail-on",
            "new:crash",
            "--json",
        ])
        .code(1)
        .json();
    assert_eq!(findings(&doc)[0].2, "new");
    assert_eq!(doc["playtest"]["fixed"][0]["id"], a.as_str());
    assert_eq!(doc["playtest"]["baseline"], main_id.as_str());

    // No baseline: every finding is new.
    t.run(&["plan", "run", "plan.toml", "--fail-on", "new:crash"])
        .code(1)
        .stdout_has("1 finding matches --fail-on new:crash");

    // The plan's fail_on says it the same way.
    t.write(
        "plan.toml",
        PLAN.replace(
            "controllers = [\"standard\"]\n",
            "controllers = [\"standard\"]\nfail_on = [\"new:crash\"]\n",
        ),
    );
    t.write("game.py", build(Some(BUG_A)));
    t.run(&[
        "plan",
        "run",
        "plan.toml",
        "--baseline",
        "main-aggregate.json",
    ])
    .code(0)
    .stdout_has("1 finding judged by fail_on [new:crash]: none match");
}

/// A baseline that cannot be read stops the command before anything runs
/// (exit 3, no run started), naming what it tried and what to pass.
#[test]
fn a_bad_baseline_is_refused_before_anything_runs() {
    let t = repo(None);
    t.run(&["plan", "run", "plan.toml", "--baseline", "nowhere.json"])
        .code(3)
        .stderr_has("--baseline nowhere.json: no such file, and no run `nowhere.json`")
        .stderr_has("Nothing was run or charged");
    t.write("not-an-aggregate.json", "{\"cells\": []}");
    t.run(&[
        "plan",
        "run",
        "plan.toml",
        "--baseline",
        "not-an-aggregate.json",
    ])
    .code(3)
    .stderr_has("not-an-aggregate.json is not an aggregate.json");
    assert!(t.run_ids().is_empty(), "no run may start");

    // A run without an aggregate step has no aggregate to compare with.
    t.write(
        "plan.toml",
        PLAN.split("[[steps]]\nid = \"aggregate\"")
            .next()
            .expect("plan"),
    );
    let doc = t
        .run(&["plan", "run", "plan.toml", "--json"])
        .code(0)
        .json();
    let id = doc["run_id"].as_str().expect("run_id");
    t.run(&["plan", "run", "plan.toml", "--baseline", id])
        .code(3)
        .stderr_has(&format!("run {id} of `lever` has no aggregate step"));
}

/// A gate over findings with `only_new = true`: a crash the baseline knows
/// does not stop it, a new one does.
const NEW_CRASH_GATE: &str = r#"
[[lenses]]
name = "no-crash"
kind = "rule"
over = "findings"
when = "unit.category == 'crash'"

[[gates]]
name = "no-new-crash"
lenses = ["no-crash"]
only_new = true

[[steps]]
id = "no-new-crash"
kind = "gate"
needs = ["aggregate"]
"#;

#[test]
fn a_gate_with_only_new_judges_only_the_new_findings() {
    let t = repo(Some(BUG_A));
    let (a, _) = main_run(&t);
    t.write("plan.toml", format!("{PLAN}{NEW_CRASH_GATE}"));
    // Still only A: known, so the gate judges nothing and passes.
    t.run(&[
        "plan",
        "run",
        "plan.toml",
        "--baseline",
        "main-aggregate.json",
    ])
    .code(0)
    .stdout_has(&format!("  known    critical crash    {a}"));
    // B is new: the gate stands on it.
    t.write("game.py", build(Some(BUG_B)));
    let pr = t.run(&[
        "plan",
        "run",
        "plan.toml",
        "--baseline",
        "main-aggregate.json",
    ]);
    pr.code(1).stdout_has("no-new-crash").stdout_has(BUG_B);
    assert!(!pr.stdout.contains(&format!("{a}: ")), "{pr}");
    // Without a baseline every finding is new.
    t.write("game.py", build(Some(BUG_A)));
    t.run(&["plan", "run", "plan.toml"])
        .code(1)
        .stdout_has(BUG_A);

    // On a gate with no lens over findings it narrows nothing: an error.
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
only_new = true
"#;
    t.write("plan.toml", &wrong);
    let check = t.check(&["plan.toml"]);
    let problem = check.only("plan::only_new_without_findings");
    assert!(
        problem
            .message
            .contains("gate `played` has `only_new = true` but no lens over `findings`"),
        "{problem:?}"
    );
    let (line, column) = crate::support::pos(&wrong, "only_new = true");
    problem.at(line, column + "only_new = ".len());
}

/// A run is compared with one baseline: its journal keeps the baseline's
/// findings, so a resume without `--baseline` uses them (even with the file
/// gone), and a resume given another baseline is refused.
#[test]
fn a_resume_keeps_the_runs_baseline_and_refuses_another() {
    let t = repo(Some(BUG_A));
    let (a, _) = main_run(&t);
    let held = PLAN.replace(
        "needs = [\"play\"]\nalways = true",
        "needs = [\"play\", \"hold\"]\nalways = true",
    ) + r#"
[[steps]]
id = "hold"
kind = "command"
run = "echo $$ > hold.pid; while [ ! -f release ]; do sleep 0.05; done"
"#;
    t.write("plan.toml", held);
    t.write("game.py", build(Some(BUG_B)));
    let gameplan = t.spawn(&[
        "plan",
        "run",
        "plan.toml",
        "--baseline",
        "main-aggregate.json",
        "--fail-on",
        "new:crash",
    ]);
    crate::support::wait_until(
        "`hold` to start",
        std::time::Duration::from_secs(60),
        || !t.read("hold.pid").trim().is_empty(),
    );
    let killed = gameplan.kill9();
    assert_eq!(killed.code, None, "{killed}");

    t.write("other.json", r#"{"aggregate": 1, "findings": []}"#);
    t.run(&["plan", "resume", "--baseline", "other.json"])
        .code(3)
        .stderr_has("was started with --baseline main-aggregate.json")
        .stderr_has("Nothing was run or charged");

    std::fs::remove_file(t.path("main-aggregate.json")).expect("rm");
    t.write("release", "");
    let doc = t.run(&["plan", "resume", "--json"]).code(1).json();
    let found = findings(&doc);
    assert_eq!(found.len(), 1, "{doc:#}");
    assert!(found[0].1.contains(BUG_B), "{doc:#}");
    assert_eq!(found[0].2, "new");
    assert_eq!(doc["playtest"]["fixed"][0]["id"], a.as_str());
    assert_eq!(
        doc["fail_on"]["selectors"],
        serde_json::json!(["new:crash"])
    );
}

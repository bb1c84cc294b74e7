//! A paid plan across shards: `--shard prepare` buys the job once, the
//! shards play for it and buy nothing, `plan merge` delivers every cell and
//! settles once. Read back from the real embedded ledger
//! (`ledger show --json`).

use serde_json::Value;

use crate::support::Test;

const DEMO: &str = include_str!("../../../plans/demo.toml");
const VETERAN: &str = include_str!("../../../examples/personas/veteran.md");

/// A repo holding the paid demo.
fn demo() -> Test {
    Test::new()
        .file("plan.toml", DEMO)
        .file("examples/personas/veteran.md", VETERAN)
}

/// The ledger of the state directory `state`.
fn ledger(t: &Test, state: &str) -> Value {
    let db = format!("{state}/ledger.sqlite");
    t.run(&["ledger", "show", "--json", "--db", &db])
        .code(0)
        .json()
}

/// A job as (state, charged, refunded, its runs' states).
type Job = (String, i64, i64, Vec<String>);

/// (charged, refunded, balance) of the demo account, and each job.
fn money(ledger: &Value) -> ((i64, i64, i64), Vec<Job>) {
    let account = &ledger["accounts"][0];
    let totals = (
        account["charged_cents"].as_i64().expect("charged"),
        account["refunded_cents"].as_i64().expect("refunded"),
        account["balance_cents"].as_i64().expect("balance"),
    );
    let jobs = ledger["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .map(|j| {
            (
                j["state"].as_str().expect("state").to_owned(),
                j["charged_cents"].as_i64().expect("charged"),
                j["refunded_cents"].as_i64().expect("refunded"),
                j["runs"]
                    .as_array()
                    .expect("runs")
                    .iter()
                    .map(|r| r["state"].as_str().expect("run state").to_owned())
                    .collect(),
            )
        })
        .collect();
    (totals, jobs)
}

fn shard(t: &Test, k: u32, state: &str, bundle: &str) {
    let spec = format!("{k}/3");
    t.run(&[
        "plan",
        "run",
        "plan.toml",
        "--shard",
        &spec,
        "--prepared",
        ".gameplan/shards/prepare",
        "--state-dir",
        state,
        "--bundle",
        bundle,
    ])
    .code(0)
    .stderr_has(&format!("bundle of shard {spec}:"));
    assert!(
        !t.path(&format!("{state}/ledger.sqlite")).exists(),
        "shard {spec} opened a ledger: a shard never reaches the backend"
    );
}

/// The lines of a run's output that say what the gates found.
fn verdicts(stdout: &str) -> Vec<String> {
    stdout
        .lines()
        .filter(|l| l.starts_with("gate ") || l.trim_start().starts_with("every-cell-played:"))
        .map(|l| l.split(" (").next().unwrap_or(l).to_owned())
        .collect()
}

/// The findings a run's summary lists (severity, category, fingerprint,
/// text): the same whatever ran where.
fn findings(stdout: &str) -> Vec<&str> {
    stdout
        .lines()
        .filter(|l| {
            ["  critical ", "  high ", "  medium ", "  low "]
                .iter()
                .any(|s| l.starts_with(s))
        })
        .collect()
}

#[test]
fn a_paid_plan_in_three_shards_is_bought_once_delivered_and_settled_once_like_the_whole_run() {
    let t = demo();
    let whole = t.run(&["plan", "run", "plan.toml", "--yes", "--state-dir", "whole"]);
    whole.code(0).stdout_has("settled job");
    let whole_money = money(&ledger(&t, "whole"));

    t.run(&["plan", "run", "plan.toml", "--shard", "prepare", "--yes"])
        .code(0)
        .stderr_has("estimate: 4 cells to buy")
        .stderr_has("prepared job job-1 ($1.00 for 4 cells)");
    for k in 1..=3 {
        shard(&t, k, &format!("machine{k}"), &format!("b{k}"));
    }
    // Bought once, nothing delivered yet: the shards sent nothing.
    let ((charged, _, _), jobs) = money(&ledger(&t, ".gameplan"));
    assert_eq!(charged, 100);
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    assert_eq!(jobs[0].0, "open");
    assert!(jobs[0].3.iter().all(|s| s == "queued"), "{jobs:?}");

    // A shard run again, on a machine of its own: nothing more is charged.
    shard(&t, 2, "machine2-again", "b2");
    assert_eq!(money(&ledger(&t, ".gameplan")).0.0, 100);

    let merged = t.run(&[
        "plan",
        "merge",
        "plan.toml",
        ".gameplan/shards/prepare",
        "b1",
        "b2",
        "b3",
    ]);
    merged
        .code(0)
        .stderr_has("merging 4 cells from 3 bundles, for job job-1")
        .stdout_has("4 cells (0 played, 4 reused)")
        .stdout_has("settled job job-1: charged $1.00, refunded $0.00");
    assert_eq!(verdicts(&merged.stdout), verdicts(&whole.stdout));
    assert!(!verdicts(&merged.stdout).is_empty());
    assert_eq!(findings(&merged.stdout), findings(&whole.stdout));
    assert_eq!(findings(&whole.stdout).len(), 4, "{}", whole.stdout);
    let merged_money = money(&ledger(&t, ".gameplan"));
    assert_eq!(merged_money, whole_money, "the sharded run's money differs");
    assert_eq!(merged_money.1[0].0, "settled");
    assert!(merged_money.1[0].3.iter().all(|s| s == "succeeded"));

    // Merged again: every run was delivered, the job settled; no charge.
    t.run(&["plan", "merge", "plan.toml", "b1", "b2", "b3"])
        .code(0)
        .stderr_has("was delivered before")
        .stdout_has("refunded $0.00");
    assert_eq!(money(&ledger(&t, ".gameplan")), whole_money);
}

#[test]
fn a_merge_missing_a_shard_or_mixing_prepares_settles_nothing() {
    let t = demo();
    t.run(&["plan", "run", "plan.toml", "--shard", "prepare", "--yes"])
        .code(0);
    for k in [1, 3] {
        shard(&t, k, &format!("machine{k}"), &format!("b{k}"));
    }
    let before = money(&ledger(&t, ".gameplan"));
    t.run(&["plan", "merge", "plan.toml", "b1", "b3"])
        .code(3)
        .stderr_has("in no bundle")
        .stderr_has("`--shard 2/3`")
        .stderr_has("Nothing was run or charged");
    assert_eq!(money(&ledger(&t, ".gameplan")), before);
    assert_eq!(before.1[0].0, "open", "the job was settled");

    // Shard 2 played for another prepare (a second job) is not merged
    // into the first.
    t.run(&[
        "plan",
        "run",
        "plan.toml",
        "--shard",
        "prepare",
        "--yes",
        "--bundle",
        "other-prepare",
    ])
    .code(0)
    .stderr_has("prepared job job-2");
    t.run(&[
        "plan",
        "run",
        "plan.toml",
        "--shard",
        "2/3",
        "--prepared",
        "other-prepare",
        "--state-dir",
        "machine2",
        "--bundle",
        "b2",
    ])
    .code(0);
    t.run(&["plan", "merge", "plan.toml", "b1", "b2", "b3"])
        .code(3)
        .stderr_has("was played for the job prepared by run")
        .stderr_has("Nothing was run or charged");
    t.run(&[
        "plan",
        "merge",
        "plan.toml",
        ".gameplan/shards/prepare",
        "other-prepare",
        "b1",
        "b2",
        "b3",
    ])
    .code(3)
    .stderr_has("2 prepared jobs among the bundles");
    // A bundle that names no prepared job (its manifest's `prepared` cut
    // out, as a bundle of a free shard has none) is not merged into a job.
    shard(&t, 2, "machine2-first", "b2");
    let manifest = t.read("b3/manifest.json");
    let mut doc: serde_json::Value = serde_json::from_str(&manifest).expect("manifest");
    doc.as_object_mut().expect("object").remove("prepared");
    t.write(
        "b3/manifest.json",
        serde_json::to_string(&doc).expect("json"),
    );
    t.run(&[
        "plan",
        "merge",
        "plan.toml",
        ".gameplan/shards/prepare",
        "b1",
        "b2",
        "b3",
    ])
    .code(3)
    .stderr_has("was played without a prepared job")
    .stderr_has("Nothing was run or charged");
    let jobs = money(&ledger(&t, ".gameplan")).1;
    assert!(jobs.iter().all(|j| j.0 == "open"), "{jobs:?}");

    // Declined at the price question: no job, nothing for shards.
    t.run(&[
        "plan",
        "run",
        "plan.toml",
        "--shard",
        "prepare",
        "--bundle",
        "declined",
    ])
    .code(10)
    .stderr_has("no job was prepared");
    assert!(!t.path("declined/job.json").exists());
    assert_eq!(money(&ledger(&t, ".gameplan")).1.len(), 2);
    // Its resume, answered yes, buys once and writes the prepared job.
    t.run(&["plan", "resume", "--yes"])
        .code(0)
        .stderr_has("prepared job job-3");
    assert!(t.path("declined/job.json").exists());
    assert_eq!(money(&ledger(&t, ".gameplan")).1.len(), 3);
}

#[test]
fn over_serve_only_prepare_and_merge_need_the_token_and_each_machine_keeps_its_own_state() {
    let t = demo();
    let served = crate::support::Served::start(&t);
    let plan = DEMO.replace(
        "[backend]\nkind = \"local\"",
        &format!(
            "[backend]\nkind = \"http\"\nurl = \"{}\"\ntoken = \"{{{{ secret('STUDIO_TOKEN') }}}}\"",
            served.url
        ),
    );
    assert!(plan.contains("kind = \"http\""), "{plan}");
    t.write("plan.toml", &plan);
    // Prepare on a machine of its own (its own state dir), with the token.
    let t = t.env("STUDIO_TOKEN", &served.token);
    t.run(&[
        "plan",
        "run",
        "plan.toml",
        "--shard",
        "prepare",
        "--yes",
        "--state-dir",
        "prep",
        "--bundle",
        "prepared",
    ])
    .code(0)
    .stderr_has("prepared job job-1");
    // The shards, each on a machine of its own, without it.
    let t = t.without_env("STUDIO_TOKEN");
    for k in 1..=3 {
        let spec = format!("{k}/3");
        let state = format!("machine{k}");
        let bundle = format!("b{k}");
        t.run(&[
            "plan",
            "run",
            "plan.toml",
            "--shard",
            &spec,
            "--prepared",
            "prepared",
            "--state-dir",
            &state,
            "--bundle",
            &bundle,
        ])
        .code(0);
    }
    let merge = [
        "plan",
        "merge",
        "plan.toml",
        "prepared",
        "b1",
        "b2",
        "b3",
        "--state-dir",
        "m",
    ];
    // The merge reaches the ledger: without the token it is refused.
    t.run(&merge).code(3).stderr_has("STUDIO_TOKEN");
    let t = t.env("STUDIO_TOKEN", &served.token);
    t.run(&merge)
        .code(0)
        .stdout_has("settled job job-1: charged $1.00, refunded $0.00");
    let doc = t
        .run(&["ledger", "show", "--json", "--db", "served.sqlite"])
        .code(0)
        .json();
    let jobs = money(&doc).1;
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    assert_eq!(jobs[0].0, "settled");
    assert_eq!(jobs[0].3, vec!["succeeded"; 4]);
}

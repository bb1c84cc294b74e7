//! Delivery: `deliver` uploads each bought cell's files and
//! completes its run, `aggregate` publishes the merged report to the job.
//! The paid demo (`plans/demo.toml --yes`) on the embedded ledger, read
//! back with `gameplan ledger show --json`: every file the ledger holds is
//! the one on disk (size and sha256), also after a kill -9 at each boundary
//! of `complete` and of `aggregate` and a `plan resume`.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

use crate::support::{Served, Test, wait_until};

const CELL_FILES: [&str; 4] = [
    "report.json",
    "report.md",
    "transcript.jsonl",
    "trace.jsonl",
];

fn demo() -> Test {
    Test::new()
        .file("plans/demo.toml", include_str!("../../../plans/demo.toml"))
        .file(
            "examples/personas/veteran.md",
            include_str!("../../../examples/personas/veteran.md"),
        )
}

fn ledger(t: &Test, db: Option<&str>) -> Value {
    let mut args = vec!["ledger", "show", "--json"];
    args.extend(db.map(|db| ["--db", db]).into_iter().flatten());
    t.run(&args).code(0).json()
}

/// The size and sha256 of a file of the run, as the ledger would hold it.
fn digest_of(t: &Test, rel: &str) -> (i64, String) {
    let bytes = std::fs::read(t.path(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"));
    (
        i64::try_from(bytes.len()).unwrap(),
        gameplan::reuse::sha256_hex(&bytes),
    )
}

fn the_run(t: &Test) -> String {
    let ids = t.run_ids();
    assert_eq!(ids.len(), 1, "one run: {ids:?}");
    ids[0].clone()
}

/// Checks the demo's one job: every run succeeded with exactly its
/// cell's four files uploaded as they are on disk, the aggregate
/// published with the digests of the files on disk, one charge, one
/// settlement. Answers every digest, by file.
fn delivered_once(t: &Test, db: Option<&str>) -> BTreeMap<String, (i64, String)> {
    let doc = ledger(t, db);
    let jobs = doc["jobs"].as_array().expect("jobs");
    assert_eq!(jobs.len(), 1, "one job: {doc:#}");
    let job = &jobs[0];
    let run_dir = format!(".gameplan/runs/{}", the_run(t));
    let mut digests = BTreeMap::new();
    let runs = job["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 4, "{job:#}");
    let uploads = job["uploads"].as_array().expect("uploads");
    for run in runs {
        assert_eq!(run["state"], "succeeded", "{run:#}");
        let cell = format!(
            "play[{},{}]",
            run["persona"].as_str().unwrap(),
            run["controller"].as_str().unwrap()
        );
        let mine: BTreeMap<String, (i64, String)> = uploads
            .iter()
            .filter(|u| u["run"] == run["id"])
            .map(|u| {
                (
                    u["name"].as_str().unwrap().to_owned(),
                    (
                        u["size"].as_i64().unwrap(),
                        u["sha256"].as_str().unwrap().to_owned(),
                    ),
                )
            })
            .collect();
        let names: Vec<&str> = mine.keys().map(String::as_str).collect();
        let mut expected = CELL_FILES.to_vec();
        expected.sort_unstable();
        assert_eq!(names, expected, "{cell}: {job:#}");
        for (name, digest) in mine {
            let rel = format!("{run_dir}/steps/{cell}/{name}");
            assert_eq!(digest, digest_of(t, &rel), "{rel}");
            digests.insert(rel, digest);
        }
    }
    for (field, name) in [("md", "aggregate.md"), ("json", "aggregate.json")] {
        let rel = format!("{run_dir}/steps/aggregate/{name}");
        let published = &job["aggregate"][field];
        let digest = (
            published["size"].as_i64().expect("published"),
            published["sha256"].as_str().unwrap().to_owned(),
        );
        assert_eq!(digest, digest_of(t, &rel), "{rel}: {job:#}");
        assert!(
            uploads
                .iter()
                .any(|u| u["run"].is_null() && u["name"] == name && u["sha256"] == digest.1),
            "{name} uploaded to the job: {job:#}"
        );
        digests.insert(rel, digest);
    }
    assert_eq!(job["state"], "settled", "{job:#}");
    assert_eq!(job["settlements"].as_array().map(Vec::len), Some(1));
    let account = &doc["accounts"][0];
    assert_eq!(account["charged_cents"], job["price_cents"], "one charge");
    assert_eq!(account["adds_up"], true);
    digests
}

#[test]
fn deliver_the_demo_uploads_every_bought_run_and_publishes_the_aggregate() {
    let t = demo();
    let out = t.run(&["plan", "run", "plans/demo.toml", "--yes"]);
    out.code(0)
        .stderr_has("delivered play[curious-kid,standard]: 4 files (")
        .stderr_has("published the aggregate to job job-1");
    delivered_once(&t, None);
}

#[test]
fn deliver_dry_upload_lists_what_would_go_and_sends_nothing() {
    let t = demo();
    let out = t.run(&["plan", "run", "plans/demo.toml", "--yes", "--dry-upload"]);
    let run_dir = format!(".gameplan/runs/{}", the_run(&t));
    let (size, sha) = digest_of(
        &t,
        &format!("{run_dir}/steps/play[grumpy-veteran,jev]/trace.jsonl"),
    );
    out.stderr_has(&format!(
        "--dry-upload: would upload trace.jsonl of play[grumpy-veteran,jev] ({size} bytes, sha256 {sha})"
    ))
    .stderr_has("--dry-upload: would complete run ")
    .stderr_has("--dry-upload: would upload aggregate.md (");
    let doc = ledger(&t, None);
    let job = &doc["jobs"][0];
    assert_eq!(
        job["uploads"],
        serde_json::json!([]),
        "nothing uploaded: {job:#}"
    );
    assert_eq!(job["aggregate"], Value::Null, "nothing published");
    for run in job["runs"].as_array().unwrap() {
        assert_ne!(run["state"], "succeeded", "no run completed: {run:#}");
    }
}

/// Runs the demo with `GAMEPLAN_CRASH_AT=at`: gameplan must die by
/// SIGKILL there. Then `plan resume` ends it.
fn killed_then_resumed(at: &str) -> (Test, String) {
    killed_then_resumed_in(demo(), at)
}

fn killed_then_resumed_in(t: Test, at: &str) -> (Test, String) {
    let t = t.env("GAMEPLAN_CRASH_AT", at);
    let mut spawned = t.spawn(&["plan", "run", "plans/demo.toml", "--yes"]);
    wait_until(
        &format!("gameplan to die at {at}"),
        Duration::from_secs(60),
        || !spawned.is_running(),
    );
    let killed = spawned.kill9();
    assert_eq!(
        killed.code, None,
        "gameplan was not killed at {at}\n{killed}"
    );
    let t = t.without_env("GAMEPLAN_CRASH_AT");
    let resumed = t.run(&["plan", "resume"]);
    resumed.code(0);
    (t, resumed.stderr.clone())
}

/// `value` without any `report_sha256` field, at any depth.
fn strip(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.remove("report_sha256");
            map.values_mut().for_each(strip);
        }
        Value::Array(items) => items.iter_mut().for_each(strip),
        _ => {}
    }
}

/// The merged report of the demo's run: `aggregate.md`'s digest and
/// `aggregate.json` less each cell's report digest (a report holds its
/// wall time, so no two plays' are alike; everything else is).
fn merged(t: &Test) -> (String, Value) {
    let dir = format!(".gameplan/runs/{}/steps/aggregate", the_run(t));
    let md = digest_of(t, &format!("{dir}/aggregate.md")).1;
    let mut json: Value = serde_json::from_str(&t.read(&format!("{dir}/aggregate.json"))).unwrap();
    strip(&mut json);
    (md, json)
}

/// The demo run through once, uninterrupted: its merged report.
fn uninterrupted() -> (String, Value) {
    let t = demo();
    t.run(&["plan", "run", "plans/demo.toml", "--yes"]).code(0);
    merged(&t)
}

const BOUNDARIES: [&str; 4] = [
    "key_journaled",
    "request_sent",
    "response_received",
    "response_journaled",
];

#[test]
fn deliver_killed_at_each_boundary_of_complete_completes_every_run_once_on_resume() {
    let baseline = uninterrupted();
    for boundary in BOUNDARIES {
        let (t, resumed) = killed_then_resumed(&format!("complete:{boundary}"));
        delivered_once(&t, None);
        assert!(
            merged(&t) == baseline,
            "complete:{boundary}: another aggregate"
        );
        assert!(
            resumed.contains("published the aggregate to job job-1"),
            "complete:{boundary}\n{resumed}"
        );
    }
}

#[test]
fn aggregate_killed_at_each_boundary_publishes_once_with_the_same_digests_on_resume() {
    let baseline = uninterrupted();
    for boundary in BOUNDARIES {
        let (t, resumed) = killed_then_resumed(&format!("aggregate:{boundary}"));
        delivered_once(&t, None);
        assert!(
            merged(&t) == baseline,
            "aggregate:{boundary}: another aggregate"
        );
        // The resumed merge is the one first journaled: the same reports
        // give the same files, and the digests sent are the first ones.
        assert!(
            !resumed.contains("differs from the one an earlier attempt journaled"),
            "aggregate:{boundary}\n{resumed}"
        );
        assert!(
            !resumed.contains("delivered play["),
            "no cell delivered again (aggregate:{boundary})\n{resumed}"
        );
    }
}

#[test]
fn deliver_over_serve_completes_every_run_once_through_a_kill_and_uploads_no_token() {
    let t = demo();
    let served = Served::start(&t);
    let token = t
        .run(&[
            "ledger",
            "token",
            "--db",
            "served.sqlite",
            "--scopes",
            "playtest:write,playtest:model,playtest:upload",
            "--account",
            "demo",
        ])
        .code(0)
        .stdout
        .trim()
        .to_owned();
    let plan = include_str!("../../../plans/demo.toml").replace(
        "[backend]\nkind = \"local\"",
        &format!(
            "[backend]\nkind = \"http\"\nurl = \"{}\"\ntoken = \"{{{{ secret('STUDIO_TOKEN') }}}}\"",
            served.url
        ),
    );
    assert!(plan.contains("kind = \"http\""), "{plan}");
    let t = t.file("plans/demo.toml", plan).env("STUDIO_TOKEN", &token);
    let (t, resumed) = killed_then_resumed_in(t, "complete:response_received");
    assert!(
        resumed.contains("published the aggregate to job job-1"),
        "{resumed}"
    );
    let digests = delivered_once(&t, Some("served.sqlite"));
    assert_eq!(digests.len(), 4 * 4 + 2);
    assert!(
        !t.path(".gameplan/ledger.sqlite").exists(),
        "nothing went to the embedded ledger"
    );
    // No uploaded file holds the token (nor does anything under .gameplan/).
    for rel in digests.keys() {
        assert!(!t.read(rel).contains(&token), "the token is in {rel}");
    }
}

//! Paid play cells: a plan's `play` cells report to the backend
//! run `register` bought for them (transitions and heartbeats), a Ctrl-C
//! leaves the runs `interrupted` and a resume plays them without a second
//! charge, and a run canceled from outside stops its cell after its turn.
//! The real binary, the embedded ledger and a real Python game.

use std::time::Duration;

use gameplan::backend::api::{RunRef, RunState, Token, TransitionRequest};
use gameplan::backend::ledger::{DEMO_TOKEN, Ledger};
use nix::sys::signal::Signal;
use serde_json::Value;

use crate::support::{Served, Test, wait_until};

const LEDGER: &str = ".gameplan/ledger.sqlite";

/// Every observation is new (no `stuck`); `SLOW` seconds pass before each
/// answer to `act`.
const COUNTER: &str = r#"import json, os, sys, time

slow = float(os.environ.get("SLOW", "0"))
n = 0
for line in sys.stdin:
    msg = json.loads(line)
    op, i = msg["op"], msg["id"]
    if op == "hello":
        out = {"id": i, "ok": True, "name": "counter", "version": "1", "protocol": 1}
    elif op == "reset":
        n = 0
        out = {"id": i, "ok": True, "observation": {"text": "Room 0", "actions": ["a", "b"], "state": {"n": 0}, "score": 0}}
    elif op == "act":
        time.sleep(slow)
        n += 1
        out = {"id": i, "ok": True, "reward": 0, "done": False,
               "observation": {"text": "Room %d" % n, "actions": ["a", "b"], "state": {"n": n}, "score": n}}
    else:
        out = {"id": i, "ok": True}
    print(json.dumps(out), flush=True)
    if op == "close":
        break
"#;

/// estimate → register → play (two personas × `standard`), no deliver or
/// finish: the runs stay where play leaves them.
fn paid(slow: &str, patience: u64) -> Test {
    let plan = format!(
        r#"version = 1
name = "paid-play"
controllers = ["standard"]

[backend]
kind = "local"

[game]
id = "counter"
command = ["python3", "game.py"]
env = {{ SLOW = "{slow}" }}

[[personas]]
slug = "kid"
card = "Clicks everything."
player = {{ kind = "random", seed = 3 }}
patience = {patience}

[[personas]]
slug = "vet"
card = "Seen it all."
player = {{ kind = "explorer", seed = 4 }}
patience = {patience}

[[steps]]
id = "estimate"
kind = "estimate"

[[steps]]
id = "register"
kind = "register"
needs = ["estimate"]

[[steps]]
id = "play"
kind = "play"
needs = ["register"]
matrix = {{ persona = "*", controller = "*" }}
"#
    );
    Test::new().file("game.py", COUNTER).file("plan.toml", plan)
}

fn ledger(test: &Test) -> Value {
    ledger_at(test, LEDGER)
}

fn ledger_at(test: &Test, db: &str) -> Value {
    test.run(&["ledger", "show", "--json", "--db", db])
        .code(0)
        .json()
}

/// The runs of the one job: (persona, state, played, `actions_taken`).
fn runs(doc: &Value) -> Vec<(String, String, bool, i64)> {
    let jobs = doc["jobs"].as_array().expect("jobs");
    assert_eq!(jobs.len(), 1, "one job: {doc}");
    jobs[0]["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .map(|r| {
            (
                r["persona"].as_str().expect("persona").to_owned(),
                r["state"].as_str().expect("state").to_owned(),
                r["played"].as_bool().expect("played"),
                r["actions_taken"].as_i64().expect("actions_taken"),
            )
        })
        .collect()
}

/// The fewest actions the ledger heard of any run (0 before a job exists).
fn least_heard(test: &Test) -> i64 {
    least_heard_at(test, LEDGER)
}

fn least_heard_at(test: &Test, db: &str) -> i64 {
    if !test.path(db).is_file() {
        return 0;
    }
    let Ok(ledger) = Ledger::open(&test.path(db)) else {
        return 0;
    };
    let Ok(view) = ledger.show() else { return 0 };
    view.jobs.first().map_or(0, |job| {
        job.runs.iter().map(|r| r.actions_taken).min().unwrap_or(0)
    })
}

fn charged(doc: &Value) -> i64 {
    doc["accounts"][0]["charged_cents"]
        .as_i64()
        .expect("charged")
}

#[test]
fn play_a_paid_plan_leaves_every_bought_run_reporting_with_its_actions() {
    let test = paid("0", 30);
    test.run(&["plan", "run", "plan.toml", "--yes"]).code(0);
    let doc = ledger(&test);
    for (persona, state, played, actions) in runs(&doc) {
        assert_eq!(
            (state.as_str(), played, actions),
            ("reporting", true, 30),
            "{persona}: {doc}"
        );
    }
}

#[test]
fn play_ctrl_c_mid_play_marks_the_runs_interrupted_and_the_resume_plays_them_once() {
    let test = paid("0.05", 60);
    let run = test.spawn(&["plan", "run", "plan.toml", "--yes"]);
    wait_until(
        "both runs heard by heartbeat",
        Duration::from_secs(30),
        || least_heard(&test) >= 10,
    );
    run.signal(Signal::SIGINT);
    run.wait().code(10);
    let doc = ledger(&test);
    let before = charged(&doc);
    assert!(before > 0, "the job was bought: {doc}");
    for (persona, state, played, actions) in runs(&doc) {
        assert_eq!(
            (state.as_str(), played),
            ("interrupted", true),
            "{persona}: {doc}"
        );
        assert!(
            (10..60).contains(&actions),
            "{persona} stopped mid-play: {doc}"
        );
    }
    test.run(&["plan", "resume"]).code(0);
    let doc = ledger(&test);
    for (persona, state, _, actions) in runs(&doc) {
        assert_eq!(
            (state.as_str(), actions),
            ("reporting", 60),
            "{persona}: {doc}"
        );
    }
    assert_eq!(charged(&doc), before, "the resume charged nothing: {doc}");
}

#[test]
fn play_a_run_canceled_from_outside_stops_its_cell_after_its_turn() {
    let test = paid("0.05", 60);
    let run = test.spawn(&["plan", "run", "plan.toml", "--yes"]);
    wait_until(
        "both runs heard by heartbeat",
        Duration::from_secs(30),
        || least_heard(&test) >= 10,
    );
    // Another client of the account (a dashboard) cancels the kid's run.
    let ledger_file = Ledger::open(&test.path(LEDGER)).expect("the ledger");
    let job = &ledger_file.show().expect("show").jobs[0];
    let kid = job.runs.iter().find(|r| r.persona == "kid").expect("kid");
    ledger_file
        .transition(
            &Token(DEMO_TOKEN.to_owned()),
            &RunRef {
                game: "counter".into(),
                job: job.id.clone(),
                run: kid.id.clone(),
            },
            &TransitionRequest {
                to: RunState::Canceled,
                reason: Some("canceled from the dashboard".into()),
            },
        )
        .expect("cancel");
    let out = run.wait();
    out.code(1);
    assert!(
        out.stdout.contains("the backend asked to cancel this run")
            || out.stderr.contains("the backend asked to cancel this run"),
        "{out}"
    );
    let doc = ledger(&test);
    for (persona, state, _, actions) in runs(&doc) {
        if persona == "kid" {
            assert_eq!(state, "canceled", "{doc}");
            assert!(actions < 60, "the kid's cell stopped early: {doc}");
        } else {
            assert_eq!((state.as_str(), actions), ("reporting", 60), "{doc}");
        }
    }
}

#[test]
fn play_heartbeats_that_fail_are_one_warning_and_the_cells_play_on() {
    let test = paid("0.05", 160);
    let run = test.spawn(&["plan", "run", "plan.toml", "--yes"]);
    wait_until(
        "both runs heard by heartbeat",
        Duration::from_secs(30),
        || least_heard(&test) >= 10,
    );
    // Another writer holds the ledger past its 5 s busy timeout: every
    // heartbeat meanwhile fails, while the games play on.
    let held = rusqlite::Connection::open(test.path(LEDGER)).expect("open the ledger");
    held.execute_batch("BEGIN IMMEDIATE")
        .expect("hold the write lock");
    std::thread::sleep(Duration::from_secs(6));
    held.execute_batch("ROLLBACK").expect("release it");
    drop(held);
    let out = run.wait();
    out.code(0);
    let printed = format!("{}{}", out.stdout, out.stderr);
    // The ledger's writers queue in the process: the run whose heartbeat
    // waited first timed out; the other's may have got through after.
    let warnings: Vec<usize> = ["run-1", "run-2"]
        .iter()
        .map(|cell| {
            printed
                .matches(&format!("a heartbeat for backend run `{cell}` failed"))
                .count()
        })
        .collect();
    assert!(
        warnings.iter().all(|n| *n <= 1) && warnings.iter().sum::<usize>() >= 1,
        "one warning at most per run, and one at least: {out}"
    );
    let doc = ledger(&test);
    for (persona, state, _, actions) in runs(&doc) {
        assert_eq!(
            (state.as_str(), actions),
            ("reporting", 160),
            "{persona}: {doc}"
        );
    }
}

#[test]
fn play_over_serve_a_ctrl_c_interrupts_the_runs_and_the_resume_reports_them() {
    let test = paid("0.05", 60);
    let served = Served::start(&test);
    let token = test
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
    let plan = test.read("plan.toml").replace(
        "[backend]\nkind = \"local\"",
        &format!(
            "[backend]\nkind = \"http\"\nurl = \"{}\"\ntoken = \"{{{{ secret('STUDIO_TOKEN') }}}}\"",
            served.url
        ),
    );
    let test = test.file("plan.toml", plan).env("STUDIO_TOKEN", &token);
    let run = test.spawn(&["plan", "run", "plan.toml", "--yes"]);
    wait_until(
        "both runs heard by heartbeat",
        Duration::from_secs(30),
        || least_heard_at(&test, "served.sqlite") >= 10,
    );
    run.signal(Signal::SIGINT);
    run.wait().code(10);
    let doc = ledger_at(&test, "served.sqlite");
    for (persona, state, played, _) in runs(&doc) {
        assert_eq!(
            (state.as_str(), played),
            ("interrupted", true),
            "{persona}: {doc}"
        );
    }
    test.run(&["plan", "resume"]).code(0);
    let doc = ledger_at(&test, "served.sqlite");
    for (persona, state, _, actions) in runs(&doc) {
        assert_eq!(
            (state.as_str(), actions),
            ("reporting", 60),
            "{persona}: {doc}"
        );
    }
    assert!(
        !test.path(LEDGER).exists(),
        "nothing went to the embedded ledger"
    );
}

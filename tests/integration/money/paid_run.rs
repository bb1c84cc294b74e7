//! End to end: README's paid demo (`plans/demo.toml`)
//! run by the real binary in a temp copy of the repo, against the embedded
//! `local` ledger and against `gameplan serve` on loopback (the plan's
//! backend switched to `http`, its token a secret from the environment).
//! What was bought, played, published and settled is read back from
//! `gameplan ledger show --json` and the ledger file itself, never from
//! what the run says of itself.
//!
//! - The demo completes: one job, every cell played, the balance moved by
//!   exactly the quote minus refunds, one settlement, the aggregate
//!   published; a second run reuses every cell and buys nothing.
//! - Declining the price (no `--yes`, no terminal) exits 10 and leaves the
//!   ledger as it was, byte for byte.
//! - Ctrl-C during play leaves the job open; `plan resume` plays the rest
//!   and settles once.
//! - With `serve`, the token is found nowhere under `.gameplan/`, in the
//!   run's output or in the server's log.

use std::path::PathBuf;
use std::time::Duration;

use gameplan::backend::ledger::DEMO_TOKEN;

use crate::support::{Output, Served, Test, by_step, wait_until};

const DEMO: &str = include_str!("../../../plans/demo.toml");
const VETERAN: &str = include_str!("../../../examples/personas/veteran.md");
const GAME_ID: &str = "demo-maze";
const PLAN: &str = "plans/demo.toml";
const SCOPES: &str = "playtest:write,playtest:model,playtest:upload";
/// The demo's four cells: two personas by two controllers.
const CELLS: usize = 4;

/// A slow game for the interrupt test: a corridor without end (every
/// action changes the observation, so nothing is stuck and no cell ends
/// before its patience), each answer to `act` held 100 ms, so a cell plays
/// for seconds and Ctrl-C lands in the middle of play.
const SLOW_GAME: &str = r#"import json, sys, time

def observation(at):
    return {"text": f"Corridor, step {at}.", "actions": ["left", "right"],
            "state": {"at": at}, "score": 0}

at = 0
for line in iter(sys.stdin.readline, ""):
    req = json.loads(line)
    reply = {"id": req["id"], "ok": True}
    if req["op"] == "hello":
        reply.update(name="corridor", version="1.0.0", protocol=1)
    elif req["op"] == "reset":
        at = 0
        reply["observation"] = observation(at)
    elif req["op"] == "act":
        time.sleep(0.1)
        at += 1 if req["action"] == "right" else -1
        reply.update(observation=observation(at), reward=0, done=False, events=[])
    elif req["op"] == "close":
        print(json.dumps(reply), flush=True)
        break
    print(json.dumps(reply), flush=True)
"#;

/// Which backend the demo runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Where {
    /// The plan as shipped: the embedded ledger in `.gameplan/ledger.sqlite`.
    Local,
    /// `gameplan serve` on loopback over its own ledger file; the plan's
    /// backend is `http` with the token read by `secret()`.
    Serve,
}

/// A temp copy of what the demo reads, set up to run against `place`.
struct Demo {
    test: Test,
    /// The ledger file the backend keeps its money in.
    db: PathBuf,
    /// The bearer token the run presents.
    token: String,
    server: Option<Served>,
}

impl Demo {
    /// The demo as shipped, on the built-in maze.
    fn new(place: Where) -> Demo {
        Demo::with_game(place, None)
    }

    /// The demo with its `[game]` command replaced by `python3 game.py`
    /// holding `game`, when given.
    fn with_game(place: Where, game: Option<&str>) -> Demo {
        let mut plan = DEMO.to_owned();
        let mut test = Test::new().file("examples/personas/veteran.md", VETERAN);
        if let Some(source) = game {
            plan = replace_once(
                &plan,
                "command = [\"builtin:maze\"]",
                "command = [\"python3\", \"game.py\"]",
            );
            test = test.file("game.py", source);
        }
        match place {
            Where::Local => {
                let db = test.path(".gameplan/ledger.sqlite");
                Demo {
                    test: test.file(PLAN, plan),
                    db,
                    token: DEMO_TOKEN.to_owned(),
                    server: None,
                }
            }
            Where::Serve => {
                // The server's ledger lives outside the state dir, as a real
                // server's would; the token is made before it starts.
                let db = test.path("server/ledger.sqlite");
                let db_arg = db.to_str().expect("utf-8 path");
                let made = test.run(&["ledger", "token", "--db", db_arg, "--scopes", SCOPES]);
                made.code(0);
                let token = made.stdout.trim().to_owned();
                assert!(token.starts_with("gp_"), "{made}");
                let server = Served::of(&test.path(""), &db);
                plan = replace_once(
                    &plan,
                    "[backend]\nkind = \"local\"\n",
                    &format!(
                        "[backend]\nkind = \"http\"\nurl = \"{}\"\ntoken = \"{{{{ secret('GAMEPLAN_TOKEN') }}}}\"\n",
                        server.url
                    ),
                );
                Demo {
                    test: test.file(PLAN, plan).env("GAMEPLAN_TOKEN", &token),
                    db,
                    token,
                    server: Some(server),
                }
            }
        }
    }

    fn run(&self, args: &[&str]) -> Output {
        self.test.run(args)
    }

    /// `gameplan ledger show --json` of the backend's ledger file.
    fn ledger(&self) -> serde_json::Value {
        let db = self.db.to_str().expect("utf-8 path");
        self.run(&["ledger", "show", "--json", "--db", db])
            .code(0)
            .json()
    }

    /// The ledger file's bytes (with its write-ahead log, where the last
    /// commits are until a checkpoint moves them into the file).
    fn ledger_bytes(&self) -> Vec<Vec<u8>> {
        ["", "-wal"]
            .iter()
            .map(|suffix| {
                let mut path = self.db.clone().into_os_string();
                path.push(suffix);
                std::fs::read(PathBuf::from(path)).unwrap_or_default()
            })
            .collect()
    }

    /// Every file under `.gameplan/`, as (path, bytes).
    fn state_files(&self) -> Vec<(PathBuf, Vec<u8>)> {
        let mut found = Vec::new();
        let mut dirs = vec![self.test.path(".gameplan")];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                let path = entry.path();
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    dirs.push(path);
                } else if let Ok(bytes) = std::fs::read(&path) {
                    found.push((path, bytes));
                }
            }
        }
        found
    }

    /// The token is nowhere under `.gameplan/`, in `outputs` or in the
    /// server's log.
    fn assert_token_nowhere(&self, outputs: &[&Output]) {
        let token = self.token.as_bytes();
        let files = self.state_files();
        assert!(
            files.iter().any(|(p, _)| p.ends_with("journal.jsonl")),
            "no journal under .gameplan/ to search"
        );
        for (path, bytes) in &files {
            assert!(
                !bytes.windows(token.len()).any(|w| w == token),
                "the token is in {}",
                path.display()
            );
        }
        for out in outputs {
            assert!(
                !out.stdout.contains(&self.token) && !out.stderr.contains(&self.token),
                "the token is in the output of `{}`",
                out.command_line
            );
        }
        if let Some(server) = &self.server {
            let log = server.log().join("\n");
            assert!(log.contains("/v1/"), "the server logged no request: {log}");
            assert!(
                !log.contains(&self.token),
                "the token is in the server's log"
            );
        }
    }
}

#[track_caller]
fn replace_once(text: &str, from: &str, to: &str) -> String {
    assert_eq!(
        text.matches(from).count(),
        1,
        "{from:?} is not in the plan once"
    );
    text.replace(from, to)
}

/// The demo account's balance in a `ledger show --json` document.
#[track_caller]
fn balance(doc: &serde_json::Value) -> i64 {
    let demo = doc["accounts"]
        .as_array()
        .expect("accounts")
        .iter()
        .find(|a| a["id"] == "demo")
        .unwrap_or_else(|| panic!("no demo account: {doc:#}"));
    assert_eq!(demo["adds_up"], true, "{doc:#}");
    demo["balance_cents"].as_i64().expect("cents")
}

/// The ledger's jobs.
#[track_caller]
fn jobs(doc: &serde_json::Value) -> &Vec<serde_json::Value> {
    doc["jobs"].as_array().expect("jobs")
}

/// Every `quote` record (estimate's checkpoint) the run's journal holds:
/// its `estimate_cents`.
fn quoted_cents(test: &Test, run_id: &str) -> Vec<i64> {
    fn walk(value: &serde_json::Value, found: &mut Vec<i64>) {
        match value {
            serde_json::Value::Object(map) => {
                if let Some(cents) = map
                    .get("quote")
                    .and_then(|q| q.get("estimate_cents"))
                    .and_then(serde_json::Value::as_i64)
                {
                    found.push(cents);
                }
                map.values().for_each(|v| walk(v, found));
            }
            serde_json::Value::Array(items) => items.iter().for_each(|v| walk(v, found)),
            _ => {}
        }
    }
    let journal = test.read(&format!(".gameplan/runs/{run_id}/journal.jsonl"));
    let mut found = Vec::new();
    for line in journal.lines() {
        if let Ok(value) = serde_json::from_str::<serde_json::Value>(line) {
            walk(&value, &mut found);
        }
    }
    found
}

/// A paid run's end state: one job of the demo's four cells, settled once,
/// every run played and succeeded, the account charged exactly the quote
/// minus the refund, the aggregate published. Returns the job.
#[track_caller]
fn assert_bought_played_settled(
    demo: &Demo,
    before: &serde_json::Value,
    run_id: &str,
    out: &Output,
) -> serde_json::Value {
    let after = demo.ledger();
    let all = jobs(&after);
    assert_eq!(all.len(), 1, "one job\n{after:#}\n{out}");
    let job = all[0].clone();
    assert_eq!(job["game"], GAME_ID, "{job:#}");
    assert_eq!(job["state"], "settled", "{job:#}\n{out}");
    let settlements = job["settlements"].as_array().expect("settlements");
    assert_eq!(settlements.len(), 1, "settled once: {job:#}");
    let runs = job["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), CELLS, "{job:#}");
    for run in runs {
        assert_eq!(
            run["state"], "succeeded",
            "every cell played: {job:#}\n{out}"
        );
        assert_eq!(run["played"], true, "{job:#}");
    }
    // The price is the quote the run accepted; the balance moved by it,
    // less what was refunded (nothing: every cell played).
    let price = job["price_cents"].as_i64().expect("price");
    let refunded = job["refunded_cents"].as_i64().expect("refund");
    assert!(price > 0, "{job:#}");
    assert_eq!(
        quoted_cents(&demo.test, run_id).last(),
        Some(&price),
        "the job's price is the quote estimate journaled"
    );
    assert_eq!(job["charged_cents"], price, "{job:#}");
    assert_eq!(refunded, 0, "every cell played, nothing refunded: {job:#}");
    assert_eq!(settlements[0]["net_cents"], price - refunded, "{job:#}");
    assert_eq!(
        balance(before) - balance(&after),
        price - refunded,
        "the balance moved by the quote minus refunds\nbefore {before:#}\nafter {after:#}"
    );
    // The aggregate the run wrote is the one the job holds, and every
    // run's files were uploaded.
    for (field, file) in [("md", "aggregate.md"), ("json", "aggregate.json")] {
        let on_disk = std::fs::read(
            demo.test
                .path(&format!(".gameplan/runs/{run_id}/steps/aggregate/{file}")),
        )
        .unwrap_or_else(|e| panic!("{file}: {e}\n{out}"));
        assert_eq!(
            job["aggregate"][field]["sha256"],
            gameplan::reuse::sha256_hex(&on_disk),
            "the published {file} is not the one on disk: {job:#}\n{out}"
        );
    }
    let uploads = job["uploads"].as_array().expect("uploads");
    for run in runs {
        assert!(
            uploads.iter().any(|u| u["run"] == run["id"]),
            "nothing was uploaded for {}: {job:#}",
            run["id"]
        );
    }
    job
}

/// The paid demo, start to end, then once more unchanged.
fn demo_completes_and_a_second_run_buys_nothing(place: Where) {
    let demo = Demo::new(place);
    let before = demo.ledger();
    assert!(jobs(&before).is_empty(), "{before:#}");

    let out = demo.run(&["plan", "run", PLAN, "--yes"]);
    out.code(0);
    let ids = demo.test.run_ids();
    assert_eq!(ids.len(), 1, "{out}");
    let job = assert_bought_played_settled(&demo, &before, &ids[0], &out);
    // It ends with the aggregate's summary and the settlement; on the
    // embedded backend it says whose money that was.
    out.stdout_has("playtest: 4 cells (4 played, 0 reused)");
    if place == Where::Local {
        let said = format!("{}{}", out.stdout, out.stderr);
        assert!(
            said.contains("embedded demo ledger"),
            "the run does not say the money is the embedded demo ledger's\n{out}"
        );
    }
    let after = demo.ledger();

    // Nothing changed: every cell is reused, nothing is bought, and the
    // money steps say so.
    let again = demo.run(&["plan", "run", PLAN, "--yes", "--json"]);
    again.code(0);
    let said = format!("{}{}", again.stdout, again.stderr);
    assert!(said.contains("nothing needs buying"), "{again}");
    let states = by_step(&again.json(), "state");
    for (id, state) in &states {
        if id.starts_with("play[") {
            assert_eq!(state, "reused", "{id}\n{again}");
        }
    }
    assert_eq!(
        states.keys().filter(|id| id.starts_with("play[")).count(),
        CELLS,
        "{again}"
    );
    let unchanged = demo.ledger();
    assert_eq!(jobs(&unchanged).len(), 1, "a second job\n{unchanged:#}");
    assert_eq!(jobs(&unchanged)[0], job, "{unchanged:#}");
    assert_eq!(balance(&unchanged), balance(&after), "{unchanged:#}");

    if place == Where::Serve {
        demo.assert_token_nowhere(&[&out, &again]);
    }
}

#[test]
fn money_demo_completes_and_a_second_run_buys_nothing_local() {
    demo_completes_and_a_second_run_buys_nothing(Where::Local);
}

/// On `serve`, also: the token is nowhere under `.gameplan/` (journal,
/// checkpoints, reports, store, any ledger copy), in the output, or in
/// the server's log.
#[test]
fn money_demo_completes_and_a_second_run_buys_nothing_serve_and_the_token_is_nowhere() {
    demo_completes_and_a_second_run_buys_nothing(Where::Serve);
}

/// No `--yes` and no terminal: the price question is a no. Exit 10,
/// "Nothing was charged", and the ledger is as it was, to the byte.
fn declining_changes_nothing(place: Where) {
    let demo = Demo::new(place);
    let before = demo.ledger();
    let bytes = demo.ledger_bytes();
    assert!(!bytes[0].is_empty(), "ledger show created the ledger");

    let out = demo.run(&["plan", "run", PLAN]);
    out.code(10);
    let said = format!("{}{}", out.stdout, out.stderr);
    assert!(said.contains("Nothing was charged"), "{out}");
    assert_eq!(demo.ledger_bytes(), bytes, "the ledger file changed\n{out}");
    assert_eq!(demo.ledger(), before, "the ledger changed\n{out}");
    if place == Where::Serve {
        demo.assert_token_nowhere(&[&out]);
    }
}

#[test]
fn money_declining_exits_10_and_leaves_the_ledger_unchanged_local() {
    declining_changes_nothing(Where::Local);
}

#[test]
fn money_declining_exits_10_and_leaves_the_ledger_unchanged_serve() {
    declining_changes_nothing(Where::Serve);
}

/// Ctrl-C while the cells play (a slow game): the run exits 10 with its
/// job open and unsettled; `plan resume` plays what was not played and
/// finish settles once.
fn interrupted_demo_resumes_and_settles_once(place: Where) {
    let demo = Demo::with_game(place, Some(SLOW_GAME));
    let before = demo.ledger();

    let spawned = demo.test.spawn(&["plan", "run", PLAN, "--yes"]);
    wait_until("a cell to start playing", Duration::from_secs(45), || {
        demo.test.run_ids().first().is_some_and(|id| {
            demo.test
                .read(&format!(".gameplan/runs/{id}/journal.jsonl"))
                .contains("\"event\":\"step_started\",\"step\":\"play[")
        })
    });
    std::thread::sleep(Duration::from_millis(700));
    spawned.signal(nix::sys::signal::Signal::SIGINT);
    let stopped = spawned.wait();
    stopped.code(10);
    let ids = demo.test.run_ids();
    assert_eq!(ids.len(), 1, "{stopped}");

    let open = demo.ledger();
    let all = jobs(&open);
    assert_eq!(all.len(), 1, "the job was bought\n{open:#}\n{stopped}");
    assert_eq!(all[0]["state"], "open", "finish did not run\n{open:#}");
    assert_eq!(all[0]["settlements"], serde_json::json!([]), "{open:#}");
    assert!(
        all[0]["runs"]
            .as_array()
            .expect("runs")
            .iter()
            .any(|r| r["state"] != "succeeded"),
        "the interrupt came after every cell had played: the test proves nothing\n{open:#}"
    );
    let charged = balance(&before) - balance(&open);

    let resumed = demo.run(&["plan", "resume"]);
    resumed.code(0);
    assert_eq!(demo.test.run_ids(), ids, "the resume is the same run");
    let job = assert_bought_played_settled(&demo, &before, &ids[0], &resumed);
    assert_eq!(
        charged,
        job["price_cents"].as_i64().expect("price"),
        "the resume charged nothing more"
    );
    let journal = demo
        .test
        .read(&format!(".gameplan/runs/{}/journal.jsonl", ids[0]));
    assert_eq!(
        journal
            .matches("\"event\":\"step_finished\",\"step\":\"finish\"")
            .count(),
        1,
        "finish ran once"
    );
    if place == Where::Serve {
        demo.assert_token_nowhere(&[&stopped, &resumed]);
    }
}

#[test]
fn money_interrupted_demo_resumes_and_settles_once_local() {
    interrupted_demo_resumes_and_settles_once(Where::Local);
}

#[test]
fn money_interrupted_demo_resumes_and_settles_once_serve() {
    interrupted_demo_resumes_and_settles_once(Where::Serve);
}

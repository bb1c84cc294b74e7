//! `register` and `finish`: the job bought once and settled once,
//! on the embedded ledger, through failures, an interrupt and `kill -9` at
//! every boundary of both calls (`GAMEPLAN_CRASH_AT`), and once over
//! `gameplan serve` on loopback. What moved is read back with `gameplan
//! ledger show --json`; the key journaled, from the run's journal.

use std::time::Duration;

use serde_json::Value;

use crate::support::{Served, Test, by_step, wait_until};

const COINS: &str = include_str!("../../../examples/games/coins.py");

/// A paid plan on the local backend: estimate → register → MIDDLE → finish
/// (always), over two maze cells (`kid` with `standard` and `jev`).
fn paid(middle: &str, finish_needs: &str) -> String {
    format!(
        r#"version = 1
name = "paid"
controllers = ["standard", "jev"]

[backend]
kind = "local"

[game]
id = "paid-maze"
command = ["builtin:maze"]
action_timeout = 10

[budget]
max_cents = 1000
max_actions = 12

[[personas]]
slug = "kid"
card = "Clicks everything."
player = {{ kind = "explorer", seed = 1 }}
patience = 12

[[steps]]
id = "estimate"
kind = "estimate"

[[steps]]
id = "register"
kind = "register"
needs = ["estimate"]
{middle}
[[steps]]
id = "finish"
kind = "finish"
needs = [{finish_needs}]
always = true
"#
    )
}

/// The two cells play after register.
const PLAY: &str = r#"
[[steps]]
id = "play"
kind = "play"
needs = ["register"]
matrix = { persona = ["kid"], controller = ["standard", "jev"] }
"#;

/// estimate → register → play → finish.
fn played() -> String {
    paid(PLAY, "\"play\"")
}

fn ledger(t: &Test) -> Value {
    t.run(&["ledger", "show", "--json"]).code(0).json()
}

fn demo(doc: &Value) -> &Value {
    doc["accounts"]
        .as_array()
        .and_then(|a| a.iter().find(|a| a["id"] == "demo"))
        .unwrap_or_else(|| panic!("no demo account in {doc}"))
}

fn jobs(doc: &Value) -> &Vec<Value> {
    doc["jobs"].as_array().expect("jobs")
}

/// The one job the ledger holds, settled once, and the account's sums
/// agree with it: charged once, refunded at most once, the balance moved
/// by exactly the net.
#[track_caller]
fn one_job_settled_once(doc: &Value) -> &Value {
    let jobs = jobs(doc);
    assert_eq!(jobs.len(), 1, "exactly one job: {doc}");
    let job = &jobs[0];
    assert_eq!(job["state"], "settled", "{doc}");
    let settlements = job["settlements"].as_array().expect("settlements");
    assert_eq!(settlements.len(), 1, "one settlement: {doc}");
    let account = demo(doc);
    assert_eq!(account["charged_cents"], job["charged_cents"], "{doc}");
    assert_eq!(job["charged_cents"], job["price_cents"], "{doc}");
    assert_eq!(account["refunded_cents"], job["refunded_cents"], "{doc}");
    let net = job["charged_cents"].as_i64().expect("charged")
        - job["refunded_cents"].as_i64().expect("refunded");
    assert_eq!(
        account["balance_cents"].as_i64(),
        Some(10_000 - net),
        "the balance moved by the net: {doc}"
    );
    assert_eq!(account["adds_up"], true, "{doc}");
    job
}

/// The idempotency keys the run journaled for `step`'s request.
fn journaled_keys(t: &Test, step: &str) -> Vec<String> {
    let id = t.run_ids().pop().expect("a run");
    let journal = t.read(&format!(".gameplan/runs/{id}/journal.jsonl"));
    journal
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|record| record.to_string().contains(&format!("\"{step}\"")))
        .filter_map(|record| find_key(&record))
        .collect()
}

fn find_key(value: &Value) -> Option<String> {
    match value {
        Value::Object(map) => map
            .get("idempotency_key")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or_else(|| map.values().find_map(find_key)),
        Value::Array(items) => items.iter().find_map(find_key),
        _ => None,
    }
}

/// Runs `args` with `GAMEPLAN_CRASH_AT=at`: gameplan must die by SIGKILL.
/// Returns the test without the variable, for the resume.
fn crash(t: Test, at: &str, args: &[&str]) -> Test {
    let t = t.env("GAMEPLAN_CRASH_AT", at);
    let mut spawned = t.spawn(args);
    wait_until(
        &format!("gameplan to die at {at}"),
        Duration::from_secs(60),
        || !spawned.is_running(),
    );
    let out = spawned.kill9();
    assert_eq!(out.code, None, "gameplan was not killed at {at}\n{out}");
    t.without_env("GAMEPLAN_CRASH_AT")
}

#[test]
fn register_buys_one_job_and_finish_settles_it_once() {
    let t = Test::new().file("plan.toml", played());
    let out = t.run(&["plan", "run", "plan.toml", "--yes"]);
    out.code(0)
        .stderr_has("bought job ")
        .stderr_has(": 2 runs, ")
        .stderr_has("settled job ")
        .stdout_has("settled job ");
    let doc = ledger(&t);
    let job = one_job_settled_once(&doc);
    assert_eq!(job["runs"].as_array().map(Vec::len), Some(2), "{doc}");
    let keys = journaled_keys(&t, "register");
    assert!(!keys.is_empty(), "register journaled its key");
    assert_eq!(job["idempotency_key"].as_str(), Some(keys[0].as_str()));
    let id = t.run_ids()[0].clone();
    let settlement: Value =
        serde_json::from_str(&t.read(&format!(".gameplan/runs/{id}/steps/finish/settlement.json")))
            .expect("settlement.json");
    assert_eq!(settlement["settlement"]["job_id"], job["id"]);
    assert_eq!(settlement["replayed"], false);
}

#[test]
fn finish_after_a_failure_refunds_every_run_that_never_played() {
    // A step between register and play fails: the cells are skipped, and
    // finish (always) settles the job, refunding both runs.
    let middle = format!(
        "\n[[steps]]\nid = \"build\"\nkind = \"command\"\nrun = \"exit 1\"\nneeds = [\"register\"]\n{}",
        PLAY.replace("needs = [\"register\"]", "needs = [\"build\"]")
    );
    let t = Test::new().file("plan.toml", paid(&middle, "\"play\""));
    let out = t.run(&["plan", "run", "plan.toml", "--yes", "--json"]);
    out.code(1);
    let states = by_step(&out.json(), "state");
    assert_eq!(states["build"], "failed", "{out}");
    assert_eq!(states["play[kid,standard]"], "skipped", "{out}");
    assert_eq!(states["finish"], "succeeded", "{out}");
    out.stderr_has("for 2 unplayed runs, net $0.00");
    let doc = ledger(&t);
    let job = one_job_settled_once(&doc);
    assert_eq!(job["refunded_cents"], job["charged_cents"], "{doc}");
    assert_eq!(demo(&doc)["balance_cents"], 10_000, "{doc}");
}

#[test]
fn register_with_every_cell_reused_buys_nothing() {
    let t = Test::new().file("plan.toml", played());
    t.run(&["plan", "run", "plan.toml", "--yes"]).code(0);
    let before = ledger(&t);
    let out = t.run(&["plan", "run", "plan.toml", "--yes"]);
    out.code(0)
        .stderr_has("nothing to buy: every cell is reused")
        .stderr_has("nothing to settle: no job was bought");
    let after = ledger(&t);
    assert_eq!(jobs(&after).len(), 1, "no second job: {after}");
    assert_eq!(
        demo(&before)["balance_cents"],
        demo(&after)["balance_cents"]
    );
}

#[test]
fn register_without_an_estimate_fails_and_finish_settles_nothing() {
    let plan = r#"version = 1
name = "alone"

[backend]
kind = "local"

[game]
id = "paid-maze"
command = ["builtin:maze"]

[[steps]]
id = "register"
kind = "register"

[[steps]]
id = "finish"
kind = "finish"
needs = ["register"]
always = true
"#;
    let t = Test::new().file("plan.toml", plan);
    let out = t.run(&["plan", "run", "plan.toml", "--json"]);
    out.code(1)
        .stderr_has("register needs an estimate step before it")
        .stderr_has("nothing to settle: no job was bought");
    assert_eq!(by_step(&out.json(), "state")["finish"], "succeeded");
    assert!(jobs(&ledger(&t)).is_empty());
}

#[test]
fn register_refused_for_a_short_balance_exits_3_and_charges_nothing() {
    // Between the accepted quote and the purchase the balance drops to 10¢
    // (another spend of the account's): register is refused, exit 3.
    let drain = r#"
[[steps]]
id = "spend"
kind = "command"
needs = ["estimate"]
run = "python3 -c \"import sqlite3; c = sqlite3.connect('.gameplan/ledger.sqlite'); c.execute('UPDATE accounts SET balance_cents = 10'); c.commit()\""
"#;
    let plan = played().replace(
        "id = \"register\"\nkind = \"register\"\nneeds = [\"estimate\"]",
        &format!("id = \"register\"\nkind = \"register\"\nneeds = [\"spend\"]\n{drain}"),
    );
    let t = Test::new().file("plan.toml", plan);
    let out = t.run(&["plan", "run", "plan.toml", "--yes", "--json"]);
    out.code(3)
        .stderr_has("insufficient_balance")
        .stderr_has("Nothing was charged. The balance ($0.10) does not cover the price");
    let states = by_step(&out.json(), "state");
    assert_eq!(states["play[kid,standard]"], "pending", "{out}");
    let doc = ledger(&t);
    assert!(jobs(&doc).is_empty(), "no job: {doc}");
    assert_eq!(demo(&doc)["balance_cents"], 10, "{doc}");
    assert_eq!(demo(&doc)["charged_cents"], 0, "{doc}");
}

/// kill -9 at `call:boundary`, then `plan resume`: one job, one charge, one
/// settlement, under the one key journaled before the first attempt.
fn killed_then_resumed(call: &str, boundary: &str) {
    let at = format!("{call}:{boundary}");
    let t = crash(
        Test::new().file("plan.toml", played()),
        &at,
        &["plan", "run", "plan.toml", "--yes"],
    );
    let keys_before = journaled_keys(&t, call);
    assert_eq!(keys_before.len(), 1, "{at}: the key was journaled once");
    let resumed = t.run(&["plan", "resume", "--yes"]);
    resumed.code(0).stderr_has("settled job ");
    let doc = ledger(&t);
    let job = one_job_settled_once(&doc);
    let keys: Vec<String> = journaled_keys(&t, call);
    assert!(
        keys.iter().all(|k| *k == keys_before[0]),
        "{at}: one key across attempts: {keys:?}"
    );
    if call == "register" {
        assert_eq!(job["idempotency_key"].as_str(), Some(keys[0].as_str()));
    }
    assert_eq!(t.run_ids().len(), 1, "{at}: resumed, not started anew");
}

#[test]
fn register_killed_at_each_boundary_buys_one_job_on_resume() {
    for boundary in [
        "key_journaled",
        "request_sent",
        "response_received",
        "response_journaled",
    ] {
        killed_then_resumed("register", boundary);
    }
}

#[test]
fn finish_killed_at_each_boundary_settles_once_on_resume() {
    for boundary in [
        "key_journaled",
        "request_sent",
        "response_received",
        "response_journaled",
    ] {
        killed_then_resumed("finish", boundary);
    }
}

#[test]
fn finish_resumed_after_its_settlement_was_journaled_calls_nothing_more() {
    let t = crash(
        Test::new().file("plan.toml", played()),
        "finish:response_journaled",
        &["plan", "run", "plan.toml", "--yes"],
    );
    let before = ledger(&t);
    let resumed = t.run(&["plan", "resume", "--yes"]);
    resumed.code(0).stderr_has("settled job ");
    assert!(
        !resumed.stderr.contains("settled earlier"),
        "the resume reprinted the journaled settlement, it did not ask again\n{resumed}"
    );
    let after = ledger(&t);
    one_job_settled_once(&after);
    assert_eq!(
        demo(&before)["refunded_cents"],
        demo(&after)["refunded_cents"],
        "nothing refunded twice"
    );
}

#[test]
fn finish_killed_after_the_ledger_settled_gets_the_same_settlement_and_refunds_nothing() {
    let t = crash(
        Test::new().file("plan.toml", played()),
        "finish:request_sent",
        &["plan", "run", "plan.toml", "--yes"],
    );
    let before = ledger(&t);
    assert_eq!(jobs(&before)[0]["state"], "settled", "the ledger settled");
    let resumed = t.run(&["plan", "resume", "--yes"]);
    resumed
        .code(0)
        .stderr_has("(settled earlier: this finish refunded nothing more)");
    let after = ledger(&t);
    one_job_settled_once(&after);
    assert_eq!(
        demo(&before)["balance_cents"],
        demo(&after)["balance_cents"]
    );
}

#[test]
fn finish_does_not_run_on_an_interrupt_and_the_resume_settles_once() {
    let slow = COINS.replace(
        "        req = json.loads(line)",
        "        import time; time.sleep(0.05)\n        req = json.loads(line)",
    );
    let plan = played()
        .replace(
            "command = [\"builtin:maze\"]",
            "command = [\"python3\", \"slow.py\"]",
        )
        .replace(
            "player = { kind = \"explorer\", seed = 1 }\npatience = 12",
            "player = { kind = \"random\", seed = 1 }\npatience = 60",
        )
        .replace("max_actions = 12", "max_actions = 60");
    let t = Test::new().file("plan.toml", plan).file("slow.py", slow);
    let spawned = t.spawn(&["plan", "run", "plan.toml", "--yes", "--json"]);
    wait_until("a cell to start", Duration::from_secs(60), || {
        t.run_ids().first().is_some_and(|id| {
            std::fs::read_to_string(t.path(&format!(".gameplan/runs/{id}/journal.jsonl")))
                .is_ok_and(|j| {
                    j.lines()
                        .any(|l| l.contains("\"step_started\"") && l.contains("play["))
                })
        })
    });
    std::thread::sleep(Duration::from_millis(300));
    spawned.signal(nix::sys::signal::Signal::SIGINT);
    let out = spawned.wait();
    out.code(10);
    let states = by_step(&out.json(), "state");
    assert_eq!(states["register"], "succeeded", "{out}");
    assert_eq!(states["finish"], "pending", "finish did not run\n{out}");
    let doc = ledger(&t);
    assert_eq!(jobs(&doc).len(), 1, "{doc}");
    assert_eq!(jobs(&doc)[0]["state"], "open", "the job stays open: {doc}");

    let resumed = t.run(&["plan", "resume", "--yes", "--json"]);
    resumed.code(0);
    assert_eq!(by_step(&resumed.json(), "state")["finish"], "succeeded");
    one_job_settled_once(&ledger(&t));
}

#[test]
fn register_and_finish_over_serve_buy_once_through_a_kill_and_keep_the_token_out() {
    let t = Test::new();
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
    let plan = played().replace(
        "[backend]\nkind = \"local\"",
        &format!(
            "[backend]\nkind = \"http\"\nurl = \"{}\"\ntoken = \"{{{{ secret('STUDIO_TOKEN') }}}}\"",
            served.url
        ),
    );
    let t = t.file("plan.toml", plan).env("STUDIO_TOKEN", &token);
    let t = crash(
        t,
        "register:response_received",
        &["plan", "run", "plan.toml", "--yes"],
    );
    let resumed = t.run(&["plan", "resume", "--yes"]);
    resumed
        .code(0)
        .stderr_has("(already bought: the journaled key was replayed")
        .stdout_has("settled job ");
    let doc = t
        .run(&["ledger", "show", "--json", "--db", "served.sqlite"])
        .code(0)
        .json();
    let job = one_job_settled_once(&doc);
    assert_eq!(
        job["idempotency_key"].as_str(),
        journaled_keys(&t, "register").first().map(String::as_str)
    );
    assert!(
        !t.path(".gameplan/ledger.sqlite").exists(),
        "nothing went to the embedded ledger"
    );
    assert!(!resumed.stdout.contains(&token) && !resumed.stderr.contains(&token));
    let mut stack = vec![t.path(".gameplan")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read dir").flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let bytes = std::fs::read(&path).unwrap_or_default();
                assert!(
                    !String::from_utf8_lossy(&bytes).contains(&token),
                    "the token is in {}",
                    path.display()
                );
            }
        }
    }
}

/// A loopback proxy in front of `upstream` that forwards each request (one
/// per connection) and, while `drops` is above zero, loses the answer to
/// a register (`POST …/jobs`) after the server processed it. It records the
/// Idempotency-Key of every register it saw.
struct Lossy {
    url: String,
    drops: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    keys: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Lossy {
    fn start(upstream: &str, drops: usize) -> Lossy {
        use std::io::{Read as _, Write as _};
        use std::sync::atomic::Ordering;
        use std::sync::{Arc, Mutex, atomic::AtomicUsize};
        fn message(stream: &mut std::net::TcpStream) -> Option<(String, Vec<u8>)> {
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") {
                if stream.read(&mut byte).ok()? == 0 {
                    return None;
                }
                head.push(byte[0]);
            }
            let head = String::from_utf8(head).ok()?;
            let length = header(&head, "content-length").map_or(0, |v| v.parse().unwrap_or(0));
            let mut body = vec![0u8; length];
            stream.read_exact(&mut body).ok()?;
            Some((head, body))
        }
        fn header(head: &str, name: &str) -> Option<String> {
            head.lines().skip(1).find_map(|line| {
                let (key, value) = line.split_once(':')?;
                key.trim()
                    .eq_ignore_ascii_case(name)
                    .then(|| value.trim().to_owned())
            })
        }
        fn closing(head: &str) -> String {
            let lines: Vec<&str> = head
                .trim_end()
                .lines()
                .filter(|l| !l.to_ascii_lowercase().starts_with("connection:"))
                .chain(["connection: close"])
                .collect();
            format!("{}\r\n\r\n", lines.join("\r\n"))
        }
        let upstream = upstream.trim_start_matches("http://").to_owned();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind proxy");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let drops = Arc::new(AtomicUsize::new(drops));
        let keys = Arc::new(Mutex::new(Vec::new()));
        let (drops_in, keys_in) = (Arc::clone(&drops), Arc::clone(&keys));
        std::thread::spawn(move || {
            for mut client in listener.incoming().map_while(Result::ok) {
                let (upstream, drops, keys) = (
                    upstream.clone(),
                    Arc::clone(&drops_in),
                    Arc::clone(&keys_in),
                );
                std::thread::spawn(move || {
                    let Some((head, body)) = message(&mut client) else {
                        return;
                    };
                    let register = head.starts_with("POST ")
                        && head.lines().next().is_some_and(|l| l.contains("/jobs "));
                    if register {
                        keys.lock()
                            .expect("keys")
                            .push(header(&head, "idempotency-key").unwrap_or_default());
                    }
                    let mut server =
                        std::net::TcpStream::connect(&upstream).expect("connect to serve");
                    server.write_all(closing(&head).as_bytes()).expect("head");
                    server.write_all(&body).expect("body");
                    let (answer_head, answer_body) = message(&mut server).expect("an answer");
                    let lose = register
                        && drops
                            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                            .is_ok();
                    if !lose {
                        let _ = client.write_all(closing(&answer_head).as_bytes());
                        let _ = client.write_all(&answer_body);
                    }
                });
            }
        });
        Lossy { url, drops, keys }
    }
}

#[test]
fn register_whose_answers_are_lost_leaves_the_run_open_and_the_resume_buys_once() {
    let t = Test::new();
    let served = Served::start(&t);
    // Every attempt of the first run loses its answer (the http backend
    // tries a bounded number of times): the charge happened, the step
    // cannot know it.
    let proxy = Lossy::start(&served.url, usize::MAX);
    let plan = played().replace(
        "[backend]\nkind = \"local\"",
        &format!(
            "[backend]\nkind = \"http\"\nurl = \"{}\"\ntoken = \"{}\"",
            proxy.url, served.token
        ),
    );
    let t = t.file("plan.toml", plan);
    let first = t.run(&["plan", "run", "plan.toml", "--yes", "--json"]);
    first.code(1).stderr_has("no certain answer came");
    let states = by_step(&first.json(), "state");
    assert_eq!(states["register"], "uncertain", "{first}");
    assert_eq!(
        states["play[kid,standard]"], "pending",
        "nothing played\n{first}"
    );
    assert_eq!(states["finish"], "pending", "{first}");
    let attempts = proxy.keys.lock().expect("keys").len();
    assert!(attempts > 1, "the backend tried again: {attempts}");

    proxy.drops.store(0, std::sync::atomic::Ordering::SeqCst);
    let resumed = t.run(&["plan", "resume", "--yes"]);
    resumed
        .code(0)
        .stderr_has("(already bought: the journaled key was replayed")
        .stdout_has("settled job ");
    let keys = proxy.keys.lock().expect("keys").clone();
    assert!(keys.len() > attempts, "{keys:?}");
    assert!(keys.iter().all(|k| *k == keys[0]), "one key: {keys:?}");
    let doc = t
        .run(&["ledger", "show", "--json", "--db", "served.sqlite"])
        .code(0)
        .json();
    let job = one_job_settled_once(&doc);
    assert_eq!(job["idempotency_key"].as_str(), Some(keys[0].as_str()));
}

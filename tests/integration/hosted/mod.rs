//! Hosted playtests against a real `gameplan serve --executor local` on
//! loopback: the quote charges nothing, `hosted run --yes --wait` charges
//! the quote once and brings the report home, a build whose game does not
//! start fails refunded, a cancel refunds what never started, a client
//! killed after its admission finds its playtest, and a server killed
//! mid-run takes it up again without charging twice. The same over Ray:
//! `ray::hosted`.

use std::time::Duration;

use serde_json::Value;

use crate::support::{Served, Test, slow_coins, wait_until};

/// A free coins plan: 2 seeds × 2 controllers, one persona.
pub const PLAN: &str = r#"version = 1
name = "coins"
controllers = ["standard", "rune"]

[game]
id = "coins"
driver = "stdio"
command = ["python3", "game/coins.py"]
inputs = ["game/coins.py"]

[budget]
max_actions = 12

[[personas]]
slug = "collector"
card = "Wants every coin."
player = { kind = "random", seed = 3 }

[[steps]]
id = "play"
kind = "play"
matrix = { persona = "*", controller = "*", seed = [1, 2] }

[[steps]]
id = "aggregate"
kind = "aggregate"
needs = ["play"]
"#;

/// A test repo with the plan and coins at `delay` seconds an action, and
/// a server playing on the local executor (its builds in `server/`).
pub fn hosted(delay: f64, flags: &[&str]) -> (Test, Served) {
    let t = Test::new()
        .file("plan.toml", PLAN)
        .file("game/coins.py", slow_coins(delay));
    serving(t, flags)
}

/// The repo `t` and a server playing on the local executor for it.
fn serving(t: Test, flags: &[&str]) -> (Test, Served) {
    let mut all = vec!["--executor", "local", "--builds"];
    let builds = t.path("server").display().to_string();
    all.push(&builds);
    all.extend_from_slice(flags);
    let server = Served::with_flags_and_token(&t.path(""), &t.path("served.sqlite"), &all);
    let t = t
        .env("GAMEPLAN_SERVER", &server.url)
        .env("GAMEPLAN_TOKEN", &server.token);
    (t, server)
}

/// The demo account's balance in `ledger show --json`.
pub fn balance(ledger: &Value) -> i64 {
    ledger["accounts"]
        .as_array()
        .expect("accounts")
        .iter()
        .find(|a| a["id"] == "demo")
        .and_then(|a| a["balance_cents"].as_i64())
        .expect("the demo account")
}

/// The ledger's jobs.
pub fn jobs(ledger: &Value) -> Vec<Value> {
    ledger["jobs"].as_array().cloned().unwrap_or_default()
}

fn status(t: &Test, args: &[&str]) -> Value {
    let mut all = vec!["hosted", "status", "--json"];
    all.extend_from_slice(args);
    t.run(&all).json()
}

#[test]
fn a_hosted_run_charges_its_quote_once_plays_every_cell_and_brings_the_report_home() {
    let (t, server) = hosted(0.0, &[]);
    let before = balance(&server.ledger(&t));
    let quoted = t
        .run(&["hosted", "quote", "plan.toml", "--output", "quote.json"])
        .code(0)
        .stdout_has("hosted compute (controller rune)")
        .stdout_has("hosted compute (controller standard)")
        .stdout_has("refunded in full")
        .stderr_has("uploaded")
        .stdout
        .clone();
    assert!(quoted.contains("quote for 4 cells"), "{quoted}");
    assert_eq!(
        balance(&server.ledger(&t)),
        before,
        "a quote charges nothing"
    );
    let quote: Value = serde_json::from_str(&t.read("quote.json")).expect("quote.json");
    let price = quote["estimate_cents"].as_i64().expect("a price");
    assert_eq!(price, 4 * (25 + 20), "4 short cells, each with its compute");

    let ran = t.run(&["hosted", "run", "quote.json", "--yes", "--wait", "--json"]);
    let playtest = ran.code(0).json();
    assert_eq!(playtest["phase"], "report_ready", "{ran}");
    assert_eq!(playtest["charged_cents"], price);
    assert_eq!(playtest["refunded_cents"], 0);
    let cells = playtest["cells"].as_array().expect("cells");
    assert_eq!(cells.len(), 4);
    assert!(
        cells
            .iter()
            .all(|c| c["played"] == true && c["state"] == "succeeded"),
        "{cells:?}"
    );
    assert!(
        playtest["settlement"]["settled_at"].is_string(),
        "settled: {playtest}"
    );
    let id = playtest["id"].as_str().expect("an id");
    let page = t.read(&format!(".gameplan/hosted/{id}/report.html"));
    assert!(
        page.contains("<html") && page.contains("collector"),
        "the report page came home"
    );
    assert!(
        t.path(&format!(".gameplan/hosted/{id}/aggregate.json"))
            .is_file(),
        "the aggregate came home"
    );
    assert_eq!(balance(&server.ledger(&t)), before - price);

    // The same quote again is the same admission: nothing more is charged.
    let again = t.run(&["hosted", "run", "quote.json", "--yes", "--json"]);
    again.code(0).stderr_has("same key");
    assert_eq!(again.json()["id"], id);
    let ledger = server.ledger(&t);
    assert_eq!(jobs(&ledger).len(), 1, "one job: {ledger}");
    assert_eq!(balance(&ledger), before - price, "charged once");
}

#[test]
fn a_build_whose_game_does_not_start_fails_and_every_cell_is_refunded() {
    let (t, server) = hosted(0.0, &[]);
    t.write(
        "plan.toml",
        PLAN.replace("game/coins.py\"]\ninputs", "game/missing.py\"]\ninputs"),
    );
    let before = balance(&server.ledger(&t));
    let ran = t.run(&["hosted", "run", "plan.toml", "--yes", "--wait", "--json"]);
    let playtest = ran.code(1).json();
    assert_eq!(playtest["phase"], "failed", "{ran}");
    assert!(
        playtest["reason"]
            .as_str()
            .unwrap_or("")
            .contains("no cell played"),
        "{playtest}"
    );
    let charged = playtest["charged_cents"].as_i64().expect("charged");
    assert!(charged > 0);
    assert_eq!(
        playtest["refunded_cents"], charged,
        "the accepted rule: refunded in full"
    );
    assert_eq!(balance(&server.ledger(&t)), before, "nothing kept");
    let id = playtest["id"].as_str().expect("an id");
    assert!(
        !t.path(&format!("server/work/{id}/build")).exists(),
        "a playtest that never played keeps no copy of its build"
    );
}

#[test]
fn a_cancel_mid_run_ends_canceled_and_refunds_every_cell_that_never_played() {
    let (t, server) = hosted(0.5, &[]);
    let admitted = t
        .run(&["hosted", "run", "plan.toml", "--yes", "--json"])
        .code(0)
        .json();
    let id = admitted["id"].as_str().expect("an id").to_owned();
    wait_until("the playtest runs", Duration::from_secs(60), || {
        status(&t, &[&id])["phase"] == "running"
    });
    std::thread::sleep(Duration::from_secs(2));
    t.run(&["hosted", "cancel", &id, "--yes"]).code(0);
    let ended = t.run(&["hosted", "status", &id, "--wait", "--json"]);
    let playtest = ended.code(10).json();
    assert_eq!(playtest["phase"], "canceled", "{ended}");
    let cells = playtest["cells"].as_array().expect("cells");
    let unplayed = cells.iter().filter(|c| c["played"] == false).count();
    assert!(
        unplayed > 0,
        "the cancel came before every cell played: {cells:?}"
    );
    let per_cell = 25 + 20;
    assert_eq!(
        playtest["refunded_cents"].as_i64(),
        Some(per_cell * i64::try_from(unplayed).expect("few")),
        "every cell that never played is refunded, no other: {playtest}"
    );
    let refunded_runs = playtest["settlement"]["refunded_runs"]
        .as_array()
        .expect("settled");
    assert_eq!(refunded_runs.len(), unplayed);
    drop(server);
}

#[test]
fn a_client_killed_after_its_admission_finds_the_playtest_with_status() {
    let (t, server) = hosted(0.2, &[]);
    t.run(&["hosted", "quote", "plan.toml", "--output", "quote.json"])
        .code(0);
    let client = t.spawn(&["hosted", "run", "quote.json", "--yes", "--wait"]);
    server.log_once(|log| {
        log.iter()
            .any(|l| l.starts_with("POST /v1/games/coins/hosted 200"))
    });
    client.kill9();
    let found = t.run(&["hosted", "status", "--wait", "--json"]);
    let playtest = found.code(0).json();
    assert_eq!(playtest["phase"], "report_ready", "{found}");
    let ledger = server.ledger(&t);
    assert_eq!(jobs(&ledger).len(), 1, "admitted once: {ledger}");
}

#[test]
fn a_server_killed_mid_run_takes_the_playtest_up_again_and_never_charges_twice() {
    let (t, mut server) = hosted(0.3, &[]);
    let before = balance(&server.ledger(&t));
    let admitted = t
        .run(&["hosted", "run", "plan.toml", "--yes", "--json"])
        .code(0)
        .json();
    let id = admitted["id"].as_str().expect("an id").to_owned();
    let price = admitted["charged_cents"].as_i64().expect("charged");
    wait_until("the playtest runs", Duration::from_secs(60), || {
        status(&t, &[&id])["phase"] == "running"
    });
    server.kill9();
    let builds = t.path("server").display().to_string();
    let server = Served::with_flags(
        &t.path(""),
        &t.path("served.sqlite"),
        &["--executor", "local", "--builds", &builds],
    );
    let t = t.env("GAMEPLAN_SERVER", &server.url);
    let ended = t.run(&["hosted", "status", &id, "--wait", "--json"]);
    let playtest = ended.code(0).json();
    assert_eq!(playtest["phase"], "report_ready", "{ended}");
    let ledger = server.ledger(&t);
    assert_eq!(jobs(&ledger).len(), 1, "one job: {ledger}");
    assert_eq!(balance(&ledger), before - price, "charged once: {ledger}");
    let settlements = jobs(&ledger)[0]["settlements"].clone();
    assert!(
        settlements.as_array().map_or(1, Vec::len) == 1 || settlements.is_object(),
        "settled once: {settlements}"
    );
}

#[test]
fn an_admission_whose_answer_never_came_is_sent_again_under_its_key_and_charged_once() {
    let t = Test::new()
        .file("plan.toml", PLAN)
        .file("game/coins.py", slow_coins(0.0));
    let builds = t.path("server").display().to_string();
    let flags = ["--demo", "--executor", "local", "--builds", &builds];
    let db = t.path("served.sqlite");
    // The first server is killed by its own admission, once committed.
    let mut first = Served::crashing_at(&t.path(""), &db, &flags, "hosted_admit:request_sent");
    let token = crate::support::token_of(&t.path(""), &db);
    let t = t
        .env("GAMEPLAN_SERVER", &first.url)
        .env("GAMEPLAN_TOKEN", &token);
    t.run(&["hosted", "quote", "plan.toml", "--output", "quote.json"])
        .code(0);
    t.run(&["hosted", "run", "quote.json", "--yes"])
        .code(1)
        .stderr_has("answer never came")
        .stderr_has("same key (never charged twice)");
    first.kill9();
    let server = Served::with_flags(&t.path(""), &db, &flags);
    let t = t.env("GAMEPLAN_SERVER", &server.url);
    let before_replay = balance(&server.ledger(&t));
    // Found by its key, without sending anything that charges.
    let found = status(&t, &[]);
    assert_eq!(found["id"], "hosted-1", "{found}");
    let ran = t.run(&["hosted", "run", "quote.json", "--yes", "--wait", "--json"]);
    ran.code(0).stderr_has("sent before under key");
    assert_eq!(ran.json()["phase"], "report_ready");
    let ledger = server.ledger(&t);
    assert_eq!(jobs(&ledger).len(), 1, "admitted once: {ledger}");
    assert_eq!(
        balance(&ledger),
        before_replay,
        "the repeat charged nothing"
    );
}

#[test]
fn refusals_say_what_was_not_charged_and_what_to_do() {
    let (t, server) = hosted(0.0, &[]);
    let before = balance(&server.ledger(&t));
    // No terminal and no --yes is a no.
    t.run(&["hosted", "run", "plan.toml"])
        .code(10)
        .stderr_has("declined at the price question")
        .stderr_has("nothing was charged");
    // A plan that pays for itself would be charged twice.
    t.write(
        "paid.toml",
        format!("{PLAN}\n[[steps]]\nid = \"price\"\nkind = \"estimate\"\n"),
    );
    t.run(&["hosted", "quote", "paid.toml"])
        .code(3)
        .stderr_has("money steps")
        .stderr_has("Nothing was charged");
    // So is one without `steps`, which gets the default paid pipeline.
    let stepless = &PLAN[..PLAN.find("[[steps]]").expect("steps")];
    t.write("stepless.toml", stepless);
    t.run(&["hosted", "quote", "stepless.toml"])
        .code(3)
        .stderr_has("`register` (Register)");
    assert_eq!(balance(&server.ledger(&t)), before);
    // A server that plays no hosted playtests says how to start one.
    let plain = Served::start(&t);
    t.run(&["hosted", "quote", "plan.toml", "--server", &plain.url])
        .code(3)
        .stderr_has("--executor local");
    // A build over the server's limit is refused before it is stored.
    let builds = t.path("small").display().to_string();
    let small = Served::with_flags(
        &t.path(""),
        &t.path("served.sqlite"),
        &[
            "--executor",
            "local",
            "--builds",
            &builds,
            "--max-build-bytes",
            "1KiB",
        ],
    );
    t.run(&["hosted", "quote", "plan.toml", "--server", &small.url])
        .code(3)
        .stderr_has("over the 1024 bytes")
        .stderr_has("nothing was stored");
    assert!(
        std::fs::read_dir(t.path("small/builds")).map_or(0, Iterator::count) == 0,
        "nothing kept"
    );
    // No token.
    let no_token = Test::new()
        .file("plan.toml", PLAN)
        .env("GAMEPLAN_SERVER", &server.url);
    no_token
        .run(&["hosted", "quote", "plan.toml"])
        .code(4)
        .stderr_has("GAMEPLAN_TOKEN");
}

#[test]
fn a_browser_playtest_brings_its_page_home_with_the_screenshots_and_video_it_shows() {
    let web = |name: &str| {
        std::fs::read(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(name))
            .expect("the example web game")
    };
    let t = Test::new()
        .file("web.toml", web("examples/web.toml"))
        .file(
            "examples/games/web/index.html",
            web("examples/games/web/index.html"),
        )
        .file(
            "examples/games/web/game.js",
            web("examples/games/web/game.js"),
        );
    let (t, _server) = serving(t, &[]);
    let ran = t.run(&["hosted", "run", "web.toml", "--yes", "--wait", "--json"]);
    let playtest = ran.json();
    assert_eq!(playtest["phase"], "report_ready", "{ran}");
    // The example's two planted bugs are found on the server, as at home.
    let findings = &playtest["outcome"]["findings"];
    assert!(
        findings["console"].as_u64() >= Some(1) && findings["stuck"].as_u64() >= Some(1),
        "{findings}"
    );
    let id = playtest["id"].as_str().expect("an id");
    let home = t.path(&format!(".gameplan/hosted/{id}"));
    let page = std::fs::read_to_string(home.join("report.html")).expect("the page came home");
    // As the browser reads them: minijinja escapes `/` in attributes.
    let shown: Vec<String> = page
        .split("src=\"")
        .skip(1)
        .filter_map(|piece| piece.split('"').next())
        .map(|src| src.replace("&#x2f;", "/").replace("&amp;", "&"))
        .collect();
    assert!(
        shown.iter().any(|s| s.contains("/screenshots/")),
        "the page shows a screenshot: {shown:?}"
    );
    for src in &shown {
        assert!(
            home.join(src).is_file(),
            "{src} did not come home with the page; its files: {}",
            playtest["outcome"]["files"]
        );
    }
}

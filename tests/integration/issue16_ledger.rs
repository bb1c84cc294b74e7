//! Issue 16, the ledger: `gameplan ledger show | topup | token` on a real
//! ledger file. A job is bought through the library's `Ledger` (the money
//! steps that will buy them are not built yet) and `show` must list it.

use gameplan::backend::api::{Cell, EstimateRequest, JobRef, RegisterRequest, RunLength, Token};
use gameplan::backend::ledger::{DEMO_TOKEN, Ledger};

use crate::support::Test;

const LEDGER: &str = ".gameplan/ledger.sqlite";

fn balance(test: &Test, account: &str) -> i64 {
    let doc = test.run(&["ledger", "show", "--json"]).code(0).json();
    doc["accounts"]
        .as_array()
        .expect("accounts")
        .iter()
        .find(|a| a["id"] == account)
        .unwrap_or_else(|| panic!("no account {account} in {doc}"))["balance_cents"]
        .as_i64()
        .expect("cents")
}

#[test]
fn issue16_show_on_a_fresh_state_dir_creates_the_demo_account() {
    let test = Test::new();
    let out = test.run(&["ledger", "show"]);
    out.code(0)
        .stdout_has("demo")
        .stdout_has("$100.00")
        .stdout_has("none yet");
    assert!(test.path(LEDGER).is_file(), "show created the ledger");
    assert!(test.path(".gameplan/.gitignore").is_file());
    let doc = test.run(&["ledger", "show", "--json"]).code(0).json();
    assert_eq!(doc["accounts"][0]["id"], "demo");
    assert_eq!(doc["accounts"][0]["balance_cents"], 10_000);
    assert_eq!(doc["jobs"], serde_json::json!([]));
}

#[test]
fn issue16_topup_moves_the_balance_and_it_adds_up() {
    let test = Test::new();
    test.run(&["ledger", "topup", "demo", "250"])
        .code(0)
        .stdout_has("Added $2.50 to demo: the balance is $102.50.");
    assert_eq!(balance(&test, "demo"), 10_250);
    let doc = test.run(&["ledger", "show", "--json"]).code(0).json();
    assert_eq!(doc["accounts"][0]["topups_cents"], 10_250);
    assert_eq!(doc["accounts"][0]["adds_up"], true);
}

#[test]
fn issue16_token_prints_a_token_that_show_never_prints_and_the_file_holds_only_its_hash() {
    let test = Test::new();
    let out = test.run(&[
        "ledger",
        "token",
        "--scopes",
        "playtest:write,playtest:upload",
        "--account",
        "studio",
    ]);
    out.code(0).stderr_has("only its sha256 is kept");
    let token = out.stdout.trim().to_owned();
    assert!(
        token.starts_with("gp_") && !token.contains(char::is_whitespace),
        "{out}"
    );
    assert_eq!(
        out.stdout,
        format!("{token}\n"),
        "stdout is the token alone"
    );
    for args in [&["ledger", "show"][..], &["ledger", "show", "--json"][..]] {
        let shown = test.run(args);
        shown.code(0).stdout_has("studio");
        assert!(!shown.stdout.contains(&token) && !shown.stderr.contains(&token));
    }
    // The token works: the ledger knows it by its hash.
    let ledger = Ledger::open(&test.path(LEDGER)).expect("open");
    let me = ledger.whoami(&Token(token.clone())).expect("whoami");
    assert_eq!((me.user.as_str(), me.scopes.len()), ("studio", 2));
    drop(ledger);
    let mut bytes = Vec::new();
    for entry in std::fs::read_dir(test.path(".gameplan")).expect("dir") {
        bytes.extend(std::fs::read(entry.expect("entry").path()).expect("read"));
    }
    let has = |needle: &str| bytes.windows(needle.len()).any(|w| w == needle.as_bytes());
    assert!(!has(&token), "the token itself is under .gameplan/");
    assert!(
        !has(DEMO_TOKEN),
        "the demo token itself is under .gameplan/"
    );
    let hash = gameplan::reuse::sha256_hex(token.as_bytes());
    assert!(has(&hash), "the token's sha256 is not in the ledger file");
}

#[test]
fn issue16_bad_input_exits_3_saying_what_is_wrong() {
    let test = Test::new();
    test.run(&["ledger", "topup", "nobody", "5"])
        .code(3)
        .stderr_has("no account `nobody`")
        .stderr_has("accounts: demo");
    test.run(&["ledger", "topup", "demo", "-5"])
        .code(3)
        .stderr_has("a topup must be a positive number of cents, not -5");
    test.run(&["ledger", "topup", "demo", "0"])
        .code(3)
        .stderr_has("positive number of cents");
    test.run(&["ledger", "topup", "demo", "ten"]).code(3);
    test.run(&[
        "ledger",
        "token",
        "--scopes",
        "playtest:write,playtest:admin",
    ])
    .code(3)
    .stderr_has("unknown scope `playtest:admin`")
    .stderr_has("playtest:write, playtest:model, playtest:upload");
    test.run(&["ledger", "token"])
        .code(3)
        .stderr_has("--scopes");
    assert_eq!(balance(&test, "demo"), 10_000, "nothing moved");
    let doc = test.run(&["ledger", "show", "--json"]).code(0).json();
    assert_eq!(
        doc["tokens"].as_array().map(Vec::len),
        Some(1),
        "no token made"
    );
}

#[test]
fn issue16_db_and_state_dir_choose_the_ledger_file() {
    let test = Test::new();
    test.run(&[
        "ledger",
        "topup",
        "demo",
        "1",
        "--db",
        "elsewhere/money.sqlite",
    ])
    .code(0);
    assert!(test.path("elsewhere/money.sqlite").is_file());
    assert!(
        !test.path(LEDGER).exists(),
        "--db leaves the state dir alone"
    );
    test.run(&["ledger", "topup", "demo", "2", "--state-dir", "state"])
        .code(0)
        .stdout_has("$100.02");
    assert!(test.path("state/ledger.sqlite").is_file());
    test.run(&["ledger", "show", "--db", "elsewhere/money.sqlite"])
        .code(0)
        .stdout_has("$100.01");
    test.write(
        "not-a-db.sqlite",
        "this is not sqlite, it is text and more text",
    );
    test.run(&["ledger", "show", "--db", "not-a-db.sqlite/inside.sqlite"])
        .code(3)
        .stderr_has("cannot open the ledger");
    test.run(&["ledger", "show", "--db", "not-a-db.sqlite"])
        .code(3)
        .stderr_has("cannot open the ledger")
        .stderr_has("not-a-db.sqlite");
}

#[test]
fn issue16_show_lists_jobs_runs_and_settlements_in_the_design_shape() {
    let test = Test::new();
    test.run(&["ledger", "show"]).code(0);
    let ledger = Ledger::open(&test.path(LEDGER)).expect("open");
    let token = Token(DEMO_TOKEN.to_owned());
    let cells: Vec<Cell> = ["kid", "speedrunner"]
        .iter()
        .map(|p| Cell {
            persona: (*p).to_owned(),
            controller: "jev".to_owned(),
        })
        .collect();
    let quote = ledger
        .estimate(
            &token,
            "maze",
            &EstimateRequest {
                cells: cells.clone(),
                modules: vec![],
                run_length: RunLength::Short,
            },
        )
        .expect("estimate");
    let job = ledger
        .register(
            &token,
            "maze",
            "key-abc",
            &RegisterRequest {
                quote_id: quote.quote_id,
                confirm_price_cents: quote.estimate_cents,
                cells,
                modules: vec![],
                run_length: RunLength::Short,
            },
        )
        .expect("register")
        .job;
    ledger
        .finish(
            &token,
            &JobRef {
                game: "maze".into(),
                job: job.id.clone(),
            },
        )
        .expect("finish");
    drop(ledger);
    let doc = test.run(&["ledger", "show", "--json"]).code(0).json();
    let j = &doc["jobs"][0];
    for field in [
        "id",
        "idempotency_key",
        "state",
        "price_cents",
        "charged_cents",
        "refunded_cents",
        "settlements",
        "runs",
    ] {
        assert!(j.get(field).is_some(), "job lacks {field}: {j}");
    }
    assert_eq!(j["idempotency_key"], "key-abc");
    assert_eq!(
        (j["price_cents"].as_i64(), j["refunded_cents"].as_i64()),
        (Some(50), Some(50))
    );
    assert_eq!(j["state"], "settled");
    assert_eq!(j["settlements"].as_array().map(Vec::len), Some(1));
    let run = &j["runs"][0];
    for field in ["id", "persona", "controller", "state"] {
        assert!(run.get(field).is_some(), "run lacks {field}: {run}");
    }
    assert_eq!(
        (run["persona"].as_str(), run["state"].as_str()),
        (Some("kid"), Some("canceled"))
    );
    assert_eq!(
        doc["accounts"][0]["balance_cents"], 10_000,
        "unplayed runs refunded"
    );
    assert_eq!(doc["accounts"][0]["adds_up"], true);
    test.run(&["ledger", "show"])
        .code(0)
        .stdout_has("key key-abc")
        .stdout_has("settled")
        .stdout_has("speedrunner")
        .stdout_has("(never played)");
}

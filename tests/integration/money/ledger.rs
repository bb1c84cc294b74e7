//! The ledger: `gameplan ledger show | topup | token` on a real
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
fn show_on_a_fresh_state_dir_creates_the_demo_account() {
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
fn topup_moves_the_balance_and_it_adds_up() {
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
fn token_prints_a_token_that_show_never_prints_and_the_file_holds_only_its_hash() {
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
fn bad_input_exits_3_saying_what_is_wrong() {
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
fn db_and_state_dir_choose_the_ledger_file() {
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
fn show_lists_jobs_runs_and_settlements_in_the_design_shape() {
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

/// What the ledger answers is valid under `schemas/api.schema.json` (as
/// python-jsonschema, Draft 2020-12, sees it), and `gameplan schema api`
/// prints that file.
#[test]
fn schema_api_prints_the_checked_in_schema_and_real_payloads_validate() {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let file = repo.join("schemas/api.schema.json");
    let test = Test::new();
    let out = test.run(&["schema", "api"]);
    out.code(0);
    assert_eq!(out.stdout, std::fs::read_to_string(&file).expect("schema"));

    let ledger = Ledger::open(&test.path(LEDGER)).expect("open");
    let token = Token(DEMO_TOKEN.to_owned());
    let cells = vec![Cell {
        persona: "kid".into(),
        controller: "jev".into(),
    }];
    let estimate_request = EstimateRequest {
        cells: cells.clone(),
        modules: vec!["video".into()],
        run_length: RunLength::Long,
    };
    let quote = ledger
        .estimate(&token, "maze", &estimate_request)
        .expect("estimate");
    let register_request = RegisterRequest {
        quote_id: quote.quote_id.clone(),
        confirm_price_cents: quote.estimate_cents,
        cells,
        modules: vec!["video".into()],
        run_length: RunLength::Long,
    };
    let registered = ledger
        .register(&token, "maze", "k", &register_request)
        .expect("register");
    let job = JobRef {
        game: "maze".into(),
        job: registered.job.id.clone(),
    };
    let finished = ledger.finish(&token, &job).expect("finish");
    let mut bad = register_request.clone();
    bad.confirm_price_cents += 1;
    let error = ledger
        .register(&token, "maze", "k", &bad)
        .expect_err("other body");
    let samples = serde_json::json!([
        ["Whoami", ledger.whoami(&token).expect("whoami")],
        ["EstimateRequest", estimate_request],
        ["Estimate", quote],
        ["RegisterRequest", register_request],
        ["Registered", registered],
        ["Finished", finished],
        ["JobView", ledger.get_job(&token, &job).expect("job")],
        ["ApiError", error],
    ]);
    let script = r##"
import json, sys, jsonschema
schema = json.load(open(sys.argv[1]))
bad = 0
for name, value in json.loads(sys.stdin.read()):
    sub = {"$schema": schema["$schema"], "$defs": schema["$defs"], "$ref": "#/$defs/" + name}
    for e in jsonschema.Draft202012Validator(sub).iter_errors(value):
        bad += 1
        print(name, e.message)
print(bad, "problems")
"##;
    let mut child = std::process::Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(&file)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3 runs (with `pip install jsonschema`)");
    std::io::Write::write_all(
        child.stdin.as_mut().expect("stdin"),
        samples.to_string().as_bytes(),
    )
    .expect("write");
    let output = child.wait_with_output().expect("python3");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("0 problems"),
        "{stdout}"
    );
}

/// The ledger file's bytes once no connection holds it, and `show --json`.
///
/// Why compare closed files: an open ledger in WAL mode writes to
/// `ledger.sqlite-wal` first and copies those frames into the main file at a
/// checkpoint, at the latest when its last connection closes. So the honest
/// comparison is of the main file after every connection closed (a write
/// would have been checkpointed into it by then), with no `-wal` left
/// holding frames (more than its 32-byte header) that a later open would
/// still copy in.
pub(crate) fn closed_ledger(test: &Test, db: &std::path::Path) -> (Vec<u8>, serde_json::Value) {
    let wal = db.with_file_name(format!(
        "{}-wal",
        db.file_name().expect("a file").to_string_lossy()
    ));
    if let Ok(meta) = std::fs::metadata(&wal) {
        assert!(
            meta.len() <= 32,
            "{} holds {} bytes of frames not yet in the ledger",
            wal.display(),
            meta.len()
        );
    }
    let bytes = std::fs::read(db).expect("the ledger file");
    let show = test
        .run(&[
            "ledger",
            "show",
            "--json",
            "--db",
            db.to_str().expect("utf-8"),
        ])
        .code(0)
        .json();
    assert_eq!(
        std::fs::read(db).expect("the ledger file"),
        bytes,
        "`ledger show` itself changed the file"
    );
    (bytes, show)
}

#[test]
fn ledger_whoami_and_estimate_through_local_leave_the_file_byte_for_byte_unchanged() {
    use gameplan::backend::Backend;
    use gameplan::backend::local::LocalBackend;
    let test = Test::new();
    let db = test.path(LEDGER);
    // A ledger with history: a bought job, and a token missing a scope.
    let narrow = test.run(&["ledger", "token", "--scopes", "playtest:upload"]);
    let narrow = Token(narrow.code(0).stdout.trim().to_owned());
    let ledger = Ledger::open(&db).expect("open");
    let token = Token(DEMO_TOKEN.to_owned());
    let request = EstimateRequest {
        cells: vec![Cell {
            persona: "kid".into(),
            controller: "jev".into(),
        }],
        modules: vec![],
        run_length: RunLength::Short,
    };
    let quote = ledger.estimate(&token, "maze", &request).expect("estimate");
    ledger
        .register(
            &token,
            "maze",
            "key-1",
            &RegisterRequest {
                quote_id: quote.quote_id,
                confirm_price_cents: quote.estimate_cents,
                cells: request.cells.clone(),
                modules: vec![],
                run_length: RunLength::Short,
            },
        )
        .expect("register");
    drop(ledger);
    let (bytes_before, show_before) = closed_ledger(&test, &db);

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let backend = LocalBackend::open(&db).expect("open");
        backend.whoami(&token).await.expect("whoami");
        let quote = backend
            .estimate(&token, "maze", &request)
            .await
            .expect("estimate");
        assert_eq!(quote.estimate_cents, 25);
        let e = backend
            .estimate(&narrow, "maze", &request)
            .await
            .expect_err("no playtest:write");
        assert_eq!(e.code, "missing_scope");
        let e = backend
            .whoami(&Token("gp_nobody".into()))
            .await
            .expect_err("unknown token");
        assert_eq!(e.code, "unauthorized");
    });
    drop(runtime);

    let (bytes_after, show_after) = closed_ledger(&test, &db);
    assert_eq!(show_after, show_before);
    assert!(
        bytes_after == bytes_before,
        "whoami and estimate changed the ledger file"
    );
}

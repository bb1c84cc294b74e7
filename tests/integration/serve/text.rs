//! Invisible Unicode format characters (general category Cf: a
//! right-to-left override U+202E, a zero-width space U+200B) are refused
//! where text is checked, like control characters, and whatever unsafe
//! text a ledger file already holds is escaped when `ledger show` and
//! `ledger token` print it.

use gameplan::backend::api::Token;
use gameplan::backend::{Backend, UploadTarget};

use super::security::{
    GAME, block, buy, cells, client, estimate_of, register_body, run_of, upload,
};
use crate::support::{ALL_SCOPES, Served, Test};

#[test]
fn format_characters_in_personas_games_keys_and_file_names_are_refused_naming_the_field() {
    let test = Test::new();
    let server = Served::start(&test);
    let token = Token(server.token.clone());
    let backend = client(&server.url);
    block(async {
        let e = backend
            .estimate(&token, GAME, &estimate_of(cells(&["kid\u{202e}dik"])))
            .await
            .expect_err("a right-to-left override in a persona");
        assert_eq!(e.status, 400, "{e}");
        assert!(
            e.message.contains("cells[0].persona") && e.message.contains("U+202E"),
            "{e}"
        );
        assert!(!e.message.contains('\u{202e}'), "quoted raw: {e}");
        let e = backend
            .estimate(&token, "maze\u{200b}", &estimate_of(cells(&["kid"])))
            .await
            .expect_err("a zero-width space in a game");
        assert!(
            e.message.contains("`game`") && e.message.contains("U+200B"),
            "{e}"
        );
        let one = backend
            .estimate(&token, GAME, &estimate_of(cells(&["kid"])))
            .await
            .expect("estimate");
        let e = backend
            .register(
                &token,
                GAME,
                "key\u{feff}",
                &register_body(&one.quote_id, one.estimate_cents, cells(&["kid"])),
            )
            .await
            .expect_err("a byte-order mark in a key");
        assert!(e.message.contains("Idempotency-Key"), "{e}");
        let bought = buy(&backend, &token, "key-format", cells(&["kid"])).await;
        let target = UploadTarget::Run(run_of(&bought, 0));
        let e = backend
            .upload(&token, &target, &upload("report\u{202e}nosj.exe", b"x"))
            .await
            .expect_err("an override in a file name");
        assert!(
            e.message.contains("`name`") && e.message.contains("U+202E"),
            "{e}"
        );
    });
    let doc = server.ledger(&test);
    assert_eq!(doc["jobs"].as_array().map(Vec::len), Some(1), "{doc}");
    assert_eq!(doc["jobs"][0]["uploads"], serde_json::json!([]), "{doc}");
}

#[test]
fn ledger_token_refuses_an_account_with_an_esc_or_an_override_and_never_prints_it_raw() {
    let test = Test::new();
    for account in ["ev\u{1b}[2Jil", "studio\u{202e}oiduts"] {
        let out = test.run(&[
            "ledger",
            "token",
            "--account",
            account,
            "--scopes",
            ALL_SCOPES,
            "--db",
            "t.sqlite",
        ]);
        out.code(3).stderr_has("`account` holds the");
        assert!(
            !out.stderr.contains('\u{1b}') && !out.stderr.contains('\u{202e}'),
            "printed raw: {:?}",
            out.stderr
        );
        assert!(out.stdout.is_empty(), "no token: {:?}", out.stdout);
    }
    let doc = test
        .run(&["ledger", "show", "--json", "--db", "t.sqlite"])
        .code(0)
        .json();
    assert_eq!(
        doc["tokens"].as_array().map(Vec::len),
        Some(1),
        "only the demo's: {doc}"
    );
}

#[test]
fn ledger_show_escapes_format_characters_an_older_file_holds() {
    let test = Test::new();
    let server = Served::start(&test);
    let token = Token(server.token.clone());
    block(buy(
        &client(&server.url),
        &token,
        "key-old",
        cells(&["kid"]),
    ));
    // What a ledger written before the check could hold: set by hand.
    let conn = rusqlite::Connection::open(&server.db).expect("open");
    conn.execute_batch(
        "UPDATE runs SET persona = 'kid' || char(8238) || 'dik', controller = 'jev' || char(8203);
         UPDATE jobs SET idempotency_key = 'key' || char(27) || '[31m';",
    )
    .expect("update");
    drop(conn);
    let db = server.db.to_str().expect("utf-8");
    let out = test.run(&["ledger", "show", "--db", db]);
    out.code(0)
        .stdout_has("kid\\u{202e}dik")
        .stdout_has("jev\\u{200b}")
        .stdout_has("key\\u{1b}[31m");
    for raw in ['\u{202e}', '\u{200b}', '\u{1b}'] {
        assert!(
            !out.stdout.contains(raw),
            "{raw:?} printed raw: {}",
            out.stdout
        );
    }
}

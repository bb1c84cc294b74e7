//! `gameplan serve` attacked as an outsider would: the real server binary on
//! loopback, raw HTTP where a client library would hide the attack, the
//! library's `HttpBackend` elsewhere. One test per defect an outside probe
//! found: the public demo token, replacing verified or published files, a
//! body read before authentication, a refund on the client's word, jobs
//! with no cell cap, sums past i64, a forged quote answered with the price,
//! and control characters stored raw. Then what the API now promises of a
//! key replayed after `finish`, and token revocation.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use gameplan::backend::api::{
    AggregateCompleteRequest, ApiError, Cell, CompleteRequest, EstimateRequest, FileDigest, JobRef,
    ManifestEntry, RegisterRequest, Registered, RunLength, RunRef, RunState, Token,
    TransitionRequest, UploadRequest,
};
use gameplan::backend::http::{HttpBackend, HttpOptions, Retry};
use gameplan::backend::ledger::DEMO_TOKEN;
use gameplan::backend::{Backend, UploadTarget};

use crate::support::{ALL_SCOPES, Served, Test};

pub(super) const GAME: &str = "probe-game";

pub(super) fn client(url: &str) -> HttpBackend {
    HttpBackend::with_options(
        url,
        HttpOptions {
            timeout: Duration::from_secs(20),
            connect_timeout: Duration::from_secs(2),
            retry: Retry {
                attempts: 1,
                first_backoff: Duration::from_millis(50),
                max_backoff: Duration::from_millis(50),
            },
        },
    )
    .expect("http backend")
}

pub(super) fn block<T>(future: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(future)
}

pub(super) fn cells(personas: &[&str]) -> Vec<Cell> {
    personas
        .iter()
        .map(|p| Cell {
            persona: (*p).to_owned(),
            controller: "standard".to_owned(),
        })
        .collect()
}

pub(super) fn estimate_of(cells: Vec<Cell>) -> EstimateRequest {
    EstimateRequest {
        cells,
        modules: Vec::new(),
        run_length: RunLength::Standard,
    }
}

/// Prices `cells` and buys them under `key`.
pub(super) async fn buy(
    backend: &HttpBackend,
    token: &Token,
    key: &str,
    cells: Vec<Cell>,
) -> Registered {
    let estimate = backend
        .estimate(token, GAME, &estimate_of(cells.clone()))
        .await
        .expect("estimate");
    backend
        .register(
            token,
            GAME,
            key,
            &register_body(&estimate.quote_id, estimate.estimate_cents, cells),
        )
        .await
        .expect("register")
}

pub(super) fn register_body(quote: &str, cents: i64, cells: Vec<Cell>) -> RegisterRequest {
    RegisterRequest {
        quote_id: quote.to_owned(),
        confirm_price_cents: cents,
        cells,
        modules: Vec::new(),
        run_length: RunLength::Standard,
    }
}

pub(super) fn sha256(bytes: &[u8]) -> String {
    gameplan::reuse::sha256_hex(bytes)
}

pub(super) fn upload(name: &str, bytes: &[u8]) -> UploadRequest {
    UploadRequest {
        name: name.to_owned(),
        sha256: sha256(bytes),
        body: bytes.to_vec(),
    }
}

pub(super) fn run_of(registered: &Registered, i: usize) -> RunRef {
    RunRef {
        game: GAME.to_owned(),
        job: registered.job.id.clone(),
        run: registered.job.runs[i].id.clone(),
    }
}

pub(super) fn job_of(registered: &Registered) -> JobRef {
    JobRef {
        game: GAME.to_owned(),
        job: registered.job.id.clone(),
    }
}

pub(super) async fn walk(backend: &HttpBackend, token: &Token, run: &RunRef, to: &[RunState]) {
    for to in to {
        backend
            .transition(
                token,
                run,
                &TransitionRequest {
                    to: *to,
                    reason: None,
                },
            )
            .await
            .expect("transition");
    }
}

/// One raw exchange: `head` sent as is (CRLF added), then `body`; the
/// status of the answer, or `None` when the server closed without one.
pub(super) fn raw(url: &str, head: &str, body: &[u8]) -> (Option<u16>, String) {
    let mut stream = TcpStream::connect(url.trim_start_matches("http://")).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let _ = stream.write_all(head.replace('\n', "\r\n").as_bytes());
    let _ = stream.write_all(body);
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let text = String::from_utf8_lossy(&answer).into_owned();
    let status = text.split_whitespace().nth(1).and_then(|s| s.parse().ok());
    (status, text)
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("VmRSS")
}

// 1. The public demo token.

#[test]
fn serve_refuses_the_public_demo_token_even_where_its_ledger_holds_it_and_logs_why() {
    let test = Test::new();
    // `--demo`: the ledger holds the demo account and its token.
    let server = Served::start(&test);
    let (status, answer) = raw(
        &server.url,
        &format!(
            "GET /v1/whoami HTTP/1.1\nhost: x\nauthorization: Bearer {DEMO_TOKEN}\nconnection: close\n\n"
        ),
        b"",
    );
    assert_eq!(status, Some(401), "{answer}");
    assert!(answer.contains("demo token is not accepted"), "{answer}");
    // The log line is written as the answer goes: wait for it.
    let started = Instant::now();
    let says_why = |log: &str| {
        log.contains("GET /v1/whoami 401") && log.contains("refused the public demo token")
    };
    while !says_why(&server.log().join("\n")) && started.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let log = server.log().join("\n");
    assert!(says_why(&log), "the log says why: {log}");
    // The test's own token of the same account works.
    block(client(&server.url).whoami(&Token(server.token.clone()))).expect("a real token");
}

#[test]
fn a_ledger_serve_creates_has_no_demo_account_unless_asked() {
    let test = Test::new();
    let mut plain = Served::with_flags(&test.path(""), &test.path("plain.sqlite"), &[]);
    assert_eq!(plain.stop().code(), Some(0));
    let doc = test
        .run(&["ledger", "show", "--json", "--db", "plain.sqlite"])
        .code(0)
        .json();
    assert_eq!(doc["accounts"], serde_json::json!([]), "{doc}");
    assert_eq!(doc["tokens"], serde_json::json!([]), "{doc}");

    let mut demo = Served::with_flags(&test.path(""), &test.path("demo.sqlite"), &["--demo"]);
    assert_eq!(demo.stop().code(), Some(0));
    let doc = test
        .run(&["ledger", "show", "--json", "--db", "demo.sqlite"])
        .code(0)
        .json();
    assert_eq!(doc["accounts"][0]["id"], "demo", "{doc}");
}

// 2. Verified and published files are immutable.

/// A one-cell job bought through `backend`: its run walked to `uploading`
/// with `report.json` uploaded, and completed `succeeded` (manifest
/// verified).
async fn bought_and_completed(backend: &HttpBackend, token: &Token, report: &[u8]) -> Registered {
    let bought = buy(backend, token, "key-files", cells(&["kid"])).await;
    let run = run_of(&bought, 0);
    let states = [
        RunState::Launching,
        RunState::Playing,
        RunState::Reporting,
        RunState::Uploading,
    ];
    walk(backend, token, &run, &states).await;
    backend
        .upload(
            token,
            &UploadTarget::Run(run.clone()),
            &upload("report.json", report),
        )
        .await
        .expect("upload before complete");
    let manifest = vec![ManifestEntry {
        path: "report.json".to_owned(),
        size: i64::try_from(report.len()).expect("small"),
        sha256: sha256(report),
    }];
    let complete = CompleteRequest {
        state: RunState::Succeeded,
        reason: None,
        actions_taken: 3,
        quit_reason: Some("done".to_owned()),
        report: serde_json::json!({"findings": []}),
        report_md: String::new(),
        manifest,
    };
    backend
        .complete(token, &run, &complete)
        .await
        .expect("complete");
    bought
}

#[test]
fn a_completed_runs_verified_files_cannot_be_replaced_or_added_to() {
    let test = Test::new();
    let server = Served::start(&test);
    let token = Token(server.token.clone());
    let backend = client(&server.url);
    let report = b"{\"findings\": []}";
    block(async {
        let bought = bought_and_completed(&backend, &token, report).await;
        let target = UploadTarget::Run(run_of(&bought, 0));
        let forged = upload("report.json", b"{\"findings\": [\"forged\"]}");
        let e = backend
            .upload(&token, &target, &forged)
            .await
            .expect_err("a verified file replaced");
        assert_eq!((e.status, e.code.as_str()), (409, "files_immutable"), "{e}");
        assert!(e.message.contains("cannot be replaced"), "{e}");
        let e = backend
            .upload(&token, &target, &upload("extra.txt", b"late"))
            .await
            .expect_err("a file added after complete");
        assert_eq!(e.code, "files_immutable", "{e}");
        // The same bytes again are a retry: answered as stored.
        backend
            .upload(&token, &target, &upload("report.json", report))
            .await
            .expect("the same bytes again");
    });
    let doc = server.ledger(&test);
    let uploads = doc["jobs"][0]["uploads"].as_array().expect("uploads");
    assert_eq!(uploads.len(), 1, "{doc}");
    assert_eq!(
        uploads[0]["sha256"],
        sha256(report),
        "the verified bytes: {doc}"
    );
}

#[test]
fn a_published_aggregate_and_a_settled_jobs_files_cannot_change() {
    let test = Test::new();
    let server = Served::start(&test);
    let token = Token(server.token.clone());
    let backend = client(&server.url);
    let (md, json) = (&b"# merged"[..], &b"{}"[..]);
    let digest = |b: &[u8]| FileDigest {
        size: i64::try_from(b.len()).expect("small"),
        sha256: sha256(b),
    };
    block(async {
        let bought = bought_and_completed(&backend, &token, b"{}").await;
        let job = job_of(&bought);
        let jobs = UploadTarget::Job(job.clone());
        for (name, bytes) in [("aggregate.md", md), ("aggregate.json", json)] {
            backend
                .upload(&token, &jobs, &upload(name, bytes))
                .await
                .expect("aggregate file");
        }
        let published = AggregateCompleteRequest {
            md: digest(md),
            json: digest(json),
        };
        backend
            .aggregate_complete(&token, &job, &published)
            .await
            .expect("publish");
        let e = backend
            .upload(&token, &jobs, &upload("aggregate.md", b"# rewritten"))
            .await
            .expect_err("a published file replaced");
        assert_eq!(e.code, "files_immutable", "{e}");
        let other = AggregateCompleteRequest {
            md: digest(b"# other"),
            json: digest(json),
        };
        let e = backend
            .aggregate_complete(&token, &job, &other)
            .await
            .expect_err("published again with other digests");
        assert_eq!(
            (e.status, e.code.as_str()),
            (409, "aggregate_published"),
            "{e}"
        );
        backend.finish(&token, &job).await.expect("finish");
        let e = backend
            .upload(&token, &jobs, &upload("added-after-finish.md", b"x"))
            .await
            .expect_err("a file added after finish");
        assert_eq!(e.code, "files_immutable", "{e}");
    });
    // What the ledger holds is what was published.
    let doc = server.ledger(&test);
    let uploads = doc["jobs"][0]["uploads"].as_array().expect("uploads");
    let names: Vec<&str> = uploads.iter().filter_map(|u| u["name"].as_str()).collect();
    assert_eq!(
        names,
        ["aggregate.json", "aggregate.md", "report.json"],
        "{doc}"
    );
    let stored = uploads
        .iter()
        .find(|u| u["name"] == "aggregate.md")
        .expect("md");
    assert_eq!(stored["sha256"], sha256(md), "{doc}");
    assert_eq!(
        doc["jobs"][0]["aggregate"]["md"]["sha256"],
        sha256(md),
        "{doc}"
    );
}

// 3. The body is not read before authentication; bodies are capped; slow
// and idle connections are closed.

#[test]
fn an_unauthenticated_oversized_post_is_answered_401_before_its_body_and_memory_stays_bounded() {
    let test = Test::new();
    let server = Served::start(&test);
    let before = rss_kib(server.pid());
    // The headers announce 60 MB; no body is sent at all: the answer
    // comes without it.
    let started = Instant::now();
    let (status, answer) = raw(
        &server.url,
        "PUT /v1/games/g/jobs/job-1/runs/run-1/files/big.bin HTTP/1.1\nhost: x\ncontent-length: 60000000\nx-content-sha256: 00\n\n",
        b"",
    );
    assert_eq!(status, Some(401), "{answer}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "answered without waiting for the body"
    );
    // Eight clients sending 60 MB each, at once, with no token.
    let senders: Vec<_> = (0..8)
        .map(|_| {
            let url = server.url.clone();
            std::thread::spawn(move || {
                let body = vec![b'x'; 60_000_000];
                raw(
                    &url,
                    "POST /v1/games/g/estimate HTTP/1.1\nhost: x\ncontent-type: application/json\ncontent-length: 60000000\n\n",
                    &body,
                )
                .0
            })
        })
        .collect();
    for sender in senders {
        let status = sender.join().expect("sender");
        assert!(matches!(status, Some(401) | None), "{status:?}");
    }
    let after = rss_kib(server.pid());
    assert!(
        after < before + 64 * 1024,
        "the server grew from {before} KiB to {after} KiB under 480 MB of unauthenticated bodies"
    );
    // An authenticated JSON body over its cap: 413, naming the cap.
    let big = vec![b' '; 5 * 1024 * 1024];
    let (status, answer) = raw(
        &server.url,
        &format!(
            "POST /v1/games/g/estimate HTTP/1.1\nhost: x\nauthorization: Bearer {}\ncontent-length: {}\nconnection: close\n\n",
            server.token,
            big.len()
        ),
        &big,
    );
    assert_eq!(status, Some(413), "{answer}");
    assert!(
        answer.contains("body_too_large") && answer.contains("4194304"),
        "{answer}"
    );
}

#[test]
fn an_idle_connection_and_a_stalled_body_are_closed_after_the_idle_timeout() {
    let test = Test::new();
    let server = Served::with_flags(
        &test.path(""),
        &test.path("idle.sqlite"),
        &["--idle-timeout", "1"],
    );
    // Connected, and nothing sent: closed without an answer.
    let started = Instant::now();
    let (status, _) = raw(&server.url, "", b"");
    assert_eq!(status, None);
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(10),
        "closed after {waited:?}"
    );
    // Half a body, then silence: 408 after the timeout (the token is
    // checked first, so make one).
    let db = test.path("idle.sqlite");
    let made = test.run(&[
        "ledger",
        "token",
        "--scopes",
        ALL_SCOPES,
        "--db",
        db.to_str().expect("utf-8"),
    ]);
    let token = made.code(0).stdout.trim().to_owned();
    let mut stream = TcpStream::connect(server.url.trim_start_matches("http://")).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let head = format!(
        "POST /v1/games/g/estimate HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {token}\r\ncontent-length: 100\r\n\r\n{{\"cells\""
    );
    stream.write_all(head.as_bytes()).expect("send");
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("body_timeout"), "{answer}");
}

// 4. What is refunded follows the ledger's own record.

#[test]
fn a_run_the_ledger_saw_report_play_is_not_refunded_whatever_state_it_ends_in() {
    let test = Test::new();
    let server = Served::start(&test);
    let token = Token(server.token.clone());
    let backend = client(&server.url);
    let finished = block(async {
        let bought = buy(&backend, &token, "key-refund", cells(&["kid", "veteran"])).await;
        // Run 0 never moved to `playing`, yet completes `failed` saying it
        // took 100 actions and wrote a report: the ledger recorded play.
        backend
            .complete(
                &token,
                &run_of(&bought, 0),
                &CompleteRequest {
                    state: RunState::Failed,
                    reason: Some("the game crashed".to_owned()),
                    actions_taken: 100,
                    quit_reason: Some("crash".to_owned()),
                    report: serde_json::json!({"findings": [{"title": "crash"}]}),
                    report_md: "# kid played 100 actions".to_owned(),
                    manifest: Vec::new(),
                },
            )
            .await
            .expect("complete");
        // Run 1 got a heartbeat with actions and then failed by transition.
        backend
            .heartbeat(
                &token,
                &run_of(&bought, 1),
                &gameplan::backend::api::HeartbeatRequest {
                    actions_taken: 7,
                    checkpoint_step: None,
                },
            )
            .await
            .expect("heartbeat");
        backend
            .finish(&token, &job_of(&bought))
            .await
            .expect("finish")
    });
    assert_eq!(finished.settlement.refunded_cents, 0, "{finished:?}");
    assert!(finished.settlement.refunded_runs.is_empty(), "{finished:?}");
    let doc = server.ledger(&test);
    assert_eq!(doc["jobs"][0]["runs"][0]["played"], true, "{doc}");
    assert_eq!(doc["jobs"][0]["runs"][1]["played"], true, "{doc}");
    assert_eq!(doc["accounts"][0]["adds_up"], true, "{doc}");
}

#[test]
fn a_run_the_ledger_never_saw_play_is_refunded_at_finish() {
    let test = Test::new();
    let server = Served::start(&test);
    let token = Token(server.token.clone());
    let backend = client(&server.url);
    let finished = block(async {
        let bought = buy(&backend, &token, "key-unplayed", cells(&["kid", "veteran"])).await;
        walk(
            &backend,
            &token,
            &run_of(&bought, 0),
            &[RunState::Launching, RunState::Playing],
        )
        .await;
        backend
            .finish(&token, &job_of(&bought))
            .await
            .expect("finish")
    });
    assert_eq!(finished.settlement.refunded_cents, 50, "{finished:?}");
    assert_eq!(finished.settlement.refunded_runs.len(), 1, "{finished:?}");
}

// 5. A cap on cells per job.

#[test]
fn a_job_over_the_cell_cap_is_refused_naming_the_cap() {
    let test = Test::new();
    let server = Served::start(&test);
    let token = Token(server.token.clone());
    let backend = client(&server.url);
    // The default cap: 10,000 cells.
    let many: Vec<Cell> = (0..10_001)
        .map(|i| Cell {
            persona: format!("p{i}"),
            controller: "standard".to_owned(),
        })
        .collect();
    let e = block(backend.estimate(&token, GAME, &estimate_of(many))).expect_err("10,001 cells");
    assert_eq!((e.status, e.code.as_str()), (422, "too_many_cells"), "{e}");
    assert!(
        e.message.contains("at most 10000 per job") && e.message.contains("--max-cells"),
        "{e}"
    );

    let capped = Served::with_flags(
        &test.path(""),
        &test.path("capped.sqlite"),
        &["--demo", "--max-cells", "2"],
    );
    let made = test.run(&[
        "ledger",
        "token",
        "--scopes",
        ALL_SCOPES,
        "--db",
        "capped.sqlite",
    ]);
    let capped_token = Token(made.code(0).stdout.trim().to_owned());
    let backend = client(&capped.url);
    block(async {
        let e = backend
            .estimate(&capped_token, GAME, &estimate_of(cells(&["a", "b", "c"])))
            .await
            .expect_err("3 cells over a cap of 2");
        assert!(e.message.contains("at most 2 per job"), "{e}");
        // A register whose body holds more cells than the cap, with a quote
        // for fewer: refused before anything else.
        let two = backend
            .estimate(&capped_token, GAME, &estimate_of(cells(&["a", "b"])))
            .await
            .expect("2 cells");
        let e = backend
            .register(
                &capped_token,
                GAME,
                "key-cap",
                &register_body(&two.quote_id, two.estimate_cents, cells(&["a", "b", "c"])),
            )
            .await
            .expect_err("register over the cap");
        assert_eq!(e.code, "too_many_cells", "{e}");
    });
    let doc = capped.ledger(&test);
    assert_eq!(doc["jobs"], serde_json::json!([]), "nothing bought: {doc}");
}

// 6. Sums past i64.

#[test]
fn a_topup_past_the_largest_lifetime_sum_is_refused_and_ledger_show_still_reads() {
    let test = Test::new();
    let server = Served::start(&test);
    let token = Token(server.token.clone());
    block(buy(
        &client(&server.url),
        &token,
        "key-spend",
        cells(&["kid", "veteran"]),
    ));
    let db = server.db.to_str().expect("utf-8").to_owned();
    // $100 topped up at the start, $1 spent: the balance is 9,900 cents,
    // the lifetime topups 10,000. Topping up to the largest balance...
    let to_max = (i64::MAX - 9_900).to_string();
    let full = test.run(&["ledger", "topup", "demo", &to_max, "--db", &db]);
    // ...would take the lifetime topups past i64: refused.
    full.code(3).stderr_has("past the largest amount");
    let fits = (i64::MAX - 10_000).to_string();
    test.run(&["ledger", "topup", "demo", &fits, "--db", &db])
        .code(0);
    test.run(&["ledger", "topup", "demo", "1", "--db", &db])
        .code(3)
        .stderr_has("nothing was added");
    let doc = server.ledger(&test);
    let account = &doc["accounts"][0];
    assert_eq!(account["topups_cents"], i64::MAX, "{doc}");
    assert_eq!(account["adds_up"], true, "{doc}");
    test.run(&["ledger", "show", "--db", &db]).code(0);
}

// 7. A forged quote learns nothing.

#[test]
fn a_made_up_quote_is_422_quote_invalid_without_the_price_and_a_real_one_for_other_cells_is_409() {
    let test = Test::new();
    let server = Served::start(&test);
    let token = Token(server.token.clone());
    let backend = client(&server.url);
    block(async {
        let one = backend
            .estimate(&token, GAME, &estimate_of(cells(&["kid"])))
            .await
            .expect("estimate");
        let three = cells(&["kid", "veteran", "speedrunner"]);
        // Made up: the cells' digest of three cells, any price and MAC.
        let cells_sha = sha256(&serde_json::to_vec(&estimate_of(three.clone())).expect("json"));
        let forged = format!("quote-v2.4102444800.1.{cells_sha}.{}", "0".repeat(64));
        let e: ApiError = backend
            .register(
                &token,
                GAME,
                "key-forged",
                &register_body(&forged, 1, three.clone()),
            )
            .await
            .expect_err("a forged quote");
        assert_eq!((e.status, e.code.as_str()), (422, "quote_invalid"), "{e}");
        assert_eq!(
            e.details.price_cents, None,
            "the price is not revealed: {e:?}"
        );
        assert!(!e.message.contains("cents"), "{e}");
        // A genuine quote of one cell, sent with three: the price of three.
        let e = backend
            .register(
                &token,
                GAME,
                "key-other",
                &register_body(&one.quote_id, one.estimate_cents, three),
            )
            .await
            .expect_err("a quote of other cells");
        assert_eq!((e.status, e.code.as_str()), (409, "price_changed"), "{e}");
        assert_eq!(e.details.price_cents, Some(150), "{e:?}");
    });
    let doc = server.ledger(&test);
    assert_eq!(doc["jobs"], serde_json::json!([]), "nothing bought: {doc}");
}

// 8. Control characters.

#[test]
fn control_characters_in_names_personas_controllers_and_games_are_refused_naming_the_field() {
    let test = Test::new();
    let server = Served::start(&test);
    let token = Token(server.token.clone());
    let backend = client(&server.url);
    let bought = block(async {
        let mut evil = cells(&["kid\u{1b}[2J"]);
        let e = backend
            .estimate(&token, GAME, &estimate_of(evil.clone()))
            .await
            .expect_err("ESC in a persona");
        assert_eq!(e.status, 400, "{e}");
        assert!(e.message.contains("cells[0].persona"), "{e}");
        evil[0].persona = "kid".to_owned();
        evil[0].controller = "jev\n".to_owned();
        let e = backend
            .estimate(&token, GAME, &estimate_of(evil))
            .await
            .expect_err("a newline");
        assert!(e.message.contains("cells[0].controller"), "{e}");
        let e = backend
            .estimate(&token, "maze\u{7}", &estimate_of(cells(&["kid"])))
            .await
            .expect_err("BEL in a game");
        assert!(e.message.contains("`game`"), "{e}");

        let bought = buy(&backend, &token, "key-names", cells(&["kid"])).await;
        let target = UploadTarget::Run(run_of(&bought, 0));
        for name in ["nul\0.txt", "esc\u{1b}[31m.txt"] {
            let e = backend
                .upload(&token, &target, &upload(name, b"x"))
                .await
                .expect_err(name);
            assert_eq!(e.status, 400, "{name:?}: {e}");
            assert!(e.message.contains("`name`"), "{name:?}: {e}");
        }
        bought
    });
    // A newline, as a raw client sends it (percent-encoded in the path; an
    // URL library would drop it).
    let (status, answer) = raw(
        &server.url,
        &format!(
            "PUT /v1/games/{GAME}/jobs/{}/runs/{}/files/two%0Alines.txt HTTP/1.1\nhost: x\nauthorization: Bearer {}\nx-content-sha256: {}\ncontent-length: 1\nconnection: close\n\n",
            bought.job.id,
            bought.job.runs[0].id,
            server.token,
            sha256(b"x")
        ),
        b"x",
    );
    assert_eq!(status, Some(400), "{answer}");
    assert!(
        answer.contains("`name`") && answer.contains("U+000A"),
        "{answer}"
    );
    let doc = server.ledger(&test);
    assert_eq!(doc["jobs"][0]["uploads"], serde_json::json!([]), "{doc}");
}

// What a key replayed after `finish` answers, and revocation.

#[test]
fn a_key_replayed_after_finish_returns_the_job_as_it_is_now_and_charges_nothing() {
    let test = Test::new();
    let server = Served::start(&test);
    let token = Token(server.token.clone());
    let backend = client(&server.url);
    block(async {
        let estimate = backend
            .estimate(&token, GAME, &estimate_of(cells(&["kid"])))
            .await
            .expect("estimate");
        let body = register_body(&estimate.quote_id, estimate.estimate_cents, cells(&["kid"]));
        let first = backend
            .register(&token, GAME, "key-after", &body)
            .await
            .expect("register");
        assert_eq!(first.job.state, "open");
        let finished = backend
            .finish(&token, &job_of(&first))
            .await
            .expect("finish");
        let again = backend
            .register(&token, GAME, "key-after", &body)
            .await
            .expect("replayed");
        assert!(again.replayed);
        assert_eq!(again.job.id, first.job.id);
        assert_eq!(again.job.state, "settled", "the job as it is now");
        assert_eq!(again.job.settlement.as_ref(), Some(&finished.settlement));
        assert_eq!(
            again.balance_cents, finished.balance_cents,
            "nothing charged again"
        );
    });
    let doc = server.ledger(&test);
    assert_eq!(doc["jobs"].as_array().map(Vec::len), Some(1), "{doc}");
}

#[test]
fn a_revoked_token_is_refused_and_ledger_show_says_when_it_was_revoked() {
    let test = Test::new();
    let server = Served::start(&test);
    let db = server.db.to_str().expect("utf-8").to_owned();
    let backend = client(&server.url);
    let token = Token(server.token.clone());
    block(backend.whoami(&token)).expect("before");
    // `-`: the token comes on stdin, out of the shell's history.
    let mut revoke = std::process::Command::new(crate::support::BIN)
        .args(["ledger", "token", "--revoke", "-", "--db", &db])
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    revoke
        .stdin
        .take()
        .expect("stdin")
        .write_all(format!("{}\n", server.token).as_bytes())
        .expect("send the token");
    let revoked = revoke.wait_with_output().expect("wait");
    assert!(revoked.status.success(), "{revoked:?}");
    assert!(
        String::from_utf8_lossy(&revoked.stderr).contains("Revoked a token of demo"),
        "{revoked:?}"
    );
    let e = block(backend.whoami(&token)).expect_err("revoked");
    assert_eq!(e.status, 401, "{e}");
    let doc = server.ledger(&test);
    let revoked: Vec<_> = doc["tokens"]
        .as_array()
        .expect("tokens")
        .iter()
        .filter(|t| !t["revoked_at"].is_null())
        .collect();
    assert_eq!(revoked.len(), 1, "{doc}");
    test.run(&["ledger", "show", "--db", &db])
        .code(0)
        .stdout_has("REVOKED");
    test.run(&["ledger", "token", "--revoke", "gp_unknown", "--db", &db])
        .code(3)
        .stderr_has("does not exist");
}

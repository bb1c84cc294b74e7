//! `gameplan serve` and the `http` backend: the real server binary
//! on loopback, driven through the library's `HttpBackend` (what a paid run
//! will call), with a proxy written here between them that loses, breaks,
//! delays and refuses the answers to every money call (register, complete,
//! aggregate complete, finish). Every time: one job, one charge, one
//! completion, one settlement (read back with `gameplan ledger show
//! --json`), and the same body (and Idempotency-Key) on every attempt (the
//! proxy records each request).

use std::collections::{HashMap, VecDeque};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gameplan::backend::api::{
    Cell, EstimateRequest, RegisterRequest, Registered, RunLength, Token,
};
use gameplan::backend::http::{HttpBackend, HttpOptions, Retry};
use gameplan::backend::ledger::DEMO_TOKEN;
use gameplan::backend::{Backend, UploadTarget, api};

use crate::support::{Served, Test};

const GAME: &str = "serve-game";

/// The library's conformance suite, this very source compiled here too (a
/// `cfg(test)` module of the library cannot be called from here); it names
/// `api`, `Backend` and `UploadTarget` from this module.
#[path = "../../../src/backend/conformance.rs"]
mod conformance;

/// What the tests here assert of a server's ledger.
impl Served {
    /// Exactly one job, charged once, and the balance moved by its price only.
    fn assert_one_job_one_charge(&self, test: &Test, key: &str, price: i64) {
        let doc = self.assert_charged_once(test, key, price);
        assert_eq!(doc["accounts"][0]["balance_cents"], 10_000 - price, "{doc}");
    }

    /// Exactly one job, charged once (refunds aside); the ledger's document.
    fn assert_charged_once(&self, test: &Test, key: &str, price: i64) -> serde_json::Value {
        let doc = self.ledger(test);
        let jobs = doc["jobs"].as_array().expect("jobs");
        assert_eq!(jobs.len(), 1, "one job: {doc}");
        assert_eq!(jobs[0]["idempotency_key"], key, "{doc}");
        assert_eq!(jobs[0]["charged_cents"], price, "{doc}");
        let demo = &doc["accounts"][0];
        assert_eq!(demo["charged_cents"], price, "one charge: {doc}");
        assert_eq!(demo["adds_up"], true, "{doc}");
        doc
    }
}

/// The money calls the proxy can fault: each changes the ledger once, and
/// must not twice however often it is repeated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Money {
    /// `POST …/jobs`
    Register,
    /// `POST …/runs/{run}/complete`
    Complete,
    /// `POST …/jobs/{job}/aggregate/complete`
    Aggregate,
    /// `POST …/jobs/{job}/finish`
    Finish,
}

impl Money {
    fn of(method: &str, path: &str) -> Option<Money> {
        if method != "POST" {
            return None;
        }
        if path.ends_with("/jobs") {
            Some(Money::Register)
        } else if path.ends_with("/aggregate/complete") {
            Some(Money::Aggregate)
        } else if path.ends_with("/complete") {
            Some(Money::Complete)
        } else if path.ends_with("/finish") {
            Some(Money::Finish)
        } else {
            None
        }
    }
}

/// What the proxy does to one money request.
#[derive(Debug, Clone, Copy)]
enum Fault {
    /// Forwards it, reads the server's answer, then closes the connection
    /// without a byte of it.
    DropAnswer,
    /// Forwards it and answers 500 whatever the server said.
    ServerError,
    /// Forwards it and holds the answer this long before closing.
    Delay(Duration),
    /// Answers 409 `charge_in_progress` without forwarding it.
    Busy,
}

/// One request as the proxy saw it.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    path: String,
    idempotency_key: Option<String>,
    authorization: Option<String>,
    body: Vec<u8>,
}

/// Faults queued per money call, applied in order to its requests.
type Faults = Mutex<HashMap<Money, VecDeque<Fault>>>;

/// A loopback HTTP/1.1 proxy in front of `upstream`, one request per
/// connection, applying the faults queued for each money call in order.
struct Proxy {
    url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    faults: Arc<Faults>,
}

impl Proxy {
    fn start(upstream: &str) -> Proxy {
        let upstream = upstream
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_owned();
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind proxy");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let faults = Arc::new(Mutex::new(HashMap::new()));
        let (seen_in, faults_in) = (Arc::clone(&seen), Arc::clone(&faults));
        std::thread::spawn(move || {
            for client in listener.incoming().map_while(Result::ok) {
                let (upstream, seen, faults) = (
                    upstream.clone(),
                    Arc::clone(&seen_in),
                    Arc::clone(&faults_in),
                );
                std::thread::spawn(move || relay(client, &upstream, &seen, &faults));
            }
        });
        Proxy { url, seen, faults }
    }

    /// Faults the next requests of `call`, one fault each.
    fn fail_next(&self, call: Money, faults: &[Fault]) {
        self.faults
            .lock()
            .expect("faults")
            .entry(call)
            .or_default()
            .extend(faults);
    }

    /// Every request of `call` the proxy saw, faulted or not.
    fn attempts(&self, call: Money) -> Vec<Seen> {
        self.seen
            .lock()
            .expect("seen")
            .iter()
            .filter(|s| Money::of(&s.method, &s.path) == Some(call))
            .cloned()
            .collect()
    }
}

/// One HTTP message: its head (start line and headers) and its body.
fn read_message(stream: &mut impl Read) -> Option<(String, Vec<u8>)> {
    let mut bytes = Vec::new();
    let mut byte = [0u8; 1];
    while !bytes.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte).ok()? == 0 {
            return None;
        }
        bytes.push(byte[0]);
    }
    let head = String::from_utf8(bytes).ok()?;
    let length = header_of(&head, "content-length").map_or(0, |v| v.parse().unwrap_or(0));
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body).ok()?;
    Some((head, body))
}

fn header_of(head: &str, name: &str) -> Option<String> {
    head.lines().skip(1).find_map(|line| {
        let (key, value) = line.split_once(':')?;
        key.trim()
            .eq_ignore_ascii_case(name)
            .then(|| value.trim().to_owned())
    })
}

/// `head` with `connection: close`, so each side sends one message.
fn closing(head: &str) -> String {
    let mut lines: Vec<&str> = head
        .trim_end()
        .lines()
        .filter(|l| !l.to_ascii_lowercase().starts_with("connection:"))
        .collect();
    lines.push("connection: close");
    format!("{}\r\n\r\n", lines.join("\r\n"))
}

fn forward(upstream: &str, head: &str, body: &[u8]) -> (String, Vec<u8>) {
    let mut server = TcpStream::connect(upstream).expect("connect to the server");
    server
        .write_all(closing(head).as_bytes())
        .expect("forward head");
    server.write_all(body).expect("forward body");
    read_message(&mut server).expect("the server's answer")
}

fn answer(client: &mut TcpStream, head: &str, body: &[u8]) {
    let _ = client.write_all(closing(head).as_bytes());
    let _ = client.write_all(body);
}

fn relay(mut client: TcpStream, upstream: &str, seen: &Mutex<Vec<Seen>>, faults: &Faults) {
    let Some((head, body)) = read_message(&mut client) else {
        return;
    };
    let mut start = head.split_whitespace();
    let method = start.next().unwrap_or_default().to_owned();
    let path = start.next().unwrap_or_default().to_owned();
    let fault = Money::of(&method, &path)
        .and_then(|call| faults.lock().expect("faults").get_mut(&call)?.pop_front());
    seen.lock().expect("seen").push(Seen {
        method,
        path,
        idempotency_key: header_of(&head, "idempotency-key"),
        authorization: header_of(&head, "authorization"),
        body: body.clone(),
    });
    match fault {
        None => {
            let (answer_head, answer_body) = forward(upstream, &head, &body);
            answer(&mut client, &answer_head, &answer_body);
        }
        Some(Fault::DropAnswer) => {
            forward(upstream, &head, &body);
        }
        Some(Fault::ServerError) => {
            forward(upstream, &head, &body);
            let body = br#"{"code":"internal","message":"the proxy says 500"}"#;
            let head = format!(
                "HTTP/1.1 500 Internal Served Error\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                body.len()
            );
            answer(&mut client, &head, body);
        }
        Some(Fault::Delay(wait)) => {
            let (answer_head, answer_body) = forward(upstream, &head, &body);
            std::thread::sleep(wait);
            answer(&mut client, &answer_head, &answer_body);
        }
        Some(Fault::Busy) => {
            let body = br#"{"code":"charge_in_progress","message":"another register holds the ledger right now; retry with the same Idempotency-Key and body"}"#;
            let head = format!(
                "HTTP/1.1 409 Conflict\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                body.len()
            );
            answer(&mut client, &head, body);
        }
    }
    let _ = client.shutdown(Shutdown::Both);
}

/// Short timeouts and quick retries, so a lost answer costs the test little.
fn client(url: &str) -> HttpBackend {
    HttpBackend::with_options(
        url,
        HttpOptions {
            timeout: Duration::from_millis(1500),
            connect_timeout: Duration::from_secs(2),
            retry: Retry {
                attempts: 4,
                first_backoff: Duration::from_millis(50),
                max_backoff: Duration::from_millis(200),
            },
        },
    )
    .expect("http backend")
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// An estimate of two cells through `backend`, and the register body that buys it.
async fn quote(backend: &HttpBackend, token: &Token) -> RegisterRequest {
    let cells: Vec<Cell> = ["kid", "veteran"]
        .iter()
        .map(|p| Cell {
            persona: (*p).to_owned(),
            controller: "standard".to_owned(),
        })
        .collect();
    let estimate = backend
        .estimate(
            token,
            GAME,
            &EstimateRequest {
                cells: cells.clone(),
                modules: Vec::new(),
                run_length: RunLength::Standard,
            },
        )
        .await
        .expect("estimate");
    assert_eq!(estimate.estimate_cents, 100);
    RegisterRequest {
        quote_id: estimate.quote_id,
        confirm_price_cents: estimate.estimate_cents,
        cells,
        modules: Vec::new(),
        run_length: RunLength::Standard,
    }
}

/// A register through a proxy that applies `faults` to its first attempts.
fn register_through(faults: &[Fault], key: &str) -> (Test, Served, Proxy, Registered) {
    let test = Test::new();
    let server = Served::start(&test);
    let token = Token(server.token.clone());
    let proxy = Proxy::start(&server.url);
    proxy.fail_next(Money::Register, faults);
    let backend = client(&proxy.url);
    let registered = runtime().block_on(async {
        let body = quote(&backend, &token).await;
        backend.register(&token, GAME, key, &body).await
    });
    let registered = registered.unwrap_or_else(|e| panic!("register through {faults:?}: {e}"));
    (test, server, proxy, registered)
}

/// Every register attempt the proxy saw carried `key` and the same body.
fn assert_same_key_and_body(proxy: &Proxy, key: &str, attempts: usize) {
    assert_same_request(proxy, Money::Register, Some(key), attempts);
}

/// The proxy saw `attempts` requests of `call`, all with the same path and
/// body, and with `key` as their Idempotency-Key (`None`: no key at all).
fn assert_same_request(proxy: &Proxy, call: Money, key: Option<&str>, attempts: usize) {
    let seen = proxy.attempts(call);
    assert_eq!(seen.len(), attempts, "{call:?} attempts: {seen:?}");
    for attempt in &seen {
        assert_eq!(attempt.idempotency_key.as_deref(), key, "{seen:?}");
        assert_eq!(attempt.path, seen[0].path, "the same path every time");
        assert_eq!(attempt.body, seen[0].body, "the same body every time");
    }
}

#[test]
fn serve_a_register_whose_answer_was_lost_is_replayed_with_the_same_key_and_charged_once() {
    let (test, server, proxy, registered) = register_through(&[Fault::DropAnswer], "key-drop");
    assert!(
        registered.replayed,
        "the second attempt found the first's job"
    );
    assert_same_key_and_body(&proxy, "key-drop", 2);
    server.assert_one_job_one_charge(&test, "key-drop", 100);
}

#[test]
fn serve_a_500_after_the_charge_is_replayed_with_the_same_key_and_charged_once() {
    let (test, server, proxy, registered) = register_through(&[Fault::ServerError], "key-500");
    assert!(registered.replayed);
    assert_same_key_and_body(&proxy, "key-500", 2);
    server.assert_one_job_one_charge(&test, "key-500", 100);
}

#[test]
fn serve_an_answer_later_than_the_client_timeout_is_replayed_with_the_same_key_and_charged_once() {
    let (test, server, proxy, registered) =
        register_through(&[Fault::Delay(Duration::from_millis(2500))], "key-slow");
    assert!(registered.replayed);
    assert_same_key_and_body(&proxy, "key-slow", 2);
    server.assert_one_job_one_charge(&test, "key-slow", 100);
}

#[test]
fn serve_charge_in_progress_backs_off_and_retries_with_the_same_key() {
    let (test, server, proxy, registered) = register_through(&[Fault::Busy], "key-busy");
    assert!(
        !registered.replayed,
        "the 409 never reached the server: the retry bought the job"
    );
    assert_same_key_and_body(&proxy, "key-busy", 2);
    server.assert_one_job_one_charge(&test, "key-busy", 100);
}

#[test]
fn serve_answers_lost_every_time_end_uncertain_after_the_bound_with_one_charge() {
    let test = Test::new();
    let server = Served::start(&test);
    let token = Token(server.token.clone());
    let proxy = Proxy::start(&server.url);
    proxy.fail_next(Money::Register, &[Fault::DropAnswer; 4]);
    let backend = client(&proxy.url);
    let e = runtime()
        .block_on(async {
            let body = quote(&backend, &token).await;
            backend.register(&token, GAME, "key-lost", &body).await
        })
        .expect_err("no answer ever came");
    assert!(e.uncertain, "the server may have charged: {e}");
    assert_eq!(e.code, "connection_lost", "{e}");
    assert!(e.message.contains("after 4 attempts"), "{e}");
    assert!(e.message.contains("same Idempotency-Key"), "{e}");
    assert_same_key_and_body(&proxy, "key-lost", 4);
    server.assert_one_job_one_charge(&test, "key-lost", 100);
}

#[test]
fn serve_the_same_key_with_another_body_stops_at_once_with_422_naming_key_and_field() {
    let test = Test::new();
    let server = Served::start(&test);
    let token = Token(server.token.clone());
    let proxy = Proxy::start(&server.url);
    let backend = client(&proxy.url);
    let e = runtime()
        .block_on(async {
            let body = quote(&backend, &token).await;
            backend
                .register(&token, GAME, "key-422", &body)
                .await
                .expect("the first register");
            let mut other = body.clone();
            other.run_length = RunLength::Long;
            backend.register(&token, GAME, "key-422", &other).await
        })
        .expect_err("another body");
    assert_eq!((e.status, e.code.as_str()), (422, "idempotency_mismatch"));
    assert!(!e.uncertain);
    assert_eq!(e.details.differs, ["run_length"]);
    assert!(e.message.contains("`key-422`"), "{e}");
    assert!(e.message.contains("run_length"), "{e}");
    assert!(e.message.contains("not repeated"), "{e}");
    // One attempt for each register: the 422 was not retried.
    assert_eq!(proxy.attempts(Money::Register).len(), 2);
    server.assert_one_job_one_charge(&test, "key-422", 100);
}

#[test]
fn serve_fifty_concurrent_registers_with_one_key_buy_one_job() {
    let test = Test::new();
    let server = Served::start(&test);
    let token = Token(server.token.clone());
    let backend = Arc::new(client(&server.url));
    let answers = runtime().block_on(async {
        let body = Arc::new(quote(&backend, &token).await);
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..50 {
            let (backend, body) = (Arc::clone(&backend), Arc::clone(&body));
            let token = token.clone();
            tasks.spawn(async move { backend.register(&token, GAME, "key-50", &body).await });
        }
        tasks.join_all().await
    });
    let jobs: Vec<String> = answers
        .iter()
        .map(|a| a.as_ref().expect("every register answers").job.id.clone())
        .collect();
    assert!(jobs.iter().all(|j| *j == jobs[0]), "{jobs:?}");
    let bought = answers
        .iter()
        .filter(|a| a.as_ref().is_ok_and(|r| !r.replayed))
        .count();
    assert_eq!(bought, 1, "one register bought, 49 replayed");
    server.assert_one_job_one_charge(&test, "key-50", 100);
}

/// One raw request, as a client without gameplan would send it.
fn raw(url: &str, request: &str) -> (u16, serde_json::Value) {
    let mut stream = TcpStream::connect(url.trim_start_matches("http://")).expect("connect");
    stream
        .write_all(request.replace('\n', "\r\n").as_bytes())
        .expect("send");
    let (head, body) = read_message(&mut stream).expect("an answer");
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status");
    (status, serde_json::from_slice(&body).expect("a JSON body"))
}

#[test]
fn serve_checks_the_token_and_its_scope_and_never_logs_the_token() {
    let test = Test::new();
    let server = Served::start(&test);
    let db = server.db.to_str().expect("utf-8").to_owned();
    let made = test.run(&[
        "ledger",
        "token",
        "--scopes",
        "playtest:model,playtest:upload",
        "--db",
        &db,
    ]);
    let secret = made.code(0).stdout.trim().to_owned();
    assert!(secret.starts_with("gp_"), "{secret}");

    let (status, body) = raw(
        &server.url,
        "POST /v1/games/serve-game/jobs HTTP/1.1\nhost: x\nidempotency-key: k\ncontent-length: 2\nconnection: close\n\n{}",
    );
    assert_eq!((status, body["code"].as_str()), (401, Some("unauthorized")));
    assert!(
        body["message"]
            .as_str()
            .is_some_and(|m| m.contains("gameplan ledger token"))
    );

    let backend = client(&server.url);
    let token = Token(secret.clone());
    let e = runtime()
        .block_on(async {
            let body = quote(&client(&server.url), &Token(server.token.clone())).await;
            backend.register(&token, GAME, "key-scope", &body).await
        })
        .expect_err("no playtest:write");
    assert_eq!((e.status, e.code.as_str()), (403, "missing_scope"), "{e}");
    assert_eq!(e.details.scope.as_deref(), Some("playtest:write"));
    assert!(e.message.contains("`playtest:write`"), "{e}");
    runtime()
        .block_on(backend.whoami(&token))
        .expect("whoami needs no scope");

    let doc = server.ledger(&test);
    assert_eq!(doc["jobs"], serde_json::json!([]), "nothing bought: {doc}");
    let expected = [
        "POST /v1/games/serve-game/jobs 401 ",
        "POST /v1/games/serve-game/jobs 403 ",
        "POST /v1/games/serve-game/estimate 200 ",
        "GET /v1/whoami 200 ",
    ];
    let log = server.log_once(|log| {
        expected
            .iter()
            .all(|e| log.iter().any(|l| l.starts_with(e) && l.ends_with("ms")))
    });
    for expected in expected {
        assert!(
            log.iter()
                .any(|l| l.starts_with(expected) && l.ends_with("ms")),
            "no `{expected}...ms` line in {log:?}"
        );
    }
    let all = log.join("\n");
    assert!(!all.contains(&secret), "the token is in the log: {all}");
    assert!(
        !all.contains(DEMO_TOKEN),
        "the demo token is in the log: {all}"
    );
    assert!(!all.to_ascii_lowercase().contains("bearer"), "{all}");
}

#[test]
fn serve_uploads_reach_the_run_under_nested_names_over_http() {
    use gameplan::backend::api::{RunRef, UploadRequest};
    let test = Test::new();
    let server = Served::start(&test);
    let token = Token(server.token.clone());
    let proxy = Proxy::start(&server.url);
    let backend = client(&proxy.url);
    let uploaded = runtime().block_on(async {
        let body = quote(&backend, &token).await;
        let job = backend
            .register(&token, GAME, "key-files", &body)
            .await
            .expect("register")
            .job;
        let run = RunRef {
            game: GAME.to_owned(),
            job: job.id.clone(),
            run: job.runs[0].id.clone(),
        };
        let bytes = b"\x89PNG not really".to_vec();
        backend
            .upload(
                &token,
                &UploadTarget::Run(run),
                &UploadRequest {
                    name: "screenshots/step 1.png".to_owned(),
                    sha256: gameplan_sha256(&bytes),
                    body: bytes,
                },
            )
            .await
    });
    let uploaded = uploaded.expect("upload");
    assert_eq!(uploaded.name, "screenshots/step 1.png");
    let put = proxy
        .seen
        .lock()
        .expect("seen")
        .iter()
        .find(|s| s.method == "PUT")
        .cloned()
        .expect("a PUT");
    assert!(
        put.path.ends_with("/files/screenshots/step%201.png"),
        "{}",
        put.path
    );
    assert!(put.authorization.is_some_and(|a| a.starts_with("Bearer ")));
}

fn gameplan_sha256(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(bytes)
        .iter()
        .fold(String::new(), |mut hex, b| {
            let _ = std::fmt::Write::write_fmt(&mut hex, format_args!("{b:02x}"));
            hex
        })
}

#[test]
fn serve_refuses_an_address_in_use_with_exit_3_and_stops_on_sigterm_with_0() {
    let test = Test::new();
    let mut server = Served::start(&test);
    let addr = server.url.trim_start_matches("http://").to_owned();
    test.run(&["serve", "--addr", &addr, "--db", "other.sqlite"])
        .code(3)
        .stderr_has(&format!("cannot listen on {addr}"))
        .stderr_has("pass another --addr");
    assert_eq!(server.stop().code(), Some(0));
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        server.log().iter().any(|l| l == "stopped"),
        "{:?}",
        server.log()
    );
}

#[test]
fn serve_a_tls_failure_stops_at_once_and_says_so() {
    // A plain-HTTP listener where the client expects TLS: the handshake
    // fails, and the client must not try again.
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("https://{}", listener.local_addr().expect("addr"));
    let connections = Arc::new(Mutex::new(0));
    let count = Arc::clone(&connections);
    std::thread::spawn(move || {
        for mut stream in listener.incoming().map_while(Result::ok) {
            *count.lock().expect("count") += 1;
            let _ = stream.write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n");
            let _ = stream.shutdown(Shutdown::Both);
        }
    });
    let token = Token("gp_any".to_owned());
    let e = runtime()
        .block_on(client(&url).whoami(&token))
        .expect_err("no TLS there");
    assert_eq!(e.code, "tls_failed", "{e}");
    assert!(!e.uncertain);
    assert!(e.message.contains("TLS connection"), "{e}");
    assert_eq!(*connections.lock().expect("count"), 1, "tried once: {e}");
}

#[test]
fn serve_whoami_and_estimate_over_http_leave_the_ledger_byte_for_byte_unchanged() {
    let test = Test::new();
    let db = test.path("served.sqlite");
    let db_arg = db.to_str().expect("utf-8").to_owned();
    let narrow = test.run(&[
        "ledger",
        "token",
        "--scopes",
        "playtest:upload",
        "--db",
        &db_arg,
    ]);
    let narrow = Token(narrow.code(0).stdout.trim().to_owned());
    let full = test.run(&[
        "ledger",
        "token",
        "--scopes",
        crate::support::ALL_SCOPES,
        "--db",
        &db_arg,
    ]);
    let token = Token(full.code(0).stdout.trim().to_owned());
    let (bytes_before, show_before) = crate::money::ledger::closed_ledger(&test, &db);

    let mut server = Served::bare(&test.path(""), &db);
    let backend = client(&server.url);
    runtime().block_on(async {
        backend.whoami(&token).await.expect("whoami");
        quote(&backend, &token).await;
        let e = backend
            .estimate(
                &narrow,
                GAME,
                &EstimateRequest {
                    cells: Vec::new(),
                    modules: Vec::new(),
                    run_length: RunLength::Standard,
                },
            )
            .await
            .expect_err("no playtest:write");
        assert_eq!(e.code, "missing_scope");
        let e = backend
            .whoami(&Token("gp_nobody".into()))
            .await
            .expect_err("unknown token");
        assert_eq!(e.code, "unauthorized");
    });
    // The server closes its connection to the ledger as it stops.
    assert_eq!(server.stop().code(), Some(0));
    let log = server.log_once(|log| {
        log.iter()
            .any(|l| l.starts_with("POST /v1/games/serve-game/estimate 200 "))
    });
    assert!(
        log.iter()
            .any(|l| l.starts_with("POST /v1/games/serve-game/estimate 200 ")),
        "the estimate reached the server: {log:?}"
    );

    let (bytes_after, show_after) = crate::money::ledger::closed_ledger(&test, &db);
    assert_eq!(show_after, show_before);
    assert!(
        bytes_after == bytes_before,
        "whoami and estimate over HTTP changed the ledger file"
    );
}

/// Every fault the proxy makes, each once: an answer lost after the server
/// did the call, a 500 after it did, an answer held past the client's
/// timeout (1.5 s), and a 409 `charge_in_progress` the server never saw.
const FAULTS: [Fault; 4] = [
    Fault::DropAnswer,
    Fault::ServerError,
    Fault::Delay(Duration::from_millis(2500)),
    Fault::Busy,
];

impl Fault {
    /// Whether the faulted attempt reached the server (so the retry that
    /// succeeds is a replay of a call already done).
    fn reaches_server(self) -> bool {
        !matches!(self, Fault::Busy)
    }
}

/// A job of two cells bought through the proxy (no fault): run 0 played
/// and uploaded its report, run 1 never started, the aggregate's two files
/// uploaded. What the money calls after register send.
struct Bought {
    /// The test server's token, which the calls borrow.
    token: Token,
    job: gameplan::backend::api::JobRef,
    run: gameplan::backend::api::RunRef,
    complete: gameplan::backend::api::CompleteRequest,
    aggregate: gameplan::backend::api::AggregateCompleteRequest,
}

async fn buy_and_play(backend: &HttpBackend, token: &Token, key: &str) -> Bought {
    use gameplan::backend::api::{
        AggregateCompleteRequest, CompleteRequest, FileDigest, JobRef, ManifestEntry, RunRef,
        RunState, TransitionRequest, UploadRequest,
    };
    let body = quote(backend, token).await;
    let job = backend
        .register(token, GAME, key, &body)
        .await
        .expect("register")
        .job;
    let run = RunRef {
        game: GAME.to_owned(),
        job: job.id.clone(),
        run: job.runs[0].id.clone(),
    };
    for to in [
        RunState::Launching,
        RunState::Playing,
        RunState::Reporting,
        RunState::Uploading,
    ] {
        backend
            .transition(token, &run, &TransitionRequest { to, reason: None })
            .await
            .expect("transition");
    }
    let upload = |name: &str, bytes: &[u8]| UploadRequest {
        name: name.to_owned(),
        sha256: gameplan_sha256(bytes),
        body: bytes.to_vec(),
    };
    let report = b"# kid played";
    backend
        .upload(
            token,
            &UploadTarget::Run(run.clone()),
            &upload("report.md", report),
        )
        .await
        .expect("upload the report");
    let job_ref = JobRef {
        game: GAME.to_owned(),
        job: job.id.clone(),
    };
    let (md, json) = (&b"# merged"[..], &b"{\"findings\": []}"[..]);
    for (name, bytes) in [("aggregate.md", md), ("aggregate.json", json)] {
        backend
            .upload(
                token,
                &UploadTarget::Job(job_ref.clone()),
                &upload(name, bytes),
            )
            .await
            .expect("upload the aggregate");
    }
    let digest = |bytes: &[u8]| FileDigest {
        size: i64::try_from(bytes.len()).expect("small"),
        sha256: gameplan_sha256(bytes),
    };
    Bought {
        token: token.clone(),
        job: job_ref,
        complete: CompleteRequest {
            state: RunState::Succeeded,
            reason: None,
            actions_taken: 3,
            quit_reason: Some("done".to_owned()),
            report: serde_json::json!({"findings": []}),
            report_md: "# kid played".to_owned(),
            manifest: vec![ManifestEntry {
                path: "report.md".to_owned(),
                size: i64::try_from(report.len()).expect("small"),
                sha256: gameplan_sha256(report),
            }],
        },
        aggregate: AggregateCompleteRequest {
            md: digest(md),
            json: digest(json),
        },
        run,
    }
}

/// For each fault: a fresh server and proxy, a job bought and played, then
/// `act` (the call `call`) done with that fault on its first attempt; `check` gets what the
/// http backend ended with.
fn each_fault_on<T: std::fmt::Debug>(
    call: Money,
    key: &str,
    act: impl for<'a> Fn(&'a HttpBackend, &'a Bought) -> gameplan::backend::Call<'a, T>,
    mut check: impl FnMut(Fault, &Test, &Served, &HttpBackend, &Bought, T),
) {
    for fault in FAULTS {
        let test = Test::new();
        let server = Served::start(&test);
        let token = Token(server.token.clone());
        let proxy = Proxy::start(&server.url);
        let backend = client(&proxy.url);
        let runtime = runtime();
        let bought = runtime.block_on(buy_and_play(&backend, &token, key));
        if call == Money::Finish {
            runtime
                .block_on(backend.complete(&token, &bought.run, &bought.complete))
                .expect("complete before finish");
        }
        proxy.fail_next(call, &[fault]);
        let answer = runtime
            .block_on(act(&backend, &bought))
            .unwrap_or_else(|e| panic!("{call:?} through {fault:?}: {e}"));
        assert_same_request(&proxy, call, None, 2);
        if call == Money::Finish {
            server.assert_charged_once(&test, key, 100);
        } else {
            server.assert_one_job_one_charge(&test, key, 100);
        }
        check(fault, &test, &server, &backend, &bought, answer);
    }
}

#[test]
fn serve_a_complete_whose_answer_was_lost_broken_late_or_409_completes_once() {
    use gameplan::backend::api::RunState;
    each_fault_on(
        Money::Complete,
        "key-complete",
        |backend, bought| backend.complete(&bought.token, &bought.run, &bought.complete),
        |fault, test, server, backend, bought, completed| {
            assert_eq!(completed.run.state, RunState::Succeeded, "{fault:?}");
            assert_eq!(
                completed.changed,
                !fault.reaches_server(),
                "{fault:?}: the retry of a complete the server did is `changed: false`"
            );
            let stored = runtime()
                .block_on(backend.get_run(&bought.token, &bought.run))
                .expect("get run");
            assert_eq!(completed.run, stored, "{fault:?}: the stored run");
            let doc = server.ledger(test);
            let runs = &doc["jobs"][0]["runs"];
            assert_eq!(runs[0]["state"], "succeeded", "{fault:?}: {doc}");
            assert_eq!(runs[1]["state"], "queued", "{fault:?}: {doc}");
        },
    );
}

#[test]
fn serve_an_aggregate_complete_whose_answer_was_lost_broken_late_or_409_publishes_once() {
    each_fault_on(
        Money::Aggregate,
        "key-aggregate",
        |backend, bought| backend.aggregate_complete(&bought.token, &bought.job, &bought.aggregate),
        |fault, _test, _server, backend, bought, published| {
            assert_eq!(published.job_id, bought.job.job, "{fault:?}");
            assert_eq!(
                published.changed,
                !fault.reaches_server(),
                "{fault:?}: the retry of a publish the server did is `changed: false`"
            );
            let job = runtime()
                .block_on(backend.get_job(&bought.token, &bought.job))
                .expect("get job");
            assert!(job.aggregate_published, "{fault:?}");
            assert_eq!(job.state, "open", "{fault:?}: publishing settles nothing");
        },
    );
}

#[test]
fn serve_a_finish_whose_answer_was_lost_broken_late_or_409_settles_and_refunds_once() {
    each_fault_on(
        Money::Finish,
        "key-finish",
        |backend, bought| backend.finish(&bought.token, &bought.job),
        |fault, test, server, backend, bought, finished| {
            assert_eq!(
                finished.replayed,
                fault.reaches_server(),
                "{fault:?}: the retry of a finish the server did is a replay"
            );
            // Run 1 never played: refunded, once.
            assert_eq!(
                (
                    finished.settlement.charged_cents,
                    finished.settlement.refunded_cents
                ),
                (100, 50),
                "{fault:?}"
            );
            assert_eq!(finished.balance_cents, 10_000 - 50, "{fault:?}");
            let job = runtime()
                .block_on(backend.get_job(&bought.token, &bought.job))
                .expect("get job");
            assert_eq!(
                job.settlement.as_ref(),
                Some(&finished.settlement),
                "{fault:?}: the stored settlement"
            );
            let doc = server.ledger(test);
            let demo_account = &doc["accounts"][0];
            assert_eq!(demo_account["refunded_cents"], 50, "one refund: {doc}");
            assert_eq!(demo_account["balance_cents"], 10_000 - 50, "{doc}");
            assert_eq!(demo_account["adds_up"], true, "{doc}");
            let settlements = doc["jobs"][0]["settlements"].as_array().expect("list");
            assert_eq!(settlements.len(), 1, "one settlement: {doc}");
            // One more finish, unfaulted: the same settlement, nothing refunded.
            let again = runtime()
                .block_on(backend.finish(&bought.token, &bought.job))
                .expect("finish again");
            assert!(again.replayed);
            assert_eq!(again.settlement, finished.settlement);
            assert_eq!(again.balance_cents, finished.balance_cents);
        },
    );
}

#[test]
fn serve_the_conformance_suite_passes_against_the_real_server_binary() {
    let test = Test::new();
    let server = Served::start(&test);
    let token = Token(server.token.clone());
    let backend = HttpBackend::new(&server.url).expect("http backend");
    runtime().block_on(conformance::one_job(&backend, &token, "conformance-serve"));
    // The same money as the suite's run against `local` ends with.
    let doc = server.assert_charged_once(&test, "conformance-serve", 150);
    assert_eq!(doc["accounts"][0]["balance_cents"], 10_000 - 50, "{doc}");
    assert_eq!(doc["accounts"][0]["refunded_cents"], 100, "{doc}");
    let calls = [
        "GET /v1/whoami 200 ",
        "POST /v1/games/conformance-game/estimate 200 ",
        "POST /v1/games/conformance-game/jobs 422 ",
        "POST /v1/games/conformance-game/jobs/job-1/finish 200 ",
    ];
    let log = server.log_once(|log| {
        calls
            .iter()
            .all(|call| log.iter().any(|l| l.starts_with(call)))
    });
    for call in calls {
        assert!(
            log.iter().any(|l| l.starts_with(call)),
            "the suite went through the server: no `{call}` in {log:?}"
        );
    }
}

#[test]
fn serve_a_token_is_in_no_error_body_client_error_log_or_ledger_show() {
    let test = Test::new();
    let server = Served::start(&test);
    let token = Token(server.token.clone());
    let db = server.db.to_str().expect("utf-8").to_owned();
    let token_of = |scopes: &str| {
        let made = test.run(&["ledger", "token", "--scopes", scopes, "--db", &db]);
        made.code(0).stdout.trim().to_owned()
    };
    let full = token_of("playtest:write,playtest:model,playtest:upload");
    let narrow = token_of("playtest:upload");
    // Shaped like a real token, known to no ledger.
    let unknown = format!("gp_{}", "5eC7e7".repeat(10));
    let secrets = [full.as_str(), narrow.as_str(), unknown.as_str()];
    let assert_clean = |what: &str, text: &str| {
        for secret in secrets {
            assert!(!text.contains(secret), "a token is in {what}: {text}");
        }
    };

    let requests = [
        // Unknown token: 401, body or not.
        (
            format!(
                "POST /v1/games/g/jobs HTTP/1.1\nhost: x\nauthorization: Bearer {unknown}\nidempotency-key: k\ncontent-length: 2\nconnection: close\n\n{{}}"
            ),
            401,
        ),
        // A scheme that is not Bearer, the token after it: 401.
        (
            format!(
                "GET /v1/whoami HTTP/1.1\nhost: x\nauthorization: Token {full}\nconnection: close\n\n"
            ),
            401,
        ),
        // A token missing the scope: 403, naming the scope only.
        (
            format!(
                "POST /v1/games/g/estimate HTTP/1.1\nhost: x\nauthorization: Bearer {narrow}\ncontent-length: 8\nconnection: close\n\nnot json"
            ),
            403,
        ),
        // A good token and a malformed body: 400 quoting the body's error.
        (
            format!(
                "POST /v1/games/g/estimate HTTP/1.1\nhost: x\nauthorization: Bearer {full}\ncontent-length: 8\nconnection: close\n\nnot json"
            ),
            400,
        ),
        // A token in the query string too: the log and the 404 drop the query.
        (
            format!(
                "GET /v1/nowhere?access_token={full} HTTP/1.1\nhost: x\nauthorization: Bearer {full}\nconnection: close\n\n"
            ),
            404,
        ),
    ];
    for (request, status) in &requests {
        let (got, body) = raw(&server.url, request);
        assert_eq!(got, *status, "{body}");
        assert_clean("an error body", &body.to_string());
    }

    // What the http backend makes of refusals, as a run would print them.
    let backend = client(&server.url);
    let errors = runtime().block_on(async {
        let body = quote(&backend, &token).await;
        vec![
            backend
                .register(&Token(unknown.clone()), GAME, "key-secret", &body)
                .await
                .expect_err("unknown token"),
            backend
                .whoami(&Token(unknown.clone()))
                .await
                .expect_err("unknown token"),
            backend
                .register(&Token(narrow.clone()), GAME, "key-secret", &body)
                .await
                .expect_err("no playtest:write"),
        ]
    });
    for e in &errors {
        assert!(matches!(e.status, 401 | 403), "{e}");
        assert_clean("a client error", &format!("{e} {e:?}"));
    }

    for args in [&["ledger", "show"][..], &["ledger", "show", "--json"][..]] {
        let args: Vec<&str> = args.iter().copied().chain(["--db", &db]).collect();
        let shown = test.run(&args);
        shown.code(0);
        assert_clean(
            "`ledger show`",
            &format!("{}{}", shown.stdout, shown.stderr),
        );
    }
    let log = server.log_once(|log| log.iter().any(|l| l.starts_with("GET /v1/nowhere 404 ")));
    assert!(
        log.iter().any(|l| l.starts_with("GET /v1/nowhere 404 ")),
        "{log:?}"
    );
    assert_clean("the server's log", &log.join("\n"));
}

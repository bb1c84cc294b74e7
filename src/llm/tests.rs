//! The client against a scripted OpenAI-compatible server on loopback.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::*;

/// What the scripted server answers to one request.
#[derive(Clone)]
enum Reply {
    /// A status and a body.
    Http(u16, String),
    /// Accepts, reads, and never answers.
    Silent,
}

fn completion(text: &str, input: u64, output: u64) -> Reply {
    Reply::Http(
        200,
        serde_json::json!({
            "choices": [{"message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": input, "completion_tokens": output},
        })
        .to_string(),
    )
}

/// A loopback server answering from `script` (its last reply repeats);
/// the requests it saw (the Authorization header, the body).
struct Server {
    url: String,
    seen: Arc<Mutex<Vec<(String, String)>>>,
}

impl Server {
    fn start(script: Vec<Reply>) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}/v1", listener.local_addr().expect("addr"));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        std::thread::spawn(move || {
            for (n, stream) in listener.incoming().enumerate() {
                let Ok(mut stream) = stream else { return };
                let (auth, body) = read_request(&mut stream);
                log.lock().unwrap().push((auth, body));
                let reply = script[n.min(script.len() - 1)].clone();
                match reply {
                    Reply::Silent => {
                        std::thread::spawn(move || {
                            std::thread::sleep(Duration::from_secs(30));
                            drop(stream);
                        });
                    }
                    Reply::Http(status, body) => {
                        let _ = write!(
                            stream,
                            "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                            body.len()
                        );
                    }
                }
            }
        });
        Server { url, seen }
    }

    fn requests(&self) -> usize {
        self.seen.lock().unwrap().len()
    }
}

fn read_request(stream: &mut TcpStream) -> (String, String) {
    let mut bytes = Vec::new();
    let mut buf = [0u8; 4096];
    let header_end = loop {
        let n = stream.read(&mut buf).unwrap_or(0);
        if n == 0 {
            return (String::new(), String::new());
        }
        bytes.extend_from_slice(&buf[..n]);
        if let Some(i) = bytes.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&bytes[..header_end]).to_string();
    let header = |name: &str| {
        head.lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
            })
            .unwrap_or_default()
    };
    let length: usize = header("content-length").parse().unwrap_or(0);
    while bytes.len() < header_end + length {
        let n = stream.read(&mut buf).unwrap_or(0);
        if n == 0 {
            break;
        }
        bytes.extend_from_slice(&buf[..n]);
    }
    let body = String::from_utf8_lossy(&bytes[header_end..]).to_string();
    (header("authorization"), body)
}

fn config(server: &Server) -> ClientConfig {
    let mut config = ClientConfig::new("test-model");
    config.base_url.clone_from(&server.url);
    config.api_key = Some("sk-canary-123".into());
    config.timeout = Duration::from_millis(500);
    config.backoff = Duration::from_millis(10);
    config.price = Some(Price {
        input_per_mtok: 1.0,
        output_per_mtok: 2.0,
    });
    config
}

/// Says "hi" to `client` once, a plain call, on a runtime of its own.
fn hi(client: &Client) -> Result<Answer, LlmError> {
    runtime().block_on(client.chat(&[Message::user("hi")], 16))
}

/// The schema the structured-output tests ask with: any object.
fn object_schema() -> serde_json::Value {
    serde_json::json!({"type": "object"})
}

/// Asks `client` "go" on `rt` with [`object_schema`]: one structured call.
fn go(rt: &tokio::runtime::Runtime, client: &Client) -> Result<Answer, LlmError> {
    let schema = object_schema();
    let call = Call {
        schema: Some(&schema),
        ..Call::default()
    };
    rt.block_on(client.chat_with(&[Message::user("go")], 16, call))
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

#[test]
fn a_completion_is_read_counted_and_priced_and_the_key_goes_as_a_bearer() {
    let server = Server::start(vec![completion("north", 1000, 10)]);
    let client = Client::new(config(&server), Redactor::default()).expect("client");
    let answer = runtime()
        .block_on(client.chat(&[Message::user("where?")], 16))
        .expect("answer");
    assert_eq!(answer.text, "north");
    let usage = client.usage();
    assert_eq!(
        (usage.calls, usage.input_tokens, usage.output_tokens),
        (1, 1000, 10)
    );
    let cost = usage.cost_usd.expect("priced");
    assert!((cost - 0.001_02).abs() < 1e-9, "{cost}");
    let seen = server.seen.lock().unwrap();
    assert_eq!(seen[0].0, "Bearer sk-canary-123");
    let body: serde_json::Value = serde_json::from_str(&seen[0].1).expect("json body");
    assert_eq!(body["model"], "test-model");
    assert_eq!(body["max_tokens"], 16);
    assert_eq!(body["messages"][0]["content"], "where?");
}

#[test]
fn retries_are_bounded_and_a_server_that_keeps_failing_is_unreachable() {
    let server = Server::start(vec![Reply::Http(503, "{}".into())]);
    let mut cfg = config(&server);
    cfg.max_attempts = 3;
    let client = Client::new(cfg, Redactor::default()).expect("client");
    let err = hi(&client).expect_err("unreachable");
    assert!(
        matches!(err, LlmError::Unreachable { attempts: 3, .. }),
        "{err}"
    );
    assert_eq!(
        server.requests(),
        3,
        "the retry bound is the number of requests"
    );
    assert_eq!(client.usage().retries, 2);
}

#[test]
fn a_429_then_an_answer_is_retried_and_a_401_is_not() {
    let server = Server::start(vec![Reply::Http(429, "{}".into()), completion("ok", 1, 1)]);
    let client = Client::new(config(&server), Redactor::default()).expect("client");
    let answer = hi(&client);
    assert_eq!(answer.expect("second try").text, "ok");
    assert_eq!(server.requests(), 2);

    let server = Server::start(vec![Reply::Http(
        401,
        r#"{"error":"bad key sk-canary-123"}"#.into(),
    )]);
    let redactor = Redactor::default();
    redactor.register("sk-canary-123");
    let client = Client::new(config(&server), redactor).expect("client");
    let err = hi(&client).expect_err("refused");
    assert!(
        matches!(err, LlmError::Refused { status: 401, .. }),
        "{err}"
    );
    assert_eq!(server.requests(), 1, "a 4xx is not repeated");
    let text = err.to_string();
    assert!(
        !text.contains("sk-canary-123") && text.contains("[redacted]"),
        "{text}"
    );
}

#[test]
fn a_silent_server_times_out_every_attempt() {
    let server = Server::start(vec![Reply::Silent]);
    let mut cfg = config(&server);
    cfg.max_attempts = 2;
    cfg.timeout = Duration::from_millis(300);
    let client = Client::new(cfg, Redactor::default()).expect("client");
    let started = Instant::now();
    let err = hi(&client).expect_err("unreachable");
    assert!(
        matches!(err, LlmError::Unreachable { attempts: 2, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("no answer within 0.3 s"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[test]
fn an_answer_larger_than_the_cap_is_a_bad_answer() {
    let huge = "x".repeat(MAX_ANSWER_BYTES);
    let server = Server::start(vec![completion(&huge, 1, 1)]);
    let client = Client::new(config(&server), Redactor::default()).expect("client");
    let err = hi(&client).expect_err("too large");
    assert_eq!(
        err,
        LlmError::BadAnswer(format!(
            "the answer is larger than {} KiB",
            MAX_ANSWER_BYTES / 1024
        ))
    );
    // Just under the cap is read.
    let fits = "x".repeat(MAX_ANSWER_BYTES - 200);
    let server = Server::start(vec![completion(&fits, 1, 1)]);
    let client = Client::new(config(&server), Redactor::default()).expect("client");
    let answer = hi(&client);
    assert_eq!(answer.expect("fits").text.len(), fits.len());
}

#[test]
fn a_call_that_could_pass_the_budget_is_never_sent() {
    // Each answer reports a million input tokens: 1 USD a call.
    let server = Server::start(vec![completion("north", 1_000_000, 0)]);
    let mut cfg = config(&server);
    cfg.max_usd = Some(2.5);
    let client = Client::new(cfg, Redactor::default()).expect("client");
    let rt = runtime();
    for _ in 0..2 {
        rt.block_on(client.chat(&[Message::user("go")], 16))
            .expect("within budget");
    }
    let err = rt
        .block_on(client.chat(&[Message::user("go")], 16))
        .and_then(|_| rt.block_on(client.chat(&[Message::user("go")], 16)))
        .expect_err("budget");
    assert!(matches!(err, LlmError::Budget { .. }), "{err}");
    let usage = client.usage();
    assert!(usage.cost_usd.expect("priced") >= 2.5, "{usage:?}");
    assert_eq!(
        server.requests() as u64,
        usage.calls,
        "no request after the budget stop"
    );
    assert_eq!(server.requests(), 3);
}

#[test]
fn builtin_prices_know_a_few_models_and_their_snapshots() {
    assert!(Price::builtin("gpt-4o-mini").is_some());
    assert_eq!(
        Price::builtin("gpt-4o-mini-2024-07-18"),
        Price::builtin("gpt-4o-mini")
    );
    assert_ne!(Price::builtin("gpt-4o"), Price::builtin("gpt-4o-mini"));
    assert_eq!(Price::builtin("llama3.2:3b"), None);
    assert_eq!(Price::builtin("gpt-4o-minix"), None);
}

#[test]
fn the_config_never_prints_its_key() {
    let mut cfg = ClientConfig::new("m");
    cfg.api_key = Some("sk-canary-123".into());
    let shown = format!("{cfg:?}");
    assert!(!shown.contains("sk-canary-123"), "{shown}");
    assert_eq!(cfg.endpoint(), "https://api.openai.com/v1/chat/completions");
    cfg.base_url = "http://127.0.0.1:11434/v1/chat/completions/".into();
    assert_eq!(cfg.endpoint(), "http://127.0.0.1:11434/v1/chat/completions");
}

#[test]
fn json_is_found_in_prose_and_fences_and_nothing_else_is_taken_for_it() {
    let verdict = serde_json::json!({"verdict": "clear", "findings": []});
    for text in [
        r#"{"verdict": "clear", "findings": []}"#,
        "Here you go:\n```json\n{\"verdict\": \"clear\", \"findings\": []}\n```\nThanks.",
        "Verdict follows {\"verdict\": \"clear\", \"findings\": []} as asked.",
    ] {
        assert_eq!(json_in(text), Some(verdict.clone()), "{text}");
    }
    assert_eq!(json_in("no json {here"), None);
    assert_eq!(json_in("[1, 2]"), None, "an object, not any JSON");
    // A hostile answer of braces, at the answer cap, is refused quickly.
    let braces = "{}".repeat(MAX_ANSWER_BYTES / 2).replace("{}", "{x}");
    let started = Instant::now();
    assert_eq!(json_in(&braces), None);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
}

/// A schema asked of a server that refuses `OpenAI`'s dialect (422) and
/// takes another: the call is sent
/// again at once in the next dialect, not counted as a retry, and later
/// calls start there.
#[test]
fn structured_output_moves_to_the_dialect_the_server_takes_and_stays_there() {
    let server = Server::start(vec![
        Reply::Http(
            422,
            r#"{"detail":"response_format.type: json_schema"}"#.into(),
        ),
        completion(r#"{"action":"north"}"#, 10, 5),
        completion(r#"{"action":"east"}"#, 10, 5),
    ]);
    let client = Client::new(config(&server), Redactor::default()).expect("client");
    let rt = runtime();
    let first = go(&rt, &client).expect("answered in the second dialect");
    assert!(first.structured);
    assert_eq!(first.text, r#"{"action":"north"}"#);
    go(&rt, &client).expect("answered");
    let bodies: Vec<serde_json::Value> = server
        .seen
        .lock()
        .unwrap()
        .iter()
        .map(|(_, body)| serde_json::from_str(body).expect("json body"))
        .collect();
    let formats: Vec<&str> = bodies
        .iter()
        .map(|b| b["response_format"]["type"].as_str().unwrap_or("none"))
        .collect();
    assert_eq!(formats, ["json_schema", "json_object", "json_object"]);
    assert_eq!(bodies[1]["response_format"]["schema"], object_schema());
    assert_eq!(client.usage().retries, 0);
    assert_eq!(client.dialect(), Dialect::JsonObject);
}

/// A server that takes no dialect is asked in plain text, and a plain
/// request it refuses is the model's refusal (a wrong key stays a wrong key).
#[test]
fn a_server_that_takes_no_structured_output_is_asked_in_plain_text() {
    let server = Server::start(vec![
        Reply::Http(400, "unknown field response_format".into()),
        Reply::Http(400, "unknown field response_format".into()),
        completion("north", 10, 5),
        Reply::Http(401, "bad key".into()),
    ]);
    let client = Client::new(config(&server), Redactor::default()).expect("client");
    let rt = runtime();
    let answer = go(&rt, &client).expect("answered in plain text");
    assert!(!answer.structured);
    assert_eq!(client.dialect(), Dialect::Plain);
    let refused = go(&rt, &client).unwrap_err();
    assert!(
        matches!(refused, LlmError::Refused { status: 401, .. }),
        "{refused:?}"
    );
    assert_eq!(server.requests(), 4);
}

/// A call that may wait once ("How it felt") is not sent again after a
/// timeout: a local server would still be generating the first answer.
#[test]
fn a_call_asked_once_on_timeout_is_not_sent_again() {
    let server = Server::start(vec![Reply::Silent]);
    let client = Client::new(config(&server), Redactor::default()).expect("client");
    let call = Call {
        timeout: Some(Duration::from_millis(300)),
        once_on_timeout: true,
        ..Call::default()
    };
    let started = Instant::now();
    let e = runtime()
        .block_on(client.chat_with(&[Message::user("how was it?")], 16, call))
        .unwrap_err();
    assert!(
        matches!(e, LlmError::Unreachable { attempts: 1, .. }),
        "{e:?}"
    );
    assert!(e.to_string().contains("0.3 s"), "{e}");
    assert!(started.elapsed() < Duration::from_secs(2));
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(server.requests(), 1);
}

/// llama-cpp-python 0.3.36's server answers `OpenAI`'s dialect with a 500
/// naming `response_format` (its words below): not a failure to retry
/// three times, a dialect to leave at once.
#[test]
fn a_500_that_names_response_format_is_a_refused_dialect_not_a_retry() {
    let server = Server::start(vec![
        Reply::Http(
            500,
            r#"{"error":{"message":"1 validation error:\n  {'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), 'msg': \"Input should be 'text' or 'json_object'\"}","type":"internal_server_error"}}"#.into(),
        ),
        completion(r#"{"action":"north"}"#, 10, 5),
        Reply::Http(500, r#"{"error":{"message":"out of memory"}}"#.into()),
        completion(r#"{"action":"east"}"#, 10, 5),
    ]);
    let client = Client::new(config(&server), Redactor::default()).expect("client");
    let rt = runtime();
    let first = go(&rt, &client).expect("answered in the next dialect");
    assert!(first.structured);
    assert_eq!(client.usage().retries, 0);
    assert_eq!(client.dialect(), Dialect::JsonObject);
    // Any other 500 is the server's trouble: retried, the dialect kept.
    go(&rt, &client).expect("answered after a retry");
    assert_eq!(client.usage().retries, 1);
    assert_eq!(client.dialect(), Dialect::JsonObject);
}

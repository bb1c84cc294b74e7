//! `gameplan serve`'s connections: idle sockets past the cap cannot starve
//! a real client (the longest-idle one is closed for it), a connection that
//! sends nothing is closed after the first-byte timeout, and a newcomer
//! when every connection is busy gets a 503 at once. The bounds asserted
//! are behaviour (well within the 30 s idle timeout), not benchmarks.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use gameplan::backend::Backend;
use gameplan::backend::api::Token;

use super::security::{block, client};
use crate::support::{ALL_SCOPES, Served, Test};

fn token_of(test: &Test, db: &str) -> Token {
    let made = test.run(&[
        "ledger",
        "token",
        "--account",
        "demo",
        "--scopes",
        ALL_SCOPES,
        "--db",
        db,
    ]);
    Token(made.code(0).stdout.trim().to_owned())
}

fn connect(url: &str) -> TcpStream {
    TcpStream::connect(url.trim_start_matches("http://")).expect("connect")
}

#[test]
fn four_hundred_idle_sockets_on_a_256_file_server_do_not_keep_a_real_client_waiting() {
    let test = Test::new();
    // The default cap, from the open-files limit: 256 - 64 = 192.
    let server = Served::with_file_limit(&test.path(""), &test.path("fd.sqlite"), &["--demo"], 256);
    let token = token_of(&test, "fd.sqlite");
    let idle: Vec<TcpStream> = (0..400).map(|_| connect(&server.url)).collect();
    // Let the server accept them all (and shed the oldest) first.
    std::thread::sleep(Duration::from_millis(500));
    let started = Instant::now();
    let whoami = block(client(&server.url).whoami(&token)).expect("whoami");
    let took = started.elapsed();
    assert_eq!(whoami.user, "demo");
    assert!(
        took < Duration::from_secs(5),
        "a real client waited {took:?} behind 400 idle sockets"
    );
    // The shed ones were closed by the server: a read ends at once.
    let mut first = &idle[0];
    first
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut byte = [0u8; 1];
    assert!(
        matches!(first.read(&mut byte), Ok(0) | Err(_)),
        "the longest-idle socket was closed"
    );
    let log = server.log().join("\n");
    assert!(!log.contains("Too many open files"), "{log}");
}

#[test]
fn a_connection_that_sends_nothing_is_closed_after_the_first_byte_timeout() {
    let test = Test::new();
    let server = Served::with_flags(
        &test.path(""),
        &test.path("first.sqlite"),
        &["--demo", "--first-byte-timeout", "0.5"],
    );
    let mut silent = connect(&server.url);
    silent
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let started = Instant::now();
    let mut answer = Vec::new();
    let _ = silent.read_to_end(&mut answer);
    let waited = started.elapsed();
    assert!(answer.is_empty(), "no answer to nothing");
    assert!(
        waited >= Duration::from_millis(400) && waited < Duration::from_secs(5),
        "closed after {waited:?}, not the 30 s idle timeout"
    );
}

#[test]
fn when_every_connection_is_busy_a_newcomer_gets_503_at_once_and_busy_ones_are_not_shed() {
    let test = Test::new();
    let server = Served::with_flags(
        &test.path(""),
        &test.path("busy.sqlite"),
        &["--demo", "--max-connections", "2", "--idle-timeout", "4"],
    );
    let token = token_of(&test, "busy.sqlite");
    // Two requests in flight: their headers sent, their bodies stalled.
    let busy: Vec<TcpStream> = (0..2)
        .map(|_| {
            let mut stream = connect(&server.url);
            let head = format!(
                "POST /v1/games/g/estimate HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {}\r\ncontent-length: 100\r\n\r\n{{",
                token.0
            );
            stream.write_all(head.as_bytes()).expect("send");
            stream
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let started = Instant::now();
    let mut third = connect(&server.url);
    third
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    third
        .write_all(b"GET /v1/whoami HTTP/1.1\r\nhost: x\r\n\r\n")
        .expect("send");
    let mut answer = String::new();
    let _ = third.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(
        answer.contains("server_busy") && answer.contains("--max-connections"),
        "{answer}"
    );
    assert!(started.elapsed() < Duration::from_secs(3), "at once");
    // The busy ones were not shed: each ends with its own answer, a 408.
    for mut stream in busy {
        stream
            .set_read_timeout(Some(Duration::from_secs(15)))
            .expect("timeout");
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer);
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    }
}

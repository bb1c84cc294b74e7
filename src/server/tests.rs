//! The routes' own answers: JSON refusals for what never reaches the ledger.

use std::sync::Arc;

use crate::backend::ledger::{DEMO_TOKEN, Ledger};

/// The routes over a demo ledger in `dir`, and a token of its `demo`
/// account (the routes refuse the public demo token).
async fn serve(dir: &std::path::Path) -> (String, String) {
    let ledger = Arc::new(Ledger::open(&dir.join("ledger.sqlite")).expect("ledger"));
    let token = ledger
        .create_token("demo", &crate::backend::api::SCOPES.map(str::to_owned))
        .expect("token")
        .token
        .0;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(super::serve(
        listener,
        ledger,
        Arc::new(|_: &super::RequestLine| {}),
        std::future::pending(),
    ));
    (format!("http://{addr}"), token)
}

/// Status and `code` of one raw request.
async fn ask(
    method: reqwest::Method,
    url: &str,
    token: Option<&str>,
    body: &'static str,
) -> (u16, serde_json::Value) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::new();
    let mut request = client.request(method, url).body(body);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.expect("send");
    let status = response.status().as_u16();
    let body: serde_json::Value = response.json().await.expect("a JSON body");
    (status, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_refusal_the_routes_make_is_json_with_a_code_and_a_message() {
    use reqwest::Method;
    let dir = tempfile::tempdir().expect("tempdir");
    let (url, token) = serve(dir.path()).await;
    let jobs = format!("{url}/v1/games/g/jobs");
    let cases = [
        // No token: 401 before the body is even read.
        (
            Method::POST,
            jobs.clone(),
            None,
            "not json",
            401,
            "unauthorized",
        ),
        (
            Method::POST,
            jobs.clone(),
            Some("gp_nobody"),
            "{}",
            401,
            "unauthorized",
        ),
        // The embedded ledger's public demo token, valid in this ledger:
        // refused by the server all the same.
        (
            Method::POST,
            jobs.clone(),
            Some(DEMO_TOKEN),
            "{}",
            401,
            "unauthorized",
        ),
        (
            Method::POST,
            jobs.clone(),
            Some(token.as_str()),
            "not json",
            400,
            "invalid_request",
        ),
        (
            Method::POST,
            format!("{url}/v1/games/g/estimate"),
            Some(token.as_str()),
            r#"{"cells": [], "run_length": "short", "surprise": 1}"#,
            400,
            "invalid_request",
        ),
        (
            Method::GET,
            format!("{url}/v2/nothing"),
            Some(token.as_str()),
            "",
            404,
            "not_found",
        ),
        (
            Method::DELETE,
            jobs,
            Some(token.as_str()),
            "",
            405,
            "method_not_allowed",
        ),
    ];
    for (method, path, token, body, status, code) in cases {
        let what = format!("{method} {path} {body}");
        let (got, answer) = ask(method, &path, token, body).await;
        assert_eq!(
            (got, answer["code"].as_str()),
            (status, Some(code)),
            "{what}: {answer}"
        );
        assert!(
            answer["message"].as_str().is_some_and(|m| m.len() > 10),
            "{what}: {answer}"
        );
    }
}

#[test]
fn a_bearer_token_is_read_whatever_the_scheme_s_case() {
    let mut headers = axum::http::HeaderMap::new();
    headers.insert("authorization", "bearer gp_x".parse().expect("header"));
    assert_eq!(super::bearer(&headers).0, "gp_x");
    headers.insert("authorization", "Basic gp_x".parse().expect("header"));
    assert_eq!(super::bearer(&headers).0, "");
}

//! `gameplan serve`: the API of DESIGN §6 over HTTP (axum), in front of the
//! same [`Ledger`] methods the `local` backend calls.
//!
//! It owns the routes only: paths, the bearer token, the scopes each route
//! needs, JSON in and out, and one log line per request. It holds no money
//! rule: every charge, refund, replay and refusal is the ledger's, so a
//! server and the embedded backend answer alike (the conformance suite runs
//! against both). It runs no plans.
//!
//! # Design
//!
//! - **Who before what.** A request is authenticated (401) and its route's
//!   scopes checked (403, naming the scope) before its body is read, so a
//!   caller without a token learns nothing of the API from body errors. The
//!   ledger checks the scopes again inside its transaction; a unit test
//!   holds both tables to the same answers.
//! - **Blocking off the runtime.** Each ledger call is one `SQLite`
//!   transaction on tokio's blocking pool, like the `local` backend's.
//! - **Every refusal is JSON** `{code, message, ...}` with the status of
//!   the table in [`crate::backend::api`], also for an unknown path, a
//!   wrong method and a malformed body.
//! - **The log has no secrets**: method, path (ids only, no query), status
//!   and milliseconds; never a header, so never the token.

#[cfg(test)]
mod tests;

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, FromRequestParts, Path, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::backend::UploadTarget;
use crate::backend::api::{
    ApiError, JobRef, RunRef, SCOPE_MODEL, SCOPE_UPLOAD, SCOPE_WRITE, Token, UploadRequest,
};
use crate::backend::http::{CONTENT_SHA256, IDEMPOTENCY_KEY};
use crate::backend::ledger::Ledger;
use crate::backend::ledger::runs::MAX_UPLOAD_BYTES;

/// One answered request, as the log shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestLine {
    pub method: String,
    /// The path without its query string.
    pub path: String,
    pub status: u16,
    pub millis: f64,
}

/// Where the log lines go (`gameplan serve` prints them).
pub type LogSink = Arc<dyn Fn(&RequestLine) + Send + Sync>;

#[derive(Clone)]
struct App {
    ledger: Arc<Ledger>,
}

/// The scopes each route needs (DESIGN §6; the table in `api`).
const WRITE: &[&str] = &[SCOPE_WRITE];
const REGISTER: &[&str] = &[SCOPE_WRITE, SCOPE_MODEL];
const UPLOAD: &[&str] = &[SCOPE_UPLOAD];

/// The API's routes over `ledger`, logging each request to `log`.
pub fn router(ledger: Arc<Ledger>, log: LogSink) -> Router {
    const RUN: &str = "/v1/games/{game}/jobs/{job}/runs/{run}";
    Router::new()
        .route("/v1/whoami", get(whoami))
        .route("/v1/games/{game}/estimate", post(estimate))
        .route("/v1/games/{game}/jobs", post(register))
        .route("/v1/games/{game}/jobs/{job}", get(get_job))
        .route("/v1/games/{game}/jobs/{job}/finish", post(finish))
        .route(
            "/v1/games/{game}/jobs/{job}/aggregate/complete",
            post(aggregate_complete),
        )
        .route("/v1/games/{game}/jobs/{job}/files/{*name}", put(upload_job))
        .route(RUN, get(get_run))
        .route(&format!("{RUN}/transition"), post(transition))
        .route(&format!("{RUN}/heartbeat"), post(heartbeat))
        .route(&format!("{RUN}/complete"), post(complete))
        .route(&format!("{RUN}/files/{{*name}}"), put(upload_run))
        .fallback(unknown_path)
        .method_not_allowed_fallback(wrong_method)
        // One byte over the ledger's own limit, so the ledger's refusal
        // (which names the limit) is what a too-large upload gets.
        .layer(DefaultBodyLimit::max(MAX_UPLOAD_BYTES + 1))
        .layer(middleware::from_fn(move |request, next| {
            log_request(Arc::clone(&log), request, next)
        }))
        .with_state(App { ledger })
}

/// Serves the API on `listener` until `shutdown` completes, then lets the
/// requests in flight finish.
pub async fn serve(
    listener: tokio::net::TcpListener,
    ledger: Arc<Ledger>,
    log: LogSink,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(ledger, log))
        .with_graceful_shutdown(shutdown)
        .await
}

async fn log_request(log: LogSink, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = request.method().to_string();
    let path = request.uri().path().to_owned();
    let response = next.run(request).await;
    log(&RequestLine {
        method,
        path,
        status: response.status().as_u16(),
        millis: started.elapsed().as_secs_f64() * 1000.0,
    });
    response
}

/// A refusal as an HTTP response: its status and `{code, message, ...}`.
struct Refusal(ApiError);

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let status =
            StatusCode::from_u16(self.0.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        (status, axum::Json(self.0)).into_response()
    }
}

/// The path's ids, or a JSON 400 (a path that is not UTF-8 once decoded).
struct Ids<T>(T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for Ids<T> {
    type Rejection = Refusal;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match Path::<T>::from_request_parts(parts, state).await {
            Ok(Path(ids)) => Ok(Ids(ids)),
            Err(e) => Err(Refusal(ApiError::invalid_request(format!(
                "the path `{}` cannot be read: {}",
                parts.uri.path(),
                e.body_text()
            )))),
        }
    }
}

/// The bearer token of `headers`; empty when there is none (401 then).
fn bearer(headers: &HeaderMap) -> Token {
    let value = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let token = match value.split_once(' ') {
        Some((scheme, token)) if scheme.eq_ignore_ascii_case("bearer") => token.trim(),
        _ => "",
    };
    Token(token.to_owned())
}

fn header(headers: &HeaderMap, name: &str) -> String {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned()
}

/// `body` as the request type `T`, or 400 naming what is wrong.
fn parse<T: DeserializeOwned>(body: &Result<Bytes, BytesRejection>) -> Result<T, ApiError> {
    let bytes = body.as_ref().map_err(|e| {
        ApiError::invalid_request(format!(
            "the request body cannot be read: {}",
            e.body_text()
        ))
    })?;
    serde_json::from_slice(bytes).map_err(|e| {
        ApiError::invalid_request(format!(
            "the request body is not the JSON this call takes: {e}"
        ))
    })
}

impl App {
    /// Authenticates the caller, checks `scopes`, then runs `call` (which
    /// reads the body and calls the ledger), all on the blocking pool.
    async fn answer<T: Serialize + Send + 'static>(
        &self,
        headers: &HeaderMap,
        scopes: &'static [&'static str],
        call: impl FnOnce(&Ledger, &Token) -> Result<T, ApiError> + Send + 'static,
    ) -> Response {
        let token = bearer(headers);
        let ledger = Arc::clone(&self.ledger);
        let answer = tokio::task::spawn_blocking(move || {
            let caller = ledger.whoami(&token)?;
            if let Some(missing) = scopes
                .iter()
                .find(|s| !caller.scopes.iter().any(|h| h == *s))
            {
                return Err(ApiError::missing_scope(missing));
            }
            call(&ledger, &token)
        })
        .await
        .unwrap_or_else(|e| {
            Err(ApiError::unavailable(format!(
                "the ledger call stopped before it answered: {e}"
            )))
        });
        match answer {
            Ok(value) => axum::Json(value).into_response(),
            Err(e) => Refusal(e).into_response(),
        }
    }
}

async fn whoami(State(app): State<App>, headers: HeaderMap) -> Response {
    app.answer(&headers, &[], Ledger::whoami).await
}

async fn estimate(
    State(app): State<App>,
    Ids(game): Ids<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    app.answer(&headers, WRITE, move |ledger, token| {
        ledger.estimate(token, &game, &parse(&body)?)
    })
    .await
}

async fn register(
    State(app): State<App>,
    Ids(game): Ids<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let key = header(&headers, IDEMPOTENCY_KEY);
    app.answer(&headers, REGISTER, move |ledger, token| {
        ledger.register(token, &game, &key, &parse(&body)?)
    })
    .await
}

async fn transition(
    State(app): State<App>,
    Ids((game, job, run)): Ids<(String, String, String)>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let run = RunRef { game, job, run };
    app.answer(&headers, WRITE, move |ledger, token| {
        ledger.transition(token, &run, &parse(&body)?)
    })
    .await
}

async fn heartbeat(
    State(app): State<App>,
    Ids((game, job, run)): Ids<(String, String, String)>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let run = RunRef { game, job, run };
    app.answer(&headers, WRITE, move |ledger, token| {
        ledger.heartbeat(token, &run, &parse(&body)?)
    })
    .await
}

async fn upload(
    app: &App,
    target: UploadTarget,
    name: String,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let sha256 = header(headers, CONTENT_SHA256);
    app.answer(headers, UPLOAD, move |ledger, token| {
        let body = body.map_err(|e| {
            ApiError::invalid_request(format!("the upload cannot be read: {}", e.body_text()))
        })?;
        let request = UploadRequest {
            name,
            sha256,
            body: body.to_vec(),
        };
        ledger.upload(token, &target, &request)
    })
    .await
}

async fn upload_run(
    State(app): State<App>,
    Ids((game, job, run, name)): Ids<(String, String, String, String)>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let target = UploadTarget::Run(RunRef { game, job, run });
    upload(&app, target, name, &headers, body).await
}

async fn upload_job(
    State(app): State<App>,
    Ids((game, job, name)): Ids<(String, String, String)>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let target = UploadTarget::Job(JobRef { game, job });
    upload(&app, target, name, &headers, body).await
}

async fn complete(
    State(app): State<App>,
    Ids((game, job, run)): Ids<(String, String, String)>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let run = RunRef { game, job, run };
    app.answer(&headers, UPLOAD, move |ledger, token| {
        ledger.complete(token, &run, &parse(&body)?)
    })
    .await
}

async fn aggregate_complete(
    State(app): State<App>,
    Ids((game, job)): Ids<(String, String)>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let job = JobRef { game, job };
    app.answer(&headers, UPLOAD, move |ledger, token| {
        ledger.aggregate_complete(token, &job, &parse(&body)?)
    })
    .await
}

async fn finish(
    State(app): State<App>,
    Ids((game, job)): Ids<(String, String)>,
    headers: HeaderMap,
) -> Response {
    let job = JobRef { game, job };
    app.answer(&headers, WRITE, move |ledger, token| {
        ledger.finish(token, &job)
    })
    .await
}

async fn get_job(
    State(app): State<App>,
    Ids((game, job)): Ids<(String, String)>,
    headers: HeaderMap,
) -> Response {
    let job = JobRef { game, job };
    app.answer(&headers, WRITE, move |ledger, token| {
        ledger.get_job(token, &job)
    })
    .await
}

async fn get_run(
    State(app): State<App>,
    Ids((game, job, run)): Ids<(String, String, String)>,
    headers: HeaderMap,
) -> Response {
    let run = RunRef { game, job, run };
    app.answer(&headers, WRITE, move |ledger, token| {
        ledger.get_run(token, &run)
    })
    .await
}

async fn unknown_path(request: Request) -> Refusal {
    Refusal(ApiError::not_found(&format!(
        "the path `{}` (the API's paths start with /v1/)",
        request.uri().path()
    )))
}

async fn wrong_method(request: Request) -> Refusal {
    Refusal(ApiError::new(
        405,
        "method_not_allowed",
        format!(
            "`{}` does not take {}",
            request.uri().path(),
            request.method()
        ),
    ))
}

//! `gameplan serve`: the API (docs/serve.md) over HTTP (axum), in front of the
//! same [`Ledger`] methods the `local` backend calls.
//!
//! It owns serving the routes of [`crate::backend::endpoint`]'s table, one
//! per endpoint: the bearer token, the scopes the table lists, JSON in and
//! out, and one log line per request. It holds no money
//! rule: every charge, refund, replay and refusal is the ledger's, so a
//! server and the embedded backend answer alike (the conformance suite runs
//! against both). It runs no plans.
//!
//! # Design
//!
//! - **Who before what.** A request is authenticated from its headers
//!   (401) and its route's scopes checked (403, naming the scope) before a
//!   byte of its body is read, so a caller without a token can neither
//!   learn the API from body errors nor make the server buffer anything.
//!   The body is then read up to its route's cap ([`MAX_JSON_BYTES`] for
//!   JSON, the ledger's upload limit for files; 413 past it) within the
//!   idle timeout ([`IDLE_WITHIN`] by default; 408). The ledger checks the
//!   same scopes again inside its transaction.
//! - **The demo token is not a credential here.** Every embedded ledger
//!   holds the public `gp_demo_local_ledger` token; `serve` answers it 401
//!   and its log line says why (a ledger `serve` creates has no demo
//!   account unless `--demo`).
//! - **Slow and idle connections are closed**: a new connection must send
//!   a byte within [`FIRST_BYTE_WITHIN`], a request's headers must arrive
//!   within the idle timeout, also on a kept-alive connection waiting for
//!   its next request (hyper's header read timeout), so idle sockets do not
//!   pile up behind a proxy.
//! - **A cap on connections** ([`connections`]): past it the longest-idle
//!   connection is closed for the new one, so idle sockets cannot starve a
//!   real client; when every connection is busy the newcomer gets a 503.
//! - **Blocking off the runtime.** Each ledger call is one `SQLite`
//!   transaction on tokio's blocking pool, like the `local` backend's, and
//!   its answer is serialized there too: a big job's JSON made on the
//!   runtime's workers held up every other connection's request. Reads
//!   take read connections of their own (`ledger::pool`), so one tenant's
//!   big read does not hold up another's `whoami`.
//! - **Every refusal is JSON** `{code, message, ...}` with the status of
//!   the table in [`crate::backend::api`], also for an unknown path, a
//!   wrong method and a malformed body.
//! - **The log has no secrets**: method, path (ids only, no query), status
//!   and milliseconds; never a header, so never the token.

mod connections;
#[cfg(test)]
mod tests;

pub use connections::default_max_connections;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{FromRequestParts, Path, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodFilter, MethodRouter, on};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::backend::UploadTarget;
use crate::backend::api::{ApiError, JobRef, RunRef, Token, UploadRequest, Uploaded};
use crate::backend::endpoint::{self, CONTENT_SHA256, Endpoint, IDEMPOTENCY_KEY};
use crate::backend::hosted::{AdmitRequest, BuildKept, FileBody, Playtest, Quote, QuoteRequest};
use crate::backend::ledger::runs::MAX_UPLOAD_BYTES;
use crate::backend::ledger::{DEMO_TOKEN, Ledger};

/// The most a JSON request body may be (a complete carries a cell's
/// report and its markdown: tens of KiB).
pub const MAX_JSON_BYTES: usize = 4 * 1024 * 1024;
/// How long a request's headers may take (counted from the connection's
/// start, or from the previous response on a kept-alive connection), and
/// its body once the headers came, unless `serve --idle-timeout` says
/// otherwise.
pub const IDLE_WITHIN: Duration = Duration::from_secs(30);
/// How long a new connection may take to send its first byte unless
/// `serve --first-byte-timeout` says otherwise: shorter than
/// [`IDLE_WITHIN`], as a client that connected has its request ready.
pub const FIRST_BYTE_WITHIN: Duration = Duration::from_secs(5);

/// One answered request, as the log shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestLine {
    pub method: String,
    /// The path without its query string.
    pub path: String,
    pub status: u16,
    pub millis: f64,
    /// Why, where the status alone would not say (a refused demo token).
    pub note: Option<String>,
}

/// A note a handler leaves on its response for the log line.
#[derive(Clone)]
struct LogNote(String);

/// Where the log lines go (`gameplan serve` prints them).
pub type LogSink = Arc<dyn Fn(&RequestLine) + Send + Sync>;

#[derive(Clone)]
struct App {
    served: Served,
    /// How long a body may take to arrive.
    idle: Duration,
}

/// What the routes call: the ledger, and the hosted playtests when this
/// server plays them. Derefs to the ledger, which most routes call alone.
#[derive(Clone)]
pub struct Served {
    pub ledger: Arc<Ledger>,
    pub hosting: Option<Arc<dyn Hosting>>,
}

impl std::ops::Deref for Served {
    type Target = Ledger;

    fn deref(&self) -> &Ledger {
        &self.ledger
    }
}

/// The API's routes over `ledger`, one per [`Endpoint`], logging each
/// request to `log`; a body must arrive within `idle`.
pub fn router(ledger: Arc<Ledger>, log: LogSink, idle: Duration) -> Router {
    router_hosting(ledger, None, log, idle)
}

/// [`router`], also answering the hosted playtests' calls through
/// `hosting` (`serve --executor`); without it they are refused.
pub fn router_hosting(
    ledger: Arc<Ledger>,
    hosting: Option<Arc<dyn Hosting>>,
    log: LogSink,
    idle: Duration,
) -> Router {
    Endpoint::ALL
        .into_iter()
        .fold(Router::new(), |router, endpoint| {
            router.route(endpoint.path(), route(endpoint))
        })
        .fallback(unknown_path)
        .method_not_allowed_fallback(wrong_method)
        .layer(middleware::from_fn(move |request, next| {
            log_request(Arc::clone(&log), request, next)
        }))
        .with_state(App {
            served: Served { ledger, hosting },
            idle,
        })
}

/// How `serve` treats connections: its timeouts and its cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// How long a request's headers may take (also between the requests of
    /// a kept-alive connection), and its body once the headers came.
    pub idle: Duration,
    /// How long a new connection may take to send its first byte.
    pub first_byte: Duration,
    /// The most connections served at once (see [`connections`]).
    pub max_connections: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            idle: IDLE_WITHIN,
            first_byte: FIRST_BYTE_WITHIN,
            max_connections: default_max_connections(),
        }
    }
}

/// Serves the API on `listener` until `shutdown` completes, with the
/// default [`Options`].
pub async fn serve(
    listener: tokio::net::TcpListener,
    ledger: Arc<Ledger>,
    log: LogSink,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_with(listener, ledger, log, Options::default(), shutdown).await
}

/// Serves the API on `listener` until `shutdown` completes, then lets the
/// requests in flight finish (at most `options.idle` more). A new
/// connection must send a byte within `options.first_byte`; a request's
/// headers, and then its body, must each arrive within `options.idle`;
/// past `options.max_connections` the longest-idle connection is closed
/// for the new one ([`connections`]).
///
/// Its own accept loop rather than `axum::serve`, which sets no timer and
/// so keeps a connection that never sends its headers open for ever.
pub async fn serve_with(
    listener: tokio::net::TcpListener,
    ledger: Arc<Ledger>,
    log: LogSink,
    options: Options,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_hosting(listener, ledger, None, log, options, shutdown).await
}

/// [`serve_with`], also answering the hosted playtests' calls through
/// `hosting`.
pub async fn serve_hosting(
    listener: tokio::net::TcpListener,
    ledger: Arc<Ledger>,
    hosting: Option<Arc<dyn Hosting>>,
    log: LogSink,
    options: Options,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = router_hosting(ledger, hosting, log, options.idle);
    let tracker = connections::Tracker::new(options.max_connections);
    let (stopping, stop) = tokio::sync::watch::channel(false);
    let mut tasks = tokio::task::JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => {
                // Out of file descriptors and the like: wait, then accept
                // again, as axum::serve does (the listener is still good).
                let Ok((stream, _)) = accepted else {
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                };
                stream
            }
            Some(_) = tasks.join_next(), if !tasks.is_empty() => continue,
        };
        let _ = stream.set_nodelay(true);
        let Some(admitted) = tracker.admit() else {
            tasks.spawn(connections::turn_away(stream, tracker.max()));
            continue;
        };
        let service = connections::Tracked {
            inner: hyper_util::service::TowerToHyperService::new(app.clone()),
            tracker: Arc::clone(&tracker),
            slot: Arc::clone(&admitted.slot),
        };
        tasks.spawn(connection(stream, service, admitted, options, stop.clone()));
    }
    drop(listener);
    let _ = stopping.send(true);
    while tasks.join_next().await.is_some() {}
    Ok(())
}

/// One connection, from its first byte to its close: shed when the cap
/// needs its slot, shut down gracefully when the server stops.
async fn connection<S>(
    stream: tokio::net::TcpStream,
    service: S,
    admitted: connections::Admitted,
    options: Options,
    mut stop: tokio::sync::watch::Receiver<bool>,
) where
    S: hyper::service::Service<
            axum::http::Request<hyper::body::Incoming>,
            Response = Response,
            Error = std::convert::Infallible,
        > + Send
        + 'static,
    S::Future: Send + 'static,
{
    use hyper_util::rt::{TokioIo, TokioTimer};
    let slot = Arc::clone(&admitted.slot);
    // A connection that sends nothing goes after `first_byte`, not the
    // longer idle timeout: it holds a descriptor and says nothing.
    let mut byte = [0u8; 1];
    tokio::select! {
        peeked = tokio::time::timeout(options.first_byte, stream.peek(&mut byte)) => {
            if !matches!(peeked, Ok(Ok(n)) if n > 0) {
                return;
            }
        }
        () = slot.shed.notified() => return,
        () = async { drop(stop.wait_for(|stopping| *stopping).await) } => return,
    }
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(options.idle)
        .serve_connection(TokioIo::new(stream), service);
    tokio::pin!(connection);
    tokio::select! {
        _ = connection.as_mut() => {}
        () = slot.shed.notified() => {
            // Chosen while idle: closed now. A request that began since
            // is answered first (a graceful shutdown ends after it).
            connection.as_mut().graceful_shutdown();
            if slot.busy() {
                let _ = tokio::time::timeout(options.idle, connection).await;
            }
        }
        () = async { drop(stop.wait_for(|stopping| *stopping).await) } => {
            connection.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(options.idle, connection).await;
        }
    }
    drop(admitted);
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
        note: response.extensions().get::<LogNote>().map(|n| n.0.clone()),
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
fn parse<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| {
        ApiError::invalid_request(format!(
            "the request body is not the JSON this call takes: {e}"
        ))
    })
}

/// Reads `body` up to `limit` bytes within `idle`: 413 past the limit
/// (before reading when `Content-Length` says so), 408 too slow.
async fn read_body(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
    idle: Duration,
) -> Result<Bytes, ApiError> {
    let too_large = || {
        ApiError::new(
            413,
            "body_too_large",
            format!("the body is over the {limit} bytes this call takes; nothing was stored"),
        )
    };
    let declared = headers
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large());
    }
    match tokio::time::timeout(idle, axum::body::to_bytes(body, limit)).await {
        Err(_) => Err(ApiError::new(
            408,
            "body_timeout",
            format!(
                "the body did not arrive within {} seconds; nothing was stored",
                idle.as_secs_f64()
            ),
        )),
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(e)) => {
            let length_limit = std::error::Error::source(&e)
                .is_some_and(<dyn std::error::Error>::is::<http_body_util::LengthLimitError>);
            if length_limit {
                Err(too_large())
            } else {
                Err(ApiError::invalid_request(format!(
                    "the request body cannot be read: {e}"
                )))
            }
        }
    }
}

/// The most of a body `endpoint` takes; `None` when it reads none.
fn body_limit(endpoint: Endpoint, hosting: Option<&dyn Hosting>) -> Option<usize> {
    match endpoint.body() {
        endpoint::Body::Archive => Some(hosting.map_or(0, Hosting::max_archive_bytes)),
        endpoint::Body::Empty => None,
        endpoint::Body::Json => Some(MAX_JSON_BYTES),
        // One byte over the ledger's own limit, so the ledger's refusal
        // (which names the file and the limit) is what a too-large upload
        // gets.
        endpoint::Body::File => Some(MAX_UPLOAD_BYTES + 1),
    }
}

impl App {
    /// Authenticates the caller from the headers and checks the scopes
    /// `endpoint` needs, then reads the body (if it takes one) and runs
    /// `call` with it; the ledger calls run on the blocking pool.
    async fn answer<T: Serialize + Send + 'static>(
        &self,
        endpoint: Endpoint,
        headers: HeaderMap,
        body: Body,
        call: impl FnOnce(&Served, &Token, &HeaderMap, &[u8]) -> Result<T, ApiError> + Send + 'static,
    ) -> Response {
        let token = bearer(&headers);
        if token.0 == DEMO_TOKEN {
            let mut response = Refusal(ApiError::new(
                401,
                "unauthorized",
                "the embedded ledger's public demo token is not accepted by `gameplan serve`; \
                 create a token with `gameplan ledger token --db FILE --account ID --scopes ...`",
            ))
            .into_response();
            response.extensions_mut().insert(LogNote(
                "refused the public demo token (gp_demo_local_ledger)".to_owned(),
            ));
            return response;
        }
        let ledger = Arc::clone(&self.served.ledger);
        let who = token.clone();
        let allowed = tokio::task::spawn_blocking(move || ledger.authorize(&who, endpoint))
            .await
            .unwrap_or_else(|e| Err(stopped(&e)));
        if let Err(e) = allowed {
            return Refusal(e).into_response();
        }
        if endpoint.is_hosted() && self.served.hosting.is_none() {
            return Refusal(ApiError::new(
                409,
                "not_hosting",
                "this server plays no hosted playtests; nothing was stored or charged. \
                 Start it with `gameplan serve --executor local` (or `--executor ray --address URL`)",
            ))
            .into_response();
        }
        let bytes = match body_limit(endpoint, self.served.hosting.as_deref()) {
            Some(limit) => match read_body(&headers, body, limit, self.idle).await {
                Ok(bytes) => bytes,
                Err(e) => return Refusal(e).into_response(),
            },
            None => Bytes::new(),
        };
        let served = self.served.clone();
        // Serialized on the blocking pool too: a 10,000-run job is
        // megabytes of JSON, and made on the runtime's few workers it would
        // hold up every other connection's request meanwhile.
        let answer = tokio::task::spawn_blocking(move || {
            let value = call(&served, &token, &headers, &bytes)?;
            serde_json::to_vec(&value).map_err(|e| {
                ApiError::unavailable(format!("the answer could not be written as JSON: {e}"))
            })
        })
        .await
        .unwrap_or_else(|e| Err(stopped(&e)));
        match answer {
            Ok(json) => (
                [(
                    axum::http::header::CONTENT_TYPE,
                    axum::http::HeaderValue::from_static("application/json"),
                )],
                json,
            )
                .into_response(),
            Err(e) => Refusal(e).into_response(),
        }
    }
}

fn stopped(e: &tokio::task::JoinError) -> ApiError {
    ApiError::unavailable(format!("the ledger call stopped before it answered: {e}"))
}

/// A ledger call behind a route: the ledger, the caller's token, what the
/// route took from the path (`()` or [`Ids`]), the headers and the body.
type LedgerCall<P, T> = fn(&Served, &Token, P, &HeaderMap, &[u8]) -> Result<T, ApiError>;

/// The route of `endpoint`: its method, and the ledger call it is. The
/// match is exhaustive, so an endpoint added to the table without a route
/// does not compile.
#[expect(
    clippy::too_many_lines,
    reason = "one arm per endpoint of the table, exhaustive, reads best as one match"
)]
fn route(endpoint: Endpoint) -> MethodRouter<App> {
    match endpoint {
        Endpoint::Whoami => serve_as(endpoint, |ledger, token, (), _, _| ledger.whoami(token)),
        Endpoint::Estimate => serve_as(
            endpoint,
            |ledger, token, Ids(game): Ids<String>, _, body| {
                ledger.estimate(token, &game, &parse(body)?)
            },
        ),
        Endpoint::Register => serve_as(
            endpoint,
            |ledger, token, Ids(game): Ids<String>, headers, body| {
                let key = header(headers, IDEMPOTENCY_KEY);
                ledger.register(token, &game, &key, &parse(body)?)
            },
        ),
        Endpoint::GetJob => serve_as(endpoint, |ledger, token, Ids((game, job)), _, _| {
            ledger.get_job(token, &JobRef { game, job })
        }),
        Endpoint::Finish => serve_as(endpoint, |ledger, token, Ids((game, job)), _, _| {
            ledger.finish(token, &JobRef { game, job })
        }),
        Endpoint::AggregateComplete => {
            serve_as(endpoint, |ledger, token, Ids((game, job)), _, body| {
                ledger.aggregate_complete(token, &JobRef { game, job }, &parse(body)?)
            })
        }
        Endpoint::UploadJobFile => serve_as(
            endpoint,
            |ledger, token, Ids((game, job, name)), headers, body| {
                upload(
                    ledger,
                    token,
                    &UploadTarget::Job(JobRef { game, job }),
                    name,
                    headers,
                    body,
                )
            },
        ),
        Endpoint::GetRun => serve_as(endpoint, |ledger, token, Ids((game, job, run)), _, _| {
            ledger.get_run(token, &RunRef { game, job, run })
        }),
        Endpoint::Transition => {
            serve_as(endpoint, |ledger, token, Ids((game, job, run)), _, body| {
                ledger.transition(token, &RunRef { game, job, run }, &parse(body)?)
            })
        }
        Endpoint::Heartbeat => {
            serve_as(endpoint, |ledger, token, Ids((game, job, run)), _, body| {
                ledger.heartbeat(token, &RunRef { game, job, run }, &parse(body)?)
            })
        }
        Endpoint::Complete => {
            serve_as(endpoint, |ledger, token, Ids((game, job, run)), _, body| {
                ledger.complete(token, &RunRef { game, job, run }, &parse(body)?)
            })
        }
        Endpoint::UploadRunFile => serve_as(
            endpoint,
            |ledger, token, Ids((game, job, run, name)), headers, body| {
                upload(
                    ledger,
                    token,
                    &UploadTarget::Run(RunRef { game, job, run }),
                    name,
                    headers,
                    body,
                )
            },
        ),
        Endpoint::UploadBuild => serve_as(
            endpoint,
            |served, token, Ids((game, sha)): Ids<(String, String)>, _, body| {
                hosting(served)?.keep_build(served, token, &game, &sha, body)
            },
        ),
        Endpoint::HostedQuote => serve_as(
            endpoint,
            |served, token, Ids(game): Ids<String>, _, body| {
                hosting(served)?.quote(served, token, &game, &parse(body)?)
            },
        ),
        Endpoint::HostedAdmit => serve_as(
            endpoint,
            |served, token, Ids(game): Ids<String>, headers, body| {
                let key = header(headers, IDEMPOTENCY_KEY);
                hosting(served)?.admit(served, token, &game, &key, &parse(body)?)
            },
        ),
        Endpoint::HostedGet => serve_as(
            endpoint,
            |served, token, Ids((game, id)): Ids<(String, String)>, _, _| {
                served.playtest(token, &game, &id)
            },
        ),
        Endpoint::HostedCancel => serve_as(
            endpoint,
            |served, token, Ids((game, id)): Ids<(String, String)>, _, _| {
                let playtest = served.cancel_playtest(token, &game, &id)?;
                hosting(served)?.wake();
                Ok(playtest)
            },
        ),
        Endpoint::HostedFile => serve_as(
            endpoint,
            |served, token, Ids((game, id, name)): Ids<(String, String, String)>, _, _| {
                hosting(served)?.file(served, token, &game, &id, &name)
            },
        ),
    }
}

/// What a server that plays hosted playtests does beyond its ledger
/// (`crate::hosted::host` is it): `serve` is handed one, as it sits below
/// the plans it would have to read.
pub trait Hosting: Send + Sync + 'static {
    /// The most a build archive may be, in bytes.
    fn max_archive_bytes(&self) -> usize;
    /// Checks and keeps an uploaded build.
    fn keep_build(
        &self,
        ledger: &Ledger,
        token: &Token,
        game: &str,
        sha256: &str,
        bytes: &[u8],
    ) -> Result<BuildKept, ApiError>;
    /// Prices a plan of a kept build: charges nothing.
    fn quote(
        &self,
        ledger: &Ledger,
        token: &Token,
        game: &str,
        request: &QuoteRequest,
    ) -> Result<Quote, ApiError>;
    /// Admits a quoted playtest under `key`: one charge.
    fn admit(
        &self,
        ledger: &Ledger,
        token: &Token,
        game: &str,
        key: &str,
        request: &AdmitRequest,
    ) -> Result<Playtest, ApiError>;
    /// One of a playtest's files (its report page, its aggregate).
    fn file(
        &self,
        ledger: &Ledger,
        token: &Token,
        game: &str,
        id: &str,
        name: &str,
    ) -> Result<FileBody, ApiError>;
    /// Something changed (a cancel): the player should look now.
    fn wake(&self);
}

/// The hosting of a server that has it (checked before the body is read).
fn hosting(served: &Served) -> Result<&dyn Hosting, ApiError> {
    served
        .hosting
        .as_deref()
        .ok_or_else(|| ApiError::unavailable("this server plays no hosted playtests"))
}

/// `endpoint`'s method routed to `call`: what the path holds is read
/// first (a JSON 400 when it cannot be), then [`App::answer`] runs `call`.
fn serve_as<P, T>(endpoint: Endpoint, call: LedgerCall<P, T>) -> MethodRouter<App>
where
    P: FromRequestParts<App> + Send + 'static,
    P::Rejection: IntoResponse,
    T: Serialize + Send + 'static,
{
    let method = match endpoint.method() {
        endpoint::Method::Get => MethodFilter::GET,
        endpoint::Method::Post => MethodFilter::POST,
        endpoint::Method::Put => MethodFilter::PUT,
    };
    on(
        method,
        move |State(app): State<App>, ids: P, headers: HeaderMap, body: Body| async move {
            app.answer(
                endpoint,
                headers,
                body,
                move |ledger, token, headers, bytes| call(ledger, token, ids, headers, bytes),
            )
            .await
        },
    )
}

/// An upload to `target`: the file's name from the path, its sha256 from
/// its header.
fn upload(
    ledger: &Ledger,
    token: &Token,
    target: &UploadTarget,
    name: String,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Uploaded, ApiError> {
    let request = UploadRequest {
        name,
        sha256: header(headers, CONTENT_SHA256),
        body: body.to_vec(),
    };
    ledger.upload(token, target, &request)
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

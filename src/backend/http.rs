//! The `http` backend: the API (docs/serve.md) over HTTP (reqwest with
//! rustls and ring), to `gameplan serve` or any server speaking it.
//!
//! It owns the wire: the bearer token, JSON, timeouts, and what a failed
//! attempt means; its paths are [`super::endpoint`]'s. It holds no money
//! rule; the server does.
//!
//! # Design: when an attempt is repeated
//!
//! Every call of the API is safe to repeat with the same request (the
//! ledger answers a repeat as a replay: same job, same settlement, nothing
//! moved twice), so each request body is serialized once and every attempt
//! sends those bytes, with the same `Idempotency-Key` for a register.
//!
//! | what came back | outcome | then |
//! |---|---|---|
//! | 2xx with the expected JSON | done | the answer |
//! | a timeout, a reset or closed connection, a 5xx, an unreadable or unexpected body | **uncertain**: the server may have done it | repeat, with backoff, up to [`Retry::attempts`] |
//! | no connection at all (refused, unreachable) | nothing was sent | repeat likewise |
//! | 409 `charge_in_progress` | another register holds the ledger | repeat likewise |
//! | 400, 401, 403, 422 | refused, and would be again | stop at once, the refusal explained |
//! | a TLS failure | the server cannot be trusted | stop at once |
//! | any other refusal (402, 404, other 409s) | refused | stop with the server's error |
//!
//! When the attempts run out, the error keeps [`ApiError::uncertain`] if
//! any attempt was uncertain, so the register step can leave the run open
//! for a resume that replays the same key and body.
//!
//! Errors made here, not by a server, have status 0 and one of the codes
//! `backend_timeout`, `connection_lost`, `backend_unreachable`,
//! `unreadable_response`, `tls_failed`, `invalid_url`.

use std::time::Duration;

use reqwest::{StatusCode, Url};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::api::{
    AggregateCompleteRequest, AggregatePublished, ApiError, CompleteRequest, Completed, Estimate,
    EstimateRequest, Finished, Heartbeat, HeartbeatRequest, JobRef, JobView, RegisterRequest,
    Registered, RunRef, RunView, Token, TransitionRequest, Transitioned, UploadRequest, Uploaded,
    Whoami,
};
use super::endpoint::{
    self, CONTENT_SHA256, Endpoint, IDEMPOTENCY_KEY, job_ids, run_ids, target_ids,
};
use super::hosted::{AdmitRequest, BuildKept, FileBody, Playtest, Quote, QuoteRequest};
use super::{Backend, Call, UploadTarget};

/// How failed attempts are repeated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retry {
    /// Attempts in all, the first included.
    pub attempts: u32,
    /// The wait before the second attempt; it doubles after each.
    pub first_backoff: Duration,
    /// The longest wait between two attempts.
    pub max_backoff: Duration,
}

impl Default for Retry {
    fn default() -> Self {
        Retry {
            attempts: 6,
            first_backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(5),
        }
    }
}

/// Timeouts and retries of an [`HttpBackend`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpOptions {
    /// The longest one attempt may take, from connecting to the last byte.
    pub timeout: Duration,
    pub connect_timeout: Duration,
    pub retry: Retry,
}

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions {
            timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
            retry: Retry::default(),
        }
    }
}

/// A backend at a URL.
pub struct HttpBackend {
    base: Url,
    client: reqwest::Client,
    options: HttpOptions,
}

/// One request of the API: its endpoint and the ids its path takes.
struct Request<'a> {
    endpoint: Endpoint,
    ids: Vec<&'a str>,
    token: &'a Token,
    headers: Vec<(&'static str, String)>,
    /// Serialized once, so every attempt sends the same bytes; sent as
    /// the endpoint's [`endpoint::Body`] says.
    body: Vec<u8>,
}

impl<'a> Request<'a> {
    fn new(endpoint: Endpoint, ids: &[&'a str], token: &'a Token) -> Request<'a> {
        Request {
            endpoint,
            ids: ids.to_vec(),
            token,
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    fn json(mut self, body: &impl Serialize) -> Request<'a> {
        // The API's types always serialize.
        self.body = serde_json::to_vec(body).unwrap_or_default();
        self
    }

    fn file(mut self, bytes: &[u8]) -> Request<'a> {
        self.body = bytes.to_vec();
        self
    }

    fn header(mut self, name: &'static str, value: &str) -> Request<'a> {
        self.headers.push((name, value.to_owned()));
        self
    }

    fn method(&self) -> reqwest::Method {
        match self.endpoint.method() {
            endpoint::Method::Get => reqwest::Method::GET,
            endpoint::Method::Post => reqwest::Method::POST,
            endpoint::Method::Put => reqwest::Method::PUT,
        }
    }
}

/// What one attempt came to.
enum Attempt<T> {
    Done(Result<T, ApiError>),
    /// Worth another attempt; `uncertain` when the server may have done it.
    Again {
        error: ApiError,
        uncertain: bool,
    },
}

impl HttpBackend {
    /// A backend at `url` (`http://` or `https://`; the API's paths go
    /// under it) with the default timeouts and retries.
    pub fn new(url: &str) -> Result<HttpBackend, ApiError> {
        HttpBackend::with_options(url, HttpOptions::default())
    }

    pub fn with_options(url: &str, options: HttpOptions) -> Result<HttpBackend, ApiError> {
        let invalid = |why: String| {
            ApiError::new(
                0,
                "invalid_url",
                format!(
                    "the backend URL `{url}` {why}; set `[backend] url` to the server's address, e.g. http://127.0.0.1:8787"
                ),
            )
        };
        let base = Url::parse(url).map_err(|e| invalid(format!("is not a URL: {e}")))?;
        if !matches!(base.scheme(), "http" | "https") || base.cannot_be_a_base() {
            return Err(invalid("is not an http:// or https:// URL".to_owned()));
        }
        // reqwest is built without a crypto provider of its own (the
        // default one compiles aws-lc for minutes): main installs ring, and
        // so does this, for library users and tests. Installing twice is a
        // harmless refusal.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut builder = reqwest::Client::builder()
            .timeout(options.timeout)
            .connect_timeout(options.connect_timeout)
            .user_agent(concat!("gameplan/", env!("CARGO_PKG_VERSION")));
        if is_loopback(&base) {
            // A proxy from the environment must not stand between a run and
            // a server on its own machine.
            builder = builder.no_proxy();
        }
        let client = builder.build().map_err(|e| {
            ApiError::new(
                0,
                "tls_failed",
                format!("cannot set up an HTTP client for {url}: {e}"),
            )
        })?;
        Ok(HttpBackend {
            base,
            client,
            options,
        })
    }

    pub fn url(&self) -> &Url {
        &self.base
    }

    fn url_of(&self, request: &Request<'_>) -> Url {
        let mut url = self.base.clone();
        if let Ok(mut segments) = url.path_segments_mut() {
            // Each piece is one percent-encoded segment, so an id cannot
            // reach another path.
            segments
                .pop_if_empty()
                .extend(request.endpoint.segments(&request.ids));
        }
        url
    }

    /// Sends `request`, repeating it by the table in the module doc.
    async fn send<T: DeserializeOwned>(&self, request: Request<'_>) -> Result<T, ApiError> {
        let url = self.url_of(&request);
        let what = format!("{} {}", request.method(), url.path());
        let retry = self.options.retry;
        let mut uncertain = false;
        let mut attempt = 1;
        loop {
            let (error, this_uncertain) = match self.attempt(&request, &url).await {
                Attempt::Done(answer) => return answer,
                Attempt::Again { error, uncertain } => (error, uncertain),
            };
            uncertain |= this_uncertain;
            if attempt >= retry.attempts.max(1) {
                return Err(gave_up(error, &what, attempt, uncertain));
            }
            tokio::time::sleep(backoff(retry, attempt)).await;
            attempt += 1;
        }
    }

    async fn attempt<T: DeserializeOwned>(&self, request: &Request<'_>, url: &Url) -> Attempt<T> {
        let mut builder = self
            .client
            .request(request.method(), url.clone())
            .bearer_auth(&request.token.0);
        for (name, value) in &request.headers {
            builder = builder.header(*name, value);
        }
        builder = match request.endpoint.body() {
            endpoint::Body::Empty => builder,
            endpoint::Body::Json => builder
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(request.body.clone()),
            endpoint::Body::File => builder
                .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
                .body(request.body.clone()),
            endpoint::Body::Archive => builder
                .header(reqwest::header::CONTENT_TYPE, "application/gzip")
                .body(request.body.clone()),
        };
        let response = match builder.send().await {
            Ok(response) => response,
            Err(e) => return self.failed(&e),
        };
        let status = response.status();
        let bytes = match response.bytes().await {
            Ok(bytes) => bytes,
            Err(e) => return self.failed(&e),
        };
        if status.is_success() {
            return match serde_json::from_slice(&bytes) {
                Ok(value) => Attempt::Done(Ok(value)),
                Err(e) => Attempt::Again {
                    error: ApiError::new(
                        0,
                        "unreadable_response",
                        format!(
                            "{} answered {status} with a body that is not the API's JSON ({e})",
                            self.base
                        ),
                    ),
                    uncertain: true,
                },
            };
        }
        let error = refusal(status, &bytes);
        match status.as_u16() {
            500.. => Attempt::Again {
                error,
                uncertain: true,
            },
            409 if error.code == "charge_in_progress" => Attempt::Again {
                error,
                uncertain: false,
            },
            400 | 401 | 403 | 422 => Attempt::Done(Err(self.explain(error))),
            _ => Attempt::Done(Err(error)),
        }
    }

    /// What a request that got no HTTP answer means.
    fn failed<T>(&self, e: &reqwest::Error) -> Attempt<T> {
        let base = &self.base;
        if let Some(tls) = tls_cause(e) {
            return Attempt::Done(Err(ApiError::new(
                0,
                "tls_failed",
                format!(
                    "the TLS connection to {base} failed ({tls}); check that the URL's host is the server's and that its certificate is valid for it"
                ),
            )));
        }
        if e.is_connect() {
            return Attempt::Again {
                error: ApiError::new(
                    0,
                    "backend_unreachable",
                    format!(
                        "cannot connect to {base} ({}); check that the server runs and `[backend] url`",
                        root_cause(e)
                    ),
                ),
                uncertain: false,
            };
        }
        if e.is_timeout() {
            return Attempt::Again {
                error: ApiError::new(
                    0,
                    "backend_timeout",
                    format!("{base} did not answer within {:?}", self.options.timeout),
                ),
                uncertain: true,
            };
        }
        Attempt::Again {
            error: ApiError::new(
                0,
                "connection_lost",
                format!(
                    "the connection to {base} broke before the answer was read ({})",
                    root_cause(e)
                ),
            ),
            uncertain: true,
        }
    }

    /// A refusal that repeating cannot fix, with what it means here.
    fn explain(&self, mut error: ApiError) -> ApiError {
        let base = &self.base;
        let why = match error.status {
            400 => format!(
                "{base} refused the request as malformed; this gameplan and the server may speak different API versions"
            ),
            401 => format!(
                "{base} does not accept the token; check `[backend] token` in the plan (a server's operator makes one with `gameplan ledger token`)"
            ),
            403 => format!(
                "the token may not do this on {base}; use a token that holds {}",
                error.details.scope.as_deref().map_or_else(
                    || "the scope this call needs".to_owned(),
                    |s| format!("`{s}`")
                )
            ),
            _ => format!(
                "{base} refused the request as it stands and would refuse it again, so it was not repeated"
            ),
        };
        error.message = format!("{why}: {} ({} {})", error.message, error.status, error.code);
        error
    }
}

fn is_loopback(url: &Url) -> bool {
    let host = url.host_str().unwrap_or("");
    host == "localhost"
        || host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The error body of a refusal, or one made from its status.
fn refusal(status: StatusCode, bytes: &[u8]) -> ApiError {
    if let Ok(mut error) = serde_json::from_slice::<ApiError>(bytes) {
        error.status = status.as_u16();
        return error;
    }
    let text = String::from_utf8_lossy(bytes);
    let text: String = text.trim().chars().take(200).collect();
    ApiError::new(
        status.as_u16(),
        &format!("http_{}", status.as_u16()),
        format!(
            "the server answered {status}{}",
            if text.is_empty() {
                String::new()
            } else {
                format!(": {text}")
            }
        ),
    )
}

/// The last error of `attempts`, saying they ran out and whether the
/// server may have done the call.
fn gave_up(mut error: ApiError, what: &str, attempts: u32, uncertain: bool) -> ApiError {
    let then = if uncertain {
        "the server may have done it: repeat it with the same request (a resume replays the same Idempotency-Key and body), never a new key"
    } else {
        "nothing reached the server in a way that could have changed it"
    };
    error.message = format!(
        "{what}: no certain answer after {attempts} attempts; the last: {}; {then}",
        error.message
    );
    error.uncertain = uncertain;
    error
}

/// The wait after `attempt` (1 = after the first): doubling, capped, and
/// spread by up to a quarter so many clients do not retry in step.
fn backoff(retry: Retry, attempt: u32) -> Duration {
    let doubled = retry
        .first_backoff
        .saturating_mul(1 << (attempt - 1).min(16))
        .min(retry.max_backoff);
    let spread = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos())
        % 250;
    doubled + doubled * spread / 1000
}

/// The TLS error somewhere under `e`, if the failure was TLS's.
fn tls_cause(e: &reqwest::Error) -> Option<String> {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(current) = cause {
        if let Some(tls) = current.downcast_ref::<rustls::Error>() {
            return Some(tls.to_string());
        }
        // An io::Error's `source` skips the error it wraps (hyper-rustls
        // wraps rustls's in two of them): step into it instead.
        cause = match current.downcast_ref::<std::io::Error>() {
            Some(io) => io
                .get_ref()
                .map(|inner| inner as &(dyn std::error::Error + 'static)),
            None => current.source(),
        };
    }
    None
}

/// The innermost cause of `e`: the OS's words ("Connection refused").
fn root_cause(e: &reqwest::Error) -> String {
    let mut current: &dyn std::error::Error = e;
    while let Some(next) = current.source() {
        current = next;
    }
    current.to_string()
}

/// The hosted playtests' calls (docs/hosted.md): only a server has them,
/// so they are this backend's own, not the [`Backend`] seam's. Each is
/// safe to repeat as the module doc says: a build is named by its sha256,
/// an admission by its Idempotency-Key.
impl HttpBackend {
    pub async fn put_build(
        &self,
        token: &Token,
        game: &str,
        sha256: &str,
        bytes: &[u8],
    ) -> Result<BuildKept, ApiError> {
        self.send(Request::new(Endpoint::UploadBuild, &[game, sha256], token).file(bytes))
            .await
    }

    pub async fn hosted_quote(
        &self,
        token: &Token,
        game: &str,
        request: &QuoteRequest,
    ) -> Result<Quote, ApiError> {
        self.send(Request::new(Endpoint::HostedQuote, &[game], token).json(request))
            .await
    }

    pub async fn hosted_admit(
        &self,
        token: &Token,
        game: &str,
        key: &str,
        request: &AdmitRequest,
    ) -> Result<Playtest, ApiError> {
        self.send(
            Request::new(Endpoint::HostedAdmit, &[game], token)
                .header(IDEMPOTENCY_KEY, key)
                .json(request),
        )
        .await
    }

    /// Playtest `id` (or `key:KEY`, the one an admission key made).
    pub async fn playtest(
        &self,
        token: &Token,
        game: &str,
        id: &str,
    ) -> Result<Playtest, ApiError> {
        self.send(Request::new(Endpoint::HostedGet, &[game, id], token))
            .await
    }

    pub async fn cancel_playtest(
        &self,
        token: &Token,
        game: &str,
        id: &str,
    ) -> Result<Playtest, ApiError> {
        self.send(Request::new(Endpoint::HostedCancel, &[game, id], token))
            .await
    }

    pub async fn playtest_file(
        &self,
        token: &Token,
        game: &str,
        id: &str,
        name: &str,
    ) -> Result<FileBody, ApiError> {
        self.send(Request::new(Endpoint::HostedFile, &[game, id, name], token))
            .await
    }
}

impl Backend for HttpBackend {
    fn name(&self) -> &'static str {
        "http"
    }

    fn whoami<'a>(&'a self, token: &'a Token) -> Call<'a, Whoami> {
        Box::pin(self.send(Request::new(Endpoint::Whoami, &[], token)))
    }

    fn estimate<'a>(
        &'a self,
        token: &'a Token,
        game: &'a str,
        request: &'a EstimateRequest,
    ) -> Call<'a, Estimate> {
        Box::pin(self.send(Request::new(Endpoint::Estimate, &[game], token).json(request)))
    }

    fn register<'a>(
        &'a self,
        token: &'a Token,
        game: &'a str,
        key: &'a str,
        request: &'a RegisterRequest,
    ) -> Call<'a, Registered> {
        let request = Request::new(Endpoint::Register, &[game], token)
            .json(request)
            .header(IDEMPOTENCY_KEY, key);
        Box::pin(self.send(request))
    }

    fn transition<'a>(
        &'a self,
        token: &'a Token,
        run: &'a RunRef,
        request: &'a TransitionRequest,
    ) -> Call<'a, Transitioned> {
        let request = Request::new(Endpoint::Transition, &run_ids(run), token).json(request);
        Box::pin(self.send(request))
    }

    fn heartbeat<'a>(
        &'a self,
        token: &'a Token,
        run: &'a RunRef,
        request: &'a HeartbeatRequest,
    ) -> Call<'a, Heartbeat> {
        let request = Request::new(Endpoint::Heartbeat, &run_ids(run), token).json(request);
        Box::pin(self.send(request))
    }

    fn upload<'a>(
        &'a self,
        token: &'a Token,
        target: &'a UploadTarget,
        request: &'a UploadRequest,
    ) -> Call<'a, Uploaded> {
        let mut ids = target_ids(target);
        ids.push(&request.name);
        let upload = Request::new(Endpoint::upload(target), &ids, token)
            .header(CONTENT_SHA256, &request.sha256)
            .file(&request.body);
        Box::pin(self.send(upload))
    }

    fn complete<'a>(
        &'a self,
        token: &'a Token,
        run: &'a RunRef,
        request: &'a CompleteRequest,
    ) -> Call<'a, Completed> {
        let request = Request::new(Endpoint::Complete, &run_ids(run), token).json(request);
        Box::pin(self.send(request))
    }

    fn aggregate_complete<'a>(
        &'a self,
        token: &'a Token,
        job: &'a JobRef,
        request: &'a AggregateCompleteRequest,
    ) -> Call<'a, AggregatePublished> {
        let request = Request::new(Endpoint::AggregateComplete, &job_ids(job), token).json(request);
        Box::pin(self.send(request))
    }

    fn finish<'a>(&'a self, token: &'a Token, job: &'a JobRef) -> Call<'a, Finished> {
        Box::pin(self.send(Request::new(Endpoint::Finish, &job_ids(job), token)))
    }

    fn get_job<'a>(&'a self, token: &'a Token, job: &'a JobRef) -> Call<'a, JobView> {
        Box::pin(self.send(Request::new(Endpoint::GetJob, &job_ids(job), token)))
    }

    fn get_run<'a>(&'a self, token: &'a Token, run: &'a RunRef) -> Call<'a, RunView> {
        Box::pin(self.send(Request::new(Endpoint::GetRun, &run_ids(run), token)))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::sync::Arc;

    use super::{HttpBackend, HttpOptions, Retry};
    use crate::backend::api::{
        AggregateCompleteRequest, ApiError, Cell, CompleteRequest, EstimateRequest, FileDigest,
        HeartbeatRequest, JobRef, RegisterRequest, RunLength, RunRef, RunState, SCOPES, Token,
        TransitionRequest, UploadRequest,
    };
    use crate::backend::endpoint::Endpoint;
    use crate::backend::ledger::sha256_hex;
    use crate::backend::ledger::{DEMO_TOKEN, Ledger};
    use crate::backend::local::LocalBackend;
    use crate::backend::{Backend, UploadTarget};
    use crate::server::RequestLine;

    /// `gameplan serve`'s routes over a fresh ledger in `dir`, on a free
    /// loopback port: their URL and the ledger.
    pub(crate) async fn serve(dir: &std::path::Path) -> (String, Arc<Ledger>) {
        let (url, ledger, _) = serve_logged(dir).await;
        (url, ledger)
    }

    /// [`serve`], and the log lines of the requests it answered.
    async fn serve_logged(dir: &std::path::Path) -> (String, Arc<Ledger>, Arc<Log>) {
        let ledger = Arc::new(Ledger::open(&dir.join("ledger.sqlite")).expect("ledger"));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let log: Arc<Log> = Arc::default();
        let sink = Arc::clone(&log);
        tokio::spawn(crate::server::serve(
            listener,
            Arc::clone(&ledger),
            Arc::new(move |line: &RequestLine| {
                sink.lock().expect("log").push(line.clone());
            }),
            std::future::pending(),
        ));
        (format!("http://{addr}"), ledger, log)
    }

    type Log = std::sync::Mutex<Vec<RequestLine>>;

    /// A token of the demo account with every scope: the server refuses
    /// the public demo token.
    fn studio_token(ledger: &Ledger) -> Token {
        ledger
            .create_token("demo", &crate::backend::api::SCOPES.map(str::to_owned))
            .expect("token")
            .token
    }

    /// The suite calls every endpoint and succeeds at each once at least:
    /// a 2xx comes only from a route's handler, so the client's URL of
    /// each endpoint is one the server routes.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_conformance_suite_passes_over_http_through_every_endpoint() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (url, ledger, log) = serve_logged(dir.path()).await;
        let backend = HttpBackend::new(&url).expect("backend");
        crate::backend::conformance::one_job(&backend, &studio_token(&ledger), "conformance-http")
            .await;
        let lines = log.lock().expect("log").clone();
        let strays: Vec<&RequestLine> = lines
            .iter()
            .filter(|l| Endpoint::of(&l.method, &l.path).is_none())
            .collect();
        assert!(strays.is_empty(), "no endpoint of the table: {strays:?}");
        let answered: BTreeSet<Endpoint> = lines
            .iter()
            .filter(|l| (200..300).contains(&l.status))
            .filter_map(|l| Endpoint::of(&l.method, &l.path))
            .collect();
        // The hosted calls have their own walk (tests/integration/hosted),
        // against a server that plays.
        let missed: Vec<Endpoint> = Endpoint::ALL
            .into_iter()
            .filter(|e| !e.is_hosted() && !answered.contains(e))
            .collect();
        assert!(missed.is_empty(), "never answered with a 2xx: {missed:?}");
    }

    /// One valid request for every call, on a job and run that do not exist.
    struct Calls {
        estimate: EstimateRequest,
        register: RegisterRequest,
        run: RunRef,
        job: JobRef,
        go: TransitionRequest,
        beat: HeartbeatRequest,
        upload: UploadRequest,
        complete: CompleteRequest,
        aggregate: AggregateCompleteRequest,
    }

    fn calls() -> Calls {
        let cells = vec![Cell {
            persona: "kid".into(),
            controller: "standard".into(),
        }];
        let digest = FileDigest {
            size: 1,
            sha256: sha256_hex(b"x"),
        };
        Calls {
            estimate: EstimateRequest {
                cells: cells.clone(),
                modules: Vec::new(),
                run_length: RunLength::Short,
            },
            register: RegisterRequest {
                quote_id: "quote-999".into(),
                confirm_price_cents: 25,
                cells,
                modules: Vec::new(),
                run_length: RunLength::Short,
            },
            run: RunRef {
                game: "g".into(),
                job: "job-999".into(),
                run: "run-999".into(),
            },
            job: JobRef {
                game: "g".into(),
                job: "job-999".into(),
            },
            go: TransitionRequest {
                to: RunState::Launching,
                reason: None,
            },
            beat: HeartbeatRequest {
                actions_taken: 1,
                checkpoint_step: None,
            },
            upload: UploadRequest {
                name: "screens/1.png".into(),
                sha256: sha256_hex(b"x"),
                body: b"x".to_vec(),
            },
            complete: CompleteRequest {
                state: RunState::Succeeded,
                reason: None,
                actions_taken: 1,
                quit_reason: None,
                report: serde_json::json!({}),
                report_md: String::new(),
                manifest: Vec::new(),
            },
            aggregate: AggregateCompleteRequest {
                md: digest.clone(),
                json: digest,
            },
        }
    }

    fn brief<T>(r: Result<T, ApiError>) -> String {
        match r {
            Ok(_) => "ok".to_owned(),
            Err(e) => format!("{} {} {:?}", e.status, e.code, e.details.scope),
        }
    }

    /// Every call's outcome, reduced to what a caller acts on.
    async fn answers(backend: &dyn Backend, token: &Token, c: &Calls) -> Vec<String> {
        let target = UploadTarget::Run(c.run.clone());
        let job_target = UploadTarget::Job(c.job.clone());
        vec![
            brief(backend.whoami(token).await),
            brief(backend.estimate(token, "g", &c.estimate).await),
            brief(backend.register(token, "g", "k", &c.register).await),
            brief(backend.transition(token, &c.run, &c.go).await),
            brief(backend.heartbeat(token, &c.run, &c.beat).await),
            brief(backend.upload(token, &target, &c.upload).await),
            brief(backend.upload(token, &job_target, &c.upload).await),
            brief(backend.complete(token, &c.run, &c.complete).await),
            brief(
                backend
                    .aggregate_complete(token, &c.job, &c.aggregate)
                    .await,
            ),
            brief(backend.finish(token, &c.job).await),
            brief(backend.get_job(token, &c.job).await),
            brief(backend.get_run(token, &c.run).await),
        ]
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn http_and_local_give_the_same_answers_to_tokens_missing_each_scope() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (url, ledger) = serve(dir.path()).await;
        let http = HttpBackend::new(&url).expect("backend");
        let local = LocalBackend::new(Arc::clone(&ledger));
        let calls = calls();
        let mut refused = 0;
        for missing in SCOPES {
            let held: Vec<String> = SCOPES
                .iter()
                .filter(|s| **s != missing)
                .map(|s| (*s).to_owned())
                .collect();
            let token = ledger.create_token("demo", &held).expect("token").token;
            let over_http = answers(&http, &token, &calls).await;
            let direct = answers(&local, &token, &calls).await;
            assert_eq!(over_http, direct, "without {missing}");
            refused += over_http
                .iter()
                .filter(|a| a.contains(&format!("403 missing_scope Some(\"{missing}\")")))
                .count();
        }
        // write: estimate, register, transition, heartbeat, finish, 2 reads;
        // model: register; upload: 2 uploads, complete, aggregate.
        assert_eq!(refused, 7 + 1 + 4);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_server_that_is_not_there_is_certain_and_named_after_the_attempts() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        drop(listener);
        let backend = HttpBackend::with_options(
            &url,
            HttpOptions {
                retry: Retry {
                    attempts: 3,
                    first_backoff: std::time::Duration::from_millis(10),
                    max_backoff: std::time::Duration::from_millis(20),
                },
                ..HttpOptions::default()
            },
        )
        .expect("backend");
        let e = crate::backend::Backend::whoami(&backend, &Token("t".into()))
            .await
            .expect_err("nobody listens");
        assert_eq!(e.code, "backend_unreachable");
        assert!(!e.uncertain, "nothing was sent: {e}");
        assert!(e.message.contains("after 3 attempts"), "{e}");
    }

    #[test]
    fn a_url_that_is_not_http_is_refused_saying_what_to_set() {
        let Err(e) = HttpBackend::new("ftp://example.com") else {
            panic!("ftp accepted")
        };
        assert_eq!(e.code, "invalid_url");
        assert!(e.message.contains("[backend] url"), "{e}");
        let Err(e) = HttpBackend::new("not a url") else {
            panic!("accepted")
        };
        assert_eq!(e.code, "invalid_url");
    }

    #[test]
    fn backoff_doubles_up_to_its_cap() {
        let retry = Retry {
            attempts: 10,
            first_backoff: std::time::Duration::from_millis(100),
            max_backoff: std::time::Duration::from_millis(500),
        };
        let waits: Vec<u128> = (1..=5)
            .map(|n| super::backoff(retry, n).as_millis())
            .collect();
        for (wait, base) in waits.iter().zip([100, 200, 400, 500, 500]) {
            assert!((base..=base * 5 / 4).contains(wait), "{waits:?}");
        }
    }

    #[test]
    fn a_plan_s_backend_table_opens_local_or_http_and_http_needs_url_and_token() {
        use crate::plan::model::{Backend as Config, BackendKind};
        let dir = tempfile::tempdir().expect("tempdir");
        let config = |kind, url: Option<&str>, token: Option<&str>| Config {
            kind,
            url: url.map(str::to_owned),
            token: token.map(str::to_owned),
        };
        let (local, token) =
            crate::backend::from_plan(&config(BackendKind::Local, None, None), dir.path())
                .expect("local");
        assert_eq!((local.name(), token.0.as_str()), ("local", DEMO_TOKEN));
        assert!(dir.path().join("ledger.sqlite").is_file());
        let (http, token) = crate::backend::from_plan(
            &config(BackendKind::Http, Some("http://127.0.0.1:9"), Some("gp_x")),
            dir.path(),
        )
        .expect("http");
        assert_eq!((http.name(), token.0.as_str()), ("http", "gp_x"));
        for (url, token, needs) in [
            (None, Some("gp_x"), "needs a `url`"),
            (Some("http://127.0.0.1:9"), None, "needs a `token`"),
        ] {
            let Err(e) =
                crate::backend::from_plan(&config(BackendKind::Http, url, token), dir.path())
            else {
                panic!("accepted without {needs}")
            };
            assert!(e.message.contains(needs), "{e}");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_401_and_a_400_stop_at_once_each_explained() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (url, ledger) = serve(dir.path()).await;
        let token = studio_token(&ledger);
        // A retry would wait 5 s first: answering sooner proves there was none.
        let backend = HttpBackend::with_options(
            &url,
            HttpOptions {
                retry: Retry {
                    attempts: 3,
                    first_backoff: std::time::Duration::from_secs(5),
                    max_backoff: std::time::Duration::from_secs(5),
                },
                ..HttpOptions::default()
            },
        )
        .expect("backend");
        let started = std::time::Instant::now();
        let e = backend
            .whoami(&Token("gp_nobody".into()))
            .await
            .expect_err("unknown token");
        assert_eq!((e.status, e.code.as_str()), (401, "unauthorized"));
        assert!(e.message.contains("`[backend] token`"), "{e}");
        let run = calls().run;
        let e = backend
            .heartbeat(
                &token,
                &run,
                &HeartbeatRequest {
                    actions_taken: -1,
                    checkpoint_step: None,
                },
            )
            .await
            .expect_err("negative actions");
        assert_eq!((e.status, e.code.as_str()), (400, "invalid_request"));
        assert!(e.message.contains("malformed"), "{e}");
        assert!(!e.uncertain);
        assert!(
            started.elapsed() < std::time::Duration::from_secs(4),
            "retried"
        );
    }
}

//! A typed client of the Ray Jobs REST API (Ray 2.60's dashboard, e.g.
//! `http://ray-head:8265`): submit a shell command as a job under a
//! submission id gameplan chose, read its status and logs, stop it, list
//! and delete jobs. No Python: plain HTTP with reqwest.
//!
//! Owns the wire (paths, JSON, timeouts) and what each answer means
//! ([`RayError`]). Does not own when to retry, what a job runs, how cells
//! are batched or journaled: that is the Ray executor's, which drives this.
//!
//! # Design
//!
//! - **One attempt per call**, each bounded by [`ClientOptions::timeout`]
//!   (connecting by [`ClientOptions::connect_timeout`]). The caller decides
//!   what to do again: a submit whose answer was lost ([`RayError::Timeout`])
//!   is settled by asking for its id, which was chosen (and journaled)
//!   before it was sent, not by a second submit.
//! - **Errors are what the caller acts on**: [`RayError::NotFound`] (404:
//!   no such job — a restarted head has forgotten every job, so resubmit
//!   under the same id), [`RayError::AlreadyExists`] (a submit of an id Ray
//!   already holds: the job exists), [`RayError::Unreachable`] (no
//!   connection: nothing was sent), [`RayError::Timeout`] (sent, no answer
//!   in time: it may have been done), [`RayError::Other`] (any other
//!   refusal, with its status and body; status 0 when the connection broke
//!   before the answer was read, which may also have been done),
//!   [`RayError::Unreadable`] (a 2xx that is not the JSON expected).
//! - **Logs**: Ray 2.60 gives a job's whole log so far (`GET
//!   /api/jobs/{id}/logs`) or a WebSocket tail, which would need a
//!   WebSocket client. [`LogTail`] turns repeated whole reads into a
//!   stream of what is new, by offset: fine for the short logs of a cell,
//!   whose artifacts go to the shared dir, not to the log.
//! - **Ids**: a [`SubmissionId`] is checked before it goes out; Ray puts it
//!   into file names and URL paths unchecked.

mod wire;

use std::time::Duration;

use reqwest::{Method, StatusCode, Url};
use serde::de::DeserializeOwned;

pub use wire::{
    JobDetails, JobStatus, JobType, MAX_SUBMISSION_ID, RuntimeEnv, SubmissionId, SubmitRequest,
    Version,
};

/// The most of a refusal's body an error keeps: Ray's are Python
/// tracebacks, and the end of one says what went wrong.
const BODY_KEPT: usize = 4096;

/// Why a call to the Jobs API gave no answer the caller asked for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, miette::Diagnostic)]
pub enum RayError {
    /// 404: the cluster has no job of this id (a head that restarted has
    /// forgotten its jobs).
    #[error("the Ray cluster at {address} has no job `{id}`")]
    #[diagnostic(
        code(ray::not_found),
        help(
            "a Ray head that restarted has forgotten its jobs; submit it again under the same id"
        )
    )]
    NotFound { address: String, id: String },
    /// A submit of an id the cluster already holds.
    #[error("the Ray cluster at {address} already has a job `{id}`")]
    #[diagnostic(
        code(ray::already_exists),
        help(
            "the job was submitted before (perhaps by an attempt whose answer was lost); follow it by its id"
        )
    )]
    AlreadyExists { address: String, id: String },
    /// No connection could be made: nothing was sent.
    #[error("cannot connect to the Ray dashboard at {address}: {reason}")]
    #[diagnostic(
        code(ray::unreachable),
        help(
            "check that the Ray head runs and that `[executor] address` is its dashboard URL (port 8265 by default)"
        )
    )]
    Unreachable { address: String, reason: String },
    /// The request went out and no answer came in time: it may have been done.
    #[error("the Ray dashboard at {address} did not answer {what} within {after:?}")]
    #[diagnostic(code(ray::timeout))]
    Timeout {
        address: String,
        what: String,
        after: Duration,
    },
    /// Any other refusal: the status and (the end of) Ray's body.
    #[error("the Ray dashboard at {address} answered {what} with {status}: {body}")]
    #[diagnostic(code(ray::refused))]
    Other {
        address: String,
        what: String,
        status: u16,
        body: String,
    },
    /// A 2xx whose body is not what the API sends.
    #[error(
        "the Ray dashboard at {address} answered {what} with a body gameplan cannot read: {reason}"
    )]
    #[diagnostic(
        code(ray::unreadable),
        help(
            "gameplan speaks the Jobs API of Ray 2.60; check the cluster's version with GET /api/version"
        )
    )]
    Unreadable {
        address: String,
        what: String,
        reason: String,
    },
    /// The address given is not an http(s) URL.
    #[error("`{address}` is not a Ray dashboard URL: {reason}")]
    #[diagnostic(code(ray::invalid_address), help("e.g. http://ray-head:8265"))]
    InvalidAddress { address: String, reason: String },
}

/// How long a call may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientOptions {
    /// One request, from connecting to the last byte of the answer.
    pub timeout: Duration,
    pub connect_timeout: Duration,
}

impl Default for ClientOptions {
    fn default() -> Self {
        // A submit answers once the job is recorded (tens of ms); a log
        // read carries the whole log. 30 s covers both on a busy head.
        ClientOptions {
            timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(5),
        }
    }
}

/// A client of one Ray cluster's Jobs API.
#[derive(Debug, Clone)]
pub struct JobsClient {
    base: Url,
    http: reqwest::Client,
    options: ClientOptions,
}

impl JobsClient {
    /// A client of the dashboard at `address` (`http://host:8265`), with
    /// the default timeouts.
    pub fn new(address: &str) -> Result<JobsClient, RayError> {
        JobsClient::with_options(address, ClientOptions::default())
    }

    pub fn with_options(address: &str, options: ClientOptions) -> Result<JobsClient, RayError> {
        let invalid = |reason: String| RayError::InvalidAddress {
            address: address.to_owned(),
            reason,
        };
        let base = Url::parse(address).map_err(|e| invalid(e.to_string()))?;
        if !matches!(base.scheme(), "http" | "https") || base.cannot_be_a_base() {
            return Err(invalid("not an http:// or https:// URL".to_owned()));
        }
        // reqwest is built without a crypto provider of its own; installing
        // ring twice is a harmless refusal (main installs it too).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut builder = reqwest::Client::builder()
            .timeout(options.timeout)
            .connect_timeout(options.connect_timeout)
            // No idle connection is kept: after a head restart the first
            // request on a kept one fails ("connection closed before message
            // completed") though the new head answers. A connection a call
            // costs nothing next to a job's start-up.
            .pool_max_idle_per_host(0)
            .user_agent(concat!("gameplan/", env!("CARGO_PKG_VERSION")));
        if is_loopback(&base) {
            // A proxy from the environment must not stand between gameplan
            // and a cluster on its own machine.
            builder = builder.no_proxy();
        }
        let http = builder
            .build()
            .map_err(|e| invalid(format!("cannot set up an HTTP client: {e}")))?;
        Ok(JobsClient {
            base,
            http,
            options,
        })
    }

    /// The dashboard's address, as given.
    pub fn address(&self) -> &Url {
        &self.base
    }

    /// The API and Ray versions, and the session (a restarted head has a
    /// new one): the cheapest proof that the cluster answers.
    pub async fn version(&self) -> Result<Version, RayError> {
        self.call(Method::GET, &["api", "version"], None, About::Cluster)
            .await
    }

    /// Submits a job under its own id and returns once Ray has recorded it
    /// (PENDING); an id already in use is [`RayError::AlreadyExists`].
    pub async fn submit(&self, request: &SubmitRequest) -> Result<(), RayError> {
        let body = serde_json::to_vec(request).expect("a SubmitRequest serializes");
        let id = request.submission_id.as_str();
        let submitted: wire::Submitted = self
            .call(
                Method::POST,
                &["api", "jobs", ""],
                Some(body),
                About::Submit(id),
            )
            .await?;
        if submitted.submission_id != id {
            return Err(RayError::Unreadable {
                address: self.base.to_string(),
                what: "POST /api/jobs/".to_owned(),
                reason: format!("it named the job `{}`, not `{id}`", submitted.submission_id),
            });
        }
        Ok(())
    }

    /// What Ray says of the job: its status, its node, its exit code.
    pub async fn status(&self, id: &SubmissionId) -> Result<JobDetails, RayError> {
        self.call(
            Method::GET,
            &["api", "jobs", id.as_str()],
            None,
            About::Job(id),
        )
        .await
    }

    /// The job's whole log so far (stdout and stderr of its entrypoint,
    /// after lines Ray writes itself). Empty before the job starts.
    pub async fn logs(&self, id: &SubmissionId) -> Result<String, RayError> {
        let logs: wire::Logs = self
            .call(
                Method::GET,
                &["api", "jobs", id.as_str(), "logs"],
                None,
                About::Job(id),
            )
            .await?;
        Ok(logs.logs)
    }

    /// Asks Ray to stop the job (its entrypoint gets SIGTERM, then SIGKILL
    /// a few seconds later); the status turns STOPPED once it has ended.
    /// `false` when the job had already ended.
    pub async fn stop(&self, id: &SubmissionId) -> Result<bool, RayError> {
        let stopped: wire::Stopped = self
            .call(
                Method::POST,
                &["api", "jobs", id.as_str(), "stop"],
                None,
                About::Job(id),
            )
            .await?;
        Ok(stopped.stopped)
    }

    /// Every job the cluster knows, submitted ones and those of scripts
    /// that called `ray.init()` themselves ([`JobType::Driver`]).
    pub async fn list(&self) -> Result<Vec<JobDetails>, RayError> {
        self.call(Method::GET, &["api", "jobs", ""], None, About::Cluster)
            .await
    }

    /// The CPUs of each node alive in the cluster (the state API's
    /// `GET /api/v0/nodes`, its first 100 nodes).
    pub async fn node_cpus(&self) -> Result<Vec<f64>, RayError> {
        let nodes: wire::Nodes = self
            .call(Method::GET, &["api", "v0", "nodes"], None, About::Cluster)
            .await?;
        Ok(nodes
            .data
            .result
            .result
            .into_iter()
            .filter(|n| n.state == "ALIVE")
            .filter_map(|n| n.resources_total.get("CPU").copied())
            .collect())
    }

    /// Forgets an ended job (its record and its id; the log file stays on
    /// its node). Ray refuses one still running ([`RayError::Other`]).
    pub async fn delete(&self, id: &SubmissionId) -> Result<bool, RayError> {
        let deleted: wire::Deleted = self
            .call(
                Method::DELETE,
                &["api", "jobs", id.as_str()],
                None,
                About::Job(id),
            )
            .await?;
        Ok(deleted.deleted)
    }

    /// `path` under the base, one percent-encoded segment a piece (an id
    /// cannot reach another path); a last "" gives Ray's `/api/jobs/`.
    fn url_of(&self, path: &[&str]) -> Url {
        let mut url = self.base.clone();
        if let Ok(mut segments) = url.path_segments_mut() {
            segments.pop_if_empty().extend(path);
        }
        url
    }

    /// One request and what its answer means.
    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &[&str],
        body: Option<Vec<u8>>,
        about: About<'_>,
    ) -> Result<T, RayError> {
        let url = self.url_of(path);
        let what = format!("{method} {}", url.path());
        let address = self.base.to_string();
        let mut request = self.http.request(method, url);
        if let Some(body) = body {
            request = request
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body);
        }
        let failed = |e: &reqwest::Error| {
            if e.is_connect() {
                RayError::Unreachable {
                    address: address.clone(),
                    reason: root_cause(e),
                }
            } else if e.is_timeout() {
                RayError::Timeout {
                    address: address.clone(),
                    what: what.clone(),
                    after: self.options.timeout,
                }
            } else {
                RayError::Other {
                    address: address.clone(),
                    what: what.clone(),
                    status: 0,
                    body: format!("the connection broke: {}", root_cause(e)),
                }
            }
        };
        let response = request.send().await.map_err(|e| failed(&e))?;
        let status = response.status();
        let bytes = response.bytes().await.map_err(|e| failed(&e))?;
        if status.is_success() {
            return serde_json::from_slice(&bytes).map_err(|e| RayError::Unreadable {
                address,
                what,
                reason: format!("{e} (body: {})", kept(&bytes)),
            });
        }
        let text = String::from_utf8_lossy(&bytes);
        match about {
            About::Submit(id) if wire::says_already_exists(status.as_u16(), &text) => {
                return Err(RayError::AlreadyExists {
                    address,
                    id: id.to_owned(),
                });
            }
            About::Job(id) if status == StatusCode::NOT_FOUND => {
                return Err(RayError::NotFound {
                    address,
                    id: id.to_string(),
                });
            }
            _ => {}
        }
        Err(RayError::Other {
            address,
            what,
            status: status.as_u16(),
            body: kept(&bytes),
        })
    }
}

/// What a request is about, which decides what a refusal means.
#[derive(Clone, Copy)]
enum About<'a> {
    /// The cluster: a 404 is not about a job.
    Cluster,
    /// One job: a 404 is [`RayError::NotFound`].
    Job(&'a SubmissionId),
    /// A submit of this id: "already exists" is [`RayError::AlreadyExists`].
    Submit(&'a str),
}

/// A job's log read as a stream: each [`LogTail::next`] reads the whole
/// log and hands out what it had not handed out before.
#[derive(Debug, Clone)]
pub struct LogTail {
    id: SubmissionId,
    /// Bytes of the log already handed out.
    offset: usize,
}

/// What one read of a [`LogTail`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogChunk {
    /// The log's text past what earlier reads handed out.
    pub text: String,
    /// The log is shorter than what was handed out: it is a new log (the
    /// job was submitted again, to a cluster that had forgotten it), and
    /// `text` is the new one from its start.
    pub restarted: bool,
}

impl LogTail {
    /// A tail of `id`'s log from its start.
    pub fn new(id: SubmissionId) -> LogTail {
        LogTail { id, offset: 0 }
    }

    /// Bytes handed out so far.
    pub fn offset(&self) -> usize {
        self.offset
    }

    pub async fn next(&mut self, client: &JobsClient) -> Result<LogChunk, RayError> {
        let log = client.logs(&self.id).await?;
        Ok(self.advance(&log))
    }

    /// What of `log` is new, and the offset moved past it.
    fn advance(&mut self, log: &str) -> LogChunk {
        let restarted = log.len() < self.offset || !log.is_char_boundary(self.offset);
        if restarted {
            self.offset = 0;
        }
        let text = log[self.offset..].to_owned();
        self.offset = log.len();
        LogChunk { text, restarted }
    }
}

fn is_loopback(url: &Url) -> bool {
    match url.host() {
        Some(url::Host::Domain(name)) => name == "localhost",
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    }
}

/// The end of a body, where a traceback says what went wrong.
fn kept(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let text = text.trim_end();
    if text.len() <= BODY_KEPT {
        return text.to_owned();
    }
    let mut start = text.len() - BODY_KEPT;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    format!("…{}", &text[start..])
}

/// The innermost cause of a reqwest error ("Connection refused"), which
/// says more than reqwest's own wording.
fn root_cause(e: &reqwest::Error) -> String {
    let mut cause: &dyn std::error::Error = e;
    while let Some(inner) = cause.source() {
        cause = inner;
    }
    cause.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(text: &str) -> SubmissionId {
        SubmissionId::new(text).unwrap()
    }

    #[test]
    fn a_tail_hands_out_each_byte_once_and_notices_a_new_log() {
        let mut tail = LogTail::new(id("j"));
        assert_eq!(tail.advance("").text, "");
        let first = tail.advance("Runtime env is setting up.\n");
        assert_eq!(first.text, "Runtime env is setting up.\n");
        assert!(!first.restarted);
        let second = tail.advance("Runtime env is setting up.\nhello\n");
        assert_eq!(second.text, "hello\n");
        assert_eq!(tail.advance("Runtime env is setting up.\nhello\n").text, "");
        let again = tail.advance("new\n");
        assert!(again.restarted);
        assert_eq!(again.text, "new\n");
        assert_eq!(tail.offset(), 4);
    }

    #[test]
    fn a_tail_never_cuts_a_character() {
        let mut tail = LogTail::new(id("j"));
        tail.advance("ab");
        // A log that changed under the offset so that it falls inside "é".
        let chunk = tail.advance("aé and more");
        assert!(chunk.restarted);
        assert_eq!(chunk.text, "aé and more");
    }

    #[test]
    fn a_refusal_keeps_the_end_of_a_long_body() {
        let body = format!("{}ValueError: the reason\n", "x".repeat(10_000));
        let kept = kept(body.as_bytes());
        assert!(kept.ends_with("ValueError: the reason"), "{kept}");
        assert!(kept.len() <= BODY_KEPT + "…".len());
        assert_eq!(super::kept(b"short\n"), "short");
    }

    #[test]
    fn only_http_urls_are_addresses() {
        assert!(JobsClient::new("http://127.0.0.2:8265").is_ok());
        assert!(JobsClient::new("https://ray.example:443/prefix/").is_ok());
        for bad in ["127.0.0.2:8265", "ftp://h/", "not a url", "mailto:x@y"] {
            assert!(
                matches!(JobsClient::new(bad), Err(RayError::InvalidAddress { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn paths_go_under_the_base_one_segment_a_piece() {
        for (base, want) in [
            ("http://h:8265", "http://h:8265/api/jobs/"),
            ("http://h:8265/", "http://h:8265/api/jobs/"),
            ("http://h/ray/", "http://h/ray/api/jobs/"),
        ] {
            let client = JobsClient::new(base).unwrap();
            assert_eq!(client.url_of(&["api", "jobs", ""]).as_str(), want);
        }
        let client = JobsClient::new("http://h:8265").unwrap();
        assert_eq!(
            client.url_of(&["api", "jobs", "a/../b", "logs"]).path(),
            "/api/jobs/a%2F..%2Fb/logs"
        );
    }

    #[tokio::test]
    async fn nothing_listening_is_unreachable_and_a_silent_server_is_a_timeout() {
        // A port bound and closed again: nothing listens there.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let client = JobsClient::new(&format!("http://127.0.0.1:{port}")).unwrap();
        let err = client.version().await.unwrap_err();
        assert!(matches!(err, RayError::Unreachable { .. }), "{err:?}");

        // A server that accepts and never answers.
        let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = format!("http://{}", silent.local_addr().unwrap());
        let held = tokio::spawn(async move {
            let mut open = Vec::new();
            while let Ok((stream, _)) = silent.accept().await {
                open.push(stream);
            }
        });
        let client = JobsClient::with_options(
            &address,
            ClientOptions {
                timeout: Duration::from_millis(300),
                connect_timeout: Duration::from_secs(1),
            },
        )
        .unwrap();
        let err = client.status(&id("j")).await.unwrap_err();
        assert!(matches!(err, RayError::Timeout { .. }), "{err:?}");
        held.abort();
    }

    #[tokio::test]
    async fn answers_map_to_errors_as_ray_2_60_gives_them() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        // A one-request-at-a-time server answering from a script of
        // (status, content type, body), in order: Ray's real answers.
        let script: Vec<(u16, &str, String)> = vec![
            (404, "text/plain", "Job nope does not exist".into()),
            (
                500,
                "text/plain",
                "Traceback (most recent call last):\nRuntimeError: Request failed with status code 400: Traceback (most recent call last):\nValueError: Job with submission_id dup already exists. Please use a different submission_id.\n.".into(),
            ),
            (
                500,
                "text/plain",
                "No available agent to submit job, please try again later.".into(),
            ),
            (200, "application/json", "<html>".into()),
            (200, "application/json", r#"{"job_id": "other", "submission_id": "other"}"#.into()),
        ];
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = format!("http://{}", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            for (status, kind, body) in script {
                let (mut stream, _) = listener.accept().await.unwrap();
                let mut seen = Vec::new();
                let mut buf = [0u8; 4096];
                // Read the head and, for a POST, its body (small here).
                loop {
                    let n = stream.read(&mut buf).await.unwrap();
                    seen.extend_from_slice(&buf[..n]);
                    let text = String::from_utf8_lossy(&seen);
                    if let Some(end) = text.find("\r\n\r\n") {
                        let length = text
                            .lines()
                            .find_map(|l| {
                                l.to_ascii_lowercase()
                                    .strip_prefix("content-length:")
                                    .map(|v| v.trim().parse::<usize>().unwrap())
                            })
                            .unwrap_or(0);
                        if seen.len() >= end + 4 + length {
                            break;
                        }
                    }
                }
                let answer = format!(
                    "HTTP/1.1 {status} X\r\ncontent-type: {kind}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                stream.write_all(answer.as_bytes()).await.unwrap();
            }
        });
        let client = JobsClient::new(&address).unwrap();
        let err = client.status(&id("nope")).await.unwrap_err();
        assert!(
            matches!(&err, RayError::NotFound { id, .. } if id == "nope"),
            "{err:?}"
        );
        let dup = SubmitRequest::new(id("dup"), "true");
        let err = client.submit(&dup).await.unwrap_err();
        assert!(
            matches!(&err, RayError::AlreadyExists { id, .. } if id == "dup"),
            "{err:?}"
        );
        let err = client.submit(&dup).await.unwrap_err();
        assert!(
            matches!(&err, RayError::Other { status: 500, body, .. } if body.contains("No available agent")),
            "{err:?}"
        );
        let err = client.list().await.unwrap_err();
        assert!(matches!(err, RayError::Unreadable { .. }), "{err:?}");
        let err = client.submit(&dup).await.unwrap_err();
        assert!(
            matches!(&err, RayError::Unreadable { reason, .. } if reason.contains("other")),
            "{err:?}"
        );
        server.await.unwrap();
    }
}

//! The typed API every backend speaks (docs/serve.md › The API): one
//! request and one response type per call, and the error body. `local`
//! passes these values to the ledger directly; `gameplan serve` and the
//! `http` backend move the same types as JSON, so both backends give the
//! same answers.
//!
//! Field names are the wire names. Money is always integer cents (`i64`).
//!
//! # Error codes
//!
//! Every refusal is an [`ApiError`]: an HTTP status and the JSON body
//! `{code, message, ...}` (extra fields only where the row says).
//!
//! | code | status | when | extra fields |
//! |---|---|---|---|
//! | `invalid_request` | 400 | a field out of range (negative cents, an unknown module, a reason on a succeeded run, a reason over 400 chars, a control or format character (ESC, U+202E) in a game, persona, controller, file name or key) | |
//! | `unauthorized` | 401 | no token, a token the ledger does not know or that was revoked; on `gameplan serve`, the embedded demo token | |
//! | `missing_scope` | 403 | the token lacks the scope the call needs | `scope` |
//! | `not_found` | 404 | no such account, job, run or file (also another account's) | |
//! | `insufficient_balance` | 402 | register: the price is above the balance | `price_cents`, `balance_cents` |
//! | `price_changed` | 409 | register: `confirm_price_cents` is not the quote's price, or the price list moved since | `price_cents` |
//! | `quote_expired` | 409 | register: the quote is past its `expires_at`; estimate again | |
//! | `charge_in_progress` | 409 | register: another register holds the ledger right now (possibly the same key); retry with the same key and body | |
//! | `too_many_active_jobs` | 409 | register: the account holds as many unsettled jobs as it may (20 unless `serve --max-open-jobs`); finish one | `quota` (`open_jobs`), `used`, `limit` |
//! | `invalid_transition` | 409 | a run moved where the state machine has no edge; a call on a settled job | |
//! | `files_immutable` | 409 | upload: the run was completed (its files verified), or the job published its aggregate or was settled; the same bytes again are answered 200 | |
//! | `aggregate_published` | 409 | aggregate complete: the job published other digests already | |
//! | `quota_exceeded` | 413 | upload: the run's files would pass its quota of files (2,000 unless `serve --max-run-files`) or bytes (256 MiB unless `serve --max-run-bytes`); the job's own files count as a run | `quota` (`run_files`, `run_bytes`), `used`, `limit` |
//! | `body_too_large` | 413 | `gameplan serve`: the body is over the route's cap (uploads 64 MiB, JSON 4 MiB) | |
//! | `too_many_cells` | 422 | estimate / register: more cells than the ledger takes per job (10,000 unless `serve --max-cells`) | |
//! | `quote_invalid` | 422 | register: the `quote_id` is not one this ledger gave this account for this game (made up, altered, or another ledger's); estimate again | |
//! | `idempotency_mismatch` | 422 | register: this Idempotency-Key was used with another body | `differs` (top-level fields) |
//! | `upload_unverified` | 422 | complete / aggregate complete: a manifest file was not uploaded, or its size or sha256 differ | `missing` (paths) |
//! | `digest_mismatch` | 422 | upload: the body's sha256 is not `x-content-sha256` | |
//! | `body_timeout` | 408 | `gameplan serve`: the body did not arrive within the idle timeout (30 seconds unless `serve --idle-timeout`) | |
//! | `method_not_allowed` | 405 | `gameplan serve`: the path does not take that method | |
//! | `server_busy` | 503 | `gameplan serve`: it holds the most connections it takes (`serve --max-connections`), each with a request in flight; nothing was read or done, retry | |
//! | `ledger_unavailable` | 503 | the ledger file cannot be opened or written (disk, permissions, a lock held too long) | |
//!
//! The scopes each call needs, with its method and path, are the table in
//! [`super::endpoint`]. A request type's doc names its path too: it is
//! the description `gameplan schema api` publishes.

use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The scopes a token can hold.
pub const SCOPES: [&str; 3] = ["playtest:write", "playtest:model", "playtest:upload"];
pub const SCOPE_WRITE: &str = "playtest:write";
pub const SCOPE_MODEL: &str = "playtest:model";
pub const SCOPE_UPLOAD: &str = "playtest:upload";

/// A bearer token. Its `Debug` never shows the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(pub String);

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

/// Where a job lives: `/v1/games/{game}/jobs/{job}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRef {
    pub game: String,
    pub job: String,
}

/// Where a run lives: `/v1/games/{game}/jobs/{job}/runs/{run}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunRef {
    pub game: String,
    pub job: String,
    pub run: String,
}

/// `GET /v1/whoami`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Whoami {
    /// The account the token belongs to.
    pub user: String,
    pub scopes: Vec<String>,
}

/// How long each cell plays: its price row.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum RunLength {
    Short,
    Standard,
    Long,
}

impl RunLength {
    pub fn as_str(self) -> &'static str {
        match self {
            RunLength::Short => "short",
            RunLength::Standard => "standard",
            RunLength::Long => "long",
        }
    }
}

/// One played cell: a persona with a controller.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Cell {
    pub persona: String,
    pub controller: String,
}

impl Cell {
    /// The cell of `persona` with `controller`, as a plan's cell (priced,
    /// bought, quoted) is asked of the API.
    pub fn new(persona: &str, controller: &str) -> Cell {
        Cell {
            persona: persona.to_owned(),
            controller: controller.to_owned(),
        }
    }
}

/// `POST /v1/games/{game}/estimate`: the cells that will actually run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EstimateRequest {
    pub cells: Vec<Cell>,
    /// Add-ons per cell, e.g. `video`.
    #[serde(default)]
    pub modules: Vec<String>,
    pub run_length: RunLength,
}

/// One line of a quote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PriceLine {
    pub unit: String,
    pub count: i64,
    pub unit_cents: i64,
}

/// The answer to an estimate: a quote, valid until `expires_at`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Estimate {
    /// Names this quote in `register`.
    pub quote_id: String,
    pub estimate_cents: i64,
    pub balance_cents: i64,
    /// Whether the balance covers the quote.
    pub ok: bool,
    pub breakdown: Vec<PriceLine>,
    /// RFC 3339, UTC.
    pub expires_at: String,
}

/// `POST /v1/games/{game}/jobs` with an `Idempotency-Key` header.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RegisterRequest {
    pub quote_id: String,
    /// Must equal the quote's `estimate_cents`.
    pub confirm_price_cents: i64,
    pub cells: Vec<Cell>,
    #[serde(default)]
    pub modules: Vec<String>,
    pub run_length: RunLength,
}

/// Where a run is (docs/money.md › A bought cell reports as it plays):
/// queued → launching → playing → reporting → uploading → succeeded; any
/// open state → failed, canceled, `budget_exceeded`; playing → interrupted
/// → launching.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    Queued,
    Launching,
    Playing,
    Interrupted,
    Reporting,
    Uploading,
    Succeeded,
    Failed,
    Canceled,
    BudgetExceeded,
}

impl RunState {
    pub const ALL: [RunState; 10] = [
        RunState::Queued,
        RunState::Launching,
        RunState::Playing,
        RunState::Interrupted,
        RunState::Reporting,
        RunState::Uploading,
        RunState::Succeeded,
        RunState::Failed,
        RunState::Canceled,
        RunState::BudgetExceeded,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RunState::Queued => "queued",
            RunState::Launching => "launching",
            RunState::Playing => "playing",
            RunState::Interrupted => "interrupted",
            RunState::Reporting => "reporting",
            RunState::Uploading => "uploading",
            RunState::Succeeded => "succeeded",
            RunState::Failed => "failed",
            RunState::Canceled => "canceled",
            RunState::BudgetExceeded => "budget_exceeded",
        }
    }

    pub fn parse(text: &str) -> Option<RunState> {
        RunState::ALL.into_iter().find(|s| s.as_str() == text)
    }

    /// No edge leaves these.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            RunState::Succeeded | RunState::Failed | RunState::Canceled | RunState::BudgetExceeded
        )
    }

    /// Whether the state machine has the edge `self → to`. Moving to the
    /// state a run is already in is not an edge (the ledger answers it as a
    /// replay, so a retried request is harmless).
    pub fn can_move_to(self, to: RunState) -> bool {
        use RunState::{
            BudgetExceeded, Canceled, Failed, Interrupted, Launching, Playing, Queued, Reporting,
            Succeeded, Uploading,
        };
        if self.is_terminal() {
            return false;
        }
        matches!(
            (self, to),
            (_, Failed | Canceled | BudgetExceeded)
                | (Queued | Interrupted, Launching)
                | (Launching, Playing)
                | (Playing, Reporting | Interrupted)
                | (Reporting, Uploading)
                | (Uploading, Succeeded)
        )
    }
}

impl fmt::Display for RunState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One run of a job, as the ledger holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RunView {
    pub id: String,
    pub job_id: String,
    pub persona: String,
    pub controller: String,
    pub state: RunState,
    /// What this run cost; refunded at finish when it never played.
    pub price_cents: i64,
    /// Whether it ever reached `playing`.
    pub played: bool,
    pub actions_taken: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A job's settlement, made once by `finish`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Settlement {
    pub job_id: String,
    pub charged_cents: i64,
    pub refunded_cents: i64,
    /// charged − refunded: what the job cost in the end.
    pub net_cents: i64,
    /// The runs refunded because they never played.
    pub refunded_runs: Vec<String>,
    /// RFC 3339, UTC.
    pub settled_at: String,
}

/// A job: what register bought.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct JobView {
    pub id: String,
    pub game: String,
    pub idempotency_key: String,
    /// `open` until finish, then `settled`.
    pub state: String,
    pub price_cents: i64,
    pub charged_cents: i64,
    pub refunded_cents: i64,
    pub runs: Vec<RunView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub settlement: Option<Settlement>,
    /// Whether the aggregate was published (aggregate complete).
    pub aggregate_published: bool,
}

/// The answer to register: the job, and whether it was bought by an
/// earlier request with this key and body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Registered {
    pub job: JobView,
    pub replayed: bool,
    /// The account's balance after the charge.
    pub balance_cents: i64,
}

/// `POST …/runs/{run}/transition`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TransitionRequest {
    pub to: RunState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The answer to a transition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Transitioned {
    pub run: RunView,
    /// False when the run already was in that state (a retried request).
    pub changed: bool,
}

/// `POST …/runs/{run}/heartbeat`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HeartbeatRequest {
    pub actions_taken: i64,
    #[serde(default)]
    pub checkpoint_step: Option<i64>,
}

/// What a run used of what it bought.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Usage {
    pub actions_taken: i64,
    /// The run length's action allowance.
    pub max_actions: i64,
}

/// The answer to a heartbeat.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Heartbeat {
    pub usage: Usage,
    /// Stop after this turn: the run is over its allowance, ended, or its job settled.
    pub cancel_requested: bool,
}

/// `PUT …/runs/{run}/files/{name}` (or `…/jobs/{job}/files/{name}` for the
/// aggregate): the body, and its sha256 in `x-content-sha256`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadRequest {
    pub name: String,
    /// Lowercase hex.
    pub sha256: String,
    pub body: Vec<u8>,
}

/// The answer to an upload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Uploaded {
    pub name: String,
    pub size: i64,
    pub sha256: String,
}

/// One file a run (or the aggregate) says it uploaded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ManifestEntry {
    pub path: String,
    pub size: i64,
    pub sha256: String,
}

/// `POST …/runs/{run}/complete`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CompleteRequest {
    /// Where the run ends: succeeded, failed, canceled or `budget_exceeded`.
    pub state: RunState,
    /// None for a succeeded run; otherwise redacted, at most 400 characters.
    #[serde(default)]
    pub reason: Option<String>,
    pub actions_taken: i64,
    #[serde(default)]
    pub quit_reason: Option<String>,
    /// The cell's report.json.
    pub report: serde_json::Value,
    pub report_md: String,
    pub manifest: Vec<ManifestEntry>,
}

/// The answer to complete.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Completed {
    pub run: RunView,
    /// False when this run was already completed with this state.
    pub changed: bool,
}

/// A file's size and digest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileDigest {
    pub size: i64,
    pub sha256: String,
}

/// `POST …/jobs/{job}/aggregate/complete`: `aggregate.md` and
/// `aggregate.json`, uploaded to the job before.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AggregateCompleteRequest {
    pub md: FileDigest,
    pub json: FileDigest,
}

/// The answer to aggregate complete.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct AggregatePublished {
    pub job_id: String,
    /// False when the same aggregate was already published.
    pub changed: bool,
}

/// The answer to finish: the settlement, and whether it was made earlier.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Finished {
    pub settlement: Settlement,
    pub replayed: bool,
    pub balance_cents: i64,
}

/// A refusal: the HTTP status and the JSON body `{code, message, ...}`.
/// The module doc's table lists every code.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema, thiserror::Error)]
#[error("{message} ({code})")]
pub struct ApiError {
    /// The HTTP status; not in the body.
    #[serde(skip)]
    pub status: u16,
    pub code: String,
    pub message: String,
    /// The fields some codes add (boxed: most errors have none).
    #[serde(flatten)]
    pub details: Box<ErrorDetails>,
    /// Set by the `http` backend when no certain answer came (a timeout, a
    /// lost connection, a 5xx, an unreadable body): the server may have done
    /// the call, so it must be repeated with the same Idempotency-Key and
    /// body, never a new key. Not in the body.
    #[serde(skip)]
    pub uncertain: bool,
}

/// The fields an error body adds for some codes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ErrorDetails {
    /// `upload_unverified`: the manifest paths not uploaded as described.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<String>,
    /// `idempotency_mismatch`: the top-level fields that differ from the first body.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub differs: Vec<String>,
    /// `missing_scope`: the scope the call needs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// `insufficient_balance`, `price_changed`: the price.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price_cents: Option<i64>,
    /// `insufficient_balance`: the balance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub balance_cents: Option<i64>,
    /// `quota_exceeded`, `too_many_active_jobs`: the quota refused
    /// (`run_files`, `run_bytes`, `open_jobs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota: Option<String>,
    /// `quota_exceeded`, `too_many_active_jobs`: how much of the quota is
    /// used (files, bytes or jobs), before the refused call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used: Option<i64>,
    /// `quota_exceeded`, `too_many_active_jobs`: the quota's limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<i64>,
}

impl ApiError {
    pub fn new(status: u16, code: &str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code: code.to_owned(),
            message: message.into(),
            details: Box::default(),
            uncertain: false,
        }
    }

    /// The same error with some details set.
    #[must_use]
    pub fn with(mut self, set: impl FnOnce(&mut ErrorDetails)) -> Self {
        set(&mut self.details);
        self
    }

    pub fn invalid_request(message: impl Into<String>) -> Self {
        ApiError::new(400, "invalid_request", message)
    }

    pub fn unauthorized() -> Self {
        ApiError::new(
            401,
            "unauthorized",
            "the bearer token is missing or unknown to this ledger; create one with `gameplan ledger token --scopes ...`",
        )
    }

    pub fn missing_scope(scope: &str) -> Self {
        ApiError::new(
            403,
            "missing_scope",
            format!("the token lacks the scope `{scope}`; use a token that holds it"),
        )
        .with(|d| d.scope = Some(scope.to_owned()))
    }

    pub fn not_found(what: &str) -> Self {
        ApiError::new(404, "not_found", format!("{what} does not exist"))
    }

    pub fn invalid_transition(message: impl Into<String>) -> Self {
        ApiError::new(409, "invalid_transition", message)
    }

    pub fn unavailable(message: impl Into<String>) -> Self {
        ApiError::new(503, "ledger_unavailable", message)
    }
}

/// Where an upload goes: one run's files, or the job's (the aggregate).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UploadTarget {
    Run(RunRef),
    Job(JobRef),
}

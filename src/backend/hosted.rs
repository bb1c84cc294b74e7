//! Hosted playtests on the wire (docs/hosted.md): what a client and a
//! `gameplan serve --executor` server say to each other about a build, a
//! quote, an admission and a playtest's phases. The ledger keeps them
//! (`ledger::hosted`); the room `hosted` plays them and is the client.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::api::{Estimate, RunLength, Settlement};

/// The add-on module a hosted cell is priced with: the server's compute.
pub const COMPUTE_MODULE: &str = "hosted_compute";

/// Where a hosted playtest is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Admitted and paid; waiting for the worker.
    Queued,
    /// Unpacking the build into the playtest's workspace.
    Provisioning,
    /// The cells are playing on the executor.
    Running,
    /// The cells' reports are read and each cell's run is ended.
    Capturing,
    /// The aggregate, gates and report page.
    Analyzing,
    ReportReady,
    Failed,
    Canceled,
}

impl Phase {
    pub const ALL: [Phase; 8] = [
        Phase::Queued,
        Phase::Provisioning,
        Phase::Running,
        Phase::Capturing,
        Phase::Analyzing,
        Phase::ReportReady,
        Phase::Failed,
        Phase::Canceled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Queued => "queued",
            Phase::Provisioning => "provisioning",
            Phase::Running => "running",
            Phase::Capturing => "capturing",
            Phase::Analyzing => "analyzing",
            Phase::ReportReady => "report_ready",
            Phase::Failed => "failed",
            Phase::Canceled => "canceled",
        }
    }

    pub fn parse(text: &str) -> Option<Phase> {
        Phase::ALL.into_iter().find(|p| p.as_str() == text)
    }

    /// Whether it will not change any more.
    pub fn is_over(self) -> bool {
        matches!(self, Phase::ReportReady | Phase::Failed | Phase::Canceled)
    }
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `PUT /v1/games/{game}/builds/{sha256}`: the build kept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct BuildKept {
    pub sha256: String,
    pub files: u64,
    pub unpacked_bytes: u64,
    pub plans: Vec<String>,
    /// False when this account had uploaded it before.
    pub new: bool,
}

/// `POST /v1/games/{game}/hosted/quotes`: which plan of which build, with
/// which variables.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct QuoteRequest {
    pub build: String,
    /// Relative to the build's root, one of its manifest's plans.
    pub plan: String,
    #[serde(default)]
    pub vars: BTreeMap<String, String>,
}

/// One cell a quote prices.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct QuotedCell {
    /// Its step instance id (`play[kid,random]`).
    pub id: String,
    pub persona: String,
    pub controller: String,
}

/// A hosted quote: what `hosted run` shows and confirms. Nothing is
/// charged for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Quote {
    /// The format (1), so a quote file is recognised.
    pub hosted_quote: u32,
    /// The server it was asked of.
    #[serde(default)]
    pub server: String,
    pub game: String,
    pub build: String,
    pub plan: String,
    pub vars: BTreeMap<String, String>,
    /// The account it prices for.
    pub account: String,
    pub cells: Vec<QuotedCell>,
    pub run_length: RunLength,
    pub modules: Vec<String>,
    /// The ledger's estimate: its id, the price, the balance, the lines
    /// (the cells, the hosted compute per controller, the aggregate).
    #[serde(flatten)]
    pub estimate: Estimate,
    /// What is accepted with the price: when money comes back, and how the
    /// game is played.
    pub statements: Vec<String>,
}

/// `POST /v1/games/{game}/hosted` (with an `Idempotency-Key`): admit the
/// quoted playtest, charging its price once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct AdmitRequest {
    pub build: String,
    pub plan: String,
    #[serde(default)]
    pub vars: BTreeMap<String, String>,
    pub quote_id: String,
    pub confirm_price_cents: i64,
}

/// One cell of a playtest, and its run in the ledger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PlaytestCell {
    pub id: String,
    pub persona: String,
    pub controller: String,
    pub run_id: String,
    pub state: String,
    pub actions_taken: i64,
    /// Whether the ledger saw it play (else it is refunded at settlement).
    pub played: bool,
}

/// What the analysis came to, once there is one.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Outcome {
    /// The exit code gameplan gave the plan's run.
    pub exit_code: i64,
    /// Findings by category, as the aggregate counts them.
    pub findings: BTreeMap<String, u64>,
    /// The run's files to fetch (`report.html`, `aggregate.json`, ...).
    pub files: Vec<String>,
    /// The last lines gameplan printed, when the run failed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub log_tail: String,
}

/// A hosted playtest, as `hosted status` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Playtest {
    pub id: String,
    pub game: String,
    pub phase: Phase,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub job_id: String,
    pub build: String,
    pub plan: String,
    pub cells: Vec<PlaytestCell>,
    pub charged_cents: i64,
    pub refunded_cents: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settlement: Option<Settlement>,
    pub cancel_requested: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<Outcome>,
    /// An admission answered from the one its key already made.
    #[serde(default)]
    pub replayed: bool,
    pub created_at: String,
    pub updated_at: String,
}

/// `GET /v1/games/{game}/hosted/{playtest}/files/{*name}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct FileBody {
    pub name: String,
    pub size: u64,
    pub sha256: String,
    pub body_base64: String,
}

/// `hosted-` and the number: a playtest's id.
pub fn playtest_id(n: i64) -> String {
    format!("hosted-{n}")
}

/// The number of a playtest id, if it is one.
pub fn parse_playtest_id(id: &str) -> Option<i64> {
    id.strip_prefix("hosted-")?
        .parse()
        .ok()
        .filter(|n: &i64| *n > 0)
}

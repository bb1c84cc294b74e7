//! The run report: what one run did, step by step. The engine fills it in;
//! `report/` renders it (text, JSON, `JUnit`, markdown); `schemas/run.schema.json`
//! is generated from it.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::journal::run::{RunOutcome, StepState};

/// One step's line in the run report.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct StepReport {
    pub id: String,
    pub kind: String,
    pub state: StepState,
    pub duration_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Attempts made in this run (0 when reused, skipped or done before a resume).
    pub attempts: u32,
    /// The step's log, when it ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log: Option<String>,
}

/// The document `plan run --json` prints (schema: `schemas/run.schema.json`).
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct RunReport {
    pub run_id: String,
    pub plan: String,
    pub outcome: RunOutcome,
    pub exit_code: u8,
    pub resumed: bool,
    pub duration_ms: u64,
    /// Count of steps per state.
    pub counts: BTreeMap<String, usize>,
    /// The first failure, the root cause when several steps failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub root_cause: Option<String>,
    pub steps: Vec<StepReport>,
    /// How to continue an interrupted run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resume_command: Option<String>,
    /// Why the run stopped early: its journal could not be written (a full
    /// disk, a deleted state directory). The run is unfinished, and resumes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub journal_error: Option<String>,
    /// What the play and simulate steps found, when the plan has any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub playtest: Option<super::playtest::Playtest>,
}

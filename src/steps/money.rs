//! What the money kinds share (`estimate`, `register`, `play` in a paid run,
//! `deliver`, `aggregate`'s publishing, `finish`): the records one leaves
//! for the next, how a backend's refusal becomes a step outcome, and the
//! crash points the kill -9 tests stop gameplan at.
//!
//! - **Records.** `estimate` leaves a [`QuoteRecord`] (field [`QUOTE`] of a
//!   durable checkpoint) and `register` a [`JobRecord`] (field [`JOB`]),
//!   each journaled before the step ends; steps below read them through
//!   [`StepIo::upstream`], from the journal on resume as in the run that
//!   wrote them. A paid cell finds its backend run with [`run_of`]. A run
//!   that bought nothing (every cell reused) has a quote with no cells and
//!   no job: the steps below do nothing and say so.
//! - **Outcomes.** [`refusal`] says what a backend's error means for the
//!   run, in one place: no certain answer → [`StepOutcome::Uncertain`] (the
//!   resume sends the same key and body), a token or scope refused → exit
//!   4, a charge refused before it happened → exit 3, the rest → exit 1.
//! - **Crash points** ([`crash_point`], from `backend::crash_points`): a
//!   money kind marks each boundary of its calls, where the kill -9 tests
//!   stop gameplan.

use serde::{Deserialize, Serialize};

use super::{StepIo, StepOutcome};
use crate::backend::api::{ApiError, JobRef, RunLength, RunRef};
pub use crate::backend::crash_points::{Boundary, crash_point};

/// The checkpoint field `estimate`'s record is under.
pub const QUOTE: &str = "quote";
/// The checkpoint field `register`'s record is under.
pub const JOB: &str = "job";

/// What `estimate` priced and the person accepted: the quote `register`
/// buys, and the cells it covers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuoteRecord {
    /// The game id the quote is for (`[game] id`).
    pub game: String,
    pub quote_id: String,
    pub estimate_cents: i64,
    pub balance_cents: i64,
    pub expires_at: String,
    pub run_length: RunLength,
    pub modules: Vec<String>,
    /// The cells to buy, in plan order (reused cells are not among them);
    /// empty when nothing needs buying.
    pub cells: Vec<BoughtCell>,
}

/// One cell a quote covers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BoughtCell {
    /// The play cell's step id (`play[curious-kid,standard]`).
    pub id: String,
    pub persona: String,
    pub controller: String,
}

/// The job `register` bought: which backend run plays which cell.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobRecord {
    pub game: String,
    pub job: String,
    pub price_cents: i64,
    /// One per bought cell, in the quote's order.
    pub runs: Vec<CellRun>,
}

/// The backend run of one bought cell.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CellRun {
    /// The play cell's step id.
    pub cell: String,
    pub run: String,
}

impl JobRecord {
    pub fn job_ref(&self) -> JobRef {
        JobRef {
            game: self.game.clone(),
            job: self.job.clone(),
        }
    }

    /// The backend run that plays `cell` (a play cell's step id).
    pub fn run_ref(&self, cell: &str) -> Option<RunRef> {
        self.runs.iter().find(|r| r.cell == cell).map(|r| RunRef {
            game: self.game.clone(),
            job: self.job.clone(),
            run: r.run.clone(),
        })
    }
}

/// The newest record under `field` among the checkpoints of the steps `io`
/// may read (its needs, directly or not), or its own.
fn record<T: for<'de> Deserialize<'de>>(io: &StepIo, field: &str) -> Option<T> {
    let own = io.checkpoints();
    let upstream = io
        .upstream_ids()
        .into_iter()
        .filter_map(|id| io.upstream(&id))
        .flat_map(|u| u.checkpoints);
    own.into_iter()
        .chain(upstream)
        .filter_map(|c| c.data.get(field).cloned())
        .filter_map(|value| serde_json::from_value(value).ok())
        .last()
}

/// The quote `estimate` left (or this step's own, for `estimate`).
pub fn quote_of(io: &StepIo) -> Option<QuoteRecord> {
    record(io, QUOTE)
}

/// The job `register` left (or this step's own, for `register`); `None`
/// when nothing was bought or no register ran before this step.
pub fn job_of(io: &StepIo) -> Option<JobRecord> {
    record(io, JOB)
}

/// The backend run that plays `cell` in this run's job, if it was bought.
pub fn run_of(io: &StepIo, cell: &str) -> Option<RunRef> {
    job_of(io)?.run_ref(cell)
}

/// A run's `reason` as the backend gets it: `text` with the plan's secrets
/// redacted, cut to the API's 400 characters.
pub fn reason(io: &StepIo, text: &str) -> String {
    let max = crate::backend::ledger::runs::MAX_REASON_CHARS;
    // `cut` adds an ellipsis when it cuts: one character of the 400.
    crate::text::cut(&io.redact(text), max - 1)
}

/// What a backend's refusal of `call` means for the step: `doing` says what
/// the step was doing ("registering the job"), `charged` what was and was
/// not charged ("Nothing was charged."); both begin the message.
pub fn refusal(e: &ApiError, doing: &str, charged: &str) -> StepOutcome {
    if e.uncertain {
        return StepOutcome::Uncertain {
            message: format!(
                "{doing}: no certain answer came ({}); the backend may have done it. {charged} \
                 The run stays open: `gameplan plan resume` sends the same request under the same \
                 idempotency key, so nothing is charged twice",
                e.message
            ),
        };
    }
    let said = format!("{doing}: the backend refused ({}): {}", e.code, e.message);
    match (e.status, e.code.as_str()) {
        (401 | 403, _) => StepOutcome::Unauthorized {
            message: format!("{said}. {charged}"),
        },
        (402, _) | (409, "price_changed" | "too_many_active_jobs" | "quote_expired") => {
            StepOutcome::Refused {
                message: format!("{said}. {charged}"),
            }
        }
        (409, "charge_in_progress") => StepOutcome::Uncertain {
            message: format!(
                "{said}: another attempt with the same key is still being charged. {charged} \
                 `gameplan plan resume` asks again under the same key"
            ),
        },
        _ => StepOutcome::Failed {
            exit_code: None,
            message: format!("{said}. {charged}"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(status: u16, code: &str) -> ApiError {
        ApiError::new(status, code, "because")
    }

    #[test]
    fn a_refusal_maps_to_the_exit_code_a_ci_script_acts_on() {
        let doing = "registering the job";
        let none = "Nothing was charged.";
        let mut lost = error(503, "ledger_unavailable");
        lost.uncertain = true;
        // The outcome each refusal is, which the run's exit code follows.
        for (refused, expected) in [
            (lost, "uncertain"),
            (error(403, "missing_scope"), "unauthorized"),
            (error(402, "insufficient_balance"), "refused"),
            (error(409, "price_changed"), "refused"),
            (error(409, "charge_in_progress"), "uncertain"),
        ] {
            let outcome = match refusal(&refused, doing, none) {
                StepOutcome::Uncertain { .. } => "uncertain",
                StepOutcome::Unauthorized { .. } => "unauthorized",
                StepOutcome::Refused { .. } => "refused",
                other => panic!("{}: {other:?}", refused.code),
            };
            assert_eq!(outcome, expected, "{}", refused.code);
        }
        let StepOutcome::Failed { message, .. } =
            refusal(&error(422, "idempotency_mismatch"), doing, none)
        else {
            panic!("a 422 fails the step");
        };
        assert!(
            message.starts_with("registering the job: the backend refused (idempotency_mismatch)"),
            "{message}"
        );
        assert!(message.ends_with("Nothing was charged."), "{message}");
    }

    #[test]
    fn a_job_record_names_each_cells_run() {
        let job = JobRecord {
            game: "demo-maze".into(),
            job: "job-1".into(),
            price_cents: 100,
            runs: vec![CellRun {
                cell: "play[kid,standard]".into(),
                run: "run-4".into(),
            }],
        };
        let run = job.run_ref("play[kid,standard]").expect("bought");
        assert_eq!((run.job.as_str(), run.run.as_str()), ("job-1", "run-4"));
        assert_eq!(job.run_ref("play[kid,jev]"), None);
    }
}

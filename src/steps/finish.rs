//! The `finish` step kind: settles the run's job once (docs/money.md ›
//! Finish: settling and refunds): the runs that never played are refunded,
//! and the settlement is printed, in the run's output and its end-of-run
//! summary.
//!
//! - **When**: the default pipeline makes it `always`, so it runs after a
//!   failure too; on an interrupt the engine starts nothing, and the
//!   resumed run finishes. A run that bought nothing (every cell reused, or
//!   no `register` before it) settles nothing and says so.
//! - **Once**: an intent record (the job, under an idempotency key) is
//!   journaled durably before the call ([`StepIo::request_once`]), so the
//!   kill -9 boundaries fall as they do for `register`; the settlement is
//!   journaled durably under [`SETTLEMENT`] once it comes. A resume that
//!   finds it journaled calls nothing; one that does not asks again, and
//!   the backend answers a settled job with the same settlement, refunding
//!   nothing more.
//! - **Files**: `settlement.json` in the step's directory (the backend's
//!   answer), which [`Kind::summary`] reads.
//! - **Reuse**: never.

use std::path::Path;

use serde_json::json;

use super::money::{self, Boundary, crash_point};
use super::{
    BoxFuture, KeyContext, Kind, Outputs, Reuse, StepContext, StepError, StepIo, StepOutcome,
    SummarySection,
};
use crate::backend::api::Finished;
use crate::plan::model::StepKind;

pub struct Finish;

/// The name of its request in the journal (and of its crash points).
const CALL: &str = "finish";

/// The checkpoint field the settlement is journaled under.
pub const SETTLEMENT: &str = "settlement";

/// The file in the step's directory that holds the settlement.
pub const SETTLEMENT_JSON: &str = "settlement.json";

impl Kind for Finish {
    fn kind(&self) -> StepKind {
        StepKind::Finish
    }

    fn reuse(&self, _cx: &KeyContext<'_>) -> Result<Reuse, StepError> {
        Ok(Reuse::Never("it settles this run's job, once".into()))
    }

    fn run<'a>(&'a self, cx: &'a StepContext, io: &'a StepIo) -> BoxFuture<'a, StepOutcome> {
        Box::pin(async move { run(cx, io).await.unwrap_or_else(StepOutcome::from) })
    }

    fn outputs(&self, _cx: &StepContext) -> Result<Outputs, StepError> {
        Ok(Outputs::default())
    }

    fn summary(&self, step_dir: &Path) -> Option<SummarySection> {
        let bytes = std::fs::read(step_dir.join(SETTLEMENT_JSON)).ok()?;
        let finished: Finished = serde_json::from_slice(&bytes).ok()?;
        Some(SummarySection {
            step: String::new(),
            text: format!("{}\n", crate::report::settlement::settled(&finished)),
        })
    }

    fn uses_backend(&self) -> bool {
        true
    }
}

async fn run(cx: &StepContext, io: &StepIo) -> Result<StepOutcome, StepError> {
    if let Some(finished) = own_settlement(io) {
        // A resume of an attempt that journaled the settlement: it is made.
        write_settlement(cx, &finished)?;
        (cx.note)(&crate::report::settlement::settled(&finished));
        return Ok(StepOutcome::Succeeded);
    }
    let Some(job) = money::job_of(io) else {
        (cx.note)(&match unmatched_job(io) {
            Some(job) => format!(
                "nothing settled: job {job} is left open for reconciliation (its runs did not \
                 match the plan's cells)"
            ),
            None => "nothing to settle: no job was bought".to_owned(),
        });
        return Ok(StepOutcome::Succeeded);
    };
    let Some(connection) = io.backend() else {
        return Err(StepError(format!(
            "finish has no backend to settle job {} with; resume the run once it has one",
            job.job
        )));
    };
    if let Some(stop) = cx.stopped(format!(
        "stopped before job {} was settled; `gameplan plan resume` settles it",
        job.job
    )) {
        return Ok(stop);
    }
    io.mark_started();
    io.request_once(CALL, || json!({ "job": job.job, "game": job.game }))
        .await?;
    crash_point(CALL, Boundary::KeyJournaled);
    let answer = connection
        .backend
        .finish(&connection.token, &job.job_ref())
        .await;
    crash_point(CALL, Boundary::ResponseReceived);
    let finished = match answer {
        Ok(finished) => finished,
        Err(e) => {
            return Ok(money::refusal(
                &e,
                &format!("settling job {}", job.job),
                "Its charge stands until it is settled; nothing is refunded twice.",
            ));
        }
    };
    let value = serde_json::to_value(&finished)
        .map_err(|e| StepError(format!("cannot encode the settlement: {e}")))?;
    io.checkpoint_durable(json!({ SETTLEMENT: value })).await?;
    crash_point(CALL, Boundary::ResponseJournaled);
    write_settlement(cx, &finished)?;
    (cx.note)(&crate::report::settlement::settled(&finished));
    Ok(StepOutcome::Succeeded)
}

/// The settlement this step journaled in an earlier attempt, if any.
fn own_settlement(io: &StepIo) -> Option<Finished> {
    io.checkpoints()
        .into_iter()
        .filter_map(|c| c.data.get(SETTLEMENT).cloned())
        .filter_map(|v| serde_json::from_value(v).ok())
        .next_back()
}

/// The job a `register` above bought but did not record, its runs not
/// matching the cells.
fn unmatched_job(io: &StepIo) -> Option<String> {
    io.upstream_ids()
        .into_iter()
        .filter_map(|id| io.upstream(&id))
        .flat_map(|u| u.checkpoints)
        .filter_map(|c| {
            c.data
                .get(super::register::UNMATCHED)?
                .get("job")?
                .as_str()
                .map(str::to_owned)
        })
        .last()
}

fn write_settlement(cx: &StepContext, finished: &Finished) -> Result<(), StepError> {
    let path = cx.step_dir.join(SETTLEMENT_JSON);
    let mut text = serde_json::to_string_pretty(finished)
        .map_err(|e| StepError(format!("cannot encode the settlement: {e}")))?;
    text.push('\n');
    std::fs::create_dir_all(&cx.step_dir)
        .map_err(|e| StepError(format!("cannot create {}: {e}", cx.step_dir.display())))?;
    crate::journal::atomic_write(&path, text.as_bytes())
        .map_err(|e| StepError(format!("cannot write {}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::api::Settlement;

    #[test]
    fn the_summary_shows_the_settlement_the_step_wrote() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(
            Finish.summary(dir.path()),
            None,
            "no settlement, no section"
        );
        let finished = Finished {
            settlement: Settlement {
                job_id: "job-2".into(),
                charged_cents: 100,
                refunded_cents: 100,
                net_cents: 0,
                refunded_runs: vec!["run-1".into(), "run-2".into()],
                settled_at: "2026-12-04T03:00:00Z".into(),
            },
            replayed: false,
            balance_cents: 10_000,
        };
        std::fs::write(
            dir.path().join(SETTLEMENT_JSON),
            serde_json::to_string(&finished).expect("encodes"),
        )
        .expect("write");
        let section = Finish.summary(dir.path()).expect("a section");
        assert_eq!(
            section.text,
            "settled job job-2: charged $1.00, refunded $1.00 for 2 unplayed runs, net $0.00; \
             balance $100.00\n"
        );
    }
}

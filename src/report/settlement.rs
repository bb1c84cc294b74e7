//! What the `register` and `finish` steps say of the money they moved: the
//! job bought, and the settlement with its refund. The lines go to the
//! run's output (`StepContext::note`) and, for the settlement, the
//! end-of-run summary; the figures are the backend's answers, never
//! recomputed here.

use crate::backend::api::{Finished, Registered};
use crate::report::ledger::dollars;

/// The line `register` prints once the job is bought (or found bought).
pub fn bought(registered: &Registered) -> String {
    let job = &registered.job;
    let runs = job.runs.len();
    let line = format!(
        "bought job {}: {runs} run{}, {} charged; balance {}",
        job.id,
        if runs == 1 { "" } else { "s" },
        dollars(job.charged_cents),
        dollars(registered.balance_cents)
    );
    replayed(
        line,
        registered.replayed,
        "already bought: the journaled key was replayed, nothing charged twice",
    )
}

/// The line `finish` prints, and the summary shows, once the job is settled.
pub fn settled(finished: &Finished) -> String {
    let s = &finished.settlement;
    let unplayed = s.refunded_runs.len();
    let line = format!(
        "settled job {}: charged {}, refunded {} for {unplayed} unplayed run{}, net {}; balance {}",
        s.job_id,
        dollars(s.charged_cents),
        dollars(s.refunded_cents),
        if unplayed == 1 { "" } else { "s" },
        dollars(s.net_cents),
        dollars(finished.balance_cents)
    );
    replayed(
        line,
        finished.replayed,
        "settled earlier: this finish refunded nothing more",
    )
}

/// `line`, and why nothing moved again when the backend answered a call
/// it had already answered (an idempotent replay).
fn replayed(line: String, replayed: bool, why: &str) -> String {
    if replayed {
        format!("{line} ({why})")
    } else {
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::api::Settlement;

    #[test]
    fn a_settlement_names_the_charge_the_refund_and_the_net() {
        let finished = Finished {
            settlement: Settlement {
                job_id: "job-3".into(),
                charged_cents: 200,
                refunded_cents: 50,
                net_cents: 150,
                refunded_runs: vec!["run-9".into()],
                settled_at: "2026-12-04T03:00:00Z".into(),
            },
            replayed: false,
            balance_cents: 9850,
        };
        assert_eq!(
            settled(&finished),
            "settled job job-3: charged $2.00, refunded $0.50 for 1 unplayed run, net $1.50; \
             balance $98.50"
        );
        let again = Finished {
            replayed: true,
            ..finished
        };
        assert!(settled(&again).ends_with("(settled earlier: this finish refunded nothing more)"));
    }
}

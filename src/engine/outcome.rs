//! How a step's outcome becomes its state, and how the states of a run
//! become its exit code (one of [`crate::exit_code`]'s), by one documented
//! order.
//!
//! # The order
//!
//! A run's exit code is the first of these that holds:
//!
//! 1. **10, canceled**: a signal or `plan stop` interrupted it, or a price
//!    question was declined. The run did not finish; whatever else happened
//!    is only part of the story, and a resume continues it.
//! 2. **4, unauthorized**: the backend refused the token or a scope. Nothing
//!    after it could run; fixing the token and resuming is the next step.
//! 3. **5, model unreachable**: the model endpoint never answered.
//! 4. **1, uncertain**: a request's answer never came (a timeout, a
//!    reset), so it may have been served. The run stays open: `plan
//!    resume` sends it again with the same idempotency key, and nothing is
//!    charged twice. It outranks a refusal, whose "nothing was charged"
//!    it would make untrue.
//! 5. **3, refused**: a step refused before anything was charged (a quote
//!    over the budget or the balance, a game that cannot start); nothing
//!    new starts.
//! 6. **1, failed**: a step failed (or fail-fast stopped the run at one),
//!    or a finding matched `--fail-on` (the plan's `fail_on`).
//! 7. **2, incomplete**: everything ran, but something could not be judged
//!    or finished (a gate INCOMPLETE, a budget stop with partial results).
//! 8. **0**: every step succeeded or was reused.
//!
//! Environment problems (4, 5) outrank a failure because they explain it;
//! a cancel outranks everything because the run is not over.
//!
//! # Halts
//!
//! A declined price (10), a refused token (4), an unreachable model (5) and
//! a refusal (3) halt the run: no new step starts but the `always` ones
//! whose needs are done (a `finish` settles the job that exists), and what
//! did not run stays pending for a resume. A signal stops the `always`
//! steps too (the resume finishes). An uncertain step does not halt: other
//! branches go on, the steps that need it wait for the resume.
//!
//! # Findings
//!
//! A play cell that finds a crash succeeded: it did its job. Findings are
//! judged by gates, or, without one, by `fail_on` ([`judge_findings`]);
//! findings neither judged are counted, so the summary can say so.

use crate::exit_code;
use crate::journal::run::{RunOutcome, StepState};
use crate::plan::model::FailOn;
use crate::report::playtest::Playtest;
use crate::report::run::{FailOnReport, MatchedFinding};
use crate::steps::StepOutcome;

/// How a run's findings were judged.
#[derive(Debug, Default)]
pub struct FindingsVerdict {
    /// `fail_on` was set (by the flag or the plan): what it matched.
    pub fail_on: Option<FailOnReport>,
    /// Findings no gate and no `fail_on` judged, when there are any.
    pub unjudged: Option<usize>,
}

impl FindingsVerdict {
    /// A finding matched `fail_on`: the run fails.
    pub fn failed(&self) -> bool {
        self.fail_on.as_ref().is_some_and(|f| !f.matched.is_empty())
    }
}

/// Whether a judging step (a gate) that ended in `state` judged the
/// findings: it ran, whatever its verdict, or its verdict was reused.
pub fn judged(state: StepState) -> bool {
    matches!(
        state,
        StepState::Succeeded | StepState::Reused | StepState::Failed | StepState::Incomplete
    )
}

/// Judges the merged findings of a run by `--fail-on` (`flag`), else the
/// plan's `fail_on`; without either, counts the findings no judging step
/// judged (`judged`: a gate step judged them).
pub fn judge_findings(
    playtest: Option<&Playtest>,
    judged: bool,
    flag: &[FailOn],
    plan: &[FailOn],
) -> FindingsVerdict {
    // Play cells' and simulations' findings alike, a bug met by both once.
    let findings = playtest
        .map(Playtest::distinct_findings)
        .unwrap_or_default();
    let (selectors, from) = if flag.is_empty() {
        (plan, "plan")
    } else {
        (flag, "flag")
    };
    if selectors.is_empty() {
        return FindingsVerdict {
            fail_on: None,
            unjudged: (!judged && !findings.is_empty()).then_some(findings.len()),
        };
    }
    let matched = findings
        .iter()
        .filter(|f| selectors.iter().any(|s| s.matches(&f.judged())))
        .map(|f| MatchedFinding {
            id: f.id.to_owned(),
            category: f.category.name().to_owned(),
            severity: f.severity.name().to_owned(),
            title: f.title.to_owned(),
        })
        .collect();
    FindingsVerdict {
        fail_on: Some(FailOnReport {
            selectors: selectors.iter().map(|s| s.name()).collect(),
            from: from.to_owned(),
            judged: findings.len(),
            matched,
        }),
        unjudged: None,
    }
}

/// The state a step is left in by an attempt's outcome, and its message.
pub fn state_of(outcome: &StepOutcome) -> (StepState, Option<String>) {
    match outcome {
        StepOutcome::Succeeded => (StepState::Succeeded, None),
        StepOutcome::Failed { message, .. } => (StepState::Failed, Some(message.clone())),
        // A full disk leaves the step for a resume to run again.
        StepOutcome::Interrupted { message } | StepOutcome::NoSpace { message } => {
            (StepState::Interrupted, Some(message.clone()))
        }
        StepOutcome::Incomplete { message } => (StepState::Incomplete, Some(message.clone())),
        StepOutcome::Declined { message } => (StepState::Declined, Some(message.clone())),
        StepOutcome::Unauthorized { message } => (StepState::Unauthorized, Some(message.clone())),
        StepOutcome::ModelUnreachable { message } => {
            (StepState::Unreachable, Some(message.clone()))
        }
        StepOutcome::Refused { message } => (StepState::Refused, Some(message.clone())),
        StepOutcome::Uncertain { message } => (StepState::Uncertain, Some(message.clone())),
    }
}

/// Whether an outcome stops the whole run (nothing new starts; what is left
/// stays pending for a resume): the person said no, or the environment
/// cannot serve any step.
pub fn halts_run(state: StepState) -> bool {
    matches!(
        state,
        StepState::Declined | StepState::Unauthorized | StepState::Unreachable | StepState::Refused
    )
}

/// Whether a step in this state leaves the run open for `plan resume`
/// though nothing stopped it: its request's answer never came.
pub fn leaves_run_open(state: StepState) -> bool {
    state == StepState::Uncertain
}

/// What the summary says after an uncertain step's own message.
pub const UNCERTAIN_HINT: &str =
    "nothing was charged twice; run `gameplan plan resume` to finish it";

/// The run's outcome and exit code from its steps' states, by the order in
/// the module doc. `interrupted`: a signal or `plan stop` came; `aborted`:
/// fail-fast stopped it at a failure; `findings_failed`: a finding matched
/// `fail_on`.
pub fn run_outcome(
    states: impl IntoIterator<Item = StepState>,
    interrupted: bool,
    aborted: bool,
    findings_failed: bool,
) -> (RunOutcome, u8) {
    let mut seen = [false; 8];
    for state in states {
        match state {
            StepState::Declined => seen[0] = true,
            StepState::Unauthorized => seen[1] = true,
            StepState::Unreachable => seen[2] = true,
            StepState::Failed => seen[3] = true,
            StepState::Incomplete => seen[4] = true,
            // A step interrupted by fail-fast is part of a failed run.
            StepState::Interrupted => seen[5] = true,
            StepState::Uncertain => seen[6] = true,
            StepState::Refused => seen[7] = true,
            _ => {}
        }
    }
    let [
        declined,
        unauthorized,
        unreachable,
        failed,
        incomplete,
        stopped,
        uncertain,
        refused,
    ] = seen;
    let outcome = if interrupted {
        RunOutcome::Interrupted
    } else if declined {
        RunOutcome::Declined
    } else if unauthorized {
        RunOutcome::Unauthorized
    } else if unreachable {
        RunOutcome::Unreachable
    } else if uncertain {
        RunOutcome::Uncertain
    } else if refused {
        RunOutcome::Refused
    } else if failed || aborted || stopped || findings_failed {
        RunOutcome::Failed
    } else if incomplete {
        RunOutcome::Incomplete
    } else {
        RunOutcome::Succeeded
    };
    (outcome, code_of(outcome))
}

/// A run's outcome as its exit code: the one table, written to
/// `summary.json` and ended with by `plan run`. An uncertain run is a
/// failure (a request's answer never came); a refused one found its
/// problem before charging.
pub fn code_of(outcome: RunOutcome) -> u8 {
    match outcome {
        RunOutcome::Interrupted | RunOutcome::Declined => exit_code::CANCELED,
        RunOutcome::Unauthorized => exit_code::AUTH,
        RunOutcome::Unreachable => exit_code::MODEL_UNREACHABLE,
        RunOutcome::Uncertain | RunOutcome::Failed => exit_code::FAILED,
        RunOutcome::Refused => exit_code::PLAN_ERROR,
        RunOutcome::Incomplete => exit_code::INCOMPLETE,
        RunOutcome::Succeeded => exit_code::SUCCESS,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use StepState::{
        Declined, Failed, Incomplete, Refused, Reused, Succeeded, Unauthorized, Uncertain,
        Unreachable,
    };

    fn code(states: &[StepState], interrupted: bool) -> u8 {
        run_outcome(states.iter().copied(), interrupted, false, false).1
    }

    #[test]
    fn every_exit_code_follows_from_the_states_in_the_documented_order() {
        assert_eq!(code(&[Succeeded, Reused], false), 0);
        assert_eq!(code(&[Succeeded, Incomplete], false), 2);
        assert_eq!(code(&[Incomplete, Failed], false), 1);
        assert_eq!(code(&[Failed, Unreachable], false), 5);
        assert_eq!(code(&[Unreachable, Unauthorized, Failed], false), 4);
        assert_eq!(code(&[Unauthorized, Declined], false), 10);
        assert_eq!(
            code(&[Failed, Refused], false),
            3,
            "a refusal explains a failure"
        );
        assert_eq!(
            code(&[Refused, Uncertain], false),
            1,
            "maybe charged: not 3"
        );
        assert_eq!(
            run_outcome([Refused, Uncertain], false, false, false).0,
            RunOutcome::Uncertain
        );
        assert_eq!(code(&[Uncertain, Unreachable], false), 5);
        assert_eq!(code(&[Succeeded], true), 10);
        assert_eq!(
            run_outcome([Succeeded], false, true, false).1,
            1,
            "fail-fast abort"
        );
        let findings = |states: &[StepState], interrupted| {
            run_outcome(states.iter().copied(), interrupted, false, true).1
        };
        assert_eq!(
            findings(&[Succeeded], false),
            1,
            "a finding matched fail_on"
        );
        assert_eq!(
            findings(&[Incomplete], false),
            1,
            "a match outranks incomplete"
        );
        assert_eq!(findings(&[Unreachable], false), 5);
        assert_eq!(findings(&[Succeeded], true), 10);
    }

    #[test]
    fn only_environment_and_refusal_outcomes_halt_the_run() {
        assert!(halts_run(Declined) && halts_run(Unauthorized) && halts_run(Unreachable));
        assert!(halts_run(Refused));
        assert!(!halts_run(Failed) && !halts_run(Incomplete) && !halts_run(Uncertain));
    }
}

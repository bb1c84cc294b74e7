//! One step instance that must run: its attempts, what a resume does with an
//! attempt a dead gameplan left running, and keeping its result.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use petgraph::graph::NodeIndex;
use tokio::sync::OwnedSemaphorePermit;

use super::journal_writer::JournalWriter;
use super::now;
use crate::journal::run::{Event, StepState};
use crate::journal::step_log::Segment;
use crate::report::progress::Progress;
use crate::reuse::{FileHashCache, ReuseKey, Store, outputs_digest};
use crate::steps::{Kind, LeftRunning, StepContext, StepIo, StepOutcome};

/// How one step instance ended (or that it never started: `Pending`).
pub struct Finished {
    pub node: NodeIndex,
    pub state: StepState,
    pub key: Option<String>,
    /// The full key of a succeeded or reused step, for the last-keys record.
    pub reuse_key: Option<ReuseKey>,
    /// The digest of its outputs, which the steps that need it key on.
    pub outputs: Option<String>,
    pub exit_code: Option<i32>,
    pub message: Option<String>,
    pub attempts: u32,
    pub last_attempt: u32,
    pub duration_ms: u64,
    /// Where the last attempt's output is in the run's `steps.log`.
    pub log: Vec<Segment>,
    /// The disk holding the state directory filled up under the step: why,
    /// for the run to stop on (a resume runs the step again).
    pub no_space: Option<String>,
}

impl Finished {
    pub fn pending(node: NodeIndex, last_attempt: u32) -> Finished {
        Finished {
            node,
            state: StepState::Pending,
            key: None,
            reuse_key: None,
            outputs: None,
            exit_code: None,
            message: None,
            attempts: 0,
            last_attempt,
            duration_ms: 0,
            log: Vec::new(),
            no_space: None,
        }
    }
}

/// What the tasks of one run share for running and storing.
#[derive(Clone)]
pub struct Keeper {
    pub store: Store,
    pub hashes: Arc<Mutex<FileHashCache>>,
    pub journal: JournalWriter,
    pub progress: Progress,
}

pub fn elapsed_ms(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// Where an instance starts: the attempt a dead gameplan left running (on
/// resume), and the last attempt number used so far.
#[derive(Debug, Clone, Copy)]
pub struct AttemptBase {
    pub left_running: Option<u32>,
    pub last: u32,
}

/// Runs one step instance to its end: attempts, then its result kept.
#[expect(
    clippy::too_many_arguments,
    reason = "what one instance owns for its task: context, kind, key, base, permits, keeper, io"
)]
pub async fn run_instance(
    node: NodeIndex,
    mut cx: StepContext,
    kind: &dyn Kind,
    key: Option<ReuseKey>,
    base: AttemptBase,
    permits: (OwnedSemaphorePermit, Option<OwnedSemaphorePermit>),
    keeper: Keeper,
    io: Arc<StepIo>,
) -> Finished {
    let started = Instant::now();
    let mut finished = Finished::pending(node, base.last);
    if *cx.cancel.borrow() {
        return finished;
    }
    let Some(outcome) = attempts(&mut cx, kind, base, &keeper, &io, &mut finished).await else {
        // An earlier attempt may still be running: the step stays as the
        // journal has it, for a resume to look at again.
        return finished;
    };
    // The slot is for the step's work; keeping its result needs none, and
    // the next step should not wait for our bookkeeping.
    drop(permits);
    finished.last_attempt = cx.attempt;
    finished.log = io.log_segments();
    if let StepOutcome::NoSpace { message } = &outcome {
        finished.no_space = Some(message.clone());
    }
    // From when its work began: the wait for a slot is not the step's time.
    finished.duration_ms = elapsed_ms(io.started_at().unwrap_or(started));
    if outcome == StepOutcome::Succeeded {
        match keep_result(&cx, kind, key.as_ref(), &keeper) {
            Ok((digest, outputs)) => {
                finished.state = StepState::Succeeded;
                finished.key = digest;
                finished.reuse_key = key;
                finished.outputs = Some(outputs);
                finished.exit_code = Some(0);
            }
            Err(message) => {
                finished.state = StepState::Failed;
                finished.message = Some(message);
            }
        }
        return finished;
    }
    if let StepOutcome::Failed { exit_code, .. } = &outcome {
        finished.exit_code = *exit_code;
    }
    let (state, message) = super::outcome::state_of(&outcome);
    finished.state = state;
    finished.message = message;
    finished
}

/// Runs attempts until one succeeds, retries run out, or the run stops. On
/// resume, first asks the kind how the attempt a dead gameplan left running
/// ended; `None` when the run stopped while that attempt still lived.
async fn attempts(
    cx: &mut StepContext,
    kind: &dyn Kind,
    base: AttemptBase,
    keeper: &Keeper,
    io: &StepIo,
    finished: &mut Finished,
) -> Option<StepOutcome> {
    let retries = cx.step.retries;
    cx.attempt = base.last;
    if let Some(previous) = base.left_running {
        match kind.left_running(cx, previous).await {
            LeftRunning::Ended(outcome, log) => {
                io.set_log(log);
                return Some(outcome);
            }
            LeftRunning::StillRunning => return None,
            LeftRunning::RunAgain => {}
        }
    }
    loop {
        // A crafted journal can hold any number: never overflow.
        let Some(next) = cx.attempt.checked_add(1) else {
            return Some(StepOutcome::Failed {
                exit_code: None,
                message: format!(
                    "attempt numbers are exhausted (the journal says {}); start a new run with `--new`",
                    cx.attempt
                ),
            });
        };
        cx.attempt = next;
        io.set_attempt(next);
        finished.attempts = finished.attempts.saturating_add(1);
        let event = Event::StepStarted {
            step: cx.instance.id.clone(),
            attempt: cx.attempt,
            at: now(),
        };
        // In the journal before it can have an effect.
        // Not journaled means not started: the step stays to be run by a
        // resume, and the dispatcher stops the run (issue 8, item 13).
        if let Err(e) = keeper.journal.append(&event) {
            return Some(StepOutcome::Interrupted {
                message: format!("not started: cannot write the journal: {e}"),
            });
        }
        if !kind.queues_ahead() {
            // Its work begins now; a kind that queues says when it does.
            io.mark_started();
        }
        // A retry's log is its own; the one before it is not shown for it.
        io.set_log(Vec::new());
        let outcome = kind.run(cx, io).await;
        let may_retry = cx.attempt <= base.last.saturating_add(retries) && !*cx.cancel.borrow();
        if let StepOutcome::Failed { message, .. } = &outcome
            && may_retry
        {
            // Why, in a line: the log's tail is shown once, by the last
            // attempt, not once per retry.
            keeper.progress.note(&format!(
                "{}: attempt {} failed ({}); retrying",
                cx.instance.id,
                cx.attempt.saturating_sub(base.last),
                crate::report::run::reason(message)
            ));
            continue;
        }
        return Some(outcome);
    }
}

/// Stores a succeeded step's outputs under its key; returns the key digest
/// and the digest of the outputs.
fn keep_result(
    cx: &StepContext,
    kind: &dyn Kind,
    key: Option<&ReuseKey>,
    keeper: &Keeper,
) -> Result<(Option<String>, String), String> {
    let outputs = kind.outputs(cx).map_err(|e| e.0)?;
    // Just written, so past the stat cache (see `hash_fresh`).
    let hash_outputs = || -> Result<String, String> {
        let hashes =
            crate::reuse::hash_fresh(&outputs.base, &outputs.files).map_err(|e| e.to_string())?;
        Ok(outputs_digest(
            hashes.iter().map(|(p, h)| (p.as_str(), h.as_str())),
        ))
    };
    let Some(key) = key else {
        return Ok((None, hash_outputs()?));
    };
    if !cx.step.reuse {
        return Ok((Some(key.digest()), hash_outputs()?));
    }
    // The step succeeded whether or not its result could be kept: a full
    // disk or a lost race only costs a re-run next time, not a red run.
    match keeper.store.put(
        key,
        &outputs.base,
        &outputs.files,
        serde_json::json!({ "step": cx.instance.id }),
    ) {
        Ok(entry) => {
            let digest = outputs_digest(
                entry
                    .outputs
                    .iter()
                    .map(|o| (o.path.as_str(), o.sha256.as_str())),
            );
            Ok((Some(entry.key), digest))
        }
        Err(e) => {
            keeper.progress.note(&format!(
                "warning: {}: could not store its result ({e}); it will run again next time",
                cx.instance.id
            ));
            Ok((Some(key.digest()), hash_outputs()?))
        }
    }
}

/// Restores a stored result when the step's key has one. The key is taken
/// only when the step is reused (it moves on into the last-keys record
/// instead of being copied); on a miss it stays for the step's run.
pub fn try_reuse(
    node: NodeIndex,
    cx: &StepContext,
    kind: &dyn Kind,
    key: &mut Option<ReuseKey>,
    keeper: &Keeper,
) -> Option<Finished> {
    let started = Instant::now();
    if !cx.step.reuse {
        return None;
    }
    let digest = key.as_ref()?.digest();
    let entry = keeper.store.lookup(&digest)?;
    // A damaged entry is a miss: the step runs. The scope (which expands
    // the step's inputs) is made only if something must be written, and
    // the store makes a missing base (a kind's own step directory).
    let base = kind.restore_base(cx);
    keeper
        .store
        .restore_lazily(&entry, &base, || kind.restore_scope(cx).ok())
        .ok()?;
    keeper.store.mark_used(&digest);
    Some(Finished {
        node,
        state: StepState::Reused,
        key: Some(digest),
        reuse_key: key.take(),
        outputs: Some(outputs_digest(
            entry
                .outputs
                .iter()
                .map(|o| (o.path.as_str(), o.sha256.as_str())),
        )),
        exit_code: None,
        message: None,
        attempts: 0,
        last_attempt: 0,
        duration_ms: elapsed_ms(started),
        log: Vec::new(),
        no_space: None,
    })
}

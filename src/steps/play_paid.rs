//! The backend run of a paid play cell (docs/money.md › A bought cell
//! reports as it plays): the part of the `play` kind that tells the backend
//! how its bought run goes.
//!
//! A cell is paid when the run has a backend and `register` bought a run
//! for it ([`super::money::run_of`]); a free cell (no backend, or reused and
//! so not bought) never comes here and plays exactly as before. Nothing
//! here enters the cell's reuse key.
//!
//! - **Transitions.** Before the game starts the run moves to `launching`
//!   (a refusal is the step's failure, named; the cell is not played). A run
//!   found `playing` was left by a gameplan that died mid-play: it goes
//!   `interrupted` → `launching` first, and from `interrupted` (Ctrl-C, then
//!   `plan resume`) straight to `launching`. Once the game answered `hello`
//!   and its resets: `playing` (the ledger marks the run played: it is
//!   charged, not refunded). A cell that ended normally (done, patience,
//!   the plan's budget, …) moves to `reporting`; `deliver` takes it on from
//!   there. A cell that could not be played moves to `failed`, with a reason
//!   redacted and cut to 400 characters (the run never played: `finish`
//!   refunds it). A Ctrl-C: the turn in flight finishes, the run moves to
//!   `interrupted` (when it reached `playing`; a run still `launching` stays
//!   so, and the resume launches it again), the step is interrupted, and
//!   `plan resume` plays the cell again from its seed.
//! - **A run found `reporting` or `uploading`** played to its end before,
//!   but the step never recorded it (gameplan died between the two): the
//!   cell plays again (the same seed plays the same game) and sends no
//!   transition the run has passed. A run found ended (`succeeded`,
//!   `failed`, `canceled`, `budget_exceeded`) is not played again: the step
//!   fails saying so.
//! - **Heartbeats** `{actions_taken, checkpoint_step}` go after a turn once
//!   [`HEARTBEAT_EVERY_ACTIONS`] actions or [`HEARTBEAT_EVERY`] passed since
//!   the last one, on a task of their own: the game never waits for the
//!   backend, and one heartbeat at most is in flight. They are due between
//!   turns, so a single slow turn (up to `action_timeout`) delays one. A last one with the
//!   final count goes before the end's transition. A heartbeat that fails or
//!   gets no answer does not fail the playtest: the run's output gets one
//!   warning, the cell plays on.
//! - **`cancel_requested`** in a heartbeat's answer stops the cell after
//!   its current turn. When the run used its run length's allowance of
//!   actions, the run moves to `budget_exceeded` and the step is incomplete
//!   (exit 2: the cell's files hold what it played). Otherwise someone moved
//!   the run to `canceled` (any holder of the account's token may, by the
//!   API's `transition`) or its job was settled: the run is `canceled` and
//!   the step fails with "the backend asked to cancel this run".

use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::{StepIo, StepOutcome, money};
use crate::backend::Connection;
use crate::backend::api::{
    ApiError, Heartbeat, HeartbeatRequest, RunRef, RunState, TransitionRequest,
};
use crate::play::CellState;
use crate::play::cell::{CellResult, CellWatch, Opened};
use crate::play::opening::PlayError;

/// A heartbeat goes after the turn that makes this many actions since the
/// last one (or [`HEARTBEAT_EVERY`], whichever comes first).
pub const HEARTBEAT_EVERY_ACTIONS: u64 = 10;
/// A heartbeat goes after the first turn this long after the last one, so a
/// slow game's run still shows progress.
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(5);
/// How long the cell's end waits for its last heartbeat's answer.
const LAST_HEARTBEAT_WAIT: Duration = Duration::from_secs(5);

/// Why the backend wants the cell to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// The run was canceled from outside, or its job settled.
    Canceled,
    /// The run used its allowance of `max` actions.
    Allowance { max: i64 },
}

/// A paid cell's backend run while the cell plays: what it sent, what it
/// heard. It is the cell's [`CellWatch`].
pub struct PaidCell<'a> {
    io: &'a StepIo,
    conn: Connection,
    run: RunRef,
    /// The run was already past `playing` (see the module doc): only
    /// heartbeats go.
    replaying: bool,
    /// The run was moved to `playing` (the game opened).
    playing: bool,
    actions: u64,
    last_sent: (u64, Instant),
    in_flight: Option<oneshot::Receiver<Result<Heartbeat, ApiError>>>,
    stop: Option<Stop>,
    warned: bool,
}

impl<'a> PaidCell<'a> {
    /// Readies backend run `run` for the cell to play (to `launching`), or
    /// says why the cell must not play.
    pub async fn start(
        io: &'a StepIo,
        conn: &Connection,
        run: RunRef,
    ) -> Result<PaidCell<'a>, StepOutcome> {
        let name = format!("backend run `{}` of job `{}`", run.run, run.job);
        let not_played = "The cell was not played; `finish` refunds a run that never played.";
        let state = match conn.backend.get_run(&conn.token, &run).await {
            Ok(view) => view.state,
            Err(e) => {
                return Err(money::refusal(
                    &e,
                    &format!("reading {name} before the cell plays"),
                    not_played,
                ));
            }
        };
        let mut cell = PaidCell {
            io,
            conn: conn.clone(),
            run,
            replaying: false,
            playing: false,
            actions: 0,
            last_sent: (0, Instant::now()),
            in_flight: None,
            stop: None,
            warned: false,
        };
        let path: &[RunState] = match state {
            RunState::Queued | RunState::Interrupted => &[RunState::Launching],
            RunState::Launching => &[],
            // Left playing by a gameplan that died mid-play.
            RunState::Playing => &[RunState::Interrupted, RunState::Launching],
            RunState::Reporting | RunState::Uploading => {
                cell.replaying = true;
                &[]
            }
            RunState::Canceled => {
                return Err(StepOutcome::Failed {
                    exit_code: None,
                    message: format!(
                        "the backend asked to cancel this run: {name} is `canceled`, so the cell \
                         is not played again"
                    ),
                });
            }
            ended => {
                return Err(StepOutcome::Failed {
                    exit_code: None,
                    message: format!(
                        "{name} already ended `{ended}`: a run that ended cannot be played again; \
                         `gameplan plan run --new` buys new runs"
                    ),
                });
            }
        };
        for to in path {
            if let Err(e) = cell.transition(*to, None).await {
                return Err(money::refusal(
                    &e,
                    &format!("moving {name} to `{to}`"),
                    not_played,
                ));
            }
        }
        Ok(cell)
    }

    async fn transition(&self, to: RunState, reason: Option<String>) -> Result<(), ApiError> {
        let request = TransitionRequest { to, reason };
        self.conn
            .backend
            .transition(&self.conn.token, &self.run, &request)
            .await
            .map(|_| ())
    }

    fn warn_once(&mut self, what: &str, e: &ApiError) {
        if !std::mem::replace(&mut self.warned, true) {
            self.io.warn(&format!(
                "{what} for backend run `{}` failed ({e}); the cell plays on and its result is \
                 kept (further heartbeat failures are not shown)",
                self.run.run
            ));
        }
    }

    /// What a heartbeat's answer means for the cell.
    fn heard(&mut self, answer: Result<Heartbeat, ApiError>) {
        match answer {
            Ok(beat) if beat.cancel_requested => {
                self.stop.get_or_insert(
                    if beat.usage.max_actions > 0
                        && beat.usage.actions_taken >= beat.usage.max_actions
                    {
                        Stop::Allowance {
                            max: beat.usage.max_actions,
                        }
                    } else {
                        Stop::Canceled
                    },
                );
            }
            Ok(_) => {}
            Err(e) => self.warn_once("a heartbeat", &e),
        }
    }

    fn request(&self) -> HeartbeatRequest {
        let actions = i64::try_from(self.actions).unwrap_or(i64::MAX);
        HeartbeatRequest {
            actions_taken: actions,
            checkpoint_step: Some(actions),
        }
    }

    /// Sends a heartbeat on a task of its own; its answer is read later.
    fn send_heartbeat(&mut self) {
        let (tx, rx) = oneshot::channel();
        let (conn, run, request) = (self.conn.clone(), self.run.clone(), self.request());
        tokio::spawn(async move {
            let answer = conn.backend.heartbeat(&conn.token, &run, &request).await;
            let _ = tx.send(answer);
        });
        self.in_flight = Some(rx);
        self.last_sent = (self.actions, Instant::now());
    }

    /// The answer of the heartbeat in flight, if any, waited for at most
    /// [`LAST_HEARTBEAT_WAIT`].
    async fn settle_heartbeat(&mut self) {
        if let Some(rx) = self.in_flight.take() {
            match tokio::time::timeout(LAST_HEARTBEAT_WAIT, rx).await {
                Ok(Ok(answer)) => self.heard(answer),
                Ok(Err(_)) => {}
                Err(_) => self.warn_once(
                    "a heartbeat",
                    &ApiError::unavailable(format!(
                        "no answer within {}s",
                        LAST_HEARTBEAT_WAIT.as_secs()
                    )),
                ),
            }
        }
    }

    /// The cell ended: the last heartbeat, then the run's transition for
    /// how it ended; the step's outcome (`free` is what a free cell's would
    /// be).
    pub async fn end(
        mut self,
        result: &Result<CellResult, PlayError>,
        free: StepOutcome,
    ) -> StepOutcome {
        self.settle_heartbeat().await;
        if let Ok(cell) = result {
            self.actions = cell.report.actions_taken;
        }
        if self.playing || self.replaying {
            self.send_heartbeat();
            self.settle_heartbeat().await;
        }
        let name = format!("backend run `{}` of job `{}`", self.run.run, self.run.job);
        let played = result
            .as_ref()
            .is_ok_and(|cell| cell.report.not_played.is_none());
        let interrupted = result
            .as_ref()
            .is_ok_and(|cell| cell.report.state == CellState::Interrupted);
        if !played {
            let why = match &free {
                StepOutcome::Failed { message, .. } => message.clone(),
                _ => "the cell could not be played".to_owned(),
            };
            let reason = money::reason(self.io, &why);
            if let Err(e) = self.transition(RunState::Failed, Some(reason)).await {
                self.io
                    .warn(&format!("moving {name} to `failed` failed: {e}"));
            }
            return free;
        }
        if interrupted && let Some(stop) = self.stop {
            return self.stopped(stop, &name).await;
        }
        if interrupted {
            if self.playing
                && let Err(e) = self.transition(RunState::Interrupted, None).await
            {
                self.io
                    .warn(&format!("moving {name} to `interrupted` failed: {e}"));
            }
            return free;
        }
        if self.replaying {
            return free;
        }
        match self.transition(RunState::Reporting, None).await {
            Ok(()) => free,
            Err(e) => money::refusal(
                &e,
                &format!("moving {name} to `reporting` after the cell played"),
                "The run was charged and played; its files are in the step's directory.",
            ),
        }
    }

    /// The cell stopped because the backend asked: the run's end and the
    /// step's outcome.
    async fn stopped(&self, stop: Stop, name: &str) -> StepOutcome {
        let actions = self.actions;
        match stop {
            Stop::Allowance { max } => {
                let reason = format!("the run used its allowance of {max} actions");
                if let Err(e) = self
                    .transition(RunState::BudgetExceeded, Some(reason))
                    .await
                {
                    self.io
                        .warn(&format!("moving {name} to `budget_exceeded` failed: {e}"));
                }
                StepOutcome::Incomplete {
                    message: format!(
                        "the backend stopped the cell after {actions} actions: {name} used its \
                         allowance of {max} actions; the cell's report holds what it played \
                         (a longer `run_length` allows more)"
                    ),
                }
            }
            Stop::Canceled => {
                let reason = "the backend asked to cancel this run".to_owned();
                if let Err(e) = self.transition(RunState::Canceled, Some(reason)).await {
                    // A settled job's runs cannot change: it is over anyway.
                    if e.code != "invalid_transition" {
                        self.io
                            .warn(&format!("moving {name} to `canceled` failed: {e}"));
                    }
                }
                StepOutcome::Failed {
                    exit_code: None,
                    message: format!(
                        "the backend asked to cancel this run ({name}): the cell stopped after \
                         {actions} actions; its report holds what it played"
                    ),
                }
            }
        }
    }
}

impl CellWatch for PaidCell<'_> {
    fn opened(&mut self) -> Opened<'_> {
        Box::pin(async move {
            if self.replaying {
                return true;
            }
            match self.transition(RunState::Playing, None).await {
                Ok(()) => {
                    self.playing = true;
                    true
                }
                // No certain answer: the run may be playing; play on, the
                // next transition says where it is.
                Err(e) if e.uncertain => {
                    self.playing = true;
                    self.warn_once("moving to `playing`", &e);
                    true
                }
                // Canceled (or its job settled) while it launched.
                Err(e) if e.code == "invalid_transition" => {
                    self.stop = Some(Stop::Canceled);
                    false
                }
                Err(e) => {
                    self.warn_once("moving to `playing`", &e);
                    true
                }
            }
        })
    }

    fn turned(&mut self, actions_taken: u64) -> bool {
        self.actions = actions_taken;
        if let Some(rx) = &mut self.in_flight {
            match rx.try_recv() {
                Ok(answer) => {
                    self.in_flight = None;
                    self.heard(answer);
                }
                Err(oneshot::error::TryRecvError::Empty) => {}
                Err(oneshot::error::TryRecvError::Closed) => self.in_flight = None,
            }
        }
        if self.stop.is_some() {
            return true;
        }
        let (sent_at_actions, sent_at) = self.last_sent;
        let due = actions_taken.saturating_sub(sent_at_actions) >= HEARTBEAT_EVERY_ACTIONS
            || sent_at.elapsed() >= HEARTBEAT_EVERY;
        if due && self.in_flight.is_none() {
            self.send_heartbeat();
        }
        false
    }
}

#[cfg(test)]
#[path = "play_paid_tests.rs"]
mod tests;

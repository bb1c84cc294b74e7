//! Replay: plays a trace's actions again in a fresh game process and checks
//! that every observation hash, every refusal and the end are the same.
//!
//! Owns what "the same" means (hash by hash, step by step; the first
//! difference is the answer) and how a trace's game is started again (its
//! command, from the repo root, with the kept environment). `gameplan
//! replay TRACE` prints the outcome (exit 0 / 1).
//!
//! A trace records no environment and no timeout: replay runs the game
//! with the kept variables only (PATH, HOME, LANG, TMPDIR) and the
//! caller's `action_timeout`. A game whose observations depend on
//! `game.env` replays only where that holds without it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use super::cell::{PlayError, open, quit_for};
use super::episode::{Episode, Stepped};
use super::stdio::{Failure, GameProcess, GameSpec, ResourceLimits};
use super::trace::{QuitReason, Trace, TraceStep};

/// Where and how a trace's game runs again.
#[derive(Debug, Clone)]
pub struct ReplayOptions {
    /// The repo root (the trace's `cwd` is relative to it).
    pub root: PathBuf,
    /// The caller's environment; the game keeps PATH, HOME, LANG and TMPDIR of it.
    pub parent_env: BTreeMap<String, String>,
    pub action_timeout: Duration,
    pub limits: ResourceLimits,
}

impl ReplayOptions {
    /// The game a trace names, started as these options say.
    pub fn game(&self, trace: &Trace) -> GameSpec {
        let mut game = GameSpec::new(
            trace.header.game.command.clone(),
            self.root.join(&trace.header.game.cwd),
            &self.parent_env,
        );
        game.action_timeout = self.action_timeout;
        game.limits = self.limits;
        game
    }
}

/// What a replay found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplayOutcome {
    /// Every step matched and the same end was reached.
    Confirmed { steps: u64, end: Option<QuitReason> },
    /// The first step where the game did otherwise (0 = at hello or reset;
    /// steps + 1 = at the end).
    Diverged {
        step: u64,
        action: Option<String>,
        expected: String,
        got: String,
    },
}

/// What one step of a run looked like, in words for a divergence message.
fn described(step: &TraceStep, end: Option<QuitReason>) -> String {
    match (&step.obs, &step.refused) {
        (_, Some(error)) => format!("a refusal ({error})"),
        (Some(hash), None) => format!("observation {hash}"),
        (None, None) => format!("the game to {}", end.map_or("fail", QuitReason::name)),
    }
}

/// Replays `trace`.
pub async fn replay(trace: &Trace, options: &ReplayOptions) -> Result<ReplayOutcome, PlayError> {
    let run = run_actions(trace, options, trace.actions()).await?;
    Ok(compare(trace, &run))
}

/// One run of a sequence of actions in a fresh game process.
#[derive(Debug, Clone)]
pub struct Run {
    pub steps: Vec<TraceStep>,
    /// How it ended: the failure, `done`, or `None` when the actions ran out.
    pub end: Option<QuitReason>,
    /// The failure, when it ended in one.
    pub failure: Option<Failure>,
    /// The fingerprint of the crash or hang, when it ended in one.
    pub failure_id: Option<String>,
}

/// Plays `actions` in a fresh game (seeded as the trace says), stopping at
/// the first failure or `done`.
pub async fn run_actions<'a>(
    trace: &Trace,
    options: &ReplayOptions,
    actions: impl Iterator<Item = &'a str>,
) -> Result<Run, PlayError> {
    let mut game = GameProcess::spawn(&options.game(trace))?;
    let (_, opened) = open(&mut game, trace.header.seed).await;
    let run = match opened {
        Err(failure) => {
            let id = super::episode::failure_finding(&failure, 0, "", None, &[]).id();
            Run {
                steps: Vec::new(),
                end: Some(quit_for(&failure)),
                failure: Some(failure),
                failure_id: Some(id),
            }
        }
        Ok(first) => {
            let mut episode =
                Episode::new(first, &trace.header.persona, &trace.header.controller, 0);
            let mut end = None;
            let mut failure = None;
            for action in actions {
                match episode.act(&mut game, action).await {
                    Stepped::Acted { done: true, .. } => {
                        end = Some(QuitReason::Done);
                        break;
                    }
                    Stepped::Failed(f) => {
                        end = Some(quit_for(&f));
                        failure = Some(f);
                        break;
                    }
                    _ => {}
                }
            }
            let failure_id = failure.as_ref().and_then(|_| {
                episode
                    .findings
                    .as_slice()
                    .iter()
                    .rev()
                    .find(|f| f.category.name() == end.map_or("", QuitReason::name))
                    .map(|f| f.id.clone())
            });
            Run {
                steps: std::mem::take(&mut episode.steps),
                end,
                failure,
                failure_id,
            }
        }
    };
    let polite = run.failure.is_none();
    game.shutdown(polite, true).await;
    Ok(run)
}

/// The first difference between a trace and a run of its actions.
fn compare(trace: &Trace, run: &Run) -> ReplayOutcome {
    let expected_end = trace.end;
    for (i, want) in trace.steps.iter().enumerate() {
        let Some(got) = run.steps.get(i) else {
            // The run stopped before this step: at hello/reset or done early.
            let got = match (&run.failure, run.end) {
                (Some(f), _) => f.describe(),
                (None, Some(QuitReason::Done)) => "the game was already done".to_owned(),
                _ => "nothing".to_owned(),
            };
            return ReplayOutcome::Diverged {
                step: want.step,
                action: Some(want.action.clone()),
                expected: described(want, expected_end),
                got,
            };
        };
        let same = match (&want.obs, &want.refused) {
            (_, Some(_)) => got.refused.is_some(),
            (Some(hash), None) => got.refused.is_none() && got.obs.as_ref() == Some(hash),
            (None, None) => got.obs.is_none() && run.end == expected_end,
        };
        if !same {
            let got_text = if got.obs.is_none() {
                run.failure
                    .as_ref()
                    .map_or_else(|| "no observation".to_owned(), Failure::describe)
            } else {
                described(got, run.end)
            };
            return ReplayOutcome::Diverged {
                step: want.step,
                action: Some(want.action.clone()),
                expected: described(want, expected_end),
                got: got_text,
            };
        }
    }
    let steps = trace.steps.len() as u64;
    // Every step matched; the end must too (a crash or hang already did).
    let end_matches = match expected_end {
        Some(QuitReason::Crash | QuitReason::Hang) => run.end == expected_end,
        Some(QuitReason::Done) => run.end == Some(QuitReason::Done),
        // patience, budget, interrupted…: the game simply went on.
        _ => run.end.is_none(),
    };
    if end_matches {
        ReplayOutcome::Confirmed {
            steps,
            end: expected_end,
        }
    } else {
        ReplayOutcome::Diverged {
            step: if trace.steps.is_empty() && run.failure.is_some() {
                0
            } else {
                steps + 1
            },
            action: None,
            expected: format!(
                "the end `{}`",
                expected_end.map_or("none", QuitReason::name)
            ),
            got: run.failure.as_ref().map_or_else(
                || format!("the end `{}`", run.end.map_or("none", QuitReason::name)),
                Failure::describe,
            ),
        }
    }
}

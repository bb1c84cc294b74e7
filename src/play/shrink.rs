//! Shrink: the shortest action sequence that still ends a game the same way.
//!
//! Owns the reduction of a trace that ends in `crash` or `hang`: delta
//! debugging (Zeller's ddmin) over its inputs (actions, and the resets of a
//! cell that went on after `stuck`: a reset is cut like an action, and
//! kept only where the failure needs it), each candidate played in a
//! fresh game process. A candidate "still fails" when it ends in the same
//! category with the same fingerprint, so shrinking cannot slide from one
//! bug to another. A candidate that fails earlier than its last action is
//! cut there (a free reduction). The result is the trace of the last run
//! that failed, so `replay` confirms it. Bounded by a time limit: when it
//! runs out, the shortest sequence found so far is the answer.
//!
//! A trace that ends otherwise but whose play broke one of its
//! `[[invariants]]` (the header records them) is shrunk to the first rule
//! it broke: a candidate still fails when it breaks that rule (the same
//! finding id), and is cut at the action after which it broke.

use std::time::{Duration, Instant};

use super::opening::PlayError;
use super::replay::{ReplayOptions, Run, run_inputs};
use super::trace::{Input, QuitReason, Trace};

#[derive(Debug, Clone)]
pub struct ShrinkOptions {
    pub replay: ReplayOptions,
    pub time_limit: Duration,
}

#[derive(Debug, Clone)]
pub enum ShrinkOutcome {
    /// The shortest failing trace found.
    Shrunk {
        trace: Box<Trace>,
        original: usize,
        /// Game runs it took.
        runs: u64,
        /// Whether the time limit cut the search short.
        timed_out: bool,
    },
    /// The trace does not end in a crash or a hang: nothing to shrink.
    NotAFailure(Option<QuitReason>),
    /// Playing the trace's actions again did not fail the same way.
    NotReproduced { got: String },
}

pub async fn shrink(trace: &Trace, options: &ShrinkOptions) -> Result<ShrinkOutcome, PlayError> {
    let Some(target) = trace.end.filter(|e| e.is_failure()) else {
        if trace.header.game.invariants.is_empty() {
            return Ok(ShrinkOutcome::NotAFailure(trace.end));
        }
        return shrink_invariant(trace, options).await;
    };
    let started = Instant::now();
    let inputs = trace.inputs();
    let original = trace.steps.len();
    let first = run_inputs(trace, &options.replay, &inputs, |_| false).await?;
    let runs = 1u64;
    if first.end != Some(target) {
        return Ok(ShrinkOutcome::NotReproduced {
            got: first.failure.as_ref().map_or_else(
                || format!("the end `{}`", first.end.map_or("none", QuitReason::name)),
                super::driver::Failure::describe,
            ),
        });
    }
    let fingerprint = first.failure_id.clone();
    let (best, more, timed_out) = search(
        trace,
        options,
        first,
        |run| still_fails(run, target, fingerprint.as_deref()),
        |_| false,
        started,
    )
    .await?;
    let runs = runs + more;
    let mut shrunk = Trace::new(trace.header.clone());
    shrunk.steps = best.steps;
    shrunk.resets = best.resets;
    shrunk.end = Some(target);
    Ok(ShrinkOutcome::Shrunk {
        trace: Box::new(shrunk),
        original,
        runs,
        timed_out,
    })
}

/// Shrinks a trace to the first invariant its play broke (see the
/// module doc).
async fn shrink_invariant(
    trace: &Trace,
    options: &ShrinkOptions,
) -> Result<ShrinkOutcome, PlayError> {
    let started = Instant::now();
    let original = trace.steps.len();
    let inputs = trace.inputs();
    // Played until the first rule breaks: the free reduction.
    let best = run_inputs(trace, &options.replay, &inputs, |episode| {
        episode
            .findings
            .as_slice()
            .iter()
            .any(|f| f.category == super::findings::Category::Invariant)
    })
    .await?;
    let mut runs = 1u64;
    let Some(rule) = best.broken.first().map(|f| f.id.clone()) else {
        return Ok(ShrinkOutcome::NotAFailure(trace.end));
    };
    let broke = |episode: &super::episode::Episode| {
        episode.findings.as_slice().iter().any(|f| f.id == rule)
    };
    let (best, more, timed_out) = search(
        trace,
        options,
        best,
        |run| run.broken.iter().any(|f| f.id == rule),
        broke,
        started,
    )
    .await?;
    runs += more;
    let mut shrunk = Trace::new(trace.header.clone());
    shrunk.steps = best.steps;
    shrunk.resets = best.resets;
    shrunk.end = best.end;
    Ok(ShrinkOutcome::Shrunk {
        trace: Box::new(shrunk),
        original,
        runs,
        timed_out,
    })
}

/// Delta debugging from `best` (a run that fails): each candidate plays
/// in a fresh game, stopping where `stop` says, and is kept when `still`
/// says it fails the same way. Returns the shortest failing run, the game
/// runs it took, and whether the time limit cut it short.
async fn search(
    trace: &Trace,
    options: &ShrinkOptions,
    mut best: Run,
    still: impl Fn(&Run) -> bool,
    stop: impl Fn(&super::episode::Episode) -> bool + Sync,
    started: Instant,
) -> Result<(Run, u64, bool), PlayError> {
    let mut current: Vec<Input> = best.inputs();
    let mut runs = 0u64;
    let mut n = 2usize;
    while current.len() >= 2 {
        let chunks = split(current.len(), n);
        let mut reduced = false;
        // Complements first (drop one chunk), then each chunk alone: on
        // long traces of one crash, dropping is what finds the short path.
        let candidates = chunks
            .iter()
            .map(|&(from, to)| {
                current[..from]
                    .iter()
                    .chain(&current[to..])
                    .cloned()
                    .collect::<Vec<_>>()
            })
            .chain(chunks.iter().map(|&(from, to)| current[from..to].to_vec()));
        for candidate in candidates {
            if started.elapsed() >= options.time_limit {
                return Ok((best, runs, true));
            }
            if candidate.is_empty() {
                continue;
            }
            let run = run_inputs(trace, &options.replay, &candidate, |e| stop(e)).await?;
            runs += 1;
            if still(&run) {
                current = run.inputs();
                best = run;
                n = n.saturating_sub(1).max(2);
                reduced = true;
                break;
            }
        }
        if !reduced {
            if n >= current.len() {
                break;
            }
            n = (n * 2).min(current.len());
        }
    }
    Ok((best, runs, false))
}

fn still_fails(run: &Run, target: QuitReason, fingerprint: Option<&str>) -> bool {
    run.end == Some(target) && (fingerprint.is_none() || run.failure_id.as_deref() == fingerprint)
}

/// `len` split into `n` nearly equal chunks, as (from, to) ranges.
fn split(len: usize, n: usize) -> Vec<(usize, usize)> {
    let n = n.clamp(1, len.max(1));
    (0..n).map(|i| (i * len / n, (i + 1) * len / n)).collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn split_covers_everything_once() {
        assert_eq!(super::split(5, 2), [(0, 2), (2, 5)]);
        assert_eq!(super::split(3, 3), [(0, 1), (1, 2), (2, 3)]);
        assert_eq!(super::split(2, 8), [(0, 1), (1, 2)]);
    }
}

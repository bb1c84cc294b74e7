//! Simulate: many seeded games, no model, to test a game's mechanics.
//!
//! Owns spreading `games` over `workers` game processes, the per-game bound
//! (`max_steps`), progress every 100 games, the summary (each distinct
//! finding with how many games met it; per strategy the goal rate and the
//! median steps to the goal), and writing the traces of games
//! that crashed or hung and (with `trace_findings`, as the `simulate` step
//! asks) of the first game (lowest number) that met each finding, so every
//! finding has a trace to replay.
//!
//! # Design
//!
//! Game `i` is played by `strategies[i % len]` with seed `seed + i`, so the
//! summary does not depend on which worker took which game. A game plays
//! by a cell's rules (the shared `Episode`): after `stuck_after` unchanged
//! observations gameplan tries the offered actions not tried there before
//! it says `stuck`, and `game.goal` holding ends the game as `done` does. A worker keeps
//! its game process across games (`reset` starts the next one) and starts a
//! fresh process only after a crash or a hang: a process per game would
//! cost more than the games. The per-action path allocates little (reused
//! request and line buffers, one JSON parse, one hash) and touches no disk;
//! only failed games are written out, without fsync (a trace is evidence,
//! not a checkpoint).
//!
//! Where the time goes (measured on 10,000 maze games, 6,000 of them
//! crashing):
//!
//! - Each worker is a thread with a current-thread runtime of its own, so
//!   the workers use every core whatever runtime the caller runs (the
//!   engine's is single-threaded), and its requests block that thread (one
//!   `write`, one `read`; [`GameProcess::use_blocking_io`]).
//! - After a worker's first failed game, the next game process is started
//!   and greeted while the current one plays: a crash costs no start-up
//!   wait. Failed processes are ended and reaped by background tasks.
//! - The traces of failed games go to one batch file per worker with an
//!   index (`play::trace_batch`), appended as games end: thousands of crashes
//!   make two files, not thousands.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::controllers::{Controller, ControllerKind};
use super::episode::{Episode, Stepped, failure_finding};
use super::findings::{Category, Finding, FindingSet, Severity};
use super::opening::{PlayError, quit_for};
use super::players::PlayerSpec;
use super::stdio::{GameProcess, GameSpec, Leaked, SpawnError};
use super::trace::{QuitReason, Trace};
use super::trace_batch::{self, BatchWriter, IndexEntry};

/// Progress is reported after every this many games.
pub const PROGRESS_EVERY: u64 = 100;

/// A worker lets the runtime's other tasks run after this many actions of
/// one game (and between games).
const YIELD_EVERY: u64 = 64;

#[derive(Debug, Clone, PartialEq)]
pub struct SimulateSpec {
    pub game: GameSpec,
    pub games: u64,
    /// Player kinds, used in turn (game `i` plays `strategies[i % len]`).
    pub strategies: Vec<PlayerSpec>,
    /// Game processes in parallel.
    pub workers: usize,
    /// Actions per game before it counts as truncated.
    pub max_steps: u64,
    /// Game `i` plays seed `seed + i`.
    pub seed: i64,
    /// Where the traces of crashed and hung games go (none written without).
    pub out_dir: Option<PathBuf>,
    /// Also write there the trace of the first game that met each finding
    /// (a `stuck`, say) when that game did not crash or hang.
    pub trace_findings: bool,
}

/// What a simulation found.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct SimulateSummary {
    /// Games played (fewer than asked when interrupted).
    pub games: u64,
    /// Games the game declared done.
    pub completed: u64,
    pub crashed: u64,
    pub hung: u64,
    /// Games stopped at `max_steps`.
    pub truncated: u64,
    /// Games that ended otherwise (no action offered).
    pub other: u64,
    /// Actions taken in all games.
    pub steps: u64,
    /// Every distinct finding (by fingerprint), most severe first, each
    /// with the trace of the first game that met it.
    #[serde(default, deserialize_with = "findings_or_none")]
    pub findings: Vec<SimulatedFinding>,
    /// The traces written: every crashed or hung game's, and the first
    /// game's of each finding, by game number.
    #[serde(default)]
    pub traces: Vec<GameTrace>,
    /// Game processes started.
    pub processes: u64,
    pub leaked: Vec<Leaked>,
    pub interrupted: bool,
    /// Per strategy: how often its games reached the goal (a `goal`
    /// event, or `game.goal` holding) and in how many steps.
    #[serde(default)]
    pub strategies: Vec<StrategyGoals>,
    /// What the simulation says that is no finding (a `game.goal` that
    /// could not be evaluated), each once.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// How one strategy's games fared against the goal.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct StrategyGoals {
    pub strategy: String,
    /// Games it played.
    pub games: u64,
    /// Games that reached the goal.
    pub goals: u64,
    /// `goals / games` (0 when it played none).
    pub goal_rate: f64,
    /// The median of the steps to the goal of the games that reached it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub median_steps_to_goal: Option<f64>,
    /// The median of each game's highest score (of the games that gave a
    /// first observation: a game that failed at its reset showed none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub median_max_score: Option<f64>,
    /// Coverage: the median of each game's distinct observations (of the
    /// games that gave a first observation), as a cell's
    /// `progress.distinct_observations` counts them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub median_distinct_observations: Option<f64>,
}

/// One distinct finding of a simulation.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct SimulatedFinding {
    /// The fingerprint: the same bug has the same id in a play cell.
    pub id: String,
    pub category: Category,
    pub severity: Severity,
    /// The title as the first game that met it found it.
    pub title: String,
    /// What the fingerprint is made of besides the category (normalized).
    pub location: String,
    /// How many games met it.
    pub games: u64,
    /// The first game that met it (by number): its seed and strategy.
    pub game: u64,
    pub seed: i64,
    pub strategy: String,
    /// That game's trace, for `gameplan replay` (none when traces are not written).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<PathBuf>,
}

/// A trace the simulation wrote, and how its game ended.
#[derive(
    Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
pub struct GameTrace {
    pub game: u64,
    pub seed: i64,
    pub strategy: String,
    pub end: QuitReason,
    pub path: PathBuf,
}

/// A summary written before findings were listed held counts by category
/// there: read as no list rather than not at all.
fn findings_or_none<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Vec<SimulatedFinding>, D::Error> {
    let value = <serde_json::Value as serde::Deserialize>::deserialize(deserializer)?;
    Ok(serde_json::from_value(value).unwrap_or_default())
}

/// A finding as the games of one worker met it.
struct Met {
    category: Category,
    title: String,
    location: String,
    games: u64,
    /// The lowest game number that met it.
    first: u64,
}

#[derive(Default)]
struct Tally {
    games: u64,
    completed: u64,
    crashed: u64,
    hung: u64,
    truncated: u64,
    other: u64,
    steps: u64,
    findings: BTreeMap<String, Met>,
    /// The traces written to this worker's batch file: failed games and
    /// (with `trace_findings`) this worker's first meetings.
    written: Vec<IndexEntry>,
    processes: u64,
    leaked: Vec<Leaked>,
    /// Per strategy name: how its games fared.
    goals: BTreeMap<&'static str, GoalTally>,
    notes: Vec<String>,
}

/// One strategy's games: how many, and of each what `StrategyGoals`
/// takes the median of.
#[derive(Debug, Default)]
struct GoalTally {
    games: u64,
    /// The steps to the goal of the games that reached it.
    steps: Vec<u64>,
    /// Each game's highest score (of the games that opened).
    max_scores: Vec<f64>,
    /// Each game's distinct observations (of the games that opened).
    distinct: Vec<u64>,
}

impl Tally {
    /// Counts a game of strategy `kind` for the goal rate, its max score
    /// and its distinct observations, and keeps the notes of its episode
    /// (each once).
    fn count_goals(&mut self, kind: &'static str, ep: &mut Episode) {
        let goals = self.goals.entry(kind).or_default();
        goals.games += 1;
        goals.steps.extend(ep.goal_step());
        goals.max_scores.push(ep.max_score());
        goals.distinct.push(ep.distinct_observations());
        for note in ep.notes.drain(..) {
            if !self.notes.contains(&note) {
                self.notes.push(note);
            }
        }
    }

    /// Counts the findings of game `index`; true when one of them is met
    /// here for the first time (so its trace is kept).
    fn meet<'a>(&mut self, index: u64, findings: impl Iterator<Item = &'a Finding>) -> bool {
        let mut first = false;
        for f in findings {
            match self.findings.entry(f.id.clone()) {
                std::collections::btree_map::Entry::Occupied(mut known) => {
                    known.get_mut().games += 1;
                }
                std::collections::btree_map::Entry::Vacant(slot) => {
                    slot.insert(Met {
                        category: f.category,
                        title: f.title.clone(),
                        location: f.location.clone(),
                        games: 1,
                        first: index,
                    });
                    first = true;
                }
            }
        }
        first
    }
}

/// Runs the simulation. `progress(done, total)` is called every
/// [`PROGRESS_EVERY`] games; after `cancel` turns true no game starts.
pub async fn simulate(
    spec: &SimulateSpec,
    progress: Arc<dyn Fn(u64, u64) + Send + Sync>,
    cancel: tokio::sync::watch::Receiver<bool>,
) -> Result<SimulateSummary, PlayError> {
    let next = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let spec = Arc::new(spec.clone());
    // Dropped (the step aborted, the caller gave up): no worker starts
    // another game.
    let _stop = StopOnDrop(Arc::clone(&next), spec.games);
    let mut workers = Vec::new();
    for number in 0..spec.workers.max(1) {
        let (spec, next, done, progress, cancel) = (
            Arc::clone(&spec),
            Arc::clone(&next),
            Arc::clone(&done),
            Arc::clone(&progress),
            cancel.clone(),
        );
        let (sent, result) = tokio::sync::oneshot::channel();
        let started = std::thread::Builder::new()
            .name(format!("simulate-{number}"))
            .spawn(move || {
                let tally = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime.block_on(worker(
                        &spec,
                        number,
                        &next,
                        &done,
                        progress.as_ref(),
                        &cancel,
                    )),
                    Err(e) => Err(worker_failed(&e)),
                };
                let _ = sent.send(tally);
            });
        if let Err(e) = started {
            // `_stop` ends the workers already started.
            return Err(worker_failed(&e));
        }
        workers.push(result);
    }
    let mut tally = Tally::default();
    let mut first_error = None;
    for result in workers {
        match result.await {
            Ok(Ok(t)) => merge(&mut tally, t),
            Ok(Err(e)) => {
                first_error.get_or_insert(e);
            }
            Err(_) => {
                first_error.get_or_insert(worker_failed(&"it stopped without an answer"));
            }
        }
    }
    if let Some(e) = first_error {
        return Err(e);
    }
    let (findings, traces) =
        list_traces(&spec, tally.findings, std::mem::take(&mut tally.written))?;
    Ok(SimulateSummary {
        games: tally.games,
        completed: tally.completed,
        crashed: tally.crashed,
        hung: tally.hung,
        truncated: tally.truncated,
        other: tally.other,
        steps: tally.steps,
        findings,
        traces,
        processes: tally.processes,
        leaked: tally.leaked,
        interrupted: *cancel.borrow() && tally.games < spec.games,
        strategies: strategy_goals(&spec.strategies, &mut tally.goals),
        notes: tally.notes,
    })
}

/// The goal rate, median steps to the goal, median max score and median
/// distinct observations of each strategy, in the order the spec names
/// them.
fn strategy_goals(
    strategies: &[PlayerSpec],
    goals: &mut BTreeMap<&'static str, GoalTally>,
) -> Vec<StrategyGoals> {
    let mut names = strategy_names(strategies);
    names.dedup();
    let mut seen = std::collections::BTreeSet::new();
    names
        .into_iter()
        .filter(|name| seen.insert(*name))
        .map(|name| {
            let GoalTally {
                games,
                mut steps,
                mut max_scores,
                mut distinct,
            } = goals.remove(name).unwrap_or_default();
            let reached = steps.len() as u64;
            #[expect(
                clippy::cast_precision_loss,
                reason = "a rate for people; counts far below 2^52"
            )]
            let goal_rate = if games == 0 {
                0.0
            } else {
                reached as f64 / games as f64
            };
            StrategyGoals {
                strategy: name.to_owned(),
                games,
                goals: reached,
                goal_rate,
                median_steps_to_goal: super::goal::median(&mut steps),
                median_max_score: super::goal::median_f64(&mut max_scores),
                median_distinct_observations: super::goal::median(&mut distinct),
            }
        })
        .collect()
}

/// Lists the traces the workers wrote (every failed game's and, with
/// `trace_findings`, the first game's of each finding; a trace of a finding
/// another worker met earlier stays in its batch file, unlisted) and the
/// findings, most severe first, and writes the index of the batch files.
fn list_traces(
    spec: &SimulateSpec,
    met: BTreeMap<String, Met>,
    mut written: Vec<IndexEntry>,
) -> Result<(Vec<SimulatedFinding>, Vec<GameTrace>), PlayError> {
    let firsts: std::collections::BTreeSet<u64> = met.values().map(|m| m.first).collect();
    written.sort_by_key(|e| e.game);
    let mut traces = Vec::new();
    if let Some(dir) = &spec.out_dir
        && !written.is_empty()
    {
        trace_batch::write_index(dir, &written).map_err(|source| PlayError::Write {
            path: dir.join(trace_batch::INDEX).display().to_string(),
            source,
        })?;
        for entry in &written {
            if entry.end.is_failure() || spec.trace_findings && firsts.contains(&entry.game) {
                traces.push(GameTrace {
                    game: entry.game,
                    seed: entry.seed,
                    strategy: entry.strategy.clone(),
                    end: entry.end,
                    path: trace_batch::address(&dir.join(&entry.file), entry.game),
                });
            }
        }
    }
    let strategies = strategy_names(&spec.strategies);
    let mut findings: Vec<SimulatedFinding> = met
        .into_iter()
        .map(|(id, met)| SimulatedFinding {
            id,
            category: met.category,
            severity: met.category.severity(),
            title: met.title,
            location: met.location,
            games: met.games,
            game: met.first,
            seed: spec.seed.wrapping_add_unsigned(met.first),
            strategy: strategies[usize::try_from(met.first).unwrap_or(0) % strategies.len()]
                .to_owned(),
            trace: traces
                .iter()
                .find(|t| t.game == met.first)
                .map(|t| t.path.clone()),
        })
        .collect();
    findings.sort_by_key(|f| (f.severity, f.game));
    Ok((findings, traces))
}

fn worker_failed(why: &dyn std::fmt::Display) -> PlayError {
    PlayError::Player(super::player::PlayerError::Settings(format!(
        "a simulate worker failed: {why}"
    )))
}

/// Ends the simulation for every worker when dropped: none starts a game.
struct StopOnDrop(Arc<AtomicU64>, u64);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.fetch_max(self.1, Ordering::Relaxed);
    }
}

/// The name of each strategy, as game `i` plays `strategies[i % len]`.
fn strategy_names(strategies: &[PlayerSpec]) -> Vec<&'static str> {
    if strategies.is_empty() {
        vec![PlayerSpec::Random.kind()]
    } else {
        strategies.iter().map(PlayerSpec::kind).collect()
    }
}

fn merge(into: &mut Tally, t: Tally) {
    into.games += t.games;
    into.completed += t.completed;
    into.crashed += t.crashed;
    into.hung += t.hung;
    into.truncated += t.truncated;
    into.other += t.other;
    into.steps += t.steps;
    for (id, met) in t.findings {
        match into.findings.entry(id) {
            std::collections::btree_map::Entry::Occupied(mut known) => {
                let known = known.get_mut();
                known.games += met.games;
                if met.first < known.first {
                    let games = known.games;
                    *known = met;
                    known.games = games;
                }
            }
            std::collections::btree_map::Entry::Vacant(slot) => {
                slot.insert(met);
            }
        }
    }
    into.written.extend(t.written);
    into.processes += t.processes;
    into.leaked.extend(t.leaked);
    for (name, tally) in t.goals {
        let known = into.goals.entry(name).or_default();
        known.games += tally.games;
        known.steps.extend(tally.steps);
        known.max_scores.extend(tally.max_scores);
        known.distinct.extend(tally.distinct);
    }
    for note in t.notes {
        if !into.notes.contains(&note) {
            into.notes.push(note);
        }
    }
}

async fn worker(
    spec: &SimulateSpec,
    number: usize,
    next: &AtomicU64,
    done: &AtomicU64,
    progress: &(dyn Fn(u64, u64) + Send + Sync),
    cancel: &tokio::sync::watch::Receiver<bool>,
) -> Result<Tally, PlayError> {
    let mut w = Worker {
        spec,
        marker: super::stdio::new_marker(),
        game: None,
        episode: None,
        tally: Tally::default(),
        batch_name: format!("batch-{number}.jsonl"),
        batch: None,
        spare: None,
        ending: Vec::new(),
        // Without one, requests go through the reactor as in a play cell.
        watchdog: super::stdio::Watchdog::start().ok(),
    };
    let strategies = if spec.strategies.is_empty() {
        vec![PlayerSpec::Random]
    } else {
        spec.strategies.clone()
    };
    loop {
        if *cancel.borrow() {
            break;
        }
        let i = next.fetch_add(1, Ordering::Relaxed);
        if i >= spec.games {
            break;
        }
        let strategy = &strategies[usize::try_from(i).unwrap_or(0) % strategies.len()];
        let seed = spec.seed.wrapping_add_unsigned(i);
        // Blocking requests never wait on the runtime: between games, the
        // next process's start, the failed ones' ends and the games' stderr
        // readers get their turn.
        tokio::task::yield_now().await;
        let end = match w.play_one(strategy, seed, i).await {
            Ok(end) => end,
            Err(e) => {
                // No other worker starts a game: the simulation is over.
                next.fetch_max(spec.games, Ordering::Relaxed);
                if let Some(process) = w.game.take() {
                    process.shutdown(false, false).await;
                }
                if let Some(spare) = w.spare.take() {
                    spare.abort();
                }
                for ending in w.ending.drain(..) {
                    let _ = ending.await;
                }
                super::stdio::kill_marked(&w.marker);
                if let Some(batch) = w.batch.take() {
                    let _ = batch.finish();
                }
                return Err(e);
            }
        };
        let tally = &mut w.tally;
        tally.games += 1;
        match end {
            QuitReason::Done => tally.completed += 1,
            QuitReason::Crash => tally.crashed += 1,
            QuitReason::Hang => tally.hung += 1,
            QuitReason::Budget => tally.truncated += 1,
            _ => tally.other += 1,
        }
        if end.is_failure() {
            w.end_failed();
        }
        let finished = done.fetch_add(1, Ordering::Relaxed) + 1;
        if finished.is_multiple_of(PROGRESS_EVERY) {
            progress(finished, spec.games);
        }
    }
    if let Some(process) = w.game.take() {
        process.shutdown(true, false).await;
    }
    if let Some(spare) = w.spare.take()
        && let Ok(Ok((process, _))) = spare.await
    {
        process.shutdown(true, false).await;
    }
    for ending in w.ending.drain(..) {
        let _ = ending.await;
    }
    if let Some(batch) = w.batch.take() {
        let path = batch.path().display().to_string();
        batch
            .finish()
            .map_err(|source| PlayError::Write { path, source })?;
    }
    // Every game of this worker carried the marker: one scan finds what
    // any of them left behind.
    w.tally.leaked = super::stdio::kill_marked(&w.marker);
    Ok(w.tally)
}

/// One worker's state between games.
struct Worker<'a> {
    spec: &'a SimulateSpec,
    /// In the environment of every game process this worker starts.
    marker: String,
    /// The game process, kept across games until one fails.
    game: Option<GameProcess>,
    /// Kept across games for its allocations.
    episode: Option<Episode>,
    tally: Tally,
    batch_name: String,
    /// This worker's batch file, created with its first trace.
    batch: Option<BatchWriter>,
    /// The next game process, started (and greeted) ahead.
    spare: Option<tokio::task::JoinHandle<Result<Opened, SpawnError>>>,
    /// Failed game processes being ended and reaped.
    ending: Vec<tokio::task::JoinHandle<Vec<Leaked>>>,
    /// The deadline keeper of this worker's blocking requests: a worker
    /// owns its thread, so a request is one `write` and one `read`.
    watchdog: Option<super::stdio::Watchdog>,
}

/// The worker's episode, started over at `first` (its allocations kept),
/// or a new one with the game's stuck rule and goal.
fn episode_at<'e>(
    slot: &'e mut Option<Episode>,
    first: super::driver::Seen,
    kind: &str,
    game: &GameSpec,
) -> &'e mut Episode {
    if let Some(ep) = slot {
        ep.restart(first, kind);
        return ep;
    }
    let ep = slot.insert(Episode::new(
        first,
        kind,
        ControllerKind::Standard.name(),
        game.stuck_after,
    ));
    ep.set_goal(game.goal.as_deref());
    ep.set_invariants(&game.invariants);
    ep
}

/// A game process and how it answered `hello`.
type Opened = (
    GameProcess,
    Result<Result<(), super::stdio::Refusal>, super::stdio::Failure>,
);

/// Starts a game process and greets it.
async fn open(game: GameSpec, marker: String) -> Result<Opened, SpawnError> {
    let mut process = GameProcess::spawn_marked(&game, &marker)?;
    let hello = process.hello().await.map(|r| r.map(|_| ()));
    Ok((process, hello))
}

impl Worker<'_> {
    /// Starts the next game process in the background.
    fn start_spare(&mut self) {
        self.tally.processes += 1;
        self.spare = Some(tokio::spawn(open(
            self.spec.game.clone(),
            self.marker.clone(),
        )));
    }

    /// Ends the failed game's process in the background (it is dead or
    /// hung: nothing to wait for on the way to the next game).
    fn end_failed(&mut self) {
        if let Some(process) = self.game.take() {
            self.ending.retain(|ending| !ending.is_finished());
            self.ending
                .push(tokio::spawn(process.shutdown(false, false)));
        }
    }

    /// Plays game `index`; the process is kept in `game` unless it failed.
    async fn play_one(
        &mut self,
        strategy: &PlayerSpec,
        seed: i64,
        index: u64,
    ) -> Result<QuitReason, PlayError> {
        let spec = self.spec;
        let kind = strategy.kind();
        let header = || Trace::header(&spec.game, seed, kind, ControllerKind::Standard.name());
        if self.game.is_none() {
            // After the first failed game, the next process is started
            // while this one plays: a crash costs no start-up wait.
            let replacing = self.tally.processes > 0;
            let (process, hello) = if let Some(spare) = self.spare.take() {
                spare.await.map_err(|e| worker_failed(&e))??
            } else {
                self.tally.processes += 1;
                open(spec.game.clone(), self.marker.clone()).await?
            };
            let mut process = process;
            // A simulated game records hashes, never observations as sent.
            process.without_raw_observations();
            if let Some(watchdog) = &self.watchdog {
                // Stays on the reactor if its pipes cannot be taken over.
                let _ = process.use_blocking_io(watchdog);
            }
            self.game = Some(process);
            if replacing && index + 1 < spec.games {
                self.start_spare();
            }
            if let Err(failure) = hello {
                return self.fail_at_start(&failure, header(), index, kind);
            }
        }
        let Some(process) = self.game.as_mut() else {
            return Ok(QuitReason::Crash);
        };
        let first = match process.reset(seed).await {
            Ok(Ok(first)) => first,
            Ok(Err(refusal)) => {
                let failure = super::stdio::Failure::Violation {
                    during: super::protocol::Op::Reset,
                    reason: format!("the game refused `reset`: {}", refusal.error),
                    evidence: String::new(),
                    stderr_tail: process.stderr_tail(),
                };
                return self.fail_at_start(&failure, header(), index, kind);
            }
            Err(failure) => return self.fail_at_start(&failure, header(), index, kind),
        };
        let ep = episode_at(&mut self.episode, first, kind, &spec.game);
        let mut player = strategy.build(seed);
        let mut controller = Controller::new(ControllerKind::Standard, seed);
        // The same stuck rule as a cell's: after `stuck_after` unchanged
        // observations gameplan tries the offered actions not tried yet.
        let mut way_out: Option<String> = None;
        let end = loop {
            if ep.step() >= spec.max_steps {
                break QuitReason::Budget;
            }
            if ep.current.observation.actions.is_empty() {
                break QuitReason::NoActions;
            }
            let action = if let Some(action) = way_out.take() {
                action
            } else {
                let choice = controller
                    .choose(
                        player.as_mut(),
                        &ep.current.observation,
                        &ep.current.hash,
                        &ep.history,
                    )
                    .await?;
                let Some(action) = choice.action else {
                    break QuitReason::ScriptEnd;
                };
                action
            };
            if ep.step() % YIELD_EVERY == YIELD_EVERY - 1 {
                // A game writing much to stderr in one long game must
                // not fill its pipe while its reader waits for a turn.
                tokio::task::yield_now().await;
            }
            match ep.act(process, &action).await {
                Stepped::Acted { done: true, .. } | Stepped::Acted { goal: true, .. } => {
                    break QuitReason::Done;
                }
                Stepped::Failed(failure) => break quit_for(&failure),
                _ => {}
            }
            way_out = ep.way_out_to_try();
        };
        self.tally.steps += ep.step();
        self.tally.count_goals(kind, ep);
        let first = self.tally.meet(index, ep.findings.as_slice().iter());
        if end.is_failure() || first && spec.trace_findings {
            let mut trace = Trace::new(header());
            trace.steps = std::mem::take(&mut ep.steps);
            trace.end = Some(end);
            self.write_trace(index, seed, kind, &trace)?;
        }
        Ok(end)
    }

    /// A game that failed at hello or reset: counted, its trace written,
    /// the process ended. When the first game (index 0, always on a fresh
    /// process) fails there, the game cannot open at all: the simulation
    /// stops saying why, rather than counting every game as a crash.
    fn fail_at_start(
        &mut self,
        failure: &super::stdio::Failure,
        header: super::trace::TraceHeader,
        index: u64,
        kind: &str,
    ) -> Result<QuitReason, PlayError> {
        self.end_failed();
        if index == 0 {
            return Err(PlayError::NotPlayed(super::opening::not_opened(
                failure,
                self.spec.game.limits,
            )));
        }
        let end = quit_for(failure);
        // A game that failed at its reset played, and reached no goal.
        if let Some(strategy) = self
            .spec
            .strategies
            .iter()
            .map(PlayerSpec::kind)
            .find(|k| *k == kind)
        {
            self.tally.goals.entry(strategy).or_default().games += 1;
        } else if self.spec.strategies.is_empty() {
            self.tally
                .goals
                .entry(PlayerSpec::Random.kind())
                .or_default()
                .games += 1;
        }
        let mut found = FindingSet::default();
        found.add(failure_finding(failure, 0, "", None, &[]), "", "");
        self.tally.meet(index, found.as_slice().iter());
        let seed = header.seed;
        let mut trace = Trace::new(header);
        trace.end = Some(end);
        self.write_trace(index, seed, kind, &trace)?;
        Ok(end)
    }

    /// Appends game `index`'s trace to this worker's batch file (none
    /// without `out_dir`).
    fn write_trace(
        &mut self,
        index: u64,
        seed: i64,
        strategy: &str,
        trace: &Trace,
    ) -> Result<(), PlayError> {
        let Some(dir) = &self.spec.out_dir else {
            return Ok(());
        };
        let failed = |path: &Path, source| PlayError::Write {
            path: path.display().to_string(),
            source,
        };
        let batch = match &mut self.batch {
            Some(batch) => batch,
            None => self.batch.insert(
                BatchWriter::create(dir, &self.batch_name)
                    .map_err(|e| failed(&dir.join(&self.batch_name), e))?,
            ),
        };
        let entry = batch
            .append(index, seed, strategy, trace)
            .map_err(|e| failed(batch.path(), e))?;
        self.tally.written.push(entry);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::play::stdio::ResourceLimits;

    /// The example game, started directly (a unit test's executable is not
    /// gameplan, so no `__game-exec` wrapper).
    fn coins() -> GameSpec {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let env: BTreeMap<String, String> = std::env::vars().collect();
        let mut game = GameSpec::new(
            vec!["python3".into(), "examples/games/coins.py".into()],
            root,
            &env,
        );
        game.limits = ResourceLimits::NONE;
        game
    }

    #[tokio::test]
    async fn progress_comes_every_hundred_games_and_the_summary_adds_up() {
        let calls = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&calls);
        let spec = SimulateSpec {
            game: coins(),
            games: 250,
            strategies: vec![PlayerSpec::Random, PlayerSpec::Explorer],
            workers: 2,
            max_steps: 6,
            seed: 1,
            out_dir: None,
            trace_findings: false,
        };
        let (_stop, cancel) = tokio::sync::watch::channel(false);
        let summary = simulate(
            &spec,
            Arc::new(move |done, total| seen.lock().expect("lock").push((done, total))),
            cancel,
        )
        .await
        .expect("simulate");
        assert_eq!(*calls.lock().expect("lock"), [(100, 250), (200, 250)]);
        assert_eq!(summary.games, 250);
        assert_eq!(summary.completed + summary.truncated + summary.other, 250);
        assert!(
            summary.truncated > 0,
            "six steps cannot finish every game: {summary:?}"
        );
        assert_eq!(summary.processes, 2, "one game process per worker");
        assert!(summary.steps <= 250 * 6);
    }

    #[tokio::test]
    async fn a_canceled_simulation_starts_no_game() {
        let spec = SimulateSpec {
            game: coins(),
            games: 50,
            strategies: vec![PlayerSpec::Random],
            workers: 1,
            max_steps: 5,
            seed: 1,
            out_dir: None,
            trace_findings: false,
        };
        let (stop, cancel) = tokio::sync::watch::channel(false);
        stop.send(true).expect("send");
        let summary = simulate(&spec, Arc::new(|_, _| {}), cancel)
            .await
            .expect("simulate");
        assert_eq!(summary.games, 0);
        assert!(summary.interrupted);
    }

    /// A game that floods a line past the 1 MiB cap on `flood`, sleeps on
    /// `sleep` and dies on `die`.
    const HOSTILE: &str = r#"import json, sys, time
for line in sys.stdin:
    msg = json.loads(line)
    op, i = msg["op"], msg["id"]
    action = msg.get("action")
    if action == "flood":
        sys.stdout.write("x" * (1100 * 1024))
        sys.stdout.flush()
        time.sleep(60)
    if action == "sleep":
        time.sleep(60)
    if action == "die":
        sys.stderr.write("boom: the floor gave way\n")
        sys.exit(7)
    o = {"text": "A room.", "actions": ["look", "flood", "sleep", "die"], "state": {}, "score": 0}
    out = {"id": i, "ok": True, "name": "hostile", "version": "1", "protocol": 1, "observation": o, "done": False}
    print(json.dumps(out), flush=True)
"#;

    /// Issue 19: simulate's blocking requests keep every limit of the
    /// reactor path: a line past 1 MiB is a protocol violation, a game
    /// that does not answer within `action_timeout` is a hang (found by
    /// the watchdog, not waited out), a death keeps its exit status and
    /// stderr; and every one of them has a trace in the batch file.
    #[tokio::test]
    async fn blocking_requests_keep_the_line_cap_the_deadline_and_the_crash_evidence() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("hostile.py"), HOSTILE).expect("write game");
        let env: BTreeMap<String, String> = std::env::vars().collect();
        let mut game = GameSpec::new(
            vec!["python3".into(), "hostile.py".into()],
            dir.path().to_path_buf(),
            &env,
        );
        game.limits = ResourceLimits::NONE;
        // Long enough for python3 to start on a busy machine.
        game.action_timeout = std::time::Duration::from_secs(2);
        let spec = SimulateSpec {
            game,
            games: 12,
            strategies: vec![PlayerSpec::Random],
            workers: 2,
            max_steps: 20,
            seed: 1,
            out_dir: Some(dir.path().join("traces")),
            trace_findings: false,
        };
        let (_stop, cancel) = tokio::sync::watch::channel(false);
        let started = std::time::Instant::now();
        let summary = simulate(&spec, Arc::new(|_, _| {}), cancel)
            .await
            .expect("simulate");
        let titles: Vec<&str> = summary.findings.iter().map(|f| f.title.as_str()).collect();
        assert!(
            titles
                .iter()
                .any(|t| t.contains("a line longer than 1024 KiB")),
            "{titles:#?}"
        );
        assert!(
            titles.iter().any(|t| t.contains("no answer within 2.0 s")),
            "{titles:#?}"
        );
        assert!(
            titles
                .iter()
                .any(|t| t.contains("exited with code 7") && t.contains("boom: the floor gave way")),
            "{titles:#?}"
        );
        assert!(summary.hung > 0 && summary.crashed > 0, "{summary:?}");
        // Hangs are cut at the deadline: nowhere near the game's 60 s sleeps.
        assert!(
            started.elapsed() < std::time::Duration::from_secs(30),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(
            summary.traces.len() as u64,
            summary.crashed + summary.hung,
            "{summary:?}"
        );
        for t in &summary.traces {
            let trace = trace_batch::read(&t.path).expect("each failed game's trace reads");
            assert_eq!(trace.end, Some(t.end));
        }
    }
}

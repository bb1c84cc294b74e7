//! Simulate: many seeded games, no model, to test a game's mechanics.
//!
//! Owns spreading `games` over `workers` game processes, the per-game bound
//! (`max_steps`), progress every 100 games, the summary (each distinct
//! finding with how many games met it), and writing the traces of games
//! that crashed or hung and of the first game (lowest number) that met each
//! finding, so every finding has a trace to replay.
//!
//! # Design
//!
//! Game `i` is played by `strategies[i % len]` with seed `seed + i`, so the
//! summary does not depend on which worker took which game. A worker keeps
//! its game process across games (`reset` starts the next one) and starts a
//! fresh process only after a crash or a hang: a process per game would
//! cost more than the games. The per-action path allocates little (reused
//! request and line buffers, one JSON parse, one hash) and touches no disk;
//! only failed games are written out, without fsync (a trace is evidence,
//! not a checkpoint).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::cell::{PlayError, quit_for};
use super::controllers::{Controller, ControllerKind};
use super::episode::{Episode, Stepped, failure_finding};
use super::findings::{Category, Finding, FindingSet, Severity};
use super::players::PlayerSpec;
use super::stdio::{GameProcess, GameSpec, Leaked};
use super::trace::{QuitReason, Trace};

/// Progress is reported after every this many games.
pub const PROGRESS_EVERY: u64 = 100;

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
    /// Traces that may be written: failed games and first meetings.
    kept: Vec<(u64, Trace)>,
    processes: u64,
    leaked: Vec<Leaked>,
}

impl Tally {
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
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..spec.workers.max(1) {
        let (spec, next, done, progress, cancel) = (
            Arc::clone(&spec),
            Arc::clone(&next),
            Arc::clone(&done),
            Arc::clone(&progress),
            cancel.clone(),
        );
        workers.spawn(async move { worker(&spec, &next, &done, progress.as_ref(), &cancel).await });
    }
    let mut tally = Tally::default();
    let mut first_error = None;
    while let Some(joined) = workers.join_next().await {
        match joined {
            Ok(Ok(t)) => merge(&mut tally, t),
            Ok(Err(e)) => {
                first_error.get_or_insert(e);
            }
            Err(e) => {
                first_error.get_or_insert(PlayError::Player(
                    super::players::PlayerError::Settings(format!("a simulate worker failed: {e}")),
                ));
            }
        }
    }
    if let Some(e) = first_error {
        return Err(e);
    }
    let (findings, traces) = write_traces(&spec, tally.findings, std::mem::take(&mut tally.kept))?;
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
    })
}

/// Writes the traces of the failed games (and with `trace_findings`, of
/// the first game of each finding) and lists the findings, most severe
/// first; a kept trace of a finding another worker met earlier is dropped.
fn write_traces(
    spec: &SimulateSpec,
    met: BTreeMap<String, Met>,
    mut kept: Vec<(u64, Trace)>,
) -> Result<(Vec<SimulatedFinding>, Vec<GameTrace>), PlayError> {
    let strategies = strategy_names(&spec.strategies);
    let who = |game: u64| {
        (
            spec.seed.wrapping_add_unsigned(game),
            strategies[usize::try_from(game).unwrap_or(0) % strategies.len()].to_owned(),
        )
    };
    let firsts: std::collections::BTreeSet<u64> = met.values().map(|m| m.first).collect();
    kept.sort_by_key(|(i, _)| *i);
    kept.retain(|(i, t)| {
        t.end.is_some_and(QuitReason::is_failure) || spec.trace_findings && firsts.contains(i)
    });
    let mut traces = Vec::new();
    if let Some(dir) = &spec.out_dir {
        if !kept.is_empty() {
            std::fs::create_dir_all(dir).map_err(|source| PlayError::Write {
                path: dir.display().to_string(),
                source,
            })?;
        }
        for (i, trace) in &kept {
            let path = dir.join(format!("game-{i}.trace.jsonl"));
            std::fs::write(&path, trace.to_jsonl()).map_err(|source| PlayError::Write {
                path: path.display().to_string(),
                source,
            })?;
            let (seed, strategy) = who(*i);
            traces.push(GameTrace {
                game: *i,
                seed,
                strategy,
                end: trace.end.unwrap_or(QuitReason::Done),
                path,
            });
        }
    }
    let mut findings: Vec<SimulatedFinding> = met
        .into_iter()
        .map(|(id, met)| {
            let (seed, strategy) = who(met.first);
            SimulatedFinding {
                id,
                category: met.category,
                severity: met.category.severity(),
                title: met.title,
                location: met.location,
                games: met.games,
                game: met.first,
                seed,
                strategy,
                trace: traces
                    .iter()
                    .find(|t| t.game == met.first)
                    .map(|t| t.path.clone()),
            }
        })
        .collect();
    findings.sort_by_key(|f| (f.severity, f.game));
    Ok((findings, traces))
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
    into.kept.extend(t.kept);
    into.processes += t.processes;
    into.leaked.extend(t.leaked);
}

async fn worker(
    spec: &SimulateSpec,
    next: &AtomicU64,
    done: &AtomicU64,
    progress: &(dyn Fn(u64, u64) + Send + Sync),
    cancel: &tokio::sync::watch::Receiver<bool>,
) -> Result<Tally, PlayError> {
    let mut tally = Tally::default();
    let marker = super::stdio::new_marker();
    let mut game: Option<GameProcess> = None;
    let mut episode: Option<Episode> = None;
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
        let end = match play_one(
            spec,
            &marker,
            &mut game,
            &mut episode,
            &mut tally,
            strategy,
            seed,
            i,
        )
        .await
        {
            Ok(end) => end,
            Err(e) => {
                // No other worker starts a game: the simulation is over.
                next.fetch_max(spec.games, Ordering::Relaxed);
                if let Some(process) = game.take() {
                    process.shutdown(false, false).await;
                }
                super::stdio::kill_marked(&marker);
                return Err(e);
            }
        };
        tally.games += 1;
        match end {
            QuitReason::Done => tally.completed += 1,
            QuitReason::Crash => tally.crashed += 1,
            QuitReason::Hang => tally.hung += 1,
            QuitReason::Budget => tally.truncated += 1,
            _ => tally.other += 1,
        }
        if end.is_failure()
            && let Some(process) = game.take()
        {
            process.shutdown(false, false).await;
        }
        let finished = done.fetch_add(1, Ordering::Relaxed) + 1;
        if finished.is_multiple_of(PROGRESS_EVERY) {
            progress(finished, spec.games);
        }
    }
    if let Some(process) = game.take() {
        process.shutdown(true, false).await;
    }
    // Every game of this worker carried the marker: one scan finds what
    // any of them left behind.
    tally.leaked = super::stdio::kill_marked(&marker);
    Ok(tally)
}

/// Plays game `index`; the process is kept in `game` unless it failed.
#[expect(
    clippy::too_many_arguments,
    reason = "the worker's state, passed apart so each piece is borrowed as it needs"
)]
async fn play_one(
    spec: &SimulateSpec,
    marker: &str,
    game: &mut Option<GameProcess>,
    episode: &mut Option<Episode>,
    tally: &mut Tally,
    strategy: &PlayerSpec,
    seed: i64,
    index: u64,
) -> Result<QuitReason, PlayError> {
    let kind = strategy.kind();
    let header = || Trace::header(&spec.game, seed, kind, ControllerKind::Standard.name());
    if game.is_none() {
        let mut process = GameProcess::spawn_marked(&spec.game, marker)?;
        tally.processes += 1;
        if let Err(failure) = process.hello().await.map(|r| r.map(|_| ())) {
            return fail_at_start(tally, &failure, header(), index, &mut Some(process)).await;
        }
        *game = Some(process);
    }
    let Some(process) = game.as_mut() else {
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
            return fail_at_start(tally, &failure, header(), index, game).await;
        }
        Err(failure) => return fail_at_start(tally, &failure, header(), index, game).await,
    };
    let ep = match episode {
        Some(ep) => {
            ep.restart(first, kind);
            ep
        }
        None => episode.insert(Episode::new(
            first,
            kind,
            ControllerKind::Standard.name(),
            spec.game.stuck_after,
        )),
    };
    let mut player = strategy.build(seed);
    let mut controller = Controller::new(ControllerKind::Standard, seed);
    let end = loop {
        if ep.step() >= spec.max_steps {
            break QuitReason::Budget;
        }
        if ep.current.observation.actions.is_empty() {
            break QuitReason::NoActions;
        }
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
        match ep.act(process, &action).await {
            Stepped::Acted { done: true, .. } => break QuitReason::Done,
            Stepped::Failed(failure) => break quit_for(&failure),
            _ => {}
        }
    };
    tally.steps += ep.step();
    let first = tally.meet(index, ep.findings.as_slice().iter());
    if end.is_failure() || first {
        let mut trace = Trace::new(header());
        trace.steps = std::mem::take(&mut ep.steps);
        trace.end = Some(end);
        tally.kept.push((index, trace));
    }
    Ok(end)
}

/// A game that failed at hello or reset: counted, its trace kept, the
/// process dropped. When the first game (index 0, always on a fresh
/// process) fails there, the game cannot open at all: the simulation stops
/// saying why, rather than counting every game as a crash.
async fn fail_at_start(
    tally: &mut Tally,
    failure: &super::stdio::Failure,
    header: super::trace::TraceHeader,
    index: u64,
    game: &mut Option<GameProcess>,
) -> Result<QuitReason, PlayError> {
    if index == 0 {
        if let Some(process) = game.take() {
            process.shutdown(false, false).await;
        }
        return Err(PlayError::NotPlayed(super::cell::not_opened(failure)));
    }
    let end = quit_for(failure);
    let mut found = FindingSet::default();
    found.add(failure_finding(failure, 0, "", None, &[]), "", "");
    tally.meet(index, found.as_slice().iter());
    let mut trace = Trace::new(header);
    trace.end = Some(end);
    tally.kept.push((index, trace));
    if let Some(process) = game.take() {
        process.shutdown(false, false).await;
    }
    Ok(end)
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
}

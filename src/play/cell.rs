//! One play cell: a persona plays a fresh game process with one controller,
//! until the game is done, patience or budget runs out, the game fails, or
//! a signal stops it; then the cell's four files are written.
//!
//! Owns the cell's bounds (patience, `budget.max_actions`,
//! `max_wall_seconds`), the interrupt rule (the turn in flight finishes,
//! then the cell ends `interrupted`), and the artifacts: `report.json`,
//! `report.md`, `transcript.jsonl` (every observation and action),
//! `trace.jsonl` (what replay needs). Does not own reuse or the journal:
//! the `play` step kind decides whether a cell runs at all.

use std::collections::{BTreeMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::cell_report::{CellReport, CellState, GameInfo, Metrics, REPORT_FORMAT};
use super::controllers::{Controller, ControllerKind};
use super::episode::{Episode, Stepped, failure_finding};
use super::findings::{Category, Evidence, FindingSet, Spotted};
use super::players::{PlayerError, PlayerSpec};
use super::stdio::{Failure, GameProcess, GameSpec, Hello, Seen, SpawnError};
use super::trace::{QuitReason, Trace};

/// Everything one cell needs.
#[derive(Debug, Clone, PartialEq)]
pub struct CellSpec {
    pub game: GameSpec,
    /// The persona's slug.
    pub persona: String,
    pub player: PlayerSpec,
    pub controller: ControllerKind,
    /// Seeds the game (`reset`), the player and the selector.
    pub seed: i64,
    /// The persona's patience: actions before it quits bored.
    pub patience: u64,
    /// `budget.max_actions`, if any.
    pub max_actions: Option<u64>,
    /// `budget.max_wall_seconds`, if any.
    pub max_wall: Option<Duration>,
}

/// What a cell produced.
#[derive(Debug, Clone)]
pub struct CellResult {
    pub report: CellReport,
    /// The files written, in `out_dir`.
    pub files: Vec<PathBuf>,
}

/// Why a cell could not be played at all (not a finding: the environment).
#[derive(Debug, thiserror::Error)]
pub enum PlayError {
    #[error(transparent)]
    Spawn(#[from] SpawnError),
    #[error("cannot write {path}: {source}")]
    Write {
        path: String,
        source: std::io::Error,
    },
    #[error("the player failed: {0}")]
    Player(#[from] PlayerError),
}

/// The names of the files a cell writes.
pub const CELL_FILES: [&str; 4] = [
    "report.json",
    "report.md",
    "transcript.jsonl",
    "trace.jsonl",
];

/// Plays one cell and writes its files into `out_dir` (created if needed).
/// When `cancel` turns true the turn in flight finishes and the cell ends
/// `interrupted`.
pub async fn play_cell(
    spec: &CellSpec,
    out_dir: &Path,
    cancel: tokio::sync::watch::Receiver<bool>,
) -> Result<CellResult, PlayError> {
    let started = Instant::now();
    let controller_name = spec.controller.name();
    let mut trace = Trace::new(Trace::header(
        &spec.game.command,
        spec.seed,
        &spec.persona,
        controller_name,
    ));
    let mut transcript = Vec::with_capacity(16 * 1024);
    let mut game = GameProcess::spawn(&spec.game)?;
    let mut metrics = Metrics::default();
    let (hello, opened) = open(&mut game, spec.seed).await;
    let (end, findings) = match opened {
        Err(failure) => {
            let mut findings = FindingSet::default();
            findings.add(
                failure_finding(&failure, 0, "", None, &[]),
                &spec.persona,
                controller_name,
            );
            line(
                &mut transcript,
                &serde_json::json!({"step": 0, "failure": failure.describe()}),
            );
            (quit_for(&failure), findings)
        }
        Ok(first) => {
            let mut episode =
                Episode::new(first, &spec.persona, controller_name, spec.game.stuck_after);
            line(
                &mut transcript,
                &serde_json::json!({"hello": {"name": hello.name, "version": hello.version}}),
            );
            line(
                &mut transcript,
                &serde_json::json!({"step": 0, "observation": episode.current.raw}),
            );
            let end = play(
                spec,
                &mut game,
                &mut episode,
                &mut metrics,
                &mut transcript,
                &cancel,
                started,
            )
            .await?;
            metrics.final_score = episode.current.observation.score;
            trace.steps = std::mem::take(&mut episode.steps);
            (end, episode.findings)
        }
    };
    trace.end = Some(end);
    let leaked = game.shutdown(!end.is_failure(), true).await;
    metrics.wall_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    let report = CellReport {
        report: REPORT_FORMAT,
        persona: spec.persona.clone(),
        controller: controller_name.to_owned(),
        player: spec.player.kind().to_owned(),
        seed: spec.seed,
        game: GameInfo {
            command: spec.game.command.clone(),
            name: hello.name,
            version: hello.version,
        },
        state: if end == QuitReason::Interrupted {
            CellState::Interrupted
        } else {
            CellState::Succeeded
        },
        actions_taken: trace.steps.len() as u64,
        quit_reason: end,
        findings: findings.into_vec(),
        metrics,
        leaked,
    };
    let files = write_files(out_dir, &report, &transcript, &trace)?;
    Ok(CellResult { report, files })
}

/// `hello` then `reset`: the first observation, or the failure that ended it.
/// A refusal of either is a protocol violation: nothing can be played.
pub async fn open(game: &mut GameProcess, seed: i64) -> (Hello, Result<Seen, Failure>) {
    let hello = match game.hello().await {
        Ok(Ok(hello)) => hello,
        Ok(Err(refusal)) => {
            return (
                Hello::default(),
                Err(refused_opening(game, "hello", &refusal.error)),
            );
        }
        Err(failure) => return (Hello::default(), Err(failure)),
    };
    let first = match game.reset(seed).await {
        Ok(Ok(first)) => Ok(first),
        Ok(Err(refusal)) => Err(refused_opening(game, "reset", &refusal.error)),
        Err(failure) => Err(failure),
    };
    (hello, first)
}

fn refused_opening(game: &GameProcess, op: &str, error: &str) -> Failure {
    Failure::Violation {
        during: if op == "hello" {
            super::protocol::Op::Hello
        } else {
            super::protocol::Op::Reset
        },
        reason: format!("the game refused `{op}`: {error}"),
        evidence: String::new(),
        stderr_tail: game.stderr_tail(),
    }
}

/// The end a failure gives: `crash` or `hang`.
pub fn quit_for(failure: &Failure) -> QuitReason {
    match failure {
        Failure::Hang { .. } => QuitReason::Hang,
        _ => QuitReason::Crash,
    }
}

/// The turns of a cell, until its end.
async fn play(
    spec: &CellSpec,
    game: &mut GameProcess,
    episode: &mut Episode,
    metrics: &mut Metrics,
    transcript: &mut Vec<u8>,
    cancel: &tokio::sync::watch::Receiver<bool>,
    started: Instant,
) -> Result<QuitReason, PlayError> {
    let mut player = spec.player.build(spec.seed);
    let mut controller = Controller::new(spec.controller, spec.seed);
    let mut distinct: HashSet<String> = HashSet::new();
    distinct.insert(episode.current.hash.clone());
    let mut unchanged = 0u64;
    let budget = spec.max_actions.unwrap_or(u64::MAX);
    loop {
        if *cancel.borrow() {
            return Ok(QuitReason::Interrupted);
        }
        let taken = episode.step();
        if taken >= spec.patience && spec.patience <= budget {
            return Ok(QuitReason::Patience);
        }
        if taken >= budget || spec.max_wall.is_some_and(|w| started.elapsed() >= w) {
            return Ok(QuitReason::Budget);
        }
        if episode.current.observation.actions.is_empty() {
            episode.add_finding(Spotted {
                category: Category::Stuck,
                title: "The game offers no action and is not done".to_owned(),
                location: format!(
                    "no actions\n{}",
                    super::findings::place(&episode.current.observation)
                ),
                evidence: Evidence {
                    step: taken,
                    observation: episode.current.hash.clone(),
                    last_actions: super::findings::last_actions(episode.history.actions()),
                    detail: Some(super::episode::cut(&episode.current.observation.text, 200)),
                    stderr_tail: None,
                },
            });
            return Ok(QuitReason::NoActions);
        }
        let choice = controller
            .choose(
                player.as_mut(),
                &episode.current.observation,
                &episode.current.hash,
                &episode.history,
            )
            .await?;
        let Some(action) = choice.action else {
            return Ok(QuitReason::ScriptEnd);
        };
        let before = episode.current.hash.clone();
        let stepped = episode.act(game, &action).await;
        record_turn(
            episode,
            &stepped,
            &action,
            &choice.proposals,
            metrics,
            transcript,
        );
        if episode.current.hash == before {
            unchanged += 1;
            metrics.longest_unchanged = metrics.longest_unchanged.max(unchanged);
        } else {
            unchanged = 0;
        }
        distinct.insert(episode.current.hash.clone());
        metrics.distinct_observations = distinct.len() as u64;
        match stepped {
            Stepped::Acted { done: true, .. } => return Ok(QuitReason::Done),
            Stepped::Failed(failure) => return Ok(quit_for(&failure)),
            _ => {}
        }
    }
}

/// The transcript line and the metrics of one turn.
fn record_turn(
    episode: &Episode,
    stepped: &Stepped,
    action: &str,
    proposals: &[String],
    metrics: &mut Metrics,
    transcript: &mut Vec<u8>,
) {
    let step = episode.step();
    let entry = match stepped {
        Stepped::Acted {
            reward,
            done,
            events,
        } => {
            metrics.reward_total += reward;
            for event in events {
                *metrics
                    .events
                    .entry(event.kind.name().to_owned())
                    .or_default() += 1;
                if event.kind == super::protocol::EventKind::Goal {
                    metrics.goals += 1;
                }
            }
            serde_json::json!({
                "step": step, "action": action, "proposals": proposals,
                "observation": episode.current.raw, "reward": reward, "done": done,
                "events": events,
            })
        }
        Stepped::Refused(error) => {
            metrics.refused_actions += 1;
            serde_json::json!({
                "step": step, "action": action, "proposals": proposals, "refused": error,
            })
        }
        Stepped::Failed(failure) => serde_json::json!({
            "step": step, "action": action, "proposals": proposals,
            "failure": failure.describe(),
        }),
    };
    line(transcript, &entry);
}

fn line(out: &mut Vec<u8>, value: &serde_json::Value) {
    let _ = serde_json::to_writer(&mut *out, value);
    out.push(b'\n');
}

fn write_files(
    out_dir: &Path,
    report: &CellReport,
    transcript: &[u8],
    trace: &Trace,
) -> Result<Vec<PathBuf>, PlayError> {
    let write = |name: &str, bytes: &[u8]| -> Result<PathBuf, PlayError> {
        let path = out_dir.join(name);
        let failed = |source| PlayError::Write {
            path: path.display().to_string(),
            source,
        };
        std::fs::create_dir_all(out_dir).map_err(failed)?;
        let mut file = std::fs::File::create(&path).map_err(failed)?;
        file.write_all(bytes).map_err(failed)?;
        Ok(path)
    };
    let mut json = serde_json::to_vec_pretty(report).unwrap_or_default();
    json.push(b'\n');
    let markdown = crate::report::play_cell::markdown(report);
    Ok(vec![
        write("report.json", &json)?,
        write("report.md", markdown.as_bytes())?,
        write("transcript.jsonl", transcript)?,
        write("trace.jsonl", &trace.to_jsonl())?,
    ])
}

/// Findings by category name (all categories present, zero or more).
pub fn by_category<'a>(
    findings: impl Iterator<Item = &'a super::findings::Finding>,
) -> BTreeMap<String, u64> {
    let mut counts: BTreeMap<String, u64> = Category::ALL
        .iter()
        .map(|c| (c.name().to_owned(), 0))
        .collect();
    for finding in findings {
        *counts
            .entry(finding.category.name().to_owned())
            .or_default() += 1;
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The step kinds spawn cells and simulations on a multi-threaded
    /// runtime: their futures must be `Send`.
    #[test]
    fn play_cell_simulate_replay_and_shrink_can_be_spawned() {
        fn spawnable<T: Send>(_: &T) {}
        let game = GameSpec::new(vec!["true".into()], PathBuf::from("."), &BTreeMap::new());
        let spec = CellSpec {
            game: game.clone(),
            persona: "p".into(),
            player: PlayerSpec::Explorer,
            controller: ControllerKind::Rune,
            seed: 1,
            patience: 1,
            max_actions: None,
            max_wall: None,
        };
        let (_stop, cancel) = tokio::sync::watch::channel(false);
        spawnable(&play_cell(&spec, Path::new("."), cancel.clone()));
        let sim = super::super::SimulateSpec {
            game,
            games: 1,
            strategies: vec![],
            workers: 1,
            max_steps: 1,
            seed: 0,
            out_dir: None,
            trace_findings: false,
        };
        spawnable(&super::super::simulate(
            &sim,
            std::sync::Arc::new(|_, _| {}),
            cancel,
        ));
        let trace = Trace::new(Trace::header(&["true".into()], 1, "p", "standard"));
        let options = super::super::ReplayOptions {
            root: PathBuf::from("."),
            parent_env: BTreeMap::new(),
            action_timeout: Duration::from_secs(1),
            limits: super::super::ResourceLimits::NONE,
        };
        spawnable(&super::super::replay(&trace, &options));
        let shrink = super::super::ShrinkOptions {
            replay: options.clone(),
            time_limit: Duration::from_secs(1),
        };
        spawnable(&super::super::shrink(&trace, &shrink));
    }
}

//! The `simulate` step kind: many seeded games across player strategies, a
//! mechanics test with no model (docs/play.md › Simulate).
//!
//! Owns turning the step's keys into a [`SimulateSpec`], its reuse key
//! (build hash and config; `workers` is left out, since game `i` plays seed
//! `seed + i` whichever worker plays it), and the step's files in its own
//! directory: `summary.json` and the traces of the games that crashed or
//! hung under `traces/` (one batch file per worker and `index.jsonl`, see
//! `play::trace_batch`), each game's addressed as `FILE#game-N`, which
//! `gameplan replay` and `gameplan shrink` take as is.
//! Every distinct finding gets the trace of the first game that met it.
//!
//! Unlike a play cell, a simulation is a test: a game that crashed or hung
//! fails the step, naming a trace to replay for each distinct finding.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::json;

use super::game;
use super::{
    BoxFuture, KeyContext, Kind, Outputs, Reuse, StepContext, StepError, StepIo, StepOutcome,
};
use crate::plan::model::{Plan, Step, StepKind};
use crate::play::{PlayerSpec, SimulateSpec, SimulateSummary, simulate};
use crate::reuse::RestoreScope;

pub struct Simulate;

/// The step's settings, from its keys.
struct Settings {
    games: u64,
    strategies: Vec<String>,
    workers: u64,
    max_steps: u64,
    seed: i64,
}

fn settings(step: &Step) -> Result<Settings, StepError> {
    let p = step
        .settings::<crate::plan::kinds::simulate::Simulate>()
        .map_err(StepError)?;
    Ok(Settings {
        games: p.games,
        strategies: p.strategies.clone(),
        workers: p.workers,
        max_steps: p.max_steps,
        seed: p.seed.unwrap_or(0),
    })
}

fn strategies(names: &[String]) -> Result<Vec<PlayerSpec>, StepError> {
    names
        .iter()
        .map(|name| PlayerSpec::strategy(name).map_err(|e| StepError(e.to_string())))
        .collect()
}

impl Kind for Simulate {
    fn kind(&self) -> StepKind {
        StepKind::Simulate
    }

    fn reuse(&self, cx: &KeyContext<'_>) -> Result<Reuse, StepError> {
        let s = settings(cx.step)?;
        let config = json!({
            "games": s.games,
            "strategies": s.strategies,
            "max_steps": s.max_steps,
            "seed": s.seed,
        });
        game::reuse(cx, "simulate", &config)
    }

    fn run<'a>(&'a self, cx: &'a StepContext, io: &'a StepIo) -> BoxFuture<'a, StepOutcome> {
        Box::pin(async move { run(cx, io).await.unwrap_or_else(StepOutcome::from) })
    }

    fn outputs(&self, cx: &StepContext) -> Result<Outputs, StepError> {
        Ok(Outputs {
            base: cx.step_dir.clone(),
            files: game::files_under(&cx.step_dir)?
                .into_iter()
                .filter(|f| f == SUMMARY || f.starts_with("traces/"))
                .collect(),
        })
    }

    fn restore_base(&self, cx: &StepContext) -> PathBuf {
        game::restore_base(cx)
    }

    fn log(&self, step_dir: &Path) -> Option<PathBuf> {
        Some(step_dir.join(SUMMARY))
    }

    fn playtest(&self, step_dir: &Path) -> Option<super::PlaytestPart> {
        Some(super::PlaytestPart::Simulation {
            summary: step_dir.join(SUMMARY),
        })
    }

    fn restore_scope(&self, _cx: &StepContext) -> Result<RestoreScope, StepError> {
        RestoreScope::new(&[SUMMARY, "traces/**"], []).map_err(|e| StepError(e.to_string()))
    }

    fn kill_now(&self) {
        game::kill_now();
    }

    fn resource(&self, plan: &Plan) -> Option<&'static str> {
        game::resource(plan)
    }
}

/// The summary's file name in the step's directory.
pub const SUMMARY: &str = "summary.json";

async fn run(cx: &StepContext, io: &StepIo) -> Result<StepOutcome, StepError> {
    let s = settings(&cx.step)?;
    let traces = cx.step_dir.join("traces");
    // A retry starts clean: traces of an earlier attempt are not this one's.
    let _ = std::fs::remove_dir_all(&traces);
    let _ = std::fs::remove_file(cx.step_dir.join(SUMMARY));
    let spec = SimulateSpec {
        game: game::spec(cx)?,
        games: s.games,
        strategies: strategies(&s.strategies)?,
        workers: usize::try_from(s.workers).unwrap_or(usize::MAX).max(1),
        max_steps: s.max_steps,
        seed: s.seed,
        out_dir: Some(traces),
        trace_findings: true,
    };
    std::fs::create_dir_all(&cx.step_dir)
        .map_err(|e| StepError(format!("cannot create {}: {e}", cx.step_dir.display())))?;
    io.mark_started();
    let step_id = cx.instance.id.clone();
    let progress_io = io.progress_sink();
    let progress = Arc::new(move |done: u64, total: u64| {
        progress_io(&format!("{step_id}: {done}/{total} games"));
    });
    let summary = simulate(&spec, progress, cx.cancel.clone())
        .await
        .map_err(|e| StepError(format!("the simulation could not run: {e}")))?;
    write_summary(&cx.step_dir, &summary)?;
    Ok(outcome(&cx.root, &summary))
}

fn write_summary(dir: &Path, summary: &SimulateSummary) -> Result<(), StepError> {
    let path = dir.join(SUMMARY);
    // Trace paths relative to the step's directory: a reused result is
    // restored into another run's directory.
    let mut summary = summary.clone();
    let relative = |path: &mut PathBuf| {
        if let Ok(inside) = path.strip_prefix(dir) {
            *path = inside.to_path_buf();
        }
    };
    summary
        .traces
        .iter_mut()
        .for_each(|t| relative(&mut t.path));
    summary
        .findings
        .iter_mut()
        .filter_map(|f| f.trace.as_mut())
        .for_each(relative);
    let mut text = serde_json::to_string_pretty(&summary).unwrap_or_default();
    text.push('\n');
    std::fs::write(&path, text)
        .map_err(|e| StepError(format!("cannot write {}: {e}", path.display())))
}

fn outcome(root: &Path, summary: &SimulateSummary) -> StepOutcome {
    if summary.interrupted {
        return StepOutcome::Interrupted {
            message: format!(
                "stopped after {} games; a resume plays the simulation again",
                summary.games
            ),
        };
    }
    let failed = summary.crashed + summary.hung;
    if failed == 0 {
        return StepOutcome::Succeeded;
    }
    StepOutcome::Failed {
        exit_code: None,
        message: crate::report::playtest::simulate_failure(summary, |trace| {
            trace
                .strip_prefix(root)
                .unwrap_or(trace)
                .display()
                .to_string()
        }),
    }
}

//! `gameplan plan status [RUN_ID]`, `gameplan plan log STEP [RUN_ID]`,
//! `gameplan plan runs`, `gameplan plan stop RUN_ID`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::json;

use super::Context;
use crate::engine;
use crate::exit_code::{Done, Failure};
use crate::journal::run::{RunDir, RunHistory, RunOutcome, Scanned, run_ids};
use crate::journal::step_log::StepLog;
use crate::journal::{LockHolder, LockStatus, RunLock, this_host};
use crate::plan::LoadOptions;
use crate::report::runs::{self, RunRow, RunState, Status, StatusStep};

/// For commands that take no plan: the repo root above the current
/// directory, and the state dir (`--state-dir`, or `.gameplan` there).
pub(super) fn dirs(flag: Option<&Path>) -> (PathBuf, PathBuf) {
    let cwd = std::env::current_dir().unwrap_or_else(|_| ".".into());
    let root = crate::plan::find_root(&cwd.join("plan.toml"));
    let state_dir = engine::state_dir(&root, flag);
    (root, state_dir)
}

/// The live holder of a run, if that run is running right now.
fn live_holder(state_dir: &Path, history: &RunHistory) -> Option<LockHolder> {
    RunLock::holder(&state_dir.join("locks"), &history.plan_hash)
        .filter(|h| h.run_id == history.run_id)
}

/// A plan file as a run loaded it: its repo path and `--var` overrides.
type PlanAsRun = (String, Vec<(String, String)>);

/// Whether an unfinished run could be resumed: `plan resume` refuses a run
/// whose plan no longer hashes the same, so the listing says so up front.
/// Each plan (path and `--var`s) is loaded once per command.
pub(super) struct Resumability<'a> {
    cx: &'a Context,
    root: PathBuf,
    hashes: BTreeMap<PlanAsRun, Result<String, String>>,
}

impl<'a> Resumability<'a> {
    /// Checks plans against the repo at `root`.
    pub(super) fn new(cx: &'a Context, root: PathBuf) -> Self {
        Resumability {
            cx,
            root,
            hashes: BTreeMap::new(),
        }
    }

    /// Whether `history` can certainly never be resumed: its plan loads and
    /// hashes otherwise. A plan file that is gone or does not load (another
    /// branch checked out, a secret missing from this shell) may come back,
    /// so that is not certain.
    pub(super) fn plan_changed(&mut self, history: &RunHistory) -> bool {
        self.why_not(history).is_some()
            && self
                .hashes
                .get(&(history.plan_path.clone(), history.vars.clone()))
                .is_some_and(Result::is_ok)
    }

    /// Why `history` cannot be resumed, if it cannot.
    pub(super) fn why_not(&mut self, history: &RunHistory) -> Option<String> {
        let (cx, root) = (self.cx, &self.root);
        let hash = self
            .hashes
            .entry((history.plan_path.clone(), history.vars.clone()))
            .or_insert_with(|| {
                let path = root.join(&history.plan_path);
                if !path.is_file() {
                    return Err(format!("the plan file {} is gone", history.plan_path));
                }
                let options = LoadOptions {
                    env: cx.env.clone(),
                    vars: history.vars.clone(),
                    root: Some(root.clone()),
                    ..LoadOptions::default()
                };
                crate::plan::load(&path, &options)
                    .map(|loaded| engine::plan_hash(&loaded))
                    .map_err(|_| {
                        format!(
                            "the plan does not load now (`gameplan plan check {}` says why)",
                            history.plan_path
                        )
                    })
            });
        match hash {
            Ok(hash) if *hash == history.plan_hash => None,
            Ok(_) => Some("the plan changed".to_owned()),
            Err(why) => Some(why.clone()),
        }
    }

    /// The run as `plan runs` lists it.
    pub(super) fn row(&mut self, state_dir: &Path, history: &RunHistory) -> RunRow {
        let holder = live_holder(state_dir, history);
        let state = if holder.is_some() {
            RunState::Running
        } else {
            match history.finished {
                Some((outcome, _)) if history.is_finished() => match outcome {
                    RunOutcome::Succeeded => RunState::Succeeded,
                    RunOutcome::Failed => RunState::Failed,
                    RunOutcome::Incomplete => RunState::Incomplete,
                    RunOutcome::Declined => RunState::Declined,
                    RunOutcome::Unauthorized => RunState::Unauthorized,
                    RunOutcome::Unreachable => RunState::Unreachable,
                    // Both leave the run open (`run_stopped`), never finished.
                    RunOutcome::Interrupted | RunOutcome::Refused | RunOutcome::Uncertain => {
                        RunState::Interrupted
                    }
                },
                Some(_) => RunState::Interrupted,
                None if history.stopped.is_some() => RunState::Interrupted,
                None => RunState::Unfinished,
            }
        };
        let not_resumable = if state.is_open() {
            self.why_not(history)
        } else {
            None
        };
        let (steps_done, steps_total) = engine::progress_of(history);
        RunRow {
            run_id: history.run_id.clone(),
            plan: history.plan.clone(),
            plan_path: history.plan_path.clone(),
            started_at: history.started_at.clone(),
            state,
            exit_code: history
                .finished
                .filter(|_| !state.is_open() && state != RunState::Running)
                .map(|(_, code)| code),
            duration_ms: history.duration_ms,
            steps_done,
            steps_total,
            resumable: state.is_open() && not_resumable.is_none(),
            not_resumable,
            pid: holder.as_ref().map(|h| h.pid),
            host: holder.map(|h| h.host),
        }
    }
}

pub(super) fn read(state_dir: &Path, run_id: Option<&str>) -> Result<RunHistory, String> {
    let id = match run_id {
        Some(id) => id.to_owned(),
        None => run_ids(state_dir)
            .pop()
            .ok_or_else(|| format!("no runs in {}", state_dir.display()))?,
    };
    let journal = RunDir::new(state_dir, &id).journal();
    if !journal.exists() {
        return Err(format!(
            "no run `{id}` in {}; `gameplan plan runs` lists them",
            state_dir.display()
        ));
    }
    RunHistory::read(&journal).map_err(|e| e.to_string())
}

/// The run `run_id` names (the newest without one), or why there is none
/// (exit 3).
pub(super) fn history(state_dir: &Path, run_id: Option<&str>) -> Result<RunHistory, Failure> {
    read(state_dir, run_id).map_err(|message| Failure::plan(format!("error: {message}\n")))
}

pub fn status(cx: &Context, run_id: Option<&str>, as_json: bool, flag: Option<&Path>) -> Done {
    let (root, state_dir) = dirs(flag);
    let history = history(&state_dir, run_id)?;
    let run_dir = RunDir::new(&state_dir, &history.run_id);
    let steps = history
        .steps
        .iter()
        .map(|s| {
            let record = history.records.get(&s.id);
            let log = StepLog::of(&run_dir, &s.id, record).map(|log| match log {
                StepLog::Segments { .. } => {
                    crate::report::run::log_label_in(&s.id, &run_dir, &root)
                }
                StepLog::File(path) => path.display().to_string(),
            });
            StatusStep {
                id: s.id.clone(),
                kind: s.kind.clone(),
                state: history.state_of(&s.id),
                attempt: record.map_or(0, |r| r.attempt),
                exit_code: record.and_then(|r| r.exit_code),
                duration_ms: record.map_or(0, |r| r.duration_ms),
                log,
                message: record.and_then(|r| r.message.clone()),
            }
        })
        .collect();
    let run = Resumability::new(cx, root).row(&state_dir, &history);
    let resume_command = run.resumable.then(|| match flag {
        Some(dir) => format!(
            "gameplan plan resume {} --state-dir {}",
            run.run_id,
            dir.display()
        ),
        None => format!("gameplan plan resume {}", run.run_id),
    });
    let doc = Status {
        run,
        torn_tail: history.torn_tail,
        resume_command,
        steps,
    };
    if as_json {
        cx.console
            .json(&serde_json::to_value(&doc).unwrap_or_default());
    } else {
        cx.console.out(&runs::status_text(&doc));
    }
    Ok(())
}

/// `plan log STEP [RUN_ID]`: the step's log on stdout, from the run's
/// `steps.log` by the segments its journal recorded (or, for a run from
/// before, its own `stdout.log`).
pub fn log(cx: &Context, step: &str, run_id: Option<&str>, flag: Option<&Path>) -> Done {
    let (_, state_dir) = dirs(flag);
    let history = history(&state_dir, run_id)?;
    if !history.steps.iter().any(|s| s.id == step) {
        let ids: Vec<&str> = history.steps.iter().map(|s| s.id.as_str()).collect();
        return Err(Failure::plan(format!(
            "error: run {} has no step `{step}`; its steps: {}\n",
            history.run_id,
            ids.join(", ")
        )));
    }
    let run_dir = RunDir::new(&state_dir, &history.run_id);
    let record = history.records.get(step);
    let Some(log) = StepLog::of(&run_dir, step, record) else {
        let state = history.state_of(step);
        let why = match state {
            crate::journal::run::StepState::Running => {
                "it is running: where its output is, is recorded when it ends (`plan run --output stream` shows it as it comes)"
            }
            crate::journal::run::StepState::Pending | crate::journal::run::StepState::Skipped => {
                "it has not run"
            }
            _ => "it printed nothing",
        };
        cx.console.err(&format!(
            "step `{step}` of run {} ({}) has no log: {why}\n",
            history.run_id,
            state.word()
        ));
        return Ok(());
    };
    match log.read() {
        Ok(bytes) => {
            cx.console.out(&String::from_utf8_lossy(&bytes));
            Ok(())
        }
        Err(e) => Err(Failure::plan(format!(
            "error: cannot read the log of step `{step}` of run {}: {e}\n",
            history.run_id
        ))),
    }
}

pub fn list(cx: &Context, as_json: bool, flag: Option<&Path>) {
    let (root, state_dir) = dirs(flag);
    let ids = run_ids(&state_dir);
    if ids.is_empty() && !as_json {
        cx.console
            .err(&format!("no runs in {}\n", state_dir.display()));
        return;
    }
    let mut resumability = Resumability::new(cx, root);
    let rows: Vec<Result<RunRow, (String, String)>> = ids
        .into_iter()
        .map(|id| {
            let dir = RunDir::new(&state_dir, &id);
            match Scanned::of(&dir) {
                Scanned::Run(history) => Ok(resumability.row(&state_dir, &history)),
                // Not "unreadable": nothing was ever written to read
                // (issue 8, item 13); usually removed by the run that
                // failed to write it.
                Scanned::NeverStarted => Err((
                    id,
                    "never started: its journal has no record (the first could not be written)"
                        .to_owned(),
                )),
                Scanned::Damaged { error, .. } if dir.set_aside().exists() => {
                    Err((id, format!("damaged, set aside: {error}")))
                }
                Scanned::Damaged { error, .. } => Err((id, format!("unreadable: {error}"))),
            }
        })
        .collect();
    if as_json {
        let runs: Vec<serde_json::Value> = rows
            .iter()
            .map(|row| match row {
                Ok(row) => serde_json::to_value(row).unwrap_or_default(),
                Err((id, error)) => json!({ "run_id": id, "error": error }),
            })
            .collect();
        cx.console.json(&json!({ "runs": runs }));
    } else {
        cx.console.out(&runs::list_text(&rows));
    }
}

pub fn stop(cx: &Context, run_id: &str, flag: Option<&Path>) -> Done {
    let (root, state_dir) = dirs(flag);
    let history = history(&state_dir, Some(run_id))?;
    let holder = match RunLock::status(&state_dir.join("locks"), &history.plan_hash) {
        Ok(LockStatus::Held {
            holder: Some(holder),
        }) if holder.run_id == history.run_id => holder,
        // Held, but the lock file does not say by whom: maybe this run,
        // maybe another of the same plan; no pid to trust either way.
        Ok(LockStatus::Held { holder: None }) => {
            return Err(Failure::plan(format!(
                "error: a run of this plan holds its lock, but the lock file does not say which run or pid, so nothing was signalled; stop run {run_id} where it runs (Ctrl-C)\n"
            )));
        }
        _ => {
            cx.console.err(&format!(
                "run {run_id} is not running ({}); nothing to stop\n",
                Resumability::new(cx, root)
                    .row(&state_dir, &history)
                    .status_text()
            ));
            return Ok(());
        }
    };
    let pid = holder
        .signal_target(&this_host())
        .map_err(|refusal| Failure::plan(format!("error: {refusal}\n")))?;
    match nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM) {
        Ok(()) => {
            cx.console.err(&format!(
                "asked run {run_id} (pid {}) to stop: it stops its running steps and exits 10; continue it with `gameplan plan resume {run_id}`\n",
                holder.pid
            ));
            Ok(())
        }
        Err(e) => Err(Failure::plan(format!(
            "error: cannot signal pid {}: {e}\n",
            holder.pid
        ))),
    }
}

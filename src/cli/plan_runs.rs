//! `gameplan plan status [RUN_ID]`, `gameplan plan runs`, `gameplan plan stop RUN_ID`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::json;

use super::Context;
use crate::engine;
use crate::exit_code;
use crate::journal::run::{RunDir, RunHistory, StepState, run_ids};
use crate::journal::{LockHolder, LockStatus, RunLock, this_host};

/// The state dir for commands that take no plan: `--state-dir`, or `.gameplan`
/// at the repo root above the current directory.
fn state_dir(flag: Option<&Path>) -> PathBuf {
    let cwd = std::env::current_dir().unwrap_or_else(|_| ".".into());
    let root = crate::plan::find_root(&cwd.join("plan.toml"));
    engine::state_dir(&root, flag)
}

/// The live holder of a run, if that run is running right now.
fn live_holder(state_dir: &Path, history: &RunHistory) -> Option<LockHolder> {
    RunLock::holder(&state_dir.join("locks"), &history.plan_hash)
        .filter(|h| h.run_id == history.run_id)
}

fn status_word(state_dir: &Path, history: &RunHistory) -> String {
    if let Some(holder) = live_holder(state_dir, history) {
        return format!("running (pid {} on {})", holder.pid, holder.host);
    }
    match history.finished {
        Some((outcome, code)) if history.is_finished() => {
            format!("{outcome:?} (exit {code})").to_lowercase()
        }
        _ if history.stopped.is_some() => "interrupted (resumable)".into(),
        _ => "unfinished (resumable)".into(),
    }
}

fn read(state_dir: &Path, run_id: Option<&str>) -> Result<RunHistory, String> {
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

pub fn status(cx: &Context, run_id: Option<&str>, as_json: bool, flag: Option<&Path>) -> u8 {
    let state_dir = state_dir(flag);
    let history = match read(&state_dir, run_id) {
        Ok(h) => h,
        Err(message) => {
            cx.console.err(&format!("error: {message}\n"));
            return exit_code::PLAN_ERROR;
        }
    };
    let status = status_word(&state_dir, &history);
    let steps: Vec<serde_json::Value> = history
        .steps
        .iter()
        .map(|s| {
            let record = history.records.get(&s.id);
            json!({
                "id": s.id,
                "kind": s.kind,
                "state": history.state_of(&s.id),
                "attempt": record.map_or(0, |r| r.attempt),
                "duration_ms": record.map_or(0, |r| r.duration_ms),
                "message": record.and_then(|r| r.message.clone()),
            })
        })
        .collect();
    if as_json {
        cx.console.json(&json!({
            "run_id": history.run_id,
            "plan": history.plan,
            "plan_path": history.plan_path,
            "started_at": history.started_at,
            "status": status,
            "torn_tail": history.torn_tail,
            "steps": steps,
        }));
        return exit_code::SUCCESS;
    }
    let (done, total) = engine::progress_of(&history);
    let mut out = format!(
        "run {} of `{}` ({}), started {}: {status}; {done} of {} done\n",
        history.run_id,
        history.plan,
        history.plan_path,
        history.started_at,
        crate::report::plural(total, "step")
    );
    for s in &history.steps {
        let state = history.state_of(&s.id);
        let mut line = format!("  {:<11} {}", state.word(), s.id);
        if let Some(message) = history.records.get(&s.id).and_then(|r| r.message.as_ref())
            && state == StepState::Failed
        {
            let first = message.lines().next().unwrap_or_default();
            let _ = write!(line, ": {first}");
        }
        out.push_str(&line);
        out.push('\n');
    }
    cx.console.out(&out);
    exit_code::SUCCESS
}

pub fn list(cx: &Context, flag: Option<&Path>) -> u8 {
    let state_dir = state_dir(flag);
    let ids = run_ids(&state_dir);
    if ids.is_empty() {
        cx.console
            .err(&format!("no runs in {}\n", state_dir.display()));
        return exit_code::SUCCESS;
    }
    let mut out = String::new();
    for id in ids {
        match RunHistory::read(&RunDir::new(&state_dir, &id).journal()) {
            Ok(h) => {
                let (done, total) = engine::progress_of(&h);
                let _ = writeln!(
                    out,
                    "{id}  {:<16} {done:>5}/{total:<5} {}",
                    h.plan,
                    status_word(&state_dir, &h)
                );
            }
            Err(e) => {
                let _ = writeln!(out, "{id}  unreadable: {e}");
            }
        }
    }
    cx.console.out(&out);
    exit_code::SUCCESS
}

pub fn stop(cx: &Context, run_id: &str, flag: Option<&Path>) -> u8 {
    let state_dir = state_dir(flag);
    let history = match read(&state_dir, Some(run_id)) {
        Ok(h) => h,
        Err(message) => {
            cx.console.err(&format!("error: {message}\n"));
            return exit_code::PLAN_ERROR;
        }
    };
    let holder = match RunLock::status(&state_dir.join("locks"), &history.plan_hash) {
        Ok(LockStatus::Held {
            holder: Some(holder),
        }) if holder.run_id == history.run_id => holder,
        // Held, but the lock file does not say by whom: maybe this run,
        // maybe another of the same plan; no pid to trust either way.
        Ok(LockStatus::Held { holder: None }) => {
            cx.console.err(&format!(
                "error: a run of this plan holds its lock, but the lock file does not say which run or pid, so nothing was signalled; stop run {run_id} where it runs (Ctrl-C)\n"
            ));
            return exit_code::PLAN_ERROR;
        }
        _ => {
            cx.console.err(&format!(
                "run {run_id} is not running ({}); nothing to stop\n",
                status_word(&state_dir, &history)
            ));
            return exit_code::SUCCESS;
        }
    };
    let pid = match holder.signal_target(&this_host()) {
        Ok(pid) => pid,
        Err(refusal) => {
            cx.console.err(&format!("error: {refusal}\n"));
            return exit_code::PLAN_ERROR;
        }
    };
    match nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM) {
        Ok(()) => {
            cx.console.err(&format!(
                "asked run {run_id} (pid {}) to stop: it stops its running steps and exits 10; continue it with `gameplan plan resume {run_id}`\n",
                holder.pid
            ));
            exit_code::SUCCESS
        }
        Err(e) => {
            cx.console
                .err(&format!("error: cannot signal pid {}: {e}\n", holder.pid));
            exit_code::PLAN_ERROR
        }
    }
}

//! The `command` step: a shell line or an argv, run as its own process group.
//!
//! # Design
//!
//! A command must run exactly once per successful attempt even when gameplan
//! itself is killed (`kill -9`) mid-step. So the child does not depend on
//! gameplan staying alive:
//!
//! - its output goes straight to `stdout.log` in the step directory (no pipe
//!   through gameplan that would break, and SIGPIPE it, if gameplan died);
//! - a tiny `sh` wrapper runs the command and then writes its exit code to
//!   `status.<attempt>`, so a resumed run can learn how a step ended that the
//!   dead gameplan never saw finish;
//! - the child's stdin is `lock.<attempt>`, exclusively `flock`ed by gameplan
//!   before the spawn. Every process of the step inherits that open file, so
//!   the lock stays held exactly as long as any of them lives. A resume takes
//!   the lock (waiting while the old step still runs), then reads the status
//!   file: present means the step finished (its code says how), absent means
//!   it died mid-way and runs again.
//!
//! Each child leads its own process group; a timeout, `plan stop`, Ctrl-C or
//! fail-fast sends the group SIGTERM, then SIGKILL after a grace period, so no
//! orphan survives. A failed step reports the last lines of its log.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde_json::json;
use tokio::process::Command;

use super::{StepContext, StepError, StepOutcome, expand};
use crate::plan::model::{Params, Program};
use crate::reuse::ReuseKey;

/// How long a stopped step gets between SIGTERM and SIGKILL.
pub const KILL_GRACE: Duration = Duration::from_secs(3);

/// Lines of the log shown when a step fails.
pub const LOG_TAIL_LINES: usize = 10;

/// Process groups of the steps running now, for a second Ctrl-C that must
/// take them all down before gameplan exits.
static RUNNING_GROUPS: std::sync::Mutex<std::collections::BTreeSet<i32>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

fn running_groups() -> std::sync::MutexGuard<'static, std::collections::BTreeSet<i32>> {
    RUNNING_GROUPS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// SIGKILLs every step process group still running.
pub fn kill_all_groups() {
    for &pgid in running_groups().iter() {
        let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
    }
}

/// Runs `"$@"`, then records its exit code where a resumed gameplan finds it.
/// The code is written with one small `write`, so it is whole or absent.
const WRAPPER: &str =
    r#"status="$1"; shift; "$@"; code=$?; printf '%s\n' "$code" > "$status"; exit "$code""#;

struct CommandParams<'a> {
    program: &'a Program,
    inputs: &'a [String],
    outputs: &'a [String],
    cwd: Option<&'a str>,
}

fn params(cx: &StepContext) -> Result<CommandParams<'_>, StepError> {
    match &cx.step.params {
        Params::Command {
            program,
            inputs,
            outputs,
            cwd,
        } => Ok(CommandParams {
            program,
            inputs,
            outputs,
            cwd: cwd.as_deref(),
        }),
        _ => Err(StepError(format!(
            "step `{}` is not a command step",
            cx.step.id
        ))),
    }
}

/// The key: the command, its env and cwd, the declared outputs, the content
/// of every input file, and the keys of the steps it needs.
pub fn reuse_key(cx: &StepContext) -> Result<ReuseKey, StepError> {
    let p = params(cx)?;
    let mut key = ReuseKey::new(
        "command",
        json!({
            "program": p.program,
            "env": cx.step.env,
            "cwd": p.cwd,
            "outputs": p.outputs,
        }),
    );
    let files = expand(&cx.root, p.inputs)?;
    let mut hashes = cx
        .hashes
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    key.inputs = hashes
        .hash_all(&cx.root, &files)
        .map_err(|e| StepError(e.to_string()))?;
    key.upstream = cx.upstream.clone();
    Ok(key)
}

/// The files the step declared as outputs; a pattern matching nothing is an error.
pub fn outputs(cx: &StepContext) -> Result<Vec<String>, StepError> {
    let p = params(cx)?;
    let mut all = Vec::new();
    for pattern in p.outputs {
        let found = expand(&cx.root, std::slice::from_ref(pattern))?;
        if found.is_empty() {
            return Err(StepError(format!(
                "the step succeeded but did not produce its declared output `{pattern}`"
            )));
        }
        all.extend(found);
    }
    all.sort();
    all.dedup();
    Ok(all)
}

/// The argv a program runs as. A shell line with no shell syntax is split
/// and run directly, like make does: one `sh` less per step.
pub fn argv(program: &Program) -> Vec<String> {
    match program {
        Program::Argv(argv) => argv.clone(),
        Program::Shell(line) if is_simple(line) => {
            line.split_whitespace().map(str::to_owned).collect()
        }
        Program::Shell(line) => vec!["sh".into(), "-c".into(), line.clone()],
    }
}

fn is_simple(line: &str) -> bool {
    !line.trim().is_empty()
        && line
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || " \t-_./,:=+@%".contains(c))
}

pub fn status_path(step_dir: &Path, attempt: u32) -> PathBuf {
    step_dir.join(format!("status.{attempt}"))
}

pub fn lock_path(step_dir: &Path, attempt: u32) -> PathBuf {
    step_dir.join(format!("lock.{attempt}"))
}

pub fn log_path(step_dir: &Path) -> PathBuf {
    step_dir.join("stdout.log")
}

/// What a resumed run learns about an attempt a dead gameplan left running.
#[derive(Debug, PartialEq, Eq)]
pub enum Leftover {
    /// The attempt finished with this exit code while nobody watched.
    Finished(i32),
    /// It never finished (killed mid-way, or never started): run it again.
    Unfinished,
}

/// Waits until no process of the attempt is alive, then reads its status.
/// Checks `cancel` between polls so a stopped resume does not hang here.
pub async fn leftover(
    step_dir: &Path,
    attempt: u32,
    cancel: &tokio::sync::watch::Receiver<bool>,
) -> Leftover {
    let lock = lock_path(step_dir, attempt);
    if let Ok(file) = File::open(&lock) {
        loop {
            match file.try_lock() {
                Ok(()) => break,
                Err(std::fs::TryLockError::WouldBlock) if !*cancel.borrow() => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(_) => return Leftover::Unfinished,
            }
        }
    }
    read_status(&status_path(step_dir, attempt)).map_or(Leftover::Unfinished, Leftover::Finished)
}

fn read_status(path: &Path) -> Option<i32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

pub async fn run(cx: &StepContext) -> StepOutcome {
    match spawn_and_wait(cx).await {
        Ok(outcome) => outcome,
        Err(e) => StepOutcome::Failed {
            exit_code: None,
            message: e.0,
        },
    }
}

fn io(what: &str, path: &Path) -> impl FnOnce(std::io::Error) -> StepError {
    let message = format!("cannot {what} {}", path.display());
    move |e| StepError(format!("{message}: {e}"))
}

#[expect(
    clippy::too_many_lines,
    reason = "set-up, spawn and the three ways a wait ends, in order"
)]
async fn spawn_and_wait(cx: &StepContext) -> Result<StepOutcome, StepError> {
    let p = params(cx)?;
    std::fs::create_dir_all(&cx.step_dir).map_err(io("create", &cx.step_dir))?;
    let status = status_path(&cx.step_dir, cx.attempt);
    let _ = std::fs::remove_file(&status);
    let lock_file = lock_path(&cx.step_dir, cx.attempt);
    let lock = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&lock_file)
        .map_err(io("create", &lock_file))?;
    lock.lock().map_err(io("lock", &lock_file))?;
    let log = log_path(&cx.step_dir);
    let out = File::create(&log).map_err(io("create", &log))?;
    let err = out.try_clone().map_err(io("open", &log))?;
    let cwd = match p.cwd {
        Some(dir) => cx.root.join(dir),
        None => cx.root.clone(),
    };

    let argv = argv(p.program);
    let mut command = Command::new("sh");
    command
        .arg("-c")
        .arg(WRAPPER)
        .arg("gameplan-step")
        .arg(&status)
        .args(&argv)
        .current_dir(&cwd)
        .env_clear()
        .envs(cx.env.iter())
        .envs(cx.step.env.iter())
        .env("GAMEPLAN_RUN_ID", &cx.run_id)
        .env("GAMEPLAN_STEP", &cx.instance.id)
        .env("GAMEPLAN_ROOT", &cx.root)
        .stdin(Stdio::from(lock))
        .stdout(Stdio::from(out))
        .stderr(Stdio::from(err))
        .process_group(0)
        .kill_on_drop(false);
    let mut child = command.spawn().map_err(|e| {
        StepError(format!(
            "cannot start `{}` in {}: {e}",
            argv.join(" "),
            cwd.display()
        ))
    })?;
    let pgid = child
        .id()
        .map(|id| Pid::from_raw(i32::try_from(id).unwrap_or(i32::MAX)));
    if let Some(pgid) = pgid {
        running_groups().insert(pgid.as_raw());
    }

    let timeout = cx.step.timeout_secs.map(Duration::from_secs);
    let mut cancel = cx.cancel.clone();
    let stopped = async {
        loop {
            if *cancel.borrow_and_update() {
                return;
            }
            if cancel.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    };
    let deadline = async {
        match timeout {
            Some(t) => tokio::time::sleep(t).await,
            None => std::future::pending().await,
        }
    };
    let outcome = tokio::select! {
        waited = child.wait() => {
            let waited = waited.map_err(|e| StepError(format!("lost track of the step's process: {e}")))?;
            match waited.code() {
                Some(0) => StepOutcome::Succeeded,
                code => {
                    // Whatever the step left running in its group goes with it.
                    if let Some(pgid) = pgid { let _ = killpg(pgid, Signal::SIGKILL); }
                    StepOutcome::Failed {
                        exit_code: code,
                        message: failure_message(code, &log),
                    }
                }
            }
        }
        () = deadline => {
            stop_group(&mut child, pgid).await;
            StepOutcome::Failed {
                exit_code: None,
                message: format!(
                    "timed out after {}s and was stopped{}",
                    timeout.map_or(0, |t| t.as_secs()),
                    tail_suffix(&log)
                ),
            }
        }
        () = stopped => {
            stop_group(&mut child, pgid).await;
            StepOutcome::Interrupted { message: "stopped before it finished".into() }
        }
    };
    if let Some(pgid) = pgid {
        running_groups().remove(&pgid.as_raw());
    }
    Ok(outcome)
}

/// SIGTERM to the whole group, SIGKILL after the grace period.
async fn stop_group(child: &mut tokio::process::Child, pgid: Option<Pid>) {
    let Some(pgid) = pgid else { return };
    let _ = killpg(pgid, Signal::SIGTERM);
    if tokio::time::timeout(KILL_GRACE, child.wait())
        .await
        .is_err()
    {
        let _ = killpg(pgid, Signal::SIGKILL);
        let _ = child.wait().await;
    }
    // Stragglers that ignored SIGTERM after the leader exited.
    let _ = killpg(pgid, Signal::SIGKILL);
}

fn failure_message(code: Option<i32>, log: &Path) -> String {
    let head = match code {
        Some(code) => format!("exited with code {code}"),
        None => "was killed by a signal".to_owned(),
    };
    format!("{head}{}", tail_suffix(log))
}

fn tail_suffix(log: &Path) -> String {
    let tail = log_tail(log, LOG_TAIL_LINES);
    if tail.is_empty() {
        format!(" (no output; log: {})", log.display())
    } else {
        format!("; last lines of {}:\n{tail}", log.display())
    }
}

/// The last `lines` lines of a log, reading at most its last 64 KiB.
pub fn log_tail(log: &Path, lines: usize) -> String {
    const WINDOW: u64 = 64 * 1024;
    let Ok(mut file) = File::open(log) else {
        return String::new();
    };
    let len = file.metadata().map_or(0, |m| m.len());
    let _ = file.seek(SeekFrom::Start(len.saturating_sub(WINDOW)));
    let mut bytes = Vec::new();
    let _ = file.read_to_end(&mut bytes);
    let text = String::from_utf8_lossy(&bytes);
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..]
        .iter()
        .map(|l| format!("    {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simple_lines_skip_the_shell() {
        assert_eq!(
            argv(&Program::Shell("touch out/a".into())),
            ["touch", "out/a"]
        );
        assert_eq!(
            argv(&Program::Shell("echo $HOME".into())),
            ["sh", "-c", "echo $HOME"]
        );
        assert_eq!(
            argv(&Program::Shell("a && b".into())),
            ["sh", "-c", "a && b"]
        );
        assert_eq!(
            argv(&Program::Shell("echo 'x y'".into())),
            ["sh", "-c", "echo 'x y'"]
        );
    }
}

//! The `command` step: a shell line or an argv, run as its own process group.
//!
//! The process itself is started by the run's launcher (`steps::launcher`),
//! which outlives gameplan if it is killed and records how each attempt
//! ended, so a resume never runs a finished step twice. Each step leads its
//! own process group; a timeout, `plan stop`, Ctrl-C or fail-fast sends the
//! group SIGTERM, then SIGKILL after a grace period, so no orphan survives;
//! what a failed step left in its group is killed before a retry starts. A
//! failed step reports the last lines of its log (which the launcher redacts
//! when the plan has secrets, and caps). A command step has no directory: its
//! output goes to the run's one `steps.log`, found again by the segments the
//! launcher reports and the engine journals (`journal::step_log`).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde_json::json;

use super::launcher::{DISK_FULL, Ended, LazyLauncher, Leftover, Request, Written};
use super::{
    BoxFuture, KeyContext, Kind, LeftRunning, Outputs, Reuse, StepContext, StepError, StepIo,
    StepOutcome, expand,
};
use crate::journal::run::RunDir;
use crate::journal::step_log::StepLog;
use crate::plan::kinds::command::CommandParams;
use crate::plan::model::{Program, Step, StepKind};
use crate::process::Group;
use crate::reuse::{RestoreScope, ReuseKey};

/// The `command` kind, holding the run's process launcher (started by the
/// first command step that runs).
pub struct Command {
    launcher: LazyLauncher,
}

impl Command {
    /// `slots`: how many command steps may run at once; `redactor`: the
    /// plan's secrets, which never reach a step log.
    pub fn new(slots: usize, redactor: crate::template::Redactor) -> Command {
        Command {
            launcher: LazyLauncher::new(slots, redactor),
        }
    }
}

impl Kind for Command {
    fn kind(&self) -> StepKind {
        StepKind::Command
    }

    fn reuse(&self, cx: &KeyContext<'_>) -> Result<Reuse, StepError> {
        reuse_key(cx)
    }

    fn run<'a>(&'a self, cx: &'a StepContext, io: &'a StepIo) -> BoxFuture<'a, StepOutcome> {
        Box::pin(async move {
            spawn_and_wait(cx, &self.launcher, io)
                .await
                .unwrap_or_else(StepOutcome::from)
        })
    }

    fn outputs(&self, cx: &StepContext) -> Result<Outputs, StepError> {
        outputs(cx)
    }

    fn restore_scope(&self, cx: &StepContext) -> Result<RestoreScope, StepError> {
        let p = params(&cx.step)?;
        let patterns: Vec<String> = p
            .inputs
            .iter()
            .filter(|i| !i.starts_with('$'))
            .cloned()
            .collect();
        let keep = expand(&cx.root, &patterns)?
            .into_iter()
            .chain(cx.plan_file.clone());
        RestoreScope::new(&p.outputs, keep).map_err(|e| StepError(e.to_string()))
    }

    fn left_running<'a>(&'a self, cx: &'a StepContext, attempt: u32) -> BoxFuture<'a, LeftRunning> {
        Box::pin(async move {
            match leftover(cx, attempt).await {
                Leftover::StillRunning => LeftRunning::StillRunning,
                Leftover::Finished(0, log) => LeftRunning::Ended(StepOutcome::Succeeded, log),
                // With retries left, a failed orphan is one more failed attempt.
                Leftover::Finished(code, log) if cx.step.retries == 0 => {
                    let tail = StepLog::Segments {
                        file: run_dir(&cx.step_dir).steps_log(),
                        segments: log.clone(),
                    }
                    .tail(LOG_TAIL_LINES);
                    let shown = crate::report::run::log_label_in(
                        &cx.instance.id,
                        &run_dir(&cx.step_dir),
                        &cx.root,
                    );
                    let message = if tail.is_empty() {
                        format!("exited with code {code} while gameplan was not running")
                    } else {
                        format!(
                            "exited with code {code} while gameplan was not running; last lines of {shown}:\n{tail}"
                        )
                    };
                    LeftRunning::Ended(
                        StepOutcome::Failed {
                            exit_code: Some(code),
                            message,
                        },
                        log,
                    )
                }
                Leftover::Finished(..) | Leftover::Unfinished => LeftRunning::RunAgain,
            }
        })
    }

    fn kill_now(&self) {
        kill_all_groups();
    }

    fn queues_ahead(&self) -> bool {
        true
    }

    fn warnings(&self, root: &Path, step: &Step) -> Vec<String> {
        let Ok(p) = params(step) else {
            return Vec::new();
        };
        p.inputs
            .iter()
            .filter(|i| !i.starts_with('$'))
            .filter(|i| expand(root, std::slice::from_ref(*i)).is_ok_and(|f| f.is_empty()))
            .map(|i| format!("input `{i}` matches no file"))
            .collect()
    }
}

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
fn kill_all_groups() {
    for &pgid in running_groups().iter() {
        Group::led_by(pgid).kill();
    }
}

fn params(step: &Step) -> Result<&CommandParams, StepError> {
    step.settings::<crate::plan::kinds::command::Command>()
        .map_err(StepError)
}

/// The key: the command, its env and cwd, the declared outputs, the content
/// of every input file, and the content of the outputs of the steps it needs
/// (so a step below a `reuse = false` one runs again exactly when that one's
/// output changed). A step that declares no inputs and needs no step is never
/// reused: nothing at all is known of what it reads.
fn reuse_key(cx: &KeyContext<'_>) -> Result<Reuse, StepError> {
    let p = params(cx.step)?;
    if p.inputs.is_empty() && cx.upstream.is_empty() {
        return Ok(Reuse::Never(
            "it declares no `inputs` and needs no step, so nothing is known of what it reads"
                .into(),
        ));
    }
    if let Some(pending) = cx.upstream.iter().find(|u| u.outputs.is_none()) {
        return Ok(Reuse::AfterUpstream(format!(
            "`{}` runs first; reused if its outputs come out the same",
            pending.id
        )));
    }
    let mut key = ReuseKey::new(
        "command",
        json!({
            "program": p.program,
            "env": cx.step.env,
            "cwd": p.cwd,
            "outputs": p.outputs,
            // Each cell of a matrix is its own result.
            "cell": cx.instance.cell,
        }),
    );
    // `"$NAME"` keys on an environment variable's value (absent is a value
    // too); a secret's value is redacted by the key maker before hashing.
    let (variables, patterns): (Vec<&String>, Vec<&String>) =
        p.inputs.iter().partition(|i| i.starts_with('$'));
    if !variables.is_empty()
        && let serde_json::Value::Object(settings) = &mut key.settings
    {
        let values: BTreeMap<&str, Option<&String>> = variables
            .iter()
            .map(|v| (&v[1..], cx.env.get(&v[1..])))
            .collect();
        settings.insert("env_inputs".into(), json!(values));
    }
    let patterns: Vec<String> = patterns.into_iter().cloned().collect();
    let mut hashes = cx
        .hashes
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    key.inputs = hashes.inputs_of(&patterns, |hashes| {
        let files = expand(cx.root, &patterns)?;
        hashes
            .hash_all(cx.root, &files)
            .map_err(|e| StepError(e.to_string()))
    })?;
    key.upstream = cx
        .upstream
        .iter()
        .map(|u| (u.id.clone(), u.outputs.clone().unwrap_or_default()))
        .collect();
    Ok(Reuse::Key(key))
}

/// The files the step declared as outputs; a pattern matching nothing is an error.
fn outputs(cx: &StepContext) -> Result<Outputs, StepError> {
    let p = params(&cx.step)?;
    let mut all = Vec::new();
    for pattern in &p.outputs {
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
    Ok(Outputs {
        base: cx.root.clone(),
        files: all,
    })
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

/// Words that only the shell understands: its builtins (which have no
/// program to exec, or one that cannot change the shell's own state) and
/// keywords.
const SHELL_ONLY: &[&str] = &[
    ".", "alias", "bg", "break", "case", "cd", "command", "continue", "eval", "exec", "exit",
    "export", "fg", "for", "getopts", "hash", "if", "jobs", "local", "read", "readonly", "return",
    "set", "shift", "source", "times", "trap", "type", "ulimit", "umask", "unalias", "unset",
    "until", "wait", "while", "!", "{",
];

fn is_simple(line: &str) -> bool {
    let Some(first) = line.split_whitespace().next() else {
        return false;
    };
    // `FOO=bar cmd` is an assignment for the shell, not a program named `FOO=bar`.
    !first.contains('=')
        && !SHELL_ONLY.contains(&first)
        && line
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || " \t-_./,:=+@%".contains(c))
}

/// An axis name as an environment variable name: `build-mode` → `BUILD_MODE`.
fn env_name(axis: &str) -> String {
    axis.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect()
}

/// The run a step belongs to: two levels above where its directory would
/// be (`runs/<id>/steps/<step>/`; a command step never makes it).
fn run_dir(step_dir: &Path) -> RunDir {
    RunDir {
        dir: step_dir
            .parent()
            .and_then(Path::parent)
            .unwrap_or(step_dir)
            .to_path_buf(),
    }
}

/// An attempt's name in the record of endings.
pub fn attempt_name(step: &str, attempt: u32) -> String {
    format!("{step}#{attempt}")
}

/// How long a resume waits for an attempt a dead gameplan left running
/// when the step has no `timeout` (which bounds it otherwise).
pub const LEFTOVER_WAIT: Duration = Duration::from_secs(5 * 60);

/// How an attempt that a dead gameplan left running ended (see `launcher`).
async fn leftover(cx: &StepContext, attempt: u32) -> super::launcher::Leftover {
    let marks = marks(&cx.left_by, &cx.instance.id, attempt);
    let run = run_dir(&cx.step_dir);
    let locks = run.attempt_locks();
    let name = attempt_name(&cx.instance.id, attempt);
    let claim = run.claim(&name);
    let exits = run.exits();
    let label = if cx.left_by == cx.run_id {
        format!("`{}`", cx.instance.id)
    } else {
        format!("`{}` of run {}", cx.instance.id, cx.left_by)
    };
    let attempt = super::launcher::Attempt {
        locks: &locks,
        claim: &claim,
        exits: &exits,
        name: &name,
        marks: &marks,
        label: &label,
    };
    let note = |text: &str| (cx.note)(text);
    let wait = super::launcher::Wait {
        bound: cx
            .step
            .timeout_secs
            .map_or(LEFTOVER_WAIT, Duration::from_secs),
        grace: KILL_GRACE,
        note: &note,
    };
    super::launcher::leftover(&attempt, &wait, &cx.cancel).await
}

/// The variables that name one attempt (docs/plans.md lists them). Every process
/// of the attempt carries them (children inherit them): how a resume finds
/// the attempt when its launcher died before it wrote its process group
/// down.
fn attempt_env(run_id: &str, step: &str, attempt: u32) -> [(String, String); 3] {
    [
        ("GAMEPLAN_RUN_ID".into(), run_id.to_owned()),
        ("GAMEPLAN_STEP".into(), step.to_owned()),
        ("GAMEPLAN_ATTEMPT".into(), attempt.to_string()),
    ]
}

/// [`attempt_env`] as the `NAME=value` entries of an environment block.
fn marks(run_id: &str, step: &str, attempt: u32) -> Vec<String> {
    attempt_env(run_id, step, attempt)
        .into_iter()
        .map(|(name, value)| format!("{name}={value}"))
        .collect()
}

async fn spawn_and_wait(
    cx: &StepContext,
    launcher: &LazyLauncher,
    step_io: &StepIo,
) -> Result<StepOutcome, StepError> {
    let p = params(&cx.step)?;
    let run = run_dir(&cx.step_dir);
    let label = crate::report::run::log_label_in(&cx.instance.id, &run, &cx.root);
    let cwd = match p.cwd.as_deref() {
        Some(dir) => cx.root.join(dir),
        None => cx.root.clone(),
    };
    let mut env = cx.step.env.clone();
    env.extend(attempt_env(&cx.run_id, &cx.instance.id, cx.attempt));
    env.insert("GAMEPLAN_ROOT".into(), cx.root.display().to_string());
    // A matrix cell's values, so the command can act on them:
    // `matrix = { seed = [1, 2] }` gives GAMEPLAN_MATRIX_SEED=1 or 2.
    for (axis, value) in cx.instance.cell.values() {
        env.insert(format!("GAMEPLAN_MATRIX_{}", env_name(axis)), value.clone());
    }
    let attempt = attempt_name(&cx.instance.id, cx.attempt);
    let (launcher, submitted) = launcher
        .submit(
            Request {
                token: 0,
                argv: argv(&p.program),
                cwd,
                env,
                log: run.steps_log(),
                state_dir: crate::report::run::state_dir(&run),
                locks: run.attempt_locks(),
                claim: run.claim(&attempt),
                exits: run.exits(),
                attempt,
                live: false,
            },
            step_io.live(),
        )
        .await
        .map_err(StepError)?;
    let mut exit = submitted.exit;
    let mut started = submitted.started;
    let mut cancel = cx.cancel.clone();
    // Queued until the launcher has a free slot; a stop meanwhile cancels it.
    let pid = tokio::select! {
        pid = &mut started => match pid.map_err(|_| StepError("the step launcher exited unexpectedly".into()))? {
            Ok(pid) => pid,
            // Its log could not even be opened: the disk is full.
            Err(e) if e.starts_with(DISK_FULL) => return Ok(StepOutcome::NoSpace { message: format!("{e}; the step did not start") }),
            Err(e) => return Err(StepError(e)),
        },
        () = stopped(&mut cancel) => {
            launcher.cancel(submitted.token).await;
            if let Ok(Ok(late)) = started.await {
                // It started just before the cancel arrived: stop it.
                stop_group(Group::led_by(i32::try_from(late).unwrap_or(i32::MAX)), &mut exit).await;
            }
            return Ok(StepOutcome::Interrupted { message: "stopped before it started".into() });
        }
    };
    step_io.mark_started();
    let group = Group::led_by(i32::try_from(pid).unwrap_or(i32::MAX));
    running_groups().insert(group.id());

    let timeout = cx.step.timeout_secs.map(Duration::from_secs);
    let deadline = async {
        match timeout {
            Some(t) => tokio::time::sleep(t).await,
            None => std::future::pending().await,
        }
    };
    let outcome = tokio::select! {
        ended = &mut exit => if let Ok(Ended { code, written }) = ended {
            if code != 0 {
                // Whatever the step left running in its group goes with
                // it, and is gone before a retry starts beside it.
                kill_and_wait(group).await;
            }
            step_io.set_log(written.log.clone());
            ended_outcome(code, &written, &run, &label)
        } else {
            kill_and_wait(group).await;
            StepOutcome::Failed {
                exit_code: None,
                message: "the step launcher died while the step ran".into(),
            }
        },
        () = deadline => {
            let written = stop_group(group, &mut exit).await.map(|e| e.written).unwrap_or_default();
            step_io.set_log(written.log.clone());
            StepOutcome::Failed {
                exit_code: None,
                message: format!(
                    "timed out after {}s and was stopped{}",
                    timeout.map_or(0, |t| t.as_secs()),
                    tail_suffix(&written, &run, &label)
                ),
            }
        }
        () = stopped(&mut cancel) => {
            if let Some(ended) = stop_group(group, &mut exit).await {
                step_io.set_log(ended.written.log);
            }
            StepOutcome::Interrupted { message: "stopped before it finished".into() }
        }
    };
    running_groups().remove(&group.id());
    Ok(outcome)
}

/// Resolves once the run asks its steps to stop.
async fn stopped(cancel: &mut tokio::sync::watch::Receiver<bool>) {
    loop {
        if *cancel.borrow_and_update() {
            return;
        }
        if cancel.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// SIGKILLs what is left of a group and waits (briefly: SIGKILL cannot be
/// resisted) until none of it runs.
async fn kill_and_wait(pgid: Group) {
    if !pgid.kill() {
        return;
    }
    // A killed process ends within milliseconds on an idle machine, but a
    // loaded one can take seconds to schedule it: a retry must not start
    // beside it, so wait as long as that may take.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while pgid.is_alive() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// SIGTERM to the whole group, SIGKILL after the grace period: every process
/// of the step (not only its leader) gets the grace to clean up.
async fn stop_group(
    pgid: Group,
    exit: &mut tokio::sync::oneshot::Receiver<Ended>,
) -> Option<Ended> {
    let deadline = tokio::time::Instant::now() + KILL_GRACE;
    pgid.terminate();
    let mut ended = match tokio::time::timeout_at(deadline, &mut *exit).await {
        Ok(ended) => Some(ended.ok()),
        Err(_) => None,
    };
    // The leader is gone (or out of time); wait for the rest of its group
    // (its zombies aside: where nobody reaps orphans they never go).
    while pgid.is_alive() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if pgid.is_alive() {
        pgid.kill();
    }
    if ended.is_none() {
        ended = tokio::time::timeout(KILL_GRACE, exit)
            .await
            .ok()
            .map(Result::ok);
    }
    ended.flatten()
}

/// What an attempt that exited comes to: its code, unless its log could
/// not be written (a full disk stops the run; a resume runs it again).
fn ended_outcome(code: i32, written: &Written, run: &RunDir, label: &str) -> StepOutcome {
    let how = if code > 128 {
        format!("was killed by signal {} (exit {code})", code - 128)
    } else {
        format!("exited with code {code}")
    };
    if let Some(lost) = &written.lost {
        let words =
            crate::journal::step_log::tail_lines(written.last_words.as_bytes(), LOG_TAIL_LINES);
        let said = if words.is_empty() {
            String::new()
        } else {
            format!("; its last words:\n{words}")
        };
        let message = format!("{lost}; the step {how}{said}");
        if lost.starts_with(DISK_FULL) {
            return StepOutcome::NoSpace {
                message: format!(
                    "{message}\nnothing more fits, so the run stops; free space, then `gameplan plan resume` runs this step again"
                ),
            };
        }
        return StepOutcome::Failed {
            exit_code: Some(code),
            message,
        };
    }
    if code == 0 {
        return StepOutcome::Succeeded;
    }
    StepOutcome::Failed {
        exit_code: Some(code),
        message: format!("{how}{}", tail_suffix(written, run, label)),
    }
}

fn tail_suffix(written: &Written, run: &RunDir, label: &str) -> String {
    let tail = StepLog::Segments {
        file: run.steps_log(),
        segments: written.log.clone(),
    }
    .tail(LOG_TAIL_LINES);
    if tail.is_empty() {
        " (no output)".to_owned()
    } else {
        format!("; last lines of {label}:\n{tail}")
    }
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

    /// Issue 8, item 23: assignments and builtins go to the shell.
    #[test]
    fn assignments_and_builtins_go_to_the_shell() {
        for line in [
            "FOO=bar env",
            "exit 0",
            "cd src",
            "export A=1",
            ". ./env.sh",
        ] {
            assert_eq!(
                argv(&Program::Shell(line.into())),
                ["sh", "-c", line],
                "{line}"
            );
        }
        assert_eq!(
            argv(&Program::Shell("env FOO=bar".into())),
            ["env", "FOO=bar"]
        );
    }
}

//! The `local` executor: each job a gameplan process (in a process group of
//! its own) on this machine, its log, pid and exit code in the job's
//! directory.
//!
//! A job outlives the gameplan that submitted it: a coordinator killed
//! with -9 finds its jobs again by their directories (the exit code once
//! ended, a live process group while running), so a resume waits for them
//! instead of starting them again.

use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use super::{ExecError, Executor, JobSpec, JobState};
use crate::process::{Group, SpawnInGroup as _};
use crate::steps::BoxFuture;

const PID_FILE: &str = "pid";
const EXIT_FILE: &str = "exit";
const LOG_FILE: &str = "log";
const STOPPED_FILE: &str = "stopped";
/// How long a stopped job's processes get to end after SIGTERM.
const GRACE: Duration = Duration::from_secs(5);

/// Runs jobs on this machine.
#[derive(Debug, Default)]
pub struct Local;

fn io(what: &str, path: &Path) -> impl FnOnce(std::io::Error) -> ExecError {
    let text = format!("cannot {what} {}", path.display());
    move |e| ExecError(format!("{text}: {e}"))
}

fn pid_of(job: &JobSpec) -> Option<i32> {
    fs::read_to_string(job.dir.join(PID_FILE))
        .ok()?
        .trim()
        .parse()
        .ok()
}

fn start(job: &JobSpec) -> Result<(), ExecError> {
    fs::create_dir_all(&job.dir).map_err(io("create", &job.dir))?;
    // The shell writes the exit code only once the command ended, through a
    // rename, so a reader sees no code or the whole code.
    let script = "exec >\"$0/log\" 2>&1; \"$@\"; code=$?; echo $code > \"$0/exit.tmp\" && mv \"$0/exit.tmp\" \"$0/exit\"";
    let (child, _) = Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg(&job.dir)
        .args(&job.argv)
        .current_dir(&job.cwd)
        .envs(&job.env)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn_in_group()
        .map_err(|e| ExecError(format!("cannot start job {}: {e}", job.submission_id)))?;
    let pid_path = job.dir.join(PID_FILE);
    fs::write(&pid_path, child.id().to_string()).map_err(io("write", &pid_path))?;
    // Not waited for: the job runs on when this gameplan ends (its reaper
    // is whoever inherits it).
    drop(child);
    Ok(())
}

/// The job's exit code as its shell wrote it, once it ended.
fn ended(job: &JobSpec) -> Option<JobState> {
    let code = fs::read_to_string(job.dir.join(EXIT_FILE)).ok()?;
    Some(match code.trim() {
        "0" => JobState::Succeeded,
        other => JobState::Failed(format!("gameplan exited with code {other}")),
    })
}

fn state(job: &JobSpec) -> JobState {
    if job.dir.join(STOPPED_FILE).exists() {
        return JobState::Stopped;
    }
    if let Some(ended) = ended(job) {
        return ended;
    }
    match pid_of(job) {
        Some(pid) if Group::led_by(pid).is_alive() => JobState::Running,
        // Its shell writes the code, then exits: one that ended between
        // the first look and this one has its code there now.
        Some(_) => ended(job).unwrap_or_else(|| {
            JobState::Failed("its process died without an exit code".to_owned())
        }),
        None if job.dir.exists() => JobState::Pending,
        None => JobState::Unknown,
    }
}

impl Executor for Local {
    fn name(&self) -> &'static str {
        "local"
    }

    fn submit<'a>(&'a self, job: &'a JobSpec) -> BoxFuture<'a, Result<(), ExecError>> {
        Box::pin(async move {
            if job.dir.join(PID_FILE).exists() {
                return Ok(());
            }
            start(job)
        })
    }

    fn status<'a>(&'a self, job: &'a JobSpec) -> BoxFuture<'a, Result<JobState, ExecError>> {
        Box::pin(async move { Ok(state(job)) })
    }

    fn logs<'a>(&'a self, job: &'a JobSpec) -> BoxFuture<'a, Result<String, ExecError>> {
        Box::pin(async move {
            let path = job.dir.join(LOG_FILE);
            match fs::read(&path) {
                Ok(bytes) => Ok(String::from_utf8_lossy(&bytes).into_owned()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
                Err(e) => Err(io("read", &path)(e)),
            }
        })
    }

    fn cancel<'a>(&'a self, job: &'a JobSpec) -> BoxFuture<'a, Result<(), ExecError>> {
        Box::pin(async move {
            let Some(pid) = pid_of(job) else {
                return Ok(());
            };
            if state(job).is_over() {
                return Ok(());
            }
            let stopped = job.dir.join(STOPPED_FILE);
            fs::write(&stopped, "").map_err(io("write", &stopped))?;
            let group = Group::led_by(pid);
            group
                .stop(GRACE, group.emptied(Duration::from_millis(50)))
                .await;
            Ok(())
        })
    }
}

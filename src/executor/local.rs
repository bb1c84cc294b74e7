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
/// How long a job's directory may lack its pid before the job counts as
/// never started: its shell writes the pid as its first act, so only a
/// submitter killed between making the directory and starting the shell
/// leaves one without (and nothing would ever start it).
const STARTING: Duration = Duration::from_secs(5);

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
    // The shell records its own pid first (a submitter killed right after
    // the spawn leaves no running job without one), and writes the exit
    // code only once the command ended; both through a rename, so a reader
    // sees nothing or the whole number.
    let script = "echo $$ > \"$0/pid.sh\" && mv \"$0/pid.sh\" \"$0/pid\"; exec >\"$0/log\" 2>&1; \"$@\"; code=$?; echo $code > \"$0/exit.tmp\" && mv \"$0/exit.tmp\" \"$0/exit\"";
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
    // Written here too, so a `cancel` right after the submit finds it; the
    // same number as the shell's, through a rename of its own.
    let pid_path = job.dir.join(PID_FILE);
    let tmp = job.dir.join("pid.tmp");
    fs::write(&tmp, child.id().to_string()).map_err(io("write", &tmp))?;
    fs::rename(&tmp, &pid_path).map_err(io("write", &pid_path))?;
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
        None if starting(job) => JobState::Pending,
        // Never started (or no directory at all): the coordinator submits
        // it again under the same id.
        None => JobState::Unknown,
    }
}

/// The job's directory was made a moment ago and its shell may not yet
/// have written its pid.
fn starting(job: &JobSpec) -> bool {
    fs::metadata(&job.dir)
        .and_then(|m| m.modified())
        .is_ok_and(|made| made.elapsed().unwrap_or_default() < STARTING)
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::SystemTime;

    fn spec(dir: &Path, argv: &[&str]) -> JobSpec {
        JobSpec {
            submission_id: "job-1".to_owned(),
            cells: vec!["cell".to_owned()],
            argv: argv.iter().map(|&a| a.to_owned()).collect(),
            cwd: dir.to_path_buf(),
            env: std::collections::BTreeMap::new(),
            dir: dir.join("job-1"),
            num_cpus: 1.0,
        }
    }

    async fn until_over(job: &JobSpec) -> JobState {
        for _ in 0..200 {
            let now = state(job);
            if now.is_over() {
                return now;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("job never ended: {:?}", state(job));
    }

    #[tokio::test]
    async fn a_directory_left_without_a_pid_by_a_killed_submitter_is_started_again() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let job = spec(tmp.path(), &["true"]);
        // The submitter made the directory, then died before the shell ran.
        fs::create_dir_all(&job.dir).expect("dir");
        assert_eq!(state(&job), JobState::Pending, "a moment ago: starting");
        let long_ago = SystemTime::now() - Duration::from_secs(60);
        fs::File::open(&job.dir)
            .and_then(|d| d.set_modified(long_ago))
            .expect("age the directory");
        assert_eq!(state(&job), JobState::Unknown, "never started");
        Local.submit(&job).await.expect("submit");
        assert_eq!(until_over(&job).await, JobState::Succeeded);
    }

    #[tokio::test]
    async fn the_job_s_shell_records_its_pid_before_the_game_runs_and_a_running_job_is_not_started_twice()
     {
        let tmp = tempfile::tempdir().expect("tempdir");
        // The command sees the pid file already there: the shell wrote it
        // first, whether or not the submitter lived to write its own.
        let job = spec(
            tmp.path(),
            &["sh", "-c", "cat job-1/pid; echo >> runs; sleep 0.3"],
        );
        Local.submit(&job).await.expect("submit");
        Local.submit(&job).await.expect("submit again");
        assert_eq!(until_over(&job).await, JobState::Succeeded);
        let pid = pid_of(&job).expect("a pid");
        let log = fs::read_to_string(job.dir.join(LOG_FILE)).expect("log");
        assert_eq!(log.trim(), pid.to_string(), "the pid as the game saw it");
        let runs = fs::read_to_string(tmp.path().join("runs")).expect("runs");
        assert_eq!(runs.lines().count(), 1, "started twice");
    }
}

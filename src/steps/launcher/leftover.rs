//! What a resumed run does with an attempt a dead gameplan left running:
//! it waits (said, and bounded) until no process of the attempt lives,
//! then reads its ending from the run's `exits.jsonl`, or claims it so no
//! launcher starts it late, and runs it again.

use std::fs::File;
use std::path::Path;

use super::{Entry, attempt_lock};
use crate::journal::step_log::Segment;
use crate::process::Group;

/// How a resumed run finds an attempt that a dead gameplan left behind.
#[derive(Debug, PartialEq, Eq)]
pub enum Leftover {
    /// The attempt exited with this code while nobody watched; its output
    /// is at these segments of the run's log.
    Finished(i32, Vec<Segment>),
    /// It never finished (killed by a signal, killed with its launcher, or
    /// never started), and nothing of it lives: run it again.
    Unfinished,
    /// The run was stopped while the attempt still lived: it may live on,
    /// so nothing else of the step may start.
    StillRunning,
}

/// Where a resumed run looks for an attempt it found running.
pub struct Attempt<'a> {
    /// The run's lock file (a byte of it is the attempt's lock).
    pub locks: &'a Path,
    pub claim: &'a Path,
    pub exits: &'a Path,
    pub name: &'a str,
    /// The `NAME=value` entries every process of this attempt carries in
    /// its environment (run, step, attempt): how its processes are found
    /// when the launcher died before it wrote their process group down.
    pub marks: &'a [String],
    /// The step as the messages name it (`` `a` ``, `` `a` of run X ``).
    pub label: &'a str,
}

/// How long a resume waits for an attempt a dead gameplan left running,
/// and how it says so.
pub struct Wait<'a> {
    /// After this the attempt is stopped (SIGTERM, then SIGKILL).
    pub bound: std::time::Duration,
    /// The grace between SIGTERM and SIGKILL.
    pub grace: std::time::Duration,
    pub note: &'a (dyn Fn(&str) + Send + Sync),
}

/// What `exits.jsonl` says of one attempt: the process group it started
/// as, and how it ended (with its log's segments).
fn recorded(exits: &Path, name: &str) -> (Option<i32>, Option<(String, Vec<Segment>)>) {
    let text = std::fs::read_to_string(exits).unwrap_or_default();
    let mut pid = None;
    let mut ended = None;
    for entry in text
        .lines()
        .filter_map(|line| serde_json::from_str::<Entry>(line).ok())
        .filter(|e| e.attempt == name)
    {
        if let Some(p) = entry.pid.and_then(|p| i32::try_from(p).ok()) {
            pid = Some(p);
        }
        if let Some(ending) = entry.ending {
            ended = Some((ending, entry.log));
        }
    }
    (pid, ended)
}

/// Waits until no process of the attempt lives, then looks up its ending.
/// Unless it ended, claims it (a marker made while holding the lock), so a
/// launcher that has not started it yet never will.
///
/// Liveness is the launcher's lock (held until the ending is recorded, on a
/// file the step never inherits) and, when the launcher died too, the
/// step's process group: nothing a process the step left behind holds by
/// accident. The wait is said, and bounded: past `wait.bound` the attempt
/// is stopped like a timed-out step. A stop of the run ends the wait.
pub async fn leftover(
    attempt: &Attempt<'_>,
    wait: &Wait<'_>,
    cancel: &tokio::sync::watch::Receiver<bool>,
) -> Leftover {
    // The step may never have started (no lock file yet); the claim must
    // still be left, so make room for it.
    if let Some(dir) = attempt.claim.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    // An open file of its own: the lock of another open file (the
    // launcher's) is seen, one of this process's own other files too.
    let Ok(locks) = attempt_lock::open(attempt.locks) else {
        return Leftover::Unfinished;
    };
    let began = tokio::time::Instant::now();
    let mut said = false;
    let mut stopping: Option<tokio::time::Instant> = None;
    let mut found_group = None;
    loop {
        let Ok(locked) = attempt_lock::try_lock(&locks, attempt.name) else {
            return Leftover::Unfinished;
        };
        let (recorded_pid, ended) = recorded(attempt.exits, attempt.name);
        // The launcher writes a step's process group down just after it
        // started it, so one killed in between left a live step with no
        // group on record: its processes are found by their environment
        // (once: a scan reads every process's environment).
        if recorded_pid.is_none() && found_group.is_none() {
            found_group =
                crate::process::carrying(|env| crate::process::has_entries(env, attempt.marks))
                    .first()
                    .map(|found| found.group);
        }
        let pid = recorded_pid.or(found_group);
        if locked {
            if let Some((code, log)) = ended
                .as_ref()
                .and_then(|(e, log)| Some((e.parse().ok()?, log.clone())))
            {
                return Leftover::Finished(code, log);
            }
            if !pid.is_some_and(|p| Group::led_by(p).is_alive()) {
                let _ = File::create(attempt.claim);
                // Closing the lock file gives the lock back.
                drop(locks);
                return Leftover::Unfinished;
            }

            // Its launcher died, but the step lives on: wait for its group.
        }
        if *cancel.borrow() {
            return Leftover::StillRunning;
        }
        let group = pid.map_or_else(
            || "its process group".to_owned(),
            |p| format!("process group {p}"),
        );
        if !said {
            said = true;
            (wait.note)(&format!(
                "waiting for {} ({group}), which a gameplan that died left running, to end; it is stopped after {}",
                attempt.label,
                humantime::format_duration(wait.bound)
            ));
        }
        match stopping {
            None if began.elapsed() >= wait.bound => {
                (wait.note)(&format!(
                    "{} still runs after {}: stopping it ({group}) to run it again",
                    attempt.label,
                    humantime::format_duration(wait.bound)
                ));
                if let Some(p) = pid {
                    Group::led_by(p).terminate();
                }
                stopping = Some(tokio::time::Instant::now());
            }
            Some(since) if since.elapsed() >= wait.grace => {
                if let Some(p) = pid {
                    Group::led_by(p).kill();
                }
            }
            _ => {}
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

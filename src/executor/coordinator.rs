//! Playing a run's cells through an executor: batches, submission ids
//! journaled before anything is submitted, waiting, logs, Ctrl-C, and the
//! bundles that come back.
//!
//! The journal (`<state>/executor/<plan hash>.jsonl`, one durable line per
//! event) is what lets a killed gameplan pick up where it was: run again,
//! it reads the jobs it submitted, asks the executor about each by its
//! submission id and waits for those still running; a job the executor
//! forgot (a restarted Ray head) is submitted again under the same id; a
//! batch whose bundle already holds all its cells, verified, is never
//! played again. A job that stopped or failed without its cells is
//! submitted once more, as a new attempt, by the next run.

use std::collections::BTreeMap;
use std::fs::{self, OpenOptions};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{Executor, JobSpec, JobState};
use crate::reuse::sha256_hex;
use crate::shard::Bundle;

/// What a coordinator needs to know of the plan.
pub struct Work {
    /// The repo root (each job's working directory) and the plan file in it.
    pub root: PathBuf,
    pub plan_file: String,
    pub plan_hash: String,
    /// `--var`s, passed on to every job.
    pub vars: Vec<(String, String)>,
    /// The cells, in the plan's order, each with whether it goes alone
    /// (an llm-played cell: minutes of one model's calls).
    pub cells: Vec<(String, bool)>,
    /// Cells per job.
    pub batch: u32,
    /// Where jobs leave their bundles: seen by every node.
    pub shared_dir: PathBuf,
    /// The gameplan each job runs.
    pub exe: PathBuf,
    /// This machine's state directory (the journal's home).
    pub state_dir: PathBuf,
    /// How often a job's state is asked.
    pub poll: Duration,
    /// A paid plan's prepared job (in the shared directory): each job plays
    /// for it, free, and buys nothing.
    pub prepared: Option<PathBuf>,
    /// The plan's `[pools]` size for its cells (the smallest that applies):
    /// a job then plays that many of its cells at once and holds as many
    /// CPUs. Without one, a job holds one CPU and its gameplan plays as the
    /// node's cores allow, as a run without an executor does.
    pub cap: Option<u32>,
}

/// How many cells a job plays at once and the CPUs it holds: the plan's
/// pool, no more than the job's cells, and no more than the largest node
/// has (a job asking more would wait for ever).
#[derive(Debug, Clone, Copy)]
struct Sizing {
    cap: Option<u32>,
    largest: Option<u32>,
}

impl Sizing {
    fn of(self, cells: usize) -> Option<u32> {
        let cells = u32::try_from(cells).unwrap_or(u32::MAX);
        let cap = self.cap?.min(cells).min(self.largest.unwrap_or(u32::MAX));
        Some(cap.max(1))
    }
}

/// How the jobs ended.
pub struct Collected {
    /// Every bundle that came back, verified.
    pub bundles: Vec<Bundle>,
    /// Cells with no result, and why.
    pub missing: Vec<(String, String)>,
    /// Jobs submitted by this invocation (not re-attached).
    pub submitted: usize,
    /// Jobs found running or done from an earlier invocation.
    pub reattached: usize,
}

/// Why jobs were not waited for to the end.
#[derive(Debug)]
pub enum Halt {
    /// Ctrl-C or SIGTERM: every job still running was stopped.
    Interrupted { stopped: usize },
    /// The executor or the journal failed.
    Failed(String),
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
enum Event {
    Begun {
        coordinator: String,
        /// The plan file and `--var`s, for `plan resume`.
        #[serde(default)]
        plan_file: String,
        #[serde(default)]
        vars: Vec<(String, String)>,
    },
    Submitted {
        submission_id: String,
        cells: Vec<String>,
        attempt: u32,
    },
    Collected,
}

struct Journal {
    path: PathBuf,
}

impl Journal {
    fn append(&self, event: &Event) -> Result<(), String> {
        let line = serde_json::to_string(event).map_err(|e| e.to_string())? + "\n";
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .map_err(|e| format!("cannot open {}: {e}", self.path.display()))?;
        file.write_all(line.as_bytes())
            .and_then(|()| file.sync_data())
            .map_err(|e| format!("cannot write {}: {e}", self.path.display()))
    }

    /// The events of an unfinished coordination; empty when there is none.
    fn unfinished(&self) -> Vec<Event> {
        let Ok(text) = fs::read_to_string(&self.path) else {
            return Vec::new();
        };
        // A torn last line (a kill mid-write) is not an event.
        let events: Vec<Event> = text
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        if events.iter().any(|e| matches!(e, Event::Collected)) {
            return Vec::new();
        }
        events
    }
}

/// The plan file and `--var`s of the newest coordination in `state_dir`
/// that did not collect its jobs (a gameplan killed while its jobs ran),
/// for `plan resume`.
pub fn unfinished(state_dir: &Path) -> Option<(String, Vec<(String, String)>)> {
    let dir = state_dir.join("executor");
    let mut journals: Vec<(std::time::SystemTime, PathBuf)> = fs::read_dir(&dir)
        .ok()?
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "jsonl"))
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .collect();
    journals.sort();
    journals.into_iter().rev().find_map(|(_, path)| {
        let events = Journal { path }.unfinished();
        events.into_iter().find_map(|e| match e {
            Event::Begun {
                plan_file, vars, ..
            } if !plan_file.is_empty() => Some((plan_file, vars)),
            _ => None,
        })
    })
}

/// The batches of `cells`: an alone cell by itself, the others `batch` at
/// a time, in the plan's order.
pub fn batches(cells: &[(String, bool)], batch: u32) -> Vec<Vec<String>> {
    let size = batch.max(1) as usize;
    let mut out: Vec<Vec<String>> = Vec::new();
    let mut open: Vec<String> = Vec::new();
    for (id, alone) in cells {
        if *alone {
            out.push(vec![id.clone()]);
            continue;
        }
        open.push(id.clone());
        if open.len() == size {
            out.push(std::mem::take(&mut open));
        }
    }
    if !open.is_empty() {
        out.push(open);
    }
    out
}

/// A fresh coordination's id: this process and the time, hashed short.
fn new_coordinator_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    sha256_hex(format!("{}-{nanos}", std::process::id()).as_bytes())[..10].to_owned()
}

/// A submission id from (coordination, batch, attempt): letters, digits
/// and `-` only, which every executor takes.
fn submission_id(coordinator: &str, cells: &[String], attempt: u32) -> String {
    let batch = &sha256_hex(cells.join("\n").as_bytes())[..12];
    format!("gameplan-{coordinator}-{batch}-{attempt}")
}

fn job(work: &Work, sizing: Sizing, submission_id: &str, cells: &[String]) -> JobSpec {
    let dir = work.shared_dir.join(submission_id);
    let mut argv = vec![
        work.exe.display().to_string(),
        "plan".to_owned(),
        "run".to_owned(),
        work.plan_file.clone(),
    ];
    argv.extend(cells.iter().cloned());
    argv.extend([
        "--bundle".to_owned(),
        dir.join("bundle").display().to_string(),
        "--state-dir".to_owned(),
        dir.join("state").display().to_string(),
        "--new".to_owned(),
    ]);
    if let Some(prepared) = &work.prepared {
        argv.extend(["--prepared".to_owned(), prepared.display().to_string()]);
    }
    let at_once = sizing.of(cells.len());
    if let Some(n) = at_once {
        argv.extend(["--concurrency".to_owned(), n.to_string()]);
    }
    for (name, value) in &work.vars {
        argv.extend(["--var".to_owned(), format!("{name}={value}")]);
    }
    JobSpec {
        submission_id: submission_id.to_owned(),
        cells: cells.to_vec(),
        argv,
        cwd: work.root.clone(),
        env: BTreeMap::new(),
        dir,
        num_cpus: f64::from(at_once.unwrap_or(1)),
    }
}

/// Whether `job`'s bundle holds every one of its cells, verified.
fn complete(job: &JobSpec) -> Option<Bundle> {
    let bundle = Bundle::read(&job.bundle()).ok()?;
    let held = |id: &String| bundle.manifest.cells.iter().any(|c| c.id == *id);
    job.cells.iter().all(held).then_some(bundle)
}

/// Plays `work`'s cells through `executor`; `say` shows progress and logs.
pub async fn play(
    executor: &dyn Executor,
    work: &Work,
    say: &(dyn Fn(&str) + Sync),
) -> Result<Collected, Halt> {
    if work.cells.is_empty() {
        return Ok(Collected {
            bundles: Vec::new(),
            missing: Vec::new(),
            submitted: 0,
            reattached: 0,
        });
    }
    // Watched from the start: a Ctrl-C while jobs are being submitted
    // stops them too, instead of killing gameplan between two submissions.
    let signals = Signals::watch()?;
    let journal = open(work)?;
    let earlier = journal.unfinished();
    let coordinator = earlier
        .iter()
        .find_map(|e| match e {
            Event::Begun { coordinator, .. } => Some(coordinator.clone()),
            _ => None,
        })
        .unwrap_or_else(new_coordinator_id);
    if earlier.is_empty() {
        let _ = fs::remove_file(&journal.path);
        journal
            .append(&Event::Begun {
                coordinator: coordinator.clone(),
                plan_file: work.plan_file.clone(),
                vars: work.vars.clone(),
            })
            .map_err(Halt::Failed)?;
    }
    // The last submission of each batch, from the earlier invocation.
    let mut known: BTreeMap<Vec<String>, (String, u32)> = BTreeMap::new();
    for event in &earlier {
        if let Event::Submitted {
            submission_id,
            cells,
            attempt,
        } = event
        {
            known.insert(cells.clone(), (submission_id.clone(), *attempt));
        }
    }
    let mut jobs: Vec<JobSpec> = Vec::new();
    let (mut submitted, mut reattached) = (0, 0);
    let sizing = Sizing {
        cap: work.cap,
        largest: executor.largest_node_cpus().await,
    };
    for cells in batches(&work.cells, work.batch) {
        let (spec, sent) = place(
            executor,
            work,
            sizing,
            &journal,
            &coordinator,
            known.get(&cells),
            cells,
        )
        .await?;
        if sent {
            submitted += 1;
        } else {
            reattached += 1;
        }
        jobs.push(spec);
    }
    say(&format!(
        "{} in {} on the {} executor ({submitted} submitted, {reattached} found from an earlier run)\n",
        crate::report::plural(work.cells.len(), "cell"),
        crate::report::plural(jobs.len(), "job"),
        executor.name()
    ));
    wait(executor, &jobs, work.poll, say, signals).await?;
    let (bundles, missing) = collect(executor, &jobs).await;
    journal.append(&Event::Collected).map_err(Halt::Failed)?;
    Ok(Collected {
        bundles,
        missing,
        submitted,
        reattached,
    })
}

/// The coordination journal of `work`'s plan, its directories made.
fn open(work: &Work) -> Result<Journal, Halt> {
    let dir = work.state_dir.join("executor");
    fs::create_dir_all(&dir)
        .map_err(|e| Halt::Failed(format!("cannot create {}: {e}", dir.display())))?;
    fs::create_dir_all(&work.shared_dir).map_err(|e| {
        Halt::Failed(format!(
            "cannot create the shared_dir {}: {e}",
            work.shared_dir.display()
        ))
    })?;
    Ok(Journal {
        path: dir.join(format!("{}.jsonl", work.plan_hash)),
    })
}

/// One batch's job: found (whole, or still running) from an earlier
/// invocation, or submitted (journaled first). `true`: submitted now.
async fn place(
    executor: &dyn Executor,
    work: &Work,
    sizing: Sizing,
    journal: &Journal,
    coordinator: &str,
    known: Option<&(String, u32)>,
    cells: Vec<String>,
) -> Result<(JobSpec, bool), Halt> {
    let failed = |e: super::ExecError| Halt::Failed(e.to_string());
    let (id, attempt) = known
        .cloned()
        .unwrap_or_else(|| (submission_id(coordinator, &cells, 1), 1));
    let spec = job(work, sizing, &id, &cells);
    if complete(&spec).is_some() {
        return Ok((spec, false));
    }
    let state = if known.is_some() {
        executor.status(&spec).await.map_err(failed)?
    } else {
        JobState::Unknown
    };
    match state {
        JobState::Pending | JobState::Running => Ok((spec, false)),
        JobState::Succeeded | JobState::Failed(_) | JobState::Stopped => {
            // Over without all its cells: once more, as a new attempt.
            let id = submission_id(coordinator, &cells, attempt + 1);
            let spec = job(work, sizing, &id, &cells);
            journal
                .append(&Event::Submitted {
                    submission_id: id,
                    cells,
                    attempt: attempt + 1,
                })
                .map_err(Halt::Failed)?;
            executor.submit(&spec).await.map_err(failed)?;
            Ok((spec, true))
        }
        JobState::Unknown => {
            // Journaled before it is sent: a kill between the two leaves a
            // journaled id the executor never heard of, which is submitted
            // under that same id.
            if known.is_none() {
                journal
                    .append(&Event::Submitted {
                        submission_id: id,
                        cells,
                        attempt,
                    })
                    .map_err(Halt::Failed)?;
            }
            executor.submit(&spec).await.map_err(failed)?;
            Ok((spec, true))
        }
    }
}

/// Every job's bundle that came back, and the cells with no result.
async fn collect(
    executor: &dyn Executor,
    jobs: &[JobSpec],
) -> (Vec<Bundle>, Vec<(String, String)>) {
    let mut bundles = Vec::new();
    let mut missing = Vec::new();
    for spec in jobs {
        let state = executor
            .status(spec)
            .await
            .unwrap_or_else(|e| JobState::Failed(e.to_string()));
        let bundle = Bundle::read(&spec.bundle());
        let held: Vec<String> = bundle
            .as_ref()
            .map(|b| b.manifest.cells.iter().map(|c| c.id.clone()).collect())
            .unwrap_or_default();
        for cell in spec.cells.iter().filter(|c| !held.contains(c)) {
            let why = match (&state, &bundle) {
                (_, Err(e)) => format!("job {} left no usable bundle: {e}", spec.submission_id),
                (JobState::Failed(how), _) => format!("job {} failed: {how}", spec.submission_id),
                _ => format!("job {} did not play it", spec.submission_id),
            };
            missing.push((cell.clone(), why));
        }
        if let Ok(bundle) = bundle {
            bundles.push(bundle);
        }
    }
    (bundles, missing)
}

/// Ctrl-C and SIGTERM, watched for the coordination's whole length.
struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
}

impl Signals {
    fn watch() -> Result<Signals, Halt> {
        use tokio::signal::unix::{SignalKind, signal};
        let watch =
            |kind| signal(kind).map_err(|e| Halt::Failed(format!("cannot watch for signals: {e}")));
        Ok(Signals {
            interrupt: watch(SignalKind::interrupt())?,
            terminate: watch(SignalKind::terminate())?,
        })
    }
}

/// Waits until every job is over, showing what each prints; on Ctrl-C or
/// SIGTERM stops every job still running.
async fn wait(
    executor: &dyn Executor,
    jobs: &[JobSpec],
    poll: Duration,
    say: &(dyn Fn(&str) + Sync),
    mut signals: Signals,
) -> Result<(), Halt> {
    let mut shown: Vec<usize> = vec![0; jobs.len()];
    let mut over: Vec<bool> = vec![false; jobs.len()];
    loop {
        for (i, spec) in jobs.iter().enumerate() {
            if over[i] {
                continue;
            }
            if let Ok(log) = executor.logs(spec).await {
                let new = log.get(shown[i]..).unwrap_or_default();
                if let Some(end) = new.rfind('\n') {
                    for line in new[..=end].lines().filter(|l| is_event(l)) {
                        say(&format!("[job {}/{}] {line}\n", i + 1, jobs.len()));
                    }
                    shown[i] += end + 1;
                }
            }
            let state = executor
                .status(spec)
                .await
                .map_err(|e| Halt::Failed(e.to_string()))?;
            if state == JobState::Unknown {
                // Forgotten while it ran (a Ray head that restarted): its
                // cells, unless its bundle came back whole, go again under
                // the same id.
                if complete(spec).is_some() {
                    over[i] = true;
                } else {
                    say(&format!(
                        "[job {}/{}] {}: the executor no longer knows it; submitted again under the same id\n",
                        i + 1,
                        jobs.len(),
                        spec.submission_id
                    ));
                    executor
                        .submit(spec)
                        .await
                        .map_err(|e| Halt::Failed(e.to_string()))?;
                    shown[i] = 0;
                }
                continue;
            }
            if state.is_over() {
                over[i] = true;
                say(&format!(
                    "[job {}/{}] {}: {}\n",
                    i + 1,
                    jobs.len(),
                    spec.submission_id,
                    match &state {
                        JobState::Succeeded => "succeeded".to_owned(),
                        JobState::Failed(how) => format!("failed: {how}"),
                        _ => "stopped".to_owned(),
                    }
                ));
            }
        }
        if over.iter().all(|o| *o) {
            return Ok(());
        }
        tokio::select! {
            () = tokio::time::sleep(poll) => {}
            _ = signals.interrupt.recv() => return Err(stop_all(executor, jobs, &over).await),
            _ = signals.terminate.recv() => return Err(stop_all(executor, jobs, &over).await),
        }
    }
}

/// A job's log line worth passing on: one of gameplan's event lines
/// (`[   0.05s] play[kid,jev]: succeeded in 0.04s`), not the job's whole
/// summary (the run here prints the merged one) nor the executor's own
/// chatter.
fn is_event(line: &str) -> bool {
    line.starts_with('[') && line.contains("s] ")
}

async fn stop_all(executor: &dyn Executor, jobs: &[JobSpec], over: &[bool]) -> Halt {
    let mut stopped = 0;
    for (spec, _) in jobs.iter().zip(over).filter(|(_, o)| !**o) {
        if executor.cancel(spec).await.is_ok() {
            stopped += 1;
        }
    }
    Halt::Interrupted { stopped }
}

/// The directory under `shared_dir` for this plan's jobs.
pub fn jobs_dir(shared_dir: &Path, plan_hash: &str) -> PathBuf {
    shared_dir.join(format!("gameplan-{plan_hash}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_plays_its_pools_cells_at_once_within_its_cells_and_the_largest_node() {
        let sizing = |cap, largest| Sizing { cap, largest };
        // No pool: one CPU held, the node's gameplan plays as it likes.
        assert_eq!(sizing(None, Some(8)).of(8), None);
        assert_eq!(sizing(Some(2), None).of(8), Some(2));
        assert_eq!(sizing(Some(4), None).of(3), Some(3));
        // Never more than the largest node: the job would wait for ever.
        assert_eq!(sizing(Some(16), Some(2)).of(8), Some(2));
        assert_eq!(sizing(Some(0), Some(2)).of(8), Some(1));
    }

    #[test]
    fn llm_cells_go_alone_and_the_rest_in_batches_in_plan_order() {
        let cells: Vec<(String, bool)> = (0..7).map(|i| (format!("c{i}"), i == 2)).collect();
        assert_eq!(
            batches(&cells, 3),
            vec![
                vec!["c2".to_owned()],
                vec!["c0".into(), "c1".into(), "c3".into()],
                vec!["c4".into(), "c5".into(), "c6".into()],
            ]
        );
        assert_eq!(batches(&cells, 100).len(), 2);
    }

    #[test]
    fn a_submission_id_names_the_batch_and_the_attempt_in_safe_characters() {
        let cells = vec!["play[kid,jev,1]".to_owned()];
        let first = submission_id("abc", &cells, 1);
        assert_eq!(first, submission_id("abc", &cells, 1));
        assert_ne!(first, submission_id("abc", &cells, 2));
        assert_ne!(first, submission_id("abc", &["x".to_owned()], 1));
        assert!(
            first.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'),
            "{first}"
        );
    }
}

//! The engine: runs an expanded plan to completion, resumably.
//!
//! Owns the run's life cycle: the plan hash and the one-live-run lock,
//! starting or resuming a run from its journal, scheduling step instances on
//! tokio (a semaphore per pool, `--concurrency` for all), reuse through the
//! store, cancellation (signals, `plan stop`) and fail-fast, and the run's
//! outcome and exit code. Step kinds do the work (`steps/`); everything
//! printed goes through `report/`.
//!
//! # Design
//!
//! - **One owner of run state.** The dispatcher alone holds step states, the
//!   ready set and the journal's step transitions; step tasks report back by
//!   their join handles. A task appends to the journal (through the shared
//!   [`journal_writer::JournalWriter`]) only its own `step_started`, right
//!   before it runs, and its kind's checkpoints: a step is in the journal
//!   before it can have an effect.
//! - **Resume decides from the journal alone.** A finished step (succeeded,
//!   reused, failed, skipped, incomplete) is never replayed. A step that was
//!   running when gameplan died is first asked how it ended (its kind's
//!   [`crate::steps::Kind::left_running`]): a process it left behind may have
//!   finished it meanwhile. The history a resume acts on is read under the
//!   run lock, never before it.
//! - **The engine names no step kind.** It asks the registry
//!   ([`crate::steps::Kinds`]) for each step's kind and talks to it through
//!   the [`crate::steps::Kind`] trait; keys are made in one place
//!   ([`keys::KeyMaker`]) for the run and `plan explain` alike.
//! - **Cancel and abort are different.** Cancel (Ctrl-C, SIGTERM, `plan
//!   stop`) stops running steps, leaves pending ones pending for the resume,
//!   and exits 10. Abort (`--fail-fast` after a failure) stops the rest but
//!   the `always` steps (cleanup, `finish`), which still run, and exits 1.
//!   A halt (a declined price, a refusal, a refused token, an unreachable
//!   model) is neither: nothing new starts but the `always` steps whose
//!   needs are done, and the run stays open for a resume.
//!   The root causes are every failed step none of whose needs (directly
//!   or not) failed, in plan order, not whichever failed first: with
//!   independent branches, each failed branch is one.
//! - **The dispatcher hands out the permits** (`--concurrency`, pools) when
//!   it starts a step, so steps start in declared order and a finished
//!   step's slot is reused only after the dispatcher has seen how it ended
//!   (fail-fast starts nothing after a failure). The exception: a kind that
//!   queues ahead ([`crate::steps::Kind::queues_ahead`], the command kind's
//!   launcher) may be handed as many steps again as run at once, and starts
//!   a queued one the moment a slot frees; under `--fail-fast` nothing is
//!   queued ahead.
//! - **Results are stored only after success**, and a step is reported done
//!   only after its result is stored (or storing it failed, which is a
//!   warning: the step did succeed, it only runs again next time).

mod attempts;
#[cfg(test)]
mod crash_tests;
pub mod dispatcher;
pub mod journal_writer;
pub mod keys;
pub mod outcome;
pub mod preview;
pub mod schedule;
#[cfg(test)]
mod seam_tests;
pub mod signals;

pub use crate::report::run::{RunReport, StepReport};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::exit_code;
use crate::graph::Pipeline;
use crate::journal::run::{HistoryError, RunDir, RunHistory, Scanned, StepState, run_ids};
use crate::journal::{LockError, LockHolder, RunLock};
use crate::plan::LoadedPlan;
use crate::report::progress::Progress;
use crate::steps::{Confirm, Kinds};

/// What `plan run` was asked to do.
#[expect(
    clippy::struct_excessive_bools,
    reason = "one field per command-line flag, read in one place"
)]
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    pub no_reuse: bool,
    pub fail_fast: bool,
    /// Steps running at once (default: the machine's cores).
    pub concurrency: Option<usize>,
    /// `--var` overrides, recorded so a resume loads the same plan.
    pub vars: Vec<(String, String)>,
    /// `--yes`: answer yes to the price question.
    pub yes: bool,
    /// `--dry-upload`: list what would be uploaded, upload nothing.
    pub dry_upload: bool,
    /// `plan run PLAN STEP...`: the steps (and cells) this run is for, with
    /// what they need; empty for the whole plan. The request's pipeline is
    /// already this part; the journal records the names so a resume runs
    /// the same part.
    pub steps: Vec<String>,
    /// `--fail-on`: findings that fail the run; empty when not given (the
    /// plan's `fail_on` then judges).
    pub fail_on: Vec<crate::plan::model::FailOn>,
    /// Cells (instance ids) that must come from the store and are never
    /// played: `plan merge` imports the shards' cells and runs the rest,
    /// and a cell whose key here differs from the shard's fails instead of
    /// playing again.
    pub reuse_only: Vec<String>,
    /// `--shard K/N` and its bundle directory: not read by the engine,
    /// recorded so a resume of a shard writes its bundle too.
    pub shard: Option<String>,
    pub bundle: Option<String>,
    /// `--prepared DIR` of a shard: not read by the engine, recorded so a
    /// resume of the shard names the same prepared job in its bundle.
    pub prepared: Option<String>,
    /// `--durations FILE` of a shard (its digest): not read by the engine,
    /// recorded so a resume's bundle says how its slice was cut.
    pub partition: Option<String>,
    /// The `--shard prepare` run whose job this run was given with its
    /// records (a merge, an executor's run): not read by the engine,
    /// recorded so a later run knows that job was taken to its end.
    pub prepared_by: Option<String>,
    /// Steps whose outcome was decided before this run, elsewhere (the job
    /// `--shard prepare` bought, given to the shards and the merge): each
    /// is journaled as succeeded with its records when the run starts and
    /// never runs here. The steps below read the records as they read a
    /// step's of the same run.
    pub given: Vec<Given>,
    /// The price question covers every cell of the plan, not only those of
    /// this run's part (`--shard prepare` buys the job its shards play).
    pub prices_whole_plan: bool,
    /// `--baseline`: what an earlier run found, read before anything ran;
    /// recorded so a resume compares with the same findings.
    pub baseline: Option<crate::report::baseline::Baseline>,
}

/// A step decided elsewhere ([`RunOptions::given`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Given {
    /// The step's instance id.
    pub step: String,
    /// The records it left, each a checkpoint's data, oldest first.
    pub checkpoints: Vec<serde_json::Value>,
    /// What the run's report says of it.
    pub message: String,
}

impl RunOptions {
    /// Steps running at once: `--concurrency`, else the machine's cores.
    pub fn effective_concurrency(&self) -> usize {
        self.concurrency
            .unwrap_or_else(|| {
                std::thread::available_parallelism().map_or(2, std::num::NonZero::get)
            })
            .max(1)
    }
}

/// Where a run keeps its files: `.gameplan/` at the repo root unless `--state-dir`.
pub fn state_dir(root: &Path, flag: Option<&Path>) -> PathBuf {
    match flag {
        Some(dir) if dir.is_absolute() => dir.to_path_buf(),
        Some(dir) => {
            std::env::current_dir().map_or_else(|_| dir.to_path_buf(), |cwd| cwd.join(dir))
        }
        None => root.join(".gameplan"),
    }
}

/// The identity of a plan for locking and resuming: the sha256 of its
/// validated model (so comments and layout do not count, values do).
pub fn plan_hash(loaded: &LoadedPlan) -> String {
    let model = serde_json::to_vec(&loaded.plan).unwrap_or_default();
    crate::reuse::sha256_hex(&model)[..16].to_owned()
}

/// Why a run could not start (exit 3: nothing ran, nothing was charged).
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(
        "step `{step}` is of kind `{kind}`, which this gameplan cannot run yet (it runs: {built}). Nothing was run or charged; `gameplan plan explain` shows the plan without running it"
    )]
    KindNotBuilt {
        step: String,
        kind: String,
        built: String,
    },
    #[error("{0}")]
    Expand(#[from] crate::graph::ExpandError),
    #[error("{0}. Nothing was run or charged")]
    UnknownStep(#[from] crate::graph::UnknownStep),
    #[error(
        "another run of this plan is in progress{holder}; only one run per plan at a time. Nothing was run or charged; wait for it, or stop it with `gameplan plan stop RUN_ID`"
    )]
    Locked { holder: String },
    #[error("{0}")]
    Lock(String),
    #[error(
        "run {run_id} of this plan is unfinished ({done} of {} done). Nothing was run or charged; pass --resume to continue it, or --new to start over",
        crate::report::plural(*total, "step")
    )]
    ResumeChoiceNeeded {
        run_id: String,
        done: usize,
        total: usize,
    },
    #[error(
        "run {run_id} may be an unfinished run of this plan, but its journal cannot be read: {error}\nA damaged run is neither resumed (what it journaled cannot be trusted) nor silently replaced (it may hold a finished step or the idempotency key of a charge). Nothing was run or charged. Read it first (`gameplan plan status {run_id}`, or the journal in {dir}); then `gameplan plan run PLAN --new` sets it aside and starts a fresh run, or move {dir} out of the state directory"
    )]
    DamagedRun {
        run_id: String,
        dir: String,
        error: String,
    },
    #[error(
        "run {run_id} of this plan is unfinished, and its step `{step}` sent a request (idempotency key {key}) whose answer never came: it may have been charged. A new run would buy again under a new key, so nothing was run or charged. Run `gameplan plan resume {run_id}` to finish it (the request goes again under the same key: nothing is charged twice), or pass `--new --abandon-unsettled` to start over anyway"
    )]
    Unsettled {
        run_id: String,
        step: String,
        key: String,
    },
    #[error("{0}")]
    Journal(String),
    /// A resume given another `--baseline` than the run started with.
    #[error(
        "run {run_id} was started with --baseline {started} and this resume names --baseline {given}, which holds other findings; one run compares with one baseline. Nothing was run or charged; resume without --baseline (or with the same one), or start a new run with `--new`"
    )]
    OtherBaseline {
        run_id: String,
        started: String,
        given: String,
    },
    /// The plan's backend cannot be reached or opened before anything ran.
    #[error(
        "the plan's `{kind}` backend cannot be used: {message}. Nothing was run or charged; check `[backend]` in the plan"
    )]
    Backend { kind: String, message: String },
}

impl StartError {
    /// A run that could not start, as the command's failure: found before
    /// anything ran or was charged (exit 3).
    pub fn failure(&self) -> exit_code::Failure {
        exit_code::Failure::plan(format!("error: {self}\n"))
    }
}

/// How to start: a fresh run (with its new id), or continuing an unfinished
/// one (whose journal is read again under the lock).
pub enum Start {
    New(String),
    Resume(String),
}

impl Start {
    pub fn run_id(&self) -> &str {
        match self {
            Start::New(id) | Start::Resume(id) => id,
        }
    }
}

/// The newest unfinished run of `plan_hash`, if any.
///
/// A damaged journal that may be this plan's (its header says so, or is
/// itself unreadable) is an error, never skipped: the run may be unfinished,
/// with a journaled idempotency key a fresh run would not replay (issue 8,
/// item 12). A run set aside after such an error, and a journal that never
/// got its first record, are passed over.
pub fn find_unfinished(
    state_dir: &Path,
    plan_hash: &str,
) -> Result<Option<RunHistory>, StartError> {
    for id in run_ids(state_dir).into_iter().rev() {
        let dir = RunDir::new(state_dir, &id);
        if dir.summary().exists() || dir.set_aside().exists() {
            continue;
        }
        match Scanned::of(&dir) {
            Scanned::Run(history) => {
                if history.plan_hash == plan_hash && !history.is_finished() {
                    return Ok(Some(*history));
                }
            }
            Scanned::NeverStarted => {}
            Scanned::Damaged {
                plan_hash: Some(other),
                ..
            } if other != plan_hash => {}
            Scanned::Damaged { error, .. } => return Err(damaged_run(&dir, &id, &error)),
        }
    }
    Ok(None)
}

/// The refusal for a run whose journal cannot be read.
pub fn damaged_run(dir: &RunDir, run_id: &str, error: &HistoryError) -> StartError {
    StartError::DamagedRun {
        run_id: run_id.to_owned(),
        dir: dir.dir.display().to_string(),
        error: error.to_string(),
    }
}

/// Marks a damaged run as set aside (`plan run --new` after the refusal):
/// it stays on disk to be read, and is no longer a run to resume.
pub fn set_aside(state_dir: &Path, run_id: &str, by: &str) -> Result<(), StartError> {
    let dir = RunDir::new(state_dir, run_id);
    let note = format!(
        "set aside by `plan run --new` at {} (new run {by}): its journal could not be read, so it was neither resumed nor replaced\n",
        now()
    );
    crate::journal::atomic_write(&dir.set_aside(), note.as_bytes()).map_err(|e| {
        StartError::Journal(format!(
            "cannot set the damaged run {run_id} aside: {e}. Nothing was run or charged; move {} out of the state directory yourself",
            dir.dir.display()
        ))
    })
}

/// The attempts other unfinished runs of the plan named `plan` left
/// running, as `(run id, step id, attempt)`: a gameplan that died may have
/// left their processes alive, and no new attempt of a step may start
/// beside one (`--new` included), or both write its outputs at once.
pub fn left_running_elsewhere(
    state_dir: &Path,
    plan: &str,
    this_run: &str,
) -> Vec<(String, String, u32)> {
    let mut found = Vec::new();
    for id in run_ids(state_dir) {
        let dir = RunDir::new(state_dir, &id);
        if id == this_run || dir.summary().exists() {
            continue;
        }
        let Ok(history) = RunHistory::read(&dir.journal()) else {
            continue;
        };
        if history.plan != plan || history.is_finished() {
            continue;
        }
        // A live run (of another version of the plan) watches its own
        // steps: only a dead gameplan's are left running.
        if RunLock::holder(&state_dir.join("locks"), &history.plan_hash)
            .is_some_and(|h| h.run_id == history.run_id)
        {
            continue;
        }
        for (step, record) in &history.records {
            if record.state == Some(StepState::Running) {
                found.push((id.clone(), step.clone(), record.attempt));
            }
        }
    }
    found
}

/// The refusal of `plan run --new` beside `history`, an unfinished run
/// with a journaled idempotency key of a step that did not finish: its
/// request may have been served (a charge) without the answer reaching
/// gameplan, and only that run's resume sends it again under the same key.
/// A new run would make a new key, so a second purchase; it needs
/// `--abandon-unsettled` to say the person knows.
pub fn unsettled_refusal(history: &RunHistory) -> Option<StartError> {
    let (step, key) = unsettled_key(history)?;
    Some(StartError::Unsettled {
        run_id: history.run_id.clone(),
        step,
        key,
    })
}

/// The first step (by id) of `history` whose journaled request never
/// settled: the step holds an idempotency key and is not finished.
pub fn unsettled_key(history: &RunHistory) -> Option<(String, String)> {
    history.checkpoints.iter().find_map(|(step, checkpoints)| {
        let finished = history
            .records
            .get(step)
            .and_then(|r| r.state)
            .is_some_and(StepState::is_final);
        if finished {
            return None;
        }
        checkpoints
            .iter()
            .find_map(|c| crate::steps::journaled_key(&c.data))
            .map(|key| (step.clone(), key.to_owned()))
    })
}

/// Counts finished steps of a history, for messages.
pub fn progress_of(history: &RunHistory) -> (usize, usize) {
    let done = history
        .records
        .values()
        .filter(|r| r.state.is_some_and(StepState::is_final))
        .count();
    (done, history.steps.len())
}

/// Checks that every step kind of the pipeline can run here.
pub fn check_runnable(pipeline: &Pipeline, kinds: &Kinds) -> Result<(), StartError> {
    for &index in &pipeline.order {
        let instance = pipeline.instance(index);
        if kinds.get(instance.kind).is_none() {
            let built: Vec<&str> = kinds.built().iter().map(|k| k.name()).collect();
            return Err(StartError::KindNotBuilt {
                step: instance.id.clone(),
                kind: instance.kind.name().to_owned(),
                built: built.join(", "),
            });
        }
    }
    Ok(())
}

/// This process as the holder of a run lock.
pub fn holder(run_id: &str) -> LockHolder {
    LockHolder {
        pid: std::process::id(),
        host: nix::unistd::gethostname()
            .ok()
            .and_then(|h| h.into_string().ok())
            .unwrap_or_default(),
        started_at: now(),
        run_id: run_id.to_owned(),
    }
}

/// Takes the plan's run lock, naming the holder when it is taken.
pub fn lock(state_dir: &Path, plan_hash: &str, run_id: &str) -> Result<RunLock, StartError> {
    crate::state_dir::prepare(state_dir).map_err(|e| {
        StartError::Lock(format!(
            "cannot create the state directory {}: {e}. Nothing was run or charged",
            state_dir.display()
        ))
    })?;
    RunLock::acquire(&state_dir.join("locks"), plan_hash, &holder(run_id)).map_err(|e| match e {
        LockError::Held { holder, .. } => StartError::Locked {
            holder: holder.map_or_else(String::new, |h| {
                format!(
                    " (run {}, pid {} on {}, started {})",
                    h.run_id, h.pid, h.host, h.started_at
                )
            }),
        },
        other => StartError::Lock(other.to_string()),
    })
}

pub fn now() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

/// A new run id: UTC start time to the millisecond (so ids sort by age) and
/// a random suffix (so two runs in the same millisecond differ).
pub fn new_run_id() -> String {
    let now = std::time::SystemTime::now();
    let stamp = humantime::format_rfc3339_millis(now).to_string();
    let digits: String = stamp.chars().filter(char::is_ascii_digit).collect();
    let nanos = now
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let seed = format!("{nanos}-{}", std::process::id());
    let suffix = &crate::reuse::sha256_hex(seed.as_bytes())[..4];
    // 20261202-124256-123-cc19
    match (digits.get(..8), digits.get(8..14), digits.get(14..17)) {
        (Some(day), Some(time), Some(millis)) => format!("{day}-{time}-{millis}-{suffix}"),
        _ => format!("{digits}-{suffix}"),
    }
}

/// Everything a run needs, gathered by the CLI.
pub struct RunRequest {
    pub loaded: LoadedPlan,
    pub pipeline: Pipeline,
    pub plan_hash: String,
    pub state_dir: PathBuf,
    pub options: RunOptions,
    pub env: Arc<BTreeMap<String, String>>,
    pub start: Start,
    /// The command that resumes this run, for the interrupt message.
    pub resume_hint: String,
    /// The step kinds this run uses.
    pub kinds: Arc<Kinds>,
    /// Asks the person at the terminal (the price question).
    pub confirm: Arc<dyn Confirm>,
}

/// Runs the plan; returns the report (whose exit code CI acts on).
pub fn run(
    request: RunRequest,
    progress: &Progress,
    lock: RunLock,
) -> Result<RunReport, StartError> {
    // One thread: the engine's own work per step is small, and wake-ups that
    // cross threads cost more than they save (measured on W1: see bench/).
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| StartError::Journal(format!("cannot start the scheduler: {e}")))?;
    let report = runtime.block_on(dispatcher::run(request, progress));
    drop(lock);
    report
}

#[cfg(test)]
mod tests {
    #[test]
    fn run_ids_sort_by_start_time() {
        let first = super::new_run_id();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let second = super::new_run_id();
        assert!(first < second, "{first} !< {second}");
        assert_eq!(first.len(), "20261202-124256-123-cc19".len());
    }
}

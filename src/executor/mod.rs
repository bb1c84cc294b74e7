//! Cells played elsewhere: the executor seam, and the executors behind it.
//!
//! An executor runs *jobs*: each a batch of a plan's cells, played on some
//! node by gameplan itself (`gameplan plan run PLAN CELL... --bundle DIR`)
//! into a bundle under a directory the node and this machine share. The
//! seam is five verbs (submit, status, logs, cancel, and the bundle's path);
//! [`local`] runs jobs as gameplan processes on this machine, [`ray`] as
//! jobs on a Ray cluster (docs/shards.md › Cells as jobs: `[executor]`);
//! Kubernetes Indexed Jobs and Slurm would be the next ones.
//! [`coordinator`] owns what does not depend on where: cutting the cells
//! into batches, naming each job (its submission id, journaled before it is submitted, so a
//! killed gameplan re-attaches instead of submitting again), waiting,
//! showing logs, and stopping every job on Ctrl-C. A job's cells join the
//! run through their bundle, exactly as a shard's do (`shard`): verified,
//! then reused, never played here.

pub mod coordinator;
pub mod local;
pub mod ray;

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::steps::BoxFuture;

/// One job: a batch of cells and how a node plays them.
#[derive(Debug, Clone, PartialEq)]
pub struct JobSpec {
    /// Unique per (run, batch, attempt); journaled before submission.
    pub submission_id: String,
    /// The cells' ids, in the plan's order.
    pub cells: Vec<String>,
    /// The command the node runs (gameplan itself), and where.
    pub argv: Vec<String>,
    pub cwd: PathBuf,
    /// Environment the command needs besides the node's own.
    pub env: BTreeMap<String, String>,
    /// Where the node leaves the job's bundle, log and state.
    pub dir: PathBuf,
    /// CPUs the job holds on its node.
    pub num_cpus: f64,
}

impl JobSpec {
    /// The job's bundle: the cells it played.
    pub fn bundle(&self) -> PathBuf {
        self.dir.join("bundle")
    }
}

/// Where a job is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobState {
    Pending,
    Running,
    /// Ended with exit 0.
    Succeeded,
    /// Ended otherwise (the message says how); its bundle may still hold
    /// the cells it played.
    Failed(String),
    /// Stopped by [`Executor::cancel`].
    Stopped,
    /// The executor does not know it (never submitted, or forgotten: a
    /// restarted Ray head forgets its jobs).
    Unknown,
}

impl JobState {
    /// Whether the job will not change any more.
    pub fn is_over(&self) -> bool {
        matches!(
            self,
            JobState::Succeeded | JobState::Failed(_) | JobState::Stopped
        )
    }
}

/// An executor that could not be reached or refused a request.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ExecError(pub String);

/// The seam: what the coordinator asks of any place that runs jobs.
pub trait Executor: Send + Sync {
    /// The executor's name in a plan (`[executor] kind`).
    fn name(&self) -> &'static str;
    /// Starts the job. A job already known under its submission id is left
    /// as it is, and `Ok` (a resubmission after a lost answer is safe).
    fn submit<'a>(&'a self, job: &'a JobSpec) -> BoxFuture<'a, Result<(), ExecError>>;
    fn status<'a>(&'a self, job: &'a JobSpec) -> BoxFuture<'a, Result<JobState, ExecError>>;
    /// Everything the job printed so far.
    fn logs<'a>(&'a self, job: &'a JobSpec) -> BoxFuture<'a, Result<String, ExecError>>;
    /// Stops the job (and every process it started); a job already over is
    /// left as it is.
    fn cancel<'a>(&'a self, job: &'a JobSpec) -> BoxFuture<'a, Result<(), ExecError>>;
    /// The most CPUs one job can hold (the largest node's), when the
    /// executor places jobs by the CPUs they hold; `None` when it does not
    /// (every local job runs at once).
    fn largest_node_cpus(&self) -> BoxFuture<'_, Option<u32>> {
        Box::pin(async { None })
    }
}

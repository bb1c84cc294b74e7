//! The `ray` executor: each job a Ray job, through the Ray Jobs REST API
//! (`crate::ray`): the job's submission id is the coordinator's, its
//! entrypoint is gameplan itself playing the batch into the shared
//! directory, and it holds `num_cpus` of its node.
//!
//! What Ray says maps onto the seam one to one; the cases that matter for a
//! resume: a submit of an id Ray already holds is the job existing (`Ok`),
//! and an id Ray does not know (404: a restarted head forgets its jobs) is
//! [`JobState::Unknown`], which the coordinator submits again under the
//! same id. The nodes need gameplan and the repo at the paths this machine
//! has them (one machine, or a shared checkout), and `shared_dir` mounted
//! at the same path.

use std::fmt::Write as _;

use super::{ExecError, Executor, JobSpec, JobState};
use crate::ray::{JobStatus, JobsClient, RayError, SubmissionId, SubmitRequest};
use crate::steps::BoxFuture;

/// Runs jobs on a Ray cluster.
pub struct Ray {
    client: JobsClient,
}

impl Ray {
    /// The cluster whose dashboard is at `address`.
    pub fn new(address: &str) -> Result<Ray, ExecError> {
        JobsClient::new(address)
            .map(|client| Ray { client })
            .map_err(|e| ExecError(e.to_string()))
    }
}

fn id(job: &JobSpec) -> Result<SubmissionId, ExecError> {
    SubmissionId::new(job.submission_id.clone()).map_err(ExecError)
}

/// `'…'` around a word for `sh`, a `'` inside written `'\''`.
fn quoted(word: &str) -> String {
    format!("'{}'", word.replace('\'', "'\\''"))
}

/// The shell line a node runs: into the repo, then gameplan.
pub fn entrypoint(job: &JobSpec) -> String {
    let mut line = format!("cd {} && exec", quoted(&job.cwd.display().to_string()));
    for word in &job.argv {
        let _ = write!(line, " {}", quoted(word));
    }
    line
}

impl Executor for Ray {
    fn name(&self) -> &'static str {
        "ray"
    }

    fn submit<'a>(&'a self, job: &'a JobSpec) -> BoxFuture<'a, Result<(), ExecError>> {
        Box::pin(async move {
            let mut request = SubmitRequest::new(id(job)?, entrypoint(job));
            request.entrypoint_num_cpus = Some(job.num_cpus);
            request.runtime_env.env_vars.clone_from(&job.env);
            request
                .metadata
                .insert("gameplan_cells".to_owned(), job.cells.len().to_string());
            match self.client.submit(&request).await {
                Ok(()) | Err(RayError::AlreadyExists { .. }) => Ok(()),
                Err(e) => Err(ExecError(e.to_string())),
            }
        })
    }

    fn largest_node_cpus(&self) -> BoxFuture<'_, Option<u32>> {
        Box::pin(async move {
            // Not known (an older Ray, no state API): a job holds one CPU,
            // which every node has.
            let cpus = self.client.node_cpus().await.ok()?;
            let largest = cpus.into_iter().fold(0.0_f64, f64::max);
            #[expect(
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss,
                reason = "a node's CPU count, whole and small"
            )]
            Some((largest.floor() as u32).max(1))
        })
    }

    fn status<'a>(&'a self, job: &'a JobSpec) -> BoxFuture<'a, Result<JobState, ExecError>> {
        Box::pin(async move {
            match self.client.status(&id(job)?).await {
                Ok(details) => Ok(match details.status {
                    JobStatus::Pending => JobState::Pending,
                    JobStatus::Running => JobState::Running,
                    JobStatus::Succeeded => JobState::Succeeded,
                    JobStatus::Stopped => JobState::Stopped,
                    JobStatus::Failed => JobState::Failed(
                        details
                            .message
                            .unwrap_or_else(|| "Ray says it failed".to_owned()),
                    ),
                }),
                Err(RayError::NotFound { .. }) => Ok(JobState::Unknown),
                Err(e) => Err(ExecError(e.to_string())),
            }
        })
    }

    fn logs<'a>(&'a self, job: &'a JobSpec) -> BoxFuture<'a, Result<String, ExecError>> {
        Box::pin(async move {
            match self.client.logs(&id(job)?).await {
                Ok(text) => Ok(text),
                Err(RayError::NotFound { .. }) => Ok(String::new()),
                Err(e) => Err(ExecError(e.to_string())),
            }
        })
    }

    fn cancel<'a>(&'a self, job: &'a JobSpec) -> BoxFuture<'a, Result<(), ExecError>> {
        Box::pin(async move {
            match self.client.stop(&id(job)?).await {
                Ok(_) | Err(RayError::NotFound { .. }) => Ok(()),
                Err(e) => Err(ExecError(e.to_string())),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_entrypoint_quotes_every_word_for_the_shell() {
        let job = JobSpec {
            submission_id: "gameplan-a-b-1".into(),
            cells: vec!["play[kid,jev]".into()],
            argv: vec!["/opt/gameplan".into(), "plan".into(), "it's".into()],
            cwd: "/repo dir".into(),
            env: std::collections::BTreeMap::new(),
            dir: "/shared/x".into(),
            num_cpus: 1.0,
        };
        assert_eq!(
            entrypoint(&job),
            "cd '/repo dir' && exec '/opt/gameplan' 'plan' 'it'\\''s'"
        );
    }
}

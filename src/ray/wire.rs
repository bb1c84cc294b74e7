//! The Ray Jobs REST API's bodies as Ray 2.60 sends and takes them
//! (`ray/dashboard/modules/job/common.py`, `pydantic_models.py`), and the
//! submission id gameplan gives a job.
//!
//! Answers are read leniently (fields gameplan does not use are ignored,
//! absent optional ones are `None`): the server is not ours, and a field a
//! later Ray adds must not fail a run. A status outside the five Ray has
//! had since 2.0 does fail to parse: guessing whether it is terminal could
//! stop a live job or wait forever for a dead one.

use std::collections::BTreeMap;
use std::fmt::{self, Write as _};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The longest submission id gameplan sends. Ray sets no bound, but the id
/// names files (`job-driver-<id>.log`) and an actor on every node.
pub const MAX_SUBMISSION_ID: usize = 128;

/// A job's submission id: what the client names the job by, chosen before
/// it is submitted so it can be journaled first. Only `[A-Za-z0-9._-]`, at
/// most [`MAX_SUBMISSION_ID`] bytes, not starting with `.`: Ray puts the
/// id into file names and URL paths unchecked.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct SubmissionId(String);

impl SubmissionId {
    /// `id` as it is, or why Ray should not be given it.
    pub fn new(id: impl Into<String>) -> Result<SubmissionId, String> {
        let id = id.into();
        if id.is_empty() || id.len() > MAX_SUBMISSION_ID {
            return Err(format!(
                "a submission id has 1 to {MAX_SUBMISSION_ID} characters, not {}",
                id.len()
            ));
        }
        if let Some(c) = id
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
        {
            return Err(format!(
                "a submission id holds only A-Z a-z 0-9 . _ -, not {c:?} (in {id:?})"
            ));
        }
        if id.starts_with('.') {
            return Err(format!("a submission id does not start with `.` ({id:?})"));
        }
        Ok(SubmissionId(id))
    }

    /// The id of one attempt at one cell of one run: the same inputs give
    /// the same id, so a resumed run finds the job its journal names.
    /// Readable where it can be (`gp-<run>-<cell>-a<attempt>`, other
    /// characters as `_`), and unique through a hash of the exact run id
    /// and cell key, since that cleaning can make two keys alike.
    pub fn for_cell(run_id: &str, cell_key: &str, attempt: u32) -> SubmissionId {
        let digest = Sha256::new()
            .chain_update(run_id.as_bytes())
            .chain_update([0])
            .chain_update(cell_key.as_bytes())
            .finalize();
        let hash = digest[..6].iter().fold(String::new(), |mut hex, b| {
            let _ = write!(hex, "{b:02x}");
            hex
        });
        let clean = |text: &str, max: usize| -> String {
            text.chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || matches!(c, '.' | '-') {
                        c
                    } else {
                        '_'
                    }
                })
                .take(max)
                .collect()
        };
        // 3 + 40 + 1 + 56 + 1 + 12 + 2 + 10 (u32) = 125 bytes at most.
        SubmissionId(format!(
            "gp-{}-{}-{hash}-a{attempt}",
            clean(run_id, 40),
            clean(cell_key, 56)
        ))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for SubmissionId {
    type Error = String;
    fn try_from(id: String) -> Result<Self, String> {
        SubmissionId::new(id)
    }
}

impl From<SubmissionId> for String {
    fn from(id: SubmissionId) -> String {
        id.0
    }
}

impl fmt::Display for SubmissionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What `POST /api/jobs/` takes: a shell command and where it may run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SubmitRequest {
    pub submission_id: SubmissionId,
    /// Run by `/bin/sh -c` on the node Ray picks, in the directory its
    /// raylet was started from.
    pub entrypoint: String,
    /// CPUs the command holds while it runs (Ray's default is 0: the
    /// command would not count against the node at all).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entrypoint_num_cpus: Option<f64>,
    /// Custom resources it holds, e.g. `{"node_b": 1}` to pin it to a node
    /// that offers `node_b`.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub entrypoint_resources: BTreeMap<String, f64>,
    /// `{"env_vars": {…}}`; only environment variables: a `pip` or
    /// `working_dir` would have Ray fetch things on the node.
    #[serde(skip_serializing_if = "RuntimeEnv::is_empty")]
    pub runtime_env: RuntimeEnv,
    /// Labels shown with the job (`GET` gives them back); Ray adds
    /// `job_submission_id` and `job_name`.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
}

impl SubmitRequest {
    /// A request for `entrypoint` with nothing reserved and nothing set.
    pub fn new(submission_id: SubmissionId, entrypoint: impl Into<String>) -> SubmitRequest {
        SubmitRequest {
            submission_id,
            entrypoint: entrypoint.into(),
            entrypoint_num_cpus: None,
            entrypoint_resources: BTreeMap::new(),
            runtime_env: RuntimeEnv::default(),
            metadata: BTreeMap::new(),
        }
    }
}

/// The part of Ray's `runtime_env` gameplan uses.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuntimeEnv {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env_vars: BTreeMap<String, String>,
}

impl RuntimeEnv {
    pub fn is_empty(&self) -> bool {
        self.env_vars.is_empty()
    }
}

/// A job's state. Ray's own words, in capitals on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum JobStatus {
    /// Accepted; waiting for its resources or its runtime env.
    Pending,
    Running,
    /// Ended by a stop request.
    Stopped,
    /// The entrypoint exited 0.
    Succeeded,
    /// The entrypoint exited non-zero, or the job could not start (its
    /// supervisor died, its runtime env failed).
    Failed,
}

impl JobStatus {
    /// Whether the job has ended and will not change again.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            JobStatus::Stopped | JobStatus::Succeeded | JobStatus::Failed
        )
    }
}

impl fmt::Display for JobStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            JobStatus::Pending => "PENDING",
            JobStatus::Running => "RUNNING",
            JobStatus::Stopped => "STOPPED",
            JobStatus::Succeeded => "SUCCEEDED",
            JobStatus::Failed => "FAILED",
        })
    }
}

/// Who started a job: the Jobs API, or a script that called `ray.init()`
/// itself (those have no submission id and cannot be stopped here).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum JobType {
    Submission,
    Driver,
}

/// What `GET /api/jobs/{id}` says of a job (and each entry of the list).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct JobDetails {
    #[serde(rename = "type")]
    pub job_type: JobType,
    /// `None` for a driver job, which has only a Ray job id.
    pub submission_id: Option<String>,
    /// Ray's own job id (`02000000`), set once the driver runs.
    #[serde(default)]
    pub job_id: Option<String>,
    pub status: JobStatus,
    #[serde(default)]
    pub entrypoint: String,
    /// Ray's words for the status ("Job finished successfully.", the last
    /// lines of a failed job's output).
    #[serde(default)]
    pub message: Option<String>,
    /// Why it failed, in Ray's vocabulary (`SUPERVISOR_ACTOR_START_FAILURE`, …).
    #[serde(default)]
    pub error_type: Option<String>,
    /// Milliseconds since the epoch; 0 or absent before it started.
    #[serde(default)]
    pub start_time: Option<u64>,
    #[serde(default)]
    pub end_time: Option<u64>,
    #[serde(default)]
    pub metadata: Option<BTreeMap<String, String>>,
    /// The node whose raylet ran the entrypoint.
    #[serde(default)]
    pub driver_node_id: Option<String>,
    #[serde(default)]
    pub driver_exit_code: Option<i32>,
}

/// `POST /api/jobs/`'s answer.
#[derive(Debug, Deserialize)]
pub(super) struct Submitted {
    pub submission_id: String,
}

/// `POST /api/jobs/{id}/stop`'s answer.
#[derive(Debug, Deserialize)]
pub(super) struct Stopped {
    pub stopped: bool,
}

/// `DELETE /api/jobs/{id}`'s answer.
#[derive(Debug, Deserialize)]
pub(super) struct Deleted {
    pub deleted: bool,
}

/// `GET /api/jobs/{id}/logs`'s answer: the whole log so far.
#[derive(Debug, Deserialize)]
pub(super) struct Logs {
    pub logs: String,
}

/// `GET /api/v0/nodes`'s answer (the state API): `{data: {result:
/// {result: [node…]}}}`.
#[derive(Debug, Deserialize)]
pub(super) struct Nodes {
    pub data: NodesData,
}

#[derive(Debug, Deserialize)]
pub(super) struct NodesData {
    pub result: NodesResult,
}

#[derive(Debug, Deserialize)]
pub(super) struct NodesResult {
    pub result: Vec<Node>,
}

/// One node as the state API lists it; only what gameplan reads.
#[derive(Debug, Deserialize)]
pub(super) struct Node {
    #[serde(default)]
    pub state: String,
    #[serde(default)]
    pub resources_total: BTreeMap<String, f64>,
}

/// `GET /api/version`'s answer.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Version {
    /// The Jobs API's own version ("4" in Ray 2.60).
    pub version: String,
    pub ray_version: String,
    /// Names the cluster's life: a restarted head has a new one.
    pub session_name: String,
}

/// Whether a refused submit says the id is taken. Ray 2.60 answers a
/// duplicate submission id with a 500 whose text/plain body is a Python
/// traceback ending in `ValueError: Job with submission_id <id> already
/// exists. Please use a different submission_id.` (the head relays the
/// agent's 400 as a `RuntimeError`); the agent's own 400 says the same.
pub(super) fn says_already_exists(status: u16, body: &str) -> bool {
    matches!(status, 400 | 500) && body.contains("already exists")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_as_ray_2_60_describes_it_parses() {
        let body = r#"{"type": "SUBMISSION", "job_id": "03000000", "submission_id": "t-1", "driver_info": {"id": "03000000", "node_ip_address": "127.0.0.3", "pid": "4242"}, "status": "SUCCEEDED", "entrypoint": "echo hello", "message": "Job finished successfully.", "error_type": null, "start_time": 1796472921567, "end_time": 1796472922906, "metadata": {"k": "v"}, "runtime_env": {"env_vars": {"FOO": "bar"}}, "driver_agent_http_address": "http://127.0.0.3:52366", "driver_node_id": "c388a2f1ab5197f7eb34a3f087282630acd09d09a05d62ad181bb17b", "driver_exit_code": 0}"#;
        let job: JobDetails = serde_json::from_str(body).expect("parses");
        assert_eq!(job.job_type, JobType::Submission);
        assert_eq!(job.submission_id.as_deref(), Some("t-1"));
        assert_eq!(job.status, JobStatus::Succeeded);
        assert_eq!(job.end_time, Some(1_796_472_922_906));
        assert_eq!(job.driver_exit_code, Some(0));
        assert_eq!(
            job.metadata.unwrap().get("k").map(String::as_str),
            Some("v")
        );
        assert_eq!(
            job.driver_node_id.as_deref(),
            Some("c388a2f1ab5197f7eb34a3f087282630acd09d09a05d62ad181bb17b")
        );
    }

    #[test]
    fn a_pending_job_with_nulls_and_a_driver_job_parse() {
        let pending = r#"{"type": "SUBMISSION", "job_id": null, "submission_id": "x", "driver_info": null, "status": "PENDING", "entrypoint": "true", "message": "Job has not started yet.", "error_type": null, "start_time": 1, "end_time": null, "metadata": {}, "runtime_env": {}, "driver_agent_http_address": null, "driver_node_id": null, "driver_exit_code": null}"#;
        let job: JobDetails = serde_json::from_str(pending).expect("parses");
        assert_eq!(job.status, JobStatus::Pending);
        assert_eq!(job.end_time, None);
        assert_eq!(job.driver_node_id, None);
        let driver = r#"{"type": "DRIVER", "job_id": "01000000", "submission_id": null, "status": "RUNNING", "entrypoint": "python x.py", "a_field_ray_added_later": [1, 2]}"#;
        let job: JobDetails = serde_json::from_str(driver).expect("parses");
        assert_eq!(job.job_type, JobType::Driver);
        assert_eq!(job.submission_id, None);
    }

    #[test]
    fn only_stopped_succeeded_and_failed_are_terminal() {
        for (word, terminal) in [
            ("PENDING", false),
            ("RUNNING", false),
            ("STOPPED", true),
            ("SUCCEEDED", true),
            ("FAILED", true),
        ] {
            let status: JobStatus = serde_json::from_str(&format!("\"{word}\"")).expect(word);
            assert_eq!(status.is_terminal(), terminal, "{word}");
            assert_eq!(status.to_string(), word);
        }
    }

    #[test]
    fn a_status_ray_never_had_is_an_error_not_a_guess() {
        assert!(serde_json::from_str::<JobStatus>("\"PAUSED\"").is_err());
        assert!(serde_json::from_str::<JobStatus>("\"succeeded\"").is_err());
    }

    #[test]
    fn a_request_sends_only_what_is_set() {
        let id = SubmissionId::new("gp-1").unwrap();
        let bare = serde_json::to_value(SubmitRequest::new(id.clone(), "true")).unwrap();
        assert_eq!(
            bare,
            serde_json::json!({"submission_id": "gp-1", "entrypoint": "true"})
        );
        let mut full = SubmitRequest::new(id, "gameplan cell run");
        full.entrypoint_num_cpus = Some(1.0);
        full.entrypoint_resources.insert("node_b".into(), 1.0);
        full.runtime_env
            .env_vars
            .insert("GAMEPLAN_CELL".into(), "play[a,b]".into());
        full.metadata.insert("run".into(), "r1".into());
        assert_eq!(
            serde_json::to_value(full).unwrap(),
            serde_json::json!({
                "submission_id": "gp-1",
                "entrypoint": "gameplan cell run",
                "entrypoint_num_cpus": 1.0,
                "entrypoint_resources": {"node_b": 1.0},
                "runtime_env": {"env_vars": {"GAMEPLAN_CELL": "play[a,b]"}},
                "metadata": {"run": "r1"}
            })
        );
    }

    #[test]
    fn the_answers_to_submit_stop_delete_logs_and_version_parse() {
        let s: Submitted =
            serde_json::from_str(r#"{"job_id": "t-1", "submission_id": "t-1"}"#).unwrap();
        assert_eq!(s.submission_id, "t-1");
        assert!(
            serde_json::from_str::<Stopped>(r#"{"stopped": true}"#)
                .unwrap()
                .stopped
        );
        assert!(
            !serde_json::from_str::<Deleted>(r#"{"deleted": false}"#)
                .unwrap()
                .deleted
        );
        let logs: Logs = serde_json::from_str(r#"{"logs": "a\nb\n"}"#).unwrap();
        assert_eq!(logs.logs, "a\nb\n");
        let v: Version = serde_json::from_str(r#"{"version": "4", "ray_version": "2.60.0", "ray_commit": "b7f4", "session_name": "session_2026-12-05_12-15-03_247943_32461"}"#).unwrap();
        assert_eq!(v.ray_version, "2.60.0");
    }

    #[test]
    fn the_duplicate_id_answer_of_ray_2_60_reads_as_already_exists() {
        let body = "Traceback (most recent call last):\n  File \".../job_head.py\", line 419, in submit_job\n    resp = await job_agent_client.submit_job_internal(submit_request)\nRuntimeError: Request failed with status code 400: Traceback (most recent call last):\n  File \".../job_manager.py\", line 553, in submit_job\n    raise ValueError(\nValueError: Job with submission_id s-b already exists. Please use a different submission_id.\n.\n";
        assert!(says_already_exists(500, body));
        assert!(says_already_exists(400, body));
        assert!(!says_already_exists(404, body));
        assert!(!says_already_exists(
            500,
            "No available agent to submit job, please try again later."
        ));
    }

    #[test]
    fn submission_ids_ray_could_misfile_are_refused() {
        assert!(SubmissionId::new("gp-run1-play_a_b_-0a1b2c-a1").is_ok());
        for bad in ["", "a/b", "../x", ".hidden", "a b", "é", &"x".repeat(129)] {
            assert!(SubmissionId::new(bad).is_err(), "{bad:?} was accepted");
        }
        let parsed: Result<SubmissionId, _> = serde_json::from_str("\"a/b\"");
        assert!(parsed.is_err());
    }

    #[test]
    fn a_cells_id_is_stable_safe_and_tells_attempts_and_lookalike_keys_apart() {
        let a = SubmissionId::for_cell("20261205-1215-ab12", "play[curious-kid,jev]", 1);
        assert_eq!(
            a,
            SubmissionId::for_cell("20261205-1215-ab12", "play[curious-kid,jev]", 1)
        );
        assert!(
            a.as_str()
                .starts_with("gp-20261205-1215-ab12-play_curious-kid_jev_-"),
            "{a}"
        );
        assert!(a.as_str().ends_with("-a1"), "{a}");
        assert!(SubmissionId::new(a.as_str()).is_ok());
        assert_ne!(
            a,
            SubmissionId::for_cell("20261205-1215-ab12", "play[curious-kid,jev]", 2)
        );
        // `[` and `(` both clean to `_`: the hash still tells them apart.
        assert_ne!(
            SubmissionId::for_cell("r", "play[a]", 1),
            SubmissionId::for_cell("r", "play(a)", 1)
        );
        // The run id and the cell key cannot trade characters.
        assert_ne!(
            SubmissionId::for_cell("r-a", "b", 1),
            SubmissionId::for_cell("r", "a-b", 1)
        );
        let long = SubmissionId::for_cell(&"r".repeat(300), &"k".repeat(300), u32::MAX);
        assert!(
            long.as_str().len() <= MAX_SUBMISSION_ID,
            "{}",
            long.as_str().len()
        );
        assert!(SubmissionId::new(long.as_str()).is_ok());
    }
}

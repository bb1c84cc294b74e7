//! The job `plan run PLAN --shard prepare` bought for a paid plan's shards,
//! as a file the shards and the merge read: `<dir>/job.json`.
//!
//! A paid plan's shards buy nothing and send nothing: the prepare run
//! prices every cell of the plan, asks, and buys the job once; each shard
//! plays its cells free, naming the prepared run in its bundle; `plan
//! merge` takes the prepared records as its own (the quote and the job,
//! never bought again), delivers every cell, publishes and settles once.
//! The file holds the prepare run's records of its money steps as they
//! were journaled (redacted like every checkpoint: no secret), so the merge
//! reads exactly what `register` journaled.

use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The file's name in the prepare bundle.
pub const PREPARED_FILE: &str = "job.json";
/// Its format; another is refused.
pub const PREPARED_FORMAT: u32 = 1;
/// The largest file read: a quote and a job of 10,000 cells
/// (`MAX_EXPANDED_STEPS`) take about 2 MB.
pub const MAX_PREPARED_BYTES: u64 = 16 << 20;

/// What a prepare run bought.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Prepared {
    pub format: u32,
    /// The gameplan that bought it.
    pub gameplan: String,
    /// The plan's name and hash (of its validated model).
    pub plan: String,
    pub plan_hash: String,
    /// The run that bought it; shards name it in their bundles.
    pub run_id: String,
    /// The job, or none when nothing needed buying (every cell reused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    pub price_cents: i64,
    /// The cells bought, by id.
    pub cells: Vec<String>,
    /// Each money step the run ran, with its records.
    pub steps: Vec<PreparedStep>,
}

/// One step of the prepare run and the records it journaled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PreparedStep {
    pub id: String,
    pub checkpoints: Vec<Value>,
}

/// Which prepared job a shard played for, as its bundle names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreparedRef {
    pub run_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
}

/// Why a prepared job cannot be read or written.
#[derive(Debug, thiserror::Error)]
pub enum PreparedError {
    #[error(
        "no prepared job in {}: `gameplan plan run PLAN --shard prepare` writes one there (or pass the directory it wrote)",
        dir.display()
    )]
    Missing { dir: PathBuf },
    #[error("{}: {problem}", path.display())]
    Invalid { path: PathBuf, problem: String },
    #[error("cannot {action} {}: {error}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        error: std::io::Error,
    },
}

impl Prepared {
    /// Whether `dir` holds a prepared job (and no shard's cells).
    pub fn is_in(dir: &Path) -> bool {
        dir.join(PREPARED_FILE).is_file() && !dir.join(super::bundle::MANIFEST_FILE).exists()
    }

    pub fn reference(&self) -> PreparedRef {
        PreparedRef {
            run_id: self.run_id.clone(),
            job: self.job.clone(),
        }
    }

    /// Writes `job.json` into `dir` whole: a temporary file renamed into
    /// place, so a reader never sees half of it.
    pub fn write(&self, dir: &Path) -> Result<PathBuf, PreparedError> {
        let path = dir.join(PREPARED_FILE);
        let io = |action: &'static str, path: &Path| {
            let path = path.to_path_buf();
            move |error| PreparedError::Io {
                action,
                path,
                error,
            }
        };
        fs::create_dir_all(dir).map_err(io("create", dir))?;
        let bytes = serde_json::to_vec_pretty(self).map_err(|e| PreparedError::Invalid {
            path: path.clone(),
            problem: e.to_string(),
        })?;
        let temporary = dir.join(format!(".{PREPARED_FILE}.{}", std::process::id()));
        fs::write(&temporary, bytes)
            .and_then(|()| fs::File::open(&temporary)?.sync_all())
            .map_err(io("write", &temporary))?;
        fs::rename(&temporary, &path).map_err(io("write", &path))?;
        Ok(path)
    }

    /// Reads the prepared job in `dir`.
    pub fn read(dir: &Path) -> Result<Prepared, PreparedError> {
        let path = dir.join(PREPARED_FILE);
        let invalid = |problem: String| PreparedError::Invalid {
            path: path.clone(),
            problem,
        };
        let meta = match fs::metadata(&path) {
            Ok(meta) => meta,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(PreparedError::Missing {
                    dir: dir.to_path_buf(),
                });
            }
            Err(error) => {
                return Err(PreparedError::Io {
                    action: "read",
                    path,
                    error,
                });
            }
        };
        if meta.len() > MAX_PREPARED_BYTES {
            return Err(invalid(format!(
                "{} bytes, over the {MAX_PREPARED_BYTES}-byte limit: not a file gameplan wrote",
                meta.len()
            )));
        }
        let bytes = fs::read(&path).map_err(|error| PreparedError::Io {
            action: "read",
            path: path.clone(),
            error,
        })?;
        let format = serde_json::from_slice::<Value>(&bytes)
            .ok()
            .and_then(|v| v.get("format").and_then(Value::as_u64));
        if format.is_some_and(|f| f != u64::from(PREPARED_FORMAT)) {
            return Err(invalid(format!(
                "a prepared job of format {}, this gameplan reads format {PREPARED_FORMAT}",
                format.unwrap_or_default()
            )));
        }
        serde_json::from_slice(&bytes)
            .map_err(|e| invalid(format!("not a prepared job gameplan wrote: {e}")))
    }

    /// Why this job is not for the plan whose hash is `plan_hash`, played
    /// by this gameplan.
    pub fn mismatch(&self, plan_hash: &str) -> Option<String> {
        if self.plan_hash != plan_hash {
            return Some(format!(
                "the prepared job (run {}) was bought for another version of plan `{}` (plan hash {}, this one {plan_hash}): prepare again with this plan",
                self.run_id, self.plan, self.plan_hash
            ));
        }
        let ours = env!("CARGO_PKG_VERSION");
        if self.gameplan != ours {
            return Some(format!(
                "the prepared job (run {}) was bought by gameplan {}, this is {ours}: use one gameplan for prepare, shards and merge",
                self.run_id, self.gameplan
            ));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Prepared {
        Prepared {
            format: PREPARED_FORMAT,
            gameplan: env!("CARGO_PKG_VERSION").to_owned(),
            plan: "demo".into(),
            plan_hash: "abc".into(),
            run_id: "r1".into(),
            job: Some("job_1".into()),
            price_cents: 100,
            cells: vec!["play[a,b]".into()],
            steps: vec![PreparedStep {
                id: "register".into(),
                checkpoints: vec![serde_json::json!({"job": {"job": "job_1"}})],
            }],
        }
    }

    #[test]
    fn a_written_job_reads_back_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let prepared = sample();
        prepared.write(dir.path()).unwrap();
        assert!(Prepared::is_in(dir.path()));
        assert_eq!(Prepared::read(dir.path()).unwrap(), prepared);
        assert_eq!(prepared.mismatch("abc"), None);
        let other = prepared.mismatch("def").unwrap();
        assert!(other.contains("another version of plan `demo`"), "{other}");
    }

    #[test]
    fn a_missing_oversized_or_foreign_file_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let missing = Prepared::read(dir.path()).unwrap_err().to_string();
        assert!(missing.contains("--shard prepare"), "{missing}");
        let path = dir.path().join(PREPARED_FILE);
        fs::write(&path, r#"{"format": 9}"#).unwrap();
        let format = Prepared::read(dir.path()).unwrap_err().to_string();
        assert!(format.contains("format 9"), "{format}");
        fs::write(&path, "{}").unwrap();
        let foreign = Prepared::read(dir.path()).unwrap_err().to_string();
        assert!(foreign.contains("not a prepared job"), "{foreign}");
        let file = fs::File::create(&path).unwrap();
        file.set_len(MAX_PREPARED_BYTES + 1).unwrap();
        let big = Prepared::read(dir.path()).unwrap_err().to_string();
        assert!(big.contains("over the"), "{big}");
    }
}

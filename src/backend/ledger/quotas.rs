//! The ledger's quotas (docs/serve.md › Quotas): how many files and bytes
//! one run may hold, how many unsettled jobs one account may hold, and
//! dropping the files of a run that never played.
//!
//! It owns the limits, their defaults, the checks an upload and a register
//! make against them, and the refusal that names the quota, what is used
//! and the limit (413 `quota_exceeded`; 409 `too_many_active_jobs` for
//! open jobs, the code clients already act on). Every refusal comes before
//! anything is stored or charged.
//!
//! # Why these quotas
//!
//! An upload is capped one by one ([`super::runs::MAX_UPLOAD_BYTES`]), but
//! nothing capped how many a run takes, so one token could fill the
//! server's disk through one bought run. The defaults leave room for what a
//! cell writes (a report, a transcript, a trace and one screenshot per
//! action of a long run: about 1,000) and refuse what no cell writes. A run
//! that never played is refunded at `finish`, so keeping its files would
//! store them for free: they are deleted when it completes, and at `finish`.

use rusqlite::{Transaction, params};

use super::Db as _;
use crate::backend::api::ApiError;

/// Files one run may hold unless `gameplan serve --max-run-files` says
/// otherwise: a long run's screenshots (one per action, 1,000 actions)
/// and the cell's own files, twice over.
pub const MAX_RUN_FILES: u64 = 2_000;
/// Bytes one run's files may add up to unless `gameplan serve
/// --max-run-bytes` says otherwise: 256 MiB, four of the largest uploads.
pub const MAX_RUN_BYTES: u64 = 256 * 1024 * 1024;
/// Unsettled jobs one account may hold unless `gameplan serve
/// --max-open-jobs` says otherwise.
pub const MAX_OPEN_JOBS: u64 = 20;

/// The limits a ledger enforces; the job's own files (the aggregate) count
/// as one more run of the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quotas {
    pub run_files: u64,
    pub run_bytes: u64,
    pub open_jobs: u64,
}

impl Default for Quotas {
    fn default() -> Self {
        Quotas {
            run_files: MAX_RUN_FILES,
            run_bytes: MAX_RUN_BYTES,
            open_jobs: MAX_OPEN_JOBS,
        }
    }
}

/// Counts as i64 (what `SQLite` and the error body hold), saturating.
fn wide(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A refusal naming `quota`, what is `used` and the `limit`.
fn exceeded(
    status: u16,
    code: &str,
    quota: &str,
    used: i64,
    limit: u64,
    message: String,
) -> ApiError {
    ApiError::new(status, code, message).with(|d| {
        d.quota = Some(quota.to_owned());
        d.used = Some(used);
        d.limit = Some(wide(limit));
    })
}

impl Quotas {
    /// Refuses an upload of `size` bytes named `name` to (`job`, `run`)
    /// when it would take the run past its files or bytes (a file that
    /// replaces one of the same name counts once, at its new size). `what`
    /// names the run for the message.
    pub(super) fn check_upload(
        &self,
        tx: &Transaction<'_>,
        (job, run): (i64, i64),
        what: &str,
        name: &str,
        size: i64,
    ) -> Result<(), ApiError> {
        let (files, bytes): (i64, i64) = tx
            .query_row(
                "SELECT COUNT(*), COALESCE(SUM(size), 0) FROM uploads
                 WHERE job = ?1 AND run = ?2 AND name <> ?3",
                params![job, run, name],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .db()?;
        let not_stored = format!(
            "`{name}` was not stored and nothing was charged for it; the job stays bought as it was"
        );
        if files.saturating_add(1) > wide(self.run_files) {
            return Err(exceeded(
                413,
                "quota_exceeded",
                "run_files",
                files,
                self.run_files,
                format!(
                    "{what} holds {files} files, the most one run may hold (quota `run_files`: {files} used of {}; `gameplan serve --max-run-files`); {not_stored}; upload fewer files, or ask the server's operator to raise the quota",
                    self.run_files
                ),
            ));
        }
        if bytes.saturating_add(size) > wide(self.run_bytes) {
            return Err(exceeded(
                413,
                "quota_exceeded",
                "run_bytes",
                bytes,
                self.run_bytes,
                format!(
                    "{what} holds {bytes} bytes of files, and `{name}` ({size} bytes) would take it past the {} bytes one run may hold (quota `run_bytes`: {bytes} used of {}; `gameplan serve --max-run-bytes`); {not_stored}; upload smaller files, or ask the server's operator to raise the quota",
                    self.run_bytes, self.run_bytes
                ),
            ));
        }
        Ok(())
    }

    /// Refuses a new job when `account` holds as many unsettled jobs as
    /// it may.
    pub(super) fn check_open_jobs(
        &self,
        tx: &Transaction<'_>,
        account: &str,
    ) -> Result<(), ApiError> {
        let open: i64 = tx
            .query_row(
                "SELECT COUNT(*) FROM jobs WHERE account = ?1 AND state = 'open'",
                params![account],
                |r| r.get(0),
            )
            .db()?;
        if open < wide(self.open_jobs) {
            return Ok(());
        }
        Err(exceeded(
            409,
            "too_many_active_jobs",
            "open_jobs",
            open,
            self.open_jobs,
            format!(
                "the account has {open} unsettled jobs, the most it may hold (quota `open_jobs`: {open} used of {}; `gameplan serve --max-open-jobs`); nothing was charged; finish one first",
                self.open_jobs
            ),
        ))
    }
}

/// Deletes every file of (`job`, `run`), and each stored blob no other
/// upload names: the files of a run that never played, which is refunded
/// (see the module doc). Answers how many files went.
pub(super) fn drop_files(tx: &Transaction<'_>, job: i64, run: i64) -> Result<usize, ApiError> {
    let shas: Vec<String> = super::rows(
        tx,
        "DELETE FROM uploads WHERE job = ?1 AND run = ?2 RETURNING sha256",
        params![job, run],
        |r| r.get(0),
    )?;
    let mut orphan = tx
        .prepare_cached(
            "DELETE FROM blobs WHERE sha256 = ?1
             AND NOT EXISTS (SELECT 1 FROM uploads WHERE sha256 = ?1)",
        )
        .db()?;
    for sha in &shas {
        orphan.execute(params![sha]).db()?;
    }
    Ok(shas.len())
}

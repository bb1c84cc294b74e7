//! The journal's and the run lock's errors. Each message says what happened,
//! which file (and line), and what to do next.

use std::fmt::Write as _;
use std::io;
use std::path::PathBuf;

use super::lock::LockHolder;

/// Why a journal could not be created, read, appended to or synced, or why an
/// atomic write failed.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum JournalError {
    #[error("could not {action} `{path}`: {source}")]
    #[diagnostic(code(journal::io))]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    #[error(
        "a journal already exists at `{path}`; resume that run with `gameplan plan resume RUN_ID`, \
         or start a new one with `gameplan plan run PLAN --new`"
    )]
    #[diagnostic(code(journal::exists))]
    Exists { path: PathBuf },

    #[error(
        "there is no journal at `{path}`; list runs with `gameplan plan runs`, \
         or start a new run with `gameplan plan run PLAN --new`"
    )]
    #[diagnostic(code(journal::missing))]
    Missing { path: PathBuf },

    #[error(
        "the journal at `{path}` is corrupt at line {line} ({problem}); it was not modified; \
         start a new run with `gameplan plan run PLAN --new`, or inspect the file"
    )]
    #[diagnostic(code(journal::corrupt))]
    Corrupt {
        path: PathBuf,
        line: usize,
        problem: Corruption,
    },

    #[error(
        "line {line} of the journal at `{path}` has format version {found}, but this gameplan \
         reads version {supported}; resume it with the gameplan release that wrote it, \
         or start a new run with `gameplan plan run PLAN --new`"
    )]
    #[diagnostic(code(journal::unsupported_version))]
    UnsupportedVersion {
        path: PathBuf,
        line: usize,
        found: u64,
        supported: u32,
    },

    #[error(
        "line {line} of the journal at `{path}` is intact but is not the event this gameplan \
         expects ({source}); was it written by a different gameplan release? \
         start a new run with `gameplan plan run PLAN --new`"
    )]
    #[diagnostic(code(journal::unexpected_event))]
    UnexpectedEvent {
        path: PathBuf,
        line: usize,
        #[source]
        source: serde_json::Error,
    },

    #[error("could not encode an event for the journal at `{path}`: {source}; nothing was written")]
    #[diagnostic(code(journal::encode))]
    Encode {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },

    #[error(
        "a journal record of {size} bytes exceeds the limit of {limit} bytes; it was not \
         written to `{path}`; keep large data in step artifacts and journal a reference to it"
    )]
    #[diagnostic(code(journal::record_too_large))]
    RecordTooLarge {
        path: PathBuf,
        size: usize,
        limit: usize,
    },

    #[error(
        "an earlier write or sync of the journal at `{path}` failed, so what is on disk is \
         uncertain and nothing more is appended; stop this run and resume it with \
         `gameplan plan resume RUN_ID`, which re-reads the journal"
    )]
    #[diagnostic(code(journal::unusable))]
    Unusable { path: PathBuf },
}

/// What is wrong with a corrupt journal line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Corruption {
    /// The line is not a journal record (not UTF-8, not JSON, or missing fields).
    Unparsable,
    /// The event's bytes do not match the record's CRC32C.
    ChecksumMismatch,
    /// The line is longer than any record may be.
    TooLong,
    /// A record that was synced and acknowledged (an idempotency key, a
    /// money response) is damaged: dropping it could repeat an effect.
    DurableRecordDamaged,
}

impl std::fmt::Display for Corruption {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Corruption::Unparsable => "not a journal record",
            Corruption::ChecksumMismatch => "checksum mismatch",
            Corruption::TooLong => "line longer than the record size limit",
            Corruption::DurableRecordDamaged => {
                "an acknowledged durable record is damaged; it may hold an idempotency key, so it is not dropped"
            }
        })
    }
}

/// Why a run lock could not be taken or inspected.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum LockError {
    #[error("{}", held_message(.path, .holder.as_ref()))]
    #[diagnostic(code(journal::lock_held))]
    Held {
        path: PathBuf,
        holder: Option<LockHolder>,
    },

    #[error(
        "`{plan_hash}` is not a plan hash (expected letters, digits, `-` or `_`); \
         no lock file was touched"
    )]
    #[diagnostic(code(journal::bad_plan_hash))]
    BadPlanHash { plan_hash: String },

    #[error("could not {action} the run lock `{path}`: {source}")]
    #[diagnostic(code(journal::lock_io))]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

fn held_message(path: &std::path::Path, holder: Option<&LockHolder>) -> String {
    let mut message = String::from("another gameplan run of this plan is live");
    let run_id = if let Some(holder) = holder {
        let _ = write!(
            message,
            " (run {}, pid {} on {}, started {})",
            holder.run_id, holder.pid, holder.host, holder.started_at
        );
        holder.run_id.as_str()
    } else {
        message.push_str(" (its holder did not say who it is)");
        "RUN_ID"
    };
    let _ = write!(
        message,
        "; it holds `{}`; wait for it to finish, or stop it with `gameplan plan stop {run_id}`",
        path.display()
    );
    message
}

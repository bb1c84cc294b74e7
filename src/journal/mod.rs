//! The run journal: an append-only, checksummed checkpoint file; atomic
//! whole-file writes; and the lock that allows one live run per plan hash.
//!
//! This module owns the bytes on disk and their durability. It does not know
//! what the events mean (the engine decides how to resume from them), where
//! the state directory is (callers pass paths), or what time it is (a
//! [`LockHolder`] arrives filled in). It never prints and never spawns
//! threads: all I/O is synchronous `std::fs`, and the caller owns threading.
//!
//! # Design
//!
//! - **One record per line.** Each line is
//!   `{"format":1,"crc32c":N,"event":EVENT}` and `N` is the CRC32C of the
//!   exact bytes of `EVENT` in that line, so a record is verified without
//!   re-serializing anything. A record is at most [`MAX_RECORD_BYTES`].
//!   A record synced on its own before it was acknowledged (an idempotency
//!   key) carries `"durable":true` before its event.
//! - **A record counts only once its line is complete.** Each append hands
//!   the whole line to the kernel in one `write_all`, so a killed process
//!   leaves nothing half-buffered in user space; after a crash of the machine, the last line
//!   may still be torn. A torn last line (no newline, unparsable, or a bad
//!   checksum) was never acknowledged as durable: readers drop it and
//!   [`Journal::open`] cuts it off before appending. A complete line marked
//!   durable is never dropped: its damage is corruption.
//! - **Damage anywhere else is corruption**, never repaired silently: the
//!   error names the file and line, and the file is left exactly as found.
//!   An unknown format version is refused on its own terms.
//! - **Group commit.** [`Journal::append`] does not wait for the disk;
//!   [`Journal::commit`] syncs everything since the last sync with one fsync
//!   ([`Journal::begin_commit`] hands that fsync to another thread, so
//!   appends go on while it runs). A record whose loss would repeat an effect
//!   in the outside world (an idempotency key before a money request) goes
//!   through [`Journal::append_durable`], which syncs before returning.
//! - **After a failed write or sync, a journal stops appending.** A partial
//!   write is cut back; if that fails, or an fsync fails, what is on disk is
//!   unknown and only a fresh [`Journal::open`] can say.
//! - **Snapshots and store entries are replaced whole** by [`atomic_write`]:
//!   temp file in the same directory, fsync, rename, fsync the directory.
//! - **The run lock is an OS lock** ([`std::fs::File::try_lock`]), so the
//!   kernel frees it when its holder dies, even on `kill -9`. The holder
//!   written into the lock file only serves the message of a refused run.

mod atomic;
mod error;
mod file;
mod lock;
mod record;
pub mod run;
pub mod step_log;

pub use atomic::atomic_write;
pub use error::{Corruption, JournalError, LockError};
pub use file::{Journal, PendingCommit, Replay, Seq, SyncFn, TornTail};
pub use lock::{LockHolder, LockStatus, RunLock, SignalRefusal, this_host};
pub use record::{FORMAT_VERSION, MAX_RECORD_BYTES};

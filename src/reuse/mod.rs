//! Reuse: deciding whether a step's earlier result still holds, and keeping it.
//!
//! This module owns the [`ReuseKey`] (the one document naming every input of a
//! step's result) and its canonical encoding and digest, the explanation of why
//! a key differs from the previous one ([`why_not_reused`]), the expansion of
//! `inputs` globs into repo files ([`expand_inputs`]), the content-hash cache
//! of those files ([`FileHashCache`]), the result [`Store`] under
//! `<state>/store/`, and the [`UnitStore`] under `<state>/units/`, where a
//! kind keeps small values under keys of its own (unit-level reuse). It does
//! not decide which settings of a step kind belong in a key (each step kind
//! does), run steps, schedule, lock plans or print anything. All I/O is
//! synchronous `std::fs`; the caller owns threading.
//!
//! # Design
//!
//! - **A key names every input, and nothing else.** Kind, resolved settings,
//!   input content hashes by repo-relative `/` path, the output digests of the
//!   steps it needs, and [`KEY_VERSION`] (gameplan's step semantics, not its
//!   build). No mtimes, no absolute paths, no plan comments: the same inputs
//!   give the same digest on any machine and in any checkout location.
//! - **Canonical means byte-for-byte reproducible.** Object keys are sorted by
//!   their UTF-8 bytes at every depth and there is no whitespace, whatever the
//!   insertion order of the maps (the crate enables `serde_json`'s
//!   `preserve_order`, so this is done by hand). The digest is the lowercase
//!   sha256 hex of that text, and the text itself is stored in the entry's
//!   record so a later run can say why it was not reused.
//! - **Content counts, stat only saves work.** The hash cache trusts an entry
//!   only while size, mtime and ctime (ns), inode and device are unchanged
//!   *and* the mtime is at least [`RACY_MARGIN`] older than the moment the
//!   file was hashed; a newer file is "racily clean" (git's term) and is read
//!   again, because a write in the same timestamp tick as the hash would
//!   otherwise go unseen. Touching a file costs one re-read and changes no
//!   key. A damaged cache is an empty cache. Within one key computation
//!   ([`share_stats`]) the stat an input's expansion took is the one its hash
//!   is checked against.
//! - **One index per store, read once per run.** Entries' metadata is one
//!   checksummed line each in `store/index.log` (see `index.rs`), appended
//!   with a single write; outputs over [`INLINE_MAX`] bytes are blobs named by
//!   their sha256; small ones live in the record. Storing a step with small
//!   outputs creates no file, and a lookup costs no system call. A torn last
//!   line is ignored, a damaged record is skipped with a warning, and every
//!   restore checks size and sha256 of what it writes: damage is a miss,
//!   never a wrong result. Two runs may share a store (both records are
//!   whole; either serves); `gc` compacts the index only when no run holds
//!   its shared lock. A store written by an older gameplan (a directory per
//!   entry with `key.json` and `entry.json`) is read, never rewritten.
//! - **Nothing half-written is ever visible.** Blobs and restored files are
//!   written to a temporary name and renamed (not fsynced: readers verify,
//!   so a torn file is a miss, see `write.rs`).
//! - **Resolved once per run.** The escape check resolves a directory once
//!   per run (`paths.rs`); a path in it that is not a symlink costs one
//!   `lstat`, and a reused step whose outputs are in place costs one `lstat`
//!   per output.
//! - **Only successes are stored, and only whole.** [`Store::put`] refuses an
//!   entry whose declared output is missing; the caller calls it only after the
//!   step succeeded.
//! - **The repo root is a wall.** Patterns that are absolute or climb out with
//!   `..` are refused, symlinks resolving outside the root are refused, and
//!   paths read from the store are validated before anything is written.

mod error;
mod hash_cache;
mod index;
mod inputs;
mod key;
mod paths;
mod store;
mod units;
mod write;

pub use error::ReuseError;
pub use hash_cache::{FileHashCache, HashedFile, RACY_MARGIN, hash_fresh};
pub use inputs::{PatternSet, expand_inputs};
pub use key::{KEY_VERSION, ReuseKey, outputs_digest, sha256_hex, why_not_reused};
pub use paths::{SharedStats, share_stats};
pub use store::{
    Entry, INLINE_MAX, KeysFingerprint, RestoreScope, STALE_TEMP_AGE, Store, StoredEntry,
    StoredOutput, dir_size,
};
pub use units::{UNITS_DIR, UnitStore};

//! Reuse: deciding whether a step's earlier result still holds, and keeping it.
//!
//! This module owns the [`ReuseKey`] (the one document naming every input of a
//! step's result) and its canonical encoding and digest, the explanation of why
//! a key differs from the previous one ([`why_not_reused`]), the expansion of
//! `inputs` globs into repo files ([`expand_inputs`]), the content-hash cache
//! of those files ([`FileHashCache`]), the result [`Store`] under
//! `<state>/store/`, and the [`UnitStore`] under `<state>/units/`, where a
//! kind keeps small values under keys of its own (unit-level reuse). It does not decide which settings of a step kind belong in
//! a key (each step kind does), run steps, schedule, lock plans or print
//! anything. All I/O is synchronous `std::fs`; the caller owns threading.
//!
//! # Design
//!
//! - **A key names every input, and nothing else.** Kind, resolved settings,
//!   input content hashes by repo-relative `/` path, upstream keys, and
//!   [`KEY_VERSION`] (gameplan's step semantics, not its build). No mtimes, no
//!   absolute paths, no plan comments: the same inputs give the same digest on
//!   any machine and in any checkout location.
//! - **Canonical means byte-for-byte reproducible.** Object keys are sorted by
//!   their UTF-8 bytes at every depth and there is no whitespace, whatever the
//!   insertion order of the maps (the crate enables `serde_json`'s
//!   `preserve_order`, so this is done by hand). The digest is the lowercase
//!   sha256 hex of that text, and the text itself is stored as `key.json`
//!   beside the result so a later run can say why it was not reused.
//! - **Content counts, stat only saves work.** The hash cache trusts an entry
//!   only while size, mtime (ns) and inode are unchanged *and* the mtime is at
//!   least [`RACY_MARGIN`] older than the moment the file was hashed; a newer
//!   file is "racily clean" (git's term) and is read again, because a write in
//!   the same timestamp tick as the hash would otherwise go unseen. Touching a
//!   file costs one re-read and changes no key. A damaged cache is an empty
//!   cache.
//! - **Nothing half-written is ever visible.** Every file is written to a
//!   temporary name and renamed (not fsynced: readers verify, so a torn entry
//!   is a miss, see `write.rs`); a store entry is built whole in a
//!   temporary directory (with `entry.json` written last) and renamed into
//!   place, so two gameplan processes may share a store: the first rename
//!   wins, the loser discards its copy. A lookup is a hit only when
//!   `entry.json` parses and every stored output is present with its recorded
//!   size; anything less is a miss, never an error.
//! - **Small outputs live in `entry.json`.** An output of at most
//!   [`INLINE_MAX`] bytes is kept there (base64, with its mode) instead of as
//!   a file under `outputs/`: a stored file costs an inode (and `outputs/`
//!   another), which was most of the cost of storing a small result. Restore
//!   checks size and sha256 of inline content as it does for files.
//! - **Only successes are stored, and only whole.** [`Store::put`] refuses an
//!   entry whose declared output is missing; the caller calls it only after the
//!   step succeeded.
//! - **The repo root is a wall.** Patterns that are absolute or climb out with
//!   `..` are refused, symlinks resolving outside the root are refused, and
//!   paths read from the store are validated before anything is written.

mod error;
mod hash_cache;
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
pub use store::{
    Entry, INLINE_MAX, RestoreScope, STALE_TEMP_AGE, Store, StoredEntry, StoredOutput, dir_size,
};
pub use units::{UNITS_DIR, UnitStore};

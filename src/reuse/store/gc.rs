//! What `gameplan gc` asks of the store: every entry with its size and
//! last use, removing entries, compacting the index and the blobs no
//! entry names any more, and sweeping temporary directories a dead writer
//! left.

use std::collections::{BTreeSet, HashMap};
use std::fs;
use std::sync::PoisonError;
use std::time::{Duration, SystemTime};

use super::{
    BLOBS_DIR, DEAD_WRITER_TEMP_AGE, ENTRY_FILE, STALE_TEMP_AGE, SWEEP_MAX, Store, StoredEntry,
    TEMP_PREFIX, dir_size, index, remove_any, writer_is_dead,
};
use crate::reuse::error::{ReuseError, io_error};
use crate::reuse::index::Indexed;
use crate::reuse::key::is_sha256_hex;

impl Store {
    /// Every stored entry (indexed and old layout) with its size on disk and
    /// when it was last stored or reused, for `gameplan gc`.
    pub fn entries(&self) -> Vec<StoredEntry> {
        let mut found: Vec<StoredEntry> = self
            .index()
            .entries
            .values()
            .map(|indexed| StoredEntry {
                digest: indexed.entry.key.clone(),
                bytes: indexed.record_bytes
                    + indexed
                        .entry
                        .outputs
                        .iter()
                        .filter(|o| o.inline.is_none())
                        .map(|o| o.size)
                        .sum::<u64>(),
                last_used: indexed.last_used,
            })
            .collect();
        let indexed: BTreeSet<String> = found.iter().map(|e| e.digest.clone()).collect();
        for digest in self.legacy_digests() {
            if indexed.contains(&digest) {
                continue;
            }
            let dir = self.entry_dir(&digest);
            let last_used = fs::metadata(dir.join(ENTRY_FILE))
                .and_then(|m| m.modified())
                .unwrap_or(SystemTime::UNIX_EPOCH);
            found.push(StoredEntry {
                bytes: dir_size(&dir),
                digest,
                last_used,
            });
        }
        found
    }

    /// The digests of the old layout's entry directories.
    pub(super) fn legacy_digests(&self) -> Vec<String> {
        let mut found = Vec::new();
        for shard in fs::read_dir(&self.dir).into_iter().flatten().flatten() {
            let name = shard.file_name();
            let name = name.to_string_lossy();
            if name.len() != 2 || !name.bytes().all(|b| b.is_ascii_hexdigit()) {
                continue;
            }
            for item in fs::read_dir(shard.path()).into_iter().flatten().flatten() {
                let digest = item.file_name().to_string_lossy().into_owned();
                if is_sha256_hex(&digest) {
                    found.push(digest);
                }
            }
        }
        found
    }

    /// Removes one entry (a reuse of it afterwards is a miss).
    pub fn remove_entry(&self, digest: &str) -> Result<(), ReuseError> {
        self.remove_entries(&BTreeSet::from([digest.to_owned()]))
            .map(|_| ())
    }

    /// Removes `digests` and compacts the index: superseded records and use
    /// marks are folded, blobs no entry names any more are deleted, and
    /// old-layout entries among `digests` are deleted (the entry file
    /// first, so a reader never sees an entry without its outputs). While a
    /// run holds the index, the removal is appended as a record instead and
    /// blobs wait for a later `gc`. Returns the bytes freed.
    pub fn remove_entries(&self, digests: &BTreeSet<String>) -> Result<u64, ReuseError> {
        // This store's own shared lock would keep it from compacting; a
        // later store reopens the log.
        self.state
            .appender
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let mut freed = 0;
        for digest in digests.iter().filter(|d| is_sha256_hex(d)) {
            let dir = self.entry_dir(digest);
            if fs::symlink_metadata(&dir).is_ok() {
                freed += dir_size(&dir);
                let _ = fs::remove_file(dir.join(ENTRY_FILE));
                fs::remove_dir_all(&dir).map_err(io_error("remove", &dir))?;
            }
        }
        match index::compact(&self.dir, digests)? {
            Some(compacted) => {
                freed += compacted.freed_bytes;
                freed += self.remove_unreferenced_blobs(&compacted.kept);
                let mut loaded = self.index();
                loaded.entries = compacted.kept;
                loaded.warnings.clear();
            }
            None => {
                self.index().entries.retain(|d, _| !digests.contains(d));
            }
        }
        Ok(freed)
    }

    /// Compacts the index (see [`Self::remove_entries`]); returns bytes freed.
    pub fn compact(&self) -> Result<u64, ReuseError> {
        self.remove_entries(&BTreeSet::new())
    }

    pub(super) fn remove_unreferenced_blobs(&self, kept: &HashMap<String, Indexed>) -> u64 {
        let referenced: BTreeSet<&str> = kept
            .values()
            .flat_map(|i| i.entry.outputs.iter())
            .filter(|o| o.inline.is_none())
            .map(|o| o.sha256.as_str())
            .collect();
        let mut freed = 0;
        let blobs = self.dir.join(BLOBS_DIR);
        for shard in fs::read_dir(&blobs).into_iter().flatten().flatten() {
            for blob in fs::read_dir(shard.path()).into_iter().flatten().flatten() {
                let name = blob.file_name().to_string_lossy().into_owned();
                if referenced.contains(name.as_str()) {
                    continue;
                }
                let size = blob.metadata().map_or(0, |m| m.len());
                if fs::remove_file(blob.path()).is_ok() {
                    freed += size;
                }
            }
            // Only if empty: a concurrent writer may have just added one.
            let _ = fs::remove_dir(shard.path());
        }
        freed
    }

    /// Removes temporary files and directories older than `older_than`,
    /// left behind by runs that were killed while storing; returns how many
    /// were removed. Best effort: what cannot be removed stays for a later sweep.
    pub fn remove_stale_temp_dirs(&self, older_than: Duration) -> usize {
        let Ok(listing) = fs::read_dir(&self.dir) else {
            return 0;
        };
        let now = SystemTime::now();
        let mut removed = 0;
        for item in listing.filter_map(Result::ok) {
            if !item.file_name().to_string_lossy().starts_with(TEMP_PREFIX) {
                continue;
            }
            let old_enough = item
                .metadata()
                .and_then(|metadata| metadata.modified())
                .is_ok_and(|modified| {
                    now.duration_since(modified)
                        .is_ok_and(|age| age >= older_than)
                });
            if old_enough && remove_any(&item.path()) {
                removed += 1;
            }
        }
        removed
    }

    /// Removes temporary files abandoned by killed writes: older than
    /// [`STALE_TEMP_AGE`], or older than a minute with a writer pid (from
    /// the `.tmp-<pid>-<n>` name) that is not alive here. At most
    /// [`SWEEP_MAX`] per call; one listing of the store's top directory.
    /// Returns how many were removed.
    pub fn sweep_abandoned_temp_dirs(&self) -> usize {
        let Ok(listing) = fs::read_dir(&self.dir) else {
            return 0;
        };
        let now = SystemTime::now();
        let mut removed = 0;
        for item in listing.filter_map(Result::ok) {
            if removed == SWEEP_MAX {
                break;
            }
            let name = item.file_name();
            let Some(suffix) = name.to_str().and_then(|n| n.strip_prefix(TEMP_PREFIX)) else {
                continue;
            };
            let Some(age) = item
                .metadata()
                .and_then(|metadata| metadata.modified())
                .ok()
                .and_then(|modified| now.duration_since(modified).ok())
            else {
                continue;
            };
            let abandoned =
                age >= STALE_TEMP_AGE || (age >= DEAD_WRITER_TEMP_AGE && writer_is_dead(suffix));
            if abandoned && remove_any(&item.path()) {
                removed += 1;
            }
        }
        removed
    }
}

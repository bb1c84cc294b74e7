//! The result store: outputs of succeeded steps, by reuse key digest.

mod gc;

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, OpenOptions};
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, Once, OnceLock, PoisonError};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::error::{ReuseError, io_error};
use super::index::{self, Appender, INDEX_FILE, Indexed, Loaded, Record};
use super::inputs::PatternSet;
use super::key::{ReuseKey, is_sha256_hex, sha256_hex};
use super::paths::{
    canonical_root, check_rel_path, forget_resolved, is_known_dir, join_rel, resolve_inside,
};
use super::write::{copy_hashing, hash_file, unique_suffix, write_atomically};

/// The old layout's `entry.json` format (3: small outputs inline, the rest
/// as `outputs/<index>`). Such entries are read, never written.
const ENTRY_FORMAT: u32 = 3;
/// An entry recorded in the index, its larger outputs under `blobs/` by
/// content hash.
pub(crate) const INDEX_ENTRY_FORMAT: u32 = 4;
/// Outputs up to this size live inside the entry's record instead of as a
/// blob: a file smaller than a filesystem block costs a whole block and an
/// inode, and creating that inode was most of what storing a small result
/// cost (Bazel's remote cache inlines small outputs for the same reason).
pub const INLINE_MAX: u64 = 4096;
const KEY_FILE: &str = "key.json";
const ENTRY_FILE: &str = "entry.json";
const OUTPUTS_DIR: &str = "outputs";
const BLOBS_DIR: &str = "blobs";
const LAST_DIR: &str = "last";
const TEMP_PREFIX: &str = ".tmp-";
/// A temporary file this old is abandoned whoever wrote it: storing one
/// result takes seconds, not an hour.
pub const STALE_TEMP_AGE: Duration = Duration::from_secs(3600);
/// A temporary file whose writer's pid is not alive on this host is
/// abandoned once this old (the margin keeps a state directory shared over
/// the network from losing another host's file mid-write to a pid that
/// only happens to be free here).
const DEAD_WRITER_TEMP_AGE: Duration = Duration::from_secs(60);
/// At most this many abandoned temporary files are removed per sweep, so
/// the first store of a run never waits on a big backlog.
const SWEEP_MAX: usize = 64;

/// Stored results under `<state>/store/`:
///
/// ```text
/// store/index.log                   every entry's metadata, one checksummed record a line (see `index.rs`)
/// store/blobs/<h[0:2]>/<sha256>     outputs over INLINE_MAX, by content (shared by entries)
/// store/last/<sha256(plan)>.json    the last key seen per step, for "why not reused"
/// store/.tmp-…                      blobs being written; renamed into place whole
/// store/<k[0:2]>/<key>/…            the old layout (key.json, entry.json, outputs/): read, never written
/// ```
///
/// A stored step costs one appended line (and a blob per output over
/// [`INLINE_MAX`]); a step with small outputs creates no file. The index is
/// read once per opened store, so a lookup costs no system call.
///
/// Safe to share between threads and between gameplan processes: blobs are
/// temp + rename under their content hash, records are single appends, and
/// every restore checks size and sha256 of what it writes.
#[derive(Debug, Clone)]
pub struct Store {
    dir: PathBuf,
    /// Abandoned temporary files are swept once per opened store, at its
    /// first write (issue 8, item 16); clones share it.
    swept: Arc<Once>,
    state: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    /// The index as read at first use, plus what this store added since.
    index: OnceLock<Mutex<Loaded>>,
    /// Whether old-layout shard directories exist (listed once).
    legacy: OnceLock<bool>,
    appender: Mutex<Option<Appender>>,
    /// Index entries reused since the last [`Store::flush_used`].
    used: Mutex<BTreeSet<String>>,
}

/// What a store entry may write when restored (issue 8, item 5): only paths
/// that the step's declared `outputs` match, and never one of `keep`
/// (the step's own inputs and the plan file), which a restore leaves as it
/// is in the working tree.
#[derive(Default)]
pub struct RestoreScope {
    outputs: Option<PatternSet>,
    keep: BTreeSet<String>,
}

impl RestoreScope {
    /// `output_patterns` are the step's declared `outputs`; `keep` are
    /// repo-relative paths never written (its expanded inputs, the plan file).
    pub fn new<S: AsRef<str>>(
        output_patterns: &[S],
        keep: impl IntoIterator<Item = String>,
    ) -> Result<Self, ReuseError> {
        Ok(Self {
            outputs: Some(PatternSet::parse(output_patterns)?),
            keep: keep.into_iter().collect(),
        })
    }
}

/// One entry as `gameplan gc` sees it.
#[derive(Debug, Clone)]
pub struct StoredEntry {
    pub digest: String,
    /// Bytes on disk: its record (or old-layout files) and its blobs.
    pub bytes: u64,
    /// When it was stored or last reused.
    pub last_used: SystemTime,
}

/// The bytes of the files under `dir`.
pub fn dir_size(dir: &Path) -> u64 {
    walkdir::WalkDir::new(dir)
        .into_iter()
        .filter_map(Result::ok)
        .filter_map(|e| e.metadata().ok())
        .filter(std::fs::Metadata::is_file)
        .map(|m| m.len())
        .sum()
}

/// A stored result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// 4: recorded in the index, blobs by content; 3: the old layout.
    pub format: u32,
    /// The digest of the [`ReuseKey`] this result belongs to.
    pub key: String,
    /// The stored output files, sorted by path.
    pub outputs: Vec<StoredOutput>,
    /// What the caller stored beside the outputs (e.g. the step's summary).
    pub meta: Value,
}

/// One stored output file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredOutput {
    /// Repo-relative, `/`-separated.
    pub path: String,
    /// Size in bytes.
    pub size: u64,
    /// Lowercase sha256 hex of the content.
    pub sha256: String,
    /// The content itself, base64, when it is at most [`INLINE_MAX`] bytes;
    /// otherwise it is the blob named by `sha256` (old layout: `outputs/<index>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inline: Option<String>,
    /// The permission bits of the output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<u32>,
}

/// The keys of one plan's steps as of its latest run.
#[derive(Serialize, Deserialize, Default)]
struct LastKeys {
    /// The [`KeysFingerprint`] of the keys the last run recorded; first, so
    /// it is read without reading the rest.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    fingerprint: String,
    plan: String,
    steps: BTreeMap<String, ReuseKey>,
}

/// An order-free digest of a run's `(step, key digest)` pairs, built as
/// the steps finish: a run whose keys have the fingerprint the last-keys
/// file was written with has nothing to add to it, and knows so without
/// reading the file's ~400 KB of keys (1,000 steps) or writing them again.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct KeysFingerprint([u8; 32]);

impl KeysFingerprint {
    /// Adds step `step`, whose key has the digest `digest`.
    pub fn add(&mut self, step: &str, digest: &str) {
        use sha2::{Digest as _, Sha256};
        let mut pair = Sha256::new();
        pair.update(step.as_bytes());
        pair.update([0]);
        pair.update(digest.as_bytes());
        for (mine, theirs) in self.0.iter_mut().zip(pair.finalize()) {
            *mine ^= theirs;
        }
    }

    fn hex(&self) -> String {
        super::key::to_hex(&self.0)
    }
}

/// Up to the first `max` bytes of the file at `path` (none if unreadable).
fn read_head(path: &Path, max: u64) -> Vec<u8> {
    use std::io::Read as _;
    let mut head = Vec::new();
    if let Ok(file) = fs::File::open(path) {
        let _ = file.take(max).read_to_end(&mut head);
    }
    head
}

/// Says the tree changed when dropped (after a restore's writes, whichever
/// way they end).
struct TreeChanged;

impl Drop for TreeChanged {
    fn drop(&mut self) {
        super::hash_cache::tree_changed();
    }
}

/// Where an old-layout entry keeps its `index`-th output.
fn stored_output(outputs_dir: &Path, index: usize) -> PathBuf {
    outputs_dir.join(index.to_string())
}

/// sha256 of no bytes: an empty output is checked without reading it.
const EMPTY_SHA256: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

impl Store {
    /// The store under `state_dir`. Nothing is read until the first lookup
    /// and nothing written until the first store. Opening a store starts a
    /// run's view of the repo: directories resolved by an earlier run are
    /// resolved again.
    pub fn open(state_dir: &Path) -> Self {
        forget_resolved();
        Self {
            dir: state_dir.join("store"),
            swept: Arc::new(Once::new()),
            state: Arc::new(Shared::default()),
        }
    }

    fn index(&self) -> std::sync::MutexGuard<'_, Loaded> {
        self.state
            .index
            .get_or_init(|| Mutex::new(index::load(&self.dir.join(INDEX_FILE))))
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes the index's shared lock for as long as this store lives (a
    /// run), so no `gc` compacts it or deletes a blob this run may restore.
    pub fn hold(&self) -> Result<(), ReuseError> {
        self.appender().map(drop)
    }

    /// The run's appender, under its lock: opened (taking the index's
    /// shared lock) by the first caller, so whoever writes first holds it.
    fn appender(&self) -> Result<MutexGuard<'_, Option<Appender>>, ReuseError> {
        let mut appender = self
            .state
            .appender
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if appender.is_none() {
            *appender = Some(Appender::open(&self.dir)?);
        }
        Ok(appender)
    }

    /// [`Self::open`], and starts reading the index on another thread,
    /// under the run's hold (as [`Self::hold`]), so the parse overlaps what
    /// the run does before its first lookup (creating its journal is
    /// mostly waiting for the disk). A store that does not exist yet is
    /// left alone: nothing is created before the run is under way.
    pub fn read_ahead(state_dir: &Path) -> Self {
        let opened = Self::open(state_dir);
        if !opened.dir.join(INDEX_FILE).is_file() {
            return opened;
        }
        let store = opened.clone();
        let spawned = std::thread::Builder::new()
            .name("store-index".into())
            .spawn(move || {
                let _ = store.hold();
                drop(store.index());
            });
        // No thread: the index is read at the first lookup, as without.
        drop(spawned);
        opened
    }

    /// Ends a run's use of the store: lets go of its hold on the index (see
    /// [`Self::hold`]) and hands back the index as read, for the caller to
    /// free where it likes (a big one takes a while). A lookup in this store
    /// afterwards finds nothing (a miss, never a wrong hit).
    pub(crate) fn release(&self) -> Option<Loaded> {
        *self
            .state
            .appender
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = None;
        let index = self.state.index.get()?;
        Some(std::mem::take(
            &mut *index.lock().unwrap_or_else(PoisonError::into_inner),
        ))
    }

    /// What reading the index found damaged (one line each, for the user);
    /// reads the index if that has not happened yet.
    pub fn warnings(&self) -> Vec<String> {
        self.index().warnings.clone()
    }

    fn has_legacy(&self) -> bool {
        *self
            .state
            .legacy
            .get_or_init(|| !self.legacy_digests().is_empty())
    }

    /// Where an old-layout entry for `digest` lives (whether or not it exists).
    pub fn entry_dir(&self, digest: &str) -> PathBuf {
        let shard = digest.get(..2).unwrap_or("__");
        self.dir.join(shard).join(digest)
    }

    /// Where the blob with content `sha256` lives.
    fn blob(&self, sha256: &str) -> PathBuf {
        self.dir
            .join(BLOBS_DIR)
            .join(sha256.get(..2).unwrap_or("__"))
            .join(sha256)
    }

    /// Stores the `outputs` (repo-relative file paths under `root`) of a step
    /// that succeeded, under `key`, with the caller's `meta`.
    ///
    /// Call only after the step succeeded. A declared output that does not
    /// exist refuses the whole entry. When an intact entry for the key exists
    /// already (stored earlier, by a concurrent run, or in the old layout),
    /// it is kept and returned and nothing is written.
    pub fn put<S: AsRef<str>>(
        &self,
        key: &ReuseKey,
        root: &Path,
        outputs: &[S],
        meta: Value,
    ) -> Result<Entry, ReuseError> {
        // One canonical text serves the digest and the record.
        let canonical = key.canonical_json();
        let digest = sha256_hex(canonical.as_bytes());
        let outputs: BTreeSet<&str> = outputs.iter().map(AsRef::as_ref).collect();
        let canonical_root = canonical_root(root)?;
        // Empty outputs (a `touch`ed stamp) are stored from their stat alone.
        let mut empty: BTreeMap<&str, Option<u32>> = BTreeMap::new();
        for output in &outputs {
            check_rel_path(output)?;
            match resolve_inside(&canonical_root, &join_rel(root, output), output)? {
                None => {
                    return Err(ReuseError::MissingOutput {
                        path: (*output).to_owned(),
                    });
                }
                Some(found) if !found.is_file => {
                    return Err(ReuseError::OutputNotAFile {
                        path: (*output).to_owned(),
                    });
                }
                Some(found) if found.metadata.len() == 0 => {
                    empty.insert(output, mode_of(&found.metadata));
                }
                Some(_) => {}
            }
        }
        if let Some(existing) = self.lookup(&digest) {
            // Produced again: as recently used as a reuse, for `gameplan gc`.
            self.mark_used(&digest);
            return Ok(existing);
        }
        self.swept.call_once(|| {
            self.sweep_abandoned_temp_dirs();
        });
        // Held (shared) before any blob is written, so a compacting gc never
        // takes a blob this run is about to record for unreferenced.
        let mut appender = self.appender()?;
        // Another thread of this run may have stored it while this one waited.
        if let Some(existing) = self.lookup(&digest) {
            return Ok(existing);
        }
        let mut stored = Vec::with_capacity(outputs.len());
        for output in &outputs {
            stored.push(match empty.get(output) {
                Some(mode) => Small {
                    bytes: Vec::new(),
                    mode: *mode,
                }
                .into_stored(output),
                None => self.store_output(root, output)?,
            });
        }
        let entry = Entry {
            format: INDEX_ENTRY_FORMAT,
            key: digest.clone(),
            outputs: stored,
            meta,
        };
        let record = Record::Put {
            at: index::now_ms(),
            entry,
            key: canonical,
        };
        let index_path = self.dir.join(INDEX_FILE);
        appender
            .as_mut()
            .map_or(Ok(()), |a| a.append(&record))
            .map_err(io_error("append to", &index_path))?;
        let Record::Put { entry, key, .. } = record else {
            unreachable!("built as a put above")
        };
        // This run's own: as used as what it reused (see flush_used).
        self.state
            .used
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(digest.clone());
        // Still under the appender's lock: a thread waiting to store the
        // same key finds it on its second look.
        self.index().entries.insert(
            digest,
            Indexed {
                entry: entry.clone(),
                key_text: key,
                last_used: SystemTime::now(),
                record_bytes: 0,
            },
        );
        Ok(entry)
    }

    /// One output, inline or as a blob under its content hash.
    fn store_output(&self, root: &Path, output: &str) -> Result<StoredOutput, ReuseError> {
        let source = join_rel(root, output);
        if let Some(small) = read_small(&source)? {
            return Ok(small.into_stored(output));
        }
        let temp = self.dir.join(format!("{TEMP_PREFIX}{}", unique_suffix()));
        let copied = copy_hashing(&source, &temp).and_then(|(size, sha256)| {
            let blob = self.blob(&sha256);
            let placed = fs::rename(&temp, &blob).or_else(|error| {
                if error.kind() != io::ErrorKind::NotFound {
                    return Err(error);
                }
                // The blob's shard is made with its first blob.
                let shard = blob.parent().unwrap_or(&self.dir);
                fs::create_dir_all(shard)?;
                fs::rename(&temp, &blob)
            });
            placed.map_err(io_error("move into place", &blob))?;
            Ok((size, sha256))
        });
        let (size, sha256) = match copied {
            Ok(done) => done,
            Err(error) => {
                let _ = fs::remove_file(&temp);
                return Err(error);
            }
        };
        Ok(StoredOutput {
            path: output.to_owned(),
            size,
            sha256,
            inline: None,
            mode: file_mode(&source),
        })
    }

    /// The intact entry for `digest`: its record is whole and every blob is
    /// present with its recorded size (old layout: `entry.json` parses and
    /// every stored output is present). Anything less is a miss.
    pub fn lookup(&self, digest: &str) -> Option<Entry> {
        if !is_sha256_hex(digest) {
            return None;
        }
        let indexed = self.index().entries.get(digest).map(|i| i.entry.clone());
        if let Some(entry) = indexed {
            return self.blobs_present(&entry).then_some(entry);
        }
        if self.has_legacy() {
            return self.legacy_lookup(digest);
        }
        None
    }

    fn blobs_present(&self, entry: &Entry) -> bool {
        entry.outputs.iter().all(|output| {
            check_rel_path(&output.path).is_ok()
                && is_sha256_hex(&output.sha256)
                && match &output.inline {
                    // Decoded (and hashed) on restore; here only the length.
                    Some(inline) => inline.len() as u64 == output.size.div_ceil(3) * 4,
                    None => fs::symlink_metadata(self.blob(&output.sha256))
                        .is_ok_and(|m| m.is_file() && m.len() == output.size),
                }
        })
    }

    fn legacy_lookup(&self, digest: &str) -> Option<Entry> {
        let dir = self.entry_dir(digest);
        let bytes = fs::read(dir.join(ENTRY_FILE)).ok()?;
        let entry: Entry = serde_json::from_slice(&bytes).ok()?;
        if entry.format != ENTRY_FORMAT || entry.key != digest {
            return None;
        }
        let outputs = dir.join(OUTPUTS_DIR);
        for (index, output) in entry.outputs.iter().enumerate() {
            check_rel_path(&output.path).ok()?;
            if !is_sha256_hex(&output.sha256) {
                return None;
            }
            if let Some(inline) = &output.inline {
                if inline.len() as u64 != output.size.div_ceil(3) * 4 {
                    return None;
                }
                continue;
            }
            let metadata = fs::symlink_metadata(stored_output(&outputs, index)).ok()?;
            if !metadata.is_file() || metadata.len() != output.size {
                return None;
            }
        }
        Some(entry)
    }

    /// The key a stored entry was made from, if intact.
    pub fn stored_key(&self, digest: &str) -> Option<ReuseKey> {
        if !is_sha256_hex(digest) {
            return None;
        }
        let text = self
            .index()
            .entries
            .get(digest)
            .map(|indexed| indexed.key_text.clone());
        let bytes = match text {
            Some(text) => text.into_bytes(),
            None => fs::read(self.entry_dir(digest).join(KEY_FILE)).ok()?,
        };
        let key: ReuseKey = serde_json::from_slice(&bytes).ok()?;
        (key.digest() == digest).then_some(key)
    }

    /// Copies the entry's outputs back into the working tree under `root`.
    ///
    /// Files that already have the recorded content are left alone; others
    /// are replaced whole (temp + rename), so a reader never sees half a
    /// file. Parent directories are created, but never through a symlink
    /// leading outside `root`. A stored file whose content no longer matches
    /// its record is refused rather than restored.
    ///
    /// This trusts the entry's paths (checked only to stay inside `root`);
    /// [`Self::restore_within`] also checks them against the step.
    pub fn restore(&self, entry: &Entry, root: &Path) -> Result<(), ReuseError> {
        self.restore_within(entry, root, &RestoreScope::default())
    }

    /// [`Self::restore`], writing only what `scope` allows: an entry naming a
    /// path outside the step's declared outputs (an edited or foreign
    /// entry) is refused before anything is written, and a path `scope`
    /// keeps (an input, the plan file) is left alone.
    pub fn restore_within(
        &self,
        entry: &Entry,
        root: &Path,
        scope: &RestoreScope,
    ) -> Result<(), ReuseError> {
        check_scope(entry, scope, &self.shown_entry(entry))?;
        self.restore_checking(entry, root, |_| Ok(scope.keep.clone()))
    }

    /// [`Self::restore_within`] for the reuse path: `scope` is asked for
    /// only when some output must be written (`None` refuses the entry). When every output already
    /// has its recorded content (a fully reused tree), restoring costs one
    /// `lstat` per output and nothing else.
    pub fn restore_lazily(
        &self,
        entry: &Entry,
        root: &Path,
        scope: impl FnOnce() -> Option<RestoreScope>,
    ) -> Result<(), ReuseError> {
        self.restore_checking(entry, root, |entry| {
            let scope = scope().ok_or_else(|| {
                io_error("decide what may be restored under", root)(io::Error::other(
                    "the step's declared outputs or inputs could not be read",
                ))
            })?;
            check_scope(entry, &scope, &self.shown_entry(entry))?;
            Ok(scope.keep)
        })
    }

    fn shown_entry(&self, entry: &Entry) -> String {
        if entry.format == ENTRY_FORMAT {
            self.entry_dir(&entry.key).display().to_string()
        } else {
            format!(
                "{} (record {})",
                self.dir.join(INDEX_FILE).display(),
                entry.key
            )
        }
    }

    /// Restores `entry`; `keep_for` is called once, before the first write:
    /// it refuses the whole entry or names the paths to leave alone.
    fn restore_checking(
        &self,
        entry: &Entry,
        root: &Path,
        keep_for: impl FnOnce(&Entry) -> Result<BTreeSet<String>, ReuseError>,
    ) -> Result<(), ReuseError> {
        // Named only in an error: a fully reused step formats no path.
        let shown_entry = || self.shown_entry(entry);
        if !is_sha256_hex(&entry.key) {
            return Err(ReuseError::StoreCorrupt {
                path: ENTRY_FILE.to_owned(),
                entry: shown_entry(),
            });
        }
        for output in &entry.outputs {
            check_rel_path(&output.path)?;
        }
        let canonical_root = match canonical_root(root) {
            Ok(real) => real,
            // A kind that restores into its own (new) directory.
            Err(_) if fs::symlink_metadata(root).is_err() => {
                fs::create_dir_all(root).map_err(io_error("create", root))?;
                canonical_root(root)?
            }
            Err(error) => return Err(error),
        };
        let mut to_write = Vec::new();
        for (index, output) in entry.outputs.iter().enumerate() {
            let target = join_rel(root, &output.path);
            let parent = target.parent().unwrap_or(root);
            // Checked first, so not even a comparison reads outside the root.
            create_dir_inside(&canonical_root, root, parent)?;
            if !already_restored(&target, output)? {
                to_write.push((index, output, target));
            }
        }
        if to_write.is_empty() {
            return Ok(());
        }
        let keep = keep_for(entry)?;
        // Before and after the writes: inputs hashed meanwhile are not trusted.
        super::hash_cache::tree_changed();
        let _changed = TreeChanged;
        let outputs_dir = self.entry_dir(&entry.key).join(OUTPUTS_DIR);
        for (index, output, target) in to_write {
            if keep.contains(&output.path) {
                continue;
            }
            let parent = target.parent().unwrap_or(root);
            let name = target
                .file_name()
                .map_or_else(String::new, |name| name.to_string_lossy().into_owned());
            let temp = parent.join(format!(".{name}.gameplan-tmp-{}", unique_suffix()));
            let copied = match &output.inline {
                Some(inline) => write_inline(inline, output.mode, &temp),
                None if entry.format == ENTRY_FORMAT => {
                    copy_hashing(&stored_output(&outputs_dir, index), &temp)
                }
                None => copy_hashing(&self.blob(&output.sha256), &temp)
                    .and_then(|copied| set_mode(&temp, output.mode).map(|()| copied)),
            };
            let copied = copied.and_then(|(size, sha256)| {
                if size == output.size && sha256 == output.sha256 {
                    fs::rename(&temp, &target).map_err(io_error("replace", &target))
                } else {
                    Err(ReuseError::StoreCorrupt {
                        path: output.path.clone(),
                        entry: shown_entry(),
                    })
                }
            });
            if copied.is_err() {
                let _ = fs::remove_file(&temp);
            }
            copied?;
        }
        Ok(())
    }

    /// Remembers the keys of `plan`'s steps as of this run (merged over the
    /// earlier ones), so a later run can say why a step is not reused. One
    /// file per plan, written once per run: a plan never runs twice at once.
    pub fn record_last(
        &self,
        plan: &str,
        keys: &BTreeMap<String, ReuseKey>,
    ) -> Result<(), ReuseError> {
        let mut fingerprint = KeysFingerprint::default();
        for (step, key) in keys {
            fingerprint.add(step, &key.digest());
        }
        self.record_last_keys(plan, keys, &fingerprint)
    }

    /// [`Self::record_last`] with the keys' fingerprint already made (as
    /// the steps finished): when the file was written with the same
    /// fingerprint (a fully reused run), it is left as it is, read no
    /// further than its first line's first 100 bytes.
    fn record_last_keys(
        &self,
        plan: &str,
        keys: &BTreeMap<String, ReuseKey>,
        fingerprint: &KeysFingerprint,
    ) -> Result<(), ReuseError> {
        if keys.is_empty() {
            return Ok(());
        }
        let path = self.last_path(plan);
        let fingerprint = fingerprint.hex();
        if read_head(&path, 100)
            .starts_with(format!("{{\"fingerprint\":\"{fingerprint}\"").as_bytes())
        {
            return Ok(());
        }
        let mut record = self.read_last(plan);
        let unchanged = record.plan == plan
            && record.fingerprint == fingerprint
            && keys
                .iter()
                .all(|(step, key)| record.steps.get(step) == Some(key));
        if unchanged {
            return Ok(());
        }
        plan.clone_into(&mut record.plan);
        record.fingerprint = fingerprint;
        record
            .steps
            .extend(keys.iter().map(|(step, key)| (step.clone(), key.clone())));
        let bytes = serde_json::to_vec(&record).map_err(|error| {
            io_error("encode", &path)(io::Error::new(io::ErrorKind::InvalidData, error))
        })?;
        write_atomically(&path, &bytes)
    }

    /// What a run leaves at its end: its steps' keys (see
    /// [`Self::record_last`]; `fingerprint` is theirs) and the entries it
    /// reused ([`Self::flush_used`]). Best effort, both.
    pub fn finish_run(
        &self,
        plan: &str,
        keys: &BTreeMap<String, ReuseKey>,
        fingerprint: &KeysFingerprint,
    ) -> Result<(), ReuseError> {
        let used = self.flush_used();
        self.record_last_keys(plan, keys, fingerprint).and(used)
    }

    /// The keys last recorded for `plan`'s steps (empty if none or unreadable).
    pub fn last_keys(&self, plan: &str) -> BTreeMap<String, ReuseKey> {
        self.read_last(plan).steps
    }

    fn read_last(&self, plan: &str) -> LastKeys {
        fs::read(self.last_path(plan))
            .ok()
            .and_then(|bytes| serde_json::from_slice::<LastKeys>(&bytes).ok())
            .filter(|record| record.plan == plan)
            .unwrap_or_default()
    }

    /// Notes that the entry for `digest` was just reused: `gameplan gc`
    /// removes the entries used longest ago first. An indexed entry's use
    /// is remembered and written by [`Self::flush_used`], once per run;
    /// an old-layout entry's `entry.json` gets a new mtime. Best effort.
    pub fn mark_used(&self, digest: &str) {
        if !is_sha256_hex(digest) {
            return;
        }
        if self.index().entries.contains_key(digest) {
            self.state
                .used
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(digest.to_owned());
            return;
        }
        let path = self.entry_dir(digest).join(ENTRY_FILE);
        let _ = nix::sys::stat::utimensat(
            nix::fcntl::AT_FDCWD,
            &path,
            &nix::sys::time::TimeSpec::UTIME_OMIT,
            &nix::sys::time::TimeSpec::UTIME_NOW,
            nix::sys::stat::UtimensatFlags::NoFollowSymlink,
        );
    }

    /// Writes the uses noted by [`Self::mark_used`] as one record. Call at
    /// the end of a run; a run killed before it only loses those marks
    /// (`gc` then thinks the entries a little older than they are).
    ///
    /// gc removes the least recently used first, so a use is written only
    /// where it changes that order: for an entry no newer than some entry
    /// this run did not use. A tree reused run after run appends nothing.
    pub fn flush_used(&self) -> Result<(), ReuseError> {
        let used = std::mem::take(
            &mut *self
                .state
                .used
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        let keys: Vec<String> = {
            let index = self.index();
            let newest_unused = index
                .entries
                .iter()
                .filter(|(digest, _)| !used.contains(*digest))
                .map(|(_, indexed)| indexed.last_used)
                .max();
            used.into_iter()
                .filter(|digest| {
                    index.entries.get(digest).is_some_and(|indexed| {
                        newest_unused.is_some_and(|newest| indexed.last_used < newest)
                    })
                })
                .collect()
        };
        if keys.is_empty() {
            return Ok(());
        }
        let mut appender = self.appender()?;
        let at = index::now_ms();
        let index_path = self.dir.join(INDEX_FILE);
        appender
            .as_mut()
            .map_or(Ok(()), |a| a.append(&Record::Used { at, keys }))
            .map_err(io_error("append to", &index_path))
    }

    fn last_path(&self, plan: &str) -> PathBuf {
        // Hashed so any plan name is a safe file name.
        self.dir
            .join(LAST_DIR)
            .join(format!("{}.json", sha256_hex(plan.as_bytes())))
    }
}

fn remove_any(path: &Path) -> bool {
    match fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => fs::remove_dir_all(path).is_ok(),
        Ok(_) => fs::remove_file(path).is_ok(),
        Err(_) => false,
    }
}

/// Refuses `entry` whole when it names a path outside `scope`'s outputs.
fn check_scope(entry: &Entry, scope: &RestoreScope, shown_entry: &str) -> Result<(), ReuseError> {
    for output in &entry.outputs {
        if scope
            .outputs
            .as_ref()
            .is_some_and(|outputs| !outputs.matches(&output.path))
        {
            return Err(ReuseError::RestoreOutsideOutputs {
                path: output.path.clone(),
                entry: shown_entry.to_owned(),
            });
        }
    }
    Ok(())
}

/// Whether the writer named by a temp file's `<pid>-<n>` suffix is known
/// to be gone. Never signals anything (signal 0 only asks), and a pid that
/// does not parse, or is 0 or negative (which would name a process group),
/// is not known to be dead.
fn writer_is_dead(suffix: &str) -> bool {
    let Some(pid) = suffix
        .split('-')
        .next()
        .and_then(|pid| pid.parse::<i32>().ok())
        .filter(|&pid| pid > 0)
    else {
        return false;
    };
    matches!(
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None),
        Err(nix::errno::Errno::ESRCH)
    )
}

/// An output small enough to live inside its entry's record.
struct Small {
    bytes: Vec<u8>,
    mode: Option<u32>,
}

impl Small {
    fn into_stored(self, path: &str) -> StoredOutput {
        use base64::Engine as _;
        StoredOutput {
            path: path.to_owned(),
            size: self.bytes.len() as u64,
            sha256: sha256_hex(&self.bytes),
            inline: Some(base64::engine::general_purpose::STANDARD.encode(&self.bytes)),
            mode: self.mode,
        }
    }
}

/// The content of `path` if it is at most [`INLINE_MAX`] bytes. Decided on
/// the bytes read, not on the size reported before reading.
fn read_small(path: &Path) -> Result<Option<Small>, ReuseError> {
    use std::io::Read as _;
    let file = fs::File::open(path).map_err(io_error("open", path))?;
    let metadata = file
        .metadata()
        .map_err(io_error("read metadata of", path))?;
    if metadata.len() > INLINE_MAX {
        return Ok(None);
    }
    let mut bytes = Vec::with_capacity(usize::try_from(metadata.len()).unwrap_or(0));
    file.take(INLINE_MAX + 1)
        .read_to_end(&mut bytes)
        .map_err(io_error("read", path))?;
    if bytes.len() as u64 > INLINE_MAX {
        return Ok(None);
    }
    Ok(Some(Small {
        bytes,
        mode: mode_of(&metadata),
    }))
}

#[cfg(unix)]
#[expect(
    clippy::unnecessary_wraps,
    reason = "None where a platform has no permission bits"
)]
fn mode_of(metadata: &fs::Metadata) -> Option<u32> {
    use std::os::unix::fs::PermissionsExt as _;
    Some(metadata.permissions().mode() & 0o7777)
}

#[cfg(not(unix))]
fn mode_of(_metadata: &fs::Metadata) -> Option<u32> {
    None
}

fn file_mode(path: &Path) -> Option<u32> {
    fs::metadata(path).ok().as_ref().and_then(mode_of)
}

/// Gives `path` the recorded permission bits (a blob is shared by entries
/// whose outputs may differ in mode).
fn set_mode(path: &Path, mode: Option<u32>) -> Result<(), ReuseError> {
    #[cfg(unix)]
    if let Some(mode) = mode {
        use std::os::unix::fs::PermissionsExt as _;
        fs::set_permissions(path, fs::Permissions::from_mode(mode))
            .map_err(io_error("set permissions of", path))?;
    }
    #[cfg(not(unix))]
    let _ = (path, mode);
    Ok(())
}

/// Writes an inline output's content to the new file `to` with its mode;
/// returns the size and sha256 of what was decoded, for the caller to check.
fn write_inline(inline: &str, mode: Option<u32>, to: &Path) -> Result<(u64, String), ReuseError> {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(inline)
        .map_err(|error| {
            io_error("decode", to)(io::Error::new(io::ErrorKind::InvalidData, error))
        })?;
    write_new(to, &bytes)?;
    set_mode(to, mode)?;
    Ok((bytes.len() as u64, sha256_hex(&bytes)))
}

fn write_new(path: &Path, bytes: &[u8]) -> Result<(), ReuseError> {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(io_error("create", path))?;
    file.write_all(bytes).map_err(io_error("write", path))
}

/// Whether `target` is a regular file with exactly the recorded content.
/// An empty file needs no read: its hash is known.
fn already_restored(target: &Path, output: &StoredOutput) -> Result<bool, ReuseError> {
    match fs::symlink_metadata(target) {
        Ok(metadata) if metadata.is_dir() => Err(ReuseError::RestoreBlocked {
            path: output.path.clone(),
        }),
        Ok(metadata) if metadata.is_file() && metadata.len() == output.size => {
            if output.size == 0 {
                return Ok(output.sha256 == EMPTY_SHA256);
            }
            Ok(hash_file(target).is_ok_and(|(_, sha256)| sha256 == output.sha256))
        }
        // A symlink or a different file is replaced by the rename, not written through.
        Ok(_) => Ok(false),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(error) => Err(io_error("read metadata of", target)(error)),
    }
}

/// Creates `dir` (under `root`) after checking that its deepest existing
/// ancestor resolves inside the root, so no directory is created through a
/// symlink leading out of the repo. A directory already checked this run
/// costs nothing.
fn create_dir_inside(canonical_root: &Path, root: &Path, dir: &Path) -> Result<(), ReuseError> {
    if is_known_dir(dir) {
        return Ok(());
    }
    let mut existing = dir;
    while fs::symlink_metadata(existing).is_err() {
        match existing.parent() {
            Some(parent) if parent.starts_with(root) => existing = parent,
            _ => break,
        }
    }
    let shown = existing
        .strip_prefix(root)
        .unwrap_or(existing)
        .display()
        .to_string();
    match resolve_inside(canonical_root, existing, &shown)? {
        Some(found) if found.is_dir => {}
        _ => return Err(ReuseError::RestoreBlocked { path: shown }),
    }
    if existing == dir {
        // It is there, and a directory inside the root: nothing to make.
        return Ok(());
    }
    fs::create_dir_all(dir).map_err(io_error("create", dir))
}

#[cfg(test)]
mod tests;

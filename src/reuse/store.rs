//! The result store: outputs of succeeded steps, by reuse key digest.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs::{self, OpenOptions};
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Once, OnceLock, PoisonError};
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
        let mut appender = self
            .state
            .appender
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if appender.is_none() {
            *appender = Some(Appender::open(&self.dir)?);
        }
        Ok(())
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
        let mut appender = self
            .state
            .appender
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if appender.is_none() {
            *appender = Some(Appender::open(&self.dir)?);
        }
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
        let mut appender = self
            .state
            .appender
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if appender.is_none() {
            *appender = Some(Appender::open(&self.dir)?);
        }
        let at = index::now_ms();
        let index_path = self.dir.join(INDEX_FILE);
        appender
            .as_mut()
            .map_or(Ok(()), |a| a.append(&Record::Used { at, keys }))
            .map_err(io_error("append to", &index_path))
    }

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
    fn legacy_digests(&self) -> Vec<String> {
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

    fn remove_unreferenced_blobs(&self, kept: &HashMap<String, Indexed>) -> u64 {
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
mod tests {
    use super::*;
    use crate::reuse::why_not_reused;
    use serde_json::json;
    use std::sync::{Arc, Barrier};
    use std::thread;

    struct Fixture {
        root: tempfile::TempDir,
        state: tempfile::TempDir,
        store: Store,
    }

    fn fixture(files: &[(&str, &str)]) -> Fixture {
        let root = tempfile::tempdir().expect("root");
        let state = tempfile::tempdir().expect("state");
        for (path, content) in files {
            write_file(root.path(), path, content);
        }
        let store = Store::open(state.path());
        Fixture { root, state, store }
    }

    fn write_file(root: &Path, rel: &str, content: &str) {
        let path = join_rel(root, rel);
        fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        fs::write(path, content).expect("write");
    }

    fn read(root: &Path, rel: &str) -> String {
        fs::read_to_string(join_rel(root, rel)).expect("read")
    }

    fn key(run: &str) -> ReuseKey {
        let mut key = ReuseKey::new("command", json!({"run": run}));
        key.inputs.insert("src/main.c".into(), sha256_hex(b"main"));
        key
    }

    const OUTPUTS: [&str; 4] = [
        "build/big.log",
        "build/bin/app",
        "build/reports/deep/r.json",
        "top.txt",
    ];

    /// Over [`INLINE_MAX`]: stored as a file under `outputs/`.
    fn big() -> String {
        "a line of a log that is too long to keep inline\n".repeat(100)
    }

    fn built() -> Fixture {
        let big = big();
        fixture(&[
            ("build/bin/app", "#!/bin/sh\necho app\n"),
            ("build/big.log", &big),
            ("build/reports/deep/r.json", "{\"ok\":true}"),
            ("top.txt", "top"),
            ("unrelated.txt", "not an output"),
        ])
    }

    fn temp_dirs(store_dir: &Path) -> Vec<String> {
        fs::read_dir(store_dir)
            .map(|listing| {
                listing
                    .filter_map(Result::ok)
                    .map(|item| item.file_name().to_string_lossy().into_owned())
                    .filter(|name| name.starts_with(TEMP_PREFIX))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Every file under `<state>/store`, relative, sorted.
    fn store_files(state: &Path) -> Vec<String> {
        let store = state.join("store");
        let mut files: Vec<String> = walkdir::WalkDir::new(&store)
            .into_iter()
            .filter_map(Result::ok)
            .filter(|e| e.file_type().is_file())
            .map(|e| super::super::paths::rel_string(&store, e.path()).expect("utf-8"))
            .collect();
        files.sort();
        files
    }

    /// Appends a whole (checksummed) record for `entry`, as a run would.
    fn append_record(f: &Fixture, key: &ReuseKey, entry: &Entry) {
        append_record_at(f, key, entry, SystemTime::now());
    }

    fn append_record_at(f: &Fixture, key: &ReuseKey, entry: &Entry, at: SystemTime) {
        let at = u64::try_from(
            at.duration_since(SystemTime::UNIX_EPOCH)
                .expect("after 1970")
                .as_millis(),
        )
        .expect("fits");
        let line = index::encode(&Record::Put {
            at,
            entry: entry.clone(),
            key: key.canonical_json(),
        });
        let path = f.state.path().join("store").join(INDEX_FILE);
        let mut file = OpenOptions::new()
            .append(true)
            .create(true)
            .open(path)
            .expect("open index");
        file.write_all(&line).expect("append");
    }

    /// Writes an entry in the old layout (before the index), as gameplan
    /// did: `key.json`, the big outputs as `outputs/<i>`, `entry.json` last.
    fn write_old_entry(f: &Fixture, key: &ReuseKey, outputs: &[&str]) -> Entry {
        let dir = Store::open(f.state.path()).entry_dir(&key.digest());
        fs::create_dir_all(&dir).expect("mkdir");
        fs::write(dir.join(KEY_FILE), key.canonical_json()).expect("key.json");
        let mut stored = Vec::new();
        for (index, output) in outputs.iter().enumerate() {
            let source = join_rel(f.root.path(), output);
            if let Some(small) = read_small(&source).expect("read") {
                stored.push(small.into_stored(output));
                continue;
            }
            fs::create_dir_all(dir.join(OUTPUTS_DIR)).expect("mkdir");
            let (size, sha256) =
                copy_hashing(&source, &stored_output(&dir.join(OUTPUTS_DIR), index)).expect("copy");
            stored.push(StoredOutput {
                path: (*output).to_owned(),
                size,
                sha256,
                inline: None,
                mode: None,
            });
        }
        let entry = Entry {
            format: ENTRY_FORMAT,
            key: key.digest(),
            outputs: stored,
            meta: Value::Null,
        };
        fs::write(
            dir.join(ENTRY_FILE),
            serde_json::to_vec_pretty(&entry).expect("json"),
        )
        .expect("entry.json");
        entry
    }

    #[test]
    fn put_lookup_restore_round_trip_with_nested_paths() {
        let f = built();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let app = f.root.path().join("build/bin/app");
            fs::set_permissions(&app, fs::Permissions::from_mode(0o755)).expect("chmod");
        }
        let key = key("make");
        let digest = key.digest();
        assert!(f.store.lookup(&digest).is_none());

        let entry = f
            .store
            .put(
                &key,
                f.root.path(),
                &OUTPUTS,
                json!({"summary": "built app"}),
            )
            .expect("put");
        assert_eq!(entry.key, digest);
        assert_eq!(
            entry
                .outputs
                .iter()
                .map(|o| o.path.as_str())
                .collect::<Vec<_>>(),
            OUTPUTS
        );
        assert_eq!(entry.outputs[3].size, 3);
        assert_eq!(entry.outputs[3].sha256, sha256_hex(b"top"));
        // Small outputs live in the record; only the big one is a file,
        // named by its content; the entry itself is one line of the index.
        let inline: Vec<bool> = entry.outputs.iter().map(|o| o.inline.is_some()).collect();
        assert_eq!(inline, [false, true, true, true]);
        assert_eq!(
            store_files(f.state.path()),
            [
                format!(
                    "blobs/{}/{}",
                    &entry.outputs[0].sha256[..2],
                    entry.outputs[0].sha256
                ),
                "index.log".to_owned(),
            ]
        );
        assert_eq!(f.store.lookup(&digest), Some(entry.clone()));
        assert_eq!(f.store.stored_key(&digest), Some(key.clone()));
        // A later run (a new store value) reads the same from the index.
        let later = Store::open(f.state.path());
        assert_eq!(later.lookup(&digest), Some(entry.clone()));
        assert_eq!(later.stored_key(&digest), Some(key.clone()));
        assert!(later.warnings().is_empty());

        // Restore into a fresh checkout: nested directories are created.
        let fresh = tempfile::tempdir().expect("fresh");
        f.store.restore(&entry, fresh.path()).expect("restore");
        for path in OUTPUTS {
            assert_eq!(
                read(fresh.path(), path),
                read(f.root.path(), path),
                "{path}"
            );
        }
        assert!(!fresh.path().join("unrelated.txt").exists());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = fs::metadata(fresh.path().join("build/bin/app"))
                .expect("metadata")
                .permissions()
                .mode();
            assert_eq!(mode & 0o111, 0o111, "executables stay executable");
        }
    }

    #[cfg(unix)]
    #[test]
    fn restore_leaves_matching_files_alone_and_replaces_others() {
        use std::os::unix::fs::MetadataExt;
        let f = built();
        let entry = f
            .store
            .put(&key("make"), f.root.path(), &OUTPUTS, Value::Null)
            .expect("put");
        let inode = |rel: &str| {
            fs::metadata(join_rel(f.root.path(), rel))
                .expect("metadata")
                .ino()
        };
        let top_before = inode("top.txt");
        write_file(f.root.path(), "build/reports/deep/r.json", "{\"ok\":false}");
        fs::remove_file(f.root.path().join("build/bin/app")).expect("rm");

        f.store.restore(&entry, f.root.path()).expect("restore");
        assert_eq!(
            inode("top.txt"),
            top_before,
            "an unchanged file is not rewritten"
        );
        assert_eq!(
            read(f.root.path(), "build/reports/deep/r.json"),
            "{\"ok\":true}"
        );
        assert_eq!(
            read(f.root.path(), "build/bin/app"),
            "#!/bin/sh\necho app\n"
        );
    }

    #[test]
    fn a_deleted_or_truncated_stored_output_is_a_miss() {
        let f = built();
        let key = key("make");
        let digest = key.digest();
        f.store
            .put(&key, f.root.path(), &OUTPUTS, Value::Null)
            .expect("put");
        let entry = f.store.lookup(&digest).expect("stored");
        let stored = |rel: &str| {
            let index = entry
                .outputs
                .iter()
                .position(|o| o.path == rel)
                .expect("stored output");
            f.store.blob(&entry.outputs[index].sha256)
        };

        fs::write(stored("build/big.log"), "t").expect("truncate");
        assert!(f.store.lookup(&digest).is_none());

        fs::remove_file(stored("build/big.log")).expect("delete");
        assert!(f.store.lookup(&digest).is_none());

        // Storing again repairs the damaged entry.
        let entry = f
            .store
            .put(&key, f.root.path(), &OUTPUTS, Value::Null)
            .expect("put again");
        assert_eq!(f.store.lookup(&digest), Some(entry.clone()));
        assert_eq!(Store::open(f.state.path()).lookup(&digest), Some(entry));
        assert!(temp_dirs(&f.state.path().join("store")).is_empty());
    }

    /// An old-layout entry whose `entry.json` is damaged or gone is a miss.
    #[test]
    fn missing_or_damaged_old_entry_json_is_a_miss() {
        let f = built();
        let key = key("make");
        let digest = key.digest();
        write_old_entry(&f, &key, &OUTPUTS);
        assert!(Store::open(f.state.path()).lookup(&digest).is_some());
        let entry_json = f.store.entry_dir(&digest).join(ENTRY_FILE);
        fs::write(&entry_json, "{\"format\":1,").expect("damage");
        assert!(Store::open(f.state.path()).lookup(&digest).is_none());
        fs::remove_file(&entry_json).expect("delete");
        assert!(Store::open(f.state.path()).lookup(&digest).is_none());
        assert!(f.store.lookup("../../etc").is_none());
        assert!(f.store.lookup("").is_none());
    }

    #[test]
    fn a_missing_declared_output_is_refused_and_nothing_is_stored() {
        let f = built();
        let key = key("make");
        let error = f
            .store
            .put(
                &key,
                f.root.path(),
                &["top.txt", "build/missing.bin"],
                Value::Null,
            )
            .expect_err("missing output");
        assert!(matches!(error, ReuseError::MissingOutput { .. }), "{error}");
        assert!(error.to_string().contains("build/missing.bin"));
        assert!(f.store.lookup(&key.digest()).is_none());
        assert!(Store::open(f.state.path()).lookup(&key.digest()).is_none());
        assert!(temp_dirs(&f.state.path().join("store")).is_empty());

        let error = f
            .store
            .put(&key, f.root.path(), &["build"], Value::Null)
            .expect_err("directory output");
        assert!(
            matches!(error, ReuseError::OutputNotAFile { .. }),
            "{error}"
        );
        let error = f
            .store
            .put(&key, f.root.path(), &["../outside"], Value::Null)
            .expect_err("escaping output");
        assert!(
            matches!(error, ReuseError::BadRelativePath { .. }),
            "{error}"
        );
    }

    #[test]
    fn concurrent_puts_of_one_key_leave_one_intact_entry() {
        let f = built();
        let key = key("make");
        let digest = key.digest();
        let barrier = Arc::new(Barrier::new(4));
        let entries: Vec<Entry> = thread::scope(|scope| {
            let handles: Vec<_> = (0..4)
                .map(|worker| {
                    let barrier = Arc::clone(&barrier);
                    let (store, key, root) = (&f.store, &key, f.root.path());
                    scope.spawn(move || {
                        barrier.wait();
                        store.put(key, root, &OUTPUTS, json!({ "worker": worker }))
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|handle| handle.join().expect("no panic").expect("put succeeds"))
                .collect()
        });
        assert_eq!(
            entries[0], entries[1],
            "the loser returns the winner's entry"
        );
        assert_eq!(f.store.lookup(&digest), Some(entries[0].clone()));
        assert_eq!(
            Store::open(f.state.path()).lookup(&digest),
            Some(entries[0].clone())
        );
        assert!(temp_dirs(&f.state.path().join("store")).is_empty());
    }

    /// Two runs (two store values, as two processes) that both missed and
    /// both store the same key: both records are whole and either serves;
    /// the log reads back without a warning, and shared blobs are one file.
    #[test]
    fn two_runs_storing_one_key_at_once_leave_an_intact_entry() {
        let f = built();
        let key = key("make");
        let digest = key.digest();
        let barrier = Arc::new(Barrier::new(2));
        let entries: Vec<Entry> = thread::scope(|scope| {
            let handles: Vec<_> = (0..2)
                .map(|run| {
                    let barrier = Arc::clone(&barrier);
                    let (state, key, root) = (f.state.path(), &key, f.root.path());
                    scope.spawn(move || {
                        let store = Store::open(state);
                        // Both look first (a miss), then both store.
                        assert!(store.lookup(&key.digest()).is_none());
                        barrier.wait();
                        store.put(key, root, &OUTPUTS, json!({ "run": run }))
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|handle| handle.join().expect("no panic").expect("put succeeds"))
                .collect()
        });
        let later = Store::open(f.state.path());
        let found = later.lookup(&digest).expect("an intact entry");
        assert!(entries.contains(&found), "{found:?}");
        assert!(later.warnings().is_empty(), "{:?}", later.warnings());
        let fresh = tempfile::tempdir().expect("fresh");
        later.restore(&found, fresh.path()).expect("restore");
        assert_eq!(read(fresh.path(), "build/big.log"), big());
        let blobs = store_files(f.state.path())
            .into_iter()
            .filter(|p| p.starts_with("blobs/"))
            .count();
        assert_eq!(blobs, 1, "the big output is one blob, by content");
    }

    #[test]
    fn restore_refuses_a_stored_file_that_no_longer_matches() {
        let f = built();
        let key = key("make");
        let entry = f
            .store
            .put(&key, f.root.path(), &OUTPUTS, Value::Null)
            .expect("put");
        let index = entry
            .outputs
            .iter()
            .position(|o| o.path == "build/big.log")
            .expect("stored");
        let stored = f.store.blob(&entry.outputs[index].sha256);
        fs::write(&stored, big().to_uppercase()).expect("same size, other bytes");
        let fresh = tempfile::tempdir().expect("fresh");
        let error = f.store.restore(&entry, fresh.path()).expect_err("corrupt");
        assert!(matches!(error, ReuseError::StoreCorrupt { .. }), "{error}");
        assert!(error.to_string().contains("build/big.log"));
        assert!(!fresh.path().join("build/big.log").exists());
    }

    #[test]
    fn outputs_up_to_the_inline_limit_live_in_the_record_and_larger_ones_are_blobs() {
        let limit = usize::try_from(INLINE_MAX).expect("small");
        let at_limit = "x".repeat(limit);
        let over_limit = "y".repeat(limit + 1);
        let f = fixture(&[("at.bin", &at_limit), ("over.bin", &over_limit)]);
        let key = key("limit");
        let entry = f
            .store
            .put(&key, f.root.path(), &["at.bin", "over.bin"], Value::Null)
            .expect("put");
        assert!(
            entry.outputs[0].inline.is_some(),
            "exactly INLINE_MAX is inline"
        );
        assert!(entry.outputs[1].inline.is_none(), "one byte more is a file");
        assert_eq!(
            fs::read(f.store.blob(&entry.outputs[1].sha256)).expect("stored file"),
            over_limit.as_bytes()
        );
        assert!(!f.store.blob(&entry.outputs[0].sha256).exists());

        let fresh = tempfile::tempdir().expect("fresh");
        f.store.restore(&entry, fresh.path()).expect("restore");
        assert_eq!(read(fresh.path(), "at.bin"), at_limit);
        assert_eq!(read(fresh.path(), "over.bin"), over_limit);
    }

    /// A record forged with a valid checksum (so not caught as damage):
    /// same length, other bytes is refused on restore; cut short is a miss.
    #[test]
    fn an_inline_output_that_no_longer_matches_is_refused_or_a_miss() {
        use base64::Engine as _;
        let f = built();
        let key = key("make");
        let digest = key.digest();
        let entry = f
            .store
            .put(&key, f.root.path(), &OUTPUTS, Value::Null)
            .expect("put");
        let edit = |inline: &str| {
            let mut damaged = entry.clone();
            let top = damaged
                .outputs
                .iter_mut()
                .find(|o| o.path == "top.txt")
                .expect("top");
            top.inline = Some(inline.to_owned());
            append_record(&f, &key, &damaged);
            damaged
        };
        let damaged = edit(&base64::engine::general_purpose::STANDARD.encode("TOP"));
        let store = Store::open(f.state.path());
        assert_eq!(store.lookup(&digest), Some(damaged.clone()));
        let fresh = tempfile::tempdir().expect("fresh");
        let error = store.restore(&damaged, fresh.path()).expect_err("corrupt");
        assert!(matches!(error, ReuseError::StoreCorrupt { .. }), "{error}");
        assert!(!fresh.path().join("top.txt").exists());
        edit("dG9");
        assert!(Store::open(f.state.path()).lookup(&digest).is_none());
    }

    #[cfg(unix)]
    #[test]
    fn symlinks_never_lead_the_store_outside_the_root() {
        use std::os::unix::fs::symlink;
        let f = built();
        let outside = tempfile::tempdir().expect("outside");
        fs::write(outside.path().join("secret"), "secret").expect("write");
        symlink(outside.path().join("secret"), f.root.path().join("leak")).expect("link");
        let error = f
            .store
            .put(&key("make"), f.root.path(), &["leak"], Value::Null)
            .expect_err("outside output");
        assert!(
            matches!(error, ReuseError::SymlinkOutsideRoot { .. }),
            "{error}"
        );

        let entry = f
            .store
            .put(&key("make"), f.root.path(), &OUTPUTS, Value::Null)
            .expect("put");
        let fresh = tempfile::tempdir().expect("fresh");
        symlink(outside.path(), fresh.path().join("build")).expect("link");
        let error = f
            .store
            .restore(&entry, fresh.path())
            .expect_err("outside dir");
        assert!(
            matches!(error, ReuseError::SymlinkOutsideRoot { .. }),
            "{error}"
        );
        assert!(!outside.path().join("bin").exists());
    }

    #[test]
    fn last_keys_per_plan_explain_why_not_reused() {
        let f = fixture(&[]);
        assert!(f.store.last_keys("demo").is_empty());
        let first = key("make");
        let second = key("make -j4");
        let keys = |pairs: &[(&str, &ReuseKey)]| -> BTreeMap<String, ReuseKey> {
            pairs
                .iter()
                .map(|(s, k)| ((*s).to_owned(), (*k).clone()))
                .collect()
        };
        f.store
            .record_last("demo", &keys(&[("build", &first), ("play[a,1]", &first)]))
            .expect("record");
        assert_eq!(f.store.last_keys("demo").get("build"), Some(&first));
        assert!(f.store.last_keys("other").is_empty());
        // The same keys again (a fully reused run): the file is left as it is.
        let path = f.store.last_path("demo");
        let inode = |p: &Path| std::os::unix::fs::MetadataExt::ino(&fs::metadata(p).expect("last"));
        let before = inode(&path);
        f.store
            .record_last("demo", &keys(&[("build", &first), ("play[a,1]", &first)]))
            .expect("record the same");
        assert_eq!(inode(&path), before, "not rewritten");
        // A file from before fingerprints is read, and rewritten with one.
        let old = json!({"plan": "demo", "steps": {"build": &first, "play[a,1]": &first}});
        fs::write(&path, serde_json::to_vec(&old).expect("old file")).expect("write");
        assert_eq!(f.store.last_keys("demo").get("build"), Some(&first));
        f.store
            .record_last("demo", &keys(&[("build", &first), ("play[a,1]", &first)]))
            .expect("record over the old file");
        assert!(
            fs::read_to_string(&path)
                .expect("read")
                .starts_with("{\"fingerprint\":\"")
        );
        assert_eq!(f.store.last_keys("demo").get("play[a,1]"), Some(&first));

        // A later run of the same plan merges: steps it did not run keep their key.
        f.store
            .record_last("demo", &keys(&[("build", &second)]))
            .expect("record again");
        let last = f.store.last_keys("demo");
        assert_eq!(last.get("build"), Some(&second));
        assert_eq!(last.get("play[a,1]"), Some(&first));
        assert_eq!(why_not_reused(&first, &second), ["`run` changed"]);
    }

    /// Issue 10 (`gameplan gc`): entries are listed with their size and last
    /// use, a reuse recorded at the end of a run refreshes the use, and
    /// removing one leaves the others and `last/` alone.
    #[test]
    fn entries_list_size_and_last_use_and_remove_one() {
        let f = built();
        let (old, new) = (key("make"), key("make -j4"));
        let old_digest = old.digest();
        let old_entry = f
            .store
            .put(&old, f.root.path(), &OUTPUTS, Value::Null)
            .expect("put");
        f.store
            .put(&new, f.root.path(), &OUTPUTS, Value::Null)
            .expect("put");
        f.store
            .record_last("demo", &BTreeMap::from([("build".to_owned(), old.clone())]))
            .expect("record");
        // Stored an hour ago: a record as an earlier run wrote it.
        let past = SystemTime::now() - Duration::from_secs(3600);
        append_record_at(&f, &old, &old_entry, past);
        let used = |digest: &str| {
            Store::open(f.state.path())
                .entries()
                .into_iter()
                .find(|e| e.digest == digest)
                .map(|e| e.last_used)
        };
        let was = used(&old_digest).expect("listed");
        let run = Store::open(f.state.path());
        run.mark_used(&old_digest);
        assert_eq!(used(&old_digest), Some(was), "written at the run's end");
        run.flush_used().expect("flush");
        assert!(used(&old_digest) > Some(past + Duration::from_secs(60)));

        let store = Store::open(f.state.path());
        let entries = store.entries();
        assert_eq!(entries.len(), 2, "{entries:?}");
        for entry in &entries {
            // Its record and its one blob (the big log, shared by both).
            assert!(entry.bytes > big().len() as u64, "{entry:?}");
            assert!(entry.bytes < big().len() as u64 + 4096, "{entry:?}");
        }
        store.remove_entry(&old_digest).expect("remove");
        assert!(store.lookup(&old_digest).is_none());
        assert!(store.lookup(&new.digest()).is_some());
        let later = Store::open(f.state.path());
        assert!(later.lookup(&old_digest).is_none());
        assert!(later.lookup(&new.digest()).is_some(), "its blob is kept");
        assert_eq!(later.entries().len(), 1);
        assert_eq!(later.last_keys("demo").get("build"), Some(&old));
    }

    #[test]
    fn stale_temp_dirs_are_swept_and_entries_kept() {
        let f = built();
        let key = key("make");
        f.store
            .put(&key, f.root.path(), &OUTPUTS, Value::Null)
            .expect("put");
        let stale = f.state.path().join("store").join(".tmp-99999-0");
        fs::create_dir_all(stale.join("outputs")).expect("mkdir");
        assert_eq!(f.store.remove_stale_temp_dirs(Duration::from_secs(3600)), 0);
        assert_eq!(f.store.remove_stale_temp_dirs(Duration::ZERO), 1);
        assert!(!stale.exists());
        assert!(f.store.lookup(&key.digest()).is_some());
    }

    /// Issue 8, item 5: an entry edited to name the step's script is
    /// refused whole; nothing is written over the script or anywhere else.
    #[test]
    fn an_entry_naming_a_path_outside_the_outputs_is_refused() {
        let f = built();
        write_file(f.root.path(), "step.sh", "echo the real step\n");
        let mut entry = f
            .store
            .put(&key("make"), f.root.path(), &OUTPUTS, Value::Null)
            .expect("put");
        // The edit: top.txt's record now names step.sh.
        let top = entry
            .outputs
            .iter_mut()
            .find(|o| o.path == "top.txt")
            .expect("top.txt stored");
        top.path = "step.sh".to_owned();
        fs::remove_file(f.root.path().join("build/bin/app")).expect("rm");

        let scope =
            || RestoreScope::new(&["build/**", "top.txt"], ["step.sh".to_owned()]).expect("scope");
        let error = f
            .store
            .restore_within(&entry, f.root.path(), &scope())
            .expect_err("refused");
        assert!(
            matches!(&error, ReuseError::RestoreOutsideOutputs { path, .. } if path == "step.sh"),
            "{error}"
        );
        let error = f
            .store
            .restore_lazily(&entry, f.root.path(), || Some(scope()))
            .expect_err("refused when it must write");
        assert!(
            matches!(&error, ReuseError::RestoreOutsideOutputs { path, .. } if path == "step.sh"),
            "{error}"
        );
        assert_eq!(read(f.root.path(), "step.sh"), "echo the real step\n");
        assert!(
            !f.root.path().join("build/bin/app").exists(),
            "nothing is restored from a refused entry"
        );
        // The plain restore (today's call site) still trusts the entry.
        f.store.restore(&entry, f.root.path()).expect("restore");
        assert_eq!(read(f.root.path(), "step.sh"), "top");
    }

    /// Issue 8, item 5: `outputs = ["**"]` stores the plan and the inputs
    /// too; a restore leaves them as they are in the working tree (a hand
    /// edit to the plan is not reverted).
    #[test]
    fn a_restore_never_writes_over_an_input_or_the_plan() {
        let f = fixture(&[
            ("plan.toml", "# the plan\n"),
            ("src/in.txt", "input"),
            ("out/o.txt", "output"),
        ]);
        let all = ["out/o.txt", "plan.toml", "src/in.txt"];
        let entry = f
            .store
            .put(&key("make"), f.root.path(), &all, Value::Null)
            .expect("put");
        write_file(f.root.path(), "plan.toml", "# edited by hand\n");
        write_file(f.root.path(), "out/o.txt", "stale");
        let scope = RestoreScope::new(&["**"], ["plan.toml".to_owned(), "src/in.txt".to_owned()])
            .expect("scope");
        f.store
            .restore_within(&entry, f.root.path(), &scope)
            .expect("restore");
        assert_eq!(read(f.root.path(), "plan.toml"), "# edited by hand\n");
        assert_eq!(read(f.root.path(), "out/o.txt"), "output");
    }

    #[test]
    fn restore_scope_matches_like_the_expansion() {
        let set = PatternSet::parse(&["build", "reports/*.json", "**/*.o"]).expect("parse");
        for yes in ["build/x", "build/a/b", "reports/r.json", "a/b/c.o", "c.o"] {
            assert!(set.matches(yes), "{yes}");
        }
        for no in [
            "buildx",
            "reports/a/r.json",
            "step.sh",
            ".git/hooks/x.o",
            "a/.gameplan/x.o",
        ] {
            assert!(!set.matches(no), "{no}");
        }
        assert!(
            PatternSet::parse(&["."])
                .expect("parse")
                .matches("any/thing")
        );
    }

    fn set_dir_mtime(dir: &Path, age: Duration) {
        fs::File::open(dir)
            .expect("open dir")
            .set_modified(SystemTime::now() - age)
            .expect("set mtime");
    }

    /// A pid that was alive a moment ago and is not any more.
    fn dead_pid() -> u32 {
        let mut child = std::process::Command::new("true")
            .spawn()
            .expect("spawn true");
        let pid = child.id();
        child.wait().expect("wait");
        pid
    }

    /// Issue 8, item 16: a store's first write sweeps the temporary entries
    /// of killed writes: an hour old, or a minute old with a dead writer;
    /// a live writer's recent one stays.
    #[test]
    fn the_first_put_sweeps_abandoned_temp_dirs() {
        let f = built();
        let store_dir = f.state.path().join("store");
        let me = std::process::id();
        let dead = dead_pid();
        let make = |name: &str, age: Duration| {
            let dir = store_dir.join(name);
            fs::create_dir_all(dir.join("outputs")).expect("mkdir");
            fs::write(dir.join("outputs/0"), "partial").expect("write");
            set_dir_mtime(&dir, age);
        };
        make(&format!(".tmp-{dead}-0"), Duration::from_secs(120));
        make(&format!(".tmp-{dead}-1"), Duration::from_secs(5));
        make(&format!(".tmp-{me}-900"), Duration::from_secs(7200));
        make(&format!(".tmp-{me}-901"), Duration::from_secs(120));
        make(".tmp-0-0", Duration::from_secs(120));

        let store = Store::open(f.state.path());
        store
            .put(&key("make"), f.root.path(), &OUTPUTS, Value::Null)
            .expect("put");
        let mut left = temp_dirs(&store_dir);
        left.sort();
        let mut expected = vec![
            format!(".tmp-{dead}-1"),
            format!(".tmp-{me}-901"),
            ".tmp-0-0".to_owned(),
        ];
        expected.sort();
        assert_eq!(left, expected);
        // Once per opened store: a later put does not list the store again.
        make(&format!(".tmp-{dead}-2"), Duration::from_secs(7200));
        store
            .put(&key("other"), f.root.path(), &OUTPUTS, Value::Null)
            .expect("put");
        assert!(store_dir.join(format!(".tmp-{dead}-2")).exists());
    }

    /// A step with small (or no) outputs creates no file: its entry is one
    /// line appended to the index.
    #[test]
    fn a_step_with_small_outputs_writes_one_line_and_no_file() {
        let f = fixture(&[("out/a", ""), ("out/b", "small")]);
        for (i, outputs) in [&["out/a", "out/b"][..], &[][..]].iter().enumerate() {
            f.store
                .put(
                    &key(&format!("step {i}")),
                    f.root.path(),
                    outputs,
                    Value::Null,
                )
                .expect("put");
        }
        assert_eq!(store_files(f.state.path()), ["index.log"]);
        let log = fs::read_to_string(f.state.path().join("store/index.log")).expect("log");
        assert_eq!(log.lines().count(), 2);
        assert!(
            !f.state.path().join("store/blobs").exists(),
            "no directory either"
        );
        // The empty one (stored from its stat) comes back, empty.
        let entry = Store::open(f.state.path())
            .lookup(&key("step 0").digest())
            .expect("stored");
        assert_eq!(entry.outputs[0].sha256, EMPTY_SHA256);
        let fresh = tempfile::tempdir().expect("fresh");
        f.store.restore(&entry, fresh.path()).expect("restore");
        assert_eq!(read(fresh.path(), "out/a"), "");
        assert_eq!(read(fresh.path(), "out/b"), "small");
    }

    /// A store written by the old layout (one directory per entry) is read
    /// and restored, never rewritten: storing its key again keeps it, and
    /// only `gc` removes it.
    #[test]
    fn an_old_layout_store_is_read_not_rewritten_and_gc_drops_it() {
        let f = built();
        let (old, new) = (key("make"), key("make -j4"));
        let written = write_old_entry(&f, &old, &OUTPUTS);
        let before = store_files(f.state.path());

        let store = Store::open(f.state.path());
        assert_eq!(store.lookup(&old.digest()), Some(written.clone()));
        assert_eq!(store.stored_key(&old.digest()), Some(old.clone()));
        let fresh = tempfile::tempdir().expect("fresh");
        store.restore(&written, fresh.path()).expect("restore");
        for path in OUTPUTS {
            assert_eq!(
                read(fresh.path(), path),
                read(f.root.path(), path),
                "{path}"
            );
        }
        let again = store
            .put(&old, f.root.path(), &OUTPUTS, Value::Null)
            .expect("put");
        assert_eq!(again, written, "the old entry serves");
        assert_eq!(store_files(f.state.path()), before, "nothing rewritten");

        // New results go to the index beside it; both are listed.
        store
            .put(&new, f.root.path(), &OUTPUTS, Value::Null)
            .expect("put new");
        let listed: BTreeSet<String> = Store::open(f.state.path())
            .entries()
            .into_iter()
            .map(|e| e.digest)
            .collect();
        assert_eq!(listed, BTreeSet::from([old.digest(), new.digest()]));
        let old_entry = Store::open(f.state.path())
            .entries()
            .into_iter()
            .find(|e| e.digest == old.digest())
            .expect("listed");
        assert_eq!(old_entry.bytes, dir_size(&store.entry_dir(&old.digest())));

        let freed = Store::open(f.state.path())
            .remove_entries(&BTreeSet::from([old.digest()]))
            .expect("gc");
        assert!(freed >= old_entry.bytes, "{freed} < {}", old_entry.bytes);
        assert!(!store.entry_dir(&old.digest()).exists());
        let later = Store::open(f.state.path());
        assert!(later.lookup(&old.digest()).is_none());
        assert!(later.lookup(&new.digest()).is_some());
    }

    /// A run killed in the middle of appending leaves a torn last line:
    /// it is no entry and no warning, and the next run's record is whole.
    #[test]
    fn a_torn_index_tail_is_dropped_and_the_next_record_is_whole() {
        let f = built();
        let (first, torn, next) = (key("one"), key("two"), key("three"));
        let entry = Store::open(f.state.path())
            .put(&first, f.root.path(), &["top.txt"], Value::Null)
            .expect("put");
        let mut torn_entry = entry.clone();
        torn_entry.key = torn.digest();
        let line = index::encode(&Record::Put {
            at: 1,
            entry: torn_entry,
            key: torn.canonical_json(),
        });
        let log = f.state.path().join("store").join(INDEX_FILE);
        let mut file = OpenOptions::new().append(true).open(&log).expect("open");
        file.write_all(&line[..line.len() / 2]).expect("torn write");
        drop(file);

        let store = Store::open(f.state.path());
        assert!(store.warnings().is_empty(), "{:?}", store.warnings());
        assert!(store.lookup(&first.digest()).is_some());
        assert!(store.lookup(&torn.digest()).is_none());
        store
            .put(&next, f.root.path(), &["top.txt"], Value::Null)
            .expect("put after the torn tail");
        drop(store);
        let later = Store::open(f.state.path());
        assert!(later.lookup(&next.digest()).is_some());
        assert!(later.lookup(&first.digest()).is_some());
        assert_eq!(
            later.warnings().len(),
            1,
            "the torn line, now closed, is damage"
        );
        // gc rewrites the log without it.
        later.compact().expect("compact");
        let compacted = Store::open(f.state.path());
        assert!(compacted.warnings().is_empty());
        assert!(compacted.lookup(&next.digest()).is_some());
    }

    /// A damaged record is skipped with a warning that names the log and
    /// the line; the entries around it serve, and it is never restored.
    #[test]
    fn a_corrupt_record_is_skipped_with_a_warning_never_restored() {
        let f = built();
        let keys = [key("a"), key("b"), key("c")];
        for k in &keys {
            f.store
                .put(k, f.root.path(), &OUTPUTS, Value::Null)
                .expect("put");
        }
        let log = f.state.path().join("store").join(INDEX_FILE);
        let mut bytes = fs::read(&log).expect("read");
        let second = bytes.iter().position(|&b| b == b'\n').expect("a line") + 1;
        // Flip a bit in the middle of line 2 (inside its JSON).
        bytes[second + 40] ^= 0x01;
        fs::write(&log, &bytes).expect("write");
        let store = Store::open(f.state.path());
        let warnings = store.warnings();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("line 2"), "{warnings:?}");
        assert!(warnings[0].contains("index.log"), "{warnings:?}");
        let served: Vec<bool> = keys
            .iter()
            .map(|k| store.lookup(&k.digest()).is_some())
            .collect();
        assert_eq!(served, [true, false, true]);
    }

    /// `gc` compaction: one record per entry with its last use kept,
    /// removed entries' blobs deleted, blobs still named kept; while a run
    /// holds the log, a removal is a `drop` record instead.
    #[test]
    fn gc_compacts_the_index_and_deletes_only_unreferenced_blobs() {
        let f = built();
        let (a, b) = (key("a"), key("b"));
        let first_run = Store::open(f.state.path());
        let a_entry = first_run
            .put(&a, f.root.path(), &OUTPUTS, Value::Null)
            .expect("put a");
        write_file(f.root.path(), "build/big.log", &big().to_uppercase());
        // Uses are kept in milliseconds: b is stored after a.
        thread::sleep(Duration::from_millis(5));
        let b_entry = first_run
            .put(&b, f.root.path(), &OUTPUTS, Value::Null)
            .expect("put b");
        drop(first_run);
        let (a_blob, b_blob) = (
            f.store.blob(&a_entry.outputs[0].sha256),
            f.store.blob(&b_entry.outputs[0].sha256),
        );
        assert_ne!(a_blob, b_blob);
        let log = f.state.path().join("store").join(INDEX_FILE);
        let lines = || fs::read_to_string(&log).expect("log").lines().count();
        // Reusing a, stored before b, makes it the most recent: one use
        // record. Reusing it again changes no order: nothing appended.
        let reuse_a = || {
            let run = Store::open(f.state.path());
            run.mark_used(&a.digest());
            run.flush_used().expect("flush");
        };
        reuse_a();
        assert_eq!(lines(), 3);
        for _ in 0..3 {
            reuse_a();
        }
        assert_eq!(lines(), 3, "a use that changes no order is not recorded");
        let used_before = Store::open(f.state.path())
            .entries()
            .into_iter()
            .find(|e| e.digest == a.digest())
            .expect("a")
            .last_used;

        // A run holding the log: gc cannot compact; the removal is a record.
        let run = Store::open(f.state.path());
        run.put(&key("c"), f.root.path(), &["top.txt"], Value::Null)
            .expect("the run stores, holding the log");
        let freed = Store::open(f.state.path())
            .remove_entries(&BTreeSet::from([b.digest()]))
            .expect("gc while held");
        assert_eq!(freed, 0);
        assert_eq!(lines(), 5, "a put and a drop appended");
        assert!(Store::open(f.state.path()).lookup(&b.digest()).is_none());
        assert!(b_blob.exists(), "blobs wait for a gc that can compact");
        drop(run);

        let freed = Store::open(f.state.path()).compact().expect("compact");
        assert!(freed >= big().len() as u64, "{freed}");
        assert_eq!(lines(), 2, "one record per entry (a and c)");
        assert!(!b_blob.exists(), "b's blob named by nothing");
        assert!(a_blob.exists());
        let after = Store::open(f.state.path());
        let a_now = after
            .entries()
            .into_iter()
            .find(|e| e.digest == a.digest())
            .expect("a kept");
        // Milliseconds survive the rewrite.
        assert_eq!(
            a_now
                .last_used
                .duration_since(SystemTime::UNIX_EPOCH)
                .expect("ms")
                .as_millis(),
            used_before
                .duration_since(SystemTime::UNIX_EPOCH)
                .expect("ms")
                .as_millis()
        );
        let fresh = tempfile::tempdir().expect("fresh");
        after
            .restore(&after.lookup(&a.digest()).expect("a"), fresh.path())
            .expect("restore a");
        assert_eq!(read(fresh.path(), "build/big.log"), big());
    }

    /// Issue 19: directories are resolved once per run, not once per step;
    /// a new run (a new store) resolves again, so a directory replaced by
    /// a link out of the repo between runs is refused.
    #[cfg(unix)]
    #[test]
    fn directories_resolved_by_an_earlier_run_are_resolved_again() {
        use std::os::unix::fs::symlink;
        let f = built();
        let entry = f
            .store
            .put(&key("make"), f.root.path(), &OUTPUTS, Value::Null)
            .expect("put");
        let fresh = tempfile::tempdir().expect("fresh");
        let run = Store::open(f.state.path());
        run.restore(&entry, fresh.path()).expect("first restore");
        run.restore(&entry, fresh.path())
            .expect("again, from what it knows");

        let outside = tempfile::tempdir().expect("outside");
        fs::remove_dir_all(fresh.path().join("build")).expect("rm build");
        symlink(outside.path(), fresh.path().join("build")).expect("link");
        let next_run = Store::open(f.state.path());
        let error = next_run
            .restore(&entry, fresh.path())
            .expect_err("outside dir");
        assert!(
            matches!(error, ReuseError::SymlinkOutsideRoot { .. }),
            "{error}"
        );
        assert!(fs::read_dir(outside.path()).expect("list").next().is_none());
    }
}

//! The result store: outputs of succeeded steps, by reuse key digest.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, OpenOptions};
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Once};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::error::{ReuseError, io_error};
use super::inputs::PatternSet;
use super::key::{ReuseKey, is_sha256_hex, sha256_hex};
use super::paths::{canonical_root, check_rel_path, join_rel, resolve_inside};
use super::write::{copy_hashing, hash_file, unique_suffix, write_atomically};

/// 2: stored outputs are named by their index in `entry.json`, so storing
/// creates no directory per output path. 3: small outputs are inline.
const ENTRY_FORMAT: u32 = 3;
/// Outputs up to this size live inside `entry.json` instead of `outputs/`:
/// a file smaller than a filesystem block costs a whole block and an inode,
/// and creating that inode (and `outputs/`) was most of what storing a small
/// result cost (Bazel's remote cache inlines small outputs for the same reason).
pub const INLINE_MAX: u64 = 4096;
const KEY_FILE: &str = "key.json";
const ENTRY_FILE: &str = "entry.json";
const OUTPUTS_DIR: &str = "outputs";
const LAST_DIR: &str = "last";
const TEMP_PREFIX: &str = ".tmp-";
/// How often `put` retries publishing when a damaged entry is in the way.
const PUBLISH_ATTEMPTS: usize = 3;
/// A temporary entry this old is abandoned whoever wrote it: storing one
/// result takes seconds, not an hour.
pub const STALE_TEMP_AGE: Duration = Duration::from_secs(3600);
/// A temporary entry whose writer's pid is not alive on this host is
/// abandoned once this old (the margin keeps a state directory shared over
/// the network from losing another host's entry mid-write to a pid that
/// only happens to be free here).
const DEAD_WRITER_TEMP_AGE: Duration = Duration::from_secs(60);
/// At most this many abandoned temporary entries are removed per sweep, so
/// the first store of a run never waits on a big backlog.
const SWEEP_MAX: usize = 64;

/// Stored results under `<state>/store/`:
///
/// ```text
/// store/<k[0:2]>/<key>/key.json     the canonical ReuseKey (what was hashed)
/// store/<k[0:2]>/<key>/outputs/<i> copies of the declared outputs over INLINE_MAX, by index
/// store/<k[0:2]>/<key>/entry.json   outputs with size + sha256 (small ones inline), caller metadata; written last
/// store/last/<sha256(step)>.json    the last key seen per step, for "why not reused"
/// store/.tmp-…                      entries being built; renamed into place whole
/// ```
///
/// Safe to share between threads and between gameplan processes: every write
/// is temp + rename, and readers never see a partial entry.
#[derive(Debug, Clone)]
pub struct Store {
    dir: PathBuf,
    /// Abandoned temporary entries are swept once per opened store, at its
    /// first write (issue 8, item 16); clones share it.
    swept: Arc<Once>,
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
    /// Bytes on disk, outputs included.
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

/// A stored result, as recorded in `entry.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// The layout version of `entry.json`.
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
    /// otherwise it is `outputs/<index>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inline: Option<String>,
    /// The permission bits of an inline output (a stored file keeps its own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<u32>,
}

/// The keys of one plan's steps as of its latest run.
#[derive(Serialize, Deserialize, Default)]
struct LastKeys {
    plan: String,
    steps: BTreeMap<String, ReuseKey>,
}

/// Where an entry keeps its `index`-th output: flat, whatever the output's path.
fn stored_output(outputs_dir: &Path, index: usize) -> PathBuf {
    outputs_dir.join(index.to_string())
}

impl Store {
    /// The store under `state_dir`. Nothing is touched on disk until a write.
    pub fn open(state_dir: &Path) -> Self {
        Self {
            dir: state_dir.join("store"),
            swept: Arc::new(Once::new()),
        }
    }

    /// Where the entry for `digest` lives (whether or not it exists).
    pub fn entry_dir(&self, digest: &str) -> PathBuf {
        let shard = digest.get(..2).unwrap_or("__");
        self.dir.join(shard).join(digest)
    }

    /// Stores the `outputs` (repo-relative file paths under `root`) of a step
    /// that succeeded, under `key`, with the caller's `meta`.
    ///
    /// Call only after the step succeeded. A declared output that does not
    /// exist refuses the whole entry. When an intact entry for the key exists
    /// already (stored earlier or by a concurrent run that won the race), it
    /// is kept and returned and this copy is discarded.
    pub fn put<S: AsRef<str>>(
        &self,
        key: &ReuseKey,
        root: &Path,
        outputs: &[S],
        meta: Value,
    ) -> Result<Entry, ReuseError> {
        // One canonical text serves the digest and `key.json`.
        let canonical = key.canonical_json();
        let digest = sha256_hex(canonical.as_bytes());
        let outputs: BTreeSet<&str> = outputs.iter().map(AsRef::as_ref).collect();
        let canonical_root = canonical_root(root)?;
        for output in &outputs {
            check_rel_path(output)?;
            match resolve_inside(&canonical_root, &join_rel(root, output), output)? {
                None => {
                    return Err(ReuseError::MissingOutput {
                        path: (*output).to_owned(),
                    });
                }
                Some(real) if !real.is_file() => {
                    return Err(ReuseError::OutputNotAFile {
                        path: (*output).to_owned(),
                    });
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

        let temp = self.dir.join(format!("{TEMP_PREFIX}{}", unique_suffix()));
        // The store exists after the first entry: try first, create on demand.
        if let Err(error) = fs::create_dir(&temp) {
            if error.kind() != io::ErrorKind::NotFound {
                return Err(io_error("create", &temp)(error));
            }
            fs::create_dir_all(&self.dir).map_err(io_error("create the store", &self.dir))?;
            fs::create_dir(&temp).map_err(io_error("create", &temp))?;
        }
        let built = build_entry(&temp, &canonical, &digest, root, &outputs, meta);
        let entry = match built {
            Ok(entry) => entry,
            Err(error) => {
                let _ = fs::remove_dir_all(&temp);
                return Err(error);
            }
        };
        self.publish(&temp, &digest, entry)
    }

    /// Renames the finished `temp` entry into place, or yields to an intact
    /// entry that got there first; `temp` is gone either way.
    fn publish(&self, temp: &Path, digest: &str, entry: Entry) -> Result<Entry, ReuseError> {
        // The common case, in one call: the shard exists and nobody stored
        // this key meanwhile.
        if fs::rename(temp, self.entry_dir(digest)).is_ok() {
            return Ok(entry);
        }
        let published = self.publish_slowly(temp, digest, entry);
        if temp.exists() {
            let _ = fs::remove_dir_all(temp);
        }
        published
    }

    fn publish_slowly(&self, temp: &Path, digest: &str, entry: Entry) -> Result<Entry, ReuseError> {
        let final_dir = self.entry_dir(digest);
        let shard = final_dir.parent().unwrap_or(&self.dir);
        fs::create_dir_all(shard).map_err(io_error("create", shard))?;
        for _ in 0..PUBLISH_ATTEMPTS {
            match fs::rename(temp, &final_dir) {
                Ok(()) => return Ok(entry),
                Err(error) if fs::symlink_metadata(&final_dir).is_err() => {
                    return Err(io_error("move into place", &final_dir)(error));
                }
                Err(_) => {}
            }
            if let Some(theirs) = self.lookup(digest) {
                return Ok(theirs);
            }
            // A damaged entry (an output deleted, a crash on a filesystem
            // without ordered renames) is in the way: set it aside and retry.
            let trash = self
                .dir
                .join(format!("{TEMP_PREFIX}trash-{}", unique_suffix()));
            match fs::rename(&final_dir, &trash) {
                Ok(()) => {
                    let _ = fs::remove_dir_all(&trash);
                }
                // Someone else set it aside first.
                Err(error) if error.kind() == io::ErrorKind::NotFound => {}
                Err(error) => return Err(io_error("replace the damaged entry", &final_dir)(error)),
            }
        }
        self.lookup(digest).ok_or_else(|| {
            io_error("move into place", &final_dir)(io::Error::other(
                "other runs kept replacing this entry; run again",
            ))
        })
    }

    /// The intact entry for `digest`: `entry.json` parses and every stored
    /// output is present with its recorded size. Anything less is a miss.
    pub fn lookup(&self, digest: &str) -> Option<Entry> {
        if !is_sha256_hex(digest) {
            return None;
        }
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
                // Decoded (and hashed) on restore; here only the length.
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

    /// The key a stored entry was made from (its `key.json`), if intact.
    pub fn stored_key(&self, digest: &str) -> Option<ReuseKey> {
        if !is_sha256_hex(digest) {
            return None;
        }
        let bytes = fs::read(self.entry_dir(digest).join(KEY_FILE)).ok()?;
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
    /// `entry.json`) is refused before anything is written, and a path
    /// `scope` keeps (an input, the plan file) is left alone.
    pub fn restore_within(
        &self,
        entry: &Entry,
        root: &Path,
        scope: &RestoreScope,
    ) -> Result<(), ReuseError> {
        let entry_dir = self.entry_dir(&entry.key);
        let shown_entry = entry_dir.display().to_string();
        if !is_sha256_hex(&entry.key) {
            return Err(ReuseError::StoreCorrupt {
                path: ENTRY_FILE.to_owned(),
                entry: shown_entry,
            });
        }
        for output in &entry.outputs {
            check_rel_path(&output.path)?;
            if scope
                .outputs
                .as_ref()
                .is_some_and(|outputs| !outputs.matches(&output.path))
            {
                return Err(ReuseError::RestoreOutsideOutputs {
                    path: output.path.clone(),
                    entry: shown_entry,
                });
            }
        }
        let canonical_root = canonical_root(root)?;
        let outputs_dir = entry_dir.join(OUTPUTS_DIR);
        for (index, output) in entry.outputs.iter().enumerate() {
            if scope.keep.contains(&output.path) {
                continue;
            }
            let target = join_rel(root, &output.path);
            let parent = target.parent().unwrap_or(root);
            // Checked first, so not even a comparison reads outside the root.
            create_dir_inside(&canonical_root, root, parent)?;
            if already_restored(&target, output)? {
                continue;
            }
            let name = target
                .file_name()
                .map_or_else(String::new, |name| name.to_string_lossy().into_owned());
            let temp = parent.join(format!(".{name}.gameplan-tmp-{}", unique_suffix()));
            let copied = match &output.inline {
                Some(inline) => write_inline(inline, output.mode, &temp),
                None => copy_hashing(&stored_output(&outputs_dir, index), &temp),
            };
            let copied = copied.and_then(|(size, sha256)| {
                if size == output.size && sha256 == output.sha256 {
                    fs::rename(&temp, &target).map_err(io_error("replace", &target))
                } else {
                    Err(ReuseError::StoreCorrupt {
                        path: output.path.clone(),
                        entry: shown_entry.clone(),
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
        if keys.is_empty() {
            return Ok(());
        }
        let path = self.last_path(plan);
        let mut record = self.read_last(plan);
        plan.clone_into(&mut record.plan);
        record
            .steps
            .extend(keys.iter().map(|(step, key)| (step.clone(), key.clone())));
        let bytes = serde_json::to_vec(&record).map_err(|error| {
            io_error("encode", &path)(io::Error::new(io::ErrorKind::InvalidData, error))
        })?;
        write_atomically(&path, &bytes)
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
    /// removes the entries used longest ago first. Best effort.
    pub fn mark_used(&self, digest: &str) {
        if !is_sha256_hex(digest) {
            return;
        }
        let path = self.entry_dir(digest).join(ENTRY_FILE);
        // By path, one call (an open, a set and a close was three, per
        // reused step); the access time is left alone.
        let _ = nix::sys::stat::utimensat(
            nix::fcntl::AT_FDCWD,
            &path,
            &nix::sys::time::TimeSpec::UTIME_OMIT,
            &nix::sys::time::TimeSpec::UTIME_NOW,
            nix::sys::stat::UtimensatFlags::NoFollowSymlink,
        );
    }

    /// Every stored entry with its size on disk and when it was last stored
    /// or reused, for `gameplan gc`.
    pub fn entries(&self) -> Vec<StoredEntry> {
        let mut found = Vec::new();
        for shard in fs::read_dir(&self.dir).into_iter().flatten().flatten() {
            let name = shard.file_name();
            let name = name.to_string_lossy();
            if name.len() != 2 || !name.bytes().all(|b| b.is_ascii_hexdigit()) {
                continue;
            }
            for item in fs::read_dir(shard.path()).into_iter().flatten().flatten() {
                let digest = item.file_name().to_string_lossy().into_owned();
                if !is_sha256_hex(&digest) {
                    continue;
                }
                let dir = item.path();
                let last_used = fs::metadata(dir.join(ENTRY_FILE))
                    .and_then(|m| m.modified())
                    .unwrap_or(SystemTime::UNIX_EPOCH);
                found.push(StoredEntry {
                    bytes: dir_size(&dir),
                    digest,
                    last_used,
                });
            }
        }
        found
    }

    /// Removes one entry (a reuse of it afterwards is a miss). The entry
    /// file goes first, so a reader never sees an entry without its outputs.
    pub fn remove_entry(&self, digest: &str) -> Result<(), ReuseError> {
        if !is_sha256_hex(digest) {
            return Ok(());
        }
        let dir = self.entry_dir(digest);
        let _ = fs::remove_file(dir.join(ENTRY_FILE));
        fs::remove_dir_all(&dir).map_err(io_error("remove", &dir))
    }

    /// Removes temporary entries older than `older_than`, left behind by runs
    /// that were killed while storing; returns how many were removed. Best
    /// effort: what cannot be removed stays for a later sweep.
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
            if old_enough && fs::remove_dir_all(item.path()).is_ok() {
                removed += 1;
            }
        }
        removed
    }

    /// Removes temporary entries abandoned by killed writes: older than
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
            if abandoned && fs::remove_dir_all(item.path()).is_ok() {
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

/// Whether the writer named by a temp entry's `<pid>-<n>` suffix is known
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

/// Fills the temporary entry directory: `key.json`, the outputs, then
/// `entry.json` last.
fn build_entry(
    temp: &Path,
    canonical_key: &str,
    digest: &str,
    root: &Path,
    outputs: &BTreeSet<&str>,
    meta: Value,
) -> Result<Entry, ReuseError> {
    write_new(&temp.join(KEY_FILE), canonical_key.as_bytes())?;
    let outputs_dir = temp.join(OUTPUTS_DIR);
    let mut stored = Vec::with_capacity(outputs.len());
    for (index, output) in outputs.iter().enumerate() {
        let source = join_rel(root, output);
        if let Some(small) = read_small(&source)? {
            stored.push(small.into_stored(output));
            continue;
        }
        // Made with the first output that is not inline.
        if stored.iter().all(|earlier| earlier.inline.is_some()) {
            fs::create_dir(&outputs_dir).map_err(io_error("create", &outputs_dir))?;
        }
        let copy = stored_output(&outputs_dir, index);
        let (size, sha256) = copy_hashing(&source, &copy)?;
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
        key: digest.to_owned(),
        outputs: stored,
        meta,
    };
    let entry_path = temp.join(ENTRY_FILE);
    let bytes = serde_json::to_vec_pretty(&entry).map_err(|error| {
        io_error("encode", &entry_path)(io::Error::new(io::ErrorKind::InvalidData, error))
    })?;
    write_new(&entry_path, &bytes)?;
    Ok(entry)
}

/// An output small enough to live inside `entry.json`.
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
    #[cfg(unix)]
    let mode = {
        use std::os::unix::fs::PermissionsExt as _;
        Some(metadata.permissions().mode() & 0o7777)
    };
    #[cfg(not(unix))]
    let mode = None;
    Ok(Some(Small { bytes, mode }))
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
    #[cfg(unix)]
    if let Some(mode) = mode {
        use std::os::unix::fs::PermissionsExt as _;
        fs::set_permissions(to, fs::Permissions::from_mode(mode))
            .map_err(io_error("set permissions of", to))?;
    }
    #[cfg(not(unix))]
    let _ = mode;
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
fn already_restored(target: &Path, output: &StoredOutput) -> Result<bool, ReuseError> {
    match fs::symlink_metadata(target) {
        Ok(metadata) if metadata.is_dir() => Err(ReuseError::RestoreBlocked {
            path: output.path.clone(),
        }),
        Ok(metadata) if metadata.is_file() && metadata.len() == output.size => {
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
/// symlink leading out of the repo.
fn create_dir_inside(canonical_root: &Path, root: &Path, dir: &Path) -> Result<(), ReuseError> {
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
        Some(real) if real.is_dir() => {}
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
        // Small outputs live in entry.json; only the big one is a file.
        let inline: Vec<bool> = entry.outputs.iter().map(|o| o.inline.is_some()).collect();
        assert_eq!(inline, [false, true, true, true]);
        let stored_files = fs::read_dir(f.store.entry_dir(&digest).join(OUTPUTS_DIR))
            .expect("outputs/")
            .count();
        assert_eq!(stored_files, 1);
        assert_eq!(f.store.lookup(&digest), Some(entry.clone()));
        assert_eq!(
            fs::read_to_string(f.store.entry_dir(&digest).join(KEY_FILE)).expect("key.json"),
            key.canonical_json()
        );
        assert_eq!(f.store.stored_key(&digest), Some(key.clone()));
        assert!(temp_dirs(&f.state.path().join("store")).is_empty());
        assert!(
            f.store
                .entry_dir(&digest)
                .starts_with(f.state.path().join("store").join(&digest[..2]))
        );

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
            stored_output(&f.store.entry_dir(&digest).join(OUTPUTS_DIR), index)
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
        assert_eq!(f.store.lookup(&digest), Some(entry));
        assert!(temp_dirs(&f.state.path().join("store")).is_empty());
    }

    #[test]
    fn missing_or_damaged_entry_json_is_a_miss() {
        let f = built();
        let key = key("make");
        let digest = key.digest();
        f.store
            .put(&key, f.root.path(), &OUTPUTS, Value::Null)
            .expect("put");
        let entry_json = f.store.entry_dir(&digest).join(ENTRY_FILE);
        fs::write(&entry_json, "{\"format\":1,").expect("damage");
        assert!(f.store.lookup(&digest).is_none());
        fs::remove_file(&entry_json).expect("delete");
        assert!(f.store.lookup(&digest).is_none());
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
        assert!(!f.store.entry_dir(&key.digest()).exists());
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
        let shard = f.state.path().join("store").join(&digest[..2]);
        assert_eq!(fs::read_dir(shard).expect("shard").count(), 1);
        assert!(temp_dirs(&f.state.path().join("store")).is_empty());
    }

    #[test]
    fn a_run_that_loses_the_publish_race_keeps_the_winners_entry() {
        let f = built();
        let key = key("make");
        let digest = key.digest();
        let theirs = f
            .store
            .put(&key, f.root.path(), &OUTPUTS, json!({"run": "winner"}))
            .expect("winner stores");
        // The loser built its copy before the winner's rename landed.
        let temp = f.state.path().join("store").join(".tmp-loser");
        fs::create_dir(&temp).expect("mkdir");
        let outputs: BTreeSet<&str> = OUTPUTS.into_iter().collect();
        let ours = build_entry(
            &temp,
            &key.canonical_json(),
            &digest,
            f.root.path(),
            &outputs,
            json!({"run": "loser"}),
        )
        .expect("loser builds");
        assert_ne!(ours, theirs);
        let published = f.store.publish(&temp, &digest, ours).expect("publish");
        assert_eq!(published, theirs);
        assert_eq!(f.store.lookup(&digest), Some(theirs));
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
        let stored = stored_output(&f.store.entry_dir(&key.digest()).join(OUTPUTS_DIR), index);
        fs::write(&stored, big().to_uppercase()).expect("same size, other bytes");
        let fresh = tempfile::tempdir().expect("fresh");
        let error = f.store.restore(&entry, fresh.path()).expect_err("corrupt");
        assert!(matches!(error, ReuseError::StoreCorrupt { .. }), "{error}");
        assert!(error.to_string().contains("build/big.log"));
        assert!(!fresh.path().join("build/big.log").exists());
    }

    #[test]
    fn outputs_up_to_the_inline_limit_live_in_entry_json_and_larger_ones_are_files() {
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
        let outputs = f.store.entry_dir(&key.digest()).join(OUTPUTS_DIR);
        assert_eq!(
            fs::read(stored_output(&outputs, 1)).expect("stored file"),
            over_limit.as_bytes()
        );
        assert!(!stored_output(&outputs, 0).exists());

        let fresh = tempfile::tempdir().expect("fresh");
        f.store.restore(&entry, fresh.path()).expect("restore");
        assert_eq!(read(fresh.path(), "at.bin"), at_limit);
        assert_eq!(read(fresh.path(), "over.bin"), over_limit);
    }

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
        let entry_json = f.store.entry_dir(&digest).join(ENTRY_FILE);
        let edit = |inline: &str| {
            let mut damaged = entry.clone();
            let top = damaged
                .outputs
                .iter_mut()
                .find(|o| o.path == "top.txt")
                .expect("top");
            top.inline = Some(inline.to_owned());
            fs::write(&entry_json, serde_json::to_vec(&damaged).expect("json")).expect("write");
            damaged
        };
        // Same length, other bytes: found, but restoring it is refused.
        let damaged = edit(&base64::engine::general_purpose::STANDARD.encode("TOP"));
        assert_eq!(f.store.lookup(&digest), Some(damaged.clone()));
        let fresh = tempfile::tempdir().expect("fresh");
        let error = f
            .store
            .restore(&damaged, fresh.path())
            .expect_err("corrupt");
        assert!(matches!(error, ReuseError::StoreCorrupt { .. }), "{error}");
        assert!(!fresh.path().join("top.txt").exists());
        // Cut short: a miss.
        edit("dG9");
        assert!(f.store.lookup(&digest).is_none());
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
    /// use, a reuse or a second store refreshes the use, and removing one
    /// leaves the others and `last/` alone.
    #[test]
    fn issue10_entries_list_size_and_last_use_and_remove_one() {
        let f = built();
        let (old, new) = (key("make"), key("make -j4"));
        let old_digest = old.digest();
        f.store
            .put(&old, f.root.path(), &OUTPUTS, Value::Null)
            .expect("put");
        f.store
            .put(&new, f.root.path(), &OUTPUTS, Value::Null)
            .expect("put");
        f.store
            .record_last("demo", &BTreeMap::from([("build".to_owned(), old.clone())]))
            .expect("record");
        let entry_file = f.store.entry_dir(&old_digest).join(ENTRY_FILE);
        let past = SystemTime::now() - Duration::from_secs(3600);
        fs::File::options()
            .append(true)
            .open(&entry_file)
            .and_then(|file| file.set_modified(past))
            .expect("age the entry");
        let used = |digest: &str| {
            f.store
                .entries()
                .into_iter()
                .find(|e| e.digest == digest)
                .map(|e| e.last_used)
        };
        assert!(used(&old_digest) < Some(past + Duration::from_secs(1)));
        f.store.mark_used(&old_digest);
        assert!(used(&old_digest) > Some(past + Duration::from_secs(60)));
        fs::File::options()
            .append(true)
            .open(&entry_file)
            .and_then(|file| file.set_modified(past))
            .expect("age the entry");
        f.store
            .put(&old, f.root.path(), &OUTPUTS, Value::Null)
            .expect("put again");
        assert!(used(&old_digest) > Some(past + Duration::from_secs(60)));

        let entries = f.store.entries();
        assert_eq!(entries.len(), 2, "{entries:?}");
        for entry in &entries {
            assert_eq!(entry.bytes, dir_size(&f.store.entry_dir(&entry.digest)));
            assert!(entry.bytes > 0);
        }
        f.store.remove_entry(&old_digest).expect("remove");
        assert!(f.store.lookup(&old_digest).is_none());
        assert!(f.store.lookup(&new.digest()).is_some());
        assert_eq!(f.store.entries().len(), 1);
        assert_eq!(f.store.last_keys("demo").get("build"), Some(&old));
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

    /// Issue 8, item 5: an `entry.json` edited to name the step's script is
    /// refused whole; nothing is written over the script or anywhere else.
    #[test]
    fn issue8_item5_an_entry_naming_a_path_outside_the_outputs_is_refused() {
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
            RestoreScope::new(&["build/**", "top.txt"], ["step.sh".to_owned()]).expect("scope");
        let error = f
            .store
            .restore_within(&entry, f.root.path(), &scope)
            .expect_err("refused");
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
    fn issue8_item5_a_restore_never_writes_over_an_input_or_the_plan() {
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
    fn issue8_item16_the_first_put_sweeps_abandoned_temp_dirs() {
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
}

//! Content hashes of input files, cached by stat like git's index.

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, Metadata};
use std::io;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::error::{ReuseError, io_error};
use super::key::is_sha256_hex;
use super::paths::{check_rel_path, join_rel};
use super::write::{hash_file, write_atomically};

/// How much older than the moment it was hashed a file's mtime must be for
/// its cached hash to be trusted.
///
/// A write in the same timestamp tick as the hash leaves size and mtime as
/// recorded, so a file whose mtime is that close to the hash is "racily
/// clean" and is read again. Two seconds covers the coarsest common
/// timestamps (FAT) and small clock steps; the reference is the moment the
/// file was stat'ed for hashing, which is never later than the moment the
/// cache was written, so this is at least as strict as git's rule.
pub const RACY_MARGIN: Duration = Duration::from_secs(2);

const CACHE_FILE: &str = "hash-cache.json";
/// 2: the stat holds ctime and device too (issue 8, item 4).
const CACHE_FORMAT: u32 = 2;

/// sha256 of file contents, cached by (repo-relative path, size, mtime and
/// ctime in ns, inode, device), as git's index does, and persisted as `<state>/hash-cache.json`, so an unchanged tree is
/// not re-read. The content hash is what counts: a touched file is read again
/// and gives the same hash.
///
/// Paths given to [`Self::hash`] are trusted to come from
/// [`crate::reuse::expand_inputs`], which keeps them inside the repo.
#[derive(Debug)]
pub struct FileHashCache {
    file: PathBuf,
    entries: BTreeMap<String, CachedHash>,
    files_read: u64,
    changed: bool,
    /// Input sets already expanded and hashed while the tree stands still
    /// (see [`Self::stand_still`]), by their patterns, with the
    /// [`tree_changes`] count they were made at.
    still: Option<(u64, InputSets)>,
}

/// Hashed input sets by their patterns.
type InputSets = HashMap<Vec<String>, BTreeMap<String, String>>;

/// How many times gameplan itself wrote into the working tree in this
/// process (a restore that wrote a file); see [`tree_changed`].
static TREE_CHANGES: AtomicU64 = AtomicU64::new(0);

/// Says that gameplan just wrote into the working tree (outside a step's
/// run): input sets hashed before are expanded and hashed again.
pub(crate) fn tree_changed() {
    TREE_CHANGES.fetch_add(1, Ordering::SeqCst);
}

fn tree_changes() -> u64 {
    TREE_CHANGES.load(Ordering::SeqCst)
}

#[derive(Debug, Serialize, Deserialize)]
struct CacheFile {
    format: u32,
    entries: BTreeMap<String, CachedHash>,
}

/// What must be unchanged for a cached hash to be trusted. mtime alone can
/// be put back (`touch -r`, `rsync --inplace -t`) after an in-place rewrite
/// of the same size; ctime cannot be set by a user, and the device tells a
/// file on another mount with the same inode apart.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Stat {
    size: u64,
    mtime_ns: i64,
    ctime_ns: i64,
    inode: u64,
    device: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct CachedHash {
    stat: Stat,
    /// When the file was stat'ed before hashing: the racily-clean reference.
    hashed_at_ns: i64,
    sha256: String,
}

impl CachedHash {
    fn is_trusted_for(&self, stat: &Stat) -> bool {
        let margin = i64::try_from(RACY_MARGIN.as_nanos()).unwrap_or(i64::MAX);
        // As git: the whole stat must be equal, and only the mtime decides
        // whether it is racily clean (a ctime as new as the hash would make
        // every freshly checked-out file a re-read for no gain; a rewrite
        // after the hash always moves the ctime past the recorded one).
        self.stat == *stat && self.stat.mtime_ns < self.hashed_at_ns.saturating_sub(margin)
    }
}

impl FileHashCache {
    /// The cache persisted under `state_dir`; empty when there is none or it
    /// cannot be read or parsed (it is only a cache, so that is never an error).
    pub fn load(state_dir: &Path) -> Self {
        let file = state_dir.join(CACHE_FILE);
        let entries = read_entries(&file);
        Self {
            file,
            entries,
            files_read: 0,
            changed: false,
            still: None,
        }
    }

    /// `true`: nothing runs that could write into the tree (no step is
    /// running), until this is called with `false`. Meanwhile a set of input
    /// patterns is expanded and hashed once: 1,000 steps reading the same
    /// `seed.txt` stat it once, not 1,000 times, as `make` stats a file once
    /// per run. A restore that writes ([`tree_changed`]) starts over; any
    /// step that starts ends the stillness, and with it what was remembered.
    pub fn stand_still(&mut self, still: bool) {
        match (still, &self.still) {
            (true, Some(_)) => {}
            (true, None) => self.still = Some((tree_changes(), HashMap::new())),
            (false, _) => self.still = None,
        }
    }

    /// The hashes of the files `patterns` match: `compute`d, or remembered
    /// from an identical set while the tree stood still.
    pub fn inputs_of<E>(
        &mut self,
        patterns: &[String],
        compute: impl FnOnce(&mut Self) -> Result<BTreeMap<String, String>, E>,
    ) -> Result<BTreeMap<String, String>, E> {
        let now = tree_changes();
        if let Some((at, sets)) = &mut self.still {
            if *at != now {
                *at = now;
                sets.clear();
            }
            if let Some(hashes) = sets.get(patterns) {
                return Ok(hashes.clone());
            }
        }
        let hashes = compute(self)?;
        // Only when nothing changed while computing (a restore elsewhere).
        if let Some((at, sets)) = &mut self.still
            && *at == now
            && tree_changes() == now
        {
            sets.insert(patterns.to_vec(), hashes.clone());
        }
        Ok(hashes)
    }

    /// Lowercase sha256 hex of the content of `root/rel_path`, read only when
    /// the cached entry cannot be trusted.
    pub fn hash(&mut self, root: &Path, rel_path: &str) -> Result<String, ReuseError> {
        check_rel_path(rel_path)?;
        let path = join_rel(root, rel_path);
        // Taken before the stat: any write after this moment gets an mtime
        // no older than this minus the timestamp granularity.
        let started = now_ns();
        let metadata = match super::paths::shared_stat(&path) {
            Some(metadata) => metadata,
            None => fs::metadata(&path).map_err(io_error("read metadata of", &path))?,
        };
        if !metadata.is_file() {
            return Err(io_error("hash", &path)(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a regular file",
            )));
        }
        let stat = stat_of(&metadata);
        if let (Some(stat), Some(entry)) = (&stat, self.entries.get(rel_path))
            && entry.is_trusted_for(stat)
        {
            return Ok(entry.sha256.clone());
        }
        let (size, sha256) = hash_file(&path).map_err(io_error("read", &path))?;
        self.files_read += 1;
        self.changed = true;
        match stat {
            // A size differing from the stat means the file changed while it
            // was read: the hash is right for this read but belongs to no stat.
            Some(stat) if stat.size == size => {
                self.entries.insert(
                    rel_path.to_owned(),
                    CachedHash {
                        stat,
                        hashed_at_ns: started,
                        sha256: sha256.clone(),
                    },
                );
            }
            _ => {
                self.entries.remove(rel_path);
            }
        }
        Ok(sha256)
    }

    /// [`Self::hash`] of each of `paths` (in their order), on up to
    /// `threads` threads, with each file's size. A file that has to be read
    /// is handed back whole (`bytes`) while the `keep` bytes allow it, so a
    /// caller that needs the content too does not read it twice; a file
    /// larger than what is left of `keep` is hashed as it streams by.
    pub fn hash_many(
        &mut self,
        root: &Path,
        paths: &[String],
        threads: usize,
        keep: usize,
    ) -> Vec<Result<HashedFile, ReuseError>> {
        let left = AtomicUsize::new(keep);
        let next = AtomicUsize::new(0);
        let this = &*self;
        let work = || {
            let mut done = Vec::new();
            loop {
                // A few paths per grab: one atomic per file would cost more
                // than the stat it guards on a cached tree.
                let start = next.fetch_add(16, Ordering::Relaxed);
                if start >= paths.len() {
                    return done;
                }
                for (i, rel) in paths.iter().enumerate().skip(start).take(16) {
                    done.push((i, this.look_up_or_read(root, rel, &left)));
                }
            }
        };
        let mut found: Vec<(usize, Result<Looked, ReuseError>)> = if threads > 1 {
            std::thread::scope(|scope| {
                let workers: Vec<_> = (0..threads).map(|_| scope.spawn(work)).collect();
                workers
                    .into_iter()
                    .flat_map(|w| w.join().unwrap_or_default())
                    .collect()
            })
        } else {
            work()
        };
        let mut slots: Vec<Option<Result<Looked, ReuseError>>> =
            std::iter::repeat_with(|| None).take(paths.len()).collect();
        for (i, looked) in found.drain(..) {
            slots[i] = Some(looked);
        }
        slots
            .into_iter()
            .zip(paths)
            .map(|(looked, rel)| {
                let looked = looked.unwrap_or_else(|| {
                    let path = join_rel(root, rel);
                    Err(io_error("hash", &path)(io::Error::other(
                        "its hashing thread stopped",
                    )))
                })?;
                if !matches!(looked.fresh, Fresh::Cached) {
                    self.files_read += 1;
                    self.changed = true;
                }
                match looked.fresh {
                    Fresh::Cached => {}
                    Fresh::Read(entry) => {
                        self.entries.insert(rel.clone(), entry);
                    }
                    Fresh::ReadMoving => {
                        self.entries.remove(rel);
                    }
                }
                Ok(looked.file)
            })
            .collect()
    }

    /// One path of [`Self::hash_many`]: its cached hash when trusted, else
    /// its content read (and the entry to cache, if any).
    fn look_up_or_read(
        &self,
        root: &Path,
        rel_path: &str,
        left: &AtomicUsize,
    ) -> Result<Looked, ReuseError> {
        check_rel_path(rel_path)?;
        let path = join_rel(root, rel_path);
        let started = now_ns();
        let cached = self.entries.get(rel_path);
        // Nothing cached: the file is read anyway, so its stat comes from
        // the open file instead of a second walk of its path (non-blocking,
        // so a FIFO put there meanwhile is refused below, not waited on).
        let (opened, metadata) = if cached.is_some() {
            let metadata = fs::metadata(&path).map_err(io_error("read metadata of", &path))?;
            (None, metadata)
        } else {
            let file = fs::OpenOptions::new()
                .read(true)
                .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
                .open(&path)
                .map_err(io_error("read", &path))?;
            let metadata = file
                .metadata()
                .map_err(io_error("read metadata of", &path))?;
            (Some(file), metadata)
        };
        if !metadata.is_file() {
            return Err(io_error("hash", &path)(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a regular file",
            )));
        }
        let stat = stat_of(&metadata);
        if let (Some(stat), Some(entry)) = (&stat, cached)
            && entry.is_trusted_for(stat)
        {
            return Ok(Looked {
                file: HashedFile {
                    sha256: entry.sha256.clone(),
                    size: metadata.len(),
                    bytes: None,
                },
                fresh: Fresh::Cached,
            });
        }
        let wanted = usize::try_from(metadata.len()).unwrap_or(usize::MAX);
        let reserved = left
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                n.checked_sub(wanted)
            })
            .is_ok();
        let (size, sha256, bytes) = if reserved {
            let mut file = match opened {
                Some(file) => file,
                None => fs::File::open(&path).map_err(io_error("read", &path))?,
            };
            let mut bytes = Vec::with_capacity(wanted.saturating_add(1));
            // Through `take`: `File`'s own read_to_end stats and seeks
            // again for a size this stat already gave.
            io::Read::read_to_end(&mut io::Read::take(&mut file, u64::MAX), &mut bytes)
                .map_err(io_error("read", &path))?;
            let sha256 = super::key::to_hex(&Sha256::digest(&bytes));
            (bytes.len() as u64, sha256, Some(bytes))
        } else {
            let (size, sha256) = hash_file(&path).map_err(io_error("read", &path))?;
            (size, sha256, None)
        };
        // As in `hash`: a size differing from the stat means the file
        // changed while it was read, so the hash belongs to no stat.
        let entry = stat.filter(|s| s.size == size).map(|stat| CachedHash {
            stat,
            hashed_at_ns: started,
            sha256: sha256.clone(),
        });
        Ok(Looked {
            file: HashedFile {
                sha256,
                size,
                bytes,
            },
            fresh: entry.map_or(Fresh::ReadMoving, Fresh::Read),
        })
    }

    /// [`Self::hash`] of each path, as the `inputs` map of a [`crate::reuse::ReuseKey`].
    pub fn hash_all<S: AsRef<str>>(
        &mut self,
        root: &Path,
        paths: &[S],
    ) -> Result<BTreeMap<String, String>, ReuseError> {
        hash_each(paths, |rel| self.hash(root, rel))
    }

    /// Writes the cache atomically, merged with entries another process saved
    /// meanwhile (ours win for the same path). Does nothing when no file was
    /// read since loading. A failure here loses only speed, never correctness.
    pub fn save(&self) -> Result<(), ReuseError> {
        if !self.changed {
            return Ok(());
        }
        if let Some(state_dir) = self.file.parent() {
            crate::state_dir::prepare(state_dir).map_err(io_error("create", state_dir))?;
        }
        let mut entries = read_entries(&self.file);
        entries.extend(
            self.entries
                .iter()
                .map(|(path, entry)| (path.clone(), entry.clone())),
        );
        let document = CacheFile {
            format: CACHE_FORMAT,
            entries,
        };
        let bytes = serde_json::to_vec(&document).map_err(|error| {
            io_error("encode", &self.file)(io::Error::new(io::ErrorKind::InvalidData, error))
        })?;
        write_atomically(&self.file, &bytes)
    }

    /// How many files this cache has read (hashed) since it was loaded; the
    /// rest came from the cache.
    pub fn files_read(&self) -> u64 {
        self.files_read
    }
}

/// sha256 of each of `paths` under `base`, read now, past any cache: for
/// files a step has just written (its outputs), which the stat cache would
/// find racily clean and read anyway, and whose entries would only make
/// every run rewrite the cache.
pub fn hash_fresh<S: AsRef<str>>(
    base: &Path,
    paths: &[S],
) -> Result<BTreeMap<String, String>, ReuseError> {
    hash_each(paths, |rel| {
        check_rel_path(rel)?;
        let path = join_rel(base, rel);
        let (_, sha256) = hash_file(&path).map_err(io_error("read", &path))?;
        Ok(sha256)
    })
}

/// Each of `paths` (relative) with its sha256 by `hash`, as the `inputs`
/// map of a key: the cached and the fresh hashes make the same map.
fn hash_each<S: AsRef<str>>(
    paths: &[S],
    mut hash: impl FnMut(&str) -> Result<String, ReuseError>,
) -> Result<BTreeMap<String, String>, ReuseError> {
    paths
        .iter()
        .map(|rel| {
            let rel = rel.as_ref();
            Ok((rel.to_owned(), hash(rel)?))
        })
        .collect()
}

/// A file as [`FileHashCache::hash_many`] found it.
#[derive(Debug)]
pub struct HashedFile {
    pub sha256: String,
    pub size: u64,
    /// Its content, when it had to be read and the budget allowed keeping it.
    pub bytes: Option<Vec<u8>>,
}

/// One path looked up: the file, and what it changes in the cache.
struct Looked {
    file: HashedFile,
    fresh: Fresh,
}

enum Fresh {
    /// Its cached hash was trusted.
    Cached,
    /// It was read: its new entry.
    Read(CachedHash),
    /// It was read, but its stat moved meanwhile: no entry holds.
    ReadMoving,
}

fn read_entries(file: &Path) -> BTreeMap<String, CachedHash> {
    let Ok(bytes) = fs::read(file) else {
        return BTreeMap::new();
    };
    let Ok(document) = serde_json::from_slice::<CacheFile>(&bytes) else {
        return BTreeMap::new();
    };
    if document.format != CACHE_FORMAT {
        return BTreeMap::new();
    }
    let now = now_ns();
    document
        .entries
        .into_iter()
        // A hash time in the future (clock stepped back) would make racy
        // entries look safe, and a bad path or hash is someone else's file.
        .filter(|(path, entry)| {
            check_rel_path(path).is_ok()
                && is_sha256_hex(&entry.sha256)
                && entry.hashed_at_ns <= now
        })
        .collect()
}

fn stat_of(metadata: &Metadata) -> Option<Stat> {
    let mtime_ns = nanos_since_epoch(metadata.modified().ok()?);
    #[cfg(unix)]
    let (ctime_ns, inode, device) = {
        use std::os::unix::fs::MetadataExt;
        let ctime_ns = metadata
            .ctime()
            .saturating_mul(1_000_000_000)
            .saturating_add(metadata.ctime_nsec());
        (ctime_ns, metadata.ino(), metadata.dev())
    };
    // Without a ctime the mtime stands in for it (the racy check still holds).
    #[cfg(not(unix))]
    let (ctime_ns, inode, device) = (mtime_ns, 0, 0);
    Some(Stat {
        size: metadata.len(),
        mtime_ns,
        ctime_ns,
        inode,
        device,
    })
}

fn now_ns() -> i64 {
    nanos_since_epoch(SystemTime::now())
}

fn nanos_since_epoch(time: SystemTime) -> i64 {
    match time.duration_since(UNIX_EPOCH) {
        Ok(after) => i64::try_from(after.as_nanos()).unwrap_or(i64::MAX),
        Err(before) => i64::try_from(before.duration().as_nanos()).map_or(i64::MIN, |ns| -ns),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reuse::key::sha256_hex;
    use std::fs::OpenOptions;
    use std::io::Write as _;

    struct Fixture {
        root: tempfile::TempDir,
        state: tempfile::TempDir,
    }

    impl Fixture {
        /// `a.txt` under the root holding `content`, written an hour ago (so
        /// its stat can be trusted): its path and that time.
        fn old_a(&self, content: &[u8]) -> (PathBuf, SystemTime) {
            let (file, old) = (self.root.path().join("a.txt"), an_hour_ago());
            write_old(&file, content, old);
            (file, old)
        }

        /// The cache as a run loads it from the state dir.
        fn cache(&self) -> FileHashCache {
            FileHashCache::load(self.state.path())
        }

        /// `a.txt`'s hash through `cache`.
        fn hash_a(&self, cache: &mut FileHashCache) -> String {
            cache.hash(self.root.path(), "a.txt").expect("hash")
        }
    }

    fn fixture() -> Fixture {
        Fixture {
            root: tempfile::tempdir().expect("root"),
            state: tempfile::tempdir().expect("state"),
        }
    }

    fn an_hour_ago() -> SystemTime {
        SystemTime::now() - Duration::from_secs(3600)
    }

    fn set_mtime(path: &Path, time: SystemTime) {
        OpenOptions::new()
            .write(true)
            .open(path)
            .expect("open for times")
            .set_modified(time)
            .expect("set mtime");
    }

    /// Writes `content` with an mtime safely in the past, so it is not racy.
    fn write_old(path: &Path, content: &[u8], mtime: SystemTime) {
        fs::write(path, content).expect("write");
        set_mtime(path, mtime);
    }

    /// An old `a.txt` holding `content` hashed through one cache before and
    /// after `change` is done to it: both hashes, and the files it read.
    fn around(content: &[u8], change: impl FnOnce(&Path)) -> (String, String, u64) {
        let f = fixture();
        let (file, _) = f.old_a(content);
        let mut cache = f.cache();
        let before = f.hash_a(&mut cache);
        change(&file);
        let after = f.hash_a(&mut cache);
        (before, after, cache.files_read())
    }

    #[test]
    fn unchanged_file_is_not_read_again_even_after_reload() {
        let f = fixture();
        f.old_a(b"aaaa");

        let mut cache = f.cache();
        let first = f.hash_a(&mut cache);
        assert_eq!(first, sha256_hex(b"aaaa"));
        assert_eq!(f.hash_a(&mut cache), first);
        assert_eq!(cache.files_read(), 1);
        cache.save().expect("save");

        let mut reloaded = f.cache();
        assert_eq!(f.hash_a(&mut reloaded), first);
        assert_eq!(reloaded.files_read(), 0);
    }

    /// Issue 8, item 4: same inode, same size, mtime put back, other bytes.
    /// The ctime moved, so the file is read again and the new bytes count.
    #[test]
    fn in_place_rewrite_with_mtime_put_back_is_read_again() {
        let f = fixture();
        let (file, old) = f.old_a(b"aaaa");
        let mut cache = f.cache();
        assert_eq!(f.hash_a(&mut cache), sha256_hex(b"aaaa"));
        cache.save().expect("save");
        // The ctime of the first write must be older than the rewrite's.
        std::thread::sleep(Duration::from_millis(20));

        let mut handle = OpenOptions::new().write(true).open(&file).expect("open");
        handle.write_all(b"bbbb").expect("overwrite in place");
        handle.set_modified(old).expect("put the mtime back");
        drop(handle);
        let mut reloaded = f.cache();
        assert_eq!(f.hash_a(&mut reloaded), sha256_hex(b"bbbb"));
        assert_eq!(reloaded.files_read(), 1);
    }

    /// Issue 8, item 4: a stat from another device (same inode number) is
    /// not the cached file's.
    #[test]
    fn another_device_or_ctime_is_not_trusted() {
        let stat = Stat {
            size: 4,
            mtime_ns: 1,
            ctime_ns: 2,
            inode: 7,
            device: 1,
        };
        let cached = CachedHash {
            stat: stat.clone(),
            hashed_at_ns: now_ns(),
            sha256: sha256_hex(b"x"),
        };
        assert!(cached.is_trusted_for(&stat));
        assert!(!cached.is_trusted_for(&Stat {
            device: 2,
            ..stat.clone()
        }));
        assert!(!cached.is_trusted_for(&Stat {
            ctime_ns: 3,
            ..stat.clone()
        }));
    }

    #[test]
    fn touched_file_is_read_again_and_keeps_its_hash() {
        let (before, after, read) = around(b"content", |file| {
            set_mtime(file, an_hour_ago() + Duration::from_secs(60));
        });
        assert_eq!(after, before);
        assert_eq!(read, 2);
    }

    #[test]
    fn changed_content_with_new_mtime_gives_new_hash() {
        let (before, after, _) = around(b"one", |file| {
            write_old(file, b"two", an_hour_ago() + Duration::from_secs(1));
        });
        assert_ne!(after, before);
        assert_eq!(after, sha256_hex(b"two"));
    }

    #[test]
    fn racily_clean_file_is_read_again() {
        let f = fixture();
        let file = f.root.path().join("fresh.txt");
        fs::write(&file, b"just written").expect("write");

        let mut cache = f.cache();
        let hash = cache.hash(f.root.path(), "fresh.txt").expect("hash");
        assert_eq!(cache.hash(f.root.path(), "fresh.txt").expect("hash"), hash);
        assert_eq!(
            cache.files_read(),
            2,
            "an mtime as new as the hash is not trusted"
        );
        cache.save().expect("save");

        let mut reloaded = f.cache();
        reloaded.hash(f.root.path(), "fresh.txt").expect("hash");
        assert_eq!(reloaded.files_read(), 1, "nor after a reload");

        // Once the file is old enough relative to its hash, it is trusted.
        set_mtime(&file, an_hour_ago());
        reloaded.hash(f.root.path(), "fresh.txt").expect("hash");
        reloaded.hash(f.root.path(), "fresh.txt").expect("hash");
        assert_eq!(reloaded.files_read(), 2);
    }

    #[test]
    fn corrupt_or_foreign_cache_file_is_an_empty_cache() {
        let f = fixture();
        write_old(&f.root.path().join("a.txt"), b"a", an_hour_ago());
        let cache_file = f.state.path().join(CACHE_FILE);
        for garbage in [
            &b"{not json"[..],
            b"",
            b"{\"format\":99,\"entries\":{}}",
            b"{\"format\":1,\"entries\":{\"../x\":{\"stat\":{\"size\":1,\"mtime_ns\":0,\"inode\":0},\"hashed_at_ns\":9,\"sha256\":\"zz\"}}}",
        ] {
            fs::write(&cache_file, garbage).expect("write garbage");
            let mut cache = f.cache();
            assert_eq!(
                f.hash_a(&mut cache),
                sha256_hex(b"a")
            );
            assert_eq!(cache.files_read(), 1);
            cache.save().expect("save replaces the garbage");
            let mut reloaded = f.cache();
            f.hash_a(&mut reloaded);
            assert_eq!(reloaded.files_read(), 0);
        }
    }

    #[test]
    fn saves_from_two_processes_merge() {
        let f = fixture();
        write_old(&f.root.path().join("a.txt"), b"a", an_hour_ago());
        write_old(&f.root.path().join("b.txt"), b"b", an_hour_ago());
        let mut first = f.cache();
        let mut second = f.cache();
        f.hash_a(&mut first);
        second.hash(f.root.path(), "b.txt").expect("hash");
        first.save().expect("save");
        second.save().expect("save");
        let mut reloaded = f.cache();
        let all = reloaded
            .hash_all(f.root.path(), &["a.txt", "b.txt"])
            .expect("hash all");
        assert_eq!(all["a.txt"], sha256_hex(b"a"));
        assert_eq!(all["b.txt"], sha256_hex(b"b"));
        assert_eq!(reloaded.files_read(), 0);
    }

    #[test]
    fn missing_file_and_bad_path_are_errors_naming_the_path() {
        let f = fixture();
        let mut cache = f.cache();
        let error = cache.hash(f.root.path(), "gone.txt").expect_err("missing");
        assert!(error.to_string().contains("gone.txt"), "{error}");
        let error = cache.hash(f.root.path(), "../x").expect_err("escape");
        assert!(matches!(error, ReuseError::BadRelativePath { .. }));
        fs::create_dir(f.root.path().join("dir")).expect("mkdir");
        assert!(cache.hash(f.root.path(), "dir").is_err());
    }

    #[test]
    fn hash_many_agrees_with_hash_and_keeps_read_bytes_within_the_budget() {
        let f = fixture();
        let old = an_hour_ago();
        let paths: Vec<String> = (0..40).map(|i| format!("f{i:02}.txt")).collect();
        for (i, rel) in paths.iter().enumerate() {
            write_old(
                &f.root.path().join(rel),
                format!("file {i:02}").as_bytes(),
                old,
            );
        }
        let mut cache = f.cache();
        // Budget for 3 of the 7-byte files: the rest are hashed, not kept.
        let found = cache.hash_many(f.root.path(), &paths, 3, 21);
        let kept = found
            .iter()
            .filter(|r| r.as_ref().is_ok_and(|h| h.bytes.is_some()))
            .count();
        assert_eq!(kept, 3, "the keep budget is a limit");
        for (i, (rel, hashed)) in paths.iter().zip(&found).enumerate() {
            let hashed = hashed.as_ref().expect("hashed");
            let content = format!("file {i:02}");
            assert_eq!(hashed.sha256, sha256_hex(content.as_bytes()), "{rel}");
            assert_eq!(hashed.size, 7);
            if let Some(bytes) = &hashed.bytes {
                assert_eq!(bytes, content.as_bytes());
            }
        }
        assert_eq!(cache.files_read(), 40);
        cache.save().expect("save");
        let mut again = f.cache();
        let found = again.hash_many(f.root.path(), &paths, 2, usize::MAX);
        assert_eq!(again.files_read(), 0, "an unchanged tree is not read again");
        assert!(
            found
                .iter()
                .all(|r| r.as_ref().is_ok_and(|h| h.bytes.is_none()))
        );
        let missing = again.hash_many(f.root.path(), &["nope.txt".to_owned()], 1, 0);
        assert!(
            missing[0]
                .as_ref()
                .unwrap_err()
                .to_string()
                .contains("nope.txt")
        );
    }

    #[test]
    fn save_without_reads_writes_nothing() {
        let f = fixture();
        f.cache().save().expect("save");
        assert!(!f.state.path().join(CACHE_FILE).exists());
    }

    /// Issue 19: inside a key computation the stat an input's expansion
    /// took serves its hash (one system call, not two); the guard ends it,
    /// and a later hash takes its own stat and sees a rewrite.
    #[test]
    fn a_shared_stat_serves_one_key_computation_and_no_later_hash() {
        let f = fixture();
        let (file, _) = f.old_a(b"aaaa");
        let mut cache = f.cache();
        cache.hash(f.root.path(), "a.txt").expect("first hash");

        let sharing = crate::reuse::share_stats();
        let files = crate::reuse::expand_inputs(f.root.path(), &["a.txt"]).expect("expand");
        assert_eq!(files, ["a.txt"]);
        // The file changes between expansion and hash: the key still
        // describes the file as it was when expanded (the stat shared).
        write_old(&file, b"bbbbbb", an_hour_ago());
        assert_eq!(f.hash_a(&mut cache), sha256_hex(b"aaaa"));
        // Taken once: a second hash in the same computation stats again.
        assert_eq!(f.hash_a(&mut cache), sha256_hex(b"bbbbbb"));
        crate::reuse::expand_inputs(f.root.path(), &["a.txt"]).expect("expand");
        drop(sharing);
        write_old(&file, b"cccccccc", an_hour_ago());
        assert_eq!(
            f.hash_a(&mut cache),
            sha256_hex(b"cccccccc"),
            "a stat left over from a finished computation is never used"
        );
    }
}

//! The store's index: every entry's metadata in one append-only,
//! checksummed log, `store/index.log`.
//!
//! # Design
//!
//! - **One line per record**: eight hex digits of the CRC32C of the JSON
//!   text, a space, the JSON text, `\n`. A record is appended with one
//!   `write` on a file opened `O_APPEND`, so records of concurrent runs
//!   never interleave on a local filesystem; a run holds a shared `flock`
//!   on the log while it may append, and `gc` compacts only under an
//!   exclusive one (otherwise it appends `drop` records).
//! - **Read once per run.** The whole log is read into memory when the
//!   store is first asked; a reused step then costs no store I/O at all.
//! - **Damage is a miss, never a wrong restore.** A last line without its
//!   `\n` is a tail torn by a kill (or a record still being written by a
//!   concurrent run) and is ignored; a line whose checksum or JSON fails
//!   anywhere else is skipped with a warning naming its line. An appender
//!   that finds the log not ending in `\n` ends the torn line first, so the
//!   next record is whole.
//! - **Compaction** (by `gc`) writes the surviving entries, each with its
//!   last use folded in, to a temporary file and renames it over the log.

use std::collections::{BTreeSet, HashMap};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::error::{ReuseError, io_error};
use super::store::Entry;
use super::write::unique_suffix;

/// The log's file name under `store/`.
pub(crate) const INDEX_FILE: &str = "index.log";

/// One record of the log.
#[derive(Debug)]
pub(crate) enum Record {
    /// A stored result: its entry and the canonical key text it was made from.
    Put {
        /// Milliseconds since the epoch when it was stored (or last used,
        /// in a compacted log).
        at: u64,
        entry: Entry,
        key: String,
    },
    /// Entries reused by a run, noted once at its end.
    Used { at: u64, keys: Vec<String> },
    /// Entries `gc` removed while a run held the log (no compaction then).
    Drop { keys: Vec<String> },
}

/// A record as written: `{"op":…}` with the fields of its kind. A plain
/// struct, not a tagged enum, so it is read in one streaming pass (serde
/// buffers a whole internally tagged value first), and the key stays the
/// canonical JSON text it was hashed from, byte for byte.
#[derive(Serialize, Deserialize)]
struct Line<'a> {
    op: Op,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    at: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    entry: Option<std::borrow::Cow<'a, Entry>>,
    #[serde(default, borrow, skip_serializing_if = "Option::is_none")]
    key: Option<&'a serde_json::value::RawValue>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    keys: Option<std::borrow::Cow<'a, [String]>>,
}

#[derive(Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "snake_case")]
enum Op {
    Put,
    Used,
    Drop,
}

/// An entry as the index knows it.
#[derive(Debug, Clone)]
pub(crate) struct Indexed {
    pub entry: Entry,
    /// The canonical key text (`key.json` of the old layout).
    pub key_text: String,
    pub last_used: SystemTime,
    /// Bytes of its record in the log.
    pub record_bytes: u64,
}

/// What reading the log found.
#[derive(Debug, Default)]
pub(crate) struct Loaded {
    pub entries: HashMap<String, Indexed>,
    /// Skipped records, one line each, for the user.
    pub warnings: Vec<String>,
}

pub(crate) fn now_ms() -> u64 {
    millis(SystemTime::now())
}

fn millis(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn from_millis(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

/// The line for `record`, `\n` included.
pub(crate) fn encode(record: &Record) -> Vec<u8> {
    let raw;
    let line = match record {
        Record::Put { at, entry, key } => {
            // The canonical key text is JSON; were it not, the record
            // would fail its digest check on reading and be a miss.
            raw = serde_json::value::RawValue::from_string(key.clone()).ok();
            Line {
                op: Op::Put,
                at: Some(*at),
                entry: Some(std::borrow::Cow::Borrowed(entry)),
                key: raw.as_deref(),
                keys: None,
            }
        }
        Record::Used { at, keys } => Line {
            op: Op::Used,
            at: Some(*at),
            entry: None,
            key: None,
            keys: Some(std::borrow::Cow::Borrowed(keys)),
        },
        Record::Drop { keys } => Line {
            op: Op::Drop,
            at: None,
            entry: None,
            key: None,
            keys: Some(std::borrow::Cow::Borrowed(keys)),
        },
    };
    // Serializing plain data into a Vec cannot fail.
    let json = serde_json::to_vec(&line).unwrap_or_default();
    let mut line = format!("{:08x} ", crc32c::crc32c(&json)).into_bytes();
    line.extend_from_slice(&json);
    line.push(b'\n');
    line
}

/// The record of one line (without its `\n`), if its checksum and JSON hold.
pub(crate) fn decode(line: &[u8]) -> Option<Record> {
    let (crc, json) = (line.get(..8)?, line.get(9..)?);
    if line.get(8) != Some(&b' ') {
        return None;
    }
    let crc = u32::from_str_radix(std::str::from_utf8(crc).ok()?, 16).ok()?;
    if crc32c::crc32c(json) != crc {
        return None;
    }
    let line: Line = serde_json::from_slice(json).ok()?;
    match line.op {
        Op::Put => Some(Record::Put {
            at: line.at?,
            entry: line.entry?.into_owned(),
            key: line.key?.get().to_owned(),
        }),
        Op::Used => Some(Record::Used {
            at: line.at?,
            keys: line.keys?.into_owned(),
        }),
        Op::Drop => Some(Record::Drop {
            keys: line.keys?.into_owned(),
        }),
    }
}

/// Reads the log at `path` (no log is an empty index).
pub(crate) fn load(path: &Path) -> Loaded {
    let mut bytes = Vec::new();
    match File::open(path).and_then(|mut file| file.read_to_end(&mut bytes)) {
        Ok(_) => {}
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Loaded::default(),
        Err(error) => {
            return Loaded {
                entries: HashMap::new(),
                warnings: vec![format!(
                    "cannot read the store index {} ({error}); every step runs as if nothing were stored",
                    path.display()
                )],
            };
        }
    }
    parse(&bytes, path)
}

fn parse(bytes: &[u8], path: &Path) -> Loaded {
    let mut loaded = Loaded::default();
    // Whatever follows the last `\n` is a torn or unfinished tail.
    let whole = bytes
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(&[][..], |end| &bytes[..end]);
    if whole.is_empty() {
        return loaded;
    }
    for (number, line) in whole.split(|&b| b == b'\n').enumerate() {
        if line.is_empty() {
            // An appender's `\n` closing a torn line leaves at most this.
            continue;
        }
        let Some(record) = decode(line) else {
            loaded.warnings.push(format!(
                "warning: the store index {} has a damaged record at line {}; it is skipped (that result is a miss and its step runs again); `gameplan gc` rewrites the index without it",
                path.display(),
                number + 1
            ));
            continue;
        };
        apply(&mut loaded.entries, record, line.len() as u64 + 1);
    }
    loaded
}

fn apply(entries: &mut HashMap<String, Indexed>, record: Record, record_bytes: u64) {
    match record {
        Record::Put { at, entry, key } => {
            // A record whose key text does not hash to its digest, or whose
            // entry names another key, belongs to no lookup.
            if super::key::sha256_hex(key.as_bytes()) != entry.key {
                return;
            }
            let at = from_millis(at);
            let last_used = entries
                .get(&entry.key)
                .map_or(at, |earlier| earlier.last_used.max(at));
            entries.insert(
                entry.key.clone(),
                Indexed {
                    entry,
                    key_text: key,
                    last_used,
                    record_bytes,
                },
            );
        }
        Record::Used { at, keys } => {
            let at = from_millis(at);
            for key in keys {
                if let Some(indexed) = entries.get_mut(&key) {
                    indexed.last_used = indexed.last_used.max(at);
                }
            }
        }
        Record::Drop { keys } => {
            for key in keys {
                entries.remove(&key);
            }
        }
    }
}

/// The log opened for appending by one run, with a shared lock held until
/// it is dropped (so `gc` cannot compact it away underneath).
#[derive(Debug)]
pub(crate) struct Appender {
    file: File,
}

impl Appender {
    /// Opens (creating) the log in `store_dir`, takes the shared lock, and
    /// ends a torn last line so the next record starts on a line of its own.
    pub(crate) fn open(store_dir: &Path) -> Result<Self, ReuseError> {
        let path = store_dir.join(INDEX_FILE);
        for _ in 0..3 {
            let file = match open_append(&path) {
                Err(error) if error.kind() == io::ErrorKind::NotFound => {
                    fs::create_dir_all(store_dir)
                        .map_err(io_error("create the store", store_dir))?;
                    open_append(&path)
                }
                other => other,
            }
            .map_err(io_error("open", &path))?;
            file.lock_shared().map_err(io_error("lock", &path))?;
            // gc may have compacted (renamed a new log over this one)
            // between the open and the lock: append to the current log.
            if !same_file(&file, &path) {
                continue;
            }
            let mut appender = Self { file };
            appender.end_torn_line(&path)?;
            return Ok(appender);
        }
        Err(io_error("open", &path)(io::Error::other(
            "the index kept being replaced while opening it; run again",
        )))
    }

    fn end_torn_line(&mut self, path: &Path) -> Result<(), ReuseError> {
        use std::os::unix::fs::FileExt as _;
        let size = self
            .file
            .metadata()
            .map_err(io_error("read metadata of", path))?
            .len();
        if size == 0 {
            return Ok(());
        }
        let mut last = [0u8];
        self.file
            .read_exact_at(&mut last, size - 1)
            .map_err(io_error("read", path))?;
        if last[0] != b'\n' {
            self.file
                .write_all(b"\n")
                .map_err(io_error("append to", path))?;
        }
        Ok(())
    }

    /// Appends `record` in one write.
    pub(crate) fn append(&mut self, record: &Record) -> io::Result<()> {
        self.file.write_all(&encode(record))
    }
}

fn open_append(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .open(path)
}

#[cfg(unix)]
fn same_file(file: &File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    match (file.metadata(), fs::metadata(path)) {
        (Ok(open), Ok(named)) => open.ino() == named.ino() && open.dev() == named.dev(),
        _ => false,
    }
}

#[cfg(not(unix))]
fn same_file(_file: &File, _path: &Path) -> bool {
    true
}

/// What a compaction did.
#[derive(Debug, Default)]
pub(crate) struct Compacted {
    /// Entries written to the new log.
    pub kept: HashMap<String, Indexed>,
    /// Bytes the log shrank by.
    pub freed_bytes: u64,
}

/// Rewrites the log in `store_dir` with its entries minus `removed`, when no
/// run holds it. `Ok(None)`: a run holds it; `removed` was appended as a
/// record instead, and the log is compacted by a later `gc`.
pub(crate) fn compact(
    store_dir: &Path,
    removed: &BTreeSet<String>,
) -> Result<Option<Compacted>, ReuseError> {
    let path = store_dir.join(INDEX_FILE);
    let mut file = match OpenOptions::new().read(true).append(true).open(&path) {
        Ok(file) => file,
        Err(error) if error.kind() == io::ErrorKind::NotFound => {
            return Ok(Some(Compacted::default()));
        }
        Err(error) => return Err(io_error("open", &path)(error)),
    };
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            if !removed.is_empty() {
                file.lock_shared().map_err(io_error("lock", &path))?;
                file.write_all(&encode(&Record::Drop {
                    keys: removed.iter().cloned().collect(),
                }))
                .map_err(io_error("append to", &path))?;
            }
            return Ok(None);
        }
        Err(std::fs::TryLockError::Error(error)) => return Err(io_error("lock", &path)(error)),
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)
        .map_err(io_error("read", &path))?;
    let old_size = bytes.len() as u64;
    let mut loaded = parse(&bytes, &path);
    loaded.entries.retain(|digest, _| !removed.contains(digest));
    let mut digests: Vec<&String> = loaded.entries.keys().collect();
    digests.sort();
    let mut text = Vec::new();
    let mut kept = HashMap::new();
    for digest in digests {
        let indexed = &loaded.entries[digest];
        let line = encode(&Record::Put {
            at: millis(indexed.last_used),
            entry: indexed.entry.clone(),
            key: indexed.key_text.clone(),
        });
        let mut indexed = indexed.clone();
        indexed.record_bytes = line.len() as u64;
        kept.insert(digest.clone(), indexed);
        text.extend_from_slice(&line);
    }
    let temp: PathBuf = store_dir.join(format!(".tmp-index-{}", unique_suffix()));
    let written = fs::write(&temp, &text)
        .and_then(|()| File::open(&temp)?.sync_all())
        .and_then(|()| fs::rename(&temp, &path));
    if let Err(error) = written {
        let _ = fs::remove_file(&temp);
        return Err(io_error("rewrite", &path)(error));
    }
    // The lock on the old file goes with it; the new log is whole.
    drop(file);
    Ok(Some(Compacted {
        kept,
        freed_bytes: old_size.saturating_sub(text.len() as u64),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn put(key_text: &str, at: u64) -> Record {
        Record::Put {
            at,
            entry: Entry {
                format: super::super::store::INDEX_ENTRY_FORMAT,
                key: super::super::key::sha256_hex(key_text.as_bytes()),
                outputs: Vec::new(),
                meta: Value::Null,
            },
            key: key_text.to_owned(),
        }
    }

    #[test]
    fn records_round_trip_and_a_flipped_byte_fails_the_checksum() {
        let line = encode(&put("{\"a\":1}", 5));
        assert_eq!(line.last(), Some(&b'\n'));
        assert!(decode(&line[..line.len() - 1]).is_some());
        let mut damaged = line.clone();
        let middle = damaged.len() / 2;
        damaged[middle] ^= 0x20;
        assert!(decode(&damaged[..damaged.len() - 1]).is_none());
    }

    #[test]
    fn a_torn_tail_is_ignored_quietly_and_a_damaged_middle_record_is_skipped_loudly() {
        let path = Path::new("index.log");
        let (a, b, c) = (
            encode(&put("{\"a\":1}", 1)),
            encode(&put("{\"b\":1}", 2)),
            encode(&put("{\"c\":1}", 3)),
        );
        let mut bytes = a.clone();
        let mut damaged = b.clone();
        damaged[12] ^= 1;
        bytes.extend_from_slice(&damaged);
        bytes.extend_from_slice(&c[..c.len() / 2]);
        let loaded = parse(&bytes, path);
        assert_eq!(loaded.entries.len(), 1, "{loaded:?}");
        assert_eq!(loaded.warnings.len(), 1, "{:?}", loaded.warnings);
        assert!(
            loaded.warnings[0].contains("line 2"),
            "{:?}",
            loaded.warnings
        );
    }

    #[test]
    fn a_record_whose_key_text_does_not_hash_to_its_digest_is_ignored() {
        let mut record = put("{\"a\":1}", 1);
        if let Record::Put { key, .. } = &mut record {
            *key = "{\"a\":2}".to_owned();
        }
        let loaded = parse(&encode(&record), Path::new("index.log"));
        assert!(loaded.entries.is_empty());
        assert!(loaded.warnings.is_empty());
    }

    #[test]
    fn used_and_drop_records_fold_into_the_entries() {
        let digest = super::super::key::sha256_hex(b"{\"a\":1}");
        let mut bytes = encode(&put("{\"a\":1}", 1000));
        bytes.extend(encode(&Record::Used {
            at: 9000,
            keys: vec![digest.clone(), "unknown".to_owned()],
        }));
        let loaded = parse(&bytes, Path::new("index.log"));
        assert_eq!(loaded.entries[&digest].last_used, from_millis(9000));
        bytes.extend(encode(&Record::Drop {
            keys: vec![digest.clone()],
        }));
        assert!(parse(&bytes, Path::new("index.log")).entries.is_empty());
    }
}

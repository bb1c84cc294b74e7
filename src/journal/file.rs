//! The append-only journal file: create, reopen for appending, read, group
//! commit.

use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::atomic::{create_dirs_durably, parent_dir, sync_dir};
use super::record::{self, Decoded, MAX_RECORD_BYTES};
use super::{Corruption, FORMAT_VERSION, JournalError};

/// How a journal makes its file durable: `File::sync_data` outside tests; a
/// test double proves that an acknowledgement never comes before the sync.
pub type SyncFn = Arc<dyn Fn(&File) -> io::Result<()> + Send + Sync>;

fn sync_data() -> SyncFn {
    Arc::new(File::sync_data)
}

/// The number of a record in its journal, counted from 1 by this handle
/// (records already in the file when it was opened are not counted).
pub type Seq = u64;

/// An open journal, appending at its end.
///
/// Every [`append`](Journal::append) reaches the kernel at once; only
/// [`commit`](Journal::commit) (or [`append_durable`](Journal::append_durable))
/// waits for the disk. What is durable is tracked by sequence number, never
/// by a flag: a commit covers exactly the records appended before it began,
/// so a record appended while a background sync runs is not taken as synced.
/// Dropping a journal with unsynced records syncs them on a best-effort basis.
pub struct Journal {
    path: PathBuf,
    file: File,
    /// Bytes of whole, intact records: where a failed append is cut back to.
    len: u64,
    /// The last record appended, and the last one known to be on disk.
    appended: Seq,
    synced: Seq,
    /// A write could not be undone or a sync failed: what is on disk is no
    /// longer known, so appending more would build on sand.
    broken: bool,
    sync: SyncFn,
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Journal")
            .field("path", &self.path)
            .field("appended", &self.appended)
            .field("synced", &self.synced)
            .field("broken", &self.broken)
            .finish_non_exhaustive()
    }
}

/// What a journal holds: its intact records, in order.
#[derive(Debug, Clone, PartialEq)]
pub struct Replay<T> {
    pub records: Vec<T>,
    /// The last line was incomplete or damaged: a write the process did not
    /// live to finish. Its record never counted; [`Journal::open`] removes it.
    pub torn_tail: Option<TornTail>,
}

/// The incomplete last line of a journal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TornTail {
    /// 1-based line number.
    pub line: usize,
    /// Its length, the newline included if it had one.
    pub bytes: u64,
}

impl Journal {
    /// Creates a new, empty journal at `path`, creating missing parent
    /// directories. Fails if a file is already there.
    pub fn create(path: &Path) -> Result<Journal, JournalError> {
        let dir = parent_dir(path);
        create_dirs_durably(dir).map_err(io_error("create the directory of", path))?;
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create_new(true)
            .open(path)
            .map_err(|source| match source.kind() {
                io::ErrorKind::AlreadyExists => JournalError::Exists {
                    path: path.to_path_buf(),
                },
                _ => io_error("create the journal", path)(source),
            })?;
        // Without this a durable record could live in a file whose name
        // does not survive a crash.
        sync_dir(dir).map_err(io_error("sync the directory of", path))?;
        Ok(Journal {
            path: path.to_path_buf(),
            file,
            len: 0,
            appended: 0,
            synced: 0,
            broken: false,
            sync: sync_data(),
        })
    }

    /// Opens an existing journal to append to it, returning the records it
    /// holds.
    ///
    /// A torn last line is cut off (and that cut synced) before this returns,
    /// so new records follow the last intact one. Any other damaged line is
    /// corruption: the error names the line and the file is left untouched.
    pub fn open<T: DeserializeOwned>(path: &Path) -> Result<(Journal, Replay<T>), JournalError> {
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .open(path)
            .map_err(|source| open_error(path, source))?;
        let (replay, intact_len) = scan(path, &file)?;
        if replay.torn_tail.is_some() {
            file.set_len(intact_len)
                .and_then(|()| file.sync_data())
                .map_err(io_error("cut the torn last line from", path))?;
        }
        let journal = Journal {
            path: path.to_path_buf(),
            file,
            len: intact_len,
            appended: 0,
            synced: 0,
            broken: false,
            sync: sync_data(),
        };
        Ok((journal, replay))
    }

    /// Reads a journal without changing it, torn last line or not.
    pub fn read<T: DeserializeOwned>(path: &Path) -> Result<Replay<T>, JournalError> {
        let file = File::open(path).map_err(|source| open_error(path, source))?;
        scan(path, &file).map(|(replay, _)| replay)
    }

    /// The first record of a journal, if that line is whole and intact, however
    /// damaged the rest is: a corrupt journal still tells which plan it was
    /// for, so the run is not mistaken for another plan's.
    pub fn read_first<T: DeserializeOwned>(path: &Path) -> Option<T> {
        let file = File::open(path).ok()?;
        let mut reader = BufReader::new(file);
        let mut line = Vec::new();
        let read = read_line(&mut reader, &mut line).ok()??;
        if !matches!(read.kind, LineKind::Complete) {
            return None;
        }
        match record::decode(&line[..line.len() - 1]) {
            Decoded::Event(event) => serde_json::from_str(event.get()).ok(),
            Decoded::Corrupt(_) | Decoded::UnsupportedVersion(_) => None,
        }
    }

    /// Replaces how the file is synced (tests use a double that records
    /// each sync).
    #[must_use]
    pub fn with_sync(mut self, sync: SyncFn) -> Journal {
        self.sync = sync;
        self
    }

    /// Appends `event` as one record, handed to the kernel in a single write
    /// so that killing the process cannot leave half of it in a user-space
    /// buffer. Not durable until a [`commit`](Journal::commit) covers it.
    pub fn append<T: Serialize + ?Sized>(&mut self, event: &T) -> Result<Seq, JournalError> {
        self.write_record(event, false)
    }

    fn write_record<T: Serialize + ?Sized>(
        &mut self,
        event: &T,
        durable: bool,
    ) -> Result<Seq, JournalError> {
        if self.broken {
            return Err(JournalError::Unusable {
                path: self.path.clone(),
            });
        }
        let line = record::encode(event, durable).map_err(|source| JournalError::Encode {
            path: self.path.clone(),
            source,
        })?;
        if line.len() > MAX_RECORD_BYTES {
            return Err(JournalError::RecordTooLarge {
                path: self.path.clone(),
                size: line.len(),
                limit: MAX_RECORD_BYTES,
            });
        }
        if let Err(source) = self.file.write_all(&line) {
            // A partial line with records after it would read back as
            // corruption instead of a torn tail, so cut it off now.
            self.broken = self.file.set_len(self.len).is_err();
            return Err(io_error("append to the journal", &self.path)(source));
        }
        self.len += line.len() as u64;
        self.appended += 1;
        Ok(self.appended)
    }

    /// The last record appended and the last one known durable.
    pub fn positions(&self) -> (Seq, Seq) {
        (self.appended, self.synced)
    }

    /// Makes every record appended so far durable with one fsync; free when
    /// there is nothing new.
    pub fn commit(&mut self) -> Result<(), JournalError> {
        if self.broken {
            return Err(JournalError::Unusable {
                path: self.path.clone(),
            });
        }
        if self.synced >= self.appended {
            return Ok(());
        }
        let upto = self.appended;
        if let Err(source) = (self.sync)(&self.file) {
            // After a failed fsync the kernel may have dropped the dirty
            // pages, and a retry can report success for data that is gone.
            self.broken = true;
            return Err(io_error("sync the journal", &self.path)(source));
        }
        self.synced = self.synced.max(upto);
        Ok(())
    }

    /// Starts a group commit without waiting for the disk: returns the fsync
    /// to run elsewhere (a blocking thread), or `None` when nothing is new.
    /// Appends may go on meanwhile; the fsync covers the records appended
    /// before this call, and only those count as synced once its result is
    /// handed back to [`commit_done`](Journal::commit_done).
    ///
    /// Why: an fsync also forces out the file system's other metadata
    /// changes (on ext4, everything a batch of steps created), and a
    /// dispatcher waiting for that leaves the machine idle.
    pub fn begin_commit(&mut self) -> Result<Option<PendingCommit>, JournalError> {
        if self.broken {
            return Err(JournalError::Unusable {
                path: self.path.clone(),
            });
        }
        if self.synced >= self.appended {
            return Ok(None);
        }
        let file = self
            .file
            .try_clone()
            .map_err(io_error("sync the journal", &self.path))?;
        Ok(Some(PendingCommit {
            file,
            path: self.path.clone(),
            upto: self.appended,
            sync: Arc::clone(&self.sync),
        }))
    }

    /// How a commit begun with [`begin_commit`](Journal::begin_commit)
    /// ended: on success its records count as synced; a failure means what
    /// is on disk is no longer known, so the journal takes no more.
    pub fn commit_done(&mut self, result: &Result<Seq, JournalError>) {
        match result {
            Ok(upto) => self.synced = self.synced.max(*upto),
            Err(_) => self.broken = true,
        }
    }

    /// Appends `event` and makes it (and everything before it) durable
    /// before returning: for records that must exist before the outside
    /// world sees their effect, such as an idempotency key before a money
    /// request. The record is marked durable in its line, so that damage to
    /// it is reported as corruption on open, never cut off as a torn tail.
    pub fn append_durable<T: Serialize + ?Sized>(
        &mut self,
        event: &T,
    ) -> Result<Seq, JournalError> {
        let seq = self.write_record(event, true)?;
        self.commit()?;
        Ok(seq)
    }

    /// Appends a record marked durable without syncing it: the caller
    /// syncs it (off this thread) before it acknowledges it.
    pub fn append_marked_durable<T: Serialize + ?Sized>(
        &mut self,
        event: &T,
    ) -> Result<Seq, JournalError> {
        self.write_record(event, true)
    }

    /// Whether the file this journal writes to has no name left (its link
    /// count is 0): something deleted it, or the state directory, under a
    /// live run. Records written to it are lost with the last descriptor.
    pub fn is_unlinked(&self) -> bool {
        use std::os::unix::fs::MetadataExt as _;
        self.file.metadata().is_ok_and(|m| m.nlink() == 0)
    }

    /// The journal file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// A group commit begun with [`Journal::begin_commit`], to be run off the
/// thread that appends.
pub struct PendingCommit {
    file: File,
    path: PathBuf,
    upto: Seq,
    sync: SyncFn,
}

impl PendingCommit {
    /// Waits until the records appended before the commit began are
    /// durable; returns the last of them, for [`Journal::commit_done`].
    pub fn run(self) -> Result<Seq, JournalError> {
        (self.sync)(&self.file)
            .map(|()| self.upto)
            .map_err(io_error("sync the journal", &self.path))
    }
}

impl Drop for Journal {
    fn drop(&mut self) {
        if self.synced < self.appended && !self.broken {
            // Nobody is left to hear about a failure; records that did not
            // make it read back as missing (or a torn tail) on resume.
            let _ = self.file.sync_data();
        }
    }
}

fn io_error(action: &'static str, path: &Path) -> impl FnOnce(io::Error) -> JournalError {
    let path = path.to_path_buf();
    move |source| JournalError::Io {
        action,
        path,
        source,
    }
}

fn open_error(path: &Path, source: io::Error) -> JournalError {
    match source.kind() {
        io::ErrorKind::NotFound => JournalError::Missing {
            path: path.to_path_buf(),
        },
        _ => io_error("open the journal", path)(source),
    }
}

/// Reads every record of `file`. Returns them with the length of the intact
/// prefix, which is the whole file unless the last line is torn.
///
/// A damaged line is only known to be the torn tail once nothing follows it,
/// so its verdict waits for the next read.
fn scan<T: DeserializeOwned>(path: &Path, file: &File) -> Result<(Replay<T>, u64), JournalError> {
    let mut reader = BufReader::new(file);
    let mut line = Vec::new();
    let mut records = Vec::new();
    let mut intact_len = 0;
    let mut damaged: Option<(usize, Corruption, u64)> = None;
    for number in 1.. {
        line.clear();
        let read = read_line(&mut reader, &mut line).map_err(io_error("read the journal", path))?;
        let Some(read) = read else { break };
        if let Some((line, problem, _)) = damaged {
            return Err(JournalError::Corrupt {
                path: path.to_path_buf(),
                line,
                problem,
            });
        }
        let problem = match read.kind {
            // Only the last line can lack its newline: this is the torn tail.
            LineKind::Unterminated => {
                return Ok((
                    Replay {
                        records,
                        torn_tail: Some(TornTail {
                            line: number,
                            bytes: read.bytes,
                        }),
                    },
                    intact_len,
                ));
            }
            LineKind::TooLong => Corruption::TooLong,
            LineKind::Complete => match record::decode(&line[..line.len() - 1]) {
                Decoded::Event(event) => {
                    let event = serde_json::from_str(event.get()).map_err(|source| {
                        JournalError::UnexpectedEvent {
                            path: path.to_path_buf(),
                            line: number,
                            source,
                        }
                    })?;
                    records.push(event);
                    intact_len += read.bytes;
                    continue;
                }
                // An acknowledged durable record (an idempotency key) may
                // never be dropped as if it were a torn write.
                Decoded::Corrupt(_) if record::marked_durable(&line) => {
                    return Err(JournalError::Corrupt {
                        path: path.to_path_buf(),
                        line: number,
                        problem: Corruption::DurableRecordDamaged,
                    });
                }
                Decoded::Corrupt(problem) => problem,
                Decoded::UnsupportedVersion(found) => {
                    return Err(JournalError::UnsupportedVersion {
                        path: path.to_path_buf(),
                        line: number,
                        found,
                        supported: FORMAT_VERSION,
                    });
                }
            },
        };
        damaged = Some((number, problem, read.bytes));
    }
    let torn_tail = damaged.map(|(line, _, bytes)| TornTail { line, bytes });
    Ok((Replay { records, torn_tail }, intact_len))
}

struct LineRead {
    kind: LineKind,
    /// Bytes consumed from the file, the newline included.
    bytes: u64,
}

enum LineKind {
    /// Ends in a newline; the line is in the buffer, newline included.
    Complete,
    /// The file ends before a newline.
    Unterminated,
    /// Longer than any record may be; skipped, not buffered.
    TooLong,
}

/// Reads one line into `buf`, holding at most [`MAX_RECORD_BYTES`] of it in
/// memory so that a damaged file cannot exhaust memory. `None` at the end.
fn read_line(reader: &mut impl BufRead, buf: &mut Vec<u8>) -> io::Result<Option<LineRead>> {
    let limit = MAX_RECORD_BYTES as u64;
    let mut bytes = reader.by_ref().take(limit).read_until(b'\n', buf)? as u64;
    if bytes == 0 {
        return Ok(None);
    }
    if buf.last() == Some(&b'\n') {
        return Ok(Some(LineRead {
            kind: LineKind::Complete,
            bytes,
        }));
    }
    if bytes < limit {
        return Ok(Some(LineRead {
            kind: LineKind::Unterminated,
            bytes,
        }));
    }
    let terminated = loop {
        let available = reader.fill_buf()?;
        if available.is_empty() {
            break false;
        }
        let (used, found) = match available.iter().position(|&b| b == b'\n') {
            Some(newline) => (newline + 1, true),
            None => (available.len(), false),
        };
        reader.consume(used);
        bytes += used as u64;
        if found {
            break true;
        }
    };
    let kind = if terminated {
        LineKind::TooLong
    } else {
        LineKind::Unterminated
    };
    Ok(Some(LineRead { kind, bytes }))
}

#[cfg(test)]
mod tests {
    use std::fs;

    use serde::Deserialize;
    use serde_json::{Value, json};

    use super::*;

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    struct StepEvent {
        step: String,
        state: String,
        attempt: u32,
    }

    fn event(i: u32) -> StepEvent {
        StepEvent {
            step: format!("play/maze-{i}"),
            state: "succeeded \"quoted\" \u{e9}\n".into(),
            attempt: i,
        }
    }

    fn journal_with(dir: &Path, count: u32) -> PathBuf {
        let path = dir.join("runs/run-1/journal.jsonl");
        let mut journal = Journal::create(&path).expect("create");
        for i in 0..count {
            journal.append(&event(i)).expect("append");
        }
        journal.commit().expect("commit");
        path
    }

    /// Byte offsets where each line starts, and the file's length.
    fn line_starts(bytes: &[u8]) -> Vec<usize> {
        let mut starts = vec![0];
        starts.extend(
            bytes
                .iter()
                .enumerate()
                .filter(|&(_, &b)| b == b'\n')
                .map(|(i, _)| i + 1),
        );
        starts
    }

    #[test]
    fn many_records_round_trip_as_typed_events_and_as_json() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = journal_with(dir.path(), 500);

        let typed: Replay<StepEvent> = Journal::read(&path).expect("read");
        let (mut journal, untyped) = Journal::open::<Value>(&path).expect("open");

        assert_eq!(typed.records, (0..500).map(event).collect::<Vec<_>>());
        assert_eq!(typed.torn_tail, None);
        assert_eq!(untyped.records.len(), 500);
        assert_eq!(untyped.records[7]["step"], json!("play/maze-7"));
        journal.append(&event(500)).expect("append after open");
        drop(journal);
        let again: Replay<StepEvent> = Journal::read(&path).expect("read again");
        assert_eq!(again.records.len(), 501);
        assert_eq!(again.records[500], event(500));
    }

    #[test]
    fn create_refuses_an_existing_journal() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = journal_with(dir.path(), 1);

        let error = Journal::create(&path).expect_err("exists");

        assert!(matches!(error, JournalError::Exists { .. }), "{error:?}");
        assert_eq!(
            Journal::read::<Value>(&path).expect("read").records.len(),
            1
        );
    }

    #[test]
    fn open_of_a_missing_journal_says_so() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("nope.jsonl");

        let error = Journal::open::<Value>(&path).expect_err("missing");

        assert!(matches!(error, JournalError::Missing { .. }), "{error:?}");
        assert!(!path.exists());
    }

    #[test]
    fn torn_tail_is_dropped_and_later_appends_are_intact() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = journal_with(dir.path(), 3);
        let bytes = fs::read(&path).expect("read file");
        let last_line_start = line_starts(&bytes)[2];
        let cut = last_line_start + 20;
        fs::write(&path, &bytes[..cut]).expect("tear the last line");

        let seen: Replay<StepEvent> = Journal::read(&path).expect("read sees the tear");
        assert_eq!(
            fs::read(&path).expect("file").len(),
            cut,
            "read changes nothing"
        );
        let (mut journal, opened) = Journal::open::<StepEvent>(&path).expect("open");
        journal.append(&event(10)).expect("append");
        journal.commit().expect("commit");
        drop(journal);

        let torn = Some(TornTail { line: 3, bytes: 20 });
        assert_eq!(seen.torn_tail, torn);
        assert_eq!(opened.torn_tail, torn);
        assert_eq!(opened.records, vec![event(0), event(1)]);
        let after: Replay<StepEvent> = Journal::read(&path).expect("read after");
        assert_eq!(after.records, vec![event(0), event(1), event(10)]);
        assert_eq!(after.torn_tail, None);
        let content = fs::read(&path).expect("file");
        assert_eq!(content.last(), Some(&b'\n'));
        assert_eq!(&content[..last_line_start], &bytes[..last_line_start]);
    }

    #[test]
    fn complete_last_line_with_a_bad_checksum_is_a_torn_tail() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = journal_with(dir.path(), 2);
        let mut bytes = fs::read(&path).expect("read file");
        let at = bytes.len() - 5;
        bytes[at] ^= 0x01;
        fs::write(&path, &bytes).expect("damage last line");

        let (_journal, opened) = Journal::open::<StepEvent>(&path).expect("open");

        assert_eq!(opened.records, vec![event(0)]);
        assert_eq!(opened.torn_tail.map(|t| t.line), Some(2));
        assert_eq!(
            fs::read(&path).expect("file"),
            bytes[..line_starts(&bytes)[1]]
        );
    }

    #[test]
    fn flipped_byte_in_a_middle_record_is_corruption_naming_the_line() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = journal_with(dir.path(), 3);
        let mut bytes = fs::read(&path).expect("read file");
        let second = &bytes[line_starts(&bytes)[1]..];
        // Inside the event's "play/maze-1": still valid JSON, wrong checksum.
        let at = line_starts(&bytes)[1]
            + second
                .windows(4)
                .position(|w| w == b"maze")
                .expect("step name");
        bytes[at] = b'M';
        fs::write(&path, &bytes).expect("flip a byte");

        let opened = Journal::open::<StepEvent>(&path).expect_err("corrupt");
        let read = Journal::read::<StepEvent>(&path).expect_err("corrupt");

        for error in [&opened, &read] {
            assert!(
                matches!(
                    error,
                    JournalError::Corrupt {
                        line: 2,
                        problem: Corruption::ChecksumMismatch,
                        ..
                    }
                ),
                "{error:?}"
            );
        }
        let message = opened.to_string();
        assert!(message.contains(&path.display().to_string()), "{message}");
        assert!(message.contains("line 2 (checksum mismatch)"), "{message}");
        assert!(message.contains("was not modified"), "{message}");
        assert!(message.contains("--new"), "{message}");
        assert_eq!(fs::read(&path).expect("file"), bytes, "file unchanged");
    }

    #[test]
    fn garbage_line_before_the_last_is_corruption_even_when_the_tail_is_torn() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = journal_with(dir.path(), 1);
        let mut bytes = fs::read(&path).expect("read file");
        bytes.extend_from_slice(b"not json\n{\"format\":1,\"crc");
        fs::write(&path, &bytes).expect("append garbage");

        let error = Journal::open::<Value>(&path).expect_err("corrupt");

        assert!(
            matches!(
                error,
                JournalError::Corrupt {
                    line: 2,
                    problem: Corruption::Unparsable,
                    ..
                }
            ),
            "{error:?}"
        );
        assert_eq!(fs::read(&path).expect("file"), bytes, "file unchanged");
    }

    #[test]
    fn unknown_format_version_is_refused() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = journal_with(dir.path(), 2);
        let bytes = fs::read(&path).expect("read file");
        let newer = String::from_utf8(bytes.clone()).expect("utf8").replacen(
            "{\"format\":1,",
            "{\"format\":2,",
            1,
        );
        fs::write(&path, &newer).expect("write newer");

        let error = Journal::open::<Value>(&path).expect_err("unsupported");

        assert!(
            matches!(
                error,
                JournalError::UnsupportedVersion {
                    line: 1,
                    found: 2,
                    supported: 1,
                    ..
                }
            ),
            "{error:?}"
        );
        let message = error.to_string();
        assert!(message.contains("format version 2"), "{message}");
        assert!(message.contains("reads version 1"), "{message}");
        assert_eq!(fs::read(&path).expect("file"), newer.as_bytes());
    }

    #[test]
    fn oversize_record_is_refused_and_nothing_is_written() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = journal_with(dir.path(), 1);
        let before = fs::read(&path).expect("file");
        let mut journal = Journal::open::<Value>(&path).expect("open").0;

        let error = journal
            .append(&json!({ "blob": "x".repeat(MAX_RECORD_BYTES) }))
            .expect_err("too large");
        journal.append(&event(1)).expect("later append");
        drop(journal);

        assert!(
            matches!(error, JournalError::RecordTooLarge { limit, .. } if limit == MAX_RECORD_BYTES),
            "{error:?}"
        );
        assert!(error.to_string().contains("exceeds the limit"), "{error}");
        let after: Replay<StepEvent> = Journal::read(&path).expect("read");
        assert_eq!(after.records, vec![event(0), event(1)]);
        assert!(fs::read(&path).expect("file").starts_with(&before));
    }

    #[test]
    fn oversize_line_on_disk_is_corruption_not_an_allocation() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = journal_with(dir.path(), 1);
        let mut bytes = fs::read(&path).expect("file");
        bytes.extend(std::iter::repeat_n(b'x', MAX_RECORD_BYTES * 2));
        bytes.push(b'\n');
        bytes.extend_from_slice(&fs::read(&path).expect("file"));
        fs::write(&path, &bytes).expect("write");

        let error = Journal::read::<Value>(&path).expect_err("corrupt");

        assert!(
            matches!(
                error,
                JournalError::Corrupt {
                    line: 2,
                    problem: Corruption::TooLong,
                    ..
                }
            ),
            "{error:?}"
        );
    }

    #[test]
    fn durable_record_is_readable_by_another_reader_at_once() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = journal_with(dir.path(), 1);
        let (mut journal, _) = Journal::open::<Value>(&path).expect("open");

        journal
            .append_durable(&json!({"idempotency_key": "k-123", "step": "register"}))
            .expect("append durable");
        let seen: Replay<Value> = Journal::read(&path).expect("read while open");

        assert_eq!(seen.records.len(), 2);
        assert_eq!(seen.records[1]["idempotency_key"], json!("k-123"));
        journal.commit().expect("nothing pending");
    }

    #[test]
    fn a_background_commit_covers_what_came_before_and_a_failed_one_stops_appends() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = journal_with(dir.path(), 1);
        let (mut journal, _) = Journal::open::<Value>(&path).expect("open");
        assert!(journal.begin_commit().expect("nothing new").is_none());

        journal.append(&event(7)).expect("append");
        let pending = journal
            .begin_commit()
            .expect("begin")
            .expect("a commit to run");
        // Appending goes on while the commit runs elsewhere.
        journal.append(&event(8)).expect("append meanwhile");
        let done = std::thread::spawn(move || pending.run())
            .join()
            .expect("no panic");
        journal.commit_done(&done);
        let seen: Replay<StepEvent> = Journal::read(&path).expect("read");
        assert_eq!(seen.records[1..], [event(7), event(8)]);
        // The record appended meanwhile is still to be committed.
        assert!(journal.begin_commit().expect("begin").is_some());

        journal.commit_done(&Err(JournalError::Unusable { path: path.clone() }));
        let error = journal.append(&event(9)).expect_err("unusable");
        assert!(matches!(error, JournalError::Unusable { .. }), "{error}");
        assert!(journal.begin_commit().is_err());
    }

    #[test]
    fn intact_record_of_an_unexpected_shape_is_named() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("journal.jsonl");
        let mut journal = Journal::create(&path).expect("create");
        journal
            .append(&json!({"something": "else"}))
            .expect("append");
        drop(journal);

        let error = Journal::read::<StepEvent>(&path).expect_err("wrong shape");

        assert!(
            matches!(error, JournalError::UnexpectedEvent { line: 1, .. }),
            "{error:?}"
        );
    }

    /// Issue 8, item 12: a journal damaged after its first line still says
    /// which plan it was for; one damaged in its first line says nothing.
    #[test]
    fn read_first_reads_the_header_of_a_journal_damaged_later() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = journal_with(dir.path(), 3);
        let mut bytes = fs::read(&path).expect("read file");
        let second = line_starts(&bytes)[1];
        bytes[second + 30] ^= 0x01;
        fs::write(&path, &bytes).expect("damage line 2");
        assert!(Journal::read::<StepEvent>(&path).is_err());

        assert_eq!(Journal::read_first::<StepEvent>(&path), Some(event(0)));
        bytes[30] ^= 0x01;
        fs::write(&path, &bytes).expect("damage line 1");
        assert_eq!(Journal::read_first::<StepEvent>(&path), None);
    }

    /// Issue 8, item 14: a journal whose file was deleted under it knows.
    #[test]
    fn a_deleted_journal_file_is_unlinked() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = journal_with(dir.path(), 1);
        let (journal, _) = Journal::open::<Value>(&path).expect("open");
        assert!(!journal.is_unlinked());

        fs::remove_dir_all(dir.path().join("runs")).expect("delete the state");

        assert!(journal.is_unlinked());
    }

    #[test]
    fn empty_journal_has_no_records() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("journal.jsonl");
        drop(Journal::create(&path).expect("create"));

        let (_journal, replay) = Journal::open::<Value>(&path).expect("open");

        assert_eq!(
            replay,
            Replay {
                records: vec![],
                torn_tail: None
            }
        );
    }
}

//! A step's output on its way into the run's one log (`steps.log`): read
//! from the step's pipe by the launcher, with secrets replaced, capped, and
//! appended in pieces whose places ([`Segment`]s) the launcher records.
//!
//! # Design
//!
//! - **Appended, never placed.** The log is opened `O_APPEND`, so a piece
//!   lands at the end whoever else writes (a resumed run's launcher beside
//!   an old one still finishing an orphan); the file position after the
//!   write says where it went. The launcher's runtime has one thread, so
//!   nothing writes between a piece and the look at its position.
//! - **Capped as it comes.** The first [`LOG_HEAD`] bytes are written as
//!   they arrive (so `--output stream` shows them); past that the last
//!   [`LOG_TAIL`] bytes are held in memory and written when the step ends,
//!   after a line saying how much was cut. A log of at most [`LOG_CAP`]
//!   bytes is kept whole.
//! - **A failed write names its cause.** A full disk (`ENOSPC`, `EDQUOT`)
//!   becomes "the disk holding DIR is full: N bytes free"; from then on the
//!   step's output is only remembered (its last [`LAST_WORDS`] bytes), tried
//!   once more when it ends, and handed to gameplan, which shows it with
//!   the cause.
//! - **Few segments.** A step running alone has one; steps printing a line
//!   at a time side by side would have one per line, and the journal
//!   record that lists them has a size limit. Past [`LIVE_SEGMENTS`] an
//!   attempt's output is written in whole [`PIECE`]s.
//! - **Nothing printed, nothing written**: no segment, no write.

use std::fs::File;
use std::io::{self, Seek as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::net::unix::pipe;
use tokio::sync::{mpsc, oneshot};

pub use crate::journal::step_log::DISK_FULL;
use crate::journal::step_log::{Segment, push_segment};

/// A log longer than this keeps its first [`LOG_HEAD`] and last
/// [`LOG_TAIL`] bytes, with a line saying how much was cut between them.
pub const LOG_CAP: u64 = LOG_HEAD + LOG_TAIL;
pub const LOG_HEAD: u64 = 1024 * 1024;
pub const LOG_TAIL: u64 = 4 * 1024 * 1024;

/// How much of a step's output is remembered once its log cannot be
/// written: its last words, shown with the cause.
pub const LAST_WORDS: usize = 2048;

/// Segments written as the output comes; past this many (steps side by
/// side, printing little at a time, interleave finely), output is written
/// in pieces of [`PIECE`] bytes, so an attempt's list of segments, which
/// its journal record holds, stays small.
pub const LIVE_SEGMENTS: usize = 256;
pub const PIECE: usize = 64 * 1024;

/// What became of an attempt's output.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Written {
    pub log: Vec<Segment>,
    /// Why some of it could not be written.
    pub lost: Option<String>,
    /// What the step said last, when its log could not take it.
    pub last_words: String,
}

/// Who hears of each piece as it is written (`--output stream`).
pub type OnPiece = Box<dyn Fn(Segment) + Send>;

/// One attempt's output as it is written.
pub struct Capture {
    log: Arc<File>,
    path: PathBuf,
    /// The directory whose disk a failed write is blamed on (the state dir).
    disk: PathBuf,
    segments: Vec<Segment>,
    /// Head bytes waiting for a whole [`PIECE`] (past [`LIVE_SEGMENTS`]).
    pending: Vec<u8>,
    head_written: u64,
    past_head: bool,
    tail: Vec<u8>,
    cut: u64,
    lost: Option<String>,
    last_words: Vec<u8>,
    on_piece: Option<OnPiece>,
    done: bool,
}

impl Capture {
    pub fn new(log: Arc<File>, path: &Path, disk: &Path, on_piece: Option<OnPiece>) -> Capture {
        Capture {
            log,
            path: path.to_path_buf(),
            disk: disk.to_path_buf(),
            segments: Vec::new(),
            pending: Vec::new(),
            head_written: 0,
            past_head: false,
            tail: Vec::new(),
            cut: 0,
            lost: None,
            last_words: Vec::new(),
            on_piece,
            done: false,
        }
    }

    /// Takes the next bytes of the step's output.
    pub fn take(&mut self, bytes: &[u8]) {
        if self.done || bytes.is_empty() {
            return;
        }
        if self.lost.is_some() {
            self.remember(bytes);
            return;
        }
        if self.past_head {
            self.tail.extend_from_slice(bytes);
            // Trimmed in batches: one move per LOG_TAIL bytes, not per read.
            let keep = usize::try_from(LOG_TAIL).unwrap_or(usize::MAX);
            if self.tail.len() > 2 * keep {
                let drop = self.tail.len() - keep;
                self.tail.drain(..drop);
                self.cut += drop as u64;
            }
            return;
        }
        let room = usize::try_from(LOG_HEAD - self.head_written).unwrap_or(usize::MAX);
        if bytes.len() <= room {
            self.emit(bytes);
            self.head_written += bytes.len() as u64;
            return;
        }
        // The head ends at a line end where there is one: a line cut in two
        // is harder to read than a few bytes more or less.
        let split = bytes[..room]
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(room, |i| i + 1);
        self.emit(&bytes[..split]);
        self.head_written += split as u64;
        self.past_head = true;
        self.take(&bytes[split..]);
    }

    /// The step ended: writes the tail it held (after the cut marker) and
    /// says where everything went. Output after this is not kept.
    pub fn finish(&mut self) -> Written {
        if !self.done {
            self.done = true;
            let pending = std::mem::take(&mut self.pending);
            if self.lost.is_some() {
                self.remember(&pending);
            } else {
                self.write(&pending);
            }
            let mut tail = std::mem::take(&mut self.tail);
            let keep = usize::try_from(LOG_TAIL).unwrap_or(usize::MAX);
            if tail.len() > keep {
                let drop = tail.len() - keep;
                tail.drain(..drop);
                self.cut += drop as u64;
            }
            if self.cut > 0 {
                // What precedes the tail's first line end is a line whose
                // start was cut.
                let start = tail.iter().position(|&b| b == b'\n').map_or(0, |i| i + 1);
                self.cut += start as u64;
                #[expect(clippy::cast_precision_loss, reason = "a size for people to read")]
                let marker = format!("[… {:.1} MB cut …]\n", self.cut as f64 / 1_000_000.0);
                let mut bytes = marker.into_bytes();
                bytes.extend_from_slice(&tail[start..]);
                tail = bytes;
            }
            if self.lost.is_some() {
                self.remember(&tail);
            } else {
                self.write(&tail);
            }
            if self.lost.is_some() && !self.last_words.is_empty() {
                // Space may have come back: the step's last words belong in
                // its log if they fit now.
                let words = self.last_words.clone();
                self.lost_write(&words);
            }
        }
        Written {
            log: self.segments.clone(),
            lost: self.lost.clone(),
            last_words: String::from_utf8_lossy(&self.last_words).into_owned(),
        }
    }

    /// Writes head bytes as they come, or in whole pieces once the
    /// attempt has many segments.
    fn emit(&mut self, bytes: &[u8]) {
        if self.segments.len() < LIVE_SEGMENTS && self.pending.is_empty() {
            self.write(bytes);
            return;
        }
        self.pending.extend_from_slice(bytes);
        if self.pending.len() >= PIECE {
            let pending = std::mem::take(&mut self.pending);
            self.write(&pending);
        }
    }

    fn remember(&mut self, bytes: &[u8]) {
        self.last_words.extend_from_slice(bytes);
        if self.last_words.len() > LAST_WORDS {
            let drop = self.last_words.len() - LAST_WORDS;
            self.last_words.drain(..drop);
        }
    }

    /// One try at writing the last words after a failure; they stay
    /// remembered either way.
    fn lost_write(&mut self, bytes: &[u8]) {
        if let Ok(n) = (&*self.log).write(bytes)
            && let Ok(end) = (&*self.log).stream_position()
        {
            self.piece(Segment {
                at: end - n as u64,
                len: n as u64,
            });
        }
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut rest = bytes;
        while !rest.is_empty() {
            match (&*self.log).write(rest) {
                Ok(0) => {
                    self.lose(&io::Error::from_raw_os_error(nix::libc::ENOSPC));
                    break;
                }
                Ok(n) => {
                    match (&*self.log).stream_position() {
                        Ok(end) => self.piece(Segment {
                            at: end - n as u64,
                            len: n as u64,
                        }),
                        Err(e) => {
                            self.lose(&e);
                            break;
                        }
                    }
                    rest = &rest[n..];
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.lose(&e);
                    break;
                }
            }
        }
        if self.lost.is_some() {
            self.remember(rest);
        }
    }

    fn piece(&mut self, piece: Segment) {
        push_segment(&mut self.segments, piece);
        if let Some(on_piece) = &self.on_piece {
            on_piece(piece);
        }
    }

    fn lose(&mut self, error: &io::Error) {
        self.lost = Some(cannot_write(&self.path, &self.disk, error));
    }
}

/// Why a log could not be written, a full disk named as one.
pub fn cannot_write(path: &Path, disk: &Path, error: &io::Error) -> String {
    let full = matches!(
        error.raw_os_error(),
        Some(code) if code == nix::libc::ENOSPC || code == nix::libc::EDQUOT
    );
    if full {
        let free = nix::sys::statvfs::statvfs(disk)
            .map(|s| s.blocks_available() * s.fragment_size())
            .map_or_else(|_| "no".to_owned(), |n| n.to_string());
        format!(
            "{DISK_FULL}{} is full: {free} bytes free (writing the step's log {})",
            disk.display(),
            path.display()
        )
    } else {
        format!("cannot write the step's log {}: {error}", path.display())
    }
}

/// A request to write out what the copier holds back, answered when done.
pub type Flush = mpsc::Sender<oneshot::Sender<()>>;

/// Copies a step's output into its capture (secrets replaced when there are
/// any) until the pipe's last writer closes it. Asked to flush (the step
/// exited but a process it left behind keeps the pipe open), it hands over
/// what it held back as the possible start of a secret, and goes on
/// reading (what comes after the step's end is not kept).
pub async fn copy(
    mut reader: pipe::Receiver,
    capture: Arc<Mutex<Capture>>,
    secrets: Arc<Vec<Vec<u8>>>,
    mut flush: mpsc::Receiver<oneshot::Sender<()>>,
) {
    use tokio::io::AsyncReadExt;
    let mut redactor = (!secrets.is_empty()).then(|| StreamRedactor::new(secrets));
    let mut buffer = vec![0; 64 * 1024];
    let mut asking = true;
    let take = |bytes: &[u8]| {
        capture
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take(bytes);
    };
    loop {
        tokio::select! {
            read = reader.read(&mut buffer) => match read {
                Ok(0) | Err(_) => break,
                Ok(n) => match redactor.as_mut() {
                    Some(r) => take(&r.feed(&buffer[..n])),
                    None => take(&buffer[..n]),
                },
            },
            asked = flush.recv(), if asking => match asked {
                Some(done) => {
                    if let Some(r) = redactor.as_mut() {
                        take(&r.finish());
                    }
                    let _ = done.send(());
                }
                None => asking = false,
            },
        }
    }
    if let Some(r) = redactor.as_mut() {
        take(&r.finish());
    }
}

/// Replaces secrets in a stream of bytes, also one split across two reads:
/// the bytes that may be the start of a secret are held back until the
/// next read (or the end) shows whether they are.
pub(super) struct StreamRedactor {
    secrets: Arc<Vec<Vec<u8>>>,
    held: Vec<u8>,
    /// Bytes that may begin a secret not yet whole: the longest secret less one.
    keep: usize,
}

impl StreamRedactor {
    pub(super) fn new(secrets: Arc<Vec<Vec<u8>>>) -> Self {
        let keep = secrets
            .iter()
            .map(Vec::len)
            .max()
            .unwrap_or(1)
            .saturating_sub(1);
        StreamRedactor {
            secrets,
            held: Vec::new(),
            keep,
        }
    }

    /// The earliest secret in `bytes` (the longest of those starting there).
    fn next_secret(&self, bytes: &[u8]) -> Option<(usize, usize)> {
        let mut best: Option<(usize, usize)> = None;
        for secret in self.secrets.iter() {
            if let Some(at) = bytes
                .windows(secret.len())
                .position(|w| w == secret.as_slice())
            {
                let better = match best {
                    None => true,
                    Some((b, len)) => at < b || (at == b && secret.len() > len),
                };
                if better {
                    best = Some((at, secret.len()));
                }
            }
        }
        best
    }

    /// The length of the longest end of `bytes` that is the start of a
    /// secret (at most [`StreamRedactor::keep`]): it must wait for the next read.
    fn partial_secret(&self, bytes: &[u8]) -> usize {
        (1..=self.keep.min(bytes.len()))
            .rev()
            .find(|&k| {
                let end = &bytes[bytes.len() - k..];
                self.secrets
                    .iter()
                    .any(|secret| secret.len() > k && secret.starts_with(end))
            })
            .unwrap_or(0)
    }

    /// What of `held` + `bytes` can be written now.
    pub(super) fn feed(&mut self, bytes: &[u8]) -> Vec<u8> {
        self.held.extend_from_slice(bytes);
        let mut out = Vec::with_capacity(self.held.len());
        let mut from = 0;
        while let Some((at, len)) = self.next_secret(&self.held[from..]) {
            out.extend_from_slice(&self.held[from..from + at]);
            out.extend_from_slice(crate::template::REDACTED.as_bytes());
            from += at + len;
        }
        // Only what may begin a secret waits: a line that cannot is written
        // at once, so `--output stream` shows it as it comes.
        let until = self.held.len() - self.partial_secret(&self.held[from..]);
        out.extend_from_slice(&self.held[from..until]);
        self.held.drain(..until);
        out
    }

    /// The rest, at the end of the stream: no secret can complete now.
    pub(super) fn finish(&mut self) -> Vec<u8> {
        let keep = std::mem::replace(&mut self.keep, 0);
        let out = self.feed(&[]);
        self.keep = keep;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::step_log::read_range;

    fn capture(dir: &Path) -> (Capture, PathBuf) {
        let path = dir.join("steps.log");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .expect("open");
        (Capture::new(Arc::new(file), &path, dir, None), path)
    }

    /// Issue 8, item 17: a secret is replaced wherever the reads split it.
    #[test]
    fn a_secret_split_across_writes_is_redacted() {
        let secrets = Arc::new(vec![b"hunter22".to_vec(), b"tok".to_vec()]);
        let text = b"a hunter22 b hunter22hunter22 tok hunt c";
        for split in 0..text.len() {
            let mut redactor = StreamRedactor::new(Arc::clone(&secrets));
            let mut out = redactor.feed(&text[..split]);
            out.extend(redactor.feed(&text[split..]));
            out.extend(redactor.finish());
            assert_eq!(
                String::from_utf8(out).expect("text"),
                "a [redacted] b [redacted][redacted] [redacted] hunt c",
                "split at {split}"
            );
        }
    }

    #[test]
    fn only_what_may_begin_a_secret_is_held_back() {
        let secrets = Arc::new(vec![b"hunter22".to_vec()]);
        let mut redactor = StreamRedactor::new(secrets);
        // Nothing here can begin the secret: written at once, so a streamed
        // line shows while the step still runs.
        assert_eq!(redactor.feed(b"first\n"), b"first\n");
        // `hun` may: it waits, and is written once the next read shows it
        // is not the secret.
        assert_eq!(redactor.feed(b"ok hun"), b"ok ");
        assert_eq!(redactor.feed(b"gry\n"), b"hungry\n");
        assert_eq!(redactor.feed(b"hunter2"), b"");
        assert_eq!(redactor.feed(b"2!"), b"[redacted]!");
    }

    #[test]
    fn a_long_log_keeps_its_head_and_tail_and_says_what_was_cut() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut capture, path) = capture(dir.path());
        // Another step's output before and between: the log is shared.
        std::fs::write(&path, b"someone else\n").expect("write");
        let line = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde\n";
        let lines = usize::try_from(2 * LOG_CAP).expect("fits") / line.len();
        for _ in 0..lines {
            capture.take(line.as_bytes());
        }
        let written = capture.finish();
        assert_eq!(written.lost, None);
        let file = File::open(&path).expect("open");
        let kept = String::from_utf8(read_range(&file, &written.log, 0, u64::MAX).expect("read"))
            .expect("text");
        assert!(kept.len() as u64 <= LOG_CAP + 100, "{}", kept.len());
        assert!(kept.starts_with(line) && kept.ends_with(line));
        let marker = kept
            .lines()
            .find(|l| l.starts_with("[…"))
            .expect("a marker");
        assert!(marker.ends_with(" MB cut …]"), "{marker}");
        assert!(
            kept.lines()
                .all(|l| l == marker || l.len() == line.len() - 1)
        );
        assert!(
            std::fs::metadata(&path).expect("len").len() <= LOG_CAP + 200,
            "the cut part never reached the disk"
        );
    }

    #[test]
    fn a_log_within_the_cap_is_kept_whole_and_nothing_printed_writes_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut capture, path) = capture(dir.path());
        let chunk = vec![b'x'; 64 * 1024];
        let n = usize::try_from(LOG_CAP).expect("fits") / chunk.len();
        for _ in 0..n {
            capture.take(&chunk);
        }
        let written = capture.finish();
        assert_eq!(crate::journal::step_log::total_len(&written.log), LOG_CAP);
        let (mut silent, _) = self::capture(dir.path());
        assert!(silent.finish().log.is_empty());
        assert_eq!(std::fs::metadata(&path).expect("len").len(), LOG_CAP);
    }

    /// Two steps printing a line at a time side by side: each line would be
    /// a segment of its own, and the journal record holding them grows
    /// past its limit. Past [`LIVE_SEGMENTS`] the pieces are whole.
    #[test]
    fn finely_interleaved_output_keeps_its_segments_few_and_its_bytes_whole() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut capture, path) = capture(dir.path());
        let mut other = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .expect("another writer");
        let mut expected = Vec::new();
        for i in 0..100_000 {
            let line = format!("line {i}\n");
            capture.take(line.as_bytes());
            expected.extend_from_slice(line.as_bytes());
            other.write_all(b"other\n").expect("other writes");
        }
        let written = capture.finish();
        assert!(
            written.log.len() <= LIVE_SEGMENTS + 64,
            "{} segments",
            written.log.len()
        );
        let file = File::open(&path).expect("open");
        assert_eq!(
            read_range(&file, &written.log, 0, u64::MAX).expect("read"),
            expected
        );
    }

    #[test]
    fn a_write_to_a_full_disk_names_the_disk_and_keeps_the_last_words() {
        let dir = tempfile::tempdir().expect("tempdir");
        // /dev/full answers every write with ENOSPC.
        let full = std::fs::OpenOptions::new()
            .append(true)
            .open("/dev/full")
            .expect("/dev/full");
        let mut capture = Capture::new(Arc::new(full), Path::new("/dev/full"), dir.path(), None);
        capture.take(b"working\n");
        capture.take(b"head: write error: No space left on device\n");
        let written = capture.finish();
        let lost = written.lost.expect("lost");
        assert!(lost.starts_with(DISK_FULL), "{lost}");
        assert!(
            lost.contains(" is full: ") && lost.contains(" bytes free"),
            "{lost}"
        );
        assert!(
            written
                .last_words
                .ends_with("head: write error: No space left on device\n"),
            "{}",
            written.last_words
        );
        assert!(written.log.is_empty());
        // What is remembered is bounded: the last words, not the output.
        let mut capture = Capture::new(
            Arc::new(
                std::fs::OpenOptions::new()
                    .append(true)
                    .open("/dev/full")
                    .expect("/dev/full"),
            ),
            Path::new("/dev/full"),
            dir.path(),
            None,
        );
        for i in 0..10_000 {
            capture.take(format!("{i:>9}\n").as_bytes());
        }
        let words = capture.finish().last_words;
        assert_eq!(words.len(), LAST_WORDS);
        assert!(words.ends_with("     9999\n"), "{words}");
    }
}

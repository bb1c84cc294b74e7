//! Step logs: every step attempt's output appended to ONE file per run
//! (`runs/<id>/steps.log`), found again by its segments.
//!
//! # Design
//!
//! A file per step cost an inode (and a directory) per step, the slowest
//! thing a cold run did on ext4. So the run's launcher appends each
//! attempt's output to the run's one log as it arrives, and remembers
//! where each piece went: a [`Segment`] (offset, length). Steps running at
//! once interleave in the file; each attempt's segments, in order, are its
//! output. Where the segments are kept:
//!
//! - the launcher writes them into the run's `exits.jsonl` with the
//!   attempt's ending (one line, one write), so an attempt that ended while
//!   gameplan was dead is found with its log;
//! - gameplan journals them in the step's `step_finished` record, the one
//!   place `plan status`, `plan log`, the report and a resume read.
//!
//! A step that prints nothing has no segment and costs no write. Runs
//! written before this kept `steps/<step>/stdout.log`; [`StepLog::of`]
//! still finds those.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use super::run::{RunDir, StepRecord};

/// How a message about a full disk under a step's log begins (gameplan
/// tells it from others by this: the run stops, and a resume runs the step
/// again; `plan status` shows it).
pub const DISK_FULL: &str = "the disk holding ";

// A segment is the journal's record of where an attempt's output is, so
// it lives with the journal's records (`run.rs`); the log reads it.
pub use super::run::Segment;

/// Adds a piece to a list of segments, extending the last one when the
/// piece follows it directly (a step running alone has one segment).
pub fn push_segment(segments: &mut Vec<Segment>, piece: Segment) {
    if piece.len == 0 {
        return;
    }
    match segments.last_mut() {
        Some(last) if last.at + last.len == piece.at => last.len += piece.len,
        _ => segments.push(piece),
    }
}

/// The total length of an attempt's output.
pub fn total_len(segments: &[Segment]) -> u64 {
    segments.iter().map(|s| s.len).sum()
}

/// Reads `max` bytes at most of the output the segments describe, starting
/// `from` bytes into it.
pub fn read_range(file: &File, segments: &[Segment], from: u64, max: u64) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut skip = from;
    let mut left = max;
    for s in segments {
        if left == 0 {
            break;
        }
        if skip >= s.len {
            skip -= s.len;
            continue;
        }
        let n = (s.len - skip).min(left);
        let mut buf = vec![0; usize::try_from(n).unwrap_or(usize::MAX)];
        file.read_exact_at(&mut buf, s.at + skip)?;
        out.extend_from_slice(&buf);
        left -= n;
        skip = 0;
    }
    Ok(out)
}

/// Where one step's log is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepLog {
    /// Segments of the run's `steps.log`.
    Segments {
        file: PathBuf,
        segments: Vec<Segment>,
    },
    /// A whole file: a run written before the shared log
    /// (`steps/<step>/stdout.log`).
    File(PathBuf),
}

impl StepLog {
    /// A step's log as its journal record (or, for a run from before
    /// segments, its own file) says. `None`: the step printed nothing (or
    /// never ran).
    pub fn of(run: &RunDir, step: &str, record: Option<&StepRecord>) -> Option<StepLog> {
        if let Some(record) = record
            && !record.log.is_empty()
        {
            return Some(StepLog::Segments {
                file: run.steps_log(),
                segments: record.log.clone(),
            });
        }
        let old = run.step(step).join("stdout.log");
        old.is_file().then_some(StepLog::File(old))
    }

    /// The whole log.
    pub fn read(&self) -> io::Result<Vec<u8>> {
        match self {
            StepLog::File(path) => std::fs::read(path),
            StepLog::Segments { file, segments } => {
                read_range(&File::open(file)?, segments, 0, u64::MAX)
            }
        }
    }

    /// The last `lines` lines, reading at most the last 64 KiB, each
    /// indented by four spaces (as failure messages show them).
    pub fn tail(&self, lines: usize) -> String {
        const WINDOW: u64 = 64 * 1024;
        let bytes = match self {
            StepLog::File(path) => File::open(path).and_then(|f| {
                let len = f.metadata()?.len();
                let from = len.saturating_sub(WINDOW);
                let mut buf = vec![0; usize::try_from(len - from).unwrap_or(0)];
                f.read_exact_at(&mut buf, from)?;
                Ok(buf)
            }),
            StepLog::Segments { file, segments } => File::open(file).and_then(|f| {
                let len = total_len(segments);
                read_range(&f, segments, len.saturating_sub(WINDOW), WINDOW)
            }),
        };
        tail_lines(&bytes.unwrap_or_default(), lines)
    }
}

/// The last `lines` lines of `bytes`, each indented by four spaces.
pub fn tail_lines(bytes: &[u8], lines: usize) -> String {
    let text = String::from_utf8_lossy(bytes);
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..]
        .iter()
        .map(|l| format!("    {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A running attempt's segments as the launcher reports them, for
/// `plan run --output stream` to follow while the step runs.
#[derive(Debug)]
pub struct LiveLog {
    pub file: PathBuf,
    segments: Mutex<Vec<Segment>>,
}

impl LiveLog {
    pub fn new(file: PathBuf) -> Arc<LiveLog> {
        Arc::new(LiveLog {
            file,
            segments: Mutex::new(Vec::new()),
        })
    }

    pub fn push(&self, piece: Segment) {
        push_segment(
            &mut self.segments.lock().unwrap_or_else(PoisonError::into_inner),
            piece,
        );
    }

    /// A new attempt begins: its output starts empty.
    pub fn clear(&self) {
        self.segments
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }

    pub fn segments(&self) -> Vec<Segment> {
        self.segments
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interleaved_segments_read_back_per_attempt() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("steps.log");
        // a, b, a, b written in turn: each reads back whole and alone.
        std::fs::write(&path, b"a1\nb1\na2\nb2\n").expect("write");
        let mut a = Vec::new();
        let mut b = Vec::new();
        for i in 0..4_u64 {
            let list = if i % 2 == 0 { &mut a } else { &mut b };
            push_segment(list, Segment { at: i * 3, len: 3 });
        }
        let file = File::open(&path).expect("open");
        assert_eq!(read_range(&file, &a, 0, u64::MAX).unwrap(), b"a1\na2\n");
        assert_eq!(read_range(&file, &b, 0, u64::MAX).unwrap(), b"b1\nb2\n");
        assert_eq!(read_range(&file, &b, 2, 3).unwrap(), b"\nb2");
        // Adjacent pieces merge into one segment.
        let mut one = Vec::new();
        push_segment(&mut one, Segment { at: 0, len: 3 });
        push_segment(&mut one, Segment { at: 3, len: 3 });
        push_segment(&mut one, Segment { at: 9, len: 0 });
        assert_eq!(one, [Segment { at: 0, len: 6 }]);
        assert_eq!(
            serde_json::to_string(&one).unwrap(),
            "[[0,6]]",
            "compact in the journal"
        );
    }
}

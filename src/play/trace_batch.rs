//! Batch traces: many games' traces in one file, how simulate keeps the
//! traces of its failed games (one file per worker, not one per game).
//!
//! Owns the batch file's layout, its writer, the index beside it, and
//! resolving a trace's address (`FILE#game-N`, or a plain trace file) to
//! one [`Trace`]. It does not decide which games are traced (`simulate`).
//!
//! ```text
//! traces/batch-0.jsonl        one worker's traces, appended as its games end
//!   {"simulated_game":17,"seed":18,"strategy":"random","end":"crash"}   <- record line
//!   {"trace":1,"game":{...},"seed":18,...}                              <- a whole trace.jsonl
//!   {"step":1,...}
//!   {"end":"crash"}
//!   {"simulated_game":23,...}                                           <- the next game's
//! traces/index.jsonl          one line per trace: game, seed, strategy, end, file, offset, length
//! ```
//!
//! # Design
//!
//! - A record line opens each game's trace, so the batch file indexes
//!   itself: the index is the fast path (a seek, one read), never the only
//!   way in. When the index is missing, or an entry does not point at that
//!   game's record line (the run was killed before the index was written,
//!   or after another write), the file is scanned instead.
//! - Records are appended whole through a buffer; a run killed mid-write
//!   leaves at most the last record torn (no `end` line). A torn record is
//!   never listed in the index, and reading it says it is incomplete.
//! - The index is written once, at the end, to a temporary file renamed in
//!   place: it is whole or absent.
//! - A game's address is `traces/batch-0.jsonl#game-17`: a path any shell
//!   passes as one word, that `gameplan replay` and `gameplan shrink` take
//!   where they take a trace file.

use std::fs::File;
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::trace::{QuitReason, Trace, TraceError};

/// The index's file name, beside the batch files.
pub const INDEX: &str = "index.jsonl";

/// How an address names one game of a batch file: `FILE#game-N`.
pub const GAME_ANCHOR: &str = "#game-";

/// The line that opens each game's trace in a batch file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordLine {
    pub simulated_game: u64,
    pub seed: i64,
    pub strategy: String,
    pub end: QuitReason,
}

/// One line of `index.jsonl`: where a game's record is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IndexEntry {
    pub game: u64,
    pub seed: i64,
    pub strategy: String,
    pub end: QuitReason,
    /// The batch file's name, in the index's directory.
    pub file: String,
    /// Where the record line starts, and the record's length in bytes
    /// (record line and trace).
    pub offset: u64,
    pub length: u64,
}

/// A batch file being written: one worker's.
pub struct BatchWriter {
    path: PathBuf,
    name: String,
    out: BufWriter<File>,
    /// Bytes written so far: the next record's offset.
    offset: u64,
    /// Reused for each record.
    record: Vec<u8>,
}

impl BatchWriter {
    /// Creates (truncates) `dir/name`, creating `dir` when needed.
    pub fn create(dir: &Path, name: &str) -> std::io::Result<BatchWriter> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(name);
        let file = File::create(&path)?;
        Ok(BatchWriter {
            path,
            name: name.to_owned(),
            out: BufWriter::with_capacity(256 * 1024, file),
            offset: 0,
            record: Vec::with_capacity(16 * 1024),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends game `game`'s trace; where it is.
    pub fn append(
        &mut self,
        game: u64,
        seed: i64,
        strategy: &str,
        trace: &Trace,
    ) -> std::io::Result<IndexEntry> {
        let end = trace.end.unwrap_or(QuitReason::Done);
        self.record.clear();
        serde_json::to_writer(
            &mut self.record,
            &RecordLine {
                simulated_game: game,
                seed,
                strategy: strategy.to_owned(),
                end,
            },
        )?;
        self.record.push(b'\n');
        trace.write_jsonl(&mut self.record);
        self.out.write_all(&self.record)?;
        let entry = IndexEntry {
            game,
            seed,
            strategy: strategy.to_owned(),
            end,
            file: self.name.clone(),
            offset: self.offset,
            length: self.record.len() as u64,
        };
        self.offset += self.record.len() as u64;
        Ok(entry)
    }

    /// Writes out what the buffer holds (no fsync: a trace is evidence, not
    /// a checkpoint).
    pub fn finish(mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

/// The address of game `game` in the batch file at `path`.
pub fn address(path: &Path, game: u64) -> PathBuf {
    let mut text = path.as_os_str().to_owned();
    text.push(format!("{GAME_ANCHOR}{game}"));
    PathBuf::from(text)
}

/// Splits an address into its file and game: `FILE#game-N` names game N
/// of FILE, unless a file of that whole name exists; anything else is a
/// trace file.
pub fn split_address(address: &Path) -> (PathBuf, Option<u64>) {
    let text = address.to_string_lossy();
    if let Some((file, game)) = text.rsplit_once(GAME_ANCHOR)
        && let Ok(game) = game.parse::<u64>()
        && !address.exists()
    {
        return (PathBuf::from(file), Some(game));
    }
    (address.to_path_buf(), None)
}

/// Writes `dir/index.jsonl` whole (temporary file, then rename).
pub fn write_index(dir: &Path, entries: &[IndexEntry]) -> std::io::Result<PathBuf> {
    let mut text = Vec::with_capacity(entries.len() * 128);
    for entry in entries {
        serde_json::to_writer(&mut text, entry)?;
        text.push(b'\n');
    }
    let path = dir.join(INDEX);
    let temporary = dir.join(format!(".{INDEX}.tmp"));
    std::fs::write(&temporary, text)?;
    std::fs::rename(&temporary, &path)?;
    Ok(path)
}

/// Reads the trace at `address`: a trace file, or `FILE#game-N`.
pub fn read(address: &Path) -> Result<Trace, TraceError> {
    match split_address(address) {
        (file, Some(game)) => read_game(&file, game),
        (file, None) => {
            let text = read_text(&file)?;
            if text.starts_with("{\"simulated_game\"") {
                return Err(invalid(
                    &file,
                    1,
                    format!(
                        "this file holds the traces of several simulated games ({}): \
                         name one as {}{GAME_ANCHOR}N",
                        games_listed(&text),
                        file.display()
                    ),
                ));
            }
            Trace::parse(&text, &file.display().to_string())
        }
    }
}

/// Game `game`'s trace in the batch file `file`: through the index beside
/// it when that entry is sound, else by scanning the file.
pub fn read_game(file: &Path, game: u64) -> Result<Trace, TraceError> {
    let shown = format!("{}{GAME_ANCHOR}{game}", file.display());
    if let Some(record) = indexed(file, game) {
        return parse_record(&record, game, &shown, 1);
    }
    let text = read_text(file)?;
    let mut at = None;
    let mut line_no = 0;
    for (i, line) in text.split_inclusive('\n').enumerate() {
        let offset = line.as_ptr() as usize - text.as_ptr() as usize;
        if line.starts_with("{\"simulated_game\"") {
            if at.is_some() {
                return parse_record(&text[at.unwrap_or(0)..offset], game, &shown, line_no);
            }
            if serde_json::from_str::<RecordLine>(line.trim_end())
                .is_ok_and(|r| r.simulated_game == game)
            {
                at = Some(offset);
                line_no = i + 1;
            }
        }
    }
    match at {
        Some(start) => parse_record(&text[start..], game, &shown, line_no),
        None => Err(invalid(
            file,
            0,
            format!(
                "no trace of game {game} here (it holds {}); only crashed and hung games, \
                 and the first game of each finding, are traced",
                games_listed(&text)
            ),
        )),
    }
}

/// The record the index names for `game`, when the index is there and the
/// bytes it points at open with that game's record line.
fn indexed(file: &Path, game: u64) -> Option<String> {
    let dir = file.parent().filter(|d| !d.as_os_str().is_empty())?;
    let name = file.file_name()?.to_str()?;
    let index = std::fs::read_to_string(dir.join(INDEX)).ok()?;
    let entry = index
        .lines()
        .filter_map(|l| serde_json::from_str::<IndexEntry>(l).ok())
        .find(|e| e.game == game && e.file == name)?;
    let mut batch = File::open(file).ok()?;
    batch.seek(SeekFrom::Start(entry.offset)).ok()?;
    let mut bytes = Vec::with_capacity(usize::try_from(entry.length).ok()?);
    batch.take(entry.length).read_to_end(&mut bytes).ok()?;
    let record = String::from_utf8(bytes).ok()?;
    let first = record.lines().next()?;
    serde_json::from_str::<RecordLine>(first)
        .is_ok_and(|r| r.simulated_game == game)
        .then_some(record)
}

/// A record (its record line, then the trace) as a trace; `line` is where
/// the record line is in the file, for messages.
fn parse_record(record: &str, game: u64, shown: &str, line: usize) -> Result<Trace, TraceError> {
    let body = record.split_once('\n').map_or("", |(_, body)| body);
    // Every record is written with its end line: one without was torn.
    let whole = body.ends_with('\n')
        && body
            .trim_end()
            .rsplit('\n')
            .next()
            .is_some_and(|last| last.starts_with("{\"end\""));
    if !whole {
        return Err(TraceError::Invalid {
            path: shown.to_owned(),
            line,
            message: format!(
                "the trace of game {game} is cut short (no end line): the run was stopped \
                 while writing it"
            ),
        });
    }
    Trace::parse(body, shown)
}

fn read_text(file: &Path) -> Result<String, TraceError> {
    std::fs::read_to_string(file).map_err(|source| TraceError::Read {
        path: file.display().to_string(),
        source,
    })
}

fn invalid(file: &Path, line: usize, message: String) -> TraceError {
    TraceError::Invalid {
        path: file.display().to_string(),
        line,
        message,
    }
}

/// "games 3, 17 and 4 more": which games a batch file holds.
fn games_listed(text: &str) -> String {
    let games: Vec<u64> = text
        .lines()
        .filter(|l| l.starts_with("{\"simulated_game\""))
        .filter_map(|l| serde_json::from_str::<RecordLine>(l).ok())
        .map(|r| r.simulated_game)
        .collect();
    match games.as_slice() {
        [] => "no game".to_owned(),
        [one] => format!("game {one}"),
        many => {
            let shown: Vec<String> = many.iter().take(5).map(u64::to_string).collect();
            let more = many.len().saturating_sub(5);
            if more == 0 {
                format!("games {}", shown.join(", "))
            } else {
                format!("games {} and {more} more", shown.join(", "))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::play::stdio::GameSpec;
    use crate::play::trace::TraceStep;

    fn trace(seed: i64, actions: &[&str], end: QuitReason) -> Trace {
        let game = GameSpec::new(
            vec!["g".into()],
            ".".into(),
            &std::collections::BTreeMap::new(),
        );
        let mut trace = Trace::new(Trace::header(&game, seed, "random", "standard"));
        for (i, a) in actions.iter().enumerate() {
            trace.steps.push(TraceStep {
                step: i as u64 + 1,
                action: (*a).to_owned(),
                obs: Some(format!("h{i}")),
                events: vec![],
                refused: None,
                screenshot: None,
                by: None,
            });
        }
        trace.end = Some(end);
        trace
    }

    fn written(dir: &Path) -> (Vec<IndexEntry>, Vec<Trace>) {
        let mut w = BatchWriter::create(dir, "batch-0.jsonl").expect("create");
        let traces = vec![
            trace(4, &["a", "b"], QuitReason::Crash),
            trace(9, &["c"], QuitReason::Hang),
            trace(12, &["d", "e", "f"], QuitReason::Crash),
        ];
        let entries = [3u64, 8, 11]
            .iter()
            .zip(&traces)
            .map(|(g, t)| w.append(*g, t.header.seed, "random", t).expect("append"))
            .collect();
        w.finish().expect("flush");
        (entries, traces)
    }

    #[test]
    fn each_game_of_a_batch_reads_back_by_its_address_with_and_without_the_index() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (entries, traces) = written(dir.path());
        let file = dir.path().join("batch-0.jsonl");
        for with_index in [false, true] {
            if with_index {
                write_index(dir.path(), &entries).expect("index");
            }
            for (entry, expected) in entries.iter().zip(&traces) {
                let got = read(&address(&file, entry.game)).expect("reads");
                assert_eq!(&got, expected, "index {with_index}");
            }
        }
        let plain = read(&file).expect_err("a batch is not one trace");
        assert!(
            plain.to_string().contains("games 3, 8, 11")
                && plain.to_string().contains("batch-0.jsonl#game-N"),
            "{plain}"
        );
        let missing = read(&address(&file, 5)).expect_err("game 5 was not traced");
        assert!(
            missing.to_string().contains("no trace of game 5"),
            "{missing}"
        );
    }

    /// A run killed while writing leaves the last record torn: the others
    /// still read (through the index or not), the torn one says so, and a
    /// stale index entry that points elsewhere is not believed.
    #[test]
    fn a_torn_last_record_and_a_stale_index_do_not_mislead() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut entries, traces) = written(dir.path());
        let file = dir.path().join("batch-0.jsonl");
        let bytes = std::fs::read(&file).expect("read");
        let torn = usize::try_from(entries[2].offset + entries[2].length / 2).expect("fits");
        std::fs::write(&file, &bytes[..torn]).expect("truncate");
        // The index claims game 8 sits where game 3's record is.
        entries[1].offset = entries[0].offset;
        write_index(dir.path(), &entries).expect("index");
        assert_eq!(read(&address(&file, 3)).expect("game 3"), traces[0]);
        assert_eq!(read(&address(&file, 8)).expect("game 8"), traces[1]);
        let cut = read(&address(&file, 11)).expect_err("game 11 is torn");
        assert!(cut.to_string().contains("cut short"), "{cut}");
    }

    #[test]
    fn an_address_splits_only_when_no_file_has_its_whole_name() {
        let dir = tempfile::tempdir().expect("tempdir");
        let odd = dir.path().join("odd#game-3");
        std::fs::write(&odd, "x").expect("write");
        assert_eq!(split_address(&odd), (odd.clone(), None));
        let other = dir.path().join("b.jsonl#game-12");
        assert_eq!(
            split_address(&other),
            (dir.path().join("b.jsonl"), Some(12))
        );
        assert_eq!(
            split_address(Path::new("t.jsonl#game-x")),
            (PathBuf::from("t.jsonl#game-x"), None)
        );
    }
}

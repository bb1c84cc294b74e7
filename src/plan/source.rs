//! A plan file's text and the byte spans that point into it.
//!
//! Every diagnostic carries a [`Span`]; line and column are computed only when a
//! message is rendered, so loading a clean file never pays for them.

use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The largest plan file we read. Plans are hand-written; anything bigger is a
/// mistake (or an attack) and is refused before parsing.
pub const MAX_PLAN_BYTES: usize = 1024 * 1024;

/// A half-open byte range `[start, end)` into a [`Source`]'s text.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Span {
    pub start: usize,
    pub end: usize,
}

impl Span {
    pub fn new(start: usize, end: usize) -> Self {
        Span {
            start,
            end: end.max(start),
        }
    }

    pub fn len(self) -> usize {
        self.end - self.start
    }

    pub fn is_empty(self) -> bool {
        self.start == self.end
    }
}

impl From<std::ops::Range<usize>> for Span {
    fn from(r: std::ops::Range<usize>) -> Self {
        Span::new(r.start, r.end)
    }
}

/// The syntax a plan file is written in, chosen by its extension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Toml,
    Yaml,
}

impl Format {
    pub fn from_path(path: &Path) -> Option<Format> {
        match path.extension()?.to_str()? {
            "toml" => Some(Format::Toml),
            "yaml" | "yml" => Some(Format::Yaml),
            _ => None,
        }
    }
}

/// A plan file as read from disk: the name it is reported under and its text.
#[derive(Debug)]
pub struct Source {
    /// The path as the user gave it (what diagnostics print).
    pub name: String,
    pub path: PathBuf,
    pub text: Arc<str>,
    pub format: Format,
}

impl Source {
    /// Line (1-based) and column (1-based, in characters) of a byte offset.
    pub fn line_col(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.text.len());
        let before = &self.text[..floor_char_boundary(&self.text, offset)];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let col = before[line_start..].chars().count() + 1;
        (line, col)
    }
}

fn floor_char_boundary(text: &str, mut offset: usize) -> usize {
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    offset
}

/// Maps the character indexes a YAML parser reports to byte offsets.
///
/// Built only for non-ASCII text; for ASCII the two are the same.
pub struct CharIndex {
    byte_of_char: Option<Vec<usize>>,
    len: usize,
}

impl CharIndex {
    pub fn new(text: &str) -> Self {
        let byte_of_char = if text.is_ascii() {
            None
        } else {
            Some(text.char_indices().map(|(b, _)| b).collect())
        };
        CharIndex {
            byte_of_char,
            len: text.len(),
        }
    }

    pub fn byte(&self, char_index: usize) -> usize {
        match &self.byte_of_char {
            None => char_index.min(self.len),
            Some(table) => table.get(char_index).copied().unwrap_or(self.len),
        }
    }
}

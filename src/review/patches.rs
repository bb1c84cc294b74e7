//! A `git format-patch` series read into review units: one per file per
//! patch, with its hunks (docs/review.md › Patch series).
//!
//! A series is a directory of `*.patch` files or a glob naming them,
//! relative to the repo root; files are read in name order (`0001-…`,
//! `0002-…`). Each file is an mbox message (`From <sha> …`, headers, the
//! message, `---`, a diffstat, then `diff --git` sections and the `-- `
//! signature), or several such messages (`format-patch --stdout`), or a bare
//! `git diff`. A file section becomes a [`PatchUnit`]: renames, new and
//! deleted files included; a binary change is a unit with no hunks.
//!
//! Hunks are read by their line counts, not by looking for the next header,
//! so a removed line reading `-- ` or `diff --git` inside a hunk is content,
//! never a boundary. Every path is checked to stay inside the repo. Owns
//! parsing and unit ids; it does not judge.

use std::collections::HashSet;
use std::io::Read;
use std::path::Path;

use serde::Serialize;

use crate::reuse::sha256_hex;

/// The largest patch file read: a series reviewed by a lens is made of
/// hand-sized commits; a bigger file is generated content or a mistake.
pub const MAX_PATCH_BYTES: usize = 8 * 1024 * 1024;

/// The most units one series may make (files × patches), so a runaway
/// series cannot flood a lens (and, for an `llm` lens, the bill).
pub const MAX_PATCH_UNITS: usize = 10_000;

/// One file of one patch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PatchUnit {
    /// `PATCH:PATH` (`0001-fix-spawn.patch:src/x.rs`), stable while the
    /// series keeps its file names; `PATCH[N]:PATH` for the Nth message of a
    /// file holding several.
    pub id: String,
    /// The patch file's repo-relative path.
    pub patch: String,
    /// The file the hunks touch (its new path; the old one when deleted).
    pub path: String,
    pub hunks: Vec<Hunk>,
    /// This file's section of the diff, from its `diff --git` line.
    pub text: String,
    /// sha256 hex of `text`.
    pub sha256: String,
    /// The patch's subject, without the `[PATCH n/m]` prefix.
    pub subject: String,
    /// `added`, `deleted`, `renamed`, `copied` or `modified`.
    pub status: FileStatus,
    /// The path before a rename or copy.
    pub old_path: Option<String>,
    /// A binary change: named, but without hunks.
    pub binary: bool,
}

/// One `@@` hunk.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Hunk {
    /// The `@@ -a,b +c,d @@ context` line.
    pub header: String,
    pub old_start: u32,
    pub old_lines: u32,
    pub new_start: u32,
    pub new_lines: u32,
    /// The header line and the hunk's lines.
    pub text: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FileStatus {
    Added,
    Deleted,
    Renamed,
    Copied,
    Modified,
}

/// Why a series could not be read. Each names the file (or pattern) and
/// what to do; reading never moves money, so none has anything to refund.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum PatchError {
    #[error("patches `{pattern}`: {message}")]
    #[diagnostic(code(review::patches_pattern))]
    Pattern { pattern: String, message: String },

    #[error(
        "patches `{pattern}` names no patch file; make the series with `git format-patch -o {pattern} BASE` or fix the lens's `patches`"
    )]
    #[diagnostic(code(review::no_patches))]
    NoPatches { pattern: String },

    #[error("cannot read patch `{file}`: {source}")]
    #[diagnostic(code(review::patch_unreadable))]
    Unreadable {
        file: String,
        source: std::io::Error,
    },

    #[error(
        "patch `{file}` is larger than {} MiB; review smaller commits, or narrow the lens's `patches` glob", MAX_PATCH_BYTES / (1024 * 1024)
    )]
    #[diagnostic(code(review::patch_too_large))]
    TooLarge { file: String },

    #[error(
        "`{file}` is not a patch ({reason}); a series holds `git format-patch` output, so narrow the lens's `patches` to `*.patch` files"
    )]
    #[diagnostic(code(review::not_a_patch))]
    NotAPatch { file: String, reason: String },

    #[error("patch `{file}` line {line}: {reason}; regenerate it with `git format-patch`")]
    #[diagnostic(code(review::bad_patch))]
    Malformed {
        file: String,
        line: usize,
        reason: String,
    },

    #[error(
        "patch `{file}` line {line} touches `{path}`, outside the repo; a patch under review may only name repo-relative paths"
    )]
    #[diagnostic(code(review::patch_escapes_repo))]
    EscapesRepo {
        file: String,
        line: usize,
        path: String,
    },

    #[error(
        "the series makes more than {MAX_PATCH_UNITS} units (one per file per patch); review it in parts, with narrower `patches` globs"
    )]
    #[diagnostic(code(review::too_many_units))]
    TooManyUnits,
}

/// Reads the series `pattern` names under `root` into units, in series
/// order, then file order within each patch.
pub fn read_series(root: &Path, pattern: &str) -> Result<Vec<PatchUnit>, PatchError> {
    let files = series_files(root, pattern)?;
    let mut units = Vec::new();
    for file in files {
        let text = read_patch(root, &file)?;
        parse_file(&file, &text, &mut units)?;
    }
    Ok(units)
}

/// The patch files of a pattern, repo-relative and sorted: a directory
/// means its `*.patch` files (at any depth); anything else is a file or a glob.
fn series_files(root: &Path, pattern: &str) -> Result<Vec<String>, PatchError> {
    let fail = |message: String| PatchError::Pattern {
        pattern: pattern.to_owned(),
        message,
    };
    let trimmed = pattern.trim_end_matches('/');
    let is_dir = !trimmed.is_empty()
        && !trimmed.contains(['*', '?', '[', '{'])
        && root.join(trimmed).is_dir();
    let mut files =
        crate::reuse::expand_inputs(root, &[if trimmed.is_empty() { pattern } else { trimmed }])
            .map_err(|e| fail(e.to_string()))?;
    if is_dir {
        files.retain(|f| {
            Path::new(f)
                .extension()
                .is_some_and(|e| e.eq_ignore_ascii_case("patch"))
        });
    }
    if files.is_empty() {
        return Err(PatchError::NoPatches {
            pattern: pattern.to_owned(),
        });
    }
    Ok(files)
}

fn read_patch(root: &Path, file: &str) -> Result<String, PatchError> {
    let unreadable = |source| PatchError::Unreadable {
        file: file.to_owned(),
        source,
    };
    let handle = std::fs::File::open(root.join(file)).map_err(unreadable)?;
    let mut bytes = Vec::new();
    handle
        .take(MAX_PATCH_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(unreadable)?;
    if bytes.len() > MAX_PATCH_BYTES {
        return Err(PatchError::TooLarge {
            file: file.to_owned(),
        });
    }
    if bytes.contains(&0) {
        return Err(PatchError::NotAPatch {
            file: file.to_owned(),
            reason: "it holds NUL bytes: a binary file".to_owned(),
        });
    }
    // A patch of Latin-1 sources is still a patch: lenses see U+FFFD where
    // a byte was not UTF-8, and the unit's sha256 is over what they see.
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// The lines of a file with their 1-based numbers, keeping each line's
/// ending so a unit's text is the patch's text exactly.
struct Lines<'t> {
    lines: Vec<&'t str>,
    at: usize,
}

impl<'t> Lines<'t> {
    fn new(text: &'t str) -> Self {
        Lines {
            lines: text.split_inclusive('\n').collect(),
            at: 0,
        }
    }
    fn peek(&self) -> Option<&'t str> {
        self.lines.get(self.at).copied()
    }
    fn next(&mut self) -> Option<&'t str> {
        let line = self.peek()?;
        self.at += 1;
        Some(line)
    }
    /// The 1-based number of the line [`Self::next`] returned last.
    fn number(&self) -> usize {
        self.at
    }
}

/// A line without its ending (`\n` or `\r\n`).
fn bare(line: &str) -> &str {
    line.trim_end_matches('\n').trim_end_matches('\r')
}

/// Whether a line starts an mbox message (`From <40 hex> Mon Sep 17 …`).
fn is_mbox_start(line: &str) -> bool {
    let Some(rest) = bare(line).strip_prefix("From ") else {
        return false;
    };
    let sha = rest.split(' ').next().unwrap_or("");
    sha.len() >= 7 && sha.bytes().all(|b| b.is_ascii_hexdigit())
}

fn parse_file(file: &str, text: &str, units: &mut Vec<PatchUnit>) -> Result<(), PatchError> {
    let mut lines = Lines::new(text);
    let first = text
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or_default();
    if !is_mbox_start(first) && !first.starts_with("diff --git ") {
        let reason = if text.trim().is_empty() {
            "it is empty".to_owned()
        } else {
            format!(
                "it starts with `{}`, not `From <commit>` or `diff --git`",
                first.chars().take(40).collect::<String>()
            )
        };
        return Err(PatchError::NotAPatch {
            file: file.to_owned(),
            reason,
        });
    }
    let messages = text.lines().filter(|l| is_mbox_start(l)).count();
    // Ids start with this file's name, so they can only clash within it.
    let mut taken = HashSet::new();
    let mut message = 0usize;
    let mut subject = String::new();
    let mut in_headers = false;
    while let Some(line) = lines.peek() {
        if is_mbox_start(line) {
            lines.next();
            message += 1;
            subject.clear();
            in_headers = true;
            continue;
        }
        if in_headers {
            if bare(line).is_empty() {
                in_headers = false;
            } else if let Some(s) = bare(line).strip_prefix("Subject: ") {
                s.clone_into(&mut subject);
            } else if line.starts_with([' ', '\t']) && !subject.is_empty() {
                // A folded (long) Subject header continues on the next line.
                subject.push(' ');
                subject.push_str(bare(line).trim());
            }
            lines.next();
            continue;
        }
        if line.starts_with("diff --git ") {
            let prefix = if messages > 1 {
                format!("{file}[{message}]")
            } else {
                file.to_owned()
            };
            let unit = parse_section(file, &prefix, &strip_subject(&subject), &mut lines)?;
            if units.len() >= MAX_PATCH_UNITS {
                return Err(PatchError::TooManyUnits);
            }
            let id = unique_id(&mut taken, &unit.id);
            units.push(PatchUnit { id, ..unit });
            continue;
        }
        // The message, the diffstat, the signature: not part of any unit.
        lines.next();
    }
    Ok(())
}

/// `[PATCH 2/3] Fix spawn` → `Fix spawn`.
fn strip_subject(subject: &str) -> String {
    let s = subject.trim();
    match s.strip_prefix('[').and_then(|rest| rest.split_once("] ")) {
        Some((tag, rest)) if tag.contains("PATCH") => rest.trim().to_owned(),
        _ => s.to_owned(),
    }
}

/// An id not used yet: the same path twice in one message gets `#2`.
fn unique_id(taken: &mut HashSet<String>, id: &str) -> String {
    let mut candidate = id.to_owned();
    let mut n = 1usize;
    while taken.contains(&candidate) {
        n += 1;
        candidate = format!("{id}#{n}");
    }
    taken.insert(candidate.clone());
    candidate
}

/// One `diff --git` section, from its header to its last hunk line.
fn parse_section(
    file: &str,
    prefix: &str,
    subject: &str,
    lines: &mut Lines<'_>,
) -> Result<PatchUnit, PatchError> {
    let header = lines.next().unwrap_or_default();
    let header_line = lines.number();
    let mut text = String::from(header);
    let (mut old_path, mut new_path) = split_git_header(bare(header));
    let mut status = FileStatus::Modified;
    let mut binary = false;
    let mut hunks = Vec::new();

    // Extended headers up to the first hunk (or the end of the section).
    while let Some(line) = lines.peek() {
        let b = bare(line);
        if line.starts_with("@@ ") || line.starts_with("diff --git ") || is_end(b) {
            break;
        }
        lines.next();
        text.push_str(line);
        if b.starts_with("new file mode ") {
            status = FileStatus::Added;
        } else if b.starts_with("deleted file mode ") {
            status = FileStatus::Deleted;
        } else if let Some(p) = b.strip_prefix("rename from ") {
            status = FileStatus::Renamed;
            old_path = Some(unquote(p));
        } else if let Some(p) = b.strip_prefix("rename to ") {
            new_path = Some(unquote(p));
        } else if let Some(p) = b.strip_prefix("copy from ") {
            status = FileStatus::Copied;
            old_path = Some(unquote(p));
        } else if let Some(p) = b.strip_prefix("copy to ") {
            new_path = Some(unquote(p));
        } else if let Some(p) = b.strip_prefix("--- ") {
            old_path = side(p, "a/").or(old_path);
        } else if let Some(p) = b.strip_prefix("+++ ") {
            new_path = side(p, "b/").or(new_path);
        } else if b.starts_with("Binary files ") || b == "GIT binary patch" {
            binary = true;
            if b == "GIT binary patch" {
                take_binary(lines, &mut text);
            }
        }
    }
    while lines.peek().is_some_and(|l| l.starts_with("@@ ")) {
        hunks.push(parse_hunk(file, lines, &mut text)?);
    }

    let path = match status {
        FileStatus::Deleted => old_path.clone().or(new_path),
        _ => new_path.or_else(|| old_path.clone()),
    }
    .ok_or_else(|| PatchError::Malformed {
        file: file.to_owned(),
        line: header_line,
        reason: "a `diff --git` line whose file name cannot be read".to_owned(),
    })?;
    for p in std::iter::once(&path).chain(old_path.as_ref()) {
        if escapes(p) {
            return Err(PatchError::EscapesRepo {
                file: file.to_owned(),
                line: header_line,
                path: p.clone(),
            });
        }
    }
    let old_path = match status {
        FileStatus::Renamed | FileStatus::Copied => old_path,
        _ => None,
    };
    let short = Path::new(prefix)
        .file_name()
        .map_or_else(|| prefix.to_owned(), |n| n.to_string_lossy().into_owned());
    Ok(PatchUnit {
        id: format!("{short}:{path}"),
        patch: file.to_owned(),
        path,
        hunks,
        sha256: sha256_hex(text.as_bytes()),
        text,
        subject: subject.to_owned(),
        status,
        old_path,
        binary,
    })
}

/// The end of a message's diff: the `-- ` signature line that
/// `format-patch` writes before git's version.
fn is_end(bare: &str) -> bool {
    bare == "--" || bare == "-- " || is_mbox_start(bare)
}

/// The base85 lines of a `GIT binary patch` (`literal N`/`delta N`
/// blocks separated by blank lines), up to the next section.
fn take_binary(lines: &mut Lines<'_>, text: &mut String) {
    while let Some(line) = lines.peek() {
        let b = bare(line);
        if line.starts_with("diff --git ") || is_end(b) {
            return;
        }
        lines.next();
        text.push_str(line);
    }
}

/// One hunk, read by its counts.
fn parse_hunk(file: &str, lines: &mut Lines<'_>, text: &mut String) -> Result<Hunk, PatchError> {
    let header = lines.next().unwrap_or_default();
    let at = lines.number();
    let malformed = |reason: String| PatchError::Malformed {
        file: file.to_owned(),
        line: at,
        reason,
    };
    let (old_start, old_lines, new_start, new_lines) = parse_hunk_header(bare(header))
        .ok_or_else(|| malformed(format!("`{}` is not a hunk header", bare(header))))?;
    let mut hunk_text = String::from(header);
    let (mut old_left, mut new_left) = (old_lines, new_lines);
    while old_left > 0 || new_left > 0 {
        let Some(line) = lines.next() else {
            return Err(malformed(format!(
                "the hunk ends early: {old_left} old and {new_left} new lines missing (a truncated patch?)"
            )));
        };
        match line.as_bytes().first() {
            // An empty line is context too: some mailers strip its space.
            Some(b' ' | b'\n' | b'\r') => {
                old_left = old_left.saturating_sub(1);
                new_left = new_left.saturating_sub(1);
            }
            Some(b'-') => old_left = old_left.saturating_sub(1),
            Some(b'+') => new_left = new_left.saturating_sub(1),
            Some(b'\\') => {}
            _ => {
                return Err(PatchError::Malformed {
                    file: file.to_owned(),
                    line: lines.number(),
                    reason: format!(
                        "a line inside a hunk starts with neither ` `, `+` nor `-`: `{}`",
                        bare(line).chars().take(40).collect::<String>()
                    ),
                });
            }
        }
        hunk_text.push_str(line);
    }
    // "\ No newline at end of file" after the last counted line.
    while lines.peek().is_some_and(|l| l.starts_with('\\')) {
        hunk_text.push_str(lines.next().unwrap_or_default());
    }
    text.push_str(&hunk_text);
    Ok(Hunk {
        header: bare(header).to_owned(),
        old_start,
        old_lines,
        new_start,
        new_lines,
        text: hunk_text,
    })
}

/// `@@ -a[,b] +c[,d] @@…` (a missing count is 1).
fn parse_hunk_header(line: &str) -> Option<(u32, u32, u32, u32)> {
    let rest = line.strip_prefix("@@ -")?;
    let (ranges, _) = rest.split_once(" @@")?;
    let (old, new) = ranges.split_once(" +")?;
    let range = |r: &str| -> Option<(u32, u32)> {
        match r.split_once(',') {
            Some((start, len)) => Some((start.parse().ok()?, len.parse().ok()?)),
            None => Some((r.parse().ok()?, 1)),
        }
    };
    let (a, b) = range(old)?;
    let (c, d) = range(new)?;
    Some((a, b, c, d))
}

/// The path of a `--- a/x` or `+++ b/x` line; `None` for `/dev/null`.
fn side(text: &str, prefix: &str) -> Option<String> {
    // A path with spaces gets a tab before any timestamp (GNU diff).
    let text = text.split('\t').next().unwrap_or(text);
    let path = unquote(text);
    if path == "/dev/null" {
        return None;
    }
    Some(
        path.strip_prefix(prefix)
            .map_or(path.clone(), str::to_owned),
    )
}

/// Both paths of `diff --git a/X b/Y`. Unquoted paths may hold spaces, so
/// the split is where the two halves name the same file (the usual case);
/// when they differ (a rename), the extended headers say which is which.
fn split_git_header(line: &str) -> (Option<String>, Option<String>) {
    let rest = line.strip_prefix("diff --git ").unwrap_or("");
    if rest.starts_with('"') {
        let (first, second) = split_quoted(rest);
        return (
            first.map(|p| p.strip_prefix("a/").unwrap_or(&p).to_owned()),
            second.map(|p| p.strip_prefix("b/").unwrap_or(&p).to_owned()),
        );
    }
    let Some(body) = rest.strip_prefix("a/") else {
        return (None, None);
    };
    // Same name both sides: `a/P b/P`, so body is `P b/P`.
    if body.len() > 3 && (body.len() - 3) % 2 == 0 {
        let half = (body.len() - 3) / 2;
        if body.is_char_boundary(half)
            && body[half..].starts_with(" b/")
            && body[..half] == body[half + 3..]
        {
            let p = body[..half].to_owned();
            return (Some(p.clone()), Some(p));
        }
    }
    match body.split_once(" b/") {
        Some((a, b)) => (Some(a.to_owned()), Some(unquote(b))),
        None => (None, None),
    }
}

/// `"a/x y" "b/x y"` or `"a/x" b/x`: the two paths, unquoted.
fn split_quoted(rest: &str) -> (Option<String>, Option<String>) {
    let mut escaped = false;
    let mut end = None;
    for (i, c) in rest.char_indices().skip(1) {
        match c {
            '\\' if !escaped => escaped = true,
            '"' if !escaped => {
                end = Some(i);
                break;
            }
            _ => escaped = false,
        }
    }
    let Some(end) = end else {
        return (None, None);
    };
    let first = unquote(&rest[..=end]);
    let second = rest[end + 1..].trim_start();
    (Some(first), Some(unquote(second)))
}

/// Git's C-style quoting of unusual paths (`"t\303\251st"` → `tést`).
fn unquote(text: &str) -> String {
    let Some(inner) = text.strip_prefix('"').and_then(|t| t.strip_suffix('"')) else {
        return text.to_owned();
    };
    let mut bytes = Vec::with_capacity(inner.len());
    let mut chars = inner.bytes().peekable();
    while let Some(b) = chars.next() {
        if b != b'\\' {
            bytes.push(b);
            continue;
        }
        match chars.next() {
            Some(b'n') => bytes.push(b'\n'),
            Some(b't') => bytes.push(b'\t'),
            Some(b'a') => bytes.push(7),
            Some(b'b') => bytes.push(8),
            Some(b'f') => bytes.push(12),
            Some(b'v') => bytes.push(11),
            Some(b'r') => bytes.push(b'\r'),
            Some(d @ b'0'..=b'7') => {
                let mut value = u32::from(d - b'0');
                for _ in 0..2 {
                    match chars.peek() {
                        Some(&o @ b'0'..=b'7') => {
                            value = value * 8 + u32::from(o - b'0');
                            chars.next();
                        }
                        _ => break,
                    }
                }
                bytes.push(u8::try_from(value & 0xff).unwrap_or(b'?'));
            }
            Some(other) => bytes.push(other),
            None => bytes.push(b'\\'),
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// A path a patch may not name: absolute, or climbing out with `..`.
fn escapes(path: &str) -> bool {
    path.is_empty()
        || path.starts_with('/')
        || path.starts_with('\\')
        || path.as_bytes().get(1) == Some(&b':')
        || path.split(['/', '\\']).any(|part| part == "..")
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO_FILES: &str = "From 1f0c6b2a9e4d3c2b1a0f9e8d7c6b5a4f3e2d1c0b Mon Sep 17 00:00:00 2001
From: Ana <ana@example.com>
Date: Fri, 4 Dec 2026 10:00:00 +0000
Subject: [PATCH 1/2] Fix the spawn point and
 remove a stale note

The body says why.
---
 notes.txt  | 1 -
 src/a.rs   | 3 ++-
 2 files changed, 2 insertions(+), 2 deletions(-)

diff --git a/notes.txt b/notes.txt
index 1111111..2222222 100644
--- a/notes.txt
+++ b/notes.txt
@@ -1,2 +1 @@
 keep
--- 
diff --git a/src/a.rs b/src/a.rs
index 3333333..4444444 100644
--- a/src/a.rs
+++ b/src/a.rs
@@ -1,3 +1,4 @@ fn main() {
 fn main() {
-    spawn(0, 0);
+    spawn(1, 1);
+    // diff --git a/x b/x
 }
\\ No newline at end of file
-- 
2.39.2

";

    #[test]
    fn hunks_are_read_by_their_counts_not_by_look() {
        let mut units = Vec::new();
        parse_file("p/0001-fix.patch", TWO_FILES, &mut units).unwrap();
        assert_eq!(units.len(), 2, "{units:#?}");
        let notes = &units[0];
        assert_eq!(notes.id, "0001-fix.patch:notes.txt");
        assert_eq!(notes.patch, "p/0001-fix.patch");
        assert_eq!(notes.subject, "Fix the spawn point and remove a stale note");
        // `--- ` inside the hunk is a removed line `-- `, not the signature.
        assert_eq!(notes.hunks.len(), 1);
        assert!(
            notes.hunks[0].text.ends_with("--- \n"),
            "{:?}",
            notes.hunks[0].text
        );
        let code = &units[1];
        assert_eq!(code.path, "src/a.rs");
        assert_eq!(code.status, FileStatus::Modified);
        let hunk = &code.hunks[0];
        assert_eq!(
            (
                hunk.old_start,
                hunk.old_lines,
                hunk.new_start,
                hunk.new_lines
            ),
            (1, 3, 1, 4)
        );
        assert_eq!(hunk.header, "@@ -1,3 +1,4 @@ fn main() {");
        assert!(hunk.text.contains("// diff --git a/x b/x"));
        assert!(hunk.text.ends_with("\\ No newline at end of file\n"));
        assert!(
            !code.text.contains("2.39.2"),
            "the signature is not part of the unit"
        );
        assert_eq!(code.sha256, sha256_hex(code.text.as_bytes()));
    }

    #[test]
    fn several_messages_in_one_file_number_their_units() {
        let twice = format!(
            "{TWO_FILES}{}",
            TWO_FILES.replace("[PATCH 1/2]", "[PATCH 2/2]")
        );
        let mut units = Vec::new();
        parse_file("all.mbox", &twice, &mut units).unwrap();
        let ids: Vec<&str> = units.iter().map(|u| u.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "all.mbox[1]:notes.txt",
                "all.mbox[1]:src/a.rs",
                "all.mbox[2]:notes.txt",
                "all.mbox[2]:src/a.rs"
            ]
        );
    }

    #[test]
    fn a_truncated_hunk_is_an_error_with_its_line() {
        let cut = &TWO_FILES[..TWO_FILES.find("+    spawn(1, 1);").unwrap()];
        let err = parse_file("0001.patch", cut, &mut Vec::new()).unwrap_err();
        let shown = err.to_string();
        assert!(
            shown.contains("patch `0001.patch` line 24: the hunk ends early"),
            "{shown}"
        );
    }

    #[test]
    fn paths_outside_the_repo_are_refused() {
        for evil in ["../etc/passwd", "/etc/passwd", "a/../../x"] {
            let text = format!(
                "diff --git a/{evil} b/{evil}\n--- a/{evil}\n+++ b/{evil}\n@@ -1 +1 @@\n-a\n+b\n"
            );
            let err = parse_file("x.patch", &text, &mut Vec::new()).unwrap_err();
            assert!(
                matches!(err, PatchError::EscapesRepo { .. }),
                "{evil}: {err}"
            );
            assert!(err.to_string().contains("x.patch"), "{err}");
        }
    }

    #[test]
    fn not_a_patch_is_named() {
        for text in ["", "hello\n", "# README\n"] {
            let err = parse_file("notes.md", text, &mut Vec::new()).unwrap_err();
            assert!(matches!(err, PatchError::NotAPatch { .. }), "{err}");
            assert!(
                err.to_string().starts_with("`notes.md` is not a patch"),
                "{err}"
            );
        }
    }

    #[test]
    fn binary_and_mode_only_changes_are_units_without_hunks() {
        let text = "diff --git a/logo.png b/logo.png\nindex 1111111..2222222 100644\nBinary files a/logo.png and b/logo.png differ\ndiff --git a/run.sh b/run.sh\nold mode 100644\nnew mode 100755\n";
        let mut units = Vec::new();
        parse_file("0001-x.patch", text, &mut units).unwrap();
        assert_eq!(units.len(), 2);
        assert!(units[0].binary && units[0].hunks.is_empty());
        assert_eq!(units[0].path, "logo.png");
        assert_eq!(units[1].path, "run.sh");
        assert!(!units[1].binary && units[1].hunks.is_empty());
        assert!(units[1].text.ends_with("new mode 100755\n"));
    }

    #[test]
    fn git_header_paths_with_spaces_and_quotes() {
        assert_eq!(
            split_git_header("diff --git a/my file.rs b/my file.rs"),
            (Some("my file.rs".into()), Some("my file.rs".into()))
        );
        assert_eq!(
            split_git_header("diff --git \"a/t\\303\\251st.rs\" \"b/t\\303\\251st.rs\""),
            (Some("tést.rs".into()), Some("tést.rs".into()))
        );
        assert_eq!(parse_hunk_header("@@ -3 +3,0 @@"), Some((3, 1, 3, 0)));
        assert_eq!(parse_hunk_header("@@ -x +3 @@"), None);
        assert_eq!(strip_subject("[PATCH v2 3/7] Do it"), "Do it");
        assert_eq!(strip_subject("[RFC] keep"), "[RFC] keep");
    }
}

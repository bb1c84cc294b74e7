//! Imports run down the floors `docs/contributing.md` lists, no source file
//! outgrows 1,200 lines, no test is named after the issue that asked for
//! it, and no comment cites a design file the repo does not have.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The checkout's root.
pub fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Every file under `dir` whose name ends with `ext`, sorted.
pub fn files(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.to_string_lossy().ends_with(ext) {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The floors of `docs/contributing.md`'s table: room → floor.
fn floors() -> BTreeMap<String, u32> {
    let page = std::fs::read_to_string(repo().join("docs/contributing.md")).expect("contributing");
    let mut floors = BTreeMap::new();
    for line in page.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let Some(floor) = cells.get(1).and_then(|c| c.parse::<u32>().ok()) else {
            continue;
        };
        for room in cells[2].split('`').skip(1).step_by(2) {
            floors.insert(room.to_owned(), floor);
        }
    }
    floors
}

/// A source file's room: the top-level module it is in.
fn room_of(file: &Path) -> String {
    let rel = file.strip_prefix(repo().join("src")).expect("under src");
    let first = rel.components().next().expect("a component");
    first
        .as_os_str()
        .to_string_lossy()
        .trim_end_matches(".rs")
        .to_owned()
}

/// The rooms a file's non-test code names as `crate::<room>`, with the
/// line of each. Comments and the insides of string and character literals
/// are left out, and so is each item marked `#[cfg(test)]` (a `mod tests;`
/// line, a `mod tests { … }` block to its matching brace, a test-only `fn`
/// or `impl`): every other line is read, before and after such an item.
pub fn imports(text: &str) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    let mut in_group = false;
    let mut test_item: Option<TestItem> = None;
    for (n, line) in code_only(text).lines().enumerate() {
        let mut code = line;
        if test_item.is_none()
            && let Some(after) = code.trim_start().strip_prefix("#[cfg(test)]")
        {
            test_item = Some(TestItem::default());
            code = after;
        }
        if let Some(item) = &mut test_item {
            match item.end_in(code) {
                // The item goes on to the next line.
                None => continue,
                Some(end) => {
                    test_item = None;
                    code = &code[end..];
                }
            }
        }
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            rest = &rest[at + "crate::".len()..];
            if let Some(group) = rest.strip_prefix('{') {
                // `use crate::{a, b::c}`: each first name of the group.
                in_group = true;
                rest = group;
                continue;
            }
            out.push((first_word(rest), n + 1));
        }
        if in_group {
            for part in rest.split(',') {
                let word = first_word(part.trim_start_matches(['{', ' ']));
                if !word.is_empty() {
                    out.push((word, n + 1));
                }
            }
            if code.contains("};") {
                in_group = false;
            }
        }
    }
    out
}

/// How far into an item marked `#[cfg(test)]` the reader is: the item ends
/// at a `;` outside any bracket (`mod tests;`, `use …;`), or at the brace
/// that closes its first block (`mod tests { … }`, `fn`, `impl`). Further
/// attributes (`#[path = "…"]`) open and close their own brackets.
#[derive(Default)]
struct TestItem {
    depth: usize,
}

impl TestItem {
    /// Where in `code` (a line with comments and literals blanked) the item
    /// ends, just past its last character; `None` when it goes on.
    fn end_in(&mut self, code: &str) -> Option<usize> {
        for (at, c) in code.char_indices() {
            match c {
                '(' | '[' | '{' => self.depth += 1,
                ')' | ']' => self.depth = self.depth.saturating_sub(1),
                '}' => {
                    self.depth = self.depth.saturating_sub(1);
                    if self.depth == 0 {
                        return Some(at + 1);
                    }
                }
                ';' if self.depth == 0 => return Some(at + 1),
                _ => {}
            }
        }
        None
    }
}

/// `text` with every comment and the inside of every string and character
/// literal blanked to spaces, lines kept where they were: what is left is
/// code, so a brace or a `crate::` in a string or a comment counts for
/// nothing. Knows nested block comments, escapes, raw strings (`r#"…"#`)
/// and lifetimes (`'a`, which open no literal).
fn code_only(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    // Blanks what `chars[from..to]` held, keeping its line breaks.
    let blank = |out: &mut String, from: usize, to: usize| {
        out.extend(
            chars[from..to]
                .iter()
                .map(|&c| if c == '\n' { '\n' } else { ' ' }),
        );
    };
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        let end = if c == '/' && next == Some('/') {
            chars[i..]
                .iter()
                .position(|&c| c == '\n')
                .map_or(chars.len(), |p| i + p)
        } else if c == '/' && next == Some('*') {
            block_comment_end(&chars, i)
        } else if c == '"' {
            string_end(&chars, i + 1)
        } else if c == 'r'
            && (i == 0 || !ident(chars[i - 1]) || byte_prefix(&chars, i))
            && let Some(end) = raw_string_end(&chars, i + 1)
        {
            end
        } else if c == '\'' {
            char_end(&chars, i).unwrap_or(i + 1)
        } else {
            out.push(c);
            i += 1;
            continue;
        };
        blank(&mut out, i, end);
        i = end;
    }
    out
}

/// Whether the `r` at `at` follows a lone `b` (`br"…"`, a raw byte string).
fn byte_prefix(chars: &[char], at: usize) -> bool {
    at >= 1
        && chars[at - 1] == 'b'
        && (at == 1 || !(chars[at - 2].is_alphanumeric() || chars[at - 2] == '_'))
}

/// Just past the `*/` that closes the comment opened at `start` (block
/// comments nest).
fn block_comment_end(chars: &[char], start: usize) -> usize {
    let mut depth = 0;
    let mut i = start;
    while i + 1 < chars.len() {
        match (chars[i], chars[i + 1]) {
            ('/', '*') => {
                depth += 1;
                i += 2;
            }
            ('*', '/') => {
                depth -= 1;
                i += 2;
                if depth == 0 {
                    return i;
                }
            }
            _ => i += 1,
        }
    }
    chars.len()
}

/// Just past the `"` that closes a string whose text starts at `from`.
fn string_end(chars: &[char], from: usize) -> usize {
    let mut i = from;
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 2,
            '"' => return i + 1,
            _ => i += 1,
        }
    }
    chars.len()
}

/// When `r` at `from - 1` opens a raw string (`r"`, `r#"`, …), just past
/// its closing quote and hashes; `None` for anything else (`r#type`, a name).
fn raw_string_end(chars: &[char], from: usize) -> Option<usize> {
    let hashes = chars[from..].iter().take_while(|&&c| c == '#').count();
    let quote = from + hashes;
    if chars.get(quote) != Some(&'"') {
        return None;
    }
    let mut i = quote + 1;
    while i < chars.len() {
        if chars[i] == '"'
            && chars[i + 1..]
                .iter()
                .take(hashes)
                .filter(|&&c| c == '#')
                .count()
                == hashes
        {
            return Some(i + 1 + hashes);
        }
        i += 1;
    }
    Some(chars.len())
}

/// When the `'` at `start` opens a character literal (`'{'`, `'\''`,
/// `'\u{7b}'`), just past its closing quote; `None` for a lifetime or a
/// label (`'a`, `'static`).
fn char_end(chars: &[char], start: usize) -> Option<usize> {
    match chars.get(start + 1)? {
        '\\' => {
            let close = chars.get(start + 3..)?.iter().position(|&c| c == '\'')?;
            Some(start + 3 + close + 1)
        }
        _ => (chars.get(start + 2) == Some(&'\'')).then_some(start + 3),
    }
}

fn first_word(text: &str) -> String {
    text.chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect()
}

#[test]
fn imports_run_down_the_floors_contributing_lists() {
    let floors = floors();
    assert!(
        floors.len() > 10,
        "docs/contributing.md's table of floors was not read: {floors:?}"
    );
    let mut wrong = Vec::new();
    for file in files(&repo().join("src"), ".rs") {
        let room = room_of(&file);
        let Some(&floor) = floors.get(&room) else {
            wrong.push(format!(
                "{}: the room `{room}` is on no floor of docs/contributing.md",
                file.display()
            ));
            continue;
        };
        let text = std::fs::read_to_string(&file).expect("source");
        for (name, line) in imports(&text) {
            let Some(&to) = floors.get(&name) else {
                continue;
            };
            if name != room && to >= floor {
                wrong.push(format!(
                    "{}:{line}: `{room}` (floor {floor}) imports `{name}` (floor {to})",
                    file.strip_prefix(repo()).unwrap_or(&file).display()
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports that run up or across (docs/contributing.md, \"Floors\"):\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_import_reader_sees_groups_and_skips_comments_and_tests() {
    let text = "use crate::plan::model::Plan;\n// crate::engine in a comment\nuse crate::{\n    report::run,\n    steps::Kind,\n};\nlet x = crate::text::cut(a, 3);\n#[cfg(test)]\nuse crate::cli;\n";
    let names: Vec<String> = imports(text).into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["plan", "report", "steps", "text"]);
}

/// The reader used to stop at a file's first `#[cfg(test)]`: an upward
/// import after `#[cfg(test)] mod tests;` near the top went unseen.
#[test]
fn the_import_reader_reads_on_after_a_test_module_line() {
    let text = "//! A room.\n\n#[cfg(test)]\nmod tests;\n\nuse crate::plan::model::Plan;\nuse crate::cli::Context;\n";
    assert_eq!(
        imports(text),
        [("plan".to_owned(), 6), ("cli".to_owned(), 7)]
    );
    // The attribute and the item on one line, and code after the item on it.
    let text = "#[cfg(test)] mod tests; use crate::cli;\nuse crate::engine::Engine;\n";
    assert_eq!(
        imports(text),
        [("cli".to_owned(), 1), ("engine".to_owned(), 2)]
    );
}

/// A `#[cfg(test)]` block is skipped to its matching brace, whatever
/// braces its strings, characters and comments hold, and the code after it
/// is read.
#[test]
fn the_import_reader_skips_a_test_block_to_its_matching_brace() {
    let text = r##"use crate::text::cut;
#[cfg(test)]
#[path = "x_tests.rs"]
mod tests {
    use crate::cli::Context;
    const OPEN: char = '{';
    const QUOTE: char = '\'';
    fn f<'a>(s: &'a str) -> &'a str { s }
    // a } in a comment
    /* a /* nested } */ block */
    const RAW: &str = r#"} "crate::engine" {"#;
    const TEXT: &str = "}}} \" }";
}
const URL: &str = "http://x"; use crate::report::Console;
let brace = "{ crate::engine }";
use crate::engine::Engine;
#[cfg(test)]
impl Plan {
    fn g() -> [u8; 2] { [0; 2] }
}
use crate::steps::Kind;
"##;
    let names: Vec<String> = imports(text).into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["text", "report", "engine", "steps"]);
}

#[test]
fn no_source_file_is_over_1200_lines() {
    let mut big = Vec::new();
    for file in files(&repo().join("src"), ".rs") {
        let name = file.to_string_lossy();
        if name.ends_with("_tests.rs") || name.ends_with("/tests.rs") {
            continue;
        }
        let lines = std::fs::read_to_string(&file)
            .expect("source")
            .lines()
            .count();
        let rel = file
            .strip_prefix(repo())
            .unwrap_or(&file)
            .display()
            .to_string();
        if lines > 1200 {
            big.push(format!("{rel}: {lines} lines"));
        }
    }
    assert!(
        big.is_empty(),
        "split these along their seams, each part with its `//!`:\n{}",
        big.join("\n")
    );
}

#[test]
fn no_test_is_named_after_an_issue() {
    let issue = |name: &str| {
        name.strip_prefix("issue")
            .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()))
    };
    let mut named = Vec::new();
    for dir in ["src", "tests"] {
        for file in files(&repo().join(dir), ".rs") {
            let stem = file.file_stem().map(|s| s.to_string_lossy().into_owned());
            if stem.as_deref().is_some_and(issue) {
                named.push(file.display().to_string());
            }
            let text = std::fs::read_to_string(&file).expect("source");
            for (n, line) in text.lines().enumerate() {
                if let Some(rest) = line.trim_start().strip_prefix("fn ")
                    && issue(rest)
                {
                    named.push(format!("{}:{}", file.display(), n + 1));
                }
            }
        }
    }
    assert!(
        named.is_empty(),
        "name tests by the behaviour they hold, not the issue:\n{}",
        named.join("\n")
    );
}

/// A citation of the design file (its name, or one of its sections) leads
/// a reader of the repo nowhere: the file is not in it. Comments point at `docs/` pages or in-code items instead. The
/// needles are built so this file does not match itself.
#[test]
fn no_comment_cites_a_design_file_the_repo_does_not_have() {
    let needles = [concat!("DESIGN", " §"), concat!("DESIGN", ".md")];
    let mut cited = Vec::new();
    for dir in ["src", "tests"] {
        for file in files(&repo().join(dir), ".rs") {
            let rel = file
                .strip_prefix(repo())
                .unwrap_or(&file)
                .display()
                .to_string();
            let text = std::fs::read_to_string(&file).expect("source");
            for (n, line) in text.lines().enumerate() {
                if needles.iter().any(|needle| line.contains(needle)) {
                    cited.push(format!("{rel}:{}: {}", n + 1, line.trim()));
                }
            }
        }
    }
    assert!(
        cited.is_empty(),
        "cite a docs/ page or an in-code item instead of the design file:\n{}",
        cited.join("\n")
    );
}

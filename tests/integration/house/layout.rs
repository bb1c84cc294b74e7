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
/// line of each (comments and everything from `#[cfg(test)]` on left out).
pub fn imports(text: &str) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    let mut in_group = false;
    for (n, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or_default();
        if code.trim_start().starts_with("#[cfg(test)]") {
            break;
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

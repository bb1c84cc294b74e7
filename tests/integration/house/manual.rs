//! The manual under `docs/` and its front door, README.md: the README stays
//! short, every relative link resolves (to a file, and to a heading when it
//! names one), and every `gameplan …` command in a fenced block is one the
//! binary knows.

use std::collections::BTreeSet;
use std::path::PathBuf;

use super::layout::repo;
use crate::support::BIN;

/// README.md and every page under docs/.
fn pages() -> Vec<PathBuf> {
    let mut pages = vec![repo().join("README.md")];
    pages.extend(super::layout::files(&repo().join("docs"), ".md"));
    pages
}

/// The lines of `text` outside fenced code blocks, with their numbers.
fn prose(text: &str) -> Vec<(usize, &str)> {
    let mut fenced = false;
    text.lines()
        .enumerate()
        .filter(|(_, line)| {
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
                return false;
            }
            !fenced
        })
        .map(|(n, line)| (n + 1, line))
        .collect()
}

/// The lines inside fenced code blocks.
fn fenced(text: &str) -> Vec<(usize, &str)> {
    let mut inside = false;
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            inside = !inside;
            continue;
        }
        if inside {
            out.push((n + 1, line));
        }
    }
    out
}

/// GitHub's anchor of a heading: lowercase, spaces to `-`, punctuation
/// other than `-` and `_` dropped.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a page's headings (a repeated heading gets `-1`, `-2`).
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    for (_, line) in prose(text) {
        let Some(heading) = line.strip_prefix('#') else {
            continue;
        };
        let base = slug(heading.trim_start_matches('#'));
        let mut anchor = base.clone();
        let mut n = 0;
        while !seen.insert(anchor.clone()) {
            n += 1;
            anchor = format!("{base}-{n}");
        }
    }
    seen
}

/// The targets of a line's Markdown links, `[text](target)`.
fn links(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("](") {
        rest = &rest[at + 2..];
        if let Some(end) = rest.find(')') {
            out.push(rest[..end].trim().to_owned());
            rest = &rest[end..];
        }
    }
    out
}

#[test]
fn the_readme_is_a_front_door_of_at_most_250_lines() {
    let readme = std::fs::read_to_string(repo().join("README.md")).expect("README");
    let lines = readme.lines().count();
    assert!(
        lines <= 250,
        "README.md is {lines} lines: the manual goes under docs/"
    );
    assert!(
        readme.contains("bash .ci/test"),
        "README names the command that runs every test"
    );
    // CI runs exactly that command, and that command runs the suite after
    // installing what it needs.
    let ci = std::fs::read_to_string(repo().join(".ci/run")).expect(".ci/run");
    assert!(
        ci.contains("\nbash .ci/test\n"),
        ".ci/run runs README's test command"
    );
    let test = std::fs::read_to_string(repo().join(".ci/test")).expect(".ci/test");
    assert!(
        test.contains("bash .ci/setup") && test.contains("cargo test --locked"),
        ".ci/test installs, then runs the suite"
    );
    assert!(
        readme.contains("docs/README.md"),
        "README points at the manual's index"
    );
}

#[test]
fn every_relative_link_of_the_manual_resolves() {
    let mut broken = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).expect("page");
        let dir = page.parent().expect("a directory");
        for (n, line) in prose(&text) {
            for target in links(line) {
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                let (file, anchor) = target.split_once('#').unwrap_or((&target, ""));
                let path = if file.is_empty() {
                    page.clone()
                } else {
                    dir.join(file)
                };
                let at = format!(
                    "{}:{n}",
                    page.strip_prefix(repo()).unwrap_or(&page).display()
                );
                if !path.exists() {
                    broken.push(format!("{at}: `{target}`: no such file"));
                    continue;
                }
                if !anchor.is_empty() && path.extension().is_some_and(|e| e == "md") {
                    let target_text = std::fs::read_to_string(&path).expect("target");
                    if !anchors(&target_text).contains(anchor) {
                        broken.push(format!("{at}: `{target}`: no heading with that anchor"));
                    }
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// The subcommand words of a command line shown in a fence: after
/// `gameplan` (or `cargo run [--release] --`), the lowercase words up to
/// the first flag, path or value.
fn subcommand(line: &str) -> Option<Vec<String>> {
    let line = line.trim().trim_start_matches("$ ");
    let rest = [
        "gameplan ",
        "cargo run --release -- ",
        "cargo run -- ",
        "cargo run --locked -- ",
    ]
    .iter()
    .find_map(|prefix| line.strip_prefix(prefix))?;
    Some(
        rest.split_whitespace()
            .take_while(|w| {
                w.chars().next().is_some_and(|c| c.is_ascii_lowercase())
                    && w.chars().all(|c| c.is_ascii_lowercase() || c == '-')
            })
            .map(str::to_owned)
            .collect(),
    )
}

#[test]
fn every_gameplan_command_shown_in_the_manual_parses() {
    let mut checked = BTreeSet::new();
    let mut wrong = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).expect("page");
        for (n, line) in fenced(&text) {
            let Some(words) = subcommand(line) else {
                continue;
            };
            if !checked.insert(words.clone()) {
                continue;
            }
            let out = std::process::Command::new(BIN)
                .args(&words)
                .arg("--help")
                .output()
                .expect("gameplan runs");
            if !out.status.success() {
                wrong.push(format!(
                    "{}:{n}: `gameplan {} --help` fails: {}",
                    page.strip_prefix(repo()).unwrap_or(&page).display(),
                    words.join(" "),
                    String::from_utf8_lossy(&out.stderr)
                        .lines()
                        .next()
                        .unwrap_or_default()
                ));
            }
        }
    }
    assert!(checked.len() > 10, "the manual shows commands: {checked:?}");
    assert!(
        wrong.is_empty(),
        "commands the binary does not know:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_command_reader_stops_at_the_first_argument() {
    assert_eq!(
        subcommand("cargo run --release -- plan run plans/demo.toml --yes"),
        Some(vec!["plan".to_owned(), "run".to_owned()])
    );
    assert_eq!(
        subcommand("$ gameplan ledger token --revoke -"),
        Some(vec!["ledger".to_owned(), "token".to_owned()])
    );
    assert_eq!(subcommand("python3 game.py"), None);
    assert_eq!(
        slug("What `serve` promises, and what it does not"),
        "what-serve-promises-and-what-it-does-not"
    );
}

//! `patches` units: a real series made by `git format-patch` in a
//! temp repo (modified, added, deleted, renamed and binary files, a path
//! with a space and one with non-ASCII letters) read into one unit per file
//! per patch; bad series (outside the repo, not a patch, too large, too
//! many units) refused naming the file.

use std::path::Path;
use std::process::Command;

use gameplan::review::patches::{
    FileStatus, MAX_PATCH_BYTES, MAX_PATCH_UNITS, PatchError, PatchUnit, read_series,
};

/// Runs git in `dir` with no user or system config, so the series is the
/// same on every machine.
fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "user.name=Ana", "-c", "user.email=ana@example.com"])
        .args(["-c", "commit.gpgsign=false", "-c", "core.quotepath=true"])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn write(dir: &Path, rel: &str, contents: impl AsRef<[u8]>) {
    let path = dir.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, contents).unwrap();
}

/// A repo with a base commit and three more, and the series of those three
/// under `patches/`.
fn series_repo() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    git(d, &["init", "-q", "-b", "main"]);
    write(d, "src/game.rs", "fn main() {\n    spawn(0, 0);\n}\n");
    write(d, "src/old_name.rs", "pub fn helper() {}\n");
    write(d, "docs/obsolete.md", "# old\nline\n");
    git(d, &["add", "."]);
    git(d, &["commit", "-q", "-m", "base"]);
    git(d, &["tag", "base"]);

    // 1: modify one file, add another (whose text holds diff-looking lines).
    write(
        d,
        "src/game.rs",
        "fn main() {\n    spawn(1, 1);\n    run();\n}\n",
    );
    write(
        d,
        "src/new.rs",
        "// diff --git a/x b/x\n-- \n@@ -1 +1 @@\npub fn run() {}\n",
    );
    git(d, &["add", "."]);
    git(d, &["commit", "-q", "-m", "Spawn at one and run"]);

    // 2: rename (with a small edit), delete, a binary file, odd names.
    std::fs::rename(d.join("src/old_name.rs"), d.join("src/helpers.rs")).unwrap();
    std::fs::remove_file(d.join("docs/obsolete.md")).unwrap();
    write(
        d,
        "assets/icon.png",
        [0x89u8, b'P', b'N', b'G', 0, 1, 2, 3, 255, 0, 7],
    );
    write(d, "docs/read me.md", "spaces\n");
    write(d, "docs/café.md", "accents\n");
    git(d, &["add", "-A"]);
    git(
        d,
        &[
            "commit",
            "-q",
            "-m",
            "Tidy: rename helpers, drop the old doc, add an icon",
        ],
    );

    // 3: a hunk in the middle of a longer file.
    let long: String = (1..=40)
        .map(|i| format!("line {i}"))
        .collect::<Vec<_>>()
        .join("\n")
        + "\n";
    write(d, "src/long.txt", &long);
    git(d, &["add", "."]);
    git(d, &["commit", "-q", "-m", "Add a long file"]);
    write(
        d,
        "src/long.txt",
        long.replace("line 20\n", "line twenty\n"),
    );
    git(d, &["commit", "-q", "-am", "Spell out twenty"]);

    git(
        d,
        &["format-patch", "-q", "--binary", "-o", "patches", "base"],
    );
    dir
}

fn unit<'u>(units: &'u [PatchUnit], id: &str) -> &'u PatchUnit {
    units
        .iter()
        .find(|u| u.id == id)
        .unwrap_or_else(|| panic!("no unit {id}; ids: {:?}", ids(units)))
}

fn ids(units: &[PatchUnit]) -> Vec<&str> {
    units.iter().map(|u| u.id.as_str()).collect()
}

#[test]
fn a_format_patch_series_makes_one_unit_per_file_per_patch() {
    let repo = series_repo();
    let units = read_series(repo.path(), "patches").unwrap();
    assert_eq!(
        ids(&units),
        [
            "0001-Spawn-at-one-and-run.patch:src/game.rs",
            "0001-Spawn-at-one-and-run.patch:src/new.rs",
            "0002-Tidy-rename-helpers-drop-the-old-doc-add-an-icon.patch:assets/icon.png",
            "0002-Tidy-rename-helpers-drop-the-old-doc-add-an-icon.patch:docs/café.md",
            "0002-Tidy-rename-helpers-drop-the-old-doc-add-an-icon.patch:docs/obsolete.md",
            "0002-Tidy-rename-helpers-drop-the-old-doc-add-an-icon.patch:docs/read me.md",
            "0002-Tidy-rename-helpers-drop-the-old-doc-add-an-icon.patch:src/helpers.rs",
            "0003-Add-a-long-file.patch:src/long.txt",
            "0004-Spell-out-twenty.patch:src/long.txt",
        ]
    );

    let game = unit(&units, "0001-Spawn-at-one-and-run.patch:src/game.rs");
    assert_eq!(game.patch, "patches/0001-Spawn-at-one-and-run.patch");
    assert_eq!(game.subject, "Spawn at one and run");
    assert_eq!(game.status, FileStatus::Modified);
    assert_eq!(game.hunks.len(), 1);
    let h = &game.hunks[0];
    assert_eq!(
        (h.old_start, h.old_lines, h.new_start, h.new_lines),
        (1, 3, 1, 4)
    );
    assert!(
        h.text
            .contains("-    spawn(0, 0);\n+    spawn(1, 1);\n+    run();\n"),
        "{}",
        h.text
    );
    assert!(
        game.text
            .starts_with("diff --git a/src/game.rs b/src/game.rs\n")
    );
    assert!(
        !game.text.contains("2.47") && !game.text.contains("From:"),
        "{}",
        game.text
    );

    // Lines that look like headers or the signature are content.
    let new = unit(&units, "0001-Spawn-at-one-and-run.patch:src/new.rs");
    assert_eq!(new.status, FileStatus::Added);
    assert_eq!(new.hunks[0].new_lines, 4);
    assert!(
        new.hunks[0].text.contains("+-- \n+@@ -1 +1 @@\n"),
        "{}",
        new.hunks[0].text
    );

    let tidy = "0002-Tidy-rename-helpers-drop-the-old-doc-add-an-icon.patch";
    let renamed = unit(&units, &format!("{tidy}:src/helpers.rs"));
    assert_eq!(renamed.status, FileStatus::Renamed);
    assert_eq!(renamed.old_path.as_deref(), Some("src/old_name.rs"));
    let deleted = unit(&units, &format!("{tidy}:docs/obsolete.md"));
    assert_eq!(deleted.status, FileStatus::Deleted);
    assert_eq!(deleted.hunks[0].old_lines, 2);
    let icon = unit(&units, &format!("{tidy}:assets/icon.png"));
    assert!(icon.binary && icon.hunks.is_empty(), "{icon:?}");
    assert!(icon.text.contains("GIT binary patch"));
    assert_eq!(
        unit(&units, &format!("{tidy}:docs/read me.md")).hunks.len(),
        1
    );
    assert_eq!(
        unit(&units, &format!("{tidy}:docs/café.md")).status,
        FileStatus::Added
    );

    let twenty = unit(&units, "0004-Spell-out-twenty.patch:src/long.txt");
    assert_eq!(twenty.hunks[0].old_start, 17);
    assert!(
        twenty.hunks[0].header.ends_with("@@ line 16"),
        "{}",
        twenty.hunks[0].header
    );

    // Ids and hashes are stable: the same series reads the same; a unit's
    // sha256 is over its text, and the two long.txt units differ.
    assert_eq!(read_series(repo.path(), "patches/*.patch").unwrap(), units);
    let first = unit(&units, "0003-Add-a-long-file.patch:src/long.txt");
    assert_ne!(first.sha256, twenty.sha256);
    assert_eq!(first.sha256.len(), 64);
}

#[test]
fn an_mbox_of_the_whole_series_numbers_its_messages() {
    let repo = series_repo();
    let mbox = git(
        repo.path(),
        &["format-patch", "--stdout", "--binary", "base"],
    );
    write(repo.path(), "review/series.mbox", mbox);
    let units = read_series(repo.path(), "review/series.mbox").unwrap();
    assert_eq!(units.len(), 9, "{:?}", ids(&units));
    assert_eq!(units[0].id, "series.mbox[1]:src/game.rs");
    assert_eq!(units[8].id, "series.mbox[4]:src/long.txt");
    assert_eq!(units[8].subject, "Spell out twenty");
    let per_file = read_series(repo.path(), "patches").unwrap();
    for (a, b) in units.iter().zip(&per_file) {
        assert_eq!((&a.path, &a.text), (&b.path, &b.text));
    }
}

#[test]
fn a_series_that_cannot_be_read_is_refused_naming_the_file() {
    let repo = series_repo();
    let d = repo.path();

    let err = read_series(d, "../patches").unwrap_err();
    assert!(matches!(err, PatchError::Pattern { .. }), "{err}");
    assert!(err.to_string().contains("`../patches`"), "{err}");

    std::fs::create_dir(d.join("empty")).unwrap();
    let err = read_series(d, "empty").unwrap_err();
    assert!(matches!(err, PatchError::NoPatches { .. }), "{err}");
    assert!(
        err.to_string().contains("git format-patch -o empty"),
        "{err}"
    );

    write(d, "patches/0000-notes.patch", "These are my notes.\n");
    let err = read_series(d, "patches").unwrap_err();
    assert_eq!(
        err.to_string().split(" (").next(),
        Some("`patches/0000-notes.patch` is not a patch"),
        "{err}"
    );
    std::fs::remove_file(d.join("patches/0000-notes.patch")).unwrap();

    // A hand-edited patch pointing outside the repo.
    let first = d.join("patches/0001-Spawn-at-one-and-run.patch");
    let evil = std::fs::read_to_string(&first)
        .unwrap()
        .replace("src/new.rs", "../../home/ana/.bashrc");
    std::fs::write(&first, evil).unwrap();
    let err = read_series(d, "patches").unwrap_err();
    assert!(matches!(err, PatchError::EscapesRepo { .. }), "{err}");
    let shown = err.to_string();
    assert!(
        shown.contains("patches/0001-Spawn-at-one-and-run.patch")
            && shown.contains("`../../home/ana/.bashrc`, outside the repo"),
        "{shown}"
    );
}

#[test]
fn a_patch_over_the_size_cap_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let body = format!(
        "diff --git a/a b/a\n--- a/a\n+++ b/a\n@@ -1 +1 @@\n-x\n+{}\n",
        "y".repeat(MAX_PATCH_BYTES)
    );
    write(dir.path(), "big.patch", &body);
    let err = read_series(dir.path(), "big.patch").unwrap_err();
    assert!(matches!(err, PatchError::TooLarge { .. }), "{err}");
    assert!(
        err.to_string()
            .starts_with("patch `big.patch` is larger than 8 MiB"),
        "{err}"
    );
    // Just under the cap reads.
    let fits = format!(
        "diff --git a/a b/a\n--- a/a\n+++ b/a\n@@ -1 +1 @@\n-x\n+{}\n",
        "y".repeat(MAX_PATCH_BYTES - 100)
    );
    write(dir.path(), "big.patch", &fits);
    assert_eq!(read_series(dir.path(), "big.patch").unwrap().len(), 1);
}

#[test]
fn a_series_over_the_unit_cap_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let section = |i: usize| {
        format!("diff --git a/f{i} b/f{i}\nnew file mode 100644\nindex 0000000..e69de29\n")
    };
    // Split over two patch files: the cap is on the series, not per file.
    let half = MAX_PATCH_UNITS / 2;
    let first: String = (0..half).map(section).collect();
    let second: String = (half..=MAX_PATCH_UNITS).map(section).collect();
    write(dir.path(), "s/0001-a.patch", &first);
    write(dir.path(), "s/0002-b.patch", &second);
    let err = read_series(dir.path(), "s").unwrap_err();
    assert!(matches!(err, PatchError::TooManyUnits), "{err}");
    std::fs::write(
        dir.path().join("s/0002-b.patch"),
        &second[section(half).len()..],
    )
    .unwrap();
    assert_eq!(read_series(dir.path(), "s").unwrap().len(), MAX_PATCH_UNITS);
}

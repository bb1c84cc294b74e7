//! Unit reuse: a clean verdict is stored per lens × unit, so a
//! second run with no change judges zero units (the command lens is not
//! even called), changing one file re-judges exactly that unit (the lens
//! receives only it), a finding on a unit drops its stored clean verdicts,
//! and `plan explain` says per lens how many units it will judge and reuse.

use crate::review::gates::{repo, review, verdict};

#[test]
fn unchanged_units_are_reused_and_a_changed_one_is_judged_alone() {
    let t = repo("fn a() {}\n", "fn b() {}\n", "fn c() {}\n");
    t.run(&["plan", "explain", "plans/gates.toml"])
        .code(0)
        .stdout_has("`lint`: 3 to judge, 0 reused");
    t.run(&["plan", "run", "plans/gates.toml"]).code(0);
    assert_eq!(t.read("lens.log"), "src/a.rs src/b.rs src/c.rs\n");

    t.run(&["plan", "explain", "plans/gates.toml"])
        .code(0)
        .stdout_has("`lint`: 0 to judge, 3 reused")
        .stdout_has("`todo`: 0 to judge, 3 reused");
    t.run(&["plan", "run", "plans/gates.toml"])
        .code(0)
        .stdout_has("lint: SEND-READY (3 units, 3 clear; 0 judged, 3 reused)");
    assert_eq!(
        t.read("lens.log"),
        "src/a.rs src/b.rs src/c.rs\n",
        "nothing changed: the lens was not called"
    );
    let first = review(&t, "first");
    assert_eq!(first["judged"], 0);
    assert_eq!(first["reused"], 3);
    assert_eq!(verdict(&first, "lint", "src/b.rs")["reused"], true);

    t.write("src/b.rs", "fn b() { 1 }\n");
    t.run(&["plan", "explain", "plans/gates.toml"])
        .code(0)
        .stdout_has("`lint`: 1 to judge, 2 reused");
    t.run(&["plan", "run", "plans/gates.toml"])
        .code(0)
        .stdout_has("lint: SEND-READY (3 units, 3 clear; 1 judged, 2 reused)");
    assert_eq!(
        t.read("lens.log").lines().last(),
        Some("src/b.rs"),
        "only the changed file was sent"
    );
    let sent: serde_json::Value =
        serde_json::from_str(&t.read("lens.stdin.json")).expect("the lens's stdin");
    assert_eq!(sent["lens"], "lint");
    assert_eq!(sent["units"].as_array().map(Vec::len), Some(1));
    assert_eq!(sent["units"][0]["path"], "src/b.rs");
    assert_eq!(sent["units"][0]["text"], "fn b() { 1 }\n");
    assert_eq!(sent["units"][0]["size"], 13);
    assert!(
        sent["units"][0]["sha256"]
            .as_str()
            .is_some_and(|s| s.len() == 64)
    );
}

#[test]
fn a_finding_drops_the_units_stored_clean_verdict() {
    let t = repo("fn a() {}\n", "fn b() {}\n", "fn c() {}\n");
    t.run(&["plan", "run", "plans/gates.toml"]).code(0);
    t.write("src/b.rs", "BAD\n");
    t.run(&["plan", "run", "plans/gates.toml"])
        .code(1)
        .stdout_has("finding: src/b.rs:1: bad word (high)");
    // Back to the content whose clean verdict the first run stored: that
    // verdict was dropped with the finding, so b is judged again.
    t.write("src/b.rs", "fn b() {}\n");
    t.run(&["plan", "run", "plans/gates.toml"]).code(0);
    let log = t.read("lens.log");
    let calls: Vec<&str> = log.lines().collect();
    assert_eq!(
        calls,
        ["src/a.rs src/b.rs src/c.rs", "src/b.rs", "src/b.rs"],
        "{log}"
    );
    // a and c kept theirs all along.
    let first = review(&t, "first");
    assert_eq!(verdict(&first, "lint", "src/a.rs")["reused"], true);
    assert_eq!(verdict(&first, "lint", "src/b.rs")["reused"], false);
}

#[test]
fn a_changed_lens_judges_every_unit_again() {
    let t = repo("fn a() {}\n", "fn b() {}\n", "fn c() {}\n");
    t.run(&["plan", "run", "plans/gates.toml"]).code(0);
    // The lens's program is a repo file: its content is part of the lens.
    t.write("lens.py", format!("{}\n# v2\n", crate::review::gates::LENS));
    t.run(&["plan", "run", "plans/gates.toml"]).code(0);
    assert_eq!(
        t.read("lens.log").lines().last(),
        Some("src/a.rs src/b.rs src/c.rs")
    );
}

#[test]
fn no_reuse_judges_every_unit_again() {
    let t = repo("fn a() {}\n", "fn b() {}\n", "fn c() {}\n");
    t.run(&["plan", "run", "plans/gates.toml"]).code(0);
    t.run(&["plan", "run", "plans/gates.toml", "--no-reuse"])
        .code(0)
        .stdout_has("lint: SEND-READY (3 units, 3 clear; 3 judged, 0 reused)");
    assert_eq!(t.read("lens.log").lines().count(), 2, "sent again");
    // What it judged was stored: the next plain run reuses it.
    t.run(&["plan", "run", "plans/gates.toml"])
        .code(0)
        .stdout_has("lint: SEND-READY (3 units, 3 clear; 0 judged, 3 reused)");
}

/// An unchanged re-run leaves the file-hash cache alone: the gates' own
/// outputs (`review.json`, `review.md`, just written, so never trusted by
/// stat) are hashed past it instead of landing in it, so a review of many
/// files does not rewrite the whole cache on every run.
#[test]
fn an_unchanged_rerun_leaves_the_file_hash_cache_alone() {
    let t = repo("fn a() {}\n", "fn b() {}\n", "fn c() {}\n");
    // Files older than the racily-clean margin, as in any real checkout.
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    for rel in [
        "src/a.rs",
        "src/b.rs",
        "src/c.rs",
        "lens.py",
        "plans/gates.toml",
    ] {
        std::fs::File::options()
            .write(true)
            .open(t.path(rel))
            .and_then(|f| f.set_modified(old))
            .expect("set mtime");
    }
    t.run(&["plan", "run", "plans/gates.toml"]).code(0);
    let cache = t.path(".gameplan/hash-cache.json");
    let text = t.read(".gameplan/hash-cache.json");
    assert!(text.contains("src/b.rs"), "{text}");
    assert!(
        !text.contains("review.json"),
        "a step's outputs are not repo files: {text}"
    );
    let written = std::fs::metadata(&cache)
        .and_then(|m| m.modified())
        .expect("mtime");
    t.run(&["plan", "run", "plans/gates.toml"])
        .code(0)
        .stdout_has("lint: SEND-READY (3 units, 3 clear; 0 judged, 3 reused)");
    assert_eq!(
        std::fs::metadata(&cache)
            .and_then(|m| m.modified())
            .expect("mtime"),
        written,
        "nothing changed, nothing was read: the cache was not written again"
    );
}

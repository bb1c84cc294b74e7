//! Dispositions in a gate: one in force discharges its finding
//! (shown with its reason and owner; exit 0), the same past its expiry is
//! lapsed and the finding stands (exit 1), one that matched nothing is
//! listed unused; and a gate over a `git format-patch` series judges one
//! unit per file per patch.

use crate::review::gates::{repo, review, verdict};

fn disposition(expires: &str) -> String {
    format!(
        r#"[[dispositions]]
id = "legacy-todo"
lens = "todo"
unit = "src/b.rs"
reason = "b.rs is rewritten next sprint"
owner = "ana"
expires = {expires}

[[dispositions]]
id = "nothing-matches"
lens = "todo"
title = "no such finding*"
reason = "kept to show unused"
owner = "ana"
expires = 2999-12-31
"#
    )
}

#[test]
fn a_disposition_in_force_discharges_and_an_expired_one_lapses() {
    let t = repo("fn a() {}\n", "// TODO: later\n", "fn c() {}\n")
        .file("plans/dispositions.toml", disposition("2999-12-31"));
    t.run(&["plan", "run", "plans/gates.toml"])
        .code(0)
        .stdout_has("gate second: SEND-READY")
        .stdout_has(
            "discharged: src/b.rs: `todo` matched src/b.rs (by `legacy-todo`: b.rs is rewritten next sprint; ana, until 2999-12-31)",
        )
        .stdout_has("unused disposition `nothing-matches`");
    let second = review(&t, "second");
    let b = verdict(&second, "todo", "src/b.rs");
    assert_eq!(b["verdict"], "finding");
    assert_eq!(b["findings"][0]["discharged"]["id"], "legacy-todo");
    assert_eq!(b["findings"][0]["discharged"]["owner"], "ana");
    assert_eq!(second["unused"][0]["id"], "nothing-matches");

    // The same disposition, expired: it discharges nothing and is lapsed.
    t.write("plans/dispositions.toml", disposition("2020-01-31"));
    t.run(&["plan", "run", "plans/gates.toml"])
        .code(1)
        .stdout_has("gate second: FIX FIRST")
        .stdout_has("finding: src/b.rs: `todo` matched src/b.rs")
        .stdout_has("lapsed disposition `legacy-todo` (expired 2020-01-31)");
    let second = review(&t, "second");
    assert_eq!(second["lapsed"][0]["id"], "legacy-todo");
    let b = verdict(&second, "todo", "src/b.rs");
    assert!(b["findings"][0].get("discharged").is_none(), "{b}");
    assert_eq!(b["findings"][0]["lapsed"]["id"], "legacy-todo");
}

#[test]
fn a_new_disposition_rejudges_the_lenses_units() {
    let t = repo("fn a() {}\n", "fn b() {}\n", "fn c() {}\n");
    t.run(&["plan", "run", "plans/gates.toml"]).code(0);
    t.write(
        "plans/dispositions.toml",
        disposition("2999-12-31").replace("lens = \"todo\"", "lens = \"lint\""),
    );
    t.run(&["plan", "run", "plans/gates.toml"])
        .code(0)
        .stdout_has("lint: SEND-READY (3 units, 3 clear; 3 judged, 0 reused)")
        .stdout_has("todo: SEND-READY (3 units, 3 clear; 0 judged, 3 reused)");
}

const PATCH: &str = "From 1111111111111111111111111111111111111111 Mon Sep 17 00:00:00 2001
From: Ana <ana@example.com>
Date: Fri, 4 Dec 2026 10:00:00 +0000
Subject: [PATCH 1/1] spawn at the door

---
 src/game.rs | 3 ++-
 1 file changed, 2 insertions(+), 1 deletion(-)

diff --git a/src/game.rs b/src/game.rs
index 1111111..2222222 100644
--- a/src/game.rs
+++ b/src/game.rs
@@ -1,3 +1,4 @@
 fn main() {
-    spawn(0, 0);
+    spawn(1, 1); // TODO: the real door
+    run();
 }
-- 
2.43.0

";

#[test]
fn a_gate_over_a_patch_series_judges_each_file_of_each_patch() {
    let plan = r#"version = 1
name = "patches"

[[lenses]]
name = "todo-added"
kind = "rule"
over = "patches"
patches = "patches"
when = "'+' in unit.text and 'TODO' in unit.hunks[0].text"

[[gates]]
name = "series"
lenses = ["todo-added"]

[[steps]]
id = "series"
kind = "gate"
"#;
    let t = crate::support::Test::new()
        .file("plans/patches.toml", plan)
        .file("patches/0001-spawn-at-the-door.patch", PATCH);
    t.run(&["plan", "explain", "plans/patches.toml"])
        .code(0)
        .stdout_has("`todo-added`: 1 to judge, 0 reused");
    t.run(&["plan", "run", "plans/patches.toml"])
        .code(1)
        .stdout_has("gate series: FIX FIRST")
        .stdout_has("finding: 0001-spawn-at-the-door.patch:src/game.rs");
    let series = review(&t, "series");
    let unit = verdict(
        &series,
        "todo-added",
        "0001-spawn-at-the-door.patch:src/game.rs",
    );
    assert_eq!(unit["verdict"], "finding");
}

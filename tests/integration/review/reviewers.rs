//! Reviewers: a gate's `reviewers` each run one more pass of its
//! lenses once they pass, the persona card joining the lens (`reviewer` in
//! a rule's expression, `"reviewer"` on a command lens's stdin); when the
//! lenses do not pass, the reviewers are reported not run.

use crate::review::gates::{LENS, review, verdict};
use crate::support::Test;

const PLAN: &str = r#"version = 1
name = "reviewed"

[[personas]]
slug = "grumpy"
card = "Hates functions named c."
player = { kind = "random" }

[[lenses]]
name = "lint"
kind = "command"
over = "files"
files = ["src/**"]
argv = ["python3", "lens.py"]

[[lenses]]
name = "picky"
kind = "rule"
over = "files"
files = ["src/**"]
when = "reviewer is not none and 'named c' in reviewer.card and 'fn c' in unit.text"

[[gates]]
name = "code"
lenses = ["lint", "picky"]
reviewers = ["grumpy"]

[[steps]]
id = "code"
kind = "gate"
"#;

#[test]
fn a_reviewer_runs_the_lenses_again_with_its_card_after_they_pass() {
    let t = Test::new()
        .file("lens.py", LENS)
        .file("plans/reviewed.toml", PLAN)
        .file("src/a.rs", "fn a() {}\n")
        .file("src/c.rs", "fn c() {}\n");
    t.run(&["plan", "run", "plans/reviewed.toml"])
        .code(1)
        .stdout_has("gate code: FIX FIRST")
        .stdout_has("picky: SEND-READY")
        .stdout_has("picky@grumpy: FIX FIRST")
        .stdout_has("finding: src/c.rs: `picky` matched src/c.rs")
        .stdout_has("lint@grumpy: SEND-READY");
    let code = review(&t, "code");
    assert_eq!(code["reviewers"][0]["reviewer"], "grumpy");
    assert_eq!(code["reviewers"][0]["ran"], true);
    assert_eq!(
        verdict(&code, "picky@grumpy", "src/c.rs")["verdict"],
        "finding"
    );
    assert_eq!(verdict(&code, "picky", "src/c.rs")["verdict"], "clear");
    // The command lens's reviewer pass got the card on stdin.
    let sent: serde_json::Value =
        serde_json::from_str(&t.read("lens.stdin.json")).expect("the lens's stdin");
    assert_eq!(sent["lens"], "lint", "the lens as the plan names it");
    assert_eq!(sent["reviewer"]["slug"], "grumpy");
    assert_eq!(sent["reviewer"]["card"], "Hates functions named c.");
}

#[test]
fn reviewers_do_not_run_when_the_lenses_do_not_pass() {
    let t = Test::new()
        .file("lens.py", LENS)
        .file("plans/reviewed.toml", PLAN)
        .file("src/a.rs", "BAD\n");
    t.run(&["plan", "run", "plans/reviewed.toml"])
        .code(1)
        .stdout_has("lint: FIX FIRST")
        .stdout_has("reviewer grumpy: not run (the gate's lenses did not pass)");
    let code = review(&t, "code");
    assert_eq!(code["reviewers"][0]["ran"], false);
    assert_eq!(code["lenses"].as_array().map(Vec::len), Some(2));
    assert_eq!(
        t.read("lens.log").lines().count(),
        1,
        "one call: no reviewer pass"
    );
}

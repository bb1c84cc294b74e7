//! Lenses over a real playtest: the maze's findings and its play
//! cells' reports are units of the gate steps that need the aggregate, and
//! a `blockers` gate over its planted crash is FIX FIRST (exit 1), the
//! crash named, the gate after it not run; the demo's own gates pass.

use crate::review::gates::{review, verdict};
use crate::support::Test;

const MAZE_PLAN: &str = include_str!("../../../plans/maze.toml");

const GATES: &str = r#"
[[lenses]]
name = "every-cell-played"
kind = "rule"
over = "runs"
when = "unit.state != 'succeeded'"

[[lenses]]
name = "crashes"
kind = "rule"
over = "findings"
when = "unit.category in ['crash', 'hang']"

[[lenses]]
name = "errors"
kind = "rule"
over = "findings"
when = "unit.category == 'error'"

[[gates]]
name = "played"
lenses = ["every-cell-played"]

[[gates]]
name = "blockers"
lenses = ["crashes"]

[[gates]]
name = "polish"
lenses = ["errors"]

[[steps]]
id = "played"
kind = "gate"
needs = ["aggregate"]

[[steps]]
id = "blockers"
kind = "gate"
needs = ["played"]

[[steps]]
id = "polish"
kind = "gate"
needs = ["blockers"]
"#;

#[test]
fn a_blockers_gate_over_the_mazes_findings_fails_on_its_planted_crash() {
    let t = Test::new().file("plans/maze.toml", format!("{MAZE_PLAN}{GATES}"));
    let out = t.run(&["plan", "run", "plans/maze.toml"]);
    out.code(1)
        .stdout_has("gate played: SEND-READY")
        .stdout_has("every-cell-played: SEND-READY (8 units, 8 clear")
        .stdout_has("gate blockers: FIX FIRST")
        .stdout_has("finding: 8df40e09ffdc5950: The game exited with code 101 on `use idol`")
        .stdout_has("not run: polish: `blockers` did not pass");
    assert!(
        !out.stdout.contains("were not judged"),
        "a gate judged them\n{out}"
    );
    let blockers = review(&t, "blockers");
    let crash = verdict(&blockers, "crashes", "8df40e09ffdc5950");
    assert_eq!(crash["verdict"], "finding");
    assert_eq!(crash["findings"][0]["fingerprint"], "8df40e09ffdc5950");
    assert_eq!(crash["findings"][0]["severity"], "critical");
    assert_eq!(
        verdict(&blockers, "crashes", "9bd2e02621fcb4f2")["verdict"],
        "clear",
        "the stuck finding is no blocker"
    );
    let played = review(&t, "played");
    assert_eq!(
        verdict(&played, "every-cell-played", "play[curious-kid,standard,1]")["verdict"],
        "clear"
    );

    // Everything reused: the gates judge nothing again and say the same.
    t.run(&["plan", "run", "plans/maze.toml"])
        .code(1)
        .stdout_has("crashes: FIX FIRST (4 units, 1 finding, 3 clear; 1 judged, 3 reused)");
}

#[test]
fn the_demos_gates_pass_and_end_its_run() {
    let t = Test::new()
        .file("plans/demo.toml", include_str!("../../../plans/demo.toml"))
        .file(
            "examples/personas/veteran.md",
            include_str!("../../../examples/personas/veteran.md"),
        );
    let out = t.run(&["plan", "run", "plans/demo.toml", "--yes"]);
    out.code(0)
        .stdout_has("gate played: SEND-READY")
        .stdout_has("gate evidence: SEND-READY")
        .stdout_has("replayable-blockers: SEND-READY (4 units, 4 clear");
    let gate = out.stdout.find("gate played").expect("the gates");
    let settled = out.stdout.find("settled job").expect("the settlement");
    assert!(gate < settled, "{out}");
}

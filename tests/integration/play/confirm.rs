//! A crash or hang is confirmed before it is believed: the cell replays its
//! own actions once in a fresh game. A real one stays high and fails
//! `--fail-on hang`; one that does not happen again is `unconfirmed`, low,
//! passed by `--fail-on hang` and selected by `--fail-on unconfirmed`, and a
//! gate's rule can name it (`unit.unconfirmed`). Real game processes: a
//! Python bell that hangs (or dies) when rung, always or only once.

use crate::support::Test;

fn bell(env: &str) -> Test {
    let plan = format!(
        r#"version = 1
name = "bell"

[game]
id = "bell"
command = ["python3", "bell.py"]
action_timeout = 2
env = {{ {env} }}

[[personas]]
slug = "ringer"
card = "Looks, rings, looks."
player = {{ kind = "scripted", actions = ["look", "ring", "look"] }}

[[lenses]]
name = "flakes"
kind = "rule"
over = "findings"
when = "unit.unconfirmed"

[[gates]]
name = "no-flakes"
lenses = ["flakes"]

[[steps]]
id = "play"
kind = "play"
matrix = {{ persona = "*" }}

[[steps]]
id = "aggregate"
kind = "aggregate"
needs = ["play"]

[[steps]]
id = "gate"
kind = "gate"
gate = "no-flakes"
needs = ["aggregate"]
"#
    );
    let game = std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/games/bell.py"),
    )
    .expect("bell.py");
    Test::new().file("bell.py", game).file("plan.toml", plan)
}

/// The cell's one finding.
fn finding(t: &Test) -> serde_json::Value {
    let run = t.run_ids().pop().expect("a run");
    let report = t.read(&format!(
        ".gameplan/runs/{run}/steps/play[ringer]/report.json"
    ));
    let report: serde_json::Value = serde_json::from_str(&report).expect("json");
    let findings = report["findings"].as_array().expect("findings");
    assert_eq!(findings.len(), 1, "{report:#}");
    findings[0].clone()
}

#[test]
fn a_hang_that_happens_again_on_replay_is_confirmed_stays_high_and_fails_fail_on_hang() {
    let t = bell(r#"ALWAYS = "1""#);
    let out = t.run(&["plan", "run", "plan.toml", "--fail-on", "hang"]);
    out.code(1).stdout_has("--fail-on hang");
    let f = finding(&t);
    assert_eq!(
        (f["category"].as_str(), f["severity"].as_str()),
        (Some("hang"), Some("high")),
        "{f:#}"
    );
    assert!(f.get("unconfirmed").is_none(), "{f:#}");
    let detail = f["evidence"]["detail"].as_str().expect("detail");
    assert!(
        detail.contains("confirmed: replayed once in a fresh game, it ended the same way"),
        "{detail}"
    );
}

#[test]
fn a_hang_that_does_not_happen_again_is_unconfirmed_low_and_only_fail_on_unconfirmed_fails_on_it() {
    let t = bell("");
    let out = t.run(&["plan", "run", "plan.toml", "--fail-on", "hang"]);
    // The gate over findings sees the label: FIX FIRST (exit 1) names it,
    // so the plain run is judged by --fail-on alone without the gate.
    let f = finding(&t);
    assert_eq!(
        (f["category"].as_str(), f["severity"].as_str()),
        (Some("hang"), Some("low")),
        "{f:#}"
    );
    assert_eq!(f["unconfirmed"], true, "{f:#}");
    let detail = f["evidence"]["detail"].as_str().expect("detail");
    assert!(
        detail.contains("unconfirmed: the first run ended `hang` at step 2")
            && detail.contains("it did otherwise at step 2"),
        "both outcomes: {detail}"
    );
    out.stdout_has("none match")
        .stdout_has("[unconfirmed: did not happen again on replay]");
    out.stdout_has("gate no-flakes: FIX FIRST");

    // The same cell again (reused): `--fail-on hang` passes it by ...
    let gate_less = ["plan", "run", "plan.toml", "play", "aggregate"];
    let mut args = gate_less.to_vec();
    args.extend(["--fail-on", "hang"]);
    t.run(&args).code(0);
    // ... and `--fail-on unconfirmed` selects it.
    let mut args = gate_less.to_vec();
    args.extend(["--fail-on", "unconfirmed"]);
    t.run(&args).code(1).stdout_has("--fail-on unconfirmed");
}

#[test]
fn a_crash_that_does_not_happen_again_is_unconfirmed_and_low() {
    let t = bell(r#"CRASH = "1""#);
    let out = t.run(&[
        "plan",
        "run",
        "plan.toml",
        "play",
        "aggregate",
        "--fail-on",
        "crash",
    ]);
    out.code(0);
    let f = finding(&t);
    assert_eq!(
        (f["category"].as_str(), f["severity"].as_str()),
        (Some("crash"), Some("low")),
        "{f:#}"
    );
    assert_eq!(f["unconfirmed"], true, "{f:#}");
}

//! `[[invariants]]` on a stdio game: examples/games/coins.py as shipped
//! breaks none of the rules a user writes from docs/invariants.md, and a
//! copy with each of three rule bugs planted (a purse that shrinks, a
//! step that skips a room, a coin that is never picked up) is caught by
//! the rule it breaks, with the values in the evidence; the trace
//! records the rules, so a replay of the cell judges them again, and a
//! shrink cuts it to a short repro that still breaks the rule; a
//! `milestone` is counted in `progress`; `plan check` names a rule it
//! cannot read where it is written (`plan.toml:10:`).

use std::path::Path;

use super::cell_reports;
use crate::support::Test;

const RULES: &str = r#"
[[invariants]]
name = "the purse never shrinks"
always = "prev is none or obs.state.purse >= prev.state.purse"

[[invariants]]
name = "the player stays in the five rooms"
always = "obs.state.at >= 0 and obs.state.at < 5"
severity = "critical"

[[invariants]]
name = "no more coins than were hidden"
never = "obs.state.purse > 3"

[[invariants]]
name = "a coin in the purse"
sometimes = "obs.state.purse >= 1"
milestone = true
"#;

const PLAYERS: &str = r#"
[[personas]]
slug = "mapper"
card = "Tries what it has not tried."
player = { kind = "explorer" }
patience = 40

[[personas]]
slug = "wanderer"
card = "Anything at random."
player = { kind = "random" }
patience = 40

[[steps]]
id = "play"
kind = "play"
matrix = { persona = "*", seed = [1, 2] }
"#;

/// A test dir with coins.py (`planted` applied to its source: (from, to))
/// and a plan holding the rules.
fn game(planted: Option<(&str, &str)>) -> Test {
    let source = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/games/coins.py"),
    )
    .expect("coins.py");
    let source = match planted {
        Some((from, to)) => {
            assert!(source.contains(from), "coins.py has `{from}`");
            source.replacen(from, to, 1)
        }
        None => source,
    };
    Test::new().file("coins.py", source).file(
        "plan.toml",
        format!(
            "version = 1\nname = \"rules\"\n\n[game]\nid = \"coins\"\ncommand = [\"python3\", \"coins.py\"]\naction_timeout = 5\n{RULES}{PLAYERS}"
        ),
    )
}

/// The invariant findings of every cell: (cell dir, finding).
fn broken(t: &Test) -> Vec<(String, serde_json::Value)> {
    let out = t.run(&["plan", "run", "plan.toml", "--json"]);
    out.code(0);
    cell_reports(t, &out.json())
        .into_iter()
        .flat_map(|(dir, report)| {
            report["findings"]
                .as_array()
                .expect("findings")
                .iter()
                .filter(|f| f["category"] == "invariant")
                .map(|f| (dir.clone(), f.clone()))
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn the_game_as_shipped_breaks_no_rule_and_counts_its_milestone() {
    let t = game(None);
    let out = t.run(&["plan", "run", "plan.toml", "--json"]);
    out.code(0);
    let cells = cell_reports(&t, &out.json());
    assert_eq!(cells.len(), 4);
    let mut milestones = 0;
    for (_, report) in &cells {
        let findings = report["findings"].as_array().expect("findings");
        assert!(
            findings.iter().all(|f| f["category"] != "invariant"),
            "{report:#}"
        );
        let notes = report["notes"].to_string();
        assert!(!notes.contains("could not be evaluated"), "{notes}");
        assert_eq!(report["warnings"], serde_json::json!([]), "{report:#}");
        let progress = &report["progress"];
        if let Some(step) = progress["milestones"]["a coin in the purse"].as_u64() {
            milestones += 1;
            assert!(step >= 1 && step <= report["actions_taken"].as_u64().unwrap());
            assert_eq!(progress["sometimes"]["a coin in the purse"], true);
        }
    }
    assert!(milestones >= 2, "{milestones} cells took a coin");
}

#[test]
fn each_planted_rule_bug_is_caught_by_the_rule_it_breaks() {
    let bugs = [
        (
            "state[\"purse\"] += 1",
            "state[\"purse\"] += 1 if state[\"purse\"] < 1 else -1",
            "the purse never shrinks",
            "high",
            "prev.state.purse = ",
        ),
        (
            "state[\"at\"] += 1",
            "state[\"at\"] += 2",
            "the player stays in the five rooms",
            "critical",
            "obs.state.at = 5",
        ),
        (
            "state[\"coins\"].discard(state[\"at\"])",
            "pass",
            "no more coins than were hidden",
            "high",
            "obs.state.purse = 4",
        ),
    ];
    for (from, to, rule, severity, value) in bugs {
        let t = game(Some((from, to)));
        let found = broken(&t);
        assert!(!found.is_empty(), "`{to}` broke no rule");
        for (dir, finding) in &found {
            assert_eq!(
                finding["title"].as_str().map(|s| s.contains(rule)),
                Some(true),
                "`{to}` broke another rule: {finding:#}"
            );
            assert_eq!(finding["severity"], severity, "{finding:#}");
            let detail = finding["evidence"]["detail"].as_str().expect("detail");
            assert!(detail.contains(value), "`{to}`: {detail}");
            // The trace holds the rules: a replay plays the same game.
            t.run(&["replay", &format!("{dir}trace.jsonl")]).code(0);
        }
        // Shrunk to a short repro that still breaks the rule, and replays.
        let (dir, finding) = &found[0];
        let trace = format!("{dir}trace.jsonl");
        t.run(&["shrink", &trace, "--out", "short.jsonl"]).code(0);
        let steps = |text: &str| text.lines().filter(|l| l.contains("\"action\"")).count();
        let (long, short) = (steps(&t.read(&trace)), steps(&t.read("short.jsonl")));
        let at = finding["evidence"]["step"].as_u64().expect("step");
        assert!(
            short >= 1 && short <= long && short as u64 <= at,
            "`{to}`: {short} actions shrunk from {long}, broken at {at}"
        );
        t.run(&["replay", "short.jsonl"])
            .code(0)
            .stdout_has(&format!("again: Invariant `{rule}` broken after"))
            .stdout_has(value);
        // One rule broken is one finding per cell, however often.
        let ids: std::collections::BTreeSet<_> =
            found.iter().map(|(_, f)| f["id"].to_string()).collect();
        assert_eq!(ids.len(), 1, "{found:#?}");
    }
}

#[test]
fn plan_check_names_a_rule_it_cannot_read_where_it_is_written() {
    let t = Test::new().file(
        "plan.toml",
        "version = 1\nname = \"rules\"\n\n[game]\nid = \"coins\"\ncommand = [\"python3\", \"coins.py\"]\n\n\
         [[invariants]]\nname = \"score\"\nalways = \"obs.scor >= 0\"\n\n\
         [[invariants]]\nname = \"two\"\nalways = \"true\"\nnever = \"false\"\n\n\
         [[invariants]]\nname = \"late\"\neventually = \"obs.state.done\"\n",
    );
    let out = t.run(&["plan", "check", "plan.toml"]);
    out.code(3);
    let err = &out.stderr;
    assert!(err.contains("`obs` has no field `scor`"), "{err}");
    assert!(err.contains("did you mean `score`"), "{err}");
    assert!(err.contains("plan.toml:10:"), "{err}");
    assert!(err.contains("has both `always` and `never`"), "{err}");
    assert!(err.contains("`eventually` without `within`"), "{err}");
}

/// A rule that fails to evaluate on every observation judged nothing: a
/// run with no invariant finding must not read as a pass of that rule, so
/// each cell warns of it in the summary, where a note would go unseen.
#[test]
fn a_rule_that_never_evaluates_is_a_warning_of_every_cell_not_a_silent_pass() {
    let t = game(None);
    t.write(
        "plan.toml",
        t.read("plan.toml").replace(
            "[[invariants]]\nname = \"the purse never shrinks\"",
            "[[invariants]]\nname = \"a rule that cannot be read\"\nalways = \"obs.step // 0 >= 0\"\n\n[[invariants]]\nname = \"the purse never shrinks\"",
        ),
    );
    let out = t.run(&["plan", "run", "plan.toml"]);
    out.code(0).stdout_has(
        "invariant `a rule that cannot be read` judged nothing: its expression `obs.step // 0 >= 0` failed on every observation (first at step 1: ",
    );
    let doc = t
        .run(&["plan", "run", "plan.toml", "--json"])
        .code(0)
        .json();
    for (dir, report) in cell_reports(&t, &doc) {
        let warnings = report["warnings"].to_string();
        assert!(
            warnings.contains("a rule that cannot be read"),
            "{dir}: {warnings}"
        );
        // The rules that do evaluate warn of nothing.
        assert!(
            !warnings.contains("the purse never shrinks"),
            "{dir}: {warnings}"
        );
    }
}

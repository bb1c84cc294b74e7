//! The `aggregate` step kind in a free plan: every play cell's
//! report merged from disk (findings by fingerprint with the cells that met
//! them, how each persona felt, the controllers compared), the same merge
//! as the end of the run, the same document after a resume, reused when no
//! cell changed, and a cell that did not play listed as such.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::Value;

use crate::support::{Test, wait_until};

/// Five rooms in a row of actions: the first action of a game always
/// raises the same error (every cell meets it), each later action `x`
/// raises its own (`bug in x`), so which cells meet which depends on what
/// the player picks. Each observation is new (no `stuck`). A reset with
/// seed 2 makes the game exit: that cell does not play. `SLOW` seconds
/// pass before each answer to `act`.
const ROOMS: &str = r#"import json, os, sys, time

slow = float(os.environ.get("SLOW", "0"))
n = 0
for line in sys.stdin:
    msg = json.loads(line)
    op, i = msg["op"], msg["id"]
    if op == "hello":
        out = {"id": i, "ok": True, "name": "rooms", "version": "1", "protocol": 1}
    elif op == "reset":
        if msg.get("seed") == 2:
            sys.exit(3)
        n = 0
        out = {"id": i, "ok": True, "observation": {"text": "Room 0", "actions": ["a", "b", "c", "d", "e"], "state": {"n": 0}, "score": 0}}
    elif op == "act":
        time.sleep(slow)
        n += 1
        message = "the first step always breaks" if n == 1 else "bug in " + msg["action"]
        out = {"id": i, "ok": True, "reward": 0, "done": False,
               "observation": {"text": "Room %d" % n, "actions": ["a", "b", "c", "d", "e"], "state": {"n": n}, "score": n},
               "events": [{"kind": "error", "message": message}]}
    else:
        out = {"id": i, "ok": True}
    print(json.dumps(out), flush=True)
    if op == "close":
        break
"#;

/// Two personas × two controllers × the seeds `seeds`, then an aggregate.
fn plan(seeds: &str, slow: &str) -> String {
    format!(
        r#"version = 1
name = "rooms"
controllers = ["standard", "jev"]

[game]
id = "rooms"
command = ["python3", "rooms.py"]
env = {{ SLOW = "{slow}" }}

[pools]
play = 1

[[personas]]
slug = "kid"
card = "Clicks whatever is first."
patience = 4
player = {{ kind = "random" }}

[[personas]]
slug = "mapper"
card = "Tries what it has not tried."
patience = 4
player = {{ kind = "explorer" }}

[[steps]]
id = "play"
kind = "play"
matrix = {{ persona = "*", controller = "*", seed = {seeds} }}

[[steps]]
id = "aggregate"
kind = "aggregate"
needs = ["play"]
always = true
"#
    )
}

fn repo(seeds: &str, slow: &str) -> Test {
    Test::new()
        .file("rooms.py", ROOMS)
        .file("plan.toml", plan(seeds, slow))
}

fn run_dir(t: &Test) -> String {
    let ids = t.run_ids();
    format!(".gameplan/runs/{}", ids.last().expect("a run"))
}

fn aggregate_json(t: &Test) -> Value {
    let text = t.read(&format!("{}/steps/aggregate/aggregate.json", run_dir(t)));
    serde_json::from_str(&text).expect("aggregate.json is JSON")
}

fn ids(list: &Value) -> BTreeSet<String> {
    list.as_array()
        .expect("a list")
        .iter()
        .map(|v| {
            v.as_str()
                .unwrap_or_else(|| v["id"].as_str().unwrap_or_default())
                .to_owned()
        })
        .collect()
}

/// Per persona (in the plan's order, with its card), each cell's "How it felt".
fn assert_personas_felt(agg: &Value) {
    let personas = agg["personas"].as_array().expect("personas");
    let names: Vec<&str> = personas
        .iter()
        .filter_map(|p| p["persona"].as_str())
        .collect();
    assert_eq!(names, ["kid", "mapper"]);
    for p in personas {
        assert_eq!(p["felt"].as_array().map(Vec::len), Some(2), "{p:#}");
        assert!(
            p["felt"][0]["text"]
                .as_str()
                .unwrap_or_default()
                .contains("actions"),
            "{p:#}"
        );
    }
    assert_eq!(personas[0]["card"], "Clicks whatever is first.");
}

/// The controllers compared: each ran two cells, both complete; the bug
/// `shared` was seen by both, and the split covers every finding, each
/// seen-by-one finding met by that controller's cells alone.
fn assert_controllers_compared(agg: &Value, shared: &str) {
    let findings = agg["findings"].as_array().expect("findings");
    let cmp = &agg["controllers"];
    assert!(
        cmp["limits"]
            .as_str()
            .unwrap_or_default()
            .contains("separate game process")
    );
    assert!(
        cmp["limits"]
            .as_str()
            .unwrap_or_default()
            .contains("not proof")
    );
    for row in cmp["controllers"].as_array().expect("rows") {
        assert_eq!(row["runs"], 2, "{row:#}");
        assert_eq!(row["complete"], 2, "{row:#}");
    }
    let several = ids(&cmp["seen_by_several"]);
    let by_one = ids(&cmp["seen_by_one"]);
    assert!(several.contains(shared), "{cmp:#}");
    assert!(
        !by_one.is_empty(),
        "no finding met by one controller only: {cmp:#}"
    );
    assert_eq!(several.len() + by_one.len(), findings.len(), "{cmp:#}");
    for one in cmp["seen_by_one"].as_array().expect("seen_by_one") {
        let f = findings
            .iter()
            .find(|f| f["id"] == one["id"])
            .expect("listed");
        let controllers: BTreeSet<&str> = f["found_by"]
            .as_array()
            .expect("found_by")
            .iter()
            .filter_map(|b| b.as_str()?.split('/').nth(1))
            .collect();
        assert_eq!(
            controllers,
            BTreeSet::from([one["controller"].as_str().unwrap_or_default()])
        );
    }
}

#[test]
fn the_aggregate_merges_every_cell_by_fingerprint_persona_and_controller() {
    let t = repo("[1]", "0");
    let out = t.run(&["plan", "run", "plan.toml", "--json"]);
    out.code(0);
    let agg = aggregate_json(&t);
    assert_eq!(agg["aggregate"], 1);
    let cells = agg["cells"].as_array().expect("cells");
    assert_eq!(cells.len(), 4, "{agg:#}");
    assert!(cells.iter().all(|c| c["state"] == "played"), "{agg:#}");
    // Each cell's report.json as it read it, from the run's directory.
    for c in cells {
        let report = format!(
            "{}/{}",
            run_dir(&t),
            c["report"].as_str().unwrap_or_default()
        );
        let json = t.path(&report.replace("report.md", "report.json"));
        let sum = std::process::Command::new("sha256sum")
            .arg(&json)
            .output()
            .expect("sha256sum");
        let sum = String::from_utf8_lossy(&sum.stdout);
        assert_eq!(
            sum.split_whitespace().next(),
            c["report_sha256"].as_str(),
            "{c:#}"
        );
    }

    // The bug every cell met is one finding, with all four cells.
    let findings = agg["findings"].as_array().expect("findings");
    let first = findings
        .iter()
        .find(|f| {
            f["title"]
                .as_str()
                .unwrap_or_default()
                .contains("the first step always breaks")
        })
        .expect("the shared bug");
    assert_eq!(
        first["cells"].as_array().map(Vec::len),
        Some(4),
        "{first:#}"
    );
    assert_eq!(
        first["found_by"].as_array().map(Vec::len),
        Some(4),
        "{first:#}"
    );
    let trace = first["trace"].as_str().expect("first cell's trace");
    assert!(
        trace.starts_with("steps/play[") && trace.ends_with("/trace.jsonl"),
        "{trace}"
    );
    assert!(
        first["replay"]
            .as_str()
            .unwrap_or_default()
            .starts_with("gameplan replay ")
    );
    let distinct: BTreeSet<&str> = findings.iter().filter_map(|f| f["id"].as_str()).collect();
    assert_eq!(
        distinct.len(),
        findings.len(),
        "a fingerprint twice: {agg:#}"
    );

    // The same list the run's own summary merged (what --fail-on judges).
    let doc = out.json();
    let run_ids: Vec<&str> = doc["playtest"]["findings"]
        .as_array()
        .expect("playtest findings")
        .iter()
        .filter_map(|f| f["id"].as_str())
        .collect();
    let agg_ids: Vec<&str> = findings.iter().filter_map(|f| f["id"].as_str()).collect();
    assert_eq!(run_ids, agg_ids);

    assert_personas_felt(&agg);
    assert_controllers_compared(&agg, first["id"].as_str().unwrap_or_default());

    // aggregate.md has the same sections.
    let md = t.read(&format!("{}/steps/aggregate/aggregate.md", run_dir(&t)));
    for section in [
        "## Findings",
        "## How it felt",
        "### kid",
        "### mapper",
        "## Controller comparison",
        "Seen by one controller only",
        "## Cells",
    ] {
        assert!(md.contains(section), "no {section}:\n{md}");
    }

    // The run ends with the aggregate's summary and says where it is.
    t.run(&["plan", "run", "plan.toml", "--no-reuse"])
        .code(0)
        .stdout_has("playtest: 4 cells (4 played, 0 reused)")
        .stdout_has("first in kid/standard seed 1, and 3 more cells: gameplan replay")
        .stdout_has("merged: .gameplan/runs/")
        .stdout_has("/steps/aggregate/aggregate.md");
}

/// The end-of-run summary of a plan without an aggregate step is the same
/// merge: the same findings, in the same order.
#[test]
fn a_plan_without_an_aggregate_step_ends_with_the_same_merged_findings() {
    let with = repo("[1]", "0");
    let text = plan("[1]", "0");
    let cut = text
        .find("[[steps]]\nid = \"aggregate\"")
        .expect("aggregate step");
    let without = Test::new()
        .file("rooms.py", ROOMS)
        .file("plan.toml", &text[..cut]);
    let findings = |t: &Test| -> Vec<Value> {
        let doc = t.run(&["plan", "run", "plan.toml", "--json"]).json();
        doc["playtest"]["findings"]
            .as_array()
            .expect("findings")
            .iter()
            .map(|f| serde_json::json!([f["id"], f["met"], f["found_by"], f["cells"], f["first"]]))
            .collect()
    };
    let a = findings(&with);
    assert!(a.len() > 2, "{a:?}");
    assert_eq!(a, findings(&without));
    let doc = without.run(&["plan", "run", "plan.toml", "--json"]).json();
    assert!(doc["playtest"].get("aggregate").is_none(), "{doc:#}");
}

/// A run killed after some cells, then resumed, aggregates every cell: the
/// same aggregate.json as a run never interrupted (its paths are the run's
/// directory's, so nothing in it is run-specific).
#[test]
fn a_resumed_run_aggregates_every_cell_like_an_uninterrupted_one() {
    let whole = repo("[1]", "0.05");
    whole.run(&["plan", "run", "plan.toml"]).code(0);
    let expected = aggregate_json(&whole);

    let t = repo("[1]", "0.05");
    let gameplan = t.spawn(&["plan", "run", "plan.toml"]);
    wait_until("two cells have reported", Duration::from_secs(60), || {
        t.run_ids().last().is_some_and(|id| {
            std::fs::read_dir(t.path(&format!(".gameplan/runs/{id}/steps"))).is_ok_and(|dirs| {
                dirs.flatten()
                    .filter(|d| d.path().join("report.json").is_file())
                    .count()
                    >= 2
            })
        })
    });
    let killed = gameplan.kill9();
    assert_eq!(killed.code, None, "it ended before the kill: {killed}");
    assert!(
        !t.path(&format!("{}/steps/aggregate/aggregate.json", run_dir(&t)))
            .exists(),
        "the aggregate ran before the kill"
    );
    t.run(&["plan", "resume"]).code(0);
    assert_eq!(t.run_ids().len(), 1, "the resume started a new run");
    // A report's hash differs from run to run (the report holds its wall
    // time); everything else is the same.
    let without_hashes = |mut agg: Value| {
        for cell in agg["cells"].as_array_mut().expect("cells") {
            assert!(cell["report_sha256"].is_string(), "{cell:#}");
            cell["report_sha256"] = Value::Null;
        }
        agg
    };
    assert_eq!(without_hashes(aggregate_json(&t)), without_hashes(expected));
}

/// Unchanged cells: the aggregate is reused and its files restored into the
/// new run; a changed set of cells merges again.
#[test]
fn the_aggregate_is_reused_until_a_cell_it_reads_changes() {
    let t = repo("[1]", "0");
    t.run(&["plan", "run", "plan.toml"]).code(0);
    let first = aggregate_json(&t);
    let second = t.run(&["plan", "run", "plan.toml", "--json"]);
    second.code(0);
    assert_eq!(
        crate::support::step(&second.json(), "aggregate")["state"],
        "reused",
        "{second}"
    );
    assert_eq!(aggregate_json(&t), first, "the restored aggregate differs");
    // Its summary points at this run's (restored) cells, not the first run's.
    let text = t.run(&["plan", "run", "plan.toml"]);
    text.code(0).stdout_has(&format!(
        "gameplan replay '{}/steps/play[kid,standard,1]/trace.jsonl'",
        run_dir(&t)
    ));
    assert!(
        t.path(&format!("{}/steps/aggregate/aggregate.md", run_dir(&t)))
            .is_file()
    );
    t.run(&["plan", "explain", "plan.toml"])
        .code(0)
        .stdout_has("aggregate")
        .stdout_has("reused");

    t.write("plan.toml", plan("[1, 3]", "0"));
    let explain = t.run(&["plan", "explain", "plan.toml"]);
    explain.code(0);
    let third = t.run(&["plan", "run", "plan.toml", "--json"]);
    third.code(0);
    assert_eq!(
        crate::support::step(&third.json(), "aggregate")["state"],
        "succeeded",
        "{third}"
    );
    assert_eq!(
        aggregate_json(&t)["cells"].as_array().map(Vec::len),
        Some(8)
    );
}

/// A cell whose game never got through `reset` did not play: the
/// aggregate lists it as such and does not count it complete.
#[test]
fn a_cell_that_did_not_play_is_listed_and_not_complete() {
    let t = repo("[1, 2]", "0");
    let out = t.run(&["plan", "run", "plan.toml", "--json"]);
    out.code(1);
    assert_eq!(
        crate::support::step(&out.json(), "aggregate")["state"],
        "succeeded",
        "{out}"
    );
    let agg = aggregate_json(&t);
    let cells = agg["cells"].as_array().expect("cells");
    assert_eq!(cells.len(), 8);
    for c in cells {
        let expected = if c["seed"] == 2 {
            "not_played"
        } else {
            "played"
        };
        assert_eq!(c["state"], expected, "{c:#}");
    }
    let unplayed = cells.iter().find(|c| c["seed"] == 2).expect("seed 2");
    assert!(
        !unplayed["not_played"]
            .as_str()
            .unwrap_or_default()
            .is_empty(),
        "{unplayed:#}"
    );
    for row in agg["controllers"]["controllers"].as_array().expect("rows") {
        assert_eq!(row["runs"], 4, "{row:#}");
        assert_eq!(row["complete"], 2, "{row:#}");
        assert_eq!(row["incomplete"], 2, "{row:#}");
    }
    let md = t.read(&format!("{}/steps/aggregate/aggregate.md", run_dir(&t)));
    assert!(md.contains("not played"), "{md}");
    // Its key could not know a failed cell's report: merged afresh next time.
    let again = t.run(&["plan", "run", "plan.toml", "--json"]);
    assert_eq!(
        crate::support::step(&again.json(), "aggregate")["state"],
        "succeeded",
        "{again}"
    );
}

/// An aggregate that needs a simulation holds its findings too, with its
/// traces' paths relative to the run's directory; the run's summary shows
/// them from the aggregate.
#[test]
fn the_aggregate_holds_the_simulations_it_needs() {
    let text = plan("[1]", "0").replace("needs = [\"play\"]", "needs = [\"play\", \"sim\"]")
        + r#"
[[steps]]
id = "sim"
kind = "simulate"
games = 4
strategies = ["random"]
workers = 1
max_steps = 3
"#;
    let t = Test::new().file("rooms.py", ROOMS).file("plan.toml", text);
    // Game 2 plays seed 2, on which the game exits: the simulation fails.
    let out = t.run(&["plan", "run", "plan.toml", "--json"]);
    out.code(1);
    assert_eq!(
        crate::support::step(&out.json(), "aggregate")["state"],
        "succeeded",
        "{out}"
    );
    let agg = aggregate_json(&t);
    let sims = agg["simulations"].as_array().expect("simulations");
    assert_eq!(sims.len(), 1, "{agg:#}");
    assert_eq!(sims[0]["step"], "sim");
    assert_eq!(sims[0]["games"], 4);
    assert_eq!(sims[0]["summary"], "steps/sim/summary.json");
    let findings = sims[0]["findings"].as_array().expect("findings");
    let crash = findings
        .iter()
        .find(|f| f["category"] == "crash")
        .expect("the crash");
    let trace = crash["trace"].as_str().expect("a trace");
    assert!(trace.starts_with("steps/sim/traces/"), "{trace}");
    let (file, _game) = trace.split_once("#game-").expect("FILE#game-N");
    assert!(
        t.path(&format!("{}/{file}", run_dir(&t))).is_file(),
        "{trace}"
    );
    let doc = out.json();
    assert_eq!(
        doc["playtest"]["simulations"].as_array().map(Vec::len),
        Some(1),
        "{doc:#}"
    );
    assert!(doc["playtest"]["aggregate"].is_string(), "{doc:#}");
    t.run(&["plan", "run", "plan.toml"])
        .code(1)
        .stdout_has("simulate sim: 4 games")
        .stdout_has("/steps/sim/traces/");
}

/// The cells an aggregate reads are found through the graph, not only its
/// own `needs` (in the default pipeline it needs `deliver`, which needs the
/// cells): here it needs a command step that needs the cells. Its key could
/// not see those cells' results, so it is never reused, and says why.
#[test]
fn the_aggregate_finds_the_cells_through_the_steps_it_needs() {
    let text = plan("[1]", "0").replace(
        "[[steps]]\nid = \"aggregate\"\nkind = \"aggregate\"\nneeds = [\"play\"]",
        "[[steps]]\nid = \"check\"\nkind = \"command\"\nrun = \"true\"\nneeds = [\"play\"]\n\n\
         [[steps]]\nid = \"aggregate\"\nkind = \"aggregate\"\nneeds = [\"check\"]",
    );
    assert!(text.contains("needs = [\"check\"]"));
    let t = Test::new().file("rooms.py", ROOMS).file("plan.toml", text);
    t.run(&["plan", "run", "plan.toml"]).code(0);
    assert_eq!(
        aggregate_json(&t)["cells"].as_array().map(Vec::len),
        Some(4)
    );
    let again = t.run(&["plan", "run", "plan.toml", "--json"]);
    assert_eq!(
        crate::support::step(&again.json(), "aggregate")["state"],
        "succeeded",
        "{again}"
    );
    t.run(&["plan", "explain", "plan.toml"])
        .code(0)
        .stdout_has("it reads `play[kid,standard,1]` through the steps it needs");
}

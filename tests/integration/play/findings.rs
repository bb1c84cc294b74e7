//! One bug is one finding however much gold the
//! player carries into it; every finding line points at the cell that met
//! it first with the commands that replay and shrink its trace; a
//! simulation lists its findings, each with a trace, and its failure line
//! names a trace per finding.

use std::collections::BTreeSet;

use crate::support::Test;

/// A hall with coins and a lamp to pick up, and a vault that shuts behind
/// the player: nothing there changes the observation (the softlock). The
/// vault's text shows the gold and the inventory the player came in with,
/// worded by count ("no gold", "1 gold coin", "3 gold coins").
const VAULT: &str = r#"import json, sys

def obs(s):
    if s["room"] == "hall":
        left = 3 - s["gold"]
        text = "The hall. %d coin%s on the floor." % (left, "" if left == 1 else "s")
        actions = ["east"]
        if left > 0:
            actions.append("take coin")
        if "lamp" not in s["items"]:
            actions.append("take lamp")
    else:
        gold = s["gold"]
        purse = "no gold" if gold == 0 else "%d gold coin%s" % (gold, "" if gold == 1 else "s")
        carry = ", ".join(s["items"]) or "nothing"
        text = ("A sealed vault. The door slammed shut behind you.\n"
                "You carry: %s.\nYou have %s." % (carry, purse))
        actions = ["pound door", "wait"] + (["use lamp"] if "lamp" in s["items"] else [])
    return {"text": text, "actions": actions,
            "state": {"room": s["room"], "gold": s["gold"], "items": list(s["items"])},
            "score": s["gold"] * 10}

s = None
for line in sys.stdin:
    msg = json.loads(line)
    op, i = msg["op"], msg["id"]
    if op == "hello":
        out = {"id": i, "ok": True, "name": "vault", "version": "1", "protocol": 1}
    elif op == "reset":
        s = {"room": "hall", "gold": 0, "items": []}
        out = {"id": i, "ok": True, "observation": obs(s)}
    elif op == "act":
        a = msg["action"]
        if s["room"] == "hall":
            if a == "east":
                s["room"] = "vault"
            elif a == "take coin":
                s["gold"] += 1
            elif a == "take lamp":
                s["items"].append("lamp")
        out = {"id": i, "ok": True, "observation": obs(s), "reward": 0, "done": False, "events": []}
    else:
        out = {"id": i, "ok": True}
    print(json.dumps(out), flush=True)
    if op == "close":
        break
"#;

const VAULT_PLAN: &str = r#"version = 1
name = "vault"

[game]
id = "vault"
command = ["python3", "vault.py"]
stuck_after = 4

[[personas]]
slug = "wanderer"
card = "Picks anything."
patience = 12
player = { kind = "random" }

[[personas]]
slug = "mapper"
card = "Tries what it has not tried."
patience = 12
player = { kind = "explorer" }

[[steps]]
id = "play"
kind = "play"
matrix = { persona = "*", seed = [1, 2, 3, 4, 5, 6] }

[[steps]]
id = "sim"
kind = "simulate"
games = 40
strategies = ["random", "explorer"]
max_steps = 12
"#;

fn stuck(findings: &serde_json::Value) -> Vec<&serde_json::Value> {
    findings
        .as_array()
        .expect("findings")
        .iter()
        .filter(|f| f["category"] == "stuck")
        .collect()
}

/// Item 4: the player walks into the vault with 0 to 3 coins and with or
/// without the lamp, so the vault's text differs from cell to cell and
/// from game to game; still it is one `stuck` finding in play and one in
/// simulate, with the same fingerprint.
#[test]
fn one_softlock_with_a_changing_gold_counter_is_one_finding() {
    let t = Test::new()
        .file("vault.py", VAULT)
        .file("plan.toml", VAULT_PLAN);
    let out = t.run(&["plan", "run", "plan.toml", "--json"]);
    out.code(0);
    let doc = out.json();
    let id = t.run_ids()[0].clone();

    // The softlock was met with different purses and pockets.
    let mut vaults = BTreeSet::new();
    for cell in doc["playtest"]["cells"].as_array().expect("cells") {
        let step = cell["step"].as_str().expect("step");
        let transcript = t.read(&format!(
            ".gameplan/runs/{id}/steps/{step}/transcript.jsonl"
        ));
        for line in transcript.lines() {
            let row: serde_json::Value = serde_json::from_str(line).expect("json line");
            let text = row["observation"]["text"].as_str().unwrap_or_default();
            if text.starts_with("A sealed vault") {
                vaults.insert(text.to_owned());
            }
        }
    }
    assert!(
        vaults.len() >= 3,
        "the test needs the vault met with different gold and items: {vaults:#?}"
    );

    let play = stuck(&doc["playtest"]["findings"]);
    assert_eq!(play.len(), 1, "{:#}", doc["playtest"]["findings"]);
    assert!(
        play[0]["met"].as_u64().unwrap_or_default() >= 3,
        "{:#}",
        play[0]
    );
    let sim = &doc["playtest"]["simulations"][0];
    let simulated = stuck(&sim["findings"]);
    assert_eq!(simulated.len(), 1, "{sim:#}");
    assert!(
        simulated[0]["met"].as_u64().unwrap_or_default() >= 3,
        "{sim:#}"
    );
    assert_eq!(
        simulated[0]["id"], play[0]["id"],
        "the same bug, the same id"
    );

    let summary: serde_json::Value =
        serde_json::from_str(&t.read(&format!(".gameplan/runs/{id}/steps/sim/summary.json")))
            .expect("summary.json");
    assert_eq!(stuck(&summary["findings"]).len(), 1, "{summary:#}");

    // The text summary says it once.
    t.run(&["plan", "run", "plan.toml"])
        .code(0)
        .stdout_has("1 distinct finding\n");
}

/// A game that crashes on `dig` and, for seeds ending in 7, hangs on
/// `wait`; `look` does nothing.
const DIGGER: &str = r#"import json, sys, time

seed = 0
for line in sys.stdin:
    msg = json.loads(line)
    op, i = msg["op"], msg["id"]
    if op == "act" and msg["action"] == "dig":
        sys.stderr.write("Traceback: the shovel broke\n")
        sys.exit(3)
    if op == "act" and msg["action"] == "wait" and seed % 10 == 7:
        time.sleep(60)
    o = {"text": "A field.", "actions": ["look", "wait", "dig"], "state": {}, "score": 0}
    if op == "hello":
        out = {"id": i, "ok": True, "name": "digger", "version": "1", "protocol": 1}
    elif op == "reset":
        seed = msg["seed"]
        out = {"id": i, "ok": True, "observation": o}
    elif op == "act":
        out = {"id": i, "ok": True, "observation": o, "reward": 0, "done": False, "events": []}
    else:
        out = {"id": i, "ok": True}
    print(json.dumps(out), flush=True)
    if op == "close":
        break
"#;

/// Item 5: the careful persona never digs, the reckless one digs second;
/// the crash line names the first reckless cell (not the first cell of the
/// run), and the commands it gives replay and shrink that cell's crash.
#[test]
fn a_finding_line_names_its_first_cell_and_the_commands_that_reproduce_it() {
    let plan = r#"version = 1
name = "dig"

[game]
id = "digger"
command = ["python3", "digger.py"]

[[personas]]
slug = "careful"
card = "Looks, never digs."
player = { kind = "scripted", actions = ["look", "look"] }

[[personas]]
slug = "reckless"
card = "Digs at once."
player = { kind = "scripted", actions = ["look", "dig"] }

[[steps]]
id = "play"
kind = "play"
matrix = { persona = "*", seed = [1, 2] }
"#;
    let t = Test::new()
        .file("digger.py", DIGGER)
        .file("plan.toml", plan);
    let out = t.run(&["plan", "run", "plan.toml"]);
    out.code(0);
    let id = t.run_ids()[0].clone();
    let cell = format!(".gameplan/runs/{id}/steps/play[reckless,1]");
    let trace = format!("{cell}/trace.jsonl");
    out.stdout_has("  critical crash ")
        .stdout_has(&format!(
            "      first in reckless/standard seed 1, and 1 more cell: gameplan replay '{trace}'\n"
        ))
        .stdout_has(&format!(
            "      gameplan shrink '{trace}' --out shrunk.jsonl\n"
        ))
        // The example report is one with the finding in it.
        .stdout_has(&format!("(e.g. {cell}/report.md)"));

    // The commands, as printed, reproduce the crash.
    t.run(&["replay", &trace])
        .code(0)
        .stdout_has("same end `crash`");
    t.run(&["shrink", &trace, "--out", "shrunk.jsonl"]).code(0);
    t.run(&["replay", "shrunk.jsonl"])
        .code(0)
        .stdout_has("same end `crash`");

    // --json says the same, in fields.
    let doc = t
        .run(&["plan", "run", "plan.toml", "--json"])
        .code(0)
        .json();
    let crash = &doc["playtest"]["findings"][0];
    assert_eq!(crash["category"], "crash", "{crash:#}");
    assert_eq!(crash["met"], 2, "{crash:#}");
    assert_eq!(crash["first"]["persona"], "reckless", "{crash:#}");
    assert_eq!(crash["first"]["seed"], 1, "{crash:#}");
    assert_eq!(crash["first"]["step"], "play[reckless,1]", "{crash:#}");
    let trace2 = crash["trace"].as_str().expect("trace");
    assert!(
        trace2.ends_with("steps/play[reckless,1]/trace.jsonl"),
        "{crash:#}"
    );
    assert_eq!(
        crash["replay"],
        format!("gameplan replay '{trace2}'"),
        "{crash:#}"
    );
    assert!(t.path(trace2).is_file(), "{trace2}");
}

/// Item 6: a simulation that meets a crash (seeds that dig) and a rarer
/// hang (seeds ending in 7 that wait) lists both in summary.json and in
/// --json, each with the trace of the first game that met it, says which
/// trace ended how, and its failure line names both traces.
#[test]
fn a_simulation_lists_each_finding_with_a_trace_and_its_failure_names_both() {
    let plan = r#"version = 1
name = "dig"

[game]
id = "digger"
command = ["python3", "digger.py"]
action_timeout = 1

[[steps]]
id = "sim"
kind = "simulate"
games = 20
workers = 2
strategies = ["random"]
max_steps = 30
"#;
    let t = Test::new()
        .file("digger.py", DIGGER)
        .file("plan.toml", plan);
    let out = t.run(&["plan", "run", "plan.toml", "--json"]);
    out.code(1);
    let doc = out.json();
    let id = t.run_ids()[0].clone();
    let dir = format!(".gameplan/runs/{id}/steps/sim");
    let summary: serde_json::Value =
        serde_json::from_str(&t.read(&format!("{dir}/summary.json"))).expect("summary.json");
    let findings = summary["findings"].as_array().expect("findings");
    let by = |category: &str| {
        findings
            .iter()
            .find(|f| f["category"] == category)
            .unwrap_or_else(|| panic!("no {category} in {summary:#}"))
    };
    let (crash, hang) = (by("crash"), by("hang"));
    assert!(
        crash["games"].as_u64().unwrap_or_default() > hang["games"].as_u64().unwrap_or_default(),
        "{summary:#}"
    );
    assert!(
        hang["games"].as_u64().unwrap_or_default() >= 1,
        "{summary:#}"
    );
    for (f, end) in [(crash, "crash"), (hang, "hang")] {
        assert_eq!(f["id"].as_str().map(str::len), Some(16), "{f:#}");
        assert!(!f["title"].as_str().unwrap_or_default().is_empty(), "{f:#}");
        let trace = f["trace"].as_str().expect("a trace");
        // One game's trace in its worker's batch file, opened by its record line.
        let (file, game) = trace.split_once("#game-").expect("FILE#game-N");
        assert_eq!(
            Some(game),
            f["game"].as_u64().map(|g| g.to_string()).as_deref()
        );
        let text = t.read(&format!("{dir}/{file}"));
        let record = text
            .split("{\"simulated_game\":")
            .find(|r| r.starts_with(&format!("{game},")))
            .unwrap_or_else(|| panic!("no record of game {game} in {text}"));
        assert!(
            record
                .trim_end()
                .ends_with(&format!("{{\"end\":\"{end}\"}}")),
            "{trace}: {record}"
        );
        // Which trace ended how.
        assert!(
            summary["traces"]
                .as_array()
                .expect("traces")
                .iter()
                .any(|t| t["path"] == trace && t["end"] == end),
            "{summary:#}"
        );
    }
    assert_eq!(hang["seed"].as_i64().map(|s| s % 10), Some(7), "{hang:#}");

    // --json has the same findings, with the traces' paths in the run.
    let listed = doc["playtest"]["simulations"][0]["findings"]
        .as_array()
        .expect("findings");
    for f in [crash, hang] {
        let line = listed
            .iter()
            .find(|l| l["id"] == f["id"])
            .unwrap_or_else(|| panic!("{f:#} not in {listed:#?}"));
        assert_eq!(line["met"], f["games"]);
        assert_eq!(
            line["trace"],
            format!("{dir}/{}", f["trace"].as_str().unwrap_or_default())
        );
    }

    // The failure line names both traces.
    let message = doc["steps"][0]["message"].as_str().unwrap_or_default();
    for f in [crash, hang] {
        let name = f["trace"]
            .as_str()
            .and_then(|t| t.rsplit('/').next())
            .unwrap_or_default();
        assert!(
            message.contains(&format!(" {name}")),
            "{name} not in {message}"
        );
    }
    assert!(
        message.contains(&format!("traces in {dir}/traces/")),
        "{message}"
    );
    assert!(message.contains("gameplan replay"), "{message}");
}

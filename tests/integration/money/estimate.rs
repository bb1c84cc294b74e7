//! The `estimate` step on the embedded ledger: the price table
//! and where the money is, a no (exit 10), a short balance and a quote over
//! the budget (exit 3), a token missing a scope (exit 4), a game that cannot
//! start (exit 3, with its stderr), reused cells not bought, a yes journaled
//! as the quote `register` buys, and a resume that does not ask again.
//! Every refusal leaves the ledger as it was (`ledger show --json`, and the
//! file byte for byte: an estimate writes nothing).
//!
//! The plans are explicit: `estimate`, then the play cells that need it
//! (the money steps between them, `register` and on, are other kinds').

use serde_json::Value;

use crate::support::{Served, Test};

/// A bridge game whose `MODE` (its `game.env`) says how it behaves: `ok`
/// plays (one room, a few actions, never done), `exit` writes two lines
/// to stderr and exits at once, `silent` reads and never answers.
const TINY: &str = r#"import json, os, sys

mode = os.environ.get("MODE", "ok")
if mode == "exit":
    sys.stderr.write("loading assets from ./missing.pak\n")
    sys.stderr.write("FATAL: asset pack not found\n")
    sys.stderr.flush()
    sys.exit(1)
n = 0
for line in sys.stdin:
    if mode == "silent":
        continue
    msg = json.loads(line)
    op, i = msg["op"], msg["id"]
    if op == "hello":
        out = {"id": i, "ok": True, "name": "tiny", "version": "1", "protocol": 1}
    elif op == "reset":
        n = 0
        out = {"id": i, "ok": True, "observation": {"text": "Room 0", "actions": ["a", "b"], "state": {"n": 0}, "score": 0}}
    elif op == "act":
        n += 1
        out = {"id": i, "ok": True, "reward": 0, "done": False,
               "observation": {"text": "Room %d" % n, "actions": ["a", "b"], "state": {"n": n}, "score": n}}
    else:
        out = {"id": i, "ok": True}
    print(json.dumps(out), flush=True)
    if op == "close":
        break
"#;

/// What a plan varies.
struct Paid {
    seeds: &'static str,
    max_cents: u64,
    /// The token line of `[backend]`, if any (else the demo token).
    token: Option<&'static str>,
    mode: &'static str,
    /// A `gameplan serve` to price at (`http`), else the embedded ledger.
    url: Option<String>,
}

impl Default for Paid {
    fn default() -> Self {
        Paid {
            seeds: "[1]",
            max_cents: 500,
            token: None,
            mode: "ok",
            url: None,
        }
    }
}

/// One persona × two controllers × `seeds`, each cell needing `estimate`.
fn plan(p: &Paid) -> String {
    let token = p
        .token
        .map_or_else(String::new, |t| format!("token = \"{t}\"\n"));
    let backend = p.url.as_ref().map_or_else(
        || "kind = \"local\"".to_owned(),
        |url| format!("kind = \"http\"\nurl = \"{url}\""),
    );
    format!(
        r#"version = 1
name = "paid"
controllers = ["standard", "jev"]

[backend]
{backend}
{token}
[game]
id = "tiny"
command = ["python3", "tiny.py"]
env = {{ MODE = "{mode}" }}
action_timeout = 2

[budget]
max_cents = {max_cents}

[[personas]]
slug = "kid"
card = "Clicks whatever is first."
patience = 3
player = {{ kind = "random" }}

[[steps]]
id = "estimate"
kind = "estimate"

[[steps]]
id = "play"
kind = "play"
needs = ["estimate"]
matrix = {{ persona = "*", controller = "*", seed = {seeds} }}
"#,
        mode = p.mode,
        max_cents = p.max_cents,
        seeds = p.seeds,
    )
}

fn repo(p: &Paid) -> Test {
    Test::new().file("tiny.py", TINY).file("plan.toml", plan(p))
}

/// `ledger show --json` (creating the ledger on first use).
fn ledger(t: &Test) -> Value {
    t.run(&["ledger", "show", "--json"]).code(0).json()
}

/// The ledger file's bytes, read once `ledger show` (and every run) has
/// closed it: an estimate writes nothing, so a refusal after it leaves
/// these bytes as they were.
fn ledger_bytes(t: &Test) -> Vec<u8> {
    std::fs::read(t.path(".gameplan/ledger.sqlite")).expect("the ledger file")
}

/// A new token of `account` holding `scopes`.
fn token(t: &Test, scopes: &str, account: &str) -> String {
    t.run(&["ledger", "token", "--scopes", scopes, "--account", account])
        .code(0)
        .stdout
        .trim()
        .to_owned()
}

const EVERY_SCOPE: &str = "playtest:write,playtest:model,playtest:upload";

/// What a run printed, summary and progress alike.
fn said(out: &crate::support::Output) -> String {
    format!("{}\n{}", out.stdout, out.stderr)
}

/// The `quote` records the newest run journaled.
fn quotes(t: &Test) -> Vec<Value> {
    let id = t.run_ids().pop().expect("a run");
    t.read(&format!(".gameplan/runs/{id}/journal.jsonl"))
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|r| r["event"]["data"].get("quote").cloned())
        .collect()
}

/// The cell ids a quote buys.
fn bought(quote: &Value) -> Vec<String> {
    quote["cells"]
        .as_array()
        .expect("cells")
        .iter()
        .map(|c| c["id"].as_str().expect("id").to_owned())
        .collect()
}

/// Whether the newest run played `cell` (its report exists).
fn played(t: &Test, cell: &str) -> bool {
    let id = t.run_ids().pop().expect("a run");
    t.path(&format!(".gameplan/runs/{id}/steps/{cell}/report.json"))
        .is_file()
}

#[test]
fn estimate_prices_the_cells_and_a_no_without_a_terminal_exits_10_charging_nothing() {
    let t = repo(&Paid::default());
    let before = ledger(&t);
    let bytes = ledger_bytes(&t);
    let out = t.run(&["plan", "run", "plan.toml"]);
    out.code(10);
    let text = said(&out);
    for line in [
        "estimate: 2 cells to buy; short runs",
        "cell (short run)    2 ×   $0.25      $0.50",
        "total $0.50; balance $100.00 (account demo)",
        "money: the embedded demo ledger (.gameplan/ledger.sqlite): no real money moves",
        "declined at the price question ($0.50 for 2 cells). Nothing was charged.",
        "pass --yes",
    ] {
        assert!(text.contains(line), "lacks {line:?}\n{out}");
    }
    assert_eq!(
        ledger_bytes(&t),
        bytes,
        "a no leaves the ledger byte for byte"
    );
    assert_eq!(ledger(&t), before, "a no leaves the ledger as it was");
    assert!(quotes(&t).is_empty(), "a no journals no quote");
    assert!(!played(&t, "play[kid,standard,1]"), "nothing played");
}

#[test]
fn estimate_yes_journals_the_accepted_quote_and_the_cells_play() {
    let t = repo(&Paid::default());
    let before = ledger(&t);
    let out = t.run(&["plan", "run", "plan.toml", "--yes"]);
    out.code(0);
    let quotes = quotes(&t);
    assert_eq!(quotes.len(), 1, "{out}");
    let quote = &quotes[0];
    assert_eq!(quote["game"], "tiny");
    assert_eq!(quote["estimate_cents"], 50);
    assert_eq!(quote["balance_cents"], 10_000);
    assert_eq!(quote["run_length"], "short");
    assert!(
        quote["quote_id"].as_str().is_some_and(|q| !q.is_empty()),
        "{quote}"
    );
    assert_eq!(
        bought(quote),
        ["play[kid,standard,1]", "play[kid,jev,1]"],
        "the cells in plan order"
    );
    assert_eq!(quote["cells"][1]["persona"], "kid");
    assert_eq!(quote["cells"][1]["controller"], "jev");
    assert!(played(&t, "play[kid,jev,1]"), "{out}");
    // A price is not a charge: only `register` moves money.
    assert_eq!(ledger(&t), before);
}

#[test]
fn estimate_a_short_balance_exits_3_before_the_question() {
    let t = repo(&Paid {
        token: Some("{{ secret('STUDIO_TOKEN') }}"),
        ..Paid::default()
    });
    let poor = token(&t, EVERY_SCOPE, "poor");
    let t = t.env("STUDIO_TOKEN", &poor);
    let before = ledger(&t);
    let bytes = ledger_bytes(&t);
    let out = t.run(&["plan", "run", "plan.toml", "--yes"]);
    out.code(3);
    let text = said(&out);
    for line in [
        "total $0.50; balance $0.00 (account poor)",
        "money: the embedded ledger (.gameplan/ledger.sqlite)",
        "the quote $0.50 is above the balance of account `poor` ($0.00). Nothing was charged.",
        "gameplan ledger topup poor 50",
    ] {
        assert!(text.contains(line), "lacks {line:?}\n{out}");
    }
    assert!(!text.contains("demo ledger"), "{out}");
    assert!(!text.contains(&poor), "the token is printed\n{out}");
    assert_eq!(ledger_bytes(&t), bytes, "byte for byte");
    assert_eq!(ledger(&t), before);
    assert!(quotes(&t).is_empty());
    assert!(!played(&t, "play[kid,standard,1]"));
}

#[test]
fn estimate_a_quote_over_the_budget_exits_3_before_the_question() {
    let t = repo(&Paid {
        max_cents: 30,
        ..Paid::default()
    });
    let before = ledger(&t);
    let bytes = ledger_bytes(&t);
    let out = t.run(&["plan", "run", "plan.toml", "--yes"]);
    out.code(3);
    let text = said(&out);
    assert!(
        text.contains(
            "the quote $0.50 for 2 cells is above budget.max_cents ($0.30). Nothing was charged."
        ),
        "{out}"
    );
    assert!(text.contains("Raise `[budget] max_cents`"), "{out}");
    assert_eq!(ledger_bytes(&t), bytes, "byte for byte");
    assert_eq!(ledger(&t), before);
    assert!(quotes(&t).is_empty());
    assert!(!played(&t, "play[kid,standard,1]"));
}

#[test]
fn estimate_a_token_missing_a_scope_exits_4_with_nothing_priced() {
    let t = repo(&Paid {
        token: Some("{{ secret('STUDIO_TOKEN') }}"),
        ..Paid::default()
    });
    let partial = token(&t, "playtest:write,playtest:upload", "studio");
    let t = t.env("STUDIO_TOKEN", &partial);
    let before = ledger(&t);
    let bytes = std::fs::read(t.path(".gameplan/ledger.sqlite")).expect("ledger");
    let out = t.run(&["plan", "run", "plan.toml", "--yes"]);
    out.code(4);
    let text = said(&out);
    for line in [
        "the token of account `studio` lacks the scope playtest:model",
        "Nothing was priced or charged.",
        "gameplan ledger token --scopes playtest:write,playtest:model,playtest:upload --account studio",
    ] {
        assert!(text.contains(line), "lacks {line:?}\n{out}");
    }
    assert!(!text.contains("cells to buy"), "nothing was priced\n{out}");
    assert_eq!(ledger(&t), before);
    assert_eq!(
        std::fs::read(t.path(".gameplan/ledger.sqlite")).expect("ledger"),
        bytes,
        "a refused token leaves the ledger byte for byte"
    );
    assert!(!played(&t, "play[kid,standard,1]"));

    // A token the ledger does not know: exit 4 too, saying how to make one.
    let t = t.env("STUDIO_TOKEN", "gp_not_a_token_of_this_ledger");
    let out = t.run(&["plan", "run", "plan.toml", "--yes", "--new"]);
    out.code(4);
    let text = said(&out);
    assert!(
        text.contains("checking the token: the backend refused (unauthorized)"),
        "{out}"
    );
    assert!(text.contains("Nothing was priced or charged."), "{out}");
    assert!(
        text.contains(
            "gameplan ledger token --scopes playtest:write,playtest:model,playtest:upload"
        ),
        "{out}"
    );
    assert_eq!(ledger(&t), before);
}

#[test]
fn estimate_a_game_that_cannot_start_exits_3_with_its_stderr_and_charges_nothing() {
    let t = repo(&Paid {
        mode: "exit",
        ..Paid::default()
    });
    let before = ledger(&t);
    let bytes = std::fs::read(t.path(".gameplan/ledger.sqlite")).expect("ledger");
    let out = t.run(&["plan", "run", "plan.toml", "--yes"]);
    out.code(3);
    let text = said(&out);
    for line in [
        "the game did not start: ",
        "Nothing was charged",
        "loading assets from ./missing.pak",
        "FATAL: asset pack not found",
        "`gameplan play --out DIR -- python3 tiny.py` tries it alone",
    ] {
        assert!(text.contains(line), "lacks {line:?}\n{out}");
    }
    assert!(!text.contains("cells to buy"), "nothing was priced\n{out}");
    assert_eq!(ledger(&t), before);
    assert_eq!(
        std::fs::read(t.path(".gameplan/ledger.sqlite")).expect("ledger"),
        bytes,
        "the smoke check comes before any price: the ledger is untouched"
    );
    assert!(quotes(&t).is_empty());
    assert!(!played(&t, "play[kid,standard,1]"));

    // A game that never answers `hello`: stopped at the action timeout.
    t.write(
        "plan.toml",
        plan(&Paid {
            mode: "silent",
            ..Paid::default()
        }),
    );
    let out = t.run(&["plan", "run", "plan.toml", "--yes", "--new"]);
    out.code(3);
    let text = said(&out);
    assert!(text.contains("the game did not start: "), "{out}");
    assert!(text.contains("did the game flush stdout?"), "{out}");
    assert!(out.elapsed < std::time::Duration::from_secs(30), "{out}");
    assert_eq!(ledger(&t), before);
}

#[test]
fn estimate_does_not_buy_reused_cells_and_asks_nothing_when_all_are() {
    let t = repo(&Paid::default());
    t.run(&["plan", "run", "plan.toml", "--yes"]).code(0);
    assert_eq!(bought(&quotes(&t)[0]).len(), 2);

    // Another seed: seed 1's two cells are stored and reused, not bought.
    t.write(
        "plan.toml",
        plan(&Paid {
            seeds: "[1, 2]",
            ..Paid::default()
        }),
    );
    let out = t.run(&["plan", "run", "plan.toml", "--yes"]);
    out.code(0);
    assert!(
        said(&out).contains("estimate: 2 cells to buy, 2 reused (not bought); short runs"),
        "{out}"
    );
    assert!(said(&out).contains("2 ×   $0.25      $0.50"), "{out}");
    let quotes_now = quotes(&t);
    assert_eq!(
        bought(&quotes_now[0]),
        ["play[kid,standard,2]", "play[kid,jev,2]"],
        "only the cells that run are bought"
    );
    assert_eq!(quotes_now[0]["estimate_cents"], 50);

    // Everything stored: nothing to buy, so no question (no --yes needed)
    // and a quote of no cells for the money steps below.
    let before = ledger(&t);
    let out = t.run(&["plan", "run", "plan.toml"]);
    out.code(0);
    assert!(
        said(&out).contains("estimate: nothing needs buying: all 4 cells are reused"),
        "{out}"
    );
    assert!(!said(&out).contains("cells to buy"), "{out}");
    let quotes_now = quotes(&t);
    assert_eq!(quotes_now.len(), 1);
    assert!(bought(&quotes_now[0]).is_empty());
    assert_eq!(quotes_now[0]["estimate_cents"], 0);
    assert_eq!(ledger(&t), before);
}

#[test]
fn estimate_a_resume_after_the_quote_was_journaled_does_not_ask_again() {
    let t = repo(&Paid::default()).env("GAMEPLAN_CRASH_AT", "estimate:response_journaled");
    let mut crashed = t.spawn(&["plan", "run", "plan.toml", "--yes"]);
    crate::support::wait_until(
        "gameplan to stop at the crash point",
        std::time::Duration::from_secs(60),
        || !crashed.is_running(),
    );
    let out = crashed.kill9();
    assert_eq!(out.code, None, "killed at the crash point\n{out}");
    assert_eq!(quotes(&t).len(), 1, "the yes was journaled before the kill");

    // No --yes and no terminal: a question would be a no (exit 10).
    let t = t.without_env("GAMEPLAN_CRASH_AT");
    let out = t.run(&["plan", "resume"]);
    out.code(0);
    assert!(
        said(&out).contains("the price was accepted before the run stopped ($0.50 for 2 cells)"),
        "{out}"
    );
    assert!(played(&t, "play[kid,jev,1]"), "{out}");
}

#[test]
fn estimate_prices_and_refuses_the_same_over_gameplan_serve() {
    let t = Test::new().file("tiny.py", TINY);
    let served = Served::start(&t);
    let token_of = |scopes: &str, account: &str| {
        t.run(&[
            "ledger",
            "token",
            "--scopes",
            scopes,
            "--account",
            account,
            "--db",
            "served.sqlite",
        ])
        .code(0)
        .stdout
        .trim()
        .to_owned()
    };
    let demo = token_of(EVERY_SCOPE, "demo");
    let poor = token_of(EVERY_SCOPE, "poor");
    let partial = token_of("playtest:write", "studio");
    t.write(
        "plan.toml",
        plan(&Paid {
            token: Some("{{ secret('STUDIO_TOKEN') }}"),
            url: Some(served.url.clone()),
            ..Paid::default()
        }),
    );
    let before = served.ledger(&t);

    let t = t.env("STUDIO_TOKEN", &demo);
    let out = t.run(&["plan", "run", "plan.toml"]);
    out.code(10);
    let text = said(&out);
    assert!(
        text.contains("total $0.50; balance $100.00 (account demo)"),
        "{out}"
    );
    assert!(
        text.contains(&format!("money: the backend at {}", served.url)),
        "{out}"
    );
    assert!(text.contains("Nothing was charged."), "{out}");
    assert_eq!(served.ledger(&t), before);

    let t = t.env("STUDIO_TOKEN", &poor);
    let out = t.run(&["plan", "run", "plan.toml", "--yes", "--new"]);
    out.code(3);
    assert!(
        said(&out).contains("the quote $0.50 is above the balance of account `poor` ($0.00)"),
        "{out}"
    );
    assert!(said(&out).contains("Ask the server's operator"), "{out}");

    let t = t.env("STUDIO_TOKEN", &partial);
    let out = t.run(&["plan", "run", "plan.toml", "--yes", "--new"]);
    out.code(4);
    assert!(
        said(&out).contains("lacks the scopes playtest:model, playtest:upload"),
        "{out}"
    );
    assert_eq!(served.ledger(&t), before, "no refusal moved money");

    let t = t.env("STUDIO_TOKEN", &demo);
    t.run(&["plan", "run", "plan.toml", "--yes", "--new"])
        .code(0);
    assert_eq!(bought(&quotes(&t)[0]).len(), 2);
    for secret in [&demo, &poor, &partial] {
        let journal = t.read(&format!(
            ".gameplan/runs/{}/journal.jsonl",
            t.run_ids().pop().expect("a run")
        ));
        assert!(
            !journal.contains(secret.as_str()),
            "a token is in the journal"
        );
    }
}

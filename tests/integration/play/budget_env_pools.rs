//! What the manual (docs/play.md) says of play that no test held before:
//! a cell ending on its budget, what reaches the game's environment,
//! `[pools] play` bounding game processes, simulate failing on a hang, a
//! plan's `action_timeout` and `stuck_after`, the `no_actions` and
//! `script_end` ends, `shrink --time-limit`, one cell run by its id; and
//! item 9's command-line nits (`gameplan play`, counts, the pool cap line,
//! the bridge page).
//!
//! Every game here is a small Python program with no trap (nothing stays
//! the same unless a test asks for it), so what ends a cell is what the test
//! is about.

use std::path::Path;
use std::time::Duration;

use crate::support::{Test, by_step};

/// A game whose every action changes the observation (a counter), with
/// behaviour switched on by its arguments:
/// `delay=S` sleeps S seconds per action; `env` writes its environment to
/// `seen_env.json` on start; `spans` writes its start and end times to
/// `spans/<pid>`; `still`: `wait` and `go` change nothing; `slow`: the action `slow`
/// takes 2.5 s; `freeze`: the action `freeze` is never answered; `boom`:
/// the action `boom` kills the game (with `late=N`, only after N other
/// actions); `noactions`: after one action nothing is offered.
const GAME: &str = r#"import json, os, sys, time
args = sys.argv[1:]
delay = float(next((a[6:] for a in args if a.startswith("delay=")), "0"))
late = int(next((a[5:] for a in args if a.startswith("late=")), "0"))
if "env" in args:
    with open("seen_env.json", "w") as f:
        json.dump(dict(os.environ), f)
span = None
if "spans" in args:
    os.makedirs("spans", exist_ok=True)
    span = "spans/%d" % os.getpid()
    with open(span, "w") as f:
        f.write("%f\n" % time.time())
n = 0
def obs():
    actions = ["wait", "go"]
    for extra in ("slow", "freeze", "boom"):
        if extra in args:
            actions.append(extra)
    if "noactions" in args and n >= 1:
        actions = []
    return {"text": "room", "actions": actions, "state": {"n": n}, "score": 0}
for line in sys.stdin:
    req = json.loads(line)
    rid, op = req["id"], req["op"]
    if op == "hello":
        reply = {"id": rid, "ok": True, "name": "gaps", "version": "1", "protocol": 1}
    elif op == "reset":
        n = 0
        reply = {"id": rid, "ok": True, "observation": obs()}
    elif op == "act":
        action = req["action"]
        time.sleep(delay)
        if action == "slow":
            time.sleep(2.5)
        if action == "freeze":
            time.sleep(1000)
        if action == "boom" and n >= late:
            sys.exit(5)
        if not (action in ("wait", "go") and "still" in args):
            n += 1
        reply = {"id": rid, "ok": True, "observation": obs(), "reward": 0, "done": False,
                 "events": []}
    else:
        if span:
            with open(span, "a") as f:
                f.write("%f\n" % time.time())
        print(json.dumps({"id": rid, "ok": True}), flush=True)
        break
    print(json.dumps(reply), flush=True)
"#;

/// A plan playing `game.py ARGS` with one step `play`; `game` lines go into
/// `[game]`, `tables` after it (`[budget]`, `[pools]`), `personas` replace
/// the one explorer, `matrix` is the play step's.
struct Plan<'a> {
    args: &'a str,
    game: &'a str,
    tables: &'a str,
    personas: &'a str,
    matrix: &'a str,
}

const EXPLORER: &str = r#"[[personas]]
slug = "p"
card = "Tries everything."
player = { kind = "explorer" }
patience = 1000
"#;

impl Default for Plan<'_> {
    fn default() -> Self {
        Plan {
            args: "",
            game: "",
            tables: "",
            personas: EXPLORER,
            matrix: r#"{ persona = "*", controller = "*", seed = [1] }"#,
        }
    }
}

impl Plan<'_> {
    fn text(&self) -> String {
        let args: String = self
            .args
            .split_whitespace()
            .flat_map(|a| [", \"", a, "\""])
            .collect();
        format!(
            "version = 1\nname = \"gaps\"\ncontrollers = [\"standard\"]\n\n\
             [game]\nid = \"gaps\"\ncommand = [\"python3\", \"game.py\"{args}]\n{}\n\n{}\n\n{}\n\
             [[steps]]\nid = \"play\"\nkind = \"play\"\nmatrix = {}\n",
            self.game, self.tables, self.personas, self.matrix
        )
    }

    fn repo(&self) -> Test {
        Test::new()
            .file("game.py", GAME)
            .file("plan.toml", self.text())
    }
}

/// The report.json of every cell of a `plan run --json` document.
fn cell_reports(t: &Test, doc: &serde_json::Value) -> Vec<serde_json::Value> {
    doc["playtest"]["cells"]
        .as_array()
        .unwrap_or_else(|| panic!("no playtest cells in {doc:#}"))
        .iter()
        .map(|cell| {
            let md = cell["report"].as_str().expect("report path");
            let json = md.replace("report.md", "report.json");
            serde_json::from_str(&t.read(&json))
                .unwrap_or_else(|e| panic!("no {json} ({e}) for {cell:#}"))
        })
        .collect()
}

/// Runs the plan; its one cell's report.json.
#[track_caller]
fn one_cell(t: &Test) -> serde_json::Value {
    let out = t.run(&["plan", "run", "plan.toml", "--json"]);
    out.code(0);
    let mut reports = cell_reports(t, &out.json());
    assert_eq!(reports.len(), 1, "{out}");
    reports.remove(0)
}

#[test]
fn budget_max_actions_ends_a_cell_on_budget() {
    let t = Plan {
        tables: "[budget]\nmax_actions = 5",
        ..Plan::default()
    }
    .repo();
    let report = one_cell(&t);
    assert_eq!(report["quit_reason"], "budget", "{report:#}");
    assert_eq!(report["actions_taken"], 5, "{report:#}");
    assert_eq!(report["findings"], serde_json::json!([]), "{report:#}");
}

#[test]
fn budget_max_wall_seconds_ends_a_cell_on_budget() {
    // 0.2 s an action, 1000 patience and no action bound: only the clock
    // ends this cell, after about five actions.
    let t = Plan {
        args: "delay=0.2",
        tables: "[budget]\nmax_wall_seconds = 1",
        ..Plan::default()
    }
    .repo();
    let report = one_cell(&t);
    assert_eq!(report["quit_reason"], "budget", "{report:#}");
    // At most five actions fit in the second (none, on a machine so busy
    // that starting the game took it all).
    let taken = report["actions_taken"].as_u64().expect("actions_taken");
    assert!(taken <= 6, "{report:#}");
}

#[test]
fn game_env_home_and_tmpdir_reach_the_game_and_nothing_else_does() {
    let home = tempfile::tempdir().expect("home");
    let tmp = tempfile::tempdir().expect("tmp");
    let home_dir = home.path().to_str().expect("utf8");
    let tmp_dir = tmp.path().to_str().expect("utf8");
    let t = Plan {
        args: "env",
        game: "env = { LEVEL = \"castle\", DEBUG_DRAW = \"1\" }",
        tables: "[budget]\nmax_actions = 1",
        ..Plan::default()
    }
    .repo()
    .env("HOME", home_dir)
    .env("TMPDIR", tmp_dir)
    .env("LANG", "C.UTF-8")
    .env("SECRET_TOKEN", "do-not-leak")
    .env("CI", "true");
    one_cell(&t);
    let seen: serde_json::Value =
        serde_json::from_str(&t.read("seen_env.json")).expect("the game wrote its environment");
    assert_eq!(seen["LEVEL"], "castle", "{seen:#}");
    assert_eq!(seen["DEBUG_DRAW"], "1", "{seen:#}");
    assert_eq!(seen["HOME"], home_dir, "{seen:#}");
    assert_eq!(seen["TMPDIR"], tmp_dir, "{seen:#}");
    assert_eq!(seen["LANG"], "C.UTF-8", "{seen:#}");
    for absent in [
        "SECRET_TOKEN",
        "CI",
        "NO_COLOR",
        "GAMEPLAN_RUN_ID",
        "GAMEPLAN_STEP",
    ] {
        assert!(
            seen.get(absent).is_none(),
            "{absent} reached the game: {seen:#}"
        );
    }
}

/// The (start, end) of every game process the run started, from `spans/`.
fn spans(t: &Test) -> Vec<(f64, f64)> {
    let mut spans: Vec<(f64, f64)> = std::fs::read_dir(t.path("spans"))
        .expect("the games wrote spans/")
        .flatten()
        .map(|e| {
            let text = std::fs::read_to_string(e.path()).expect("span");
            let times: Vec<f64> = text.lines().map(|l| l.parse().expect("a time")).collect();
            assert_eq!(times.len(), 2, "a game's start and end: {text}");
            (times[0], times[1])
        })
        .collect();
    spans.sort_by(|a, b| a.0.total_cmp(&b.0));
    spans
}

fn overlapping(spans: &[(f64, f64)]) -> bool {
    spans.windows(2).any(|w| w[1].0 < w[0].1)
}

#[test]
fn pools_play_bounds_the_game_processes_at_once() {
    let plan = |pool: &str| {
        Plan {
            args: "spans delay=0.05",
            tables: &format!("[budget]\nmax_actions = 8\n\n[pools]\nplay = {pool}"),
            matrix: r#"{ persona = "*", controller = "*", seed = [1, 2, 3, 4] }"#,
            ..Plan::default()
        }
        .text()
    };
    let t = Test::new()
        .file("game.py", GAME)
        .file("plan.toml", plan("1"));
    t.run(&["plan", "run", "plan.toml", "--concurrency", "4"])
        .code(0);
    let one = spans(&t);
    assert_eq!(one.len(), 4, "{one:?}");
    assert!(!overlapping(&one), "play = 1 ran games at once: {one:?}");

    std::fs::remove_dir_all(t.path("spans")).expect("rm spans");
    t.write("plan.toml", plan("4"));
    t.run(&[
        "plan",
        "run",
        "plan.toml",
        "--concurrency",
        "4",
        "--no-reuse",
    ])
    .code(0);
    let four = spans(&t);
    assert_eq!(four.len(), 4, "{four:?}");
    assert!(
        overlapping(&four),
        "play = 4 ran one game at a time: {four:?}"
    );
}

#[test]
fn simulate_fails_on_a_game_that_hangs_on_one_action() {
    let plan = r#"version = 1
name = "hang"

[game]
id = "gaps"
command = ["python3", "game.py", "freeze"]
action_timeout = 1

[[steps]]
id = "mechanics"
kind = "simulate"
games = 3
strategies = ["random"]
workers = 1
max_steps = 30
"#;
    let t = Test::new().file("game.py", GAME).file("plan.toml", plan);
    let out = t.run(&["plan", "run", "plan.toml", "--json"]);
    out.code(1);
    let doc = out.json();
    assert_eq!(by_step(&doc, "state")["mechanics"], "failed", "{out}");
    let run = doc["run_id"].as_str().expect("run_id");
    let traces = t.path(&format!(".gameplan/runs/{run}/steps/mechanics/traces"));
    // The index lists every traced game with how it ended; each game's
    // record in the batch file closes with that end.
    let index = std::fs::read_to_string(traces.join("index.jsonl"))
        .unwrap_or_else(|e| panic!("no index in {} ({e})\n{out}", traces.display()));
    let batch = std::fs::read_to_string(traces.join("batch-0.jsonl")).expect("batch");
    let ends: Vec<String> = batch
        .lines()
        .filter(|l| l.starts_with("{\"end\""))
        .map(str::to_owned)
        .collect();
    assert_eq!(index.lines().count(), ends.len(), "{index}");
    assert!(
        index.lines().all(|l| l.contains("\"end\":\"hang\"")),
        "{index}"
    );
    assert!(!ends.is_empty(), "{out}");
    assert!(
        ends.iter().all(|end| end == "{\"end\":\"hang\"}"),
        "every failed game hung, none crashed: {ends:?}"
    );
}

#[test]
fn a_plans_action_timeout_takes_effect() {
    // `slow` takes 2.5 s: no hang under the default 10 s, a hang under 1 s.
    let t = Plan {
        args: "slow",
        game: "action_timeout = 1",
        personas: r#"[[personas]]
slug = "p"
card = "Presses slow."
player = { kind = "scripted", actions = ["slow", "go"] }
"#,
        ..Plan::default()
    }
    .repo();
    let started = std::time::Instant::now();
    let report = one_cell(&t);
    assert_eq!(report["quit_reason"], "hang", "{report:#}");
    let hang = &report["findings"][0];
    assert_eq!(hang["category"], "hang", "{report:#}");
    assert!(
        hang["title"]
            .as_str()
            .is_some_and(|t| t.contains("within 1.0 s")),
        "{hang:#}"
    );
    assert!(started.elapsed() < Duration::from_secs(20));
}

#[test]
fn a_plans_stuck_after_takes_effect() {
    // Nothing changes: after 3 actions (the default 8 would never ask) the
    // room is a question, and once the script tried its other offered
    // action, `go`, too (gameplan tries nothing amid a script), it is
    // `stuck` at that 4th action.
    let t = Plan {
        args: "still",
        game: "stuck_after = 3",
        personas: r#"[[personas]]
slug = "p"
card = "Waits."
player = { kind = "scripted", actions = ["wait", "wait", "wait", "go", "wait"] }
"#,
        ..Plan::default()
    }
    .repo();
    let out = t.run(&["plan", "run", "plan.toml", "--json"]);
    out.code(0);
    let doc = out.json();
    let report = cell_reports(&t, &doc).remove(0);
    let stuck: Vec<&serde_json::Value> = report["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter(|f| f["category"] == "stuck")
        .collect();
    assert_eq!(stuck.len(), 1, "one stuck finding: {report:#}");
    assert_eq!(stuck[0]["evidence"]["step"], 4, "{report:#}");
    let md = doc["playtest"]["cells"][0]["report"]
        .as_str()
        .expect("report path");
    let transcript = t.read(&md.replace("report.md", "transcript.jsonl"));
    let fourth = transcript
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|row| row["step"] == 4 && row.get("action").is_some())
        .expect("a 4th action");
    assert_eq!(fourth["action"], "go", "{transcript}");
    assert!(fourth.get("by").is_none(), "the script's own: {transcript}");
}

#[test]
fn a_game_that_offers_nothing_ends_the_cell_no_actions() {
    let t = Plan {
        args: "noactions",
        ..Plan::default()
    }
    .repo();
    let report = one_cell(&t);
    assert_eq!(report["quit_reason"], "no_actions", "{report:#}");
    assert_eq!(report["actions_taken"], 1, "{report:#}");
}

#[test]
fn a_scripted_player_out_of_actions_ends_the_cell_script_end() {
    let t = Plan {
        personas: r#"[[personas]]
slug = "p"
card = "Follows the script."
player = { kind = "scripted", actions = ["go", "wait"] }
"#,
        ..Plan::default()
    }
    .repo();
    let report = one_cell(&t);
    assert_eq!(report["quit_reason"], "script_end", "{report:#}");
    assert_eq!(report["actions_taken"], 2, "{report:#}");
    let run = t.run(&["plan", "run", "plan.toml", "--json", "--no-reuse"]);
    let md = run.json()["playtest"]["cells"][0]["report"]
        .as_str()
        .expect("report")
        .replace("report.md", "trace.jsonl");
    assert!(
        t.read(&md).ends_with("{\"end\":\"script_end\"}\n"),
        "{}",
        t.read(&md)
    );
}

#[test]
fn shrink_stops_near_its_time_limit_and_says_so() {
    // 40 `wait`s then `boom`, which crashes only after 40 actions: nothing
    // can be cut, so the search tries every chunking (minutes of 1-2 s
    // runs at 0.05 s an action) unless the limit stops it.
    let t = Test::new().file("game.py", GAME);
    let mut args = vec!["play", "--player", "scripted", "--patience", "100"];
    args.extend(std::iter::repeat_n(["--action", "wait"], 40).flatten());
    args.extend([
        "--action",
        "boom",
        "--out",
        "long",
        "--",
        "python3",
        "game.py",
        "boom",
        "late=40",
        "delay=0.05",
    ]);
    t.run(&args).code(0);
    assert!(
        t.read("long/trace.jsonl")
            .ends_with("{\"end\":\"crash\"}\n")
    );
    let limit = 3;
    let out = t.run(&[
        "shrink",
        "long/trace.jsonl",
        "--out",
        "short.jsonl",
        "--time-limit",
        &limit.to_string(),
    ]);
    out.code(0)
        .stdout_has("the time limit cut the search short");
    // The limit, plus the one run in flight when it passed, plus start-up.
    assert!(
        out.elapsed < Duration::from_secs(limit + 3 + 6),
        "shrink ran {:?} with a {limit} s limit\n{out}",
        out.elapsed
    );
    let short = t.read("short.jsonl");
    assert!(short.ends_with("{\"end\":\"crash\"}\n"), "{short}");
}

#[test]
fn plan_run_with_a_cell_id_plays_only_that_cell() {
    let t = Plan {
        personas: r#"[[personas]]
slug = "a"
card = "One."
player = { kind = "explorer" }
patience = 3

[[personas]]
slug = "b"
card = "Two."
player = { kind = "random" }
patience = 3
"#,
        matrix: r#"{ persona = "*", controller = "*", seed = [1, 2] }"#,
        ..Plan::default()
    }
    .repo();
    let out = t.run(&["plan", "run", "plan.toml", "play[b,standard,2]", "--json"]);
    out.code(0);
    let doc = out.json();
    let states = by_step(&doc, "state");
    assert_eq!(
        states.keys().collect::<Vec<_>>(),
        ["play[b,standard,2]"],
        "{out}"
    );
    let reports = cell_reports(&t, &doc);
    assert_eq!(reports.len(), 1, "{out}");
    assert_eq!(reports[0]["persona"], "b");
    assert_eq!(reports[0]["seed"], 2);
    let run = doc["run_id"].as_str().expect("run_id");
    let cells: Vec<String> = std::fs::read_dir(t.path(&format!(".gameplan/runs/{run}/steps")))
        .expect("steps dir")
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    assert_eq!(cells, ["play[b,standard,2]"], "only that cell played");
}

#[test]
fn a_pool_wider_than_the_concurrency_says_it_is_capped() {
    let t = Plan {
        tables: "[budget]\nmax_actions = 1\n\n[pools]\nplay = 8",
        ..Plan::default()
    }
    .repo();
    t.run(&["plan", "run", "plan.toml", "--concurrency", "2"])
        .code(0)
        .stderr_has("pools.play = 8 is capped at 2 at once (--concurrency 2)");
    let out = t.run(&["plan", "run", "plan.toml", "--concurrency", "8"]);
    out.code(0);
    assert!(!out.stderr.contains("capped"), "{out}");
}

#[test]
fn play_is_a_public_command_with_help_and_counts_agree_in_number() {
    let t = Test::new().file("game.py", GAME);
    t.run(&["--help"])
        .code(0)
        .stdout_has("play         Play one cell of a game");
    let help = t.run(&["play", "--help"]);
    help.code(0)
        .stdout_has("docs/bridge.md")
        .stdout_has("Actions before the persona gives up");
    t.run(&["man", "--out", "man"]).code(0);
    assert!(t.path("man/gameplan-play.1").is_file());
    t.run(&["shrink", "--help"])
        .code(0)
        .stdout_has("The trace.jsonl to shrink");
    t.run(&["game", "--help"])
        .code(0)
        .stdout_has("docs/bridge.md");

    t.run(&[
        "play", "--player", "scripted", "--action", "go", "--out", "one", "--", "python3",
        "game.py",
    ])
    .code(0);
    t.run(&["replay", "one/trace.jsonl"])
        .code(0)
        .stdout_has("confirmed: 1 step, ");
}

/// The bridge page is in the repo, and nothing a user reads points at a
/// design file their checkout does not have.
#[test]
fn the_bridge_contract_is_a_page_of_the_project() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let page = std::fs::read_to_string(repo.join("docs/bridge.md")).expect("docs/bridge.md");
    for needle in [
        "\"op\":\"hello\"",
        "\"op\":\"reset\"",
        "\"op\":\"act\"",
        "\"op\":\"close\"",
        "action_timeout",
        "stuck_after",
        "## Common mistakes",
        "flush=True",
        "python3 -u",
        "stderr",
    ] {
        assert!(page.contains(needle), "docs/bridge.md lacks {needle:?}");
    }
    for file in ["README.md", "examples/games/README.md", "docs/bridge.md"] {
        let text = std::fs::read_to_string(repo.join(file)).expect(file);
        assert!(
            !text.contains(concat!("DESIGN", ".md")) && !text.contains("shared/"),
            "{file} points at a file users do not have"
        );
    }
    let readme = std::fs::read_to_string(repo.join("examples/games/README.md")).expect("readme");
    assert!(readme.contains("docs/bridge.md"));
    assert!(
        !readme.contains("__play"),
        "the hidden name is not documented"
    );
}

/// The actions of a cell's trace, in order.
fn actions_of(t: &Test, cell: &serde_json::Value) -> Vec<String> {
    let trace = t.read(cell["trace"].as_str().expect("trace path"));
    trace
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|l| l["action"].as_str().map(str::to_owned))
        .collect()
}

/// A newcomer gave two random personas their own `seed` and a matrix
/// `seed` axis, and both played exactly alike: the persona's seed was
/// dropped. It now seeds the player (mixed with the cell's game seed), so
/// personas that differ only in `seed` play the same game seed differently,
/// and the same seed plays alike.
#[test]
fn a_personas_own_seed_seeds_its_player_beside_a_seed_axis() {
    let personas = |seed_b: u32| {
        format!(
            "[[personas]]\nslug = \"a\"\ncard = \"One.\"\nplayer = {{ kind = \"random\", seed = 3 }}\n\
             patience = 16\n\n[[personas]]\nslug = \"b\"\ncard = \"Two.\"\n\
             player = {{ kind = \"random\", seed = {seed_b} }}\npatience = 16\n"
        )
    };
    for (seed_b, alike) in [(4, false), (3, true)] {
        let text = personas(seed_b);
        let t = Plan {
            personas: &text,
            ..Plan::default()
        }
        .repo();
        let out = t.run(&["plan", "run", "plan.toml", "--json"]);
        out.code(0);
        let doc = out.json();
        let cells = doc["playtest"]["cells"].as_array().expect("cells").clone();
        assert_eq!(cells.len(), 2, "{out}");
        let (a, b) = (actions_of(&t, &cells[0]), actions_of(&t, &cells[1]));
        assert_eq!(a.len(), 16, "{a:?}");
        assert_eq!(a == b, alike, "seed 3 vs {seed_b}: {a:?} / {b:?}");
    }
}

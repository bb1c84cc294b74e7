//! Hermetic web cells, in real headless Chromium through real
//! chromedriver: every reset starts from a clean origin, the page's clock
//! is virtual and started from the seed, sound may play without a
//! gesture, the page's inner size is the viewport, a slow page load is not
//! a hang, and what broke is named (a request's URL and status, the outside
//! script behind an error, one finding per cause). Pages written for the
//! mechanics are under tests/fixtures/web-hermetic/site/; published games,
//! vendored unchanged, under tests/fixtures/web-games/.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::support::Test;

/// `test` with every file under the repo directory `from` at `to`.
fn with_dir(mut test: Test, from: &str, to: &str) -> Test {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join(from);
    for entry in walkdir::WalkDir::new(&root) {
        let entry = entry.expect("walk");
        if entry.file_type().is_file() {
            let rel = entry.path().strip_prefix(&root).expect("under the dir");
            let bytes = std::fs::read(entry.path()).expect("read");
            let at = Path::new(to).join(rel);
            test = test.file(at.to_str().expect("utf-8"), bytes);
        }
    }
    test
}

/// A repo serving the fixture site at `site/`, with a plan of one scripted
/// cell opening `page` and taking `actions`; `extra` goes into `[game]`.
fn fixture(page: &str, actions: &str, extra: &str) -> Test {
    let plan = format!(
        "version = 1\nname = \"hermetic\"\n\n[game]\nid = \"hermetic\"\ndriver = \"webdriver\"\n\
         serve = \"site\"\nurl = \"{page}\"\n{extra}\n\n[[personas]]\nslug = \"player\"\n\
         card = \"Plays.\"\nplayer = {{ kind = \"scripted\", actions = {actions} }}\n\n\
         [[steps]]\nid = \"play\"\nkind = \"play\"\nmatrix = {{ persona = \"*\" }}\n"
    );
    with_dir(Test::new(), "tests/fixtures/web-hermetic/site", "site").file("plan.toml", plan)
}

/// The one cell directory of the last run.
fn cell(t: &Test) -> PathBuf {
    let run = t.run_ids().pop().expect("a run");
    std::fs::read_dir(t.path(&format!(".gameplan/runs/{run}/steps")))
        .expect("steps")
        .flatten()
        .map(|e| e.path())
        .find(|p| p.join("report.json").exists())
        .expect("a cell")
}

fn report(cell: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(cell.join("report.json")).expect("report"))
        .expect("json")
}

/// The observations' texts in the cell's transcript, in order.
fn texts(cell: &Path) -> Vec<String> {
    std::fs::read_to_string(cell.join("transcript.jsonl"))
        .expect("transcript")
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| Some(v.get("observation")?.get("text")?.as_str()?.to_owned()))
        .collect()
}

fn notes(report: &Value) -> Vec<String> {
    report["notes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|n| n.as_str().map(str::to_owned))
        .collect()
}

fn assert_replays(t: &Test, cell: &Path) {
    let trace = cell.join("trace.jsonl");
    t.run(&["replay", trace.to_str().expect("utf-8")])
        .code(0)
        .stdout_has("every observation hash matches");
}

/// The number after `label` in `text` ("Ticks: 7" → 7).
fn number_after(text: &str, label: &str) -> u64 {
    let at = text
        .find(label)
        .unwrap_or_else(|| panic!("no {label} in {text}"))
        + label.len();
    text[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .unwrap_or_else(|_| panic!("no number after {label} in {text}"))
}

#[test]
fn a_saved_farm_with_a_date_a_price_and_timers_opens_the_same_on_every_reset_and_replays() {
    let t = fixture(
        "farm.html",
        r#"["click:Sleep", "click:Sleep", "wait", "key:ArrowUp", "click:Sleep"]"#,
        "viewport = [1024, 700]",
    );
    t.run(&["plan", "run", "plan.toml"]).code(0);
    let cell = cell(&t);
    let report = report(&cell);
    // The opening loads the page twice: the second load found nothing the
    // first one saved (storage, session storage, cookie), and read the
    // same date and price.
    assert_eq!(report["warnings"], json!([]), "{report:#}");
    assert_eq!(report["findings"], json!([]), "{report:#}");
    let seen = texts(&cell);
    let first = &seen[0];
    assert!(first.contains("Day 1"), "{first}");
    assert!(
        first.contains("Visits: 1 in this tab, 1 in this browser, 1 saved"),
        "{first}"
    );
    assert!(first.contains("Today is 2024-"), "the seed's date: {first}");
    // The inner size is the viewport, and so is every screenshot.
    assert!(first.contains("Window: 1024x700"), "{first}");
    let png = std::fs::read(cell.join("screenshots/step-0001.png")).expect("screenshot");
    let size = |at: usize| u32::from_be_bytes(png[at..at + 4].try_into().expect("4 bytes"));
    assert_eq!((size(16), size(20)), (1024, 700), "the screenshot's size");
    // The game's own time moves with every action (a 100 ms interval,
    // 60 Hz frames), and `wait` moves it further.
    let ticks: Vec<u64> = seen.iter().map(|s| number_after(s, "Ticks: ")).collect();
    assert!(ticks.windows(2).all(|w| w[1] > w[0]), "{ticks:?}");
    assert!(
        ticks[3] - ticks[2] > ticks[2] - ticks[1],
        "wait moves time more: {ticks:?}"
    );
    assert!(number_after(&seen[1], "Frames: ") > number_after(&seen[0], "Frames: "));
    assert!(seen.last().is_some_and(|s| s.contains("Day 4")), "{seen:?}");
    assert_replays(&t, &cell);
}

#[test]
fn a_click_that_fetches_a_missing_level_is_one_error_finding_naming_the_url_and_status() {
    let t = fixture(
        "levels.html",
        r#"["click:Start", "click:Next level", "click:Next level"]"#,
        "",
    );
    t.run(&["plan", "run", "plan.toml"]).code(0);
    let cell = cell(&t);
    let report = report(&cell);
    let findings = report["findings"].as_array().expect("findings");
    let titles: Vec<&str> = findings
        .iter()
        .filter_map(|f| f["title"].as_str())
        .collect();
    assert_eq!(findings.len(), 2, "{titles:#?}");
    assert!(
        findings.iter().all(|f| f["category"] == "error"),
        "no console finding echoes a request already named: {report:#}"
    );
    let level = titles
        .iter()
        .find(|t| t.contains("/levels/2.json"))
        .unwrap_or_else(|| panic!("{titles:#?}"));
    assert!(
        level.starts_with("GET http://127.0.0.1:")
            && level.ends_with("/levels/2.json answered HTTP 404 after `click:Next level`"),
        "{level}"
    );
    let art = titles
        .iter()
        .find(|t| t.contains("/art/missing.png"))
        .unwrap_or_else(|| panic!("{titles:#?}"));
    assert!(
        art.ends_with("answered HTTP 404 while the page loaded"),
        "{art}"
    );
    // The level that exists loaded.
    assert!(
        texts(&cell)[1].contains("Level 1: Meadow"),
        "{:?}",
        texts(&cell)
    );
}

#[test]
fn an_offline_cdn_s_dollar_is_not_defined_is_a_note_naming_the_script_and_no_finding() {
    let t = fixture("cdn.html", r#"["click:Go"]"#, "");
    t.run(&["plan", "run", "plan.toml"]).code(0);
    let report = report(&cell(&t));
    assert_eq!(report["findings"], json!([]), "{report:#}");
    let notes = notes(&report);
    let jquery = "https://code.jquery.invalid/jquery-3.7.1.min.js";
    for note in [
        format!("could not load (offline?): {jquery}"),
        format!("`$ is not defined`, after {jquery} could not load"),
    ] {
        assert!(notes.contains(&note), "{note} in {notes:#?}");
    }
}

#[test]
fn an_error_logged_then_thrown_is_one_console_finding() {
    let t = fixture("twice.html", r#"["click:Break", "click:Break"]"#, "");
    t.run(&["plan", "run", "plan.toml"]).code(0);
    let report = report(&cell(&t));
    let findings = report["findings"].as_array().expect("findings");
    assert_eq!(findings.len(), 1, "{report:#}");
    assert_eq!(findings[0]["category"], "console");
    assert_eq!(findings[0]["occurrences"], 2, "{report:#}");
}

#[test]
fn a_game_that_starts_when_its_intro_tune_ends_starts() {
    let waits = format!("[{}]", ["\"wait\""; 6].join(", "));
    let t = fixture("autoplay.html", &waits, "");
    t.run(&["plan", "run", "plan.toml"]).code(0);
    let cell = cell(&t);
    let seen = texts(&cell);
    assert!(
        seen.iter().any(|s| s.contains("Game started")),
        "the intro played to its end: {seen:?}"
    );
    assert_eq!(report(&cell)["findings"], json!([]));
}

#[test]
fn a_timer_that_never_returns_is_a_hang() {
    let t = fixture(
        "timer-freeze.html",
        r#"["click:Plant", "wait"]"#,
        "action_timeout = 3",
    );
    t.run(&["plan", "run", "plan.toml"]);
    let report = report(&cell(&t));
    assert_eq!(report["quit_reason"], "hang", "{report:#}");
    assert!(
        report["findings"]
            .as_array()
            .is_some_and(|f| f.iter().any(|f| f["category"] == "hang"
                && f["title"]
                    .as_str()
                    .is_some_and(|t| t.contains("click:Plant")))),
        "{report:#}"
    );
}

/// A server whose `slow.js` answers after `delay` seconds, and every other
/// path a page that loads it: Python's own server, on a free port.
struct SlowServer {
    child: std::process::Child,
    port: String,
}

impl SlowServer {
    fn start(delay: f64) -> SlowServer {
        use std::io::BufRead as _;
        let script = format!(
            "import http.server, sys, time\n\
             class H(http.server.BaseHTTPRequestHandler):\n\
             \x20   def log_message(self, *a): pass\n\
             \x20   def do_GET(self):\n\
             \x20       if self.path == '/slow.js':\n\
             \x20           time.sleep({delay})\n\
             \x20           body, kind = b'document.title = \"Loaded\"', 'text/javascript'\n\
             \x20       else:\n\
             \x20           body, kind = b'<title>Loading</title><h1>Slow</h1><script src=slow.js></script>', 'text/html'\n\
             \x20       self.send_response(200)\n\
             \x20       self.send_header('Content-Type', kind)\n\
             \x20       self.send_header('Content-Length', str(len(body)))\n\
             \x20       self.end_headers()\n\
             \x20       self.wfile.write(body)\n\
             s = http.server.ThreadingHTTPServer(('127.0.0.1', 0), H)\n\
             print(s.server_address[1], flush=True)\n\
             s.serve_forever()\n"
        );
        let mut child = std::process::Command::new("python3")
            .args(["-c", &script])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("python3");
        let mut port = String::new();
        std::io::BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut port)
            .expect("its port");
        SlowServer {
            child,
            port: port.trim().to_owned(),
        }
    }
}

impl Drop for SlowServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn slow_plan(url: &str, game_extra: &str) -> String {
    format!(
        "version = 1\nname = \"slow\"\n\n[game]\nid = \"slow\"\ndriver = \"webdriver\"\n\
         url = \"{url}\"\naction_timeout = 2\n{game_extra}\n\n[[personas]]\nslug = \"p\"\n\
         card = \"Waits.\"\nplayer = {{ kind = \"scripted\", actions = [\"wait\"] }}\n\n\
         [[steps]]\nid = \"play\"\nkind = \"play\"\nmatrix = {{ persona = \"*\" }}\n"
    )
}

#[test]
fn a_slow_first_load_plays_and_a_page_that_never_loads_names_its_url_and_load_timeout() {
    // Slower than `action_timeout`, well within the default load timeout.
    let slow = SlowServer::start(4.0);
    let url = format!("http://127.0.0.1:{}/index.html", slow.port);
    let t = Test::new().file("plan.toml", slow_plan(&url, ""));
    t.run(&["plan", "run", "plan.toml"]).code(0);
    assert!(texts(&cell(&t))[0].contains("Slow"));

    // Slower than `load_timeout`: not played, and said so.
    let never = SlowServer::start(30.0);
    let url = format!("http://127.0.0.1:{}/index.html", never.port);
    let t = Test::new().file("plan.toml", slow_plan(&url, "load_timeout = 3"));
    let out = t.run(&["plan", "run", "plan.toml"]);
    out.code(1);
    let report = report(&cell(&t));
    assert_eq!(report["state"], "not_played", "{report:#}");
    let why = report["not_played"].to_string();
    assert!(
        why.contains(&url) && why.contains("game.load_timeout") && !why.contains("flush"),
        "{why}"
    );
}

/// A repo holding the published games of tests/fixtures/web-games/ and a
/// plan of one scripted cell serving `serve` (under `web-games/`).
fn published(serve: &str, actions: &str, extra: &str) -> Test {
    let plan = format!(
        "version = 1\nname = \"published\"\n\n[game]\nid = \"published\"\ndriver = \"webdriver\"\n\
         serve = \"web-games/{serve}\"\nurl = \"index.html\"\n{extra}\n\n[[personas]]\n\
         slug = \"player\"\ncard = \"Plays.\"\n\
         player = {{ kind = \"scripted\", actions = {actions} }}\n\n\
         [[steps]]\nid = \"play\"\nkind = \"play\"\nmatrix = {{ persona = \"*\" }}\n"
    );
    let game = serve.split('/').next().expect("a directory");
    with_dir(
        Test::new(),
        &format!("tests/fixtures/web-games/{game}"),
        &format!("web-games/{game}"),
    )
    .file("plan.toml", plan)
}

#[test]
fn the_published_tetris_js_names_its_missing_jquery_once_and_its_dollar_error_is_a_note() {
    let t = published(
        "tetris-js/assets",
        r#"["key:ArrowLeft", "key:ArrowDown", "wait"]"#,
        "keys = [\"ArrowLeft\", \"ArrowDown\"]",
    );
    t.run(&["plan", "run", "plan.toml"]).code(0);
    let cell = cell(&t);
    let report = report(&cell);
    let findings = report["findings"].as_array().expect("findings");
    assert_eq!(findings.len(), 1, "{report:#}");
    let title = findings[0]["title"].as_str().unwrap_or_default();
    assert_eq!(findings[0]["category"], "error");
    assert!(
        title.ends_with("/jquery/jquery.js answered HTTP 404 while the page loaded"),
        "{title}"
    );
    assert!(
        notes(&report)
            .iter()
            .any(|n| n.starts_with("`$ is not defined`, after http://127.0.0.1:")),
        "{report:#}"
    );
    assert_replays(&t, &cell);
}

#[test]
fn the_published_countdowntimer_offline_is_notes_only() {
    let t = published("countdowntimer/dist", r#"["wait", "wait"]"#, "");
    t.run(&["plan", "run", "plan.toml"]).code(0);
    let cell = cell(&t);
    let report = report(&cell);
    assert_eq!(report["findings"], json!([]), "{report:#}");
    let cdn = "https://ajax.googleapis.com/ajax/libs/jquery/3.2.1/jquery.min.js";
    let notes = notes(&report);
    for note in [
        format!("could not load (offline?): {cdn}"),
        format!("`jQuery is not defined`, after {cdn} could not load"),
    ] {
        assert!(notes.contains(&note), "{note} in {notes:#?}");
    }
    assert_replays(&t, &cell);
}

#[test]
fn the_published_pac_man_plays_its_intro_without_a_gesture() {
    // Its intro tune starts the game when it ends (the characters are
    // released); blocked, `play()` throws and the game waits at "GET
    // READY!" for good. The tune plays on the page's virtual clock, so the
    // game starts at the same step on a replay.
    let waits = format!("[{}]", ["\"wait\""; 6].join(", "));
    let t = published(
        "pac-man/lib",
        &waits,
        "stuck_after = 0\nprobe = \"({released: !window.globalConstants.stopCharacters})\"",
    );
    t.run(&["plan", "run", "plan.toml"]).code(0);
    let cell = cell(&t);
    let report = report(&cell);
    assert_eq!(report["findings"], json!([]), "{report:#}");
    let released: Vec<bool> = std::fs::read_to_string(cell.join("transcript.jsonl"))
        .expect("transcript")
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| {
            v.get("observation")?
                .get("state")?
                .get("released")?
                .as_bool()
        })
        .collect();
    assert_eq!(
        released.first(),
        Some(&false),
        "GET READY at first: {released:?}"
    );
    assert_eq!(
        released.last(),
        Some(&true),
        "the intro ended and play began: {released:?}"
    );
    assert_replays(&t, &cell);
}

#[test]
fn the_published_farmhand_saves_its_farm_yet_opens_on_day_1_every_time_and_replays() {
    // A React farming game: it saves the farm (IndexedDB / localStorage),
    // registers a service worker, shows the day, the money and a banner by
    // today's date.
    let t = published(
        "farmhand/dist",
        r#"["click:End the day to save your progress and advance the game.", "wait"]"#,
        "",
    );
    t.run(&["plan", "run", "plan.toml"]).code(0);
    let cell = cell(&t);
    let report = report(&cell);
    assert_eq!(report["warnings"], json!([]), "{report:#}");
    assert_eq!(report["findings"], json!([]), "{report:#}");
    let seen = texts(&cell);
    assert!(seen[0].contains("Day 1 of Spring"), "{}", seen[0]);
    assert!(
        seen.last().is_some_and(|s| s.contains("Day 2 of Spring")),
        "the day ended: {seen:?}"
    );
    assert_replays(&t, &cell);
}

#[test]
fn a_farm_read_back_from_indexeddb_is_seen_once_loaded_and_replays() {
    // Forty transactions one after another: the page says its day only
    // once the last has come. A read that did not wait for IndexedDB would
    // see "Loading your farm…" and no Sleep button.
    let t = fixture("idb.html", r#"["click:Sleep", "click:Sleep"]"#, "");
    t.run(&["plan", "run", "plan.toml"]).code(0);
    let cell = cell(&t);
    let report = report(&cell);
    assert_eq!(report["findings"], json!([]), "{report:#}");
    assert_eq!(report["warnings"], json!([]), "{report:#}");
    let seen = texts(&cell);
    assert!(seen[0].contains("Day 1 of Spring"), "{seen:?}");
    assert!(
        seen.last().is_some_and(|s| s.contains("Day 3 of Spring")),
        "both nights slept, each saved and read back: {seen:?}"
    );
    assert_replays(&t, &cell);
}

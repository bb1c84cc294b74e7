//! The browser half: web games played in real headless Chromium
//! through real chromedriver (Debian `chromium`, `chromium-driver`), no mock.
//!
//! Every test checks that no browser process outlives gameplan: a process
//! of ours carries `GAMEPLAN_GAME_CELL=<gameplan pid>-…` in its environment
//! (chromedriver, Chromium) or names the marked profile
//! `gameplan-chromium-<gameplan pid>-…` in its arguments (the helpers
//! Chromium's zygote starts with a cleaned environment). Zombies do not
//! count: where nobody reaps orphans they stay, holding nothing.

use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sys::signal::Signal;

use crate::support::{Test, wait_until};

fn example(rel: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(rel))
        .unwrap_or_else(|e| panic!("read {rel}: {e}"))
}

/// A repo holding the example web game and its plan, as shipped.
fn example_repo() -> Test {
    Test::new()
        .file(
            "examples/games/web/index.html",
            example("examples/games/web/index.html"),
        )
        .file(
            "examples/games/web/game.js",
            example("examples/games/web/game.js"),
        )
        .file("examples/web.toml", example("examples/web.toml"))
}

/// Live processes started for the browser of gameplan `pid`.
fn browser_processes_of(pid: i32) -> Vec<String> {
    let env_mark = format!("GAMEPLAN_GAME_CELL={pid}-");
    let profile = format!("gameplan-chromium-{pid}-");
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(p) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Some(stat) = crate::support::proc_stat(p) else {
            continue;
        };
        if stat.zombie {
            continue;
        }
        let environ = std::fs::read(entry.path().join("environ")).unwrap_or_default();
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let has =
            |hay: &[u8], needle: &str| hay.windows(needle.len()).any(|w| w == needle.as_bytes());
        if has(&environ, &env_mark) || has(&cmdline, &profile) {
            found.push(format!(
                "{p}: {}",
                String::from_utf8_lossy(&cmdline).replace('\0', " ")
            ));
        }
    }
    found
}

/// Nothing of the browsers gameplan `pid` started is left: no process,
/// and no Chromium profile in the temporary directory.
#[track_caller]
fn assert_no_browser_left(pid: i32) {
    // SIGKILL is sent before gameplan exits; give the kernel a moment to
    // take the processes down.
    let mut left = Vec::new();
    let gone = (0..100).any(|_| {
        left = browser_processes_of(pid);
        if left.is_empty() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
        false
    });
    assert!(gone, "browser processes outlived gameplan {pid}: {left:#?}");
    let profile = format!("gameplan-chromium-{pid}-");
    let profiles: Vec<_> = std::fs::read_dir(std::env::temp_dir())
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&profile))
        .map(|e| e.path())
        .collect();
    assert!(
        profiles.is_empty(),
        "gameplan {pid} left its Chromium profiles behind: {profiles:#?}"
    );
}

/// Whether a cell of the last run has written `rel` (its cell directory's
/// `screenshots/step-0003.png`, say): how a test waits for play to be under way.
fn a_cell_wrote(t: &Test, rel: &str) -> bool {
    t.run_ids().pop().is_some_and(|run| {
        let steps = t.path(&format!(".gameplan/runs/{run}/steps"));
        std::fs::read_dir(steps)
            .into_iter()
            .flatten()
            .flatten()
            .any(|cell| cell.path().join(rel).exists())
    })
}

/// The one cell directory of the last run.
fn cell_dir(t: &Test) -> PathBuf {
    let runs = t.path(".gameplan/runs");
    let run = t.run_ids().pop().expect("a run");
    let steps = runs.join(run).join("steps");
    std::fs::read_dir(&steps)
        .expect("steps dir")
        .flatten()
        .map(|e| e.path())
        .find(|p| p.join("trace.jsonl").exists() || p.join("screenshots").exists())
        .expect("a cell directory")
}

#[test]
fn the_example_web_game_is_played_in_chromium_its_bugs_found_with_screenshots_and_it_replays() {
    let t = example_repo();
    let gameplan = t.spawn(&["plan", "run", "examples/web.toml"]);
    let pid = gameplan.pid();
    let out = gameplan.wait();
    out.code(0);
    assert_no_browser_left(pid);

    let cell = cell_dir(&t);
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(cell.join("report.json")).expect("report"))
            .expect("report json");
    let findings = report["findings"].as_array().expect("findings");
    let of = |category: &str| {
        findings
            .iter()
            .find(|f| f["category"] == category)
            .unwrap_or_else(|| panic!("no `{category}` finding in {findings:#?}\n{out}"))
    };
    let console = of("console");
    let title = console["title"].as_str().unwrap_or_default();
    assert!(
        title.contains("Open chest") && title.contains("TypeError"),
        "the planted error behind `Open chest`: {title}"
    );
    let stuck = of("stuck");
    assert!(
        stuck["title"]
            .as_str()
            .unwrap_or_default()
            .contains("The Cellar"),
        "the planted softlock: {stuck}"
    );
    for finding in [console, stuck] {
        let shot = finding["evidence"]["screenshot"]
            .as_str()
            .unwrap_or_else(|| panic!("no screenshot in the evidence of {finding}"));
        let png = std::fs::read(cell.join(shot)).unwrap_or_else(|e| panic!("{shot}: {e}"));
        assert!(
            png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 1000,
            "{shot} is not a screenshot ({} bytes)",
            png.len()
        );
    }
    let md = std::fs::read_to_string(cell.join("report.md")).expect("report.md");
    assert!(
        md.contains("- Screenshot: ![step "),
        "report.md shows the evidence:\n{md}"
    );
    // The trace names the page, not a command, and each step's screenshot.
    let trace = std::fs::read_to_string(cell.join("trace.jsonl")).expect("trace");
    let header: serde_json::Value =
        serde_json::from_str(trace.lines().next().expect("header")).expect("header json");
    assert_eq!(header["game"]["driver"], "webdriver");
    assert_eq!(header["game"]["url"], "examples/games/web/index.html");
    assert!(
        trace.contains("\"screenshot\":\"screenshots/step-0001.png\""),
        "{trace}"
    );

    // Same page, same actions: every observation hash again.
    let trace_rel = cell
        .strip_prefix(t.path(""))
        .expect("in repo")
        .join("trace.jsonl");
    let replay = t.spawn(&["replay", trace_rel.to_str().expect("utf-8")]);
    let replay_pid = replay.pid();
    let replayed = replay.wait();
    replayed.code(0).stdout_has("confirmed");
    assert_no_browser_left(replay_pid);
}

#[test]
fn ctrl_c_mid_cell_stops_the_browser_and_leaves_no_process() {
    let t = example_repo();
    // A long cell, so the signal lands mid-play.
    let plan = example("examples/web.toml")
        .replace("max_actions = 40", "max_actions = 400")
        .replace("patience = 40", "patience = 400");
    t.write("examples/web.toml", plan);
    let gameplan = t.spawn(&["plan", "run", "examples/web.toml"]);
    let pid = gameplan.pid();
    wait_until(
        "the cell's third screenshot",
        Duration::from_secs(60),
        || a_cell_wrote(&t, "screenshots/step-0003.png"),
    );
    assert!(
        !browser_processes_of(pid).is_empty(),
        "a browser runs mid-cell"
    );
    gameplan.signal(Signal::SIGINT);
    let out = gameplan.wait();
    out.code(10);
    assert_no_browser_left(pid);
    let cell = cell_dir(&t);
    let report = std::fs::read_to_string(cell.join("report.json")).expect("report");
    assert!(
        report.contains("\"quit_reason\": \"interrupted\"")
            || report.contains("\"quit_reason\":\"interrupted\""),
        "{report}"
    );
}

/// A repo with a page whose button freezes it for good (a loop that never
/// ends), played by a scripted player with `actions` and `action_timeout`.
fn freezer(action_timeout: u64, actions: &str) -> Test {
    Test::new()
        .file(
            "page.html",
            "<title>Freezer</title><h1>Freezer</h1>\
             <button onclick=\"while (true) {}\">Freeze</button>",
        )
        .file(
            "plan.toml",
            format!(
                "version = 1\nname = \"freeze\"\n\n[game]\nid = \"freeze\"\ndriver = \"webdriver\"\n\
                 url = \"page.html\"\naction_timeout = {action_timeout}\n\n[[personas]]\n\
                 slug = \"clicker\"\ncard = \"Clicks.\"\n\
                 player = {{ kind = \"scripted\", actions = {actions} }}\n\n[[steps]]\n\
                 id = \"play\"\nkind = \"play\"\nmatrix = {{ persona = \"*\" }}\n"
            ),
        )
}

#[test]
fn a_page_that_freezes_is_a_hang_and_its_browser_is_killed() {
    let t = freezer(3, r#"["click:Freeze", "wait"]"#);
    let gameplan = t.spawn(&["plan", "run", "plan.toml"]);
    let pid = gameplan.pid();
    let out = gameplan.wait();
    assert_no_browser_left(pid);
    let report = std::fs::read_to_string(cell_dir(&t).join("report.json")).expect("report");
    let report: serde_json::Value = serde_json::from_str(&report).expect("json");
    assert_eq!(report["quit_reason"], "hang", "{report:#}\n{out}");
    let hang = report["findings"]
        .as_array()
        .and_then(|f| f.iter().find(|f| f["category"] == "hang"))
        .unwrap_or_else(|| panic!("no hang finding: {report:#}"));
    assert!(
        hang["title"]
            .as_str()
            .unwrap_or_default()
            .contains("click:Freeze"),
        "{hang}"
    );
    // A real hang: confirmed on replay, and its evidence shows the page the
    // failing click was taken on, and where it was.
    assert_eq!(hang["severity"], "high", "{hang:#}");
    let evidence = &hang["evidence"];
    assert!(
        evidence["detail"]
            .as_str()
            .is_some_and(|d| d.contains("confirmed: replayed once")),
        "{hang:#}"
    );
    assert!(
        evidence["page"]
            .as_str()
            .is_some_and(|p| p.starts_with("file://") && p.ends_with("/page.html")),
        "{hang:#}"
    );
    let shot = evidence["screenshot"].as_str().expect("a screenshot");
    assert!(cell_dir(&t).join(shot).is_file(), "{shot}");
}

#[test]
fn no_chromedriver_on_path_is_exit_3_naming_the_package_and_nothing_is_charged() {
    let empty = tempfile::tempdir().expect("dir");
    // The default (paid) pipeline: the estimate's smoke check starts the
    // browser before anything is priced or bought.
    let plan = example("examples/web.toml");
    let paid = &plan[..plan.find("[[steps]]").expect("steps")];
    let t = example_repo()
        .file("examples/web.toml", paid)
        .env("PATH", &empty.path().display().to_string());
    let out = t.run(&["plan", "run", "examples/web.toml", "--yes"]);
    out.code(3)
        .stderr_has("chromedriver")
        .stderr_has("chromium-driver")
        .stderr_has("Nothing was charged");
    let ledger = t.run(&["ledger", "show", "--json"]);
    let jobs = ledger.json()["jobs"].as_array().map_or(0, Vec::len);
    assert_eq!(jobs, 0, "no job was bought\n{ledger}");
}

#[test]
fn webdriver_url_is_checked_where_it_is_written() {
    let plan = |game: &str| {
        format!(
            "version = 1\nname = \"w\"\n\n[game]\n{game}\n\n[[personas]]\nslug = \"p\"\ncard = \"c\"\n\
             player = {{ kind = \"explorer\" }}\n\n[[steps]]\nid = \"play\"\nkind = \"play\"\n\
             matrix = {{ persona = \"*\" }}\n"
        )
    };
    let on_stdio = Test::new()
        .file(
            "plan.toml",
            plan("id = \"g\"\ncommand = [\"builtin:maze\"]\nwebdriver_url = \"http://127.0.0.1:4444\""),
        )
        .check(&["plan.toml"]);
    let problem = on_stdio.only("plan::unused_key");
    assert_eq!(
        (problem.line, problem.column),
        (Some(7), Some(17)),
        "{problem:?}"
    );
    let not_http = Test::new()
        .file("page.html", "<title>page</title>")
        .file(
            "plan.toml",
            plan("id = \"g\"\ndriver = \"webdriver\"\nurl = \"page.html\"\nwebdriver_url = \"127.0.0.1:4444\""),
        )
        .check(&["plan.toml"]);
    let problem = not_http.only("plan::invalid_value");
    assert!(problem.message.contains("http://"), "{problem:?}");
    let fine = Test::new()
        .file("page.html", "<title>page</title>")
        .file(
            "plan.toml",
            plan("id = \"g\"\ndriver = \"webdriver\"\nurl = \"page.html\"\nwebdriver_url = \"http://127.0.0.1:4444\""),
        )
        .check(&["plan.toml"]);
    fine.json.code(0);
}

#[test]
fn a_second_ctrl_c_kills_a_frozen_browser_at_once() {
    // The click freezes the page for good: the first Ctrl-C waits for a
    // turn that will not end (within 60 s), the second kills at once.
    let t = freezer(60, r#"["click:Freeze"]"#);
    let gameplan = t.spawn(&["plan", "run", "plan.toml"]);
    let pid = gameplan.pid();
    wait_until("the opening's screenshots", Duration::from_secs(60), || {
        a_cell_wrote(&t, "screenshots/reset-2.png")
    });
    // The click is sent right after; let it reach the page.
    std::thread::sleep(Duration::from_millis(800));
    gameplan.signal(Signal::SIGINT);
    std::thread::sleep(Duration::from_millis(800));
    assert!(
        !browser_processes_of(pid).is_empty(),
        "the frozen browser still runs"
    );
    gameplan.signal(Signal::SIGINT);
    let second = std::time::Instant::now();
    let out = gameplan.wait();
    out.code(10).stderr_has("second Ctrl-C");
    assert!(
        second.elapsed() < Duration::from_secs(5),
        "a second Ctrl-C took {:?}\n{out}",
        second.elapsed()
    );
    assert_no_browser_left(pid);
    // Nor its profile (TMPDIR is unset for the run: /tmp).
    let prefix = format!("gameplan-chromium-{pid}-");
    let profiles: Vec<_> = std::fs::read_dir("/tmp")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
        .collect();
    assert!(profiles.is_empty(), "profiles left behind: {profiles:?}");
}

/// A one-persona plan playing `page.html` with a scripted player, plus
/// `game_extra` lines in `[game]` and `more` at the end.
fn scripted_page_plan(actions: &str, game_extra: &str, more: &str) -> String {
    format!(
        "version = 1\nname = \"page\"\n\n[game]\nid = \"page\"\ndriver = \"webdriver\"\n\
         url = \"page.html\"\n{game_extra}\n\n[[personas]]\nslug = \"clicker\"\ncard = \"Clicks.\"\n\
         player = {{ kind = \"scripted\", actions = {actions} }}\n\n[[steps]]\nid = \"play\"\n\
         kind = \"play\"\nmatrix = {{ persona = \"*\" }}\n{more}"
    )
}

const CLICK_PAGE: &str = "<title>Clicks</title><h1 id=\"h\">Ready</h1>\
    <button onclick=\"document.getElementById('h').textContent = 'Clicked'\">Go</button>";

/// Live processes whose command line holds every one of `needles`.
fn running_with(needles: &[&str]) -> Vec<i32> {
    crate::support::processes()
        .into_iter()
        .filter(|p| !p.zombie)
        .filter(|p| {
            let cmdline = std::fs::read(format!("/proc/{}/cmdline", p.pid)).unwrap_or_default();
            needles.iter().all(|needle| {
                cmdline
                    .windows(needle.len())
                    .any(|w| w == needle.as_bytes())
            })
        })
        .map(|p| p.pid)
        .collect()
}

#[test]
fn a_crashed_tab_is_a_crash_finding_and_nothing_is_left() {
    let waits = format!("[{}]", vec!["\"wait\""; 40].join(", "));
    let t = Test::new()
        .file("page.html", CLICK_PAGE)
        .file("plan.toml", scripted_page_plan(&waits, "", ""));
    let gameplan = t.spawn(&["plan", "run", "plan.toml"]);
    let pid = gameplan.pid();
    wait_until("the cell's second step", Duration::from_secs(60), || {
        a_cell_wrote(&t, "screenshots/step-0002.png")
    });
    // What `chrome://kill` does to a tab, or an out-of-memory page to
    // itself: the page's renderer dies under it.
    let profile = format!("gameplan-chromium-{pid}-");
    let renderers = running_with(&["--type=renderer", &profile]);
    assert!(!renderers.is_empty(), "the page has a renderer");
    for renderer in renderers {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(renderer), Signal::SIGKILL);
    }
    let out = gameplan.wait();
    assert_no_browser_left(pid);
    let report = std::fs::read_to_string(cell_dir(&t).join("report.json")).expect("report");
    let report: serde_json::Value = serde_json::from_str(&report).expect("json");
    assert_eq!(report["quit_reason"], "crash", "{report:#}\n{out}");
    let crash = report["findings"]
        .as_array()
        .and_then(|f| f.iter().find(|f| f["category"] == "crash"))
        .unwrap_or_else(|| panic!("no crash finding: {report:#}\n{out}"));
    let text = crash.to_string();
    assert!(
        text.contains("renderer died") && text.contains("wait"),
        "the finding says the tab crashed, and on which action: {crash:#}"
    );
    let taken = report["actions_taken"].as_u64().unwrap_or_default();
    assert!(
        (2..40).contains(&taken),
        "the cell stopped at the crash, not at the end of its script: {taken} actions"
    );
}

/// A chromedriver the test starts itself on a free loopback port, logging
/// every command to a file; killed when dropped.
struct OwnChromedriver {
    child: std::process::Child,
    port: u16,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl OwnChromedriver {
    fn start() -> OwnChromedriver {
        let dir = tempfile::tempdir().expect("dir");
        let log = dir.path().join("chromedriver.log");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let child = std::process::Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .arg(format!("--log-path={}", log.display()))
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("chromedriver on PATH (apt-get install chromium-driver)");
        let own = OwnChromedriver {
            child,
            port,
            log,
            _dir: dir,
        };
        wait_until("chromedriver listens", Duration::from_secs(20), || {
            own.answers()
        });
        own
    }

    fn answers(&self) -> bool {
        std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok()
    }

    /// Its live child processes (the Chromium it started for a session).
    fn browsers(&self) -> Vec<i32> {
        let me = i32::try_from(self.child.id()).expect("pid");
        crate::support::processes()
            .into_iter()
            .filter(|p| p.ppid == me && !p.zombie)
            .map(|p| p.pid)
            .collect()
    }
}

impl Drop for OwnChromedriver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn the_plans_own_webdriver_url_is_played_through_and_left_running() {
    let mut own = OwnChromedriver::start();
    let nothing = tempfile::tempdir().expect("dir");
    let t = Test::new()
        .file("page.html", CLICK_PAGE)
        .file(
            "plan.toml",
            scripted_page_plan(
                r#"["click:Go"]"#,
                &format!("webdriver_url = \"http://127.0.0.1:{}\"", own.port),
                "",
            ),
        )
        // No chromedriver and no Chromium on gameplan's PATH: had it tried
        // to start its own, the run would end at exit 3 naming the package.
        .env("PATH", &nothing.path().display().to_string());
    let gameplan = t.spawn(&["plan", "run", "plan.toml"]);
    let pid = gameplan.pid();
    let out = gameplan.wait();
    out.code(0);
    assert_no_browser_left(pid);

    let cell = cell_dir(&t);
    let transcript = std::fs::read_to_string(cell.join("transcript.jsonl")).expect("transcript");
    assert!(
        transcript.contains("Clicked"),
        "the click reached the page through the plan's server:\n{transcript}"
    );
    assert!(
        cell.join("screenshots/step-0001.png").exists(),
        "screenshots come through any WebDriver server"
    );
    let log = std::fs::read_to_string(&own.log).expect("chromedriver log");
    for command in ["InitSession", "ClickElement", "Quit"] {
        assert!(
            log.contains(command),
            "the plan's chromedriver saw no {command}"
        );
    }
    assert!(
        own.child.try_wait().expect("status").is_none() && own.answers(),
        "gameplan left the plan's chromedriver running"
    );
    let mut left = Vec::new();
    let closed = (0..100).any(|_| {
        left = own.browsers();
        std::thread::sleep(Duration::from_millis(20));
        left.is_empty()
    });
    assert!(
        closed,
        "the session's browser was closed: {left:?} still run"
    );
}

/// The most browsers gameplan ran at once while it ran (sampled every
/// 10 ms), and how many it ran in all. A browser is a cell's marker
/// (`GAMEPLAN_GAME_CELL=<gameplan pid>-…`) on a live chromedriver: counted
/// by marker, not by process, because chromedriver's fork that becomes
/// Chromium carries it too for a moment.
fn browsers_at_once(gameplan: crate::support::Spawned) -> (usize, usize, crate::support::Output) {
    let mark = format!("GAMEPLAN_GAME_CELL={}-", gameplan.pid());
    let mut gameplan = gameplan;
    let mut most = 0;
    let mut all = std::collections::BTreeSet::new();
    while gameplan.is_running() {
        let now: std::collections::BTreeSet<Vec<u8>> = crate::support::processes()
            .into_iter()
            .filter(|p| !p.zombie)
            .filter_map(|p| {
                let cmdline = std::fs::read(format!("/proc/{}/cmdline", p.pid)).ok()?;
                let program = cmdline.split(|&b| b == 0).next()?;
                if !program.ends_with(b"/chromedriver") {
                    return None;
                }
                let environ = std::fs::read(format!("/proc/{}/environ", p.pid)).ok()?;
                environ
                    .split(|&b| b == 0)
                    .find(|entry| entry.starts_with(mark.as_bytes()))
                    .map(<[u8]>::to_vec)
            })
            .collect();
        most = most.max(now.len());
        all.extend(now);
        std::thread::sleep(Duration::from_millis(10));
    }
    (most, all.len(), gameplan.wait())
}

#[test]
fn the_browser_pool_bounds_how_many_browsers_run_at_once() {
    let personas = ["a", "b", "c"].map(|slug| {
        format!(
            "[[personas]]\nslug = \"{slug}\"\ncard = \"Waits.\"\n\
             player = {{ kind = \"scripted\", actions = [\"wait\", \"wait\"] }}\n"
        )
    });
    let personas = personas.join("\n");
    let plan = |browsers: u32| {
        format!(
            "version = 1\nname = \"pool\"\n\n[game]\nid = \"page\"\ndriver = \"webdriver\"\n\
             url = \"page.html\"\n\n[pools]\nbrowser = {browsers}\nplay = 3\n{personas}\n\
             [[steps]]\nid = \"play\"\nkind = \"play\"\nmatrix = {{ persona = \"*\" }}\n"
        )
    };
    let t = Test::new()
        .file("page.html", CLICK_PAGE)
        .file("one.toml", plan(1))
        .file("three.toml", plan(3));
    let (most, all, out) = browsers_at_once(t.spawn(&["plan", "run", "one.toml", "--no-reuse"]));
    out.code(0);
    assert_eq!(all, 3, "each of the 3 cells ran its browser\n{out}");
    assert_eq!(most, 1, "`browser = 1` ran {most} browsers at once");
    // The count sees overlap where the pool allows it.
    let (most, all, out) = browsers_at_once(t.spawn(&[
        "plan",
        "run",
        "three.toml",
        "--no-reuse",
        "--concurrency",
        "3",
    ]));
    out.code(0);
    assert_eq!(all, 3, "{out}");
    assert!(
        most >= 2,
        "`browser = 3` ran at most {most} browser at once"
    );
}

#[test]
fn play_cli_plays_a_web_page_given_by_url() {
    let t = Test::new().file("web/page.html", CLICK_PAGE);
    let gameplan = t.spawn(&[
        "play",
        "--player",
        "scripted",
        "--action",
        "click:Go",
        "--url",
        "web/page.html",
        "--out",
        "cell",
    ]);
    let pid = gameplan.pid();
    let out = gameplan.wait();
    out.code(0).stdout_has("script_end after 1 actions");
    assert_no_browser_left(pid);
    assert!(
        t.read("cell/transcript.jsonl").contains("Clicked"),
        "the click reached the page"
    );
    let png = std::fs::read(t.path("cell/screenshots/step-0001.png")).expect("a screenshot");
    assert!(png.starts_with(b"\x89PNG"), "a PNG");
    let trace = t.read("cell/trace.jsonl");
    assert!(trace.contains("\"driver\":\"webdriver\""), "{trace}");
}

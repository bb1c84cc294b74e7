//! `report.html`: the page every run writes in its directory, opened as a
//! reviewer would, in headless Chromium through chromedriver (gameplan's
//! own browser driver, `gameplan play --url`, whose probe reads the page
//! and which reports any console error as a finding): every finding of
//! aggregate.json is on it, every image loads, nothing errs.
//! `gameplan report` writes it again; a plan's own template makes it.
//! The paid demo's page (README's first command) is checked the same way,
//! and its screenshot kept in `$GAMEPLAN_ARTIFACTS/report-page.png` when
//! that names a directory (`.ci/run` sets `target/artifacts`).

use serde_json::Value;

use crate::support::Test;

/// A page whose button throws: a console finding with a screenshot.
const THROWING_PAGE: &str = "<title>Throws</title><h1 id=\"h\">Ready</h1>\
    <button onclick=\"document.getElementById('h').textContent = 'Clicked'; \
    throw new Error('the score board is undefined')\">Go</button>";

const WEB_PLAN: &str = r#"version = 1
name = "page"

[game]
id = "page"
driver = "webdriver"
url = "page.html"

[[personas]]
slug = "clicker"
card = "Clicks."
player = { kind = "scripted", actions = ["click:Go"] }

[[steps]]
id = "play"
kind = "play"
matrix = { persona = "*" }

[[steps]]
id = "aggregate"
kind = "aggregate"
needs = ["play"]
"#;

/// What the probe reads of the page: the finding ids, the images that did
/// not load, the coverage lines and the verdict.
const PROBE: &str = "({ids: [...document.querySelectorAll('.finding')].map(e => e.id.replace('finding-', '')), \
    images: document.images.length, \
    broken: [...document.images].filter(i => !i.complete || i.naturalWidth === 0).map(i => i.src), \
    lines: document.querySelectorAll('svg polyline').length, \
    videos: [...document.querySelectorAll('video.video, img.video')].map(v => v.getAttribute('src')), \
    broken_videos: [...document.querySelectorAll('video')].filter(v => v.error).map(v => v.currentSrc), \
    moments: [...document.querySelectorAll('a.moment')].map(a => a.getAttribute('href') + ' ' + a.textContent), \
    verdict: document.getElementById('verdict').textContent, \
    labels: [...document.querySelectorAll('.label')].map(e => e.textContent)})";

/// The run directory of the test's one run.
fn run_dir(t: &Test) -> String {
    format!(".gameplan/runs/{}", t.run_ids().last().expect("a run"))
}

/// Opens `page` (in `dir`) in headless Chromium, waits once, and reads
/// `probe` at each observation (the page loaded, then after the wait):
/// what it read, in turn, and the findings gameplan's browser driver made
/// of the page itself.
pub(crate) fn observe(t: &Test, dir: &str, page: &str, probe: &str) -> (Vec<Value>, Vec<Value>) {
    t.run(&[
        "play", "--player", "scripted", "--action", "wait", "--serve", dir, "--url", page,
        "--probe", probe, "--out", "seen",
    ])
    .code(0);
    let states: Vec<Value> = std::fs::read_to_string(t.path("seen/transcript.jsonl"))
        .expect("transcript")
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| Some(v.get("observation")?.get("state")?.clone()))
        .collect();
    assert!(!states.is_empty(), "an observation of the page");
    let report: Value =
        serde_json::from_str(&t.read("seen/report.json")).expect("the page's cell report");
    let findings = report["findings"].as_array().cloned().unwrap_or_default();
    (states, findings)
}

/// [`observe`] with the page probe: what it read when the page loaded.
fn open(t: &Test, dir: &str, page: &str) -> (Value, Vec<Value>) {
    let (states, findings) = observe(t, dir, page, PROBE);
    (states[0].clone(), findings)
}

/// Opens the run's page, which must not err and must show every finding
/// of aggregate.json, in its order; what the probe read.
fn open_run_page(t: &Test) -> Value {
    let (seen, errors) = open(t, &run_dir(t), "report.html");
    assert!(errors.is_empty(), "the page itself errs: {errors:#?}");
    let shown: Vec<String> = seen["ids"]
        .as_array()
        .expect("ids")
        .iter()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect();
    assert_eq!(
        shown,
        aggregate_ids(t),
        "every finding of aggregate.json, in its order"
    );
    seen
}

fn aggregate_ids(t: &Test) -> Vec<String> {
    let agg: Value =
        serde_json::from_str(&t.read(&format!("{}/steps/aggregate/aggregate.json", run_dir(t))))
            .expect("aggregate.json");
    agg["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .map(|f| f["id"].as_str().expect("id").to_owned())
        .collect()
}

#[test]
fn a_runs_page_shows_every_finding_with_its_labels_and_coverage_and_opens_without_an_error() {
    // The lever game crashing on one seed in three, played three times.
    let t = Test::new()
        .file("plan.toml", crate::play::repeats::PLAN)
        .file("game.py", crate::play::repeats::game(2));
    t.run(&["plan", "run", "plan.toml"])
        .code(0)
        .stdout_has("  page: .gameplan/runs/")
        .stdout_has("/report.html");
    let dir = run_dir(&t);
    let seen = open_run_page(&t);
    assert_eq!(seen["labels"], serde_json::json!(["flaky 1/3"]));
    assert!(
        seen["verdict"]
            .as_str()
            .is_some_and(|v| v.starts_with("passed, exit code 0")),
        "{seen}"
    );
    // No cell played 10 actions: no coverage lines to draw.
    assert_eq!(seen["lines"], 0);

    // Written again from the run's summary: the same page.
    let first = t.read(&format!("{dir}/report.html"));
    std::fs::remove_file(t.path(&format!("{dir}/report.html"))).expect("rm");
    t.run(&["report"])
        .code(0)
        .stdout_has(&format!("{dir}/report.html"));
    assert_eq!(t.read(&format!("{dir}/report.html")), first);
}

#[test]
fn a_browser_runs_page_shows_the_screenshot_of_its_finding_and_every_image_loads() {
    let t = Test::new()
        .file("plan.toml", WEB_PLAN)
        .file("page.html", THROWING_PAGE);
    t.run(&["plan", "run", "plan.toml"]).code(0);
    assert!(
        !aggregate_ids(&t).is_empty(),
        "the thrown error is a finding"
    );
    let seen = open_run_page(&t);
    assert!(
        seen["images"].as_u64().is_some_and(|n| n >= 1),
        "the finding's screenshot is on the page: {seen}"
    );
    assert_eq!(seen["broken"], serde_json::json!([]), "{seen}");
    // The cell's video is on the page (it loads: the images above), and
    // the finding links to its moment: the observation after action 1,
    // the video's second frame.
    let videos = seen["videos"].as_array().expect("videos");
    assert_eq!(videos.len(), 1, "{seen}");
    let src = videos[0].as_str().expect("src");
    let moment = seen["moments"][0].as_str().unwrap_or_default();
    if src.ends_with("video.webm") {
        assert!(
            moment.starts_with(&format!("{src}#t=0.5 action 1, 0.5 s")),
            "{moment}"
        );
    } else {
        assert!(src.ends_with("/video.png"), "{src}");
        assert!(
            moment.starts_with(&format!("{src} action 1, frame 2")),
            "{moment}"
        );
        assert!(seen["images"].as_u64().is_some_and(|n| n >= 2), "{seen}");
    }
}

/// Where a screenshot of the page goes when `GAMEPLAN_ARTIFACTS` names a
/// directory (CI keeps it: `.ci/run`), relative to the repo's root.
fn keep_artifact(t: &Test, name: &str) {
    let Some(dir) = std::env::var_os("GAMEPLAN_ARTIFACTS").filter(|d| !d.is_empty()) else {
        return;
    };
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let mut shots: Vec<_> = std::fs::read_dir(t.path("seen/screenshots"))
        .expect("the page's screenshots")
        .filter_map(|e| Some(e.ok()?.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "png"))
        .collect();
    shots.sort();
    // The last: the page after it settled.
    let shot = shots.last().expect("a screenshot of the page");
    std::fs::create_dir_all(&dir).expect("the artifacts directory");
    std::fs::copy(shot, dir.join(name)).expect("the screenshot kept");
}

/// README's first command: the paid demo on the embedded ledger (in the
/// test's own state directory), and the page it leaves.
#[test]
fn the_paid_demos_page_shows_every_finding_and_opens_without_an_error() {
    let t = Test::new()
        .file("plans/demo.toml", include_str!("../../../plans/demo.toml"))
        .file(
            "examples/personas/veteran.md",
            include_str!("../../../examples/personas/veteran.md"),
        );
    t.run(&["plan", "run", "plans/demo.toml", "--yes"])
        .code(0)
        .stdout_has("/report.html");
    assert!(
        !aggregate_ids(&t).is_empty(),
        "the maze's planted crash is a finding"
    );
    let seen = open_run_page(&t);
    assert_eq!(seen["broken"], serde_json::json!([]), "{seen}");
    assert_eq!(seen["broken_videos"], serde_json::json!([]), "{seen}");
    assert!(
        seen["verdict"]
            .as_str()
            .is_some_and(|v| v.starts_with("passed, exit code 0")),
        "{seen}"
    );
    keep_artifact(&t, "report-page.png");
}

#[test]
fn report_in_a_repo_without_runs_says_there_is_none() {
    let t = Test::new();
    t.run(&["report"]).code(3).stderr_has("error: no runs in");
}

/// A plan's own page: its marker, and what the shipped template gets.
const OWN_TEMPLATE: &str = "<title>{{ run.plan }}</title>\
    <p id=\"own\">OWN PAGE: {{ verdict.word }}, {{ findings|length }} findings, \
    {{ cells|length }} cells</p>";

/// The lever plan of `play::repeats`, with `[report] template = "pages/own.html"`.
fn own_template_repo(template: &str) -> Test {
    let plan = format!(
        "{}\n[report]\ntemplate = \"pages/own.html\"\n",
        crate::play::repeats::PLAN
    );
    Test::new()
        .file("plan.toml", plan)
        .file("game.py", crate::play::repeats::game(2))
        .file("pages/own.html", template)
}

#[test]
fn a_plans_own_template_makes_its_page_and_report_renders_it_again() {
    let t = own_template_repo(OWN_TEMPLATE);
    t.run(&["plan", "run", "plan.toml"]).code(0);
    let dir = run_dir(&t);
    let page = t.read(&format!("{dir}/report.html"));
    let findings = aggregate_ids(&t).len();
    assert!(
        page.contains(&format!("OWN PAGE: passed, {findings} findings, 3 cells")),
        "{page}"
    );
    assert!(
        !page.contains("id=\"verdict\""),
        "not the shipped page: {page}"
    );

    std::fs::remove_file(t.path(&format!("{dir}/report.html"))).expect("rm");
    let again = t.run(&["report"]);
    again.code(0);
    assert!(!again.stderr.contains("warning"), "{again}");
    assert_eq!(t.read(&format!("{dir}/report.html")), page);
}

#[test]
fn a_template_that_does_not_render_warns_and_the_shipped_page_is_written() {
    // It compiles (`plan check` passes it); the include fails when rendered.
    let t = own_template_repo("<p>OWN PAGE</p>{% include \"gone.html\" %}");
    t.check(&["plan.toml"]).json.code(0);
    let warning = "warning: the plan's report template ";
    t.run(&["plan", "run", "plan.toml"])
        .code(0)
        .stderr_has(warning)
        .stderr_has("pages/own.html does not render: ")
        .stderr_has("report.html was written with the shipped template instead");
    let dir = run_dir(&t);
    let page = t.read(&format!("{dir}/report.html"));
    assert!(page.contains("id=\"verdict\""), "the shipped page: {page}");
    assert!(!page.contains("OWN PAGE"), "{page}");

    // Gone since the run: `gameplan report` says so, and writes the shipped page.
    std::fs::remove_file(t.path("pages/own.html")).expect("rm");
    t.run(&["report"])
        .code(0)
        .stderr_has("warning: cannot read the plan's report template ")
        .stderr_has("report.html was written with the shipped template instead");
    assert_eq!(t.read(&format!("{dir}/report.html")), page);
}

#[test]
fn a_missing_or_broken_template_is_a_plan_error_at_its_key_in_toml_and_yaml() {
    let t = own_template_repo("<p>{% if %}</p>");
    let plan = t.read("plan.toml");
    let check = t.check(&["plan.toml"]);
    let problem = check.only("plan::invalid_report_template");
    crate::support::at(problem, &plan, "\"pages/own.html\"");
    assert!(
        problem
            .message
            .starts_with("report template `pages/own.html`: invalid template (line 1): "),
        "{problem:?}"
    );
    check.rendered(problem);

    std::fs::remove_file(t.path("pages/own.html")).expect("rm");
    let check = t.check(&["plan.toml"]);
    let problem = check.only("plan::missing_file");
    crate::support::at(problem, &plan, "\"pages/own.html\"")
        .message("report template `pages/own.html` does not exist");

    let yaml = "version: 1\nname: b\nreport:\n  template: pages/own.html\nsteps:\n  - {id: a, kind: command, run: x}\n";
    t.write("plan.yaml", yaml);
    let check = t.check(&["plan.yaml"]);
    crate::support::at(check.only("plan::missing_file"), yaml, "pages/own.html");
    t.write("pages/own.html", OWN_TEMPLATE);
    t.check(&["plan.yaml"]).json.code(0);
    t.write("plan.yaml", yaml.replace("template:", "tempate:"));
    t.check(&["plan.yaml"])
        .only("plan::unknown_key")
        .help_has("template");
}

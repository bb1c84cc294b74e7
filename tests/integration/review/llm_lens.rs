//! The `llm` lens: the real binary judges a temp repo's files
//! (`over = "files"`, a review-only plan: no game, no backend) through a
//! small OpenAI-compatible server written in the tests (loopback; it stands
//! in for the paid model API only). Good answers become verdicts (exit 0 /
//! 1); answers outside the verdict schema leave their units missing (exit
//! 2, named); the budget stops the lens with the rest missing (exit 2); an
//! endpoint that never answers is exit 5; the key reaches the server and
//! nothing else; an unchanged second run sends no request.

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::json;

use crate::review::gates::{review, verdict};
use crate::support::{
    ModelReply, ModelRequest, ModelServer, Output, Test, at, files_holding, wait_until,
};

const CANARY: &str = "sk-canary-llm-lens-4b1d";

/// A review-only plan: one llm lens over `src/**`, in one gate.
fn plan(url: &str, budget: &str, extra: &str) -> String {
    format!(
        r#"version = 1
name = "llm-review"

[budget]
{budget}

[[lenses]]
name = "words"
kind = "llm"
over = "files"
files = ["src/**"]
model = "test-model"
base_url = "{url}"
api_key = "{{{{ secret('MODEL_KEY') }}}}"
price = {{ input_per_mtok = 1.0, output_per_mtok = 10.0 }}
charter = "Look for the forbidden word in {{{{ unit.path }}}}:\n{{{{ unit.text }}}}"
{extra}

[[gates]]
name = "review"
lenses = ["words"]

[[steps]]
id = "review"
kind = "gate"
"#
    )
}

fn repo(plan_text: &str, files: &[(&str, &str)]) -> Test {
    files.iter().fold(
        Test::new()
            .env("MODEL_KEY", CANARY)
            .file("plans/review.toml", plan_text),
        |t, (path, text)| t.file(path, text),
    )
}

/// The key is nowhere under `.gameplan/` nor in what the run printed.
#[track_caller]
fn key_kept_out(t: &Test, out: &Output) {
    assert_eq!(
        files_holding(&t.path(".gameplan"), CANARY),
        Vec::<String>::new()
    );
    assert!(
        !out.stdout.contains(CANARY) && !out.stderr.contains(CANARY),
        "{out}"
    );
}

/// The unit text the server was asked about (the charter renders it last).
fn asked(request: &ModelRequest) -> String {
    request.message("user").to_owned()
}

/// Answers like a careful model: a finding when the unit holds BAD, clear
/// otherwise (the clear ones in a JSON code fence, as models often write).
fn careful(_: usize, request: &ModelRequest) -> ModelReply {
    let text = if asked(request).contains("BAD") {
        json!({"verdict": "finding", "findings": [
            {"title": "the word BAD", "severity": "high", "detail": "the charter forbids it", "line": 1}
        ]})
        .to_string()
    } else {
        "```json\n{\"verdict\": \"clear\", \"findings\": []}\n```".to_owned()
    };
    ModelReply::Text(text, 1200, 30)
}

#[test]
fn llm_lens_good_answers_become_verdicts_and_an_unchanged_run_sends_nothing() {
    let server = ModelServer::start(Box::new(careful));
    let t = repo(
        &plan(&server.url, "max_model_usd = 1.0", ""),
        &[
            ("src/a.rs", "fn a() {}\n"),
            ("src/b.rs", "fn b() {}\n"),
            ("src/c.rs", "fn c() {}\n"),
        ],
    );
    t.check(&["plans/review.toml"]).codes(&[]);
    t.run(&["plan", "explain", "plans/review.toml"])
        .code(0)
        .stdout_has("`words`: 3 to judge, 0 reused");
    let out = t.run(&["plan", "run", "plans/review.toml"]);
    out.code(0)
        .stdout_has("gate review: SEND-READY")
        .stdout_has("3 judged, 0 reused; 3 model calls, 3600 tokens in, 90 out, 0.0045 USD");
    let seen = server.seen();
    assert_eq!(seen.len(), 3, "one call per unit");
    for request in &seen {
        assert_eq!(request.authorization, format!("Bearer {CANARY}"));
        assert_eq!(request.body["model"], "test-model");
        assert_eq!(request.body["max_tokens"], 1024, "the answer's bound");
        assert!(request.message("system").contains("\"verdict\""));
    }
    // The charter is rendered with the unit.
    assert!(
        seen.iter()
            .any(|r| asked(r) == "Look for the forbidden word in src/b.rs:\nfn b() {}\n"),
        "{:?}",
        seen.iter().map(asked).collect::<Vec<_>>()
    );
    let first = review(&t, "review");
    assert_eq!(first["status"], "SEND-READY");
    assert_eq!(verdict(&first, "words", "src/a.rs")["verdict"], "clear");
    let lens = &first["lenses"][0];
    assert_eq!(lens["kind"], "llm");
    assert_eq!(lens["calls"], 3);
    assert_eq!(lens["usage"]["model"], "test-model");
    assert_eq!(lens["usage"]["calls"], 3);
    assert_eq!(lens["usage"]["input_tokens"], 3600);
    assert_eq!(lens["usage"]["output_tokens"], 90);
    // 3600 tokens at 1 USD and 90 at 10 USD per million.
    let cost = lens["usage"]["cost_usd"].as_f64().expect("a cost");
    assert!((cost - 0.0045).abs() < 1e-9, "{cost}");
    assert_eq!(first["usage"]["calls"], 3);

    // Nothing changed: every clean verdict is reused, no request is sent.
    t.run(&["plan", "run", "plans/review.toml"])
        .code(0)
        .stdout_has("words: SEND-READY (3 units, 3 clear; 0 judged, 3 reused; 0 model calls");
    assert_eq!(
        server.seen().len(),
        3,
        "an unchanged run asks the model nothing"
    );

    // A finding, as the model states it: FIX FIRST, and only b was asked.
    t.write("src/b.rs", "fn b() { BAD }\n");
    let out = t.run(&["plan", "run", "plans/review.toml"]);
    out.code(1)
        .stdout_has("gate review: FIX FIRST")
        .stdout_has("the word BAD");
    assert_eq!(server.seen().len(), 4);
    let fixed = review(&t, "review");
    let b = verdict(&fixed, "words", "src/b.rs");
    assert_eq!(b["verdict"], "finding");
    assert_eq!(b["findings"][0]["title"], "the word BAD");
    assert_eq!(b["findings"][0]["severity"], "high");
    assert_eq!(b["findings"][0]["line"], 1);

    // The key reached the server, and nothing gameplan wrote or printed.
    key_kept_out(&t, &out);
}

#[test]
fn llm_lens_answers_outside_the_schema_leave_their_units_missing() {
    let server = ModelServer::start(Box::new(|_, request: &ModelRequest| {
        let unit = asked(request);
        let text = if unit.contains("src/b.rs") {
            "Looks fine to me!".to_owned()
        } else if unit.contains("src/c.rs") {
            r#"{"verdict": "ok", "findings": []}"#.to_owned()
        } else {
            r#"{"verdict": "clear", "findings": []}"#.to_owned()
        };
        ModelReply::Text(text, 100, 10)
    }));
    let t = repo(
        &plan(&server.url, "max_model_usd = 1.0", ""),
        &[
            ("src/a.rs", "fn a() {}\n"),
            ("src/b.rs", "fn b() {}\n"),
            ("src/c.rs", "fn c() {}\n"),
        ],
    );
    let out = t.run(&["plan", "run", "plans/review.toml"]);
    out.code(2)
        .stdout_has("gate review: INCOMPLETE")
        .stdout_has("src/b.rs")
        .stdout_has("src/c.rs");
    let doc = review(&t, "review");
    assert_eq!(verdict(&doc, "words", "src/a.rs")["verdict"], "clear");
    for (unit, why) in [
        ("src/b.rs", "not one JSON object"),
        ("src/c.rs", "verdict `ok`"),
    ] {
        let v = verdict(&doc, "words", unit);
        assert_eq!(v["verdict"], "missing", "{v}");
        let said = v["missing"].as_str().expect("why it is missing");
        assert!(
            said.contains("verdict schema") && said.contains(why),
            "{said}"
        );
    }
    // A missing verdict is never stored: b and c are asked again, a is not.
    t.run(&["plan", "run", "plans/review.toml"]).code(2);
    let again: Vec<String> = server.seen()[3..].iter().map(asked).collect();
    assert_eq!(again.len(), 2, "{again:?}");
    assert!(again.iter().all(|u| !u.contains("src/a.rs")), "{again:?}");
}

#[test]
fn llm_lens_the_budget_stops_it_and_leaves_the_rest_missing() {
    // Each answer reports 2,000 + 500 tokens: 0.007 USD at this price. The
    // client also bounds the next call before sending it (its prompt and
    // 1,024 answer tokens: about 0.011 USD), so 0.02 USD pays two calls.
    let server = ModelServer::start(Box::new(|_, _: &ModelRequest| {
        ModelReply::Text(r#"{"verdict": "clear"}"#.to_owned(), 2000, 500)
    }));
    let files: Vec<(String, String)> = (1..=5)
        .map(|n| (format!("src/f{n}.rs"), format!("fn f{n}() {{}}\n")))
        .collect();
    let refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, c)| (p.as_str(), c.as_str()))
        .collect();
    let t = repo(&plan(&server.url, "max_model_usd = 0.02", ""), &refs);
    let out = t.run(&["plan", "run", "plans/review.toml"]);
    out.code(2)
        .stdout_has("gate review: INCOMPLETE")
        .stdout_has("2 model calls")
        .stdout_has("stopped by max_model_usd");
    assert_eq!(
        server.seen().len(),
        2,
        "the third call could pass the budget"
    );
    let doc = review(&t, "review");
    let usage = &doc["lenses"][0]["usage"];
    assert_eq!(usage["stopped_by_budget"], true, "{usage}");
    assert_eq!(usage["max_usd"], 0.02);
    assert!(usage["cost_usd"].as_f64().expect("cost") <= 0.02);
    for n in 1..=5 {
        let v = verdict(&doc, "words", &format!("src/f{n}.rs"));
        if n <= 2 {
            assert_eq!(v["verdict"], "clear", "{v}");
        } else {
            assert_eq!(v["verdict"], "missing", "{v}");
            assert!(
                v["missing"].as_str().unwrap().contains("max_model_usd"),
                "{v}"
            );
        }
    }
}

#[test]
fn llm_lens_an_endpoint_that_never_answers_is_exit_5() {
    let server = ModelServer::start(Box::new(|_, _: &ModelRequest| ModelReply::Silent));
    let t = repo(
        &plan(&server.url, "max_model_usd = 1.0", "timeout = 1"),
        &[("src/a.rs", "fn a() {}\n"), ("src/b.rs", "fn b() {}\n")],
    );
    let started = Instant::now();
    let out = t.run(&["plan", "run", "plans/review.toml"]);
    out.code(5);
    assert!(
        out.stdout.contains("never answered") || out.stderr.contains("never answered"),
        "{out}"
    );
    // The client's four attempts for the first unit; the second is not sent.
    assert_eq!(server.seen().len(), 4);
    assert!(
        started.elapsed() < Duration::from_secs(40),
        "{:?}",
        started.elapsed()
    );
    let doc = review(&t, "review");
    assert_eq!(doc["lenses"][0]["usage"]["unreachable"], true);
    let b = verdict(&doc, "words", "src/b.rs");
    assert_eq!(b["verdict"], "missing");
    assert!(b["missing"].as_str().unwrap().contains("not sent"), "{b}");
}

#[test]
fn llm_lens_plan_check_needs_a_model_and_a_price_under_a_budget() {
    let text = r#"version = 1
name = "llm-check"

[budget]
max_model_usd = 2.0

[[lenses]]
name = "local"
kind = "llm"
over = "files"
files = ["src/**"]
model = "llama3.2:3b"
base_url = "http://127.0.0.1:11434/v1"
charter = "Look for secrets."

[[lenses]]
name = "modelless"
kind = "llm"
over = "files"
files = ["src/**"]
charter = "Look for secrets."

[[gates]]
name = "review"
lenses = ["local", "modelless"]

[[steps]]
id = "review"
kind = "gate"
"#;
    let t = Test::new()
        .file("plan.toml", text)
        .file("src/a.rs", "fn a() {}\n");
    let check = t.check(&["plan.toml"]);
    check.codes(&["plan::unpriced_model", "plan::missing_key"]);
    let unpriced = check.with_message(
        "lens `local`: model `llama3.2:3b` has no price, so `max_model_usd = 2` cannot bound what it spends",
    );
    at(unpriced, text, "\"llama3.2:3b\"").help_has("to the lens");
    // A price (and a model) make it a plan that runs.
    let fixed = text
        .replace(
            "base_url = \"http://127.0.0.1:11434/v1\"",
            "base_url = \"http://127.0.0.1:11434/v1\"\nprice = { input_per_mtok = 0, output_per_mtok = 0 }",
        )
        .replace(
            "name = \"modelless\"",
            "name = \"modelless\"\nmodel = \"gpt-4o-mini\"",
        );
    t.write("plan.toml", &fixed);
    t.check(&["plan.toml"]).codes(&[]);
    // A charter is a template rendered per unit: one that does not compile
    // is found before anything runs, where it stands.
    let broken = fixed.replacen(
        "charter = \"Look for secrets.\"",
        "charter = \"Look at {% if unit.path %}\"",
        1,
    );
    t.write("plan.toml", &broken);
    let check = t.check(&["plan.toml"]);
    let problem = check.only("plan::invalid_charter");
    at(problem, &broken, "\"Look at {%").help_has("`unit`");
    // A charter file: read up to 64 KiB, and checked the same way.
    let from_file = fixed.replacen(
        "charter = \"Look for secrets.\"",
        "charter_file = \"charter.md\"",
        1,
    );
    t.write("plan.toml", &from_file);
    t.write("charter.md", "c".repeat(64 * 1024));
    t.check(&["plan.toml"]).codes(&[]);
    t.write("charter.md", "c".repeat(64 * 1024 + 1));
    let check = t.check(&["plan.toml"]);
    at(
        check.only("plan::file_too_large"),
        &from_file,
        "\"charter.md\"",
    );
    t.write("charter.md", "{{ unit.path");
    let check = t.check(&["plan.toml"]);
    at(
        check.only("plan::invalid_charter"),
        &from_file,
        "\"charter.md\"",
    );
}

#[test]
fn llm_lens_over_a_free_maze_plays_findings_with_a_reviewers_pass() {
    let server = ModelServer::start(Box::new(|_, _: &ModelRequest| {
        ModelReply::Text(
            r#"{"verdict": "clear", "findings": []}"#.to_owned(),
            300,
            12,
        )
    }));
    let gates = format!(
        r#"
[[lenses]]
name = "triage"
kind = "llm"
over = "findings"
model = "test-model"
base_url = "{url}"
charter_file = "review/triage.md"

[[gates]]
name = "triage"
lenses = ["triage"]
reviewers = ["curious-kid"]

[[steps]]
id = "triage"
kind = "gate"
needs = ["aggregate"]
"#,
        url = server.url
    );
    let t = Test::new()
        .file(
            "plans/maze.toml",
            format!("{}{gates}", include_str!("../../../plans/maze.toml")),
        )
        .file(
            "review/triage.md",
            "As {{ reviewer.slug if reviewer else 'the team' }}: is this {{ unit.category }} finding a blocker?",
        );
    t.run(&["plan", "run", "plans/maze.toml"])
        .code(0)
        .stdout_has("gate triage: SEND-READY");
    let doc = review(&t, "triage");
    let lenses = doc["lenses"].as_array().expect("lenses");
    assert_eq!(
        lenses.len(),
        2,
        "the lens, then its reviewer's pass: {doc:#}"
    );
    assert_eq!(lenses[1]["name"], "triage@curious-kid");
    let units = lenses[0]["units"].as_array().expect("units").len();
    assert!(units > 0, "the maze's findings are units: {doc:#}");
    let seen = server.seen();
    assert_eq!(seen.len(), 2 * units, "one call per unit per pass");
    let (own, reviewer) = seen.split_at(units);
    assert!(
        own.iter()
            .all(|r| asked(r).starts_with("As the team: is this "))
    );
    assert!(
        reviewer
            .iter()
            .all(|r| asked(r).starts_with("As curious-kid: is this ")
                && r.message("system")
                    .ends_with("Nine years old, clicks everything, reads nothing.")),
        "{:?}",
        reviewer.first()
    );
    // The charter reads the unit, so the unit is not appended again.
    assert!(
        own.iter()
            .all(|r| asked(r).ends_with(" finding a blocker?") && !asked(r).contains("```")),
        "{:?}",
        own.first().map(asked)
    );

    // The same plays give the same findings: nothing is asked again.
    t.run(&["plan", "run", "plans/maze.toml"]).code(0);
    assert_eq!(server.seen().len(), 2 * units);
}

#[test]
fn llm_lens_a_refused_request_stops_the_lens_and_leaves_it_incomplete() {
    // A wrong key: the server says so, quoting it back as some providers do.
    let server = ModelServer::start(Box::new(|_, request: &ModelRequest| {
        ModelReply::Status(
            401,
            json!({"error": {"message": format!("invalid key {}", request.authorization)}})
                .to_string(),
        )
    }));
    let t = repo(
        &plan(&server.url, "max_model_usd = 1.0", ""),
        &[("src/a.rs", "fn a() {}\n"), ("src/b.rs", "fn b() {}\n")],
    );
    let out = t.run(&["plan", "run", "plans/review.toml"]);
    out.code(2).stdout_has("gate review: INCOMPLETE");
    assert_eq!(server.seen().len(), 1, "a refusal is not repeated per unit");
    let doc = review(&t, "review");
    let a = verdict(&doc, "words", "src/a.rs");
    let said = a["missing"].as_str().expect("why");
    assert!(
        said.contains("refused") && said.contains("api_key"),
        "{said}"
    );
    assert!(
        said.contains("[redacted]"),
        "the quoted key is redacted: {said}"
    );
    let b = verdict(&doc, "words", "src/b.rs");
    assert!(b["missing"].as_str().unwrap().contains("not sent"), "{b}");
    key_kept_out(&t, &out);
}

#[test]
fn llm_lens_ctrl_c_while_the_model_is_silent_stops_the_gate_at_once() {
    // A 30 s timeout and four attempts: without the stop, two minutes.
    let server = ModelServer::start(Box::new(|_, _: &ModelRequest| ModelReply::Silent));
    let t = repo(
        &plan(&server.url, "max_model_usd = 1.0", "timeout = 30"),
        &[("src/a.rs", "fn a() {}\n"), ("src/b.rs", "fn b() {}\n")],
    );
    let gameplan = t.spawn(&["plan", "run", "plans/review.toml"]);
    wait_until("the model was asked", Duration::from_secs(30), || {
        !server.seen().is_empty()
    });
    let asked = Instant::now();
    gameplan.signal(Signal::SIGINT);
    let out = gameplan.wait();
    out.code(10);
    assert!(
        asked.elapsed() < Duration::from_secs(10),
        "the stop waited for the model: {:?}",
        asked.elapsed()
    );
    assert_eq!(server.seen().len(), 1, "nothing more was sent");
    key_kept_out(&t, &out);
}

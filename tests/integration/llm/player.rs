//! The thinking half: the `llm` player, and `jev`/`rune` with it,
//! playing the real built-in maze through the real binary against a small
//! OpenAI-compatible server written here (loopback, `std::net`). The server
//! answers `/v1/chat/completions` from a script, counts requests by kind,
//! and records the Authorization header it saw. It stands in for a paid
//! model API only.

use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::support::{Test, at, files_holding, read_model_request, wait_until, write_completion};

const CANARY: &str = "sk-canary-7f3a9e1d";

/// What the server answers to one request.
enum Reply {
    /// A chat completion with this text and usage (prompt, completion tokens).
    Text(String, u64, u64),
    /// Accepts, reads the request, and never answers.
    Silent,
    /// Refuses the request with this status and body.
    Refuse(u16, &'static str),
}

/// A request as the server saw it.
#[derive(Debug, Clone)]
struct Seen {
    authorization: String,
    /// The first message (the rendered prompt).
    prompt: String,
    /// The last message (a retry's complaint, when there was one).
    last: String,
    kind: PromptKind,
    /// The request's `response_format` (`null` when it asked for none).
    format: serde_json::Value,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PromptKind {
    /// One action wanted (standard, each rune vote).
    Move,
    /// Up to three alternatives (jev).
    Alternatives,
    /// jev's selector.
    Select,
    /// "How it felt".
    Felt,
}

type Script = Box<dyn Fn(usize, &Seen) -> Reply + Send + Sync>;

struct ModelServer {
    url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    /// The most requests it was answering at once.
    most_at_once: Arc<Mutex<(usize, usize)>>,
}

impl ModelServer {
    fn start(script: Script) -> ModelServer {
        Self::answering_after(script, Duration::ZERO)
    }

    /// Answers each request after `delay`, each on a thread of its own (so
    /// requests may overlap), in the order they arrived (a request's
    /// number is its place in that order).
    fn answering_after(script: Script, delay: Duration) -> ModelServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let url = format!("http://{}/v1", listener.local_addr().expect("addr"));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let most_at_once = Arc::new(Mutex::new((0, 0)));
        let (log, load) = (seen.clone(), most_at_once.clone());
        let script = Arc::new(script);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let Some(request) = read_request(&mut stream) else {
                    continue;
                };
                let n = {
                    let mut log = log.lock().unwrap();
                    log.push(request.clone());
                    log.len() - 1
                };
                let (script, load) = (script.clone(), load.clone());
                let answer = move || {
                    {
                        let mut load = load.lock().unwrap();
                        load.0 += 1;
                        load.1 = load.1.max(load.0);
                    }
                    std::thread::sleep(delay);
                    let reply = script(n, &request);
                    load.lock().unwrap().0 -= 1;
                    reply
                };
                if delay.is_zero() {
                    respond(stream, n, answer());
                } else {
                    // Overlapping requests need a thread each.
                    std::thread::spawn(move || respond(stream, n, answer()));
                }
            }
        });
        ModelServer {
            url,
            seen,
            most_at_once,
        }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    fn count(&self, kind: PromptKind) -> usize {
        self.seen().iter().filter(|s| s.kind == kind).count()
    }

    fn most_at_once(&self) -> usize {
        self.most_at_once.lock().unwrap().1
    }
}

fn respond(mut stream: TcpStream, n: usize, reply: Reply) {
    match reply {
        Reply::Silent => {
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_secs(60));
                drop(stream);
            });
        }
        Reply::Text(text, input, output) => {
            write_completion(&mut stream, n, &text, input, output);
        }
        Reply::Refuse(status, body) => {
            use std::io::Write;
            let _ = write!(
                stream,
                "HTTP/1.1 {status} Refused\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    }
}

fn read_request(stream: &mut TcpStream) -> Option<Seen> {
    let request = read_model_request(stream)?;
    let last = request
        .messages
        .iter()
        .rev()
        .find(|(role, _)| role == "user")?
        .1
        .clone();
    let first = request
        .messages
        .first()
        .map(|(_, content)| content.clone())
        .unwrap_or_default();
    let kind = if first.contains("These moves were proposed") {
        PromptKind::Select
    } else if first.contains("how playing felt") {
        PromptKind::Felt
    } else if first.contains("different actions from this list") {
        PromptKind::Alternatives
    } else {
        PromptKind::Move
    };
    Some(Seen {
        authorization: request.authorization,
        prompt: first,
        last,
        kind,
        format: request.body["response_format"].clone(),
    })
}

/// The actions a move prompt lists (the default prompt's list).
fn listed(prompt: &str) -> Vec<String> {
    let Some((_, rest)) = prompt.split_once("The actions you can take:\n") else {
        return Vec::new();
    };
    rest.lines()
        .take_while(|l| l.starts_with("- "))
        .map(|l| l[2..].to_owned())
        .collect()
}

/// The proposals a selector prompt lists.
fn proposed(prompt: &str) -> Vec<String> {
    let Some((_, rest)) = prompt.split_once("These moves were proposed:\n") else {
        return Vec::new();
    };
    rest.lines()
        .take_while(|l| l.starts_with("- "))
        .map(|l| l[2..].to_owned())
        .collect()
}

/// The moves a prompt's history shows.
fn history_lines(prompt: &str) -> usize {
    prompt
        .split_once("Your last moves, oldest first:\n")
        .map_or(0, |(_, rest)| {
            rest.lines().take_while(|l| l.starts_with("- ")).count()
        })
}

struct Player<'a> {
    url: &'a str,
    extra: &'a str,
}

fn plan(controllers: &str, patience: u64, budget: &str, player: &Player<'_>) -> String {
    format!(
        r#"version = 1
name = "thinking"
controllers = [{controllers}]

[game]
id = "maze"
command = ["builtin:maze"]

[budget]
{budget}

[[personas]]
slug = "veteran"
card = "A grumpy veteran of text adventures who reads every sign."
patience = {patience}
player = {{ kind = "llm", model = "house-model", base_url = "{url}", api_key = "{{{{ secret('MODEL_KEY') }}}}", price = {{ input_per_mtok = 1.0, output_per_mtok = 4.0 }}{extra} }}

[[steps]]
id = "play"
kind = "play"
matrix = {{ persona = "*", controller = "*" }}
"#,
        url = player.url,
        extra = player.extra,
    )
}

fn repo(plan_text: &str) -> Test {
    Test::new()
        .file("plan.toml", plan_text)
        .env("MODEL_KEY", CANARY)
}

/// The report.json of every play cell, in the order of the run's steps
/// (each step's log is its report.md, whatever the step's state).
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

/// The actions of a cell's trace, in order.
fn trace_actions(t: &Test, report_json_dir: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(report_json_dir.join("trace.jsonl")).expect("trace");
    let _ = t;
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v["action"].as_str().map(str::to_owned))
        .collect()
}

/// Every raw answer is in the transcript with how it was read.
fn raw_answers_are_kept(turns: &[serde_json::Value]) {
    let first = &turns[0]["model"][0];
    assert_eq!(first["call"], "move", "{first:#}");
    assert!(
        first["answer"]
            .as_str()
            .is_some_and(|a| a.starts_with("I'll try")),
        "{first:#}"
    );
    assert_eq!(first["read"], serde_json::json!(["north"]), "{first:#}");
}

/// The turn lines of a cell's transcript (those with an action), in order.
fn transcript_turns(dir: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join("transcript.jsonl"))
        .expect("transcript")
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["action"].is_string())
        .collect()
}

fn cell_dir(t: &Test, doc: &serde_json::Value, controller: &str) -> std::path::PathBuf {
    let step = doc["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .find(|s| {
            s["id"]
                .as_str()
                .is_some_and(|id| id.contains(&format!(",{controller}]")))
        })
        .unwrap_or_else(|| panic!("no {controller} cell in {doc:#}"));
    let md = step["log"].as_str().expect("the cell's report.md");
    t.path(md).parent().expect("dir").to_path_buf()
}

#[test]
fn llm_plays_the_actions_the_model_names_and_keeps_its_key_secret() {
    // The model names a listed action a different way each turn (quotes,
    // words around it, upper case); the felt paragraph echoes the key, as
    // a careless proxy might.
    let named = Arc::new(Mutex::new(Vec::<String>::new()));
    let noted = named.clone();
    let server = ModelServer::start(Box::new(move |n, seen| {
        if seen.kind == PromptKind::Felt {
            return Reply::Text(
                format!("Dusty halls, but I liked reading the signs. (debug: {CANARY})"),
                300,
                40,
            );
        }
        // Doors only: the model wanders and never takes, uses or wins.
        let actions: Vec<String> = listed(&seen.prompt)
            .into_iter()
            .filter(|a| ["north", "east", "south", "west"].contains(&a.as_str()))
            .collect();
        let action = actions[n % actions.len()].clone();
        noted.lock().unwrap().push(action.clone());
        let text = match n % 3 {
            0 => format!("I'll try \"{action}\"."),
            1 => action.to_uppercase(),
            _ => format!("`{action}`"),
        };
        Reply::Text(text, 500, 5)
    }));
    let t = repo(&plan(
        "\"standard\"",
        14,
        "max_model_usd = 1.0",
        &Player {
            url: &server.url,
            extra: "",
        },
    ));
    let out = t.run(&["plan", "run", "plan.toml", "--json"]);
    out.code(0);
    let doc = out.json();
    let report = &reports(&t, &doc)[0];
    let dir = cell_dir(&t, &doc, "standard");
    let actions = trace_actions(&t, &dir);
    // A room with one way out asks nobody: the transcript says so.
    let turns = transcript_turns(&dir);
    let unasked: Vec<&serde_json::Value> = turns
        .iter()
        .filter(|turn| turn["model"][0]["no_call"] == "one action listed")
        .collect();
    assert!(
        !unasked.is_empty(),
        "the storeroom has one door: {turns:#?}"
    );
    let asked: Vec<String> = actions
        .iter()
        .zip(&turns)
        .filter(|(_, turn)| turn["model"][0]["no_call"].is_null())
        .map(|(action, _)| action.clone())
        .collect();
    assert_eq!(
        asked,
        *named.lock().unwrap(),
        "the cell took what the model named"
    );
    assert_eq!(report["player"], "llm", "{report:#}");
    assert_eq!(report["quit_reason"], "patience", "{report:#}");
    assert_eq!(report["actions_taken"], 14, "{report:#}");
    // Each asked move and one "How it felt", each counted and priced.
    let moves = 14 - u32::try_from(unasked.len()).expect("few");
    assert_eq!(server.seen().len(), moves as usize + 1);
    assert_eq!(report["model"]["calls"], moves + 1, "{report:#}");
    assert_eq!(report["model"]["reasks"], 0, "{report:#}");
    assert_eq!(report["model"]["fallbacks"], 0, "{report:#}");
    // The fake server takes the schema and answers in prose anyway.
    assert_eq!(report["model"]["structured"], false, "{report:#}");
    assert_eq!(
        report["model"]["input_tokens"],
        moves * 500 + 300,
        "{report:#}"
    );
    let cost = report["model"]["cost_usd"].as_f64().expect("priced");
    let expected =
        (f64::from(moves) * 500.0 + 300.0) / 1e6 + (f64::from(moves) * 5.0 + 40.0) * 4.0 / 1e6;
    assert!((cost - expected).abs() < 1e-9, "{cost} vs {expected}");
    raw_answers_are_kept(&turns);
    let md = std::fs::read_to_string(dir.join("report.md")).expect("report.md");
    let felt = md.split("## How it felt").nth(1).expect("How it felt");
    assert!(
        felt.contains("> Dusty halls, but I liked reading the signs."),
        "{md}"
    );
    // The prompt shows the last moves only: the history limit.
    let last_move = server
        .seen()
        .into_iter()
        .rfind(|s| s.kind == PromptKind::Move)
        .expect("moves");
    assert_eq!(history_lines(&last_move.prompt), 12, "{}", last_move.prompt);
    assert!(
        last_move.prompt.contains("A grumpy veteran"),
        "the card reaches the prompt"
    );
    assert!(felt.contains("[redacted]"), "{md}");
    the_key_went_to_the_server_and_nowhere_else(&t, &server, &out);
}

fn the_key_went_to_the_server_and_nowhere_else(
    t: &Test,
    server: &ModelServer,
    out: &crate::support::Output,
) {
    assert!(
        server
            .seen()
            .iter()
            .all(|s| s.authorization == format!("Bearer {CANARY}")),
        "{:?}",
        server.seen()
    );
    let leaked = files_holding(&t.path(".gameplan"), CANARY);
    assert!(leaked.is_empty(), "the key leaked into {leaked:?}");
    assert!(
        !out.stdout.contains(CANARY) && !out.stderr.contains(CANARY),
        "{out}"
    );
}

#[test]
fn llm_a_model_that_never_names_a_listed_action_is_asked_again_once_then_the_explorer_moves() {
    let server = ModelServer::start(Box::new(|_, seen| {
        if seen.kind == PromptKind::Felt {
            return Reply::Text("I mostly danced.".into(), 10, 5);
        }
        Reply::Text("I would rather dance the tango.".into(), 100, 5)
    }));
    let t = repo(&plan(
        "\"standard\"",
        2,
        "max_model_usd = 1.0",
        &Player {
            url: &server.url,
            extra: "",
        },
    ));
    let out = t.run(&["plan", "run", "plan.toml", "--json"]);
    out.code(0);
    let retry = &server.seen()[1].last;
    assert!(
        retry.contains("names no listed action")
            && retry.contains("- read sign")
            && retry.contains("exactly one action from this list"),
        "the re-ask says what was wrong and repeats the format: {retry}"
    );
    let doc = out.json();
    let report = &reports(&t, &doc)[0];
    assert_eq!(report["quit_reason"], "patience", "{report:#}");
    assert_eq!(report["actions_taken"], 2, "{report:#}");
    // Two calls per asked move (the question and one re-ask), then the
    // explorer's move; "How it felt" is still asked.
    let fallbacks = report["model"]["fallbacks"].as_u64().expect("fallbacks");
    assert!(fallbacks >= 1, "{report:#}");
    assert_eq!(report["model"]["reasks"], fallbacks, "{report:#}");
    assert_eq!(
        server.count(PromptKind::Move) as u64,
        2 * fallbacks,
        "one question and one re-ask per move, no more"
    );
    assert_eq!(server.count(PromptKind::Felt), 1);
    let dir = cell_dir(&t, &doc, "standard");
    let turns = transcript_turns(&dir);
    let first = &turns[0];
    assert_eq!(first["by"], "fallback", "{first:#}");
    assert_eq!(
        first["model"][0]["bad"], "names no listed action",
        "{first:#}"
    );
    assert_eq!(first["model"][1]["reask"], true, "{first:#}");
    assert_eq!(first["model"][2]["fallback"], "explorer", "{first:#}");
    let trace = std::fs::read_to_string(dir.join("trace.jsonl")).expect("trace");
    let labelled = trace
        .lines()
        .filter(|l| l.contains("\"by\":\"fallback\""))
        .count() as u64;
    assert_eq!(labelled, fallbacks, "{trace}");
    let md = std::fs::read_to_string(dir.join("report.md")).expect("report.md");
    assert!(md.contains("fallback"), "{md}");
}

#[test]
fn llm_with_fallback_stop_a_second_bad_answer_ends_the_cell() {
    let server = ModelServer::start(Box::new(|_, _| {
        Reply::Text("I would rather dance the tango.".into(), 100, 5)
    }));
    let t = repo(&plan(
        "\"standard\"",
        10,
        "max_actions = 10",
        &Player {
            url: &server.url,
            extra: ", fallback = \"stop\"",
        },
    ));
    let out = t.run(&["plan", "run", "plan.toml", "--json"]);
    // Partial results: the cell ended on the model, not on the game.
    out.code(2);
    assert_eq!(
        server.seen().len(),
        2,
        "one question and one re-ask, no more"
    );
    let doc = out.json();
    let report = &reports(&t, &doc)[0];
    assert_eq!(report["quit_reason"], "bad_answer", "{report:#}");
    assert_eq!(report["actions_taken"], 0, "{report:#}");
    assert_eq!(report["model"]["reasks"], 1, "{report:#}");
    let detail = report["quit_detail"].as_str().expect("quit_detail");
    assert!(detail.contains("dance the tango"), "{detail}");
    let said = doc["steps"][0]["message"]
        .as_str()
        .expect("the step says why");
    assert!(said.contains("named no listed action"), "{said}");
    let dir = cell_dir(&t, &doc, "standard");
    let transcript = std::fs::read_to_string(dir.join("transcript.jsonl")).expect("transcript");
    assert!(
        transcript.contains("player_error") && transcript.contains("dance the tango"),
        "the raw answers are kept with the error: {transcript}"
    );
}

/// The choice is asked as structured output, a JSON Schema whose `enum` is
/// the listed actions; a server that refuses `OpenAI`'s dialect (422, as
/// llama-cpp-python's does) is asked in its own, and a JSON answer is read.
#[test]
fn llm_asks_for_the_choice_as_a_json_schema_of_the_listed_actions() {
    let server = ModelServer::start(Box::new(|n, seen| {
        if seen.kind == PromptKind::Felt {
            return Reply::Text("Fine.".into(), 10, 5);
        }
        if seen.format["type"] == "json_schema" {
            return Reply::Refuse(422, r#"{"detail":"unknown response_format type"}"#);
        }
        let listed = seen.format["schema"]["properties"]["action"]["enum"].clone();
        let pick = &listed[n % listed.as_array().map_or(1, Vec::len)];
        Reply::Text(serde_json::json!({"action": pick}).to_string(), 100, 8)
    }));
    let t = repo(&plan(
        "\"standard\"",
        5,
        "max_model_usd = 1.0",
        &Player {
            url: &server.url,
            extra: "",
        },
    ));
    let out = t.run(&["plan", "run", "plan.toml", "--json"]);
    out.code(0);
    let seen = server.seen();
    assert_eq!(
        seen[0].format["type"], "json_schema",
        "{:?}",
        seen[0].format
    );
    assert_eq!(
        seen[0].format["json_schema"]["schema"]["properties"]["action"]["enum"],
        serde_json::json!(["north", "east", "south", "west", "read sign", "down"]),
    );
    assert!(
        seen[1..]
            .iter()
            .filter(|s| s.kind == PromptKind::Move)
            .all(|s| s.format["type"] == "json_object"),
        "once refused, the first dialect is not asked again"
    );
    assert!(
        seen.iter()
            .any(|s| s.kind == PromptKind::Felt && s.format.is_null())
    );
    let doc = out.json();
    let report = &reports(&t, &doc)[0];
    assert_eq!(report["actions_taken"], 5, "{report:#}");
    assert_eq!(report["model"]["structured"], true, "{report:#}");
    assert_eq!(report["model"]["reasks"], 0, "{report:#}");
    assert_eq!(report["model"]["retries"], 0, "{report:#}");
}

#[test]
fn llm_usage_past_max_model_usd_stops_the_cell_on_budget_with_exit_2() {
    // 20 000 prompt tokens at 1 USD per million: 0.02 USD a call.
    let server = ModelServer::start(Box::new(|_, seen| {
        Reply::Text(listed(&seen.prompt)[0].clone(), 20_000, 1)
    }));
    let t = repo(&plan(
        "\"standard\"",
        40,
        "max_model_usd = 0.05",
        &Player {
            url: &server.url,
            extra: "",
        },
    ));
    let out = t.run(&["plan", "run", "plan.toml", "--json"]);
    out.code(2);
    // 0.02, 0.04, then a call that fits (0.04 + its bound < 0.05) and passes
    // it: 0.06; nothing after, no "How it felt" either. The storeroom's one
    // door (west) costs no call: two of the five actions were free.
    assert_eq!(server.seen().len(), 3, "{:?}", server.seen());
    let doc = out.json();
    let report = &reports(&t, &doc)[0];
    assert_eq!(report["quit_reason"], "budget", "{report:#}");
    assert_eq!(report["actions_taken"], 5, "{report:#}");
    assert_eq!(report["model"]["stopped_by_budget"], true, "{report:#}");
    assert_eq!(report["model"]["calls"], 3, "{report:#}");
    let said = doc["steps"][0]["message"]
        .as_str()
        .expect("the step says why");
    assert!(
        said.contains("the model budget stopped the cell after 5 actions"),
        "{said}"
    );
    assert_eq!(doc["outcome"], "incomplete", "{doc:#}");
}

#[test]
fn llm_an_endpoint_that_never_answers_is_exit_5_after_the_bounded_retries() {
    let server = ModelServer::start(Box::new(|_, _| Reply::Silent));
    let t = repo(&plan(
        "\"standard\"",
        10,
        "max_actions = 10",
        &Player {
            url: &server.url,
            extra: ", timeout = 1",
        },
    ));
    let started = Instant::now();
    let out = t.run(&["plan", "run", "plan.toml", "--json"]);
    out.code(5);
    // Four attempts of one second, with 0.5 + 1 + 2 s of backoff between.
    assert_eq!(server.seen().len(), 4, "the retry bound");
    assert!(
        started.elapsed() < Duration::from_secs(40),
        "{:?}",
        started.elapsed()
    );
    let doc = out.json();
    let report = &reports(&t, &doc)[0];
    assert_eq!(report["quit_reason"], "model_unreachable", "{report:#}");
    let said = doc["root_cause"].as_str().expect("the run says why");
    assert!(said.contains("never answered after 4 attempt(s)"), "{said}");
    assert!(said.contains("base_url"), "says what to check: {said}");
    // Without --json, the person reads the same.
    let plain = t.run(&["plan", "run", "plan.toml", "--new"]);
    plain.code(5);
    assert!(
        plain.stderr.contains("never answered") || plain.stdout.contains("never answered"),
        "{plain}"
    );
}

#[test]
fn llm_jev_asks_for_alternatives_then_a_separate_selector_and_rune_votes_three_times() {
    // jev: three alternatives, and the selector takes the last one (not
    // what the built-in selector would); rune: votes first, second, first.
    let majority = Arc::new(Mutex::new(Vec::<String>::new()));
    let selected = Arc::new(Mutex::new(Vec::<String>::new()));
    let (m, s) = (majority.clone(), selected.clone());
    let votes = Arc::new(Mutex::new(0usize));
    let server = ModelServer::start(Box::new(move |_, seen| match seen.kind {
        PromptKind::Felt => Reply::Text("Fine.".into(), 10, 2),
        PromptKind::Select => {
            let last = proposed(&seen.prompt).last().cloned().expect("proposals");
            s.lock().unwrap().push(last.clone());
            Reply::Text(format!("I pick {last}."), 10, 2)
        }
        PromptKind::Alternatives => {
            let actions = listed(&seen.prompt);
            Reply::Text(actions[..3].join("\n"), 10, 6)
        }
        PromptKind::Move => {
            let actions = listed(&seen.prompt);
            let mut n = votes.lock().unwrap();
            let vote = if *n % 3 == 1 {
                &actions[1]
            } else {
                &actions[0]
            };
            if n.is_multiple_of(3) {
                m.lock().unwrap().push(actions[0].clone());
            }
            *n += 1;
            Reply::Text(vote.clone(), 10, 2)
        }
    }));
    let t = repo(&plan(
        "\"jev\", \"rune\"",
        2,
        "max_model_usd = 1.0",
        &Player {
            url: &server.url,
            extra: "",
        },
    ));
    let out = t.run(&["plan", "run", "plan.toml", "--json", "--concurrency", "1"]);
    out.code(0);
    let doc = out.json();
    assert_eq!(
        server.count(PromptKind::Alternatives),
        2,
        "jev: one proposal call a turn"
    );
    assert_eq!(
        server.count(PromptKind::Select),
        2,
        "jev: one selector call a turn"
    );
    assert_eq!(
        server.count(PromptKind::Move),
        6,
        "rune: three votes a turn"
    );
    assert_eq!(server.count(PromptKind::Felt), 2, "one paragraph a cell");
    assert_eq!(
        trace_actions(&t, &cell_dir(&t, &doc, "jev")),
        *selected.lock().unwrap()
    );
    assert_eq!(
        trace_actions(&t, &cell_dir(&t, &doc, "rune")),
        *majority.lock().unwrap()
    );
    for report in reports(&t, &doc) {
        let calls = if report["controller"] == "jev" { 5 } else { 7 };
        assert_eq!(report["model"]["calls"], calls, "{report:#}");
    }
}

#[test]
fn llm_a_plan_may_name_its_own_prompt_template() {
    let server = ModelServer::start(Box::new(|_, _| Reply::Text("north".into(), 10, 1)));
    let t = repo(&plan(
        "\"standard\"",
        1,
        "max_actions = 1",
        &Player {
            url: &server.url,
            extra: ", prompt_file = \"prompts/terse.j2\"",
        },
    ))
    .file(
        "prompts/terse.j2",
        "You are: {{ persona }}\nSeen: {{ observation.text }}\nPick one of: {{ observation.actions | join(' | ') }}\n",
    );
    let out = t.run(&["plan", "run", "plan.toml", "--json"]);
    out.code(0);
    let first = &server.seen()[0];
    assert!(
        first
            .prompt
            .contains("Pick one of: north | east | south | west | read sign | down"),
        "{}",
        first.prompt
    );
    assert!(
        first.prompt.starts_with("You are: A grumpy veteran"),
        "{}",
        first.prompt
    );
    // An llm cell does not play the same twice: it is never reused.
    let calls = server.seen().len();
    let explain = t.run(&["plan", "explain", "plan.toml"]);
    explain.code(0).stdout_has("does not play the same twice");
    t.run(&["plan", "run", "plan.toml"]).code(0);
    assert_eq!(
        server.seen().len(),
        2 * calls,
        "the second run asked the model again"
    );
}

#[test]
fn llm_plan_check_refuses_an_unpriced_model_under_a_budget_and_a_broken_prompt() {
    let text = r#"version = 1
name = "unpriced"

[game]
id = "maze"
command = ["builtin:maze"]

[budget]
max_model_usd = 2.0

[[personas]]
slug = "local"
card = "Plays on a laptop."
player = { kind = "llm", model = "llama3.2:3b", base_url = "http://127.0.0.1:11434/v1" }

[[personas]]
slug = "broken"
card = "Has a broken prompt."
player = { kind = "llm", model = "gpt-4o-mini", prompt_file = "prompt.j2" }

[[steps]]
id = "play"
kind = "play"
matrix = { persona = "*" }
"#;
    let t = Test::new()
        .file("plan.toml", text)
        .file("prompt.j2", "{% for a in observation.actions %}{{ a }}");
    let check = t.check(&["plan.toml"]);
    check.codes(&["plan::unpriced_model", "plan::invalid_prompt"]);
    let unpriced = check.with_message(
        "persona `local`: model `llama3.2:3b` has no price, so `max_model_usd = 2` cannot bound what it spends",
    );
    at(unpriced, text, "\"llama3.2:3b\"").help_has("input_per_mtok");
    let problems = check.problems();
    at(problems[1], text, "\"prompt.j2\"");
    // A price makes it a plan that runs.
    let priced = text.replace(
        "base_url = \"http://127.0.0.1:11434/v1\" }",
        "base_url = \"http://127.0.0.1:11434/v1\", price = { input_per_mtok = 0, output_per_mtok = 0 } }",
    );
    t.write("plan.toml", &priced);
    t.write("prompt.j2", "{{ persona }}");
    t.check(&["plan.toml"]).codes(&[]);
    // The prompt file's size limit: 64 KiB is read, one byte more is not.
    t.write("prompt.j2", "p".repeat(64 * 1024));
    t.check(&["plan.toml"]).codes(&[]);
    t.write("prompt.j2", "p".repeat(64 * 1024 + 1));
    let check = t.check(&["plan.toml"]);
    let too_large = check.only("plan::file_too_large");
    at(too_large, &priced, "\"prompt.j2\"");
    // The answer settings: a fallback nobody knows, a "How it felt" with
    // no time or no room for a sentence; each at its value.
    t.write("prompt.j2", "{{ persona }}");
    let settings = priced.replace(
        "prompt_file = \"prompt.j2\" }",
        "prompt_file = \"prompt.j2\", fallback = \"explore\", felt_timeout = 0, felt_max_tokens = 8 }",
    );
    t.write("plan.toml", &settings);
    let check = t.check(&["plan.toml"]);
    check.codes(&[
        "plan::unknown_value",
        "plan::invalid_timeout",
        "plan::invalid_value",
    ]);
    let problems = check.problems();
    at(problems[0], &settings, "\"explore\"").help_has("explorer");
    at(problems[1], &settings, "0, felt_max_tokens")
        .message("`felt_timeout` must be at least 1 second");
    at(problems[2], &settings, "8 }").message("`felt_max_tokens = 8` is out of range (16..=4096)");
    let fine = settings
        .replace("\"explore\"", "\"stop\"")
        .replace("felt_timeout = 0", "felt_timeout = 300")
        .replace(
            "felt_max_tokens = 8",
            "felt_max_tokens = 16, structured = false",
        );
    t.write("plan.toml", &fine);
    t.check(&["plan.toml"]).codes(&[]);
}

#[test]
fn llm_pools_llm_bounds_the_model_requests_in_flight_across_cells() {
    let plan_with = |pool: u32| {
        plan(
            "\"standard\", \"jev\", \"rune\"",
            3,
            &format!("max_actions = 3\n\n[pools]\nplay = 3\nllm = {pool}"),
            &Player {
                url: "URL",
                extra: "",
            },
        )
    };
    let answer = || -> Script {
        Box::new(|_, seen| match seen.kind {
            PromptKind::Select => Reply::Text(proposed(&seen.prompt)[0].clone(), 10, 1),
            PromptKind::Felt => Reply::Text("Fine.".into(), 10, 1),
            PromptKind::Alternatives => {
                let actions = listed(&seen.prompt);
                Reply::Text(actions[..actions.len().min(2)].join("\n"), 10, 1)
            }
            PromptKind::Move => Reply::Text(listed(&seen.prompt)[0].clone(), 10, 1),
        })
    };
    let server = ModelServer::answering_after(answer(), Duration::from_millis(150));
    let t = repo(&plan_with(1).replace("URL", &server.url));
    t.run(&["plan", "run", "plan.toml", "--concurrency", "3"])
        .code(0);
    // Three cells of three turns, rune's of three calls a turn; the third
    // turn, in the storeroom with its one door, asks nobody.
    assert_eq!(server.count(PromptKind::Move), 2 + 2 * 3);
    assert_eq!(server.count(PromptKind::Felt), 3);
    assert_eq!(server.most_at_once(), 1, "llm = 1 let requests overlap");

    let server = ModelServer::answering_after(answer(), Duration::from_millis(150));
    t.write("plan.toml", plan_with(3).replace("URL", &server.url));
    t.run(&["plan", "run", "plan.toml", "--concurrency", "3"])
        .code(0);
    assert!(
        server.most_at_once() > 1,
        "three cells at once never overlapped"
    );
    assert!(server.most_at_once() <= 3);
}

#[test]
fn llm_ctrl_c_while_the_model_is_silent_stops_the_cell_at_once() {
    // A 30 s timeout and four attempts: without the cancel, two minutes.
    let server = ModelServer::start(Box::new(|_, _| Reply::Silent));
    let t = repo(&plan(
        "\"standard\"",
        10,
        "max_actions = 10",
        &Player {
            url: &server.url,
            extra: ", timeout = 30",
        },
    ));
    let gameplan = t.spawn(&["plan", "run", "plan.toml"]);
    wait_until("the model was asked", Duration::from_secs(30), || {
        !server.seen().is_empty()
    });
    let asked = Instant::now();
    gameplan.signal(Signal::SIGINT);
    let out = gameplan.wait();
    out.code(10);
    assert!(
        asked.elapsed() < Duration::from_secs(10),
        "the interrupt waited for the model: {:?}",
        asked.elapsed()
    );
    assert_eq!(server.seen().len(), 1, "no retry after the interrupt");
    let text = format!("{}{}", out.stdout, out.stderr);
    assert!(text.contains("resume"), "{out}");
}

/// The shipped example web game, with an `llm` persona instead of the
/// explorer: the thinking half and the browser half behind the same seam.
#[test]
fn llm_plays_the_example_web_game_in_chromium_and_finds_its_console_error() {
    let example = |rel: &str| {
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(rel))
            .unwrap_or_else(|e| panic!("read {rel}: {e}"))
    };
    // The model goes for the chest whenever it is offered.
    let server = ModelServer::start(Box::new(|_, seen| {
        if seen.kind == PromptKind::Felt {
            return Reply::Text("That chest threw an error at me.".into(), 10, 5);
        }
        let actions = listed(&seen.prompt);
        let pick = actions
            .iter()
            .find(|a| a.contains("Open chest"))
            .unwrap_or(&actions[0]);
        Reply::Text(format!("I click \"{pick}\"."), 10, 2)
    }));
    let plan = example("examples/web.toml").replace(
        "player = { kind = \"explorer\" }\npatience = 40",
        &format!(
            "player = {{ kind = \"llm\", model = \"house-model\", base_url = \"{}\", api_key = \"{{{{ secret('MODEL_KEY') }}}}\", price = {{ input_per_mtok = 1.0, output_per_mtok = 1.0 }} }}\npatience = 6",
            server.url
        ),
    );
    assert!(
        plan.contains("kind = \"llm\""),
        "the example's persona changed"
    );
    let t = Test::new()
        .file(
            "examples/games/web/index.html",
            example("examples/games/web/index.html"),
        )
        .file(
            "examples/games/web/game.js",
            example("examples/games/web/game.js"),
        )
        .file("examples/web.toml", plan)
        .env("MODEL_KEY", CANARY);
    let out = t.run(&["plan", "run", "examples/web.toml", "--json"]);
    out.code(0);
    let doc = out.json();
    let report = &reports(&t, &doc)[0];
    assert_eq!(report["player"], "llm", "{report:#}");
    let findings = report["findings"].as_array().expect("findings");
    assert!(
        findings.iter().any(|f| f["category"] == "console"),
        "the model's clicks found the console error: {report:#}"
    );
    assert_eq!(
        report["model"]["calls"].as_u64(),
        Some(report["actions_taken"].as_u64().expect("actions") + 1),
        "a call a move, and one for How it felt: {report:#}"
    );
    assert!(files_holding(&t.path(".gameplan"), CANARY).is_empty());
}

#[test]
fn llm_the_aggregate_quotes_each_llm_personas_how_it_felt_in_its_own_voice() {
    let server = ModelServer::start(Box::new(|_, seen| {
        if seen.kind == PromptKind::Felt {
            let voice = if seen.prompt.contains("grumpy veteran") {
                "Too many corridors.\nThe signs were the only kind thing here."
            } else {
                "I clicked north a lot and it was FUN!"
            };
            return Reply::Text(voice.into(), 100, 20);
        }
        Reply::Text(listed(&seen.prompt)[0].clone(), 100, 2)
    }));
    let llm = |slug: &str, card: &str| {
        format!(
            "[[personas]]\nslug = \"{slug}\"\ncard = \"{card}\"\npatience = 3\n\
             player = {{ kind = \"llm\", model = \"house-model\", base_url = \"{}\", \
             api_key = \"{{{{ secret('MODEL_KEY') }}}}\", price = {{ input_per_mtok = 1.0, \
             output_per_mtok = 4.0 }} }}\n",
            server.url
        )
    };
    let plan = format!(
        "version = 1\nname = \"voices\"\n\n[game]\nid = \"maze\"\ncommand = [\"builtin:maze\"]\n\n\
         {}\n{}\n[[personas]]\nslug = \"walker\"\ncard = \"Walks.\"\npatience = 3\n\
         player = {{ kind = \"explorer\" }}\n\n\
         [[steps]]\nid = \"play\"\nkind = \"play\"\nmatrix = {{ persona = \"*\" }}\n\n\
         [[steps]]\nid = \"aggregate\"\nkind = \"aggregate\"\nneeds = [\"play\"]\n",
        llm("veteran", "A grumpy veteran who reads every sign."),
        llm("kid", "Nine years old, clicks everything."),
    );
    let t = repo(&plan);
    let out = t.run(&["plan", "run", "plan.toml", "--json"]);
    out.code(0);
    let run = t.run_ids().pop().expect("a run");
    let dir = t.path(&format!(".gameplan/runs/{run}/steps/aggregate"));
    let md = std::fs::read_to_string(dir.join("aggregate.md")).expect("aggregate.md");
    let felt = md
        .split("## How it felt")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .unwrap_or_else(|| panic!("no How it felt section:\n{md}"));
    let section = |persona: &str| {
        felt.split(&format!("### {persona}\n"))
            .nth(1)
            .and_then(|rest| rest.split("\n### ").next())
            .unwrap_or_else(|| panic!("no section for {persona}:\n{felt}"))
            .to_owned()
    };
    let veteran = section("veteran");
    assert!(
        veteran.contains("  > Too many corridors.\n  > The signs were the only kind thing here."),
        "the veteran's paragraph, every line quoted, under its cell:\n{veteran}"
    );
    assert!(!veteran.contains("FUN"), "{veteran}");
    assert!(
        section("kid").contains("  > I clicked north a lot and it was FUN!"),
        "{felt}"
    );
    let walker = section("walker");
    assert!(
        walker.contains("- With standard") && !walker.contains("  > "),
        "an explorer has no voice to quote, only its line:\n{walker}"
    );
    let json = std::fs::read_to_string(dir.join("aggregate.json")).expect("aggregate.json");
    assert!(
        json.contains("I clicked north a lot and it was FUN!"),
        "aggregate.json carries the voice too"
    );
}

/// `gameplan play --player llm` against `server`, the maze as the game,
/// with `more` flags.
fn play_llm(t: &Test, url: &str, more: &[&str]) -> crate::support::Output {
    let mut args = vec![
        "play",
        "--player",
        "llm",
        "--model",
        "house-model",
        "--base-url",
        url,
        "--out",
        "cell",
    ];
    args.extend(more);
    args.extend(["--", "builtin:maze"]);
    t.run(&args)
}

#[test]
fn play_cli_llm_plays_one_cell_with_the_key_from_the_environment_and_writes_it_nowhere() {
    let server = ModelServer::start(Box::new(|_, seen| {
        if seen.kind == PromptKind::Felt {
            return Reply::Text(format!("Dark halls. (debug: {CANARY})"), 200, 20);
        }
        Reply::Text(format!("I go {}", listed(&seen.prompt)[0]), 100, 3)
    }));
    let t = Test::new().env("GAMEPLAN_LLM_KEY", CANARY);
    let out = play_llm(
        &t,
        &server.url,
        &[
            "--card",
            "A grumpy veteran who reads every sign.",
            "--patience",
            "4",
            "--price-input",
            "1",
            "--price-output",
            "4",
            "--max-model-usd",
            "1",
        ],
    );
    out.code(0).stdout_has("patience after 4 actions");
    let seen = server.seen();
    // north, east, west (the storeroom's one door: no call), east.
    assert_eq!(seen.len(), 4, "3 asked moves and How it felt: {seen:?}");
    assert!(
        seen.iter()
            .all(|s| s.authorization == format!("Bearer {CANARY}")),
        "the key from GAMEPLAN_LLM_KEY went to the endpoint"
    );
    assert!(seen[0].prompt.contains("A grumpy veteran"), "the card");
    let report: serde_json::Value =
        serde_json::from_str(&t.read("cell/report.json")).expect("report.json");
    assert_eq!(report["player"], "llm", "{report:#}");
    assert_eq!(report["model"]["calls"], 4, "{report:#}");
    let cost = report["model"]["cost_usd"]
        .as_f64()
        .expect("priced by the flags");
    let expected = (3.0 * 100.0 + 200.0) / 1e6 + (3.0 * 3.0 + 20.0) * 4.0 / 1e6;
    assert!((cost - expected).abs() < 1e-9, "{cost} vs {expected}");
    assert!(
        t.read("cell/report.md")
            .contains("> Dark halls. (debug: [redacted])"),
        "{}",
        t.read("cell/report.md")
    );
    let leaked = files_holding(&t.path("cell"), CANARY);
    assert!(leaked.is_empty(), "the key leaked into {leaked:?}");
    assert!(
        !out.stdout.contains(CANARY) && !out.stderr.contains(CANARY),
        "{out}"
    );
}

#[test]
fn play_cli_llm_reads_the_key_from_the_variable_it_is_told_and_refuses_an_unset_one() {
    let server = ModelServer::start(Box::new(|_, seen| {
        Reply::Text(
            listed(&seen.prompt).first().cloned().unwrap_or_default(),
            10,
            1,
        )
    }));
    let t = Test::new()
        .env("STUDIO_MODEL_KEY", "sk-studio-42")
        .env("GAMEPLAN_LLM_KEY", CANARY);
    play_llm(
        &t,
        &server.url,
        &["--api-key-env", "STUDIO_MODEL_KEY", "--patience", "1"],
    )
    .code(0);
    assert!(
        server
            .seen()
            .iter()
            .all(|s| s.authorization == "Bearer sk-studio-42"),
        "{:?}",
        server.seen()
    );
    let asked = server.seen().len();
    let out = play_llm(&t, &server.url, &["--api-key-env", "NOT_SET_ANYWHERE"]);
    out.code(3)
        .stderr_has("NOT_SET_ANYWHERE")
        .stderr_has("nothing was played or sent");
    assert_eq!(server.seen().len(), asked, "no request without the key");
}

#[test]
fn play_cli_llm_flags_that_make_no_cell_are_exit_3_before_anything_is_sent() {
    let server = ModelServer::start(Box::new(|_, _| Reply::Text("north".into(), 1, 1)));
    let t = Test::new();
    let no_model = t.run(&[
        "play",
        "--player",
        "llm",
        "--out",
        "c",
        "--",
        "builtin:maze",
    ]);
    no_model.code(3).stderr_has("needs --model");
    let wrong_player = t.run(&[
        "play",
        "--player",
        "explorer",
        "--model",
        "m",
        "--out",
        "c",
        "--",
        "builtin:maze",
    ]);
    wrong_player
        .code(3)
        .stderr_has("--model only apply to `--player llm`");
    let unpriced = play_llm(&t, &server.url, &["--max-model-usd", "0.5"]);
    unpriced
        .code(3)
        .stderr_has("`house-model` has no known price")
        .stderr_has("--price-input");
    let half_price = play_llm(&t, &server.url, &["--price-input", "1"]);
    half_price.code(3).stderr_has("--price-output");
    assert!(server.seen().is_empty(), "nothing was sent");
}

#[test]
fn play_cli_llm_exit_codes_say_how_the_model_ended_the_cell() {
    // A model that never names a listed action: the explorer moves for it
    // and the cell plays to its patience; with `--fallback stop`, partial
    // results, exit 2.
    let tango = ModelServer::start(Box::new(|_, _| Reply::Text("The tango!".into(), 10, 1)));
    let t = Test::new();
    play_llm(&t, &tango.url, &["--patience", "2"]).code(0);
    let played: serde_json::Value =
        serde_json::from_str(&t.read("cell/report.json")).expect("report.json");
    assert_eq!(played["model"]["fallbacks"], 2, "{played:#}");
    let asked = tango.seen().len();
    play_llm(&t, &tango.url, &["--fallback", "stop"])
        .code(2)
        .stderr_has("the player stopped");
    assert_eq!(tango.seen().len() - asked, 2, "one question, one re-ask");
    // Past --max-model-usd: stopped on budget, exit 2.
    let dear = ModelServer::start(Box::new(|_, seen| {
        Reply::Text(listed(&seen.prompt)[0].clone(), 20_000, 1)
    }));
    play_llm(
        &t,
        &dear.url,
        &[
            "--price-input",
            "1",
            "--price-output",
            "1",
            "--max-model-usd",
            "0.05",
        ],
    )
    .code(2)
    .stdout_has("budget after 5 actions");
    // Nobody listens there: the endpoint never answered, exit 5.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}/v1", closed.local_addr().expect("addr"));
    drop(closed);
    play_llm(&t, &url, &[]).code(5);
}

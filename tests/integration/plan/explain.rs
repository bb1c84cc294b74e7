//! `plan explain` and `plan graph`: expansion of matrices, `per`, fan-in,
//! `always` and the default pipeline; `--var`; size limits; secrets.

use std::fmt::Write;
use std::path::Path;
use std::time::Duration;

use serde_json::json;

use crate::support::{Test, explained, ids};

const PROMPTLY: Duration = Duration::from_secs(5);

/// Two personas, two controllers, a seed axis; `per`, fan-in and `always`.
const MATRIX: &str = r#"version = 1
name = "matrix"
controllers = ["standard", "jev"]

[game]
id = "maze"
command = ["builtin:maze"]

[[personas]]
slug = "curious-kid"
card = "Clicks everything."

[[personas]]
slug = "grumpy-veteran"
card = "Skips tutorials."

[[steps]]
id = "build"
kind = "command"
run = "make game"

[[steps]]
id = "play"
kind = "play"
needs = ["build"]
matrix = { persona = "*", controller = "*", seed = [1, 2] }

[[steps]]
id = "deliver"
kind = "deliver"
per = "play"
needs = ["play", "build"]

[[steps]]
id = "report"
kind = "aggregate"
needs = ["deliver"]

[[steps]]
id = "notify"
kind = "command"
run = "echo done"
needs = ["report"]
always = true
"#;

/// The cells of `play` in MATRIX, first axis slowest.
const CELLS: [&str; 8] = [
    "curious-kid,standard,1",
    "curious-kid,standard,2",
    "curious-kid,jev,1",
    "curious-kid,jev,2",
    "grumpy-veteran,standard,1",
    "grumpy-veteran,standard,2",
    "grumpy-veteran,jev,1",
    "grumpy-veteran,jev,2",
];

fn explain_json(t: &Test, plan: &str, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["plan", "explain", "--json", plan];
    args.extend_from_slice(extra);
    t.run(&args).code(0).json()
}

fn strings(items: &[String]) -> Vec<&str> {
    items.iter().map(String::as_str).collect()
}

#[test]
fn matrix_cells_have_stable_ids_in_a_stable_order() {
    let t = Test::new().file("plan.toml", MATRIX);
    let doc = explain_json(&t, "plan.toml", &[]);
    let mut expected = vec!["build".to_owned()];
    expected.extend(CELLS.iter().map(|c| format!("play[{c}]")));
    expected.extend(CELLS.iter().map(|c| format!("deliver[{c}]")));
    expected.extend(["report".to_owned(), "notify".to_owned()]);
    assert_eq!(ids(&doc), expected);
    // Run again: the same bytes.
    let first = t.run(&["plan", "explain", "--json", "plan.toml"]);
    let second = t.run(&["plan", "explain", "--json", "plan.toml"]);
    assert_eq!(first.stdout, second.stdout);
    // Each cell says which values it stands for, axes in the order written.
    let play = &doc["steps"][3];
    assert_eq!(play["id"], "play[curious-kid,jev,1]");
    assert_eq!(play["step"], "play");
    assert_eq!(play["kind"], "play");
    assert_eq!(
        play["cell"],
        json!({"persona": "curious-kid", "controller": "jev", "seed": "1"})
    );
    assert_eq!(
        serde_json::to_string(&play["cell"]).unwrap(),
        r#"{"persona":"curious-kid","controller":"jev","seed":"1"}"#
    );
    assert_eq!(play["needs"], json!(["build"]));
    assert_eq!(play["action"], "run");
}

#[test]
fn per_instances_need_only_their_own_cell() {
    let t = Test::new().file("plan.toml", MATRIX);
    let doc = explain_json(&t, "plan.toml", &[]);
    let steps = explained(&doc);
    for cell in CELLS {
        let id = format!("deliver[{cell}]");
        let (_, needs) = steps
            .iter()
            .find(|(i, _)| *i == id)
            .unwrap_or_else(|| panic!("no {id}"));
        // Its own play cell (and `build`), never the other seven cells,
        // even though it also lists `play` under `needs`.
        assert_eq!(strings(needs), ["build", &format!("play[{cell}]")], "{id}");
    }
    let deliver = doc["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == "deliver[grumpy-veteran,jev,2]")
        .unwrap();
    assert_eq!(
        deliver["cell"],
        json!({"persona": "grumpy-veteran", "controller": "jev", "seed": "2"})
    );
}

#[test]
fn needing_a_matrix_step_means_needing_every_cell() {
    let t = Test::new().file("plan.toml", MATRIX);
    let steps = explained(&explain_json(&t, "plan.toml", &[]));
    let (_, needs) = steps.iter().find(|(id, _)| id == "report").unwrap();
    let expected: Vec<String> = CELLS.iter().map(|c| format!("deliver[{c}]")).collect();
    assert_eq!(needs, &expected);
}

#[test]
fn always_is_shown_where_it_is_set() {
    let t = Test::new().file("plan.toml", MATRIX);
    let doc = explain_json(&t, "plan.toml", &[]);
    let always: Vec<&str> = doc["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["always"] == true)
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(always, ["notify"]);
    let text = t.run(&["plan", "explain", "plan.toml"]);
    text.code(0).stdout_has("plan `matrix`: 19 steps\n");
    let notify: Vec<&str> = text
        .stdout
        .lines()
        .find(|l| l.trim_start().starts_with("notify "))
        .expect("a line for notify")
        .split_whitespace()
        .collect();
    assert_eq!(
        notify,
        ["notify", "command", "run", "(always)", "needs", "report"]
    );
    assert_eq!(text.stdout.matches("(always)").count(), 1, "{text}");
}

const DEFAULT_PIPELINE: &str = r#"version = 1
name = "nightly"
controllers = ["standard", "jev"]

[game]
id = "maze"
command = ["builtin:maze"]

[[personas]]
slug = "kid"
card = "Clicks everything."

[[personas]]
slug = "vet"
card_file = "personas/vet.md"

[[lenses]]
name = "crashes"
kind = "rule"
over = "findings"
when = "unit.category == 'crash'"

[[gates]]
name = "blockers"
lenses = ["crashes"]

[[gates]]
name = "experience"
lenses = ["crashes"]
"#;

#[test]
fn the_default_pipeline_when_steps_are_omitted() {
    let t = Test::new()
        .file("plan.toml", DEFAULT_PIPELINE)
        .file("personas/vet.md", "Skips tutorials.");
    let doc = explain_json(&t, "plan.toml", &[]);
    let cells = ["kid,standard", "kid,jev", "vet,standard", "vet,jev"];
    let mut expected: Vec<(String, Vec<String>)> = vec![
        ("estimate".into(), vec![]),
        ("register".into(), vec!["estimate".into()]),
    ];
    for c in cells {
        expected.push((format!("play[{c}]"), vec!["register".into()]));
    }
    for c in cells {
        expected.push((format!("deliver[{c}]"), vec![format!("play[{c}]")]));
    }
    expected.push((
        "aggregate".into(),
        cells.iter().map(|c| format!("deliver[{c}]")).collect(),
    ));
    expected.push(("gate[blockers]".into(), vec!["aggregate".into()]));
    expected.push(("gate[experience]".into(), vec!["gate[blockers]".into()]));
    expected.push(("finish".into(), vec!["gate[experience]".into()]));
    assert_eq!(explained(&doc), expected);
    let kinds: Vec<&str> = doc["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "estimate",
            "register",
            "play",
            "play",
            "play",
            "play",
            "deliver",
            "deliver",
            "deliver",
            "deliver",
            "aggregate",
            "gate",
            "gate",
            "finish"
        ]
    );
    // Only `finish` is always-on.
    for step in doc["steps"].as_array().unwrap() {
        assert_eq!(step["always"], step["id"] == "finish", "{step}");
    }
}

#[test]
fn the_default_pipeline_without_gates_goes_from_aggregate_to_finish() {
    let plan = "version = 1\nname = \"bare\"\n\n[game]\nid = \"maze\"\ncommand = [\"builtin:maze\"]\n\n[[personas]]\nslug = \"kid\"\ncard = \"x\"\n";
    let t = Test::new().file("plan.toml", plan);
    let steps = explained(&explain_json(&t, "plan.toml", &[]));
    let steps: Vec<(&str, Vec<&str>)> = steps
        .iter()
        .map(|(id, needs)| (id.as_str(), strings(needs)))
        .collect();
    assert_eq!(
        steps,
        [
            ("estimate", vec![]),
            ("register", vec!["estimate"]),
            ("play[kid,standard]", vec!["register"]),
            ("deliver[kid,standard]", vec!["play[kid,standard]"]),
            ("aggregate", vec!["deliver[kid,standard]"]),
            ("finish", vec!["aggregate"]),
        ]
    );
}

#[test]
fn given_steps_are_exactly_what_runs() {
    // No estimate, register or finish is added to a plan that lists steps.
    let plan = "version = 1\nname = \"local\"\n\n[[steps]]\nid = \"build\"\nkind = \"command\"\nrun = \"make\"\n";
    let t = Test::new().file("plan.toml", plan);
    assert_eq!(ids(&explain_json(&t, "plan.toml", &[])), ["build"]);
}

/// Copies a file of this repository into the test repo, at the same path.
fn from_repo(t: Test, path: &str) -> Test {
    let text = std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join(path))
        .unwrap_or_else(|e| panic!("read {path}: {e}"));
    t.file(path, text)
}

#[test]
fn the_demo_plan_means_the_same_in_toml_and_yaml() {
    let t = [
        "plans/demo.toml",
        "plans/demo.yaml",
        "examples/personas/veteran.md",
    ]
    .into_iter()
    .fold(Test::new(), from_repo);
    let toml = t.run(&["plan", "explain", "--json", "plans/demo.toml"]);
    let yaml = t.run(&["plan", "explain", "--json", "plans/demo.yaml"]);
    assert_eq!(toml.code(0).stdout, yaml.code(0).stdout);
    // estimate, register, 4 play cells, 4 deliveries, aggregate, 2 gates, finish.
    assert_eq!(toml.json()["steps"].as_array().unwrap().len(), 14);
    for args in [
        &["plan", "explain"][..],
        &["plan", "graph", "--format", "text"],
        &["plan", "graph", "--format", "dot"],
        &["plan", "graph", "--format", "mermaid"],
    ] {
        let run = |file| {
            let mut a = args.to_vec();
            a.push(file);
            t.run(&a).code(0).stdout.clone()
        };
        assert_eq!(run("plans/demo.toml"), run("plans/demo.yaml"), "{args:?}");
    }
}

#[test]
fn every_plan_in_the_repo_checks_ok() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut plans = Vec::new();
    for dir in ["plans", "examples"] {
        for entry in walkdir::WalkDir::new(root.join(dir)) {
            let entry = entry.unwrap();
            let path = entry.path().strip_prefix(root).unwrap().to_owned();
            // examples/ci/ holds CI workflows, not plans.
            if path.starts_with("examples/ci") {
                continue;
            }
            if matches!(
                path.extension().and_then(|e| e.to_str()),
                Some("toml" | "yaml" | "yml")
            ) {
                plans.push(path.to_string_lossy().into_owned());
            }
        }
    }
    assert!(plans.iter().any(|p| p == "plans/demo.toml"), "{plans:?}");
    let t = plans.iter().fold(Test::new(), |t, p| from_repo(t, p));
    let t = from_repo(t, "examples/personas/veteran.md");
    let t = from_repo(t, "examples/lenses/code-review.md");
    // A browser game's page must exist (plan check says so otherwise).
    let t = from_repo(t, "examples/games/web/index.html");
    let t = from_repo(t, "examples/games/2048/index.html");
    let files: Vec<&str> = plans.iter().map(String::as_str).collect();
    let check = t.check(&files);
    assert!(check.problems().is_empty(), "{}", check.text);
    check.json.code(0);
}

const VARS: &str = r#"version = 1
name = "vars"

[vars]
seed = 7
label = "nightly"

[[steps]]
id = "sim"
kind = "command"
run = "echo {{ vars.label }}"
matrix = { seed = ["{{ vars.seed }}", "100"] }
"#;

#[test]
fn var_overrides_a_plan_variable() {
    let t = Test::new().file("plan.toml", VARS);
    assert_eq!(
        ids(&explain_json(&t, "plan.toml", &[])),
        ["sim[7]", "sim[100]"]
    );
    assert_eq!(
        ids(&explain_json(&t, "plan.toml", &["--var", "seed=9"])),
        ["sim[9]", "sim[100]"]
    );
    // The last of repeated overrides wins; values may hold `=`.
    assert_eq!(
        ids(&explain_json(
            &t,
            "plan.toml",
            &["--var", "seed=9", "--var", "seed=a=b"]
        )),
        ["sim[a=b]", "sim[100]"]
    );
    t.check(&["plan.toml"]).json.code(0);
}

#[test]
fn var_naming_no_plan_variable_is_an_error_with_a_hint() {
    let t = Test::new().file("plan.toml", VARS);
    let check = t.check(&["plan.toml", "--var", "nope=1"]);
    let p = check.only("plan::unknown_var");
    assert_eq!((p.line, p.column), (None, None));
    p.message("--var nope=1: the plan declares no var `nope`")
        .help("the plan's vars are `seed` or `label`");
    check.rendered(p).summary("plan.toml", 1);

    let check = t.check(&["plan.toml", "--var", "sed=1"]);
    check.only("plan::unknown_var").help("did you mean `seed`?");

    for command in ["explain", "graph"] {
        t.run(&["plan", command, "plan.toml", "--var", "nope=1"])
            .code(3)
            .stderr_has("plan::unknown_var")
            .stderr_has("--var nope=1: the plan declares no var `nope`")
            .stderr_has("nothing was run or charged");
    }
}

#[test]
fn a_plan_expanding_past_10000_steps_is_refused_quickly() {
    // 101 × 100 = 10,100 cells; and 1000³ = a billion, which must be refused
    // by arithmetic, never allocated.
    let axis = |n: usize| (0..n).map(|i| i.to_string()).collect::<Vec<_>>().join(", ");
    for (matrix, count) in [
        (
            format!("{{ a = [{}], b = [{}] }}", axis(101), axis(100)),
            10_100,
        ),
        (
            format!("{{ a = [{0}], b = [{0}], c = [{0}] }}", axis(1000)),
            1_000_000_000,
        ),
    ] {
        let plan = format!(
            "version = 1\nname = \"huge\"\n\n[[steps]]\nid = \"x\"\nkind = \"command\"\nrun = \"true\"\nmatrix = {matrix}\n"
        );
        let t = Test::new().file("plan.toml", &plan);
        let check = t.check(&["plan.toml"]);
        let p = check.only("plan::too_many_steps");
        p.at(8, 1)
            .message("the plan expands to more than 10000 steps")
            .label(&format!("{count} instances of `x`"))
            .help("split the plan, or make the matrices smaller");
        check.rendered(p);
        assert!(check.json.elapsed < PROMPTLY, "{}", check.json);
        for command in ["explain", "graph"] {
            let out = t.run(&["plan", command, "plan.toml"]);
            out.code(3).stderr_has("plan::too_many_steps");
            assert!(out.elapsed < PROMPTLY, "{out}");
            assert!(out.stdout.is_empty(), "{out}");
        }
    }
}

#[test]
fn a_plan_of_exactly_10000_steps_expands() {
    let axis = (0..100)
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let plan = format!(
        "version = 1\nname = \"big\"\n\n[[steps]]\nid = \"x\"\nkind = \"command\"\nrun = \"true\"\nmatrix = {{ a = [{axis}], b = [{axis}] }}\n"
    );
    let t = Test::new().file("plan.toml", &plan);
    let check = t.check(&["plan.toml"]);
    check.json.code(0);
    check
        .text
        .stderr_has("plan.toml: ok (plan `big`, 10000 steps)");
    let doc = explain_json(&t, "plan.toml", &[]);
    let ids = ids(&doc);
    assert_eq!(ids.len(), 10_000);
    assert_eq!(
        (ids[0].as_str(), ids[9_999].as_str()),
        ("x[0,0]", "x[99,99]")
    );
}

#[test]
fn the_default_pipeline_past_10000_steps_is_refused() {
    // 1,700 personas × 3 controllers = 5,100 plays and 5,100 deliveries.
    let mut plan = String::from(
        "version = 1\nname = \"crowd\"\ncontrollers = [\"standard\", \"jev\", \"rune\"]\n\n[game]\nid = \"maze\"\ncommand = [\"builtin:maze\"]\n",
    );
    for i in 0..1700 {
        let _ = write!(plan, "\n[[personas]]\nslug = \"p{i}\"\ncard = \"c\"\n");
    }
    let t = Test::new().file("plan.toml", &plan);
    let message = "the plan expands to 10204 steps, more than the limit of 10000";
    let check = t.check(&["plan.toml"]);
    let p = check.only("plan::too_many_steps");
    p.message(message)
        .help("split the plan, or make the matrices smaller");
    check.rendered(p).summary("plan.toml", 1);
    for command in ["explain", "graph"] {
        // The same refusal, said the same way, whichever command meets it.
        let out = t.run(&["plan", command, "plan.toml"]);
        out.code(3)
            .stderr_has("plan::too_many_steps")
            .stderr_has(&format!("plan.toml: {message}"))
            .stderr_has("help: split the plan, or make the matrices smaller")
            .stderr_has("plan.toml: 1 problem found; nothing was run or charged");
        assert!(out.elapsed < PROMPTLY, "{out}");
    }
}

#[test]
fn a_plan_with_too_many_dependencies_is_refused() {
    // 4,000 cells each needing 4,000 cells: 8,000 steps but 16 million edges.
    let axis = (0..4000)
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let plan = format!(
        "version = 1\nname = \"dense\"\n\n[[steps]]\nid = \"x\"\nkind = \"command\"\nrun = \"true\"\nmatrix = {{ a = [{axis}] }}\n\n[[steps]]\nid = \"y\"\nkind = \"command\"\nrun = \"true\"\nneeds = [\"x\"]\nmatrix = {{ a = [{axis}] }}\n"
    );
    let t = Test::new().file("plan.toml", &plan);
    let check = t.check(&["plan.toml"]);
    check.only("plan::too_many_steps").message(
        "the plan's steps depend on each other 16000000 times, more than the limit of 1000000",
    );
    assert!(check.json.elapsed < PROMPTLY, "{}", check.json);
    let out = t.run(&["plan", "explain", "--json", "plan.toml"]);
    out.code(3);
    assert!(out.elapsed < PROMPTLY, "{out}");
}

#[test]
fn graph_formats_are_well_formed() {
    let t = Test::new().file("plan.toml", MATRIX);
    let doc = explain_json(&t, "plan.toml", &[]);
    let steps = explained(&doc);
    let edges: Vec<(String, String)> = steps
        .iter()
        .flat_map(|(id, needs)| needs.iter().map(move |n| (n.clone(), id.clone())))
        .collect();
    assert_eq!(edges.len(), 8 + 16 + 8 + 1);

    // Graphviz: every instance a node, every need an edge `"from" -> "to";`.
    let dot = t.run(&["plan", "graph", "--format", "dot", "plan.toml"]);
    let dot = &dot.code(0).stdout;
    let lines: Vec<&str> = dot.lines().collect();
    assert_eq!(lines[0], "digraph \"matrix\" {");
    assert_eq!(*lines.last().unwrap(), "}");
    assert_eq!(dot.matches('{').count(), dot.matches('}').count());
    let dot_edges: Vec<(String, String)> = lines
        .iter()
        .filter(|l| l.contains(" -> "))
        .map(|l| {
            let l = l.trim().strip_suffix(';').expect("an edge ends with ;");
            let (from, to) = l.split_once(" -> ").unwrap();
            let unquote = |s: &str| serde_json::from_str::<String>(s).expect("a quoted id");
            (unquote(from), unquote(to))
        })
        .collect();
    assert_eq!(dot_edges, edges);
    let dot_nodes = lines.iter().filter(|l| l.contains(" [label=")).count();
    assert_eq!(dot_nodes, steps.len());
    assert!(
        dot.contains("  \"play[curious-kid,jev,1]\" [label=\"play[curious-kid,jev,1]\\nplay\"];\n")
    );

    // Mermaid: a flowchart, nodes labelled with the real ids, `-->` edges.
    let mermaid = t.run(&["plan", "graph", "--format", "mermaid", "plan.toml"]);
    let mermaid = &mermaid.code(0).stdout;
    assert!(mermaid.starts_with("flowchart LR\n"), "{mermaid}");
    let mut label_of = std::collections::HashMap::new();
    let mut mermaid_edges = Vec::new();
    for line in mermaid.lines().skip(1) {
        let line = line.trim();
        if let Some((from, to)) = line.split_once(" --> ") {
            mermaid_edges.push((from.to_owned(), to.to_owned()));
        } else {
            let (node, label) = line.split_once("[\"").expect("a node line");
            let label = label.strip_suffix("\"]").expect("a node label");
            assert!(
                node.starts_with('n') && node[1..].bytes().all(|b| b.is_ascii_digit()),
                "{line}"
            );
            label_of.insert(node.to_owned(), label.to_owned());
        }
    }
    assert_eq!(label_of.len(), steps.len());
    let mermaid_edges: Vec<(String, String)> = mermaid_edges
        .into_iter()
        .map(|(f, t)| (label_of[&f].clone(), label_of[&t].clone()))
        .collect();
    assert_eq!(mermaid_edges, edges);

    // Text: each instance, then what it waits for.
    let text = t.run(&["plan", "graph", "plan.toml"]);
    let text = &text.code(0).stdout;
    assert!(
        text.starts_with("build (command)\nplay[curious-kid,standard,1] (play)\n  <- build\n"),
        "{text}"
    );
    assert_eq!(text.matches("  <- ").count(), edges.len());
}

const SECRET: &str = "s3cr3t-t0k3n-value";

#[test]
fn secrets_never_appear_in_any_output() {
    let plan = r#"version = 1
name = "deploy"

[backend]
kind = "http"
url = "https://api.example"
token = "{{ secret('TOKEN') }}"

[[steps]]
id = "deploy"
kind = "command"
run = "deploy --token {{ secret('TOKEN') }}"
env = { API_TOKEN = "{{ secret('TOKEN') }}" }
matrix = { target = ["{{ secret('TOKEN') }}", "public"] }
"#;
    let t = Test::new().file("plan.toml", plan).env("TOKEN", SECRET);
    // Where a secret surfaces (here in a matrix value, so in an id), it is
    // shown as `[redacted]`.
    let doc = explain_json(&t, "plan.toml", &[]);
    assert_eq!(ids(&doc), ["deploy[[redacted]]", "deploy[public]"]);
    assert_eq!(doc["steps"][0]["cell"], json!({"target": "[redacted]"}));
    for args in [
        &["plan", "explain", "--json", "plan.toml"][..],
        &["plan", "explain", "plan.toml"],
        &["plan", "graph", "plan.toml"],
        &["plan", "graph", "--format", "dot", "plan.toml"],
        &["plan", "graph", "--format", "mermaid", "plan.toml"],
        &["plan", "check", "plan.toml"],
        &["plan", "check", "--json", "plan.toml"],
    ] {
        let out = t.run(args);
        out.code(0);
        assert!(
            !out.stdout.contains(SECRET) && !out.stderr.contains(SECRET),
            "the secret leaked\n{out}"
        );
    }
}

#[test]
fn secrets_never_appear_in_problem_reports() {
    // A secret rendered into a value that is then found wrong must not be
    // quoted back in the message.
    let plan = r#"version = 1
name = "leaky"

[[steps]]
id = "{{ secret('TOKEN') }}"
kind = "command"
run = "true"
cwd = "/{{ secret('TOKEN') }}"
"#;
    let t = Test::new()
        .file("plan.toml", plan)
        .env("TOKEN", "Hunter2 Secret");
    let check = t.check(&["plan.toml"]);
    check.codes(&["plan::invalid_name", "plan::path_escapes_root"]);
    check.with_message("invalid step id `[redacted]`").at(5, 6);
    check
        .with_message("cwd `/[redacted]` is outside the repo")
        .at(8, 7);
    for out in [&check.json, &check.text] {
        assert!(
            !out.stdout.contains("Hunter2") && !out.stderr.contains("Hunter2"),
            "the secret leaked\n{out}"
        );
    }
}

//! Gates: lenses judge units, gates run in order and stop at the
//! first that is not SEND-READY (FIX FIRST exit 1, INCOMPLETE exit 2, the
//! later gates reported not run), a command lens that dies or skips a unit
//! leaves units missing (named), a `when` that fails on a unit leaves it
//! missing, `--junit` has one case per lens × unit, and the verdicts reach
//! the end-of-run summary, `review.json`, `review.md` and GitHub's step
//! summary.

use crate::support::Test;

/// A lens speaking the `command` lens protocol (docs/review.md › Lens kinds:
/// `rule` and `command`). It appends the ids it was sent to `lens.log` (one
/// line per call), then answers per unit from the unit's text: `BAD` is a
/// finding, `SKIP` gets no verdict, `NA` is n/a, `DIE` makes it write half
/// an answer and die, `SLEEP` makes it hang, `FLOOD` makes it write 20 MB;
/// anything else is clear.
pub const LENS: &str = r#"import json, os, sys, time
doc = json.load(sys.stdin)
with open("lens.log", "a") as log:
    log.write(" ".join(u["id"] for u in doc["units"]) + "\n")
with open("lens.stdin.json", "w") as f:
    json.dump(doc, f)
texts = "".join(u.get("text", "") for u in doc["units"])
print("lens: judging %d units" % len(doc["units"]), file=sys.stderr)
if "SLEEP" in texts:
    time.sleep(60)
if "FLOOD" in texts:
    sys.stdout.write("x" * (20 * 1024 * 1024))
    sys.stdout.flush()
    sys.exit(0)
verdicts = []
for u in doc["units"]:
    t = u.get("text", "")
    if "SKIP" in t:
        continue
    if "BAD" in t:
        verdicts.append({"unit": u["id"], "verdict": "finding",
                         "findings": [{"title": "bad word", "severity": "high", "line": 1}]})
    elif "NA" in t:
        verdicts.append({"unit": u["id"], "verdict": "n/a"})
    else:
        verdicts.append({"unit": u["id"], "verdict": "clear"})
out = json.dumps({"verdicts": verdicts})
if "DIE" in texts:
    sys.stdout.write(out[: len(out) // 2])
    sys.stdout.flush()
    print("lens: segfault (pretend)", file=sys.stderr)
    os._exit(139)
print(out)
"#;

/// Three gates over `src/**`: `first` (the command lens), `second` (a
/// TODO rule), `third` (a size rule), each needing the one before.
pub const THREE_GATES: &str = r#"version = 1
name = "gates"

[[lenses]]
name = "lint"
kind = "command"
over = "files"
files = ["src/**"]
argv = ["python3", "lens.py"]

[[lenses]]
name = "todo"
kind = "rule"
over = "files"
files = ["src/**"]
when = "'TODO' in unit.text"

[[lenses]]
name = "size"
kind = "rule"
over = "files"
files = ["src/**"]
when = "unit.size > 100000"

[[gates]]
name = "first"
lenses = ["lint"]

[[gates]]
name = "second"
lenses = ["todo"]

[[gates]]
name = "third"
lenses = ["size"]

[[steps]]
id = "first"
kind = "gate"

[[steps]]
id = "second"
kind = "gate"
needs = ["first"]

[[steps]]
id = "third"
kind = "gate"
needs = ["second"]
"#;

/// A repo with the lens, the plan and three source files.
pub fn repo(a: &str, b: &str, c: &str) -> Test {
    Test::new()
        .file("lens.py", LENS)
        .file("plans/gates.toml", THREE_GATES)
        .file("src/a.rs", a)
        .file("src/b.rs", b)
        .file("src/c.rs", c)
}

/// The `review.json` a step of the latest run wrote.
pub fn review(t: &Test, step: &str) -> serde_json::Value {
    let run = t.run_ids().pop().expect("a run");
    let text = t.read(&format!(".gameplan/runs/{run}/steps/{step}/review.json"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("review.json of {step}: {e}\n{text}"))
}

/// The verdict of `unit` under the lens instance `lens` in `review`.
pub fn verdict<'r>(review: &'r serde_json::Value, lens: &str, unit: &str) -> &'r serde_json::Value {
    review["lenses"]
        .as_array()
        .and_then(|ls| ls.iter().find(|l| l["name"] == lens))
        .and_then(|l| l["units"].as_array())
        .and_then(|us| us.iter().find(|u| u["unit"] == unit))
        .unwrap_or_else(|| panic!("no verdict of {unit} under {lens} in {review:#}"))
}

#[test]
fn a_fix_first_second_gate_stops_there_and_the_third_is_not_run() {
    let t = repo("fn a() {}\n", "// TODO: later\n", "fn c() {}\n");
    let out = t.run(&["plan", "run", "plans/gates.toml"]);
    out.code(1)
        .stdout_has("gate first: SEND-READY")
        .stdout_has("gate second: FIX FIRST")
        .stdout_has("finding: src/b.rs: `todo` matched src/b.rs")
        .stdout_has("not run: third: `second` did not pass");
    assert!(
        !out.stdout.contains("gate third"),
        "the third gate judged nothing:\n{out}"
    );
    let second = review(&t, "second");
    assert_eq!(second["status"], "FIX FIRST");
    assert_eq!(verdict(&second, "todo", "src/b.rs")["verdict"], "finding");
    assert_eq!(verdict(&second, "todo", "src/a.rs")["verdict"], "clear");
    let run = t.run_ids().pop().expect("a run");
    assert!(
        !t.path(&format!(".gameplan/runs/{run}/steps/third/review.json"))
            .exists(),
        "the third gate never ran"
    );
    let md = t.read(&format!(".gameplan/runs/{run}/steps/second/review.md"));
    assert!(md.contains("# Gate `second`: FIX FIRST"), "{md}");
    assert!(md.contains("## Coverage (unit × lens)"), "{md}");
    assert!(md.contains("| `src/b.rs` | finding |"), "{md}");

    // Fixed, every gate passes: exit 0.
    t.write("src/b.rs", "// done\n");
    t.run(&["plan", "run", "plans/gates.toml"])
        .code(0)
        .stdout_has("gate second: SEND-READY")
        .stdout_has("gate third: SEND-READY");
}

#[test]
fn a_command_lens_that_dies_halfway_makes_its_gate_incomplete() {
    let t = repo("fn a() {}\n", "DIE\n", "fn c() {}\n");
    let out = t.run(&["plan", "run", "plans/gates.toml"]);
    out.code(2)
        .stdout_has("gate first: INCOMPLETE")
        .stdout_has("missing: src/a.rs: the lens's answer is not the protocol")
        .stdout_has("missing: src/c.rs")
        .stdout_has("(it exited with code 139)")
        .stdout_has("not run: second: `first` was incomplete")
        .stdout_has("not run: third");
    let first = review(&t, "first");
    assert_eq!(first["status"], "INCOMPLETE");
    for unit in ["src/a.rs", "src/b.rs", "src/c.rs"] {
        assert_eq!(verdict(&first, "lint", unit)["verdict"], "missing");
    }
    assert!(
        first["lenses"][0]["stderr_tail"]
            .as_str()
            .is_some_and(|s| s.contains("segfault (pretend)")),
        "{first:#}"
    );
}

#[test]
fn a_unit_the_command_lens_skips_is_missing_and_named() {
    let t = repo("fn a() {}\n", "SKIP\n", "NA\n");
    t.run(&["plan", "run", "plans/gates.toml"])
        .code(2)
        .stdout_has("gate first: INCOMPLETE")
        .stdout_has("missing: src/b.rs: the lens gave no verdict for this unit")
        .stdout_has("incomplete: first: gate `first` is INCOMPLETE: lens `lint` left 1 unit missing: src/b.rs");
    let first = review(&t, "first");
    assert_eq!(verdict(&first, "lint", "src/a.rs")["verdict"], "clear");
    assert_eq!(verdict(&first, "lint", "src/c.rs")["verdict"], "n/a");
    assert_eq!(verdict(&first, "lint", "src/b.rs")["verdict"], "missing");
}

#[test]
fn a_when_that_fails_on_a_unit_leaves_it_missing_never_clear() {
    let plan = r#"version = 1
name = "when"

[[lenses]]
name = "crashes"
kind = "rule"
over = "files"
files = ["src/**"]
when = "unit.category == 'crash'"

[[lenses]]
name = "typed"
kind = "rule"
over = "files"
files = ["src/**"]
when = "unit.text + 1"

[[gates]]
name = "g"
lenses = ["crashes", "typed"]

[[steps]]
id = "g"
kind = "gate"
"#;
    let t = Test::new()
        .file("plans/when.toml", plan)
        .file("src/a.rs", "x\n")
        .file("src/b.rs", "y\n");
    t.run(&["plan", "run", "plans/when.toml"])
        .code(2)
        .stdout_has("gate g: INCOMPLETE")
        .stdout_has("missing: src/a.rs: `when` failed on this unit");
    let g = review(&t, "g");
    for unit in ["src/a.rs", "src/b.rs"] {
        let v = verdict(&g, "crashes", unit);
        assert_eq!(v["verdict"], "missing", "a missing field: {v}");
        assert!(
            v["missing"]
                .as_str()
                .is_some_and(|m| m.contains("category") || m.contains("undefined")),
            "{v}"
        );
    }
    let b = verdict(&g, "typed", "src/b.rs");
    assert_eq!(b["verdict"], "missing", "a type error: {b}");
    assert!(
        b["missing"]
            .as_str()
            .is_some_and(|m| m.contains("unsupported types")),
        "{b}"
    );
}

/// Every `<testcase>` of a `JUnit` file as `(suite, classname, name, status)`,
/// parsed strictly.
fn junit(xml: &str) -> Vec<(String, String, String, String)> {
    use quick_xml::events::Event;
    let mut reader = quick_xml::Reader::from_str(xml);
    reader.config_mut().check_end_names = true;
    let attr = |e: &quick_xml::events::BytesStart<'_>, name: &str| {
        e.try_get_attribute(name)
            .expect("an attribute")
            .map(|a| a.unescape_value().expect("a value").into_owned())
            .unwrap_or_default()
    };
    let (mut suite, mut cases) = (String::new(), Vec::new());
    loop {
        match reader
            .read_event()
            .unwrap_or_else(|e| panic!("invalid XML ({e}):\n{xml}"))
        {
            Event::Start(e) | Event::Empty(e) => match e.name().as_ref() {
                b"testsuite" => suite = attr(&e, "name"),
                b"testcase" => cases.push((
                    suite.clone(),
                    attr(&e, "classname"),
                    attr(&e, "name"),
                    "passed".to_owned(),
                )),
                status @ (b"failure" | b"error" | b"skipped") => {
                    if let Some(last) = cases.last_mut() {
                        last.3 = String::from_utf8_lossy(status).into_owned();
                    }
                }
                _ => {}
            },
            Event::Eof => break,
            _ => {}
        }
    }
    cases
}

#[test]
fn junit_has_one_case_per_lens_and_unit() {
    let plan = THREE_GATES.replace("lenses = [\"lint\"]", "lenses = [\"lint\", \"todo\"]");
    let t = repo("fn a() {}\n", "BAD\n", "// TODO\n").file("plans/gates.toml", plan);
    t.run(&["plan", "run", "plans/gates.toml", "--junit", "junit.xml"])
        .code(1);
    let cases = junit(&t.read("junit.xml"));
    let first: Vec<_> = cases.iter().filter(|c| c.0 == "gates: first").collect();
    assert_eq!(first.len(), 6, "2 lenses × 3 units: {cases:#?}");
    let status = |class: &str, unit: &str| {
        first
            .iter()
            .find(|c| c.1 == class && c.2 == unit)
            .map_or_else(
                || panic!("no case {class} {unit}: {cases:#?}"),
                |c| c.3.as_str(),
            )
    };
    assert_eq!(status("gates.gate.lint", "src/a.rs"), "passed");
    assert_eq!(status("gates.gate.lint", "src/b.rs"), "failure");
    assert_eq!(status("gates.gate.todo", "src/c.rs"), "failure");
    assert_eq!(status("gates.gate.todo", "src/a.rs"), "passed");
    assert!(
        !cases
            .iter()
            .any(|c| c.0.contains("second") || c.0.contains("third")),
        "gates not run have no cases: {cases:#?}"
    );
}

#[test]
fn the_gates_verdicts_reach_the_github_step_summary() {
    let t =
        repo("fn a() {}\n", "// TODO\n", "fn c() {}\n").env("GITHUB_STEP_SUMMARY", "summary.md");
    t.run(&["plan", "run", "plans/gates.toml"]).code(1);
    let md = t.read("summary.md");
    assert!(md.contains("gate second: FIX FIRST"), "{md}");
    assert!(md.contains("finding: src/b.rs"), "{md}");
    assert!(md.contains("**Not run:** `third`"), "{md}");
}

/// `plans/review.toml`'s `hygiene` gate judges this repository's own files
/// and passes (CI runs the whole plan); a second run judges nothing.
#[test]
fn the_repos_own_review_plan_passes_on_the_repo() {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let state = tempfile::tempdir().expect("state dir");
    let run = || {
        std::process::Command::new(crate::support::BIN)
            // The `hygiene` gate only: the `lints` gate runs cargo clippy,
            // which waits on this very test run's build lock (CI runs the
            // whole plan, after its clippy).
            .args(["plan", "run", "plans/review.toml", "hygiene", "--state-dir"])
            .arg(state.path())
            .current_dir(repo)
            .env("NO_COLOR", "1")
            .output()
            .expect("gameplan runs")
    };
    let first = run();
    let stdout = String::from_utf8_lossy(&first.stdout);
    assert_eq!(
        first.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&first.stderr)
    );
    assert!(stdout.contains("gate hygiene: SEND-READY"), "{stdout}");
    let again = run();
    let stdout = String::from_utf8_lossy(&again.stdout);
    assert_eq!(again.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("; 0 judged, "), "{stdout}");
    assert!(!stdout.contains(" judged, 0 reused"), "{stdout}");
}

/// A secret the plan reads never reaches the review dump, its markdown or
/// the run's output, even when the lens prints it (on stderr, in a title).
#[test]
fn a_secret_a_lens_prints_is_redacted_from_the_review() {
    let lens = r#"import json, os, sys
doc = json.load(sys.stdin)
token = os.environ["LENS_TOKEN"]
print("debug: token is " + token, file=sys.stderr)
print(json.dumps({"verdicts": [{"unit": u["id"], "verdict": "finding",
    "findings": [{"title": "leaked " + token, "severity": "high"}]} for u in doc["units"]]}))
"#;
    let plan = THREE_GATES.replace(
        "name = \"gates\"\n",
        "name = \"gates\"\n\n[vars]\ntoken = \"{{ secret('LENS_TOKEN') }}\"\n",
    );
    let t = repo("fn a() {}\n", "fn b() {}\n", "fn c() {}\n")
        .file("lens.py", lens)
        .file("plans/gates.toml", plan)
        .env("LENS_TOKEN", "s3cr3t-t0ken-value");
    let out = t.run(&["plan", "run", "plans/gates.toml"]);
    out.code(1).stdout_has("leaked [redacted]");
    assert!(!out.stdout.contains("s3cr3t"), "{out}");
    assert!(!out.stderr.contains("s3cr3t"), "{out}");
    let run = t.run_ids().pop().expect("a run");
    for file in ["review.json", "review.md"] {
        let text = t.read(&format!(".gameplan/runs/{run}/steps/first/{file}"));
        assert!(!text.is_empty(), "{file}");
        assert!(!text.contains("s3cr3t"), "{file}:\n{text}");
    }
    let first = review(&t, "first");
    assert!(
        first["lenses"][0]["stderr_tail"]
            .as_str()
            .is_some_and(|s| s.contains("token is [redacted]")),
        "{first:#}"
    );
}

/// A `files` lens whose globs match nothing judged nothing: INCOMPLETE,
/// never a pass (a typo in a glob must not turn a gate green).
#[test]
fn a_files_lens_matching_no_file_is_incomplete() {
    let t = repo("fn a() {}\n", "fn b() {}\n", "fn c() {}\n").file(
        "plans/gates.toml",
        THREE_GATES.replacen("files = [\"src/**\"]", "files = [\"scr/**\"]", 1),
    );
    t.run(&["plan", "run", "plans/gates.toml"])
        .code(2)
        .stdout_has("gate first: INCOMPLETE")
        .stdout_has("error: its `files` (scr/**) match no file in the repo");
}

//! Running plans of `command` steps: failures and what they skip,
//! `--fail-fast`, `always`, `retries`, `timeout`, `--junit`, and plans
//! refused before anything runs.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use crate::support::{Test, by_step, expect_steps, live_in_group, proc_stat, step, wait_until};

/// `bad` fails after printing 15 numbered lines and a last word on stderr;
/// `after_bad` needs it; `report` needs `after_bad` but is `always`; `slow`
/// and `slower` are an independent branch.
const BRANCHES: &str = r#"version = 1
name = "branches"

[[steps]]
id = "bad"
kind = "command"
run = "for i in $(seq -w 1 15); do echo line-$i; done; echo 'boom: the widget is broken' >&2; exit 3"

[[steps]]
id = "after_bad"
kind = "command"
run = "touch after_bad.done"
needs = ["bad"]

[[steps]]
id = "report"
kind = "command"
run = "touch report.done"
needs = ["after_bad"]
always = true

[[steps]]
id = "slow"
kind = "command"
run = "sleep 0.3 && touch slow.done"

[[steps]]
id = "slower"
kind = "command"
run = "touch slower.done"
needs = ["slow"]
"#;

#[test]
fn a_failure_skips_its_dependants_while_an_independent_branch_finishes() {
    let t = Test::new().file("plan.toml", BRANCHES);
    let out = t.run(&["plan", "run", "plan.toml", "--json"]);
    let report = out.code(1).json();
    assert_eq!(report["outcome"], "failed");
    assert_eq!(report["exit_code"], 1);
    assert_eq!(
        by_step(&report, "state"),
        expect_steps(&[
            ("bad", "failed"),
            ("after_bad", "skipped"),
            ("report", "succeeded"),
            ("slow", "succeeded"),
            ("slower", "succeeded"),
        ]),
        "{out}"
    );
    assert!(!t.path("after_bad.done").exists());
    for marker in ["report.done", "slow.done", "slower.done"] {
        assert!(t.path(marker).exists(), "{marker} is missing\n{out}");
    }

    // The failed step says how it ended, shows the end of its output, and
    // where the whole log is.
    let bad = step(&report, "bad");
    assert_eq!(bad["exit_code"], 3);
    let message = bad["message"].as_str().expect("a message");
    let log = bad["log"].as_str().expect("where the log is");
    assert!(message.contains("exited with code 3"), "{message}");
    assert!(
        message.contains(log),
        "the message lacks the log path: {message}"
    );
    assert!(message.contains("boom: the widget is broken"), "{message}");
    assert!(message.contains("line-15"), "{message}");
    assert!(
        !message.contains("line-01"),
        "the message is not the last lines: {message}"
    );
    let run_id = report["run_id"].as_str().expect("run id");
    assert_eq!(log, format!("`gameplan plan log bad {run_id}`"));
    let whole = t.step_log("bad", run_id);
    assert!(
        whole.contains("line-01") && whole.contains("boom"),
        "{whole}"
    );
    assert!(
        report["root_cause"]
            .as_str()
            .is_some_and(|c| c.contains("`bad`")),
        "{out}"
    );
    assert_eq!(
        step(&report, "after_bad")["message"],
        "a step it needs did not succeed"
    );

    // The text summary and `plan status` say the same.
    let text = t.run(&["plan", "run", "plan.toml"]);
    text.code(1)
        .stdout_has("FAILED")
        .stdout_has("failed: bad: exited with code 3")
        .stderr_has("bad: FAILED");
    let status = t.run(&["plan", "status", "--json"]).code(0).json();
    assert_eq!(status["state"], "failed");
    assert_eq!(status["exit_code"], 1);
    assert_eq!(step(&status, "bad")["state"], "failed");
    assert_eq!(step(&status, "after_bad")["state"], "skipped");
}

/// `bad` fails at once; `long` is running when it does; `first` is running
/// and `next` waits for it; `cleanup` is `always`.
const FAIL_FAST: &str = r#"version = 1
name = "fail-fast"

[[steps]]
id = "bad"
kind = "command"
run = "sleep 0.2; exit 1"

[[steps]]
id = "long"
kind = "command"
run = "echo $$ > long.pid; sleep 30; touch long.done"

[[steps]]
id = "first"
kind = "command"
run = "sleep 2 && touch first.done"

[[steps]]
id = "next"
kind = "command"
run = "touch next.done"
needs = ["first"]

[[steps]]
id = "cleanup"
kind = "command"
run = "touch cleanup.done"
needs = ["bad", "long", "next"]
always = true
"#;

#[test]
fn fail_fast_stops_running_steps_and_starts_no_others_but_always_steps() {
    let t = Test::new().file("plan.toml", FAIL_FAST);
    let gameplan = t.spawn(&[
        "plan",
        "run",
        "plan.toml",
        "--fail-fast",
        "--concurrency",
        "3",
        "--json",
    ]);
    wait_until("`long` to start", Duration::from_secs(10), || {
        !t.read("long.pid").trim().is_empty()
    });
    let pid: i32 = t.read("long.pid").trim().parse().expect("a pid");
    let group = proc_stat(pid).expect("`long` runs").pgrp;
    let out = gameplan.wait();
    let report = out.code(1).json();
    assert!(
        out.elapsed < Duration::from_secs(10),
        "fail-fast did not stop `long`\n{out}"
    );
    out.stderr_has("--fail-fast");
    assert_eq!(
        by_step(&report, "state"),
        expect_steps(&[
            ("bad", "failed"),
            ("long", "interrupted"),
            ("first", "interrupted"),
            ("next", "skipped"),
            ("cleanup", "succeeded"),
        ]),
        "{out}"
    );
    for marker in ["long.done", "first.done", "next.done"] {
        assert!(!t.path(marker).exists(), "{marker} exists\n{out}");
    }
    assert!(t.path("cleanup.done").exists(), "{out}");
    assert!(
        live_in_group(group).is_empty(),
        "`long` survived fail-fast\n{out}"
    );
    // The run is over (failed), not waiting for a resume.
    let status = t.run(&["plan", "status", "--json"]).code(0).json();
    assert_eq!(status["state"], "failed");
    assert_eq!(status["exit_code"], 1);
}

/// Steps that log their start to one file, so the order they ran in shows.
const IN_ORDER: &str = r#"version = 1
name = "in-order"

[[steps]]
id = "bad"
kind = "command"
run = "echo bad >> order.log; sleep 0.1; exit 1"

[[steps]]
id = "one"
kind = "command"
run = "echo one >> order.log"

[[steps]]
id = "two"
kind = "command"
run = "echo two >> order.log"

[[steps]]
id = "three"
kind = "command"
run = "echo three >> order.log"
"#;

#[test]
fn fail_fast_with_one_slot_starts_nothing_after_the_failure() {
    // Regression: step tasks used to queue for the concurrency permit
    // themselves, so the permit the failed step gave back went to a waiting
    // step before the dispatcher had heard of the failure.
    for _ in 0..3 {
        let t = Test::new().file("plan.toml", IN_ORDER);
        let out = t.run(&[
            "plan",
            "run",
            "plan.toml",
            "--fail-fast",
            "--concurrency",
            "1",
            "--json",
        ]);
        let report = out.code(1).json();
        // With one slot, steps start in the order they are declared.
        assert_eq!(t.read("order.log"), "bad\n", "{out}");
        assert_eq!(
            by_step(&report, "state"),
            expect_steps(&[
                ("bad", "failed"),
                ("one", "skipped"),
                ("two", "skipped"),
                ("three", "skipped"),
            ]),
            "{out}"
        );
        assert_eq!(
            step(&report, "one")["message"],
            "not started: --fail-fast stopped the run at a failure"
        );
    }
    // Without --fail-fast the others run, in order.
    let t = Test::new().file("plan.toml", IN_ORDER);
    t.run(&["plan", "run", "plan.toml", "--concurrency", "1"])
        .code(1);
    assert_eq!(t.read("order.log"), "bad\none\ntwo\nthree\n");
}

#[test]
fn retries_let_a_flaky_step_pass_and_a_broken_one_fail_after_every_attempt() {
    let t = Test::new().file(
        "plan.toml",
        r#"version = 1
name = "flaky"

[[steps]]
id = "flaky"
kind = "command"
run = "n=$(( $(cat flaky.count 2>/dev/null || echo 0) + 1 )); echo $n > flaky.count; echo attempt $n; [ $n -ge 2 ]"
retries = 2

[[steps]]
id = "broken"
kind = "command"
run = "n=$(( $(cat broken.count 2>/dev/null || echo 0) + 1 )); echo $n > broken.count; echo $GAMEPLAN_ATTEMPT >> broken.attempts; exit 4"
retries = 2
"#,
    );
    let out = t.run(&["plan", "run", "plan.toml", "--json"]);
    let report = out.code(1).json();
    let flaky = step(&report, "flaky");
    assert_eq!(flaky["state"], "succeeded", "{out}");
    assert_eq!(flaky["attempts"], 2, "{out}");
    assert_eq!(t.read("flaky.count"), "2\n", "ran again after it passed");
    let broken = step(&report, "broken");
    assert_eq!(broken["state"], "failed", "{out}");
    assert_eq!(broken["attempts"], 3, "{out}");
    assert_eq!(broken["exit_code"], 4, "{out}");
    assert_eq!(t.read("broken.count"), "3\n");
    assert_eq!(
        t.read("broken.attempts"),
        "1\n2\n3\n",
        "each attempt sees its number in GAMEPLAN_ATTEMPT"
    );
    out.stderr_has("flaky: attempt 1 failed (exited with code 1); retrying");
}

#[test]
fn a_step_over_its_timeout_is_stopped_and_fails_saying_so() {
    let t = Test::new().file(
        "plan.toml",
        r#"version = 1
name = "timeout"

[[steps]]
id = "sleepy"
kind = "command"
run = "echo dozing; sh -c 'echo $$ > sleepy.pid; exec sleep 10'; touch sleepy.done"
timeout = 1
"#,
    );
    let started = Instant::now();
    let out = t.run(&["plan", "run", "plan.toml", "--json"]);
    let took = started.elapsed();
    let report = out.code(1).json();
    assert!(
        took < Duration::from_secs(6),
        "a 1 s timeout took {took:?}\n{out}"
    );
    let sleepy = step(&report, "sleepy");
    assert_eq!(sleepy["state"], "failed", "{out}");
    let message = sleepy["message"].as_str().unwrap_or_default();
    assert!(message.contains("timed out after 1s"), "{message}");
    assert!(message.contains("dozing"), "{message}");
    // The pid of the `sleep` itself (`exec` keeps it).
    let pid: i32 = t.read("sleepy.pid").trim().parse().expect("a pid");
    wait_until(
        "the timed-out `sleep` to die",
        Duration::from_secs(2),
        || proc_stat(pid).is_none_or(|p| p.zombie),
    );
    assert!(!t.path("sleepy.done").exists());
}

/// A `JUnit` element: its name, its `name` attribute, and its depth.
struct Element {
    name: String,
    case: Option<String>,
    depth: usize,
}

/// Parses `xml` strictly (end tags must match); every element in order.
fn xml_elements(xml: &str) -> Vec<Element> {
    use quick_xml::events::Event;
    let mut reader = quick_xml::Reader::from_str(xml);
    reader.config_mut().check_end_names = true;
    let mut elements = Vec::new();
    let mut depth = 0;
    loop {
        let event = reader
            .read_event()
            .unwrap_or_else(|e| panic!("invalid XML ({e}):\n{xml}"));
        let (start, empty) = match &event {
            Event::Start(e) => (e, false),
            Event::Empty(e) => (e, true),
            Event::End(_) => {
                depth -= 1;
                continue;
            }
            Event::Eof => break,
            _ => continue,
        };
        let name = String::from_utf8_lossy(start.name().as_ref()).into_owned();
        let case = start
            .try_get_attribute("name")
            .expect("a well-formed attribute")
            .map(|a| a.unescape_value().expect("an attribute value").into_owned());
        elements.push(Element { name, case, depth });
        if !empty {
            depth += 1;
        }
    }
    assert_eq!(depth, 0, "unclosed elements:\n{xml}");
    elements
}

#[test]
fn junit_has_one_testcase_per_step_and_a_failure_for_the_failed_one() {
    let t = Test::new().file("plan.toml", BRANCHES);
    t.run(&["plan", "run", "plan.toml", "--junit", "out/junit.xml"])
        .code(1);
    let xml = t.read("out/junit.xml");
    let elements = xml_elements(&xml);
    let cases: Vec<&str> = elements
        .iter()
        .filter(|e| e.name == "testcase")
        .filter_map(|e| e.case.as_deref())
        .collect();
    assert_eq!(
        cases,
        ["bad", "after_bad", "report", "slow", "slower"],
        "{xml}"
    );
    // What each case holds: the element right after it, one level deeper.
    let inside = |case: &str| -> Vec<&str> {
        let at = elements
            .iter()
            .position(|e| e.name == "testcase" && e.case.as_deref() == Some(case))
            .expect("the case");
        let depth = elements[at].depth;
        elements[at + 1..]
            .iter()
            .take_while(|e| e.depth > depth)
            .map(|e| e.name.as_str())
            .collect()
    };
    assert!(inside("bad").contains(&"failure"), "{xml}");
    assert!(inside("after_bad").contains(&"skipped"), "{xml}");
    for passed in ["report", "slow", "slower"] {
        assert!(
            !inside(passed).contains(&"failure"),
            "{passed} has a failure\n{xml}"
        );
    }
    assert!(xml.contains("exited with code 3"), "{xml}");
}

#[test]
fn a_gate_step_judges_after_what_it_needs_and_a_finding_fails_the_run() {
    let t = Test::new().file(
        "plan.toml",
        r#"version = 1
name = "mixed"

[[steps]]
id = "build"
kind = "command"
run = "touch built"

[[lenses]]
name = "no-todo"
kind = "rule"
over = "files"
files = ["plan.toml"]
when = "'TODO' in unit.text"

[[gates]]
name = "hygiene"
lenses = ["no-todo"]

[[steps]]
id = "report"
kind = "gate"
gate = "hygiene"
needs = ["build"]
"#,
    );
    // The gate was the last kind not built; now it judges after `build`
    // (the rule finds its own `TODO` in the plan): FIX FIRST, exit 1.
    let out = t.run(&["plan", "run", "plan.toml", "--json"]);
    out.code(1);
    assert!(
        t.path("built").exists(),
        "the command step ran first\n{out}"
    );
    let report = out.json();
    assert_eq!(report["steps"][1]["id"], "report");
    assert_eq!(report["steps"][1]["state"], "failed");
    assert!(
        report["steps"][1]["message"]
            .as_str()
            .is_some_and(|m| m.contains("gate `hygiene` is FIX FIRST")),
        "{out}"
    );
}

/// Eight independent steps, four of them in a pool of one; each logs `+`
/// (`+pool` in the pool) and its id when it starts, `-` when it ends. The
/// ids make the commands differ: equal commands share one reuse key.
fn crowd() -> String {
    let mut plan = "version = 1\nname = \"crowd\"\n\n[pools]\nsolo = 1\n".to_owned();
    for n in 0..8 {
        let (pool, tag) = if n % 2 == 0 {
            ("pool = \"solo\"\n", "pool")
        } else {
            ("", "")
        };
        let _ = write!(
            plan,
            "\n[[steps]]\nid = \"s{n}\"\nkind = \"command\"\nrun = \"echo +{tag} s{n} >> events; sleep 0.1; echo -{tag} s{n} >> events\"\n{pool}"
        );
    }
    plan
}

/// The most steps (all, and those in the pool) that were running at once.
fn most_at_once(events: &str) -> (usize, usize) {
    let (mut all, mut pool, mut most, mut most_pool) = (0usize, 0usize, 0, 0);
    for line in events.lines() {
        let event = line.split_whitespace().next().unwrap_or_default();
        match event {
            "+" | "+pool" => all += 1,
            _ => all -= 1,
        }
        match event {
            "+pool" => pool += 1,
            "-pool" => pool -= 1,
            _ => {}
        }
        most = most.max(all);
        most_pool = most_pool.max(pool);
    }
    (most, most_pool)
}

#[test]
fn concurrency_and_pools_bound_the_steps_running_at_once() {
    let t = Test::new().file("plan.toml", crowd());
    t.run(&["plan", "run", "plan.toml", "--concurrency", "3"])
        .code(0);
    let events = t.read("events");
    assert_eq!(events.lines().count(), 16, "{events}");
    let (most, most_pool) = most_at_once(&events);
    assert!(most <= 3, "{most} steps ran at once with --concurrency 3");
    assert!(most >= 2, "the steps never overlapped:\n{events}");
    assert_eq!(most_pool, 1, "a pool of one ran {most_pool} steps at once");

    let t = Test::new().file("plan.toml", crowd());
    t.run(&["plan", "run", "plan.toml", "--concurrency", "1"])
        .code(0);
    assert_eq!(most_at_once(&t.read("events")), (1, 1));
}

#[test]
fn a_step_that_exits_0_without_its_declared_output_fails_and_is_not_stored() {
    let t = Test::new().file(
        "plan.toml",
        r#"version = 1
name = "forgetful"

[[steps]]
id = "forgetful"
kind = "command"
run = "echo ran >> ran.log"
outputs = ["out/result.txt"]

[[steps]]
id = "user"
kind = "command"
run = "cat out/result.txt"
needs = ["forgetful"]
"#,
    );
    for runs in ["ran\n", "ran\nran\n"] {
        let out = t.run(&["plan", "run", "plan.toml", "--json"]);
        let report = out.code(1).json();
        let forgetful = step(&report, "forgetful");
        assert_eq!(forgetful["state"], "failed", "{out}");
        assert!(
            forgetful["message"]
                .as_str()
                .is_some_and(|m| m.contains("did not produce its declared output `out/result.txt`")),
            "{out}"
        );
        assert_eq!(step(&report, "user")["state"], "skipped", "{out}");
        // Not stored: the next run runs it again.
        assert_eq!(t.read("ran.log"), runs);
    }
}

#[test]
fn a_result_that_cannot_be_stored_is_a_warning_not_a_failed_step() {
    let t = Test::new().file(
        "plan.toml",
        r#"version = 1
name = "nostore"

[[steps]]
id = "make"
kind = "command"
run = "echo made > made.txt"
inputs = ["plan.toml"]
outputs = ["made.txt"]
"#,
    );
    // A file where the store's directory should be: every store write fails.
    t.write(".gameplan/store", "not a directory");
    let out = t.run(&["plan", "run", "plan.toml", "--json"]);
    out.code(0).stderr_has("could not store its result");
    assert_eq!(by_step(&out.json(), "state")["make"], "succeeded", "{out}");
    assert_eq!(t.read("made.txt"), "made\n");
}

#[test]
fn a_program_is_found_on_the_path_the_step_sets() {
    let t = Test::new()
        .file(
            "plan.toml",
            r#"version = 1
name = "path"

[[steps]]
id = "greet"
kind = "command"
run = "hello world"
env = { PATH = "tools:/usr/bin:/bin" }
"#,
        )
        .file(
            "tools/hello",
            "#!/bin/sh\necho \"hello $1\" > greeting.txt\n",
        );
    let mut perms = std::fs::metadata(t.path("tools/hello"))
        .expect("stat")
        .permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(t.path("tools/hello"), perms).expect("chmod");
    t.run(&["plan", "run", "plan.toml"]).code(0);
    assert_eq!(t.read("greeting.txt"), "hello world\n");
}

/// Issue 8, item 23: a line starting with an assignment or a shell builtin
/// runs (through the shell), instead of failing to exec a program of that name.
#[test]
fn assignments_and_builtins_run() {
    let t = Test::new()
        .file(
            "plan.toml",
            r#"version = 1
name = "builtins"

[[steps]]
id = "assign"
kind = "command"
run = "FOO=bar env"

[[steps]]
id = "exit"
kind = "command"
run = "exit 0"

[[steps]]
id = "cd"
kind = "command"
run = "cd src"
"#,
        )
        .file("src/keep", "");
    let out = t.run(&["plan", "run", "plan.toml", "--json"]);
    out.code(0);
    let run_id = out.json()["run_id"].as_str().expect("run id").to_owned();
    let log = t.step_log("assign", &run_id);
    assert!(log.lines().any(|l| l == "FOO=bar"), "{log}");
}

/// Issue 8, item 18: with one slot, the fourth of four one-second cells
/// starts when its process does, and its time is its own second, not the
/// three it waited.
#[test]
fn a_step_is_started_when_its_process_starts() {
    let t = Test::new().file(
        "plan.toml",
        r#"version = 1
name = "slots"

[[steps]]
id = "s"
kind = "command"
run = "sleep 1"
matrix = { n = [1, 2, 3, 4] }
"#,
    );
    let out = t.run(&["plan", "run", "plan.toml", "--concurrency", "1", "--json"]);
    out.code(0);
    let doc = out.json();
    for step in doc["steps"].as_array().expect("steps") {
        let ms = step["duration_ms"].as_u64().expect("duration");
        assert!(
            (900..1900).contains(&ms),
            "{} took {ms} ms by the report (its own work is one second)\n{out}",
            step["id"]
        );
    }
    // The last cell's "started" line comes after about three seconds.
    let line = out
        .stderr
        .lines()
        .find(|l| l.contains("s[4]: started"))
        .expect("a started line");
    let at: f64 = line
        .trim_start_matches('[')
        .split('s')
        .next()
        .and_then(|n| n.trim().parse().ok())
        .expect("a time");
    assert!(at > 2.5, "s[4] said started at {at}s\n{out}");
}

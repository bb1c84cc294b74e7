//! What a run shows of its steps. `--output failures|stream|none`,
//! a failure said once, every independent failure named as a root cause,
//! colour, the progress display on a terminal, and the summary's wording.

use std::process::Command;
use std::time::Duration;

use nix::sys::signal::Signal;

use crate::support::{BIN, Test, wait_until};

/// `bad` prints 15 numbered lines and a last word on stderr, then fails;
/// `good` is an independent branch.
const FAILING: &str = r#"version = 1
name = "failing"

[[steps]]
id = "bad"
kind = "command"
run = "for i in $(seq -w 1 15); do echo line-$i; done; echo 'boom: the widget is broken' >&2; exit 3"

[[steps]]
id = "good"
kind = "command"
run = "echo fine"
"#;

fn count(haystack: &str, needle: &str) -> usize {
    haystack.matches(needle).count()
}

#[test]
fn a_failure_shows_its_last_lines_once() {
    let t = Test::new().file("plan.toml", FAILING);
    let out = t.run(&["plan", "run", "plan.toml"]);
    out.code(1);
    let all = format!("{}{}", out.stdout, out.stderr);
    // The last lines, once, as the step fails; the summary says how it
    // ended and where the whole log is, without the lines again.
    assert_eq!(count(&all, "boom: the widget is broken"), 1, "{out}");
    assert_eq!(count(&all, "line-15"), 1, "{out}");
    assert_eq!(count(&all, "line-01"), 0, "{out}");
    out.stderr_has("bad: FAILED after ")
        .stdout_has("  failed: bad: exited with code 3 (log: ")
        .stdout_has("(log: `gameplan plan log bad ");
    assert!(
        !out.stdout.contains("root cause"),
        "one failure is its own root cause: {out}"
    );
}

#[test]
fn output_none_shows_no_line_of_a_step() {
    let t = Test::new().file("plan.toml", FAILING);
    let out = t.run(&["plan", "run", "plan.toml", "--output", "none"]);
    out.code(1)
        .stderr_has("bad: FAILED after ")
        .stderr_has("exited with code 3 (log: ");
    let all = format!("{}{}", out.stdout, out.stderr);
    for line in ["line-15", "boom", "fine"] {
        assert!(!all.contains(line), "{line:?} was shown\n{out}");
    }
}

/// `talk` prints a line, waits, prints another and a last one without a
/// newline, and a secret; `other` prints alongside it.
const TALKING: &str = r#"version = 1
name = "talking"

[[steps]]
id = "talk"
kind = "command"
run = "echo first; sleep 1.5; echo 'token is {{ secret('API_TOKEN') }}'; printf 'no newline at the end'"

[[steps]]
id = "other"
kind = "command"
run = "echo from-other; echo oops >&2; exit 4"
"#;

/// The seconds of a plain progress line (`[   1.23s] text`) holding `text`.
fn at(stderr: &str, text: &str) -> f64 {
    let line = stderr
        .lines()
        .find(|l| l.ends_with(text))
        .unwrap_or_else(|| panic!("no line ending in {text:?}:\n{stderr}"));
    line.trim_start_matches('[')
        .split('s')
        .next()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or_else(|| panic!("no time in {line:?}"))
}

#[test]
fn output_stream_prints_each_line_as_it_comes_prefixed_with_its_step() {
    let t = Test::new()
        .file("plan.toml", TALKING)
        .env("API_TOKEN", "tok-9c1e-very-secret");
    let out = t.run(&["plan", "run", "plan.toml", "--output", "stream"]);
    out.code(1)
        .stderr_has("] talk  | first\n")
        .stderr_has("] talk  | token is [redacted]\n")
        .stderr_has("] talk  | no newline at the end\n")
        .stderr_has("] other | from-other\n")
        .stderr_has("] other | oops\n");
    assert!(
        !out.stderr.contains("tok-9c1e"),
        "the secret was shown\n{out}"
    );
    // As it comes: the first line while the step still runs, every line
    // before the step's end.
    let first = at(&out.stderr, "talk  | first");
    let last = at(&out.stderr, "talk  | no newline at the end");
    let ended = out
        .stderr
        .lines()
        .position(|l| l.contains("talk: succeeded in"))
        .expect("talk's end");
    let partial = out
        .stderr
        .lines()
        .position(|l| l.ends_with("talk  | no newline at the end"))
        .expect("talk's last line");
    assert!(partial < ended, "{out}");
    assert!(
        last - first > 1.0,
        "first at {first}s, last at {last}s\n{out}"
    );
    // A streamed failure's lines are not shown again.
    assert_eq!(count(&out.stderr, "oops"), 1, "{out}");
    out.stderr_has("other: FAILED after ")
        .stderr_has("exited with code 4 (log: ");
}

/// `a` and `b` fail independently (keep-going, the default); `a_report`
/// is an `always` step after `a` that fails too, because `a` did.
const TWO_BRANCHES: &str = r#"version = 1
name = "two"

[[steps]]
id = "a"
kind = "command"
run = "sleep 0.4; exit 1"

[[steps]]
id = "b"
kind = "command"
run = "exit 2"

[[steps]]
id = "a_report"
kind = "command"
run = "exit 5"
needs = ["a"]
always = true

[[steps]]
id = "fine"
kind = "command"
run = "true"
"#;

#[test]
fn root_causes_name_every_independent_failure() {
    let t = Test::new().file("plan.toml", TWO_BRANCHES);
    let out = t.run(&["plan", "run", "plan.toml", "--json"]);
    let report = out.code(1).json();
    assert_eq!(
        report["root_causes"],
        serde_json::json!(["a", "b"]),
        "{out}"
    );
    // `b` failed first, but the root cause named first is the first in the plan.
    let cause = report["root_cause"].as_str().expect("a root cause");
    assert!(
        cause.starts_with("step `a` failed: exited with code 1"),
        "{cause}"
    );

    let out = t.run(&["plan", "run", "plan.toml"]);
    out.code(1)
        .stdout_has("  failed: a: exited with code 1")
        .stdout_has("  failed: b: exited with code 2")
        .stdout_has("  failed: a_report: exited with code 5")
        .stdout_has("  root causes: `a`, `b` (the other failures follow from them)\n");
}

#[test]
fn the_summary_agrees_in_number_and_says_when_nothing_ran() {
    let t = Test::new()
        .file(
            "one.toml",
            "version = 1\nname = \"one\"\n\n[[steps]]\nid = \"only\"\nkind = \"command\"\nrun = \"true\"\n",
        )
        .file("empty.toml", "version = 1\nname = \"empty\"\nsteps = []\n");
    let out = t.run(&["plan", "run", "one.toml"]);
    out.code(0).stderr_has("of plan `one` (1 step)\n");
    assert!(!out.stderr.contains("1 steps"), "{out}");
    let out = t.run(&["plan", "run", "empty.toml"]);
    out.code(0).stdout_has(": nothing to run (no steps)\n");
    assert!(!out.stdout.contains("()"), "{out}");
}

#[test]
fn run_output_is_coloured_when_asked_and_never_under_no_color() {
    let t = Test::new()
        .file("plan.toml", FAILING)
        .env("NO_COLOR", "")
        .env("CLICOLOR_FORCE", "1");
    let out = t.run(&["plan", "run", "plan.toml"]);
    out.code(1)
        .stderr_has("bad: \x1b[1;31mFAILED\x1b[0m after")
        .stderr_has("good: \x1b[32msucceeded\x1b[0m in")
        .stdout_has("\x1b[1;31mFAILED\x1b[0m in");
    let t = t.env("NO_COLOR", "1");
    let out = t.run(&["plan", "run", "plan.toml"]);
    out.code(1);
    assert!(
        !out.stdout.contains('\x1b') && !out.stderr.contains('\x1b'),
        "{out}"
    );
}

#[test]
fn the_color_flag_beats_the_environment() {
    // The builder sets NO_COLOR=1.
    let t = Test::new().file("plan.toml", FAILING);
    let out = t.run(&["plan", "run", "plan.toml", "--color", "always"]);
    out.code(1)
        .stderr_has("bad: \x1b[1;31mFAILED\x1b[0m after")
        .stdout_has("\x1b[1;31mFAILED\x1b[0m in");
    let t = t.env("NO_COLOR", "").env("CLICOLOR_FORCE", "1");
    for flags in [&["--color", "never"][..], &["--no-color"][..]] {
        let mut args = vec!["plan", "run", "plan.toml"];
        args.extend_from_slice(flags);
        let out = t.run(&args);
        out.code(1);
        assert!(
            !out.stdout.contains('\x1b') && !out.stderr.contains('\x1b'),
            "{flags:?}: {out}"
        );
    }
}

#[test]
fn run_output_is_coloured_on_a_terminal() {
    let t = Test::new().file("plan.toml", FAILING);
    let command =
        format!("env -i PATH=/usr/bin:/bin TERM=xterm {BIN} plan run plan.toml --output none");
    let out = Command::new("script")
        .args(["-qfec", &command, "/dev/null"])
        .current_dir(t.path(""))
        .output()
        .expect("run script");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("\x1b[1;31mFAILED\x1b[0m"), "{text:?}");
}

/// `tmux` draws a terminal the test can read: the progress display as a
/// user sees it.
struct Screen {
    socket: String,
}

impl Screen {
    fn start(dir: &std::path::Path, command: &str) -> Screen {
        let socket = format!("gameplan-issue10-{}", std::process::id());
        let status = Command::new("tmux")
            .args(["-L", &socket, "new-session", "-d", "-x", "100", "-y", "30"])
            .arg(format!("cd {} && {command}; sleep 30", dir.display()))
            .status()
            .expect("start tmux");
        assert!(status.success());
        Screen { socket }
    }

    fn text(&self) -> String {
        let out = Command::new("tmux")
            .args(["-L", &self.socket, "capture-pane", "-p"])
            .output()
            .expect("capture the pane");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .status();
    }
}

/// A line of the display for a running step: `⠁ 1.2s ID`.
fn running_line<'s>(screen: &'s str, id: &str) -> Option<&'s str> {
    screen.lines().find(|l| {
        let words: Vec<&str> = l.split_whitespace().collect();
        words.len() >= 3
            && words[2] == id
            && words[1].ends_with('s')
            && words[1].trim_end_matches('s').parse::<f64>().is_ok()
    })
}

/// Three steps that run until the test lets them go: `three` fails once
/// the file `go` exists, `one` and `two` end once `done` does (so no step
/// ends before the test has seen what it looks for, however slow the machine).
const THREE_SLOW: &str = r#"version = 1
name = "slow"

[[steps]]
id = "one"
kind = "command"
run = "while [ ! -f done ]; do sleep 0.05; done"

[[steps]]
id = "two"
kind = "command"
run = "while [ ! -f done ]; do sleep 0.05; done"

[[steps]]
id = "three"
kind = "command"
run = "while [ ! -f go ]; do sleep 0.05; done; exit 1"
"#;

#[test]
fn the_progress_display_shows_every_running_step_with_its_time() {
    let t = Test::new().file("plan.toml", THREE_SLOW);
    let screen = Screen::start(
        &t.path(""),
        &format!(
            "env -i PATH=/usr/bin:/bin TERM=xterm NO_COLOR=1 {BIN} plan run plan.toml --concurrency 3"
        ),
    );
    let mut seen = String::new();
    wait_until("every step on the display", Duration::from_secs(20), || {
        seen = screen.text();
        ["one", "two", "three"]
            .iter()
            .all(|id| running_line(&seen, id).is_some())
    });
    // A step that ended leaves the display; the ones still running stay.
    t.write("go", "");
    wait_until("`three` to end", Duration::from_secs(20), || {
        seen = screen.text();
        seen.contains("three: FAILED after")
    });
    let after = screen.text();
    t.write("done", "");
    assert!(running_line(&after, "three").is_none(), "{after}");
    assert!(
        running_line(&after, "one").is_some() && running_line(&after, "two").is_some(),
        "{after}"
    );
}

/// `slow` prints a line a second until there are 30.
const SLOW_TALKER: &str = r#"version = 1
name = "slow"

[[steps]]
id = "slow"
kind = "command"
run = "echo $$ > slow.pid; for i in $(seq 1 30); do echo tick-$i; sleep 0.2; done"
"#;

#[test]
fn resume_takes_its_own_output_flag() {
    let t = Test::new().file("plan.toml", SLOW_TALKER);
    let gameplan = t.spawn(&["plan", "run", "plan.toml"]);
    wait_until("the step to start", Duration::from_secs(20), || {
        !t.read("slow.pid").trim().is_empty()
    });
    gameplan.signal(Signal::SIGINT);
    let out = gameplan.wait();
    out.code(10);
    assert!(!out.stderr.contains("slow | tick-1"), "{out}");
    let out = t.run(&["plan", "resume", "--output", "stream"]);
    out.code(0)
        .stderr_has("] slow | tick-1\n")
        .stderr_has("] slow | tick-30\n");
}

/// `flaky` fails its first attempt after a line and a partial one, then
/// succeeds on the retry.
const FLAKY: &str = r#"version = 1
name = "flaky"

[[steps]]
id = "flaky"
kind = "command"
run = "echo attempt-start; if [ -f ok ]; then echo good; else touch ok; printf partial-fail; exit 1; fi"
retries = 1
"#;

#[test]
fn output_stream_shows_every_attempt_of_a_retried_step_once() {
    let t = Test::new().file("plan.toml", FLAKY);
    let out = t.run(&["plan", "run", "plan.toml", "--output", "stream"]);
    out.code(0).stderr_has("flaky: started (attempt 2)");
    assert_eq!(count(&out.stderr, "] flaky | attempt-start\n"), 2, "{out}");
    assert_eq!(count(&out.stderr, "] flaky | partial-fail\n"), 1, "{out}");
    assert_eq!(count(&out.stderr, "] flaky | good\n"), 1, "{out}");
    let failed_line = out
        .stderr
        .find("] flaky | partial-fail")
        .expect("attempt 1's last line");
    let second = out
        .stderr
        .find("flaky: started (attempt 2)")
        .expect("attempt 2");
    assert!(failed_line < second, "{out}");
}

//! "the runner as people use it every day": `.gameplan/` ignores
//! itself, `plan status` and `plan runs` as a person and a script read them,
//! a resumed step's wording, and `gameplan gc`.

use std::process::Command;
use std::time::Duration;

use nix::sys::signal::Signal;

use crate::support::{Test, step, wait_until};

const SOON: Duration = Duration::from_secs(30);

/// `bad` fails after 15 numbered lines and a last word on stderr.
const FAILING: &str = r#"version = 1
name = "failing"

[[steps]]
id = "ok"
kind = "command"
run = "echo fine"

[[steps]]
id = "bad"
kind = "command"
run = "for i in $(seq -w 1 15); do echo line-$i; done; echo 'boom: the widget is broken' >&2; exit 3"
"#;

/// `long` writes `long.started` and sleeps as long as the file `delay` says;
/// `after` needs it.
const LONG: &str = r#"version = 1
name = "long"

[[steps]]
id = "long"
kind = "command"
run = "touch long.started && sleep $(cat delay) && touch long.done"

[[steps]]
id = "after"
kind = "command"
run = "touch after.done"
needs = ["long"]
"#;

/// Starts `plan run` of LONG and interrupts it with Ctrl-C while `long` runs.
fn interrupted_run(t: &Test) {
    let gameplan = t.spawn(&["plan", "run", "plan.toml"]);
    wait_until("the step to start", SOON, || {
        t.path("long.started").exists()
    });
    gameplan.signal(Signal::SIGINT);
    gameplan.wait().code(10);
}

/// Runs git in the repo; fails the test when git is missing or fails
/// (`.ci/run` installs it): a test that skips silently proves nothing.
#[track_caller]
fn git(t: &Test, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(t.path(""))
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", t.path(""))
        .output()
        .unwrap_or_else(|e| panic!("cannot run git (install it: apt-get install git): {e}"));
    assert!(out.status.success(), "git {args:?} failed: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_state_dir_ignores_itself_so_git_status_stays_clean() {
    let t = Test::new()
        .file("plan.toml", FAILING.replace("exit 3", "exit 0"))
        .file("custom/keep.txt", "mine");
    t.run(&["plan", "run", "plan.toml"]).code(0);
    let ignore = t.read(".gameplan/.gitignore");
    assert!(
        ignore.lines().any(|l| l.trim() == "*"),
        "`.gameplan/.gitignore` does not ignore everything: {ignore:?}"
    );
    // Also a state dir named on the command line, created by the run.
    t.run(&["plan", "run", "plan.toml", "--state-dir", "elsewhere/state"])
        .code(0);
    assert!(
        t.read("elsewhere/state/.gitignore")
            .lines()
            .any(|l| l.trim() == "*")
    );
    // An existing directory is the user's: nothing is written into it.
    t.run(&["plan", "run", "plan.toml", "--state-dir", "custom"])
        .code(0);
    assert!(!t.path("custom/.gitignore").exists());
    // What a user checks: git sees the plan, not the state.
    std::fs::remove_dir(t.path(".git")).expect("remove the fake .git");
    git(&t, &["init", "-q"]);
    let status = git(&t, &["status", "--porcelain", "--untracked-files=all"]);
    assert!(status.contains("plan.toml"), "{status}");
    assert!(
        !status.contains(".gameplan") && !status.contains("elsewhere/"),
        "git status shows gameplan's state:\n{status}"
    );
}

#[test]
fn plan_status_ends_with_the_failed_steps_last_lines() {
    let t = Test::new().file("plan.toml", FAILING);
    t.run(&["plan", "run", "plan.toml"]).code(1);
    let out = t.run(&["plan", "status"]);
    out.code(0)
        .stdout_has("failed (exit 1)")
        .stdout_has("bad: exited with code 3; last lines of ");
    let text = &out.stdout;
    let Some((_, after_colon)) = text.split_once("`:\n") else {
        panic!("no log tail after `gameplan plan log …`:\n{out}");
    };
    assert!(after_colon.contains("line-15"), "{out}");
    assert!(after_colon.contains("boom: the widget is broken"), "{out}");
    assert!(!text.contains("line-01"), "not the last lines only\n{out}");
    assert_eq!(
        text.lines().last().map(str::trim),
        Some("boom: the widget is broken"),
        "the status does not end with the log's last line\n{out}"
    );
    // Every step is listed above it.
    assert!(text.contains("  succeeded   ok\n"), "{out}");
    assert!(text.contains("  failed      bad\n"), "{out}");
}

#[test]
fn plan_status_json_has_fields_not_prose() {
    let t = Test::new().file("plan.toml", FAILING);
    t.run(&["plan", "run", "plan.toml"]).code(1);
    let doc = t.run(&["plan", "status", "--json"]).code(0).json();
    assert!(doc.get("status").is_none(), "prose is gone: {doc:#}");
    assert_eq!(doc["state"], "failed", "{doc:#}");
    assert_eq!(doc["exit_code"], 1, "{doc:#}");
    assert_eq!(doc["resumable"], false, "{doc:#}");
    assert!(doc["duration_ms"].is_u64(), "{doc:#}");
    assert_eq!(doc["steps_done"], 2, "{doc:#}");
    assert_eq!(doc["steps_total"], 2, "{doc:#}");
    let bad = step(&doc, "bad");
    assert_eq!(bad["state"], "failed");
    assert_eq!(bad["exit_code"], 3);
    assert_eq!(bad["attempt"], 1);
    assert!(bad["duration_ms"].is_u64());
    let log = bad["log"].as_str().expect("where the log is");
    let run_id = doc["run_id"].as_str().expect("run id");
    assert_eq!(log, format!("`gameplan plan log bad {run_id}`"));
    assert!(t.step_log("bad", run_id).contains("line-01"));
    let ok = step(&doc, "ok");
    assert_eq!(ok["state"], "succeeded");
    assert_eq!(ok["exit_code"], 0);
}

#[test]
fn plan_runs_has_a_header_start_and_duration_and_json() {
    let t = Test::new().file("plan.toml", FAILING);
    t.run(&["plan", "run", "plan.toml"]).code(1);
    t.write("plan.toml", FAILING.replace("exit 3", "exit 0"));
    t.run(&["plan", "run", "plan.toml"]).code(0);
    let ids = t.run_ids();
    let out = t.run(&["plan", "runs"]);
    out.code(0);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    for column in ["RUN", "PLAN", "STARTED", "DURATION", "STEPS", "STATUS"] {
        assert!(lines[0].contains(column), "no {column} column\n{out}");
    }
    assert!(
        lines[1].starts_with(&format!("{}  failing", ids[0])),
        "{out}"
    );
    assert!(lines[1].contains("failed (exit 1)"), "{out}");
    assert!(lines[2].contains("succeeded (exit 0)"), "{out}");
    // The start time (RFC 3339) and a duration in seconds.
    let year = &ids[0][..4];
    assert!(lines[1].contains(&format!(" {year}-")), "{out}");
    assert!(
        lines[1]
            .split_whitespace()
            .any(|w| w.ends_with('s') && w.trim_end_matches('s').parse::<f64>().is_ok()),
        "{out}"
    );

    let doc = t.run(&["plan", "runs", "--json"]).code(0).json();
    let runs = doc["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 2, "{doc:#}");
    assert_eq!(runs[0]["run_id"], ids[0].as_str());
    assert_eq!(runs[0]["plan"], "failing");
    assert_eq!(runs[0]["state"], "failed");
    assert_eq!(runs[0]["exit_code"], 1);
    assert_eq!(runs[1]["state"], "succeeded");
    assert_eq!(runs[1]["exit_code"], 0);
    for run in runs {
        assert!(run["started_at"].is_string(), "{run:#}");
        assert!(run["duration_ms"].is_u64(), "{run:#}");
        assert_eq!(run["resumable"], false, "{run:#}");
    }
}

#[test]
fn plan_runs_says_an_unfinished_run_is_not_resumable_when_the_plan_changed() {
    let t = Test::new().file("plan.toml", LONG).file("delay", "30");
    interrupted_run(&t);
    t.run(&["plan", "runs"])
        .code(0)
        .stdout_has("interrupted (resumable)");
    let doc = t.run(&["plan", "runs", "--json"]).code(0).json();
    assert_eq!(doc["runs"][0]["state"], "interrupted");
    assert_eq!(doc["runs"][0]["resumable"], true);
    let run_id = t.run_ids().pop().expect("a run");
    let resume = format!("gameplan plan resume {run_id}");
    t.run(&["plan", "status"])
        .code(0)
        .stdout_has(&format!("continue it with `{resume}`"));
    let status = t.run(&["plan", "status", "--json"]).code(0).json();
    assert_eq!(status["resume_command"], resume.as_str());

    t.write(
        "plan.toml",
        LONG.replace("touch after.done", "touch after.ok"),
    );
    t.run(&["plan", "runs"])
        .code(0)
        .stdout_has("interrupted (not resumable: the plan changed)");
    let doc = t.run(&["plan", "runs", "--json"]).code(0).json();
    assert_eq!(doc["runs"][0]["resumable"], false);
    assert_eq!(doc["runs"][0]["not_resumable"], "the plan changed");
    let status = t.run(&["plan", "status", "--json"]).code(0).json();
    assert_eq!(status["not_resumable"], "the plan changed");
    assert!(status["resume_command"].is_null());
    // And what `plan resume` then does agrees.
    t.run(&["plan", "resume"])
        .code(3)
        .stderr_has("changed since run");
}

#[test]
fn a_resumed_step_says_resumed_not_attempt_2() {
    let t = Test::new().file("plan.toml", LONG).file("delay", "30");
    interrupted_run(&t);
    t.write("delay", "0");
    let out = t.run(&["plan", "resume"]);
    out.code(0).stderr_has("long: started (resumed)");
    assert!(!out.stderr.contains("attempt 2"), "{out}");
}

/// `make` stores a 300,000-byte output whose content follows `in.txt`, so
/// each value of `in.txt` is one stored result of about 293 KiB.
const STORING: &str = r#"version = 1
name = "storing"

[[steps]]
id = "make"
kind = "command"
run = "cat in.txt > out.bin && head -c 300000 /dev/zero >> out.bin"
inputs = ["in.txt"]
outputs = ["out.bin"]
"#;

/// Runs STORING once per value of `in.txt`, oldest first.
fn stored(t: &Test, values: &[&str]) {
    for value in values {
        t.write("in.txt", value);
        t.run(&["plan", "run", "plan.toml"]).code(0);
    }
}

fn gc_json(t: &Test, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["gc", "--json"];
    all.extend_from_slice(args);
    t.run(&all).code(0).json()
}

/// Whether `plan explain` would reuse `make` with `in.txt` = `value`.
fn reused_with(t: &Test, value: &str) -> bool {
    t.write("in.txt", value);
    let doc = t
        .run(&["plan", "explain", "plan.toml", "--json"])
        .code(0)
        .json();
    step(&doc, "make")["action"] == "reused"
}

#[test]
fn gc_keeps_the_newest_runs_and_prints_what_it_freed() {
    let t = Test::new().file("plan.toml", STORING);
    stored(&t, &["1", "2", "3", "4"]);
    let ids = t.run_ids();
    // --dry-run prints the same and removes nothing.
    let dry = t.run(&["gc", "--keep-runs", "2", "--dry-run"]);
    dry.code(0)
        .stdout_has("would remove 2 runs (")
        .stdout_has("KiB)")
        .stdout_has(&ids[0])
        .stdout_has(&ids[1])
        .stdout_has("dry run: nothing was removed");
    assert_eq!(t.run_ids(), ids);
    let doc = gc_json(&t, &["--keep-runs", "2", "--dry-run"]);
    assert_eq!(doc["dry_run"], true);
    assert_eq!(doc["runs"]["removed"].as_array().map(Vec::len), Some(2));
    assert_eq!(t.run_ids(), ids);

    // The limit is exact: N kept means the N newest, and 2 more kept
    // removes nothing more.
    let out = t.run(&["gc", "--keep-runs", "2"]);
    out.code(0)
        .stdout_has("removed 2 runs (")
        .stdout_has("2 runs left");
    assert!(!out.stdout.contains("dry run"), "{out}");
    assert_eq!(t.run_ids(), ids[2..].to_vec());
    let again = gc_json(&t, &["--keep-runs", "2"]);
    assert_eq!(again["runs"]["removed"].as_array().map(Vec::len), Some(0));
    assert_eq!(t.run_ids(), ids[2..].to_vec());
    // No --max-store: no stored result goes.
    assert_eq!(again["store"]["removed"], 0);
    assert_eq!(again["store"]["kept"], 4);
    t.run(&["plan", "runs"]).code(0).stdout_has(&ids[3]);
}

#[test]
fn gc_trims_the_store_least_recently_used_first_to_the_size_given() {
    let t = Test::new().file("plan.toml", STORING);
    stored(&t, &["a", "b", "c"]);
    // Reusing `a` makes it the most recently used.
    stored(&t, &["a"]);
    let total = gc_json(&t, &["--dry-run"])["store"]["kept_bytes"]
        .as_u64()
        .expect("the store's size");
    assert!(total > 3 * 300_000, "{total}");

    // Exactly the store's size: it fits, nothing goes.
    let fits = gc_json(&t, &["--max-store", &total.to_string()]);
    assert_eq!(fits["store"]["removed"], 0, "{fits:#}");
    // One byte less: the least recently used result goes, and only it.
    let over = (total - 1).to_string();
    let dry = gc_json(&t, &["--max-store", &over, "--dry-run"]);
    assert_eq!(dry["store"]["removed"], 1, "{dry:#}");
    assert!(reused_with(&t, "b"), "--dry-run removed a result");
    let out = t.run(&["gc", "--max-store", &over]);
    out.code(0)
        .stdout_has("removed 1 stored result (293.")
        .stdout_has("KiB), least recently used first")
        .stdout_has("the store holds 2 results");
    assert!(!reused_with(&t, "b"), "`b` was used longest ago");
    assert!(reused_with(&t, "a"), "`a` was reused last");
    assert!(reused_with(&t, "c"));

    // Sizes as people write them; 0 empties the store.
    let human = gc_json(&t, &["--max-store", "1M"]);
    assert_eq!(human["store"]["limit_bytes"], 1 << 20);
    assert_eq!(human["store"]["removed"], 0);
    // A partial result a killed run left behind goes too.
    let partial = t.path(".gameplan/store/.tmp-999999999-0");
    std::fs::create_dir_all(partial.join("outputs")).expect("mkdir");
    std::fs::File::open(&partial)
        .and_then(|dir| dir.set_modified(std::time::SystemTime::now() - Duration::from_secs(7200)))
        .expect("age it");
    t.run(&["gc", "--max-store", "1M"])
        .code(0)
        .stdout_has("removed 1 partial result left by killed runs");
    assert!(!partial.exists());
    let empty = gc_json(&t, &["--max-store", "0"]);
    assert_eq!(empty["store"]["removed"], 2);
    assert_eq!(empty["store"]["kept_bytes"], 0);
    t.run(&["gc", "--max-store", "lots"])
        .code(3)
        .stderr_has("is not a size");
}

#[test]
fn gc_keeps_what_explain_compares_against() {
    let t = Test::new().file("plan.toml", STORING);
    stored(&t, &["1"]);
    gc_json(&t, &["--keep-runs", "0", "--max-store", "0"]);
    assert!(t.run_ids().is_empty());
    // Same plan: the result is gone, and explain says where it went.
    t.run(&["plan", "explain", "plan.toml"])
        .code(0)
        .stdout_has("`gameplan gc`");
    // Changed plan: explain still knows what changed, not "never succeeded".
    t.write("plan.toml", STORING.replace("cat in.txt", "cat ./in.txt"));
    let out = t.run(&["plan", "explain", "plan.toml"]);
    out.code(0).stdout_has("`run` changed");
    assert!(!out.stdout.contains("never succeeded"), "{out}");
}

#[test]
fn gc_never_removes_a_live_run_nor_one_that_can_be_resumed() {
    let t = Test::new().file("plan.toml", LONG).file("delay", "30");
    // An older finished run of another plan, then an interrupted one of LONG.
    t.write("other.toml", STORING.replace("storing", "other"));
    t.write("in.txt", "1");
    t.run(&["plan", "run", "other.toml"]).code(0);
    interrupted_run(&t);
    let ids = t.run_ids();
    let out = t.run(&["gc", "--keep-runs", "0"]);
    out.code(0)
        .stdout_has("removed 1 run (")
        .stdout_has("1 old unfinished run that can still be resumed");
    assert_eq!(t.run_ids(), vec![ids[1].clone()]);

    // A live run (the resume, running now) is never removed.
    let live = t.spawn(&["plan", "resume"]);
    wait_until("the resume to run", SOON, || {
        t.run(&["plan", "status", "--json"]).json()["state"] == "running"
    });
    let doc = gc_json(&t, &["--keep-runs", "0"]);
    assert_eq!(doc["runs"]["kept_old"][0]["reason"], "live", "{doc:#}");
    assert_eq!(t.run_ids(), vec![ids[1].clone()]);
    live.signal(Signal::SIGINT);
    live.wait().code(10);

    // Asked to, gc removes it (the dry run says so and keeps it).
    let doc = gc_json(
        &t,
        &["--keep-runs", "0", "--include-unfinished", "--dry-run"],
    );
    assert_eq!(
        doc["runs"]["removed"][0]["run_id"],
        ids[1].as_str(),
        "{doc:#}"
    );
    assert_eq!(t.run_ids(), vec![ids[1].clone()]);

    // A plan file that is gone (another branch checked out?) may come back:
    // the run is kept.
    std::fs::rename(t.path("plan.toml"), t.path("plan.away")).expect("move");
    t.run(&["gc", "--keep-runs", "0"])
        .code(0)
        .stdout_has("removed 0 runs")
        .stdout_has("1 old unfinished run whose plan does not load now");
    assert_eq!(t.run_ids(), vec![ids[1].clone()]);
    std::fs::rename(t.path("plan.away"), t.path("plan.toml")).expect("move back");

    // Once its plan changed it can never be resumed: then it goes.
    t.write(
        "plan.toml",
        LONG.replace("touch after.done", "touch after.ok"),
    );
    let out = t.run(&["gc", "--keep-runs", "0"]);
    out.code(0)
        .stdout_has("removed 1 run (")
        .stdout_has("not resumable: the plan changed");
    assert!(t.run_ids().is_empty());
}

#[test]
fn plan_run_resume_with_nothing_to_resume_says_it_starts_a_new_run() {
    let t = Test::new().file("plan.toml", FAILING.replace("exit 3", "exit 0"));
    t.run(&["plan", "run", "plan.toml", "--resume"])
        .code(0)
        .stderr_has("no unfinished run of this plan to resume; starting a new run");
    assert_eq!(t.run_ids().len(), 1);
    // A finished run is nothing to resume either.
    t.run(&["plan", "run", "plan.toml", "--resume"])
        .code(0)
        .stderr_has("starting a new run");
    assert_eq!(t.run_ids().len(), 2);
}

/// The resume question on a terminal (a pty from `script(1)`) says what "n" does.
#[test]
fn the_resume_question_says_that_n_starts_a_new_run() {
    use std::io::Write as _;
    use std::process::Stdio;
    let t = Test::new().file("plan.toml", LONG).file("delay", "30");
    interrupted_run(&t);
    t.write("delay", "0");
    let command = format!("{} plan run plan.toml", crate::support::BIN);
    let mut script = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .current_dir(t.path(""))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("NO_COLOR", "1")
        .env("TERM", "dumb")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("cannot run script(1), which gives gameplan a terminal (install bsdutils): {e}")
        });
    script
        .stdin
        .take()
        .expect("stdin")
        .write_all(b"n\n")
        .expect("answer");
    let out = script.wait_with_output().expect("script ran");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("Resume it (y), or start a new run (n)? [Y/n]"),
        "{text}"
    );
    assert_eq!(t.run_ids().len(), 2, "`n` did not start a new run\n{text}");
    assert!(t.path("after.done").exists(), "{text}");
}

#[test]
fn gc_keeps_the_10_newest_runs_by_default() {
    let t = Test::new().file("plan.toml", FAILING.replace("exit 3", "exit 0"));
    for _ in 0..12 {
        t.run(&["plan", "run", "plan.toml"]).code(0);
    }
    let ids = t.run_ids();
    assert_eq!(ids.len(), 12);
    t.run(&["gc"])
        .code(0)
        .stdout_has("removed 2 runs (")
        .stdout_has("10 runs left");
    assert_eq!(t.run_ids(), ids[2..].to_vec());
    t.run(&["gc"]).code(0).stdout_has("removed 0 runs (0 B)");
}

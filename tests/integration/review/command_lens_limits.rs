//! A command lens's limits: its `timeout` per call, the cap on
//! what it may write on stdout, and the number of units per call. Each
//! leaves what it stopped missing (never clear), and says which limit.

use std::time::{Duration, Instant};

use crate::review::gates::{LENS, THREE_GATES, repo, review, verdict};
use crate::support::Test;

#[test]
fn a_command_lens_past_its_timeout_is_stopped_and_its_units_missing() {
    let plan = THREE_GATES.replace(
        "argv = [\"python3\", \"lens.py\"]",
        "argv = [\"python3\", \"lens.py\"]\ntimeout = 2",
    );
    let t = repo("fn a() {}\n", "SLEEP\n", "fn c() {}\n").file("plans/gates.toml", plan);
    let started = Instant::now();
    t.run(&["plan", "run", "plans/gates.toml"])
        .code(2)
        .stdout_has("missing: src/a.rs: the lens did not answer within 2s (its `timeout`)");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "the lens sleeps 60s; it was not stopped at its timeout ({:?})",
        started.elapsed()
    );
    let first = review(&t, "first");
    assert_eq!(verdict(&first, "lint", "src/c.rs")["verdict"], "missing");
}

#[test]
fn a_timeout_of_zero_is_a_plan_error() {
    let plan = THREE_GATES.replace(
        "argv = [\"python3\", \"lens.py\"]",
        "argv = [\"python3\", \"lens.py\"]\ntimeout = 0",
    );
    let t = repo("", "", "").file("plans/gates.toml", plan);
    t.run(&["plan", "check", "plans/gates.toml"])
        .code(3)
        .stderr_has("lens `lint`: `timeout` is 0 seconds");
}

#[test]
fn a_command_lens_writing_past_the_stdout_cap_leaves_its_units_missing() {
    let t = repo("fn a() {}\n", "FLOOD\n", "fn c() {}\n");
    t.run(&["plan", "run", "plans/gates.toml"])
        .code(2)
        .stdout_has(
            "missing: src/a.rs: the lens wrote more than 16777216 bytes on stdout (the cap)",
        );
}

#[test]
fn a_big_lens_is_sent_in_calls_of_at_most_256_units() {
    let mut t = Test::new()
        .file("lens.py", LENS)
        .file("plans/gates.toml", THREE_GATES);
    for i in 0..300 {
        t = t.file(&format!("src/f{i:03}.rs"), format!("fn f{i}() {{}}\n"));
    }
    t.run(&["plan", "run", "plans/gates.toml"])
        .code(0)
        .stdout_has("lint: SEND-READY (300 units, 300 clear; 300 judged, 0 reused)");
    let log = t.read("lens.log");
    // The calls run side by side: the log's order is theirs to pick.
    let mut calls: Vec<usize> = log.lines().map(|l| l.split(' ').count()).collect();
    calls.sort_unstable();
    assert_eq!(calls, [44, 256], "{log}");
    assert_eq!(review(&t, "first")["lenses"][0]["calls"], 2);
}

/// Ctrl-C while a command lens runs: the run stops (exit 10), the lens's
/// process group is killed at once, and no unit is called clear.
#[test]
fn a_stop_kills_a_running_command_lens() {
    let lens = format!("import os\nopen('lens.pid', 'w').write(str(os.getpid()))\n{LENS}");
    let t = repo("fn a() {}\n", "SLEEP\n", "fn c() {}\n").file("lens.py", lens);
    let spawned = t.spawn(&["plan", "run", "plans/gates.toml"]);
    crate::support::wait_until("the lens to start", Duration::from_secs(30), || {
        !t.read("lens.log").is_empty()
    });
    let pid: i32 = t.read("lens.pid").trim().parse().expect("the lens's pid");
    let started = Instant::now();
    spawned.signal(nix::sys::signal::Signal::SIGINT);
    let out = spawned.wait();
    out.code(10);
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "the lens sleeps 60s; the stop did not end it ({:?})",
        started.elapsed()
    );
    crate::support::wait_until("the lens to be gone", Duration::from_secs(5), || {
        crate::support::proc_stat(pid).is_none_or(|s| s.zombie)
    });
    assert!(!out.stdout.contains("SEND-READY"), "{out}");
}

//! `[executor] kind = "local"`: a plan's cells played as jobs (each a
//! gameplan process playing a batch into a bundle), then judged here; a
//! killed gameplan re-attaches to its jobs instead of submitting again, and
//! Ctrl-C stops every job.

use std::path::Path;
use std::time::Duration;

use nix::sys::signal::Signal;

use crate::support::{Test, wait_until};

/// coins.py, one action every `delay` seconds: cells that take a while.
fn slow_coins(delay: f64) -> String {
    let game = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/games/coins.py"),
    )
    .expect("coins.py");
    game.replace(
        "        elif op == \"act\":\n",
        &format!("        elif op == \"act\":\n            import time; time.sleep({delay})\n"),
    )
}

fn plan(batch: u32, max_actions: u32) -> String {
    format!(
        r#"version = 1
name = "coins"
controllers = ["standard", "rune"]

[executor]
kind = "local"
batch = {batch}

[game]
id = "coins"
driver = "stdio"
command = ["python3", "game/coins.py"]
inputs = ["game/coins.py"]

[budget]
max_actions = {max_actions}

[[personas]]
slug = "collector"
card = "Wants every coin."
player = {{ kind = "random", seed = 3 }}

[[steps]]
id = "play"
kind = "play"
matrix = {{ persona = "*", controller = "*", seed = [1, 2] }}

[[steps]]
id = "aggregate"
kind = "aggregate"
needs = ["play"]
"#
    )
}

/// The job directories the local executor made.
fn jobs(t: &Test) -> Vec<std::path::PathBuf> {
    let root = t.path(".gameplan/executor");
    let Ok(plans) = std::fs::read_dir(&root) else {
        return Vec::new();
    };
    plans
        .flatten()
        .filter(|e| e.path().is_dir())
        .flat_map(|e| std::fs::read_dir(e.path()).into_iter().flatten().flatten())
        .map(|e| e.path())
        .collect()
}

fn journal_lines(t: &Test, event: &str) -> usize {
    let root = t.path(".gameplan/executor");
    std::fs::read_dir(&root)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "jsonl"))
        .map(|e| {
            std::fs::read_to_string(e.path())
                .unwrap_or_default()
                .matches(&format!("\"event\":\"{event}\""))
                .count()
        })
        .sum()
}

#[test]
fn cells_played_as_local_jobs_come_back_and_are_judged_here_once() {
    let t = Test::new()
        .file("plan.toml", plan(3, 6))
        .file("game/coins.py", slow_coins(0.0));
    let out = t.run(&["plan", "run", "plan.toml"]);
    out.code(0)
        .stderr_has("4 cells in 2 jobs on the local executor (2 submitted")
        .stderr_has("4 cells came back from 2 jobs")
        .stdout_has("4 cells (0 played, 4 reused)");
    assert_eq!(jobs(&t).len(), 2);
    // Nothing new to play: no job is sent again.
    t.run(&["plan", "run", "plan.toml", "--new"])
        .code(0)
        .stderr_has("all 4 cells are stored here: no job sent");
    assert_eq!(jobs(&t).len(), 2);
}

#[test]
fn a_killed_gameplan_reattaches_to_its_running_jobs_without_submitting_again() {
    let t = Test::new()
        .file("plan.toml", plan(1, 8))
        .file("game/coins.py", slow_coins(0.3));
    let first = t.spawn(&["plan", "run", "plan.toml"]);
    wait_until("every job submitted", Duration::from_secs(30), || {
        journal_lines(&t, "submitted") == 4
    });
    first.kill9();
    assert_eq!(jobs(&t).len(), 4);
    let again = t.run(&["plan", "resume"]);
    again
        .code(0)
        .stderr_has("resuming the jobs of plan.toml, played elsewhere")
        .stderr_has("(0 submitted, 4 found from an earlier run)")
        .stdout_has("4 cells (0 played, 4 reused)");
    assert_eq!(jobs(&t).len(), 4, "a job was submitted again");
    assert_eq!(journal_lines(&t, "submitted"), 4);
}

#[test]
fn ctrl_c_stops_every_job_and_leaves_no_process_of_theirs() {
    let t = Test::new()
        .file("plan.toml", plan(1, 40))
        .file("game/coins.py", slow_coins(0.5));
    let run = t.spawn(&["plan", "run", "plan.toml"]);
    wait_until("every job running", Duration::from_secs(30), || {
        let dirs = jobs(&t);
        dirs.len() == 4 && dirs.iter().all(|d| d.join("log").exists())
    });
    run.signal(Signal::SIGINT);
    let out = run.wait();
    out.code(10).stderr_has("interrupted: 4 jobs stopped");
    for dir in jobs(&t) {
        assert!(
            dir.join("stopped").exists(),
            "{} not stopped",
            dir.display()
        );
        let pid: i32 = std::fs::read_to_string(dir.join("pid"))
            .expect("pid")
            .trim()
            .parse()
            .expect("a pid");
        assert!(
            crate::support::live_in_group(pid).is_empty(),
            "job {} still runs",
            dir.display()
        );
    }
}

#[test]
fn an_executor_written_wrong_is_shown_where_it_is_written() {
    let t = Test::new().file(
        "plan.toml",
        plan(0, 5).replace("kind = \"local\"", "kind = \"ray\"\nshared_dir = \"runs\""),
    );
    let out = t.run(&["plan", "check", "plan.toml"]);
    out.code(3)
        .stderr_has("plan.toml:6:8: [executor] of kind `ray` needs an `address`")
        .stderr_has("`shared_dir` `runs` is not an absolute path")
        .stderr_has("`batch` must be at least 1");
}

//! `[executor] kind = "local"`: a plan's cells played as jobs (each a
//! gameplan process playing a batch into a bundle), then judged here; a
//! killed gameplan re-attaches to its jobs instead of submitting again, and
//! Ctrl-C stops every job.

use std::time::Duration;

use nix::sys::signal::Signal;

use crate::support::{Test, slow_coins, wait_until};

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
    // The fourth job's directory is made as it is submitted, after its id
    // was journaled: the kill may fall between the two.
    assert!(jobs(&t).len() >= 3);
    let again = t.run(&["plan", "resume"]);
    again
        .code(0)
        .stderr_has("resuming the jobs of plan.toml, played elsewhere")
        // The last journaled may have been killed before it left: it goes
        // again under its own id, so "found" counts 3 or 4.
        .stderr_has("4 cells in 4 jobs on the local executor")
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

/// The coins plan as a paid playtest (the default pipeline on the embedded
/// ledger): two personas × two controllers, each cell a job of its own.
fn paid_plan(max_actions: u32) -> String {
    format!(
        r#"version = 1
name = "coins-paid"
controllers = ["standard", "rune"]

[executor]
kind = "local"
batch = 1

[backend]
kind = "local"

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

[[personas]]
slug = "wanderer"
card = "Goes wherever."
player = {{ kind = "explorer", seed = 5 }}
"#
    )
}

/// Each job of the ledger: (state, charged cents, its runs' states).
fn ledger_jobs(t: &Test) -> Vec<(String, i64, Vec<String>)> {
    let doc = t.run(&["ledger", "show", "--json"]).code(0).json();
    doc["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .map(|j| {
            (
                j["state"].as_str().expect("state").to_owned(),
                j["charged_cents"].as_i64().expect("charged"),
                j["runs"]
                    .as_array()
                    .expect("runs")
                    .iter()
                    .map(|r| r["state"].as_str().expect("run state").to_owned())
                    .collect(),
            )
        })
        .collect()
}

#[test]
fn a_paid_plan_on_the_local_executor_is_bought_here_once_even_through_a_kill() {
    let t = Test::new()
        .file("plan.toml", paid_plan(8))
        .file("game/coins.py", slow_coins(0.3));
    let first = t.spawn(&["plan", "run", "plan.toml", "--yes"]);
    wait_until("every job submitted", Duration::from_secs(30), || {
        journal_lines(&t, "submitted") == 4
    });
    first.kill9();
    // The prepared job, as a gameplan that finished through `plan resume`
    // (which does not remove it) would leave it.
    let prepared = jobs(&t)
        .into_iter()
        .find(|d| d.ends_with("prepare"))
        .expect("the prepared job's directory")
        .join("job.json");
    let kept = std::fs::read(&prepared).expect("job.json");
    // Bought before any job went; nothing delivered from the jobs.
    let jobs_bought = ledger_jobs(&t);
    assert_eq!(jobs_bought.len(), 1, "{jobs_bought:?}");
    assert_eq!(jobs_bought[0].0, "open");
    assert!(jobs_bought[0].2.iter().all(|s| s == "queued"));

    let again = t.run(&["plan", "run", "plan.toml", "--yes"]);
    again
        .code(0)
        .stderr_has("playing for the job prepared by run")
        .stderr_has("4 cells in 4 jobs on the local executor")
        .stdout_has("4 cells (0 played, 4 reused)")
        .stdout_has("settled job job-1");
    // Re-attached: no submission under a new id (the last one journaled
    // may have been killed before it left, and goes under its own id).
    assert_eq!(journal_lines(&t, "submitted"), 4);
    let settled = ledger_jobs(&t);
    assert_eq!(settled.len(), 1, "a second job was bought: {settled:?}");
    assert_eq!(settled[0].0, "settled");
    assert_eq!(settled[0].1, jobs_bought[0].1);
    assert_eq!(settled[0].2, vec!["succeeded"; 4]);
    // The jobs played free: none of them opened a ledger.
    for job in jobs(&t) {
        assert!(
            !job.join("state/ledger.sqlite").exists(),
            "{} reached the ledger",
            job.display()
        );
    }
    // Settled: the next run buys anew only what is not stored (nothing).
    t.run(&["plan", "run", "plan.toml", "--yes", "--new"])
        .code(0)
        .stderr_has("all 4 cells are stored here: no job sent");
    assert_eq!(ledger_jobs(&t).len(), 1);
    // A prepared job left behind by a run that settled it is not played
    // for again: a new playtest buys a job of its own.
    assert!(!prepared.exists(), "a settled job's file was kept");
    std::fs::write(&prepared, kept).expect("put job.json back");
    let fresh = t.run(&["plan", "run", "plan.toml", "--yes", "--new", "--no-reuse"]);
    fresh.code(0).stdout_has("settled job job-2");
    assert!(
        !fresh.stderr.contains("playing for the job prepared"),
        "{}",
        fresh.stderr
    );
    let jobs_now = ledger_jobs(&t);
    assert_eq!(jobs_now.len(), 2, "{jobs_now:?}");
    assert!(jobs_now.iter().all(|j| j.0 == "settled"), "{jobs_now:?}");
}

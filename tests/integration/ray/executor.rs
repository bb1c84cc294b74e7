//! `[executor] kind = "ray"` on the real two-node cluster: a plan's cells
//! played as Ray jobs on both nodes and judged here once; a killed
//! gameplan re-attaches without submitting again; a head that restarted
//! (and forgot its jobs) gets again only the batches whose bundles are
//! missing; Ctrl-C stops every job of the run.

use std::time::Duration;

use gameplan::ray::{JobDetails, JobStatus};
use nix::sys::signal::Signal;

use super::{Cluster, alone, runtime, shared};
use crate::support::{Test, slow_coins, wait_until};

/// A coins plan of `seeds` x 2 controllers cells on the cluster, one job
/// a cell.
fn plan(t: &Test, cluster: &Cluster, seeds: u32, max_actions: u32) -> String {
    plan_in_batches(t, cluster, seeds, max_actions, 1)
}

/// The same, `batch` cells a job.
fn plan_in_batches(
    t: &Test,
    cluster: &Cluster,
    seeds: u32,
    max_actions: u32,
    batch: u32,
) -> String {
    let seeds: Vec<String> = (1..=seeds).map(|s| s.to_string()).collect();
    format!(
        r#"version = 1
name = "coins"
controllers = ["standard", "rune"]

[executor]
kind = "ray"
address = "{}"
shared_dir = "{}"
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
matrix = {{ persona = "*", controller = "*", seed = [{}] }}

[[steps]]
id = "aggregate"
kind = "aggregate"
needs = ["play"]
"#,
        cluster.dashboard(),
        t.path("shared").display(),
        seeds.join(", ")
    )
}

/// This test's jobs, as Ray lists them (their entrypoints name its repo).
fn jobs_of(t: &Test, cluster: &Cluster) -> Vec<JobDetails> {
    let repo = t.path("").display().to_string();
    runtime()
        .block_on(cluster.client().list())
        .expect("list jobs")
        .into_iter()
        .filter(|j| j.entrypoint.contains(repo.trim_end_matches('/')))
        .collect()
}

#[test]
fn twelve_cells_run_as_ray_jobs_on_both_nodes_and_are_judged_here_once() {
    let cluster = shared();
    let t = Test::new().file("game/coins.py", slow_coins(0.0));
    t.write("plan.toml", plan(&t, &cluster, 6, 8));
    let out = t.run(&["plan", "run", "plan.toml"]);
    out.code(0)
        .stderr_has("12 cells in 12 jobs on the ray executor (12 submitted")
        .stderr_has("12 cells came back from 12 jobs")
        .stdout_has("12 cells (0 played, 12 reused)");
    let jobs = jobs_of(&t, &cluster);
    assert_eq!(jobs.len(), 12, "{jobs:#?}");
    assert!(jobs.iter().all(|j| j.status == JobStatus::Succeeded));
    let (a, b) = runtime().block_on(async {
        (
            cluster.node_offering("node_a").await,
            cluster.node_offering("node_b").await,
        )
    });
    let on = |node: &str| {
        jobs.iter()
            .filter(|j| j.driver_node_id.as_deref() == Some(node))
            .count()
    };
    assert!(
        on(&a) > 0 && on(&b) > 0,
        "every job ran on one node: {} on the head, {} on the worker",
        on(&a),
        on(&b)
    );
    assert_eq!(on(&a) + on(&b), 12);
}

#[test]
fn a_killed_gameplan_resumes_attached_to_its_ray_jobs_and_submits_none_again() {
    let cluster = shared();
    let t = Test::new().file("game/coins.py", slow_coins(0.3));
    t.write("plan.toml", plan(&t, &cluster, 2, 8));
    let first = t.spawn(&["plan", "run", "plan.toml"]);
    wait_until("four jobs submitted", Duration::from_secs(60), || {
        jobs_of(&t, &cluster).len() == 4
    });
    first.kill9();
    t.run(&["plan", "resume"])
        .code(0)
        .stderr_has("(0 submitted, 4 found from an earlier run)")
        .stdout_has("4 cells (0 played, 4 reused)");
    assert_eq!(jobs_of(&t, &cluster).len(), 4, "a job was submitted again");
}

/// Jobs of `t` whose bundle holds their cells.
fn whole_bundles(t: &Test) -> usize {
    std::fs::read_dir(t.path("shared"))
        .into_iter()
        .flatten()
        .flatten()
        .flat_map(|plan| {
            std::fs::read_dir(plan.path())
                .into_iter()
                .flatten()
                .flatten()
        })
        .filter(|job| job.path().join("bundle/manifest.json").exists())
        .count()
}

#[test]
fn after_a_head_restart_resume_resubmits_only_the_batches_whose_bundles_are_missing() {
    let mut cluster = alone();
    let t = Test::new().file("game/coins.py", slow_coins(0.4));
    // Four cells in two jobs: one of three cells, one of one, which ends
    // first.
    t.write("plan.toml", plan_in_batches(&t, &cluster, 2, 12, 3));
    let first = t.spawn(&["plan", "run", "plan.toml"]);
    wait_until("the one-cell job's bundle", Duration::from_secs(60), || {
        whole_bundles(&t) == 1
    });
    first.kill9();
    let dir = cluster.dir().to_owned();
    cluster.damaged = true;
    cluster.run(&["restart-head", &dir]);
    // The restart lost the jobs; their gameplans, wherever they ran, go
    // with them (the worker's die with it, a minute later, on their own).
    let repo = t.path("").display().to_string();
    let _ = std::process::Command::new("pkill")
        .args([
            "-KILL",
            "-f",
            &format!("{}.*--bundle", repo.trim_end_matches('/')),
        ])
        .status();
    assert_eq!(whole_bundles(&t), 1, "the three-cell job finished too soon");
    assert!(
        jobs_of(&t, &cluster).is_empty(),
        "the new head knows no job"
    );
    t.run(&["plan", "resume"])
        .code(0)
        .stderr_has("(1 submitted, 1 found from an earlier run)")
        .stdout_has("4 cells (0 played, 4 reused)");
    let again = jobs_of(&t, &cluster);
    assert_eq!(
        again.len(),
        1,
        "only the job without a bundle goes again: {again:#?}"
    );
}

#[test]
fn ctrl_c_stops_every_ray_job_of_the_run() {
    let cluster = shared();
    let t = Test::new().file("game/coins.py", slow_coins(0.5));
    t.write("plan.toml", plan(&t, &cluster, 2, 60));
    let run = t.spawn(&["plan", "run", "plan.toml"]);
    // Other tests share the cluster's four CPUs: some of these jobs may
    // wait their turn (PENDING) when the Ctrl-C comes, and stop as well.
    wait_until(
        "four jobs submitted, one running",
        Duration::from_secs(60),
        || {
            let jobs = jobs_of(&t, &cluster);
            jobs.len() == 4 && jobs.iter().any(|j| j.status == JobStatus::Running)
        },
    );
    run.signal(Signal::SIGINT);
    run.wait()
        .code(10)
        .stderr_has("interrupted: 4 jobs stopped");
    wait_until("every job stopped", Duration::from_secs(60), || {
        jobs_of(&t, &cluster)
            .iter()
            .all(|j| j.status == JobStatus::Stopped)
    });
}

#[test]
fn the_paid_demo_on_ray_is_bought_once_played_on_the_nodes_and_settled_once() {
    let cluster = shared();
    let demo = include_str!("../../../plans/demo.toml");
    let t = Test::new().file(
        "examples/personas/veteran.md",
        include_str!("../../../examples/personas/veteran.md"),
    );
    t.write(
        "plan.toml",
        format!(
            "{demo}\n[executor]\nkind = \"ray\"\naddress = \"{}\"\nshared_dir = \"{}\"\nbatch = 1\n",
            cluster.dashboard(),
            t.path("shared").display()
        ),
    );
    let out = t.run(&["plan", "run", "plan.toml", "--yes"]);
    out.code(0)
        .stderr_has("estimate: 4 cells to buy")
        .stderr_has("prepared job job-1 ($1.00 for 4 cells)")
        .stderr_has("4 cells in 4 jobs on the ray executor (4 submitted")
        .stdout_has("4 cells (0 played, 4 reused)")
        .stdout_has("gate played: SEND-READY")
        .stdout_has("settled job job-1: charged $1.00, refunded $0.00");
    let jobs = jobs_of(&t, &cluster);
    assert_eq!(jobs.len(), 4, "{jobs:#?}");
    assert!(jobs.iter().all(|j| j.status == JobStatus::Succeeded));
    let ledger = t.run(&["ledger", "show", "--json"]).code(0).json();
    let all = ledger["jobs"].as_array().expect("jobs");
    assert_eq!(all.len(), 1, "bought more than once: {ledger:#}");
    assert_eq!(all[0]["state"], "settled");
    assert_eq!(all[0]["charged_cents"], 100);
    assert_eq!(ledger["accounts"][0]["balance_cents"], 9_900);
    let runs: Vec<&str> = all[0]["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .map(|r| r["state"].as_str().expect("state"))
        .collect();
    assert_eq!(runs, vec!["succeeded"; 4]);
}

#[test]
fn a_job_holds_as_many_cpus_as_its_pool_plays_at_once_never_more_than_a_node_has() {
    let cluster = shared();
    let t = Test::new().file("game/coins.py", slow_coins(0.0));
    // A pool of 4 on nodes of 2 CPUs: each job plays 2 at once, holding 2.
    let plan =
        plan_in_batches(&t, &cluster, 4, 6, 4).replace("[budget]", "[pools]\nplay = 4\n\n[budget]");
    t.write("plan.toml", plan);
    t.run(&["plan", "run", "plan.toml"])
        .code(0)
        .stderr_has("8 cells in 2 jobs on the ray executor (2 submitted")
        .stdout_has("8 cells (0 played, 8 reused)");
    let jobs = jobs_of(&t, &cluster);
    assert_eq!(jobs.len(), 2, "{jobs:#?}");
    for job in &jobs {
        assert!(
            job.entrypoint.contains("'--concurrency' '2'"),
            "{}",
            job.entrypoint
        );
    }
}

//! A hosted playtest played by `serve --executor ray` on the two-node
//! cluster: its cells are Ray jobs, it is charged its quote once and
//! settled once, and the report comes home.

use gameplan::ray::JobStatus;

use super::{runtime, shared};
use crate::hosted::{PLAN, balance, jobs};
use crate::support::{Served, Test, slow_coins};

#[test]
fn a_hosted_playtest_on_ray_is_charged_once_played_as_ray_jobs_and_settled_once() {
    let cluster = shared();
    let t = Test::new()
        .file("plan.toml", PLAN)
        .file("game/coins.py", slow_coins(0.0));
    let builds = t.path("server").display().to_string();
    let shared_dir = t.path("shared").display().to_string();
    let dashboard = cluster.dashboard();
    let server = Served::with_flags_and_token(
        &t.path(""),
        &t.path("served.sqlite"),
        &[
            "--executor",
            "ray",
            "--address",
            &dashboard,
            "--shared-dir",
            &shared_dir,
            "--builds",
            &builds,
        ],
    );
    let t = t
        .env("GAMEPLAN_SERVER", &server.url)
        .env("GAMEPLAN_TOKEN", &server.token);
    let before = balance(&server.ledger(&t));
    let ran = t.run(&["hosted", "run", "plan.toml", "--yes", "--wait", "--json"]);
    let playtest = ran.code(0).json();
    assert_eq!(playtest["phase"], "report_ready", "{ran}");
    let price = playtest["charged_cents"].as_i64().expect("charged");
    assert_eq!(playtest["refunded_cents"], 0);
    let id = playtest["id"].as_str().expect("an id");
    assert!(
        t.path(&format!(".gameplan/hosted/{id}/report.html"))
            .is_file()
    );
    let ledger = server.ledger(&t);
    assert_eq!(jobs(&ledger).len(), 1, "admitted once: {ledger}");
    assert_eq!(jobs(&ledger)[0]["state"], "settled");
    assert_eq!(balance(&ledger), before - price);
    // The cells were Ray jobs, from this playtest's workspace.
    let workspace = t.path("server/work").display().to_string();
    let ray_jobs: Vec<_> = runtime()
        .block_on(cluster.client().list())
        .expect("list jobs")
        .into_iter()
        .filter(|j| j.entrypoint.contains(&workspace))
        .collect();
    assert!(!ray_jobs.is_empty(), "no Ray job played the playtest");
    assert!(
        ray_jobs.iter().all(|j| j.status == JobStatus::Succeeded),
        "{ray_jobs:#?}"
    );
}

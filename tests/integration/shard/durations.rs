//! Slices cut by time: `plan merge` keeps how long each cell took, and
//! `--shard K/N --durations FILE` deals the cells so the shards end
//! together; shards cut differently are not merged.

use super::merge::{cells_of, maze, three_shards};
use crate::support::Test;

fn shard_by_time(t: &Test, k: u32, n: u32, durations: &str) -> crate::support::Output {
    let spec = format!("{k}/{n}");
    let state = format!("timed{k}");
    let bundle = format!("t{k}");
    t.run(&[
        "plan",
        "run",
        "plan.toml",
        "--shard",
        &spec,
        "--durations",
        durations,
        "--state-dir",
        &state,
        "--bundle",
        &bundle,
    ])
}

#[test]
fn a_merge_keeps_each_cells_time_and_shards_cut_by_it_are_balanced_and_merge() {
    let t = maze();
    three_shards(&t);
    t.run(&[
        "plan",
        "merge",
        "plan.toml",
        "b1",
        "b2",
        "b3",
        "--state-dir",
        "merged",
    ])
    .code(1)
    .stderr_has("kept how long 8 cells took in");
    let kept: serde_json::Value =
        serde_json::from_str(&t.read("merged/shards/durations.json")).expect("durations");
    let cells = kept["cells"].as_object().expect("cells");
    assert_eq!(cells.len(), 8, "{kept:#}");
    assert!(cells.values().all(|ms| ms.as_u64().is_some()), "{kept:#}");

    // One cell that takes as long as all the others: it gets a shard of
    // its own, the seven others share the second.
    let mut heavy = kept.clone();
    let slow = cells.keys().next().expect("a cell").clone();
    heavy["cells"][&slow] = serde_json::json!(3_600_000);
    t.write("heavy.json", serde_json::to_string(&heavy).expect("json"));
    for k in 1..=2 {
        shard_by_time(&t, k, 2, "heavy.json").code(0);
    }
    let (one, two) = (cells_of(&t, "t1"), cells_of(&t, "t2"));
    let (alone, rest) = if one.len() == 1 {
        (one, two)
    } else {
        (two, one)
    };
    assert_eq!(alone, vec![slow.clone()], "the slow cell shares its shard");
    assert_eq!(rest.len(), 7);
    t.run(&[
        "plan",
        "merge",
        "plan.toml",
        "t1",
        "t2",
        "--state-dir",
        "merged2",
    ])
    .code(1)
    .stderr_has("merging 8 cells from 2 bundles")
    .stdout_has("gate blockers: FIX FIRST");

    // A shard cut by hash does not merge with one cut by time.
    t.run(&[
        "plan",
        "run",
        "plan.toml",
        "--shard",
        "2/2",
        "--state-dir",
        "hashed",
        "--bundle",
        "h2",
    ])
    .code(0);
    t.run(&[
        "plan",
        "merge",
        "plan.toml",
        "t1",
        "h2",
        "--state-dir",
        "merged3",
    ])
    .code(3)
    .stderr_has("the shards were cut differently")
    .stderr_has("same `--durations FILE`")
    .stderr_has("Nothing was run or charged");
}

#[test]
fn a_durations_file_that_is_not_one_is_refused_before_anything_runs() {
    let t = maze().file("bad.json", "{\"cells\": 3}");
    shard_by_time(&t, 1, 2, "bad.json")
        .code(3)
        .stderr_has("bad.json is not a durations file")
        .stderr_has("Nothing was run or charged");
    shard_by_time(&t, 1, 2, "absent.json")
        .code(3)
        .stderr_has("cannot read the durations file");
    assert!(!t.path("timed1/runs").exists(), "a run was made");
    // --durations cuts slices: it goes with --shard.
    t.run(&["plan", "run", "plan.toml", "--durations", "bad.json"])
        .code(3)
        .stderr_has("--shard <K/N>");
}

//! Bundles that cannot be merged are refused before anything runs (exit 3,
//! no run made), naming the cells, files or plans at fault; and a plan
//! that moves money is not sharded.

use super::merge::{maze, three_shards};
use crate::support::Test;

/// No run was made in `state`: nothing ran.
fn nothing_ran(t: &Test, state: &str) {
    let runs = t.path(&format!("{state}/runs"));
    let count = std::fs::read_dir(&runs).map_or(0, Iterator::count);
    assert_eq!(count, 0, "a run was made in {state}");
}

#[test]
fn a_missing_shard_is_named_with_its_cells_and_nothing_runs() {
    let t = maze();
    three_shards(&t);
    let missing = super::merge::cells_of(&t, "b2");
    let out = t.run(&["plan", "merge", "plan.toml", "b1", "b3", "--state-dir", "m"]);
    out.code(3)
        .stderr_has("in no bundle")
        .stderr_has("`--shard 2/3`")
        .stderr_has("Nothing was run or charged");
    for cell in &missing {
        out.stderr_has(cell);
    }
    nothing_ran(&t, "m");
}

#[test]
fn a_bundle_given_twice_is_refused_naming_its_cells() {
    let t = maze();
    three_shards(&t);
    let twice = super::merge::cells_of(&t, "b1");
    let out = t.run(&[
        "plan",
        "merge",
        "plan.toml",
        "b1",
        "b2",
        "b3",
        "b1",
        "--state-dir",
        "m",
    ]);
    out.code(3).stderr_has("cells in more than one bundle");
    for cell in &twice {
        out.stderr_has(&format!("{cell} (shards 1/3, 1/3)"));
    }
    nothing_ran(&t, "m");
}

#[test]
fn a_changed_file_a_cut_manifest_and_another_plans_bundle_are_refused() {
    let t = maze();
    three_shards(&t);
    // One byte more in a cell's report.
    let cell = &super::merge::cells_of(&t, "b1")[0];
    let report = format!("b1/cells/{cell}/report.md");
    let mut text = t.read(&report);
    text.push('!');
    t.write(&report, text);
    t.run(&[
        "plan",
        "merge",
        "plan.toml",
        "b1",
        "b2",
        "b3",
        "--state-dir",
        "m",
    ])
    .code(3)
    .stderr_has(&format!("cells/{cell}/report.md is"))
    .stderr_has("the bundle was changed or cut short");
    nothing_ran(&t, "m");

    // A manifest that is not one.
    t.write("b2/manifest.json", "{\"format\": 1, \"cells\": ");
    t.run(&["plan", "merge", "plan.toml", "b2", "--state-dir", "m"])
        .code(3)
        .stderr_has("manifest.json is not a bundle manifest");

    // The plan changed since the shards ran.
    let plan = t
        .read("plan.toml")
        .replace("reads nothing.", "reads nothing at all.");
    t.write("plan.toml", plan);
    t.run(&["plan", "merge", "plan.toml", "b3", "--state-dir", "m"])
        .code(3)
        .stderr_has("not this plan");
    nothing_ran(&t, "m");

    // Not a bundle at all.
    t.run(&["plan", "merge", "plan.toml", "machine1", "--state-dir", "m"])
        .code(3)
        .stderr_has("not a shard's bundle");
}

#[test]
fn a_manifest_over_the_size_limit_is_refused_unread() {
    let t = maze();
    std::fs::create_dir_all(t.path("huge")).expect("dir");
    let file = std::fs::File::create(t.path("huge/manifest.json")).expect("create");
    // Sparse: the limit is checked before a byte is read.
    file.set_len(64 * 1024 * 1024 + 1).expect("size");
    t.run(&["plan", "merge", "plan.toml", "huge"])
        .code(3)
        .stderr_has("over the 67108864-byte limit");
}

#[test]
fn a_paid_plans_shard_without_a_prepared_job_is_refused_and_nothing_is_charged() {
    let demo = include_str!("../../../plans/demo.toml");
    let t = Test::new().file("plan.toml", demo).file(
        "examples/personas/veteran.md",
        include_str!("../../../examples/personas/veteran.md"),
    );
    let out = t.run(&["plan", "run", "plan.toml", "--shard", "1/2", "--yes"]);
    out.code(3)
        .stderr_has("moves money")
        .stderr_has("no prepared job in")
        .stderr_has("--shard prepare")
        .stderr_has("Nothing was run or charged");
    nothing_ran(&t, ".gameplan");
    assert!(
        !t.path(".gameplan/ledger.sqlite").exists(),
        "a ledger was opened for a refused shard"
    );
    t.run(&["plan", "run", "plan.toml", "--shard", "3/2"])
        .code(3)
        .stderr_has("K must be between 1 and 2");
    // A free plan has no job to prepare.
    let free = maze();
    free.run(&["plan", "run", "plan.toml", "--shard", "prepare"])
        .code(3)
        .stderr_has("has none to buy")
        .stderr_has("Nothing was run or charged");
    nothing_ran(&free, ".gameplan");
    // Nor does its merge take one: a prepare bundle among its bundles is
    // refused, not ignored.
    free.write("prepared/job.json", "{}");
    free.run(&["plan", "merge", "plan.toml", "prepared", "b1"])
        .code(3)
        .stderr_has("holds a prepared job")
        .stderr_has("buys nothing before its cells play")
        .stderr_has("Nothing was run or charged");
    nothing_ran(&free, ".gameplan");
}

#[test]
fn more_shards_than_cells_leave_empty_bundles_that_still_merge() {
    let t = maze();
    let mut bundles = Vec::new();
    let mut held = 0;
    for k in 1..=12 {
        let bundle = format!("b{k}");
        t.run(&[
            "plan",
            "run",
            "plan.toml",
            "--shard",
            &format!("{k}/12"),
            "--bundle",
            &bundle,
        ])
        .code(0);
        held += super::merge::cells_of(&t, &bundle).len();
        bundles.push(bundle);
    }
    assert_eq!(held, 8);
    let mut args = vec!["plan", "merge", "plan.toml"];
    args.extend(bundles.iter().map(String::as_str));
    args.extend(["--state-dir", "m"]);
    t.run(&args)
        .code(1)
        .stdout_has("8 cells (0 played, 8 reused)");
}

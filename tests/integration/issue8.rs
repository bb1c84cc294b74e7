//! Regression tests for issue 8 items whose defect shows only through the
//! real binary (the others are unit tests beside the code they fix).

use std::time::Duration;

use crate::support::{Test, by_step, expect_steps, wait_until};

/// Item 24: matrix values `a/b`, `a_b` and `a b` shared one step directory,
/// and two of the three cells failed with "this step is busy".
#[test]
fn issue8_item24_matrix_values_that_escape_alike_get_their_own_step_directories() {
    let plan = r#"version = 1
name = "m"

[[steps]]
id = "s"
kind = "command"
run = "sleep 0.3"
matrix = { v = ["a/b", "a_b", "a b"] }
"#;
    let t = Test::new().file("plan.toml", plan);
    let run = t.run(&[
        "plan",
        "run",
        "plan.toml",
        "--yes",
        "--json",
        "--concurrency",
        "3",
    ]);
    run.code(0);
    assert_eq!(
        by_step(&run.json(), "state"),
        expect_steps(&[
            ("s[a b]", "succeeded"),
            ("s[a/b]", "succeeded"),
            ("s[a_b]", "succeeded"),
        ]),
        "{run}"
    );
    let ids = t.run_ids();
    let steps = t.path(&format!(".gameplan/runs/{}/steps", ids[0]));
    let mut dirs: Vec<String> = std::fs::read_dir(steps)
        .expect("steps dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    dirs.sort();
    assert_eq!(dirs.len(), 3, "{dirs:?}");
    assert_eq!(
        dirs[0], "s[a_b]",
        "a plain id keeps its plain name: {dirs:?}"
    );
}

/// One journal line as gameplan writes it: the event and its CRC32C.
fn journal_line(event: &str) -> String {
    format!(
        "{{\"format\":1,\"crc32c\":{},\"event\":{event}}}\n",
        crc32c::crc32c(event.as_bytes())
    )
}

/// Item 15: a crafted record with `attempt: 4294967295` panicked a debug
/// build on resume (`attempt to add with overflow`).
#[test]
fn issue8_item15_a_crafted_attempt_number_does_not_panic_a_resume() {
    let plan =
        "version = 1\nname = \"m\"\n\n[[steps]]\nid = \"a\"\nkind = \"command\"\nrun = \"true\"\n";
    let t = Test::new().file("plan.toml", plan);
    t.run(&["plan", "run", "plan.toml", "--yes"]).code(0);
    let id = t.run_ids().remove(0);
    let journal = format!(".gameplan/runs/{id}/journal.jsonl");
    let header = t.read(&journal).lines().next().expect("header").to_owned();
    let crafted = journal_line(
        r#"{"event":"step_started","step":"a","attempt":4294967295,"at":"2026-01-01T00:00:00Z"}"#,
    );
    t.write(&journal, format!("{header}\n{crafted}"));
    // `wait` fails the test on a panic message or a death by signal.
    let resume = t.run(&["plan", "resume", &id, "--yes"]);
    assert_ne!(resume.code, Some(0), "{resume}");
    resume.stderr_has("4294967295");
}

/// Item 11: `plan stop` signalled the pid in the lock file without checking
/// the host beside it, and a pid it could not use became `kill(0)` (its own
/// process group).
#[test]
fn issue8_item11_plan_stop_refuses_a_run_on_another_host_or_an_unusable_pid() {
    let plan = "version = 1\nname = \"m\"\n\n[[steps]]\nid = \"long\"\nkind = \"command\"\nrun = \"touch started && sleep 30\"\n";
    let t = Test::new().file("plan.toml", plan);
    let mut gameplan = t.spawn(&["plan", "run", "plan.toml", "--yes"]);
    wait_until("the step to start", Duration::from_secs(30), || {
        t.path("started").exists()
    });
    let run_id = t.run_ids().pop().expect("a run");
    let locks = t.path(".gameplan/locks");
    let lock = std::fs::read_dir(&locks)
        .expect("locks dir")
        .map(|e| e.expect("entry").path())
        .find(|p| p.extension().is_some_and(|e| e == "lock"))
        .expect("a lock file");
    let original = std::fs::read_to_string(&lock).expect("lock content");
    let mut holder: serde_json::Value = serde_json::from_str(&original).expect("holder JSON");

    // The content is only a message: rewriting it keeps the OS lock held.
    holder["host"] = "elsewhere.example".into();
    std::fs::write(&lock, holder.to_string()).expect("rewrite lock");
    t.run(&["plan", "stop", &run_id])
        .code(3)
        .stderr_has("runs on host `elsewhere.example`")
        .stderr_has("nothing was signalled");
    assert!(
        gameplan.is_running(),
        "a run on another host is not signalled"
    );

    holder["host"] =
        serde_json::from_str::<serde_json::Value>(&original).expect("json")["host"].clone();
    for pid in [0u64, 4_294_967_295] {
        holder["pid"] = pid.into();
        std::fs::write(&lock, holder.to_string()).expect("rewrite lock");
        // In a group of its own: had it signalled group 0, it would have
        // killed itself, not the test runner.
        t.spawn_in_group(&["plan", "stop", &run_id])
            .wait()
            .code(3)
            .stderr_has(&format!("names pid {pid}"));
        assert!(gameplan.is_running(), "pid {pid} signalled something");
    }

    std::fs::write(&lock, &original).expect("restore lock");
    t.run(&["plan", "stop", &run_id]).code(0);
    gameplan.wait().code(10);
}

/// Item 5: a store entry edited to name one of the step's inputs (or the
/// plan file) is not restored over it: the entry is refused, the step runs,
/// and the source file keeps its content.
#[test]
fn issue8_item5_an_edited_store_entry_never_overwrites_an_input_or_the_plan() {
    let plan = r#"version = 1
name = "scope"

[[steps]]
id = "build"
kind = "command"
run = "sh step.sh"
inputs = ["step.sh"]
outputs = ["out.txt"]
"#;
    let t = Test::new()
        .file("plan.toml", plan)
        .file("step.sh", "echo built > out.txt\n");
    t.run(&["plan", "run", "plan.toml"]).code(0);
    // Point the stored entry's only output at step.sh, with out.txt's
    // content and digest: a restore that trusts the entry overwrites it.
    let entries: Vec<std::path::PathBuf> = walk(&t.path(".gameplan/store"))
        .into_iter()
        .filter(|p| p.ends_with("entry.json"))
        .collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
    for target in ["step.sh", "plan.toml"] {
        let text = std::fs::read_to_string(&entries[0]).expect("entry");
        let mut entry: serde_json::Value = serde_json::from_str(&text).expect("json");
        entry["outputs"][0]["path"] = target.into();
        std::fs::write(&entries[0], entry.to_string()).expect("edit entry");
        let out = t.run(&["plan", "run", "plan.toml", "--json"]);
        assert_eq!(by_step(&out.json(), "state")["build"], "succeeded", "{out}");
        assert_eq!(t.read("step.sh"), "echo built > out.txt\n");
        assert!(t.read("plan.toml").contains("name = \"scope\""));
        // Put the entry back the way the run that stored it wrote it.
        std::fs::write(&entries[0], &text).expect("restore entry");
    }
    let out = t.run(&["plan", "run", "plan.toml", "--json"]);
    assert_eq!(by_step(&out.json(), "state")["build"], "reused", "{out}");
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(walk(&path));
        } else {
            found.push(path);
        }
    }
    found
}

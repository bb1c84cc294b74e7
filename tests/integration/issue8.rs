//! Regression tests for issue 8 items whose defect shows only through the
//! real binary (the others are unit tests beside the code they fix).

use crate::support::{Test, by_step, expect_steps};

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

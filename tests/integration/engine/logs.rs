//! Every step's output in one log file per run, read back
//! per step by its segments; no file or directory per command step; a full
//! disk named where it strikes; runs from before still shown.

use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use crate::support::{SmallDisk, Test, proc_stat, step, wait_until};

/// Long enough for a debug gameplan to start, run a short step and react,
/// on two cores shared with other builds.
const SOON: Duration = Duration::from_secs(10);

/// `PREFIX1\n` … `PREFIXn\n`, as the steps print them.
fn lines(prefix: &str, n: usize) -> String {
    (1..=n)
        .map(|i| format!("{prefix}{i}"))
        .fold(String::new(), |out, line| out + &line + "\n")
}

/// Every regular file and directory under `dir`.
fn walk(dir: &Path) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let mut files = Vec::new();
    let mut dirs = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).expect("read dir").flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path.clone());
                todo.push(path);
            } else {
                files.push(path);
            }
        }
    }
    (files, dirs)
}

/// Three steps print in turn while they run side by side, ten print one
/// line each, twenty print nothing: each step's log reads back whole and
/// alone from the run's one `steps.log`, and the run made no file and no
/// directory per step.
#[test]
fn one_log_per_run_holds_every_steps_output_read_back_per_step() {
    const PLAN: &str = r#"version = 1
name = "many"

[[steps]]
id = "talk"
kind = "command"
run = "for i in 1 2 3 4 5; do echo \"$GAMEPLAN_MATRIX_WHO$i\"; sleep 0.1; done"
matrix = { who = ["a", "b", "c"] }

[[steps]]
id = "one"
kind = "command"
run = "echo line-of-$GAMEPLAN_MATRIX_N"
matrix = { n = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10] }

[[steps]]
id = "quiet"
kind = "command"
run = "true"
matrix = { n = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20] }
"#;
    let t = Test::new().file("plan.toml", PLAN);
    let run = t.run(&["plan", "run", "plan.toml", "--json", "--concurrency", "3"]);
    let report = run.code(0).json();
    let id = report["run_id"].as_str().expect("run id").to_owned();
    let mut expected_bytes = 0;
    for who in ["a", "b", "c"] {
        let log = t.step_log(&format!("talk[{who}]"), &id);
        assert_eq!(log, lines(who, 5), "{run}");
        expected_bytes += log.len();
    }
    for n in 1..=10 {
        let log = t.step_log(&format!("one[{n}]"), &id);
        assert_eq!(log, format!("line-of-{n}\n"));
        expected_bytes += log.len();
    }
    // Side by side, their lines interleave in the one file.
    let all = t.read(&format!(".gameplan/runs/{id}/steps.log"));
    let at = |needle: &str| all.find(needle).expect(needle);
    assert!(at("a5") > at("b1") && at("b5") > at("a1"), "{all}");
    // A step that printed nothing wrote nothing.
    assert_eq!(all.len(), expected_bytes, "{all}");
    let quiet = t.run(&["plan", "log", "quiet[7]", &id]);
    quiet.code(0).stderr_has("has no log: it printed nothing");
    assert!(quiet.stdout.is_empty(), "{quiet}");
    t.run(&["plan", "log", "nope", &id])
        .code(3)
        .stderr_has("has no step `nope`; its steps: talk[a], ");
    // The report and the status name how to print a log, not a file.
    assert_eq!(
        step(&report, "talk[a]")["log"],
        format!("`gameplan plan log 'talk[a]' {id}`"),
        "quoted for the shell, where [a] is a pattern"
    );
    assert!(step(&report, "quiet[1]").get("log").is_none(), "{run}");

    let (files, dirs) = walk(&t.path(&format!(".gameplan/runs/{id}")));
    let mut names: Vec<String> = files
        .iter()
        .map(|f| f.file_name().expect("name").to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "attempts.lock",
            "exits.jsonl",
            "journal.jsonl",
            "report.html",
            "steps.log",
            "summary.json"
        ],
        "33 steps, the same files as one (and the run's page)"
    );
    assert!(dirs.is_empty(), "no directory per step: {dirs:?}");
}

/// Runs once until killed, then prints `second`.
const AGAIN: &str = r#"version = 1
name = "again"

[[steps]]
id = "a"
kind = "command"
run = "if [ -f ran ]; then echo second; else touch ran; echo first; echo $$ > b.pid; sleep 30; fi"
"#;

/// `kill -9` of gameplan mid-step: the step finishes under its launcher,
/// which records where its output went; the resume journals that and shows
/// the step's own log (not a neighbour's, not the empty log of a re-run).
/// Killed with its launcher and its step, the attempt runs again, and its
/// log is the new attempt's alone.
#[test]
fn a_kill_9_mid_step_then_resume_shows_each_steps_own_log() {
    const PLAN: &str = r#"version = 1
name = "killed"

[[steps]]
id = "a"
kind = "command"
run = "echo a-before; echo $$ > a.pid; while [ ! -f release ]; do sleep 0.05; done; echo a-after"

[[steps]]
id = "b"
kind = "command"
run = "for i in 1 2 3 4 5 6; do echo b$i; sleep 0.1; done"

[[steps]]
id = "c"
kind = "command"
needs = ["a"]
run = "echo c-ran"
"#;
    let t = Test::new().file("plan.toml", PLAN);
    let gameplan = t.spawn(&["plan", "run", "plan.toml"]);
    wait_until("`a` to start", SOON, || !t.read("a.pid").trim().is_empty());
    let killed = gameplan.kill9();
    assert_eq!(killed.code, None, "{killed}");
    t.write("release", "");
    let resumed = t.run(&["plan", "resume", "--json"]);
    let report = resumed.code(0).json();
    let id = report["run_id"].as_str().expect("run id").to_owned();
    assert_eq!(step(&report, "a")["attempts"], 0, "ran once: {resumed}");
    assert_eq!(t.step_log("a", &id), "a-before\na-after\n");
    assert_eq!(t.step_log("b", &id), lines("b", 6));
    assert_eq!(t.step_log("c", &id), "c-ran\n");
    // The segments are in the journal: the status needs no exits.jsonl.
    std::fs::remove_file(t.path(&format!(".gameplan/runs/{id}/exits.jsonl"))).expect("rm");
    assert_eq!(t.step_log("a", &id), "a-before\na-after\n");

    let t = Test::new().file("plan.toml", AGAIN);
    let gameplan = t.spawn(&["plan", "run", "plan.toml"]);
    wait_until("`a` to start", SOON, || !t.read("b.pid").trim().is_empty());
    let pid: i32 = t.read("b.pid").trim().parse().expect("a pid");
    let group = proc_stat(pid).expect("`a` runs").pgrp;
    let launcher = gameplan.launcher();
    let _ = nix::sys::signal::kill(Pid::from_raw(launcher), Signal::SIGKILL);
    let _ = killpg(Pid::from_raw(group), Signal::SIGKILL);
    let _ = gameplan.kill9();
    let resumed = t.run(&["plan", "resume", "--json"]);
    let id = resumed.code(0).json()["run_id"]
        .as_str()
        .expect("run id")
        .to_owned();
    assert_eq!(t.step_log("a", &id), "second\n", "{resumed}");
}

/// Issue 19: on a full disk a step failed as "exited with code 1 (no
/// output)": its own error was lost because its log could not be written
/// either. Now the disk is named as the cause with the step's last words,
/// the journal stays readable, and the run resumes once space is freed.
#[test]
fn a_full_disk_under_a_steps_log_is_named_and_the_run_resumes() {
    const PLAN: &str = r#"version = 1
name = "full"

[[steps]]
id = "fill"
kind = "command"
run = "if [ -f filled ]; then echo fine; else touch filled; head -c 2000000 /dev/zero > state/big; echo my-last-words >&2; exit 1; fi"

[[steps]]
id = "after"
kind = "command"
needs = ["fill"]
run = "echo after-ran"
"#;
    let t = Test::new().file("plan.toml", PLAN);
    let _disk = SmallDisk::mount(t.path("state"), "512k");
    let run = t.run(&["plan", "run", "plan.toml", "--state-dir", "state"]);
    run.code(1)
        .stdout_has("stopped: `fill`: the disk holding ")
        .stdout_has(" is full: ")
        .stdout_has(" bytes free")
        .stdout_has("No space left on device")
        .stdout_has("my-last-words")
        .stdout_has("resume with: gameplan plan resume");
    assert!(!run.stdout.contains("(no output)"), "{run}");

    t.run(&["plan", "status", "--state-dir", "state"])
        .code(0)
        .stdout_has("fill: the disk holding ")
        .stdout_has("my-last-words");
    // The journal is intact: the status reads it and offers the resume.
    let status = t.run(&["plan", "status", "--json", "--state-dir", "state"]);
    let doc = status.code(0).json();
    assert_eq!(doc["torn_tail"], false, "{status}");
    assert_eq!(doc["resumable"], true, "{status}");
    assert_eq!(step(&doc, "fill")["state"], "interrupted", "{status}");
    assert_eq!(step(&doc, "after")["state"], "pending", "{status}");

    std::fs::remove_file(t.path("state/big")).expect("free the space");
    let resumed = t.run(&["plan", "resume", "--json", "--state-dir", "state"]);
    let report = resumed.code(0).json();
    let id = report["run_id"].as_str().expect("run id");
    assert_eq!(step(&report, "fill")["state"], "succeeded", "{resumed}");
    assert_eq!(step(&report, "after")["state"], "succeeded", "{resumed}");
    // Its state directory is not the default: the report says how to
    // print the log from there.
    let shown = step(&report, "fill")["log"].as_str().expect("a log");
    assert!(
        shown.starts_with("`gameplan plan log fill ") && shown.contains(" --state-dir "),
        "{shown}"
    );
    let log = t.run(&["plan", "log", "fill", id, "--state-dir", "state"]);
    assert_eq!(log.code(0).stdout, "fine\n");
}

/// A run written before the one log kept `steps/<step>/stdout.log`, and its
/// journal holds no segments: its logs still show.
#[test]
fn a_run_from_before_the_one_log_still_shows_its_logs() {
    use gameplan::journal::Journal;
    use gameplan::journal::run::{Event, PlannedStep, RecordedOptions, RunOutcome, StepState};
    let t = Test::new().file(
        "plan.toml",
        "version = 1\nname = \"old\"\n\n[[steps]]\nid = \"bad\"\nkind = \"command\"\nrun = \"exit 3\"\n",
    );
    let id = "20260101-000000-000-0001";
    let run = t.path(&format!(".gameplan/runs/{id}"));
    let old_log = run.join("steps/bad/stdout.log");
    let mut journal = Journal::create(&run.join("journal.jsonl")).expect("journal");
    for event in [
        Event::RunStarted {
            events_version: gameplan::journal::run::EVENTS_VERSION,
            run_id: id.into(),
            plan: "old".into(),
            plan_hash: "0".repeat(64),
            plan_path: "plan.toml".into(),
            vars: vec![],
            started_at: "2026-01-01T00:00:00Z".into(),
            gameplan: "0.1.0".into(),
            steps: vec![PlannedStep {
                id: "bad".into(),
                kind: "command".into(),
                needs: vec![],
            }],
            options: RecordedOptions::default(),
        },
        Event::StepStarted {
            step: "bad".into(),
            attempt: 1,
            at: "2026-01-01T00:00:00Z".into(),
        },
        Event::StepFinished {
            step: "bad".into(),
            state: StepState::Failed,
            attempt: 1,
            key: None,
            outputs: None,
            duration_ms: 5,
            exit_code: Some(3),
            message: Some(format!(
                "exited with code 3; last lines of {}:\n    boom",
                old_log.display()
            )),
            log: vec![],
        },
        Event::RunFinished {
            at: "2026-01-01T00:00:01Z".into(),
            outcome: RunOutcome::Failed,
            exit_code: 1,
            duration_ms: Some(1000),
        },
    ] {
        journal.append(&event).expect("append");
    }
    journal.commit().expect("commit");
    drop(journal);
    t.write(
        &format!(".gameplan/runs/{id}/steps/bad/stdout.log"),
        "line-01\nboom\n",
    );
    // The old journal line has no `log` field at all.
    assert!(
        !t.read(&format!(".gameplan/runs/{id}/journal.jsonl"))
            .contains("\"log\"")
    );

    let status = t.run(&["plan", "status", id]);
    status
        .code(0)
        .stdout_has("bad: exited with code 3; last lines of ")
        .stdout_has("    boom");
    let doc = t.run(&["plan", "status", id, "--json"]).code(0).json();
    assert_eq!(
        step(&doc, "bad")["log"].as_str(),
        Some(old_log.display().to_string().as_str())
    );
    assert_eq!(t.step_log("bad", id), "line-01\nboom\n");
    t.run(&["plan", "runs"]).code(0).stdout_has(id);
}

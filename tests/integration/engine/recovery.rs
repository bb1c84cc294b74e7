//! Recovery: the items whose defect shows only through the
//! real binary (the others are unit tests beside the code they fix).

use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use crate::support::{
    SmallDisk, Test, by_step, expect_steps, live_in_group, proc_stat, step, wait_until,
};

/// Long enough for a debug gameplan to start, run a short step and react,
/// on two cores shared with other builds.
const SOON: Duration = Duration::from_secs(10);

/// Item 24: matrix values `a/b`, `a_b` and `a b` shared one step directory,
/// and two of the three cells failed with "this step is busy". A command
/// step has no directory now (issue 19); each cell still has its own lock
/// and its own log.
#[test]
fn matrix_values_that_escape_alike_get_their_own_step_directories() {
    let plan = r#"version = 1
name = "m"

[[steps]]
id = "s"
kind = "command"
run = "echo \"cell $GAMEPLAN_MATRIX_V\"; sleep 0.3"
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
    for v in ["a/b", "a_b", "a b"] {
        assert_eq!(
            t.step_log(&format!("s[{v}]"), &ids[0]),
            format!("cell {v}\n")
        );
    }
    assert!(
        !t.path(&format!(".gameplan/runs/{}/steps", ids[0])).exists(),
        "a command step makes no directory"
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
fn a_crafted_attempt_number_does_not_panic_a_resume() {
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
fn plan_stop_refuses_a_run_on_another_host_or_an_unusable_pid() {
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
fn an_edited_store_entry_never_overwrites_an_input_or_the_plan() {
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
    // content and digest, in a record with a valid checksum (a forged
    // entry, not a damaged one): a restore that trusts it overwrites it.
    let index = t.path(".gameplan/store/index.log");
    let text = std::fs::read_to_string(&index).expect("index");
    assert_eq!(text.lines().count(), 1, "{text}");
    for target in ["step.sh", "plan.toml"] {
        let (_, json) = text.trim_end().split_once(' ').expect("crc json");
        let mut record: serde_json::Value = serde_json::from_str(json).expect("json");
        record["entry"]["outputs"][0]["path"] = target.into();
        let json = record.to_string();
        let forged = format!("{:08x} {json}\n", crc32c::crc32c(json.as_bytes()));
        std::fs::write(&index, forged).expect("forge the record");
        let out = t.run(&["plan", "run", "plan.toml", "--json"]);
        assert_eq!(by_step(&out.json(), "state")["build"], "succeeded", "{out}");
        assert_eq!(t.read("step.sh"), "echo built > out.txt\n");
        assert!(t.read("plan.toml").contains("name = \"scope\""));
        // Put the record back the way the run that stored it wrote it.
        std::fs::write(&index, &text).expect("restore the index");
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

/// A plan of two steps where the second waits to be stopped, so a run is
/// left unfinished with a few journal lines.
const TWO_STEPS: &str = "version = 1\nname = \"m\"\n\n[[steps]]\nid = \"a\"\nkind = \"command\"\nrun = \"true\"\n\n[[steps]]\nid = \"b\"\nkind = \"command\"\nneeds = [\"a\"]\nrun = \"touch started && sleep 30\"\n";

/// Leaves an interrupted run of [`TWO_STEPS`] and returns its id.
fn interrupted_run(t: &Test) -> String {
    let gameplan = t.spawn(&["plan", "run", "plan.toml", "--yes"]);
    wait_until("the step to start", Duration::from_secs(30), || {
        t.path("started").exists()
    });
    gameplan.signal(nix::sys::signal::Signal::SIGTERM);
    gameplan.wait().code(10);
    t.run_ids().pop().expect("a run")
}

/// Item 12: a journal damaged in the middle made its unfinished run
/// invisible: `plan status` said "corrupt at line 2", but `plan resume`
/// said there was nothing to resume and `plan run --resume` (or no flag)
/// silently started a new run, which would not replay a journaled
/// idempotency key. Now each refuses with the corruption and what to do,
/// and `--new` sets the damaged run aside (on disk, marked) and starts over.
#[test]
fn a_damaged_journal_refuses_resume_and_a_silent_fresh_run() {
    let t = Test::new().file("plan.toml", TWO_STEPS);
    let id = interrupted_run(&t);
    let journal = format!(".gameplan/runs/{id}/journal.jsonl");
    let text = t.read(&journal);
    assert!(text.lines().count() >= 4, "{text}");
    // Flip a byte inside the second record's event: its checksum fails.
    let second = text.find('\n').expect("a second line") + 1;
    let at = second + text[second..].find("\"event\":").expect("event") + 10;
    let mut bytes = text.into_bytes();
    bytes[at] ^= 0x20;
    t.write(&journal, &bytes);

    t.run(&["plan", "status", &id])
        .code(3)
        .stderr_has("corrupt at line 2");
    for args in [
        vec!["plan", "resume"],
        vec!["plan", "resume", id.as_str()],
        vec!["plan", "run", "plan.toml", "--yes", "--resume"],
        vec!["plan", "run", "plan.toml", "--yes"],
    ] {
        let out = t.run(&args);
        out.code(3)
            .stderr_has(&format!("run {id} may be an unfinished run of this plan"))
            .stderr_has("corrupt at line 2")
            .stderr_has("Nothing was run or charged")
            .stderr_has("--new");
        assert_eq!(t.run_ids(), vec![id.clone()], "no new run: {out}");
    }
    assert_eq!(t.read(&journal).as_bytes(), &bytes[..], "left as found");

    std::fs::remove_file(t.path("started")).expect("remove marker");
    let fresh = t.spawn(&["plan", "run", "plan.toml", "--yes", "--new"]);
    wait_until("the fresh run's step", Duration::from_secs(30), || {
        t.path("started").exists()
    });
    fresh.signal(nix::sys::signal::Signal::SIGTERM);
    let fresh = fresh.wait();
    fresh.code(10).stderr_has(&format!(
        "run {id} of this plan has a damaged journal; --new set it aside"
    ));
    let ids = t.run_ids();
    assert_eq!(ids.len(), 2, "{fresh}");
    assert!(t.path(&format!(".gameplan/runs/{id}/set-aside")).exists());
    assert_eq!(
        t.read(&journal).as_bytes(),
        &bytes[..],
        "still on disk, unchanged"
    );
    t.run(&["plan", "runs"])
        .code(0)
        .stdout_has(&format!("{id}  damaged, set aside"));
    // Set aside, it no longer stands in the way: the fresh run is the one
    // a plain `plan run` now asks about.
    t.run(&["plan", "run", "plan.toml", "--yes"])
        .code(3)
        .stderr_has(&format!("run {} of this plan is unfinished", ids[1]));
}

/// Item 13: a disk that filled up mid-run was blamed on `--fail-fast` ("not
/// started: --fail-fast stopped the run") when none was given, the ENOSPC
/// cause showed only under `--json`, and the run was left unresumable. Now
/// the run stops, says the disk is full, and resumes once space is back.
#[test]
fn a_full_disk_mid_run_stops_says_why_and_resumes() {
    // `fill` fills the state directory's disk once; the 40 cells after it
    // need journal records that no longer fit.
    let plan = "version = 1\nname = \"m\"\n\n[[steps]]\nid = \"fill\"\nkind = \"command\"\nrun = \"if [ ! -e filled ]; then touch filled; head -c 4000000 /dev/zero > state/fill; fi; true\"\n\n[[steps]]\nid = \"b\"\nkind = \"command\"\nneeds = [\"fill\"]\nrun = \"true\"\nmatrix = { n = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40] }\n";
    let t = Test::new().file("plan.toml", plan);
    let _disk = SmallDisk::mount(t.path("state"), "1m");
    let run = t.run(&["plan", "run", "plan.toml", "--yes", "--state-dir", "state"]);
    // `fill`'s own error reaches no log (the disk is full): the disk is
    // named as the cause, with the step's last words (issue 19).
    run.code(1)
        .stdout_has("is full: ")
        .stdout_has("No space left on device")
        .stdout_has("resume with: gameplan plan resume");
    assert!(
        !run.stdout.contains("--fail-fast") && !run.stderr.contains("--fail-fast"),
        "{run}"
    );
    assert!(t.path("state/fill").exists());

    std::fs::remove_file(t.path("state/fill")).expect("free the space");
    let resume = t.run(&["plan", "resume", "--yes", "--state-dir", "state", "--json"]);
    resume.code(0);
    let states = by_step(&resume.json(), "state");
    assert_eq!(states.len(), 41, "{resume}");
    assert!(
        states.values().all(|s| s == "succeeded"),
        "every step ran once space was back: {resume}"
    );
    let runs = t.run(&["plan", "runs", "--state-dir", "state"]);
    runs.code(0).stdout_has("succeeded");
    assert!(!runs.stdout.contains("unreadable"), "{runs}");
}

/// Item 13: a journal that could not get its first record (the disk full
/// from the start) was listed as "unreadable" by `plan runs` forever. Now
/// the run refuses to start, says why, and leaves no run behind.
#[test]
fn a_run_that_cannot_write_its_first_record_leaves_no_unreadable_run() {
    let plan =
        "version = 1\nname = \"m\"\n\n[[steps]]\nid = \"a\"\nkind = \"command\"\nrun = \"true\"\n";
    let t = Test::new().file("plan.toml", plan);
    let disk = SmallDisk::mount(t.path("state"), "256k");
    // One page left, for the lock file: the journal's first record finds none.
    disk.fill(1);
    std::fs::remove_file(t.path("state/spare")).expect("free one page");
    t.run(&["plan", "run", "plan.toml", "--yes", "--state-dir", "state"])
        .code(3)
        .stderr_has("the disk is full")
        .stderr_has("Nothing was run or charged");
    assert_eq!(
        std::fs::read_dir(t.path("state/runs")).map_or(0, Iterator::count),
        0,
        "no run directory is left behind"
    );
    t.run(&["plan", "runs", "--state-dir", "state"])
        .code(0)
        .stderr_has("no runs");

    std::fs::remove_file(t.path("state/fill")).expect("free the space");
    t.run(&["plan", "run", "plan.toml", "--yes", "--state-dir", "state"])
        .code(0);
}

/// Item 14: a step that deleted `.gameplan/` mid-run took the journal and
/// the run lock with it, and the run went on and exited 0 without a word
/// (while a second run could take the lock and run a step at the same time).
/// Now the run notices at once (the journal's link count dropped to 0),
/// stops, and fails loudly, offering no resume of a journal that is gone.
#[test]
fn a_deleted_state_directory_stops_the_run_loudly() {
    let plan = "version = 1\nname = \"m\"\n\n[[steps]]\nid = \"wipe\"\nkind = \"command\"\nrun = \"rm -rf .gameplan && sleep 20 && touch wiped\"\n\n[[steps]]\nid = \"after\"\nkind = \"command\"\nneeds = [\"wipe\"]\nrun = \"touch after-ran\"\n";
    let t = Test::new().file("plan.toml", plan);
    let started = std::time::Instant::now();
    let run = t.run(&["plan", "run", "plan.toml", "--yes"]);
    run.code(1)
        .stdout_has("was deleted while the run ran")
        .stdout_has("another run of this plan may have run at the same time")
        .stdout_has("cannot be resumed")
        .stderr_has("stopping: nothing more starts");
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "stopped at once, not after the step's sleep: {run}"
    );
    assert!(!run.stdout.contains("resume with"), "{run}");
    assert!(
        !t.path("wiped").exists() && !t.path("after-ran").exists(),
        "{run}"
    );
}

/// Item 22: with a schema error anywhere (an unknown step kind, a `name` of
/// the wrong type), `plan check` left out the graph problems (an unknown
/// `needs`, a cycle) of the steps it could read; every problem at once means
/// these too. A `needs` naming the unreadable step is not called unknown.
#[test]
fn check_reports_graph_problems_alongside_schema_errors() {
    let plan = r#"version = 1
name = 5

[[steps]]
id = "a"
kind = "command"
run = "true"
needs = ["b"]

[[steps]]
id = "b"
kind = "command"
run = "true"
needs = ["a"]

[[steps]]
id = "c"
kind = "comand"
run = "true"

[[steps]]
id = "d"
kind = "command"
needs = ["nope", "c"]
run = "true"
"#;
    let t = Test::new().file("plan.toml", plan);
    let check = t.check(&["plan.toml"]);
    check.codes(&[
        "plan::wrong_type",
        "plan::cycle",
        "plan::unknown_value",
        "plan::unknown_needs",
    ]);
    check.with_message("dependency cycle: a → b → a").at(14, 10);
    check.with_message("unknown step `nope`").at(24, 10);
}

/// Item 6: after `kill -9` of the runner's process group, `plan run --new`
/// ran step `a` beside the killed run's `a`, still running: `a.txt` ended
/// at 3000 bytes, was stored, and later runs restored the 3000 bytes.
#[test]
fn a_new_run_waits_for_the_killed_runs_step_and_stores_no_mixed_result() {
    const PLAN: &str = r#"version = 1
name = "mixed"

[[steps]]
id = "a"
kind = "command"
run = "head -c 1000 /dev/zero > a.txt && echo $$ > a.pid && sleep 3 && head -c 1000 /dev/zero >> a.txt"
inputs = ["src.txt"]
outputs = ["a.txt"]
"#;
    let t = Test::new().file("plan.toml", PLAN).file("src.txt", "x\n");
    let gameplan = t.spawn_in_group(&["plan", "run", "plan.toml"]);
    wait_until("`a` to write its first part", SOON, || {
        !t.read("a.pid").trim().is_empty()
    });
    let killed_run = t.run_ids().remove(0);
    let _ = killpg(Pid::from_raw(gameplan.pid()), Signal::SIGKILL);
    let killed = gameplan.kill9();
    assert_eq!(killed.code, None, "{killed}");

    let fresh = t.run(&["plan", "run", "plan.toml", "--new", "--json"]);
    fresh
        .code(0)
        .stderr_has(&format!("waiting for `a` of run {killed_run}"));
    let size = || std::fs::metadata(t.path("a.txt")).map_or(0, |m| m.len());
    assert_eq!(size(), 2000, "two attempts wrote a.txt at once\n{fresh}");

    // The killed run's `a` finished while no gameplan watched: its resume
    // learns that from the launcher, which outlived the group, and does
    // not run it again.
    let resumed = t.run(&["plan", "resume", &killed_run, "--json"]);
    let report = resumed.code(0).json();
    assert_eq!(step(&report, "a")["state"], "succeeded", "{resumed}");
    assert_eq!(step(&report, "a")["attempts"], 0, "{resumed}");
    assert_eq!(size(), 2000, "{resumed}");

    // What was stored is one attempt's whole output.
    std::fs::remove_file(t.path("a.txt")).expect("remove a.txt");
    let again = t.run(&["plan", "run", "plan.toml", "--json"]);
    assert_eq!(
        by_step(&again.code(0).json(), "state"),
        expect_steps(&[("a", "reused")]),
        "{again}"
    );
    assert_eq!(size(), 2000, "the store kept a mixed result\n{again}");
}

/// Item 9: a step that started `sleep 25 &` left it holding its stdout,
/// which carried the launcher's lock: `plan resume` waited, silent, for as
/// long as the background process lived (forever for a daemon).
#[test]
fn a_process_the_step_left_behind_does_not_hold_up_a_resume() {
    background_process_and_resume("");
}

/// The same with the step's output going through the redacting pipe,
/// which the background process holds open.
#[test]
fn a_process_left_behind_does_not_hold_up_a_resume_of_a_plan_with_secrets() {
    background_process_and_resume("env = { TOK = \"{{ secret('MYTOKEN') }}\" }\n");
}

fn background_process_and_resume(extra: &str) {
    let plan = format!(
        r#"version = 1
name = "daemon"

[[steps]]
id = "a"
kind = "command"
run = "sleep 25 & echo $! > bg.pid; echo $$ > a.pid; while [ ! -f release ]; do sleep 0.1; done; echo done"
{extra}"#
    );
    let t = Test::new()
        .file("plan.toml", plan)
        .env("MYTOKEN", "not-a-real-token");
    let gameplan = t.spawn(&["plan", "run", "plan.toml"]);
    wait_until("`a` to start its background process", SOON, || {
        !t.read("a.pid").trim().is_empty() && !t.read("bg.pid").trim().is_empty()
    });
    let background: i32 = t.read("bg.pid").trim().parse().expect("a pid");
    let killed = gameplan.kill9();
    assert_eq!(killed.code, None, "{killed}");
    t.write("release", "");

    let started = Instant::now();
    let resumed = t.run(&["plan", "resume", "--json"]);
    let took = started.elapsed();
    let report = resumed.code(0).json();
    let still_there = proc_stat(background).is_some_and(|p| !p.zombie);
    let _ = nix::sys::signal::kill(Pid::from_raw(background), Signal::SIGKILL);
    assert!(
        still_there,
        "the background process must outlive the resume for the test to mean anything"
    );
    assert!(
        took < Duration::from_secs(15),
        "the resume waited {took:?} for a background process\n{resumed}"
    );
    assert_eq!(step(&report, "a")["state"], "succeeded", "{resumed}");
    assert_eq!(step(&report, "a")["attempts"], 0, "{resumed}");
    let id = t.run_ids().remove(0);
    assert_eq!(t.step_log("a", &id), "done\n");
}

/// Item 9: the wait for an attempt a dead gameplan left running is said,
/// and bounded (by the step's `timeout` here): past it, the attempt is
/// stopped and run again.
#[test]
fn a_resume_says_what_it_waits_for_and_stops_it_past_the_bound() {
    const PLAN: &str = r#"version = 1
name = "forever"

[[steps]]
id = "a"
kind = "command"
timeout = 4
run = "if [ -f ran ]; then echo again >> runs.txt; else touch ran; echo first >> runs.txt; echo $$ > a.pid; while true; do sleep 0.1; done; fi"
"#;
    let t = Test::new().file("plan.toml", PLAN);
    let gameplan = t.spawn(&["plan", "run", "plan.toml"]);
    wait_until("`a` to start", SOON, || !t.read("a.pid").trim().is_empty());
    let pid: i32 = t.read("a.pid").trim().parse().expect("a pid");
    let group = proc_stat(pid).expect("`a` runs").pgrp;
    let killed = gameplan.kill9();
    assert_eq!(killed.code, None, "{killed}");

    let resumed = t.run(&["plan", "resume"]);
    resumed
        .code(0)
        .stderr_has(&format!("waiting for `a` (process group {group})"))
        .stderr_has("`a` still runs after 4s: stopping it");
    assert_eq!(t.read("runs.txt"), "first\nagain\n", "{resumed}");
    assert!(live_in_group(group).is_empty(), "{resumed}");
}

/// Item 17: the terminal, `--json` and the `JUnit` file showed `[redacted]`, but the
/// step logs under `.gameplan/` (which CI uploads) held the secret. Every
/// step's log is redacted, a secret split across two writes included, also
/// a step that reads the variable `secret()` reads without naming it.
#[test]
fn no_secret_reaches_a_file_of_the_state_directory() {
    const CANARY: &str = "canary-7f3a9c1e5b";
    const PLAN: &str = r#"version = 1
name = "secret"

[[steps]]
id = "a"
kind = "command"
env = { TOK = "{{ secret('MYTOKEN') }}" }
run = "echo token is $TOK; printf 'split: %s' \"${TOK%?????}\"; sleep 0.2; printf '%s\\n' \"${TOK#${TOK%?????}}\"; echo on stderr $TOK >&2"

[[steps]]
id = "b"
kind = "command"
run = "echo inherited $MYTOKEN"

[[steps]]
id = "c"
kind = "command"
run = "echo failing with $MYTOKEN; exit 3"
"#;
    let t = Test::new().file("plan.toml", PLAN).env("MYTOKEN", CANARY);
    let run = t.run(&["plan", "run", "plan.toml", "--json", "--junit", "junit.xml"]);
    assert_eq!(run.code, Some(1), "{run}");
    assert!(
        !run.stdout.contains(CANARY) && !run.stderr.contains(CANARY),
        "{run}"
    );
    let id = t.run_ids().remove(0);
    let log = |s: &str| t.step_log(s, &id);
    assert_eq!(
        log("a"),
        "token is [redacted]\nsplit: [redacted]\non stderr [redacted]\n",
        "{run}"
    );
    assert_eq!(log("b"), "inherited [redacted]\n");
    assert_eq!(log("c"), "failing with [redacted]\n");
    let mut searched = 0;
    for file in walk(&t.path(".gameplan"))
        .into_iter()
        .chain([t.path("junit.xml")])
    {
        let bytes = std::fs::read(&file).expect("read");
        searched += 1;
        assert!(
            !bytes.windows(CANARY.len()).any(|w| w == CANARY.as_bytes()),
            "{} holds the secret",
            file.display()
        );
    }
    assert!(searched > 5, "only {searched} files searched");
}

/// Issue 10: a step's log was kept whole (187 MB from one run). It keeps
/// its head and its tail, and says what was cut between them.
#[test]
fn a_step_log_past_the_cap_keeps_its_head_and_tail() {
    const PLAN: &str = r#"version = 1
name = "chatty"

[[steps]]
id = "a"
kind = "command"
run = "echo the-start; yes 0123456789abcdefghijklmnopqrstuvwxyz | head -c 11999988; echo the-end; exit 1"
"#;
    let t = Test::new().file("plan.toml", PLAN);
    let run = t.run(&["plan", "run", "plan.toml"]);
    run.code(1).stderr_has("the-end");
    let id = t.run_ids().remove(0);
    let log = t.step_log("a", &id);
    assert!(
        log.len() <= 5 * 1024 * 1024 + 100,
        "the log kept {} bytes",
        log.len()
    );
    let on_disk = std::fs::metadata(t.path(&format!(".gameplan/runs/{id}/steps.log")))
        .expect("the run's log")
        .len();
    assert!(on_disk <= 5 * 1024 * 1024 + 100, "{on_disk} bytes on disk");
    assert!(log.starts_with("the-start\n0123"), "{}", &log[..40]);
    assert!(
        log.ends_with("xyz\nthe-end\n"),
        "{}",
        &log[log.len() - 40..]
    );
    let cut: Vec<&str> = log.lines().filter(|l| l.starts_with("[… ")).collect();
    assert_eq!(cut, ["[… 6.8 MB cut …]"]);
    assert!(
        log.lines().all(|l| l == cut[0]
            || l == "the-start"
            || l == "the-end"
            || l == "0123456789abcdefghijklmnopqrstuvwxyz"),
        "a line was cut in two"
    );
}

/// Item 6: a resume stopped (Ctrl-C) while it waits for an attempt a dead
/// gameplan left running must not count that attempt as over: the next
/// resume waits for it again and learns how it ended, instead of starting
/// a second attempt beside it.
#[test]
fn a_resume_stopped_while_it_waits_never_runs_the_step_beside_the_old_attempt() {
    const PLAN: &str = r#"version = 1
name = "patient"

[[steps]]
id = "a"
kind = "command"
run = "echo ran >> runs.txt; echo $$ > a.pid; while [ ! -f release ]; do sleep 0.1; done"
"#;
    let t = Test::new().file("plan.toml", PLAN);
    let gameplan = t.spawn(&["plan", "run", "plan.toml"]);
    wait_until("`a` to start", SOON, || !t.read("a.pid").trim().is_empty());
    let killed = gameplan.kill9();
    assert_eq!(killed.code, None, "{killed}");
    let id = t.run_ids().remove(0);
    let journal = format!(".gameplan/runs/{id}/journal.jsonl");

    let waiting = t.spawn(&["plan", "resume"]);
    wait_until("the resume to start", SOON, || {
        t.read(&journal).contains("run_resumed")
    });
    waiting.signal(Signal::SIGINT);
    let stopped = waiting.wait();
    stopped.code(10);
    assert_eq!(t.read("runs.txt"), "ran\n", "{stopped}");

    t.write("release", "");
    let resumed = t.run(&["plan", "resume", "--json"]);
    let report = resumed.code(0).json();
    assert_eq!(step(&report, "a")["state"], "succeeded", "{resumed}");
    assert_eq!(step(&report, "a")["attempts"], 0, "{resumed}");
    assert_eq!(
        t.read("runs.txt"),
        "ran\n",
        "a second attempt ran\n{resumed}"
    );
}

/// Item 9: liveness is the launcher's lock and, with the launcher dead
/// too, the step's process group. Killed with gameplan, the launcher
/// records nothing more, but a resume still waits for the step it left
/// running instead of starting a second attempt beside it; with no ending
/// recorded, it runs the step again once the first attempt is gone.
#[test]
fn with_its_launcher_killed_too_a_resume_waits_for_the_steps_group() {
    const PLAN: &str = r#"version = 1
name = "orphan"

[[steps]]
id = "a"
kind = "command"
run = "echo ran >> runs.txt; echo $$ > a.pid; while [ ! -f release ]; do sleep 0.1; done; echo done >> runs.txt"
"#;
    let t = Test::new().file("plan.toml", PLAN);
    let gameplan = t.spawn(&["plan", "run", "plan.toml"]);
    wait_until("`a` to start", SOON, || !t.read("a.pid").trim().is_empty());
    let launcher = gameplan.launcher();
    // Gameplan first: a gameplan that outlives its launcher, even for a
    // moment, stops the step it can no longer follow (and fails it).
    let killed = gameplan.kill9();
    assert_eq!(killed.code, None, "{killed}");
    let _ = nix::sys::signal::kill(Pid::from_raw(launcher), Signal::SIGKILL);
    let id = t.run_ids().remove(0);
    let journal = format!(".gameplan/runs/{id}/journal.jsonl");

    let resume = t.spawn(&["plan", "resume"]);
    wait_until("the resume to start", SOON, || {
        t.read(&journal).contains("run_resumed")
    });
    // An absence can only be watched for a while: no second attempt may
    // start while the first one runs.
    let watched = Instant::now();
    let mut second = false;
    while watched.elapsed() < Duration::from_millis(1500) && !second {
        second = t.read("runs.txt") != "ran\n";
        std::thread::sleep(Duration::from_millis(20));
    }
    t.write("release", "");
    let out = resume.wait();
    let exits = t.read(&format!(".gameplan/runs/{id}/exits.jsonl"));
    assert!(!second, "a second attempt started\n{exits}\n{out}");
    out.code(0).stderr_has("waiting for `a` (process group");
    assert_eq!(t.read("runs.txt"), "ran\ndone\nran\ndone\n", "{out}");
}

/// A launcher killed under a live gameplan (the OOM killer picks it): the
/// step it ran can no longer be followed, so gameplan stops what is left of
/// it and fails the attempt, and the retry goes to a new launcher instead
/// of failing on the dead one's pipe.
#[test]
fn a_launcher_killed_under_a_live_gameplan_fails_the_attempt_and_the_retry_gets_a_new_one() {
    const PLAN: &str = r#"version = 1
name = "relaunch"

[[steps]]
id = "a"
kind = "command"
retries = 1
run = "echo $$ >> a.pids; while [ ! -f release ]; do sleep 0.1; done; echo released"

[[steps]]
id = "b"
kind = "command"
needs = ["a"]
run = "echo b ran"
"#;
    let t = Test::new().file("plan.toml", PLAN);
    let gameplan = t.spawn(&["plan", "run", "plan.toml", "--json"]);
    wait_until("`a` to start", SOON, || !t.read("a.pids").trim().is_empty());
    let first: i32 = t.read("a.pids").trim().parse().expect("a pid");
    let launcher = gameplan.launcher();
    let _ = nix::sys::signal::kill(Pid::from_raw(launcher), Signal::SIGKILL);
    wait_until("the retry to start", SOON, || {
        t.read("a.pids").lines().count() == 2
    });
    assert!(
        live_in_group(first).is_empty(),
        "the first attempt was left running beside the retry"
    );
    t.write("release", "");
    let out = gameplan.wait();
    let report = out.code(0).json();
    assert_eq!(step(&report, "a")["attempts"], 2, "{out}");
    assert_eq!(step(&report, "b")["state"], "succeeded", "{out}");
    out.stderr_has("a: attempt 1 failed (the step launcher died while the step ran); retrying");
}

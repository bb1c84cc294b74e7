//! `kill -9` at random moments around durable checkpoints: every resume hands
//! a step exactly the checkpoints that were acknowledged to it.
//!
//! A test-only kind (`Probe`, registered for `register` steps in a registry
//! of its own) writes numbered durable checkpoints, noting each one it is
//! about to write (`intents`) and each acknowledged one (`acks`) in files
//! outside the journal. The parent test starts the engine in a child process
//! (this same test binary, running [`probe_child`]), kills it with SIGKILL
//! after a seeded delay, and resumes, over and over. Each resume records the
//! checkpoints it was handed: they must include every acknowledged one and
//! nothing that was never about to be written. (A checkpoint written but not
//! yet noted as acknowledged when the kill came may or may not be handed
//! back: the kill fell between the sync and the note.)

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use crate::engine::{self, RunOptions, RunRequest, Start};
use crate::plan::LoadOptions;
use crate::plan::model::StepKind;
use crate::report::progress::Progress;
use crate::steps::{
    BoxFuture, Confirm, KeyContext, Kind, Kinds, Outputs, Reuse, StepContext, StepError, StepIo,
    StepOutcome,
};

const PLAN: &str =
    "version = 1\nname = \"probe\"\n\n[[steps]]\nid = \"probe\"\nkind = \"register\"\n";
/// Checkpoints the probe writes before it succeeds.
const TOTAL: u64 = 200;

struct Probe {
    dir: PathBuf,
}

fn note(path: &Path, line: &str) {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("open note file");
    file.write_all(format!("{line}\n").as_bytes())
        .expect("write note");
    // The note must be on disk before the next checkpoint can be acked.
    file.sync_data().expect("sync note");
}

impl Kind for Probe {
    fn kind(&self) -> StepKind {
        StepKind::Register
    }

    fn reuse(&self, _cx: &KeyContext<'_>) -> Result<Reuse, StepError> {
        Ok(Reuse::Never("a probe".into()))
    }

    fn run<'a>(&'a self, _cx: &'a StepContext, io: &'a StepIo) -> BoxFuture<'a, StepOutcome> {
        Box::pin(async move {
            let got: Vec<u64> = io
                .checkpoints()
                .iter()
                .filter_map(|c| c.data["n"].as_u64())
                .collect();
            note(&self.dir.join("received"), &json!(got).to_string());
            let next = got.last().map_or(1, |n| n + 1);
            for n in next..=TOTAL {
                note(&self.dir.join("intents"), &n.to_string());
                if let Err(e) = io.checkpoint_durable(json!({ "n": n })).await {
                    return StepOutcome::Failed {
                        exit_code: None,
                        message: e.0,
                    };
                }
                note(&self.dir.join("acks"), &n.to_string());
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            StepOutcome::Succeeded
        })
    }

    fn outputs(&self, _cx: &StepContext) -> Result<Outputs, StepError> {
        Ok(Outputs::default())
    }
}

struct No;

impl Confirm for No {
    fn confirm(&self, _question: &str) -> bool {
        false
    }
}

/// The child: runs (or resumes) the probe plan in `GAMEPLAN_PROBE_DIR`.
/// Ignored so it never runs on its own; the parent test starts it.
#[test]
#[ignore = "started by kill_9_around_durable_checkpoints"]
fn probe_child() {
    let Some(dir) = std::env::var_os("GAMEPLAN_PROBE_DIR").map(PathBuf::from) else {
        return;
    };
    let loaded = crate::plan::load(&dir.join("plan.toml"), &LoadOptions::default())
        .expect("the probe plan loads");
    let pipeline = crate::graph::expand(&loaded.plan).expect("expands");
    let hash = engine::plan_hash(&loaded);
    let state_dir = dir.join(".gameplan");
    let start = match engine::find_unfinished(&state_dir, &hash).expect("no damaged run") {
        Some(history) => Start::Resume(history.run_id),
        None => Start::New(engine::new_run_id()),
    };
    let lock = engine::lock(&state_dir, &hash, start.run_id()).expect("lock");
    let progress = Progress::new(false, true, loaded.redactor.clone());
    let request = RunRequest {
        loaded,
        pipeline,
        plan_hash: hash,
        state_dir,
        options: RunOptions::default(),
        env: Arc::new(std::collections::BTreeMap::new()),
        start,
        resume_hint: String::new(),
        kinds: Arc::new(Kinds::of(vec![Box::new(Probe { dir: dir.clone() })])),
        confirm: Arc::new(No),
    };
    let report = engine::run(request, &progress, lock).expect("runs");
    assert_eq!(report.exit_code, 0, "{report:?}");
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn numbers(path: &Path) -> Vec<u64> {
    lines(path).iter().filter_map(|l| l.parse().ok()).collect()
}

#[test]
fn kill_9_around_durable_checkpoints() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(dir.path().join(".git")).expect(".git");
    std::fs::write(dir.path().join("plan.toml"), PLAN).expect("plan");
    let exe = std::env::current_exe().expect("test binary");
    // A fixed seed: the delays differ from kill to kill, the same on every run.
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next_delay = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        Duration::from_millis(seed % 80)
    };
    let child = || {
        Command::new(&exe)
            .args([
                "engine::crash_tests::probe_child",
                "--exact",
                "--ignored",
                "--nocapture",
            ])
            .env("GAMEPLAN_PROBE_DIR", dir.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start the child")
    };
    let mut resumes_checked = 0;
    for _ in 0..12 {
        if numbers(&dir.path().join("acks")).last() == Some(&TOTAL) {
            break;
        }
        let acked_before = numbers(&dir.path().join("acks"));
        let received_before = lines(&dir.path().join("received")).len();
        let mut running = child();
        // Wait until the child reaches the step (a fresh machine takes a
        // while to start a test binary and open the journal), then kill it
        // a seeded moment later: the kill lands among the checkpoints, not
        // in the start-up, however slow the machine is.
        let reached = std::time::Instant::now();
        while lines(&dir.path().join("received")).len() == received_before
            && reached.elapsed() < Duration::from_secs(20)
            && running.try_wait().ok().flatten().is_none()
        {
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(next_delay());
        let _ = running.kill();
        let _ = running.wait();
        let received = lines(&dir.path().join("received"));
        if received.len() > received_before {
            // This child got as far as the step: check what it was handed.
            let got: Vec<u64> =
                serde_json::from_str(&received[received_before]).expect("received line");
            let intended = numbers(&dir.path().join("intents"));
            for n in &acked_before {
                assert!(
                    got.contains(n),
                    "acknowledged checkpoint {n} was not handed back: got {got:?}"
                );
            }
            for n in &got {
                assert!(
                    intended.contains(n),
                    "checkpoint {n} was never written, yet handed back"
                );
            }
            let mut sorted = got.clone();
            sorted.dedup();
            assert_eq!(sorted, got, "each checkpoint once, in order");
            if !acked_before.is_empty() {
                resumes_checked += 1;
            }
        }
    }
    // And the run completes from wherever the last kill left it.
    let status = child().wait().expect("last child");
    assert!(status.success());
    assert!(
        resumes_checked >= 3,
        "only {resumes_checked} resumes saw acknowledged checkpoints; the kills came too early"
    );
    let acks = numbers(&dir.path().join("acks"));
    assert_eq!(acks.last(), Some(&TOTAL));
}

//! `deliver` and the aggregate's publishing against a real ledger file:
//! a job bought through the ledger, cell files on disk, the kind run with
//! a `StepIo` whose checkpoints a test sink keeps (a resume is a second
//! `StepIo` handed the first one's checkpoints, as the journal would).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use super::*;
use crate::backend::Backend;
use crate::backend::api::{Cell, EstimateRequest, RegisterRequest, RunLength, RunView, Token};
use crate::backend::ledger::{DEMO_TOKEN, Ledger};
use crate::backend::local::{LocalBackend, Tampered};
use crate::journal::run::Checkpoint;
use crate::play::cell_report::NotPlayed;
use crate::steps::money::{CellRun, JOB, JobRecord};
use crate::steps::{CheckpointBook, CheckpointSink, Confirm, Kind};

const PLAN: &str = r#"version = 1
name = "deliver"

[game]
id = "maze"
command = ["builtin:maze"]

[[personas]]
slug = "kid"
card = "Clicks everything."

[[personas]]
slug = "vet"
card = "Has seen it all."

[[steps]]
id = "register"
kind = "register"

[[steps]]
id = "play"
kind = "play"
needs = ["register"]
matrix = { persona = "*" }

[[steps]]
id = "deliver"
kind = "deliver"
per = "play"

[[steps]]
id = "aggregate"
kind = "aggregate"
needs = ["deliver"]
"#;

const KID: &str = "play[kid]";
const VET: &str = "play[vet]";

/// Keeps what a step journals, as the run's journal would.
#[derive(Default)]
struct Sink(Mutex<Vec<Checkpoint>>);

impl CheckpointSink for Sink {
    fn write(&self, checkpoint: &Checkpoint, _step: &str) -> Result<(), String> {
        self.0.lock().unwrap().push(checkpoint.clone());
        Ok(())
    }

    fn write_durable<'a>(
        &'a self,
        checkpoint: &'a Checkpoint,
        step: &'a str,
    ) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move { self.write(checkpoint, step) })
    }
}

struct No;

impl Confirm for No {
    fn confirm(&self, _question: &str) -> bool {
        false
    }
}

/// A temp repo with the plan, a ledger holding a job for both cells (or
/// for `bought` only), and the run's steps directory.
struct Fixture {
    dir: tempfile::TempDir,
    plan: Arc<crate::plan::model::Plan>,
    pipeline: crate::graph::Pipeline,
    ledger: Arc<Ledger>,
    job: JobRecord,
    notes: Arc<Mutex<Vec<String>>>,
}

fn token() -> Token {
    Token(DEMO_TOKEN.to_owned())
}

impl Fixture {
    fn new(bought: &[&str]) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join(".git")).unwrap();
        let path = dir.path().join("plan.toml");
        std::fs::write(&path, PLAN).unwrap();
        let loaded = crate::plan::load(&path, &crate::plan::LoadOptions::default()).unwrap();
        let pipeline = crate::graph::expand(&loaded.plan).unwrap();
        let ledger = Arc::new(Ledger::open(&dir.path().join(".gameplan/ledger.sqlite")).unwrap());
        let cells: Vec<Cell> = bought
            .iter()
            .map(|id| Cell {
                persona: persona(id).to_owned(),
                controller: "standard".to_owned(),
            })
            .collect();
        let estimate = ledger
            .estimate(
                &token(),
                "maze",
                &EstimateRequest {
                    cells: cells.clone(),
                    modules: Vec::new(),
                    run_length: RunLength::Standard,
                },
            )
            .unwrap();
        let registered = ledger
            .register(
                &token(),
                "maze",
                "key-1",
                &RegisterRequest {
                    quote_id: estimate.quote_id,
                    confirm_price_cents: estimate.estimate_cents,
                    cells,
                    modules: Vec::new(),
                    run_length: RunLength::Standard,
                },
            )
            .unwrap();
        let job = JobRecord {
            game: "maze".into(),
            job: registered.job.id.clone(),
            price_cents: registered.job.price_cents,
            runs: bought
                .iter()
                .zip(&registered.job.runs)
                .map(|(cell, run)| CellRun {
                    cell: (*cell).to_owned(),
                    run: run.id.clone(),
                })
                .collect(),
        };
        let fixture = Fixture {
            dir,
            plan: Arc::new(loaded.plan),
            pipeline,
            ledger,
            job,
            notes: Arc::default(),
        };
        for cell in [KID, VET] {
            fixture.write_cell(cell, &report(cell, CellState::Succeeded));
        }
        fixture
    }

    fn steps_dir(&self) -> PathBuf {
        self.dir.path().join(".gameplan/runs/r1/steps")
    }

    fn cell_dir(&self, cell: &str) -> PathBuf {
        self.steps_dir().join(crate::journal::run::file_name(cell))
    }

    /// The files a played cell leaves.
    fn write_cell(&self, cell: &str, report: &CellReport) {
        let dir = self.cell_dir(cell);
        std::fs::create_dir_all(&dir).unwrap();
        let mut json = serde_json::to_string_pretty(report).unwrap();
        json.push('\n');
        std::fs::write(dir.join("report.json"), json).unwrap();
        std::fs::write(dir.join("report.md"), format!("# {cell}\n\nIt played.\n")).unwrap();
        std::fs::write(dir.join("transcript.jsonl"), "{\"t\":0}\n").unwrap();
        std::fs::write(dir.join("trace.jsonl"), "{\"trace\":1}\n").unwrap();
    }

    /// The backend run of `cell`, moved to `reporting` as a paid play cell
    /// leaves it.
    fn played(&self, cell: &str) -> RunRef {
        let run = self.job.run_ref(cell).unwrap();
        for to in [RunState::Launching, RunState::Playing, RunState::Reporting] {
            self.ledger
                .transition(&token(), &run, &TransitionRequest { to, reason: None })
                .unwrap();
        }
        run
    }

    fn run_view(&self, cell: &str) -> RunView {
        self.ledger
            .get_run(&token(), &self.job.run_ref(cell).unwrap())
            .unwrap()
    }

    fn connection(backend: Arc<dyn Backend>) -> crate::backend::Connection {
        crate::backend::Connection {
            backend,
            token: token(),
        }
    }

    fn local(&self) -> Arc<dyn Backend> {
        Arc::new(LocalBackend::new(Arc::clone(&self.ledger)))
    }

    fn context(&self, id: &str) -> StepContext {
        let node = self.pipeline.find(id).unwrap();
        let instance = self.pipeline.instance(node).clone();
        let notes = Arc::clone(&self.notes);
        StepContext {
            root: self.dir.path().to_path_buf(),
            plan_file: Some("plan.toml".into()),
            run_id: "r1".into(),
            step_dir: self.steps_dir().join(crate::journal::run::file_name(id)),
            plan: Arc::clone(&self.plan),
            reads: Arc::new(
                crate::steps::Kinds::for_run(crate::steps::RunSettings {
                    concurrency: 1,
                    redactor: crate::template::Redactor::default(),
                })
                .reads(&self.pipeline, node, |id| {
                    self.steps_dir().join(crate::journal::run::file_name(id))
                }),
            ),
            step: self.pipeline.steps[instance.step].clone(),
            instance,
            attempt: 1,
            hashes: Arc::new(Mutex::new(crate::reuse::FileHashCache::load(
                &self.dir.path().join(".gameplan"),
            ))),
            cancel: tokio::sync::watch::channel(false).1,
            env: Arc::default(),
            left_by: "r1".into(),
            note: Arc::new(move |text: &str| notes.lock().unwrap().push(text.to_owned())),
            units: crate::reuse::UnitStore::open(&self.dir.path().join(".gameplan")),
            baseline: None,
        }
    }

    /// The `StepIo` of step `id` (which needs `needs`), with `known` of
    /// its own checkpoints and register's job in the book.
    fn io(
        &self,
        id: &str,
        needs: &[&str],
        known: Vec<Checkpoint>,
        backend: Arc<dyn Backend>,
        dry_upload: bool,
        with_job: bool,
    ) -> (StepIo, Arc<Sink>) {
        let sink = Arc::new(Sink::default());
        let book: CheckpointBook = Arc::default();
        if with_job {
            book.lock().unwrap().insert(
                "register".into(),
                vec![Checkpoint {
                    attempt: 1,
                    data: json!({ JOB: self.job }),
                }],
            );
        }
        book.lock().unwrap().insert(id.to_owned(), known.clone());
        let mut upstream: BTreeMap<String, PathBuf> = needs
            .iter()
            .map(|n| ((*n).to_owned(), self.cell_dir(n)))
            .collect();
        upstream.insert("register".into(), self.steps_dir().join("register"));
        let io = StepIo::new(
            Arc::clone(&sink) as Arc<dyn CheckpointSink>,
            id.to_owned(),
            known,
            Some(Fixture::connection(backend)),
            Arc::new(No),
            dry_upload,
        )
        .in_run(book, upstream)
        .redacting(redactor());
        (io, sink)
    }

    fn notes(&self) -> String {
        self.notes.lock().unwrap().join("\n")
    }
}

const SECRET: &str = "s3cr3t-token-value";

fn redactor() -> Redactor {
    let redactor = Redactor::default();
    redactor.register(SECRET);
    redactor
}

fn persona(cell: &str) -> &str {
    cell.trim_start_matches("play[").trim_end_matches(']')
}

fn report(cell: &str, state: CellState) -> CellReport {
    CellReport::maze(persona(cell), "standard", state)
}

fn deliver() -> Deliver {
    Deliver::new(redactor())
}

fn deliver_id(cell: &str) -> String {
    cell.replacen("play", "deliver", 1)
}

fn run_step(kind: &dyn Kind, cx: &StepContext, io: &StepIo) -> StepOutcome {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(kind.run(cx, io))
}

fn journaled(sink: &Sink) -> Vec<Checkpoint> {
    sink.0.lock().unwrap().clone()
}

fn request_body(checkpoints: &[Checkpoint]) -> Value {
    checkpoints
        .iter()
        .find(|c| c.data["request"] == "complete")
        .map(|c| c.data["body"].clone())
        .expect("a journaled complete request")
}

#[test]
fn a_bought_cell_is_uploaded_and_completed_and_a_resume_finds_it_done_without_a_call() {
    let f = Fixture::new(&[KID, VET]);
    f.played(KID);
    let id = deliver_id(KID);
    let cx = f.context(&id);
    let (io, sink) = f.io(&id, &[KID], Vec::new(), f.local(), false, true);
    assert_eq!(run_step(&deliver(), &cx, &io), StepOutcome::Succeeded);
    let run = f.run_view(KID);
    assert_eq!(run.state, RunState::Succeeded);
    assert_eq!((run.actions_taken, run.reason), (12, None));
    assert_eq!(f.run_view(VET).state, RunState::Queued, "only its own cell");

    let checkpoints = journaled(&sink);
    let body = request_body(&checkpoints);
    assert_eq!(body["state"], "succeeded");
    assert_eq!(
        body["reason"],
        Value::Null,
        "a succeeded run sends no reason"
    );
    assert_eq!(body["quit_reason"], "done");
    assert_eq!(body["report"]["persona"], "kid");
    let manifest: Vec<(String, i64, String)> = body["manifest"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["path"].as_str().unwrap().to_owned(),
                m["size"].as_i64().unwrap(),
                m["sha256"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let names: Vec<&str> = manifest.iter().map(|m| m.0.as_str()).collect();
    assert_eq!(
        names,
        [
            "report.json",
            "report.md",
            "transcript.jsonl",
            "trace.jsonl"
        ]
    );
    for (name, size, sha) in &manifest {
        let bytes = std::fs::read(f.cell_dir(KID).join(name)).unwrap();
        assert_eq!(*size, i64::try_from(bytes.len()).unwrap(), "{name}");
        assert_eq!(*sha, crate::reuse::sha256_hex(&bytes), "{name}");
    }
    assert!(
        checkpoints
            .iter()
            .any(|c| c.data["completed"]["state"] == "succeeded"),
        "{checkpoints:?}"
    );
    assert!(
        f.notes().contains("delivered play[kid]: 4 files"),
        "{}",
        f.notes()
    );

    // A resume (the step ran again with what it journaled) calls nothing:
    // a backend that counts completes sees none.
    let counting = Arc::new(Tampered::new(Arc::clone(&f.ledger)));
    let (again, sink) = f.io(
        &id,
        &[KID],
        checkpoints,
        Arc::clone(&counting) as Arc<dyn Backend>,
        false,
        true,
    );
    assert_eq!(run_step(&deliver(), &cx, &again), StepOutcome::Succeeded);
    assert_eq!(
        counting.completes.load(std::sync::atomic::Ordering::SeqCst),
        0
    );
    assert!(journaled(&sink).is_empty());
    assert!(f.notes().contains("delivered earlier"), "{}", f.notes());
}

#[test]
fn a_cell_that_was_not_bought_is_not_delivered() {
    let f = Fixture::new(&[VET]);
    let id = deliver_id(KID);
    let cx = f.context(&id);
    let (io, sink) = f.io(&id, &[KID], Vec::new(), f.local(), false, true);
    assert_eq!(run_step(&deliver(), &cx, &io), StepOutcome::Succeeded);
    assert!(journaled(&sink).is_empty(), "no request journaled");
    assert!(
        f.notes()
            .contains("nothing to deliver: cell play[kid] was not bought (reused)"),
        "{}",
        f.notes()
    );
    assert_eq!(f.run_view(VET).state, RunState::Queued);

    // No job at all: the same, and nothing is called.
    let (io, sink) = f.io(&id, &[KID], Vec::new(), f.local(), false, false);
    assert_eq!(run_step(&deliver(), &cx, &io), StepOutcome::Succeeded);
    assert!(journaled(&sink).is_empty());
}

#[test]
fn a_resume_sends_the_body_first_journaled_and_a_complete_the_backend_did_is_not_redone() {
    let f = Fixture::new(&[KID, VET]);
    f.played(KID);
    let id = deliver_id(KID);
    let cx = f.context(&id);
    // Killed right after the key was journaled: the request record is all
    // the journal holds. It says 7 actions; the report on disk says 12.
    let (first, sink) = f.io(&id, &[KID], Vec::new(), f.local(), false, true);
    let files = collect(&f.cell_dir(KID), &redactor()).unwrap();
    let mut body = complete_body(KID, &f.cell_dir(KID), &files, &redactor()).unwrap();
    body.actions_taken = 7;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(first.request_once("complete", || serde_json::to_value(&body).unwrap()))
        .unwrap();
    let key_journaled = journaled(&sink);
    let (resumed, sink) = f.io(&id, &[KID], key_journaled, f.local(), false, true);
    assert_eq!(run_step(&deliver(), &cx, &resumed), StepOutcome::Succeeded);
    assert_eq!(f.run_view(KID).state, RunState::Succeeded);
    assert_eq!(
        f.run_view(KID).actions_taken,
        7,
        "the journaled body went, not a fresh one"
    );
    assert!(
        journaled(&sink).iter().all(|c| c.data["request"].is_null()),
        "no second request record"
    );

    // Killed after the backend completed, before its answer was journaled:
    // the resume completes again and the backend answers it changed nothing.
    let (first, _) = f.io(&id, &[KID], Vec::new(), f.local(), false, true);
    rt.block_on(first.request_once("complete", || serde_json::to_value(&body).unwrap()))
        .unwrap();
    let all = first.checkpoints();
    let (resumed, sink) = f.io(&id, &[KID], all, f.local(), false, true);
    assert_eq!(run_step(&deliver(), &cx, &resumed), StepOutcome::Succeeded);
    let done = journaled(&sink);
    assert_eq!(done.len(), 1, "{done:?}");
    assert_eq!(done[0].data["completed"]["changed"], false);
    assert_eq!(done[0].data["completed"]["state"], "succeeded");
}

#[test]
fn one_lost_upload_is_repaired_and_a_file_that_cannot_be_verified_fails_naming_it() {
    let f = Fixture::new(&[KID, VET]);
    f.played(KID);
    f.played(VET);
    let lossy = Arc::new(Tampered {
        drop_once: Mutex::new(Some("trace.jsonl".into())),
        ..Tampered::new(Arc::clone(&f.ledger))
    });
    let id = deliver_id(KID);
    let cx = f.context(&id);
    let (io, _) = f.io(
        &id,
        &[KID],
        Vec::new(),
        Arc::clone(&lossy) as Arc<dyn Backend>,
        false,
        true,
    );
    assert_eq!(run_step(&deliver(), &cx, &io), StepOutcome::Succeeded);
    assert_eq!(
        lossy.completes.load(std::sync::atomic::Ordering::SeqCst),
        2,
        "one repair pass"
    );
    assert!(
        f.notes().contains("did not find trace.jsonl"),
        "{}",
        f.notes()
    );
    assert_eq!(f.run_view(KID).state, RunState::Succeeded);

    // The journaled manifest names a file the cell no longer has: the
    // repair cannot upload it, the second 422 fails the step naming it.
    let id = deliver_id(VET);
    let cx = f.context(&id);
    let (io, _) = f.io(&id, &[VET], Vec::new(), f.local(), false, true);
    let files = collect(&f.cell_dir(VET), &redactor()).unwrap();
    let body = complete_body(VET, &f.cell_dir(VET), &files, &redactor()).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(io.request_once("complete", || serde_json::to_value(&body).unwrap()))
        .unwrap();
    std::fs::remove_file(f.cell_dir(VET).join("transcript.jsonl")).unwrap();
    let StepOutcome::Failed { message, .. } = run_step(&deliver(), &cx, &io) else {
        panic!("a second 422 fails the step");
    };
    assert!(
        message.contains("still does not find transcript.jsonl"),
        "{message}"
    );
    assert_eq!(
        f.run_view(VET).state,
        RunState::Uploading,
        "the run stays open"
    );
}

#[test]
fn dry_upload_lists_every_file_and_sends_nothing() {
    let f = Fixture::new(&[KID, VET]);
    f.played(KID);
    let id = deliver_id(KID);
    let cx = f.context(&id);
    let (io, sink) = f.io(&id, &[KID], Vec::new(), f.local(), true, true);
    assert_eq!(run_step(&deliver(), &cx, &io), StepOutcome::Succeeded);
    assert!(journaled(&sink).is_empty(), "nothing journaled");
    assert_eq!(f.run_view(KID).state, RunState::Reporting, "nothing sent");
    let notes = f.notes();
    for name in [
        "report.json",
        "report.md",
        "transcript.jsonl",
        "trace.jsonl",
    ] {
        let bytes = std::fs::read(f.cell_dir(KID).join(name)).unwrap();
        let line = format!(
            "would upload {name} of play[kid] ({} bytes, sha256 {})",
            bytes.len(),
            crate::reuse::sha256_hex(&bytes)
        );
        assert!(notes.contains(&line), "{line}\n{notes}");
    }
    assert!(
        notes.contains("would complete run") && notes.contains("as succeeded after 12 actions"),
        "{notes}"
    );
}

#[test]
fn a_cell_that_did_not_play_fails_its_run_with_a_redacted_reason_cut_to_400_characters() {
    let f = Fixture::new(&[KID, VET]);
    let mut not_played = report(KID, CellState::NotPlayed);
    not_played.not_played = Some(NotPlayed {
        cause: format!("the game printed {SECRET} then {}", "é".repeat(600)),
        hint: None,
        stderr_tail: None,
    });
    f.write_cell(KID, &not_played);
    std::fs::write(
        f.cell_dir(KID).join("transcript.jsonl"),
        format!("{{\"said\":\"{SECRET}\"}}\n"),
    )
    .unwrap();
    let id = deliver_id(KID);
    let cx = f.context(&id);
    let (io, sink) = f.io(&id, &[KID], Vec::new(), f.local(), false, true);
    assert_eq!(run_step(&deliver(), &cx, &io), StepOutcome::Succeeded);
    let run = f.run_view(KID);
    assert_eq!(run.state, RunState::Failed);
    let reason = run.reason.expect("a failed run says why");
    assert_eq!(reason.chars().count(), 400);
    assert!(!reason.contains(SECRET), "{reason}");
    assert!(
        reason.starts_with("the cell did not play: the game printed [redacted] then é"),
        "{reason}"
    );
    // What was uploaded is redacted too: its digest is of what went.
    let body = request_body(&journaled(&sink));
    let transcript = body["manifest"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["path"] == "transcript.jsonl")
        .unwrap()
        .clone();
    assert_eq!(
        transcript["sha256"],
        crate::reuse::sha256_hex(b"{\"said\":\"[redacted]\"}\n")
    );
}

// ---- the aggregate's publishing ----------------------------------------

fn aggregate_io(f: &Fixture, known: Vec<Checkpoint>, dry: bool, job: bool) -> (StepIo, Arc<Sink>) {
    let (io, sink) = f.io("aggregate", &[KID, VET], known, f.local(), dry, job);
    (io, sink)
}

#[test]
fn the_aggregate_is_published_to_the_job_once_and_not_without_a_job_or_with_dry_upload() {
    let f = Fixture::new(&[KID, VET]);
    let cx = f.context("aggregate");
    let job = f.job.job_ref();
    let published = || {
        f.ledger
            .get_job(&token(), &job)
            .unwrap()
            .aggregate_published
    };

    let (io, sink) = aggregate_io(&f, Vec::new(), false, false);
    assert_eq!(
        run_step(&super::super::aggregate::Aggregate, &cx, &io),
        StepOutcome::Succeeded
    );
    assert!(
        journaled(&sink).is_empty() && !published(),
        "no job: nothing"
    );

    let (io, sink) = aggregate_io(&f, Vec::new(), true, true);
    assert_eq!(
        run_step(&super::super::aggregate::Aggregate, &cx, &io),
        StepOutcome::Succeeded
    );
    assert!(journaled(&sink).is_empty() && !published(), "dry: nothing");
    assert!(
        f.notes()
            .contains("--dry-upload: would upload aggregate.md")
    );

    let (io, sink) = aggregate_io(&f, Vec::new(), false, true);
    assert_eq!(
        run_step(&super::super::aggregate::Aggregate, &cx, &io),
        StepOutcome::Succeeded
    );
    assert!(published());
    let checkpoints = journaled(&sink);
    let md = std::fs::read(cx.step_dir.join("aggregate.md")).unwrap();
    let body = checkpoints
        .iter()
        .find(|c| c.data["request"] == "aggregate")
        .map(|c| c.data["body"].clone())
        .expect("the request journaled");
    assert_eq!(body["md"]["sha256"], crate::reuse::sha256_hex(&md));
    assert_eq!(body["md"]["size"], md.len());
    let done = checkpoints
        .iter()
        .find(|c| c.data.get("published").is_some())
        .expect("the answer journaled");
    assert_eq!(done.data["published"]["changed"], true);
    assert!(
        f.notes()
            .contains(&format!("published the aggregate to job {}", f.job.job)),
        "{}",
        f.notes()
    );

    // A resume that finds it published calls nothing more.
    let (io, sink) = aggregate_io(&f, checkpoints, false, true);
    assert_eq!(
        run_step(&super::super::aggregate::Aggregate, &cx, &io),
        StepOutcome::Succeeded
    );
    assert!(journaled(&sink).is_empty());
    assert!(f.notes().contains("published to job"), "{}", f.notes());
}

#[test]
fn a_run_the_cell_ended_itself_gets_its_files_and_no_complete() {
    let f = Fixture::new(&[KID, VET]);
    let run = f.job.run_ref(KID).unwrap();
    for to in [
        RunState::Launching,
        RunState::Playing,
        RunState::BudgetExceeded,
    ] {
        f.ledger
            .transition(&token(), &run, &TransitionRequest { to, reason: None })
            .unwrap();
    }
    let id = deliver_id(KID);
    let cx = f.context(&id);
    let (io, sink) = f.io(&id, &[KID], Vec::new(), f.local(), false, true);
    assert_eq!(run_step(&deliver(), &cx, &io), StepOutcome::Succeeded);
    assert_eq!(f.run_view(KID).state, RunState::BudgetExceeded);
    let shown = f.ledger.show().unwrap();
    let uploaded: Vec<&str> = shown.jobs[0]
        .uploads
        .iter()
        .filter(|u| u.run.as_deref() == Some(run.run.as_str()))
        .map(|u| u.name.as_str())
        .collect();
    assert_eq!(
        uploaded,
        [
            "report.json",
            "report.md",
            "trace.jsonl",
            "transcript.jsonl"
        ]
    );
    assert!(
        journaled(&sink)
            .iter()
            .any(|c| c.data["completed"]["state"] == "budget_exceeded"),
        "a resume calls nothing"
    );
    assert!(
        f.notes().contains("ended `budget_exceeded` already"),
        "{}",
        f.notes()
    );
}

#[test]
fn the_published_aggregate_holds_no_secret_and_its_digests_are_of_what_went() {
    let f = Fixture::new(&[KID, VET]);
    let mut kid = report(KID, CellState::Succeeded);
    kid.warnings = vec![format!("the game printed {SECRET}")];
    kid.persona = format!("kid {SECRET}");
    f.write_cell(KID, &kid);
    let cx = f.context("aggregate");
    let (io, _) = aggregate_io(&f, Vec::new(), false, true);
    assert_eq!(
        run_step(&super::super::aggregate::Aggregate, &cx, &io),
        StepOutcome::Succeeded
    );
    let local = std::fs::read_to_string(cx.step_dir.join("aggregate.md")).unwrap();
    assert!(
        local.contains(SECRET),
        "the test's secret reaches the merge"
    );
    let shown = f.ledger.show().unwrap();
    let md = shown.jobs[0]
        .uploads
        .iter()
        .find(|u| u.run.is_none() && u.name == "aggregate.md")
        .expect("uploaded to the job");
    assert_eq!(
        md.sha256,
        crate::reuse::sha256_hex(redactor().redact(&local).as_bytes())
    );
    let published = shown.jobs[0].aggregate.clone().expect("published");
    assert_eq!(published.md.sha256, md.sha256);
}

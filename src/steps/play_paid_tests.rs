//! Paid play cells against a real ledger in a temp dir: the `play` kind runs
//! a real Python game with a `StepIo` whose backend is the `local` ledger
//! and whose upstream `register` left a job record, as a paid run hands it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;

use crate::backend::Connection;
use crate::backend::api::{
    Cell, EstimateRequest, JobRef, RegisterRequest, RunLength, RunRef, RunState, RunView, Token,
    TransitionRequest,
};
use crate::backend::ledger::{DEMO_TOKEN, Ledger};
use crate::backend::local::LocalBackend;
use crate::journal::run::Checkpoint;
use crate::play::CellReport;
use crate::reuse::FileHashCache;
use crate::steps::money::{CellRun, JOB, JobRecord};
use crate::steps::play::{cell_spec, run_cell};
use crate::steps::{BoxFuture, CheckpointSink, Confirm, StepContext, StepIo, StepOutcome};

/// A game whose every observation is new (no `stuck`): `SLOW` seconds pass
/// before each answer to `act`; `BROKEN=1` makes it exit at `reset`.
const COUNTER: &str = r#"import json, os, sys, time

slow = float(os.environ.get("SLOW", "0"))
broken = os.environ.get("BROKEN") == "1"
n = 0
for line in sys.stdin:
    msg = json.loads(line)
    op, i = msg["op"], msg["id"]
    if op == "hello":
        out = {"id": i, "ok": True, "name": "counter", "version": "1", "protocol": 1}
    elif op == "reset":
        if broken:
            sys.stderr.write("cannot load level 1\n")
            sys.exit(3)
        n = 0
        out = {"id": i, "ok": True, "observation": {"text": "Room 0", "actions": ["a", "b"], "state": {"n": 0}, "score": 0}}
    elif op == "act":
        time.sleep(slow)
        n += 1
        out = {"id": i, "ok": True, "reward": 0, "done": False,
               "observation": {"text": "Room %d" % n, "actions": ["a", "b"], "state": {"n": n}, "score": n}}
    else:
        out = {"id": i, "ok": True}
    print(json.dumps(out), flush=True)
    if op == "close":
        break
"#;

const GAME: &str = "counter";

struct Sink;

impl CheckpointSink for Sink {
    fn write(&self, _checkpoint: &Checkpoint, _step: &str) -> Result<(), String> {
        Ok(())
    }

    fn write_durable<'a>(
        &'a self,
        _checkpoint: &'a Checkpoint,
        _step: &'a str,
    ) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async { Ok(()) })
    }
}

struct No;

impl Confirm for No {
    fn confirm(&self, _question: &str) -> bool {
        false
    }
}

/// A repo with the counter game and a plan of one paid cell, a ledger, and
/// the job that bought the cell.
struct Paid {
    dir: tempfile::TempDir,
    ledger: Arc<Ledger>,
    run: RunRef,
    record: JobRecord,
    warnings: Arc<Mutex<Vec<String>>>,
    /// A secret of the plan's, which no reason sent to the backend may hold.
    secret: Option<&'static str>,
}

fn demo() -> Token {
    Token(DEMO_TOKEN.to_owned())
}

impl Paid {
    fn new(slow: &str, patience: u64, broken: bool, length: RunLength) -> Paid {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(dir.path().join(".git")).expect(".git");
        std::fs::write(dir.path().join("game.py"), COUNTER).expect("game");
        let plan = format!(
            r#"version = 1
name = "paid"

[game]
id = "{GAME}"
command = ["python3", "game.py"]
env = {{ SLOW = "{slow}", BROKEN = "{}" }}

[[personas]]
slug = "kid"
card = "Clicks everything."
player = {{ kind = "random", seed = 3 }}
patience = {patience}

[[steps]]
id = "register"
kind = "register"

[[steps]]
id = "play"
kind = "play"
needs = ["register"]
"#,
            u8::from(broken)
        );
        std::fs::write(dir.path().join("plan.toml"), plan).expect("plan");
        let ledger = Arc::new(
            Ledger::open(&dir.path().join(".gameplan/ledger.sqlite")).expect("the ledger opens"),
        );
        let cells = vec![Cell {
            persona: "kid".into(),
            controller: "standard".into(),
        }];
        let estimate = ledger
            .estimate(
                &demo(),
                GAME,
                &EstimateRequest {
                    cells: cells.clone(),
                    modules: Vec::new(),
                    run_length: length,
                },
            )
            .expect("estimate");
        let registered = ledger
            .register(
                &demo(),
                GAME,
                "key-1",
                &RegisterRequest {
                    quote_id: estimate.quote_id,
                    confirm_price_cents: estimate.estimate_cents,
                    cells,
                    modules: Vec::new(),
                    run_length: length,
                },
            )
            .expect("register");
        let job = registered.job;
        let record = JobRecord {
            game: GAME.into(),
            job: job.id.clone(),
            price_cents: job.price_cents,
            runs: vec![CellRun {
                cell: "play".into(),
                run: job.runs[0].id.clone(),
            }],
        };
        let run = record.run_ref("play").expect("bought");
        Paid {
            dir,
            ledger,
            run,
            record,
            warnings: Arc::default(),
            secret: None,
        }
    }

    fn root(&self) -> &Path {
        self.dir.path()
    }

    fn step_dir(&self) -> PathBuf {
        self.root().join("steps/play")
    }

    fn view(&self) -> RunView {
        self.ledger.get_run(&demo(), &self.run).expect("get run")
    }

    fn move_to(&self, to: RunState) {
        self.ledger
            .transition(&demo(), &self.run, &TransitionRequest { to, reason: None })
            .expect("a valid transition");
    }

    fn report(&self) -> CellReport {
        let text = std::fs::read_to_string(self.step_dir().join("report.json")).expect("report");
        serde_json::from_str(&text).expect("a report")
    }

    /// Plays the cell once, with a backend when `paid`; `during` runs beside
    /// it on the same runtime with the ledger and the stop switch.
    fn play(
        &self,
        paid: bool,
        during: impl FnOnce(
            Arc<Ledger>,
            RunRef,
            tokio::sync::watch::Sender<bool>,
        ) -> BoxFuture<'static, ()>,
    ) -> StepOutcome {
        let loaded = crate::plan::load(
            &self.root().join("plan.toml"),
            &crate::plan::LoadOptions::default(),
        )
        .expect("the plan loads");
        let pipeline = crate::graph::expand(&loaded.plan).expect("expands");
        let node = pipeline
            .order
            .iter()
            .copied()
            .find(|n| pipeline.instance(*n).id == "play")
            .expect("play");
        let instance = pipeline.instance(node).clone();
        let (stop, cancel) = tokio::sync::watch::channel(false);
        let cx = StepContext {
            root: loaded.root.clone(),
            plan_file: None,
            run_id: "test-run".into(),
            step_dir: self.step_dir(),
            plan: Arc::new(loaded.plan.clone()),
            reads: Arc::default(),
            step: pipeline.steps[instance.step].clone(),
            instance,
            attempt: 1,
            hashes: Arc::new(Mutex::new(FileHashCache::load(
                &self.root().join(".gameplan"),
            ))),
            cancel,
            env: Arc::new(std::env::vars().collect()),
            left_by: "test-run".into(),
            note: Arc::new(|_: &str| {}),
            units: crate::reuse::UnitStore::open(&self.root().join(".gameplan")),
            baseline: None,
        };
        let conn = Connection {
            backend: Arc::new(LocalBackend::new(Arc::clone(&self.ledger))),
            token: demo(),
        };
        let book = Arc::new(Mutex::new(BTreeMap::from([(
            "register".to_owned(),
            vec![Checkpoint {
                attempt: 1,
                data: json!({ (JOB): self.record }),
            }],
        )])));
        let warnings = Arc::clone(&self.warnings);
        let io = StepIo::new(
            Arc::new(Sink),
            "play".into(),
            Vec::new(),
            paid.then_some(conn),
            Arc::new(No),
            false,
        )
        .in_run(
            book,
            BTreeMap::from([("register".to_owned(), self.root().join("steps/register"))]),
        )
        .on_warn(move |w| warnings.lock().expect("warnings").push(w.to_owned()));
        let redactor = crate::template::Redactor::default();
        if let Some(secret) = self.secret {
            redactor.register(secret);
        }
        let io = io.redacting(redactor);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let beside = during(Arc::clone(&self.ledger), self.run.clone(), stop);
        runtime.block_on(async {
            let beside = tokio::spawn(beside);
            // The game runs without rlimits: those exec it through the
            // gameplan binary, which a test binary is not.
            let mut spec = cell_spec(&cx).expect("a cell");
            spec.game.limits = crate::play::ResourceLimits::NONE;
            let outcome = run_cell(&cx, &io, &spec).await;
            beside.abort();
            outcome
        })
    }
}

fn nothing(
    _: Arc<Ledger>,
    _: RunRef,
    stop: tokio::sync::watch::Sender<bool>,
) -> BoxFuture<'static, ()> {
    Box::pin(async move {
        // Held open: a dropped sender is not a stop, but keep it alive anyway.
        std::future::pending::<()>().await;
        drop(stop);
    })
}

/// Waits until the ledger heard (by heartbeat) at least `actions` actions.
async fn heard(ledger: &Ledger, run: &RunRef, actions: i64) {
    for _ in 0..2000 {
        if ledger.get_run(&demo(), run).expect("get run").actions_taken >= actions {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!(
        "the ledger never heard {actions} actions of run {}",
        run.run
    );
}

#[test]
fn play_a_paid_cell_moves_its_run_to_reporting_with_its_actions_heard() {
    let paid = Paid::new("0", 25, false, RunLength::Standard);
    assert_eq!(paid.view().state, RunState::Queued);
    let outcome = paid.play(true, nothing);
    assert_eq!(outcome, StepOutcome::Succeeded);
    let view = paid.view();
    assert_eq!(view.state, RunState::Reporting, "{view:?}");
    assert!(view.played, "a run that reached `playing` is charged");
    assert_eq!(paid.report().actions_taken, 25);
    assert_eq!(
        view.actions_taken, 25,
        "the last heartbeat carries the final count"
    );
    let shown = paid.ledger.show().expect("show");
    assert_eq!(
        shown.jobs[0].runs[0].actions_taken, 25,
        "`ledger show` lists it"
    );
    assert!(paid.warnings.lock().expect("warnings").is_empty());
}

#[test]
fn play_a_free_cell_beside_a_bought_job_sends_nothing() {
    let paid = Paid::new("0", 5, false, RunLength::Standard);
    assert_eq!(paid.play(false, nothing), StepOutcome::Succeeded);
    assert_eq!(
        paid.view().state,
        RunState::Queued,
        "no backend: nothing sent"
    );
}

#[test]
fn play_a_cell_that_cannot_start_fails_its_run_with_a_reason_and_finish_refunds_it() {
    let mut paid = Paid::new("0", 25, true, RunLength::Standard);
    // The game's stderr says it; the backend never hears the secret.
    paid.secret = Some("level 1");
    let StepOutcome::Failed { message, .. } = paid.play(true, nothing) else {
        panic!("a game that never opened fails the step");
    };
    let view = paid.view();
    assert_eq!(view.state, RunState::Failed);
    assert!(!view.played);
    let reason = view.reason.expect("a failed run says why");
    assert!(reason.chars().count() <= 400, "{reason}");
    assert!(message.contains("level 1"), "{message}");
    assert!(
        !reason.contains("level 1") && reason.contains("[redacted]"),
        "{reason}"
    );
    assert!(
        reason.starts_with("the cell did not play: the game exited with code 3"),
        "the reason is the step's message: {reason}"
    );
    let job = JobRef {
        game: GAME.into(),
        job: paid.run.job.clone(),
    };
    let finished = paid.ledger.finish(&demo(), &job).expect("finish");
    assert_eq!(
        finished.settlement.refunded_runs,
        vec![paid.run.run.clone()]
    );
}

#[test]
fn play_cancel_requested_stops_the_cell_after_its_turn_and_cancels_the_run() {
    let paid = Paid::new("0.01", 400, false, RunLength::Long);
    let outcome = paid.play(true, |ledger, run, stop| {
        Box::pin(async move {
            heard(&ledger, &run, 10).await;
            // Someone else (a dashboard, another client) cancels the run.
            ledger
                .transition(
                    &demo(),
                    &run,
                    &TransitionRequest {
                        to: RunState::Canceled,
                        reason: Some("canceled from the dashboard".into()),
                    },
                )
                .expect("cancel");
            std::future::pending::<()>().await;
            drop(stop);
        })
    });
    let StepOutcome::Failed { message, .. } = outcome else {
        panic!("a canceled run fails the cell: {outcome:?}");
    };
    assert!(
        message.contains("the backend asked to cancel this run"),
        "{message}"
    );
    let report = paid.report();
    assert!(
        (10..150).contains(&report.actions_taken),
        "stopped soon after the cancel, not at patience: {} actions",
        report.actions_taken
    );
    assert_eq!(paid.view().state, RunState::Canceled);
    // Played again (a resume), a canceled run is not played.
    std::fs::remove_dir_all(paid.step_dir()).expect("clean");
    let StepOutcome::Failed { message, .. } = paid.play(true, nothing) else {
        panic!("a canceled run is not played again");
    };
    assert!(message.contains("is `canceled`"), "{message}");
    assert!(!paid.step_dir().join("report.json").exists());
}

#[test]
fn play_ctrl_c_marks_the_run_interrupted_and_a_resume_plays_it_to_reporting() {
    let paid = Paid::new("0.01", 60, false, RunLength::Standard);
    let outcome = paid.play(true, |ledger, run, stop| {
        Box::pin(async move {
            heard(&ledger, &run, 10).await;
            let _ = stop.send(true);
            std::future::pending::<()>().await;
        })
    });
    assert!(
        matches!(outcome, StepOutcome::Interrupted { .. }),
        "{outcome:?}"
    );
    let view = paid.view();
    assert_eq!(view.state, RunState::Interrupted);
    assert!(view.played);
    let stopped_at = paid.report().actions_taken;
    assert!(stopped_at < 60 && view.actions_taken == i64::try_from(stopped_at).expect("small"));
    let charged = paid.ledger.show().expect("show").accounts[0].charged_cents;
    // The resume: interrupted → launching → playing → reporting.
    assert_eq!(paid.play(true, nothing), StepOutcome::Succeeded);
    let view = paid.view();
    assert_eq!(view.state, RunState::Reporting);
    assert_eq!(view.actions_taken, 60);
    let shown = paid.ledger.show().expect("show");
    assert_eq!(shown.jobs.len(), 1);
    assert_eq!(
        shown.accounts[0].charged_cents, charged,
        "nothing charged again"
    );
}

#[test]
fn play_a_run_left_playing_by_a_dead_gameplan_is_played_again() {
    let paid = Paid::new("0", 12, false, RunLength::Standard);
    paid.move_to(RunState::Launching);
    paid.move_to(RunState::Playing);
    // kill -9 mid-play, then `plan resume`: playing → interrupted → launching.
    assert_eq!(paid.play(true, nothing), StepOutcome::Succeeded);
    assert_eq!(paid.view().state, RunState::Reporting);
    // Killed after the cell reported, before the step was journaled: the
    // cell plays again and the run stays where it is.
    assert_eq!(paid.play(true, nothing), StepOutcome::Succeeded);
    let view = paid.view();
    assert_eq!(view.state, RunState::Reporting);
    assert_eq!(view.actions_taken, 12);
}

#[test]
fn play_the_run_lengths_allowance_stops_the_cell_as_budget_exceeded() {
    // A short run allows 100 actions; the persona would take 300.
    let paid = Paid::new("0", 300, false, RunLength::Short);
    let outcome = paid.play(true, nothing);
    let StepOutcome::Incomplete { message } = outcome else {
        panic!("an allowance stop is incomplete: {outcome:?}");
    };
    assert!(message.contains("allowance of 100 actions"), "{message}");
    let view = paid.view();
    assert_eq!(view.state, RunState::BudgetExceeded);
    let taken = paid.report().actions_taken;
    assert!((100..200).contains(&taken), "{taken} actions");
}

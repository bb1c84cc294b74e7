//! The engine seam: `plan run --new` beside an unfinished
//! run holding a request whose answer never came.
//!
//! No built kind sends requests yet, so the unfinished run is made through
//! the library with a kind of the test's own (registered for the plan's
//! `command` step), exactly as a money kind would leave it: its key and body
//! journaled by `StepIo::request_once`, its outcome `Uncertain`. The real
//! binary then meets that run.

use std::sync::Arc;

use gameplan::engine::{self, RunOptions, RunRequest, Start};
use gameplan::plan::LoadOptions;
use gameplan::plan::model::StepKind;
use gameplan::report::progress::Progress;
use gameplan::steps::{
    BoxFuture, Confirm, KeyContext, Kind, Kinds, Outputs, Reuse, StepContext, StepError, StepIo,
    StepOutcome,
};

use crate::support::Test;

const PLAN: &str =
    "version = 1\nname = \"buy\"\n\n[[steps]]\nid = \"buy\"\nkind = \"command\"\nrun = \"true\"\n";

/// Sends its request once and never hears back.
struct NeverAnswered;

impl Kind for NeverAnswered {
    fn kind(&self) -> StepKind {
        StepKind::Command
    }

    fn reuse(&self, _cx: &KeyContext<'_>) -> Result<Reuse, StepError> {
        Ok(Reuse::Never("sends a request".into()))
    }

    fn run<'a>(&'a self, _cx: &'a StepContext, io: &'a StepIo) -> BoxFuture<'a, StepOutcome> {
        Box::pin(async move {
            match io
                .request_once("register", || serde_json::json!({ "cells": 4 }))
                .await
            {
                Ok(_) => StepOutcome::Uncertain {
                    message: "the backend did not answer within 10s".into(),
                },
                Err(e) => StepOutcome::Failed {
                    exit_code: None,
                    message: e.0,
                },
            }
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

/// Leaves an unfinished run of `plan.toml` whose `buy` holds a journaled,
/// unsettled key; returns the run's id and the key.
fn unsettled_run(t: &Test) -> (String, String) {
    let loaded =
        gameplan::plan::load(&t.path("plan.toml"), &LoadOptions::default()).expect("loads");
    let pipeline = gameplan::graph::expand(&loaded.plan).expect("expands");
    let hash = engine::plan_hash(&loaded);
    let state_dir = t.path(".gameplan");
    let run_id = engine::new_run_id();
    let lock = engine::lock(&state_dir, &hash, &run_id).expect("lock");
    let progress = Progress::new(false, true, loaded.redactor.clone());
    let request = RunRequest {
        loaded,
        pipeline,
        plan_hash: hash.clone(),
        state_dir: state_dir.clone(),
        options: RunOptions::default(),
        env: Arc::new(std::collections::BTreeMap::new()),
        start: Start::New(run_id.clone()),
        resume_hint: String::new(),
        kinds: Arc::new(Kinds::of(vec![Box::new(NeverAnswered)])),
        confirm: Arc::new(No),
    };
    let report = engine::run(request, &progress, lock).expect("runs");
    assert_eq!(report.exit_code, 1, "{report:?}");
    let history = engine::find_unfinished(&state_dir, &hash)
        .expect("readable")
        .expect("the run is left open");
    let (_, key) = engine::unsettled_key(&history).expect("a journaled key");
    (run_id, key)
}

#[test]
fn new_beside_an_unsettled_request_is_refused_unless_abandoned() {
    let t = Test::new().file("plan.toml", PLAN);
    let (run_id, key) = unsettled_run(&t);

    let refused = t.run(&["plan", "run", "plan.toml", "--new"]);
    refused
        .code(3)
        .stderr_has(&run_id)
        .stderr_has(&key)
        .stderr_has("it may have been charged")
        .stderr_has(&format!("gameplan plan resume {run_id}"))
        .stderr_has("--new --abandon-unsettled");
    assert_eq!(
        t.run_ids(),
        std::slice::from_ref(&run_id),
        "nothing new started"
    );

    // The person knows: a new run starts beside the open one.
    t.run(&["plan", "run", "plan.toml", "--new", "--abandon-unsettled"])
        .code(0);
    assert_eq!(t.run_ids().len(), 2);

    // The open run resumes (here `buy` is a plain command again) and
    // finishes; then nothing holds an unsettled key.
    t.run(&["plan", "resume", &run_id]).code(0);
    t.run(&["plan", "run", "plan.toml", "--new"]).code(0);
}

#[test]
fn abandon_unsettled_needs_new() {
    let t = Test::new().file("plan.toml", PLAN);
    // Bad usage is exit 3, nothing run.
    t.run(&["plan", "run", "plan.toml", "--abandon-unsettled"])
        .code(3)
        .stderr_has("--new");
    assert!(t.run_ids().is_empty());
}

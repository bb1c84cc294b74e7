//! The `register` step kind: buys the job `estimate` priced and the person
//! accepted, exactly once through crashes and lost answers (docs/money.md ›
//! The register key).
//!
//! - **What it buys**: the quote `estimate` left ([`money::quote_of`]), at
//!   the quote's price (`confirm_price_cents`), for the quote's cells. A
//!   quote with no cells (every cell reused) buys nothing.
//! - **Once**: the idempotency key and the body are journaled durably in
//!   one record before the request leaves ([`StepIo::request_once`]); every
//!   attempt, a resume's included, sends exactly the journaled body, so the
//!   backend answers a repeat with the job it already sold
//!   (`replayed: true`). An answer that never came ends the step
//!   [`StepOutcome::Uncertain`]: the run stays open for `plan resume`.
//! - **The job it records**: once the registered runs are checked against
//!   the bought cells (same count, persona and controller, in order), a
//!   [`JobRecord`] is journaled durably under [`money::JOB`], which `play`,
//!   `deliver`, `aggregate` and `finish` read. A job whose runs do not
//!   match is not recorded (nothing plays on it and `finish` does not
//!   settle it): the step fails naming the job, left open for
//!   reconciliation, and journals it under [`UNMATCHED`] so `finish` can
//!   say so.
//! - **Reuse**: never; a resume of a step that journaled its job ends at
//!   once, calling nothing.

use serde_json::json;

use super::money::{self, BoughtCell, Boundary, CellRun, JobRecord, QuoteRecord, crash_point};
use super::{
    BoxFuture, KeyContext, Kind, Outputs, Reuse, StepContext, StepError, StepIo, StepOutcome,
};
use crate::backend::api::{ApiError, Cell, RegisterRequest, RunView};
use crate::plan::model::StepKind;
use crate::report::ledger::dollars;

pub struct Register;

/// The name of its request in the journal (and of its crash points).
const CALL: &str = "register";

/// The checkpoint field of a job whose runs did not match the bought
/// cells: `{"job": …, "game": …, "why": …}`.
pub const UNMATCHED: &str = "unmatched_job";

impl Kind for Register {
    fn kind(&self) -> StepKind {
        StepKind::Register
    }

    fn reuse(&self, _cx: &KeyContext<'_>) -> Result<Reuse, StepError> {
        Ok(Reuse::Never(
            "it buys this run's job (a resume replays its journaled key, so it never buys twice)"
                .into(),
        ))
    }

    fn run<'a>(&'a self, cx: &'a StepContext, io: &'a StepIo) -> BoxFuture<'a, StepOutcome> {
        Box::pin(async move { run(cx, io).await.unwrap_or_else(StepOutcome::from) })
    }

    fn outputs(&self, _cx: &StepContext) -> Result<Outputs, StepError> {
        Ok(Outputs::default())
    }

    fn uses_backend(&self) -> bool {
        true
    }
}

async fn run(cx: &StepContext, io: &StepIo) -> Result<StepOutcome, StepError> {
    if let Some(job) = own_job(io) {
        // A resume of an attempt that journaled its job: it is bought.
        (cx.note)(&format!(
            "job {} was bought before this resume: {} run{}, {}; nothing was charged again",
            job.job,
            job.runs.len(),
            if job.runs.len() == 1 { "" } else { "s" },
            dollars(job.price_cents)
        ));
        return Ok(StepOutcome::Succeeded);
    }
    let Some(quote) = money::quote_of(io) else {
        return Ok(StepOutcome::Failed {
            exit_code: None,
            message: format!(
                "register needs an estimate step before it (add `needs = [\"estimate\"]` to step \
                 `{}`): there is no accepted quote to buy. Nothing was charged",
                cx.instance.id
            ),
        });
    };
    if quote.cells.is_empty() {
        (cx.note)("nothing to buy: every cell is reused");
        return Ok(StepOutcome::Succeeded);
    }
    let Some(connection) = io.backend() else {
        return Err(StepError(
            "register has no backend to buy the job from; nothing was charged".into(),
        ));
    };
    if let Some(stop) = cx.stopped("stopped before the job was bought; nothing was charged") {
        return Ok(stop);
    }
    io.mark_started();
    let request = io
        .request_once(CALL, || {
            serde_json::to_value(request_of(&quote)).unwrap_or_default()
        })
        .await?;
    crash_point(CALL, Boundary::KeyJournaled);
    // What leaves is what was journaled, never a body made afresh: a
    // resume must send the very bytes its key was first sent with.
    let body: RegisterRequest = serde_json::from_value(request.body.clone()).map_err(|e| {
        StepError(format!(
            "the journaled register request (idempotency key {}) cannot be read: {e}; nothing \
             was sent with it. Run `gameplan plan status` and reconcile the job by that key",
            request.idempotency_key
        ))
    })?;
    let answer = connection
        .backend
        .register(
            &connection.token,
            &quote.game,
            &request.idempotency_key,
            &body,
        )
        .await;
    crash_point(CALL, Boundary::ResponseReceived);
    let registered = match answer {
        Ok(registered) => registered,
        Err(e) => return Ok(refused(&e, &request.idempotency_key)),
    };
    let runs = match matched_runs(&quote.cells, &registered.job.runs) {
        Ok(runs) => runs,
        Err(why) => {
            io.checkpoint_durable(json!({
                UNMATCHED: {"game": quote.game, "job": registered.job.id, "why": why}
            }))
            .await?;
            return Ok(StepOutcome::Failed {
                exit_code: None,
                message: format!(
                    "job {} was bought (idempotency key {}) but its runs do not match the plan's \
                     cells: {why}. Nothing is played on it and finish does not settle it: the job \
                     is left open for reconciliation with the backend",
                    registered.job.id, request.idempotency_key
                ),
            });
        }
    };
    let record = JobRecord {
        game: quote.game.clone(),
        job: registered.job.id.clone(),
        price_cents: registered.job.price_cents,
        runs,
    };
    let value = serde_json::to_value(&record)
        .map_err(|e| StepError(format!("cannot encode the job record: {e}")))?;
    io.checkpoint_durable(json!({ money::JOB: value })).await?;
    crash_point(CALL, Boundary::ResponseJournaled);
    (cx.note)(&crate::report::settlement::bought(&registered));
    Ok(StepOutcome::Succeeded)
}

/// The job this step journaled in an earlier attempt, if any.
fn own_job(io: &StepIo) -> Option<JobRecord> {
    io.checkpoints()
        .into_iter()
        .filter_map(|c| c.data.get(money::JOB).cloned())
        .filter_map(|v| serde_json::from_value(v).ok())
        .next_back()
}

/// The body that buys `quote`: its cells at its price.
fn request_of(quote: &QuoteRecord) -> RegisterRequest {
    RegisterRequest {
        quote_id: quote.quote_id.clone(),
        confirm_price_cents: quote.estimate_cents,
        cells: quote
            .cells
            .iter()
            .map(|c| Cell::new(&c.persona, &c.controller))
            .collect(),
        modules: quote.modules.clone(),
        run_length: quote.run_length,
    }
}

/// Which backend run plays which bought cell: the registered runs must be
/// the bought cells, one each, in order; otherwise why not.
fn matched_runs(cells: &[BoughtCell], runs: &[RunView]) -> Result<Vec<CellRun>, String> {
    if cells.len() != runs.len() {
        return Err(format!(
            "{} cell{} bought, {} run{} registered",
            cells.len(),
            if cells.len() == 1 { "" } else { "s" },
            runs.len(),
            if runs.len() == 1 { " was" } else { "s were" }
        ));
    }
    cells
        .iter()
        .zip(runs)
        .map(|(cell, run)| {
            if cell.persona == run.persona && cell.controller == run.controller {
                Ok(CellRun {
                    cell: cell.id.clone(),
                    run: run.id.clone(),
                })
            } else {
                Err(format!(
                    "`{}` plays {}/{}, but run {} was registered for {}/{}",
                    cell.id, cell.persona, cell.controller, run.id, run.persona, run.controller
                ))
            }
        })
        .collect()
}

/// What a refusal of the register call means, explained in a sentence.
fn refused(e: &ApiError, key: &str) -> StepOutcome {
    let doing = "registering the job";
    if e.uncertain {
        return money::refusal(
            e,
            doing,
            &format!("It may have been charged once under idempotency key {key}."),
        );
    }
    let advice = match e.code.as_str() {
        "insufficient_balance" => format!(
            "The balance{} does not cover the price{}: top the account up (on the embedded \
             ledger, `gameplan ledger topup ACCOUNT CENTS`) and run the plan again.",
            e.details
                .balance_cents
                .map(|c| format!(" ({})", dollars(c)))
                .unwrap_or_default(),
            e.details
                .price_cents
                .map(|c| format!(" ({})", dollars(c)))
                .unwrap_or_default()
        ),
        "price_changed" => "The price moved since the quote was accepted: run the plan again to \
                            see the new price and accept it."
            .to_owned(),
        "quote_expired" => {
            "The quote expired before it was bought: run the plan again to price it afresh."
                .to_owned()
        }
        "too_many_active_jobs" => "The account has too many unsettled jobs: let their runs \
                                   finish (`gameplan plan resume` settles an interrupted one), \
                                   then run the plan again."
            .to_owned(),
        "charge_in_progress" => {
            return money::refusal(e, doing, "Nothing is charged twice.");
        }
        _ => String::new(),
    };
    money::refusal(
        e,
        doing,
        format!("Nothing was charged. {advice}").trim_end(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::api::{Registered, RunLength, RunState};

    fn cell(id: &str, persona: &str, controller: &str) -> BoughtCell {
        BoughtCell {
            id: id.into(),
            persona: persona.into(),
            controller: controller.into(),
        }
    }

    fn run(id: &str, persona: &str, controller: &str) -> RunView {
        RunView {
            id: id.into(),
            job_id: "job-1".into(),
            persona: persona.into(),
            controller: controller.into(),
            state: RunState::Queued,
            price_cents: 50,
            played: false,
            actions_taken: 0,
            reason: None,
        }
    }

    #[test]
    fn registered_runs_are_matched_to_the_bought_cells_in_order() {
        let cells = [
            cell("play[kid,standard]", "kid", "standard"),
            cell("play[kid,jev]", "kid", "jev"),
        ];
        let runs = [run("run-1", "kid", "standard"), run("run-2", "kid", "jev")];
        assert_eq!(
            matched_runs(&cells, &runs).expect("they match"),
            vec![
                CellRun {
                    cell: "play[kid,standard]".into(),
                    run: "run-1".into()
                },
                CellRun {
                    cell: "play[kid,jev]".into(),
                    run: "run-2".into()
                },
            ]
        );
        let swapped = [run("run-1", "kid", "jev"), run("run-2", "kid", "standard")];
        let why = matched_runs(&cells, &swapped).expect_err("swapped");
        assert_eq!(
            why,
            "`play[kid,standard]` plays kid/standard, but run run-1 was registered for kid/jev"
        );
        let why = matched_runs(&cells, &runs[..1]).expect_err("one short");
        assert_eq!(why, "2 cells bought, 1 run was registered");
    }

    #[test]
    fn the_body_buys_the_quotes_cells_at_the_quotes_price() {
        let quote = QuoteRecord {
            game: "maze".into(),
            quote_id: "quote-4".into(),
            estimate_cents: 100,
            balance_cents: 10_000,
            expires_at: "2026-12-04T04:00:00Z".into(),
            run_length: RunLength::Standard,
            modules: vec!["video".into()],
            cells: vec![cell("play[kid,jev]", "kid", "jev")],
        };
        let body = request_of(&quote);
        assert_eq!(body.quote_id, "quote-4");
        assert_eq!(body.confirm_price_cents, 100);
        assert_eq!(
            body.cells,
            vec![Cell {
                persona: "kid".into(),
                controller: "jev".into()
            }]
        );
        assert_eq!(body.modules, vec!["video".to_owned()]);
    }

    #[test]
    fn each_refusal_says_what_was_charged_and_what_to_do() {
        let key = "k-1";
        let short = ApiError::new(402, "insufficient_balance", "the balance is short").with(|d| {
            d.price_cents = Some(200);
            d.balance_cents = Some(50);
        });
        let StepOutcome::Refused { message } = refused(&short, key) else {
            panic!("a short balance is refused (exit 3)");
        };
        assert!(
            message.contains(
                "Nothing was charged. The balance ($0.50) does not cover the price ($2.00)"
            ) && message.contains("gameplan ledger topup"),
            "{message}"
        );
        for code in ["price_changed", "too_many_active_jobs", "quote_expired"] {
            let StepOutcome::Refused { message } = refused(&ApiError::new(409, code, "no"), key)
            else {
                panic!("{code} is refused (exit 3)");
            };
            assert!(
                message.contains("Nothing was charged. ") && message.contains("run the plan again"),
                "{code}: {message}"
            );
        }
        let StepOutcome::Uncertain { message } =
            refused(&ApiError::new(409, "charge_in_progress", "busy"), key)
        else {
            panic!("a charge in progress leaves the run open");
        };
        assert!(message.contains("Nothing is charged twice."), "{message}");
        let mut lost = ApiError::unavailable("timed out");
        lost.uncertain = true;
        let StepOutcome::Uncertain { message } = refused(&lost, key) else {
            panic!("a lost answer leaves the run open");
        };
        assert!(
            message.contains("It may have been charged once under idempotency key k-1."),
            "{message}"
        );
    }

    #[test]
    fn a_bought_job_is_said_with_its_runs_charge_and_balance() {
        let registered = Registered {
            job: crate::backend::api::JobView {
                id: "job-1".into(),
                game: "maze".into(),
                idempotency_key: "k".into(),
                state: "open".into(),
                price_cents: 100,
                charged_cents: 100,
                refunded_cents: 0,
                runs: vec![run("run-1", "kid", "standard"), run("run-2", "kid", "jev")],
                settlement: None,
                aggregate_published: false,
            },
            replayed: true,
            balance_cents: 9900,
        };
        assert_eq!(
            crate::report::settlement::bought(&registered),
            "bought job job-1: 2 runs, $1.00 charged; balance $99.00 (already bought: the \
             journaled key was replayed, nothing charged twice)"
        );
    }

    /// Checkpoints kept in memory, "durable" at once.
    struct Memory;

    impl super::super::CheckpointSink for Memory {
        fn write(
            &self,
            _checkpoint: &crate::journal::run::Checkpoint,
            _step: &str,
        ) -> Result<(), String> {
            Ok(())
        }

        fn write_durable<'a>(
            &'a self,
            _checkpoint: &'a crate::journal::run::Checkpoint,
            _step: &'a str,
        ) -> BoxFuture<'a, Result<(), String>> {
            Box::pin(async { Ok(()) })
        }
    }

    struct Never;

    impl super::super::Confirm for Never {
        fn confirm(&self, _question: &str) -> bool {
            false
        }
    }

    const PLAN: &str = r#"version = 1
name = "mismatch"
controllers = ["standard", "jev"]

[backend]
kind = "local"

[game]
id = "maze"
command = ["builtin:maze"]

[[personas]]
slug = "kid"
card = "Clicks everything."
player = { kind = "explorer" }

[[steps]]
id = "register"
kind = "register"

[[steps]]
id = "finish"
kind = "finish"
needs = ["register"]
always = true
"#;

    /// The context of step `id` of [`PLAN`] in `dir`, and notes it printed.
    fn context(
        dir: &std::path::Path,
        id: &str,
    ) -> (StepContext, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
        use std::sync::{Arc, Mutex};
        std::fs::write(dir.join("plan.toml"), PLAN).expect("plan");
        let loaded =
            crate::plan::load(&dir.join("plan.toml"), &crate::plan::LoadOptions::default())
                .expect("loads");
        let pipeline = crate::graph::expand(&loaded.plan).expect("expands");
        let instance = pipeline.instance(pipeline.find(id).expect("step")).clone();
        let notes = Arc::new(Mutex::new(Vec::new()));
        let heard = Arc::clone(&notes);
        let (_tx, cancel) = tokio::sync::watch::channel(false);
        let cx = StepContext {
            root: dir.to_owned(),
            plan_file: Some("plan.toml".into()),
            run_id: "run-1".into(),
            step_dir: dir.join("steps").join(id),
            step: pipeline.steps[instance.step].clone(),
            reads: Arc::default(),
            plan: Arc::new(loaded.plan),
            instance,
            attempt: 1,
            hashes: Arc::new(Mutex::new(crate::reuse::FileHashCache::load(dir))),
            cancel,
            env: Arc::default(),
            left_by: "run-1".into(),
            note: Arc::new(move |text: &str| heard.lock().expect("notes").push(text.to_owned())),
            units: crate::reuse::UnitStore::open(dir),
            baseline: None,
        };
        (cx, notes)
    }

    /// A quote the ledger priced for `cells`, as estimate would leave it.
    fn accepted(
        ledger: &crate::backend::ledger::Ledger,
        token: &crate::backend::api::Token,
        cells: &[BoughtCell],
    ) -> QuoteRecord {
        let estimate = crate::backend::api::EstimateRequest {
            cells: cells
                .iter()
                .map(|c| Cell::new(&c.persona, &c.controller))
                .collect(),
            modules: Vec::new(),
            run_length: RunLength::Short,
        };
        let priced = ledger.estimate(token, "maze", &estimate).expect("priced");
        QuoteRecord {
            game: "maze".into(),
            quote_id: priced.quote_id,
            estimate_cents: priced.estimate_cents,
            balance_cents: priced.balance_cents,
            expires_at: priced.expires_at,
            run_length: RunLength::Short,
            modules: Vec::new(),
            cells: cells.to_vec(),
        }
    }

    #[test]
    fn a_job_whose_runs_do_not_match_is_left_open_and_finish_does_not_settle_it() {
        use std::sync::Arc;
        let dir = tempfile::tempdir().expect("tempdir");
        let ledger = Arc::new(
            crate::backend::ledger::Ledger::open(&dir.path().join("ledger.sqlite"))
                .expect("ledger"),
        );
        let token = crate::backend::api::Token(crate::backend::ledger::DEMO_TOKEN.into());
        let connection = crate::backend::Connection {
            // The runs `register` answers come in the reverse order: a
            // job that does not match the cells.
            backend: Arc::new(crate::backend::local::Tampered {
                reverse_runs: true,
                ..crate::backend::local::Tampered::new(Arc::clone(&ledger))
            }),
            token: token.clone(),
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let cells = [
            cell("play[kid,standard]", "kid", "standard"),
            cell("play[kid,jev]", "kid", "jev"),
        ];
        let quote = accepted(&ledger, &token, &cells);
        // The register step's own book holds the quote, as if estimate's.
        let io = StepIo::new(
            Arc::new(Memory),
            "register".into(),
            vec![crate::journal::run::Checkpoint {
                attempt: 1,
                data: json!({ money::QUOTE: quote }),
            }],
            Some(connection.clone()),
            Arc::new(Never),
            false,
        );
        let (cx, notes) = context(dir.path(), "register");
        let outcome = runtime.block_on(Register.run(&cx, &io));
        let StepOutcome::Failed { message, .. } = outcome else {
            panic!("a job that does not match fails the step: {outcome:?}");
        };
        assert!(
            message.starts_with("job job-1 was bought (idempotency key ")
                && message.contains("`play[kid,standard]` plays kid/standard, but run run-2")
                && message.contains("left open for reconciliation"),
            "{message}"
        );
        assert!(
            notes.lock().expect("notes").is_empty(),
            "no job was said bought"
        );
        assert_eq!(
            money::job_of(&io),
            None,
            "no job recorded: nothing plays on it"
        );

        // finish, below it, sees no job and says the bought one stays open.
        let book = Arc::clone(&io.book);
        let finish = StepIo::new(
            Arc::new(Memory),
            "finish".into(),
            Vec::new(),
            Some(connection),
            Arc::new(Never),
            false,
        )
        .in_run(
            book,
            std::collections::BTreeMap::from([("register".into(), dir.path().join("r"))]),
        );
        let (cx, notes) = context(dir.path(), "finish");
        let outcome = runtime.block_on(super::super::finish::Finish.run(&cx, &finish));
        assert_eq!(outcome, StepOutcome::Succeeded);
        assert_eq!(
            *notes.lock().expect("notes"),
            vec![
                "nothing settled: job job-1 is left open for reconciliation (its runs did not \
                 match the plan's cells)"
                    .to_owned()
            ]
        );
        let view = ledger.show().expect("view");
        assert_eq!(view.jobs.len(), 1);
        assert_eq!(view.jobs[0].state, "open", "not settled");
    }
}

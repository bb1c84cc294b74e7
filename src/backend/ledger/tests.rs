//! Every money rule, against a real ledger file in a temp dir.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use super::*;
use crate::backend::api::UploadTarget;
use crate::backend::api::{
    AggregateCompleteRequest, Cell, CompleteRequest, EstimateRequest, FileDigest, HeartbeatRequest,
    JobRef, JobView, ManifestEntry, RegisterRequest, Registered, RunLength, RunRef, RunState,
    TransitionRequest, Transitioned, UploadRequest, Uploaded,
};

struct Fixture {
    _dir: tempfile::TempDir,
    ledger: Ledger,
    clock: Arc<AtomicI64>,
    path: PathBuf,
}

const GAME: &str = "maze";

fn demo() -> Token {
    Token(DEMO_TOKEN.to_owned())
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join(".gameplan/ledger.sqlite");
    let clock = Arc::new(AtomicI64::new(1_800_000_000));
    let ledger = Ledger::open(&path)
        .expect("open")
        .with_clock(Clock::Fixed(Arc::clone(&clock)));
    Fixture {
        _dir: dir,
        ledger,
        clock,
        path,
    }
}

fn cells(n: usize) -> Vec<Cell> {
    (0..n)
        .map(|i| Cell {
            persona: format!("p{i}"),
            controller: "standard".to_owned(),
        })
        .collect()
}

fn estimate_request(n: usize) -> EstimateRequest {
    EstimateRequest {
        cells: cells(n),
        modules: Vec::new(),
        run_length: RunLength::Standard,
    }
}

impl Fixture {
    fn balance(&self) -> i64 {
        self.ledger.whoami(&demo()).expect("whoami");
        let view = self.ledger.show().expect("show");
        let demo = view
            .accounts
            .iter()
            .find(|a| a.id == DEMO_ACCOUNT)
            .expect("demo");
        assert!(
            demo.adds_up,
            "balance must equal topups - charged + refunded: {demo:?}"
        );
        demo.balance_cents
    }

    /// A quote and the register body that confirms it.
    fn quote(&self, n: usize) -> RegisterRequest {
        let estimate = self
            .ledger
            .estimate(&demo(), GAME, &estimate_request(n))
            .expect("estimate");
        confirming(estimate, n)
    }

    fn register(&self, key: &str, n: usize) -> Registered {
        let body = self.quote(n);
        self.ledger
            .register(&demo(), GAME, key, &body)
            .expect("register")
    }

    #[expect(
        clippy::unused_self,
        reason = "reads as f.run_ref beside the other helpers"
    )]
    fn run_ref(&self, job: &JobView, i: usize) -> RunRef {
        RunRef {
            game: GAME.to_owned(),
            job: job.id.clone(),
            run: job.runs[i].id.clone(),
        }
    }

    fn move_to(&self, run: &RunRef, to: RunState) -> Result<Transitioned, ApiError> {
        self.ledger
            .transition(&demo(), run, &TransitionRequest { to, reason: None })
    }

    fn walk(&self, run: &RunRef, path: &[RunState]) {
        for to in path {
            self.move_to(run, *to).expect("valid transition");
        }
    }
}

/// The register body that buys the `n` cells `estimate` priced, at its price.
fn confirming(estimate: crate::backend::api::Estimate, n: usize) -> RegisterRequest {
    RegisterRequest {
        quote_id: estimate.quote_id,
        confirm_price_cents: estimate.estimate_cents,
        cells: cells(n),
        modules: Vec::new(),
        run_length: RunLength::Standard,
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

fn job_ref(job: &JobView) -> JobRef {
    JobRef {
        game: GAME.to_owned(),
        job: job.id.clone(),
    }
}

#[test]
fn a_new_ledger_has_the_demo_account_balance_and_an_all_scope_token() {
    let f = fixture();
    let me = f.ledger.whoami(&demo()).expect("whoami");
    assert_eq!(me.user, DEMO_ACCOUNT);
    assert_eq!(me.scopes, SCOPES);
    assert_eq!(f.balance(), DEMO_BALANCE_CENTS);
    // Reopening migrates nothing and seeds nothing twice.
    drop(f.ledger);
    let again = Ledger::open(&f.path).expect("reopen");
    let view = again.show().expect("show");
    assert_eq!(view.accounts.len(), 1);
    assert_eq!(view.accounts[0].balance_cents, DEMO_BALANCE_CENTS);
    assert_eq!(view.tokens.len(), 1);
}

#[test]
fn a_newer_schema_is_refused() {
    let f = fixture();
    drop(f.ledger);
    let conn = Connection::open(&f.path).expect("open");
    conn.execute("UPDATE schema_version SET version = 99", [])
        .expect("bump");
    drop(conn);
    let Err(e) = Ledger::open(&f.path) else {
        panic!("a newer schema opened")
    };
    assert!(e.message.contains("newer than this gameplan knows"), "{e}");
}

#[test]
fn unknown_tokens_and_missing_scopes_are_refused() {
    let f = fixture();
    let e = f.ledger.whoami(&Token("nope".into())).expect_err("unknown");
    assert_eq!((e.status, e.code.as_str()), (401, "unauthorized"));
    let e = f.ledger.whoami(&Token(String::new())).expect_err("empty");
    assert_eq!(e.status, 401);
    let upload_only = f
        .ledger
        .create_token(DEMO_ACCOUNT, &["playtest:upload".to_owned()])
        .expect("token");
    let e = f
        .ledger
        .estimate(&upload_only.token, GAME, &estimate_request(1))
        .expect_err("no write scope");
    assert_eq!((e.status, e.code.as_str()), (403, "missing_scope"));
    assert_eq!(e.details.scope.as_deref(), Some("playtest:write"));
    let write_only = f
        .ledger
        .create_token(DEMO_ACCOUNT, &["playtest:write".to_owned()])
        .expect("token");
    let body = f.quote(1);
    let e = f
        .ledger
        .register(&write_only.token, GAME, "k", &body)
        .expect_err("no model scope");
    assert_eq!(e.details.scope.as_deref(), Some("playtest:model"));
    assert_eq!(f.balance(), DEMO_BALANCE_CENTS);
}

#[test]
fn estimate_prices_cells_by_run_length_with_the_video_add_on_and_a_free_aggregate() {
    let f = fixture();
    let mut request = estimate_request(3);
    request.modules = vec!["video".into()];
    request.run_length = RunLength::Long;
    let quote = f
        .ledger
        .estimate(&demo(), GAME, &request)
        .expect("estimate");
    assert_eq!(quote.estimate_cents, 3 * (100 + 15));
    assert_eq!(quote.balance_cents, DEMO_BALANCE_CENTS);
    assert!(quote.ok);
    let units: Vec<(&str, i64, i64)> = quote
        .breakdown
        .iter()
        .map(|l| (l.unit.as_str(), l.count, l.unit_cents))
        .collect();
    assert_eq!(
        units,
        [
            ("cell (long run)", 3, 100),
            ("video", 3, 15),
            ("aggregate", 1, 0)
        ]
    );
    assert_eq!(quote.expires_at, rfc3339(1_800_000_000 + QUOTE_SECONDS));
    request.modules = vec!["hologram".into()];
    let e = f
        .ledger
        .estimate(&demo(), GAME, &request)
        .expect_err("module");
    assert_eq!(e.code, "invalid_request");
    assert!(
        e.message.contains("hologram") && e.message.contains("video"),
        "{e}"
    );
    let e = f
        .ledger
        .estimate(&demo(), GAME, &estimate_request(0))
        .expect_err("no cells");
    assert_eq!(e.code, "invalid_request");
}

#[test]
fn register_charges_once_and_a_replay_with_the_same_key_and_body_returns_the_stored_job() {
    let f = fixture();
    let body = f.quote(2);
    let first = f
        .ledger
        .register(&demo(), GAME, "key-1", &body)
        .expect("register");
    assert!(!first.replayed);
    assert_eq!(first.job.price_cents, 100);
    assert_eq!(first.job.runs.len(), 2);
    assert!(first.job.runs.iter().all(|r| r.state == RunState::Queued));
    assert_eq!(first.balance_cents, DEMO_BALANCE_CENTS - 100);
    let again = f
        .ledger
        .register(&demo(), GAME, "key-1", &body)
        .expect("replay");
    assert!(again.replayed);
    assert_eq!(again.job, first.job);
    assert_eq!(f.balance(), DEMO_BALANCE_CENTS - 100);
    assert_eq!(f.ledger.show().expect("show").jobs.len(), 1);
}

#[test]
fn the_same_key_with_another_body_is_422_naming_the_fields() {
    let f = fixture();
    let body = f.quote(2);
    f.ledger
        .register(&demo(), GAME, "key-1", &body)
        .expect("register");
    let mut other = f.quote(3);
    other.quote_id.clone_from(&body.quote_id);
    let e = f
        .ledger
        .register(&demo(), GAME, "key-1", &other)
        .expect_err("other body");
    assert_eq!((e.status, e.code.as_str()), (422, "idempotency_mismatch"));
    assert_eq!(e.details.differs, ["cells", "confirm_price_cents"]);
    assert!(e.message.contains("key-1"), "{e}");
    // Another game under the same key is another body too.
    let e = f
        .ledger
        .register(&demo(), "other-game", "key-1", &body)
        .expect_err("other game");
    assert_eq!(e.code, "idempotency_mismatch");
    assert_eq!(f.balance(), DEMO_BALANCE_CENTS - 100);
}

#[test]
fn a_short_balance_is_402_and_charges_nothing() {
    let f = fixture();
    let poor = f
        .ledger
        .create_token("poor", &SCOPES.map(str::to_owned))
        .expect("token");
    assert!(poor.created_account);
    let quote = f
        .ledger
        .estimate(&poor.token, GAME, &estimate_request(1))
        .expect("estimate");
    assert!(!quote.ok);
    let body = confirming(quote, 1);
    let e = f
        .ledger
        .register(&poor.token, GAME, "k", &body)
        .expect_err("poor");
    assert_eq!((e.status, e.code.as_str()), (402, "insufficient_balance"));
    assert_eq!(
        (e.details.price_cents, e.details.balance_cents),
        (Some(50), Some(0))
    );
    assert!(e.message.contains("gameplan ledger topup poor"), "{e}");
    f.ledger.topup("poor", 50).expect("topup");
    let ok = f
        .ledger
        .register(&poor.token, GAME, "k", &body)
        .expect("now");
    assert_eq!(ok.balance_cents, 0);
    assert!(f.ledger.show().expect("show").jobs[0].account == "poor");
}

#[test]
fn a_confirmed_price_other_than_the_quote_is_409_price_changed() {
    let f = fixture();
    let mut body = f.quote(2);
    body.confirm_price_cents -= 1;
    let e = f
        .ledger
        .register(&demo(), GAME, "k", &body)
        .expect_err("price");
    assert_eq!((e.status, e.code.as_str()), (409, "price_changed"));
    assert_eq!(e.details.price_cents, Some(100));
    // The quote priced 2 cells; registering 3 under it is a price change too.
    let mut more = f.quote(2);
    more.cells = cells(3);
    let e = f
        .ledger
        .register(&demo(), GAME, "k", &more)
        .expect_err("cells");
    assert_eq!(e.code, "price_changed");
    assert_eq!(f.balance(), DEMO_BALANCE_CENTS);
    assert!(f.ledger.show().expect("show").jobs.is_empty());
}

#[test]
fn a_price_list_that_moved_since_the_quote_is_409_price_changed() {
    let f = fixture();
    let body = f.quote(1);
    let mut dearer = DEMO_PRICES;
    dearer.cell_cents[1].1 = 60;
    let ledger = Ledger::open(&f.path)
        .expect("open")
        .with_prices(dearer)
        .with_clock(Clock::Fixed(Arc::clone(&f.clock)));
    let e = ledger
        .register(&demo(), GAME, "k", &body)
        .expect_err("moved");
    assert_eq!(e.code, "price_changed");
    assert!(e.message.contains("50 cents then, 60 now"), "{e}");
}

#[test]
fn an_expired_quote_is_409_but_a_replay_after_expiry_still_returns_the_job() {
    let f = fixture();
    let body = f.quote(1);
    f.clock.fetch_add(QUOTE_SECONDS, Ordering::SeqCst);
    let first = f
        .ledger
        .register(&demo(), GAME, "k1", &body)
        .expect("at the edge");
    f.clock.fetch_add(1, Ordering::SeqCst);
    let late = f.quote(1);
    f.clock.fetch_add(QUOTE_SECONDS + 1, Ordering::SeqCst);
    let e = f
        .ledger
        .register(&demo(), GAME, "k2", &late)
        .expect_err("expired");
    assert_eq!((e.status, e.code.as_str()), (409, "quote_expired"));
    let again = f
        .ledger
        .register(&demo(), GAME, "k1", &body)
        .expect("replay");
    assert!(again.replayed);
    assert_eq!(again.job.id, first.job.id);
    assert_eq!(f.balance(), DEMO_BALANCE_CENTS - 50);
}

#[test]
fn a_made_up_altered_or_foreign_quote_id_is_422_quote_invalid_and_charges_nothing() {
    let f = fixture();
    let body = f.quote(1);
    let refused = |ledger: &Ledger, token: &Token, body: &RegisterRequest, key: &str| {
        let e = ledger
            .register(token, GAME, key, body)
            .expect_err("not a valid quote");
        assert_eq!((e.status, e.code.as_str()), (422, "quote_invalid"), "{e}");
        assert!(e.message.contains("estimate again"), "{e}");
        e
    };
    let mut made_up = body.clone();
    made_up.quote_id = "quote-1".into();
    let e = refused(&f.ledger, &demo(), &made_up, "k1");
    assert!(e.message.contains("`quote-1` is not a quote id"), "{e}");
    // A cheaper price or a later expiry written into the id: the MAC fails.
    let claim = quotes::parse(&body.quote_id).expect("a quote id");
    let mut cheaper = body.clone();
    cheaper.quote_id = body.quote_id.replacen(
        &format!(".{}.", claim.price_cents),
        &format!(".{}.", claim.price_cents - 1),
        1,
    );
    cheaper.confirm_price_cents -= 1;
    let e = refused(&f.ledger, &demo(), &cheaper, "k2");
    assert!(e.message.contains("was altered"), "{e}");
    let mut later = body.clone();
    later.quote_id = body.quote_id.replacen(
        &claim.expires_at.to_string(),
        &(claim.expires_at + 3600).to_string(),
        1,
    );
    refused(&f.ledger, &demo(), &later, "k3");
    // Another account's quote, and a quote of another ledger file.
    let stranger = f
        .ledger
        .create_token("stranger", &SCOPES.map(str::to_owned))
        .expect("token");
    f.ledger.topup("stranger", 1_000).expect("topup");
    refused(&f.ledger, &stranger.token, &body, "k4");
    let other_dir = tempfile::tempdir().expect("temp dir");
    let other = Ledger::open(&other_dir.path().join("ledger.sqlite")).expect("open");
    refused(&other, &demo(), &body, "k5");
    // The real id still buys, once.
    f.ledger
        .register(&demo(), GAME, "k6", &body)
        .expect("register");
    assert_eq!(f.balance(), DEMO_BALANCE_CENTS - 50);
    assert_eq!(f.ledger.show().expect("show").jobs.len(), 1);
}

#[test]
fn an_unknown_or_foreign_job_is_404() {
    let f = fixture();
    let job = f.register("k", 1).job;
    let stranger = f
        .ledger
        .create_token("stranger", &SCOPES.map(str::to_owned))
        .expect("token");
    let e = f
        .ledger
        .get_job(&stranger.token, &job_ref(&job))
        .expect_err("foreign");
    assert_eq!((e.status, e.code.as_str()), (404, "not_found"));
    let e = f
        .ledger
        .finish(&stranger.token, &job_ref(&job))
        .expect_err("foreign finish");
    assert_eq!(e.status, 404);
    let other_game = JobRef {
        game: "other".into(),
        job: job.id.clone(),
    };
    assert_eq!(
        f.ledger
            .get_job(&demo(), &other_game)
            .expect_err("game")
            .status,
        404
    );
    let bad = JobRef {
        game: GAME.into(),
        job: "job-x".into(),
    };
    assert_eq!(f.ledger.get_job(&demo(), &bad).expect_err("id").status, 404);
}

#[test]
fn too_many_active_jobs_is_409() {
    let f = fixture();
    for i in 0..MAX_OPEN_JOBS {
        f.register(&format!("k{i}"), 1);
    }
    let body = f.quote(1);
    let e = f
        .ledger
        .register(&demo(), GAME, "one-more", &body)
        .expect_err("cap");
    assert_eq!((e.status, e.code.as_str()), (409, "too_many_active_jobs"));
    assert_eq!(e.details.quota.as_deref(), Some("open_jobs"), "{e}");
    assert_eq!(
        (e.details.used, e.details.limit),
        (Some(20), Some(20)),
        "{e}"
    );
    assert!(e.message.contains("--max-open-jobs"), "{e}");
}

/// The run state machine of [`RunState`]'s doc comment, written out as its
/// edges.
fn design_edges() -> Vec<(RunState, RunState)> {
    use RunState::*;
    let mut edges = vec![
        (Queued, Launching),
        (Launching, Playing),
        (Playing, Reporting),
        (Reporting, Uploading),
        (Uploading, Succeeded),
        (Playing, Interrupted),
        (Interrupted, Launching),
    ];
    for from in [
        Queued,
        Launching,
        Playing,
        Interrupted,
        Reporting,
        Uploading,
    ] {
        for to in [Failed, Canceled, BudgetExceeded] {
            edges.push((from, to));
        }
    }
    edges
}

/// The transitions that put a fresh run into `state`.
fn path_to(state: RunState) -> Vec<RunState> {
    use RunState::*;
    match state {
        Queued => vec![],
        Launching => vec![Launching],
        Playing => vec![Launching, Playing],
        Interrupted => vec![Launching, Playing, Interrupted],
        Reporting => vec![Launching, Playing, Reporting],
        Uploading => vec![Launching, Playing, Reporting, Uploading],
        Succeeded => vec![Launching, Playing, Reporting, Uploading, Succeeded],
        Failed | Canceled | BudgetExceeded => vec![state],
    }
}

#[test]
fn every_valid_transition_passes_and_every_other_is_409() {
    let f = fixture();
    let edges = design_edges();
    let pairs: Vec<(RunState, RunState)> = RunState::ALL
        .into_iter()
        .flat_map(|from| RunState::ALL.into_iter().map(move |to| (from, to)))
        .filter(|(from, to)| from != to)
        .collect();
    f.ledger.topup(DEMO_ACCOUNT, 1_000_000).expect("topup");
    for (i, chunk) in pairs.chunks(10).enumerate() {
        let job = f.register(&format!("sm{i}"), chunk.len()).job;
        for (n, (from, to)) in chunk.iter().enumerate() {
            let run = f.run_ref(&job, n);
            f.walk(&run, &path_to(*from));
            let answer = f.move_to(&run, *to);
            if edges.contains(&(*from, *to)) {
                let moved = answer.unwrap_or_else(|e| panic!("{from} → {to} refused: {e}"));
                assert!(moved.changed);
                assert_eq!(moved.run.state, *to);
            } else {
                let e = answer.expect_err(&format!("{from} → {to} allowed"));
                assert_eq!(
                    (e.status, e.code.as_str()),
                    (409, "invalid_transition"),
                    "{from} → {to}"
                );
                assert!(e.message.contains(from.as_str()), "{e}");
            }
        }
        // Finish each job, so the active-job cap never bites.
        f.ledger.finish(&demo(), &job_ref(&job)).expect("finish");
    }
}

#[test]
fn a_transition_to_the_current_state_is_answered_unchanged() {
    let f = fixture();
    let job = f.register("k", 1).job;
    let run = f.run_ref(&job, 0);
    f.walk(&run, &[RunState::Launching]);
    let again = f.move_to(&run, RunState::Launching).expect("retry");
    assert!(!again.changed);
    assert_eq!(again.run.state, RunState::Launching);
}

#[test]
fn reasons_are_refused_on_success_and_over_400_characters() {
    let f = fixture();
    let job = f.register("k", 1).job;
    let run = f.run_ref(&job, 0);
    let long = TransitionRequest {
        to: RunState::Failed,
        reason: Some("x".repeat(401)),
    };
    assert_eq!(
        f.ledger
            .transition(&demo(), &run, &long)
            .expect_err("long")
            .code,
        "invalid_request"
    );
    let ok = TransitionRequest {
        to: RunState::Failed,
        reason: Some("é".repeat(400)),
    };
    let failed = f.ledger.transition(&demo(), &run, &ok).expect("400 chars");
    assert_eq!(failed.run.reason.as_deref().map(str::len), Some(800));
}

#[test]
fn heartbeats_record_progress_and_ask_to_stop_over_the_allowance_or_after_finish() {
    let f = fixture();
    let job = f.register("k", 2).job;
    let run = f.run_ref(&job, 0);
    f.walk(&run, &[RunState::Launching, RunState::Playing]);
    let beat = |n: i64| {
        f.ledger
            .heartbeat(
                &demo(),
                &run,
                &HeartbeatRequest {
                    actions_taken: n,
                    checkpoint_step: Some(n),
                },
            )
            .expect("heartbeat")
    };
    let first = beat(10);
    assert_eq!(
        (first.usage.actions_taken, first.usage.max_actions),
        (10, 300)
    );
    assert!(!first.cancel_requested);
    // A late retry does not move progress back.
    assert_eq!(beat(5).usage.actions_taken, 10);
    assert!(beat(300).cancel_requested);
    let other = f.run_ref(&job, 1);
    f.ledger.finish(&demo(), &job_ref(&job)).expect("finish");
    let after = f
        .ledger
        .heartbeat(
            &demo(),
            &other,
            &HeartbeatRequest {
                actions_taken: 1,
                checkpoint_step: None,
            },
        )
        .expect("heartbeat");
    assert!(after.cancel_requested);
}

fn upload(
    f: &Fixture,
    target: &UploadTarget,
    name: &str,
    body: &[u8],
) -> Result<Uploaded, ApiError> {
    f.ledger.upload(
        &demo(),
        target,
        &UploadRequest {
            name: name.to_owned(),
            sha256: sha256_hex(body),
            body: body.to_vec(),
        },
    )
}

fn entry_for(name: &str, body: &[u8]) -> ManifestEntry {
    ManifestEntry {
        path: name.to_owned(),
        size: i64::try_from(body.len()).expect("size"),
        sha256: sha256_hex(body),
    }
}

fn complete_request(manifest: Vec<ManifestEntry>) -> CompleteRequest {
    CompleteRequest {
        state: RunState::Succeeded,
        reason: None,
        actions_taken: 12,
        quit_reason: Some("done".into()),
        report: serde_json::json!({"findings": []}),
        report_md: "# report\n".into(),
        manifest,
    }
}

#[test]
fn an_upload_whose_body_is_not_its_sha256_is_422() {
    let f = fixture();
    let job = f.register("k", 1).job;
    let target = UploadTarget::Run(f.run_ref(&job, 0));
    let e = f
        .ledger
        .upload(
            &demo(),
            &target,
            &UploadRequest {
                name: "report.md".into(),
                sha256: sha256_hex(b"other"),
                body: b"body".to_vec(),
            },
        )
        .expect_err("digest");
    assert_eq!((e.status, e.code.as_str()), (422, "digest_mismatch"));
    assert_eq!(
        upload(&f, &target, "../x", b"a").expect_err("name").code,
        "invalid_request"
    );
    let stored = upload(&f, &target, "report.md", b"body").expect("upload");
    assert_eq!((stored.size, stored.sha256), (4, sha256_hex(b"body")));
}

#[test]
fn complete_verifies_the_manifest_both_ways() {
    let f = fixture();
    let job = f.register("k", 1).job;
    let run = f.run_ref(&job, 0);
    f.walk(
        &run,
        &[
            RunState::Launching,
            RunState::Playing,
            RunState::Reporting,
            RunState::Uploading,
        ],
    );
    let target = UploadTarget::Run(run.clone());
    upload(&f, &target, "report.md", b"# report").expect("upload");
    upload(&f, &target, "trace.jsonl", b"{}\n").expect("upload");
    // What the cell played, as its manifest says; what was uploaded differs.
    let manifest = vec![
        entry_for("report.md", b"# report"),
        entry_for("trace.jsonl", b"{}\n{}\n"),
        entry_for("transcript.jsonl", b"[]"),
    ];
    let complete = |manifest: Vec<ManifestEntry>| {
        f.ledger
            .complete(&demo(), &run, &complete_request(manifest))
    };
    let e = complete(manifest.clone()).expect_err("unverified");
    assert_eq!((e.status, e.code.as_str()), (422, "upload_unverified"));
    assert_eq!(e.details.missing, ["trace.jsonl", "transcript.jsonl"]);
    assert!(
        e.message
            .contains("trace.jsonl (uploaded 3 bytes, the manifest says 6)"),
        "{e}"
    );
    assert!(e.message.contains("transcript.jsonl (not uploaded)"), "{e}");
    assert_eq!(
        f.ledger.get_run(&demo(), &run).expect("run").state,
        RunState::Uploading
    );
    // Same size, other bytes: named by sha256.
    upload(&f, &target, "trace.jsonl", b"{}\n{]\n").expect("upload");
    upload(&f, &target, "transcript.jsonl", b"[]").expect("upload");
    let e = complete(vec![entry_for("trace.jsonl", b"{}\n{}\n")]).expect_err("sha");
    assert!(e.message.contains("uploaded sha256"), "{e}");
    // The repair pass: upload what was missing, complete again.
    upload(&f, &target, "trace.jsonl", b"{}\n{}\n").expect("upload");
    let done = complete(manifest.clone()).expect("complete");
    assert!(done.changed);
    assert_eq!(
        (done.run.state, done.run.actions_taken),
        (RunState::Succeeded, 12)
    );
    let again = complete(manifest).expect("replayed complete");
    assert!(!again.changed);
}

#[test]
fn complete_follows_the_state_machine_and_its_reason_rules() {
    let f = fixture();
    let job = f.register("k", 1).job;
    let run = f.run_ref(&job, 0);
    let e = f
        .ledger
        .complete(&demo(), &run, &complete_request(Vec::new()))
        .expect_err("queued → succeeded");
    assert_eq!(e.code, "invalid_transition");
    let mut with_reason = complete_request(Vec::new());
    with_reason.reason = Some("fine".into());
    assert_eq!(
        f.ledger
            .complete(&demo(), &run, &with_reason)
            .expect_err("reason")
            .code,
        "invalid_request"
    );
    let mut failed = complete_request(Vec::new());
    failed.state = RunState::Failed;
    failed.reason = Some("the game crashed".into());
    let done = f.ledger.complete(&demo(), &run, &failed).expect("failed");
    assert_eq!(done.run.reason.as_deref(), Some("the game crashed"));
    let mut open = complete_request(Vec::new());
    open.state = RunState::Playing;
    assert_eq!(
        f.ledger
            .complete(&demo(), &run, &open)
            .expect_err("not final")
            .code,
        "invalid_request"
    );
}

#[test]
fn aggregate_complete_is_verified_by_size_and_sha256_and_free() {
    let f = fixture();
    let job = f.register("k", 1).job;
    let target = UploadTarget::Job(job_ref(&job));
    let digest = |b: &[u8]| FileDigest {
        size: i64::try_from(b.len()).expect("size"),
        sha256: sha256_hex(b),
    };
    let request = AggregateCompleteRequest {
        md: digest(b"# aggregate"),
        json: digest(b"{}"),
    };
    upload(&f, &target, "aggregate.md", b"# aggregate").expect("upload");
    let e = f
        .ledger
        .aggregate_complete(&demo(), &job_ref(&job), &request)
        .expect_err("json missing");
    assert_eq!(e.details.missing, ["aggregate.json"]);
    upload(&f, &target, "aggregate.json", b"{ }").expect("upload");
    let e = f
        .ledger
        .aggregate_complete(&demo(), &job_ref(&job), &request)
        .expect_err("json size");
    assert_eq!(e.details.missing, ["aggregate.json"]);
    upload(&f, &target, "aggregate.json", b"{}").expect("upload");
    let before = f.balance();
    let published = f
        .ledger
        .aggregate_complete(&demo(), &job_ref(&job), &request)
        .expect("publish");
    assert!(published.changed);
    assert!(
        f.ledger
            .get_job(&demo(), &job_ref(&job))
            .expect("job")
            .aggregate_published
    );
    let again = f
        .ledger
        .aggregate_complete(&demo(), &job_ref(&job), &request)
        .expect("again");
    assert!(!again.changed);
    assert_eq!(f.balance(), before);
}

#[test]
fn finish_settles_once_refunding_the_runs_that_never_played() {
    let f = fixture();
    let job = f.register("k", 4).job;
    // Run 0 succeeds, run 1 plays and fails, run 2 fails while launching, run 3 stays queued.
    let r = |i| f.run_ref(&job, i);
    f.walk(
        &r(0),
        &[
            RunState::Launching,
            RunState::Playing,
            RunState::Reporting,
            RunState::Uploading,
            RunState::Succeeded,
        ],
    );
    f.walk(
        &r(1),
        &[RunState::Launching, RunState::Playing, RunState::Failed],
    );
    f.walk(&r(2), &[RunState::Launching, RunState::Failed]);
    assert_eq!(f.balance(), DEMO_BALANCE_CENTS - 200);
    let finished = f.ledger.finish(&demo(), &job_ref(&job)).expect("finish");
    assert!(!finished.replayed);
    let s = &finished.settlement;
    assert_eq!(
        (s.charged_cents, s.refunded_cents, s.net_cents),
        (200, 100, 100)
    );
    assert_eq!(
        s.refunded_runs,
        [job.runs[2].id.clone(), job.runs[3].id.clone()]
    );
    assert_eq!(finished.balance_cents, DEMO_BALANCE_CENTS - 100);
    let view = f.ledger.get_job(&demo(), &job_ref(&job)).expect("job");
    assert_eq!(view.state, "settled");
    assert_eq!(view.runs[3].state, RunState::Canceled);
    assert_eq!(view.refunded_cents, 100);
    let again = f
        .ledger
        .finish(&demo(), &job_ref(&job))
        .expect("finish again");
    assert!(again.replayed);
    assert_eq!(again.settlement, finished.settlement);
    assert_eq!(f.balance(), DEMO_BALANCE_CENTS - 100);
    // A settled job's runs do not move any more.
    assert_eq!(
        f.move_to(&r(3), RunState::Launching)
            .expect_err("settled")
            .code,
        "invalid_transition"
    );
    let shown = f.ledger.show().expect("show");
    assert_eq!(shown.jobs[0].settlements.len(), 1);
}

#[test]
fn the_balance_adds_up_through_topups_charges_and_refunds() {
    let f = fixture();
    f.ledger.topup(DEMO_ACCOUNT, 250).expect("topup");
    let a = f.register("a", 3).job;
    let b = f.register("b", 2).job;
    f.walk(&f.run_ref(&a, 0), &[RunState::Launching, RunState::Playing]);
    f.ledger.finish(&demo(), &job_ref(&a)).expect("finish a");
    f.ledger.finish(&demo(), &job_ref(&b)).expect("finish b");
    let view = f.ledger.show().expect("show");
    let account = &view.accounts[0];
    assert_eq!(account.topups_cents, DEMO_BALANCE_CENTS + 250);
    assert_eq!(account.charged_cents, 150 + 100);
    assert_eq!(account.refunded_cents, 100 + 100);
    assert_eq!(account.balance_cents, DEMO_BALANCE_CENTS + 250 - 250 + 200);
    assert!(account.adds_up);
    let e = f.ledger.topup(DEMO_ACCOUNT, -5).expect_err("negative");
    assert_eq!(e.code, "invalid_request");
    let e = f.ledger.topup("nobody", 5).expect_err("unknown");
    assert_eq!(e.code, "not_found");
    assert!(e.message.contains("demo"), "{e}");
}

#[test]
fn tokens_are_stored_as_their_sha256_only() {
    let f = fixture();
    let new = f
        .ledger
        .create_token(DEMO_ACCOUNT, &["playtest:write".to_owned()])
        .expect("token");
    assert!(new.token.0.starts_with("gp_") && new.token.0.len() == 67);
    assert_eq!(
        f.ledger.whoami(&new.token).expect("whoami").scopes,
        ["playtest:write"]
    );
    let e = f
        .ledger
        .create_token(DEMO_ACCOUNT, &["playtest:admin".to_owned()])
        .expect_err("scope");
    assert!(e.message.contains("unknown scope `playtest:admin`"), "{e}");
    drop(f.ledger);
    let mut bytes = std::fs::read(&f.path).expect("db");
    if let Ok(wal) = std::fs::read(f.path.with_extension("sqlite-wal")) {
        bytes.extend(wal);
    }
    let has = |needle: &str| bytes.windows(needle.len()).any(|w| w == needle.as_bytes());
    assert!(!has(&new.token.0), "the token itself is in the ledger file");
    assert!(!has(DEMO_TOKEN));
    assert!(has(&sha256_hex(new.token.0.as_bytes())));
}

#[test]
fn fifty_concurrent_registers_with_one_key_charge_once() {
    let f = fixture();
    let body = f.quote(2);
    let path = f.path.clone();
    let barrier = Arc::new(std::sync::Barrier::new(50));
    let threads: Vec<_> = (0..50)
        .map(|_| {
            let (path, body, barrier) = (path.clone(), body.clone(), Arc::clone(&barrier));
            std::thread::spawn(move || {
                // Each its own connection to the same file, as separate processes would.
                let ledger = Ledger::open(&path).expect("open");
                barrier.wait();
                ledger.register(&demo(), GAME, "one-key", &body)
            })
        })
        .collect();
    let answers: Vec<Result<Registered, ApiError>> = threads
        .into_iter()
        .map(|t| t.join().expect("thread"))
        .collect();
    let fresh = answers
        .iter()
        .filter(|a| matches!(a, Ok(r) if !r.replayed))
        .count();
    let replayed = answers
        .iter()
        .filter(|a| matches!(a, Ok(r) if r.replayed))
        .count();
    let in_progress = answers
        .iter()
        .filter(|a| matches!(a, Err(e) if e.status == 409 && e.code == "charge_in_progress"))
        .count();
    assert_eq!(fresh, 1, "exactly one register bought the job");
    assert_eq!(fresh + replayed + in_progress, 50, "{answers:?}");
    let view = f.ledger.show().expect("show");
    assert_eq!(view.jobs.len(), 1);
    assert_eq!(view.accounts[0].charged_cents, 100);
    assert_eq!(view.accounts[0].balance_cents, DEMO_BALANCE_CENTS - 100);
    assert!(view.accounts[0].adds_up);
}

#[test]
fn a_register_that_finds_the_ledger_locked_is_409_charge_in_progress_and_charges_nothing() {
    let f = fixture();
    let body = f.quote(1);
    // Another writer (a register with the same key, say) holds the file.
    let holder = Connection::open(&f.path).expect("open");
    holder.execute_batch("BEGIN IMMEDIATE").expect("lock");
    let waiting = Ledger::open(&f.path)
        .expect("open")
        .with_busy_timeout(Duration::from_millis(50))
        .expect("timeout");
    let e = waiting
        .register(&demo(), GAME, "k", &body)
        .expect_err("locked");
    assert_eq!((e.status, e.code.as_str()), (409, "charge_in_progress"));
    assert!(e.message.contains("same Idempotency-Key"), "{e}");
    // Other calls say the ledger is busy, not that a charge is under way.
    let e = waiting.topup(DEMO_ACCOUNT, 1).expect_err("locked");
    assert_eq!((e.status, e.code.as_str()), (503, "ledger_unavailable"));
    holder.execute_batch("COMMIT").expect("unlock");
    assert!(
        !waiting
            .register(&demo(), GAME, "k", &body)
            .expect("now")
            .replayed
    );
    assert_eq!(f.balance(), DEMO_BALANCE_CENTS - 50);
}

#[test]
fn the_local_backend_answers_through_the_trait() {
    use crate::backend::Backend as _;
    let f = fixture();
    let backend = crate::backend::local::LocalBackend::new(Arc::new(f.ledger));
    let runtime = runtime();
    runtime.block_on(async {
        assert_eq!(backend.name(), "local");
        let me = backend.whoami(&demo()).await.expect("whoami");
        assert_eq!(me.user, DEMO_ACCOUNT);
        let quote = backend
            .estimate(&demo(), GAME, &estimate_request(1))
            .await
            .expect("estimate");
        let body = confirming(quote, 1);
        let job = backend
            .register(&demo(), GAME, "k", &body)
            .await
            .expect("register");
        let finished = backend
            .finish(&demo(), &job_ref(&job.job))
            .await
            .expect("finish");
        assert_eq!(finished.settlement.refunded_cents, 50);
        let e = backend.whoami(&Token("x".into())).await.expect_err("401");
        assert_eq!(e.status, 401);
    });
}

#[test]
fn the_error_body_is_code_message_and_its_details() {
    let e = ApiError::missing_scope("playtest:model");
    let body = serde_json::to_value(&e).expect("json");
    assert_eq!(
        body,
        serde_json::json!({
            "code": "missing_scope",
            "message": e.message,
            "scope": "playtest:model",
        })
    );
    let back: ApiError = serde_json::from_value(body).expect("parse");
    assert_eq!(back.details.scope.as_deref(), Some("playtest:model"));
}

#[test]
fn the_local_backend_passes_the_conformance_suite() {
    let f = fixture();
    let backend = crate::backend::local::LocalBackend::new(Arc::new(f.ledger));
    let runtime = runtime();
    runtime.block_on(crate::backend::conformance::one_job(
        &backend,
        &demo(),
        "conformance-key",
    ));
    let view = backend.ledger().show().expect("show");
    assert_eq!(view.jobs.len(), 1);
    assert_eq!(view.accounts[0].balance_cents, DEMO_BALANCE_CENTS - 50);
    assert!(view.accounts[0].adds_up);
}

#[test]
fn whoami_and_estimate_append_nothing_to_the_wal_and_change_no_row() {
    let f = fixture();
    f.register("k", 1);
    let wal = f.path.with_extension("sqlite-wal");
    let wal_before = std::fs::read(&wal).expect("the WAL of an open ledger");
    let changes_before = f.ledger.writer.lock().expect("conn").total_changes();
    f.ledger.whoami(&demo()).expect("whoami");
    let quote = f
        .ledger
        .estimate(&demo(), GAME, &estimate_request(3))
        .expect("estimate");
    f.ledger
        .estimate(&Token("gp_nobody".into()), GAME, &estimate_request(3))
        .expect_err("unknown token");
    assert_eq!(
        f.ledger.writer.lock().expect("conn").total_changes(),
        changes_before,
        "no row changed"
    );
    assert!(
        std::fs::read(&wal).expect("wal") == wal_before,
        "no frame was appended to the WAL"
    );
    // The quote still buys: it lives in its id alone.
    let body = confirming(quote, 3);
    f.ledger
        .register(&demo(), GAME, "k2", &body)
        .expect("register");
}

#[test]
fn a_version_1_ledger_is_migrated_to_signed_quotes_keeping_its_jobs() {
    let f = fixture();
    let job = f.register("k", 1).job;
    drop(f.ledger);
    // Back to version 1 by hand: a quotes table and no meta.
    let conn = Connection::open(&f.path).expect("open");
    conn.execute_batch(
        "DROP TABLE meta;
         DROP TABLE hosted;
         DROP TABLE builds;
         DROP INDEX runs_of_job;
         ALTER TABLE tokens DROP COLUMN revoked_at;
         ALTER TABLE runs DROP COLUMN completed_at;
         CREATE TABLE quotes (id INTEGER PRIMARY KEY, account TEXT NOT NULL, game TEXT NOT NULL,
             cells_sha256 TEXT NOT NULL, price_cents INTEGER NOT NULL, expires_at INTEGER NOT NULL);
         UPDATE schema_version SET version = 1;",
    )
    .expect("downgrade");
    drop(conn);
    let ledger = Ledger::open(&f.path)
        .expect("migrated")
        .with_clock(Clock::Fixed(Arc::clone(&f.clock)));
    let conn = ledger.writer.lock().expect("conn");
    let version: i64 = conn
        .query_row("SELECT version FROM schema_version", [], |r| r.get(0))
        .expect("version");
    assert_eq!(version, schema::VERSION);
    let tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .and_then(|mut s| s.query_map([], |r| r.get(0))?.collect())
        .expect("tables");
    assert!(!tables.iter().any(|t| t == "quotes"), "{tables:?}");
    assert_eq!(ledger.quote_secret.len(), 64);
    drop(conn);
    let view = ledger.show().expect("show");
    assert_eq!(view.jobs.len(), 1);
    assert_eq!(view.jobs[0].id, job.id);
    let quote = ledger
        .estimate(&demo(), GAME, &estimate_request(1))
        .expect("estimate");
    let body = confirming(quote, 1);
    ledger
        .register(&demo(), GAME, "k2", &body)
        .expect("a signed quote buys");
}

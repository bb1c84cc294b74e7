//! The conformance suite: one paid job walked through every call of the
//! API (docs/serve.md › The API) against any [`Backend`], asserting the
//! answers (codes, states, money) that every backend must give alike.
//!
//! One source, three runs: against `local` (the ledger's tests), against
//! the routes served in-process (the `http` backend's tests), and against
//! the real `gameplan serve` binary on loopback through the `http` backend
//! (`tests/integration/serve/api.rs` compiles this very file with
//! `#[path]`, since a `cfg(test)` module of the library cannot be called
//! from an integration test). So it names only what both crates see: the
//! public `api`, `Backend` and `UploadTarget` of its parent module, and its
//! own sha256.

use super::api::{
    AggregateCompleteRequest, ApiError, Cell, CompleteRequest, EstimateRequest, FileDigest,
    HeartbeatRequest, JobRef, ManifestEntry, RegisterRequest, RunLength, RunRef, RunState, SCOPES,
    Token, TransitionRequest, UploadRequest,
};
use super::{Backend, UploadTarget};

const GAME: &str = "conformance-game";

#[track_caller]
fn refused<T: std::fmt::Debug>(answer: Result<T, ApiError>, status: u16, code: &str) -> ApiError {
    match answer {
        Ok(value) => panic!("expected {status} {code}, got {value:?}"),
        Err(e) => {
            assert_eq!((e.status, e.code.as_str()), (status, code), "{e}");
            e
        }
    }
}

/// Lowercase hex sha256 (the ledger's own helper is private to the library).
fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(bytes)
        .iter()
        .fold(String::with_capacity(64), |mut hex, b| {
            use std::fmt::Write as _;
            let _ = write!(hex, "{b:02x}");
            hex
        })
}

fn upload_request(name: &str, body: &[u8]) -> UploadRequest {
    UploadRequest {
        name: name.to_owned(),
        sha256: sha256_hex(body),
        body: body.to_vec(),
    }
}

fn manifest_entry(name: &str, body: &[u8]) -> ManifestEntry {
    ManifestEntry {
        path: name.to_owned(),
        size: i64::try_from(body.len()).unwrap_or(i64::MAX),
        sha256: sha256_hex(body),
    }
}

/// Walks one job of three cells through `backend` as `token` (an account
/// holding every scope and at least $1.50), with `key` unused before.
#[expect(
    clippy::too_many_lines,
    reason = "one story, call by call, reads best in order"
)]
pub async fn one_job(backend: &dyn Backend, token: &Token, key: &str) {
    let me = backend.whoami(token).await.expect("whoami");
    assert_eq!(me.scopes, SCOPES);
    refused(
        backend.whoami(&Token("gp_unknown".into())).await,
        401,
        "unauthorized",
    );

    let cells: Vec<Cell> = ["kid", "veteran", "speedrunner"]
        .iter()
        .map(|p| Cell {
            persona: (*p).to_owned(),
            controller: "standard".to_owned(),
        })
        .collect();
    let estimate_request = EstimateRequest {
        cells: cells.clone(),
        modules: Vec::new(),
        run_length: RunLength::Standard,
    };
    let quote = backend
        .estimate(token, GAME, &estimate_request)
        .await
        .expect("estimate");
    assert_eq!(quote.estimate_cents, 150);
    let before = quote.balance_cents;
    let mut body = RegisterRequest {
        quote_id: quote.quote_id.clone(),
        confirm_price_cents: 149,
        cells,
        modules: Vec::new(),
        run_length: RunLength::Standard,
    };
    refused(
        backend.register(token, GAME, key, &body).await,
        409,
        "price_changed",
    );
    // A quote id is the backend's word: a made-up one buys nothing.
    let forged = RegisterRequest {
        quote_id: "quote-1".to_owned(),
        confirm_price_cents: 150,
        ..body.clone()
    };
    refused(
        backend
            .register(token, GAME, "conformance-forged", &forged)
            .await,
        422,
        "quote_invalid",
    );
    body.confirm_price_cents = 150;
    let registered = backend
        .register(token, GAME, key, &body)
        .await
        .expect("register");
    assert!(!registered.replayed);
    assert_eq!(registered.balance_cents, before - 150);
    let job = registered.job;
    assert_eq!(job.runs.len(), 3);
    let replay = backend
        .register(token, GAME, key, &body)
        .await
        .expect("replay");
    assert!(replay.replayed);
    assert_eq!(replay.job.id, job.id);
    let mut other = body.clone();
    other.run_length = RunLength::Long;
    let e = refused(
        backend.register(token, GAME, key, &other).await,
        422,
        "idempotency_mismatch",
    );
    assert_eq!(e.details.differs, ["run_length"]);

    let job_ref = JobRef {
        game: GAME.to_owned(),
        job: job.id.clone(),
    };
    let run = |i: usize| RunRef {
        game: GAME.to_owned(),
        job: job.id.clone(),
        run: job.runs[i].id.clone(),
    };
    let go = |to| TransitionRequest { to, reason: None };

    // Run 0 plays, uploads and succeeds after one repair pass.
    for to in [RunState::Launching, RunState::Playing] {
        backend
            .transition(token, &run(0), &go(to))
            .await
            .expect("transition");
    }
    let beat = backend
        .heartbeat(
            token,
            &run(0),
            &HeartbeatRequest {
                actions_taken: 7,
                checkpoint_step: Some(7),
            },
        )
        .await
        .expect("heartbeat");
    assert_eq!(beat.usage.actions_taken, 7);
    assert!(!beat.cancel_requested);
    for to in [RunState::Reporting, RunState::Uploading] {
        backend
            .transition(token, &run(0), &go(to))
            .await
            .expect("transition");
    }
    let target = UploadTarget::Run(run(0));
    backend
        .upload(token, &target, &upload_request("report.md", b"# kid"))
        .await
        .expect("upload");
    let mut damaged = upload_request("trace.jsonl", b"{}\n");
    damaged.sha256 = sha256_hex(b"other");
    refused(
        backend.upload(token, &target, &damaged).await,
        422,
        "digest_mismatch",
    );
    let complete = CompleteRequest {
        state: RunState::Succeeded,
        reason: None,
        actions_taken: 7,
        quit_reason: Some("done".to_owned()),
        report: serde_json::json!({"findings": []}),
        report_md: "# kid".to_owned(),
        manifest: vec![
            manifest_entry("report.md", b"# kid"),
            manifest_entry("trace.jsonl", b"{}\n"),
        ],
    };
    let e = refused(
        backend.complete(token, &run(0), &complete).await,
        422,
        "upload_unverified",
    );
    assert_eq!(e.details.missing, ["trace.jsonl"]);
    backend
        .upload(token, &target, &upload_request("trace.jsonl", b"{}\n"))
        .await
        .expect("upload");
    let done = backend
        .complete(token, &run(0), &complete)
        .await
        .expect("complete");
    assert_eq!(done.run.state, RunState::Succeeded);
    assert!(
        !backend
            .complete(token, &run(0), &complete)
            .await
            .expect("again")
            .changed
    );

    // Run 1 cannot skip ahead, then fails before it plays; run 2 never starts.
    refused(
        backend
            .transition(token, &run(1), &go(RunState::Succeeded))
            .await,
        409,
        "invalid_transition",
    );
    let failed = TransitionRequest {
        to: RunState::Failed,
        reason: Some("the game did not start".to_owned()),
    };
    backend
        .transition(token, &run(1), &failed)
        .await
        .expect("fail");

    // The aggregate, free and verified.
    let job_target = UploadTarget::Job(job_ref.clone());
    for (name, bytes) in [
        ("aggregate.md", &b"# all"[..]),
        ("aggregate.json", &b"{}"[..]),
    ] {
        backend
            .upload(token, &job_target, &upload_request(name, bytes))
            .await
            .expect("upload");
    }
    let digest = |b: &[u8]| FileDigest {
        size: i64::try_from(b.len()).unwrap_or(i64::MAX),
        sha256: sha256_hex(b),
    };
    let published = backend
        .aggregate_complete(
            token,
            &job_ref,
            &AggregateCompleteRequest {
                md: digest(b"# all"),
                json: digest(b"{}"),
            },
        )
        .await
        .expect("aggregate");
    assert!(published.changed);

    // Finish settles once: runs 1 and 2 never played and are refunded.
    let finished = backend.finish(token, &job_ref).await.expect("finish");
    assert!(!finished.replayed);
    assert_eq!(
        (
            finished.settlement.charged_cents,
            finished.settlement.refunded_cents
        ),
        (150, 100)
    );
    assert_eq!(finished.balance_cents, before - 50);
    let again = backend.finish(token, &job_ref).await.expect("finish again");
    assert!(again.replayed);
    assert_eq!(again.settlement, finished.settlement);
    assert_eq!(again.balance_cents, before - 50);

    let view = backend.get_job(token, &job_ref).await.expect("get job");
    assert_eq!(view.state, "settled");
    assert!(view.aggregate_published);
    let states: Vec<RunState> = view.runs.iter().map(|r| r.state).collect();
    assert_eq!(
        states,
        [RunState::Succeeded, RunState::Failed, RunState::Canceled]
    );
    let one = backend.get_run(token, &run(1)).await.expect("get run");
    assert_eq!(one.reason.as_deref(), Some("the game did not start"));
    refused(
        backend
            .get_job(
                token,
                &JobRef {
                    game: GAME.to_owned(),
                    job: "job-999999".to_owned(),
                },
            )
            .await,
        404,
        "not_found",
    );
}

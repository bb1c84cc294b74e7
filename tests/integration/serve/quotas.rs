//! `gameplan serve`'s quotas: files and bytes per run (the job's own files
//! count as a run), unsettled jobs per account, each hit and refused with
//! a body naming the quota, what is used and the limit; and the files of a
//! run that never played are not kept (it is refunded).

use gameplan::backend::api::{
    ApiError, CompleteRequest, HeartbeatRequest, ManifestEntry, RunState, Token,
};
use gameplan::backend::{Backend, UploadTarget};

use super::security::{
    GAME, block, buy, cells, client, job_of, register_body, run_of, sha256, upload, walk,
};
use crate::support::{ALL_SCOPES, Served, Test};

/// A server of `quota.sqlite` with the demo account and `flags`, and a
/// token of it with every scope.
fn served(test: &Test, flags: &[&str]) -> (Served, Token) {
    let mut all = vec!["--demo"];
    all.extend_from_slice(flags);
    let server = Served::with_flags(&test.path(""), &test.path("quota.sqlite"), &all);
    let made = test.run(&[
        "ledger",
        "token",
        "--account",
        "demo",
        "--scopes",
        ALL_SCOPES,
        "--db",
        "quota.sqlite",
    ]);
    let token = Token(made.code(0).stdout.trim().to_owned());
    (server, token)
}

/// Asserts `e` is the quota refusal of `quota` at `used` of `limit`,
/// naming its flag, and saying nothing was stored or charged.
fn refused_by(e: &ApiError, code: &str, quota: &str, used: i64, limit: i64, flag: &str) {
    assert_eq!(e.code, code, "{e}");
    assert_eq!(e.details.quota.as_deref(), Some(quota), "{e:?}");
    assert_eq!(
        (e.details.used, e.details.limit),
        (Some(used), Some(limit)),
        "{e:?}"
    );
    assert!(
        e.message.contains(flag)
            && e.message.contains(&format!("{used} used of {limit}"))
            && e.message.contains("nothing was charged"),
        "{e}"
    );
}

fn manifest(files: &[(&str, &[u8])]) -> Vec<ManifestEntry> {
    files
        .iter()
        .map(|(name, bytes)| ManifestEntry {
            path: (*name).to_owned(),
            size: i64::try_from(bytes.len()).expect("small"),
            sha256: sha256(bytes),
        })
        .collect()
}

fn failed(actions: i64, manifest: Vec<ManifestEntry>) -> CompleteRequest {
    CompleteRequest {
        state: RunState::Failed,
        reason: Some("the game did not start".to_owned()),
        actions_taken: actions,
        quit_reason: None,
        report: serde_json::json!({}),
        report_md: String::new(),
        manifest,
    }
}

#[test]
fn a_run_past_its_files_quota_is_refused_413_naming_the_quota_used_and_limit() {
    let test = Test::new();
    let (server, token) = served(&test, &["--max-run-files", "3"]);
    let backend = client(&server.url);
    block(async {
        let bought = buy(&backend, &token, "key-files", cells(&["kid"])).await;
        let run = UploadTarget::Run(run_of(&bought, 0));
        for name in ["a.txt", "b.txt", "c.txt"] {
            backend
                .upload(&token, &run, &upload(name, b"x"))
                .await
                .expect(name);
        }
        let e = backend
            .upload(&token, &run, &upload("d.txt", b"x"))
            .await
            .expect_err("a fourth file");
        assert_eq!(e.status, 413, "{e}");
        refused_by(&e, "quota_exceeded", "run_files", 3, 3, "--max-run-files");
        // A file of the same name replaces, and counts once.
        backend
            .upload(&token, &run, &upload("c.txt", b"y"))
            .await
            .expect("a replacement");
        // The job's own files (the aggregate) are a run of their own.
        let own = UploadTarget::Job(job_of(&bought));
        for name in ["aggregate.md", "aggregate.json", "x"] {
            backend
                .upload(&token, &own, &upload(name, b"{}"))
                .await
                .expect(name);
        }
        let e = backend
            .upload(&token, &own, &upload("y", b"{}"))
            .await
            .expect_err("a fourth job file");
        refused_by(&e, "quota_exceeded", "run_files", 3, 3, "--max-run-files");
    });
    let doc = server.ledger(&test);
    let names: Vec<&str> = doc["jobs"][0]["uploads"]
        .as_array()
        .expect("uploads")
        .iter()
        .filter_map(|u| u["name"].as_str())
        .collect();
    assert!(
        !names.contains(&"d.txt") && !names.contains(&"y"),
        "{names:?}"
    );
}

#[test]
fn a_run_past_its_bytes_quota_is_refused_413_and_a_smaller_replacement_fits() {
    let test = Test::new();
    let (server, token) = served(&test, &["--max-run-bytes", "1KiB"]);
    let backend = client(&server.url);
    block(async {
        let bought = buy(&backend, &token, "key-bytes", cells(&["kid"])).await;
        let run = UploadTarget::Run(run_of(&bought, 0));
        backend
            .upload(&token, &run, &upload("a.bin", &[1u8; 600]))
            .await
            .expect("600 bytes");
        let e = backend
            .upload(&token, &run, &upload("b.bin", &[2u8; 600]))
            .await
            .expect_err("1,200 bytes in all");
        assert_eq!(e.status, 413, "{e}");
        refused_by(
            &e,
            "quota_exceeded",
            "run_bytes",
            600,
            1024,
            "--max-run-bytes",
        );
        assert!(e.message.contains("`b.bin` (600 bytes)"), "{e}");
        // `a.bin` again, larger: counted at its new size, alone.
        backend
            .upload(&token, &run, &upload("a.bin", &[3u8; 1000]))
            .await
            .expect("a replacement of 1,000 bytes");
    });
    let bad = test.run(&["serve", "--max-run-bytes", "12XB", "--db", "x.sqlite"]);
    bad.code(3).stderr_has("not a unit");
    drop(server);
}

#[test]
fn an_account_past_its_open_jobs_quota_is_refused_409_until_it_finishes_one() {
    let test = Test::new();
    let (server, token) = served(&test, &["--max-open-jobs", "1"]);
    let backend = client(&server.url);
    block(async {
        let first = buy(&backend, &token, "key-1", cells(&["kid"])).await;
        let quote = backend
            .estimate(&token, GAME, &super::security::estimate_of(cells(&["kid"])))
            .await
            .expect("estimate");
        let body = register_body(&quote.quote_id, quote.estimate_cents, cells(&["kid"]));
        let e = backend
            .register(&token, GAME, "key-2", &body)
            .await
            .expect_err("a second open job");
        assert_eq!(e.status, 409, "{e}");
        refused_by(
            &e,
            "too_many_active_jobs",
            "open_jobs",
            1,
            1,
            "--max-open-jobs",
        );
        backend
            .finish(&token, &job_of(&first))
            .await
            .expect("finish");
        backend
            .register(&token, GAME, "key-2", &body)
            .await
            .expect("the first settled, a second fits");
    });
    let doc = server.ledger(&test);
    assert_eq!(doc["jobs"].as_array().map(Vec::len), Some(2), "{doc}");
    assert_eq!(doc["accounts"][0]["adds_up"], true, "{doc}");
}

/// Blobs the ledger file holds (what the disk keeps).
fn blobs(server: &Served) -> i64 {
    let conn = rusqlite::Connection::open(&server.db).expect("open");
    conn.query_row("SELECT COUNT(*) FROM blobs", [], |r| r.get(0))
        .expect("count")
}

#[test]
fn the_files_of_a_run_that_failed_before_playing_are_not_kept_and_a_played_runs_are() {
    let test = Test::new();
    let (server, token) = served(&test, &[]);
    let backend = client(&server.url);
    let big = vec![7u8; 3 * 1024 * 1024];
    let log = b"the game exited with code 1 before it said hello".to_vec();
    let played_log = b"played seven actions, then crashed".to_vec();
    let finished = block(async {
        let bought = buy(&backend, &token, "key-drop", cells(&["kid", "vet", "pro"])).await;
        // Run 0 never played: it uploads 3 MiB and a log, then fails.
        let unplayed = run_of(&bought, 0);
        let files: [(&str, &[u8]); 2] = [("big.bin", &big), ("log.txt", &log)];
        for (name, bytes) in files {
            backend
                .upload(
                    &token,
                    &UploadTarget::Run(unplayed.clone()),
                    &upload(name, bytes),
                )
                .await
                .expect(name);
        }
        let done = backend
            .complete(&token, &unplayed, &failed(0, manifest(&files)))
            .await
            .expect("complete failed");
        assert!(!done.run.played, "{done:?}");
        // Run 1 played (a heartbeat with actions), then failed: kept.
        let played = run_of(&bought, 1);
        walk(
            &backend,
            &token,
            &played,
            &[RunState::Launching, RunState::Playing],
        )
        .await;
        backend
            .heartbeat(
                &token,
                &played,
                &HeartbeatRequest {
                    actions_taken: 7,
                    checkpoint_step: None,
                },
            )
            .await
            .expect("heartbeat");
        let kept: [(&str, &[u8]); 1] = [("log.txt", &played_log)];
        backend
            .upload(
                &token,
                &UploadTarget::Run(played.clone()),
                &upload("log.txt", &played_log),
            )
            .await
            .expect("upload");
        backend
            .complete(&token, &played, &failed(7, manifest(&kept)))
            .await
            .expect("complete");
        // Run 2 uploads and is never completed: refunded at finish, and
        // its files dropped then.
        backend
            .upload(
                &token,
                &UploadTarget::Run(run_of(&bought, 2)),
                &upload("big.bin", &big),
            )
            .await
            .expect("upload");
        // A retry of the complete answers what the first did.
        let again = backend
            .complete(&token, &unplayed, &failed(0, manifest(&files)))
            .await
            .expect("complete again");
        assert!(!again.changed, "{again:?}");
        backend
            .finish(&token, &job_of(&bought))
            .await
            .expect("finish")
    });
    assert_eq!(finished.settlement.refunded_runs.len(), 2, "{finished:?}");
    let doc = server.ledger(&test);
    let uploads: Vec<(String, String)> = doc["jobs"][0]["uploads"]
        .as_array()
        .expect("uploads")
        .iter()
        .map(|u| {
            (
                u["run"].as_str().unwrap_or("").to_owned(),
                u["name"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    let played_run = doc["jobs"][0]["runs"][1]["id"].as_str().expect("id");
    assert_eq!(
        uploads,
        vec![(played_run.to_owned(), "log.txt".to_owned())],
        "only the played run's file is kept: {doc}"
    );
    assert_eq!(blobs(&server), 1, "the 3 MiB blob is gone from the file");
}

#[test]
fn a_paid_run_whose_deliver_hits_the_files_quota_fails_saying_which_quota_and_what_to_do() {
    let test = Test::new()
        .file("plans/demo.toml", include_str!("../../../plans/demo.toml"))
        .file(
            "examples/personas/veteran.md",
            include_str!("../../../examples/personas/veteran.md"),
        );
    // A cell delivers four files: the third is refused.
    let (server, token) = served(&test, &["--max-run-files", "2"]);
    let plan = include_str!("../../../plans/demo.toml").replace(
        "[backend]\nkind = \"local\"",
        &format!(
            "[backend]\nkind = \"http\"\nurl = \"{}\"\ntoken = \"{{{{ secret('STUDIO_TOKEN') }}}}\"",
            server.url
        ),
    );
    let test = test
        .file("plans/demo.toml", plan)
        .env("STUDIO_TOKEN", &token.0);
    let out = test.run(&["plan", "run", "plans/demo.toml", "--yes"]);
    out.code(1);
    let said = format!("{}\n{}", out.stdout, out.stderr);
    for needle in [
        "quota_exceeded",
        "quota `run_files`: 2 used of 2",
        "--max-run-files",
        "was not stored and nothing was charged for it",
    ] {
        assert!(said.contains(needle), "{needle:?} not in:\n{said}");
    }
}

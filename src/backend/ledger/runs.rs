//! Runs and their files: transition, heartbeat, upload, complete,
//! aggregate complete, get run.

use rusqlite::{OptionalExtension, Transaction, params};

use super::jobs::{owned_job, parse_id, run_view};
use super::{Caller, Db as _, Ledger, authenticate, check_text, sha256_hex};
use crate::backend::api::{
    AggregateCompleteRequest, AggregatePublished, ApiError, CompleteRequest, Completed, FileDigest,
    Heartbeat, HeartbeatRequest, JobRef, ManifestEntry, RunRef, RunState, RunView, Token,
    TransitionRequest, Transitioned, UploadRequest, UploadTarget, Uploaded, Usage,
};
use crate::backend::endpoint::Endpoint;

/// The longest reason a run may carry (the client cuts it; we refuse more).
pub const MAX_REASON_CHARS: usize = 400;
/// The largest single upload.
pub const MAX_UPLOAD_BYTES: usize = 64 * 1024 * 1024;

/// The run `reference` names, if its job is the caller's: (job, run, job state).
fn owned_run(
    tx: &Transaction<'_>,
    caller: &Caller,
    reference: &RunRef,
) -> Result<(i64, i64, String), ApiError> {
    let (job, state) = owned_job(
        tx,
        caller,
        &JobRef {
            game: reference.game.clone(),
            job: reference.job.clone(),
        },
    )?;
    let missing = || {
        ApiError::not_found(&format!(
            "run `{}` of job `{}`",
            reference.run, reference.job
        ))
    };
    let run = parse_id("run", &reference.run).ok_or_else(missing)?;
    let found: Option<i64> = tx
        .query_row(
            "SELECT id FROM runs WHERE id = ?1 AND job = ?2",
            params![run, job],
            |r| r.get(0),
        )
        .optional()
        .db()?;
    found.ok_or_else(missing)?;
    Ok((job, run, state))
}

fn settled(job: &JobRef) -> ApiError {
    ApiError::invalid_transition(format!(
        "job `{}` is settled (finished); its runs cannot change",
        job.job
    ))
}

/// Checks a reason against the state it comes with.
fn check_reason(state: RunState, reason: Option<&str>) -> Result<(), ApiError> {
    match reason {
        Some(_) if state == RunState::Succeeded => {
            Err(ApiError::invalid_request("a succeeded run sends no reason"))
        }
        Some(text) if text.chars().count() > MAX_REASON_CHARS => Err(ApiError::invalid_request(
            format!("a reason is at most {MAX_REASON_CHARS} characters; cut it"),
        )),
        _ => Ok(()),
    }
}

/// The edges out of `from`, for a 409's message.
fn edges(from: RunState) -> String {
    let to: Vec<&str> = RunState::ALL
        .into_iter()
        .filter(|to| from.can_move_to(*to))
        .map(RunState::as_str)
        .collect();
    if to.is_empty() {
        format!("`{from}` is final")
    } else {
        format!("from `{from}` a run moves to {}", to.join(", "))
    }
}

/// Moves `run` to `to`, or says why not. `Ok(false)`: it already was there.
fn move_run(
    tx: &Transaction<'_>,
    run: i64,
    reference: &RunRef,
    to: RunState,
    reason: Option<&str>,
) -> Result<bool, ApiError> {
    let from = run_view(tx, run)?.state;
    if from == to {
        return Ok(false);
    }
    if !from.can_move_to(to) {
        return Err(ApiError::invalid_transition(format!(
            "run `{}` is `{from}` and cannot move to `{to}`: {}",
            reference.run,
            edges(from)
        )));
    }
    tx.execute(
        "UPDATE runs SET state = ?1, played = played OR ?2, reason = COALESCE(?3, reason) WHERE id = ?4",
        params![to.as_str(), to == RunState::Playing, reason, run],
    )
    .db()?;
    Ok(true)
}

fn check_sha256(text: &str) -> Result<(), ApiError> {
    if text.len() == 64
        && text
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        Ok(())
    } else {
        Err(ApiError::invalid_request(format!(
            "`{text}` is not a sha256: 64 lowercase hex digits"
        )))
    }
}

fn check_name(name: &str) -> Result<(), ApiError> {
    check_text("name", name)?;
    let ok = !name.is_empty()
        && name.len() <= 255
        && !name.starts_with('/')
        && name
            .split('/')
            .all(|part| !part.is_empty() && part != "." && part != "..");
    if ok {
        Ok(())
    } else {
        Err(ApiError::invalid_request(format!(
            "`{name}` is not a file name: a relative path without `.`, `..` or empty parts"
        )))
    }
}

/// Which of `expected` (name, size, sha256) are not uploaded as described
/// under (job, run): their names and, for the message, why.
fn unverified(
    tx: &Transaction<'_>,
    job: i64,
    run: i64,
    expected: &[ManifestEntry],
) -> Result<Vec<(String, String)>, ApiError> {
    let mut problems = Vec::new();
    for file in expected {
        let stored: Option<(i64, String)> = tx
            .query_row(
                "SELECT size, sha256 FROM uploads WHERE job = ?1 AND run = ?2 AND name = ?3",
                params![job, run, file.path],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .db()?;
        let why = match stored {
            None => Some("not uploaded".to_owned()),
            Some((size, _)) if size != file.size => Some(format!(
                "uploaded {size} bytes, the manifest says {}",
                file.size
            )),
            Some((_, sha)) if sha != file.sha256 => Some(format!(
                "uploaded sha256 {sha}, the manifest says {}",
                file.sha256
            )),
            Some(_) => None,
        };
        if let Some(why) = why {
            problems.push((file.path.clone(), why));
        }
    }
    Ok(problems)
}

fn upload_unverified(problems: Vec<(String, String)>) -> ApiError {
    let message = format!(
        "these files were not uploaded as the manifest says: {}; upload them and complete again",
        problems
            .iter()
            .map(|(path, why)| format!("{path} ({why})"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    ApiError::new(422, "upload_unverified", message)
        .with(|d| d.missing = problems.into_iter().map(|(path, _)| path).collect())
}

/// When `run` was completed (its manifest verified), if it was.
fn completed_at(tx: &Transaction<'_>, run: i64) -> Result<Option<i64>, ApiError> {
    tx.query_row(
        "SELECT completed_at FROM runs WHERE id = ?1",
        params![run],
        |r| r.get(0),
    )
    .db()
}

/// Where an upload to `target` goes (job, run; 0 for the job's own files)
/// and, when its files can no longer change, why: a completed run's files
/// were verified against its manifest, a published aggregate's digests
/// are public, a settled job is over.
fn frozen(
    tx: &Transaction<'_>,
    caller: &Caller,
    target: &UploadTarget,
) -> Result<(i64, i64, Option<String>), ApiError> {
    // Job files (the aggregate) are numbered run 0: no run has that id.
    let (job, run, job_state, job_id) = match target {
        UploadTarget::Run(r) => {
            let (job, run, state) = owned_run(tx, caller, r)?;
            (job, run, state, &r.job)
        }
        UploadTarget::Job(r) => {
            let (job, state) = owned_job(tx, caller, r)?;
            (job, 0, state, &r.job)
        }
    };
    let verified = if run == 0 {
        super::jobs::aggregate_of(tx, job)?.map(|_| {
            format!("job `{job_id}` published its aggregate: its files' digests are public")
        })
    } else {
        completed_at(tx, run)?.map(|_| {
            format!(
                "run `{}` was completed: its files were verified against its manifest",
                super::jobs::run_id(run)
            )
        })
    };
    let settled = (job_state != "open").then(|| format!("job `{job_id}` is settled (finished)"));
    Ok((job, run, verified.or(settled)))
}

impl Ledger {
    /// [`Endpoint::Transition`]: one edge of the state machine (409
    /// otherwise); moving to the state the run is in changes nothing.
    pub fn transition(
        &self,
        token: &Token,
        reference: &RunRef,
        request: &TransitionRequest,
    ) -> Result<Transitioned, ApiError> {
        let (to, reason) = (request.to, request.reason.as_deref());
        check_reason(to, reason)?;
        self.write(|tx, _| {
            let caller = authenticate(tx, token)?;
            caller.may(Endpoint::Transition)?;
            let (_, run, job_state) = owned_run(tx, &caller, reference)?;
            if job_state != "open" {
                let already = run_view(tx, run)?.state == to;
                if !already {
                    return Err(settled(&JobRef {
                        game: reference.game.clone(),
                        job: reference.job.clone(),
                    }));
                }
            }
            let changed = move_run(tx, run, reference, to, reason)?;
            Ok(Transitioned {
                run: run_view(tx, run)?,
                changed,
            })
        })
    }

    /// [`Endpoint::Heartbeat`]: records progress (never backwards, so a
    /// late retry is harmless) and says whether the run should stop.
    pub fn heartbeat(
        &self,
        token: &Token,
        reference: &RunRef,
        request: &HeartbeatRequest,
    ) -> Result<Heartbeat, ApiError> {
        if request.actions_taken < 0 {
            return Err(ApiError::invalid_request(
                "actions_taken cannot be negative",
            ));
        }
        self.write(|tx, _| {
            let caller = authenticate(tx, token)?;
            caller.may(Endpoint::Heartbeat)?;
            let (job, run, job_state) = owned_run(tx, &caller, reference)?;
            let state = run_view(tx, run)?.state;
            if job_state == "open" && !state.is_terminal() {
                // An action the ledger was told of is play it saw: such a
                // run is not refunded, whatever state it ends in.
                tx.execute(
                    "UPDATE runs SET actions_taken = MAX(actions_taken, ?1),
                                     checkpoint_step = COALESCE(?2, checkpoint_step),
                                     played = played OR ?1 > 0
                     WHERE id = ?3",
                    params![request.actions_taken, request.checkpoint_step, run],
                )
                .db()?;
            }
            let (actions, max_actions): (i64, i64) = tx
                .query_row(
                    "SELECT runs.actions_taken, jobs.max_actions FROM runs JOIN jobs ON jobs.id = runs.job
                     WHERE runs.id = ?1 AND jobs.id = ?2",
                    params![run, job],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .db()?;
            Ok(Heartbeat {
                usage: Usage {
                    actions_taken: actions,
                    max_actions,
                },
                cancel_requested: job_state != "open" || state.is_terminal() || actions >= max_actions,
            })
        })
    }

    /// [`Endpoint::UploadRunFile`] or [`Endpoint::UploadJobFile`]: stores the body by its sha256, which must be
    /// the one the caller sent (422 `digest_mismatch`).
    pub fn upload(
        &self,
        token: &Token,
        target: &UploadTarget,
        request: &UploadRequest,
    ) -> Result<Uploaded, ApiError> {
        check_name(&request.name)?;
        check_sha256(&request.sha256)?;
        if request.body.len() > MAX_UPLOAD_BYTES {
            return Err(ApiError::invalid_request(format!(
                "`{}` is {} bytes; the most one upload may be is {MAX_UPLOAD_BYTES}",
                request.name,
                request.body.len()
            )));
        }
        let actual = sha256_hex(&request.body);
        if actual != request.sha256 {
            return Err(ApiError::new(
                422,
                "digest_mismatch",
                format!(
                    "`{}` has sha256 {actual}, not the {} sent with it; the body was damaged on the way: upload it again",
                    request.name, request.sha256
                ),
            ));
        }
        let size = i64::try_from(request.body.len()).unwrap_or(i64::MAX);
        self.write(|tx, _| {
            let caller = authenticate(tx, token)?;
            caller.may(Endpoint::upload(target))?;
            let (job, run, frozen) = frozen(tx, &caller, target)?;
            let stored: Option<String> = tx
                .query_row(
                    "SELECT sha256 FROM uploads WHERE job = ?1 AND run = ?2 AND name = ?3",
                    params![job, run, request.name],
                    |r| r.get(0),
                )
                .optional()
                .db()?;
            if let Some(why) = frozen {
                // The same bytes again are a retry of what was stored.
                if stored.as_deref() == Some(actual.as_str()) {
                    return Ok(Uploaded {
                        name: request.name.clone(),
                        size,
                        sha256: actual.clone(),
                    });
                }
                let what = if stored.is_some() {
                    format!("`{}` cannot be replaced", request.name)
                } else {
                    format!("no file (`{}`) can be added", request.name)
                };
                return Err(ApiError::new(
                    409,
                    "files_immutable",
                    format!(
                        "{why}, so {what}; its files stay as they were verified (nothing was stored or charged)"
                    ),
                ));
            }
            let what = match target {
                UploadTarget::Run(r) => format!("run `{}` of job `{}`", r.run, r.job),
                UploadTarget::Job(r) => format!("job `{}`'s own files (its aggregate)", r.job),
            };
            self.quotas
                .check_upload(tx, (job, run), &what, &request.name, size)?;
            tx.execute(
                "INSERT OR IGNORE INTO blobs (sha256, size, data) VALUES (?1, ?2, ?3)",
                params![actual, size, request.body],
            )
            .db()?;
            tx.execute(
                "INSERT INTO uploads (job, run, name, sha256, size) VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (job, run, name) DO UPDATE SET sha256 = excluded.sha256, size = excluded.size",
                params![job, run, request.name, actual, size],
            )
            .db()?;
            Ok(Uploaded {
                name: request.name.clone(),
                size,
                sha256: actual.clone(),
            })
        })
    }

    /// [`Endpoint::Complete`]: ends the run in `request.state` once
    /// every manifest file was uploaded with its size and sha256 (422
    /// `upload_unverified` naming the others). Completing again with the
    /// same state changes nothing.
    pub fn complete(
        &self,
        token: &Token,
        reference: &RunRef,
        request: &CompleteRequest,
    ) -> Result<Completed, ApiError> {
        if !request.state.is_terminal() {
            return Err(ApiError::invalid_request(format!(
                "complete ends a run: state is succeeded, failed, canceled or budget_exceeded, not `{}`",
                request.state
            )));
        }
        check_reason(request.state, request.reason.as_deref())?;
        if request.actions_taken < 0 {
            return Err(ApiError::invalid_request(
                "actions_taken cannot be negative",
            ));
        }
        for file in &request.manifest {
            check_name(&file.path)?;
            check_sha256(&file.sha256)?;
        }
        self.write(|tx, now| {
            let caller = authenticate(tx, token)?;
            caller.may(Endpoint::Complete)?;
            let (job, run, job_state) = owned_run(tx, &caller, reference)?;
            let current = run_view(tx, run)?.state;
            let completed = completed_at(tx, run)?;
            // A complete already accepted, asked again: its answer again.
            // (A run that reached this state by a transition, a cell that
            // failed before it played, still gets its manifest verified.)
            if current == request.state && completed.is_some() {
                return Ok(Completed {
                    run: run_view(tx, run)?,
                    changed: false,
                });
            }
            if job_state != "open" {
                return Err(settled(&JobRef {
                    game: reference.game.clone(),
                    job: reference.job.clone(),
                }));
            }
            let problems = unverified(tx, job, run, &request.manifest)?;
            if !problems.is_empty() {
                return Err(upload_unverified(problems));
            }
            if current != request.state {
                move_run(tx, run, reference, request.state, request.reason.as_deref())?;
            }
            tx.execute(
                "UPDATE runs SET actions_taken = MAX(actions_taken, ?1), quit_reason = ?2,
                                 report = ?3, report_md = ?4, completed_at = ?5,
                                 played = played OR ?1 > 0
                 WHERE id = ?6",
                params![
                    request.actions_taken,
                    request.quit_reason,
                    request.report.to_string(),
                    request.report_md,
                    now,
                    run
                ],
            )
            .db()?;
            let view = run_view(tx, run)?;
            if !view.played {
                // Never played, so refunded at finish: its files are not
                // kept (stored for free otherwise; see `quotas`).
                super::quotas::drop_files(tx, job, run)?;
            }
            Ok(Completed {
                run: view,
                changed: true,
            })
        })
    }

    /// [`Endpoint::AggregateComplete`]: publishes `aggregate.md` and
    /// `aggregate.json`, uploaded to the job, verified by size and sha256.
    /// Free. The same digests again change nothing; other digests after
    /// publishing are refused (409 `aggregate_published`): the published
    /// digests are what the job's files are checked against.
    pub fn aggregate_complete(
        &self,
        token: &Token,
        reference: &JobRef,
        request: &AggregateCompleteRequest,
    ) -> Result<AggregatePublished, ApiError> {
        check_sha256(&request.md.sha256)?;
        check_sha256(&request.json.sha256)?;
        self.write(|tx, _| {
            let caller = authenticate(tx, token)?;
            caller.may(Endpoint::AggregateComplete)?;
            let (job, job_state) = owned_job(tx, &caller, reference)?;
            let stored: Option<(i64, String, i64, String)> = tx
                .query_row(
                    "SELECT md_size, md_sha256, json_size, json_sha256 FROM aggregates WHERE job = ?1",
                    params![job],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
                )
                .optional()
                .db()?;
            let same = |(md_size, md_sha, json_size, json_sha): &(i64, String, i64, String)| {
                *md_size == request.md.size
                    && *md_sha == request.md.sha256
                    && *json_size == request.json.size
                    && *json_sha == request.json.sha256
            };
            if stored.as_ref().is_some_and(same) {
                return Ok(AggregatePublished {
                    job_id: reference.job.clone(),
                    changed: false,
                });
            }
            if stored.is_some() {
                return Err(ApiError::new(
                    409,
                    "aggregate_published",
                    format!(
                        "job `{}` published its aggregate already, with other digests; a published aggregate does not change (nothing was stored)",
                        reference.job
                    ),
                ));
            }
            if job_state != "open" {
                return Err(settled(reference));
            }
            let entry = |path: &str, file: &FileDigest| ManifestEntry {
                path: path.to_owned(),
                size: file.size,
                sha256: file.sha256.clone(),
            };
            let problems = unverified(
                tx,
                job,
                0,
                &[entry("aggregate.md", &request.md), entry("aggregate.json", &request.json)],
            )?;
            if !problems.is_empty() {
                return Err(upload_unverified(problems));
            }
            tx.execute(
                "INSERT INTO aggregates (job, md_size, md_sha256, json_size, json_sha256)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
                params![job, request.md.size, request.md.sha256, request.json.size, request.json.sha256],
            )
            .db()?;
            Ok(AggregatePublished {
                job_id: reference.job.clone(),
                changed: true,
            })
        })
    }

    /// [`Endpoint::GetRun`].
    pub fn get_run(&self, token: &Token, reference: &RunRef) -> Result<RunView, ApiError> {
        self.read(|tx, _| {
            let caller = authenticate(tx, token)?;
            caller.may(Endpoint::GetRun)?;
            let (_, run, _) = owned_run(tx, &caller, reference)?;
            run_view(tx, run)
        })
    }
}

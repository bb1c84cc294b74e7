//! The ledger's record of hosted playtests (`crate::hosted`): the builds an
//! account uploaded, and each admitted playtest with its phase, its job and
//! the cells it plays.
//!
//! An admission is the ledger's own `register` under the key
//! `hosted/<Idempotency-Key>`, so it charges once, refuses a changed price,
//! an expired quote or a short balance exactly as a plan's register does;
//! the playtest row that follows is keyed the same way, and a repeat with
//! the same key and body finds both. The worker's calls (its phases, the
//! end of each cell's run, the settlement) carry no token: they are the
//! server's own, on the account that admitted the playtest.

use rusqlite::{OptionalExtension, Transaction, params};

use super::jobs::{job_view, parse_id, settle};
use super::{Db as _, Ledger, authenticate, check_text, rfc3339, sha256_hex};
use crate::backend::api::{ApiError, RegisterRequest, RunState, Token};
use crate::backend::endpoint::Endpoint;
use crate::backend::hosted::{
    BuildKept, Outcome, Phase, Playtest, PlaytestCell, QuotedCell, parse_playtest_id, playtest_id,
};

/// The tables, as migration 5 creates them.
pub(super) const TABLES: &str = "
    CREATE TABLE builds (
        account TEXT NOT NULL REFERENCES accounts(id),
        game TEXT NOT NULL,
        sha256 TEXT NOT NULL,
        size INTEGER NOT NULL,
        files INTEGER NOT NULL,
        unpacked_bytes INTEGER NOT NULL,
        plans TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        PRIMARY KEY (account, game, sha256)
    );
    CREATE TABLE hosted (
        id INTEGER PRIMARY KEY,
        account TEXT NOT NULL REFERENCES accounts(id),
        game TEXT NOT NULL,
        idempotency_key TEXT NOT NULL,
        body_sha256 TEXT NOT NULL,
        job INTEGER NOT NULL REFERENCES jobs(id),
        build TEXT NOT NULL,
        plan TEXT NOT NULL,
        vars TEXT NOT NULL,
        cells TEXT NOT NULL,
        phase TEXT NOT NULL,
        reason TEXT,
        cancel_requested INTEGER NOT NULL DEFAULT 0,
        outcome TEXT,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        UNIQUE (account, idempotency_key)
    );
    CREATE INDEX hosted_open ON hosted (phase);
";

/// What the worker needs of a playtest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Work {
    pub id: i64,
    pub account: String,
    pub game: String,
    pub job: i64,
    pub build: String,
    pub plan: String,
    pub vars: std::collections::BTreeMap<String, String>,
    pub cells: Vec<QuotedCell>,
    pub phase: Phase,
    pub cancel_requested: bool,
}

/// How one cell ended, as the worker read it from its report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CellEnd {
    /// Actions the player took: a cell that took none never played and is
    /// refunded (the game did not start).
    pub actions_taken: i64,
    /// Why it did not play or failed, when it did not succeed.
    pub reason: Option<String>,
}

/// A playtest's admission, as the ledger keeps it.
pub struct Admission<'a> {
    pub key: &'a str,
    /// The sha256 of the admission's whole body (build, plan, vars, quote).
    pub body_sha256: &'a str,
    pub build: &'a str,
    pub plan: &'a str,
    pub vars: &'a std::collections::BTreeMap<String, String>,
    pub cells: &'a [QuotedCell],
    pub register: &'a RegisterRequest,
}

impl Ledger {
    /// Keeps the record of a checked build (`checked`, its `new` unread;
    /// its bytes are the server's to store): whether it is new to this
    /// account.
    pub fn keep_build(
        &self,
        token: &Token,
        game: &str,
        sha256: &str,
        size: u64,
        checked: &BuildKept,
    ) -> Result<BuildKept, ApiError> {
        check_text("game", game)?;
        self.write(|tx, now| {
            let caller = authenticate(tx, token)?;
            caller.may(Endpoint::UploadBuild)?;
            let plans = serde_json::to_string(&checked.plans).unwrap_or_default();
            let added = tx
                .execute(
                    "INSERT OR IGNORE INTO builds (account, game, sha256, size, files, unpacked_bytes, plans, created_at)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                    params![
                        caller.account,
                        game,
                        sha256,
                        i64::try_from(size).unwrap_or(i64::MAX),
                        i64::try_from(checked.files).unwrap_or(i64::MAX),
                        i64::try_from(checked.unpacked_bytes).unwrap_or(i64::MAX),
                        plans,
                        now
                    ],
                )
                .db()?;
            Ok(BuildKept {
                sha256: sha256.to_owned(),
                files: checked.files,
                unpacked_bytes: checked.unpacked_bytes,
                plans: checked.plans.clone(),
                new: added == 1,
            })
        })
    }

    /// The plans of a build this account uploaded for `game`, or 404
    /// saying to upload it.
    pub fn build_plans(
        &self,
        token: &Token,
        endpoint: Endpoint,
        game: &str,
        sha256: &str,
    ) -> Result<Vec<String>, ApiError> {
        self.read(|tx, _| {
            let caller = authenticate(tx, token)?;
            caller.may(endpoint)?;
            let plans: Option<String> = tx
                .query_row(
                    "SELECT plans FROM builds WHERE account = ?1 AND game = ?2 AND sha256 = ?3",
                    params![caller.account, game, sha256],
                    |r| r.get(0),
                )
                .optional()
                .db()?;
            let plans = plans.ok_or_else(|| {
                ApiError::not_found(&format!(
                    "build `{sha256}` of game `{game}` (upload it first: `gameplan hosted quote` does)"
                ))
            })?;
            Ok(serde_json::from_str(&plans).unwrap_or_default())
        })
    }

    /// Admits a quoted playtest: charges it once (the ledger's `register`
    /// under `hosted/<key>`) and queues it. The same key and body again is
    /// the same playtest, `replayed`; the same key with another body is 422.
    pub fn admit(
        &self,
        token: &Token,
        game: &str,
        admission: &Admission<'_>,
    ) -> Result<Playtest, ApiError> {
        let mismatch = |id: i64| {
            ApiError::new(
                422,
                "idempotency_mismatch",
                format!(
                    "the Idempotency-Key `{}` already admitted {} with another build, plan, variables or quote; \
                     resend the first body, or use a new key for a new playtest",
                    admission.key,
                    playtest_id(id)
                ),
            )
        };
        let known = self.read(|tx, _| {
            let caller = authenticate(tx, token)?;
            caller.may(Endpoint::HostedAdmit)?;
            by_key(tx, &caller.account, admission.key)
        })?;
        if let Some((id, sha)) = known {
            if sha != admission.body_sha256 {
                return Err(mismatch(id));
            }
            return self.read(|tx, _| view(tx, id, true));
        }
        let registered = self.register(
            token,
            game,
            &format!("hosted/{}", admission.key),
            admission.register,
        )?;
        let job = parse_id("job", &registered.job.id)
            .ok_or_else(|| ApiError::unavailable("the ledger gave a job id it cannot read"))?;
        self.write(|tx, now| {
            let caller = authenticate(tx, token)?;
            tx.execute(
                "INSERT OR IGNORE INTO hosted (account, game, idempotency_key, body_sha256, job, build, plan, vars, cells, phase, created_at, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, 'queued', ?10, ?10)",
                params![
                    caller.account,
                    game,
                    admission.key,
                    admission.body_sha256,
                    job,
                    admission.build,
                    admission.plan,
                    serde_json::to_string(admission.vars).unwrap_or_default(),
                    serde_json::to_string(admission.cells).unwrap_or_default(),
                    now
                ],
            )
            .db()?;
            let (id, sha) = by_key(tx, &caller.account, admission.key)?
                .ok_or_else(|| ApiError::unavailable("the admission was not stored"))?;
            if sha != admission.body_sha256 {
                return Err(mismatch(id));
            }
            view(tx, id, registered.replayed)
        })
    }

    /// `hosted status`: the caller's playtest `id` of `game`.
    pub fn playtest(&self, token: &Token, game: &str, id: &str) -> Result<Playtest, ApiError> {
        self.read(|tx, _| {
            let caller = authenticate(tx, token)?;
            caller.may(Endpoint::HostedGet)?;
            let n = owned(tx, &caller.account, game, id)?;
            view(tx, n, false)
        })
    }

    /// `hosted cancel`: asks the worker to stop the playtest; cells not
    /// started are refunded at its settlement. A playtest already over is
    /// returned as it is.
    pub fn cancel_playtest(
        &self,
        token: &Token,
        game: &str,
        id: &str,
    ) -> Result<Playtest, ApiError> {
        self.write(|tx, now| {
            let caller = authenticate(tx, token)?;
            caller.may(Endpoint::HostedCancel)?;
            let n = owned(tx, &caller.account, game, id)?;
            tx.execute(
                "UPDATE hosted SET cancel_requested = 1, updated_at = ?1
                 WHERE id = ?2 AND phase NOT IN ('report_ready', 'failed', 'canceled')",
                params![now, n],
            )
            .db()?;
            view(tx, n, false)
        })
    }

    /// The workspace-relative files of a playtest the caller may fetch:
    /// its outcome's list, checked against the caller's account.
    pub fn playtest_files(
        &self,
        token: &Token,
        game: &str,
        id: &str,
    ) -> Result<(i64, Vec<String>), ApiError> {
        self.read(|tx, _| {
            let caller = authenticate(tx, token)?;
            caller.may(Endpoint::HostedFile)?;
            let n = owned(tx, &caller.account, game, id)?;
            let outcome = view(tx, n, false)?.outcome.unwrap_or_default();
            Ok((n, outcome.files))
        })
    }

    /// The worker's list: every playtest not over, oldest first.
    pub fn open_playtests(&self) -> Result<Vec<Work>, ApiError> {
        self.read(|tx, _| {
            let ids: Vec<i64> = tx
                .prepare(
                    "SELECT id FROM hosted WHERE phase NOT IN ('report_ready', 'failed', 'canceled') ORDER BY id",
                )
                .and_then(|mut s| s.query_map([], |r| r.get(0))?.collect())
                .db()?;
            ids.into_iter().map(|id| work(tx, id)).collect()
        })
    }

    /// The worker's view of one playtest.
    pub fn playtest_work(&self, id: i64) -> Result<Work, ApiError> {
        self.read(|tx, _| work(tx, id))
    }

    /// Moves a playtest to `phase` (the worker's), with why and what it
    /// came to.
    pub fn set_phase(
        &self,
        id: i64,
        phase: Phase,
        reason: Option<&str>,
        outcome: Option<&Outcome>,
    ) -> Result<(), ApiError> {
        self.write(|tx, now| {
            tx.execute(
                "UPDATE hosted SET phase = ?1, reason = COALESCE(?2, reason),
                        outcome = COALESCE(?3, outcome), updated_at = ?4 WHERE id = ?5",
                params![
                    phase.as_str(),
                    reason.map(|r| cut(r, 2000)),
                    outcome.map(|o| serde_json::to_string(o).unwrap_or_default()),
                    now,
                    id
                ],
            )
            .db()?;
            Ok(())
        })
    }

    /// Ends the run of cell `index` of playtest `id` as its report says:
    /// through `playing` when it took an action (so it is charged), else
    /// straight to `failed` (so it is refunded). A run already ended is
    /// left as it is, so the worker may end a cell again after a restart.
    pub fn end_cell(&self, id: i64, index: usize, end: &CellEnd) -> Result<(), ApiError> {
        self.write(|tx, _| {
            let job: i64 = tx
                .query_row("SELECT job FROM hosted WHERE id = ?1", params![id], |r| {
                    r.get(0)
                })
                .db()?;
            let runs: Vec<i64> = tx
                .prepare("SELECT id FROM runs WHERE job = ?1 ORDER BY id")
                .and_then(|mut s| s.query_map(params![job], |r| r.get(0))?.collect())
                .db()?;
            let Some(&run) = runs.get(index) else {
                return Err(ApiError::unavailable(format!(
                    "{} has no run for its cell {index}",
                    playtest_id(id)
                )));
            };
            let state: String = tx
                .query_row("SELECT state FROM runs WHERE id = ?1", params![run], |r| {
                    r.get(0)
                })
                .db()?;
            let state = RunState::parse(&state).unwrap_or(RunState::Failed);
            if state.is_terminal() {
                return Ok(());
            }
            let played = end.actions_taken > 0;
            let path: &[RunState] = if played {
                &[
                    RunState::Launching,
                    RunState::Playing,
                    RunState::Reporting,
                    RunState::Uploading,
                ]
            } else {
                &[RunState::Launching]
            };
            let full: Vec<RunState> = std::iter::once(RunState::Queued)
                .chain(path.iter().copied())
                .collect();
            let rest = full
                .iter()
                .position(|s| *s == state)
                .map_or(&[][..], |at| &full[at + 1..]);
            for step in rest {
                move_to(tx, run, *step, None)?;
            }
            let last = if played && end.reason.is_none() {
                RunState::Succeeded
            } else {
                RunState::Failed
            };
            move_to(tx, run, last, end.reason.as_deref())?;
            tx.execute(
                "UPDATE runs SET actions_taken = ?1 WHERE id = ?2",
                params![end.actions_taken, run],
            )
            .db()?;
            Ok(())
        })
    }

    /// Settles the playtest's job once (the ledger's `finish`): runs that
    /// never played are refunded.
    pub fn settle_playtest(&self, id: i64) -> Result<crate::backend::api::Settlement, ApiError> {
        self.write(|tx, now| {
            let (account, job): (String, i64) = tx
                .query_row(
                    "SELECT account, job FROM hosted WHERE id = ?1",
                    params![id],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .db()?;
            Ok(settle(tx, &account, job, now)?.settlement)
        })
    }
}

fn move_to(
    tx: &Transaction<'_>,
    run: i64,
    to: RunState,
    reason: Option<&str>,
) -> Result<(), ApiError> {
    tx.execute(
        "UPDATE runs SET state = ?1, played = played OR ?2, reason = COALESCE(?3, reason) WHERE id = ?4",
        params![to.as_str(), to == RunState::Playing, reason.map(|r| cut(r, 400)), run],
    )
    .db()?;
    Ok(())
}

fn cut(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

fn by_key(
    tx: &Transaction<'_>,
    account: &str,
    key: &str,
) -> Result<Option<(i64, String)>, ApiError> {
    tx.query_row(
        "SELECT id, body_sha256 FROM hosted WHERE account = ?1 AND idempotency_key = ?2",
        params![account, key],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
    .optional()
    .db()
}

/// The row id of playtest `id` of `game` (or `key:KEY`: the one that
/// admission key made), if it is `account`'s; else 404 (the same answer
/// whether it exists or is another's).
fn owned(tx: &Transaction<'_>, account: &str, game: &str, id: &str) -> Result<i64, ApiError> {
    let missing = || ApiError::not_found(&format!("hosted playtest `{id}` of game `{game}`"));
    let n = match id.strip_prefix("key:") {
        Some(key) => by_key(tx, account, key)?.ok_or_else(missing)?.0,
        None => parse_playtest_id(id).ok_or_else(missing)?,
    };
    tx.query_row(
        "SELECT id FROM hosted WHERE id = ?1 AND account = ?2 AND game = ?3",
        params![n, account, game],
        |r| r.get(0),
    )
    .optional()
    .db()?
    .ok_or_else(missing)
}

fn work(tx: &Transaction<'_>, id: i64) -> Result<Work, ApiError> {
    tx.query_row(
        "SELECT account, game, job, build, plan, vars, cells, phase, cancel_requested FROM hosted WHERE id = ?1",
        params![id],
        |r| {
            let vars: String = r.get(5)?;
            let cells: String = r.get(6)?;
            let phase: String = r.get(7)?;
            Ok(Work {
                id,
                account: r.get(0)?,
                game: r.get(1)?,
                job: r.get(2)?,
                build: r.get(3)?,
                plan: r.get(4)?,
                vars: serde_json::from_str(&vars).unwrap_or_default(),
                cells: serde_json::from_str(&cells).unwrap_or_default(),
                phase: Phase::parse(&phase).unwrap_or(Phase::Failed),
                cancel_requested: r.get(8)?,
            })
        },
    )
    .db()
}

fn view(tx: &Transaction<'_>, id: i64, replayed: bool) -> Result<Playtest, ApiError> {
    let w = work(tx, id)?;
    let (reason, outcome, created, updated): (Option<String>, Option<String>, i64, i64) = tx
        .query_row(
            "SELECT reason, outcome, created_at, updated_at FROM hosted WHERE id = ?1",
            params![id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .db()?;
    let job = job_view(tx, w.job)?;
    let cells = w
        .cells
        .iter()
        .zip(&job.runs)
        .map(|(cell, run)| PlaytestCell {
            id: cell.id.clone(),
            persona: cell.persona.clone(),
            controller: cell.controller.clone(),
            run_id: run.id.clone(),
            state: run.state.as_str().to_owned(),
            actions_taken: run.actions_taken,
            played: run.played,
        })
        .collect();
    Ok(Playtest {
        id: playtest_id(id),
        game: w.game,
        phase: w.phase,
        reason,
        job_id: job.id,
        build: w.build,
        plan: w.plan,
        cells,
        charged_cents: job.charged_cents,
        refunded_cents: job.refunded_cents,
        settlement: job.settlement,
        cancel_requested: w.cancel_requested,
        outcome: outcome.and_then(|o| serde_json::from_str(&o).ok()),
        replayed,
        created_at: rfc3339(created),
        updated_at: rfc3339(updated),
    })
}

/// The sha256 an admission's body is kept under.
pub fn admission_sha256(body: &crate::backend::hosted::AdmitRequest) -> String {
    sha256_hex(serde_json::to_string(body).unwrap_or_default().as_bytes())
}

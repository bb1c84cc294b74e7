//! Quotes, jobs and settlements: estimate, register, finish, get job, show.
//! A quote is never stored: `quotes` signs and verifies its id.

use rusqlite::{OptionalExtension, Transaction, params};

use super::{
    AccountView, Caller, Db as _, JobRow, Ledger, LedgerView, QUOTE_SECONDS, RunRow, TokenRow,
    UploadRow, authenticate, balance_of, check_text, entry, quotes, rfc3339, rows, sha256_hex,
};
use crate::backend::api::{
    AggregateCompleteRequest, ApiError, Estimate, EstimateRequest, FileDigest, Finished, JobRef,
    JobView, RegisterRequest, Registered, RunState, RunView, Settlement, Token,
};
use crate::backend::endpoint::Endpoint;

/// `job-12` → 12; anything else names no job.
pub(super) fn parse_id(prefix: &str, id: &str) -> Option<i64> {
    id.strip_prefix(prefix)?
        .strip_prefix('-')?
        .parse()
        .ok()
        .filter(|n| *n > 0)
}

pub(super) fn job_id(n: i64) -> String {
    format!("job-{n}")
}

pub(super) fn run_id(n: i64) -> String {
    format!("run-{n}")
}

/// The cells, modules and run length of a request: what a quote prices.
fn cells_sha256(request: &EstimateRequest) -> String {
    sha256_hex(&serde_json::to_vec(request).unwrap_or_default())
}

/// The canonical body of a register: the game and the typed body, fields in
/// declaration order.
fn register_body(game: &str, request: &RegisterRequest) -> serde_json::Value {
    serde_json::json!({ "game": game, "request": request })
}

/// The job `reference` names, if it is the caller's: its row id and state.
pub(super) fn owned_job(
    tx: &Transaction<'_>,
    caller: &Caller,
    reference: &JobRef,
) -> Result<(i64, String), ApiError> {
    let missing = || {
        ApiError::not_found(&format!(
            "job `{}` of game `{}`",
            reference.job, reference.game
        ))
    };
    let id = parse_id("job", &reference.job).ok_or_else(missing)?;
    tx.query_row(
        "SELECT id, state FROM jobs WHERE id = ?1 AND account = ?2 AND game = ?3",
        params![id, caller.account, reference.game],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
    .optional()
    .db()?
    .ok_or_else(missing)
}

const RUN_COLUMNS: &str =
    "id, job, persona, controller, state, price_cents, played, actions_taken, reason";

fn run_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<RunView> {
    let state: String = r.get(4)?;
    Ok(RunView {
        id: run_id(r.get(0)?),
        job_id: job_id(r.get(1)?),
        persona: r.get(2)?,
        controller: r.get(3)?,
        state: RunState::parse(&state).unwrap_or(RunState::Failed),
        price_cents: r.get(5)?,
        played: r.get(6)?,
        actions_taken: r.get(7)?,
        reason: r.get(8)?,
    })
}

pub(super) fn run_view(tx: &Transaction<'_>, run: i64) -> Result<RunView, ApiError> {
    tx.query_row(
        &format!("SELECT {RUN_COLUMNS} FROM runs WHERE id = ?1"),
        params![run],
        run_row,
    )
    .db()
}

/// Every run of `job`, in one query (a job may hold thousands).
fn runs_of(tx: &Transaction<'_>, job: i64) -> Result<Vec<RunView>, ApiError> {
    rows(
        tx,
        &format!("SELECT {RUN_COLUMNS} FROM runs WHERE job = ?1 ORDER BY id"),
        params![job],
        run_row,
    )
}

fn settlement(tx: &Transaction<'_>, job: i64) -> Result<Option<Settlement>, ApiError> {
    tx.query_row(
        "SELECT charged_cents, refunded_cents, refunded_runs, settled_at FROM settlements WHERE job = ?1",
        params![job],
        |r| {
            let charged: i64 = r.get(0)?;
            let refunded: i64 = r.get(1)?;
            let runs: String = r.get(2)?;
            Ok(Settlement {
                job_id: job_id(job),
                charged_cents: charged,
                refunded_cents: refunded,
                net_cents: charged - refunded,
                refunded_runs: serde_json::from_str(&runs).unwrap_or_default(),
                settled_at: rfc3339(r.get(3)?),
            })
        },
    )
    .optional()
    .db()
}

pub(super) fn job_view(tx: &Transaction<'_>, job: i64) -> Result<JobView, ApiError> {
    let (game, key, state, price, charged, refunded, published): (
        String,
        String,
        String,
        i64,
        i64,
        i64,
        bool,
    ) = tx
        .query_row(
            "SELECT game, idempotency_key, state, price_cents, charged_cents, refunded_cents,
                    EXISTS (SELECT 1 FROM aggregates WHERE job = jobs.id)
             FROM jobs WHERE id = ?1",
            params![job],
            |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                    r.get(6)?,
                ))
            },
        )
        .db()?;
    let runs = runs_of(tx, job)?;
    Ok(JobView {
        id: job_id(job),
        game,
        idempotency_key: key,
        state,
        price_cents: price,
        charged_cents: charged,
        refunded_cents: refunded,
        runs,
        settlement: settlement(tx, job)?,
        aggregate_published: published,
    })
}

/// The top-level fields of two JSON objects that differ.
fn differing_fields(a: &serde_json::Value, b: &serde_json::Value) -> Vec<String> {
    let (Some(a), Some(b)) = (
        a.get("request").and_then(|v| v.as_object()),
        b.get("request").and_then(|v| v.as_object()),
    ) else {
        return Vec::new();
    };
    let mut names: Vec<String> = a
        .keys()
        .chain(b.keys())
        .filter(|k| a.get(*k) != b.get(*k))
        .cloned()
        .collect();
    names.sort();
    names.dedup();
    names
}

impl Ledger {
    /// [`Endpoint::Estimate`]: prices the cells. The quote holds
    /// for [`QUOTE_SECONDS`] and is not stored: its id is signed (see
    /// `quotes`), so this is a read and leaves the file as it was.
    pub fn estimate(
        &self,
        token: &Token,
        game: &str,
        request: &EstimateRequest,
    ) -> Result<Estimate, ApiError> {
        check_text("game", game)?;
        self.check_cells(&request.cells)?;
        self.read(|tx, now| {
            let caller = authenticate(tx, token)?;
            caller.may(Endpoint::Estimate)?;
            let priced = self.prices.price(request)?;
            let balance = balance_of(tx, &caller.account)?.unwrap_or(0);
            let expires_at = now + QUOTE_SECONDS;
            Ok(Estimate {
                quote_id: quotes::quote_id(
                    &self.quote_secret,
                    &caller.account,
                    game,
                    &cells_sha256(request),
                    priced.total_cents,
                    expires_at,
                ),
                estimate_cents: priced.total_cents,
                balance_cents: balance,
                ok: balance >= priced.total_cents,
                breakdown: priced.lines,
                expires_at: rfc3339(expires_at),
            })
        })
    }

    /// [`Endpoint::Register`] with `key` its Idempotency-Key: charges the
    /// quote once and creates one queued run per cell. See the module doc
    /// for the order of the checks.
    #[expect(
        clippy::too_many_lines,
        reason = "the checks of a charge in their order, in one transaction, read best in one place"
    )]
    pub fn register(
        &self,
        token: &Token,
        game: &str,
        key: &str,
        request: &RegisterRequest,
    ) -> Result<Registered, ApiError> {
        if key.is_empty() || key.len() > 200 {
            return Err(ApiError::invalid_request(
                "an Idempotency-Key of 1 to 200 characters is required",
            ));
        }
        check_text("Idempotency-Key", key)?;
        check_text("game", game)?;
        self.check_cells(&request.cells)?;
        let body = register_body(game, request);
        let body_text = body.to_string();
        let body_sha = sha256_hex(body_text.as_bytes());
        let busy = || {
            ApiError::new(
                409,
                "charge_in_progress",
                "another register holds the ledger right now; retry with the same Idempotency-Key and body",
            )
        };
        self.transact(rusqlite::TransactionBehavior::Immediate, busy, |tx, now| {
            let caller = authenticate(tx, token)?;
            caller.may(Endpoint::Register)?;
            let stored: Option<(i64, String, String)> = tx
                .query_row(
                    "SELECT id, body_sha256, body FROM jobs WHERE account = ?1 AND idempotency_key = ?2",
                    params![caller.account, key],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                )
                .optional()
                .db()?;
            if let Some((job, sha, first)) = stored {
                if sha == body_sha {
                    return Ok(Registered {
                        job: job_view(tx, job)?,
                        replayed: true,
                        balance_cents: balance_of(tx, &caller.account)?.unwrap_or(0),
                    });
                }
                let first: serde_json::Value = serde_json::from_str(&first).unwrap_or_default();
                let differs = differing_fields(&first, &body);
                return Err(ApiError::new(422, "idempotency_mismatch", format!(
                        "the Idempotency-Key `{key}` already bought {} with another body (differs: {}); \
                         resend the first body, or use a new key for a new job",
                        job_id(job),
                        if differs.is_empty() { "the game".to_owned() } else { differs.join(", ") }
                    ))
                    .with(|d| d.differs = differs));
            }
            let estimate = EstimateRequest {
                cells: request.cells.clone(),
                modules: request.modules.clone(),
                run_length: request.run_length,
            };
            let priced = self.prices.price(&estimate)?;
            let cells = cells_sha256(&estimate);
            let invalid = |why: &str| {
                ApiError::new(
                    422,
                    "quote_invalid",
                    format!(
                        "the quote id `{}` {why}; estimate again and confirm that price",
                        request.quote_id
                    ),
                )
            };
            let claim = quotes::parse(&request.quote_id)
                .ok_or_else(|| invalid("is not a quote id this ledger gives"))?;
            // The id is verified before anything is compared with it, so a
            // made-up id learns nothing (not even the price of its cells).
            if !claim.verifies(&self.quote_secret, &caller.account, game) {
                return Err(invalid(&format!(
                    "was not given by this ledger to account `{}` for game `{game}` (it was altered, or comes from another ledger or account)",
                    caller.account
                )));
            }
            let price_changed = |why: String| {
                ApiError::new(409, "price_changed", why)
                    .with(|d| d.price_cents = Some(priced.total_cents))
            };
            if !claim.prices(&cells) {
                return Err(price_changed(format!(
                    "the quote `{}` priced other cells, modules or run length; estimate these and confirm that price",
                    request.quote_id
                )));
            }
            let (quote_cents, expires_at) = (claim.price_cents, claim.expires_at);
            if now > expires_at {
                return Err(ApiError::new(
                    409,
                    "quote_expired",
                    format!(
                        "the quote `{}` expired at {}; estimate again and confirm the new price",
                        request.quote_id,
                        rfc3339(expires_at)
                    ),
                ));
            }
            if priced.total_cents != quote_cents {
                return Err(price_changed(format!(
                    "the price list changed since the quote: {quote_cents} cents then, {} now; estimate again",
                    priced.total_cents
                )));
            }
            if request.confirm_price_cents != quote_cents {
                return Err(price_changed(format!(
                    "confirm_price_cents is {} but the quote is {quote_cents} cents; confirm the quoted price",
                    request.confirm_price_cents
                )));
            }
            self.quotas.check_open_jobs(tx, &caller.account)?;
            let balance = balance_of(tx, &caller.account)?.unwrap_or(0);
            if balance < quote_cents {
                return Err(ApiError::new(
                        402,
                        "insufficient_balance",
                        format!(
                            "the job costs {quote_cents} cents and the balance is {balance}; top up (`gameplan ledger topup {} CENTS`) or buy fewer cells",
                            caller.account
                        ),
                    )
                    .with(|d| {
                        d.price_cents = Some(quote_cents);
                        d.balance_cents = Some(balance);
                    }));
            }
            tx.execute(
                "INSERT INTO jobs (account, game, idempotency_key, body_sha256, body, state,
                                   price_cents, charged_cents, max_actions, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, 'open', ?6, ?6, ?7, ?8)",
                params![caller.account, game, key, body_sha, body_text, quote_cents, priced.max_actions, now],
            )
            .db()?;
            let job = tx.last_insert_rowid();
            let mut insert = tx
                .prepare_cached(
                    "INSERT INTO runs (job, persona, controller, state, price_cents)
                     VALUES (?1, ?2, ?3, 'queued', ?4)",
                )
                .db()?;
            for cell in &request.cells {
                insert
                    .execute(params![job, cell.persona, cell.controller, priced.per_cell_cents])
                    .db()?;
            }
            drop(insert);
            tx.execute(
                "UPDATE accounts SET balance_cents = balance_cents - ?1 WHERE id = ?2",
                params![quote_cents, caller.account],
            )
            .db()?;
            entry(tx, &caller.account, Some(job), "charge", quote_cents, now)?;
            Ok(Registered {
                job: job_view(tx, job)?,
                replayed: false,
                balance_cents: balance - quote_cents,
            })
        })
    }

    /// [`Endpoint::Finish`]: settles once. Runs still open end
    /// `canceled`; every run that never reached `playing` is refunded. A
    /// second call returns the first settlement and moves nothing.
    pub fn finish(&self, token: &Token, reference: &JobRef) -> Result<Finished, ApiError> {
        self.write(|tx, now| {
            let caller = authenticate(tx, token)?;
            caller.may(Endpoint::Finish)?;
            let (job, _) = owned_job(tx, &caller, reference)?;
            settle(tx, &caller.account, job, now)
        })
    }

    /// [`Endpoint::GetJob`].
    pub fn get_job(&self, token: &Token, reference: &JobRef) -> Result<JobView, ApiError> {
        self.read(|tx, _| {
            let caller = authenticate(tx, token)?;
            caller.may(Endpoint::GetJob)?;
            let (job, _) = owned_job(tx, &caller, reference)?;
            job_view(tx, job)
        })
    }
}

/// Settles `job` of `account` once (see [`Ledger::finish`]): a second call
/// returns the first settlement and moves nothing. Also how the hosted
/// worker settles a playtest.
pub(super) fn settle(
    tx: &Transaction<'_>,
    account: &str,
    job: i64,
    now: i64,
) -> Result<Finished, ApiError> {
    if let Some(settled) = settlement(tx, job)? {
        return Ok(Finished {
            settlement: settled,
            replayed: true,
            balance_cents: balance_of(tx, account)?.unwrap_or(0),
        });
    }
    // What is refunded follows the ledger's own record alone: a run
    // the ledger never saw play (see `played` in `runs`) is refunded,
    // whatever else its client said of it.
    let mut refunded: i64 = 0;
    let mut refunded_runs = Vec::new();
    for view in runs_of(tx, job)?.into_iter().filter(|v| !v.played) {
        refunded = refunded.checked_add(view.price_cents).ok_or_else(|| {
            ApiError::unavailable("the job's refunds add up past what the ledger holds")
        })?;
        // A refunded run keeps no files: stored for free otherwise.
        if let Some(run) = parse_id("run", &view.id) {
            super::quotas::drop_files(tx, job, run)?;
        }
        refunded_runs.push(view.id);
    }
    let open: Vec<&str> = RunState::ALL
        .into_iter()
        .filter(|s| !s.is_terminal())
        .map(RunState::as_str)
        .collect();
    tx.execute(
        &format!(
            "UPDATE runs SET state = 'canceled', reason = ?1 WHERE job = ?2 AND state IN ({})",
            open.iter()
                .map(|s| format!("'{s}'"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        params!["the job was finished before this run ended", job],
    )
    .db()?;
    let charged: i64 = tx
        .query_row(
            "SELECT charged_cents FROM jobs WHERE id = ?1",
            params![job],
            |r| r.get(0),
        )
        .db()?;
    tx.execute(
        "UPDATE jobs SET state = 'settled', refunded_cents = ?1 WHERE id = ?2",
        params![refunded, job],
    )
    .db()?;
    tx.execute(
        "INSERT INTO settlements (job, charged_cents, refunded_cents, refunded_runs, settled_at)
         VALUES (?1, ?2, ?3, ?4, ?5)",
        params![
            job,
            charged,
            refunded,
            serde_json::to_string(&refunded_runs).unwrap_or_default(),
            now
        ],
    )
    .db()?;
    if refunded > 0 {
        tx.execute(
            "UPDATE accounts SET balance_cents = balance_cents + ?1 WHERE id = ?2",
            params![refunded, account],
        )
        .db()?;
        entry(tx, account, Some(job), "refund", refunded, now)?;
    }
    Ok(Finished {
        settlement: settlement(tx, job)?
            .ok_or_else(|| ApiError::unavailable("the settlement was not stored"))?,
        replayed: false,
        balance_cents: balance_of(tx, account)?.unwrap_or(0),
    })
}

/// The sums of every account's entries by kind (topup, charge, refund),
/// added in i128 in one pass: `SQLite`'s `SUM` fails on an i64 overflow, and
/// `show` must read any ledger, also one written before topups were
/// bounded.
fn entry_sums(
    tx: &Transaction<'_>,
) -> Result<std::collections::HashMap<(String, String), i128>, ApiError> {
    let mut sums = std::collections::HashMap::new();
    let mut statement = tx
        .prepare("SELECT account, kind, cents FROM entries")
        .db()?;
    let mut rows = statement.query([]).db()?;
    while let Some(row) = rows.next().db()? {
        let key: (String, String) = (row.get(0).db()?, row.get(1).db()?);
        let cents: i64 = row.get(2).db()?;
        *sums.entry(key).or_insert(0) += i128::from(cents);
    }
    Ok(sums)
}

/// An account's lifetime topups (for the topup's bound).
pub(super) fn lifetime_topups(tx: &Transaction<'_>, account: &str) -> Result<i128, ApiError> {
    let mut statement = tx
        .prepare_cached("SELECT cents FROM entries WHERE account = ?1 AND kind = 'topup'")
        .db()?;
    let mut rows = statement.query(params![account]).db()?;
    let mut sum: i128 = 0;
    while let Some(row) = rows.next().db()? {
        sum += i128::from(row.get::<_, i64>(0).db()?);
    }
    Ok(sum)
}

pub(super) fn show(tx: &Transaction<'_>) -> Result<LedgerView, ApiError> {
    let accounts: Vec<(String, i64)> = rows(
        tx,
        "SELECT id, balance_cents FROM accounts ORDER BY id",
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    let sums = entry_sums(tx)?;
    let mut account_views = Vec::new();
    for (id, balance) in accounts {
        let sum = |kind: &str| {
            sums.get(&(id.clone(), kind.to_owned()))
                .copied()
                .unwrap_or(0)
        };
        let (topups, charged, refunded) = (sum("topup"), sum("charge"), sum("refund"));
        let cents = |sum: i128| i64::try_from(sum).unwrap_or(i64::MAX);
        account_views.push(AccountView {
            adds_up: i128::from(balance) == topups - charged + refunded
                && [topups, charged, refunded]
                    .iter()
                    .all(|s| i64::try_from(*s).is_ok()),
            id,
            balance_cents: balance,
            topups_cents: cents(topups),
            charged_cents: cents(charged),
            refunded_cents: cents(refunded),
        });
    }
    let jobs: Vec<(i64, String)> = rows(tx, "SELECT id, account FROM jobs ORDER BY id", [], |r| {
        Ok((r.get(0)?, r.get(1)?))
    })?;
    let mut job_rows = Vec::new();
    for (job, account) in jobs {
        let view = job_view(tx, job)?;
        job_rows.push(JobRow {
            id: view.id,
            account,
            game: view.game,
            idempotency_key: view.idempotency_key,
            state: view.state,
            price_cents: view.price_cents,
            charged_cents: view.charged_cents,
            refunded_cents: view.refunded_cents,
            settlements: view.settlement.into_iter().collect(),
            uploads: uploads_of(tx, job)?,
            aggregate: aggregate_of(tx, job)?,
            runs: view
                .runs
                .into_iter()
                .map(|r| RunRow {
                    id: r.id,
                    persona: r.persona,
                    controller: r.controller,
                    state: r.state.as_str().to_owned(),
                    price_cents: r.price_cents,
                    played: r.played,
                    actions_taken: r.actions_taken,
                })
                .collect(),
        });
    }
    let tokens = rows(
        tx,
        "SELECT account, scopes, created_at, revoked_at FROM tokens ORDER BY created_at, account",
        [],
        |r| {
            let scopes: String = r.get(1)?;
            let revoked: Option<i64> = r.get(3)?;
            Ok(TokenRow {
                account: r.get(0)?,
                scopes: scopes.split(',').map(str::to_owned).collect(),
                created_at: rfc3339(r.get(2)?),
                revoked_at: revoked.map(rfc3339),
            })
        },
    )?;
    Ok(LedgerView {
        accounts: account_views,
        jobs: job_rows,
        tokens,
    })
}

/// Every file uploaded to `job`, for `show`: by run, then name.
pub(super) fn uploads_of(tx: &Transaction<'_>, job: i64) -> Result<Vec<UploadRow>, ApiError> {
    rows(
        tx,
        "SELECT run, name, size, sha256 FROM uploads WHERE job = ?1 ORDER BY run, name",
        params![job],
        |r| {
            let run: i64 = r.get(0)?;
            Ok(UploadRow {
                // Job files are stored under run 0 (see `upload`).
                run: (run != 0).then(|| run_id(run)),
                name: r.get(1)?,
                size: r.get(2)?,
                sha256: r.get(3)?,
            })
        },
    )
}

/// The digests `job`'s aggregate was published with, for `show`.
pub(super) fn aggregate_of(
    tx: &Transaction<'_>,
    job: i64,
) -> Result<Option<AggregateCompleteRequest>, ApiError> {
    tx.query_row(
        "SELECT md_size, md_sha256, json_size, json_sha256 FROM aggregates WHERE job = ?1",
        params![job],
        |r| {
            Ok(AggregateCompleteRequest {
                md: FileDigest {
                    size: r.get(0)?,
                    sha256: r.get(1)?,
                },
                json: FileDigest {
                    size: r.get(2)?,
                    sha256: r.get(3)?,
                },
            })
        },
    )
    .optional()
    .db()
}

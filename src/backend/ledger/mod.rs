//! The ledger: every money rule, over one `SQLite` file (docs/money.md ›
//! The ledger). The `local` backend calls it directly; `gameplan serve`
//! (`crate::server`) puts thin HTTP routes in front of the same methods, so
//! both answer alike.
//!
//! It knows nothing of plans, steps or playing: it holds accounts and their
//! balances, bearer tokens (sha256 only), a price list, jobs, runs,
//! uploads, aggregates and settlements; quotes are signed, not stored.
//!
//! # Design
//!
//! - **One call, one transaction.** Every method is one `BEGIN IMMEDIATE`
//!   transaction (reads a deferred one; `whoami` and `estimate` are reads
//!   and write nothing at all, so a run that prices and then stops leaves
//!   the file byte-for-byte as it was): its checks and its writes see one
//!   state, and a crash leaves either all of a call or none. WAL lets readers
//!   go on while one writer holds the file: writes go through one writer
//!   connection, reads through a few read connections of their own
//!   (`pool`), so a read waits behind neither a write nor another read
//!   (one tenant reading a 10,000-run job does not hold up another's
//!   `whoami`). The busy timeout makes writers queue rather than fail. A register that still finds the file locked
//!   when the timeout runs out answers 409 `charge_in_progress`: the holder
//!   may be a register with the same key, so the caller must retry with the
//!   same key and body, never a new key.
//! - **Charged at register, refunded at finish.** Each move of a balance is
//!   one row in `entries` (topup, charge, refund) in the transaction that
//!   moves it, so `balance = topups − charged + refunded` always holds and
//!   `gameplan ledger show` can prove it.
//! - **Idempotency.** A job is keyed by (account, Idempotency-Key) and
//!   remembers the sha256 of its canonical request body (the game and the
//!   typed body serialized in field order). Same key and body: the stored
//!   job, `replayed: true`, nothing charged. Same key, other body: 422 naming
//!   the fields that differ. The check comes before the quote's, so a resume
//!   after the quote expired still gets its job back.
//! - **Retries are harmless everywhere.** A transition to the state the run
//!   is in, a complete with the state it already has, the same aggregate
//!   again and a second finish all answer what the first did and change
//!   nothing.
//! - **Uploads live in the database** (`blobs`, keyed by sha256; `uploads`
//!   names them per run): the blob and the row naming it commit together,
//!   so there is never a row without its bytes or an orphan file, and the
//!   whole ledger is one file to back up. Cell files are small (reports,
//!   transcripts, traces); a blob directory would only pay off for video.

pub mod hosted;
mod jobs;
mod pool;
mod prices;
pub mod quotas;
mod quotes;
pub mod runs;
mod schema;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, Transaction, TransactionBehavior, params};
use serde::Serialize;
use sha2::{Digest, Sha256};

pub use prices::{DEMO_PRICES, PriceList};
pub use quotas::{MAX_OPEN_JOBS, MAX_RUN_BYTES, MAX_RUN_FILES, Quotas};

use super::api::{ApiError, SCOPES, Settlement, Token, Whoami};
use super::endpoint::Endpoint;

/// The account a new ledger starts with.
pub const DEMO_ACCOUNT: &str = "demo";
/// Its balance: $100.
pub const DEMO_BALANCE_CENTS: i64 = 10_000;
/// The demo account's token, holding every scope. It is public on purpose:
/// the embedded ledger is a demo on the user's own disk. Only its sha256 is
/// stored, like every token's.
pub const DEMO_TOKEN: &str = "gp_demo_local_ledger";
/// How long a quote holds.
pub const QUOTE_SECONDS: i64 = 15 * 60;
/// Cells one job may hold unless the ledger is opened with another cap
/// (`gameplan serve --max-cells`): a job's runs are rows read and written
/// in one transaction, which holds the ledger for every account meanwhile.
pub const MAX_CELLS_PER_JOB: usize = 10_000;
/// How long a writer waits for another to finish.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Where "now" comes from: the system clock, or a settable one in tests.
#[derive(Clone, Default)]
pub enum Clock {
    #[default]
    System,
    /// Unix seconds, set by whoever holds the `Arc`.
    Fixed(Arc<AtomicI64>),
}

impl Clock {
    fn now(&self) -> i64 {
        match self {
            Clock::System => std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX)),
            Clock::Fixed(at) => at.load(Ordering::SeqCst),
        }
    }
}

/// What a ledger file starts with when it is created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NewLedger {
    /// The demo account, its balance and the public [`DEMO_TOKEN`]: the
    /// embedded `local` backend's ledger, on the user's own disk.
    Demo,
    /// Nothing: accounts and tokens are made with `gameplan ledger token`.
    /// A ledger that `gameplan serve` creates (the demo token is public).
    Empty,
}

/// One ledger file, opened. `Send + Sync`: writes queue on its one writer
/// connection; reads take one of a few read connections ([`pool`]), so a
/// read waits for neither a write nor another read.
pub struct Ledger {
    path: PathBuf,
    writer: Mutex<Connection>,
    readers: pool::Readers,
    clock: Clock,
    prices: PriceList,
    /// What quote ids are signed with (`meta.quote_secret`): read once at
    /// open, so pricing needs no write and no extra query.
    quote_secret: Vec<u8>,
    /// The most cells one job may hold ([`MAX_CELLS_PER_JOB`] by default).
    max_cells: usize,
    /// Files and bytes per run, open jobs per account.
    quotas: Quotas,
}

/// What a failed `SQLite` call means to the caller.
trait Db<T> {
    fn db(self) -> Result<T, ApiError>;
}

impl<T> Db<T> for rusqlite::Result<T> {
    fn db(self) -> Result<T, ApiError> {
        self.map_err(|e| {
            ApiError::unavailable(format!("the ledger could not be read or written: {e}"))
        })
    }
}

/// Every row `sql` yields for `params`, each read by `row`: one statement
/// (cached, as the ledger asks the same few again and again) run to its end.
fn rows<T>(
    tx: &Transaction<'_>,
    sql: &str,
    params: impl rusqlite::Params,
    row: impl FnMut(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
) -> Result<Vec<T>, ApiError> {
    let mut statement = tx.prepare_cached(sql).db()?;
    statement
        .query_map(params, row)
        .db()?
        .collect::<Result<_, _>>()
        .db()
}

/// The account behind a token, and what it may do.
struct Caller {
    account: String,
    scopes: Vec<String>,
}

impl Caller {
    /// Whether the caller may call `endpoint`: the first scope it needs
    /// and the caller lacks is refused (403, naming it).
    fn may(&self, endpoint: Endpoint) -> Result<(), ApiError> {
        match endpoint
            .scopes()
            .iter()
            .find(|scope| !self.scopes.iter().any(|held| held == *scope))
        {
            Some(missing) => Err(ApiError::missing_scope(missing)),
            None => Ok(()),
        }
    }
}

impl Ledger {
    /// Opens (creating on first use) the embedded backend's ledger at
    /// `path`: a new one holds the demo account with its balance and
    /// [`DEMO_TOKEN`] (see [`Ledger::open_with`]).
    pub fn open(path: &Path) -> Result<Ledger, ApiError> {
        Ledger::open_with(path, NewLedger::Demo)
    }

    /// Opens (creating on first use) the ledger at `path`: WAL, a busy
    /// timeout, and the schema migrated to this version. `new` says what a
    /// file created here starts with; an existing file keeps what it has.
    pub fn open_with(path: &Path, new: NewLedger) -> Result<Ledger, ApiError> {
        let cannot = |e: &dyn std::fmt::Display| {
            ApiError::unavailable(format!(
                "cannot open the ledger {}: {e}; check the path and its permissions",
                path.display()
            ))
        };
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|e| cannot(&e))?;
        }
        let mut conn = Connection::open(path).map_err(|e| cannot(&e))?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(|e| cannot(&e))?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(|e| cannot(&e))?;
        // WAL with synchronous=FULL: a commit the caller saw survives power loss.
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(|e| cannot(&e))?;
        conn.pragma_update(None, "foreign_keys", "ON")
            .map_err(|e| cannot(&e))?;
        schema::migrate(&mut conn, Clock::System.now(), new == NewLedger::Demo)
            .map_err(|e| cannot(&e))?;
        let quote_secret: String = conn
            .query_row(
                "SELECT value FROM meta WHERE key = ?1",
                params![schema::QUOTE_SECRET],
                |r| r.get(0),
            )
            .map_err(|e| cannot(&format!("its quote secret cannot be read: {e}")))?;
        Ok(Ledger {
            path: path.to_owned(),
            writer: Mutex::new(conn),
            readers: pool::Readers::new(path),
            clock: Clock::System,
            prices: DEMO_PRICES,
            quote_secret: quote_secret.into_bytes(),
            max_cells: MAX_CELLS_PER_JOB,
            quotas: Quotas::default(),
        })
    }

    /// The same ledger reading "now" from `clock`.
    #[must_use]
    pub fn with_clock(mut self, clock: Clock) -> Ledger {
        self.clock = clock;
        self
    }

    /// The same ledger waiting at most `wait` for another writer.
    pub fn with_busy_timeout(self, wait: Duration) -> Result<Ledger, ApiError> {
        self.writer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .busy_timeout(wait)
            .db()?;
        Ok(self)
    }

    /// The same ledger pricing by `prices`.
    #[must_use]
    pub fn with_prices(mut self, prices: PriceList) -> Ledger {
        self.prices = prices;
        self
    }

    /// The same ledger refusing jobs of more than `cells` cells.
    #[must_use]
    pub fn with_max_cells(mut self, cells: usize) -> Ledger {
        self.max_cells = cells;
        self
    }

    /// The same ledger enforcing `quotas`.
    #[must_use]
    pub fn with_quotas(mut self, quotas: Quotas) -> Ledger {
        self.quotas = quotas;
        self
    }

    /// Refuses a job's cells beyond the cap (naming it) and cells whose
    /// persona or controller holds a control character.
    fn check_cells(&self, cells: &[crate::backend::api::Cell]) -> Result<(), ApiError> {
        if cells.len() > self.max_cells {
            return Err(ApiError::new(
                422,
                "too_many_cells",
                format!(
                    "the job has {} cells; this ledger takes at most {} per job (`gameplan serve --max-cells`); split the playtest into smaller jobs",
                    cells.len(),
                    self.max_cells
                ),
            ));
        }
        for (i, cell) in cells.iter().enumerate() {
            check_text(&format!("cells[{i}].persona"), &cell.persona)?;
            check_text(&format!("cells[{i}].controller"), &cell.controller)?;
        }
        Ok(())
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `f` in one transaction on the writer connection: `IMMEDIATE`
    /// when it writes, so it holds the write lock from its first read. Any
    /// error rolls it back.
    fn transact<T>(
        &self,
        behavior: TransactionBehavior,
        busy: fn() -> ApiError,
        f: impl FnOnce(&Transaction<'_>, i64) -> Result<T, ApiError>,
    ) -> Result<T, ApiError> {
        let mut conn = self
            .writer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.run_in(&mut conn, behavior, busy, f)
    }

    /// Runs `f` in one transaction of `behavior` on `conn`.
    fn run_in<T>(
        &self,
        conn: &mut Connection,
        behavior: TransactionBehavior,
        busy: fn() -> ApiError,
        f: impl FnOnce(&Transaction<'_>, i64) -> Result<T, ApiError>,
    ) -> Result<T, ApiError> {
        let tx = conn.transaction_with_behavior(behavior).map_err(|e| {
            if is_busy(&e) {
                busy()
            } else {
                ApiError::unavailable(format!(
                    "the ledger {} could not be locked: {e}",
                    self.path.display()
                ))
            }
        })?;
        let out = f(&tx, self.clock.now())?;
        tx.commit().map_err(|e| {
            if is_busy(&e) {
                busy()
            } else {
                ApiError::unavailable(format!(
                    "the ledger {} could not commit: {e}",
                    self.path.display()
                ))
            }
        })?;
        Ok(out)
    }

    fn write<T>(
        &self,
        f: impl FnOnce(&Transaction<'_>, i64) -> Result<T, ApiError>,
    ) -> Result<T, ApiError> {
        self.transact(TransactionBehavior::Immediate, busy_error, f)
    }

    /// Runs `f` in a read transaction on a read connection: one snapshot
    /// of the last commit, taken without waiting for the writer.
    fn read<T>(
        &self,
        f: impl FnOnce(&Transaction<'_>, i64) -> Result<T, ApiError>,
    ) -> Result<T, ApiError> {
        let mut reader = self.readers.get()?;
        self.run_in(&mut reader, TransactionBehavior::Deferred, busy_error, f)
    }

    /// Whether `token` may call `endpoint`: 401 for a token the ledger does
    /// not know, 403 naming a scope it lacks. What `gameplan serve` asks
    /// before it reads a request's body; each call asks again inside its
    /// own transaction.
    pub fn authorize(&self, token: &Token, endpoint: Endpoint) -> Result<(), ApiError> {
        self.read(|tx, _| authenticate(tx, token)?.may(endpoint))
    }

    /// [`Endpoint::Whoami`].
    pub fn whoami(&self, token: &Token) -> Result<Whoami, ApiError> {
        self.read(|tx, _| {
            let caller = authenticate(tx, token)?;
            Ok(Whoami {
                user: caller.account,
                scopes: caller.scopes,
            })
        })
    }

    /// Adds `cents` to `account`'s balance (`gameplan ledger topup`).
    pub fn topup(&self, account: &str, cents: i64) -> Result<i64, ApiError> {
        if cents <= 0 {
            return Err(ApiError::invalid_request(format!(
                "a topup must be a positive number of cents, not {cents}"
            )));
        }
        self.write(|tx, now| {
            let balance = balance_of(tx, account)?.ok_or_else(|| unknown_account(tx, account))?;
            // Every sum the ledger reports (`show`: topups, charges,
            // refunds) must stay an i64, not only the balance: a refund
            // leaves the balance low while the topups keep growing.
            let topups = jobs::lifetime_topups(tx, account)?;
            let new = balance
                .checked_add(cents)
                .filter(|_| topups.checked_add(i128::from(cents)).is_some_and(|t| t <= i128::from(i64::MAX)))
                .ok_or_else(|| {
                    ApiError::invalid_request(format!(
                        "a topup of {cents} cents would take {account}'s balance or lifetime topups past the largest amount the ledger holds ({} cents); nothing was added",
                        i64::MAX
                    ))
                })?;
            tx.execute(
                "UPDATE accounts SET balance_cents = ?1 WHERE id = ?2",
                params![new, account],
            )
            .db()?;
            entry(tx, account, None, "topup", cents, now)?;
            Ok(new)
        })
    }

    /// Creates a token for `account` (the account too, with no balance, when
    /// it is new) holding `scopes`; returns the token, which is stored only
    /// as its sha256 and cannot be read back.
    pub fn create_token(&self, account: &str, scopes: &[String]) -> Result<NewToken, ApiError> {
        check_text("account", account)?;
        if account.is_empty() || account.len() > 64 || account.chars().any(char::is_whitespace) {
            return Err(ApiError::invalid_request(format!(
                "`{account}` is not an account id: use 1 to 64 characters without spaces; no token was made"
            )));
        }
        if scopes.is_empty() {
            return Err(ApiError::invalid_request(format!(
                "a token needs at least one scope: {}",
                SCOPES.join(", ")
            )));
        }
        for scope in scopes {
            if !SCOPES.contains(&scope.as_str()) {
                return Err(ApiError::invalid_request(format!(
                    "unknown scope `{scope}`: the scopes are {}",
                    SCOPES.join(", ")
                )));
            }
        }
        // Kept in the order of SCOPES, each once, whatever order they came in.
        let scopes: Vec<String> = SCOPES
            .iter()
            .filter(|s| scopes.iter().any(|given| given == *s))
            .map(|s| (*s).to_owned())
            .collect();
        let secret = random_token()
            .map_err(|e| ApiError::unavailable(format!("no randomness for a token: {e}")))?;
        self.write(|tx, now| {
            let created_account = balance_of(tx, account)?.is_none();
            if created_account {
                tx.execute(
                    "INSERT INTO accounts (id, balance_cents) VALUES (?1, 0)",
                    params![account],
                )
                .db()?;
            }
            store_token(tx, account, &secret, &scopes, now)?;
            Ok(NewToken {
                token: Token(secret.clone()),
                account: account.to_owned(),
                created_account,
            })
        })
    }

    /// Revokes `token` (`gameplan ledger token --revoke`): every call
    /// with it is 401 from now on. Answers the account it belonged to.
    pub fn revoke_token(&self, token: &Token) -> Result<String, ApiError> {
        self.write(|tx, now| {
            let hash = sha256_hex(token.0.as_bytes());
            let found: Option<(String, Option<i64>)> = tx
                .query_row(
                    "SELECT account, revoked_at FROM tokens WHERE hash = ?1",
                    params![hash],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()
                .db()?;
            let Some((account, revoked)) = found else {
                return Err(ApiError::not_found(
                    "token in this ledger (is it another ledger's? `gameplan ledger show` lists the tokens by account)",
                ));
            };
            if revoked.is_none() {
                tx.execute(
                    "UPDATE tokens SET revoked_at = ?1 WHERE hash = ?2",
                    params![now, hash],
                )
                .db()?;
            }
            Ok(account)
        })
    }

    /// Everything in the ledger, for `gameplan ledger show`.
    pub fn show(&self) -> Result<LedgerView, ApiError> {
        self.read(|tx, _| jobs::show(tx))
    }
}

/// A token just made: the only time its secret is seen.
#[derive(Debug)]
pub struct NewToken {
    pub token: Token,
    pub account: String,
    pub created_account: bool,
}

/// The whole ledger, for inspection: what `ledger show --json` prints
/// (docs/money.md › Ledger commands).
#[derive(Debug, Clone, Serialize)]
pub struct LedgerView {
    pub accounts: Vec<AccountView>,
    pub jobs: Vec<JobRow>,
    pub tokens: Vec<TokenRow>,
}

#[derive(Debug, Clone, Serialize)]
pub struct AccountView {
    pub id: String,
    pub balance_cents: i64,
    pub topups_cents: i64,
    pub charged_cents: i64,
    pub refunded_cents: i64,
    /// Whether `balance = topups − charged + refunded` holds.
    pub adds_up: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct JobRow {
    pub id: String,
    pub account: String,
    pub game: String,
    pub idempotency_key: String,
    pub state: String,
    pub price_cents: i64,
    pub charged_cents: i64,
    pub refunded_cents: i64,
    pub settlements: Vec<Settlement>,
    pub runs: Vec<RunRow>,
    /// Every file uploaded to the job, by run (the aggregate's have none).
    pub uploads: Vec<UploadRow>,
    /// The published aggregate's digests, once published.
    pub aggregate: Option<crate::backend::api::AggregateCompleteRequest>,
}

/// A file uploaded to a job, as `show` lists it.
#[derive(Debug, Clone, Serialize)]
pub struct UploadRow {
    /// The run it belongs to; `None` for the job's own (the aggregate).
    pub run: Option<String>,
    pub name: String,
    pub size: i64,
    pub sha256: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct RunRow {
    pub id: String,
    pub persona: String,
    pub controller: String,
    pub state: String,
    pub price_cents: i64,
    pub played: bool,
    /// The most actions a heartbeat or complete reported.
    pub actions_taken: i64,
}

/// A token as `show` lists it: never its secret, nor its hash.
#[derive(Debug, Clone, Serialize)]
pub struct TokenRow {
    pub account: String,
    pub scopes: Vec<String>,
    pub created_at: String,
    /// When it was revoked; `None` while it works.
    pub revoked_at: Option<String>,
}

fn busy_error() -> ApiError {
    ApiError::unavailable(
        "the ledger stayed locked by another writer for 5 seconds; try again".to_owned(),
    )
}

fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

/// Lowercase hex sha256.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let digest = Sha256::digest(bytes);
    let mut out = String::with_capacity(64);
    for byte in digest {
        let _ = write!(out, "{byte:02x}");
    }
    out
}

/// RFC 3339 (UTC, seconds) of unix seconds.
pub(crate) fn rfc3339(unix: i64) -> String {
    let at = std::time::UNIX_EPOCH + Duration::from_secs(u64::try_from(unix).unwrap_or(0));
    humantime::format_rfc3339_seconds(at).to_string()
}

/// A new bearer token: `gp_` and 32 random bytes in hex.
fn random_token() -> std::io::Result<String> {
    use std::io::Read as _;
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(format!("gp_{}", &sha256_hex(&bytes)))
}

fn store_token(
    tx: &Transaction<'_>,
    account: &str,
    secret: &str,
    scopes: &[String],
    now: i64,
) -> Result<(), ApiError> {
    tx.execute(
        "INSERT INTO tokens (hash, account, scopes, created_at) VALUES (?1, ?2, ?3, ?4)",
        params![
            sha256_hex(secret.as_bytes()),
            account,
            scopes.join(","),
            now
        ],
    )
    .db()?;
    Ok(())
}

/// The caller behind `token`, or 401.
fn authenticate(tx: &Transaction<'_>, token: &Token) -> Result<Caller, ApiError> {
    if token.0.is_empty() {
        return Err(ApiError::unauthorized());
    }
    let row: Option<(String, String)> = tx
        .query_row(
            "SELECT account, scopes FROM tokens WHERE hash = ?1 AND revoked_at IS NULL",
            params![sha256_hex(token.0.as_bytes())],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()
        .db()?;
    let (account, scopes) = row.ok_or_else(ApiError::unauthorized)?;
    Ok(Caller {
        account,
        scopes: scopes
            .split(',')
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect(),
    })
}

fn balance_of(tx: &Transaction<'_>, account: &str) -> Result<Option<i64>, ApiError> {
    tx.query_row(
        "SELECT balance_cents FROM accounts WHERE id = ?1",
        params![account],
        |r| r.get(0),
    )
    .optional()
    .db()
}

fn unknown_account(tx: &Transaction<'_>, account: &str) -> ApiError {
    let known: Vec<String> = tx
        .prepare("SELECT id FROM accounts ORDER BY id")
        .and_then(|mut s| s.query_map([], |r| r.get(0))?.collect())
        .unwrap_or_default();
    ApiError::new(
        404,
        "not_found",
        format!(
            "no account `{account}` in this ledger (accounts: {}); `gameplan ledger show` lists them",
            known.join(", ")
        ),
    )
}

/// Records one balance move.
fn entry(
    tx: &Transaction<'_>,
    account: &str,
    job: Option<i64>,
    kind: &str,
    cents: i64,
    now: i64,
) -> Result<(), ApiError> {
    tx.execute(
        "INSERT INTO entries (account, job, kind, cents, at) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![account, job, kind, cents, now],
    )
    .db()?;
    Ok(())
}

/// Refuses a text field holding a control character (NUL, ESC, a newline,
/// ...) or a format character (a right-to-left override, a zero-width
/// space: [`crate::text::is_format`]): 400 naming the field. Such text
/// would be stored and later printed raw (`ledger show` writing escape
/// sequences to a terminal, a log line split in two, a name shown
/// reversed or two names that look the same).
pub(crate) fn check_text(field: &str, value: &str) -> Result<(), ApiError> {
    match value.chars().find(|c| crate::text::is_unsafe(*c)) {
        None => Ok(()),
        Some(c) => Err(ApiError::invalid_request(format!(
            "`{field}` holds the {} character {} (U+{:04X}); send printable text (nothing was stored or charged)",
            if c.is_control() {
                "control"
            } else {
                "invisible format"
            },
            c.escape_default(),
            u32::from(c)
        ))),
    }
}

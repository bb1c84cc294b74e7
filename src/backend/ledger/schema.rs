//! The ledger's tables and their migrations: `schema_version` holds how
//! many of [`MIGRATIONS`] were applied; a newer file than this binary knows
//! is refused rather than guessed at.

use rusqlite::{Connection, TransactionBehavior, params};

/// Each entry moves the schema one version up; never edit one that shipped.
const MIGRATIONS: &[&str] = &[
    // 1: the first ledger.
    "
    CREATE TABLE accounts (
        id TEXT PRIMARY KEY,
        balance_cents INTEGER NOT NULL CHECK (balance_cents >= 0)
    );
    CREATE TABLE tokens (
        hash TEXT PRIMARY KEY,
        account TEXT NOT NULL REFERENCES accounts(id),
        scopes TEXT NOT NULL,
        created_at INTEGER NOT NULL
    );
    CREATE TABLE entries (
        id INTEGER PRIMARY KEY,
        account TEXT NOT NULL REFERENCES accounts(id),
        job INTEGER,
        kind TEXT NOT NULL CHECK (kind IN ('topup', 'charge', 'refund')),
        cents INTEGER NOT NULL CHECK (cents >= 0),
        at INTEGER NOT NULL
    );
    CREATE TABLE quotes (
        id INTEGER PRIMARY KEY,
        account TEXT NOT NULL REFERENCES accounts(id),
        game TEXT NOT NULL,
        cells_sha256 TEXT NOT NULL,
        price_cents INTEGER NOT NULL,
        expires_at INTEGER NOT NULL
    );
    CREATE TABLE jobs (
        id INTEGER PRIMARY KEY,
        account TEXT NOT NULL REFERENCES accounts(id),
        game TEXT NOT NULL,
        idempotency_key TEXT NOT NULL,
        body_sha256 TEXT NOT NULL,
        body TEXT NOT NULL,
        state TEXT NOT NULL CHECK (state IN ('open', 'settled')),
        price_cents INTEGER NOT NULL,
        charged_cents INTEGER NOT NULL,
        refunded_cents INTEGER NOT NULL DEFAULT 0,
        max_actions INTEGER NOT NULL,
        created_at INTEGER NOT NULL,
        UNIQUE (account, idempotency_key)
    );
    CREATE TABLE runs (
        id INTEGER PRIMARY KEY,
        job INTEGER NOT NULL REFERENCES jobs(id),
        persona TEXT NOT NULL,
        controller TEXT NOT NULL,
        state TEXT NOT NULL,
        price_cents INTEGER NOT NULL,
        played INTEGER NOT NULL DEFAULT 0,
        actions_taken INTEGER NOT NULL DEFAULT 0,
        checkpoint_step INTEGER,
        reason TEXT,
        quit_reason TEXT,
        report TEXT,
        report_md TEXT
    );
    CREATE TABLE blobs (
        sha256 TEXT PRIMARY KEY,
        size INTEGER NOT NULL,
        data BLOB NOT NULL
    );
    CREATE TABLE uploads (
        job INTEGER NOT NULL REFERENCES jobs(id),
        run INTEGER NOT NULL,
        name TEXT NOT NULL,
        sha256 TEXT NOT NULL REFERENCES blobs(sha256),
        size INTEGER NOT NULL,
        PRIMARY KEY (job, run, name)
    );
    CREATE TABLE aggregates (
        job INTEGER PRIMARY KEY REFERENCES jobs(id),
        md_size INTEGER NOT NULL,
        md_sha256 TEXT NOT NULL,
        json_size INTEGER NOT NULL,
        json_sha256 TEXT NOT NULL
    );
    CREATE TABLE settlements (
        job INTEGER PRIMARY KEY REFERENCES jobs(id),
        charged_cents INTEGER NOT NULL,
        refunded_cents INTEGER NOT NULL,
        refunded_runs TEXT NOT NULL,
        settled_at INTEGER NOT NULL
    );
    ",
    // 2: quotes are stateless (their ids carry a MAC under the file's own
    // secret, see `quotes`), so an estimate writes nothing; `meta` holds
    // the secret, inserted by `migrate`.
    "
    CREATE TABLE meta (
        key TEXT PRIMARY KEY,
        value TEXT NOT NULL
    );
    DROP TABLE quotes;
    ",
    // 3: tokens can be revoked (kept, so `show` lists what was revoked and
    // when); a run remembers when its complete was accepted, after which
    // its files are immutable (a run completed before this version did so
    // when its report was stored).
    "
    ALTER TABLE tokens ADD COLUMN revoked_at INTEGER;
    ALTER TABLE runs ADD COLUMN completed_at INTEGER;
    UPDATE runs SET completed_at = 0 WHERE report IS NOT NULL;
    CREATE INDEX IF NOT EXISTS runs_of_job ON runs (job);
    ",
    // 4: a blob is deleted when the files of a run that never played are
    // (see `quotas::drop_files`), unless another upload names it: found by
    // this index rather than a scan of every upload.
    "
    CREATE INDEX IF NOT EXISTS uploads_by_blob ON uploads (sha256);
    ",
    // 5: hosted playtests: the builds uploaded, and each admitted playtest.
    super::hosted::TABLES,
];

/// The `meta` key of the secret quote ids are signed with.
pub const QUOTE_SECRET: &str = "quote_secret";

/// The schema version this binary writes.
#[expect(clippy::cast_possible_wrap, reason = "a handful of migrations")]
pub const VERSION: i64 = MIGRATIONS.len() as i64;

/// Brings the file to [`VERSION`] in one transaction; seeds the demo
/// account and token when it creates the tables and `demo` is asked for.
pub fn migrate(conn: &mut Connection, now: i64, demo: bool) -> Result<(), String> {
    // A ledger at this version is opened without the write lock, so opening
    // never waits behind a writer.
    let up_to_date: Option<i64> = conn
        .query_row("SELECT MAX(version) FROM schema_version", [], |r| r.get(0))
        .ok()
        .flatten();
    if up_to_date == Some(VERSION) {
        return Ok(());
    }
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|e| e.to_string())?;
    tx.execute_batch("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
        .map_err(|e| e.to_string())?;
    let current: i64 = tx
        .query_row(
            "SELECT COALESCE(MAX(version), 0) FROM schema_version",
            [],
            |r| r.get(0),
        )
        .map_err(|e| e.to_string())?;
    if current > VERSION {
        return Err(format!(
            "it has schema version {current}, newer than this gameplan knows ({VERSION}); use a newer gameplan"
        ));
    }
    if current == VERSION {
        return Ok(());
    }
    for sql in &MIGRATIONS[usize::try_from(current).unwrap_or(0)..] {
        tx.execute_batch(sql).map_err(|e| e.to_string())?;
    }
    if current == 0 && demo {
        seed_demo(&tx, now).map_err(|e| e.message)?;
    }
    if current < 2 {
        let secret = super::quotes::new_secret()
            .map_err(|e| format!("no randomness for the ledger's quote secret: {e}"))?;
        tx.execute(
            "INSERT INTO meta (key, value) VALUES (?1, ?2)",
            params![QUOTE_SECRET, secret],
        )
        .map_err(|e| e.to_string())?;
    }
    tx.execute("DELETE FROM schema_version", [])
        .map_err(|e| e.to_string())?;
    tx.execute(
        "INSERT INTO schema_version (version) VALUES (?1)",
        params![VERSION],
    )
    .map_err(|e| e.to_string())?;
    tx.commit().map_err(|e| e.to_string())
}

/// The demo account, its balance (as a topup, so it adds up) and its token.
fn seed_demo(
    tx: &rusqlite::Transaction<'_>,
    now: i64,
) -> Result<(), crate::backend::api::ApiError> {
    use super::{DEMO_ACCOUNT, DEMO_BALANCE_CENTS, DEMO_TOKEN, Db as _};
    tx.execute(
        "INSERT INTO accounts (id, balance_cents) VALUES (?1, ?2)",
        params![DEMO_ACCOUNT, DEMO_BALANCE_CENTS],
    )
    .db()?;
    super::entry(tx, DEMO_ACCOUNT, None, "topup", DEMO_BALANCE_CENTS, now)?;
    let scopes: Vec<String> = crate::backend::api::SCOPES
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    super::store_token(tx, DEMO_ACCOUNT, DEMO_TOKEN, &scopes, now)
}

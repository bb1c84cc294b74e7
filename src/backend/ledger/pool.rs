//! The ledger's read connections: a few `SQLite` connections to the same
//! file that only read, so a read never waits behind another read or
//! behind the writer.
//!
//! It owns opening them (lazily, at most [`READERS`]), lending one to a
//! read transaction and taking it back.
//!
//! # Why a pool beside the one writer
//!
//! Every ledger call used to take the one connection's lock: one tenant
//! reading its 10,000-run job held it for the whole read, and another's
//! `whoami` waited (0.9 ms became 545 ms). The file is in WAL mode, where
//! readers see the last commit and never block the writer nor each other;
//! only the connection was shared. Writes still go through the one writer
//! connection, so they stay one at a time in this process, in order, and
//! the busy timeout only ever waits for another process.

use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex};

use rusqlite::Connection;

use crate::backend::api::ApiError;

/// Read connections at most: more than the cores a server has, few enough
/// that their descriptors (three each: the file, its WAL, its shared
/// memory) stay a small part of `serve`'s reserve.
pub const READERS: usize = 4;

/// The read connections of one ledger file.
pub(super) struct Readers {
    path: PathBuf,
    state: Mutex<State>,
    returned: Condvar,
}

struct State {
    idle: Vec<Connection>,
    /// Connections opened, lent or idle.
    opened: usize,
}

/// A read connection lent out; it goes back to the pool when dropped.
pub(super) struct Reader<'a> {
    pool: &'a Readers,
    conn: Option<Connection>,
}

impl Deref for Reader<'_> {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        // Some until dropped.
        self.conn.as_ref().unwrap_or_else(|| unreachable!())
    }
}

impl DerefMut for Reader<'_> {
    fn deref_mut(&mut self) -> &mut Connection {
        self.conn.as_mut().unwrap_or_else(|| unreachable!())
    }
}

impl Drop for Reader<'_> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            self.pool.lock().idle.push(conn);
            self.pool.returned.notify_one();
        }
    }
}

impl Readers {
    pub(super) fn new(path: &Path) -> Readers {
        Readers {
            path: path.to_owned(),
            state: Mutex::new(State {
                idle: Vec::new(),
                opened: 0,
            }),
            returned: Condvar::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// An idle read connection, a new one while fewer than [`READERS`]
    /// are open, or the first one returned.
    pub(super) fn get(&self) -> Result<Reader<'_>, ApiError> {
        let mut state = self.lock();
        loop {
            if let Some(conn) = state.idle.pop() {
                return Ok(Reader {
                    pool: self,
                    conn: Some(conn),
                });
            }
            if state.opened < READERS {
                state.opened += 1;
                drop(state);
                // Opened outside the lock: other readers go on meanwhile.
                return match self.open() {
                    Ok(conn) => Ok(Reader {
                        pool: self,
                        conn: Some(conn),
                    }),
                    Err(e) => {
                        self.lock().opened -= 1;
                        Err(e)
                    }
                };
            }
            state = self
                .returned
                .wait(state)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }

    fn open(&self) -> Result<Connection, ApiError> {
        let cannot = |e: rusqlite::Error| {
            ApiError::unavailable(format!(
                "cannot open the ledger {} to read it: {e}",
                self.path.display()
            ))
        };
        let conn = Connection::open(&self.path).map_err(cannot)?;
        conn.busy_timeout(super::BUSY_TIMEOUT).map_err(cannot)?;
        // Reads only, whatever a bug might ask of it: the writer is the one
        // connection that writes.
        conn.pragma_update(None, "query_only", "ON")
            .map_err(cannot)?;
        Ok(conn)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use crate::backend::api::{SCOPES, Token};
    use crate::backend::ledger::Ledger;

    fn ledger() -> (tempfile::TempDir, Arc<Ledger>, Token) {
        let dir = tempfile::tempdir().expect("tempdir");
        let ledger = Ledger::open(&dir.path().join("ledger.sqlite")).expect("ledger");
        let token = ledger
            .create_token("demo", &SCOPES.map(str::to_owned))
            .expect("token")
            .token;
        (dir, Arc::new(ledger), token)
    }

    #[test]
    fn a_read_does_not_wait_for_the_writer_connection() {
        let (_dir, ledger, token) = ledger();
        // The writer held (as a long write would hold it): a read answers.
        let held = ledger.writer.lock().expect("writer");
        let (sent, answered) = std::sync::mpsc::channel();
        let reader = Arc::clone(&ledger);
        std::thread::spawn(move || {
            let _ = sent.send(reader.whoami(&token).map(|w| w.user));
        });
        let user = answered
            .recv_timeout(Duration::from_secs(10))
            .expect("whoami waited for the writer")
            .expect("whoami");
        assert_eq!(user, "demo");
        drop(held);
    }

    #[test]
    fn concurrent_reads_see_whole_commits_while_writes_go_on() {
        let (_dir, ledger, _) = ledger();
        let topping = Arc::clone(&ledger);
        let writes = std::thread::spawn(move || {
            for _ in 0..200 {
                topping.topup("demo", 7).expect("topup");
            }
        });
        let readers: Vec<_> = (0..super::READERS + 2)
            .map(|_| {
                let ledger = Arc::clone(&ledger);
                std::thread::spawn(move || {
                    let mut last = 0;
                    for _ in 0..100 {
                        let view = ledger.show().expect("show");
                        let demo = &view.accounts[0];
                        // Balance and entries move in one transaction: a
                        // snapshot holds both or neither.
                        assert!(demo.adds_up, "{demo:?}");
                        assert!(demo.balance_cents >= last, "went back: {demo:?}");
                        last = demo.balance_cents;
                    }
                })
            })
            .collect();
        writes.join().expect("writes");
        for reader in readers {
            reader.join().expect("reader");
        }
        let end = ledger.show().expect("show");
        assert_eq!(
            end.accounts[0].balance_cents,
            crate::backend::ledger::DEMO_BALANCE_CENTS + 200 * 7
        );
        let opened = ledger.readers.lock().opened;
        assert!(opened <= super::READERS, "{opened} read connections");
    }
}

//! The run's journal writer: the one owner of the journal file during a run.
//!
//! # Design
//!
//! - **Appends are immediate, syncs are shared.** Any task appends a record
//!   under a short lock (one `write` to the kernel, so a step is in the
//!   journal before it can have an effect). One sync task makes records
//!   durable: every [`COMMIT_EVERY`] when plain records are waiting (group
//!   commit), and at once when a durable record is waiting.
//! - **The fsync runs on a blocking thread**, on a duplicate descriptor, so
//!   neither the scheduler nor the steps wait for the disk; appends go on
//!   meanwhile.
//! - **Durable means acknowledged after the sync that covers it.** Records
//!   are numbered ([`Seq`]); a sync covers the records appended before it
//!   began, and a durable request is answered only once a completed sync
//!   covers its number, never on a flag that a later append could outrun.
//! - **A failed sync fails every waiter and every later append**: what is on
//!   disk is unknown, so the run stops and a resume re-reads the file.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{Notify, oneshot};

use crate::journal::run::{Checkpoint, Event};
use crate::journal::{Journal, JournalError, Seq};
use crate::steps::{BoxFuture, CheckpointSink};

/// How often plain records are synced to disk (group commit).
pub const COMMIT_EVERY: Duration = Duration::from_millis(100);

/// Answers one durable request: synced, or why not.
type Ack = oneshot::Sender<Result<(), String>>;

/// A handle on the run's journal; clones share it.
#[derive(Clone)]
pub struct JournalWriter {
    inner: Arc<Inner>,
}

struct Inner {
    journal: Mutex<Journal>,
    /// Durable records waiting for a sync, by number.
    waiters: Mutex<BTreeMap<Seq, Vec<Ack>>>,
    wake: Arc<Notify>,
    /// Why the journal stopped taking records, once it has.
    failed: Mutex<Option<String>>,
    /// Wakes the dispatcher when `failed` is first set, so a run whose
    /// journal is gone stops at once, not when a step next ends.
    on_failure: Notify,
    /// The journal file lost its name (its link count dropped to 0).
    unlinked: std::sync::atomic::AtomicBool,
}

impl JournalWriter {
    /// Takes over `journal` and starts its sync task (on the current runtime).
    pub fn start(journal: Journal) -> JournalWriter {
        let inner = Arc::new(Inner {
            journal: Mutex::new(journal),
            waiters: Mutex::new(BTreeMap::new()),
            wake: Arc::new(Notify::new()),
            failed: Mutex::new(None),
            on_failure: Notify::new(),
            unlinked: std::sync::atomic::AtomicBool::new(false),
        });
        tokio::spawn(sync_loop(Arc::downgrade(&inner), Arc::clone(&inner.wake)));
        JournalWriter { inner }
    }

    fn journal(&self) -> std::sync::MutexGuard<'_, Journal> {
        self.inner
            .journal
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Appends a plain record; durable with the next group commit.
    pub fn append(&self, event: &Event) -> Result<Seq, String> {
        let appended = self.journal().append(event);
        appended.map_err(|e| self.failed_with(&e))
    }

    /// Describes a failed append, and remembers it when it leaves the
    /// journal unwritable (a full disk, a failed sync, a vanished file), so
    /// the dispatcher stops the run instead of running steps it cannot
    /// record. A record refused on its own (too large) does not stop it.
    fn failed_with(&self, error: &JournalError) -> String {
        let message = plain_words(error);
        if matches!(
            error,
            JournalError::Io { .. } | JournalError::Unusable { .. }
        ) {
            self.inner.fail(message.clone());
        }
        message
    }

    /// Checks that the journal file still has a name; when it has none (the
    /// state directory was deleted under the run, issue 8, item 14), the
    /// journal has failed: its records, and the run lock beside it, are gone.
    pub fn check_linked(&self) {
        self.inner.check_linked();
    }

    /// Whether the journal file lost its name: the run cannot be resumed.
    pub fn is_unlinked(&self) -> bool {
        self.inner
            .unlinked
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Resolves once the journal has failed (at once if it already has).
    pub async fn failed(&self) {
        if self.failure().is_some() {
            return;
        }
        self.inner.on_failure.notified().await;
    }

    /// Appends a record and resolves once a sync covering it has completed.
    pub async fn append_durable(&self, event: &Event) -> Result<(), String> {
        let (tx, rx) = oneshot::channel();
        {
            // The number and the waiter are registered under the journal's
            // lock, so the sync task cannot begin a commit in between and
            // miss the waiter.
            let mut journal = self.journal();
            let seq = journal
                .append_marked_durable(event)
                .map_err(|e| self.failed_with(&e))?;
            self.inner
                .waiters
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .entry(seq)
                .or_default()
                .push(tx);
        }
        self.inner.wake.notify_one();
        rx.await.unwrap_or_else(|_| {
            Err("the journal writer stopped before the record was synced".into())
        })
    }

    /// Syncs everything appended so far, on this thread: for the run's
    /// closing record, after which nothing else is written.
    pub fn commit_now(&self) -> Result<(), String> {
        let committed = self.journal().commit();
        committed.map_err(|e| self.failed_with(&e))
    }

    /// Why the journal stopped taking records, if it has.
    pub fn failure(&self) -> Option<String> {
        self.inner
            .failed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Inner {
    fn fail(&self, why: String) {
        let mut failed = self.failed.lock().unwrap_or_else(PoisonError::into_inner);
        if failed.is_none() {
            *failed = Some(why);
            self.on_failure.notify_one();
        }
    }

    fn check_linked(&self) {
        let journal = self.journal.lock().unwrap_or_else(PoisonError::into_inner);
        if journal.is_unlinked()
            && !self
                .unlinked
                .swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            let path = journal.path().display().to_string();
            drop(journal);
            self.fail(format!(
                "the journal file {path} was deleted while the run ran (was the state directory removed by a step?); what this run recorded is gone, and so is its lock, so another run of this plan may have run at the same time. This run cannot be resumed; run the plan again, with the state directory where no step deletes it (`--state-dir DIR` moves it)"
            ));
        }
    }
}

/// A journal error in words a person acts on: a full disk is named as one.
pub fn plain_words(error: &JournalError) -> String {
    let full = match error {
        JournalError::Io { source, .. } => matches!(
            source.raw_os_error(),
            Some(code) if code == nix::libc::ENOSPC || code == nix::libc::EDQUOT
        ),
        _ => false,
    };
    if full {
        format!("the disk is full: {error}")
    } else {
        error.to_string()
    }
}

/// Syncs when a durable record waits, or every [`COMMIT_EVERY`] when plain
/// records do; answers waiters covered by each completed sync. Ends with
/// the run (when the last handle is dropped).
async fn sync_loop(inner: std::sync::Weak<Inner>, wake: Arc<Notify>) {
    loop {
        tokio::select! {
            () = wake.notified() => {}
            () = tokio::time::sleep(COMMIT_EVERY) => {}
        }
        let Some(inner) = inner.upgrade() else { return };
        inner.check_linked();
        let pending = inner
            .journal
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .begin_commit();
        let result = match pending {
            Ok(None) => Ok(()),
            Ok(Some(pending)) => {
                let done = tokio::task::spawn_blocking(move || pending.run())
                    .await
                    .unwrap_or_else(|e| {
                        Err(crate::journal::JournalError::Io {
                            action: "sync",
                            path: std::path::PathBuf::from("the journal"),
                            source: std::io::Error::other(e.to_string()),
                        })
                    });
                inner
                    .journal
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .commit_done(&done);
                done.map(|_| ()).map_err(|e| plain_words(&e))
            }
            Err(e) => Err(plain_words(&e)),
        };
        let synced = inner
            .journal
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .positions()
            .1;
        let answered: Vec<_> = {
            let mut waiters = inner.waiters.lock().unwrap_or_else(PoisonError::into_inner);
            match &result {
                Ok(()) => {
                    let later = waiters.split_off(&(synced + 1));
                    std::mem::replace(&mut *waiters, later)
                        .into_values()
                        .flatten()
                        .map(|tx| (tx, Ok(())))
                        .collect()
                }
                Err(e) => std::mem::take(&mut *waiters)
                    .into_values()
                    .flatten()
                    .map(|tx| (tx, Err(format!("cannot sync the journal: {e}"))))
                    .collect(),
            }
        };
        if let Err(e) = &result {
            inner.fail(e.clone());
        }
        for (tx, answer) in answered {
            let _ = tx.send(answer);
        }
    }
}

impl CheckpointSink for JournalWriter {
    fn write(&self, checkpoint: &Checkpoint, step: &str) -> Result<(), String> {
        self.append(&checkpoint_event(checkpoint, step)).map(|_| ())
    }

    fn write_durable<'a>(
        &'a self,
        checkpoint: &'a Checkpoint,
        step: &'a str,
    ) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            self.append_durable(&checkpoint_event(checkpoint, step))
                .await
        })
    }
}

fn checkpoint_event(checkpoint: &Checkpoint, step: &str) -> Event {
    Event::StepCheckpoint {
        step: step.to_owned(),
        attempt: checkpoint.attempt,
        data: checkpoint.data.clone(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;
    use crate::journal::SyncFn;

    fn event(n: u32) -> Event {
        Event::StepCheckpoint {
            step: "s".into(),
            attempt: n,
            data: serde_json::json!({"n": n}),
        }
    }

    /// A sync double: records the file's length at each sync, and can be
    /// held shut until the test opens it.
    struct Gate {
        open: AtomicBool,
        log: Mutex<Vec<String>>,
    }

    fn double(gate: &Arc<Gate>) -> SyncFn {
        let gate = Arc::clone(gate);
        Arc::new(move |file: &std::fs::File| {
            while !gate.open.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(5));
            }
            let len = file.metadata()?.len();
            gate.log
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(format!("synced {len} bytes"));
            Ok(())
        })
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_durable_record_is_acknowledged_only_after_a_sync_that_covers_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("journal.jsonl");
        let gate = Arc::new(Gate {
            open: AtomicBool::new(false),
            log: Mutex::new(Vec::new()),
        });
        let journal = Journal::create(&path)
            .expect("create")
            .with_sync(double(&gate));
        let writer = JournalWriter::start(journal);
        writer.append(&event(1)).expect("plain");

        let durable = {
            let writer = writer.clone();
            tokio::spawn(async move {
                writer.append_durable(&event(2)).await.expect("durable");
                let len = std::fs::metadata(writer.journal().path())
                    .expect("stat")
                    .len();
                format!("acknowledged at {len} bytes")
            })
        };
        // The sync is held shut: no acknowledgement may come.
        tokio::time::sleep(COMMIT_EVERY * 3).await;
        assert!(!durable.is_finished(), "acknowledged before any sync");
        gate.open.store(true, Ordering::SeqCst);
        let acknowledged = durable.await.expect("task");

        let log = gate.log.lock().expect("log").clone();
        let file_len = std::fs::metadata(&path).expect("stat").len();
        assert_eq!(log.first(), Some(&format!("synced {file_len} bytes")));
        assert_eq!(acknowledged, format!("acknowledged at {file_len} bytes"));
        // Both records are in the file, the durable one marked as such.
        let text = std::fs::read_to_string(&path).expect("read");
        assert_eq!(text.lines().count(), 2);
        assert!(
            text.lines()
                .nth(1)
                .is_some_and(|l| l.contains(r#""durable":true"#))
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_record_appended_during_a_sync_is_not_counted_as_synced_by_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("journal.jsonl");
        let journal = Journal::create(&path).expect("create");
        let mut journal = journal;
        journal.append(&event(1)).expect("append");
        let pending = journal
            .begin_commit()
            .expect("begin")
            .expect("something to sync");
        journal.append(&event(2)).expect("append during the sync");
        let done = pending.run();
        journal.commit_done(&done);
        assert_eq!(journal.positions(), (2, 1), "record 2 is not yet synced");
        journal.commit().expect("commit");
        assert_eq!(journal.positions(), (2, 2));
    }

    /// Issue 8, items 13 and 14: a full disk is named as one, and a journal
    /// deleted under the run fails the writer (and wakes who waits on it).
    #[tokio::test(flavor = "current_thread")]
    async fn a_full_disk_is_named_and_a_deleted_journal_fails_the_writer() {
        let full = JournalError::Io {
            action: "append to the journal",
            path: "j".into(),
            source: std::io::Error::from_raw_os_error(nix::libc::ENOSPC),
        };
        assert!(
            plain_words(&full).starts_with("the disk is full: "),
            "{}",
            plain_words(&full)
        );

        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("journal.jsonl");
        let writer = JournalWriter::start(Journal::create(&path).expect("create"));
        writer.check_linked();
        assert!(writer.failure().is_none() && !writer.is_unlinked());

        std::fs::remove_file(&path).expect("delete");
        // The sync task notices by itself within a tick.
        tokio::time::timeout(COMMIT_EVERY * 20, writer.failed())
            .await
            .expect("noticed");
        assert!(writer.is_unlinked());
        assert!(
            writer
                .failure()
                .is_some_and(|f| f.contains("was deleted while the run ran"))
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_failed_sync_fails_the_waiter_and_later_appends() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("journal.jsonl");
        let failing: SyncFn = Arc::new(|_: &std::fs::File| Err(std::io::Error::other("disk gone")));
        let journal = Journal::create(&path).expect("create").with_sync(failing);
        let writer = JournalWriter::start(journal);

        let answer = writer.append_durable(&event(1)).await;

        assert!(answer.is_err_and(|e| e.contains("disk gone")));
        assert!(writer.append(&event(2)).is_err());
        assert!(writer.failure().is_some());
    }
}

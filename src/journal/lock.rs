//! One live run per plan hash, held by an OS file lock on
//! `locks/<plan-hash>.lock`, and which process `plan stop` may signal from
//! what that file says ([`SignalRefusal`]: it is only a message).

use std::fs::{self, File, OpenOptions, TryLockError};
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::LockError;

/// Who holds a run lock. Written into the lock file so that a refused second
/// run can name the first; the lock itself is the OS lock, never this content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockHolder {
    pub pid: u32,
    pub host: String,
    /// When the run started, RFC 3339, as the run's clock gave it.
    pub started_at: String,
    pub run_id: String,
}

/// Why `plan stop` will not signal the process a lock file names (issue 8,
/// item 11). The lock file's content is only a message, so nothing in it is
/// trusted to pick a process to signal without these checks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignalRefusal {
    #[error(
        "run {run_id} runs on host `{host}`, and this is `{this_host}`; a pid means nothing on another host, so nothing was signalled. Run `gameplan plan stop {run_id}` on `{host}`"
    )]
    OtherHost {
        run_id: String,
        host: String,
        this_host: String,
    },
    #[error(
        "the lock file of run {run_id} does not say which host runs it, so nothing was signalled; stop the run where it runs (Ctrl-C or `gameplan plan stop {run_id}` there)"
    )]
    UnknownHost { run_id: String },
    #[error(
        "the lock file of run {run_id} names pid {pid}, which is not a single process (0 or beyond the pid range would signal a whole process group), so nothing was signalled; stop the run where it runs (Ctrl-C)"
    )]
    BadPid { run_id: String, pid: u32 },
}

/// This host's name as run locks record it (empty when it cannot be read).
pub fn this_host() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_default()
}

impl LockHolder {
    /// The process to signal to stop this holder's run, when that is safe
    /// from `this_host`: the holder runs here, and its pid names one process
    /// (never 0, which `kill` takes as "my own process group", nor a value
    /// that turns negative as an `i32`, which names a group too).
    pub fn signal_target(&self, this_host: &str) -> Result<nix::unistd::Pid, SignalRefusal> {
        if self.host.is_empty() || this_host.is_empty() {
            return Err(SignalRefusal::UnknownHost {
                run_id: self.run_id.clone(),
            });
        }
        if self.host != this_host {
            return Err(SignalRefusal::OtherHost {
                run_id: self.run_id.clone(),
                host: self.host.clone(),
                this_host: this_host.to_owned(),
            });
        }
        match i32::try_from(self.pid) {
            Ok(pid) if pid > 0 => Ok(nix::unistd::Pid::from_raw(pid)),
            _ => Err(SignalRefusal::BadPid {
                run_id: self.run_id.clone(),
                pid: self.pid,
            }),
        }
    }
}

/// Whether a plan's run lock is taken right now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockStatus {
    Free,
    /// `holder` is `None` when the lock file does not say who holds it (the
    /// holder is between taking the lock and writing its name, or the file
    /// was damaged).
    Held {
        holder: Option<LockHolder>,
    },
}

/// The exclusive lock of one plan hash, held until dropped.
///
/// The kernel releases it when the holding process dies, also on `kill -9`,
/// so a crashed run never leaves a stale lock behind. The lock file itself is
/// never deleted: removing it would let a second run lock a new file while
/// the first still holds the old one.
#[derive(Debug)]
pub struct RunLock {
    file: File,
    path: PathBuf,
}

impl RunLock {
    /// Takes the lock of `plan_hash` under `locks_dir` without waiting, and
    /// records `holder` in the lock file.
    ///
    /// Fails with [`LockError::Held`], naming the current holder, when
    /// another run (in this process or any other) has it.
    pub fn acquire(
        locks_dir: &Path,
        plan_hash: &str,
        holder: &LockHolder,
    ) -> Result<RunLock, LockError> {
        let path = lock_path(locks_dir, plan_hash)?;
        fs::create_dir_all(locks_dir).map_err(|source| LockError::Io {
            action: "create the directory of",
            path: path.clone(),
            source,
        })?;
        // Not truncated on open: until the lock is ours, the content names
        // the current holder.
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|source| LockError::Io {
                action: "open",
                path: path.clone(),
                source,
            })?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let holder = read_holder(&path);
                return Err(LockError::Held { path, holder });
            }
            Err(TryLockError::Error(source)) => {
                return Err(LockError::Io {
                    action: "take",
                    path,
                    source,
                });
            }
        }
        let content = serde_json::to_vec(holder).map_err(io::Error::from);
        // The content only feeds messages, so it is not fsynced.
        content
            .and_then(|content| write_holder(&file, &content))
            .map_err(|source| LockError::Io {
                action: "record the holder in",
                path: path.clone(),
                source,
            })?;
        Ok(RunLock { file, path })
    }

    /// Names a new holder, for a run that turned out to resume another run
    /// (the lock is taken before that is known, so no one can race us to it).
    pub fn set_holder(&mut self, holder: &LockHolder) -> Result<(), LockError> {
        let content = serde_json::to_vec(holder).map_err(io::Error::from);
        content
            .and_then(|content| write_holder(&self.file, &content))
            .map_err(|source| LockError::Io {
                action: "record the holder in",
                path: self.path.clone(),
                source,
            })
    }

    /// Whether the lock of `plan_hash` is held right now, and by whom.
    ///
    /// Found out by trying to take the lock and letting it go at once, so a
    /// run that starts in that instant is refused as if this were a run.
    pub fn status(locks_dir: &Path, plan_hash: &str) -> Result<LockStatus, LockError> {
        let path = lock_path(locks_dir, plan_hash)?;
        let file = match File::open(&path) {
            Ok(file) => file,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(LockStatus::Free),
            Err(source) => {
                return Err(LockError::Io {
                    action: "open",
                    path,
                    source,
                });
            }
        };
        match file.try_lock() {
            // Dropping `file` releases the lock we just took.
            Ok(()) => Ok(LockStatus::Free),
            Err(TryLockError::WouldBlock) => Ok(LockStatus::Held {
                holder: read_holder(&path),
            }),
            Err(TryLockError::Error(source)) => Err(LockError::Io {
                action: "test",
                path,
                source,
            }),
        }
    }

    /// The holder of the lock of `plan_hash`, if it is held right now and
    /// says who it is. `None` also when the lock cannot be inspected; use
    /// [`RunLock::status`] to tell those cases apart.
    pub fn holder(locks_dir: &Path, plan_hash: &str) -> Option<LockHolder> {
        match RunLock::status(locks_dir, plan_hash) {
            Ok(LockStatus::Held { holder }) => holder,
            Ok(LockStatus::Free) | Err(_) => None,
        }
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for RunLock {
    fn drop(&mut self) {
        // Closing the file would release the lock too; unlocking explicitly
        // also covers a copy of the descriptor inherited by a child process.
        let _ = self.file.unlock();
    }
}

/// Replaces the lock file's content with `content`: written over the old
/// one, then cut to its length. Not cut to nothing first: on ext4 that frees
/// the file's block and allocates it again, a journal transaction that cost
/// 1-3 ms of every run's start on a busy disk; the holder's record is about
/// as long each time, so the cut is usually no change at all.
fn write_holder(file: &File, content: &[u8]) -> io::Result<()> {
    use std::os::unix::fs::FileExt as _;
    file.write_all_at(content, 0)?;
    file.set_len(content.len() as u64)
}

fn lock_path(locks_dir: &Path, plan_hash: &str) -> Result<PathBuf, LockError> {
    let is_file_name = !plan_hash.is_empty()
        && plan_hash
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if !is_file_name {
        return Err(LockError::BadPlanHash {
            plan_hash: plan_hash.to_owned(),
        });
    }
    Ok(locks_dir.join(format!("{plan_hash}.lock")))
}

fn read_holder(path: &Path) -> Option<LockHolder> {
    let content = fs::read(path).ok()?;
    serde_json::from_slice(&content).ok()
}

#[cfg(test)]
mod tests {
    use std::io::{BufRead as _, BufReader, Write as _};
    use std::process::{Child, Command, Stdio};
    use std::time::Duration;

    use super::*;

    const PLAN: &str = "0f3a9c";
    const HELPER_DIR_ENV: &str = "GAMEPLAN_TEST_LOCK_HELPER_DIR";
    const HELPER_READY: &str = "lock-helper-holds-the-lock";

    fn holder(run_id: &str) -> LockHolder {
        LockHolder {
            pid: std::process::id(),
            host: "test-host".into(),
            started_at: "2026-01-02T03:04:05Z".into(),
            run_id: run_id.into(),
        }
    }

    /// Issue 8, item 11: `plan stop` signalled the pid in the lock file
    /// without checking the host, and a pid it could not use became
    /// `kill(0)`, which signals the caller's own process group.
    #[test]
    fn only_a_single_local_pid_is_ever_a_signal_target() {
        let here = holder("r1");
        assert_eq!(
            here.signal_target("test-host"),
            Ok(nix::unistd::Pid::from_raw(
                i32::try_from(std::process::id()).expect("pid")
            ))
        );
        let elsewhere = here.signal_target("another-host").expect_err("other host");
        assert!(matches!(elsewhere, SignalRefusal::OtherHost { .. }));
        assert!(elsewhere.to_string().contains("test-host"), "{elsewhere}");
        for host in ["", "test-host"] {
            let unknown = LockHolder {
                host: String::new(),
                ..holder("r1")
            };
            assert!(matches!(
                unknown.signal_target(host),
                Err(SignalRefusal::UnknownHost { .. })
            ));
        }
        for pid in [0, u32::MAX, 1 << 31] {
            let bad = LockHolder {
                pid,
                ..holder("r1")
            };
            assert_eq!(
                bad.signal_target("test-host"),
                Err(SignalRefusal::BadPid {
                    run_id: "r1".into(),
                    pid
                })
            );
        }
    }

    #[test]
    fn second_acquire_is_refused_naming_the_first_holder() {
        let dir = tempfile::tempdir().expect("temp dir");
        let first = RunLock::acquire(dir.path(), PLAN, &holder("run-1")).expect("first acquire");

        let error = RunLock::acquire(dir.path(), PLAN, &holder("run-2")).expect_err("held");

        match &error {
            LockError::Held { path, holder } => {
                assert_eq!(path, first.path());
                assert_eq!(holder.as_ref().map(|h| h.run_id.as_str()), Some("run-1"));
            }
            other => panic!("expected Held, got {other:?}"),
        }
        let message = error.to_string();
        assert!(message.contains("run run-1"), "{message}");
        assert!(message.contains("gameplan plan stop run-1"), "{message}");
    }

    /// The holder is written over the old one, not after emptying the file:
    /// a shorter holder after a longer one must not keep the longer tail.
    #[test]
    fn a_shorter_holder_replaces_a_longer_one_whole() {
        let dir = tempfile::tempdir().expect("temp dir");
        let long = "run-".repeat(50);
        drop(RunLock::acquire(dir.path(), PLAN, &holder(&long)).expect("first"));
        let mut lock = RunLock::acquire(dir.path(), PLAN, &holder(&long)).expect("again");
        lock.set_holder(&holder("run-2")).expect("set holder");
        let path = lock.path().to_path_buf();
        assert_eq!(read_holder(&path).map(|h| h.run_id), Some("run-2".into()));
        drop(lock);
        let lock = RunLock::acquire(dir.path(), PLAN, &holder("run-3")).expect("third");
        assert_eq!(
            read_holder(lock.path()).map(|h| h.run_id),
            Some("run-3".into())
        );
    }

    #[test]
    fn lock_is_free_again_after_the_holder_is_dropped() {
        let dir = tempfile::tempdir().expect("temp dir");
        let first = RunLock::acquire(dir.path(), PLAN, &holder("run-1")).expect("first acquire");
        assert_eq!(
            RunLock::holder(dir.path(), PLAN).map(|h| h.run_id),
            Some("run-1".to_owned())
        );

        drop(first);

        assert_eq!(RunLock::holder(dir.path(), PLAN), None);
        let second = RunLock::acquire(dir.path(), PLAN, &holder("run-2")).expect("re-acquire");
        assert_eq!(
            RunLock::status(dir.path(), PLAN).expect("status"),
            LockStatus::Held {
                holder: Some(holder("run-2"))
            }
        );
        drop(second);
    }

    #[test]
    fn status_is_free_without_a_lock_file_and_creates_none() {
        let dir = tempfile::tempdir().expect("temp dir");

        assert_eq!(
            RunLock::status(dir.path(), PLAN).expect("status"),
            LockStatus::Free
        );
        assert_eq!(RunLock::holder(dir.path(), PLAN), None);
        assert!(!dir.path().join(format!("{PLAN}.lock")).exists());
    }

    #[test]
    fn held_lock_with_unreadable_content_has_no_holder() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join(format!("{PLAN}.lock"));
        fs::write(&path, b"not json").expect("write lock file");
        let file = File::open(&path).expect("open");
        file.try_lock().expect("lock by hand");

        let error = RunLock::acquire(dir.path(), PLAN, &holder("run-2")).expect_err("held");

        assert!(matches!(error, LockError::Held { holder: None, .. }));
        assert!(error.to_string().contains("did not say who"), "{error}");
    }

    #[test]
    fn plan_hash_that_is_not_a_file_name_is_refused() {
        let dir = tempfile::tempdir().expect("temp dir");

        for bad in ["", "../escape", "a/b", "a.lock"] {
            let error = RunLock::acquire(dir.path(), bad, &holder("run")).expect_err(bad);
            assert!(matches!(error, LockError::BadPlanHash { .. }), "{bad}");
        }
    }

    /// Kills the helper process even when an assertion fails first.
    struct KillOnDrop(Child);

    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    #[test]
    fn lock_is_free_at_once_when_its_holder_process_is_killed() {
        let dir = tempfile::tempdir().expect("temp dir");
        let exe = std::env::current_exe().expect("test binary path");
        let mut child = KillOnDrop(
            Command::new(exe)
                .args([
                    "--exact",
                    "journal::lock::tests::lock_helper_process",
                    "--ignored",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(HELPER_DIR_ENV, dir.path())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawn helper"),
        );
        let stdout = child.0.stdout.take().expect("helper stdout");
        let ready = BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .any(|line| line.contains(HELPER_READY));
        assert!(ready, "helper exited without taking the lock");

        let error = RunLock::acquire(dir.path(), PLAN, &holder("parent")).expect_err("held");
        match error {
            LockError::Held {
                holder: Some(held_by),
                ..
            } => {
                assert_eq!(held_by.run_id, "child-run");
                assert_eq!(held_by.pid, child.0.id());
            }
            other => panic!("expected Held naming the child, got {other:?}"),
        }

        // `Child::kill` sends SIGKILL: the child gets no chance to clean up.
        child.0.kill().expect("kill helper");
        child.0.wait().expect("reap helper");

        let lock = RunLock::acquire(dir.path(), PLAN, &holder("parent"))
            .expect("lock is free once the holder is dead");
        drop(lock);
    }

    /// Not a test of its own: the body of the child process of
    /// `lock_is_free_at_once_when_its_holder_process_is_killed`.
    #[test]
    #[ignore = "run as a child process by lock_is_free_at_once_when_its_holder_process_is_killed"]
    fn lock_helper_process() {
        let Some(dir) = std::env::var_os(HELPER_DIR_ENV) else {
            return;
        };
        let _lock =
            RunLock::acquire(Path::new(&dir), PLAN, &holder("child-run")).expect("helper acquires");
        let mut stdout = io::stdout().lock();
        writeln!(stdout, "\n{HELPER_READY}").expect("signal ready");
        stdout.flush().expect("flush");
        drop(stdout);
        std::thread::sleep(Duration::from_secs(60));
    }
}

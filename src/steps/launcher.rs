//! The launcher: one helper process per run that starts every command step
//! and records how each ended, so that knowledge survives gameplan's death.
//!
//! # Design
//!
//! A command must run exactly once per successful attempt, even when gameplan
//! is killed (`kill -9`) mid-step. Only a process that outlives gameplan can
//! learn how an orphaned step ended, and starting a shell wrapper per step
//! doubled the cost of every step. So gameplan starts `gameplan __launch`
//! once per run; it reads spawn requests (JSON lines) on stdin and:
//!
//! - opens the step's `stdout.log`, takes an exclusive `flock` on it and
//!   gives that open file to the step as its stdout and stderr, so the lock
//!   is held exactly as long as a process of the step lives (and until the
//!   launcher has recorded how it ended); if the lock is taken, or a resumed
//!   gameplan left a `claimed.N` marker, it refuses;
//! - starts the command directly (no shell unless the line needs one), as the
//!   leader of its own process group;
//! - when the step exits, appends how it ended to the run's `exits.jsonl`
//!   (one file per run: a file per attempt cost a file creation per step),
//!   then reports `started` / `exited` lines on stdout.
//!
//! It runs at most `--concurrency` steps at once and keeps the next requests
//! queued, so a finished step's slot is refilled at once instead of after a
//! round trip through gameplan (that round trip left a core idle per step).
//! Gameplan journals an attempt before it queues it; a queued attempt that a
//! stopping run cancels, or that is still queued when gameplan dies, never
//! starts.
//!
//! It ignores Ctrl-C and SIGTERM (gameplan decides what stops), stops taking
//! work when its stdin closes (gameplan exited or died) and exits once its
//! running steps have finished and their endings are written. A resumed
//! gameplan takes the lock of an attempt it found running (waiting while the
//! step lives) and looks up its ending: a code means the step ended; nothing
//! means it died mid-way, so it leaves the `claimed.N` marker (while holding
//! the lock, so no launcher can slip in) and runs the step again.

use std::collections::{BTreeMap, HashMap};
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::pipe;
use tokio::process::{ChildStdin, Command};
use tokio::sync::{mpsc, oneshot};

/// One step attempt to start.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Request {
    pub token: u64,
    pub argv: Vec<String>,
    pub cwd: PathBuf,
    /// Added to the launcher's environment (which is gameplan's).
    pub env: BTreeMap<String, String>,
    pub log: PathBuf,
    /// Present when a resumed run claimed this attempt: never start it then.
    pub claim: PathBuf,
    /// The run's record of endings, and this attempt's name in it.
    pub exits: PathBuf,
    pub attempt: String,
}

/// One line of `exits.jsonl`: how an attempt ended.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Ending {
    attempt: String,
    /// The exit code, or `signal N` for a step killed before it finished.
    ending: String,
}

/// What the launcher says about a request.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "report", rename_all = "snake_case")]
enum Report {
    Started { token: u64, pid: u32 },
    Refused { token: u64, error: String },
    Exited { token: u64, code: i32 },
}

/// How an attempt ended, as recorded: an exit code, or `signal N` for a step
/// killed before it could finish (a resume runs that one again), and the
/// code reported for it (128 + N, as shells do).
fn ending(status: std::process::ExitStatus) -> (String, i32) {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => (code.to_string(), code),
        (None, signal) => {
            let signal = signal.unwrap_or(0);
            (format!("signal {signal}"), 128 + signal)
        }
    }
}

/// Appends one ending to the run's record with a single `write`, so a line
/// is whole or absent. The record stays open for the run's next endings.
fn record_ending(open: &mut HashMap<PathBuf, File>, exits: &Path, attempt: &str, ending: String) {
    let mut line = serde_json::to_vec(&Ending {
        attempt: attempt.to_owned(),
        ending,
    })
    .unwrap_or_default();
    line.push(b'\n');
    if !open.contains_key(exits)
        && let Ok(file) = OpenOptions::new().create(true).append(true).open(exits)
    {
        open.insert(exits.to_owned(), file);
    }
    if let Some(file) = open.get_mut(exits) {
        let _ = std::io::Write::write_all(file, &line);
    }
}

/// What gameplan asks of its launcher, one JSON line each.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Message {
    /// Queue an attempt; it starts when a slot is free.
    Start(Request),
    /// Drop a queued attempt (the run is stopping). A started one is
    /// gameplan's to stop, by its process group.
    Cancel(u64),
}

/// `gameplan __launch SLOTS`: serves requests until stdin closes, running at
/// most `slots` steps at once.
pub fn serve(slots: usize) -> u8 {
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return 1;
    };
    runtime.block_on(serve_async(slots.max(1)));
    0
}

async fn serve_async(slots: usize) {
    use tokio::signal::unix::{SignalKind, signal};
    // Held for the life of the launcher: these signals are gameplan's to act on.
    let _ignored: Vec<_> = [
        SignalKind::interrupt(),
        SignalKind::terminate(),
        SignalKind::hangup(),
    ]
    .into_iter()
    .filter_map(|kind| signal(kind).ok())
    .collect();
    let parent = nix::unistd::getppid();
    let (reports, outbox) = mpsc::unbounded_channel::<Report>();
    // stdin and stdout are pipes from gameplan: read and write them on the
    // event loop (tokio's own stdio goes through a thread per call).
    let (Ok(stdin), Ok(stdout)) = (
        pipe_end(0).and_then(pipe::Receiver::from_owned_fd),
        pipe_end(1).and_then(pipe::Sender::from_owned_fd),
    ) else {
        return;
    };
    let writer = tokio::spawn(write_reports(stdout, outbox));
    let mut lines = BufReader::new(stdin).lines();
    // Queued here so a finished step's slot is refilled at once, without a
    // round trip to gameplan: that round trip left a core idle per step.
    let mut queue: std::collections::VecDeque<Request> = std::collections::VecDeque::new();
    let mut running = tokio::task::JoinSet::new();
    let mut finished = Vec::new();
    let mut programs = HashMap::new();
    let mut records = HashMap::new();
    // Every step's stdin, opened once (a spawn would open it each time).
    let null = File::open("/dev/null").ok();
    let mut open = true;
    while open || !running.is_empty() {
        tokio::select! {
            line = lines.next_line(), if open => {
                if let Ok(Some(line)) = line {
                    match serde_json::from_str::<Message>(&line) {
                        Ok(Message::Start(request)) => queue.push_back(request),
                        Ok(Message::Cancel(token)) => {
                            if let Some(at) = queue.iter().position(|r| r.token == token) {
                                queue.remove(at);
                                let _ = reports.send(Report::Refused { token, error: "canceled".into() });
                            }
                        }
                        Err(_) => {}
                    }
                } else {
                    // Gameplan exited or died: start nothing more; a resume decides.
                    open = false;
                    for request in queue.drain(..) {
                        let _ = reports.send(Report::Refused { token: request.token, error: "gameplan is gone".into() });
                    }
                }
            }
            Some(Ok(done)) = running.join_next(), if !running.is_empty() => finished.push(done),
        }
        while open && running.len() < slots {
            let Some(request) = queue.pop_front() else {
                break;
            };
            let token = request.token;
            if nix::unistd::getppid() != parent {
                let _ = reports.send(Report::Refused {
                    token,
                    error: "gameplan is gone".into(),
                });
                continue;
            }
            match launch(&request, &mut programs, null.as_ref()) {
                Ok((mut child, lock)) => {
                    let pid = child.id().unwrap_or(0);
                    let _ = reports.send(Report::Started { token, pid });
                    running.spawn(async move {
                        let ended = match child.wait().await {
                            Ok(exit) => ending(exit),
                            Err(_) => ("signal 9".to_owned(), 128 + 9),
                        };
                        (request, lock, ended)
                    });
                }
                Err(error) => {
                    let _ = reports.send(Report::Refused { token, error });
                }
            }
        }
        // The freed slot is refilled above first; the bookkeeping of the step
        // that ended comes after, off the path from one step to the next.
        for (request, lock, (text, code)) in finished.drain(..) {
            record_ending(&mut records, &request.exits, &request.attempt, text);
            // Only now may a resume take the lock and look.
            drop(lock);
            let _ = reports.send(Report::Exited {
                token: request.token,
                code,
            });
        }
    }
    drop(reports);
    let _ = writer.await;
}

/// Writes the launcher's reports to gameplan until the last sender is gone.
async fn write_reports(mut stdout: pipe::Sender, mut outbox: mpsc::UnboundedReceiver<Report>) {
    let mut lines = Vec::new();
    while let Some(report) = outbox.recv().await {
        // Everything said meanwhile goes in one write: gameplan wakes once
        // for a step that ended and the one that took its slot.
        let mut next = Some(report);
        while let Some(report) = next {
            let _ = serde_json::to_writer(&mut lines, &report);
            lines.push(b'\n');
            next = outbox.try_recv().ok();
        }
        // Gameplan may be gone; `exits.jsonl` still tells a resume.
        if stdout.write_all(&lines).await.is_ok() {
            let _ = stdout.flush().await;
        }
        lines.clear();
    }
}

/// A duplicate of stdin (0) or stdout (1) as an owned descriptor.
fn pipe_end(fd: i32) -> std::io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::AsFd;
    match fd {
        0 => std::io::stdin().as_fd().try_clone_to_owned(),
        _ => std::io::stdout().as_fd().try_clone_to_owned(),
    }
}

/// Where `program` is on the `PATH` the step will see, found once per run:
/// left to `execvp`, every spawn would try each `PATH` entry in turn (eight
/// failed `execve`s for `touch` on a typical machine) while the launcher
/// waits. A name with a `/`, or one not found, is left as given.
fn resolve(
    program: &str,
    request: &Request,
    cache: &mut HashMap<(String, String), PathBuf>,
) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    if program.contains('/') {
        return PathBuf::from(program);
    }
    let path = request
        .env
        .get("PATH")
        .cloned()
        .or_else(|| std::env::var("PATH").ok())
        .unwrap_or_default();
    let key = (path, program.to_owned());
    if let Some(found) = cache.get(&key) {
        return found.clone();
    }
    let found = std::env::split_paths(&key.0)
        .map(|dir| request.cwd.join(dir).join(program))
        .find(|candidate| {
            std::fs::metadata(candidate)
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        });
    match found {
        Some(found) => {
            cache.insert(key, found.clone());
            found
        }
        None => PathBuf::from(program),
    }
}

fn launch(
    request: &Request,
    programs: &mut HashMap<(String, String), PathBuf>,
    null: Option<&File>,
) -> Result<(tokio::process::Child, File), String> {
    let Some((program, args)) = request.argv.split_first() else {
        return Err("nothing to run: the argv is empty".into());
    };
    let name = program;
    let program = resolve(name, request, programs);
    let log = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&request.log)
        .map_err(|e| format!("cannot create {}: {e}", request.log.display()))?;
    match log.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            return Err("this step is busy: a resumed run holds it".into());
        }
        Err(std::fs::TryLockError::Error(e)) => {
            return Err(format!("cannot lock {}: {e}", request.log.display()));
        }
    }
    if request.claim.exists() {
        return Err("this attempt was claimed by a resumed run".into());
    }
    // Each attempt's log starts empty (truncated only now that it is ours).
    log.set_len(0)
        .map_err(|e| format!("cannot truncate {}: {e}", request.log.display()))?;
    let out = log.try_clone().map_err(|e| e.to_string())?;
    let err = log.try_clone().map_err(|e| e.to_string())?;
    let stdin = null
        .and_then(|null| null.try_clone().ok())
        .map_or_else(Stdio::null, Stdio::from);
    let child = Command::new(program)
        // The program sees the name it was given, as with a PATH search.
        .arg0(name)
        .args(args)
        .current_dir(&request.cwd)
        .envs(&request.env)
        .stdin(stdin)
        .stdout(Stdio::from(out))
        .stderr(Stdio::from(err))
        .process_group(0)
        .kill_on_drop(false)
        .spawn()
        .map_err(|e| {
            format!(
                "cannot start `{}` in {}: {e}",
                request.argv.join(" "),
                request.cwd.display()
            )
        })?;
    Ok((child, log))
}

/// A submitted attempt: it starts when the launcher has a free slot.
pub struct Submitted {
    pub token: u64,
    /// The process id once started, or why it never will be.
    pub started: oneshot::Receiver<Result<u32, String>>,
    /// Resolves with the exit code, or an error if the launcher died first.
    pub exit: oneshot::Receiver<i32>,
}

type Waiters = HashMap<
    u64,
    (
        Option<oneshot::Sender<Result<u32, String>>>,
        Option<oneshot::Sender<i32>>,
    ),
>;

/// Gameplan's handle on its launcher.
pub struct Launcher {
    stdin: tokio::sync::Mutex<ChildStdin>,
    waiters: Arc<Mutex<Waiters>>,
    next: std::sync::atomic::AtomicU64,
    _child: tokio::process::Child,
}

/// The run's launcher, started by the first step that needs it.
pub struct LazyLauncher {
    slots: usize,
    cell: tokio::sync::OnceCell<Launcher>,
}

impl LazyLauncher {
    /// `slots`: how many steps may run at once.
    pub fn new(slots: usize) -> Self {
        LazyLauncher {
            slots,
            cell: tokio::sync::OnceCell::new(),
        }
    }

    pub async fn get(&self) -> Result<&Launcher, String> {
        self.cell
            .get_or_try_init(|| async { Launcher::start(self.slots) })
            .await
    }
}

impl Launcher {
    /// Starts `gameplan __launch SLOTS` (this same executable).
    pub fn start(slots: usize) -> Result<Launcher, String> {
        let exe = std::env::current_exe()
            .map_err(|e| format!("cannot find the gameplan executable: {e}"))?;
        let mut child = Command::new(exe)
            .arg("__launch")
            .arg(slots.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(false)
            .spawn()
            .map_err(|e| format!("cannot start the step launcher: {e}"))?;
        let stdin = child.stdin.take().ok_or("the launcher has no stdin")?;
        let stdout = child.stdout.take().ok_or("the launcher has no stdout")?;
        let waiters: Arc<Mutex<Waiters>> = Arc::default();
        let reader_waiters = Arc::clone(&waiters);
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let Ok(report) = serde_json::from_str::<Report>(&line) else {
                    continue;
                };
                let mut waiters = reader_waiters
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                match report {
                    Report::Started { token, pid } => {
                        if let Some((started, _)) = waiters.get_mut(&token)
                            && let Some(tx) = started.take()
                        {
                            let _ = tx.send(Ok(pid));
                        }
                    }
                    Report::Refused { token, error } => {
                        if let Some((Some(tx), _)) = waiters.remove(&token) {
                            let _ = tx.send(Err(error));
                        }
                    }
                    Report::Exited { token, code } => {
                        if let Some((_, Some(tx))) = waiters.remove(&token) {
                            let _ = tx.send(code);
                        }
                    }
                }
            }
            // The launcher is gone: every waiter learns it by its channel closing.
            reader_waiters
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clear();
        });
        Ok(Launcher {
            stdin: tokio::sync::Mutex::new(stdin),
            waiters,
            next: std::sync::atomic::AtomicU64::new(1),
            _child: child,
        })
    }

    async fn send(&self, message: &Message) -> Result<(), String> {
        let mut line = serde_json::to_vec(message).map_err(|e| e.to_string())?;
        line.push(b'\n');
        let mut stdin = self.stdin.lock().await;
        stdin
            .write_all(&line)
            .await
            .map_err(|e| format!("the step launcher is gone: {e}"))?;
        stdin
            .flush()
            .await
            .map_err(|e| format!("the step launcher is gone: {e}"))
    }

    /// Queues an attempt at the launcher.
    pub async fn submit(&self, mut request: Request) -> Result<Submitted, String> {
        request.token = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let token = request.token;
        let (started_tx, started) = oneshot::channel();
        let (exit_tx, exit) = oneshot::channel();
        self.waiters
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(token, (Some(started_tx), Some(exit_tx)));
        self.send(&Message::Start(request)).await?;
        Ok(Submitted {
            token,
            started,
            exit,
        })
    }

    /// Drops a queued attempt; one that already started is not affected.
    pub async fn cancel(&self, token: u64) {
        let _ = self.send(&Message::Cancel(token)).await;
    }
}

/// How a resumed run finds an attempt that a dead gameplan left behind.
#[derive(Debug, PartialEq, Eq)]
pub enum Leftover {
    /// The attempt exited with this code while nobody watched.
    Finished(i32),
    /// It never finished (killed by a signal, killed with its launcher, or
    /// never started): run it again.
    Unfinished,
}

/// Where a resumed run looks for an attempt it found running.
pub struct Attempt<'a> {
    pub log: &'a Path,
    pub claim: &'a Path,
    pub exits: &'a Path,
    pub name: &'a str,
}

/// Waits until no process of the attempt lives, then looks up its ending.
/// Unless it ended, claims it (a marker made while holding the lock), so a
/// launcher that has not started it yet never will. Checks `cancel` between
/// polls.
pub async fn leftover(
    attempt: &Attempt<'_>,
    cancel: &tokio::sync::watch::Receiver<bool>,
) -> Leftover {
    // The step may never have started (no directory yet); the claim must
    // still be left, so make room for it.
    if let Some(dir) = attempt.log.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let Ok(log) = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(attempt.log)
    else {
        return Leftover::Unfinished;
    };
    loop {
        match log.try_lock() {
            Ok(()) => break,
            Err(std::fs::TryLockError::WouldBlock) if !*cancel.borrow() => {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            Err(_) => return Leftover::Unfinished,
        }
    }
    let recorded = std::fs::read_to_string(attempt.exits).unwrap_or_default();
    let ending = recorded
        .lines()
        .rev()
        .filter_map(|line| serde_json::from_str::<Ending>(line).ok())
        .find(|e| e.attempt == attempt.name);
    if let Some(code) = ending.and_then(|e| e.ending.parse().ok()) {
        return Leftover::Finished(code);
    }
    let _ = File::create(attempt.claim);
    drop(log);
    Leftover::Unfinished
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(dir: &Path, attempt: u32) -> Request {
        Request {
            token: 1,
            argv: vec!["true".into()],
            cwd: dir.to_path_buf(),
            env: BTreeMap::new(),
            log: dir.join("stdout.log"),
            claim: dir.join(format!("claimed.{attempt}")),
            exits: dir.join("exits.jsonl"),
            attempt: format!("step#{attempt}"),
        }
    }

    fn attempt(r: &Request) -> Attempt<'_> {
        Attempt {
            log: &r.log,
            claim: &r.claim,
            exits: &r.exits,
            name: &r.attempt,
        }
    }

    #[tokio::test]
    async fn an_attempt_that_ended_is_found_and_one_that_did_not_is_claimed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (_stop, cancel) = tokio::sync::watch::channel(false);
        let ended = request(dir.path(), 1);
        record_ending(
            &mut HashMap::new(),
            &ended.exits,
            &ended.attempt,
            "3".into(),
        );
        assert_eq!(
            leftover(&attempt(&ended), &cancel).await,
            Leftover::Finished(3)
        );
        assert!(!ended.claim.exists(), "a finished attempt needs no claim");

        let killed = request(dir.path(), 2);
        record_ending(
            &mut HashMap::new(),
            &killed.exits,
            &killed.attempt,
            "signal 9".into(),
        );
        assert_eq!(
            leftover(&attempt(&killed), &cancel).await,
            Leftover::Unfinished
        );

        let never = request(&dir.path().join("not-yet-made"), 3);
        assert_eq!(
            leftover(&attempt(&never), &cancel).await,
            Leftover::Unfinished
        );
        assert!(never.claim.exists(), "an unfinished attempt is claimed");
    }

    #[test]
    fn a_claimed_attempt_is_never_started() {
        let dir = tempfile::tempdir().expect("tempdir");
        let claimed = request(dir.path(), 1);
        std::fs::write(&claimed.claim, "").expect("claim");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let refused =
            runtime.block_on(async { launch(&claimed, &mut HashMap::new(), None).map(|_| ()) });
        assert_eq!(
            refused,
            Err("this attempt was claimed by a resumed run".to_owned())
        );
    }
}

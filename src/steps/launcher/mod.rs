//! The launcher: one helper process per run that starts every command step,
//! writes its output into the run's one log, and records how each attempt
//! ended, so that knowledge survives gameplan's death.
//!
//! # Design
//!
//! A command must run exactly once per successful attempt, even when gameplan
//! is killed (`kill -9`, also of its whole process group) mid-step. Only a
//! process that outlives gameplan can learn how an orphaned step ended, and
//! starting a shell wrapper per step doubled the cost of every step. So
//! gameplan starts `gameplan __launch` once per run; it leaves gameplan's
//! session (`setsid`, so a kill of gameplan's group spares it), holds
//! nothing of gameplan's stdio but its own pipes, reads spawn requests (JSON
//! lines) on stdin and:
//!
//! - takes the attempt's lock: one byte of the run's `attempts.lock`, an
//!   open-file-description lock on the launcher's own open file
//!   (close-on-exec; [`attempt_lock`]). It says "this attempt's ending is
//!   not recorded yet", and a process the step leaves behind (a daemon,
//!   `sleep 25 &`) cannot hold it by accident; if the lock is taken, or a
//!   resumed gameplan left a claim marker (`runs/<id>/claims/<attempt>`),
//!   it refuses;
//! - starts the command directly (no shell unless the line needs one), as the
//!   leader of its own process group, its stdout and stderr one pipe that
//!   the launcher copies into the run's one log, `steps.log`, with every
//!   secret replaced and the middle of a long log cut ([`capture`]); each
//!   piece's place is a segment. A step gets no file and no directory of
//!   its own: a file per step cost an inode per step;
//! - records in the run's `exits.jsonl` (one file per run) the attempt's
//!   process group when it starts and, when it exits, how it ended with its
//!   log's segments (one line, one write), then reports `started` /
//!   `exited` lines on stdout (and, for `--output stream`, each piece
//!   written).
//!
//! It runs at most `--concurrency` steps at once and keeps the next requests
//! queued, so a finished step's slot is refilled at once instead of after a
//! round trip through gameplan (that round trip left a core idle per step).
//! Gameplan journals an attempt before it queues it; a queued attempt that a
//! stopping run cancels, or that is still queued when gameplan dies, never
//! starts.
//!
//! It ignores Ctrl-C, SIGTERM and SIGHUP (gameplan decides what stops), stops
//! taking work when its stdin closes (gameplan exited or died) and exits once
//! its running steps have finished and their endings are written. A resumed
//! gameplan (or a new run of the plan, before it starts anything) takes the
//! lock of an attempt it found running, saying that it waits and for how
//! long at most, and looks up its ending: a code means the step ended (its
//! log's segments are on the same line); nothing means it died mid-way, so
//! once the recorded process group is empty too (the launcher may have been
//! killed alone; killed between a spawn and its record, it left no group,
//! and the step's processes are found by the run, step and attempt in their
//! environment) it leaves the claim marker (while holding the lock, so no
//! launcher can slip in) and runs the step again.

pub mod attempt_lock;
pub mod capture;
mod leftover;

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

use capture::{Capture, Flush};
pub use capture::{DISK_FULL, LOG_CAP, LOG_HEAD, LOG_TAIL, Written};
pub use leftover::{Attempt, Leftover, Wait, leftover};

use crate::journal::step_log::{LiveLog, Segment};
use crate::process::SpawnInGroup as _;

/// One step attempt to start.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Request {
    pub token: u64,
    pub argv: Vec<String>,
    pub cwd: PathBuf,
    /// Added to the launcher's environment (which is gameplan's).
    pub env: BTreeMap<String, String>,
    /// The run's one log, which the attempt's output is appended to.
    pub log: PathBuf,
    /// The directory whose disk a failed log write is blamed on.
    pub state_dir: PathBuf,
    /// The run's lock file, a byte of which is this attempt's lock.
    pub locks: PathBuf,
    /// Present when a resumed run claimed this attempt: never start it then.
    pub claim: PathBuf,
    /// The run's record of endings, and this attempt's name in it.
    pub exits: PathBuf,
    pub attempt: String,
    /// Report each piece of output as it is written (`--output stream`).
    #[serde(default)]
    pub live: bool,
}

/// One line of `exits.jsonl`: that an attempt started (its process id,
/// which leads its process group), or how it ended and where its output is.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Entry {
    attempt: String,
    /// The exit code, or `signal N` for a step killed before it finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ending: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pid: Option<u32>,
    /// Its output's segments in the run's `steps.log`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    log: Vec<Segment>,
    /// Why some of its output could not be written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    lost: Option<String>,
}

/// What the launcher says about a request.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "report", rename_all = "snake_case")]
enum Report {
    Started {
        token: u64,
        pid: u32,
    },
    Refused {
        token: u64,
        error: String,
    },
    /// A piece of a live attempt's output was written.
    Wrote {
        token: u64,
        at: u64,
        len: u64,
    },
    Exited {
        token: u64,
        code: i32,
        #[serde(default)]
        log: Vec<Segment>,
        #[serde(default)]
        lost: Option<String>,
        #[serde(default)]
        last_words: String,
    },
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

/// Appends one line to the run's record with a single `write`, so a line
/// is whole or absent. The record stays open for the run's next lines.
fn record_ending(
    open: &mut HashMap<PathBuf, File>,
    exits: &Path,
    attempt: &str,
    ending: String,
    written: &Written,
) {
    let entry = Entry {
        attempt: attempt.to_owned(),
        ending: Some(ending),
        pid: None,
        log: written.log.clone(),
        lost: written.lost.clone(),
    };
    record(open, exits, &entry);
}

/// Records that an attempt started and which process group is its: a
/// resume that finds its launcher dead checks that group.
fn record_start(open: &mut HashMap<PathBuf, File>, exits: &Path, attempt: &str, pid: u32) {
    let entry = Entry {
        attempt: attempt.to_owned(),
        pid: Some(pid),
        ..Entry::default()
    };
    record(open, exits, &entry);
}

fn record(open: &mut HashMap<PathBuf, File>, exits: &Path, entry: &Entry) {
    let mut line = serde_json::to_vec(entry).unwrap_or_default();
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
    Start(Box<Request>),
    /// Drop a queued attempt (the run is stopping). A started one is
    /// gameplan's to stop, by its process group.
    Cancel(u64),
    /// The plan's secret values: from now on every step's output reaches
    /// the log with them replaced. Sent on stdin, never in argv or the
    /// environment, where `ps` would show them.
    Redact(Vec<String>),
}

/// `gameplan __launch SLOTS`: serves requests until stdin closes, running at
/// most `slots` steps at once.
pub fn serve(slots: usize) -> crate::exit_code::Done {
    // Out of gameplan's session and process group: a kill of that group (a
    // container or CI teardown, `timeout`) must not take the launcher, or the
    // ending of a step that outlives gameplan is never recorded and a resume
    // runs it again. Fails only if already a group leader; harmless then.
    let _ = nix::unistd::setsid();
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        // `plan run` reads a launcher that never served as a failed one.
        return Err(crate::exit_code::Failure::failed(String::new()));
    };
    runtime.block_on(serve_async(slots.max(1)));
    Ok(())
}

/// The files a run's attempts share, opened once per run: its log and its
/// lock file.
#[derive(Default)]
struct RunFiles {
    logs: HashMap<PathBuf, Arc<File>>,
    locks: HashMap<PathBuf, Arc<File>>,
}

impl RunFiles {
    fn log(&mut self, request: &Request) -> Result<Arc<File>, String> {
        if let Some(file) = self.logs.get(&request.log) {
            return Ok(Arc::clone(file));
        }
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&request.log)
            .map_err(|e| capture::cannot_write(&request.log, &request.state_dir, &e))?;
        let file = Arc::new(file);
        self.logs.insert(request.log.clone(), Arc::clone(&file));
        Ok(file)
    }

    fn locks(&mut self, request: &Request) -> Result<Arc<File>, String> {
        if let Some(file) = self.locks.get(&request.locks) {
            return Ok(Arc::clone(file));
        }
        let file = attempt_lock::open(&request.locks).map_err(|e| {
            format!(
                "cannot open the run's lock file {}: {e}",
                request.locks.display()
            )
        })?;
        let file = Arc::new(file);
        self.locks.insert(request.locks.clone(), Arc::clone(&file));
        Ok(file)
    }
}

/// A step that started: its process, the lock that says its ending is not
/// recorded yet, and the copier of its output.
struct Launched {
    child: tokio::process::Child,
    lock: Arc<File>,
    capture: Arc<Mutex<Capture>>,
    copier: (tokio::task::JoinHandle<()>, Flush),
}

#[expect(
    clippy::too_many_lines,
    reason = "the launcher's one event loop: requests, starts, endings"
)]
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
    let mut files = RunFiles::default();
    let mut secrets: Arc<Vec<Vec<u8>>> = Arc::default();
    // Every step's stdin, opened once (a spawn would open it each time).
    let null = File::open("/dev/null").ok();
    let mut open = true;
    while open || !running.is_empty() {
        tokio::select! {
            line = lines.next_line(), if open => {
                if let Ok(Some(line)) = line {
                    match serde_json::from_str::<Message>(&line) {
                        Ok(Message::Start(request)) => queue.push_back(*request),
                        Ok(Message::Cancel(token)) => {
                            if let Some(at) = queue.iter().position(|r| r.token == token) {
                                queue.remove(at);
                                let _ = reports.send(Report::Refused { token, error: "canceled".into() });
                            }
                        }
                        Ok(Message::Redact(values)) => {
                            secrets = Arc::new(values.into_iter().filter(|v| !v.is_empty()).map(String::into_bytes).collect());
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
            let mut spawn = Spawn {
                programs: &mut programs,
                files: &mut files,
                null: null.as_ref(),
                secrets: &secrets,
                reports: &reports,
            };
            match launch(&request, &mut spawn) {
                Ok(Launched {
                    mut child,
                    lock,
                    capture,
                    copier,
                }) => {
                    let pid = child.id().unwrap_or(0);
                    record_start(&mut records, &request.exits, &request.attempt, pid);
                    let _ = reports.send(Report::Started { token, pid });
                    running.spawn(async move {
                        let ended = match child.wait().await {
                            Ok(exit) => ending(exit),
                            Err(_) => ("signal 9".to_owned(), 128 + 9),
                        };
                        // Whatever the step wrote before it exited reaches the
                        // log first; a process it left behind holding the pipe
                        // does not keep its ending from being recorded.
                        output_copied(copier).await;
                        let written = capture
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .finish();
                        (request, lock, ended, written)
                    });
                }
                Err(error) => {
                    let _ = reports.send(Report::Refused { token, error });
                }
            }
        }
        // The freed slot is refilled above first; the bookkeeping of the step
        // that ended comes after, off the path from one step to the next.
        for (request, lock, (text, code), written) in finished.drain(..) {
            record_ending(
                &mut records,
                &request.exits,
                &request.attempt,
                text,
                &written,
            );
            // Only now may a resume take the lock and look.
            attempt_lock::unlock(&lock, &request.attempt);
            let _ = reports.send(Report::Exited {
                token: request.token,
                code,
                log: written.log,
                lost: written.lost,
                last_words: written.last_words,
            });
        }
    }
    drop(reports);
    let _ = writer.await;
}

/// How long a step's output may keep arriving after it exited
/// before its ending is recorded anyway (a process it started in the
/// background may hold the pipe for as long as it lives).
const COPY_AFTER_EXIT: std::time::Duration = std::time::Duration::from_millis(500);

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
    match crate::process::on_path(program, &key.0, &request.cwd) {
        Ok(found) => {
            cache.insert(key, found.clone());
            found
        }
        Err(_) => PathBuf::from(program),
    }
}

/// What a launch uses of the launcher's state.
struct Spawn<'a> {
    programs: &'a mut HashMap<(String, String), PathBuf>,
    files: &'a mut RunFiles,
    null: Option<&'a File>,
    secrets: &'a Arc<Vec<Vec<u8>>>,
    reports: &'a mpsc::UnboundedSender<Report>,
}

fn launch(request: &Request, spawn: &mut Spawn<'_>) -> Result<Launched, String> {
    let Some((program, args)) = request.argv.split_first() else {
        return Err("nothing to run: the argv is empty".into());
    };
    let name = program;
    let program = resolve(name, request, spawn.programs);
    // The lock is a byte of a file the launcher opened itself
    // (close-on-exec): a process the step leaves behind (a daemon,
    // `sleep 25 &`) must not hold the lock that says the step's ending is
    // not recorded yet.
    let lock = spawn.files.locks(request)?;
    match attempt_lock::try_lock(&lock, &request.attempt) {
        Ok(true) => {}
        Ok(false) => return Err("this step is busy: a resumed run holds it".into()),
        Err(e) => {
            return Err(format!("cannot lock {}: {e}", request.locks.display()));
        }
    }
    let refuse = |error: String| {
        attempt_lock::unlock(&lock, &request.attempt);
        Err(error)
    };
    if request.claim.exists() {
        return refuse("this attempt was claimed by a resumed run".into());
    }
    let log = match spawn.files.log(request) {
        Ok(log) => log,
        Err(e) => return refuse(e),
    };
    let stdin = spawn
        .null
        .and_then(|null| null.try_clone().ok())
        .map_or_else(Stdio::null, Stdio::from);
    let (reader, writer) = match std::io::pipe() {
        Ok(pipe) => pipe,
        Err(e) => return refuse(format!("cannot make a pipe: {e}")),
    };
    let err = match writer.try_clone() {
        Ok(err) => err,
        Err(e) => return refuse(e.to_string()),
    };
    let mut command = Command::new(program);
    // The program sees the name it was given, as with a PATH search.
    command
        .arg0(name)
        .args(args)
        .current_dir(&request.cwd)
        .envs(&request.env)
        .stdin(stdin)
        .stdout(Stdio::from(writer))
        .stderr(Stdio::from(err))
        .kill_on_drop(false);
    let child = match command.spawn_in_group() {
        Ok((child, _)) => child,
        Err(e) => {
            return refuse(format!(
                "cannot start `{}` in {}: {e}",
                request.argv.join(" "),
                request.cwd.display()
            ));
        }
    };
    // `command` still holds the pipe's write end; only the step may.
    drop(command);
    let reader = match pipe::Receiver::from_owned_fd(reader.into()) {
        Ok(reader) => reader,
        Err(e) => return refuse(format!("cannot read the step's output: {e}")),
    };
    let on_piece: Option<capture::OnPiece> = request.live.then(|| {
        let reports = spawn.reports.clone();
        let token = request.token;
        Box::new(move |piece: Segment| {
            let _ = reports.send(Report::Wrote {
                token,
                at: piece.at,
                len: piece.len,
            });
        }) as capture::OnPiece
    });
    let capture = Arc::new(Mutex::new(Capture::new(
        log,
        &request.log,
        &request.state_dir,
        on_piece,
    )));
    let (flush, asked) = mpsc::channel(1);
    let copying = tokio::spawn(capture::copy(
        reader,
        Arc::clone(&capture),
        Arc::clone(spawn.secrets),
        asked,
    ));
    Ok(Launched {
        child,
        lock,
        capture,
        copier: (copying, flush),
    })
}

/// Waits for a step's output to reach its log: to the end of the pipe, or,
/// if a process the step left behind holds the pipe open, what arrived
/// within [`COPY_AFTER_EXIT`] of the step's exit.
async fn output_copied((mut copier, flush): (tokio::task::JoinHandle<()>, Flush)) {
    if tokio::time::timeout(COPY_AFTER_EXIT, &mut copier)
        .await
        .is_ok()
    {
        return;
    }
    let (done, flushed) = oneshot::channel();
    if flush.send(done).await.is_ok() {
        let _ = tokio::time::timeout(COPY_AFTER_EXIT, flushed).await;
    }
    // The copier goes on (detached) for as long as the pipe is open.
}

/// A submitted attempt: it starts when the launcher has a free slot.
pub struct Submitted {
    pub token: u64,
    /// The process id once started, or why it never will be.
    pub started: oneshot::Receiver<Result<u32, String>>,
    /// Resolves with how it ended, or an error if the launcher died first.
    pub exit: oneshot::Receiver<Ended>,
}

/// How an attempt ended: its exit code and what became of its output.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ended {
    pub code: i32,
    pub written: Written,
}

/// What waits on one token: its start, its end, and (streaming) its live log.
struct Waiter {
    started: Option<oneshot::Sender<Result<u32, String>>>,
    exit: Option<oneshot::Sender<Ended>>,
    live: Option<Arc<LiveLog>>,
}

type Waiters = HashMap<u64, Waiter>;

/// Gameplan's handle on its launcher.
pub struct Launcher {
    stdin: tokio::sync::Mutex<ChildStdin>,
    waiters: Arc<Mutex<Waiters>>,
    next: std::sync::atomic::AtomicU64,
    /// Set once its reports end: it died (or was killed) under gameplan.
    gone: Arc<std::sync::atomic::AtomicBool>,
    _child: tokio::process::Child,
}

/// The run's launcher, started by the first step that needs it, and again
/// by the next step after one died under a live gameplan (its running steps
/// were stopped and failed; the steps after them must not fail for it).
pub struct LazyLauncher {
    slots: usize,
    redactor: crate::template::Redactor,
    current: tokio::sync::Mutex<Option<Arc<Launcher>>>,
}

impl LazyLauncher {
    /// `slots`: how many steps may run at once; `redactor`: the plan's
    /// secrets, kept out of the step logs.
    pub fn new(slots: usize, redactor: crate::template::Redactor) -> Self {
        LazyLauncher {
            slots,
            redactor,
            current: tokio::sync::Mutex::new(None),
        }
    }

    pub async fn get(&self) -> Result<Arc<Launcher>, String> {
        let mut current = self.current.lock().await;
        if let Some(launcher) = current.as_ref()
            && !launcher.gone.load(std::sync::atomic::Ordering::Acquire)
        {
            return Ok(Arc::clone(launcher));
        }
        let launcher = Arc::new(Launcher::start(self.slots)?);
        // `secret("X")` reads the variable X, which every step inherits:
        // any step may print it, so all logs are redacted.
        let secrets = self.redactor.values();
        if !secrets.is_empty() {
            launcher.send(&Message::Redact(secrets)).await?;
        }
        *current = Some(Arc::clone(&launcher));
        Ok(launcher)
    }

    /// Queues an attempt at the current launcher, or at a new one when that
    /// one turns out to have died (before gameplan read the end of its
    /// reports). Returns the launcher it went to, which cancels it.
    pub async fn submit(
        &self,
        mut request: Request,
        live: Option<Arc<LiveLog>>,
    ) -> Result<(Arc<Launcher>, Submitted), String> {
        let launcher = self.get().await?;
        request.live = live.is_some();
        match launcher.submit(&mut request, live.clone()).await {
            Ok(submitted) => Ok((launcher, submitted)),
            Err(_) if launcher.gone.load(std::sync::atomic::Ordering::Acquire) => {
                let launcher = self.get().await?;
                let submitted = launcher.submit(&mut request, live).await?;
                Ok((launcher, submitted))
            }
            Err(e) => Err(e),
        }
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
            // It may outlive gameplan: it must not hold gameplan's stderr
            // open, or whoever reads that (a CI job, `$(gameplan …)`)
            // waits for the launcher's last step. It has nothing to say.
            .stderr(Stdio::null())
            .kill_on_drop(false)
            .spawn()
            .map_err(|e| format!("cannot start the step launcher: {e}"))?;
        let stdin = child.stdin.take().ok_or("the launcher has no stdin")?;
        let stdout = child.stdout.take().ok_or("the launcher has no stdout")?;
        let waiters: Arc<Mutex<Waiters>> = Arc::default();
        let reader_waiters = Arc::clone(&waiters);
        let gone = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let reader_gone = Arc::clone(&gone);
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
                        if let Some(tx) = waiters.get_mut(&token).and_then(|w| w.started.take()) {
                            let _ = tx.send(Ok(pid));
                        }
                    }
                    Report::Refused { token, error } => {
                        if let Some(tx) = waiters.remove(&token).and_then(|w| w.started) {
                            let _ = tx.send(Err(error));
                        }
                    }
                    Report::Wrote { token, at, len } => {
                        if let Some(live) = waiters.get(&token).and_then(|w| w.live.as_ref()) {
                            live.push(Segment { at, len });
                        }
                    }
                    Report::Exited {
                        token,
                        code,
                        log,
                        lost,
                        last_words,
                    } => {
                        if let Some(tx) = waiters.remove(&token).and_then(|w| w.exit) {
                            let _ = tx.send(Ended {
                                code,
                                written: Written {
                                    log,
                                    lost,
                                    last_words,
                                },
                            });
                        }
                    }
                }
            }
            // The launcher is gone: every waiter learns it by its channel
            // closing, and the next step starts a new one.
            reader_gone.store(true, std::sync::atomic::Ordering::Release);
            reader_waiters
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clear();
        });
        Ok(Launcher {
            stdin: tokio::sync::Mutex::new(stdin),
            waiters,
            next: std::sync::atomic::AtomicU64::new(1),
            gone,
            _child: child,
        })
    }

    async fn send(&self, message: &Message) -> Result<(), String> {
        self.send_json(message).await
    }

    /// Writes one JSON line: a [`Message`], or one serialized like it.
    async fn send_json(&self, message: &impl Serialize) -> Result<(), String> {
        let mut line = serde_json::to_vec(message).map_err(|e| e.to_string())?;
        line.push(b'\n');
        let mut stdin = self.stdin.lock().await;
        let sent = match stdin.write_all(&line).await {
            Ok(()) => stdin.flush().await,
            Err(e) => Err(e),
        };
        sent.map_err(|e| {
            self.gone.store(true, std::sync::atomic::Ordering::Release);
            format!("the step launcher is gone: {e}")
        })
    }

    /// Queues an attempt at the launcher (giving it its token). Borrowed, so
    /// that a caller can take it to a new launcher when this one is gone.
    pub async fn submit(
        &self,
        request: &mut Request,
        live: Option<Arc<LiveLog>>,
    ) -> Result<Submitted, String> {
        request.token = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let token = request.token;
        let (started_tx, started) = oneshot::channel();
        let (exit_tx, exit) = oneshot::channel();
        self.waiters
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(
                token,
                Waiter {
                    started: Some(started_tx),
                    exit: Some(exit_tx),
                    live,
                },
            );
        // What `Message::Start(request)` is on the wire, without the copy.
        self.send_json(&BTreeMap::from([("start", &*request)]))
            .await?;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn request(dir: &Path, attempt: u32) -> Request {
        Request {
            token: 1,
            argv: vec!["true".into()],
            cwd: dir.to_path_buf(),
            env: BTreeMap::new(),
            log: dir.join("steps.log"),
            state_dir: dir.to_path_buf(),
            locks: dir.join("attempts.lock"),
            claim: dir.join("claims").join(format!("step#{attempt}")),
            exits: dir.join("exits.jsonl"),
            attempt: format!("step#{attempt}"),
            live: false,
        }
    }

    fn attempt(r: &Request) -> Attempt<'_> {
        Attempt {
            locks: &r.locks,
            claim: &r.claim,
            exits: &r.exits,
            name: &r.attempt,
            marks: &[],
            label: "`step`",
        }
    }

    fn wait() -> Wait<'static> {
        Wait {
            bound: std::time::Duration::from_secs(60),
            grace: std::time::Duration::from_secs(1),
            note: &|_| {},
        }
    }

    fn written(segments: Vec<Segment>) -> Written {
        Written {
            log: segments,
            ..Written::default()
        }
    }

    /// The launcher killed after it started a step but before it wrote the
    /// step's process group down: no group on record, yet the step lives.
    /// A resume finds it by its environment and waits for it.
    #[tokio::test]
    async fn a_step_whose_group_was_never_written_down_is_waited_for() {
        use std::os::unix::process::CommandExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let (_stop, cancel) = tokio::sync::watch::channel(false);
        let unrecorded = request(dir.path(), 1);
        let run = format!("GAMEPLAN_RUN_ID=test-{}", std::process::id());
        let marks = vec![
            run.clone(),
            "GAMEPLAN_STEP=step".into(),
            "GAMEPLAN_ATTEMPT=1".into(),
        ];
        let mut step = std::process::Command::new("sleep")
            .arg("30")
            .env("GAMEPLAN_RUN_ID", &run["GAMEPLAN_RUN_ID=".len()..])
            .env("GAMEPLAN_STEP", "step")
            .env("GAMEPLAN_ATTEMPT", "1")
            .process_group(0)
            .spawn()
            .expect("spawn the step");
        let pid = step.id();
        let ender = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(400));
            step.kill().expect("kill the step");
            step.wait().expect("reap the step");
        });
        let said = Mutex::new(Vec::new());
        let note = |text: &str| said.lock().expect("notes").push(text.to_owned());
        let wait = Wait {
            bound: std::time::Duration::from_secs(60),
            grace: std::time::Duration::from_secs(1),
            note: &note,
        };
        let began = std::time::Instant::now();
        let found = leftover(
            &Attempt {
                marks: &marks,
                ..attempt(&unrecorded)
            },
            &wait,
            &cancel,
        )
        .await;
        ender.join().expect("ender");
        assert_eq!(found, Leftover::Unfinished);
        assert!(
            began.elapsed() >= std::time::Duration::from_millis(400),
            "the resume did not wait for the live step"
        );
        let said = said.lock().expect("notes").join("\n");
        assert!(said.contains(&format!("process group {pid}")), "{said}");
        assert!(unrecorded.claim.exists(), "claimed once it was gone");
    }

    #[tokio::test]
    async fn an_attempt_that_ended_is_found_and_one_that_did_not_is_claimed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (_stop, cancel) = tokio::sync::watch::channel(false);
        let ended = request(dir.path(), 1);
        let segments = vec![Segment { at: 10, len: 5 }];
        record_ending(
            &mut HashMap::new(),
            &ended.exits,
            &ended.attempt,
            "3".into(),
            &written(segments.clone()),
        );
        assert_eq!(
            leftover(&attempt(&ended), &wait(), &cancel).await,
            Leftover::Finished(3, segments),
            "found with its log"
        );
        assert!(!ended.claim.exists(), "a finished attempt needs no claim");

        let killed = request(dir.path(), 2);
        record_ending(
            &mut HashMap::new(),
            &killed.exits,
            &killed.attempt,
            "signal 9".into(),
            &Written::default(),
        );
        assert_eq!(
            leftover(&attempt(&killed), &wait(), &cancel).await,
            Leftover::Unfinished
        );

        let never = request(&dir.path().join("not-yet-made"), 3);
        assert_eq!(
            leftover(&attempt(&never), &wait(), &cancel).await,
            Leftover::Unfinished
        );
        assert!(never.claim.exists(), "an unfinished attempt is claimed");
    }

    #[test]
    fn a_borrowed_start_is_a_start_on_the_wire() {
        let sent = request(Path::new("/r"), 2);
        let line = serde_json::to_string(&BTreeMap::from([("start", &sent)])).expect("encode");
        match serde_json::from_str::<Message>(&line).expect("decode") {
            Message::Start(read) => assert_eq!(read.attempt, "step#2"),
            _ => panic!("not a start: {line}"),
        }
    }

    #[test]
    fn a_claimed_attempt_is_never_started() {
        let dir = tempfile::tempdir().expect("tempdir");
        let claimed = request(dir.path(), 1);
        std::fs::create_dir_all(claimed.claim.parent().expect("claims")).expect("claims");
        std::fs::write(&claimed.claim, "").expect("claim");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let (reports, _heard) = mpsc::unbounded_channel();
        let mut files = RunFiles::default();
        let refused = runtime.block_on(async {
            let mut spawn = Spawn {
                programs: &mut HashMap::new(),
                files: &mut files,
                null: None,
                secrets: &Arc::default(),
                reports: &reports,
            };
            launch(&claimed, &mut spawn).map(|_| ())
        });
        assert_eq!(
            refused,
            Err("this attempt was claimed by a resumed run".to_owned())
        );
        // The refusal gave the attempt's lock back.
        let other = attempt_lock::open(&claimed.locks).expect("open");
        assert!(attempt_lock::try_lock(&other, &claimed.attempt).expect("try"));
    }
}

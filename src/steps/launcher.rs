//! The launcher: one helper process per run that starts every command step
//! and records how each ended, so that knowledge survives gameplan's death.
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
//! - opens the step's `stdout.log` and takes an exclusive `flock` on that
//!   open file, which is the launcher's alone (close-on-exec): the lock says
//!   "this attempt's ending is not recorded yet", and a process the step
//!   leaves behind (a daemon, `sleep 25 &`) cannot hold it by accident; if
//!   the lock is taken, or a resumed gameplan left a `claimed.N` marker, it
//!   refuses;
//! - starts the command directly (no shell unless the line needs one), as the
//!   leader of its own process group, writing to a second open file of the
//!   log; or, when the plan has secrets, to a pipe the launcher copies into
//!   the log with every secret replaced (the cost of a copy only for plans
//!   that need it);
//! - records in the run's `exits.jsonl` (one file per run: a file per attempt
//!   cost a file creation per step) the attempt's process group when it
//!   starts and how it ended when it exits, cuts the middle out of a log
//!   past [`LOG_CAP`], then reports `started` / `exited` lines on stdout.
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
//! gameplan (or a new run of the plan, before it starts anything) takes the
//! lock of an attempt it found running, saying that it waits and for how
//! long at most, and looks up its ending: a code means the step ended;
//! nothing means it died mid-way, so once the recorded process group is
//! empty too (the launcher may have been killed alone; killed between a
//! spawn and its record, it left no group, and the step's processes are
//! found by the run, step and attempt in their environment) it leaves the
//! `claimed.N` marker (while holding the lock, so no launcher can slip in)
//! and runs the step again.

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

/// One line of `exits.jsonl`: that an attempt started (its process id,
/// which leads its process group), or how it ended.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Entry {
    attempt: String,
    /// The exit code, or `signal N` for a step killed before it finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ending: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pid: Option<u32>,
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

/// Appends one line to the run's record with a single `write`, so a line
/// is whole or absent. The record stays open for the run's next lines.
fn record_ending(open: &mut HashMap<PathBuf, File>, exits: &Path, attempt: &str, ending: String) {
    let entry = Entry {
        attempt: attempt.to_owned(),
        ending: Some(ending),
        pid: None,
    };
    record(open, exits, &entry);
}

/// Records that an attempt started and which process group is its: a
/// resume that finds its launcher dead checks that group.
fn record_start(open: &mut HashMap<PathBuf, File>, exits: &Path, attempt: &str, pid: u32) {
    let entry = Entry {
        attempt: attempt.to_owned(),
        ending: None,
        pid: Some(pid),
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
    Start(Request),
    /// Drop a queued attempt (the run is stopping). A started one is
    /// gameplan's to stop, by its process group.
    Cancel(u64),
    /// The plan's secret values: from now on every step's output goes
    /// through a pipe and reaches its log with them replaced. Sent on stdin,
    /// never in argv or the environment, where `ps` would show them.
    Redact(Vec<String>),
}

/// `gameplan __launch SLOTS`: serves requests until stdin closes, running at
/// most `slots` steps at once.
pub fn serve(slots: usize) -> u8 {
    // Out of gameplan's session and process group: a kill of that group (a
    // container or CI teardown, `timeout`) must not take the launcher, or the
    // ending of a step that outlives gameplan is never recorded and a resume
    // runs it again. Fails only if already a group leader; harmless then.
    let _ = nix::unistd::setsid();
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return 1;
    };
    runtime.block_on(serve_async(slots.max(1)));
    0
}

/// A step that started: its process, the lock that says its ending is not
/// recorded yet, and the copier of its output when it is redacted.
struct Launched {
    child: tokio::process::Child,
    lock: File,
    copier: Option<(tokio::task::JoinHandle<()>, Flush)>,
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
    let mut secrets: Arc<Vec<Vec<u8>>> = Arc::default();
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
            match launch(&request, &mut programs, null.as_ref(), &secrets) {
                Ok(Launched {
                    mut child,
                    lock,
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
                        compact_log(&lock);
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

/// How long a redacted step's output may keep arriving after it exited
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
    secrets: &Arc<Vec<Vec<u8>>>,
) -> Result<Launched, String> {
    let Some((program, args)) = request.argv.split_first() else {
        return Err("nothing to run: the argv is empty".into());
    };
    let name = program;
    let program = resolve(name, request, programs);
    let cannot =
        |what: &str, e: std::io::Error| format!("cannot {what} {}: {e}", request.log.display());
    // The lock is on an open file of the launcher's own (close-on-exec), not
    // on the one the step writes to: a process the step leaves behind (a
    // daemon, `sleep 25 &`) inherits its stdout, and must not hold the lock
    // that says the step's ending is not recorded yet.
    let lock = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&request.log)
        .map_err(|e| cannot("create", e))?;
    match lock.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            return Err("this step is busy: a resumed run holds it".into());
        }
        Err(std::fs::TryLockError::Error(e)) => return Err(cannot("lock", e)),
    }
    if request.claim.exists() {
        return Err("this attempt was claimed by a resumed run".into());
    }
    // Each attempt's log starts empty (truncated only now that it is ours).
    lock.set_len(0).map_err(|e| cannot("truncate", e))?;
    let stdin = null
        .and_then(|null| null.try_clone().ok())
        .map_or_else(Stdio::null, Stdio::from);
    let mut command = Command::new(program);
    // The program sees the name it was given, as with a PATH search.
    command
        .arg0(name)
        .args(args)
        .current_dir(&request.cwd)
        .envs(&request.env)
        .stdin(stdin)
        .process_group(0)
        .kill_on_drop(false);
    let mut copier = None;
    if secrets.is_empty() {
        // The step writes its log itself: no copy, no cost per step.
        let out = OpenOptions::new()
            .write(true)
            .open(&request.log)
            .map_err(|e| cannot("open", e))?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        command.stdout(Stdio::from(out)).stderr(Stdio::from(err));
    } else {
        let (reader, writer) = std::io::pipe().map_err(|e| format!("cannot make a pipe: {e}"))?;
        let err = writer.try_clone().map_err(|e| e.to_string())?;
        command.stdout(Stdio::from(writer)).stderr(Stdio::from(err));
        // Its own open file, not a duplicate of the lock's: a copier still
        // reading what a background process writes must not hold the lock.
        let log = OpenOptions::new()
            .write(true)
            .open(&request.log)
            .map_err(|e| cannot("open", e))?;
        let reader = pipe::Receiver::from_owned_fd(reader.into())
            .map_err(|e| format!("cannot read the step's output: {e}"))?;
        copier = Some((reader, log));
    }
    let child = command.spawn().map_err(|e| {
        format!(
            "cannot start `{}` in {}: {e}",
            request.argv.join(" "),
            request.cwd.display()
        )
    })?;
    // `command` still holds the pipe's write end; only the step may.
    drop(command);
    let copier = copier.map(|(reader, log)| {
        let (flush, asked) = mpsc::channel(1);
        let copying = tokio::spawn(copy_redacted(reader, log, Arc::clone(secrets), asked));
        (copying, flush)
    });
    Ok(Launched {
        child,
        lock,
        copier,
    })
}

/// A request to write out what the copier holds back, answered when done.
type Flush = mpsc::Sender<oneshot::Sender<()>>;

/// Copies a step's output into its log with every secret replaced, until
/// the pipe's last writer closes it. Asked to flush (the step exited but a
/// process it left behind keeps the pipe open), it writes out what it held
/// back as the possible start of a secret, and goes on copying.
async fn copy_redacted(
    mut reader: pipe::Receiver,
    mut log: File,
    secrets: Arc<Vec<Vec<u8>>>,
    mut flush: mpsc::Receiver<oneshot::Sender<()>>,
) {
    use std::io::Write as _;
    use tokio::io::AsyncReadExt;
    let mut redactor = StreamRedactor::new(secrets);
    let mut buffer = vec![0; 64 * 1024];
    let mut asking = true;
    loop {
        tokio::select! {
            read = reader.read(&mut buffer) => match read {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let _ = log.write_all(&redactor.feed(&buffer[..n]));
                }
            },
            asked = flush.recv(), if asking => match asked {
                Some(done) => {
                    let _ = log.write_all(&redactor.finish());
                    let _ = done.send(());
                }
                None => asking = false,
            },
        }
    }
    let _ = log.write_all(&redactor.finish());
}

/// Waits for a step's redacted output to reach its log: to the end of the
/// pipe, or, if a process the step left behind holds the pipe open, what
/// arrived within [`COPY_AFTER_EXIT`] of the step's exit.
async fn output_copied(copier: Option<(tokio::task::JoinHandle<()>, Flush)>) {
    let Some((mut copier, flush)) = copier else {
        return;
    };
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

/// Replaces secrets in a stream of bytes, also one split across two reads:
/// the bytes that may be the start of a secret are held back until the
/// next read (or the end) shows whether they are.
struct StreamRedactor {
    secrets: Arc<Vec<Vec<u8>>>,
    held: Vec<u8>,
    /// Bytes that may begin a secret not yet whole: the longest secret less one.
    keep: usize,
}

impl StreamRedactor {
    fn new(secrets: Arc<Vec<Vec<u8>>>) -> Self {
        let keep = secrets
            .iter()
            .map(Vec::len)
            .max()
            .unwrap_or(1)
            .saturating_sub(1);
        StreamRedactor {
            secrets,
            held: Vec::new(),
            keep,
        }
    }

    /// The earliest secret in `bytes` (the longest of those starting there).
    fn next_secret(&self, bytes: &[u8]) -> Option<(usize, usize)> {
        let mut best: Option<(usize, usize)> = None;
        for secret in self.secrets.iter() {
            if let Some(at) = bytes
                .windows(secret.len())
                .position(|w| w == secret.as_slice())
            {
                let better = match best {
                    None => true,
                    Some((b, len)) => at < b || (at == b && secret.len() > len),
                };
                if better {
                    best = Some((at, secret.len()));
                }
            }
        }
        best
    }

    /// The length of the longest end of `bytes` that is the start of a
    /// secret (at most [`StreamRedactor::keep`]): it must wait for the next read.
    fn partial_secret(&self, bytes: &[u8]) -> usize {
        (1..=self.keep.min(bytes.len()))
            .rev()
            .find(|&k| {
                let end = &bytes[bytes.len() - k..];
                self.secrets
                    .iter()
                    .any(|secret| secret.len() > k && secret.starts_with(end))
            })
            .unwrap_or(0)
    }

    /// What of `held` + `bytes` can be written now.
    fn feed(&mut self, bytes: &[u8]) -> Vec<u8> {
        self.held.extend_from_slice(bytes);
        let mut out = Vec::with_capacity(self.held.len());
        let mut from = 0;
        while let Some((at, len)) = self.next_secret(&self.held[from..]) {
            out.extend_from_slice(&self.held[from..from + at]);
            out.extend_from_slice(crate::template::REDACTED.as_bytes());
            from += at + len;
        }
        // Only what may begin a secret waits: a line that cannot is written
        // at once, so `--output stream` shows it as it comes.
        let until = self.held.len() - self.partial_secret(&self.held[from..]);
        out.extend_from_slice(&self.held[from..until]);
        self.held.drain(..until);
        out
    }

    /// The rest, at the end of the stream: no secret can complete now.
    fn finish(&mut self) -> Vec<u8> {
        let keep = std::mem::replace(&mut self.keep, 0);
        let out = self.feed(&[]);
        self.keep = keep;
        out
    }
}

/// A log longer than this keeps its first [`LOG_HEAD`] and last
/// [`LOG_TAIL`] bytes, with a line saying how much was cut between them.
pub const LOG_CAP: u64 = LOG_HEAD + LOG_TAIL;
pub const LOG_HEAD: u64 = 1024 * 1024;
pub const LOG_TAIL: u64 = 4 * 1024 * 1024;

/// Cuts the middle out of a log longer than [`LOG_CAP`], at line ends where
/// there are some near the cut, once the step ended (a step's output is
/// written by the step itself, so it cannot be capped as it is written).
fn compact_log(log: &File) {
    use std::os::unix::fs::FileExt;
    let Ok(len) = log.metadata().map(|m| m.len()) else {
        return;
    };
    if len <= LOG_CAP {
        return;
    }
    let read = |at: u64, n: u64| -> Option<Vec<u8>> {
        let mut bytes = vec![0; usize::try_from(n).ok()?];
        log.read_exact_at(&mut bytes, at).ok()?;
        Some(bytes)
    };
    let (Some(head), Some(tail)) = (read(0, LOG_HEAD), read(len - LOG_TAIL, LOG_TAIL)) else {
        return;
    };
    // A line cut in two is harder to read than a few bytes more or less.
    let head_end = head
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(head.len(), |i| i + 1);
    let tail_start = tail.iter().position(|&b| b == b'\n').map_or(0, |i| i + 1);
    let tail = &tail[tail_start..];
    let cut = len - head_end as u64 - tail.len() as u64;
    #[expect(clippy::cast_precision_loss, reason = "a size for people to read")]
    let marker = format!("[… {:.1} MB cut …]\n", cut as f64 / 1_000_000.0);
    let mut rest = marker.into_bytes();
    rest.extend_from_slice(tail);
    if log.write_all_at(&rest, head_end as u64).is_ok() {
        let _ = log.set_len(head_end as u64 + rest.len() as u64);
    }
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
    pub async fn submit(&self, mut request: Request) -> Result<(Arc<Launcher>, Submitted), String> {
        let launcher = self.get().await?;
        match launcher.submit(&mut request).await {
            Ok(submitted) => Ok((launcher, submitted)),
            Err(_) if launcher.gone.load(std::sync::atomic::Ordering::Acquire) => {
                let launcher = self.get().await?;
                let submitted = launcher.submit(&mut request).await?;
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
    pub async fn submit(&self, request: &mut Request) -> Result<Submitted, String> {
        request.token = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let token = request.token;
        let (started_tx, started) = oneshot::channel();
        let (exit_tx, exit) = oneshot::channel();
        self.waiters
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(token, (Some(started_tx), Some(exit_tx)));
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

/// How a resumed run finds an attempt that a dead gameplan left behind.
#[derive(Debug, PartialEq, Eq)]
pub enum Leftover {
    /// The attempt exited with this code while nobody watched.
    Finished(i32),
    /// It never finished (killed by a signal, killed with its launcher, or
    /// never started), and nothing of it lives: run it again.
    Unfinished,
    /// The run was stopped while the attempt still lived: it may live on,
    /// so nothing else of the step may start.
    StillRunning,
}

/// Where a resumed run looks for an attempt it found running.
pub struct Attempt<'a> {
    pub log: &'a Path,
    pub claim: &'a Path,
    pub exits: &'a Path,
    pub name: &'a str,
    /// The `NAME=value` entries every process of this attempt carries in
    /// its environment (run, step, attempt): how its processes are found
    /// when the launcher died before it wrote their process group down.
    pub marks: &'a [String],
    /// The step as the messages name it (`` `a` ``, `` `a` of run X ``).
    pub label: &'a str,
}

/// How long a resume waits for an attempt a dead gameplan left running,
/// and how it says so.
pub struct Wait<'a> {
    /// After this the attempt is stopped (SIGTERM, then SIGKILL).
    pub bound: std::time::Duration,
    /// The grace between SIGTERM and SIGKILL.
    pub grace: std::time::Duration,
    pub note: &'a (dyn Fn(&str) + Send + Sync),
}

/// What `exits.jsonl` says of one attempt: the process group it started
/// as, and how it ended.
fn recorded(exits: &Path, name: &str) -> (Option<i32>, Option<String>) {
    let text = std::fs::read_to_string(exits).unwrap_or_default();
    let mut pid = None;
    let mut ended = None;
    for entry in text
        .lines()
        .filter_map(|line| serde_json::from_str::<Entry>(line).ok())
        .filter(|e| e.attempt == name)
    {
        if let Some(p) = entry.pid.and_then(|p| i32::try_from(p).ok()) {
            pid = Some(p);
        }
        if entry.ending.is_some() {
            ended = entry.ending;
        }
    }
    (pid, ended)
}

/// Waits until no process of the attempt lives, then looks up its ending.
/// Unless it ended, claims it (a marker made while holding the lock), so a
/// launcher that has not started it yet never will.
///
/// Liveness is the launcher's lock (held until the ending is recorded, on a
/// file the step never inherits) and, when the launcher died too, the
/// step's process group: nothing a process the step left behind holds by
/// accident. The wait is said, and bounded: past `wait.bound` the attempt
/// is stopped like a timed-out step. A stop of the run ends the wait.
pub async fn leftover(
    attempt: &Attempt<'_>,
    wait: &Wait<'_>,
    cancel: &tokio::sync::watch::Receiver<bool>,
) -> Leftover {
    use nix::sys::signal::{Signal, killpg};
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
    let began = tokio::time::Instant::now();
    let mut said = false;
    let mut stopping: Option<tokio::time::Instant> = None;
    let mut found_group = None;
    loop {
        let locked = match log.try_lock() {
            Ok(()) => true,
            Err(std::fs::TryLockError::WouldBlock) => false,
            Err(std::fs::TryLockError::Error(_)) => return Leftover::Unfinished,
        };
        let (recorded_pid, ended) = recorded(attempt.exits, attempt.name);
        // The launcher writes a step's process group down just after it
        // started it, so one killed in between left a live step with no
        // group on record: its processes are found by their environment
        // (once: a scan reads every process's environment).
        if recorded_pid.is_none() && found_group.is_none() {
            found_group = crate::process_table::carrying(|env| {
                crate::process_table::has_entries(env, attempt.marks)
            })
            .first()
            .map(|found| found.group);
        }
        let pid = recorded_pid.or(found_group);
        if locked {
            if let Some(code) = ended.as_deref().and_then(|e| e.parse().ok()) {
                return Leftover::Finished(code);
            }
            if !pid.is_some_and(crate::process_table::group_alive) {
                let _ = File::create(attempt.claim);
                drop(log);
                return Leftover::Unfinished;
            }
            // Its launcher died, but the step lives on: wait for its group.
        }
        if *cancel.borrow() {
            return Leftover::StillRunning;
        }
        let group = pid.map_or_else(
            || "its process group".to_owned(),
            |p| format!("process group {p}"),
        );
        if !said {
            said = true;
            (wait.note)(&format!(
                "waiting for {} ({group}), which a gameplan that died left running, to end; it is stopped after {}",
                attempt.label,
                humantime::format_duration(wait.bound)
            ));
        }
        match stopping {
            None if began.elapsed() >= wait.bound => {
                (wait.note)(&format!(
                    "{} still runs after {}: stopping it ({group}) to run it again",
                    attempt.label,
                    humantime::format_duration(wait.bound)
                ));
                if let Some(p) = pid {
                    let _ = killpg(nix::unistd::Pid::from_raw(p), Signal::SIGTERM);
                }
                stopping = Some(tokio::time::Instant::now());
            }
            Some(since) if since.elapsed() >= wait.grace => {
                if let Some(p) = pid {
                    let _ = killpg(nix::unistd::Pid::from_raw(p), Signal::SIGKILL);
                }
            }
            _ => {}
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
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
        record_ending(
            &mut HashMap::new(),
            &ended.exits,
            &ended.attempt,
            "3".into(),
        );
        assert_eq!(
            leftover(&attempt(&ended), &wait(), &cancel).await,
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
        std::fs::write(&claimed.claim, "").expect("claim");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let refused = runtime.block_on(async {
            launch(&claimed, &mut HashMap::new(), None, &Arc::default()).map(|_| ())
        });
        assert_eq!(
            refused,
            Err("this attempt was claimed by a resumed run".to_owned())
        );
    }

    /// Issue 8, item 17: a secret is replaced wherever the reads split it.
    #[test]
    fn issue8_item17_a_secret_split_across_writes_is_redacted() {
        let secrets = Arc::new(vec![b"hunter22".to_vec(), b"tok".to_vec()]);
        let text = b"a hunter22 b hunter22hunter22 tok hunt c";
        for split in 0..text.len() {
            let mut redactor = StreamRedactor::new(Arc::clone(&secrets));
            let mut out = redactor.feed(&text[..split]);
            out.extend(redactor.feed(&text[split..]));
            out.extend(redactor.finish());
            assert_eq!(
                String::from_utf8(out).expect("text"),
                "a [redacted] b [redacted][redacted] [redacted] hunt c",
                "split at {split}"
            );
        }
    }

    #[test]
    fn only_what_may_begin_a_secret_is_held_back() {
        let secrets = Arc::new(vec![b"hunter22".to_vec()]);
        let mut redactor = StreamRedactor::new(secrets);
        // Nothing here can begin the secret: written at once, so a streamed
        // line shows while the step still runs.
        assert_eq!(redactor.feed(b"first\n"), b"first\n");
        // `hun` may: it waits, and is written once the next read shows it
        // is not the secret.
        assert_eq!(redactor.feed(b"ok hun"), b"ok ");
        assert_eq!(redactor.feed(b"gry\n"), b"hungry\n");
        assert_eq!(redactor.feed(b"hunter2"), b"");
        assert_eq!(redactor.feed(b"2!"), b"[redacted]!");
    }

    #[test]
    fn a_long_log_keeps_its_head_and_tail_and_says_what_was_cut() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("stdout.log");
        let line = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde\n";
        let lines = usize::try_from(2 * LOG_CAP).expect("fits") / line.len();
        std::fs::write(&path, line.repeat(lines)).expect("write");
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .expect("open");
        compact_log(&file);
        let kept = std::fs::read_to_string(&path).expect("read");
        assert!(kept.len() as u64 <= LOG_CAP + 100, "{}", kept.len());
        assert!(kept.starts_with(line) && kept.ends_with(line));
        let marker = kept
            .lines()
            .find(|l| l.starts_with("[…"))
            .expect("a marker");
        assert!(marker.ends_with(" MB cut …]"), "{marker}");
        assert!(
            kept.lines()
                .all(|l| l == marker || l.len() == line.len() - 1)
        );
    }
}

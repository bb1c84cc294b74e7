//! The `stdio` driver: one game process, spoken to in bridge protocol v1.
//!
//! Owns starting a game (its own process group, cwd the repo root, a cleared
//! environment, rlimits), every request's deadline, the 1 MiB line cap, the
//! stderr tail kept for crash evidence, and making sure no process of the
//! game survives it. It does not decide what a failure means for a finding
//! (`findings` does) or what to play (`cell`, `simulate`).
//!
//! # Design
//!
//! - The game leads a new process group, so a kill of the group reaches the
//!   grandchildren it forked. The group is killed *before* the leader is
//!   reaped: while the leader is an unreaped zombie its pid (the group id)
//!   cannot be reused, so the kill cannot hit a stranger.
//! - rlimits cannot be set between fork and exec without `unsafe`
//!   (`pre_exec`), and the crate forbids `unsafe`. So a limited game is
//!   started as `gameplan __game-exec --as … -- PROGRAM ARGS`, which sets the
//!   limits on itself and then execs the game in place (same pid, same
//!   group). Resident memory is no rlimit: where gameplan can make a
//!   cgroup the wrapper joins it first (`--cgroup DIR`), else gameplan
//!   polls the game's process tree ([`crate::process::MemoryWatch`]). A
//!   game stopped at a limit exits with a status that names it
//!   ([`limits::stopped`]), so its crash finding, or the cell that did not
//!   play, says which key to raise.
//! - Every game process carries `GAMEPLAN_GAME_CELL=<unique id>` in its
//!   environment. A process that escaped the group (`setsid`) is found after
//!   the group is killed by scanning `/proc/*/environ` for that marker; it is
//!   killed and named as leaked.
//! - Lines are read through a fixed buffer and appended to one reused line
//!   buffer that refuses to grow past [`MAX_LINE`]: a game flooding output
//!   without a newline costs 1 MiB, not all memory.
//! - A caller that owns its thread (simulate's workers) can switch a game to
//!   blocking requests ([`GameProcess::use_blocking_io`]): one `write` and
//!   one `read` per request, where the reactor costs a failed read, an
//!   `epoll_wait` and a timer. The deadline is then kept by a [`Watchdog`]
//!   thread that kills an overdue game's group (the blocked read returns);
//!   the request reports a hang exactly as the timer would have.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout};

use serde_json::value::RawValue;

use crate::process::{Group, MemoryCgroup, MemoryWatch, SpawnInGroup as _, Tail};

use super::protocol::{
    self, Event, MAX_LINE, Observation, Op, PROTOCOL, RequestArg, observation_hash,
};

mod lean_observation;
pub mod limits;

// The types every driver shares moved to `driver`; re-exported so the
// stdio paths callers use keep working.
pub use super::driver::{
    Acted, Failure, GameSpec, Hello, KEPT_ENV, Leaked, Refusal, ResourceLimits, Seen, SpawnError,
};
use super::driver::{NOT_A_MESSAGE, TOO_LONG};

/// The variable that marks every process of one game, to find leaked ones.
pub const MARKER_ENV: &str = "GAMEPLAN_GAME_CELL";

/// How much of the game's stderr is kept for a crash's evidence.
const STDERR_TAIL: usize = 8 * 1024;

/// How long a game gets to exit after `close`, and after SIGTERM, before
/// the next, harder step.
const GRACE: Duration = Duration::from_millis(300);

/// How long a check for a dying game's exit sleeps, at most [`SHORT_NAPS`]
/// times (2 ms in all), before the 1 ms timer takes over.
const SHORT_NAP: Duration = Duration::from_micros(20);
const SHORT_NAPS: u32 = 100;

/// Quoted evidence (a line that is not JSON, say) is cut to this many bytes.
const EVIDENCE_MAX: usize = 300;

/// The response fields gameplan reads; the observation stays the text it
/// was sent as until [`read_observation`] reads it.
#[derive(serde::Deserialize)]
struct Wire<'a> {
    id: u64,
    ok: bool,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    version: Option<String>,
    #[serde(default)]
    protocol: Option<u32>,
    #[serde(default, borrow)]
    observation: Option<&'a RawValue>,
    #[serde(default)]
    reward: Option<f64>,
    #[serde(default)]
    done: Option<bool>,
    #[serde(default)]
    events: Vec<Event>,
}

/// An answer as kept once its line is gone: the wire's fields, the
/// observation read (or why it could not be).
struct Answer {
    ok: bool,
    error: Option<String>,
    name: Option<String>,
    version: Option<String>,
    protocol: Option<u32>,
    observation: Option<Result<Seen, Malformed>>,
    reward: Option<f64>,
    done: Option<bool>,
    events: Vec<Event>,
}

/// An observation that is not one: the violation's reason and evidence.
struct Malformed {
    reason: String,
    evidence: String,
}

/// Reads an observation: as a `Value` kept for the transcript, or (without
/// `keep_raw`) straight into the parsed observation and its hash, with
/// no `Value` built ([`lean_observation`]); a malformed one is told the
/// same way by both.
fn read_observation(
    raw: &RawValue,
    keep_raw: bool,
    scratch: &mut Vec<u8>,
) -> Result<Seen, Malformed> {
    if !keep_raw
        && let Ok(observation) = lean_observation::observation(raw.get())
        && let Ok(hash) = lean_observation::hash(raw.get(), scratch)
    {
        return Ok(Seen {
            observation,
            raw: serde_json::Value::Null,
            hash,
            screenshot: None,
            console: Vec::new(),
            url: None,
        });
    }
    let malformed = |e: &dyn std::fmt::Display, evidence: String| Malformed {
        reason: format!("the observation is malformed: {e}"),
        evidence,
    };
    let raw: serde_json::Value = match serde_json::from_str(raw.get()) {
        Ok(value) => value,
        Err(e) => return Err(malformed(&e, quote(raw.get().as_bytes()))),
    };
    match <Observation as serde::Deserialize>::deserialize(&raw) {
        Ok(observation) => Ok(Seen {
            observation,
            hash: observation_hash(&raw),
            raw,
            screenshot: None,
            console: Vec::new(),
            url: None,
        }),
        Err(e) => Err(malformed(&e, quote(raw.to_string().as_bytes()))),
    }
}

static NEXT_GAME: AtomicU64 = AtomicU64::new(0);

/// One running game.
pub struct GameProcess {
    child: Child,
    group: Group,
    pipes: Pipes,
    stderr: Tail,
    stderr_task: Option<tokio::task::JoinHandle<()>>,
    timeout: Duration,
    marker: String,
    next_id: u64,
    out: Vec<u8>,
    line: Vec<u8>,
    /// Keep each observation as a `Value` (a cell's transcript needs it;
    /// simulate does not: [`GameProcess::without_raw_observations`]).
    keep_raw: bool,
    /// Canonical JSON of the observation being hashed, reused.
    scratch: Vec<u8>,
    /// Set once the group was killed and the leader reaped.
    finished: bool,
    /// The limits it runs under (a stop at one is named).
    limits: ResourceLimits,
    /// Holds its resident memory under `limits.memory`.
    memory: Option<MemoryWatch>,
}

impl Drop for GameProcess {
    /// A session dropped without [`GameProcess::shutdown`] (a canceled task)
    /// still kills the whole group; the leader is not reaped yet, so the
    /// group id is still ours.
    fn drop(&mut self) {
        if !self.finished {
            self.group.kill();
        }
    }
}

/// Where a program name leads: a repo path, an absolute path, or the first
/// executable of that name on the game's `PATH`.
fn resolve_program(program: &str, spec: &GameSpec) -> Result<PathBuf, SpawnError> {
    if program.contains('/') {
        let path = spec.root.join(program);
        return if crate::process::is_executable(&path) {
            Ok(path)
        } else {
            Err(SpawnError::NotFound {
                program: program.to_owned(),
                looked: format!("{} is not an executable file", path.display()),
            })
        };
    }
    let path_var = spec.env.get("PATH").map_or("", String::as_str);
    crate::process::on_path(program, path_var, &spec.root).map_err(|missing| SpawnError::NotFound {
        program: missing.program,
        looked: format!("not on the game's PATH {:?}", missing.path),
    })
}

/// The argv that actually starts the game: builtins and limits resolved
/// (`cgroup`: the memory cgroup the wrapper joins, when there is one).
fn argv(
    spec: &GameSpec,
    cgroup: Option<&std::path::Path>,
) -> Result<Vec<std::ffi::OsString>, SpawnError> {
    let (first, rest) = spec
        .target
        .command()
        .split_first()
        .ok_or(SpawnError::Empty)?;
    let exe = || {
        std::env::current_exe().map_err(|source| SpawnError::Start {
            command: spec.command_text(),
            source,
        })
    };
    let mut game: Vec<std::ffi::OsString> = Vec::with_capacity(spec.target.command().len() + 2);
    if let Some(name) = first.strip_prefix("builtin:") {
        game.push(exe()?.into_os_string());
        game.push("game".into());
        game.push(name.into());
    } else {
        game.push(resolve_program(first, spec)?.into_os_string());
    }
    game.extend(rest.iter().map(Into::into));
    // Resident memory alone needs no wrapper unless there is a cgroup to join.
    let rlimits = ResourceLimits {
        memory: None,
        ..spec.limits
    };
    if !rlimits.any() && cgroup.is_none() {
        return Ok(game);
    }
    let mut wrapped: Vec<std::ffi::OsString> = vec![exe()?.into_os_string(), "__game-exec".into()];
    let limits = spec.limits;
    for (flag, value) in [
        ("--as", limits.address_space),
        ("--cpu", limits.cpu_seconds),
        ("--nofile", limits.open_files),
        ("--nproc", limits.processes),
    ] {
        if let Some(value) = value {
            wrapped.push(flag.into());
            wrapped.push(value.to_string().into());
        }
    }
    if let Some(dir) = cgroup {
        wrapped.push("--cgroup".into());
        wrapped.push(dir.into());
    }
    wrapped.push("--".into());
    wrapped.extend(game);
    Ok(wrapped)
}

/// Quotes `bytes` for evidence: lossy UTF-8, cut at [`EVIDENCE_MAX`] bytes.
pub fn quote(bytes: &[u8]) -> String {
    let cut = bytes.len().min(EVIDENCE_MAX);
    let mut text = format!("{:?}", String::from_utf8_lossy(&bytes[..cut]));
    if bytes.len() > cut {
        let _ = write!(text, " … ({} bytes in all)", bytes.len());
    }
    text
}

enum LineError {
    Closed,
    TooLong,
    /// The pipe broke (the game is gone).
    Broken,
}

/// How requests travel to the game and answers back.
enum Pipes {
    /// Through the runtime's reactor, each request under a timer.
    Async {
        stdin: ChildStdin,
        stdout: BufReader<ChildStdout>,
    },
    /// Blocking calls on the caller's thread ([`GameProcess::use_blocking_io`]).
    Blocking(BlockingPipes),
    /// Only while [`GameProcess::use_blocking_io`] swaps one for the other.
    Switching,
}

/// A game's pipes in blocking mode, and the answer bytes read ahead.
struct BlockingPipes {
    stdin: std::fs::File,
    stdout: std::fs::File,
    buffer: Box<[u8]>,
    /// The unread bytes are `buffer[start..end]`.
    start: usize,
    end: usize,
    watchdog: Arc<WatchdogState>,
}

impl BlockingPipes {
    /// Writes `request`, reads the answer's line into `line`; `Err(())`
    /// when the deadline passed first (the watchdog killed the game).
    fn exchange(
        &mut self,
        request: &[u8],
        line: &mut Vec<u8>,
        group: Group,
        timeout: Duration,
    ) -> Result<Result<(), LineError>, ()> {
        self.watchdog.arm(group, timeout);
        let answered = self.write_and_read(request, line);
        if self.watchdog.disarm() {
            Ok(answered)
        } else {
            Err(())
        }
    }

    fn write_and_read(&mut self, request: &[u8], line: &mut Vec<u8>) -> Result<(), LineError> {
        use std::io::{Read, Write};
        (&self.stdin)
            .write_all(request)
            .map_err(|_| LineError::Broken)?;
        loop {
            line.clear();
            loop {
                let available = &self.buffer[self.start..self.end];
                if let Some(at) = available.iter().position(|&b| b == b'\n') {
                    if line.len() + at > MAX_LINE {
                        return Err(LineError::TooLong);
                    }
                    line.extend_from_slice(&available[..at]);
                    self.start += at + 1;
                    if line.last() == Some(&b'\r') {
                        line.pop();
                    }
                    break;
                }
                if line.len() + available.len() > MAX_LINE {
                    // Keep only a prefix, for the evidence.
                    let room = EVIDENCE_MAX.saturating_sub(line.len()).min(available.len());
                    line.extend_from_slice(&available[..room]);
                    return Err(LineError::TooLong);
                }
                line.extend_from_slice(available);
                self.start = 0;
                self.end = 0;
                let n = loop {
                    match (&self.stdout).read(&mut self.buffer) {
                        Ok(n) => break n,
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(_) => return Err(LineError::Broken),
                    }
                };
                if n == 0 {
                    return Err(LineError::Closed);
                }
                self.end = n;
            }
            // A blank line says nothing; anything else must be the answer.
            if !line.iter().all(u8::is_ascii_whitespace) {
                return Ok(());
            }
        }
    }
}

/// Enforces the deadlines of blocking requests ([`GameProcess::use_blocking_io`]):
/// a thread that wakes every few milliseconds and kills the process group
/// of a game whose request is overdue, so the blocked read returns. Arming
/// and disarming are two atomic stores: no system call per request.
pub struct Watchdog {
    shared: Arc<WatchdogState>,
    thread: Option<std::thread::JoinHandle<()>>,
}

struct WatchdogState {
    /// When the request in flight is due, in nanoseconds since `epoch`
    /// (0: none is in flight).
    due: AtomicU64,
    /// The process group of the game answering it.
    group: std::sync::atomic::AtomicI32,
    closed: std::sync::atomic::AtomicBool,
    epoch: Instant,
}

/// How often the watchdog looks; a hang is declared at most this late.
const WATCHDOG_TICK: Duration = Duration::from_millis(5);

impl WatchdogState {
    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    fn arm(&self, group: Group, timeout: Duration) {
        self.group.store(group.id(), Ordering::Relaxed);
        let timeout = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX);
        self.due
            .store(self.now().saturating_add(timeout).max(1), Ordering::Release);
    }

    /// Whether the request was answered in time (the watchdog did not
    /// claim it first).
    fn disarm(&self) -> bool {
        self.due.swap(0, Ordering::AcqRel) != 0
    }
}

impl Watchdog {
    pub fn start() -> std::io::Result<Watchdog> {
        let shared = Arc::new(WatchdogState {
            due: AtomicU64::new(0),
            group: std::sync::atomic::AtomicI32::new(0),
            closed: std::sync::atomic::AtomicBool::new(false),
            epoch: Instant::now(),
        });
        let state = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("game-watchdog".into())
            .spawn(move || {
                while !state.closed.load(Ordering::Relaxed) {
                    let due = state.due.load(Ordering::Acquire);
                    if due != 0
                        && state.now() >= due
                        && state
                            .due
                            .compare_exchange(due, 0, Ordering::AcqRel, Ordering::Acquire)
                            .is_ok()
                    {
                        Group::led_by(state.group.load(Ordering::Relaxed)).kill();
                    }
                    std::thread::park_timeout(WATCHDOG_TICK);
                }
            })?;
        Ok(Watchdog {
            shared,
            thread: Some(thread),
        })
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            let _ = thread.join();
        }
    }
}

impl GameProcess {
    /// Starts the game with a marker of its own. Nothing is sent yet.
    pub fn spawn(spec: &GameSpec) -> Result<GameProcess, SpawnError> {
        GameProcess::spawn_marked(spec, &new_marker())
    }

    /// Starts the game with `marker` (from [`new_marker`]), which several
    /// games may share: simulate scans for leaks once per worker, not once
    /// per crashed game (a scan reads every process's environment).
    pub fn spawn_marked(spec: &GameSpec, marker: &str) -> Result<GameProcess, SpawnError> {
        let cgroup = spec.limits.memory.and_then(MemoryCgroup::make);
        let argv = argv(spec, cgroup.as_ref().map(MemoryCgroup::dir))?;
        let marker = marker.to_owned();
        let mut command = tokio::process::Command::new(&argv[0]);
        command
            .args(&argv[1..])
            .current_dir(&spec.root)
            .env_clear()
            .envs(&spec.env)
            .env(MARKER_ENV, &marker)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let (mut child, group) = command
            .spawn_in_group()
            .map_err(|source| SpawnError::Start {
                command: spec.command_text(),
                source,
            })?;
        let start_error = |what: &str| SpawnError::Start {
            command: spec.command_text(),
            source: std::io::Error::other(format!("the game has no {what}")),
        };
        let stdin = child.stdin.take().ok_or_else(|| start_error("stdin"))?;
        let stdout = child.stdout.take().ok_or_else(|| start_error("stdout"))?;
        let stderr = Tail::new(STDERR_TAIL);
        let stderr_task = stderr.keep(child.stderr.take().ok_or_else(|| start_error("stderr"))?);
        let memory = spec
            .limits
            .memory
            .map(|limit| MemoryWatch::start(group, limit, cgroup));
        Ok(GameProcess {
            child,
            group,
            pipes: Pipes::Async {
                stdin,
                stdout: BufReader::with_capacity(64 * 1024, stdout),
            },
            stderr,
            stderr_task: Some(stderr_task),
            timeout: spec.action_timeout,
            marker,
            next_id: 0,
            out: Vec::with_capacity(256),
            line: Vec::with_capacity(4096),
            keep_raw: true,
            scratch: Vec::with_capacity(1024),
            finished: false,
            limits: spec.limits,
            memory,
        })
    }

    /// The game's process id (and process group id).
    pub fn pid(&self) -> i32 {
        self.group.id()
    }

    /// From now on, requests block the calling thread: one `write` and one
    /// `read` each, no reactor, no timer, `watchdog` killing a game that
    /// overruns its deadline (reported as a hang, as before). Only for a
    /// caller that owns its thread (simulate's workers): the runtime's other
    /// tasks (this game's stderr reader) run only while it awaits something
    /// else, so such a caller yields between games.
    pub fn use_blocking_io(&mut self, watchdog: &Watchdog) -> std::io::Result<()> {
        let Pipes::Async { stdin, stdout } = std::mem::replace(&mut self.pipes, Pipes::Switching)
        else {
            return Ok(());
        };
        // What the buffered reader already holds is the start of the next answer.
        let held = stdout.buffer().to_vec();
        let stdin = std::fs::File::from(stdin.into_owned_fd()?);
        let stdout = std::fs::File::from(stdout.into_inner().into_owned_fd()?);
        let mut buffer = vec![0u8; 64 * 1024].into_boxed_slice();
        buffer[..held.len()].copy_from_slice(&held);
        self.pipes = Pipes::Blocking(BlockingPipes {
            stdin,
            stdout,
            buffer,
            start: 0,
            end: held.len(),
            watchdog: Arc::clone(&watchdog.shared),
        });
        Ok(())
    }

    /// From now on observations are not kept as sent ([`Seen::raw`] is
    /// null): only their parsed form and hash, which is all a simulated
    /// game records, read without building a `serde_json::Value`.
    pub fn without_raw_observations(&mut self) {
        self.keep_raw = false;
    }

    /// The marker value in this game's environment.
    pub fn marker(&self) -> &str {
        &self.marker
    }

    /// The last bytes the game wrote to stderr, as text.
    pub fn stderr_tail(&self) -> String {
        self.stderr.text()
    }

    /// `hello`: checks the game speaks protocol 1.
    pub async fn hello(&mut self) -> Result<Result<Hello, Refusal>, Failure> {
        let wire = self
            .request(Op::Hello, RequestArg::Protocol(PROTOCOL))
            .await?;
        if !wire.ok {
            return Ok(Err(refusal(wire)));
        }
        if wire.protocol.is_some_and(|p| p != PROTOCOL) {
            return Err(self
                .violation(
                    Op::Hello,
                    format!(
                        "the game speaks protocol {}, gameplan speaks {PROTOCOL}",
                        wire.protocol.unwrap_or_default()
                    ),
                    String::new(),
                )
                .await);
        }
        Ok(Ok(Hello {
            name: wire.name.unwrap_or_default(),
            version: wire.version.unwrap_or_default(),
        }))
    }

    /// `reset`: starts an episode; its first observation.
    pub async fn reset(&mut self, seed: i64) -> Result<Result<Seen, Refusal>, Failure> {
        let answered = self.observed(Op::Reset, RequestArg::Seed(seed)).await?;
        Ok(answered.map(|(seen, _)| seen))
    }

    /// `act`: one action; the observation after it.
    pub async fn act(&mut self, action: &str) -> Result<Result<Acted, Refusal>, Failure> {
        let answered = self.observed(Op::Act, RequestArg::Action(action)).await?;
        Ok(answered.map(|(seen, answer)| Acted {
            seen,
            reward: answer.reward.unwrap_or(0.0),
            done: answer.done.unwrap_or(false),
            events: answer.events,
        }))
    }

    /// Asks `op` (`reset`, `act`): the game's refusal, or the observation
    /// its answer must carry with the rest of the answer (a violation when
    /// it carries none, or one that is no observation).
    async fn observed(
        &mut self,
        op: Op,
        arg: RequestArg<'_>,
    ) -> Result<Result<(Seen, Answer), Refusal>, Failure> {
        let mut answer = self.request(op, arg).await?;
        if !answer.ok {
            return Ok(Err(refusal(answer)));
        }
        let Some(read) = answer.observation.take() else {
            return Err(self
                .violation(op, "the answer has no observation".into(), String::new())
                .await);
        };
        let seen = self.seen(op, read).await?;
        Ok(Ok((seen, answer)))
    }

    async fn seen(&mut self, during: Op, read: Result<Seen, Malformed>) -> Result<Seen, Failure> {
        match read {
            Ok(seen) => Ok(seen),
            Err(Malformed { reason, evidence }) => {
                Err(self.violation(during, reason, evidence).await)
            }
        }
    }

    async fn violation(&mut self, during: Op, reason: String, evidence: String) -> Failure {
        self.settle_stderr().await;
        Failure::Violation {
            during,
            reason,
            evidence,
            stderr_tail: self.stderr_tail(),
        }
    }

    /// Sends one request and reads its answer, all within the deadline.
    async fn request(&mut self, op: Op, arg: RequestArg<'_>) -> Result<Answer, Failure> {
        self.next_id += 1;
        let id = self.next_id;
        self.out.clear();
        protocol::write_request(&mut self.out, id, op, arg);
        let timeout = self.timeout;
        let exchanged = match &mut self.pipes {
            Pipes::Async { stdin, stdout } => {
                let (out, line) = (&self.out, &mut self.line);
                tokio::time::timeout(timeout, async {
                    stdin.write_all(out).await.map_err(|_| LineError::Broken)?;
                    stdin.flush().await.map_err(|_| LineError::Broken)?;
                    loop {
                        read_line(stdout, line).await?;
                        // A blank line says nothing; anything else must be the answer.
                        if !line.iter().all(u8::is_ascii_whitespace) {
                            return Ok(());
                        }
                    }
                })
                .await
                .map_err(|_| ())
            }
            Pipes::Blocking(pipes) => {
                pipes.exchange(&self.out, &mut self.line, self.group, timeout)
            }
            Pipes::Switching => Ok(Err(LineError::Broken)),
        };
        match exchanged {
            Err(()) => Err(Failure::Hang {
                during: op,
                waited: timeout,
            }),
            Ok(Err(LineError::TooLong)) => {
                let evidence = quote(&self.line);
                Err(self
                    .violation(op, format!("{TOO_LONG} {} KiB", MAX_LINE / 1024), evidence)
                    .await)
            }
            Ok(Err(LineError::Closed | LineError::Broken)) => Err(self.exited(op).await),
            Ok(Ok(())) => {
                let read = match serde_json::from_slice::<Wire>(&self.line) {
                    Ok(wire) if wire.id == id => Ok(Answer {
                        ok: wire.ok,
                        observation: wire
                            .observation
                            .map(|raw| read_observation(raw, self.keep_raw, &mut self.scratch)),
                        error: wire.error,
                        name: wire.name,
                        version: wire.version,
                        protocol: wire.protocol,
                        reward: wire.reward,
                        done: wire.done,
                        events: wire.events,
                    }),
                    Ok(wire) => Err(format!("the answer names id {} instead of {id}", wire.id)),
                    Err(e) => Err(format!("{NOT_A_MESSAGE}: {e}")),
                };
                match read {
                    Ok(answer) => Ok(answer),
                    Err(reason) => {
                        let evidence = quote(&self.line);
                        Err(self.violation(op, reason, evidence).await)
                    }
                }
            }
        }
    }

    /// The game closed its stdout: how it ended, if it did.
    async fn exited(&mut self, during: Op) -> Failure {
        let status = if self.wait_leader(GRACE).await {
            self.leader_status().unwrap_or_default()
        } else {
            "closed its stdout".to_owned()
        };
        let status = self.stopped_at_limit().unwrap_or(status);
        self.settle_stderr().await;
        Failure::Exited {
            during,
            status,
            stderr_tail: self.stderr_tail(),
        }
    }

    /// How the game's end reads when a limit stopped it: gameplan for
    /// memory, the kernel for CPU time (`SIGXCPU`, sent at the limit; see
    /// [`set_limits`]).
    fn stopped_at_limit(&self) -> Option<String> {
        if let Some(exceeded) = self.memory.as_ref().and_then(MemoryWatch::exceeded) {
            return Some(limits::stopped(limits::Stopped::Memory(exceeded.limit)));
        }
        let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
        match (
            waitid(Id::Pid(self.group.leader()), flags),
            self.limits.cpu_seconds,
        ) {
            (Ok(WaitStatus::Signaled(_, nix::sys::signal::Signal::SIGXCPU, _)), Some(secs)) => {
                Some(limits::stopped(limits::Stopped::Cpu(secs)))
            }
            _ => None,
        }
    }

    /// Gives the stderr reader a moment to take in what a dying game said.
    async fn settle_stderr(&mut self) {
        if let Some(task) = self.stderr_task.as_mut() {
            let _ = tokio::time::timeout(Duration::from_millis(200), task).await;
        }
    }

    /// How the leader ended, without reaping it (so its group id stays ours);
    /// `None` while it lives.
    fn leader_status(&self) -> Option<String> {
        let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
        match waitid(Id::Pid(self.group.leader()), flags) {
            Ok(WaitStatus::Exited(_, code)) => Some(format!("exited with code {code}")),
            Ok(WaitStatus::Signaled(_, signal, _)) => Some(format!("was killed by {signal}")),
            Ok(_) => None,
            // Already reaped (cannot happen before shutdown) or not our child.
            Err(_) => Some("ended".to_owned()),
        }
    }

    /// Ends the game: `close` (when `polite`), SIGTERM to the group, a grace,
    /// SIGKILL to the group, reap; then finds and kills any process that
    /// escaped the group (when `find_leaks`). Returns the leaked ones.
    pub async fn shutdown(mut self, polite: bool, find_leaks: bool) -> Vec<Leaked> {
        if polite {
            let short = self.timeout.min(Duration::from_secs(1));
            self.timeout = short;
            let _ = self.request(Op::Close, RequestArg::None).await;
            self.wait_leader(GRACE).await;
        }
        self.group.stop(GRACE, self.wait_leader(GRACE)).await;
        let _ = self.child.wait().await;
        self.finished = true;
        // Its cgroup goes with it (what escaped the group is killed there).
        self.memory = None;
        if let Some(task) = self.stderr_task.take() {
            task.abort();
        }
        if find_leaks {
            kill_marked(&self.marker)
        } else {
            Vec::new()
        }
    }

    /// Waits up to `within` for the leader to exit (without reaping it);
    /// whether it did. A dying game closes its pipes a few microseconds
    /// before it becomes a zombie, so the first checks only yield: a
    /// millisecond's sleep per crash was most of a crash-heavy simulation.
    /// On a busy machine the dying game may wait for a core before it gets
    /// there (one crash in eight took over 0.5 ms), so the next checks are
    /// [`SHORT_NAP`]s apart (a timer's sleep lasts at least a millisecond),
    /// [`SHORT_NAPS`] of them at most, before the timer takes over.
    async fn wait_leader(&self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        for round in 0u32.. {
            if self.leader_status().is_some() {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            if round < 64 {
                tokio::task::yield_now().await;
            } else if round < 64 + SHORT_NAPS {
                std::thread::sleep(SHORT_NAP);
            } else {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
        false
    }
}

/// A marker no other game of this machine carries: gameplan's pid, a
/// counter, the clock's nanoseconds.
pub fn new_marker() -> String {
    format!(
        "{}-{}-{}",
        std::process::id(),
        NEXT_GAME.fetch_add(1, Ordering::Relaxed),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos())
    )
}

fn refusal(wire: Answer) -> Refusal {
    Refusal {
        error: wire
            .error
            .unwrap_or_else(|| "refused without a reason".to_owned()),
    }
}

/// Reads one line (newline dropped) into `line`, refusing to hold more than
/// [`MAX_LINE`] bytes of it.
async fn read_line(
    reader: &mut BufReader<ChildStdout>,
    line: &mut Vec<u8>,
) -> Result<(), LineError> {
    line.clear();
    loop {
        let available = reader.fill_buf().await.map_err(|_| LineError::Broken)?;
        if available.is_empty() {
            return Err(LineError::Closed);
        }
        if let Some(end) = available.iter().position(|&b| b == b'\n') {
            if line.len() + end > MAX_LINE {
                return Err(LineError::TooLong);
            }
            line.extend_from_slice(&available[..end]);
            reader.consume(end + 1);
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            return Ok(());
        }
        let n = available.len();
        if line.len() + n > MAX_LINE {
            // Keep only a prefix, for the evidence.
            let room = EVIDENCE_MAX.saturating_sub(line.len()).min(n);
            line.extend_from_slice(&available[..room]);
            return Err(LineError::TooLong);
        }
        line.extend_from_slice(available);
        reader.consume(n);
    }
}

/// Kills every process whose environment holds `GAMEPLAN_GAME_CELL=marker`
/// (it escaped its group) and names it.
pub fn kill_marked(marker: &str) -> Vec<Leaked> {
    kill_carrying(&format!("{MARKER_ENV}={marker}\0"))
}

/// Kills every game this gameplan process started, in its group or out of
/// it: a second Ctrl-C exits at once, and a game's own process group does
/// not get the terminal's signal. Every marker starts with our pid.
pub fn kill_games_of_this_process() -> Vec<Leaked> {
    kill_carrying(&format!("{MARKER_ENV}={}-", std::process::id()))
}

/// Kills every live process whose environment block contains `needle`.
fn kill_carrying(needle: &str) -> Vec<Leaked> {
    let needle = needle.as_bytes();
    crate::process::carrying(|environ| environ.windows(needle.len()).any(|w| w == needle))
        .into_iter()
        .map(|found| Leaked {
            pid: found.pid,
            command: found.kill(),
        })
        .collect()
}

/// The first half of `gameplan __game-exec`: sets the limits on this
/// process (hard limits too: the game must not raise them back). The CPU
/// limit's hard one is a second later: at a soft limit equal to the hard
/// one the kernel sends SIGKILL, which says nothing, where SIGXCPU names
/// the limit.
pub fn set_limits(limits: ResourceLimits) -> Result<(), String> {
    use nix::sys::resource::{Resource, setrlimit};
    for (resource, value, hard) in [
        (Resource::RLIMIT_AS, limits.address_space, 0),
        (Resource::RLIMIT_CPU, limits.cpu_seconds, 1),
        (Resource::RLIMIT_NOFILE, limits.open_files, 0),
        (Resource::RLIMIT_NPROC, limits.processes, 0),
    ] {
        if let Some(value) = value {
            setrlimit(resource, value, value.saturating_add(hard))
                .map_err(|e| format!("cannot set {resource:?} to {value}: {e}"))?;
        }
    }
    Ok(())
}

/// The first step of `gameplan __game-exec --cgroup DIR`: moves this
/// process into the game's memory cgroup, before the game allocates
/// anything. A failure is said on stderr and the game starts anyway:
/// gameplan sees the group empty and polls the game's memory instead.
pub fn join_cgroup(dir: &std::path::Path) -> Result<(), String> {
    std::fs::write(dir.join("cgroup.procs"), std::process::id().to_string()).map_err(|e| {
        format!(
            "cannot join the memory cgroup {}: {e}; the game's memory is polled instead",
            dir.display()
        )
    })
}

/// The second half: becomes the game (same pid, same group, same
/// environment). Returns only on failure, saying why.
pub fn exec(argv: &[String]) -> String {
    let c_argv = match argv
        .iter()
        .map(|a| std::ffi::CString::new(a.as_bytes()))
        .collect::<Result<Vec<_>, _>>()
    {
        Ok(c_argv) => c_argv,
        Err(e) => return format!("the game command holds a NUL byte: {e}"),
    };
    let Some(program) = c_argv.first() else {
        return "no game command after `--`".to_owned();
    };
    match nix::unistd::execvp(program, &c_argv) {
        Err(e) => format!("cannot run `{}`: {e}", argv.join(" ")),
        Ok(never) => match never {},
    }
}

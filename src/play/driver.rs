//! The seam between a play and the game it plays: the [`Driver`] trait
//! (hello, reset, act, shut down) and what every driver answers with
//! ([`Seen`], [`Acted`], [`Refusal`], [`Failure`], [`Hello`]).
//!
//! Two drivers sit behind it: `stdio` (a process speaking bridge protocol
//! v1) and `webdriver` (a page in headless Chromium through chromedriver);
//! `game_target` names them and says what each starts ([`GameTarget`]).
//! [`Session`] is whichever one a [`GameSpec`]'s target asks for; cells, replay,
//! shrink and the estimate's smoke check drive a `Session`, so a finding,
//! a trace and a replay mean the same for both. Simulate keeps driving the
//! stdio [`super::stdio::GameProcess`] directly (its hot path), through the
//! same trait.
//!
//! # Design
//!
//! The trait's methods return `impl Future + Send` rather than boxed
//! futures: a generic caller (`Episode::act::<GameProcess>`) is
//! monomorphized and costs simulate nothing, and the `Send` bound lets a
//! cell run on any worker thread. `Session` is an enum, not a `dyn`
//! object, for the same reason.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::protocol::{Event, Observation, Op};
use super::stdio::GameProcess;
use super::webdriver::BrowserSession;
pub use crate::game_target::{BrowserGame, GameTarget};

/// The environment variables a game inherits from gameplan; everything else
/// it sees is what `[game] env` declares, plus the `GAMEPLAN_GAME_CELL`
/// marker (docs/bridge.md › The environment).
pub const KEPT_ENV: [&str; 4] = ["PATH", "HOME", "LANG", "TMPDIR"];

/// How to start a game.
#[derive(Debug, Clone, PartialEq)]
pub struct GameSpec {
    /// A process or a page.
    pub target: GameTarget,
    /// The game's whole environment (cleared, then this). [`GameSpec::new`]
    /// fills in [`KEPT_ENV`] from the caller's; add `game.env` to it.
    pub env: BTreeMap<String, String>,
    /// The repo root: the game's cwd, and what relative paths are relative to.
    pub root: PathBuf,
    /// How long any one request may take before the game is declared hung.
    pub action_timeout: Duration,
    /// Actions with no change in observation before a `stuck` finding.
    pub stuck_after: u64,
    /// Any limit makes the game start through `gameplan __game-exec`, and
    /// `builtin:NAME` runs `gameplan game NAME`: both re-run the current
    /// executable, so a caller that is not gameplan (a unit test's harness)
    /// uses [`ResourceLimits::NONE`] and no builtin.
    /// A browser game has no process of its own to limit: unused there.
    pub limits: ResourceLimits,
    /// Names in `env` whose values are secrets: a trace records them by
    /// name only, and a replay reads them again from its environment.
    pub secret_env: std::collections::BTreeSet<String>,
    /// `game.goal`: an expression over `obs` and `prev` that holds when
    /// the cell reached its goal (besides a `goal` event).
    pub goal: Option<String>,
    /// The plan's `[[invariants]]`, judged after every action.
    pub invariants: Vec<crate::plan::model::Invariant>,
    /// A browser cell's video: frames at most (one per observation);
    /// `None` records none (`budget.video = false`, a replay, a smoke
    /// check, a stdio game).
    pub video: Option<u64>,
}

impl GameSpec {
    /// A stdio game's spec with the default deadlines of docs/bridge.md ›
    /// Deadlines (`action_timeout` 10 s, `stuck_after` 8), the default
    /// limits, and the kept variables of `parent_env` (the caller's
    /// environment, as captured in its context).
    pub fn new(command: Vec<String>, root: PathBuf, parent_env: &BTreeMap<String, String>) -> Self {
        Self::of(GameTarget::Stdio { command }, root, parent_env)
    }

    /// The spec of `target`, with [`GameSpec::new`]'s defaults.
    pub fn of(target: GameTarget, root: PathBuf, parent_env: &BTreeMap<String, String>) -> Self {
        let env = KEPT_ENV
            .iter()
            .filter_map(|k| Some(((*k).to_owned(), parent_env.get(*k)?.clone())))
            .collect();
        GameSpec {
            target,
            env,
            root,
            action_timeout: Duration::from_secs(10),
            stuck_after: 8,
            limits: ResourceLimits::default(),
            secret_env: std::collections::BTreeSet::new(),
            goal: None,
            invariants: Vec::new(),
            video: None,
        }
    }

    /// The command as written in traces (`builtin:NAME` stays as is); a
    /// browser game's page.
    pub fn command_text(&self) -> String {
        self.target.text()
    }
}

/// Limits of a game's processes; `None` leaves the limit as inherited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResourceLimits {
    /// Resident memory of the game's whole process tree, in bytes: what
    /// it uses, not what it reserves.
    pub memory: Option<u64>,
    /// Address space in bytes (`RLIMIT_AS`).
    pub address_space: Option<u64>,
    /// CPU seconds (`RLIMIT_CPU`): a game spinning forever is stopped by the kernel.
    pub cpu_seconds: Option<u64>,
    /// Open files (`RLIMIT_NOFILE`).
    pub open_files: Option<u64>,
    /// Processes of the user (`RLIMIT_NPROC`; root is exempt by the kernel).
    pub processes: Option<u64>,
}

impl Default for ResourceLimits {
    /// Generous for a game, small enough that a runaway one cannot take the
    /// machine: 4 GiB resident, 10 CPU minutes, 1024 files; address space
    /// unlimited (a JVM reserves a quarter of the machine's memory up front).
    fn default() -> Self {
        ResourceLimits {
            memory: Some(4 << 30),
            address_space: None,
            cpu_seconds: Some(600),
            open_files: Some(1024),
            processes: None,
        }
    }
}

impl ResourceLimits {
    /// No limits: the game is started directly, one exec less.
    pub const NONE: ResourceLimits = ResourceLimits {
        memory: None,
        address_space: None,
        cpu_seconds: None,
        open_files: None,
        processes: None,
    };

    pub(crate) fn any(self) -> bool {
        self.memory.is_some()
            || self.address_space.is_some()
            || self.cpu_seconds.is_some()
            || self.open_files.is_some()
            || self.processes.is_some()
    }
}

/// Why a game could not be started at all (an environment error, not a finding).
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    #[error("the game command is empty")]
    Empty,
    #[error("cannot find the game program `{program}` ({looked})")]
    NotFound { program: String, looked: String },
    #[error("cannot start the game `{command}`: {source}")]
    Start {
        command: String,
        source: std::io::Error,
    },
    /// A program the driver needs is not installed (chromedriver, Chromium).
    #[error(
        "cannot find `{program}` ({looked}): the webdriver driver needs it; install the Debian \
         package `{package}` (`apt-get install {package}`)"
    )]
    Missing {
        program: String,
        package: String,
        looked: String,
    },
    /// The browser or its WebDriver server did not come up.
    #[error("cannot start the browser: {0}")]
    Browser(String),
}

impl SpawnError {
    /// Whether the machine lacks something (exit 3: an environment error
    /// found before anything was charged) rather than the game failing: a
    /// program the driver needs, the game's own program (missing, or not
    /// executable), an empty command.
    pub fn is_environment(&self) -> bool {
        match self {
            SpawnError::Missing { .. } | SpawnError::NotFound { .. } | SpawnError::Empty => true,
            SpawnError::Start { source, .. } => matches!(
                source.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::PermissionDenied
            ),
            SpawnError::Browser(_) => false,
        }
    }
}

/// How a request failed for good: the session is over and the process must go.
#[derive(Debug, Clone, PartialEq)]
pub enum Failure {
    /// The game died, or closed its stdout.
    Exited {
        during: Op,
        status: String,
        stderr_tail: String,
    },
    /// No whole answer within the deadline.
    Hang { during: Op, waited: Duration },
    /// An answer that is not the protocol (not JSON, another id, too long).
    Violation {
        during: Op,
        reason: String,
        evidence: String,
        stderr_tail: String,
    },
}

impl Failure {
    /// `crash` or `hang`: the finding category and the trace's end.
    pub fn category_name(&self) -> &'static str {
        match self {
            Failure::Hang { .. } => "hang",
            Failure::Exited { .. } | Failure::Violation { .. } => "crash",
        }
    }

    pub fn during(&self) -> Op {
        match self {
            Failure::Exited { during, .. }
            | Failure::Hang { during, .. }
            | Failure::Violation { during, .. } => *during,
        }
    }

    /// One line for people: what happened.
    pub fn describe(&self) -> String {
        match self {
            Failure::Exited { during, status, .. } => {
                format!("the game {status} during `{}`", during.name())
            }
            Failure::Hang { during, waited } => format!(
                "the game did not answer `{}` within {:.1} s",
                during.name(),
                waited.as_secs_f64()
            ),
            Failure::Violation { during, reason, .. } => {
                format!("protocol violation answering `{}`: {reason}", during.name())
            }
        }
    }

    pub fn stderr_tail(&self) -> Option<&str> {
        match self {
            Failure::Exited { stderr_tail, .. } | Failure::Violation { stderr_tail, .. } => {
                Some(stderr_tail)
            }
            Failure::Hang { .. } => None,
        }
    }

    pub fn evidence(&self) -> Option<&str> {
        match self {
            Failure::Violation { evidence, .. } => Some(evidence),
            _ => None,
        }
    }

    /// The line the game wrote where an answer belonged, when it was not a
    /// protocol message at all (not JSON, JSON that is no response, or an
    /// endless line): usually a log line on stdout. Unquoted from the
    /// evidence, and only its first 300 bytes.
    pub fn stray_output(&self) -> Option<String> {
        let Failure::Violation {
            reason, evidence, ..
        } = self
        else {
            return None;
        };
        if !(reason.starts_with(NOT_A_MESSAGE) || reason.starts_with(TOO_LONG)) {
            return None;
        }
        Some(unquote(evidence))
    }
}

/// How a violation's reason starts when the line was no protocol message.
pub(crate) const NOT_A_MESSAGE: &str = "the answer is not a protocol message";
/// How a violation's reason starts when the line had no end in sight.
pub(crate) const TOO_LONG: &str = "a line longer than";

/// The text [`quote`] quoted: its outer quotes, its `\"` and `\\`
/// escapes and its "… (N bytes in all)" tail dropped (other escapes stay,
/// which keeps control characters out of a one-line message).
fn unquote(quoted: &str) -> String {
    let Some(body) = quoted.strip_prefix('"') else {
        return quoted.to_owned();
    };
    let mut text = String::with_capacity(body.len());
    let mut chars = body.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => break,
            '\\' => match chars.next() {
                Some(e @ ('"' | '\\')) => text.push(e),
                Some(e) => {
                    text.push('\\');
                    text.push(e);
                }
                None => text.push('\\'),
            },
            c => text.push(c),
        }
    }
    text
}

/// A request the game answered with `ok: false`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub error: String,
}

/// A game's observation, with its hash.
#[derive(Debug, Clone, PartialEq)]
pub struct Seen {
    pub observation: Observation,
    /// The observation exactly as sent (for the transcript).
    pub raw: serde_json::Value,
    /// The hash of `raw` (what traces record and replay compares).
    pub hash: String,
    /// The screenshot of this observation, relative to the cell's
    /// directory (`screenshots/step-0003.png`); never part of the hash.
    pub screenshot: Option<String>,
    /// Errors the page logged or threw since the last observation (a
    /// browser's console); never part of the hash.
    pub console: Vec<String>,
    /// The page's address (a browser game's); never part of the hash (a
    /// served game's port changes with every session).
    pub url: Option<String>,
}

/// The answer to `act`.
#[derive(Debug, Clone, PartialEq)]
pub struct Acted {
    pub seen: Seen,
    pub reward: f64,
    pub done: bool,
    pub events: Vec<Event>,
}

/// What `hello` told.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Hello {
    pub name: String,
    pub version: String,
}

/// A process that outlived its group's kill (it called `setsid`), killed now.
#[derive(
    Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
pub struct Leaked {
    pub pid: i32,
    pub command: String,
}

/// A driver's answer: the value, a refusal (`ok: false`), or the failure
/// that ended the session.
pub type Answer<T> = Result<Result<T, Refusal>, Failure>;

/// One running game, whatever carries it.
pub trait Driver: Send {
    /// `hello`: the game (or page) is there and speaks our language.
    fn hello(&mut self) -> impl Future<Output = Answer<Hello>> + Send;
    /// `reset`: starts an episode with `seed`; its first observation.
    fn reset(&mut self, seed: i64) -> impl Future<Output = Answer<Seen>> + Send;
    /// `act`: one action; the observation after it.
    fn act(&mut self, action: &str) -> impl Future<Output = Answer<Acted>> + Send;
    /// What the game said on the side (a process's stderr), for evidence.
    fn stderr_tail(&self) -> String;
    /// Ends the game and everything it started; returns the processes that
    /// escaped their group (killed now) when `find_leaks`.
    fn shutdown(self, polite: bool, find_leaks: bool) -> impl Future<Output = Vec<Leaked>> + Send;
}

impl Driver for GameProcess {
    fn hello(&mut self) -> impl Future<Output = Answer<Hello>> + Send {
        GameProcess::hello(self)
    }

    fn reset(&mut self, seed: i64) -> impl Future<Output = Answer<Seen>> + Send {
        GameProcess::reset(self, seed)
    }

    fn act(&mut self, action: &str) -> impl Future<Output = Answer<Acted>> + Send {
        GameProcess::act(self, action)
    }

    fn stderr_tail(&self) -> String {
        GameProcess::stderr_tail(self)
    }

    fn shutdown(self, polite: bool, find_leaks: bool) -> impl Future<Output = Vec<Leaked>> + Send {
        GameProcess::shutdown(self, polite, find_leaks)
    }
}

/// The game of a cell, a replay or a smoke check: a stdio process or a
/// browser page, as its [`GameSpec`] says.
// `allow`, not `expect`: whether the lint fires depends on which drivers
// there are (a new variant as large as the stdio game's stills it).
#[allow(
    clippy::large_enum_variant,
    reason = "one per cell, never moved in a loop; boxing the stdio game would cost its hot path a pointer chase"
)]
pub enum Session {
    Stdio(GameProcess),
    Browser(Box<BrowserSession>),
}

impl Session {
    /// Starts the game `spec` describes. A browser game saves a screenshot
    /// per observation under `artifacts/screenshots/` when `artifacts` is
    /// given (a cell's directory; replay and the smoke check take none).
    /// What the driver did that is no finding, for the cell's report (a
    /// browser's closed tabs, undone ways out of the game, outside
    /// resources that could not load); a stdio game has none.
    pub fn notes(&self) -> Vec<String> {
        match self {
            Session::Stdio(_) => Vec::new(),
            Session::Browser(page) => page.notes(),
        }
    }

    /// Stops a browser cell's video ([`super::webdriver`]'s `video.rs`)
    /// and ends it in the background, to be awaited after the shutdown
    /// (see [`finished_video`]); a stdio game has none.
    pub async fn end_video(&mut self) -> Option<super::webdriver::VideoEnding> {
        match self {
            Session::Stdio(_) => None,
            Session::Browser(page) => page.end_video().await,
        }
    }

    pub async fn start(spec: &GameSpec, artifacts: Option<&Path>) -> Result<Session, SpawnError> {
        match &spec.target {
            GameTarget::Stdio { .. } => GameProcess::spawn(spec).map(Session::Stdio),
            GameTarget::Browser(browser) => BrowserSession::start(spec, browser, artifacts)
                .await
                .map(|b| Session::Browser(Box::new(b))),
        }
    }
}

impl Driver for Session {
    async fn hello(&mut self) -> Answer<Hello> {
        match self {
            Session::Stdio(game) => game.hello().await,
            Session::Browser(page) => page.hello().await,
        }
    }

    async fn reset(&mut self, seed: i64) -> Answer<Seen> {
        match self {
            Session::Stdio(game) => game.reset(seed).await,
            Session::Browser(page) => page.reset(seed).await,
        }
    }

    async fn act(&mut self, action: &str) -> Answer<Acted> {
        match self {
            Session::Stdio(game) => game.act(action).await,
            Session::Browser(page) => page.act(action).await,
        }
    }

    fn stderr_tail(&self) -> String {
        match self {
            Session::Stdio(game) => game.stderr_tail(),
            Session::Browser(page) => page.stderr_tail(),
        }
    }

    async fn shutdown(self, polite: bool, find_leaks: bool) -> Vec<Leaked> {
        match self {
            Session::Stdio(game) => game.shutdown(polite, find_leaks).await,
            Session::Browser(page) => page.shutdown(polite).await,
        }
    }
}

/// Kills every game and browser this gameplan process started (a second
/// Ctrl-C): games and chromedriver carry the marker in their environment,
/// Chromium's helpers name the marked profile in their arguments.
pub fn kill_now() {
    super::stdio::kill_games_of_this_process();
    super::webdriver::kill_browsers_of_this_process();
}

/// What an ended video came to (see [`Session::end_video`]), and its notes.
pub async fn finished_video(
    ending: Option<super::webdriver::VideoEnding>,
) -> (Option<super::cell_report::Video>, Vec<String>) {
    match ending {
        Some(ending) => ending.await.unwrap_or_default(),
        None => (None, Vec::new()),
    }
}

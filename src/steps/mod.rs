//! Step kinds: what each kind of step does, what its result depends on, and
//! which files it produces.
//!
//! The one place where the engine meets the outside world (processes, money,
//! play and review). The engine owns scheduling, the journal and the store
//! and names no kind; a kind owns its reuse key, its run, its outputs, and
//! what a resume does with an attempt that was running when gameplan died.
//!
//! # Adding a kind
//!
//! A kind is two files and a registry line: its plan side
//! (`plan/kinds/<kind>.rs`: its keys, schema, decoding and checks, listed
//! once in `plan::kinds`' `registry!`) and its run side here, implementing
//! [`Kind`]. The compiler then points at the one match that builds its
//! runner ([`Kinds::for_run`]). Nothing in `engine/` changes: it asks the
//! registry.
//!
//! # Design
//!
//! - **A kind decides what of its upstream enters its key.** It is handed
//!   every needed step's output digest ([`Upstream`]) and keeps those its
//!   result depends on: a `command` step keys on all of them, a `play` cell
//!   on none of the money steps before it, so a paid cell can be reused.
//! - **Keys are computed ahead of running, in one place** (`engine::keys`),
//!   for `plan explain`, for `estimate` (which must know which cells will be
//!   reused before anything is bought) and for the run alike.
//! - **A running step reaches the run through [`StepIo`]**: checkpoints (plain
//!   or durable: the latter returns only once the record is on disk), the
//!   checkpoints of earlier attempts on resume, the backend, the person at
//!   the terminal (asked off the runtime; a stop is a no), and the run's
//!   output for a warning that does not fail the step.
//! - **A step reads what the steps it needs left** ([`StepIo::upstream`]):
//!   their checkpoints and directories, of its needs and theirs (a `finish`
//!   reads `register`'s job id through the `deliver`s between them), the
//!   same from the journal on resume as in the run that wrote them; read
//!   only, and nothing of a step it does not need.
//! - **A kind keeps small values across runs under keys of its own**
//!   ([`StepContext::units`], `<state>/units/`): reuse finer than a step
//!   (a clean verdict per lens × unit). A torn or missing value is a miss.
//! - **A request goes out as it was first journaled** ([`StepIo::request_once`]):
//!   a fresh idempotency key and the body, in one durable record before
//!   anything is sent; an attempt that never heard back ends
//!   [`StepOutcome::Uncertain`], the run stays open, and its resume sends
//!   the same key and body. Every checkpoint is redacted before it is
//!   written: no secret reaches the journal.

pub mod aggregate;
pub mod command;
pub mod deliver;
pub mod estimate;
pub mod finish;
pub mod game;
pub mod gate;
pub mod launcher;
pub mod money;
pub mod play;
pub mod play_paid;
pub mod register;
pub mod simulate;

use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::Value;
use tokio::sync::watch;

use crate::backend::Connection;
use crate::graph::Instance;
use crate::journal::run::Checkpoint;
use crate::journal::step_log::{LiveLog, Segment};
use crate::plan::model::{Plan, Step, StepKind};
use crate::reuse::{FileHashCache, RestoreScope, ReuseKey};

/// A boxed future a kind returns from its async methods (the trait is used as
/// a trait object, so its futures are boxed).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// One kind of step. See the module doc for what a kind decides.
pub trait Kind: Send + Sync {
    /// The plan's name for it.
    fn kind(&self) -> StepKind;

    /// Whether its result can be reused, and under which key. Called before
    /// the step runs (also by `plan explain`), with its upstream's outputs.
    fn reuse(&self, cx: &KeyContext<'_>) -> Result<Reuse, StepError>;

    /// Runs one attempt.
    fn run<'a>(&'a self, cx: &'a StepContext, io: &'a StepIo) -> BoxFuture<'a, StepOutcome>;

    /// The files a succeeded attempt produced: their digest is what steps
    /// that need it key on, and they are stored for reuse.
    fn outputs(&self, cx: &StepContext) -> Result<Outputs, StepError>;

    /// Where a stored result is restored to (where [`Kind::outputs`] puts
    /// its `base`): the repo root unless the kind keeps its files elsewhere.
    fn restore_base(&self, cx: &StepContext) -> PathBuf {
        cx.root.clone()
    }

    /// What a stored result may write when it is restored: only what the
    /// step declares it produces, and never its inputs or the plan file (an
    /// edited `entry.json` must not overwrite a source file).
    fn restore_scope(&self, _cx: &StepContext) -> Result<RestoreScope, StepError> {
        Ok(RestoreScope::default())
    }

    /// An attempt was running when gameplan died: how did it end? By
    /// default it runs again (a play cell replays from its seed).
    fn left_running<'a>(
        &'a self,
        _cx: &'a StepContext,
        _attempt: u32,
    ) -> BoxFuture<'a, LeftRunning> {
        Box::pin(async { LeftRunning::RunAgain })
    }

    /// The log a report points at for a step that ran, when the kind keeps
    /// one in its directory (a play cell's report). Output a step's attempt
    /// wrote to the run's one `steps.log` (a command's) needs none: the
    /// engine names it from the segments the step gave [`StepIo::set_log`].
    fn log(&self, _step_dir: &Path) -> Option<PathBuf> {
        None
    }

    /// A second Ctrl-C: take down whatever this kind started, at once.
    fn kill_now(&self) {}

    /// What looks wrong in a step's settings that is not an error (an input
    /// pattern that matches no file), for `plan explain`.
    fn warnings(&self, _root: &Path, _step: &Step) -> Vec<String> {
        Vec::new()
    }

    /// The `[pools]` entry its steps take a slot of when they name no
    /// `pool` (a play cell: `play`, or `browser` for the webdriver driver).
    fn resource(&self, _plan: &Plan) -> Option<&'static str> {
        None
    }

    /// Whether the kind keeps started work queued itself (the command
    /// kind's launcher starts a queued step the moment a slot frees), so the
    /// engine may hand it more steps than run at once. Other kinds' steps
    /// each take a full slot.
    fn queues_ahead(&self) -> bool {
        false
    }

    /// What this kind adds to the end-of-run summary from a step's
    /// directory (an aggregate's findings, a gate's verdict, a
    /// settlement), once per step that succeeded or was reused; `None` adds
    /// nothing.
    fn summary(&self, _step_dir: &Path) -> Option<SummarySection> {
        None
    }

    /// What a step of this kind adds to the run's playtest (a cell's
    /// report, a simulation's counts, a merge of the cells), from its
    /// directory; asked of every step, and the playtest keeps the parts
    /// of steps that ended. `None` adds nothing.
    fn playtest(&self, _step_dir: &Path) -> Option<PlaytestPart> {
        None
    }

    /// Whether an incomplete step of this kind still lets the steps that
    /// need it run: its partial results are results (a play cell its
    /// budget stopped has a report to deliver and merge). By default not:
    /// a step that could not judge or finish everything (a gate
    /// INCOMPLETE) stops what needs it, reported not run (`always` steps
    /// still run).
    fn partial_results_are_results(&self) -> bool {
        false
    }

    /// The `JUnit` test cases a step of this kind reports (a gate's lens ×
    /// unit, an aggregate's findings), from its directory, so a reused
    /// step and a resumed run report the same; asked of every step that
    /// ran or was reused (a gate that failed still has its cases). Each
    /// step's cases are a test suite of their own in `--junit`.
    fn junit_cases(&self, _step_dir: &Path) -> Vec<JunitCase> {
        Vec::new()
    }

    /// Whether its steps read the cells and simulations they need
    /// ([`StepContext::reads`]: a merge, a delivery), so the engine finds
    /// them for its steps; other kinds' steps get none, and no walk.
    fn reads_cells(&self) -> bool {
        false
    }

    /// Whether its steps read the play cells ahead of them
    /// ([`StepIo::cells_ahead`]: what a run will play, and what it will
    /// reuse), so the engine works them out before the run starts (the
    /// estimate prices them).
    fn reads_cells_ahead(&self) -> bool {
        false
    }

    /// The persona and controller of a step of this kind that plays one
    /// cell (a play cell), for the cells ahead; `None` for a kind whose
    /// steps play no cell.
    fn cell_of(
        &self,
        _plan: &Plan,
        _step: &Step,
        _instance: &Instance,
    ) -> Option<(String, String)> {
        None
    }

    /// Whether its steps judge the run's findings (a gate): a run whose
    /// findings no such step judged says so, and a step of it that failed
    /// stops what needs it as "did not pass" rather than as a failure.
    fn judges(&self) -> bool {
        false
    }

    /// Whether its steps call the plan's backend (money and delivery): a
    /// run with such a step opens the backend before anything runs, and
    /// refuses (exit 3, nothing charged) when it cannot.
    fn uses_backend(&self) -> bool {
        false
    }
}

pub use crate::report::playtest::PlaytestPart;

pub use crate::report::run::{CaseOutcome, JunitCase, SummarySection};

/// A step ahead of another that played: a play cell or a simulation, and
/// where its kind keeps what it adds to the playtest.
#[derive(Debug, Clone)]
pub struct CellRead {
    /// Its step id (`play[kid,standard,1]`).
    pub id: String,
    /// Its matrix values.
    pub cell: crate::graph::Cell,
    /// What its kind adds to the playtest, from its directory.
    pub part: PlaytestPart,
}

/// What a kind says of reusing its result.
#[derive(Debug, Clone)]
pub enum Reuse {
    /// Reused when a result stored under this key exists.
    Key(ReuseKey),
    /// Never reused, and why (for `plan explain`).
    Never(String),
    /// Not known until a step it keys on has run (`plan explain` only).
    AfterUpstream(String),
}

/// A play cell as decided before the run started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CellAhead {
    /// The cell's step id (`play[kid,standard,1]`).
    pub id: String,
    /// Its key's result is stored (and `--no-reuse` is off): it will not
    /// run, and is not bought.
    pub reused: bool,
    /// Its reuse key's digest, when it has one.
    pub key: Option<String>,
    /// The persona slug and controller name it plays with (empty when the
    /// cell does not resolve: its play step then fails with why).
    pub persona: String,
    pub controller: String,
}

/// What a step's key may know of a step it needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    pub id: String,
    pub kind: StepKind,
    /// The digest of its outputs' content, or `None` before it has run.
    pub outputs: Option<String>,
}

/// Files a step produced: paths relative to `base` (the repo root for a
/// `command` step; the step's own directory for artifacts).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outputs {
    pub base: PathBuf,
    pub files: Vec<String>,
}

/// How an attempt a dead gameplan left running ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeftRunning {
    /// It ended while nobody watched; this is its outcome, and where its
    /// output is in the run's log.
    Ended(StepOutcome, Vec<Segment>),
    /// It did not end (or cannot be known to have): run a new attempt.
    RunAgain,
    /// The run was stopped while the attempt still lived: start nothing of
    /// the step; a later resume looks again.
    StillRunning,
}

/// What a step's key is computed from.
pub struct KeyContext<'a> {
    pub root: &'a Path,
    pub plan: &'a Plan,
    /// The cells and simulations ahead of the step, needed directly or
    /// not, in the plan's order (the part of the plan the run runs): a
    /// kind reads them here, never by walking the plan. (A key reads their
    /// ids; their files are the run's only when the step runs.)
    pub reads: &'a [CellRead],
    pub step: &'a Step,
    pub instance: &'a Instance,
    pub upstream: &'a [Upstream],
    pub hashes: &'a Mutex<FileHashCache>,
    pub env: &'a BTreeMap<String, String>,
    /// The plan file (a gate reads `dispositions.toml` beside it).
    pub plan_path: Option<&'a Path>,
    /// The kinds' unit store, given only when the caller wants to know how
    /// much finer-than-a-step reuse a step would get (`plan explain`: how
    /// many units each lens would judge and reuse); a run passes `None`,
    /// since the step counts that itself as it runs.
    pub units: Option<&'a crate::reuse::UnitStore>,
    /// The run's baseline (`plan run --baseline`): an aggregate labels its
    /// findings against it, so it enters the aggregate's key.
    pub baseline: Option<&'a crate::report::baseline::Baseline>,
}

/// Everything one step instance may use while it runs.
pub struct StepContext {
    pub root: PathBuf,
    /// The plan file, repo-relative (when it is inside the repo).
    pub plan_file: Option<String>,
    pub run_id: String,
    /// `runs/<run-id>/steps/<step>/`: logs and artifacts.
    pub step_dir: PathBuf,
    pub plan: Arc<Plan>,
    /// The cells and simulations ahead of it: see [`KeyContext::reads`].
    pub reads: Arc<Vec<CellRead>>,
    pub step: Step,
    pub instance: Instance,
    pub attempt: u32,
    pub hashes: Arc<Mutex<FileHashCache>>,
    /// Flips to true when the run is stopped (signal, `plan stop`, fail-fast).
    pub cancel: watch::Receiver<bool>,
    /// The environment steps inherit (captured once by the CLI).
    pub env: Arc<BTreeMap<String, String>>,
    /// The run whose attempt [`Kind::left_running`] looks at: this run's id,
    /// or an earlier run's whose step may still be running (`step_dir` is
    /// then that run's).
    pub left_by: String,
    /// Says something the user must see while the step waits (not output).
    pub note: Arc<dyn Fn(&str) + Send + Sync>,
    /// Small values the kind keeps across runs under keys of its own
    /// (`<state>/units/`): unit-level reuse, such as a clean verdict per
    /// lens × unit. The kind owns the keys and what enters them.
    pub units: crate::reuse::UnitStore,
    /// The run's baseline (`plan run --baseline`), when it has one.
    pub baseline: Option<Arc<crate::report::baseline::Baseline>>,
}

impl StepContext {
    /// `Interrupted`, saying `message`, once the run was stopped: a kind
    /// asks before each thing it would start, and starts nothing after.
    pub fn stopped(&self, message: impl Into<String>) -> Option<StepOutcome> {
        (*self.cancel.borrow()).then(|| StepOutcome::Interrupted {
            message: message.into(),
        })
    }
}

/// How one attempt of a step ended. Each maps to a step state and to an
/// exit code by one order (`engine::outcome`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepOutcome {
    Succeeded,
    Failed {
        exit_code: Option<i32>,
        message: String,
    },
    /// Stopped from outside (signal, `plan stop`, fail-fast) before it finished.
    Interrupted {
        message: String,
    },
    /// Ran to the end but could not judge or finish everything: a gate that
    /// could not fire, a budget stop with partial results.
    Incomplete {
        message: String,
    },
    /// The person (or the absence of `--yes`) said no at a price question.
    Declined {
        message: String,
    },
    /// The backend refused the token or a scope is missing.
    Unauthorized {
        message: String,
    },
    /// The model endpoint never answered.
    ModelUnreachable {
        message: String,
    },
    /// Refused before anything was charged (a quote over budget or over
    /// the balance, a game that cannot start): exit 3, nothing new starts.
    Refused {
        message: String,
    },
    /// The disk holding the state directory is full: the step's log could
    /// not be written. The run stops (nothing more fits), the step is left
    /// interrupted, and a resume runs it again once space is freed.
    NoSpace {
        message: String,
    },
    /// A request left and its answer never came (a timeout, a reset): it
    /// may or may not have been served. The run stays open, and its resume
    /// runs the step again with its checkpoints, so the request goes out
    /// again with the same idempotency key ([`StepIo::request_once`]).
    Uncertain {
        message: String,
    },
}

/// Why a step could not even be attempted (bad paths, unreadable inputs).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct StepError(pub String);

/// A step that could not even be attempted failed, with no exit code of
/// its own: the one conversion every kind's `run` ends with
/// (`run(cx, io).await.unwrap_or_else(StepOutcome::from)`).
impl From<StepError> for StepOutcome {
    fn from(e: StepError) -> StepOutcome {
        StepOutcome::Failed {
            exit_code: None,
            message: e.0,
        }
    }
}

/// The kinds one run can use, by [`StepKind`]; built per run because a kind
/// may hold the run's resources (the `command` kind its process launcher).
pub struct Kinds {
    kinds: Vec<Box<dyn Kind>>,
}

/// What kinds need to know of the run they serve.
#[derive(Debug, Clone)]
pub struct RunSettings {
    /// Steps that may run at once.
    pub concurrency: usize,
    /// The plan's secrets, which no step log may hold.
    pub redactor: crate::template::Redactor,
}

impl Kinds {
    /// Every kind this gameplan runs.
    pub fn for_run(settings: RunSettings) -> Kinds {
        let RunSettings {
            concurrency,
            redactor,
        } = settings;
        // Exhaustive: a kind added to the plan's registry
        // (`plan::kinds`) does not compile until it is given a runner here.
        let runner = |kind: StepKind| -> Box<dyn Kind> {
            match kind {
                StepKind::Command => Box::new(command::Command::new(concurrency, redactor.clone())),
                StepKind::Estimate => Box::new(estimate::Estimate),
                StepKind::Register => Box::new(register::Register),
                StepKind::Play => Box::new(play::Play::new(redactor.clone())),
                StepKind::Deliver => Box::new(deliver::Deliver::new(redactor.clone())),
                StepKind::Aggregate => Box::new(aggregate::Aggregate),
                StepKind::Gate => Box::new(gate::Gate::default()),
                StepKind::Finish => Box::new(finish::Finish),
                StepKind::Simulate => Box::new(simulate::Simulate),
            }
        };
        Kinds {
            kinds: StepKind::ALL
                .iter()
                .map(|(_, kind)| runner(*kind))
                .collect(),
        }
    }

    /// A registry of exactly `kinds` (tests add kinds of their own).
    pub fn of(kinds: Vec<Box<dyn Kind>>) -> Kinds {
        Kinds { kinds }
    }

    pub fn get(&self, kind: StepKind) -> Option<&dyn Kind> {
        self.kinds
            .iter()
            .find(|k| k.kind() == kind)
            .map(AsRef::as_ref)
    }

    /// The kinds that can run, in the plan's order of kinds.
    pub fn built(&self) -> Vec<StepKind> {
        StepKind::ALL
            .iter()
            .map(|(_, k)| *k)
            .filter(|k| self.get(*k).is_some())
            .collect()
    }

    /// The log a running step of `kind` writes as it goes, which
    /// `plan run --output stream` follows: a command's output as printed,
    /// in the run's `steps.log`. A play cell's and a simulation's logs are
    /// reports written whole at the end, nothing to follow.
    pub fn live_log(&self, kind: StepKind, steps_log: &Path) -> Option<Arc<LiveLog>> {
        (kind == StepKind::Command && self.get(kind).is_some())
            .then(|| LiveLog::new(steps_log.to_path_buf()))
    }

    /// The cells and simulations `node` reads (none unless its kind
    /// [`Kind::reads_cells`]): every step it needs, directly or through
    /// others, whose kind adds a cell or a simulation to the playtest, in
    /// the plan's order; `dir_of` gives a step's directory from its id.
    pub fn reads(
        &self,
        pipeline: &crate::graph::Pipeline,
        node: petgraph::graph::NodeIndex,
        dir_of: impl Fn(&str) -> PathBuf,
    ) -> Vec<CellRead> {
        let reads = self.get(pipeline.instance(node).kind);
        if !reads.is_some_and(Kind::reads_cells) {
            return Vec::new();
        }
        let ahead = pipeline.ancestors(node);
        let in_order = pipeline.order.iter().filter(|n| ahead.contains(n));
        in_order
            .filter_map(|&n| {
                let instance = pipeline.instance(n);
                let part = self.get(instance.kind)?.playtest(&dir_of(&instance.id))?;
                matches!(
                    part,
                    PlaytestPart::Cell { .. } | PlaytestPart::Simulation { .. }
                )
                .then(|| CellRead {
                    id: instance.id.clone(),
                    cell: instance.cell.clone(),
                    part,
                })
            })
            .collect()
    }

    /// A second Ctrl-C: every kind takes down what it started.
    pub fn kill_now(&self) {
        for kind in &self.kinds {
            kind.kill_now();
        }
    }
}

/// Asks the person at the terminal a yes/no question (a price, a resume).
pub trait Confirm: Send + Sync {
    fn confirm(&self, question: &str) -> bool;
}

/// What a running step may use of its run: checkpoints (its own and, read
/// only, those of the steps it needs), the backend, the person at the
/// terminal. One per step instance and run.
pub struct StepIo {
    pub(crate) sink: Arc<dyn CheckpointSink>,
    pub(crate) step: String,
    pub(crate) attempt: std::sync::atomic::AtomicU32,
    /// Acknowledged checkpoints of every step of the run, by step id: from
    /// the journal on resume, then those this run wrote. This step writes
    /// its own entry; it reads only its own and its needs'.
    pub(crate) book: CheckpointBook,
    /// The steps this one needs, directly or through others, with their
    /// directories: what [`StepIo::upstream`] may show.
    pub(crate) needs: BTreeMap<String, PathBuf>,
    /// Every play cell of the run and whether it will be reused, decided
    /// before anything ran by `plan explain`'s code; what
    /// [`StepIo::cells_ahead`] shows of it.
    pub(crate) ahead: Arc<Vec<CellAhead>>,
    /// The steps that need this one, directly or through others (only
    /// when the run decided its cells ahead): the cells an `estimate`
    /// before them prices.
    pub(crate) needed_by: std::collections::BTreeSet<String>,
    pub(crate) backend: Option<Connection>,
    pub(crate) confirm: Arc<dyn Confirm>,
    pub(crate) dry_upload: bool,
    /// Secrets no checkpoint may hold (it goes to the journal).
    redactor: crate::template::Redactor,
    /// Makes a fresh idempotency key.
    new_key: Arc<dyn Fn() -> String + Send + Sync>,
    /// Flips when this step is stopped: a question waiting for an answer
    /// is then a no.
    stopped: Option<watch::Receiver<bool>>,
    /// Told `true` before a question is asked and `false` after (the
    /// progress display pauses meanwhile).
    on_question: Option<Arc<dyn Fn(bool) + Send + Sync>>,
    /// When the current attempt's work really began (not when it was
    /// queued), and who hears of it.
    started: Mutex<Option<std::time::Instant>>,
    on_start: Option<Box<dyn Fn(u32) + Send + Sync>>,
    /// Who hears that an attempt is about to begin, before anything of it
    /// (a retry's fresh log) exists.
    on_attempt: Option<Box<dyn Fn(u32) + Send + Sync>>,
    on_progress: Option<ProgressFn>,
    on_warn: Option<WarnFn>,
    /// Where the last attempt's output went in the run's log (a kind that
    /// writes there says so; the engine journals it).
    log: Mutex<Vec<Segment>>,
    /// The running attempt's log as it grows, when the run streams it.
    live_log: Option<Arc<LiveLog>>,
}

/// The acknowledged checkpoints of a run's steps, by step id, shared by the
/// run's [`StepIo`]s.
pub type CheckpointBook = Arc<Mutex<BTreeMap<String, Vec<Checkpoint>>>>;

/// What a step may read of a step it needs ([`StepIo::upstream`]).
#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamResult {
    /// Its acknowledged checkpoints, oldest first, of every attempt.
    pub checkpoints: Vec<Checkpoint>,
    /// Its directory in this run (`runs/<run-id>/steps/<step>/`): its
    /// artifacts and logs.
    pub step_dir: PathBuf,
}

/// One request a step sends, as journaled before it first left
/// ([`StepIo::request_once`]): every attempt, resume or not, sends this.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub idempotency_key: String,
    pub body: Value,
}

/// Where a step's warnings go (the run's output).
type WarnFn = Box<dyn Fn(&str) + Send + Sync>;

/// Where a step's progress lines go (the terminal's progress display).
pub type ProgressFn = Arc<dyn Fn(&str) + Send + Sync>;

/// Where checkpoints go: the run's journal writer (a test double in tests).
pub trait CheckpointSink: Send + Sync {
    /// Writes a plain record, synced with the next group commit.
    fn write(&self, checkpoint: &Checkpoint, step: &str) -> Result<(), String>;
    /// Writes a record and resolves once it is on disk.
    fn write_durable<'a>(
        &'a self,
        checkpoint: &'a Checkpoint,
        step: &'a str,
    ) -> BoxFuture<'a, Result<(), String>>;
}

impl StepIo {
    pub fn new(
        sink: Arc<dyn CheckpointSink>,
        step: String,
        known: Vec<Checkpoint>,
        backend: Option<Connection>,
        confirm: Arc<dyn Confirm>,
        dry_upload: bool,
    ) -> StepIo {
        let book = Arc::new(Mutex::new(BTreeMap::from([(step.clone(), known)])));
        StepIo {
            sink,
            step,
            attempt: std::sync::atomic::AtomicU32::new(0),
            book,
            needs: BTreeMap::new(),
            ahead: Arc::default(),
            needed_by: std::collections::BTreeSet::new(),
            backend,
            confirm,
            dry_upload,
            redactor: crate::template::Redactor::default(),
            new_key: Arc::new(random_key),
            stopped: None,
            on_question: None,
            started: Mutex::new(None),
            on_start: None,
            on_attempt: None,
            on_progress: None,
            on_warn: None,
            log: Mutex::new(Vec::new()),
            live_log: None,
        }
    }

    /// Gives the step a live log that `--output stream` follows.
    #[must_use]
    pub fn live_log(mut self, live: Option<Arc<LiveLog>>) -> StepIo {
        self.live_log = live;
        self
    }

    /// The running attempt's live log, when the run streams output.
    pub fn live(&self) -> Option<Arc<LiveLog>> {
        self.live_log.clone()
    }

    /// Says where the attempt's output went in the run's `steps.log`.
    pub fn set_log(&self, segments: Vec<Segment>) {
        *self.log.lock().unwrap_or_else(PoisonError::into_inner) = segments;
    }

    /// Where the last attempt's output went.
    pub fn log_segments(&self) -> Vec<Segment> {
        self.log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Reads (and writes its own) checkpoints in the run's `book`, and may
    /// read those of `needs` (step id → directory): the steps this one
    /// needs, directly or through others.
    #[must_use]
    pub fn in_run(mut self, book: CheckpointBook, needs: BTreeMap<String, PathBuf>) -> StepIo {
        book.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(self.step.clone())
            .or_default();
        self.book = book;
        self.needs = needs;
        self
    }

    /// Hands it the run's play cells as decided before anything ran
    /// ([`StepIo::cells_ahead`]), and the steps that need this one,
    /// directly or through others (`needed_by`).
    #[must_use]
    pub fn cells_decided(
        mut self,
        ahead: Arc<Vec<CellAhead>>,
        needed_by: std::collections::BTreeSet<String>,
    ) -> StepIo {
        self.ahead = ahead;
        self.needed_by = needed_by;
        self
    }

    /// The play cells this step is related to, in plan order, each with
    /// whether it will be reused or will run: the cells it needs and the
    /// cells that need it, directly or through others (an `estimate`
    /// prices the cells below it in the default pipeline, `estimate →
    /// register → play`, and those above it in a plan that prices after
    /// building them; a cell beside it, neither needed nor needing, is
    /// not its to price). Decided before the run started, by the same code
    /// as `plan explain`, so an `estimate` prices exactly the cells
    /// explain says will run. Empty when the run did not decide them
    /// ahead (only plans with an `estimate` step do).
    pub fn cells_ahead(&self) -> Vec<CellAhead> {
        self.ahead
            .iter()
            .filter(|c| self.needs.contains_key(&c.id) || self.needed_by.contains(&c.id))
            .cloned()
            .collect()
    }

    /// Replaces `redactor`'s secrets in every checkpoint before it is
    /// written (the journal never holds a secret).
    #[must_use]
    pub fn redacting(mut self, redactor: crate::template::Redactor) -> StepIo {
        self.redactor = redactor;
        self
    }

    /// Makes idempotency keys with `new_key` (tests make them predictable).
    #[must_use]
    pub fn with_keys(mut self, new_key: impl Fn() -> String + Send + Sync + 'static) -> StepIo {
        self.new_key = Arc::new(new_key);
        self
    }

    /// A question still unanswered when `stopped` flips is a no.
    #[must_use]
    pub fn stopped_by(mut self, stopped: watch::Receiver<bool>) -> StepIo {
        self.stopped = Some(stopped);
        self
    }

    /// Tells `on_question` `true` before a question is asked, `false` after.
    #[must_use]
    pub fn on_question(mut self, on_question: impl Fn(bool) + Send + Sync + 'static) -> StepIo {
        self.on_question = Some(Arc::new(on_question));
        self
    }

    /// Sends the step's warnings ([`StepIo::warn`]) to `on_warn`.
    #[must_use]
    pub fn on_warn(mut self, on_warn: impl Fn(&str) + Send + Sync + 'static) -> StepIo {
        self.on_warn = Some(Box::new(on_warn));
        self
    }

    /// Something the user should know that does not fail the step (a game
    /// whose observation is not deterministic): shown in the run's output
    /// whatever `--output` says, as a warning of this step.
    pub fn warn(&self, text: &str) {
        if let Some(on_warn) = &self.on_warn {
            on_warn(text);
        }
    }

    /// Calls `on_start` with the attempt number when an attempt's work begins.
    #[must_use]
    pub fn on_start(mut self, on_start: impl Fn(u32) + Send + Sync + 'static) -> StepIo {
        self.on_start = Some(Box::new(on_start));
        self
    }

    /// Calls `on_attempt` with the attempt number as an attempt is about to
    /// begin, before its work is even queued.
    #[must_use]
    pub fn on_attempt(mut self, on_attempt: impl Fn(u32) + Send + Sync + 'static) -> StepIo {
        self.on_attempt = Some(Box::new(on_attempt));
        self
    }

    /// Sends the step's progress (`simulate`'s games so far) to `on_progress`.
    #[must_use]
    pub fn on_progress(mut self, on_progress: impl Fn(&str) + Send + Sync + 'static) -> StepIo {
        self.on_progress = Some(Arc::new(on_progress));
        self
    }

    /// Where this step's progress goes, for a task of its own to hold
    /// (nowhere when nobody listens).
    pub fn progress_sink(&self) -> ProgressFn {
        self.on_progress
            .clone()
            .unwrap_or_else(|| Arc::new(|_: &str| {}))
    }

    pub(crate) fn set_attempt(&self, attempt: u32) {
        self.attempt
            .store(attempt, std::sync::atomic::Ordering::SeqCst);
        *self.started.lock().unwrap_or_else(PoisonError::into_inner) = None;
        if let Some(on_attempt) = &self.on_attempt {
            on_attempt(attempt);
        }
    }

    /// The attempt's work begins now (a process started, a game launched):
    /// a step waiting for a slot is not yet started, and its time does not
    /// count. Once per attempt.
    pub fn mark_started(&self) {
        let mut started = self.started.lock().unwrap_or_else(PoisonError::into_inner);
        if started.is_none() {
            *started = Some(std::time::Instant::now());
            if let Some(on_start) = &self.on_start {
                on_start(self.attempt.load(std::sync::atomic::Ordering::SeqCst));
            }
        }
    }

    /// When the current attempt's work began, if it has.
    pub fn started_at(&self) -> Option<std::time::Instant> {
        *self.started.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn checkpoint_of(&self, mut data: Value) -> Checkpoint {
        // A checkpoint is journaled: no secret may reach it (a step's
        // message is redacted the same way). What the step reads back, now
        // and on resume, is the redacted record, so both see the same.
        if !self.redactor.is_empty() {
            self.redactor.redact_json(&mut data);
        }
        Checkpoint {
            attempt: self.attempt.load(std::sync::atomic::Ordering::SeqCst),
            data,
        }
    }

    fn remember(&self, checkpoint: Checkpoint) {
        self.book
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(self.step.clone())
            .or_default()
            .push(checkpoint);
    }

    /// Records `data` for this step, synced with the next group commit.
    pub fn checkpoint(&self, data: Value) -> Result<(), StepError> {
        let checkpoint = self.checkpoint_of(data);
        self.sink
            .write(&checkpoint, &self.step)
            .map_err(StepError)?;
        self.remember(checkpoint);
        Ok(())
    }

    /// Records `data` and returns only once it is on disk: what a money step
    /// calls before its request leaves (the idempotency key).
    pub async fn checkpoint_durable(&self, data: Value) -> Result<(), StepError> {
        let checkpoint = self.checkpoint_of(data);
        self.sink
            .write_durable(&checkpoint, &self.step)
            .await
            .map_err(StepError)?;
        self.remember(checkpoint);
        Ok(())
    }

    /// This step's acknowledged checkpoints, oldest first, of every attempt
    /// (earlier runs of it included, on resume).
    pub fn checkpoints(&self) -> Vec<Checkpoint> {
        self.book
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&self.step)
            .cloned()
            .unwrap_or_default()
    }

    /// What `step` left for the steps below it: its checkpoints (a quote, a
    /// job id) and its directory, the same from the journal on resume as in
    /// the run that wrote them. Only a step this one needs, directly or
    /// through others, is shown (`None` otherwise): a step's result may
    /// depend only on what the plan says it needs, which the schedule has
    /// settled before it starts, never on a step running beside it. Read
    /// only: a step's records are its own, for its own resume.
    pub fn upstream(&self, step: &str) -> Option<UpstreamResult> {
        let step_dir = self.needs.get(step)?.clone();
        let checkpoints = self
            .book
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(step)
            .cloned()
            .unwrap_or_default();
        Some(UpstreamResult {
            checkpoints,
            step_dir,
        })
    }

    /// The ids of the steps [`StepIo::upstream`] shows, in id order.
    pub fn upstream_ids(&self) -> Vec<String> {
        self.needs.keys().cloned().collect()
    }

    /// The idempotency key and body of this step's request `name`, made and
    /// journaled (durably, in one record) on the first call, before
    /// anything is sent; every later call, also on resume, returns the
    /// journaled ones, so a request whose answer never came goes out again
    /// exactly as it first did. `body` is only called the first time. The
    /// body is redacted like every checkpoint: a secret belongs in a
    /// header, never in a body.
    pub async fn request_once(
        &self,
        name: &str,
        body: impl FnOnce() -> Value,
    ) -> Result<Request, StepError> {
        if let Some(request) = self
            .checkpoints()
            .iter()
            .rev()
            .find_map(|c| request_of(&c.data, name))
        {
            return Ok(request);
        }
        let record = serde_json::json!({
            REQUEST_FIELD: name,
            "idempotency_key": (self.new_key)(),
            "body": body(),
        });
        self.checkpoint_durable(record).await?;
        self.checkpoints()
            .iter()
            .rev()
            .find_map(|c| request_of(&c.data, name))
            .ok_or_else(|| {
                StepError(format!(
                    "the request `{name}` was journaled but cannot be read back"
                ))
            })
    }

    /// Where money and uploads go, with the token calls carry: set up
    /// once per run when a step of the run is of a kind that
    /// [`Kind::uses_backend`].
    pub fn backend(&self) -> Option<&Connection> {
        self.backend.as_ref()
    }

    /// Asks the person at the terminal; `--yes` answers yes, no terminal
    /// and no `--yes` is a no, and so is a stop (Ctrl-C) before the answer.
    ///
    /// Asked on a thread of its own, never on the run's runtime: reading a
    /// terminal blocks, and the journal's syncs and the signal listener
    /// must go on meanwhile. The progress display pauses while it asks.
    pub async fn confirm(&self, question: &str) -> bool {
        if self.stopped.as_ref().is_some_and(|s| *s.borrow()) {
            return false;
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        let confirm = Arc::clone(&self.confirm);
        let on_question = self.on_question.clone();
        let question = question.to_owned();
        // A detached thread, not `spawn_blocking`: a runtime waits for its
        // blocking tasks as it shuts down, and a question nobody answers
        // (the person pressed Ctrl-C) must not hold the run's end.
        let asked = std::thread::Builder::new()
            .name("question".into())
            .spawn(move || {
                if let Some(f) = &on_question {
                    f(true);
                }
                let answer = confirm.confirm(&question);
                if let Some(f) = &on_question {
                    f(false);
                }
                let _ = tx.send(answer);
            });
        if asked.is_err() {
            return false;
        }
        let Some(mut stopped) = self.stopped.clone() else {
            return rx.await.unwrap_or(false);
        };
        let mut rx = rx;
        tokio::select! {
            answer = &mut rx => answer.unwrap_or(false),
            stop = async { stopped.wait_for(|s| *s).await.is_ok() } => {
                if !stop {
                    // Nothing can stop the step any more: wait for the answer.
                    return rx.await.unwrap_or(false);
                }
                if let Some(f) = &self.on_question {
                    f(false);
                }
                false
            }
        }
    }

    /// The plan's secrets, for what a step hands to code that redacts on
    /// its own (the model client of an llm lens).
    pub fn redactor(&self) -> &crate::template::Redactor {
        &self.redactor
    }

    /// `text` with the plan's secrets replaced (what goes to a backend or a
    /// journal never holds one).
    pub fn redact(&self, text: &str) -> String {
        self.redactor.redact(text)
    }

    /// `--dry-upload`: list what would be uploaded, upload nothing.
    pub fn dry_upload(&self) -> bool {
        self.dry_upload
    }
}

/// The checkpoint field that names a request ([`StepIo::request_once`]).
pub const REQUEST_FIELD: &str = "request";

/// The request `name` a checkpoint records, if it is one.
fn request_of(data: &Value, name: &str) -> Option<Request> {
    if data.get(REQUEST_FIELD)?.as_str()? != name {
        return None;
    }
    Some(Request {
        idempotency_key: data.get("idempotency_key")?.as_str()?.to_owned(),
        body: data.get("body")?.clone(),
    })
}

/// The idempotency key of a request a checkpoint records, if it is one
/// (what `plan run --new` looks for in an unfinished run).
pub fn journaled_key(data: &Value) -> Option<&str> {
    data.get(REQUEST_FIELD)?.as_str()?;
    data.get("idempotency_key")?.as_str()
}

/// A fresh idempotency key: 128 random bits from the system, written like
/// a UUID v4 (`8c1f…-…`), so a server keyed on UUIDs takes it.
pub fn random_key() -> String {
    use std::fmt::Write as _;
    use std::io::Read as _;
    let mut bytes = [0u8; 16];
    let read = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes));
    if read.is_err() {
        // No /dev/urandom: the time, the process and a counter, hashed, are
        // unique on this machine, which is what a key must be.
        static COUNT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let seed = format!(
            "{nanos}-{}-{}",
            std::process::id(),
            COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        let hex = crate::reuse::sha256_hex(seed.as_bytes());
        for (i, byte) in bytes.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&hex[i * 2..i * 2 + 2], 16).unwrap_or(0);
        }
    }
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex = bytes.iter().fold(String::new(), |mut hex, b| {
        let _ = write!(hex, "{b:02x}");
        hex
    });
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// The repo-relative files matched by `patterns`.
pub fn expand(root: &Path, patterns: &[String]) -> Result<Vec<String>, StepError> {
    crate::reuse::expand_inputs(root, patterns).map_err(|e| StepError(e.to_string()))
}

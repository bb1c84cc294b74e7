//! What a run's journal records, and what a resume concludes from it.
//!
//! The events are the run's single source of truth: `plan status`, `plan
//! runs` and resume all read them and nothing else (the `summary.json` beside
//! a finished journal is only an index for listing runs fast). A step's last
//! event decides its fate on resume: a finished step (succeeded, reused,
//! failed, skipped, incomplete: [`StepState::is_final`]) is never run
//! again; any other runs again (declined, unauthorized, unreachable,
//! refused and uncertain ones once the person agrees or the environment is
//! mended), and one that was running only after the engine has checked
//! whether a process it left behind completed it meanwhile.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{Journal, JournalError};

/// The version of the event vocabulary below (the line format has its own).
pub const EVENTS_VERSION: u32 = 1;

/// The state of one step instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum StepState {
    Pending,
    Running,
    Succeeded,
    Failed,
    Skipped,
    Reused,
    Interrupted,
    /// Ran to the end with partial results (a gate INCOMPLETE, a budget stop).
    Incomplete,
    /// The price question was answered no (or could not be asked).
    Declined,
    /// The backend refused the token or a scope.
    Unauthorized,
    /// The model endpoint never answered.
    Unreachable,
    /// Refused before anything was charged (exit 3); a resume runs it again.
    Refused,
    /// A request's answer never came: the run stays open, and a resume
    /// runs the step again with the same idempotency key.
    Uncertain,
}

impl StepState {
    /// Whether the step's outcome is settled: a resume never runs it again.
    /// A declined, unauthorized, unreachable, refused or uncertain step is
    /// not: once the person agrees or the environment is mended (or the
    /// answer can come), a resume runs it.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            StepState::Succeeded
                | StepState::Failed
                | StepState::Skipped
                | StepState::Reused
                | StepState::Incomplete
        )
    }

    /// Whether steps that need this one may run. An incomplete step does
    /// only when its kind says its partial results are results (a play cell
    /// its budget stopped: [`crate::steps::Kind::partial_results_are_results`]);
    /// the schedule asks that of the step's kind, so a gate that could not
    /// judge everything never lets the gates after it run.
    pub fn satisfies_needs(self) -> bool {
        matches!(self, StepState::Succeeded | StepState::Reused)
    }

    /// Whether the step left results (a summary section, a part of the
    /// playtest): succeeded, reused, or incomplete with partial ones.
    pub fn has_results(self) -> bool {
        self.satisfies_needs() || self == StepState::Incomplete
    }

    pub fn word(self) -> &'static str {
        match self {
            StepState::Pending => "pending",
            StepState::Running => "running",
            StepState::Succeeded => "succeeded",
            StepState::Failed => "failed",
            StepState::Skipped => "skipped",
            StepState::Reused => "reused",
            StepState::Interrupted => "interrupted",
            StepState::Incomplete => "incomplete",
            StepState::Declined => "declined",
            StepState::Unauthorized => "unauthorized",
            StepState::Unreachable => "unreachable",
            StepState::Refused => "refused",
            StepState::Uncertain => "uncertain",
        }
    }
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum RunOutcome {
    Succeeded,
    Failed,
    Interrupted,
    Incomplete,
    Declined,
    Unauthorized,
    Unreachable,
    /// Refused before anything was charged (exit 3).
    Refused,
    /// A request's answer never came; the run is open for `plan resume`.
    Uncertain,
}

/// One step of the expanded DAG, as recorded when the run started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedStep {
    pub id: String,
    pub kind: String,
    pub needs: Vec<String>,
}

/// A record a step kept for itself (an idempotency key, a job id, how far
/// it got), handed back to it on resume.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    pub attempt: u32,
    pub data: serde_json::Value,
}

/// The `plan run` flags that decide what a run does, recorded so that a
/// resume does the same (a `--no-reuse` run stays one).
#[expect(
    clippy::struct_excessive_bools,
    reason = "one field per recorded flag, as the journal holds them"
)]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedOptions {
    #[serde(default)]
    pub no_reuse: bool,
    #[serde(default)]
    pub fail_fast: bool,
    #[serde(default)]
    pub dry_upload: bool,
    /// `plan run PLAN STEP...`: the part of the plan the run is for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<String>,
    /// `--fail-on`: what the run was started to fail on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fail_on: Vec<String>,
    /// `plan merge`: the cells that must be reused, never played.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reuse_only: Vec<String>,
    /// `--shard K/N` and where its bundle goes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bundle: Option<String>,
    /// A shard's `--prepared DIR`: the job it plays for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prepared: Option<String>,
    /// A shard cut by `--durations FILE`: the file's digest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<String>,
    /// A merge or an executor's run: the prepare run whose job it was
    /// given, to deliver and settle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prepared_by: Option<String>,
    /// `--shard prepare`: the price covers every cell of the plan.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub prices_whole_plan: bool,
    /// `--baseline`: the findings it held (the engine's document, which
    /// the journal keeps as given), so a resume compares with the same
    /// ones even if the file changed or went away.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<serde_json::Value>,
}

/// One journal record.
#[expect(
    clippy::large_enum_variant,
    reason = "one `RunStarted` per run; boxing it would change nothing read or written"
)]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    RunStarted {
        events_version: u32,
        run_id: String,
        plan: String,
        plan_hash: String,
        /// The plan file, relative to the repo root.
        plan_path: String,
        /// `--var` overrides, so a resume loads the same plan.
        vars: Vec<(String, String)>,
        started_at: String,
        gameplan: String,
        steps: Vec<PlannedStep>,
        /// The options the run was started with, which a resume keeps.
        #[serde(default)]
        options: RecordedOptions,
    },
    RunResumed {
        at: String,
        pid: u32,
    },
    StepStarted {
        step: String,
        attempt: u32,
        at: String,
    },
    StepFinished {
        step: String,
        state: StepState,
        attempt: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        key: Option<String>,
        /// The digest of its outputs, which steps that need it key on.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        outputs: Option<String>,
        duration_ms: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        exit_code: Option<i32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
        /// Where the last attempt's output is in the run's `steps.log`;
        /// empty when it printed nothing (or kept its log elsewhere).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        log: Vec<Segment>,
    },
    StepCheckpoint {
        step: String,
        attempt: u32,
        data: serde_json::Value,
    },
    RunStopped {
        at: String,
        reason: String,
        /// How long this leg of the run (the start or a resume) took;
        /// absent in journals written before it was recorded.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        duration_ms: Option<u64>,
    },
    RunFinished {
        at: String,
        outcome: RunOutcome,
        exit_code: u8,
        /// How long this leg of the run took, as in `RunStopped`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        duration_ms: Option<u64>,
    },
}

/// The last word on one step.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StepRecord {
    pub state: Option<StepState>,
    pub attempt: u32,
    pub key: Option<String>,
    pub outputs: Option<String>,
    pub duration_ms: u64,
    pub exit_code: Option<i32>,
    pub message: Option<String>,
    /// The last attempt's output in the run's `steps.log`.
    pub log: Vec<Segment>,
}

/// A run as its journal tells it.
#[derive(Debug, Clone, PartialEq)]
pub struct RunHistory {
    pub run_id: String,
    pub plan: String,
    pub plan_hash: String,
    pub plan_path: String,
    pub vars: Vec<(String, String)>,
    pub started_at: String,
    pub steps: Vec<PlannedStep>,
    pub options: RecordedOptions,
    pub records: BTreeMap<String, StepRecord>,
    /// Each step's checkpoints, oldest first.
    pub checkpoints: BTreeMap<String, Vec<Checkpoint>>,
    pub stopped: Option<String>,
    pub finished: Option<(RunOutcome, u8)>,
    /// The time the run spent running, summed over its start and resumes;
    /// `None` when no leg recorded it (a live run, an old journal).
    pub duration_ms: Option<u64>,
    /// A torn last record was dropped (the run was killed mid-write).
    pub torn_tail: bool,
}

/// Why a journal cannot be resumed from.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum HistoryError {
    #[error(transparent)]
    Journal(#[from] JournalError),
    #[error(
        "{path} does not start with a run header; it is not a gameplan run journal. Nothing was run or charged; start a new run with `gameplan plan run PLAN --new`"
    )]
    #[diagnostic(code(journal::no_header))]
    NoHeader { path: PathBuf },
    #[error(
        "{path} was written with journal events version {found}; this gameplan reads version {EVENTS_VERSION}. Nothing was run or charged; finish it with the gameplan that started it, or start a new run with `--new`"
    )]
    #[diagnostic(code(journal::events_version))]
    EventsVersion { path: PathBuf, found: u32 },
    #[error(
        "{path} records attempt {attempt} of step `{step}`, more than any run makes ({MAX_ATTEMPT}); the journal is damaged or was edited. Nothing was run or charged; start a new run with `gameplan plan run PLAN --new`"
    )]
    #[diagnostic(code(journal::impossible_attempt))]
    ImpossibleAttempt {
        path: PathBuf,
        step: String,
        attempt: u32,
    },
}

/// The highest attempt number a journal may record. A run makes one attempt
/// per try and retry, so this is never reached in earnest; a record beyond
/// it is damaged or crafted, and refusing it keeps every `attempt + 1` and
/// `base + retries` downstream far from overflow (issue 8, item 15).
pub const MAX_ATTEMPT: u32 = 1_000_000;

impl RunHistory {
    pub fn from_events(
        path: &Path,
        events: Vec<Event>,
        torn_tail: bool,
    ) -> Result<RunHistory, HistoryError> {
        let mut events = events.into_iter();
        let Some(Event::RunStarted {
            events_version,
            run_id,
            plan,
            plan_hash,
            plan_path,
            vars,
            started_at,
            steps,
            options,
            ..
        }) = events.next()
        else {
            return Err(HistoryError::NoHeader {
                path: path.to_path_buf(),
            });
        };
        if events_version != EVENTS_VERSION {
            return Err(HistoryError::EventsVersion {
                path: path.to_path_buf(),
                found: events_version,
            });
        }
        let mut history = RunHistory {
            run_id,
            plan,
            plan_hash,
            plan_path,
            vars,
            started_at,
            steps,
            options,
            records: BTreeMap::new(),
            checkpoints: BTreeMap::new(),
            stopped: None,
            finished: None,
            duration_ms: None,
            torn_tail,
        };
        for event in events {
            if let Event::StepStarted { step, attempt, .. }
            | Event::StepFinished { step, attempt, .. } = &event
                && *attempt > MAX_ATTEMPT
            {
                return Err(HistoryError::ImpossibleAttempt {
                    path: path.to_path_buf(),
                    step: step.clone(),
                    attempt: *attempt,
                });
            }
            history.apply(event);
        }
        Ok(history)
    }

    fn apply(&mut self, event: Event) {
        match event {
            Event::StepStarted { step, attempt, .. } => {
                let record = self.records.entry(step).or_default();
                record.state = Some(StepState::Running);
                record.attempt = attempt;
            }
            Event::StepFinished {
                step,
                state,
                attempt,
                key,
                outputs,
                duration_ms,
                exit_code,
                message,
                log,
            } => {
                self.records.insert(
                    step,
                    StepRecord {
                        state: Some(state),
                        attempt,
                        key,
                        outputs,
                        duration_ms,
                        exit_code,
                        message,
                        log,
                    },
                );
            }
            Event::StepCheckpoint {
                step,
                attempt,
                data,
            } => self
                .checkpoints
                .entry(step)
                .or_default()
                .push(Checkpoint { attempt, data }),
            Event::RunStopped {
                reason,
                duration_ms,
                ..
            } => {
                self.stopped = Some(reason);
                self.add_leg(duration_ms);
            }
            Event::RunResumed { .. } => {
                self.stopped = None;
                self.finished = None;
            }
            Event::RunFinished {
                outcome,
                exit_code,
                duration_ms,
                ..
            } => {
                self.finished = Some((outcome, exit_code));
                self.add_leg(duration_ms);
            }
            Event::RunStarted { .. } => {}
        }
    }

    fn add_leg(&mut self, duration_ms: Option<u64>) {
        if let Some(ms) = duration_ms {
            self.duration_ms = Some(self.duration_ms.unwrap_or(0).saturating_add(ms));
        }
    }

    pub fn state_of(&self, step: &str) -> StepState {
        self.records
            .get(step)
            .and_then(|r| r.state)
            .unwrap_or(StepState::Pending)
    }

    /// Finished means a final outcome was recorded; an interrupted run is not finished.
    pub fn is_finished(&self) -> bool {
        self.finished
            .is_some_and(|(outcome, _)| outcome != RunOutcome::Interrupted)
    }

    pub fn read(path: &Path) -> Result<RunHistory, HistoryError> {
        let replay = Journal::read::<Event>(path)?;
        RunHistory::from_events(path, replay.records, replay.torn_tail.is_some())
    }
}

/// What a run directory's journal holds, for choosing a run to resume or
/// listing runs.
#[derive(Debug)]
pub enum Scanned {
    /// A readable journal.
    Run(Box<RunHistory>),
    /// No record at all: the run could not write its first one (a full
    /// disk) and never started anything.
    NeverStarted,
    /// A journal that cannot be read. `plan_hash` is its header's, when
    /// that line is intact, so it is only held against its own plan.
    Damaged {
        plan_hash: Option<String>,
        error: HistoryError,
    },
}

impl Scanned {
    pub fn of(run: &RunDir) -> Scanned {
        let path = run.journal();
        match Journal::read::<Event>(&path) {
            Ok(replay) if replay.records.is_empty() => Scanned::NeverStarted,
            Ok(replay) => {
                match RunHistory::from_events(&path, replay.records, replay.torn_tail.is_some()) {
                    Ok(history) => Scanned::Run(Box::new(history)),
                    Err(error) => Scanned::damaged(&path, error),
                }
            }
            Err(error) => Scanned::damaged(&path, error.into()),
        }
    }

    fn damaged(path: &Path, error: HistoryError) -> Scanned {
        let plan_hash = match Journal::read_first::<Event>(path) {
            Some(Event::RunStarted { plan_hash, .. }) => Some(plan_hash),
            _ => None,
        };
        Scanned::Damaged { plan_hash, error }
    }
}

/// Where a run's files live under the state directory.
#[derive(Debug, Clone)]
pub struct RunDir {
    pub dir: PathBuf,
}

impl RunDir {
    pub fn new(state_dir: &Path, run_id: &str) -> RunDir {
        RunDir {
            dir: state_dir.join("runs").join(run_id),
        }
    }

    pub fn journal(&self) -> PathBuf {
        self.dir.join("journal.jsonl")
    }

    /// Written when a run ends; lets `plan runs` skip reading finished journals.
    pub fn summary(&self) -> PathBuf {
        self.dir.join("summary.json")
    }

    /// Present once a damaged run was set aside (`plan run --new` after
    /// being told it is damaged): it is no longer a run to resume, and
    /// holds why.
    pub fn set_aside(&self) -> PathBuf {
        self.dir.join("set-aside")
    }

    /// A step's directory, made only by a kind that writes artifacts (a
    /// play cell's report, a gate's verdicts); ids are made safe as file
    /// names (a matrix value may hold `/`).
    pub fn step(&self, step_id: &str) -> PathBuf {
        self.dir.join("steps").join(file_name(step_id))
    }

    /// The run's one log: every step attempt's output, by segments
    /// (`journal::step_log`).
    pub fn steps_log(&self) -> PathBuf {
        self.dir.join("steps.log")
    }

    /// How attempts ended, written by the launcher (`steps::launcher`).
    pub fn exits(&self) -> PathBuf {
        self.dir.join("exits.jsonl")
    }

    /// The launcher's per-attempt locks: a byte range each, in one file.
    pub fn attempt_locks(&self) -> PathBuf {
        self.dir.join("attempts.lock")
    }

    /// The marker a resumed run leaves on an attempt it runs again, so a
    /// launcher that has not started it never will (made only on resume).
    pub fn claim(&self, attempt_name: &str) -> PathBuf {
        self.dir.join("claims").join(file_name(attempt_name))
    }
}

/// Maps a step id to a file name, one to one (issue 8, item 24): an id made
/// only of a conservative set of characters is its own name; any other id
/// gets its characters outside the set replaced by `_` (so it stays
/// readable) and `~` plus a short hash of the whole id appended, so `x[a/b]`,
/// `x[a_b]` and `x[a b]` get three directories. `~` is outside the set, so a
/// hashed name never equals a plain one. Very long ids are cut and hashed
/// too, to stay under file-name length limits.
pub fn file_name(id: &str) -> String {
    const MAX_PLAIN: usize = 120;
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_.,=[]".contains(c);
    let is_plain = !id.is_empty()
        && id.len() <= MAX_PLAIN
        && id.chars().all(plain)
        && !id.chars().all(|c| c == '.');
    if is_plain {
        return id.to_owned();
    }
    let readable: String = id
        .chars()
        .take(MAX_PLAIN)
        .map(|c| if plain(c) { c } else { '_' })
        .collect();
    let hash = crate::reuse::sha256_hex(id.as_bytes());
    // 48 bits: no two ids of one run share a directory by accident.
    format!("{readable}~{}", &hash[..12])
}

/// Run ids under `state_dir/runs`, oldest first (ids sort by start time).
pub fn run_ids(state_dir: &Path) -> Vec<String> {
    let mut ids: Vec<String> = std::fs::read_dir(state_dir.join("runs"))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().join("journal.jsonl").is_file())
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    ids.sort();
    ids
}

/// One piece of an attempt's output in the run's log: `[offset, length]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "(u64, u64)", into = "(u64, u64)")]
pub struct Segment {
    pub at: u64,
    pub len: u64,
}

impl From<(u64, u64)> for Segment {
    fn from((at, len): (u64, u64)) -> Segment {
        Segment { at, len }
    }
}

impl From<Segment> for (u64, u64) {
    fn from(s: Segment) -> (u64, u64) {
        (s.at, s.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn started() -> Event {
        Event::RunStarted {
            events_version: EVENTS_VERSION,
            run_id: "r1".into(),
            plan: "p".into(),
            plan_hash: "h".into(),
            plan_path: "plans/p.toml".into(),
            vars: vec![],
            started_at: "t".into(),
            gameplan: "0".into(),
            steps: vec![],
            options: RecordedOptions::default(),
        }
    }

    #[test]
    fn last_event_of_a_step_wins() {
        let events = vec![
            started(),
            Event::StepStarted {
                step: "a".into(),
                attempt: 1,
                at: "t".into(),
            },
            Event::StepFinished {
                step: "a".into(),
                state: StepState::Succeeded,
                attempt: 1,
                key: Some("k".into()),
                outputs: None,
                duration_ms: 5,
                exit_code: Some(0),
                message: None,
                log: Vec::new(),
            },
            Event::StepStarted {
                step: "b".into(),
                attempt: 1,
                at: "t".into(),
            },
        ];
        let h = RunHistory::from_events(Path::new("j"), events, false).unwrap();
        assert_eq!(h.state_of("a"), StepState::Succeeded);
        assert_eq!(h.state_of("b"), StepState::Running);
        assert_eq!(h.state_of("c"), StepState::Pending);
        assert!(!h.is_finished());
    }

    /// Issue 10: `plan runs` shows the time a run spent running, summed
    /// over its start and its resumes; an old journal has none.
    #[test]
    fn duration_sums_the_legs_of_a_run() {
        let stopped = |ms| Event::RunStopped {
            at: "t".into(),
            reason: "signal".into(),
            duration_ms: ms,
        };
        let resumed = Event::RunResumed {
            at: "t".into(),
            pid: 1,
        };
        let finished = Event::RunFinished {
            at: "t".into(),
            outcome: RunOutcome::Succeeded,
            exit_code: 0,
            duration_ms: Some(250),
        };
        let events = vec![started(), stopped(Some(1000)), resumed, finished];
        let h = RunHistory::from_events(Path::new("j"), events, false).unwrap();
        assert_eq!(h.duration_ms, Some(1250));
        assert!(h.is_finished());
        let old =
            RunHistory::from_events(Path::new("j"), vec![started(), stopped(None)], false).unwrap();
        assert_eq!(old.duration_ms, None);
        // An old journal's record without the field still reads.
        let line = r#"{"event":"run_finished","at":"t","outcome":"failed","exit_code":1}"#;
        assert!(matches!(
            serde_json::from_str::<Event>(line),
            Ok(Event::RunFinished {
                duration_ms: None,
                ..
            })
        ));
    }

    #[test]
    fn journal_without_header_is_refused() {
        let events = vec![Event::RunResumed {
            at: "t".into(),
            pid: 1,
        }];
        assert!(matches!(
            RunHistory::from_events(Path::new("j"), events, false),
            Err(HistoryError::NoHeader { .. })
        ));
    }

    /// Issue 8, item 15: a crafted `attempt: 4294967295` is refused as a
    /// damaged journal instead of overflowing `attempt + 1` on resume.
    #[test]
    fn an_impossible_attempt_is_refused_not_overflowed() {
        for (attempt, finished) in [
            (u32::MAX, false),
            (u32::MAX, true),
            (MAX_ATTEMPT + 1, false),
        ] {
            let step = if finished {
                Event::StepFinished {
                    step: "a".into(),
                    state: StepState::Failed,
                    attempt,
                    key: None,
                    outputs: None,
                    duration_ms: 0,
                    exit_code: Some(1),
                    message: None,
                    log: Vec::new(),
                }
            } else {
                Event::StepStarted {
                    step: "a".into(),
                    attempt,
                    at: String::new(),
                }
            };
            let error = RunHistory::from_events(Path::new("j"), vec![started(), step], false)
                .expect_err("refused");
            assert!(
                matches!(&error, HistoryError::ImpossibleAttempt { step, attempt: a, .. } if step == "a" && *a == attempt),
                "{error}"
            );
            assert!(error.to_string().contains("--new"), "{error}");
        }
        let fine = Event::StepStarted {
            step: "a".into(),
            attempt: MAX_ATTEMPT,
            at: String::new(),
        };
        assert!(RunHistory::from_events(Path::new("j"), vec![started(), fine], false).is_ok());
    }

    #[test]
    fn step_ids_become_safe_file_names() {
        assert_eq!(file_name("play[kid,jev,1]"), "play[kid,jev,1]");
        assert!(file_name("x[a/b]").starts_with("x[a_b]~"));
        assert!(file_name("..").starts_with("..~"));
        for id in ["..", ".", "", "a/../../b", "x y", "é", &"z".repeat(300)] {
            let name = file_name(id);
            assert!(!name.is_empty() && name.len() < 140, "{id:?}: {name:?}");
            assert!(!name.contains('/') && name != "." && name != "..", "{id:?}");
        }
    }

    /// Issue 8, item 24: matrix values `a/b`, `a_b` and `a b` must not share
    /// one step directory.
    #[test]
    fn step_directories_are_collision_free() {
        let run = RunDir::new(Path::new("/state"), "r1");
        let ids = [
            "build[a/b]",
            "build[a_b]",
            "build[a b]",
            "build[a\\b]",
            "build[a_b]~0",
            "x",
            ".",
            "_.",
        ];
        let dirs: std::collections::BTreeSet<PathBuf> = ids.iter().map(|id| run.step(id)).collect();
        assert_eq!(dirs.len(), ids.len(), "{dirs:?}");
        // Normal ids stay readable, and what needed escaping still reads.
        assert_eq!(
            run.step("build[a_b]"),
            Path::new("/state/runs/r1/steps/build[a_b]")
        );
        assert!(file_name("build[a/b]").starts_with("build[a_b]~"));
    }
}

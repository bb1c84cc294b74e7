//! The dispatcher: owns the run's step states and schedules step tasks.
//!
//! A step that becomes ready is first checked for reuse right here, on the
//! dispatcher: computing its key and restoring a stored result is quick, and
//! doing it without a task keeps a fully reused run near the cost of reading
//! the store. Only steps that must run get a task (and a pool slot).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use petgraph::Direction;
use petgraph::graph::NodeIndex;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::JoinSet;

use super::signals::{self, Cancelled};
use super::{RunReport, RunRequest, Start, StartError, StepReport, now};
use crate::exit_code;
use crate::graph::Pipeline;
use crate::journal::Journal;
use crate::journal::run::{EVENTS_VERSION, Event, PlannedStep, RunDir, RunOutcome, StepState};
use crate::plan::model::Plan;
use crate::report::progress::Progress;
use crate::reuse::{FileHashCache, ReuseKey, Store};
use crate::steps::command::log_path;
use crate::steps::launcher::{LazyLauncher, Leftover};
use crate::steps::{self, StepContext, StepOutcome};

/// How often plain step transitions are synced to disk (group commit).
const COMMIT_EVERY: Duration = Duration::from_millis(100);

/// How one step instance ended (or that it never started: `Pending`).
struct Finished {
    node: NodeIndex,
    state: StepState,
    key: Option<String>,
    /// The full key of a succeeded or reused step, for the last-keys record.
    reuse_key: Option<ReuseKey>,
    exit_code: Option<i32>,
    message: Option<String>,
    attempts: u32,
    last_attempt: u32,
    duration_ms: u64,
}

type SharedJournal = Arc<Mutex<Journal>>;

fn append(journal: &SharedJournal, event: &Event) -> Result<(), String> {
    journal
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .append(event)
        .map_err(|e| e.to_string())
}

/// What step tasks share.
#[derive(Clone)]
struct Shared {
    root: PathBuf,
    run_id: String,
    run_dir: RunDir,
    plan: Arc<Plan>,
    store: Store,
    hashes: Arc<Mutex<FileHashCache>>,
    journal: SharedJournal,
    env: Arc<BTreeMap<String, String>>,
    /// Flips on a signal or a fail-fast abort: what stops ordinary steps.
    stop: watch::Receiver<bool>,
    /// Flips on a signal only: what stops `always` steps, which run to the
    /// end of a failed (also fail-fast) run like the `finish` that settles it.
    cancel: watch::Receiver<bool>,
    progress: Progress,
    global: Arc<Semaphore>,
    launcher: Arc<LazyLauncher>,
}

fn elapsed_ms(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX)
}

#[expect(
    clippy::too_many_lines,
    reason = "the run's life cycle, start to report, in order"
)]
pub async fn run(request: RunRequest, progress: &Progress) -> Result<RunReport, StartError> {
    let RunRequest {
        loaded,
        pipeline,
        plan_hash,
        state_dir,
        options,
        env,
        start,
        resume_hint,
    } = request;
    let started = Instant::now();
    let run_id = start.run_id().to_owned();
    let run_dir = RunDir::new(&state_dir, &run_id);
    let journal_error = |e: crate::journal::JournalError| StartError::Journal(e.to_string());
    let (journal, history) = match start {
        Start::New(_) => {
            let mut journal = Journal::create(&run_dir.journal()).map_err(journal_error)?;
            let plan_path = std::path::absolute(&loaded.source.path)
                .ok()
                .and_then(|p| {
                    p.strip_prefix(&loaded.root)
                        .ok()
                        .map(|r| r.display().to_string())
                })
                .unwrap_or_else(|| loaded.source.path.display().to_string());
            journal
                .append_durable(&Event::RunStarted {
                    events_version: EVENTS_VERSION,
                    run_id: run_id.clone(),
                    plan: loaded.plan.name.clone(),
                    plan_hash,
                    plan_path,
                    vars: options.vars.clone(),
                    started_at: now(),
                    gameplan: env!("CARGO_PKG_VERSION").to_owned(),
                    steps: planned_steps(&pipeline),
                })
                .map_err(journal_error)?;
            (journal, None)
        }
        Start::Resume(history) => {
            let (mut journal, _) =
                Journal::open::<Event>(&run_dir.journal()).map_err(journal_error)?;
            journal
                .append_durable(&Event::RunResumed {
                    at: now(),
                    pid: std::process::id(),
                })
                .map_err(journal_error)?;
            (journal, Some(history))
        }
    };
    let resumed = history.is_some();
    progress.run_started(
        &run_id,
        &loaded.plan.name,
        pipeline.graph.node_count(),
        resumed,
    );

    let concurrency = options
        .concurrency
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, std::num::NonZero::get))
        .max(1);
    // The launcher runs `concurrency` steps at once and keeps as many more
    // queued, so a finished step's slot is refilled without waiting for
    // gameplan. Under --fail-fast nothing may start after a failure, so
    // nothing is queued ahead there.
    let in_flight = if options.fail_fast {
        concurrency
    } else {
        concurrency * 2
    };
    let pools: BTreeMap<String, Arc<Semaphore>> = loaded
        .plan
        .pools
        .iter()
        .map(|(name, size)| (name.clone(), Arc::new(Semaphore::new(*size as usize))))
        .collect();
    let (stop_tx, stop_rx) = watch::channel(false);
    let (cancel_tx, cancel_rx) = watch::channel(false);
    let cancelled = Cancelled::default();
    signals::listen(
        [stop_tx.clone(), cancel_tx],
        cancelled.clone(),
        progress.clone(),
    );
    let shared = Shared {
        root: loaded.root.clone(),
        run_id: run_id.clone(),
        run_dir: run_dir.clone(),
        plan: Arc::new(loaded.plan),
        store: Store::open(&state_dir),
        hashes: Arc::new(Mutex::new(FileHashCache::load(&state_dir))),
        journal: Arc::new(Mutex::new(journal)),
        env,
        stop: stop_rx,
        cancel: cancel_rx,
        progress: progress.clone(),
        global: Arc::new(Semaphore::new(in_flight)),
        launcher: Arc::new(LazyLauncher::new(concurrency)),
    };

    let mut run = Run::new(
        Arc::new(pipeline),
        shared.clone(),
        options.fail_fast,
        stop_tx,
        cancelled.clone(),
    );
    if let Some(history) = &history {
        run.restore(history);
    }
    run.schedule.initialize();
    let mut tasks: JoinSet<Finished> = JoinSet::new();
    let mut group_commit = GroupCommit::new();
    // Keys computed for steps still waiting for a slot; the store was
    // already asked about them (a miss stays a miss within a run).
    let mut keys: BTreeMap<NodeIndex, Result<Option<ReuseKey>, String>> = BTreeMap::new();
    loop {
        run.record_skips();
        // Ready steps whose pool is full, back to the ready set after this round.
        let mut pool_full = Vec::new();
        while !cancelled.is_set()
            && let Some(Reverse(node)) = run.schedule.ready.pop()
        {
            let always = run.pipeline.graph[node].always;
            if run.aborted && !always {
                // Fail-fast: nothing new starts but the `always` steps
                // (cleanup, `finish`), which may be waiting on this one.
                run.schedule.skip(node);
                continue;
            }
            let cx = run.context(node);
            let left_running = run.left_running[node.index()];
            let (key, asked) = match keys.remove(&node) {
                Some(key) => (key, true),
                None => (steps::reuse_key(&cx).map_err(|e| e.0), false),
            };
            if left_running.is_none()
                && !options.no_reuse
                && !asked
                && let Some(finished) = try_reuse(node, &cx, &key, &shared)
            {
                run.finish(finished);
                continue;
            }
            // Slots are handed out here, in declared order, and only after the
            // dispatcher has seen how the previous holder ended: fail-fast then
            // starts nothing after a failure.
            let Ok(permit) = Arc::clone(&shared.global).try_acquire_owned() else {
                keys.insert(node, key);
                pool_full.push(node);
                break;
            };
            let pool_permit = match cx.step.pool.as_ref().and_then(|p| pools.get(p)) {
                None => None,
                Some(pool) => {
                    if let Ok(permit) = Arc::clone(pool).try_acquire_owned() {
                        Some(permit)
                    } else {
                        keys.insert(node, key);
                        pool_full.push(node);
                        continue;
                    }
                }
            };
            run.schedule.states[node.index()] = StepState::Running;
            tasks.spawn(run_instance(
                node,
                cx,
                key,
                (left_running, run.attempt_base[node.index()]),
                (permit, pool_permit),
                shared.clone(),
            ));
        }
        run.schedule
            .ready
            .extend(pool_full.into_iter().map(Reverse));
        if tasks.is_empty() {
            break;
        }
        match tasks.join_next().await {
            Some(Ok(finished)) => run.finish(finished),
            Some(Err(e)) => run.abort(format!("internal error in a step task: {e}")),
            None => break,
        }
        group_commit.tick(&shared.journal).await;
    }
    group_commit.settle(&shared.journal).await;

    let interrupted = cancelled.is_set();
    if !interrupted {
        run.skip_unstarted();
    }
    let failed = run
        .reports
        .iter()
        .any(|r| matches!(r.state, StepState::Failed | StepState::Interrupted));
    let (outcome, code) = if interrupted {
        (RunOutcome::Interrupted, exit_code::CANCELED)
    } else if failed || run.aborted {
        (RunOutcome::Failed, exit_code::FAILED)
    } else {
        (RunOutcome::Succeeded, exit_code::SUCCESS)
    };
    let closing = if interrupted {
        Event::RunStopped {
            at: now(),
            reason: "stopped by a signal or `plan stop`".into(),
        }
    } else {
        Event::RunFinished {
            at: now(),
            outcome,
            exit_code: code,
        }
    };
    {
        let mut journal = shared
            .journal
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        journal.append(&closing).map_err(journal_error)?;
        journal.commit().map_err(journal_error)?;
    }
    let _ = shared
        .hashes
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .save();
    let _ = shared.store.record_last(&shared.plan.name, &run.last_keys);

    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for r in &run.reports {
        *counts.entry(r.state.word().to_owned()).or_default() += 1;
    }
    let steps: Vec<StepReport> = run
        .pipeline
        .order
        .iter()
        .map(|i| run.reports[i.index()].clone())
        .collect();
    let report = RunReport {
        run_id,
        plan: shared.plan.name.clone(),
        outcome,
        exit_code: code,
        resumed,
        duration_ms: elapsed_ms(started),
        counts,
        root_cause: run.root_cause,
        steps,
        resume_command: interrupted.then_some(resume_hint),
    };
    if !interrupted {
        let summary = serde_json::to_vec_pretty(&report).unwrap_or_default();
        let _ = crate::journal::atomic_write(&run_dir.summary(), &summary);
    }
    Ok(report)
}

fn planned_steps(pipeline: &Pipeline) -> Vec<PlannedStep> {
    pipeline
        .order
        .iter()
        .map(|&i| PlannedStep {
            id: pipeline.graph[i].id.clone(),
            kind: pipeline.graph[i].kind.name().to_owned(),
            needs: pipeline
                .needs(i)
                .into_iter()
                .map(|n| pipeline.graph[n].id.clone())
                .collect(),
        })
        .collect()
}

/// The journal's group commit, run on a blocking thread so that the
/// dispatcher never waits for the disk (see [`Journal::begin_commit`]).
struct GroupCommit {
    last: Instant,
    running: Option<tokio::task::JoinHandle<Result<(), crate::journal::JournalError>>>,
}

impl GroupCommit {
    fn new() -> Self {
        Self {
            last: Instant::now(),
            running: None,
        }
    }

    /// Begins a commit when one is due and the previous one has finished.
    async fn tick(&mut self, journal: &Mutex<Journal>) {
        if self.last.elapsed() < COMMIT_EVERY
            || self.running.as_ref().is_some_and(|r| !r.is_finished())
        {
            return;
        }
        self.settle(journal).await;
        let pending = journal
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .begin_commit();
        if let Ok(Some(pending)) = pending {
            self.running = Some(tokio::task::spawn_blocking(move || pending.run()));
        }
        self.last = Instant::now();
    }

    /// Waits for the running commit, if any; a failed one leaves the journal
    /// unusable, so the next append reports it.
    async fn settle(&mut self, journal: &Mutex<Journal>) {
        if let Some(running) = self.running.take()
            && !matches!(running.await, Ok(Ok(())))
        {
            journal
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .commit_failed();
        }
    }
}

/// Restores a stored result when the step's key has one.
fn try_reuse(
    node: NodeIndex,
    cx: &StepContext,
    key: &Result<Option<ReuseKey>, String>,
    shared: &Shared,
) -> Option<Finished> {
    let started = Instant::now();
    let Ok(Some(key)) = key else { return None };
    if !cx.step.reuse {
        return None;
    }
    let digest = key.digest();
    let entry = shared.store.lookup(&digest)?;
    // A damaged entry is a miss: the step runs.
    shared.store.restore(&entry, &shared.root).ok()?;
    Some(Finished {
        node,
        state: StepState::Reused,
        key: Some(digest),
        reuse_key: Some(key.clone()),
        exit_code: None,
        message: None,
        attempts: 0,
        last_attempt: 0,
        duration_ms: elapsed_ms(started),
    })
}

/// The run's state: reports, scheduling, the root cause.
struct Run {
    pipeline: Arc<Pipeline>,
    shared: Shared,
    schedule: Schedule,
    reports: Vec<StepReport>,
    /// On resume: the attempt a dead gameplan left running, per step (it
    /// may have finished meanwhile; a stopped one did not).
    left_running: Vec<Option<u32>>,
    /// On resume: the last attempt number used, per step; new attempts
    /// count on from it so each has its own name in `exits.jsonl`.
    attempt_base: Vec<u32>,
    root_cause: Option<String>,
    aborted: bool,
    fail_fast: bool,
    stop: watch::Sender<bool>,
    cancelled: Cancelled,
    /// Keys of the steps that succeeded or were reused, recorded at the end
    /// so the next `plan explain` can say what changed.
    last_keys: BTreeMap<String, ReuseKey>,
}

impl Run {
    fn new(
        pipeline: Arc<Pipeline>,
        shared: Shared,
        fail_fast: bool,
        stop: watch::Sender<bool>,
        cancelled: Cancelled,
    ) -> Run {
        let n = pipeline.graph.node_count();
        let reports = pipeline
            .graph
            .node_indices()
            .map(|i| StepReport {
                id: pipeline.graph[i].id.clone(),
                kind: pipeline.graph[i].kind.name().to_owned(),
                state: StepState::Pending,
                duration_ms: 0,
                key: None,
                exit_code: None,
                message: None,
                attempts: 0,
                log: None,
            })
            .collect();
        Run {
            schedule: Schedule {
                pipeline: Arc::clone(&pipeline),
                states: vec![StepState::Pending; n],
                waiting: vec![0; n],
                ready: BinaryHeap::new(),
                skipped: Vec::new(),
            },
            pipeline,
            shared,
            reports,
            left_running: vec![None; n],
            attempt_base: vec![0; n],
            root_cause: None,
            aborted: false,
            fail_fast,
            stop,
            cancelled,
            last_keys: BTreeMap::new(),
        }
    }

    /// Takes over what the journal says of an earlier part of this run.
    fn restore(&mut self, history: &crate::journal::run::RunHistory) {
        for index in self.pipeline.graph.node_indices() {
            let Some(record) = history.records.get(&self.pipeline.graph[index].id) else {
                continue;
            };
            match record.state {
                Some(state) if state.is_final() => {
                    self.schedule.states[index.index()] = state;
                    let r = &mut self.reports[index.index()];
                    r.state = state;
                    r.key.clone_from(&record.key);
                    r.exit_code = record.exit_code;
                    r.message.clone_from(&record.message);
                    r.duration_ms = record.duration_ms;
                }
                Some(StepState::Running) => {
                    self.left_running[index.index()] = Some(record.attempt);
                    self.attempt_base[index.index()] = record.attempt;
                }
                // Stopped by gameplan itself: it ran no further; only its number is used.
                Some(StepState::Interrupted) => self.attempt_base[index.index()] = record.attempt,
                _ => {}
            }
        }
    }

    fn context(&self, node: NodeIndex) -> StepContext {
        let instance = self.pipeline.graph[node].clone();
        let step = self.pipeline.steps[instance.step].clone();
        // `always` steps are stopped by a signal only, not by fail-fast.
        let cancel = if instance.always {
            self.shared.cancel.clone()
        } else {
            self.shared.stop.clone()
        };
        let upstream: BTreeMap<String, String> = self
            .pipeline
            .needs(node)
            .into_iter()
            .map(|need| {
                let id = self.pipeline.graph[need].id.clone();
                let key = self.reports[need.index()]
                    .key
                    .clone()
                    .unwrap_or_else(|| format!("unkeyed:{}:{id}", self.shared.run_id));
                (id, key)
            })
            .collect();
        StepContext {
            root: self.shared.root.clone(),
            run_id: self.shared.run_id.clone(),
            step_dir: self.shared.run_dir.step(&instance.id),
            plan: Arc::clone(&self.shared.plan),
            step,
            instance,
            attempt: 0,
            upstream,
            hashes: Arc::clone(&self.shared.hashes),
            cancel,
            env: Arc::clone(&self.shared.env),
            launcher: Arc::clone(&self.shared.launcher),
            redactor: self.shared.progress.redactor().clone(),
        }
    }

    fn abort(&mut self, cause: String) {
        self.root_cause.get_or_insert(cause);
        self.aborted = true;
        let _ = self.stop.send(true);
    }

    /// Records how a step ended: report, journal, progress, scheduling.
    fn finish(&mut self, finished: Finished) {
        let node = finished.node;
        if let Some(key) = finished.reuse_key {
            self.last_keys
                .insert(self.pipeline.graph[node].id.clone(), key);
        }
        let report = &mut self.reports[node.index()];
        report.state = finished.state;
        report.key = finished.key;
        report.exit_code = finished.exit_code;
        report.message = finished
            .message
            .map(|m| self.shared.progress.redactor().redact(&m));
        report.attempts = finished.attempts;
        report.duration_ms = finished.duration_ms;
        if finished.attempts > 0 {
            report.log = Some(
                log_path(&self.shared.run_dir.step(&report.id))
                    .display()
                    .to_string(),
            );
        }
        // After a fail-fast abort the run ends failed, not resumable: a step
        // it kept from starting is skipped, one it interrupted is over, and
        // either way the `always` steps after it may now run.
        let abort_only = self.aborted && !self.cancelled.is_set();
        if finished.state == StepState::Pending {
            // Never started: pending for a resume, or skipped after fail-fast.
            self.schedule.states[node.index()] = StepState::Pending;
            if abort_only {
                self.schedule.skip(node);
            }
            return;
        }
        let event = Event::StepFinished {
            step: report.id.clone(),
            state: finished.state,
            attempt: finished.last_attempt,
            key: report.key.clone(),
            duration_ms: report.duration_ms,
            exit_code: report.exit_code,
            message: report.message.clone(),
        };
        self.shared.progress.step_finished(report);
        let failure = (finished.state == StepState::Failed).then(|| {
            format!(
                "step `{}` failed: {}",
                report.id,
                report.message.clone().unwrap_or_default()
            )
        });
        if let Err(e) = append(&self.shared.journal, &event) {
            self.abort(format!("cannot write the journal: {e}"));
        }
        if let Some(failure) = failure {
            self.root_cause.get_or_insert(failure);
            if self.fail_fast && !self.aborted {
                self.aborted = true;
                let _ = self.stop.send(true);
                self.shared
                    .progress
                    .note("--fail-fast: a step failed; stopping the rest");
            }
        }
        let settled = abort_only && finished.state == StepState::Interrupted;
        self.schedule.finish(node, finished.state, settled);
    }

    /// Journals and reports the steps the schedule skipped since the last call.
    fn record_skips(&mut self) {
        for node in std::mem::take(&mut self.schedule.skipped) {
            // Skipped for a need that did not succeed, or never started
            // because a fail-fast abort came first.
            let blocked = self
                .pipeline
                .needs(node)
                .iter()
                .any(|need| !self.schedule.states[need.index()].satisfies_needs());
            let report = &mut self.reports[node.index()];
            if report.state == StepState::Skipped {
                continue;
            }
            report.state = StepState::Skipped;
            report.message = Some(if blocked {
                "a step it needs did not succeed".into()
            } else {
                "not started: --fail-fast stopped the run at a failure".into()
            });
            let _ = append(
                &self.shared.journal,
                &Event::StepFinished {
                    step: report.id.clone(),
                    state: StepState::Skipped,
                    attempt: 0,
                    key: None,
                    duration_ms: 0,
                    exit_code: None,
                    message: report.message.clone(),
                },
            );
            self.shared.progress.step_finished(report);
        }
    }

    /// After fail-fast, the run is over: what never started is skipped.
    fn skip_unstarted(&mut self) {
        for index in self.pipeline.graph.node_indices() {
            if self.schedule.states[index.index()] == StepState::Pending {
                self.schedule.states[index.index()] = StepState::Skipped;
                self.schedule.skipped.push(index);
            }
        }
        self.record_skips();
    }
}

/// Step states, readiness and skipping: the scheduling rules of DESIGN §3.
struct Schedule {
    pipeline: Arc<Pipeline>,
    states: Vec<StepState>,
    /// Needs of each step that have not reached a final state.
    waiting: Vec<usize>,
    ready: BinaryHeap<Reverse<NodeIndex>>,
    /// Steps newly skipped, to journal.
    skipped: Vec<NodeIndex>,
}

impl Schedule {
    fn initialize(&mut self) {
        let order = self.pipeline.order.clone();
        for &node in &order {
            self.waiting[node.index()] = self
                .pipeline
                .needs(node)
                .iter()
                .filter(|need| !self.states[need.index()].is_final())
                .count();
        }
        for &node in &order {
            if self.states[node.index()] != StepState::Pending {
                continue;
            }
            let blocked = self.pipeline.needs(node).iter().any(|need| {
                self.states[need.index()].is_final() && !self.states[need.index()].satisfies_needs()
            });
            if blocked && !self.pipeline.graph[node].always {
                self.skip(node);
            } else if self.waiting[node.index()] == 0 {
                self.ready.push(Reverse(node));
            }
        }
    }

    /// Marks `node` skipped, and every non-`always` step downstream of it.
    fn skip(&mut self, node: NodeIndex) {
        let mut stack = vec![node];
        while let Some(node) = stack.pop() {
            if self.states[node.index()] != StepState::Pending {
                continue;
            }
            self.states[node.index()] = StepState::Skipped;
            self.skipped.push(node);
            stack.extend(self.settle(node));
        }
    }

    /// Records that `node` reached a final state; returns dependants to skip.
    fn settle(&mut self, node: NodeIndex) -> Vec<NodeIndex> {
        let ok = self.states[node.index()].satisfies_needs();
        let dependants: Vec<NodeIndex> = self
            .pipeline
            .graph
            .neighbors_directed(node, Direction::Outgoing)
            .collect();
        let mut to_skip = Vec::new();
        for next in dependants {
            self.waiting[next.index()] = self.waiting[next.index()].saturating_sub(1);
            if self.states[next.index()] != StepState::Pending {
                continue;
            }
            if !ok && !self.pipeline.graph[next].always {
                to_skip.push(next);
            } else if self.waiting[next.index()] == 0 {
                self.ready.push(Reverse(next));
            }
        }
        to_skip
    }

    /// `settled`: not final, but over as far as `always` dependants go (a
    /// step that fail-fast interrupted).
    fn finish(&mut self, node: NodeIndex, state: StepState, settled: bool) {
        self.states[node.index()] = state;
        if state.is_final() || settled {
            for next in self.settle(node) {
                self.skip(next);
            }
        }
    }
}

/// One step instance that must run: its permits, a leftover check on resume,
/// its attempts, and storing its result.
async fn run_instance(
    node: NodeIndex,
    mut cx: StepContext,
    key: Result<Option<ReuseKey>, String>,
    (left_running, base): (Option<u32>, u32),
    permits: (OwnedSemaphorePermit, Option<OwnedSemaphorePermit>),
    shared: Shared,
) -> Finished {
    let started = Instant::now();
    let mut finished = Finished {
        node,
        state: StepState::Pending,
        key: None,
        reuse_key: None,
        exit_code: None,
        message: None,
        attempts: 0,
        last_attempt: base,
        duration_ms: 0,
    };
    if *cx.cancel.borrow() {
        return finished;
    }
    let key = match key {
        Ok(key) => key,
        Err(message) => {
            finished.state = StepState::Failed;
            finished.message = Some(message);
            return finished;
        }
    };
    let outcome = attempts(&mut cx, (left_running, base), &shared, &mut finished).await;
    // The slot is for the step's processes; storing its result needs none,
    // and the next step should not wait for our bookkeeping.
    drop(permits);
    finished.last_attempt = cx.attempt;
    finished.duration_ms = elapsed_ms(started);
    match outcome {
        StepOutcome::Succeeded => match store_result(&cx, key.as_ref(), &shared) {
            Ok(digest) => {
                finished.state = StepState::Succeeded;
                finished.key = digest;
                finished.reuse_key = key;
                finished.exit_code = Some(0);
            }
            Err(message) => {
                finished.state = StepState::Failed;
                finished.message = Some(message);
            }
        },
        StepOutcome::Failed { exit_code, message } => {
            finished.state = StepState::Failed;
            finished.exit_code = exit_code;
            finished.message = Some(message);
        }
        StepOutcome::Interrupted { message } => {
            finished.state = StepState::Interrupted;
            finished.message = Some(message);
        }
    }
    finished
}

/// Runs attempts until one succeeds, retries run out, or the run stops. On
/// resume, first asks how the attempt a dead gameplan left running ended.
async fn attempts(
    cx: &mut StepContext,
    (left_running, base): (Option<u32>, u32),
    shared: &Shared,
    finished: &mut Finished,
) -> StepOutcome {
    let retries = cx.step.retries;
    cx.attempt = base;
    if let Some(previous) = left_running {
        match crate::steps::command::leftover(&cx.step_dir, &cx.instance.id, previous, &cx.cancel)
            .await
        {
            Leftover::Finished(0) => return StepOutcome::Succeeded,
            Leftover::Finished(code) if retries == 0 => {
                return StepOutcome::Failed {
                    exit_code: Some(code),
                    message: format!("exited with code {code} while gameplan was not running"),
                };
            }
            Leftover::Finished(_) | Leftover::Unfinished => {}
        }
    }
    loop {
        cx.attempt += 1;
        finished.attempts += 1;
        let event = Event::StepStarted {
            step: cx.instance.id.clone(),
            attempt: cx.attempt,
            at: now(),
        };
        // In the journal before it can have an effect.
        if let Err(e) = append(&shared.journal, &event) {
            return StepOutcome::Failed {
                exit_code: None,
                message: format!("cannot write the journal: {e}"),
            };
        }
        shared.progress.step_started(&cx.instance.id, cx.attempt);
        let outcome = steps::run(cx).await;
        let may_retry = cx.attempt <= base + retries && !*cx.cancel.borrow();
        if matches!(outcome, StepOutcome::Failed { .. }) && may_retry {
            shared.progress.note(&format!(
                "{}: attempt {} failed; retrying",
                cx.instance.id, cx.attempt
            ));
            continue;
        }
        return outcome;
    }
}

/// Stores a succeeded step's outputs under its key; returns the key digest.
fn store_result(
    cx: &StepContext,
    key: Option<&ReuseKey>,
    shared: &Shared,
) -> Result<Option<String>, String> {
    let outputs = steps::outputs(cx).map_err(|e| e.0)?;
    let Some(key) = key else { return Ok(None) };
    if !cx.step.reuse {
        return Ok(Some(key.digest()));
    }
    // The step succeeded whether or not its result could be kept: a full
    // disk or a lost race only costs a re-run next time, not a red run.
    match shared.store.put(
        key,
        &shared.root,
        &outputs,
        serde_json::json!({ "step": cx.instance.id }),
    ) {
        Ok(entry) => Ok(Some(entry.key)),
        Err(e) => {
            shared.progress.note(&format!(
                "warning: {}: could not store its result ({e}); it will run again next time",
                cx.instance.id
            ));
            Ok(Some(key.digest()))
        }
    }
}

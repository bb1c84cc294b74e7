//! The dispatcher: owns the run's step states and schedules step tasks.

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
use crate::report::progress::Progress;
use crate::reuse::{FileHashCache, Store};
use crate::steps::command::{Leftover, leftover, log_path};
use crate::steps::{self, StepContext, StepOutcome};

/// How often plain step transitions are synced to disk (group commit).
const COMMIT_EVERY: Duration = Duration::from_millis(100);

/// What a step task reports back.
struct TaskResult {
    node: NodeIndex,
    state: StepState,
    key: Option<String>,
    exit_code: Option<i32>,
    message: Option<String>,
    attempts: u32,
    last_attempt: u32,
    duration_ms: u64,
}

type SharedJournal = Arc<Mutex<Journal>>;

fn journal_append(journal: &SharedJournal, event: &Event) -> Result<(), String> {
    journal
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .append(event)
        .map_err(|e| e.to_string())
}

/// Everything a step task shares with the others.
#[derive(Clone)]
struct Shared {
    root: PathBuf,
    plan: Arc<crate::plan::model::Plan>,
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
    reuse: bool,
    global: Arc<Semaphore>,
}

#[expect(clippy::too_many_lines, reason = "the run's life cycle, in order")]
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
            let root = &loaded.root;
            let plan_path = std::path::absolute(&loaded.source.path)
                .ok()
                .and_then(|p| p.strip_prefix(root).ok().map(|r| r.display().to_string()))
                .unwrap_or_else(|| loaded.source.path.display().to_string());
            journal
                .append_durable(&Event::RunStarted {
                    events_version: EVENTS_VERSION,
                    run_id: run_id.clone(),
                    plan: loaded.plan.name.clone(),
                    plan_hash: plan_hash.clone(),
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
    let journal: SharedJournal = Arc::new(Mutex::new(journal));

    let n = pipeline.graph.node_count();
    let mut states = vec![StepState::Pending; n];
    let mut reports: Vec<StepReport> = pipeline
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
    // On resume: the attempt a dead gameplan left running, per step.
    let mut left_running: Vec<Option<u32>> = vec![None; n];
    if let Some(history) = &history {
        for index in pipeline.graph.node_indices() {
            let Some(record) = history.records.get(&pipeline.graph[index].id) else {
                continue;
            };
            match record.state {
                Some(state) if state.is_final() => {
                    states[index.index()] = state;
                    let r = &mut reports[index.index()];
                    r.state = state;
                    r.key.clone_from(&record.key);
                    r.exit_code = record.exit_code;
                    r.message.clone_from(&record.message);
                    r.duration_ms = record.duration_ms;
                }
                Some(StepState::Running | StepState::Interrupted) => {
                    left_running[index.index()] = Some(record.attempt);
                }
                _ => {}
            }
        }
    }
    progress.run_started(&run_id, &loaded.plan.name, n, history.is_some());

    let concurrency = options
        .concurrency
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, std::num::NonZero::get))
        .max(1);
    let pools: BTreeMap<String, Arc<Semaphore>> = loaded
        .plan
        .pools
        .iter()
        .map(|(name, size)| (name.clone(), Arc::new(Semaphore::new(*size as usize))))
        .collect();
    let (stop_tx, stop_rx) = watch::channel(false);
    let (cancel_tx, cancel_rx) = watch::channel(false);
    let cancelled = Cancelled::default();
    signals::listen(cancel_tx, cancelled.clone(), progress.clone());
    // A signal stops everything; an abort (fail-fast) spares `always` steps.
    let mut on_signal = cancel_rx.clone();
    let stop_on_signal = stop_tx.clone();
    tokio::spawn(async move {
        while on_signal.changed().await.is_ok() {
            if *on_signal.borrow() {
                let _ = stop_on_signal.send(true);
                return;
            }
        }
    });

    let shared = Shared {
        root: loaded.root.clone(),
        plan: Arc::new(loaded.plan),
        store: Store::open(&state_dir),
        hashes: Arc::new(Mutex::new(FileHashCache::load(&state_dir))),
        journal: Arc::clone(&journal),
        env,
        stop: stop_rx,
        cancel: cancel_rx,
        progress: progress.clone(),
        reuse: !options.no_reuse,
        global: Arc::new(Semaphore::new(concurrency)),
    };
    let pipeline = Arc::new(pipeline);

    let mut state = Dispatch {
        pipeline: Arc::clone(&pipeline),
        states,
        waiting: vec![0; n],
        ready: BinaryHeap::new(),
        skipped: Vec::new(),
    };
    state.initialize();
    let mut root_cause: Option<String> = None;
    let mut aborted = false;
    let mut tasks: JoinSet<TaskResult> = JoinSet::new();
    let mut last_commit = Instant::now();
    loop {
        record_skips(&mut state, &journal, &mut reports, progress);
        // Ready steps whose pool is full, back to the ready set after this round.
        let mut pool_full = Vec::new();
        while !cancelled.is_set()
            && let Some(Reverse(node)) = state.ready.pop()
        {
            let always = pipeline.graph[node].always;
            if aborted && !always {
                // Fail-fast: nothing new starts but the `always` steps
                // (cleanup, `finish`), which may be waiting on this one.
                state.skip(node);
                continue;
            }
            // Permits are taken here, not in the step's task: a task waiting
            // for one would start as soon as a failing step gave its permit
            // back, before this loop heard of the failure (so fail-fast let
            // one more step start), and in no particular order.
            let Ok(permit) = Arc::clone(&shared.global).try_acquire_owned() else {
                pool_full.push(node);
                break;
            };
            let pool_name = pipeline.steps[pipeline.graph[node].step].pool.as_ref();
            let pool_permit = match pool_name.and_then(|p| pools.get(p)) {
                None => None,
                Some(pool) => {
                    if let Ok(permit) = Arc::clone(pool).try_acquire_owned() {
                        Some(permit)
                    } else {
                        pool_full.push(node);
                        continue;
                    }
                }
            };
            state.states[node.index()] = StepState::Running;
            let instance = pipeline.graph[node].clone();
            let step = pipeline.steps[instance.step].clone();
            let upstream: BTreeMap<String, String> = pipeline
                .needs(node)
                .into_iter()
                .map(|need| {
                    let id = pipeline.graph[need].id.clone();
                    let key = reports[need.index()]
                        .key
                        .clone()
                        .unwrap_or_else(|| format!("unkeyed:{run_id}:{id}"));
                    (id, key)
                })
                .collect();
            let cx = StepContext {
                root: shared.root.clone(),
                run_id: run_id.clone(),
                step_dir: run_dir.step(&instance.id),
                plan: Arc::clone(&shared.plan),
                step,
                instance,
                attempt: 0,
                upstream,
                hashes: Arc::clone(&shared.hashes),
                cancel: if always {
                    shared.cancel.clone()
                } else {
                    shared.stop.clone()
                },
                env: Arc::clone(&shared.env),
            };
            tasks.spawn(run_instance(
                node,
                cx,
                left_running[node.index()],
                (permit, pool_permit),
                shared.clone(),
            ));
        }
        state.ready.extend(pool_full.into_iter().map(Reverse));
        if tasks.is_empty() {
            break;
        }
        let Some(joined) = tasks.join_next().await else {
            break;
        };
        let result = match joined {
            Ok(result) => result,
            Err(e) => {
                // A panicking step task is a bug; stop scheduling and report it.
                root_cause.get_or_insert_with(|| format!("internal error in a step task: {e}"));
                aborted = true;
                let _ = stop_tx.send(true);
                continue;
            }
        };
        let node = result.node;
        let report = &mut reports[node.index()];
        report.state = result.state;
        report.key.clone_from(&result.key);
        report.exit_code = result.exit_code;
        report.message.clone_from(&result.message);
        report.attempts = result.attempts;
        report.duration_ms = result.duration_ms;
        if result.attempts > 0 {
            report.log = Some(log_path(&run_dir.step(&report.id)).display().to_string());
        }
        if result.state != StepState::Pending {
            let event = Event::StepFinished {
                step: report.id.clone(),
                state: result.state,
                attempt: result.last_attempt,
                key: result.key.clone(),
                duration_ms: result.duration_ms,
                exit_code: result.exit_code,
                message: result.message.clone().map(|m| shared_redact(&shared, &m)),
            };
            if let Err(e) = journal_append(&journal, &event) {
                root_cause.get_or_insert(e);
                aborted = true;
                let _ = stop_tx.send(true);
            }
            progress.step_finished(report);
        }
        if result.state == StepState::Failed {
            root_cause.get_or_insert_with(|| {
                format!(
                    "step `{}` failed: {}",
                    report.id,
                    report.message.clone().unwrap_or_default()
                )
            });
            if options.fail_fast && !aborted {
                aborted = true;
                let _ = stop_tx.send(true);
                progress.note("--fail-fast: a step failed; stopping the rest");
            }
        }
        // After a fail-fast abort the run ends failed, not resumable: a step
        // it interrupted is over, one it kept from starting is skipped, and
        // either way the `always` steps after it may now run.
        let abort_only = aborted && !cancelled.is_set();
        if abort_only && result.state == StepState::Pending {
            state.states[node.index()] = StepState::Pending;
            state.skip(node);
        } else {
            let settled = abort_only && result.state == StepState::Interrupted;
            state.finish(node, result.state, settled);
        }
        if last_commit.elapsed() >= COMMIT_EVERY {
            let _ = journal
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .commit();
            last_commit = Instant::now();
        }
    }

    let interrupted = cancelled.is_set();
    if !interrupted {
        // Fail-fast left some steps unstarted: the run is over, so say so.
        for index in pipeline.graph.node_indices() {
            if state.states[index.index()] == StepState::Pending {
                state.states[index.index()] = StepState::Skipped;
                state.skipped.push(index);
            }
        }
        record_skips(&mut state, &journal, &mut reports, progress);
    }
    let failed = reports
        .iter()
        .any(|r| matches!(r.state, StepState::Failed | StepState::Interrupted));
    let (outcome, code) = if interrupted {
        (RunOutcome::Interrupted, exit_code::CANCELED)
    } else if failed || aborted {
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
        let mut journal = journal.lock().unwrap_or_else(PoisonError::into_inner);
        journal.append(&closing).map_err(journal_error)?;
        journal.commit().map_err(journal_error)?;
    }
    let _ = shared
        .hashes
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .save();

    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for r in &reports {
        *counts.entry(r.state.word().to_owned()).or_default() += 1;
    }
    let ordered: Vec<StepReport> = pipeline
        .order
        .iter()
        .map(|i| reports[i.index()].clone())
        .collect();
    let report = RunReport {
        run_id: run_id.clone(),
        plan: shared.plan.name.clone(),
        outcome,
        exit_code: code,
        resumed: history.is_some(),
        duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        counts,
        root_cause,
        steps: ordered,
        resume_command: interrupted.then_some(resume_hint),
    };
    if !interrupted {
        let summary = serde_json::to_vec_pretty(&report).unwrap_or_default();
        let _ = crate::journal::atomic_write(&run_dir.summary(), &summary);
    }
    Ok(report)
}

fn shared_redact(shared: &Shared, text: &str) -> String {
    shared.progress.redactor().redact(text)
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

/// Journals and reports the steps the dispatcher skipped since the last call.
fn record_skips(
    state: &mut Dispatch,
    journal: &SharedJournal,
    reports: &mut [StepReport],
    progress: &Progress,
) {
    let skipped: Vec<NodeIndex> = state.skipped.drain(..).collect();
    for node in skipped {
        let report = &mut reports[node.index()];
        if report.state == StepState::Skipped {
            continue;
        }
        // Skipped for a need that failed, or never started because a
        // fail-fast abort came first (its needs, if any, succeeded).
        let blocked = state
            .pipeline
            .needs(node)
            .iter()
            .any(|need| !state.states[need.index()].satisfies_needs());
        report.state = StepState::Skipped;
        report.message = Some(if blocked {
            "a step it needs did not succeed".into()
        } else {
            "not started: --fail-fast stopped the run at a failure".into()
        });
        let _ = journal_append(
            journal,
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
        progress.step_finished(report);
    }
}

/// Step states, readiness and skipping: the scheduling rules of DESIGN §3.
struct Dispatch {
    pipeline: Arc<Pipeline>,
    states: Vec<StepState>,
    /// Needs of each step that have not reached a final state.
    waiting: Vec<usize>,
    ready: BinaryHeap<Reverse<NodeIndex>>,
    /// Steps newly skipped, to journal.
    skipped: Vec<NodeIndex>,
}

impl Dispatch {
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
            let always = self.pipeline.graph[next].always;
            if !ok && !always {
                to_skip.push(next);
            } else if self.waiting[next.index()] == 0 {
                self.ready.push(Reverse(next));
            }
        }
        to_skip
    }

    fn finish(&mut self, node: NodeIndex, state: StepState, settled: bool) {
        self.states[node.index()] = state;
        if state.is_final() || settled {
            for next in self.settle(node) {
                self.skip(next);
            }
        }
    }
}

fn elapsed_ms(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// One step instance, from its permits to its stored result.
#[expect(
    clippy::too_many_lines,
    reason = "leftover check, reuse, attempts and storing, in order"
)]
async fn run_instance(
    node: NodeIndex,
    mut cx: StepContext,
    left_running: Option<u32>,
    permits: (OwnedSemaphorePermit, Option<OwnedSemaphorePermit>),
    shared: Shared,
) -> TaskResult {
    // Held until the step is done; dropped with the task.
    let _permits = permits;
    let started = Instant::now();
    let mut result = TaskResult {
        node,
        state: StepState::Pending,
        key: None,
        exit_code: None,
        message: None,
        attempts: 0,
        last_attempt: left_running.unwrap_or(0),
        duration_ms: 0,
    };
    if *cx.cancel.borrow() {
        return result;
    }
    let retries = cx.step.retries;
    let mut attempt = left_running.unwrap_or(0);
    // A process a dead gameplan left behind may have finished the step.
    let mut outcome = None;
    if let Some(previous) = left_running {
        match leftover(&cx.step_dir, previous, &cx.cancel).await {
            Leftover::Finished(0) => outcome = Some(StepOutcome::Succeeded),
            Leftover::Finished(code) if retries == 0 => {
                outcome = Some(StepOutcome::Failed {
                    exit_code: Some(code),
                    message: format!("exited with code {code} while gameplan was not running"),
                });
            }
            Leftover::Finished(_) | Leftover::Unfinished => {}
        }
    }

    let key = match tokio::task::block_in_place(|| steps::reuse_key(&cx)) {
        Ok(key) => key,
        Err(e) => {
            result.state = StepState::Failed;
            result.message = Some(e.0);
            result.duration_ms = elapsed_ms(started);
            return result;
        }
    };
    let digest = key.as_ref().map(crate::reuse::ReuseKey::digest);
    let ident = format!("{}/{}", shared.plan.name, cx.instance.id);

    if outcome.is_none()
        && shared.reuse
        && cx.step.reuse
        && let (Some(key), Some(digest)) = (&key, &digest)
        && let Some(entry) = shared.store.lookup(digest)
    {
        let restored = tokio::task::block_in_place(|| shared.store.restore(&entry, &shared.root));
        if restored.is_ok() {
            let _ = shared.store.record_last(&ident, key);
            result.state = StepState::Reused;
            result.key = Some(digest.clone());
            result.duration_ms = elapsed_ms(started);
            return result;
        }
        // A damaged entry is a miss: run the step.
    }

    let outcome = match outcome {
        Some(outcome) => outcome,
        None => loop {
            attempt += 1;
            result.attempts += 1;
            cx.attempt = attempt;
            let event = Event::StepStarted {
                step: cx.instance.id.clone(),
                attempt,
                at: now(),
            };
            // In the journal before it can have an effect.
            if let Err(e) = journal_append(&shared.journal, &event) {
                break StepOutcome::Failed {
                    exit_code: None,
                    message: format!("cannot write the journal: {e}"),
                };
            }
            shared.progress.step_started(&cx.instance.id, attempt);
            let outcome = steps::run(&cx).await;
            let retry = matches!(outcome, StepOutcome::Failed { .. })
                && attempt <= retries + left_running.unwrap_or(0);
            if retry && !*cx.cancel.borrow() {
                shared.progress.note(&format!(
                    "{}: attempt {attempt} failed; retrying",
                    cx.instance.id
                ));
                continue;
            }
            break outcome;
        },
    };
    result.last_attempt = attempt;
    result.duration_ms = elapsed_ms(started);
    match outcome {
        StepOutcome::Succeeded => {
            let stored = tokio::task::block_in_place(|| -> Result<(), String> {
                let outputs = steps::outputs(&cx).map_err(|e| e.0)?;
                if let (Some(key), true) = (&key, cx.step.reuse) {
                    shared
                        .store
                        .put(
                            key,
                            &shared.root,
                            &outputs,
                            serde_json::json!({ "step": cx.instance.id }),
                        )
                        .map_err(|e| e.to_string())?;
                    shared
                        .store
                        .record_last(&ident, key)
                        .map_err(|e| e.to_string())?;
                }
                Ok(())
            });
            match stored {
                Ok(()) => {
                    result.state = StepState::Succeeded;
                    result.key = digest;
                    result.exit_code = Some(0);
                }
                Err(message) => {
                    result.state = StepState::Failed;
                    result.message = Some(message);
                }
            }
        }
        StepOutcome::Failed { exit_code, message } => {
            result.state = StepState::Failed;
            result.exit_code = exit_code;
            result.message = Some(message);
        }
        StepOutcome::Interrupted { message } => {
            result.state = StepState::Interrupted;
            result.message = Some(message);
        }
    }
    result
}

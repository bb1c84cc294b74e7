//! The dispatcher: owns the run's step states and schedules step tasks.
//!
//! A step that becomes ready is first checked for reuse right here, on the
//! dispatcher: computing its key and restoring a stored result is quick, and
//! doing it without a task keeps a fully reused run near the cost of reading
//! the store. Only steps that must run get a task (and a pool slot).

mod closing;
mod opening;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use petgraph::graph::NodeIndex;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;

use super::attempts::{self, AttemptBase, Finished, Keeper};
use super::journal_writer::JournalWriter;
use super::keys::KeyMaker;
use super::schedule::Schedule;
use super::signals::{self, Cancelled};
use super::{RunReport, RunRequest, StartError, StepReport};
use crate::backend::Connection;
use crate::graph::Pipeline;
use crate::journal::run::{Event, RunDir, RunHistory, StepState};
use crate::journal::step_log::Segment;
use crate::plan::model::Plan;
use crate::report::progress::Progress;
use crate::reuse::{FileHashCache, KeysFingerprint, ReuseKey, Store};
use crate::steps::{CheckpointBook, Confirm, Kinds, Reuse, StepContext, StepIo};
use closing::{Leg, close};
use opening::{carry_over, connect, open_journal};

/// What step tasks share.
#[derive(Clone)]
struct Shared {
    root: PathBuf,
    /// The plan file, repo-relative: a restore never writes over it.
    plan_file: Option<String>,
    run_id: String,
    run_dir: RunDir,
    plan: Arc<Plan>,
    keeper: Keeper,
    env: Arc<BTreeMap<String, String>>,
    /// Flips on a signal, a fail-fast abort or a halting outcome: what stops
    /// ordinary steps.
    stop: watch::Receiver<bool>,
    /// Flips on a signal or a halting outcome only: what stops `always`
    /// steps, which run to the end of a failed (also fail-fast) run like the
    /// `finish` that settles it.
    cancel: watch::Receiver<bool>,
    global: Arc<Semaphore>,
    kinds: Arc<Kinds>,
    backend: Option<Connection>,
    confirm: Arc<dyn Confirm>,
    dry_upload: bool,
    /// Every play cell and whether it will be reused, decided before the
    /// run.
    cells_ahead: Arc<Vec<crate::steps::CellAhead>>,
    /// See [`super::RunOptions::prices_whole_plan`].
    prices_whole_plan: bool,
    /// The state directory's unit store, handed to every step.
    units: crate::reuse::UnitStore,
    /// See [`super::RunOptions::reuse_only`].
    reuse_only: std::collections::BTreeSet<String>,
    /// See [`super::RunOptions::baseline`].
    baseline: Option<Arc<crate::report::baseline::Baseline>>,
}

/// Runs the request to its end: opens (or resumes) the journal, sets the
/// run up, dispatches its steps, and closes it with its report. Each part
/// is a function of its own, in the order they happen.
pub async fn run(request: RunRequest, progress: &Progress) -> Result<RunReport, StartError> {
    let started = Instant::now();
    let run_id = request.start.run_id().to_owned();
    let run_dir = RunDir::new(&request.state_dir, &run_id);
    // Before the journal says the run started or resumed: a Ctrl-C from
    // then on stops the run, never kills gameplan mid-way by default.
    let caught = signals::Caught::install();
    let store = Store::read_ahead(&request.state_dir);
    // Before the journal: a backend that cannot be opened refuses the run
    // with nothing journaled, run or charged.
    let backend = connect(&request)?;
    let (journal, history) = open_journal(&request, &run_dir)?;
    let RunRequest {
        loaded,
        pipeline,
        state_dir,
        mut options,
        env,
        resume_hint,
        kinds,
        confirm,
        ..
    } = request;
    let pipeline = carry_over(history.as_ref(), &loaded, pipeline, &mut options)?;
    let resumed = history.is_some();
    let steps = pipeline.graph.node_count();
    progress.run_started(&run_id, &loaded.plan.name, steps, resumed);
    progress.align_ids(pipeline.graph.node_weights().map(|step| step.id.as_str()));

    let concurrency = options.effective_concurrency();
    // A kind may run `concurrency` steps at once and keep as many more
    // queued (the command kind's launcher does), so a finished step's slot
    // is refilled without waiting for the dispatcher. Under --fail-fast nothing may start after a failure, so
    // nothing is queued ahead there.
    let queue_factor: u32 = if options.fail_fast { 1 } else { 2 };
    let in_flight = concurrency * queue_factor as usize;
    let pools = pools(&loaded.plan, concurrency, options.concurrency, progress);
    let (stop_tx, stop_rx) = watch::channel(false);
    let (cancel_tx, cancel_rx) = watch::channel(false);
    let cancelled = Cancelled::default();
    signals::listen(
        caught,
        [stop_tx.clone(), cancel_tx.clone()],
        cancelled.clone(),
        progress.clone(),
        Arc::clone(&kinds),
    );
    let journal = JournalWriter::start(journal);
    let shared = Shared {
        cells_ahead: cells_ahead(&loaded, &pipeline, &state_dir, &options, &env, &kinds),
        prices_whole_plan: options.prices_whole_plan,
        units: unit_store(&state_dir, options.no_reuse),
        reuse_only: options.reuse_only.iter().cloned().collect(),
        baseline: options.baseline.clone().map(Arc::new),
        root: loaded.root.clone(),
        plan_file: plan_file(&loaded),
        run_id: run_id.clone(),
        run_dir: run_dir.clone(),
        plan: Arc::new(loaded.plan),
        keeper: Keeper {
            store: open_store(store, progress),
            hashes: Arc::new(Mutex::new(FileHashCache::load(&state_dir))),
            journal: journal.clone(),
            progress: progress.clone(),
        },
        env,
        stop: stop_rx,
        cancel: cancel_rx,
        global: Arc::new(Semaphore::new(in_flight)),
        kinds,
        backend,
        confirm,
        dry_upload: options.dry_upload,
    };

    let pipeline = Arc::new(pipeline);
    let mut run = Run::new(
        Arc::clone(&pipeline),
        shared,
        options.fail_fast,
        (stop_tx, cancel_tx),
        cancelled.clone(),
    );
    run.take_over(history.as_ref(), !options.given.is_empty())?;
    run.wait_for_other_runs(&state_dir).await;
    run.schedule.initialize();
    dispatch(
        &mut run,
        &journal,
        &pools,
        &cancelled,
        options.no_reuse,
        queue_factor,
    )
    .await;
    Ok(close(
        run,
        &journal,
        &cancelled,
        &options.fail_on,
        options.baseline.as_ref(),
        Leg {
            started,
            resumed,
            resume_hint,
        },
    ))
}

/// The plan's `[pools]` as semaphores; a pool wider than the run's
/// concurrency is said to be capped.
fn pools(
    plan: &Plan,
    concurrency: usize,
    flag: Option<usize>,
    progress: &Progress,
) -> BTreeMap<String, Arc<Semaphore>> {
    let pools: BTreeMap<String, Arc<Semaphore>> = plan
        .pools
        .iter()
        .map(|(name, size)| (name.clone(), Arc::new(Semaphore::new(*size as usize))))
        .collect();
    // A pool wider than the run's concurrency never fills: say so, or
    // `[pools] play = 8` on a two-core machine silently plays two at once.
    for (name, size) in &plan.pools {
        if *size as usize > concurrency {
            let by = match flag {
                Some(n) => format!("--concurrency {n}"),
                None => format!("the machine's {concurrency} cores; --concurrency N raises it"),
            };
            progress.note(&format!(
                "pools.{name} = {size} is capped at {concurrency} at once ({by})"
            ));
        }
    }
    pools
}

/// The plan file, repo-relative: a restore never writes over it.
fn plan_file(loaded: &crate::plan::LoadedPlan) -> Option<String> {
    std::fs::canonicalize(&loaded.source.path)
        .ok()
        .and_then(|p| {
            let root = std::fs::canonicalize(&loaded.root).ok()?;
            Some(
                p.strip_prefix(root)
                    .ok()?
                    .to_string_lossy()
                    .replace('\\', "/"),
            )
        })
}

/// Starts every step that is ready and has a slot, in declared order,
/// until none is left running: the schedule's loop.
async fn dispatch(
    run: &mut Run,
    journal: &JournalWriter,
    pools: &BTreeMap<String, Arc<Semaphore>>,
    cancelled: &Cancelled,
    no_reuse: bool,
    queue_factor: u32,
) {
    let shared = run.shared.clone();
    let pipeline = Arc::clone(&run.pipeline);
    let mut tasks: JoinSet<Finished> = JoinSet::new();
    // Keys computed for steps still waiting for a slot; the store was
    // already asked about them (a miss stays a miss within a run).
    let mut keys: BTreeMap<NodeIndex, Result<Option<ReuseKey>, String>> = BTreeMap::new();
    loop {
        run.round_begins(journal, tasks.is_empty());
        // Ready steps whose pool is full, back to the ready set after this round.
        let mut pool_full = Vec::new();
        while !cancelled.is_set()
            && run.journal_error.is_none()
            && let Some(node) = run.schedule.pop_ready()
        {
            let always = pipeline.graph[node].always;
            if run.aborted && !always {
                // Fail-fast: nothing new starts but the `always` steps
                // (cleanup, `finish`), which may be waiting on this one.
                run.schedule.skip(node);
                continue;
            }
            if run.halted && !always {
                // A halt (declined, refused, unauthorized, unreachable):
                // nothing new starts but the `always` steps whose needs are
                // done (the `finish` of a job that exists); this one stays
                // pending for the resume.
                continue;
            }
            let cx = run.context(node);
            let Some(kind) = shared.kinds.get(cx.step.kind) else {
                // Refused before the run started (`check_runnable`).
                run.finish(failed_at_once(node, "this step kind is not built"));
                continue;
            };
            let left_running = run.left_running[node.index()];
            let asked = keys.contains_key(&node);
            let key = keys.remove(&node).unwrap_or_else(|| run.key(node));
            let mut key = match key {
                Ok(key) => key,
                Err(message) => {
                    run.finish(failed_at_once(node, &message));
                    continue;
                }
            };
            // A reuse-only cell comes from its bundle whatever --no-reuse
            // says: it was played fresh where it was played.
            if left_running.is_none()
                && (!no_reuse || shared.reuse_only.contains(&cx.instance.id))
                && !asked
                && let Some(finished) =
                    attempts::try_reuse(node, &cx, kind, &mut key, &shared.keeper)
            {
                run.finish(finished);
                continue;
            }
            if shared.reuse_only.contains(&cx.instance.id) {
                run.finish(not_merged(node));
                continue;
            }
            // Slots are handed out here, in declared order, and only after the
            // dispatcher has seen how the previous holder ended: fail-fast then
            // starts nothing after a failure.
            // A step of a kind that does not queue ahead takes the room of
            // every step that may wait per running one.
            let weight = if kind.queues_ahead() { 1 } else { queue_factor };
            let Ok(permit) = Arc::clone(&shared.global).try_acquire_many_owned(weight) else {
                keys.insert(node, Ok(key));
                pool_full.push(node);
                break;
            };
            let pool = cx.step.pool.as_deref().or_else(|| kind.resource(&cx.plan));
            let pool_permit = match pool.and_then(|p| pools.get(p)) {
                None => None,
                Some(pool) => {
                    if let Ok(permit) = Arc::clone(pool).try_acquire_owned() {
                        Some(permit)
                    } else {
                        keys.insert(node, Ok(key));
                        pool_full.push(node);
                        continue;
                    }
                }
            };
            lock_hashes(&shared.keeper).stand_still(false);
            run.schedule.states[node.index()] = StepState::Running;
            let io = Arc::new(run.io(node));
            let kinds = Arc::clone(&shared.kinds);
            let keeper = shared.keeper.clone();
            let base = AttemptBase {
                left_running,
                last: run.attempt_base[node.index()],
            };
            tasks.spawn(async move {
                let Some(kind) = kinds.get(cx.step.kind) else {
                    return Finished::pending(node, base.last);
                };
                attempts::run_instance(node, cx, kind, key, base, (permit, pool_permit), keeper, io)
                    .await
            });
        }
        run.schedule.requeue(pool_full);
        if tasks.is_empty() {
            break;
        }
        let next = tokio::select! {
            next = tasks.join_next() => next,
            // Stop at once when the journal fails, not when a step next ends.
            () = journal.failed(), if run.journal_error.is_none() => continue,
        };
        match next {
            Some(Ok(finished)) => run.finish(finished),
            Some(Err(e)) => run.abort(format!("internal error in a step task: {e}")),
            None => break,
        }
    }
}

fn lock_hashes(keeper: &Keeper) -> std::sync::MutexGuard<'_, FileHashCache> {
    keeper
        .hashes
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A step that fails before any attempt (its key cannot be computed).
fn failed_at_once(node: NodeIndex, message: &str) -> Finished {
    let mut finished = Finished::pending(node, 0);
    finished.state = StepState::Failed;
    finished.message = Some(message.to_owned());
    finished
}

/// A cell `plan merge` must reuse whose key found nothing in the store:
/// failed, never played again.
fn not_merged(node: NodeIndex) -> Finished {
    failed_at_once(
        node,
        "this cell is not among the merged cells under the key it has here: its build, \
         settings or upstream outputs differ from the shard's. It was not played again; \
         `gameplan plan explain` shows why its key differs",
    )
}

/// Which play cells will be reused, decided ahead by `plan explain`'s
/// code, for the step that prices the cells before anything runs (an
/// `estimate`); other plans skip the extra key pass.
fn cells_ahead(
    loaded: &crate::plan::LoadedPlan,
    pipeline: &Pipeline,
    state_dir: &std::path::Path,
    options: &super::RunOptions,
    env: &BTreeMap<String, String>,
    kinds: &Kinds,
) -> Arc<Vec<crate::steps::CellAhead>> {
    let read = pipeline.graph.node_weights().any(|s| {
        kinds
            .get(s.kind)
            .is_some_and(crate::steps::Kind::reads_cells_ahead)
    });
    if !read {
        return Arc::default();
    }
    // `--shard prepare` buys for every cell of the plan, which its shards
    // play; its own part holds none.
    let whole = options
        .prices_whole_plan
        .then(|| crate::graph::expand_loaded(loaded).ok())
        .flatten();
    let priced = whole.as_ref().unwrap_or(pipeline);
    let cells =
        super::preview::cells_ahead(loaded, priced, state_dir, options.no_reuse, env, kinds);
    Arc::new(cells)
}

/// Every step that needs `node`, directly or through others.
fn dependants(pipeline: &Pipeline, node: NodeIndex) -> std::collections::BTreeSet<NodeIndex> {
    let mut seen = std::collections::BTreeSet::new();
    let mut stack: Vec<NodeIndex> = pipeline
        .graph
        .neighbors_directed(node, petgraph::Direction::Outgoing)
        .collect();
    while let Some(next) = stack.pop() {
        if seen.insert(next) {
            stack.extend(
                pipeline
                    .graph
                    .neighbors_directed(next, petgraph::Direction::Outgoing),
            );
        }
    }
    seen
}

/// The run's state: reports, scheduling, the root cause.
struct Run {
    pipeline: Arc<Pipeline>,
    shared: Shared,
    schedule: Schedule,
    reports: Vec<StepReport>,
    /// The digest of each finished step's outputs, which the steps that
    /// need it key on.
    outputs: Vec<Option<String>>,
    /// On resume: the attempt a dead gameplan left running, per step (it
    /// may have finished meanwhile; a stopped one did not).
    left_running: Vec<Option<u32>>,
    /// On resume: the last attempt number used, per step; new attempts
    /// count on from it so each has its own name in `exits.jsonl`.
    attempt_base: Vec<u32>,
    /// Each step's acknowledged checkpoints: from the journal on resume,
    /// then those the steps write (shared with every step's [`StepIo`]).
    checkpoints: CheckpointBook,
    root_cause: Option<String>,
    /// Why the journal stopped taking records, once it has: the run stops
    /// and stays resumable.
    journal_error: Option<String>,
    /// Why the run stopped for want of space: the step whose log could not
    /// be written, and the whole of what it was told.
    disk_full: Option<String>,
    /// The run stopped for a reason of gameplan's own (the journal could not
    /// be written, a task died): that is the root cause, whatever failed.
    own_cause: Option<String>,
    aborted: bool,
    /// A step declined, or the environment refused (auth, model): nothing
    /// more starts, and what did not run stays pending for a resume.
    halted: bool,
    fail_fast: bool,
    stop: watch::Sender<bool>,
    cancel: watch::Sender<bool>,
    cancelled: Cancelled,
    /// Keys of the steps that succeeded or were reused, recorded at the end
    /// so the next `plan explain` can say what changed.
    last_keys: BTreeMap<String, ReuseKey>,
    /// Their fingerprint, built as the steps finish.
    last_fingerprint: KeysFingerprint,
}

impl Run {
    fn new(
        pipeline: Arc<Pipeline>,
        shared: Shared,
        fail_fast: bool,
        (stop, cancel): (watch::Sender<bool>, watch::Sender<bool>),
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
        let mut schedule = Schedule::new(Arc::clone(&pipeline));
        for index in pipeline.graph.node_indices() {
            schedule.partial_ok[index.index()] = shared
                .kinds
                .get(pipeline.graph[index].kind)
                .is_some_and(crate::steps::Kind::partial_results_are_results);
        }
        Run {
            schedule,
            pipeline,
            shared,
            reports,
            outputs: vec![None; n],
            left_running: vec![None; n],
            attempt_base: vec![0; n],
            checkpoints: CheckpointBook::default(),
            root_cause: None,
            journal_error: None,
            disk_full: None,
            own_cause: None,
            aborted: false,
            halted: false,
            fail_fast,
            stop,
            cancel,
            cancelled,
            last_keys: BTreeMap::new(),
            last_fingerprint: KeysFingerprint::default(),
        }
    }

    /// Takes over a resumed run's history, or the steps given to a new run
    /// (journaled as it began, and taken over as a resume would).
    fn take_over(&mut self, history: Option<&RunHistory>, given: bool) -> Result<(), StartError> {
        match history {
            Some(history) => self.restore(history),
            None if given => self.restore(
                &RunHistory::read(&self.shared.run_dir.journal())
                    .map_err(|e| StartError::Journal(e.to_string()))?,
            ),
            None => {}
        }
        Ok(())
    }

    /// Takes over what the journal says of an earlier part of this run.
    fn restore(&mut self, history: &RunHistory) {
        self.checkpoints
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone_from(&history.checkpoints);
        for index in self.pipeline.graph.node_indices() {
            let Some(record) = history.records.get(&self.pipeline.graph[index].id) else {
                continue;
            };
            match record.state {
                Some(state) if state.is_final() => {
                    self.schedule.states[index.index()] = state;
                    self.outputs[index.index()].clone_from(&record.outputs);
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
                // Stopped by gameplan itself (a signal, a declined price, a
                // refused token): it ran no further; only its number is used.
                Some(_) => self.attempt_base[index.index()] = record.attempt,
                None => {}
            }
        }
    }

    /// Waits until no attempt that another run of this plan left running
    /// lives (or stops it past its bound), before any step of this run
    /// starts or is restored over what such an attempt writes.
    async fn wait_for_other_runs(&self, state_dir: &std::path::Path) {
        let elsewhere =
            super::left_running_elsewhere(state_dir, &self.shared.plan.name, &self.shared.run_id);
        let mut waits = JoinSet::new();
        for (other, step, attempt) in elsewhere {
            let Some(node) = self
                .pipeline
                .graph
                .node_indices()
                .find(|&n| self.pipeline.graph[n].id == step)
            else {
                continue;
            };
            let mut cx = self.context(node);
            cx.step_dir = RunDir::new(state_dir, &other).step(&step);
            cx.left_by = other;
            let kinds = Arc::clone(&self.shared.kinds);
            waits.spawn(async move {
                if let Some(kind) = kinds.get(cx.step.kind) {
                    // How it ended is that run's to journal, on its resume.
                    let _ = kind.left_running(&cx, attempt).await;
                }
            });
        }
        while waits.join_next().await.is_some() {}
    }

    /// The key of a ready step: every step it needs has finished.
    fn key(&self, node: NodeIndex) -> Result<Option<ReuseKey>, String> {
        let hashes = &self.shared.keeper.hashes;
        let maker = KeyMaker {
            root: &self.shared.root,
            plan: &self.shared.plan,
            pipeline: &self.pipeline,
            hashes,
            env: &self.shared.env,
            redactor: self.shared.keeper.progress.redactor(),
            kinds: &self.shared.kinds,
            plan_path: None,
            units: None,
            baseline: self.shared.baseline.as_deref(),
        };
        match maker.key(node, |need| self.outputs[need.index()].clone()) {
            Ok(Reuse::Key(key)) => Ok(Some(key)),
            Ok(Reuse::Never(_) | Reuse::AfterUpstream(_)) => Ok(None),
            Err(e) => Err(e.0),
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
        StepContext {
            root: self.shared.root.clone(),
            plan_file: self.shared.plan_file.clone(),
            run_id: self.shared.run_id.clone(),
            step_dir: self.shared.run_dir.step(&instance.id),
            plan: Arc::clone(&self.shared.plan),
            reads: Arc::new(
                self.shared
                    .kinds
                    .reads(&self.pipeline, node, |id| self.shared.run_dir.step(id)),
            ),
            step,
            instance,
            attempt: 0,
            hashes: Arc::clone(&self.shared.keeper.hashes),
            cancel,
            env: Arc::clone(&self.shared.env),
            left_by: self.shared.run_id.clone(),
            note: {
                let progress = self.shared.keeper.progress.clone();
                Arc::new(move |text: &str| progress.note(text))
            },
            units: self.shared.units.clone(),
            baseline: self.shared.baseline.clone(),
        }
    }

    fn io(&self, node: NodeIndex) -> StepIo {
        let id = &self.pipeline.graph[node].id;
        let progress = self.shared.keeper.progress.clone();
        let started_id = id.clone();
        let progress_id = id.clone();
        let live_log = if self.shared.keeper.progress.streams() {
            self.shared.kinds.live_log(
                self.pipeline.graph[node].kind,
                &self.shared.run_dir.steps_log(),
            )
        } else {
            None
        };
        // Every step it needs, directly or through others: a `finish`
        // reads `register`'s job id through the `deliver`s between them.
        let needs = self
            .pipeline
            .ancestors(node)
            .into_iter()
            .map(|need| {
                let need_id = self.pipeline.graph[need].id.clone();
                let dir = self.shared.run_dir.step(&need_id);
                (need_id, dir)
            })
            .collect();
        // The steps below it, for the cells an estimate prices; only when
        // the run decided its cells ahead (a plan with an estimate).
        let needed_by = if self.shared.cells_ahead.is_empty() {
            std::collections::BTreeSet::new()
        } else if self.shared.prices_whole_plan {
            // Decided over the whole plan, whose cells this part holds none of.
            self.shared
                .cells_ahead
                .iter()
                .map(|c| c.id.clone())
                .collect()
        } else {
            dependants(&self.pipeline, node)
                .into_iter()
                .map(|d| self.pipeline.graph[d].id.clone())
                .collect()
        };
        // What stops this step (as in its context) also answers a question
        // it is waiting on: no.
        let stopped = if self.pipeline.graph[node].always {
            self.shared.cancel.clone()
        } else {
            self.shared.stop.clone()
        };
        StepIo::new(
            Arc::new(self.shared.keeper.journal.clone()),
            id.clone(),
            Vec::new(),
            self.shared.backend.clone(),
            Arc::clone(&self.shared.confirm),
            self.shared.dry_upload,
        )
        .in_run(Arc::clone(&self.checkpoints), needs)
        .cells_decided(Arc::clone(&self.shared.cells_ahead), needed_by)
        .live_log(live_log.clone())
        .redacting(progress.redactor().clone())
        .stopped_by(stopped)
        .on_question({
            let progress = progress.clone();
            move |asking| progress.pause_display(asking)
        })
        .on_attempt({
            let progress = progress.clone();
            let id = id.clone();
            move |attempt| progress.attempt_begins(&id, attempt)
        })
        .on_start({
            let progress = progress.clone();
            // Attempts count across resumes in the journal; the display
            // counts this run's tries and says when the step was resumed.
            let base = self.attempt_base[node.index()];
            move |attempt| progress.step_started(&started_id, attempt, base, live_log.clone())
        })
        .on_warn({
            let progress = progress.clone();
            let id = id.clone();
            move |text| progress.step_warning(&id, text)
        })
        .on_progress(move |text| progress.step_progress(&progress_id, text))
    }

    /// The journal cannot be written: nothing more starts, running steps
    /// are stopped (what they did could not be recorded, so a resume runs
    /// them again), and the run is left unfinished for a resume. Not an
    /// abort: nothing is skipped, and no `--fail-fast` is blamed.
    fn journal_failed(&mut self, why: String) {
        if self.journal_error.is_some() {
            return;
        }
        self.shared.keeper.progress.note(&format!(
            "the run's journal cannot be written ({why}); stopping: nothing more starts"
        ));
        self.root_cause
            .get_or_insert_with(|| format!("cannot write the journal: {why}"));
        self.journal_error = Some(why);
        self.halted = true;
        let _ = self.stop.send(true);
        let _ = self.cancel.send(true);
    }

    /// A step's log could not be written for want of space: as when the
    /// journal cannot be written, nothing more starts, running steps are
    /// stopped, and the run is left unfinished; its resume runs the step
    /// again once space is freed. Not a failure of the step.
    fn disk_full(&mut self, step: &str, why: &str) {
        if self.halted {
            return;
        }
        self.disk_full = Some(format!("`{step}`: {why}"));
        // The cause, without the step's last words (the summary shows them).
        let first = why.lines().next().unwrap_or(why);
        let first = first.strip_suffix("; its last words:").unwrap_or(first);
        self.shared
            .keeper
            .progress
            .note(&format!("{first}; stopping: nothing more starts"));
        self.root_cause.get_or_insert_with(|| first.to_owned());
        self.halted = true;
        let _ = self.stop.send(true);
        let _ = self.cancel.send(true);
    }

    fn abort(&mut self, cause: String) {
        if self.root_cause.is_none() {
            self.own_cause = Some(cause.clone());
        }
        self.root_cause.get_or_insert(cause);
        self.aborted = true;
        let _ = self.stop.send(true);
    }

    /// Where a step's log is, as the report names it: in the run's one
    /// log, the command that prints it; else the file its kind keeps.
    fn log_of(&self, node: NodeIndex, log: &[Segment], attempts: u32) -> Option<String> {
        let id = &self.pipeline.graph[node].id;
        if !log.is_empty() {
            return Some(crate::report::run::log_label_in(
                id,
                &self.shared.run_dir,
                &self.shared.root,
            ));
        }
        if attempts == 0 {
            return None;
        }
        self.shared
            .kinds
            .get(self.pipeline.graph[node].kind)?
            .log(&self.shared.run_dir.step(id))
            .map(|p| p.display().to_string())
    }

    /// Records how a step ended: report, journal, progress, scheduling.
    fn finish(&mut self, finished: Finished) {
        let node = finished.node;
        if let Some(key) = finished.reuse_key {
            let id = &self.pipeline.graph[node].id;
            // The digest is the key's; a step without one has none to add.
            if let Some(digest) = &finished.key {
                self.last_fingerprint.add(id, digest);
            }
            self.last_keys.insert(id.clone(), key);
        }
        self.outputs[node.index()].clone_from(&finished.outputs);
        let log = self.log_of(node, &finished.log, finished.attempts);
        let report = &mut self.reports[node.index()];
        report.log = log;
        report.state = finished.state;
        report.key = finished.key;
        report.exit_code = finished.exit_code;
        report.message = finished
            .message
            .map(|m| self.shared.keeper.progress.redactor().redact(&m));
        if super::outcome::leaves_run_open(finished.state) {
            // What the person must know and do, whatever the kind said.
            let said = report.message.take().unwrap_or_default();
            report.message = Some(if said.is_empty() {
                super::outcome::UNCERTAIN_HINT.to_owned()
            } else {
                format!("{said}; {}", super::outcome::UNCERTAIN_HINT)
            });
        }
        report.attempts = finished.attempts;
        report.duration_ms = finished.duration_ms;
        // After a fail-fast abort the run ends failed, not resumable: a step
        // it kept from starting is skipped, one it interrupted is over, and
        // either way the `always` steps after it may now run.
        let abort_only = self.aborted && !self.cancelled.is_set() && !self.halted;
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
            outputs: finished.outputs,
            duration_ms: report.duration_ms,
            exit_code: report.exit_code,
            message: report.message.clone(),
            log: finished.log,
        };
        self.shared.keeper.progress.step_finished(report);
        let failure = (finished.state == StepState::Failed).then(|| {
            format!(
                "step `{}` failed: {}",
                report.id,
                report.message.clone().unwrap_or_default()
            )
        });
        let open = super::outcome::leaves_run_open(finished.state).then(|| {
            format!(
                "step `{}` never heard back: {}",
                report.id,
                report.message.clone().unwrap_or_default()
            )
        });
        let halt = super::outcome::halts_run(finished.state).then(|| {
            format!(
                "step `{}` stopped the run ({}): {}",
                report.id,
                finished.state.word(),
                report.message.clone().unwrap_or_default()
            )
        });
        if let Err(e) = self.shared.keeper.journal.append(&event) {
            self.journal_failed(e);
        }
        if let Some(why) = finished.no_space {
            let id = self.pipeline.graph[node].id.clone();
            self.disk_full(&id, &why);
        }
        if let Some(failure) = failure {
            self.root_cause.get_or_insert(failure);
            if self.fail_fast && !self.aborted {
                self.aborted = true;
                let _ = self.stop.send(true);
                self.shared
                    .keeper
                    .progress
                    .note("--fail-fast: a step failed; stopping the rest");
            }
        }
        if let Some(halt) = halt {
            self.root_cause.get_or_insert(halt);
            self.halted = true;
            // Not `cancel`: the `always` steps whose needs are done still
            // run (a `finish` settles the job that exists); a signal is
            // what stops them.
            let _ = self.stop.send(true);
        }
        if let Some(open) = open {
            self.root_cause.get_or_insert(open);
        }
        let settled = abort_only && finished.state == StepState::Interrupted;
        self.schedule.finish(node, finished.state, settled);
    }

    /// Before a round of starting steps: a failed journal stops the run,
    /// skipped steps are recorded, and with no step running (`idle`)
    /// nothing but gameplan's own restores writes into the tree, so a set
    /// of inputs is hashed once until a step starts.
    fn round_begins(&mut self, journal: &JournalWriter, idle: bool) {
        if let Some(why) = journal.failure() {
            self.journal_failed(why);
        }
        self.record_skips();
        lock_hashes(&self.shared.keeper).stand_still(idle);
    }

    /// Journals and reports the steps the schedule skipped since the last call.
    fn record_skips(&mut self) {
        for node in std::mem::take(&mut self.schedule.skipped) {
            // Skipped for a need that did not succeed, or never started
            // because a fail-fast abort came first.
            let needs = self.pipeline.needs(node);
            let blocked = needs
                .iter()
                .any(|need| !self.schedule.satisfies_needs(*need));
            let not_run = self.not_run_because(&needs);
            let report = &mut self.reports[node.index()];
            if report.state == StepState::Skipped {
                continue;
            }
            report.state = StepState::Skipped;
            report.message = Some(if let Some(why) = not_run {
                why
            } else if blocked {
                "a step it needs did not succeed".into()
            } else if self.fail_fast {
                "not started: --fail-fast stopped the run at a failure".into()
            } else {
                // An abort without --fail-fast (an internal error): never
                // blame a flag nobody gave (issue 8, item 13).
                format!(
                    "not started: the run stopped early ({})",
                    self.root_cause
                        .as_deref()
                        .unwrap_or("see the run's root cause")
                )
            });
            let _ = self.shared.keeper.journal.append(&Event::StepFinished {
                step: report.id.clone(),
                state: StepState::Skipped,
                attempt: 0,
                key: None,
                outputs: None,
                duration_ms: 0,
                exit_code: None,
                message: report.message.clone(),
                log: Vec::new(),
            });
            self.shared.keeper.progress.step_finished(report);
        }
    }

    /// Why a step whose `needs` stopped it was not run, when an incomplete
    /// step stopped it (directly, or through steps it stopped) and no need
    /// failed: ``not run: `b` was incomplete``. A gate that could not judge
    /// everything stops the gates after it this way.
    fn not_run_because(&self, needs: &[NodeIndex]) -> Option<String> {
        let state = |need: &NodeIndex| self.schedule.states[need.index()];
        // A gate that judged FIX FIRST failed, and the gates after it were
        // not run (not "did not succeed"): their lenses judged nothing.
        if let Some(gate) = needs.iter().find(|n| {
            state(n) == StepState::Failed
                && self
                    .shared
                    .kinds
                    .get(self.pipeline.graph[**n].kind)
                    .is_some_and(crate::steps::Kind::judges)
        }) {
            return Some(format!(
                "{}`{}` did not pass",
                crate::report::run::NOT_RUN,
                self.pipeline.graph[*gate].id
            ));
        }
        if needs.iter().any(|n| state(n) == StepState::Failed) {
            return None;
        }
        if let Some(need) = needs
            .iter()
            .find(|n| state(n) == StepState::Incomplete && !self.schedule.satisfies_needs(**n))
        {
            return Some(format!(
                "{}`{}` was incomplete",
                crate::report::run::NOT_RUN,
                self.pipeline.graph[*need].id
            ));
        }
        needs.iter().find_map(|need| {
            let report = &self.reports[need.index()];
            (report.state == StepState::Skipped)
                .then_some(report.message.as_deref())
                .flatten()
                .filter(|m| m.starts_with(crate::report::run::NOT_RUN))
                .map(str::to_owned)
        })
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

/// The run's result store. Damaged index records are misses; the user is
/// told once, before any step.
fn open_store(store: Store, progress: &Progress) -> Store {
    // Held for the run: no gc deletes a blob this run may restore. A store
    // that cannot be opened for writing still serves lookups.
    let _ = store.hold();
    for warning in store.warnings() {
        progress.note(&warning);
    }
    store
}

/// The store a kind keeps unit verdicts in; under `--no-reuse` it reads as
/// empty (every unit is judged again) and still stores what was judged.
fn unit_store(state_dir: &Path, no_reuse: bool) -> crate::reuse::UnitStore {
    crate::reuse::UnitStore::open(state_dir).reading(!no_reuse)
}

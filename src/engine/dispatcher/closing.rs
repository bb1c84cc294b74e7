//! How a run ends: its findings judged, its end journaled (or the run
//! left open for a resume), its report, summary and `JUnit` cases built,
//! and what the next runs reuse kept, on a thread of its own.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::{Run, Shared};
use crate::engine::attempts::elapsed_ms;
use crate::engine::journal_writer::JournalWriter;
use crate::engine::outcome::code_of;
use crate::engine::signals::Cancelled;
use crate::engine::{RunReport, StepReport, now};
use crate::graph::Pipeline;
use crate::journal::run::{Event, RunDir, RunOutcome, StepState};
use crate::reuse::{KeysFingerprint, ReuseKey};
use crate::steps::Kinds;
use petgraph::graph::NodeIndex;

/// What one leg of a run (its start or a resume) brings to its close.
pub(super) struct Leg {
    pub(super) started: Instant,
    pub(super) resumed: bool,
    pub(super) resume_hint: String,
}

/// Closes the run: judges its findings, journals its end (or leaves it open
/// for a resume), and builds its report.
pub(super) fn close(
    mut run: Run,
    journal: &JournalWriter,
    cancelled: &Cancelled,
    fail_on: &[crate::plan::model::FailOn],
    baseline: Option<&crate::report::baseline::Baseline>,
    leg: Leg,
) -> RunReport {
    let Leg {
        started,
        resumed,
        resume_hint,
    } = leg;
    let shared = run.shared.clone();
    let pipeline = Arc::clone(&run.pipeline);
    let run_dir = shared.run_dir.clone();
    let run_id = shared.run_id.clone();
    journal.check_linked();
    if let Some(why) = journal.failure() {
        run.journal_failed(why);
    }
    let interrupted = cancelled.is_set();
    // A step whose request's answer never came keeps the run open: what
    // needs it waits for the resume, which sends the request again.
    let open = run
        .reports
        .iter()
        .any(|r| crate::engine::outcome::leaves_run_open(r.state));
    if !interrupted && !run.halted && !open {
        run.skip_unstarted();
    }
    // What the playing steps found, judged before the run's end is
    // journaled: a finding that matches `fail_on` is the run's exit code.
    let steps: Vec<StepReport> = pipeline
        .order
        .iter()
        .map(|i| run.reports[i.index()].clone())
        .collect();
    let playtest = playtest_of(&pipeline, &shared.kinds, &run_dir, &steps, baseline);
    let verdict = crate::engine::outcome::judge_findings(
        playtest.as_ref(),
        judged(&pipeline, &shared.kinds, &run.reports),
        fail_on,
        &shared.plan.fail_on,
    );
    let (outcome, code) = crate::engine::outcome::run_outcome(
        run.reports.iter().map(|r| r.state),
        interrupted,
        run.aborted,
        verdict.failed(),
    );
    let stays_open = interrupted || run.halted || open;
    let keeping = Keeping::start(
        &shared,
        std::mem::take(&mut run.last_keys),
        std::mem::take(&mut run.last_fingerprint),
    );
    journal_end(
        &mut run,
        journal,
        stays_open,
        interrupted,
        (outcome, code),
        started,
    );
    // A run that could not journal its end did not succeed, whatever its
    // steps did: say so in the exit code too (issue 8, items 13 and 14).
    let (outcome, code) = if run.journal_error.is_some()
        && matches!(outcome, RunOutcome::Succeeded | RunOutcome::Incomplete)
    {
        (RunOutcome::Failed, code_of(RunOutcome::Failed))
    } else {
        (outcome, code)
    };
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for r in &run.reports {
        *counts.entry(r.state.word().to_owned()).or_default() += 1;
    }
    // A run whose journal is gone has nothing to resume from.
    let resumable = !journal.is_unlinked()
        && (interrupted || run.halted || open || run.journal_error.is_some());
    let root_causes = root_causes(&pipeline, &run.reports);
    let root_cause = root_cause(&run, &root_causes, open);
    let sections = summary_sections(&pipeline, &shared.kinds, &run.reports, &run_dir);
    let junit = junit_cases(&pipeline, &shared.kinds, &run.reports, &run_dir);
    let mut report = RunReport {
        run_id,
        plan: shared.plan.name.clone(),
        outcome,
        exit_code: code,
        resumed,
        duration_ms: elapsed_ms(started),
        counts,
        root_cause,
        root_causes,
        steps,
        resume_command: resumable.then_some(resume_hint),
        journal_error: run.journal_error.take(),
        disk_full: run.disk_full.take(),
        playtest,
        fail_on: verdict.fail_on,
        // An unfinished run's gates may still run on its resume.
        unjudged_findings: verdict.unjudged.filter(|_| !resumable),
        template: None,
        page_warning: None,
        sections,
        junit,
    };
    write_page(&mut report, &shared);
    if !resumable && run_dir.journal().exists() {
        let summary = serde_json::to_vec_pretty(&report).unwrap_or_default();
        let _ = crate::journal::atomic_write(&run_dir.summary(), &summary);
    }
    keeping.wait();
    free(run, shared, pipeline);
    report
}

/// Writes the page a reviewer opens, an unfinished run's too (it says so),
/// in the plan's own template when it has one. Best effort: a page that
/// cannot be written costs no run. Before the summary, which keeps the
/// template and why it was not used.
fn write_page(report: &mut RunReport, shared: &Shared) {
    report.template = shared
        .plan
        .report
        .as_ref()
        .and_then(|r| r.template.as_ref())
        .map(|t| shared.root.join(t).display().to_string());
    if shared.run_dir.journal().exists() {
        report.page_warning = crate::report::html::write(report, &shared.run_dir.dir)
            .ok()
            .flatten();
    }
}

/// What a run keeps for the next runs at its end: the hash cache, its
/// steps' keys and the store entries it used. Written on a thread of its
/// own while the run's end is journaled and its report made and written
/// (a fully reused 1,000-step run spends ~2 ms of CPU on the keys alone),
/// and waited for before the run returns.
pub(super) struct Keeping(Option<std::thread::JoinHandle<()>>);

impl Keeping {
    fn start(
        shared: &Shared,
        last_keys: BTreeMap<String, ReuseKey>,
        fingerprint: KeysFingerprint,
    ) -> Keeping {
        let hashes = Arc::clone(&shared.keeper.hashes);
        let store = shared.keeper.store.clone();
        let plan = shared.plan.name.clone();
        let keep = move || {
            let _ = hashes
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .save();
            // Best effort, both: a failure costs a re-run or a worse "why".
            let _ = store.finish_run(&plan, &last_keys, &fingerprint);
        };
        let (keep, spawned) = shared_once(keep);
        let thread = std::thread::Builder::new()
            .name("keep-run-state".into())
            .spawn(spawned)
            .ok();
        if thread.is_none() {
            // No thread: kept here and now, as it always was.
            keep();
        }
        Keeping(thread)
    }

    fn wait(self) {
        if let Some(handle) = self.0 {
            let _ = handle.join();
        }
    }
}

/// `f` as two callables of which only the first one called runs it: one for
/// a thread, the other to run it here when no thread can be started.
pub(super) fn shared_once(
    f: impl FnOnce() + Send + 'static,
) -> (impl FnOnce(), impl FnOnce() + Send + 'static) {
    fn run<F: FnOnce()>(cell: &Mutex<Option<F>>) {
        let f = cell
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(f) = f {
            f();
        }
    }
    let cell = Arc::new(Mutex::new(Some(f)));
    let here = Arc::clone(&cell);
    (move || run(&here), move || run(&cell))
}

/// Frees a closed run: what only takes memory on a thread of its own (see
/// [`drop_elsewhere`]); what holds a lock, a file or a process here, in
/// order, as before.
pub(super) fn free(mut run: Run, shared: Shared, pipeline: Arc<Pipeline>) {
    let index = shared.keeper.store.release();
    let keys = std::mem::take(&mut run.last_keys);
    let reports = std::mem::take(&mut run.reports);
    let plan = Arc::clone(&shared.plan);
    drop(run);
    drop(shared);
    drop_elsewhere((index, keys, reports, pipeline, plan));
}

/// Frees `state` on a thread of its own: a big run's data (a key per step,
/// the pipeline, the store's index) takes milliseconds to free that no one
/// needs to wait for, least of all a fully reused run that is otherwise
/// done. Only for plain data: nothing that holds a lock, a file or a process.
pub(super) fn drop_elsewhere<T: Send + 'static>(state: T) {
    // Without a thread it is freed here, as it would have been.
    let _ = std::thread::Builder::new()
        .name("free-run-state".into())
        .spawn(move || drop(state));
}

/// Journals how this leg of the run ended: stopped (`stays_open`: it is
/// left for a resume) or finished with its outcome. A journal that failed
/// takes no closing record: the run stays unfinished on disk, and a resume
/// continues it once space is back.
pub(super) fn journal_end(
    run: &mut Run,
    journal: &JournalWriter,
    stays_open: bool,
    interrupted: bool,
    (outcome, code): (RunOutcome, u8),
    started: Instant,
) {
    let closing = if stays_open {
        Event::RunStopped {
            at: now(),
            reason: if interrupted {
                "stopped by a signal or `plan stop`".into()
            } else {
                run.root_cause.clone().unwrap_or_default()
            },
            duration_ms: Some(elapsed_ms(started)),
        }
    } else {
        Event::RunFinished {
            at: now(),
            outcome,
            exit_code: code,
            duration_ms: Some(elapsed_ms(started)),
        }
    };
    if run.journal_error.is_none() {
        let closed = journal.append(&closing).and_then(|_| journal.commit_now());
        if let Err(why) = closed {
            run.journal_failed(why);
        }
    }
}

/// The run's root cause in a line. A failure is named for the first root
/// cause in plan order, not for whichever branch happened to fail first;
/// the whole message is the step's own (`steps[].message`), said once. A
/// halt, an open request or gameplan's own trouble is what the run
/// recorded as it happened.
pub(super) fn root_cause(run: &Run, root_causes: &[String], open: bool) -> Option<String> {
    match root_causes.first() {
        Some(id) if !run.halted && !open && run.own_cause.is_none() => {
            run.pipeline.find(id).map(|node| {
                let step = &run.reports[node.index()];
                format!(
                    "step `{id}` failed: {}",
                    crate::report::run::headline(
                        step.message.as_deref().unwrap_or_default(),
                        step.log.as_deref()
                    )
                )
            })
        }
        _ => run.root_cause.clone(),
    }
}

/// The failed steps no other failure explains: none of the steps they need,
/// directly or through others, failed (only an `always` step runs after a
/// failed need, and its failure may well follow from that one).
pub(super) fn root_causes(pipeline: &Pipeline, reports: &[StepReport]) -> Vec<String> {
    let failed = |node: NodeIndex| reports[node.index()].state == StepState::Failed;
    let mut failed_above = vec![false; reports.len()];
    // `order` is topological: a step's needs are settled before it.
    for &node in &pipeline.order {
        failed_above[node.index()] = pipeline
            .needs(node)
            .into_iter()
            .any(|need| failed(need) || failed_above[need.index()]);
    }
    pipeline
        .order
        .iter()
        .filter(|&&node| failed(node) && !failed_above[node.index()])
        .map(|&node| reports[node.index()].id.clone())
        .collect()
}

/// What the kinds of the steps that succeeded, were reused, or ended with
/// results of their own (a gate FIX FIRST failed with its verdicts) add to
/// the summary ([`crate::steps::Kind::summary`]), in plan order.
pub(super) fn summary_sections(
    pipeline: &Pipeline,
    kinds: &Kinds,
    reports: &[StepReport],
    run_dir: &RunDir,
) -> Vec<crate::report::run::SummarySection> {
    pipeline
        .order
        .iter()
        .filter(|&&node| {
            let state = reports[node.index()].state;
            state.has_results() || state == StepState::Failed
        })
        .filter_map(|&node| {
            let id = &pipeline.graph[node].id;
            let kind = kinds.get(pipeline.graph[node].kind)?;
            let mut section = kind.summary(&run_dir.step(id))?;
            section.step.clone_from(id);
            Some(section)
        })
        .collect()
}

/// The `JUnit` cases the kinds of the steps that ran or were reused hand
/// over ([`crate::steps::Kind::junit_cases`]), in plan order; a step that
/// did not run in this run (skipped, pending) has none.
pub(super) fn junit_cases(
    pipeline: &Pipeline,
    kinds: &Kinds,
    reports: &[StepReport],
    run_dir: &RunDir,
) -> Vec<crate::report::run::KindCases> {
    pipeline
        .order
        .iter()
        .filter(|&&node| {
            !matches!(
                reports[node.index()].state,
                StepState::Skipped | StepState::Pending | StepState::Running
            )
        })
        .filter_map(|&node| {
            let instance = &pipeline.graph[node];
            let cases = kinds
                .get(instance.kind)?
                .junit_cases(&run_dir.step(&instance.id));
            (!cases.is_empty()).then(|| crate::report::run::KindCases {
                step: instance.id.clone(),
                kind: reports[node.index()].kind.clone(),
                cases,
            })
        })
        .collect()
}

/// The run's playtest, its findings labelled against the baseline when
/// the run has one (a plan without an aggregate step gets its labels here).
fn playtest_of(
    pipeline: &Pipeline,
    kinds: &Kinds,
    run_dir: &RunDir,
    steps: &[StepReport],
    baseline: Option<&crate::report::baseline::Baseline>,
) -> Option<crate::report::playtest::Playtest> {
    let parts = playtest_parts(pipeline, kinds, run_dir);
    let mut playtest = crate::report::playtest::collect(steps, &parts);
    if let (Some(playtest), Some(baseline)) = (playtest.as_mut(), baseline) {
        playtest.compare(baseline);
    }
    playtest
}

/// What each step's kind adds to the run's playtest
/// ([`crate::steps::Kind::playtest`]), by step id in plan order.
pub(super) fn playtest_parts(
    pipeline: &Pipeline,
    kinds: &Kinds,
    run_dir: &RunDir,
) -> Vec<(String, crate::steps::PlaytestPart)> {
    pipeline
        .order
        .iter()
        .filter_map(|&node| {
            let id = &pipeline.graph[node].id;
            let part = kinds
                .get(pipeline.graph[node].kind)?
                .playtest(&run_dir.step(id))?;
            Some((id.clone(), part))
        })
        .collect()
}

/// Whether a step of a judging kind (a gate) judged the run's findings.
pub(super) fn judged(pipeline: &Pipeline, kinds: &Kinds, reports: &[StepReport]) -> bool {
    pipeline.order.iter().any(|i| {
        kinds
            .get(pipeline.graph[*i].kind)
            .is_some_and(crate::steps::Kind::judges)
            && crate::engine::outcome::judged(reports[i.index()].state)
    })
}

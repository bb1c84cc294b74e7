//! How a run starts: its backend opened (before anything is journaled, so
//! a refused token leaves nothing behind), its journal opened or read back
//! for a resume, and a resume's recorded options and part of the plan
//! carried over.

use crate::backend::Connection;
use crate::engine::{RunRequest, Start, StartError, now};
use crate::graph::Pipeline;
use crate::journal::Journal;
use crate::journal::run::{
    EVENTS_VERSION, Event, PlannedStep, RecordedOptions, RunDir, RunHistory,
};

/// The plan's backend, opened when a step of the run is of a kind that uses
/// it ([`crate::steps::Kind::uses_backend`]); a free plan opens none (and
/// creates no ledger).
pub(super) fn connect(request: &RunRequest) -> Result<Option<Connection>, StartError> {
    let pipeline = &request.pipeline;
    // A step given from elsewhere does not run here, so it opens nothing
    // (a shard given its plan's job reaches no backend).
    let given = |id: &str| request.options.given.iter().any(|g| g.step == id);
    let uses = pipeline.order.iter().any(|&node| {
        let instance = pipeline.instance(node);
        !given(&instance.id)
            && request
                .kinds
                .get(instance.kind)
                .is_some_and(crate::steps::Kind::uses_backend)
    });
    if !uses {
        return Ok(None);
    }
    let config = &request.loaded.plan.backend;
    Connection::of_plan(config, &request.state_dir)
        .map(Some)
        .map_err(|e| StartError::Backend {
            kind: config.kind.name().to_owned(),
            message: e.message,
        })
}

/// Opens (or creates) the run's journal under the lock and reads what it
/// holds: the history a resume continues from is the one read here, never
/// one read before the lock was taken.
pub(super) fn open_journal(
    request: &RunRequest,
    run_dir: &RunDir,
) -> Result<(Journal, Option<RunHistory>), StartError> {
    let journal_error = |e: crate::journal::JournalError| StartError::Journal(e.to_string());
    let RunRequest {
        loaded,
        pipeline,
        plan_hash,
        options,
        start,
        ..
    } = request;
    match start {
        Start::New(run_id) => {
            let mut journal = Journal::create(&run_dir.journal()).map_err(journal_error)?;
            let plan_path = std::path::absolute(&loaded.source.path)
                .ok()
                .and_then(|p| {
                    p.strip_prefix(&loaded.root)
                        .ok()
                        .map(|r| r.display().to_string())
                })
                .unwrap_or_else(|| loaded.source.path.display().to_string());
            let first = journal.append_durable(&Event::RunStarted {
                events_version: EVENTS_VERSION,
                run_id: run_id.clone(),
                plan: loaded.plan.name.clone(),
                plan_hash: plan_hash.clone(),
                plan_path,
                vars: options.vars.clone(),
                started_at: now(),
                gameplan: env!("CARGO_PKG_VERSION").to_owned(),
                steps: planned_steps(pipeline),
                options: RecordedOptions {
                    no_reuse: options.no_reuse,
                    fail_fast: options.fail_fast,
                    dry_upload: options.dry_upload,
                    steps: options.steps.clone(),
                    reuse_only: options.reuse_only.clone(),
                    shard: options.shard.clone(),
                    bundle: options.bundle.clone(),
                    prepared: options.prepared.clone(),
                    partition: options.partition.clone(),
                    prepared_by: options.prepared_by.clone(),
                    prices_whole_plan: options.prices_whole_plan,
                    baseline: options
                        .baseline
                        .as_ref()
                        .and_then(|b| serde_json::to_value(b).ok()),
                    fail_on: options.fail_on.iter().map(|f| f.name()).collect(),
                },
            });
            if let Err(e) = first {
                // A journal without its first record is no run: leave
                // nothing for `plan runs` to list as unreadable (issue 8,
                // item 13).
                drop(journal);
                let _ = std::fs::remove_file(run_dir.journal());
                let _ = std::fs::remove_dir(&run_dir.dir);
                return Err(StartError::Journal(format!(
                    "cannot start run {run_id}: {}. Nothing was run or charged; free space (or mend the state directory) and run again",
                    crate::engine::journal_writer::plain_words(&e)
                )));
            }
            give(&mut journal, pipeline, &options.given).map_err(journal_error)?;
            Ok((journal, None))
        }
        Start::Resume(run_id) => {
            let path = run_dir.journal();
            let (mut journal, replay) = Journal::open::<Event>(&path).map_err(journal_error)?;
            let history =
                RunHistory::from_events(&path, replay.records, replay.torn_tail.is_some())
                    .map_err(|e| StartError::Journal(e.to_string()))?;
            if history.plan_hash != *plan_hash {
                return Err(StartError::Journal(format!(
                    "run {run_id} is of another version of this plan (plan hash {} → {plan_hash}); a resume would mix two plans. Nothing was run or charged; start a new run with `--new`",
                    history.plan_hash
                )));
            }
            if history.is_finished() {
                return Err(StartError::Journal(format!(
                    "run {run_id} finished while this command waited for it; nothing to resume. `gameplan plan status {run_id}` shows it"
                )));
            }
            journal
                .append_durable(&Event::RunResumed {
                    at: now(),
                    pid: std::process::id(),
                })
                .map_err(journal_error)?;
            Ok((journal, Some(history)))
        }
    }
}

/// A resume does what the run was started to do: its recorded options
/// (a flag given now can add to them, never take them away) and the part
/// of the plan it was started for.
pub(super) fn carry_over(
    history: Option<&RunHistory>,
    loaded: &crate::plan::LoadedPlan,
    mut pipeline: Pipeline,
    options: &mut crate::engine::RunOptions,
) -> Result<Pipeline, StartError> {
    let Some(history) = history else {
        return Ok(pipeline);
    };
    // A resume does what the run was started to do; a flag given now
    // can add to that, never take it away.
    options.no_reuse |= history.options.no_reuse;
    options.fail_fast |= history.options.fail_fast;
    options.dry_upload |= history.options.dry_upload;
    options.prices_whole_plan |= history.options.prices_whole_plan;
    options
        .reuse_only
        .extend(history.options.reuse_only.iter().cloned());
    // `--fail-on` given now judges this resume; without it, the run's.
    if options.fail_on.is_empty() {
        options.fail_on = history
            .options
            .fail_on
            .iter()
            .filter_map(|name| crate::plan::model::FailOn::parse(name).ok())
            .collect();
    }
    // A resume compares with the baseline the run started with: the
    // labels its aggregate and `new:` judge by must not change mid-run.
    let started: Option<crate::report::baseline::Baseline> = history
        .options
        .baseline
        .as_ref()
        .and_then(|b| serde_json::from_value(b.clone()).ok());
    match (&options.baseline, &started) {
        (Some(given), Some(started)) if given.digest != started.digest => {
            return Err(StartError::OtherBaseline {
                run_id: history.run_id.clone(),
                started: started.source.clone(),
                given: given.source.clone(),
            });
        }
        (None, Some(started)) => options.baseline = Some(started.clone()),
        _ => {}
    }
    // A resume runs the part of the plan the run was started for,
    // whatever part this command named.
    if history.options.steps != options.steps {
        let whole = crate::graph::expand_loaded(loaded)?;
        pipeline = crate::graph::select(whole, &history.options.steps)?;
        options.steps.clone_from(&history.options.steps);
    }
    Ok(pipeline)
}

/// Journals each given step of the pipeline as a finished attempt with its
/// records, right after the run's first record: a resume finds them done,
/// as if this run had run them.
fn give(
    journal: &mut Journal,
    pipeline: &Pipeline,
    given: &[crate::engine::Given],
) -> Result<(), crate::journal::JournalError> {
    for step in given.iter().filter(|g| pipeline.find(&g.step).is_some()) {
        journal.append_durable(&Event::StepStarted {
            step: step.step.clone(),
            attempt: 1,
            at: now(),
        })?;
        for data in &step.checkpoints {
            journal.append_durable(&Event::StepCheckpoint {
                step: step.step.clone(),
                attempt: 1,
                data: data.clone(),
            })?;
        }
        journal.append_durable(&Event::StepFinished {
            step: step.step.clone(),
            state: crate::journal::run::StepState::Succeeded,
            attempt: 1,
            key: None,
            outputs: None,
            duration_ms: 0,
            exit_code: None,
            message: Some(step.message.clone()),
            log: Vec::new(),
        })?;
    }
    Ok(())
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

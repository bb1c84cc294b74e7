//! `gameplan plan run PLAN` for a plan with an `[executor]`: its cells are
//! played as jobs elsewhere (each a batch, played by gameplan on a node
//! into a bundle), then the run goes on here as a merge does: every cell
//! reused from its bundle, never played here, and the rest of the plan
//! (aggregate, gates) run once.
//!
//! Run again after a kill, it re-attaches to the jobs it submitted
//! (`executor::coordinator`).
//!
//! A paid plan's money stays here: before any job goes, the job is priced
//! and bought as `--shard prepare` buys it (into the shared directory);
//! the jobs play for it free, buying nothing; the run here is given the
//! prepared records, delivers every cell and settles once. The prepared job
//! stays until that run settled it, so a gameplan killed anywhere before
//! then plays for the same job when run again, and never buys a second.

use std::path::PathBuf;
use std::time::Duration;

use super::context::{Context, LoadArgs, RunArgs};
use super::run::{self, Choice, Part};
use crate::engine;
use crate::executor::coordinator::{self, Collected, Halt, Work};
use crate::executor::{Executor, local::Local};
use crate::exit_code::{Done, Failure};
use crate::plan::LoadedPlan;
use crate::plan::model::{ExecutorKind, Player};
use crate::reuse::Store;
use crate::shard::{cells, merge};

pub fn run(
    cx: &Context,
    loaded: LoadedPlan,
    load: &LoadArgs,
    args: &RunArgs,
    steps: &[String],
    choice: Choice,
) -> Done {
    let Some(settings) = loaded.plan.executor.clone() else {
        // The callers come here for a plan with an `[executor]` only.
        return Err(Failure::plan(String::new()));
    };
    let whole =
        crate::graph::expand_loaded(&loaded).map_err(|e| Failure::plan(format!("error: {e}\n")))?;
    let paid = !super::prepare::buying_front(&whole).is_empty();
    let part =
        crate::graph::select(whole, steps).map_err(|e| Failure::plan(format!("error: {e}\n")))?;
    let executor = executor_of(&settings)?;
    let state_dir = engine::state_dir(&loaded.root, args.state_dir.as_deref());
    // Asked what the cells' kinds are (their pool, whether stored), never run.
    let kinds = run::kinds_to_ask(&loaded);
    let (cell_list, all_cells) = cells_to_send(cx, &loaded, &part, &kinds, &state_dir, args);
    let cap = pool_cap(&loaded, &part, &kinds);
    let hash = engine::plan_hash(&loaded);
    let shared = settings
        .shared_dir
        .as_ref()
        .map_or_else(|| state_dir.join("executor"), PathBuf::from);
    let plan_file = loaded
        .source
        .path
        .strip_prefix(&loaded.root)
        .unwrap_or(&loaded.source.path)
        .display()
        .to_string();
    let (loaded, prepared) = if paid {
        let dir = coordinator::jobs_dir(&shared, &hash).join("prepare");
        match bought(cx, loaded, load, args, choice, &dir) {
            Ok((loaded, prepared)) => (loaded, Some((prepared, dir))),
            Err(done) => return done,
        }
    } else {
        (loaded, None)
    };
    let work = Work {
        root: loaded.root.clone(),
        plan_file,
        plan_hash: hash.clone(),
        vars: load.vars.clone(),
        cells: cell_list.clone(),
        batch: settings.batch,
        shared_dir: coordinator::jobs_dir(&shared, &hash),
        exe: std::env::current_exe().unwrap_or_else(|_| PathBuf::from("gameplan")),
        state_dir: state_dir.clone(),
        // A local job's state is a file; a Ray job's, a request to the head.
        poll: Duration::from_millis(match settings.kind {
            ExecutorKind::Local => 200,
            ExecutorKind::Ray => 500,
        }),
        prepared: prepared.as_ref().map(|(_, dir)| dir.clone()),
        cap,
    };
    let collected = play_remote(cx, executor.as_ref(), &work)?;
    import(cx, &collected, &state_dir, all_cells.len())?;
    let part = Part {
        steps: steps.to_vec(),
        reuse_only: all_cells,
        given: prepared
            .as_ref()
            .map(|(p, _)| super::prepare::given_to_merge(p))
            .unwrap_or_default(),
        prepared_by: prepared.as_ref().map(|(p, _)| p.run_id.clone()),
        ..Part::default()
    };
    let ran = run::execute_chosen(cx, loaded, &state_dir, load, &part, args, choice);
    if let (Some((_, dir)), Ok(ran)) = (&prepared, &ran)
        && settled(ran)
    {
        // Settled: the next run of the plan buys a job of its own.
        let _ = std::fs::remove_file(dir.join(crate::shard::prepared::PREPARED_FILE));
    }
    run::finish(cx, args, ran)
}

/// Takes the cells that came back into the store, saying what came back.
fn import(cx: &Context, collected: &Collected, state_dir: &std::path::Path, all: usize) -> Done {
    for (cell, why) in &collected.missing {
        cx.console
            .err(&format!("cell `{cell}` has no result: {why}\n"));
    }
    let imported = merge::import(&collected.bundles, &Store::open(state_dir))
        .map_err(|e| Failure::failed(format!("error: {e}\n")))?;
    if collected.bundles.is_empty() && collected.missing.is_empty() {
        cx.console.err(&format!(
            "all {} are stored here: no job sent\n",
            crate::report::plural(all, "cell")
        ));
    } else {
        cx.console.err(&format!(
            "{} came back from {}; the rest of the plan runs here\n",
            crate::report::plural(imported, "cell"),
            crate::report::plural(collected.bundles.len(), "job")
        ));
    }
    Ok(())
}

/// The job this coordination plays for: the one prepared into `dir` by an
/// earlier gameplan of this plan that did not settle it, else one bought
/// now (the price asked here, before any job goes). `Err`: how the command
/// ends without one (a buying run that reused its front prepares none, and
/// ends as its run did).
fn bought(
    cx: &Context,
    loaded: LoadedPlan,
    load: &LoadArgs,
    args: &RunArgs,
    choice: Choice,
    dir: &std::path::Path,
) -> Result<(LoadedPlan, crate::shard::Prepared), Done> {
    let hash = engine::plan_hash(&loaded);
    let state_dir = engine::state_dir(&loaded.root, args.state_dir.as_deref());
    if let Ok(prepared) = crate::shard::Prepared::read(dir)
        && prepared.mismatch(&hash).is_none()
        && !taken_to_its_end(&state_dir, &prepared.run_id)
    {
        cx.console.err(&format!(
            "playing for the job prepared by run {} before (not settled yet); nothing is \
             bought again\n",
            prepared.run_id
        ));
        return Ok((loaded, prepared));
    }
    let path = loaded.source.path.clone();
    let (done, prepared) = super::prepare::buy(cx, loaded, load, args, choice, Some(dir));
    let Some(prepared) = prepared else {
        return Err(done);
    };
    if done.is_err() {
        return Err(done);
    }
    let loaded = cx.load(&path, load).map_err(Err)?;
    Ok((loaded, prepared))
}

/// Whether a finished run of this state directory was given the job that
/// the prepare run `prepare_run` bought (it delivered and settled it, even
/// when it finished through `plan resume`, which does not remove the
/// prepared file): then the next run buys a job of its own.
fn taken_to_its_end(state_dir: &std::path::Path, prepare_run: &str) -> bool {
    use crate::journal::run::{RunDir, RunHistory, run_ids};
    run_ids(state_dir).into_iter().rev().any(|id| {
        RunHistory::read(&RunDir::new(state_dir, &id).journal())
            .is_ok_and(|h| h.is_finished() && h.options.prepared_by.as_deref() == Some(prepare_run))
    })
}

/// Whether the run ended and settled its job: it was not stopped short,
/// and every `finish` step succeeded.
fn settled(ran: &run::Ran) -> bool {
    use crate::journal::run::{RunOutcome, StepState};
    let finish = crate::plan::model::StepKind::Finish.name();
    matches!(
        ran.report.outcome,
        RunOutcome::Succeeded | RunOutcome::Failed | RunOutcome::Incomplete
    ) && ran
        .report
        .steps
        .iter()
        .filter(|s| s.kind == finish)
        .all(|s| s.state == StepState::Succeeded)
}

/// The cells to send (each with whether it goes alone: an llm-played
/// cell), and every cell of the part: cells whose result is stored here
/// already are reused, not sent.
fn cells_to_send(
    cx: &Context,
    loaded: &LoadedPlan,
    part: &crate::graph::Pipeline,
    kinds: &crate::steps::Kinds,
    state_dir: &std::path::Path,
    args: &RunArgs,
) -> (Vec<(String, bool)>, Vec<String>) {
    let llm_persona = |slug: &str| {
        loaded
            .plan
            .persona(slug)
            .is_some_and(|p| matches!(p.player, Player::Llm { .. }))
    };
    let stored: Vec<String> = if args.no_reuse {
        Vec::new()
    } else {
        engine::preview::cells_ahead(loaded, part, state_dir, false, &cx.env, kinds)
            .into_iter()
            .filter(|c| c.reused)
            .map(|c| c.id)
            .collect()
    };
    let all_cells: Vec<String> = cells(part)
        .into_iter()
        .map(|n| part.instance(n).id.clone())
        .collect();
    let cell_list: Vec<(String, bool)> = cells(part)
        .into_iter()
        .filter(|&n| !stored.contains(&part.instance(n).id))
        .map(|n| {
            let instance = part.instance(n);
            let alone = instance.cell.persona.as_deref().is_some_and(llm_persona);
            (instance.id.clone(), alone)
        })
        .collect();
    (cell_list, all_cells)
}

/// The smallest `[pools]` size among the pools the part's cells take a
/// slot of (their step's `pool`, else their kind's: `play`, `browser`).
fn pool_cap(
    loaded: &LoadedPlan,
    part: &crate::graph::Pipeline,
    kinds: &crate::steps::Kinds,
) -> Option<u32> {
    cells(part)
        .into_iter()
        .filter_map(|n| {
            let instance = part.instance(n);
            let pool = part.steps[instance.step].pool.as_deref().or_else(|| {
                kinds
                    .get(instance.kind)
                    .and_then(|k| k.resource(&loaded.plan))
            })?;
            loaded.plan.pools.get(pool).copied()
        })
        .min()
}

/// Plays the cells through `executor`; `Err`: why not.
fn play_remote(cx: &Context, executor: &dyn Executor, work: &Work) -> Result<Collected, Failure> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::failed(format!("error: cannot start the scheduler: {e}\n")))?;
    let say = |text: &str| cx.console.err(text);
    let collected = match runtime.block_on(coordinator::play(executor, work, &say)) {
        Ok(collected) => collected,
        Err(Halt::Interrupted { stopped }) => {
            return Err(Failure::canceled(format!(
                "interrupted: {} stopped; nothing was charged. Run the same command again to \
                 submit them again (cells whose bundles are whole are not played again)\n",
                crate::report::plural(stopped, "job")
            )));
        }
        Err(Halt::Failed(message)) => {
            return Err(Failure::failed(format!(
                "error: the {} executor failed: {message}. Nothing was charged; run the same \
                 command again to re-attach to the jobs already submitted\n",
                executor.name()
            )));
        }
    };
    drop(runtime);
    Ok(collected)
}

/// The executor `[executor]` names; `Err`: why not (exit 3).
fn executor_of(settings: &crate::plan::model::Executor) -> Result<Box<dyn Executor>, Failure> {
    Ok(match settings.kind {
        ExecutorKind::Local => Box::new(Local),
        ExecutorKind::Ray => {
            let address = settings.address.clone().unwrap_or_default();
            match crate::executor::ray::Ray::new(&address) {
                Ok(ray) => Box::new(ray),
                Err(e) => {
                    return Err(Failure::plan(format!(
                        "error: [executor] address `{address}`: {e}; nothing was run or charged\n"
                    )));
                }
            }
        }
    })
}

//! A paid plan across shards: `plan run PLAN --shard prepare` buys the job
//! once, its shards play for it free, and `plan merge` delivers, publishes
//! and settles it once.
//!
//! - **Prepare** runs the plan's buying front (the money steps the cells
//!   need: `estimate`, `register`) with the price covering every cell of
//!   the plan, then writes what they journaled into `job.json`
//!   ([`crate::shard::Prepared`]).
//! - **A shard** is given those steps without their records: nothing is
//!   bought, the cells play as free cells do, and its bundle names the
//!   prepared run.
//! - **The merge** is given them with their records, as if its own run had
//!   bought the job: `deliver` moves each bought run through its states and
//!   uploads the cell's files, `aggregate` publishes, `finish` settles.
//!   Nothing is bought again, whatever is run again: a re-run shard never
//!   reaches the backend, and a second merge finds every run completed and
//!   the job settled (the backend answers with the same settlement).

use std::path::{Path, PathBuf};

use super::context::{Context, LoadArgs, RunArgs};
use super::run::{self, Choice, Part, Ran};
use crate::engine::{self, Given};
use crate::exit_code::{Done, Failure};
use crate::graph::Pipeline;
use crate::journal::run::{RunDir, RunHistory, StepState};
use crate::plan::LoadedPlan;
use crate::shard::prepared::{PREPARED_FORMAT, PreparedStep};
use crate::shard::{Prepared, PreparedRef, cells};
use crate::steps::money::{JOB, JobRecord};

/// The directory `--shard prepare` writes to and shards read, by default.
pub(super) fn default_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("shards").join("prepare")
}

/// The money steps the cells need, directly or not (`estimate`,
/// `register`), by instance id in plan order: what prepare runs and the
/// shards and the merge are given.
pub(super) fn buying_front(whole: &Pipeline) -> Vec<String> {
    let mut needed = std::collections::BTreeSet::new();
    let mut stack: Vec<_> = cells(whole)
        .into_iter()
        .flat_map(|n| whole.needs(n))
        .collect();
    while let Some(node) = stack.pop() {
        if needed.insert(node) {
            stack.extend(whole.needs(node));
        }
    }
    whole
        .order
        .iter()
        .filter(|n| needed.contains(n) && whole.instance(**n).kind.moves_money())
        .map(|&n| whole.instance(n).id.clone())
        .collect()
}

/// Runs the buying front and writes `job.json` into `bundle` (default:
/// [`default_dir`]): how the command ends, and the prepared job once written.
/// `plan run PLAN --shard prepare [--bundle DIR]` is this, ending as it ends.
pub(super) fn buy(
    cx: &Context,
    loaded: LoadedPlan,
    load: &LoadArgs,
    args: &RunArgs,
    choice: Choice,
    bundle: Option<&Path>,
) -> (Done, Option<Prepared>) {
    let whole = match crate::graph::expand_loaded(&loaded) {
        Ok(pipeline) => pipeline,
        Err(e) => return (Err(Failure::plan(format!("error: {e}\n"))), None),
    };
    let front = buying_front(&whole);
    if front.is_empty() {
        let refusal = Failure::plan(format!(
            "error: plan `{}` buys nothing before its cells play: `--shard prepare` buys a paid \
             plan's job for its shards, and this plan has none to buy. Nothing was run or \
             charged; run its shards directly with `--shard K/N`\n",
            loaded.plan.name
        ));
        return (Err(refusal), None);
    }
    let state_dir = engine::state_dir(&loaded.root, args.state_dir.as_deref());
    let dir = run::absolute(bundle.map_or_else(|| default_dir(&state_dir), Path::to_path_buf));
    cx.console.err(&format!(
        "preparing the job of every cell of plan `{}` ({}), into {}\n",
        loaded.plan.name,
        crate::report::plural(cells(&whole).len(), "cell"),
        dir.display()
    ));
    let part = Part {
        steps: front,
        shard: Some(("prepare".to_owned(), dir.clone())),
        prices_whole_plan: true,
        ..Part::default()
    };
    let ran = run::execute_chosen(cx, loaded, &state_dir, load, &part, args, choice);
    written(cx, args, ran, &dir, &part.steps)
}

/// After the prepare run (or its resume): writes `job.json` when every
/// step of the front succeeded, then prints the run's report. How the
/// command ends, and the prepared job once written.
pub(super) fn written(
    cx: &Context,
    args: &RunArgs,
    ran: Result<Ran, Failure>,
    dir: &Path,
    front: &[String],
) -> (Done, Option<Prepared>) {
    let ran = match ran {
        Ok(ran) => ran,
        Err(failure) => return (Err(failure), None),
    };
    let done = front.iter().all(|id| {
        ran.report
            .steps
            .iter()
            .any(|s| s.id == *id && s.state == StepState::Succeeded)
    });
    let prepared = if done {
        Some(prepared_of(&ran, front))
    } else {
        None
    };
    let ended = run::finish(cx, args, Ok(ran));
    match prepared {
        None => {
            cx.console.err(
                "no job was prepared: the shards have nothing to play for until \
                 `--shard prepare` succeeds\n",
            );
            (ended, None)
        }
        Some(Err(message)) => {
            let why = format!("error: the prepared job was not written: {message}\n");
            (Err(Failure::after(ended, &why)), None)
        }
        Some(Ok(prepared)) => match prepared.write(dir) {
            Ok(path) => {
                let job = match &prepared.job {
                    Some(job) => format!(
                        "job {job} ({} for {})",
                        crate::report::ledger::dollars(prepared.price_cents),
                        crate::report::plural(prepared.cells.len(), "cell")
                    ),
                    None => "nothing to buy (every cell is reused)".to_owned(),
                };
                cx.console.err(&format!(
                    "prepared {job} in {}: run each shard with `--shard K/N --prepared {}`, \
                     then `gameplan plan merge PLAN {} BUNDLE...` delivers and settles it\n",
                    path.display(),
                    dir.display(),
                    dir.display()
                ));
                (ended, Some(prepared))
            }
            Err(e) => {
                let why = format!("error: the prepared job was not written: {e}\n");
                (Err(Failure::after(ended, &why)), None)
            }
        },
    }
}

/// What the prepare run journaled for each step of the front.
fn prepared_of(ran: &Ran, front: &[String]) -> Result<Prepared, String> {
    let report = &ran.report;
    let journal = RunDir::new(&ran.state_dir, &report.run_id).journal();
    let history = RunHistory::read(&journal).map_err(|e| e.to_string())?;
    let steps: Vec<PreparedStep> = front
        .iter()
        .map(|id| PreparedStep {
            id: id.clone(),
            checkpoints: history
                .checkpoints
                .get(id)
                .map(|c| c.iter().map(|c| c.data.clone()).collect())
                .unwrap_or_default(),
        })
        .collect();
    let job: Option<JobRecord> = steps
        .iter()
        .flat_map(|s| &s.checkpoints)
        .filter_map(|data| serde_json::from_value(data.get(JOB)?.clone()).ok())
        .next_back();
    Ok(Prepared {
        format: PREPARED_FORMAT,
        gameplan: env!("CARGO_PKG_VERSION").to_owned(),
        plan: history.plan.clone(),
        plan_hash: history.plan_hash.clone(),
        run_id: report.run_id.clone(),
        job: job.as_ref().map(|j| j.job.clone()),
        price_cents: job.as_ref().map_or(0, |j| j.price_cents),
        cells: job
            .map(|j| j.runs.into_iter().map(|r| r.cell).collect())
            .unwrap_or_default(),
        steps,
    })
}

/// A shard's prepared job and its directory: `None` for a plan that buys
/// nothing; `Err`: the refusal.
pub(super) fn for_shard(
    loaded: &LoadedPlan,
    whole: &Pipeline,
    state_dir: &Path,
    flag: Option<&Path>,
) -> Result<Option<(Prepared, PathBuf)>, Failure> {
    if buying_front(whole).is_empty() {
        return Ok(None);
    }
    let dir = run::absolute(flag.map_or_else(|| default_dir(state_dir), Path::to_path_buf));
    let prepared = read_for(loaded, &dir, "each shard")?;
    Ok(Some((prepared, dir)))
}

/// The merge's prepared job, from the prepare bundles among its bundles
/// (else the default directory): `None` for a plan that buys nothing;
/// `Err`: the refusal.
pub(super) fn for_merge(
    loaded: &LoadedPlan,
    whole: &Pipeline,
    state_dir: &Path,
    prepare_dirs: &[&PathBuf],
) -> Result<Option<Prepared>, Failure> {
    let refuse = |message: String| refused(&message);
    let paid = !buying_front(whole).is_empty();
    match (paid, prepare_dirs) {
        (false, []) => Ok(None),
        (false, [dir, ..]) => Err(refuse(format!(
            "{} holds a prepared job, and plan `{}` buys nothing before its cells play: leave \
             it out",
            dir.display(),
            loaded.plan.name
        ))),
        (true, [] | [_]) => {
            let dir = prepare_dirs
                .first()
                .map_or_else(|| default_dir(state_dir), |d| run::absolute((*d).clone()));
            read_for(loaded, &dir, "`plan merge`").map(Some)
        }
        (true, many) => Err(refuse(format!(
            "{} prepared jobs among the bundles ({}): a merge settles one job; name the one its \
             shards played for",
            many.len(),
            many.iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// Why nothing ran: exit 3, nothing run or charged.
pub(super) fn refused(message: &str) -> Failure {
    Failure::plan(format!("error: {message}. Nothing was run or charged\n"))
}

/// The prepared job in `dir` for this plan, or the refusal (exit 3).
fn read_for(loaded: &LoadedPlan, dir: &Path, what: &str) -> Result<Prepared, Failure> {
    let refuse = |why: String| {
        Failure::plan(format!(
            "error: plan `{}` moves money, so {what} plays for the job `--shard prepare` \
             bought: {why}. Nothing was run or charged\n",
            loaded.plan.name
        ))
    };
    let prepared = Prepared::read(dir).map_err(|e| refuse(e.to_string()))?;
    if let Some(why) = prepared.mismatch(&engine::plan_hash(loaded)) {
        return Err(refuse(why));
    }
    Ok(prepared)
}

/// The prepared steps as a shard is given them: done, with no records, so
/// its cells play free and it buys nothing.
pub(super) fn given_to_shard(prepared: &Prepared) -> Vec<Given> {
    let bought = prepared
        .job
        .as_ref()
        .map(|job| format!(", which bought job {job}"))
        .unwrap_or_default();
    given(
        prepared,
        false,
        &format!(
            "done by `--shard prepare` (run {}){bought}: this shard's cells play free, and \
             `plan merge` delivers them",
            prepared.run_id
        ),
    )
}

/// The prepared steps as the merge is given them: with the records they
/// journaled, so the steps below deliver to, publish to and settle the
/// job bought.
pub(super) fn given_to_merge(prepared: &Prepared) -> Vec<Given> {
    let message = format!(
        "done by `--shard prepare` (run {}); nothing is bought again",
        prepared.run_id
    );
    given(prepared, true, &message)
}

fn given(prepared: &Prepared, with_records: bool, message: &str) -> Vec<Given> {
    prepared
        .steps
        .iter()
        .map(|step| Given {
            step: step.id.clone(),
            checkpoints: if with_records {
                step.checkpoints.clone()
            } else {
                Vec::new()
            },
            message: message.to_owned(),
        })
        .collect()
}

/// Why a shard's bundle does not belong to `prepared`'s job.
pub(super) fn foreign(
    bundle: &Path,
    played: Option<&PreparedRef>,
    prepared: &Prepared,
) -> Option<String> {
    match played {
        Some(r) if r.run_id == prepared.run_id => None,
        Some(r) => Some(format!(
            "the bundle {} was played for the job prepared by run {}, not run {}: merge the \
             shards of one prepare",
            bundle.display(),
            r.run_id,
            prepared.run_id
        )),
        None => Some(format!(
            "the bundle {} was played without a prepared job: play it again with `--shard K/N \
             --prepared DIR`",
            bundle.display()
        )),
    }
}

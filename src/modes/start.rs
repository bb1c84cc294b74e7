//! `gameplan plan run PLAN` and `gameplan plan resume [RUN_ID]`: which
//! mode a run takes (here, or its cells as jobs elsewhere), and how a
//! resume finds the run and the mode it was in (a shard's, prepare's).

use std::path::Path;

use super::context::{Context, LoadArgs, RunArgs};
use super::run::{
    Choice, Part, execute, execute_chosen, finish, finished, kinds_to_ask, newest_unfinished,
    part_of, unset_secrets,
};
use crate::engine::{self, Start};
use crate::executor::coordinator;
use crate::exit_code::{self, Done, Failure};
use crate::journal::JournalError;
use crate::journal::run::{HistoryError, RunDir, RunHistory};
use crate::plan::LoadOptions;

pub fn run(
    cx: &Context,
    plan: &Path,
    steps: &[String],
    load: &LoadArgs,
    args: &RunArgs,
    choice: Choice,
) -> Done {
    let mut loaded = cx.load(plan, load)?;
    loaded.plan.executor = args.executor_of(&loaded.plan);
    if loaded.plan.executor.is_some() {
        return super::elsewhere::run(cx, loaded, load, args, steps, choice);
    }
    let state_dir = engine::state_dir(&loaded.root, args.state_dir.as_deref());
    let part = Part {
        steps: steps.to_vec(),
        ..Part::default()
    };
    let ran = execute_chosen(cx, loaded, &state_dir, load, &part, args, choice);
    finish(cx, args, ran)
}

pub fn resume(cx: &Context, run_id: Option<&str>, args: &RunArgs) -> Done {
    let cwd = std::env::current_dir().unwrap_or_else(|_| ".".into());
    let root = crate::plan::find_root(&cwd.join("plan.toml"));
    let state_dir = engine::state_dir(&root, args.state_dir.as_deref());
    let history = match run_id {
        Some(id) => {
            let dir = RunDir::new(&state_dir, id);
            RunHistory::read(&dir.journal()).map_err(|e| match e {
                HistoryError::Journal(JournalError::Missing { .. }) => e.to_string(),
                damaged => engine::damaged_run(&dir, id, &damaged).to_string(),
            })
        }
        None => match newest_unfinished(&state_dir) {
            // No run to resume, but jobs a killed gameplan was waiting for:
            // wait for them again, then run the rest.
            Err(_) if let Some((plan_file, vars)) = coordinator::unfinished(&state_dir) => {
                let load = LoadArgs { vars };
                let loaded = cx.load(&root.join(&plan_file), &load)?;
                cx.console.err(&format!(
                    "resuming the jobs of {plan_file}, played elsewhere\n"
                ));
                return super::elsewhere::run(cx, loaded, &load, args, &[], Choice::Resume);
            }
            found => found,
        },
    };
    let history = history.map_err(|message| Failure::plan(format!("error: {message}\n")))?;
    if let Some((outcome, code)) = history.finished.filter(|_| history.is_finished()) {
        cx.console.err(&format!(
            "run {} already finished ({outcome:?}); nothing to resume. `gameplan plan status {}` shows it\n",
            history.run_id, history.run_id
        ));
        // It ends as the run did.
        return exit_code::outcome(code);
    }
    let options = LoadOptions {
        env: cx.env.clone(),
        vars: history.vars.clone(),
        root: Some(root.clone()),
        defer_secrets: true,
        ..LoadOptions::default()
    };
    let plan_path = root.join(&history.plan_path);
    let loaded = crate::plan::load(&plan_path, &options).map_err(|f| cx.refusal(&f))?;
    // Before the plan hash: an unset secret changes the plan's values, and
    // "the plan changed" would hide that it is only unset.
    if let Some(part) = crate::graph::expand_loaded(&loaded)
        .ok()
        .and_then(|whole| crate::graph::select(whole, &history.options.steps).ok())
        && let Some(failure) = unset_secrets(&loaded, &part, &kinds_to_ask(&loaded), &|id| {
            finished(&history, id)
        })
    {
        return Err(cx.refusal(&failure));
    }
    let current = engine::plan_hash(&loaded);
    if current != history.plan_hash {
        return Err(Failure::plan(format!(
            "error: the plan {} changed since run {} started (plan hash {} → {current}); a resume would mix two plans. Nothing was run or charged; start a new run with `gameplan plan run {} --new`\n",
            history.plan_path, history.run_id, history.plan_hash, history.plan_path
        )));
    }
    let vars = history.vars.clone();
    let part = part_of(&history);
    let shard = part.shard.clone();
    let (plan_name, plan_hash) = (history.plan.clone(), history.plan_hash.clone());
    // The journal is read again under the lock (another process may have
    // resumed or finished it meanwhile); this read only found the plan.
    let ran = execute(cx, loaded, &state_dir, vars, &part, args, move |_| {
        Ok(Start::Resume(history.run_id))
    });
    match shard {
        Some((shard, dir)) if shard == "prepare" => {
            super::prepare::written(cx, args, ran, &dir, &part.steps).0
        }
        Some((shard, bundle)) => super::shard::bundle_written(
            cx,
            args,
            ran,
            &super::shard::Made {
                shard: &shard,
                bundle: &bundle,
                plan: &plan_name,
                plan_hash: &plan_hash,
                prepared: part.prepared.as_deref(),
                partition: part.partition.as_deref(),
            },
            &part.steps,
        ),
        None => finish(cx, args, ran),
    }
}

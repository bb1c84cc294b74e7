//! `gameplan plan run PLAN --shard K/N` and `gameplan plan merge PLAN
//! BUNDLE...`: one plan's cells played on several machines, then judged
//! once.
//!
//! A shard is an ordinary run of a part of the plan (its slice of the cells
//! and the free steps they need), followed by its bundle; a merge is an
//! ordinary run of the whole plan in which every cell must come from the
//! bundles (imported into the reuse store) and none is played. A plan that
//! moves money is sharded around one job bought first (`--shard prepare`,
//! in [`super::prepare`]).

use std::path::{Path, PathBuf};

use super::context::{Context, LoadArgs, RunArgs};
use super::run::{self, Choice, Part, Ran};
use crate::engine::{self, Start};
use crate::exit_code::{Done, Failure};
use crate::graph::Pipeline;
use crate::journal::run::StepState;
use crate::reuse::Store;
use crate::shard::bundle::{Played, UnplayedCell};
use crate::shard::{Bundle, Prepared, ShardSpec, cells, merge};

/// Which cells a bundle-writing run plays.
pub enum Pick {
    /// `--shard K/N`: a slice of every cell.
    Shard(ShardSpec),
    /// `STEP... --bundle DIR`: the cells these names select (a step id
    /// names all of its cells), as a cluster node plays a batch.
    Cells(Vec<String>),
}

/// Where a bundle-writing run writes, and the prepared job it plays for.
#[derive(Debug, Clone, Copy, Default)]
pub struct Dirs<'a> {
    /// `--bundle DIR`.
    pub bundle: Option<&'a Path>,
    /// `--prepared DIR` (a paid plan's shard).
    pub prepared: Option<&'a Path>,
    /// `--durations FILE`: slices cut by time.
    pub durations: Option<&'a Path>,
}

/// `plan run PLAN --shard K/N|prepare [--bundle DIR] [--prepared DIR]`, or
/// `plan run PLAN STEP... --bundle DIR`.
pub fn run(
    cx: &Context,
    plan: &Path,
    load: &LoadArgs,
    args: &RunArgs,
    choice: Choice,
    pick: Pick,
    dirs: Dirs<'_>,
) -> Done {
    let loaded = cx.load(plan, load)?;
    let (shard, pick_names) = match pick {
        Pick::Shard(ShardSpec::Slice(shard)) => (Some(shard), None),
        Pick::Cells(names) => (None, Some(names)),
        Pick::Shard(ShardSpec::Prepare) => {
            return super::prepare::buy(cx, loaded, load, args, choice, dirs.bundle).0;
        }
    };
    let whole =
        crate::graph::expand_loaded(&loaded).map_err(|e| Failure::plan(format!("error: {e}\n")))?;
    let all = cells(&whole).len();
    let state_dir = engine::state_dir(&loaded.root, args.state_dir.as_deref());
    // A paid plan's shard plays for the job prepare bought, and buys none.
    let prepared = super::prepare::for_shard(&loaded, &whole, &state_dir, dirs.prepared)?;
    let (slice, default_dir, shard, partition) =
        match chosen(whole, shard, pick_names, dirs.durations, &state_dir) {
            Ok(chosen) => chosen,
            Err(message) => {
                return Err(Failure::plan(format!("error: {message}\n")));
            }
        };
    let bundle = run::absolute(dirs.bundle.map_or(default_dir, Path::to_path_buf));
    let hash = engine::plan_hash(&loaded);
    if slice.is_empty() {
        // Nothing of this slice to play (more shards than cells): an empty
        // bundle, so the merge still gets one bundle per shard.
        let played = Played {
            plan: &loaded.plan.name,
            plan_hash: &hash,
            shard: shard.clone(),
            cells: Vec::new(),
            prepared: prepared.as_ref().map(|(p, _)| p.reference()),
            partition,
            durations: std::collections::BTreeMap::new(),
        };
        let note = format!("shard {shard} holds none of the plan's {all} cells");
        return empty_bundle(cx, &bundle, played, &state_dir, &note);
    }
    cx.console.err(&format!(
        "{}: {} of the plan's {all} cells, into {}\n",
        shown(&shard),
        slice.len(),
        bundle.display()
    ));
    let part = Part {
        steps: slice,
        shard: Some((shard.clone(), bundle.clone())),
        given: prepared
            .as_ref()
            .map(|(p, _)| super::prepare::given_to_shard(p))
            .unwrap_or_default(),
        prepared: prepared.map(|(_, dir)| dir),
        partition,
        ..Part::default()
    };
    let name = loaded.plan.name.clone();
    let ran = run::execute_chosen(cx, loaded, &state_dir, load, &part, args, choice);
    let made = Made {
        shard: &shard,
        bundle: &bundle,
        plan: &name,
        plan_hash: &hash,
        prepared: part.prepared.as_deref(),
        partition: part.partition.as_deref(),
    };
    bundle_written(cx, args, ran, &made, &part.steps)
}

/// The cells this run plays, its bundle's default directory, how it is
/// named, and the durations file's digest when cut by time.
fn chosen(
    whole: crate::graph::Pipeline,
    shard: Option<crate::shard::Shard>,
    names: Option<Vec<String>>,
    durations: Option<&Path>,
    state_dir: &Path,
) -> Result<(Vec<String>, PathBuf, String, Option<String>), String> {
    if let Some(shard) = shard {
        let (slice, partition) = sliced(&whole, shard, durations)
            .map_err(|e| format!("{e}. Nothing was run or charged"))?;
        let dir = state_dir.join("shards").join(shard.dir_name());
        return Ok((slice, dir, shard.to_string(), partition));
    }
    let slice = picked_cells(whole, &names.unwrap_or_default())?;
    let dir = state_dir.join("shards").join("cells");
    Ok((slice, dir, "cells".to_owned(), None))
}

/// The cells of `shard`, by a hash of each id, or by time from the
/// durations file (then with the file's digest, which the bundle records).
fn sliced(
    whole: &crate::graph::Pipeline,
    shard: crate::shard::Shard,
    durations: Option<&Path>,
) -> Result<(Vec<String>, Option<String>), String> {
    let ids: Vec<String> = cells(whole)
        .into_iter()
        .map(|n| whole.instance(n).id.clone())
        .collect();
    let Some(path) = durations else {
        return Ok((ids.into_iter().filter(|id| shard.holds(id)).collect(), None));
    };
    let (durations, digest) = crate::shard::durations::Durations::read(path)?;
    let slices = durations.slices(&ids, shard.n);
    let slice = ids
        .into_iter()
        .filter(|id| slices.get(id) == Some(&shard.k))
        .collect();
    Ok((slice, Some(digest)))
}

/// Writes how long each merged cell took to `<state dir>/shards/
/// durations.json`, over what it held, for the next shards' `--durations`.
fn keep_durations(cx: &Context, plan: &str, bundles: &[Bundle], state_dir: &Path) {
    use crate::shard::durations::{DURATIONS_FILE, Durations};
    let path = state_dir.join("shards").join(DURATIONS_FILE);
    let earlier = Durations::read(&path).ok().map(|(d, _)| d);
    let durations = merge::durations(plan, bundles, earlier);
    if durations.cells.is_empty() {
        return;
    }
    match durations.write(&path) {
        Ok(()) => cx.console.err(&format!(
            "kept how long {} took in {}: pass `--durations` that file to the next shards to \
             balance them by time\n",
            crate::report::plural(durations.cells.len(), "cell"),
            path.display()
        )),
        Err(e) => cx.console.err(&format!(
            "warning: the cells' durations were not kept: {e}\n"
        )),
    }
}

/// Writes the bundle of a shard with no cell to play.
fn empty_bundle(
    cx: &Context,
    bundle: &Path,
    played: Played<'_>,
    state_dir: &Path,
    note: &str,
) -> Done {
    match Bundle::write(bundle, played, &Store::open(state_dir)) {
        Ok(_) => {
            cx.console.err(&format!(
                "{note}; wrote an empty bundle to {}\n",
                bundle.display()
            ));
            Ok(())
        }
        Err(e) => Err(Failure::failed(format!("error: {e}\n"))),
    }
}

/// How a bundle's maker is named in what gameplan prints.
fn shown(shard: &str) -> String {
    if shard.contains('/') {
        format!("shard {shard}")
    } else {
        "the named cells".to_owned()
    }
}

/// The cells `names` select: a cell's id, or a step id for all its cells.
fn picked_cells(whole: Pipeline, names: &[String]) -> Result<Vec<String>, String> {
    let part = crate::graph::select(whole, names).map_err(|e| e.to_string())?;
    let picked: Vec<String> = cells(&part)
        .into_iter()
        .map(|n| part.instance(n))
        .filter(|i| {
            names
                .iter()
                .any(|n| *n == i.id || *n == part.steps[i.step].id)
        })
        .map(|i| i.id.clone())
        .collect();
    if picked.is_empty() {
        return Err(
            "`--bundle` holds cells, and none of the steps named is a cell (a play or simulate \
             instance): name cells such as `play[kid,jev]`, or use --shard K/N"
                .to_owned(),
        );
    }
    Ok(picked)
}

/// What a bundle names: who made it, where, for which plan and job.
pub(super) struct Made<'a> {
    pub shard: &'a str,
    pub bundle: &'a Path,
    pub plan: &'a str,
    pub plan_hash: &'a str,
    /// The prepared job's directory (a paid plan's shard).
    pub prepared: Option<&'a Path>,
    /// The durations file's digest, when the slice was cut by time.
    pub partition: Option<&'a str>,
}

/// After a shard's run (or its resume): writes its bundle, then prints the
/// run's report.
pub(super) fn bundle_written(
    cx: &Context,
    args: &RunArgs,
    ran: Result<Ran, Failure>,
    made: &Made<'_>,
    slice: &[String],
) -> Done {
    let Made {
        shard,
        bundle,
        plan,
        plan_hash,
        prepared,
        partition,
    } = *made;
    let ran = ran?;
    let cells = slice
        .iter()
        .map(|id| {
            let step = ran.report.steps.iter().find(|s| s.id == *id);
            let state = step.map_or(StepState::Pending, |s| s.state);
            let digest = step
                .filter(|s| matches!(s.state, StepState::Succeeded | StepState::Reused))
                .and_then(|s| s.key.clone());
            let unplayed = UnplayedCell {
                id: id.clone(),
                state: serde_json::to_value(state)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_else(|| format!("{state:?}").to_lowercase()),
                message: step.and_then(|s| s.message.clone()),
            };
            (id.clone(), digest, unplayed)
        })
        .collect();
    let played = Played {
        plan,
        plan_hash,
        shard: shard.to_owned(),
        cells,
        prepared: prepared
            .and_then(|dir| crate::shard::Prepared::read(dir).ok())
            .map(|p| p.reference()),
        partition: partition.map(str::to_owned),
        durations: ran
            .report
            .steps
            .iter()
            .filter(|s| slice.contains(&s.id) && s.state == StepState::Succeeded)
            .map(|s| (s.id.clone(), s.duration_ms))
            .collect(),
    };
    let written = Bundle::write(bundle, played, &Store::open(&ran.state_dir));
    let ended = run::finish(cx, args, Ok(ran));
    match written {
        Ok(written) => {
            let m = &written.manifest;
            let unplayed = if m.unplayed.is_empty() {
                String::new()
            } else {
                format!(
                    "; {} without a result: {}",
                    crate::report::plural(m.unplayed.len(), "cell"),
                    m.unplayed
                        .iter()
                        .map(|u| format!("{} ({})", u.id, u.state))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            };
            cx.console.err(&format!(
                "bundle of {}: {} in {}{unplayed}\n",
                shown(shard),
                crate::report::plural(m.cells.len(), "cell"),
                bundle.display()
            ));
            ended
        }
        Err(e) => Err(Failure::after(
            ended,
            &format!("error: the shard's bundle was not written: {e}\n"),
        )),
    }
}

/// `plan merge PLAN BUNDLE...`; a paid plan's prepare bundle may be among
/// the bundles (else it is read from `<state dir>/shards/prepare`).
pub fn merge(
    cx: &Context,
    plan: &Path,
    bundles: &[PathBuf],
    load: &LoadArgs,
    args: &RunArgs,
) -> Done {
    let loaded = cx.load(plan, load)?;
    let whole =
        crate::graph::expand_loaded(&loaded).map_err(|e| Failure::plan(format!("error: {e}\n")))?;
    let expected: Vec<String> = cells(&whole)
        .into_iter()
        .map(|n| whole.instance(n).id.clone())
        .collect();
    let state_dir = engine::state_dir(&loaded.root, args.state_dir.as_deref());
    let (prepare_dirs, cell_dirs): (Vec<&PathBuf>, Vec<&PathBuf>) =
        bundles.iter().partition(|dir| Prepared::is_in(dir));
    let prepared = super::prepare::for_merge(&loaded, &whole, &state_dir, &prepare_dirs)?;
    let refuse = |message: String| super::prepare::refused(&message);
    let mut read = Vec::with_capacity(cell_dirs.len());
    for dir in cell_dirs {
        match Bundle::read(dir) {
            Ok(bundle) => read.push(bundle),
            Err(e) => return Err(refuse(e.to_string())),
        }
    }
    let hash = engine::plan_hash(&loaded);
    if let Err(e) = merge::check(&read, &hash, &expected) {
        return Err(refuse(e.to_string()));
    }
    if let Some(prepared) = &prepared {
        let foreign = read
            .iter()
            .find_map(|b| super::prepare::foreign(&b.dir, b.manifest.prepared.as_ref(), prepared));
        if let Some(why) = foreign {
            return Err(refuse(why));
        }
    }
    let imported = merge::import(&read, &Store::open(&state_dir))
        .map_err(|e| Failure::failed(format!("error: {e}. Nothing was run or charged\n")))?;
    keep_durations(cx, &loaded.plan.name, &read, &state_dir);
    cx.console.err(&format!(
        "merging {} from {}{}\n",
        crate::report::plural(imported, "cell"),
        crate::report::plural(read.len(), "bundle"),
        prepared
            .as_ref()
            .and_then(|p| p.job.as_ref())
            .map(|job| format!(", for job {job}"))
            .unwrap_or_default()
    ));
    let part = Part {
        reuse_only: expected,
        given: prepared
            .as_ref()
            .map(super::prepare::given_to_merge)
            .unwrap_or_default(),
        prepared_by: prepared.as_ref().map(|p| p.run_id.clone()),
        ..Part::default()
    };
    let ran = run::execute(
        cx,
        loaded,
        &state_dir,
        load.vars.clone(),
        &part,
        args,
        |_| Ok(Start::New(engine::new_run_id())),
    );
    run::finish(cx, args, ran)
}

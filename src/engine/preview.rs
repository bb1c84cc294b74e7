//! What a run would do, without running: `plan explain`'s run / reused
//! decisions and the reasons a step that ran before will run again.
//!
//! Keys come from the same [`KeyMaker`] the run uses. A step whose key
//! depends on the output of a step that will run first cannot be decided
//! ahead: it is shown as running, with why.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;

use crate::graph::Pipeline;
use crate::plan::LoadedPlan;
pub use crate::report::explain::Decision;
use crate::reuse::{FileHashCache, Store, outputs_digest, why_not_reused};
use crate::steps::{Kinds, Reuse, RunSettings};

use super::keys::KeyMaker;

/// Decides, in dependency order, which steps a run would reuse.
pub fn preview(
    loaded: &LoadedPlan,
    pipeline: &Pipeline,
    state_dir: &Path,
    no_reuse: bool,
    env: &BTreeMap<String, String>,
) -> Vec<Decision> {
    let kinds = Kinds::for_run(RunSettings {
        concurrency: 1,
        redactor: loaded.redactor.clone(),
    });
    decide(loaded, pipeline, state_dir, no_reuse, env, &kinds)
}

/// [`preview`] with the kinds a run uses.
fn decide(
    loaded: &LoadedPlan,
    pipeline: &Pipeline,
    state_dir: &Path,
    no_reuse: bool,
    env: &BTreeMap<String, String>,
    kinds: &Kinds,
) -> Vec<Decision> {
    let store = Store::open(state_dir);
    let units = crate::reuse::UnitStore::open(state_dir);
    let hashes = Mutex::new(FileHashCache::load(state_dir));
    let maker = KeyMaker {
        root: &loaded.root,
        plan: &loaded.plan,
        pipeline,
        hashes: &hashes,
        env,
        redactor: &loaded.redactor,
        kinds,
        plan_path: Some(&loaded.source.path),
        units: (!no_reuse).then_some(&units),
        // What a preview decides is the cells, which no baseline changes.
        baseline: None,
    };
    let last_keys = store.last_keys(&loaded.plan.name);
    let n = pipeline.graph.node_count();
    let mut decisions: Vec<Option<Decision>> = vec![None; n];
    // The output digest of each step that would be reused (known from its
    // stored entry); `None` for one that runs.
    let mut outputs: Vec<Option<String>> = vec![None; n];
    for &node in &pipeline.order {
        let instance = pipeline.instance(node);
        let step = &pipeline.steps[instance.step];
        let warnings = maker.warnings(node);
        let mut decision = match maker.key(node, |need| outputs[need.index()].clone()) {
            Err(e) => Decision::runs(None, vec![format!("its inputs cannot be read: {}", e.0)]),
            Ok(Reuse::Never(why)) => Decision::runs(
                None,
                vec![
                    if kinds.get(instance.kind).is_some() && !why.contains("not built") {
                        format!("never reused: {why}")
                    } else {
                        why
                    },
                ],
            ),
            Ok(Reuse::AfterUpstream(why)) => Decision::runs(None, vec![why]),
            Ok(Reuse::Key(key)) => {
                let digest = key.digest();
                let entry = (!no_reuse && step.reuse)
                    .then(|| store.lookup(&digest))
                    .flatten();
                if no_reuse {
                    Decision::runs(Some(digest), vec!["--no-reuse".into()])
                } else if !step.reuse {
                    Decision::runs(Some(digest), vec!["`reuse = false`".into()])
                } else if let Some(entry) = entry {
                    outputs[node.index()] = Some(outputs_digest(
                        entry
                            .outputs
                            .iter()
                            .map(|o| (o.path.as_str(), o.sha256.as_str())),
                    ));
                    Decision::reused(digest)
                } else {
                    let why = match last_keys.get(&instance.id) {
                        None => vec!["it never succeeded before".to_owned()],
                        Some(previous) if previous.digest() == digest => {
                            vec!["its stored result is gone (`gameplan gc` removes old ones) or damaged".to_owned()]
                        }
                        Some(previous) => why_not_reused(previous, &key),
                    };
                    Decision::runs(Some(digest), why)
                }
            }
        };
        decision.warnings = warnings;
        decisions[node.index()] = Some(decision);
    }
    let _ = hashes.lock().map(|h| h.save());
    decisions
        .into_iter()
        .map(|d| d.unwrap_or(Decision::runs(None, Vec::new())))
        .collect()
}

/// Every play cell of `pipeline`, in plan order, with whether a run with
/// `kinds` would reuse it: [`preview`]'s decisions, so a running step's
/// view ([`crate::steps::StepIo::cells_ahead`]) and `plan explain` agree.
pub fn cells_ahead(
    loaded: &LoadedPlan,
    pipeline: &Pipeline,
    state_dir: &Path,
    no_reuse: bool,
    env: &BTreeMap<String, String>,
    kinds: &Kinds,
) -> Vec<crate::steps::CellAhead> {
    let decisions = decide(loaded, pipeline, state_dir, no_reuse, env, kinds);
    pipeline
        .order
        .iter()
        .filter_map(|&node| {
            let decision = &decisions[node.index()];
            let instance = pipeline.instance(node);
            let (persona, controller) = kinds.get(instance.kind)?.cell_of(
                &loaded.plan,
                &pipeline.steps[instance.step],
                instance,
            )?;
            Some(crate::steps::CellAhead {
                id: instance.id.clone(),
                reused: decision.reused,
                key: decision.key.clone(),
                persona,
                controller,
            })
        })
        .collect()
}

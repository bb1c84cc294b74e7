//! What a run would do, without running: `plan explain`'s run / reused
//! decisions and the reasons a step that ran before will run again.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use crate::graph::Pipeline;
use crate::plan::LoadedPlan;
pub use crate::report::explain::Decision;
use crate::reuse::{FileHashCache, Store, why_not_reused};
use crate::steps::{self, StepContext};

/// Decides, in dependency order, which steps a run would reuse.
pub fn preview(
    loaded: &LoadedPlan,
    pipeline: &Pipeline,
    state_dir: &Path,
    no_reuse: bool,
) -> Vec<Decision> {
    let store = Store::open(state_dir);
    let hashes = Arc::new(Mutex::new(FileHashCache::load(state_dir)));
    let plan = Arc::new(loaded.plan.clone());
    let (_stop, cancel) = tokio::sync::watch::channel(false);
    let last_keys = store.last_keys(&plan.name);
    let mut decisions: Vec<Option<Decision>> = vec![None; pipeline.graph.node_count()];
    for &node in &pipeline.order {
        let instance = pipeline.instance(node).clone();
        let step = pipeline.steps[instance.step].clone();
        let mut upstream = BTreeMap::new();
        for need in pipeline.needs(node) {
            let id = pipeline.instance(need).id.clone();
            let decision = decisions[need.index()].as_ref();
            let key = decision
                .and_then(|d| d.key.clone())
                .unwrap_or_else(|| "unkeyed".into());
            upstream.insert(id, key);
        }
        let cx = StepContext {
            root: loaded.root.clone(),
            run_id: String::new(),
            step_dir: state_dir.join("preview"),
            plan: Arc::clone(&plan),
            step,
            instance,
            attempt: 0,
            upstream,
            hashes: Arc::clone(&hashes),
            cancel: cancel.clone(),
            env: Arc::new(BTreeMap::new()),
            launcher: Arc::new(crate::steps::launcher::LazyLauncher::new(1)),
            redactor: loaded.redactor.clone(),
        };
        let decision = match steps::reuse_key(&cx) {
            Err(e) => Decision {
                reused: false,
                key: None,
                why: vec![format!("its inputs cannot be read: {}", e.0)],
            },
            Ok(None) => Decision {
                reused: false,
                key: None,
                why: vec![if crate::steps::is_built(cx.step.kind) {
                    format!("`{}` steps are never reused", cx.step.kind.name())
                } else {
                    format!(
                        "`{}` steps are not built yet; `plan run` refuses this plan",
                        cx.step.kind.name()
                    )
                }],
            },
            Ok(Some(key)) => {
                let digest = key.digest();
                if no_reuse {
                    Decision {
                        reused: false,
                        key: Some(digest),
                        why: vec!["--no-reuse".into()],
                    }
                } else if !cx.step.reuse {
                    Decision {
                        reused: false,
                        key: Some(digest),
                        why: vec!["`reuse = false`".into()],
                    }
                } else if store.lookup(&digest).is_some() {
                    Decision {
                        reused: true,
                        key: Some(digest),
                        why: Vec::new(),
                    }
                } else {
                    let why = match last_keys.get(&cx.instance.id) {
                        None => vec!["it never succeeded before".to_owned()],
                        Some(previous) if previous.digest() == digest => {
                            vec!["its stored result is gone or damaged".to_owned()]
                        }
                        Some(previous) => why_not_reused(previous, &key),
                    };
                    Decision {
                        reused: false,
                        key: Some(digest),
                        why,
                    }
                }
            }
        };
        decisions[node.index()] = Some(decision);
    }
    let _ = hashes.lock().map(|h| h.save());
    decisions
        .into_iter()
        .map(|d| {
            d.unwrap_or(Decision {
                reused: false,
                key: None,
                why: Vec::new(),
            })
        })
        .collect()
}

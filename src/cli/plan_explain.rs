//! `gameplan plan explain PLAN [--json]`

use std::path::Path;

use super::{Context, LoadArgs};
use crate::exit_code::{Done, Failure};
use crate::report::explain;

pub fn run(
    cx: &Context,
    plan: &Path,
    steps: &[String],
    args: &LoadArgs,
    as_json: bool,
    state_dir: Option<&Path>,
) -> Done {
    let (loaded, pipeline) = cx.load_pipeline(plan, args)?;
    let pipeline = crate::graph::select(pipeline, steps)
        .map_err(|e| Failure::plan(format!("error: {e}\n")))?;
    let state_dir = crate::engine::state_dir(&loaded.root, state_dir);
    let decisions = crate::engine::preview::preview(&loaded, &pipeline, &state_dir, false, &cx.env);
    if as_json {
        let mut doc = explain::explain_json(&loaded.plan.name, &pipeline, &decisions);
        if !loaded.unset_secrets.is_empty()
            && let Some(map) = doc.as_object_mut()
        {
            map.insert(
                "unset_secrets".into(),
                explain::unset_secrets_json(&loaded.unset_secrets),
            );
        }
        loaded.redactor.redact_json(&mut doc);
        cx.console.json(&doc);
    } else {
        let text = explain::explain_text(&loaded.plan.name, &pipeline, &decisions);
        cx.console.out(&loaded.redactor.redact(&text));
        cx.console
            .err(&explain::unset_secrets_note(&loaded.unset_secrets));
    }
    Ok(())
}

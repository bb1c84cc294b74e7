//! `gameplan plan explain PLAN [--json]`

use std::path::Path;

use super::{Context, LoadArgs};
use crate::exit_code;
use crate::report::explain::{self, Action};

pub fn run(cx: &Context, plan: &Path, args: &LoadArgs, as_json: bool) -> u8 {
    let loaded = match cx.load(plan, args) {
        Ok(loaded) => loaded,
        Err(code) => return code,
    };
    let pipeline = match cx.expand(plan, &loaded) {
        Ok(p) => p,
        Err(code) => return code,
    };
    // Reuse decisions come with the engine; until then every step runs.
    let action = |_| Action::Run;
    if as_json {
        let mut doc = explain::explain_json(&loaded.plan.name, &pipeline, action);
        loaded.redactor.redact_json(&mut doc);
        cx.console.json(&doc);
    } else {
        let text = explain::explain_text(&loaded.plan.name, &pipeline, action);
        cx.console.out(&loaded.redactor.redact(&text));
    }
    exit_code::SUCCESS
}

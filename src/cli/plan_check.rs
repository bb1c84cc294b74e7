//! `gameplan plan check PLAN... [--json]`

use std::path::PathBuf;

use serde_json::json;

use super::{Context, LoadArgs};
use crate::exit_code::{Done, Failure};
use crate::report::diagnostics;

pub fn run(cx: &Context, plans: &[PathBuf], args: &LoadArgs, as_json: bool) -> Done {
    let mut files = Vec::new();
    let mut failed = 0usize;
    for path in plans {
        let name = path.display().to_string();
        let options = crate::plan::LoadOptions {
            warn_unmatched_inputs: true,
            ..cx.load_options(args)
        };
        let outcome = crate::plan::load(path, &options).and_then(|loaded| {
            crate::graph::expand_loaded(&loaded)
                .map(|p| (loaded, p))
                .map_err(|e| super::expand_failure(path, &e))
        });
        match outcome {
            Ok((loaded, pipeline)) => {
                let mut file = json!({"file": name, "valid": true, "plan": loaded.plan.name, "steps": pipeline.order.len(), "problems": []});
                if !loaded.warnings.is_empty() {
                    file["warnings"] = json!(diagnostics::list_json(
                        Some(&loaded.source),
                        &name,
                        &loaded.warnings
                    ));
                }
                if !loaded.unset_secrets.is_empty() {
                    file["unset_secrets"] =
                        crate::report::explain::unset_secrets_json(&loaded.unset_secrets);
                }
                files.push(file);
                if !as_json {
                    cx.console.err(&diagnostics::render_warnings(
                        &loaded.source,
                        &loaded.warnings,
                        cx.console.color,
                    ));
                    let warned = match loaded.warnings.len() {
                        0 => String::new(),
                        n => format!(", {}", crate::report::plural(n, "warning")),
                    };
                    cx.console.err(&format!(
                        "{name}: ok (plan `{}`, {} steps{warned})\n",
                        loaded.plan.name,
                        pipeline.order.len()
                    ));
                    cx.console.err(&crate::report::explain::unset_secrets_note(
                        &loaded.unset_secrets,
                    ));
                }
            }
            Err(failure) => {
                failed += 1;
                files.push(json!({"file": name, "valid": false, "problems": diagnostics::to_json(&failure)}));
                if !as_json {
                    cx.report_failure(&failure);
                }
            }
        }
    }
    if as_json {
        cx.console
            .json(&json!({"valid": failed == 0, "files": files}));
    } else if plans.len() > 1 {
        cx.console.err(&format!(
            "{} of {} plans valid\n",
            plans.len() - failed,
            plans.len()
        ));
    }
    if failed == 0 {
        Ok(())
    } else {
        // Each plan's problems were printed as it was checked.
        Err(Failure::plan(String::new()))
    }
}

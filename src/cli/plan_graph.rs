//! `gameplan plan graph PLAN [--format text|dot|mermaid]`

use std::path::Path;

use super::{Context, GraphFormat, LoadArgs};
use crate::exit_code::Done;
use crate::report::explain;

pub fn run(cx: &Context, plan: &Path, args: &LoadArgs, format: GraphFormat) -> Done {
    let (loaded, pipeline) = cx.load_pipeline(plan, args)?;
    let text = match format {
        GraphFormat::Text => explain::graph_text(&pipeline),
        GraphFormat::Dot => explain::graph_dot(&loaded.plan.name, &pipeline),
        GraphFormat::Mermaid => explain::graph_mermaid(&pipeline),
    };
    cx.console.out(&loaded.redactor.redact(&text));
    Ok(())
}

//! Matrix values in a step's commands: `run = "make level-{{ matrix.level }}"`.
//!
//! The loader leaves a step's strings that read `matrix` unrendered (after
//! checking their names against the step's axes); here, after expansion,
//! each cell gets its own copy of the step with them rendered from its
//! values. Everything after (keys, explain, the run) reads the cell's copy
//! through [`super::Instance::step`], so nothing else knows of it.

use std::collections::BTreeMap;

use super::{ExpandError, Pipeline};
use crate::plan::LoadedPlan;
use crate::plan::kinds::command::CommandParams;
use crate::plan::model::{Params, Program, Step};
use crate::template::Templates;

/// Expands a loaded plan and renders its cells' matrix values.
pub fn expand_loaded(loaded: &LoadedPlan) -> Result<Pipeline, ExpandError> {
    let mut pipeline = super::expand(&loaded.plan)?;
    let vars = serde_json::Value::Object(loaded.plan.vars.clone());
    for node in pipeline.graph.node_indices() {
        let instance = &pipeline.graph[node];
        let step = &pipeline.steps[instance.step];
        if step.matrix.is_empty() || !reads_matrix(step, &loaded.templates) {
            continue;
        }
        let cell: BTreeMap<String, String> = instance.cell.values().iter().cloned().collect();
        let rendered =
            render(step, &loaded.templates, &vars, &cell).map_err(|message| ExpandError::Cell {
                instance: instance.id.clone(),
                message,
            })?;
        pipeline.steps.push(rendered);
        let index = pipeline.steps.len() - 1;
        pipeline.graph[node].step = index;
    }
    Ok(pipeline)
}

/// Every string of a step that may read `matrix`, for reading or rewriting.
fn strings_mut(step: &mut Step) -> Vec<&mut String> {
    let mut out: Vec<&mut String> = step.env.values_mut().collect();
    if let Params::Command(CommandParams {
        program,
        inputs,
        outputs,
        cwd,
    }) = &mut step.params
    {
        match program {
            Program::Shell(line) => out.push(line),
            Program::Argv(argv) => out.extend(argv.iter_mut()),
        }
        out.extend(inputs.iter_mut());
        out.extend(outputs.iter_mut());
        out.extend(cwd.iter_mut());
    }
    out
}

fn reads_matrix(step: &Step, templates: &Templates) -> bool {
    let mut copy = step.clone();
    strings_mut(&mut copy)
        .into_iter()
        .any(|s| Templates::is_template(s) && templates.reads_matrix(s))
}

fn render(
    step: &Step,
    templates: &Templates,
    vars: &serde_json::Value,
    cell: &BTreeMap<String, String>,
) -> Result<Step, String> {
    let mut copy = step.clone();
    for text in strings_mut(&mut copy) {
        if Templates::is_template(text) && templates.reads_matrix(text) {
            *text = templates
                .render_cell(text, vars, Some(cell))
                .map_err(|e| e.message)?;
        }
    }
    Ok(copy)
}

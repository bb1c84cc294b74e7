//! Running a part of a plan: `gameplan plan run PLAN STEP...` keeps the
//! named steps and everything they need, nothing else (like `just test` or
//! `make dist/x`).
//!
//! A name is a step id (every cell of a matrix step: `play`) or one
//! instance's id (`play[kid,jev]`). The kept instances keep their order
//! and the edges between them; a step that needs nothing selected is not
//! pulled in, `always` steps included.

use std::collections::HashMap;

use petgraph::Direction;
use petgraph::graph::{DiGraph, NodeIndex};

use super::Pipeline;

/// A name that matches no step and no cell.
#[derive(Debug, thiserror::Error)]
#[error("no step or cell `{name}` in the plan{}", hint.as_deref().map(|h| format!("; {h}")).unwrap_or_default())]
pub struct UnknownStep {
    pub name: String,
    /// "did you mean `x`?", or the steps there are.
    pub hint: Option<String>,
}

/// The part of `pipeline` that `names` select, with what it needs.
/// No names: the whole pipeline.
pub fn select(pipeline: Pipeline, names: &[String]) -> Result<Pipeline, UnknownStep> {
    if names.is_empty() {
        return Ok(pipeline);
    }
    let mut wanted = vec![false; pipeline.graph.node_count()];
    let mut stack = Vec::new();
    for name in names {
        let matched: Vec<NodeIndex> = pipeline
            .graph
            .node_indices()
            .filter(|&n| {
                let instance = &pipeline.graph[n];
                instance.id == *name || pipeline.steps[instance.step].id == *name
            })
            .collect();
        if matched.is_empty() {
            return Err(unknown(&pipeline, name));
        }
        stack.extend(matched);
    }
    while let Some(node) = stack.pop() {
        if std::mem::replace(&mut wanted[node.index()], true) {
            continue;
        }
        stack.extend(pipeline.graph.neighbors_directed(node, Direction::Incoming));
    }
    let mut graph = DiGraph::new();
    let mut new_index: HashMap<NodeIndex, NodeIndex> = HashMap::new();
    for &node in &pipeline.order {
        if wanted[node.index()] {
            new_index.insert(node, graph.add_node(pipeline.graph[node].clone()));
        }
    }
    for edge in pipeline.graph.raw_edges() {
        if let (Some(&from), Some(&to)) =
            (new_index.get(&edge.source()), new_index.get(&edge.target()))
        {
            graph.add_edge(from, to, ());
        }
    }
    // Nodes were added in the old order, so that order is the new indices'.
    let order = (0..graph.node_count()).map(NodeIndex::new).collect();
    Ok(Pipeline {
        steps: pipeline.steps,
        graph,
        order,
    })
}

fn unknown(pipeline: &Pipeline, name: &str) -> UnknownStep {
    let steps: Vec<&str> = pipeline.steps.iter().map(|s| s.id.as_str()).collect();
    let hint = crate::suggest::did_you_mean(
        name,
        steps
            .iter()
            .copied()
            .chain(pipeline.graph.node_weights().map(|i| i.id.as_str())),
    )
    .or_else(|| Some(format!("the steps are {}", crate::suggest::one_of(&steps))));
    UnknownStep {
        name: name.to_owned(),
        hint,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pipeline(plan: &str) -> Pipeline {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(dir.path().join(".git")).expect(".git");
        let path = dir.path().join("plan.toml");
        std::fs::write(&path, plan).expect("plan");
        let loaded =
            crate::plan::load(&path, &crate::plan::LoadOptions::default()).expect("the plan loads");
        super::super::expand(&loaded.plan).expect("expands")
    }

    const PLAN: &str = r#"version = 1
name = "part"

[[steps]]
id = "build"
kind = "command"
run = "true"

[[steps]]
id = "lint"
kind = "command"
run = "true"

[[steps]]
id = "test"
kind = "command"
run = "true"
needs = ["build"]
matrix = { level = ["1", "2"] }

[[steps]]
id = "report"
kind = "command"
run = "true"
needs = ["test"]
always = true
"#;

    fn ids(p: &Pipeline) -> Vec<String> {
        p.order.iter().map(|&n| p.graph[n].id.clone()).collect()
    }

    #[test]
    fn a_step_brings_what_it_needs_and_nothing_else() {
        let part = select(pipeline(PLAN), &["test".into()]).expect("selects");
        assert_eq!(ids(&part), ["build", "test[1]", "test[2]"]);
        assert_eq!(part.graph.edge_count(), 2);
    }

    #[test]
    fn one_cell_by_its_id() {
        let part = select(pipeline(PLAN), &["test[2]".into()]).expect("selects");
        assert_eq!(ids(&part), ["build", "test[2]"]);
    }

    #[test]
    fn an_unknown_name_suggests_the_closest() {
        let e = select(pipeline(PLAN), &["tset".into()]).expect_err("unknown");
        assert_eq!(
            e.to_string(),
            "no step or cell `tset` in the plan; did you mean `test`?"
        );
        let e = select(pipeline(PLAN), &["zzz".into()]).expect_err("unknown");
        assert!(
            e.to_string()
                .contains("the steps are `build`, `lint`, `test` or `report`"),
            "{e}"
        );
    }
}

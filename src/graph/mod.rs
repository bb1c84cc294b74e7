//! From the validated plan to the DAG of step instances the engine schedules.
//!
//! Owns expansion: the default paid pipeline when a plan omits `steps`,
//! matrices (one cell per combination of axis values, axes in the order
//! written), `per` (one instance per cell of a matrix step, each needing only
//! its own cell) and fan-in (needing a matrix step means needing every cell).
//! Expansion is deterministic: the same plan gives the same ids in the same
//! order every time, which `plan explain --json` and the journal rely on.
//! Sizes are computed by arithmetic and refused before anything is allocated.

pub mod cell;
pub mod cells;
pub mod select;

pub use cell::Cell;
pub use cells::expand_loaded;
pub use select::{UnknownStep, select};

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};

use petgraph::Direction;
use petgraph::graph::{DiGraph, NodeIndex};
use serde::Serialize;

use crate::plan::kinds::gate::GateParams;
use crate::plan::model::{Axis, Params, Plan, Step, StepKind};
use crate::plan::validate::MAX_EXPANDED_STEPS;

/// The most dependency edges an expanded plan may have (a matrix needing a
/// matrix multiplies); checked before allocation like the step count.
pub const MAX_EDGES: u64 = 1_000_000;

/// One node of the DAG: a step, or one cell of a matrix / `per` step.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Instance {
    /// `build`, `play[curious-kid,jev,1]`, `deliver[curious-kid,jev,1]`.
    pub id: String,
    /// Index of the step in [`Pipeline::steps`].
    #[serde(skip)]
    pub step: usize,
    pub kind: StepKind,
    /// Its matrix values (a `per` instance: the cell it follows), the play
    /// axes typed.
    pub cell: Cell,
    pub always: bool,
}

/// The expanded plan.
#[derive(Debug, Clone)]
pub struct Pipeline {
    /// The plan's steps, or the default pipeline's when the plan has none.
    pub steps: Vec<Step>,
    /// Edges point from a dependency to the instance that needs it.
    pub graph: DiGraph<Instance, ()>,
    /// Every instance, dependencies first; ties broken by declaration order.
    pub order: Vec<NodeIndex>,
}

impl Pipeline {
    pub fn instance(&self, index: NodeIndex) -> &Instance {
        &self.graph[index]
    }

    /// What `index` waits for, in declaration order.
    pub fn needs(&self, index: NodeIndex) -> Vec<NodeIndex> {
        let mut needs: Vec<NodeIndex> = self
            .graph
            .neighbors_directed(index, Direction::Incoming)
            .collect();
        needs.sort_unstable();
        needs
    }

    /// Every instance `index` needs, directly or through others.
    pub fn ancestors(&self, index: NodeIndex) -> std::collections::BTreeSet<NodeIndex> {
        let mut seen = std::collections::BTreeSet::new();
        let mut stack = self.needs(index);
        while let Some(need) = stack.pop() {
            if seen.insert(need) {
                stack.extend(self.needs(need));
            }
        }
        seen
    }

    pub fn find(&self, id: &str) -> Option<NodeIndex> {
        self.graph.node_indices().find(|&i| self.graph[i].id == id)
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ExpandError {
    #[error("the plan expands to {count} steps, more than the limit of {MAX_EXPANDED_STEPS}")]
    TooManySteps { count: u64 },
    #[error(
        "the plan's steps depend on each other {count} times, more than the limit of {MAX_EDGES}"
    )]
    TooManyEdges { count: u64 },
    #[error("step `{instance}`: {message}")]
    Cell { instance: String, message: String },
}

/// The default paid pipeline (docs/plans.md › The model: from a file to a
/// graph of steps): estimate → register → play (persona × controller) →
/// deliver (per play cell) → aggregate → one gate step per gate, in order →
/// finish (always).
pub fn default_steps(plan: &Plan) -> Vec<Step> {
    let step = |id: &str, kind: StepKind, needs: Vec<String>| Step {
        id: id.to_owned(),
        kind,
        needs,
        matrix: Vec::new(),
        per: None,
        always: kind == StepKind::Finish,
        pool: None,
        timeout_secs: None,
        retries: 0,
        reuse: true,
        env: BTreeMap::new(),
        params: Params::empty(kind),
    };
    let mut steps = vec![
        step("estimate", StepKind::Estimate, vec![]),
        step("register", StepKind::Register, vec!["estimate".into()]),
        Step {
            matrix: vec![
                Axis {
                    name: "persona".into(),
                    values: plan.personas.iter().map(|p| p.slug.clone()).collect(),
                },
                Axis {
                    name: "controller".into(),
                    values: plan
                        .controllers
                        .iter()
                        .map(|c| c.name().to_owned())
                        .collect(),
                },
            ],
            pool: Some("play".into()),
            ..step("play", StepKind::Play, vec!["register".into()])
        },
        Step {
            per: Some("play".into()),
            ..step("deliver", StepKind::Deliver, vec![])
        },
        step("aggregate", StepKind::Aggregate, vec!["deliver".into()]),
    ];
    let mut last = "aggregate".to_owned();
    for gate in &plan.gates {
        let id = format!("gate[{}]", gate.name);
        steps.push(Step {
            params: Params::Gate(GateParams {
                gate: gate.name.clone(),
            }),
            ..step(&id, StepKind::Gate, vec![last.clone()])
        });
        last = id;
    }
    steps.push(step("finish", StepKind::Finish, vec![last]));
    steps
}

fn cells(axes: &[Axis]) -> u64 {
    axes.iter()
        .map(|a| a.values.len() as u64)
        .fold(1, u64::saturating_mul)
}

/// Every combination of axis values, the first axis varying slowest.
fn cell_values(axes: &[Axis]) -> Vec<Vec<(String, String)>> {
    let mut out: Vec<Vec<(String, String)>> = vec![Vec::new()];
    for axis in axes {
        out = out
            .into_iter()
            .flat_map(|prefix| {
                axis.values.iter().map(move |v| {
                    let mut cell = prefix.clone();
                    cell.push((axis.name.clone(), v.clone()));
                    cell
                })
            })
            .collect();
    }
    out
}

/// An instance's id: the step's, then its matrix values (`play[kid,jev,1]`).
pub fn cell_id(step: &str, cell: &[(String, String)]) -> String {
    if cell.is_empty() {
        return step.to_owned();
    }
    let values: Vec<&str> = cell.iter().map(|(_, v)| v.as_str()).collect();
    format!("{step}[{}]", values.join(","))
}

pub fn expand(plan: &Plan) -> Result<Pipeline, ExpandError> {
    let steps = if plan.explicit_steps {
        plan.steps.clone()
    } else {
        default_steps(plan)
    };
    let by_id: HashMap<&str, usize> = steps
        .iter()
        .enumerate()
        .map(|(i, s)| (s.id.as_str(), i))
        .collect();
    let count_of = |s: &Step| -> u64 {
        match s.per.as_deref().and_then(|p| by_id.get(p)) {
            Some(&target) => cells(&steps[target].matrix),
            None => cells(&s.matrix),
        }
    };
    let counts: Vec<u64> = steps.iter().map(count_of).collect();
    let total = counts.iter().copied().fold(0, u64::saturating_add);
    if total > MAX_EXPANDED_STEPS {
        return Err(ExpandError::TooManySteps { count: total });
    }
    let edges = steps
        .iter()
        .zip(&counts)
        .map(|(s, &n)| {
            let fan_in: u64 = s
                .needs
                .iter()
                .filter_map(|need| by_id.get(need.as_str()))
                .map(|&i| counts[i])
                .fold(0, u64::saturating_add);
            n.saturating_mul(fan_in.saturating_add(u64::from(s.per.is_some())))
        })
        .fold(0, u64::saturating_add);
    if edges > MAX_EDGES {
        return Err(ExpandError::TooManyEdges { count: edges });
    }

    #[expect(
        clippy::cast_possible_truncation,
        reason = "bounded by MAX_EXPANDED_STEPS and MAX_EDGES above"
    )]
    let mut graph: DiGraph<Instance, ()> = DiGraph::with_capacity(total as usize, edges as usize);
    let mut instances_of: Vec<Vec<NodeIndex>> = vec![Vec::new(); steps.len()];
    for (index, step) in steps.iter().enumerate() {
        let cells = match step.per.as_deref().and_then(|p| by_id.get(p)) {
            Some(&target) => cell_values(&steps[target].matrix),
            None => cell_values(&step.matrix),
        };
        for values in cells {
            let id = cell_id(&step.id, &values);
            let cell =
                Cell::new(values, step.kind.row().plays).map_err(|message| ExpandError::Cell {
                    instance: id.clone(),
                    message,
                })?;
            let node = graph.add_node(Instance {
                id,
                step: index,
                kind: step.kind,
                cell,
                always: step.always,
            });
            instances_of[index].push(node);
        }
    }
    for (index, step) in steps.iter().enumerate() {
        let per_target = step.per.as_deref().and_then(|p| by_id.get(p)).copied();
        for (cell_index, &node) in instances_of[index].iter().enumerate() {
            if let Some(target) = per_target
                && let Some(&own) = instances_of[target].get(cell_index)
            {
                graph.add_edge(own, node, ());
            }
            for need in &step.needs {
                let Some(&dep) = by_id.get(need.as_str()) else {
                    continue;
                };
                if Some(dep) == per_target {
                    continue;
                }
                for &from in &instances_of[dep] {
                    graph.add_edge(from, node, ());
                }
            }
        }
    }
    let order = topological_order(&graph);
    Ok(Pipeline {
        steps,
        graph,
        order,
    })
}

/// Kahn's algorithm, always taking the ready instance declared first, so the
/// order is the same on every run and reads like the plan.
fn topological_order(graph: &DiGraph<Instance, ()>) -> Vec<NodeIndex> {
    let mut waiting: Vec<usize> = graph
        .node_indices()
        .map(|n| graph.neighbors_directed(n, Direction::Incoming).count())
        .collect();
    let mut ready: BinaryHeap<Reverse<NodeIndex>> = graph
        .node_indices()
        .filter(|n| waiting[n.index()] == 0)
        .map(Reverse)
        .collect();
    let mut order = Vec::with_capacity(graph.node_count());
    while let Some(Reverse(node)) = ready.pop() {
        order.push(node);
        for next in graph.neighbors_directed(node, Direction::Outgoing) {
            waiting[next.index()] -= 1;
            if waiting[next.index()] == 0 {
                ready.push(Reverse(next));
            }
        }
    }
    order
}

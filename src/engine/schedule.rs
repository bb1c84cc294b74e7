//! The schedule: step states, readiness and skipping, by the rules of
//! DESIGN §3 (a step is ready when every step it needs has finished; a step
//! whose need did not succeed is skipped, and so is everything below it,
//! unless it is `always`). Pure bookkeeping: it starts nothing, writes
//! nothing, and is tested on its own.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;

use petgraph::Direction;
use petgraph::graph::NodeIndex;

use crate::graph::Pipeline;
use crate::journal::run::StepState;

/// Step states, readiness and skipping: the scheduling rules of DESIGN §3.
pub struct Schedule {
    pipeline: Arc<Pipeline>,
    pub states: Vec<StepState>,
    /// Needs of each step that have not reached a final state.
    waiting: Vec<usize>,
    pub ready: BinaryHeap<Reverse<NodeIndex>>,
    /// Steps newly skipped, to journal.
    pub skipped: Vec<NodeIndex>,
}

impl Schedule {
    /// Every step pending; call [`initialize`](Schedule::initialize) once the
    /// states a resume restored are in.
    pub fn new(pipeline: Arc<Pipeline>) -> Schedule {
        let n = pipeline.graph.node_count();
        Schedule {
            pipeline,
            states: vec![StepState::Pending; n],
            waiting: vec![0; n],
            ready: BinaryHeap::new(),
            skipped: Vec::new(),
        }
    }

    /// The next ready step, in declared order.
    pub fn pop_ready(&mut self) -> Option<NodeIndex> {
        self.ready.pop().map(|Reverse(node)| node)
    }

    /// Steps taken off the ready set that could not start yet (no free slot).
    pub fn requeue(&mut self, nodes: impl IntoIterator<Item = NodeIndex>) {
        self.ready.extend(nodes.into_iter().map(Reverse));
    }

    pub fn initialize(&mut self) {
        let order = self.pipeline.order.clone();
        for &node in &order {
            self.waiting[node.index()] = self
                .pipeline
                .needs(node)
                .iter()
                .filter(|need| !self.states[need.index()].is_final())
                .count();
        }
        for &node in &order {
            if self.states[node.index()] != StepState::Pending {
                continue;
            }
            let blocked = self.pipeline.needs(node).iter().any(|need| {
                self.states[need.index()].is_final() && !self.states[need.index()].satisfies_needs()
            });
            if blocked && !self.pipeline.graph[node].always {
                self.skip(node);
            } else if self.waiting[node.index()] == 0 {
                self.ready.push(Reverse(node));
            }
        }
    }

    /// Marks `node` skipped, and every non-`always` step downstream of it.
    pub fn skip(&mut self, node: NodeIndex) {
        let mut stack = vec![node];
        while let Some(node) = stack.pop() {
            if self.states[node.index()] != StepState::Pending {
                continue;
            }
            self.states[node.index()] = StepState::Skipped;
            self.skipped.push(node);
            stack.extend(self.settle(node));
        }
    }

    /// Records that `node` reached a final state; returns dependants to skip.
    fn settle(&mut self, node: NodeIndex) -> Vec<NodeIndex> {
        let ok = self.states[node.index()].satisfies_needs();
        let dependants: Vec<NodeIndex> = self
            .pipeline
            .graph
            .neighbors_directed(node, Direction::Outgoing)
            .collect();
        let mut to_skip = Vec::new();
        for next in dependants {
            self.waiting[next.index()] = self.waiting[next.index()].saturating_sub(1);
            if self.states[next.index()] != StepState::Pending {
                continue;
            }
            if !ok && !self.pipeline.graph[next].always {
                to_skip.push(next);
            } else if self.waiting[next.index()] == 0 {
                self.ready.push(Reverse(next));
            }
        }
        to_skip
    }

    /// `settled`: not final, but over as far as `always` dependants go (a
    /// step that fail-fast interrupted).
    pub fn finish(&mut self, node: NodeIndex, state: StepState, settled: bool) {
        self.states[node.index()] = state;
        if state.is_final() || settled {
            for next in self.settle(node) {
                self.skip(next);
            }
        }
    }
}

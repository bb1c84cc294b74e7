//! The schedule: step states, readiness and skipping, by the rules of
//! docs/plans.md › Steps and `needs` (a step is ready when every step it
//! needs has finished; a step whose need did not succeed is skipped, and so
//! is everything below it, unless it is `always`; an incomplete need did not
//! succeed unless its kind's partial results are results). Pure
//! bookkeeping: it starts nothing, writes nothing, and is tested on its own.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;

use petgraph::Direction;
use petgraph::graph::NodeIndex;

use crate::graph::Pipeline;
use crate::journal::run::StepState;

/// Step states, readiness and skipping: the scheduling rules of the module
/// doc.
pub struct Schedule {
    pipeline: Arc<Pipeline>,
    pub states: Vec<StepState>,
    /// Per step: whether its kind's partial results are results, so that
    /// it satisfies what needs it also when it ended incomplete
    /// ([`crate::steps::Kind::partial_results_are_results`]). All false
    /// until the run sets them: an incomplete step stops what needs it.
    pub partial_ok: Vec<bool>,
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
            partial_ok: vec![false; n],
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

    /// Whether `node`'s state lets the steps that need it run.
    pub fn satisfies_needs(&self, node: NodeIndex) -> bool {
        let state = self.states[node.index()];
        state.satisfies_needs() || (state == StepState::Incomplete && self.partial_ok[node.index()])
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
            let blocked =
                self.pipeline.needs(node).iter().any(|need| {
                    self.states[need.index()].is_final() && !self.satisfies_needs(*need)
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
        let ok = self.satisfies_needs(node);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// `a → b → c`, `d` alone, `e` (always) after `b`.
    fn pipeline() -> Arc<Pipeline> {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("plan.toml");
        let step = |id: &str, needs: &str, always: bool| {
            format!(
                "[[steps]]\nid = \"{id}\"\nkind = \"command\"\nrun = \"true\"\nneeds = [{needs}]\nalways = {always}\n"
            )
        };
        let text = format!(
            "version = 1\nname = \"s\"\n{}{}{}{}{}",
            step("a", "", false),
            step("b", "\"a\"", false),
            step("c", "\"b\"", false),
            step("d", "", false),
            step("e", "\"b\"", true),
        );
        std::fs::write(&path, text).expect("plan");
        let loaded = crate::plan::load(&path, &crate::plan::LoadOptions::default()).expect("loads");
        Arc::new(crate::graph::expand(&loaded.plan).expect("expands"))
    }

    fn ids(schedule: &mut Schedule) -> Vec<String> {
        let mut out = Vec::new();
        while let Some(node) = schedule.pop_ready() {
            out.push(schedule.pipeline.graph[node].id.clone());
        }
        out
    }

    fn node(schedule: &Schedule, id: &str) -> NodeIndex {
        schedule.pipeline.find(id).expect("step")
    }

    #[test]
    fn steps_without_needs_are_ready_first_in_declared_order() {
        let mut schedule = Schedule::new(pipeline());
        schedule.initialize();
        assert_eq!(ids(&mut schedule), ["a", "d"]);
    }

    #[test]
    fn a_success_readies_what_needed_only_it() {
        let mut schedule = Schedule::new(pipeline());
        schedule.initialize();
        let _ = ids(&mut schedule);
        let a = node(&schedule, "a");
        schedule.finish(a, StepState::Succeeded, false);
        assert_eq!(ids(&mut schedule), ["b"]);
        let b = node(&schedule, "b");
        schedule.finish(b, StepState::Reused, false);
        assert_eq!(ids(&mut schedule), ["c", "e"]);
        assert!(schedule.skipped.is_empty());
    }

    #[test]
    fn a_failure_skips_everything_below_it_but_always_steps() {
        let mut schedule = Schedule::new(pipeline());
        schedule.initialize();
        let _ = ids(&mut schedule);
        let a = node(&schedule, "a");
        schedule.finish(a, StepState::Failed, false);
        let skipped: Vec<&str> = schedule
            .skipped
            .iter()
            .map(|n| schedule.pipeline.graph[*n].id.as_str())
            .collect();
        assert_eq!(skipped, ["b", "c"]);
        // `e` needs the skipped `b` but is `always`: it runs.
        assert_eq!(ids(&mut schedule), ["e"]);
    }

    #[test]
    fn an_interrupted_step_holds_its_dependants_unless_settled_by_fail_fast() {
        let mut schedule = Schedule::new(pipeline());
        schedule.initialize();
        let _ = ids(&mut schedule);
        let a = node(&schedule, "a");
        schedule.finish(a, StepState::Interrupted, false);
        assert!(ids(&mut schedule).is_empty());
        assert!(schedule.skipped.is_empty(), "pending for the resume");

        let mut schedule = Schedule::new(pipeline());
        schedule.initialize();
        let _ = ids(&mut schedule);
        schedule.finish(a, StepState::Interrupted, true);
        assert_eq!(schedule.skipped.len(), 2, "b and c");
    }

    #[test]
    fn an_incomplete_step_stops_what_needs_it_unless_its_partial_results_are_results() {
        let mut schedule = Schedule::new(pipeline());
        schedule.initialize();
        let _ = ids(&mut schedule);
        let a = node(&schedule, "a");
        schedule.finish(a, StepState::Succeeded, false);
        let _ = ids(&mut schedule);
        let b = node(&schedule, "b");
        schedule.finish(b, StepState::Incomplete, false);
        let skipped: Vec<&str> = schedule
            .skipped
            .iter()
            .map(|n| schedule.pipeline.graph[*n].id.as_str())
            .collect();
        assert_eq!(skipped, ["c"]);
        assert_eq!(ids(&mut schedule), ["e"], "`always` still runs");

        let mut schedule = Schedule::new(pipeline());
        let b = node(&schedule, "b");
        schedule.partial_ok[b.index()] = true;
        schedule.initialize();
        let _ = ids(&mut schedule);
        schedule.finish(a, StepState::Succeeded, false);
        let _ = ids(&mut schedule);
        schedule.finish(b, StepState::Incomplete, false);
        assert!(schedule.skipped.is_empty());
        assert_eq!(ids(&mut schedule), ["c", "e"]);

        // A resume from a journal whose `b` ended incomplete: `c` is
        // skipped at once, `e` is ready.
        let mut schedule = Schedule::new(pipeline());
        let d = node(&schedule, "d");
        schedule.states[a.index()] = StepState::Succeeded;
        schedule.states[b.index()] = StepState::Incomplete;
        schedule.states[d.index()] = StepState::Succeeded;
        schedule.initialize();
        assert_eq!(schedule.skipped.len(), 1, "c");
        assert_eq!(ids(&mut schedule), ["e"]);
    }

    #[test]
    fn a_resume_starts_from_the_restored_states() {
        let mut schedule = Schedule::new(pipeline());
        let a = node(&schedule, "a");
        let d = node(&schedule, "d");
        schedule.states[a.index()] = StepState::Succeeded;
        schedule.states[d.index()] = StepState::Succeeded;
        schedule.initialize();
        assert_eq!(ids(&mut schedule), ["b"]);
    }
}

//! A game's goal and how far a play came toward it (docs/play.md, "Goals
//! and progress").
//!
//! Owns evaluating `game.goal` (a minijinja expression over `obs` and
//! `prev`, through the project's one template environment,
//! `crate::template`: strict undefined, fuel) after an action, and the
//! [`Progress`] a cell's `report.json` carries. A goal is reached by a
//! `goal` event or by `game.goal` holding; the episode (`episode`) asks
//! here and ends as `done` would. An expression that fails to evaluate
//! (a field the observation lacks, a type error) counts as not holding and
//! is said once, as a note, never a panic or a finding: the plan is wrong,
//! not the game.

use std::collections::HashSet;
use std::sync::LazyLock;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::protocol::Observation;
use super::trace::{TraceReset, TraceStep};
use crate::template::{CompiledExpression, Redactor, Templates};

/// The environment goals and invariants are compiled in: no `env`, no
/// secrets (they read the observation only), the caps every plan
/// expression has.
pub(super) static GOALS: LazyLock<Templates> =
    LazyLock::new(|| Templates::new(std::collections::BTreeMap::new(), Redactor::default()));

/// `game.goal`, compiled once for a whole play.
pub struct Goal {
    source: String,
    compiled: Result<CompiledExpression<'static>, String>,
    /// Whether its failure was said already (a note once per play).
    said: bool,
}

impl std::fmt::Debug for Goal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Goal")
            .field("source", &self.source)
            .field("said", &self.said)
            .finish_non_exhaustive()
    }
}

impl Goal {
    /// Compiles `source` (checked by `plan check` already; a goal given
    /// some other way that does not compile fails at its first evaluation,
    /// with a note).
    pub fn new(source: &str) -> Goal {
        Goal {
            source: source.to_owned(),
            compiled: GOALS
                .compile_expression_owned(source)
                .map_err(|e| e.message),
            said: false,
        }
    }

    /// Whether the goal holds at `obs`, `step` actions after the reset,
    /// `prev` the observation before it (none right after a reset). An
    /// error is `Err(note)` the first time and `Ok(false)` after.
    pub fn holds(
        &mut self,
        obs: &Observation,
        step: u64,
        prev: Option<(&Observation, u64)>,
    ) -> Result<bool, String> {
        let result = match &self.compiled {
            Ok(compiled) => {
                let ctx = minijinja::context! {
                    obs => view(obs, step),
                    prev => prev.map(|(p, s)| view(p, s)),
                };
                compiled
                    .eval(ctx)
                    .map(|v| v.is_true())
                    .map_err(|e| e.message)
            }
            Err(message) => Err(message.clone()),
        };
        match result {
            Ok(holds) => Ok(holds),
            Err(_) if self.said => Ok(false),
            Err(message) => {
                self.said = true;
                Err(format!(
                    "`game.goal` (`{}`) could not be evaluated at step {step}: {message}; \
                     where it fails the goal counts as not reached (fix the expression: it \
                     reads `obs.text`, `obs.actions`, `obs.state`, `obs.score`, `obs.step` \
                     and `prev`, which is none right after a reset)",
                    crate::text::cut(&self.source, 80)
                ))
            }
        }
    }
}

/// An observation as a goal reads it: `text`, `actions`, `state`,
/// `score` and `step` (actions since the reset).
pub(super) fn view(obs: &Observation, step: u64) -> minijinja::Value {
    minijinja::context! {
        text => obs.text.as_str(),
        actions => minijinja::Value::from(minijinja::value::Serde(&obs.actions)),
        state => minijinja::Value::from(minijinja::value::Serde(&obs.state)),
        score => obs.score,
        step => step,
    }
}

/// How far a cell came: `report.json`'s `progress`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct Progress {
    /// Whether the goal was reached (a `goal` event, or `game.goal` held).
    pub goal_reached: bool,
    /// The cell's action (1 = its first, every episode counted) after
    /// which the goal was first reached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goal_step: Option<u64>,
    /// The highest score any observation showed.
    pub max_score: f64,
    /// Different observations seen, the first one included.
    pub distinct_observations: u64,
    /// How the distinct observations grew: the `i`th number (from 0) is
    /// how many different observations the cell had seen (the first one
    /// and every episode's included) right after its action `10 × (i + 1)`,
    /// so a cell of 25 actions has two numbers and a cell of fewer than 10
    /// none. Never decreasing; the count at the cell's end is
    /// `distinct_observations`. A flat stretch is a stretch of play that
    /// found nothing new.
    #[serde(default)]
    pub coverage: Vec<u64>,
    /// Each `milestone` invariant, and the cell's first action after
    /// which it held (absent: it never held).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub milestones: std::collections::BTreeMap<String, u64>,
    /// Each `sometimes` invariant, and whether it held at least once in
    /// this cell (the aggregate asks whether any cell met it).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub sometimes: std::collections::BTreeMap<String, bool>,
}

/// Every how many actions `Progress::coverage` counts.
pub const COVERAGE_EVERY: u64 = 10;

/// `Progress::coverage` of a play, read from its trace: its `steps` and
/// its `resets` (the opening's included, each with how many steps came
/// before it), as the cell counted `distinct_observations` (an action the
/// game refused or failed answering leaves the observation as it was).
pub fn coverage(steps: &[TraceStep], resets: &[TraceReset]) -> Vec<u64> {
    let mut seen: HashSet<&str> = HashSet::new();
    let mut resets = resets.iter().peekable();
    let mut counts = Vec::with_capacity(steps.len() / 10);
    for (done, step) in (0u64..).zip(steps) {
        while let Some(reset) = resets.next_if(|r| r.after <= done) {
            seen.extend(reset.obs.as_deref());
        }
        seen.extend(step.obs.as_deref());
        if (done + 1).is_multiple_of(COVERAGE_EVERY) {
            counts.push(seen.len() as u64);
        }
    }
    counts
}

/// The median of `values` (none when empty): a max score, or any count
/// shown as a median.
pub fn median_f64(values: &mut [f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_unstable_by(f64::total_cmp);
    let mid = values.len() / 2;
    Some(if values.len().is_multiple_of(2) {
        f64::midpoint(values[mid - 1], values[mid])
    } else {
        values[mid]
    })
}

/// The median of `values` (none when empty): steps to the goal.
pub fn median(values: &mut [u64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_unstable();
    let mid = values.len() / 2;
    #[expect(clippy::cast_precision_loss, reason = "step counts, far below 2^52")]
    Some(if values.len().is_multiple_of(2) {
        (values[mid - 1] + values[mid]) as f64 / 2.0
    } else {
        values[mid] as f64
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obs(text: &str, state: serde_json::Value, score: f64) -> Observation {
        Observation {
            text: text.into(),
            actions: vec!["north".into()],
            state,
            score,
        }
    }

    #[test]
    fn a_goal_reads_the_observation_the_step_and_the_one_before() {
        let mut goal = Goal::new("obs.state.level >= 2 and prev.state.level == 1");
        let one = obs("Level 1", serde_json::json!({"level": 1}), 0.0);
        let two = obs("Level 2", serde_json::json!({"level": 2}), 5.0);
        assert_eq!(goal.holds(&two, 3, Some((&one, 2))), Ok(true));
        assert_eq!(goal.holds(&one, 2, Some((&one, 1))), Ok(false));
        let mut steps = Goal::new("obs.step >= 4 and 'Level' in obs.text and obs.score > 1");
        assert_eq!(steps.holds(&two, 4, None), Ok(true));
        assert_eq!(steps.holds(&two, 3, None), Ok(false));
    }

    #[test]
    fn a_goal_that_fails_is_said_once_and_counts_as_not_reached() {
        // `prev` is none right after a reset: reading a field of it fails.
        let mut goal = Goal::new("prev.state.level < obs.state.level");
        let here = obs("Level 1", serde_json::json!({"level": 1}), 0.0);
        let note = goal.holds(&here, 1, None).expect_err("a note");
        assert!(
            note.contains("`game.goal`") && note.contains("step 1"),
            "{note}"
        );
        assert_eq!(goal.holds(&here, 2, None), Ok(false), "said once");
        let mut broken = Goal::new("obs.state.level >=");
        assert!(broken.holds(&here, 1, None).is_err());
        assert_eq!(broken.holds(&here, 2, None), Ok(false));
    }

    #[test]
    fn the_median_of_steps_to_the_goal() {
        assert_eq!(median(&mut []), None);
        assert_eq!(median(&mut [7, 3, 5]), Some(5.0));
        assert_eq!(median(&mut [4, 2, 8, 6]), Some(5.0));
        assert_eq!(median_f64(&mut []), None);
        assert_eq!(median_f64(&mut [1.5, 0.0, 9.0]), Some(1.5));
        assert_eq!(median_f64(&mut [4.0, 1.0, 2.0, 8.0]), Some(3.0));
    }

    fn step(n: u64, obs: Option<&str>) -> TraceStep {
        TraceStep {
            step: n,
            action: "go".into(),
            obs: obs.map(str::to_owned),
            events: Vec::new(),
            refused: None,
            screenshot: None,
            by: None,
        }
    }

    /// After every 10 actions, every episode counted: a reset's first
    /// observation counts from the action after it, a failed action adds
    /// nothing, and the actions after the last tenth are not counted.
    #[test]
    fn coverage_counts_distinct_observations_after_every_ten_actions() {
        let reset = |after: u64, obs: &str| TraceReset {
            after,
            seed: 1,
            obs: Some(obs.to_owned()),
        };
        // 25 actions: a new place for each of the first 5, then back and
        // forth, a reset to a new start after 12, one failed answer.
        let mut steps: Vec<TraceStep> = (1..=25)
            .map(|n| {
                let place = if n <= 5 {
                    format!("p{n}")
                } else {
                    format!("p{}", n % 2)
                };
                step(n, Some(&place))
            })
            .collect();
        steps[20].obs = None;
        let resets = [reset(0, "start"), reset(12, "other start")];
        assert_eq!(coverage(&steps, &resets), vec![7, 8]);
        assert_eq!(coverage(&steps[..9], &resets), Vec::<u64>::new());
    }
}

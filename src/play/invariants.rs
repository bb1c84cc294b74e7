//! The plan's `[[invariants]]` judged over a play (docs/invariants.md).
//!
//! Owns evaluating each rule after every action (`obs` the observation
//! the action gave, `prev` the one it was taken from, none right after a
//! reset), what counts as broken (`always` false, `never` true,
//! `eventually` not yet true `within` actions after a reset), and what a
//! play keeps of the rest: the first action each rule held after
//! (`milestones`, and whether a `sometimes` was ever met). The episode
//! turns a broken rule into an `invariant` finding, so a cell, a replay
//! and a shrink judge alike. An expression that cannot be evaluated (a
//! field this observation lacks, a type error) breaks nothing: it is said
//! once, as a note, since the plan is wrong, not the game.

use std::collections::BTreeMap;

use super::goal::{GOALS, view};
use super::protocol::Observation;
use crate::plan::model::{Invariant, InvariantKind, observation_paths};
use crate::template::CompiledExpression;

/// The most characters of one value an evidence line quotes.
const MAX_VALUE: usize = 200;

/// A rule broken by the action just taken.
#[derive(Debug, Clone, PartialEq)]
pub struct Broken {
    pub invariant: Invariant,
    /// What was wrong, with the values the expression read:
    /// "`obs.state.score >= prev.state.score` was false: obs.state.score = 4; prev.state.score = 8".
    pub detail: String,
}

/// One rule, compiled, with what the play has seen of it.
struct Rule {
    spec: Invariant,
    compiled: Result<CompiledExpression<'static>, String>,
    /// The paths the expression reads (`obs.state.score`), each compiled:
    /// their values are the evidence of a break.
    paths: Vec<(String, CompiledExpression<'static>)>,
    /// Why it first failed to evaluate, once it did (said as a note then).
    failed: Option<String>,
    /// Whether it evaluated at least once: a rule that never did judged
    /// nothing, which the cell warns of.
    evaluated: bool,
    /// `eventually`: held (or was reported) in this episode.
    settled: bool,
    /// The cell's first action after which the expression held.
    first_held: Option<u64>,
}

/// Every rule of a play.
#[derive(Default)]
pub struct Invariants {
    rules: Vec<Rule>,
}

impl std::fmt::Debug for Invariants {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.rules.iter().map(|r| &r.spec.name))
            .finish()
    }
}

impl Invariants {
    pub fn new(specs: &[Invariant]) -> Invariants {
        let rules = specs
            .iter()
            .map(|spec| Rule {
                compiled: GOALS
                    .compile_expression_owned(&spec.expr)
                    .map_err(|e| e.message),
                paths: observation_paths(&spec.expr)
                    .into_iter()
                    .filter_map(|p| {
                        let compiled = GOALS.compile_expression_owned(&p).ok()?;
                        Some((p, compiled))
                    })
                    .collect(),
                spec: spec.clone(),
                failed: None,
                evaluated: false,
                settled: false,
                first_held: None,
            })
            .collect();
        Invariants { rules }
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// A new episode: `eventually` windows start again.
    pub fn reset(&mut self) {
        for rule in &mut self.rules {
            rule.settled = false;
        }
    }

    /// Judges every rule after an action: `obs` is the observation it
    /// gave, `step` the actions since the reset, `prev` the observation
    /// it was taken from, `cell_step` the cell's action number (every
    /// episode counted). Returns what broke, and the notes to say.
    pub fn check(
        &mut self,
        obs: &Observation,
        step: u64,
        prev: Option<&Observation>,
        cell_step: u64,
    ) -> (Vec<Broken>, Vec<String>) {
        let ctx = minijinja::context! {
            obs => view(obs, step),
            prev => prev.map(|p| view(p, step.saturating_sub(1))),
        };
        let mut broken = Vec::new();
        let mut notes = Vec::new();
        for rule in &mut self.rules {
            let holds = match &rule.compiled {
                Ok(compiled) => compiled
                    .eval(ctx.clone())
                    .map(|v| v.is_true())
                    .map_err(|e| e.message),
                Err(message) => Err(message.clone()),
            };
            let holds = match holds {
                Ok(holds) => {
                    rule.evaluated = true;
                    holds
                }
                Err(message) => {
                    if rule.failed.is_none() {
                        rule.failed = Some(format!("at step {step}: {message}"));
                        notes.push(format!(
                            "invariant `{}` (`{}`) could not be evaluated at step {step}: \
                             {message}; where it fails it judges nothing (fix the expression: \
                             it reads `obs.text`, `obs.actions`, `obs.state`, `obs.score`, \
                             `obs.step` and `prev`, which is none right after a reset)",
                            rule.spec.name,
                            crate::text::cut(&rule.spec.expr, 80)
                        ));
                    }
                    continue;
                }
            };
            if holds && rule.first_held.is_none() {
                rule.first_held = Some(cell_step);
            }
            let what = match rule.spec.kind {
                InvariantKind::Always if !holds => "was false",
                InvariantKind::Never if holds => "was true",
                InvariantKind::Eventually if holds => {
                    rule.settled = true;
                    continue;
                }
                InvariantKind::Eventually
                    if !rule.settled && step >= rule.spec.within.unwrap_or(1) =>
                {
                    rule.settled = true;
                    "had not held once"
                }
                _ => continue,
            };
            let within = match rule.spec.kind {
                InvariantKind::Eventually => format!(
                    " in the {step} actions after the reset (within = {})",
                    rule.spec.within.unwrap_or(1)
                ),
                _ => String::new(),
            };
            broken.push(Broken {
                invariant: rule.spec.clone(),
                detail: format!(
                    "{} `{}` {what}{within}: {}",
                    rule.spec.kind.name(),
                    rule.spec.expr,
                    values(&rule.paths, &ctx)
                ),
            });
        }
        (broken, notes)
    }

    /// A warning for each rule whose expression failed on every
    /// observation it was given: it judged nothing in this cell, so no
    /// finding of it means nothing.
    pub fn unjudged(&self) -> Vec<String> {
        self.rules
            .iter()
            .filter(|r| !r.evaluated)
            .filter_map(|r| {
                Some(format!(
                    "invariant `{}` judged nothing: its expression `{}` failed on every \
                     observation (first {}); fix it, or the probe or bridge state it reads",
                    r.spec.name,
                    crate::text::cut(&r.spec.expr, 80),
                    r.failed.as_ref()?
                ))
            })
            .collect()
    }

    /// The cell's first action after which each `milestone` rule held.
    pub fn milestones(&self) -> BTreeMap<String, u64> {
        self.rules
            .iter()
            .filter(|r| r.spec.milestone)
            .filter_map(|r| Some((r.spec.name.clone(), r.first_held?)))
            .collect()
    }

    /// The `sometimes` rules, and whether each held at least once.
    pub fn sometimes(&self) -> BTreeMap<String, bool> {
        self.rules
            .iter()
            .filter(|r| r.spec.kind == InvariantKind::Sometimes)
            .map(|r| (r.spec.name.clone(), r.first_held.is_some()))
            .collect()
    }
}

/// What each path read: "obs.state.score = 4; prev.state.score = 8".
fn values(paths: &[(String, CompiledExpression<'static>)], ctx: &minijinja::Value) -> String {
    if paths.is_empty() {
        return "it reads no field of `obs` or `prev`".to_owned();
    }
    paths
        .iter()
        .map(|(path, compiled)| {
            let value = match compiled.eval(ctx.clone()) {
                Ok(v) if v.is_undefined() => "undefined".to_owned(),
                Ok(v) => serde_json::to_string(&v).unwrap_or_else(|_| v.to_string()),
                Err(e) => format!("(not readable: {})", e.message),
            };
            format!("{path} = {}", crate::text::cut(&value, MAX_VALUE))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::model::Severity;

    fn rule(kind: InvariantKind, expr: &str, within: Option<u64>) -> Invariant {
        Invariant {
            name: format!("{} {expr}", kind.name()),
            kind,
            expr: expr.into(),
            within,
            severity: Severity::High,
            milestone: true,
        }
    }

    fn obs(score: f64, level: u64) -> Observation {
        Observation {
            text: format!("Level {level}"),
            actions: vec!["up".into()],
            state: serde_json::json!({"score": score, "level": level}),
            score,
        }
    }

    #[test]
    fn each_kind_breaks_when_it_should_with_the_values_it_read() {
        let mut rules = Invariants::new(&[
            rule(
                InvariantKind::Always,
                "obs.state.score >= prev.state.score",
                None,
            ),
            rule(InvariantKind::Never, "obs.state.level > 3", None),
        ]);
        let (broken, notes) = rules.check(&obs(4.0, 1), 2, Some(&obs(8.0, 1)), 2);
        assert!(notes.is_empty(), "{notes:?}");
        assert_eq!(broken.len(), 1);
        assert_eq!(
            broken[0].detail,
            "always `obs.state.score >= prev.state.score` was false: obs.state.score = 4.0; prev.state.score = 8.0"
        );
        let (broken, _) = rules.check(&obs(9.0, 4), 3, Some(&obs(4.0, 1)), 3);
        assert_eq!(broken.len(), 1);
        assert!(
            broken[0]
                .detail
                .starts_with("never `obs.state.level > 3` was true"),
            "{}",
            broken[0].detail
        );
    }

    #[test]
    fn eventually_breaks_once_per_episode_when_its_window_passes() {
        let mut rules = Invariants::new(&[rule(
            InvariantKind::Eventually,
            "obs.state.level >= 2",
            Some(2),
        )]);
        assert!(rules.check(&obs(0.0, 1), 1, None, 1).0.is_empty());
        let (broken, _) = rules.check(&obs(0.0, 1), 2, Some(&obs(0.0, 1)), 2);
        assert_eq!(broken.len(), 1, "not within 2");
        assert!(
            rules
                .check(&obs(0.0, 1), 3, Some(&obs(0.0, 1)), 3)
                .0
                .is_empty(),
            "said once"
        );
        rules.reset();
        assert!(
            rules.check(&obs(0.0, 2), 1, None, 4).0.is_empty(),
            "held in time"
        );
        assert!(rules.check(&obs(0.0, 1), 2, None, 5).0.is_empty());
        assert_eq!(
            rules.milestones().values().copied().collect::<Vec<_>>(),
            [4]
        );
    }

    #[test]
    fn sometimes_is_remembered_and_an_expression_that_fails_breaks_nothing() {
        let mut rules = Invariants::new(&[
            rule(InvariantKind::Sometimes, "obs.state.level == 3", None),
            rule(
                InvariantKind::Always,
                "prev.state.level <= obs.state.level",
                None,
            ),
        ]);
        let (broken, notes) = rules.check(&obs(0.0, 1), 1, None, 1);
        assert!(broken.is_empty(), "{broken:?}");
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(
            notes[0].contains("could not be evaluated at step 1"),
            "{}",
            notes[0]
        );
        assert!(
            rules.check(&obs(0.0, 1), 2, None, 2).1.is_empty(),
            "said once"
        );
        assert_eq!(
            rules.sometimes().values().copied().collect::<Vec<_>>(),
            [false]
        );
        // Failed on everything so far: it judged nothing, and says so.
        let unjudged = rules.unjudged();
        assert_eq!(unjudged.len(), 1, "{unjudged:?}");
        assert!(
            unjudged[0].starts_with(
                "invariant `always prev.state.level <= obs.state.level` judged nothing"
            ) && unjudged[0].contains("(first at step 1: "),
            "{}",
            unjudged[0]
        );
        rules.check(&obs(0.0, 3), 3, Some(&obs(0.0, 1)), 3);
        assert!(rules.unjudged().is_empty(), "it judged step 3");
        assert_eq!(
            rules.sometimes().values().copied().collect::<Vec<_>>(),
            [true]
        );
    }
}

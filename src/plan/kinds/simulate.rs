//! The plan side of `simulate`: many seeded games without a model, how many,
//! with which players, how many at once and how long each.

use super::{OwnKey, PlanKind, SEED, StepCheck};
use crate::plan::decode::{Spanned, TableReader};
use crate::plan::diagnostic::{Diagnostic, Diagnostics};

pub struct Simulate;

/// The player kinds a simulation may use: none needs a model.
const STRATEGIES: [&str; 2] = ["random", "explorer"];

/// A simulate step's keys as written.
#[derive(Debug, Clone, PartialEq)]
pub struct SimulateKeys {
    pub games: Option<u64>,
    pub strategies: Vec<Spanned<String>>,
    pub workers: Option<Spanned<u64>>,
    pub max_steps: Option<Spanned<u64>>,
    pub seed: Option<i64>,
}

/// A simulate step's settings, defaults filled in.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize)]
pub struct SimulateParams {
    pub games: u64,
    pub strategies: Vec<String>,
    pub workers: u64,
    pub max_steps: u64,
    pub seed: Option<i64>,
}

impl super::ParamsJson for SimulateParams {}

impl PlanKind for Simulate {
    const DOC: &'static str = "Plays many seeded games without a model: a mechanics test.";
    const KEYS: &'static [OwnKey] = &[
        OwnKey {
            name: "games",
            schema: r#"{"type": "integer", "minimum": 1}"#,
            doc: "How many seeded games (default 100).",
            sample: "1000",
        },
        OwnKey {
            name: "strategies",
            schema: r#"{"type": "array", "items": {"type": "string", "enum": ["random", "explorer"]}}"#,
            doc: "Player kinds the games are spread across (default [\"random\"]).",
            sample: r#"["random", "explorer"]"#,
        },
        OwnKey {
            name: "workers",
            schema: r#"{"type": "integer", "minimum": 1}"#,
            doc: "Game processes at once (default 2).",
            sample: "2",
        },
        OwnKey {
            name: "max_steps",
            schema: r#"{"type": "integer", "minimum": 1}"#,
            doc: "Actions per game before it counts as truncated (default 50).",
            sample: "50",
        },
        SEED,
    ];
    const PLAYS: bool = true;
    type Keys = SimulateKeys;
    type Params = SimulateParams;

    fn decode(t: &mut TableReader<'_>, diags: &mut Diagnostics) -> SimulateKeys {
        SimulateKeys {
            games: t.optional("games", diags),
            strategies: t.optional("strategies", diags).unwrap_or_default(),
            workers: t.optional("workers", diags),
            max_steps: t.optional("max_steps", diags),
            seed: t.optional("seed", diags),
        }
    }

    fn check(keys: &SimulateKeys, cx: &mut StepCheck<'_, '_>) -> SimulateParams {
        for (key, value) in [("workers", &keys.workers), ("max_steps", &keys.max_steps)] {
            if let Some(v) = value.as_ref().filter(|v| v.value == 0) {
                cx.v.push(
                    Diagnostic::new("plan::invalid_value", format!("`{key}` must be at least 1"))
                        .at(v.span)
                        .label("zero"),
                );
            }
        }
        for strategy in &keys.strategies {
            if !STRATEGIES.contains(&strategy.value.as_str()) {
                cx.v.push(
                    Diagnostic::new("plan::invalid_value", format!("unknown strategy `{}`", strategy.value))
                        .at(strategy.span)
                        .label("not a strategy")
                        .help("simulate plays with player kinds that need no model: `random` or `explorer`"),
                );
            }
        }
        if keys.games == Some(0) {
            cx.v.push(
                Diagnostic::new("plan::invalid_value", "`games` must be at least 1")
                    .at(cx.step.kind.span)
                    .label("simulates nothing"),
            );
        }
        SimulateParams {
            games: keys.games.unwrap_or(100),
            strategies: if keys.strategies.is_empty() {
                vec!["random".to_owned()]
            } else {
                keys.strategies.iter().map(|x| x.value.clone()).collect()
            },
            workers: keys.workers.as_ref().map_or(2, |w| w.value),
            max_steps: keys.max_steps.as_ref().map_or(50, |m| m.value),
            seed: keys.seed,
        }
    }
}

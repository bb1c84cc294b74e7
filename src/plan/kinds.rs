//! The plan side of each step kind, in one table: the keys a kind accepts
//! beyond the common step keys, their schema and documentation, and the
//! kind's plan-level traits (moves money, plays a game, always runs).
//!
//! The decoder (which keys a step of a kind may write, and which a step of an
//! unknown kind is not blamed for), the validator (money steps take no
//! `retries`, a playing step needs a `[game]`, `finish` always runs) and the
//! schema generator (`schemas/plan.schema.json`) all read [`KIND_TABLE`], so
//! a new key cannot reach one and miss another. The tests below decode every
//! key of every kind from its `sample` and check the decoder agrees with the
//! table both ways.

use super::raw::StepKind;

/// One key a step kind accepts beyond the common step keys.
#[derive(Debug)]
pub struct OwnKey {
    pub name: &'static str,
    /// Its JSON Schema, as JSON text.
    pub schema: &'static str,
    /// What it means (shown by editors).
    pub doc: &'static str,
    /// A valid value, as TOML, for the tests.
    pub sample: &'static str,
}

/// One step kind as the plan sees it.
#[derive(Debug)]
pub struct KindRow {
    pub kind: StepKind,
    pub doc: &'static str,
    pub keys: &'static [OwnKey],
    /// Moves money: never retried (a retry could charge twice).
    pub moves_money: bool,
    /// Plays the game: the plan needs a `[game]`.
    pub plays: bool,
    /// Runs even when what it needs failed (`finish` settles every job).
    pub always: bool,
}

const SEED: OwnKey = OwnKey {
    name: "seed",
    schema: r#"{"type": "integer"}"#,
    doc: "The seed the game is reset with (and players draw from).",
    sample: "7",
};

/// Every kind, in the order of [`StepKind::ALL`].
pub const KIND_TABLE: [KindRow; 9] = [
    KindRow {
        kind: StepKind::Command,
        doc: "Runs a shell line or an argv.",
        keys: &[
            OwnKey {
                name: "run",
                schema: r#"{"type": "string"}"#,
                doc: "A shell command (run with sh -c).",
                sample: r#""make game""#,
            },
            OwnKey {
                name: "argv",
                schema: r#"{"type": "array", "items": {"type": "string"}, "minItems": 1}"#,
                doc: "A program and its arguments, run without a shell.",
                sample: r#"["make", "game"]"#,
            },
            OwnKey {
                name: "inputs",
                schema: r#"{"type": "array", "items": {"type": "string"}}"#,
                doc: "Globs of files whose content the result depends on; \"$NAME\" keys on an environment variable.",
                sample: r#"["src/**"]"#,
            },
            OwnKey {
                name: "outputs",
                schema: r#"{"type": "array", "items": {"type": "string"}}"#,
                doc: "Globs of files the step produces; stored and restored on reuse.",
                sample: r#"["build/game"]"#,
            },
            OwnKey {
                name: "cwd",
                schema: r#"{"type": "string"}"#,
                doc: "Working directory, inside the repo.",
                sample: r#""src""#,
            },
        ],
        moves_money: false,
        plays: false,
        always: false,
    },
    KindRow {
        kind: StepKind::Estimate,
        doc: "Prices the cells that will run before anything is charged.",
        keys: &[],
        moves_money: true,
        plays: false,
        always: false,
    },
    KindRow {
        kind: StepKind::Register,
        doc: "Buys the job (idempotent).",
        keys: &[],
        moves_money: true,
        plays: false,
        always: false,
    },
    KindRow {
        kind: StepKind::Play,
        doc: "Plays one cell: a persona and a controller against the game.",
        keys: &[
            OwnKey {
                name: "persona",
                schema: r#"{"type": "string"}"#,
                doc: "The persona that plays (default: the matrix's `persona` axis).",
                sample: r#""kid""#,
            },
            OwnKey {
                name: "controller",
                schema: r#"{"type": "string", "enum": ["standard", "jev", "rune"]}"#,
                doc: "How the player's next action is chosen (default: the matrix's `controller` axis).",
                sample: r#""jev""#,
            },
            SEED,
        ],
        moves_money: false,
        plays: true,
        always: false,
    },
    KindRow {
        kind: StepKind::Deliver,
        doc: "Uploads one cell's artifacts and completes its run.",
        keys: &[],
        moves_money: false,
        plays: false,
        always: false,
    },
    KindRow {
        kind: StepKind::Aggregate,
        doc: "Merges the play reports.",
        keys: &[],
        moves_money: false,
        plays: false,
        always: false,
    },
    KindRow {
        kind: StepKind::Gate,
        doc: "Judges the findings through one gate's lenses.",
        keys: &[OwnKey {
            name: "gate",
            schema: r#"{"type": "string"}"#,
            doc: "The gate this step judges (default: the gate named like the step).",
            sample: r#""blockers""#,
        }],
        moves_money: false,
        plays: false,
        always: false,
    },
    KindRow {
        kind: StepKind::Finish,
        doc: "Settles the job exactly once.",
        keys: &[],
        moves_money: true,
        plays: false,
        always: true,
    },
    KindRow {
        kind: StepKind::Simulate,
        doc: "Plays many seeded games without a model: a mechanics test.",
        keys: &[
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
        ],
        moves_money: false,
        plays: true,
        always: false,
    },
];

/// The row of `kind`.
pub fn row(kind: StepKind) -> &'static KindRow {
    KIND_TABLE
        .iter()
        .find(|r| r.kind == kind)
        .unwrap_or(&KIND_TABLE[0])
}

/// Every key some kind accepts: a step whose kind could not be read is not
/// blamed for any of them.
pub fn every_own_key() -> impl Iterator<Item = &'static str> {
    KIND_TABLE
        .iter()
        .flat_map(|r| r.keys.iter().map(|k| k.name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::diagnostic::Diagnostics;

    fn decode(kind: &str, key: &str, sample: &str) -> Vec<String> {
        let text = format!("id = \"s\"\nkind = \"{kind}\"\n{key} = {sample}\n");
        let mut diags = Diagnostics::default();
        let node = crate::plan::node::from_toml(&text, &mut diags).expect("toml");
        let _ =
            <crate::plan::raw::RawStep as crate::plan::decode::Decode>::decode(&node, &mut diags);
        diags
            .into_vec()
            .into_iter()
            .map(|d| d.code.to_owned())
            .collect()
    }

    #[test]
    fn the_table_has_one_row_per_kind_in_order() {
        let kinds: Vec<StepKind> = KIND_TABLE.iter().map(|r| r.kind).collect();
        let all: Vec<StepKind> = StepKind::ALL.iter().map(|(_, k)| *k).collect();
        assert_eq!(kinds, all);
    }

    #[test]
    fn the_decoder_accepts_exactly_the_keys_of_the_table() {
        for row in &KIND_TABLE {
            let name = row.kind.name();
            for key in row.keys {
                let codes = decode(name, key.name, key.sample);
                assert!(
                    !codes
                        .iter()
                        .any(|c| c == "plan::unknown_key" || c == "plan::wrong_type"),
                    "`{}` of a {name} step, decoded from its sample, gives {codes:?}",
                    key.name
                );
            }
            for other in every_own_key().filter(|k| row.keys.iter().all(|own| own.name != *k)) {
                let codes = decode(name, other, "1");
                assert!(
                    codes.iter().any(|c| c == "plan::unknown_key"),
                    "a {name} step accepts `{other}`, which its row does not list"
                );
            }
        }
    }

    #[test]
    fn every_schema_and_sample_parses() {
        for row in &KIND_TABLE {
            for key in row.keys {
                let schema: serde_json::Value =
                    serde_json::from_str(key.schema).expect("schema is JSON");
                assert!(schema.is_object(), "{}", key.name);
                let sample = format!("v = {}", key.sample);
                assert!(sample.parse::<toml::Table>().is_ok(), "{}", key.name);
            }
        }
    }
}

//! The registry of step kinds as the plan sees them: each kind's keys
//! beyond the common step keys, their schema and documentation, how they are
//! decoded and checked, and the kind's plan-level traits (moves money, plays
//! a game, always runs).
//!
//! A kind's plan side is one file here implementing [`PlanKind`]; its run
//! side is one file under `steps/`. The `registry!` line below lists every
//! kind once and generates from it [`StepKind`], the raw keys
//! ([`RawParams`]), the checked settings ([`Params`]) and the dispatch
//! between them, so every `match` on a kind is exhaustive and the compiler
//! points at each one a new kind must answer. The decoder (which keys a step
//! of a kind may write, and which a step of an unknown kind is not blamed
//! for), the validator and the schema generator (`schemas/plan.schema.json`)
//! all read the same [`PlanKind::KEYS`]; the tests below decode every key of
//! every kind from its `sample` and check the decoder agrees with the keys
//! both ways.

use std::fmt::Debug;

use schemars::JsonSchema;
use serde::{Serialize, Serializer};

use super::decode::TableReader;
use super::diagnostic::Diagnostics;
use super::raw::RawStep;
use super::validate::{Refs, Validator};

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

/// The `seed` key, which `play` and `simulate` share.
pub(super) const SEED: OwnKey = OwnKey {
    name: "seed",
    schema: r#"{"type": "integer"}"#,
    doc: "The seed the game is reset with (and players draw from).",
    sample: "7",
};

/// One step kind as the plan sees it: the one trait a kind's plan file
/// implements.
pub trait PlanKind {
    /// What the kind does, for the schema (shown by editors).
    const DOC: &'static str;
    /// The keys it accepts beyond the common step keys.
    const KEYS: &'static [OwnKey] = &[];
    /// Moves money: never retried (a retry could charge twice).
    const MOVES_MONEY: bool = false;
    /// Plays the game: the plan needs a `[game]`.
    const PLAYS: bool = false;
    /// Runs even when what it needs failed (`finish` settles every job).
    const ALWAYS: bool = false;
    /// Its keys as written, with their spans.
    type Keys: Debug + Clone + PartialEq;
    /// Its settings as the engine sees them.
    type Params: Debug + Clone + PartialEq + Default + ParamsJson;
    /// Reads its keys from the step's table (each one in [`Self::KEYS`]).
    fn decode(t: &mut TableReader<'_>, diags: &mut Diagnostics) -> Self::Keys;
    /// Checks its keys against the plan and gives its settings; problems go
    /// to `cx` (the settings are used only when there are none).
    fn check(keys: &Self::Keys, cx: &mut StepCheck<'_, '_>) -> Self::Params;
}

/// A kind's own settings taken out of a step's [`Params`], by the kind:
/// the one conversion every kind's run side uses
/// ([`crate::plan::model::Step::settings`]).
pub trait OwnParams: PlanKind {
    const KIND: StepKind;
    fn own(params: &Params) -> Option<&Self::Params>;
}

/// What a kind's [`PlanKind::check`] sees: the validator (which reports and
/// knows the repo), the step, the plan's other steps, and the names the plan
/// defines.
pub struct StepCheck<'c, 'v> {
    pub(super) v: &'c mut Validator<'v>,
    pub step: &'c RawStep,
    pub all: &'c [RawStep],
    pub(super) refs: &'c Refs<'c>,
}

/// The settings of a kind with no keys of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NoParams;

/// A kind with no keys of its own: its unit struct and its [`PlanKind`],
/// which decodes nothing and checks into [`NoParams`]; the kinds differ
/// only in their doc and the traits they set (`MOVES_MONEY`, `ALWAYS`).
macro_rules! keyless {
    ($kind:ident, $doc:literal $(, $trait:ident)*) => {
        pub struct $kind;

        impl super::PlanKind for $kind {
            const DOC: &'static str = $doc;
            $(const $trait: bool = true;)*
            type Keys = ();
            type Params = super::NoParams;

            fn decode(
                _: &mut crate::plan::decode::TableReader<'_>,
                _: &mut crate::plan::diagnostic::Diagnostics,
            ) {
            }

            fn check((): &(), _: &mut super::StepCheck<'_, '_>) -> super::NoParams {
                super::NoParams
            }
        }
    };
}

/// How a kind's settings appear in the model's JSON (which the plan's hash
/// is taken of): `{"KIND": {…}}`, or `"none"` for a kind without settings,
/// as they always have, so a run begun by an older gameplan still resumes.
pub trait ParamsJson: Serialize {
    fn serialize_as<S: Serializer>(&self, kind: &'static str, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_newtype_variant("Params", 0, kind, self)
    }
}

impl Serialize for NoParams {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_unit()
    }
}

impl ParamsJson for NoParams {
    fn serialize_as<S: Serializer>(&self, _: &'static str, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_unit_variant("Params", 0, "none")
    }
}

/// One step kind's plan-level traits, read from its [`PlanKind`].
#[derive(Debug)]
pub struct KindRow {
    pub kind: StepKind,
    pub doc: &'static str,
    pub keys: &'static [OwnKey],
    pub moves_money: bool,
    pub plays: bool,
    pub always: bool,
}

/// Lists every kind once: its name in a plan, its variant, and the file of
/// its plan side. Adding a kind is a line here, its file beside these, and
/// its run side under `steps/`.
macro_rules! registry {
    ($($name:literal => $Kind:ident in $file:ident,)*) => {
        $(pub mod $file;)*

        /// The step kinds (docs/plans.md › Steps and `needs`).
        #[derive(
            Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, JsonSchema, Serialize,
        )]
        pub enum StepKind {
            $(#[serde(rename = $name)] $Kind,)*
        }

        impl StepKind {
            /// Every kind with its name, in the registry's order.
            pub const ALL: &'static [(&'static str, StepKind)] = &[$(($name, StepKind::$Kind),)*];
        }

        /// Every kind's row, in the order of [`StepKind::ALL`].
        pub const KIND_TABLE: &[KindRow] = &[$(KindRow {
            kind: StepKind::$Kind,
            doc: <$file::$Kind as PlanKind>::DOC,
            keys: <$file::$Kind as PlanKind>::KEYS,
            moves_money: <$file::$Kind as PlanKind>::MOVES_MONEY,
            plays: <$file::$Kind as PlanKind>::PLAYS,
            always: <$file::$Kind as PlanKind>::ALWAYS,
        },)*];

        /// A step's own keys as written, by kind.
        #[derive(Debug, Clone, PartialEq)]
        pub enum RawParams {
            $($Kind(<$file::$Kind as PlanKind>::Keys),)*
        }

        impl RawParams {
            /// Reads the keys of a step of `kind` from its table.
            pub fn decode(kind: StepKind, t: &mut TableReader<'_>, diags: &mut Diagnostics) -> Self {
                match kind {
                    $(StepKind::$Kind => RawParams::$Kind(<$file::$Kind as PlanKind>::decode(t, diags)),)*
                }
            }
        }

        /// A step kind's own settings, checked.
        #[derive(Debug, Clone, PartialEq)]
        pub enum Params {
            $($Kind(<$file::$Kind as PlanKind>::Params),)*
        }

        impl Params {
            /// The settings a step of `kind` has when the plan writes none
            /// (the steps gameplan makes for a plan without `[[steps]]`).
            pub fn empty(kind: StepKind) -> Self {
                match kind {
                    $(StepKind::$Kind => Params::$Kind(Default::default()),)*
                }
            }

            /// Checks a step's keys: its settings, problems reported to `cx`.
            pub fn check(keys: &RawParams, cx: &mut StepCheck<'_, '_>) -> Self {
                match keys {
                    $(RawParams::$Kind(k) => Params::$Kind(<$file::$Kind as PlanKind>::check(k, cx)),)*
                }
            }
        }

        impl Serialize for Params {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                match self {
                    $(Params::$Kind(p) => p.serialize_as($name, s),)*
                }
            }
        }

        $(impl OwnParams for $file::$Kind {
            const KIND: StepKind = StepKind::$Kind;
            fn own(params: &Params) -> Option<&Self::Params> {
                match params {
                    Params::$Kind(p) => Some(p),
                    _ => None,
                }
            }
        })*
    };
}

registry! {
    "command" => Command in command,
    "estimate" => Estimate in estimate,
    "register" => Register in register,
    "play" => Play in play,
    "deliver" => Deliver in deliver,
    "aggregate" => Aggregate in aggregate,
    "gate" => Gate in gate,
    "finish" => Finish in finish,
    "simulate" => Simulate in simulate,
}

impl StepKind {
    /// The kind's name in a plan (`kind = "…"`).
    pub fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, k)| *k == self)
            .map_or("?", |(n, _)| n)
    }

    /// The kind's plan-level traits.
    pub fn row(self) -> &'static KindRow {
        // The table is generated in the enum's order.
        &KIND_TABLE[self as usize]
    }

    /// Steps that move money: never retried, because a retry could charge twice.
    pub fn moves_money(self) -> bool {
        self.row().moves_money
    }
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
        for row in KIND_TABLE {
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
        for row in KIND_TABLE {
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

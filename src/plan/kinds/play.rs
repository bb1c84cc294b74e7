//! The plan side of `play`: one cell, a persona and a controller against the
//! game, each named here or taken from the step's matrix.

use super::{OwnKey, PlanKind, SEED, StepCheck};
use crate::plan::decode::{Spanned, TableReader};
use crate::plan::diagnostic::Diagnostics;
use crate::plan::model::Controller;

pub struct Play;

/// A play step's keys as written.
#[derive(Debug, Clone, PartialEq)]
pub struct PlayKeys {
    pub persona: Option<Spanned<String>>,
    pub controller: Option<Spanned<String>>,
    pub seed: Option<i64>,
}

/// A play step's settings; `None`: the matrix's axis of that name.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize)]
pub struct PlayParams {
    pub persona: Option<String>,
    pub controller: Option<Controller>,
    pub seed: Option<i64>,
}

impl super::ParamsJson for PlayParams {}

impl PlanKind for Play {
    const DOC: &'static str = "Plays one cell: a persona and a controller against the game.";
    const KEYS: &'static [OwnKey] = &[
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
    ];
    const PLAYS: bool = true;
    type Keys = PlayKeys;
    type Params = PlayParams;

    fn decode(t: &mut TableReader<'_>, diags: &mut Diagnostics) -> PlayKeys {
        PlayKeys {
            persona: t.optional("persona", diags),
            controller: t.optional("controller", diags),
            seed: t.optional("seed", diags),
        }
    }

    fn check(keys: &PlayKeys, cx: &mut StepCheck<'_, '_>) -> PlayParams {
        if let (Some(p), true) = (&keys.persona, cx.refs.readable("personas")) {
            cx.v.reference(p, cx.refs.personas, "plan::unknown_persona", "persona");
        }
        let controller = keys
            .controller
            .as_ref()
            .and_then(|c| cx.v.controller(c, cx.refs));
        PlayParams {
            persona: keys.persona.as_ref().map(|p| p.value.clone()),
            controller,
            seed: keys.seed,
        }
    }
}

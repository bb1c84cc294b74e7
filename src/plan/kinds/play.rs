//! The plan side of `play`: one cell, a persona and a controller against the
//! game, each named here or taken from the step's matrix.

use super::{OwnKey, PlanKind, SEED, StepCheck};
use crate::plan::decode::{Spanned, TableReader};
use crate::plan::diagnostic::{Diagnostic, Diagnostics};
use crate::plan::model::Controller;

pub struct Play;

/// A play step's keys as written.
#[derive(Debug, Clone, PartialEq)]
pub struct PlayKeys {
    pub persona: Option<Spanned<String>>,
    pub controller: Option<Spanned<String>>,
    pub seed: Option<i64>,
    pub repeat: Option<Spanned<u64>>,
}

/// The most plays of one cell `repeat` asks for: past it, a flaky label
/// says no more than a smaller count would, and the plan's size limit
/// (`MAX_EXPANDED_STEPS`) is the better guard.
pub const MAX_REPEAT: u64 = 100;

/// A play step's settings; `None`: the matrix's axis of that name.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize)]
pub struct PlayParams {
    pub persona: Option<String>,
    pub controller: Option<Controller>,
    pub seed: Option<i64>,
    /// Plays each cell this many times, with seeds derived from the cell's
    /// (the step's matrix gains a `repeat` axis; docs/invariants.md ›
    /// Repeats). Left out of the model's JSON when absent, so plans without
    /// it keep their hash.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repeat: Option<u32>,
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
        OwnKey {
            name: "repeat",
            schema: r#"{"type": "integer", "minimum": 1, "maximum": 100}"#,
            doc: "Plays each cell this many times, each with a seed derived from the cell's; a finding is then labelled `stable` (met in every repeat) or `flaky k/N`.",
            sample: "3",
        },
    ];
    const PLAYS: bool = true;
    type Keys = PlayKeys;
    type Params = PlayParams;

    fn decode(t: &mut TableReader<'_>, diags: &mut Diagnostics) -> PlayKeys {
        PlayKeys {
            persona: t.optional("persona", diags),
            controller: t.optional("controller", diags),
            seed: t.optional("seed", diags),
            repeat: t.optional("repeat", diags),
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
            repeat: keys.repeat.as_ref().and_then(|r| repeat(r, cx)),
        }
    }
}

/// `repeat`: 1 to [`MAX_REPEAT`], and the `repeat` axis is its own (a
/// matrix that names one too would play each cell twice as often as
/// written, or never say which count is meant).
fn repeat(r: &Spanned<u64>, cx: &mut StepCheck<'_, '_>) -> Option<u32> {
    if !(1..=MAX_REPEAT).contains(&r.value) {
        cx.v.push(
            Diagnostic::new(
                "plan::invalid_value",
                format!("`repeat` must be from 1 to {MAX_REPEAT}, not {}", r.value),
            )
            .at(r.span)
            .label("plays of each cell")
            .help("3 to 10 plays tell a flaky finding from a stable one; more belongs in a `simulate` step"),
        );
        return None;
    }
    if let Some(axis) = cx
        .step
        .matrix
        .as_ref()
        .and_then(|m| m.value.iter().find(|(name, _)| name.value == REPEAT_AXIS))
    {
        cx.v.push(
            Diagnostic::new(
                "plan::conflicting_keys",
                format!("step `{}` has both `repeat` and a matrix axis `repeat`", cx.step.id.value),
            )
            .at(axis.0.span)
            .label("the axis `repeat = N` makes")
            .help("drop the axis: `repeat = N` adds it, with seeds derived from the cell's"),
        );
        return None;
    }
    u32::try_from(r.value).ok()
}

/// The matrix axis `repeat = N` adds to its step: values `1` to `N`.
pub const REPEAT_AXIS: &str = "repeat";

//! The plan side of `gate`: which of the plan's gates the step judges.

use super::{OwnKey, PlanKind, StepCheck};
use crate::plan::decode::{Spanned, TableReader};
use crate::plan::diagnostic::{Diagnostic, Diagnostics, one_of};

pub struct Gate;

/// A gate step's keys as written.
#[derive(Debug, Clone, PartialEq)]
pub struct GateKeys {
    pub gate: Option<Spanned<String>>,
}

impl GateKeys {
    /// Whether a step `id` with these keys judges the gate `name`: the gate
    /// it names, or the gate named like the step.
    pub fn judges(&self, id: &str, name: &str) -> bool {
        match &self.gate {
            Some(g) => g.value == name,
            None => id == name,
        }
    }
}

/// A gate step's settings: the gate it judges.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize)]
pub struct GateParams {
    pub gate: String,
}

impl super::ParamsJson for GateParams {}

impl PlanKind for Gate {
    const DOC: &'static str = "Judges the findings through one gate's lenses.";
    const KEYS: &'static [OwnKey] = &[OwnKey {
        name: "gate",
        schema: r#"{"type": "string"}"#,
        doc: "The gate this step judges (default: the gate named like the step).",
        sample: r#""blockers""#,
    }];
    type Keys = GateKeys;
    type Params = GateParams;

    fn decode(t: &mut TableReader<'_>, diags: &mut Diagnostics) -> GateKeys {
        GateKeys {
            gate: t.optional("gate", diags),
        }
    }

    fn check(keys: &GateKeys, cx: &mut StepCheck<'_, '_>) -> GateParams {
        let s = cx.step;
        let gate = match &keys.gate {
            Some(g) => {
                if cx.refs.readable("gates") {
                    cx.v.reference(g, cx.refs.gates, "plan::unknown_gate", "gate");
                }
                g.value.clone()
            }
            None if cx.refs.gates.contains(&s.id.value.as_str()) || !cx.refs.readable("gates") => {
                s.id.value.clone()
            }
            None => {
                cx.v.push(
                    Diagnostic::new(
                        "plan::missing_key",
                        format!("gate step `{}` does not say which gate it judges", s.id.value),
                    )
                    .at(s.kind.span)
                    .help(format!(
                        "add `gate = \"NAME\"`; the plan's gates are {}",
                        one_of(cx.refs.gates)
                    )),
                );
                String::new()
            }
        };
        GateParams { gate }
    }
}

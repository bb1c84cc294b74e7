//! `[[invariants]]`: each rule read into the model, every problem pointed
//! at its key (a rule missing or doubled, `within` where it means nothing,
//! a severity or an expression gameplan cannot read, a field an
//! observation never has).

use super::Validator;
use crate::plan::decode::Spanned;
use crate::plan::diagnostic::{Diagnostic, did_you_mean, one_of};
use crate::plan::model::{Invariant, InvariantKind, Severity, observation_paths};
use crate::plan::raw::{RawInvariant, RawPlan};

/// What an observation has: the fields an expression reads after `obs.`
/// or `prev.`.
pub const OBSERVATION_FIELDS: [&str; 5] = ["text", "actions", "state", "score", "step"];

/// The longest name an invariant may have: it is a finding's title.
const MAX_NAME: usize = 120;

impl Validator<'_> {
    /// The plan's invariants, checked (none when the plan has a problem).
    pub(super) fn invariants(&mut self, raw: &RawPlan) -> Vec<Invariant> {
        let mut seen: Vec<&Spanned<String>> = Vec::new();
        let mut read = Vec::new();
        for inv in &raw.invariants {
            if let Some(earlier) = seen.iter().find(|n| n.value == inv.name.value) {
                let (line, _) = self.source.line_col(earlier.span.start);
                self.push(
                    Diagnostic::new(
                        "plan::duplicate",
                        format!("duplicate invariant name `{}`", inv.name.value),
                    )
                    .at(inv.name.span)
                    .label(format!("already defined on line {line}"))
                    .help(
                        "each invariant's name must be unique: a finding names the rule it broke",
                    ),
                );
            }
            seen.push(&inv.name);
            if let Some(invariant) = self.invariant(inv) {
                read.push(invariant);
            }
        }
        read
    }

    fn invariant(&mut self, inv: &RawInvariant) -> Option<Invariant> {
        let name = inv.name.value.trim();
        if name.is_empty() || name.chars().count() > MAX_NAME || name.contains('\n') {
            self.push(
                Diagnostic::new("plan::invalid_name", "invalid invariant name")
                    .at(inv.name.span)
                    .label("empty, over 120 characters, or more than one line")
                    .help("say the rule in a few words on one line, e.g. `name = \"score never goes down\"`"),
            );
        }
        let rules: Vec<(InvariantKind, &Spanned<String>)> = [
            (InvariantKind::Always, &inv.always),
            (InvariantKind::Never, &inv.never),
            (InvariantKind::Eventually, &inv.eventually),
            (InvariantKind::Sometimes, &inv.sometimes),
        ]
        .into_iter()
        .filter_map(|(kind, expr)| expr.as_ref().map(|e| (kind, e)))
        .collect();
        let keys = one_of(&InvariantKind::ALL.map(InvariantKind::name));
        let Some(&(kind, expr)) = rules.first() else {
            self.push(
                Diagnostic::new(
                    "plan::missing_key",
                    format!("invariant `{}` states no rule", inv.name.value),
                )
                .at(inv.name.span)
                .label("no expression")
                .help(format!(
                    "give it one of {keys}, e.g. `always = \"obs.score >= 0\"`"
                )),
            );
            return None;
        };
        if let Some((second, extra)) = rules.get(1) {
            self.push(
                Diagnostic::new(
                    "plan::conflicting_keys",
                    format!(
                        "invariant `{}` has both `{}` and `{}`",
                        inv.name.value,
                        kind.name(),
                        second.name()
                    ),
                )
                .at(extra.span)
                .label("a second rule")
                .help("one rule per invariant: split it into two `[[invariants]]`"),
            );
        }
        let within = self.within(inv, kind);
        let severity = self.invariant_severity(inv);
        self.observation_expression(expr, kind.name());
        Some(Invariant {
            name: name.to_owned(),
            kind,
            expr: expr.value.clone(),
            within,
            severity: severity?,
            milestone: inv.milestone.unwrap_or(false),
        })
    }

    /// `within`: required by `eventually` (at least 1), meaningless elsewhere.
    fn within(&mut self, inv: &RawInvariant, kind: InvariantKind) -> Option<u64> {
        match (kind, &inv.within) {
            (InvariantKind::Eventually, Some(w)) if w.value >= 1 => Some(w.value),
            (InvariantKind::Eventually, Some(w)) => {
                self.push(
                    Diagnostic::new("plan::invalid_value", "`within` must be at least 1")
                        .at(w.span)
                        .label("no action to hold within")
                        .help("the number of actions after a reset by which the expression must have held"),
                );
                None
            }
            (InvariantKind::Eventually, None) => {
                self.push(
                    Diagnostic::new(
                        "plan::missing_key",
                        format!(
                            "invariant `{}` says `eventually` without `within`",
                            inv.name.value
                        ),
                    )
                    .at(inv.name.span)
                    .label("eventually by when?")
                    .help("add `within = N`: the actions after a reset by which it must have held"),
                );
                None
            }
            (_, Some(w)) => {
                self.push(
                    Diagnostic::new(
                        "plan::invalid_value",
                        format!("`within` means nothing for `{}`", kind.name()),
                    )
                    .at(w.span)
                    .label("only `eventually` has a window")
                    .help("remove `within`, or make the rule `eventually = \"...\"`"),
                );
                None
            }
            (_, None) => None,
        }
    }

    fn invariant_severity(&mut self, inv: &RawInvariant) -> Option<Severity> {
        let Some(given) = &inv.severity else {
            return Some(crate::plan::model::Category::Invariant.severity());
        };
        if let Some(s) = Severity::ALL.iter().find(|s| s.name() == given.value) {
            return Some(*s);
        }
        let names = Severity::ALL.map(Severity::name);
        let help = match did_you_mean(&given.value, names.iter().copied()) {
            Some(hint) => format!("{hint} (one of {})", one_of(&names)),
            None => format!("use one of {}", one_of(&names)),
        };
        self.push(
            Diagnostic::new(
                "plan::invalid_value",
                format!("unknown severity `{}`", given.value),
            )
            .at(given.span)
            .label("not a severity")
            .help(help),
        );
        None
    }

    /// An expression over `obs` and `prev` (an invariant's, the game's
    /// `goal`): it compiles, reads no other name, and names only fields an
    /// observation has. `key` names it in the message.
    pub(super) fn observation_expression(&mut self, expr: &Spanned<String>, key: &str) -> bool {
        let problem = match self
            .templates
            .check_expression(&expr.value, &["obs", "prev"])
        {
            Err(e) => Some((e.message, e.help)),
            Ok(()) => unknown_field(&expr.value).map(|(var, field)| {
                let hint = did_you_mean(&field, OBSERVATION_FIELDS.iter().copied());
                (
                    format!("`{var}` has no field `{field}`"),
                    Some(format!(
                        "{}an observation has {}; what a game reports of itself is under \
                         `{var}.state` (a stdio game's `state`, a web game's `game.probe`)",
                        hint.map(|h| format!("{h}; ")).unwrap_or_default(),
                        one_of(&OBSERVATION_FIELDS),
                    )),
                )
            }),
        };
        let Some((message, help)) = problem else {
            return true;
        };
        self.push(
            Diagnostic::new("plan::invalid_expression", format!("`{key}`: {message}"))
                .at(expr.span)
                .label("not an expression gameplan can evaluate")
                .help(help.unwrap_or_else(|| {
                    "write a boolean expression over `obs` (text, actions, state, score, step) \
                     and `prev`, e.g. `obs.state.level >= 2`"
                        .to_owned()
                })),
        );
        false
    }
}

/// The first `obs.FIELD` or `prev.FIELD` of `expr` whose field an
/// observation does not have, outside string literals.
fn unknown_field(expr: &str) -> Option<(String, String)> {
    observation_paths(expr).into_iter().find_map(|path| {
        let mut parts = path.split('.');
        let (var, field) = (parts.next()?, parts.next()?);
        (!OBSERVATION_FIELDS.contains(&field)).then(|| (var.to_owned(), field.to_owned()))
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_field_an_observation_lacks_is_named_outside_strings() {
        assert_eq!(
            super::unknown_field("obs.state.score >= 0 and prev.score <= obs.score"),
            None
        );
        assert_eq!(
            super::unknown_field("obs.scor > 1"),
            Some(("obs".into(), "scor".into()))
        );
        assert_eq!(super::unknown_field("'obs.nothing' in obs.text"), None);
        assert_eq!(
            super::unknown_field("x.obs.y or prev.stat"),
            Some(("prev".into(), "stat".into()))
        );
    }
}

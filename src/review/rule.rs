//! The `rule` lens: a minijinja expression over `unit` (and `reviewer` for a
//! reviewer's instance), evaluated through the project's one template
//! environment (`crate::template`: strict undefined, fuel). True is a
//! finding, false is clear; an expression that fails on a unit (a field the
//! unit lacks, a type error, fuel run out) leaves that unit missing with
//! the error named, never clear.

use serde_json::{Map, Value};

use super::judge::{Answer, RawFinding};
use super::verdict::Verdict;
use crate::template::{CompiledExpression, TemplateError, Templates};

/// A rule lens's `when`, compiled once for all its units.
pub struct Rule<'t> {
    lens: &'t str,
    when: &'t str,
    compiled: Result<CompiledExpression<'t>, TemplateError>,
    reviewer: minijinja::Value,
}

impl<'t> Rule<'t> {
    pub fn new(
        templates: &'t Templates,
        lens: &'t str,
        when: &'t str,
        reviewer: Option<&Value>,
    ) -> Rule<'t> {
        Rule {
            lens,
            when,
            compiled: templates.compile_expression(when),
            reviewer: minijinja::Value::from(minijinja::value::Serde(reviewer)),
        }
    }

    /// Judges one unit's `fields`.
    pub fn judge(&self, fields: &Map<String, Value>) -> Answer {
        let compiled = match &self.compiled {
            Ok(compiled) => compiled,
            Err(e) => {
                return Answer::Missing(format!("`when` failed on this unit: {}", e.message));
            }
        };
        let ctx = minijinja::context! {
            unit => minijinja::Value::from(minijinja::value::Serde(fields)),
            reviewer => self.reviewer.clone(),
        };
        match compiled.eval(ctx) {
            Ok(value) if value.is_true() => {
                let text = |key: &str| fields.get(key).and_then(Value::as_str).map(str::to_owned);
                let id = text("id").unwrap_or_default();
                Answer::Judged {
                    verdict: Verdict::Finding,
                    findings: vec![RawFinding {
                        title: text("title")
                            .unwrap_or_else(|| format!("`{}` matched {id}", self.lens)),
                        severity: text("severity").unwrap_or_else(|| "medium".to_owned()),
                        detail: Some(format!("`{}` is true for {id}", self.when)),
                        line: None,
                    }],
                }
            }
            Ok(_) => Answer::Judged {
                verdict: Verdict::Clear,
                findings: Vec::new(),
            },
            Err(e) => Answer::Missing(format!("`when` failed on this unit: {}", e.message)),
        }
    }
}

/// Judges one unit's `fields` with `when` (compiling it for this one unit).
pub fn judge(
    templates: &Templates,
    lens: &str,
    when: &str,
    fields: &Map<String, Value>,
    reviewer: Option<&Value>,
) -> Answer {
    Rule::new(templates, lens, when, reviewer).judge(fields)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn templates() -> Templates {
        Templates::new(
            std::collections::BTreeMap::new(),
            crate::template::Redactor::default(),
        )
    }

    fn fields(v: &Value) -> Map<String, Value> {
        v.as_object().cloned().expect("object")
    }

    #[test]
    fn true_is_a_finding_false_is_clear() {
        let t = templates();
        let unit = fields(&json!({"id": "a.rs", "text": "// TODO", "size": 7}));
        match judge(&t, "todo", "'TODO' in unit.text", &unit, None) {
            Answer::Judged { verdict, findings } => {
                assert_eq!(verdict, Verdict::Finding);
                assert_eq!(findings[0].title, "`todo` matched a.rs");
            }
            Answer::Missing(why) => panic!("missing: {why}"),
        }
        assert!(matches!(
            judge(&t, "big", "unit.size > 100", &unit, None),
            Answer::Judged {
                verdict: Verdict::Clear,
                ..
            }
        ));
    }

    #[test]
    fn an_expression_failing_on_a_unit_leaves_it_missing_with_the_error() {
        let t = templates();
        let unit = fields(&json!({"id": "a.rs", "text": "x", "size": 1}));
        let Answer::Missing(why) = judge(&t, "l", "unit.category == 'crash'", &unit, None) else {
            panic!("a missing field is not clear");
        };
        assert!(why.contains("`when` failed on this unit"), "{why}");
        assert!(
            why.contains("category") || why.contains("undefined"),
            "{why}"
        );
        let Answer::Missing(why) = judge(&t, "l", "unit.text + 1", &unit, None) else {
            panic!("a type error is not clear");
        };
        assert!(why.contains("`when` failed"), "{why}");
    }

    #[test]
    fn a_reviewer_instance_reads_its_reviewer() {
        let t = templates();
        let unit = fields(&json!({"id": "a.rs", "text": "x"}));
        let reviewer = json!({"slug": "grumpy", "card": "hates x"});
        assert!(matches!(
            judge(
                &t,
                "l",
                "reviewer.slug == 'grumpy' and unit.text in reviewer.card",
                &unit,
                Some(&reviewer)
            ),
            Answer::Judged {
                verdict: Verdict::Finding,
                ..
            }
        ));
    }
}

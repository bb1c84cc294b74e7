//! The `llm` lens: each unit is judged by a chat model through the one
//! OpenAI-compatible client ([`crate::llm::Client`]).
//!
//! Owns the lens's prompt (the charter rendered with the unit, inside a
//! wrapper that asks for the verdict JSON), reading the answer against the
//! verdict schema, and what the lens spent. Does not own the wire, retries
//! or prices (`llm`), nor unit reuse and dispositions (`judge`).
//!
//! # Design
//!
//! - **Prompt**: a system message ([`WRAPPER`], plus the reviewer's persona
//!   card for a reviewer's instance) and a user message: the charter,
//!   rendered by minijinja ([`crate::template::render_prompt`]: strict
//!   undefined, fuel, a size cap, no `secret()`) with `unit`, `reviewer`
//!   and `lens`; then the unit's fields as JSON, unless the charter reads
//!   `unit` itself. A prompt over [`MAX_PROMPT_BYTES`] is not sent.
//! - **Answer**: `{"verdict": "clear"|"finding"|"n/a", "findings":
//!   [{"title", "severity", "detail"?, "line"?}]}`, optionally inside a
//!   ```` ```json ```` fence. Anything else (prose, a missing title, a
//!   `clear` with findings, an unknown key) leaves the unit *missing* with
//!   why: a model that did not answer the question did not clear the unit.
//! - **Money**: one client per lens instance, bounded by what the gate's
//!   llm lenses have left of `budget.max_model_usd` ([`ModelBudget`]); the
//!   client refuses a call that could pass it, and that unit and every
//!   later one are left missing (the gate is INCOMPLETE, exit 2). Usage and
//!   cost are reported per lens in `review.json`.
//! - **Failures**: an endpoint that never answers (`Unreachable`, after the
//!   client's bounded retries) or refuses the request (a wrong key, an
//!   unknown model) stops the lens: repeating it for every unit would cost
//!   minutes and change nothing. The rest are missing; `Unreachable` is
//!   marked so the gate step ends exit 5.
//! - **Secrets**: the key is sent only in the `Authorization` header and is
//!   registered with the run's redactor, so no message, answer or dump
//!   holds it.

use std::path::Path;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::sync::watch;

use super::judge::{Answer, RawFinding};
use super::verdict::{Usage, Verdict};
use crate::llm::{Client, ClientConfig, LlmError, Message, Price};
use crate::plan::model::Card;
use crate::template::Redactor;

/// Tokens a verdict may take: a handful of findings.
pub const MAX_ANSWER_TOKENS: u32 = 1024;

/// The most bytes of prompt (charter and unit) one unit may send: a unit
/// larger than this is left missing rather than cut (a cut file could hide
/// exactly what the lens looks for).
pub const MAX_PROMPT_BYTES: usize = 48 * 1024;

/// How many findings one answer may list.
pub const MAX_FINDINGS: usize = 50;

/// The system message every llm lens sends: what to answer, and how.
/// It enters every unit key (see `judge::lens_digest`), so changing it
/// judges every unit afresh.
pub const WRAPPER: &str = r#"You are a code and game reviewer applying one review lens to one unit (a file, a playtest finding, a play report or a patch hunk). The user message holds the lens's charter (what to look for) and the unit.

Answer with one JSON object and nothing else:
{"verdict": "clear" | "finding" | "n/a", "findings": [{"title": "...", "severity": "low" | "medium" | "high" | "critical", "detail": "...", "line": 12}]}

- "clear": you looked and found nothing the charter asks about; "findings" is [].
- "finding": at least one problem the charter asks about; list each one.
- "n/a": the charter does not concern this unit; "findings" is [].
- "title" is one short sentence; "detail" (optional) says why; "line" (optional) is the 1-based line in the unit's text."#;

/// What a gate's llm lenses may spend together, and have spent.
#[derive(Debug, Default)]
pub struct ModelBudget {
    /// `budget.max_model_usd`.
    pub max_usd: Option<f64>,
    spent: Mutex<f64>,
}

impl ModelBudget {
    pub fn new(max_usd: Option<f64>) -> ModelBudget {
        ModelBudget {
            max_usd,
            spent: Mutex::new(0.0),
        }
    }

    fn spent(&self) -> f64 {
        *self.spent.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn add(&self, usd: f64) {
        *self.spent.lock().unwrap_or_else(PoisonError::into_inner) += usd;
    }

    /// What is left for the next lens, when there is a bound.
    fn left(&self) -> Option<f64> {
        self.max_usd.map(|max| (max - self.spent()).max(0.0))
    }
}

/// One llm lens instance, as the plan and the run give it.
pub struct LlmLens<'a> {
    pub root: &'a Path,
    /// The instance's name (`LENS@REVIEWER` for a reviewer's).
    pub name: &'a str,
    pub charter: &'a Card,
    pub model: &'a str,
    pub base_url: Option<&'a str>,
    pub api_key: Option<&'a str>,
    pub price: Option<Price>,
    /// Seconds one request may take.
    pub timeout_secs: Option<u64>,
    /// `{"slug", "card"}` of the reviewer judging, if any.
    pub reviewer: Option<&'a Value>,
    pub redactor: &'a Redactor,
    pub budget: &'a ModelBudget,
}

/// The lens's answers for the units it was given (by their index), and
/// what it spent.
pub struct Judged {
    pub answers: Vec<(usize, Answer)>,
    pub usage: Usage,
}

impl LlmLens<'_> {
    /// Judges `units` (`(index, id, fields)`) one call each, in order.
    pub async fn judge(
        &self,
        units: &[(usize, String, Map<String, Value>)],
        cancel: &watch::Receiver<bool>,
    ) -> Judged {
        let mut usage = Usage {
            model: Some(self.model.to_owned()),
            max_usd: self.budget.max_usd,
            ..Usage::default()
        };
        let mut answers = Vec::new();
        let charter = match self.charter_source() {
            Ok(charter) => charter,
            Err(why) => {
                answers.extend(
                    units
                        .iter()
                        .map(|(i, ..)| (*i, Answer::Missing(why.clone()))),
                );
                return Judged { answers, usage };
            }
        };
        let client = match Client::new(self.config(), self.redactor.clone()) {
            Ok(client) => client,
            Err(e) => {
                let why = format!("the lens cannot reach its model: {e}");
                answers.extend(
                    units
                        .iter()
                        .map(|(i, ..)| (*i, Answer::Missing(why.clone()))),
                );
                return Judged { answers, usage };
            }
        };
        // Set once the lens must stop: every later unit is missing with it.
        let mut stopped: Option<String> = None;
        for (i, id, fields) in units {
            if stopped.is_none() && *cancel.borrow() {
                stopped = Some("the run was stopped before this unit was sent".into());
            }
            if let Some(why) = &stopped {
                answers.push((*i, Answer::Missing(why.clone())));
                continue;
            }
            let messages = match self.messages(&charter, id, fields) {
                Ok(messages) => messages,
                Err(why) => {
                    answers.push((*i, Answer::Missing(why)));
                    continue;
                }
            };
            // A stop must not wait out a silent model's timeouts and retries.
            let mut stop = cancel.clone();
            let asked = tokio::select! {
                result = client.chat(&messages, MAX_ANSWER_TOKENS) => Some(result),
                _ = stop.wait_for(|stopped| *stopped) => None,
            };
            let Some(result) = asked else {
                let why = "the run was stopped while this unit was asked".to_owned();
                stopped = Some("the run was stopped before this unit was sent".into());
                answers.push((*i, Answer::Missing(why)));
                continue;
            };
            let answer = match result {
                Ok(answer) => parse_answer(&answer.text),
                Err(e @ LlmError::Budget { .. }) => {
                    usage.stopped_by_budget = true;
                    let why =
                        format!("{e}: not sent (a larger `budget.max_model_usd` allows more)");
                    stopped = Some(why.clone());
                    Answer::Missing(why)
                }
                Err(e @ LlmError::Unreachable { .. }) => {
                    usage.unreachable = true;
                    stopped = Some(format!(
                        "not sent: the model endpoint never answered an earlier unit ({e})"
                    ));
                    Answer::Missing(format!(
                        "{e}; check the lens's `base_url` and that the model server runs (or \
                         raise its `timeout`)"
                    ))
                }
                Err(e @ LlmError::Refused { .. }) => {
                    stopped = Some(format!(
                        "not sent: the model endpoint refused an earlier unit ({e})"
                    ));
                    Answer::Missing(format!("{e}; check the lens's `model` and `api_key`"))
                }
                Err(e @ LlmError::BadAnswer(_)) => Answer::Missing(e.to_string()),
            };
            answers.push((*i, answer));
        }
        let spent = client.usage();
        usage.calls = spent.calls;
        usage.input_tokens = spent.input_tokens;
        usage.output_tokens = spent.output_tokens;
        usage.cost_usd = spent.cost_usd.unwrap_or(0.0);
        usage.priced = spent.cost_usd.is_some();
        self.budget.add(usage.cost_usd);
        Judged { answers, usage }
    }

    fn config(&self) -> ClientConfig {
        let mut config = ClientConfig::new(self.model);
        if let Some(url) = self.base_url {
            url.clone_into(&mut config.base_url);
        }
        if let Some(key) = self.api_key {
            // A key written into the plan without `secret()` is kept out of
            // every output all the same.
            self.redactor.register(key);
            config.api_key = Some(key.to_owned());
        }
        config.price = self.price;
        config.max_usd = self.budget.left();
        if let Some(secs) = self.timeout_secs {
            config.timeout = Duration::from_secs(secs.max(1));
        }
        config
    }

    /// The charter's template text.
    fn charter_source(&self) -> Result<String, String> {
        use std::io::Read;
        let path = match self.charter {
            Card::Text(text) => return Ok(text.clone()),
            Card::File(path) => path,
        };
        let max = crate::template::MAX_PROMPT_FILE_BYTES;
        let mut text = String::new();
        std::fs::File::open(self.root.join(path))
            .and_then(|f| f.take(max + 1).read_to_string(&mut text))
            .map_err(|e| format!("cannot read the lens's charter_file `{path}`: {e}"))?;
        if text.len() as u64 > max {
            return Err(format!(
                "the lens's charter_file `{path}` is larger than {} KiB",
                max / 1024
            ));
        }
        Ok(text)
    }

    /// The two messages sent for one unit.
    fn messages(
        &self,
        charter: &str,
        id: &str,
        fields: &Map<String, Value>,
    ) -> Result<Vec<Message>, String> {
        let context = json!({
            "unit": fields,
            "reviewer": self.reviewer,
            "lens": self.name,
        });
        let rendered = crate::template::render_prompt(charter, &context).map_err(|e| {
            format!(
                "the lens's charter does not render for this unit: {}",
                e.message
            )
        })?;
        let user = if reads_unit(charter) {
            rendered
        } else {
            let shown = serde_json::to_string_pretty(fields).unwrap_or_default();
            format!("{rendered}\n\n# The unit `{id}`\n\n```json\n{shown}\n```\n")
        };
        let mut system = WRAPPER.to_owned();
        if let Some(card) = self
            .reviewer
            .and_then(|r| r.get("card"))
            .and_then(Value::as_str)
        {
            system.push_str("\n\nYou review as this reviewer:\n");
            system.push_str(card);
        }
        let size = system.len() + user.len();
        if size > MAX_PROMPT_BYTES {
            return Err(format!(
                "the unit's prompt is {} KiB, over the llm lens's {} KiB: not sent (judge a \
                 file this large with a command lens, or narrow the lens's `files`)",
                size.div_ceil(1024),
                MAX_PROMPT_BYTES / 1024
            ));
        }
        Ok(vec![Message::system(system), Message::user(user)])
    }
}

/// Whether a charter reads `unit` itself (then the unit is not appended
/// twice). A charter that does not parse reads nothing; rendering it
/// reports why.
fn reads_unit(charter: &str) -> bool {
    let env = minijinja::Environment::new();
    env.template_from_str(charter)
        .is_ok_and(|t| t.undeclared_variables(false).contains("unit"))
}

/// A model's answer read against the verdict schema (see the module doc).
pub fn parse_answer(text: &str) -> Answer {
    match read_verdict(text) {
        Ok(answer) => answer,
        Err(why) => Answer::Missing(format!(
            "the model's answer does not match the verdict schema ({why}); it began: {}",
            crate::text::cut(text.trim(), 160)
        )),
    }
}

fn read_verdict(text: &str) -> Result<Answer, String> {
    let body = unfence(text.trim());
    let value: Value =
        serde_json::from_str(body).map_err(|e| format!("not one JSON object: {e}"))?;
    let Value::Object(object) = value else {
        return Err("not a JSON object".into());
    };
    if let Some(key) = object
        .keys()
        .find(|k| !["verdict", "findings"].contains(&k.as_str()))
    {
        return Err(format!("unknown key `{key}`"));
    }
    let verdict = match object.get("verdict").and_then(Value::as_str) {
        Some("clear") => Verdict::Clear,
        Some("finding") => Verdict::Finding,
        Some("n/a") => Verdict::NotApplicable,
        Some(other) => return Err(format!("verdict `{other}` is not clear, finding or n/a")),
        None => return Err("no `verdict` string".into()),
    };
    let listed = match object.get("findings") {
        None => &Vec::new(),
        Some(Value::Array(items)) => items,
        Some(_) => return Err("`findings` is not a list".into()),
    };
    if listed.len() > MAX_FINDINGS {
        return Err(format!(
            "{} findings, more than the {MAX_FINDINGS} one unit may have",
            listed.len()
        ));
    }
    let findings = listed
        .iter()
        .enumerate()
        .map(|(n, item)| read_finding(item).map_err(|why| format!("finding {}: {why}", n + 1)))
        .collect::<Result<Vec<_>, _>>()?;
    match verdict {
        Verdict::Finding if findings.is_empty() => Err("verdict `finding` with no findings".into()),
        Verdict::Clear | Verdict::NotApplicable if !findings.is_empty() => {
            Err(format!("verdict `{}` with findings", verdict.word()))
        }
        _ => Ok(Answer::Judged { verdict, findings }),
    }
}

fn read_finding(item: &Value) -> Result<RawFinding, String> {
    let Value::Object(f) = item else {
        return Err("not an object".into());
    };
    if let Some(key) = f
        .keys()
        .find(|k| !["title", "severity", "detail", "line"].contains(&k.as_str()))
    {
        return Err(format!("unknown key `{key}`"));
    }
    let title = match f.get("title").and_then(Value::as_str).map(str::trim) {
        Some(t) if !t.is_empty() => t.to_owned(),
        _ => return Err("no `title`".into()),
    };
    let severity = match f.get("severity").and_then(Value::as_str) {
        Some(s @ ("low" | "medium" | "high" | "critical")) => s.to_owned(),
        Some(other) => {
            return Err(format!(
                "severity `{other}` is not low, medium, high or critical"
            ));
        }
        None => return Err("no `severity`".into()),
    };
    let detail = match f.get("detail") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => return Err("`detail` is not a string".into()),
    };
    let line = match f.get("line") {
        None | Some(Value::Null) => None,
        Some(v) => Some(v.as_u64().ok_or("`line` is not a line number")?),
    };
    Ok(RawFinding {
        title,
        severity,
        detail,
        line,
    })
}

/// The text inside a ```` ```json ```` (or bare ```` ``` ````) fence, else
/// the text itself.
fn unfence(text: &str) -> &str {
    let Some(rest) = text.strip_prefix("```") else {
        return text;
    };
    let Some(rest) = rest.strip_suffix("```") else {
        return text;
    };
    // The info string (`json`) ends the fence's first line.
    rest.split_once('\n')
        .map_or(rest, |(info, body)| {
            if info.trim().is_empty() || info.trim().eq_ignore_ascii_case("json") {
                body
            } else {
                rest
            }
        })
        .trim()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn missing(answer: &Answer) -> &str {
        match answer {
            Answer::Missing(why) => why,
            Answer::Judged { .. } => panic!("judged: {answer:?}"),
        }
    }

    #[test]
    fn llm_answers_in_the_verdict_schema_are_read_fenced_or_not() {
        assert_eq!(
            parse_answer(r#"{"verdict": "clear", "findings": []}"#),
            Answer::Judged {
                verdict: Verdict::Clear,
                findings: vec![]
            }
        );
        assert_eq!(
            parse_answer("```json\n{\"verdict\": \"n/a\"}\n```"),
            Answer::Judged {
                verdict: Verdict::NotApplicable,
                findings: vec![]
            }
        );
        let found = parse_answer(
            "```\n{\"verdict\":\"finding\",\"findings\":[{\"title\":\"TODO left\",\"severity\":\"high\",\"detail\":\"why\",\"line\":3}]}\n```",
        );
        assert_eq!(
            found,
            Answer::Judged {
                verdict: Verdict::Finding,
                findings: vec![RawFinding {
                    title: "TODO left".into(),
                    severity: "high".into(),
                    detail: Some("why".into()),
                    line: Some(3),
                }]
            }
        );
    }

    #[test]
    fn llm_answers_outside_the_schema_are_missing_with_why() {
        let cases = [
            ("Looks fine to me!", "not one JSON object"),
            ("[1, 2]", "not a JSON object"),
            (r#"{"verdict": "ok"}"#, "verdict `ok`"),
            (r#"{"findings": []}"#, "no `verdict`"),
            (r#"{"verdict": "clear", "score": 3}"#, "unknown key `score`"),
            (
                r#"{"verdict": "finding", "findings": []}"#,
                "with no findings",
            ),
            (
                r#"{"verdict": "clear", "findings": [{"title": "x", "severity": "low"}]}"#,
                "`clear` with findings",
            ),
            (
                r#"{"verdict": "finding", "findings": [{"severity": "low"}]}"#,
                "finding 1: no `title`",
            ),
            (
                r#"{"verdict": "finding", "findings": [{"title": "x", "severity": "urgent"}]}"#,
                "severity `urgent`",
            ),
            (
                r#"{"verdict": "finding", "findings": [{"title": "x", "severity": "low", "line": -2}]}"#,
                "`line` is not a line number",
            ),
            (
                "```python\n{\"verdict\": \"clear\"}\n```",
                "not one JSON object",
            ),
        ];
        for (text, why) in cases {
            let answer = parse_answer(text);
            let said = missing(&answer);
            assert!(said.contains(why), "{text:?}: {said}");
            assert!(said.contains("verdict schema"), "{said}");
        }
    }

    #[test]
    fn llm_an_answer_with_too_many_findings_is_missing() {
        let many: Vec<Value> = (0..=MAX_FINDINGS)
            .map(|n| json!({"title": format!("t{n}"), "severity": "low"}))
            .collect();
        let text = json!({"verdict": "finding", "findings": many}).to_string();
        assert!(missing(&parse_answer(&text)).contains("more than the 50"));
        let enough = json!({"verdict": "finding", "findings": many[..MAX_FINDINGS]}).to_string();
        assert!(matches!(parse_answer(&enough), Answer::Judged { .. }));
    }

    fn lens<'a>(
        charter: &'a Card,
        reviewer: Option<&'a Value>,
        redactor: &'a Redactor,
        budget: &'a ModelBudget,
    ) -> LlmLens<'a> {
        LlmLens {
            root: Path::new("."),
            name: "style",
            charter,
            model: "m",
            base_url: None,
            api_key: None,
            price: None,
            timeout_secs: None,
            reviewer,
            redactor,
            budget,
        }
    }

    #[test]
    fn llm_the_prompt_holds_the_rendered_charter_the_unit_and_the_reviewer() {
        let (redactor, budget) = (Redactor::default(), ModelBudget::new(None));
        let mut fields = Map::new();
        fields.insert("path".into(), json!("src/a.rs"));
        fields.insert("text".into(), json!("fn main() {}"));
        let plain = Card::Text("Look for TODOs.".into());
        let messages = lens(&plain, None, &redactor, &budget)
            .messages("Look for TODOs.", "src/a.rs", &fields)
            .expect("fits");
        assert!(messages[0].content.starts_with(WRAPPER));
        assert!(messages[1].content.starts_with("Look for TODOs."));
        assert!(
            messages[1].content.contains("fn main() {}"),
            "the unit is appended"
        );
        let reviewer = json!({"slug": "nina", "card": "Nine years old."});
        let reading = "Review {{ unit.path }} as {{ reviewer.slug }}:\n{{ unit.text }}";
        let card = Card::Text(reading.into());
        let messages = lens(&card, Some(&reviewer), &redactor, &budget)
            .messages(reading, "src/a.rs", &fields)
            .expect("fits");
        assert!(messages[0].content.ends_with("Nine years old."));
        assert_eq!(
            messages[1].content,
            "Review src/a.rs as nina:\nfn main() {}"
        );
        let broken = lens(&card, None, &redactor, &budget)
            .messages("{{ unit.nope }}", "src/a.rs", &fields)
            .unwrap_err();
        assert!(broken.contains("does not render"), "{broken}");
    }

    #[test]
    fn llm_a_unit_whose_prompt_passes_the_cap_is_not_sent() {
        let (redactor, budget) = (Redactor::default(), ModelBudget::new(None));
        let card = Card::Text("c".into());
        let lens = lens(&card, None, &redactor, &budget);
        let mut fields = Map::new();
        let room = MAX_PROMPT_BYTES - WRAPPER.len() - 200;
        fields.insert("text".into(), json!("x".repeat(room)));
        assert!(lens.messages("c", "u", &fields).is_ok());
        fields.insert("text".into(), json!("x".repeat(MAX_PROMPT_BYTES)));
        let why = lens.messages("c", "u", &fields).unwrap_err();
        assert!(why.contains("over the llm lens's 48 KiB"), "{why}");
    }
}

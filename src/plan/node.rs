//! The spanned document tree that TOML and YAML both load into.
//!
//! Plans are read in two passes: the syntax (TOML or YAML) becomes a [`Node`]
//! tree with a byte span on every key and value, then `decode` reads the plan
//! out of the tree. Keeping one tree for both syntaxes is what makes a YAML
//! plan and a TOML plan mean exactly the same thing.
//!
//! YAML plain scalars stay untyped text ([`Value::Scalar`]) until a reader asks
//! for a type: a key that wants a string gets `no`, `1.10` or `2024-01-01`
//! exactly as written, never the bool, float or date a YAML 1.1 reader would
//! make of them. Hostile input is bounded here: nesting depth, alias expansion
//! and duplicate keys are refused with a diagnostic, never a panic or a hang.

use std::collections::{HashMap, HashSet};

use saphyr_parser::{Event, Parser, ScalarStyle};

use super::diagnostic::{Diagnostic, Diagnostics};
use super::source::{CharIndex, Span};

/// How deep tables and arrays may nest. Real plans use about 5 levels.
pub const MAX_DEPTH: usize = 64;

/// How many values YAML aliases may add to a document beyond the values
/// written in it, at least (see [`MAX_ALIAS_RATIO`]): a "billion laughs"
/// file is refused long before it costs memory.
///
/// What is bounded is what aliases add, not the size of the plan: a
/// generated plan of 100,000 steps writes every value out and costs memory
/// in proportion to its text, which the text already paid for; only
/// aliases repeated inside aliases make a small text expand without bound
/// (issue 8, item 21).
pub const MAX_ALIAS_NODES: usize = 100_000;

/// Aliases may also add up to this many values per value written, so a big
/// plan that shares a few anchors in every step is not an alias bomb.
pub const MAX_ALIAS_RATIO: usize = 10;

/// Whether aliases adding `added` values to a document of `written` values
/// stay within bounds.
fn alias_expansion_allowed(added: usize, written: usize) -> bool {
    added <= MAX_ALIAS_NODES.max(written.saturating_mul(MAX_ALIAS_RATIO))
}

#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub span: Span,
    pub value: Value,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    pub key: String,
    pub key_span: Span,
    pub value: Node,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Table(Vec<Entry>),
    Array(Vec<Node>),
    /// A string the file typed as a string (TOML string, quoted YAML scalar).
    Str(String),
    /// Untyped text: a YAML plain scalar, or a rendered template. The reader
    /// decides whether it is a string, a number or a bool.
    Scalar(String),
    Int(i64),
    Float(f64),
    Bool(bool),
    Datetime(String),
    Null,
}

impl Value {
    /// What the value is, for "expected X, found Y" messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Table(_) => "a table",
            Value::Array(_) => "an array",
            Value::Str(_) | Value::Scalar(_) => "a string",
            Value::Int(_) => "an integer",
            Value::Float(_) => "a float",
            Value::Bool(_) => "a boolean",
            Value::Datetime(_) => "a date-time",
            Value::Null => "nothing (null)",
        }
    }
}

impl Node {
    pub fn table(&self) -> Option<&[Entry]> {
        match &self.value {
            Value::Table(entries) => Some(entries),
            _ => None,
        }
    }

    pub fn get(&self, key: &str) -> Option<&Entry> {
        self.table()?.iter().find(|e| e.key == key)
    }

    /// Converts to JSON for values whose shape the plan does not fix (`vars`).
    /// Untyped YAML scalars become integers or booleans only when they are
    /// plainly one; anything else (floats included) stays the text as written.
    pub fn to_json(&self) -> serde_json::Value {
        match &self.value {
            Value::Table(entries) => serde_json::Value::Object(
                entries
                    .iter()
                    .map(|e| (e.key.clone(), e.value.to_json()))
                    .collect(),
            ),
            Value::Array(items) => items.iter().map(Node::to_json).collect(),
            Value::Str(s) | Value::Datetime(s) => s.clone().into(),
            Value::Scalar(s) => {
                if let Some(i) = parse_int(s) {
                    i.into()
                } else if let Some(b) = parse_bool(s) {
                    b.into()
                } else {
                    s.clone().into()
                }
            }
            Value::Int(i) => (*i).into(),
            Value::Float(f) => {
                serde_json::Number::from_f64(*f).map_or(serde_json::Value::Null, Into::into)
            }
            Value::Bool(b) => (*b).into(),
            Value::Null => serde_json::Value::Null,
        }
    }
}

/// YAML 1.2 core-schema integers (decimal, `0x`, `0o`), with `_` separators
/// as TOML allows. Also what `--var` values and rendered templates use.
pub fn parse_int(text: &str) -> Option<i64> {
    let t = text.trim();
    let (neg, digits) = match t.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    };
    let digits = digits.replace('_', "");
    let value = if let Some(hex) = digits.strip_prefix("0x") {
        i64::from_str_radix(hex, 16).ok()?
    } else if let Some(oct) = digits.strip_prefix("0o") {
        i64::from_str_radix(oct, 8).ok()?
    } else if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        digits.parse().ok()?
    } else {
        return None;
    };
    Some(if neg { -value } else { value })
}

pub fn parse_bool(text: &str) -> Option<bool> {
    match text.trim() {
        "true" | "True" | "TRUE" => Some(true),
        "false" | "False" | "FALSE" => Some(false),
        _ => None,
    }
}

pub fn parse_float(text: &str) -> Option<f64> {
    let t = text.trim().replace('_', "");
    match t.as_str() {
        ".inf" | ".Inf" | ".INF" | "+.inf" => Some(f64::INFINITY),
        "-.inf" | "-.Inf" | "-.INF" => Some(f64::NEG_INFINITY),
        _ if t.bytes().any(|b| b.is_ascii_digit())
            && !t.contains(|c: char| c.is_ascii_alphabetic() && c != 'e' && c != 'E') =>
        {
            t.parse().ok()
        }
        _ => None,
    }
}

fn too_deep(span: Span) -> Diagnostic {
    Diagnostic::new(
        "plan::too_deep",
        format!("values nest deeper than {MAX_DEPTH} levels"),
    )
    .at(span)
    .label("too deep")
    .help("a plan never needs this much nesting; flatten the structure")
}

// ---------------------------------------------------------------- TOML

/// Parses TOML text into a node tree, reporting every syntax error toml finds.
pub fn from_toml(text: &str, diags: &mut Diagnostics) -> Option<Node> {
    use toml::de::{DeTable, DeValue};

    fn convert(
        value: &toml::Spanned<DeValue<'_>>,
        depth: usize,
        diags: &mut Diagnostics,
    ) -> Option<Node> {
        let span = Span::from(value.span());
        // Count tables and arrays only, the plan's own table as level 1 (a
        // value at `depth` opens level `depth + 1`), exactly as the YAML
        // reader does: the same nesting must be refused in both syntaxes.
        let opens_level = matches!(value.get_ref(), DeValue::Array(_) | DeValue::Table(_));
        if opens_level && depth + 1 > MAX_DEPTH {
            diags.push(too_deep(span));
            return None;
        }
        let value = match value.get_ref() {
            DeValue::String(s) => Value::Str(s.to_string()),
            DeValue::Integer(i) => {
                if let Ok(n) = i64::from_str_radix(&i.as_str().replace('_', ""), i.radix()) {
                    Value::Int(n)
                } else {
                    diags.push(
                        Diagnostic::new("plan::wrong_type", "integer out of range")
                            .at(span)
                            .label("does not fit in 64 bits"),
                    );
                    return None;
                }
            }
            DeValue::Float(f) => Value::Float(parse_float(f.as_str()).unwrap_or(f64::NAN)),
            DeValue::Boolean(b) => Value::Bool(*b),
            DeValue::Datetime(d) => Value::Datetime(d.to_string()),
            DeValue::Array(items) => {
                let mut out = Vec::with_capacity(items.len());
                for item in items {
                    out.push(convert(item, depth + 1, diags)?);
                }
                Value::Array(out)
            }
            DeValue::Table(table) => Value::Table(convert_table(table, depth + 1, diags)?),
        };
        Some(Node { span, value })
    }

    fn convert_table(
        table: &DeTable<'_>,
        depth: usize,
        diags: &mut Diagnostics,
    ) -> Option<Vec<Entry>> {
        let mut entries = Vec::with_capacity(table.len());
        for (key, value) in table {
            entries.push(Entry {
                key: key.get_ref().to_string(),
                key_span: Span::from(key.span()),
                value: convert(value, depth, diags)?,
            });
        }
        Some(entries)
    }

    let (root, errors) = DeTable::parse_recoverable(text);
    if !errors.is_empty() {
        for error in errors {
            let mut d = Diagnostic::new(
                "plan::syntax",
                format!("invalid TOML: {}", error.message().trim()),
            );
            if let Some(range) = error.span() {
                d = d.at(range.into()).label("here");
            }
            diags.push(d);
        }
        return None;
    }
    let span = Span::new(0, text.len());
    let entries = convert_table(root.get_ref(), 1, diags)?;
    Some(Node {
        span,
        value: Value::Table(entries),
    })
}

// ---------------------------------------------------------------- YAML

enum Frame {
    Seq {
        start: usize,
        anchor: usize,
        items: Vec<Node>,
    },
    Map {
        start: usize,
        anchor: usize,
        entries: Vec<Entry>,
        key: Option<(String, Span)>,
        seen: HashSet<String>,
    },
}

/// Parses YAML text (one document) into a node tree.
#[expect(
    clippy::too_many_lines,
    reason = "one event loop owning the stack; split, the stack handling would scatter"
)]
pub fn from_yaml(text: &str, diags: &mut Diagnostics) -> Option<Node> {
    let chars = CharIndex::new(text);
    let mut stack: Vec<Frame> = Vec::new();
    let mut anchors: HashMap<usize, (Node, usize)> = HashMap::new();
    let mut root: Option<Node> = None;
    // Values written in the text, and values added by aliases.
    let mut written = 0usize;
    let mut added = 0usize;
    let mut documents = 0usize;

    for event in Parser::new_from_str(text) {
        let (event, marker_span) = match event {
            Ok(ok) => ok,
            Err(error) => {
                let at = chars.byte(error.marker().index());
                diags.push(
                    Diagnostic::new("plan::syntax", format!("invalid YAML: {}", error.info()))
                        .at(Span::new(at, at + 1))
                        .label("here"),
                );
                return None;
            }
        };
        let span = Span::new(
            chars.byte(marker_span.start.index()),
            chars.byte(marker_span.end.index()),
        );
        let mut from_alias = false;
        let (node, anchor) = match event {
            Event::DocumentStart(_) => {
                documents += 1;
                if documents > 1 {
                    diags.push(
                        Diagnostic::new("plan::syntax", "a plan file holds one YAML document")
                            .at(span)
                            .label("second document starts here")
                            .help("split the plans into separate files"),
                    );
                    return None;
                }
                continue;
            }
            Event::StreamStart | Event::StreamEnd | Event::DocumentEnd | Event::Nothing => continue,
            Event::SequenceStart(anchor, tag) | Event::MappingStart(anchor, tag)
                if tag.is_some() =>
            {
                let _ = anchor;
                diags.push(unsupported_tag(span));
                return None;
            }
            Event::SequenceStart(anchor, _) => {
                if stack.len() >= MAX_DEPTH {
                    diags.push(too_deep(span));
                    return None;
                }
                stack.push(Frame::Seq {
                    start: span.start,
                    anchor,
                    items: Vec::new(),
                });
                continue;
            }
            Event::MappingStart(anchor, _) => {
                if stack.len() >= MAX_DEPTH {
                    diags.push(too_deep(span));
                    return None;
                }
                stack.push(Frame::Map {
                    start: span.start,
                    anchor,
                    entries: Vec::new(),
                    key: None,
                    seen: HashSet::new(),
                });
                continue;
            }
            Event::SequenceEnd => match stack.pop() {
                Some(Frame::Seq {
                    start,
                    anchor,
                    items,
                }) => (
                    Node {
                        span: Span::new(
                            start,
                            span.end.max(items.last().map_or(start, |n| n.span.end)),
                        ),
                        value: Value::Array(items),
                    },
                    anchor,
                ),
                _ => return None,
            },
            Event::MappingEnd => match stack.pop() {
                Some(Frame::Map {
                    start,
                    anchor,
                    entries,
                    ..
                }) => (
                    Node {
                        span: Span::new(
                            start,
                            span.end
                                .max(entries.last().map_or(start, |e| e.value.span.end)),
                        ),
                        value: Value::Table(entries),
                    },
                    anchor,
                ),
                _ => return None,
            },
            Event::Scalar(text, style, anchor, tag) => {
                let value = match (style, tag) {
                    (_, Some(tag)) if tag.is_yaml_core_schema() && tag.suffix == "str" => {
                        Value::Str(text.into_owned())
                    }
                    (_, Some(_)) => {
                        diags.push(unsupported_tag(span));
                        return None;
                    }
                    (ScalarStyle::Plain, None) => match text.as_ref() {
                        "" | "~" | "null" | "Null" | "NULL" => Value::Null,
                        _ => Value::Scalar(text.into_owned()),
                    },
                    (_, None) => Value::Str(text.into_owned()),
                };
                (Node { span, value }, anchor)
            }
            Event::Alias(id) => {
                let Some((node, size)) = anchors.get(&id) else {
                    diags.push(Diagnostic::new("plan::syntax", "unknown YAML alias").at(span));
                    return None;
                };
                added = added.saturating_add(*size);
                if !alias_expansion_allowed(added, written) {
                    diags.push(alias_bomb(span));
                    return None;
                }
                let mut node = node.clone();
                // Point at the alias itself: that is where the value was used.
                node.span = span;
                from_alias = true;
                (node, 0)
            }
        };
        if !from_alias {
            written += 1;
        }
        if anchor != 0 {
            let size = count_nodes(&node);
            anchors.insert(anchor, (node.clone(), size));
        }
        match stack.last_mut() {
            None => root = Some(node),
            Some(Frame::Seq { items, .. }) => items.push(node),
            Some(Frame::Map {
                entries, key, seen, ..
            }) => match key.take() {
                None => {
                    let name = match &node.value {
                        Value::Str(s) | Value::Scalar(s) => s.clone(),
                        Value::Null => String::new(),
                        _ => {
                            diags.push(
                                Diagnostic::new("plan::syntax", "a key must be a plain string")
                                    .at(node.span)
                                    .label("complex key"),
                            );
                            return None;
                        }
                    };
                    if !seen.insert(name.clone()) {
                        diags.push(
                            Diagnostic::new(
                                "plan::duplicate_key",
                                format!("duplicate key `{name}`"),
                            )
                            .at(node.span)
                            .label("defined again here")
                            .help("a key may appear once per table; remove one of them"),
                        );
                    }
                    *key = Some((name, node.span));
                }
                Some((name, key_span)) => entries.push(Entry {
                    key: name,
                    key_span,
                    value: node,
                }),
            },
        }
    }
    Some(root.unwrap_or(Node {
        span: Span::default(),
        value: Value::Table(Vec::new()),
    }))
}

fn count_nodes(node: &Node) -> usize {
    1 + match &node.value {
        Value::Table(entries) => entries.iter().map(|e| count_nodes(&e.value)).sum(),
        Value::Array(items) => items.iter().map(count_nodes).sum(),
        _ => 0,
    }
}

fn alias_bomb(span: Span) -> Diagnostic {
    Diagnostic::new(
        "plan::too_large",
        format!(
            "YAML aliases add more than {MAX_ALIAS_NODES} values (or {MAX_ALIAS_RATIO} per value written) to the plan (aliases repeated inside aliases)"
        ),
    )
    .at(span)
    .label("expansion limit reached here")
    .help("a plan never needs this many values; this looks like an alias bomb")
}

fn unsupported_tag(span: Span) -> Diagnostic {
    Diagnostic::new(
        "plan::syntax",
        "YAML tags are not supported in plans (except `!!str`)",
    )
    .at(span)
    .label("tagged value")
    .help("remove the tag; quote the value if you want a string")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fmt::Write;

    fn yaml(text: &str) -> (Option<Node>, Vec<Diagnostic>) {
        let mut d = Diagnostics::default();
        let n = from_yaml(text, &mut d);
        (n, d.into_vec())
    }

    #[test]
    fn yaml_plain_scalars_keep_their_text() {
        let (node, diags) = yaml("a: no\nb: 1.10\nc: 2024-01-01\nd: \"x\"\ne: ~\n");
        assert!(diags.is_empty(), "{diags:?}");
        let node = node.unwrap();
        assert_eq!(
            node.get("a").unwrap().value.value,
            Value::Scalar("no".into())
        );
        assert_eq!(
            node.get("b").unwrap().value.value,
            Value::Scalar("1.10".into())
        );
        assert_eq!(
            node.get("c").unwrap().value.value,
            Value::Scalar("2024-01-01".into())
        );
        assert_eq!(node.get("d").unwrap().value.value, Value::Str("x".into()));
        assert_eq!(node.get("e").unwrap().value.value, Value::Null);
    }

    #[test]
    fn yaml_spans_point_at_keys_and_values() {
        let text = "name: demo\nsteps:\n  - id: build\n";
        let (node, _) = yaml(text);
        let node = node.unwrap();
        let steps = &node.get("steps").unwrap().value;
        let Value::Array(items) = &steps.value else {
            panic!()
        };
        let id = items[0].get("id").unwrap();
        assert_eq!(&text[id.key_span.start..id.key_span.end], "id");
        assert_eq!(&text[id.value.span.start..id.value.span.end], "build");
    }

    #[test]
    fn yaml_non_ascii_spans_are_bytes() {
        let text = "description: \"héllo wörld\"\nname: x\n";
        let (node, _) = yaml(text);
        let e = node.unwrap();
        let name = e.get("name").unwrap();
        assert_eq!(&text[name.value.span.start..name.value.span.end], "x");
    }

    #[test]
    fn yaml_alias_bomb_is_refused() {
        let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..10 {
            let refs = vec![format!("*a{}", i - 1); 10].join(", ");
            writeln!(text, "a{i}: &a{i} [{refs}]").unwrap();
        }
        let (node, diags) = yaml(&text);
        assert!(node.is_none());
        assert_eq!(diags[0].code, "plan::too_large");
    }

    /// A generated plan of `steps` steps, each written out in full.
    fn generated_plan(steps: usize) -> String {
        let mut text = String::from("version: 1\nname: big\nsteps:\n");
        for i in 0..steps {
            writeln!(
                text,
                "  - id: s{i}\n    kind: command\n    run: echo {i}\n    inputs: [src/{i}.txt]"
            )
            .unwrap();
        }
        text
    }

    /// Issue 8, item 21: plan size is not an alias bomb.
    #[test]
    fn big_generated_plans_are_not_alias_bombs() {
        for steps in [10_000, 100_000] {
            let (node, diags) = yaml(&generated_plan(steps));
            assert!(diags.is_empty(), "{steps} steps: {diags:?}");
            let node = node.unwrap();
            let Value::Array(items) = &node.get("steps").unwrap().value.value else {
                panic!()
            };
            assert_eq!(items.len(), steps);
        }
    }

    /// Issue 8, item 21: a big plan may share an anchor in every step.
    #[test]
    fn a_big_plan_sharing_an_anchor_in_every_step_is_fine() {
        let mut text = String::from(
            "version: 1\nname: big\nvars:\n  env: &env {A: '1', B: '2', C: '3', D: '4'}\nsteps:\n",
        );
        for i in 0..30_000 {
            writeln!(
                text,
                "  - {{id: s{i}, kind: command, run: 'true', env: *env}}"
            )
            .unwrap();
        }
        let (node, diags) = yaml(&text);
        assert!(diags.is_empty(), "{diags:?}");
        assert!(node.is_some());
    }

    #[test]
    fn yaml_alias_bomb_inside_a_big_plan_is_still_refused() {
        let mut text = generated_plan(1_000);
        text.push_str("vars:\n  a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..10 {
            let refs = vec![format!("*a{}", i - 1); 10].join(", ");
            writeln!(text, "  a{i}: &a{i} [{refs}]").unwrap();
        }
        let (node, diags) = yaml(&text);
        assert!(node.is_none());
        assert_eq!(diags[0].code, "plan::too_large");
    }

    #[test]
    fn yaml_deep_nesting_is_refused() {
        let text = format!("a: {}{}", "[".repeat(10_000), "]".repeat(10_000));
        let (node, diags) = yaml(&text);
        assert!(node.is_none());
        assert!(
            diags[0].code == "plan::too_deep" || diags[0].message.contains("recursion"),
            "{diags:?}"
        );
    }

    #[test]
    fn yaml_duplicate_keys_are_refused() {
        let (_, diags) = yaml("name: a\nname: b\n");
        assert_eq!(diags[0].code, "plan::duplicate_key");
    }

    #[test]
    fn toml_deep_nesting_is_refused() {
        let text = format!("a = {}{}", "[".repeat(10_000), "]".repeat(10_000));
        let mut d = Diagnostics::default();
        assert!(from_toml(&text, &mut d).is_none());
        assert!(!d.is_empty());
    }

    #[test]
    fn ints_parse_like_yaml_core() {
        assert_eq!(parse_int("42"), Some(42));
        assert_eq!(parse_int("-7"), Some(-7));
        assert_eq!(parse_int("0x10"), Some(16));
        assert_eq!(parse_int("1.0"), None);
        assert_eq!(parse_int("1e3"), None);
    }
}

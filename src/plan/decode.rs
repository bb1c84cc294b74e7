//! Reading typed values out of the spanned tree, collecting every problem.
//!
//! This is the plan's deserializer. It is hand-rolled rather than serde-driven
//! because serde stops at the first error, and a user fixing a plan wants all
//! of them at once, each pointing at its key. A reader that fails records a
//! diagnostic and returns `None`; the caller keeps going with the next key.

use std::collections::BTreeMap;

use super::diagnostic::{Diagnostic, Diagnostics, did_you_mean, one_of};
use super::node::{Entry, Node, Value, parse_bool, parse_float, parse_int};
use super::source::Span;

/// A value together with where it was written.
#[derive(Clone, Debug)]
pub struct Spanned<T> {
    pub value: T,
    pub span: Span,
}

impl<T> Spanned<T> {
    pub fn new(value: T, span: Span) -> Self {
        Spanned { value, span }
    }
}

impl<T> std::ops::Deref for Spanned<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.value
    }
}

// Spans say where a value was written, not what it is: two plans that say the
// same thing in different layouts (or in TOML and YAML) are equal.
impl<T: PartialEq> PartialEq for Spanned<T> {
    fn eq(&self, other: &Self) -> bool {
        self.value == other.value
    }
}

impl<T: schemars::JsonSchema> schemars::JsonSchema for Spanned<T> {
    fn inline_schema() -> bool {
        true
    }
    fn schema_name() -> std::borrow::Cow<'static, str> {
        T::schema_name()
    }
    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        T::json_schema(generator)
    }
}

/// A type the plan reader can produce from a node.
pub trait Decode: Sized {
    fn decode(node: &Node, diags: &mut Diagnostics) -> Option<Self>;
}

pub fn wrong_type(node: &Node, expected: &str, diags: &mut Diagnostics) {
    let mut d = Diagnostic::new(
        "plan::wrong_type",
        format!("expected {expected}, found {}", node.value.type_name()),
    )
    .at(node.span)
    .label(format!("expected {expected}"));
    if expected == "a string"
        && matches!(node.value, Value::Int(_) | Value::Float(_) | Value::Bool(_))
    {
        d = d.help("quote the value to make it a string");
    }
    diags.push(d);
}

impl Decode for String {
    fn decode(node: &Node, diags: &mut Diagnostics) -> Option<Self> {
        match &node.value {
            Value::Str(s) | Value::Scalar(s) => Some(s.clone()),
            _ => {
                wrong_type(node, "a string", diags);
                None
            }
        }
    }
}

impl Decode for bool {
    fn decode(node: &Node, diags: &mut Diagnostics) -> Option<Self> {
        let typed = match node.value {
            Value::Bool(b) => Some(b),
            _ => None,
        };
        typed_or_parsed(node, typed, parse_bool, "a boolean (true or false)", diags)
    }
}

fn decode_int(node: &Node, diags: &mut Diagnostics) -> Option<i64> {
    let typed = match node.value {
        Value::Int(i) => Some(i),
        _ => None,
    };
    typed_or_parsed(node, typed, parse_int, "an integer", diags)
}

/// The value `typed` (written as its type), else a bare scalar that
/// `parse` reads, else a wrong type naming what was `expected`.
fn typed_or_parsed<T>(
    node: &Node,
    typed: Option<T>,
    parse: fn(&str) -> Option<T>,
    expected: &str,
    diags: &mut Diagnostics,
) -> Option<T> {
    let value = typed.or_else(|| match &node.value {
        Value::Scalar(s) => parse(s),
        _ => None,
    });
    if value.is_none() {
        wrong_type(node, expected, diags);
    }
    value
}

macro_rules! decode_unsigned {
    ($($t:ty),*) => {$(
        impl Decode for $t {
            fn decode(node: &Node, diags: &mut Diagnostics) -> Option<Self> {
                let i = decode_int(node, diags)?;
                match <$t>::try_from(i) {
                    Ok(v) => Some(v),
                    Err(_) => {
                        diags.push(
                            Diagnostic::new("plan::wrong_type", format!("{i} is out of range"))
                                .at(node.span)
                                .label(format!("expected a whole number from 0 to {}", <$t>::MAX)),
                        );
                        None
                    }
                }
            }
        }
    )*};
}
decode_unsigned!(u32, u64);

impl Decode for i64 {
    fn decode(node: &Node, diags: &mut Diagnostics) -> Option<Self> {
        decode_int(node, diags)
    }
}

impl Decode for f64 {
    fn decode(node: &Node, diags: &mut Diagnostics) -> Option<Self> {
        #[expect(clippy::cast_precision_loss, reason = "plan numbers are small")]
        match &node.value {
            Value::Float(f) => Some(*f),
            Value::Int(i) => Some(*i as f64),
            Value::Scalar(s) if parse_float(s).is_some() => parse_float(s),
            _ => {
                wrong_type(node, "a number", diags);
                None
            }
        }
    }
}

impl<T: Decode> Decode for Spanned<T> {
    fn decode(node: &Node, diags: &mut Diagnostics) -> Option<Self> {
        T::decode(node, diags).map(|value| Spanned::new(value, node.span))
    }
}

impl<T: Decode> Decode for Vec<T> {
    fn decode(node: &Node, diags: &mut Diagnostics) -> Option<Self> {
        let Value::Array(items) = &node.value else {
            wrong_type(node, "an array", diags);
            return None;
        };
        let mut out = Vec::with_capacity(items.len());
        let mut ok = true;
        for item in items {
            match T::decode(item, diags) {
                Some(v) => out.push(v),
                None => ok = false,
            }
        }
        ok.then_some(out)
    }
}

impl<T: Decode> Decode for BTreeMap<String, T> {
    fn decode(node: &Node, diags: &mut Diagnostics) -> Option<Self> {
        let Value::Table(entries) = &node.value else {
            wrong_type(node, "a table", diags);
            return None;
        };
        let mut out = BTreeMap::new();
        let mut ok = true;
        for entry in entries {
            match T::decode(&entry.value, diags) {
                Some(v) => {
                    out.insert(entry.key.clone(), v);
                }
                None => ok = false,
            }
        }
        ok.then_some(out)
    }
}

/// Values whose shape the plan does not fix (`vars`).
impl Decode for serde_json::Value {
    fn decode(node: &Node, _: &mut Diagnostics) -> Option<Self> {
        Some(node.to_json())
    }
}

/// Reads the keys of one table, then reports the keys nobody asked for.
pub struct TableReader<'n> {
    node: &'n Node,
    entries: &'n [Entry],
    /// What the table is, for messages: "step `build`", "persona", "the plan".
    what: String,
    known: Vec<&'static str>,
}

impl<'n> TableReader<'n> {
    pub fn new(node: &'n Node, what: impl Into<String>, diags: &mut Diagnostics) -> Option<Self> {
        let Value::Table(entries) = &node.value else {
            wrong_type(node, "a table", diags);
            return None;
        };
        Some(TableReader {
            node,
            entries,
            what: what.into(),
            known: Vec::new(),
        })
    }

    pub fn span(&self) -> Span {
        self.node.span
    }

    /// Renames the table in later messages (once its id is known).
    pub fn describe(&mut self, what: impl Into<String>) {
        self.what = what.into();
    }

    pub fn entry(&mut self, key: &'static str) -> Option<&'n Entry> {
        self.known.push(key);
        self.entries
            .iter()
            .find(|e| e.key == key && !matches!(e.value.value, Value::Null))
    }

    pub fn has(&self, key: &str) -> bool {
        self.entries.iter().any(|e| e.key == key)
    }

    pub fn optional<T: Decode>(&mut self, key: &'static str, diags: &mut Diagnostics) -> Option<T> {
        T::decode(&self.entry(key)?.value, diags)
    }

    pub fn required<T: Decode>(&mut self, key: &'static str, diags: &mut Diagnostics) -> Option<T> {
        if let Some(entry) = self.entry(key) {
            return T::decode(&entry.value, diags);
        }
        diags.push(
            Diagnostic::new(
                "plan::missing_key",
                format!("{} is missing the required key `{key}`", self.what),
            )
            .at(self.head_span())
            .label(format!("`{key}` is required here")),
        );
        None
    }

    /// Where to point for a problem of the whole table: its first key, which
    /// is short and on the line that starts it.
    fn head_span(&self) -> Span {
        self.entries.first().map_or(self.node.span, |e| e.key_span)
    }

    /// Reports every key that no reader asked for, with a "did you mean".
    pub fn finish(self, diags: &mut Diagnostics) {
        for entry in self.entries {
            if self.known.contains(&entry.key.as_str()) {
                continue;
            }
            let mut d = Diagnostic::new(
                "plan::unknown_key",
                format!("unknown key `{}` in {}", entry.key, self.what),
            )
            .at(entry.key_span)
            .label("unknown key");
            let mut known = self.known.clone();
            known.sort_unstable();
            known.dedup();
            d = match did_you_mean(&entry.key, known.iter().copied()) {
                Some(hint) => d.help(hint),
                None => d.help(format!("the keys allowed here are {}", one_of(&known))),
            };
            diags.push(d);
        }
    }
}

/// A closed set of words (`kind = "command"`); unknown words get a "did you mean".
pub fn decode_word<T: Copy>(
    node: &Node,
    words: &[(&'static str, T)],
    what: &str,
    diags: &mut Diagnostics,
) -> Option<T> {
    let text = String::decode(node, diags)?;
    if let Some((_, v)) = words.iter().find(|(w, _)| *w == text) {
        return Some(*v);
    }
    let names: Vec<&str> = words.iter().map(|(w, _)| *w).collect();
    let mut d = Diagnostic::new("plan::unknown_value", format!("unknown {what} `{text}`"))
        .at(node.span)
        .label(format!("not a {what}"));
    d = match did_you_mean(&text, names.iter().copied()) {
        // Not "({what}s: …)": that makes "lens input (`over`)s".
        Some(hint) => d.help(format!("{hint} (expected {})", one_of(&names))),
        None => d.help(format!("use one of {}", one_of(&names))),
    };
    diags.push(d);
    None
}

/// Passes a node through untouched (for reading `kind` before anything else).
impl Decode for Node {
    fn decode(node: &Node, _: &mut Diagnostics) -> Option<Self> {
        Some(node.clone())
    }
}

/// A duration in seconds: an integer, or a string like `"90s"`, `"10m"`, `"1h"`.
pub struct Seconds(pub u64);

impl Decode for Seconds {
    fn decode(node: &Node, diags: &mut Diagnostics) -> Option<Self> {
        if let Value::Int(_) = node.value {
            return u64::decode(node, diags).map(Seconds);
        }
        if let Value::Str(text) | Value::Scalar(text) = &node.value {
            let text = text.trim();
            let split = text
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(text.len());
            let (digits, unit) = text.split_at(split);
            let scale = match unit.trim() {
                "" | "s" => Some(1),
                "m" => Some(60),
                "h" => Some(3600),
                _ => None,
            };
            if let (Ok(n), Some(scale)) = (digits.parse::<u64>(), scale) {
                return Some(Seconds(n.saturating_mul(scale)));
            }
        }
        diags.push(
            Diagnostic::new("plan::wrong_type", "expected a duration")
                .at(node.span)
                .label("not a duration")
                .help("write seconds as an integer (90) or a string with a unit: \"90s\", \"10m\", \"1h\""),
        );
        None
    }
}

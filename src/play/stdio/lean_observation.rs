//! An observation read without a `serde_json::Value`: simulate's hot path.
//!
//! A play cell keeps each observation as sent (its transcript), so it
//! builds a `Value` and hashes that. A simulated game keeps only the hash
//! and the parsed [`Observation`], and building a `Value` (a map and a
//! string per field, on every action) was a fifth of simulate's own CPU.
//! [`hash`] gives the same hash as [`protocol::observation_hash`] over a
//! borrowed tree (strings without escapes are not copied); the unit tests
//! hold the two equal, duplicate keys, escapes and number forms included.
//!
//! [`protocol::observation_hash`]: crate::play::protocol::observation_hash

use std::borrow::Cow;
use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

use crate::play::protocol::Observation;

/// A JSON value borrowing its strings from the text it was read from.
enum Node<'a> {
    Null,
    Bool(bool),
    Number(serde_json::Number),
    String(Cow<'a, str>),
    Array(Vec<Node<'a>>),
    /// In the order sent; a repeated key is resolved when written (the
    /// last one wins, as in a `Value`).
    Object(Vec<(Cow<'a, str>, Node<'a>)>),
}

impl<'de> Deserialize<'de> for Node<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(NodeVisitor)
    }
}

/// A key, borrowed when it has no escapes.
struct Key<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer
            .deserialize_str(NodeVisitor)
            .and_then(|node| match node {
                Node::String(s) => Ok(Key(s)),
                _ => Err(serde::de::Error::custom("an object key is not a string")),
            })
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_unit<E>(self) -> Result<Node<'de>, E> {
        Ok(Node::Null)
    }

    fn visit_none<E>(self) -> Result<Node<'de>, E> {
        Ok(Node::Null)
    }

    fn visit_bool<E>(self, v: bool) -> Result<Node<'de>, E> {
        Ok(Node::Bool(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Node<'de>, E> {
        Ok(Node::Number(v.into()))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Node<'de>, E> {
        Ok(Node::Number(v.into()))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Node<'de>, E> {
        // As `Value` reads it: a float JSON cannot hold is null.
        Ok(serde_json::Number::from_f64(v).map_or(Node::Null, Node::Number))
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Node<'de>, E> {
        Ok(Node::String(Cow::Borrowed(v)))
    }

    fn visit_str<E>(self, v: &str) -> Result<Node<'de>, E> {
        Ok(Node::String(Cow::Owned(v.to_owned())))
    }

    fn visit_string<E>(self, v: String) -> Result<Node<'de>, E> {
        Ok(Node::String(Cow::Owned(v)))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node<'de>, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Node::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node<'de>, A::Error> {
        let mut entries = Vec::with_capacity(map.size_hint().unwrap_or(0));
        while let Some((Key(key), value)) = map.next_entry()? {
            entries.push((key, value));
        }
        Ok(Node::Object(entries))
    }
}

/// Writes `node` as [`crate::play::protocol::canonical_json`] writes the
/// same value: keys sorted at every depth, compact, `serde_json`'s escapes
/// and number forms.
fn write_canonical(node: &mut Node<'_>, out: &mut Vec<u8>) {
    match node {
        Node::Object(entries) => {
            // Stable, so among repeated keys the last sent stays last.
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            out.push(b'{');
            let mut first = true;
            for i in 0..entries.len() {
                if entries
                    .get(i + 1)
                    .is_some_and(|next| next.0 == entries[i].0)
                {
                    continue;
                }
                if !first {
                    out.push(b',');
                }
                first = false;
                let (key, value) = &mut entries[i];
                let _ = serde_json::to_writer(&mut *out, key.as_ref());
                out.push(b':');
                write_canonical(value, out);
            }
            out.push(b'}');
        }
        Node::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter_mut().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(item, out);
            }
            out.push(b']');
        }
        Node::String(s) => {
            let _ = serde_json::to_writer(&mut *out, s.as_ref());
        }
        Node::Number(n) => {
            let _ = serde_json::to_writer(&mut *out, n);
        }
        Node::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Node::Null => out.extend_from_slice(b"null"),
    }
}

/// The observation hash of `raw` (one JSON value), as
/// [`crate::play::protocol::observation_hash`] gives it for the same value;
/// `scratch` is reused between calls.
pub fn hash(raw: &str, scratch: &mut Vec<u8>) -> serde_json::Result<String> {
    let mut node: Node = serde_json::from_str(raw)?;
    scratch.clear();
    write_canonical(&mut node, scratch);
    Ok(crate::reuse::sha256_hex(scratch))
}

/// The observation in `raw`, read as a `Value` would be read (so a game
/// that repeats a key gets the same answer here as in a play cell).
pub fn observation(raw: &str) -> Result<Observation, serde_json::Error> {
    // The direct read refuses a repeated field, where a `Value` keeps the
    // last: only then is the slow read needed.
    serde_json::from_str(raw).or_else(|_| {
        let value: serde_json::Value = serde_json::from_str(raw)?;
        Observation::deserialize(&value)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::play::protocol::observation_hash;

    #[test]
    fn the_hash_is_the_value_hash_for_every_shape_of_json() {
        let cases = [
            r#"{"text":"A room.","actions":["north","take coin"],"state":{"room":"hall","coins":0,"inventory":[]},"score":0}"#,
            r#"{ "score" : 1.0 , "text" : "spaced\tout" , "actions" : [ ] }"#,
            r#"{"b":1,"a":2,"b":3,"c":{"z":null,"y":[true,false,{"k":"v","j":-0.5}]}}"#,
            r#"{"text":"caf\u00e9 \"quoted\" back\\slash \/ \u2028 \ud83d\ude00","actions":["é","\n"]}"#,
            r#"{"n":[0,-1,18446744073709551615,-9223372036854775808,1e3,1.5E-7,123456789012345678901234567890,2.0,-0.0]}"#,
            r#"{"":"empty key","Z":"upper","a":"lower","ä":"unicode","a\u0000b":"nul"}"#,
            r#"[1,"two",{"three":3}]"#,
            r#""just a string""#,
            "null",
            r#"{"deep":{"deeper":{"deepest":{"a":[[[[]]]]}}}}"#,
        ];
        let mut scratch = Vec::new();
        for raw in cases {
            let value: serde_json::Value = serde_json::from_str(raw).expect("valid JSON");
            assert_eq!(
                hash(raw, &mut scratch).expect("lean hash"),
                observation_hash(&value),
                "{raw}"
            );
        }
    }

    #[test]
    fn the_observation_is_read_as_a_value_would_read_it() {
        let raw = r#"{"text":"first","actions":["a"],"text":"last","score":2}"#;
        let value: serde_json::Value = serde_json::from_str(raw).expect("valid JSON");
        let slow = Observation::deserialize(&value).expect("value read");
        let lean = observation(raw).expect("lean read");
        assert_eq!(lean.text, "last");
        assert_eq!(lean.text, slow.text);
        assert_eq!(lean.actions, slow.actions);
        assert!((lean.score - slow.score).abs() < f64::EPSILON);
        assert!(observation(r#"{"text":5}"#).is_err());
    }

    #[test]
    fn a_bad_value_is_an_error_not_a_hash() {
        let mut scratch = Vec::new();
        assert!(hash("{\"a\":", &mut scratch).is_err());
        assert!(
            hash(&"[".repeat(200), &mut scratch).is_err(),
            "recursion limit"
        );
    }
}

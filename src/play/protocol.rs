//! Bridge protocol v1 (docs/bridge.md): the JSON lines gameplan and a game
//! exchange over stdio, and the observation hash that traces record.
//!
//! Owns the message types (their JSON Schema is `schemas/bridge.schema.json`,
//! printed by `gameplan schema bridge`) and the canonical form of an
//! observation. Does not own how the bytes travel (`stdio`) or what a reply
//! means for a finding (`findings`).
//!
//! Requests are written by hand in [`write_request`]: it is the one thing
//! done for every action, and a reused buffer keeps it free of allocation.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The protocol version this gameplan speaks.
pub const PROTOCOL: u32 = 1;

/// The longest line either side may send, newline excluded.
pub const MAX_LINE: usize = 1024 * 1024;

/// What gameplan asks of a game: one JSON object per line, `id` echoed back.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Request {
    /// Increases by one per request; the reply carries the same id.
    pub id: u64,
    pub op: Op,
    /// `hello` only: the protocol version gameplan speaks (1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<u32>,
    /// `reset` only: the seed of the episode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<i64>,
    /// `act` only: one of the actions the last observation listed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
}

/// The request kinds, in the order a session uses them.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    Hello,
    Reset,
    Act,
    Close,
}

impl Op {
    pub fn name(self) -> &'static str {
        match self {
            Op::Hello => "hello",
            Op::Reset => "reset",
            Op::Act => "act",
            Op::Close => "close",
        }
    }
}

/// A game's answer. `ok: false` carries `error`; the other fields depend on the op:
/// `hello` → name, version, protocol; `reset` → observation;
/// `act` → observation, reward, done, events; `close` → nothing.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
pub struct Response {
    pub id: u64,
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observation: Option<Observation>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reward: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub done: Option<bool>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<Event>,
}

/// What the player sees after `reset` and each `act`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
pub struct Observation {
    /// What a person would read on the screen.
    #[serde(default)]
    pub text: String,
    /// The actions the game accepts now; a listed action it then refuses is a finding.
    #[serde(default)]
    pub actions: Vec<String>,
    /// Game-defined state, hashed with the rest (so a hidden change is a change).
    #[serde(default)]
    pub state: serde_json::Value,
    #[serde(default)]
    pub score: f64,
}

/// Something the game reports about the last action.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
pub struct Event {
    pub kind: EventKind,
    #[serde(default)]
    pub message: String,
}

#[derive(
    Debug, Clone, Copy, Serialize, Deserialize, JsonSchema, PartialEq, Eq, PartialOrd, Ord,
)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    Crash,
    Error,
    Warning,
    Goal,
    Log,
}

impl EventKind {
    pub fn name(self) -> &'static str {
        match self {
            EventKind::Crash => "crash",
            EventKind::Error => "error",
            EventKind::Warning => "warning",
            EventKind::Goal => "goal",
            EventKind::Log => "log",
        }
    }
}

/// Every message of the bridge, for the schema: a request or a response.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
#[schemars(title = "gameplan bridge protocol v1")]
pub enum BridgeMessage {
    Request(Request),
    Response(Response),
}

/// Appends one request line (newline included) to `out`.
pub fn write_request(out: &mut Vec<u8>, id: u64, op: Op, arg: RequestArg<'_>) {
    use std::io::Write;
    let _ = write!(out, "{{\"id\":{id},\"op\":\"{}\"", op.name());
    match arg {
        RequestArg::None => {}
        RequestArg::Protocol(p) => {
            let _ = write!(out, ",\"protocol\":{p}");
        }
        RequestArg::Seed(seed) => {
            let _ = write!(out, ",\"seed\":{seed}");
        }
        RequestArg::Action(action) => {
            out.extend_from_slice(b",\"action\":");
            let _ = serde_json::to_writer(&mut *out, action);
        }
    }
    out.extend_from_slice(b"}\n");
}

/// The one argument a request carries besides its id and op.
#[derive(Debug, Clone, Copy)]
pub enum RequestArg<'a> {
    None,
    Protocol(u32),
    Seed(i64),
    Action(&'a str),
}

/// The sha256 (lowercase hex) of an observation's canonical JSON: keys
/// sorted at every depth, no whitespace. Games may order keys as they like;
/// the hash depends only on what they say.
pub fn observation_hash(observation: &serde_json::Value) -> String {
    let mut bytes = Vec::with_capacity(256);
    canonical_json(observation, &mut bytes);
    crate::reuse::sha256_hex(&bytes)
}

/// Writes `value` as canonical JSON (sorted keys, compact) to `out`.
pub fn canonical_json(value: &serde_json::Value, out: &mut Vec<u8>) {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort_unstable();
            out.push(b'{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                let _ = serde_json::to_writer(&mut *out, key);
                out.push(b':');
                canonical_json(&map[key.as_str()], out);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                canonical_json(item, out);
            }
            out.push(b']');
        }
        scalar => {
            let _ = serde_json::to_writer(&mut *out, scalar);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_the_documented_lines() {
        let mut out = Vec::new();
        write_request(&mut out, 1, Op::Hello, RequestArg::Protocol(1));
        write_request(&mut out, 2, Op::Reset, RequestArg::Seed(-7));
        write_request(&mut out, 3, Op::Act, RequestArg::Action("say \"hi\""));
        write_request(&mut out, 4, Op::Close, RequestArg::None);
        assert_eq!(
            String::from_utf8(out).expect("utf8"),
            "{\"id\":1,\"op\":\"hello\",\"protocol\":1}\n\
             {\"id\":2,\"op\":\"reset\",\"seed\":-7}\n\
             {\"id\":3,\"op\":\"act\",\"action\":\"say \\\"hi\\\"\"}\n\
             {\"id\":4,\"op\":\"close\"}\n"
        );
        let parsed: Request = serde_json::from_str("{\"id\":3,\"op\":\"act\",\"action\":\"x\"}")
            .expect("a request parses");
        assert_eq!(parsed.op, Op::Act);
    }

    #[test]
    fn the_observation_hash_ignores_key_order_but_not_content() {
        let a: serde_json::Value = serde_json::from_str(
            r#"{"text":"hall","actions":["n"],"state":{"x":1,"y":2},"score":0}"#,
        )
        .expect("json");
        let b: serde_json::Value = serde_json::from_str(
            r#"{"score":0,"state":{"y":2,"x":1},"actions":["n"],"text":"hall"}"#,
        )
        .expect("json");
        let c: serde_json::Value = serde_json::from_str(
            r#"{"score":0,"state":{"y":3,"x":1},"actions":["n"],"text":"hall"}"#,
        )
        .expect("json");
        assert_eq!(observation_hash(&a), observation_hash(&b));
        assert_ne!(observation_hash(&a), observation_hash(&c));
        assert_eq!(observation_hash(&a).len(), 64);
    }
}

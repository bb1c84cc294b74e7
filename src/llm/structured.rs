//! Structured output: how a JSON Schema for the answer is asked of an
//! OpenAI-compatible server, in the dialects servers take.
//!
//! `OpenAI`, `vLLM`, llama.cpp's `llama-server` and Ollama take `OpenAI`'s
//! `{"type": "json_schema", "json_schema": {"name", "strict", "schema"}}`;
//! llama-cpp-python's server takes its own `{"type": "json_object",
//! "schema": …}` and refuses the other with a 422. The client starts with
//! the first and moves down the list on a refusal; [`Dialect::Plain`]
//! sends no `response_format` at all (the answer is read as text).

use serde_json::json;

/// One way of asking for structured output, in the order they are tried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// `OpenAI`'s `json_schema` response format.
    JsonSchema,
    /// llama-cpp-python's `json_object` with a `schema`.
    JsonObject,
    /// No structured output: the server refused both.
    Plain,
}

impl Dialect {
    /// The `response_format` of a request for `schema`; `None` for plain.
    pub fn response_format(self, schema: &serde_json::Value) -> Option<serde_json::Value> {
        match self {
            Dialect::JsonSchema => Some(json!({
                "type": "json_schema",
                "json_schema": {"name": "answer", "strict": true, "schema": schema},
            })),
            Dialect::JsonObject => Some(json!({"type": "json_object", "schema": schema})),
            Dialect::Plain => None,
        }
    }

    /// The dialect to try after this one was refused.
    #[must_use]
    pub fn next(self) -> Dialect {
        match self {
            Dialect::JsonSchema => Dialect::JsonObject,
            Dialect::JsonObject | Dialect::Plain => Dialect::Plain,
        }
    }
}

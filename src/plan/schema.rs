//! The JSON Schema of plan files (`schemas/plan.schema.json`, `gameplan schema plan`).
//!
//! Generated from the raw types with schemars. A step's allowed keys depend on
//! its `kind`, so its schema is written here as one alternative per kind:
//! editors then complete and check exactly the keys that kind accepts.

use std::borrow::Cow;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde_json::{Map, Value, json};

use super::raw::{RawStep, StepKind};

impl JsonSchema for RawStep {
    fn schema_name() -> Cow<'static, str> {
        "Step".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        let string = json!({"type": "string"});
        let strings = json!({"type": "array", "items": {"type": "string"}});
        let id = json!({"type": "string", "pattern": "^[a-z0-9][a-z0-9_-]*$"});
        let common = json!({
            "id": {"description": "Unique step id.", "type": "string", "pattern": "^[a-z0-9][a-z0-9_-]*$"},
            "needs": {"description": "Ids of the steps this one runs after.", "type": "array", "items": id},
            "matrix": {
                "description": "Axis → list of values, or \"*\" for every persona / controller. One cell per combination.",
                "type": "object",
                "additionalProperties": {"anyOf": [
                    {"const": "*"},
                    {"type": "array", "items": {"type": ["string", "integer"]}}
                ]}
            },
            "per": {"description": "Id of a matrix step: one instance of this step per cell of it.", "type": "string"},
            "always": {"description": "Run even when a step it needs failed or was skipped.", "type": "boolean"},
            "pool": {"description": "The concurrency pool this step takes a slot of.", "type": "string"},
            "timeout": {"description": "Seconds, or a string like \"90s\", \"10m\", \"1h\".", "type": ["integer", "string"]},
            "retries": {"description": "Extra attempts after a failure (not on money steps).", "type": "integer", "minimum": 0},
            "reuse": {"description": "Reuse a stored result when nothing it depends on changed (default true).", "type": "boolean"},
            "env": {"description": "Environment variables for the step.", "type": "object", "additionalProperties": string}
        });
        let own = |kind: StepKind| -> Value {
            match kind {
                StepKind::Command => json!({
                    "run": {"description": "A shell command (run with sh -c).", "type": "string"},
                    "argv": {"description": "A program and its arguments, run without a shell.", "type": "array", "items": string, "minItems": 1},
                    "inputs": {"description": "Globs of files whose content the result depends on.", "type": "array", "items": string},
                    "outputs": {"description": "Globs of files the step produces; stored and restored on reuse.", "type": "array", "items": string},
                    "cwd": {"description": "Working directory, inside the repo.", "type": "string"}
                }),
                StepKind::Play => json!({
                    "persona": {"type": "string"},
                    "controller": {"type": "string", "enum": ["standard", "jev", "rune"]},
                    "seed": {"type": "integer"}
                }),
                StepKind::Gate => {
                    json!({"gate": {"description": "The gate this step judges.", "type": "string"}})
                }
                StepKind::Simulate => json!({
                    "games": {"description": "How many seeded games.", "type": "integer", "minimum": 1},
                    "strategies": strings,
                    "seed": {"type": "integer"}
                }),
                _ => json!({}),
            }
        };
        let variants: Vec<Value> = StepKind::ALL
            .iter()
            .map(|(name, kind)| {
                let mut properties: Map<String, Value> =
                    common.as_object().cloned().unwrap_or_default();
                properties.insert("kind".into(), json!({"const": name}));
                if let Value::Object(extra) = own(*kind) {
                    properties.extend(extra);
                }
                json!({
                    "title": format!("{name} step"),
                    "type": "object",
                    "properties": properties,
                    "required": ["id", "kind"],
                    "additionalProperties": false
                })
            })
            .collect();
        json_schema!({
            "description": "One step of the pipeline; `kind` decides which keys it accepts.",
            "oneOf": variants
        })
    }
}

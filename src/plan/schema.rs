//! The JSON Schema of plan files (`schemas/plan.schema.json`, `gameplan schema plan`).
//!
//! Generated from the raw types with schemars. A step's allowed keys depend on
//! its `kind`, so its schema is written here as one alternative per kind:
//! editors then complete and check exactly the keys that kind accepts.

use std::borrow::Cow;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde_json::{Map, Value, json};

use super::raw::{RawPlan, RawStep, StepKind};

/// The plan schema as checked in: generated from the raw types, with every
/// place that takes a number or a boolean also taking a template string
/// (gameplan renders `{{ vars.seed }}` before it reads the value, so an
/// editor must not mark the shipped demo red).
pub fn plan_schema() -> Value {
    let schema = schemars::generate::SchemaSettings::draft2020_12()
        .into_generator()
        .into_root_schema_for::<RawPlan>();
    let mut value = serde_json::to_value(&schema).unwrap_or_default();
    accept_templates(&mut value);
    // A table of values; schemars derives its default from the Vec that
    // holds it in order.
    if let Some(Value::Object(vars)) = value.pointer_mut("/properties/vars") {
        vars.remove("default");
    }
    if let Value::Object(root) = &mut value {
        let defs = root
            .entry("$defs")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(defs) = defs {
            defs.insert(
                "Template".into(),
                json!({
                    "description": "A minijinja template, rendered when the plan loads: `{{ vars.NAME }}`, `{{ env.NAME }}`, `{{ secret(\"NAME\") }}`.",
                    "type": "string",
                    "pattern": "\\{\\{"
                }),
            );
        }
    }
    value
}

/// Where a subschema is `"type": "integer" | "number" | "boolean"` (alone or
/// with `null`), lets a template string stand there too.
fn accept_templates(value: &mut Value) {
    match value {
        Value::Object(fields) => {
            let typed = match fields.get("type") {
                Some(Value::String(t)) => matches!(t.as_str(), "integer" | "number" | "boolean"),
                Some(Value::Array(ts)) => {
                    ts.iter()
                        .any(|t| matches!(t.as_str(), Some("integer" | "number" | "boolean")))
                        && ts.iter().all(|t| t.as_str() != Some("string"))
                }
                _ => false,
            };
            for v in fields.values_mut() {
                accept_templates(v);
            }
            if typed {
                let description = fields.remove("description");
                let original = Value::Object(std::mem::take(fields));
                fields.insert(
                    "anyOf".into(),
                    json!([original, {"$ref": "#/$defs/Template"}]),
                );
                if let Some(d) = description {
                    fields.insert("description".into(), d);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(accept_templates),
        _ => {}
    }
}

impl JsonSchema for RawStep {
    fn schema_name() -> Cow<'static, str> {
        "Step".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        let string = json!({"type": "string"});
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
            let mut keys = Map::new();
            for key in kind.row().keys {
                let mut schema: Value =
                    serde_json::from_str(key.schema).unwrap_or_else(|_| json!({}));
                if let Value::Object(fields) = &mut schema {
                    fields.insert("description".into(), json!(key.doc));
                }
                keys.insert(key.name.into(), schema);
            }
            Value::Object(keys)
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
                    "description": kind.row().doc,
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

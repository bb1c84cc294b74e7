//! `gameplan schema [plan|dispositions|run|bridge|report|aggregate|api|review]`,
//! and the test that keeps `schemas/` current.

use clap::ValueEnum;

use super::{Context, SchemaName};

impl SchemaName {
    /// The schema as checked in under `schemas/`: pretty JSON, trailing newline.
    pub fn text(self) -> String {
        match self {
            SchemaName::Plan => pretty(&crate::plan::schema::plan_schema()),
            SchemaName::Dispositions => {
                schema_json::<crate::plan::dispositions::DispositionsFile>()
            }
            SchemaName::Run => schema_json::<crate::report::run::RunReport>(),
            SchemaName::Bridge => schema_json::<crate::play::protocol::BridgeMessage>(),
            SchemaName::Report => schema_json::<crate::play::CellReport>(),
            SchemaName::Aggregate => schema_json::<crate::report::aggregate::Aggregate>(),
            SchemaName::Api => schema_json::<crate::backend::payloads::ApiPayloads>(),
            SchemaName::Review => schema_json::<crate::review::verdict::Review>(),
        }
    }

    /// Its file under `schemas/`.
    pub fn file_name(self) -> String {
        let name = self
            .to_possible_value()
            .map_or_else(String::new, |v| v.get_name().to_owned());
        format!("{name}.schema.json")
    }
}

/// A type's JSON Schema (draft 2020-12) as pretty JSON with a trailing newline.
fn schema_json<T: schemars::JsonSchema>() -> String {
    let schema = schemars::generate::SchemaSettings::draft2020_12()
        .into_generator()
        .into_root_schema_for::<T>();
    pretty(&serde_json::to_value(&schema).unwrap_or_default())
}

/// Pretty JSON with a trailing newline, as checked in.
fn pretty(value: &serde_json::Value) -> String {
    let mut text = serde_json::to_string_pretty(value).unwrap_or_default();
    text.push('\n');
    text
}

pub fn run(cx: &Context, name: SchemaName) {
    cx.console.out(&name.text());
}

#[cfg(test)]
mod tests {
    use clap::ValueEnum;

    use super::SchemaName;

    #[test]
    fn checked_in_schemas_are_fresh() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("schemas");
        for name in SchemaName::value_variants() {
            let path = dir.join(name.file_name());
            let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
            let generated = name.text();
            if on_disk == generated {
                continue;
            }
            if std::env::var_os("GAMEPLAN_UPDATE_SCHEMAS").is_some() {
                std::fs::write(&path, generated).expect("write schema");
            } else {
                panic!(
                    "{} is stale: the types behind it changed. Regenerate with \
                     `GAMEPLAN_UPDATE_SCHEMAS=1 cargo test --lib schema` and commit it.",
                    path.display()
                );
            }
        }
    }
}

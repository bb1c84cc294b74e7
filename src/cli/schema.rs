//! `gameplan schema [plan|run]`

use super::{Context, SchemaName};
use crate::exit_code;

pub fn run(cx: &Context, name: SchemaName) -> u8 {
    match name {
        SchemaName::Plan => cx.console.out(&crate::plan::schema::plan_schema_json()),
        SchemaName::Run => cx.console.out(&crate::engine::run_schema_json()),
    }
    exit_code::SUCCESS
}

//! Plans as written: `plan check`'s problems (`file:line:col`, suggestions,
//! rendered diagnostics), `plan explain`, parts of a plan, hostile files,
//! and the JSON Schema every shipped plan passes.

mod check;
mod check_needs_no_secret;
mod diagnostics_rendered;
mod explain;
mod hostile;
mod part;
mod schema;

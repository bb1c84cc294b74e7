//! Every shipped plan (plans/, examples/) is valid under the checked-in
//! `schemas/plan.schema.json`, as a real JSON Schema validator (Draft
//! 2020-12, python-jsonschema) sees it: the schema an editor uses must not
//! mark the flagship demo red (issue 8, item 20).

use std::path::{Path, PathBuf};
use std::process::Command;

fn plan_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        // examples/ci/ holds CI workflows, not plans.
        if path.ends_with("examples/ci") {
            continue;
        }
        if path.is_dir() {
            plan_files(&path, out);
        } else if path
            .extension()
            .is_some_and(|e| e == "toml" || e == "yaml" || e == "yml")
        {
            out.push(path);
        }
    }
}

#[test]
fn every_shipped_plan_is_valid_under_the_plan_schema() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut plans = Vec::new();
    plan_files(&repo.join("plans"), &mut plans);
    plan_files(&repo.join("examples"), &mut plans);
    plans.sort();
    assert!(plans.len() >= 4, "found only {plans:?}");
    let out = Command::new("python3")
        .arg(repo.join("tests/integration/plan/validate_plans.py"))
        .arg(repo.join("schemas/plan.schema.json"))
        .args(&plans)
        .output()
        .expect("python3 runs (install it, and `pip install jsonschema pyyaml`)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the plan schema rejects shipped plans (or python-jsonschema / PyYAML is missing: \
         `pip install jsonschema pyyaml`):\n{stdout}{stderr}"
    );
    assert!(stdout.contains("0 problems"), "{stdout}");
}

/// The schema says a plan's `vars` is a table, not a list.
#[test]
fn vars_is_a_table_in_the_schema() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(repo.join("schemas/plan.schema.json")).expect("schema");
    let schema: serde_json::Value = serde_json::from_str(&text).expect("json");
    let vars = &schema["properties"]["vars"];
    assert_eq!(vars["type"], "object");
    assert!(vars.get("default").is_none_or(serde_json::Value::is_object));
}

//! Views of an expanded plan: `plan explain` (text and JSON) and `plan graph`
//! (text, Graphviz dot, Mermaid).

use std::fmt::Write;

use serde_json::json;

use crate::graph::Pipeline;

/// The preview of one step instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub reused: bool,
    pub key: Option<String>,
    /// Why it runs: changed inputs or settings, never ran, not reusable.
    pub why: Vec<String>,
    /// What looks wrong in its settings (an input that matches no file).
    pub warnings: Vec<String>,
}

impl Decision {
    /// The step runs, for these reasons.
    pub fn runs(key: Option<String>, why: Vec<String>) -> Decision {
        Decision {
            reused: false,
            key,
            why,
            warnings: Vec::new(),
        }
    }

    /// The step is reused from the result stored under `key`.
    pub fn reused(key: String) -> Decision {
        Decision {
            reused: true,
            key: Some(key),
            why: Vec::new(),
            warnings: Vec::new(),
        }
    }

    fn word(&self) -> &'static str {
        if self.reused { "reused" } else { "run" }
    }
}

fn needs_ids(pipeline: &Pipeline, index: petgraph::graph::NodeIndex) -> Vec<String> {
    pipeline
        .needs(index)
        .into_iter()
        .map(|n| pipeline.instance(n).id.clone())
        .collect()
}

pub fn explain_json(
    plan_name: &str,
    pipeline: &Pipeline,
    decisions: &[Decision],
) -> serde_json::Value {
    let steps: Vec<serde_json::Value> = pipeline
        .order
        .iter()
        .map(|&index| {
            let instance = pipeline.instance(index);
            let step = &pipeline.steps[instance.step];
            let decision = &decisions[index.index()];
            let cell: serde_json::Map<String, serde_json::Value> = instance
                .cell
                .values()
                .iter()
                .map(|(k, v)| (k.clone(), v.clone().into()))
                .collect();
            let mut doc = json!({
                "id": instance.id,
                "step": step.id,
                "kind": instance.kind,
                "cell": cell,
                "needs": needs_ids(pipeline, index),
                "always": instance.always,
                "action": decision.word(),
                "key": decision.key,
                "why": decision.why,
            });
            if !decision.warnings.is_empty() {
                doc["warnings"] = json!(decision.warnings);
            }
            doc
        })
        .collect();
    json!({ "plan": plan_name, "steps": steps })
}

pub fn explain_text(plan_name: &str, pipeline: &Pipeline, decisions: &[Decision]) -> String {
    let mut out = format!("plan `{plan_name}`: {} steps\n", pipeline.order.len());
    let width = pipeline
        .order
        .iter()
        .map(|&i| pipeline.instance(i).id.len())
        .max()
        .unwrap_or(0);
    for &index in &pipeline.order {
        let instance = pipeline.instance(index);
        let needs = needs_ids(pipeline, index);
        let mut line = format!(
            "  {:width$}  {:9} {:4}",
            instance.id,
            instance.kind.name(),
            decisions[index.index()].word()
        );
        if instance.always {
            line.push_str("  (always)");
        }
        if !needs.is_empty() {
            let _ = write!(line, "  needs {}", summarize(&needs));
        }
        out.push_str(line.trim_end());
        out.push('\n');
        let decision = &decisions[index.index()];
        if decision.reused {
            if let Some(key) = &decision.key {
                let _ = writeln!(out, "      reused: key {}", &key[..12.min(key.len())]);
            }
        } else if !decision.why.is_empty() {
            let _ = writeln!(out, "      runs: {}", decision.why.join("; "));
        }
        for warning in &decision.warnings {
            let _ = writeln!(out, "      warning: {warning}");
        }
    }
    out
}

/// A long fan-in reads as a count, not a wall of ids.
fn summarize(ids: &[String]) -> String {
    if ids.len() <= 4 {
        ids.join(", ")
    } else {
        format!("{}, … ({} steps)", ids[..3].join(", "), ids.len())
    }
}

pub fn graph_text(pipeline: &Pipeline) -> String {
    let mut out = String::new();
    for &index in &pipeline.order {
        let instance = pipeline.instance(index);
        let _ = writeln!(out, "{} ({})", instance.id, instance.kind.name());
        for need in needs_ids(pipeline, index) {
            let _ = writeln!(out, "  <- {need}");
        }
    }
    out
}

fn quoted(text: &str) -> String {
    serde_json::to_string(text).unwrap_or_default()
}

pub fn graph_dot(plan_name: &str, pipeline: &Pipeline) -> String {
    let mut out = format!("digraph {} {{\n  rankdir=LR;\n", quoted(plan_name));
    for &index in &pipeline.order {
        let instance = pipeline.instance(index);
        let _ = writeln!(
            out,
            "  {} [label={}];",
            quoted(&instance.id),
            quoted(&format!("{}\n{}", instance.id, instance.kind.name()))
        );
    }
    for &index in &pipeline.order {
        for need in needs_ids(pipeline, index) {
            let _ = writeln!(
                out,
                "  {} -> {};",
                quoted(&need),
                quoted(&pipeline.instance(index).id)
            );
        }
    }
    out.push_str("}\n");
    out
}

pub fn graph_mermaid(pipeline: &Pipeline) -> String {
    // Mermaid ids cannot hold `[` or `,`; use positions and put the real id in the label.
    let mut out = String::from("flowchart LR\n");
    for &index in &pipeline.order {
        let instance = pipeline.instance(index);
        let label = instance.id.replace('"', "#quot;");
        let _ = writeln!(out, "  n{}[\"{label}\"]", index.index());
    }
    for &index in &pipeline.order {
        for need in pipeline.needs(index) {
            let _ = writeln!(out, "  n{} --> n{}", need.index(), index.index());
        }
    }
    out
}

/// What `plan check` and `plan explain` say of secrets the plan reads that
/// are not set: not a problem there, a value unknown; a run of a step that
/// reads one refuses before anything runs.
pub fn unset_secrets_note(unset: &[crate::plan::UnsetSecret]) -> String {
    let mut out = String::new();
    let mut seen = std::collections::BTreeSet::new();
    for u in unset {
        if !seen.insert((u.name.as_str(), u.step.as_deref())) {
            continue;
        }
        let who = u.step.as_ref().map_or_else(
            || "every run needs it (it is read outside the steps)".to_owned(),
            |step| format!("a run of step `{step}` needs it"),
        );
        let _ = writeln!(
            out,
            "note: secret `{}` is not set, so its value is unknown here; {who}",
            u.name
        );
    }
    out
}

/// The same, for `--json`: `[{"name", "step"}]` (`step` null outside the steps).
pub fn unset_secrets_json(unset: &[crate::plan::UnsetSecret]) -> serde_json::Value {
    let mut seen = std::collections::BTreeSet::new();
    unset
        .iter()
        .filter(|u| seen.insert((u.name.as_str(), u.step.as_deref())))
        .map(|u| serde_json::json!({"name": u.name, "step": u.step}))
        .collect()
}

//! The plan side of `command`: a shell line or an argv, the files it reads
//! and writes, and where it runs.

use super::{OwnKey, PlanKind, StepCheck};
use crate::plan::decode::{Spanned, TableReader};
use crate::plan::diagnostic::{Diagnostic, Diagnostics};
use crate::plan::model::Program;
use crate::plan::node::Value;

pub struct Command;

/// A command step's keys as written.
#[derive(Debug, Clone, PartialEq)]
pub struct CommandKeys {
    pub run: Option<Spanned<String>>,
    pub argv: Option<Spanned<Vec<String>>>,
    pub inputs: Vec<Spanned<String>>,
    pub outputs: Vec<Spanned<String>>,
    pub cwd: Option<Spanned<String>>,
}

/// A command step's settings.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct CommandParams {
    pub program: Program,
    pub inputs: Vec<String>,
    pub outputs: Vec<String>,
    pub cwd: Option<String>,
}

impl Default for CommandParams {
    fn default() -> Self {
        CommandParams {
            program: Program::Argv(Vec::new()),
            inputs: Vec::new(),
            outputs: Vec::new(),
            cwd: None,
        }
    }
}

impl super::ParamsJson for CommandParams {}

impl PlanKind for Command {
    const DOC: &'static str = "Runs a shell line or an argv.";
    const KEYS: &'static [OwnKey] = &[
        OwnKey {
            name: "run",
            schema: r#"{"type": "string"}"#,
            doc: "A shell command (run with sh -c).",
            sample: r#""make game""#,
        },
        OwnKey {
            name: "argv",
            schema: r#"{"type": "array", "items": {"type": "string"}, "minItems": 1}"#,
            doc: "A program and its arguments, run without a shell.",
            sample: r#"["make", "game"]"#,
        },
        OwnKey {
            name: "inputs",
            schema: r#"{"type": "array", "items": {"type": "string"}}"#,
            doc: "Globs of files whose content the result depends on; \"$NAME\" keys on an environment variable.",
            sample: r#"["src/**"]"#,
        },
        OwnKey {
            name: "outputs",
            schema: r#"{"type": "array", "items": {"type": "string"}}"#,
            doc: "Globs of files the step produces; stored and restored on reuse.",
            sample: r#"["build/game"]"#,
        },
        OwnKey {
            name: "cwd",
            schema: r#"{"type": "string"}"#,
            doc: "Working directory, inside the repo.",
            sample: r#""src""#,
        },
    ];
    type Keys = CommandKeys;
    type Params = CommandParams;

    fn decode(t: &mut TableReader<'_>, diags: &mut Diagnostics) -> CommandKeys {
        CommandKeys {
            run: decode_run(t, diags),
            argv: t.optional("argv", diags),
            inputs: t.optional("inputs", diags).unwrap_or_default(),
            outputs: t.optional("outputs", diags).unwrap_or_default(),
            cwd: t.optional("cwd", diags),
        }
    }

    fn check(keys: &CommandKeys, cx: &mut StepCheck<'_, '_>) -> CommandParams {
        for path in &keys.inputs {
            cx.v.repo_path(path, "input");
        }
        for path in &keys.outputs {
            cx.v.repo_path(path, "output");
        }
        if let Some(cwd) = &keys.cwd
            && cx.v.repo_path(cwd, "cwd")
        {
            cx.v.cwd_exists(cwd, cx.step, cx.all);
        }
        let program = cx.v.program(
            keys.run.as_ref(),
            keys.argv.as_ref(),
            cx.step.id.span,
            &format!("command step `{}`", cx.step.id.value),
        );
        CommandParams {
            program: program.unwrap_or(Program::Argv(Vec::new())),
            inputs: keys.inputs.iter().map(|i| i.value.clone()).collect(),
            outputs: keys.outputs.iter().map(|o| o.value.clone()).collect(),
            cwd: keys.cwd.as_ref().map(|c| c.value.clone()),
        }
    }
}

/// A command step's `run`, pointing a list at `argv`.
fn decode_run(t: &mut TableReader<'_>, diags: &mut Diagnostics) -> Option<Spanned<String>> {
    match t.entry("run") {
        Some(e) if matches!(e.value.value, Value::Array(_)) => {
            diags.push(
                Diagnostic::new("plan::wrong_type", "expected a string, found an array")
                    .at(e.value.span)
                    .label("`run` is one shell line")
                    .help("for a program and its arguments as a list, write `argv = [..]` instead of `run`"),
            );
            // A stand-in (the error keeps the plan from being built), so
            // the step is not also said to have nothing to run.
            Some(Spanned::new(String::new(), e.value.span))
        }
        _ => t.optional("run", diags),
    }
}

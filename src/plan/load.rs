//! Reading a plan file from disk into the validated model.
//!
//! The stages, each of which reports every problem it finds: read the bytes
//! (size, UTF-8 and NUL checks come first, so a hostile file never reaches a
//! parser), parse TOML or YAML into the spanned tree, render templates (vars
//! first, then every other string), decode the raw plan, validate it, then
//! read the `dispositions.toml` beside it against the plan's lenses.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::diagnostic::{Diagnostic, Diagnostics, did_you_mean, one_of};
use super::model::Plan;
use super::node::{self, Entry, Node, Value, parse_bool, parse_int};
use super::raw::RawPlan;
use super::source::{Format, MAX_PLAN_BYTES, Source, Span};
use super::validate::Validator;
use crate::template::{Redactor, TemplateError, Templates};

/// What a load may read from outside the file: given, never looked up, so
/// tests can pin it and nothing leaks in by accident.
#[derive(Clone, Debug, Default)]
pub struct LoadOptions {
    /// The environment templates see as `env` and `secret()` reads.
    pub env: BTreeMap<String, String>,
    /// `--var NAME=VALUE` overrides, in the order given.
    pub vars: Vec<(String, String)>,
    /// The repo root; found from the plan's location when `None`.
    pub root: Option<PathBuf>,
    /// Shared with later stages so every secret read here is redacted everywhere.
    pub redactor: Redactor,
    /// An unset `secret("NAME")` is not an error but a value marked unknown,
    /// listed in [`LoadedPlan::unset_secrets`]: `plan check` and `plan
    /// explain` need no secret's value, and a run refuses only when a step it
    /// runs reads one.
    pub defer_secrets: bool,
    /// Warn of `game.inputs` patterns that match no file. It walks the
    /// repo, so only `plan check` asks: a run hashes the same inputs anyway
    /// and would walk them twice.
    pub warn_unmatched_inputs: bool,
}

/// A `secret("NAME")` that was not set when the plan loaded (with
/// [`LoadOptions::defer_secrets`]), and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnsetSecret {
    pub name: String,
    /// The string that reads it.
    pub span: Span,
    /// The id of the step whose table holds it; `None` outside `[[steps]]`
    /// (the backend, a persona, the game, a var): then any run may need it.
    pub step: Option<String>,
    /// Read in `[backend]` (its token): only a run that reaches the
    /// backend needs it (a paid plan's shard, given its job, does not).
    pub in_backend: bool,
}

/// A plan that loaded cleanly.
#[derive(Debug)]
pub struct LoadedPlan {
    pub source: Arc<Source>,
    pub root: PathBuf,
    pub plan: Plan,
    pub redactor: Redactor,
    /// What renders the strings a step reads per matrix cell
    /// (`{{ matrix.NAME }}`), after expansion.
    pub templates: Arc<Templates>,
    /// Secrets the plan reads that were not set (only with
    /// [`LoadOptions::defer_secrets`]; otherwise each is a load error).
    pub unset_secrets: Vec<UnsetSecret>,
    /// What is valid but likely not meant (a gate no step runs), for
    /// `plan check` to show; never a reason to refuse the plan.
    pub warnings: Vec<Diagnostic>,
}

impl LoadedPlan {
    /// The unset secrets a run of these steps needs: those its steps read,
    /// and those read outside any step.
    pub fn unset_secrets_for<'a>(
        &'a self,
        steps: &'a BTreeSet<&str>,
    ) -> impl Iterator<Item = &'a UnsetSecret> {
        self.unset_secrets
            .iter()
            .filter(|u| u.step.as_deref().is_none_or(|id| steps.contains(id)))
    }
}

/// A plan that did not: its source (when it could be read) and every problem.
#[derive(Debug)]
pub struct LoadFailure {
    pub name: String,
    pub source: Option<Arc<Source>>,
    pub diagnostics: Vec<Diagnostic>,
}

/// The repo root a plan's relative paths are resolved against: the nearest
/// ancestor of the plan file holding `.git` (or `.gameplan`), else the plan's
/// own directory.
pub fn find_root(plan_path: &Path) -> PathBuf {
    let absolute = std::path::absolute(plan_path).unwrap_or_else(|_| plan_path.to_path_buf());
    let dir = absolute
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    dir.ancestors()
        .find(|a| a.join(".git").exists() || a.join(".gameplan").is_dir())
        .map_or(dir.clone(), Path::to_path_buf)
}

pub fn load(path: &Path, options: &LoadOptions) -> Result<LoadedPlan, LoadFailure> {
    let name = path.display().to_string();
    let fail = |source: Option<Arc<Source>>, diagnostics: Vec<Diagnostic>| LoadFailure {
        name: name.clone(),
        source,
        diagnostics,
    };
    let source = Arc::new(read_source(path).map_err(|refused| {
        let (source, d) = *refused;
        fail(source.map(Arc::new), vec![d])
    })?);
    let root = options.root.clone().unwrap_or_else(|| find_root(path));
    match load_source_deferring(&source, &root, options) {
        Ok(Loaded {
            plan,
            unset: unset_secrets,
            warnings,
        }) => {
            check_dispositions(path, &plan)?;
            Ok(LoadedPlan {
                source,
                warnings,
                root,
                plan,
                redactor: options.redactor.clone(),
                templates: Arc::new(if options.defer_secrets {
                    Templates::deferring_secrets(options.env.clone(), options.redactor.clone())
                } else {
                    Templates::new(options.env.clone(), options.redactor.clone())
                }),
                unset_secrets,
            })
        }
        Err(diags) => Err(fail(
            Some(source),
            redact(diags.into_vec(), &options.redactor),
        )),
    }
}

/// A malformed `dispositions.toml` beside the plan is a plan error: a gate
/// would otherwise run with waivers that silently apply to nothing. Checked
/// once the plan is valid, since its lens names are what a disposition's
/// `lens` must be one of. A plan without the file is unaffected.
fn check_dispositions(path: &Path, plan: &Plan) -> Result<(), LoadFailure> {
    use super::dispositions::{Dispositions, beside};
    let lenses: Vec<&str> = plan.lenses.iter().map(|l| l.name.as_str()).collect();
    Dispositions::load_for(&beside(path), &lenses)
        .map(drop)
        .map_err(super::dispositions::DispositionsError::into_load_failure)
}

/// A secret rendered into a value that is then found wrong (an invalid id, a
/// path outside the repo) would be quoted back in the problem's message;
/// problems are printed and written to `--json` like any other output.
fn redact(mut diagnostics: Vec<Diagnostic>, redactor: &Redactor) -> Vec<Diagnostic> {
    if redactor.is_empty() {
        return diagnostics;
    }
    for d in &mut diagnostics {
        d.message = redactor.redact(&d.message);
        d.label = d.label.as_deref().map(|l| redactor.redact(l));
        d.help = d.help.as_deref().map(|h| redactor.redact(h));
    }
    diagnostics
}

type ReadError = Box<(Option<Source>, Diagnostic)>;

fn refuse(source: Option<Source>, diagnostic: Diagnostic) -> ReadError {
    Box::new((source, diagnostic))
}

fn read_source(path: &Path) -> Result<Source, ReadError> {
    let name = path.display().to_string();
    // Named once: every problem is printed after its file's name already.
    if path.is_dir() {
        return Err(refuse(
            None,
            Diagnostic::new("plan::not_a_file", "this is a directory, not a plan file").help(
                format!("pass the plan files in it, e.g. `gameplan plan check {name}/*.toml`"),
            ),
        ));
    }
    let Some(format) = Format::from_path(path) else {
        return Err(refuse(
            None,
            Diagnostic::new(
                "plan::unknown_format",
                "not a plan file (expected a .toml, .yaml or .yml extension)",
            )
            .help("plans are TOML or YAML; name the file accordingly"),
        ));
    };
    let unreadable = |e: std::io::Error| {
        refuse(
            None,
            Diagnostic::new("plan::unreadable", format!("cannot read {name}: {e}"))
                .help("check the path; plan paths are relative to the current directory"),
        )
    };
    let file = std::fs::File::open(path).map_err(unreadable)?;
    let mut bytes = Vec::new();
    // Read one byte past the cap so an oversize file is detected without
    // reading all of it.
    file.take(MAX_PLAN_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(unreadable)?;
    if bytes.len() > MAX_PLAN_BYTES {
        return Err(refuse(
            None,
            Diagnostic::new(
                "plan::too_large",
                format!("the plan is larger than {} KiB", MAX_PLAN_BYTES / 1024),
            )
            .help(
                "a plan is a hand-written file; keep data (cards, charters) in files it points to",
            ),
        ));
    }
    let source = |text: Arc<str>| Source {
        name: name.clone(),
        path: path.to_path_buf(),
        text,
        format,
    };
    let text: Arc<str> = match String::from_utf8(bytes) {
        Ok(text) => text.into(),
        Err(e) => {
            let at = e.utf8_error().valid_up_to();
            let lossy: Arc<str> = String::from_utf8_lossy(e.as_bytes()).into();
            return Err(refuse(
                Some(source(lossy)),
                Diagnostic::new("plan::not_utf8", "the plan is not valid UTF-8")
                    .at(Span::new(at, at + 1))
                    .label("invalid byte")
                    .help("save the file as UTF-8"),
            ));
        }
    };
    if let Some(at) = text.find('\0') {
        // Shown as ␀, never echoed raw into a terminal or a log; the first
        // NUL is the first replaced, so the span before it is unchanged.
        let shown: Arc<str> = text.replace('\0', "\u{2400}").into();
        return Err(refuse(
            Some(source(shown)),
            Diagnostic::new("plan::nul_byte", "the plan contains a NUL byte")
                .at(Span::new(at, at + '\u{2400}'.len_utf8()))
                .label("NUL byte (shown as ␀)")
                .help("plans are text; this looks like a binary file or a bad copy"),
        ));
    }
    if text.trim().is_empty() {
        // One problem, no excerpt: an excerpt of nothing is an empty box.
        return Err(refuse(
            Some(source(text)),
            Diagnostic::new("plan::empty", "the file is empty")
                .help("a plan starts with `version = 1` and `name = \"…\"`; `gameplan schema plan` describes the rest"),
        ));
    }
    Ok(source(text))
}

/// Parses, renders, decodes and validates one plan's text.
pub fn load_source(
    source: &Source,
    root: &Path,
    options: &LoadOptions,
) -> Result<Plan, Diagnostics> {
    load_source_deferring(source, root, options).map(|loaded| loaded.plan)
}

/// What a clean load gives besides the plan.
struct Loaded {
    plan: Plan,
    unset: Vec<UnsetSecret>,
    warnings: Vec<Diagnostic>,
}

/// [`load_source`], with the unset secrets it deferred and its warnings.
fn load_source_deferring(
    source: &Source,
    root: &Path,
    options: &LoadOptions,
) -> Result<Loaded, Diagnostics> {
    let mut diags = Diagnostics::default();
    let tree = match source.format {
        Format::Toml => node::from_toml(&source.text, &mut diags),
        Format::Yaml => node::from_yaml(&source.text, &mut diags),
    };
    let Some(mut tree) = tree else {
        return Err(diags);
    };
    if !matches!(tree.value, Value::Table(_)) {
        diags.push(
            Diagnostic::new("plan::wrong_type", "a plan must be a table of keys")
                .at(tree.span)
                .help("start with `version = 1` and `name = \"…\"`"),
        );
        return Err(diags);
    }

    let templates = if options.defer_secrets {
        Templates::deferring_secrets(options.env.clone(), options.redactor.clone())
    } else {
        Templates::new(options.env.clone(), options.redactor.clone())
    };
    let steps = step_spans(&tree);
    let backend = table_extent(&tree, "backend");
    let vars = render_vars(&mut tree, &templates, &options.vars, &mut diags);
    render_strings(&mut tree, &templates, &vars, &mut diags, 0);
    let unset: Vec<UnsetSecret> = std::mem::take(&mut diags.unset_secrets)
        .into_iter()
        .map(|(name, span)| UnsetSecret {
            step: steps
                .iter()
                .find(|(at, _)| at.start <= span.start && span.end <= at.end)
                .and_then(|(_, id)| id.clone()),
            in_backend: backend.is_some_and(|at| at.start <= span.start && span.end <= at.end),
            name,
            span,
        })
        .collect();

    let raw = RawPlan::decode(&tree, &mut diags);
    let Some(raw) = raw else { return Err(diags) };
    let raw = RawPlan {
        vars: vars
            .as_object()
            .map(|m| m.clone().into_iter().collect())
            .unwrap_or_default(),
        ..raw
    };
    let validator = Validator {
        source,
        root,
        templates: &templates,
        diags,
        warn_unmatched_inputs: options.warn_unmatched_inputs,
    };
    match validator.plan(&raw) {
        (Some(plan), mut d) if d.is_empty() => Ok(Loaded {
            plan,
            unset,
            warnings: d.take_warnings(),
        }),
        (_, d) => Err(d),
    }
}

/// Each `[[steps]]` table's span and id (when it has a plain one), so an
/// unset secret is charged to the step that reads it.
/// The bytes the top-level table `key` covers, if the plan has it.
fn table_extent(tree: &Node, key: &str) -> Option<Span> {
    let Value::Table(entries) = &tree.value else {
        return None;
    };
    entries
        .iter()
        .find(|e| e.key == key)
        .map(|e| extent(&e.value))
}

fn step_spans(tree: &Node) -> Vec<(Span, Option<String>)> {
    let Value::Table(entries) = &tree.value else {
        return Vec::new();
    };
    let Some(Value::Array(steps)) = entries
        .iter()
        .find(|e| e.key == "steps")
        .map(|e| &e.value.value)
    else {
        return Vec::new();
    };
    steps
        .iter()
        .map(|step| {
            let id = match &step.value {
                Value::Table(keys) => {
                    keys.iter()
                        .find(|k| k.key == "id")
                        .and_then(|k| match &k.value.value {
                            Value::Str(id) | Value::Scalar(id) => Some(id.clone()),
                            _ => None,
                        })
                }
                _ => None,
            };
            (extent(step), id)
        })
        .collect()
}

/// The bytes a node and everything in it cover (a TOML table's own span may
/// be its header alone).
fn extent(node: &Node) -> Span {
    let mut span = node.span;
    let mut widen = |other: Span| {
        span = Span::new(span.start.min(other.start), span.end.max(other.end));
    };
    match &node.value {
        Value::Table(entries) => {
            for entry in entries {
                widen(entry.key_span);
                widen(extent(&entry.value));
            }
        }
        Value::Array(items) => items.iter().for_each(|item| widen(extent(item))),
        _ => {}
    }
    span
}

/// Renders `[vars]` (which may read `env` and `secret()` but not each other)
/// and applies `--var` overrides.
fn render_vars(
    tree: &mut Node,
    templates: &Templates,
    overrides: &[(String, String)],
    diags: &mut Diagnostics,
) -> serde_json::Value {
    let empty = serde_json::Value::Object(serde_json::Map::new());
    let mut vars = serde_json::Map::new();
    if let Value::Table(entries) = &mut tree.value
        && let Some(entry) = entries.iter_mut().find(|e| e.key == "vars")
    {
        if matches!(entry.value.value, Value::Table(_)) {
            render_strings(&mut entry.value, templates, &empty, diags, 0);
            if let Value::Table(vs) = &entry.value.value {
                for v in vs {
                    vars.insert(v.key.clone(), v.value.to_json());
                }
            }
        } else if !matches!(entry.value.value, Value::Null) {
            super::decode::wrong_type(&entry.value, "a table", diags);
        }
    }
    for (name, value) in overrides {
        if !vars.contains_key(name) {
            let declared: Vec<&str> = vars.keys().map(String::as_str).collect();
            let mut d = Diagnostic::new(
                "plan::unknown_var",
                format!("--var {name}={value}: the plan declares no var `{name}`"),
            );
            d = match did_you_mean(name, declared.iter().copied()) {
                Some(hint) => d.help(hint),
                None if declared.is_empty() => d.help("declare it under [vars] first"),
                None => d.help(format!("the plan's vars are {}", one_of(&declared))),
            };
            diags.push(d);
            continue;
        }
        // Same typing as an untyped YAML value: integers and booleans when
        // plainly one, the text otherwise.
        let typed = parse_int(value)
            .map(serde_json::Value::from)
            .or_else(|| parse_bool(value).map(serde_json::Value::from))
            .unwrap_or_else(|| value.clone().into());
        vars.insert(name.clone(), typed);
    }
    serde_json::Value::Object(vars)
}

/// Keys whose strings are not templates: `vars` (rendered on their own),
/// a rule lens's `when` (an expression evaluated per unit at review time)
/// and an llm lens's `charter` (a prompt rendered per unit at review time).
fn is_verbatim(key: &str, depth: usize) -> bool {
    (key == "vars" && depth == 0) || key == "when" || key == "charter"
}

/// A step's keys whose strings may read `matrix.NAME`: rendered once per
/// cell after expansion (`graph::cells`), not here.
pub const PER_CELL_KEYS: [&str; 6] = ["run", "argv", "env", "inputs", "outputs", "cwd"];

/// The axes of a step's `matrix` table as written, each with a stand-in
/// value: enough to check a per-cell template's names when the plan loads.
fn sample_axes(step: &Node) -> Option<BTreeMap<String, String>> {
    let Value::Table(entries) = &step.value else {
        return None;
    };
    let matrix = entries.iter().find(|e| e.key == "matrix")?;
    let Value::Table(axes) = &matrix.value.value else {
        return None;
    };
    Some(
        axes.iter()
            .map(|axis| (axis.key.clone(), "1".to_owned()))
            .collect(),
    )
}

/// Renders one step's strings; those of [`PER_CELL_KEYS`] that read
/// `matrix` are checked against the step's axes and left for the cells.
fn render_step(
    step: &mut Node,
    templates: &Templates,
    vars: &serde_json::Value,
    diags: &mut Diagnostics,
    depth: usize,
) {
    let axes = sample_axes(step);
    let Value::Table(entries) = &mut step.value else {
        render_strings(step, templates, vars, diags, depth);
        return;
    };
    for Entry { key, value, .. } in entries.iter_mut() {
        if PER_CELL_KEYS.contains(&key.as_str()) {
            defer_matrix(value, templates, vars, axes.as_ref(), diags, depth + 1);
        } else {
            render_strings(value, templates, vars, diags, depth + 1);
        }
    }
}

fn defer_matrix(
    node: &mut Node,
    templates: &Templates,
    vars: &serde_json::Value,
    axes: Option<&BTreeMap<String, String>>,
    diags: &mut Diagnostics,
    depth: usize,
) {
    match &mut node.value {
        Value::Str(text) | Value::Scalar(text)
            if Templates::is_template(text) && axes.is_some() && templates.reads_matrix(text) =>
        {
            match templates.render_cell(text, vars, axes) {
                Ok(_) => note_unset(diags, templates, node.span),
                Err(e) => push_template_error(diags, node.span, e),
            }
        }
        Value::Table(entries) => {
            for entry in entries.iter_mut() {
                defer_matrix(&mut entry.value, templates, vars, axes, diags, depth + 1);
            }
        }
        Value::Array(items) => {
            for item in items {
                defer_matrix(item, templates, vars, axes, diags, depth + 1);
            }
        }
        _ => render_strings(node, templates, vars, diags, depth),
    }
}

/// Notes where the unset secrets just rendered stand.
fn note_unset(diags: &mut Diagnostics, templates: &Templates, span: Span) {
    for name in templates.take_unset() {
        diags.unset_secrets.push((name, span));
    }
}

fn push_template_error(diags: &mut Diagnostics, span: Span, e: TemplateError) {
    let mut d = Diagnostic::new("plan::template", e.message)
        .at(span)
        .label("in this template");
    if let Some(help) = e.help {
        d = d.help(help);
    }
    diags.push(d);
}

fn render_strings(
    node: &mut Node,
    templates: &Templates,
    vars: &serde_json::Value,
    diags: &mut Diagnostics,
    depth: usize,
) {
    match &mut node.value {
        Value::Str(text) | Value::Scalar(text) if Templates::is_template(text) => {
            match templates.render(text, vars) {
                // Rendered text is untyped: `seed = "{{ vars.seed }}"` may fill an integer key.
                Ok(rendered) => {
                    note_unset(diags, templates, node.span);
                    node.value = Value::Scalar(rendered);
                }
                Err(e) => push_template_error(diags, node.span, e),
            }
        }
        Value::Table(entries) => {
            for Entry { key, value, .. } in entries.iter_mut() {
                if key == "steps"
                    && depth == 0
                    && let Value::Array(steps) = &mut value.value
                {
                    for step in steps {
                        render_step(step, templates, vars, diags, depth + 2);
                    }
                    continue;
                }
                if !is_verbatim(key, depth) {
                    render_strings(value, templates, vars, diags, depth + 1);
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                render_strings(item, templates, vars, diags, depth + 1);
            }
        }
        _ => {}
    }
}

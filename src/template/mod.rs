//! The one minijinja environment every plan string is rendered with.
//!
//! Owns: strict undefined (a typo is an error, never an empty string), the
//! `secret()` function and the [`Redactor`] its values are registered with,
//! and the caps that keep a hostile template from hanging or filling memory
//! (fuel for loops, a size cap on rendered output). Plan strings are rendered
//! at load, but for one that reads `matrix`, rendered per cell after
//! expansion (`graph::cells`). What renders later (a player's prompt, an
//! `llm` lens's charter, a rule lens's `when`) goes through the same caps
//! with what it plays or judges in scope; a prompt gets no `env` and no
//! `secret()`, since it goes to a model.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::sync::{Arc, Mutex, PoisonError};

use minijinja::{Environment, ErrorKind, UndefinedBehavior, Value};

/// The most a single rendered string may hold.
pub const MAX_RENDERED_BYTES: usize = 64 * 1024;

/// The most bytes of a prompt template or persona card file an `llm`
/// player reads (`plan check` refuses a larger `prompt_file`).
pub const MAX_PROMPT_FILE_BYTES: u64 = 64 * 1024;

/// A card or prompt file, up to [`MAX_PROMPT_FILE_BYTES`]; `what` names it
/// in the error as the user wrote it (the plan key or the flag, and the path).
pub fn read_prompt_file(path: &std::path::Path, what: &str) -> Result<String, String> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| format!("cannot read {what}: {e}"))?;
    let mut text = String::new();
    file.take(MAX_PROMPT_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| format!("cannot read {what}: {e}"))?;
    if text.len() as u64 > MAX_PROMPT_FILE_BYTES {
        return Err(format!(
            "{what} is larger than {} KiB; a card or prompt never needs to be",
            MAX_PROMPT_FILE_BYTES / 1024
        ));
    }
    Ok(text)
}

/// Instructions a single template may execute: plenty for any real plan
/// string, few enough that `{% for i in range(10**9) %}` stops at once.
pub const FUEL: u64 = 100_000;

/// Names a plan template may read at its top level.
pub const GLOBALS: [&str; 3] = ["vars", "env", "secret"];

/// Replaces every registered secret value with `[redacted]`.
///
/// Cloned handles share one set: a value registered while loading the plan is
/// redacted in every log, journal, report and `--json` document written later.
#[derive(Clone, Debug, Default)]
pub struct Redactor {
    secrets: Arc<Mutex<BTreeSet<String>>>,
}

pub const REDACTED: &str = "[redacted]";

impl Redactor {
    pub fn register(&self, secret: &str) {
        if !secret.is_empty() {
            self.lock().insert(secret.to_owned());
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeSet<String>> {
        self.secrets.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// The secret values themselves, for redacting what gameplan does not
    /// print itself (the step logs the launcher writes).
    pub fn values(&self) -> Vec<String> {
        self.lock().iter().cloned().collect()
    }

    pub fn redact(&self, text: &str) -> String {
        let secrets = self.lock();
        // Longest first, so a secret that contains another is replaced whole.
        let mut ordered: Vec<&String> = secrets.iter().collect();
        ordered.sort_by_key(|s| std::cmp::Reverse(s.len()));
        let mut out = text.to_owned();
        for secret in ordered {
            if out.contains(secret.as_str()) {
                out = out.replace(secret.as_str(), REDACTED);
            }
        }
        out
    }

    /// Redacts every string (and object key) of a JSON document.
    pub fn redact_json(&self, value: &mut serde_json::Value) {
        if self.is_empty() {
            return;
        }
        match value {
            serde_json::Value::String(s) => *s = self.redact(s),
            serde_json::Value::Array(items) => items.iter_mut().for_each(|v| self.redact_json(v)),
            serde_json::Value::Object(map) => {
                let entries = std::mem::take(map);
                for (k, mut v) in entries {
                    self.redact_json(&mut v);
                    map.insert(self.redact(&k), v);
                }
            }
            _ => {}
        }
    }
}

/// Why a template could not be rendered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateError {
    pub message: String,
    pub help: Option<String>,
}

/// An expression compiled by [`Templates::compile_expression`].
pub struct CompiledExpression<'t>(minijinja::Expression<'t, 't>);

impl CompiledExpression<'_> {
    pub fn eval(&self, ctx: Value) -> Result<Value, TemplateError> {
        self.0.eval(ctx).map_err(|e| render_error(&e))
    }
}

/// The rendering environment: minijinja plus the process environment it may read.
pub struct Templates {
    jinja: Environment<'static>,
    env: BTreeMap<String, String>,
    redactor: Redactor,
    /// With secrets deferred: the names of unset secrets rendered since the
    /// last [`Templates::take_unset`].
    unset: Option<Arc<Mutex<Vec<String>>>>,
}

/// What an unset secret renders as when secrets are deferred (`plan check`,
/// `plan explain`, and a run until it knows which steps it runs): a value
/// marked unknown, never mistaken for a real one.
pub fn unset_secret(name: &str) -> String {
    format!("<secret {name}: not set>")
}

impl std::fmt::Debug for Templates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The environment may hold secrets: never printed.
        f.debug_struct("Templates").finish_non_exhaustive()
    }
}

impl Templates {
    /// `env` is the process environment as the caller chose to expose it
    /// (tests pass their own; nothing here reads `std::env`).
    pub fn new(env: BTreeMap<String, String>, redactor: Redactor) -> Self {
        Self::build(env, redactor, false)
    }

    /// Like [`Templates::new`], but a `secret("NAME")` that is not set
    /// renders as [`unset_secret`] and is noted (see [`Templates::take_unset`])
    /// instead of failing: only a step that runs needs a secret's value.
    pub fn deferring_secrets(env: BTreeMap<String, String>, redactor: Redactor) -> Self {
        Self::build(env, redactor, true)
    }

    /// The unset secrets rendered since the last call, in order.
    /// The caller knows where the string it rendered stands.
    pub fn take_unset(&self) -> Vec<String> {
        self.unset.as_ref().map_or_else(Vec::new, |unset| {
            std::mem::take(&mut *unset.lock().unwrap_or_else(PoisonError::into_inner))
        })
    }

    fn build(env: BTreeMap<String, String>, redactor: Redactor, defer: bool) -> Self {
        let mut jinja = environment();
        let secret_env = env.clone();
        let secret_redactor = redactor.clone();
        let unset = defer.then(|| Arc::new(Mutex::new(Vec::new())));
        let secret_unset = unset.clone();
        jinja.add_function(
            "secret",
            move |name: String| -> Result<String, minijinja::Error> {
                match (secret_env.get(&name), &secret_unset) {
                    (Some(value), _) => {
                        secret_redactor.register(value);
                        Ok(value.clone())
                    }
                    (None, Some(unset)) => {
                        unset
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .push(name.clone());
                        // Registered like a value: where a real value
                        // would be redacted (a reuse key), so is this, and
                        // `plan explain` keys the step as a run would.
                        let stand_in = unset_secret(&name);
                        secret_redactor.register(&stand_in);
                        Ok(stand_in)
                    }
                    (None, None) => Err(minijinja::Error::new(
                        ErrorKind::InvalidOperation,
                        format!("secret `{name}` is not set in the environment"),
                    )),
                }
            },
        );
        Templates {
            jinja,
            env,
            redactor,
            unset,
        }
    }

    pub fn redactor(&self) -> &Redactor {
        &self.redactor
    }

    pub fn env(&self) -> &BTreeMap<String, String> {
        &self.env
    }

    /// Whether a string is a template at all (plain strings skip minijinja).
    pub fn is_template(text: &str) -> bool {
        text.contains("{{") || text.contains("{%") || text.contains("{#")
    }

    /// Renders `source` with `vars` (and `env`, `secret()`) in scope.
    pub fn render(&self, source: &str, vars: &serde_json::Value) -> Result<String, TemplateError> {
        self.render_cell(source, vars, None)
    }

    /// Whether `source` reads `matrix`: such a string in a step is rendered
    /// once per cell, after expansion, not when the plan loads.
    pub fn reads_matrix(&self, source: &str) -> bool {
        self.jinja
            .template_from_str(source)
            .is_ok_and(|t| t.undeclared_variables(false).contains("matrix"))
    }

    /// [`Self::render`] with one cell's matrix values as `matrix.NAME`.
    pub fn render_cell(
        &self,
        source: &str,
        vars: &serde_json::Value,
        matrix: Option<&BTreeMap<String, String>>,
    ) -> Result<String, TemplateError> {
        let template = self
            .jinja
            .template_from_str(source)
            .map_err(|e| syntax_error(&e))?;
        for name in template.undeclared_variables(true) {
            self.check_defined(&name, vars, matrix)?;
        }
        let ctx = minijinja::context! {
            vars => Value::from(minijinja::value::Serde(vars)),
            env => Value::from(minijinja::value::Serde(&self.env)),
            matrix => Value::from(minijinja::value::Serde(matrix)),
        };
        let mut out = CappedWriter::default();
        match template.render_captured_to(ctx, &mut out) {
            Ok(_) => {}
            Err(_) if out.overflowed => return Err(too_large()),
            Err(e) => return Err(render_error(&e)),
        }
        String::from_utf8(out.bytes).map_err(|_| TemplateError {
            message: "the template rendered invalid UTF-8".into(),
            help: None,
        })
    }

    /// Checks that `expr` compiles as an expression (a rule lens's `when`).
    /// `allowed` are the names it may read besides the globals (e.g. `unit`).
    pub fn check_expression(&self, expr: &str, allowed: &[&str]) -> Result<(), TemplateError> {
        let compiled = self
            .jinja
            .compile_expression(expr)
            .map_err(|e| expression_syntax_error(&e))?;
        for name in compiled.undeclared_variables(false) {
            let known = allowed.contains(&name.as_str())
                || GLOBALS.contains(&name.as_str())
                || self.jinja.globals().any(|(global, _)| global == name);
            if !known {
                return Err(TemplateError {
                    message: format!("`{name}` is not defined in this expression"),
                    help: Some(format!("the expression can read {}", allowed.join(", "))),
                });
            }
        }
        Ok(())
    }

    /// Compiles an expression once, to evaluate it for many contexts (a
    /// rule lens over many units) with the caps of [`Self::eval`].
    pub fn compile_expression<'t>(
        &'t self,
        expr: &'t str,
    ) -> Result<CompiledExpression<'t>, TemplateError> {
        self.jinja
            .compile_expression(expr)
            .map(CompiledExpression)
            .map_err(|e| expression_syntax_error(&e))
    }

    /// [`Self::compile_expression`] for an expression that outlives its
    /// source string (a game's `goal`, evaluated after every action of a
    /// cell): it keeps its own copy of `expr`.
    pub fn compile_expression_owned(
        &self,
        expr: &str,
    ) -> Result<CompiledExpression<'_>, TemplateError> {
        self.jinja
            .compile_expression_owned(expr.to_owned())
            .map(CompiledExpression)
            .map_err(|e| expression_syntax_error(&e))
    }

    /// Evaluates an expression (rule lenses) with the caps of [`Self::render`].
    pub fn eval(&self, expr: &str, ctx: Value) -> Result<Value, TemplateError> {
        let compiled = self
            .jinja
            .compile_expression(expr)
            .map_err(|e| expression_syntax_error(&e))?;
        compiled.eval(ctx).map_err(|e| render_error(&e))
    }

    fn check_defined(
        &self,
        path: &str,
        vars: &serde_json::Value,
        matrix: Option<&BTreeMap<String, String>>,
    ) -> Result<(), TemplateError> {
        let mut parts = path.split('.');
        let root = parts.next().unwrap_or_default();
        let field = parts.next();
        if self.jinja.globals().any(|(name, _)| name == root) {
            // Built-in functions (`range`, `secret`, ...).
            return Ok(());
        }
        match (root, field) {
            ("vars", Some(name)) if vars.get(name).is_none() => {
                let declared: Vec<&str> = vars
                    .as_object()
                    .map(|m| m.keys().map(String::as_str).collect())
                    .unwrap_or_default();
                Err(TemplateError {
                    message: format!("`vars.{name}` is not set"),
                    help: Some(
                        match crate::suggest::did_you_mean(name, declared.iter().copied()) {
                            Some(hint) => hint,
                            None if declared.is_empty() => {
                                format!("declare it under [vars], or pass --var {name}=VALUE")
                            }
                            None => format!(
                                "the plan's vars are {}; or pass --var {name}=VALUE",
                                crate::suggest::one_of(&declared)
                            ),
                        },
                    ),
                })
            }
            ("env", Some(name)) if !self.env.contains_key(name) => Err(TemplateError {
                message: format!("environment variable `{name}` is not set"),
                help: Some(format!("export {name} before running gameplan")),
            }),
            ("matrix", _) if matrix.is_none() => Err(TemplateError {
                message: "`matrix` is defined only in a step's `run`, `argv`, `env`, `inputs`, `outputs` and `cwd`, when the step has a `matrix`".into(),
                help: Some("add `matrix = { NAME = [..] }` to the step, or read the value from `$GAMEPLAN_MATRIX_NAME` in the command".into()),
            }),
            ("matrix", Some(name)) if matrix.is_some_and(|m| !m.contains_key(name)) => {
                let axes: Vec<&str> = matrix
                    .map(|m| m.keys().map(String::as_str).collect())
                    .unwrap_or_default();
                Err(TemplateError {
                    message: format!("`matrix.{name}` is not an axis of this step's matrix"),
                    help: Some(
                        crate::suggest::did_you_mean(name, axes.iter().copied()).unwrap_or_else(
                            || format!("its axes are {}", crate::suggest::one_of(&axes)),
                        ),
                    ),
                })
            }
            ("vars" | "env" | "matrix", _) => Ok(()),
            (other, _) => Err(TemplateError {
                message: format!("`{other}` is not defined"),
                help: Some(
                    "plan templates can read `vars.NAME`, `env.NAME`, `secret(\"NAME\")`, and in a matrix step's commands `matrix.NAME`".into(),
                ),
            }),
        }
    }
}

/// The environment every template is rendered in: strict undefined, fuel,
/// a recursion limit, no HTML escaping. Plan strings add `secret()` to it.
fn environment() -> Environment<'static> {
    let mut jinja = Environment::new();
    jinja.set_undefined_behavior(UndefinedBehavior::Strict);
    jinja.set_fuel(Some(FUEL));
    jinja.set_recursion_limit(64);
    // Plan strings and prompts are not HTML.
    jinja.set_auto_escape_callback(|_| minijinja::AutoEscape::None);
    jinja
}

/// Renders a prompt template (an `llm` player's) with `context` at its top
/// level, with the caps plan strings have (strict undefined, fuel, at most
/// [`MAX_RENDERED_BYTES`]). A prompt has no `env` and no `secret()`: it
/// goes to a model, and the plan's secrets must not.
pub fn render_prompt(source: &str, context: &serde_json::Value) -> Result<String, TemplateError> {
    let jinja = environment();
    let template = jinja
        .template_from_str(source)
        .map_err(|e| prompt_error(&e))?;
    let mut out = CappedWriter::default();
    match template.render_captured_to(Value::from(minijinja::value::Serde(context)), &mut out) {
        Ok(_) => {}
        Err(_) if out.overflowed => return Err(too_large()),
        Err(e) if e.kind() == ErrorKind::OutOfFuel => return Err(render_error(&e)),
        Err(e) => return Err(prompt_error(&e)),
    }
    String::from_utf8(out.bytes).map_err(|_| TemplateError {
        message: "the prompt rendered invalid UTF-8".into(),
        help: None,
    })
}

/// Checks that a prompt template compiles (`plan check`).
pub fn check_prompt(source: &str) -> Result<(), TemplateError> {
    environment()
        .template_from_str(source)
        .map(|_| ())
        .map_err(|e| prompt_error(&e))
}

/// Checks that a plan's own `report.html` template compiles (`plan check`):
/// its syntax only, which the page's environment (`report::html`) shares
/// with every minijinja environment.
pub fn check_page(source: &str) -> Result<(), TemplateError> {
    Environment::new()
        .template_from_str(source)
        .map(|_| ())
        .map_err(|e| TemplateError {
            message: format!("invalid template{}", located(&e)),
            help: Some(
                "the template gets what the shipped one gets: `run`, `verdict`, `findings`, \
                 `cells`, `gates`, ... (docs/running.md › The HTML report)"
                    .into(),
            ),
        })
}

/// What a compile error says, after where it is: ` (line 3): unexpected
/// end of input`.
fn located(e: &minijinja::Error) -> String {
    let detail = e
        .detail()
        .map_or_else(|| e.kind().to_string(), str::to_owned);
    let at = e.line().map(|l| format!(" (line {l})")).unwrap_or_default();
    format!("{at}: {detail}")
}

fn prompt_error(e: &minijinja::Error) -> TemplateError {
    TemplateError {
        message: format!("invalid prompt template{}", located(e)),
        help: Some(
            "a prompt reads `persona`, `observation` (text, actions, score, state), `history` \
             (action, result), `wanted` and `step`"
                .into(),
        ),
    }
}

fn syntax_error(e: &minijinja::Error) -> TemplateError {
    TemplateError {
        message: format!("invalid template: {}", e.detail().map_or_else(|| e.kind().to_string(), str::to_owned)),
        help: Some("templates use minijinja syntax: {{ vars.NAME }}, {{ env.NAME }}, {{ secret(\"NAME\") }}".into()),
    }
}

/// An expression (a rule's `when`) is not a template: the template help
/// (`{{ vars.NAME }}`…) would send the user the wrong way.
fn expression_syntax_error(e: &minijinja::Error) -> TemplateError {
    TemplateError {
        message: format!(
            "invalid expression: {}",
            e.detail()
                .map_or_else(|| e.kind().to_string(), str::to_owned)
        ),
        help: Some(
            "write one minijinja expression, without `{{ }}`: unit.category in ['crash', 'hang']"
                .into(),
        ),
    }
}

fn render_error(e: &minijinja::Error) -> TemplateError {
    if e.kind() == ErrorKind::OutOfFuel {
        return TemplateError {
            message: format!("the template ran out of fuel ({FUEL} steps)"),
            help: Some(
                "plan templates are for small substitutions; move loops into a command step".into(),
            ),
        };
    }
    let message = match e.detail() {
        Some(detail) => detail.to_owned(),
        None => e.kind().to_string(),
    };
    let help = message.starts_with("secret `").then(|| {
        "export it in the environment that runs gameplan; its value is redacted from all output"
            .to_owned()
    });
    TemplateError { message, help }
}

fn too_large() -> TemplateError {
    TemplateError {
        message: format!(
            "the template renders to more than {} KiB",
            MAX_RENDERED_BYTES / 1024
        ),
        help: Some("a plan value never needs to be this long; check the template".into()),
    }
}

#[derive(Default)]
struct CappedWriter {
    bytes: Vec<u8>,
    overflowed: bool,
}

impl Write for CappedWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.bytes.len() + buf.len() > MAX_RENDERED_BYTES {
            self.overflowed = true;
            return Err(std::io::Error::other("rendered output too large"));
        }
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_prompt_file_is_read_up_to_its_cap_and_refused_one_byte_past_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let at_cap = dir.path().join("at_cap.md");
        let over = dir.path().join("over.md");
        let cap = usize::try_from(MAX_PROMPT_FILE_BYTES).expect("cap fits");
        std::fs::write(&at_cap, "c".repeat(cap)).expect("write");
        std::fs::write(&over, "c".repeat(cap + 1)).expect("write");
        assert_eq!(
            read_prompt_file(&at_cap, "card").expect("at cap").len(),
            cap
        );
        let error = read_prompt_file(&over, "--card-file `over.md`").expect_err("over cap");
        assert!(
            error.starts_with("--card-file `over.md` is larger than 64 KiB"),
            "{error}"
        );
        let missing = read_prompt_file(&dir.path().join("nope.md"), "card_file `nope.md`");
        assert!(
            missing
                .expect_err("missing")
                .starts_with("cannot read card_file `nope.md`")
        );
    }

    fn templates() -> Templates {
        let env = BTreeMap::from([
            ("HOME_URL".to_owned(), "http://x".to_owned()),
            ("KEY".to_owned(), "s3cr3t-value".to_owned()),
        ]);
        Templates::new(env, Redactor::default())
    }

    #[test]
    fn renders_vars_env_and_secrets() {
        let t = templates();
        let out = t
            .render(
                "{{ vars.seed }} {{ env.HOME_URL }} {{ secret('KEY') }}",
                &json!({"seed": 7}),
            )
            .unwrap();
        assert_eq!(out, "7 http://x s3cr3t-value");
        assert_eq!(t.redactor().redact(&out), "7 http://x [redacted]");
    }

    #[test]
    fn undefined_names_are_errors_with_hints() {
        let t = templates();
        let e = t.render("{{ vars.sed }}", &json!({"seed": 7})).unwrap_err();
        assert_eq!(e.message, "`vars.sed` is not set");
        assert_eq!(e.help.as_deref(), Some("did you mean `seed`?"));
        let e = t.render("{{ env.NOPE }}", &json!({})).unwrap_err();
        assert!(e.message.contains("NOPE"));
        let e = t.render("{{ secret('NOPE') }}", &json!({})).unwrap_err();
        assert!(e.message.contains("secret `NOPE` is not set"), "{e:?}");
    }

    #[test]
    fn runaway_templates_are_stopped() {
        let t = templates();
        let e = t
            .render(
                "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
                &json!({}),
            )
            .unwrap_err();
        assert!(e.message.contains("fuel"), "{e:?}");
        let e = t.render("{{ 'a' * 1000000 }}", &json!({})).unwrap_err();
        assert!(e.message.contains("KiB"), "{e:?}");
    }

    #[test]
    fn expressions_compile_or_explain() {
        let t = templates();
        assert!(
            t.check_expression("unit.category in ['crash', 'hang']", &["unit"])
                .is_ok()
        );
        assert!(t.check_expression("unit.category in [", &["unit"]).is_err());
        assert!(t.check_expression("foo.x", &["unit"]).is_err());
    }

    #[test]
    fn redacts_json_documents() {
        let r = Redactor::default();
        r.register("tok123");
        let mut v = json!({"a": ["x tok123 y"], "tok123": 1});
        r.redact_json(&mut v);
        assert_eq!(v, json!({"a": ["x [redacted] y"], "[redacted]": 1}));
    }
}

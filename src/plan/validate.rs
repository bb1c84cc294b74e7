//! From the plan as written to the plan the engine sees, reporting every problem.
//!
//! Checks names, uniqueness, every cross-reference, paths, money rules and the
//! shape of the step graph (cycles, size) on the raw, spanned plan, so each
//! problem points at the key that causes it. Produces the model only when the
//! file has no problem at all.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Component, Path};

use super::decode::Spanned;
use super::diagnostic::{Diagnostic, Diagnostics, did_you_mean, one_of};
use super::model::{
    Axis, Backend, BackendKind, Budget, Card, Controller, Driver, FailOn, Game, Gate, Judge, Lens,
    LensKind, LensOver, Params, Persona, Plan, Player, Program, Step,
};
use super::raw::{RawAxis, RawLens, RawMatrix, RawParams, RawPersona, RawPlan, RawPlayer, RawStep};
use super::source::{Source, Span};
use crate::template::Templates;

/// The most steps a plan may expand to. Checked by arithmetic on the matrix
/// sizes, before anything is allocated.
pub const MAX_EXPANDED_STEPS: u64 = 10_000;

/// Pools every plan has without declaring them.
pub const BUILTIN_POOLS: [&str; 3] = ["play", "browser", "llm"];

/// The one rule for plan names, step ids, persona slugs, lens and gate names.
pub fn is_valid_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b'a'..=b'z' | b'0'..=b'9'))
        && bytes.all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-'))
}

/// "steps", "personas", and "lenses", not "lenss".
fn plural(word: &str) -> String {
    if word.ends_with('s') {
        format!("{word}es")
    } else {
        format!("{word}s")
    }
}

/// The name rule, short enough to stay on one line of a rendered problem:
/// wrapped, miette split the character class at its hyphens (issue 10).
pub const NAME_RULE: &str =
    "names match [a-z0-9][a-z0-9_-]*: lowercase letters, digits, `-` and `_`";

pub struct Validator<'a> {
    pub source: &'a Source,
    pub root: &'a Path,
    pub templates: &'a Templates,
    pub diags: Diagnostics,
    /// See `LoadOptions::warn_unmatched_inputs`.
    pub warn_unmatched_inputs: bool,
}

impl Validator<'_> {
    fn push(&mut self, d: Diagnostic) {
        self.diags.push(d);
    }

    fn name(&mut self, name: &Spanned<String>, what: &str) {
        if !is_valid_name(name) {
            self.push(
                Diagnostic::new(
                    "plan::invalid_name",
                    format!("invalid {what} `{}`", name.value),
                )
                .at(name.span)
                .label("not a valid name")
                .help(NAME_RULE),
            );
        }
    }

    /// Reports the second and later uses of a name.
    fn unique<'n>(&mut self, names: impl IntoIterator<Item = &'n Spanned<String>>, what: &str) {
        let mut first: HashMap<&str, Span> = HashMap::new();
        for name in names {
            if let Some(earlier) = first.get(name.value.as_str()) {
                let (line, _) = self.source.line_col(earlier.start);
                self.push(
                    Diagnostic::new(
                        "plan::duplicate",
                        format!("duplicate {what} `{}`", name.value),
                    )
                    .at(name.span)
                    .label(format!("already defined on line {line}"))
                    .help(format!("each {what} must be unique; rename or remove one")),
                );
            } else {
                first.insert(&name.value, name.span);
            }
        }
    }

    fn reference(
        &mut self,
        name: &Spanned<String>,
        known: &[&str],
        code: &'static str,
        what: &str,
    ) -> bool {
        if known.contains(&name.value.as_str()) {
            return true;
        }
        let mut d = Diagnostic::new(code, format!("unknown {what} `{}`", name.value))
            .at(name.span)
            .label(format!("no {what} of this name"));
        d = match did_you_mean(&name.value, known.iter().copied()) {
            Some(hint) => d.help(hint),
            None if known.is_empty() => d.help(format!("the plan defines no {what}")),
            None => {
                // A duplicated name is reported on its own; list it once here.
                let mut unique: Vec<&str> = Vec::with_capacity(known.len());
                for k in known {
                    if !unique.contains(k) {
                        unique.push(k);
                    }
                }
                d.help(format!(
                    "the plan's {} are {}",
                    plural(what),
                    one_of(&unique)
                ))
            }
        };
        self.push(d);
        false
    }

    /// A repo-relative path (or glob) that must stay inside the repo.
    fn repo_path(&mut self, path: &Spanned<String>, what: &str) -> bool {
        let p = Path::new(path.value.as_str());
        let mut depth: i64 = 0;
        let mut escapes = p.is_absolute() || path.value.starts_with('~');
        for component in p.components() {
            match component {
                Component::ParentDir => depth -= 1,
                Component::Normal(_) => depth += 1,
                Component::RootDir | Component::Prefix(_) => escapes = true,
                Component::CurDir => {}
            }
            if depth < 0 {
                escapes = true;
            }
        }
        if escapes {
            self.push(
                Diagnostic::new(
                    "plan::path_escapes_root",
                    format!("{what} `{}` is outside the repo", path.value),
                )
                .at(path.span)
                .label("escapes the repo root")
                .help(format!(
                    "plans read and write only inside their repo ({}); use a path relative to it",
                    self.root.display()
                )),
            );
        }
        !escapes
    }

    /// A step's `cwd` must be a directory by the time it runs: one that
    /// exists now, or one a step it needs (directly or not) declares among
    /// its `outputs`. Otherwise the run would fail at that step, after the
    /// steps before it ran (issue 10). A per-cell `cwd` is checked per cell
    /// when it runs.
    fn cwd_exists(&mut self, cwd: &Spanned<String>, step: &RawStep, all: &[RawStep]) {
        if Templates::is_template(&cwd.value) {
            return;
        }
        // Lexically, as the step's shell will see it: `sub/..` is the root
        // even when `sub` does not exist (yet).
        let mut parts: Vec<&str> = Vec::new();
        for part in cwd.value.split('/') {
            match part {
                "" | "." => {}
                ".." => {
                    parts.pop();
                }
                part => parts.push(part),
            }
        }
        let dir = parts.join("/");
        let dir = dir.as_str();
        if dir.is_empty() || self.root.join(dir).is_dir() {
            return;
        }
        if upstream(step, all).any(|up| match &up.params {
            RawParams::Command { outputs, .. } => outputs.iter().any(|o| {
                let o = o.value.trim_start_matches("./");
                o == dir
                    || o.strip_prefix(dir)
                        .is_some_and(|rest| rest.starts_with('/'))
            }),
            _ => false,
        }) {
            return;
        }
        let what = if self.root.join(dir).exists() {
            "is not a directory"
        } else {
            "does not exist"
        };
        self.push(
            Diagnostic::new(
                "plan::missing_cwd",
                format!("the cwd `{}` of step `{}` {what}", cwd.value, step.id.value),
            )
            .at(cwd.span)
            .label("no such directory")
            .help(format!(
                "paths are relative to the repo root {}; create the directory, or declare it among the `outputs` of a step this one needs",
                self.root.display()
            )),
        );
    }

    /// Warns of a `game.inputs` pattern that names no file: the build hash
    /// then leaves out what was meant, and a changed build may be reused.
    fn unmatched_input(&mut self, input: &Spanned<String>) {
        let matched = crate::reuse::expand_inputs(self.root, std::slice::from_ref(&input.value));
        if matched.is_ok_and(|files| files.is_empty()) {
            self.diags.warn(
                Diagnostic::new(
                    "plan::input_matches_nothing",
                    format!("game input `{}` matches no file", input.value),
                )
                .at(input.span)
                .label("no file here")
                .help(format!(
                    "`game.inputs` are globs relative to the repo root {}, hashed into the build hash: a pattern that matches nothing leaves the build out, so a rebuilt game can be reused. Fix the pattern, or build first",
                    self.root.display()
                )),
            );
        }
    }

    /// A repo file that must exist now (persona cards, lens charters).
    /// A repo file a prompt or charter is read from: it must exist and fit
    /// in [`crate::template::MAX_PROMPT_FILE_BYTES`]. Its text when it does.
    fn prompt_sized_file(
        &mut self,
        file: &Spanned<String>,
        key: &str,
        owner: &str,
        help: &str,
    ) -> Option<String> {
        self.repo_file(file, key);
        let path = self.root.join(file.value.as_str());
        let max = crate::template::MAX_PROMPT_FILE_BYTES;
        if std::fs::metadata(&path).is_ok_and(|m| m.len() > max) {
            self.push(
                Diagnostic::new(
                    "plan::file_too_large",
                    format!(
                        "{owner}: {key} `{}` is larger than {} KiB",
                        file.value,
                        max / 1024
                    ),
                )
                .at(file.span)
                .label("too large")
                .help(help.to_owned()),
            );
            return None;
        }
        std::fs::read_to_string(&path).ok()
    }

    fn repo_file(&mut self, path: &Spanned<String>, what: &str) {
        if self.repo_path(path, what) && !self.root.join(path.value.as_str()).is_file() {
            self.push(
                Diagnostic::new(
                    "plan::missing_file",
                    format!("{what} `{}` does not exist", path.value),
                )
                .at(path.span)
                .label("no such file")
                .help(format!(
                    "paths are relative to the repo root {}",
                    self.root.display()
                )),
            );
        }
    }

    #[expect(
        clippy::too_many_lines,
        reason = "one pass over the plan's sections, in file order"
    )]
    pub fn plan(mut self, raw: &RawPlan) -> (Option<Plan>, Diagnostics) {
        let readable = |section: &str| !raw.unreadable.contains(&section);
        if raw.version.value != 1 {
            self.push(
                Diagnostic::new("plan::unsupported_version", format!("unsupported plan version {}", raw.version.value))
                    .at(raw.version.span)
                    .label("this gameplan reads version 1")
                    .help("set `version = 1`, or upgrade gameplan if the plan was written for a newer one"),
            );
        }
        if readable("name") {
            self.name(&raw.name, "plan name");
        }

        let controllers = self.controllers(raw);
        let backend = self.backend(raw);
        let budget = raw.budget.as_ref().map(|b| Budget {
            max_cents: b.max_cents,
            max_actions: b.max_actions,
            max_wall_seconds: b.max_wall_seconds,
            max_model_usd: b.max_model_usd.as_ref().map(|m| m.value),
        });
        let pools = self.pools(raw);

        for p in &raw.personas {
            self.name(&p.slug, "persona slug");
        }
        self.unique(raw.personas.iter().map(|p| &p.slug), "persona slug");
        let personas: Vec<Option<Persona>> = raw
            .personas
            .iter()
            .map(|p| self.persona(p, budget.as_ref()))
            .collect();
        let persona_slugs: Vec<&str> = raw.personas.iter().map(|p| p.slug.value.as_str()).collect();

        for l in &raw.lenses {
            self.name(&l.name, "lens name");
        }
        self.unique(raw.lenses.iter().map(|l| &l.name), "lens name");
        let lenses: Vec<Option<Lens>> = raw
            .lenses
            .iter()
            .map(|l| self.lens(l, budget.as_ref()))
            .collect();
        let lens_names: Vec<&str> = raw.lenses.iter().map(|l| l.name.value.as_str()).collect();

        for g in &raw.gates {
            self.name(&g.name, "gate name");
            if g.lenses.is_empty() {
                self.push(
                    Diagnostic::new(
                        "plan::empty_gate",
                        format!("gate `{}` has no lenses", g.name.value),
                    )
                    .at(g.name.span)
                    .label("judges nothing")
                    .help("a gate that cannot fire is not a pass; list at least one lens"),
                );
            }
            for lens in &g.lenses {
                if readable("lenses") {
                    self.reference(lens, &lens_names, "plan::unknown_lens", "lens");
                }
            }
            for reviewer in &g.reviewers {
                if readable("personas") {
                    self.reference(
                        reviewer,
                        &persona_slugs,
                        "plan::unknown_reviewer",
                        "persona",
                    );
                }
            }
        }
        self.unique(raw.gates.iter().map(|g| &g.name), "gate name");
        let gates: Vec<Gate> = raw
            .gates
            .iter()
            .map(|g| Gate {
                name: g.name.value.clone(),
                lenses: g.lenses.iter().map(|l| l.value.clone()).collect(),
                reviewers: g.reviewers.iter().map(|r| r.value.clone()).collect(),
            })
            .collect();
        let gate_names: Vec<&str> = raw.gates.iter().map(|g| g.name.value.as_str()).collect();

        let refs = Refs {
            personas: &persona_slugs,
            controllers: &controllers,
            gates: &gate_names,
            pools: &pools,
            unreadable: &raw.unreadable,
        };
        let steps = match &raw.steps {
            Some(steps) => self.steps(&steps.value, &raw.unread_step_ids, &refs),
            None => Vec::new(),
        };
        let plays = raw.steps.as_ref().map_or(
            // No `steps`: the default pipeline plays. Unreadable `steps` (already
            // reported): what they play is unknown, so claim nothing.
            readable("steps").then_some(raw.name.span),
            |steps| {
                steps
                    .value
                    .iter()
                    .find(|s| super::kinds::row(s.kind.value).plays)
                    .map(|s| s.kind.span)
            },
        );
        let game = self.game(raw, plays);
        let fail_on = self.fail_on(raw);
        if let (Some(steps), true, true) = (&raw.steps, readable("steps"), readable("gates")) {
            self.unrun_gates(raw, &steps.value);
        }
        if let (Some(steps), true) = (&raw.steps, readable("steps")) {
            self.idle_always(&steps.value);
        }

        let ok = self.diags.is_empty();
        let plan = ok.then(|| Plan {
            name: raw.name.value.clone(),
            description: raw.description.clone(),
            controllers,
            vars: raw.vars.iter().cloned().collect(),
            backend,
            game,
            budget: budget.unwrap_or_default(),
            pools,
            personas: personas.into_iter().flatten().collect(),
            lenses: lenses.into_iter().flatten().collect(),
            gates,
            fail_on,
            explicit_steps: raw.steps.is_some(),
            steps,
        });
        (plan, self.diags)
    }

    /// `fail_on`: every name a category or a severity.
    fn fail_on(&mut self, raw: &RawPlan) -> Vec<FailOn> {
        let Some(list) = &raw.fail_on else {
            return Vec::new();
        };
        let mut read = Vec::new();
        for name in &list.value {
            match FailOn::parse(name) {
                Ok(f) if !read.contains(&f) => read.push(f),
                Ok(_) => {}
                Err(help) => self.push(
                    Diagnostic::new(
                        "plan::unknown_fail_on",
                        format!(
                            "unknown finding category or severity `{}` in `fail_on`",
                            name.value
                        ),
                    )
                    .at(name.span)
                    .label("not a category or severity")
                    .help(help),
                ),
            }
        }
        read
    }

    /// Warns of each gate that no step runs: with explicit `steps`, only a
    /// `gate` step judges a gate, so one without a step judges nothing,
    /// silently.
    fn unrun_gates(&mut self, raw: &RawPlan, steps: &[RawStep]) {
        for gate in &raw.gates {
            let run = steps.iter().any(|s| match &s.params {
                RawParams::Gate { gate: Some(g) } => g.value == gate.name.value,
                RawParams::Gate { gate: None } => s.id.value == gate.name.value,
                _ => false,
            });
            if !run {
                self.diags.warn(
                    Diagnostic::new(
                        "plan::gate_not_run",
                        format!("gate `{}` is never run: no step of this plan judges it", gate.name.value),
                    )
                    .at(gate.name.span)
                    .label("no `gate` step runs this gate")
                    .help(format!(
                        "with `steps`, only the steps listed run: add a `[[steps]]` with `id = \"{0}\"`, `kind = \"gate\"` and `needs` naming the steps whose findings it judges; or remove the gate",
                        gate.name.value
                    )),
                );
            }
        }
    }

    /// Warns of `always = true` on a step that needs nothing: `always`
    /// makes a step run when a step it needs failed, and this one has none.
    fn idle_always(&mut self, steps: &[RawStep]) {
        for s in steps {
            if let (true, Some(span), true, None) =
                (s.always, s.always_span, s.needs.is_empty(), &s.per)
            {
                self.diags.warn(
                    Diagnostic::new(
                        "plan::always_without_needs",
                        format!("`always` on step `{}`, which needs no step", s.id.value),
                    )
                    .at(span)
                    .label("no step it needs can fail")
                    .help("`always = true` runs a step even when a step in its `needs` failed (a cleanup after the build); add the `needs` it should follow, or remove `always`"),
                );
            }
        }
    }

    fn controllers(&mut self, raw: &RawPlan) -> Vec<Controller> {
        let Some(list) = &raw.controllers else {
            return vec![Controller::Standard];
        };
        let mut seen = Vec::new();
        for name in list {
            match Controller::from_name(name) {
                Some(c) if seen.contains(&c) => self.push(
                    Diagnostic::new(
                        "plan::duplicate",
                        format!("controller `{}` is listed twice", name.value),
                    )
                    .at(name.span)
                    .label("listed again here"),
                ),
                Some(c) => seen.push(c),
                None => {
                    let names: Vec<&str> = Controller::ALL.iter().map(|(n, _)| *n).collect();
                    self.reference(name, &names, "plan::unknown_controller", "controller");
                }
            }
        }
        if list.is_empty() {
            self.push(
                Diagnostic::new("plan::empty_list", "`controllers` is empty")
                    .at(raw.name.span)
                    .help("list at least one controller, or omit the key for [\"standard\"]"),
            );
        }
        seen
    }

    fn backend(&mut self, raw: &RawPlan) -> Backend {
        let Some(b) = &raw.backend else {
            return Backend {
                kind: BackendKind::Local,
                url: None,
                token: None,
            };
        };
        let kind = b.kind.unwrap_or(BackendKind::Local);
        match (&kind, &b.url) {
            (BackendKind::Http, None) => self.push(
                Diagnostic::new(
                    "plan::missing_key",
                    "[backend] of kind `http` needs a `url`",
                )
                .at(raw.name.span)
                .help("add `url = \"https://…\"` under [backend], or use `kind = \"local\"`"),
            ),
            (BackendKind::Local, Some(url)) => self.push(
                Diagnostic::new("plan::unused_key", "`url` is only for the `http` backend")
                    .at(url.span)
                    .label("the local backend has no url")
                    .help("remove it, or set `kind = \"http\"`"),
            ),
            _ => {}
        }
        Backend {
            kind,
            url: b.url.as_ref().map(|u| u.value.clone()),
            token: b.token.clone(),
        }
    }

    fn pools(&mut self, raw: &RawPlan) -> BTreeMap<String, u32> {
        let mut pools = BTreeMap::new();
        for (name, size) in &raw.pools {
            match u32::try_from(size.value) {
                Ok(n) if n > 0 => {
                    pools.insert(name.clone(), n);
                }
                _ => self.push(
                    Diagnostic::new(
                        "plan::invalid_value",
                        format!("pool `{name}` must allow at least one step"),
                    )
                    .at(size.span)
                    .label("expected 1 or more"),
                ),
            }
        }
        pools
    }

    fn game(&mut self, raw: &RawPlan, plays: Option<Span>) -> Option<Game> {
        let Some(g) = &raw.game else {
            if let (Some(span), false) = (plays, raw.unreadable.contains(&"game")) {
                // A plan without `steps` gets the default paid pipeline,
                // which plays: a review-only plan written from its lenses
                // and gates alone meets this first, so say how to opt out.
                let help = if raw.steps.is_none() && !raw.gates.is_empty() {
                    "without `steps` a plan runs the default pipeline, which plays the game: add a [game] table with `id` and `command`, or, for a review-only plan, list its gate steps (`[[steps]]` with `id`, `kind = \"gate\"`, `gate = \"NAME\"`)"
                } else {
                    "add a [game] table with `id` and `command` (or `driver = \"webdriver\"` and `url`)"
                };
                self.push(
                    Diagnostic::new(
                        "plan::missing_game",
                        "this plan plays a game but has no [game] table",
                    )
                    .at(span)
                    .label("plays the game")
                    .help(help),
                );
            }
            return None;
        };
        let g = &g.value;
        let driver = g.driver.as_ref().map_or(Driver::Stdio, |d| d.value);
        let command = match (driver, &g.command) {
            (Driver::Stdio, None) => {
                self.push(
                    Diagnostic::new("plan::missing_key", "[game] with the stdio driver needs a `command`")
                        .at(g.id.span)
                        .help("add `command = [\"./build/game\", \"--bridge\"]`, or [\"builtin:maze\"] for the built-in game"),
                );
                Vec::new()
            }
            (Driver::Stdio, Some(c)) if c.value.is_empty() => {
                self.push(
                    Diagnostic::new("plan::empty_list", "`command` is empty")
                        .at(c.span)
                        .label("no program"),
                );
                Vec::new()
            }
            (Driver::Stdio, Some(c)) => {
                self.game_program(c, g.env.get("PATH"));
                c.value.clone()
            }
            (_, Some(c)) => c.value.clone(),
            (Driver::Webdriver, None) => Vec::new(),
        };
        if driver == Driver::Webdriver && g.url.is_none() {
            self.push(
                Diagnostic::new(
                    "plan::missing_key",
                    "[game] with the webdriver driver needs a `url`",
                )
                .at(g.id.span)
                .help("add `url = \"http://127.0.0.1:8080/\"`"),
            );
        }
        if let Some(w) = &g.webdriver_url {
            if driver != Driver::Webdriver {
                self.push(
                    Diagnostic::new(
                        "plan::unused_key",
                        "`webdriver_url` is only for the webdriver driver",
                    )
                    .at(w.span)
                    .label("a stdio game has no browser")
                    .help("remove it, or set `driver = \"webdriver\"` and `url`"),
                );
            } else if !w.value.starts_with("http://") {
                self.push(
                    Diagnostic::new(
                        "plan::invalid_value",
                        "`webdriver_url` must be an http:// URL of a WebDriver server",
                    )
                    .at(w.span)
                    .label("not http://")
                    .help("e.g. `webdriver_url = \"http://127.0.0.1:4444\"`, or remove it to let gameplan start chromedriver"),
                );
            }
        }
        let viewport = self.browser_keys(g, driver);
        for input in &g.inputs {
            if self.repo_path(input, "input") && self.warn_unmatched_inputs {
                self.unmatched_input(input);
            }
        }
        Some(Game {
            id: g.id.value.clone(),
            driver,
            command,
            url: g.url.as_ref().map(|u| u.value.clone()),
            webdriver_url: g.webdriver_url.as_ref().map(|u| u.value.clone()),
            serve: g.serve.as_ref().map(|d| d.value.clone()),
            allow: g.allow.iter().map(|a| a.value.clone()).collect(),
            keys: g.keys.iter().map(|k| k.value.clone()).collect(),
            viewport,
            inputs: g.inputs.iter().map(|i| i.value.clone()).collect(),
            action_timeout_secs: g.action_timeout.as_ref().map_or(10, |t| t.value),
            stuck_after: g.stuck_after.as_ref().map_or(8, |t| t.value),
            env: g.env.clone(),
            limits: self.game_limits(g, driver),
        })
    }

    /// `[game] limits`, checked (a stdio game's only; sane minimums) and
    /// with the defaults filled in.
    fn game_limits(
        &mut self,
        g: &crate::plan::raw::RawGame,
        driver: Driver,
    ) -> crate::plan::model::GameLimits {
        use crate::plan::raw::Limit;
        let mut limits = crate::plan::model::GameLimits::default();
        let Some(raw) = &g.limits else {
            return limits;
        };
        if driver != Driver::Stdio {
            self.push(
                Diagnostic::new("plan::unused_key", "`limits` is only for the stdio driver")
                    .at(raw.span)
                    .label("a browser game's limits are the browser's")
                    .help("remove it"),
            );
            return limits;
        }
        let fields = [
            (
                &raw.value.memory,
                &mut limits.memory,
                16 << 20,
                "memory",
                "16 MiB",
            ),
            (
                &raw.value.processes,
                &mut limits.processes,
                8,
                "processes",
                "8",
            ),
            (
                &raw.value.open_files,
                &mut limits.open_files,
                16,
                "open_files",
                "16",
            ),
        ];
        for (given, slot, least, key, least_text) in fields {
            let Some(given) = given else { continue };
            match given.value {
                Limit::Unlimited => *slot = None,
                Limit::At(n) if n >= least => *slot = Some(n),
                Limit::At(_) => self.push(
                    Diagnostic::new(
                        "plan::invalid_value",
                        format!("`limits.{key}` is below {least_text}"),
                    )
                    .at(given.span)
                    .label("too small for any game to start")
                    .help(format!(
                        "give at least {least_text}, or \"none\" to lift the limit"
                    )),
                ),
            }
        }
        limits
    }

    /// A stdio game's program resolves as the game's start will resolve
    /// it: `builtin:NAME` is a game shipped in gameplan; a path with a `/`
    /// is an executable file under the repo root (or absolute); a bare name
    /// is an executable on `PATH`. Found here, before anything runs or is
    /// charged, rather than as a failed cell.
    fn game_program(&mut self, command: &Spanned<Vec<String>>, game_path: Option<&String>) {
        use std::os::unix::fs::PermissionsExt;
        let Some(program) = command.value.first() else {
            return;
        };
        let executable = |p: &Path| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        };
        let problem = if let Some(name) = program.strip_prefix("builtin:") {
            crate::games::find(name).is_none().then(|| {
                (
                    format!("there is no built-in game `{name}`"),
                    format!(
                        "the built-in games: {}",
                        crate::games::BUILTINS
                            .iter()
                            .map(|b| b.name)
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                )
            })
        } else if program.contains('/') {
            let path = self.root.join(program);
            (!executable(&path)).then(|| {
                let why = if path.exists() {
                    "is not executable"
                } else {
                    "does not exist"
                };
                (
                    format!("the game's program `{program}` {why}"),
                    format!(
                        "a path in `command` is relative to the repo root {} (build the game first, or `chmod +x` it)",
                        self.root.display()
                    ),
                )
            })
        } else {
            // The game's PATH: `game.env`'s, else the one gameplan runs with
            // (a loader given no environment cannot tell: it does not judge).
            let Some(path) = game_path.or_else(|| self.templates.env().get("PATH")) else {
                return;
            };
            let found = std::env::split_paths(path).any(|dir| executable(&dir.join(program)));
            (!found).then(|| {
                (
                    format!("the game's program `{program}` is not on PATH"),
                    "install it, or give its path (`./build/game`, relative to the repo root)"
                        .to_owned(),
                )
            })
        };
        if let Some((message, help)) = problem {
            self.push(
                Diagnostic::new("plan::missing_program", message)
                    .at(command.span)
                    .label("cannot be started")
                    .help(help),
            );
        }
    }

    /// `serve` names a directory of the repo, and `url` a file in it; a
    /// repo-file `url` without `serve` exists.
    fn served_page(&mut self, g: &crate::plan::raw::RawGame) {
        if let Some(dir) = &g.serve
            && self.repo_path(dir, "serve")
        {
            let path = self.root.join(dir.value.as_str());
            if !path.is_dir() {
                self.push(
                    Diagnostic::new(
                        "plan::missing_file",
                        format!("the directory to serve, `{}`, does not exist", dir.value),
                    )
                    .at(dir.span)
                    .label("no such directory")
                    .help(format!(
                        "`serve` names a directory of the repo ({}) holding the built game, e.g. `serve = \"web/dist\"`; build it first",
                        self.root.display()
                    )),
                );
            } else if let Some(url) = &g.url
                && !url.value.contains("://")
                && !path.join(url.value.as_str()).is_file()
            {
                self.push(
                    Diagnostic::new(
                        "plan::missing_file",
                        format!("`{}` is not a file of the served directory `{}`", url.value, dir.value),
                    )
                    .at(url.span)
                    .label("no such file")
                    .help("with `serve`, `url` is a path inside the served directory (e.g. `index.html`)"),
                );
            }
        } else if g.serve.is_none()
            && let Some(url) = &g.url
            && !url.value.contains("://")
            && !url.value.starts_with("about:")
            && !url.value.starts_with("data:")
        {
            self.repo_file(url, "the page");
        }
    }

    /// The webdriver-only keys (`serve`, `allow`, `keys`, `viewport`):
    /// refused on a stdio game, each checked; the window to use.
    fn browser_keys(&mut self, g: &crate::plan::raw::RawGame, driver: Driver) -> (u32, u32) {
        let spans = [
            g.serve.as_ref().map(|s| ("serve", s.span)),
            g.allow.first().map(|a| ("allow", a.span)),
            g.keys.first().map(|k| ("keys", k.span)),
            g.viewport.as_ref().map(|v| ("viewport", v.span)),
        ];
        if driver != Driver::Webdriver {
            for (key, span) in spans.into_iter().flatten() {
                self.push(
                    Diagnostic::new(
                        "plan::unused_key",
                        format!("`{key}` is only for the webdriver driver"),
                    )
                    .at(span)
                    .label("a stdio game has no browser")
                    .help("remove it, or set `driver = \"webdriver\"` and `url`"),
                );
            }
            return crate::plan::model::DEFAULT_VIEWPORT;
        }
        self.served_page(g);
        for pattern in &g.allow {
            let ok = ["http://", "https://", "file://"]
                .iter()
                .any(|scheme| pattern.value.starts_with(scheme));
            if !ok {
                self.push(
                    Diagnostic::new(
                        "plan::invalid_value",
                        format!("`allow` pattern `{}` is not a URL pattern", pattern.value),
                    )
                    .at(pattern.span)
                    .label("no http://, https:// or file://")
                    .help("e.g. `allow = [\"https://cdn.example/**\"]` (`*` within a path part, `**` across parts)"),
                );
            }
        }
        for key in &g.keys {
            let mut chars = key.value.chars();
            let one_char = chars.next().is_some() && chars.next().is_none();
            if !one_char && !crate::plan::model::KEY_NAMES.contains(&key.value.as_str()) {
                self.push(
                    Diagnostic::new(
                        "plan::invalid_value",
                        format!("`{}` is not a key gameplan presses", key.value),
                    )
                    .at(key.span)
                    .label("unknown key")
                    .help(format!(
                        "a key is one character or one of {}",
                        crate::plan::model::KEY_NAMES.join(", ")
                    )),
                );
            }
        }
        let Some(viewport) = &g.viewport else {
            return crate::plan::model::DEFAULT_VIEWPORT;
        };
        let range = crate::plan::model::VIEWPORT_RANGE;
        match viewport.value[..] {
            [w, h] if range.contains(&w) && range.contains(&h) => (
                u32::try_from(w).unwrap_or(u32::MAX),
                u32::try_from(h).unwrap_or(u32::MAX),
            ),
            _ => {
                self.push(
                    Diagnostic::new(
                        "plan::invalid_value",
                        "`viewport` is [WIDTH, HEIGHT] in pixels",
                    )
                    .at(viewport.span)
                    .label(format!(
                        "each side from {} to {}",
                        range.start(),
                        range.end()
                    ))
                    .help("e.g. `viewport = [1280, 800]` (the default)"),
                );
                crate::plan::model::DEFAULT_VIEWPORT
            }
        }
    }

    fn persona(&mut self, p: &RawPersona, budget: Option<&Budget>) -> Option<Persona> {
        let card = match (&p.card, &p.card_file) {
            (Some(text), None) => Some(Card::Text(text.clone())),
            (None, Some(file)) => {
                self.repo_file(file, "card_file");
                Some(Card::File(file.value.clone()))
            }
            (Some(_), Some(file)) => {
                self.push(
                    Diagnostic::new(
                        "plan::conflicting_keys",
                        format!("persona `{}` has both `card` and `card_file`", p.slug.value),
                    )
                    .at(file.span)
                    .help("keep one of them"),
                );
                None
            }
            (None, None) => {
                self.push(
                    Diagnostic::new("plan::missing_key", format!("persona `{}` needs a `card` or a `card_file`", p.slug.value))
                        .at(p.slug.span)
                        .label("no card")
                        .help("the card tells the player who it is: `card = \"Nine years old, clicks everything.\"`"),
                );
                None
            }
        };
        let player = match p.player.as_ref().map(|p| &p.value) {
            None => Player::Explorer { seed: None },
            Some(RawPlayer::Scripted { actions }) => Player::Scripted {
                actions: actions.clone(),
            },
            Some(RawPlayer::Random { seed }) => Player::Random { seed: *seed },
            Some(RawPlayer::Explorer { seed }) => Player::Explorer { seed: *seed },
            Some(RawPlayer::Llm {
                model,
                base_url,
                api_key,
                temperature,
                price,
                prompt_file,
                timeout,
            }) => {
                let price = price.as_ref().and_then(|price| self.price(price));
                self.llm_player(
                    &p.slug.value,
                    model,
                    price,
                    prompt_file.as_ref(),
                    timeout.as_ref(),
                    budget,
                );
                Player::Llm {
                    model: model.value.clone(),
                    base_url: base_url.clone(),
                    api_key: api_key.clone(),
                    temperature: *temperature,
                    price,
                    prompt_file: prompt_file.as_ref().map(|f| f.value.clone()),
                    timeout_secs: timeout.as_ref().map(|t| t.value),
                }
            }
        };
        Some(Persona {
            slug: p.slug.value.clone(),
            card: card?,
            player,
            patience: p.patience,
        })
    }

    /// A price of non-negative, finite numbers.
    fn price(
        &mut self,
        price: &Spanned<super::raw::RawPrice>,
    ) -> Option<crate::token_price::Price> {
        let mut ok = true;
        for value in [&price.input_per_mtok, &price.output_per_mtok] {
            if !value.value.is_finite() || value.value < 0.0 {
                ok = false;
                self.push(
                    Diagnostic::new(
                        "plan::invalid_price",
                        format!("price {} is not a price", value.value),
                    )
                    .at(value.span)
                    .label("expected USD per million tokens, 0 or more")
                    .help("e.g. `price = { input_per_mtok = 0.15, output_per_mtok = 0.60 }`"),
                );
            }
        }
        ok.then_some(crate::token_price::Price {
            input_per_mtok: price.input_per_mtok.value,
            output_per_mtok: price.output_per_mtok.value,
        })
    }

    /// A model with no price (the plan's or the built-in table's) under a
    /// `max_model_usd` cannot be bounded: an `llm` player's or lens's.
    fn unpriced_model(
        &mut self,
        owner: &str,
        holder: &str,
        model: &Spanned<String>,
        price: Option<crate::token_price::Price>,
        budget: Option<&Budget>,
    ) {
        let bounded = budget.and_then(|b| b.max_model_usd);
        if let Some(max) = bounded
            && price.is_none()
            && crate::token_price::Price::builtin(&model.value).is_none()
        {
            self.push(
                Diagnostic::new(
                    "plan::unpriced_model",
                    format!(
                        "{owner}: model `{}` has no price, so `max_model_usd = {max}` cannot bound what it spends",
                        model.value
                    ),
                )
                .at(model.span)
                .label("no price known for this model")
                .help(format!(
                    "add `price = {{ input_per_mtok = …, output_per_mtok = … }}` (USD per million tokens) to the {holder}; built-in prices: {}",
                    crate::token_price::Price::builtin_names().join(", ")
                )),
            );
        }
    }

    /// An `llm` player's money and prompt: a model with no price under a
    /// `max_model_usd` cannot be bounded, and a prompt template that does
    /// not compile would fail every cell.
    fn llm_player(
        &mut self,
        slug: &str,
        model: &Spanned<String>,
        price: Option<crate::token_price::Price>,
        prompt_file: Option<&Spanned<String>>,
        timeout: Option<&Spanned<u64>>,
        budget: Option<&Budget>,
    ) {
        self.unpriced_model(&format!("persona `{slug}`"), "player", model, price, budget);
        if let Some(t) = timeout
            && t.value == 0
        {
            self.push(
                Diagnostic::new(
                    "plan::invalid_timeout",
                    "`timeout` must be at least 1 second",
                )
                .at(t.span)
                .label("0 seconds"),
            );
        }
        if let Some(file) = prompt_file
            && let Some(source) = self.prompt_sized_file(
                file,
                "prompt_file",
                &format!("persona `{slug}`"),
                "a prompt template is a page of text; the turn's observation and history are filled in when it is rendered",
            ) && let Err(e) = crate::template::check_prompt(&source)
            {
                let mut d = Diagnostic::new(
                    "plan::invalid_prompt",
                    format!(
                        "persona `{slug}`: prompt_file `{}`: {}",
                        file.value, e.message
                    ),
                )
                .at(file.span)
                .label("does not compile");
                if let Some(help) = e.help {
                    d = d.help(help);
                }
                self.push(d);
        }
    }

    fn lens(&mut self, l: &RawLens, budget: Option<&Budget>) -> Option<Lens> {
        let judge = match l.kind {
            LensKind::Rule => {
                let when = l.when.as_ref()?;
                if let Err(e) = self.templates.check_expression(when, &["unit", "reviewer"]) {
                    let mut d = Diagnostic::new(
                        "plan::invalid_expression",
                        format!("lens `{}`: {}", l.name.value, e.message),
                    )
                    .at(when.span)
                    .label("does not compile");
                    if let Some(help) = e.help {
                        d = d.help(help);
                    }
                    self.push(d);
                }
                Judge::Rule {
                    when: when.value.clone(),
                }
            }
            LensKind::Command => Judge::Command {
                program: self.program(
                    l.run.as_ref(),
                    l.argv.as_ref(),
                    l.name.span,
                    &format!("lens `{}`", l.name.value),
                )?,
            },
            LensKind::Llm => self.llm_lens(l, budget)?,
        };
        let sources: Vec<Spanned<String>> = match l.over.value {
            LensOver::Files => l.files.clone().unwrap_or_default(),
            LensOver::Patches => l.patches.clone().into_iter().collect(),
            LensOver::Findings | LensOver::Runs => Vec::new(),
        };
        for s in &sources {
            self.repo_path(s, "lens source");
        }
        if let Some(t) = l.timeout.as_ref().filter(|t| t.value == 0) {
            self.push(
                Diagnostic::new(
                    "plan::invalid_value",
                    format!("lens `{}`: `timeout` is 0 seconds", l.name.value),
                )
                .at(t.span)
                .label("no call can answer in no time")
                .help("give the seconds one call of the lens may take, at least 1"),
            );
        }
        Some(Lens {
            name: l.name.value.clone(),
            over: l.over.value,
            judge,
            sources: sources.into_iter().map(|s| s.value).collect(),
            timeout_secs: l.timeout.as_ref().map(|t| t.value),
        })
    }

    /// An llm lens's judge: its charter, model and price.
    fn llm_lens(&mut self, l: &RawLens, budget: Option<&Budget>) -> Option<Judge> {
        let charter = match (&l.charter, &l.charter_file) {
            (Some(text), None) => {
                self.charter(&l.name.value, &text.value, text.span, "inline");
                Card::Text(text.value.clone())
            }
            (None, Some(file)) => {
                if let Some(source) = self.prompt_sized_file(
                    file,
                    "charter_file",
                    &format!("lens `{}`", l.name.value),
                    "a charter is a page of text; the unit is filled in when it is rendered",
                ) {
                    self.charter(&l.name.value, &source, file.span, "its file");
                }
                Card::File(file.value.clone())
            }
            _ => {
                self.push(
                    Diagnostic::new(
                        "plan::missing_key",
                        format!(
                            "llm lens `{}` needs exactly one of `charter` and `charter_file`",
                            l.name.value
                        ),
                    )
                    .at(l.name.span)
                    .help("the charter tells the reviewer what to look for"),
                );
                return None;
            }
        };
        // `model` is required when the lens is read: a lens without
        // one was already reported.
        let model = l.model.as_ref()?;
        let price = l.price.as_ref().and_then(|p| self.price(p));
        self.unpriced_model(
            &format!("lens `{}`", l.name.value),
            "lens",
            model,
            price,
            budget,
        );
        Some(Judge::Llm {
            charter,
            model: model.value.clone(),
            base_url: l.base_url.clone(),
            api_key: l.api_key.clone(),
            price,
        })
    }

    /// An llm lens's charter compiles (it is rendered per unit at review
    /// time; a broken one would leave every unit missing).
    fn charter(&mut self, lens: &str, source: &str, span: crate::plan::source::Span, what: &str) {
        if let Err(e) = crate::template::check_prompt(source) {
            let message = e
                .message
                .replace("invalid prompt template", "invalid charter template");
            self.push(
                Diagnostic::new("plan::invalid_charter", format!("lens `{lens}`: {message}"))
                    .at(span)
                    .label(format!("does not compile ({what})"))
                    .help("a charter is a minijinja template reading `unit` (its fields), `reviewer` (`slug`, `card`, or none) and `lens`"),
            );
        }
    }

    fn program(
        &mut self,
        run: Option<&Spanned<String>>,
        argv: Option<&Spanned<Vec<String>>>,
        at: Span,
        what: &str,
    ) -> Option<Program> {
        match (run, argv) {
            (Some(run), None) => Some(Program::Shell(run.value.clone())),
            (None, Some(argv)) if argv.value.is_empty() => {
                self.push(
                    Diagnostic::new("plan::empty_list", "`argv` is empty")
                        .at(argv.span)
                        .label("no program"),
                );
                None
            }
            (None, Some(argv)) => Some(Program::Argv(argv.value.clone())),
            (Some(_), Some(argv)) => {
                self.push(
                    Diagnostic::new("plan::conflicting_keys", format!("{what} has both `run` and `argv`"))
                        .at(argv.span)
                        .help("`run` is a shell command line; `argv` runs a program without a shell. Keep one."),
                );
                None
            }
            (None, None) => {
                self.push(
                    Diagnostic::new("plan::missing_key", format!("{what} needs `run` or `argv`"))
                        .at(at)
                        .label("nothing to run")
                        .help("add `run = \"make game\"` (a shell line) or `argv = [\"make\", \"game\"]`"),
                );
                None
            }
        }
    }
}

/// The steps `step` needs, directly or through others, each once.
fn upstream<'a>(step: &RawStep, all: &'a [RawStep]) -> impl Iterator<Item = &'a RawStep> {
    let mut seen: HashSet<&str> = HashSet::new();
    let mut queue: Vec<&str> = step.needs.iter().map(|n| n.value.as_str()).collect();
    let mut found = Vec::new();
    while let Some(id) = queue.pop() {
        if !seen.insert(id) {
            continue;
        }
        if let Some(up) = all.iter().find(|s| s.id.value == id) {
            queue.extend(up.needs.iter().map(|n| n.value.as_str()));
            found.push(up);
        }
    }
    found.into_iter()
}

struct Refs<'r> {
    personas: &'r [&'r str],
    controllers: &'r [Controller],
    gates: &'r [&'r str],
    pools: &'r BTreeMap<String, u32>,
    /// Sections that could not be read: references into them are not checked.
    unreadable: &'r [&'static str],
}

impl Refs<'_> {
    fn readable(&self, section: &str) -> bool {
        !self.unreadable.contains(&section)
    }
}

impl Validator<'_> {
    /// `unread`: ids of steps that could not be read (already reported),
    /// which a `needs` may name without being called unknown.
    fn steps(&mut self, raw: &[RawStep], unread: &[String], refs: &Refs<'_>) -> Vec<Step> {
        for s in raw {
            self.name(&s.id, "step id");
        }
        self.unique(raw.iter().map(|s| &s.id), "step id");
        let ids: Vec<&str> = raw
            .iter()
            .map(|s| s.id.value.as_str())
            .chain(unread.iter().map(String::as_str))
            .collect();
        // Membership by hash: a 10,000-step plan checks its needs in linear time.
        let id_set: HashSet<&str> = ids.iter().copied().collect();
        let steps: Vec<Step> = raw
            .iter()
            .map(|s| self.step(s, raw, (&ids, &id_set), refs))
            .collect();
        self.cycles(raw);
        if self.diags.is_empty() {
            self.expanded_size(raw, &steps);
        }
        steps
    }

    #[expect(clippy::too_many_lines, reason = "one check per key, in key order")]
    fn step(
        &mut self,
        s: &RawStep,
        all: &[RawStep],
        (ids, id_set): (&[&str], &HashSet<&str>),
        refs: &Refs<'_>,
    ) -> Step {
        let kind = s.kind.value;
        for need in &s.needs {
            if need.value == s.id.value {
                self.push(
                    Diagnostic::new("plan::cycle", format!("step `{}` needs itself", s.id.value))
                        .at(need.span)
                        .label("a step cannot wait for itself"),
                );
            } else if !id_set.contains(need.value.as_str()) {
                self.reference(need, ids, "plan::unknown_needs", "step");
            }
        }
        if let (Some(retries), true) = (&s.retries, kind.moves_money()) {
            self.push(
                Diagnostic::new("plan::retries_on_money_step", format!("`retries` is not allowed on the {} step `{}`", kind.name(), s.id.value))
                    .at(retries.span)
                    .label("money steps are never retried")
                    .help("a retry could charge twice; gameplan replays money requests with the same idempotency key on resume instead. Remove `retries`."),
            );
        }
        let retries = s
            .retries
            .as_ref()
            .map_or(0, |r| u32::try_from(r.value).unwrap_or(u32::MAX));
        if let (Some(pool), true) = (&s.pool, refs.readable("pools")) {
            let mut known: Vec<&str> = BUILTIN_POOLS.to_vec();
            known.extend(refs.pools.keys().map(String::as_str));
            known.sort_unstable();
            known.dedup();
            self.reference(pool, &known, "plan::unknown_pool", "pool");
        }

        let matrix = match &s.matrix {
            Some(m) => self.matrix(s, m, refs),
            None => Vec::new(),
        };
        if let Some(per) = &s.per {
            if s.matrix.is_some() {
                self.push(
                    Diagnostic::new("plan::conflicting_keys", format!("step `{}` has both `matrix` and `per`", s.id.value))
                        .at(per.span)
                        .help("`per` repeats a step once per cell of another step's matrix; a step has one or the other"),
                );
            }
            match all.iter().find(|o| o.id.value == per.value) {
                Some(target) if target.matrix.is_none() => self.push(
                    Diagnostic::new("plan::per_not_matrix", format!("`per` names step `{}`, which has no matrix", per.value))
                        .at(per.span)
                        .label("not a matrix step")
                        .help("`per` gives one instance per cell of a matrix step; give that step a `matrix`, or use `needs`"),
                ),
                Some(_) => {}
                None => {
                    self.reference(per, ids, "plan::unknown_needs", "step");
                }
            }
        }

        let params = match &s.params {
            RawParams::Command {
                run,
                argv,
                inputs,
                outputs,
                cwd,
            } => {
                for path in inputs {
                    self.repo_path(path, "input");
                }
                for path in outputs {
                    self.repo_path(path, "output");
                }
                if let Some(cwd) = cwd
                    && self.repo_path(cwd, "cwd")
                {
                    self.cwd_exists(cwd, s, all);
                }
                let program = self.program(
                    run.as_ref(),
                    argv.as_ref(),
                    s.id.span,
                    &format!("command step `{}`", s.id.value),
                );
                Params::Command {
                    program: program.unwrap_or(Program::Argv(Vec::new())),
                    inputs: inputs.iter().map(|i| i.value.clone()).collect(),
                    outputs: outputs.iter().map(|o| o.value.clone()).collect(),
                    cwd: cwd.as_ref().map(|c| c.value.clone()),
                }
            }
            RawParams::Play {
                persona,
                controller,
                seed,
            } => {
                if let (Some(p), true) = (persona, refs.readable("personas")) {
                    self.reference(p, refs.personas, "plan::unknown_persona", "persona");
                }
                let controller = controller.as_ref().and_then(|c| self.controller(c, refs));
                Params::Play {
                    persona: persona.as_ref().map(|p| p.value.clone()),
                    controller,
                    seed: *seed,
                }
            }
            RawParams::Gate { gate } => {
                let gate = match gate {
                    Some(g) => {
                        if refs.readable("gates") {
                            self.reference(g, refs.gates, "plan::unknown_gate", "gate");
                        }
                        g.value.clone()
                    }
                    None if refs.gates.contains(&s.id.value.as_str())
                        || !refs.readable("gates") =>
                    {
                        s.id.value.clone()
                    }
                    None => {
                        self.push(
                            Diagnostic::new(
                                "plan::missing_key",
                                format!(
                                    "gate step `{}` does not say which gate it judges",
                                    s.id.value
                                ),
                            )
                            .at(s.kind.span)
                            .help(format!(
                                "add `gate = \"NAME\"`; the plan's gates are {}",
                                one_of(refs.gates)
                            )),
                        );
                        String::new()
                    }
                };
                Params::Gate { gate }
            }
            RawParams::Simulate {
                games,
                strategies,
                workers,
                max_steps,
                seed,
            } => {
                for (key, value) in [("workers", workers), ("max_steps", max_steps)] {
                    if let Some(v) = value.as_ref().filter(|v| v.value == 0) {
                        self.push(
                            Diagnostic::new(
                                "plan::invalid_value",
                                format!("`{key}` must be at least 1"),
                            )
                            .at(v.span)
                            .label("zero"),
                        );
                    }
                }
                for strategy in strategies {
                    if !matches!(strategy.value.as_str(), "random" | "explorer") {
                        self.push(
                            Diagnostic::new("plan::invalid_value", format!("unknown strategy `{}`", strategy.value))
                                .at(strategy.span)
                                .label("not a strategy")
                                .help("simulate plays with player kinds that need no model: `random` or `explorer`"),
                        );
                    }
                }
                if *games == Some(0) {
                    self.push(
                        Diagnostic::new("plan::invalid_value", "`games` must be at least 1")
                            .at(s.kind.span)
                            .label("simulates nothing"),
                    );
                }
                Params::Simulate {
                    games: games.unwrap_or(100),
                    strategies: if strategies.is_empty() {
                        vec!["random".to_owned()]
                    } else {
                        strategies.iter().map(|x| x.value.clone()).collect()
                    },
                    workers: workers.as_ref().map_or(2, |w| w.value),
                    max_steps: max_steps.as_ref().map_or(50, |m| m.value),
                    seed: *seed,
                }
            }
            RawParams::None => Params::None,
        };
        Step {
            id: s.id.value.clone(),
            kind,
            needs: s.needs.iter().map(|n| n.value.clone()).collect(),
            matrix,
            per: s.per.as_ref().map(|p| p.value.clone()),
            always: s.always || super::kinds::row(kind).always,
            pool: s.pool.as_ref().map(|p| p.value.clone()),
            timeout_secs: s.timeout.as_ref().map(|t| t.value),
            retries,
            reuse: s.reuse,
            env: s.env.clone(),
            params,
        }
    }

    fn controller(&mut self, name: &Spanned<String>, refs: &Refs<'_>) -> Option<Controller> {
        let names: Vec<&str> = refs.controllers.iter().map(|c| c.name()).collect();
        if !refs.readable("controllers")
            || self.reference(name, &names, "plan::unknown_controller", "controller")
        {
            Controller::from_name(name)
        } else {
            None
        }
    }

    fn matrix(&mut self, s: &RawStep, m: &RawMatrix, refs: &Refs<'_>) -> Vec<Axis> {
        if m.value.is_empty() {
            self.push(
                Diagnostic::new(
                    "plan::empty_list",
                    format!("step `{}` has an empty matrix", s.id.value),
                )
                .at(m.span)
                .help("a matrix needs at least one axis, e.g. `matrix = { persona = \"*\" }`"),
            );
        }
        let mut axes = Vec::new();
        let mut seen = HashSet::new();
        for (name, axis) in &m.value {
            if !seen.insert(name.value.clone()) {
                continue;
            }
            // `None`: the axis is wrong and already reported.
            let values: Option<Vec<String>> = match axis {
                RawAxis::All(span) => match name.value.as_str() {
                    "persona" => Some(refs.personas.iter().map(|p| (*p).to_owned()).collect()),
                    "controller" => Some(
                        refs.controllers
                            .iter()
                            .map(|c| c.name().to_owned())
                            .collect(),
                    ),
                    other => {
                        self.push(
                            Diagnostic::new("plan::invalid_value", format!("`\"*\"` is not defined for the matrix axis `{other}`"))
                                .at(*span)
                                .label("nothing to expand to")
                                .help("`\"*\"` means every persona (axis `persona`) or every controller (axis `controller`); list this axis's values instead"),
                        );
                        None
                    }
                },
                RawAxis::List(values) => {
                    for v in values {
                        match name.value.as_str() {
                            "persona" if refs.readable("personas") => {
                                self.reference(
                                    v,
                                    refs.personas,
                                    "plan::unknown_persona",
                                    "persona",
                                );
                            }
                            "controller" => {
                                self.controller(v, refs);
                            }
                            _ => {}
                        }
                        // Cell ids join values with `,` inside `[...]`: a value
                        // holding those characters could make two cells one id.
                        if v.value.is_empty()
                            || v.value.contains([',', '[', ']'])
                            || v.value.chars().any(char::is_control)
                        {
                            self.push(
                                Diagnostic::new(
                                    "plan::invalid_value",
                                    format!("matrix value `{}` cannot be part of a step id", v.value.escape_debug()),
                                )
                                .at(v.span)
                                .label("not allowed in a matrix value")
                                .help("matrix values name cells like `play[kid,jev,1]`: they may not be empty or hold `,`, `[`, `]` or control characters"),
                            );
                        }
                    }
                    self.unique(
                        values.iter(),
                        &format!("value of matrix axis `{}`", name.value),
                    );
                    Some(values.iter().map(|v| v.value.clone()).collect())
                }
            };
            let Some(values) = values else { continue };
            // `"*"` over personas that could not be read is empty for that reason alone.
            let unreadable_star = matches!(axis, RawAxis::All(_))
                && name.value == "persona"
                && !refs.readable("personas");
            if values.is_empty() && !unreadable_star {
                self.push(
                    Diagnostic::new("plan::empty_list", format!("matrix axis `{}` has no values", name.value))
                        .at(name.span)
                        .label("expands to no cells")
                        .help("a step with an empty axis would never run; list at least one value (or define the personas `\"*\"` stands for)"),
                );
            }
            axes.push(Axis {
                name: name.value.clone(),
                values,
            });
        }
        axes
    }

    /// Reports each dependency cycle once, step by step: `a → b → c → a`.
    fn cycles(&mut self, raw: &[RawStep]) {
        // First definition wins, as everywhere else; duplicates are reported apart.
        let mut index: HashMap<&str, usize> = HashMap::new();
        for (i, s) in raw.iter().enumerate() {
            index.entry(s.id.value.as_str()).or_insert(i);
        }
        // Edges from a step to what it needs (needs and per).
        let deps: Vec<Vec<(usize, Span)>> = raw
            .iter()
            .map(|s| {
                s.needs
                    .iter()
                    .chain(s.per.iter())
                    .filter(|n| n.value != s.id.value)
                    .filter_map(|n| index.get(n.value.as_str()).map(|&i| (i, n.span)))
                    .collect()
            })
            .collect();
        // Iterative DFS with colours; a grey target closes a cycle.
        let mut colour = vec![0u8; raw.len()];
        for start in 0..raw.len() {
            if colour[start] != 0 {
                continue;
            }
            let mut path: Vec<(usize, usize)> = vec![(start, 0)];
            colour[start] = 1;
            while let Some(&mut (node, ref mut next)) = path.last_mut() {
                if let Some(&(dep, span)) = deps[node].get(*next) {
                    *next += 1;
                    match colour[dep] {
                        0 => {
                            colour[dep] = 1;
                            path.push((dep, 0));
                        }
                        1 => {
                            let from = path.iter().position(|(n, _)| *n == dep).unwrap_or(0);
                            let mut names: Vec<&str> = path[from..]
                                .iter()
                                .map(|(n, _)| raw[*n].id.value.as_str())
                                .collect();
                            names.push(&raw[dep].id.value);
                            self.push(
                                Diagnostic::new("plan::cycle", format!("dependency cycle: {}", names.join(" → ")))
                                    .at(span)
                                    .label(format!("`{}` needs `{}`, which leads back here", raw[node].id.value, raw[dep].id.value))
                                    .help("a step cannot (indirectly) wait for itself; remove one of these `needs`"),
                            );
                        }
                        _ => {}
                    }
                } else {
                    colour[node] = 2;
                    path.pop();
                }
            }
        }
    }

    /// Refuses plans that would expand past [`MAX_EXPANDED_STEPS`], by
    /// multiplying matrix sizes, before any instance is allocated.
    fn expanded_size(&mut self, raw: &[RawStep], steps: &[Step]) {
        let cells = |step: &Step| -> u64 {
            step.matrix
                .iter()
                .map(|a| a.values.len() as u64)
                .fold(1u64, u64::saturating_mul)
        };
        let mut total: u64 = 0;
        for (r, step) in raw.iter().zip(steps) {
            let n = match &step.per {
                Some(per) => steps.iter().find(|o| &o.id == per).map_or(1, cells),
                None => cells(step),
            };
            total = total.saturating_add(n);
            if total > MAX_EXPANDED_STEPS {
                let at = r.matrix.as_ref().map_or(r.id.span, |m| m.span);
                self.push(
                    Diagnostic::new(
                        "plan::too_many_steps",
                        format!("the plan expands to more than {MAX_EXPANDED_STEPS} steps"),
                    )
                    .at(at)
                    .label(format!("{n} instances of `{}`", step.id))
                    .help("split the plan, or make the matrices smaller"),
                );
                return;
            }
        }
    }
}

//! From the plan as written to the plan the engine sees, reporting every problem.
//!
//! Checks names, uniqueness, every cross-reference, paths, money rules and the
//! shape of the step graph (cycles, size) on the raw, spanned plan, so each
//! problem points at the key that causes it. Produces the model only when the
//! file has no problem at all.

mod game;
mod invariants;
mod people;
mod steps;

use std::collections::{BTreeMap, HashMap};
use std::path::{Component, Path};

use super::decode::Spanned;
use super::diagnostic::{Diagnostic, Diagnostics, did_you_mean, one_of};
use super::model::{
    Backend, BackendKind, Budget, Controller, DEFAULT_BATCH, Executor, ExecutorKind, FailOn, Gate,
    Lens, Persona, Plan,
};
use super::raw::{RawParams, RawPlan, RawStep};
use super::source::{Source, Span};
use crate::template::Templates;
pub(in crate::plan) use steps::Refs;
use steps::upstream;

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
    pub(in crate::plan) fn push(&mut self, d: Diagnostic) {
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

    /// Checks that each of `names` is a valid name, then that none repeats;
    /// the names, for what refers to them.
    fn names<'n>(
        &mut self,
        names: impl IntoIterator<Item = &'n Spanned<String>> + Clone,
        what: &str,
    ) -> Vec<&'n str> {
        for name in names.clone() {
            self.name(name, what);
        }
        self.unique(names.clone(), what);
        names.into_iter().map(|n| n.value.as_str()).collect()
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

    pub(in crate::plan) fn reference(
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
    pub(in crate::plan) fn repo_path(&mut self, path: &Spanned<String>, what: &str) -> bool {
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
    pub(in crate::plan) fn cwd_exists(
        &mut self,
        cwd: &Spanned<String>,
        step: &RawStep,
        all: &[RawStep],
    ) {
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
            RawParams::Command(c) => c.outputs.iter().any(|o| {
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

    pub(in crate::plan) fn repo_file(&mut self, path: &Spanned<String>, what: &str) {
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
        let executor = self.executor(raw);
        let budget = raw.budget.as_ref().map(|b| Budget {
            max_cents: b.max_cents,
            max_actions: b.max_actions,
            max_wall_seconds: b.max_wall_seconds,
            max_model_usd: b.max_model_usd.as_ref().map(|m| m.value),
            video: b.video,
            max_video_frames: b.max_video_frames.as_ref().map(|m| m.value),
        });
        if let Some(frames) = raw
            .budget
            .as_ref()
            .and_then(|b| b.max_video_frames.as_ref())
            .filter(|f| f.value == 0)
        {
            self.push(
                Diagnostic::new(
                    "plan::invalid_value",
                    "`max_video_frames` must be at least 1",
                )
                .at(frames.span)
                .label("a video of no frame")
                .help("`video = false` turns the video off"),
            );
        }
        let pools = self.pools(raw);

        let persona_slugs = self.names(raw.personas.iter().map(|p| &p.slug), "persona slug");
        let personas: Vec<Option<Persona>> = raw
            .personas
            .iter()
            .map(|p| self.persona(p, budget.as_ref()))
            .collect();

        let lens_names = self.names(raw.lenses.iter().map(|l| &l.name), "lens name");
        let lenses: Vec<Option<Lens>> = raw
            .lenses
            .iter()
            .map(|l| self.lens(l, budget.as_ref()))
            .collect();

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
            for narrow in [&g.only_new, &g.only_stable] {
                self.narrows(g, narrow.as_ref(), raw);
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
                only_new: g.only_new.as_ref().is_some_and(|o| o.value),
                only_stable: g.only_stable.as_ref().is_some_and(|o| o.value),
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
                    .find(|s| s.kind.value.row().plays)
                    .map(|s| s.kind.span)
            },
        );
        let mut game = self.game(raw, plays);
        let invariants = self.invariants(raw);
        match (&mut game, raw.invariants.first()) {
            (Some(game), _) => game.invariants = invariants,
            // A [game] that makes no target was reported as it is.
            (None, Some(first)) if readable("game") && raw.game.is_none() => self.push(
                Diagnostic::new(
                    "plan::missing_game",
                    "`[[invariants]]` judge plays of the game, and this plan has no [game]",
                )
                .at(first.name.span)
                .label("a rule of no game")
                .help("add the [game] they are rules of, or remove the invariants"),
            ),
            (None, _) => {}
        }
        let fail_on = self.fail_on(raw);
        let report = self.report(raw.report.as_ref());
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
            executor,
            game,
            budget: budget.unwrap_or_default(),
            pools,
            personas: personas.into_iter().flatten().collect(),
            lenses: lenses.into_iter().flatten().collect(),
            gates,
            fail_on,
            report,
            explicit_steps: raw.steps.is_some(),
            steps,
        });
        (plan, self.diags)
    }

    /// A gate's `only_new` or `only_stable` narrows its lenses over
    /// `findings`: on a gate with none it would narrow nothing, which reads
    /// as a mistake.
    fn narrows(
        &mut self,
        gate: &crate::plan::raw::RawGate,
        narrow: Option<&Spanned<bool>>,
        raw: &RawPlan,
    ) {
        let Some(set) = narrow.filter(|o| o.value) else {
            return;
        };
        let (key, code) = if gate.only_new.as_ref().is_some_and(|o| o.span == set.span) {
            ("only_new", "plan::only_new_without_findings")
        } else {
            ("only_stable", "plan::only_stable_without_findings")
        };
        let over_findings = gate.lenses.iter().any(|name| {
            raw.lenses.iter().any(|l| {
                l.name.value == name.value && l.over.value == crate::plan::raw::LensOver::Findings
            })
        });
        if !over_findings {
            self.push(
                Diagnostic::new(
                    code,
                    format!(
                        "gate `{}` has `{key} = true` but no lens over `findings`",
                        gate.name.value
                    ),
                )
                .at(set.span)
                .label("narrows nothing")
                .help(format!(
                    "`{key}` keeps a gate's lenses over findings to the findings {}; add such a \
                     lens to the gate, or drop `{key}`",
                    if key == "only_new" {
                        "a --baseline does not know"
                    } else {
                        "every repeat met"
                    }
                )),
            );
        }
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
                RawParams::Gate(g) => g.judges(&s.id.value, &gate.name.value),
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

    fn executor(&mut self, raw: &RawPlan) -> Option<Executor> {
        let e = raw.executor.as_ref()?;
        let kind = e.kind.value;
        if let Some(batch) = e.batch.as_ref().filter(|b| b.value == 0) {
            self.push(
                Diagnostic::new("plan::invalid_value", "`batch` must be at least 1")
                    .at(batch.span)
                    .label("zero cells per job"),
            );
        }
        let absolute = |dir: &Spanned<String>| Path::new(&dir.value).is_absolute();
        match (kind, &e.address, &e.shared_dir) {
            (ExecutorKind::Ray, None, _) => self.push(
                Diagnostic::new(
                    "plan::missing_key",
                    "[executor] of kind `ray` needs an `address`",
                )
                .at(e.kind.span)
                .help("add `address = \"http://HEAD:8265\"`: the Ray dashboard's URL"),
            ),
            (ExecutorKind::Ray, Some(a), _)
                if !(a.value.starts_with("http://") || a.value.starts_with("https://")) =>
            {
                self.push(
                    Diagnostic::new(
                        "plan::invalid_value",
                        format!("`{}` is not an http(s) URL", a.value),
                    )
                    .at(a.span)
                    .help("the Ray dashboard's URL, e.g. `http://ray-head:8265`"),
                );
            }
            (ExecutorKind::Local, Some(a), _) => self.push(
                Diagnostic::new(
                    "plan::unused_key",
                    "`address` is only for the `ray` executor",
                )
                .at(a.span)
                .help("remove it, or set `kind = \"ray\"`"),
            ),
            _ => {}
        }
        match (kind, &e.shared_dir) {
            (ExecutorKind::Ray, None) => self.push(
                Diagnostic::new("plan::missing_key", "[executor] of kind `ray` needs a `shared_dir`")
                    .at(e.kind.span)
                    .help("add `shared_dir = \"/mnt/playtests\"`: an absolute path every node sees, where each job leaves its cells"),
            ),
            (_, Some(dir)) if !absolute(dir) => self.push(
                Diagnostic::new("plan::invalid_value", format!("`shared_dir` `{}` is not an absolute path", dir.value))
                    .at(dir.span)
                    .label("relative")
                    .help("every node must find it at the same path: write it from `/`"),
            ),
            _ => {}
        }
        Some(Executor {
            kind,
            address: e.address.as_ref().map(|a| a.value.clone()),
            shared_dir: e.shared_dir.as_ref().map(|d| d.value.clone()),
            batch: e.batch.as_ref().map_or(DEFAULT_BATCH, |b| {
                u32::try_from(b.value).unwrap_or(u32::MAX)
            }),
        })
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
}

//! The plan as written: one type per table of the file, with spans kept.
//!
//! These types mirror the file key for key (docs/plans.md › The keys of a
//! plan) and generate `schemas/plan.schema.json`. They say nothing about
//! whether the plan makes sense; `validate` checks that and produces the
//! model the engine sees.
//! Every table is read kind-first: `kind` decides which keys are allowed.

use std::collections::BTreeMap;

use schemars::JsonSchema;

use super::decode::{Decode, Seconds, Spanned, TableReader, decode_word, wrong_type};
use super::diagnostic::{Diagnostic, Diagnostics};
pub use super::kinds::{RawParams, StepKind};
use super::node::{Node, Value};
pub use super::page::RawReport;
pub use crate::game_target::Driver;

/// A gameplan plan file (TOML or YAML; every key means the same in both).
#[derive(Debug, Clone, PartialEq, JsonSchema)]
#[schemars(deny_unknown_fields, title = "gameplan plan")]
pub struct RawPlan {
    /// Plan format version; only `1` exists.
    pub version: Spanned<u64>,
    /// The plan's name: `[a-z0-9][a-z0-9_-]*`.
    pub name: Spanned<String>,
    pub description: Option<String>,
    /// The action controllers this plan compares: `standard`, `jev`, `rune`. Default `["standard"]`.
    pub controllers: Option<Vec<Spanned<String>>>,
    /// Values templates can read as `{{ vars.NAME }}`; `--var NAME=VALUE` overrides them.
    #[schemars(with = "BTreeMap<String, serde_json::Value>", default)]
    pub vars: Vec<(String, serde_json::Value)>,
    pub backend: Option<RawBackend>,
    /// Where cells run: here (default), or elsewhere.
    pub executor: Option<RawExecutor>,
    pub game: Option<Spanned<RawGame>>,
    pub budget: Option<RawBudget>,
    /// Concurrency per resource pool (`play`, `browser`, `llm`, or your own).
    #[schemars(default)]
    pub pools: BTreeMap<String, Spanned<u64>>,
    #[schemars(default)]
    pub personas: Vec<RawPersona>,
    #[schemars(default)]
    pub lenses: Vec<RawLens>,
    #[schemars(default)]
    pub gates: Vec<RawGate>,
    /// Rules the game must keep: a broken one is an `invariant` finding.
    #[schemars(default)]
    pub invariants: Vec<RawInvariant>,
    /// Findings that fail the run (exit 1) without a gate: categories
    /// (`crash`, `hang`, ...) and severities, each severity meaning itself
    /// or worse (`high`: high or critical). `plan run --fail-on` overrides it.
    #[schemars(schema_with = "fail_on_schema", default)]
    pub fail_on: Option<Spanned<Vec<Spanned<String>>>>,
    pub report: Option<RawReport>,
    /// Exactly the steps to run. Omit for the default paid pipeline.
    pub steps: Option<Spanned<Vec<RawStep>>>,
    /// Sections the file writes but that could not be read (already
    /// reported). Validation skips the checks that depend on their contents:
    /// a lens missing its `over` must not also make its gate's reference an
    /// "unknown lens", nor a broken `steps` list make the plan look as if it
    /// had no steps (and so needed a `[game]` for the default pipeline).
    #[schemars(skip)]
    pub unreadable: Vec<&'static str>,
    /// The ids of steps that could not be read (already reported) but whose
    /// `id` could: `steps` holds the readable ones, so graph problems (an
    /// unknown `needs`, a cycle) are reported with the schema errors, and a
    /// `needs` naming one of these is not called unknown (issue 8, item 22).
    #[schemars(skip)]
    pub unread_step_ids: Vec<String>,
}

/// `fail_on`'s schema: a list of the names it takes (one list, the model's).
fn fail_on_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "items": { "enum": super::model::FailOn::names() },
        "uniqueItems": true
    })
}

/// Reads `steps` step by step: the readable steps, and the ids of the
/// others where they can be read; `None` when `steps` is not a list.
fn decode_steps(
    node: &Node,
    diags: &mut Diagnostics,
) -> Option<(Spanned<Vec<RawStep>>, Vec<String>)> {
    let Value::Array(items) = &node.value else {
        wrong_type(node, "an array", diags);
        return None;
    };
    let mut steps = Vec::with_capacity(items.len());
    let mut unread = Vec::new();
    for item in items {
        match RawStep::decode(item, diags) {
            Some(step) => steps.push(step),
            None => {
                if let Value::Table(entries) = &item.value
                    && let Some(Value::Str(id) | Value::Scalar(id)) = entries
                        .iter()
                        .find(|e| e.key == "id")
                        .map(|e| &e.value.value)
                {
                    unread.push(id.clone());
                }
            }
        }
    }
    Some((Spanned::new(steps, node.span), unread))
}

impl RawPlan {
    pub fn decode(node: &Node, diags: &mut Diagnostics) -> Option<RawPlan> {
        let mut t = TableReader::new(node, "the plan", diags)?;
        let version = t.required("version", diags);
        let name = t.required("name", diags);
        let description = t.optional("description", diags);
        let controllers = t.optional("controllers", diags);
        // `vars` were read (and rendered) before everything else; here they
        // only need to be known as a key.
        let vars = t.entry("vars").map(|e| match &e.value.value {
            Value::Table(entries) => entries
                .iter()
                .map(|v| (v.key.clone(), v.value.to_json()))
                .collect(),
            _ => Vec::new(),
        });
        let backend = t.optional("backend", diags);
        let executor = t.optional("executor", diags);
        let game = t.optional("game", diags);
        let budget = t.optional("budget", diags);
        let pools = t.optional("pools", diags);
        let personas = t.optional("personas", diags);
        let lenses = t.optional("lenses", diags);
        let gates = t.optional("gates", diags);
        let invariants = t.optional("invariants", diags);
        let fail_on = t
            .entry("fail_on")
            .and_then(|e| Decode::decode(&e.value, diags).map(|v| Spanned::new(v, e.key_span)));
        let report = t.optional("report", diags);
        let steps = t.entry("steps").and_then(|e| decode_steps(&e.value, diags));
        let (steps, unread_step_ids) = match steps {
            Some((steps, unread)) => (Some(steps), unread),
            None => (None, Vec::new()),
        };
        // Some steps unreadable: checks that need every step (is a `[game]`
        // needed, does a gate have its step) are skipped as for an
        // unreadable `steps`; the readable steps are still checked.
        let some_unread = steps.as_ref().is_some_and(|s| {
            let Some(Value::Array(items)) = t.entry("steps").map(|e| &e.value.value) else {
                return false;
            };
            items.len() != s.value.len()
        });
        let mut unreadable = Vec::new();
        if some_unread {
            unreadable.push("steps");
        }
        for (key, read) in [
            ("controllers", controllers.is_some()),
            ("game", game.is_some()),
            ("pools", pools.is_some()),
            ("personas", personas.is_some()),
            ("lenses", lenses.is_some()),
            ("gates", gates.is_some()),
            ("invariants", invariants.is_some()),
            ("steps", steps.is_some()),
        ] {
            if !read && t.entry(key).is_some() {
                unreadable.push(key);
            }
        }
        // A missing or unreadable `version` or `name` (already reported)
        // does not hide the rest of the plan's problems: the steps are
        // still checked, with a stand-in the plan model never gets (the
        // errors keep it from being built).
        let version = version.unwrap_or_else(|| Spanned::new(1, node.span));
        let name = name.unwrap_or_else(|| {
            unreadable.push("name");
            Spanned::new(String::new(), node.span)
        });
        t.finish(diags);
        Some(RawPlan {
            version,
            name,
            description,
            controllers,
            vars: vars.unwrap_or_default(),
            backend,
            executor,
            game,
            budget,
            pools: pools.unwrap_or_default(),
            personas: personas.unwrap_or_default(),
            lenses: lenses.unwrap_or_default(),
            gates: gates.unwrap_or_default(),
            invariants: invariants.unwrap_or_default(),
            fail_on,
            report,
            steps,
            unreadable,
            unread_step_ids,
        })
    }
}

/// Where money and uploads go.
#[derive(Debug, Clone, PartialEq, JsonSchema)]
#[schemars(deny_unknown_fields, rename = "Backend")]
pub struct RawBackend {
    pub kind: Option<BackendKind>,
    /// The API's base URL (`http` only).
    pub url: Option<Spanned<String>>,
    /// API token; read it with `{{ secret('NAME') }}`.
    pub token: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, JsonSchema, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// The embedded ledger in `.gameplan/ledger.sqlite` (default).
    Local,
    /// A server speaking the gameplan HTTP API.
    Http,
}

impl BackendKind {
    /// The plan's word for it.
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Local => "local",
            BackendKind::Http => "http",
        }
    }
}

impl Decode for RawBackend {
    fn decode(node: &Node, diags: &mut Diagnostics) -> Option<Self> {
        let mut t = TableReader::new(node, "[backend]", diags)?;
        let kind = t.entry("kind").and_then(|e| {
            decode_word(
                &e.value,
                &[("local", BackendKind::Local), ("http", BackendKind::Http)],
                "backend kind",
                diags,
            )
        });
        let url = t.optional("url", diags);
        let token = t.optional("token", diags);
        t.finish(diags);
        Some(RawBackend { kind, url, token })
    }
}

/// Where the plan's cells run.
#[derive(Debug, Clone, PartialEq, JsonSchema)]
#[schemars(deny_unknown_fields, rename = "Executor")]
pub struct RawExecutor {
    /// `local`: each batch of cells in a gameplan process of its own on this
    /// machine; `ray`: each batch as a job on a Ray cluster.
    pub kind: Spanned<ExecutorKind>,
    /// ray: the Ray dashboard's URL (`http://ray-head:8265`).
    pub address: Option<Spanned<String>>,
    /// A directory every node sees at this absolute path: each batch's
    /// bundle and state. local: default `<state dir>/executor`.
    pub shared_dir: Option<Spanned<String>>,
    /// Cells per job (default 8; an llm-played cell always goes alone).
    pub batch: Option<Spanned<u64>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, JsonSchema, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ExecutorKind {
    /// Batches as gameplan processes on this machine.
    Local,
    /// Batches as Ray jobs, through the Ray Jobs REST API.
    Ray,
}

impl Decode for RawExecutor {
    fn decode(node: &Node, diags: &mut Diagnostics) -> Option<Self> {
        let mut t = TableReader::new(node, "[executor]", diags)?;
        let kind = t.required::<Node>("kind", diags).and_then(|k| {
            decode_word(
                &k,
                &[("local", ExecutorKind::Local), ("ray", ExecutorKind::Ray)],
                "executor kind",
                diags,
            )
            .map(|v| Spanned::new(v, k.span))
        });
        let address = t.optional("address", diags);
        let shared_dir = t.optional("shared_dir", diags);
        let batch = t.optional("batch", diags);
        t.finish(diags);
        Some(RawExecutor {
            kind: kind?,
            address,
            shared_dir,
            batch,
        })
    }
}

/// The game build under test.
#[derive(Debug, Clone, PartialEq, JsonSchema)]
#[schemars(deny_unknown_fields, rename = "Game")]
pub struct RawGame {
    pub id: Spanned<String>,
    // Which driver plays the game. Its schema's description is made from
    // the drivers' table (`game_target`), which a doc comment here would
    // override.
    pub driver: Option<Spanned<Driver>>,
    /// stdio: the game's argv. `["builtin:maze"]` runs a game shipped in gameplan.
    pub command: Option<Spanned<Vec<String>>>,
    /// webdriver: the page to open (`http(s)://`, `file://`, or a repo-relative path).
    pub url: Option<Spanned<String>>,
    /// webdriver: a running WebDriver server (`http://127.0.0.1:4444`) to use
    /// instead of the chromedriver gameplan starts itself.
    pub webdriver_url: Option<Spanned<String>>,
    /// webdriver: a repo directory gameplan serves on a free loopback port for
    /// each cell; `url` is then relative to it (default `index.html`).
    pub serve: Option<Spanned<String>>,
    /// webdriver: URL patterns in scope besides the url's origin
    /// (`https://cdn.example/**`); links elsewhere are not offered.
    #[schemars(default)]
    pub allow: Vec<Spanned<String>>,
    /// webdriver: keys offered on every page (`ArrowUp`, `Space`, `a`, ...),
    /// besides Enter, Escape and the page's own `window.gameplan.keys`.
    #[schemars(default)]
    pub keys: Vec<Spanned<String>>,
    /// webdriver: the window's width and height in pixels (default [1280, 800]).
    pub viewport: Option<Spanned<Vec<u64>>>,
    /// Globs hashed into the build hash.
    #[schemars(default)]
    pub inputs: Vec<Spanned<String>>,
    /// Seconds without an answer before a `hang` finding (default 10).
    pub action_timeout: Option<Spanned<u64>>,
    /// Actions with no change before a `stuck` finding (default 8).
    pub stuck_after: Option<Spanned<u64>>,
    /// stdio: environment variables for the game, beyond PATH, HOME, LANG and TMPDIR.
    #[schemars(default)]
    pub env: BTreeMap<String, String>,
    /// stdio: the game's resource limits (`memory = "8 GiB"`, `processes = 256`,
    /// `open_files = 1024`; `"none"` lifts one).
    pub limits: Option<Spanned<RawLimits>>,
    /// webdriver: a JavaScript expression evaluated in the page with every
    /// observation; its value (as JSON) is the observation's `state`.
    pub probe: Option<Spanned<String>>,
    /// An expression over `obs` (and `prev`) that holds when the cell's goal
    /// is reached (`obs.state.level >= 2`), besides a `goal` event.
    pub goal: Option<Spanned<String>>,
    /// webdriver: seconds the first page may take to load (default 30).
    pub load_timeout: Option<Spanned<u64>>,
}

/// `[game] limits`: each an amount, or `"none"`.
#[derive(Debug, Clone, PartialEq, JsonSchema)]
#[schemars(deny_unknown_fields, rename = "Limits")]
pub struct RawLimits {
    /// Resident memory of the game's process tree: `"512 MiB"`, `"8 GiB"`
    /// (default `"4 GiB"`), or `"none"`.
    pub memory: Option<Spanned<Limit>>,
    /// Address space of each process (`RLIMIT_AS`; default none): for who
    /// asks; a JVM reserves far more than it uses.
    pub address_space: Option<Spanned<Limit>>,
    /// CPU seconds of each process (`RLIMIT_CPU`; default 600).
    pub cpu_seconds: Option<Spanned<Limit>>,
    /// Processes of the game's user (`RLIMIT_NPROC`; default none).
    pub processes: Option<Spanned<Limit>>,
    /// Open files (default 1024).
    pub open_files: Option<Spanned<Limit>>,
}

/// One limit: an amount (bytes for `memory`, written with a unit), or none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    At(u64),
    Unlimited,
}

impl JsonSchema for Limit {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Limit".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "anyOf": [
                {"type": "integer", "minimum": 1},
                {"type": "string", "description": "an amount with a unit (\"512 MiB\", \"8 GiB\"), or \"none\""}
            ]
        })
    }
}

impl Decode for Limit {
    fn decode(node: &Node, diags: &mut Diagnostics) -> Option<Self> {
        if let Value::Int(n) = node.value
            && n > 0
        {
            return u64::try_from(n).ok().map(Limit::At);
        }
        if let Value::Str(text) | Value::Scalar(text) = &node.value {
            let text = text.trim();
            if text.eq_ignore_ascii_case("none") {
                return Some(Limit::Unlimited);
            }
            let split = text
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(text.len());
            let (digits, unit) = text.split_at(split);
            let scale: Option<u64> = match unit.trim() {
                "" | "B" => Some(1),
                "KiB" | "K" => Some(1 << 10),
                "MiB" | "M" => Some(1 << 20),
                "GiB" | "G" => Some(1 << 30),
                "TiB" | "T" => Some(1 << 40),
                _ => None,
            };
            if let (Ok(n), Some(scale)) = (digits.parse::<u64>(), scale)
                && n > 0
                && let Some(bytes) = n.checked_mul(scale)
            {
                return Some(Limit::At(bytes));
            }
        }
        diags.push(
            Diagnostic::new("plan::wrong_type", "expected a limit")
                .at(node.span)
                .label("not a limit")
                .help("write a positive number (`open_files = 4096`), an amount with a unit (`memory = \"8 GiB\"`, `\"512 MiB\"`), or `\"none\"` to lift it"),
        );
        None
    }
}

impl Decode for RawLimits {
    fn decode(node: &Node, diags: &mut Diagnostics) -> Option<Self> {
        let mut t = TableReader::new(node, "[game] limits", diags)?;
        let memory = t.optional("memory", diags);
        let address_space = t.optional("address_space", diags);
        let cpu_seconds = t.optional("cpu_seconds", diags);
        let processes = t.optional("processes", diags);
        let open_files = t.optional("open_files", diags);
        t.finish(diags);
        Some(RawLimits {
            memory,
            address_space,
            cpu_seconds,
            processes,
            open_files,
        })
    }
}

impl Decode for RawGame {
    fn decode(node: &Node, diags: &mut Diagnostics) -> Option<Self> {
        let mut t = TableReader::new(node, "[game]", diags)?;
        let id = t.required("id", diags);
        let driver = t.entry("driver").and_then(|e| {
            decode_word(&e.value, Driver::ALL, "driver", diags)
                .map(|d| Spanned::new(d, e.value.span))
        });
        // A misspelt driver must not be taken for the default (stdio) and
        // draw "needs a `command`" on top of "unknown driver".
        let driver_unreadable = driver.is_none() && t.entry("driver").is_some();
        let command = t.optional("command", diags);
        let url = t.optional("url", diags);
        let webdriver_url = t.optional("webdriver_url", diags);
        let serve = t.optional("serve", diags);
        let allow = t.optional("allow", diags);
        let keys = t.optional("keys", diags);
        let viewport = t.optional("viewport", diags);
        let inputs = t.optional("inputs", diags);
        let action_timeout = t.optional("action_timeout", diags);
        let stuck_after = t.optional("stuck_after", diags);
        let env = t.optional("env", diags);
        let limits = t.optional("limits", diags);
        let probe = t.optional("probe", diags);
        let goal = t.optional("goal", diags);
        let load_timeout = t.optional("load_timeout", diags);
        t.finish(diags);
        if driver_unreadable {
            return None;
        }
        Some(RawGame {
            id: id?,
            driver,
            command,
            url,
            webdriver_url,
            serve,
            allow: allow.unwrap_or_default(),
            keys: keys.unwrap_or_default(),
            viewport,
            inputs: inputs.unwrap_or_default(),
            action_timeout,
            stuck_after,
            env: env.unwrap_or_default(),
            limits,
            probe,
            goal,
            load_timeout,
        })
    }
}

/// A rule the game must keep (`[[invariants]]`; docs/invariants.md): one
/// of `always`, `never`, `eventually` (with `within`) or `sometimes`, a
/// minijinja expression over `obs` and `prev`.
#[derive(Debug, Clone, PartialEq, JsonSchema)]
#[schemars(deny_unknown_fields, rename = "Invariant")]
pub struct RawInvariant {
    /// What the rule says, in words: the finding's title names it.
    pub name: Spanned<String>,
    /// Must hold after every action.
    pub always: Option<Spanned<String>>,
    /// Must not hold after any action.
    pub never: Option<Spanned<String>>,
    /// Must hold within `within` actions of every reset.
    pub eventually: Option<Spanned<String>>,
    /// Must hold at least once in the whole playtest (unmet: a `coverage` finding).
    pub sometimes: Option<Spanned<String>>,
    /// `eventually`'s window, in actions after a reset.
    pub within: Option<Spanned<u64>>,
    /// The broken rule's severity: critical, high (default), medium, low.
    pub severity: Option<Spanned<String>>,
    /// Count the first step it holds in the cell's progress (`milestones`).
    pub milestone: Option<bool>,
}

impl Decode for RawInvariant {
    fn decode(node: &Node, diags: &mut Diagnostics) -> Option<Self> {
        let mut t = TableReader::new(node, "an invariant", diags)?;
        let name: Option<Spanned<String>> = t.required("name", diags);
        if let Some(name) = &name {
            t.describe(format!("invariant `{}`", name.value));
        }
        let always = t.optional("always", diags);
        let never = t.optional("never", diags);
        let eventually = t.optional("eventually", diags);
        let sometimes = t.optional("sometimes", diags);
        let within = t.optional("within", diags);
        let severity = t.optional("severity", diags);
        let milestone = t.optional("milestone", diags);
        t.finish(diags);
        Some(RawInvariant {
            name: name?,
            always,
            never,
            eventually,
            sometimes,
            within,
            severity,
            milestone,
        })
    }
}

/// Spending limits. A run stops (exit 2, partial results kept) when one is reached.
#[derive(Debug, Clone, PartialEq, JsonSchema)]
#[schemars(deny_unknown_fields, rename = "Budget")]
pub struct RawBudget {
    /// `estimate` refuses a quote above this.
    pub max_cents: Option<u64>,
    pub max_actions: Option<u64>,
    pub max_wall_seconds: Option<u64>,
    pub max_model_usd: Option<Spanned<f64>>,
    /// A browser cell's video (docs/web-games.md); `false`: none. Default `true`.
    pub video: Option<bool>,
    /// Frames at most in a browser cell's video; then it stops. Default 600.
    pub max_video_frames: Option<Spanned<u64>>,
}

impl Decode for RawBudget {
    fn decode(node: &Node, diags: &mut Diagnostics) -> Option<Self> {
        let mut t = TableReader::new(node, "[budget]", diags)?;
        let budget = RawBudget {
            max_cents: t.optional("max_cents", diags),
            max_actions: t.optional("max_actions", diags),
            max_wall_seconds: t.optional("max_wall_seconds", diags),
            max_model_usd: t.optional("max_model_usd", diags),
            video: t.optional("video", diags),
            max_video_frames: t.optional("max_video_frames", diags),
        };
        t.finish(diags);
        Some(budget)
    }
}

/// An AI player (for play) or reviewer (for a persona gate).
#[derive(Debug, Clone, PartialEq, JsonSchema)]
#[schemars(deny_unknown_fields, rename = "Persona")]
pub struct RawPersona {
    pub slug: Spanned<String>,
    /// The persona card, inline.
    pub card: Option<String>,
    /// The persona card, from a file in the repo.
    pub card_file: Option<Spanned<String>>,
    /// How this persona picks actions (default `{ kind = "explorer" }`).
    pub player: Option<Spanned<RawPlayer>>,
    /// Actions before the persona quits bored.
    pub patience: Option<u64>,
    #[schemars(skip)]
    pub span: crate::plan::source::Span,
}

impl Decode for RawPersona {
    fn decode(node: &Node, diags: &mut Diagnostics) -> Option<Self> {
        let mut t = TableReader::new(node, "a persona", diags)?;
        let slug: Option<Spanned<String>> = t.required("slug", diags);
        if let Some(slug) = &slug {
            t.describe(format!("persona `{}`", slug.value));
        }
        let card = t.optional("card", diags);
        let card_file = t.optional("card_file", diags);
        let player = t.optional("player", diags);
        let patience = t.optional("patience", diags);
        let span = t.span();
        t.finish(diags);
        Some(RawPersona {
            slug: slug?,
            card,
            card_file,
            player,
            patience,
            span,
        })
    }
}

/// A persona's player: `kind` picks the keys.
#[derive(Debug, Clone, PartialEq, JsonSchema)]
#[schemars(
    tag = "kind",
    rename_all = "lowercase",
    deny_unknown_fields,
    rename = "Player"
)]
#[expect(
    clippy::large_enum_variant,
    reason = "one player per persona, a handful per plan"
)]
pub enum RawPlayer {
    /// Plays a fixed list of actions.
    Scripted { actions: Vec<String> },
    /// Picks uniformly among the offered actions (seeded).
    Random { seed: Option<i64> },
    /// Prefers the actions least tried from this observation (seeded tie-break).
    Explorer { seed: Option<i64> },
    /// An OpenAI-compatible chat model (a hosted API, or a local
    /// llama.cpp, Ollama or vLLM server via `base_url`).
    Llm {
        /// The model's name, as the endpoint knows it.
        model: Spanned<String>,
        /// The endpoint's base URL (default `https://api.openai.com/v1`);
        /// requests go to `{base_url}/chat/completions`.
        base_url: Option<String>,
        /// The bearer key: `{{ secret('NAME') }}`, never the key itself.
        api_key: Option<String>,
        temperature: Option<f64>,
        /// USD per million tokens; needed under `budget.max_model_usd` for
        /// a model gameplan has no built-in price for.
        price: Option<Spanned<RawPrice>>,
        /// A minijinja template for the prompt, a file in the repo (default:
        /// the one shipped in gameplan). It reads `persona`, `observation`,
        /// `history`, `wanted` and `step`.
        prompt_file: Option<Spanned<String>>,
        /// Seconds one request may take before it is tried again (default 60).
        timeout: Option<Spanned<u64>>,
        /// Who takes the move after the model answered badly twice:
        /// `explorer` (default), `random`, or `stop` (the cell ends
        /// `bad_answer`).
        fallback: Option<Spanned<crate::plan::model::Fallback>>,
        /// Ask for the choice as structured output, a JSON Schema of the
        /// listed actions, where the server takes it (default true).
        structured: Option<bool>,
        /// Seconds "How it felt" may take (default 120); it is not asked
        /// twice.
        felt_timeout: Option<Spanned<u64>>,
        /// Answer tokens "How it felt" may use (default 200).
        felt_max_tokens: Option<Spanned<u32>>,
    },
}

impl Decode for crate::plan::model::Fallback {
    fn decode(node: &Node, diags: &mut Diagnostics) -> Option<Self> {
        decode_word(node, &crate::plan::model::Fallback::ALL, "fallback", diags)
    }
}

/// A model's price: USD per million tokens.
#[derive(Debug, Clone, PartialEq, JsonSchema)]
#[schemars(deny_unknown_fields, rename = "Price")]
pub struct RawPrice {
    /// USD per million input (prompt) tokens.
    pub input_per_mtok: Spanned<f64>,
    /// USD per million output (completion) tokens.
    pub output_per_mtok: Spanned<f64>,
}

impl Decode for RawPrice {
    fn decode(node: &Node, diags: &mut Diagnostics) -> Option<Self> {
        let mut t = TableReader::new(node, "`price`", diags)?;
        let input = t.required("input_per_mtok", diags);
        let output = t.required("output_per_mtok", diags);
        t.finish(diags);
        Some(RawPrice {
            input_per_mtok: input?,
            output_per_mtok: output?,
        })
    }
}

impl Decode for RawPlayer {
    fn decode(node: &Node, diags: &mut Diagnostics) -> Option<Self> {
        #[derive(Clone, Copy)]
        enum K {
            Scripted,
            Random,
            Explorer,
            Llm,
        }
        let mut t = TableReader::new(node, "the player", diags)?;
        let kind = t.required::<Node>("kind", diags)?;
        let kind = decode_word(
            &kind,
            &[
                ("scripted", K::Scripted),
                ("random", K::Random),
                ("explorer", K::Explorer),
                ("llm", K::Llm),
            ],
            "player kind",
            diags,
        )?;
        let player = match kind {
            K::Scripted => {
                t.describe("a scripted player");
                RawPlayer::Scripted {
                    actions: t.required("actions", diags)?,
                }
            }
            K::Random => {
                t.describe("a random player");
                RawPlayer::Random {
                    seed: t.optional("seed", diags),
                }
            }
            K::Explorer => {
                t.describe("an explorer player");
                RawPlayer::Explorer {
                    seed: t.optional("seed", diags),
                }
            }
            K::Llm => {
                t.describe("an llm player");
                let model = t.required("model", diags);
                let base_url = t.optional("base_url", diags);
                let api_key = t.optional("api_key", diags);
                let temperature = t.optional("temperature", diags);
                let price = t.optional("price", diags);
                let prompt_file = t.optional("prompt_file", diags);
                let timeout = t.optional("timeout", diags);
                let fallback = t.optional("fallback", diags);
                let structured = t.optional("structured", diags);
                let felt_timeout = t.optional("felt_timeout", diags);
                let felt_max_tokens = t.optional("felt_max_tokens", diags);
                RawPlayer::Llm {
                    model: model?,
                    base_url,
                    api_key,
                    temperature,
                    price,
                    prompt_file,
                    timeout,
                    fallback,
                    structured,
                    felt_timeout,
                    felt_max_tokens,
                }
            }
        };
        t.finish(diags);
        Some(player)
    }
}

/// One review perspective.
#[derive(Debug, Clone, PartialEq, JsonSchema)]
#[schemars(deny_unknown_fields, rename = "Lens")]
pub struct RawLens {
    pub name: Spanned<String>,
    pub kind: LensKind,
    /// What the lens judges, one unit at a time.
    pub over: Spanned<LensOver>,
    /// rule: a minijinja expression over `unit`; true means a finding.
    pub when: Option<Spanned<String>>,
    /// command: a shell command reading JSON units on stdin, writing JSON verdicts.
    pub run: Option<Spanned<String>>,
    /// command: the same, as an argv.
    pub argv: Option<Spanned<Vec<String>>>,
    /// llm: the charter text, inline: a minijinja template reading `unit`,
    /// `reviewer` and `lens`, rendered per unit at review time.
    pub charter: Option<Spanned<String>>,
    /// llm: the charter, from a file in the repo.
    pub charter_file: Option<Spanned<String>>,
    /// llm: the model's name, as the endpoint knows it.
    pub model: Option<Spanned<String>>,
    /// llm: the endpoint's base URL (default `https://api.openai.com/v1`).
    pub base_url: Option<String>,
    /// llm: the bearer key: `{{ secret('NAME') }}`, never the key itself.
    pub api_key: Option<String>,
    /// llm: USD per million tokens; needed under `budget.max_model_usd` for
    /// a model gameplan has no built-in price for.
    pub price: Option<Spanned<RawPrice>>,
    /// over = "files": the globs whose files are units.
    pub files: Option<Vec<Spanned<String>>>,
    /// over = "patches": a directory (or glob) of `git format-patch` files.
    pub patches: Option<Spanned<String>>,
    /// command: seconds one call may take before its units are left missing
    /// (default 300); llm: seconds one request may take before it is tried
    /// again (default 60).
    #[schemars(range(min = 1))]
    pub timeout: Option<Spanned<u64>>,
    #[schemars(skip)]
    pub span: crate::plan::source::Span,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, JsonSchema, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LensKind {
    Rule,
    Command,
    Llm,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, JsonSchema, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LensOver {
    Findings,
    Runs,
    Files,
    Patches,
}

/// The keys only some lens kinds take: a lens whose kind cannot be read
/// is not blamed for any of them.
const LENS_KIND_KEYS: [&str; 10] = [
    "when",
    "run",
    "argv",
    "charter",
    "charter_file",
    "model",
    "base_url",
    "api_key",
    "price",
    "timeout",
];

impl Decode for RawLens {
    fn decode(node: &Node, diags: &mut Diagnostics) -> Option<Self> {
        let mut t = TableReader::new(node, "a lens", diags)?;
        let name: Option<Spanned<String>> = t.required("name", diags);
        if let Some(name) = &name {
            t.describe(format!("lens `{}`", name.value));
        }
        let kind = t.required::<Node>("kind", diags).and_then(|k| {
            decode_word(
                &k,
                &[
                    ("rule", LensKind::Rule),
                    ("command", LensKind::Command),
                    ("llm", LensKind::Llm),
                ],
                "lens kind",
                diags,
            )
        });
        let over = t.required::<Node>("over", diags).and_then(|o| {
            decode_word(
                &o,
                &[
                    ("findings", LensOver::Findings),
                    ("runs", LensOver::Runs),
                    ("files", LensOver::Files),
                    ("patches", LensOver::Patches),
                ],
                "lens input (`over`)",
                diags,
            )
            .map(|v| Spanned::new(v, o.span))
        });
        let span = t.span();
        // Kind-specific keys are known only to their kind, so a `when` on an
        // llm lens is reported as unknown there.
        let (
            mut when,
            mut run,
            mut argv,
            mut charter,
            mut charter_file,
            mut model,
            mut base_url,
            mut api_key,
            mut price,
            mut timeout,
        ) = (None, None, None, None, None, None, None, None, None, None);
        match kind {
            Some(LensKind::Rule) => when = t.required("when", diags),
            Some(LensKind::Command) => {
                run = t.optional("run", diags);
                argv = t.optional("argv", diags);
                timeout = t.optional("timeout", diags);
            }
            Some(LensKind::Llm) => {
                charter = t.optional("charter", diags);
                charter_file = t.optional("charter_file", diags);
                model = t.required("model", diags);
                base_url = t.optional("base_url", diags);
                api_key = t.optional("api_key", diags);
                price = t.optional("price", diags);
                timeout = t.optional("timeout", diags);
            }
            None => {
                for key in LENS_KIND_KEYS {
                    t.entry(key);
                }
            }
        }
        let (mut files, mut patches) = (None, None);
        match over.as_ref().map(|o| o.value) {
            Some(LensOver::Files) => files = t.required("files", diags),
            Some(LensOver::Patches) => patches = t.required("patches", diags),
            Some(_) => {}
            None => {
                t.entry("files");
                t.entry("patches");
            }
        }
        t.finish(diags);
        Some(RawLens {
            name: name?,
            kind: kind?,
            over: over?,
            when,
            run,
            argv,
            charter,
            charter_file,
            model,
            base_url,
            api_key,
            price,
            files,
            patches,
            timeout,
            span,
        })
    }
}

/// An ordered group of lenses; the first gate that is not SEND-READY stops the later ones.
#[derive(Debug, Clone, PartialEq, JsonSchema)]
#[schemars(deny_unknown_fields, rename = "Gate")]
pub struct RawGate {
    pub name: Spanned<String>,
    pub lenses: Vec<Spanned<String>>,
    /// Personas who review after the lenses pass (one lens pass per reviewer).
    #[schemars(default)]
    pub reviewers: Vec<Spanned<String>>,
    /// Its lenses over `findings` judge only the findings a `--baseline`
    /// does not know (`new`; without a baseline every finding is new).
    #[schemars(default)]
    pub only_new: Option<Spanned<bool>>,
    /// Its lenses over `findings` leave out the findings labelled `flaky`
    /// (met by some repeats of their cells only; a play step's `repeat`).
    #[schemars(default)]
    pub only_stable: Option<Spanned<bool>>,
}

impl Decode for RawGate {
    fn decode(node: &Node, diags: &mut Diagnostics) -> Option<Self> {
        let mut t = TableReader::new(node, "a gate", diags)?;
        let name: Option<Spanned<String>> = t.required("name", diags);
        if let Some(name) = &name {
            t.describe(format!("gate `{}`", name.value));
        }
        let lenses = t.required("lenses", diags);
        let reviewers = t.optional("reviewers", diags);
        let only_new = t.optional("only_new", diags);
        let only_stable = t.optional("only_stable", diags);
        t.finish(diags);
        Some(RawGate {
            name: name?,
            lenses: lenses?,
            reviewers: reviewers.unwrap_or_default(),
            only_new,
            only_stable,
        })
    }
}

/// One matrix axis: `"*"` (every persona / controller) or an explicit list.
#[derive(Debug, Clone, PartialEq)]
pub enum RawAxis {
    All(crate::plan::source::Span),
    List(Vec<Spanned<String>>),
}

/// Axis name → values, in the order written.
pub type RawMatrix = Spanned<Vec<(Spanned<String>, RawAxis)>>;

/// One step of the plan (before matrix expansion).
#[derive(Debug, Clone, PartialEq)]
pub struct RawStep {
    pub id: Spanned<String>,
    pub kind: Spanned<StepKind>,
    pub needs: Vec<Spanned<String>>,
    pub matrix: Option<RawMatrix>,
    pub per: Option<Spanned<String>>,
    pub always: bool,
    /// Where `always` is written, for the warning when it has no effect.
    pub always_span: Option<crate::plan::source::Span>,
    pub pool: Option<Spanned<String>>,
    pub timeout: Option<Spanned<u64>>,
    pub retries: Option<Spanned<u64>>,
    pub reuse: bool,
    pub env: BTreeMap<String, String>,
    pub params: RawParams,
    pub span: crate::plan::source::Span,
}

impl Decode for RawAxis {
    fn decode(node: &Node, diags: &mut Diagnostics) -> Option<Self> {
        match &node.value {
            Value::Str(s) | Value::Scalar(s) if s == "*" => Some(RawAxis::All(node.span)),
            Value::Array(items) => {
                let mut values = Vec::with_capacity(items.len());
                for item in items {
                    let text = match &item.value {
                        Value::Str(s) | Value::Scalar(s) => s.clone(),
                        Value::Int(i) => i.to_string(),
                        Value::Bool(b) => b.to_string(),
                        _ => {
                            wrong_type(item, "a string or an integer", diags);
                            return None;
                        }
                    };
                    values.push(Spanned::new(text, item.span));
                }
                Some(RawAxis::List(values))
            }
            _ => {
                wrong_type(node, "`\"*\"` or a list of values", diags);
                None
            }
        }
    }
}

/// A step's `needs`, with the fix for the commonest slip: one id where a
/// list is wanted.
fn decode_needs(t: &mut TableReader<'_>, diags: &mut Diagnostics) -> Option<Vec<Spanned<String>>> {
    match t.entry("needs") {
        Some(e) if let Value::Str(one) | Value::Scalar(one) = &e.value.value => {
            diags.push(
                Diagnostic::new("plan::wrong_type", "expected an array, found a string")
                    .at(e.value.span)
                    .label("expected an array")
                    .help(format!(
                        "`needs` is a list: write `needs = [\"{one}\"]` (in YAML, `needs: [{one}]`)"
                    )),
            );
            None
        }
        _ => t.optional("needs", diags),
    }
}

impl Decode for RawStep {
    fn decode(node: &Node, diags: &mut Diagnostics) -> Option<Self> {
        let mut t = TableReader::new(node, "a step", diags)?;
        let id: Option<Spanned<String>> = t.required("id", diags);
        if let Some(id) = &id {
            t.describe(format!("step `{}`", id.value));
        }
        let kind = t.required::<Node>("kind", diags).and_then(|k| {
            decode_word(&k, StepKind::ALL, "step kind", diags).map(|v| Spanned::new(v, k.span))
        });
        let needs = decode_needs(&mut t, diags);
        let matrix = t.entry("matrix").and_then(|e| {
            let Value::Table(entries) = &e.value.value else {
                wrong_type(&e.value, "a table of axes", diags);
                return None;
            };
            let mut axes = Vec::new();
            for axis in entries {
                axes.push((
                    Spanned::new(axis.key.clone(), axis.key_span),
                    RawAxis::decode(&axis.value, diags)?,
                ));
            }
            Some(Spanned::new(axes, e.key_span))
        });
        // A step whose matrix cannot be read is unreadable as a whole, like
        // one without a `kind`: taken as matrix-less, it would draw false
        // problems (a `per` naming it "has no matrix").
        let matrix_unreadable = matrix.is_none() && t.entry("matrix").is_some();
        let per = t.optional("per", diags);
        let always_span = t.entry("always").map(|e| e.key_span);
        let always = t.optional("always", diags);
        let pool = t.optional("pool", diags);
        let timeout = t.entry("timeout").and_then(|e| {
            Seconds::decode(&e.value, diags).map(|s| Spanned::new(s.0, e.value.span))
        });
        let retries = t.optional("retries", diags);
        let reuse = t.optional("reuse", diags);
        let env = t.optional("env", diags);
        let params = if let Some(kind) = &kind {
            Some(RawParams::decode(kind.value, &mut t, diags))
        } else {
            // Unknown kind: already reported; don't pile "unknown key" on top.
            for key in super::kinds::every_own_key() {
                t.entry(key);
            }
            None
        };
        let span = t.span();
        t.finish(diags);
        if matrix_unreadable {
            return None;
        }
        Some(RawStep {
            id: id?,
            kind: kind?,
            needs: needs.unwrap_or_default(),
            matrix,
            per,
            always: always.unwrap_or(false),
            always_span,
            pool,
            timeout,
            retries,
            reuse: reuse.unwrap_or(true),
            env: env.unwrap_or_default(),
            params: params?,
            span,
        })
    }
}

//! The validated plan: what the engine sees.
//!
//! Everything here has been checked: names are well-formed and unique, every
//! reference (needs, per, persona, controller, lens, gate, reviewer) resolves,
//! paths stay inside the repo, and the step graph has no cycle. Spans are gone;
//! a TOML plan and its YAML twin produce equal models. The model knows nothing
//! of running or money.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use super::kinds::{Params, StepKind};
pub use super::raw::{BackendKind, ExecutorKind, LensKind, LensOver};
pub use crate::finding_class::{Category, Severity};
pub use crate::game_target::{
    BrowserGame, DEFAULT_LOAD_TIMEOUT, DEFAULT_VIEWPORT, Driver, GameTarget, WrittenTarget,
};

/// The built-in action controllers (docs/llm-players.md › Controllers and
/// model calls).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Controller {
    /// The player picks one action.
    Standard,
    /// The player proposes up to three alternatives; a separate selector picks one.
    Jev,
    /// Three independent proposals, majority vote.
    Rune,
}

impl Controller {
    pub const ALL: [(&'static str, Controller); 3] = [
        ("standard", Controller::Standard),
        ("jev", Controller::Jev),
        ("rune", Controller::Rune),
    ];

    pub fn name(self) -> &'static str {
        match self {
            Controller::Standard => "standard",
            Controller::Jev => "jev",
            Controller::Rune => "rune",
        }
    }

    pub fn from_name(name: &str) -> Option<Controller> {
        Self::ALL.iter().find(|(n, _)| *n == name).map(|(_, c)| *c)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    pub name: String,
    pub description: Option<String>,
    pub controllers: Vec<Controller>,
    pub vars: serde_json::Map<String, serde_json::Value>,
    pub backend: Backend,
    /// Where cells run; `None`: here, in this process. Left out of the
    /// model's JSON when absent, so plans without it keep their hash.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub executor: Option<Executor>,
    pub game: Option<Game>,
    pub budget: Budget,
    pub pools: BTreeMap<String, u32>,
    pub personas: Vec<Persona>,
    pub lenses: Vec<Lens>,
    pub gates: Vec<Gate>,
    /// `fail_on`: which findings fail the run (exit 1) without a gate;
    /// empty when the plan does not say.
    pub fail_on: Vec<FailOn>,
    /// `[report]`: how `report.html` is made. Left out of the model's JSON
    /// when absent, so plans without it keep their hash.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub report: Option<ReportPage>,
    /// False when the plan omits `steps` and gets the default paid pipeline.
    pub explicit_steps: bool,
    /// Steps in file order (or the default pipeline's order), before matrix expansion.
    pub steps: Vec<Step>,
}

/// `[report]`: how the run's `report.html` is made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReportPage {
    /// The plan's own template, repo-relative; `None`: the shipped one.
    pub template: Option<String>,
}

/// One entry of `fail_on` / `--fail-on`: a finding category, or a severity
/// that stands for itself and every worse one (`high` is high or critical),
/// as `trivy --severity` but ordered; `flaky` or `unconfirmed`. With `new:`
/// in front (`new:crash`), only the findings a baseline does not know (`plan
/// run --baseline`); with `stable:` (`stable:crash`), only those every
/// repeat met (a play step's `repeat`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailOn {
    pub select: Select,
    /// `new:`: only findings labelled `new` against the run's baseline
    /// (without a baseline every finding is new, so a pull request run
    /// that lost its baseline fails rather than passes).
    pub only_new: bool,
    /// `stable:`: not findings labelled `flaky` (without repeats no
    /// finding is, so a plan that dropped its `repeat` fails rather than
    /// passes).
    pub only_stable: bool,
}

/// What a [`FailOn`] entry selects, `new:` and `stable:` aside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Select {
    Category(Category),
    Severity(Severity),
    /// A crash or hang that did not reproduce when replayed.
    Unconfirmed,
    /// A finding some repeats of its cells met and others did not.
    Flaky,
}

/// What [`FailOn::matches`] reads of a finding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Judged {
    pub category: Category,
    pub severity: Severity,
    /// A crash or hang that did not reproduce when replayed.
    pub unconfirmed: bool,
    /// Not in the run's baseline (every finding, without one).
    pub new: bool,
    /// Labelled `flaky` over its cells' repeats.
    pub flaky: bool,
}

/// The prefix of a [`FailOn`] entry that judges only new findings.
pub const NEW_PREFIX: &str = "new:";
/// The prefix of a [`FailOn`] entry that leaves flaky findings out.
pub const STABLE_PREFIX: &str = "stable:";

impl FailOn {
    /// Every severity, most severe first (the order `Severity` sorts in).
    const SEVERITIES: [Severity; 4] = [
        Severity::Critical,
        Severity::High,
        Severity::Medium,
        Severity::Low,
    ];

    /// An entry that judges every finding, new or known, flaky or stable.
    pub fn of(select: Select) -> FailOn {
        FailOn {
            select,
            only_new: false,
            only_stable: false,
        }
    }

    /// Every name `fail_on` takes without a prefix: the categories, then
    /// the severities, then `unconfirmed` and `flaky`.
    fn plain_names() -> Vec<&'static str> {
        Category::ALL
            .iter()
            .map(|c| c.name())
            .chain(Self::SEVERITIES.iter().map(|s| severity_name(*s)))
            .chain(["unconfirmed", "flaky"])
            .collect()
    }

    /// Every name `fail_on` takes, as [`FailOn::name`] writes it: each
    /// plain name, with `new:`, with `stable:` (but `flaky`), with both.
    pub fn names() -> Vec<String> {
        let plain = Self::plain_names();
        let stable: Vec<String> = plain
            .iter()
            .filter(|n| **n != "flaky")
            .map(|n| format!("{STABLE_PREFIX}{n}"))
            .collect();
        let unprefixed: Vec<String> = plain
            .iter()
            .map(|n| (*n).to_owned())
            .chain(stable)
            .collect();
        let with_new: Vec<String> = unprefixed
            .iter()
            .map(|n| format!("{NEW_PREFIX}{n}"))
            .collect();
        unprefixed.into_iter().chain(with_new).collect()
    }

    /// Reads one name; the error is the help to show (a "did you mean").
    pub fn parse(text: &str) -> Result<FailOn, String> {
        let mut name = text.trim();
        let (mut only_new, mut only_stable) = (false, false);
        loop {
            if let Some(rest) = name.strip_prefix(NEW_PREFIX) {
                only_new = true;
                name = rest.trim();
            } else if let Some(rest) = name.strip_prefix(STABLE_PREFIX) {
                only_stable = true;
                name = rest.trim();
            } else {
                break;
            }
        }
        let select = Self::parse_select(name)?;
        if only_stable && select == Select::Flaky {
            return Err(
                "`stable:flaky` selects nothing: a finding is stable or flaky; use `flaky`"
                    .to_owned(),
            );
        }
        Ok(FailOn {
            select,
            only_new,
            only_stable,
        })
    }

    fn parse_select(text: &str) -> Result<Select, String> {
        match text {
            "unconfirmed" => return Ok(Select::Unconfirmed),
            "flaky" => return Ok(Select::Flaky),
            _ => {}
        }
        if let Some(c) = Category::ALL.iter().find(|c| c.name() == text) {
            return Ok(Select::Category(*c));
        }
        if let Some(s) = Self::SEVERITIES.iter().find(|s| severity_name(**s) == text) {
            return Ok(Select::Severity(*s));
        }
        let names = Self::plain_names();
        let all = super::diagnostic::one_of(&names);
        let prefixes = "`new:` in front judges only findings a --baseline does not know, \
                        `stable:` leaves out findings some repeats did not meet";
        Err(
            match super::diagnostic::did_you_mean(text, names.iter().copied()) {
                Some(hint) => {
                    format!("{hint} (a finding category or a severity: {all}; {prefixes})")
                }
                None => format!("use a finding category or a severity: {all}; {prefixes}"),
            },
        )
    }

    /// The name as written (`crash`, `new:stable:crash`).
    pub fn name(self) -> String {
        let plain = match self.select {
            Select::Category(c) => c.name(),
            Select::Severity(s) => severity_name(s),
            Select::Unconfirmed => "unconfirmed",
            Select::Flaky => "flaky",
        };
        let new = if self.only_new { NEW_PREFIX } else { "" };
        let stable = if self.only_stable { STABLE_PREFIX } else { "" };
        format!("{new}{stable}{plain}")
    }

    /// Whether this entry fails the run on `finding`. A category selects
    /// only what was confirmed: a red check must be a bug someone can
    /// reproduce.
    pub fn matches(self, finding: &Judged) -> bool {
        if (self.only_new && !finding.new) || (self.only_stable && finding.flaky) {
            return false;
        }
        match self.select {
            Select::Category(c) => c == finding.category && !finding.unconfirmed,
            Select::Unconfirmed => finding.unconfirmed,
            Select::Flaky => finding.flaky,
            // `Severity` sorts most severe first.
            Select::Severity(s) => finding.severity <= s,
        }
    }
}

impl Serialize for FailOn {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.name())
    }
}

/// A severity's name as findings write it (`report.json`), so `fail_on`
/// reads the same words.
pub fn severity_name(severity: Severity) -> &'static str {
    match severity {
        Severity::Critical => "critical",
        Severity::High => "high",
        Severity::Medium => "medium",
        Severity::Low => "low",
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Backend {
    pub kind: BackendKind,
    pub url: Option<String>,
    /// Never serialized: secrets stay out of every document.
    #[serde(skip)]
    pub token: Option<String>,
}

/// `[executor]`, checked.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Executor {
    pub kind: ExecutorKind,
    /// ray: the dashboard's URL.
    pub address: Option<String>,
    /// Absolute; `None` (local only): `<state dir>/executor`.
    pub shared_dir: Option<String>,
    /// Cells per job.
    pub batch: u32,
}

/// Cells a job plays unless `[executor] batch` says otherwise: enough to
/// spread a job's start-up over several cells, few enough to keep nodes
/// busy.
pub const DEFAULT_BATCH: u32 = 8;

/// `[game]`, checked: what plays the game ([`GameTarget`]) and how every
/// play of it is held (deadlines, environment, limits, goal, rules).
#[derive(Debug, Clone, PartialEq)]
pub struct Game {
    pub id: String,
    /// Which driver plays it and what it starts.
    pub target: GameTarget,
    pub inputs: Vec<String>,
    pub action_timeout_secs: u64,
    pub stuck_after: u64,
    /// Environment for a stdio game, beyond PATH, HOME, LANG and TMPDIR.
    pub env: BTreeMap<String, String>,
    /// A stdio game's limits; `None` in a field lifts that limit.
    pub limits: GameLimits,
    /// An expression over `obs` and `prev`: the cell's goal holds.
    pub goal: Option<String>,
    /// The plan's `[[invariants]]`: the rules every play of this game is
    /// held to (they enter the build hash's key as the goal does).
    pub invariants: Vec<Invariant>,
}

/// A game's target as the model wrote it before it held a [`GameTarget`]:
/// every driver's keys, flat, with a page's defaults filled in for any
/// game. A plan's hash and a playing step's reuse key are made of these
/// values, so they stay what they were.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FlatTarget {
    pub driver: Driver,
    pub command: Vec<String>,
    pub url: Option<String>,
    pub webdriver_url: Option<String>,
    pub serve: Option<String>,
    pub allow: Vec<String>,
    pub keys: Vec<String>,
    pub viewport: (u32, u32),
    pub probe: Option<String>,
    pub load_timeout_secs: u64,
    /// The keys of a target written beyond those above (a driver's own):
    /// empty for the drivers these fields were made for, which keeps
    /// their hashes.
    pub more: serde_json::Map<String, serde_json::Value>,
}

impl FlatTarget {
    pub fn of(target: &GameTarget) -> FlatTarget {
        let page = target.browser();
        let mut more = match serde_json::to_value(target) {
            Ok(serde_json::Value::Object(written)) => written,
            _ => serde_json::Map::new(),
        };
        for known in [
            "driver",
            "command",
            "url",
            "webdriver_url",
            "serve",
            "allow",
            "keys",
            "viewport",
            "probe",
            "load_timeout",
        ] {
            more.remove(known);
        }
        FlatTarget {
            driver: target.driver(),
            command: target.command().to_vec(),
            url: page.map(|p| p.url.clone()),
            webdriver_url: page.and_then(|p| p.webdriver_url.clone()),
            serve: page.and_then(|p| p.serve.clone()),
            allow: page.map(|p| p.allow.clone()).unwrap_or_default(),
            keys: page.map(|p| p.keys.clone()).unwrap_or_default(),
            viewport: page.map_or(DEFAULT_VIEWPORT, |p| p.viewport),
            probe: page.and_then(|p| p.probe.clone()),
            load_timeout_secs: page.map_or(DEFAULT_LOAD_TIMEOUT, |p| p.load_timeout.as_secs()),
            more,
        }
    }
}

impl Serialize for Game {
    /// The flat shape of [`FlatTarget`], in the order the model's fields
    /// had: the plan's hash is made of it, so a run started by an older
    /// gameplan resumes.
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Written<'a> {
            id: &'a str,
            driver: Driver,
            command: &'a [String],
            url: &'a Option<String>,
            webdriver_url: &'a Option<String>,
            serve: &'a Option<String>,
            allow: &'a [String],
            keys: &'a [String],
            viewport: (u32, u32),
            inputs: &'a [String],
            action_timeout_secs: u64,
            stuck_after: u64,
            env: &'a BTreeMap<String, String>,
            limits: &'a GameLimits,
            probe: &'a Option<String>,
            goal: &'a Option<String>,
            load_timeout_secs: u64,
            invariants: &'a [Invariant],
            #[serde(skip_serializing_if = "serde_json::Map::is_empty")]
            target: &'a serde_json::Map<String, serde_json::Value>,
        }
        let flat = FlatTarget::of(&self.target);
        Written {
            id: &self.id,
            driver: flat.driver,
            command: &flat.command,
            url: &flat.url,
            webdriver_url: &flat.webdriver_url,
            serve: &flat.serve,
            allow: &flat.allow,
            keys: &flat.keys,
            viewport: flat.viewport,
            inputs: &self.inputs,
            action_timeout_secs: self.action_timeout_secs,
            stuck_after: self.stuck_after,
            env: &self.env,
            limits: &self.limits,
            probe: &flat.probe,
            goal: &self.goal,
            load_timeout_secs: flat.load_timeout_secs,
            invariants: &self.invariants,
            target: &flat.more,
        }
        .serialize(serializer)
    }
}

/// A rule the game must keep (`[[invariants]]`; docs/invariants.md).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Invariant {
    /// What the rule says, in words.
    pub name: String,
    /// When the expression must (or must not) hold.
    pub kind: InvariantKind,
    /// A minijinja expression over `obs` and `prev`.
    pub expr: String,
    /// `eventually`: within how many actions of a reset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub within: Option<u64>,
    pub severity: Severity,
    /// Counted in a cell's progress (`milestones`) the first time it holds.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub milestone: bool,
}

/// The four ways an invariant's expression is judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InvariantKind {
    /// Must hold after every action.
    Always,
    /// Must not hold after any action.
    Never,
    /// Must hold within `within` actions of every reset.
    Eventually,
    /// Must hold at least once in the whole playtest.
    Sometimes,
}

impl InvariantKind {
    pub const ALL: [InvariantKind; 4] = [
        InvariantKind::Always,
        InvariantKind::Never,
        InvariantKind::Eventually,
        InvariantKind::Sometimes,
    ];

    /// The plan key that gives it (`always`, …).
    pub fn name(self) -> &'static str {
        match self {
            InvariantKind::Always => "always",
            InvariantKind::Never => "never",
            InvariantKind::Eventually => "eventually",
            InvariantKind::Sometimes => "sometimes",
        }
    }
}

/// `[game] limits`, with the defaults filled in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct GameLimits {
    /// Resident memory of the game's process tree in bytes (default 4 GiB).
    pub memory: Option<u64>,
    /// Address space of each process in bytes (default none).
    pub address_space: Option<u64>,
    /// CPU seconds of each process (default 600).
    pub cpu_seconds: Option<u64>,
    /// Processes of the game's user (default none).
    pub processes: Option<u64>,
    /// Open files (default 1024).
    pub open_files: Option<u64>,
}

impl Default for GameLimits {
    fn default() -> Self {
        GameLimits {
            memory: Some(4 << 30),
            address_space: None,
            cpu_seconds: Some(600),
            processes: None,
            open_files: Some(1024),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct Budget {
    pub max_cents: Option<u64>,
    pub max_actions: Option<u64>,
    pub max_wall_seconds: Option<u64>,
    pub max_model_usd: Option<f64>,
    /// `video = false` turns a browser cell's video off (default on).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub video: Option<bool>,
    /// Frames at most in a browser cell's video.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_video_frames: Option<u64>,
}

/// Frames at most in a browser cell's video, by default: five minutes at
/// two frames a second.
pub const DEFAULT_MAX_VIDEO_FRAMES: u64 = 600;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Persona {
    pub slug: String,
    pub card: Card,
    pub player: Player,
    pub patience: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Card {
    Text(String),
    /// Repo-relative path.
    File(String),
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Player {
    Scripted {
        actions: Vec<String>,
    },
    Random {
        seed: Option<i64>,
    },
    Explorer {
        seed: Option<i64>,
    },
    Llm {
        model: String,
        base_url: Option<String>,
        #[serde(skip)]
        api_key: Option<String>,
        temperature: Option<f64>,
        /// USD per million tokens; `None`: the built-in table's, if any.
        price: Option<crate::token_price::Price>,
        /// A repo-relative prompt template.
        prompt_file: Option<String>,
        /// Seconds one request may take.
        timeout_secs: Option<u64>,
        /// Who moves after a second bad answer (default explorer).
        fallback: Fallback,
        /// Ask for the choice as structured output (default true).
        structured: bool,
        /// "How it felt": seconds and answer tokens (defaults: the player's).
        felt_timeout_secs: Option<u64>,
        felt_max_tokens: Option<u32>,
    },
}

/// Who takes an `llm` player's move after its model answered badly twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Fallback {
    /// The explorer: the action least tried from here (default).
    #[default]
    Explorer,
    /// A seeded random pick.
    Random,
    /// Nobody: the cell ends `bad_answer`.
    Stop,
}

impl Fallback {
    pub const ALL: [(&'static str, Fallback); 3] = [
        ("explorer", Fallback::Explorer),
        ("random", Fallback::Random),
        ("stop", Fallback::Stop),
    ];

    pub fn name(self) -> &'static str {
        match self {
            Fallback::Explorer => "explorer",
            Fallback::Random => "random",
            Fallback::Stop => "stop",
        }
    }
}

impl Player {
    /// Same seed and observations give the same actions, so a play can be reused.
    pub fn is_deterministic(&self) -> bool {
        !matches!(self, Player::Llm { .. })
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Lens {
    pub name: String,
    pub over: LensOver,
    pub judge: Judge,
    /// over = files: globs; over = patches: one path or glob.
    pub sources: Vec<String>,
    /// command: seconds one call may take; llm: one request (`None`: the default).
    pub timeout_secs: Option<u64>,
}

/// How a lens reaches a verdict.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Judge {
    Rule {
        when: String,
    },
    Command {
        program: Program,
    },
    Llm {
        charter: Card,
        model: String,
        base_url: Option<String>,
        #[serde(skip)]
        api_key: Option<String>,
        /// USD per million tokens; `None`: the built-in table's, if any.
        price: Option<crate::token_price::Price>,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Gate {
    pub name: String,
    pub lenses: Vec<String>,
    pub reviewers: Vec<String>,
    /// `only_new`: its lenses over `findings` judge only the findings the
    /// run's baseline does not know. Left out of the model's JSON when
    /// false, so plans without it keep their hash.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub only_new: bool,
    /// `only_stable`: its lenses over `findings` leave out the findings
    /// labelled `flaky`. Left out of the model's JSON when false.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub only_stable: bool,
}

/// A program to run: through `sh -c`, or an argv without a shell.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Program {
    Shell(String),
    Argv(Vec<String>),
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Step {
    pub id: String,
    pub kind: StepKind,
    pub needs: Vec<String>,
    /// Axes in the order written; `"*"` already resolved to the plan's personas / controllers.
    pub matrix: Vec<Axis>,
    pub per: Option<String>,
    pub always: bool,
    pub pool: Option<String>,
    pub timeout_secs: Option<u64>,
    pub retries: u32,
    pub reuse: bool,
    pub env: BTreeMap<String, String>,
    pub params: Params,
}

impl Step {
    /// The settings of kind `K` this step holds, or why not (it is a step
    /// of another kind): how a kind's run side reads its own settings.
    pub fn settings<K: crate::plan::kinds::OwnParams>(&self) -> Result<&K::Params, String> {
        K::own(&self.params).ok_or_else(|| {
            format!(
                "step `{}` is a `{}` step, not a `{}` step",
                self.id,
                self.kind.name(),
                K::KIND.name()
            )
        })
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Axis {
    pub name: String,
    pub values: Vec<String>,
}

impl Plan {
    pub fn step(&self, id: &str) -> Option<&Step> {
        self.steps.iter().find(|s| s.id == id)
    }

    pub fn persona(&self, slug: &str) -> Option<&Persona> {
        self.personas.iter().find(|p| p.slug == slug)
    }
}

/// The smallest and largest window side `game.viewport` takes, in pixels.
pub const VIEWPORT_RANGE: std::ops::RangeInclusive<u64> = 200..=4096;
/// The named keys `game.keys` takes (besides any single character).
pub const KEY_NAMES: [&str; 9] = [
    "Enter",
    "Escape",
    "Tab",
    "Space",
    "Backspace",
    "ArrowUp",
    "ArrowDown",
    "ArrowLeft",
    "ArrowRight",
];

/// The `obs.…` and `prev.…` paths `expr` reads (dotted names, in order,
/// once each), outside string literals.
pub fn observation_paths(expr: &str) -> Vec<String> {
    let chars: Vec<char> = expr.chars().collect();
    let mut paths: Vec<String> = Vec::new();
    let mut quote: Option<char> = None;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if let Some(q) = quote {
            if c == '\\' {
                i += 1;
            } else if c == q {
                quote = None;
            }
            i += 1;
            continue;
        }
        if c == '"' || c == '\'' {
            quote = Some(c);
            i += 1;
            continue;
        }
        let boundary = i == 0 || !(chars[i - 1].is_alphanumeric() || "_.".contains(chars[i - 1]));
        let word: String = chars[i..]
            .iter()
            .take_while(|c| c.is_alphanumeric() || **c == '_' || **c == '.')
            .collect();
        if boundary && (word.starts_with("obs.") || word.starts_with("prev.")) {
            let path = word.trim_end_matches('.').to_owned();
            if !paths.contains(&path) {
                paths.push(path);
            }
        }
        i += word.chars().count().max(1);
    }
    paths
}

#[cfg(test)]
mod tests {
    use super::{
        BrowserGame, Category, FailOn, Game, GameLimits, GameTarget, Judged, Severity,
        severity_name,
    };

    /// A game's model is written flat, field for field as before it held
    /// a target: a plan's hash (and so its resume) does not change.
    #[test]
    fn a_games_model_is_written_in_the_flat_shape_plan_hashes_are_made_of() {
        let mut page = BrowserGame::at("index.html".into());
        page.serve = Some("web".into());
        page.keys = vec!["Space".into()];
        let mut game = Game {
            id: "web".into(),
            target: GameTarget::Browser(page),
            inputs: Vec::new(),
            action_timeout_secs: 10,
            stuck_after: 8,
            env: std::collections::BTreeMap::new(),
            limits: GameLimits::default(),
            goal: None,
            invariants: Vec::new(),
        };
        let limits = serde_json::to_string(&GameLimits::default()).unwrap();
        assert_eq!(
            serde_json::to_string(&game).unwrap(),
            format!(
                r#"{{"id":"web","driver":"webdriver","command":[],"url":"index.html","webdriver_url":null,"serve":"web","allow":[],"keys":["Space"],"viewport":[1280,800],"inputs":[],"action_timeout_secs":10,"stuck_after":8,"env":{{}},"limits":{limits},"probe":null,"goal":null,"load_timeout_secs":30,"invariants":[]}}"#
            )
        );
        game.target = GameTarget::Stdio {
            command: vec!["builtin:maze".into()],
        };
        assert_eq!(
            serde_json::to_string(&game).unwrap(),
            format!(
                r#"{{"id":"web","driver":"stdio","command":["builtin:maze"],"url":null,"webdriver_url":null,"serve":null,"allow":[],"keys":[],"viewport":[1280,800],"inputs":[],"action_timeout_secs":10,"stuck_after":8,"env":{{}},"limits":{limits},"probe":null,"goal":null,"load_timeout_secs":30,"invariants":[]}}"#
            )
        );
    }

    fn judged(category: Category, severity: Severity, unconfirmed: bool, new: bool) -> Judged {
        Judged {
            category,
            severity,
            unconfirmed,
            new,
            flaky: false,
        }
    }

    /// `flaky` selects what some repeats met; `stable:` leaves it out, and
    /// both prefixes read back as written, in either order.
    #[test]
    fn flaky_selects_findings_some_repeats_missed_and_stable_leaves_them_out() {
        let flaky_crash = Judged {
            flaky: true,
            ..judged(Category::Crash, Severity::Critical, false, true)
        };
        let stable_crash = judged(Category::Crash, Severity::Critical, false, true);
        let flaky = FailOn::parse("flaky").unwrap();
        assert!(flaky.matches(&flaky_crash));
        assert!(!flaky.matches(&stable_crash));
        let stable = FailOn::parse("stable:crash").unwrap();
        assert!(!stable.matches(&flaky_crash));
        assert!(stable.matches(&stable_crash));
        assert!(FailOn::parse("crash").unwrap().matches(&flaky_crash));
        let both = FailOn::parse("stable:new:crash").unwrap();
        assert_eq!(both.name(), "new:stable:crash");
        assert_eq!(FailOn::parse(&both.name()), Ok(both));
        for name in FailOn::names() {
            assert_eq!(FailOn::parse(&name).map(FailOn::name), Ok(name));
        }
        assert!(
            FailOn::parse("stable:flaky")
                .unwrap_err()
                .contains("selects nothing")
        );
    }

    #[test]
    fn fail_on_reads_the_severity_names_findings_write() {
        for s in FailOn::SEVERITIES {
            assert_eq!(
                serde_json::to_value(s).unwrap(),
                severity_name(s),
                "report.json and fail_on must name {s:?} alike"
            );
        }
        let high = FailOn::parse("high").unwrap();
        assert!(high.matches(&judged(Category::Crash, Severity::Critical, false, false)));
        assert!(high.matches(&judged(Category::Hang, Severity::High, false, true)));
        assert!(!high.matches(&judged(Category::Error, Severity::Medium, false, true)));
        // A hang that did not reproduce is selected by `unconfirmed`, not `hang`.
        let hang = FailOn::parse("hang").unwrap();
        assert!(hang.matches(&judged(Category::Hang, Severity::High, false, false)));
        assert!(!hang.matches(&judged(Category::Hang, Severity::Low, true, true)));
        let flaky = FailOn::parse("unconfirmed").unwrap();
        assert!(flaky.matches(&judged(Category::Hang, Severity::Low, true, false)));
        assert!(!flaky.matches(&judged(Category::Hang, Severity::High, false, true)));
        assert!(
            FailOn::parse("crsh")
                .unwrap_err()
                .contains("did you mean `crash`?")
        );
    }

    /// `new:` judges only what a baseline does not know, and reads back
    /// as written.
    #[test]
    fn new_in_front_matches_only_new_findings() {
        let new_crash = FailOn::parse("new:crash").unwrap();
        assert!(new_crash.only_new);
        assert_eq!(new_crash.name(), "new:crash");
        assert!(new_crash.matches(&judged(Category::Crash, Severity::Critical, false, true)));
        assert!(!new_crash.matches(&judged(Category::Crash, Severity::Critical, false, false)));
        let crash = FailOn::parse("crash").unwrap();
        assert!(crash.matches(&judged(Category::Crash, Severity::Critical, false, false)));
        assert!(FailOn::names().contains(&"new:hang".to_owned()));
        assert!(
            FailOn::parse("new:crsh")
                .unwrap_err()
                .contains("did you mean `crash`?")
        );
    }

    #[test]
    fn the_paths_an_expression_reads() {
        assert_eq!(
            super::observation_paths(
                "obs.state.board | max <= 2048 and 'obs.x' in obs.text and prev.score < obs.score"
            ),
            ["obs.state.board", "obs.text", "prev.score", "obs.score"]
        );
        assert!(super::observation_paths("true").is_empty());
    }
}

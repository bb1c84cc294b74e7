//! The validated plan: what the engine sees.
//!
//! Everything here has been checked: names are well-formed and unique, every
//! reference (needs, per, persona, controller, lens, gate, reviewer) resolves,
//! paths stay inside the repo, and the step graph has no cycle. Spans are gone;
//! a TOML plan and its YAML twin produce equal models. The model knows nothing
//! of running or money.

use std::collections::BTreeMap;

use serde::Serialize;

pub use super::raw::{BackendKind, Driver, LensKind, LensOver, StepKind};

/// The built-in action controllers (DESIGN §7).
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
    pub game: Option<Game>,
    pub budget: Budget,
    pub pools: BTreeMap<String, u32>,
    pub personas: Vec<Persona>,
    pub lenses: Vec<Lens>,
    pub gates: Vec<Gate>,
    /// False when the plan omits `steps` and gets the default paid pipeline.
    pub explicit_steps: bool,
    /// Steps in file order (or the default pipeline's order), before matrix expansion.
    pub steps: Vec<Step>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Backend {
    pub kind: BackendKind,
    pub url: Option<String>,
    /// Never serialized: secrets stay out of every document.
    #[serde(skip)]
    pub token: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Game {
    pub id: String,
    pub driver: Driver,
    pub command: Vec<String>,
    pub url: Option<String>,
    pub inputs: Vec<String>,
    pub action_timeout_secs: u64,
    pub stuck_after: u64,
    /// Environment for a stdio game, beyond PATH, HOME, LANG and TMPDIR.
    pub env: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct Budget {
    pub max_cents: Option<u64>,
    pub max_actions: Option<u64>,
    pub max_wall_seconds: Option<u64>,
    pub max_model_usd: Option<f64>,
}

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
    },
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
        model: Option<String>,
        base_url: Option<String>,
        #[serde(skip)]
        api_key: Option<String>,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Gate {
    pub name: String,
    pub lenses: Vec<String>,
    pub reviewers: Vec<String>,
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

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Axis {
    pub name: String,
    pub values: Vec<String>,
}

/// A step kind's own settings.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Params {
    Command {
        program: Program,
        inputs: Vec<String>,
        outputs: Vec<String>,
        cwd: Option<String>,
    },
    Play {
        persona: Option<String>,
        controller: Option<Controller>,
        seed: Option<i64>,
    },
    Gate {
        gate: String,
    },
    Simulate {
        games: u64,
        strategies: Vec<String>,
        workers: u64,
        max_steps: u64,
        seed: Option<i64>,
    },
    None,
}

impl Plan {
    pub fn step(&self, id: &str) -> Option<&Step> {
        self.steps.iter().find(|s| s.id == id)
    }

    pub fn persona(&self, slug: &str) -> Option<&Persona> {
        self.personas.iter().find(|p| p.slug == slug)
    }
}

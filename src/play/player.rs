//! The player seam: what every player implements ([`Player`]), what it
//! is shown each turn ([`Turn`], the cell's [`History`]), what it answers
//! and how it fails ([`PlayerError`]), and what it adds to the report at
//! the end. The deterministic players (`players`) and the `llm` player
//! (`llm_player`) both build on it; [`least_tried`] is the explorer's
//! ranking, which the `llm` player falls back on.
//!
//! The trait is asynchronous and object-safe (a boxed future), so a player
//! that waits on a model endpoint implements the same trait as the
//! deterministic ones: given the observation, the history and how many
//! proposals are wanted, it returns proposals. A player that thinks may
//! also pick among proposals itself ([`Player::select`], jev's selector
//! call) and say how the play felt at the end ([`Player::finish`]). Its
//! errors are typed ([`PlayerError`]), so a cell can end on a model that
//! never answers (exit 5), refuses, answers nonsense, or spent its budget,
//! each with its own quit reason.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;

use super::protocol::Observation;
use super::rng::Rng;
use super::trace::QuitReason;
use crate::llm::LlmError;

/// Why a player could not propose.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlayerError {
    /// The player's settings cannot work (an unknown strategy).
    #[error("{0}")]
    Settings(String),
    /// The model behind an `llm` player failed.
    #[error(transparent)]
    Model(#[from] LlmError),
}

impl PlayerError {
    /// How a cell ends on this error, when it ends the play rather than
    /// failing the cell: each model failure has its own end.
    pub fn quit_reason(&self) -> Option<QuitReason> {
        match self {
            PlayerError::Settings(_) => None,
            PlayerError::Model(e) => Some(match e {
                LlmError::Unreachable { .. } => QuitReason::ModelUnreachable,
                LlmError::Refused { .. } => QuitReason::ModelRefused,
                LlmError::BadAnswer(_) => QuitReason::BadAnswer,
                LlmError::Budget { .. } => QuitReason::Budget,
            }),
        }
    }
}

/// How a cell ended, for a player's last word ([`Player::finish`]).
#[derive(Debug, Clone, PartialEq)]
pub struct PlayEnd {
    pub quit: QuitReason,
    pub actions_taken: u64,
    /// The titles of the findings.
    pub findings: Vec<String>,
    /// Why the player ended the play, when it did (its error, redacted).
    pub player_error: Option<String>,
}

/// What a player adds to the cell's report at the end.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PlayerReport {
    /// "How it felt", in the persona's voice.
    pub felt: Option<String>,
    /// Calls, tokens and cost of a model.
    pub model: Option<crate::llm::Usage>,
    /// Why the player ended the play, when it did (the cell fills it in).
    pub quit_detail: Option<String>,
}

/// How a player made its last choice, for the cell's transcript: a
/// model's raw answers and how each was read, and who moved when the
/// player could not (`"explorer"` after two bad answers).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChoiceNotes {
    pub model: Vec<serde_json::Value>,
    pub fallback: Option<&'static str>,
}

/// What [`Player::finish`] returns.
pub type Finished<'a> = Pin<Box<dyn Future<Output = PlayerReport> + Send + 'a>>;

/// What a player answers: proposals, best first. None means the player is
/// done (a script ran out).
pub type Proposals<'a> =
    Pin<Box<dyn Future<Output = Result<Vec<String>, PlayerError>> + Send + 'a>>;

/// What a player is shown each turn.
pub struct Turn<'a> {
    pub observation: &'a Observation,
    /// The sha256 of the observation.
    pub hash: &'a str,
    pub history: &'a History,
    /// How many alternatives the controller wants (1 for `standard` and
    /// each `rune` vote, up to 3 for `jev`); fewer is fine.
    pub wanted: usize,
}

pub trait Player: Send {
    /// Proposes up to `turn.wanted` actions.
    fn propose<'a>(&'a mut self, turn: &'a Turn<'a>) -> Proposals<'a>;

    /// jev's selector: picks one of `proposals` itself (one element), or
    /// `None` to leave it to the controller's deterministic selector.
    fn select<'a>(
        &'a mut self,
        _turn: &'a Turn<'a>,
        _proposals: &'a [String],
    ) -> Option<Proposals<'a>> {
        None
    }

    /// How the last choice was made (taken once per turn; see
    /// [`ChoiceNotes`]).
    fn take_notes(&mut self) -> ChoiceNotes {
        ChoiceNotes::default()
    }

    /// The play is over: what the player adds to the report.
    fn finish<'a>(&'a mut self, _end: &'a PlayEnd) -> Finished<'a> {
        Box::pin(std::future::ready(PlayerReport::default()))
    }
}

/// What happened so far in a cell, across its episodes: the actions taken,
/// how often each action was tried from each observation, and which
/// actions led into a trap. A cell resets the game with the same seed
/// after `stuck`, so the same observation has the same hash in every
/// episode and this memory sends the next episode elsewhere.
#[derive(Debug, Default)]
pub struct History {
    actions: Vec<String>,
    tried: HashMap<String, HashMap<String, u32>>,
    /// (observation, action) pairs that entered a place where nothing
    /// changed for `stuck_after` actions.
    traps: HashSet<(String, String)>,
    /// (observation, action) pairs that left the observation as it was
    /// ("That is already open."): tried again only when nothing else is.
    idle: HashSet<(String, String)>,
    /// Actions that changed nothing from some observation ("look", "wait"
    /// in a parser game): from a new observation, tried after the actions
    /// that never did.
    idle_anywhere: HashSet<String>,
    /// What the game said when it refused the last action.
    refusal: Option<String>,
}

impl History {
    pub fn actions(&self) -> &[String] {
        &self.actions
    }

    /// How many different observations an action was taken from, `current`
    /// counted too when none was.
    pub fn observations_with(&self, current: &str) -> u64 {
        self.tried.len() as u64 + u64::from(!self.tried.contains_key(current))
    }

    /// How many times `action` was taken from the observation `hash`.
    pub fn tried(&self, hash: &str, action: &str) -> u32 {
        self.tried
            .get(hash)
            .and_then(|m| m.get(action))
            .copied()
            .unwrap_or(0)
    }

    pub fn record(&mut self, hash: &str, action: &str) {
        self.refusal = None;
        self.actions.push(action.to_owned());
        let from = match self.tried.get_mut(hash) {
            Some(from) => from,
            None => self.tried.entry(hash.to_owned()).or_default(),
        };
        match from.get_mut(action) {
            Some(n) => *n += 1,
            None => {
                from.insert(action.to_owned(), 1);
            }
        }
    }

    /// Remembers that the game refused the action just recorded, saying `error`.
    pub fn refused(&mut self, error: &str) {
        self.refusal = Some(error.to_owned());
    }

    /// What the game said refusing the last action, if it did.
    pub fn last_refusal(&self) -> Option<&str> {
        self.refusal.as_deref()
    }

    /// Remembers that `action` from the observation `hash` led into a trap.
    pub fn mark_trap(&mut self, hash: &str, action: &str) {
        self.traps.insert((hash.to_owned(), action.to_owned()));
    }

    /// Remembers that `action` from the observation `hash` changed nothing
    /// (or, when `changed`, that it did: a game may answer differently
    /// later, and then the action is worth trying again).
    pub fn mark_outcome(&mut self, hash: &str, action: &str, changed: bool) {
        let key = (hash.to_owned(), action.to_owned());
        if changed {
            self.idle.remove(&key);
        } else {
            self.idle.insert(key);
            self.idle_anywhere.insert(action.to_owned());
        }
    }

    /// Whether `action` from `hash` changed nothing the last time.
    pub fn changed_nothing(&self, hash: &str, action: &str) -> bool {
        !self.idle.is_empty() && self.idle.contains(&(hash.to_owned(), action.to_owned()))
    }

    /// Whether `action` changed nothing from some observation.
    pub fn idle_somewhere(&self, action: &str) -> bool {
        self.idle_anywhere.contains(action)
    }

    /// Whether `action` from `hash` led into a trap before.
    pub fn leads_to_trap(&self, hash: &str, action: &str) -> bool {
        !self.traps.is_empty() && self.traps.contains(&(hash.to_owned(), action.to_owned()))
    }

    /// Forgets everything (a new game in the same worker).
    pub fn clear(&mut self) {
        self.actions.clear();
        self.tried.clear();
        self.traps.clear();
        self.idle.clear();
        self.idle_anywhere.clear();
        self.refusal = None;
    }
}

/// Up to `wanted` of `actions`: those never tried from `hash` first (of
/// them, the ones that never changed nothing anywhere before those that
/// did: a "look" that changed nothing elsewhere is likely idle here too),
/// then those that changed the observation, least tried first; an action
/// that changed nothing from here comes after all of them, and one that
/// led into a trap last of all. Ties are broken by `rng`, so two seeds explore
/// differently (and one seed the same way every time: traces replay).
pub fn least_tried(
    actions: &[String],
    hash: &str,
    history: &History,
    wanted: usize,
    rng: &mut Rng,
) -> Vec<String> {
    let mut ranked: Vec<(bool, bool, u32, bool, u64, &String)> = actions
        .iter()
        .map(|a| {
            (
                history.leads_to_trap(hash, a),
                history.changed_nothing(hash, a),
                history.tried(hash, a),
                history.idle_somewhere(a),
                rng.next_u64(),
                a,
            )
        })
        .collect();
    ranked.sort_unstable();
    let mut picked: Vec<String> = Vec::with_capacity(wanted.max(1));
    for (_, _, _, _, _, action) in ranked {
        if picked.len() >= wanted.max(1) {
            break;
        }
        if !picked.contains(action) {
            picked.push(action.clone());
        }
    }
    picked
}

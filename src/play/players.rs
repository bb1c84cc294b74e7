//! Players: who proposes the next action.
//!
//! Owns the [`Player`] trait and the deterministic players `scripted`,
//! `random` (seeded) and `explorer` (least tried from this observation,
//! seeded ties). A controller (`controllers`) asks a player for proposals
//! and picks one; the player never sees the game process.
//!
//! The trait is asynchronous and object-safe (a boxed future), so a player
//! that waits on a model endpoint (the `llm` player, `llm_player`)
//! implements the same trait as the ones here: given the observation, the
//! history and how many proposals are wanted, it returns proposals. A
//! player that thinks may also pick among proposals itself
//! ([`Player::select`], jev's selector call) and say how the play felt at
//! the end ([`Player::finish`]). Its errors are typed ([`PlayerError`]), so
//! a cell can end on a model that never answers (exit 5), refuses, answers
//! nonsense, or spent its budget, each with its own quit reason.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;

use super::llm_player::{LlmPlayer, LlmSpec};
use super::protocol::Observation;
use super::rng::Rng;
use super::trace::QuitReason;
use crate::llm::LlmError;

/// What a player is, as configured (the cell's seed seeds it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlayerSpec {
    /// Plays these actions in order, then stops.
    Scripted { actions: Vec<String> },
    /// Picks uniformly among the listed actions.
    Random,
    /// Picks an action least tried from the current observation.
    Explorer,
    /// Asks a chat model, in the persona's voice (`llm_player`).
    Llm(Box<LlmSpec>),
}

impl PlayerSpec {
    pub fn kind(&self) -> &'static str {
        match self {
            PlayerSpec::Scripted { .. } => "scripted",
            PlayerSpec::Random => "random",
            PlayerSpec::Explorer => "explorer",
            PlayerSpec::Llm(_) => "llm",
        }
    }

    /// Whether a cell resets the game after a `stuck` finding and plays on.
    /// `random`, `explorer` and `llm` do (they search); a script is a
    /// script: it plays on as written after `stuck`, and the cell ends when
    /// it does.
    pub fn resets_after_stuck(&self) -> bool {
        !matches!(self, PlayerSpec::Scripted { .. })
    }

    /// Whether gameplan, after `stuck_after` unchanged observations, tries
    /// the offered actions this player did not, before it says `stuck`
    /// (docs/play.md, "Stuck detection"). Not amid a script: a script
    /// plays as written, so a `scripted` place is `stuck` only when the
    /// script itself tried every offered action there.
    pub fn lets_gameplan_try_ways_out(&self) -> bool {
        !matches!(self, PlayerSpec::Scripted { .. })
    }

    /// The player, seeded by the cell's `seed`.
    pub fn build(&self, seed: i64) -> Box<dyn Player> {
        match self {
            PlayerSpec::Scripted { actions } => Box::new(Scripted {
                actions: actions.clone(),
                next: 0,
            }),
            PlayerSpec::Random => Box::new(RandomPlayer {
                rng: Rng::new(seed, "player"),
            }),
            PlayerSpec::Explorer => Box::new(Explorer {
                rng: Rng::new(seed, "player"),
            }),
            PlayerSpec::Llm(spec) => Box::new(LlmPlayer::new(spec, seed)),
        }
    }
}

/// Players by name and from a plan: the one mapping `gameplan play`, a
/// simulation's `strategies` and a plan's personas all go through.
impl PlayerSpec {
    /// The names [`PlayerSpec::named`] knows.
    pub const NAMES: &'static str = "scripted, random, explorer";
    /// The names [`PlayerSpec::strategy`] knows.
    pub const STRATEGIES: &'static str = "random, explorer";

    /// The player called `name`; a `scripted` one plays `actions`.
    pub fn named(name: &str, actions: &[String]) -> Option<PlayerSpec> {
        match name {
            "scripted" => Some(PlayerSpec::Scripted {
                actions: actions.to_vec(),
            }),
            "random" => Some(PlayerSpec::Random),
            "explorer" => Some(PlayerSpec::Explorer),
            _ => None,
        }
    }

    /// A simulation's strategy: a player that needs no script.
    pub fn strategy(name: &str) -> Result<PlayerSpec, PlayerError> {
        PlayerSpec::named(name, &[])
            .filter(|p| !matches!(p, PlayerSpec::Scripted { .. }))
            .ok_or_else(|| {
                PlayerError::Settings(format!(
                    "unknown strategy `{name}` ({})",
                    PlayerSpec::STRATEGIES
                ))
            })
    }

    /// The player of a plan's persona; `None` for an `llm` player, which
    /// needs the persona's card, the budget and the plan's secrets
    /// (`steps::play` builds its [`LlmSpec`]).
    pub fn of(player: &crate::plan::model::Player) -> Option<PlayerSpec> {
        use crate::plan::model::Player;
        match player {
            Player::Scripted { actions } => PlayerSpec::named("scripted", actions),
            Player::Random { .. } => PlayerSpec::named("random", &[]),
            Player::Explorer { .. } => PlayerSpec::named("explorer", &[]),
            Player::Llm { .. } => None,
        }
    }
}

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

struct Scripted {
    actions: Vec<String>,
    next: usize,
}

impl Player for Scripted {
    fn propose<'a>(&'a mut self, _turn: &'a Turn<'a>) -> Proposals<'a> {
        let proposal = self.actions.get(self.next).cloned();
        self.next += 1;
        Box::pin(std::future::ready(Ok(proposal.into_iter().collect())))
    }
}

struct RandomPlayer {
    rng: Rng,
}

impl Player for RandomPlayer {
    fn propose<'a>(&'a mut self, turn: &'a Turn<'a>) -> Proposals<'a> {
        let actions = &turn.observation.actions;
        let proposals = if turn.wanted <= 1 || actions.len() <= 1 {
            actions
                .get(self.rng.below(actions.len()))
                .cloned()
                .into_iter()
                .collect()
        } else {
            // Distinct picks: a partial Fisher–Yates shuffle.
            let mut order: Vec<usize> = (0..actions.len()).collect();
            let take = turn.wanted.min(order.len());
            for i in 0..take {
                let j = i + self.rng.below(order.len() - i);
                order.swap(i, j);
            }
            order[..take].iter().map(|&i| actions[i].clone()).collect()
        };
        Box::pin(std::future::ready(Ok(proposals)))
    }
}

struct Explorer {
    rng: Rng,
}

impl Player for Explorer {
    fn propose<'a>(&'a mut self, turn: &'a Turn<'a>) -> Proposals<'a> {
        let proposals = least_tried(
            &turn.observation.actions,
            turn.hash,
            turn.history,
            turn.wanted,
            &mut self.rng,
        );
        Box::pin(std::future::ready(Ok(proposals)))
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 15 item 10: one mapping, whichever way a player is named.
    #[test]
    fn a_player_is_found_by_its_own_name_and_a_strategy_needs_no_script() {
        let scripted = PlayerSpec::Scripted {
            actions: vec!["look".into()],
        };
        for spec in [scripted, PlayerSpec::Random, PlayerSpec::Explorer] {
            let actions = match &spec {
                PlayerSpec::Scripted { actions } => actions.clone(),
                _ => Vec::new(),
            };
            assert_eq!(PlayerSpec::named(spec.kind(), &actions), Some(spec.clone()));
            assert!(PlayerSpec::NAMES.contains(spec.kind()));
        }
        assert_eq!(PlayerSpec::named("llm", &[]), None);
        assert_eq!(
            PlayerSpec::strategy("explorer").ok(),
            Some(PlayerSpec::Explorer)
        );
        let refused = PlayerSpec::strategy("scripted").expect_err("needs a script");
        assert_eq!(
            refused.to_string(),
            "unknown strategy `scripted` (random, explorer)"
        );
        assert_eq!(
            PlayerSpec::of(&crate::plan::model::Player::Random { seed: Some(3) }),
            Some(PlayerSpec::Random)
        );
    }

    fn observation(actions: &[&str]) -> Observation {
        Observation {
            text: String::new(),
            actions: actions.iter().map(|a| (*a).to_owned()).collect(),
            state: serde_json::Value::Null,
            score: 0.0,
        }
    }

    fn ask(
        player: &mut dyn Player,
        obs: &Observation,
        history: &History,
        wanted: usize,
    ) -> Vec<String> {
        let turn = Turn {
            observation: obs,
            hash: "h",
            history,
            wanted,
        };
        futures_lite(player.propose(&turn))
    }

    /// The players here answer at once; no runtime needed.
    fn futures_lite(future: Proposals<'_>) -> Vec<String> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        runtime.block_on(future).expect("proposals")
    }

    #[test]
    fn explorer_tries_every_action_before_repeating_one() {
        let obs = observation(&["n", "s", "e", "w"]);
        let mut history = History::default();
        let mut player = PlayerSpec::Explorer.build(3);
        let mut seen = Vec::new();
        for _ in 0..4 {
            let action = ask(player.as_mut(), &obs, &history, 1).remove(0);
            history.record("h", &action);
            seen.push(action);
        }
        seen.sort();
        assert_eq!(seen, ["e", "n", "s", "w"]);
    }

    #[test]
    fn explorer_tries_what_changed_nothing_again_only_when_nothing_else_is_left() {
        let obs = observation(&["open door", "look", "north"]);
        let mut history = History::default();
        // `open door` was tried once and changed nothing ("already open");
        // `look` was tried twice and changed the observation each time.
        history.record("h", "open door");
        history.mark_outcome("h", "open door", false);
        for _ in 0..2 {
            history.record("h", "look");
            history.mark_outcome("h", "look", true);
        }
        for seed in 0..20 {
            let mut player = PlayerSpec::Explorer.build(seed);
            let ranked = ask(player.as_mut(), &obs, &history, 3);
            assert_eq!(ranked, ["north", "look", "open door"], "seed {seed}");
        }
        // Once it changes something, it is worth trying like any other.
        history.mark_outcome("h", "open door", true);
        let mut player = PlayerSpec::Explorer.build(1);
        assert_eq!(ask(player.as_mut(), &obs, &history, 3)[0], "north");
        assert_eq!(ask(player.as_mut(), &obs, &history, 3)[1], "open door");
    }

    #[test]
    fn explorer_takes_a_way_into_a_trap_last() {
        let obs = observation(&["n", "s"]);
        let mut history = History::default();
        history.record("h", "s");
        history.mark_trap("h", "n");
        let mut player = PlayerSpec::Explorer.build(3);
        assert_eq!(ask(player.as_mut(), &obs, &history, 1), ["s"]);
        assert_eq!(ask(player.as_mut(), &obs, &history, 2), ["s", "n"]);
    }

    #[test]
    fn random_is_seeded_and_scripted_runs_out() {
        let obs = observation(&["a", "b", "c", "d", "e"]);
        let history = History::default();
        let run = |seed| {
            let mut p = PlayerSpec::Random.build(seed);
            (0..20)
                .map(|_| ask(p.as_mut(), &obs, &history, 1).remove(0))
                .collect::<Vec<_>>()
        };
        assert_eq!(run(1), run(1));
        assert_ne!(run(1), run(2));
        let mut p = PlayerSpec::Random.build(1);
        let three = ask(p.as_mut(), &obs, &history, 3);
        assert_eq!(three.len(), 3);
        assert!(
            three
                .iter()
                .all(|a| !three.iter().filter(|b| *b == a).skip(1).any(|_| true))
        );

        let mut s = PlayerSpec::Scripted {
            actions: vec!["x".into()],
        }
        .build(0);
        assert_eq!(ask(s.as_mut(), &obs, &history, 1), ["x"]);
        assert!(ask(s.as_mut(), &obs, &history, 1).is_empty());
    }
}

//! Players: who proposes the next action, as configured ([`PlayerSpec`]),
//! and the deterministic players `scripted`, `random` (seeded) and
//! `explorer` (least tried from this observation, seeded ties). What every
//! player implements is the seam in `player`; the `llm` player
//! (`llm_player`) implements it too. A controller (`controllers`) asks a
//! player for proposals and picks one; the player never sees the game
//! process.

use super::llm_player::{LlmPlayer, LlmSpec};
use super::player::{Player, PlayerError, Proposals, Turn, least_tried};
use super::rng::Rng;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::play::player::History;
    use crate::play::protocol::Observation;

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

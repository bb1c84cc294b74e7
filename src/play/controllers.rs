//! Controllers: how a player's proposals become the one action taken.
//!
//! Owns `standard` (the player picks one), `jev` (the player proposes up to
//! three alternatives; a separate selector picks one) and `rune` (three
//! independent proposals; majority vote). jev's selector is the player's
//! own when it has one (an `llm` player asks its model in a separate call,
//! when there are two or more alternatives to choose among); otherwise it
//! is deterministic: the alternative least tried from the current
//! observation, one that led into a trap last, seeded ties, so a `jev`
//! cell replays from its seed. That
//! selector draws from its own random stream, apart from the player's.
//! Every call a player makes (proposals, votes, the selection) is its own,
//! so an `llm` player counts each against its budget.

use super::player::{History, Player, PlayerError, Turn};
use super::protocol::Observation;
use super::rng::Rng;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ControllerKind {
    Standard,
    Jev,
    Rune,
}

impl ControllerKind {
    pub fn name(self) -> &'static str {
        match self {
            ControllerKind::Standard => "standard",
            ControllerKind::Jev => "jev",
            ControllerKind::Rune => "rune",
        }
    }
}

impl From<crate::plan::model::Controller> for ControllerKind {
    fn from(c: crate::plan::model::Controller) -> Self {
        match c {
            crate::plan::model::Controller::Standard => ControllerKind::Standard,
            crate::plan::model::Controller::Jev => ControllerKind::Jev,
            crate::plan::model::Controller::Rune => ControllerKind::Rune,
        }
    }
}

/// The controller of one cell.
pub struct Controller {
    kind: ControllerKind,
    rng: Rng,
}

/// What a controller decided, with what it was offered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    /// `None`: the player has nothing more to propose.
    pub action: Option<String>,
    /// Every proposal (or vote) it chose among, in order.
    pub proposals: Vec<String>,
}

impl Controller {
    pub fn new(kind: ControllerKind, seed: i64) -> Self {
        Controller {
            kind,
            rng: Rng::new(seed, "selector"),
        }
    }

    pub fn kind(&self) -> ControllerKind {
        self.kind
    }

    /// Asks `player` and picks the action to take.
    pub async fn choose(
        &mut self,
        player: &mut dyn Player,
        observation: &Observation,
        hash: &str,
        history: &History,
    ) -> Result<Choice, PlayerError> {
        let turn = |wanted| Turn {
            observation,
            hash,
            history,
            wanted,
        };
        match self.kind {
            ControllerKind::Standard => {
                let proposals = player.propose(&turn(1)).await?;
                Ok(Choice {
                    action: proposals.first().cloned(),
                    proposals,
                })
            }
            ControllerKind::Jev => {
                let asked = turn(3);
                let mut proposals = player.propose(&asked).await?;
                proposals.truncate(3);
                let by_player = if proposals.len() > 1 {
                    player.select(&asked, &proposals)
                } else {
                    None
                };
                let action = match by_player {
                    Some(selected) => selected.await?.into_iter().next(),
                    None => self.select(&proposals, hash, history),
                };
                Ok(Choice {
                    action,
                    proposals: proposals.clone(),
                })
            }
            ControllerKind::Rune => {
                let mut votes = Vec::with_capacity(3);
                for _ in 0..3 {
                    if let Some(vote) = player.propose(&turn(1)).await?.into_iter().next() {
                        votes.push(vote);
                    }
                }
                let action = self.majority(&votes);
                Ok(Choice {
                    action,
                    proposals: votes,
                })
            }
        }
    }

    /// jev's selector: the alternative least tried from here, one that led
    /// into a trap last (as the explorer ranks them); seeded ties.
    fn select(&mut self, proposals: &[String], hash: &str, history: &History) -> Option<String> {
        let rank = |p: &String| (history.leads_to_trap(hash, p), history.tried(hash, p));
        let fewest = proposals.iter().map(rank).min()?;
        let tied: Vec<&String> = proposals.iter().filter(|p| rank(p) == fewest).collect();
        Some(tied[self.rng.below(tied.len())].clone())
    }

    /// rune's vote: the most proposed action; seeded ties.
    fn majority(&mut self, votes: &[String]) -> Option<String> {
        let mut counted: Vec<(&String, usize)> = Vec::with_capacity(votes.len());
        for vote in votes {
            match counted.iter_mut().find(|(v, _)| *v == vote) {
                Some((_, n)) => *n += 1,
                None => counted.push((vote, 1)),
            }
        }
        let most = counted.iter().map(|(_, n)| *n).max()?;
        let tied: Vec<&String> = counted
            .iter()
            .filter(|(_, n)| *n == most)
            .map(|(v, _)| *v)
            .collect();
        Some(tied[self.rng.below(tied.len())].clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rune_takes_the_majority_and_jev_the_least_tried() {
        let mut c = Controller::new(ControllerKind::Rune, 1);
        let votes: Vec<String> = ["a", "b", "b"].iter().map(|s| (*s).to_owned()).collect();
        assert_eq!(c.majority(&votes).as_deref(), Some("b"));
        assert_eq!(c.majority(&[]), None);

        let mut history = History::default();
        history.record("h", "a");
        history.record("h", "b");
        let mut c = Controller::new(ControllerKind::Jev, 1);
        let proposals: Vec<String> = ["a", "c", "b"].iter().map(|s| (*s).to_owned()).collect();
        assert_eq!(c.select(&proposals, "h", &history).as_deref(), Some("c"));
    }
}

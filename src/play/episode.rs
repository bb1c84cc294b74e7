//! One play of a game: from `reset` to its end, every action recorded,
//! and the resets that start a new episode in the same play.
//!
//! Owns turning the driver's answers into what a play keeps: the trace steps
//! and resets, the history players read, and the findings (crash, hang,
//! error, refused, stuck, and a page's `console` errors) with their evidence.
//! Used alike by a cell, a simulated game, replay and shrink, so a finding
//! means the same everywhere. It does not choose actions (players,
//! controllers), decide when to reset (the cell), or own the process's
//! lifetime (the caller starts and ends it).
//!
//! Across a [`Episode::reset`] the history and the findings stay (the
//! explorer remembers what it tried; one bug met twice is one finding);
//! the stuck count, the way into the trap and the evidence's last actions
//! start again.
//!
//! # Stuck means no way out
//!
//! `stuck_after` unchanged observations are a question, not a finding:
//! from then on [`Episode::way_out_to_try`] names the offered actions not
//! yet tried from this observation, one at a time, and the caller plays
//! each as gameplan's own (an action that changes nothing leaves the game
//! where it was, so the next is tried from the same place without a
//! replay). One that changes the observation is a way out: no finding.
//! Only when every offered action was tried from here and none changed
//! anything is the place `stuck`. A play whose bounds run out first gets a
//! note ([`Episode::untried_note`]), not a finding: a player that did not
//! find the way out is no bug of the game.
//!
//! # Goals
//!
//! After each action the episode notes whether the goal was reached (a
//! `goal` event, or `game.goal` holding: `goal`), for the play's progress;
//! `game.goal` holding ends the episode as `done` would
//! ([`Stepped::Acted`]'s `goal`), while a game that sends `goal` events
//! says itself when it is `done` (the bridge's contract: a game may send
//! one per coin).

use super::driver::{Driver, Failure, Seen};
use super::findings::{Category, Evidence, FindingSet, Spotted, last_actions, normalize};
use super::goal::Goal;
use super::invariants::Invariants;
use super::player::History;
use super::protocol::{Event, EventKind, Op};
use super::trace::{TraceReset, TraceStep};
use crate::text::cut;

/// What one action did.
#[derive(Debug, Clone, PartialEq)]
pub enum Stepped {
    /// The game answered; the new observation is [`Episode::current`].
    Acted {
        reward: f64,
        /// The game said `done`.
        done: bool,
        /// `game.goal` holds: the episode ends as it does on `done`. (A
        /// `goal` event reaches the goal too, for the play's progress, but
        /// the game that sends it says itself whether it is `done`: a game
        /// may send one per coin.)
        goal: bool,
        events: Vec<Event>,
    },
    /// The game answered `ok: false`; the observation is unchanged.
    Refused(String),
    /// The game died, hung or broke the protocol: the episode is over.
    Failed(Failure),
}

/// The state of an episode between actions.
pub struct Episode {
    pub current: Seen,
    pub history: History,
    pub findings: FindingSet,
    pub steps: Vec<TraceStep>,
    /// The resets after the first, where they happened.
    pub resets: Vec<TraceReset>,
    persona: String,
    controller: String,
    stuck_after: u64,
    unchanged: u64,
    /// Whether the place the episode is at was declared `stuck` (until
    /// the observation changes).
    stuck: bool,
    /// `game.goal`, when the game has one.
    goal: Option<Goal>,
    /// The action (every episode counted) after which the goal was first reached.
    goal_step: Option<u64>,
    /// The plan's invariants, judged after every action.
    invariants: Invariants,
    /// The highest score seen.
    max_score: f64,
    /// What the play should say that is no finding (a goal that cannot be
    /// evaluated), each once.
    pub notes: Vec<String>,
    /// The last action that changed the observation, and where from: the
    /// way into the place that turned out to be a trap.
    entered: Option<(String, String)>,
    /// Where this episode's actions start in the history.
    since_reset: usize,
    /// Whether to keep trace steps (a simulated game that passes needs none).
    keep_steps: bool,
}

impl Episode {
    /// An episode that starts at `first` (the observation `reset` gave);
    /// errors the page logged while it opened are findings at step 0.
    pub fn new(first: Seen, persona: &str, controller: &str, stuck_after: u64) -> Self {
        let mut episode = Episode {
            current: first,
            history: History::default(),
            findings: FindingSet::default(),
            steps: Vec::new(),
            resets: Vec::new(),
            persona: persona.to_owned(),
            controller: controller.to_owned(),
            stuck_after,
            unchanged: 0,
            stuck: false,
            goal: None,
            goal_step: None,
            invariants: Invariants::default(),
            max_score: f64::NEG_INFINITY,
            notes: Vec::new(),
            entered: None,
            since_reset: 0,
            keep_steps: true,
        };
        episode.max_score = episode.current.observation.score;
        episode.spot_console(0, "", None);
        episode
    }

    /// Starts over at `first`, keeping the allocations (simulate).
    pub fn restart(&mut self, first: Seen, persona: &str) {
        self.current = first;
        self.history.clear();
        self.findings = FindingSet::default();
        self.steps.clear();
        self.resets.clear();
        persona.clone_into(&mut self.persona);
        self.unchanged = 0;
        self.stuck = false;
        self.entered = None;
        self.since_reset = 0;
        self.goal_step = None;
        self.max_score = self.current.observation.score;
        self.notes.clear();
    }

    /// Evaluates `goal` (`game.goal`) after every action from now on.
    pub fn set_goal(&mut self, goal: Option<&str>) {
        self.goal = goal.map(Goal::new);
    }

    /// Judges `invariants` after every action from now on.
    pub fn set_invariants(&mut self, invariants: &[crate::plan::model::Invariant]) {
        self.invariants = Invariants::new(invariants);
    }

    /// The play's invariants: their milestones and `sometimes` so far.
    pub fn invariants(&self) -> &Invariants {
        &self.invariants
    }

    /// The action (every episode counted) after which the goal was first
    /// reached, if it was.
    pub fn goal_step(&self) -> Option<u64> {
        self.goal_step
    }

    /// The highest score any observation of the play showed.
    pub fn max_score(&self) -> f64 {
        self.max_score
    }

    /// How many different observations the play saw: every observation an
    /// action was taken from, and the current one (exact for a play
    /// without resets, a simulated game's; a cell counts its own).
    pub fn distinct_observations(&self) -> u64 {
        self.history.observations_with(&self.current.hash)
    }

    /// How many actions were taken, in all episodes.
    pub fn step(&self) -> u64 {
        self.history.actions().len() as u64
    }

    /// The actions of this episode (since the last reset).
    pub fn episode_actions(&self) -> &[String] {
        &self.history.actions()[self.since_reset..]
    }

    /// Whether this episode was declared `stuck` (the cell then resets).
    pub fn is_stuck(&self) -> bool {
        self.stuck
    }

    /// Resets `game` with `seed`: a new episode from its first observation,
    /// the history and findings kept. A failure (or a refusal, which breaks
    /// the protocol) is a finding and ends the play.
    pub async fn reset(&mut self, game: &mut impl Driver, seed: i64) -> Result<(), Failure> {
        let after = self.step();
        let answered = match game.reset(seed).await {
            Ok(Ok(first)) => Ok(first),
            Ok(Err(refusal)) => Err(refused_opening(game, "reset", &refusal.error)),
            Err(failure) => Err(failure),
        };
        match answered {
            Ok(first) => {
                if self.keep_steps {
                    self.resets.push(TraceReset {
                        after,
                        seed,
                        obs: Some(first.hash.clone()),
                    });
                }
                self.current = first;
                self.max_score = self.max_score.max(self.current.observation.score);
                self.unchanged = 0;
                self.stuck = false;
                self.entered = None;
                self.since_reset = self.history.actions().len();
                self.invariants.reset();
                self.spot_console(after, "", None);
                Ok(())
            }
            Err(failure) => {
                let spotted = failure_finding(
                    &failure,
                    after,
                    &self.current.hash,
                    None,
                    self.episode_actions(),
                );
                self.spot(spotted);
                if self.keep_steps {
                    self.resets.push(TraceReset {
                        after,
                        seed,
                        obs: None,
                    });
                }
                Err(failure)
            }
        }
    }

    /// Labels the step just taken in the trace with who took it (see
    /// `TraceStep::by`).
    pub fn label_last_step(&mut self, by: &str) {
        if let Some(step) = self.steps.last_mut() {
            step.by = Some(by.to_owned());
        }
    }

    /// Takes `action` in `game` and records what happened.
    pub async fn act(&mut self, game: &mut impl Driver, action: &str) -> Stepped {
        let from = std::mem::take(&mut self.current.hash);
        self.history.record(&from, action);
        let step = self.step();
        let listed = self.current.observation.actions.iter().any(|a| a == action);
        match game.act(action).await {
            Ok(Ok(acted)) => {
                let changed = acted.seen.hash != from;
                // The goal and the invariants read the observation before
                // this one as `prev`.
                let before = if self.goal.is_some() || !self.invariants.is_empty() {
                    Some(std::mem::replace(&mut self.current, acted.seen))
                } else {
                    self.current = acted.seen;
                    None
                };
                self.max_score = self.max_score.max(self.current.observation.score);
                self.spot_console(step, &from, Some(action));
                self.spot_events(&acted.events, step, &from, action);
                if self.keep_steps {
                    self.steps.push(TraceStep {
                        step,
                        action: action.to_owned(),
                        obs: Some(self.current.hash.clone()),
                        events: acted.events.clone(),
                        refused: None,
                        screenshot: self.current.screenshot.clone(),
                        by: None,
                    });
                }
                self.history.mark_outcome(&from, action, changed);
                self.count_change(changed, action, &from);
                let goal = self.goal_holds(before.as_ref().map(|b| &b.observation));
                self.judge_invariants(before.as_ref(), step, action);
                let event = acted.events.iter().any(|e| e.kind == EventKind::Goal);
                if (goal || event) && self.goal_step.is_none() {
                    self.goal_step = Some(step);
                }
                Stepped::Acted {
                    reward: acted.reward,
                    done: acted.done,
                    goal,
                    events: acted.events,
                }
            }
            Ok(Err(refusal)) => {
                if listed {
                    self.spot(Spotted {
                        category: Category::Refused,
                        title: format!(
                            "`{action}` was offered, then refused: {}",
                            cut(&refusal.error, 120)
                        ),
                        location: format!("{action}\n{}", refusal.error),
                        evidence: self.evidence(step, &from, Some(refusal.error.clone()), None),
                    });
                }
                if self.keep_steps {
                    self.steps.push(TraceStep {
                        step,
                        action: action.to_owned(),
                        obs: Some(from.clone()),
                        events: Vec::new(),
                        refused: Some(refusal.error.clone()),
                        screenshot: None,
                        by: None,
                    });
                }
                self.current.hash.clone_from(&from);
                self.history.refused(&refusal.error);
                self.history.mark_outcome(&from, action, false);
                self.count_change(false, action, &from);
                Stepped::Refused(refusal.error)
            }
            Err(failure) => {
                let mut spotted =
                    failure_finding(&failure, step, &from, Some(action), self.episode_actions());
                // What the page looked like, and where it was, when the
                // action that failed was taken.
                spotted
                    .evidence
                    .screenshot
                    .clone_from(&self.current.screenshot);
                spotted.evidence.page.clone_from(&self.current.url);
                self.spot(spotted);
                if self.keep_steps {
                    self.steps.push(TraceStep {
                        step,
                        action: action.to_owned(),
                        obs: None,
                        events: Vec::new(),
                        refused: None,
                        screenshot: None,
                        by: None,
                    });
                }
                self.current.hash = from;
                Stepped::Failed(failure)
            }
        }
    }

    /// An `error` finding per `error` or `crash` event of the action.
    fn spot_events(&mut self, events: &[Event], step: u64, from: &str, action: &str) {
        for event in events {
            if matches!(event.kind, EventKind::Error | EventKind::Crash) {
                self.spot(Spotted {
                    category: Category::Error,
                    title: format!(
                        "The game reported {} `{}` after `{action}`",
                        if event.kind == EventKind::Crash {
                            "a crash"
                        } else {
                            "an error"
                        },
                        cut(&event.message, 120)
                    ),
                    location: event.message.clone(),
                    evidence: self.evidence(step, from, Some(event.message.clone()), None),
                });
            }
        }
    }

    fn count_change(&mut self, changed: bool, action: &str, from: &str) {
        if changed {
            self.unchanged = 0;
            self.stuck = false;
            // The strings of the last entry are reused: this runs on
            // nearly every action.
            let (hash, taken) = self.entered.get_or_insert_with(Default::default);
            hash.clear();
            hash.push_str(from);
            taken.clear();
            taken.push_str(action);
            return;
        }
        self.unchanged += 1;
    }

    /// Whether `game.goal` holds after the action just taken (an
    /// expression that cannot be evaluated is a note, once, and counts as
    /// not holding).
    fn goal_holds(&mut self, prev: Option<&super::protocol::Observation>) -> bool {
        let since = self.episode_actions().len() as u64;
        let Some(goal) = self.goal.as_mut() else {
            return false;
        };
        let prev = prev.map(|p| (p, since.saturating_sub(1)));
        match goal.holds(&self.current.observation, since, prev) {
            Ok(holds) => holds,
            Err(note) => {
                self.notes.push(note);
                false
            }
        }
    }

    /// An `invariant` finding per rule the action just taken broke,
    /// fingerprinted by the rule's name (one broken rule is one finding
    /// wherever it breaks), with the rule's severity.
    fn judge_invariants(&mut self, before: Option<&Seen>, step: u64, action: &str) {
        if self.invariants.is_empty() {
            return;
        }
        let since = self.episode_actions().len() as u64;
        let (broken, mut notes) = self.invariants.check(
            &self.current.observation,
            since,
            before.map(|b| &b.observation),
            step,
        );
        self.notes.append(&mut notes);
        let from = before.map_or("", |b| b.hash.as_str());
        for broke in broken {
            let rule = &broke.invariant;
            let title = match rule.kind {
                crate::plan::model::InvariantKind::Eventually => format!(
                    "Invariant `{}` did not hold within {} actions of a reset",
                    rule.name,
                    rule.within.unwrap_or(1)
                ),
                _ => format!("Invariant `{}` broken after `{action}`", rule.name),
            };
            let spotted = Spotted {
                category: Category::Invariant,
                title,
                location: format!(
                    "invariant
{}",
                    rule.name
                ),
                evidence: self.evidence(step, from, Some(broke.detail), None),
            };
            self.findings
                .add_rated(spotted, rule.severity, &self.persona, &self.controller);
        }
    }

    /// Whether nothing changed for `stuck_after` actions at the current
    /// observation (and it was not declared `stuck` yet).
    fn stuck_question(&self) -> bool {
        self.stuck_after > 0 && self.unchanged >= self.stuck_after && !self.stuck
    }

    /// The offered actions of the current observation never tried from it.
    fn untried(&self) -> impl Iterator<Item = &String> {
        let hash = &self.current.hash;
        self.current
            .observation
            .actions
            .iter()
            .filter(move |a| self.history.tried(hash, a) == 0)
    }

    /// After `stuck_after` unchanged observations: the offered action
    /// gameplan tries next, the first not yet tried from here (see the
    /// module doc). `None` when there is nothing to try: then either every
    /// offered action was tried from here and none changed anything (the
    /// place is declared `stuck`: [`Episode::is_stuck`]), or one of them
    /// changed the observation before (a way out is known: no finding).
    pub fn way_out_to_try(&mut self) -> Option<String> {
        if !self.stuck_question() {
            return None;
        }
        if let Some(action) = self.untried().next() {
            return Some(action.clone());
        }
        let hash = &self.current.hash;
        let offered = &self.current.observation.actions;
        if !offered.is_empty()
            && offered
                .iter()
                .all(|a| self.history.changed_nothing(hash, a))
        {
            self.declare_stuck();
        }
        None
    }

    /// What to say when the play's bounds ran out (`why`: "patience",
    /// "the action budget") while gameplan still had offered actions to try
    /// at a place where nothing changed: not a finding, a note.
    pub fn untried_note(&self, why: &str) -> Option<String> {
        if !self.stuck_question() {
            return None;
        }
        let untried = self.untried().count();
        (untried > 0).then(|| {
            format!(
                "{why} ran out at \"{}\" with {untried} of {} actions untried: nothing changed \
                 for {} actions there, but that is no `stuck` finding until every offered \
                 action was tried",
                crate::text::cut(&first_line(&self.current.observation.text), 80),
                self.current.observation.actions.len(),
                self.unchanged
            )
        })
    }

    /// Every offered action was tried here and none changed anything: a
    /// `stuck` finding, fingerprinted by the place and its offered actions
    /// (`findings::stuck_location`), and the way in remembered as a trap.
    fn declare_stuck(&mut self) {
        self.stuck = true;
        if let Some((hash, action)) = &self.entered {
            self.history.mark_trap(hash, action);
        }
        let place = first_line(&self.current.observation.text);
        let offered = self.current.observation.actions.len();
        let tried = self.current.observation.actions.join("`, `");
        let step = self.step();
        let from = self.current.hash.clone();
        self.spot(Spotted {
            category: Category::Stuck,
            title: format!(
                "No way out of \"{}\": none of its {offered} offered actions changes anything",
                cut(&place, 80),
            ),
            location: super::findings::stuck_location(&self.current.observation),
            evidence: self.evidence(
                step,
                &from,
                Some(format!(
                    "at: {}\ntried here, none changed the observation: `{}`",
                    cut(&place, 200),
                    cut(&tried, 400)
                )),
                None,
            ),
        });
    }

    fn evidence(
        &self,
        step: u64,
        from: &str,
        detail: Option<String>,
        stderr: Option<String>,
    ) -> Evidence {
        Evidence {
            step,
            observation: from.to_owned(),
            last_actions: last_actions(self.episode_actions()),
            detail,
            stderr_tail: stderr,
            screenshot: self.current.screenshot.clone(),
            page: self.current.url.clone(),
        }
    }

    /// A finding per cause the page logged or threw by the current
    /// observation (a browser game; a stdio game has none): a request of
    /// the game that failed is an `error` finding naming its URL and
    /// status; any other line a `console` finding. Lines of one
    /// observation with the same message are one cause (an exception the
    /// page logs with `console.error` and throws), and the location is the
    /// bare message ([`super::webdriver::bare_message`]) with numbers
    /// masked, so the same error thrown again, at another step or written
    /// another way, is one finding.
    fn spot_console(&mut self, step: u64, from: &str, action: Option<&str>) {
        let after = action.map_or_else(
            || " while the page loaded".to_owned(),
            |a| format!(" after `{a}`"),
        );
        let mut causes: Vec<String> = Vec::new();
        for message in std::mem::take(&mut self.current.console) {
            if let Some(request) = message.strip_prefix(super::webdriver::FAILED_REQUEST) {
                let spotted = Spotted {
                    category: Category::Error,
                    title: format!("{}{after}", cut(request, 160)),
                    location: request_location(request),
                    evidence: self.evidence(step, from, Some(request.to_owned()), None),
                };
                self.spot(spotted);
                continue;
            }
            let cause = super::webdriver::bare_message(&message);
            if causes.contains(&cause) {
                continue;
            }
            let spotted = Spotted {
                category: Category::Console,
                title: format!("The page logged an error{after}: {}", cut(&message, 120)),
                location: normalize(&cause),
                evidence: self.evidence(step, from, Some(message), None),
            };
            causes.push(cause);
            self.spot(spotted);
        }
    }

    fn spot(&mut self, spotted: Spotted) {
        self.findings.add(spotted, &self.persona, &self.controller);
    }

    /// Records a finding made outside an action (a failure at hello or reset).
    pub fn add_finding(&mut self, spotted: Spotted) {
        self.spot(spotted);
    }

    /// Keeps no trace steps from now on (simulate keeps them only for failed games).
    pub fn set_keep_steps(&mut self, keep: bool) {
        self.keep_steps = keep;
    }
}

/// A failed request's fingerprint location: its method, URL without the
/// port (a served game's port changes with every session) and status,
/// digits spelled as letters so the masking of numbers keeps
/// `level2.json` apart from `level3.json` and 404 apart from 500.
fn request_location(request: &str) -> String {
    let mut out = String::from("request ");
    for word in request.split_whitespace() {
        let word = match word.split_once("://") {
            Some((scheme, rest)) => {
                let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
                let host = host.rsplit_once(':').map_or(host, |(h, _)| h);
                format!("{scheme}://{host}{path}")
            }
            None => word.to_owned(),
        };
        out.extend(word.chars().map(|c| match c.to_digit(10) {
            Some(d) => char::from(b'a' + u8::try_from(d).unwrap_or(0)),
            None => c,
        }));
        out.push(' ');
    }
    out.trim_end().to_owned()
}

/// The finding for a failure at `step` (0 = at hello or reset), taken from
/// the observation `from` with `action`.
pub fn failure_finding(
    failure: &Failure,
    step: u64,
    from: &str,
    action: Option<&str>,
    actions: &[String],
) -> Spotted {
    let what = match (failure.during(), action) {
        (Op::Act, Some(action)) => format!("`{action}`"),
        (op, _) => format!("`{}`", op.name()),
    };
    let (category, title, location) = match failure {
        Failure::Hang { waited, .. } => (
            Category::Hang,
            format!(
                "The game hung on {what}: no answer within {:.1} s",
                waited.as_secs_f64()
            ),
            what.clone(),
        ),
        Failure::Exited {
            status,
            stderr_tail,
            ..
        } => {
            let last = last_line(stderr_tail);
            let title = if last.is_empty() {
                format!("The game {status} on {what}")
            } else {
                format!("The game {status} on {what}: {}", cut(last, 120))
            };
            (
                Category::Crash,
                title,
                format!("{what}\n{status}\n{}", normalize(last)),
            )
        }
        // One cause, one finding: a stray line on stdout is the cause,
        // whichever request it happened to answer (`reset`, `left` or
        // `right` of the room that prints it), so the line is the
        // location, not the request.
        Failure::Violation {
            reason, evidence, ..
        } => (
            Category::Crash,
            format!(
                "The game broke the protocol on {what}: {}",
                cut(reason, 160)
            ),
            if reason.starts_with(super::driver::NOT_A_MESSAGE) && !evidence.trim().is_empty() {
                format!("protocol\n{}", normalize(evidence))
            } else {
                format!("protocol\n{}", normalize(reason))
            },
        ),
    };
    Spotted {
        category,
        title,
        location,
        evidence: Evidence {
            step,
            observation: from.to_owned(),
            last_actions: last_actions(actions),
            detail: failure
                .evidence()
                .map(str::to_owned)
                .or_else(|| Some(failure.describe())),
            stderr_tail: failure
                .stderr_tail()
                .filter(|t| !t.is_empty())
                .map(str::to_owned),
            screenshot: None,
            page: None,
        },
    }
}

/// The first non-empty line of `text`, trimmed: what names a place.
fn first_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("")
        .to_owned()
}

fn last_line(text: &str) -> &str {
    text.lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("")
}

/// The failure a game's refusal of `hello` or `reset` is: nothing can be
/// played after it.
pub(super) fn refused_opening(game: &impl Driver, op: &str, error: &str) -> Failure {
    Failure::Violation {
        during: if op == "hello" {
            super::protocol::Op::Hello
        } else {
            super::protocol::Op::Reset
        },
        reason: format!("the game refused `{op}`: {error}"),
        evidence: String::new(),
        stderr_tail: game.stderr_tail(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_request_is_fingerprinted_by_its_url_and_status_without_the_port() {
        let at = |port: u16, file: &str, status: u16| {
            let location = request_location(&format!(
                "GET http://127.0.0.1:{port}/{file} answered HTTP {status}"
            ));
            super::super::findings::fingerprint(Category::Error, &location)
        };
        assert_eq!(
            at(4100, "levels/2.json", 404),
            at(5200, "levels/2.json", 404)
        );
        assert_ne!(
            at(4100, "levels/2.json", 404),
            at(4100, "levels/3.json", 404)
        );
        assert_ne!(
            at(4100, "levels/2.json", 404),
            at(4100, "levels/2.json", 500)
        );
    }
}

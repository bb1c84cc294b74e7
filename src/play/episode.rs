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

use super::driver::{Driver, Failure, Seen};
use super::findings::{Category, Evidence, FindingSet, Spotted, last_actions, normalize};
use super::players::History;
use super::protocol::{Event, EventKind, Op};
use super::trace::{TraceReset, TraceStep};
use crate::text::cut;

/// What one action did.
#[derive(Debug, Clone, PartialEq)]
pub enum Stepped {
    /// The game answered; the new observation is [`Episode::current`].
    Acted {
        reward: f64,
        done: bool,
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
    /// Whether this episode was declared `stuck`.
    stuck: bool,
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
            entered: None,
            since_reset: 0,
            keep_steps: true,
        };
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
            Ok(Err(refusal)) => Err(super::cell::refused_opening(game, "reset", &refusal.error)),
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
                self.unchanged = 0;
                self.stuck = false;
                self.entered = None;
                self.since_reset = self.history.actions().len();
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

    /// Takes `action` in `game` and records what happened.
    pub async fn act(&mut self, game: &mut impl Driver, action: &str) -> Stepped {
        let from = std::mem::take(&mut self.current.hash);
        self.history.record(&from, action);
        let step = self.step();
        let listed = self.current.observation.actions.iter().any(|a| a == action);
        match game.act(action).await {
            Ok(Ok(acted)) => {
                let changed = acted.seen.hash != from;
                self.current = acted.seen;
                self.spot_console(step, &from, Some(action));
                for event in &acted.events {
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
                            evidence: self.evidence(step, &from, Some(event.message.clone()), None),
                        });
                    }
                }
                if self.keep_steps {
                    self.steps.push(TraceStep {
                        step,
                        action: action.to_owned(),
                        obs: Some(self.current.hash.clone()),
                        events: acted.events.clone(),
                        refused: None,
                        screenshot: self.current.screenshot.clone(),
                    });
                }
                self.history.mark_outcome(&from, action, changed);
                self.count_change(changed, step, &from, action);
                Stepped::Acted {
                    reward: acted.reward,
                    done: acted.done,
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
                    });
                }
                self.current.hash.clone_from(&from);
                self.history.mark_outcome(&from, action, false);
                self.count_change(false, step, &from, action);
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
                    });
                }
                self.current.hash = from;
                Stepped::Failed(failure)
            }
        }
    }

    fn count_change(&mut self, changed: bool, step: u64, from: &str, action: &str) {
        if changed {
            self.unchanged = 0;
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
        if self.stuck_after > 0 && self.unchanged == self.stuck_after {
            self.stuck = true;
            if let Some((hash, action)) = &self.entered {
                self.history.mark_trap(hash, action);
            }
            let place = self
                .current
                .observation
                .text
                .lines()
                .next()
                .unwrap_or("")
                .trim()
                .to_owned();
            self.spot(Spotted {
                category: Category::Stuck,
                title: format!(
                    "Nothing changed for {} actions at \"{}\"",
                    self.stuck_after,
                    cut(&place, 80)
                ),
                location: super::findings::place(&self.current.observation),
                evidence: self.evidence(
                    step,
                    from,
                    Some(format!("at: {}", cut(&place, 200))),
                    None,
                ),
            });
        }
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
        Failure::Violation { reason, .. } => (
            Category::Crash,
            format!(
                "The game broke the protocol on {what}: {}",
                cut(reason, 160)
            ),
            format!("{what}\n{reason}"),
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

fn last_line(text: &str) -> &str {
    text.lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("")
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

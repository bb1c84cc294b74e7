//! The `llm` player: a chat model plays in the persona's voice.
//!
//! Owns the prompts (a minijinja template of the persona card, the
//! observation and the recent moves; [`DEFAULT_PROMPT`] ships in the binary,
//! a plan may name its own `prompt_file`), reading an answer back into one
//! listed action ([`match_action`]), the one retry on a bad answer, jev's
//! selector call, and the "How it felt" paragraph at the end. The wire,
//! retries, usage and the money bound are `crate::llm`'s; what a cell does
//! when the player fails (its quit reason, the step's exit code) is the
//! cell's and the step's.
//!
//! An answer must name exactly one of the listed actions: case, quotes,
//! list markers and surrounding words are forgiven, another action is not
//! (a listed `north` is not found in `northeast`), and an answer naming two
//! listed actions is ambiguous, so bad. A bad answer is asked again once,
//! quoting what was wrong; a second bad one ends the play (`bad_answer`).

use std::collections::VecDeque;

use serde_json::json;

use super::players::{Finished, PlayEnd, Player, PlayerError, PlayerReport, Proposals, Turn};
use super::trace::QuitReason;
use crate::llm::{Client, ClientConfig, LlmError, Message};
use crate::template::Redactor;
use crate::text::cut;

/// The prompt a plan that names no `prompt_file` plays with. It reads
/// `persona` (the card), `observation` (`text`, `actions`, `score`,
/// `state`), `history` (the last moves: `action`, `result`), `wanted` (how
/// many alternatives the controller asks for) and `step`.
pub const DEFAULT_PROMPT: &str = "\
You are playtesting a game. Play it as this persona would, in character:

{{ persona }}
{% if history %}
Your last moves, oldest first:
{% for move in history %}- {{ move.action }} -> {{ move.result }}
{% endfor %}{% endif %}
What you see now (move {{ step }}):
{{ observation.text }}

The actions you can take:
{% for action in observation.actions %}- {{ action }}
{% endfor %}
{% if wanted > 1 %}Answer with up to {{ wanted }} different actions from this list, one per \
line, the one you prefer first. Write each exactly as listed, nothing else.\
{% else %}Answer with exactly one action from this list, written exactly as listed, and \
nothing else.{% endif %}
";

/// jev's selector prompt.
const SELECT_PROMPT: &str = "\
You are playtesting a game as this persona:

{{ persona }}

What you see now:
{{ observation.text }}

These moves were proposed:
{% for p in proposals %}- {{ p }}
{% endfor %}
Pick the one this persona takes next. Answer with that move exactly as written, and nothing \
else.
";

/// The last call: how it felt.
const FELT_PROMPT: &str = "\
You just playtested a game as this persona:

{{ persona }}

You took {{ actions_taken }} actions and stopped because: {{ quit }}.
{% if history %}Your last moves:
{% for move in history %}- {{ move.action }} -> {{ move.result }}
{% endfor %}{% endif %}{% if findings %}Problems found on the way:
{% for f in findings %}- {{ f }}
{% endfor %}{% endif %}
In three or four sentences, in this persona's own voice, say how playing felt: what was \
fun, what was confusing or frustrating. Plain text, no list.
";

/// The most recent moves a prompt shows; older ones are dropped, so a
/// long play does not grow its prompt (and its cost) without bound.
pub const HISTORY_LEN: usize = 12;

/// How much of an observation's text a move's `result` keeps.
const RESULT_CHARS: usize = 160;

/// How much of the current observation's text a prompt shows: a game that
/// prints a novel each turn must not push the prompt past its cap (or the
/// bill past the budget).
pub const OBSERVATION_CHARS: usize = 8000;

/// Answer tokens asked for a move (and a selection).
const MOVE_TOKENS: u32 = 64;
/// Answer tokens asked for up to three alternatives.
const ALTERNATIVES_TOKENS: u32 = 160;
/// Answer tokens asked for "How it felt".
const FELT_TOKENS: u32 = 400;
/// The most of "How it felt" a report keeps.
const FELT_CHARS: usize = 2000;

/// An `llm` player as configured for one cell.
#[derive(Clone)]
pub struct LlmSpec {
    pub client: ClientConfig,
    /// The persona card (its text, a `card_file` read).
    pub card: String,
    /// The prompt template's source; `None` plays with [`DEFAULT_PROMPT`].
    pub prompt: Option<String>,
    /// The plan's secrets: nothing the player hands back holds one.
    pub redactor: Redactor,
    /// The run's `[pools] llm`: model requests in flight at once, across
    /// every cell of the run.
    pub slots: Option<std::sync::Arc<tokio::sync::Semaphore>>,
}

impl std::fmt::Debug for LlmSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // `Redactor`'s own Debug would print the secrets.
        f.debug_struct("LlmSpec")
            .field("client", &self.client)
            .field("card", &cut(&self.card, 40))
            .field("prompt", &self.prompt.as_ref().map(|p| cut(p, 40)))
            .finish_non_exhaustive()
    }
}

impl PartialEq for LlmSpec {
    fn eq(&self, other: &Self) -> bool {
        self.client == other.client && self.card == other.card && self.prompt == other.prompt
    }
}

// Equality of a spec is equality of its settings; the one float (the
// temperature) is never NaN in a validated plan.
impl Eq for LlmSpec {}

/// One move as the prompt shows it.
#[derive(Debug, Clone, serde::Serialize)]
struct Move {
    action: String,
    result: String,
}

pub struct LlmPlayer {
    client: Result<Client, LlmError>,
    card: String,
    prompt: String,
    recent: VecDeque<Move>,
    /// How many actions of the history the moves above cover.
    seen: usize,
    /// A proposal or selection was refused for the budget.
    budget_stop: bool,
}

impl LlmPlayer {
    pub fn new(spec: &LlmSpec) -> LlmPlayer {
        LlmPlayer {
            client: Client::new(spec.client.clone(), spec.redactor.clone())
                .map(|client| client.sharing(spec.slots.clone())),
            card: spec.card.clone(),
            prompt: spec
                .prompt
                .clone()
                .unwrap_or_else(|| DEFAULT_PROMPT.to_owned()),
            recent: VecDeque::with_capacity(HISTORY_LEN + 1),
            seen: 0,
            budget_stop: false,
        }
    }

    /// Remembers the move the controller took last, with what it led to.
    fn remember(&mut self, turn: &Turn<'_>) {
        let actions = turn.history.actions();
        if actions.len() <= self.seen {
            return;
        }
        self.seen = actions.len();
        if let Some(action) = actions.last() {
            let text = turn.observation.text.split_whitespace().collect::<Vec<_>>();
            self.recent.push_back(Move {
                action: action.clone(),
                result: cut(&text.join(" "), RESULT_CHARS),
            });
            while self.recent.len() > HISTORY_LEN {
                self.recent.pop_front();
            }
        }
    }

    fn observation(turn: &Turn<'_>) -> serde_json::Value {
        json!({
            "text": cut(&turn.observation.text, OBSERVATION_CHARS),
            "actions": turn.observation.actions,
            "score": turn.observation.score,
            "state": turn.observation.state,
        })
    }

    /// Asks the model, and once more on a bad answer; the actions it named.
    async fn ask(
        &mut self,
        prompt: String,
        allowed: &[String],
        wanted: usize,
        max_tokens: u32,
    ) -> Result<Vec<String>, PlayerError> {
        let client = self.client.as_ref().map_err(Clone::clone)?;
        let mut messages = vec![Message::user(prompt)];
        let first = match client.chat(&messages, max_tokens).await {
            Ok(answer) => answer,
            Err(e) => return Err(self.failed(e)),
        };
        let why = match pick(&first.text, allowed, wanted) {
            Ok(picked) => return Ok(picked),
            Err(why) => why,
        };
        messages.push(Message {
            role: "assistant",
            content: first.text.clone(),
        });
        messages.push(Message::user(format!(
            "That answer does not work: it {why}. Answer again with {} of these actions, written \
             exactly as listed, and nothing else: {}",
            if wanted > 1 { "up to three" } else { "one" },
            allowed.join(", ")
        )));
        let second = match client.chat(&messages, max_tokens).await {
            Ok(answer) => answer,
            Err(e) => return Err(self.failed(e)),
        };
        pick(&second.text, allowed, wanted).map_err(|again| {
            PlayerError::Model(LlmError::BadAnswer(format!(
                "asked twice, the model named no listed action: first `{}` ({why}), then `{}` \
                 ({again}); the actions were {}",
                cut(first.text.trim(), 80),
                cut(second.text.trim(), 80),
                cut(&allowed.join(", "), 200)
            )))
        })
    }

    fn failed(&mut self, e: LlmError) -> PlayerError {
        if matches!(e, LlmError::Budget { .. }) {
            self.budget_stop = true;
        }
        PlayerError::Model(e)
    }

    fn render(source: &str, context: &serde_json::Value) -> Result<String, PlayerError> {
        crate::template::render_prompt(source, context).map_err(|e| {
            PlayerError::Settings(match e.help {
                Some(help) => format!("{}; {help}", e.message),
                None => e.message,
            })
        })
    }
}

impl Player for LlmPlayer {
    fn propose<'a>(&'a mut self, turn: &'a Turn<'a>) -> Proposals<'a> {
        Box::pin(async move {
            self.remember(turn);
            let wanted = turn.wanted.clamp(1, 3);
            let context = json!({
                "persona": self.card,
                "observation": Self::observation(turn),
                "history": self.recent,
                "wanted": wanted,
                "step": turn.history.actions().len() + 1,
            });
            let prompt = Self::render(&self.prompt, &context)?;
            let tokens = if wanted > 1 {
                ALTERNATIVES_TOKENS
            } else {
                MOVE_TOKENS
            };
            self.ask(prompt, &turn.observation.actions, wanted, tokens)
                .await
        })
    }

    fn select<'a>(
        &'a mut self,
        turn: &'a Turn<'a>,
        proposals: &'a [String],
    ) -> Option<Proposals<'a>> {
        Some(Box::pin(async move {
            let context = json!({
                "persona": self.card,
                "observation": Self::observation(turn),
                "proposals": proposals,
            });
            let prompt = Self::render(SELECT_PROMPT, &context)?;
            self.ask(prompt, proposals, 1, MOVE_TOKENS).await
        }))
    }

    fn finish<'a>(&'a mut self, end: &'a PlayEnd) -> Finished<'a> {
        Box::pin(async move {
            let Ok(client) = self.client.as_ref() else {
                return PlayerReport::default();
            };
            // A model that does not answer, refuses or talks nonsense is
            // not asked again, and a spent budget pays for no paragraph.
            let asks = !matches!(
                end.quit,
                QuitReason::ModelUnreachable
                    | QuitReason::ModelRefused
                    | QuitReason::BadAnswer
                    | QuitReason::Interrupted
            ) && !self.budget_stop;
            let mut felt = None;
            if asks {
                let context = json!({
                    "persona": self.card,
                    "actions_taken": end.actions_taken,
                    "quit": end.player_error.clone().unwrap_or_else(|| quit_words(end.quit).to_owned()),
                    "history": self.recent,
                    "findings": end.findings,
                });
                if let Ok(prompt) = crate::template::render_prompt(FELT_PROMPT, &context)
                    && let Ok(answer) = client.chat(&[Message::user(prompt)], FELT_TOKENS).await
                {
                    let text = answer.text.trim();
                    if !text.is_empty() {
                        felt = Some(cut(text, FELT_CHARS));
                    }
                }
            }
            let mut usage = client.usage();
            usage.stopped_by_budget = self.budget_stop;
            PlayerReport {
                felt,
                model: Some(usage),
                quit_detail: None,
            }
        })
    }
}

/// Why the play ended, in words for the persona.
fn quit_words(quit: QuitReason) -> &'static str {
    match quit {
        QuitReason::Done => "you reached the end of the game",
        QuitReason::Crash => "the game crashed",
        QuitReason::Hang => "the game stopped responding",
        QuitReason::Patience => "you ran out of patience",
        QuitReason::Budget => "the time or money for the session ran out",
        QuitReason::NoActions => "the game offered nothing more to do",
        QuitReason::ScriptEnd | QuitReason::Interrupted => "the session was stopped",
        QuitReason::BadAnswer | QuitReason::ModelUnreachable | QuitReason::ModelRefused => {
            "you could not go on"
        }
    }
}

/// The actions an answer names: one for `wanted == 1`; up to `wanted`
/// distinct ones, a line each, otherwise. Why not, as "names no listed
/// action" or "names more than one listed action (…)".
pub fn pick(text: &str, allowed: &[String], wanted: usize) -> Result<Vec<String>, String> {
    if wanted > 1 {
        let mut picked: Vec<String> = Vec::with_capacity(wanted);
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            if let Ok(action) = match_action(line, allowed)
                && !picked.contains(&action)
            {
                picked.push(action);
                if picked.len() == wanted {
                    break;
                }
            }
        }
        if !picked.is_empty() {
            return Ok(picked);
        }
    }
    match_action(text, allowed).map(|action| vec![action])
}

/// The one listed action `text` names (see the module doc for the rules).
pub fn match_action(text: &str, allowed: &[String]) -> Result<String, String> {
    let cleaned = text
        .trim()
        .trim_start_matches(|c: char| c.is_ascii_digit() || matches!(c, '-' | '*' | '.' | ')'))
        .trim_matches(|c: char| {
            c.is_whitespace() || matches!(c, '"' | '\'' | '`' | '*' | '.' | '!' | ',' | ':' | ';')
        })
        .to_lowercase();
    if let Some(exact) = allowed
        .iter()
        .find(|a| !a.trim().is_empty() && a.trim().to_lowercase() == cleaned)
    {
        return Ok(exact.clone());
    }
    let lower = text.to_lowercase();
    // Each listed action with where it occurs as whole words.
    let found: Vec<(&String, Vec<(usize, usize)>)> = allowed
        .iter()
        .filter(|a| !a.trim().is_empty())
        .map(|a| (a, occurrences(&lower, &a.trim().to_lowercase())))
        .filter(|(_, at)| !at.is_empty())
        .collect();
    // `go north` names `north` too: an action only found inside another
    // found action does not count.
    let mut named: Vec<&String> = Vec::with_capacity(found.len());
    for (action, spans) in &found {
        let inside_other = spans.iter().all(|&(s, e)| {
            found.iter().any(|(other, others)| {
                other != action
                    && others
                        .iter()
                        .any(|&(os, oe)| os <= s && e <= oe && (oe - os) > (e - s))
            })
        });
        if !inside_other && !named.contains(action) {
            named.push(action);
        }
    }
    match named.as_slice() {
        [one] => Ok((*one).clone()),
        [] => Err("names no listed action".to_owned()),
        many => Err(format!(
            "names more than one listed action ({})",
            many.iter()
                .map(|a| format!("`{a}`"))
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// Where `needle` occurs in `haystack` with no letter or digit either side.
fn occurrences(haystack: &str, needle: &str) -> Vec<(usize, usize)> {
    let word = |c: Option<char>| c.is_some_and(char::is_alphanumeric);
    haystack
        .match_indices(needle)
        .map(|(start, m)| (start, start + m.len()))
        .filter(|&(s, e)| {
            !word(haystack[..s].chars().next_back()) && !word(haystack[e..].chars().next())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn actions(list: &[&str]) -> Vec<String> {
        list.iter().map(|a| (*a).to_owned()).collect()
    }

    #[test]
    fn an_answer_names_one_listed_action_whatever_its_case_quotes_and_words() {
        let listed = actions(&["north", "go east", "Open Door"]);
        for (answer, expected) in [
            ("north", "north"),
            ("  NORTH.\n", "north"),
            ("\"open door\"", "Open Door"),
            ("`go east`", "go east"),
            ("I think I will go east, it looks safer.", "go east"),
            ("1. north", "north"),
            ("**Open door**!", "Open Door"),
        ] {
            assert_eq!(
                match_action(answer, &listed).as_deref(),
                Ok(expected),
                "{answer}"
            );
        }
    }

    #[test]
    fn another_action_or_two_actions_are_bad_answers() {
        let listed = actions(&["north", "east", "go north"]);
        assert_eq!(
            match_action("northeast", &listed),
            Err("names no listed action".to_owned())
        );
        assert_eq!(
            match_action("I would rather dance.", &listed),
            Err("names no listed action".to_owned())
        );
        let both = match_action("north or east?", &listed).unwrap_err();
        assert!(both.contains("more than one"), "{both}");
        // `go north` holds `north`: naming it is one action, not two.
        assert_eq!(
            match_action("Let's go north!", &listed).as_deref(),
            Ok("go north")
        );
    }

    #[test]
    fn a_huge_observation_is_cut_so_the_prompt_stays_under_its_cap() {
        let observation = crate::play::protocol::Observation {
            text: "A very long room description. ".repeat(4000),
            actions: actions(&["north", "south"]),
            state: serde_json::Value::Null,
            score: 0.0,
        };
        let history = crate::play::players::History::default();
        let turn = Turn {
            observation: &observation,
            hash: "h",
            history: &history,
            wanted: 1,
        };
        let context = json!({
            "persona": "A tester.",
            "observation": LlmPlayer::observation(&turn),
            "history": Vec::<Move>::new(),
            "wanted": 1,
            "step": 1,
        });
        let prompt = crate::template::render_prompt(DEFAULT_PROMPT, &context).expect("renders");
        assert!(observation.text.len() > crate::template::MAX_RENDERED_BYTES);
        assert!(prompt.len() < OBSERVATION_CHARS + 1000, "{}", prompt.len());
        assert!(prompt.contains("- north\n- south\n"), "{prompt}");
    }

    #[test]
    fn alternatives_are_read_a_line_each_and_kept_distinct() {
        let listed = actions(&["north", "east", "west"]);
        assert_eq!(
            pick("1. east\n2. north\n3. east\n4. west", &listed, 3),
            Ok(actions(&["east", "north", "west"]))
        );
        assert_eq!(pick("fly\nwest", &listed, 3), Ok(actions(&["west"])));
        assert!(pick("fly\nswim", &listed, 3).is_err());
    }
}

//! The `llm` player: a chat model plays in the persona's voice.
//!
//! Owns the prompts (a minijinja template of the persona card, the
//! observation and the recent moves; [`DEFAULT_PROMPT`] ships in the binary,
//! a plan may name its own `prompt_file`), the choice asked as structured
//! output (a JSON Schema whose `enum` is the listed actions; the client
//! finds the dialect the server takes), reading an answer back into listed
//! actions (`answers`), the one re-ask on a bad answer, the fallback after
//! a second, jev's selector call, what each turn's answers were (for the
//! transcript), and the "How it felt" paragraph at the end. The wire,
//! retries, usage and the money bound are `crate::llm`'s; what a cell does
//! when the player fails (its quit reason, the step's exit code) is the
//! cell's and the step's.
//!
//! A list of one action needs no model call. A bad answer is asked again
//! once, repeating the format; after a second, the move is the persona's
//! `fallback`'s (`explorer` by default, `random`, or `stop`: only then
//! does a bad answer end the play, `bad_answer`).

use std::collections::VecDeque;
use std::time::Duration;

use serde_json::json;

use super::player::{
    ChoiceNotes, Finished, PlayEnd, Player, PlayerError, PlayerReport, Proposals, Turn, least_tried,
};
use super::rng::Rng;
use super::trace::QuitReason;
use crate::llm::{Call, Client, ClientConfig, LlmError, Message};
pub use crate::plan::model::Fallback;
use crate::template::Redactor;
use crate::text::cut;

mod answers;

pub use answers::{match_action, pick};

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
/// Answer tokens asked for "How it felt" unless the persona says.
pub const FELT_TOKENS: u32 = 200;
/// Seconds "How it felt" may take unless the persona says: a paragraph is
/// longer than a move, so a slow local server needs more than a move's
/// timeout, and it is asked once (see [`Call::once_on_timeout`]).
pub const FELT_TIMEOUT: Duration = Duration::from_secs(120);
/// The most of "How it felt" a report keeps.
const FELT_CHARS: usize = 2000;
/// The most of one raw answer a transcript keeps.
const ANSWER_CHARS: usize = 1000;

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
    /// Who moves after a second bad answer.
    pub fallback: Fallback,
    /// Ask for the choice as structured output (where the server takes it).
    pub structured: bool,
    /// "How it felt": seconds it may take and tokens it may use.
    pub felt_timeout: Duration,
    pub felt_tokens: u32,
}

impl LlmSpec {
    /// A spec with the defaults for everything but the model, card and
    /// secrets.
    pub fn new(client: ClientConfig, card: String, redactor: Redactor) -> LlmSpec {
        LlmSpec {
            client,
            card,
            prompt: None,
            redactor,
            slots: None,
            fallback: Fallback::Explorer,
            structured: true,
            felt_timeout: FELT_TIMEOUT,
            felt_tokens: FELT_TOKENS,
        }
    }
}

impl std::fmt::Debug for LlmSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // `Redactor`'s own Debug would print the secrets.
        f.debug_struct("LlmSpec")
            .field("client", &self.client)
            .field("card", &cut(&self.card, 40))
            .field("prompt", &self.prompt.as_ref().map(|p| cut(p, 40)))
            .field("fallback", &self.fallback)
            .field("structured", &self.structured)
            .finish_non_exhaustive()
    }
}

impl PartialEq for LlmSpec {
    fn eq(&self, other: &Self) -> bool {
        self.client == other.client
            && self.card == other.card
            && self.prompt == other.prompt
            && self.fallback == other.fallback
            && self.structured == other.structured
            && self.felt_timeout == other.felt_timeout
            && self.felt_tokens == other.felt_tokens
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

/// Which call of a turn an answer was for.
#[derive(Debug, Clone, Copy)]
enum Asked {
    /// One action (`standard`, each `rune` vote).
    Move,
    /// Up to three alternatives (`jev`).
    Alternatives,
    /// jev's selection among the alternatives.
    Select,
}

impl Asked {
    fn name(self) -> &'static str {
        match self {
            Asked::Move => "move",
            Asked::Alternatives => "alternatives",
            Asked::Select => "select",
        }
    }
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
    fallback: Fallback,
    /// The fallback's own random stream, apart from the controller's.
    rng: Rng,
    structured: bool,
    felt_timeout: Duration,
    felt_tokens: u32,
    /// This turn's answers and how each was read, for the transcript.
    notes: ChoiceNotes,
    counts: AnswerCounts,
}

/// How the model's answers went over the play, for the report.
#[derive(Debug, Default)]
struct AnswerCounts {
    reasks: u64,
    fallbacks: u64,
    /// An answer came to a call that asked for a schema.
    schema_answered: bool,
    /// Some answer came back as structured output.
    structured: bool,
}

impl LlmPlayer {
    /// The player of `spec`; `seed` seeds its fallback.
    pub fn new(spec: &LlmSpec, seed: i64) -> LlmPlayer {
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
            fallback: spec.fallback,
            rng: Rng::new(seed, "fallback"),
            structured: spec.structured,
            felt_timeout: spec.felt_timeout,
            felt_tokens: spec.felt_tokens,
            notes: ChoiceNotes::default(),
            counts: AnswerCounts::default(),
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
            // A refused action left the game as it was: what the game said
            // is the news, not the room again.
            let result = match turn.history.last_refusal() {
                Some(error) => format!("refused: {error}"),
                None => turn
                    .observation
                    .text
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" "),
            };
            self.recent.push_back(Move {
                action: action.clone(),
                result: cut(&result, RESULT_CHARS),
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

    /// Asks the model, once more on a bad answer, then the fallback: the
    /// actions to propose. A list of one action asks nobody.
    async fn ask(
        &mut self,
        (asked, turn): (Asked, &Turn<'_>),
        prompt: String,
        allowed: &[String],
        wanted: usize,
        max_tokens: u32,
    ) -> Result<Vec<String>, PlayerError> {
        if let [only] = allowed {
            self.note(
                json!({"call": asked.name(), "no_call": "one action listed", "read": [only]}),
            );
            return Ok(vec![only.clone()]);
        }
        // Room for the longest listed action, a few times for alternatives:
        // a structured answer cut short is no JSON at all.
        let longest = allowed.iter().map(String::len).max().unwrap_or(0);
        let room = u32::try_from(wanted * (longest / 2 + 8) + 24).unwrap_or(u32::MAX);
        let max_tokens = max_tokens.max(room);
        let schema = self.structured.then(|| choice_schema(allowed, wanted));
        let mut messages = vec![Message::user(prompt)];
        let first = self.call(&messages, max_tokens, schema.as_ref()).await?;
        let why = match self.read(asked, &first, (allowed, wanted), false) {
            Ok(picked) => return Ok(picked),
            Err(why) => why,
        };
        self.counts.reasks += 1;
        messages.push(Message {
            role: "assistant",
            content: first.text.clone(),
        });
        messages.push(Message::user(reask(&why, allowed, wanted)));
        let second = self.call(&messages, max_tokens, schema.as_ref()).await?;
        let again = match self.read(asked, &second, (allowed, wanted), true) {
            Ok(picked) => return Ok(picked),
            Err(again) => again,
        };
        let picked = match self.fallback {
            Fallback::Stop => {
                return Err(PlayerError::Model(LlmError::BadAnswer(format!(
                    "asked twice, the model named no listed action: first `{}` ({why}), then \
                     `{}` ({again}); the actions were {}",
                    cut(first.text.trim(), 80),
                    cut(second.text.trim(), 80),
                    cut(&allowed.join(", "), 200)
                ))));
            }
            Fallback::Explorer => {
                least_tried(allowed, turn.hash, turn.history, wanted, &mut self.rng)
            }
            Fallback::Random => vec![allowed[self.rng.below(allowed.len())].clone()],
        };
        self.counts.fallbacks += 1;
        self.notes.fallback = Some(self.fallback.name());
        self.note(json!({"call": asked.name(), "fallback": self.fallback.name(), "read": picked}));
        Ok(picked)
    }

    /// One call of the model, its failure the play's.
    async fn call(
        &mut self,
        messages: &[Message],
        max_tokens: u32,
        schema: Option<&serde_json::Value>,
    ) -> Result<crate::llm::Answer, PlayerError> {
        let client = self.client.as_ref().map_err(Clone::clone)?;
        let call = Call {
            schema,
            ..Call::default()
        };
        match client.chat_with(messages, max_tokens, call).await {
            Ok(mut answer) => {
                // A server may take a `response_format` and still answer
                // in prose: structured is what came back as JSON.
                answer.structured &= serde_json::from_str::<serde_json::Value>(answer.text.trim())
                    .is_ok_and(|v| v.is_object());
                self.counts.schema_answered |= schema.is_some();
                self.counts.structured |= answer.structured;
                Ok(answer)
            }
            Err(e) => Err(self.failed(e)),
        }
    }

    fn note(&mut self, note: serde_json::Value) {
        self.notes.model.push(note);
    }

    /// Reads `answer` as `wanted` of the `allowed` actions, noting what it
    /// read (or why it read none), whether first asked or asked again.
    fn read(
        &mut self,
        asked: Asked,
        answer: &crate::llm::Answer,
        (allowed, wanted): (&[String], usize),
        reask: bool,
    ) -> Result<Vec<String>, String> {
        let read = pick(&answer.text, allowed, wanted);
        self.note_answer(
            asked,
            answer,
            read.as_deref().map_err(String::as_str),
            reask,
        );
        read
    }

    /// A raw answer and how it was read, for the transcript.
    fn note_answer(
        &mut self,
        asked: Asked,
        answer: &crate::llm::Answer,
        read: Result<&[String], &str>,
        reask: bool,
    ) {
        let mut note = json!({
            "call": asked.name(),
            "answer": cut(&answer.text, ANSWER_CHARS),
            "structured": answer.structured,
        });
        match read {
            Ok(picked) => note["read"] = json!(picked),
            Err(why) => note["bad"] = json!(why),
        }
        if reask {
            note["reask"] = json!(true);
        }
        self.note(note);
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
            let asked = if wanted > 1 {
                Asked::Alternatives
            } else {
                Asked::Move
            };
            self.ask(
                (asked, turn),
                prompt,
                &turn.observation.actions,
                wanted,
                tokens,
            )
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
            self.ask((Asked::Select, turn), prompt, proposals, 1, MOVE_TOKENS)
                .await
        }))
    }

    fn take_notes(&mut self) -> ChoiceNotes {
        std::mem::take(&mut self.notes)
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
                let call = Call {
                    schema: None,
                    timeout: Some(self.felt_timeout),
                    once_on_timeout: true,
                };
                if let Ok(prompt) = crate::template::render_prompt(FELT_PROMPT, &context)
                    && let Ok(answer) = client
                        .chat_with(&[Message::user(prompt)], self.felt_tokens, call)
                        .await
                {
                    let text = whole_sentences(answer.text.trim());
                    if !text.is_empty() {
                        felt = Some(cut(text, FELT_CHARS));
                    }
                }
            }
            let mut usage = client.usage();
            usage.stopped_by_budget = self.budget_stop;
            usage.reasks = self.counts.reasks;
            usage.fallbacks = self.counts.fallbacks;
            usage.structured = self
                .counts
                .schema_answered
                .then_some(self.counts.structured);
            PlayerReport {
                felt,
                model: Some(usage),
                quit_detail: None,
            }
        })
    }
}

/// `text` up to its last whole sentence: a paragraph cut off by its token
/// cap ends mid-word, and a report quotes it. Text with no sentence end
/// at all is kept as it is.
fn whole_sentences(text: &str) -> &str {
    if text.ends_with(['.', '!', '?', '"', ')']) {
        return text;
    }
    match text.rfind(['.', '!', '?']) {
        Some(end) => &text[..=end],
        None => text,
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

/// The JSON Schema of a choice among `allowed`: `{"action": one of them}`,
/// or `{"actions": [up to `wanted` of them]}`.
fn choice_schema(allowed: &[String], wanted: usize) -> serde_json::Value {
    let one = json!({"type": "string", "enum": allowed});
    if wanted > 1 {
        json!({
            "type": "object",
            "properties": {"actions": {"type": "array", "items": one, "minItems": 1, "maxItems": wanted}},
            "required": ["actions"],
            "additionalProperties": false,
        })
    } else {
        json!({
            "type": "object",
            "properties": {"action": one},
            "required": ["action"],
            "additionalProperties": false,
        })
    }
}

/// The re-ask after a bad answer: what was wrong, and the format again.
fn reask(why: &str, allowed: &[String], wanted: usize) -> String {
    let listed = allowed.iter().fold(String::new(), |mut listed, a| {
        listed.push_str("- ");
        listed.push_str(a);
        listed.push('\n');
        listed
    });
    let format = if wanted > 1 {
        format!(
            "Answer again with up to {wanted} different actions from this list, one per line, \
             the one you prefer first, each written exactly as listed, and nothing else"
        )
    } else {
        "Answer again with exactly one action from this list, written exactly as listed, and \
         nothing else"
            .to_owned()
    };
    format!("That answer does not work: it {why}. {format}:\n{listed}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn actions(list: &[&str]) -> Vec<String> {
        list.iter().map(|a| (*a).to_owned()).collect()
    }

    #[test]
    fn a_huge_observation_is_cut_so_the_prompt_stays_under_its_cap() {
        let observation = crate::play::protocol::Observation {
            text: "A very long room description. ".repeat(4000),
            actions: actions(&["north", "south"]),
            state: serde_json::Value::Null,
            score: 0.0,
        };
        let history = crate::play::player::History::default();
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
    fn a_refused_action_is_remembered_with_what_the_game_said_not_the_room() {
        let spec = LlmSpec::new(
            ClientConfig::new("m"),
            "A tester.".to_owned(),
            Redactor::default(),
        );
        let mut player = LlmPlayer::new(&spec, 1);
        let observation = crate::play::protocol::Observation {
            text: "A dark hall. Doors lead north.".to_owned(),
            actions: vec!["north".to_owned(), "up".to_owned()],
            state: serde_json::Value::Null,
            score: 0.0,
        };
        // The same room each turn, its history one move longer.
        let mut remember = |history: &crate::play::player::History| {
            player.remember(&Turn {
                observation: &observation,
                hash: "h",
                history,
                wanted: 1,
            });
        };
        let mut history = crate::play::player::History::default();
        history.record("h", "up");
        history.refused("There are no stairs here.");
        remember(&history);
        history.record("h", "north");
        remember(&history);
        let results: Vec<&str> = player.recent.iter().map(|m| m.result.as_str()).collect();
        assert_eq!(
            results,
            [
                "refused: There are no stairs here.",
                "A dark hall. Doors lead north."
            ]
        );
    }

    #[test]
    fn how_it_felt_cut_off_by_its_token_cap_ends_at_its_last_sentence() {
        assert_eq!(
            whole_sentences("Fun. The doors were odd! And then I found a"),
            "Fun. The doors were odd!"
        );
        assert_eq!(whole_sentences("All good."), "All good.");
        assert_eq!(whole_sentences("no end at all"), "no end at all");
    }
}

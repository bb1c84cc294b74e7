//! The one OpenAI-compatible chat client: the `llm` player (its proposals,
//! `jev`'s selector call, the "How it felt" paragraph) and the `llm` review
//! lens all talk to a model through [`Client::chat`].
//!
//! Owns the wire (`POST {base_url}/chat/completions`, the bearer key, JSON),
//! timeouts, retries, the size of an answer it reads, usage and cost, and
//! the money bound (`budget.max_model_usd`). Does not own prompts or what
//! an answer means: a caller renders its messages and reads the text.
//!
//! # Design
//!
//! - **Typed errors** ([`LlmError`]): `Unreachable` (no answer after every
//!   attempt: connection refused, timeout, 429 and 5xx; exit 5 for a run),
//!   `Refused` (any other 4xx: a wrong key, an unknown model; repeating
//!   cannot fix it), `BadAnswer` (a 200 that is not a chat completion, or
//!   too large), `Budget` (the next call could pass `max_model_usd`).
//! - **Retries** are bounded ([`ClientConfig::max_attempts`]) with a
//!   doubling backoff from [`ClientConfig::backoff`], capped at
//!   [`MAX_BACKOFF`]; a `Retry-After` in seconds is honoured up to that cap.
//!   A completion has no side effect but its cost, so repeating one that
//!   timed out is safe (its usage, if it was served, is the provider's).
//! - **Money**: a call is refused *before* it goes out when what was spent
//!   plus a bound on the call (its prompt's bytes / 3 as input tokens, the
//!   `max_tokens` asked for as output tokens) passes the budget, so a budget
//!   is not passed by a call gameplan could have foreseen. Usage comes from
//!   the answer's `usage`; cost from the player's `price` (USD per million
//!   tokens) or [`Price::builtin`]. An unpriced model counts tokens only
//!   (the plan check refuses one under a `max_model_usd`).
//! - **Concurrency**: clients that share a semaphore ([`Client::sharing`],
//!   the plan's `[pools] llm`) have at most that many requests in flight
//!   together; a permit is held for one attempt, not across a backoff.
//! - **Structured output** ([`Call::schema`]): a caller that wants JSON of
//!   a known shape (the `llm` player's choice, an `enum` of the listed
//!   actions) hands over its JSON Schema, and the client asks for it in the
//!   first dialect the server takes (`structured`): `OpenAI`'s `json_schema`
//!   (`OpenAI`, `vLLM`, llama.cpp's `llama-server`, Ollama), then
//!   llama-cpp-python's `json_object` with a `schema`. A 400 or 422 to one
//!   dialect (or a 500 whose body names `response_format`, as
//!   llama-cpp-python's server answers) tries the next at once (not a
//!   retry: nothing was generated),
//!   and a server that takes neither is asked in plain text from then on.
//! - **Secrets**: the API key travels only in the `Authorization` header.
//!   Every text this module hands back (answers, error messages, which may
//!   quote a URL or a server's body) goes through the plan's
//!   [`Redactor`] first, and [`ClientConfig`]'s `Debug` hides the key.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::template::Redactor;

mod structured;

pub use structured::Dialect;

/// The most bytes of an answer the client reads; a larger body is a bad answer.
pub const MAX_ANSWER_BYTES: usize = 256 * 1024;

/// The longest wait between two attempts.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// Attempts of one call by default (the first and three retries).
pub const DEFAULT_ATTEMPTS: u32 = 4;

/// Seconds a request may take by default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// The endpoint when a plan names none.
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

pub use crate::token_price::Price;

/// One chat message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Message {
    pub role: &'static str,
    pub content: String,
}

impl Message {
    pub fn system(content: impl Into<String>) -> Message {
        Message {
            role: "system",
            content: content.into(),
        }
    }

    pub fn user(content: impl Into<String>) -> Message {
        Message {
            role: "user",
            content: content.into(),
        }
    }
}

/// How to reach one model.
#[derive(Clone)]
pub struct ClientConfig {
    /// `https://api.openai.com/v1`, `http://127.0.0.1:11434/v1` (Ollama), …
    pub base_url: String,
    pub api_key: Option<String>,
    pub model: String,
    pub temperature: Option<f64>,
    /// Per request, connecting included.
    pub timeout: Duration,
    /// Attempts of one call (at least 1).
    pub max_attempts: u32,
    /// The first wait between attempts; doubled each time.
    pub backoff: Duration,
    /// Overrides [`Price::builtin`].
    pub price: Option<Price>,
    /// `budget.max_model_usd`: what every call of this client may spend.
    pub max_usd: Option<f64>,
}

impl std::fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key is never printed, not even in a panic message.
        f.debug_struct("ClientConfig")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "[redacted]"))
            .field("model", &self.model)
            .field("timeout", &self.timeout)
            .field("max_attempts", &self.max_attempts)
            .field("price", &self.price)
            .field("max_usd", &self.max_usd)
            .finish_non_exhaustive()
    }
}

impl PartialEq for ClientConfig {
    fn eq(&self, other: &Self) -> bool {
        self.base_url == other.base_url
            && self.api_key == other.api_key
            && self.model == other.model
            && self.temperature == other.temperature
            && self.timeout == other.timeout
            && self.max_attempts == other.max_attempts
            && self.backoff == other.backoff
            && self.price == other.price
            && self.max_usd == other.max_usd
    }
}

impl ClientConfig {
    /// A config for `model` with the defaults.
    pub fn new(model: impl Into<String>) -> ClientConfig {
        ClientConfig {
            base_url: DEFAULT_BASE_URL.to_owned(),
            api_key: None,
            model: model.into(),
            temperature: None,
            timeout: DEFAULT_TIMEOUT,
            max_attempts: DEFAULT_ATTEMPTS,
            backoff: Duration::from_millis(500),
            price: None,
            max_usd: None,
        }
    }

    /// The price calls are counted at: the plan's, else the built-in one.
    pub fn effective_price(&self) -> Option<Price> {
        self.price.or_else(|| Price::builtin(&self.model))
    }

    /// `{base_url}/chat/completions` (a base that already ends so is kept).
    pub fn endpoint(&self) -> String {
        let base = self.base_url.trim_end_matches('/');
        if base.ends_with("/chat/completions") {
            base.to_owned()
        } else {
            format!("{base}/chat/completions")
        }
    }
}

/// What one client spent so far (every call, retries' answers included).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Usage {
    pub model: String,
    /// Calls answered (a call's retries are one call).
    pub calls: u64,
    /// Attempts that were repeated (429, 5xx, timeouts).
    pub retries: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// USD, from the price; `None` when the model has no price.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// `budget.max_model_usd`, when the plan set one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_usd: Option<f64>,
    /// The play stopped because the next call could pass `max_usd`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stopped_by_budget: bool,
    /// The `llm` player's re-asks: a bad answer asked again once.
    #[serde(default)]
    pub reasks: u64,
    /// Moves the `llm` player's `fallback` took after a second bad answer.
    #[serde(default)]
    pub fallbacks: u64,
    /// Whether answers came as structured output (`true`), the server
    /// refused it or ignored it and answers were read as text (`false`),
    /// or it was never asked for (absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured: Option<bool>,
}

/// One answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// The first choice's text, redacted.
    pub text: String,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// The request asked for structured output and the server took it.
    pub structured: bool,
}

/// How one call is asked, past its messages and answer length.
#[derive(Debug, Clone, Copy, Default)]
pub struct Call<'a> {
    /// A JSON Schema the answer must follow, asked as structured output
    /// where the server takes it (see the module doc).
    pub schema: Option<&'a serde_json::Value>,
    /// Seconds this call may take instead of the client's `timeout`.
    pub timeout: Option<Duration>,
    /// A call that timed out is not sent again. A local server (llama.cpp,
    /// Ollama) goes on generating an answer nobody waits for, so a second
    /// request only queues behind the first: for an answer the play can do
    /// without ("How it felt"), one wait is enough.
    pub once_on_timeout: bool,
}

/// Why a call gave no usable answer. Messages are redacted.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LlmError {
    /// Nothing answered after every attempt (connection refused, timeout,
    /// 429, 5xx).
    #[error("the model endpoint {endpoint} never answered after {attempts} attempt(s): {last}")]
    Unreachable {
        endpoint: String,
        attempts: u32,
        last: String,
    },
    /// A 4xx other than 429: repeating cannot fix it.
    #[error("the model endpoint {endpoint} refused the request ({status}): {body}")]
    Refused {
        endpoint: String,
        status: u16,
        body: String,
    },
    /// A 200 whose body is not a usable chat completion.
    #[error("the model's answer was unusable: {0}")]
    BadAnswer(String),
    /// The next call could pass `budget.max_model_usd`.
    #[error(
        "the model budget is spent: {spent_usd:.4} USD of max_model_usd = {max_usd} used, and the next call could cost up to {next_usd:.4} USD"
    )]
    Budget {
        spent_usd: f64,
        max_usd: f64,
        next_usd: f64,
    },
}

/// The client of one model, with what it spent.
pub struct Client {
    http: reqwest::Client,
    config: ClientConfig,
    redactor: Redactor,
    usage: Mutex<Usage>,
    /// Requests in flight at once, across the clients sharing it.
    slots: Option<std::sync::Arc<tokio::sync::Semaphore>>,
    /// The structured-output dialect to ask in next (see the module doc).
    dialect: Mutex<Dialect>,
}

/// The body of a chat completion request.
#[derive(Serialize)]
struct ChatRequest<'a> {
    model: &'a str,
    messages: &'a [Message],
    max_tokens: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_format: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct ChatResponse {
    choices: Vec<Choice>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
struct Choice {
    message: ChoiceMessage,
}

#[derive(Deserialize)]
struct ChoiceMessage {
    #[serde(default)]
    content: Option<String>,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
}

/// How one attempt ended.
enum Attempt {
    Answered(Vec<u8>),
    /// Worth another attempt, after at least this long (`Retry-After`).
    Again {
        why: String,
        after: Option<Duration>,
    },
    Failed(LlmError),
    /// A 400 or 422 to a request that asked for structured output: the
    /// server may not take that dialect.
    FormatRefused(LlmError),
}

/// Why a request (with its retries) gave no answer.
enum NotSent {
    Failed(LlmError),
    /// The server refused the request's structured-output dialect.
    FormatRefused,
}

impl Client {
    /// A client for `config`; `redactor` holds the plan's secrets.
    pub fn new(config: ClientConfig, redactor: Redactor) -> Result<Client, LlmError> {
        // reqwest has no crypto provider of its own here (see main).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let endpoint = config.endpoint();
        let url = reqwest::Url::parse(&endpoint).map_err(|e| LlmError::Refused {
            endpoint: redactor.redact(&endpoint),
            status: 0,
            body: format!("`base_url` is not a URL: {e}"),
        })?;
        let mut builder = reqwest::Client::builder()
            .timeout(config.timeout)
            .connect_timeout(config.timeout)
            .user_agent(concat!("gameplan/", env!("CARGO_PKG_VERSION")));
        if matches!(url.host_str(), Some("127.0.0.1" | "localhost" | "[::1]")) {
            // A proxy must not stand between gameplan and a local model.
            builder = builder.no_proxy();
        }
        let http = builder.build().map_err(|e| LlmError::Unreachable {
            endpoint: redactor.redact(&endpoint),
            attempts: 0,
            last: format!("cannot set up an HTTP client: {e}"),
        })?;
        let usage = Usage {
            model: config.model.clone(),
            max_usd: config.max_usd,
            cost_usd: config.effective_price().map(|_| 0.0),
            ..Usage::default()
        };
        Ok(Client {
            http,
            config,
            redactor,
            usage: Mutex::new(usage),
            slots: None,
            dialect: Mutex::new(Dialect::JsonSchema),
        })
    }

    /// This client, sending requests only while it holds one of `slots`.
    #[must_use]
    pub fn sharing(mut self, slots: Option<std::sync::Arc<tokio::sync::Semaphore>>) -> Client {
        self.slots = slots;
        self
    }

    pub fn config(&self) -> &ClientConfig {
        &self.config
    }

    /// What this client spent so far.
    pub fn usage(&self) -> Usage {
        self.usage
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Whether the budget is used up: no call of any size fits any more.
    pub fn budget_spent(&self) -> bool {
        let usage = self.usage();
        matches!((usage.cost_usd, usage.max_usd), (Some(spent), Some(max)) if spent >= max)
    }

    /// Refuses a call that could pass the budget (see the module doc).
    fn check_budget(&self, messages: &[Message], max_tokens: u32) -> Result<(), LlmError> {
        let (Some(price), Some(max)) = (self.config.effective_price(), self.config.max_usd) else {
            return Ok(());
        };
        let prompt_bytes: usize = messages.iter().map(|m| m.content.len() + 8).sum();
        let next = price.cost(prompt_bytes.div_ceil(3) as u64, u64::from(max_tokens));
        let spent = self.usage().cost_usd.unwrap_or(0.0);
        if spent + next > max {
            return Err(LlmError::Budget {
                spent_usd: spent,
                max_usd: max,
                next_usd: next,
            });
        }
        Ok(())
    }

    /// One chat completion: the first choice's text, with at most
    /// `max_tokens` tokens of answer.
    pub async fn chat(&self, messages: &[Message], max_tokens: u32) -> Result<Answer, LlmError> {
        self.chat_with(messages, max_tokens, Call::default()).await
    }

    /// [`Client::chat`], asked as `call` says.
    pub async fn chat_with(
        &self,
        messages: &[Message],
        max_tokens: u32,
        call: Call<'_>,
    ) -> Result<Answer, LlmError> {
        self.check_budget(messages, max_tokens)?;
        loop {
            let dialect = match call.schema {
                Some(_) => *self.dialect.lock().unwrap_or_else(PoisonError::into_inner),
                None => Dialect::Plain,
            };
            let body = ChatRequest {
                model: &self.config.model,
                messages,
                max_tokens,
                temperature: self.config.temperature,
                response_format: call
                    .schema
                    .and_then(|schema| dialect.response_format(schema)),
            };
            match self.send(&body, call).await {
                // Only a request with a `response_format` ends so: ask
                // again at once in the next dialect (another cell may
                // have moved on already).
                Err(NotSent::FormatRefused) => {
                    let mut current = self.dialect.lock().unwrap_or_else(PoisonError::into_inner);
                    if *current == dialect {
                        *current = dialect.next();
                    }
                }
                Err(NotSent::Failed(e)) => return Err(e),
                Ok(bytes) => {
                    let mut answer = self.answered(&bytes)?;
                    answer.structured = body.response_format.is_some();
                    return Ok(answer);
                }
            }
        }
    }

    /// The structured-output dialect the next call with a schema is asked in.
    pub fn dialect(&self) -> Dialect {
        *self.dialect.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// One request, with its retries: the answer's bytes, or how it failed.
    async fn send(&self, body: &ChatRequest<'_>, call: Call<'_>) -> Result<Vec<u8>, NotSent> {
        let endpoint = self.config.endpoint();
        let attempts = self.config.max_attempts.max(1);
        let mut wait = self.config.backoff;
        let mut last = String::new();
        for attempt in 1..=attempts {
            // A closed semaphore never happens (nobody closes it); no permit
            // then means no bound.
            let permit = match &self.slots {
                Some(slots) => slots.acquire().await.ok(),
                None => None,
            };
            let attempted = self.attempt(&endpoint, body, call.timeout).await;
            drop(permit);
            match attempted {
                Attempt::Answered(bytes) => return Ok(bytes),
                Attempt::Again { why, after: _ }
                    if call.once_on_timeout && why.starts_with(TIMED_OUT) =>
                {
                    return Err(NotSent::Failed(LlmError::Unreachable {
                        endpoint: self.redactor.redact(&endpoint),
                        attempts: attempt,
                        last: self.redactor.redact(&why),
                    }));
                }
                Attempt::Again { why, after } => {
                    last = why;
                    if attempt < attempts {
                        self.usage
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .retries += 1;
                        let pause = after.map_or(wait, |a| a.max(wait)).min(MAX_BACKOFF);
                        tokio::time::sleep(pause).await;
                        wait = (wait * 2).min(MAX_BACKOFF);
                    }
                }
                Attempt::FormatRefused(_) if body.response_format.is_some() => {
                    return Err(NotSent::FormatRefused);
                }
                Attempt::Failed(e) | Attempt::FormatRefused(e) => return Err(NotSent::Failed(e)),
            }
        }
        Err(NotSent::Failed(LlmError::Unreachable {
            endpoint: self.redactor.redact(&endpoint),
            attempts,
            last: self.redactor.redact(&last),
        }))
    }

    async fn attempt(
        &self,
        endpoint: &str,
        body: &ChatRequest<'_>,
        timeout: Option<Duration>,
    ) -> Attempt {
        let mut request = self.http.post(endpoint).json(body);
        if let Some(timeout) = timeout {
            request = request.timeout(timeout);
        }
        if let Some(key) = &self.config.api_key {
            request = request.bearer_auth(key);
        }
        let mut response = match request.send().await {
            Ok(response) => response,
            Err(e) => {
                let why = if e.is_timeout() {
                    format!(
                        "{TIMED_OUT} {:.1} s",
                        timeout.unwrap_or(self.config.timeout).as_secs_f64()
                    )
                } else {
                    format!("cannot connect ({})", root_cause(&e))
                };
                return Attempt::Again { why, after: None };
            }
        };
        let status = response.status();
        let retry_after = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let read = read_capped(&mut response, MAX_ANSWER_BYTES).await;
        // llama-cpp-python's server answers a `response_format` it does
        // not know with a 500 naming it: no retry would change that.
        if status.is_server_error()
            && body.response_format.is_some()
            && read
                .as_ref()
                .is_ok_and(|b| String::from_utf8_lossy(b).contains("response_format"))
        {
            return Attempt::FormatRefused(LlmError::Refused {
                endpoint: self.redactor.redact(endpoint),
                status: status.as_u16(),
                body: "the server does not take this response_format".to_owned(),
            });
        }
        if status.as_u16() == 429 || status.is_server_error() {
            return Attempt::Again {
                why: format!("HTTP {status}"),
                after: retry_after,
            };
        }
        let bytes = match read {
            Ok(bytes) => bytes,
            Err(Read::TooLarge) => {
                return Attempt::Failed(LlmError::BadAnswer(format!(
                    "the answer is larger than {} KiB",
                    MAX_ANSWER_BYTES / 1024
                )));
            }
            Err(Read::Broken(why)) if status.is_success() => {
                return Attempt::Again {
                    why: format!("the answer broke off ({why})"),
                    after: None,
                };
            }
            Err(Read::Broken(_)) => Vec::new(),
        };
        if !status.is_success() {
            let text = String::from_utf8_lossy(&bytes);
            let text = crate::text::cut(text.trim(), 300);
            let refused = LlmError::Refused {
                endpoint: self.redactor.redact(endpoint),
                status: status.as_u16(),
                body: self.redactor.redact(&text),
            };
            // A server that does not know a dialect of structured output
            // says so as a bad request (400) or a failed validation (422).
            return if matches!(status.as_u16(), 400 | 422) && body.response_format.is_some() {
                Attempt::FormatRefused(refused)
            } else {
                Attempt::Failed(refused)
            };
        }
        Attempt::Answered(bytes)
    }

    /// Reads a 200's body and counts its usage.
    fn answered(&self, bytes: &[u8]) -> Result<Answer, LlmError> {
        let parsed: ChatResponse = serde_json::from_slice(bytes).map_err(|e| {
            let shown = crate::text::cut(&String::from_utf8_lossy(bytes), 120);
            LlmError::BadAnswer(
                self.redactor
                    .redact(&format!("not a chat completion ({e}): {shown}")),
            )
        })?;
        let (input, output) = parsed
            .usage
            .as_ref()
            .map_or((0, 0), |u| (u.prompt_tokens, u.completion_tokens));
        {
            let mut usage = self.usage.lock().unwrap_or_else(PoisonError::into_inner);
            usage.calls += 1;
            usage.input_tokens += input;
            usage.output_tokens += output;
            if let Some(price) = self.config.effective_price() {
                *usage.cost_usd.get_or_insert(0.0) += price.cost(input, output);
            }
        }
        let text = parsed
            .choices
            .into_iter()
            .next()
            .and_then(|c| c.message.content)
            .ok_or_else(|| LlmError::BadAnswer("the answer has no choice with text".to_owned()))?;
        Ok(Answer {
            text: self.redactor.redact(&text),
            input_tokens: input,
            output_tokens: output,
            structured: false,
        })
    }
}

/// How a timed-out attempt's reason starts (a call may not repeat one).
const TIMED_OUT: &str = "no answer within";

/// How many `{` (and, for each, `}`) [`json_in`] tries in prose.
const JSON_TRIES: usize = 8;

/// The JSON object an answer holds, for a caller that asked for one (an
/// `llm` lens's verdict): the whole text, a fenced `json` code block, or the
/// first `{…}` in it that parses. Models wrap JSON in prose and fences;
/// `None` when no object parses (a bad answer for the caller).
pub fn json_in(text: &str) -> Option<serde_json::Value> {
    let parse = |t: &str| {
        serde_json::from_str::<serde_json::Value>(t.trim())
            .ok()
            .filter(serde_json::Value::is_object)
    };
    if let Some(value) = parse(text) {
        return Some(value);
    }
    if let Some((_, rest)) = text.split_once("```")
        && let Some((block, _)) = rest.split_once("```")
    {
        let block = block.strip_prefix("json").unwrap_or(block);
        if let Some(value) = parse(block) {
            return Some(value);
        }
    }
    // The first `{` whose object parses, up to a `}` after it, the
    // longest first; a few of each, so an answer of braces costs little.
    text.match_indices('{')
        .take(JSON_TRIES)
        .find_map(|(start, _)| {
            text[start..]
                .rmatch_indices('}')
                .take(JSON_TRIES)
                .find_map(|(end, _)| parse(&text[start..=start + end]))
        })
}

enum Read {
    TooLarge,
    Broken(String),
}

/// The body, up to `cap` bytes; stops reading (and drops the connection)
/// past it, so a runaway server cannot fill memory.
async fn read_capped(response: &mut reqwest::Response, cap: usize) -> Result<Vec<u8>, Read> {
    if response.content_length().is_some_and(|n| n > cap as u64) {
        return Err(Read::TooLarge);
    }
    let mut bytes = Vec::new();
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                if bytes.len() + chunk.len() > cap {
                    return Err(Read::TooLarge);
                }
                bytes.extend_from_slice(&chunk);
            }
            Ok(None) => return Ok(bytes),
            Err(e) => return Err(Read::Broken(root_cause(&e))),
        }
    }
}

fn root_cause(e: &reqwest::Error) -> String {
    let mut current: &dyn std::error::Error = e;
    while let Some(next) = current.source() {
        current = next;
    }
    current.to_string()
}

#[cfg(test)]
mod tests;

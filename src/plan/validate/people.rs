//! Personas, their players (the llm player's model and price), lenses
//! and their charters, and the programs a lens or player runs.

use super::Validator;
use crate::plan::decode::Spanned;
use crate::plan::diagnostic::Diagnostic;
use crate::plan::model::{Budget, Card, Judge, Lens, LensKind, LensOver, Persona, Player, Program};
use crate::plan::raw::{RawLens, RawPersona, RawPlayer};
use crate::plan::source::Span;

/// The fewest and most answer tokens "How it felt" may be given.
const FELT_MIN_TOKENS: u32 = 16;
const FELT_MAX_TOKENS: u32 = 4096;

impl Validator<'_> {
    pub(super) fn persona(&mut self, p: &RawPersona, budget: Option<&Budget>) -> Option<Persona> {
        let card = match (&p.card, &p.card_file) {
            (Some(text), None) => Some(Card::Text(text.clone())),
            (None, Some(file)) => {
                self.repo_file(file, "card_file");
                Some(Card::File(file.value.clone()))
            }
            (Some(_), Some(file)) => {
                self.push(
                    Diagnostic::new(
                        "plan::conflicting_keys",
                        format!("persona `{}` has both `card` and `card_file`", p.slug.value),
                    )
                    .at(file.span)
                    .help("keep one of them"),
                );
                None
            }
            (None, None) => {
                self.push(
                    Diagnostic::new("plan::missing_key", format!("persona `{}` needs a `card` or a `card_file`", p.slug.value))
                        .at(p.slug.span)
                        .label("no card")
                        .help("the card tells the player who it is: `card = \"Nine years old, clicks everything.\"`"),
                );
                None
            }
        };
        let player = match p.player.as_ref().map(|p| &p.value) {
            None => Player::Explorer { seed: None },
            Some(RawPlayer::Scripted { actions }) => Player::Scripted {
                actions: actions.clone(),
            },
            Some(RawPlayer::Random { seed }) => Player::Random { seed: *seed },
            Some(RawPlayer::Explorer { seed }) => Player::Explorer { seed: *seed },
            Some(RawPlayer::Llm {
                model,
                base_url,
                api_key,
                temperature,
                price,
                prompt_file,
                timeout,
                fallback,
                structured,
                felt_timeout,
                felt_max_tokens,
            }) => {
                let price = price.as_ref().and_then(|price| self.price(price));
                self.llm_player(
                    &p.slug.value,
                    model,
                    price,
                    prompt_file.as_ref(),
                    [timeout.as_ref(), felt_timeout.as_ref()],
                    budget,
                );
                self.felt_tokens(felt_max_tokens.as_ref());
                Player::Llm {
                    model: model.value.clone(),
                    base_url: base_url.clone(),
                    api_key: api_key.clone(),
                    temperature: *temperature,
                    price,
                    prompt_file: prompt_file.as_ref().map(|f| f.value.clone()),
                    timeout_secs: timeout.as_ref().map(|t| t.value),
                    fallback: fallback.as_ref().map(|f| f.value).unwrap_or_default(),
                    structured: structured.unwrap_or(true),
                    felt_timeout_secs: felt_timeout.as_ref().map(|t| t.value),
                    felt_max_tokens: felt_max_tokens.as_ref().map(|t| t.value),
                }
            }
        };
        Some(Persona {
            slug: p.slug.value.clone(),
            card: card?,
            player,
            patience: p.patience,
        })
    }

    /// A price of non-negative, finite numbers.
    pub(super) fn price(
        &mut self,
        price: &Spanned<crate::plan::raw::RawPrice>,
    ) -> Option<crate::token_price::Price> {
        let mut ok = true;
        for value in [&price.input_per_mtok, &price.output_per_mtok] {
            if !value.value.is_finite() || value.value < 0.0 {
                ok = false;
                self.push(
                    Diagnostic::new(
                        "plan::invalid_price",
                        format!("price {} is not a price", value.value),
                    )
                    .at(value.span)
                    .label("expected USD per million tokens, 0 or more")
                    .help("e.g. `price = { input_per_mtok = 0.15, output_per_mtok = 0.60 }`"),
                );
            }
        }
        ok.then_some(crate::token_price::Price {
            input_per_mtok: price.input_per_mtok.value,
            output_per_mtok: price.output_per_mtok.value,
        })
    }

    /// A model with no price (the plan's or the built-in table's) under a
    /// `max_model_usd` cannot be bounded: an `llm` player's or lens's.
    pub(super) fn unpriced_model(
        &mut self,
        owner: &str,
        holder: &str,
        model: &Spanned<String>,
        price: Option<crate::token_price::Price>,
        budget: Option<&Budget>,
    ) {
        let bounded = budget.and_then(|b| b.max_model_usd);
        if let Some(max) = bounded
            && price.is_none()
            && crate::token_price::Price::builtin(&model.value).is_none()
        {
            self.push(
                Diagnostic::new(
                    "plan::unpriced_model",
                    format!(
                        "{owner}: model `{}` has no price, so `max_model_usd = {max}` cannot bound what it spends",
                        model.value
                    ),
                )
                .at(model.span)
                .label("no price known for this model")
                .help(format!(
                    "add `price = {{ input_per_mtok = …, output_per_mtok = … }}` (USD per million tokens) to the {holder}; built-in prices: {}",
                    crate::token_price::Price::builtin_names().join(", ")
                )),
            );
        }
    }

    /// An `llm` player's money and prompt: a model with no price under a
    /// `max_model_usd` cannot be bounded, and a prompt template that does
    /// not compile would fail every cell.
    pub(super) fn llm_player(
        &mut self,
        slug: &str,
        model: &Spanned<String>,
        price: Option<crate::token_price::Price>,
        prompt_file: Option<&Spanned<String>>,
        [timeout, felt_timeout]: [Option<&Spanned<u64>>; 2],
        budget: Option<&Budget>,
    ) {
        self.unpriced_model(&format!("persona `{slug}`"), "player", model, price, budget);
        for (key, t) in [("timeout", timeout), ("felt_timeout", felt_timeout)] {
            if let Some(t) = t
                && t.value == 0
            {
                self.push(
                    Diagnostic::new(
                        "plan::invalid_timeout",
                        format!("`{key}` must be at least 1 second"),
                    )
                    .at(t.span)
                    .label("0 seconds"),
                );
            }
        }
        if let Some(file) = prompt_file
            && let Some(source) = self.prompt_sized_file(
                file,
                "prompt_file",
                &format!("persona `{slug}`"),
                "a prompt template is a page of text; the turn's observation and history are filled in when it is rendered",
            ) && let Err(e) = crate::template::check_prompt(&source)
            {
                let mut d = Diagnostic::new(
                    "plan::invalid_prompt",
                    format!(
                        "persona `{slug}`: prompt_file `{}`: {}",
                        file.value, e.message
                    ),
                )
                .at(file.span)
                .label("does not compile");
                if let Some(help) = e.help {
                    d = d.help(help);
                }
                self.push(d);
        }
    }

    /// "How it felt" needs room for a sentence, and a cap keeps its cost
    /// (and a slow local server's time) bounded.
    fn felt_tokens(&mut self, tokens: Option<&Spanned<u32>>) {
        if let Some(t) = tokens
            && !(FELT_MIN_TOKENS..=FELT_MAX_TOKENS).contains(&t.value)
        {
            self.push(
                Diagnostic::new(
                    "plan::invalid_value",
                    format!(
                        "`felt_max_tokens = {}` is out of range ({FELT_MIN_TOKENS}..={FELT_MAX_TOKENS})",
                        t.value
                    ),
                )
                .at(t.span)
                .label("answer tokens for \"How it felt\"")
                .help("three or four sentences take about 150 tokens; the default is 200"),
            );
        }
    }

    pub(super) fn lens(&mut self, l: &RawLens, budget: Option<&Budget>) -> Option<Lens> {
        let judge = match l.kind {
            LensKind::Rule => {
                let when = l.when.as_ref()?;
                if let Err(e) = self.templates.check_expression(when, &["unit", "reviewer"]) {
                    let mut d = Diagnostic::new(
                        "plan::invalid_expression",
                        format!("lens `{}`: {}", l.name.value, e.message),
                    )
                    .at(when.span)
                    .label("does not compile");
                    if let Some(help) = e.help {
                        d = d.help(help);
                    }
                    self.push(d);
                }
                Judge::Rule {
                    when: when.value.clone(),
                }
            }
            LensKind::Command => Judge::Command {
                program: self.program(
                    l.run.as_ref(),
                    l.argv.as_ref(),
                    l.name.span,
                    &format!("lens `{}`", l.name.value),
                )?,
            },
            LensKind::Llm => self.llm_lens(l, budget)?,
        };
        let sources: Vec<Spanned<String>> = match l.over.value {
            LensOver::Files => l.files.clone().unwrap_or_default(),
            LensOver::Patches => l.patches.clone().into_iter().collect(),
            LensOver::Findings | LensOver::Runs => Vec::new(),
        };
        for s in &sources {
            self.repo_path(s, "lens source");
        }
        if let Some(t) = l.timeout.as_ref().filter(|t| t.value == 0) {
            self.push(
                Diagnostic::new(
                    "plan::invalid_value",
                    format!("lens `{}`: `timeout` is 0 seconds", l.name.value),
                )
                .at(t.span)
                .label("no call can answer in no time")
                .help("give the seconds one call of the lens may take, at least 1"),
            );
        }
        Some(Lens {
            name: l.name.value.clone(),
            over: l.over.value,
            judge,
            sources: sources.into_iter().map(|s| s.value).collect(),
            timeout_secs: l.timeout.as_ref().map(|t| t.value),
        })
    }

    /// An llm lens's judge: its charter, model and price.
    pub(super) fn llm_lens(&mut self, l: &RawLens, budget: Option<&Budget>) -> Option<Judge> {
        let charter = match (&l.charter, &l.charter_file) {
            (Some(text), None) => {
                self.charter(&l.name.value, &text.value, text.span, "inline");
                Card::Text(text.value.clone())
            }
            (None, Some(file)) => {
                if let Some(source) = self.prompt_sized_file(
                    file,
                    "charter_file",
                    &format!("lens `{}`", l.name.value),
                    "a charter is a page of text; the unit is filled in when it is rendered",
                ) {
                    self.charter(&l.name.value, &source, file.span, "its file");
                }
                Card::File(file.value.clone())
            }
            _ => {
                self.push(
                    Diagnostic::new(
                        "plan::missing_key",
                        format!(
                            "llm lens `{}` needs exactly one of `charter` and `charter_file`",
                            l.name.value
                        ),
                    )
                    .at(l.name.span)
                    .help("the charter tells the reviewer what to look for"),
                );
                return None;
            }
        };
        // `model` is required when the lens is read: a lens without
        // one was already reported.
        let model = l.model.as_ref()?;
        let price = l.price.as_ref().and_then(|p| self.price(p));
        self.unpriced_model(
            &format!("lens `{}`", l.name.value),
            "lens",
            model,
            price,
            budget,
        );
        Some(Judge::Llm {
            charter,
            model: model.value.clone(),
            base_url: l.base_url.clone(),
            api_key: l.api_key.clone(),
            price,
        })
    }

    /// An llm lens's charter compiles (it is rendered per unit at review
    /// time; a broken one would leave every unit missing).
    pub(super) fn charter(
        &mut self,
        lens: &str,
        source: &str,
        span: crate::plan::source::Span,
        what: &str,
    ) {
        if let Err(e) = crate::template::check_prompt(source) {
            let message = e
                .message
                .replace("invalid prompt template", "invalid charter template");
            self.push(
                Diagnostic::new("plan::invalid_charter", format!("lens `{lens}`: {message}"))
                    .at(span)
                    .label(format!("does not compile ({what})"))
                    .help("a charter is a minijinja template reading `unit` (its fields), `reviewer` (`slug`, `card`, or none) and `lens`"),
            );
        }
    }

    pub(in crate::plan) fn program(
        &mut self,
        run: Option<&Spanned<String>>,
        argv: Option<&Spanned<Vec<String>>>,
        at: Span,
        what: &str,
    ) -> Option<Program> {
        match (run, argv) {
            (Some(run), None) => Some(Program::Shell(run.value.clone())),
            (None, Some(argv)) if argv.value.is_empty() => {
                self.push(
                    Diagnostic::new("plan::empty_list", "`argv` is empty")
                        .at(argv.span)
                        .label("no program"),
                );
                None
            }
            (None, Some(argv)) => Some(Program::Argv(argv.value.clone())),
            (Some(_), Some(argv)) => {
                self.push(
                    Diagnostic::new("plan::conflicting_keys", format!("{what} has both `run` and `argv`"))
                        .at(argv.span)
                        .help("`run` is a shell command line; `argv` runs a program without a shell. Keep one."),
                );
                None
            }
            (None, None) => {
                self.push(
                    Diagnostic::new("plan::missing_key", format!("{what} needs `run` or `argv`"))
                        .at(at)
                        .label("nothing to run")
                        .help("add `run = \"make game\"` (a shell line) or `argv = [\"make\", \"game\"]`"),
                );
                None
            }
        }
    }
}

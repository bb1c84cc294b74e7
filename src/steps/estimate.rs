//! The `estimate` step kind: prices the play cells that will actually run
//! and asks before anything is bought: nothing that costs money happens
//! before the price was shown and accepted (docs/money.md › The estimate).
//!
//! In order, each a stop before any question and before any charge:
//!
//! 1. **Already accepted.** On resume, a quote this step journaled is the
//!    person's yes: it succeeds without asking again.
//! 2. **Scopes.** `whoami` first: a token without `playtest:write`,
//!    `playtest:model` and `playtest:upload` stops the run (exit 4) with
//!    nothing priced, naming the missing ones and how to make a token.
//! 3. **Which cells.** The play cells related to this step
//!    ([`StepIo::cells_ahead`]: those below it, as in the default
//!    pipeline, or above it), less those that will be reused: a reused
//!    cell is not bought. When none is left it says so and journals a
//!    quote with no cells, so the money steps below buy nothing.
//! 4. **Smoke check.** The game starts and answers `hello` and one
//!    `reset` within `game.action_timeout` (the opening every play cell
//!    makes, `play::cell::open`), else exit 3 with the game's stderr: no
//!    studio pays for the cells of a build that cannot start.
//! 5. **Price.** One `estimate` call for the bought cells at the run
//!    length [`run_length`] picks; each unit, the total, the balance and
//!    where the money is go to the run's output.
//! 6. **Refusals before the question** (exit 3): a quote above
//!    `budget.max_cents`, or above the balance.
//! 7. **The question.** `--yes` answers; no terminal and no `--yes` is a
//!    no (exit 10). A yes is journaled durably as the [`QuoteRecord`]
//!    `register` buys, before the step succeeds.
//!
//! Never reused: a price and a balance are of the moment.

use serde_json::json;

use super::money::{self, BoughtCell, QuoteRecord};
use super::{
    BoxFuture, CellAhead, KeyContext, Kind, Outputs, Reuse, StepContext, StepError, StepIo,
    StepOutcome, game,
};
use crate::backend::Connection;
use crate::backend::api::{ApiError, Cell, EstimateRequest, RunLength, SCOPES, Whoami};
use crate::backend::ledger::{DEMO_PRICES, DEMO_TOKEN};
use crate::plan::model::{BackendKind, Plan, StepKind};
use crate::play::driver::{Driver as _, Session};
use crate::report::ledger::dollars;
use crate::report::quote::{self, MoneyAt};

pub struct Estimate;

impl Kind for Estimate {
    fn kind(&self) -> StepKind {
        StepKind::Estimate
    }

    fn reuse(&self, _cx: &KeyContext<'_>) -> Result<Reuse, StepError> {
        Ok(Reuse::Never(
            "it prices the cells that will run against the balance of now, and asks: never reused"
                .into(),
        ))
    }

    fn run<'a>(&'a self, cx: &'a StepContext, io: &'a StepIo) -> BoxFuture<'a, StepOutcome> {
        Box::pin(run(cx, io))
    }

    fn outputs(&self, cx: &StepContext) -> Result<Outputs, StepError> {
        // What it leaves is its journaled quote, not files.
        Ok(Outputs {
            base: cx.step_dir.clone(),
            files: Vec::new(),
        })
    }

    fn kill_now(&self) {
        game::kill_now();
    }

    fn uses_backend(&self) -> bool {
        true
    }

    fn reads_cells_ahead(&self) -> bool {
        true
    }
}

/// What every refusal of this step says was charged.
const NOTHING: &str = "Nothing was charged.";

async fn run(cx: &StepContext, io: &StepIo) -> StepOutcome {
    let id = &cx.instance.id;
    if let Some(quote) = money::quote_of(io) {
        (cx.note)(&format!(
            "{id}: the price was accepted before the run stopped ({} for {} cells): not asked again",
            dollars(quote.estimate_cents),
            quote.cells.len()
        ));
        return StepOutcome::Succeeded;
    }
    let Some(connection) = io.backend() else {
        return StepOutcome::Failed {
            exit_code: None,
            message: "no backend was opened for this run, so nothing can be priced. Nothing was \
                      charged."
                .into(),
        };
    };
    io.mark_started();
    let me = match scopes(connection).await {
        Ok(me) => me,
        Err(outcome) => return outcome,
    };
    let ahead = io.cells_ahead();
    let bought: Vec<&CellAhead> = ahead.iter().filter(|c| !c.reused).collect();
    let game_id = cx
        .plan
        .game
        .as_ref()
        .map(|g| g.id.clone())
        .unwrap_or_default();
    if bought.is_empty() {
        (cx.note)(&if ahead.is_empty() {
            format!("{id}: nothing needs buying: this run plays no cell")
        } else {
            format!(
                "{id}: nothing needs buying: all {} cells are reused. Nothing was priced or \
                 charged",
                ahead.len()
            )
        });
        return journal(
            io,
            &QuoteRecord {
                game: game_id,
                quote_id: String::new(),
                estimate_cents: 0,
                balance_cents: 0,
                expires_at: String::new(),
                run_length: RunLength::Short,
                modules: Vec::new(),
                cells: Vec::new(),
            },
        )
        .await;
    }
    if let Err(outcome) = smoke_check(cx).await {
        return outcome;
    }
    let (quote, covered) = match price(cx, connection, &me, &game_id, &bought, ahead.len()).await {
        Ok(priced) => priced,
        Err(outcome) => return outcome,
    };
    if let Some(outcome) = over_a_limit(cx, &me, &quote, covered) {
        return outcome;
    }
    let price = dollars(quote.estimate_cents);
    let question = format!(
        "Buy {} cells for {price} (account {}, balance {})?",
        quote.cells.len(),
        me.user,
        dollars(quote.balance_cents)
    );
    if !io.confirm(&question).await {
        if let Some(stop) = cx.stopped(format!("stopped at the price question. {NOTHING}")) {
            return stop;
        }
        return StepOutcome::Declined {
            message: format!(
                "declined at the price question ({price} for {} cells). {NOTHING} Answer yes at a \
                 terminal, or pass --yes (without a terminal the answer is no)",
                quote.cells.len()
            ),
        };
    }
    journal(io, &quote).await
}

/// Prices `bought` (of `related` cells) and shows the table: the quote
/// `register` will buy once accepted, and whether the balance covers it
/// (the backend's `ok`).
async fn price(
    cx: &StepContext,
    connection: &Connection,
    me: &Whoami,
    game_id: &str,
    bought: &[&CellAhead],
    related: usize,
) -> Result<(QuoteRecord, bool), StepOutcome> {
    let length = run_length(&cx.plan, bought.iter().map(|c| c.persona.as_str()));
    let request = EstimateRequest {
        cells: bought
            .iter()
            .map(|c| Cell::new(&c.persona, &c.controller))
            .collect(),
        modules: Vec::new(),
        run_length: length,
    };
    let estimate = connection
        .backend
        .estimate(&connection.token, game_id, &request)
        .await
        .map_err(|e| refused(&e, "pricing the cells", NOTHING))?;
    let reused = related - bought.len();
    let reused_note = if reused == 0 {
        String::new()
    } else {
        format!(", {reused} reused (not bought)")
    };
    (cx.note)(&format!(
        "{}: {} cells to buy{reused_note}; {} runs",
        cx.instance.id,
        bought.len(),
        length.as_str()
    ));
    for line in quote::price_table(&estimate, &me.user) {
        (cx.note)(&line);
    }
    (cx.note)(&quote::money_line(&money_at(cx, connection)));
    let quote = QuoteRecord {
        game: game_id.to_owned(),
        quote_id: estimate.quote_id,
        estimate_cents: estimate.estimate_cents,
        balance_cents: estimate.balance_cents,
        expires_at: estimate.expires_at,
        run_length: length,
        modules: request.modules,
        cells: bought
            .iter()
            .map(|c| BoughtCell {
                id: c.id.clone(),
                persona: c.persona.clone(),
                controller: c.controller.clone(),
            })
            .collect(),
    };
    Ok((quote, estimate.ok))
}

/// Exit 3 before any question: a quote above `budget.max_cents`, or above
/// the balance.
fn over_a_limit(
    cx: &StepContext,
    me: &Whoami,
    quote: &QuoteRecord,
    covered: bool,
) -> Option<StepOutcome> {
    let price = dollars(quote.estimate_cents);
    if let Some(max) = cx.plan.budget.max_cents {
        let max = i64::try_from(max).unwrap_or(i64::MAX);
        if quote.estimate_cents > max {
            return Some(StepOutcome::Refused {
                message: format!(
                    "the quote {price} for {} cells is above budget.max_cents ({}). {NOTHING} \
                     Raise `[budget] max_cents`, or play fewer cells (fewer personas, \
                     controllers or seeds)",
                    quote.cells.len(),
                    dollars(max),
                ),
            });
        }
    }
    if !covered {
        return Some(StepOutcome::Refused {
            message: format!(
                "the quote {price} is above the balance of account `{}` ({}). {NOTHING} {}",
                me.user,
                dollars(quote.balance_cents),
                topup_hint(
                    cx,
                    &me.user,
                    (quote.estimate_cents - quote.balance_cents).max(1)
                ),
            ),
        });
    }
    None
}

/// Journals `quote` durably (what `register` buys); the step succeeds once
/// it is on disk.
async fn journal(io: &StepIo, quote: &QuoteRecord) -> StepOutcome {
    let record = match serde_json::to_value(quote) {
        Ok(record) => record,
        Err(e) => {
            return StepOutcome::Failed {
                exit_code: None,
                message: format!("cannot write the quote down: {e}. {NOTHING}"),
            };
        }
    };
    match io.checkpoint_durable(json!({ money::QUOTE: record })).await {
        Ok(()) => {
            // Where a kill -9 leaves an accepted quote and an unfinished
            // step: the resume must not ask again.
            money::crash_point("estimate", money::Boundary::ResponseJournaled);
            StepOutcome::Succeeded
        }
        Err(e) => StepOutcome::Failed {
            exit_code: None,
            message: format!("cannot journal the accepted quote: {e}. {NOTHING}"),
        },
    }
}

/// The token's account, once it holds every scope a run needs; otherwise
/// the exit-4 outcome naming what is missing and how to get it.
async fn scopes(connection: &Connection) -> Result<Whoami, StepOutcome> {
    let make = format!("gameplan ledger token --scopes {}", SCOPES.join(","));
    let me = match connection.backend.whoami(&connection.token).await {
        Ok(me) => me,
        Err(e) => {
            let charged = "Nothing was priced or charged.";
            return Err(match refused(&e, "checking the token", charged) {
                StepOutcome::Unauthorized { message } => StepOutcome::Unauthorized {
                    message: format!(
                        "{message} Make a token with every scope (`{make}`) and give it as \
                         `[backend] token`"
                    ),
                },
                other => other,
            });
        }
    };
    let missing: Vec<&str> = SCOPES
        .iter()
        .copied()
        .filter(|s| !me.scopes.iter().any(|h| h == s))
        .collect();
    if missing.is_empty() {
        return Ok(me);
    }
    let one = if missing.len() == 1 { "" } else { "s" };
    Err(StepOutcome::Unauthorized {
        message: format!(
            "the token of account `{}` lacks the scope{one} {} (a paid run needs {}). Nothing \
             was priced or charged. Make a token with every scope (`{make} --account {}`) and \
             give it as `[backend] token`",
            me.user,
            missing.join(", "),
            SCOPES.join(", "),
            me.user,
        ),
    })
}

/// A backend error of `doing` as this step's outcome: [`money::refusal`],
/// except that an answer that never came is exit 3, not an open run. A
/// price moves no money, so nothing needs replaying: the backend could
/// not be reached before anything was charged.
fn refused(e: &ApiError, doing: &str, charged: &str) -> StepOutcome {
    if e.uncertain {
        return StepOutcome::Refused {
            message: format!(
                "{doing}: the backend gave no answer ({}). {charged} Check that it runs and \
                 `[backend] url`, then run again",
                e.message
            ),
        };
    }
    money::refusal(e, doing, charged)
}

/// The game starts and answers `hello` and one `reset` within its action
/// timeout, with the opening every play cell makes; otherwise exit 3 with
/// why and the game's stderr. A browser game: chromedriver and Chromium
/// start and the page loads (its `hello` and `reset`). Seed 1: the check is that the build starts,
/// not how a seed plays.
async fn smoke_check(cx: &StepContext) -> Result<(), StepOutcome> {
    if cx.plan.game.is_none() {
        return Err(StepOutcome::Refused {
            message: format!("the plan has no `[game]` to play. {NOTHING}"),
        });
    }
    let spec = game::spec(cx).map_err(|e| StepOutcome::Refused {
        message: format!("the game did not start: {e}. {NOTHING}"),
    })?;
    // The same start a cell makes: a stdio game's process, or chromedriver,
    // Chromium and the page (then `hello` and `reset` load it).
    let mut process = Session::start(&spec, None)
        .await
        .map_err(|e| StepOutcome::Refused {
            message: format!(
                "the game did not start: {e}. {NOTHING} Check `[game] {}`, then run again",
                spec.target.driver().row().starts.key()
            ),
        })?;
    let mut cancel = cx.cancel.clone();
    let opened = tokio::select! {
        (_, opened) = crate::play::opening::open(&mut process, 1) => Some(opened),
        _ = cancel.wait_for(|stopped| *stopped) => None,
    };
    let Some(opened) = opened else {
        process.shutdown(false, false).await;
        return Err(StepOutcome::Interrupted {
            message: format!("stopped during the smoke check. {NOTHING}"),
        });
    };
    let polite = opened.is_ok();
    process.shutdown(polite, false).await;
    opened.map(|_| ()).map_err(|failure| StepOutcome::Refused {
        message: quote::did_not_start(
            &crate::play::opening::not_opened(&failure, spec.limits),
            &spec.command_text(),
        ),
    })
}

/// The run length a quote buys: the shortest whose action allowance (the
/// price list's `max_actions`: short 100, standard 300, long 1000) covers
/// the most actions a bought cell may take, its persona's patience or
/// `budget.max_actions`, whichever is lower; long when none does (the
/// backend then stops a cell at long's allowance).
pub fn run_length<'p>(plan: &Plan, personas: impl Iterator<Item = &'p str>) -> RunLength {
    let most = personas
        .map(|slug| {
            let patience = plan
                .personas
                .iter()
                .find(|p| p.slug == slug)
                .and_then(|p| p.patience)
                .unwrap_or(super::play::DEFAULT_PATIENCE);
            plan.budget
                .max_actions
                .map_or(patience, |max| patience.min(max))
        })
        .max()
        .unwrap_or(0);
    let mut lengths = DEMO_PRICES.max_actions;
    lengths.sort_by_key(|(_, allowed)| *allowed);
    lengths
        .iter()
        .find(|(_, allowed)| u64::try_from(*allowed).is_ok_and(|a| a >= most))
        .map_or(RunLength::Long, |(length, _)| *length)
}

/// Where this run's money is, for its output.
fn money_at(cx: &StepContext, connection: &Connection) -> MoneyAt {
    if cx.plan.backend.kind == BackendKind::Http {
        return MoneyAt::Server {
            url: cx.plan.backend.url.clone().unwrap_or_default(),
        };
    }
    let path = ledger_shown(cx);
    if connection.token.0 == DEMO_TOKEN {
        MoneyAt::DemoLedger { path }
    } else {
        MoneyAt::Ledger { path }
    }
}

/// The local ledger's path as shown: repo-relative when inside the repo.
/// The state directory is the one above `runs/<run-id>/steps/<step>`, the
/// step's directory (a step id is one file name).
fn ledger_shown(cx: &StepContext) -> String {
    let Some(state_dir) = cx.step_dir.ancestors().nth(4) else {
        return "the state directory's ledger.sqlite".into();
    };
    let path = crate::backend::local::ledger_path(state_dir);
    path.strip_prefix(&cx.root)
        .unwrap_or(&path)
        .display()
        .to_string()
}

/// What to do about a short balance.
fn topup_hint(cx: &StepContext, account: &str, short_cents: i64) -> String {
    if cx.plan.backend.kind == BackendKind::Http {
        format!(
            "Ask the server's operator to add at least {} to `{account}` (`gameplan ledger topup \
             {account} {short_cents} --db LEDGER` on the server), then run again",
            dollars(short_cents)
        )
    } else {
        format!(
            "Add at least {}: `gameplan ledger topup {account} {short_cents}`, then run again",
            dollars(short_cents)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(toml: &str) -> Plan {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("plan.toml");
        std::fs::write(
            &path,
            format!(
                "version = 1\nname = \"p\"\n\n[game]\nid = \"g\"\ncommand = [\"true\"]\n\n{toml}"
            ),
        )
        .expect("write");
        crate::plan::load(&path, &crate::plan::LoadOptions::default())
            .expect("loads")
            .plan
    }

    const PERSONAS: &str = r#"
[[personas]]
slug = "quick"
card = "Quits soon."
player = { kind = "random" }
patience = 30

[[personas]]
slug = "patient"
card = "Plays long."
player = { kind = "random" }
patience = 250

[[personas]]
slug = "default"
card = "Sets no patience."
player = { kind = "random" }
"#;

    #[test]
    fn the_run_length_is_the_shortest_that_covers_the_longest_bought_cell() {
        let p = plan(PERSONAS);
        assert_eq!(run_length(&p, ["quick"].into_iter()), RunLength::Short);
        // Default patience (40) is short too.
        assert_eq!(run_length(&p, ["default"].into_iter()), RunLength::Short);
        // 250 actions need standard (up to 300); the longest cell decides.
        assert_eq!(
            run_length(&p, ["quick", "patient"].into_iter()),
            RunLength::Standard
        );
        // budget.max_actions caps every cell.
        let capped = plan(&format!("[budget]\nmax_actions = 100\n{PERSONAS}"));
        assert_eq!(
            run_length(&capped, ["patient"].into_iter()),
            RunLength::Short
        );
        // Past every allowance: long.
        let long = plan(
            "[[personas]]\nslug = \"epic\"\ncard = \"x\"\nplayer = { kind = \"random\" }\npatience = 5000\n",
        );
        assert_eq!(run_length(&long, ["epic"].into_iter()), RunLength::Long);
    }

    #[test]
    fn a_price_that_never_came_back_is_a_refusal_not_an_open_run() {
        let mut lost = ApiError::unavailable("connection reset".to_owned());
        lost.uncertain = true;
        let StepOutcome::Refused { message } = refused(&lost, "pricing the cells", NOTHING) else {
            panic!("a lost estimate moves no money: exit 3");
        };
        assert!(
            message.starts_with("pricing the cells: the backend gave no answer (connection reset)"),
            "{message}"
        );
        assert!(message.contains(NOTHING), "{message}");
        assert!(matches!(
            refused(
                &ApiError::new(401, "unauthorized", "who?"),
                "checking the token",
                NOTHING,
            ),
            StepOutcome::Unauthorized { .. }
        ));
    }
}

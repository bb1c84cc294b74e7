//! What `estimate` says: the price table (each unit, its count and price,
//! the total and the balance, in dollars as `ledger show` prints them),
//! where the money is, and its refusals' messages.

use std::fmt::Write as _;

use crate::backend::api::Estimate;
use crate::play::cell_report::NotPlayed;
use crate::report::ledger::dollars;

/// The quote as lines for the run's output: a line per unit, then the
/// total and the balance.
pub fn price_table(estimate: &Estimate, account: &str) -> Vec<String> {
    let width = estimate
        .breakdown
        .iter()
        .map(|l| l.unit.chars().count())
        .max()
        .unwrap_or(0);
    let mut lines: Vec<String> = estimate
        .breakdown
        .iter()
        .map(|l| {
            format!(
                "  {:<width$}  {:>3} × {:>7}  {:>9}",
                l.unit,
                l.count,
                dollars(l.unit_cents),
                dollars(l.unit_cents.saturating_mul(l.count)),
            )
        })
        .collect();
    lines.push(format!(
        "  total {}; balance {} (account {account})",
        dollars(estimate.estimate_cents),
        dollars(estimate.balance_cents),
    ));
    lines
}

/// Where the money is, in a line: the demo ledger moves no real money.
pub fn money_line(where_: &MoneyAt) -> String {
    match where_ {
        MoneyAt::DemoLedger { path } => {
            format!("  money: the embedded demo ledger ({path}): no real money moves")
        }
        MoneyAt::Ledger { path } => format!("  money: the embedded ledger ({path})"),
        MoneyAt::Server { url } => format!("  money: the backend at {url}"),
    }
}

/// Where a run's money goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MoneyAt {
    /// The `local` ledger with its public demo token.
    DemoLedger { path: String },
    /// The `local` ledger with a token of the plan's.
    Ledger { path: String },
    /// An `http` backend.
    Server { url: String },
}

/// The game (`command`, as the plan writes it) failed the smoke check:
/// what happened, that nothing was charged, how to try the game alone, and
/// the last lines the game wrote to stderr.
pub fn did_not_start(why: &NotPlayed, command: &str) -> String {
    let mut text = format!(
        "the game did not start: {why}. Nothing was charged: no studio pays for the cells of a \
         build that cannot start. Fix the game (`gameplan play --out DIR -- {command}` tries it \
         alone), then run again"
    );
    if let Some(tail) = &why.stderr_tail {
        let lines: Vec<&str> = tail.lines().filter(|l| !l.trim().is_empty()).collect();
        // A single line the cause already quotes is not repeated.
        let quoted = lines.len() == 1 && why.cause.contains(lines[0].trim());
        if !lines.is_empty() && !quoted {
            text.push_str("\n  the game's stderr ended:");
            for line in &lines[lines.len().saturating_sub(5)..] {
                let _ = write!(text, "\n    {line}");
            }
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::api::PriceLine;

    #[test]
    fn the_table_shows_each_unit_its_price_the_total_and_the_balance_in_dollars() {
        let estimate = Estimate {
            quote_id: "quote-1".into(),
            estimate_cents: 100,
            balance_cents: 10_000,
            ok: true,
            breakdown: vec![
                PriceLine {
                    unit: "cell (short run)".into(),
                    count: 4,
                    unit_cents: 25,
                },
                PriceLine {
                    unit: "aggregate".into(),
                    count: 1,
                    unit_cents: 0,
                },
            ],
            expires_at: "2026-12-04T04:00:00Z".into(),
        };
        let lines = price_table(&estimate, "demo");
        assert_eq!(
            lines,
            [
                "  cell (short run)    4 ×   $0.25      $1.00",
                "  aggregate           1 ×   $0.00      $0.00",
                "  total $1.00; balance $100.00 (account demo)",
            ]
        );
    }

    #[test]
    fn a_game_that_did_not_start_shows_its_stderr_unless_the_cause_quotes_it() {
        let mut why = NotPlayed {
            cause: "the game exited with code 1 before answering `hello`".into(),
            hint: None,
            stderr_tail: Some("Traceback (most recent call last):\nNameError: x\n".into()),
        };
        let text = did_not_start(&why, "python3 game.py");
        assert!(
            text.starts_with("the game did not start: the game exited"),
            "{text}"
        );
        assert!(text.contains("Nothing was charged"), "{text}");
        assert!(
            text.contains("`gameplan play --out DIR -- python3 game.py`"),
            "{text}"
        );
        assert!(text.ends_with("\n    Traceback (most recent call last):\n    NameError: x"));
        why.cause = "the game exited with code 1: `boom`".into();
        why.stderr_tail = Some("boom\n".into());
        assert!(!did_not_start(&why, "game").contains("stderr ended"));
    }
}

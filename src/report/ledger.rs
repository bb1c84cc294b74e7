//! `gameplan ledger show`: the ledger as readable tables (accounts with the
//! sum that proves their balance, jobs with their runs, tokens without
//! their secrets).

use std::fmt::Write as _;

use crate::backend::ledger::LedgerView;

/// Cents as dollars: `$100.00`, `-$0.50`.
pub fn dollars(cents: i64) -> String {
    let sign = if cents < 0 { "-" } else { "" };
    let abs = cents.unsigned_abs();
    format!("{sign}${}.{:02}", abs / 100, abs % 100)
}

use crate::text::escape_controls as shown;

/// The text of `gameplan ledger show`.
pub fn show(view: &LedgerView, path: &std::path::Path) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "Ledger {}", path.display());
    let _ = writeln!(out, "\nAccounts");
    let _ = writeln!(
        out,
        "  {:<16} {:>12} {:>12} {:>12} {:>12}  adds up",
        "id", "balance", "topups", "charged", "refunded"
    );
    for a in &view.accounts {
        let _ = writeln!(
            out,
            "  {:<16} {:>12} {:>12} {:>12} {:>12}  {}",
            shown(&a.id),
            dollars(a.balance_cents),
            dollars(a.topups_cents),
            dollars(a.charged_cents),
            dollars(a.refunded_cents),
            if a.adds_up {
                "yes"
            } else {
                "NO: balance ≠ topups − charged + refunded"
            }
        );
    }
    let _ = writeln!(out, "\nJobs");
    if view.jobs.is_empty() {
        let _ = writeln!(out, "  none yet");
    }
    for job in &view.jobs {
        let _ = writeln!(
            out,
            "  {}  {}  game {}  key {}  {}  price {}  charged {}  refunded {}",
            job.id,
            shown(&job.account),
            shown(&job.game),
            shown(&job.idempotency_key),
            job.state,
            dollars(job.price_cents),
            dollars(job.charged_cents),
            dollars(job.refunded_cents)
        );
        for s in &job.settlements {
            let _ = writeln!(
                out,
                "    settled {}: net {}, refunded {} ({} unplayed runs)",
                s.settled_at,
                dollars(s.net_cents),
                dollars(s.refunded_cents),
                s.refunded_runs.len()
            );
        }
        for run in &job.runs {
            let _ = writeln!(
                out,
                "    {:<10} {:<16} {:<12} {:<16} {}{}",
                run.id,
                shown(&run.persona),
                shown(&run.controller),
                run.state,
                dollars(run.price_cents),
                if run.played { "" } else { "  (never played)" }
            );
        }
    }
    let _ = writeln!(out, "\nTokens (stored as sha256; the secrets are not kept)");
    for t in &view.tokens {
        let _ = writeln!(
            out,
            "  {:<16} {}  created {}{}",
            shown(&t.account),
            t.scopes.join(","),
            t.created_at,
            t.revoked_at
                .as_ref()
                .map_or_else(String::new, |at| format!("  REVOKED {at}"))
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::shown;

    #[test]
    fn control_characters_are_escaped_and_other_text_is_left_alone() {
        assert_eq!(shown("curious-kid"), "curious-kid");
        assert_eq!(shown("naïve ☃"), "naïve ☃");
        assert_eq!(shown("a\u{1b}[31mred\nb\0"), "a\\u{1b}[31mred\\nb\\u{0}");
    }
}

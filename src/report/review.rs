//! How a gate's judging reads: `review.md` (a summary, findings, missing
//! units, dispositions, and a coverage matrix unit × lens), the lines the
//! gate adds to the end-of-run summary, and its `JUnit` cases (one per lens
//! × unit). The data is `crate::review::verdict`'s.

use std::fmt::Write as _;

use super::run::{CaseOutcome, JunitCase};
use crate::review::verdict::{LensReport, Review, Status, Verdict};

/// Findings and missing units listed per lens in the end-of-run summary;
/// the rest are counted, and all are in `review.md`.
pub const SUMMARY_LINES_PER_LENS: usize = 8;

/// Units a coverage matrix shows (beyond them it says how many it left out:
/// `review.json` has every one).
pub const MATRIX_MAX_UNITS: usize = 2000;

fn counts(lens: &LensReport) -> String {
    let count = |v: Verdict| lens.units.iter().filter(|u| u.verdict == v).count();
    let mut parts = vec![super::plural(lens.units.len(), "unit")];
    for (v, n) in [
        (Verdict::Finding, count(Verdict::Finding)),
        (Verdict::Missing, count(Verdict::Missing)),
        (Verdict::Clear, count(Verdict::Clear)),
        (Verdict::NotApplicable, count(Verdict::NotApplicable)),
    ] {
        if n > 0 {
            parts.push(format!("{n} {}", v.word()));
        }
    }
    let mut line = format!(
        "{}; {} judged, {} reused",
        parts.join(", "),
        lens.judged,
        lens.reused
    );
    // What an llm lens spent is money: it is shown, not only dumped.
    if let Some(usage) = &lens.usage {
        let _ = write!(
            line,
            "; {}, {} tokens in, {} out",
            super::plural(
                usize::try_from(usage.calls).unwrap_or(usize::MAX),
                "model call"
            ),
            usage.input_tokens,
            usage.output_tokens
        );
        if usage.priced {
            let _ = write!(line, ", {:.4} USD", usage.cost_usd);
        }
        if usage.stopped_by_budget {
            line.push_str(", stopped by max_model_usd");
        }
    }
    line
}

/// The lines a gate adds to the end of `plan run`'s summary.
pub fn summary(review: &Review) -> String {
    let mut out = format!("gate {}: {}\n", review.gate, review.status.word());
    for lens in &review.lenses {
        let _ = writeln!(
            out,
            "  {}: {} ({})",
            lens.name,
            lens.status.word(),
            counts(lens)
        );
        for e in &lens.errors {
            let _ = writeln!(out, "    error: {e}");
        }
        let standing: Vec<_> = lens.standing().collect();
        for (unit, f) in standing.iter().take(SUMMARY_LINES_PER_LENS) {
            let _ = writeln!(
                out,
                "    finding: {}{}: {} ({})",
                unit.unit,
                f.line.map(|l| format!(":{l}")).unwrap_or_default(),
                f.title,
                f.severity
            );
        }
        if standing.len() > SUMMARY_LINES_PER_LENS {
            let _ = writeln!(
                out,
                "    … and {} more findings (review.md)",
                standing.len() - SUMMARY_LINES_PER_LENS
            );
        }
        let missing: Vec<_> = lens.missing().collect();
        for unit in missing.iter().take(SUMMARY_LINES_PER_LENS) {
            let _ = writeln!(
                out,
                "    missing: {}: {}",
                unit.unit,
                unit.missing.as_deref().unwrap_or("not judged")
            );
        }
        if missing.len() > SUMMARY_LINES_PER_LENS {
            let _ = writeln!(
                out,
                "    … and {} more missing units (review.md)",
                missing.len() - SUMMARY_LINES_PER_LENS
            );
        }
        for unit in &lens.units {
            for f in &unit.findings {
                if let Some(d) = &f.discharged {
                    let _ = writeln!(
                        out,
                        "    discharged: {}: {} (by `{}`: {}; {}, until {})",
                        unit.unit, f.title, d.id, d.reason, d.owner, d.expires
                    );
                }
            }
        }
    }
    for r in review.reviewers.iter().filter(|r| !r.ran) {
        let _ = writeln!(
            out,
            "  reviewer {}: not run (the gate's lenses did not pass)",
            r.reviewer
        );
    }
    for d in &review.lapsed {
        let _ = writeln!(
            out,
            "  lapsed disposition `{}` (expired {}): it discharged nothing",
            d.id, d.expires
        );
    }
    for d in &review.unused {
        let _ = writeln!(
            out,
            "  unused disposition `{}`: it matched no finding",
            d.id
        );
    }
    out
}

/// Escapes a cell of a markdown table.
fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}

/// `review.md`.
pub fn markdown(review: &Review) -> String {
    let mut out = format!(
        "# Gate `{}`: {}\n\n{} judged, {} reused.\n\n| lens | status | units |\n|---|---|---|\n",
        review.gate,
        review.status.word(),
        super::plural(review.judged, "unit"),
        review.reused
    );
    for lens in &review.lenses {
        let _ = writeln!(
            out,
            "| `{}` | {} | {} |",
            lens.name,
            lens.status.word(),
            cell(&counts(lens))
        );
    }
    let mut findings = String::new();
    let mut missing = String::new();
    for lens in &review.lenses {
        for e in &lens.errors {
            let _ = writeln!(missing, "- `{}`: {}", lens.name, cell(e));
        }
        for unit in &lens.units {
            for f in &unit.findings {
                let how = match (&f.discharged, &f.lapsed) {
                    (Some(d), _) => format!(
                        " — discharged by `{}`: {} ({}, until {})",
                        d.id, d.reason, d.owner, d.expires
                    ),
                    (None, Some(d)) => format!(" — disposition `{}` lapsed on {}", d.id, d.expires),
                    (None, None) => String::new(),
                };
                let _ = writeln!(
                    findings,
                    "- `{}` on `{}`{}: {} ({}){how}",
                    lens.name,
                    unit.unit,
                    f.line.map(|l| format!(":{l}")).unwrap_or_default(),
                    cell(&f.title),
                    f.severity
                );
                if let Some(detail) = &f.detail {
                    let _ = writeln!(findings, "  {}", cell(detail));
                }
            }
            if let Some(why) = &unit.missing {
                let _ = writeln!(
                    missing,
                    "- `{}` on `{}`: {}",
                    lens.name,
                    unit.unit,
                    cell(why)
                );
            }
        }
        if let Some(tail) = &lens.stderr_tail
            && lens.status != Status::SendReady
        {
            let _ = writeln!(
                missing,
                "\n`{}` wrote on stderr (last lines):\n\n```\n{}\n```\n",
                lens.name,
                tail.trim_end()
            );
        }
    }
    if !findings.is_empty() {
        let _ = write!(out, "\n## Findings\n\n{findings}");
    }
    if !missing.is_empty() {
        let _ = write!(out, "\n## Not judged\n\n{missing}");
    }
    if !review.lapsed.is_empty() || !review.unused.is_empty() {
        out.push_str("\n## Dispositions\n\n");
        for d in &review.lapsed {
            let _ = writeln!(
                out,
                "- lapsed: `{}` (lens `{}`, expired {}, dispositions.toml line {}): discharged nothing",
                d.id, d.lens, d.expires, d.line
            );
        }
        for d in &review.unused {
            let _ = writeln!(
                out,
                "- unused: `{}` (lens `{}`, dispositions.toml line {}): matched no finding",
                d.id, d.lens, d.line
            );
        }
    }
    for r in review.reviewers.iter().filter(|r| !r.ran) {
        let _ = writeln!(
            out,
            "\nReviewer `{}` did not run: the gate's lenses did not pass.",
            r.reviewer
        );
    }
    coverage(&mut out, review);
    out
}

/// The coverage matrix: one row per unit, one column per lens instance.
fn coverage(out: &mut String, review: &Review) {
    let mut units: Vec<&str> = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for lens in &review.lenses {
        for u in &lens.units {
            if seen.insert(u.unit.as_str()) {
                units.push(u.unit.as_str());
            }
        }
    }
    if units.is_empty() {
        return;
    }
    out.push_str("\n## Coverage (unit × lens)\n\n| unit |");
    for lens in &review.lenses {
        let _ = write!(out, " `{}` |", lens.name);
    }
    out.push_str("\n|---|");
    for _ in &review.lenses {
        out.push_str("---|");
    }
    out.push('\n');
    // Only the rows shown are looked up: a lens over many units is not
    // indexed whole to show its first rows.
    let shown: std::collections::HashMap<&str, usize> = units
        .iter()
        .take(MATRIX_MAX_UNITS)
        .enumerate()
        .map(|(row, unit)| (*unit, row))
        .collect();
    let mut rows: Vec<Vec<String>> = vec![vec!["—".to_owned(); review.lenses.len()]; shown.len()];
    for (column, lens) in review.lenses.iter().enumerate() {
        for u in &lens.units {
            let Some(&row) = shown.get(u.unit.as_str()) else {
                continue;
            };
            rows[row][column] = match (u.verdict, u.reused) {
                (Verdict::Finding, _) if u.findings.iter().all(|f| f.discharged.is_some()) => {
                    "finding (discharged)".to_owned()
                }
                (v, true) => format!("{} (reused)", v.word()),
                (v, false) => v.word().to_owned(),
            };
        }
    }
    for (unit, cells) in units.iter().zip(&rows) {
        let _ = write!(out, "| `{}` |", cell(unit));
        for word in cells {
            let _ = write!(out, " {word} |");
        }
        out.push('\n');
    }
    if units.len() > MATRIX_MAX_UNITS {
        let _ = writeln!(
            out,
            "\n… and {} more units (review.json lists every one).",
            units.len() - MATRIX_MAX_UNITS
        );
    }
}

/// One `JUnit` case per lens × unit: passed when clear or n/a (or every
/// finding discharged), failed when a finding stands, an error when it is
/// missing; a lens that could not list its units is one error case.
pub fn junit_cases(review: &Review) -> Vec<JunitCase> {
    let mut cases = Vec::new();
    for lens in &review.lenses {
        for e in &lens.errors {
            cases.push(JunitCase {
                name: "(units)".into(),
                classname: lens.name.clone(),
                outcome: CaseOutcome::Error {
                    message: "the lens could not list its units".into(),
                    text: e.clone(),
                },
                time_ms: None,
                text: None,
                finding: None,
            });
        }
        for unit in &lens.units {
            let standing: Vec<_> = unit
                .findings
                .iter()
                .filter(|f| f.discharged.is_none())
                .collect();
            let outcome = match unit.verdict {
                Verdict::Missing => CaseOutcome::Error {
                    message: "missing: not judged".into(),
                    text: unit.missing.clone().unwrap_or_default(),
                },
                Verdict::Finding if !standing.is_empty() => CaseOutcome::Failed {
                    message: format!(
                        "{}: {}",
                        super::plural(standing.len(), "finding"),
                        standing[0].title
                    ),
                    text: standing
                        .iter()
                        .map(|f| format!("{} {}: {}", f.severity, f.fingerprint, f.title))
                        .collect::<Vec<_>>()
                        .join("\n"),
                },
                _ => CaseOutcome::Passed,
            };
            let text = format!(
                "{} {}{}",
                unit.verdict.word(),
                unit.unit,
                if unit.reused { " (reused)" } else { "" }
            );
            cases.push(JunitCase {
                name: unit.unit.clone(),
                classname: lens.name.clone(),
                outcome,
                time_ms: None,
                text: Some(text),
                finding: None,
            });
        }
    }
    cases
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::review::verdict::{LensFinding, UnitVerdict};

    fn review(units: usize) -> Review {
        let units = (0..units)
            .map(|i| UnitVerdict {
                unit: format!("u{i:04}"),
                sha256: "0".into(),
                verdict: if i % 2 == 0 {
                    Verdict::Finding
                } else {
                    Verdict::Missing
                },
                findings: if i % 2 == 0 {
                    vec![LensFinding {
                        fingerprint: format!("f{i}"),
                        title: "a | pipe".into(),
                        severity: "high".into(),
                        detail: None,
                        line: Some(3),
                        discharged: None,
                        lapsed: None,
                    }]
                } else {
                    Vec::new()
                },
                missing: (i % 2 == 1).then(|| "the lens gave no verdict".into()),
                reused: false,
            })
            .collect();
        let mut lens = LensReport {
            units,
            calls: 1,
            stderr_tail: Some("boom".into()),
            ..LensReport::new(
                "l".into(),
                "l".into(),
                None,
                "command".into(),
                "files".into(),
            )
        };
        lens.status = lens.judge_status();
        Review::of("g", lens.status, vec![lens])
    }

    #[test]
    fn the_summary_names_a_few_and_counts_the_rest() {
        let text = summary(&review(20));
        assert!(text.starts_with("gate g: FIX FIRST\n"), "{text}");
        assert_eq!(
            text.matches("    finding: ").count(),
            SUMMARY_LINES_PER_LENS
        );
        assert!(text.contains("… and 2 more findings (review.md)"), "{text}");
        assert_eq!(
            text.matches("    missing: ").count(),
            SUMMARY_LINES_PER_LENS
        );
        assert!(
            text.contains("… and 2 more missing units (review.md)"),
            "{text}"
        );
        assert!(text.contains("finding: u0000:3: a | pipe (high)"), "{text}");
    }

    #[test]
    fn the_coverage_matrix_stops_at_its_cap_and_says_how_many_it_left_out() {
        let md = markdown(&review(MATRIX_MAX_UNITS + 5));
        assert!(md.contains("| `u0000` | finding |"), "a row per unit");
        assert!(md.contains(&format!("| `u{:04}` |", MATRIX_MAX_UNITS - 1)));
        assert!(!md.contains(&format!("| `u{MATRIX_MAX_UNITS:04}` |")));
        assert!(md.contains("… and 5 more units (review.json lists every one)."));
        assert!(md.contains("a \\| pipe"), "a pipe cannot break the table");
        assert!(md.contains("```\nboom\n```"), "the lens's stderr is shown");
    }

    #[test]
    fn junit_cases_are_one_per_unit_failed_or_errored() {
        let cases = junit_cases(&review(4));
        assert_eq!(cases.len(), 4);
        assert!(matches!(cases[0].outcome, CaseOutcome::Failed { .. }));
        assert!(matches!(cases[1].outcome, CaseOutcome::Error { .. }));
        assert_eq!(cases[0].classname, "l");
        assert_eq!(cases[0].name, "u0000");
    }
}

//! What judging produces: a verdict per unit, a status per lens and per
//! gate, and `review.json`, the review dump a `gate` step writes (schema:
//! `schemas/review.schema.json`, generated from these types).
//!
//! The statuses order themselves: a finding that stands (FIX FIRST) outranks
//! a unit nobody could judge (INCOMPLETE), which outranks a pass. A known
//! problem is the more useful red; the missing units are listed either way,
//! so a FIX FIRST gate never hides that it could not judge everything.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The format version of `review.json`.
pub const REVIEW_FORMAT: u32 = 1;

/// The file names a `gate` step writes in its directory.
pub const REVIEW_JSON: &str = "review.json";
pub const REVIEW_MD: &str = "review.md";

/// A unit's verdict under one lens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum Verdict {
    /// Judged, and nothing found.
    #[serde(rename = "clear")]
    Clear,
    /// Judged, and at least one finding (discharged or not).
    #[serde(rename = "finding")]
    Finding,
    /// Judged as not concerning this lens.
    #[serde(rename = "n/a")]
    NotApplicable,
    /// Not judged: the lens crashed, timed out, skipped it, answered
    /// something invalid, or its expression failed on it. Never a pass.
    #[serde(rename = "missing")]
    Missing,
}

impl Verdict {
    pub fn word(self) -> &'static str {
        match self {
            Verdict::Clear => "clear",
            Verdict::Finding => "finding",
            Verdict::NotApplicable => "n/a",
            Verdict::Missing => "missing",
        }
    }

    /// A verdict that may be stored and reused: nothing found.
    pub fn is_clean(self) -> bool {
        matches!(self, Verdict::Clear | Verdict::NotApplicable)
    }
}

/// A lens's or a gate's status.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
pub enum Status {
    /// No undischarged finding, nothing missing.
    #[serde(rename = "SEND-READY")]
    SendReady,
    /// Something could not be judged (and no finding stands).
    #[serde(rename = "INCOMPLETE")]
    Incomplete,
    /// A finding stands.
    #[serde(rename = "FIX FIRST")]
    FixFirst,
}

impl Status {
    pub fn word(self) -> &'static str {
        match self {
            Status::SendReady => "SEND-READY",
            Status::Incomplete => "INCOMPLETE",
            Status::FixFirst => "FIX FIRST",
        }
    }
}

/// `review.json`: one gate's judging.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(title = "gameplan review")]
pub struct Review {
    /// The format version (1).
    pub review: u32,
    /// The gate judged.
    pub gate: String,
    pub status: Status,
    /// The gate's lenses, in its order, then one instance of each per
    /// reviewer (only when the lenses passed).
    pub lenses: Vec<LensReport>,
    /// The gate's reviewers, and whether their pass ran (it runs only after
    /// the gate's own lenses are SEND-READY).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reviewers: Vec<ReviewerRun>,
    /// Dispositions that matched a finding but are past their expiry: they
    /// discharged nothing.
    #[serde(default)]
    pub lapsed: Vec<DispositionRef>,
    /// Dispositions in force for this gate's lenses that matched no finding.
    #[serde(default)]
    pub unused: Vec<DispositionRef>,
    /// Units judged in this run, over every lens.
    pub judged: usize,
    /// Units whose stored clean verdict was reused, over every lens.
    pub reused: usize,
    /// What model calls cost (llm lenses); zero without them.
    pub usage: Usage,
}

#[cfg(test)]
impl Review {
    /// A review of `gate` with `lenses` and nothing else: the tests' builder.
    pub(crate) fn of(gate: &str, status: Status, lenses: Vec<LensReport>) -> Review {
        Review {
            review: REVIEW_FORMAT,
            gate: gate.to_owned(),
            status,
            lenses,
            reviewers: Vec::new(),
            lapsed: Vec::new(),
            unused: Vec::new(),
            judged: 0,
            reused: 0,
            usage: Usage::default(),
        }
    }
}

/// A reviewer of the gate and whether its lens pass ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ReviewerRun {
    pub reviewer: String,
    pub ran: bool,
}

/// One lens (or one reviewer's instance of it) over its units.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LensReport {
    /// The lens's name; a reviewer's instance is `LENS@REVIEWER`.
    pub name: String,
    /// The lens as the plan names it.
    pub lens: String,
    /// The reviewer this instance judged as, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reviewer: Option<String>,
    /// `rule`, `command` or `llm`.
    pub kind: String,
    /// `findings`, `runs`, `files` or `patches`.
    pub over: String,
    pub status: Status,
    /// Every unit, in the order listed.
    pub units: Vec<UnitVerdict>,
    pub judged: usize,
    pub reused: usize,
    /// Calls made to a command lens.
    #[serde(default)]
    pub calls: usize,
    /// Why the lens could not even list or judge its units (no aggregate
    /// to read findings from, a glob that escapes the repo, a program that
    /// cannot start).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
    /// The last lines a command lens wrote to stderr.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr_tail: Option<String>,
    /// What an llm lens's model calls cost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

impl LensReport {
    /// The report of lens `lens` (instance `name`, as `reviewer`), a
    /// `kind` lens over `over`, before it judged anything: no units, no
    /// calls, no errors, send-ready until its verdicts say otherwise.
    pub fn new(
        name: String,
        lens: String,
        reviewer: Option<String>,
        kind: String,
        over: String,
    ) -> LensReport {
        LensReport {
            name,
            lens,
            reviewer,
            kind,
            over,
            status: Status::SendReady,
            units: Vec::new(),
            judged: 0,
            reused: 0,
            calls: 0,
            errors: Vec::new(),
            stderr_tail: None,
            usage: None,
        }
    }

    /// Units whose verdict is `missing`.
    pub fn missing(&self) -> impl Iterator<Item = &UnitVerdict> {
        self.units.iter().filter(|u| u.verdict == Verdict::Missing)
    }

    /// Findings no disposition discharged, with their unit.
    pub fn standing(&self) -> impl Iterator<Item = (&UnitVerdict, &LensFinding)> {
        self.units.iter().flat_map(|u| {
            u.findings
                .iter()
                .filter(|f| f.discharged.is_none())
                .map(move |f| (u, f))
        })
    }

    /// SEND-READY, FIX FIRST or INCOMPLETE from the verdicts (see the
    /// module doc for the order).
    pub fn judge_status(&self) -> Status {
        if self.standing().next().is_some() {
            Status::FixFirst
        } else if self.missing().next().is_some() || !self.errors.is_empty() {
            Status::Incomplete
        } else {
            Status::SendReady
        }
    }
}

/// One unit's verdict under one lens.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct UnitVerdict {
    /// The unit's id (a file's repo path, a finding's fingerprint, a cell's
    /// step id, `PATCH:PATH`).
    pub unit: String,
    /// The sha256 of the unit's content.
    pub sha256: String,
    pub verdict: Verdict,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub findings: Vec<LensFinding>,
    /// Why it is missing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missing: Option<String>,
    /// Its clean verdict was stored by an earlier run and reused.
    #[serde(default)]
    pub reused: bool,
}

/// Something a lens found on a unit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LensFinding {
    /// What dispositions match by `fingerprint`: a play finding's own id
    /// (a lens over findings), else a digest of the lens, unit and title.
    pub fingerprint: String,
    pub title: String,
    pub severity: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u64>,
    /// The disposition in force that discharged it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discharged: Option<DispositionRef>,
    /// A disposition that would have discharged it had it not expired.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lapsed: Option<DispositionRef>,
}

/// A disposition as the dump names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct DispositionRef {
    pub id: String,
    pub lens: String,
    pub reason: String,
    pub owner: String,
    /// `YYYY-MM-DD`.
    pub expires: String,
    /// Its line in `dispositions.toml`.
    pub line: usize,
}

/// What model calls of an llm lens (or of all the gate's) cost.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Usage {
    /// The model an llm lens asked (a lens's usage only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Calls answered (a call's retries are one call).
    pub calls: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// USD, from the lens's `price` or the built-in table's.
    pub cost_usd: f64,
    /// Whether `cost_usd` comes from a price (an unpriced model counts
    /// tokens only).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub priced: bool,
    /// `budget.max_model_usd`, what the gate's llm lenses may spend together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_usd: Option<f64>,
    /// The lens stopped because its next call could pass `max_usd`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stopped_by_budget: bool,
    /// The model endpoint never answered (exit 5).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unreachable: bool,
}

impl Usage {
    /// Adds `other`'s calls, tokens and cost (a gate's total).
    pub fn add(&mut self, other: &Usage) {
        self.calls += other.calls;
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cost_usd += other.cost_usd;
        self.priced |= other.priced;
        self.max_usd = self.max_usd.or(other.max_usd);
        self.stopped_by_budget |= other.stopped_by_budget;
        self.unreachable |= other.unreachable;
    }
}

impl Review {
    /// The gate's status: the worst of its lenses'.
    pub fn judge_status(lenses: &[LensReport]) -> Status {
        lenses
            .iter()
            .map(|l| l.status)
            .max()
            .unwrap_or(Status::SendReady)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(verdict: Verdict, findings: Vec<LensFinding>) -> UnitVerdict {
        UnitVerdict {
            unit: "u".into(),
            sha256: "0".into(),
            verdict,
            findings,
            missing: None,
            reused: false,
        }
    }

    fn finding(discharged: bool) -> LensFinding {
        LensFinding {
            fingerprint: "f".into(),
            title: "t".into(),
            severity: "high".into(),
            detail: None,
            line: None,
            discharged: discharged.then(|| DispositionRef {
                id: "d".into(),
                lens: "l".into(),
                reason: "r".into(),
                owner: "o".into(),
                expires: "2999-01-01".into(),
                line: 1,
            }),
            lapsed: None,
        }
    }

    fn lens(units: Vec<UnitVerdict>) -> LensReport {
        LensReport {
            units,
            ..LensReport::new("l".into(), "l".into(), None, "rule".into(), "files".into())
        }
    }

    #[test]
    fn a_lens_status_follows_its_verdicts() {
        assert_eq!(lens(vec![]).judge_status(), Status::SendReady);
        assert_eq!(
            lens(vec![
                unit(Verdict::Clear, vec![]),
                unit(Verdict::NotApplicable, vec![])
            ])
            .judge_status(),
            Status::SendReady
        );
        assert_eq!(
            lens(vec![unit(Verdict::Missing, vec![])]).judge_status(),
            Status::Incomplete,
            "a unit nobody judged is not a pass"
        );
        assert_eq!(
            lens(vec![
                unit(Verdict::Missing, vec![]),
                unit(Verdict::Finding, vec![finding(false)])
            ])
            .judge_status(),
            Status::FixFirst
        );
        assert_eq!(
            lens(vec![unit(Verdict::Finding, vec![finding(true)])]).judge_status(),
            Status::SendReady,
            "a discharged finding does not stand"
        );
        let mut broken = lens(vec![]);
        broken.errors.push("no aggregate".into());
        assert_eq!(broken.judge_status(), Status::Incomplete);
    }

    #[test]
    fn statuses_and_verdicts_are_written_as_design_names_them() {
        assert_eq!(serde_json::to_value(Status::FixFirst).unwrap(), "FIX FIRST");
        assert_eq!(
            serde_json::to_value(Status::SendReady).unwrap(),
            "SEND-READY"
        );
        assert_eq!(serde_json::to_value(Verdict::NotApplicable).unwrap(), "n/a");
        let mut a = lens(vec![]);
        a.status = Status::Incomplete;
        let mut b = lens(vec![]);
        b.status = Status::FixFirst;
        assert_eq!(Review::judge_status(&[a.clone(), b]), Status::FixFirst);
        assert_eq!(Review::judge_status(&[a]), Status::Incomplete);
        assert_eq!(Review::judge_status(&[]), Status::SendReady);
    }
}

//! What judging asks of the dispositions beside the plan
//! (`plan::dispositions`): which finding a disposition discharges (or
//! would have, had it not lapsed), which went unused, and a digest of those
//! in force for a lens, which enters every unit-reuse key (a new or expired
//! disposition re-judges the lens's units). Today's date is taken once, when
//! the gate starts, so one gate judges every unit against the same day.

use std::collections::BTreeSet;
use std::path::Path;

use super::verdict::DispositionRef;
use crate::plan::dispositions::{Date, Disposition, Dispositions, Match, beside};

/// How a disposition met a finding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Waived {
    /// In force: the finding is discharged.
    Discharged(DispositionRef),
    /// Past its expiry: it discharges nothing, and is listed as lapsed.
    Lapsed(DispositionRef),
}

/// The dispositions of one plan, as judging sees them on one day.
#[derive(Debug, Clone)]
pub struct Waivers {
    dispositions: Dispositions,
    today: Date,
}

impl Default for Waivers {
    fn default() -> Self {
        Waivers::none()
    }
}

fn reference(d: &Disposition) -> DispositionRef {
    DispositionRef {
        id: d.id.clone(),
        lens: d.lens.clone(),
        reason: d.reason.clone(),
        owner: d.owner.clone(),
        expires: d.expires.to_string(),
        line: d.line,
    }
}

impl Waivers {
    /// No dispositions.
    pub fn none() -> Waivers {
        Waivers {
            dispositions: Dispositions::default(),
            today: Date::today(),
        }
    }

    /// The dispositions beside `plan_path` (`dispositions.toml`), as of
    /// today (UTC); none without a plan path or a file.
    pub fn beside(plan_path: Option<&Path>) -> Result<Waivers, String> {
        let Some(plan) = plan_path else {
            return Ok(Waivers::none());
        };
        let dispositions = Dispositions::load(&beside(plan)).map_err(|e| e.to_string())?;
        Ok(Waivers {
            dispositions,
            today: Date::today(),
        })
    }

    /// The same dispositions as of `today` (tests).
    #[must_use]
    pub fn on(mut self, today: Date) -> Waivers {
        self.today = today;
        self
    }

    /// A digest of the dispositions in force today for `lens`.
    pub fn digest(&self, lens: &str) -> String {
        self.dispositions.in_force_digest(lens, self.today)
    }

    /// The disposition that matches a finding of `lens` on `unit`, if any.
    pub fn check(&self, lens: &str, unit: &str, fingerprint: &str, title: &str) -> Option<Waived> {
        match self
            .dispositions
            .matching(lens, unit, Some(fingerprint), title, self.today)?
        {
            Match::Discharged(d) => Some(Waived::Discharged(reference(d))),
            Match::Lapsed(d) => Some(Waived::Lapsed(reference(d))),
        }
    }

    /// Dispositions of `lenses` (those that judged) that matched nothing in
    /// `matched` (ids that discharged or lapsed).
    pub fn unused(&self, lenses: &[&str], matched: &[String]) -> Vec<DispositionRef> {
        let matched: BTreeSet<&str> = matched.iter().map(String::as_str).collect();
        self.dispositions
            .unused(lenses, &matched)
            .into_iter()
            .map(reference)
            .collect()
    }
}

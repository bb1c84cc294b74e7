//! What judging asks of the dispositions beside the plan: which finding a
//! disposition discharges (or would have, had it not lapsed), and a digest
//! of those in force for a lens, which enters every unit-reuse key (a new
//! or expired disposition re-judges the lens's units).
//!
//! Parsing and matching `dispositions.toml` are `review::dispositions`'
//! (built beside this module); this is the narrow seam the judging code is
//! written against. Until that module lands, a plan has no dispositions:
//! nothing is discharged, the digest is that of an empty set.

use super::verdict::DispositionRef;

/// How a disposition met a finding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Waived {
    /// In force: the finding is discharged.
    Discharged(DispositionRef),
    /// Past its expiry: it discharges nothing, and is listed as lapsed.
    Lapsed(DispositionRef),
}

/// The dispositions of one plan, as judging sees them.
#[derive(Debug, Clone, Default)]
pub struct Waivers {}

impl Waivers {
    /// No dispositions.
    pub fn none() -> Waivers {
        Waivers::default()
    }

    /// The dispositions beside `plan_path` (`dispositions.toml`).
    pub fn beside(_plan_path: Option<&std::path::Path>) -> Result<Waivers, String> {
        Ok(Waivers::none())
    }

    /// A digest of the dispositions in force today for `lens`.
    pub fn digest(&self, _lens: &str) -> String {
        crate::reuse::sha256_hex(b"no dispositions")
    }

    /// The disposition that matches a finding of `lens` on `unit`, if any.
    pub fn check(
        &self,
        _lens: &str,
        _unit: &str,
        _fingerprint: &str,
        _title: &str,
    ) -> Option<Waived> {
        None
    }

    /// Dispositions in force for one of `lenses` that matched nothing in
    /// `used` (ids of those that did).
    pub fn unused(&self, _lenses: &[&str], _used: &[String]) -> Vec<DispositionRef> {
        Vec::new()
    }
}

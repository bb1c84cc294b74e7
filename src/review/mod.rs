//! Review: units, lenses, gates, dispositions, verdicts and unit reuse
//! (DESIGN §8). Judging never moves money and never runs a plan: the `gate`
//! step kind (`steps/gate.rs`) is where the engine meets it.
//!
//! - [`dispositions`]: `dispositions.toml` beside the plan: accepted
//!   findings, with a reason, an owner and an expiry.
//! - [`patches`]: a `git format-patch` series read into units (one per file
//!   per patch, with its hunks).
//! - [`unit`]: units from each `over`, with ids and content sha256s.
//! - [`rule`], [`command`]: the lens kinds that judge locally.
//! - [`judge`]: a lens over its units (unit reuse, dispositions applied),
//!   a gate over its lenses and reviewers.
//! - [`verdict`]: verdicts, statuses, and `review.json`.
//! - [`waivers`]: the seam judging reads dispositions through.

pub mod command;
pub mod dispositions;
pub mod judge;
pub mod patches;
pub mod rule;
pub mod unit;
pub mod verdict;
pub mod waivers;

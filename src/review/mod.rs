//! Review: units, lenses, gates, dispositions, verdicts and unit reuse
//! (DESIGN §8). Judging never moves money and never runs a plan: the `gate`
//! step kind (`steps/gate.rs`) is where the engine meets it.
//!
//! - [`dispositions`]: `dispositions.toml` beside the plan: accepted
//!   findings, with a reason, an owner and an expiry.
//! - [`patches`]: a `git format-patch` series read into units (one per file
//!   per patch, with its hunks).

pub mod dispositions;
pub mod patches;

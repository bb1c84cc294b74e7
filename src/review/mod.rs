//! Review: units, lenses, gates, dispositions, verdicts and unit reuse
//! (docs/review.md). Judging never moves money and never runs a plan: the
//! `gate` step kind (`steps/gate.rs`) is where the engine meets it.
//!
//! - [`patches`]: a `git format-patch` series read into units (one per file
//!   per patch, with its hunks).
//! - [`mod@unit`]: units from each `over`, with ids and content sha256s.
//! - [`rule`], [`command`]: the lens kinds that judge locally.
//! - [`llm_lens`]: the lens kind that asks a chat model.
//! - [`judge`]: a lens over its units (unit reuse, dispositions applied),
//!   a gate over its lenses and reviewers.
//! - [`verdict`]: verdicts, statuses, and `review.json`.
//! - [`waivers`]: the seam judging reads dispositions through (the file
//!   `dispositions.toml` beside the plan is read by `plan::dispositions`,
//!   as part of the plan).

pub mod command;
pub mod judge;
pub mod llm_lens;
pub mod patches;
pub mod rule;
pub mod unit;
pub mod verdict;
pub mod waivers;

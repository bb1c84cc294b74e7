//! Running one plan on several machines: `plan run PLAN --shard K/N` plays
//! the K-th of N slices of the plan's cells into a bundle, and
//! `plan merge PLAN BUNDLE...` checks the bundles and runs the rest of the
//! plan (aggregate, gates) once over every cell.
//!
//! Owns which cells a slice holds ([`mod@slice`]), what a bundle is and how
//! it is checked ([`bundle`]), and how bundles become one run's cells
//! ([`merge`]): each cell goes into the reuse store under the key the shard
//! played it with, and the merge run must reuse it, never play it again (the
//! engine's `reuse_only`). The scheduling is the engine's; nothing here runs
//! a step.

pub mod bundle;
pub mod durations;
pub mod merge;
pub mod prepared;
pub mod slice;

pub use bundle::{BUNDLE_FORMAT, Bundle, BundleCell, BundleError, Manifest};
pub use prepared::{Prepared, PreparedRef};
pub use slice::{Shard, ShardSpec, cells};

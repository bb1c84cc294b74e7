//! Run modes: how `plan run`, `plan resume`, `--shard`, `plan merge` and
//! an `[executor]` run a plan, on top of the engine. The command line only
//! parses their flags and calls them.
//!
//! From the bottom up (each file imports only those above it in this list):
//! - [`context`]: the shared flags (`RunArgs`, `LoadArgs`) and what a
//!   command may read of the outside world (`Context`);
//! - [`run`]: one run here: when to resume, the engine's run, its summary;
//! - [`prepare`]: a paid plan's job bought once (`--shard prepare`), and
//!   what shards and the merge are given of it;
//! - [`shard`]: `--shard K/N` and a batch of cells into a bundle, and
//!   `plan merge`;
//! - [`elsewhere`]: the cells as jobs of an executor, then the rest here;
//! - [`start`]: `plan run` and `plan resume`, choosing among the above.

pub mod context;
pub mod elsewhere;
pub mod prepare;
pub mod run;
pub mod shard;
pub mod start;

//! Play: personas playing a real build of a game over the bridge protocol,
//! coming back with evidence of what is wrong with it (docs/play.md).
//!
//! Owns the bridge protocol, the [`driver::Driver`] seam and its two
//! drivers (`stdio`, `webdriver`), players, controllers,
//! findings, traces, one play cell, replay, shrink and simulate. Knows
//! nothing of plans, the journal, reuse or money: the `play` and
//! `simulate` step kinds (in `steps/`) translate a plan into the plain specs
//! here and decide whether a cell runs at all.
//!
//! # Entry points
//!
//! - [`play_cell`]`(&CellSpec, out_dir, cancel) -> Result<CellResult, PlayError>`:
//!   one cell in a fresh game process; writes `report.json`,
//!   `transcript.jsonl`, `trace.jsonl` into `out_dir` (`report.md` is
//!   rendered from the report by `crate::report::play_cell`).
//! - [`simulate()`]`(&SimulateSpec, progress, cancel) -> Result<SimulateSummary, PlayError>`:
//!   many seeded games on `workers` game processes; traces of failed games.
//! - [`replay()`]`(&Trace, &ReplayOptions) -> Result<ReplayOutcome, PlayError>`
//!   and [`shrink()`]`(&Trace, &ShrinkOptions) -> Result<ShrinkOutcome, PlayError>`:
//!   what `gameplan replay` and `gameplan shrink` run.
//!
//! A game is described by [`GameSpec`] (build it with [`GameSpec::new`],
//! then add the plan's `game.env` to its `env`). Findings are
//! [`findings::Finding`] (category, severity, stable id, evidence); how a
//! cell ended is a [`QuitReason`] (the trace's `end`).

pub mod cell;
pub mod cell_report;
pub mod controllers;
pub mod driver;
pub mod episode;
pub mod findings;
pub mod goal;
pub mod invariants;
pub mod llm_player;
pub mod opening;
pub mod player;
pub mod players;
pub mod protocol;
pub mod replay;
pub mod rng;
pub mod shrink;
pub mod simulate;
pub mod stdio;
pub mod trace;
pub mod trace_batch;
pub mod webdriver;

pub use cell::{CellResult, CellSpec, play_cell};
pub use cell_report::{CellReport, CellState, Repeat};
pub use controllers::ControllerKind;
pub use driver::{BrowserGame, Driver, GameSpec, GameTarget, ResourceLimits, Session};
pub use findings::{Category, Finding};
pub use opening::PlayError;
pub use players::PlayerSpec;
pub use replay::{ReplayOptions, ReplayOutcome, replay};
pub use shrink::{ShrinkOptions, ShrinkOutcome, shrink};
pub use simulate::{SimulateSpec, SimulateSummary, simulate};
pub use trace::{QuitReason, Trace};

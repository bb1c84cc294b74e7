//! The exit codes of `gameplan` (docs/running.md › Exit codes): the one
//! contract CI scripts act on.

/// Every step succeeded or was reused; every gate SEND-READY.
pub const SUCCESS: u8 = 0;
/// A step failed, a gate is FIX FIRST, or a finding matched `--fail-on`.
pub const FAILED: u8 = 1;
/// Incomplete: budget exceeded with partial results, or a gate INCOMPLETE.
pub const INCOMPLETE: u8 = 2;
/// A plan or environment error, found before anything was charged (also bad command-line usage).
pub const PLAN_ERROR: u8 = 3;
/// Authentication failed or a token scope is missing.
pub const AUTH: u8 = 4;
/// The model endpoint never answered.
pub const MODEL_UNREACHABLE: u8 = 5;
/// Canceled: declined at the price question, interrupted, or stopped.
pub const CANCELED: u8 = 10;

//! `gameplan serve` on loopback: its HTTP API (the conformance suite the
//! embedded ledger passes too) and what it refuses.

mod api;
mod security;
mod text;

//! `gameplan serve` on loopback: its HTTP API (the conformance suite the
//! embedded ledger passes too) and what it refuses.

mod api;
mod connections;
mod quotas;
mod security;
mod text;

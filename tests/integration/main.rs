//! Integration tests: the real binary against plans in temp repos, filed
//! by the capability they test (`cargo test --test integration web::` runs
//! the browser's). Where a new test goes: docs/contributing.md.

mod support;

mod cli;
mod engine;
mod hosted;
mod house;
mod llm;
mod money;
mod plan;
mod play;
mod ray;
mod reuse;
mod review;
mod serve;
mod shard;
mod web;

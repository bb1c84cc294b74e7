//! The llm player: against an OpenAI-compatible server written in the
//! tests (`player`; the only test double: a model API is a paid outside
//! service), and against a real small model served on this machine
//! (`real_model`).

mod player;
mod real_model;

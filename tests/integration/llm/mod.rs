//! The llm player against an OpenAI-compatible server written in the
//! tests (the only test double: a model API is a paid outside service).

mod player;

//! The house's own rules, as `docs/contributing.md` writes them: which way
//! imports run, how big a file may grow, how tests are named, and a manual
//! whose links resolve and whose commands parse.

mod layout;
mod manual;

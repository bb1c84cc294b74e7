//! What a person meets at the terminal: output modes and progress,
//! `plan status`, `plan runs`, `gc`, shell completions and install.

mod check;
mod output;
pub(crate) mod report_page;
mod shell;
mod status_runs_gc;

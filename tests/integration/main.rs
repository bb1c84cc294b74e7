//! Integration tests: the real binary against plans in temp repos.

mod support;

mod hostile;
mod plan_check;
mod plan_explain;
mod snapshots;

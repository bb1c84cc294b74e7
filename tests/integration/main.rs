//! Integration tests: the real binary against plans in temp repos.

mod support;

mod engine_resume;
mod engine_reuse;
mod engine_run;
mod hostile;
mod issue10_check;
mod issue10_daily;
mod issue10_output;
mod issue15_bridge;
mod issue15_findings;
mod issue15_gaps;
mod issue15_search;
mod issue15_verdict;
mod issue16_aggregate;
mod issue16_deliver;
mod issue16_estimate;
mod issue16_ledger;
mod issue16_money;
mod issue16_play;
mod issue16_register;
mod issue16_seam;
mod issue16_serve;
mod issue17_junit;
mod issue18_browser;
mod issue8;
mod maze;
mod plan_check;
mod plan_explain;
mod plan_part;
mod plan_play;
mod play;
mod play_maze;
mod schemas;
mod shell;
mod snapshots;

//! A plan cut into shards (`plan run PLAN --shard K/N`) and merged
//! (`plan merge PLAN BUNDLE...`): the same aggregate and gate verdicts as
//! the whole run, nothing played twice, and every bad set of bundles
//! refused before anything runs, naming what is wrong.

mod bundles;
mod durations;
mod executor;
mod merge;
mod paid;

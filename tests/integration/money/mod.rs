//! The paid path on the embedded ledger: estimate, register, paid play,
//! deliver, aggregate, finish, and charged exactly once.

mod aggregate;
mod deliver;
mod estimate;
pub mod ledger;
mod paid_run;
mod play;
mod register;

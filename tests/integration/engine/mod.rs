//! The engine through the real binary: scheduling, resume after kill -9,
//! locks and signals, the run's log, recovery from damaged state, and a
//! step whose request's answer never came.

mod logs;
mod recovery;
mod resume;
mod run;
mod uncertain_requests;

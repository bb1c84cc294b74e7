//! Crash points: where the kill -9 tests stop gameplan around a money call.
//!
//! `GAMEPLAN_CRASH_AT=CALL:BOUNDARY` (CALL one of `estimate`, `register`,
//! `complete`, `aggregate`, `finish`; BOUNDARY one of [`Boundary`]'s names) makes
//! gameplan kill itself with SIGKILL the first time it reaches that
//! boundary: fault injection for the tests that prove a charge is made once
//! through a crash at each boundary. The money kinds mark the boundaries
//! they see; the `local` backend marks [`Boundary::RequestSent`] right
//! after the ledger's commit. Unset, a mark costs one environment lookup.

/// A point around a money call where the kill -9 tests stop gameplan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Boundary {
    /// The idempotency key and body are on disk; nothing was sent.
    KeyJournaled,
    /// The backend did the call; its answer never reached the step (the
    /// `local` backend stops right after the ledger's commit).
    RequestSent,
    /// The step holds the answer; nothing of it is journaled.
    ResponseReceived,
    /// The answer is journaled; the step has not ended.
    ResponseJournaled,
}

impl Boundary {
    pub fn name(self) -> &'static str {
        match self {
            Boundary::KeyJournaled => "key_journaled",
            Boundary::RequestSent => "request_sent",
            Boundary::ResponseReceived => "response_received",
            Boundary::ResponseJournaled => "response_journaled",
        }
    }
}

/// The environment variable that names a crash point.
pub const CRASH_AT: &str = "GAMEPLAN_CRASH_AT";

/// Kills this process with SIGKILL when `GAMEPLAN_CRASH_AT` is
/// `CALL:BOUNDARY` (see the module doc): nothing after this point runs, no
/// destructor, no flush, exactly as `kill -9` would leave it.
pub fn crash_point(call: &str, boundary: Boundary) {
    let Ok(at) = std::env::var(CRASH_AT) else {
        return;
    };
    if at.split_once(':') == Some((call, boundary.name())) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::this(), nix::sys::signal::Signal::SIGKILL);
        // SIGKILL cannot be caught; this is never reached.
        std::process::abort();
    }
}

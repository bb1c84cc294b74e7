//! Ctrl-C, SIGTERM and `plan stop`: the first asks the run to stop cleanly,
//! a second Ctrl-C ends gameplan at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;

use crate::report::progress::Progress;
use crate::steps::Kinds;

/// Set once a stop was requested by a signal (as opposed to fail-fast).
#[derive(Clone, Default)]
pub struct Cancelled(Arc<AtomicBool>);

impl Cancelled {
    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }

    fn set(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Listens for SIGINT, SIGTERM and SIGHUP for the life of the runtime. A
/// closed terminal or a lost SSH session (SIGHUP) stops the run like
/// SIGTERM: journaled, resumable, exit 10, never steps left unsupervised.
/// `stops`: every channel a signal flips (the ordinary stop, and the one
/// that also stops `always` steps).
pub fn listen(
    stops: [watch::Sender<bool>; 2],
    cancelled: Cancelled,
    progress: Progress,
    kinds: Arc<Kinds>,
) {
    let (Ok(mut interrupt), Ok(mut terminate), Ok(mut hangup)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
        signal(SignalKind::hangup()),
    ) else {
        return;
    };
    tokio::spawn(async move {
        let mut interrupts = 0;
        loop {
            let name = tokio::select! {
                _ = interrupt.recv() => { interrupts += 1; "Ctrl-C" }
                _ = terminate.recv() => "SIGTERM",
                _ = hangup.recv() => "SIGHUP (the terminal closed)",
            };
            if interrupts >= 2 {
                // The user insists: take every step's process group down and go.
                kinds.kill_now();
                progress.note("second Ctrl-C: stopped at once; the journal is intact, resume with `gameplan plan resume`");
                std::process::exit(i32::from(crate::exit_code::CANCELED));
            }
            if !cancelled.is_set() {
                cancelled.set();
                for stop in &stops {
                    let _ = stop.send(true);
                }
                progress.note(&format!(
                    "{name}: stopping; no new steps start, running steps are stopped (Ctrl-C again to exit at once)"
                ));
            }
        }
    });
}

//! Ctrl-C, SIGTERM, SIGHUP (a closed terminal) and `plan stop`: the first
//! asks the run to stop cleanly, a second Ctrl-C (or SIGTERM, never a
//! SIGHUP) ends gameplan at once. Signals within [`SAME_REQUEST`] of the
//! first are that same request.

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

/// Signals this close together are one request to stop, not two.
pub const SAME_REQUEST: std::time::Duration = std::time::Duration::from_millis(500);

/// The stop signals, caught from the moment this exists: a signal that
/// comes before [`listen`] runs waits in it, instead of killing gameplan by
/// its default action after the journal said the run started.
pub struct Caught {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
}

impl Caught {
    /// Catches SIGINT, SIGTERM and SIGHUP. `None` only if the runtime cannot
    /// (then they keep their default action).
    pub fn install() -> Option<Caught> {
        Some(Caught {
            interrupt: signal(SignalKind::interrupt()).ok()?,
            terminate: signal(SignalKind::terminate()).ok()?,
            hangup: signal(SignalKind::hangup()).ok()?,
        })
    }
}

/// Listens for SIGINT, SIGTERM and SIGHUP for the life of the runtime. A
/// closed terminal or a lost SSH session (SIGHUP) stops the run like
/// SIGTERM: journaled, resumable, exit 10, never steps left unsupervised.
/// `stops`: every channel a signal flips (the ordinary stop, and the one
/// that also stops `always` steps).
pub fn listen(
    caught: Option<Caught>,
    stops: [watch::Sender<bool>; 2],
    cancelled: Cancelled,
    progress: Progress,
    kinds: Arc<Kinds>,
) {
    let Some(Caught {
        mut interrupt,
        mut terminate,
        mut hangup,
    }) = caught
    else {
        return;
    };
    tokio::spawn(async move {
        // When the first stop signal came: the one that asks to stop cleanly.
        let mut first: Option<tokio::time::Instant> = None;
        loop {
            let (name, insists) = tokio::select! {
                _ = interrupt.recv() => ("Ctrl-C", true),
                _ = terminate.recv() => ("SIGTERM", true),
                // A terminal closing while the run stops is no call to hurry.
                _ = hangup.recv() => ("SIGHUP (the terminal closed)", false),
            };
            if let Some(at) = first {
                // `timeout -s INT`, a terminal and a supervisor often signal the
                // process and its group in the same instant: that is one
                // request, and must not cost the steps their grace period.
                if insists && at.elapsed() >= SAME_REQUEST {
                    // The user insists: take every step's process group down and go.
                    kinds.kill_now();
                    progress.note(&format!("second {}: stopped at once; the journal is intact, resume with `gameplan plan resume`", name.split(' ').next().unwrap_or(name)));
                    std::process::exit(i32::from(crate::exit_code::CANCELED));
                }
                continue;
            }
            first = Some(tokio::time::Instant::now());
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

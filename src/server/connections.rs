//! How many connections `serve` holds, and which one goes when a new one
//! comes past the cap (docs/serve.md › Connections).
//!
//! It owns the cap (`--max-connections`, by default from the open-files
//! limit), the record of each live connection (is a request in flight,
//! since when is it idle), the choice of the connection to shed, and the
//! 503 a newcomer gets when every connection is busy.
//!
//! # Why shed the longest-idle connection
//!
//! A server that simply stops accepting at its cap (or runs out of file
//! descriptors) leaves a new client in the listen queue until some idle
//! socket times out: 400 idle sockets on a server with 256 descriptors
//! made every other client wait the 30 s idle timeout. Closing an idle
//! connection costs its client nothing it cannot redo (no request is in
//! flight on it; a kept-alive client opens a new connection), so a new
//! client is served at once. Only when every connection has a request in
//! flight is the newcomer turned away, with a 503 that says to retry.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt as _;
use tokio::sync::Notify;

/// File descriptors kept for everything but connections: the listener,
/// stdio, the runtime's own, and the ledger's connections (each holds the
/// database, its WAL and its shared memory).
const RESERVED_FDS: u64 = 64;

/// The connection cap when `--max-connections` is not given: the
/// open-files limit (`RLIMIT_NOFILE`, soft) less [`RESERVED_FDS`], at
/// least 8 and at most 65,536 (1,024 files assumed when the limit cannot
/// be read).
pub fn default_max_connections() -> usize {
    let soft = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .map_or(1024, |(soft, _)| soft);
    usize::try_from(soft.saturating_sub(RESERVED_FDS).clamp(8, 65_536)).unwrap_or(8)
}

/// One live connection, as the cap sees it.
pub(super) struct Slot {
    id: u64,
    /// Requests being answered on it (0 or 1 on HTTP/1.1).
    in_flight: AtomicUsize,
    /// Milliseconds since the tracker's start when it last became idle.
    idle_since: AtomicU64,
    /// Told when the connection is shed: it closes.
    pub(super) shed: Notify,
}

impl Slot {
    pub(super) fn busy(&self) -> bool {
        self.in_flight.load(Ordering::SeqCst) > 0
    }
}

/// Every live connection, under the cap.
pub(super) struct Tracker {
    started: Instant,
    max: usize,
    next: AtomicU64,
    slots: Mutex<Vec<Arc<Slot>>>,
}

/// A connection admitted: its slot, freed when this is dropped.
pub(super) struct Admitted {
    tracker: Arc<Tracker>,
    pub(super) slot: Arc<Slot>,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut slots = self.tracker.lock();
        slots.retain(|s| s.id != self.slot.id);
    }
}

impl Tracker {
    pub(super) fn new(max: usize) -> Arc<Tracker> {
        Arc::new(Tracker {
            started: Instant::now(),
            max: max.max(1),
            next: AtomicU64::new(0),
            slots: Mutex::new(Vec::new()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Arc<Slot>>> {
        self.slots
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// A slot for a new connection: a free one, or the one of the
    /// longest-idle connection, which is told to close. `None` when every
    /// connection has a request in flight.
    pub(super) fn admit(self: &Arc<Self>) -> Option<Admitted> {
        let mut slots = self.lock();
        if slots.len() >= self.max {
            let idle = slots
                .iter()
                .enumerate()
                .filter(|(_, s)| !s.busy())
                .min_by_key(|(_, s)| s.idle_since.load(Ordering::SeqCst))
                .map(|(i, _)| i)?;
            // Out of the count at once: its socket closes as soon as its
            // task sees the notice, which is before the next accept.
            slots.swap_remove(idle).shed.notify_one();
        }
        let slot = Arc::new(Slot {
            id: self.next.fetch_add(1, Ordering::SeqCst),
            in_flight: AtomicUsize::new(0),
            idle_since: AtomicU64::new(self.now_ms()),
            shed: Notify::new(),
        });
        slots.push(Arc::clone(&slot));
        Some(Admitted {
            tracker: Arc::clone(self),
            slot,
        })
    }

    /// The cap, for the 503's message.
    pub(super) fn max(&self) -> usize {
        self.max
    }
}

/// A request in flight on a slot, until dropped.
struct InFlight {
    tracker: Arc<Tracker>,
    slot: Arc<Slot>,
}

impl InFlight {
    /// Nothing: a closure that calls it owns the guard, so the request
    /// stays in flight as long as the closure lives.
    #[expect(
        clippy::unused_self,
        reason = "called for what the call makes the closure own"
    )]
    fn keep(&self) {}
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.slot
            .idle_since
            .store(self.tracker.now_ms(), Ordering::SeqCst);
        self.slot.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A hyper service that marks its slot busy while it answers a request:
/// from its headers to the last byte of its answer.
pub(super) struct Tracked<S> {
    pub(super) inner: S,
    pub(super) tracker: Arc<Tracker>,
    pub(super) slot: Arc<Slot>,
}

type Answer<E> = Pin<Box<dyn Future<Output = Result<axum::response::Response, E>> + Send>>;

impl<S, R> hyper::service::Service<R> for Tracked<S>
where
    S: hyper::service::Service<R, Response = axum::response::Response>,
    S::Future: Send + 'static,
    S::Error: 'static,
{
    type Response = axum::response::Response;
    type Error = S::Error;
    type Future = Answer<S::Error>;

    fn call(&self, request: R) -> Self::Future {
        use http_body_util::BodyExt as _;
        self.slot.in_flight.fetch_add(1, Ordering::SeqCst);
        let in_flight = InFlight {
            tracker: Arc::clone(&self.tracker),
            slot: Arc::clone(&self.slot),
        };
        let answer = self.inner.call(request);
        Box::pin(async move {
            let response = answer.await?;
            // Busy until hyper drops the body, once its last byte is
            // written: a connection is not shed mid-answer.
            Ok(response.map(|body| {
                axum::body::Body::new(body.map_frame(move |frame| {
                    in_flight.keep();
                    frame
                }))
            }))
        })
    }
}

/// Answers a connection past the cap, when none could be shed, 503 and
/// closes it, without reading its request: every connection is busy.
pub(super) async fn turn_away(mut stream: tokio::net::TcpStream, max: usize) {
    let body = serde_json::json!({
        "code": "server_busy",
        "message": format!(
            "the server holds the most connections it takes ({max}, `gameplan serve --max-connections`), each with a request in flight; nothing was done or charged: retry shortly"
        ),
    })
    .to_string();
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        let _ = stream.write_all(answer.as_bytes()).await;
        let _ = stream.shutdown().await;
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::Tracker;

    #[test]
    fn past_the_cap_the_longest_idle_connection_is_shed_and_a_busy_one_never() {
        let tracker = Tracker::new(2);
        let first = tracker.admit().expect("first");
        std::thread::sleep(std::time::Duration::from_millis(5));
        let second = tracker.admit().expect("second");
        second
            .slot
            .in_flight
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        // Full: the third sheds the first (idle), not the second (busy).
        let third = tracker.admit().expect("third");
        assert_eq!(tracker.lock().len(), 2);
        assert!(
            tracker.lock().iter().all(|s| s.id != first.slot.id),
            "the idle one went"
        );
        third
            .slot
            .in_flight
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        // Both busy: the fourth is turned away.
        assert!(tracker.admit().is_none());
        drop(first);
        assert_eq!(tracker.lock().len(), 2, "a shed slot is not counted twice");
        drop(second);
        assert!(tracker.admit().is_some(), "a slot freed is taken");
    }

    #[test]
    fn the_default_cap_leaves_room_under_the_open_files_limit() {
        let (soft, _) = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
            .expect("limit");
        let cap = super::default_max_connections() as u64;
        assert!(cap >= 8);
        assert!(
            cap <= soft.saturating_sub(super::RESERVED_FDS).max(8),
            "{cap} of {soft}"
        );
    }
}

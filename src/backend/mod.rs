//! Backends: where money and uploads go (DESIGN §6).
//!
//! Owns the [`Backend`] trait that money and delivery steps call through
//! [`crate::steps::StepIo::backend`]. It knows nothing of scheduling or
//! playing. Today the trait only names the backend: the calls (whoami,
//! estimate, register, transition, heartbeat, upload, complete, aggregate,
//! finish) and the `local` (`SQLite`) and `http` implementations come with the
//! money steps, which are not built yet; a plan using them is refused before
//! anything runs.

/// One backend a run talks to.
pub trait Backend: Send + Sync {
    /// `local` or `http`, for messages.
    fn name(&self) -> &str;
}

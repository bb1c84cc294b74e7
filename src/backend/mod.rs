//! Backends: where money and uploads go (docs/money.md, docs/serve.md).
//!
//! Owns the [`Backend`] trait that money and delivery steps call through
//! [`crate::steps::StepIo::backend`], the typed API it speaks ([`api`]) and
//! its endpoints (method, path, scopes: [`endpoint`]), the ledger that holds every money rule ([`ledger`]), the `local` backend
//! over it ([`local`]), the `http` backend to a server ([`http`]), and the
//! crash points where the kill -9 tests stop a money call
//! ([`crash_points`]). It knows nothing of scheduling or playing. Every call
//! takes the bearer token and answers the API's types or an
//! [`api::ApiError`], whichever backend answers.

pub mod api;
#[cfg(test)]
pub(crate) mod conformance;
pub mod crash_points;
pub mod endpoint;
pub mod hosted;
pub mod http;
pub mod ledger;
pub mod local;
pub mod payloads;

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;

pub use api::UploadTarget;
use api::{
    AggregateCompleteRequest, AggregatePublished, ApiError, CompleteRequest, Completed, Estimate,
    EstimateRequest, Finished, Heartbeat, HeartbeatRequest, JobRef, JobView, RegisterRequest,
    Registered, RunRef, RunView, Token, TransitionRequest, Transitioned, UploadRequest, Uploaded,
    Whoami,
};
#[cfg(doc)]
use endpoint::Endpoint;

/// A backend call in flight (the `http` backend's are network requests).
pub type Call<'a, T> = Pin<Box<dyn Future<Output = Result<T, ApiError>> + Send + 'a>>;

/// One backend a run talks to: one method per call of the API (per
/// [`Endpoint`]: a test holds the `http` backend to calling each).
pub trait Backend: Send + Sync {
    /// `local` or `http`, for messages.
    fn name(&self) -> &str;

    /// [`Endpoint::Whoami`]: the account and scopes of `token`.
    fn whoami<'a>(&'a self, token: &'a Token) -> Call<'a, Whoami>;

    /// [`Endpoint::Estimate`].
    fn estimate<'a>(
        &'a self,
        token: &'a Token,
        game: &'a str,
        request: &'a EstimateRequest,
    ) -> Call<'a, Estimate>;

    /// [`Endpoint::Register`], with `key` its Idempotency-Key.
    fn register<'a>(
        &'a self,
        token: &'a Token,
        game: &'a str,
        key: &'a str,
        request: &'a RegisterRequest,
    ) -> Call<'a, Registered>;

    /// [`Endpoint::Transition`].
    fn transition<'a>(
        &'a self,
        token: &'a Token,
        run: &'a RunRef,
        request: &'a TransitionRequest,
    ) -> Call<'a, Transitioned>;

    /// [`Endpoint::Heartbeat`].
    fn heartbeat<'a>(
        &'a self,
        token: &'a Token,
        run: &'a RunRef,
        request: &'a HeartbeatRequest,
    ) -> Call<'a, Heartbeat>;

    /// [`Endpoint::UploadRunFile`] or [`Endpoint::UploadJobFile`], by `target`.
    fn upload<'a>(
        &'a self,
        token: &'a Token,
        target: &'a UploadTarget,
        request: &'a UploadRequest,
    ) -> Call<'a, Uploaded>;

    /// [`Endpoint::Complete`].
    fn complete<'a>(
        &'a self,
        token: &'a Token,
        run: &'a RunRef,
        request: &'a CompleteRequest,
    ) -> Call<'a, Completed>;

    /// [`Endpoint::AggregateComplete`].
    fn aggregate_complete<'a>(
        &'a self,
        token: &'a Token,
        job: &'a JobRef,
        request: &'a AggregateCompleteRequest,
    ) -> Call<'a, AggregatePublished>;

    /// [`Endpoint::Finish`].
    fn finish<'a>(&'a self, token: &'a Token, job: &'a JobRef) -> Call<'a, Finished>;

    /// [`Endpoint::GetJob`].
    fn get_job<'a>(&'a self, token: &'a Token, job: &'a JobRef) -> Call<'a, JobView>;

    /// [`Endpoint::GetRun`].
    fn get_run<'a>(&'a self, token: &'a Token, run: &'a RunRef) -> Call<'a, RunView>;
}

/// A backend with the token a run's calls carry: what a money step is
/// handed ([`crate::steps::StepIo::backend`]). The token is a secret of the
/// plan's (or the public demo token): it goes in a header, never in a
/// journal record or a body.
#[derive(Clone)]
pub struct Connection {
    pub backend: Arc<dyn Backend>,
    pub token: Token,
}

impl Connection {
    /// The connection a plan's `[backend]` names ([`from_plan`]).
    pub fn of_plan(
        config: &crate::plan::model::Backend,
        state_dir: &Path,
    ) -> Result<Connection, ApiError> {
        let (backend, token) = from_plan(config, state_dir)?;
        Ok(Connection { backend, token })
    }
}

/// The backend a plan's `[backend]` names, and the token its calls carry:
/// `local` opens the state directory's ledger (the plan's token, or the demo
/// token when it gives none); `http` needs a `url` and a `token`.
pub fn from_plan(
    config: &crate::plan::model::Backend,
    state_dir: &Path,
) -> Result<(Arc<dyn Backend>, Token), ApiError> {
    use crate::plan::model::BackendKind;
    match config.kind {
        BackendKind::Local => {
            let backend = local::LocalBackend::open(&local::ledger_path(state_dir))?;
            let token = config
                .token
                .clone()
                .unwrap_or_else(|| ledger::DEMO_TOKEN.to_owned());
            Ok((Arc::new(backend), Token(token)))
        }
        BackendKind::Http => {
            let url = config.url.as_deref().ok_or_else(|| {
                ApiError::invalid_request(
                    "`[backend] kind = \"http\"` needs a `url`: the server's address, e.g. http://127.0.0.1:8787",
                )
            })?;
            let token = config.token.clone().ok_or_else(|| {
                ApiError::invalid_request(
                    "`[backend] kind = \"http\"` needs a `token`, e.g. token = \"{{ secret('GAMEPLAN_TOKEN') }}\"",
                )
            })?;
            Ok((Arc::new(http::HttpBackend::new(url)?), Token(token)))
        }
    }
}

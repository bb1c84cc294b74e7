//! The `local` backend: the embedded ledger (`.gameplan/ledger.sqlite`),
//! called in-process. `SQLite` calls block, so each runs on tokio's blocking
//! pool and the runtime keeps driving the game and the journal meanwhile.

use std::path::Path;
use std::sync::Arc;

use super::api::{
    AggregateCompleteRequest, AggregatePublished, ApiError, CompleteRequest, Completed, Estimate,
    EstimateRequest, Finished, Heartbeat, HeartbeatRequest, JobRef, JobView, RegisterRequest,
    Registered, RunRef, RunView, Token, TransitionRequest, Transitioned, UploadRequest, Uploaded,
    Whoami,
};
use super::crash_points::{Boundary, crash_point};
use super::ledger::Ledger;
use super::{Backend, Call, UploadTarget};

/// The ledger file of a state directory.
pub fn ledger_path(state_dir: &Path) -> std::path::PathBuf {
    state_dir.join("ledger.sqlite")
}

/// The embedded backend over one ledger file.
pub struct LocalBackend {
    ledger: Arc<Ledger>,
}

impl LocalBackend {
    /// Opens (creating on first use) the ledger at `path`.
    pub fn open(path: &Path) -> Result<LocalBackend, ApiError> {
        Ok(LocalBackend::new(Arc::new(Ledger::open(path)?)))
    }

    pub fn new(ledger: Arc<Ledger>) -> LocalBackend {
        LocalBackend { ledger }
    }

    pub fn ledger(&self) -> &Arc<Ledger> {
        &self.ledger
    }

    /// Runs `f` against the ledger on the blocking pool, and marks the
    /// crash point of money call `call` once the ledger has committed.
    fn money_call<T: Send + 'static>(
        &self,
        call: &'static str,
        f: impl FnOnce(&Ledger) -> Result<T, ApiError> + Send + 'static,
    ) -> Call<'_, T> {
        self.call(move |ledger| {
            let answer = f(ledger);
            crash_point(call, Boundary::RequestSent);
            answer
        })
    }

    /// Runs `f` against the ledger on the blocking pool.
    fn call<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Ledger) -> Result<T, ApiError> + Send + 'static,
    ) -> Call<'_, T> {
        let ledger = Arc::clone(&self.ledger);
        Box::pin(async move {
            tokio::task::spawn_blocking(move || f(&ledger))
                .await
                .unwrap_or_else(|e| {
                    Err(ApiError::unavailable(format!(
                        "the ledger call stopped before it answered: {e}"
                    )))
                })
        })
    }
}

impl Backend for LocalBackend {
    fn name(&self) -> &'static str {
        "local"
    }

    fn whoami<'a>(&'a self, token: &'a Token) -> Call<'a, Whoami> {
        let token = token.clone();
        self.call(move |l| l.whoami(&token))
    }

    fn estimate<'a>(
        &'a self,
        token: &'a Token,
        game: &'a str,
        request: &'a EstimateRequest,
    ) -> Call<'a, Estimate> {
        let (token, game, request) = (token.clone(), game.to_owned(), request.clone());
        self.call(move |l| l.estimate(&token, &game, &request))
    }

    fn register<'a>(
        &'a self,
        token: &'a Token,
        game: &'a str,
        key: &'a str,
        request: &'a RegisterRequest,
    ) -> Call<'a, Registered> {
        let (token, game, key, request) = (
            token.clone(),
            game.to_owned(),
            key.to_owned(),
            request.clone(),
        );
        self.money_call("register", move |l| {
            l.register(&token, &game, &key, &request)
        })
    }

    fn transition<'a>(
        &'a self,
        token: &'a Token,
        run: &'a RunRef,
        request: &'a TransitionRequest,
    ) -> Call<'a, Transitioned> {
        let (token, run, request) = (token.clone(), run.clone(), request.clone());
        self.call(move |l| l.transition(&token, &run, &request))
    }

    fn heartbeat<'a>(
        &'a self,
        token: &'a Token,
        run: &'a RunRef,
        request: &'a HeartbeatRequest,
    ) -> Call<'a, Heartbeat> {
        let (token, run, request) = (token.clone(), run.clone(), request.clone());
        self.call(move |l| l.heartbeat(&token, &run, &request))
    }

    fn upload<'a>(
        &'a self,
        token: &'a Token,
        target: &'a UploadTarget,
        request: &'a UploadRequest,
    ) -> Call<'a, Uploaded> {
        let (token, target, request) = (token.clone(), target.clone(), request.clone());
        self.call(move |l| l.upload(&token, &target, &request))
    }

    fn complete<'a>(
        &'a self,
        token: &'a Token,
        run: &'a RunRef,
        request: &'a CompleteRequest,
    ) -> Call<'a, Completed> {
        let (token, run, request) = (token.clone(), run.clone(), request.clone());
        self.money_call("complete", move |l| l.complete(&token, &run, &request))
    }

    fn aggregate_complete<'a>(
        &'a self,
        token: &'a Token,
        job: &'a JobRef,
        request: &'a AggregateCompleteRequest,
    ) -> Call<'a, AggregatePublished> {
        let (token, job, request) = (token.clone(), job.clone(), request.clone());
        self.money_call("aggregate", move |l| {
            l.aggregate_complete(&token, &job, &request)
        })
    }

    fn finish<'a>(&'a self, token: &'a Token, job: &'a JobRef) -> Call<'a, Finished> {
        let (token, job) = (token.clone(), job.clone());
        self.money_call("finish", move |l| l.finish(&token, &job))
    }

    fn get_job<'a>(&'a self, token: &'a Token, job: &'a JobRef) -> Call<'a, JobView> {
        let (token, job) = (token.clone(), job.clone());
        self.call(move |l| l.get_job(&token, &job))
    }

    fn get_run<'a>(&'a self, token: &'a Token, run: &'a RunRef) -> Call<'a, RunView> {
        let (token, run) = (token.clone(), run.clone());
        self.call(move |l| l.get_run(&token, &run))
    }
}

/// The local ledger with the calls a test tampers with: how a step meets a
/// backend that loses a write or answers a job that does not match its
/// cells (the tests of `steps::deliver` and `steps::register`).
#[cfg(test)]
pub(crate) struct Tampered {
    pub inner: LocalBackend,
    /// Answers `register` with the job's runs in reverse order.
    pub reverse_runs: bool,
    /// Drops the first upload of this file name on the floor, answering as
    /// if it was stored: a lost write a repair pass must mend.
    pub drop_once: std::sync::Mutex<Option<String>>,
    /// How many `complete`s were asked.
    pub completes: std::sync::atomic::AtomicUsize,
}

#[cfg(test)]
impl Tampered {
    /// The ledger untampered, counting completes, until a test says more.
    pub fn new(ledger: Arc<Ledger>) -> Tampered {
        Tampered {
            inner: LocalBackend::new(ledger),
            reverse_runs: false,
            drop_once: std::sync::Mutex::new(None),
            completes: 0.into(),
        }
    }
}

#[cfg(test)]
impl Backend for Tampered {
    fn name(&self) -> &'static str {
        "tampered"
    }

    fn whoami<'a>(&'a self, token: &'a Token) -> Call<'a, Whoami> {
        self.inner.whoami(token)
    }

    fn estimate<'a>(
        &'a self,
        token: &'a Token,
        game: &'a str,
        request: &'a EstimateRequest,
    ) -> Call<'a, Estimate> {
        self.inner.estimate(token, game, request)
    }

    fn register<'a>(
        &'a self,
        token: &'a Token,
        game: &'a str,
        key: &'a str,
        request: &'a RegisterRequest,
    ) -> Call<'a, Registered> {
        Box::pin(async move {
            let mut registered = self.inner.register(token, game, key, request).await?;
            if self.reverse_runs {
                registered.job.runs.reverse();
            }
            Ok(registered)
        })
    }

    fn transition<'a>(
        &'a self,
        token: &'a Token,
        run: &'a RunRef,
        request: &'a TransitionRequest,
    ) -> Call<'a, Transitioned> {
        self.inner.transition(token, run, request)
    }

    fn heartbeat<'a>(
        &'a self,
        token: &'a Token,
        run: &'a RunRef,
        request: &'a HeartbeatRequest,
    ) -> Call<'a, Heartbeat> {
        self.inner.heartbeat(token, run, request)
    }

    fn upload<'a>(
        &'a self,
        token: &'a Token,
        target: &'a UploadTarget,
        request: &'a UploadRequest,
    ) -> Call<'a, Uploaded> {
        let mut drop = self.drop_once.lock().unwrap();
        if drop.as_deref() == Some(request.name.as_str()) {
            *drop = None;
            let answer = Uploaded {
                name: request.name.clone(),
                size: i64::try_from(request.body.len()).unwrap(),
                sha256: request.sha256.clone(),
            };
            return Box::pin(async move { Ok(answer) });
        }
        self.inner.upload(token, target, request)
    }

    fn complete<'a>(
        &'a self,
        token: &'a Token,
        run: &'a RunRef,
        request: &'a CompleteRequest,
    ) -> Call<'a, Completed> {
        self.completes
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.inner.complete(token, run, request)
    }

    fn aggregate_complete<'a>(
        &'a self,
        token: &'a Token,
        job: &'a JobRef,
        request: &'a AggregateCompleteRequest,
    ) -> Call<'a, AggregatePublished> {
        self.inner.aggregate_complete(token, job, request)
    }

    fn finish<'a>(&'a self, token: &'a Token, job: &'a JobRef) -> Call<'a, Finished> {
        self.inner.finish(token, job)
    }

    fn get_job<'a>(&'a self, token: &'a Token, job: &'a JobRef) -> Call<'a, JobView> {
        self.inner.get_job(token, job)
    }

    fn get_run<'a>(&'a self, token: &'a Token, run: &'a RunRef) -> Call<'a, RunView> {
        self.inner.get_run(token, run)
    }
}

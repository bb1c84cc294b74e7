//! Step kinds: what each kind of step does, what its result depends on, and
//! which files it produces.
//!
//! The one place where the engine meets the outside world (processes today;
//! money, play and review as their kinds land). The engine owns scheduling,
//! the journal and the store; a kind owns its [`ReuseKey`] inputs, its run,
//! and its outputs. Kinds are dispatched by [`StepKind`]; a kind that is not
//! built yet is refused before a run starts, never half-run.

pub mod command;
pub mod launcher;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use crate::graph::Instance;
use crate::plan::model::{Plan, Step, StepKind};
use crate::reuse::{FileHashCache, ReuseKey};

/// The kinds this gameplan can run.
pub const BUILT_KINDS: [StepKind; 1] = [StepKind::Command];

pub fn is_built(kind: StepKind) -> bool {
    BUILT_KINDS.contains(&kind)
}

/// Everything one step instance may use while it runs.
pub struct StepContext {
    pub root: PathBuf,
    pub run_id: String,
    /// `runs/<run-id>/steps/<step>/`: logs and attempt files.
    pub step_dir: PathBuf,
    pub plan: Arc<Plan>,
    pub step: Step,
    pub instance: Instance,
    pub attempt: u32,
    /// Keys of the steps this one needs, by instance id.
    pub upstream: BTreeMap<String, String>,
    pub hashes: Arc<Mutex<FileHashCache>>,
    /// Flips to true when the run is stopped (signal, `plan stop`, fail-fast).
    pub cancel: watch::Receiver<bool>,
    /// The environment steps inherit (captured once by the CLI).
    pub env: Arc<BTreeMap<String, String>>,
    /// The run's launcher, started by the first command step.
    pub launcher: Arc<launcher::LazyLauncher>,
    /// The plan's secrets, kept out of reuse keys (and so out of the store).
    pub redactor: crate::template::Redactor,
}

/// How one attempt of a step ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepOutcome {
    Succeeded,
    Failed {
        exit_code: Option<i32>,
        message: String,
    },
    /// Stopped from outside (signal, `plan stop`, fail-fast) before it finished.
    Interrupted {
        message: String,
    },
}

/// Why a step could not even be attempted (bad paths, unreadable inputs).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct StepError(pub String);

/// The reuse key of a step instance, or `None` when its result is never reused.
///
/// A secret's value never enters a key: it is replaced by `[redacted]`, so
/// `key.json` in the store never holds it, and rotating a token does not
/// re-run what it was passed to.
pub fn reuse_key(cx: &StepContext) -> Result<Option<ReuseKey>, StepError> {
    let mut key = match cx.step.kind {
        StepKind::Command => command::reuse_key(cx)?,
        _ => return Ok(None),
    };
    cx.redactor.redact_json(&mut key.settings);
    Ok(Some(key))
}

pub async fn run(cx: &StepContext) -> StepOutcome {
    match cx.step.kind {
        StepKind::Command => command::run(cx).await,
        other => StepOutcome::Failed {
            exit_code: None,
            message: format!("step kind `{}` is not built yet", other.name()),
        },
    }
}

/// The files a succeeded step produced (repo-relative), to store for reuse.
pub fn outputs(cx: &StepContext) -> Result<Vec<String>, StepError> {
    match cx.step.kind {
        StepKind::Command => command::outputs(cx),
        _ => Ok(Vec::new()),
    }
}

/// The repo-relative files matched by `patterns`.
pub fn expand(root: &Path, patterns: &[String]) -> Result<Vec<String>, StepError> {
    crate::reuse::expand_inputs(root, patterns).map_err(|e| StepError(e.to_string()))
}

//! Reuse keys, computed ahead of running in one place: the run, `plan
//! explain` (and `estimate`, which must know which cells will be reused
//! before anything is bought) all ask [`KeyMaker::key`], so they cannot
//! disagree about what a step's key is made of.
//!
//! A step's kind decides what enters its key ([`crate::steps::Kind::reuse`]);
//! this module hands it what is known of each step it needs (the digest of
//! that step's outputs, or nothing yet), and redacts secrets from the result.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use petgraph::graph::NodeIndex;

use crate::graph::Pipeline;
use crate::plan::model::Plan;
use crate::reuse::FileHashCache;
use crate::steps::{KeyContext, Kinds, Reuse, StepError, Upstream};
use crate::template::Redactor;

/// What keys are made from, for one run or one preview.
pub struct KeyMaker<'a> {
    pub root: &'a Path,
    pub plan: &'a Plan,
    pub pipeline: &'a Pipeline,
    pub hashes: &'a Mutex<FileHashCache>,
    pub env: &'a BTreeMap<String, String>,
    pub redactor: &'a Redactor,
    pub kinds: &'a Kinds,
    /// The plan file, for the kinds that read something beside it.
    pub plan_path: Option<&'a Path>,
    /// Given by `plan explain` only: see [`KeyContext::units`].
    pub units: Option<&'a crate::reuse::UnitStore>,
    /// See [`KeyContext::baseline`].
    pub baseline: Option<&'a crate::report::baseline::Baseline>,
}

impl KeyMaker<'_> {
    /// What looks wrong in `node`'s settings, for `plan explain`.
    pub fn warnings(&self, node: NodeIndex) -> Vec<String> {
        let instance = self.pipeline.instance(node);
        let step = &self.pipeline.steps[instance.step];
        self.kinds
            .get(instance.kind)
            .map(|kind| kind.warnings(self.root, step))
            .unwrap_or_default()
    }

    /// The key of `node`, given the output digest of each step it needs
    /// (`None`: not run yet).
    ///
    /// A secret's value never enters a key: it is replaced by `[redacted]`,
    /// so `key.json` in the store never holds it, and rotating a token does
    /// not re-run what it was passed to.
    pub fn key(
        &self,
        node: NodeIndex,
        outputs_of: impl Fn(NodeIndex) -> Option<String>,
    ) -> Result<Reuse, StepError> {
        let instance = self.pipeline.instance(node);
        let step = &self.pipeline.steps[instance.step];
        let Some(kind) = self.kinds.get(instance.kind) else {
            return Ok(Reuse::Never(format!(
                "`{}` steps are not built yet; `plan run` refuses this plan",
                instance.kind.name()
            )));
        };
        let upstream: Vec<Upstream> = self
            .pipeline
            .needs(node)
            .into_iter()
            .map(|need| Upstream {
                id: self.pipeline.instance(need).id.clone(),
                kind: self.pipeline.instance(need).kind,
                outputs: outputs_of(need),
            })
            .collect();
        // A key reads the ids of what the step reads, not their files.
        let reads = self.kinds.reads(self.pipeline, node, |id| {
            PathBuf::from(crate::journal::run::file_name(id))
        });
        let cx = KeyContext {
            root: self.root,
            plan: self.plan,
            reads: &reads,
            step,
            instance,
            upstream: &upstream,
            hashes: self.hashes,
            env: self.env,
            plan_path: self.plan_path,
            units: self.units,
            baseline: self.baseline,
        };
        // Inputs are expanded and hashed back to back here, with nothing
        // run in between: one stat per input file serves both.
        let sharing = crate::reuse::share_stats();
        let reuse = kind.reuse(&cx);
        drop(sharing);
        let mut reuse = reuse?;
        if let Reuse::Key(key) = &mut reuse {
            self.redactor.redact_json(&mut key.settings);
        }
        Ok(reuse)
    }
}

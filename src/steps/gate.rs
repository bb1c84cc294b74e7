//! The `gate` step kind: judges one gate's lenses over their units and
//! writes `review.json` and `review.md` in the step's directory
//! (docs/review.md › What a gate writes). Judging is `crate::review`'s;
//! this kind owns where the units come from (the steps it needs), its
//! outcome and its report parts.
//!
//! - **Outcome**: SEND-READY succeeds; FIX FIRST fails the step (exit 1);
//!   INCOMPLETE ends it [`StepOutcome::Incomplete`] (exit 2), naming the
//!   missing units; when an llm lens's model endpoint never answered,
//!   [`StepOutcome::ModelUnreachable`] (exit 5) instead. Either way the
//!   gates after it are not run (the engine skips what needs a step that
//!   did not pass).
//! - **Units**: `files` from the lens's globs; `findings` from every
//!   `aggregate.json` among the steps the gate needs (directly or not;
//!   with the gate's `only_new`, those not `known` to the run's baseline,
//!   with `only_stable`, those not labelled `flaky`);
//!   `runs` from every play cell `report.json` among them; `patches` from
//!   the lens's patch series (`review::patches`). A lens with nothing to
//!   judge (globs that match no file, no aggregate, no play report) is
//!   INCOMPLETE, never a pass.
//! - **Reuse**: per unit, not per step: the step runs every time and
//!   judges only the units whose clean verdict is not stored (see
//!   `review::judge`). `plan explain` shows, per lens, how many units it
//!   would judge and reuse.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use super::{
    BoxFuture, JunitCase, KeyContext, Kind, Outputs, Reuse, StepContext, StepError, StepIo,
    StepOutcome, SummarySection,
};
use crate::plan::model::{Gate as PlanGate, Lens, LensOver, Plan, Step, StepKind};
use crate::review::judge::{Judging, Reviewer, count_reused, judge_gate};
use crate::review::unit::{self, Unit};
use crate::review::verdict::{REVIEW_JSON, REVIEW_MD, Review, Status};
use crate::review::waivers::Waivers;

#[derive(Default)]
pub struct Gate {
    /// The last reviews this process wrote, by step directory: the run's
    /// summary and `JUnit` cases read them back at its end, and a review of
    /// many units is not parsed back from `review.json` for each.
    written: Mutex<Vec<(PathBuf, Arc<Review>)>>,
}

/// Reviews [`Gate`] keeps in memory (a plan's gates, typically).
const KEPT_REVIEWS: usize = 8;

impl Gate {
    fn keep(&self, step_dir: &Path, review: Arc<Review>) {
        let mut written = self.written.lock().unwrap_or_else(PoisonError::into_inner);
        written.retain(|(dir, _)| dir != step_dir);
        if written.len() >= KEPT_REVIEWS {
            written.remove(0);
        }
        written.push((step_dir.to_path_buf(), review));
    }

    /// The review in `step_dir`: as this process wrote it, or from disk.
    fn review_in(&self, step_dir: &Path) -> Option<Arc<Review>> {
        let written = self.written.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, review)) = written.iter().find(|(dir, _)| dir == step_dir) {
            return Some(review.clone());
        }
        drop(written);
        read_review(step_dir).map(Arc::new)
    }
}

/// The gate a step judges.
fn gate_of<'p>(plan: &'p Plan, step: &Step) -> Result<&'p PlanGate, StepError> {
    let name = step
        .settings::<crate::plan::kinds::gate::Gate>()
        .map_err(StepError)?
        .gate
        .as_str();
    plan.gates
        .iter()
        .find(|g| g.name == name)
        .ok_or_else(|| StepError(format!("gate `{name}` is not in the plan")))
}

/// Where a lens's units come from, besides its own `files` globs.
struct Sources {
    aggregates: Vec<PathBuf>,
    /// The gate's `only_new` and `only_stable`: which findings its
    /// `findings` units are.
    narrow: unit::Narrow,
    reports: Vec<(String, PathBuf)>,
    /// `files` units by glob list: lenses of a gate over the same files
    /// share one walk, one hashing and one read of each file.
    files: Mutex<Vec<(Vec<String>, Listed)>>,
}

/// A lens's units, or why they could not be listed.
type Listed = Result<Vec<Unit>, String>;

impl Sources {
    /// What the steps `io` shows (those the gate needs, directly or not) left.
    fn of(io: &StepIo) -> Sources {
        let mut sources = Sources {
            aggregates: Vec::new(),
            narrow: unit::Narrow::default(),
            reports: Vec::new(),
            files: Mutex::new(Vec::new()),
        };
        for id in io.upstream_ids() {
            let Some(up) = io.upstream(&id) else {
                continue;
            };
            let aggregate = up.step_dir.join(crate::report::aggregate::AGGREGATE_JSON);
            if aggregate.is_file() {
                sources.aggregates.push(aggregate);
            }
            let report = up.step_dir.join("report.json");
            if report.is_file() {
                sources.reports.push((id, report));
            }
        }
        sources
    }

    fn files(
        &self,
        root: &Path,
        hashes: &Mutex<crate::reuse::FileHashCache>,
        globs: &[String],
    ) -> Result<Vec<Unit>, String> {
        let mut listed = self.files.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, units)) = listed.iter().find(|(g, _)| g.as_slice() == globs) {
            return units.clone();
        }
        let units = unit::files(root, globs, hashes);
        listed.push((globs.to_vec(), units.clone()));
        units
    }

    fn units(
        &self,
        root: &Path,
        hashes: &Mutex<crate::reuse::FileHashCache>,
        lens: &Lens,
    ) -> Result<Vec<Unit>, String> {
        match lens.over {
            LensOver::Files => match self.files(root, hashes, &lens.sources)? {
                // A typo in a glob must not read as a pass.
                units if units.is_empty() => Err(format!(
                    "its `files` ({}) match no file in the repo: it judged nothing, which is \
                     not a pass; fix the globs or drop the lens",
                    lens.sources.join(", ")
                )),
                units => Ok(units),
            },
            LensOver::Findings if self.aggregates.is_empty() => Err(
                "no aggregate to read findings from: a lens over findings needs the gate step to \
                 need an `aggregate` step (the default pipeline does)"
                    .into(),
            ),
            LensOver::Findings => unit::findings(&self.aggregates, self.narrow),
            LensOver::Runs if self.reports.is_empty() => Err(
                "no play report to read: a lens over runs needs the gate step to need the `play` \
                 cells (directly or through `aggregate`)"
                    .into(),
            ),
            LensOver::Runs => unit::runs(&self.reports),
            LensOver::Patches => unit::patches(root, &lens.sources),
        }
    }
}

/// The one-line cause of a gate that did not pass, naming what stands or
/// is missing.
fn headline(review: &Review) -> String {
    let mut parts = Vec::new();
    for lens in &review.lenses {
        let standing: Vec<String> = lens
            .standing()
            .map(|(u, f)| format!("{}: {}", u.unit, f.title))
            .collect();
        let missing: Vec<&str> = lens.missing().map(|u| u.unit.as_str()).collect();
        if !standing.is_empty() {
            parts.push(format!(
                "lens `{}` has {} ({})",
                lens.name,
                crate::report::plural(standing.len(), "finding"),
                crate::text::first_few(&standing, 3, "; "),
            ));
        }
        if !missing.is_empty() {
            let why = lens
                .missing()
                .next()
                .and_then(|u| u.missing.clone())
                .unwrap_or_default();
            parts.push(format!(
                "lens `{}` left {} missing: {} ({why})",
                lens.name,
                crate::report::plural(missing.len(), "unit"),
                crate::text::first_few(&missing, 5, ", "),
            ));
        }
        for e in &lens.errors {
            parts.push(format!("lens `{}` judged nothing: {e}", lens.name));
        }
    }
    format!(
        "gate `{}` is {}: {} (review: review.md in the step's directory)",
        review.gate,
        review.status.word(),
        parts.join("; ")
    )
}

/// Every string of `value` with the run's secrets replaced.
fn redact(io: &StepIo, value: &mut serde_json::Value) {
    match value {
        serde_json::Value::String(s) => *s = io.redact(s),
        serde_json::Value::Array(items) => items.iter_mut().for_each(|v| redact(io, v)),
        serde_json::Value::Object(map) => map.values_mut().for_each(|v| redact(io, v)),
        _ => {}
    }
}

/// Writes `review.json` and `review.md`; the review as written (secrets
/// redacted).
fn write_review(cx: &StepContext, io: &StepIo, review: Review) -> Result<Arc<Review>, StepError> {
    // Without secrets there is nothing to redact: no round trip through a
    // JSON tree of every verdict.
    let review = if io.redactor().is_empty() {
        review
    } else {
        let mut doc = serde_json::to_value(&review).map_err(|e| StepError(e.to_string()))?;
        redact(io, &mut doc);
        serde_json::from_value::<Review>(doc).map_err(|e| StepError(e.to_string()))?
    };
    // Sized up front: grown by doubling, a dump of 20,000 verdicts was
    // copied a dozen times on its way out.
    let units: usize = review.lenses.iter().map(|l| l.units.len()).sum();
    let mut json = Vec::with_capacity(4096 + units * 192);
    serde_json::to_writer_pretty(&mut json, &review).map_err(|e| StepError(e.to_string()))?;
    json.push(b'\n');
    std::fs::create_dir_all(&cx.step_dir)
        .and_then(|()| std::fs::write(cx.step_dir.join(REVIEW_JSON), json))
        .and_then(|()| {
            std::fs::write(
                cx.step_dir.join(REVIEW_MD),
                crate::report::review::markdown(&review),
            )
        })
        .map_err(|e| {
            StepError(format!(
                "cannot write the review in {}: {e}",
                cx.step_dir.display()
            ))
        })?;
    Ok(Arc::new(review))
}

fn read_review(step_dir: &Path) -> Option<Review> {
    let bytes = std::fs::read(step_dir.join(REVIEW_JSON)).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// A lens's units when they can be listed before anything runs (its own
/// files or patch series); `None` when they come from the steps it needs.
fn units_ahead(cx: &KeyContext<'_>, lens: &Lens) -> Option<Result<Vec<Unit>, String>> {
    match lens.over {
        LensOver::Files => Some(unit::files(cx.root, &lens.sources, cx.hashes)),
        LensOver::Patches => Some(unit::patches(cx.root, &lens.sources)),
        LensOver::Findings | LensOver::Runs => None,
    }
}

impl Kind for Gate {
    fn kind(&self) -> StepKind {
        StepKind::Gate
    }

    fn reuse(&self, cx: &KeyContext<'_>) -> Result<Reuse, StepError> {
        let gate = gate_of(cx.plan, cx.step)?;
        let mut why = "a gate judges per unit, every run, reusing each unit's stored clean verdict"
            .to_owned();
        let Some(store) = cx.units else {
            return Ok(Reuse::Never(why));
        };
        let waivers = Waivers::beside(cx.plan_path).unwrap_or_default();
        let mut lenses = Vec::new();
        for name in &gate.lenses {
            let Some(lens) = cx.plan.lenses.iter().find(|l| &l.name == name) else {
                continue;
            };
            let Some(listed) = units_ahead(cx, lens) else {
                lenses.push(format!(
                    "`{name}`: its units are known once the steps it needs have run"
                ));
                continue;
            };
            match listed {
                Ok(units) => {
                    let reused = count_reused(store, cx.root, lens, None, &waivers, &units);
                    lenses.push(format!(
                        "`{name}`: {} to judge, {reused} reused",
                        units.len() - reused
                    ));
                }
                Err(e) => lenses.push(format!("`{name}`: its units cannot be listed: {e}")),
            }
        }
        for slug in &gate.reviewers {
            if let Ok(reviewer) = Reviewer::of(cx.plan, cx.root, slug) {
                for name in &gate.lenses {
                    let Some(lens) = cx.plan.lenses.iter().find(|l| &l.name == name) else {
                        continue;
                    };
                    if let Some(Ok(units)) = units_ahead(cx, lens) {
                        let reused =
                            count_reused(store, cx.root, lens, Some(&reviewer), &waivers, &units);
                        lenses.push(format!(
                            "`{name}@{slug}` (if the lenses pass): {} to judge, {reused} reused",
                            units.len() - reused
                        ));
                    }
                }
            }
        }
        why.push_str(": ");
        why.push_str(&lenses.join("; "));
        Ok(Reuse::Never(why))
    }

    fn run<'a>(&'a self, cx: &'a StepContext, io: &'a StepIo) -> BoxFuture<'a, StepOutcome> {
        Box::pin(async move {
            if let Some(stop) = cx.stopped("stopped before the gate judged anything") {
                return stop;
            }
            io.mark_started();
            let gate = match gate_of(&cx.plan, &cx.step) {
                Ok(gate) => gate.clone(),
                Err(e) => return e.into(),
            };
            let plan_path = cx.plan_file.as_ref().map(|f| cx.root.join(f));
            let waivers = match Waivers::beside(plan_path.as_deref()) {
                Ok(w) => w,
                Err(e) => {
                    return StepOutcome::Refused {
                        message: format!("{e}; nothing was judged and nothing charged"),
                    };
                }
            };
            let templates =
                crate::template::Templates::new((*cx.env).clone(), io.redactor().clone());
            let model_budget =
                crate::review::llm_lens::ModelBudget::new(cx.plan.budget.max_model_usd);
            let judging = Judging {
                root: &cx.root,
                env: &cx.env,
                templates: &templates,
                store: Some(&cx.units),
                waivers: &waivers,
                cancel: cx.cancel.clone(),
                model_budget: &model_budget,
            };
            let mut sources = Sources::of(io);
            sources.narrow = unit::Narrow {
                only_new: gate.only_new,
                only_stable: gate.only_stable,
            };
            let units_of = |lens: &Lens| sources.units(&cx.root, &cx.hashes, lens);
            // The file-hash cache it filled is saved when the run closes.
            let review = judge_gate(&judging, &cx.plan, &gate, &units_of).await;
            let review = match write_review(cx, io, review) {
                Ok(review) => review,
                Err(e) => return e.into(),
            };
            self.keep(&cx.step_dir, review.clone());
            if let Some(stop) = cx.stopped("stopped while the gate judged") {
                return stop;
            }
            match review.status {
                // A finding that stands is the more useful red; otherwise a
                // model that never answered is exit 5, not a mere gap.
                Status::Incomplete if review.usage.unreachable => StepOutcome::ModelUnreachable {
                    message: io.redact(&headline(&review)),
                },
                Status::SendReady => StepOutcome::Succeeded,
                Status::FixFirst => StepOutcome::Failed {
                    exit_code: None,
                    message: io.redact(&headline(&review)),
                },
                Status::Incomplete => StepOutcome::Incomplete {
                    message: io.redact(&headline(&review)),
                },
            }
        })
    }

    fn outputs(&self, cx: &StepContext) -> Result<Outputs, StepError> {
        Ok(Outputs {
            base: cx.step_dir.clone(),
            files: vec![REVIEW_JSON.to_owned(), REVIEW_MD.to_owned()],
        })
    }

    fn restore_base(&self, cx: &StepContext) -> PathBuf {
        cx.step_dir.clone()
    }

    fn log(&self, step_dir: &Path) -> Option<PathBuf> {
        Some(step_dir.join(REVIEW_MD))
    }

    fn summary(&self, step_dir: &Path) -> Option<SummarySection> {
        let review = self.review_in(step_dir)?;
        Some(SummarySection {
            step: String::new(),
            text: crate::report::review::summary(&review),
        })
    }

    fn junit_cases(&self, step_dir: &Path) -> Vec<JunitCase> {
        self.review_in(step_dir)
            .map(|r| crate::report::review::junit_cases(&r))
            .unwrap_or_default()
    }

    fn judges(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn review(gate: &str) -> Arc<Review> {
        Arc::new(Review::of(gate, Status::SendReady, Vec::new()))
    }

    #[test]
    fn the_gate_keeps_its_last_reviews_and_reads_older_ones_from_disk() {
        let dir = tempfile::tempdir().expect("tempdir");
        let gate = Gate::default();
        let dirs: Vec<PathBuf> = (0..=KEPT_REVIEWS)
            .map(|i| dir.path().join(format!("step{i}")))
            .collect();
        for (i, step_dir) in dirs.iter().enumerate() {
            gate.keep(step_dir, review(&format!("g{i}")));
        }
        // The first was let go: only its file could answer, and there is none.
        assert!(gate.review_in(&dirs[0]).is_none());
        assert_eq!(
            gate.review_in(&dirs[KEPT_REVIEWS]).map(|r| r.gate.clone()),
            Some(format!("g{KEPT_REVIEWS}"))
        );
        // On disk, a review this process did not write is read from its file.
        std::fs::create_dir_all(&dirs[0]).expect("mkdir");
        let text = serde_json::to_vec(&*review("from disk")).expect("json");
        std::fs::write(dirs[0].join(REVIEW_JSON), text).expect("write");
        assert_eq!(
            gate.review_in(&dirs[0]).map(|r| r.gate.clone()),
            Some("from disk".to_owned())
        );
    }
}

//! Baselines (`plan run --baseline FILE|RUN_ID`, docs/running.md ›
//! Baselines): what an earlier run found, read from its `aggregate.json`,
//! and how this run's findings are labelled against it.
//!
//! A finding is matched by its fingerprint `id` alone (never the seed or
//! the persona, `play::findings`), so the same bug in two runs is `known`
//! and a bug the baseline does not hold is `new`; the baseline's findings
//! this run did not meet again are `fixed`. Only the ids, titles,
//! categories and severities are kept: they are all a label or a `fixed`
//! line needs, and small enough to journal, so a resumed run compares with
//! the baseline it started with even if the file changed since.

use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::aggregate::{AGGREGATE_FORMAT, AGGREGATE_JSON, Aggregate};
use super::playtest::FindingLine;
use crate::journal::run::{RunDir, RunHistory};

/// How a finding stands against the run's baseline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Label {
    /// The baseline does not hold it: the change brought it.
    New,
    /// The baseline holds it: it was there before the change.
    Known,
}

impl Label {
    pub fn name(self) -> &'static str {
        match self {
            Label::New => "new",
            Label::Known => "known",
        }
    }
}

/// A finding of the baseline, as `fixed` names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct BaselineFinding {
    pub id: String,
    pub title: String,
    pub category: String,
    pub severity: String,
}

/// The findings a run is compared with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Baseline {
    /// What `--baseline` named, as given (a path or a run id): for messages.
    pub source: String,
    /// The `aggregate.json` it was read from.
    pub path: String,
    /// The sha256 of its findings' ids, sorted: what an aggregate's key
    /// holds and what a resume compares.
    pub digest: String,
    /// Distinct by id, in the baseline's order.
    pub findings: Vec<BaselineFinding>,
}

/// `aggregate.json` as a baseline reads it: the findings and nothing else.
#[derive(Deserialize)]
struct Doc {
    aggregate: u32,
    findings: Vec<BaselineFinding>,
    #[serde(default)]
    simulations: Vec<DocSimulation>,
}

#[derive(Deserialize)]
struct DocSimulation {
    #[serde(default)]
    findings: Vec<BaselineFinding>,
}

/// What to do when a baseline cannot be read.
const WHAT_TO_PASS: &str = "pass an earlier run's aggregate.json (under the run's directory, \
     `.gameplan/runs/<run-id>/steps/<aggregate step>/aggregate.json`) or the id of a run of this \
     repo with an aggregate step (`gameplan plan runs` lists them). Nothing was run or charged";

impl Baseline {
    /// Reads `given`: a path to an `aggregate.json`, else the id of a run
    /// in `state_dir` whose one aggregate step wrote one. The error says
    /// what was tried and what to pass instead.
    pub fn load(given: &str, state_dir: &Path) -> Result<Baseline, String> {
        let path = Path::new(given);
        if path.is_file() {
            return Self::read(given, path);
        }
        if path.is_dir() {
            return Err(format!(
                "--baseline {given} is a directory, not an aggregate.json; {WHAT_TO_PASS}"
            ));
        }
        let run = RunDir::new(state_dir, given);
        let plain_id = !given.is_empty()
            && given
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !plain_id || !run.journal().is_file() {
            return Err(format!(
                "--baseline {given}: no such file, and no run `{given}` in {}; {WHAT_TO_PASS}",
                state_dir.display()
            ));
        }
        let file = Self::of_run(given, &run)?;
        Self::read(given, &file)
    }

    /// The `aggregate.json` of run `id`'s one aggregate step.
    fn of_run(id: &str, run: &RunDir) -> Result<PathBuf, String> {
        let history = RunHistory::read(&run.journal())
            .map_err(|e| format!("--baseline {id}: cannot read the run's journal: {e}"))?;
        let aggregates: Vec<&str> = history
            .steps
            .iter()
            .filter(|s| s.kind == crate::plan::model::StepKind::Aggregate.name())
            .map(|s| s.id.as_str())
            .collect();
        match aggregates.as_slice() {
            [] => Err(format!(
                "--baseline {id}: run {id} of `{}` has no aggregate step, so it wrote no \
                 aggregate.json to compare with; {WHAT_TO_PASS}",
                history.plan
            )),
            [one] => {
                let file = run.step(one).join(AGGREGATE_JSON);
                if file.is_file() {
                    Ok(file)
                } else {
                    Err(format!(
                        "--baseline {id}: the aggregate step `{one}` of run {id} did not write \
                         {} (it is {}); {WHAT_TO_PASS}",
                        file.display(),
                        history.state_of(one).word()
                    ))
                }
            }
            several => Err(format!(
                "--baseline {id}: run {id} has {} aggregate steps ({}); pass the aggregate.json \
                 of the one to compare with: {}. Nothing was run or charged",
                several.len(),
                several.join(", "),
                several
                    .iter()
                    .map(|s| run.step(s).join(AGGREGATE_JSON).display().to_string())
                    .collect::<Vec<_>>()
                    .join(" or ")
            )),
        }
    }

    fn read(given: &str, path: &Path) -> Result<Baseline, String> {
        let bytes = std::fs::read(path)
            .map_err(|e| format!("--baseline {given}: cannot read {}: {e}", path.display()))?;
        let doc: Doc = serde_json::from_slice(&bytes).map_err(|e| {
            format!(
                "--baseline {given}: {} is not an aggregate.json ({e}); {WHAT_TO_PASS}",
                path.display()
            )
        })?;
        if doc.aggregate != AGGREGATE_FORMAT {
            return Err(format!(
                "--baseline {given}: {} is an aggregate of format {}; this gameplan reads format \
                 {AGGREGATE_FORMAT}. Make the baseline again with this gameplan. Nothing was run \
                 or charged",
                path.display(),
                doc.aggregate
            ));
        }
        let mut findings: Vec<BaselineFinding> = Vec::new();
        let all = doc
            .findings
            .into_iter()
            .chain(doc.simulations.into_iter().flat_map(|s| s.findings));
        for f in all {
            if !findings.iter().any(|known| known.id == f.id) {
                findings.push(f);
            }
        }
        Ok(Baseline {
            source: given.to_owned(),
            path: std::path::absolute(path)
                .unwrap_or_else(|_| path.to_path_buf())
                .display()
                .to_string(),
            digest: digest(&findings),
            findings,
        })
    }

    /// The label of a finding of this run.
    pub fn label(&self, id: &str) -> Label {
        if self.findings.iter().any(|f| f.id == id) {
            Label::Known
        } else {
            Label::New
        }
    }

    /// Labels `lines` and puts the new ones first (a stable sort: each
    /// part keeps its order, most severe first).
    pub fn label_lines(&self, lines: &mut [FindingLine]) {
        for line in lines.iter_mut() {
            line.baseline = Some(self.label(&line.id));
        }
        lines.sort_by_key(|l| l.baseline != Some(Label::New));
    }

    /// The baseline's findings none of `seen` (this run's ids) is.
    pub fn fixed<'a>(&self, seen: impl IntoIterator<Item = &'a str>) -> Vec<BaselineFinding> {
        let seen: std::collections::BTreeSet<&str> = seen.into_iter().collect();
        self.findings
            .iter()
            .filter(|f| !seen.contains(f.id.as_str()))
            .cloned()
            .collect()
    }

    /// Labels the aggregate's findings (its simulations' too) and lists the
    /// baseline's findings it did not meet again in `fixed`.
    pub fn apply(&self, agg: &mut Aggregate) {
        self.label_lines(&mut agg.findings);
        for s in &mut agg.simulations {
            self.label_lines(&mut s.findings);
        }
        let seen = agg
            .findings
            .iter()
            .chain(agg.simulations.iter().flat_map(|s| &s.findings))
            .map(|f| f.id.as_str());
        agg.fixed = Some(self.fixed(seen));
    }
}

/// The digest of a baseline's findings: their ids, sorted.
fn digest(findings: &[BaselineFinding]) -> String {
    let mut ids: Vec<&str> = findings.iter().map(|f| f.id.as_str()).collect();
    ids.sort_unstable();
    crate::reuse::sha256_hex(ids.join("\n").as_bytes())
}

/// How many of `lines` are new and known, for a summary line.
pub fn counts(lines: &[FindingLine]) -> (usize, usize) {
    let new = lines
        .iter()
        .filter(|l| l.baseline == Some(Label::New))
        .count();
    let known = lines
        .iter()
        .filter(|l| l.baseline == Some(Label::Known))
        .count();
    (new, known)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).expect("write");
        path
    }

    #[test]
    fn a_baseline_file_is_read_and_labels_by_id() {
        let dir = tempfile::tempdir().expect("tempdir");
        let doc = r#"{"aggregate":1,"findings":[
            {"id":"a","title":"A","category":"crash","severity":"critical","extra":1},
            {"id":"b","title":"B","category":"hang","severity":"high"}],
            "simulations":[{"findings":[{"id":"a","title":"A","category":"crash","severity":"critical"},
            {"id":"c","title":"C","category":"stuck","severity":"low"}]}]}"#;
        let path = write(dir.path(), "aggregate.json", doc);
        let b = Baseline::load(path.to_str().unwrap(), dir.path()).expect("baseline");
        let ids: Vec<&str> = b.findings.iter().map(|f| f.id.as_str()).collect();
        assert_eq!(ids, ["a", "b", "c"]);
        assert_eq!(b.label("a"), Label::Known);
        assert_eq!(b.label("z"), Label::New);
        let fixed = b.fixed(["a", "z"]);
        let fixed: Vec<&str> = fixed.iter().map(|f| f.id.as_str()).collect();
        assert_eq!(fixed, ["b", "c"]);
    }

    #[test]
    fn a_bad_baseline_says_what_to_pass() {
        let dir = tempfile::tempdir().expect("tempdir");
        let missing = Baseline::load("nowhere.json", dir.path()).unwrap_err();
        assert!(
            missing.contains("no such file, and no run `nowhere.json`"),
            "{missing}"
        );
        assert!(missing.contains("Nothing was run or charged"), "{missing}");
        let path = write(dir.path(), "x.json", "{\"cells\": []}");
        let bad = Baseline::load(path.to_str().unwrap(), dir.path()).unwrap_err();
        assert!(bad.contains("is not an aggregate.json"), "{bad}");
        let path = write(dir.path(), "y.json", r#"{"aggregate":99,"findings":[]}"#);
        let old = Baseline::load(path.to_str().unwrap(), dir.path()).unwrap_err();
        assert!(old.contains("format 99"), "{old}");
    }
}

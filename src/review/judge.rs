//! Judging: one lens (or one reviewer's instance of it) over its units,
//! with unit reuse, dispositions and statuses; and one gate, its lenses in
//! order, then its reviewers' instances once they pass.
//!
//! # Unit reuse
//!
//! A clean verdict (`clear` or `n/a`) is stored in the unit store under a
//! key of: the lens's definition (its settings as the plan gives them, the
//! sha256 of a repo program or charter it runs, the reviewer's card, the
//! prompt version), the unit's id and content sha256, and the digest of the
//! dispositions in force for the lens. A unit whose key holds a clean
//! verdict is not judged (a command lens is not even sent it). The keys
//! live per unit in one entry per lens instance ([`Memo`]), so a finding on
//! a unit drops every clean verdict stored for it under the lens at once: a
//! unit that was once found wanting is judged afresh even when its content
//! goes back to an earlier clean state. Findings and missing verdicts are
//! never stored.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::sync::watch;

use super::command;
use super::unit::Unit;
use super::verdict::{
    LensFinding, LensReport, REVIEW_FORMAT, Review, ReviewerRun, Status, UnitVerdict, Usage,
    Verdict,
};
use super::waivers::{Waived, Waivers};
use crate::plan::model::{Card, Gate, Judge as LensJudge, Lens, Plan, Program};
use crate::reuse::{UnitStore, sha256_hex};
use crate::template::Templates;

/// What enters every unit key besides the lens and the unit: bump it when
/// what a verdict means changes (how a rule's result is read, the stdin
/// document of a command lens), so no stored verdict outlives it.
pub const PROMPT_VERSION: u32 = 1;

/// How a lens answered for one unit.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    Judged {
        verdict: Verdict,
        findings: Vec<RawFinding>,
    },
    /// Not judged, and why.
    Missing(String),
}

/// A finding as a lens states it, before dispositions are applied.
#[derive(Debug, Clone, PartialEq)]
pub struct RawFinding {
    pub title: String,
    pub severity: String,
    pub detail: Option<String>,
    pub line: Option<u64>,
}

/// A gate reviewer: a persona whose card joins the lens.
#[derive(Debug, Clone, PartialEq)]
pub struct Reviewer {
    pub slug: String,
    pub card: String,
}

impl Reviewer {
    /// `slug` of `plan`, its card read from the repo when it is a file.
    pub fn of(plan: &Plan, root: &Path, slug: &str) -> Result<Reviewer, String> {
        let persona = plan
            .persona(slug)
            .ok_or_else(|| format!("reviewer `{slug}` is not a persona of the plan"))?;
        let card = match &persona.card {
            Card::Text(text) => text.clone(),
            Card::File(path) => std::fs::read_to_string(root.join(path))
                .map_err(|e| format!("reviewer `{slug}`: cannot read its card {path}: {e}"))?,
        };
        Ok(Reviewer {
            slug: slug.to_owned(),
            card,
        })
    }

    fn json(&self) -> Value {
        json!({"slug": self.slug, "card": self.card})
    }
}

/// What judging uses of the run.
pub struct Judging<'a> {
    pub root: &'a Path,
    /// The environment a command lens runs with.
    pub env: &'a BTreeMap<String, String>,
    pub templates: &'a Templates,
    /// Where clean verdicts are kept; `None` judges every unit afresh.
    pub store: Option<&'a UnitStore>,
    pub waivers: &'a Waivers,
    pub cancel: watch::Receiver<bool>,
    /// What the gate's llm lenses may spend together (`budget.max_model_usd`).
    pub model_budget: &'a super::llm_lens::ModelBudget,
}

/// The digest of what a lens instance's verdicts depend on besides the
/// unit: see the module doc.
pub fn lens_digest(root: &Path, lens: &Lens, reviewer: Option<&Reviewer>) -> String {
    let mut files = BTreeMap::new();
    let mut note = |word: &str| {
        let rel = word.trim_start_matches("./");
        if rel.is_empty() || rel.starts_with('/') || rel.contains("..") {
            return;
        }
        if let Ok(bytes) = std::fs::read(root.join(rel)) {
            files.insert(rel.to_owned(), sha256_hex(&bytes));
        }
    };
    match &lens.judge {
        LensJudge::Command {
            program: Program::Argv(argv),
        } => argv.iter().for_each(|a| note(a)),
        LensJudge::Command {
            program: Program::Shell(line),
        } => line.split_whitespace().for_each(&mut note),
        LensJudge::Llm {
            charter: Card::File(path),
            ..
        } => note(path),
        _ => {}
    }
    if matches!(lens.judge, LensJudge::Llm { .. }) {
        // What every llm lens sends besides its charter: a new wrapper is a
        // new question.
        files.insert(
            "(llm lens wrapper)".to_owned(),
            sha256_hex(super::llm_lens::WRAPPER.as_bytes()),
        );
    }
    let doc = json!({
        "prompt_version": PROMPT_VERSION,
        "lens": lens,
        "files": files,
        "reviewer": reviewer.map(Reviewer::json),
    });
    sha256_hex(doc.to_string().as_bytes())
}

/// The unit-store key of a clean verdict.
pub fn unit_key(lens_digest: &str, dispositions: &str, unit: &Unit) -> String {
    let doc = json!({
        "v": PROMPT_VERSION,
        "lens": lens_digest,
        "dispositions": dispositions,
        "unit": unit.id,
        "sha256": unit.sha256,
    });
    sha256_hex(doc.to_string().as_bytes())
}

/// A lens instance's clean verdicts, by unit: for each unit the keys
/// (lens, content, dispositions) it was found clean under, newest last.
/// Kept as one unit-store entry per lens instance, read once and written
/// once per gate (a lens over 10,000 files is one file, not 10,000), so a
/// finding drops all of a unit's clean verdicts at once. Two gates sharing
/// a lens may overwrite each other's additions: that costs a re-judging,
/// never a wrong verdict.
struct Memo {
    entry: String,
    units: BTreeMap<String, Vec<(String, String)>>,
    changed: bool,
}

/// Clean verdicts kept per unit: a unit's entry is not a history.
const MEMO_PER_UNIT: usize = 8;

impl Memo {
    fn load(store: &UnitStore, instance: &str) -> Memo {
        let entry = sha256_hex(
            json!({"clean verdicts of": instance})
                .to_string()
                .as_bytes(),
        );
        let units = store
            .get(&entry)
            .ok()
            .flatten()
            .and_then(|v| serde_json::from_value(v).ok())
            .unwrap_or_default();
        Memo {
            entry,
            units,
            changed: false,
        }
    }

    /// The clean verdict stored for `unit` under `key`, if any.
    fn clean(&self, unit: &str, key: &str) -> Option<Verdict> {
        match self
            .units
            .get(unit)?
            .iter()
            .find(|(k, _)| k == key)?
            .1
            .as_str()
        {
            "clear" => Some(Verdict::Clear),
            "n/a" => Some(Verdict::NotApplicable),
            _ => None,
        }
    }

    /// Keeps a clean verdict beside the unit's others; a finding drops
    /// them all.
    fn remember(&mut self, key: &str, verdict: &UnitVerdict) {
        match verdict.verdict {
            v if v.is_clean() => {
                let kept = self.units.entry(verdict.unit.clone()).or_default();
                kept.retain(|(k, _)| k != key);
                kept.push((key.to_owned(), v.word().to_owned()));
                let excess = kept.len().saturating_sub(MEMO_PER_UNIT);
                kept.drain(..excess);
                self.changed = true;
            }
            Verdict::Finding => {
                self.changed |= self.units.remove(&verdict.unit).is_some();
            }
            _ => {}
        }
    }

    /// Writes it back when it changed. A store that cannot be written
    /// costs only speed: the units are judged again next time.
    fn save(&self, store: &UnitStore) {
        if self.changed {
            let _ = store.put(&self.entry, &json!(self.units));
        }
    }
}

/// The name of a lens's instance for `reviewer`.
pub fn instance_name(lens: &Lens, reviewer: Option<&Reviewer>) -> String {
    match reviewer {
        Some(r) => format!("{}@{}", lens.name, r.slug),
        None => lens.name.clone(),
    }
}

/// How many of `units` a lens instance would reuse (`plan explain`).
pub fn count_reused(
    store: &UnitStore,
    root: &Path,
    lens: &Lens,
    reviewer: Option<&Reviewer>,
    waivers: &Waivers,
    units: &[Unit],
) -> usize {
    let digest = lens_digest(root, lens, reviewer);
    let dispositions = waivers.digest(&lens.name);
    let memo = Memo::load(store, &instance_name(lens, reviewer));
    units
        .iter()
        .filter(|u| {
            memo.clean(&u.id, &unit_key(&digest, &dispositions, u))
                .is_some()
        })
        .count()
}

fn kind_name(lens: &Lens) -> &'static str {
    match lens.judge {
        LensJudge::Rule { .. } => "rule",
        LensJudge::Command { .. } => "command",
        LensJudge::Llm { .. } => "llm",
    }
}

fn over_name(lens: &Lens) -> String {
    serde_json::to_value(lens.over)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// One lens instance over `units` (or the reason they could not be listed).
pub async fn judge_lens(
    j: &Judging<'_>,
    lens: &Lens,
    reviewer: Option<&Reviewer>,
    units: Result<Vec<Unit>, String>,
) -> LensReport {
    let name = instance_name(lens, reviewer);
    let mut report = LensReport {
        name: name.clone(),
        lens: lens.name.clone(),
        reviewer: reviewer.map(|r| r.slug.clone()),
        kind: kind_name(lens).to_owned(),
        over: over_name(lens),
        status: Status::SendReady,
        units: Vec::new(),
        judged: 0,
        reused: 0,
        calls: 0,
        errors: Vec::new(),
        stderr_tail: None,
        usage: None,
    };
    let units = match units {
        Ok(units) => units,
        Err(e) => {
            report.errors.push(e);
            report.status = report.judge_status();
            return report;
        }
    };
    let digest = lens_digest(j.root, lens, reviewer);
    let dispositions = j.waivers.digest(&lens.name);
    let keys: Vec<String> = units
        .iter()
        .map(|u| unit_key(&digest, &dispositions, u))
        .collect();
    let mut answers: BTreeMap<usize, Answer> = BTreeMap::new();
    let mut to_judge: Vec<(usize, Map<String, Value>)> = Vec::new();
    let mut reused: BTreeMap<usize, Verdict> = BTreeMap::new();
    let mut memo = j.store.map(|s| Memo::load(s, &name));
    for (i, unit) in units.iter().enumerate() {
        if let Some(verdict) = memo.as_ref().and_then(|m| m.clean(&unit.id, &keys[i])) {
            reused.insert(i, verdict);
            continue;
        }
        match unit.fields(j.root) {
            Ok(fields) => to_judge.push((i, fields)),
            Err(e) => {
                answers.insert(i, Answer::Missing(e));
            }
        }
    }
    let reviewer_json = reviewer.map(Reviewer::json);
    answers.extend(
        ask(
            j,
            lens,
            reviewer_json.as_ref(),
            &units,
            &to_judge,
            &mut report,
        )
        .await,
    );
    for (i, unit) in units.iter().enumerate() {
        if let Some(verdict) = reused.get(&i) {
            report.reused += 1;
            report.units.push(UnitVerdict {
                unit: unit.id.clone(),
                sha256: unit.sha256.clone(),
                verdict: *verdict,
                findings: Vec::new(),
                missing: None,
                reused: true,
            });
            continue;
        }
        let answer = answers
            .remove(&i)
            .unwrap_or_else(|| Answer::Missing("nothing judged this unit".into()));
        if matches!(answer, Answer::Judged { .. }) {
            report.judged += 1;
        }
        let verdict = unit_verdict(j.waivers, lens, unit, answer);
        if let Some(memo) = memo.as_mut() {
            memo.remember(&keys[i], &verdict);
        }
        report.units.push(verdict);
    }
    if let (Some(memo), Some(store)) = (&memo, j.store) {
        memo.save(store);
    }
    report.status = report.judge_status();
    report
}

/// The lens's answers for the units to judge (`(index, fields)`), by index.
async fn ask(
    j: &Judging<'_>,
    lens: &Lens,
    reviewer: Option<&Value>,
    units: &[Unit],
    to_judge: &[(usize, Map<String, Value>)],
    report: &mut LensReport,
) -> BTreeMap<usize, Answer> {
    let mut answers = BTreeMap::new();
    match &lens.judge {
        LensJudge::Rule { when } => {
            for (i, fields) in to_judge {
                let answer = if *j.cancel.borrow() {
                    Answer::Missing("the run was stopped before this unit was judged".into())
                } else {
                    super::rule::judge(j.templates, &lens.name, when, fields, reviewer)
                };
                answers.insert(*i, answer);
            }
        }
        LensJudge::Command { program } => {
            let timeout = Duration::from_secs(
                lens.timeout_secs
                    .unwrap_or(command::DEFAULT_TIMEOUT_SECS)
                    .max(1),
            );
            for batch in to_judge.chunks(command::MAX_UNITS_PER_CALL) {
                if *j.cancel.borrow() {
                    for (i, _) in batch {
                        answers.insert(
                            *i,
                            Answer::Missing("the run was stopped before this unit was sent".into()),
                        );
                    }
                    continue;
                }
                let sent: Vec<(String, Map<String, Value>)> = batch
                    .iter()
                    .map(|(i, f)| (units[*i].id.clone(), f.clone()))
                    .collect();
                let call = command::Call {
                    root: j.root,
                    env: j.env,
                    program,
                    lens: &lens.name,
                    reviewer,
                    timeout,
                };
                let mut called = call.run(&sent, j.cancel.clone()).await;
                report.calls += 1;
                if !called.stderr_tail.trim().is_empty() {
                    report.stderr_tail = Some(called.stderr_tail.clone());
                }
                for (i, _) in batch {
                    let answer = called
                        .answers
                        .remove(&units[*i].id)
                        .unwrap_or_else(|| Answer::Missing("the lens gave no verdict".into()));
                    answers.insert(*i, answer);
                }
            }
        }
        LensJudge::Llm {
            charter,
            model,
            base_url,
            api_key,
            price,
        } => {
            // The instance's name (`LENS@REVIEWER`), as the charter reads it.
            let name = report.name.clone();
            let lens = super::llm_lens::LlmLens {
                root: j.root,
                name: &name,
                charter,
                model,
                base_url: base_url.as_deref(),
                api_key: api_key.as_deref(),
                price: *price,
                timeout_secs: lens.timeout_secs,
                reviewer,
                redactor: j.templates.redactor(),
                budget: j.model_budget,
            };
            let sent: Vec<(usize, String, Map<String, Value>)> = to_judge
                .iter()
                .map(|(i, f)| (*i, units[*i].id.clone(), f.clone()))
                .collect();
            let judged = lens.judge(&sent, &j.cancel).await;
            answers.extend(judged.answers);
            report.calls = usize::try_from(judged.usage.calls).unwrap_or(usize::MAX);
            report.usage = Some(judged.usage);
        }
    }
    answers
}

/// A unit's verdict from its lens's answer, dispositions applied.
fn unit_verdict(waivers: &Waivers, lens: &Lens, unit: &Unit, answer: Answer) -> UnitVerdict {
    match answer {
        Answer::Missing(why) => UnitVerdict {
            unit: unit.id.clone(),
            sha256: unit.sha256.clone(),
            verdict: Verdict::Missing,
            findings: Vec::new(),
            missing: Some(why),
            reused: false,
        },
        Answer::Judged { verdict, findings } => UnitVerdict {
            unit: unit.id.clone(),
            sha256: unit.sha256.clone(),
            verdict,
            findings: findings
                .into_iter()
                .map(|f| finding(waivers, lens, unit, f))
                .collect(),
            missing: None,
            reused: false,
        },
    }
}

/// A lens's finding on `unit`, with what dispositions say of it.
fn finding(waivers: &Waivers, lens: &Lens, unit: &Unit, raw: RawFinding) -> LensFinding {
    let fingerprint = if lens.over == crate::plan::model::LensOver::Findings {
        unit.id.clone()
    } else {
        let doc = json!({"lens": lens.name, "unit": unit.id, "title": raw.title});
        sha256_hex(doc.to_string().as_bytes())[..16].to_owned()
    };
    let (mut discharged, mut lapsed) = (None, None);
    match waivers.check(&lens.name, &unit.id, &fingerprint, &raw.title) {
        Some(Waived::Discharged(d)) => discharged = Some(d),
        Some(Waived::Lapsed(d)) => lapsed = Some(d),
        None => {}
    }
    LensFinding {
        fingerprint,
        title: raw.title,
        severity: raw.severity,
        detail: raw.detail,
        line: raw.line,
        discharged,
        lapsed,
    }
}

/// Judges `gate`: its lenses in order, then, when they all pass, one
/// instance of each per reviewer. `units_of` lists a lens's units.
pub async fn judge_gate(
    j: &Judging<'_>,
    plan: &Plan,
    gate: &Gate,
    units_of: &(dyn Fn(&Lens) -> Result<Vec<Unit>, String> + Sync),
) -> Review {
    let mut lenses = Vec::new();
    let mut listed: BTreeMap<String, Result<Vec<Unit>, String>> = BTreeMap::new();
    for name in &gate.lenses {
        let Some(lens) = plan.lenses.iter().find(|l| &l.name == name) else {
            let mut missing = LensReport {
                name: name.clone(),
                lens: name.clone(),
                reviewer: None,
                kind: String::new(),
                over: String::new(),
                status: Status::Incomplete,
                units: Vec::new(),
                judged: 0,
                reused: 0,
                calls: 0,
                errors: vec![format!("lens `{name}` is not in the plan")],
                stderr_tail: None,
                usage: None,
            };
            missing.status = missing.judge_status();
            lenses.push(missing);
            continue;
        };
        let units = units_of(lens);
        listed.insert(name.clone(), units.clone());
        lenses.push(judge_lens(j, lens, None, units).await);
    }
    let passed = Review::judge_status(&lenses) == Status::SendReady;
    let mut reviewers = Vec::new();
    for slug in &gate.reviewers {
        reviewers.push(ReviewerRun {
            reviewer: slug.clone(),
            ran: passed,
        });
        if !passed {
            continue;
        }
        let reviewer = Reviewer::of(plan, j.root, slug);
        for name in &gate.lenses {
            let Some(lens) = plan.lenses.iter().find(|l| &l.name == name) else {
                continue;
            };
            let units = listed.get(name).cloned().unwrap_or_else(|| units_of(lens));
            match &reviewer {
                Ok(r) => lenses.push(judge_lens(j, lens, Some(r), units).await),
                Err(e) => {
                    let mut report = judge_lens(j, lens, None, Err(e.clone())).await;
                    report.name = format!("{}@{slug}", lens.name);
                    report.reviewer = Some(slug.clone());
                    lenses.push(report);
                }
            }
        }
    }
    let used: Vec<String> = lenses
        .iter()
        .flat_map(|l| l.units.iter())
        .flat_map(|u| u.findings.iter())
        .filter_map(|f| f.discharged.as_ref().or(f.lapsed.as_ref()))
        .map(|d| d.id.clone())
        .collect();
    let mut lapsed: Vec<_> = lenses
        .iter()
        .flat_map(|l| l.units.iter())
        .flat_map(|u| u.findings.iter())
        .filter_map(|f| f.lapsed.clone())
        .collect();
    lapsed.sort_by(|a, b| a.id.cmp(&b.id));
    lapsed.dedup();
    // Only lenses that judged can call a disposition unused.
    let names: Vec<&str> = lenses
        .iter()
        .filter(|l| l.errors.is_empty())
        .map(|l| l.lens.as_str())
        .collect();
    Review {
        review: REVIEW_FORMAT,
        gate: gate.name.clone(),
        status: Review::judge_status(&lenses),
        judged: lenses.iter().map(|l| l.judged).sum(),
        reused: lenses.iter().map(|l| l.reused).sum(),
        unused: j.waivers.unused(&names, &used),
        lapsed,
        usage: lenses.iter().filter_map(|l| l.usage.as_ref()).fold(
            Usage::default(),
            |mut total, u| {
                total.add(u);
                total
            },
        ),
        lenses,
        reviewers,
    }
}

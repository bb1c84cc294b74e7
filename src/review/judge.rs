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
//!
//! Beside the per-unit memo, a lens instance whose every unit came out
//! clean keeps one [`WholeLens`] record: the digest of (lens, dispositions,
//! every unit's id and sha256 in order) and each unit's verdict. A run
//! whose digest matches reuses every unit from it without loading the memo
//! or keying a unit (the common re-run: nothing changed). Any run that does
//! not end all clean drops the record, so the "a finding drops its unit's
//! clean verdicts" rule holds for it too.
//!
//! Speed: a rule lens is evaluated on every core (its `when` compiled
//! once); a command lens's calls (one per [`command::MAX_UNITS_PER_CALL`]
//! units) run as many at a time as there are cores.

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
    let mut text = Vec::with_capacity(256);
    for part in [
        KEY_FORMAT,
        lens_digest,
        dispositions,
        unit.id.as_str(),
        unit.sha256.as_str(),
    ] {
        push_part(&mut text, part);
    }
    sha256_hex(&text)
}

/// What a unit key and a [`WholeLens`] digest are built in: bump it when
/// their text changes.
const KEY_FORMAT: &str = "unit key 2";

/// `part`, length first, so no two lists of parts give the same bytes.
fn push_part(text: &mut Vec<u8>, part: &str) {
    text.extend_from_slice(&(part.len() as u64).to_le_bytes());
    text.extend_from_slice(part.as_bytes());
}

/// The digest of a lens instance over exactly these units, in this order:
/// its definition, the dispositions in force, each unit's id and sha256.
fn whole_digest(lens_digest: &str, dispositions: &str, units: &[Unit]) -> String {
    let mut text = Vec::with_capacity(64 + units.len() * 128);
    for part in [KEY_FORMAT, PROMPT_VERSION_TEXT, lens_digest, dispositions] {
        push_part(&mut text, part);
    }
    for unit in units {
        push_part(&mut text, &unit.id);
        push_part(&mut text, &unit.sha256);
    }
    sha256_hex(&text)
}

const PROMPT_VERSION_TEXT: &str = "prompt version 1";

/// One lens instance's last all-clean judging, as one small unit-store
/// entry: see the module doc.
struct WholeLens {
    entry: String,
}

impl WholeLens {
    fn of(instance: &str) -> WholeLens {
        let mut text = Vec::new();
        push_part(&mut text, "every unit clean");
        push_part(&mut text, instance);
        WholeLens {
            entry: sha256_hex(&text),
        }
    }

    /// The stored verdicts, one per unit, when `digest` is what they were
    /// stored under.
    fn verdicts(&self, store: &UnitStore, digest: &str, units: usize) -> Option<Vec<Verdict>> {
        let value = store.get(&self.entry).ok().flatten()?;
        if value.get("digest")?.as_str()? != digest {
            return None;
        }
        let words = value.get("verdicts")?.as_str()?;
        if words.len() != units {
            return None;
        }
        words
            .bytes()
            .map(|b| match b {
                b'c' => Some(Verdict::Clear),
                b'n' => Some(Verdict::NotApplicable),
                _ => None,
            })
            .collect()
    }

    /// Keeps the verdicts when every one is clean, else drops the record.
    /// Failing to write costs only speed.
    fn save(&self, store: &UnitStore, digest: &str, verdicts: &[UnitVerdict]) {
        let words: Option<String> = verdicts
            .iter()
            .map(|v| match v.verdict {
                Verdict::Clear => Some('c'),
                Verdict::NotApplicable => Some('n'),
                _ => None,
            })
            .collect();
        match words {
            Some(words) => {
                let _ = store.put(&self.entry, &json!({"digest": digest, "verdicts": words}));
            }
            None => {
                let _ = store.remove(&self.entry);
            }
        }
    }
}

/// A lens instance's clean verdicts, by unit: for each unit the keys
/// (lens, content, dispositions) it was found clean under, newest last.
/// Kept as one unit-store entry per lens instance, read once and written
/// once per gate (a lens over 10,000 files is one file, not 10,000), so a
/// finding drops all of a unit's clean verdicts at once. Two gates sharing
/// a lens may overwrite each other's additions: that costs a re-judging,
/// never a wrong verdict.
///
/// Stored as one string, a line per unit: its id as a JSON string (which
/// holds no raw tab or newline), then a tab and `KEY VERDICT` per clean
/// verdict. One string is one allocation to read and to write, where a
/// JSON object of 10,000 units was a tree built and copied twice.
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
            json!({"clean verdicts of": instance, "keys": KEY_FORMAT, "memo": "lines"})
                .to_string()
                .as_bytes(),
        );
        let units = store
            .get(&entry)
            .ok()
            .flatten()
            .and_then(|v| v.as_str().map(Memo::decode))
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
            let _ = store.put(&self.entry, &Value::String(self.encode()));
        }
    }

    fn encode(&self) -> String {
        let mut text = String::with_capacity(self.units.len() * 128);
        for (unit, kept) in &self.units {
            let Ok(id) = serde_json::to_string(unit) else {
                continue;
            };
            text.push_str(&id);
            for (key, verdict) in kept {
                text.push('\t');
                text.push_str(key);
                text.push(' ');
                text.push_str(verdict);
            }
            text.push('\n');
        }
        text
    }

    /// The lines [`Self::encode`] wrote; a line that does not parse is a
    /// unit with nothing stored (judged again).
    fn decode(text: &str) -> BTreeMap<String, Vec<(String, String)>> {
        text.lines()
            .filter_map(|line| {
                let mut parts = line.split('\t');
                let unit: String = serde_json::from_str(parts.next()?).ok()?;
                let kept = parts
                    .filter_map(|part| {
                        let (key, verdict) = part.split_once(' ')?;
                        Some((key.to_owned(), verdict.to_owned()))
                    })
                    .collect();
                Some((unit, kept))
            })
            .collect()
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
    let name = instance_name(lens, reviewer);
    let whole = whole_digest(&digest, &dispositions, units);
    if WholeLens::of(&name)
        .verdicts(store, &whole, units.len())
        .is_some()
    {
        return units.len();
    }
    let memo = Memo::load(store, &name);
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
    let mut report = LensReport::new(
        name.clone(),
        lens.name.clone(),
        reviewer.map(|r| r.slug.clone()),
        kind_name(lens).to_owned(),
        over_name(lens),
    );
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
    let whole = whole_digest(&digest, &dispositions, &units);
    let whole_lens = WholeLens::of(&name);
    let units = match j
        .store
        .and_then(|store| whole_lens.verdicts(store, &whole, units.len()))
    {
        Some(verdicts) => {
            reuse_whole(&mut report, units, verdicts);
            // Asked for nothing, a lens still reports as itself (an llm
            // lens's model and its zero calls).
            let reviewer = reviewer.map(Reviewer::json);
            ask(j, lens, reviewer.as_ref(), &[], &[], &mut report).await;
            return report;
        }
        None => units,
    };
    let keys: Vec<String> = units
        .iter()
        .map(|u| unit_key(&digest, &dispositions, u))
        .collect();
    let mut to_judge: Vec<usize> = Vec::new();
    let mut reused: BTreeMap<usize, Verdict> = BTreeMap::new();
    let mut memo = j.store.map(|s| Memo::load(s, &name));
    for (i, unit) in units.iter().enumerate() {
        match memo.as_ref().and_then(|m| m.clean(&unit.id, &keys[i])) {
            Some(verdict) => {
                reused.insert(i, verdict);
            }
            None => to_judge.push(i),
        }
    }
    let reviewer_json = reviewer.map(Reviewer::json);
    let mut answers = ask(
        j,
        lens,
        reviewer_json.as_ref(),
        &units,
        &to_judge,
        &mut report,
    )
    .await;
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
        whole_lens.save(store, &whole, &report.units);
    }
    report.status = report.judge_status();
    report
}

/// `report` with every unit's stored clean verdict reused.
fn reuse_whole(report: &mut LensReport, units: Vec<Unit>, verdicts: Vec<Verdict>) {
    report.reused = units.len();
    report.units = units
        .into_iter()
        .zip(verdicts)
        .map(|(unit, verdict)| UnitVerdict {
            unit: unit.id,
            sha256: unit.sha256,
            verdict,
            findings: Vec::new(),
            missing: None,
            reused: true,
        })
        .collect();
    report.status = report.judge_status();
}

/// Threads a rule lens judges on: one per core, each with at least this
/// many units (fewer are not worth a thread).
const UNITS_PER_RULE_THREAD: usize = 64;

/// The lens's answers for the units to judge (indexes into `units`), by
/// index. A unit whose fields cannot be read is missing, with why.
async fn ask(
    j: &Judging<'_>,
    lens: &Lens,
    reviewer: Option<&Value>,
    units: &[Unit],
    to_judge: &[usize],
    report: &mut LensReport,
) -> BTreeMap<usize, Answer> {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    match &lens.judge {
        LensJudge::Rule { when } => {
            let rule = super::rule::Rule::new(j.templates, &lens.name, when, reviewer);
            let judge_one = |i: usize| -> (usize, Answer) {
                let answer = if *j.cancel.borrow() {
                    Answer::Missing("the run was stopped before this unit was judged".into())
                } else {
                    match units[i].fields(j.root) {
                        Ok(fields) => rule.judge(&fields),
                        Err(e) => Answer::Missing(e),
                    }
                };
                (i, answer)
            };
            let threads = cores
                .min(to_judge.len().div_ceil(UNITS_PER_RULE_THREAD))
                .max(1);
            if threads == 1 {
                return to_judge.iter().map(|&i| judge_one(i)).collect();
            }
            let per_thread = to_judge.len().div_ceil(threads);
            std::thread::scope(|scope| {
                let workers: Vec<_> = to_judge
                    .chunks(per_thread)
                    .map(|chunk| {
                        scope.spawn(|| chunk.iter().map(|&i| judge_one(i)).collect::<Vec<_>>())
                    })
                    .collect();
                // A thread that panicked leaves its units missing ("nothing
                // judged this unit"), never clear.
                workers
                    .into_iter()
                    .flat_map(|w| w.join().unwrap_or_default())
                    .collect()
            })
        }
        LensJudge::Command { program } => {
            ask_command(j, lens, program, reviewer, units, to_judge, cores, report).await
        }
        LensJudge::Llm {
            charter,
            model,
            base_url,
            api_key,
            price,
        } => {
            let mut answers = BTreeMap::new();
            let mut sent: Vec<(usize, String, Map<String, Value>)> = Vec::new();
            for &i in to_judge {
                match units[i].fields(j.root) {
                    Ok(fields) => sent.push((i, units[i].id.clone(), fields)),
                    Err(e) => {
                        answers.insert(i, Answer::Missing(e));
                    }
                }
            }
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
            let judged = lens.judge(&sent, &j.cancel).await;
            answers.extend(judged.answers);
            report.calls = usize::try_from(judged.usage.calls).unwrap_or(usize::MAX);
            report.usage = Some(judged.usage);
            answers
        }
    }
}

/// A command lens's calls, [`command::MAX_UNITS_PER_CALL`] units each, up
/// to `parallel` running at once (the lens program is its own process, so
/// the calls share nothing but the cores).
#[expect(
    clippy::too_many_arguments,
    reason = "one call site; the arguments are the lens, its units and the run's context"
)]
async fn ask_command(
    j: &Judging<'_>,
    lens: &Lens,
    program: &Program,
    reviewer: Option<&Value>,
    units: &[Unit],
    to_judge: &[usize],
    parallel: usize,
    report: &mut LensReport,
) -> BTreeMap<usize, Answer> {
    let timeout = Duration::from_secs(
        lens.timeout_secs
            .unwrap_or(command::DEFAULT_TIMEOUT_SECS)
            .max(1),
    );
    let root = std::sync::Arc::new(j.root.to_path_buf());
    let env = std::sync::Arc::new(j.env.clone());
    let program = std::sync::Arc::new(program.clone());
    let name = std::sync::Arc::new(lens.name.clone());
    let reviewer = std::sync::Arc::new(reviewer.cloned());
    let batches: Vec<&[usize]> = to_judge.chunks(command::MAX_UNITS_PER_CALL).collect();
    let mut answers = BTreeMap::new();
    let mut called: BTreeMap<usize, command::Called> = BTreeMap::new();
    let mut running = tokio::task::JoinSet::new();
    let mut next = 0;
    while next < batches.len() || !running.is_empty() {
        while running.len() < parallel.max(1) && next < batches.len() {
            let batch_no = next;
            next += 1;
            if *j.cancel.borrow() {
                for &i in batches[batch_no] {
                    answers.insert(
                        i,
                        Answer::Missing("the run was stopped before this unit was sent".into()),
                    );
                }
                continue;
            }
            let mut sent: Vec<(String, Map<String, Value>)> = Vec::new();
            for &i in batches[batch_no] {
                match units[i].fields(j.root) {
                    Ok(fields) => sent.push((units[i].id.clone(), fields)),
                    Err(e) => {
                        answers.insert(i, Answer::Missing(e));
                    }
                }
            }
            let (root, env, program, name, reviewer) = (
                root.clone(),
                env.clone(),
                program.clone(),
                name.clone(),
                reviewer.clone(),
            );
            let cancel = j.cancel.clone();
            running.spawn(async move {
                let call = command::Call {
                    root: &root,
                    env: &env,
                    program: &program,
                    lens: &name,
                    reviewer: reviewer.as_ref().as_ref(),
                    timeout,
                };
                (batch_no, call.run(&sent, cancel).await)
            });
        }
        // A call that panicked answers for nothing: its units stay
        // missing ("the lens gave no verdict").
        if let Some(Ok((batch_no, done))) = running.join_next().await {
            called.insert(batch_no, done);
        }
    }
    for (batch_no, batch) in batches.iter().enumerate() {
        let Some(mut done) = called.remove(&batch_no) else {
            for &i in *batch {
                answers
                    .entry(i)
                    .or_insert_with(|| Answer::Missing("the lens gave no verdict".into()));
            }
            continue;
        };
        report.calls += 1;
        if !done.stderr_tail.trim().is_empty() {
            report.stderr_tail = Some(done.stderr_tail.clone());
        }
        for &i in *batch {
            if answers.contains_key(&i) {
                continue;
            }
            let answer = done
                .answers
                .remove(&units[i].id)
                .unwrap_or_else(|| Answer::Missing("the lens gave no verdict".into()));
            answers.insert(i, answer);
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
                status: Status::Incomplete,
                errors: vec![format!("lens `{name}` is not in the plan")],
                ..LensReport::new(
                    name.clone(),
                    name.clone(),
                    None,
                    String::new(),
                    String::new(),
                )
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_memo_lines_keep_any_unit_id() {
        let mut units = BTreeMap::new();
        for id in ["src/a.rs", "odd\tname\nwith \"quotes\"", "ünïcode/ß.rs"] {
            units.insert(
                id.to_owned(),
                vec![
                    ("k1".to_owned(), "clear".to_owned()),
                    ("k2".to_owned(), "n/a".to_owned()),
                ],
            );
        }
        let memo = Memo {
            entry: String::new(),
            units: units.clone(),
            changed: true,
        };
        assert_eq!(Memo::decode(&memo.encode()), units);
        assert!(
            Memo::decode("not json\tk clear\n").is_empty(),
            "a torn line is no verdict"
        );
    }

    #[test]
    fn the_whole_lens_digest_names_every_unit_and_its_order() {
        let unit = |id: &str, sha: &str| Unit::of_fields(id.into(), sha.into(), Map::new());
        let ab = [unit("a", "1"), unit("b", "2")];
        let digest = whole_digest("lens", "none", &ab);
        assert_eq!(digest, whole_digest("lens", "none", &ab));
        assert_ne!(
            digest,
            whole_digest("lens", "none", &[unit("a", "1"), unit("b", "3")])
        );
        assert_ne!(
            digest,
            whole_digest("lens", "none", &[unit("b", "2"), unit("a", "1")])
        );
        assert_ne!(digest, whole_digest("lens", "none", &ab[..1]));
        assert_ne!(digest, whole_digest("lens", "some", &ab));
        assert_ne!(digest, whole_digest("lens2", "none", &ab));
        // Length-prefixed: moving a character between id and sha is seen.
        assert_ne!(
            whole_digest("l", "d", &[unit("ab", "c")]),
            whole_digest("l", "d", &[unit("a", "bc")])
        );
    }
}

//! The `aggregate` step kind: the reports of the play cells it reads merged,
//! with a line per `simulate` step it reads, into `aggregate.json` and
//! `aggregate.md` in the step's directory (docs/getting-started.md › What a
//! cell and the aggregate write).
//! The merge and the rendering are `crate::report::aggregate`'s; this kind
//! owns which cells it reads, its key, and its files.
//!
//! - **What it reads**: every `play` cell and `simulate` step it needs,
//!   directly or through other steps (in the default pipeline it needs
//!   `deliver`, which needs the cells), as the engine hands them over
//!   ([`super::CellRead`]: each with where its kind keeps its report or
//!   summary), read from the run's directory, so cells a resumed run's earlier
//!   process played and cells restored from the store count alike. A cell
//!   that left no report (it never ran) is listed as such.
//! - **Key**: the output digest of each cell it reads (its `report.json`
//!   among the cell's files; a cell that comes out the same keys the same)
//!   by cell id, the format version, the personas' cards, and whether the
//!   game has a goal and its `sometimes` rules (the progress table and the
//!   `coverage` findings, `report::progress_table`, read them). When a cell
//!   it reads did not succeed (it did not play) the aggregate is merged afresh
//!   and not stored; when it reads cells through other steps, whose outputs
//!   do not show the cells', it is never reused.
//! - **Publishing**: when the run has a job (`register`'s record) and a
//!   backend, both files are uploaded to the job (the run's secrets
//!   redacted) and published with their sizes and sha256s, the request journaled before it
//!   leaves and the answer after (`published`), crash points
//!   `aggregate:*`; `--dry-upload` lists them and sends nothing. A free
//!   plan has no job and publishes nothing.

use std::path::{Path, PathBuf};

use serde_json::json;

use super::money::{Boundary, crash_point, refusal};
use super::{
    BoxFuture, CellRead, KeyContext, Kind, Outputs, PlaytestPart, Reuse, StepContext, StepError,
    StepIo, StepOutcome,
};
use crate::backend::api::{AggregateCompleteRequest, FileDigest, JobRef, UploadRequest};
use crate::backend::{Connection, UploadTarget};
use crate::plan::model::{Card, InvariantKind, Plan, StepKind};
use crate::play::{CellReport, SimulateSummary};
use crate::report::aggregate::{
    AGGREGATE_FORMAT, AGGREGATE_JSON, AGGREGATE_MD, CellInput, PersonaCard,
};
use crate::report::playtest::SimulationLine;
use crate::report::progress_table::PlanProgress;
use crate::reuse::{RestoreScope, ReuseKey, sha256_hex};

pub struct Aggregate;

/// What the progress table and the coverage findings read of the plan.
fn plan_progress(plan: &Plan) -> PlanProgress {
    let Some(game) = &plan.game else {
        return PlanProgress::default();
    };
    PlanProgress {
        goal: game.goal.is_some(),
        sometimes: game
            .invariants
            .iter()
            .filter(|i| i.kind == InvariantKind::Sometimes)
            .map(|i| (i.name.clone(), i.expr.clone()))
            .collect(),
    }
}

fn persona_cards(plan: &Plan) -> Vec<PersonaCard> {
    plan.personas
        .iter()
        .map(|p| PersonaCard {
            slug: p.slug.clone(),
            card: match &p.card {
                Card::Text(text) => text.clone(),
                Card::File(path) => format!("(card: {path})"),
            },
        })
        .collect()
}

impl Kind for Aggregate {
    fn kind(&self) -> StepKind {
        StepKind::Aggregate
    }

    fn reads_cells(&self) -> bool {
        true
    }

    fn reuse(&self, cx: &KeyContext<'_>) -> Result<Reuse, StepError> {
        let mut settings = json!({
            "format": AGGREGATE_FORMAT,
            "personas": persona_cards(cx.plan)
                .into_iter()
                .map(|p| json!({"persona": p.slug, "card": p.card}))
                .collect::<Vec<_>>(),
        });
        // The labels and `fixed` come from the baseline's findings: another
        // baseline is another aggregate. Without one the key is as it was.
        if let Some(baseline) = cx.baseline {
            settings["baseline"] = json!(baseline.digest);
        }
        // The progress table and the coverage findings read the plan's
        // goal and `sometimes` rules (and an aggregate stored before the
        // table existed is not reused without it).
        let progress = plan_progress(cx.plan);
        settings["progress"] = json!({
            "goal": progress.goal,
            "sometimes": progress.sometimes,
        });
        let mut key = ReuseKey::new("aggregate", settings);
        for read in cx.reads {
            let Some(upstream) = cx.upstream.iter().find(|u| u.id == read.id) else {
                return Ok(Reuse::Never(format!(
                    "it reads `{}` through the steps it needs, whose outputs do not show that \
                     cell's report: it merges the reports afresh every run",
                    read.id
                )));
            };
            let Some(digest) = &upstream.outputs else {
                return Ok(Reuse::AfterUpstream(format!(
                    "its key is the reports of the cells it reads: `{}` runs first (a cell that \
                     does not succeed is merged afresh)",
                    read.id
                )));
            };
            key.upstream.insert(read.id.clone(), digest.clone());
        }
        Ok(Reuse::Key(key))
    }

    fn run<'a>(&'a self, cx: &'a StepContext, io: &'a StepIo) -> BoxFuture<'a, StepOutcome> {
        Box::pin(async move {
            if let Some(stop) = cx.stopped("stopped before the reports were merged") {
                return stop;
            }
            io.mark_started();
            match write(cx) {
                Ok(_) => match (io.backend(), super::money::job_of(io)) {
                    (Some(connection), Some(job)) => {
                        publish(cx, io, connection, &job.job_ref()).await
                    }
                    _ => StepOutcome::Succeeded,
                },
                Err(e) => e.into(),
            }
        })
    }

    fn outputs(&self, cx: &StepContext) -> Result<Outputs, StepError> {
        for name in [AGGREGATE_JSON, AGGREGATE_MD] {
            if !cx.step_dir.join(name).is_file() {
                return Err(StepError(format!(
                    "the aggregate ended without writing {}",
                    cx.step_dir.join(name).display()
                )));
            }
        }
        Ok(Outputs {
            base: cx.step_dir.clone(),
            files: vec![AGGREGATE_JSON.to_owned(), AGGREGATE_MD.to_owned()],
        })
    }

    fn restore_base(&self, cx: &StepContext) -> PathBuf {
        cx.step_dir.clone()
    }

    fn playtest(&self, step_dir: &Path) -> Option<super::PlaytestPart> {
        Some(super::PlaytestPart::Merged {
            aggregate_json: step_dir.join(AGGREGATE_JSON),
        })
    }

    fn junit_cases(&self, step_dir: &Path) -> Vec<super::JunitCase> {
        std::fs::read(step_dir.join(AGGREGATE_JSON))
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .map(|agg| crate::report::aggregate::junit_cases(&agg))
            .unwrap_or_default()
    }

    fn restore_scope(&self, _cx: &StepContext) -> Result<RestoreScope, StepError> {
        RestoreScope::new(&[AGGREGATE_JSON, AGGREGATE_MD], []).map_err(|e| StepError(e.to_string()))
    }

    fn log(&self, step_dir: &Path) -> Option<PathBuf> {
        Some(step_dir.join(AGGREGATE_MD))
    }
}

/// The checkpoint field of a publishing's journaled answer.
pub const PUBLISHED: &str = "published";

/// What a publishing says of money: the aggregate is free.
const FREE: &str = "The aggregate is free: nothing was charged for it.";

/// Publishes both files to `job`: uploaded, then `aggregate complete`
/// with their sizes and sha256s, the body journaled before it leaves
/// (crash points `aggregate:*`) and the answer journaled after. A resume
/// that finds these digests published succeeds without a call.
async fn publish(
    cx: &StepContext,
    io: &StepIo,
    connection: &Connection,
    job: &JobRef,
) -> StepOutcome {
    let note = |text: &str| (cx.note)(text);
    // What goes is the files with the run's secrets redacted (none may
    // reach an upload); the digests are of what goes.
    let mut files = Vec::new();
    for name in [AGGREGATE_MD, AGGREGATE_JSON] {
        let path = cx.step_dir.join(name);
        match std::fs::read_to_string(&path) {
            Ok(text) => files.push((name, io.redact(&text).into_bytes())),
            Err(e) => {
                return StepOutcome::Failed {
                    exit_code: None,
                    message: format!("cannot read {}: {e}", path.display()),
                };
            }
        }
    }
    let digest = |bytes: &[u8]| FileDigest {
        size: i64::try_from(bytes.len()).unwrap_or(i64::MAX),
        sha256: sha256_hex(bytes),
    };
    let body = AggregateCompleteRequest {
        md: digest(&files[0].1),
        json: digest(&files[1].1),
    };
    if published_of(io).as_ref() == Some(&body) {
        note(&format!(
            "the aggregate was published to job {} earlier",
            job.job
        ));
        return StepOutcome::Succeeded;
    }
    if io.dry_upload() {
        for (name, bytes) in &files {
            let file = digest(bytes);
            note(&format!(
                "--dry-upload: would upload {name} ({} bytes, sha256 {}) to job {}",
                file.size, file.sha256, job.job
            ));
        }
        note(&format!(
            "--dry-upload: would publish the aggregate to job {}; nothing was sent",
            job.job
        ));
        return StepOutcome::Succeeded;
    }
    match send(cx, io, connection, job, body, &files).await {
        Ok(()) => StepOutcome::Succeeded,
        Err(outcome) => outcome,
    }
}

async fn send(
    cx: &StepContext,
    io: &StepIo,
    connection: &Connection,
    job: &JobRef,
    body: AggregateCompleteRequest,
    files: &[(&str, Vec<u8>)],
) -> Result<(), StepOutcome> {
    let failed = |message: String| StepOutcome::Failed {
        exit_code: None,
        message,
    };
    let encoded = serde_json::to_value(&body)
        .map_err(|e| failed(format!("cannot encode the aggregate's digests: {e}")))?;
    let request = io
        .request_once("aggregate", || encoded)
        .await
        .map_err(|e| failed(e.0))?;
    crash_point("aggregate", Boundary::KeyJournaled);
    let journaled: Option<AggregateCompleteRequest> = serde_json::from_value(request.body).ok();
    if journaled.as_ref().is_some_and(|j| *j != body) {
        // An earlier attempt merged other reports: the files on disk are
        // this attempt's, and publishing them replaces those (it is free).
        (cx.note)(
            "the aggregate differs from the one an earlier attempt journaled; publishing this one",
        );
    }
    let doing = |what: &str| format!("publishing the aggregate to job {} ({what})", job.job);
    let target = UploadTarget::Job(job.clone());
    for (name, bytes) in files {
        let upload = UploadRequest {
            name: (*name).to_owned(),
            sha256: sha256_hex(bytes),
            body: bytes.clone(),
        };
        connection
            .backend
            .upload(&connection.token, &target, &upload)
            .await
            .map_err(|e| refusal(&e, &doing(&format!("uploading {name}")), FREE))?;
    }
    let published = connection
        .backend
        .aggregate_complete(&connection.token, job, &body)
        .await
        .map_err(|e| refusal(&e, &doing("aggregate complete"), FREE))?;
    crash_point("aggregate", Boundary::ResponseReceived);
    io.checkpoint_durable(json!({
        PUBLISHED: {
            "job": job.job,
            "md": body.md,
            "json": body.json,
            "changed": published.changed,
        }
    }))
    .await
    .map_err(|e| failed(e.0))?;
    crash_point("aggregate", Boundary::ResponseJournaled);
    (cx.note)(&format!("published the aggregate to job {}", job.job));
    Ok(())
}

/// The digests an earlier attempt published, if it got an answer.
fn published_of(io: &StepIo) -> Option<AggregateCompleteRequest> {
    io.checkpoints().into_iter().rev().find_map(|c| {
        let done = c.data.get(PUBLISHED)?;
        Some(AggregateCompleteRequest {
            md: serde_json::from_value(done.get("md")?.clone()).ok()?,
            json: serde_json::from_value(done.get("json")?.clone()).ok()?,
        })
    })
}

/// A file the aggregate wrote: what a job is told of it when it is published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WrittenFile {
    pub name: &'static str,
    pub size: u64,
    pub sha256: String,
}

/// Both files the aggregate wrote, `aggregate.md` then `aggregate.json`.
pub type Written = [WrittenFile; 2];

/// Reads every cell and simulation the step needs from the run's
/// directory, merges them and writes both files.
fn write(cx: &StepContext) -> Result<Written, StepError> {
    let run_dir = cx
        .step_dir
        .parent()
        .and_then(Path::parent)
        .ok_or_else(|| StepError("the step's directory is not in a run's".into()))?;
    let mut cells = Vec::new();
    let mut simulations = Vec::new();
    for read in cx.reads.iter() {
        match &read.part {
            PlaytestPart::Cell { dir } => {
                let rel = |name: &str| relative(run_dir, &dir.join(name));
                cells.push(read_cell(read, dir, &rel)?);
            }
            PlaytestPart::Simulation { summary } => {
                let dir = summary.parent().unwrap_or(run_dir);
                let rel = |name: &str| relative(run_dir, &dir.join(name));
                if let Some(line) = read_simulation(read, summary, &rel)? {
                    simulations.push(line);
                }
            }
            PlaytestPart::Merged { .. } => {}
        }
    }
    let mut aggregate =
        crate::report::aggregate::build(&cells, &persona_cards(&cx.plan), simulations);
    crate::report::progress_table::apply(&mut aggregate, &cells, &plan_progress(&cx.plan));
    if let Some(baseline) = &cx.baseline {
        baseline.apply(&mut aggregate);
    }
    let mut json = serde_json::to_string_pretty(&aggregate)
        .map_err(|e| StepError(format!("cannot encode the aggregate: {e}")))?;
    json.push('\n');
    let md = crate::report::aggregate::markdown(&aggregate);
    std::fs::create_dir_all(&cx.step_dir)
        .map_err(|e| StepError(format!("cannot create {}: {e}", cx.step_dir.display())))?;
    let mut written = Vec::new();
    for (name, text) in [(AGGREGATE_MD, md), (AGGREGATE_JSON, json)] {
        let path = cx.step_dir.join(name);
        crate::journal::atomic_write(&path, text.as_bytes())
            .map_err(|e| StepError(format!("cannot write {}: {e}", path.display())))?;
        written.push(WrittenFile {
            name,
            size: text.len() as u64,
            sha256: sha256_hex(text.as_bytes()),
        });
    }
    let [md, json]: Written = written
        .try_into()
        .map_err(|_| StepError("the aggregate wrote an unexpected number of files".into()))?;
    Ok([md, json])
}

/// A play cell's report from `dir` (none when it left none); `rel` names
/// a file of the cell relative to the run's directory.
fn read_cell(
    read: &CellRead,
    dir: &Path,
    rel: &impl Fn(&str) -> String,
) -> Result<CellInput, StepError> {
    let path = dir.join("report.json");
    let bytes = std::fs::read(&path).ok();
    let report = bytes
        .as_deref()
        .map(|bytes| {
            serde_json::from_slice::<CellReport>(bytes).map_err(|e| {
                StepError(format!(
                    "cannot read {}: {e}; run the cell again with `plan run --new`",
                    path.display()
                ))
            })
        })
        .transpose()?;
    Ok(CellInput {
        step: read.id.clone(),
        persona: report.as_ref().map_or_else(
            || read.cell.persona.clone().unwrap_or_default(),
            |r| r.persona.clone(),
        ),
        controller: report.as_ref().map_or_else(
            || {
                read.cell
                    .controller
                    .map(|c| c.name().to_owned())
                    .unwrap_or_default()
            },
            |r| r.controller.clone(),
        ),
        seed: report
            .as_ref()
            .map_or_else(|| read.cell.seed.unwrap_or(0), |r| r.seed),
        report_sha256: bytes.as_deref().map(sha256_hex),
        report,
        report_md: rel("report.md"),
        trace: dir
            .join("trace.jsonl")
            .is_file()
            .then(|| rel("trace.jsonl")),
    })
}

/// A simulation's summary at `path`, as a line of the aggregate (none
/// when it left none); `rel` names a file of its directory relative to the
/// run's.
fn read_simulation(
    read: &CellRead,
    path: &Path,
    rel: &impl Fn(&str) -> String,
) -> Result<Option<SimulationLine>, StepError> {
    let Ok(bytes) = std::fs::read(path) else {
        return Ok(None);
    };
    let summary: SimulateSummary = serde_json::from_slice(&bytes)
        .map_err(|e| StepError(format!("cannot read {}: {e}", path.display())))?;
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    Ok(Some(crate::report::playtest::simulation_line(
        &read.id,
        &summary,
        &rel(&name),
        |trace| rel(&trace.display().to_string()),
    )))
}

/// `path` relative to the run's directory, `/`-separated, as the aggregate
/// names a cell's files.
fn relative(run_dir: &Path, path: &Path) -> String {
    let rel = path.strip_prefix(run_dir).unwrap_or(path);
    let parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    parts.join("/")
}

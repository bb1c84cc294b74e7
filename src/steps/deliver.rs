//! The `deliver` step kind: one bought play cell's files uploaded to its
//! backend run, then the run completed (docs/money.md › Deliver). One per
//! play cell (`per = "play"`).
//!
//! - **Which cell**: the play cell among the steps it needs that the job
//!   (`register`'s record) bought. A cell that was reused was not bought:
//!   there is nothing to deliver and the step says so. So does a run with
//!   no job.
//! - **What goes**: the cell's `report.json`, `report.md`,
//!   `transcript.jsonl`, `trace.jsonl` and `screenshots/*` when there are,
//!   each with its size and sha256, redacted by the run's secrets first
//!   (no secret reaches an upload; the digests are of what is sent).
//! - **Complete**: `{state, reason, actions_taken, quit_reason, report,
//!   report_md, manifest}` from the cell's report. A cell that played to
//!   an end is `succeeded` with no reason; any other sends a reason,
//!   redacted, then cut to 400 characters on a character boundary. The
//!   body is journaled with [`StepIo::request_once`] before anything
//!   leaves, so a resume sends the same, and the answer is journaled
//!   (`completed`): a resume that finds it succeeds without a call.
//! - **State machine**: a played cell's run is moved to `uploading` first
//!   (from wherever it is short of it: the play cell moves it to
//!   `reporting`; a resumed delivery finds it `uploading` already). A run
//!   the play cell ended itself (`budget_exceeded`) gets its files and no
//!   complete.
//! - **Repair**: one pass on 422 `upload_unverified` (the files it names
//!   are uploaded again, then complete once more); a second 422 fails the
//!   step naming them.
//! - **`--dry-upload`** lists each file (name, size, sha256) and what
//!   complete would say, and sends nothing.
//! - **Crash points** `complete:*` mark the four boundaries of complete.

use std::path::Path;

use serde_json::{Value, json};

use super::money::{self, Boundary, crash_point};
use super::{
    BoxFuture, KeyContext, Kind, Outputs, Reuse, StepContext, StepError, StepIo, StepOutcome,
};
use crate::backend::Connection;
use crate::backend::UploadTarget;
use crate::backend::api::{
    ApiError, CompleteRequest, Completed, ManifestEntry, RunRef, RunState, TransitionRequest,
    UploadRequest,
};
use crate::backend::ledger::runs::MAX_REASON_CHARS;
use crate::plan::model::StepKind;
use crate::play::{CellReport, CellState};
use crate::reuse::sha256_hex;
use crate::template::Redactor;

/// The checkpoint field of a delivery's journaled answer.
pub const COMPLETED: &str = "completed";

/// The cell files a delivery uploads when the cell wrote them (the
/// screenshots directory besides).
const CELL_FILES: [&str; 4] = crate::play::cell::CELL_FILES;
const SCREENSHOTS: &str = "screenshots";

/// What a delivery says when the job was bought already.
const CHARGED: &str = "The job was bought already; nothing more is charged for a delivery.";

pub struct Deliver {
    /// The run's secrets: none may reach an upload or a reason.
    redactor: Redactor,
}

impl Deliver {
    pub fn new(redactor: Redactor) -> Deliver {
        Deliver { redactor }
    }
}

impl Kind for Deliver {
    fn kind(&self) -> StepKind {
        StepKind::Deliver
    }

    fn reads_cells(&self) -> bool {
        true
    }

    fn reuse(&self, _cx: &KeyContext<'_>) -> Result<Reuse, StepError> {
        Ok(Reuse::Never(
            "a delivery uploads to this run's job and completes its run: it is never reused".into(),
        ))
    }

    fn run<'a>(&'a self, cx: &'a StepContext, io: &'a StepIo) -> BoxFuture<'a, StepOutcome> {
        Box::pin(async move {
            match self.deliver(cx, io).await {
                Ok(outcome) | Err(outcome) => outcome,
            }
        })
    }

    fn outputs(&self, _cx: &StepContext) -> Result<Outputs, StepError> {
        Ok(Outputs::default())
    }

    fn uses_backend(&self) -> bool {
        true
    }
}

/// One file to upload: its manifest entry and the bytes that go.
#[derive(Debug, Clone)]
struct File {
    entry: ManifestEntry,
    body: Vec<u8>,
}

fn failed(message: impl Into<String>) -> StepOutcome {
    StepOutcome::Failed {
        exit_code: None,
        message: message.into(),
    }
}

fn step_error(e: StepError) -> StepOutcome {
    failed(e.0)
}

impl Deliver {
    async fn deliver(&self, cx: &StepContext, io: &StepIo) -> Result<StepOutcome, StepOutcome> {
        let note = |text: &str| (cx.note)(text);
        if let Some(earlier) = completed_earlier(io) {
            note(&format!("{}: {earlier}", cx.instance.id));
            return Ok(StepOutcome::Succeeded);
        }
        let cell = play_cell(cx).map_err(step_error)?;
        let Some(job) = money::job_of(io) else {
            note(&format!(
                "nothing to deliver: cell {cell} was not bought (no job was registered in this run)"
            ));
            return Ok(StepOutcome::Succeeded);
        };
        let Some(run) = job.run_ref(&cell) else {
            note(&format!(
                "nothing to deliver: cell {cell} was not bought (reused)"
            ));
            return Ok(StepOutcome::Succeeded);
        };
        if let Some(stop) = cx.stopped("stopped before the cell's files were uploaded") {
            return Err(stop);
        }
        io.mark_started();
        let dir = io
            .upstream(&cell)
            .map(|u| u.step_dir)
            .ok_or_else(|| failed(format!("cell {cell} is not among the steps this one needs")))?;
        let files = collect(&dir, &self.redactor).map_err(step_error)?;
        let body = complete_body(&cell, &dir, &files, &self.redactor).map_err(step_error)?;

        if io.dry_upload() {
            dry_run(&note, &cell, &run, &files, &body);
            return Ok(StepOutcome::Succeeded);
        }
        let connection = io.backend().ok_or_else(|| {
            failed("this run has no backend to deliver to; add `[backend]` to the plan")
        })?;

        let encoded = serde_json::to_value(&body)
            .map_err(|e| failed(format!("cannot encode the complete request: {e}")))?;
        let request = io
            .request_once("complete", || encoded)
            .await
            .map_err(step_error)?;
        crash_point("complete", Boundary::KeyJournaled);
        // What goes is what was journaled first: a resume sends the same.
        let body: CompleteRequest = serde_json::from_value(request.body).map_err(|e| {
            failed(format!(
                "the journaled complete request of {cell} cannot be read back: {e}"
            ))
        })?;

        let delivery = Delivery {
            cell,
            run,
            dir,
            files,
            body,
        };
        send(io, connection, &delivery, &note).await
    }
}

/// A delivery under way: the cell, its backend run, its files and the
/// complete body as journaled.
struct Delivery {
    cell: String,
    run: RunRef,
    dir: std::path::PathBuf,
    files: Vec<File>,
    body: CompleteRequest,
}

/// Moves the run to `uploading`, uploads the files and completes the run
/// (the crash points after the key was journaled are here).
async fn send(
    io: &StepIo,
    connection: &Connection,
    delivery: &Delivery,
    note: &impl Fn(&str),
) -> Result<StepOutcome, StepOutcome> {
    let Delivery {
        cell,
        run,
        dir,
        files,
        body,
    } = delivery;
    let doing = |what: &str| format!("delivering {cell} ({what} run {})", run.run);
    let state = to_uploading(connection, run, body.state)
        .await
        .map_err(|e| money::refusal(&e, &doing("moving to uploading"), CHARGED))?;
    // A run that ended as the body says was completed by an earlier
    // attempt (its answer lost): complete again only to hear so.
    let completed_before = state == body.state;
    if !completed_before {
        let paths: Vec<&str> = body.manifest.iter().map(|m| m.path.as_str()).collect();
        upload(connection, run, files, &paths)
            .await
            .map_err(|e| money::refusal(&e, &doing("uploading the files of"), CHARGED))?;
    }
    if state.is_terminal() && !completed_before {
        // The play cell ended the run itself (`budget_exceeded` after
        // the backend asked it to stop): its files went, there is
        // nothing left to complete.
        io.checkpoint_durable(json!({
            COMPLETED: {"job": run.job, "run": run.run, "state": state, "changed": false,
                        "files": body.manifest.len()}
        }))
        .await
        .map_err(step_error)?;
        note(&format!(
            "{cell}: run {} of job {} ended `{state}` already; its {} files were uploaded, \
             nothing is left to complete",
            run.run,
            run.job,
            body.manifest.len()
        ));
        return Ok(StepOutcome::Succeeded);
    }
    let completed = complete(connection, run, body, files, note)
        .await
        .map_err(|e| match e {
            Completion::Refused(e) => money::refusal(&e, &doing("completing"), CHARGED),
            Completion::Unverified(e) => failed(format!(
                "delivering {cell}: the backend still does not find {} as the manifest \
                 says after uploading them again ({}). {CHARGED} The files in {} changed \
                 since the delivery began; its run stays open and `finish` settles the job",
                e.details.missing.join(", "),
                e.message,
                dir.display()
            )),
        })?;
    crash_point("complete", Boundary::ResponseReceived);
    io.checkpoint_durable(json!({
        COMPLETED: {
            "job": run.job,
            "run": run.run,
            "state": completed.run.state,
            "changed": completed.changed,
            "files": body.manifest.len(),
        }
    }))
    .await
    .map_err(step_error)?;
    crash_point("complete", Boundary::ResponseJournaled);
    if !completed.changed {
        // A second delivery (a merge run again, a resume after the answer
        // was lost): the backend had it, and says so.
        note(&format!(
            "{cell} was delivered before: run {} of job {} is {}; nothing changed",
            run.run, run.job, completed.run.state
        ));
        return Ok(StepOutcome::Succeeded);
    }
    let bytes: i64 = body.manifest.iter().map(|m| m.size).sum();
    note(&format!(
        "delivered {cell}: {} files ({bytes} bytes) to run {} of job {}, now {}",
        body.manifest.len(),
        run.run,
        run.job,
        completed.run.state
    ));
    Ok(StepOutcome::Succeeded)
}

/// How a complete with its repair pass failed.
enum Completion {
    /// The backend refused (or never answered) a call.
    Refused(ApiError),
    /// A second 422 `upload_unverified`, after uploading what it named.
    Unverified(ApiError),
}

/// `complete`, with one repair pass: on 422 `upload_unverified` the files
/// it names are uploaded again and complete is sent once more.
async fn complete(
    connection: &Connection,
    run: &RunRef,
    body: &CompleteRequest,
    files: &[File],
    note: &impl Fn(&str),
) -> Result<Completed, Completion> {
    let send = || connection.backend.complete(&connection.token, run, body);
    match send().await {
        Err(e) if is_unverified(&e) => {
            note(&format!(
                "the backend did not find {} of run {} as sent; uploading {} again",
                e.details.missing.join(", "),
                run.run,
                if e.details.missing.len() == 1 {
                    "it"
                } else {
                    "them"
                }
            ));
            let missing: Vec<&str> = e.details.missing.iter().map(String::as_str).collect();
            upload(connection, run, files, &missing)
                .await
                .map_err(Completion::Refused)?;
            match send().await {
                Err(e) if is_unverified(&e) => Err(Completion::Unverified(e)),
                other => other.map_err(Completion::Refused),
            }
        }
        other => other.map_err(Completion::Refused),
    }
}

/// `--dry-upload`: what would be sent, through the run's output.
fn dry_run(note: &impl Fn(&str), cell: &str, run: &RunRef, files: &[File], body: &CompleteRequest) {
    for file in files {
        note(&format!(
            "--dry-upload: would upload {} of {cell} ({} bytes, sha256 {}) to run {} of job {}",
            file.entry.path, file.entry.size, file.entry.sha256, run.run, run.job
        ));
    }
    note(&format!(
        "--dry-upload: would complete run {} as {}{} after {} actions, with {} files; nothing was sent",
        run.run,
        body.state,
        body.reason
            .as_deref()
            .map(|r| format!(" ({r})"))
            .unwrap_or_default(),
        body.actions_taken,
        body.manifest.len()
    ));
}

fn is_unverified(e: &ApiError) -> bool {
    e.status == 422 && e.code == "upload_unverified"
}

/// What an earlier attempt's journaled answer says, if it got one.
fn completed_earlier(io: &StepIo) -> Option<String> {
    let done: Value = io
        .checkpoints()
        .into_iter()
        .rev()
        .find_map(|c| c.data.get(COMPLETED).cloned())?;
    let field = |name: &str| done[name].as_str().unwrap_or("?").to_owned();
    Some(format!(
        "delivered earlier (run {} of job {} is {})",
        field("run"),
        field("job"),
        field("state")
    ))
}

/// The play cell this delivery follows: the one cell among the steps it
/// needs (`per = "play"` gives it exactly one).
fn play_cell(cx: &StepContext) -> Result<String, StepError> {
    let cells: Vec<String> = cx
        .reads
        .iter()
        .filter(|read| matches!(read.part, super::PlaytestPart::Cell { .. }))
        .map(|read| read.id.clone())
        .collect();
    match cells.as_slice() {
        [cell] => Ok(cell.clone()),
        [] => Err(StepError(format!(
            "deliver step `{}` needs no play cell: give it `per = \"play\"` (one delivery per cell)",
            cx.instance.id
        ))),
        many => Err(StepError(format!(
            "deliver step `{}` needs {} play cells ({}): give it `per = \"play\"` so each \
             delivery follows one cell",
            cx.instance.id,
            many.len(),
            many.join(", ")
        ))),
    }
}

/// The bytes that go for a file: its text with the run's secrets
/// redacted (a binary file as it is).
fn redacted(bytes: Vec<u8>, redactor: &Redactor) -> Vec<u8> {
    if redactor.is_empty() {
        return bytes;
    }
    match String::from_utf8(bytes) {
        Ok(text) => redactor.redact(&text).into_bytes(),
        Err(e) => e.into_bytes(),
    }
}

fn file(path: String, body: Vec<u8>) -> File {
    File {
        entry: ManifestEntry {
            size: i64::try_from(body.len()).unwrap_or(i64::MAX),
            sha256: sha256_hex(&body),
            path,
        },
        body,
    }
}

/// The cell's files in `dir` that go, in a fixed order: the cell files it
/// wrote, then `screenshots/*` by name.
fn collect(dir: &Path, redactor: &Redactor) -> Result<Vec<File>, StepError> {
    let read = |path: &Path| {
        std::fs::read(path).map_err(|e| StepError(format!("cannot read {}: {e}", path.display())))
    };
    let mut files = Vec::new();
    for name in CELL_FILES {
        let path = dir.join(name);
        if path.is_file() {
            files.push(file(name.to_owned(), redacted(read(&path)?, redactor)));
        }
    }
    let shots = dir.join(SCREENSHOTS);
    if shots.is_dir() {
        let mut names: Vec<String> = std::fs::read_dir(&shots)
            .map_err(|e| StepError(format!("cannot list {}: {e}", shots.display())))?
            .filter_map(Result::ok)
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
            .filter_map(|e| e.file_name().into_string().ok())
            .collect();
        names.sort();
        for name in names {
            let body = redacted(read(&shots.join(&name))?, redactor);
            files.push(file(format!("{SCREENSHOTS}/{name}"), body));
        }
    }
    Ok(files)
}

/// Where the cell's run ends, and why when it is not `succeeded`.
fn end_of(report: &CellReport) -> (RunState, Option<String>) {
    match report.state {
        CellState::Succeeded => (RunState::Succeeded, None),
        CellState::Interrupted => (
            RunState::Canceled,
            Some(format!(
                "the cell was interrupted after {} actions",
                report.actions_taken
            )),
        ),
        CellState::NotPlayed => (
            RunState::Failed,
            Some(report.not_played.as_ref().map_or_else(
                || "the game never got through `hello` and its first `reset`".to_owned(),
                |why| format!("the cell did not play: {why}"),
            )),
        ),
    }
}

/// The complete request for the cell in `dir`: its report, `files` as
/// the manifest.
fn complete_body(
    cell: &str,
    dir: &Path,
    files: &[File],
    redactor: &Redactor,
) -> Result<CompleteRequest, StepError> {
    let text = |name: &str| {
        files
            .iter()
            .find(|f| f.entry.path == name)
            .map(|f| String::from_utf8_lossy(&f.body).into_owned())
            .ok_or_else(|| {
                StepError(format!(
                    "cell {cell} left no {name} in {}: it cannot be delivered; run it again with \
                     `gameplan plan run --new`",
                    dir.display()
                ))
            })
    };
    let json = text("report.json")?;
    let unreadable = |e: serde_json::Error| {
        StepError(format!(
            "cannot read {}: {e}; run the cell again with `gameplan plan run --new`",
            dir.join("report.json").display()
        ))
    };
    let report: CellReport = serde_json::from_str(&json).map_err(unreadable)?;
    let value: Value = serde_json::from_str(&json).map_err(unreadable)?;
    let (state, reason) = end_of(&report);
    Ok(CompleteRequest {
        state,
        reason: reason
            .map(|r| crate::text::prefix(&redactor.redact(&r), MAX_REASON_CHARS).to_owned()),
        actions_taken: i64::try_from(report.actions_taken).unwrap_or(i64::MAX),
        quit_reason: Some(report.quit_reason.name().to_owned()),
        report: value,
        report_md: text("report.md").unwrap_or_default(),
        manifest: files.iter().map(|f| f.entry.clone()).collect(),
    })
}

/// Moves a run that is to end `succeeded` to `uploading`, from wherever
/// it is short of it (the cell played: its report says so); a run to end
/// otherwise stays where it is (any open state may fail or be canceled).
/// Answers the state the run is in, a final one when it ended already.
async fn to_uploading(
    connection: &Connection,
    run: &RunRef,
    end: RunState,
) -> Result<RunState, ApiError> {
    use RunState::{Interrupted, Launching, Playing, Queued, Reporting, Uploading};
    let mut state = connection
        .backend
        .get_run(&connection.token, run)
        .await?
        .state;
    if end != RunState::Succeeded || state.is_terminal() {
        return Ok(state);
    }
    while state != Uploading {
        let next = match state {
            Queued | Interrupted => Launching,
            Launching => Playing,
            Playing => Reporting,
            _ => Uploading,
        };
        let request = TransitionRequest {
            to: next,
            reason: None,
        };
        state = connection
            .backend
            .transition(&connection.token, run, &request)
            .await?
            .run
            .state;
        if state.is_terminal() {
            break;
        }
    }
    Ok(state)
}

/// Uploads the files of `files` named in `paths` to `run`; a name with
/// no file here is left for complete to name.
async fn upload(
    connection: &Connection,
    run: &RunRef,
    files: &[File],
    paths: &[&str],
) -> Result<(), ApiError> {
    let target = UploadTarget::Run(run.clone());
    for path in paths {
        let Some(file) = files.iter().find(|f| f.entry.path == *path) else {
            continue;
        };
        let request = UploadRequest {
            name: file.entry.path.clone(),
            sha256: file.entry.sha256.clone(),
            body: file.body.clone(),
        };
        connection
            .backend
            .upload(&connection.token, &target, &request)
            .await?;
    }
    Ok(())
}

#[cfg(test)]
#[path = "deliver_tests.rs"]
mod tests;

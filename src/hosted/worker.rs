//! The server's player: drives each admitted playtest through its phases.
//!
//! Every phase may be done again, so a server killed anywhere and started
//! again takes each open playtest up from the start and reaches the same
//! end, never charging twice (the charge was the admission's):
//!
//! 1. **provisioning**: the build is unpacked into the playtest's
//!    workspace, unless it already is.
//! 2. **running**: gameplan itself plays the plan's play steps there
//!    (`plan run PLAN STEP... --resume --executor KIND`), as a job of the
//!    local executor, so it outlives the server: a restarted server finds
//!    it by its directory and waits for it instead of starting another,
//!    and its cells are jobs on the server's executor (local or Ray).
//! 3. **capturing**: each cell's line in the run's summary ends its run in
//!    the ledger: played (an action taken), or not (refunded).
//! 4. **analyzing**: the whole plan runs again there, every cell reused, so
//!    the aggregate, gates and report page are made; its files are copied
//!    to `out/` for `hosted status` to fetch.
//! 5. The job is settled once (cells that never played refunded), and the
//!    playtest ends `report_ready`, or `failed` when no cell played, or
//!    `canceled`.
//!
//! A cancel stops the running gameplan (SIGTERM to its group, as Ctrl-C:
//! it stops its jobs and journals what was in flight); cells it never
//! started are refunded at the settlement.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::archive;
use super::host::Host;
use crate::backend::api::ApiError;
use crate::backend::hosted::{Outcome, Phase, playtest_id};
use crate::backend::ledger::Ledger;
use crate::backend::ledger::hosted::{CellEnd, Work};
use crate::executor::local::Local;
use crate::executor::{Executor as _, JobSpec, JobState};
use crate::report::run::RunReport;

/// Where the worker plays.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Playing {
    /// `local` or `ray`.
    pub executor: String,
    /// Ray's dashboard URL.
    pub address: Option<String>,
    /// The directory the executor's jobs and the server share (Ray's
    /// nodes must see it); default: each workspace's own.
    pub shared_dir: Option<PathBuf>,
    /// Playtests played at once.
    pub at_once: usize,
    /// The gameplan that plays (this one).
    pub exe: PathBuf,
}

/// A line for the server's log.
pub type Say = Arc<dyn Fn(&str) + Send + Sync>;

/// The player of one server.
pub struct Worker {
    pub ledger: Arc<Ledger>,
    pub host: Arc<Host>,
    pub playing: Playing,
    pub say: Say,
}

/// How often a running gameplan is looked at (and a cancel noticed).
const POLL: Duration = Duration::from_millis(300);

impl Worker {
    /// Plays every open playtest, and each admitted later, until
    /// `stop` turns true.
    pub async fn run(self: Arc<Self>, mut stop: tokio::sync::watch::Receiver<bool>) {
        let driving: Arc<Mutex<HashSet<i64>>> = Arc::default();
        loop {
            let ledger = Arc::clone(&self.ledger);
            let open = tokio::task::spawn_blocking(move || ledger.open_playtests())
                .await
                .unwrap_or_else(|e| Err(ApiError::unavailable(e.to_string())));
            match open {
                Ok(open) => {
                    for work in open {
                        let mut busy = driving
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner);
                        if busy.contains(&work.id) || busy.len() >= self.playing.at_once.max(1) {
                            continue;
                        }
                        busy.insert(work.id);
                        let (me, driving) = (Arc::clone(&self), Arc::clone(&driving));
                        tokio::spawn(async move {
                            let id = work.id;
                            if let Err(e) = me.drive(work).await {
                                (me.say)(&format!("{}: {e}; tried again shortly", playtest_id(id)));
                            }
                            driving
                                .lock()
                                .unwrap_or_else(std::sync::PoisonError::into_inner)
                                .remove(&id);
                            me.host.wake.notify_one();
                        });
                    }
                }
                Err(e) => (self.say)(&format!("hosted: the open playtests cannot be read: {e}")),
            }
            tokio::select! {
                () = self.host.wake.notified() => {}
                () = tokio::time::sleep(Duration::from_secs(2)) => {}
                _ = stop.changed() => return,
            }
            if *stop.borrow() {
                return;
            }
        }
    }

    async fn ledger<T: Send + 'static>(
        &self,
        call: impl FnOnce(&Ledger) -> Result<T, ApiError> + Send + 'static,
    ) -> Result<T, ApiError> {
        let ledger = Arc::clone(&self.ledger);
        tokio::task::spawn_blocking(move || call(&ledger))
            .await
            .unwrap_or_else(|e| Err(ApiError::unavailable(e.to_string())))
    }

    async fn phase(
        &self,
        id: i64,
        phase: Phase,
        reason: Option<String>,
        outcome: Option<Outcome>,
    ) -> Result<(), ApiError> {
        (self.say)(&format!(
            "{}: {phase}{}",
            playtest_id(id),
            reason
                .as_deref()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default()
        ));
        self.ledger(move |l| l.set_phase(id, phase, reason.as_deref(), outcome.as_ref()))
            .await
    }

    async fn cancel_requested(&self, id: i64) -> bool {
        self.ledger(move |l| l.playtest_work(id))
            .await
            .is_ok_and(|w| w.cancel_requested)
    }

    /// One playtest, from wherever it is to its end.
    async fn drive(&self, work: Work) -> Result<(), String> {
        let id = work.id;
        let e = |e: ApiError| e.message;
        let ws = self.host.workspace(id);
        if work.cancel_requested && work.phase == Phase::Queued {
            self.ledger(move |l| l.settle_playtest(id))
                .await
                .map_err(e)?;
            return self
                .phase(
                    id,
                    Phase::Canceled,
                    Some("canceled before it started: every cell refunded".into()),
                    None,
                )
                .await
                .map_err(e);
        }
        self.phase(id, Phase::Provisioning, None, None)
            .await
            .map_err(e)?;
        let build = ws.join("build");
        if !build.exists() {
            let archive_path = self.host.builds.join(format!("{}.tar.gz", work.build));
            let bytes = std::fs::read(&archive_path).map_err(|err| {
                format!("the build {} cannot be read: {err}", archive_path.display())
            })?;
            archive::unpack(&bytes, &build)
                .map_err(|err| format!("the build cannot be unpacked: {err}"))?;
        }
        std::fs::create_dir_all(build.join(".gameplan")).map_err(|err| err.to_string())?;
        let mut canceled = work.cancel_requested;
        let mut played = None;
        if !canceled {
            self.phase(id, Phase::Running, None, None)
                .await
                .map_err(e)?;
            // Each play step once, in the cells' order.
            let mut steps: Vec<String> = Vec::new();
            for cell in &work.cells {
                let step = cell.id.split('[').next().unwrap_or(&cell.id);
                if !steps.iter().any(|s| s == step) {
                    steps.push(step.to_owned());
                }
            }
            let (ended, stopped) = self.play(&work, &ws, "play", &steps).await?;
            canceled = stopped;
            played = Some(ended);
        }
        self.phase(id, Phase::Capturing, None, None)
            .await
            .map_err(e)?;
        let summary = newest_summary(&build.join(".gameplan"));
        let ended = self
            .capture(&work, summary.as_ref(), played.as_ref(), canceled)
            .await?;
        let mut outcome = None;
        if !canceled && ended > 0 {
            self.phase(id, Phase::Analyzing, None, None)
                .await
                .map_err(e)?;
            let (code, _) = self.play(&work, &ws, "analyze", &[]).await?;
            outcome = Some(collect(
                &build,
                &ws.join("out"),
                code.exit_code,
                &code.log_tail,
            )?);
        }
        let settlement = self
            .ledger(move |l| l.settle_playtest(id))
            .await
            .map_err(e)?;
        let refunded = format!(
            "charged {} cents, refunded {} ({} cells)",
            settlement.charged_cents,
            settlement.refunded_cents,
            settlement.refunded_runs.len()
        );
        let (phase, reason) = ending(canceled, ended, outcome.as_ref(), played, &refunded, &build);
        self.phase(id, phase, Some(reason), outcome)
            .await
            .map_err(e)
    }

    /// Runs gameplan on the playtest's plan (its `steps`, or all) as the
    /// local job `name` of the workspace, waiting for it (and stopping it
    /// on a cancel): how it ended, and whether it was stopped.
    async fn play(
        &self,
        work: &Work,
        ws: &Path,
        name: &str,
        steps: &[String],
    ) -> Result<(Ended, bool), String> {
        let build = ws.join("build");
        let mut argv = vec![
            self.playing.exe.display().to_string(),
            "plan".into(),
            "run".into(),
            work.plan.clone(),
        ];
        argv.extend(steps.iter().cloned());
        argv.extend(
            ["--yes", "--resume", "--output", "none", "--color", "never"].map(str::to_owned),
        );
        argv.extend([
            "--state-dir".to_owned(),
            build.join(".gameplan").display().to_string(),
        ]);
        for (k, v) in &work.vars {
            argv.extend(["--var".to_owned(), format!("{k}={v}")]);
        }
        argv.extend(["--executor".to_owned(), self.playing.executor.clone()]);
        if let Some(address) = &self.playing.address {
            argv.extend(["--executor-address".to_owned(), address.clone()]);
        }
        let shared = self
            .playing
            .shared_dir
            .as_ref()
            .map_or_else(|| ws.join("executor"), |d| d.join(playtest_id(work.id)));
        argv.extend([
            "--executor-shared-dir".to_owned(),
            shared.display().to_string(),
        ]);
        let job = JobSpec {
            submission_id: format!("{}-{name}", playtest_id(work.id)),
            cells: Vec::new(),
            argv,
            cwd: build,
            env: BTreeMap::new(),
            dir: ws.join("jobs").join(name),
            num_cpus: 1.0,
        };
        let local = Local;
        local.submit(&job).await.map_err(|e| e.0)?;
        let mut stopped = false;
        loop {
            let state = local.status(&job).await.map_err(|e| e.0)?;
            if state.is_over() {
                let log = local.logs(&job).await.unwrap_or_default();
                let exit_code = std::fs::read_to_string(job.dir.join("exit"))
                    .ok()
                    .and_then(|c| c.trim().parse().ok())
                    .unwrap_or(if state == JobState::Succeeded { 0 } else { 10 });
                return Ok((
                    Ended {
                        exit_code,
                        log_tail: tail(&log, 12),
                    },
                    stopped || state == JobState::Stopped,
                ));
            }
            if !stopped && self.cancel_requested(work.id).await {
                (self.say)(&format!(
                    "{}: canceling: stopping gameplan",
                    playtest_id(work.id)
                ));
                stopped = true;
                local.cancel(&job).await.map_err(|e| e.0)?;
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Ends each cell's run as the summary says: how many played.
    async fn capture(
        &self,
        work: &Work,
        summary: Option<&RunReport>,
        played: Option<&Ended>,
        canceled: bool,
    ) -> Result<usize, String> {
        let lines: BTreeMap<&str, &crate::report::playtest::CellLine> = summary
            .and_then(|s| s.playtest.as_ref())
            .map(|p| p.cells.iter().map(|c| (c.step.as_str(), c)).collect())
            .unwrap_or_default();
        let mut ended_played = 0;
        for (index, cell) in work.cells.iter().enumerate() {
            let end = match lines.get(cell.id.as_str()) {
                // A cell a cancel stopped mid-play played: charged, as the
                // quote says; one it stopped before its first action was
                // not, and is left to the settlement's refund.
                Some(line) if line.state != "interrupted" || line.actions_taken > 0 => {
                    let actions = i64::try_from(line.actions_taken).unwrap_or(i64::MAX);
                    let reason = if actions == 0 {
                        Some(format!(
                            "it never played: the game did not get through hello and reset ({})",
                            line.quit_reason
                        ))
                    } else if line.state == "interrupted" {
                        Some(format!("stopped by the cancel after {actions} actions"))
                    } else {
                        None
                    };
                    if actions > 0 {
                        ended_played += 1;
                    }
                    CellEnd {
                        actions_taken: actions,
                        reason,
                    }
                }
                // Not started when canceled (or stopped mid-play with
                // nothing reported): left open, so the settlement cancels
                // and refunds it unless it was seen playing.
                _ if canceled => continue,
                _ => CellEnd {
                    actions_taken: 0,
                    reason: Some(format!(
                        "it never played: gameplan stopped before it (exit {}): {}",
                        played.map_or(0, |p| p.exit_code),
                        played.map(|p| p.log_tail.as_str()).unwrap_or_default()
                    )),
                },
            };
            let id = work.id;
            self.ledger(move |l| l.end_cell(id, index, &end))
                .await
                .map_err(|e| e.message)?;
        }
        Ok(ended_played)
    }
}

/// How a playtest ends, and why: canceled; failed when no cell played, or
/// when the cells played but the analysis left no report page (never
/// `report_ready` for a report that is not there); else the report is
/// ready. A playtest where nothing played keeps no copy of its build.
fn ending(
    canceled: bool,
    ended: usize,
    outcome: Option<&Outcome>,
    played: Option<Ended>,
    refunded: &str,
    build: &Path,
) -> (Phase, String) {
    if canceled {
        (Phase::Canceled, format!("canceled: {refunded}"))
    } else if ended == 0 {
        // Nothing played: the workspace's copy of the build is not kept
        // (the uploaded build is, to be quoted again); the logs are.
        let _ = std::fs::remove_dir_all(build);
        let why = played.map(|p| p.log_tail).unwrap_or_default();
        (
            Phase::Failed,
            format!(
                "no cell played: the game did not start, or gameplan could not play it; {refunded}. {why}"
            ),
        )
    } else if !outcome.is_some_and(|o| o.files.iter().any(|f| f == "report.html")) {
        // The cells played (and are charged), but the analysis left no
        // report: never `report_ready` for a report that is not there.
        let why = outcome.map(|o| o.log_tail.clone()).unwrap_or_default();
        (
            Phase::Failed,
            format!("the cells played but the analysis wrote no report; {refunded}. {why}"),
        )
    } else {
        (Phase::ReportReady, refunded.to_owned())
    }
}

/// How a gameplan the worker ran ended.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Ended {
    exit_code: i64,
    log_tail: String,
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// The summary of the newest run in `state`, if any ended.
fn newest_summary(state: &Path) -> Option<RunReport> {
    let runs = std::fs::read_dir(state.join("runs")).ok()?;
    let newest = runs
        .filter_map(Result::ok)
        .filter_map(|d| {
            let summary = d.path().join("summary.json");
            let at = std::fs::metadata(&summary)
                .and_then(|m| m.modified())
                .ok()?;
            Some((at, summary))
        })
        .max_by_key(|(at, _)| *at)?;
    serde_json::from_slice(&std::fs::read(newest.1).ok()?).ok()
}

/// Copies the analysis's files into `out` and says what it came to.
fn collect(build: &Path, out: &Path, exit_code: i64, log_tail: &str) -> Result<Outcome, String> {
    std::fs::create_dir_all(out).map_err(|e| e.to_string())?;
    let state = build.join(".gameplan");
    let Some(summary) = newest_summary(&state) else {
        return Ok(Outcome {
            exit_code,
            log_tail: log_tail.to_owned(),
            ..Outcome::default()
        });
    };
    let run_dir = state.join("runs").join(&summary.run_id);
    let mut files = Vec::new();
    let mut copy = |from: PathBuf, name: &str| {
        if from.is_file() && std::fs::copy(&from, out.join(name)).is_ok() {
            files.push(name.to_owned());
        }
    };
    copy(run_dir.join("summary.json"), "summary.json");
    let aggregate = summary
        .playtest
        .as_ref()
        .and_then(|p| p.aggregate.as_ref())
        .map(|md| absolute(build, md));
    let page = aggregate
        .as_ref()
        .map(|md| md.with_file_name("report.html"))
        .filter(|p| p.is_file())
        .unwrap_or_else(|| run_dir.join("report.html"));
    if let Some(md) = &aggregate {
        copy(md.clone(), "aggregate.md");
        copy(md.with_file_name("aggregate.json"), "aggregate.json");
    }
    copy(page.clone(), "report.html");
    if let Ok(html) = std::fs::read_to_string(&page) {
        files.extend(linked_files(&html, &page, build, out, LINKED_LIMITS));
    }
    let mut findings = BTreeMap::new();
    for finding in summary.playtest.iter().flat_map(|p| &p.findings) {
        *findings.entry(finding.category.clone()).or_insert(0) += 1;
    }
    Ok(Outcome {
        exit_code: i64::from(summary.exit_code),
        findings,
        files,
        log_tail: if summary.exit_code == 0 {
            String::new()
        } else {
            log_tail.to_owned()
        },
    })
}

/// The most files, and bytes, of a report page's images, videos and
/// cell reports brought into `out/` beside it.
#[derive(Debug, Clone, Copy)]
struct LinkedLimits {
    files: usize,
    bytes: u64,
}

const LINKED_LIMITS: LinkedLimits = LinkedLimits {
    files: 2000,
    bytes: 256 * 1024 * 1024,
};

/// Copies the files `html` (the page at `page`) links by a relative path
/// (its screenshots, videos, the cells' reports) into `out/`, at the same
/// path relative to the page, so the fetched page shows them: their
/// names. A link that leaves the build is not followed.
fn linked_files(
    html: &str,
    page: &Path,
    build: &Path,
    out: &Path,
    limits: LinkedLimits,
) -> Vec<String> {
    let Some(dir) = page.parent() else {
        return Vec::new();
    };
    let Ok(build) = build.canonicalize() else {
        return Vec::new();
    };
    let mut names = std::collections::BTreeSet::new();
    for attribute in ["src=\"", "href=\""] {
        for piece in html.split(attribute).skip(1) {
            let Some(value) = piece.split('"').next() else {
                continue;
            };
            // Unescaped before the fragment is cut: `&#x2f;` holds a `#`.
            let unescaped = value
                .replace("&#x2f;", "/")
                .replace("&#x2F;", "/")
                .replace("&#x27;", "'")
                .replace("&amp;", "&");
            let value = unescaped.split('#').next().unwrap_or_default().to_owned();
            let relative = !value.is_empty()
                && !value.contains(':')
                && !value.starts_with('/')
                && Path::new(&value)
                    .components()
                    .all(|c| matches!(c, std::path::Component::Normal(_)));
            if relative {
                names.insert(value);
            }
        }
    }
    let (mut kept, mut bytes) = (Vec::new(), 0_u64);
    for name in names {
        let Ok(from) = dir.join(&name).canonicalize() else {
            continue;
        };
        let size = std::fs::metadata(&from).map_or(u64::MAX, |m| m.len());
        if !from.starts_with(&build)
            || !from.is_file()
            || kept.len() >= limits.files
            || bytes.saturating_add(size) > limits.bytes
        {
            continue;
        }
        let to = out.join(&name);
        let copied = to
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| std::fs::copy(&from, &to));
        if copied.is_ok() {
            bytes += size;
            kept.push(name);
        }
    }
    kept
}

fn absolute(root: &Path, path: &str) -> PathBuf {
    let path = Path::new(path);
    if path.is_absolute() {
        path.to_path_buf()
    } else {
        root.join(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pages_linked_files_come_along_within_their_limits_and_never_from_outside_the_build() {
        let dir = tempfile::tempdir().expect("tempdir");
        let build = dir.path().join("build");
        let run = build.join(".gameplan/runs/r");
        std::fs::create_dir_all(run.join("steps/play[a,1]/screenshots")).expect("dirs");
        for (name, size) in [("one.png", 10), ("two.png", 10), ("three.png", 10)] {
            std::fs::write(
                run.join("steps/play[a,1]/screenshots").join(name),
                vec![1; size],
            )
            .expect("shot");
        }
        std::fs::write(dir.path().join("secret"), "outside").expect("outside");
        let html = r#"<img src="steps&#x2f;play[a,1]&#x2f;screenshots&#x2f;one.png">
            <a href="steps/play[a,1]/screenshots/two.png#t=1">two</a>
            <img src="steps/play[a,1]/screenshots/three.png">
            <img src="../../../../secret"> <img src="/etc/passwd"> <a href="https://x.test/a.png">"#;
        let page = run.join("report.html");
        let out = dir.path().join("out");
        let all = LinkedLimits {
            files: 10,
            bytes: 1000,
        };
        let kept = linked_files(html, &page, &build, &out, all);
        assert_eq!(
            kept.len(),
            3,
            "the three screenshots, nothing else: {kept:?}"
        );
        assert!(out.join("steps/play[a,1]/screenshots/one.png").is_file());
        assert!(!out.join("secret").exists());
        let few = linked_files(
            html,
            &page,
            &build,
            &dir.path().join("few"),
            LinkedLimits { files: 2, ..all },
        );
        assert_eq!(few.len(), 2, "stops at its file limit");
        let small = linked_files(
            html,
            &page,
            &build,
            &dir.path().join("small"),
            LinkedLimits { bytes: 25, ..all },
        );
        assert_eq!(small.len(), 2, "stops at its byte limit");
    }

    #[test]
    fn a_playtest_is_report_ready_only_with_a_report_page_and_failed_when_nothing_played() {
        let dir = tempfile::tempdir().expect("tempdir");
        let with = |files: &[&str]| Outcome {
            files: files.iter().map(|f| (*f).to_owned()).collect(),
            log_tail: "error: the gate could not run".to_owned(),
            ..Outcome::default()
        };
        let page = with(&["summary.json", "report.html"]);
        let none = with(&["summary.json"]);
        let at = |canceled, ended, outcome: Option<&Outcome>| {
            ending(
                canceled,
                ended,
                outcome,
                None,
                "charged 90 cents",
                dir.path(),
            )
            .0
        };
        assert_eq!(at(false, 2, Some(&page)), Phase::ReportReady);
        assert_eq!(
            at(false, 2, Some(&none)),
            Phase::Failed,
            "no page, no report"
        );
        assert_eq!(at(false, 2, None), Phase::Failed, "no analysis, no report");
        assert_eq!(at(false, 0, Some(&page)), Phase::Failed, "nothing played");
        assert_eq!(at(true, 2, Some(&page)), Phase::Canceled);
        let (_, why) = ending(false, 2, Some(&none), None, "charged 90 cents", dir.path());
        assert!(
            why.contains("wrote no report") && why.contains("the gate could not run"),
            "{why}"
        );
    }
}

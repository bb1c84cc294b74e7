//! `gameplan plan run PLAN` and `gameplan plan resume [RUN_ID]`.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::io::{BufRead, IsTerminal, Write};
use std::path::Path;
use std::sync::Arc;

use super::context::{Context, LoadArgs, OutputMode, RunArgs};
use crate::engine::{self, RunOptions, RunRequest, Start, StartError};
use crate::exit_code::{self, Done, Failure};
use crate::journal::run::{RunDir, RunHistory, Scanned};
use crate::plan::diagnostic::Diagnostic;
use crate::plan::{LoadFailure, LoadedPlan};
use crate::report::progress::{Progress, ProgressOptions, StepOutput};
use crate::report::run_summary;
use crate::steps::{Confirm, Kinds, RunSettings};

/// What to do about an unfinished run of the same plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Choice {
    Resume,
    New,
    /// `--new --abandon-unsettled`: a new run even beside an unfinished one
    /// holding a request whose answer never came.
    NewAbandoningUnsettled,
    Ask,
}

impl Choice {
    pub fn from_flags(resume: bool, new: bool, abandon_unsettled: bool) -> Choice {
        match (resume, new, abandon_unsettled) {
            (true, _, _) => Choice::Resume,
            (_, true, true) => Choice::NewAbandoningUnsettled,
            (_, true, false) => Choice::New,
            _ => Choice::Ask,
        }
    }

    fn is_new(self) -> bool {
        matches!(self, Choice::New | Choice::NewAbandoningUnsettled)
    }
}

/// How a run of the plan whose hash is `hash` starts, beside an unfinished
/// run of it: resumed or new, as `choice` and the person at the terminal say.
pub(super) fn decide_start(
    cx: &Context,
    state_dir: &Path,
    hash: &str,
    choice: Choice,
) -> Result<Start, StartError> {
    let Some(history) = unfinished_run(cx, state_dir, hash, choice)? else {
        return Ok(Start::New(engine::new_run_id()));
    };
    let (done, total) = engine::progress_of(&history);
    let resume = match choice {
        Choice::Resume => true,
        Choice::New | Choice::NewAbandoningUnsettled => false,
        Choice::Ask if std::io::stdin().is_terminal() => ask(
            &format!(
                "run {} of this plan is unfinished ({done} of {} done). Resume it (y), or start a new run (n)? [Y/n] ",
                history.run_id,
                crate::report::plural(total, "step")
            ),
            true,
        ),
        Choice::Ask => {
            return Err(StartError::ResumeChoiceNeeded {
                run_id: history.run_id,
                done,
                total,
            });
        }
    };
    // A new run beside a request that may have been charged buys
    // again under a new key: only when the person says so.
    if !resume
        && choice != Choice::NewAbandoningUnsettled
        && let Some(refusal) = engine::unsettled_refusal(&history)
    {
        return Err(refusal);
    }
    if resume {
        Ok(Start::Resume(history.run_id))
    } else {
        Ok(Start::New(engine::new_run_id()))
    }
}

/// The part of the plan a run is for, and what it must reuse.
#[derive(Debug, Default)]
pub(super) struct Part {
    /// `plan run PLAN STEP...`: these steps and what they need; empty for all.
    pub steps: Vec<String>,
    /// `plan merge`: cells that must be reused, never played.
    pub reuse_only: Vec<String>,
    /// `--shard K/N` and its bundle directory, recorded so a resume writes
    /// the bundle too.
    pub shard: Option<(String, std::path::PathBuf)>,
    /// A paid plan's shard: the prepared job's directory, recorded so a
    /// resume names the same job in its bundle.
    pub prepared: Option<std::path::PathBuf>,
    /// A shard cut by `--durations FILE`: the file's digest.
    pub partition: Option<String>,
    /// A merge or an executor's run: the prepare run whose job it was given.
    pub prepared_by: Option<String>,
    /// Steps done elsewhere (the prepared job's), never run here.
    pub given: Vec<engine::Given>,
    /// `--shard prepare`: price every cell of the plan.
    pub prices_whole_plan: bool,
}

/// `path` from the current directory: a bundle's or a prepared job's
/// directory as a resume (maybe elsewhere) will find it.
pub(super) fn absolute(path: std::path::PathBuf) -> std::path::PathBuf {
    std::path::absolute(&path).unwrap_or(path)
}

/// Prints a finished run's report and ends with its outcome, or passes on
/// the failure of one that could not start.
pub(super) fn finish(cx: &Context, args: &RunArgs, ran: Result<Ran, Failure>) -> Done {
    let ran = ran?;
    publish(cx, &ran.report, args, &ran.redactor)
}

/// A run that ran (whatever its outcome).
pub(super) struct Ran {
    pub report: engine::RunReport,
    pub redactor: crate::template::Redactor,
    pub state_dir: std::path::PathBuf,
}

/// The unfinished run of this plan to resume or replace. A damaged journal
/// of this plan refuses the run, whatever the flags, unless `--new` says to
/// start over: then it is set aside (left on disk, with a note saying so)
/// and said so, and the search goes on.
fn unfinished_run(
    cx: &Context,
    state_dir: &Path,
    hash: &str,
    choice: Choice,
) -> Result<Option<RunHistory>, StartError> {
    loop {
        match engine::find_unfinished(state_dir, hash) {
            Err(StartError::DamagedRun { run_id, dir, .. }) if choice.is_new() => {
                engine::set_aside(state_dir, &run_id, "started now")?;
                cx.console.err(&format!(
                    "note: run {run_id} of this plan has a damaged journal; --new set it aside (it stays in {dir}, marked `set-aside`) and starts a fresh run\n"
                ));
            }
            Ok(None) if choice == Choice::Resume => {
                // Like `make` with nothing to remake: not an error, but the
                // user asked for something else, so say what happens.
                cx.console
                    .err("no unfinished run of this plan to resume; starting a new run\n");
                return Ok(None);
            }
            found => return found,
        }
    }
}

/// The price question at the terminal: `--yes` answers yes; with no
/// terminal to ask on, the answer is no (nothing is charged).
struct Terminal {
    yes: bool,
}

impl Confirm for Terminal {
    fn confirm(&self, question: &str) -> bool {
        self.yes || (std::io::stdin().is_terminal() && ask(&format!("{question} [y/N] "), false))
    }
}

/// Asks on the terminal; an empty answer is `default`.
pub fn ask(question: &str, default: bool) -> bool {
    let _ = write!(std::io::stderr(), "{question}");
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    if std::io::stdin().lock().read_line(&mut answer).is_err() {
        return false;
    }
    match answer.trim().to_ascii_lowercase().as_str() {
        "" => default,
        "y" | "yes" => true,
        _ => false,
    }
}

/// The step kinds, to ask about (a kind's pool, whether it uses the
/// backend), never to run.
pub(super) fn kinds_to_ask(loaded: &LoadedPlan) -> Kinds {
    Kinds::for_run(RunSettings {
        concurrency: 1,
        redactor: loaded.redactor.clone(),
    })
}

/// Whether `step` finished before the resume of `history`.
pub(super) fn finished(history: &RunHistory, step: &str) -> bool {
    history
        .records
        .get(step)
        .and_then(|r| r.state)
        .is_some_and(crate::journal::run::StepState::is_final)
}

/// The part of the plan a resumed run is for, as its journal recorded it.
pub(super) fn part_of(history: &RunHistory) -> Part {
    let options = &history.options;
    Part {
        steps: options.steps.clone(),
        reuse_only: options.reuse_only.clone(),
        shard: options
            .shard
            .clone()
            .zip(options.bundle.clone().map(std::path::PathBuf::from)),
        prepared: options.prepared.clone().map(std::path::PathBuf::from),
        partition: options.partition.clone(),
        prepared_by: options.prepared_by.clone(),
        // Journaled in the run already.
        given: Vec::new(),
        prices_whole_plan: options.prices_whole_plan,
    }
}

/// The newest unfinished run of any plan, for `plan resume` without an id.
/// A damaged journal met on the way is an error, not a run to pass over: it
/// may be the unfinished run meant (issue 8, item 12).
pub(super) fn newest_unfinished(state_dir: &Path) -> Result<RunHistory, String> {
    for id in crate::journal::run::run_ids(state_dir).into_iter().rev() {
        let dir = RunDir::new(state_dir, &id);
        if dir.set_aside().exists() {
            continue;
        }
        match Scanned::of(&dir) {
            Scanned::Run(history) if !history.is_finished() => return Ok(*history),
            Scanned::Run(_) | Scanned::NeverStarted => {}
            Scanned::Damaged { error, .. } => {
                return Err(engine::damaged_run(&dir, &id, &error).to_string());
            }
        }
    }
    Err(format!(
        "no unfinished run in {}; nothing to resume",
        state_dir.display()
    ))
}

/// The unset secrets this run would read, as problems at the strings that
/// read them: refused before anything runs (exit 3), as `plan check` does
/// not refuse them.
/// `done` names the steps that will not run (given from elsewhere, or
/// finished before a resume): a secret of `[backend]` is needed only when a
/// step that reaches the backend is left to run.
pub(super) fn unset_secrets(
    loaded: &LoadedPlan,
    pipeline: &crate::graph::Pipeline,
    kinds: &Kinds,
    done: &dyn Fn(&str) -> bool,
) -> Option<LoadFailure> {
    let steps: BTreeSet<&str> = pipeline
        .order
        .iter()
        .map(|&i| pipeline.steps[pipeline.instance(i).step].id.as_str())
        .collect();
    let reaches_backend = pipeline.order.iter().any(|&i| {
        let instance = pipeline.instance(i);
        !done(&instance.id)
            && kinds
                .get(instance.kind)
                .is_some_and(crate::steps::Kind::uses_backend)
    });
    let mut seen = BTreeSet::new();
    let diagnostics: Vec<Diagnostic> = loaded
        .unset_secrets_for(&steps)
        .filter(|u| reaches_backend || !u.in_backend)
        .filter(|u| seen.insert((u.name.clone(), u.span.start, u.span.end)))
        .map(|u| {
            let message = match &u.step {
                Some(step) => format!(
                    "secret `{}` is not set in the environment, and step `{step}` of this run reads it",
                    u.name
                ),
                None => format!(
                    "secret `{}` is not set in the environment, and the plan reads it outside any step, so every run needs it",
                    u.name
                ),
            };
            Diagnostic::new("plan::unset_secret", message)
                .at(u.span)
                .label("read here")
                .help(format!(
                    "export {} in the environment that runs gameplan (its value is redacted from all output); `plan check` and `plan explain` need no secret, a run of a step that reads one does",
                    u.name
                ))
        })
        .collect();
    (!diagnostics.is_empty()).then(|| LoadFailure {
        name: loaded.source.name.clone(),
        source: Some(Arc::clone(&loaded.source)),
        diagnostics,
    })
}

/// The run's live display, as this invocation asks (`--output` is
/// presentation, not part of the run: a resume takes its own).
fn progress(cx: &Context, args: &RunArgs, loaded: &LoadedPlan) -> Progress {
    Progress::with_options(
        ProgressOptions {
            terminal: std::io::stderr().is_terminal(),
            quiet: false,
            output: match args.output {
                OutputMode::Failures => StepOutput::Failures,
                OutputMode::Stream => StepOutput::Stream,
                OutputMode::None => StepOutput::None,
            },
            color: cx.console.color,
        },
        loaded.redactor.clone(),
    )
}

/// [`execute`] for a run the command line starts: with the plan's `--var`s,
/// new or resuming its unfinished run as `choice` (and maybe the person at
/// the terminal) says, as every mode that starts a run decides it.
pub(super) fn execute_chosen(
    cx: &Context,
    loaded: LoadedPlan,
    state_dir: &Path,
    load: &LoadArgs,
    part: &Part,
    args: &RunArgs,
    choice: Choice,
) -> Result<Ran, Failure> {
    execute(
        cx,
        loaded,
        state_dir,
        load.vars.clone(),
        part,
        args,
        |hash| decide_start(cx, state_dir, hash, choice),
    )
}

/// Locks the plan, decides how to start, and runs `part` of it; the
/// report is printed by the caller ([`finish`]). `Err`: why the run could
/// not start.
pub(super) fn execute(
    cx: &Context,
    loaded: LoadedPlan,
    state_dir: &Path,
    vars: Vec<(String, String)>,
    part: &Part,
    args: &RunArgs,
    decide: impl FnOnce(&str) -> Result<Start, StartError>,
) -> Result<Ran, Failure> {
    let steps = part.steps.as_slice();
    let pipeline = match crate::graph::expand_loaded(&loaded) {
        Ok(p) => p,
        Err(e) => return Err(StartError::Expand(e).failure()),
    };
    let pipeline = match crate::graph::select(pipeline, steps) {
        Ok(part) => part,
        Err(e) => return Err(StartError::UnknownStep(e).failure()),
    };
    if let Some(Err(message)) = args.junit.as_deref().map(junit_writable) {
        return Err(Failure::plan(message));
    }
    let baseline = read_baseline(args, state_dir)?;
    let options = RunOptions {
        no_reuse: args.no_reuse,
        fail_fast: args.fail_fast,
        concurrency: args.concurrency.map(|c| c as usize),
        vars,
        yes: args.yes,
        dry_upload: args.dry_upload,
        steps: steps.to_vec(),
        fail_on: args.fail_on.clone(),
        reuse_only: part.reuse_only.clone(),
        shard: part.shard.as_ref().map(|(s, _)| s.clone()),
        bundle: part
            .shard
            .as_ref()
            .map(|(_, dir)| dir.display().to_string()),
        prepared: part.prepared.as_ref().map(|d| d.display().to_string()),
        partition: part.partition.clone(),
        prepared_by: part.prepared_by.clone(),
        given: part.given.clone(),
        prices_whole_plan: part.prices_whole_plan,
        baseline,
    };
    let kinds = Arc::new(Kinds::for_run(RunSettings {
        concurrency: options.effective_concurrency(),
        redactor: loaded.redactor.clone(),
    }));
    let given = |id: &str| part.given.iter().any(|g| g.step == id);
    if let Some(failure) = unset_secrets(&loaded, &pipeline, &kinds, &given) {
        return Err(cx.refusal(&failure));
    }
    if let Err(e) = engine::check_runnable(&pipeline, &kinds) {
        return Err(e.failure());
    }
    let hash = engine::plan_hash(&loaded);
    // Lock first: deciding to resume a run must not race a live one.
    let mut lock = match engine::lock(state_dir, &hash, &engine::new_run_id()) {
        Ok(lock) => lock,
        Err(e) => return Err(e.failure()),
    };
    let start = match decide(&hash) {
        Ok(start) => start,
        Err(e) => return Err(e.failure()),
    };
    // The lock was taken under a placeholder id; name the run that really
    // runs, or `plan stop`, `plan status`, `plan runs` and a refused second
    // run would all name (or fail to find) a run that does not exist.
    if let Err(e) = lock.set_holder(&engine::holder(start.run_id())) {
        return Err(StartError::Lock(e.to_string()).failure());
    }
    let mut resume_hint = format!("gameplan plan resume {}", start.run_id());
    if let Some(dir) = &args.state_dir {
        let _ = write!(resume_hint, " --state-dir {}", dir.display());
    }
    let progress = progress(cx, args, &loaded);
    let redactor = loaded.redactor.clone();
    let request = RunRequest {
        loaded,
        pipeline,
        plan_hash: hash,
        state_dir: state_dir.to_path_buf(),
        confirm: Arc::new(Terminal { yes: options.yes }),
        options,
        env: Arc::new(cx.env.clone()),
        start,
        resume_hint,
        kinds,
    };
    let report = match engine::run(request, &progress, lock) {
        Ok(report) => report,
        Err(e) => {
            progress.finish();
            return Err(e.failure());
        }
    };
    progress.finish();
    Ok(Ran {
        report,
        redactor,
        state_dir: state_dir.to_path_buf(),
    })
}

/// `--baseline`, read before anything is locked, run or charged: a
/// baseline that cannot be read is the command's mistake, said at once
/// (exit 3).
fn read_baseline(
    args: &RunArgs,
    state_dir: &Path,
) -> Result<Option<crate::report::baseline::Baseline>, Failure> {
    args.baseline
        .as_deref()
        .map(|given| crate::report::baseline::Baseline::load(given, state_dir))
        .transpose()
        .map_err(|message| Failure::plan(format!("error: {message}\n")))
}

/// Writes the run's report where it was asked for (`--junit`, the GitHub
/// step summary) and prints it; ends with its outcome (the engine's code).
fn publish(
    cx: &Context,
    report: &engine::RunReport,
    args: &RunArgs,
    redactor: &crate::template::Redactor,
) -> Done {
    if let Some(path) = &args.junit
        && let Err(e) = run_summary::write_junit(report, path)
    {
        cx.console.err(&format!(
            "warning: cannot write the JUnit file {}: {e}\n",
            path.display()
        ));
    }
    if let Some(summary) = cx.env.get("GITHUB_STEP_SUMMARY").filter(|s| !s.is_empty()) {
        let markdown = redactor.redact(&run_summary::markdown(report));
        let appended = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(summary)
            .and_then(|mut f| f.write_all(markdown.as_bytes()));
        if let Err(e) = appended {
            cx.console.err(&format!(
                "warning: cannot append to GITHUB_STEP_SUMMARY ({summary}): {e}\n"
            ));
        }
    }
    if let Some(warning) = &report.page_warning {
        cx.console
            .err(&redactor.redact(&format!("warning: {warning}\n")));
    }
    if args.json {
        let mut doc = serde_json::to_value(report).unwrap_or_default();
        redactor.redact_json(&mut doc);
        cx.console.json(&doc);
    } else {
        cx.console
            .out(&redactor.redact(&run_summary::text(report, cx.console.color_out)));
        if let Some(playtest) = &report.playtest {
            cx.console
                .out(&redactor.redact(&crate::report::playtest::text(playtest)));
        }
        for section in &report.sections {
            cx.console.out(&redactor.redact(&section.text));
        }
        cx.console
            .out(&redactor.redact(&run_summary::findings_verdict_text(report)));
    }
    exit_code::outcome(report.exit_code)
}

/// Checks, before anything runs, that the `--junit` file can be written: a
/// CI job reads that file, not a warning printed after the run (issue 10).
/// A file this check creates is removed again, so a run refused later
/// leaves no empty report behind.
fn junit_writable(path: &Path) -> Result<(), String> {
    let existed = path.exists();
    // Its directory is made as the report's writer makes it.
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
    let opened = parent
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| {
            std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false)
                .open(path)
        });
    match opened {
        Ok(_) => {
            if !existed {
                let _ = std::fs::remove_file(path);
            }
            Ok(())
        }
        Err(e) => Err(format!(
            "error: cannot write the JUnit file {}: {e}. Nothing was run or charged; pass a --junit path gameplan can write (a file, in a directory it can create or write to)\n",
            path.display()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::{Confirm, Terminal};

    /// The child of the test below, with no terminal on stdin.
    #[test]
    #[ignore = "started by without_a_terminal_the_price_question_is_a_no"]
    fn no_terminal_child() {
        if std::env::var_os("GAMEPLAN_NO_TERMINAL_CHILD").is_none() {
            return;
        }
        assert!(!Terminal { yes: false }.confirm("Buy 4 cells for 1234 cents?"));
        assert!(Terminal { yes: true }.confirm("Buy 4 cells for 1234 cents?"));
    }

    #[test]
    fn without_a_terminal_the_price_question_is_a_no() {
        let exe = std::env::current_exe().expect("test binary");
        let mut child = std::process::Command::new(exe)
            .args(["cli::run::tests::no_terminal_child", "--exact", "--ignored"])
            .env("GAMEPLAN_NO_TERMINAL_CHILD", "1")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start the child");
        let started = std::time::Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait") {
                break status;
            }
            if started.elapsed().as_secs() >= 20 {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the question waited for an answer with no terminal");
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        };
        assert!(status.success(), "no terminal and no --yes must be a no");
    }
}

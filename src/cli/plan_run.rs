//! `gameplan plan run PLAN` and `gameplan plan resume [RUN_ID]`.

use std::fmt::Write as _;
use std::io::{BufRead, IsTerminal, Write};
use std::path::Path;
use std::sync::Arc;

use super::{Context, LoadArgs, RunArgs};
use crate::engine::{self, RunOptions, RunRequest, Start, StartError};
use crate::exit_code;
use crate::journal::run::{RunDir, RunHistory};
use crate::plan::{LoadOptions, LoadedPlan};
use crate::report::progress::Progress;
use crate::report::run_summary;
use crate::steps::{Confirm, Kinds, RunSettings};

/// What to do about an unfinished run of the same plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Choice {
    Resume,
    New,
    Ask,
}

impl Choice {
    pub fn from_flags(resume: bool, new: bool) -> Choice {
        match (resume, new) {
            (true, _) => Choice::Resume,
            (_, true) => Choice::New,
            _ => Choice::Ask,
        }
    }
}

fn refuse(cx: &Context, error: &StartError) -> u8 {
    cx.console.err(&format!("error: {error}\n"));
    error.exit_code()
}

pub fn run(
    cx: &Context,
    plan: &Path,
    steps: &[String],
    load: &LoadArgs,
    args: &RunArgs,
    choice: Choice,
) -> u8 {
    let loaded = match cx.load(plan, load) {
        Ok(loaded) => loaded,
        Err(code) => return code,
    };
    let state_dir = engine::state_dir(&loaded.root, args.state_dir.as_deref());
    execute(
        cx,
        loaded,
        &state_dir,
        load.vars.clone(),
        steps,
        args,
        |hash| {
            let Some(history) = engine::find_unfinished(&state_dir, hash) else {
                return Ok(Start::New(engine::new_run_id()));
            };
            let (done, total) = engine::progress_of(&history);
            let resume = match choice {
                Choice::Resume => true,
                Choice::New => false,
                Choice::Ask if std::io::stdin().is_terminal() => ask(
                    &format!(
                        "run {} of this plan is unfinished ({done} of {total} steps done). Resume it? [Y/n] ",
                        history.run_id
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
            if resume {
                Ok(Start::Resume(history.run_id))
            } else {
                Ok(Start::New(engine::new_run_id()))
            }
        },
    )
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
fn ask(question: &str, default: bool) -> bool {
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

pub fn resume(cx: &Context, run_id: Option<&str>, args: &RunArgs) -> u8 {
    let cwd = std::env::current_dir().unwrap_or_else(|_| ".".into());
    let root = crate::plan::find_root(&cwd.join("plan.toml"));
    let state_dir = engine::state_dir(&root, args.state_dir.as_deref());
    let history = match run_id {
        Some(id) => {
            RunHistory::read(&RunDir::new(&state_dir, id).journal()).map_err(|e| e.to_string())
        }
        None => crate::journal::run::run_ids(&state_dir)
            .into_iter()
            .rev()
            .find_map(|id| {
                let h = RunHistory::read(&RunDir::new(&state_dir, &id).journal()).ok()?;
                (!h.is_finished()).then_some(h)
            })
            .ok_or_else(|| {
                format!(
                    "no unfinished run in {}; nothing to resume",
                    state_dir.display()
                )
            }),
    };
    let history = match history {
        Ok(h) => h,
        Err(message) => {
            cx.console.err(&format!("error: {message}\n"));
            return exit_code::PLAN_ERROR;
        }
    };
    if let Some((outcome, code)) = history.finished.filter(|_| history.is_finished()) {
        cx.console.err(&format!(
            "run {} already finished ({outcome:?}); nothing to resume. `gameplan plan status {}` shows it\n",
            history.run_id, history.run_id
        ));
        return code;
    }
    let options = LoadOptions {
        env: cx.env.clone(),
        vars: history.vars.clone(),
        root: Some(root.clone()),
        ..LoadOptions::default()
    };
    let plan_path = root.join(&history.plan_path);
    let loaded = match crate::plan::load(&plan_path, &options) {
        Ok(loaded) => loaded,
        Err(failure) => {
            cx.report_failure(&failure);
            return exit_code::PLAN_ERROR;
        }
    };
    let current = engine::plan_hash(&loaded);
    if current != history.plan_hash {
        cx.console.err(&format!(
            "error: the plan {} changed since run {} started (plan hash {} → {current}); a resume would mix two plans. Nothing was run or charged; start a new run with `gameplan plan run {} --new`\n",
            history.plan_path, history.run_id, history.plan_hash, history.plan_path
        ));
        return exit_code::PLAN_ERROR;
    }
    let vars = history.vars.clone();
    let steps = history.options.steps.clone();
    // The journal is read again under the lock (another process may have
    // resumed or finished it meanwhile); this read only found the plan.
    execute(cx, loaded, &state_dir, vars, &steps, args, move |_| {
        Ok(Start::Resume(history.run_id))
    })
}

/// Locks the plan, decides how to start, runs, and reports.
fn execute(
    cx: &Context,
    loaded: LoadedPlan,
    state_dir: &Path,
    vars: Vec<(String, String)>,
    steps: &[String],
    args: &RunArgs,
    decide: impl FnOnce(&str) -> Result<Start, StartError>,
) -> u8 {
    let pipeline = match crate::graph::expand_loaded(&loaded) {
        Ok(p) => p,
        Err(e) => return refuse(cx, &StartError::Expand(e)),
    };
    let pipeline = match crate::graph::select(pipeline, steps) {
        Ok(part) => part,
        Err(e) => return refuse(cx, &StartError::UnknownStep(e)),
    };
    let options = RunOptions {
        no_reuse: args.no_reuse,
        fail_fast: args.fail_fast,
        concurrency: args.concurrency.map(|c| c as usize),
        vars,
        yes: args.yes,
        dry_upload: args.dry_upload,
        steps: steps.to_vec(),
    };
    let kinds = Arc::new(Kinds::for_run(RunSettings {
        concurrency: options.effective_concurrency(),
        redactor: loaded.redactor.clone(),
    }));
    if let Err(e) = engine::check_runnable(&pipeline, &kinds) {
        return refuse(cx, &e);
    }
    let hash = engine::plan_hash(&loaded);
    // Lock first: deciding to resume a run must not race a live one.
    let mut lock = match engine::lock(state_dir, &hash, &engine::new_run_id()) {
        Ok(lock) => lock,
        Err(e) => return refuse(cx, &e),
    };
    let start = match decide(&hash) {
        Ok(start) => start,
        Err(e) => return refuse(cx, &e),
    };
    // The lock was taken under a placeholder id; name the run that really
    // runs, or `plan stop`, `plan status`, `plan runs` and a refused second
    // run would all name (or fail to find) a run that does not exist.
    if let Err(e) = lock.set_holder(&engine::holder(start.run_id())) {
        return refuse(cx, &StartError::Lock(e.to_string()));
    }
    let mut resume_hint = format!("gameplan plan resume {}", start.run_id());
    if let Some(dir) = &args.state_dir {
        let _ = write!(resume_hint, " --state-dir {}", dir.display());
    }
    let progress = Progress::new(
        std::io::stderr().is_terminal(),
        false,
        loaded.redactor.clone(),
    );
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
            return refuse(cx, &e);
        }
    };
    progress.finish();
    if let Some(path) = &args.junit
        && let Err(e) = run_summary::write_junit(&report, path)
    {
        cx.console.err(&format!(
            "warning: cannot write the JUnit file {}: {e}\n",
            path.display()
        ));
    }
    if let Some(summary) = cx.env.get("GITHUB_STEP_SUMMARY").filter(|s| !s.is_empty()) {
        let markdown = redactor.redact(&run_summary::markdown(&report));
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
    if args.json {
        let mut doc = serde_json::to_value(&report).unwrap_or_default();
        redactor.redact_json(&mut doc);
        cx.console.json(&doc);
    } else {
        cx.console
            .out(&redactor.redact(&run_summary::text(&report)));
        if let Some(playtest) = &report.playtest {
            cx.console
                .out(&redactor.redact(&crate::report::playtest::text(playtest)));
        }
    }
    report.exit_code
}

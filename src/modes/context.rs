//! The arguments every run mode and most commands share, and what a
//! command may read of the outside world ([`Context`]): the plan loaded
//! once, its problems printed the same way by every command.
// clap turns the flags' doc comments into `--help` text, where markdown
// backticks around FILE or JUnit would show literally.
#![expect(clippy::doc_markdown, reason = "doc comments are --help text")]

use std::collections::BTreeMap;
use std::path::PathBuf;

use clap::{Args, ValueEnum};

use crate::exit_code::Failure;
use crate::plan::{LoadFailure, LoadOptions, LoadedPlan};
use crate::report::Console;

/// How a plan runs (shared by `plan run` and `plan resume`).
#[derive(Debug, Args, Clone, Default)]
#[expect(
    clippy::struct_excessive_bools,
    reason = "each bool is a command-line flag"
)]
pub struct RunArgs {
    /// Answer yes to the price question (needed without a terminal).
    #[arg(long)]
    pub yes: bool,
    /// Ignore stored results: run every step.
    #[arg(long)]
    pub no_reuse: bool,
    /// Stop everything at the first failure (default: independent branches keep going).
    #[arg(long)]
    pub fail_fast: bool,
    /// List what deliver steps would upload, without uploading.
    #[arg(long)]
    pub dry_upload: bool,
    /// Steps running at once (default: the number of cores).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub concurrency: Option<u32>,
    /// What to show of what the steps print. Per command: a resume takes
    /// its own, not the one the run started with.
    #[arg(long, value_enum, value_name = "WHAT", default_value_t = OutputMode::Failures)]
    pub output: OutputMode,
    /// Print one JSON document (the run report) instead of the summary.
    #[arg(long)]
    pub json: bool,
    /// Also write each step as a JUnit test case to FILE.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// Where runs, the store and locks live (default: .gameplan/ at the repo root).
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Fail the run (exit 1) when a finding is of one of these categories
    /// (crash, hang, error, refused, stuck, console) or of one of these
    /// severities or worse (critical, high, medium, low); `new:` in front
    /// (new:crash) takes only the findings --baseline does not know (without
    /// a baseline, every finding is new). Overrides the plan's `fail_on`; a
    /// resume without it keeps the run's.
    #[arg(
        long,
        value_name = "[new:]CATEGORY|SEVERITY,...",
        value_delimiter = ',',
        value_parser = parse_fail_on
    )]
    pub fail_on: Vec<crate::plan::model::FailOn>,
    /// Compare the findings with an earlier run's: its aggregate.json, or
    /// its run id in the state directory. Each finding is labelled new or
    /// known (by its fingerprint) and the baseline's findings not met again
    /// are listed as fixed. A resume without it keeps the run's.
    #[arg(long, value_name = "FILE|RUN_ID")]
    pub baseline: Option<String>,
    /// Play the cells as jobs on this executor (local or ray), whatever the
    /// plan's `[executor]` says: how `serve --executor` plays a hosted
    /// playtest.
    #[arg(long, value_name = "KIND", value_parser = ["local", "ray"], hide = true)]
    pub executor: Option<String>,
    /// With --executor ray: the Ray dashboard's URL.
    #[arg(long, value_name = "URL", requires = "executor", hide = true)]
    pub executor_address: Option<String>,
    /// With --executor: the directory the jobs and this machine share.
    #[arg(long, value_name = "DIR", requires = "executor", hide = true)]
    pub executor_shared_dir: Option<PathBuf>,
}

impl RunArgs {
    /// The plan's `[executor]` as `--executor` overrides it.
    pub fn executor_of(
        &self,
        plan: &crate::plan::model::Plan,
    ) -> Option<crate::plan::model::Executor> {
        use crate::plan::model::{DEFAULT_BATCH, Executor, ExecutorKind};
        let Some(kind) = &self.executor else {
            return plan.executor.clone();
        };
        Some(Executor {
            kind: if kind == "ray" {
                ExecutorKind::Ray
            } else {
                ExecutorKind::Local
            },
            address: self.executor_address.clone(),
            shared_dir: self.executor_shared_dir.as_ref().map(|d| {
                std::path::absolute(d)
                    .unwrap_or_else(|_| d.clone())
                    .display()
                    .to_string()
            }),
            batch: plan.executor.as_ref().map_or(DEFAULT_BATCH, |e| e.batch),
        })
    }
}

fn parse_fail_on(text: &str) -> Result<crate::plan::model::FailOn, String> {
    crate::plan::model::FailOn::parse(text)
}

/// How a plan is loaded.
#[derive(Debug, Args, Clone, Default)]
pub struct LoadArgs {
    /// Override a plan variable: --var seed=9 (repeatable).
    #[arg(long = "var", value_name = "NAME=VALUE", value_parser = parse_var)]
    pub vars: Vec<(String, String)>,
}

fn parse_var(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((name, value)) if !name.is_empty() => Ok((name.to_owned(), value.to_owned())),
        _ => Err(format!("`{text}` is not NAME=VALUE")),
    }
}

/// `plan run --output`: what a run shows of what its steps print.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum OutputMode {
    /// A failed step's last lines, once, as it fails.
    #[default]
    Failures,
    /// Every line as it is printed, prefixed with its step id.
    Stream,
    /// Nothing; a failure says where its log is.
    None,
}

/// What a command may read from the outside world: captured once, here, so
/// the rest of the code never reads the process environment itself.
pub struct Context {
    pub env: BTreeMap<String, String>,
    pub console: Console,
}

impl Context {
    pub fn load_options(&self, args: &LoadArgs) -> LoadOptions {
        LoadOptions {
            env: self.env.clone(),
            vars: args.vars.clone(),
            // Checking, explaining and graphing need no secret's value; a
            // run refuses when a step it runs reads an unset one.
            defer_secrets: true,
            ..LoadOptions::default()
        }
    }

    /// Loads one plan; its problems are the failure's message.
    pub fn load(&self, plan: &std::path::Path, args: &LoadArgs) -> Result<LoadedPlan, Failure> {
        crate::plan::load(plan, &self.load_options(args)).map_err(|f| self.refusal(&f))
    }

    /// Loads and expands one plan; what stops it is the failure (exit 3).
    pub fn load_pipeline(
        &self,
        plan: &std::path::Path,
        args: &LoadArgs,
    ) -> Result<(LoadedPlan, crate::graph::Pipeline), Failure> {
        let loaded = self.load(plan, args)?;
        let pipeline = crate::graph::expand_loaded(&loaded)
            .map_err(|e| self.refusal(&expand_failure(plan, &e)))?;
        Ok((loaded, pipeline))
    }

    /// Prints a plan's problems and goes on (`plan check` of several plans).
    pub fn report_failure(&self, failure: &LoadFailure) {
        self.console.err(&self.render(failure));
    }

    /// A plan that does not load or expand, as the command's failure
    /// (exit 3: found before anything was charged).
    pub fn refusal(&self, failure: &LoadFailure) -> Failure {
        Failure::plan(self.render(failure))
    }

    fn render(&self, failure: &LoadFailure) -> String {
        crate::report::diagnostics::render(failure, self.console.color)
    }
}

/// A plan that validates but cannot expand (too many steps or edges) is not
/// valid either: one problem, reported the same way by every command (code,
/// help, "nothing was run or charged"), not a bare line from some of them.
pub fn expand_failure(plan: &std::path::Path, e: &crate::graph::ExpandError) -> LoadFailure {
    LoadFailure {
        name: plan.display().to_string(),
        source: None,
        diagnostics: vec![match e {
            crate::graph::ExpandError::Cell { .. } => {
                crate::plan::diagnostic::Diagnostic::new("plan::template", e.to_string())
                    .help("a cell's `{{ matrix.NAME }}` rendered with an error; check the template with this cell's values")
            }
            _ => crate::plan::diagnostic::Diagnostic::new("plan::too_many_steps", e.to_string())
                .help("split the plan, or make the matrices smaller"),
        }],
    }
}

//! gameplan: a declarative pipeline runner for AI playtests and AI review gates.
//!
//! The binary is a thin shell over [`run`]; everything is testable in-process.
//! Each top-level module is a room on a floor, and a room imports only
//! rooms on lower floors: the table is in `docs/contributing.md`, and the
//! `house::layout` integration test holds the code to it. `report` never
//! calls into `engine`: the engine fills in `report::run`'s types and
//! `report` renders them.

pub mod backend;
pub mod cli;
pub mod engine;
pub mod executor;
pub mod exit_code;
pub mod finding_class;
pub mod game_target;
pub mod games;
pub mod graph;
pub mod hosted;
pub mod journal;
pub mod llm;
pub mod modes;
pub mod plan;
pub mod play;
pub mod process;
pub mod ray;
pub mod report;
pub mod reuse;
pub mod review;
pub mod server;
pub mod shard;
pub mod state_dir;
pub mod steps;
pub mod suggest;
pub mod template;
pub mod text;
pub mod token_price;

use std::ffi::OsString;
use std::process::ExitCode;

use clap::Parser;

/// Runs the command line `args` (program name first) and returns the process exit code.
pub fn run<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = match cli::Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            // Help and --version are successes; a usage error is an
            // environment error found before anything ran (exit 3), not
            // clap's 2, which gameplan reserves for "incomplete". clap
            // printed it already, in its own colours.
            let done = if e.use_stderr() {
                Err(exit_code::Failure::plan(String::new()))
            } else {
                Ok(())
            };
            return ExitCode::from(exit_code::of(&done));
        }
    };
    let env: std::collections::BTreeMap<String, String> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect();
    // A flag beats the environment; --no-color beats everything. Under
    // `auto`, NO_COLOR beats CLICOLOR_FORCE (bixense.com/clicolors: any
    // value but 0 forces colour).
    let (no_color, force) = match cli.color {
        _ if cli.no_color => (true, false),
        cli::ColorChoice::Never => (true, false),
        cli::ColorChoice::Always => (false, true),
        cli::ColorChoice::Auto => (
            env.get("NO_COLOR").is_some_and(|v| !v.is_empty()),
            env.get("CLICOLOR_FORCE")
                .is_some_and(|v| !v.is_empty() && v != "0"),
        ),
    };
    let cx = cli::Context {
        console: report::Console::from_env(no_color, force),
        env,
    };
    // The one place a command's failure is said and becomes the exit code.
    let done = cli::dispatch(cli, &cx);
    ExitCode::from(exit_code::end(&done, |message| cx.console.err(message)))
}

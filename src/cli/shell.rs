//! `gameplan completions SHELL` and `gameplan man`: generated from the clap
//! definitions, so they cannot drift from the commands they describe.
//! Internal commands (`__launch`, `__simulate`, ...) are left out of both.

use std::path::Path;

use clap::CommandFactory;

use super::{Cli, Context};
use crate::exit_code::{Done, Failure};

/// The command line as people see it: without the hidden internal commands
/// (clap's bash completions would otherwise offer them).
fn visible() -> clap::Command {
    let full = Cli::command();
    let subcommands: Vec<clap::Command> = full
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
        .cloned()
        .collect();
    let mut visible = clap::Command::new("gameplan")
        .version(env!("CARGO_PKG_VERSION"))
        .args(full.get_arguments().cloned())
        .subcommands(subcommands);
    if let Some(about) = full.get_about() {
        visible = visible.about(about.clone());
    }
    if let Some(after) = full.get_after_help() {
        visible = visible.after_help(after.clone());
    }
    visible
}

pub fn completions(cx: &Context, shell: clap_complete::Shell) {
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut visible(), "gameplan", &mut out);
    cx.console.out(&String::from_utf8_lossy(&out));
}

pub fn man(cx: &Context, out_dir: Option<&Path>) -> Done {
    let written = if let Some(dir) = out_dir {
        std::fs::create_dir_all(dir)
            .and_then(|()| clap_mangen::generate_to(visible(), dir))
            .map(|()| {
                cx.console
                    .err(&format!("wrote the man pages into {}\n", dir.display()));
            })
    } else {
        let mut page = Vec::new();
        clap_mangen::Man::new(visible())
            .render(&mut page)
            .map(|()| cx.console.out(&String::from_utf8_lossy(&page)))
    };
    written.map_err(|e| Failure::plan(format!("gameplan: cannot write the man page: {e}\n")))
}

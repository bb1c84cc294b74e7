//! `gameplan game NAME`: a built-in bridge game on stdin/stdout.
//!
//! A simulation starts a game process per crash (thousands per run), and
//! each start of this binary used to build the whole clap tree, install the
//! TLS provider and copy the environment before the game read a line. So
//! [`serve_builtin_game`] recognizes the two argvs that start a built-in
//! game and serves it before any of that: `gameplan game NAME`, and the
//! wrapper gameplan itself spawns to set rlimits (`gameplan __game-exec
//! [--as N] [--cpu N] [--nofile N] -- GAMEPLAN game NAME`, where GAMEPLAN is
//! this executable). Any other argv, a misspelled game included, goes
//! through clap as before, so errors and `--help` are unchanged.

use std::ffi::OsString;
use std::path::Path;

use super::Context;
use crate::exit_code;
use crate::games::{self, Ending};
use crate::play::stdio::{ResourceLimits, set_limits};
use crate::report::Console;

/// The exit code of a game that crashed (a planted bug), as a Rust panic's.
pub const CRASHED: u8 = 101;

/// `gameplan game NAME` through clap (the slow path, same behaviour).
pub fn run(cx: &Context, name: &str) -> u8 {
    play(&cx.console, name)
}

/// Serves a built-in game when `args` (program name first) starts one;
/// `None` for any other command line, which the caller parses as usual.
pub fn serve_builtin_game(args: &[OsString]) -> Option<u8> {
    let (limits, game) = match args.get(1)?.to_str()? {
        "game" => (None, &args[1..]),
        "__game-exec" => {
            let (limits, wrapped) = game_exec_args(&args[2..])?;
            // Only this same executable may be served in process; anything
            // else is exec'd by the clap path.
            let this = std::env::current_exe().ok()?;
            if Path::new(wrapped.first()?) != this {
                return None;
            }
            (Some(limits), &wrapped[1..])
        }
        _ => return None,
    };
    let [game, name] = game else {
        return None;
    };
    let name = name.to_str()?;
    if game != "game" || games::find(name).is_none() {
        return None;
    }
    let console = Console::plain();
    if let Some(limits) = limits
        && let Err(why) = set_limits(limits)
    {
        console.err(&format!("gameplan: {why}\n"));
        return Some(127);
    }
    Some(play(&console, name))
}

/// The limits and the argv after `--` of `__game-exec`, in the form
/// gameplan writes them (`--as N` etc., each at most once, in any order);
/// `None` for any other form.
fn game_exec_args(args: &[OsString]) -> Option<(ResourceLimits, &[OsString])> {
    let mut limits = ResourceLimits::NONE;
    let mut rest = args;
    loop {
        let (flag, after) = rest.split_first()?;
        let flag = flag.to_str()?;
        if flag == "--" {
            return Some((limits, after));
        }
        let (value, after) = after.split_first()?;
        let value: u64 = value.to_str()?.parse().ok()?;
        let slot = match flag {
            "--as" => &mut limits.address_space,
            "--cpu" => &mut limits.cpu_seconds,
            "--nofile" => &mut limits.open_files,
            _ => return None,
        };
        if slot.replace(value).is_some() {
            return None;
        }
        rest = after;
    }
}

fn play(console: &Console, name: &str) -> u8 {
    // The protocol is the game's stdout; no human reads it, so it does not
    // go through the console. Locked once: one flush per reply.
    let stdin = std::io::stdin().lock();
    let stdout = std::io::stdout().lock();
    match games::play(name, stdin, stdout) {
        None => {
            let known: Vec<&str> = games::BUILTINS.iter().map(|b| b.name).collect();
            console.err(&format!(
                "error: there is no built-in game `{name}`; the built-in games are: {}\n",
                known.join(", ")
            ));
            exit_code::PLAN_ERROR
        }
        Some(Ok(Ending::Closed | Ending::EndOfInput)) => exit_code::SUCCESS,
        Some(Ok(Ending::Crash(message))) => {
            console.err(&format!(
                "thread 'main' panicked at src/games/{name}.rs:\n{message}\n\
                 note: the built-in game `{name}` crashed on purpose (a planted bug)\n"
            ));
            CRASHED
        }
        // The driver went away (a closed pipe): nobody is left to tell.
        Some(Err(_)) => exit_code::FAILED,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<OsString> {
        list.iter().map(OsString::from).collect()
    }

    #[test]
    fn game_exec_args_read_the_form_gameplan_writes_and_nothing_else() {
        let written = args(&[
            "--as", "4096", "--nofile", "64", "--", "/bin/gp", "game", "maze",
        ]);
        let (limits, wrapped) = game_exec_args(&written).expect("gameplan's own form");
        assert_eq!(limits.address_space, Some(4096));
        assert_eq!(limits.open_files, Some(64));
        assert_eq!(limits.cpu_seconds, None);
        assert_eq!(wrapped, &written[5..]);
        for other in [
            &["--as=4096", "--", "x"][..],
            &["--as", "lots", "--", "x"],
            &["--as", "1", "--as", "2", "--", "x"],
            &["--stack", "1", "--", "x"],
            &["--as", "1"],
        ] {
            assert!(game_exec_args(&args(other)).is_none(), "{other:?}");
        }
    }

    #[test]
    fn only_a_known_builtin_is_served_before_the_cli() {
        // Each of these must reach clap: its errors and help are the user's.
        for other in [
            &["gameplan", "game", "chess"][..],
            &["gameplan", "game", "--help"],
            &["gameplan", "game", "maze", "extra"],
            &["gameplan", "--no-color", "game", "maze"],
            &[
                "gameplan",
                "__game-exec",
                "--",
                "/not/gameplan",
                "game",
                "maze",
            ],
            &["gameplan"],
        ] {
            assert_eq!(serve_builtin_game(&args(other)), None, "{other:?}");
        }
    }
}

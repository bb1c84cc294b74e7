//! `gameplan game NAME`: a built-in bridge game on stdin/stdout.

use super::Context;
use crate::exit_code;
use crate::games::{self, Ending};

/// The exit code of a game that crashed (a planted bug), as a Rust panic's.
pub const CRASHED: u8 = 101;

pub fn run(cx: &Context, name: &str) -> u8 {
    // The protocol is the game's stdout; no human reads it, so it does not
    // go through the console. Locked once: one flush per reply.
    let stdin = std::io::stdin().lock();
    let stdout = std::io::stdout().lock();
    match games::play(name, stdin, stdout) {
        None => {
            let known: Vec<&str> = games::BUILTINS.iter().map(|b| b.name).collect();
            cx.console.err(&format!(
                "error: there is no built-in game `{name}`; the built-in games are: {}\n",
                known.join(", ")
            ));
            exit_code::PLAN_ERROR
        }
        Some(Ok(Ending::Closed | Ending::EndOfInput)) => exit_code::SUCCESS,
        Some(Ok(Ending::Crash(message))) => {
            cx.console.err(&format!(
                "thread 'main' panicked at src/games/{name}.rs:\n{message}\n\
                 note: the built-in game `{name}` crashed on purpose (a planted bug)\n"
            ));
            CRASHED
        }
        // The driver went away (a closed pipe): nobody is left to tell.
        Some(Err(_)) => exit_code::FAILED,
    }
}

//! `gameplan game NAME`: a built-in bridge game on stdin/stdout.
//!
//! A simulation starts a game process per crash (thousands per run), and
//! each start of this binary used to build the whole clap tree, install the
//! TLS provider and copy the environment before the game read a line. So
//! [`start_game_before_cli`] recognizes the argvs that start a game and
//! starts it before any of that: `gameplan game NAME`, and the wrapper
//! gameplan itself spawns to set rlimits (`gameplan __game-exec [--as N]
//! [--cpu N] [--nofile N] [--nproc N] [--cgroup DIR] -- PROGRAM ARGS`:
//! it joins the memory cgroup DIR first when given one), which serves a
//! built-in game in process when PROGRAM is this executable and execs any
//! other program (a user's game) at once. Any other argv, a misspelled game
//! included, goes through clap as before, so errors and `--help` are
//! unchanged.

use std::ffi::OsString;
use std::path::Path;

use crate::exit_code::{self, Done, Failure};
use crate::games::{self, Ending};
use crate::play::stdio::{ResourceLimits, join_cgroup, set_limits};
use crate::report::Console;

/// The exit code of a game that crashed (a planted bug), as a Rust panic's.
pub const CRASHED: u8 = 101;
/// The exit code of a game that could not be started (its limits not set,
/// its program not executed), as a shell's for a command it cannot run.
pub const EXEC_FAILED: u8 = 127;

/// `gameplan game NAME` through clap (the slow path, same behaviour).
pub fn run(name: &str) -> Done {
    play(name)
}

/// What a command line that starts a game asks for, when it can be done
/// before the CLI is parsed.
#[derive(Debug, PartialEq)]
enum Start<'a> {
    /// Serve built-in game `name` in this process (after setting `limits`).
    Builtin {
        limits: Option<Wrapper<'a>>,
        name: &'a str,
    },
    /// Set `limits`, then become `argv` (another program: a user's game).
    Exec {
        limits: Wrapper<'a>,
        argv: Vec<String>,
    },
}

/// What `__game-exec` does to itself before the game starts.
#[derive(Debug, PartialEq)]
struct Wrapper<'a> {
    rlimits: ResourceLimits,
    /// The memory cgroup to join.
    cgroup: Option<&'a Path>,
}

/// Reads `args` (program name first): `gameplan game NAME` with a known
/// built-in, or `gameplan __game-exec [LIMITS] -- PROGRAM ARGS` in the form
/// gameplan writes it. `None` for any other command line (a misspelled game
/// included), which clap parses as usual, errors and `--help` unchanged.
fn start_of<'a>(args: &'a [OsString], this: &Path) -> Option<Start<'a>> {
    let (limits, game) = match args.get(1)?.to_str()? {
        "game" => (None, &args[1..]),
        "__game-exec" => {
            let (limits, wrapped) = game_exec_args(&args[2..])?;
            // This same executable is served in process; anything else is
            // exec'd now: through clap, the wrapper cost a millisecond more
            // per game start than the game it starts.
            if Path::new(wrapped.first()?) != this {
                let program_and_args = wrapped
                    .iter()
                    .map(|a| a.to_str().map(str::to_owned))
                    .collect::<Option<Vec<_>>>()?;
                return Some(Start::Exec {
                    limits,
                    argv: program_and_args,
                });
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
    Some(Start::Builtin { limits, name })
}

/// Starts the game `args` asks for before the CLI is built (see
/// [`start_of`]): serves a built-in game and returns its exit code, or
/// becomes the wrapped program (returning 127 only when it cannot).
/// `None` for any other command line, which the caller parses as usual.
pub fn start_game_before_cli(args: &[OsString]) -> Option<u8> {
    let needs_this = args.get(1).is_some_and(|a| a == "__game-exec");
    let this = if needs_this {
        std::env::current_exe().ok()?
    } else {
        std::path::PathBuf::new()
    };
    let console = Console::plain();
    let set = |limits: Wrapper| {
        // Not joining is no reason not to play: the driver polls instead.
        if let Some(dir) = limits.cgroup
            && let Err(why) = join_cgroup(dir)
        {
            console.err(&format!("gameplan: {why}\n"));
        }
        match set_limits(limits.rlimits) {
            Ok(()) => true,
            Err(why) => {
                console.err(&format!("gameplan: {why}\n"));
                false
            }
        }
    };
    match start_of(args, &this)? {
        Start::Builtin { limits, name } => {
            if let Some(limits) = limits
                && !set(limits)
            {
                return Some(EXEC_FAILED);
            }
            Some(exit_code::end(&play(name), |message| console.err(message)))
        }
        Start::Exec { limits, argv } => {
            if !set(limits) {
                return Some(EXEC_FAILED);
            }
            let why = crate::play::stdio::exec(&argv);
            console.err(&format!("gameplan: {why}\n"));
            Some(EXEC_FAILED)
        }
    }
}

/// The limits and the argv after `--` of `__game-exec`, in the form
/// gameplan writes them (`--as N` etc., each at most once, in any order);
/// `None` for any other form.
fn game_exec_args(args: &[OsString]) -> Option<(Wrapper<'_>, &[OsString])> {
    let mut limits = ResourceLimits::NONE;
    let mut cgroup = None;
    let mut rest = args;
    loop {
        let (flag, after) = rest.split_first()?;
        let flag = flag.to_str()?;
        if flag == "--" {
            let wrapper = Wrapper {
                rlimits: limits,
                cgroup,
            };
            return Some((wrapper, after));
        }
        let (value, after) = after.split_first()?;
        if flag == "--cgroup" {
            if cgroup.replace(Path::new(value)).is_some() {
                return None;
            }
            rest = after;
            continue;
        }
        let value: u64 = value.to_str()?.parse().ok()?;
        let slot = match flag {
            "--as" => &mut limits.address_space,
            "--cpu" => &mut limits.cpu_seconds,
            "--nofile" => &mut limits.open_files,
            "--nproc" => &mut limits.processes,
            _ => return None,
        };
        if slot.replace(value).is_some() {
            return None;
        }
        rest = after;
    }
}

fn play(name: &str) -> Done {
    // The protocol is the game's stdout; no human reads it, so it does not
    // go through the console. Locked once: one flush per reply.
    let stdin = std::io::stdin().lock();
    let stdout = std::io::stdout().lock();
    match games::play(name, stdin, stdout) {
        None => {
            let known: Vec<&str> = games::BUILTINS.iter().map(|b| b.name).collect();
            Err(Failure::plan(format!(
                "error: there is no built-in game `{name}`; the built-in games are: {}\n",
                known.join(", ")
            )))
        }
        Some(Ok(Ending::Closed | Ending::EndOfInput)) => Ok(()),
        // A game's own code, not the contract's: the driver reads it as a crash.
        Some(Ok(Ending::Crash(message))) => Err(Failure::with_code(
            CRASHED,
            format!(
                "thread 'main' panicked at src/games/{name}.rs:\n{message}\n\
                 note: the built-in game `{name}` crashed on purpose (a planted bug)\n"
            ),
        )),
        // The driver went away (a closed pipe): nobody is left to tell.
        Some(Err(_)) => Err(Failure::failed(String::new())),
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
        assert_eq!(limits.rlimits.address_space, Some(4096));
        assert_eq!(limits.rlimits.open_files, Some(64));
        assert_eq!(limits.rlimits.cpu_seconds, None);
        assert_eq!(limits.cgroup, None);
        assert_eq!(wrapped, &written[5..]);
        let joining = args(&["--cgroup", "/sys/fs/cgroup/g-1", "--cpu", "9", "--", "x"]);
        let (limits, _) = game_exec_args(&joining).expect("with a cgroup");
        assert_eq!(limits.cgroup, Some(Path::new("/sys/fs/cgroup/g-1")));
        assert_eq!(limits.rlimits.cpu_seconds, Some(9));
        for other in [
            &["--as=4096", "--", "x"][..],
            &["--as", "lots", "--", "x"],
            &["--as", "1", "--as", "2", "--", "x"],
            &["--stack", "1", "--", "x"],
            &["--cgroup", "a", "--cgroup", "b", "--", "x"],
            &["--as", "1"],
        ] {
            assert!(game_exec_args(&args(other)).is_none(), "{other:?}");
        }
    }

    #[test]
    fn only_a_known_builtin_or_gameplans_own_wrapper_starts_before_the_cli() {
        let this = Path::new("/bin/gp");
        assert_eq!(
            start_of(&args(&["gp", "game", "maze"]), this),
            Some(Start::Builtin {
                limits: None,
                name: "maze"
            })
        );
        assert_eq!(
            start_of(
                &args(&[
                    "gp",
                    "__game-exec",
                    "--nofile",
                    "64",
                    "--",
                    "/bin/gp",
                    "game",
                    "maze"
                ]),
                this
            ),
            Some(Start::Builtin {
                limits: Some(Wrapper {
                    rlimits: ResourceLimits {
                        open_files: Some(64),
                        ..ResourceLimits::NONE
                    },
                    cgroup: None
                }),
                name: "maze"
            })
        );
        // A user's game is exec'd by the wrapper itself, its argv as given.
        assert_eq!(
            start_of(
                &args(&[
                    "gp",
                    "__game-exec",
                    "--as",
                    "4096",
                    "--",
                    "python3",
                    "g.py",
                    "--x"
                ]),
                this
            ),
            Some(Start::Exec {
                limits: Wrapper {
                    rlimits: ResourceLimits {
                        address_space: Some(4096),
                        ..ResourceLimits::NONE
                    },
                    cgroup: None
                },
                argv: vec!["python3".into(), "g.py".into(), "--x".into()]
            })
        );
        // Each of these must reach clap: its errors and help are the user's.
        for other in [
            &["gp", "game", "chess"][..],
            &["gp", "game", "--help"],
            &["gp", "game", "maze", "extra"],
            &["gp", "--no-color", "game", "maze"],
            &["gp", "__game-exec", "--", "/bin/gp", "game", "chess"],
            &["gp", "__game-exec", "--as=1", "--", "python3"],
            &["gp", "__game-exec", "--"],
            &["gp"],
        ] {
            assert_eq!(start_of(&args(other), this), None, "{other:?}");
        }
    }
}

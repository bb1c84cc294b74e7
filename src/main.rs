//! The `gameplan` binary: hands its arguments to the library and exits with its code.

fn main() -> std::process::ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    // A game is started once per game process, thousands of times in a
    // simulation: a built-in game is served, and the rlimit wrapper execs a
    // user's game, before the CLI tree and the TLS provider are built
    // (neither is needed to play).
    if let Some(code) = gameplan::cli::start_game_before_cli(&args) {
        return code.into();
    }
    // reqwest is built without a TLS crypto provider of its own: ring is
    // installed once, before any HTTP client exists (reqwest panics without one).
    let _ = rustls::crypto::ring::default_provider().install_default();
    gameplan::run(args)
}

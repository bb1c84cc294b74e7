//! The `gameplan` binary: hands its arguments to the library and exits with its code.

fn main() -> std::process::ExitCode {
    gameplan::run(std::env::args_os())
}

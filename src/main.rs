//! The `gameplan` binary: hands its arguments to the library and exits with its code.

fn main() -> std::process::ExitCode {
    // reqwest is built without a TLS crypto provider of its own: ring is
    // installed once, before any HTTP client exists (reqwest panics without one).
    let _ = rustls::crypto::ring::default_provider().install_default();
    gameplan::run(std::env::args_os())
}

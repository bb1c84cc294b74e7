//! Links the release `gameplan` binary as a position-dependent executable
//! on x86-64 Linux.
//!
//! Why: the binary is started once per game process (`gameplan game NAME`,
//! thousands of times in a simulation). As a PIE it carries ~21,000
//! relative relocations that the dynamic loader applies at every start,
//! copying about 80 pages of relocated data; linked non-PIE it has none (a
//! start of the built-in maze took 190 page faults, now 110). The price is
//! that the executable itself loads at a fixed address (its libraries,
//! stack and heap stay randomized). Debug builds (tests) keep PIE: the code
//! is the same, only the link differs.

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    if var("PROFILE") == "release"
        && var("CARGO_CFG_TARGET_OS") == "linux"
        && var("CARGO_CFG_TARGET_ARCH") == "x86_64"
        && var("CARGO_CFG_TARGET_ENV") == "gnu"
    {
        println!("cargo::rustc-link-arg-bins=-no-pie");
    }
}

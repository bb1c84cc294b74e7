//! The processes gameplan starts and stops: games, chromedriver, lens
//! programs, command steps (through the launcher) and jobs.
//!
//! Owns starting a process as the leader of a process group of its own
//! ([`SpawnInGroup`]), signalling and stopping that whole group
//! ([`Group`]), keeping the last bytes it writes ([`Tail`]), finding a
//! program on a `PATH` ([`on_path`]), and reading `/proc` for what still
//! runs ([`carrying`], [`running_with`]), and holding a process tree's
//! resident memory under a limit ([`MemoryWatch`]). It decides nothing about what a
//! process's end means, nor how long anything may take: each caller keeps
//! its own grace periods and messages.
//!
//! # Design
//!
//! - Every process gameplan starts leads a new process group, so one signal
//!   to the group reaches every process it forked, however deep. A process
//!   that left the group (`setsid`) is found afterwards by a marker in its
//!   environment or arguments ([`carrying`], [`running_with`]) and killed
//!   alone ([`Found::kill`]).
//! - A group is never signalled by an id of 0 or 1: `killpg(0)` means
//!   gameplan's own group.
//! - Liveness is `/proc`'s: a zombie is not alive (where nobody reaps
//!   orphans, zombies of a group's children stay for good).

mod group;
mod memory;
mod path;
mod table;
mod tail;

pub use group::{Group, SpawnInGroup};
pub use memory::{Exceeded, MemoryCgroup, MemoryWatch};
pub use path::{NotOnPath, is_executable, on_path};
pub use table::{Found, carrying, command_line, has_entries, running_with};
pub use tail::Tail;

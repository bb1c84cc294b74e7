//! How a game's limits are put in words: the limits in force, and the
//! limit that stopped a game, each with the `game.limits` key that raises
//! it (docs/bridge.md › Limits).
//!
//! The stdio driver words a game it stopped (for memory, or the kernel
//! for CPU time) through [`stopped`]; a cell that did not play recognizes
//! that wording with [`stopped_by`] and names [`in_force`] when the game
//! died before its first observation for no reason it can tell.

use super::ResourceLimits;

/// `4 GiB`, `256 MiB`, `1.5 GiB`: a size as a plan writes it.
pub fn size_text(bytes: u64) -> String {
    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;
    #[expect(clippy::cast_precision_loss, reason = "a size to show")]
    let (value, unit) = if bytes >= GIB {
        (bytes as f64 / GIB as f64, "GiB")
    } else {
        (bytes as f64 / MIB as f64, "MiB")
    };
    if value.fract() == 0.0 {
        format!("{value:.0} {unit}")
    } else {
        format!("{value:.1} {unit}")
    }
}

/// A limit gameplan (or the kernel, by gameplan's rlimit) stopped a game at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// Resident memory of the game's process tree, in bytes.
    Memory(u64),
    /// CPU seconds of one of its processes.
    Cpu(u64),
}

impl Stopped {
    fn key(self) -> &'static str {
        match self {
            Stopped::Memory(_) => "memory",
            Stopped::Cpu(_) => "cpu_seconds",
        }
    }

    /// `512 MiB resident`, `600 s of CPU`.
    fn amount(self) -> String {
        match self {
            Stopped::Memory(bytes) => format!("{} resident", size_text(bytes)),
            Stopped::Cpu(secs) => format!("{secs} s of CPU"),
        }
    }

    /// What to write instead: four times as much.
    pub fn advice(self) -> String {
        let raised = match self {
            Stopped::Memory(bytes) => format!("\"{}\"", size_text(bytes.saturating_mul(4))),
            Stopped::Cpu(secs) => secs.saturating_mul(4).to_string(),
        };
        format!(
            "raise it (`limits = {{ {} = {raised} }}`) or lift it (\"none\")",
            self.key()
        )
    }

    /// What happened, without the advice: `used more than
    /// `game.limits.memory` (512 MiB resident) and was stopped`.
    pub fn what(self) -> String {
        format!(
            "used more than `game.limits.{}` ({}) and was stopped",
            self.key(),
            self.amount()
        )
    }
}

/// How the driver words a game it stopped at a limit, as the status of
/// its exit (a finding's title: "The game {status} on `act`"): what
/// happened and the advice.
pub fn stopped(limit: Stopped) -> String {
    format!(
        "used more than `game.limits.{}` ({}; {}) and was stopped",
        limit.key(),
        limit.amount(),
        limit.advice()
    )
}

/// The limit a status written by [`stopped`] names, read back with the
/// limits the game ran under.
pub fn stopped_by(status: &str, limits: ResourceLimits) -> Option<Stopped> {
    let key = status.strip_prefix("used more than `game.limits.")?;
    if key.starts_with("memory`") {
        limits.memory.map(Stopped::Memory)
    } else if key.starts_with("cpu_seconds`") {
        limits.cpu_seconds.map(Stopped::Cpu)
    } else {
        None
    }
}

/// The limits a game ran under, as a plan would name them: `memory 4 GiB
/// resident, cpu 600 s, open files 1024`; `None` when it ran under none.
pub fn in_force(limits: ResourceLimits) -> Option<String> {
    let parts: Vec<String> = [
        limits
            .memory
            .map(|b| format!("memory {} resident", size_text(b))),
        limits
            .address_space
            .map(|b| format!("address space {}", size_text(b))),
        limits.cpu_seconds.map(|s| format!("cpu {s} s")),
        limits.processes.map(|n| format!("processes {n}")),
        limits.open_files.map(|n| format!("open files {n}")),
    ]
    .into_iter()
    .flatten()
    .collect();
    (!parts.is_empty()).then(|| parts.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_a_plan_writes_them() {
        assert_eq!(size_text(4 << 30), "4 GiB");
        assert_eq!(size_text(256 << 20), "256 MiB");
        assert_eq!(size_text(3 << 29), "1.5 GiB");
    }

    #[test]
    fn a_stop_names_the_key_the_amount_and_the_way_out_and_reads_back() {
        let limits = ResourceLimits {
            memory: Some(512 << 20),
            ..ResourceLimits::NONE
        };
        let status = stopped(Stopped::Memory(512 << 20));
        assert_eq!(
            status,
            "used more than `game.limits.memory` (512 MiB resident; raise it (`limits = { memory = \"2 GiB\" }`) or lift it (\"none\")) and was stopped"
        );
        assert_eq!(
            stopped_by(&status, limits),
            Some(Stopped::Memory(512 << 20))
        );
        assert_eq!(stopped_by("exited with code 1", limits), None);
        assert_eq!(
            Stopped::Cpu(2).what(),
            "used more than `game.limits.cpu_seconds` (2 s of CPU) and was stopped"
        );
    }

    #[test]
    fn the_defaults_in_force_are_named_and_none_is_nothing() {
        assert_eq!(
            in_force(ResourceLimits::default()).as_deref(),
            Some("memory 4 GiB resident, cpu 600 s, open files 1024")
        );
        assert_eq!(in_force(ResourceLimits::NONE), None);
    }
}

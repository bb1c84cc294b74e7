//! What `/proc` says about the processes gameplan started: whether a
//! process group still has a live member, and which processes carry a
//! marker in their environment (one that left its group, or one whose
//! group was never written down).
//!
//! Command steps (the launcher's leftovers), jobs and game processes all
//! judge liveness this way. Only processes of the same user can be read,
//! which is all gameplan starts.

/// A live process found in `/proc`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Found {
    pub pid: i32,
    /// Its process group.
    pub group: i32,
}

impl Found {
    /// SIGKILLs this process (one that left its group, found by a marker)
    /// and returns its command line, read first: a dead process has none.
    pub fn kill(self) -> String {
        let command = command_line(self.pid);
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.pid),
            nix::sys::signal::Signal::SIGKILL,
        );
        command
    }
}

/// Whether process group `pgid` has a live process. A zombie holds nothing
/// (where nobody reaps orphans, as under some container inits, zombies of a
/// step's children stay for good): only processes that still run count.
pub(super) fn group_alive(pgid: i32) -> bool {
    use nix::sys::signal::killpg;
    if pgid <= 1 || killpg(nix::unistd::Pid::from_raw(pgid), None).is_err() {
        return false;
    }
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return true;
    };
    entries
        .flatten()
        .any(|entry| stat(&entry.path()).is_some_and(|(state, group)| group == pgid && live(state)))
}

/// Every live process whose environment block (`NAME=value` entries, each
/// ended by a NUL) satisfies `matches`.
pub fn carrying(matches: impl Fn(&[u8]) -> bool) -> Vec<Found> {
    live_where("environ", matches)
}

/// Every live process whose command line (its arguments, each ended by a
/// NUL) satisfies `matches`: how Chromium's helpers are found, which its
/// zygote starts with a cleaned environment but the profile's path in
/// their arguments.
pub fn running_with(matches: impl Fn(&[u8]) -> bool) -> Vec<Found> {
    live_where("cmdline", matches)
}

/// Every live process whose `/proc/<pid>/<file>` satisfies `matches`.
fn live_where(file: &str, matches: impl Fn(&[u8]) -> bool) -> Vec<Found> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_str()?.parse::<i32>().ok()?;
            let bytes = std::fs::read(entry.path().join(file)).ok()?;
            if !matches(&bytes) {
                return None;
            }
            let (state, group) = stat(&entry.path())?;
            live(state).then_some(Found { pid, group })
        })
        .collect()
}

/// Whether an environment block holds every one of `entries` (`NAME=value`)
/// whole: `A=1` does not match `A=10`. No entries match nothing, never
/// every process.
pub fn has_entries(environ: &[u8], entries: &[String]) -> bool {
    !entries.is_empty()
        && entries.iter().all(|wanted| {
            environ
                .split(|&b| b == 0)
                .any(|entry| entry == wanted.as_bytes())
        })
}

/// A process's command line, its arguments joined by spaces (empty once it
/// is gone).
pub fn command_line(pid: i32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|c| {
            String::from_utf8_lossy(&c)
                .split('\0')
                .filter(|s| !s.is_empty())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}

fn live(state: char) -> bool {
    state != 'Z' && state != 'X'
}

/// A process's state and process group, from `/proc/PID/stat`.
fn stat(dir: &std::path::Path) -> Option<(char, i32)> {
    let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
    // `pid (comm) state ppid pgrp …`; comm may hold spaces and parentheses.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let group = fields.nth(1)?.parse().ok()?;
    Some((state, group))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_matches_only_whole() {
        let block = b"A=10\0B=x y\0";
        assert!(has_entries(block, &["A=10".into(), "B=x y".into()]));
        assert!(!has_entries(block, &["A=1".into()]));
        assert!(!has_entries(block, &["=10".into()]));
        assert!(!has_entries(block, &["A=10".into(), "C=1".into()]));
        assert!(!has_entries(block, &[]), "no marks must not match everyone");
    }

    #[test]
    fn a_child_is_found_by_its_environment_and_its_group_and_killed_by_name() {
        use crate::process::SpawnInGroup as _;
        let marker = format!("GAMEPLAN_TEST_MARK={}", std::process::id());
        let (mut child, _) = std::process::Command::new("sleep")
            .arg("30")
            .env("GAMEPLAN_TEST_MARK", std::process::id().to_string())
            .spawn_in_group()
            .expect("spawn sleep");
        let pid = i32::try_from(child.id()).expect("pid");
        let find = || carrying(|env| has_entries(env, std::slice::from_ref(&marker)));
        // Polled: under load the child may not have been scheduled yet.
        let began = std::time::Instant::now();
        let mut found = find();
        while found.is_empty() && began.elapsed() < std::time::Duration::from_secs(2) {
            std::thread::sleep(std::time::Duration::from_millis(10));
            found = find();
        }
        assert_eq!(
            found,
            vec![Found { pid, group: pid }],
            "{}",
            command_line(pid)
        );
        assert!(group_alive(pid));
        assert!(command_line(pid).starts_with("sleep 30"));
        assert_eq!(found[0].kill(), "sleep 30", "named before it died");
        child.wait().expect("reap");
        assert!(!group_alive(pid), "a reaped group is gone");
        assert!(carrying(|env| has_entries(env, std::slice::from_ref(&marker))).is_empty());
    }
}

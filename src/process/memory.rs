//! Resident memory of a process tree, held under a limit: what a game
//! uses, not what it reserves (docs/bridge.md › Limits).
//!
//! Owns the two ways of doing it and which one a game gets. Where gameplan
//! can make a cgroup v2 group with the memory controller, each game gets
//! one ([`MemoryCgroup`]: `memory.max` at the limit, the whole group
//! killed together on an out-of-memory kill, no swap), the game's wrapper
//! joins it before it execs the game, and the kernel enforces the limit;
//! `memory.events` says afterwards whether it did. Anywhere else one
//! thread for the whole gameplan process polls every watched game every
//! [`TICK`], summing the resident set of every process of the game's
//! process group and of the leader's descendants (one that left the group
//! still counts), and kills the game's processes once the sum is over.
//! Either way [`MemoryWatch::exceeded`] tells the driver that the game was
//! stopped for memory, so its failure can say so. What that failure says
//! is the caller's.
//!
//! # Design
//!
//! - One poller, not one per game, asleep while no game is watched. A tick
//!   reads the `stat` (state, parent, group and resident pages in one
//!   file) and the `children` of each process a game had at the last tick;
//!   every [`FULL_SCAN_EVERY`] ticks it reads every process's `stat`
//!   instead, to find what a game's other threads forked or an orphan left
//!   in its group. Reading all of `/proc` every tick cost a simulation of
//!   the maze a tenth of its games per second on a busy 2-core machine.
//!   The request path of a game never touches any of it.
//! - The verdict is written before the kill: a driver that sees the game's
//!   stdout close reads it afterwards and finds it.
//! - A cgroup is made where the memory controller is already handed down
//!   (the `memory` entry in `cgroup.subtree_control` of gameplan's own
//!   group, or of its parent): gameplan never moves itself nor enables a
//!   controller. A game whose wrapper could not join its group (its
//!   `cgroup.procs` still empty at the first tick) is polled instead, and
//!   so is every later game.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Duration;

use super::Group;

/// How often the poller measures the games it watches.
pub const TICK: Duration = Duration::from_millis(100);

/// Every this many ticks the poller reads every process of the machine
/// (finding what a game's other threads forked, or an orphan left in its
/// group); in between only each game's known processes and their children.
const FULL_SCAN_EVERY: u32 = 10;

/// Where cgroup v2 is mounted when it is the system's hierarchy.
const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// A game stopped for using more than its limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exceeded {
    /// The limit, in bytes.
    pub limit: u64,
    /// What it was seen using when stopped, in bytes (at least `limit`;
    /// under a cgroup, its peak when the kernel says, else the limit).
    pub used: u64,
}

/// A cgroup made for one game, removed when dropped.
#[derive(Debug)]
pub struct MemoryCgroup {
    dir: PathBuf,
}

impl MemoryCgroup {
    /// A new group with `memory.max` at `limit`, where gameplan can make
    /// one (see the module doc); `None` anywhere else.
    pub fn make(limit: u64) -> Option<MemoryCgroup> {
        static PARENT: OnceLock<Option<PathBuf>> = OnceLock::new();
        static NEXT: AtomicU64 = AtomicU64::new(0);
        if CGROUPS_FAILED.load(Ordering::Relaxed) {
            return None;
        }
        let parent = PARENT.get_or_init(delegating_parent).as_ref()?;
        let dir = parent.join(format!(
            "gameplan-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir(&dir).ok()?;
        let group = MemoryCgroup { dir };
        // Without `memory.max` it would not limit anything: give it up.
        std::fs::write(group.dir.join("memory.max"), limit.to_string()).ok()?;
        // Best effort: older kernels lack one or the other.
        let _ = std::fs::write(group.dir.join("memory.oom.group"), "1");
        let _ = std::fs::write(group.dir.join("memory.swap.max"), "0");
        Some(group)
    }

    /// The group's directory, for the wrapper to join (`cgroup.procs`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether the kernel killed a process of the group for memory.
    fn oom_killed(&self) -> bool {
        std::fs::read_to_string(self.dir.join("memory.events")).is_ok_and(|events| {
            events.lines().any(|line| {
                line.strip_prefix("oom_kill ")
                    .is_some_and(|n| n.trim().parse::<u64>().is_ok_and(|n| n > 0))
            })
        })
    }

    fn peak(&self) -> Option<u64> {
        std::fs::read_to_string(self.dir.join("memory.peak"))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// Whether a process joined it.
    fn joined(&self) -> bool {
        std::fs::read_to_string(self.dir.join("cgroup.procs"))
            .is_ok_and(|procs| !procs.trim().is_empty())
    }
}

impl Drop for MemoryCgroup {
    /// A group with a process left in it cannot be removed: kill what is
    /// left (`cgroup.kill`, Linux 5.14), then try a few times.
    fn drop(&mut self) {
        for attempt in 0..20 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            if attempt == 0 {
                let _ = std::fs::write(self.dir.join("cgroup.kill"), "1");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// The first group, of gameplan's own and its parent, that hands the
/// memory controller down to groups gameplan may make in it.
fn delegating_parent() -> Option<PathBuf> {
    let root = Path::new(CGROUP_ROOT);
    // Only the root of a cgroup v2 mount has this file.
    if !root.join("cgroup.controllers").is_file() {
        return None;
    }
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let own = root.join(own_cgroup(&text)?.trim_start_matches('/'));
    [Some(own.as_path()), own.parent()]
        .into_iter()
        .flatten()
        .filter(|dir| dir.starts_with(root))
        .find(|dir| hands_down_memory(dir))
        .map(Path::to_path_buf)
}

/// The cgroup v2 path in a `/proc/PID/cgroup` text (its `0::PATH` line).
fn own_cgroup(text: &str) -> Option<&str> {
    text.lines().find_map(|line| line.strip_prefix("0::"))
}

fn hands_down_memory(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("cgroup.subtree_control"))
        .is_ok_and(|control| control.split_whitespace().any(|c| c == "memory"))
        && nix::unistd::access(dir, nix::unistd::AccessFlags::W_OK).is_ok()
}

/// Set once a game's wrapper could not join its cgroup: later games are
/// polled without trying.
static CGROUPS_FAILED: AtomicBool = AtomicBool::new(false);

/// Watches one game's memory until dropped.
#[derive(Debug)]
pub struct MemoryWatch {
    watched: Arc<Watched>,
}

#[derive(Debug)]
struct Watched {
    group: Group,
    limit: u64,
    /// What the game used when the poller stopped it; 0 while it was not.
    stopped_at: AtomicU64,
    /// The game's cgroup, while it holds one (the poller lets it go when
    /// the game never joined it).
    cgroup: Mutex<Option<MemoryCgroup>>,
    /// Whether the poller sums its processes (no cgroup holds it).
    polled: AtomicBool,
    /// Whether its cgroup was seen holding a process (checked once).
    joined: AtomicBool,
    /// Its processes at the last tick (the poller's alone).
    members: Mutex<Vec<i32>>,
}

impl MemoryWatch {
    /// Watches the game whose process group is `group` under `limit`
    /// bytes: through `cgroup` when it has one, else polled.
    pub fn start(group: Group, limit: u64, cgroup: Option<MemoryCgroup>) -> MemoryWatch {
        let polled = cgroup.is_none();
        let watched = Arc::new(Watched {
            group,
            limit,
            stopped_at: AtomicU64::new(0),
            cgroup: Mutex::new(cgroup),
            polled: AtomicBool::new(polled),
            joined: AtomicBool::new(polled),
            members: Mutex::new(vec![group.id()]),
        });
        poller().watch(Arc::clone(&watched));
        MemoryWatch { watched }
    }

    /// Whether the game was stopped for memory, and what it used.
    pub fn exceeded(&self) -> Option<Exceeded> {
        let limit = self.watched.limit;
        let used = self.watched.stopped_at.load(Ordering::Acquire);
        if used > 0 {
            return Some(Exceeded { limit, used });
        }
        let cgroup = self.watched.cgroup.lock().ok()?;
        let cgroup = cgroup.as_ref()?;
        cgroup.oom_killed().then(|| Exceeded {
            limit,
            used: cgroup.peak().unwrap_or(limit).max(limit),
        })
    }
}

impl Drop for MemoryWatch {
    fn drop(&mut self) {
        poller().unwatch(&self.watched);
    }
}

/// The one thread that measures every polled game.
struct Poller {
    games: Mutex<Vec<Arc<Watched>>>,
    wake: Condvar,
}

fn poller() -> &'static Poller {
    static POLLER: OnceLock<&'static Poller> = OnceLock::new();
    POLLER.get_or_init(|| {
        let poller: &'static Poller = Box::leak(Box::new(Poller {
            games: Mutex::new(Vec::new()),
            wake: Condvar::new(),
        }));
        // Without the thread no game is measured; a machine that cannot
        // start one more thread cannot start a game either.
        let _ = std::thread::Builder::new()
            .name("game-memory".into())
            .spawn(move || poller.run());
        poller
    })
}

impl Poller {
    fn watch(&self, watched: Arc<Watched>) {
        if let Ok(mut games) = self.games.lock() {
            games.push(watched);
            self.wake.notify_one();
        }
    }

    fn unwatch(&self, watched: &Arc<Watched>) {
        if let Ok(mut games) = self.games.lock()
            && let Some(at) = games.iter().position(|g| Arc::ptr_eq(g, watched))
        {
            games.swap_remove(at);
        }
    }

    fn run(&self) {
        let mut table = ProcessTable::default();
        let mut tick: u32 = 0;
        loop {
            let games: Vec<Arc<Watched>> = {
                let Ok(mut games) = self.games.lock() else {
                    return;
                };
                while games.is_empty() {
                    games = match self.wake.wait(games) {
                        Ok(games) => games,
                        Err(_) => return,
                    };
                }
                games.clone()
            };
            std::thread::sleep(TICK);
            for game in &games {
                game.check_joined();
            }
            let polled: Vec<&Arc<Watched>> = games
                .iter()
                .filter(|g| g.polled.load(Ordering::Relaxed))
                .collect();
            if polled.is_empty() {
                continue;
            }
            tick += 1;
            let whole = tick.is_multiple_of(FULL_SCAN_EVERY);
            if whole {
                table.read();
            }
            for game in polled {
                let members = if whole {
                    table.tree_of(game.group.id())
                } else {
                    table.known_tree(game)
                };
                if let Ok(mut known) = game.members.lock() {
                    known.clear();
                    known.extend(members.iter().map(|m| m.pid));
                }
                let used: u64 = members.iter().map(|m| m.resident).sum();
                if used > game.limit {
                    game.stopped_at.store(used, Ordering::Release);
                    game.group.kill();
                    for member in members {
                        let _ = nix::sys::signal::kill(
                            nix::unistd::Pid::from_raw(member.pid),
                            nix::sys::signal::Signal::SIGKILL,
                        );
                    }
                }
            }
        }
    }
}

impl Watched {
    /// A game whose wrapper did not join its cgroup is polled from now on,
    /// and so is every game after it.
    fn check_joined(&self) {
        if self.joined.load(Ordering::Relaxed) {
            return;
        }
        let Ok(mut cgroup) = self.cgroup.lock() else {
            return;
        };
        let Some(group) = cgroup.as_ref() else {
            return;
        };
        if group.joined() {
            self.joined.store(true, Ordering::Relaxed);
        } else if self.group.is_alive() {
            CGROUPS_FAILED.store(true, Ordering::Relaxed);
            *cgroup = None;
            self.polled.store(true, Ordering::Relaxed);
        }
    }
}

/// One process as a tick saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Member {
    pid: i32,
    parent: i32,
    group: i32,
    /// Resident bytes.
    resident: u64,
}

/// Every live process at one tick, read from `/proc/PID/stat`.
#[derive(Default)]
struct ProcessTable {
    processes: Vec<Member>,
    buffer: String,
}

impl ProcessTable {
    fn read(&mut self) {
        self.processes.clear();
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return;
        };
        let page = page_size();
        for entry in entries.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<i32>().ok())
            else {
                continue;
            };
            if !read_into(entry.path().join("stat"), &mut self.buffer) {
                continue;
            }
            if let Some(member) = parse_stat(pid, &self.buffer, page) {
                self.processes.push(member);
            }
        }
    }

    /// A game's processes found from those it had at the last tick: each
    /// one still alive, and the children of each (of its main thread:
    /// what another thread forks waits for the next full scan). Two small
    /// reads per process, where a full scan reads every process's `stat`.
    fn known_tree(&mut self, game: &Watched) -> Vec<Member> {
        let page = page_size();
        let mut queue: Vec<i32> = game
            .members
            .lock()
            .map(|known| known.clone())
            .unwrap_or_default();
        let mut found: Vec<Member> = Vec::with_capacity(queue.len());
        while let Some(pid) = queue.pop() {
            if found.iter().any(|m| m.pid == pid) {
                continue;
            }
            if !read_into(format!("/proc/{pid}/stat"), &mut self.buffer) {
                continue;
            }
            let Some(member) = parse_stat(pid, &self.buffer, page) else {
                continue;
            };
            found.push(member);
            if read_into(format!("/proc/{pid}/task/{pid}/children"), &mut self.buffer) {
                queue.extend(
                    self.buffer
                        .split_whitespace()
                        .filter_map(|c| c.parse::<i32>().ok()),
                );
            }
        }
        found
    }

    /// The processes of process group `leader` and the leader's descendants.
    fn tree_of(&self, leader: i32) -> Vec<Member> {
        let parent_of: std::collections::HashMap<i32, i32> =
            self.processes.iter().map(|p| (p.pid, p.parent)).collect();
        let descends = |mut pid: i32| {
            // Bounded: a parent chain is short, and a cycle cannot hang it.
            for _ in 0..64 {
                if pid == leader {
                    return true;
                }
                match parent_of.get(&pid) {
                    Some(&parent) if parent > 1 => pid = parent,
                    _ => return false,
                }
            }
            false
        };
        self.processes
            .iter()
            .filter(|p| p.group == leader || descends(p.pid))
            .copied()
            .collect()
    }
}

/// Reads a small file into `buffer` (reused); whether it could.
fn read_into(path: impl AsRef<Path>, buffer: &mut String) -> bool {
    buffer.clear();
    std::fs::File::open(path)
        .and_then(|mut f| f.read_to_string(buffer))
        .is_ok()
}

/// A live process's parent, group and resident bytes from its `stat` line
/// (`pid (comm) state ppid pgrp … rss …`; comm may hold spaces and
/// parentheses). A zombie holds no memory and is left out.
fn parse_stat(pid: i32, stat: &str, page: u64) -> Option<Member> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let state = fields.first()?;
    if *state == "Z" || *state == "X" {
        return None;
    }
    Some(Member {
        pid,
        parent: fields.get(1)?.parse().ok()?,
        group: fields.get(2)?.parse().ok()?,
        // Field 24 of the line, the 22nd after the command.
        resident: fields.get(21)?.parse::<u64>().ok()? * page,
    })
}

/// The kernel's page size (what `stat` counts resident memory in), from
/// the first mapping of `/proc/self/smaps`; 4 KiB if it cannot be read.
fn page_size() -> u64 {
    static PAGE: OnceLock<u64> = OnceLock::new();
    *PAGE.get_or_init(|| {
        let mut head = [0u8; 4096];
        let read = std::fs::File::open("/proc/self/smaps")
            .and_then(|mut f| f.read(&mut head))
            .unwrap_or(0);
        String::from_utf8_lossy(&head[..read])
            .lines()
            .find_map(|line| line.strip_prefix("KernelPageSize:"))
            .and_then(|kib| kib.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(4096, |kib| kib * 1024)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_gives_parent_group_and_resident_bytes() {
        let line = "4242 (a game (v2)) S 100 4242 100 0 -1 4194304 102 0 0 0 0 0 0 0 20 0 1 0 95344 3133440 388 18446744073709551615 1 2 3";
        assert_eq!(
            parse_stat(4242, line, 4096),
            Some(Member {
                pid: 4242,
                parent: 100,
                group: 4242,
                resident: 388 * 4096
            })
        );
        let zombie = "7 (x) Z 1 7 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 1 0 0 0";
        assert_eq!(parse_stat(7, zombie, 4096), None);
    }

    #[test]
    fn the_cgroup_v2_path_is_the_0_line() {
        assert_eq!(
            own_cgroup("4:memory:/x\n0::/user.slice/a.scope\n"),
            Some("/user.slice/a.scope")
        );
        assert_eq!(own_cgroup("4:memory:/x\n"), None);
    }

    #[test]
    fn the_page_size_is_the_kernels() {
        assert!(page_size().is_power_of_two() && page_size() >= 4096);
    }

    #[test]
    fn a_tree_is_the_group_and_the_leaders_descendants() {
        let member = |pid, parent, group| Member {
            pid,
            parent,
            group,
            resident: 1,
        };
        let table = ProcessTable {
            processes: vec![
                member(10, 1, 10),  // the leader
                member(11, 10, 10), // its child
                member(12, 11, 12), // a grandchild in a group of its own
                member(13, 1, 10),  // an orphan still in the group
                member(20, 1, 20),  // a stranger
                member(21, 20, 20),
            ],
            buffer: String::new(),
        };
        let pids: Vec<i32> = table.tree_of(10).iter().map(|m| m.pid).collect();
        assert_eq!(pids, vec![10, 11, 12, 13]);
    }

    #[tokio::test]
    async fn a_group_over_its_limit_is_killed_and_told() {
        use crate::process::SpawnInGroup as _;
        // 200 MB touched (bytes multiplied are written), held, under 64 MiB,
        // by a child of the game's leader: the tree counts, not the leader.
        let (mut child, group) = tokio::process::Command::new("sh")
            .args([
                "-c",
                "python3 -c \"import time\nx = b'x' * (200 << 20)\ntime.sleep(30)\"; exit 0",
            ])
            .kill_on_drop(true)
            .spawn_in_group()
            .expect("python3");
        let watch = MemoryWatch::start(group, 64 << 20, None);
        let status = tokio::time::timeout(Duration::from_secs(20), child.wait())
            .await
            .expect("killed well before it slept 30 s")
            .expect("reaped");
        assert!(!status.success());
        let exceeded = watch.exceeded().expect("stopped for memory");
        assert_eq!(exceeded.limit, 64 << 20);
        assert!(exceeded.used > 64 << 20, "{exceeded:?}");
    }

    #[tokio::test]
    async fn a_game_under_its_limit_is_left_alone() {
        use crate::process::SpawnInGroup as _;
        let (mut child, group) = tokio::process::Command::new("sleep")
            .arg("0.5")
            .kill_on_drop(true)
            .spawn_in_group()
            .expect("sleep");
        let watch = MemoryWatch::start(group, 64 << 20, None);
        assert!(child.wait().await.expect("reaped").success());
        assert_eq!(watch.exceeded(), None);
    }
}

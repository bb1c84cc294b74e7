//! A process group gameplan started: starting its leader, signalling every
//! process of it, waiting until none runs.

use std::future::Future;
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// A process group, named by its leader's process id (which is the group's
/// id).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Group(Pid);

impl Group {
    /// The group process `pid` leads.
    pub fn led_by(pid: i32) -> Group {
        Group(Pid::from_raw(pid))
    }

    /// The group's id: its leader's process id.
    pub fn id(self) -> i32 {
        self.0.as_raw()
    }

    /// Its leader, to wait for.
    pub fn leader(self) -> Pid {
        self.0
    }

    /// SIGKILLs every process of the group; whether there was a process to
    /// signal.
    pub fn kill(self) -> bool {
        self.signal(Signal::SIGKILL)
    }

    /// SIGTERMs every process of the group (each gets to clean up); whether
    /// there was a process to signal.
    pub fn terminate(self) -> bool {
        self.signal(Signal::SIGTERM)
    }

    /// Never to 0 or 1: `killpg(0)` signals gameplan's own group.
    fn signal(self, signal: Signal) -> bool {
        self.id() > 1 && killpg(self.0, signal).is_ok()
    }

    /// Whether a process of the group still runs (a zombie does not).
    pub fn is_alive(self) -> bool {
        super::table::group_alive(self.id())
    }

    /// Resolves once no process of the group runs, looking every `poll`
    /// (each look reads `/proc`). Unbounded: callers put a deadline on it.
    pub async fn emptied(self, poll: Duration) {
        while self.is_alive() {
            tokio::time::sleep(poll).await;
        }
    }

    /// SIGTERM to the whole group, then SIGKILL once `ended` resolved or
    /// `grace` passed, whichever comes first: every process of the group
    /// gets the grace to clean up, and none outlives it. What `ended`
    /// waits for (the leader, the whole group) is the caller's to say.
    pub async fn stop(self, grace: Duration, ended: impl Future) {
        self.terminate();
        let _ = tokio::time::timeout(grace, ended).await;
        self.kill();
    }
}

/// Starting a command as the leader of a new process group, so that a
/// signal to [`Group`] reaches everything it forks.
pub trait SpawnInGroup {
    type Child;

    /// Spawns the command in a group of its own: the child and its group.
    fn spawn_in_group(&mut self) -> std::io::Result<(Self::Child, Group)>;
}

impl SpawnInGroup for tokio::process::Command {
    type Child = tokio::process::Child;

    fn spawn_in_group(&mut self) -> std::io::Result<(Self::Child, Group)> {
        let child = self.process_group(0).spawn()?;
        // A child has an id until it is reaped, and a Linux pid fits an i32.
        let pid = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .ok_or_else(|| std::io::Error::other("the process has no pid"))?;
        Ok((child, Group::led_by(pid)))
    }
}

/// For a process gameplan does not wait for (a job that outlives it):
/// tokio would reap it, and its group id could then name a stranger.
impl SpawnInGroup for std::process::Command {
    type Child = std::process::Child;

    fn spawn_in_group(&mut self) -> std::io::Result<(Self::Child, Group)> {
        use std::os::unix::process::CommandExt as _;
        let child = self.process_group(0).spawn()?;
        let pid = i32::try_from(child.id()).map_err(std::io::Error::other)?;
        Ok((child, Group::led_by(pid)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `sh -c script` in a group of its own, once the group has a process
    /// besides its leader (under load the background one may start late).
    fn group_of(script: &str) -> (tokio::process::Child, Group) {
        let (child, group) = tokio::process::Command::new("sh")
            .args(["-c", script])
            .kill_on_drop(true)
            .spawn_in_group()
            .expect("spawn sh");
        for _ in 0..200 {
            let members = crate::process::carrying(|_| true)
                .iter()
                .filter(|f| f.group == group.id())
                .count();
            if members >= 2 {
                return (child, group);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("the group never had two processes");
    }

    /// Whether no process of `group` runs within 10 s.
    async fn ends(group: Group) -> bool {
        tokio::time::timeout(
            Duration::from_secs(10),
            group.emptied(Duration::from_millis(10)),
        )
        .await
        .is_ok()
    }

    #[tokio::test]
    async fn a_killed_group_leaves_no_process_of_it_running() {
        // The `sleep` left in the background is not the leader's to end.
        let (mut child, group) = group_of("sleep 30 & sleep 30");
        assert_eq!(
            group.id(),
            i32::try_from(child.id().expect("id")).expect("pid")
        );
        assert!(group.is_alive());
        assert!(group.kill(), "signalled");
        child.wait().await.expect("reap the leader");
        assert!(
            ends(group).await,
            "the background sleep went with its group"
        );
        assert!(!group.is_alive());
    }

    #[tokio::test]
    async fn a_group_that_ignores_sigterm_is_killed_after_the_grace() {
        let (mut child, group) = group_of("trap '' TERM; sleep 30 & sleep 30");
        let grace = Duration::from_millis(300);
        let began = std::time::Instant::now();
        group.stop(grace, child.wait()).await;
        assert!(began.elapsed() >= grace, "SIGTERM alone ended it");
        child.wait().await.expect("reap the leader");
        assert!(ends(group).await, "SIGKILL ended the group");
    }

    #[tokio::test]
    async fn a_group_that_ends_on_sigterm_is_not_waited_for_the_whole_grace() {
        let (mut child, group) = group_of("sleep 30 & sleep 30");
        let began = std::time::Instant::now();
        group.stop(Duration::from_secs(20), child.wait()).await;
        assert!(
            began.elapsed() < Duration::from_secs(10),
            "it waited out the grace"
        );
        assert!(ends(group).await, "the group ended");
    }

    #[test]
    fn a_std_child_leads_its_own_group_and_no_group_0_is_signalled() {
        let (mut child, group) = std::process::Command::new("sleep")
            .arg("30")
            .spawn_in_group()
            .expect("spawn sleep");
        assert_ne!(
            group.id(),
            nix::unistd::getpgrp().as_raw(),
            "not gameplan's own group"
        );
        assert!(group.kill());
        child.wait().expect("reap");
        // killpg(0) would be this test's own group: refused, not sent.
        assert!(!Group::led_by(0).terminate());
        assert!(!Group::led_by(0).is_alive());
    }
}

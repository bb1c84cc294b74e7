//! The lock that says "this attempt's ending is not recorded yet": one byte
//! of the run's `attempts.lock`, at an offset derived from the attempt's
//! name, held as an open-file-description lock (`F_OFD_SETLK`).
//!
//! A file per attempt (the old `stdout.log` + `flock`) cost an inode per
//! step. Byte-range locks on one file keep what that lock gave: the kernel
//! drops them when the launcher dies (also on `kill -9`), they belong to
//! the launcher's own open file (close-on-exec, so a process a step leaves
//! behind never holds one), and two open files of the same lock file
//! conflict even within one process, so a resume sees the launcher's lock.
//! Classic POSIX record locks would not do: they belong to the process and
//! vanish when it closes any descriptor of the file.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::Path;

use nix::fcntl::{FcntlArg, fcntl};
use nix::libc;

/// The byte an attempt's lock takes: a hash of its name, far from any
/// other attempt's (a collision would only make a resume wait for the
/// other attempt's ending too).
pub fn offset(attempt: &str) -> i64 {
    let hash = attempt.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    i64::try_from(hash >> 2).unwrap_or(0)
}

/// Opens (creating) the run's lock file.
pub fn open(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
}

fn set(file: &File, at: i64, kind: libc::c_int) -> io::Result<bool> {
    let lock = libc::flock {
        l_type: i16::try_from(kind).unwrap_or_default(),
        l_whence: i16::try_from(libc::SEEK_SET).unwrap_or_default(),
        l_start: at,
        l_len: 1,
        // Must be 0 for an open-file-description lock.
        l_pid: 0,
    };
    match fcntl(file, FcntlArg::F_OFD_SETLK(&lock)) {
        Ok(_) => Ok(true),
        Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EACCES) => Ok(false),
        Err(e) => Err(io::Error::from(e)),
    }
}

/// Takes the attempt's lock without waiting: `false` when another open
/// file holds it.
pub fn try_lock(file: &File, attempt: &str) -> io::Result<bool> {
    set(file, offset(attempt), libc::F_WRLCK)
}

/// Gives the attempt's lock back (the other attempts' locks stay).
pub fn unlock(file: &File, attempt: &str) {
    let _ = set(file, offset(attempt), libc::F_UNLCK);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_attempt_lock_is_seen_by_another_open_file_and_freed_alone() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("attempts.lock");
        let launcher = open(&path).expect("open");
        let resume = open(&path).expect("open again");
        assert!(try_lock(&launcher, "a#1").expect("lock"));
        assert!(try_lock(&launcher, "b#1").expect("lock"));
        assert!(!try_lock(&resume, "a#1").expect("try"), "held by the other");
        assert!(try_lock(&resume, "a#2").expect("try"), "another attempt");
        unlock(&launcher, "a#1");
        assert!(try_lock(&resume, "a#1").expect("try"), "freed");
        assert!(!try_lock(&resume, "b#1").expect("try"), "b is still held");
        drop(launcher);
        assert!(try_lock(&resume, "b#1").expect("try"), "closing frees all");
        assert_ne!(offset("a#1"), offset("a#2"));
        assert!(offset("x") >= 0);
    }
}

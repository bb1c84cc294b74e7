//! Race-safe file writing for the store and caches: temp name, then rename.
//!
//! Nothing here is fsynced. Everything reuse writes is a cache whose reader
//! verifies it (entry sizes on lookup, sha256 on restore): an entry a power
//! cut tore is a miss and the step runs again, never a wrong result. Syncing
//! would cost a millisecond or more per step for no correctness gain.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use sha2::{Digest as _, Sha256};

use super::error::{ReuseError, io_error};
use super::key::to_hex;

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A name part unique to this process and call, so concurrent writers (other
/// threads, other gameplan processes) never share a temporary file.
pub(crate) fn unique_suffix() -> String {
    // Asked once: `getpid` is a system call, and this runs per stored step.
    static PID: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    format!(
        "{}-{}",
        PID.get_or_init(std::process::id),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// Replaces `path` with `bytes` so that a concurrent reader sees the old file
/// or the new one, never a mix.
pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), ReuseError> {
    let parent = path.parent().unwrap_or_else(|| Path::new("."));
    fs::create_dir_all(parent).map_err(io_error("create the directory", parent))?;
    let name = path
        .file_name()
        .map_or_else(String::new, |name| name.to_string_lossy().into_owned());
    let temp = parent.join(format!(".{name}.tmp-{}", unique_suffix()));
    let written = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temp)?;
        file.write_all(bytes)
    })()
    .map_err(io_error("write", &temp))
    .and_then(|()| fs::rename(&temp, path).map_err(io_error("replace", path)));
    if written.is_err() {
        let _ = fs::remove_file(&temp);
    }
    written
}

/// Copies `from` into the new file `to`, hashing as it goes so the recorded
/// hash is of exactly the bytes written. Returns size and sha256 hex.
pub(crate) fn copy_hashing(from: &Path, to: &Path) -> Result<(u64, String), ReuseError> {
    let mut source = File::open(from).map_err(io_error("open", from))?;
    let target = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(to)
        .map_err(io_error("create", to))?;
    let mut sink = Hashing {
        hasher: Sha256::new(),
        inner: Some(target),
    };
    // io::copy reads into an uninitialised stack buffer: no per-file
    // allocation or zeroing (they showed up per step in W1's profile).
    let size = io::copy(&mut source, &mut sink).map_err(io_error("copy", from))?;
    let target = sink
        .inner
        .take()
        .ok_or_else(|| io_error("copy", from)(io::Error::other("lost the target")))?;
    // Keep the mode (an output may be an executable the next step runs);
    // most files already have it, so skip the call then.
    if let (Ok(from_meta), Ok(to_meta)) = (source.metadata(), target.metadata())
        && from_meta.permissions() != to_meta.permissions()
    {
        fs::set_permissions(to, from_meta.permissions())
            .map_err(io_error("set permissions of", to))?;
    }
    Ok((size, to_hex(&sink.hasher.finalize())))
}

/// Size and sha256 hex of the content of the file at `path`.
pub(crate) fn hash_file(path: &Path) -> io::Result<(u64, String)> {
    let mut file = File::open(path)?;
    let mut sink = Hashing {
        hasher: Sha256::new(),
        inner: None,
    };
    let size = io::copy(&mut file, &mut sink)?;
    Ok((size, to_hex(&sink.hasher.finalize())))
}

/// A writer that hashes what passes through it (and writes it on, if it has somewhere to).
struct Hashing {
    hasher: Sha256,
    inner: Option<File>,
}

impl Write for Hashing {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let written = match &mut self.inner {
            Some(file) => file.write(buf)?,
            None => buf.len(),
        };
        self.hasher.update(&buf[..written]);
        Ok(written)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.as_mut().map_or(Ok(()), Write::flush)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_replaces_and_leaves_no_temp_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("nested").join("file.json");
        write_atomically(&path, b"one").expect("first write");
        write_atomically(&path, b"two").expect("second write");
        assert_eq!(fs::read(&path).expect("read back"), b"two");
        let names: Vec<_> = fs::read_dir(dir.path().join("nested"))
            .expect("list")
            .filter_map(Result::ok)
            .map(|entry| entry.file_name())
            .collect();
        assert_eq!(names, ["file.json"]);
    }

    #[test]
    fn copy_hashing_matches_hash_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let from = dir.path().join("from");
        let to = dir.path().join("to");
        fs::write(&from, b"payload").expect("write");
        let copied = copy_hashing(&from, &to).expect("copy");
        assert_eq!(copied, hash_file(&to).expect("hash"));
        assert_eq!(copied.0, 7);
    }
}

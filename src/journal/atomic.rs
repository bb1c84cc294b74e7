//! Whole-file writes that are either fully there or not there at all, and the
//! directory syncs that make a new name durable.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::JournalError;

/// Replaces `path` with `bytes` so that a reader, or the disk after a crash,
/// sees either the old content or the new, never a mix.
///
/// Writes a temp file in the same directory (a rename is only atomic within
/// one file system), fsyncs it, renames it over `path`, then fsyncs the
/// directory so the rename itself survives a crash. Missing parent
/// directories are created.
pub fn atomic_write(path: &Path, bytes: &[u8]) -> Result<(), JournalError> {
    let io_error = |action, path: &Path| {
        let path = path.to_path_buf();
        move |source| JournalError::Io {
            action,
            path,
            source,
        }
    };
    let dir = parent_dir(path);
    create_dirs_durably(dir).map_err(io_error("create the directory of", path))?;
    let (temp_path, mut temp) = create_temp_beside(path).map_err(io_error("write", path))?;
    let written = temp
        .write_all(bytes)
        .and_then(|()| temp.sync_all())
        .map_err(io_error("write", &temp_path))
        .and_then(|()| {
            fs::rename(&temp_path, path).map_err(io_error("rename a new version over", path))
        });
    if let Err(error) = written {
        // Best effort: the temp file is garbage either way, and the error
        // that matters is the one above.
        let _ = fs::remove_file(&temp_path);
        return Err(error);
    }
    sync_dir(dir).map_err(io_error("sync the directory of", path))
}

/// A new, uniquely named file beside `path`, hidden so tools listing the
/// directory do not mistake it for a result.
fn create_temp_beside(path: &Path) -> io::Result<(PathBuf, File)> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let name = path
        .file_name()
        .map_or_else(|| "file".into(), |name| name.to_string_lossy());
    let dir = parent_dir(path);
    let mut collisions = 0;
    loop {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let temp_path = dir.join(format!(".{name}.{}.{n}.tmp", std::process::id()));
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temp_path)
        {
            Ok(file) => return Ok((temp_path, file)),
            // Left over by a crashed process that had our pid; take the next name.
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists && collisions < 100 => {
                collisions += 1;
            }
            Err(error) => return Err(error),
        }
    }
}

/// The directory holding `path`; `.` for a bare file name.
pub(super) fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    }
}

/// Creates `dir` and its missing ancestors, syncing each new entry's parent:
/// a file fsynced inside a directory whose own entry was never synced can
/// still vanish in a crash.
pub(super) fn create_dirs_durably(dir: &Path) -> io::Result<()> {
    let missing: Vec<&Path> = dir
        .ancestors()
        .take_while(|ancestor| !ancestor.as_os_str().is_empty() && !ancestor.is_dir())
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    fs::create_dir_all(dir)?;
    for created in missing {
        sync_dir(parent_dir(created))?;
    }
    Ok(())
}

/// Makes the entries of `dir` (new names, renames, removals) durable.
#[cfg(unix)]
pub(super) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Windows cannot open a directory as a file; its renames are durable once
/// the file system's own journal commits them.
#[cfg(not(unix))]
pub(super) fn sync_dir(_dir: &Path) -> io::Result<()> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_creates_then_replaces_and_leaves_no_temp_files() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("store/ab/key/entry.json");

        atomic_write(&path, b"first").expect("first write");
        atomic_write(&path, b"second, longer").expect("second write");

        assert_eq!(fs::read(&path).expect("read back"), b"second, longer");
        let names: Vec<_> = fs::read_dir(parent_dir(&path))
            .expect("list dir")
            .map(|entry| entry.expect("entry").file_name())
            .collect();
        assert_eq!(names, ["entry.json"]);
    }

    #[test]
    fn atomic_write_into_a_file_instead_of_a_directory_fails_cleanly() {
        let dir = tempfile::tempdir().expect("temp dir");
        let blocker = dir.path().join("blocker");
        fs::write(&blocker, b"x").expect("write blocker");

        let error = atomic_write(&blocker.join("entry.json"), b"data").expect_err("must fail");

        assert!(
            error.to_string().contains("entry.json"),
            "names the file: {error}"
        );
    }
}

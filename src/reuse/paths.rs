//! Repo-relative path rules shared by inputs, the hash cache and the store.

use std::collections::HashMap;
use std::fs;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use super::error::{ReuseError, io_error};

/// Refuses anything but a normalized repo-relative path (`/` separators, no
/// leading `/`, no empty, `.` or `..` parts), so that a path taken from a key,
/// a cache or a store entry can never address a file outside the root.
pub(crate) fn check_rel_path(rel: &str) -> Result<(), ReuseError> {
    let bad = || ReuseError::BadRelativePath {
        path: rel.to_owned(),
    };
    if rel.is_empty() || Path::new(rel).has_root() || Path::new(rel).is_absolute() {
        return Err(bad());
    }
    for part in rel.split('/') {
        if part.is_empty() || part == "." || part == ".." {
            return Err(bad());
        }
        // On Windows these would be separators or drive prefixes.
        if cfg!(windows) && (part.contains('\\') || part.contains(':')) {
            return Err(bad());
        }
    }
    Ok(())
}

/// `root` joined with a checked repo-relative path, one component at a time.
pub(crate) fn join_rel(root: &Path, rel: &str) -> PathBuf {
    let mut path = root.to_path_buf();
    path.extend(rel.split('/'));
    path
}

/// The `/`-separated form of `path` relative to `root`.
pub(crate) fn rel_string(root: &Path, path: &Path) -> Result<String, ReuseError> {
    let relative = path.strip_prefix(root).unwrap_or(path);
    let mut parts = Vec::new();
    for component in relative.components() {
        match component {
            Component::Normal(part) => match part.to_str() {
                Some(text) => parts.push(text),
                None => {
                    return Err(ReuseError::NonUtf8Path {
                        path: path.display().to_string(),
                    });
                }
            },
            Component::CurDir => {}
            _ => {
                return Err(ReuseError::BadRelativePath {
                    path: relative.display().to_string(),
                });
            }
        }
    }
    Ok(parts.join("/"))
}

/// Directories found to resolve inside the root, by the path they were
/// reached by, with their resolved form: a directory checked once is not
/// resolved again (one `readlink` per path component, per path, per step
/// was most of what a reused step cost). Kept for a run: [`forget_resolved`]
/// empties it when a store is opened, so a long-lived process never trusts
/// an answer from an earlier run. Within a run a directory a step replaces
/// by a symlink is not noticed; the steps are the plan's own code, and the
/// wall is against links that are in the tree when gameplan looks.
static RESOLVED: Mutex<Option<HashMap<PathBuf, PathBuf>>> = Mutex::new(None);

fn resolved() -> std::sync::MutexGuard<'static, Option<HashMap<PathBuf, PathBuf>>> {
    RESOLVED.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Forgets every resolved directory (and root): the next check resolves again.
pub fn forget_resolved() {
    *resolved() = None;
}

fn remember_dir(given: &Path, real: &Path) {
    resolved()
        .get_or_insert_with(HashMap::new)
        .insert(given.to_path_buf(), real.to_path_buf());
}

fn known_dir(given: &Path) -> Option<PathBuf> {
    resolved().as_ref()?.get(given).cloned()
}

/// Whether `dir` was already found to be a directory inside the root during
/// this run (no system call).
pub(crate) fn is_known_dir(dir: &Path) -> bool {
    resolved()
        .as_ref()
        .is_some_and(|dirs| dirs.contains_key(dir))
}

thread_local! {
    /// Stats taken by [`resolve_inside`] while a key is being computed, for
    /// the hash cache to use instead of taking the same stat again.
    static SHARED_STATS: std::cell::RefCell<Option<HashMap<PathBuf, fs::Metadata>>> =
        const { std::cell::RefCell::new(None) };
}

/// While alive (on this thread), the stat an input's expansion took is the
/// one its hash is checked against: one system call per input file instead
/// of two. Only for the span of one key computation, where nothing runs
/// between the two; never across a step's run.
pub struct SharedStats(());

/// Starts sharing stats on this thread until the guard is dropped.
pub fn share_stats() -> SharedStats {
    SHARED_STATS.with(|stats| *stats.borrow_mut() = Some(HashMap::new()));
    SharedStats(())
}

impl Drop for SharedStats {
    fn drop(&mut self) {
        SHARED_STATS.with(|stats| *stats.borrow_mut() = None);
    }
}

fn offer_stat(path: &Path, metadata: &fs::Metadata) {
    SHARED_STATS.with(|stats| {
        if let Some(stats) = stats.borrow_mut().as_mut() {
            stats.insert(path.to_path_buf(), metadata.clone());
        }
    });
}

/// The stat of `path` taken during this key computation, if any (taken once).
pub(crate) fn shared_stat(path: &Path) -> Option<fs::Metadata> {
    SHARED_STATS.with(|stats| stats.borrow_mut().as_mut()?.remove(path))
}

/// The repo root with every symlink resolved, the reference for "inside".
pub(crate) fn canonical_root(root: &Path) -> Result<PathBuf, ReuseError> {
    if let Some(real) = known_dir(root) {
        return Ok(real);
    }
    let canonical = fs::canonicalize(root).map_err(io_error("resolve the repo root", root))?;
    remember_dir(root, &canonical);
    Ok(canonical)
}

/// What [`resolve_inside`] found at a path.
#[derive(Debug)]
pub(crate) struct Found {
    pub is_dir: bool,
    pub is_file: bool,
    /// What the path resolves to: size, permissions.
    pub metadata: fs::Metadata,
}

/// Resolves `path` (shown to the user as `shown`) and checks that it stays
/// inside `canonical_root`. `Ok(None)` when nothing is there.
///
/// A path that is not itself a symlink, in a directory already resolved
/// this run, costs one `lstat`: it is inside because its directory is.
pub(crate) fn resolve_inside(
    canonical_root: &Path,
    path: &Path,
    shown: &str,
) -> Result<Option<Found>, ReuseError> {
    let metadata = match fs::symlink_metadata(path) {
        Ok(metadata) => metadata,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(io_error("read metadata of", path)(error)),
    };
    let is_link = metadata.file_type().is_symlink();
    if !is_link
        && let (Some(parent), Some(name)) = (path.parent(), path.file_name())
        && name != ".."
        && let Some(real_parent) = known_dir(parent)
    {
        let real = real_parent.join(name);
        if metadata.is_dir() {
            remember_dir(path, &real);
        } else if metadata.is_file() {
            // Not a link: the lstat is the stat the hash cache would take.
            offer_stat(path, &metadata);
        }
        return Ok(Some(Found {
            is_dir: metadata.is_dir(),
            is_file: metadata.is_file(),
            metadata,
        }));
    }
    match fs::canonicalize(path) {
        Ok(real) if real.starts_with(canonical_root) => {
            let metadata = if is_link {
                fs::metadata(&real).map_err(io_error("read metadata of", &real))?
            } else {
                // Not a link: its directory resolves to the real one's.
                if let (Some(parent), Some(real_parent)) = (path.parent(), real.parent())
                    && real_parent.starts_with(canonical_root)
                {
                    remember_dir(parent, real_parent);
                }
                metadata
            };
            if metadata.is_dir() {
                remember_dir(path, &real);
            }
            Ok(Some(Found {
                is_dir: metadata.is_dir(),
                is_file: metadata.is_file(),
                metadata,
            }))
        }
        Ok(real) => Err(ReuseError::SymlinkOutsideRoot {
            path: shown.to_owned(),
            target: real.display().to_string(),
        }),
        // The name exists (the lstat found it) but what it points at does not.
        Err(error) if error.kind() == io::ErrorKind::NotFound => Err(ReuseError::BrokenSymlink {
            path: shown.to_owned(),
        }),
        Err(error) => Err(io_error("resolve", path)(error)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rel_paths_must_be_normalized() {
        for good in ["a", "a/b.txt", "dir/.hidden", "a..b/c"] {
            assert!(check_rel_path(good).is_ok(), "{good}");
        }
        for bad in ["", "/a", "a//b", "./a", "a/./b", "../a", "a/..", "a/"] {
            assert!(
                matches!(check_rel_path(bad), Err(ReuseError::BadRelativePath { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn rel_string_uses_forward_slashes() {
        let root = Path::new("/repo");
        let path = root.join("a").join("b").join("c.txt");
        assert_eq!(rel_string(root, &path).expect("relative"), "a/b/c.txt");
    }
}

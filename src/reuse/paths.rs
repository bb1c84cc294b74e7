//! Repo-relative path rules shared by inputs, the hash cache and the store.

use std::fs;
use std::io;
use std::path::{Component, Path, PathBuf};

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

/// The repo root with every symlink resolved, the reference for "inside".
pub(crate) fn canonical_root(root: &Path) -> Result<PathBuf, ReuseError> {
    // A run resolves the same root once per step; remember the last answer
    // (a root moving mid-run is not something a run survives anyway).
    static LAST: std::sync::Mutex<Option<(PathBuf, PathBuf)>> = std::sync::Mutex::new(None);
    let mut last = LAST
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((given, canonical)) = last.as_ref()
        && given == root
    {
        return Ok(canonical.clone());
    }
    let canonical = fs::canonicalize(root).map_err(io_error("resolve the repo root", root))?;
    *last = Some((root.to_path_buf(), canonical.clone()));
    Ok(canonical)
}

/// Resolves `path` (shown to the user as `shown`) and checks that it stays
/// inside `canonical_root`. `Ok(None)` when nothing is there.
pub(crate) fn resolve_inside(
    canonical_root: &Path,
    path: &Path,
    shown: &str,
) -> Result<Option<PathBuf>, ReuseError> {
    match fs::canonicalize(path) {
        Ok(real) if real.starts_with(canonical_root) => Ok(Some(real)),
        Ok(real) => Err(ReuseError::SymlinkOutsideRoot {
            path: shown.to_owned(),
            target: real.display().to_string(),
        }),
        Err(error) if error.kind() == io::ErrorKind::NotFound => {
            // The name exists but what it points at does not.
            if fs::symlink_metadata(path).is_ok() {
                Err(ReuseError::BrokenSymlink {
                    path: shown.to_owned(),
                })
            } else {
                Ok(None)
            }
        }
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

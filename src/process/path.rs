//! Finding a program on a `PATH`: the value a process will run with, which
//! is not always gameplan's own (a game's cleared environment, a step's).

use std::path::{Path, PathBuf};

/// A program that is on none of a `PATH`'s directories.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{program}` is not on PATH {path:?}")]
pub struct NotOnPath {
    pub program: String,
    /// The `PATH` value looked through.
    pub path: String,
}

/// Whether `path` is a file someone may execute.
pub fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The first executable file called `program` (a bare name) in the
/// directories of `path`, a `PATH` value, in order. A relative directory
/// (an empty entry is the current one, as for a shell) is taken from
/// `base`: the directory the program will run in.
pub fn on_path(program: &str, path: &str, base: &Path) -> Result<PathBuf, NotOnPath> {
    std::env::split_paths(path)
        .map(|dir| base.join(dir).join(program))
        .find(|candidate| is_executable(candidate))
        .ok_or_else(|| NotOnPath {
            program: program.to_owned(),
            path: path.to_owned(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sh_is_found_and_a_missing_program_is_named() {
        let found = on_path("sh", "/nonexistent:/usr/bin:/bin", Path::new("/")).expect("sh");
        assert!(found.ends_with("sh") && is_executable(&found), "{found:?}");
        let missing = on_path("gameplan-no-such-program", "/usr/bin:/bin", Path::new("/"))
            .expect_err("not on PATH");
        assert_eq!(missing.program, "gameplan-no-such-program");
        assert_eq!(
            missing.to_string(),
            "`gameplan-no-such-program` is not on PATH \"/usr/bin:/bin\""
        );
    }

    #[test]
    fn relative_and_empty_entries_are_taken_from_the_base() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(dir.path().join("bin")).expect("bin");
        for file in ["bin/tool", "here", "plain"] {
            std::fs::write(dir.path().join(file), "#!/bin/sh\n").expect("write");
        }
        for file in ["bin/tool", "here"] {
            std::fs::set_permissions(
                dir.path().join(file),
                std::fs::Permissions::from_mode(0o755),
            )
            .expect("chmod");
        }
        assert_eq!(
            on_path("tool", "/nonexistent:bin", dir.path()),
            Ok(dir.path().join("bin").join("tool"))
        );
        assert_eq!(
            on_path("here", "/nonexistent::/bin", dir.path()),
            Ok(dir.path().join("").join("here"))
        );
        assert!(
            on_path("plain", ":", dir.path()).is_err(),
            "a file nobody may execute is not a program"
        );
    }
}

//! [`ReuseError`]: what can go wrong keying, hashing, storing or restoring,
//! each message naming the path or pattern and what to do. A damaged cache
//! or store entry is none of them: it is a miss.

use std::io;
use std::path::Path;

use miette::Diagnostic;
use thiserror::Error;

/// Everything that can go wrong while keying, hashing, storing or restoring.
///
/// Each message names the path or pattern involved and says what to do next.
/// A damaged hash cache or a damaged store entry found by a lookup is not an
/// error: it is an empty cache or a miss.
#[derive(Debug, Error, Diagnostic)]
#[non_exhaustive]
pub enum ReuseError {
    #[error(
        "input pattern is empty; name a file or a glob relative to the repo root, e.g. `src/**`"
    )]
    #[diagnostic(code(reuse::empty_pattern))]
    EmptyPattern,

    #[error(
        "input pattern `{pattern}` is absolute; write it relative to the repo root (e.g. `assets/**`)"
    )]
    #[diagnostic(code(reuse::absolute_pattern))]
    AbsolutePattern { pattern: String },

    #[error(
        "input pattern `{pattern}` climbs out with `..`; a step may only read files inside the repo, so name them from the repo root"
    )]
    #[diagnostic(code(reuse::pattern_escapes_root))]
    PatternEscapesRoot { pattern: String },

    #[error(
        "input pattern `{pattern}` is not a valid glob ({source}); fix it using `*`, `**`, `?`, `[abc]` or `{{a,b}}`"
    )]
    #[diagnostic(code(reuse::bad_pattern))]
    BadPattern {
        pattern: String,
        source: globset::Error,
    },

    #[error(
        "`{path}` is a symlink resolving to `{target}`, outside the repo root; gameplan never reads or writes outside the repo: replace the link with a copy or narrow the pattern"
    )]
    #[diagnostic(code(reuse::symlink_outside_root))]
    SymlinkOutsideRoot { path: String, target: String },

    #[error("`{path}` is a broken symlink; remove it or narrow the pattern that matched it")]
    #[diagnostic(code(reuse::broken_symlink))]
    BrokenSymlink { path: String },

    #[error(
        "`{path}` has a name that is not valid UTF-8; rename it, since reuse keys record paths as text"
    )]
    #[diagnostic(code(reuse::non_utf8_path))]
    NonUtf8Path { path: String },

    #[error(
        "`{path}` is not a normalized repo-relative path; use `/` separators and no leading `/`, empty, `.` or `..` parts"
    )]
    #[diagnostic(code(reuse::bad_relative_path))]
    BadRelativePath { path: String },

    #[error(
        "declared output `{path}` does not exist after the step, so nothing was stored; make the step write it or remove it from `outputs`"
    )]
    #[diagnostic(code(reuse::missing_output))]
    MissingOutput { path: String },

    #[error(
        "declared output `{path}` is not a regular file; list the files inside it (e.g. `{path}/**`) instead"
    )]
    #[diagnostic(code(reuse::output_not_a_file))]
    OutputNotAFile { path: String },

    #[error(
        "stored output `{path}` in `{entry}` does not match its recorded size and sha256; the store entry is damaged: delete `{entry}` and run again"
    )]
    #[diagnostic(code(reuse::store_corrupt))]
    StoreCorrupt { path: String, entry: String },

    #[error(
        "store entry `{entry}` names `{path}`, which the step's declared outputs do not match; nothing was restored and the step runs again (delete `{entry}` if it keeps happening)"
    )]
    #[diagnostic(code(reuse::restore_outside_outputs))]
    RestoreOutsideOutputs { path: String, entry: String },

    #[error(
        "cannot restore `{path}`: something that is not a regular file is in the way; remove it and run again"
    )]
    #[diagnostic(code(reuse::restore_blocked))]
    RestoreBlocked { path: String },

    #[error(
        "unit key `{key}` is not 1 to 128 characters of [A-Za-z0-9_-]; a kind's unit keys name files in the state directory, so make them a digest (e.g. a sha256 hex)"
    )]
    #[diagnostic(code(reuse::bad_unit_key))]
    BadUnitKey { key: String },

    #[error(
        "could not {action} `{path}`: {source}; check that it exists and that gameplan may read and write there"
    )]
    #[diagnostic(code(reuse::io))]
    Io {
        action: &'static str,
        path: String,
        source: io::Error,
    },
}

/// Wraps an I/O failure with what was being done and to which path.
pub(crate) fn io_error(action: &'static str, path: &Path) -> impl FnOnce(io::Error) -> ReuseError {
    let path = path.display().to_string();
    move |source| ReuseError::Io {
        action,
        path,
        source,
    }
}

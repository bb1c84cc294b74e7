//! Expanding a step's `inputs` patterns into the repo files they name.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::io;
use std::path::Path;

use globset::{GlobBuilder, GlobMatcher};
use walkdir::WalkDir;

use super::error::ReuseError;
use super::paths::{canonical_root, join_rel, rel_string, resolve_inside};

/// Directories that are never inputs: version control and gameplan's own state.
const SKIPPED_DIRS: [&str; 2] = [".git", ".gameplan"];

/// The repo files matched by `patterns`: repo-relative, `/`-separated, sorted
/// and without duplicates.
///
/// Patterns use globset syntax relative to `root`: `*` stays within one path
/// part, `**` crosses parts, `?`, `[abc]` and `{a,b}` work, `\` escapes. A
/// pattern without glob characters names that file, or every file under it
/// when it is a directory (`.` is the whole repo). A pattern that matches
/// nothing contributes nothing.
///
/// Only the literal prefix directory of each pattern is walked (`assets/**`
/// walks `assets/`). `.git/` and `.gameplan/` are skipped at any depth.
/// Symlinks are not followed into directories; a matched symlink to a file
/// counts as that file if it resolves inside the root and is refused
/// otherwise, as is an absolute pattern or one using `..`.
pub fn expand_inputs<S: AsRef<str>>(
    root: &Path,
    patterns: &[S],
) -> Result<Vec<String>, ReuseError> {
    let canonical_root = canonical_root(root)?;
    let mut found = BTreeSet::new();
    for pattern in patterns {
        InputPattern::parse(pattern.as_ref())?.collect(root, &canonical_root, &mut found)?;
    }
    Ok(found.into_iter().collect())
}

/// Parsed patterns, to ask whether they name a given path without walking
/// the tree (what a store entry may restore: only what the step's declared
/// `outputs` could have stored).
pub struct PatternSet(Vec<InputPattern>);

impl PatternSet {
    pub fn parse<S: AsRef<str>>(patterns: &[S]) -> Result<Self, ReuseError> {
        patterns
            .iter()
            .map(|p| InputPattern::parse(p.as_ref()))
            .collect::<Result<_, _>>()
            .map(Self)
    }

    /// Whether [`expand_inputs`] with these patterns could yield `rel` (a
    /// normalized repo-relative path): it matches a pattern and lies in no
    /// skipped directory (`.git/`, `.gameplan/`).
    pub fn matches(&self, rel: &str) -> bool {
        !rel.split('/').any(|part| is_skipped(OsStr::new(part)))
            && self.0.iter().any(|pattern| pattern.covers(rel))
    }
}

struct InputPattern {
    /// The leading parts without glob characters: the only directory walked.
    prefix: Vec<String>,
    /// `None` for a literal pattern, where everything under the prefix matches.
    glob: Option<GlobMatcher>,
}

impl InputPattern {
    fn parse(pattern: &str) -> Result<Self, ReuseError> {
        if pattern.is_empty() {
            return Err(ReuseError::EmptyPattern);
        }
        if is_absolute(pattern) {
            return Err(ReuseError::AbsolutePattern {
                pattern: pattern.to_owned(),
            });
        }
        let parts: Vec<&str> = pattern
            .split('/')
            .filter(|part| !part.is_empty() && *part != ".")
            .collect();
        if parts.contains(&"..") {
            return Err(ReuseError::PatternEscapesRoot {
                pattern: pattern.to_owned(),
            });
        }
        let literal_parts = parts
            .iter()
            .take_while(|part| !has_glob_syntax(part))
            .count();
        let prefix = parts[..literal_parts]
            .iter()
            .map(|part| (*part).to_owned())
            .collect();
        if literal_parts == parts.len() {
            return Ok(Self { prefix, glob: None });
        }
        let glob = GlobBuilder::new(&parts.join("/"))
            .literal_separator(true)
            .backslash_escape(true)
            .build()
            .map_err(|source| ReuseError::BadPattern {
                pattern: pattern.to_owned(),
                source,
            })?
            .compile_matcher();
        Ok(Self {
            prefix,
            glob: Some(glob),
        })
    }

    fn matches(&self, rel: &str) -> bool {
        self.glob.as_ref().is_none_or(|glob| glob.is_match(rel))
    }

    /// [`Self::matches`] for any path, not only one found under the prefix.
    fn covers(&self, rel: &str) -> bool {
        match &self.glob {
            Some(glob) => glob.is_match(rel),
            None => rel
                .split('/')
                .take(self.prefix.len())
                .eq(self.prefix.iter().map(String::as_str)),
        }
    }

    fn collect(
        &self,
        root: &Path,
        canonical_root: &Path,
        found: &mut BTreeSet<String>,
    ) -> Result<(), ReuseError> {
        if self.prefix.iter().any(|part| is_skipped(OsStr::new(part))) {
            return Ok(());
        }
        let shown_prefix = self.prefix.join("/");
        let walk_root = if self.prefix.is_empty() {
            root.to_path_buf()
        } else {
            join_rel(root, &shown_prefix)
        };
        // The prefix may pass through symlinks (walkdir follows its root), so
        // it is checked once here; below it no directory link is followed.
        let Some(at_prefix) = resolve_inside(canonical_root, &walk_root, &shown_prefix)? else {
            return Ok(());
        };
        // A file named as it is: that one check is all (no walk, whose
        // own stat of its root would be a second system call per input).
        if !at_prefix.is_dir && !self.prefix.is_empty() {
            if at_prefix.is_file && self.matches(&shown_prefix) {
                found.insert(shown_prefix);
            }
            return Ok(());
        }
        let walk = WalkDir::new(&walk_root)
            .follow_links(false)
            .into_iter()
            .filter_entry(|entry| entry.depth() == 0 || !is_skipped(entry.file_name()));
        for entry in walk {
            let entry = entry.map_err(|error| walk_error(&walk_root, error))?;
            if entry.file_type().is_dir() {
                continue;
            }
            let rel = match rel_string(root, entry.path()) {
                Ok(rel) => rel,
                // An unmatched oddly named file is none of this step's business.
                Err(error) => {
                    let lossy = entry.path().strip_prefix(root).unwrap_or(entry.path());
                    if self.matches(&lossy.to_string_lossy().replace('\\', "/")) {
                        return Err(error);
                    }
                    continue;
                }
            };
            if !self.matches(&rel) {
                continue;
            }
            let is_file = if entry.depth() > 0 && entry.path_is_symlink() {
                resolve_inside(canonical_root, entry.path(), &rel)?
                    .is_some_and(|found| found.is_file)
            } else {
                entry.file_type().is_file()
            };
            if is_file {
                found.insert(rel);
            }
        }
        Ok(())
    }
}

fn is_absolute(pattern: &str) -> bool {
    let bytes = pattern.as_bytes();
    let drive_letter = bytes.len() >= 2 && bytes[0].is_ascii_alphabetic() && bytes[1] == b':';
    pattern.starts_with('/')
        || pattern.starts_with('\\')
        || drive_letter
        || Path::new(pattern).is_absolute()
}

fn has_glob_syntax(part: &str) -> bool {
    part.contains(['*', '?', '[', '{', '\\'])
}

fn is_skipped(name: &OsStr) -> bool {
    SKIPPED_DIRS
        .iter()
        .any(|skipped| name == OsStr::new(skipped))
}

fn walk_error(walk_root: &Path, error: walkdir::Error) -> ReuseError {
    let path = error.path().unwrap_or(walk_root).display().to_string();
    let source = error
        .into_io_error()
        .unwrap_or_else(|| io::Error::other("a symlink loop"));
    ReuseError::Io {
        action: "list",
        path,
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn repo(files: &[&str]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tempdir");
        for file in files {
            let path = join_rel(dir.path(), file);
            fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            fs::write(&path, file.as_bytes()).expect("write");
        }
        dir
    }

    fn expand(root: &Path, patterns: &[&str]) -> Vec<String> {
        expand_inputs(root, patterns).expect("patterns expand")
    }

    #[test]
    fn double_star_crosses_directories_and_single_star_does_not() {
        let dir = repo(&[
            "assets/a.png",
            "assets/deep/b.png",
            "assets/deep/c.txt",
            "top.png",
        ]);
        assert_eq!(
            expand(dir.path(), &["assets/**"]),
            ["assets/a.png", "assets/deep/b.png", "assets/deep/c.txt"]
        );
        assert_eq!(
            expand(dir.path(), &["**/*.png"]),
            ["assets/a.png", "assets/deep/b.png", "top.png"]
        );
        assert_eq!(expand(dir.path(), &["*.png"]), ["top.png"]);
        assert_eq!(expand(dir.path(), &["assets/*.png"]), ["assets/a.png"]);
        assert_eq!(
            expand(dir.path(), &["assets/{deep/c.txt,a.png}"]),
            ["assets/a.png", "assets/deep/c.txt"]
        );
    }

    #[test]
    fn plain_paths_name_a_file_or_everything_under_a_directory() {
        let dir = repo(&["src/a.c", "src/sub/b.c", "Makefile"]);
        assert_eq!(expand(dir.path(), &["Makefile"]), ["Makefile"]);
        assert_eq!(expand(dir.path(), &["./src/"]), ["src/a.c", "src/sub/b.c"]);
        assert!(expand(dir.path(), &["missing.txt", "nope/**"]).is_empty());
        assert_eq!(
            expand(dir.path(), &["."]),
            ["Makefile", "src/a.c", "src/sub/b.c"]
        );
    }

    #[test]
    fn results_are_sorted_and_deduplicated() {
        let dir = repo(&["b.txt", "a/x.txt", "a/y.txt"]);
        assert_eq!(
            expand(dir.path(), &["b.txt", "a/**", "a/x.txt", "**/*.txt"]),
            ["a/x.txt", "a/y.txt", "b.txt"]
        );
    }

    #[test]
    fn state_and_git_directories_are_skipped() {
        let dir = repo(&[
            "keep.txt",
            ".git/HEAD",
            ".gameplan/hash-cache.json",
            ".gameplan/store/ab/x/key.json",
            "vendor/lib/.git/config",
            ".github/workflow.yml",
        ]);
        assert_eq!(
            expand(dir.path(), &["**"]),
            [".github/workflow.yml", "keep.txt"]
        );
        assert!(expand(dir.path(), &[".gameplan/**", ".git/HEAD"]).is_empty());
    }

    #[test]
    fn escaping_and_absolute_patterns_are_refused_by_name() {
        let dir = repo(&["a.txt"]);
        for pattern in ["../secrets/**", "a/../../x", "src/.."] {
            let error = expand_inputs(dir.path(), &[pattern]).expect_err(pattern);
            assert!(
                matches!(error, ReuseError::PatternEscapesRoot { .. }),
                "{pattern}"
            );
            assert!(error.to_string().contains(pattern), "{error}");
        }
        let error = expand_inputs(dir.path(), &["/etc/passwd"]).expect_err("absolute");
        assert!(matches!(error, ReuseError::AbsolutePattern { .. }));
        assert!(error.to_string().contains("/etc/passwd"));
        assert!(matches!(
            expand_inputs(dir.path(), &[""]),
            Err(ReuseError::EmptyPattern)
        ));
    }

    #[test]
    fn invalid_glob_is_refused_by_name() {
        let dir = repo(&["a.txt"]);
        let error = expand_inputs(dir.path(), &["src/[ab"]).expect_err("bad glob");
        assert!(matches!(error, ReuseError::BadPattern { .. }));
        assert!(error.to_string().contains("src/[ab"));
    }

    #[cfg(unix)]
    #[test]
    fn symlinks_are_followed_only_inside_the_root() {
        use std::os::unix::fs::symlink;
        let outside = repo(&["secret.txt", "dir/inner.txt"]);
        let dir = repo(&["real/a.txt"]);
        symlink(dir.path().join("real/a.txt"), dir.path().join("alias.txt")).expect("link");
        symlink(dir.path().join("real"), dir.path().join("linkdir")).expect("link");
        // A link to a file inside counts; a link to a directory is not descended.
        assert_eq!(expand(dir.path(), &["**"]), ["alias.txt", "real/a.txt"]);
        // A literal prefix through an inside link is walked.
        assert_eq!(expand(dir.path(), &["linkdir/*.txt"]), ["linkdir/a.txt"]);

        symlink(
            outside.path().join("secret.txt"),
            dir.path().join("leak.txt"),
        )
        .expect("link");
        let error = expand_inputs(dir.path(), &["**"]).expect_err("outside file link");
        assert!(
            matches!(error, ReuseError::SymlinkOutsideRoot { .. }),
            "{error}"
        );
        assert!(error.to_string().contains("leak.txt"));
        // Not matched, so not an error.
        assert_eq!(expand(dir.path(), &["real/**"]), ["real/a.txt"]);

        symlink(outside.path().join("dir"), dir.path().join("outdir")).expect("link");
        let error = expand_inputs(dir.path(), &["outdir/**"]).expect_err("outside dir link");
        assert!(
            matches!(error, ReuseError::SymlinkOutsideRoot { .. }),
            "{error}"
        );
    }

    #[cfg(unix)]
    #[test]
    fn a_matched_broken_symlink_is_refused() {
        use std::os::unix::fs::symlink;
        let dir = repo(&["a.txt"]);
        symlink(dir.path().join("gone"), dir.path().join("dangling.txt")).expect("link");
        let error = expand_inputs(dir.path(), &["*.txt"]).expect_err("broken");
        assert!(matches!(error, ReuseError::BrokenSymlink { .. }), "{error}");
        assert_eq!(expand(dir.path(), &["a.txt"]), ["a.txt"]);
    }
}

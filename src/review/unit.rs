//! Units: the pieces a lens judges one at a time (docs/review.md › Units),
//! each with a stable id and the sha256 of its content, which its reuse key
//! stands on.
//!
//! - `files`: one per file the lens's globs match inside the repo; id and
//!   `path` are the repo path, plus `text`, `size`, `sha256`. The sha256
//!   comes from the run's file-hash cache, so an unchanged tree is listed
//!   without reading a file; a file's text is read only when it is judged.
//! - `findings`: one per deduplicated finding of the aggregate(s) the gate
//!   needs; the finding's fields, id its fingerprint.
//! - `runs`: one per play cell report (`report.json`) the gate needs; the
//!   report's fields plus `id`, the cell's step id.
//! - `patches`: one per file per patch of a `git format-patch` series.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::{Map, Value, json};

use crate::reuse::{FileHashCache, sha256_hex};

/// The most of a file's text a unit carries: a larger file's `text` is cut
/// there and the unit says `truncated = true` (its sha256 is still of the
/// whole file), so one generated file cannot fill a lens's stdin.
pub const MAX_UNIT_TEXT_BYTES: usize = 1024 * 1024;

/// The most file text [`files`] keeps in memory from hashing to judging:
/// a file read to hash it (a new or changed file) is not read again to
/// judge it while its text fits; beyond this budget it is.
pub const MAX_KEPT_TEXT_BYTES: usize = 64 * 1024 * 1024;

/// Files listed on one thread: fewer stats and reads than this are not
/// worth a second thread.
const FILES_PER_THREAD: usize = 256;

/// One unit.
#[derive(Debug, Clone, PartialEq)]
pub struct Unit {
    pub id: String,
    /// The sha256 of its content: what its verdict's reuse key stands on.
    pub sha256: String,
    body: Body,
}

#[derive(Debug, Clone, PartialEq)]
enum Body {
    Fields(Map<String, Value>),
    /// A repo file, read when judged unless its text was kept from
    /// hashing it.
    File {
        size: u64,
        text: Option<Arc<Vec<u8>>>,
    },
}

impl Unit {
    /// A unit of given fields (`id` and `sha256` are set on them).
    pub fn of_fields(id: String, sha256: String, mut fields: Map<String, Value>) -> Unit {
        fields.insert("id".into(), Value::String(id.clone()));
        fields.insert("sha256".into(), Value::String(sha256.clone()));
        Unit {
            id,
            sha256,
            body: Body::Fields(fields),
        }
    }

    /// The fields a lens sees (`unit.*`), reading a file unit's text now.
    pub fn fields(&self, root: &Path) -> Result<Map<String, Value>, String> {
        match &self.body {
            Body::Fields(fields) => Ok(fields.clone()),
            Body::File { size, text } => {
                let read;
                let bytes: &[u8] = if let Some(text) = text {
                    text
                } else {
                    let path = root.join(&self.id);
                    read = std::fs::read(&path)
                        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
                    &read
                };
                let truncated = bytes.len() > MAX_UNIT_TEXT_BYTES;
                let shown = &bytes[..bytes.len().min(MAX_UNIT_TEXT_BYTES)];
                let mut fields = Map::new();
                fields.insert("id".into(), json!(self.id));
                fields.insert("path".into(), json!(self.id));
                fields.insert("text".into(), json!(String::from_utf8_lossy(shown)));
                fields.insert("size".into(), json!(size));
                fields.insert("sha256".into(), json!(self.sha256));
                if truncated {
                    fields.insert("truncated".into(), json!(true));
                }
                Ok(fields)
            }
        }
    }
}

/// One unit per file `globs` match inside `root`, in path order.
pub fn files(
    root: &Path,
    globs: &[String],
    hashes: &Mutex<FileHashCache>,
) -> Result<Vec<Unit>, String> {
    files_keeping(root, globs, hashes, MAX_KEPT_TEXT_BYTES)
}

/// [`files`], keeping up to `keep` bytes of the text it reads to hash.
fn files_keeping(
    root: &Path,
    globs: &[String],
    hashes: &Mutex<FileHashCache>,
    keep: usize,
) -> Result<Vec<Unit>, String> {
    let paths = crate::reuse::expand_inputs(root, globs).map_err(|e| e.to_string())?;
    let threads = std::thread::available_parallelism()
        .map_or(1, std::num::NonZero::get)
        .min(paths.len().div_ceil(FILES_PER_THREAD))
        .max(1);
    let found = hashes
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .hash_many(root, &paths, threads, keep);
    paths
        .into_iter()
        .zip(found)
        .map(|(rel, file)| {
            let file = file.map_err(|e| e.to_string())?;
            Ok(Unit {
                id: rel,
                sha256: file.sha256,
                body: Body::File {
                    size: file.size,
                    text: file.bytes.map(Arc::new),
                },
            })
        })
        .collect()
}

/// Which findings a gate's lenses over `findings` judge.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Narrow {
    /// `only_new`: a finding the run's baseline knows (`baseline`: `known`)
    /// is no unit; without a baseline every finding is new.
    pub only_new: bool,
    /// `only_stable`: a finding labelled `flaky` over its cells' repeats
    /// is no unit; without repeats no finding is.
    pub only_stable: bool,
}

/// One unit per distinct finding of the aggregates (`aggregate.json`
/// files), in their order; a finding two aggregates share is one unit;
/// `narrow` (a gate's) leaves some out.
pub fn findings(aggregates: &[PathBuf], narrow: Narrow) -> Result<Vec<Unit>, String> {
    let mut units: Vec<Unit> = Vec::new();
    for path in aggregates {
        let bytes =
            std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let doc: Value = serde_json::from_slice(&bytes)
            .map_err(|e| format!("{} is not an aggregate: {e}", path.display()))?;
        let Some(lines) = doc.get("findings").and_then(Value::as_array) else {
            return Err(format!("{} has no `findings` list", path.display()));
        };
        for line in lines {
            let Some(fields) = line.as_object() else {
                continue;
            };
            let Some(id) = fields.get("id").and_then(Value::as_str) else {
                continue;
            };
            if units.iter().any(|u| u.id == id) {
                continue;
            }
            if narrow.only_new && fields.get("baseline").and_then(Value::as_str) == Some("known") {
                continue;
            }
            let label = fields.get("repeats").and_then(|r| r.get("label"));
            if narrow.only_stable && label.and_then(Value::as_str) == Some("flaky") {
                continue;
            }
            let sha256 = sha256_hex(line.to_string().as_bytes());
            units.push(Unit::of_fields(id.to_owned(), sha256, fields.clone()));
        }
    }
    Ok(units)
}

/// One unit per file per patch of the `git format-patch` series each of
/// `patterns` names (a directory, a glob, or an mbox file).
pub fn patches(root: &Path, patterns: &[String]) -> Result<Vec<Unit>, String> {
    let mut units = Vec::new();
    for pattern in patterns {
        for patch in super::patches::read_series(root, pattern).map_err(|e| e.to_string())? {
            let Ok(Value::Object(fields)) = serde_json::to_value(&patch) else {
                continue;
            };
            units.push(Unit::of_fields(patch.id, patch.sha256, fields));
        }
    }
    Ok(units)
}

/// One unit per play cell report: `(cell step id, its report.json)`.
pub fn runs(reports: &[(String, PathBuf)]) -> Result<Vec<Unit>, String> {
    reports
        .iter()
        .map(|(id, path)| {
            let bytes =
                std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            let Ok(Value::Object(fields)) = serde_json::from_slice::<Value>(&bytes) else {
                return Err(format!("{} is not a play report", path.display()));
            };
            Ok(Unit::of_fields(id.clone(), sha256_hex(&bytes), fields))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_files_unit_carries_the_fields_design_names() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dir.path().join("src")).expect("mkdir");
        std::fs::write(dir.path().join("src/a.rs"), "fn a() {}\n").expect("write");
        std::fs::write(dir.path().join("src/b.txt"), "not rust").expect("write");
        let hashes = Mutex::new(FileHashCache::load(&dir.path().join(".gameplan")));
        let units = files(dir.path(), &["src/**/*.rs".to_owned()], &hashes).expect("units");
        assert_eq!(units.len(), 1);
        let fields = units[0].fields(dir.path()).expect("fields");
        assert_eq!(fields["id"], "src/a.rs");
        assert_eq!(fields["path"], "src/a.rs");
        assert_eq!(fields["text"], "fn a() {}\n");
        assert_eq!(fields["size"], 10);
        assert_eq!(fields["sha256"], sha256_hex(b"fn a() {}\n"));
        assert!(fields.get("truncated").is_none());
    }

    #[test]
    fn a_file_over_the_text_cap_is_cut_and_says_so() {
        let dir = tempfile::tempdir().expect("tempdir");
        let big = "x".repeat(MAX_UNIT_TEXT_BYTES + 10);
        std::fs::write(dir.path().join("big.txt"), &big).expect("write");
        let hashes = Mutex::new(FileHashCache::load(&dir.path().join(".gameplan")));
        let units = files(dir.path(), &["big.txt".to_owned()], &hashes).expect("units");
        let fields = units[0].fields(dir.path()).expect("fields");
        assert_eq!(fields["truncated"], true);
        assert_eq!(
            fields["text"].as_str().map(str::len),
            Some(MAX_UNIT_TEXT_BYTES)
        );
        assert_eq!(fields["size"], MAX_UNIT_TEXT_BYTES as u64 + 10);
        assert_eq!(
            units[0].sha256,
            sha256_hex(big.as_bytes()),
            "of the whole file"
        );
    }

    #[test]
    fn text_past_the_keep_budget_is_read_again_when_judged() {
        let dir = tempfile::tempdir().expect("tempdir");
        for name in ["a", "b", "c"] {
            std::fs::write(
                dir.path().join(format!("{name}.rs")),
                format!("fn {name}() {{}}\n"),
            )
            .expect("write");
        }
        let hashes = Mutex::new(FileHashCache::load(&dir.path().join(".gameplan")));
        // Room for one file's text: the others are hashed and let go.
        let units = files_keeping(dir.path(), &["*.rs".to_owned()], &hashes, 10).expect("units");
        let kept = units
            .iter()
            .filter(|u| matches!(u.body, Body::File { text: Some(_), .. }))
            .count();
        assert_eq!(kept, 1, "the budget holds one 10-byte text");
        for (unit, name) in units.iter().zip(["a", "b", "c"]) {
            let fields = unit.fields(dir.path()).expect("fields");
            assert_eq!(fields["text"], format!("fn {name}() {{}}\n"), "{}", unit.id);
            assert_eq!(fields["size"], 10);
        }
    }

    #[test]
    fn findings_units_are_the_aggregates_distinct_findings() {
        let dir = tempfile::tempdir().expect("tempdir");
        let a = dir.path().join("a.json");
        let b = dir.path().join("b.json");
        std::fs::write(
            &a,
            r#"{"findings":[{"id":"crash-1","category":"crash","title":"died"},{"id":"stuck-2","category":"stuck","title":"loops"}]}"#,
        )
        .expect("write");
        std::fs::write(
            &b,
            r#"{"findings":[{"id":"crash-1","category":"crash","title":"died"}]}"#,
        )
        .expect("write");
        let units = findings(&[a.clone(), b], Narrow::default()).expect("units");
        let ids: Vec<&str> = units.iter().map(|u| u.id.as_str()).collect();
        assert_eq!(ids, ["crash-1", "stuck-2"]);
        let fields = units[0].fields(dir.path()).expect("fields");
        assert_eq!(fields["category"], "crash");
        std::fs::write(&a, "{").expect("torn");
        assert!(
            findings(&[a], Narrow::default())
                .unwrap_err()
                .contains("is not an aggregate")
        );
    }
}

//! A shard's bundle: the directories of the cells it played and a manifest
//! (`manifest.json`) naming the plan, the gameplan that played them, and
//! each cell's reuse key and files with their sizes and sha256.
//!
//! ```text
//! <bundle>/manifest.json
//! <bundle>/cells/<cell dir>/…   a cell's files, as its step directory held them
//! ```
//!
//! A bundle is written whole (into a temporary directory renamed into
//! place), and read back checked: a file whose size or sha256 differs from
//! the manifest, a path that leaves the bundle, or a key that is not the
//! digest it claims refuses the whole bundle, naming what is wrong.

use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::journal::run::file_name;
use crate::reuse::{ReuseKey, Store, hash_fresh};

/// The manifest's format; a bundle of another format is refused.
pub const BUNDLE_FORMAT: u32 = 1;
/// The manifest's file name in a bundle.
pub const MANIFEST_FILE: &str = "manifest.json";
const CELLS_DIR: &str = "cells";
/// The largest manifest read: about a million cells' worth of names and
/// digests, far past any plan (`MAX_EXPANDED_STEPS` is 10,000).
pub const MAX_MANIFEST_BYTES: u64 = 64 << 20;

/// What a bundle holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: u32,
    /// The gameplan version that played the cells.
    pub gameplan: String,
    /// The plan's name and hash (of its validated model).
    pub plan: String,
    pub plan_hash: String,
    /// `K/N`.
    pub shard: String,
    /// The cells played, with a result.
    pub cells: Vec<BundleCell>,
    /// The slice's cells that ended without a result, and how they ended.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unplayed: Vec<UnplayedCell>,
    /// A paid plan's shard: the prepared job it played for (its cells were
    /// played free; the merge delivers them to this job).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prepared: Option<super::prepared::PreparedRef>,
    /// The durations file the slices were cut by (its digest), when they
    /// were cut by time, not by a hash of each cell's id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<String>,
}

/// One cell in a bundle.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BundleCell {
    /// The cell's id, e.g. `play[kid,jev]`.
    pub id: String,
    /// Its directory in the bundle, `cells/<dir>`.
    pub dir: String,
    /// The reuse key it was played under, and that key's digest.
    pub key: ReuseKey,
    pub key_digest: String,
    pub files: Vec<BundleFile>,
    /// How long it took to play, when it was played (not reused) here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
}

/// One file of a cell.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BundleFile {
    /// Relative to the cell's directory, `/`-separated.
    pub path: String,
    pub size: u64,
    pub sha256: String,
}

/// A cell of the slice that has no result in the bundle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnplayedCell {
    pub id: String,
    /// How its step ended (`failed`, `interrupted`, …).
    pub state: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// A bundle read from disk and checked.
#[derive(Debug, Clone)]
pub struct Bundle {
    pub dir: PathBuf,
    pub manifest: Manifest,
}

/// Why a bundle cannot be read or written.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    #[error("cannot {action} {}: {error}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{}: {problem}", dir.display())]
    Invalid { dir: PathBuf, problem: String },
}

fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> BundleError {
    let path = path.to_path_buf();
    move |error| BundleError::Io {
        action,
        path,
        error,
    }
}

/// What a shard's run left, for its bundle.
pub struct Played<'a> {
    pub plan: &'a str,
    pub plan_hash: &'a str,
    pub shard: String,
    /// Each cell of the slice: its id, and its key digest when it ended
    /// with a stored result.
    pub cells: Vec<(String, Option<String>, UnplayedCell)>,
    /// The prepared job a paid plan's shard played for.
    pub prepared: Option<super::prepared::PreparedRef>,
    /// See [`Manifest::partition`].
    pub partition: Option<String>,
    /// How long each cell played here took, by id.
    pub durations: std::collections::BTreeMap<String, u64>,
}

impl Bundle {
    /// Writes the bundle of `played` into `dir` (replacing a bundle there),
    /// each cell's files taken from `store`. A cell whose result is not in
    /// the store (a step that cannot be reused) is listed as unplayed.
    pub fn write(dir: &Path, played: Played<'_>, store: &Store) -> Result<Bundle, BundleError> {
        let parent = dir.parent().unwrap_or(Path::new("."));
        fs::create_dir_all(parent).map_err(io("create", parent))?;
        let name = dir
            .file_name()
            .map_or_else(|| "bundle".into(), |n| n.to_string_lossy().into_owned());
        let temp = parent.join(format!(".{name}.tmp-{}", std::process::id()));
        if temp.exists() {
            fs::remove_dir_all(&temp).map_err(io("remove", &temp))?;
        }
        fs::create_dir_all(temp.join(CELLS_DIR)).map_err(io("create", &temp))?;
        let mut manifest = Manifest {
            format: BUNDLE_FORMAT,
            gameplan: env!("CARGO_PKG_VERSION").to_owned(),
            plan: played.plan.to_owned(),
            plan_hash: played.plan_hash.to_owned(),
            shard: played.shard,
            cells: Vec::new(),
            unplayed: Vec::new(),
            prepared: played.prepared,
            partition: played.partition,
        };
        for (id, digest, unplayed) in played.cells {
            let stored = digest.as_deref().and_then(|d| {
                let entry = store.lookup(d)?;
                let key = store.stored_key(d)?;
                Some((d.to_owned(), entry, key))
            });
            let Some((key_digest, entry, key)) = stored else {
                manifest.unplayed.push(unplayed);
                continue;
            };
            let rel = format!("{CELLS_DIR}/{}", file_name(&id));
            let cell_dir = temp.join(&rel);
            fs::create_dir_all(&cell_dir).map_err(io("create", &cell_dir))?;
            store
                .restore(&entry, &cell_dir)
                .map_err(|e| BundleError::Invalid {
                    dir: dir.to_path_buf(),
                    problem: format!("cell `{id}` could not be copied from the store: {e}"),
                })?;
            manifest.cells.push(BundleCell {
                duration_ms: played.durations.get(&id).copied(),
                id,
                dir: rel,
                key,
                key_digest,
                files: entry
                    .outputs
                    .iter()
                    .map(|o| BundleFile {
                        path: o.path.clone(),
                        size: o.size,
                        sha256: o.sha256.clone(),
                    })
                    .collect(),
            });
        }
        let text = serde_json::to_vec_pretty(&manifest).unwrap_or_default();
        let manifest_path = temp.join(MANIFEST_FILE);
        fs::write(&manifest_path, text).map_err(io("write", &manifest_path))?;
        if dir.exists() {
            fs::remove_dir_all(dir).map_err(io("replace", dir))?;
        }
        fs::rename(&temp, dir).map_err(io("move into place", dir))?;
        Ok(Bundle {
            dir: dir.to_path_buf(),
            manifest,
        })
    }

    /// Reads the bundle in `dir` and checks every file against its manifest.
    pub fn read(dir: &Path) -> Result<Bundle, BundleError> {
        let invalid = |problem: String| BundleError::Invalid {
            dir: dir.to_path_buf(),
            problem,
        };
        let path = dir.join(MANIFEST_FILE);
        let meta = fs::metadata(&path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                invalid(format!(
                    "no {MANIFEST_FILE}: not a shard's bundle (`plan run PLAN --shard K/N` writes one)"
                ))
            } else {
                io("read", &path)(e)
            }
        })?;
        if meta.len() > MAX_MANIFEST_BYTES {
            return Err(invalid(format!(
                "{MANIFEST_FILE} is {} bytes, over the {MAX_MANIFEST_BYTES}-byte limit: not a manifest gameplan wrote",
                meta.len()
            )));
        }
        let bytes = fs::read(&path).map_err(io("read", &path))?;
        let format = serde_json::from_slice::<serde_json::Value>(&bytes)
            .ok()
            .and_then(|v| v.get("format").and_then(serde_json::Value::as_u64));
        if format.is_some_and(|f| f != u64::from(BUNDLE_FORMAT)) {
            return Err(invalid(format!(
                "its manifest is of format {}, this gameplan reads format {BUNDLE_FORMAT}: merge with the gameplan that played it",
                format.unwrap_or_default()
            )));
        }
        let manifest: Manifest = serde_json::from_slice(&bytes)
            .map_err(|e| invalid(format!("{MANIFEST_FILE} is not a bundle manifest: {e}")))?;
        let bundle = Bundle {
            dir: dir.to_path_buf(),
            manifest,
        };
        bundle.check().map_err(invalid)?;
        Ok(bundle)
    }

    /// Every cell's key and files as the manifest says.
    fn check(&self) -> Result<(), String> {
        for cell in &self.manifest.cells {
            let expected = format!("{CELLS_DIR}/{}", file_name(&cell.id));
            if cell.dir != expected {
                return Err(format!(
                    "cell `{}` is in `{}`, not `{expected}`: the manifest was edited",
                    cell.id, cell.dir
                ));
            }
            if cell.key.digest() != cell.key_digest {
                return Err(format!(
                    "cell `{}`'s key is not the digest {} it claims: the manifest was edited",
                    cell.id, cell.key_digest
                ));
            }
            let base = self.dir.join(&cell.dir);
            let paths: Vec<&str> = cell.files.iter().map(|f| f.path.as_str()).collect();
            for file in &cell.files {
                let path = base.join(&file.path);
                match fs::symlink_metadata(&path) {
                    Ok(meta) if meta.is_file() && meta.len() == file.size => {}
                    Ok(meta) if meta.is_file() => {
                        return Err(format!(
                            "{}/{} is {} bytes, the manifest says {}: the bundle was changed or cut short",
                            cell.dir,
                            file.path,
                            meta.len(),
                            file.size
                        ));
                    }
                    Ok(_) => {
                        return Err(format!("{}/{} is not a plain file", cell.dir, file.path));
                    }
                    Err(_) => {
                        return Err(format!(
                            "{}/{} is missing: the bundle was copied in part",
                            cell.dir, file.path
                        ));
                    }
                }
            }
            let hashes =
                hash_fresh(&base, &paths).map_err(|e| format!("cell `{}`: {e}", cell.id))?;
            for file in &cell.files {
                if hashes.get(&file.path) != Some(&file.sha256) {
                    return Err(format!(
                        "{}/{} does not have the sha256 the manifest says: the bundle was changed",
                        cell.dir, file.path
                    ));
                }
            }
        }
        Ok(())
    }
}

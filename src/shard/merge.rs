//! Bundles into one run: check that they are of this plan and this
//! gameplan and hold every cell exactly once, then put each cell into the
//! reuse store under the key it was played with, so the merge run reuses it
//! instead of playing it.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::json;

use super::bundle::Bundle;
use super::slice::slice_of;
use crate::reuse::Store;

/// Why bundles cannot be merged. Nothing has run when this is returned.
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    #[error(
        "{bundle} was played by gameplan {theirs}, this is {ours}: a cell's result may differ between versions, so bundles merge only with the gameplan that played them"
    )]
    Version {
        bundle: String,
        theirs: String,
        ours: String,
    },
    #[error(
        "{bundle} is of plan `{theirs_name}` ({theirs}), not this plan ({ours}): the plan, its vars or a file it names changed since the shard ran; run every shard of this plan again"
    )]
    Plan {
        bundle: String,
        theirs_name: String,
        theirs: String,
        ours: String,
    },
    #[error("cells in more than one bundle: {}; merge each shard's bundle once", list(.0))]
    Duplicate(Vec<String>),
    #[error("{} in no bundle: {}; run {} and merge again", crate::report::plural(.0.len(), "cell"), list(.0), .1)]
    Missing(Vec<String>, String),
    #[error("cells the plan does not have: {}; the bundles are of another version of the plan", list(.0))]
    Unknown(Vec<String>),
    #[error(
        "no bundle given: `gameplan plan merge PLAN BUNDLE...` takes the directories the shards wrote"
    )]
    NoBundle,
    #[error(
        "the shards were cut differently: {0}; run every shard with the same `--durations FILE` (or none)"
    )]
    Partition(String),
}

fn list(ids: &[String]) -> String {
    const SHOWN: usize = 20;
    let mut text = ids
        .iter()
        .take(SHOWN)
        .map(|id| format!("`{id}`"))
        .collect::<Vec<_>>()
        .join(", ");
    if ids.len() > SHOWN {
        let _ = write!(text, " and {} more", ids.len() - SHOWN);
    }
    text
}

/// Checks `bundles` against the plan whose hash is `plan_hash` and whose
/// cells are `expected` (instance ids, in the plan's order).
pub fn check(bundles: &[Bundle], plan_hash: &str, expected: &[String]) -> Result<(), MergeError> {
    if bundles.is_empty() {
        return Err(MergeError::NoBundle);
    }
    let ours = env!("CARGO_PKG_VERSION");
    for bundle in bundles {
        let m = &bundle.manifest;
        let name = bundle.dir.display().to_string();
        if m.gameplan != ours {
            return Err(MergeError::Version {
                bundle: name,
                theirs: m.gameplan.clone(),
                ours: ours.to_owned(),
            });
        }
        if m.plan_hash != plan_hash {
            return Err(MergeError::Plan {
                bundle: name,
                theirs_name: m.plan.clone(),
                theirs: m.plan_hash.clone(),
                ours: plan_hash.to_owned(),
            });
        }
    }
    let cut = |b: &Bundle| {
        b.manifest.partition.as_ref().map_or_else(
            || "by hash".to_owned(),
            |d| format!("by durations file {d}"),
        )
    };
    if let Some(other) = bundles.iter().find(|b| cut(b) != cut(&bundles[0])) {
        return Err(MergeError::Partition(format!(
            "{} {}, {} {}",
            bundles[0].dir.display(),
            cut(&bundles[0]),
            other.dir.display(),
            cut(other)
        )));
    }
    let mut holders: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for bundle in bundles {
        for cell in &bundle.manifest.cells {
            holders
                .entry(cell.id.as_str())
                .or_default()
                .push(bundle.manifest.shard.as_str());
        }
    }
    let duplicated: Vec<String> = holders
        .iter()
        .filter(|(_, shards)| shards.len() > 1)
        .map(|(id, shards)| format!("{id} (shards {})", shards.join(", ")))
        .collect();
    if !duplicated.is_empty() {
        return Err(MergeError::Duplicate(duplicated));
    }
    let unknown: Vec<String> = holders
        .keys()
        .filter(|id| !expected.iter().any(|e| e == *id))
        .map(|id| (*id).to_owned())
        .collect();
    if !unknown.is_empty() {
        return Err(MergeError::Unknown(unknown));
    }
    let missing: Vec<&String> = expected
        .iter()
        .filter(|id| !holders.contains_key(id.as_str()))
        .collect();
    if !missing.is_empty() {
        return Err(MergeError::Missing(
            missing.iter().map(|id| why_missing(id, bundles)).collect(),
            which_shards(&missing, bundles),
        ));
    }
    Ok(())
}

/// A missing cell, with how it ended in its shard when that shard said.
fn why_missing(id: &str, bundles: &[Bundle]) -> String {
    let ended = bundles
        .iter()
        .flat_map(|b| b.manifest.unplayed.iter().map(move |u| (b, u)))
        .find(|(_, u)| u.id == id);
    match ended {
        Some((bundle, unplayed)) => format!(
            "{id} ({} in shard {})",
            unplayed.state, bundle.manifest.shard
        ),
        None => id.to_owned(),
    }
}

/// Which shards hold the missing cells, when the bundles agree on N.
fn which_shards(missing: &[&String], bundles: &[Bundle]) -> String {
    let n: Option<u32> = bundles
        .first()
        .and_then(|b| b.manifest.shard.split_once('/'))
        .and_then(|(_, n)| n.parse().ok());
    let agree = n.is_some_and(|n| {
        bundles
            .iter()
            .all(|b| b.manifest.shard.ends_with(&format!("/{n}")))
    });
    // Cut by time, a cell's slice depends on the durations file.
    let by_hash = bundles.iter().all(|b| b.manifest.partition.is_none());
    match n.filter(|_| agree && by_hash) {
        Some(n) => {
            let mut shards: Vec<u32> = missing.iter().map(|id| slice_of(id, n)).collect();
            shards.sort_unstable();
            shards.dedup();
            shards
                .iter()
                .map(|k| format!("`--shard {k}/{n}`"))
                .collect::<Vec<_>>()
                .join(", ")
        }
        None => "the shards that hold them".to_owned(),
    }
}

/// How long each cell of `bundles` took where it was played, over what
/// `earlier` knew (a cell reused in its shard keeps its earlier time).
pub fn durations(
    plan: &str,
    bundles: &[Bundle],
    earlier: Option<super::durations::Durations>,
) -> super::durations::Durations {
    let mut durations = earlier.unwrap_or_default();
    durations.format = super::durations::DURATIONS_FORMAT;
    plan.clone_into(&mut durations.plan);
    for cell in bundles.iter().flat_map(|b| &b.manifest.cells) {
        if let Some(ms) = cell.duration_ms {
            durations.cells.insert(cell.id.clone(), ms);
        }
    }
    durations
}

/// Puts every cell of `bundles` into `store` under its key. Returns how
/// many cells were imported.
pub fn import(bundles: &[Bundle], store: &Store) -> Result<usize, String> {
    let mut count = 0;
    for bundle in bundles {
        for cell in &bundle.manifest.cells {
            let base = bundle.dir.join(&cell.dir);
            let paths: Vec<&str> = cell.files.iter().map(|f| f.path.as_str()).collect();
            let entry = store
                .put(
                    &cell.key,
                    &base,
                    &paths,
                    json!({ "step": cell.id, "shard": bundle.manifest.shard }),
                )
                .map_err(|e| {
                    format!(
                        "cannot store cell `{}` of {}: {e}",
                        cell.id,
                        bundle.dir.display()
                    )
                })?;
            if entry.key != cell.key_digest {
                return Err(format!(
                    "cell `{}` of {} was stored under {}, not the key {} it was played with",
                    cell.id,
                    bundle.dir.display(),
                    entry.key,
                    cell.key_digest
                ));
            }
            count += 1;
        }
    }
    Ok(count)
}

//! Slices balanced by time: how long each cell took when it last played,
//! as `plan merge` writes it (`<state dir>/shards/durations.json`), and
//! the slices `--shard K/N --durations FILE` cuts from it.
//!
//! Without durations a cell's slice is a hash of its id: stable as cells
//! come and go, but blind to a cell that takes ten times the others. With
//! them the cells are dealt longest first, each to the slice with the least
//! time so far (the LPT rule: within 4/3 of the best split), so the shards
//! end together. A cell the file does not know counts as the mean of those
//! it does. Every shard must cut from the same file (the bundles say which,
//! and `plan merge` refuses shards cut differently); a cell may change
//! slice when the file or the cells change.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::reuse::sha256_hex;

/// The file's name in `<state dir>/shards/`.
pub const DURATIONS_FILE: &str = "durations.json";
/// Its format; another is refused.
pub const DURATIONS_FORMAT: u32 = 1;
/// The largest file read: 10,000 cells' ids and times take about 1 MB.
pub const MAX_DURATIONS_BYTES: u64 = 16 << 20;

/// How long each cell took, in milliseconds, by cell id.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Durations {
    pub format: u32,
    /// The plan's name, for the person reading it (a file of another plan
    /// only knows none of the cells).
    pub plan: String,
    pub cells: BTreeMap<String, u64>,
}

impl Durations {
    /// Reads `path`, naming what is wrong with it.
    pub fn read(path: &Path) -> Result<(Durations, String), String> {
        let meta = fs::metadata(path)
            .map_err(|e| format!("cannot read the durations file {}: {e}", path.display()))?;
        if meta.len() > MAX_DURATIONS_BYTES {
            return Err(format!(
                "the durations file {} is {} bytes, over the {MAX_DURATIONS_BYTES}-byte limit: \
                 not a file `plan merge` wrote",
                path.display(),
                meta.len()
            ));
        }
        let bytes = fs::read(path)
            .map_err(|e| format!("cannot read the durations file {}: {e}", path.display()))?;
        let durations: Durations = serde_json::from_slice(&bytes).map_err(|e| {
            format!(
                "{} is not a durations file `plan merge` wrote: {e}",
                path.display()
            )
        })?;
        if durations.format != DURATIONS_FORMAT {
            return Err(format!(
                "{} is a durations file of format {}, this gameplan reads format \
                 {DURATIONS_FORMAT}",
                path.display(),
                durations.format
            ));
        }
        // Which file cut the slices, as the bundles record it.
        let digest = sha256_hex(&bytes)[..16].to_owned();
        Ok((durations, digest))
    }

    /// Writes the file whole (a temporary file renamed into place).
    pub fn write(&self, path: &Path) -> Result<(), String> {
        let fail = |e: std::io::Error| format!("cannot write {}: {e}", path.display());
        if let Some(dir) = path.parent() {
            fs::create_dir_all(dir).map_err(fail)?;
        }
        let temporary: PathBuf = path.with_extension(format!("json.{}", std::process::id()));
        let bytes = serde_json::to_vec_pretty(self).map_err(|e| e.to_string())?;
        fs::write(&temporary, bytes).map_err(fail)?;
        fs::rename(&temporary, path).map_err(fail)
    }

    /// The time counted for `id`: its own, else the mean of the known
    /// ones (1 ms when none is known, so every cell weighs the same).
    fn of(&self, id: &str, mean: u64) -> u64 {
        self.cells.get(id).copied().unwrap_or(mean).max(1)
    }

    /// The 1-based slice of `n` each of `cells` falls in, by time.
    pub fn slices(&self, cells: &[String], n: u32) -> BTreeMap<String, u32> {
        let known: Vec<u64> = cells
            .iter()
            .filter_map(|c| self.cells.get(c).copied())
            .collect();
        let mean = if known.is_empty() {
            1
        } else {
            known.iter().sum::<u64>() / known.len() as u64
        };
        let mut order: Vec<(&String, u64)> = cells.iter().map(|c| (c, self.of(c, mean))).collect();
        // Longest first; ties by id, so every shard deals the same.
        order.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        let mut load = vec![0_u64; n.max(1) as usize];
        let mut slices = BTreeMap::new();
        for (cell, time) in order {
            let (least, _) = load
                .iter()
                .enumerate()
                .min_by_key(|(i, total)| (**total, *i))
                .unwrap_or((0, &0));
            load[least] += time;
            slices.insert(cell.clone(), u32::try_from(least).unwrap_or(0) + 1);
        }
        slices
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("play[p,c,{i}]")).collect()
    }

    #[test]
    fn slices_by_time_end_together_where_a_hash_would_not() {
        let cells = ids(8);
        // One cell takes as long as the seven others.
        let mut durations = Durations {
            format: DURATIONS_FORMAT,
            plan: "p".into(),
            cells: cells.iter().map(|c| (c.clone(), 1_000)).collect(),
        };
        durations.cells.insert(cells[0].clone(), 7_000);
        let slices = durations.slices(&cells, 2);
        let time = |k: u32| -> u64 {
            slices
                .iter()
                .filter(|(_, s)| **s == k)
                .map(|(c, _)| durations.cells[c])
                .sum()
        };
        assert_eq!((time(1), time(2)), (7_000, 7_000), "{slices:?}");
        assert_eq!(slices.len(), 8);
        // Every shard cuts the same from the same file.
        assert_eq!(durations.slices(&cells, 2), slices);
    }

    #[test]
    fn unknown_cells_weigh_the_mean_and_none_known_deals_them_evenly() {
        let cells = ids(6);
        let empty = Durations::default();
        let slices = empty.slices(&cells, 3);
        for k in 1..=3 {
            assert_eq!(slices.values().filter(|s| **s == k).count(), 2);
        }
        let some = Durations {
            format: DURATIONS_FORMAT,
            plan: "p".into(),
            cells: [(cells[0].clone(), 4_000), (cells[1].clone(), 2_000)]
                .into_iter()
                .collect(),
        };
        // The four unknown weigh 3,000 each: 4,000 + 2,000 + 12,000 over
        // three slices is 6,000 each.
        let slices = some.slices(&cells, 3);
        let weight = |c: &String| some.cells.get(c).copied().unwrap_or(3_000);
        for k in 1..=3 {
            let total: u64 = slices
                .iter()
                .filter(|(_, s)| **s == k)
                .map(|(c, _)| weight(c))
                .sum();
            assert_eq!(total, 6_000, "slice {k}: {slices:?}");
        }
    }

    #[test]
    fn a_file_of_another_format_or_past_the_limit_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(DURATIONS_FILE);
        let d = Durations {
            format: DURATIONS_FORMAT,
            plan: "p".into(),
            cells: BTreeMap::new(),
        };
        d.write(&path).unwrap();
        assert_eq!(Durations::read(&path).unwrap().0, d);
        fs::write(&path, r#"{"format": 2, "plan": "p", "cells": {}}"#).unwrap();
        let e = Durations::read(&path).unwrap_err();
        assert!(e.contains("format 2"), "{e}");
        fs::write(&path, "[]").unwrap();
        let e = Durations::read(&path).unwrap_err();
        assert!(e.contains("not a durations file"), "{e}");
        fs::File::create(&path)
            .unwrap()
            .set_len(MAX_DURATIONS_BYTES + 1)
            .unwrap();
        let e = Durations::read(&path).unwrap_err();
        assert!(e.contains("over the"), "{e}");
    }
}

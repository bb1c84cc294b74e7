//! `gameplan gc [--keep-runs N] [--max-store SIZE] [--include-unfinished]
//! [--dry-run] [--json]`:
//! removes old runs and trims the result store.
//!
//! What is never removed, and why:
//! - the `--keep-runs` newest runs, whatever their state;
//! - a live run (a process holds its plan's lock and names it, or the lock
//!   does not say whom it holds): its files are being written;
//! - an unfinished run that `plan resume` can still continue (its plan
//!   hashes as it did): removing it would lose what was done and, for a
//!   paid plan, the idempotency keys that prevent a double charge; nor one
//!   whose plan file is gone or does not load now (another branch may be
//!   checked out, a secret missing from this shell). An unfinished run whose
//!   plan loads and hashes otherwise can never be resumed, so it goes like
//!   a finished one, and so does every unfinished one with
//!   `--include-unfinished`; the plan's lock is held while one goes, so no
//!   resume can start on it meanwhile;
//! - a run whose journal this gameplan cannot read (maybe a newer one's);
//! - `store/last/`, the reuse keys `plan explain` compares against to say why
//!   a step is not reused: it lives in the store, not in the runs, and is
//!   small, so neither limit touches it;
//! - `units/`, the small values step kinds keep under keys of their own
//!   ([`crate::reuse::UnitStore`]): a few hundred bytes per key, one more
//!   only when a unit's content changes, not per run; `--max-store` counts
//!   only `store/`, and `gc` never trims `units/`.
//!
//! The store is trimmed least recently used first (a run records the
//! entries it reused in the store's index; an old-layout entry's
//! `entry.json` mtime is refreshed) until it fits `--max-store`; entries
//! used since the oldest live run started are kept, as it may be restoring
//! them. A removed entry is a miss next time: the step runs again. Every
//! `gc` that is not a dry run compacts the index (one record per entry,
//! blobs no entry names deleted) unless a run holds it. Partial files
//! abandoned by killed runs are swept whatever the limit.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::Context;
use super::plan_runs::{Resumability, dirs};

use crate::exit_code::{Done, Failure};
use crate::journal::run::{RunDir, RunHistory, run_ids};
use crate::journal::{LockHolder, LockStatus, RunLock, this_host};
use crate::report::gc::{GcReport, KeptRun, RemovedRun, RunsFreed, StoreFreed};
use crate::reuse::{Store, dir_size};

/// A run being removed is renamed to this prefix first, so a `gc` killed
/// midway leaves no half-removed run that `plan runs` would list as damaged;
/// the next `gc` finishes removing it.
const TRASH_PREFIX: &str = ".gc-trash-";

/// What `gameplan gc` was asked to do.
pub struct GcArgs<'a> {
    pub keep_runs: usize,
    pub max_store: Option<u64>,
    pub include_unfinished: bool,
    pub dry_run: bool,
    pub json: bool,
    pub state_dir: Option<&'a Path>,
}

/// Reads `500M`, `2G`, `1.5GiB`, `4096`: bytes, or K, M, G, T (powers of
/// 1024, with or without `B` / `iB`).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let trimmed = text.trim();
    let split = trimmed
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(split);
    let power = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 1,
        "m" | "mb" | "mib" => 2,
        "g" | "gb" | "gib" => 3,
        "t" | "tb" | "tib" => 4,
        _ => {
            return Err(format!(
                "`{text}` is not a size: write bytes, or a number with K, M, G or T (e.g. 500M, 2G)"
            ));
        }
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("`{text}` is not a size: e.g. 500M, 2G, 1048576"))?;
    let bytes = value * 1024f64.powi(power);
    if !bytes.is_finite() || bytes >= 18e18 {
        return Err(format!("`{text}` is too large a size"));
    }
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "checked finite, non-negative (no sign is parsed) and below u64::MAX"
    )]
    Ok(bytes.round() as u64)
}

/// The locks of the state dir that are held right now, by whom (`None`:
/// the lock file does not say).
fn live_holders(state_dir: &Path) -> Vec<Option<LockHolder>> {
    let locks = state_dir.join("locks");
    std::fs::read_dir(&locks)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let hash = name.strip_suffix(".lock")?.to_owned();
            match RunLock::status(&locks, &hash) {
                Ok(LockStatus::Held { holder }) => Some(holder),
                _ => None,
            }
        })
        .collect()
}

/// Removes a run's directory: renamed aside first, then deleted.
fn remove_run(state_dir: &Path, run_id: &str) -> std::io::Result<()> {
    let dir = RunDir::new(state_dir, run_id).dir;
    let trash = state_dir
        .join("runs")
        .join(format!("{TRASH_PREFIX}{run_id}"));
    std::fs::rename(&dir, &trash)?;
    std::fs::remove_dir_all(&trash)
}

/// Finishes removals a killed `gc` left behind.
fn empty_trash(state_dir: &Path) {
    for entry in std::fs::read_dir(state_dir.join("runs"))
        .into_iter()
        .flatten()
        .flatten()
    {
        if entry
            .file_name()
            .to_string_lossy()
            .starts_with(TRASH_PREFIX)
        {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

pub fn run(cx: &Context, args: &GcArgs<'_>) -> Done {
    let (root, state_dir) = dirs(args.state_dir);
    let mut problems = Vec::new();
    if !args.dry_run {
        empty_trash(&state_dir);
    }
    let runs = collect_runs(cx, root, &state_dir, args, &mut problems);
    let store = trim_store(&state_dir, args, &mut problems);
    let report = GcReport {
        dry_run: args.dry_run,
        state_dir: state_dir.display().to_string(),
        runs,
        store,
    };
    if args.json {
        let mut doc = serde_json::to_value(&report).unwrap_or_default();
        doc["problems"] = serde_json::json!(problems);
        cx.console.json(&doc);
    } else {
        cx.console.out(&crate::report::gc::text(&report));
    }
    // What could not be removed is an environment problem (permissions, a
    // busy file system): exit 3, as for any environment error.
    if problems.is_empty() {
        Ok(())
    } else {
        let mut warnings = String::new();
        for problem in &problems {
            let _ = writeln!(warnings, "warning: {problem}");
        }
        Err(Failure::plan(warnings))
    }
}

fn collect_runs(
    cx: &Context,
    root: PathBuf,
    state_dir: &Path,
    args: &GcArgs<'_>,
    problems: &mut Vec<String>,
) -> RunsFreed {
    let ids = run_ids(state_dir);
    let old = ids.len().saturating_sub(args.keep_runs);
    let mut resumability = Resumability::new(cx, root);
    let mut freed = RunsFreed {
        removed: Vec::new(),
        removed_bytes: 0,
        kept: ids.len(),
        kept_old: Vec::new(),
    };
    let gc_holder = LockHolder {
        pid: std::process::id(),
        host: this_host(),
        started_at: crate::engine::now(),
        run_id: "(gameplan gc)".into(),
    };
    for id in &ids[..old] {
        let keep = |reason| KeptRun {
            run_id: id.clone(),
            reason,
        };
        let Ok(history) = RunHistory::read(&RunDir::new(state_dir, id).journal()) else {
            freed.kept_old.push(keep("unreadable"));
            continue;
        };
        let locks = state_dir.join("locks");
        let live = match RunLock::status(&locks, &history.plan_hash) {
            Ok(LockStatus::Held { holder: Some(h) }) => h.run_id == history.run_id,
            Ok(LockStatus::Held { holder: None }) | Err(_) => true,
            Ok(LockStatus::Free) => false,
        };
        if live {
            freed.kept_old.push(keep("live"));
            continue;
        }
        let row = resumability.row(state_dir, &history);
        if row.state.is_open() && !args.include_unfinished {
            if row.resumable {
                freed.kept_old.push(keep("resumable"));
                continue;
            }
            if !resumability.plan_changed(&history) {
                freed.kept_old.push(keep("plan_unreadable"));
                continue;
            }
        }
        let bytes = dir_size(&RunDir::new(state_dir, id).dir);
        if !args.dry_run {
            // An open run could be resumed by a process starting now if its
            // plan changed back; the plan's lock shuts that out while it goes.
            let lock = row
                .state
                .is_open()
                .then(|| RunLock::acquire(&locks, &history.plan_hash, &gc_holder));
            if matches!(lock, Some(Err(_))) {
                // Another run of its plan started meanwhile.
                freed.kept_old.push(keep("live"));
                continue;
            }
            let removed = remove_run(state_dir, id);
            drop(lock);
            if let Err(e) = removed {
                problems.push(format!("cannot remove run {id}: {e}"));
                continue;
            }
        }
        freed.removed_bytes += bytes;
        freed.kept -= 1;
        freed.removed.push(RemovedRun {
            run_id: id.clone(),
            plan: history.plan.clone(),
            status: row.status_text(),
            bytes,
        });
    }
    freed
}

fn trim_store(state_dir: &Path, args: &GcArgs<'_>, problems: &mut Vec<String>) -> StoreFreed {
    let store = Store::open(state_dir);
    let mut entries = store.entries();
    // Oldest use first; the digest breaks ties so the order is stable.
    entries.sort_by(|a, b| {
        a.last_used
            .cmp(&b.last_used)
            .then_with(|| a.digest.cmp(&b.digest))
    });
    let total: u64 = entries.iter().map(|e| e.bytes).sum();
    let mut freed = StoreFreed {
        limit_bytes: args.max_store,
        removed: 0,
        removed_bytes: 0,
        kept: entries.len(),
        kept_bytes: total,
        kept_in_use: 0,
        abandoned_removed: 0,
    };
    if !args.dry_run {
        // Partial entries of killed runs count toward nothing and are
        // never read; each sweep removes a bounded batch.
        loop {
            let swept = store.sweep_abandoned_temp_dirs();
            freed.abandoned_removed += swept;
            if swept == 0 {
                break;
            }
        }
    }
    let Some(limit) = args.max_store else {
        // Superseded records and use marks fold into one record per entry.
        if !args.dry_run
            && let Err(e) = store.compact()
        {
            problems.push(format!("cannot compact the store index: {e}"));
        }
        return freed;
    };
    // Entries used since the oldest live run started may be the ones it is
    // restoring; a lock that does not say who holds it protects them all.
    let in_use_since = live_holders(state_dir)
        .iter()
        .map(|holder| {
            holder
                .as_ref()
                .and_then(|h| humantime::parse_rfc3339_weak(&h.started_at).ok())
                .unwrap_or(SystemTime::UNIX_EPOCH)
        })
        .min();
    let mut going = std::collections::BTreeSet::new();
    for entry in &entries {
        if freed.kept_bytes <= limit {
            break;
        }
        if in_use_since.is_some_and(|since| entry.last_used >= since) {
            freed.kept_in_use += 1;
            continue;
        }
        going.insert(entry.digest.clone());
        freed.removed += 1;
        freed.removed_bytes += entry.bytes;
        freed.kept -= 1;
        freed.kept_bytes -= entry.bytes;
    }
    // One rewrite of the index for all of them (and the old layout's
    // directories among them), not one per entry.
    if !args.dry_run
        && let Err(e) = store.remove_entries(&going)
    {
        problems.push(format!("cannot remove {} stored results: {e}", going.len()));
    }
    freed
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes_parse_as_people_write_them() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("500M"), Ok(500 << 20));
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert_eq!(parse_size("2gb"), Ok(2 << 30));
        assert_eq!(parse_size("1.5GiB"), Ok(3 << 29));
        assert_eq!(parse_size("10k"), Ok(10 << 10));
        assert_eq!(parse_size("12B"), Ok(12));
        for bad in ["", "M", "500X", "-1G", "1.2.3M", "99999999T"] {
            assert!(parse_size(bad).is_err(), "{bad:?} parsed");
        }
    }
}

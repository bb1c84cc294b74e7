//! `gameplan gc`: what was (or, with `--dry-run`, would be) freed, in counts
//! and human-readable sizes, and the same as a JSON document.

use std::fmt::Write as _;

use serde::Serialize;

/// One run `gc` removes.
#[derive(Debug, Clone, Serialize)]
pub struct RemovedRun {
    pub run_id: String,
    pub plan: String,
    /// Its state as `plan runs` words it (`failed (exit 1)`, …).
    pub status: String,
    pub bytes: u64,
}

/// A run `gc` keeps although it is older than the `--keep-runs` newest.
#[derive(Debug, Clone, Serialize)]
pub struct KeptRun {
    pub run_id: String,
    /// Why: `live` (a process holds its lock), `resumable` (unfinished and
    /// `plan resume` can still continue it), `unreadable` (a journal this
    /// gameplan cannot read, maybe a newer one's), `plan_unreadable`
    /// (unfinished, and its plan file is gone or does not load now, so
    /// whether it could be resumed is unknown).
    pub reason: &'static str,
}

#[derive(Debug, Clone, Serialize)]
pub struct RunsFreed {
    pub removed: Vec<RemovedRun>,
    pub removed_bytes: u64,
    /// Runs left, the kept old ones included.
    pub kept: usize,
    pub kept_old: Vec<KeptRun>,
}

#[derive(Debug, Clone, Serialize)]
pub struct StoreFreed {
    /// `--max-store`, when given.
    pub limit_bytes: Option<u64>,
    pub removed: usize,
    pub removed_bytes: u64,
    pub kept: usize,
    pub kept_bytes: u64,
    /// Entries kept over the limit because a live run may be restoring them.
    pub kept_in_use: usize,
    /// Partial entries left by runs killed while storing, removed (not
    /// counted on a dry run).
    pub abandoned_removed: usize,
}

/// The document `gameplan gc --json` prints.
#[derive(Debug, Clone, Serialize)]
pub struct GcReport {
    pub dry_run: bool,
    pub state_dir: String,
    pub runs: RunsFreed,
    pub store: StoreFreed,
}

/// Bytes for people, in powers of 1024 as `--max-store` reads them: `512 B`,
/// `1.5 KiB`, `498.2 MiB`, `2.0 GiB`.
pub fn bytes_text(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    #[expect(clippy::cast_precision_loss, reason = "display only")]
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// Why old runs were kept, counted per reason, in words.
fn kept_old_text(kept_old: &[KeptRun]) -> Vec<String> {
    let count = |reason: &str| kept_old.iter().filter(|k| k.reason == reason).count();
    let unfinished = |n| plural(n, "old unfinished run", "old unfinished runs");
    let mut kept = Vec::new();
    match count("resumable") {
        0 => {}
        n => kept.push(format!("{} that can still be resumed", unfinished(n))),
    }
    match count("plan_unreadable") {
        0 => {}
        n => kept.push(format!("{} whose plan does not load now", unfinished(n))),
    }
    match count("live") {
        0 => {}
        n => kept.push(format!("{} running now", plural(n, "run", "runs"))),
    }
    match count("unreadable") {
        0 => {}
        n => kept.push(format!(
            "{} with a journal this gameplan cannot read",
            plural(n, "run", "runs")
        )),
    }
    kept
}

pub fn text(report: &GcReport) -> String {
    let verb = if report.dry_run {
        "would remove"
    } else {
        "removed"
    };
    let runs = &report.runs;
    let mut out = format!(
        "{verb} {} ({}); {} left",
        plural(runs.removed.len(), "run", "runs"),
        bytes_text(runs.removed_bytes),
        plural(runs.kept, "run", "runs"),
    );
    let kept = kept_old_text(&runs.kept_old);
    if !kept.is_empty() {
        let _ = write!(out, ", kept too: {}", kept.join(", "));
    }
    out.push('\n');
    for run in &runs.removed {
        let _ = writeln!(
            out,
            "  {} {:<16} {:<24} {}",
            run.run_id,
            run.plan,
            run.status,
            bytes_text(run.bytes)
        );
    }
    let store = &report.store;
    let holds = format!(
        "the store holds {} ({})",
        plural(store.kept, "result", "results"),
        bytes_text(store.kept_bytes),
    );
    match store.limit_bytes {
        Some(limit) => {
            let _ = write!(
                out,
                "{verb} {} ({}), least recently used first; {holds}, limit {}",
                plural(store.removed, "stored result", "stored results"),
                bytes_text(store.removed_bytes),
                bytes_text(limit)
            );
        }
        None => {
            let _ = write!(out, "{holds}; `--max-store SIZE` trims it");
        }
    }
    if store.kept_in_use > 0 {
        let _ = write!(
            out,
            "; {} over the limit kept: a live run may be restoring them",
            plural(store.kept_in_use, "result", "results")
        );
    }
    if store.abandoned_removed > 0 {
        let _ = write!(
            out,
            "; removed {} left by killed runs",
            plural(store.abandoned_removed, "partial result", "partial results")
        );
    }
    out.push('\n');
    if report.dry_run {
        out.push_str("dry run: nothing was removed\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_in_binary_units() {
        assert_eq!(bytes_text(0), "0 B");
        assert_eq!(bytes_text(1023), "1023 B");
        assert_eq!(bytes_text(1536), "1.5 KiB");
        assert_eq!(bytes_text(500 * 1024 * 1024), "500.0 MiB");
        assert_eq!(bytes_text(2 << 30), "2.0 GiB");
    }
}

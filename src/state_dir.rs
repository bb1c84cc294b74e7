//! The state directory itself (`.gameplan/`, or `--state-dir`): what every
//! writer does before the first file goes in. What lives inside it belongs
//! to `journal` (runs, locks), `reuse` (store, units, hash cache), the
//! `local` backend (`ledger.sqlite`) and `plan run --shard` (`shards/`, where
//! a shard's bundle goes unless told).

use std::fs;
use std::io;
use std::path::Path;

/// The `.gitignore` written into a new state directory: everything in it is
/// local state (journals, logs, stored outputs), never something to commit,
/// and ignoring it from inside keeps `git status` clean without anyone
/// editing the repo's own `.gitignore` (DVC does the same with `.dvc/`).
pub const GITIGNORE: &str =
    "# Written by gameplan: this directory is local state; nothing here is committed.\n*\n";

/// Creates `dir` if it does not exist yet, with its `.gitignore`. An existing
/// directory is left as it is: whoever removed or edited its `.gitignore`
/// meant to.
pub fn prepare(dir: &Path) -> io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    fs::create_dir_all(dir)?;
    // Best effort: a missing .gitignore costs a noisy `git status`, not a run.
    let _ = fs::write(dir.join(".gitignore"), GITIGNORE);
    Ok(())
}

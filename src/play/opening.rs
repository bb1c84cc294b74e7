//! The opening of a game: `hello`, then `reset` twice with the cell's
//! seed. A game that fails there never played: what it tells
//! ([`NotPlayed`]: the cause, the limit it died under, the likely mistake)
//! is said instead of a finding. Two observations that differ are a
//! warning naming the field. Also why a cell could not be played at all
//! ([`PlayError`]) and the end a failure gives ([`quit_for`]), which the
//! cell, replay and simulate share.

use super::cell_report::NotPlayed;
use super::driver::{Driver, Failure, Hello, Seen, SpawnError};
use super::episode::{failure_finding, refused_opening};
use super::player::PlayerError;
use super::trace::QuitReason;

/// Why a cell could not be played at all (not a finding: the environment).
#[derive(Debug, thiserror::Error)]
pub enum PlayError {
    #[error(transparent)]
    Spawn(#[from] SpawnError),
    #[error("cannot write {path}: {source}")]
    Write {
        path: String,
        source: std::io::Error,
    },
    #[error("the player failed: {0}")]
    Player(#[from] PlayerError),
    /// The game never gave a first observation (simulate: its first game);
    /// a cell says so in its report instead.
    #[error("{0}")]
    NotPlayed(NotPlayed),
}

/// What runtimes say when they run out of memory.
const OUT_OF_MEMORY: &[&str] = &[
    "Could not reserve enough space",
    "insufficient memory for the Java Runtime",
    "Cannot allocate memory",
    // HotSpot's first line when it cannot start; under a memory limit,
    // the heap it could not reserve (it says so on stdout).
    "Error occurred during initialization of VM",
    "MemoryError",
    "std::bad_alloc",
    "out of memory",
    "Out of memory",
];

/// The limit a game that died before its first observation hit, named
/// with the plan key that raises it, when its stderr says so. The words
/// are the runtimes' own (the JVM's "Could not reserve enough space for
/// object heap", glibc's "Cannot allocate memory", Python's `MemoryError`,
/// "Too many open files", a failed fork's "Resource temporarily
/// unavailable"), and a limit only counts when gameplan set it: a game out
/// of memory with no limit is the game's problem, not the plan's.
fn limit_hit(stderr: &str, limits: super::driver::ResourceLimits) -> Option<String> {
    // The game's own line that says it, quoted after the hint.
    let said = |words: &[&str]| {
        stderr
            .lines()
            .find(|line| words.iter().any(|w| line.contains(w)))
            .map(|line| {
                format!(
                    " (the game said: `{}`)",
                    crate::text::cut(line.trim().trim_matches('"'), 120)
                )
            })
    };
    if let Some(bytes) = limits.address_space
        && let Some(quoted) = said(OUT_OF_MEMORY)
    {
        let size = |b: u64| super::stdio::limits::size_text(b);
        return Some(format!(
            "the game ran out of memory under `game.limits.address_space` ({} of address space; a JVM or another runtime that reserves its heap up front needs more): raise it (`limits = {{ address_space = \"{}\" }}`) or lift it (`address_space = \"none\"`; `memory` limits what it uses){quoted}",
            size(bytes),
            size(bytes.saturating_mul(4))
        ));
    }
    if let Some(files) = limits.open_files
        && let Some(quoted) = said(&["Too many open files"])
    {
        return Some(format!(
            "the game hit `game.limits.open_files` ({files}): raise it (`limits = {{ open_files = {} }}`) or lift it (\"none\"){quoted}",
            files * 4
        ));
    }
    if let Some(processes) = limits.processes
        && let Some(quoted) = said(&[
            "Resource temporarily unavailable",
            "unable to create native thread",
        ])
    {
        return Some(format!(
            "the game could not start a process or thread under `game.limits.processes` ({processes}): raise it or lift it (\"none\"){quoted}"
        ));
    }
    None
}

/// `hello` then `reset`: the first observation, or the failure that ended it.
/// A refusal of either is a protocol violation: nothing can be played.
pub async fn open(game: &mut impl Driver, seed: i64) -> (Hello, Result<Seen, Failure>) {
    let hello = match game.hello().await {
        Ok(Ok(hello)) => hello,
        Ok(Err(refusal)) => {
            return (
                Hello::default(),
                Err(refused_opening(game, "hello", &refusal.error)),
            );
        }
        Err(failure) => return (Hello::default(), Err(failure)),
    };
    let first = match game.reset(seed).await {
        Ok(Ok(first)) => Ok(first),
        Ok(Err(refusal)) => Err(refused_opening(game, "reset", &refusal.error)),
        Err(failure) => Err(failure),
    };
    (hello, first)
}

/// Which request of the opening failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Opening {
    /// `hello` or the first `reset`.
    First,
    /// The second `reset` (see [`reset_again`]).
    Again,
}

/// The second `reset`, with the same seed: the observation the cell plays
/// from, and a warning naming what differs from the first one's.
///
/// Why two: stuck detection and replay compare observation hashes, so a
/// game whose observation changes under the same seed (a clock, a counter
/// of resets) hides traps and never replays. One extra round trip says so
/// before play, by field, where only `replay` would have.
///
/// The trace stays right: it records this reset as a reset before step 1
/// (with its observation hash), so replay resets twice too, then acts, and
/// checks the observation the player started from.
pub(super) async fn reset_again(
    game: &mut impl Driver,
    seed: i64,
    first: Seen,
) -> Result<(Seen, Option<String>), (Failure, Opening)> {
    match game.reset(seed).await {
        Ok(Ok(second)) => {
            let warning = (second.hash != first.hash)
                .then(|| nondeterminism_warning(&first.raw, &second.raw, seed));
            Ok((second, warning))
        }
        Ok(Err(refusal)) => Err((
            refused_opening(game, "reset", &refusal.error),
            Opening::Again,
        )),
        Err(failure) => Err((failure, Opening::Again)),
    }
}

/// "`state.t` changes between two resets with seed 1 (…)": the first field
/// (in the game's own key order) whose value differs, with both values.
fn nondeterminism_warning(
    first: &serde_json::Value,
    second: &serde_json::Value,
    seed: i64,
) -> String {
    let mut differing = Vec::new();
    differences(first, second, "", &mut differing);
    let Some((path, a, b)) = differing.first() else {
        return format!(
            "the observation changes between two resets with seed {seed}: stuck detection \
             and replay need a deterministic observation"
        );
    };
    let shown = |v: Option<&serde_json::Value>| {
        v.map_or_else(
            || "absent".to_owned(),
            |v| crate::text::cut(&v.to_string(), 40),
        )
    };
    let also = match &differing[1..] {
        [] => String::new(),
        rest => {
            let names: Vec<String> = rest.iter().map(|(p, ..)| format!("`{p}`")).collect();
            format!("; {} too", crate::text::first_few(&names, 3, ", "))
        }
    };
    format!(
        "`{path}` changes between two resets with seed {seed} ({} then {}{also}): stuck \
         detection and replay need a deterministic observation",
        shown(a.as_ref()),
        shown(b.as_ref()),
    )
}

/// A differing leaf: its path, its value in the first and in the second.
type Difference = (String, Option<serde_json::Value>, Option<serde_json::Value>);

/// Every path where `a` and `b` differ, depth first in `a`'s key order
/// (keys only `b` has come last); arrays of the same length are compared
/// item by item (`actions[2]`), others as a whole.
fn differences(
    a: &serde_json::Value,
    b: &serde_json::Value,
    path: &str,
    out: &mut Vec<Difference>,
) {
    use serde_json::Value;
    let at = |path: &str, key: &str| {
        if path.is_empty() {
            key.to_owned()
        } else {
            format!("{path}.{key}")
        }
    };
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for (key, value) in x {
                let inner = at(path, key);
                match y.get(key) {
                    Some(other) => differences(value, other, &inner, out),
                    None => out.push((inner, Some(value.clone()), None)),
                }
            }
            for (key, value) in y {
                if !x.contains_key(key) {
                    out.push((at(path, key), None, Some(value.clone())));
                }
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                differences(p, q, &format!("{path}[{i}]"), out);
            }
        }
        _ if a != b => out.push((path.to_owned(), Some(a.clone()), Some(b.clone()))),
        _ => {}
    }
}

/// What a game that failed at `hello` or its first `reset` tells, for a
/// caller that opens games itself (simulate).
pub fn not_opened(failure: &Failure, limits: super::driver::ResourceLimits) -> NotPlayed {
    not_played_by(failure, Opening::First, limits, None)
}

/// What a cell whose game failed before its first observation tells: the
/// failure as a finding's title would say it, and the likely mistake.
pub(super) fn not_played_by(
    failure: &Failure,
    opening: Opening,
    limits: super::driver::ResourceLimits,
    page: Option<&super::driver::BrowserGame>,
) -> NotPlayed {
    let title = failure_finding(failure, 0, "", None, &[]).title;
    let stopped = match failure {
        Failure::Exited { status, during, .. } => {
            super::stdio::limits::stopped_by(status, limits).map(|limit| (limit, *during))
        }
        _ => None,
    };
    let mut cause = match stopped {
        // The limit and what happened; the advice is the hint.
        Some((limit, during)) => format!("the game {} during `{}`", limit.what(), during.name()),
        None => title
            .strip_prefix("The game")
            .map_or_else(|| title.clone(), |rest| format!("the game{rest}")),
    };
    if opening == Opening::Again {
        cause.push_str(" (the second `reset`)");
    }
    // A runtime that cannot start may say so on stdout (the JVM does).
    let said = [
        failure.stderr_tail().unwrap_or(""),
        failure.evidence().unwrap_or(""),
        &failure.stray_output().unwrap_or_default(),
    ]
    .join("\n");
    let hint = if let Some((limit, _)) = stopped {
        Some(limit.advice())
    } else if let Some(hint) = limit_hit(&said, limits) {
        Some(hint)
    } else if let Some(hint) = died_under(failure, limits) {
        Some(hint)
    } else if let Some(line) = failure.stray_output() {
        Some(format!(
            "the game printed this on stdout: `{}`; logs belong on stderr",
            crate::text::cut(&line, 80)
        ))
    } else {
        match (failure, opening) {
            // A page has no stdout to flush: it loaded too slowly, or its
            // scripts never let go.
            (Failure::Hang { during, waited }, _) if page.is_some() => Some(
                if *during == super::protocol::Op::Reset
                    && page.is_some_and(|p| *waited >= p.load_timeout)
                {
                    format!(
                        "the page {} did not finish loading within {} s: for a slower page raise \
                         `game.load_timeout`; check that its server answers",
                        page.map_or("", |p| p.url.as_str()),
                        waited.as_secs()
                    )
                } else {
                    "the page's scripts did not let the browser answer (a loop that never ends?); \
                     a slower page needs a longer `game.action_timeout`"
                        .to_owned()
                },
            ),
            (Failure::Hang { during, .. }, Opening::First) => {
                let mut hint =
                    "did the game flush stdout? (Python: `print(..., flush=True)` or `python3 -u`)"
                        .to_owned();
                // `hello`'s deadline includes the game's start-up.
                if *during == super::protocol::Op::Hello {
                    hint.push_str("; a game slower to start needs a longer `game.action_timeout`");
                }
                Some(hint)
            }
            (_, Opening::Again) => Some(
                "a game must accept `reset` at any time: gameplan resets twice with the same \
                 seed before play, to check that the first observation is deterministic"
                    .to_owned(),
            ),
            _ => None,
        }
    };
    NotPlayed {
        cause,
        hint,
        stderr_tail: failure
            .stderr_tail()
            .filter(|t| !t.trim().is_empty())
            .map(str::to_owned),
    }
}

/// What a game that died before its first observation for no reason it
/// gave ran under: a runtime behind a wrapper may die of a limit without a
/// word of it (a JVM whose stderr its launcher discards), so the limits in
/// force are named, and its own last words quoted, whatever they say.
fn died_under(failure: &Failure, limits: super::driver::ResourceLimits) -> Option<String> {
    let Failure::Exited { stderr_tail, .. } = failure else {
        return None;
    };
    let in_force = super::stdio::limits::in_force(limits)?;
    let last = stderr_tail
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty());
    let said = last.map_or_else(
        || "it wrote nothing on stderr".to_owned(),
        |line| format!("its stderr ended: `{}`", crate::text::cut(line, 160)),
    );
    Some(format!(
        "it ran under game.limits: {in_force}; if it needs more, raise the one it needs ({said})"
    ))
}

/// The end a failure gives: `crash` or `hang`.
pub fn quit_for(failure: &Failure) -> QuitReason {
    match failure {
        Failure::Hang { .. } => QuitReason::Hang,
        _ => QuitReason::Crash,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 15, item 8: the warning names the first differing field by its
    /// JSON path (the game's key order), both values, and the others.
    #[test]
    fn a_nondeterministic_observation_is_named_by_its_first_differing_path() {
        let a = serde_json::json!({"text": "Room 1", "actions": ["n", "s"], "state": {"t": 1.5, "hp": 3}});
        let b = serde_json::json!({"text": "Room 1", "actions": ["n", "e"], "state": {"t": 2.5, "hp": 3, "x": 0}});
        assert_eq!(
            nondeterminism_warning(&a, &b, 7),
            "`actions[1]` changes between two resets with seed 7 (\"s\" then \"e\"; `state.t`, \
             `state.x` too): stuck detection and replay need a deterministic observation"
        );
        let c = serde_json::json!({"text": "at 12:00:01", "actions": ["n"]});
        let d = serde_json::json!({"text": "at 12:00:02", "actions": ["n", "s"]});
        let mut found = Vec::new();
        differences(&c, &d, "", &mut found);
        let paths: Vec<&str> = found.iter().map(|(p, ..)| p.as_str()).collect();
        assert_eq!(
            paths,
            ["text", "actions"],
            "arrays of other lengths differ whole"
        );
        let mut none = Vec::new();
        differences(&c, &c.clone(), "", &mut none);
        assert!(none.is_empty());
    }
}

//! What the `play` and `simulate` kinds share: the plan's `[game]` as a
//! [`GameSpec`], the build hash their keys are made of (and the key as the
//! step's [`Reuse`]), the pool their game processes take a slot of, where
//! their files are restored, and the second Ctrl-C that kills their games.
//!
//! The build hash is everything that decides how the game behaves: the
//! content of `game.inputs`, the command, any repo file the command names
//! (`python3 examples/games/coins.py` keys on the script even when `inputs`
//! forgets it), the game's environment, limits and timeouts, for a browser
//! game its page, its settings and every file of its `serve` directory, and
//! for a built-in game its version and gameplan's. The output digests of the
//! steps it needs enter the key too, except the money steps': a paid cell
//! keys on what it plays, not on the purchase before it.

use std::time::Duration;

use serde_json::{Value, json};

use super::{KeyContext, Reuse, StepContext, StepError, Upstream, expand};
use crate::plan::model::{Driver, FlatTarget, Game, Plan};
use crate::play::GameSpec;
use crate::reuse::ReuseKey;

/// The plan's game, or why a playing step cannot run without one.
pub fn game_of(plan: &Plan) -> Result<&Game, StepError> {
    plan.game.as_ref().ok_or_else(|| {
        StepError("the plan has no `[game]`: add one with `command` (a stdio game) to play".into())
    })
}

/// The game to start: the plan's target, held as the plan's `[game]` says.
pub fn spec(cx: &StepContext) -> Result<GameSpec, StepError> {
    let game = game_of(&cx.plan)?;
    let mut spec = GameSpec::of(game.target.clone(), cx.root.clone(), &cx.env);
    if game.target.browser().is_some() && cx.plan.budget.video != Some(false) {
        spec.video = Some(
            cx.plan
                .budget
                .max_video_frames
                .unwrap_or(crate::plan::model::DEFAULT_MAX_VIDEO_FRAMES),
        );
    }
    spec.env.extend(game.env.clone());
    spec.goal.clone_from(&game.goal);
    spec.invariants.clone_from(&game.invariants);
    spec.limits.memory = game.limits.memory;
    spec.limits.address_space = game.limits.address_space;
    spec.limits.cpu_seconds = game.limits.cpu_seconds;
    spec.limits.processes = game.limits.processes;
    spec.limits.open_files = game.limits.open_files;
    spec.action_timeout = Duration::from_secs(game.action_timeout_secs.max(1));
    spec.stuck_after = game.stuck_after;
    Ok(spec)
}

/// The pool a playing step's game process takes a slot of: its driver's
/// (`play` for a stdio game, `browser` for a page).
pub fn resource(plan: &Plan) -> Option<&'static str> {
    Some(
        plan.game
            .as_ref()
            .map_or(Driver::default(), |g| g.target.driver())
            .row()
            .pool,
    )
}

/// A second Ctrl-C: every game (and browser) this gameplan started dies at once.
pub fn kill_now() {
    crate::play::driver::kill_now();
}

/// A playing step's files live in its own directory, and a reused one's
/// are restored there.
pub fn restore_base(cx: &StepContext) -> std::path::PathBuf {
    cx.step_dir.clone()
}

/// How a play cell or a simulated game plays: bumped whenever the same
/// build, persona, controller and seed would play differently or write
/// other files (a player's choices, the stuck rule, the trace or report
/// format), so a result stored by an older gameplan is never reused as if
/// it were this one's. 2: a cell resets after `stuck`, the trace records
/// resets and its timeouts, a persona's own seed seeds its player. 3: stuck
/// only where every offered action was tried, limits that measure use,
/// hermetic web cells that see the screen. 4: a browser cell's video and
/// screenshots are stored with it (an older entry restores a report
/// linking files it does not have).
const PLAY_SEMANTICS: u32 = 4;

/// A key of `kind` over the build hash and `settings`, with the digests of
/// the steps it needs that are not money steps (a paid cell keys on what it
/// plays, not on the purchase before it), or why it waits for them.
pub fn reuse(cx: &KeyContext<'_>, kind: &str, settings: &Value) -> Result<Reuse, StepError> {
    let game = game_of(cx.plan)?;
    let upstream: Vec<&Upstream> = cx
        .upstream
        .iter()
        .filter(|u| !u.kind.moves_money())
        .collect();
    if let Some(pending) = upstream.iter().find(|u| u.outputs.is_none()) {
        return Ok(Reuse::AfterUpstream(format!(
            "`{}` runs first; reused if its outputs come out the same",
            pending.id
        )));
    }
    let target = FlatTarget::of(&game.target);
    let builtin = target
        .command
        .first()
        .and_then(|c| c.strip_prefix("builtin:"))
        .map(|name| {
            json!({
                "name": name,
                "version": crate::games::find(name).map(|b| b.version),
                "gameplan": env!("CARGO_PKG_VERSION"),
            })
        });
    let mut key = ReuseKey::new(
        kind,
        json!({
            "game": {
                "driver": target.driver,
                "command": target.command,
                "url": target.url,
                "webdriver_url": target.webdriver_url,
                "serve": target.serve,
                "allow": target.allow,
                "keys": target.keys,
                "viewport": target.viewport,
                "probe": target.probe,
                "goal": game.goal,
                "invariants": game.invariants,
                "load_timeout": target.load_timeout_secs,
                "env": game.env,
                "limits": game.limits,
                "action_timeout": game.action_timeout_secs,
                "stuck_after": game.stuck_after,
                "builtin": builtin,
            },
            "step": settings.clone(),
            "semantics": PLAY_SEMANTICS,
        }),
    );
    if !target.more.is_empty() {
        // A driver's own keys (none of the first two drivers has any).
        key.settings["game"]["target"] = Value::Object(target.more.clone());
    }
    // A served directory is the build: every file of it is hashed.
    let served = target
        .serve
        .iter()
        .map(|dir| format!("{}/**", dir.trim_end_matches('/')));
    let patterns: Vec<String> = game.inputs.iter().cloned().chain(served).collect();
    let mut files = expand(cx.root, &patterns)?;
    // Repo files the command names are part of the build, listed or not
    // (and a browser game's page, when it is a repo path).
    let page = target.url.iter().filter(|u| !u.contains("://"));
    for word in target
        .command
        .iter()
        .chain(page)
        .filter(|w| !w.starts_with("builtin:"))
    {
        let relative = word.strip_prefix("./").unwrap_or(word);
        let path = cx.root.join(relative);
        if !relative.is_empty()
            && !std::path::Path::new(relative).is_absolute()
            && path.is_file()
            && path
                .canonicalize()
                .is_ok_and(|p| p.starts_with(cx.root.canonicalize().unwrap_or_default()))
        {
            files.push(relative.to_owned());
        }
    }
    files.sort();
    files.dedup();
    let mut hashes = cx
        .hashes
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    key.inputs = hashes
        .hash_all(cx.root, &files)
        .map_err(|e| StepError(e.to_string()))?;
    key.upstream = upstream
        .iter()
        .map(|u| (u.id.clone(), u.outputs.clone().unwrap_or_default()))
        .collect();
    Ok(Reuse::Key(key))
}

/// The files of `dir`, relative to it, sorted (a step's artifacts).
pub fn files_under(dir: &std::path::Path) -> Result<Vec<String>, StepError> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(at) = stack.pop() {
        let entries = std::fs::read_dir(&at)
            .map_err(|e| StepError(format!("cannot list {}: {e}", at.display())))?;
        for entry in entries.flatten() {
            let path = entry.path();
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                stack.push(path);
            } else if kind.is_file()
                && let Ok(relative) = path.strip_prefix(dir)
            {
                files.push(relative.to_string_lossy().replace('\\', "/"));
            }
        }
    }
    files.sort();
    Ok(files)
}

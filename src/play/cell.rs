//! One play cell: a persona plays a fresh game process with one controller,
//! until the game is done, patience or budget runs out, the game fails, or
//! a signal stops it; then the cell's files are written.
//!
//! Owns the cell's bounds (patience, `budget.max_actions`,
//! `max_wall_seconds`: all count the actions of the whole cell, every
//! episode), the reset rule (after a `stuck` finding the episode of any
//! player but `scripted` ends and, while the bounds allow another action,
//! the game is reset with the cell's seed and play goes on, so one trap
//! does not hide the rest of the game), the way-out rule (after
//! `stuck_after` unchanged observations the cell plays the offered actions
//! `Episode::way_out_to_try` names, `"by": "gameplan"` in the transcript,
//! before anything is `stuck`; a bound that runs out first leaves a note),
//! the goal (`game.goal` holding ends the cell `done`; `report.json`'s
//! `progress`), the interrupt rule (the turn in
//! flight finishes, then the cell ends `interrupted`), the confirmation of
//! a crash or hang (its inputs replayed once in a fresh game; one that
//! does not happen again is `unconfirmed`, low severity), and the
//! artifacts: `report.json`, `transcript.jsonl` (every observation and
//! action), `trace.jsonl` (what replay needs). `report.md` is rendered
//! from the report by `crate::report::play_cell`, called by whoever played
//! the cell. Does not own reuse or the journal: the `play` step kind
//! decides whether a cell runs at all.
//!
//! The opening (`hello`, then `reset` twice with the cell's seed) is
//! `opening`'s: a game that fails there never played, and the cell is
//! `not_played` (no finding; the cause and the likely mistake in the
//! report, and the step fails).

use std::collections::{BTreeMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::cell_report::{CellReport, CellState, GameInfo, Metrics, REPORT_FORMAT};
use super::controllers::{Controller, ControllerKind};
use super::driver::{Driver, Failure, GameSpec, Session};
use super::episode::{Episode, Stepped};
use super::findings::{Category, Evidence, FindingSet, Spotted};
use super::opening::{Opening, PlayError, not_played_by, open, quit_for, reset_again};
use super::player::{PlayEnd, Player, PlayerError, PlayerReport};
use super::players::PlayerSpec;
use super::trace::{QuitReason, Trace};

/// Everything one cell needs.
#[derive(Debug, Clone, PartialEq)]
pub struct CellSpec {
    pub game: GameSpec,
    /// The persona's slug.
    pub persona: String,
    pub player: PlayerSpec,
    pub controller: ControllerKind,
    /// Seeds the game (`reset`).
    pub seed: i64,
    /// Seeds the player and the selector: the cell's seed, unless the
    /// persona's player has a seed of its own (see `steps::play`).
    pub player_seed: i64,
    /// The persona's patience: actions before it quits bored.
    pub patience: u64,
    /// `budget.max_actions`, if any.
    pub max_actions: Option<u64>,
    /// `budget.max_wall_seconds`, if any.
    pub max_wall: Option<Duration>,
    /// Which play of its cell this is, under `repeat = N`.
    pub repeat: Option<super::cell_report::Repeat>,
}

/// What a cell produced.
#[derive(Debug, Clone)]
pub struct CellResult {
    pub report: CellReport,
    /// The files written, in `out_dir`.
    pub files: Vec<PathBuf>,
}

/// The names of the files of a cell: [`play_cell`] writes all but
/// `report.md`, which `report::play_cell::write_markdown` renders from the
/// report (play builds the report's data; report renders it).
pub const CELL_FILES: [&str; 4] = [
    "report.json",
    "report.md",
    "transcript.jsonl",
    "trace.jsonl",
];

/// What a browser cell writes besides [`CELL_FILES`]: its video (the
/// animation, or the `WebM` made of it) and its `screenshots/` directory.
/// Its report links them, so they are stored and restored with it.
pub const CELL_MEDIA: [&str; 3] = [
    super::webdriver::APNG,
    super::webdriver::WEBM,
    "screenshots",
];

/// Whether `rel` (relative to a cell's directory, `/`-separated) is one
/// of the cell's files: [`CELL_FILES`], its video, or a screenshot.
pub fn is_cell_output(rel: &str) -> bool {
    CELL_FILES.contains(&rel)
        || CELL_MEDIA.contains(&rel)
        || rel
            .strip_prefix("screenshots/")
            .is_some_and(|name| !name.is_empty() && !name.contains('/'))
}

/// Plays one cell and writes its files into `out_dir` (created if needed;
/// a browser game's screenshots go to `out_dir/screenshots/`).
/// When `cancel` turns true the turn in flight finishes and the cell ends
/// `interrupted`.
pub async fn play_cell(
    spec: &CellSpec,
    out_dir: &Path,
    cancel: tokio::sync::watch::Receiver<bool>,
) -> Result<CellResult, PlayError> {
    play_cell_watched(spec, out_dir, cancel, &mut Unwatched).await
}

/// Who follows a cell as it plays (a paid cell's backend run): told when
/// the opening is done and after every turn. Both are called on the cell's
/// task, between turns: they must not wait on anything slow.
pub trait CellWatch: Send {
    /// The game answered `hello` and its resets: play begins. Awaited
    /// before the first action; `false` stops the cell before it.
    fn opened(&mut self) -> Opened<'_>;
    /// A turn ended with `actions_taken` actions so far (every episode);
    /// `true` stops the cell after this turn, as an interrupt does.
    fn turned(&mut self, actions_taken: u64) -> bool;
    /// A turn's screenshot was saved (a browser game): its path relative
    /// to the cell's directory (`screenshots/step-0004.png`). Called before
    /// [`CellWatch::turned`]; `deliver` uploads the files after the cell,
    /// so a watch that ignores them loses nothing.
    fn screenshot(&mut self, _relative: &str) {}
}

/// What [`CellWatch::opened`] returns: whether the cell may play.
pub type Opened<'a> = std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send + 'a>>;

/// The watch of a free cell: nothing follows it.
struct Unwatched;

impl CellWatch for Unwatched {
    fn opened(&mut self) -> Opened<'_> {
        Box::pin(async { true })
    }

    fn turned(&mut self, _actions_taken: u64) -> bool {
        false
    }
}

/// [`play_cell`], telling `watch` of its opening and of every turn; a turn
/// after which `watch` says stop ends the cell `interrupted`, as `cancel`
/// does.
#[expect(
    clippy::too_many_lines,
    reason = "a cell from start to report, its steps in order, reads best in one place"
)]
pub async fn play_cell_watched(
    spec: &CellSpec,
    out_dir: &Path,
    cancel: tokio::sync::watch::Receiver<bool>,
    watch: &mut dyn CellWatch,
) -> Result<CellResult, PlayError> {
    let started = Instant::now();
    let controller_name = spec.controller.name();
    let mut trace = Trace::new(Trace::header(
        &spec.game,
        spec.seed,
        &spec.persona,
        controller_name,
    ));
    let mut transcript = Vec::with_capacity(16 * 1024);
    let mut game = Session::start(&spec.game, Some(out_dir)).await?;
    let mut metrics = Metrics::default();
    let (hello, opened) = open(&mut game, spec.seed).await;
    let opened = match opened {
        Ok(first) => reset_again(&mut game, spec.seed, first).await,
        Err(failure) => Err((failure, Opening::First)),
    };
    let mut warnings = Vec::new();
    let mut not_played = None;
    let mut progress = super::goal::Progress::default();
    let mut play_notes = Vec::new();
    let mut player = spec.player.build(spec.player_seed);
    let (end, findings, player_report) = match opened {
        // Not a finding: a game that never gave its first observation was
        // not played, so the cell fails (and is never reused) instead of
        // reporting a "crash" of a bridge that never worked.
        Err((failure, opening)) => {
            line(
                &mut transcript,
                &serde_json::json!({"step": 0, "failure": failure.describe()}),
            );
            not_played = Some(not_played_by(
                &failure,
                opening,
                spec.game.limits,
                spec.game.target.browser(),
            ));
            unplayed(&failure)
        }
        Ok((first, warning)) => {
            warnings.extend(warning);
            let opened_hash = first.hash.clone();
            let mut episode =
                Episode::new(first, &spec.persona, controller_name, spec.game.stuck_after);
            episode.set_goal(spec.game.goal.as_deref());
            episode.set_invariants(&spec.game.invariants);
            line(
                &mut transcript,
                &serde_json::json!({"hello": {"name": hello.name, "version": hello.version}}),
            );
            line(
                &mut transcript,
                &serde_json::json!({"step": 0, "observation": episode.current.raw}),
            );
            let end = play(
                spec,
                (&mut game, player.as_mut()),
                &mut episode,
                &mut metrics,
                &mut transcript,
                (&cancel, watch),
                started,
            )
            .await;
            let (end, detail) = ended_by_player(end)?;
            let said = finish_player(player.as_mut(), end, &episode, detail).await;
            metrics.final_score = episode.current.observation.score;
            trace.steps = std::mem::take(&mut episode.steps);
            // The opening's second reset is in the trace too, so replay
            // sends what the cell sent: a game that counts its resets
            // replays the same, and the first observation is checked.
            trace.resets.push(super::trace::TraceReset {
                after: 0,
                seed: spec.seed,
                obs: Some(opened_hash),
            });
            trace.resets.append(&mut episode.resets);
            progress = super::goal::Progress {
                goal_reached: episode.goal_step().is_some(),
                goal_step: episode.goal_step(),
                max_score: episode.max_score(),
                distinct_observations: metrics.distinct_observations.max(1),
                coverage: super::goal::coverage(&trace.steps, &trace.resets),
                milestones: episode.invariants().milestones(),
                sometimes: episode.invariants().sometimes(),
            };
            play_notes = std::mem::take(&mut episode.notes);
            warnings.extend(episode.invariants().unjudged());
            (end, episode.findings, said)
        }
    };
    trace.end = Some(end);
    let filming = game.end_video().await;
    let mut notes = game.notes();
    notes.append(&mut play_notes);
    let leaked = game.shutdown(!end.is_failure(), true).await;
    let findings = if not_played.is_some() {
        findings.into_vec()
    } else {
        confirmed(&spec.game, &trace, findings.into_vec()).await
    };
    let (video, mut video_notes) = super::driver::finished_video(filming).await;
    notes.append(&mut video_notes);
    metrics.wall_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    let report = CellReport {
        report: REPORT_FORMAT,
        persona: spec.persona.clone(),
        controller: controller_name.to_owned(),
        player: spec.player.kind().to_owned(),
        seed: spec.seed,
        game: GameInfo {
            command: spec.game.target.command().to_vec(),
            name: hello.name,
            version: hello.version,
        },
        state: if not_played.is_some() {
            CellState::NotPlayed
        } else if end == QuitReason::Interrupted {
            CellState::Interrupted
        } else {
            CellState::Succeeded
        },
        actions_taken: trace.steps.len() as u64,
        quit_reason: end,
        findings,
        metrics,
        progress,
        leaked,
        not_played,
        warnings,
        notes,
        quit_detail: player_report.quit_detail,
        felt: player_report.felt,
        model: player_report.model,
        repeat: spec.repeat.clone(),
        video,
    };
    let files = write_files(out_dir, &report, &transcript, &trace)?;
    Ok(CellResult { report, files })
}

/// A cell that ended in a crash or a hang replays its own inputs once, in
/// a fresh game started exactly as this one was, before it reports the
/// failure: one that happens again stays what it is ("confirmed" in its
/// evidence); one that does not is labelled `unconfirmed`, low severity,
/// with both outcomes in its evidence. A red check must be a bug someone
/// can reproduce; a flake is worth knowing, not failing on.
async fn confirmed(
    game: &GameSpec,
    trace: &Trace,
    mut findings: Vec<super::findings::Finding>,
) -> Vec<super::findings::Finding> {
    let category = match trace.end {
        Some(QuitReason::Crash) => Category::Crash,
        Some(QuitReason::Hang) => Category::Hang,
        _ => return findings,
    };
    let Some(finding) = findings.iter_mut().rev().find(|f| f.category == category) else {
        return findings;
    };
    let options = super::replay::ReplayOptions {
        root: game.root.clone(),
        parent_env: BTreeMap::new(),
        action_timeout: Some(game.action_timeout),
        limits: game.limits,
        transcript: None,
        game: Some(game.clone()),
    };
    let first = format!(
        "the first run ended `{}` at step {}",
        category.name(),
        finding.evidence.step
    );
    let said = match super::replay::replay(trace, &options).await {
        Ok(super::replay::ReplayOutcome::Confirmed { .. }) => {
            format!("confirmed: replayed once in a fresh game, it ended the same way ({first})")
        }
        Ok(super::replay::ReplayOutcome::Diverged {
            step,
            at_reset,
            got,
            ..
        }) => {
            finding.unconfirmed = true;
            finding.severity = super::findings::Severity::Low;
            let at = if at_reset {
                format!("at the reset after step {step}")
            } else {
                format!("at step {step}")
            };
            format!(
                "unconfirmed: {first}; replayed once in a fresh game with the same seed and actions, it did otherwise {at}: {got}"
            )
        }
        Err(e) => format!("not confirmed: the replay to confirm it could not run: {e}"),
    };
    finding.evidence.detail = Some(match finding.evidence.detail.take() {
        Some(detail) => format!("{detail}\n{said}"),
        None => said,
    });
    findings
}

/// The end of a cell whose game never opened: nothing found, nothing said.
fn unplayed(failure: &Failure) -> (QuitReason, FindingSet, PlayerReport) {
    (
        quit_for(failure),
        FindingSet::default(),
        PlayerReport::default(),
    )
}

/// The end of a play a player's error ended (a model that failed): the
/// cell keeps what it played and says why; any other error fails the cell.
fn ended_by_player(
    end: Result<QuitReason, PlayError>,
) -> Result<(QuitReason, Option<String>), PlayError> {
    match end {
        Ok(end) => Ok((end, None)),
        Err(PlayError::Player(e)) => match e.quit_reason() {
            Some(quit) => Ok((quit, Some(e.to_string()))),
            None => Err(PlayError::Player(e)),
        },
        Err(e) => Err(e),
    }
}

/// The player's last word on the play (an `llm` player's "How it felt"
/// and its usage).
async fn finish_player(
    player: &mut dyn Player,
    quit: QuitReason,
    episode: &Episode,
    detail: Option<String>,
) -> PlayerReport {
    let end = PlayEnd {
        quit,
        actions_taken: episode.step(),
        findings: episode
            .findings
            .as_slice()
            .iter()
            .map(|f| f.title.clone())
            .collect(),
        player_error: detail,
    };
    let mut report = player.finish(&end).await;
    report.quit_detail = end.player_error;
    report
}

/// The turns of a cell, until its end: one or more episodes (a `stuck`
/// finding ends one; see the module doc).
async fn play(
    spec: &CellSpec,
    (game, player): (&mut impl Driver, &mut dyn Player),
    episode: &mut Episode,
    metrics: &mut Metrics,
    transcript: &mut Vec<u8>,
    (cancel, watch): (&tokio::sync::watch::Receiver<bool>, &mut dyn CellWatch),
    started: Instant,
) -> Result<QuitReason, PlayError> {
    let mut controller = Controller::new(spec.controller, spec.player_seed);
    let mut distinct: HashSet<String> = HashSet::new();
    distinct.insert(episode.current.hash.clone());
    let mut unchanged = 0u64;
    let budget = spec.max_actions.unwrap_or(u64::MAX);
    let mut reset_due = false;
    // An offered action gameplan tries next, after `stuck_after` unchanged
    // observations (see `Episode::way_out_to_try`): counted in the cell's
    // bounds like the player's.
    let mut way_out: Option<String> = None;
    let mut stop_asked = !watch.opened().await;
    loop {
        if *cancel.borrow() || stop_asked {
            return Ok(QuitReason::Interrupted);
        }
        let taken = episode.step();
        if taken >= spec.patience && spec.patience <= budget {
            episode.notes.extend(episode.untried_note("patience"));
            return Ok(QuitReason::Patience);
        }
        if taken >= budget || spec.max_wall.is_some_and(|w| started.elapsed() >= w) {
            episode.notes.extend(episode.untried_note("the budget"));
            return Ok(QuitReason::Budget);
        }
        if std::mem::take(&mut reset_due) {
            // The same seed, not seed + episode: the game is deterministic
            // under its seed, so a reset gives the same first observation
            // (the same hash), and the player's memory, keyed by
            // observation hash (what it tried from where, which way led
            // into the trap), applies at once: the next episode goes
            // elsewhere. Another seed would be another world the memory
            // never saw, and the cell's findings would no longer all
            // replay from the one seed its report names.
            let reset = episode.reset(game, spec.seed).await;
            let entry = match &reset {
                Ok(()) => serde_json::json!({
                    "after_step": taken, "reset": spec.seed, "observation": episode.current.raw,
                }),
                Err(failure) => serde_json::json!({
                    "after_step": taken, "reset": spec.seed, "failure": failure.describe(),
                }),
            };
            line(transcript, &entry);
            if let Err(failure) = reset {
                return Ok(quit_for(&failure));
            }
            metrics.resets += 1;
            unchanged = 0;
            distinct.insert(episode.current.hash.clone());
            metrics.distinct_observations = distinct.len() as u64;
        }
        if episode.current.observation.actions.is_empty() {
            episode.add_finding(no_actions(episode, taken));
            return Ok(QuitReason::NoActions);
        }
        let (action, proposals, by, notes) = if let Some(action) = way_out.take() {
            (action, Vec::new(), Some("gameplan"), Vec::new())
        } else {
            match players_move(&mut controller, player, episode, cancel, transcript, taken).await? {
                Ok(chosen) => chosen,
                Err(end) => return Ok(end),
            }
        };
        let before = episode.current.hash.clone();
        let stepped = episode.act(game, &action).await;
        if let Some(by) = by {
            episode.label_last_step(by);
        }
        record_turn(
            episode,
            &stepped,
            (&action, &proposals, by, &notes),
            metrics,
            transcript,
        );
        if episode.current.hash == before {
            unchanged += 1;
            metrics.longest_unchanged = metrics.longest_unchanged.max(unchanged);
        } else {
            unchanged = 0;
        }
        distinct.insert(episode.current.hash.clone());
        metrics.distinct_observations = distinct.len() as u64;
        match stepped {
            // The goal ends the play as the game's `done` does.
            Stepped::Acted { done: true, .. } | Stepped::Acted { goal: true, .. } => {
                return Ok(QuitReason::Done);
            }
            Stepped::Failed(failure) => return Ok(quit_for(&failure)),
            _ => {}
        }
        if let Some(shot) = &episode.current.screenshot {
            watch.screenshot(shot);
        }
        stop_asked = watch.turned(episode.step());
        way_out = episode
            .way_out_to_try()
            .filter(|_| spec.player.lets_gameplan_try_ways_out());
        reset_due = episode.is_stuck() && spec.player.resets_after_stuck();
    }
}

/// The player's next action, with its proposals, who took it (its
/// fallback, labelled `fallback`) and the model's answers; the end of the
/// play when there is none (interrupted, or a script ran out). A player
/// error is written to the transcript with the answers that led to it.
async fn players_move(
    controller: &mut Controller,
    player: &mut dyn Player,
    episode: &Episode,
    cancel: &tokio::sync::watch::Receiver<bool>,
    transcript: &mut Vec<u8>,
    taken: u64,
) -> Result<Result<ChosenMove, QuitReason>, PlayError> {
    let Some(choice) = choose(controller, player, episode, cancel).await else {
        return Ok(Err(QuitReason::Interrupted));
    };
    let notes = player.take_notes();
    let choice = choice.inspect_err(|e| {
        let mut error = serde_json::json!({"step": taken, "player_error": e.to_string()});
        if !notes.model.is_empty() {
            error["model"] = serde_json::Value::from(notes.model.clone());
        }
        line(transcript, &error);
    })?;
    let Some(action) = choice.action else {
        return Ok(Err(QuitReason::ScriptEnd));
    };
    // A move the player's fallback took, its model having answered badly
    // twice, is labelled so in transcript and trace.
    let by = notes.fallback.map(|_| "fallback");
    Ok(Ok((action, choice.proposals, by, notes.model)))
}

/// An action to take, its proposals, who took it, and a model's answers.
type ChosenMove = (
    String,
    Vec<String>,
    Option<&'static str>,
    Vec<serde_json::Value>,
);

/// The `stuck` finding of an observation that offers no action and is not done.
fn no_actions(episode: &Episode, taken: u64) -> Spotted {
    Spotted {
        category: Category::Stuck,
        title: "The game offers no action and is not done".to_owned(),
        location: format!(
            "no actions\n{}",
            super::findings::place(&episode.current.observation)
        ),
        evidence: Evidence {
            step: taken,
            observation: episode.current.hash.clone(),
            last_actions: super::findings::last_actions(episode.episode_actions()),
            detail: Some(crate::text::cut(&episode.current.observation.text, 200)),
            stderr_tail: None,
            screenshot: episode.current.screenshot.clone(),
            page: episode.current.url.clone(),
        },
    }
}

/// The controller's choice, or `None` when `cancel` turns true first: a
/// player waiting on a model that does not answer must not hold a Ctrl-C
/// up for its timeouts and retries. Nothing was sent to the game yet, so
/// dropping the question loses no action.
async fn choose(
    controller: &mut Controller,
    player: &mut dyn Player,
    episode: &Episode,
    cancel: &tokio::sync::watch::Receiver<bool>,
) -> Option<Result<super::controllers::Choice, PlayerError>> {
    let mut stop = cancel.clone();
    let stopped = async move {
        // No one can cancel any more: only the choice can end the wait.
        if stop.wait_for(|stop| *stop).await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    let current = &episode.current;
    tokio::select! {
        choice = controller.choose(player, &current.observation, &current.hash, &episode.history) => {
            Some(choice)
        }
        () = stopped => None,
    }
}

/// The transcript line and the metrics of one turn: `action`, the
/// player's `proposals`, `by` (`Some("gameplan")` for an action gameplan
/// took itself, looking for a way out before it says `stuck`;
/// `Some("fallback")` for one the player's fallback took) and a model's
/// answers with how each was read (`model`).
fn record_turn(
    episode: &Episode,
    stepped: &Stepped,
    (action, proposals, by, model): (&str, &[String], Option<&str>, &[serde_json::Value]),
    metrics: &mut Metrics,
    transcript: &mut Vec<u8>,
) {
    let step = episode.step();
    let mut entry = match stepped {
        Stepped::Acted {
            reward,
            done,
            goal,
            events,
        } => {
            metrics.reward_total += reward;
            for event in events {
                *metrics
                    .events
                    .entry(event.kind.name().to_owned())
                    .or_default() += 1;
                if event.kind == super::protocol::EventKind::Goal {
                    metrics.goals += 1;
                }
            }
            let mut entry = serde_json::json!({
                "step": step, "action": action, "proposals": proposals,
                "observation": episode.current.raw, "reward": reward, "done": done,
                "events": events,
            });
            if *goal {
                entry["goal"] = serde_json::Value::Bool(true);
            }
            entry
        }
        Stepped::Refused(error) => {
            metrics.refused_actions += 1;
            serde_json::json!({
                "step": step, "action": action, "proposals": proposals, "refused": error,
            })
        }
        Stepped::Failed(failure) => serde_json::json!({
            "step": step, "action": action, "proposals": proposals,
            "failure": failure.describe(),
        }),
    };
    if let Some(by) = by {
        entry["by"] = serde_json::Value::from(by);
    }
    if !model.is_empty() {
        entry["model"] = serde_json::Value::from(model.to_vec());
    }
    line(transcript, &entry);
}

fn line(out: &mut Vec<u8>, value: &serde_json::Value) {
    let _ = serde_json::to_writer(&mut *out, value);
    out.push(b'\n');
}

fn write_files(
    out_dir: &Path,
    report: &CellReport,
    transcript: &[u8],
    trace: &Trace,
) -> Result<Vec<PathBuf>, PlayError> {
    let write = |name: &str, bytes: &[u8]| -> Result<PathBuf, PlayError> {
        let path = out_dir.join(name);
        let failed = |source| PlayError::Write {
            path: path.display().to_string(),
            source,
        };
        std::fs::create_dir_all(out_dir).map_err(failed)?;
        let mut file = std::fs::File::create(&path).map_err(failed)?;
        file.write_all(bytes).map_err(failed)?;
        Ok(path)
    };
    let mut json = serde_json::to_vec_pretty(report).unwrap_or_default();
    json.push(b'\n');
    Ok(vec![
        write("report.json", &json)?,
        write("transcript.jsonl", transcript)?,
        write("trace.jsonl", &trace.to_jsonl())?,
    ])
}

/// Findings by category name (all categories present, zero or more).
pub fn by_category<'a>(
    findings: impl Iterator<Item = &'a super::findings::Finding>,
) -> BTreeMap<String, u64> {
    let mut counts: BTreeMap<String, u64> = Category::ALL
        .iter()
        .map(|c| (c.name().to_owned(), 0))
        .collect();
    for finding in findings {
        *counts
            .entry(finding.category.name().to_owned())
            .or_default() += 1;
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The step kinds spawn cells and simulations on a multi-threaded
    /// runtime: their futures must be `Send`.
    #[test]
    fn play_cell_simulate_replay_and_shrink_can_be_spawned() {
        fn spawnable<T: Send>(_: &T) {}
        let game = GameSpec::new(vec!["true".into()], PathBuf::from("."), &BTreeMap::new());
        let spec = CellSpec {
            game: game.clone(),
            persona: "p".into(),
            player: PlayerSpec::Explorer,
            controller: ControllerKind::Rune,
            seed: 1,
            player_seed: 1,
            patience: 1,
            max_actions: None,
            max_wall: None,
            repeat: None,
        };
        let (_stop, cancel) = tokio::sync::watch::channel(false);
        spawnable(&play_cell(&spec, Path::new("."), cancel.clone()));
        let sim = super::super::SimulateSpec {
            game,
            games: 1,
            strategies: vec![],
            workers: 1,
            max_steps: 1,
            seed: 0,
            out_dir: None,
            trace_findings: false,
        };
        spawnable(&super::super::simulate(
            &sim,
            std::sync::Arc::new(|_, _| {}),
            cancel,
        ));
        let trace = Trace::new(Trace::header(&spec.game, 1, "p", "standard"));
        let options = super::super::ReplayOptions {
            root: PathBuf::from("."),
            parent_env: BTreeMap::new(),
            action_timeout: Some(Duration::from_secs(1)),
            limits: super::super::ResourceLimits::NONE,
            transcript: None,
            game: None,
        };
        spawnable(&super::super::replay(&trace, &options));
        let shrink = super::super::ShrinkOptions {
            replay: options.clone(),
            time_limit: Duration::from_secs(1),
        };
        spawnable(&super::super::shrink(&trace, &shrink));
    }
}

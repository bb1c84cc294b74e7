//! Replay: plays a trace's actions (and resets) again in a fresh game
//! process and checks that every observation hash, every refusal and the
//! end are the same.
//!
//! Owns what "the same" means (hash by hash, step by step; the first
//! difference is the answer), what a divergence shows (the fields that
//! differ between the expected and the actual observation), and how a
//! trace's game is started again (its command or page, from the repo root,
//! with the trace's own `game.env`, limits, `action_timeout` and
//! `stuck_after`). `gameplan replay TRACE` prints the outcome (exit 0 / 1).
//!
//! A trace records the game's environment beyond the variables every game
//! inherits (PATH, HOME, LANG, TMPDIR, taken from the replaying
//! environment), but a secret by name only: replay reads its value again
//! from its own environment, so a game whose observations depend on a
//! secret replays only where that secret is set.
//!
//! # Expected observations
//!
//! A trace holds hashes only, so a trace stays small (a 10 000-action cell
//! would otherwise carry every screen twice, the transcript already has
//! them). To show what differed, replay reads the expected observation from
//! the cell's `transcript.jsonl` beside the trace when it is there, and
//! uses it only when its hash is the one the trace expects (a transcript of
//! another run proves nothing). Without it (a simulated game's trace, a
//! shrunk one, a trace copied away) the divergence names the two hashes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::cell_report::NotPlayed;
use super::driver::{Driver, Failure, GameSpec, ResourceLimits, Session};
use super::episode::{Episode, Stepped};
use super::findings::Finding;
use super::opening::{PlayError, open, quit_for};
use super::protocol::observation_hash;
use super::trace::{Input, QuitReason, Trace, TraceReset, TraceStep};

/// The action timeout of a trace written before traces carried it.
pub const DEFAULT_ACTION_TIMEOUT: Duration = Duration::from_secs(10);

/// Where and how a trace's game runs again.
#[derive(Debug, Clone)]
pub struct ReplayOptions {
    /// The repo root (the trace's `cwd` is relative to it).
    pub root: PathBuf,
    /// The caller's environment; the game keeps PATH, HOME, LANG and TMPDIR of it.
    pub parent_env: BTreeMap<String, String>,
    /// Overrides the trace's own `action_timeout` (`--action-timeout`).
    pub action_timeout: Option<Duration>,
    pub limits: ResourceLimits,
    /// Where a divergence looks up the expected observation: the cell's
    /// `transcript.jsonl`, when there is one.
    pub transcript: Option<PathBuf>,
    /// The game to start instead of the one the trace's header describes:
    /// a cell confirming its own crash or hang starts exactly the game it
    /// played (environment and limits included).
    pub game: Option<GameSpec>,
}

/// Where the action timeout of a replay came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeoutFrom {
    /// The command line.
    Flag,
    /// The trace's header: the game's setting when it was played.
    Trace,
    /// Neither says: [`DEFAULT_ACTION_TIMEOUT`].
    Default,
}

impl ReplayOptions {
    /// The action timeout a replay of `trace` uses, and where it came from.
    pub fn action_timeout(&self, trace: &Trace) -> (Duration, TimeoutFrom) {
        if let Some(flag) = self.action_timeout {
            return (flag, TimeoutFrom::Flag);
        }
        match trace.header.game.action_timeout {
            Some(secs) if secs.is_finite() && secs > 0.0 => {
                (Duration::from_secs_f64(secs), TimeoutFrom::Trace)
            }
            _ => (DEFAULT_ACTION_TIMEOUT, TimeoutFrom::Default),
        }
    }

    /// The game a trace names, started as these options and the trace say.
    pub fn game(&self, trace: &Trace) -> GameSpec {
        // A replay compares; it films nothing (the spec's `video` stays `None`).
        let mut game = GameSpec::of(
            trace.header.game.target.clone(),
            self.root.join(&trace.header.game.cwd),
            &self.parent_env,
        );
        game.action_timeout = self.action_timeout(trace).0;
        if let Some(stuck_after) = trace.header.game.stuck_after {
            game.stuck_after = stuck_after;
        }
        game.goal.clone_from(&trace.header.game.goal);
        game.invariants.clone_from(&trace.header.game.invariants);
        game.limits = self.limits;
        // The limits the game was played under, when the trace says and the
        // replay runs limited at all.
        if let Some(limits) = trace.header.game.limits
            && self.limits.any()
        {
            game.limits = limits.limits();
        }
        // The environment the game was played with: a secret (recorded by
        // name only) is read again from the replaying environment.
        for (name, value) in &trace.header.game.env {
            let value = value.clone().or_else(|| self.parent_env.get(name).cloned());
            if let Some(value) = value {
                game.env.insert(name.clone(), value);
            }
        }
        game
    }
}

/// What a replay found.
#[derive(Debug, Clone, PartialEq)]
pub enum ReplayOutcome {
    /// Every step matched and the same end was reached.
    Confirmed {
        steps: u64,
        end: Option<QuitReason>,
        /// Why the game never gave its first observation, when it did not
        /// (again): the limits in force and its stderr.
        not_played: Option<NotPlayed>,
        /// The `[[invariants]]` the replay broke (judged again from the
        /// trace's header), as `invariant` findings in the order found.
        broken: Vec<Finding>,
    },
    /// The first place where the game did otherwise.
    Diverged {
        /// The step (0 = at hello or reset; steps + 1 = at the end); for a
        /// reset, how many steps came before it.
        step: u64,
        action: Option<String>,
        /// Whether it diverged at a reset (after `step` steps).
        at_reset: bool,
        expected: String,
        got: String,
        /// What differed, when two observations had different hashes.
        detail: Detail,
    },
}

/// What a divergence shows beyond its two one-line descriptions.
#[derive(Debug, Clone, PartialEq)]
pub enum Detail {
    /// Not two observations (a refusal, a failure, an end).
    Nothing,
    /// Two observations, the expected one not known: why.
    HashesOnly(String),
    /// The fields of the two observations that differ.
    Differences(Vec<Difference>),
}

/// One field that differs between the expected and the actual observation.
#[derive(Debug, Clone, PartialEq)]
pub enum Difference {
    /// The lines of `text` only in the expected one, and only in the actual one.
    Text {
        expected: Vec<String>,
        got: Vec<String>,
    },
    /// Actions offered now and not before, and the other way round.
    Actions {
        added: Vec<String>,
        removed: Vec<String>,
    },
    /// Another field (`state.room`, `score`, …): its values as JSON, `None`
    /// where it is missing.
    Field {
        name: String,
        expected: Option<String>,
        got: Option<String>,
    },
}

/// What one step of a run looked like, in words for a divergence message.
fn described(step: &TraceStep, end: Option<QuitReason>) -> String {
    match (&step.obs, &step.refused) {
        (_, Some(error)) => format!("a refusal ({error})"),
        (Some(hash), None) => format!("observation {hash}"),
        (None, None) => format!("the game to {}", end.map_or("fail", QuitReason::name)),
    }
}

/// Replays `trace`, stopping at the first difference.
pub async fn replay(trace: &Trace, options: &ReplayOptions) -> Result<ReplayOutcome, PlayError> {
    let inputs = trace.inputs();
    let run = run_inputs(trace, options, &inputs, |episode| {
        diverges(trace, &episode.steps, &episode.resets)
    })
    .await?;
    let mut outcome = compare(trace, &run);
    if let ReplayOutcome::Diverged { detail, .. } = &mut outcome
        && let Detail::HashesOnly(why) = detail
        && let (Some(expected), Some(got), Some(path)) = (
            expected_hash(trace, &run),
            &run.last,
            options.transcript.as_deref(),
        )
    {
        match expected_observation(path, &expected) {
            Some(want) => *detail = Detail::Differences(differences(&want, got)),
            None => {
                *why = format!(
                    "the {} beside the trace does not hold the expected observation",
                    path.file_name().map_or_else(
                        || path.display().to_string(),
                        |n| n.to_string_lossy().into_owned()
                    )
                );
            }
        }
    }
    Ok(outcome)
}

/// Whether the newest step or reset of a run differs from the trace's
/// (the run stops there: what comes after a divergence proves nothing and
/// may cost a hang's timeout).
fn diverges(trace: &Trace, steps: &[TraceStep], resets: &[TraceReset]) -> bool {
    let step_differs = steps
        .last()
        .zip(trace.steps.get(steps.len().wrapping_sub(1)))
        .is_some_and(|(got, want)| got.obs.is_some() && !same_step(want, got));
    let reset_differs = resets
        .last()
        .zip(trace.resets.get(resets.len().wrapping_sub(1)))
        .is_some_and(|(got, want)| got.obs.is_some() && got.obs != want.obs);
    step_differs || reset_differs
}

/// One run of a sequence of inputs in a fresh game process.
#[derive(Debug, Clone)]
pub struct Run {
    pub steps: Vec<TraceStep>,
    pub resets: Vec<TraceReset>,
    /// How it ended: the failure, `done`, or `None` when the inputs ran out
    /// (or the run was stopped).
    pub end: Option<QuitReason>,
    /// The failure, when it ended in one.
    pub failure: Option<Failure>,
    /// The fingerprint of the crash or hang, when it ended in one.
    pub failure_id: Option<String>,
    /// The game's observation when the run ended (what a divergence shows).
    pub last: Option<serde_json::Value>,
    /// The `invariant` findings the run made, in the order found (what
    /// shrinking a broken rule keeps, by id; what a replay says it broke).
    pub broken: Vec<Finding>,
    /// Why the game never gave its first observation, as a cell that did
    /// not play says it (the limits in force, its stderr), when it did not.
    pub not_played: Option<NotPlayed>,
}

impl Run {
    /// What the run sent the game, in order (cut at its end).
    pub fn inputs(&self) -> Vec<Input> {
        super::trace::inputs(&self.steps, &self.resets)
    }
}

/// Plays `inputs` in a fresh game (seeded as the trace says), stopping at
/// the first failure, at `done`, or when `stop` says so after an input.
pub async fn run_inputs(
    trace: &Trace,
    options: &ReplayOptions,
    inputs: &[Input],
    mut stop: impl FnMut(&Episode) -> bool + Send,
) -> Result<Run, PlayError> {
    let spec = options.game.clone().unwrap_or_else(|| options.game(trace));
    let mut game = Session::start(&spec, None).await?;
    let (_, opened) = open(&mut game, trace.header.seed).await;
    let run = match opened {
        Err(failure) => {
            let id = super::episode::failure_finding(&failure, 0, "", None, &[]).id();
            Run {
                steps: Vec::new(),
                resets: Vec::new(),
                end: Some(quit_for(&failure)),
                not_played: Some(super::opening::not_opened(&failure, spec.limits)),
                failure: Some(failure),
                failure_id: Some(id),
                last: None,
                broken: Vec::new(),
            }
        }
        Ok(first) => {
            let mut episode = Episode::new(
                first,
                &trace.header.persona,
                &trace.header.controller,
                spec.stuck_after,
            );
            episode.set_goal(spec.goal.as_deref());
            episode.set_invariants(&spec.invariants);
            let mut end = None;
            let mut failure = None;
            for input in inputs {
                let failed = match input {
                    Input::Action(action) => match episode.act(&mut game, action).await {
                        Stepped::Acted { done: true, .. } | Stepped::Acted { goal: true, .. } => {
                            end = Some(QuitReason::Done);
                            break;
                        }
                        Stepped::Failed(f) => Some(f),
                        _ => None,
                    },
                    Input::Reset(seed) => episode.reset(&mut game, *seed).await.err(),
                };
                if let Some(f) = failed {
                    end = Some(quit_for(&f));
                    failure = Some(f);
                    break;
                }
                if stop(&episode) {
                    break;
                }
            }
            let failure_id = failure.as_ref().and_then(|_| {
                episode
                    .findings
                    .as_slice()
                    .iter()
                    .rev()
                    .find(|f| f.category.name() == end.map_or("", QuitReason::name))
                    .map(|f| f.id.clone())
            });
            let broken = episode
                .findings
                .as_slice()
                .iter()
                .filter(|f| f.category == super::findings::Category::Invariant)
                .cloned()
                .collect();
            Run {
                broken,
                steps: std::mem::take(&mut episode.steps),
                resets: std::mem::take(&mut episode.resets),
                end,
                last: failure.is_none().then(|| episode.current.raw.clone()),
                failure,
                failure_id,
                not_played: None,
            }
        }
    };
    let polite = run.failure.is_none();
    game.shutdown(polite, true).await;
    Ok(run)
}

/// Whether a run's step did what the trace's did (a failed step is judged
/// with the end).
fn same_step(want: &TraceStep, got: &TraceStep) -> bool {
    match (&want.obs, &want.refused) {
        (_, Some(_)) => got.refused.is_some(),
        (Some(hash), None) => got.refused.is_none() && got.obs.as_ref() == Some(hash),
        (None, None) => got.obs.is_none(),
    }
}

/// The first difference between a trace and a run of its inputs.
fn compare(trace: &Trace, run: &Run) -> ReplayOutcome {
    let expected_end = trace.end;
    let failed = |f: &Failure| {
        run.not_played
            .as_ref()
            .map_or_else(|| f.describe(), ToString::to_string)
    };
    let stopped = || match (&run.failure, run.end) {
        (Some(f), _) => failed(f),
        (None, Some(QuitReason::Done)) => "the game was already done".to_owned(),
        _ => "nothing".to_owned(),
    };
    let (mut steps, mut resets) = (0usize, 0usize);
    for input in trace.inputs() {
        if let Input::Reset(seed) = input {
            resets += 1;
            if let Some(diverged) = compare_reset(trace, run, resets - 1, seed, &stopped) {
                return diverged;
            }
            continue;
        }
        let want = &trace.steps[steps];
        steps += 1;
        let Some(got) = run.steps.get(steps - 1) else {
            // The run stopped before this step: at hello/reset or done early.
            return ReplayOutcome::Diverged {
                step: want.step,
                action: Some(want.action.clone()),
                at_reset: false,
                expected: described(want, expected_end),
                got: stopped(),
                detail: Detail::Nothing,
            };
        };
        let same = same_step(want, got) && (want.obs.is_some() || run.end == expected_end);
        if !same {
            let got_text = if got.obs.is_none() {
                run.failure
                    .as_ref()
                    .map_or_else(|| "no observation".to_owned(), Failure::describe)
            } else {
                described(got, run.end)
            };
            let two_observations = want.refused.is_none()
                && got.refused.is_none()
                && want.obs.is_some()
                && got.obs.is_some();
            return ReplayOutcome::Diverged {
                step: want.step,
                action: Some(want.action.clone()),
                at_reset: false,
                expected: described(want, expected_end),
                got: got_text,
                detail: if two_observations {
                    hashes_only()
                } else {
                    Detail::Nothing
                },
            };
        }
    }
    let steps = trace.steps.len() as u64;
    // Every step matched; the end must too (a crash or hang already did).
    let end_matches = match expected_end {
        Some(QuitReason::Crash | QuitReason::Hang) => run.end == expected_end,
        Some(QuitReason::Done) => run.end == Some(QuitReason::Done),
        // patience, budget, interrupted…: the game simply went on.
        _ => run.end.is_none(),
    };
    if end_matches {
        ReplayOutcome::Confirmed {
            steps,
            end: expected_end,
            not_played: run.not_played.clone(),
            broken: run.broken.clone(),
        }
    } else {
        ReplayOutcome::Diverged {
            step: if trace.steps.is_empty() && run.failure.is_some() {
                0
            } else {
                steps + 1
            },
            action: None,
            at_reset: false,
            expected: format!(
                "the end `{}`",
                expected_end.map_or("none", QuitReason::name)
            ),
            got: run.failure.as_ref().map_or_else(
                || format!("the end `{}`", run.end.map_or("none", QuitReason::name)),
                failed,
            ),
            detail: Detail::Nothing,
        }
    }
}

/// The difference at the trace's reset number `index`, if any.
fn compare_reset(
    trace: &Trace,
    run: &Run,
    index: usize,
    seed: i64,
    stopped: &dyn Fn() -> String,
) -> Option<ReplayOutcome> {
    let want = &trace.resets[index];
    let expected_end = trace.end;
    let diverged = |got: String, detail| ReplayOutcome::Diverged {
        step: want.after,
        action: None,
        at_reset: true,
        expected: want.obs.as_ref().map_or_else(
            || {
                format!(
                    "the game to {}",
                    expected_end.map_or("fail", QuitReason::name)
                )
            },
            |hash| format!("observation {hash}"),
        ),
        got,
        detail,
    };
    match (run.resets.get(index), &want.obs) {
        (None, _) => Some(diverged(stopped(), Detail::Nothing)),
        (Some(got), Some(hash)) if got.obs.as_ref() != Some(hash) => Some(match &got.obs {
            Some(other) => diverged(
                format!("observation {other} (reset with seed {seed})"),
                hashes_only(),
            ),
            None => diverged(stopped(), Detail::Nothing),
        }),
        (Some(got), None) if got.obs.is_some() || run.end != expected_end => Some(diverged(
            got.obs
                .as_ref()
                .map_or_else(stopped, |h| format!("observation {h}")),
            Detail::Nothing,
        )),
        _ => None,
    }
}

fn hashes_only() -> Detail {
    Detail::HashesOnly("the trace holds hashes only and no transcript.jsonl is beside it".into())
}

/// The hash the trace expected where the run diverged on an observation:
/// the run's last step or reset is the divergent one (it stopped there).
fn expected_hash(trace: &Trace, run: &Run) -> Option<String> {
    let at_reset = run
        .resets
        .last()
        .is_some_and(|r| r.after == run.steps.len() as u64);
    if at_reset {
        trace.resets.get(run.resets.len() - 1)?.obs.clone()
    } else {
        trace
            .steps
            .get(run.steps.len().checked_sub(1)?)?
            .obs
            .clone()
    }
}

/// The observation with sha256 `hash` in a transcript, if it holds one.
pub fn expected_observation(transcript: &Path, hash: &str) -> Option<serde_json::Value> {
    let text = std::fs::read_to_string(transcript).ok()?;
    text.lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter_map(|mut entry| entry.get_mut("observation").map(serde_json::Value::take))
        .find(|observation| observation_hash(observation) == hash)
}

/// The fields that differ between two observations: `text` by lines,
/// `actions` as added and removed, every other field (`state` key by key,
/// nested keys as `state.a.b`) by value.
pub fn differences(expected: &serde_json::Value, got: &serde_json::Value) -> Vec<Difference> {
    use serde_json::Value;
    let field = |v: &Value, k: &str| v.get(k).cloned().unwrap_or(Value::Null);
    let mut out = Vec::new();
    let (want_text, got_text) = (field(expected, "text"), field(got, "text"));
    if want_text != got_text {
        let lines = |v: &Value| -> Vec<String> {
            v.as_str().map_or_else(
                || vec![v.to_string()],
                |s| s.lines().map(str::to_owned).collect(),
            )
        };
        let (want, have) = (lines(&want_text), lines(&got_text));
        out.push(Difference::Text {
            expected: want.iter().filter(|l| !have.contains(l)).cloned().collect(),
            got: have.iter().filter(|l| !want.contains(l)).cloned().collect(),
        });
    }
    let actions = |v: &Value| -> Vec<String> {
        v.get("actions")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .map(|x| x.as_str().map_or_else(|| x.to_string(), str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    let (want, have) = (actions(expected), actions(got));
    if want != have {
        out.push(Difference::Actions {
            added: have.iter().filter(|a| !want.contains(a)).cloned().collect(),
            removed: want.iter().filter(|a| !have.contains(a)).cloned().collect(),
        });
    }
    let mut want_fields = BTreeMap::new();
    let mut got_fields = BTreeMap::new();
    flatten("", expected, &mut want_fields);
    flatten("", got, &mut got_fields);
    let names: std::collections::BTreeSet<&String> =
        want_fields.keys().chain(got_fields.keys()).collect();
    for name in names {
        let (w, g) = (want_fields.get(name), got_fields.get(name));
        if w != g {
            out.push(Difference::Field {
                name: name.clone(),
                expected: w.map(ToString::to_string),
                got: g.map(ToString::to_string),
            });
        }
    }
    out
}

/// Every field of an observation but `text` and `actions`, objects
/// flattened to dotted names.
fn flatten(prefix: &str, value: &serde_json::Value, out: &mut BTreeMap<String, serde_json::Value>) {
    match value {
        serde_json::Value::Object(map) => {
            for (key, v) in map {
                if prefix.is_empty() && (key == "text" || key == "actions") {
                    continue;
                }
                let name = if prefix.is_empty() {
                    key.clone()
                } else {
                    format!("{prefix}.{key}")
                };
                flatten(&name, v, out);
            }
        }
        other => {
            out.insert(prefix.to_owned(), other.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn differences_name_the_text_lines_the_actions_and_the_state_keys() {
        let want = serde_json::json!({"text": "A hall.\nA door.", "actions": ["north", "east"],
            "state": {"room": "hall", "bag": {"gold": 1}}, "score": 0});
        let got = serde_json::json!({"text": "A hall.\nA red door.", "actions": ["east", "dig"],
            "state": {"room": "hall", "bag": {"gold": 2}, "lamp": true}, "score": 0});
        assert_eq!(
            differences(&want, &got),
            [
                Difference::Text {
                    expected: vec!["A door.".into()],
                    got: vec!["A red door.".into()]
                },
                Difference::Actions {
                    added: vec!["dig".into()],
                    removed: vec!["north".into()]
                },
                Difference::Field {
                    name: "state.bag.gold".into(),
                    expected: Some("1".into()),
                    got: Some("2".into())
                },
                Difference::Field {
                    name: "state.lamp".into(),
                    expected: None,
                    got: Some("true".into())
                },
            ]
        );
        assert!(differences(&want, &want).is_empty());
    }
}

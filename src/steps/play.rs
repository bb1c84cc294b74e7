//! The `play` step kind: one cell, a persona playing a fresh game process
//! with one controller and one seed (docs/play.md › Cells, players and
//! controllers).
//!
//! Owns turning a plan's cell into a [`CellSpec`] (which persona, player,
//! controller, seed and bounds), the cell's reuse key, and how a cell's end
//! maps to a step outcome. Playing itself is `crate::play`'s.
//!
//! - **Key**: the build hash (see `steps::game`), persona, player settings,
//!   patience, controller, seed and the budget's bounds; the money steps
//!   before it do not enter it, so a paid cell is reused like a free one.
//!   A persona with an `llm` player is never reused: the same seed does not
//!   give the same play.
//! - **Artifacts** live in the step's own directory (`report.json`,
//!   `report.md`, `transcript.jsonl`, `trace.jsonl`, and a browser cell's
//!   video and `screenshots/`, which its report links); a reused cell's
//!   are restored there.
//! - **Interrupt**: the first Ctrl-C lets the turn in flight finish, then the
//!   cell ends `interrupted`; a resume plays it again from its seed (the
//!   default for an attempt a dead gameplan left running, too). A second
//!   Ctrl-C kills every game this gameplan started, at once.
//! - **Findings are not failures**: a cell that found a crash played well.
//!   The step fails only when the cell could not be played: no game, a
//!   command that does not start, a game that never got through `hello`
//!   and its first `reset` (the message says why and hints at the usual
//!   mistake; the cell's files are still written), an artifact that cannot
//!   be written.
//! - **Paid cells**: a cell `register` bought a backend run for reports to
//!   it as it plays (transitions, heartbeats, a cancel the backend asks
//!   for); `steps::play_paid` owns that. A free cell never reaches it.
//! - **Warnings** (an observation that differs between two resets with the
//!   same seed) go to the run's output and the cell's report, not to its
//!   findings; the cell plays on.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::json;

use super::game;
use super::play_paid::PaidCell;
use super::{
    BoxFuture, KeyContext, Kind, Outputs, Reuse, StepContext, StepError, StepIo, StepOutcome,
};
use crate::graph::Instance;
use crate::plan::kinds::play::REPEAT_AXIS;
use crate::plan::model::{Controller, Persona, Plan, Player, Step, StepKind};
use crate::play::QuitReason;
use crate::play::cell::play_cell_watched;
use crate::play::llm_player::LlmSpec;
use crate::play::{CellSpec, CellState, ControllerKind, PlayerSpec, play_cell};
use crate::reuse::RestoreScope;
use crate::template::Redactor;

/// Actions a persona that sets no `patience` takes before it quits bored.
pub const DEFAULT_PATIENCE: u64 = 40;

/// The seed of a cell whose step and matrix give none.
const DEFAULT_SEED: i64 = 1;

/// The `play` kind; it holds the plan's secrets, which an `llm` player's
/// answers, errors and report must not carry.
pub struct Play {
    redactor: Redactor,
    /// `[pools] llm` of the run's plan, made at its first `llm` cell: model
    /// requests in flight at once across all the run's cells.
    llm_slots: std::sync::OnceLock<Option<std::sync::Arc<tokio::sync::Semaphore>>>,
}

impl Play {
    pub fn new(redactor: Redactor) -> Play {
        Play {
            redactor,
            llm_slots: std::sync::OnceLock::new(),
        }
    }
}

impl Kind for Play {
    fn kind(&self) -> StepKind {
        StepKind::Play
    }

    /// A cell the backend stopped at its allowance is incomplete, and its
    /// report holds what it played: `deliver` uploads it, `aggregate`
    /// merges it.
    fn partial_results_are_results(&self) -> bool {
        true
    }

    fn reuse(&self, cx: &KeyContext<'_>) -> Result<Reuse, StepError> {
        let cell = Cell::of(cx.plan, cx.step, cx.instance)?;
        if !cell.persona.player.is_deterministic() {
            return Ok(Reuse::Never(format!(
                "persona `{}` plays with an `llm` player, which does not play the same twice",
                cell.persona.slug
            )));
        }
        let settings = json!({
            "persona": cell.persona.slug,
            "player": cell.persona.player,
            "patience": cell.patience(),
            "controller": cell.controller.name(),
            "seed": cell.seed,
            "max_actions": cx.plan.budget.max_actions,
            "max_wall_seconds": Cell::max_wall(cx.plan, cx.step).map(|d| d.as_secs()),
        });
        game::reuse(cx, "play", &settings)
    }

    fn run<'a>(&'a self, cx: &'a StepContext, io: &'a StepIo) -> BoxFuture<'a, StepOutcome> {
        Box::pin(async move {
            let slots = self.llm_slots.get_or_init(|| {
                let size = cx.plan.pools.get("llm").copied()?;
                Some(std::sync::Arc::new(tokio::sync::Semaphore::new(
                    usize::try_from(size).unwrap_or(usize::MAX).max(1),
                )))
            });
            let spec = match cell_spec_redacted(cx, &self.redactor, slots.clone()) {
                Ok(spec) => spec,
                Err(e) => return e.into(),
            };
            run_cell(cx, io, &spec).await
        })
    }

    fn outputs(&self, cx: &StepContext) -> Result<Outputs, StepError> {
        let files: Vec<String> = game::files_under(&cx.step_dir)?
            .into_iter()
            .filter(|f| crate::play::cell::is_cell_output(f))
            .collect();
        if !files.iter().any(|f| f == "report.json") {
            return Err(StepError(format!(
                "the cell ended without writing {}",
                cx.step_dir.join("report.json").display()
            )));
        }
        Ok(Outputs {
            base: cx.step_dir.clone(),
            files,
        })
    }

    fn restore_base(&self, cx: &StepContext) -> PathBuf {
        game::restore_base(cx)
    }

    fn log(&self, step_dir: &Path) -> Option<PathBuf> {
        Some(step_dir.join("report.md"))
    }

    fn playtest(&self, step_dir: &Path) -> Option<super::PlaytestPart> {
        Some(super::PlaytestPart::Cell {
            dir: step_dir.to_path_buf(),
        })
    }

    fn restore_scope(&self, _cx: &StepContext) -> Result<RestoreScope, StepError> {
        let files = crate::play::cell::CELL_FILES.iter();
        let scope: Vec<&str> = files
            .chain(&crate::play::cell::CELL_MEDIA)
            .copied()
            .collect();
        RestoreScope::new(&scope, []).map_err(|e| StepError(e.to_string()))
    }

    fn kill_now(&self) {
        game::kill_now();
    }

    fn resource(&self, plan: &Plan) -> Option<&'static str> {
        game::resource(plan)
    }

    fn cell_of(&self, plan: &Plan, step: &Step, instance: &Instance) -> Option<(String, String)> {
        // A cell the plan cannot resolve is still a cell ahead (unnamed):
        // its step fails when it runs, with the reason.
        Some(persona_and_controller(plan, step, instance).unwrap_or_default())
    }
}

/// Plays the cell `spec` describes as the step's attempt: free, or paid
/// when `register` bought a run for it (`steps::play_paid`).
pub(crate) async fn run_cell(cx: &StepContext, io: &StepIo, spec: &CellSpec) -> StepOutcome {
    if let Some(stop) = cx.stopped("stopped before the cell started") {
        return stop;
    }
    // A retry plays a fresh cell: last attempt's files must not mix in
    // (nor be stored with this one's: its outputs are what is there).
    for name in crate::play::cell::CELL_FILES
        .iter()
        .chain(&crate::play::cell::CELL_MEDIA)
    {
        let _ = std::fs::remove_file(cx.step_dir.join(name));
    }
    let _ = std::fs::remove_dir_all(cx.step_dir.join("screenshots"));
    io.mark_started();
    // A bought cell reports to its backend run (`steps::play_paid`);
    // a free one plays exactly as it always did.
    let bought = io.backend().zip(super::money::run_of(io, &cx.instance.id));
    let Some((conn, run)) = bought else {
        let result = play_cell(spec, &cx.step_dir, cx.cancel.clone()).await;
        let result = with_markdown(&cx.step_dir, result);
        return outcome_of(&result, spec, io);
    };
    let mut paid = match PaidCell::start(io, conn, run).await {
        Ok(paid) => paid,
        Err(outcome) => return outcome,
    };
    let result = play_cell_watched(spec, &cx.step_dir, cx.cancel.clone(), &mut paid).await;
    let result = with_markdown(&cx.step_dir, result);
    let free = outcome_of(&result, spec, io);
    paid.end(&result, free).await
}

/// A played cell with its `report.md` written beside its other files.
fn with_markdown(
    dir: &Path,
    result: Result<crate::play::CellResult, crate::play::PlayError>,
) -> Result<crate::play::CellResult, crate::play::PlayError> {
    let mut result = result?;
    crate::report::play_cell::write_markdown(dir, &mut result)?;
    Ok(result)
}

/// The step's outcome for how a cell ended (a paid cell's backend run may
/// change it: `steps::play_paid`).
fn outcome_of(
    result: &Result<crate::play::CellResult, crate::play::PlayError>,
    spec: &CellSpec,
    io: &StepIo,
) -> StepOutcome {
    match result {
        Ok(result) if result.report.state == CellState::Interrupted => StepOutcome::Interrupted {
            message: format!(
                "stopped after {} actions; a resume plays the cell again from seed {}",
                result.report.actions_taken, spec.seed
            ),
        },
        Ok(result) => {
            for warning in &result.report.warnings {
                io.warn(warning);
            }
            match &result.report.not_played {
                // The bridge never worked: nothing was playtested, so
                // the step fails and its result is never stored.
                Some(why) => StepOutcome::Failed {
                    exit_code: None,
                    message: crate::report::play_cell::not_played(why),
                },
                None => player_outcome(&result.report),
            }
        }
        // The machine lacks what the driver needs (chromedriver, Chromium):
        // an environment error, exit 3, and no other cell would fare better.
        Err(crate::play::PlayError::Spawn(e)) if e.is_environment() => StepOutcome::Refused {
            message: format!("the cell could not be played: {e}; the game was not started"),
        },
        Err(e) => StepOutcome::Failed {
            exit_code: None,
            message: format!("the cell could not be played: {e}"),
        },
    }
}

/// The outcome of a cell that played, by how its player ended: a model
/// that never answered is exit 5, one that refused the request a failure,
/// one that never named a listed action or spent the model budget leaves
/// partial results (exit 2). Every other end is a success (findings are
/// not failures; `max_actions` is the plan's bound, not a stop).
fn player_outcome(report: &crate::play::CellReport) -> StepOutcome {
    let n = report.actions_taken;
    let detail = report.quit_detail.clone().unwrap_or_default();
    let kept = "the cell's report holds what it played";
    match report.quit_reason {
        QuitReason::ModelUnreachable => StepOutcome::ModelUnreachable {
            message: format!(
                "{detail}; the cell stopped after {n} actions and {kept}. Check the player's \
                 `base_url` and that the model server runs (or raise its `timeout`), then \
                 `gameplan plan resume` plays the cell again"
            ),
        },
        QuitReason::ModelRefused => StepOutcome::Failed {
            exit_code: None,
            message: format!(
                "{detail}; the cell stopped after {n} actions and {kept}. Check the player's \
                 `model` and `api_key`"
            ),
        },
        QuitReason::BadAnswer => StepOutcome::Incomplete {
            message: format!("the cell stopped after {n} actions: {detail}; {kept}"),
        },
        QuitReason::Budget if report.model.as_ref().is_some_and(|m| m.stopped_by_budget) => {
            let spent = report
                .model
                .as_ref()
                .and_then(|m| m.cost_usd)
                .unwrap_or_default();
            StepOutcome::Incomplete {
                message: format!(
                    "the model budget stopped the cell after {n} actions ({spent:.4} USD spent; \
                     {detail}); {kept} (a larger `budget.max_model_usd` allows more)"
                ),
            }
        }
        _ => StepOutcome::Succeeded,
    }
}

/// The persona slug and controller name a play cell plays with, as its run
/// resolves them (what `estimate` prices and `register` buys per cell).
fn persona_and_controller(
    plan: &Plan,
    step: &Step,
    instance: &Instance,
) -> Result<(String, String), StepError> {
    let cell = Cell::of(plan, step, instance)?;
    Ok((cell.persona.slug.clone(), cell.controller.name().to_owned()))
}

/// One cell of a play step, resolved against the plan.
struct Cell<'p> {
    persona: &'p Persona,
    controller: Controller,
    /// The game's seed (`reset`).
    seed: i64,
    /// The player's and the selector's seed.
    player_seed: i64,
    /// Which play of the cell this is, under `repeat = N`.
    repeat: Option<crate::play::Repeat>,
}

/// One seed from a cell's seed and a persona's own: a fixed, documented
/// mix (splitmix64's constant), so the same pair always plays the same.
fn mix_seeds(cell: i64, own: i64) -> i64 {
    #[expect(
        clippy::cast_sign_loss,
        clippy::cast_possible_wrap,
        reason = "bits, not numbers"
    )]
    let mixed = ((cell as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (own as u64)) as i64;
    mixed
}

/// The seed of play `index` of a repeated cell whose own seed is `seed`:
/// splitmix64's finalizer over the pair (neighbouring seeds and indexes
/// give unrelated games), cut to 31 bits, so a game in any language (a
/// JavaScript number, a C `int`) reads it exactly.
fn repeat_seed(seed: i64, index: u32) -> i64 {
    #[expect(clippy::cast_sign_loss, reason = "bits, not numbers")]
    let mut z = (seed as u64).wrapping_add(u64::from(index).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    i64::try_from(z >> 33).unwrap_or_default()
}

impl<'p> Cell<'p> {
    /// The persona, controller and seed of `instance`: its matrix values
    /// first, then the step's own keys, then the defaults (the plan's only
    /// persona, `standard`, the persona player's seed or 1).
    fn of(plan: &'p Plan, step: &Step, instance: &Instance) -> Result<Cell<'p>, StepError> {
        let axes = &instance.cell;
        let own = step
            .settings::<crate::plan::kinds::play::Play>()
            .map_err(StepError)?;
        let (persona, controller, seed) = (own.persona.as_deref(), own.controller, own.seed);
        let slug = match axes.persona.as_deref().or(persona) {
            Some(slug) => slug,
            None if plan.personas.len() == 1 => plan.personas[0].slug.as_str(),
            None => {
                return Err(StepError(format!(
                    "play step `{}` names no persona and the plan has {}: add `persona = \"…\"` \
                     or `matrix = {{ persona = \"*\" }}`",
                    step.id,
                    plan.personas.len()
                )));
            }
        };
        let persona = plan.persona(slug).ok_or_else(|| {
            StepError(format!(
                "play step `{}` names persona `{slug}`, which the plan does not define",
                step.id
            ))
        })?;
        let controller = axes
            .controller
            .or(controller)
            .unwrap_or(Controller::Standard);
        let own_seed = match persona.player {
            Player::Random { seed } | Player::Explorer { seed } => seed,
            _ => None,
        };
        let cell_seed = axes.seed.or(seed);
        let seed = cell_seed.or(own_seed).unwrap_or(DEFAULT_SEED);
        // The cell's seed picks the game; a persona's own seed is its
        // player's, so two personas that differ only in `seed` play the
        // same game seed differently (with no seed axis it is both).
        let player_seed = match (cell_seed, own_seed) {
            (Some(cell), Some(own)) => mix_seeds(cell, own),
            _ => seed,
        };
        let repeat = Self::repeat(step, instance);
        // Play 1 is the cell's own seeds (adding `repeat` keeps the play it
        // had); play k derives both from them and k, so each play is another
        // game and another path through it, the same on every run.
        let (seed, player_seed) = match &repeat {
            Some(r) if r.index > 1 => (
                repeat_seed(seed, r.index),
                repeat_seed(player_seed, r.index),
            ),
            _ => (seed, player_seed),
        };
        Ok(Cell {
            persona,
            controller,
            seed,
            player_seed,
            repeat,
        })
    }

    /// The play of its cell `instance` is, from the `repeat` axis its
    /// step's `repeat = N` added.
    fn repeat(step: &Step, instance: &Instance) -> Option<crate::play::Repeat> {
        let of = step
            .settings::<crate::plan::kinds::play::Play>()
            .ok()?
            .repeat
            .as_ref()?;
        Some(crate::play::Repeat {
            index: instance.cell.repeat?,
            of: *of,
            cell: crate::graph::cell_id(&step.id, &instance.cell.without(REPEAT_AXIS)),
        })
    }

    fn patience(&self) -> u64 {
        self.persona.patience.unwrap_or(DEFAULT_PATIENCE)
    }

    /// The cell's wall-clock bound: the budget's or the step's timeout,
    /// whichever is shorter.
    fn max_wall(plan: &Plan, step: &Step) -> Option<Duration> {
        [plan.budget.max_wall_seconds, step.timeout_secs]
            .into_iter()
            .flatten()
            .min()
            .map(Duration::from_secs)
    }
}

/// The cell's spec, with no secrets to redact (tests of plans without any).
#[cfg(test)]
pub(crate) fn cell_spec(cx: &StepContext) -> Result<CellSpec, StepError> {
    cell_spec_redacted(cx, &Redactor::default(), None)
}

/// The cell's spec; an `llm` player redacts `redactor`'s secrets from all
/// it hands back, and sends while it holds one of `slots` (`[pools] llm`).
pub(crate) fn cell_spec_redacted(
    cx: &StepContext,
    redactor: &Redactor,
    slots: Option<std::sync::Arc<tokio::sync::Semaphore>>,
) -> Result<CellSpec, StepError> {
    let cell = Cell::of(&cx.plan, &cx.step, &cx.instance)?;
    let player = if let Some(player) = PlayerSpec::of(&cell.persona.player) {
        player
    } else {
        let mut spec = llm_spec(cx, cell.persona, redactor)?;
        spec.slots = slots;
        PlayerSpec::Llm(Box::new(spec))
    };
    let mut game = game::spec(cx)?;
    // A `game.env` value read through secret() goes into a trace by name.
    game.secret_env = game
        .env
        .iter()
        .filter(|(_, value)| redactor.redact(value) != **value)
        .map(|(name, _)| name.clone())
        .collect();
    Ok(CellSpec {
        game,
        persona: cell.persona.slug.clone(),
        player,
        controller: ControllerKind::from(cell.controller),
        seed: cell.seed,
        player_seed: cell.player_seed,
        patience: cell.patience(),
        max_actions: cx.plan.budget.max_actions,
        max_wall: Cell::max_wall(&cx.plan, &cx.step),
        repeat: cell.repeat,
    })
}

/// An `llm` persona's player: its card, prompt, endpoint, price and the
/// plan's model budget.
fn llm_spec(
    cx: &StepContext,
    persona: &Persona,
    redactor: &Redactor,
) -> Result<LlmSpec, StepError> {
    let Player::Llm {
        model,
        base_url,
        api_key,
        temperature,
        price,
        prompt_file,
        timeout_secs,
        fallback,
        structured,
        felt_timeout_secs,
        felt_max_tokens,
    } = &persona.player
    else {
        return Err(StepError(format!(
            "persona `{}` has no player this gameplan builds",
            persona.slug
        )));
    };
    let card = match &persona.card {
        crate::plan::model::Card::Text(text) => text.clone(),
        crate::plan::model::Card::File(path) => read_capped(&cx.root, path, "card_file")?,
    };
    let prompt = prompt_file
        .as_deref()
        .map(|path| read_capped(&cx.root, path, "prompt_file"))
        .transpose()?;
    let mut client = crate::llm::ClientConfig::new(model.clone());
    if let Some(url) = base_url {
        client.base_url.clone_from(url);
    }
    client.api_key.clone_from(api_key);
    client.temperature = *temperature;
    client.price = *price;
    client.max_usd = cx.plan.budget.max_model_usd;
    if let Some(secs) = timeout_secs {
        client.timeout = Duration::from_secs(*secs);
    }
    let mut spec = LlmSpec::new(client, card, redactor.clone());
    spec.prompt = prompt;
    spec.fallback = *fallback;
    spec.structured = *structured;
    if let Some(secs) = felt_timeout_secs {
        spec.felt_timeout = Duration::from_secs(*secs);
    }
    if let Some(tokens) = felt_max_tokens {
        spec.felt_tokens = *tokens;
    }
    Ok(spec)
}

/// A repo file an `llm` player reads, up to [`crate::template::MAX_PROMPT_FILE_BYTES`].
fn read_capped(root: &Path, path: &str, key: &str) -> Result<String, StepError> {
    crate::template::read_prompt_file(&root.join(path), &format!("{key} `{path}`"))
        .map_err(StepError)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Mutex;

    use super::*;
    use crate::reuse::FileHashCache;
    use crate::steps::Upstream;

    const PLAN: &str = r#"version = 1
name = "keys"

[game]
id = "maze"
command = ["builtin:maze"]

[[personas]]
slug = "kid"
card = "Clicks everything."

[[steps]]
id = "build"
kind = "command"
run = "true"

[[steps]]
id = "register"
kind = "register"

[[steps]]
id = "play"
kind = "play"
needs = ["build", "register"]
"#;

    fn key_with(build: Option<&str>, register: Option<&str>) -> Reuse {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(dir.path().join(".git")).expect(".git");
        let path = dir.path().join("plan.toml");
        std::fs::write(&path, PLAN).expect("plan");
        let loaded =
            crate::plan::load(&path, &crate::plan::LoadOptions::default()).expect("the plan loads");
        let pipeline = crate::graph::expand(&loaded.plan).expect("expands");
        let node = pipeline
            .order
            .iter()
            .copied()
            .find(|n| pipeline.instance(*n).id == "play")
            .expect("play");
        let instance = pipeline.instance(node);
        let upstream = [
            Upstream {
                id: "build".into(),
                kind: StepKind::Command,
                outputs: build.map(str::to_owned),
            },
            Upstream {
                id: "register".into(),
                kind: StepKind::Register,
                outputs: register.map(str::to_owned),
            },
        ];
        let hashes = Mutex::new(FileHashCache::load(&dir.path().join(".gameplan")));
        let env = BTreeMap::new();
        let cx = KeyContext {
            root: &loaded.root,
            plan: &loaded.plan,
            reads: &[],
            step: &pipeline.steps[instance.step],
            instance,
            upstream: &upstream,
            hashes: &hashes,
            env: &env,
            plan_path: None,
            units: None,
            baseline: None,
        };
        Play::new(Redactor::default()).reuse(&cx).expect("a key")
    }

    /// Issue 7: a paid cell keys on what it plays, not on the purchase
    /// before it; a step that builds the game does enter the key.
    #[test]
    fn a_money_step_before_a_cell_never_enters_its_key_but_a_build_step_does() {
        let digest = |r: Reuse| match r {
            Reuse::Key(key) => key.digest(),
            other => panic!("expected a key, got {other:?}"),
        };
        let unbought = digest(key_with(Some("b1"), None));
        let bought = digest(key_with(Some("b1"), Some("job-1")));
        let bought_again = digest(key_with(Some("b1"), Some("job-2")));
        assert_eq!(unbought, bought);
        assert_eq!(bought, bought_again);
        assert_ne!(bought, digest(key_with(Some("b2"), Some("job-1"))));
        assert!(matches!(
            key_with(None, Some("job-1")),
            Reuse::AfterUpstream(why) if why.contains("`build` runs first")
        ));
    }

    /// Play 2 of seed 1 is a fixed number a game of any language reads
    /// exactly; other plays and seeds give other games.
    #[test]
    fn a_repeat_s_seed_is_fixed_small_and_differs_by_play_and_seed() {
        assert_eq!(super::repeat_seed(1, 2), 1_601_554_128);
        assert_eq!(super::repeat_seed(1, 3), 2_085_212_535);
        let seeds: std::collections::BTreeSet<i64> = (2..50)
            .flat_map(|k| [1, 2, -1].map(|s| super::repeat_seed(s, k)))
            .collect();
        assert_eq!(seeds.len(), 48 * 3);
        assert!(seeds.iter().all(|s| (0..1 << 31).contains(s)));
    }

    #[test]
    fn a_budget_stopped_cell_still_feeds_what_needs_it() {
        // `deliver` uploads an incomplete cell's report and `aggregate`
        // merges it: unlike a gate's, a cell's partial results are results.
        assert!(Play::new(Redactor::default()).partial_results_are_results());
    }
}

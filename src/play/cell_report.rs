//! `report.json` of a play cell: the one document the aggregate, the lenses
//! and the backend read about a cell. Its schema is `schemas/report.schema.json`
//! (`gameplan schema report`). `report.md` is rendered from it by
//! `crate::report::play_cell`.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::findings::Finding;
use super::stdio::Leaked;
use super::trace::QuitReason;

/// The format version of `report.json`.
pub const REPORT_FORMAT: u32 = 1;

/// How a play cell ended, for the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CellState {
    /// The cell played to an end (finding bugs is a success of the cell).
    Succeeded,
    /// Stopped by a signal after the turn in flight; a resume plays it again.
    Interrupted,
    /// The game never gave its first observation (it exited, hung, or wrote
    /// something that is not the protocol during `hello` or `reset`):
    /// nothing was played, the step fails and is never reused. `not_played`
    /// says why.
    NotPlayed,
}

/// Why a cell did not play: the bridge is broken, not the game's play.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct NotPlayed {
    /// What happened, in one line (`the game did not answer `hello` within 10.0 s`).
    pub cause: String,
    /// The likely mistake behind it (no flush, a log line on stdout), when
    /// there is a usual one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    /// The last lines the game wrote to stderr, when it wrote any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr_tail: Option<String>,
}

impl std::fmt::Display for NotPlayed {
    /// The cause, then the hint: one line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.cause)?;
        if let Some(hint) = &self.hint {
            write!(f, "; {hint}")?;
        }
        Ok(())
    }
}

/// The game as the cell met it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GameInfo {
    pub command: Vec<String>,
    /// What `hello` said (empty when the game never answered it).
    pub name: String,
    pub version: String,
}

/// Numbers about how the play went.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema, Default)]
pub struct Metrics {
    /// Different observations seen, the first one included.
    pub distinct_observations: u64,
    /// Actions the game answered with `ok: false`.
    pub refused_actions: u64,
    /// The longest run of actions after which nothing changed.
    pub longest_unchanged: u64,
    /// `goal` events.
    pub goals: u64,
    /// Events by kind.
    pub events: BTreeMap<String, u64>,
    pub reward_total: f64,
    pub final_score: f64,
    /// Wall time of the cell, game start to game end.
    pub wall_ms: u64,
    /// Times the cell reset the game after a `stuck` finding to play on.
    #[serde(default)]
    pub resets: u64,
}

/// `report.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(title = "gameplan play cell report")]
pub struct CellReport {
    /// The format version (1).
    pub report: u32,
    pub persona: String,
    pub controller: String,
    /// The player kind: scripted, random, explorer, llm.
    pub player: String,
    pub seed: i64,
    pub game: GameInfo,
    pub state: CellState,
    pub actions_taken: u64,
    pub quit_reason: QuitReason,
    pub findings: Vec<Finding>,
    pub metrics: Metrics,
    /// How far the play came: the goal (a `goal` event or `game.goal`),
    /// the best score, the observations seen (docs/play.md, "Goals and
    /// progress").
    #[serde(default)]
    pub progress: super::goal::Progress,
    /// Processes of the game that escaped its process group (killed at the end).
    #[serde(default)]
    pub leaked: Vec<Leaked>,
    /// Why the cell did not play (state `not_played` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_played: Option<NotPlayed>,
    /// What looks wrong with the game but did not stop the play (an
    /// observation that differs between two resets with the same seed):
    /// not findings, since they are about the bridge, not the game's play.
    #[serde(default)]
    pub warnings: Vec<String>,
    /// What gameplan did to keep the play in the game that is no finding
    /// against it: a tab a link opened, closed; a way out of the game (to
    /// another site) undone; a resource from outside the game that could
    /// not load (offline CI).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// Why the player ended the play, when it did (an `llm` player's model
    /// that never named a listed action, never answered, or refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quit_detail: Option<String>,
    /// "How it felt", in the persona's own voice (an `llm` player).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub felt: Option<String>,
    /// An `llm` player's calls, tokens and cost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<crate::llm::Usage>,
    /// Which play of its cell this was, under a play step's `repeat = N`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeat: Option<Repeat>,
    /// A browser cell's video: a screencast of the cell, one frame per
    /// observation (docs/web-games.md, "The video").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub video: Option<Video>,
}

/// A browser cell's video, in the cell's directory. Frame `k` is the
/// observation whose screenshot is `shots[k]`; it plays from
/// `k / fps` seconds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Video {
    /// Relative to the cell's directory: `video.webm` or `video.png`.
    pub path: String,
    /// `webm` (VP8, through ffmpeg) or `apng` (an animated PNG).
    pub format: String,
    /// Frames in the video.
    pub frames: u64,
    /// Frames a second.
    pub fps: u32,
    /// Each frame's screenshot, in order (`reset-2.png`, `step-0001.png`,
    /// ...: the observation after that reset or action), under the cell's
    /// `screenshots/`.
    pub shots: Vec<String>,
    /// Width and height of its frames.
    pub size: (u32, u32),
}

/// One play of a cell its step plays `repeat = N` times: the aggregate
/// labels a finding `stable` or `flaky k/N` by counting the plays of each
/// cell that met it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Repeat {
    /// 1 to `of`; play 1 is the cell's own seed, the others derived from it.
    pub index: u32,
    /// The step's `repeat`.
    pub of: u32,
    /// The cell all the plays repeat: the step id with its other matrix
    /// values (`play[kid,jev]`).
    pub cell: String,
}

#[cfg(test)]
impl CellReport {
    /// A report of the builtin maze that the explorer played as `persona`
    /// with `controller` (12 actions, nothing found): the fixture the tests
    /// of what reads reports (progress tables, delivery) start from.
    pub(crate) fn maze(persona: &str, controller: &str, state: CellState) -> CellReport {
        CellReport {
            report: 1,
            persona: persona.into(),
            controller: controller.into(),
            player: "explorer".into(),
            seed: 1,
            game: GameInfo {
                command: vec!["builtin:maze".into()],
                name: "maze".into(),
                version: "1".into(),
            },
            state,
            actions_taken: 12,
            quit_reason: QuitReason::Done,
            findings: Vec::new(),
            metrics: Metrics::default(),
            progress: super::goal::Progress::default(),
            leaked: Vec::new(),
            not_played: None,
            warnings: Vec::new(),
            notes: Vec::new(),
            quit_detail: None,
            felt: None,
            model: None,
            repeat: None,
            video: None,
        }
    }
}

//! `trace.jsonl` (docs/bridge.md › The trace): what replay and shrink need
//! to play a cell again.
//!
//! Owns the format, its writer and its reader, and [`QuitReason`] (a trace's
//! `end`). A trace holds no timestamps, durations or paths outside the repo:
//! the same seed and the same actions give the same bytes.
//!
//! ```text
//! {"trace":1,"game":{"driver":"stdio","command":[...],"limits":{"memory":4294967296,"address_space":null,"cpu_seconds":600,"processes":null,"open_files":1024},"cwd":".","action_timeout":10.0,"stuck_after":8},"seed":7,"persona":"kid","controller":"jev"}
//!   (a browser game: "driver":"webdriver","url":"examples/games/web/index.html" instead of the command)
//! {"step":1,"action":"north","obs":"<sha256>","events":[]}
//! {"reset":7,"obs":"<sha256>"}                                  <- a new episode (after `stuck`)
//! {"step":2,"action":"pull lever","obs":null,"events":[]}      <- the game died answering it
//! {"end":"crash"}
//! ```
//!
//! A step the game refused (`ok: false`) keeps the previous observation's
//! hash and says `"refused":"<error>"`; a step that ended the game (crash,
//! hang) has `"obs":null`. A reset line sits where the cell reset the game:
//! its seed and the hash of the observation the reset gave (`null` when the
//! game failed answering it); step numbers go on across resets, as the
//! cell's report counts them. The header's `action_timeout` (seconds) and
//! `stuck_after` are the game's settings when it was played, so replay and
//! shrink judge a hang as the cell did; traces written before they were
//! recorded lack both, and still read. The header also keeps the game's
//! `env` beyond the inherited variables (a secret by name, its value
//! `null`) and a stdio game's effective `limits`, all five, defaults
//! included (`null`: none), so a replay starts the game as it was played
//! and a game that died of one is told which were in force. A trace
//! written before that lacks `limits`, or holds only `memory` (then the
//! address-space limit it meant), `processes` and `open_files`; both
//! still read.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::driver::{GameSpec, GameTarget, ResourceLimits};
use super::protocol::Event;

/// How a cell (or a trace) ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum QuitReason {
    /// The game said `done`.
    Done,
    /// The game died or broke the protocol.
    Crash,
    /// The game did not answer in time.
    Hang,
    /// The persona's patience ran out.
    Patience,
    /// `budget.max_actions`, `max_wall_seconds` or `max_model_usd` ran out.
    Budget,
    /// Stopped by a signal after the turn in flight; a resume plays it again.
    Interrupted,
    /// A scripted player ran out of actions.
    ScriptEnd,
    /// The game offered no action and was not done.
    NoActions,
    /// An `llm` player's model never named a listed action, also when
    /// asked again; the report's `quit_detail` quotes it.
    BadAnswer,
    /// The model endpoint never answered (exit 5).
    ModelUnreachable,
    /// The model endpoint refused the request (a wrong key, an unknown model).
    ModelRefused,
}

impl QuitReason {
    pub fn name(self) -> &'static str {
        match self {
            QuitReason::Done => "done",
            QuitReason::Crash => "crash",
            QuitReason::Hang => "hang",
            QuitReason::Patience => "patience",
            QuitReason::Budget => "budget",
            QuitReason::Interrupted => "interrupted",
            QuitReason::ScriptEnd => "script_end",
            QuitReason::NoActions => "no_actions",
            QuitReason::BadAnswer => "bad_answer",
            QuitReason::ModelUnreachable => "model_unreachable",
            QuitReason::ModelRefused => "model_refused",
        }
    }

    /// Whether the game itself failed (what shrink reduces).
    pub fn is_failure(self) -> bool {
        matches!(self, QuitReason::Crash | QuitReason::Hang)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceHeader {
    pub trace: u32,
    pub game: TraceGame,
    pub seed: i64,
    pub persona: String,
    pub controller: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceGame {
    /// The driver and what it starts, written flat as a plan writes it
    /// (`driver`, then `command` or `url`, `serve`, …: see
    /// [`crate::game_target::WrittenTarget`]); reading a header checks
    /// the driver is known and has what it starts.
    #[serde(flatten)]
    pub target: GameTarget,
    /// The game's environment beyond what every game inherits (PATH, HOME,
    /// LANG, TMPDIR): `game.env`. A secret's value is not written (`null`):
    /// a replay reads it from its own environment, by the same name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, Option<String>>,
    /// A stdio game's limits as played (`game.limits`, defaults included):
    /// a replay starts the game under the same ones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<TraceLimits>,
    /// The game's cwd, relative to the repo root (`.`).
    pub cwd: String,
    /// Seconds without an answer before the game counted as hung.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action_timeout: Option<f64>,
    /// Actions with no change before a `stuck` finding.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stuck_after: Option<u64>,
    /// `game.goal`: reaching it ended the play as `done` does, so a
    /// replay evaluates it too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goal: Option<String>,
    /// The plan's invariants as played: a replay and a shrink judge the
    /// same rules, so a broken one is found again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub invariants: Vec<crate::plan::model::Invariant>,
}

/// The limits a stdio game was played under (`None`: no limit), as
/// `game.limits` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "WrittenLimits")]
pub struct TraceLimits {
    /// Resident memory of the game's process tree, in bytes.
    pub memory: Option<u64>,
    /// Address space of each process, in bytes.
    pub address_space: Option<u64>,
    pub cpu_seconds: Option<u64>,
    pub processes: Option<u64>,
    pub open_files: Option<u64>,
}

impl TraceLimits {
    pub fn of(limits: ResourceLimits) -> TraceLimits {
        TraceLimits {
            memory: limits.memory,
            address_space: limits.address_space,
            cpu_seconds: limits.cpu_seconds,
            processes: limits.processes,
            open_files: limits.open_files,
        }
    }

    pub fn limits(self) -> ResourceLimits {
        ResourceLimits {
            memory: self.memory,
            address_space: self.address_space,
            cpu_seconds: self.cpu_seconds,
            processes: self.processes,
            open_files: self.open_files,
        }
    }
}

/// `limits` as a trace holds it, old or new: a trace that names no
/// `address_space` was written when `memory` meant the address space and
/// the CPU limit was not recorded (it was the default).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WrittenLimits {
    memory: Option<u64>,
    #[serde(default, deserialize_with = "present")]
    address_space: Key,
    #[serde(default, deserialize_with = "present")]
    cpu_seconds: Key,
    processes: Option<u64>,
    open_files: Option<u64>,
}

/// A key of `limits` that a trace may not have written at all.
#[derive(Default)]
enum Key {
    #[default]
    Absent,
    /// There, a number or `null` (no limit).
    Given(Option<u64>),
}

fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Key, D::Error> {
    Option::<u64>::deserialize(d).map(Key::Given)
}

impl From<WrittenLimits> for TraceLimits {
    fn from(written: WrittenLimits) -> TraceLimits {
        let (memory, address_space) = match written.address_space {
            Key::Given(address_space) => (written.memory, address_space),
            Key::Absent => (None, written.memory),
        };
        TraceLimits {
            memory,
            address_space,
            cpu_seconds: match written.cpu_seconds {
                Key::Given(secs) => secs,
                Key::Absent => ResourceLimits::default().cpu_seconds,
            },
            processes: written.processes,
            open_files: written.open_files,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceStep {
    pub step: u64,
    pub action: String,
    /// The sha256 of the observation after the action; `null` when the game
    /// failed answering it.
    pub obs: Option<String>,
    pub events: Vec<Event>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
    /// The screenshot of the observation after it, relative to the cell's
    /// directory (a browser game's cell only; never compared by replay).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub screenshot: Option<String>,
    /// Who took the action when the player did not: `fallback` (an `llm`
    /// player's, after two bad answers) or `gameplan` (a way out tried
    /// before `stuck`). Never compared by replay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct TraceEnd {
    end: QuitReason,
}

/// A `reset` of the game in the middle of a trace (a new episode).
#[derive(Debug, Clone, PartialEq)]
pub struct TraceReset {
    /// How many steps came before it.
    pub after: u64,
    pub seed: i64,
    /// The sha256 of the observation it gave; `None` when the game failed
    /// answering it.
    pub obs: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ResetLine {
    reset: i64,
    obs: Option<String>,
}

/// What a trace sent the game after its opening `reset`, in order: what
/// replay plays again and what shrink cuts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    Action(String),
    Reset(i64),
}

/// A whole trace.
#[derive(Debug, Clone, PartialEq)]
pub struct Trace {
    pub header: TraceHeader,
    pub steps: Vec<TraceStep>,
    /// The resets between steps, in order.
    pub resets: Vec<TraceReset>,
    /// `None` while the cell plays, or for a trace cut short.
    pub end: Option<QuitReason>,
}

#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}:{line}: {message}")]
    Invalid {
        path: String,
        line: usize,
        message: String,
    },
}

impl Trace {
    pub fn new(header: TraceHeader) -> Self {
        Trace {
            header,
            steps: Vec::new(),
            resets: Vec::new(),
            end: None,
        }
    }

    /// The header for the game `game` (a process started from the repo
    /// root, or a page).
    pub fn header(game: &GameSpec, seed: i64, persona: &str, controller: &str) -> TraceHeader {
        TraceHeader {
            trace: 1,
            game: TraceGame {
                target: game.target.clone(),
                env: game
                    .env
                    .iter()
                    .filter(|(name, _)| !super::driver::KEPT_ENV.contains(&name.as_str()))
                    .map(|(name, value)| {
                        let kept = (!game.secret_env.contains(name)).then(|| value.clone());
                        (name.clone(), kept)
                    })
                    .collect(),
                limits: game
                    .target
                    .driver()
                    .takes("limits")
                    .then(|| TraceLimits::of(game.limits)),
                cwd: ".".to_owned(),
                action_timeout: Some(game.action_timeout.as_secs_f64()),
                stuck_after: Some(game.stuck_after),
                goal: game.goal.clone(),
                invariants: game.invariants.clone(),
            },
            seed,
            persona: persona.to_owned(),
            controller: controller.to_owned(),
        }
    }

    /// The trace as JSON lines.
    pub fn to_jsonl(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(128 + self.steps.len() * 128);
        self.write_jsonl(&mut out);
        out
    }

    /// Appends the trace as JSON lines to `out` (a batch file's record).
    pub fn write_jsonl(&self, out: &mut Vec<u8>) {
        let _ = serde_json::to_writer(&mut *out, &self.header);
        out.push(b'\n');
        let mut resets = self.resets.iter().peekable();
        let mut reset_lines = |out: &mut Vec<u8>, before: u64| {
            while let Some(reset) = resets.next_if(|r| r.after <= before) {
                let line = ResetLine {
                    reset: reset.seed,
                    obs: reset.obs.clone(),
                };
                let _ = serde_json::to_writer(&mut *out, &line);
                out.push(b'\n');
            }
        };
        for (done, step) in self.steps.iter().enumerate() {
            reset_lines(out, done as u64);
            let _ = serde_json::to_writer(&mut *out, step);
            out.push(b'\n');
        }
        reset_lines(out, u64::MAX);
        if let Some(end) = self.end {
            let _ = serde_json::to_writer(&mut *out, &TraceEnd { end });
            out.push(b'\n');
        }
    }

    pub fn actions(&self) -> impl Iterator<Item = &str> {
        self.steps.iter().map(|s| s.action.as_str())
    }

    /// The actions and resets, in the order they were sent.
    pub fn inputs(&self) -> Vec<Input> {
        inputs(&self.steps, &self.resets)
    }

    pub fn read(path: &std::path::Path) -> Result<Trace, TraceError> {
        let text = std::fs::read_to_string(path).map_err(|source| TraceError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Trace::parse(&text, &path.display().to_string())
    }

    pub fn parse(text: &str, path: &str) -> Result<Trace, TraceError> {
        let invalid = |line: usize, message: String| TraceError::Invalid {
            path: path.to_owned(),
            line,
            message,
        };
        let mut lines = text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty());
        let (_, first) = lines
            .next()
            .ok_or_else(|| invalid(1, "the trace is empty".into()))?;
        let header: TraceHeader = serde_json::from_str(first)
            .map_err(|e| invalid(1, format!("not a trace header: {e}")))?;
        if header.trace != 1 {
            return Err(invalid(
                1,
                format!(
                    "trace format {} is not known (this gameplan reads 1)",
                    header.trace
                ),
            ));
        }
        let mut trace = Trace::new(header);
        for (i, line) in lines {
            if trace.end.is_some() {
                return Err(invalid(i + 1, "a line after the end line".into()));
            }
            if let Ok(end) = serde_json::from_str::<TraceEnd>(line) {
                trace.end = Some(end.end);
                continue;
            }
            if let Ok(reset) = serde_json::from_str::<ResetLine>(line) {
                trace.resets.push(TraceReset {
                    after: trace.steps.len() as u64,
                    seed: reset.reset,
                    obs: reset.obs,
                });
                continue;
            }
            let step: TraceStep = serde_json::from_str(line)
                .map_err(|e| invalid(i + 1, format!("not a step, reset or end line: {e}")))?;
            if step.step != trace.steps.len() as u64 + 1 {
                return Err(invalid(
                    i + 1,
                    format!(
                        "step {} where step {} was due",
                        step.step,
                        trace.steps.len() + 1
                    ),
                ));
            }
            trace.steps.push(step);
        }
        Ok(trace)
    }
}

/// `steps` and `resets` merged in the order they happened.
pub fn inputs(steps: &[TraceStep], resets: &[TraceReset]) -> Vec<Input> {
    let mut out = Vec::with_capacity(steps.len() + resets.len());
    let mut resets = resets.iter().peekable();
    for (done, step) in steps.iter().enumerate() {
        while let Some(reset) = resets.next_if(|r| r.after <= done as u64) {
            out.push(Input::Reset(reset.seed));
        }
        out.push(Input::Action(step.action.clone()));
    }
    out.extend(resets.map(|r| Input::Reset(r.seed)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trace_reads_back_as_written_in_the_documented_shape() {
        let mut game = GameSpec::new(
            vec!["python3".into(), "g.py".into()],
            ".".into(),
            &std::collections::BTreeMap::new(),
        );
        game.action_timeout = std::time::Duration::from_millis(2500);
        let mut trace = Trace::new(Trace::header(&game, 7, "kid", "jev"));
        trace.steps.push(TraceStep {
            step: 1,
            action: "north".into(),
            obs: Some("ab".into()),
            events: vec![],
            refused: None,
            screenshot: None,
            by: None,
        });
        trace.resets.push(TraceReset {
            after: 1,
            seed: 7,
            obs: Some("cd".into()),
        });
        trace.steps.push(TraceStep {
            step: 2,
            action: "boom".into(),
            obs: None,
            events: vec![],
            refused: None,
            screenshot: None,
            by: None,
        });
        trace.end = Some(QuitReason::Crash);
        let bytes = trace.to_jsonl();
        let text = String::from_utf8(bytes).expect("utf8");
        assert_eq!(
            text,
            "{\"trace\":1,\"game\":{\"driver\":\"stdio\",\"command\":[\"python3\",\"g.py\"],\"limits\":{\"memory\":4294967296,\"address_space\":null,\"cpu_seconds\":600,\"processes\":null,\"open_files\":1024},\"cwd\":\".\",\"action_timeout\":2.5,\"stuck_after\":8},\"seed\":7,\"persona\":\"kid\",\"controller\":\"jev\"}\n\
             {\"step\":1,\"action\":\"north\",\"obs\":\"ab\",\"events\":[]}\n\
             {\"reset\":7,\"obs\":\"cd\"}\n\
             {\"step\":2,\"action\":\"boom\",\"obs\":null,\"events\":[]}\n\
             {\"end\":\"crash\"}\n"
        );
        assert_eq!(Trace::parse(&text, "t").expect("parses"), trace);
        assert_eq!(
            trace.inputs(),
            [
                Input::Action("north".into()),
                Input::Reset(7),
                Input::Action("boom".into())
            ]
        );
        assert!(Trace::parse("{\"end\":\"done\"}", "t").is_err());
    }

    /// A trace written before the header carried the timeouts, and before
    /// resets, still reads.
    /// A browser game's header, as gameplan wrote it before the target
    /// was one type: it reads, and is written back byte for byte.
    #[test]
    fn a_browser_header_reads_and_writes_back_the_same_bytes() {
        let header = r#"{"trace":1,"game":{"driver":"webdriver","url":"index.html","serve":"web","allow":["https://cdn.example/**"],"keys":["Space"],"viewport":[640,480],"probe":"window.score","load_timeout":30.0,"env":{"LEVEL":"2"},"cwd":".","action_timeout":10.0,"stuck_after":8},"seed":7,"persona":"kid","controller":"jev"}"#;
        let trace = Trace::parse(header, "t").expect("reads");
        let page = trace.header.game.target.browser().expect("a page");
        assert_eq!(page.viewport, (640, 480));
        assert_eq!(page.serve.as_deref(), Some("web"));
        let written = String::from_utf8(trace.to_jsonl()).expect("utf-8");
        assert_eq!(written.trim_end(), header);
    }

    #[test]
    fn a_header_with_an_unknown_field_an_unknown_driver_or_no_page_is_refused() {
        let line = |game: &str| {
            format!(
                r#"{{"trace":1,"game":{{{game},"cwd":"."}},"seed":7,"persona":"kid","controller":"jev"}}"#
            )
        };
        for (game, why) in [
            (
                r#""driver":"stdio","command":["g"],"colour":"red""#,
                "colour",
            ),
            (
                r#""driver":"tcp","command":["g"]"#,
                "driver `tcp` is not known",
            ),
            (r#""driver":"webdriver""#, "needs the page's `url`"),
        ] {
            let err = Trace::parse(&line(game), "t").expect_err(game);
            assert!(err.to_string().contains(why), "{game}: {err}");
        }
        assert!(Trace::parse(&line(r#""driver":"stdio","command":["g"]"#), "t").is_ok());
    }

    #[test]
    fn an_old_trace_without_timeouts_or_resets_reads() {
        let old = "{\"trace\":1,\"game\":{\"driver\":\"stdio\",\"command\":[\"g\"],\"cwd\":\".\"},\"seed\":1,\"persona\":\"p\",\"controller\":\"standard\"}\n\
                   {\"step\":1,\"action\":\"a\",\"obs\":\"x\",\"events\":[]}\n{\"end\":\"patience\"}\n";
        let trace = Trace::parse(old, "t").expect("parses");
        assert_eq!(trace.header.game.action_timeout, None);
        assert!(trace.resets.is_empty());
        assert_eq!(String::from_utf8(trace.to_jsonl()).expect("utf8"), old);
    }

    /// Before `memory` meant resident memory, a header's `memory` was the
    /// address space and the CPU limit went unrecorded: such a trace
    /// replays under the address-space limit it was played under.
    #[test]
    fn an_old_header_whose_memory_was_the_address_space_reads_as_it_was_meant() {
        let old = "{\"trace\":1,\"game\":{\"driver\":\"stdio\",\"command\":[\"g\"],\"limits\":{\"memory\":1073741824,\"processes\":null,\"open_files\":64},\"cwd\":\".\"},\"seed\":1,\"persona\":\"p\",\"controller\":\"standard\"}\n";
        let trace = Trace::parse(old, "t").expect("parses");
        let limits = trace.header.game.limits.expect("limits").limits();
        assert_eq!(
            limits,
            ResourceLimits {
                memory: None,
                address_space: Some(1 << 30),
                cpu_seconds: Some(600),
                processes: None,
                open_files: Some(64),
            }
        );
        let none = "{\"trace\":1,\"game\":{\"driver\":\"stdio\",\"command\":[\"g\"],\"limits\":{\"memory\":null,\"address_space\":null,\"cpu_seconds\":null,\"processes\":null,\"open_files\":null},\"cwd\":\".\"},\"seed\":1,\"persona\":\"p\",\"controller\":\"standard\"}\n";
        let trace = Trace::parse(none, "t").expect("parses");
        assert_eq!(
            trace.header.game.limits.expect("limits").limits(),
            ResourceLimits::NONE
        );
    }
}

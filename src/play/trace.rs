//! `trace.jsonl` (DESIGN §7): what replay and shrink need to play a cell again.
//!
//! Owns the format, its writer and its reader, and [`QuitReason`] (a trace's
//! `end`). A trace holds no timestamps, durations or paths outside the repo:
//! the same seed and the same actions give the same bytes.
//!
//! ```text
//! {"trace":1,"game":{"driver":"stdio","command":[...],"cwd":"."},"seed":7,"persona":"kid","controller":"jev"}
//! {"step":1,"action":"north","obs":"<sha256>","events":[]}
//! {"step":2,"action":"pull lever","obs":null,"events":[]}      <- the game died answering it
//! {"end":"crash"}
//! ```
//!
//! A step the game refused (`ok: false`) keeps the previous observation's
//! hash and says `"refused":"<error>"`; a step that ended the game (crash,
//! hang) has `"obs":null`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

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
    /// `budget.max_actions` or `max_wall_seconds` ran out.
    Budget,
    /// Stopped by a signal after the turn in flight; a resume plays it again.
    Interrupted,
    /// A scripted player ran out of actions.
    ScriptEnd,
    /// The game offered no action and was not done.
    NoActions,
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
    pub driver: String,
    pub command: Vec<String>,
    /// The game's cwd, relative to the repo root (`.`).
    pub cwd: String,
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
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct TraceEnd {
    end: QuitReason,
}

/// A whole trace.
#[derive(Debug, Clone, PartialEq)]
pub struct Trace {
    pub header: TraceHeader,
    pub steps: Vec<TraceStep>,
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
            end: None,
        }
    }

    /// The header for a stdio game started with `command` from the repo root.
    pub fn header(command: &[String], seed: i64, persona: &str, controller: &str) -> TraceHeader {
        TraceHeader {
            trace: 1,
            game: TraceGame {
                driver: "stdio".to_owned(),
                command: command.to_vec(),
                cwd: ".".to_owned(),
            },
            seed,
            persona: persona.to_owned(),
            controller: controller.to_owned(),
        }
    }

    /// The trace as JSON lines.
    pub fn to_jsonl(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(128 + self.steps.len() * 128);
        let _ = serde_json::to_writer(&mut out, &self.header);
        out.push(b'\n');
        for step in &self.steps {
            let _ = serde_json::to_writer(&mut out, step);
            out.push(b'\n');
        }
        if let Some(end) = self.end {
            let _ = serde_json::to_writer(&mut out, &TraceEnd { end });
            out.push(b'\n');
        }
        out
    }

    pub fn actions(&self) -> impl Iterator<Item = &str> {
        self.steps.iter().map(|s| s.action.as_str())
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
        if header.game.driver != "stdio" {
            return Err(invalid(
                1,
                format!(
                    "driver `{}` cannot be replayed here (only stdio)",
                    header.game.driver
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
            let step: TraceStep = serde_json::from_str(line)
                .map_err(|e| invalid(i + 1, format!("not a step or end line: {e}")))?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trace_reads_back_as_written_in_the_documented_shape() {
        let mut trace = Trace::new(Trace::header(
            &["python3".into(), "g.py".into()],
            7,
            "kid",
            "jev",
        ));
        trace.steps.push(TraceStep {
            step: 1,
            action: "north".into(),
            obs: Some("ab".into()),
            events: vec![],
            refused: None,
        });
        trace.steps.push(TraceStep {
            step: 2,
            action: "boom".into(),
            obs: None,
            events: vec![],
            refused: None,
        });
        trace.end = Some(QuitReason::Crash);
        let bytes = trace.to_jsonl();
        let text = String::from_utf8(bytes).expect("utf8");
        assert_eq!(
            text,
            "{\"trace\":1,\"game\":{\"driver\":\"stdio\",\"command\":[\"python3\",\"g.py\"],\"cwd\":\".\"},\"seed\":7,\"persona\":\"kid\",\"controller\":\"jev\"}\n\
             {\"step\":1,\"action\":\"north\",\"obs\":\"ab\",\"events\":[]}\n\
             {\"step\":2,\"action\":\"boom\",\"obs\":null,\"events\":[]}\n\
             {\"end\":\"crash\"}\n"
        );
        assert_eq!(Trace::parse(&text, "t").expect("parses"), trace);
        assert!(Trace::parse("{\"end\":\"done\"}", "t").is_err());
    }
}

//! What a finding can be and how bad it is: its category (crash, hang,
//! error, refused, stuck, console, invariant, coverage) and severity, with
//! their names.
//!
//! A leaf, because the plan speaks of them (`fail_on`, a gate's rules) as
//! much as play finds them, and the plan sits below play.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    /// The game process died, or wrote something that is not the protocol.
    Crash,
    /// No answer within `action_timeout`; the game was killed.
    Hang,
    /// The game reported an `error` or `crash` event.
    Error,
    /// An action the game listed, then refused.
    Refused,
    /// No change in observation for `stuck_after` actions.
    Stuck,
    /// A browser console error or page crash (webdriver driver).
    Console,
    /// One of the plan's `[[invariants]]` was broken: the game broke its
    /// own rules (severity: the invariant's, high by default).
    Invariant,
    /// A `sometimes` invariant that no player ever saw hold: a part of the
    /// game the playtest never reached.
    Coverage,
}

impl Category {
    pub const ALL: [Category; 8] = [
        Category::Crash,
        Category::Hang,
        Category::Error,
        Category::Refused,
        Category::Stuck,
        Category::Console,
        Category::Invariant,
        Category::Coverage,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Category::Crash => "crash",
            Category::Hang => "hang",
            Category::Error => "error",
            Category::Refused => "refused",
            Category::Stuck => "stuck",
            Category::Console => "console",
            Category::Invariant => "invariant",
            Category::Coverage => "coverage",
        }
    }

    /// How bad a finding of this category is, by default.
    pub fn severity(self) -> Severity {
        match self {
            Category::Crash => Severity::Critical,
            Category::Hang | Category::Invariant => Severity::High,
            Category::Error | Category::Console => Severity::Medium,
            Category::Refused | Category::Stuck | Category::Coverage => Severity::Low,
        }
    }
}

/// How bad a finding is; the order is most severe first.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    Critical,
    High,
    Medium,
    Low,
}

impl Severity {
    pub const ALL: [Severity; 4] = [
        Severity::Critical,
        Severity::High,
        Severity::Medium,
        Severity::Low,
    ];

    /// The name a plan, a report and `--json` use (`critical`, …).
    pub fn name(self) -> &'static str {
        match self {
            Severity::Critical => "critical",
            Severity::High => "high",
            Severity::Medium => "medium",
            Severity::Low => "low",
        }
    }
}

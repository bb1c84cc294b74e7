//! Repeats: whether a finding comes back when its cell is played again.
//!
//! A play step's `repeat = N` plays each of its cells N times, each play
//! with seeds derived from the cell's; each play's `report.json` names its
//! cell and index ([`crate::play::Repeat`]). Over the cells that met a
//! finding, a finding met by every play is `stable`, one met by some is
//! `flaky k/N` (k plays of N met it), a label `--fail-on flaky`,
//! `stable:` and a gate's `flaky` select. Plays that never started
//! (`not_played`) are not counted: they could not have met anything.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::aggregate::CellInput;
use super::playtest::FindingLine;
use crate::play::CellState;

/// `stable` or `flaky`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Stability {
    /// Met by every play of every cell that met it.
    Stable,
    /// Met by some plays only.
    Flaky,
}

/// How often a finding came back over its cells' repeats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Repeats {
    pub label: Stability,
    /// Plays that met it.
    pub met: u32,
    /// Plays of the cells that met it (their `repeat`s, less plays that
    /// never started).
    pub of: u32,
}

impl Repeats {
    /// `stable`, or `flaky 1/3`.
    pub fn text(self) -> String {
        match self.label {
            Stability::Stable => "stable".to_owned(),
            Stability::Flaky => format!("flaky {}/{}", self.met, self.of),
        }
    }
}

/// Labels each of `lines` (merged from `cells`) that a repeated cell met:
/// counted per repeated cell, then summed over the cells that met it.
pub fn label(lines: &mut [FindingLine], cells: &[CellInput]) {
    // Each play (step id) → its repeated cell, and each cell's plays.
    let mut cell_of: BTreeMap<&str, &str> = BTreeMap::new();
    let mut plays: BTreeMap<&str, u32> = BTreeMap::new();
    for input in cells {
        let Some(report) = &input.report else {
            continue;
        };
        let Some(repeat) = &report.repeat else {
            continue;
        };
        if report.state == CellState::NotPlayed {
            continue;
        }
        cell_of.insert(&input.step, &repeat.cell);
        *plays.entry(&repeat.cell).or_default() += 1;
    }
    if plays.is_empty() {
        return;
    }
    for line in lines {
        let mut met: BTreeMap<&str, u32> = BTreeMap::new();
        for step in &line.cells {
            if let Some(cell) = cell_of.get(step.as_str()) {
                *met.entry(cell).or_default() += 1;
            }
        }
        if met.is_empty() {
            continue;
        }
        let of: u32 = met.keys().map(|cell| plays[cell]).sum();
        let met: u32 = met.values().sum();
        line.repeats = Some(Repeats {
            label: if met >= of {
                Stability::Stable
            } else {
                Stability::Flaky
            },
            met,
            of,
        });
    }
}

//! Everything gameplan prints: diagnostics, explain and graph views, JSON documents.
//!
//! The only module that writes to the terminal. Other modules return data;
//! this one decides how it looks (colour on a terminal, plain in CI, JSON on
//! request) and redacts secrets on the way out.

pub mod diagnostics;
pub mod explain;
pub mod gc;
pub mod play_cell;
pub mod play_results;
pub mod playtest;
pub mod progress;
pub mod run;
pub mod run_summary;
pub mod runs;

use std::io::{IsTerminal, Write};

/// Where output goes and how it should look.
pub struct Console {
    /// Colour and unicode decoration for diagnostics (stderr is a terminal and `NO_COLOR` unset).
    pub color: bool,
}

impl Console {
    pub fn from_env(no_color: bool) -> Self {
        Console {
            color: !no_color && std::io::stderr().is_terminal(),
        }
    }

    /// Writes to stdout. A closed pipe (`gameplan … | head`) is not an error worth a panic.
    pub fn out(&self, text: &str) {
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(text.as_bytes());
        let _ = out.flush();
    }

    pub fn err(&self, text: &str) {
        let mut err = std::io::stderr().lock();
        let _ = err.write_all(text.as_bytes());
        let _ = err.flush();
    }

    /// Writes a JSON document (pretty, newline-terminated) to stdout.
    pub fn json(&self, value: &serde_json::Value) {
        let mut text = serde_json::to_string_pretty(value).unwrap_or_default();
        text.push('\n');
        self.out(&text);
    }
}

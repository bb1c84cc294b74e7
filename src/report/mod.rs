//! Everything gameplan prints or renders: diagnostics, progress, explain and
//! graph views, the end-of-run summary, JSON documents, the markdown reports
//! (a cell's, the aggregate's, a gate's) and `JUnit`.
//!
//! The only module that writes to the terminal. Other modules return data;
//! this one decides how it looks (colour on a terminal, plain in CI, JSON on
//! request) and redacts secrets on the way out.

pub mod aggregate;
pub mod baseline;
pub mod diagnostics;
pub mod explain;
pub mod gc;
pub mod html;
pub mod ledger;
pub mod play_cell;
pub mod play_results;
pub mod playtest;
pub mod progress;
pub mod progress_table;
pub mod quote;
pub mod repeats;
pub mod review;
pub mod run;
pub mod run_summary;
pub mod runs;
pub mod settlement;

use std::io::{IsTerminal, Write};

/// Where output goes and how it should look.
pub struct Console {
    /// Colour and unicode decoration on stderr (diagnostics, run progress):
    /// stderr is a terminal, or `CLICOLOR_FORCE` asks; never under `NO_COLOR`
    /// or `--no-color`.
    pub color: bool,
    /// The same for stdout (the run summary), which may be piped apart.
    pub color_out: bool,
}

impl Console {
    /// `no_color`: `--no-color` or `NO_COLOR`; `force`: `CLICOLOR_FORCE`
    /// (colour into a pipe, e.g. a pager), which `no_color` still beats.
    pub fn from_env(no_color: bool, force: bool) -> Self {
        Console {
            color: !no_color && (force || std::io::stderr().is_terminal()),
            color_out: !no_color && (force || std::io::stdout().is_terminal()),
        }
    }

    /// No colour anywhere (output for a file or another program).
    pub fn plain() -> Self {
        Console {
            color: false,
            color_out: false,
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

/// `text` in an SGR colour (`"1;31"`: bold red) when `color`, as it is otherwise.
pub fn paint(color: bool, sgr: &str, text: &str) -> String {
    if color {
        format!("\x1b[{sgr}m{text}\x1b[0m")
    } else {
        text.to_owned()
    }
}

/// `1 step`, `2 steps`: a count with its noun in agreement.
pub fn plural(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("{n} {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

#[cfg(test)]
mod tests {
    use super::{paint, plural};

    #[test]
    fn counts_agree_in_number() {
        assert_eq!(plural(0, "step"), "0 steps");
        assert_eq!(plural(1, "step"), "1 step");
        assert_eq!(plural(2, "distinct finding"), "2 distinct findings");
    }

    #[test]
    fn paint_is_plain_without_colour() {
        assert_eq!(paint(false, "31", "FAILED"), "FAILED");
        assert_eq!(paint(true, "31", "FAILED"), "\x1b[31mFAILED\x1b[0m");
    }
}

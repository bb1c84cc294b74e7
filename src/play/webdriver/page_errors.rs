//! Naming what broke in a page: the requests of the game that failed or
//! answered HTTP >= 400 (each passed on as one line the episode makes an
//! `error` finding of, see [`FAILED_REQUEST`]), the outside resources that
//! could not load (notes, not findings), and the console errors those
//! outside scripts caused (`$ is not defined` after jQuery's CDN was
//! unreachable: a note naming the script, not a finding).
//!
//! It decides what of a page's reading is a finding's matter and what a
//! note's; `episode` makes the findings, `page.js` and `listener.js`
//! collect what it sorts.

use serde::Deserialize;

/// How a failed request of the game starts its line in
/// [`Seen::console`](crate::play::driver::Seen::console): the episode
/// makes it an `error` finding naming the URL and status, not a `console`
/// one. No line the page logs starts so (the listener prefixes those).
pub const FAILED_REQUEST: &str = "gameplan: failed request: ";

/// A request of the page that failed or answered HTTP >= 400, as
/// `listener.js` kept it.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub(super) struct FailedRequest {
    pub(super) method: String,
    pub(super) url: String,
    /// The HTTP status; 0 when nothing answered (a network error, a
    /// missing file).
    #[serde(default)]
    pub(super) status: u16,
    /// What asked for it: `fetch`, `xhr`, or the element or initiator
    /// (`script`, `img`, `link`, `css`, ...).
    #[serde(default)]
    pub(super) kind: String,
}

impl FailedRequest {
    /// "GET http://127.0.0.1:PORT/levels.json answered HTTP 404".
    pub(super) fn describe(&self) -> String {
        if self.status == 0 {
            format!(
                "{} {} could not be loaded (nothing answered, or no such file)",
                self.method, self.url
            )
        } else {
            format!("{} {} answered HTTP {}", self.method, self.url, self.status)
        }
    }
}

/// What one reading of the page logged, sorted: the lines the episode
/// judges (the page's errors, and the game's failed requests as
/// [`FAILED_REQUEST`] lines) and the notes for the report.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Sorted {
    pub(super) console: Vec<String>,
    pub(super) notes: Vec<String>,
}

/// Sorts a reading's `errors` (as `listener.js` wrote them) and the game's
/// `failed` requests, given the scripts that could not load since the page
/// was loaded (`missing_scripts`: outside ones, and the game's own, whose
/// failure is a finding of its own already).
pub(super) fn sort(
    errors: &[String],
    failed: &[FailedRequest],
    missing_scripts: &[String],
) -> Sorted {
    let mut sorted = Sorted::default();
    for request in failed {
        sorted
            .console
            .push(format!("{FAILED_REQUEST}{}", request.describe()));
    }
    for error in errors {
        // The page's own report of a request already named (a rejected
        // `fetch`, an error message quoting the file) is the same cause.
        if failed
            .iter()
            .any(|f| error.contains(&f.url) || path_of(&f.url).is_some_and(|p| error.contains(p)))
        {
            continue;
        }
        // Data that did not come cannot be parsed: an error page read as
        // JSON is the failed request again.
        if error.contains("JSON") && failed.iter().any(|f| f.kind == "fetch" || f.kind == "xhr") {
            continue;
        }
        if let Some(script) = missing_scripts.first()
            && is_missing_name(error)
        {
            sorted.notes.push(format!(
                "`{}`, after {script} could not load",
                bare_message(error)
            ));
            continue;
        }
        sorted.console.push(error.clone());
    }
    sorted
}

/// A URL's path, when it is more than `/` (a file name a message may quote).
fn path_of(url: &str) -> Option<&str> {
    let rest = url.split_once("://")?.1;
    let path = &rest[rest.find('/')?..];
    (path.len() > 1).then_some(path)
}

/// An uncaught error of the kind a script that did not load causes: a
/// name it defined is not there (`ReferenceError: $ is not defined`), or
/// what it should have made is not (`TypeError: $(...).modal is not a
/// function`).
fn is_missing_name(error: &str) -> bool {
    let message = error
        .strip_prefix("Uncaught (in promise) ")
        .or_else(|| error.strip_prefix("Uncaught "))
        .or_else(|| error.strip_prefix("Unhandled promise rejection: "));
    message.is_some_and(|m| m.starts_with("ReferenceError: ") || m.starts_with("TypeError: "))
}

/// The message of an error line: its prefixes (`Uncaught `,
/// `console.error: `, `ReferenceError: `, ...) and the `(file.js:3)`
/// the listener adds taken off: "$ is not defined".
pub fn bare_message(line: &str) -> String {
    let mut text = line.trim();
    loop {
        let before = text;
        for prefix in [
            "Uncaught (in promise) ",
            "Uncaught ",
            "console.error: ",
            "Unhandled promise rejection: ",
        ] {
            if let Some(rest) = text.strip_prefix(prefix) {
                text = rest.trim_start();
            }
        }
        // `Error: x`, `TypeError: x`: the name of the error's class.
        if let Some((name, rest)) = text.split_once(": ")
            && name.ends_with("Error")
            && !name.contains(' ')
        {
            text = rest.trim_start();
        }
        if text == before {
            break;
        }
    }
    strip_place(text).to_owned()
}

/// `msg (game.js:12)` without its ` (game.js:12)`.
fn strip_place(text: &str) -> &str {
    if let Some(open) = text.rfind(" (")
        && let Some(inner) = text[open + 2..].strip_suffix(')')
        && let Some((_, line)) = inner.rsplit_once(':')
        && !line.is_empty()
        && line.chars().all(|c| c.is_ascii_digit())
    {
        return &text[..open];
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(url: &str, status: u16) -> FailedRequest {
        FailedRequest {
            method: "GET".into(),
            url: url.into(),
            status,
            kind: "fetch".into(),
        }
    }

    #[test]
    fn a_message_is_bare_of_its_prefixes_and_its_place() {
        for line in [
            "Uncaught Error: boom (game.js:12)",
            "console.error: Error: boom",
            "Uncaught (in promise) Error: boom",
            "boom",
        ] {
            assert_eq!(bare_message(line), "boom", "{line}");
        }
        assert_eq!(
            bare_message("Uncaught ReferenceError: $ is not defined (app.js:3)"),
            "$ is not defined"
        );
        assert_eq!(bare_message("Uncaught boom (soon)"), "boom (soon)");
    }

    #[test]
    fn a_failed_request_of_the_game_is_a_line_of_its_own_and_its_echoes_are_dropped() {
        let url = "http://127.0.0.1:4100/levels.json";
        let sorted = sort(
            &[
                "Unhandled promise rejection: Error: /levels.json answered 404".into(),
                "Unhandled promise rejection: SyntaxError: Unexpected token '<', \"<!DOCTYPE \"... is not valid JSON".into(),
                "Uncaught TypeError: x is null (game.js:3)".into(),
            ],
            &[failed(url, 404)],
            &[],
        );
        assert_eq!(
            sorted.console,
            [
                format!("{FAILED_REQUEST}GET {url} answered HTTP 404"),
                "Uncaught TypeError: x is null (game.js:3)".to_owned()
            ]
        );
        assert!(sorted.notes.is_empty());
    }

    #[test]
    fn an_error_after_an_outside_script_failed_is_a_note_naming_the_script() {
        let jquery = "https://code.jquery.com/jquery-3.7.1.min.js";
        let sorted = sort(
            &[
                "Uncaught ReferenceError: $ is not defined (app.js:1)".into(),
                "console.error: the level is corrupt".into(),
            ],
            &[],
            &[jquery.to_owned()],
        );
        assert_eq!(
            sorted.notes,
            [format!("`$ is not defined`, after {jquery} could not load")]
        );
        assert_eq!(sorted.console, ["console.error: the level is corrupt"]);
        // Without an outside script gone, the same error is the game's.
        let own = sort(
            &["Uncaught ReferenceError: $ is not defined".into()],
            &[],
            &[],
        );
        assert_eq!(own.console.len(), 1);
    }
}
